"""The design layer: what a CNN configuration is (:mod:`~carb.design.arch`), which configurations a
design space holds (:mod:`~carb.design.space`), what each costs before it runs
(:mod:`~carb.design.features`), and the torch module it builds to (:mod:`~carb.design.resnet`, the only
module here that imports torch, and only when imported itself)."""
