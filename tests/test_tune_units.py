"""carb-tune scores trials in the target's unit, as carb-train reports its validation metric (issue 42):
the base preset and the tuned blend on one scale, so "tuning made it worse" can fire.

Before, a physics stage's trials scored the unitless log residual ``log(y / prior)`` while the base preset
was scored in ms against those residuals: "val mae 21.22 -> tuned 0.008344", a fake 2,500x gain."""
from __future__ import annotations

import numpy as np
import pytest
from synthetic import synthetic_dataset

from carb.commands.cli import compose
from carb.data.io import save_dataset

#: Tiny specialists and search space (as tests/test_tune_promote.py).
TINY = ["model.specialists.xgb.n_estimators=20", "model.specialists.lgbm.n_estimators=20",
        "model.specialists.et.n_estimators=10", "model.oof_folds=2", "model.probe_estimators=20",
        "model.n_jobs=1"]
SPACE = {"xgb": {"n_estimators": {"type": "int", "low": 10, "high": 30, "step": 10}}}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    from carb.commands.tune import _fit_base
    from carb.model.tuning import stage_data

    d = tmp_path_factory.mktemp("tuneunits")
    save_dataset(synthetic_dataset(160, seed=3, device_name="Synthetic GPU"), d / "syn.parquet")
    cfg = compose("tune", [f"data.path={d}/syn.parquet", f"tracking.uri=sqlite:///{d}/m.db",
                           f"tune.storage=sqlite:///{d}/o.db", f"paths.output_dir={d}/out", *TINY])
    base, _model_cfg, train, val, _device, _s = _fit_base(cfg)
    return base, val, stage_data(base, train, val), f"sqlite:///{d}/o.db"


def _settings():
    from carb.model.tuning import TuneSettings, metric_fn

    return TuneSettings(n_trials=2, blend_trials=2, timeout_s=None, seed=0, n_startup_trials=1,
                        pruner={"n_startup_trials": 5, "n_warmup_steps": 100}, report_every=10, n_jobs=1,
                        fit_seed=0, metric=metric_fn("mae"))


def test_trials_and_base_are_scored_in_the_targets_unit(fitted):
    from carb.commands.tune import base_value
    from carb.model.tuning import fit_member, member_predict, metric_fn, storage_for, tune_target

    base, val, data, url = fitted
    sd = data["latency_ms"]
    assert sd.prior_va is not None                       # a physics stage: the specialists fit log(y / prior)
    measured = val["latency_ms"].to_numpy(float)[sd.val_rows]
    assert np.allclose(sd.yva_units, measured)          # the trials' reference is the measurement, in ms
    res = tune_target(sd, "u1", ["xgb"], {}, SPACE, storage_for(url), _settings())
    best = res["u1.latency_ms.xgb"]
    model = fit_member("xgb", best["params"], sd, 1, 0)
    mae_ms = metric_fn("mae")(measured, sd.units(member_predict(model, sd)))
    assert best["value"] == pytest.approx(mae_ms)        # the trial's value is an MAE in ms
    b = base_value(base, val, sd, metric_fn("mae"))
    assert b == pytest.approx(metric_fn("mae")(measured, base.predict(val)["pred_latency_ms"].to_numpy()[sd.val_rows]))
    tuned = res["u1.latency_ms.blend"]["value"]
    assert 0.1 < tuned / b < 10                          # one scale (before: 0.0004)


def test_tuning_that_is_worse_than_the_base_warns(fitted):
    """Specialists tuned on shuffled training residuals are worse than the base preset: the warning fires."""
    import copy

    from carb.commands.tune import base_value, worse_lines, worse_targets
    from carb.model.tuning import metric_fn, storage_for, tune_target

    base, val, data, url = fitted
    sd = copy.copy(data["energy_J"])
    sd.ytr = np.random.default_rng(0).permutation(sd.ytr)   # what the specialists learn is noise
    res = tune_target(sd, "u2", ["xgb"], {}, SPACE, storage_for(url), _settings())
    res["base.energy_J"] = {"value": base_value(base, val, sd, metric_fn("mae"))}
    worse = worse_targets(res, "u2", ["energy_J"])
    assert set(worse) == {"energy_J"}
    (line,) = worse_lines(worse, "mae", "carb_fast")
    assert "tuning made the model worse" in line and " J " in line
