"""Issue 31 item 5 (rest): carb-promote's default model and progress group, values with parentheses, the
multirun summary table and the progress heartbeat."""
from __future__ import annotations

import io
import logging
import signal
import sys
import time
import warnings

import pytest

from carb.commands import promote
from carb.commands.cli import compose, composition_error_line, hydra_command, precheck, quote_value, quote_values
from carb.commands.progress import Progress, heartbeats
from carb.commands.sweep_summary import headline, job_row, summary_table
from carb.errors import ConfigError, ModelError
from tests.test_progress import Clock


def _version(n: int, mae: float) -> dict:
    return {"version": str(n), "run_id": f"r{n}", "metrics": {"val_energy_J_mae": mae}, "aliases": [],
            "tags": {"dataset_digest": "d", "split": "s"}}


@pytest.fixture
def store(monkeypatch):
    state = {"names": ["carb-my-gpu-0123456789"], "aliases": {}, "asked": []}
    monkeypatch.setattr(promote.tracking, "configure", lambda *a, **k: None)
    monkeypatch.setattr(promote.tracking, "registered_models", lambda: list(state["names"]))
    monkeypatch.setattr(promote.tracking, "model_versions",
                        lambda name: state["asked"].append(name) or [_version(1, 2.0), _version(2, 1.0)])
    monkeypatch.setattr(promote.tracking, "get_alias", lambda name, alias: state["aliases"].get(alias))
    monkeypatch.setattr(promote.tracking, "set_alias", lambda n, alias, v: state["aliases"].__setitem__(alias, v))
    return state


def test_promote_defaults_to_the_only_model(store, capsys):
    r = promote.run_promote(compose("promote", ["progress.heartbeat_s=0"]))
    assert store["asked"] == ["carb-my-gpu-0123456789"] and r["champion"] == "2" and r["changed"]
    err = capsys.readouterr().err
    assert "carb-promote: [" in err and "carb-my-gpu-0123456789@champion is version 2" in err   # progress group


def test_promote_several_models_is_one_line(store):
    store["names"] = ["carb-a-1111111111", "carb-b-2222222222", "other"]
    with pytest.raises(ConfigError) as e:
        promote.run_promote(compose("promote", ["progress.enabled=false"]))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("promote.name: not given and")
    assert "holds 2 registered models; choose one with promote.name=<name>; allowed: ['carb-a-1111111111', " \
           "'carb-b-2222222222']" in msg
    store["names"] = []
    with pytest.raises(ModelError, match="holds no registered CARB model"):
        promote.run_promote(compose("promote", ["progress.enabled=false"]))


def test_values_with_parentheses_as_typed(capsys):
    """What bash passes for data.device='Titan X (Pascal)' is read as that string; Hydra syntax stays."""
    typed = "data.device=Titan X (Pascal)"
    fixed = quote_value(typed)
    assert fixed == "data.device='Titan X (Pascal)'"
    assert compose("train", [fixed]).data.device == "Titan X (Pascal)"
    assert compose("train", [quote_value("data.device=It's (v2)")]).data.device == "It's (v2)"
    for same in ("data.device=RTX 4090", "data.device='A (B)'", "space.batch_sizes=[1,8]", "x=range(1,3)",
                 "x=a,b (c)", "data.device=A(B)"):
        assert quote_value(same) is None, same
    assert quote_values(["-m", typed], "train") == ["-m", fixed]
    assert "carb-train: read data.device as the string 'Titan X (Pascal)'" in capsys.readouterr().err


def test_unparsable_value_gets_the_quoting_hint(capsys):
    with pytest.raises(SystemExit) as e:
        precheck("train", "train", ["data.device=A(B)"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("carb-train: error: ")
    assert "needs Hydra's quotes inside the shell's: data.device=\"'Titan X (Pascal)'\"" in err
    assert "Hydra's quotes" not in composition_error_line(ValueError("Could not find 'model/nope'"))


def test_multirun_ends_with_one_summary_table(tmp_path, monkeypatch, capsys):
    def fake(cfg):
        reg = cfg.promote.alias == "a"
        return {"run_id": f"run{cfg.promote.alias}0123456789", "registered_name": "carb-x" if reg else None,
                "version": "3", "metrics": {"test_energy_J_mape": 4.25, "test_latency_ms_mape": 7.5,
                                            "val_energy_J_mae": 0.1, "test_fp16_energy_J_mape": 9.0}}

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["carb-promote", "-m", "promote.alias=a,b",
                                      f"tracking.uri=sqlite:///{tmp_path}/m.db", "progress.enabled=false"])
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)   # a command sets these globals:
    root = logging.getLogger()                                               # restore them for other tests
    handlers, level, sigterm = list(root.handlers), root.level, signal.getsignal(signal.SIGTERM)
    try:
        hydra_command("promote")(fake)()
    finally:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        signal.signal(signal.SIGTERM, sigterm)
        root.handlers[:] = handlers
        root.setLevel(level)
    out = capsys.readouterr().out
    lines = out[out.index("sweep summary"):].splitlines()
    assert lines[0].startswith("sweep summary: 2 jobs, 1 registered a model; folder ")
    assert lines[1].split() == ["job", "status", "run", "id", "registered", "energy_J", "mape%", "latency_ms",
                                "mape%", "overrides"]
    assert lines[2].split() == ["0", "COMPLETED", "runa01234567", "carb-x", "v3", "4.25", "7.5", "promote.alias=a"]
    assert lines[3].split() == ["1", "COMPLETED", "runb01234567", "no", "4.25", "7.5", "promote.alias=b"]


def test_summary_rows_for_other_commands():
    assert headline({"n_accept": 3, "n_borderline": 2, "output_dir": "x", "n_pareto": True}) == \
        {"n_accept": 3.0, "n_borderline": 2.0}
    row = job_row(0, "FAILED", ["tracking.uri=x", "features=no_util"], None)
    assert row == {"job": "0", "status": "FAILED", "run_id": "-", "registered": "no", "overrides": "features=no_util",
                   "metrics": {}}
    assert "FAILED" in summary_table([row])


def test_heartbeat_repeats_the_line_after_silence():
    clock, out = Clock(), io.StringIO()
    prog = Progress("carb-train", 4.0, heartbeat_s=15, clock=clock, stream=out)
    prog.begin("leave-one-batch-tier-out refit")
    clock.t += 10
    assert not prog.beat()                       # 10 s of silence: not yet
    clock.t += 6
    assert prog.beat()
    assert out.getvalue().splitlines()[-1] == ("carb-train: [  0%] leave-one-batch-tier-out refit (still running); "
                                               "16 s elapsed")
    assert not prog.beat()                       # just printed
    clock.t += 15
    prog.begin("extrapolation split 1/5")
    clock.t += 14.9
    assert not prog.beat()                       # a unit's own line counts as a print
    prog.finish()
    clock.t += 100
    assert not prog.beat() and prog._thread is None


def test_heartbeat_thread_fires_and_stops():
    out = io.StringIO()
    outside = Progress("carb-train", 2.0, heartbeat_s=0.05, stream=out)
    outside.begin("called as a library")
    assert outside._thread is None               # no heartbeat outside a command's run
    with heartbeats():                           # what every command's run does
        prog = Progress("carb-train", 2.0, heartbeat_s=0.05, stream=out)
        prog.begin("long step")
        thread = prog._thread
        assert thread is not None and thread.daemon
        deadline = time.monotonic() + 2.0
        while "(still running)" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "long step (still running)" in out.getvalue()
    assert not thread.is_alive() and prog._thread is None   # stopped at the command's end
    assert Progress.from_cfg("p", 1.0, compose("screen", [])).heartbeat_s == 15.0
    assert Progress("p", 1.0, enabled=False, heartbeat_s=1)._thread is None
