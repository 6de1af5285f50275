"""The saved H100 zero-shot prediction (issue 30) and the scoring that will check it against real rows."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from scripts.studies.zero_shot_gpu import ROOT, _registered, score_table

SAVED = ROOT / "scripts" / "data" / "h100-zero-shot"


def test_saved_prediction_covers_what_the_gpu_collector_draws():
    pred = pd.read_parquet(SAVED / "prediction.parquet")
    prov = json.loads((SAVED / "provenance.json").read_text())
    assert prov["rows"] == {"paper": 4000, "screening": 3072}
    assert pred["space"].value_counts().to_dict() == prov["rows"]
    for t in ("latency_ms", "energy_J", "peak_memory_MB"):
        p = pred[f"pred_{t}"].to_numpy(float)
        assert np.isfinite(p).all() and (p > 0).all()
        assert (pred[f"lo_{t}"] <= pred[f"pred_{t}"]).all() and (pred[f"pred_{t}"] <= pred[f"hi_{t}"]).all()
    assert "H100" in prov["spec"] and prov["source_model"].startswith("models:/carb-nvidia-h200")
    # energy from the spec-record power model (issue 45), its interval widened and said so
    assert pred["energy_note"].str.contains("no second GPU's energy has been measured").all()
    assert any("energy_J: power" in ln for ln in prov["calibrate_output"])
    assert any(ln.startswith("carb-calibrate: energy interval") for ln in prov["calibrate_output"])
    width = {t: float(np.median(pred[f"hi_{t}"] / pred[f"lo_{t}"])) for t in ("latency_ms", "energy_J")}
    assert width["energy_J"] > width["latency_ms"]
    assert prov["command"].startswith("python -m scripts.studies.zero_shot_gpu predict") and not prov["code_dirty"]


def test_score_table_mape_spearman_coverage():
    pred = pd.DataFrame({"config_id": ["a", "b", "c", "d"], "pred_latency_ms": [1.0, 2.0, 3.0, 4.0],
                         "lo_latency_ms": [0.9, 1.0, 2.0, 4.5], "hi_latency_ms": [1.2, 3.0, 4.0, 5.0]})
    meas = pd.DataFrame({"config_id": ["a", "b", "c", "d", "zz"], "precision": ["fp32", "fp32", "fp16", "fp16", "fp32"],
                         "latency_ms": [1.0, 2.5, 3.0, 4.0, 9.0]})
    t = score_table(pred, meas).set_index(["target", "precision"])
    allrow = t.loc[("latency_ms", "all")]
    assert allrow["rows"] == 4                                   # "zz" was never predicted
    assert abs(allrow["mape_pct"] - 100 * (0.5 / 2.5) / 4) < 1e-9
    assert allrow["coverage"] == 0.75                           # d: 4.0 is below its lo 4.5
    assert allrow["spearman"] > 0.99
    assert t.loc[("latency_ms", "fp16"), "rows"] == 2


def test_registration_lines_of_train_and_calibrate():
    assert _registered("carb-train: registered carb-nvidia-h200-x version 3 (run r)", "train") == \
        "models:/carb-nvidia-h200-x/3"
    out = "carb-calibrate: zero-shot model registered as carb-h100-y version 1 in 3 s\n"
    assert _registered(out, "calibrate") == "models:/carb-h100-y/1"
