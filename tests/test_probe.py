"""Device probe (carb.measure.probe), the per-layer cost model fitted on it (carb.model.layer_cost), probe
tables on disk (carb.data.probes) and the latency prior that predicts an unmeasured precision from the
probe (carb.model.physics.LayerRooflinePrior(device_probe=True)): single-layer terms add up to the
network terms, the plan covers every kind of layer within its budget, a real probe run has the table's
shape, the cost model recovers known per-layer physics and sums it over networks, shipped and user
probes are found by device, and on the shipped CPU measurements the probe is what lets an fp32-only
prior predict bf16 and fp16."""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from carb.data.probes import SHIPPED_PROBES, load_probe, probe_paths, with_op_columns
from carb.design.arch import BYTES_PER_ELEMENT, ArchConfig
from carb.design.features import grid_features
from carb.design.shapes import _args, _walk, architectures, gemm_terms, layer_terms, native_terms
from carb.errors import ConfigError, DatasetError
from carb.measure.probe import PROBE_COLUMNS, layer_array, out_size, probe_plan, run_probe, space_layers
from carb.model.layer_cost import MIN_ROWS, LayerCostModel
from carb.model.physics import LayerRooflinePrior, fit_device_probe, make_prior

ONEDNN = ("fp32", "bf16")
REFERENCE_DEVICE = "b69ebb7443"


def frame(configs) -> pd.DataFrame:
    return grid_features(list(configs))


def network_layers(f: pd.DataFrame) -> list[np.ndarray]:
    """The :data:`carb.design.shapes.CONV_COLUMNS` array (convolutions and classifier) of each row's network."""
    keys, cfgs = architectures(f)
    return [_walk(*_args(cfgs[k]))[0] for k in keys]


# ---------------------------------------------------------------- layer_terms vs network terms

TERM_CONFIGS = [
    ArchConfig("basic", 20, 0.5, 32, 1, "fp32", False),
    ArchConfig("basic", 18, 0.25, 64, 8, "fp16", True),
    ArchConfig("basic", 14, 1.0, 48, 16, "fp32", False),
    ArchConfig("bottleneck", 26, 0.25, 64, 1, "fp16", True),
    ArchConfig("bottleneck", 50, 0.25, 96, 8, "fp32", True),
    ArchConfig("bottleneck", 26, 0.5, 32, 16, "fp16", False),
    ArchConfig("bottleneck", 26, 0.5, 40, 8, "fp16", False),
    ArchConfig("basic", 20, 0.25, 56, 16, "fp32", True),
]


@pytest.mark.parametrize("cfg", TERM_CONFIGS, ids=lambda c: f"{c.block}-{c.depth}-b{c.batch_size}-{c.precision}"
                         f"-{'ed' if c.early_downsample else 'noed'}")
def test_layer_terms_sum_to_the_network_terms(cfg):
    """Summing layer_terms over every row of a network's layer array (classifier included) gives
    gemm_terms' sums (gemm_NK per layer, not times the batch) and native_terms' native-path sums."""
    f = frame([cfg])
    a = network_layers(f)[0]
    b = cfg.batch_size
    lt = layer_terms(a, np.full(len(a), b), np.full(len(a), cfg.precision), 1, ONEDNN).sum()
    g = gemm_terms(f).iloc[0]
    nt = native_terms(f, 1, ONEDNN).iloc[0]
    for term in ("gemm_MNK", "gemm_MK", "gemm_MN", "gemm_M", "stem_MNK", "gemm_NK"):
        np.testing.assert_allclose(lt[term], g[term], rtol=1e-9, err_msg=term)
    for term in ("native_weight_MB", "native_aliased_MAC"):
        np.testing.assert_allclose(lt[term], nt[term], rtol=1e-9, atol=0, err_msg=term)
    assert g["gemm_MNK"] > 0 and g["stem_MNK"] > 0
    if cfg.precision == "fp16":   # not a oneDNN precision here: every convolution runs natively
        assert nt["native_weight_MB"] > 0


def test_layer_terms_stem_is_the_first_convolution_when_told():
    """A width that rounds a stage to 3 channels has 3-channel convolutions past the stem: by default
    layer_terms calls them stems (a single probed 3-channel layer is one), with ``stem`` = the first row
    it matches gemm_terms, and the layer cost model sums networks that way."""
    cfg = ArchConfig("basic", 20, 0.1875, 32, 1, "fp32", False)
    f = frame([cfg])
    a = network_layers(f)[0]
    n = len(a)
    default = layer_terms(a, np.ones(n), np.full(n, "fp32"), 1, ONEDNN)["stem_MNK"].sum()
    first = layer_terms(a, np.ones(n), np.full(n, "fp32"), 1, ONEDNN, stem=np.arange(n) == 0)["stem_MNK"].sum()
    g = gemm_terms(f).iloc[0]["stem_MNK"]
    assert default > g
    np.testing.assert_allclose(first, g, rtol=1e-9)


def test_layer_terms_native_path_follows_the_batch_and_precision():
    """The same fp32 network has native-path terms at batch 8 but none at batch 16 (oneDNN), and a bf16
    row (a oneDNN precision) has none at any batch, in layer_terms as in native_terms."""
    cfg = ArchConfig("bottleneck", 26, 0.5, 32, 8, "fp32", False)
    a = network_layers(frame([cfg]))[0]
    one = lambda b, p: layer_terms(a, np.full(len(a), b), np.full(len(a), p), 1, ONEDNN).sum()  # noqa: E731
    assert one(8, "fp32")["native_weight_MB"] > 0
    assert one(16, "fp32")["native_weight_MB"] == 0
    assert one(8, "bf16")["native_weight_MB"] == 0 and one(1, "bf16")["native_aliased_MAC"] == 0


# ---------------------------------------------------------------- probe_plan

PLAN_CONFIGS = [ArchConfig("basic", 20, 0.25, 32, 1, "fp32", False), ArchConfig("basic", 18, 0.25, 64, 1, "fp32", True),
                ArchConfig("bottleneck", 26, 0.25, 64, 1, "fp32", True),
                ArchConfig("bottleneck", 26, 0.5, 32, 1, "fp32", False)]


@pytest.fixture(scope="module")
def plan_layers() -> np.ndarray:
    return space_layers(frame(PLAN_CONFIGS))


def macs(plan: pd.DataFrame) -> np.ndarray:
    """Multiply-adds per call of each plan row, from its layer array."""
    a = layer_array(plan)
    return a[:, 0] * a[:, 1] * a[:, 2] * plan["batch_size"].to_numpy(float)


def test_space_layers_are_the_networks_convolutions(plan_layers):
    """space_layers lists each distinct convolution (cin, cout, kernel, stride, H_in) once, no classifier."""
    assert plan_layers.shape[1] == 5 and len(plan_layers) == len({tuple(r) for r in plan_layers})
    assert (plan_layers[:, 2] > 0).all()
    expect = set()
    for a in network_layers(frame(PLAN_CONFIGS)):
        for m, n, k, ker, s, h in a[a[:, 3] > 0]:
            expect.add((int(k // ker**2), int(n), int(ker), int(s), int(h)))
    assert {tuple(map(int, r)) for r in plan_layers} == expect


def test_probe_plan_covers_every_kind_within_the_budget(plan_layers):
    """Every (kernel, stride) kind of the layers is drawn even when n leaves room for few more rows,
    every row stays within max_MMAC, and the rows are layers of the space at probe batches."""
    kinds = {(int(r[2]), int(r[3])) for r in plan_layers}
    assert len(kinds) >= 4    # 3x3 s1, 3x3 s2, 1x1 s1, 1x1 s2, 7x7 s2
    max_MMAC = 20.0
    # each kind has a layer that fits at batch 1, so each must be drawn
    fits = {(int(r[2]), int(r[3])) for r in plan_layers
            if out_size(r[4], r[2], r[3]) ** 2 * r[1] * r[0] * r[2] ** 2 <= max_MMAC * 1e6}
    assert fits == kinds
    n = len(kinds) + 2
    for seed in range(5):
        plan = probe_plan(plan_layers, n, seed=seed, max_MMAC=max_MMAC)
        assert list(plan.columns) == ["cin", "cout", "kernel", "stride", "H_in", "batch_size"]
        assert len(plan) == n and not plan.duplicated().any()
        assert {(int(k), int(s)) for k, s in plan[["kernel", "stride"]].to_numpy()} == kinds
        assert (macs(plan) <= max_MMAC * 1e6).all()
        layer_set = {tuple(map(int, r)) for r in plan_layers}
        drawn = plan[["cin", "cout", "kernel", "stride", "H_in"]].to_numpy()
        assert all(tuple(map(int, r)) in layer_set for r in drawn)
        assert plan["batch_size"].isin([1, 2, 4, 8, 16, 32]).all()


def test_probe_plan_budget_and_seed(plan_layers):
    """A larger plan keeps every row under the budget; the same seed gives the same plan, another seed a
    different one; a budget no layer fits raises ConfigError."""
    a = probe_plan(plan_layers, 60, seed=3, max_MMAC=5.0)
    assert len(a) == 60 and (macs(a) <= 5e6).all()
    pd.testing.assert_frame_equal(a, probe_plan(plan_layers, 60, seed=3, max_MMAC=5.0))
    assert not a.equals(probe_plan(plan_layers, 60, seed=4, max_MMAC=5.0))
    with pytest.raises(ConfigError, match="max_MMAC"):
        probe_plan(plan_layers, 10, max_MMAC=1e-6)


# ---------------------------------------------------------------- run_probe (real torch timings)

def test_run_probe_times_a_tiny_plan():
    """A real probe of three small layers returns a PROBE_COLUMNS table with positive times and a known
    backend, reports progress, and restores the torch thread count."""
    import torch

    plan = pd.DataFrame([(3, 4, 3, 1, 8, 1), (4, 8, 1, 2, 8, 2), (8, 8, 3, 2, 8, 1)],
                        columns=["cin", "cout", "kernel", "stride", "H_in", "batch_size"])
    prev = torch.get_num_threads()
    before = 2 if prev != 2 else 1
    seen = []
    try:
        torch.set_num_threads(before)
        t = run_probe(plan, ["fp32"], "testdev", threads=3 - before, repeats=1, min_window_s=0.001,
                      progress=lambda d, n: seen.append((d, n)))
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(prev)
    assert tuple(t.columns) == PROBE_COLUMNS and len(t) == 3
    assert (t["time_ms"] > 0).all() and np.isfinite(t["time_ms"]).all()
    assert set(t["backend"]) <= {"Mkldnn", "Slow2d", ""}
    assert (t["device_id"] == "testdev").all() and (t["precision"] == "fp32").all()
    assert (t["threads"] == 3 - before).all()
    pd.testing.assert_frame_equal(t[list(plan.columns)].astype(int), plan)
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_run_probe_rejects_an_unknown_precision():
    """An unknown precision raises ConfigError before anything runs, leaving the thread count alone."""
    import torch

    prev = torch.get_num_threads()
    plan = pd.DataFrame([(3, 4, 3, 1, 8, 1)], columns=["cin", "cout", "kernel", "stride", "H_in", "batch_size"])
    with pytest.raises(ConfigError, match="fp8"):
        run_probe(plan, ["fp32", "fp8"], "testdev", threads=1)
    assert torch.get_num_threads() == prev


# ---------------------------------------------------------------- LayerCostModel on known physics

RATE = {"fp32": 2e7, "fp16": 2.5e6}   # multiply-adds per ms
BANDWIDTH = 4e6                        # weight bytes per ms
CALL_MS = 0.005


def physics_ms(layers: np.ndarray, batch: np.ndarray, precision: str) -> np.ndarray:
    """Known per-call time of convolutions (CONV_COLUMNS rows): MACs / rate + weight bytes / bandwidth + a call."""
    m, n, k = layers[:, 0], layers[:, 1], layers[:, 2]
    return m * n * k * batch / RATE[precision] + n * k * BYTES_PER_ELEMENT[precision] / BANDWIDTH + CALL_MS


def synthetic_probe(precisions=("fp32", "fp16"), n: int = 150, seed: int = 0, noise: float = 0.02) -> pd.DataFrame:
    """A probe table of the layers of PLAN_CONFIGS timed by :func:`physics_ms` (x lognormal noise)."""
    rng = np.random.default_rng(seed)
    plan = probe_plan(space_layers(frame(PLAN_CONFIGS)), n, seed=seed)
    a, b = layer_array(plan), plan["batch_size"].to_numpy(float)
    parts = []
    for p in precisions:
        parts.append(plan.assign(device_id="synthdev", threads=1, precision=p, backend="",
                                 time_ms=physics_ms(a, b, p) * rng.lognormal(0, noise, len(plan))))
    return with_op_columns(pd.concat(parts, ignore_index=True))[list(PROBE_COLUMNS)]   # regular convolutions


@pytest.fixture(scope="module")
def synth_probe() -> pd.DataFrame:
    return synthetic_probe()


@pytest.fixture(scope="module")
def cost_model(synth_probe) -> LayerCostModel:
    return LayerCostModel(threads=1, onednn=ONEDNN, max_iter=60).fit(synth_probe)


def networks() -> pd.DataFrame:
    return frame([c.replace(batch_size=b) for c in PLAN_CONFIGS for b in (1, 4, 16)])


def test_layer_cost_model_sums_known_physics_over_networks(cost_model):
    """Fitted on single-layer timings of known physics, network_ms matches the same physics summed over
    each network's convolutions (classifier left out) at several batch sizes, for both precisions."""
    nets = networks()
    layers = network_layers(nets)
    batch = nets["batch_size"].to_numpy(float)
    assert cost_model.precisions_ == ["fp16", "fp32"]
    assert cost_model.to_dict()["device_id"] == "synthdev" and cost_model.to_dict()["threads"] == 1
    for p in ("fp32", "fp16"):
        truth = np.array([physics_ms(a[a[:, 3] > 0], np.full(int((a[:, 3] > 0).sum()), b), p).sum()
                          for a, b in zip(layers, batch)])
        pred = cost_model.network_ms(nets, p)
        assert pred.shape == (len(nets),) and (pred > 0).all()
        assert np.median(np.abs(pred / truth - 1)) < 0.15, p
    # the slower precision's networks are predicted slower, roughly by the known rate ratio at large batch
    big = (batch == 16)
    ratio = cost_model.network_ms(nets, "fp16")[big] / cost_model.network_ms(nets, "fp32")[big]
    assert (ratio > 3).all()


def test_layer_cost_model_layer_ms_matches_physics(cost_model, synth_probe):
    """layer_ms on the probe's own layers reproduces the known per-layer times (median error < 10 %)."""
    for p, g in synth_probe.groupby("precision"):
        a, b = layer_array(g), g["batch_size"].to_numpy(float)
        pred = cost_model.layer_ms(a, b, p)
        assert np.median(np.abs(pred / physics_ms(a, b, p) - 1)) < 0.1, p


def test_layer_cost_model_rejects_bad_probes(synth_probe):
    """A missing column raises DatasetError naming it; the backend column is optional; a probe where no
    precision has MIN_ROWS timed rows raises DatasetError."""
    with pytest.raises(DatasetError, match="time_ms"):
        LayerCostModel(max_iter=10).fit(synth_probe.drop(columns=["time_ms"]))
    assert LayerCostModel(max_iter=10).fit(synth_probe.drop(columns=["backend"])).precisions_ == ["fp16", "fp32"]
    few = synth_probe.groupby("precision").head(MIN_ROWS - 1)
    with pytest.raises(DatasetError, match=str(MIN_ROWS)):
        LayerCostModel(max_iter=10).fit(few)


def test_layer_cost_model_skips_a_precision_with_too_few_rows(synth_probe):
    """A precision with fewer than MIN_ROWS rows is left unfitted, and asking for it (or for a precision
    never probed) raises DatasetError; the per-precision row counts are reported."""
    bf16 = synth_probe[synth_probe["precision"] == "fp32"].head(MIN_ROWS - 1).assign(precision="bf16")
    m = LayerCostModel(max_iter=10).fit(pd.concat([synth_probe, bf16], ignore_index=True))
    assert m.precisions_ == ["fp16", "fp32"]
    assert m.to_dict()["rows"] == {"fp16": 150, "fp32": 150}
    a = network_layers(frame(PLAN_CONFIGS[:1]))[0]
    with pytest.raises(DatasetError, match="bf16"):
        m.layer_ms(a, np.ones(len(a)), "bf16")
    with pytest.raises(DatasetError, match="bf16"):
        m.network_ms(frame(PLAN_CONFIGS[:1]), "bf16")
    # exactly MIN_ROWS rows is enough
    bf16 = synth_probe[synth_probe["precision"] == "fp32"].head(MIN_ROWS).assign(precision="bf16")
    assert "bf16" in LayerCostModel(max_iter=10).fit(pd.concat([synth_probe, bf16], ignore_index=True)).precisions_


def test_layer_cost_model_pickles(cost_model):
    """A pickled and reloaded model predicts exactly the same network times (its cache is rebuilt)."""
    nets = networks()
    before = {p: cost_model.network_ms(nets, p) for p in ("fp32", "fp16")}
    again = pickle.loads(pickle.dumps(cost_model))
    assert "_cache" not in again.__dict__ or not again.__dict__["_cache"]
    for p in ("fp32", "fp16"):
        np.testing.assert_array_equal(again.network_ms(nets, p), before[p])


# ---------------------------------------------------------------- probe tables on disk

def test_shipped_probe_is_found_by_device(monkeypatch, tmp_path):
    """The shipped table holds the reference CPU's probe at three precisions; an unknown device has none."""
    monkeypatch.setenv("CARB_HOME", str(tmp_path))   # a home without user probes (never the checkout's)
    assert probe_paths() == [SHIPPED_PROBES]
    t = load_probe(REFERENCE_DEVICE)
    assert t is not None and len(t) > 0 and set(PROBE_COLUMNS) <= set(t.columns)
    assert (t["device_id"].astype(str) == REFERENCE_DEVICE).all()
    assert {"fp32", "bf16", "fp16"} <= set(t["precision"])
    assert (t["time_ms"] > 0).all()
    assert load_probe("no-such-device") is None


def test_user_probes_under_carb_home(monkeypatch, tmp_path):
    """$CARB_HOME/probes/*.csv are searched after the shipped table: a new device is found, a later
    table wins for the same device (even over the shipped one), an empty folder changes nothing."""
    monkeypatch.setenv("CARB_HOME", str(tmp_path))
    assert load_probe("newdev") is None     # no probes folder yet
    folder = tmp_path / "probes"
    folder.mkdir()
    synth = synthetic_probe(("fp32",), n=30)
    synth.assign(device_id="newdev").to_csv(folder / "a.csv", index=False)
    found = load_probe("newdev")
    assert found is not None and len(found) == 30 and (found["device_id"] == "newdev").all()
    # b.csv comes after a.csv: its rows win for newdev
    synth.head(7).assign(device_id="newdev", time_ms=1.0).to_csv(folder / "b.csv", index=False)
    found = load_probe("newdev")
    assert len(found) == 7 and (found["time_ms"] == 1.0).all()
    # a user table for the reference device overrides the shipped rows
    synth.head(5).assign(device_id=REFERENCE_DEVICE).to_csv(folder / "c.csv", index=False)
    assert len(load_probe(REFERENCE_DEVICE)) == 5
    assert probe_paths() == [SHIPPED_PROBES, folder / "a.csv", folder / "b.csv", folder / "c.csv"]
    # explicit paths: only those are searched
    assert load_probe(REFERENCE_DEVICE, paths=[folder / "a.csv"]) is None


def test_unreadable_probe_tables_raise(tmp_path):
    """A table that is not CSV, or has no device_id column, raises DatasetError naming the file."""
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    with pytest.raises(DatasetError, match="empty.csv"):
        load_probe("x", paths=[empty])
    no_id = tmp_path / "noid.csv"
    pd.DataFrame({"device": ["x"], "time_ms": [1.0]}).to_csv(no_id, index=False)
    with pytest.raises(DatasetError, match="device_id"):
        load_probe("x", paths=[no_id])


def test_unreadable_user_table_under_carb_home_raises(monkeypatch, tmp_path):
    """A broken table in $CARB_HOME/probes is reported, not skipped silently."""
    monkeypatch.setenv("CARB_HOME", str(tmp_path))
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "bad.csv").write_text("just,a,header\n")
    with pytest.raises(DatasetError, match="bad.csv"):
        load_probe(REFERENCE_DEVICE)


# ---------------------------------------------------------------- the prior on the shipped measurements

@pytest.fixture(scope="module")
def reference():
    from carb.data.io import reference_dataset

    return reference_dataset()


def fp32_prior(reference, device_probe: bool) -> LayerRooflinePrior:
    train = reference[reference["precision"] == "fp32"]
    return LayerRooflinePrior(channel_block=16, cpu_dispatch=True, device_probe=device_probe).fit(
        train, train["latency_ms"])


def r2(y: np.ndarray, p: np.ndarray) -> float:
    return float(1 - ((y - p) ** 2).sum() / ((y - y.mean()) ** 2).sum())


@pytest.fixture(scope="module")
def no_carb_home(tmp_path_factory):
    """A CARB_HOME without user probes: only the shipped probe is found (the checkout's or the user's
    own probes never change what these tests see)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CARB_HOME", str(tmp_path_factory.mktemp("empty-home")))
    yield
    mp.undo()


def test_probe_lets_an_fp32_prior_predict_16_bit_latency(reference, no_carb_home):
    """Fitted on the reference CPU's fp32 rows alone, the prior with the shipped device probe predicts the
    bf16 and fp16 rows with R2 >= 0.93 (>= 0.9 per precision); without the probe it is below 0.5."""
    test = reference[reference["precision"] != "fp32"]
    y = test["latency_ms"].to_numpy(float)
    with_probe = fp32_prior(reference, True)
    assert with_probe.precisions_ == ["fp32"] and with_probe.form_ == "layers"
    assert with_probe.probe_ is not None, with_probe.probe_reason_
    card = with_probe.to_dict()["device_probe"]
    assert isinstance(card, dict) and card["device_id"] == REFERENCE_DEVICE
    assert {"fp32", "bf16", "fp16"} <= set(card["rows"])
    pred = with_probe.predict(test)
    assert np.isfinite(pred).all() and (pred > 0).all()
    assert r2(y, pred) >= 0.93
    for p in ("bf16", "fp16"):
        sel = (test["precision"] == p).to_numpy()
        assert r2(y[sel], pred[sel]) >= 0.9, p
    without = fp32_prior(reference, False)
    assert without.to_dict()["device_probe"] == "off"
    assert r2(y, without.predict(test)) < 0.5
    # the probe only touches unseen precisions: fp32 rows are predicted alike
    train = reference[reference["precision"] == "fp32"]
    np.testing.assert_allclose(with_probe.predict(train), without.predict(train), rtol=1e-9)


def test_device_probe_is_for_latency_only():
    """make_prior drops device_probe for energy (a probe times kernels) and keeps it for latency."""
    energy = make_prior("energy_J", device_probe=True, cpu_dispatch=True)
    latency = make_prior("latency_ms", device_probe=True, cpu_dispatch=True)
    assert isinstance(energy, LayerRooflinePrior) and energy.device_probe is False and energy.cpu_dispatch is True
    assert latency.device_probe is True


def test_fit_device_probe_says_why_not(reference, no_carb_home):
    """fit_device_probe returns (None, reason) without a native dispatch, for rows of two devices, for a
    device without a probe and for a probe run with other torch threads; else a fitted model."""
    rows = reference[reference["precision"] == "fp32"].head(20)
    native = {"threads": 1, "onednn": ["fp32", "bf16"]}
    model, why = fit_device_probe(rows, None)
    assert model is None and "thread" in why
    two = rows.assign(device_id=["a", "b"] * 10)
    model, why = fit_device_probe(two, native)
    assert model is None and "2 devices" in why
    model, why = fit_device_probe(rows.assign(device_id="no-such-device"), native)
    assert model is None and "no-such-device" in why
    model, why = fit_device_probe(rows, {"threads": 4, "onednn": ["fp32", "bf16"]})
    assert model is None and "threads" in why
    model, why = fit_device_probe(rows, native)
    assert why == "" and isinstance(model, LayerCostModel) and model.device_id_ == REFERENCE_DEVICE


# ---------------------------------------------------------------------------------------- carb-probe


def test_carb_probe_command_writes_the_device_probe_where_training_finds_it(monkeypatch, tmp_path):
    """carb-probe (run_probe_command on a composed config, tiny plan) writes <carb home>/probes/<device_id>.csv
    and its provenance, logs an MLflow run with the table and a figure; load_probe finds that device's rows
    there; a second run replaces them (no duplicates)."""
    from carb.commands.cli import compose
    from carb.commands.probe import run_probe_command

    monkeypatch.setenv("CARB_HOME", str(tmp_path))
    cfg = compose("probe", ["n=6", "precisions=[fp32]", "repeats=1", "min_window_s=0.001", "max_MMAC=2",
                            "ops.per_kind=0", "progress.enabled=false"])   # convolutions only (tests/test_probe_ops.py: the rest)
    out = run_probe_command(cfg)
    path = tmp_path / "probes" / f"{out['device_id']}.csv"
    assert out["out"] == str(path) and path.exists()
    assert path.with_suffix(".provenance.json").exists()
    from carb.data.probes import probe_session
    from carb.measure.fingerprint import session_id
    assert probe_session(out["device_id"]) == session_id()   # the boot it was timed in (None off Linux)
    rows = load_probe(out["device_id"])
    assert rows is not None and len(rows) == out["rows"] >= 6
    assert set(rows["precision"]) == {"fp32"} and (rows["time_ms"] > 0).all()
    assert out["run_id"]   # logged to the store under CARB_HOME: the table and the rates figure
    logged = {f.name for f in (tmp_path / "mlruns").rglob("*") if f.is_file()}
    assert {"probe_rates.png", f"{out['device_id']}.csv", "provenance.json"} <= logged
    run_probe_command(cfg)
    assert len(load_probe(out["device_id"])) == out["rows"]


def test_carb_probe_rejects_a_bad_precision_with_one_line(tmp_path):
    """A precision outside the allowed ones fails before anything is timed, naming the field."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "carb.probe", "precisions=[fp8]",
                        f"paths.output_dir={tmp_path}"], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "CARB_HOME": str(tmp_path)})
    assert r.returncode == 2, r.stderr
    assert "precisions" in r.stderr and "Traceback" not in r.stderr


def test_no_probe_model_when_every_probed_precision_was_measured(reference):
    """A dataset that measured every precision the probe has needs no probe model (none is fitted or
    pickled); one that lacks a probed precision gets it."""
    from carb.model.physics import native_dispatch

    native = native_dispatch(reference)
    model, why = fit_device_probe(reference, native)
    assert model is None and "every probed precision" in why
    fp32 = reference[reference["precision"] == "fp32"]
    model, why = fit_device_probe(fp32, native_dispatch(fp32))
    assert model is not None and why == ""


def test_domain_reason_says_an_unmeasured_precision_comes_from_the_probe():
    """check_domain names the targets a device probe predicts for a precision never measured; other
    unmeasured values keep the plain reason."""
    from carb.model.domain import check_domain

    domain = {"categorical": {"precision": ["fp32"]}, "ranges": {}, "probed": {"latency_ms": ["bf16", "fp16"]}}
    X = pd.DataFrame({"precision": ["fp32", "fp16", "fp8"]})
    inside, why = check_domain(domain, X)
    assert list(inside) == [True, False, False]
    assert why[1] == "precision fp16 never measured (latency_ms from the device probe)"
    assert why[2] == "precision fp8 never measured"


def test_cascade_records_probed_precisions_in_its_domain(reference):
    """A physics cascade fitted on the reference's fp32 rows records that its latency prior predicts
    bf16 and fp16 from the device probe; screening-mode outside reasons say so."""
    from carb.commands.cli import compose, to_dict
    from carb.model.domain import check_domain
    from carb.model.presets import build_cascade

    cfg = compose("train", ["model=carb_fast"])
    model = to_dict(cfg.model)
    for m in model["specialists"].values():
        m["n_estimators"] = 10
    fp32 = reference[reference["precision"] == "fp32"].reset_index(drop=True)
    train, val = fp32.iloc[:400], fp32.iloc[400:]
    targets = ["peak_memory_MB", "latency_ms"]
    c = build_cascade(model, to_dict(cfg.features)).fit(train, train[targets], val, val[targets])
    assert c.domain_["probed"] == {"latency_ms": ["bf16", "fp16"]}
    _, why = check_domain(c.domain_, reference[reference["precision"] == "fp16"].head(1))
    assert "precision fp16 never measured (latency_ms from the device probe)" in why[0]


def test_a_broken_user_probe_does_not_stop_training(monkeypatch, tmp_path, reference):
    """An unreadable table under <carb home>/probes makes the prior fall back to the stand-in (with a
    warning and the reason), not fail the fit."""
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "broken.csv").write_text("not,a,probe\n1,2,3\n")
    monkeypatch.setenv("CARB_HOME", str(tmp_path))
    fp32 = reference[reference["precision"] == "fp32"]
    with pytest.warns(UserWarning, match="device probe ignored"):
        prior = LayerRooflinePrior(channel_block=16, cpu_dispatch=True, device_probe=True).fit(fp32, fp32["latency_ms"])
    assert prior.probe_ is None and "device_id" in prior.probe_reason_
    assert np.isfinite(prior.predict(reference[reference["precision"] == "fp16"])).all()


def test_probe_keeps_its_timings_when_logging_fails(monkeypatch, tmp_path):
    """Issue 33 item 2: a store fault after measuring is one line that names where the timings are; the
    table is written first (atomically) and stays."""
    from carb.commands import probe as probe_cmd
    from carb.commands.cli import compose
    from carb.errors import TrackingError

    monkeypatch.setenv("CARB_HOME", str(tmp_path))

    def broken(*a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(probe_cmd, "log_probe", broken)
    cfg = compose("probe", ["n=4", "precisions=[fp32]", "repeats=1", "min_window_s=0.001", "max_MMAC=2",
                            "progress.enabled=false"])
    with pytest.raises(TrackingError) as e:
        probe_cmd.run_probe_command(cfg)
    files = list((tmp_path / "probes").glob("*.csv"))
    assert len(files) == 1 and str(files[0]) in str(e.value) and "Read-only file system" in str(e.value)
    assert "\n" not in str(e.value) and len(pd.read_csv(files[0])) >= 4


def test_probe_never_replaces_a_probe_with_an_empty_or_infinite_table(tmp_path):
    from carb.commands.probe import refuse_empty
    from carb.errors import MeasurementError

    for bad in (pd.DataFrame({"time_ms": []}), pd.DataFrame({"time_ms": [1.0, float("inf")]})):
        with pytest.raises(MeasurementError, match="keeps device d1's earlier probe"):
            refuse_empty(bad, "d1", tmp_path / "d1.csv")
    refuse_empty(pd.DataFrame({"time_ms": [0.5, 2.0]}), "d1", tmp_path / "d1.csv")


def test_unique_rows_matches_numpy_unique_as_a_set_and_rebuilds_the_array():
    from carb.model.layer_cost import unique_rows

    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, size=(500, 3)).astype(float)
    uniq, inverse = unique_rows(a)
    assert np.array_equal(uniq[inverse], a)
    assert len(uniq) == len(np.unique(a, axis=0))
    assert np.array_equal(uniq[0], a[0])                     # order of first appearance
    assert uniq.shape[1] == 3 and inverse.shape == (500,)
