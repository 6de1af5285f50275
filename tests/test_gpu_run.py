"""The lent-GPU run without a GPU (issue 14): the real protocol code driven by a replayed energy counter
on a virtual clock (per-batch energy within 1 % of power x latency for update periods of 10-100 ms,
whatever the number of batches), the deadline logic with a heavy configuration last, and
``python -m carb.measure.gpu_run`` end to end on the CPU with a fake device while mlflow, hydra, omegaconf,
fvcore, xgboost, lightgbm, optuna, matplotlib, scipy and scikit-learn cannot be imported.

The recorded trace tests/data/h200_counter_trace.csv (NVML total energy polled for 1.5 s under load on
the H200 of the 2026-12-04 run, the same file as scripts/data/h200-run-2026-12-04/counter_trace.csv)
is replayed too: the sampler's update-period estimate on it is the run's (period.json, ~99.9 ms from 16
edges), and measure_config on the replayed counter gives a per-batch energy equal to the trace's own
power over the timed window times the latency (within 1 % of the power between the edges inside the
window, 2 % of the edge-aligned span around it), whatever the number of batches; a window past the
trace's end (the counter frozen) has no energy and says why."""
from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from replay_nvml import FakeGpu, FakeModel, FakeOps, SteppingCounter, VirtualClock

from carb.measure.counter import CounterSampler, window_energy_J, window_runs
from carb.measure.sweep import LatencyModel, SweepSettings, expected_seconds, group_by_architecture, measure_config

ROOT = Path(__file__).resolve().parent.parent


def _measure(period_s: float, latency_s: float, power_W: float, m_latencies: float, phase_s: float = 0.0):
    clock = VirtualClock()
    counter = SteppingCounter(clock, period_s=period_s, power_W=power_W, phase_s=phase_s)
    gpu = FakeGpu(counter)
    sampler = CounterSampler(gpu.read_energy_mJ, clock=clock, side={"sm": lambda: gpu.utilization_pct()[0],
                                                                     "mem": lambda: gpu.utilization_pct()[1],
                                                                     "temp": gpu.temperature_C})
    sampler.poll()
    model = FakeModel(clock, latency_s, sampler)
    s = SweepSettings(k_periods=6.0, m_latencies=m_latencies, warmup_s=0.05)
    return measure_config(model, None, FakeOps(), gpu, sampler, s, period_s, clock=clock)


@pytest.mark.parametrize("period_s", [0.010, 0.033, 0.1])
@pytest.mark.parametrize("latency_s", [0.0007, 0.004, 0.031])
def test_per_batch_energy_within_one_percent(period_s, latency_s):
    power = 400.0
    rows = [_measure(period_s, latency_s, power, m, phase_s=ph) for m, ph in ((20, 0.0), (1000, 0.037))]
    for r in rows:
        assert r["energy_J"] == pytest.approx(power * latency_s, rel=0.01), (r["n_runs"], r["window_s"])
        assert r["latency_ms"] == pytest.approx(latency_s * 1e3, rel=1e-6)
        assert r["window_s"] >= 6 * period_s - 1e-9 and r["avg_power_W"] == pytest.approx(power, rel=0.01)
        assert r["avg_sm_util"] == 90.0 and r["gpu_temp_C"] == 50.0 and not r["_reasons"]
    assert rows[1]["n_runs"] > rows[0]["n_runs"]          # different n_runs, same per-batch energy


def test_naive_counter_difference_is_what_the_edges_fix():
    """The error the edge method removes: a plain difference around an unaligned window of 6 periods."""
    clock = VirtualClock()
    c = SteppingCounter(clock, period_s=0.1, power_W=400.0, phase_s=0.05)
    e0 = c.read_mJ()
    clock.t += 0.63
    naive = (c.read_mJ() - e0) / 1000.0
    assert abs(naive / (400.0 * 0.63) - 1) > 0.03
    assert window_runs(0.001, 0.1, 6, 20) == 600 and window_runs(0.05, 0.1, 6, 20) == 20
    assert math.isnan(window_energy_J([], 0.0, 1.0)[0])


TRACE = ROOT / "tests" / "data" / "h200_counter_trace.csv"
RUN_DIR = ROOT / "scripts" / "data" / "h200-run-2026-12-04"


def _trace() -> list[tuple[float, float]]:
    """The recorded H200 counter trace: ``[(t_s, mJ), ...]`` as the run polled it."""
    with TRACE.open(newline="") as f:
        return [(float(r["t_s"]), float(r["energy_mJ"])) for r in csv.DictReader(f)]


def _trace_edges(trace) -> list[tuple[float, float]]:
    """``(seconds since the trace's start, mJ)`` at each sample whose value differs from the one before
    (the first sample included): computed here from the raw rows, not by the sampler."""
    t_first, out = trace[0][0], []
    for t, v in trace:
        if not out or v != out[-1][1]:
            out.append((t - t_first, v))
    return out


def _power_W(a, b) -> float:
    return (b[1] - a[1]) / 1000.0 / (b[0] - a[0])


def test_recorded_h200_trace_has_the_step_structure_and_the_runs_period():
    trace = _trace()
    assert len(trace) > 100
    ts, mj = [t for t, _ in trace], [v for _, v in trace]
    assert all(b > a for a, b in zip(ts, ts[1:]))                  # polled in time order
    assert all(b >= a for a, b in zip(mj, mj[1:]))                 # a cumulative counter never goes back
    assert ts[-1] - ts[0] == pytest.approx(1.5, abs=0.05)          # the run's period_probe_s of load

    # the period estimate the run uses: the sampler's median edge spacing (probe_period returns
    # sampler.update_period_s()), fed with the recorded polls on their own clock
    i = [0]
    sampler = CounterSampler(lambda: trace[i[0]][1], clock=lambda: trace[i[0]][0])
    for k in range(len(trace)):
        i[0] = k
        sampler.poll()
    period = sampler.update_period_s()
    assert period == pytest.approx(0.0999, rel=0.02)
    run = json.loads((RUN_DIR / "period.json").read_text())     # what the run itself reported
    assert period == pytest.approx(run["update_period_s"], rel=1e-9) and len(sampler.edges) == run["n_edges"]

    edges = _trace_edges(trace)
    assert [(e.t_s - ts[0], e.mJ) for e in sampler.edges] == edges        # same rule, same samples
    assert 14 <= len(edges) <= 17                                  # 1.5 s / ~0.1 s, first sample included
    gaps = [b[0] - a[0] for a, b in zip(edges, edges[1:])]
    assert gaps[0] <= 1.15 * period                                # the trace starts mid-period
    assert all(abs(g / period - 1) < 0.15 for g in gaps[1:])       # then one update every period (+-1 poll)
    # plausible H200 power per step (the board's limit is 700 W): a ramp, then a loaded plateau
    powers = [_power_W(a, b) for a, b in zip(edges, edges[1:])]
    assert all(50 < p < 700 for p in powers)
    assert 300 < sorted(powers)[len(powers) // 2] < 700


class _RecordingModel(FakeModel):
    """FakeModel that keeps the clock's time at the start of each call (to locate the timed window)."""

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.starts: list[float] = []

    def __call__(self, x=None):
        self.starts.append(self.clock.t)
        return super().__call__(x)


def _replay_trace(trace, latency_s: float, window_s: float, warmup_s: float, k_periods: float = 4.0):
    """measure_config on the replayed trace: timed window of ``max(k_periods x period, window_s)``
    after ``warmup_s`` of warm-up. Returns the row and the window ``(t0, t1)`` in seconds since the
    trace's start."""
    clock = VirtualClock()
    counter = SteppingCounter(clock, trace=trace)
    gpu = FakeGpu(counter)
    sampler = CounterSampler(gpu.read_energy_mJ, clock=clock, side={"sm": lambda: gpu.utilization_pct()[0],
                                                                     "mem": lambda: gpu.utilization_pct()[1],
                                                                     "temp": gpu.temperature_C})
    sampler.poll()
    model = _RecordingModel(clock, latency_s, sampler)
    s = SweepSettings(k_periods=k_periods, m_latencies=window_s / latency_s, warmup_s=warmup_s)
    period = 0.0999                                                # the trace's period (test above)
    r = measure_config(model, None, FakeOps(), gpu, sampler, s, period, clock=clock)
    n_warm, n = int(r["n_warmup"]), int(r["n_runs"])
    assert len(model.starts) == n_warm + 1 + n                     # warm-up, the peak-memory pass, the window
    t0 = model.starts[n_warm + 1] - counter.t_start
    return r, t0, t0 + r["window_s"]


@pytest.mark.parametrize("latency_s", [0.0007, 0.004, 0.031])
def test_replayed_h200_trace_per_batch_energy_is_the_traces_power_times_latency(latency_s):
    trace = _trace()
    edges = _trace_edges(trace)
    end = edges[-1][0]
    rows = []
    # 0.5 s of warm-up skips the trace's ramp; windows of ~0.4 s (k_periods x period) and 0.85 s (the
    # latency term), both ending before the trace does
    for window_s in (0.3, 0.85):
        r, t0, t1 = _replay_trace(trace, latency_s, window_s, warmup_s=0.5)
        assert t1 < end                                            # inside the recording (flat after it)
        assert not r["_reasons"] and r["latency_ms"] == pytest.approx(latency_s * 1e3, rel=1e-6)
        inside = [e for e in edges if t0 <= e[0] <= t1]
        assert len(inside) >= 4
        p_inside = _power_W(inside[0], inside[-1])
        # the smallest edge-aligned span containing the window: last edge at/before t0, first at/after t1
        span = _power_W([e for e in edges if e[0] <= t0][-1], [e for e in edges if e[0] >= t1][0])
        assert r["energy_J"] == pytest.approx(p_inside * latency_s, rel=0.01), (r["n_runs"], t0, t1)
        assert r["energy_J"] == pytest.approx(span * latency_s, rel=0.02), (r["n_runs"], t0, t1)
        assert r["avg_power_W"] == pytest.approx(p_inside, rel=0.01)
        rows.append((r, p_inside))
    (a, pa), (b, pb) = rows
    assert b["n_runs"] > a["n_runs"] and b["window_s"] > 1.5 * a["window_s"]
    # same per-batch energy whatever the number of batches, up to the trace's own power change between
    # the two windows (a couple of % on this plateau)
    assert b["energy_J"] / a["energy_J"] == pytest.approx(pb / pa, rel=0.01)
    assert b["energy_J"] == pytest.approx(a["energy_J"], rel=0.03)


def test_replayed_h200_trace_window_past_its_end_has_no_energy():
    """After the recording ends the replayed counter stays flat. A window that straddles the end is
    measured from the edges inside it (not diluted by the flat tail); one wholly after it has no energy
    (NaN with a reason), never 0."""
    trace = _trace()
    edges = _trace_edges(trace)
    end = edges[-1][0]
    r, t0, t1 = _replay_trace(trace, 0.004, 0.5, warmup_s=1.2)
    assert t0 < end < t1
    inside = [e for e in edges if t0 <= e[0] <= t1]
    assert r["avg_power_W"] == pytest.approx(_power_W(inside[0], inside[-1]), rel=0.01)
    r, t0, _ = _replay_trace(trace, 0.004, 0.5, warmup_s=end + 0.1)
    assert t0 > end
    assert math.isnan(r["energy_J"]) and math.isnan(r["avg_power_W"]) and math.isnan(r["energy_window_J"])
    assert "energy-counter" in r["_reasons"]["energy_J"]


def test_deadline_never_overruns_with_a_heavy_configuration_last():
    """The run's planning rule (predicted cost from the latency model, skip what does not fit), replayed
    on a virtual clock with a last configuration far slower than the rest."""
    s = SweepSettings()
    model = LatencyModel(prior_rate=1e9, prior_a_ms=1.0, safety=1.5)
    period, now, stop = 0.1, 0.0, 60.0
    flops = [5e9] * 40 + [5e13]          # a tiny model 40 times, then one that would take minutes
    done = []
    for f in flops:
        if now + expected_seconds(model.predict_ms("fp16", f), period, s) > stop:
            continue
        true_ms = 2.0 + f / 3e9          # the truth is slower than the prior's rate
        now += expected_seconds(true_ms, period, s)
        model.add("fp16", f, true_ms)
        done.append(f)
    assert now <= stop and 5e13 not in done and len(done) >= 10


def test_group_by_architecture_keeps_the_shuffled_order():
    from carb.design.space import load_space
    from carb.measure.collector import shard_configs

    cfgs = shard_configs(load_space("smoke"), seed=3)
    groups = group_by_architecture(cfgs)
    assert sum(len(g) for g in groups) == len(cfgs)
    first = []
    for c in cfgs:
        key = (c.block, c.depth, c.width_mult, c.early_downsample)
        if key not in first:
            first.append(key)
    assert [(g[0].block, g[0].depth, g[0].width_mult, g[0].early_downsample) for g in groups] == first


BLOCKER = textwrap.dedent("""
    import importlib.abc, runpy, sys
    BLOCKED = ("mlflow", "hydra", "omegaconf", "fvcore", "xgboost", "lightgbm", "optuna", "matplotlib", "scipy",
               "sklearn")
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked on the GPU machine: {name}")
            return None
    sys.meta_path.insert(0, Block())
    sys.argv = [sys.argv[1]] + sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
""")


#: The settings of a quick run on the fake device (every key but ``space``): the end-to-end tests' run.yaml.
FAKE_RUN = textwrap.dedent("""
    seed: 0
    protocol: {k_periods: 4.0, m_latencies: 5.0, min_runs: 3, warmup_s: 0.02, min_warmup: 2, poll_s: 0.002,
               kernels: true, overhead_s: 0.05}
    period_probe_s: 0.3
    write_every: 2
    margin_s: 3
    drift_configs: 2
    latency_prior: {rate_flops_per_ms: 1.0e8, a_ms: 1.0, safety: 1.5}
    build_s: 0.3
""").lstrip()


@pytest.mark.slow
def test_run_py_end_to_end_on_a_fake_device_with_only_the_allowed_imports(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("space: smoke\n" + FAKE_RUN)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-c", BLOCKER, "carb.measure.gpu_run", "--minutes", "0.5",
                        "--out", str(out), "--fake-device", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all((out / f).is_file() for f in files)
    assert {"dataset.parquet", "counter_trace.csv", "period.json", "provenance.json", "run.log"} <= set(files)
    from carb.data.importers.gpu_run import import_gpu_run

    df, prov = import_gpu_run(out)
    ok = df[df["status"] == "ok"]
    # a window that saw fewer than 2 counter updates (a loaded machine can starve the poller) has no
    # energy and says why; never a 0
    measured = ok[ok["energy_J"].notna()]
    assert len(measured) >= 3 and (measured["energy_J"] > 0).all()
    assert ok.loc[ok["energy_J"].isna(), "missing_reason"].str.contains("energy").all()
    assert (measured["energy_window_J"] / measured["n_runs"]).round(9).equals(measured["energy_J"].round(9))
    assert prov["seconds"] <= 0.5 * 60 + 5 and prov["device_id"] == df["device_id"].iloc[0]
    period = json.loads((out / "period.json").read_text())["update_period_s"]
    assert period == pytest.approx(0.05, rel=0.2)           # the fake counter updates every 50 ms
    # back home: carb-collect import_run=DIR writes the dataset with its provenance and logs it
    from carb.commands.cli import compose
    from carb.commands.collect import run_collect
    from carb.data.io import load_dataset

    dest = tmp_path / "h200.parquet"
    res = run_collect(compose("collect", [f"import_run={out}", f"out={dest}", f"tracking.uri=sqlite:///{tmp_path}/m.db"]))
    assert res["n_rows"] == len(df) and len(load_dataset(dest)) == len(df)
    assert json.loads((tmp_path / "h200.provenance.json").read_text())["device_id"] == prov["device_id"]


@pytest.mark.parametrize("text, needle", [
    ("protocol: {k_periods: 6.0, bogus: 1}\n", "protocol: unknown setting(s) ['bogus']"),
    ("- not a mapping\n", "must be a mapping of settings"),
    ("protocol: {k_periods: [\n", "cannot read the settings"),
    ("space: nope\n", "space: 'nope' is not a known space"),
])
def test_a_bad_settings_file_is_one_line_and_exit_2_before_anything_starts(tmp_path, capsys, text, needle):
    from carb.measure import gpu_run

    conf = tmp_path / "bad.yaml"
    conf.write_text(text)
    out = tmp_path / "out"
    assert gpu_run.main(["--out", str(out), "--config", str(conf), "--fake-device"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("carb.measure.gpu_run: error:") and needle in err[0]
    assert not out.exists()                     # nothing was started or written
