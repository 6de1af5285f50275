"""scripts/studies/large_tensors.py (the 2**31-element check for a lent GPU), dry run on the CPU: every
precision x operator is timed on both sides of the (scaled-down) line, the table has its columns, and an
operator that fails is a row with its error, not a crash."""
from __future__ import annotations

import csv

import pytest

from scripts.studies import large_tensors


@pytest.fixture(scope="module")
def lt():
    return large_tensors


def test_dry_run_times_each_operator_on_both_sides_of_the_line(lt, tmp_path, capsys):
    rows = lt.main(["--fake", "--out", str(tmp_path), "--repeats", "1", "--precisions", "fp32,bf16"])
    assert len(rows) == 2 * len(lt.OPERATORS) * 2
    limit = 2**14
    for r in rows:
        assert r["above_2_31"] == (r["elements"] >= limit) and r["elements"] == r["N"] * r["C"] * r["H"] ** 2
    sides = {(r["precision"], r["operator"]): set() for r in rows}
    for r in rows:
        sides[(r["precision"], r["operator"])].add(r["above_2_31"])
        assert r["error"] or (r["ms_median"] > 0 and r["ns_per_Melement"] > 0)
    assert all(s == {True, False} for s in sides.values())
    with open(tmp_path / "large_tensors.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) and tuple(table[0]) == lt.COLUMNS
    assert "above/below time per element:" in capsys.readouterr().out


def test_a_failing_operator_is_a_row_with_its_error(lt, monkeypatch):
    import torch

    def boom(*_a, **_k):
        raise RuntimeError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(torch, "full", boom)
    r = lt.measure(torch, "fp32", "relu", 4, 4, 8, 1, torch.device("cpu"), 2**14)
    assert "out of memory" in r["error"] and r["ms_median"] != r["ms_median"]   # NaN: no timing
    assert lt.batch_for(2**31, 256, 56) == 2675
