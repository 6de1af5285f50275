"""Analyses of datasets and fitted models: evaluation with baselines and leave-out splits
(:mod:`~carb.analysis.evaluate`), design-space screening (:mod:`~carb.analysis.screening`) and workload
characterization (:mod:`carb.analysis.characterize`). Pure functions on frames: no Hydra, no MLflow."""
