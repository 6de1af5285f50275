"""Issue 44, Round k44e: scripts.studies.transfer_sources' variants of the extra sources' settings compose as carb-train
configurations, and its per-precision level replaces a probe zero-shot's per-network ratio by one number per
precision (the median over the reference space)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


class _Ratio:
    """A stand-in probe zero-shot whose per-row ratio grows with FLOPs (the per-layer cost model's shape)."""

    def probe_ratio(self, X: pd.DataFrame, p: np.ndarray | None = None) -> np.ndarray:
        """Per row: 1 + FLOPs / 1e9, times 2 for bf16."""
        f = 1.0 + X["flops"].to_numpy(float) / 1e9
        return np.where(X["precision"].astype(str).to_numpy() == "bf16", 2.0 * f, f)


def test_level_probe_is_one_ratio_per_precision():
    from scripts.studies.transfer_sources import level_probe

    space = pd.DataFrame({"precision": ["fp32"] * 3 + ["bf16"] * 3, "flops": [1e9, 2e9, 5e9] * 2})
    zs = level_probe(_Ratio(), space)
    rows = pd.DataFrame({"precision": ["fp32", "fp32", "bf16", "fp16"], "flops": [0.0, 9e9, 4e9, 1e9]})
    got = zs.probe_ratio(rows)
    # fp32 median over the space: 1 + 2 = 3 whatever the row's FLOPs; bf16 2 x 3; a precision the space lacks: 1
    assert got.tolist() == pytest.approx([3.0, 3.0, 6.0, 1.0])


@pytest.mark.parametrize("variant", ["lean25_prior_off", "lean25_no_corr", "lean25_et_only", "lean25_boost_only",
                                     "prior_mostly"])
def test_k44e_variants_compose(variant):
    from carb.commands.cli import compose, to_dict
    from scripts.studies.transfer_sources import VARIANTS

    cfg = compose("train", VARIANTS[variant])
    model = to_dict(cfg.model)
    assert model["specialists"]["lgbm"]["n_estimators"] in (1, 25)
    if variant == "lean25_prior_off":
        assert to_dict(cfg.prior)["enabled"] is False
    if variant == "lean25_et_only":
        assert model["members"] == ["et"]
