"""Leave-one-family-out on a measured zoo (carb.analysis.zoo_cpu_eval) and the CPU part of
scripts/bench/zoo.py, on synthetic measured-zoo frames with known laws (tests/synthetic.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb.analysis.zoo_cpu_eval import (LATENCY_MODELS, MEMORY_MODELS, PhysicsMemory, RegisteredCascade, cascade_lofo,
                                        evaluate, evaluate_zoo, lofo, usable)
from carb.errors import DatasetError
from tests.synthetic import cpu_zoo_frame, zoo_schema_frame

ROOT = Path(__file__).resolve().parents[1]
FAMS = {"a": 2, "b": 1, "c": 3, "d": 1, "e": 2, "f": 1}


#: Real traced networks of 4 families (tests/synthetic.py's known cost law), small enough for a LOFO of the cascade.
SCHEMA_MODELS = ("tv:squeezenet1_0", "tv:squeezenet1_1", "tv:mobilenet_v3_small", "tv:mobilenet_v2", "tv:resnet18",
                 "tv:shufflenet_v2_x0_5", "tv:shufflenet_v2_x1_0")


def registered():
    """The cascade carb-train fits, from the shipped config (composed as the command composes it)."""
    from carb.commands.cli import compose, to_dict

    cfg = compose("train", ["data.path=zoo-cpu"])
    return lambda: RegisteredCascade(to_dict(cfg.model), to_dict(cfg.features), to_dict(cfg.prior))


@pytest.mark.slow
def test_the_registered_cascade_is_carb_fitted_once_per_family_for_both_targets(monkeypatch):
    """CARB in the LOFO is the cascade carb-train fits (not a lighter stand-in): one fit per held-out family,
    never on that family, predicting latency and memory; on a known law it beats B1 and the liveness-only
    memory estimate (which misses the law's 30 MB constant)."""
    from carb.model.cascade import CarbCascade

    frame = zoo_schema_frame(SCHEMA_MODELS, sizes=(32, 64), batches=(1, 4, 16))
    fits = []
    real = CarbCascade.fit
    monkeypatch.setattr(CarbCascade, "fit", lambda self, X, y, *a, **k: fits.append(set(X["family"])) or real(self, X, y, *a, **k))
    res = evaluate_zoo(frame, registered())
    fams = set(frame["family"])
    assert len(fits) == len(fams) and all(len(fams - f) == 1 for f in fits)
    _, lat, _ = res["latency_ms"]
    _, mem, pred = res["peak_memory_MB"]
    assert lat["families"] == len(fams) and lat["carb_pooled_pct"] < lat["b1_pooled_pct"]
    assert mem["carb_pooled_pct"] < 5 < mem["physics_pooled_pct"]
    assert np.isfinite(pred[["lo_ms", "hi_ms"]].to_numpy()).all()


def test_the_cascade_lofo_predicts_each_family_from_the_others_only():
    frame = usable(cpu_zoo_frame(FAMS))

    class Mean:
        def fit(self, f):
            self.fams = set(f["family"])
            self.lat = f["latency_ms"].mean()
            return self

        def predict(self, f):
            assert not self.fams & set(f["family"])
            return pd.DataFrame({"pred_latency_ms": self.lat}, index=f.index)

    out = cascade_lofo(frame, Mean)
    for fam, g in frame.groupby("family"):
        assert np.allclose(out.loc[g.index, "pred_latency_ms"], frame.loc[frame["family"] != fam, "latency_ms"].mean())
    assert out["pred_peak_memory_MB"].isna().all()   # a target the model does not predict stays NaN


def test_lofo_never_fits_on_the_held_out_family():
    seen = []

    class Spy(PhysicsMemory):
        def fit(self, frame):
            seen.append(set(frame["family"]))
            return self

        def predict(self, frame):
            seen[-1] = (seen[-1], set(frame["family"]))
            return super().predict(frame)

    lofo(usable(cpu_zoo_frame(FAMS)), {"spy": Spy})
    assert len(seen) == len(FAMS)
    for train, test in seen:
        assert len(test) == 1 and not train & test and train | test == set(FAMS)


def test_intervals_cover_and_are_finite():
    frame = cpu_zoo_frame(FAMS, seed=1)
    frame["latency_ms"] *= np.exp(np.random.default_rng(0).normal(0, 0.1, len(frame)))
    carb = lofo(usable(frame), {"c": LATENCY_MODELS["hj"]})["pred_c"]
    _, s, pred = evaluate(frame, "latency_ms", LATENCY_MODELS, carb=carb)
    assert np.isfinite(pred[["lo_ms", "hi_ms"]].to_numpy()).all()
    assert (pred["lo_ms"] < pred["hi_ms"]).all() and 0 < s["coverage"] <= 1 and s["hi_lo"] > 1


def test_missing_column_and_too_few_families_are_one_line():
    with pytest.raises(DatasetError, match="peak_live_MB"):
        usable(cpu_zoo_frame(FAMS).drop(columns="peak_live_MB"))
    with pytest.raises(DatasetError, match="2 families"):
        evaluate(cpu_zoo_frame({"a": 1, "b": 1}), "latency_ms", LATENCY_MODELS)
    with pytest.raises(DatasetError, match="no CARB predictions"):
        evaluate(cpu_zoo_frame(FAMS), "latency_ms", LATENCY_MODELS)


@pytest.mark.slow
def test_bench_cpu_part_last_line_and_saved_figures(tmp_path):
    data, out = tmp_path / "zoo.parquet", tmp_path / "zoo_bench.json"
    frame = zoo_schema_frame(SCHEMA_MODELS, sizes=(32,), batches=(1, 4))
    frame.to_parquet(data)
    FAMS = frame.groupby("family")["model_name"].nunique().to_dict()
    out.write_text(json.dumps({"command": "gpu run", "gpu": [], "gpu_no_trace": [{"device": "kept"}],
                               "cpu": {"old": 1}}))
    r = subprocess.run([sys.executable, str(ROOT / "scripts/bench/zoo.py"), "--part", "cpu", "--cpu-data", str(data),
                        "--no-screen", "--trace-cold-s", "45.1", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith(f"zoo: devices=1 families={len(FAMS)} models={sum(FAMS.values())} ")
    for key in ("lofo_within20=", "lofo_mem_mape_max=", "coverage_min=", "b1_family_wins=", "trace_cold_s=45.1",
                "screen_s=nan"):
        assert key in last
    saved = json.loads(out.read_text())
    assert saved["last_line"] == last
    assert saved["gpu_no_trace"] == [{"device": "kept"}] and "old" not in saved["cpu"]   # CPU keys replaced only
    assert saved["gpu_command"] == "gpu run" and "--part cpu" in saved["command"]
    assert {r["family"] for r in saved["cpu"]["latency"]["table"]} == set(FAMS)
    from scripts.zoo_results import zoo_lines

    md = "\n".join(zoo_lines(out))
    assert last in md and all(f"| {f} | {n} |" in md for f, n in FAMS.items())


def test_results_section_without_saved_figures_says_how_to_make_them(tmp_path):
    from scripts.zoo_results import zoo_lines

    assert "scripts/bench/zoo.py" in "\n".join(zoo_lines(tmp_path / "none.json"))


def test_bench_missing_data_exits_2(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "scripts/bench/zoo.py"), "--part", "cpu", "--cpu-data",
                        str(tmp_path / "none.parquet"), "--out", str(tmp_path / "o.json")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--cpu-data" in r.stderr
