"""Layer GEMM shapes (carb.design.shapes) and the layer roofline prior built on them (issue 11): the
sums agree with the closed-form FLOPs and parameters, scale with batch as they must, and a prior on
them recovers a known thin-layer cost law and extrapolates it to larger batches where the aggregate
roofline cannot."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.design.arch import ArchConfig
from carb.design.features import grid_features
from carb.design.shapes import GEMM_TERMS, PER_IMAGE_TERMS, gemm_terms
from carb.model.physics import LayerRooflinePrior, RooflinePrior, make_prior


def frame(configs) -> pd.DataFrame:
    return grid_features(list(configs))


def test_resnet50_terms_match_flops_and_parameters():
    g = frame([ArchConfig("bottleneck", 50, input_size=224, batch_size=1)])
    t = gemm_terms(g).iloc[0]
    # fvcore counts convs + linear (= MNK) plus batch norm (2 per element) and the pool
    assert 0.97 < t["gemm_MNK"] / g["flops"].iloc[0] < 1.0
    # weights of the convs + classifier = parameters less batch-norm affine and classifier bias
    assert 0.99 < t["gemm_NK"] / g["params"].iloc[0] < 1.0
    assert t["n_ops"] > g["n_conv"].iloc[0] and t["elementwise"] > 0


def test_batch_scales_per_image_terms_only():
    c = ArchConfig("basic", 20, 0.5, 64, 4, "bf16", False)
    a, b = gemm_terms(frame([c])).iloc[0], gemm_terms(frame([c.replace(batch_size=12)])).iloc[0]
    for term in GEMM_TERMS:
        expect = 3.0 if term in PER_IMAGE_TERMS else 1.0
        assert b[term] / a[term] == pytest.approx(expect), term


def test_thin_layers_have_more_memory_terms_per_mac():
    thin, wide = (gemm_terms(frame([ArchConfig("basic", 20, w, 64, 8)])).iloc[0] for w in (0.25, 2.0))
    assert thin["gemm_MK"] / thin["gemm_MNK"] > 4 * wide["gemm_MK"] / wide["gemm_MNK"]


def test_missing_knobs_name_the_columns():
    from carb.errors import DatasetError

    with pytest.raises(DatasetError, match="block"):
        gemm_terms(pd.DataFrame({"depth": [20], "batch_size": [1]}))


def thin_layer_rows(seed: int = 0) -> pd.DataFrame:
    """Real configurations whose latency follows a GEMM efficiency law (x 2 % noise):
    ``0.2 + MNK / 5e7 * (1 + 24 / N_eff)`` where thin layers pay more per multiply-add, written in its
    expanded form on the layer sums: MNK / 5e7 + 24 * MK / 5e7."""
    rng = np.random.default_rng(seed)
    cfgs = {}
    while len(cfgs) < 260:
        c = ArchConfig("basic", int(rng.choice([8, 14, 20, 32])), float(rng.choice([0.25, 0.5, 1.0, 2.0])),
                       int(rng.choice([32, 64, 96])), int(rng.choice([1, 2, 4, 8, 16, 32, 64])), "fp32",
                       bool(rng.integers(2)))
        cfgs[c.config_id] = c
    df = frame(cfgs.values())
    g = gemm_terms(df)
    df["latency_ms"] = (0.2 + g["gemm_MNK"] / 5e7 + 24 * g["gemm_MK"] / 5e7) * rng.lognormal(0, 0.02, len(df))
    return df


def test_layer_prior_extrapolates_a_thin_layer_law_to_larger_batches():
    df = thin_layer_rows()
    small, large = df[df["batch_size"] <= 8], df[df["batch_size"] > 8]
    y = large["latency_ms"].to_numpy()

    def r2(p: np.ndarray) -> float:
        return 1 - ((y - p) ** 2).sum() / ((y - y.mean()) ** 2).sum()

    layer = make_prior("latency_ms").fit(small, small["latency_ms"])
    agg = RooflinePrior().fit(small, small["latency_ms"])
    assert isinstance(layer, LayerRooflinePrior) and layer.form_ == "layers"
    assert all(v >= 0 for v in layer.coef_.values())
    assert r2(layer.predict(large)) > 0.98
    assert r2(layer.predict(large)) > r2(agg.predict(large)) + 0.02
    assert layer.train_mape_ < 0.05 < agg.train_mape_
    # monotone in batch: twice the batch never costs less
    assert (layer.predict(large.assign(batch_size=large["batch_size"] * 2)) >= layer.predict(large)).all()


def test_layer_prior_falls_back_to_aggregate_without_knobs():
    df = thin_layer_rows()
    bare = df.drop(columns=["block", "depth"])
    p = make_prior("latency_ms").fit(bare, bare["latency_ms"])
    assert p.form_ == "aggregate" and "block" in p.form_reason_ and "per_flop_fp32" in p.coef_
    assert p.to_dict()["form"] == "aggregate"
