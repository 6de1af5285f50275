"""The estimators: per-target blended specialists (:mod:`~carb.model.ensemble`), the feature encoding
(:mod:`~carb.model.encoding`), regime correctors (:mod:`~carb.model.correctors`), the memory -> energy ->
latency cascade (:mod:`~carb.model.cascade`), the baselines (:mod:`~carb.model.baselines`), presets from
config sections (:mod:`~carb.model.presets`) and Optuna tuning helpers (:mod:`~carb.model.tuning`)."""
