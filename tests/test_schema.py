"""The config schemas (carb.commands.schema) and the prior group: every command's shipped configs pass;
an unknown key, a wrong type and an out-of-range value in several groups are one line naming the dotted
key and what is allowed, before any work starts (exit 2 from the command line); the prior's options
only select or override the settings written once in carb.model.prior_config."""
from __future__ import annotations

import subprocess
import sys

import pytest

from carb.commands.checks import check_config
from carb.commands.cli import compose, to_dict
from carb.errors import ConfigError
from carb.model.prior_config import CPU_TERMS, CUDA_TERMS, PriorSettings, cascade_params


def test_n_jobs_from_the_environment(monkeypatch):
    """``compute.n_jobs: ${oc.env:CARB_N_JOBS,auto}`` is text when the variable is set."""
    monkeypatch.setenv("CARB_N_JOBS", "2")
    check_config("train", compose("train"))
    monkeypatch.setenv("CARB_N_JOBS", "two")
    with pytest.raises(ConfigError, match=r"compute.n_jobs: must be auto \(also -1 or 0\) or an integer >= 1 "
                                          r"\(e.g. CARB_N_JOBS=2\), got 'two'"):
        check_config("train", compose("train"))


@pytest.mark.parametrize("module, argv, line", [
    ("carb.train", ["+model.foo=1"], "carb-train: error: model.foo: unknown key; allowed: ['name', "),
    ("carb.train", ["-m", "prior.overlap_k=4,0.5"], "carb-train: error: prior.overlap_k: must be null or a number "
                                                    ">= 1.0, got 0.5"),
    ("carb.promote", ["promote.direction=up"], "carb-promote: error: promote.direction: 'up' is not allowed; "
                                               "allowed: ['minimize', 'maximize']"),
    ("carb.import_data", ["importer.show=1"], "carb-import: error: importer.show: unknown key; allowed: ['name', "),
    ("carb.characterize", ["+timm.gpu_c=x"], "carb-characterize: error: timm.gpu_c: unknown key"),
])
def test_command_line_errors_exit_2_before_work(module, argv, line, tmp_path):
    """From the command line (a sweep's bad value included): one line, exit 2, no store created."""
    r = subprocess.run([sys.executable, "-m", module, *argv, f"tracking.uri=sqlite:///{tmp_path}/m.db",
                        f"paths.output_dir={tmp_path}/out"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr[-1500:]
    assert len(lines) == 1 and lines[0].startswith(line), lines
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "out").exists()


def test_prior_options_select_and_override_the_schema_defaults():
    """auto = the schema's defaults; cpu / cuda switch the other device's terms off; off = no prior."""
    prior = {o: to_dict(compose("train", [f"prior={o}"]).prior) for o in ("auto", "cpu", "cuda", "off")}
    assert prior["auto"] == PriorSettings().model_dump() == to_dict(compose("tune").prior)
    assert all(prior["cpu"][k] == prior["auto"][k] for k in CPU_TERMS)
    assert not any(prior["cpu"][k] for k in CUDA_TERMS)
    assert all(prior["cuda"][k] == prior["auto"][k] for k in CUDA_TERMS)
    assert not prior["cuda"]["cpu_dispatch"] and not prior["cuda"]["device_probe"]
    assert prior["off"] == {**prior["auto"], "enabled": False}
    assert cascade_params(prior["off"])["physics"] is False and "enabled" not in cascade_params(None)["prior"]
    assert "physics" not in to_dict(compose("train", ["model=carb"]).model)    # moved out of the presets


def test_moved_model_keys_are_refused():
    from carb.model.presets import build_cascade

    with pytest.raises(ConfigError, match=r"model: \['physics'\] moved to the prior group; allowed: prior=auto"):
        build_cascade({"physics": False}, {"columns": ["depth"]})
    with pytest.raises(ConfigError, match="model.physics"):
        check_config("train", compose("train", ["+model.physics=false"]))


@pytest.mark.parametrize("command, override, line", [
    ("calibrate", "transfer.precision_shrink=-1", "transfer.precision_shrink: must be a number >= 0 or 'auto', got -1"),
    ("calibrate", "transfer.precision_shrink=often",
     "transfer.precision_shrink: must be a number >= 0 or 'auto', got 'often'"),
    ("calibrate", "transfer.zero_shot_target_out=devices",
     "transfer.zero_shot_target_out: 'devices' is not allowed; allowed: ['quantiles', 'level', 'device', 'none']"),
    ("calibrate", "zero_shot.probe_multi_log_error_band=[0.3]",
     "zero_shot.probe_multi_log_error_band: must be null or a list of 2 numbers, got [0.3]"),
    ("train", "prior.op_cost_per_precision=maybe", "prior.op_cost_per_precision: must be true or false, got 'maybe'"),
    ("calibrate", "zero_shot.probe_multi_log_error_band=[0.3,-0.3]",
     "zero_shot.probe_multi_log_error_band: must be [lo, hi] with lo <= hi (natural-log units, e.g. [-0.289, 0.289]: "
     "x [0.75, 1.34]), got [0.3, -0.3]"),
])
def test_this_sessions_settings_name_what_is_allowed(command, override, line):
    """A bad value of a new setting is one line naming the key and what it may be: a union of a number
    and a word (``precision_shrink``) says both, not 'a valid value'."""
    with pytest.raises(ConfigError) as e:
        check_config(command, compose(command, [override]))
    assert str(e.value) == line


def test_a_list_that_may_be_empty_is_not_called_non_empty():
    """``transfer.prior_targets`` may be ``[]``; ``space.blocks`` may not: the line says which."""
    with pytest.raises(ConfigError) as e:
        check_config("calibrate", compose("calibrate", ["transfer.prior_targets=[time]"]))
    assert str(e.value) == ("transfer.prior_targets: ['time'] not allowed; give a list of ['latency_ms', 'energy_J', "
                            "'peak_memory_MB']")
    with pytest.raises(ConfigError, match=r"space.blocks: \['wide'\] not allowed; give a non-empty list of "):
        check_config("screen", compose("screen", ["space.blocks=[wide]"]))
