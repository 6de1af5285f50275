"""``scripts/bench/zoo.py --part cascade``: the cascade ``carb-train data=timm_zoo`` fits beside
``ZooLatencyModel`` leave-one-family-out on the same rows and splits of one device, with its own
``zoo_cascade:`` last line. The benchmark rows are made here (real timm networks traced on the meta device,
latency from a cost law on their traced FLOPs: never a measurement); the cascade is a small one."""
from __future__ import annotations

import json
import re
import sys

import numpy as np
import pandas as pd
import pytest

import scripts.bench.zoo as bench
from carb.data.importers.timm_zoo import ZOO_COLUMNS

#: Three families (leading letters) of five small timm networks each.
FAMILIES = {"resnet": ("resnet10t", "resnet14t", "resnet18", "resnet26", "resnet34"),
            "mobilenetv": ("mobilenetv3_small_050", "mobilenetv3_small_075", "mobilenetv3_small_100",
                           "mobilenetv3_large_075", "mobilenetv3_large_100"),
            "efficientnet": ("efficientnet_b0", "efficientnet_b1", "efficientnet_lite0", "efficientnet_es",
                             "efficientnet_em")}
DEVICE = "Synthetic GPU"


def _bench() -> pd.DataFrame:
    """Rows like the shipped table's for one GPU: 2 sizes x 2 batches per network, latency
    ``0.3 ms + batch x GMACs / 3``, the published features the traced ones (params rounded as timm does)."""
    from carb.design.zoo_features import zoo_summary

    rows = []
    for fam, models in FAMILIES.items():
        for m in models:
            for s in (160, 224):
                summ = zoo_summary(f"timm:{m}", s, "fp16")
                g = summ["flops"] / 1e9
                for b in (64, 256):
                    rows.append({"zoo_id": f"{m}-{s}-{b}", "model": m, "family": fam, "input_size": s,
                                 "batch_size": b, "precision": "fp16", "timm_precision": "amp_fp16",
                                 "device_name": DEVICE, "device_kind": "gpu", "memory_layout": "nchw",
                                 "compile": "eager", "torch_version": "2.9.1", "cuda_version": "12.8",
                                 "latency_ms": 0.3 + b * g / 3.0, "samples_per_sec": np.nan,
                                 "params": float(round(summ["params"], -4)), "gmacs_per_image": g,
                                 "macts_M_per_image": summ["activations"] / 1e6, "source_file": "synthetic.csv",
                                 "source_row": f"synthetic.csv:{len(rows) + 2}", "main": True,
                                 "missing_reason": None})
    return pd.DataFrame(rows, columns=list(ZOO_COLUMNS))


def _small_cascade(device, overrides):
    from carb.model.cascade import CarbCascade

    small = {"xgb": {"n_estimators": 15, "max_depth": 3}, "lgbm": {"n_estimators": 15, "num_leaves": 7},
             "et": {"n_estimators": 8}}

    class Small:
        def fit(self, frame):
            self.c = CarbCascade(specialists=small, oof_folds=2, probe_estimators=10, n_jobs=1)
            self.c.fit(frame, frame[["latency_ms"]])
            return self

        def predict(self, frame):
            return self.c.predict(frame)

    return Small


def test_cascade_part_scores_both_models_on_the_same_rows_and_splits(tmp_path, monkeypatch, capsys):
    table = _bench()
    monkeypatch.setattr(bench, "load_zoo_bench", lambda *a, **k: table)
    monkeypatch.setattr(bench, "registered_timm", _small_cascade)
    out = tmp_path / "cascade.json"
    monkeypatch.setattr(sys, "argv", ["zoo.py", "--part", "cascade", "--devices", DEVICE, "--no-census",
                                      "--out", str(out)])
    bench.main()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    m = re.fullmatch(r"zoo_cascade: device=Synthetic_GPU families=3 cascade_within20=(\d)/3 zoo_within20=(\d)/3 "
                     r"cascade_pooled=([\d.]+) zoo_pooled=([\d.]+) cascade_worst=([\d.]+) zoo_worst=([\d.]+) "
                     r"cascade_family_wins=(\d)/3", last)
    assert m, last
    res = json.loads(out.read_text())["cascade"]
    fams = {r["family"]: r for r in res["table"]}
    assert set(fams) == set(FAMILIES)
    for f, r in fams.items():   # both models scored on every row of the held-out family
        assert r["rows"] == 4 * len(FAMILIES[f])
        assert np.isfinite(r["cascade_mape_pct"]) and np.isfinite(r["zoo_mape_pct"])
    assert res["summary"]["rows"] == len(table)
    worst = max(r["cascade_mape_pct"] for r in res["table"])
    assert abs(float(m.group(5)) - worst) < 0.06


def test_cascade_part_needs_one_device(monkeypatch, capsys):
    monkeypatch.setattr(bench, "load_zoo_bench", lambda *a, **k: _bench().head(4))
    monkeypatch.setattr(sys, "argv", ["zoo.py", "--part", "cascade", "--devices", "gpu"])
    with pytest.raises(SystemExit) as e:
        bench.main()
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "\n" not in err and "--devices" in err and DEVICE in err
