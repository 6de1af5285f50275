"""The design layer: what a CNN configuration is (:mod:`~carb.design.arch`), which configurations a
design space holds (:mod:`~carb.design.space`; as a frame of knob columns for grids of a million:
:mod:`~carb.design.candidates`), what each costs before it runs
(:mod:`~carb.design.features`, :mod:`~carb.design.shapes`), and the torch module it builds to
(:mod:`~carb.design.resnet`); all three read the network's layers from its one walk
(:mod:`~carb.design.layers`). Any other network (a torchvision / timm name, :mod:`~carb.design.zoo`, or an
``nn.Module``) gets its layer table from a meta-device trace (:mod:`~carb.design.trace`). Torch is imported
only by ``resnet``, and inside functions by the fvcore reference path of ``features``, by ``zoo`` and by
``trace``; torchvision and timm only through ``zoo``. Which network a row names (a ResNet knob set or a zoo model,
its identity columns and keys) is :mod:`~carb.design.identity`'s: no layer above names a ResNet column."""
