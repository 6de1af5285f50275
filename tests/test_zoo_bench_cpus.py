"""scripts/bench/zoo.py scores every shipped CPU zoo, each its own device: by default the Zen 4's
(``zoo-cpu``, first: the JSON's ``cpu``) and the Xeon's (``zoo-cpu-xeon``); the last line counts each as a
device (families and wins summed, worst and lowest Spearman over both, memory's worst over both)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.script_module import load_script

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    """scripts/bench/zoo.py as a module (it is a script, not a package)."""
    return load_script("scripts/bench/zoo.py", "zoo_bench_cpus")


def test_default_cpu_zoos_are_every_shipped_one_zen4_first():
    from carb.data.io import SHIPPED

    paths = _bench().cpu_zoo_paths(None)
    assert paths == [SHIPPED["zoo-cpu"], SHIPPED["zoo-cpu-xeon"]]
    assert _bench().cpu_zoo_paths(["zoo-cpu-xeon"]) == [SHIPPED["zoo-cpu-xeon"]]


def test_a_missing_cpu_zoo_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        _bench().cpu_zoo_paths(["zoo-cpu", str(tmp_path / "none.parquet")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "\n" not in err and err.startswith("--cpu-data: ") and "zoo-cpu-xeon" in err


def _part(families, within, worst, rho, wins, cov, mem_worst):
    lat = {"families": families, "within20": within, "mape_max": worst, "rho_min": rho, "b1_wins": wins,
           "hj_wins": wins, "coverage": cov}
    return {"latency": {"summary": lat}, "memory": {"summary": {"mape_max": mem_worst, "coverage": 0.9}}}


def test_last_line_counts_each_cpu_zoo_as_a_device():
    bench = _bench()
    zen4, xeon = _part(32, 32, 15.5, 0.86, 32, 0.88, 3.0), _part(31, 29, 27.0, 0.70, 30, 0.80, 4.5)
    one = bench.last_line([zen4], [], 51, 46.4, 0.31)
    two = bench.last_line([zen4, xeon], [], 51, 46.4, 0.31)
    assert one.startswith("zoo: devices=1 families=32 ") and "lofo_within20=32/32" in one
    assert two.startswith("zoo: devices=2 families=63 models=51 ")
    for key in ("lofo_within20=61/63", "lofo_lat_mape_max=27.0", "lofo_lat_rho_min=0.70", "lofo_mem_mape_max=4.5",
                "coverage_min=0.800", "b1_family_wins=62/63", "hj_family_wins=62/63"):
        assert key in two


def _saved_cpu(data: str, device: str, worst: float) -> dict:
    """One CPU zoo's saved part (the keys scripts/zoo_results.py reads), one family ``fam``."""
    summ = {"carb_pooled_pct": 10.0, "hj_pooled_pct": 30.0, "b1_pooled_pct": 40.0, "within20": 1, "families": 1,
            "hj_within20_fams": 0, "b1_within20_fams": 0, "worst": "fam", "mape_max": worst, "hj_mape_max": 50.0,
            "b1_mape_max": 60.0, "rho_min": 0.9, "b1_wins": 1, "hj_wins": 1, "coverage": 0.9, "coverage_rows": 0.9,
            "hi_lo": 1.5}
    row = {"family": "fam", "models": 1, "rows": 3, "carb_mape_pct": worst, "hj_mape_pct": 30.0, "b1_mape_pct": 40.0,
           "carb_rho": 0.9, "carb_within20_pct": 100.0, "coverage": 1.0, "hi_lo": 1.5, "physics_mape_pct": 0.0}
    return {"data": data, "device": device, "latency": {"summary": summ, "table": [row]},
            "memory": {"summary": summ, "table": [row]}}


def test_results_section_has_each_cpu_zoo_with_its_device_and_train_command(tmp_path):
    import json

    from scripts.zoo_results import zoo_lines

    zen4 = _saved_cpu("carb/data/zoo-cpu.parquet", "AMD EPYC 34cc4b132c", 12.5)
    xeon = _saved_cpu("carb/data/zoo-cpu-xeon.parquet", "Intel(R) Xeon(R) Processor 6a0ea403ee", 27.4)
    path = tmp_path / "zoo_bench.json"
    path.write_text(json.dumps({"command": "c", "last_line": "zoo: devices=2", "cpu": zen4, "cpus": [zen4, xeon],
                                "screen_candidates": 0, "screen_s": float("nan"), "trace_cold_s": 46.4}))
    md = "\n".join(zoo_lines(path))
    for device, stem in (("AMD EPYC 34cc4b132c", "zoo-cpu"), ("6a0ea403ee", "zoo-cpu-xeon")):
        assert device in md and f"`carb-train data.path={stem}`" in md
    assert md.count("| fam | 1 | 3 |") == 2 and "27.4" in md
