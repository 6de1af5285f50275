"""The design layer: what a CNN configuration is (:mod:`~carb.design.arch`), which configurations a
design space holds (:mod:`~carb.design.space`; as a frame of knob columns for grids of a million:
:mod:`~carb.design.candidates`), what each costs before it runs
(:mod:`~carb.design.features`, :mod:`~carb.design.shapes`), and the torch module it builds to
(:mod:`~carb.design.resnet`); all three read the network's layers from its one walk
(:mod:`~carb.design.layers`). Torch is imported only by ``resnet`` and by the fvcore reference path of ``features`` (inside the functions that build a model)."""
