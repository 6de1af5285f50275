"""The cascade on timm's files reads the graph timm timed (issue 43): a file whose published parameter counts
are a reparameterisable network's folded graph (timm's ``benchmark.py --reparam``) gives zoo rows with the
folded graph's features, a file with the plain counts the plain ones, decided by the one rule
``ZooLatencyModel``'s features use (:func:`carb.data.importers.timm_zoo.published_reparam`, as
:func:`~carb.data.importers.timm_zoo.with_trace`); a cascade fitted on folded rows predicts names on the folded
graph. The benchmark frame and the trace table are made here from real traces (latency from a cost law,
never a measurement)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.data.importers.timm_zoo import ZOO_COLUMNS, as_zoo_dataset, published_reparam, with_trace
from carb.design.zoo_features import zoo_summary

#: MobileOne-S1 and RepVGG-A0 fold (fewer parameters once folded), ResNets do not.
MODELS = ("mobileone_s1", "repvgg_a0", "resnet18", "resnet34")
FOLDS = ("mobileone_s1", "repvgg_a0")
SIZES = (160, 224)
BATCHES = (32, 128, 256)


def _trace_table(path) -> None:
    """A trace table like ``carb/data/timm-zoo-trace.parquet``: each (model, size) on the plain graph
    (``reparam`` False) and on the folded one (``reparam`` True, ``folded`` whether anything folded)."""
    rows = []
    for m in MODELS:
        for s in SIZES:
            for graph in (False, True):
                summ = zoo_summary(f"timm:{m}", s, "fp32", graph)
                rows.append({"model": m, "input_size": s, "params": float(summ["params"]),
                             "flops": float(summ["flops"]), "reparam": graph, "folded": graph and m in FOLDS})
    pd.DataFrame(rows).to_parquet(path, index=False)


def _bench() -> pd.DataFrame:
    """Two devices of a timm-like benchmark: ``Folded GPU`` (file ``...-folded.csv``) publishes each network's
    folded parameter count, ``Plain GPU`` the plain one; latency ``0.1 ms + batch x GMACs / 4`` of the graph
    its file says."""
    rows = []
    for dev, graph in (("Folded GPU", True), ("Plain GPU", False)):
        for m in MODELS:
            for s in SIZES:
                summ = zoo_summary(f"timm:{m}", s, "fp16", graph)
                gmacs = summ["flops"] / 1e9
                for b in BATCHES:
                    rows.append({"zoo_id": f"{dev}-{m}-{s}-{b}", "model": m, "family": m[:4], "input_size": s,
                                 "batch_size": b, "precision": "fp16", "timm_precision": "amp_fp16",
                                 "device_name": dev, "device_kind": "gpu", "memory_layout": "nchw",
                                 "compile": "eager", "torch_version": "2.9.1", "cuda_version": "12.8",
                                 "latency_ms": 0.1 + b * gmacs / 4.0, "samples_per_sec": np.nan,
                                 "params": float(round(summ["params"], -4)), "gmacs_per_image": gmacs,
                                 "macts_M_per_image": np.nan, "source_file": f"{dev.split()[0].lower()}.csv",
                                 "source_row": f"{dev}:{len(rows) + 2}", "main": True, "missing_reason": None})
    return pd.DataFrame(rows, columns=list(ZOO_COLUMNS))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "trace.parquet"
    _trace_table(path)
    return _bench(), path


def test_folded_features_exactly_where_the_published_params_say(made):
    bench, path = made
    folded = as_zoo_dataset("Folded GPU", bench, trace_path=path)
    plain = as_zoo_dataset("Plain GPU", bench, trace_path=path)
    model = folded["model_name"].str.removeprefix("timm:")
    assert (folded["reparam"] == model.isin(FOLDS)).all()   # the folded graph only where something folds
    assert not plain["reparam"].any()
    for df, graph in ((folded, True), (plain, False)):
        for (m, s), g in df.groupby(["model_name", "input_size"]):
            want = zoo_summary(m, int(s), "fp16", graph and m.removeprefix("timm:") in FOLDS)
            assert (g["params"] == want["params"]).all(), (m, s, graph)
            assert np.allclose(g["flops"], want["flops"] * g["batch_size"]), (m, s, graph)
    # the folded graph is another network: MobileOne-S1 and RepVGG-A0 lose parameters when folded
    for m in FOLDS:
        a = folded.loc[folded["model_name"] == f"timm:{m}", "params"].iloc[0]
        b = plain.loc[plain["model_name"] == f"timm:{m}", "params"].iloc[0]
        assert a < b, m


def test_one_decision_for_the_cascade_rows_and_zoo_latency_model(made):
    """The rows the cascade trains on and ``ZooLatencyModel``'s joined features take the same graph per row."""
    bench, path = made
    rows = bench[bench["latency_ms"].notna()].reset_index(drop=True)
    joined = with_trace(rows, path)
    assert (published_reparam(rows, path) == joined["tr_reparam"].to_numpy(bool)).all()
    for dev in ("Folded GPU", "Plain GPU"):
        mine = rows["device_name"] == dev
        assert (as_zoo_dataset(dev, bench, trace_path=path)["reparam"].to_numpy(bool)
                == joined.loc[mine, "tr_reparam"].to_numpy(bool)).all()
    assert published_reparam(rows, path, reparam="never").sum() == 0
    assert published_reparam(rows, path / "missing.parquet").sum() == 0   # no trace table: the plain graph


def test_cascade_fitted_on_folded_rows_predicts_names_on_the_folded_graph(made):
    from carb.analysis.predictor import Predictor
    from carb.model.cascade import CarbCascade
    from carb.model.cascade_data import with_graph, with_zoo_kinds

    bench, path = made
    small = {"xgb": {"n_estimators": 10, "max_depth": 2}, "lgbm": {"n_estimators": 10, "num_leaves": 5},
             "et": {"n_estimators": 5}}
    fits = {}
    for dev in ("Folded GPU", "Plain GPU"):
        df = as_zoo_dataset(dev, bench, trace_path=path)
        fits[dev] = CarbCascade(specialists=small, oof_folds=2, probe_estimators=10, n_jobs=1).fit(df, df[["latency_ms"]])
    assert fits["Folded GPU"].zoo_reparam_ and not fits["Plain GPU"].zoo_reparam_
    names = ["timm:mobileone_s1", "timm:resnet18"]
    out = {dev: Predictor(c, "models:/graph-test@champion").predict(names, batch_size=64, precision="fp16",
                                                                     input_size=224, features=True)
           for dev, c in fits.items()}
    assert out["Folded GPU"]["params"].iloc[0] == zoo_summary("timm:mobileone_s1", 224, "fp16", True)["params"]
    assert out["Plain GPU"]["params"].iloc[0] == zoo_summary("timm:mobileone_s1", 224, "fp16", False)["params"]
    assert out["Folded GPU"]["params"].iloc[1] == out["Plain GPU"]["params"].iloc[1]   # nothing to fold
    # a frame featurized on the plain graph is read on the model's: every stored layer column replaced
    knobs = pd.DataFrame({"model_name": names, "input_size": 224, "batch_size": 64, "precision": "fp16"})
    from carb.design.zoo_inputs import zoo_features_frame

    plain_frame = zoo_features_frame(knobs).drop(columns="refused")
    feats = fits["Folded GPU"].feature_names_
    read = with_zoo_kinds(with_graph(plain_frame, True), feats)
    want = zoo_features_frame(knobs.assign(reparam=True))
    for c in ("params", "flops", "n_ops", "flops_conv_regular", "weights_conv_MB"):
        if c in read.columns:
            assert np.allclose(read[c].to_numpy(float), want[c].to_numpy(float)), c
    assert read["flops"].iloc[0] < plain_frame["flops"].iloc[0]


def test_a_row_without_an_input_size_joins_no_graph_instead_of_a_traceback(made):
    """A benchmark row whose ``input_size`` is missing (NaN; float sizes beside it) joins no trace features
    (NaN, ``tr_reparam`` False) and the other rows join theirs: the graph decision does not cast it to int
    (review rev52: ``IntCastingNaNError`` before)."""
    bench, path = made
    rows = bench[bench["device_name"] == "Folded GPU"].head(4).reset_index(drop=True)
    rows["input_size"] = rows["input_size"].astype(float)
    rows.loc[0, "input_size"] = np.nan
    joined = with_trace(rows, path)
    assert not joined["tr_reparam"].iloc[0] and np.isnan(joined["tr_flops"].iloc[0])
    assert np.isfinite(joined["tr_flops"].iloc[1:].to_numpy(float)).all()
    assert (published_reparam(rows, path)[1:] == with_trace(rows.iloc[1:], path)["tr_reparam"].to_numpy(bool)).all()
