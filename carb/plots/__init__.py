"""Every figure CARB draws, one module per command that draws. Figures are built with matplotlib's
object API on the Agg canvas (no ``matplotlib.use``, no pyplot state) and returned to the caller, which
saves or logs them."""
