"""scripts/bench/transfer_pairs.score_pair's ``held_out``: the K rows still picked from the target's rows, the
scores taken on the rows given instead of the pick's rest (what scripts/studies/transfer_sessions.py scores across
sessions with; it patched pick_split before)."""
import warnings

import pytest

from carb.analysis.transfer import pick_split
from test_transfer import source_and_b  # noqa: F401  (the module's fixture: a tiny cascade and device B's rows)


def _n(recs: list[dict], model: str) -> int:
    return sum(r["n"] for r in recs if r["model"] == model and r["target"] == "latency_ms")


@pytest.mark.parametrize("k", [0, 6])
def test_held_out_rows_are_scored_instead_of_the_rest(source_and_b, k):  # noqa: F811
    from scripts.bench.transfer_pairs import score_pair

    cascade, b = source_and_b
    other = b.iloc[:40].reset_index(drop=True)
    model = "calibrated" if k else "source"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain, pend_plain = score_pair(cascade, b, k, ["latency_ms"], False)
        held, pend_held = score_pair(cascade, b, k, ["latency_ms"], False, held_out=other)
    assert _n(plain, model) == len(b) - k
    assert _n(held, model) == len(other)
    if k:   # the same K rows (pick 0, carb-calibrate's own) calibrate both
        ids = sorted(map(str, pick_split(b, k, 0)[0]["config_id"]))
        assert sorted(pend_plain[0]["model"].calibration_rows_) == ids
        assert sorted(pend_held[0]["model"].calibration_rows_) == ids
        assert len(pend_held[0]["err"]) == len(other)
