"""The CPU terms of the zoo latency model (:mod:`carb.model.zoo_latency_cpu`) and the per-device settings of
``conf/zoo_latency/default.yaml`` that give them to timm's CPU file only; synthetic layer tables and rows."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb.errors import DatasetError
from carb.model.zoo_latency import AdditiveBase, ZooLatencyModel, additive_terms
from carb.model.zoo_latency_cpu import THRESHOLD_KEYS, cpu_terms
from carb.model.zoo_latency_cpu import cpu_parts as _cpu_parts

ROOT = Path(__file__).resolve().parents[1]


def _conf_thresholds() -> dict[str, float]:
    """``conf/zoo_latency/default.yaml``'s ``cpu_parts`` (the shipped thresholds), read as YAML."""
    import yaml

    return {k: float(v) for k, v in yaml.safe_load((ROOT / "conf/zoo_latency/default.yaml").read_text())["cpu_parts"].items()}


T = _conf_thresholds()
CACHE_BYTES = T["cache_MB"] * 1e6


def cpu_parts(table: pd.DataFrame, **override: float) -> dict[str, float]:
    """:func:`carb.model.zoo_latency_cpu.cpu_parts` at the conf's thresholds, ``override``'s keys (conf units) set."""
    return _cpu_parts(table, T | override)


def _table(batch: int = 1) -> pd.DataFrame:
    """A layer table at ``batch``: a 3x3 convolution at 56x56 (weights reused 3136 times per image), a
    classifier head (each weight used once per image), VGG's 7x7 fully connected convolution (once), a
    ReLU moving 20 MB (beyond the cache) and one moving 1 MB, a pooling of 2 MB."""
    rows = [("conv_regular", 2 * 3136 * 36864 * batch, 1e6, 1e6, 36864 * 4, 36864),
            ("linear", 2 * 2049000 * batch, 8.2e6, 4e3, 2049000 * 4, 2049000),
            ("conv_regular", 2 * 102764544 * batch, 411e6, 16e3, 102764544 * 4, 102764544),
            ("activation", 0, 10e6 * batch, 10e6 * batch, 0, 0),
            ("activation", 0, 0.5e6 * batch, 0.5e6 * batch, 0, 0),
            ("pool", 0, 1.9e6 * batch, 0.1e6 * batch, 0, 0)]
    t = pd.DataFrame(rows, columns=["kind", "flops", "bytes_read", "bytes_written", "param_bytes", "params"])
    t.attrs = {"input_shape": (batch, 3, 224, 224), "precision": "fp32"}
    return t


def test_cpu_parts_counts_weights_used_a_few_times_and_memory_bound_bytes_beyond_the_cache():
    """The head and VGG's fully connected convolution are weight-streaming (used < 8 times per image, at any
    batch); the 3x3 convolution is not; only the memory-bound row beyond the cache counts as DRAM bytes."""
    parts = cpu_parts(_table())
    assert parts["bytes_weight_lowreuse"] == (2049000 + 102764544) * 4
    assert parts["bytes_weight_lowreuse_dram"] == 102764544 * 4   # the 8 MB head fits the cache, VGG's layer not
    assert 2e6 < CACHE_BYTES < 20e6 and parts["bytes_membound_dram"] == 20e6
    assert cpu_parts(_table(batch=8))["bytes_weight_lowreuse"] == parts["bytes_weight_lowreuse"]   # per image
    assert cpu_parts(_table(), low_reuse=1e4)["bytes_weight_lowreuse"] == (36864 + 2049000 + 102764544) * 4
    assert cpu_parts(_table(), cache_MB=1.5)["bytes_membound_dram"] == 22e6


def test_cpu_parts_of_a_traced_module(tmp_path, monkeypatch):
    """On the tracer's own table (meta device): a classifier's linear layer counts, its convolution does not."""
    torch = pytest.importorskip("torch")
    from carb.design.trace import trace

    monkeypatch.setenv("CARB_CACHE", str(tmp_path))
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(8, 10))
    parts = cpu_parts(trace(net, (1, 3, 32, 32)))
    assert parts["bytes_weight_lowreuse"] == (8 * 10 + 10) * 4 and parts["bytes_weight_lowreuse_dram"] == 0.0
    assert parts["bytes_membound_dram"] == 0.0


def _ops_table() -> pd.DataFrame:
    """A layer table (batch 1) in a ConvNeXt / LayerNorm2d block's order: a 7x7 depthwise convolution, a
    permute to NHWC, a layer norm of the permuted (1, 56, 56, 96) map (1.2 MB read, 1.2 MB written, 768 B of
    parameters), a linear layer, a GELU, a second linear layer, a permute back, a residual add; then a
    layer norm of token rows (1, 196, 384) after a permute (3-D: not a channel norm of a map) and a layer
    norm of a 4-D (1, 4, 196, 64) map after an add (not after a permute), a permuted (1, 14, 14, 48) map's
    norm moving 80 kB (within a core's L2 cache), an attention call and a matrix product."""
    rows = [("convolution", "conv_depthwise", (1, 96, 56, 56), 1.2e6, 1.2e6, 18816),
            ("permute", "reshape", (1, 96, 56, 56), 0.0, 0.0, 0),
            ("native_layer_norm", "norm", (1, 56, 56, 96), 1.2e6 + 768, 1.2e6, 768),
            ("addmm", "linear", (1, 56, 56, 96), 1.3e6, 4.8e6, 148992),
            ("gelu", "activation", (1, 56, 56, 384), 4.8e6, 4.8e6, 0),
            ("addmm", "linear", (1, 56, 56, 384), 5.0e6, 1.2e6, 147840),
            ("permute", "reshape", (1, 56, 56, 96), 0.0, 0.0, 0),
            ("add", "elementwise", (1, 96, 56, 56), 2.4e6, 1.2e6, 0),
            ("permute", "reshape", (1, 384, 196), 0.0, 0.0, 0),
            ("native_layer_norm", "norm", (1, 196, 384), 0.3e6, 0.3e6, 3072),
            ("add", "elementwise", (1, 4, 196, 64), 0.4e6, 0.2e6, 0),
            ("native_layer_norm", "norm", (1, 4, 196, 64), 0.2e6, 0.2e6, 512),
            ("permute", "reshape", (1, 48, 14, 14), 0.0, 0.0, 0),
            ("native_layer_norm", "norm", (1, 14, 14, 48), 0.04e6, 0.04e6, 384),
            ("scaled_dot_product_attention", "sdpa", (1, 4, 196, 64), 0.6e6, 0.2e6, 0),
            ("bmm", "matmul", (1, 196, 384), 0.3e6, 0.3e6, 0)]
    t = pd.DataFrame(rows, columns=["op", "kind", "in_shape", "bytes_read", "bytes_written", "param_bytes"])
    t["flops"], t["params"] = 1e6, t["param_bytes"] / 4
    t.attrs = {"input_shape": (1, 3, 224, 224), "precision": "fp32"}
    return t


def test_cpu_parts_counts_library_kernel_calls_and_permuted_channel_norms():
    """Every convolution, linear layer, attention call and matrix product is one library kernel call (5 here;
    the fused-loop kinds and views are none); the layer norms of the permuted 4-D maps are channel norms of
    a permuted map, and the one moving more than a core's L2 cache counts its activation bytes (not its
    parameters); a table without ``op`` / ``in_shape`` has none."""
    from carb.model.zoo_latency_cpu import permuted_norm_rows

    t = _ops_table()
    parts = cpu_parts(t)
    assert parts["n_extern_calls"] == 5.0
    assert permuted_norm_rows(t).tolist() == [i in (2, 13) for i in range(len(t))]
    assert parts["bytes_norm_permuted"] == 2.4e6
    assert cpu_parts(t, l2_MB=1e-2)["bytes_norm_permuted"] == 2.48e6 - 384   # its parameters left out
    assert cpu_parts(_table())["n_extern_calls"] == 3.0 and cpu_parts(_table())["bytes_norm_permuted"] == 0.0


def test_cpu_terms_extern_calls_per_batch_and_norm_permuted_per_image():
    """``extern_calls`` is calls per image (calls once per batch / batch, not MB), ``norm_permuted`` MB per
    image."""
    frame = pd.DataFrame({"batch_size": [1, 4], "tr_n_extern_calls": [120.0, 120.0],
                          "tr_bytes_norm_permuted": [20e6, 20e6]})
    t = cpu_terms(frame, ["extern_calls", "norm_permuted"])
    assert list(t.columns) == ["extern_calls_per_image", "mb_norm_permuted"]
    assert np.allclose(t["extern_calls_per_image"], [120, 30]) and np.allclose(t["mb_norm_permuted"], [20, 20])


def test_cpu_terms_from_trace_columns_and_bad_names():
    """``weight_lowreuse`` is read once per batch (MB / batch), ``membound_dram`` per image; an unknown term
    or a frame without the column is one line."""
    frame = pd.DataFrame({"batch_size": [1, 4], "tr_bytes_weight_lowreuse": [400e6, 400e6],
                          "tr_bytes_weight_lowreuse_dram": [300e6, 300e6], "tr_bytes_membound_dram": [30e6, 30e6]})
    t = cpu_terms(frame, ["weight_lowreuse", "weight_lowreuse_dram", "membound_dram"])
    assert list(t.columns) == ["mb_weight_lowreuse", "mb_weight_lowreuse_dram", "mb_membound_dram"]
    assert np.allclose(t["mb_weight_lowreuse"], [400, 100]) and np.allclose(t["mb_weight_lowreuse_dram"], [300, 75])
    assert np.allclose(t["mb_membound_dram"], [30, 30])
    with pytest.raises(DatasetError, match="'gemv' is not allowed; allowed: weight_lowreuse, weight_lowreuse_dram"):
        cpu_terms(frame, ["gemv"])
    with pytest.raises(DatasetError, match="tr_bytes_weight_lowreuse") as e:
        cpu_terms(frame.drop(columns="tr_bytes_weight_lowreuse"), ["weight_lowreuse"])
    assert "\n" not in str(e.value)


def _weights_frame(seed: int = 0) -> pd.DataFrame:
    """:func:`tests.test_timm_zoo._additive_frame`'s rows and law plus 0.2 ms per MB of weights used a few
    times (a CPU at batch 1 streaming a classifier head); the held-out family ``g`` has VGG-sized ones
    (300-500 MB), the others 1-10 MB."""
    from tests.test_timm_zoo import _additive_frame

    rng = np.random.default_rng(seed)
    out = _additive_frame(seed)
    heavy = (out["family"] == "g").to_numpy()
    out["tr_bytes_weight_lowreuse"] = np.where(heavy, rng.uniform(300e6, 500e6, len(out)),
                                               rng.uniform(1e6, 10e6, len(out)))
    out["tr_bytes_membound_dram"] = 0.0
    return out.assign(latency_ms=out["latency_ms"] + 0.2 * out["tr_bytes_weight_lowreuse"] / 1e6)


def _held_out_bias(frame: pd.DataFrame, term: str) -> dict[str, float]:
    """Mean log(predicted / measured) latency per image on the held-out family ``g`` of the additive base fitted
    on the other families with ``cpu_terms=("weight_lowreuse", term)`` (``with``) and ``("weight_lowreuse",)``
    (``without``)."""
    from tests.test_timm_zoo import _held_out_log_error

    return {name: float(np.mean(_held_out_log_error(frame, cpu_terms=terms)))
            for name, terms in (("with", ("weight_lowreuse", term)), ("without", ("weight_lowreuse",)))}


def _shipped_cpu_rows(column: str) -> pd.DataFrame:
    """The rows of the shipped layer-table features (``carb/data/timm-zoo-trace.parquet``) that have the CPU
    column ``column``: checked to be the 1435 plain-graph rows of timm's CPU file, the same rows as the other
    CPU columns' (``n_extern_calls``; NaN elsewhere)."""
    tr = pd.read_parquet(ROOT / "carb" / "data" / "timm-zoo-trace.parquet")
    on = tr[column].notna().to_numpy()
    assert on.sum() == 1435 and (tr["n_extern_calls"].notna().to_numpy() == on).all()
    return tr[on]


def test_additive_base_with_the_weight_term_carries_weight_streaming_to_a_held_out_family():
    """A held-out family whose time is mostly weights used once (VGG's fully connected convolutions on a CPU
    at batch 1): with ``cpu_terms=("weight_lowreuse",)`` the base carries the law to it; without (the GPU
    files' law) it cannot; without the setting the terms are the old ones."""
    from tests.test_timm_zoo import _held_out_mape

    frame = _weights_frame()
    assert list(AdditiveBase().terms(frame).columns) == list(additive_terms(frame).columns)
    test = (frame["family"] == "g").to_numpy()
    err = {name: _held_out_mape(frame, cpu_terms=terms) for name, terms in (("with", ("weight_lowreuse",)),
                                                                           ("without", ()))}
    assert err["with"] < 0.02 < 0.2 < err["without"]
    with_term = AdditiveBase(huber=None, cpu_terms=("weight_lowreuse",)).fit(frame[~test])
    assert with_term.costs()["mb_weight_lowreuse"] == pytest.approx(0.2, rel=0.05)
    model = ZooLatencyModel(n_estimators=20, min_child_samples=5, cpu_terms=["weight_lowreuse"]).fit(frame[~test])
    assert model.tbase_.cpu_terms == ("weight_lowreuse",) and "mb_weight_lowreuse" in model.tbase_.terms_
    assert ZooLatencyModel().cpu_terms == ()


def _bench():
    """``scripts/bench/zoo.py`` as a module."""
    spec = importlib.util.spec_from_file_location("zoo_bench_cpu", ROOT / "scripts/bench/zoo.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_per_device_settings_apply_to_their_device_kind_only(tmp_path, capsys):
    """The conf's ``per_device.cpu`` gives the CPU file its terms; a GPU's settings (and the settings without
    a kind) are the shared keys alone, as before; a ``--zoo-latency`` key wins over the section; a bad term
    in the section is one line, exit 2."""
    bench = _bench()
    shared = bench.zoo_latency_settings([])
    assert "per_device" not in shared and "cpu_terms" not in shared
    assert bench.zoo_latency_settings([], device_kind="gpu") == shared
    cpu = bench.zoo_latency_settings([], device_kind="cpu")
    assert cpu["cpu_terms"] == ["weight_lowreuse", "weight_lowreuse_dram", "extern_calls", "norm_permuted",
                                "depthwise_dram", "matmul_spill", "pointwise_fused", "conv_weight_dram", "concat_copy",
                                "conv_permuted", "linear_wide", "concat_calls", "copy_dense", "group_norm_multi"]
    assert cpu["gemm_regimes"] is False and shared["gemm_regimes"] is True
    bound = {"margin": 0.0, "outside": "clip", "nested_margin": True}   # z43gpu2: the CPU file keeps the old bound
    assert {k: v for k, v in cpu.items() if k != "cpu_terms"} == shared | {"gemm_regimes": False} | bound
    ZooLatencyModel(**cpu)
    assert bench.zoo_latency_settings(["gemm_regimes=true"], device_kind="cpu")["gemm_regimes"] is True
    conf = (ROOT / "conf/zoo_latency/default.yaml").read_text()
    path = tmp_path / "zl.yaml"
    path.write_text(conf.replace("cpu_terms: [weight_lowreuse, weight_lowreuse_dram, extern_calls, norm_permuted, "
                                 "depthwise_dram, matmul_spill,\n                pointwise_fused, conv_weight_dram, concat_copy, conv_permuted, linear_wide, concat_calls, "
                                 "copy_dense,\n                group_norm_multi]",
                                 "cpu_terms: [gemv]"))
    assert path.read_text() != conf
    with pytest.raises(SystemExit) as e:
        bench.zoo_latency_settings([], path=path, device_kind="cpu")
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("--zoo-latency: ") and "cpu_terms" in err and "\n" not in err


def test_one_list_of_compute_and_memory_bound_kinds_owned_by_the_tracer():
    """The GPU and CPU latency modules read the tracer's kind lists (one object each), which split the tracer's
    kinds with FLOPs from the memory-bound ones; on a synthetic table every compute row is a library call and
    the memory-bound rows beyond the cache count as DRAM bytes, whatever their kind."""
    from carb.design import trace
    from carb.model import zoo_latency, zoo_latency_cpu

    assert zoo_latency.TRACE_COMPUTE_KINDS is trace.COMPUTE_KINDS is zoo_latency_cpu.EXTERN_KINDS
    assert zoo_latency.TRACE_MEMORY_KINDS is trace.MEMORY_BOUND_KINDS is zoo_latency_cpu.MEMORY_KINDS
    compute, memory = set(trace.COMPUTE_KINDS), set(trace.MEMORY_BOUND_KINDS)
    assert compute | memory <= set(trace.KINDS) and not compute & memory
    assert set(trace.CONV_KINDS) <= compute and {"reshape", "other"}.isdisjoint(compute | memory)
    kinds = list(trace.KINDS)
    t = pd.DataFrame({"kind": kinds, "flops": 0.0, "bytes_read": 10e6, "bytes_written": 10e6, "param_bytes": 0.0,
                      "params": 0.0})
    t.attrs = {"input_shape": (1, 3, 224, 224)}
    parts = cpu_parts(t)
    assert parts["n_extern_calls"] == len(compute)
    assert parts["bytes_membound_dram"] == 20e6 * len(memory)


def test_cpu_parts_counts_depthwise_convolutions_beyond_the_cache():
    """Only the depthwise convolutions whose activations read + written exceed the cache count (their activation
    bytes, weights left out): a 3x3 depthwise convolution over 1024 channels at 56x56 (12.8 MB in, 12.8 MB out),
    not one at 14x14, nor a regular convolution or a ReLU of the same size; the term is MB per image."""
    dw_big, dw_small = 1024 * 56 * 56 * 4, 1024 * 14 * 14 * 4
    w = 1024 * 9 * 4
    rows = [("conv_depthwise", 2 * 1024 * 9 * 3136, dw_big + w, dw_big, w, 1024 * 9),
            ("conv_depthwise", 2 * 1024 * 9 * 196, dw_small + w, dw_small, w, 1024 * 9),
            ("conv_regular", 2 * 3136 * 36864, dw_big + 147456, dw_big, 147456, 36864),
            ("activation", 0, dw_big, dw_big, 0, 0)]
    t = pd.DataFrame(rows, columns=["kind", "flops", "bytes_read", "bytes_written", "param_bytes", "params"])
    t.attrs = {"input_shape": (1, 3, 224, 224)}
    assert 2 * dw_small < CACHE_BYTES < 2 * dw_big
    assert cpu_parts(t)["bytes_depthwise_dram"] == 2 * dw_big
    assert cpu_parts(t, cache_MB=0.1)["bytes_depthwise_dram"] == 2 * dw_big + 2 * dw_small
    assert cpu_parts(_table())["bytes_depthwise_dram"] == 0.0
    frame = pd.DataFrame({"batch_size": [1, 4], "tr_bytes_depthwise_dram": [25.7e6, 25.7e6]})
    assert np.allclose(cpu_terms(frame, ["depthwise_dram"])["mb_depthwise_dram"], [25.7, 25.7])


def test_additive_base_with_the_depthwise_term_carries_dram_depthwise_time_to_a_held_out_family():
    """A held-out family whose depthwise convolutions stream 50-150 MB from DRAM (MobileOne's and ViTamin's
    wide maps) at 0.05 ms per MB on top of the per-kind law: with ``depthwise_dram`` the base carries it there;
    without it the other terms take that time and miss the family."""
    rng = np.random.default_rng(1)
    frame = _weights_frame(1)
    heavy = (frame["family"] == "g").to_numpy()
    frame["tr_bytes_depthwise_dram"] = np.where(heavy, rng.uniform(50e6, 150e6, len(frame)),
                                                rng.uniform(0, 30e6, len(frame)))
    frame["latency_ms"] = frame["latency_ms"] + 0.05 * frame["tr_bytes_depthwise_dram"] / 1e6 * frame["batch_size"]
    err = _held_out_bias(frame, "depthwise_dram")
    assert abs(err["with"]) < 0.02 < 0.05 < abs(err["without"])


def test_shipped_trace_table_has_the_depthwise_dram_column_on_the_cpu_rows():
    """``bytes_depthwise_dram`` of the shipped layer-table features: on the 1435 plain-graph rows of timm's CPU
    file (NaN elsewhere, like the other CPU columns), 0 where a network has no depthwise convolution, never
    more than the depthwise convolutions' bytes, positive on some (ViTamin's MbConv stages)."""
    t = _shipped_cpu_rows("bytes_depthwise_dram")
    dw = t["bytes_depthwise_dram"].to_numpy(float)
    assert (dw >= 0).all() and (dw <= t["bytes_conv_depthwise"].to_numpy(float)).all()
    assert (dw[t["flops_conv_depthwise"].to_numpy(float) == 0] == 0).all()
    assert (dw[t["model"].str.startswith("vitamin_").to_numpy()] > 16e6).all()


def _pointwise_table() -> pd.DataFrame:
    """A layer table (batch 1) with two runs of point-wise rows: a convolution writing 4 MB; an EvoNorm-like
    chain of a norm, a view, three element-wise operations and an activation over those 4 MB (one run: the view
    does not break it); a convolution; a ReLU (a run of one row); a concatenation (not a fused kind)."""
    m = 4e6
    rows = [("conv_regular", 1e9, 1e6, m), ("norm", 0, m, m), ("reshape", 0, 0, 0), ("elementwise", 0, 2 * m, m),
            ("elementwise", 0, m, m), ("elementwise", 0, m, m), ("activation", 0, m, m),
            ("conv_pointwise", 1e8, m, m), ("activation", 0, m, m), ("concat", 0, 2 * m, 2 * m)]
    t = pd.DataFrame(rows, columns=["kind", "flops", "bytes_read", "bytes_written"])
    t["param_bytes"], t["params"] = 0.0, 0.0
    t.attrs = {"input_shape": (1, 3, 224, 224)}
    return t


def test_pointwise_runs_read_their_input_and_write_their_output_once():
    """Each run of norm / activation / element-wise rows (views inside allowed) moves its first row's reads and
    its last row's writes: 8 MB for the six-row chain (the per-kind bytes of the point-wise rows count 52 MB in
    all), 8 MB for the lone ReLU;
    a concatenation and the convolutions are not in any run; a run that ends the table counts too."""
    from carb.model.zoo_latency_cpu import pointwise_run_bytes

    t = _pointwise_table()
    pointwise = t["kind"].isin(["norm", "activation", "elementwise"])
    per_kind = float((t["bytes_read"] + t["bytes_written"])[pointwise].sum())
    assert per_kind == 52e6 and pointwise_run_bytes(t) == 16e6
    assert cpu_parts(t)["bytes_pointwise_fused"] == 16e6
    assert pointwise_run_bytes(t.iloc[:7]) == 8e6   # the table ends inside the first run
    broken = t.copy()
    broken.loc[4, "kind"] = "conv_depthwise"   # a library call inside the chain splits it in two runs
    assert pointwise_run_bytes(broken) == 8e6 + 8e6 + 8e6


def test_pointwise_fused_replaces_the_per_kind_pointwise_terms():
    """``pointwise_fused`` is MB per image of the fused runs and stands for ``mb_norm``, ``mb_activation`` and
    ``mb_elementwise`` (the additive base must drop them where it takes the term); the other CPU terms replace
    nothing."""
    from carb.model.zoo_latency_cpu import REPLACED_TERMS, replaced_terms

    frame = pd.DataFrame({"batch_size": [1, 8], "tr_bytes_pointwise_fused": [16e6, 16e6],
                          "tr_bytes_depthwise_dram": [0.0, 0.0]})
    assert np.allclose(cpu_terms(frame, ["pointwise_fused"])["mb_pointwise_fused"], [16.0, 16.0])   # per image
    assert replaced_terms(["depthwise_dram", "pointwise_fused", "pointwise_fused"]) == (
        "mb_norm", "mb_activation", "mb_elementwise")
    assert replaced_terms(["weight_lowreuse", "extern_calls", "depthwise_dram"]) == ()
    assert set(REPLACED_TERMS["pointwise_fused"]) <= set(additive_terms(_weights_frame()).columns)


def test_shipped_trace_table_has_the_pointwise_fused_column_on_the_cpu_rows():
    """``bytes_pointwise_fused`` of the shipped layer-table features: on the 1435 plain-graph rows of timm's CPU
    file (NaN elsewhere, like the other CPU columns), never more than the per-kind norm, activation and
    element-wise bytes it stands for, and a smaller share of them on RegNetZ's EvoNorm models (long fused chains)
    than on the other networks (median)."""
    t = _shipped_cpu_rows("bytes_pointwise_fused")
    fused = t["bytes_pointwise_fused"].to_numpy(float)
    per_kind = sum(t[f"bytes_{k}"].to_numpy(float) for k in ("norm", "activation", "elementwise"))
    assert (fused >= 0).all() and (fused <= per_kind * (1 + 1e-9)).all()
    evos = t["model"].str.contains("_evos").to_numpy()
    share = fused / per_kind
    assert evos.any() and np.median(share[evos]) < 0.5 * np.median(share[~evos])


def test_cpu_parts_counts_explicit_matrix_products_beyond_the_spill_size():
    """Only the explicit matrix products (``matmul``: attention scores outside SDPA) whose activations read +
    written exceed ``spill_MB`` (conf) count (activation bytes): CaiT-like scores of 16 heads x 576 x 576 tokens
    (21 MB written), not a 196-token product, nor attention through SDPA or a linear layer of the same size."""
    SPILL_BYTES = T["spill_MB"] * 1e6

    big, small = 16 * 576 * 576 * 4, 16 * 196 * 196 * 4
    qk_big, qk_small = 2 * 16 * 576 * 48 * 4, 2 * 16 * 196 * 48 * 4
    rows = [("matmul", 2 * 16 * 576 * 576 * 48, qk_big, big, 0, 0),
            ("matmul", 2 * 16 * 196 * 196 * 48, qk_small, small, 0, 0),
            ("sdpa", 4 * 16 * 576 * 576 * 48, qk_big, big, 0, 0),
            ("linear", 2 * 576 * 768 * 768, qk_big, big, 768 * 768 * 4, 768 * 768)]
    t = pd.DataFrame(rows, columns=["kind", "flops", "bytes_read", "bytes_written", "param_bytes", "params"])
    t.attrs = {"input_shape": (1, 3, 384, 384)}
    assert qk_small + small < SPILL_BYTES < qk_big + big
    assert cpu_parts(t)["bytes_matmul_spill"] == qk_big + big
    assert cpu_parts(t, spill_MB=0.1)["bytes_matmul_spill"] == qk_big + big + qk_small + small
    assert cpu_parts(_table())["bytes_matmul_spill"] == 0.0
    frame = pd.DataFrame({"batch_size": [1, 4], "tr_bytes_matmul_spill": [24e6, 24e6]})
    assert np.allclose(cpu_terms(frame, ["matmul_spill"])["mb_matmul_spill"], [24.0, 24.0])   # per image


def test_additive_base_with_the_spill_term_carries_attention_scores_to_a_held_out_family():
    """A held-out family whose explicit attention products move 200-600 MB beyond the spill size (CaiT at 384)
    at 0.05 ms per MB on top of the per-kind law: with ``matmul_spill`` the base carries it there; without it
    the other terms take that time and miss the family."""
    rng = np.random.default_rng(2)
    frame = _weights_frame(2)
    heavy = (frame["family"] == "g").to_numpy()
    frame["tr_bytes_matmul_spill"] = np.where(heavy, rng.uniform(200e6, 600e6, len(frame)),
                                              rng.uniform(0, 60e6, len(frame)))
    frame["latency_ms"] = frame["latency_ms"] + 0.05 * frame["tr_bytes_matmul_spill"] / 1e6 * frame["batch_size"]
    err = _held_out_bias(frame, "matmul_spill")
    assert abs(err["with"]) < 0.02 < 0.05 < abs(err["without"])


def test_shipped_trace_table_has_the_matmul_spill_column_on_the_cpu_rows():
    """``bytes_matmul_spill`` of the shipped layer-table features: on the 1435 plain-graph rows of timm's CPU file
    (NaN elsewhere), 0 where a network has no explicit matrix product, never more than their bytes, positive on
    every Swin V2 (cosine attention written out as products)."""
    t = _shipped_cpu_rows("bytes_matmul_spill")
    mm = t["bytes_matmul_spill"].to_numpy(float)
    assert (mm >= 0).all() and (mm <= t["bytes_matmul"].to_numpy(float)).all()
    assert (mm[t["flops_matmul"].to_numpy(float) == 0] == 0).all()
    assert (mm[t["model"].str.startswith("swinv2_").to_numpy()] > 0).all()


def test_additive_base_prices_fused_pointwise_runs_in_place_of_the_per_kind_bytes():
    """A law where point-wise operations cost what their fused runs move (0.2 ms per MB), not their per-kind
    bytes: the held-out family ``g`` has long chains (runs 4-8x smaller than the per-kind bytes, EvoNorm-like),
    the others short ones (1.5-2x). With ``pointwise_fused`` the base drops ``mb_norm`` / ``mb_activation`` /
    ``mb_elementwise`` and carries the law to ``g``; with the per-kind terms it over-predicts ``g``."""
    rng = np.random.default_rng(3)
    frame = _weights_frame(3)
    heavy = (frame["family"] == "g").to_numpy()
    b = frame["batch_size"].to_numpy(float)
    per_kind = sum(frame[f"tr_bytes_{k}"].to_numpy(float) for k in ("norm", "activation", "elementwise"))
    frame["tr_bytes_pointwise_fused"] = per_kind / np.where(heavy, rng.uniform(4, 8, len(frame)),
                                                            rng.uniform(1.5, 2, len(frame)))
    frame["latency_ms"] = (frame["latency_ms"] - 0.002 * frame["tr_bytes_activation"] / 1e6 * b
                           + 0.2 * frame["tr_bytes_pointwise_fused"] / 1e6 * b)
    err = _held_out_bias(frame, "pointwise_fused")
    with_term = AdditiveBase(huber=None, cpu_terms=("pointwise_fused",)).fit(frame[~heavy])
    assert "mb_pointwise_fused" in with_term.terms_
    assert not {"mb_norm", "mb_activation", "mb_elementwise"} & set(with_term.terms_)
    assert abs(err["with"]) < 0.02 < 0.05 < err["without"]


def _conv_weight_table() -> pd.DataFrame:
    """A layer table (batch 1): SelecSLS's head (a 3x3 convolution 1024 -> 1280 at 4x4: 47 MB of weights, each
    used 16 times per image), the same weights at 56x56 (used 3136 times), an 8 MB convolution at 4x4 (fits the
    cache), VGG's 7x7 fully connected convolution (411 MB used once: ``weight_lowreuse_dram``'s) and a 47 MB
    linear layer over 16 tokens (not a convolution)."""
    w = 1024 * 1280 * 9
    rows = [("conv_regular", 2 * w * 16, 4 * w + 65536, 81920, 4 * w, w),
            ("conv_regular", 2 * w * 3136, 4 * w + 12845056, 16056320, 4 * w, w),
            ("conv_pointwise", 2 * 2e6 * 16, 8e6 + 1e5, 1e5, 8e6, 2e6),
            ("conv_regular", 2 * 102764544, 411e6, 16e3, 102764544 * 4, 102764544),
            ("linear", 2 * w * 16, 4 * w + 65536, 81920, 4 * w, w)]
    t = pd.DataFrame(rows, columns=["kind", "flops", "bytes_read", "bytes_written", "param_bytes", "params"])
    t.attrs = {"input_shape": (1, 3, 224, 224)}
    return t


def test_cpu_parts_counts_convolution_weights_beyond_the_cache_used_a_few_dozen_times():
    """``bytes_conv_weight_dram``: the weights of the convolutions beyond the cache used 8 to 63 times per image
    (SelecSLS's 4x4 head), not the same weights at 56x56, nor a convolution that fits the cache, nor VGG's
    once-used layer (the low-reuse DRAM term's), nor a linear layer; the bounds are arguments; the term is MB
    per batch (weights read once per call)."""
    LOW_REUSE, MID_REUSE = T["low_reuse"], T["mid_reuse"]

    w = 4 * 1024 * 1280 * 9
    assert LOW_REUSE <= 16 < MID_REUSE < 3136 and 8e6 < CACHE_BYTES < w
    parts = cpu_parts(_conv_weight_table())
    assert parts["bytes_conv_weight_dram"] == w
    assert parts["bytes_weight_lowreuse_dram"] == 102764544 * 4
    assert cpu_parts(_conv_weight_table(), mid_reuse=1e4)["bytes_conv_weight_dram"] == 2 * w
    assert cpu_parts(_conv_weight_table(), cache_MB=1.0)["bytes_conv_weight_dram"] == w + 8e6
    assert cpu_parts(_conv_weight_table(), mid_reuse=16)["bytes_conv_weight_dram"] == 0.0
    assert cpu_parts(_table())["bytes_conv_weight_dram"] == 0.0
    frame = pd.DataFrame({"batch_size": [1, 4], "tr_bytes_conv_weight_dram": [47.2e6, 47.2e6]})
    assert np.allclose(cpu_terms(frame, ["conv_weight_dram"])["mb_conv_weight_dram"], [47.2, 11.8])


def test_additive_base_with_the_conv_weight_term_carries_weight_streaming_heads_to_a_held_out_family():
    """A held-out family whose convolutions at 4x4-7x7 stream 80-120 MB of weights (SelecSLS's head) at 0.1 ms
    per MB on top of the per-kind law: with ``conv_weight_dram`` the base carries it there; without it the
    other terms take that time and miss the family."""
    rng = np.random.default_rng(3)
    frame = _weights_frame(3)
    heavy = (frame["family"] == "g").to_numpy()
    frame["tr_bytes_conv_weight_dram"] = np.where(heavy, rng.uniform(80e6, 120e6, len(frame)),
                                                  rng.choice([0.0, 20e6, 40e6], len(frame)))
    frame["latency_ms"] = frame["latency_ms"] + 0.1 * frame["tr_bytes_conv_weight_dram"] / 1e6
    err = _held_out_bias(frame, "conv_weight_dram")
    assert abs(err["with"]) < 0.02 < 0.05 < abs(err["without"])


def test_shipped_trace_table_has_the_conv_weight_dram_column_on_the_cpu_rows():
    """``bytes_conv_weight_dram`` of the shipped layer-table features: on the 1435 plain-graph rows of timm's CPU
    file (NaN elsewhere), never more than the network's parameter bytes, positive on every SelecSLS, 0 on every
    DeiT (linear layers only) and on VGG (its large weights are used once or 196 times and more)."""
    t = _shipped_cpu_rows("bytes_conv_weight_dram")
    cw = t["bytes_conv_weight_dram"].to_numpy(float)
    assert (cw >= 0).all() and (cw <= t["param_bytes"].to_numpy(float)).all()
    assert (cw[t["model"].str.startswith("selecsls").to_numpy()] > 16e6).all()
    assert (cw[t["model"].str.startswith(("deit_", "vgg")).to_numpy()] == 0).all()


def _concat_table() -> pd.DataFrame:
    """A layer table (batch 1, op and kind): three branches of a mixed-kernel depthwise convolution
    concatenated (the concatenation right after a library call: 8 MB moved), a pooled map concatenated (after a
    pooling, not a point-wise run: 2 MB), a norm-activation output
    concatenated with the block input (ESE-VoVNet's aggregation: 6 MB, right after a point-wise run, views
    between), tokens viewed as a map by a transpose then convolved (PVTv2's depthwise convolution after its
    first linear layer: 3 MB of activations), the same convolution on a map that was only reshaped (2 MB) and a
    layer norm after a transpose (not a convolution)."""
    m = 1e6
    rows = [("convolution", "conv_depthwise", m, m, 0.0), ("convolution", "conv_depthwise", m, m, 0.0),
            ("view", "reshape", 0, 0, 0.0), ("cat", "concat", 4 * m, 4 * m, 0.0),
            ("max_pool2d", "pool", m, m, 0.0), ("cat", "concat", m, m, 0.0),
            ("native_batch_norm", "norm", m, m, 0.0), ("relu_", "activation", m, m, 0.0),
            ("view", "reshape", 0, 0, 0.0), ("cat", "concat", 3 * m, 3 * m, 0.0),
            ("addmm", "linear", 2 * m, m, 1e5), ("transpose", "reshape", 0, 0, 0.0), ("view", "reshape", 0, 0, 0.0),
            ("convolution", "conv_depthwise", 1.5 * m + 1e4, 1.5 * m, 1e4),
            ("view", "reshape", 0, 0, 0.0), ("convolution", "conv_depthwise", m + 1e4, m, 1e4),
            ("permute", "reshape", 0, 0, 0.0), ("native_layer_norm", "norm", m, m, 0.0)]
    t = pd.DataFrame(rows, columns=["op", "kind", "bytes_read", "bytes_written", "param_bytes"])
    t["flops"], t["params"] = 1e6, t["param_bytes"] / 4
    t.attrs = {"input_shape": (1, 3, 224, 224)}
    return t


def test_cpu_parts_counts_concatenations_after_library_calls_and_convolutions_on_permuted_maps():
    """``bytes_concat_copy``: the concatenations right after a library call (views between allowed) or a pooling,
    not the one after a point-wise run (fused into the loops that produce it); ``bytes_conv_permuted``: the activation
    bytes of the convolution whose input went through a transpose (views between allowed), not the one whose
    input was only reshaped, nor the layer norm after a permute; the helpers give kinds and flags per row."""
    from carb.model.zoo_latency_cpu import after_transpose, previous_kinds

    t = _concat_table()
    parts = cpu_parts(t)
    assert parts["bytes_concat_copy"] == 10e6 and parts["bytes_conv_permuted"] == 3e6
    assert parts["n_concat_copy"] == 2.0   # the two copying concatenations, not the fused one
    assert list(previous_kinds(t)[[0, 3, 5, 9]]) == ["", "conv_depthwise", "pool", "activation"]
    assert list(np.flatnonzero(after_transpose(t))) == [13, 17]
    assert cpu_parts(t.drop(columns="op"))["bytes_conv_permuted"] == 0.0   # no op column: no transposes seen
    assert cpu_parts(_table())["bytes_concat_copy"] == 0.0


def test_concat_copy_replaces_the_per_kind_concat_term_and_conv_permuted_adds():
    """``concat_copy`` is MB per image and stands for ``mb_concat`` (the base drops it where it takes the term);
    ``conv_permuted`` is MB per image and replaces nothing; both beside ``pointwise_fused``."""
    from carb.model.zoo_latency_cpu import replaced_terms

    frame = pd.DataFrame({"batch_size": [1, 8], "tr_bytes_concat_copy": [8e6, 8e6], "tr_bytes_conv_permuted": [3e6, 3e6]})
    out = cpu_terms(frame, ["concat_copy", "conv_permuted"])
    assert np.allclose(out["mb_concat_copy"], [8.0, 8.0]) and np.allclose(out["mb_conv_permuted"], [3.0, 3.0])
    calls = cpu_terms(frame.assign(tr_n_concat_copy=16.0), ["concat_calls"])   # copy kernels: per batch
    assert list(calls.columns) == ["concat_calls_per_image"]
    assert np.allclose(calls["concat_calls_per_image"], [16.0, 2.0])
    assert replaced_terms(["concat_calls"]) == ()
    assert replaced_terms(["conv_permuted", "concat_copy", "pointwise_fused"]) == (
        "mb_concat", "mb_norm", "mb_activation", "mb_elementwise")
    assert "mb_concat" in additive_terms(_weights_frame()).columns
    frame = _weights_frame().assign(tr_bytes_concat_copy=1e6, tr_bytes_conv_permuted=2e6)
    cols = AdditiveBase(cpu_terms=("concat_copy", "conv_permuted")).terms(frame).columns
    assert "mb_concat" not in cols and {"mb_concat_copy", "mb_conv_permuted"} <= set(cols)


def test_additive_base_with_the_conv_permuted_term_carries_reorders_to_a_held_out_family():
    """A held-out family whose convolutions read 40-80 MB of permuted maps (PVTv2-like) at 0.15 ms per MB on top
    of the per-kind law, the others 0-10 MB: with ``conv_permuted`` the base carries it there; without it the
    family is under-predicted."""
    rng = np.random.default_rng(5)
    frame = _weights_frame(5)
    heavy = (frame["family"] == "g").to_numpy()
    frame["tr_bytes_conv_permuted"] = np.where(heavy, rng.uniform(40e6, 80e6, len(frame)),
                                               rng.choice([0.0, 5e6, 10e6], len(frame)))
    frame["latency_ms"] = frame["latency_ms"] + 0.15 * frame["tr_bytes_conv_permuted"] / 1e6 * frame["batch_size"]
    y = frame.loc[heavy, "latency_ms"] / frame.loc[heavy, "batch_size"]
    err = {}
    for name, terms in (("with", ("weight_lowreuse", "conv_permuted")), ("without", ("weight_lowreuse",))):
        m = AdditiveBase(huber=None, cpu_terms=terms).fit(frame[~heavy])
        err[name] = float(np.mean(np.log(np.exp(m.predict_log(frame[heavy])) / y)))
    assert abs(err["with"]) < 0.02 < 0.05 < abs(err["without"])


def test_shipped_trace_table_has_the_concat_copy_and_conv_permuted_columns_on_the_cpu_rows():
    """``bytes_concat_copy`` and ``bytes_conv_permuted`` of the shipped layer-table features: on the 1435
    plain-graph rows of timm's CPU file (NaN elsewhere); concatenation copies never more than the concatenation
    bytes, 0 on ESE-VoVNet (its aggregations concatenate norm-activation outputs) and positive on MixNet (its
    mixed depthwise convolutions); permuted-map convolutions positive on PVTv2 b0-b5 (a depthwise convolution over
    the first linear layer's tokens) and 0 on PVTv2-b2-li (a ReLU between) and on ResNets."""
    tr = pd.read_parquet(ROOT / "carb" / "data" / "timm-zoo-trace.parquet")
    on = tr["bytes_concat_copy"].notna().to_numpy()
    assert on.sum() == 1435 and (tr["n_extern_calls"].notna().to_numpy() == on).all()
    assert (tr["bytes_conv_permuted"].notna().to_numpy() == on).all()
    t = tr[on]
    cc, cp = t["bytes_concat_copy"].to_numpy(float), t["bytes_conv_permuted"].to_numpy(float)
    assert (cc >= 0).all() and (cc <= t["bytes_concat"].to_numpy(float) * (1 + 1e-9)).all() and (cp >= 0).all()
    model = t["model"].astype(str)
    assert (cc[model.str.startswith("ese_vovnet").to_numpy()] == 0).all()
    assert (cc[model.str.startswith("mixnet").to_numpy()] > 0).all()
    pvt = model.str.match(r"pvt_v2_b\d$").to_numpy()
    assert pvt.sum() >= 5 and (cp[pvt] > 0).all()
    assert (cp[(model == "pvt_v2_b2_li").to_numpy()] == 0).all()
    assert (cp[model.str.match(r"resnet\d+$").to_numpy()] == 0).all()


def _linear_table() -> pd.DataFrame:
    """A layer table of linear layers (each 197 tokens): ViT-B's 768 -> 3072 MLP layer, ViT-L's 1024 -> 4096 and
    4096 -> 1024, a 1024 -> 1000 classifier head on one token, and a 1024-channel convolution."""
    rows = [("linear", (1, 197, 768), (1, 197, 3072), 2 * 197 * 768 * 3072),
            ("linear", (1, 197, 1024), (1, 197, 4096), 2 * 197 * 1024 * 4096),
            ("linear", (1, 197, 4096), (1, 197, 1024), 2 * 197 * 4096 * 1024),
            ("linear", (1, 1024), (1, 1000), 2 * 1024 * 1000),
            ("conv_pointwise", (1, 1024, 14, 14), (1, 1024, 14, 14), 2 * 196 * 1024 * 1024)]
    t = pd.DataFrame(rows, columns=["kind", "in_shape", "out_shape", "flops"])
    t["bytes_read"], t["bytes_written"], t["param_bytes"], t["params"] = 1e6, 1e6, 4e6, 1e6
    t.attrs = {"input_shape": (1, 3, 224, 224)}
    return t


def test_cpu_parts_counts_the_flops_of_linear_layers_wide_on_both_sides():
    """``flops_linear_wide``: ViT-L's two linear layers (both sides >= 1024), not ViT-B's (768 in), nor the
    1000-class head, nor a convolution; a lower bound of 768 takes ViT-B's and the head in; no shape columns: none."""
    from carb.model.zoo_latency_cpu import linear_features

    WIDE_FEATURES = T["wide_features"]

    t = _linear_table()
    assert WIDE_FEATURES == 1024.0
    assert cpu_parts(t)["flops_linear_wide"] == 2 * 2 * 197 * 1024 * 4096
    assert cpu_parts(t, wide_features=768)["flops_linear_wide"] == (2 * 197 * (768 * 3072 + 2 * 1024 * 4096)
                                                                     + 2 * 1024 * 1000)   # the head too
    n_in, n_out = linear_features(t)
    assert list(n_in) == [768, 1024, 4096, 1024, 14] and list(n_out) == [3072, 4096, 1024, 1000, 14]
    assert cpu_parts(t.drop(columns=["in_shape", "out_shape"]))["flops_linear_wide"] == 0.0


def test_linear_wide_is_gflop_per_image_and_carries_a_slower_rate_to_a_held_out_family():
    """``linear_wide`` is GFLOP per image, replaces nothing; a held-out family whose wide linear layers run
    at half the rate of the others' (0.4 ms per wide GFLOP on top of the per-kind law; theirs 0-2 GFLOP, its 20-40)
    is carried with the term and under-predicted without it."""
    from carb.model.zoo_latency_cpu import replaced_terms

    frame = pd.DataFrame({"batch_size": [1, 8], "tr_flops_linear_wide": [3e9, 3e9]})
    assert np.allclose(cpu_terms(frame, ["linear_wide"])["gflop_linear_wide"], [3.0, 3.0])
    assert replaced_terms(["linear_wide"]) == ()
    rng = np.random.default_rng(7)
    frame = _weights_frame(7)
    heavy = (frame["family"] == "g").to_numpy()
    frame["tr_flops_linear_wide"] = np.where(heavy, rng.uniform(20e9, 40e9, len(frame)),
                                             rng.choice([0.0, 1e9, 2e9], len(frame)))
    frame["latency_ms"] = frame["latency_ms"] + 0.4 * frame["tr_flops_linear_wide"] / 1e9 * frame["batch_size"]
    y = frame.loc[heavy, "latency_ms"] / frame.loc[heavy, "batch_size"]
    err = {}
    for name, terms in (("with", ("weight_lowreuse", "linear_wide")), ("without", ("weight_lowreuse",))):
        m = AdditiveBase(huber=None, cpu_terms=terms).fit(frame[~heavy])
        err[name] = float(np.mean(np.log(np.exp(m.predict_log(frame[heavy])) / y)))
    assert abs(err["with"]) < 0.02 < 0.05 < abs(err["without"])


def test_shipped_trace_table_has_the_linear_wide_and_concat_count_columns_on_the_cpu_rows():
    """``flops_linear_wide`` and ``n_concat_copy`` of the shipped layer-table features: on the 1435 plain-graph rows
    of timm's CPU file (NaN elsewhere); copying concatenations counted where their bytes are; wide FLOPs never more
    than the linear FLOPs, positive on ViT-L and ViTamin-L, 0 on ViT-B and on
    ResNets."""
    tr = pd.read_parquet(ROOT / "carb" / "data" / "timm-zoo-trace.parquet")
    on = tr["flops_linear_wide"].notna().to_numpy()
    assert on.sum() == 1435 and (tr["bytes_conv_permuted"].notna().to_numpy() == on).all()
    assert (tr["n_concat_copy"].notna().to_numpy() == on).all()
    t = tr[on]
    n_cc, cc = t["n_concat_copy"].to_numpy(float), t["bytes_concat_copy"].to_numpy(float)
    assert ((n_cc > 0) == (cc > 0)).all() and (n_cc == np.round(n_cc)).all()   # a count, where there are copies
    w = t["flops_linear_wide"].to_numpy(float)
    assert (w >= 0).all() and (w <= t["flops_linear"].to_numpy(float) * (1 + 1e-9)).all()
    model = t["model"].astype(str)
    for pattern in (r"vit_large_patch16_224$", r"vitamin_large_224$"):
        assert (w[model.str.match(pattern).to_numpy()] > 0).all() and model.str.match(pattern).any()
    assert (w[(model == "vit_base_patch16_224").to_numpy()] == 0).all()
    assert (w[model.str.match(r"resnet\d+$").to_numpy()] == 0).all()


def test_cpu_part_thresholds_are_conf_keys_with_the_figures_of_before(capsys):
    """``conf/zoo_latency/default.yaml``'s ``cpu_parts`` holds :func:`cpu_parts`' thresholds (the module constants
    of before: 8 and 64 uses, 16 / 4 / 1 MB, 1024 features), read through the bench's settings path, never handed to
    the model; an override sets one; a bad value or key is one line naming it, exit 2; a table's columns need all."""
    bench = _bench()
    assert bench.cpu_part_settings([]) == {"low_reuse": 8.0, "mid_reuse": 64.0, "cache_MB": 16.0, "spill_MB": 4.0,
                                           "l2_MB": 1.0, "wide_features": 1024.0} == T
    assert tuple(T) == THRESHOLD_KEYS
    assert "cpu_parts" not in bench.zoo_latency_settings([]) and "cpu_parts" not in bench.zoo_latency_settings(
        [], device_kind="cpu")
    assert bench.cpu_part_settings(["cpu_parts.cache_MB=8"])["cache_MB"] == 8.0
    for bad, line in (("cpu_parts.cache_MB=-1", "cpu_parts.cache_MB: must be a positive number, got -1"),
                      ("cpu_parts.l3_MB=30", "cpu_parts.l3_MB: unknown key; allowed: ")):
        with pytest.raises(SystemExit) as e:
            bench.cpu_part_settings([bad])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"--zoo-latency: {line}") and "\n" not in err
    with pytest.raises(DatasetError, match="cpu_parts: thresholds lack wide_features"):
        _cpu_parts(_table(), {k: v for k, v in T.items() if k != "wide_features"})
    # the thresholds change the columns as the constants did: the same parts at the conf's figures as at twice
    # the cache (the 20 MB ReLU stays beyond 16 MB, not beyond 32 MB)
    assert cpu_parts(_table(), cache_MB=32.0)["bytes_membound_dram"] == 0.0


def _evonorm_table() -> pd.DataFrame:
    """A layer table of a convolution then EvoNorm-S0 as the tracer records it (timm's ``EvoNorm2dS0``: the
    group variance, its square root broadcast back to the map by ``expand`` + ``clone``, then x * sigmoid(v x) /
    std * weight + bias) on a 1.8 MB map, then a max pooling, a ReLU, a concatenation of the ReLU's output and
    a contiguous copy: bytes read, written per row."""
    m = 1.8e6
    rows = [("conv_grouped", "convolution", 1.9e6, m), ("reshape", "view", 0, 0), ("reduce", "var", m, 36),
            ("elementwise", "add", 36, 36), ("activation", "sqrt", 36, 36), ("reshape", "expand", 0, 0),
            ("copy", "clone", 36, m), ("reshape", "_unsafe_view", 0, 0), ("elementwise", "mul", m, m),
            ("activation", "sigmoid", m, m), ("elementwise", "mul", 2 * m, m), ("elementwise", "div", 2 * m, m),
            ("elementwise", "mul", m, m), ("elementwise", "add", m, m), ("pool", "max_pool2d", m, m / 4),
            ("activation", "relu", m / 4, m / 4), ("concat", "cat", m / 2, m / 2), ("copy", "clone", m / 2, m / 2)]
    t = pd.DataFrame(rows, columns=["kind", "op", "bytes_read", "bytes_written"])
    return t.assign(flops=0.0, param_bytes=0.0, params=0.0)


def test_generated_loops_count_fused_runs_and_unfused_memory_operations_not_broadcast_copies():
    """Under ``torch.compile`` EvoNorm's 8 point-wise rows are 2 loops (split by the broadcast copy), its
    broadcast copy (36 B read, 1.8 MB written) none; the reduction, the pooling and the contiguous copy one each;
    the ReLU one; the concatenation right after it none; the convolution is a library call, not counted: 6 of
    the table's 15 operations. ``bytes_copy_dense``: the bytes of the copies that are not broadcasts."""
    from carb.model.zoo_latency_cpu import broadcast_copy_rows, generated_loops, pointwise_runs

    t = _evonorm_table()
    assert pointwise_runs(t) == [(3, 4), (8, 13), (15, 15)]
    assert broadcast_copy_rows(t).tolist() == [False] * 6 + [True] + [False] * 11
    assert generated_loops(t) == 3 + 3 and int((t["kind"] != "reshape").sum()) == 15
    parts = cpu_parts(t)
    assert parts["n_generated_loops"] == 6.0 and parts["bytes_copy_dense"] == 1.8e6   # the contiguous copy
    copied = t.copy()
    copied.loc[16, "kind"], copied.loc[15, "kind"] = "concat", "conv_pointwise"   # a concatenation after a library call copies
    assert generated_loops(copied) == 2 + 3 + 1


def _loops_frame(seed: int = 0) -> pd.DataFrame:
    """:func:`tests.test_timm_zoo._additive_frame`'s rows with the law's per-operation cost paid per generated loop
    instead (``tr_n_generated_loops``: 40 % of the operations; a compiled CPU graph), and the held-out family
    ``g`` with 2.5x the operations for the same loops (EvoNorm's fused element-wise chains)."""
    from tests.test_timm_zoo import _additive_frame

    out = _additive_frame(seed)
    b = out["batch_size"].to_numpy(float)
    loops = 0.4 * out["tr_n_ops"].to_numpy(float)
    heavy = (out["family"] == "g").to_numpy()
    ops = np.where(heavy, 2.5, 1.0) * out["tr_n_ops"].to_numpy(float)
    t = out["latency_ms"].to_numpy(float) / b - 0.05 * out["tr_n_ops"].to_numpy(float) / b + 0.05 * loops / b
    return out.assign(tr_n_ops=ops, tr_n_generated_loops=loops, tr_bytes_copy_dense=0.5 * out["tr_bytes_copy"],
                      latency_ms=t * b)


def test_generated_loops_replace_operations_and_carry_fused_chains_to_a_held_out_family():
    """``generated_loops`` is calls per image (per batch: n_generated_loops / batch) in place of ``ops_per_image``,
    ``copy_dense`` MB per image in place of ``mb_copy``; fitted without family ``g`` (2.5x the operations for the
    same loops), the base with ``generated_loops`` predicts ``g`` within 2 %, the one counting operations over-predicts every row."""
    from carb.model.zoo_latency_cpu import replaced_terms
    from tests.test_timm_zoo import _held_out_log_error

    frame = pd.DataFrame({"batch_size": [1, 8], "tr_n_generated_loops": [16.0, 16.0], "tr_bytes_copy_dense": [4e6, 4e6]})
    out = cpu_terms(frame, ["generated_loops", "copy_dense"])
    assert list(out.columns) == ["generated_loops_per_image", "mb_copy_dense"]
    assert np.allclose(out["generated_loops_per_image"], [16.0, 2.0]) and np.allclose(out["mb_copy_dense"], [4.0, 4.0])
    assert replaced_terms(["generated_loops", "copy_dense"]) == ("ops_per_image", "mb_copy")
    frame = _loops_frame()
    cols = AdditiveBase(cpu_terms=("generated_loops", "copy_dense")).terms(frame).columns
    assert {"ops_per_image", "mb_copy"}.isdisjoint(cols) and {"generated_loops_per_image", "mb_copy_dense"} <= set(cols)
    with_loops = _held_out_log_error(frame, cpu_terms=("generated_loops",))
    without = _held_out_log_error(frame)
    assert np.abs(with_loops).max() < 0.02 and without.mean() > 0.1 and (without > 0).all()


def test_shipped_trace_table_has_the_generated_loop_and_dense_copy_columns_on_the_cpu_rows():
    """``n_generated_loops`` and ``bytes_copy_dense`` of the shipped layer-table features: on the 1435 plain-graph
    rows of timm's CPU file (NaN elsewhere); a loop count, never more than the operations; dense copies never more
    than all copies; RegNetZ's EvoNorm models: 2.5x their siblings' operations, about 2x their loops, and no dense
    copy (their copies are the group deviations' broadcasts)."""
    t = _shipped_cpu_rows("n_generated_loops")
    assert (t["bytes_copy_dense"].notna()).all()
    loops = t["n_generated_loops"].to_numpy(float)
    assert (loops == np.round(loops)).all() and (loops > 0).all() and (loops <= t["n_ops"].to_numpy(float)).all()
    dense = t["bytes_copy_dense"].to_numpy(float)
    assert (dense >= 0).all() and (dense <= t["bytes_copy"].to_numpy(float)).all() and (dense < t["bytes_copy"]).any()
    row = {(m, s): r for m, s, r in zip(t["model"], t["input_size"], t.itertuples())}
    evos, bn = row[("regnetz_b16_evos", 224)], row[("regnetz_b16", 224)]
    assert evos.n_ops > 2.4 * bn.n_ops and 1.5 * bn.n_generated_loops < evos.n_generated_loops < 2.5 * bn.n_generated_loops
    assert evos.bytes_copy > 0 and evos.bytes_copy_dense == 0


def test_group_norm_parts_count_group_norms_not_layer_norms_and_leave_parameters_out():
    """``bytes_group_norm``: the activation bytes read + written by the group normalisations (``native_group_norm``
    rows; parameters left out), ``n_group_norm`` their number; the layer norms of :func:`_ops_table` and a table
    without ``op`` have none. ``group_norm`` is MB per image, ``group_norm_calls`` calls per image (per batch)."""
    from carb.model.zoo_latency_cpu import group_norm_parts

    t = _ops_table()
    assert group_norm_parts(t) == {"bytes_group_norm": 0.0, "n_group_norm": 0.0, "bytes_group_norm_multi": 0.0}
    t.loc[[2, 11], "op"] = "native_group_norm"
    parts = cpu_parts(t)
    assert parts["bytes_group_norm"] == 2.4e6 + (0.4e6 - 512) and parts["n_group_norm"] == 2.0
    # row 11 writes 512 B beyond its input: 64 groups' mean and inverse deviation; row 2 nothing (not a group norm
    # of several groups)
    assert parts["bytes_group_norm_multi"] == 0.4e6 - 512
    assert group_norm_parts(_table()) == {"bytes_group_norm": 0.0, "n_group_norm": 0.0, "bytes_group_norm_multi": 0.0}
    frame = pd.DataFrame({"batch_size": [1, 4], "tr_bytes_group_norm": [30e6, 30e6], "tr_n_group_norm": [48.0, 48.0]})
    out = cpu_terms(frame, ["group_norm", "group_norm_calls"])
    assert list(out.columns) == ["mb_group_norm", "group_norm_calls_per_image"]
    assert np.allclose(out["mb_group_norm"], [30, 30]) and np.allclose(out["group_norm_calls_per_image"], [48, 12])


def test_group_norm_parts_of_a_traced_module(tmp_path, monkeypatch):
    """On the tracer's own table: ``nn.GroupNorm(4, 8)`` (and ``(1, 8)``) of a (1, 8, 16, 16) map reads and writes 8 kB each
    (its 64 B of parameters left out; its per-group mean and inverse deviation written too); ``nn.BatchNorm2d`` is
    not a group norm."""
    torch = pytest.importorskip("torch")
    from carb.design.trace import trace

    monkeypatch.setenv("CARB_CACHE", str(tmp_path))
    from carb.model.zoo_latency_cpu import group_norm_groups

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.GroupNorm(4, 8), torch.nn.BatchNorm2d(8),
                              torch.nn.GroupNorm(1, 8))
    table = trace(net, (1, 3, 16, 16))
    parts = cpu_parts(table)
    assert sorted(group_norm_groups(table)[group_norm_groups(table) > 0]) == [1.0, 4.0]
    assert parts["n_group_norm"] == 2.0 and parts["bytes_group_norm"] == 2 * (2 * 8 * 16 * 16 * 4) + 2 * 4 * 4 + 2 * 4
    assert parts["bytes_group_norm_multi"] == 2 * 8 * 16 * 16 * 4 + 2 * 4 * 4   # + its 4 groups' mean, rstd


def test_shipped_trace_table_has_the_group_norm_columns_on_the_group_norm_rows():
    """``bytes_group_norm`` / ``n_group_norm`` of the shipped layer-table features: on every CPU row (0 where the
    network has no ``GroupNorm``); EfficientNet-B0's GroupNorm twin has one per batch norm of its sibling
    (49) and its sibling none; PoolFormer and BiT (ResNetV2) have them, ViT-B/16 (layer norms) none."""
    t = _shipped_cpu_rows("n_extern_calls")
    assert t["bytes_group_norm"].notna().all() and t["n_group_norm"].notna().all()
    row = {(m, s): r for m, s, r in zip(t["model"], t["input_size"], t.itertuples())}
    gn, bn = row[("efficientnet_b0_gn", 224)], row[("efficientnet_b0", 224)]
    assert gn.n_group_norm == 49 and bn.n_group_norm == 0 and bn.bytes_group_norm == 0
    assert 0 < gn.bytes_group_norm <= gn.bytes_norm_fp32 and gn.bytes_group_norm_multi == gn.bytes_group_norm
    assert row[("poolformer_s12", 224)].bytes_group_norm_multi == 0   # GroupNorm1: one group, the whole map
    assert row[("poolformer_s12", 224)].n_group_norm > 0 and row[("resnetv2_50x1_bit", 448)].n_group_norm > 0
    assert row[("vit_base_patch16_224", 224)].n_group_norm == 0


def test_refresh_module_must_be_a_torch_nn_class_with_refresh_where(capsys):
    """``--refresh-module``: a class of ``torch.nn`` and only with ``--refresh-where``; else one line, exit 2."""
    spec = importlib.util.spec_from_file_location("zoo_trace_features", ROOT / "scripts/data/zoo_trace_features.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for argv in (["--refresh", "--refresh-where", "n_ops", "--refresh-module", "NoSuchNorm"],
                 ["--refresh", "--refresh-module", "GroupNorm"]):
        with pytest.raises(SystemExit) as e:
            mod.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("--refresh-module:")
