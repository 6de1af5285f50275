"""The round zd43 study helpers (scripts/studies/zoo_cpu_densenet_lift.py, zoo_cpu_xeon_families.py --drop-feature):
the path contributions add up to the forest's prediction, and a dropped feature leaves the correction only."""
from __future__ import annotations

import numpy as np
import pytest

from carb.model.ensemble import LeanExtraTrees
from scripts.studies.zoo_cpu_densenet_lift import tree_paths


def test_tree_paths_sum_to_the_prediction_and_credit_the_used_feature():
    """Synthetic rows (a test): y depends on column 0 only; the contributions plus the mean root value equal the
    forest's prediction row by row, and column 0 carries nearly all of them."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(200, 3))
    y = 2.0 * X[:, 0]
    forest = LeanExtraTrees(n_estimators=10, min_samples_leaf=2, random_state=0).fit(X, y)
    c = tree_paths(forest, X[:20])
    root = np.mean([e.tree_.value[0, 0, 0] for e in forest.estimators_])
    assert np.allclose(root + c.sum(axis=1), forest.predict(X[:20]), atol=1e-6)
    assert np.abs(c[:, 0]).sum() > 20 * np.abs(c[:, 1:]).sum()


def test_drop_features_leaves_the_stage_columns_only(monkeypatch):
    """--drop-feature removes a column from every stage's design columns, nothing else of the call."""
    from carb.model.cascade import CarbCascade
    from scripts.studies import zoo_cpu_xeon_families as fam

    seen = {}
    monkeypatch.setattr(CarbCascade, "_fit_stage", lambda self, t, cols, *a, **k: seen.update(cols=cols, a=a))
    fam.drop_features(["bytes_concat_MB"])
    CarbCascade._fit_stage(None, "latency_ms", ["flops", "bytes_concat_MB", "n_ops"], 1, 2)
    assert seen == {"cols": ["flops", "n_ops"], "a": (1, 2)}
    with pytest.raises(TypeError):
        CarbCascade._fit_stage(None, "latency_ms")
