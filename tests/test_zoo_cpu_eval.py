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

from carb.analysis.zoo_cpu_eval import (LATENCY_MODELS, MEMORY_MODELS, CpuZooMemory, PhysicsMemory, evaluate, lofo,
                                        usable)
from carb.errors import DatasetError
from tests.synthetic import cpu_zoo_frame

ROOT = Path(__file__).resolve().parents[1]
FAMS = {"a": 2, "b": 1, "c": 3, "d": 1, "e": 2, "f": 1}


def test_known_latency_law_carb_near_exact_and_beats_flops_only():
    table, s, _ = evaluate(cpu_zoo_frame(FAMS), "latency_ms", LATENCY_MODELS)
    assert s["families"] == len(FAMS)
    assert s["carb_pooled_pct"] < 3 < s["b1_pooled_pct"]      # bytes, n_ops and bf16 matter in the law
    assert s["b1_wins"] == len(FAMS)


def test_memory_recovers_the_allocator_overhead_physics_does_not():
    table, s, _ = evaluate(cpu_zoo_frame(FAMS, mem_overhead=1.1), "peak_memory_MB", MEMORY_MODELS)
    assert s["carb_pooled_pct"] < 0.01
    assert s["physics_pooled_pct"] == pytest.approx(100 / 11, rel=1e-6)   # 1/1.1 - 1
    assert (table["physics_mape_pct"] > table["carb_mape_pct"]).all()


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
    _, s, pred = evaluate(frame, "latency_ms", LATENCY_MODELS)
    assert np.isfinite(pred[["lo_ms", "hi_ms"]].to_numpy()).all()
    assert (pred["lo_ms"] < pred["hi_ms"]).all() and 0 < s["coverage"] <= 1 and s["hi_lo"] > 1


def test_memory_model_falls_back_to_all_rows_for_an_unseen_precision():
    f = usable(cpu_zoo_frame(FAMS))
    m = CpuZooMemory().fit(f[f["precision"] == "fp32"])
    bf = f[f["precision"] == "bf16"]
    assert np.allclose(m.predict(bf) / PhysicsMemory().predict(bf), 1.1)


def test_missing_column_and_too_few_families_are_one_line():
    with pytest.raises(DatasetError, match="peak_live_MB"):
        usable(cpu_zoo_frame(FAMS).drop(columns="peak_live_MB"))
    with pytest.raises(DatasetError, match="2 families"):
        evaluate(cpu_zoo_frame({"a": 1, "b": 1}), "latency_ms", LATENCY_MODELS)


def test_bench_cpu_part_last_line_and_saved_figures(tmp_path):
    data, out = tmp_path / "zoo.parquet", tmp_path / "zoo_bench.json"
    cpu_zoo_frame(FAMS).to_parquet(data)
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
