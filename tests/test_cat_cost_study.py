"""scripts/studies/cat_cost.py: the bytes each timed call moves, its bad-input lines, and one short timing."""
from __future__ import annotations

import pytest

from scripts.studies import cat_cost


def test_cat_MB_counts_inputs_read_and_output_written():
    # DenseNet block 1 layer 2: 64 + 32 channels at 56 x 56, fp32, batch 2
    mb = cat_cost.cat_MB((64, 32), 56, 2, 4)
    out = 2 * 96 * 56 * 56 * 4 / 2**20
    assert mb["cat"] == pytest.approx(2 * out)
    assert mb["add"] == pytest.approx(3 * out)
    assert mb["copy"] == pytest.approx(2 * out)


def test_cat_case_output_has_the_joined_channels():
    import torch

    calls = cat_cost.cat_case((3, 5, 2), 4, 2, torch.float32)
    assert tuple(calls["cat"]().shape) == (2, 10, 4, 4)
    assert tuple(calls["add"]().shape) == (2, 10, 4, 4)


@pytest.mark.parametrize("argv, field", [(["--cases", "nope"], "--cases"), (["--batch", "0"], "--batch"),
                                         (["--precisions", "fp8"], "--precisions")])
def test_bad_input_is_one_line_exit_2(argv, field, capsys):
    with pytest.raises(SystemExit) as e:
        cat_cost.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(field)


def test_run_times_a_cat_and_a_conv():
    s = {"repeats": 1, "min_window_s": 0.001, "threads": 1, "malloc_mmap_threshold_MB": None}
    rows = cat_cost.run(["shuffle_2way", "shuffle_dw_3x3"], ["fp32"], 1, s)
    cat = {r["op"]: r for r in rows if r["case"] == "shuffle_2way"}
    assert set(cat) == {"cat", "add", "copy"} and cat["add"]["vs_add"] == pytest.approx(1.0)
    assert all(r["ms"] > 0 for r in rows)
    conv = [r for r in rows if r["op"] == "conv"][0]
    assert conv["MMAC"] == pytest.approx(58 * 28 * 28 * 9 / 1e6)
