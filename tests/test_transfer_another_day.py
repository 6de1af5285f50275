"""scripts/studies/transfer_another_day.py: a session's rows or probes that are missing are one line (exit 2), and
the sessions it names exist with the same device and configurations (the third session's rows re-measure the
second's)."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flag", ["--old", "--old-probe", "--new", "--probe"])
def test_a_missing_session_file_is_one_line(flag, tmp_path, monkeypatch, capsys):
    """Each of the four paths, pointing nowhere: one line on stderr naming the file, exit 2, before any fit."""
    from scripts.studies import transfer_another_day as study

    gone = str(tmp_path / "gone.csv")
    monkeypatch.setattr(sys, "argv", ["transfer_another_day", flag, gone])
    with pytest.raises(SystemExit) as e:
        study.main()
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.count("\n") == 0 and "gone.csv" in err


def test_the_third_session_remeasures_the_second():
    """The third session's 104 rows are configurations of the second session's file, of the same device and kernel
    build, and every row was timed in two passes; its probe is of the same device."""
    data = ROOT / "scripts" / "data"
    third = pd.read_parquet(data / "cpu-intel-xeon-2026-12-07b.parquet")
    second = pd.read_parquet(ROOT / "carb" / "data" / "cpu-intel-xeon-2026-12-07.parquet")
    assert len(third) == 104 and set(third["config_id"]) <= set(second["config_id"])
    assert set(third["device_id"]) == set(second["device_id"]) == {"6a0ea403ee"}
    assert set(third["driver"]) == set(second["driver"]) and (third["latency_passes"] >= 2).all()
    probe = pd.read_csv(data / "xeon-probe-2026-12-07b.csv")
    assert set(probe["device_id"]) == {"6a0ea403ee"} and set(probe["precision"]) == {"fp32", "bf16", "fp16"}


def test_the_fourth_window_names_its_boot_and_remeasures_the_second():
    """The fourth window's rows record one session_id (the boot), the one its probe's provenance records; they are
    configurations of the second session's file on the same device and build, two passes each."""
    import json

    data = ROOT / "scripts" / "data"
    fourth = pd.read_parquet(data / "cpu-intel-xeon-2026-12-07c.parquet")
    second = pd.read_parquet(ROOT / "carb" / "data" / "cpu-intel-xeon-2026-12-07.parquet")
    assert len(fourth) == 111 and set(fourth["config_id"]) <= set(second["config_id"])
    assert set(fourth["device_id"]) == {"6a0ea403ee"} and set(fourth["driver"]) == set(second["driver"])
    assert fourth["session_id"].nunique() == 1 and (fourth["latency_passes"] >= 2).all()
    prov = json.loads((data / "xeon-probe-2026-12-07c.provenance.json").read_text())
    assert prov["session_id"] == fourth["session_id"].iloc[0] and prov["measured_from"] > fourth["measured_at"].max()
