"""Issue 44, point accuracy: per-precision source weights of the multi-source base (``transfer.source_weighting:
inverse_loo_precision``): each precision's sources weighted by their leave-one-out error on that precision's K rows
alone, instead of one weight per source from all K rows; conf/calibrate.yaml and the schema accept it; the study
that chooses it refuses a bad value in one line."""
from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from test_transfer6_multisource import _two_sources
from test_transfer_lodo import cpu_model  # noqa: F401 - the module's fixture, shared


def _mixed_target(cpu_model):  # noqa: F811
    """Sources A and B (shapes differ) and rows of a target that runs as A predicts for fp32 and bf16 (x 0.8) and
    as B predicts for fp16 (x 1.2), with 0.2 % noise; 4 K rows per precision, the rest held out."""
    from carb.model.intervals import screening_predict

    a, b, rows = _two_sources(cpu_model)
    prec = rows["precision"].to_numpy()
    pa, pb = (screening_predict(m, rows)["pred_latency_ms"].to_numpy() for m in (a, b))
    y = np.where(prec == "fp16", 1.2 * pb, 0.8 * pa)
    rows = rows.assign(latency_ms=y * np.exp(np.random.default_rng(1).normal(0, 0.002, len(rows))))
    cal = rows.groupby("precision").head(4)
    return a, b, cal, rows.drop(index=cal.index)


def _fit(a, b, cal, how):
    """A copy of ``a`` with ``b`` as a second source, ``source_weighting`` ``how``, fitted on ``cal``; each
    precision's own offset (``precision_shrink`` 0: the target's precisions truly differ, 0.8 against 1.2, and the
    weights, not the shrink, are under test; the default ``auto`` pools the offsets of these 4-row precisions)."""
    m = copy.copy(a)
    m.source_weighting, m.precision_shrink = how, 0.0
    return m.add_sources([b]).fit(cal)


def _mape(m, rest) -> dict[str, float]:
    """Held-out latency MAPE (%) of ``m`` on ``rest``, per precision."""
    from carb.model.intervals import screening_predict

    p = screening_predict(m, rest)["pred_latency_ms"].to_numpy()
    err = np.abs(p / rest["latency_ms"].to_numpy() - 1)
    prec = rest["precision"].to_numpy()
    return {q: 100 * float(np.mean(err[prec == q])) for q in sorted(set(prec))}


def test_each_precision_weights_the_source_whose_shape_fits_it(cpu_model):  # noqa: F811
    """A target that is A in fp32/bf16 and B in fp16: ``inverse_loo_precision`` gives A nearly all of fp32's and
    bf16's weight and B nearly all of fp16's, and predicts every precision's held-out rows within 1 %; one weight
    per source (``inverse_loo``) cannot, and errs by more than 2 % on some precision. The fitted latency entry
    names the per-precision weights by source device."""
    a, b, cal, rest = _mixed_target(cpu_model)
    per = _fit(a, b, cal, "inverse_loo_precision")
    one = _fit(a, b, cal, "inverse_loo")
    w = per.source_weights_precision_
    assert set(w) == {"fp32", "bf16", "fp16"}
    assert w["fp32"][0] > 0.9 and w["bf16"][0] > 0.9 and w["fp16"][1] > 0.9
    assert all(sum(v) == pytest.approx(1.0) for v in w.values())
    got, base = _mape(per, rest), _mape(one, rest)
    assert max(got.values()) < 1.0 < 2.0 < max(base.values())
    assert one.__dict__.get("source_weights_precision_") == {}
    info = per.transfer_["latency_ms"]["source_weights_precision"]
    assert list(info["fp16"].values()) == pytest.approx(w["fp16"], abs=1e-4)


def test_a_precision_with_one_k_row_takes_the_all_rows_weights(cpu_model):  # noqa: F811
    """A precision with fewer than 2 K rows gets no weights of its own: its rows are combined with the all-rows
    weights (``source_weights_``); a refit with ``inverse_loo`` clears the per-precision weights."""
    from carb.model.transfer import MIN_PRECISION_WEIGHT_ROWS

    a, b, cal, rest = _mixed_target(cpu_model)
    cal = pd.concat([cal[cal["precision"] != "fp16"], cal[cal["precision"] == "fp16"].head(1)])
    m = _fit(a, b, cal, "inverse_loo_precision")
    assert MIN_PRECISION_WEIGHT_ROWS == 2 and "fp16" not in m.source_weights_precision_
    W = m._source_weight_matrix(rest, 2)
    f16 = rest["precision"].to_numpy() == "fp16"
    np.testing.assert_allclose(W[:, f16], np.repeat(np.asarray(m.source_weights_)[:, None], f16.sum(), axis=1))
    np.testing.assert_allclose(W.sum(axis=0), 1.0)
    m.source_weighting = "inverse_loo"
    m.fit(cal)
    assert m.source_weights_precision_ == {}


def test_setting_reaches_the_transfer_and_the_study_refuses_bad_values(cpu_model, capsys):  # noqa: F811
    """conf/calibrate.yaml's ``transfer.source_weighting=inverse_loo_precision`` passes the schema and reaches the
    transfer's settings; the constructor accepts it; the study's ``--weightings median`` is one line naming the
    flag and the allowed values, exit 2, before any fit."""
    from carb.commands import calibrate
    from carb.commands.checks import check_config
    from carb.commands.cli import compose
    from carb.model.transfer import TransferredCascade
    from scripts.studies import transfer_weighting

    cfg = compose("calibrate", ["transfer.source_weighting=inverse_loo_precision"])
    check_config("calibrate", cfg)
    assert calibrate.transfer_settings(cfg)["source_weighting"] == "inverse_loo_precision"
    cascade = cpu_model[0]
    assert TransferredCascade(cascade, source_weighting="inverse_loo_precision").source_weighting == \
        "inverse_loo_precision"
    with pytest.raises(SystemExit) as e:
        transfer_weighting.main(["--weightings", "inverse_loo,median"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--weightings" in err[0] and "inverse_loo_precision" in err[0]
