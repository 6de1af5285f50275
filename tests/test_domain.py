"""Domain of validity (carb.model.domain): what was measured, and why a candidate lies outside it."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from carb.model.domain import check_domain, fit_domain


def train_rows() -> pd.DataFrame:
    return pd.DataFrame({"block": ["basic", "bottleneck"], "precision": ["fp32", "fp32"],
                         "early_downsample": [True, False], "depth": [18, 50], "width_mult": [0.5, 1.0],
                         "input_size": [32, 64], "batch_size": [1, 16], "flops": [1e8, 8e9],
                         "params": [1e5, 1e7], "param_size_MB": [0.4, 40.0], "total_activation_MB": [1.0, 90.0],
                         "max_activation_MB": [0.1, 9.0]})


def test_fit_domain_is_plain_json():
    d = fit_domain(train_rows())
    assert json.loads(json.dumps(d)) == d
    assert d["categorical"]["precision"] == ["fp32"] and d["ranges"]["batch_size"] == [1.0, 16.0]


def test_reasons_for_unseen_precision_larger_batch_and_flops():
    d = fit_domain(train_rows())
    cand = train_rows().iloc[[0, 0, 0, 0, 1]].reset_index(drop=True)
    cand.loc[0, "precision"] = "fp16"
    cand.loc[1, "batch_size"] = 128
    cand.loc[2, "flops"] = 3.1e10
    cand.loc[3, ["precision", "batch_size"]] = ["fp16", 128]
    inside, why = check_domain(d, cand)
    assert inside.tolist() == [False, False, False, False, True]
    assert why[0] == "precision fp16 never measured"
    assert why[1] == "batch_size 128 > 16"
    assert why[2] == "flops 3.1e+10 > 8.0e+09"
    assert why[3] == "precision fp16 never measured; batch_size 128 > 16"
    assert why[4] == ""


def test_no_domain_means_everything_inside():
    inside, why = check_domain(None, train_rows())
    assert inside.all() and why == ["", ""]
    assert isinstance(inside, np.ndarray)


def test_reason_counts_group_range_reasons_by_their_bound():
    """What screening prints under the domain counts: reasons by kind (a range reason by its bound, a
    never-measured value by its value), each counted once per candidate, most frequent first."""
    from carb.model.domain import reason_counts

    d = fit_domain(train_rows())
    cand = train_rows().iloc[[0, 0, 0, 0, 1]].reset_index(drop=True)
    cand.loc[0, "precision"] = "fp16"
    cand.loc[1, "batch_size"] = 128
    cand.loc[2, "batch_size"] = 64
    cand.loc[3, ["precision", "batch_size"]] = ["fp16", 32]
    _, why = check_domain(d, cand)
    assert reason_counts(why) == [("batch_size > 16", 3), ("precision fp16 never measured", 2)]
    assert reason_counts(why, top=1) == [("batch_size > 16", 3)] and reason_counts(["", None]) == []


def test_ranges_are_kept_per_precision_and_checked_inside_the_global_ones():
    """A candidate inside the global ranges but beyond what its own precision was measured at is outside,
    with the precision named; beyond the global range it gets the global reason only (once)."""
    from carb.model.domain import reason_counts

    rows = pd.concat([train_rows(), train_rows().assign(precision="fp16", flops=[1e7, 2e8], batch_size=[1, 4])],
                     ignore_index=True)
    d = fit_domain(rows)
    assert d["by_precision"]["fp16"]["flops"] == [1e7, 2e8] and d["by_precision"]["fp32"]["flops"] == [1e8, 8e9]
    assert json.loads(json.dumps(d)) == d
    cand = rows.iloc[[2, 2, 2, 0]].reset_index(drop=True)
    cand.loc[0, "flops"] = 5e9                       # inside fp32's range, beyond fp16's
    cand.loc[1, "flops"] = 3e10                      # beyond every row: the global reason only
    cand.loc[2, "batch_size"] = 8                    # fp16 measured at batch <= 4, fp32 at <= 16
    cand.loc[3, "flops"] = 5e9                       # fp32: inside
    inside, why = check_domain(d, cand)
    assert inside.tolist() == [False, False, False, True]
    assert why[0] == "flops 5.0e+09 > 2.0e+08 for fp16"
    assert why[1] == "flops 3.0e+10 > 8.0e+09"
    assert why[2] == "batch_size 8 > 4 for fp16"
    assert reason_counts(why) == [("batch_size > 4 for fp16", 1), ("flops > 2.0e+08 for fp16", 1),
                                  ("flops > 8.0e+09", 1)]
    # one precision: no per-precision ranges (they would repeat the global ones)
    assert "by_precision" not in fit_domain(train_rows())


def test_architectures_are_recorded_and_unseen_ones_found():
    from carb.model.domain import architecture_keys, unseen_architecture

    d = fit_domain(train_rows())
    assert d["architectures"] == sorted(set(architecture_keys(train_rows())))
    assert architecture_keys(train_rows())[0] == "basic|18|0.5|1.0|None|True"   # absent inner_mult: its default
    cand = train_rows().assign(batch_size=[64, 2], input_size=[224, 32], precision=["fp16", "bf16"])
    assert not unseen_architecture(d, cand).any()          # other batch, input, precision: same networks
    cand.loc[1, "width_mult"] = 2.0
    assert unseen_architecture(d, cand).tolist() == [False, True]
    assert not unseen_architecture({k: v for k, v in d.items() if k != "architectures"}, cand).any()
    assert not unseen_architecture(None, cand).any()
