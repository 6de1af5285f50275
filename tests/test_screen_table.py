"""What carb-screen shows a person: a terminal table within 120 characters that leads with the knobs,
the decision, the probability, the predictions with intervals and the rank; the same order in the files,
with predicted telemetry named as predictions; the budget in units; the closing "next" block; and
`carb-quickstart --help`."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from carb.commands.screen_table import TABLE_WIDTH, budget_text, file_frame, format_table, next_steps, num

TARGETS = ["peak_memory_MB", "energy_J", "latency_ms"]


def _wide_frame(n: int = 6) -> pd.DataFrame:
    """Candidates with the widest values a screening prints: bottleneck blocks, 'unverified', 4-digit
    latencies with intervals, an unbounded interval, long reasons, many extra columns."""
    rng = np.random.default_rng(0)
    p = {"peak_memory_MB": rng.uniform(100, 90000, n), "energy_J": rng.uniform(0.001, 900, n),
         "latency_ms": rng.uniform(1000, 9177, n)}
    df = pd.DataFrame({"config_id": [f"id{i}" for i in range(n)], "block": "bottleneck", "depth": 152,
                       "width_mult": 0.625, "input_size": 224, "batch_size": 128, "precision": "bf16",
                       "early_downsample": False, "stages": "3-8-36-3", "inner_mult": 1.0,
                       "avg_sm_util": 50.0, "batch_x_sm": 6400.0, "flops": 1e12,
                       "decision": "unverified", "p_feasible": rng.uniform(0, 1, n), "rank": np.arange(1, n + 1) * 100,
                       "pareto": True, "in_domain": False,
                       "decision_reason": "outside the training domain; precision never measured; "
                                          "latency_ms interval unbounded"})
    for t, v in p.items():
        df[f"pred_{t}"], df[f"lo_{t}"], df[f"hi_{t}"] = v, v * 0.61, v * 1.83
    df.loc[0, "hi_latency_ms"] = np.inf
    df["pred_energy_J_per_image"] = df["pred_energy_J"] / 128
    return df


def test_terminal_table_fits_120_columns_and_leads_with_knobs_decision_probability():
    df = _wide_frame()
    preds = [f"pred_{t}" for t in TARGETS] + ["pred_energy_J_per_image"]
    out = format_table(df, preds, ["pareto", "in_domain"])
    lines = out.splitlines()
    assert max(map(len, lines)) <= TABLE_WIDTH, max(map(len, lines))
    head = lines[0].split()
    assert head[:8] == ["block", "depth", "width", "input", "batch", "prec", "decision", "P"]
    order = [head.index(h) for h in ("memory", "energy", "latency", "J/image", "rank")]
    assert order == sorted(order)
    assert "inf]" in lines[1]                                   # the unbounded interval says so
    assert "3469" in format_table(df.assign(pred_latency_ms=3469.0), ["pred_latency_ms"])   # no 3.47e+03
    # the profile list's long reasons are cut to the width, never wrapped
    prof = format_table(df.assign(profile_score=0.5), [], ["profile_score", "decision_reason"])
    assert max(map(len, prof.splitlines())) <= TABLE_WIDTH and "reason" in prof.splitlines()[0]


def test_numbers_and_budget_in_units():
    assert [num(v) for v in (0.00206, 49.0, 3469.2, 73213.0, 2.5e6, np.inf, np.nan)] == \
        ["0.00206", "49", "3469", "73.2k", "2.5M", "inf", "-"]
    assert [num(v, 2) for v in (4916.0, 448.0, 14747.0)] == ["4.9k", "448", "15k"]
    assert budget_text({"latency_ms": 20.0}) == "latency <= 20 ms per batch"
    assert budget_text({"peak_memory_MB": 1024.0, "energy_J": 2.0}) == "peak memory <= 1024 MB, energy <= 2 J per batch"
    assert budget_text({}) == "none"


def test_files_lead_with_knobs_decision_probability_predictions_rank():
    out = file_frame(_wide_frame(), TARGETS)
    cols = list(out.columns)
    assert cols[:10] == ["block", "depth", "width_mult", "input_size", "batch_size", "precision", "early_downsample",
                         "stages", "inner_mult", "config_id"]
    assert cols[10:12] == ["decision", "p_feasible"]
    assert cols[12:15] == ["pred_peak_memory_MB", "lo_peak_memory_MB", "hi_peak_memory_MB"]
    assert cols.index("pred_energy_J_per_image") < cols.index("rank") < cols.index("flops")
    # telemetry screening fills in is named as a prediction
    assert "pred_avg_sm_util" in cols and "pred_batch_x_sm" in cols and "avg_sm_util" not in cols
    assert not cols[0].startswith("#")


def test_next_block_names_budget_calibrate_python_ui():
    text = "\n".join(next_steps("models:/carb-x@champion", "sqlite:///m.db"))
    for needle in ("screen.budget.latency_ms=", "carb-calibrate source=models:/carb-x@champion",
                   "carb.load_model('models:/carb-x@champion').predict(",
                   "mlflow ui --backend-store-uri sqlite:///m.db"):
        assert needle in text, needle


@pytest.mark.parametrize("module", ["collect", "train", "tune", "promote", "characterize", "screen", "import_data",
                                    "calibrate", "probe", "quickstart"])
def test_every_command_answers_help_with_its_groups_and_keys(module):
    r = subprocess.run([sys.executable, "-m", f"carb.{module}", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Exception" not in r.stderr
    assert "== Configuration groups ==" in r.stdout and "== Config ==" in r.stdout
    assert "\ntracking:\n  uri:" in r.stdout                     # the keys, with their values
    if module == "quickstart":
        assert "data=h200" in r.stdout and "calibrate=true" in r.stdout and "profile_next: 10" in r.stdout


def test_a_zoo_table_leads_with_the_model_and_keeps_its_intervals_before_the_family():
    """A shortlist of named networks (space=zoo) printed `input batch prec ... model_name family top1 top`: the
    model came after the predictions, the intervals were dropped first and the pretrained tag was cut at the edge.
    Now the model leads, the family (implied by the name) goes before any interval, the files lead with the
    model and its family."""
    n = 5
    df = pd.DataFrame({"model_name": ["tv:mobilenet_v3_small", "timm:efficientvit_b0.r224_in1k", "timm:lcnet_050",
                                      "timm:levit_128s", "tv:regnet_y_400mf"],
                       "family": ["mobilenet", "efficientvit", "lcnet", "levit", "regnet"],
                       "input_size": 224, "batch_size": 1, "precision": ["fp32", "bf16", "bf16", "fp32", "fp32"],
                       "decision": "borderline", "p_feasible": 0.89, "rank": np.arange(1, n + 1),
                       "pareto": True, "pareto_ties": "a,b", "top1": [0.6764, 0.7159, 0.6314, 0.7652, 0.7404]})
    for t, v in {"peak_memory_MB": 32.7, "latency_ms": 17.2}.items():
        df[f"pred_{t}"], df[f"lo_{t}"], df[f"hi_{t}"] = v, v * 0.61, v * 1.83
    out = format_table(df, ["pred_peak_memory_MB", "pred_latency_ms"], ["pareto", "pareto_ties"],
                       users=["model_name", "family", "top1"])
    lines = out.splitlines()
    assert max(map(len, lines)) <= TABLE_WIDTH
    head = lines[0].split()
    assert head[:5] == ["model", "input", "batch", "prec", "decision"] and head.count("model") == 1
    assert "[10,31]" in lines[1] and "top1" in head                     # intervals kept, accuracy shown
    assert "timm:efficientvit_b0.r224_in1k" in out
    cols = list(file_frame(df, ["peak_memory_MB", "latency_ms"], ["model_name", "family", "top1"]).columns)
    assert cols[:5] == ["model_name", "family", "input_size", "batch_size", "precision"]
