"""The config validation layer (carb.commands.checks and the schemas of carb.commands.schema): every
unknown key, wrong type and out-of-range value (in every group) is a one-line ConfigError naming the key
and what is allowed, before any work starts; good configs pass; model=auto resolves."""
from __future__ import annotations

import pytest

from carb.commands.checks import check_config
from carb.commands.cli import compose, to_dict
from carb.commands.schema import COMMANDS
from carb.errors import ConfigError
from carb.model.presets import resolve_auto


@pytest.mark.parametrize("command, overrides", [
    ("train", []), ("train", ["model=carb"]), ("train", ["model=tuned"]), ("tune", []), ("collect", []),
    ("screen", []), ("screen", ["screen.budget.latency_ms=20"]),
    *((c, []) for c in COMMANDS),  # every command's schema
    ("train", ["+experiment=ablation"]), ("train", ["+experiment=lobo"]), ("screen", ["+experiment=two_stage"]),
    ("train", ["prior=off"]), ("train", ["prior=cpu"]), ("train", ["prior=cuda"]), ("tune", ["prior=cuda"]),
    ("import", ["importer=csv"]), ("import", ["importer=optimum"]), ("import", ["importer=gpu_run"]), ("collect", ["measure=gpu", "space=smoke"]),
    ("screen", ["screen=quickstart"]), ("screen", ["screen=quickstart_cpu"]), ("calibrate", ["measure=cpu"]),
    ("train", ["model=carb", "+model.specialists.xgb.gamma=0.1"]),   # library parameters pass through
    ("screen", ["tracking.uri=2024", "screen.validate=reference"]),   # a number where text goes is that text
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
    ("calibrate", "zero_shot.power.static_fraction=1.5", "zero_shot.power.static_fraction"),
    ("calibrate", "zero_shot.power.unmeasured_widen=0.5", "zero_shot.power.unmeasured_widen"),
    ("calibrate", "+zero_shot.power.idle_W=3", "zero_shot.power.idle_W: unknown key"),
    # unknown keys
    ("train", "+prior.overlap=3", "prior.overlap: unknown key; allowed: ['enabled', 'large_alloc_MB'"),
    ("collect", "+measure.n_run=3", "measure.n_run: unknown key; allowed: ['n_runs'"),
    ("screen", "+screen.budget.power_W=3", "screen.budget.power_W: unknown key; allowed: ['energy_J', "),
    ("import", "+importer.gpus=x", "importer.gpus: unknown key; allowed: ['name', 'path', 'gpu'"),
    ("train", "+model.per_target={power: {}}", "model.per_target: key 'power' is not allowed; allowed: ['peak"),
    # wrong types
    ("train", "prior.cpu_dispatch=yes", "prior.cpu_dispatch: must be true or false, got 'yes'"),
    ("probe", "n=many", "n: must be an integer >= 1, got 'many'"),
    ("promote", "promote.across_datasets=2", "promote.across_datasets: must be true or false, got 2"),
    ("characterize", "analysis.min_pairs=1.5", "analysis.min_pairs: must be an integer >= 2, got 1.5"),
    ("collect", "device.kind=tpu", "device.kind: 'tpu' is not allowed; allowed: ['auto', 'cpu', 'cuda']"),
    # out of range
    ("train", "prior.tensor_core_speedup=0", "prior.tensor_core_speedup: must be null or a positive number, got 0"),
    ("calibrate", "coverage=1.5", "coverage: must be a number in [0.01, 0.99], got 1.5"),
    ("collect", "measure.malloc_mmap_threshold_MB=5000", "measure.malloc_mmap_threshold_MB: must be null or an "
                                                         "integer in [1, 4096], got 5000"),
    ("tune", "tune.pruner.report_every=0", "tune.pruner.report_every: must be an integer >= 1, got 0"),
    ("train", "split.fractions=[0.5]", "split.fractions: must be a list of 3 to 4 numbers in (0, 1], got [0.5]"),
    ("screen", "space.width_mults=[-1.0]", "space.width_mults: must be a non-empty list of positive numbers"),
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
