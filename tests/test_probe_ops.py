"""The device probe's other kinds of operation (issue 43 item 3): the work of a probe row equals what the
tracer counts for the same operation, the plan draws every kind from the zoo's catalog within its budget, a
real tiny probe times one operation of every kind, old probe tables still load (as regular convolutions) and
the convolution consumers see only those, and the per-kind cost model (carb.model.op_cost) recovers known
per-operation physics from synthetic probe rows and sums it over a layer table and a zoo configuration."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.data.probes import (
    OP_CATALOG,
    PROBE_COLUMNS,
    PROBE_KINDS,
    conv_rows,
    load_op_catalog,
    load_probe,
    op_work,
    with_op_columns,
)
from carb.errors import ConfigError
from carb.measure.probe import op_plan, run_probe
from carb.model.op_cost import FALLBACK, PROBE_OP_FEATURE, OpCostModel, probe_op_ms

NAN = float("nan")


def op_row(kind, op, cin=NAN, cout=NAN, kernel=NAN, stride=NAN, H_in=NAN, groups=NAN, tokens=NAN, heads=NAN,
           batch_size=1):
    return {"kind": kind, "op": op, "cin": cin, "cout": cout, "kernel": kernel, "stride": stride, "H_in": H_in,
            "groups": groups, "tokens": tokens, "heads": heads, "batch_size": batch_size}


#: One tiny operation of every kind the probe times besides the regular convolutions.
TINY = [op_row("conv_depthwise", "convolution", 8, 8, 3, 1, 6, 8, batch_size=2),
        op_row("conv_grouped", "convolution", 8, 16, 3, 2, 7, 4),
        op_row("conv_pointwise", "convolution", 8, 12, 1, 1, 5, 1, batch_size=3),
        op_row("linear", "linear", 16, 10, tokens=5, heads=1, batch_size=2),
        op_row("matmul", "bmm", 8, 6, tokens=6, heads=3, batch_size=2),
        op_row("sdpa", "scaled_dot_product_attention", 8, 8, tokens=9, heads=2, batch_size=2),
        op_row("elementwise", "add", 4, H_in=6, batch_size=2),
        op_row("activation", "relu", 6, tokens=5, batch_size=2),
        op_row("norm", "batch_norm", 4, H_in=5, batch_size=2),
        op_row("norm", "layer_norm", 12, tokens=7, batch_size=2)]


# ------------------------------------------------------------------------ op_work == the tracer's counts

def _module(r):
    """An nn.Module taking an image (B, C, H, W) that runs the operation of probe row ``r`` once (the traced
    row of its kind is the one compared)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    kind = r["kind"]

    class Op(nn.Module):
        def __init__(self):
            super().__init__()
            if kind.startswith("conv_"):
                self.conv = nn.Conv2d(r["cin"], r["cout"], r["kernel"], r["stride"], r["kernel"] // 2,
                                      groups=r["groups"], bias=False)
            elif kind == "linear":
                self.lin = nn.Linear(r["cin"], r["cout"])
            elif r["op"] == "batch_norm":
                self.norm = nn.BatchNorm2d(r["cin"]).eval()
            elif r["op"] == "layer_norm":
                self.norm = nn.LayerNorm(r["cin"])

        def forward(self, x):
            b = x.shape[0]
            if kind.startswith("conv_"):
                return self.conv(x)
            if kind == "linear":
                return self.lin(x.reshape(b * r["tokens"], r["cin"]))
            if kind == "matmul":
                bh = b * r["heads"]
                return torch.bmm(x.reshape(bh, r["tokens"], r["cin"]), (x + 1).reshape(bh, r["cin"], r["cout"]))
            if kind == "sdpa":
                s = (b, r["heads"], r["tokens"], r["cin"])
                return F.scaled_dot_product_attention(x.reshape(s), (x + 1).reshape(s), (x * 2).reshape(s))
            if kind == "elementwise":
                return x + (x * 2)
            if kind == "activation":
                return F.relu(x)
            if r["op"] == "batch_norm":
                return self.norm(x)
            return self.norm(x.reshape(b, r["tokens"], r["cin"]))

    return Op()


def _input_shape(r):
    """An image shape (B, C, H, W) holding the operation's input elements."""
    b = r["batch_size"]
    if r["kind"].startswith("conv_") or (r["kind"] in ("elementwise", "norm") and r["H_in"] == r["H_in"]
                                          and r["op"] != "layer_norm"):
        return (b, r["cin"], r["H_in"], r["H_in"])
    if r["kind"] == "linear":
        return (b, r["tokens"], r["cin"], 1)
    if r["kind"] == "matmul":
        assert r["cout"] == r["tokens"]
        return (b, r["heads"], r["tokens"], r["cin"])
    if r["kind"] == "sdpa":
        return (b, r["heads"], r["tokens"], r["cin"])
    return (b, r["tokens"], r["cin"], 1)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("i", range(len(TINY)), ids=[f"{r['kind']}-{r['op']}" for r in TINY])
def test_op_work_equals_the_tracers_counts(i, precision):
    """The work op_work gives a probe row (multiply-adds, activation and parameter bytes read, bytes written)
    is what the layer-table tracer counts for the same operation, so probe-fitted costs apply to traced rows."""
    from carb.design.trace import trace

    r = dict(TINY[i])
    if r["kind"] == "matmul":
        r["cout"] = r["tokens"]   # the second operand is the first's elements, reshaped
    table = trace(_module(r), _input_shape(r), precision=precision, cache=False)
    kind_rows = table[table["kind"] == r["kind"]]
    got = kind_rows.iloc[-1]
    w = op_work(pd.DataFrame([{**r, "precision": precision}])).iloc[0]
    assert w["macs"] == pytest.approx(got["macs"] if r["kind"] in PROBE_KINDS[:7] else 0.0)
    assert w["act_bytes"] == pytest.approx(got["bytes_read"] - got["param_bytes"])
    assert w["weight_bytes"] == pytest.approx(got["param_bytes"])
    assert w["out_bytes"] == pytest.approx(got["bytes_written"])


# ------------------------------------------------------------------------------- the plan and a real run

def test_the_catalog_has_every_kind_and_the_plan_keeps_its_budget():
    """The shipped catalog (zoo layer tables) has every non-regular kind; op_plan draws per_kind rows of each,
    each within max_MMAC (compute kinds) and max_MB of activations (every kind), and is seeded."""
    cat = load_op_catalog()
    assert OP_CATALOG.with_suffix(".provenance.json").exists()
    assert set(PROBE_KINDS[1:]) <= set(cat["kind"]) and (cat["count"] >= 1).all()
    plan = op_plan(cat, 3, seed=1, max_MMAC=2.0, max_MB=1.0)
    assert plan["kind"].value_counts().to_dict() == {k: 3 for k in PROBE_KINDS[1:]}
    w = op_work(plan.assign(precision="fp32"))
    compute = plan["kind"].isin(PROBE_KINDS[:7]).to_numpy()
    assert (w["macs"][compute] <= 2.0e6).all() and (w["macs"][compute] > 0).all()
    assert ((w["act_bytes"] + w["out_bytes"]) <= 2.0**20).all()
    pd.testing.assert_frame_equal(plan, op_plan(cat, 3, seed=1, max_MMAC=2.0, max_MB=1.0))
    assert not plan.equals(op_plan(cat, 3, seed=2, max_MMAC=2.0, max_MB=1.0))
    assert op_plan(cat, 0).empty


def test_run_probe_times_one_operation_of_every_kind():
    """A real probe (tiny shapes, one window) of a regular convolution and one operation of every other kind
    at two precisions: a PROBE_COLUMNS table, every kind present, finite positive times, a convolution backend
    for the convolutions only."""
    conv = pd.DataFrame([(4, 8, 3, 1, 6, 1)], columns=["cin", "cout", "kernel", "stride", "H_in", "batch_size"])
    plan = pd.concat([conv, pd.DataFrame(TINY)], ignore_index=True)
    seen = []
    t = run_probe(plan, ["fp32", "bf16"], "testdev", threads=1, repeats=1, min_window_s=0.001,
                  progress=lambda d, n: seen.append(d))
    assert tuple(t.columns) == PROBE_COLUMNS and len(t) == 2 * len(plan) and seen[-1] == len(t)
    assert set(t["kind"]) == set(PROBE_KINDS)
    assert (np.isfinite(t["time_ms"]) & (t["time_ms"] > 0)).all()
    assert t.loc[t["kind"] == "conv_regular", "op"].eq("convolution").all()
    assert (t.loc[~t["kind"].str.startswith("conv_"), "backend"] == "").all()
    assert t.loc[t["kind"].str.startswith("conv_"), "backend"].map(lambda b: isinstance(b, str)).all()
    assert op_work(t).notna().all().all()


def test_run_probe_refuses_an_operation_it_cannot_time_before_timing():
    """A plan row of an unknown kind or operator is refused with one line before any timing."""
    seen = []
    bad = pd.DataFrame([TINY[0], op_row("elementwise", "atan2", 4, H_in=4)])
    with pytest.raises(ConfigError, match="atan2"):
        run_probe(bad, ["fp32"], "testdev", repeats=1, min_window_s=0.001, progress=lambda d, n: seen.append(d))
    with pytest.raises(ConfigError, match="conv3d"):
        run_probe(pd.DataFrame([op_row("conv3d", "convolution", 4, 4, 3, 1, 4, 1)]), ["fp32"], "testdev")
    assert seen == []


# --------------------------------------------------------------------------- old tables, the conv consumers

LEGACY = ["device_id", "threads", "precision", "cin", "cout", "kernel", "stride", "H_in", "batch_size", "time_ms",
          "backend"]


def test_an_old_probe_table_loads_as_regular_convolutions(tmp_path):
    """A probe written before the operation columns existed loads with kind conv_regular (and every column);
    in a mixed table load_probe gives the convolutions by default and every kind with kinds=None."""
    old = pd.DataFrame([["d1", 1, "fp32", 8, 8, 3, 1, 8, 1, 0.1, "Mkldnn"]], columns=LEGACY)
    p = tmp_path / "old.csv"
    old.to_csv(p, index=False)
    t = load_probe("d1", paths=[p])
    assert set(PROBE_COLUMNS) <= set(t.columns) and t["kind"].tolist() == ["conv_regular"]
    assert t["groups"].tolist() == [1] and t["op"].tolist() == ["convolution"]
    ops = pd.DataFrame([{**TINY[3], "device_id": "d1", "threads": 1, "precision": "fp32", "time_ms": 0.2,
                         "backend": ""}])
    mixed = pd.concat([old, ops], ignore_index=True)
    mixed.to_csv(p, index=False)
    assert load_probe("d1", paths=[p])["kind"].tolist() == ["conv_regular"]
    assert sorted(load_probe("d1", paths=[p], kinds=None)["kind"]) == ["conv_regular", "linear"]
    assert load_probe("d1", paths=[p], kinds=["linear"])["tokens"].tolist() == [5]
    assert len(conv_rows(mixed)) == 1 and len(conv_rows(old)) == 1


def test_the_layer_cost_model_ignores_the_other_kinds():
    """LayerCostModel fitted on a probe with operation rows is the one fitted on its convolutions alone."""
    from carb.model.layer_cost import LayerCostModel

    rng = np.random.default_rng(0)
    conv = pd.DataFrame({"device_id": "d", "threads": 1, "precision": "fp32", "cin": rng.choice([8, 16, 32], 40),
                         "cout": rng.choice([8, 16, 64], 40), "kernel": rng.choice([1, 3], 40), "stride": 1,
                         "H_in": rng.choice([8, 16], 40), "batch_size": rng.choice([1, 4], 40), "backend": ""})
    conv["time_ms"] = conv["cin"] * conv["cout"] * conv["kernel"] ** 2 * conv["H_in"] ** 2 * conv["batch_size"] / 2e7 + 0.01
    ops = with_op_columns(pd.DataFrame([{**r, "device_id": "d", "threads": 1, "precision": "fp32", "time_ms": 5.0,
                                         "backend": ""} for r in TINY]))
    a = LayerCostModel(max_iter=20).fit(conv)
    b = LayerCostModel(max_iter=20).fit(pd.concat([with_op_columns(conv), ops], ignore_index=True))
    np.testing.assert_allclose(a.coef_["fp32"], b.coef_["fp32"])
    assert b.n_rows_ == {"fp32": 40}


# ----------------------------------------------------------------- OpCostModel on known per-op physics

CALL = {k: 0.004 + 0.001 * i for i, k in enumerate(PROBE_KINDS)}
RATE = {k: (5.0 + 3 * i) * 1e6 for i, k in enumerate(PROBE_KINDS)}   # multiply-adds per ms (5-32 GMAC/s)
BW = {k: (2.0 + i) * 2.0**20 for i, k in enumerate(PROBE_KINDS)}     # bytes per ms (2-11 MB per ms)
SLOWER = {"fp32": 1.0, "bf16": 1.7}


def physics(kind: str, precision: str, macs, moved) -> np.ndarray:
    """Known time per call (ms): a call + multiply-adds / rate (compute kinds) + bytes / bandwidth."""
    compute = kind in PROBE_KINDS[:7]
    return SLOWER[precision] * (CALL[kind] + (np.asarray(macs) / RATE[kind] if compute else 0.0)
                                + np.asarray(moved) / BW[kind])


def synthetic_rows(n_per_kind: int = 12, precisions=("fp32", "bf16"), drop=(), seed: int = 0) -> pd.DataFrame:
    """Probe rows of every kind drawn from the shipped catalog, timed by :func:`physics` (x 1 % noise)."""
    rng = np.random.default_rng(seed)
    plan = op_plan(load_op_catalog(), n_per_kind, seed=seed, max_MMAC=16.0, max_MB=8.0)
    conv = pd.DataFrame({"kind": "conv_regular", "op": "convolution", "cin": rng.choice([16, 32, 64], n_per_kind),
                         "cout": rng.choice([16, 64, 128], n_per_kind), "kernel": 3, "stride": 1,
                         "H_in": rng.choice([8, 14, 28], n_per_kind), "groups": 1, "tokens": NAN, "heads": NAN,
                         "batch_size": rng.choice([1, 2, 4], n_per_kind)})
    plan = pd.concat([conv, plan], ignore_index=True)
    parts = []
    for p in precisions:
        t = plan.assign(device_id="synth", threads=1, precision=p, backend="")
        w = op_work(t)
        moved = w["act_bytes"] + w["weight_bytes"] + w["out_bytes"]
        t["time_ms"] = [physics(k, p, m, b) for k, m, b in zip(t["kind"], w["macs"], moved)]
        t["time_ms"] *= rng.lognormal(0, 0.01, len(t))
        parts.append(t[~t["kind"].isin(drop)])
    return pd.concat(parts, ignore_index=True)[list(PROBE_COLUMNS)]


@pytest.fixture(scope="module")
def fitted() -> OpCostModel:
    return OpCostModel().fit(synthetic_rows())


def test_op_cost_model_recovers_known_costs_per_kind(fitted):
    """Per kind and precision the fit predicts unseen rows of known physics within a few per cent and its
    5-fold error says so; to_dict lists every kind/precision."""
    test = synthetic_rows(6, seed=7)
    w = op_work(test)
    moved = w["act_bytes"] + w["weight_bytes"] + w["out_bytes"]
    for (k, p), g in test.groupby(["kind", "precision"]):
        truth = physics(k, p, w.loc[g.index, "macs"], moved[g.index])
        macs = np.where(k in PROBE_KINDS[:7], w.loc[g.index, "macs"], 0.0)
        pred = fitted.op_ms(np.full(len(g), k), macs, moved[g.index], p)
        np.testing.assert_allclose(pred, truth, rtol=0.15, err_msg=f"{k}/{p}")
        assert fitted.cv_mape_[(k, p)] < 0.05
    card = fitted.to_dict()
    assert len(card["kinds"]) == 2 * len(PROBE_KINDS) and card["device_id"] == "synth" and card["threads"] == 1


def test_op_cost_model_falls_back_and_says_what_it_cannot_cost():
    """A kind without rows borrows its nearest kind's costs (FALLBACK); with no stand-in, or a precision never
    probed, the cost is NaN and costs() says why; a view (reshape) costs nothing."""
    m = OpCostModel().fit(synthetic_rows(8, drop=("sdpa", "elementwise", "activation", "norm")))
    c, why = m.costs("sdpa", "fp32")
    assert why == "" and np.array_equal(c, m.coef_[(FALLBACK["sdpa"][0], "fp32")])
    assert np.isnan(m.op_ms(["norm"], [0.0], [1e6], "fp32")).all()
    assert "no norm operation" in m.costs("norm", "fp32")[1]
    assert "fp16 was not probed" in m.costs("linear", "fp16")[1]
    assert m.op_ms(["reshape"], [0.0], [1e9], "fp32")[0] == 0.0


def test_table_and_batch_terms_sum_the_per_operation_costs(fitted):
    """The time of a traced network is the sum of its rows' costs; fixed + B x per_image of its batch-1 table
    equals the sum over the table traced at batch B."""
    from torch import nn

    from carb.design.trace import trace

    net = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3, 1, 1, groups=16),
                        nn.Conv2d(16, 32, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()
    one = trace(net, (1, 3, 32, 32), cache=False)
    fixed, per = fitted.batch_terms(one, "fp32")
    assert fixed > 0 and per > 0
    for b in (1, 4, 16):
        tb = trace(net, (b, 3, 32, 32), cache=False)
        assert fitted.table_ms(tb) == pytest.approx(fixed + b * per, rel=1e-9)
    costs = fitted.row_costs(one["kind"], "fp32")
    assert (costs[(one["kind"] == "reshape").to_numpy()] == 0).all()
    assert (costs[one["kind"].isin(["norm", "activation", "pool"]).to_numpy(), 1] == 0).all()   # no MAC term
    by_row = [fitted.op_ms([k], [m], [r + w], "fp32")[0] for k, m, r, w in
              zip(one["kind"], one["macs"], one["bytes_read"], one["bytes_written"])]
    assert fitted.table_ms(one) == pytest.approx(sum(by_row))
    assert fitted.table_ms(one, "bf16") > fitted.table_ms(one)


def test_probe_op_ms_of_zoo_rows(fitted):
    """The feature of zoo configurations: per row fixed + batch x per-image time of its network at its
    precision, rising with the batch; NaN for a precision the probe never timed."""
    frame = pd.DataFrame({"model_name": ["tv:squeezenet1_1"] * 4, "input_size": [96, 96, 96, 128],
                          "batch_size": [1, 4, 4, 1], "precision": ["fp32", "fp32", "fp16", "fp32"]})
    got = probe_op_ms(frame, fitted)
    assert got[1] > got[0] > 0 and got[3] > got[0] and np.isnan(got[2])
    from carb.design.trace import trace

    assert got[1] == pytest.approx(fitted.table_ms(trace("tv:squeezenet1_1", (4, 3, 96, 96))), rel=1e-9)
    assert PROBE_OP_FEATURE == "probe_op_ms"


def test_the_cascade_adds_the_feature_only_when_named(monkeypatch, tmp_path):
    """with_zoo_kinds adds probe_op_ms from the rows' device probe on disk when a feature list names it (and
    leaves frames alone otherwise); rows without device_id are refused with one line."""
    from carb.errors import DatasetError
    from carb.model.cascade_data import with_zoo_kinds

    monkeypatch.setenv("CARB_HOME", str(tmp_path))
    (tmp_path / "probes").mkdir()
    synthetic_rows(6).to_csv(tmp_path / "probes" / "synth.csv", index=False)
    X = pd.DataFrame({"model_name": ["tv:squeezenet1_1"] * 2, "input_size": [96, 96], "batch_size": [1, 2],
                      "precision": ["fp32", "fp32"], "device_id": ["synth", "nodev"], "threads": [1, 1]})
    assert PROBE_OP_FEATURE not in with_zoo_kinds(X, ["flops"]).columns
    got = with_zoo_kinds(X, ["flops", PROBE_OP_FEATURE])[PROBE_OP_FEATURE].to_numpy()
    assert got[0] > 0 and np.isnan(got[1])
    with pytest.raises(DatasetError, match="device_id"):
        with_zoo_kinds(X.drop(columns="device_id"), [PROBE_OP_FEATURE])


# ------------------------------------------------------------------------------------------- carb-probe

@pytest.mark.slow
def test_carb_probe_writes_the_operations_beside_the_convolutions(monkeypatch, tmp_path):
    """carb-probe with ops.per_kind=1 (tiny calls) writes one row of every kind per precision beside the
    convolutions; training's loader sees the convolutions, the op cost model every kind."""
    from carb.commands.cli import compose
    from carb.commands.probe import run_probe_command

    monkeypatch.setenv("CARB_HOME", str(tmp_path))
    cfg = compose("probe", ["n=3", "precisions=[fp32]", "repeats=1", "min_window_s=0.001", "max_MMAC=1",
                            "ops.per_kind=1", "ops.max_MMAC=0.5", "ops.max_MB=0.25", "progress.enabled=false"])
    out = run_probe_command(cfg)
    every = load_probe(out["device_id"], kinds=None)
    counts = every["kind"].value_counts().to_dict()
    assert len(every) == out["rows"] and counts.pop("conv_regular") >= 3 and counts == {k: 1 for k in PROBE_KINDS[1:]}
    assert set(load_probe(out["device_id"])["kind"]) == {"conv_regular"}
    import json

    prov = json.loads((tmp_path / "probes" / f"{out['device_id']}.provenance.json").read_text())
    assert prov["plan"]["ops"] == {"per_kind": 1, "max_MMAC": 0.5, "max_MB": 0.25}


# ------------------------------------------------------------------ the memory prior reads the liveness peak

def test_the_memory_prior_of_zoo_rows_uses_the_liveness_peak():
    """On zoo rows the memory prior's activation term is the layer table's liveness peak (peak_live_MB), not
    a multiple of the largest output: on rows whose memory is 30 MB + parameters + the live peak + the input
    (known law, 3 % noise) it finds a coefficient of about 1 on each."""
    from carb.model.physics import MemoryPrior
    from tests.synthetic import zoo_schema_frame

    df = zoo_schema_frame()
    m = MemoryPrior().fit(df, df["peak_memory_MB"].to_numpy(float))
    assert m.column_names()[2] == "per_peak_live_MB"
    assert m.coef_["per_peak_live_MB"] == pytest.approx(1.0, abs=0.1)
    assert m.coef_["per_param_MB"] == pytest.approx(1.0, abs=0.1)


def test_state_derived_rows_count_once_per_batch(fitted):
    """Rows the tracer flags ``state`` (operands only parameters / buffers: a standardised weight, a bias
    table's projection) do the same work at every batch: batch_terms puts their multiply-adds and bytes in
    the fixed part, so fixed + B x per_image equals the table traced at batch B, and probe_op_ms follows it."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    import carb.design.trace as tr

    class StdConv(nn.Conv2d):
        def forward(self, x):
            w = self.weight - self.weight.mean(dim=(1, 2, 3), keepdim=True)
            return F.conv2d(x, w / (w.std(dim=(1, 2, 3), keepdim=True) + 1e-5), self.bias, self.stride, self.padding)

    class BiasTable(nn.Module):
        def __init__(self):
            super().__init__()
            self.table, self.proj = nn.Parameter(torch.randn(256, 64)), nn.Parameter(torch.randn(64, 16 * 16))

        def forward(self, x):   # a (256, 256) bias from parameters only, added to every image
            return x + (self.table @ self.proj).sum(0).reshape(1, 1, 16, 16)

    net = nn.Sequential(StdConv(3, 8, 3, 2, 1), BiasTable(), nn.ReLU(), nn.Conv2d(8, 8, 1)).eval()
    one = tr.trace(net, (1, 3, 32, 32), cache=False)
    state = one["state"].to_numpy(bool)
    assert state.any() and one.loc[state, "macs"].sum() > 0 and not state.all()
    fixed, per = fitted.batch_terms(one, "fp32")
    for b in (1, 4, 16):
        assert fitted.table_ms(tr.trace(net, (b, 3, 32, 32), cache=False)) == pytest.approx(fixed + b * per, rel=1e-9)
    stateless = fitted.batch_terms(one.assign(state=False), "fp32")   # every row per image: the state rows' work
    assert per < stateless[1] and fixed > stateless[0]                 # moves from the per-image to the fixed part

    real = tr.trace
    traced = lambda name, shape, precision="fp32": real(net, shape, precision=precision, cache=False)  # noqa: E731
    frame = pd.DataFrame({"model_name": ["tiny-state"] * 2, "input_size": [32, 32], "batch_size": [1, 8],
                          "precision": ["fp32", "fp32"]})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tr, "trace", traced)
        got = probe_op_ms(frame, fitted)
    assert got[1] == pytest.approx(fitted.table_ms(real(net, (8, 3, 32, 32), cache=False)), rel=1e-9)
