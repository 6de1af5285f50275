"""timm's published zoo benchmark: the importer (real slices and bad files), the accuracy join's tag
resolution, the leave-one-family-out splitter and intervals (no leak), the baselines on known laws."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb.analysis.zoo_eval import (evaluate_device, family_intervals, lofo_predictions, lofo_splits,
                                    scored_families)
from carb.data.importers.timm_zoo import (ZOO_COLUMNS, import_benchmark_files, load_zoo_bench, model_family,
                                          parse_file_name, read_benchmark_file)
from carb.data.timm_accuracy import join_top1, resolve_tags, top1_table
from carb.errors import DatasetError
from carb.model.zoo_latency import FlopsLogLog, HiddenJoulesRegression, ZooLatencyModel
from tests.synthetic import zoo_frame

DATA = Path(__file__).parent / "data" / "timm-zoo"
ROOT = Path(__file__).resolve().parents[1]
GPU_FILE = DATA / "benchmark-infer-amp-nchw-pt291-cu128-4090.csv"


def test_file_names_parse():
    m = parse_file_name("benchmark-infer-amp-nchw-pt291-cu130-pro6000maxq-dynamo.csv")
    assert m == {"timm_precision": "amp_fp16", "precision": "fp16", "memory_layout": "nchw",
                 "torch_version": "2.9.1", "cuda_version": "13.0", "device_name": "RTX PRO 6000 Blackwell Max-Q",
                 "device_kind": "gpu", "compile": "dynamo"}
    cpu = parse_file_name("benchmark-infer-fp32-nchw-pt240-cpu-i9_10940x-dynamo.csv")
    assert (cpu["device_kind"], cpu["cuda_version"], cpu["precision"]) == ("cpu", None, "fp32")
    assert parse_file_name("benchmark-infer-amp_bf16-nhwc-pt113-cu117-rtx3090.csv")["torch_version"] == "1.13"
    with pytest.raises(DatasetError, match="not a timm benchmark name"):
        parse_file_name("benchmark-infer-amp-nchw-pt291-cu128-a100.csv")


def test_real_slice_imports_every_model():
    df = read_benchmark_file(GPU_FILE)
    raw = pd.read_csv(GPU_FILE)
    assert list(df.columns) == list(ZOO_COLUMNS) and len(df) == len(raw) == 15
    assert set(df["device_name"]) == {"RTX 4090"} and set(df["precision"]) == {"fp16"}
    # latency per batch is the file's step time, which equals 1000 * batch / samples_per_sec
    assert np.allclose(df["latency_ms"], raw["infer_step_time"])
    assert np.allclose(df["latency_ms"], 1000 * df["batch_size"] / df["samples_per_sec"], rtol=0.01)
    row = df[df["model"] == "efficientvit_m0"].iloc[0]
    assert (row["family"], row["params"], row["gmacs_per_image"], row["macts_M_per_image"]) == \
        ("efficientvit", 2.33e6, 0.08, 0.91)
    assert df["source_row"].iloc[0] == f"{GPU_FILE.name}:2"


def test_unmeasured_rows_and_missing_features_are_nan_with_reason():
    t = import_benchmark_files(sorted(DATA.glob("benchmark-*.csv")))
    eva = t[t["model"] == "eva02_enormous_patch14_clip_224"].iloc[0]
    assert np.isnan(eva["latency_ms"]) and "not measured" in eva["missing_reason"]
    cpu = t[t["device_kind"] == "cpu"]
    assert cpu["gmacs_per_image"].isna().all() and cpu["missing_reason"].str.contains("gmacs").all()
    # the main set: newest eager nchw amp per GPU; the CPU's only (dynamo) file
    assert set(t.loc[t["main"], "source_file"]) == {p.name for p in DATA.glob("benchmark-*.csv")}


@pytest.mark.parametrize("content,match", [
    (b"", "is empty"),
    (b"model,infer_img_size\n", "missing column"),
    (b"model,infer_img_size,infer_batch_size,infer_samples_per_sec,infer_step_time,param_count\n", "no rows"),
    (b"model,infer_img_size,infer_batch_size,infer_samples_per_sec,infer_step_time,param_count\n"
     b"resnet50,224,abc,10,5,25.56\n", r"4090.csv:2: infer_batch_size='abc' is not a number"),
    (b"model,infer_img_size,infer_batch_size,infer_samples_per_sec,infer_step_time,param_count\n"
     b"resnet50,224,8,10,0,25.56\n", "must be > 0"),
])
def test_bad_files_are_one_line(tmp_path, content, match):
    p = tmp_path / GPU_FILE.name
    p.write_bytes(content)
    with pytest.raises(DatasetError, match=match) as e:
        read_benchmark_file(p)
    assert "\n" not in str(e.value)


def test_build_script_zero_byte_csv_exits_2(tmp_path):
    (tmp_path / GPU_FILE.name).write_bytes(b"")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "data" / "timm_zoo.py"), "--source", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "is empty" in r.stderr and "Traceback" not in r.stderr


def test_family_is_leading_letters():
    assert [model_family(m) for m in ("resnet50d", "tf_efficientnet_b0", "vit_base_patch16_224.augreg_in1k",
                                      "convnextv2_nano")] == ["resnet", "tf", "vit", "convnextv"]


def test_shipped_table_has_five_devices_and_all_families():
    z = load_zoo_bench()
    assert z["device_name"].nunique() == 5 and (z.groupby("device_name")["model"].nunique() > 1000).all()
    assert z["family"].nunique() > 100 and z["main"].all()


def test_tag_resolution_default_then_best():
    results = pd.read_csv(DATA / "results-imagenet.csv")
    tags = pd.DataFrame({"arch": ["resnet50", "vit_base_patch16_224"],
                         "default_tag": ["a1_in1k", "nosuch_in1k"]})   # the vit default has no result row
    t = resolve_tags(results, tags)
    r50 = t[t["model"] == "resnet50"]
    assert set(r50["tag"]) == {"a1_in1k"} and set(r50["tag_rule"]) == {"default"}
    assert sorted(r50["eval_img_size"]) == [224, 288]
    assert r50.set_index("eval_img_size").loc[224, "top1"] == pytest.approx(0.80382)   # a fraction
    vit = t[t["model"] == "vit_base_patch16_224"]
    assert set(vit["tag"]) == {"augreg2_in21k_ft_in1k"} and set(vit["tag_rule"]) == {"best"}
    frame = pd.DataFrame({"model": ["resnet50", "resnet50", "resnet50.tv_in1k", "nosuchnet"],
                          "input_size": [224, 160, 288, 224]})
    j = join_top1(frame, t)
    assert j["top1"].iloc[0] == pytest.approx(0.80382) and np.isnan(j["top1"].iloc[1])
    assert j["top1"].iloc[2] == pytest.approx(0.8124) and np.isnan(j["top1"].iloc[3])
    near = join_top1(frame, t, same_size=False)
    assert near["top1"].iloc[1] == pytest.approx(0.80382) and near["top1_eval_img_size"].iloc[1] == 224
    with pytest.raises(DatasetError, match="percentage"):
        resolve_tags(results.assign(top1=results["top1"] * 10), tags)


def test_shipped_accuracy_table_is_fractions():
    t = top1_table()
    assert t["top1"].between(0.3, 0.95).all() and t["model"].nunique() > 800
    assert set(t["tag_rule"]) <= {"default", "best"}


def test_lofo_splits_hold_the_family_out():
    df = zoo_frame({"a": 6, "b": 5, "c": 7, "d": 3})
    fams = scored_families(df, 5)
    assert fams == ["c", "a", "b"]
    seen = []
    for f, train, test in lofo_splits(df, fams):
        assert set(df.loc[test, "family"]) == {f} and f not in set(df.loc[train, "family"])
        assert "d" in set(df.loc[train, "family"])       # small families still train
        seen.append(f)
    assert seen == fams


def test_intervals_never_calibrate_on_the_held_out_family():
    df = zoo_frame({"a": 6, "b": 6, "c": 6, "d": 6}, noise=0.2, seed=3)
    pred = lofo_predictions(df, scored_families(df), {"b1": FlopsLogLog})
    a = family_intervals(pred, "pred_b1")
    wild = pred.copy()
    wild.loc[wild["family"] == "a", "latency_ms"] *= 50     # family a's own errors change ...
    b = family_intervals(wild, "pred_b1")
    at = (pred["family"] == "a").to_numpy()
    assert np.allclose(a.loc[at, "hi_ms"], b.loc[at, "hi_ms"])   # ... a's interval does not
    assert not np.allclose(a.loc[~at, "hi_ms"], b.loc[~at, "hi_ms"])  # the others' do (a calibrates them)


def test_lofo_fits_never_see_the_held_out_family():
    df = zoo_frame({"a": 6, "b": 6, "c": 6})
    seen = []

    class Spy(FlopsLogLog):
        def fit(self, frame):
            seen.append(set(frame["family"]))
            return super().fit(frame)

    pred = lofo_predictions(df, ["a", "b", "c"], {"spy": Spy})
    assert seen == [{"b", "c"}, {"a", "c"}, {"a", "b"}] and pred["pred_spy"].notna().all()


def test_baselines_recover_known_laws():
    flops = zoo_frame({f: 6 for f in "abcd"}, law="flops")
    b1 = FlopsLogLog().fit(flops)
    assert b1.coef_[1] == pytest.approx(0.9) and np.exp(b1.coef_[0]) == pytest.approx(0.02)
    assert np.allclose(b1.predict(flops), flops["latency_ms"])
    hj_rows = zoo_frame({f: 8 for f in "abcde"}, law="hj", seed=1)
    hj = HiddenJoulesRegression().fit(hj_rows)
    assert hj.coef_[1:] == pytest.approx([0.2, 0.5, 0.4])
    # B1 cannot follow a law that also depends on params and activations
    assert np.abs(FlopsLogLog().fit(hj_rows).predict(hj_rows) / hj_rows["latency_ms"] - 1).max() > 0.05


def test_evaluation_on_a_known_law_scores_hj_and_carb_near_exact():
    df = zoo_frame({f: 8 for f in "abcdef"}, law="hj", seed=2, noise=0.01)
    table, s = evaluate_device(df, models={"b1": FlopsLogLog, "hj": HiddenJoulesRegression,
                                           "carb": lambda: ZooLatencyModel(n_estimators=20)})
    assert s["families"] == 6 and len(table) == 6
    assert (table["hj_mape_pct"] < 3).all() and (table["carb_mape_pct"] < 10).all()
    assert s["b1_pooled_pct"] > s["hj_pooled_pct"]
    assert 0 <= s["coverage"] <= 1 and s["hi_lo"] >= 1


def test_census_join_feeds_the_zoo_model(tmp_path):
    from carb.data.importers.timm_zoo import with_census
    from carb.model.zoo_latency import CENSUS_KINDS

    df = zoo_frame({f: 6 for f in "abc"}, seed=4)
    assert with_census(df, tmp_path / "absent.csv") is df
    rng = np.random.default_rng(0)
    cen = pd.DataFrame({"model": df["model"], "census_error": "",
                        **{f"n_{k}": rng.integers(1, 50, len(df)) for k in CENSUS_KINDS},
                        **{f"params_{k}": rng.integers(1, 1000, len(df)) for k in CENSUS_KINDS}})
    cen.loc[0, "census_error"] = "RuntimeError: cannot build"
    cen.to_csv(tmp_path / "census.csv", index=False)
    joined = with_census(df, tmp_path / "census.csv")
    assert len(joined) == len(df) and np.isnan(joined["n_leaf"].iloc[0]) and joined["n_leaf"].iloc[1:].notna().all()
    m = ZooLatencyModel(n_estimators=10).fit(joined)
    assert "log1p_n_conv_dw" in m.features_ and "share_params_attn" in m.features_
    assert ZooLatencyModel(n_estimators=10, census=False).fit(joined).features_[-1] == "log_params_per_gmac"


def test_trace_features_join_feed_the_model_and_missing_rows_fall_back(tmp_path):
    from carb.data.importers.timm_zoo import with_trace
    from carb.model.zoo_latency import TRACE_FEATURES, log_features
    from tests.synthetic import zoo_trace_frame

    df = zoo_frame({f: 30 for f in "abcdefgh"}, seed=5)
    assert with_trace(df, tmp_path / "absent.parquet") is df
    tr = zoo_trace_frame(df, seed=1)
    # a law on the launch count, which no published feature carries
    n_ops = df["model"].map(dict(zip(tr["model"], tr["n_ops"]))).to_numpy(float)
    df["latency_ms"] *= (n_ops / 100) ** 0.6
    tr.loc[0, "refused"] = "model 'a_0': needs tensor values"
    tr = tr.drop(index=1)                                  # a_1 not traced yet
    tr.to_parquet(tmp_path / "trace.parquet", index=False)
    joined = with_trace(df, tmp_path / "trace.parquet")
    assert len(joined) == len(df) and joined["tr_flops"].iloc[:2].isna().all()
    assert joined["tr_flops"].iloc[2:].notna().all()
    feats = log_features(joined)
    assert set(TRACE_FEATURES) <= set(feats.columns) and feats[list(TRACE_FEATURES)].iloc[2:].notna().all().all()
    test = joined["family"].isin(["g", "h"]).to_numpy()
    train = joined[~test]
    err = {}
    for use in (True, False):   # the correction unbounded: the launch-count law is the correction's alone here
        m = ZooLatencyModel(n_estimators=150, min_child_samples=5, trace=use, margin=None).fit(train)
        assert ("tr_log_n_ops" in m.features_) == use
        pred = m.predict(joined)
        assert np.isfinite(pred).all()                     # the untraced rows a_0, a_1 predict too
        err[use] = float(np.mean(np.abs(pred[test] / joined["latency_ms"].to_numpy()[test] - 1)))
    assert err[True] < 0.7 * err[False]
    tb = ZooLatencyModel(n_estimators=150, min_child_samples=5, trace_base=True, margin=None).fit(train)
    assert tb.tbase_ is not None and np.isfinite(tb.predict(joined)).all()
    err_tb = float(np.mean(np.abs(tb.predict(joined)[test] / joined["latency_ms"].to_numpy()[test] - 1)))
    assert err_tb < 0.7 * err[False]
    # the baselines never read the trace
    hj = HiddenJoulesRegression().fit(train)
    assert np.allclose(hj.predict(joined), HiddenJoulesRegression().fit(df[~test]).predict(df))


def test_trace_join_takes_the_graph_each_file_was_run_on(tmp_path):
    """A file whose published parameter counts are the folded graph's gets the reparameterised trace, a
    file with the plain counts the plain one (timm's benchmark with and without ``--reparam``); a model
    that does not fold keeps its one trace; 'never' / 'always' force the graph; a bad value is one line."""
    from carb.data.importers.timm_zoo import with_trace
    from tests.synthetic import zoo_trace_frame

    df = zoo_frame({"rep": 6, "plain": 6}, seed=3)
    tr = zoo_trace_frame(df, seed=2)
    tr["params"] = np.where(tr["model"].str.startswith("rep"), 5_290_000, 1_000_000)
    tr["reparam"], tr["folded"] = False, False
    fused = tr[tr["model"].str.startswith("rep")].assign(reparam=True, folded=True, params=2_080_000,
                                                          n_ops=tr["n_ops"] // 7)
    not_folded = tr[~tr["model"].str.startswith("rep")].assign(reparam=True, folded=False)
    pd.concat([tr, fused, not_folded]).to_parquet(tmp_path / "trace.parquet", index=False)
    a = df.assign(source_file="a-reparam.csv", params=np.where(df["family"] == "rep", 2.08e6, 1e6))
    b = df.assign(source_file="b-plain.csv", params=np.where(df["family"] == "rep", 5.29e6, 1e6))
    joined = with_trace(pd.concat([a, b], ignore_index=True), tmp_path / "trace.parquet")
    rep = joined["family"] == "rep"
    in_a = joined["source_file"] == "a-reparam.csv"
    assert joined.loc[rep & in_a, "tr_reparam"].all() and not joined.loc[~(rep & in_a), "tr_reparam"].any()
    assert (joined.loc[rep & in_a, "tr_params"] == 2_080_000).all()
    assert (joined.loc[rep & ~in_a, "tr_params"] == 5_290_000).all()
    n_plain = joined.loc[rep & ~in_a, "tr_n_ops"].to_numpy()
    assert (joined.loc[rep & in_a, "tr_n_ops"].to_numpy() == n_plain // 7).all()
    assert (joined.loc[~rep, "tr_params"] == 1_000_000).all()
    never = with_trace(a, tmp_path / "trace.parquet", reparam="never")
    always = with_trace(b, tmp_path / "trace.parquet", reparam="always")
    assert (never.loc[never["family"] == "rep", "tr_params"] == 5_290_000).all()
    assert (always.loc[always["family"] == "rep", "tr_params"] == 2_080_000).all()
    with pytest.raises(DatasetError, match=r"^with_trace: reparam='sometimes' is not allowed; allowed: "):
        with_trace(a, tmp_path / "trace.parquet", reparam="sometimes")


def test_trace_join_counts_state_derived_work_once_per_batch(tmp_path):
    """A trace row's ``state_<column>`` (the state-derived operations' part of a batch-1 count: bias gathers)
    is spread over the row's batch: per image ``c - state + state / b``; columns without a part and the
    ``state_*`` columns themselves are not joined as such."""
    from carb.data.importers.timm_zoo import with_trace
    from tests.synthetic import zoo_trace_frame

    df = zoo_frame({"beit": 6, "vit": 6}, seed=4)
    df["batch_size"] = np.where(np.arange(len(df)) % 2, 1, 256)
    tr = zoo_trace_frame(df, seed=3)
    beit = tr["model"].str.startswith("beit")
    tr["state_bytes_copy"] = np.where(beit, 0.4 * tr["bytes_copy"], 0.0)
    tr.to_parquet(tmp_path / "trace.parquet", index=False)
    joined = with_trace(df, tmp_path / "trace.parquet")
    assert not [c for c in joined.columns if c.startswith("tr_state_")]
    full = df["model"].map(dict(zip(tr["model"], tr["bytes_copy"]))).to_numpy(float)
    b = df["batch_size"].to_numpy(float)
    is_beit = df["family"].eq("beit").to_numpy()
    assert is_beit.any() and (~is_beit).any()
    expect = np.where(is_beit, full * 0.6 + full * 0.4 / b, full)
    assert np.allclose(joined["tr_bytes_copy"].to_numpy(float), expect)
    assert (joined.loc[is_beit & (b == 256), "tr_bytes_copy"].to_numpy() < 0.61 * full[is_beit & (b == 256)]).all()
    assert np.allclose(joined["tr_flops"], df["model"].map(dict(zip(tr["model"], tr["flops"]))))


def _additive_frame(seed: int = 0) -> pd.DataFrame:
    """Zoo rows with trace columns and a known additive law per image: 0.01 ms per regular-conv GFLOP,
    0.2 per depthwise GFLOP, 0.002 per MB of activation traffic, 0.05 per launched operation per batch."""
    from tests.synthetic import zoo_trace_frame

    rng = np.random.default_rng(seed)
    df = zoo_frame({f: 12 for f in "abcdefg"}, seed=seed)
    tr = zoo_trace_frame(df, seed=seed + 1)
    for k in ("conv_regular", "conv_depthwise"):
        tr[f"flops_{k}"] *= rng.uniform(0.2, 5, len(tr))
    tr = tr.rename(columns={c: f"tr_{c}" for c in tr.columns if c not in ("model", "input_size")})
    out = df.merge(tr, on=["model", "input_size"])
    b = out["batch_size"].to_numpy(float)
    t = (0.01 * out["tr_flops_conv_regular"] / 1e9 + 0.2 * out["tr_flops_conv_depthwise"] / 1e9
         + 0.002 * out["tr_bytes_activation"] / 1e6 + 0.05 * out["tr_n_ops"] / b)
    return out.assign(latency_ms=t * b)


def _held_out_log_error(frame: pd.DataFrame, family: str = "g", **settings) -> np.ndarray:
    """log(predicted / measured) latency per image on ``family``'s rows, shape (rows of ``family``,), of the
    additive base (:class:`~carb.model.zoo_latency.AdditiveBase`, no Huber loss, ``settings``) fitted on the
    rows of every other family of ``frame``."""
    from carb.model.zoo_latency import AdditiveBase

    test = (frame["family"] == family).to_numpy()
    y = (frame.loc[test, "latency_ms"] / frame.loc[test, "batch_size"]).to_numpy(float)
    m = AdditiveBase(huber=None, **settings).fit(frame[~test])
    return np.log(np.exp(m.predict_log(frame[test])) / y)


def _held_out_mape(frame: pd.DataFrame, family: str = "g", **settings) -> float:
    """Mean |predicted / measured - 1| (a fraction) on ``family``'s rows of :func:`_held_out_log_error`'s
    additive base, fitted without them."""
    return float(np.mean(np.abs(np.exp(_held_out_log_error(frame, family, **settings)) - 1)))


def _shipped_trace() -> pd.DataFrame:
    """The shipped layer-table features (``carb/data/timm-zoo-trace.parquet``), the traced rows only (refused
    networks left out)."""
    tr = pd.read_parquet(ROOT / "carb" / "data" / "timm-zoo-trace.parquet")
    return tr[tr["refused"].isna()]


def test_additive_base_recovers_per_kind_costs_non_negative():
    from carb.model.zoo_latency import AdditiveBase

    frame = _additive_frame()
    m = AdditiveBase().fit(frame)
    cost = m.costs()
    assert all(v >= 0 for v in cost.values())
    assert cost["gflop_conv_regular"] == pytest.approx(0.01, rel=0.02)
    assert cost["gflop_conv_depthwise"] == pytest.approx(0.2, rel=0.02)
    assert cost["mb_activation"] == pytest.approx(0.002, rel=0.02)
    assert cost["ops_per_image"] == pytest.approx(0.05, rel=0.02)
    pred = np.exp(m.predict_log(frame))
    assert np.allclose(pred, frame["latency_ms"] / frame["batch_size"], rtol=0.01)
    more = frame.assign(tr_flops_conv_depthwise=frame["tr_flops_conv_depthwise"] * 2)   # more work, never less time
    assert (np.exp(m.predict_log(more)) >= pred - 1e-12).all()


def test_additive_zoo_model_predicts_a_held_out_family_by_its_kind_mix():
    """A family whose mix of kinds (its depthwise share) differs from the rest: the per-kind additive base
    carries the law to it; the log-linear base on published totals cannot."""
    frame = _additive_frame(seed=4)
    frame.loc[frame["family"] == "g", "tr_flops_conv_depthwise"] *= 20
    b = frame["batch_size"].to_numpy(float)
    frame["latency_ms"] = b * (0.01 * frame["tr_flops_conv_regular"] / 1e9 + 0.2 * frame["tr_flops_conv_depthwise"] / 1e9
                               + 0.002 * frame["tr_bytes_activation"] / 1e6 + 0.05 * frame["tr_n_ops"] / b)
    test = (frame["family"] == "g").to_numpy()
    err = {}
    for base in ("additive", "loglinear"):
        m = ZooLatencyModel(n_estimators=50, min_child_samples=5, base=base).fit(frame[~test])
        err[base] = float(np.mean(np.abs(m.predict(frame[test]) / frame.loc[test, "latency_ms"] - 1)))
    assert err["additive"] < 0.1 < err["loglinear"]
    with pytest.raises(DatasetError, match=r"^ZooLatencyModel: base='roofline' is not allowed; allowed: "):
        ZooLatencyModel(base="roofline")


def test_bench_saves_each_gpu_family_table_worst_first_and_results_show_it(tmp_path):
    import json
    import sys as _sys

    _sys.path.insert(0, str(ROOT / "scripts" / "bench"))
    from zoo import device_entry

    from scripts.zoo_results import gpu_worst_families

    df = zoo_frame({f: 6 for f in "abcdefgh"}, seed=2, law="hj", noise=0.1)
    table, s = evaluate_device(df, models={"b1": FlopsLogLog, "hj": HiddenJoulesRegression,
                                           "carb": lambda: ZooLatencyModel(n_estimators=20, min_child_samples=5)})
    entry = json.loads(json.dumps(device_entry("RTX 4090", df, table, s, True), default=float))
    fams = [r["family"] for r in entry["table"]]
    assert sorted(fams) == list("abcdefgh") and entry["worst"] == fams[0]
    mape = [r["carb_mape_pct"] for r in entry["table"]]
    assert mape == sorted(mape, reverse=True) and {"hj_mape_pct", "b1_mape_pct", "carb_rho"} <= set(entry["table"][0])
    lines = gpu_worst_families([entry], n=3)
    assert len(lines) == 3 and lines[2].startswith(f"| RTX 4090 | {fams[0]} ") and f"; {fams[2]} " in lines[2]
    assert gpu_worst_families([{k: v for k, v in entry.items() if k != "table"}]) == []


def test_additive_base_fit_is_robust_to_a_family_off_by_10x():
    """A family whose time the layer table does not explain (10x the law, as a trace of another graph than
    the one timed) must not set the per-kind costs of the others: the Huber-weighted fit keeps them within a
    few %, the plain least squares (the old fit) does not."""
    from carb.model.zoo_latency import AdditiveBase, huber_weights

    frame = _additive_frame(seed=2)
    off = (frame["family"] == "g").to_numpy()
    frame.loc[off, "latency_ms"] *= 10
    clean = frame[~off]
    err = {}
    for k in (0.1, None):
        m = AdditiveBase(huber=k).fit(frame)
        assert all(v >= 0 for v in m.costs().values())
        pred = np.exp(m.predict_log(clean)) * clean["batch_size"]
        err[k] = float(np.mean(np.abs(pred / clean["latency_ms"] - 1)))
    assert err[0.1] < 0.05 < 0.2 < err[None]
    assert AdditiveBase().huber == 0.1
    assert np.allclose(huber_weights(np.array([0.05, -0.1, 0.5, -2.0]), 0.1), [1, 1, 0.2, 0.05])
    assert (huber_weights(np.array([3.0, -3.0]), None) == 1).all()


def test_correction_is_bounded_by_base_and_hj_and_its_margin_never_sees_the_held_out_family():
    from carb.analysis.zoo_eval import MARGINS, nested_margin
    from carb.model.zoo_latency import bounded

    base, corr, hj = np.array([0.0, 0.0, 1.0, 0.0]), np.array([2.0, -1.0, 0.5, 3.0]), np.array([1.0, 0.5, 0.0, np.nan])
    assert np.allclose(bounded(base, corr, hj, 0.0), [1.0, 0.0, 0.5, 3.0])       # the median; no HJ: as is
    assert np.allclose(bounded(base, corr, hj, 0.1), [1.1, -0.1, 0.5, 3.0])
    assert np.allclose(bounded(base, corr, hj, None), corr)
    df = zoo_frame({f: 12 for f in "abcdefg"}, seed=3, noise=0.1)
    df["latency_ms"] *= np.where(df["input_size"] > 200, 1.5, 1.0)   # a law the correction learns
    test = (df["family"] == "g").to_numpy()
    m = ZooLatencyModel(n_estimators=50, min_child_samples=5, margin=0.0, outside="clip").fit(df[~test])
    c = m.components(df[test])
    lo, hi = np.minimum(c["base"], c["hj"]), np.maximum(c["base"], c["hj"])
    p = m.predict_log(df[test])
    assert ((p >= lo - 1e-12) & (p <= hi + 1e-12)).all() and not np.allclose(p, c["corrected"])
    free = ZooLatencyModel(n_estimators=50, min_child_samples=5, margin=None).fit(df[~test])
    assert np.allclose(free.predict_log(df[test]), c["corrected"])
    # the evaluation's margin for a held-out family is chosen on the other families only
    fams = scored_families(df)
    pred = lofo_predictions(df, fams)
    assert {"carb_log_base", "carb_log_corrected", "carb_log_hj"} <= set(pred.columns)
    out, chosen = nested_margin(pred)
    assert set(chosen) == set(fams) and set(chosen.values()) <= set(MARGINS)
    g = (out["family"] == "g").to_numpy()
    want = np.exp(bounded(*(out.loc[g, f"carb_log_{k}"].to_numpy() for k in ("base", "corrected", "hj")),
                          chosen["g"])) * out.loc[g, "batch_size"]
    assert np.allclose(out.loc[g, "pred_carb"], want)
    # g's own rows never choose g's margin: there the correction is far off (the median is exact), on the
    # others it is exact (no bound best); a choice that scored g itself would take the median
    rows = [{"family": f, "model": f"{f}{i}", "batch_size": 1, "carb_log_base": 0.0, "carb_log_hj": 0.0,
             "carb_log_corrected": 2.0 if f == "g" else 0.5, "latency_ms": 1.0 if f == "g" else float(np.exp(0.5)),
             "pred_carb": np.nan} for f in "abcg" for i in range(3)]
    out, chosen = nested_margin(pd.DataFrame(rows))
    assert chosen["g"] == np.inf and chosen["a"] < np.inf
    assert np.allclose(out.loc[out["family"] == "g", "pred_carb"], np.exp(2.0))


def test_gemm_regimes_split_matrix_products_by_intensity():
    """Each linear / matmul call lands in the regime of its FLOPs per activation byte (weights excluded);
    bytes keep the weights; other kinds are not matrix products."""
    from carb.design.zoo_features import GEMM_INTENSITY_EDGES, gemm_regimes

    lo, hi = GEMM_INTENSITY_EDGES
    table = pd.DataFrame([
        # kind, flops, bytes_read, bytes_written, param_bytes
        ("matmul", 2.0 * 100, 60, 40, 0),                    # 2 FLOPs / byte: lo
        ("linear", (lo + hi) / 2 * 100, 4060, 40, 4000),     # weights excluded: mid, not lo
        ("linear", 4.0 * hi * 100, 960, 40, 900),            # hi
        ("conv_regular", 1e6, 5000, 100, 3000),
        ("conv_depthwise", 1e4, 500, 100, 200),
        ("norm", 10.0, 100, 100, 8),
    ], columns=["kind", "flops", "bytes_read", "bytes_written", "param_bytes"])
    g = gemm_regimes(table)
    assert g["flops_gemm_lo"] == 200 and g["bytes_gemm_lo"] == 100 and g["n_gemm_lo"] == 1
    assert g["flops_gemm_mid"] == pytest.approx((lo + hi) / 2 * 100) and g["bytes_gemm_mid"] == 4100
    assert g["flops_gemm_hi"] == pytest.approx(4 * hi * 100) and g["n_gemm_hi"] == 1
    assert sum(g[f"n_gemm_{r}"] for r in ("lo", "mid", "hi")) == 3


def _gemm_frame(seed: int = 0) -> pd.DataFrame:
    """:func:`_additive_frame`'s rows with the explicit matrix products split into intensity regimes and
    a law where a low-intensity GEMM costs per byte (0.004 ms per MB) and a high-intensity one per FLOP
    (0.004 ms per GFLOP)."""
    rng = np.random.default_rng(seed)
    out = _additive_frame(seed)
    total = out["tr_flops_linear"] + out["tr_flops_matmul"]
    share = rng.dirichlet(np.ones(3), len(out))
    heavy = (out["family"] == "g").to_numpy()            # the held-out family: many tiny GEMMs
    share[heavy] = [0.9, 0.05, 0.05]
    total = np.where(heavy, 10 * total, total)
    for i, (r, per_byte) in enumerate((("lo", 4.0), ("mid", 32.0), ("hi", 200.0))):
        out[f"tr_flops_gemm_{r}"] = total * share[:, i]
        out[f"tr_bytes_gemm_{r}"] = total * share[:, i] / per_byte
        out[f"tr_n_gemm_{r}"] = 10.0
    b = out["batch_size"].to_numpy(float)
    t = (0.01 * out["tr_flops_conv_regular"] / 1e9 + 0.002 * out["tr_bytes_activation"] / 1e6
         + 0.05 * out["tr_n_ops"] / b + 0.004 * out["tr_bytes_gemm_lo"] / 1e6 + 0.004 * out["tr_flops_gemm_hi"] / 1e9)
    return out.assign(latency_ms=t * b)


def test_additive_base_prices_gemms_by_regime_for_a_held_out_family():
    """A held-out family of many low-intensity GEMMs (LeViT's 16-dim attention products): priced by regime,
    the base carries the law to it; with one cost per linear / matmul FLOP and byte (the columns absent) it
    cannot."""
    from carb.model.zoo_latency import additive_terms

    frame = _gemm_frame(seed=5)
    terms = additive_terms(frame, gemm_regimes=True).columns
    assert {"gflop_gemm_lo", "mb_gemm_lo", "gflop_gemm_hi", "mb_gemm_hi"} <= set(terms)
    assert "gflop_linear" not in terms and "mb_matmul" not in terms
    assert "gflop_gemm_lo" not in additive_terms(frame).columns   # off by default: one cost per kind
    test = (frame["family"] == "g").to_numpy()
    err = {name: _held_out_mape(f, gemm_regimes=on)
           for name, f, on in (("regimes", frame, True), ("one cost", frame, False),
                               ("no columns", frame.drop(columns=[c for c in frame if "gemm" in c]), True))}
    assert err["regimes"] < 0.02 < 0.2 < min(err["one cost"], err["no columns"])
    model = ZooLatencyModel(n_estimators=20, min_child_samples=5, gemm_regimes=True).fit(frame[~test])
    assert model.tbase_.gemm_regimes and "gflop_gemm_lo" in model.tbase_.terms_


@pytest.mark.slow
def test_timm_files_trace_timm_own_graph_not_torchvision_namesake():
    """timm's files timed timm's networks: a name torchvision also has (vgg11) is traced as ``timm:vgg11``
    (its head a 7x7 convolution, not torchvision's linear layer); a timm-only name stays bare."""
    import sys as _sys

    _sys.path.insert(0, str(ROOT / "scripts" / "data"))
    from zoo_trace_features import timm_graph

    from carb.design.trace import summarize, trace

    assert timm_graph("vgg11") == "timm:vgg11" and timm_graph("ghostnet_100") == "ghostnet_100"
    ours = summarize(trace(timm_graph("vgg11"), (1, 3, 224, 224), cache=False))
    tv = summarize(trace("vgg11", (1, 3, 224, 224), cache=False))
    assert ours["params"] == tv["params"] and ours["macs"] == pytest.approx(tv["macs"], rel=1e-3)
    assert ours["flops_linear"] < 0.1 * tv["flops_linear"]   # the 25088 x 4096 layer is a convolution in timm


def test_amp_memory_split_separates_fp32_norms_and_parameter_elementwise():
    """Layer / group / RMS norms (autocast's fp32 list) apart from batch norm; element-wise operations that
    read a parameter (layer scale, position embedding) apart from those that do not; other kinds in neither."""
    from carb.design.zoo_features import amp_memory_split

    table = pd.DataFrame([
        # op, kind, bytes_read, bytes_written, param_bytes
        ("_native_batch_norm_legit_no_training", "norm", 100, 100, 16),
        ("native_layer_norm", "norm", 300, 200, 8),
        ("native_group_norm", "norm", 40, 10, 8),
        ("mul", "elementwise", 70, 60, 4),          # gamma * x: reads a parameter
        ("add", "elementwise", 500, 250, 0),        # residual add: does not
        ("gelu", "activation", 90, 90, 0),
        ("_softmax", "activation", 20, 20, 0),      # autocast's fp32 list
        ("linalg_vector_norm", "reduce", 30, 1, 0),  # F.normalize's norm: fp32 list
        ("mean", "reduce", 30, 1, 0),                # not on it
        ("addmm", "linear", 1000, 100, 800),
    ], columns=["op", "kind", "bytes_read", "bytes_written", "param_bytes"])
    s = amp_memory_split(table)
    assert s == {"bytes_norm_fp32": 550.0, "n_norm_fp32": 2.0, "bytes_elementwise_param": 130.0,
                 "n_elementwise_param": 1.0, "bytes_act_fp32": 71.0, "n_act_fp32": 2.0}


def _amp_frame(seed: int = 0) -> pd.DataFrame:
    """:func:`_additive_frame`'s rows with the norm bytes split into batch norm and fp32-list norms and a
    share of the element-wise bytes reading a parameter, and a law where an fp32-list norm MB costs 0.02 ms
    (batch norm's 0.002), a parameter element-wise MB 0.01 ms on top; the held-out family ``g`` is all
    LayerNorm with layer scale (a transformer under autocast), the others mostly batch norm."""
    rng = np.random.default_rng(seed)
    out = _additive_frame(seed)
    heavy = (out["family"] == "g").to_numpy()
    share = np.where(heavy, 1.0, rng.uniform(0, 0.3, len(out)))
    out["tr_bytes_norm"] = np.where(heavy, 40, 1) * out["tr_bytes_norm"]
    out["tr_bytes_norm_fp32"] = share * out["tr_bytes_norm"]
    param_share = np.where(heavy, 0.8, rng.uniform(0, 0.3, len(out)))
    out["tr_bytes_elementwise_param"] = param_share * out["tr_bytes_elementwise"]
    out["tr_n_norm_fp32"] = out["tr_n_elementwise_param"] = 10.0
    b = out["batch_size"].to_numpy(float)
    t = (0.01 * out["tr_flops_conv_regular"] / 1e9 + 0.2 * out["tr_flops_conv_depthwise"] / 1e9
         + 0.002 * out["tr_bytes_activation"] / 1e6 + 0.05 * out["tr_n_ops"] / b
         + 0.002 * (out["tr_bytes_norm"] - out["tr_bytes_norm_fp32"]) / 1e6 + 0.02 * out["tr_bytes_norm_fp32"] / 1e6
         + 0.001 * out["tr_bytes_elementwise"] / 1e6 + 0.01 * out["tr_bytes_elementwise_param"] / 1e6)
    return out.assign(latency_ms=t * b)


def test_additive_base_prices_fp32_memory_bytes_apart_for_a_held_out_family():
    """A held-out family whose norms are all fp32-list ones and whose element-wise bytes mostly read a
    parameter (a layer-scaled transformer under autocast): with ``amp_split`` the base carries the law to
    it; with one cost per norm MB and per element-wise MB (off, or the columns absent) it cannot."""
    from carb.model.zoo_latency import additive_terms

    frame = _amp_frame(seed=0)
    terms = list(additive_terms(frame, amp_split=True).columns)
    assert {"mb_norm", "mb_norm_fp32", "mb_elementwise", "mb_elementwise_param"} <= set(terms)
    assert "mb_norm_fp32" not in additive_terms(frame).columns   # off: one cost per norm MB
    x = additive_terms(frame, amp_split=True)
    assert np.allclose(x["mb_norm"] + x["mb_norm_fp32"], frame["tr_bytes_norm"] / 1e6)   # a split, not a double count
    fp32 = additive_terms(frame.assign(timm_precision="fp32"), amp_split=True)   # no autocast: one precision
    assert (fp32["mb_norm_fp32"] == 0).all() and (fp32["mb_elementwise_param"] == 0).all()
    assert np.allclose(fp32["mb_norm"], frame["tr_bytes_norm"] / 1e6)
    amp = additive_terms(frame.assign(timm_precision="amp_fp16"), amp_split=True)
    assert np.allclose(amp["mb_norm_fp32"], x["mb_norm_fp32"])
    test = (frame["family"] == "g").to_numpy()
    no_columns = frame.drop(columns=["tr_bytes_norm_fp32", "tr_bytes_elementwise_param"])
    err = {name: _held_out_mape(f, amp_split=on)
           for name, f, on in (("split", frame, True), ("one cost", frame, False), ("no columns", no_columns, True))}
    assert err["split"] < 0.02 < 0.2 < min(err["one cost"], err["no columns"])
    model = ZooLatencyModel(n_estimators=20, min_child_samples=5, amp_split=True).fit(frame[~test])
    assert model.tbase_.amp_split and "mb_norm_fp32" in model.tbase_.terms_


def test_correction_beyond_the_span_falls_back_to_the_base_and_the_evaluation_takes_the_fixed_margin():
    """``outside="base"``: a corrected value beyond ``margin`` of the base-HJ span becomes the base (the
    old ``clip`` kept it at the edge); inside, the correction stays. The evaluation takes the model's own
    margin unless its ``nested_margin`` is set. ``outside="overshoot"`` drops only a correction past HJ on
    HJ's side of the base."""
    from carb.model.zoo_latency import bounded

    base, hj = np.array([0.0, 0.0, 1.0, 0.0, 0.0]), np.array([1.0, 0.5, 0.0, np.nan, 0.5])
    corr = np.array([2.0, 0.53, 0.5, 3.0, -0.2])
    assert np.allclose(bounded(base, corr, hj, 0.05, "base"), [0.0, 0.53, 0.5, 3.0, 0.0])
    assert np.allclose(bounded(base, corr, hj, 0.05, "clip"), [1.05, 0.53, 0.5, 3.0, -0.05])
    assert np.allclose(bounded(base, corr, hj, None, "base"), corr)
    # overshoot: past HJ on HJ's side of the base -> the base (row 0: 2.0 > 1.0 + 0.05); between them kept
    # (rows 1, 2); no HJ: as is (row 3); on the other side of the base -> clipped (row 4)
    assert np.allclose(bounded(base, corr, hj, 0.05, "overshoot"), [0.0, 0.53, 0.5, 3.0, -0.05])
    assert np.allclose(bounded(np.array([1.0]), np.array([-0.1]), np.array([0.0]), 0.05, "overshoot"), [1.0])
    assert np.allclose(bounded(np.array([1.0]), np.array([-0.04]), np.array([0.0]), 0.05, "overshoot"), [-0.04])
    with pytest.raises(DatasetError, match="outside"):
        bounded(base, corr, hj, 0.0, "edge")
    with pytest.raises(DatasetError, match="outside"):
        ZooLatencyModel(outside="edge")
    # a family whose correction overshoots both base and HJ: the base, not the span's edge
    df = zoo_frame({f: 12 for f in "abcdefg"}, seed=3, noise=0.1)
    df["latency_ms"] *= np.where(df["input_size"] > 200, 1.5, 1.0)
    test = (df["family"] == "g").to_numpy()
    m = ZooLatencyModel(n_estimators=50, min_child_samples=5, margin=0.0, outside="base").fit(df[~test])
    c = m.components(df[test])
    beyond = ((c["corrected"] > np.maximum(c["base"], c["hj"])) | (c["corrected"] < np.minimum(c["base"], c["hj"])))
    p = m.predict_log(df[test])
    assert beyond.any() and np.allclose(p[beyond.to_numpy()], c["base"][beyond])
    assert np.allclose(p[~beyond.to_numpy()], c["corrected"][~beyond])
    # the evaluation: the model's fixed margin (no carb_margin column) unless the settings' nested_margin
    models = {"b1": FlopsLogLog, "hj": HiddenJoulesRegression, "carb": ZooLatencyModel}
    fast = {"n_estimators": 20, "min_child_samples": 5}
    table, _ = evaluate_device(df, models=models, settings=fast | {"margin": 0.0, "outside": "base",
                                                                   "nested_margin": False})
    assert "carb_margin" not in table
    table, _ = evaluate_device(df, models=models, settings=fast | {"nested_margin": True})
    assert "carb_margin" in table and table["carb_margin"].notna().all()


def test_evaluation_reads_the_bound_from_the_settings_and_builds_carb_only_per_fold():
    """``evaluate_device`` takes ``nested_margin`` / ``outside`` from CARB's settings (conf/zoo_latency's keys),
    missing keys from ZooLatencyModel's defaults, and builds CARB's model once per held-out family only, never
    once more just to read its settings."""
    from carb.analysis.zoo_eval import bound_settings

    assert bound_settings(None) == (False, "overshoot")   # ZooLatencyModel's defaults
    assert bound_settings({"nested_margin": True, "outside": "clip"}) == (True, "clip")
    assert bound_settings({"outside": "base"}) == (False, "base")
    df = zoo_frame({f: 6 for f in "abcd"}, seed=5, noise=0.05)
    built = []

    def carb():
        built.append(1)
        return ZooLatencyModel(n_estimators=10, min_child_samples=5, nested_margin=True)

    models = {"b1": FlopsLogLog, "hj": HiddenJoulesRegression, "carb": carb}
    table, _ = evaluate_device(df, models=models)
    # 4 held-out families, 4 builds; the factory's nested_margin is not read: the settings' default (False) is
    assert len(built) == 4 and "carb_margin" not in table
    table, _ = evaluate_device(df, models=models, settings={"n_estimators": 10, "min_child_samples": 5,
                                                            "nested_margin": True, "outside": "clip"})
    assert len(built) == 4 and table["carb_margin"].notna().all()   # settings' model replaced the factory


def test_zoo_latency_settings_from_conf_checked_by_the_schema(capsys):
    """``conf/zoo_latency/default.yaml`` passes its schema and builds the model; an override replaces a key;
    a bad value or an unknown key is one line naming it, exit 2."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts/bench/zoo.py"
    spec = importlib.util.spec_from_file_location("zoo_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    settings = bench.zoo_latency_settings([])
    m = ZooLatencyModel(**settings)
    assert m.gemm_regimes == settings["gemm_regimes"] and m.amp_split == settings["amp_split"]
    default = ZooLatencyModel()   # the class's defaults are the shipped config's
    assert {k: getattr(default, k) for k in settings} == settings
    assert bench.zoo_latency_settings(["amp_split=false", "n_estimators=7"])["n_estimators"] == 7
    for bad, needle in (("n_estimators=0", "n_estimators"), ("amp_split=maybe", "amp_split"),
                        ("gemm=true", "gemm"), ("base=roofline", "base"), ("outside=edge", "outside"),
                        ("margin=-1", "margin"), ("input_bytes=maybe", "input_bytes")):
        with pytest.raises(SystemExit) as e:
            bench.zoo_latency_settings([bad])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("--zoo-latency: ") and needle in err and "\n" not in err


def _math_frame(seed: int = 0) -> pd.DataFrame:
    """:func:`_additive_frame`'s rows timed under autocast on PyTorch 2.9.1, with attention on the math path
    (``tr_bytes_sdpa_math``: its scores' passes, ``tr_bytes_sdpa_math_io``: its operands) and bytes of no other
    kind (``tr_bytes_other``), and a law where the math path costs 0.004 ms per MB it really moves (scores + 3.5
    x operands, :data:`carb.model.zoo_latency.SDPA_MATH_IO_PASSES`) and an other-kind MB 0.002 ms. The trained
    families' attention is scores-heavy (NesT: 196 tokens, head dim 32), the held-out ``g``'s operand-heavy
    (Hiera's mask units: 64 tokens, head dim 96), and only ``g`` and ``f`` have other-kind bytes."""
    rng = np.random.default_rng(seed)
    out = _additive_frame(seed).assign(timm_precision="amp_fp16", torch_version="2.9.1")
    fam = out["family"].to_numpy()
    scores = rng.uniform(1, 5, len(out)) * 1e7
    io = scores * np.where(fam == "g", rng.uniform(1.5, 3, len(out)), rng.uniform(0.05, 0.7, len(out)))
    io[np.isin(fam, ["a", "b"])] = scores[np.isin(fam, ["a", "b"])] = 0.0   # no math attention
    out["tr_bytes_sdpa_math"], out["tr_bytes_sdpa_math_io"] = scores, io
    out["tr_flops_sdpa_math"] = np.where(scores > 0, 1e6, 0.0)
    out["tr_flops_sdpa"] = out["tr_flops_sdpa"] + out["tr_flops_sdpa_math"]
    out["tr_bytes_other"] = np.where(np.isin(fam, ["f", "g"]), rng.uniform(1, 3, len(out)) * 1e8, 0.0)
    b = out["batch_size"].to_numpy(float)
    extra = 0.004 * (scores + 3.5 * io) / 1e6 + 0.002 * out["tr_bytes_other"].to_numpy(float) / 1e6
    return out.assign(latency_ms=out["latency_ms"] + extra * b)


def test_sdpa_math_bytes_weigh_the_operands_by_torch_version():
    """The math path's operands count 3.5 x ``tr_bytes_sdpa_math_io`` beside the scores' passes under autocast on
    PyTorch >= 2.5 (half inputs cast to fp32, 12 passes at fp32), 2 x before it or at one precision, not at all
    under ``torch.compile``; with ``sdpa_math_io`` off, ``mb_sdpa_math`` is the scores' bytes alone."""
    from carb.model.zoo_latency import additive_terms, math_upcast_rows, sdpa_math_bytes

    f = pd.DataFrame({"tr_bytes_sdpa_math": [4e6, 4e6, 4e6, 4e6, 0.0], "tr_bytes_sdpa_math_io": [2e6] * 4 + [0.0],
                      "torch_version": ["2.9.1", "2.4.0", "2.5.0+cu124", "2.9.1", "2.9.1"],
                      "timm_precision": ["amp_fp16", "amp_fp16", "amp_bf16", "fp32", "amp_fp16"]})
    assert math_upcast_rows(f).tolist() == [True, False, True, False, True]
    assert np.allclose(sdpa_math_bytes(f), [4 + 7, 4 + 4, 4 + 7, 4 + 4, 0.0])
    assert math_upcast_rows(f.drop(columns=["torch_version"])).tolist() == [True, True, True, False, True]
    compiled = f.assign(compile=["eager", "dynamo", "eager", "dynamo", "eager"])   # torch.compile fuses the passes
    assert np.allclose(sdpa_math_bytes(compiled), [4 + 7, 4, 4 + 7, 4, 0.0])
    frame = _math_frame()
    on = additive_terms(frame, sdpa_math_io=True)
    off = additive_terms(frame)
    assert np.allclose(off["mb_sdpa_math"], frame["tr_bytes_sdpa_math"] / 1e6)
    assert np.allclose(on["mb_sdpa_math"], (frame["tr_bytes_sdpa_math"] + 3.5 * frame["tr_bytes_sdpa_math_io"]) / 1e6)
    old = additive_terms(frame.drop(columns=["tr_bytes_sdpa_math_io"]), sdpa_math_io=True)   # a table without it
    assert np.allclose(old["mb_sdpa_math"], off["mb_sdpa_math"])


def test_additive_base_carries_the_math_attention_and_other_bytes_to_a_held_out_family():
    """A held-out family whose math-path attention is operand-heavy where the trained ones' is scores-heavy,
    and which moves bytes of no other kind: with ``sdpa_math_io`` and ``other_bytes`` the base carries the
    law to it (each setting removes its part of the error); without them it is predicted too fast."""
    from carb.model.zoo_latency import AdditiveBase, additive_terms

    frame = _math_frame(seed=0)
    test = (frame["family"] == "g").to_numpy()
    err = {(io, other): _held_out_log_error(frame, sdpa_math_io=io, other_bytes=other)
           for io in (False, True) for other in (False, True)}
    assert np.abs(err[True, True]).mean() < 0.02
    assert err[False, False].mean() < err[True, False].mean() < -0.05 and err[False, True].mean() < -0.05
    assert "mb_other" in AdditiveBase(other_bytes=True).fit(frame).terms_
    assert "mb_other" not in AdditiveBase().fit(frame).terms_
    terms = additive_terms(frame.assign(compile=np.where(frame["family"] == "f", "dynamo", "eager")), other_bytes=True)
    assert (terms.loc[frame["family"] == "f", "mb_other"] == 0).all()   # torch.compile lowers them into its kernels
    assert np.allclose(terms.loc[test, "mb_other"], frame.loc[test, "tr_bytes_other"] / 1e6)
    model = ZooLatencyModel(n_estimators=20, min_child_samples=5).fit(frame[~test])   # on by default
    assert model.tbase_.sdpa_math_io and model.tbase_.other_bytes and "mb_other" in model.tbase_.terms_


def test_shipped_trace_table_has_math_attention_operands_where_the_math_path_runs():
    """``bytes_sdpa_math_io`` of the shipped layer-table features (``--refresh --refresh-where flops_sdpa_math``):
    positive exactly on the rows with attention on the math path (Hiera, NesT, Twins, SAM-ViT), 0 elsewhere;
    ``--refresh-where`` with a column the table lacks is one line, exit 2."""
    tr = _shipped_trace()
    math = tr["flops_sdpa_math"].to_numpy(float) > 0
    io = tr["bytes_sdpa_math_io"].to_numpy(float)
    assert math.any() and (io[math] > 0).all() and (io[~math] == 0).all()
    assert set(tr.loc[math, "model"].map(model_family)) >= {"hiera", "nest", "twins"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts/data/zoo_trace_features.py"), "--refresh",
                        "--refresh-where", "no_such_column"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip().startswith("--refresh-where: ") and "\n" not in r.stderr.strip()


def test_gpu_parts_count_only_non_square_depthwise_flops():
    """``gpu_parts`` sums the FLOPs of depthwise convolutions whose kernel is not square (1x5 / 5x1, the ones
    PyTorch keeps off cuDNN), not square depthwise ones, not a non-square regular convolution."""
    from carb.model.zoo_latency import gpu_parts

    table = pd.DataFrame({"kind": ["conv_depthwise", "conv_depthwise", "conv_depthwise", "conv_regular", "linear"],
                          "weight_shape": [(64, 1, 1, 5), (64, 1, 5, 1), (64, 1, 3, 3), (64, 32, 1, 7), (10, 64)],
                          "out_shape": [(1, 64, 8, 8)] * 4 + [(1, 10)],
                          "flops": [1e6, 2e6, 4e6, 8e6, 16e6]})
    keys = ("flops_conv_dw_nonsquare", "bmm_tiles")
    assert {k: gpu_parts(table)[k] for k in keys} == {"flops_conv_dw_nonsquare": 3e6, "bmm_tiles": 0.0}
    assert {k: gpu_parts(table.iloc[2:])[k] for k in keys} == {"flops_conv_dw_nonsquare": 0.0, "bmm_tiles": 0.0}


def test_gpu_parts_count_output_tiles_of_batched_matrix_products():
    """``bmm_tiles``: a batched product's matrices times their 128 x 128 output tiles (VOLO's 1,176 matrices of
    9 x 32 outputs: one tile each; 12 of 300 x 200: 3 x 2 each); a 2-D ``mm`` (a linear layer's GEMM, rows
    growing with the batch) and a convolution count none."""
    from carb.model.zoo_latency import BMM_TILE, gpu_parts

    assert BMM_TILE == 128
    table = pd.DataFrame({"kind": ["matmul", "matmul", "matmul", "conv_regular"],
                          "weight_shape": [(), (), (), (8, 8, 3, 3)],
                          "out_shape": [(1176, 9, 32), (1, 12, 300, 200), (64, 64), (1, 8, 300, 300)],
                          "flops": [6e6, 1e9, 5e5, 1e9]})
    assert gpu_parts(table)["bmm_tiles"] == 1176 + 12 * 3 * 2
    assert gpu_parts(table.iloc[2:])["bmm_tiles"] == 0.0


def _tiles_frame(seed: int = 0) -> pd.DataFrame:
    """:func:`_additive_frame`'s rows on a GPU where families ``f`` and ``g`` run batched products of small
    matrices (``tr_bmm_tiles``: 2,000-8,000 output tiles per image) that cost 0.1 ms per thousand tiles, which
    their FLOPs (none added) do not say."""
    rng = np.random.default_rng(seed)
    out = _additive_frame(seed).assign(device_kind="gpu")
    fam = out["family"].to_numpy()
    tiles = np.where(np.isin(fam, ["f", "g"]), rng.uniform(2e3, 8e3, len(out)), 0.0)
    b = out["batch_size"].to_numpy(float)
    return out.assign(tr_bmm_tiles=tiles, latency_ms=out["latency_ms"] + 0.1 * tiles / 1e3 * b)


def test_additive_base_prices_batched_product_tiles_on_gpu_rows_for_a_held_out_family():
    """With ``bmm_tiles`` the base has ``ktiles_bmm`` (thousands of tiles per image, 0 on a CPU row) and carries
    its cost from ``f`` to the held-out ``g``; without it ``g`` is predicted too fast. The setting is
    conf/zoo_latency's (``bmm_tiles``, schema ZooLatency) and reaches the model's base."""
    from carb.model.zoo_latency import additive_terms

    frame = _tiles_frame()
    on, off = additive_terms(frame, bmm_tiles=True), additive_terms(frame)
    assert "ktiles_bmm" not in off.columns
    assert np.allclose(on["ktiles_bmm"], frame["tr_bmm_tiles"] / 1e3)
    assert (additive_terms(frame.assign(device_kind="cpu"), bmm_tiles=True)["ktiles_bmm"] == 0).all()
    test = (frame["family"] == "g").to_numpy()
    err = {flag: _held_out_log_error(frame, bmm_tiles=flag) for flag in (False, True)}
    assert np.abs(err[True]).mean() < 0.02 and err[False].mean() < -0.05
    model = ZooLatencyModel(n_estimators=20, min_child_samples=5, bmm_tiles=True).fit(frame[~test])
    assert model.tbase_.bmm_tiles and "ktiles_bmm" in model.tbase_.terms_


def test_shipped_trace_table_has_batched_product_tiles():
    """``bmm_tiles`` of the shipped layer-table features: finite, positive only where the table has matrix-product
    FLOPs, on every VOLO row (outlook attention's products), 0 on ResNets."""
    tr = _shipped_trace()
    tiles = tr["bmm_tiles"].to_numpy(float)
    assert np.isfinite(tiles).all() and ((tiles > 0) <= (tr["flops_matmul"].to_numpy(float) > 0)).all()
    assert (tiles[tr["model"].str.startswith("volo").to_numpy()] > 0).all()
    assert (tiles[tr["model"].str.startswith("resnet").to_numpy()] == 0).all()


def _nonsquare_frame(seed: int = 0) -> pd.DataFrame:
    """:func:`_additive_frame`'s rows on a GPU where families ``f`` and ``g`` have non-square depthwise
    convolutions (``tr_flops_conv_dw_nonsquare``, part of their depthwise FLOPs) that cost 0.5 ms per GFLOP in
    all (the law's 0.2 per depthwise GFLOP and 0.3 on top)."""
    rng = np.random.default_rng(seed)
    out = _additive_frame(seed).assign(device_kind="gpu")
    fam = out["family"].to_numpy()
    nonsq = np.where(np.isin(fam, ["f", "g"]), rng.uniform(0.2, 0.6, len(out)) * 1e9, 0.0)
    out["tr_flops_conv_dw_nonsquare"] = nonsq
    out["tr_flops_conv_depthwise"] = out["tr_flops_conv_depthwise"] + nonsq
    b = out["batch_size"].to_numpy(float)
    return out.assign(latency_ms=out["latency_ms"] + 0.5 * nonsq / 1e9 * b)


def test_additive_base_prices_non_square_depthwise_on_gpu_rows_for_a_held_out_family():
    """With ``dw_nonsquare`` the base has ``gflop_conv_dw_nonsquare`` (GFLOPs, 0 on a CPU row) and carries its
    cost from ``f`` to the held-out ``g``; without it ``g`` is predicted too fast. The setting is
    conf/zoo_latency's (``dw_nonsquare``, schema ZooLatency) and reaches the model's base."""
    from carb.model.zoo_latency import additive_terms

    frame = _nonsquare_frame()
    on, off = additive_terms(frame, dw_nonsquare=True), additive_terms(frame)
    assert "gflop_conv_dw_nonsquare" not in off.columns
    assert np.allclose(on["gflop_conv_dw_nonsquare"], frame["tr_flops_conv_dw_nonsquare"] / 1e9)
    cpu = additive_terms(frame.assign(device_kind="cpu"), dw_nonsquare=True)
    assert (cpu["gflop_conv_dw_nonsquare"] == 0).all()   # cuDNN's depthwise rule is a GPU matter
    test = (frame["family"] == "g").to_numpy()
    err = {flag: _held_out_log_error(frame, dw_nonsquare=flag) for flag in (False, True)}
    assert np.abs(err[True]).mean() < 0.02 and err[False].mean() < -0.05
    model = ZooLatencyModel(n_estimators=20, min_child_samples=5, dw_nonsquare=True).fit(frame[~test])
    assert model.tbase_.dw_nonsquare and "gflop_conv_dw_nonsquare" in model.tbase_.terms_


def test_shipped_trace_table_has_non_square_depthwise_flops():
    """``flops_conv_dw_nonsquare`` of the shipped layer-table features: positive only where the table has
    depthwise FLOPs, never above them, and on GhostNetV2 (its DFC attention's 1x5 / 5x1 convolutions)."""
    tr = _shipped_trace()
    nonsq = tr["flops_conv_dw_nonsquare"].to_numpy(float)
    dw = tr["flops_conv_depthwise"].to_numpy(float)
    assert np.isfinite(nonsq).all() and (nonsq <= dw).all() and ((nonsq > 0) <= (dw > 0)).all()
    assert (nonsq[tr["model"].str.startswith("ghostnetv2").to_numpy()] > 0).all()
    assert (nonsq[tr["model"].str.startswith("resnet").to_numpy()] == 0).all()


def test_public_rank_and_quantile_helpers():
    """``spearman`` (ranks' correlation; NaN under 3 rows or on a constant array) and ``weighted_quantile``
    (weighted empirical CDF; weights of any scale), public for :mod:`carb.analysis.zoo_transfer_eval`."""
    from carb.analysis.zoo_eval import spearman, weighted_quantile

    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert spearman(x, np.exp(x)) == pytest.approx(1.0) and spearman(x, -x ** 3) == pytest.approx(-1.0)
    assert spearman(x, np.array([1.0, 3.0, 2.0, 5.0, 4.0])) == pytest.approx(0.8)
    assert np.isnan(spearman(x[:2], x[:2])) and np.isnan(spearman(x, np.ones(5)))
    assert weighted_quantile(x, np.ones(5), 0.5) == 3.0 and weighted_quantile(x, np.full(5, 7.0), 0.5) == 3.0
    assert weighted_quantile(x, np.array([0.0, 0.0, 0.0, 0.0, 1.0]), 0.05) == 5.0   # all weight on 5
    assert weighted_quantile(x[::-1], np.ones(5), 0.2) == 1.0 and weighted_quantile(x, np.ones(5), 1.0) == 5.0


def _input_frame(seed: int = 0) -> pd.DataFrame:
    """:func:`_additive_frame`'s rows on a GPU with a cost of 0.05 ms per MB of the fp32 input image per image
    (3 x size^2 x 4 bytes), which its layer-table columns do not hold; family ``g`` is fed 512 px inputs, the
    others keep 160-288 px."""
    out = _additive_frame(seed).assign(device_kind="gpu")
    out.loc[out["family"] == "g", "input_size"] = 512
    s, b = out["input_size"].to_numpy(float), out["batch_size"].to_numpy(float)
    return out.assign(latency_ms=out["latency_ms"] + 0.05 * 3 * s * s * 4 / 1e6 * b)


def test_additive_base_prices_input_bytes_on_gpu_rows_for_a_held_out_family():
    """With ``input_bytes`` the base has ``mb_input`` (the fp32 input's MB per image, 0 on a CPU row, beside the
    fixed cost per batch) and carries its cost to the held-out ``g`` at a larger input; without it ``g`` is
    predicted too fast. The setting is conf/zoo_latency's (``input_bytes``, schema ZooLatency) and reaches the
    model's base."""
    from carb.commands.schema.groups import ZooLatency
    from carb.model.zoo_latency import AdditiveBase, additive_terms, input_mb

    frame = _input_frame()
    on, off = additive_terms(frame, input_bytes=True), additive_terms(frame)
    assert "mb_input" not in off.columns and "per_image" in on.columns
    assert np.allclose(on["mb_input"], 3 * frame["input_size"].to_numpy(float) ** 2 * 4 / 1e6)
    assert np.allclose(input_mb(frame.iloc[:1].assign(input_size=224)), 0.602112)
    assert (additive_terms(frame.assign(device_kind="cpu"), input_bytes=True)["mb_input"] == 0).all()
    test = (frame["family"] == "g").to_numpy()
    y = (frame.loc[test, "latency_ms"] / frame.loc[test, "batch_size"]).to_numpy(float)
    err = {}
    for flag in (False, True):
        m = AdditiveBase(huber=None, input_bytes=flag).fit(frame[~test])
        err[flag] = np.log(np.exp(m.predict_log(frame[test])) / y)
    assert np.abs(err[True]).mean() < 0.02 and err[False].mean() < -0.05
    assert m.costs()["mb_input"] == pytest.approx(0.05, rel=0.05)
    model = ZooLatencyModel(n_estimators=20, min_child_samples=5, input_bytes=True).fit(frame[~test])
    assert model.tbase_.input_bytes and "mb_input" in model.tbase_.terms_
    assert "input_bytes" in ZooLatency.model_fields


def test_input_bytes_cv_chooses_the_term_by_family_disjoint_folds_of_the_training_rows():
    """``input_bytes="cv"``: the fit keeps ``mb_input`` where a family-disjoint cross-validation of its own rows
    says it lowers the mean family MAPE (the GPU rows that pay for their input), not where it cannot (CPU rows: the
    term is 0 there, a tie keeps it off); an unknown value is one line naming the allowed ones."""
    from carb.errors import DatasetError
    from carb.model.zoo_latency import choose_by_family_cv

    frame = _input_frame()
    gpu = ZooLatencyModel(n_estimators=20, min_child_samples=5, input_bytes="cv").fit(frame)
    assert gpu.input_bytes_ is True and "mb_input" in gpu.tbase_.terms_
    cpu = ZooLatencyModel(n_estimators=20, min_child_samples=5, input_bytes="cv").fit(frame.assign(device_kind="cpu"))
    assert cpu.input_bytes_ is False and "mb_input" not in cpu.tbase_.terms_
    assert choose_by_family_cv(frame.drop(columns="family"), [ZooLatencyModel, ZooLatencyModel]) == 0
    with pytest.raises(DatasetError, match="input_bytes='maybe' is not allowed; allowed: true, false, cv"):
        ZooLatencyModel(input_bytes="maybe")


def test_zoo_latency_schema_default_of_input_bytes_is_the_models_and_the_confs():
    """A conf without ``input_bytes`` gets what ``ZooLatencyModel`` and conf/zoo_latency default to (``cv``),
    not ``False`` (review rev52: the schema defaulted to False)."""
    import inspect

    import yaml

    from carb.commands.schema.groups import ZooLatency

    conf = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf/zoo_latency/default.yaml").read_text())
    model_default = inspect.signature(ZooLatencyModel).parameters["input_bytes"].default
    assert ZooLatency.model_fields["input_bytes"].default == model_default == conf["input_bytes"] == "cv"
    conf.pop("input_bytes")
    assert ZooLatency.model_validate(conf).input_bytes == "cv"


def test_additive_base_prices_fp32_list_activations_under_autocast_on_top():
    """``act_fp32``: ``mb_act_fp32`` (bytes of softmax / norms on autocast's fp32 list) on autocast rows only, 0
    on an fp32 row and absent when off or without the column; a held-out family whose softmax bytes cost more
    than an activation MB is carried by it and not without it; the setting is conf/zoo_latency's and reaches the
    base, and ``"cv"`` chooses it by folds of the training families."""
    from carb.commands.schema.groups import ZooLatency
    from carb.model.zoo_latency import AdditiveBase, additive_terms

    rng = np.random.default_rng(3)
    out = _additive_frame(0)
    heavy = (out["family"] == "g").to_numpy()
    out["tr_bytes_act_fp32"] = np.where(heavy, 0.8, rng.uniform(0, 0.2, len(out))) * out["tr_bytes_activation"]
    b = out["batch_size"].to_numpy(float)
    t = (0.01 * out["tr_flops_conv_regular"] / 1e9 + 0.2 * out["tr_flops_conv_depthwise"] / 1e9
         + 0.002 * out["tr_bytes_activation"] / 1e6 + 0.05 * out["tr_n_ops"] / b
         + 0.02 * out["tr_bytes_act_fp32"] / 1e6)
    frame = out.assign(latency_ms=t * b)
    on = additive_terms(frame, act_fp32=True)
    assert np.allclose(on["mb_act_fp32"], frame["tr_bytes_act_fp32"] / 1e6)
    assert "mb_act_fp32" not in additive_terms(frame).columns
    assert "mb_act_fp32" not in additive_terms(frame.drop(columns="tr_bytes_act_fp32"), act_fp32=True).columns
    assert (additive_terms(frame.assign(timm_precision="fp32"), act_fp32=True)["mb_act_fp32"] == 0).all()
    test = heavy
    y = (frame.loc[test, "latency_ms"] / frame.loc[test, "batch_size"]).to_numpy(float)
    err = {}
    for flag in (False, True):
        m = AdditiveBase(huber=None, act_fp32=flag).fit(frame[~test])
        err[flag] = np.abs(np.exp(m.predict_log(frame[test])) / y - 1).mean()
    assert err[True] < 0.02 < 0.05 < err[False]
    model = ZooLatencyModel(n_estimators=20, min_child_samples=5, act_fp32="cv").fit(frame)
    assert model.act_fp32_ is True and "mb_act_fp32" in model.tbase_.terms_
    assert ZooLatencyModel(n_estimators=20, min_child_samples=5).fit(frame).act_fp32_ is False
    assert "act_fp32" in ZooLatency.model_fields


def test_family_cv_settings_reach_the_choice(monkeypatch):
    """``cv_folds`` / ``cv_min_models`` / ``cv_seed`` (conf/zoo_latency keys, defaults 5 / 5 / 0) are what the fit's
    family-disjoint cross-validation runs with."""
    import carb.model.zoo_latency as zl

    seen = []
    real = zl.choose_by_family_cv
    monkeypatch.setattr(zl, "choose_by_family_cv", lambda *a, **k: seen.append(k) or real(*a, **k))
    frame = _input_frame()
    ZooLatencyModel(n_estimators=5, min_child_samples=5, cv_folds=3, cv_min_models=2, cv_seed=7).fit(frame)
    ZooLatencyModel(n_estimators=5, min_child_samples=5).fit(frame)
    assert seen == [{"folds": 3, "min_models": 2, "seed": 7}, {"folds": 5, "min_models": 5, "seed": 0}]


def test_hidden_copy_bytes_counts_strided_softmax_and_norm_inputs_only():
    """``hidden_copy_bytes``: a layer norm over the channels of a permuted NCHW map (ConvNeXt's block, LayerNorm2d)
    and a softmax over a permuted tensor (CaiT's talking heads) are copied to contiguous by their CUDA kernels:
    2 x 4 bytes per element each; the same ops on contiguous inputs, and an element-wise op on a strided one, none.
    ``hidden_copies`` counts them as copies on GPU rows only."""
    import torch
    from torch import nn

    from carb.design.zoo_features import hidden_copy_bytes
    from carb.model.zoo_latency import additive_terms

    class Net(nn.Module):
        def __init__(self, strided: bool):
            super().__init__()
            self.strided, self.norm = strided, nn.LayerNorm(3)

        def forward(self, x):   # x: (1, 3, 8, 8)
            y = x.permute(0, 2, 3, 1) if self.strided else x.permute(0, 2, 3, 1).contiguous()
            y = self.norm(y)                      # (1, 8, 8, 3): 192 elements
            s = y.permute(0, 3, 1, 2) if self.strided else y.permute(0, 3, 1, 2).contiguous()
            return torch.softmax(s, dim=-1) + s   # softmax over 192 elements; the add never copies

    assert hidden_copy_bytes(Net(True), 8) == {"bytes_hidden_copy": 2 * 2 * 4 * 192.0, "n_hidden_copy": 2.0}
    assert hidden_copy_bytes(Net(False), 8) == {"bytes_hidden_copy": 0.0, "n_hidden_copy": 0.0}
    frame = _additive_frame(0)
    frame["tr_bytes_hidden_copy"] = 1e6
    on, off = additive_terms(frame, hidden_copies=True), additive_terms(frame)
    assert np.allclose(on["mb_copy"], off["mb_copy"] + 1.0) and list(on.columns) == list(off.columns)
    cpu = additive_terms(frame.assign(device_kind="cpu"), hidden_copies=True)
    assert np.allclose(cpu["mb_copy"], off["mb_copy"])


def test_dw_on_native_follows_pytorchs_cudnn_depthwise_rule():
    """``dw_on_native``: PyTorch's rule (cuDNN >= 8.2, fp16 NCHW, batch > 1) keeps a depthwise convolution off cuDNN
    for a 7x7 kernel (FastViT, ConvNeXt), a non-square one, fewer than 32 channels, a map narrower than 7, and a
    stride-2 3x3 with fewer than 256 channels (512 on a map narrower than 28); a 3x3 at stride 1 goes to cuDNN."""
    from carb.design.zoo_features import dw_on_native

    assert dw_on_native((1, 48, 64, 64), (48, 1, 7, 7), (1, 1))
    assert not dw_on_native((1, 48, 64, 64), (48, 1, 3, 3), (1, 1))
    assert not dw_on_native((1, 96, 32, 32), (96, 1, 5, 5), 1)
    assert dw_on_native((1, 96, 32, 32), (96, 1, 1, 5), (1, 1))
    assert dw_on_native((1, 16, 32, 32), (16, 1, 3, 3), (1, 1))
    assert dw_on_native((1, 384, 4, 4), (384, 1, 3, 3), (1, 1))
    assert dw_on_native((1, 48, 128, 128), (48, 1, 3, 3), (2, 2))
    assert not dw_on_native((1, 512, 14, 14), (512, 1, 3, 3), (2, 2))
    assert not dw_on_native((1, 256, 28, 28), (256, 1, 5, 5), (2, 2))
    assert dw_on_native((1, 256, 14, 14), (256, 1, 3, 3), (2, 2))
    assert not dw_on_native((1, 64), (10, 64), None)


def test_gpu_parts_native_depthwise_and_group_norm_reads_reach_the_additive_terms():
    """``gpu_parts``: ``flops_conv_dw_native`` sums the depthwise FLOPs off cuDNN (a 7x7 and a 1x5, not a 3x3),
    ``bytes_norm_group_read`` the bytes group norms read (not a layer norm's). ``dw_native`` puts the former in
    ``gflop_conv_dw_nonsquare``; ``gn_reread`` adds the latter to the fp32 norm bytes on autocast GPU rows only."""
    from carb.model.zoo_latency import additive_terms, gpu_parts

    table = pd.DataFrame({"kind": ["conv_depthwise", "conv_depthwise", "conv_depthwise", "norm", "norm"],
                          "op": ["convolution"] * 3 + ["native_group_norm", "native_layer_norm"],
                          "in_shape": [(1, 64, 16, 16)] * 5,
                          "weight_shape": [(64, 1, 7, 7), (64, 1, 1, 5), (64, 1, 3, 3), (64,), (64,)],
                          "stride": [(1, 1)] * 3 + [None, None], "out_shape": [(1, 64, 16, 16)] * 5,
                          "flops": [1e6, 2e6, 4e6, 8e6, 16e6], "bytes_read": [1.0, 2.0, 4.0, 100.0, 200.0]})
    parts = gpu_parts(table)
    assert parts["flops_conv_dw_native"] == 3e6 and parts["flops_conv_dw_nonsquare"] == 2e6
    assert parts["bytes_norm_group_read"] == 100.0
    frame = _additive_frame(0).assign(device_kind="gpu", timm_precision="amp_fp16", tr_flops_conv_dw_nonsquare=1e9,
                                      tr_flops_conv_dw_native=3e9, tr_bytes_norm_fp32=2e6,
                                      tr_bytes_elementwise_param=0.0, tr_bytes_norm_group_read=1e6)
    frame["tr_bytes_norm"] = frame["tr_bytes_norm"] + 2e6
    off = additive_terms(frame, amp_split=True, dw_nonsquare=True)
    on = additive_terms(frame, amp_split=True, dw_nonsquare=True, dw_native=True, gn_reread=True)
    assert np.allclose(on["gflop_conv_dw_nonsquare"], 1.0) and np.allclose(on["gflop_conv_dw_native"], 2.0)
    assert "gflop_conv_dw_native" not in off.columns
    assert np.allclose(on["mb_norm_fp32"], off["mb_norm_fp32"] + 1.0) and np.allclose(on["mb_norm"], off["mb_norm"])
    cpu = additive_terms(frame.assign(device_kind="cpu"), amp_split=True, gn_reread=True)
    assert np.allclose(cpu["mb_norm_fp32"], off["mb_norm_fp32"])


def test_cuda_layout_switch_reads_the_cuda_layout_columns():
    """``cuda_layout``: ``hidden_copies`` adds ``tr_bytes_hidden_copy_cl`` (not the meta ``tr_bytes_hidden_copy``) to
    the copies, ``dw_native`` prices ``tr_flops_conv_dw_native_cl``; off, or without those columns, the meta ones."""
    from carb.model.zoo_latency import additive_terms

    frame = _additive_frame(0).assign(device_kind="gpu", timm_precision="fp32", tr_flops_conv_dw_nonsquare=1e9,
                                      tr_flops_conv_dw_native=3e9, tr_flops_conv_dw_native_cl=1e9,
                                      tr_bytes_hidden_copy=4e6, tr_bytes_hidden_copy_cl=1e6)
    kw = {"dw_nonsquare": True, "dw_native": True, "hidden_copies": True}
    none = additive_terms(frame, dw_nonsquare=True, dw_native=True)
    meta, cl = additive_terms(frame, **kw), additive_terms(frame, **kw, cuda_layout=True)
    assert np.allclose(meta["mb_copy"], none["mb_copy"] + 4.0) and np.allclose(cl["mb_copy"], none["mb_copy"] + 1.0)
    assert np.allclose(meta["gflop_conv_dw_native"], 2.0) and np.allclose(cl["gflop_conv_dw_native"], 0.0)
    old = frame.drop(columns=["tr_bytes_hidden_copy_cl", "tr_flops_conv_dw_native_cl"])
    assert np.allclose(additive_terms(old, **kw, cuda_layout=True)["mb_copy"], meta["mb_copy"])

def test_hidden_copy_bytes_with_cuda_layout_keeps_channels_last_through_a_convolution():
    """A LayerNorm2d (permute, layer norm, permute back) hands a depthwise convolution a channels-last view; on a GPU
    its output stays channels-last, so the next permuted layer norm reads a contiguous input (ConvNeXt's block): with
    ``cuda_layout`` only the first layer norm's input (a permuted NCHW map) is copied, without it both are."""
    from torch import nn

    from carb.design.zoo_features import hidden_copy_bytes

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.dw = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.n1, self.n2 = nn.LayerNorm(8), nn.LayerNorm(8)

        def forward(self, x):   # x: (1, 3, 4, 4)
            y = self.n1(self.stem(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)   # 128 elements, a strided input
            return self.n2(self.dw(y).permute(0, 2, 3, 1))

    assert hidden_copy_bytes(Net(), 4) == {"bytes_hidden_copy": 2 * 2 * 4 * 128.0, "n_hidden_copy": 2.0}
    assert hidden_copy_bytes(Net(), 4, cuda_layout=True) == {"bytes_hidden_copy": 2 * 4 * 128.0, "n_hidden_copy": 1.0,
                                                             "flops_conv_dw_native": 0.0}


def test_hidden_copy_bytes_with_cuda_layout_counts_depthwise_flops_off_cudnn():
    """``flops_conv_dw_native``: a 7x7 depthwise convolution on an NCHW map runs on PyTorch's kernel (2 x 32 x 49
    x 8 x 8 FLOPs), the same on a channels-last map (after a permuted layer norm) goes to cuDNN, a 3x3 too."""
    from torch import nn

    from carb.design.zoo_features import hidden_copy_bytes

    class Net(nn.Module):
        def __init__(self, channels_last: bool, k: int):
            super().__init__()
            self.cl, self.stem = channels_last, nn.Conv2d(3, 32, 1)
            self.dw, self.norm = nn.Conv2d(32, 32, k, padding=k // 2, groups=32), nn.LayerNorm(32)

        def forward(self, x):   # x: (1, 3, 8, 8)
            y = self.stem(x)
            if self.cl:
                y = self.norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            return self.dw(y)

    assert hidden_copy_bytes(Net(False, 7), 8, cuda_layout=True)["flops_conv_dw_native"] == 2 * 32 * 49 * 64.0
    assert hidden_copy_bytes(Net(True, 7), 8, cuda_layout=True)["flops_conv_dw_native"] == 0.0
    assert hidden_copy_bytes(Net(False, 3), 8, cuda_layout=True)["flops_conv_dw_native"] == 0.0
