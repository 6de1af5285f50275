"""The data layer: the dataset schema (:mod:`~carb.data.schema`), row regimes and tiers
(:mod:`~carb.data.tiers`), the stratified split (:mod:`~carb.data.split`), reading and writing
(:mod:`~carb.data.io`), importers of third-party measurements (:mod:`carb.data.importers`), and the
shipped data files with their provenance (this folder)."""
