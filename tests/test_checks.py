"""The config validation layer (carb.commands.checks): every bad value is a one-line ConfigError naming
the key and what is allowed, before any work starts; good configs pass; model=auto resolves."""
from __future__ import annotations

import pytest

from carb.commands.checks import check_config
from carb.commands.cli import compose, to_dict
from carb.errors import ConfigError
from carb.model.presets import resolve_auto


@pytest.mark.parametrize("command, overrides", [
    ("train", []), ("train", ["model=carb"]), ("train", ["model=tuned"]), ("tune", []), ("collect", []),
    ("screen", []), ("screen", ["screen.budget.latency_ms=20"]),
])
def test_shipped_configs_pass(command, overrides):
    check_config(command, compose(command, overrides))


@pytest.mark.parametrize("command, override, needle", [
    ("train", "split.seed=abc", "split.seed: must be an integer >= 0, got 'abc'"),
    ("train", "model.log_target=maybe", "model.log_target: 'maybe' is not allowed"),
    ("train", "model.members=[xgb,catboost]", "model.members: ['catboost'] not allowed"),
    ("train", "prior.enabled=maybe", "prior.enabled: must be true or false"),
    ("train", "prior.overlap_k=0.5", "prior.overlap_k"),
    ("train", "prior.static_power=3", "prior.static_power"),
    ("train", "model.specialists.xgb.max_depth=-1", "model.specialists.xgb.max_depth: must be an integer >= 1"),
    ("train", "model.large.specialists.et.n_estimators=0", "model.large.specialists.et.n_estimators"),
    ("train", "evaluate.budget.value=-3", "evaluate.budget.value: must be null or a positive number"),
    ("train", "evaluate.extrapolation.train_share=2", "evaluate.extrapolation.train_share"),
    ("tune", "tune.n_trials=0", "tune.n_trials: must be an integer >= 1, got 0"),
    ("tune", "tune.metric=r2", "tune.metric: 'r2' is not allowed; allowed: ['mae', 'rmse', 'mape']"),
    ("collect", "limit=abc", "limit: must be null or an integer >= 1, got 'abc'"),
    ("collect", "seed=abc", "seed: must be an integer >= 0"),
    ("collect", "retry=always", "retry: 'always' is not allowed; allowed: ['none', 'errors']"),
    ("collect", "max_minutes=-1", "max_minutes: must be null or a positive number"),
    ("screen", "screen.top_k=abc", "screen.top_k: must be an integer >= 1"),
    ("screen", "screen.shortlist_size=-3", "screen.shortlist_size: must be an integer >= 1, got -3"),
    ("screen", "screen.budget.latency_ms=abc", "screen.budget.latency_ms: must be null or a positive number"),
    ("screen", "screen.budget.energy_J=inf", "screen.budget.energy_J"),
])
def test_bad_values_are_one_line(command, override, needle):
    with pytest.raises(ConfigError) as e:
        check_config(command, compose(command, [override]))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_model_auto_picks_sizes_from_the_row_count():
    m = to_dict(compose("train", ["model.power_cap=false", "model.log_target=true"]).model)
    small, name_s = resolve_auto(m, 100)
    large, name_l = resolve_auto(m, 10_000)
    assert (name_s, name_l) == ("auto:carb_fast", "auto:carb")
    assert small["specialists"]["xgb"]["n_estimators"] == 150 and large["specialists"]["xgb"]["n_estimators"] == 800
    assert small["power_cap"] is large["power_cap"] is False and large["log_target"] is True   # user overrides kept
    assert "large" not in large and "threshold_rows" not in small
    assert resolve_auto({"name": "carb", "x": 1}, 5) == ({"name": "carb", "x": 1}, "carb")
