"""The nested choice of a zoo latency setting per held-out family (:mod:`carb.analysis.zoo_nested`) on synthetic
zoo rows: the variant whose term is in the law is chosen, and a held-out family's own rows never choose."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.zoo_nested import family_folds, inner_score, nested_choice, nested_predictions
from carb.errors import DatasetError
from carb.model.zoo_latency import ZooLatencyModel
from tests.test_zoo_latency_cpu import _weights_frame


def _variants() -> list:
    """The base alone (no correction), without and with the CPU file's weight term."""
    return [lambda terms=terms: ZooLatencyModel(n_estimators=5, min_child_samples=5, residual=0.0, margin=None,
                                                cpu_terms=terms)
            for terms in ((), ("weight_lowreuse",))]


def test_family_folds_are_family_disjoint_and_even():
    """Every family is in one fold; 7 families in 3 folds: 3, 2, 2; fewer than 2 folds is one line."""
    folds = family_folds(list("gabcdefa"), 3, seed=1)
    assert sorted(folds) == list("abcdefg") and sorted(np.bincount(list(folds.values()))) == [2, 2, 3]
    with pytest.raises(DatasetError, match="groups=1"):
        family_folds(list("ab"), 1)


def test_nested_choice_takes_the_variant_of_the_law_and_never_reads_the_held_out_family():
    """The rows' law has 0.2 ms per MB of weights used a few times: every held-out family chooses the variant
    with that term. Making family ``g``'s latencies 10x larger changes neither ``g``'s inner scores nor its
    choice (its rows are not in them), while another family's scores move."""
    frame = _weights_frame(4)
    variants = _variants()
    chosen = nested_choice(frame, variants, ["a", "g"], groups=3, min_models=5)
    assert chosen == {"a": 1, "g": 1}
    moved = frame.assign(latency_ms=np.where(frame["family"] == "g", 10 * frame["latency_ms"], frame["latency_ms"]))
    for make in variants:
        assert inner_score(moved, make, "g", groups=3) == pytest.approx(inner_score(frame, make, "g", groups=3))
        assert inner_score(moved, make, "a", groups=3) != pytest.approx(inner_score(frame, make, "a", groups=3))
    assert nested_choice(moved, variants, ["g"], groups=3) == {"g": 1}


def test_nested_predictions_take_each_family_from_its_variant():
    """Family ``a`` from variant 1, ``b`` from variant 0."""
    base = pd.DataFrame({"family": ["a", "a", "b"], "pred_carb": [1.0, 1.0, 1.0]})
    out = nested_predictions([base, base.assign(pred_carb=2.0)], {"a": 1, "b": 0})
    assert out["pred_carb"].tolist() == [2.0, 2.0, 1.0] and base["pred_carb"].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(DatasetError, match="no variants"):
        nested_choice(base, [], ["a"])
