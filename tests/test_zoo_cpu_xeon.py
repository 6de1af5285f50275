"""The Xeon's CPU zoo (carb/data/zoo-cpu-xeon.parquet) loads by its shipped name, and its provenance
(scripts/data/zoo_cpu_provenance.py) says what its rows hold: device, rows by status and precision, families,
models, the measuring window, the guard's record and each precision's two-pass repeatability."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from carb.data.io import SHIPPED, load_dataset
from carb.resources import DATA_DIR

XEON = DATA_DIR / "zoo-cpu-xeon.parquet"


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return load_dataset("zoo-cpu-xeon")


@pytest.fixture(scope="module")
def prov() -> dict:
    return json.loads(XEON.with_name("zoo-cpu-xeon.provenance.json").read_text())


def test_loads_by_name_as_one_xeon_device_apart_from_the_zen4_zoo(rows):
    assert SHIPPED["zoo-cpu-xeon"] == XEON and SHIPPED["zoo-cpu"] != XEON
    assert set(rows["device_id"].astype(str)) == {"6a0ea403ee"}
    assert "avx512_fp16" in json.loads(rows["device_fingerprint"].iloc[0])["isa"]
    assert (rows["status"] == "ok").all() and rows["latency_ms"].gt(0).all() and rows["peak_memory_MB"].gt(0).all()
    assert set(rows["precision"].astype(str)) == {"fp32", "bf16"} and rows["family"].nunique() >= 12
    assert not set(rows["device_id"].astype(str)) & set(load_dataset("zoo-cpu")["device_id"].astype(str))


def test_provenance_matches_the_rows(rows, prov):
    ok = rows[rows["status"] == "ok"]
    assert prov["device_id"] == "6a0ea403ee" and prov["dataset"] == "carb/data/zoo-cpu-xeon.parquet"
    assert prov["rows"] == {"total": len(rows), **rows["status"].value_counts().to_dict()}
    assert prov["rows_ok_by_precision"] == ok["precision"].value_counts().to_dict()
    assert prov["families"] == ok["family"].nunique() and prov["models"] == ok["model_name"].nunique()
    assert prov["family_models"] == ok.groupby("family")["model_name"].nunique().to_dict()
    assert (prov["measured_from"], prov["measured_to"]) == (str(rows["measured_at"].min()),
                                                            str(rows["measured_at"].max()))
    assert prov["guard"]["repeated_windows"] == int((rows["n_windows"] > 1).sum()) == 0
    assert "0 contended" in prov["window_log"] and "carb-collect space=zoo" in prov["command"]
    rep = {r["precision"]: r for r in prov["repeatability"]}
    for p, g in ok.groupby("precision"):
        s = g["latency_repeat_spread"].dropna()
        assert rep[p]["rows"] == len(g) and rep[p]["with 2 passes"] == len(s)
        assert rep[p]["spread median %"] == pytest.approx(100 * s.median())


def test_carb_train_composes_it_by_name():
    from carb.commands.cli import compose
    from carb.data.io import resolve_path

    cfg = compose("train", ["data.path=zoo-cpu-xeon"])
    assert resolve_path(cfg.data.path) == XEON


def test_writing_the_provenance_again_keeps_its_additions(tmp_path):
    """The shipped provenance's ``additions`` (the 60-row grid measured later into the same file) survive a
    rewrite by scripts/data/zoo_cpu_provenance.py; a provenance without them, or none, adds nothing."""
    from scripts.data.zoo_cpu_provenance import kept_additions

    shipped = json.loads((DATA_DIR / "zoo-cpu-xeon.provenance.json").read_text())
    assert kept_additions(DATA_DIR / "zoo-cpu-xeon.provenance.json") == {"additions": shipped["additions"]}
    assert shipped["additions"][0]["rows"] == 60
    bare = tmp_path / "bare.provenance.json"
    bare.write_text(json.dumps({"rows": {"total": 1}}))
    assert kept_additions(bare) == {} and kept_additions(tmp_path / "none.json") == {}
