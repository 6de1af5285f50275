"""scripts/data/append_collection.py: a second collection of one CPU appended to its shipped dataset, originals
first; configurations already measured go to the cross-day file instead; rows of another device, failed or
contended rows are refused in one line (exit 2). Frames here are made from the shipped Xeon rows by the test."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from scripts.data.append_collection import check_new, cross_day, main, split_new

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def xeon() -> pd.DataFrame:
    from carb.data.io import load_dataset

    return load_dataset(str(ROOT / "carb" / "data" / "cpu-intel-xeon.parquet")).head(40).reset_index(drop=True)


def test_split_and_cross_day(xeon):
    old, new = xeon.iloc[:30], xeon.iloc[25:40].reset_index(drop=True)
    new = new.assign(latency_ms=new["latency_ms"] * 1.25)
    appended, again = split_new(old, new)
    assert list(appended["config_id"]) == list(xeon["config_id"].iloc[30:40]) and len(again) == 5
    t = cross_day(old, again)
    assert t["n"].sum() == 5 and t["median_abs"].to_numpy() == pytest.approx(0.25)
    assert (t["median_signed"] > 0).all() and (t["memory_same"] == 1.0).all()


@pytest.mark.parametrize("change, field", [({"device_id": "0000000000"}, "device_id"), ({"status": "oom"}, "status"),
                                           ({"cpu_share": 0.5}, "cpu_share")])
def test_bad_new_rows_are_one_line(xeon, change, field):
    new = xeon.iloc[30:].copy()
    new.loc[new.index[0], list(change)] = list(change.values())
    assert check_new(xeon.iloc[:30], new).startswith(field)
    assert check_new(xeon.iloc[:30], pd.concat([new.iloc[1:], new.iloc[1:2]]))


def test_main_writes_originals_first_and_the_again_file(xeon, tmp_path, capsys):
    from carb.data.io import load_dataset, save_dataset

    ds, part = tmp_path / "d.parquet", tmp_path / "new.parquet"
    save_dataset(xeon.iloc[:30], ds)
    xeon.iloc[25:].to_parquet(part)
    assert main(["--dataset", str(ds), "--new", str(part), "--again", str(tmp_path / "again.parquet")]) == 0
    got = load_dataset(str(ds))
    assert list(got["config_id"]) == list(xeon["config_id"]) and len(load_dataset(str(tmp_path / "again.parquet"))) == 5
    assert "30 + 10 = 40 rows" in capsys.readouterr().out
    other = xeon.iloc[30:].assign(device_id="0000000000")
    other.to_parquet(part)
    assert main(["--dataset", str(ds), "--new", str(part)]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and len(load_dataset(str(ds))) == 40


def test_separate_writes_every_new_row_and_leaves_the_dataset(xeon, tmp_path, capsys):
    """--separate: a session of another level becomes its own dataset (every new row, those measured in both
    included), the shipped one byte for byte unchanged; the cross-day lines name the configurations in both."""
    from carb.data.io import load_dataset, save_dataset

    ds, part, out = tmp_path / "d.parquet", tmp_path / "new.parquet", tmp_path / "session.parquet"
    save_dataset(xeon.iloc[:30], ds)
    before = ds.read_bytes()
    xeon.iloc[25:].assign(latency_ms=xeon["latency_ms"].iloc[25:] * 1.4).to_parquet(part)
    assert main(["--dataset", str(ds), "--new", str(part), "--separate", str(out)]) == 0
    assert ds.read_bytes() == before and list(load_dataset(str(out))["config_id"]) == list(xeon["config_id"].iloc[25:])
    text = capsys.readouterr().out
    assert "15 rows" in text and "5 configurations measured in both" in text and "signed +40.0 %" in text


def test_a_missing_file_is_one_line(tmp_path, capsys):
    """A dataset or a new collection that does not exist: one line naming it, exit 2, nothing written."""
    missing = str(tmp_path / "missing.parquet")
    ds = str(ROOT / "carb" / "data" / "cpu-intel-xeon.parquet")
    for argv in (["--dataset", missing, "--new", ds], ["--dataset", ds, "--new", missing,
                                                       "--separate", str(tmp_path / "out.parquet")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "missing.parquet" in err
    assert not (tmp_path / "out.parquet").exists()
