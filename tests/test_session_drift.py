"""carb.data.session_drift and the later-session intervals: window levels from configurations measured in several
windows, the pooled drift and its half-width, the shipped table against its sources, and the intervals a later
session gets (wider, by the drift in quadrature) while the rows' own session keeps the conformal ones."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


def windows_frame(levels: dict[str, float], configs: int = 6, device: str = "dev1", kind: str = "cpu") -> pd.DataFrame:
    """Rows of ``configs`` configurations measured in each window (key: its first ``measured_at``), latency a
    config effect times ``exp(level)`` of the window: made by the test, not measured."""
    rows = []
    for w, (start, level) in enumerate(levels.items()):
        t0 = pd.Timestamp(start, tz="UTC")
        for c in range(configs):
            rows.append({"device_id": device, "device_kind": kind, "config_id": f"c{c}", "precision": "fp32",
                         "status": "ok", "driver": "linux-x", "latency_ms": (10.0 + 5 * c) * np.exp(level),
                         "measured_at": (t0 + pd.Timedelta(minutes=c)).isoformat()})
    return pd.DataFrame(rows)


def test_window_levels_recover_the_shifts_and_pool_them():
    """Three windows hours apart on one boot are three sessions; their levels come back centred, and the
    pooled drift is their sample sd with windows - 1 degrees of freedom; one window alone gives none."""
    from carb.data.session_drift import drift, drift_half, window_levels

    rows = windows_frame({"2026-12-07T16:00": 0.10, "2026-12-07T19:00": -0.05, "2026-12-07T22:00": -0.05})
    lv = window_levels(rows, gap_h=1.5)
    assert len(lv) == 3 and set(lv["n_configs"]) == {6}
    assert lv["level_log"].to_numpy() == pytest.approx([0.10 - 0, -0.05, -0.05], abs=1e-6)
    term = drift(lv)
    assert term["df"] == 2 and term["sd_log"] == pytest.approx(np.std([0.1, -0.05, -0.05], ddof=1), rel=1e-6)
    assert drift_half(term, 0.9) > 2.9 * term["sd_log"]   # t(2) 95 % quantile 2.92: two windows' worth is wide
    assert drift_half(None, 0.9) == 0.0
    assert window_levels(rows, gap_h=None)["window"].nunique() == 1 or drift(window_levels(rows, None)) is None
    assert drift(window_levels(windows_frame({"2026-12-07T16:00": 0.0}), 1.5)) is None


def test_a_configuration_seen_once_does_not_count():
    """Configurations measured in one window only carry no level information: a window sharing none is left out."""
    from carb.data.session_drift import window_levels

    a = windows_frame({"2026-12-07T10:00": 0.0, "2026-12-07T14:00": 0.2})
    b = windows_frame({"2026-12-08T10:00": 0.5}, configs=3).assign(config_id=lambda f: "other" + f["config_id"])
    lv = window_levels(pd.concat([a, b], ignore_index=True), 1.5)
    assert lv["window"].str.startswith("2026-12-08").sum() == 0 and len(lv) == 2
    assert lv["level_log"].max() - lv["level_log"].min() == pytest.approx(0.2, abs=1e-6)


def test_the_shipped_table_matches_its_sources():
    """carb/data/session-drift.csv is what python -m scripts.data.session_drift builds from the shipped files."""
    r = subprocess.run([sys.executable, "-m", "scripts.data.session_drift", "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_shipped_cpu_drift_and_its_gpu_absence():
    """The CPU drift pools three devices' windows (the Xeon's five among them) to a log sd between the Zen 5's
    few percent and the Xeon's tens; no GPU was measured in two windows."""
    from carb.data.session_drift import load_levels, shipped_drift

    term = shipped_drift("cpu")
    assert term["devices"] == 3 and term["windows"] >= 9 and 0.05 < term["sd_log"] < 0.3
    xeon = load_levels().query("device_id == '6a0ea403ee' and precision == 'fp32'")
    assert len(xeon) == 5 and xeon["level_log"].max() - xeon["level_log"].min() > 0.3
    assert shipped_drift("gpu") is None


def test_session_widened_adds_in_quadrature_about_the_centre():
    """An interval's half-width w becomes sqrt(w^2 + h^2) about its centre; infinite bounds stay as they are."""
    from carb.model.intervals import session_widened

    lo, hi = session_widened(np.array([-0.3, 0.1, -np.inf]), np.array([0.1, 0.5, 0.2]), 0.4)
    assert lo[0] == pytest.approx(-0.1 - np.hypot(0.2, 0.4)) and hi[0] == pytest.approx(-0.1 + np.hypot(0.2, 0.4))
    assert (lo[1] + hi[1]) / 2 == pytest.approx(0.3) and not np.isfinite(lo[2]) and hi[2] == 0.2


def test_interval_widens_only_for_a_later_session():
    """A calibration carrying a session drift widens latency (not memory) for later_session, not otherwise;
    without_session drops it; with_session leaves a calibration without those targets alone."""
    from carb.data.session_drift import drift_half
    from carb.model.intervals import interval, session_term, with_session, without_session

    ratios = list(np.linspace(-0.2, 0.2, 41))
    entry = {"coverage": 0.9, "log_ratios": ratios, "lower": -0.18, "upper": 0.18}
    cal = {"latency_ms": dict(entry), "peak_memory_MB": dict(entry)}
    term = {"sd_log": 0.14, "df": 15, "kind": "cpu"}
    with_session(cal, term)
    assert session_term(cal)["sd_log"] == 0.14 and "session" not in cal["peak_memory_MB"]
    pred = pd.DataFrame({"pred_latency_ms": [100.0], "pred_peak_memory_MB": [50.0]})
    later, same = interval(cal, pred), interval(without_session(cal), pred)
    half = {k: np.log(f["hi_latency_ms"].iloc[0] / f["lo_latency_ms"].iloc[0]) / 2 for k, f in (("later", later), ("same", same))}
    assert half["later"] == pytest.approx(np.hypot(half["same"], drift_half(term, 0.9))) and half["later"] > 1.5 * half["same"]
    assert later["hi_peak_memory_MB"].iloc[0] == same["hi_peak_memory_MB"].iloc[0]
    assert interval(without_session(cal), pred)["hi_latency_ms"].iloc[0] == same["hi_latency_ms"].iloc[0]
    assert session_term(without_session(cal)) is None and with_session({"x": 1}, term) == {"x": 1}


def test_scoped_model_names_its_scope_and_refuses_a_bad_one():
    """later_session keeps the model and says how much the drift is; this_session gives a copy without the
    drift (the model itself unchanged); a model without one has no note; a bad scope names the values."""
    from types import SimpleNamespace

    from carb.analysis.screening import scoped_model
    from carb.errors import ConfigError

    cal = {"latency_ms": {"coverage": 0.9, "log_ratios": [0.0] * 20,
                          "session": {"sd_log": 0.139, "df": 15, "devices": 3, "windows": 9, "kind": "cpu"}}}
    m = SimpleNamespace(intervals_=cal)
    same, note = scoped_model(m, "later_session")
    assert same is m and "0.139" in note and "9 windows" in note
    other, note = scoped_model(m, "this_session")
    assert other is not m and "session" not in other.intervals_["latency_ms"] and "session" in m.intervals_["latency_ms"]
    assert "own measuring session" in note
    assert scoped_model(SimpleNamespace(intervals_={}), "later_session") == (SimpleNamespace(intervals_={}), None)
    with pytest.raises(ConfigError, match="interval_scope: must be one of later_session, this_session"):
        scoped_model(m, "tomorrow")


def test_training_stores_the_drift_for_cpu_rows_only():
    """add_session_drift puts the shipped CPU drift on a CPU model's latency entry; GPU rows, or the setting
    off, leave the intervals as they were."""
    from types import SimpleNamespace

    from carb.analysis.training import add_session_drift

    def model():
        return SimpleNamespace(intervals_={"latency_ms": {"coverage": 0.9, "log_ratios": [0.0] * 20}})

    cpu, gpu = pd.DataFrame({"device_kind": ["cpu"] * 3}), pd.DataFrame({"device_kind": ["gpu"] * 3})
    on = {"enabled": True, "kinds": ["cpu"]}
    m, said = model(), []
    assert add_session_drift(m, cpu, on, said.append)["kind"] == "cpu" and "session" in m.intervals_["latency_ms"]
    assert len(said) == 1 and "later session of this CPU" in said[0] and "log sd" in said[0]
    for rows, settings in ((gpu, on), (cpu, {"enabled": False, "kinds": ["cpu"]})):
        m = model()
        assert add_session_drift(m, rows, settings) is None and "session" not in m.intervals_["latency_ms"]


@pytest.mark.slow
def test_the_later_session_study_widens_to_cover_more(capsys):
    """scripts/studies/later_session.py on the shipped Xeon windows: the model of the 16:07 window covers the later
    windows of its boot better with the session drift than without, and its intervals are wider."""
    from scripts.studies import later_session

    later_session.main([])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fig = dict(kv.split("=") for kv in last.split()[1:])
    assert last.startswith("later_session: device=6a0ea403ee") and int(fig["windows"]) >= 2
    assert float(fig["later_min"]) > float(fig["this_min"]) + 0.2 and float(fig["width_later"]) > float(fig["width_this"])


def test_a_transfer_does_not_inherit_the_source_session_drift():
    """A calibrated transfer's entries copied from its source drop the source's session drift (they describe the
    K rows' session); the source's own intervals keep it."""
    from types import SimpleNamespace

    from carb.model.transfer import source_intervals

    src = SimpleNamespace(intervals_={"coverage": 0.9, "latency_ms": {"lower": -0.1, "upper": 0.1,
                                                                      "session": {"sd_log": 0.139, "df": 15}}})
    got = source_intervals(src)
    assert "session" not in got["latency_ms"] and got["latency_ms"]["upper"] == 0.1 and got["coverage"] == 0.9
    assert "session" in src.intervals_["latency_ms"] and source_intervals(SimpleNamespace()) == {}
