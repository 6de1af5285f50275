"""carb.commands.cli, the plumbing every command shares: ``fail`` (one line on stderr, exit 2),
``hydra_command`` (CarbError -> exit 2 and one line, Ctrl-C -> exit 130 and the "finished work is
kept" line, other exceptions left to Hydra), ``compose`` (overrides as on the command line),
``to_dict`` and ``concise_warnings``.

The entry-point behaviour is driven through real processes: a tiny app built with ``hydra_command``
(so each outcome can be provoked on demand, including a real SIGINT) and one real command with a bad
value."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from carb.commands import cli
from carb.errors import CarbError, ConfigError, DatasetError

APP = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path

    from carb.commands.cli import hydra_command
    from carb.errors import ConfigError


    def run_app(cfg):
        """The app's docstring."""
        mode = os.environ["CARB_TEST_MODE"]
        if mode == "ok":
            print(f"top_k={cfg.screen.top_k} output_dir={cfg.screen.output_dir}")
            return 0
        if mode == "carb":
            raise ConfigError("screen.objective: 'nope' is not predicted;\\n  allowed:\\t['energy_J',\\n"
                              "   'latency_ms']")
        if mode == "bug":
            raise ValueError("a plain bug")
        if mode == "warn":
            import warnings
            warnings.warn("careful now", UserWarning)
            return 0
        if mode in ("interrupt", "interrupt-kept"):
            if mode == "interrupt-kept":
                from carb.commands.cli import finished_work
                finished_work("/some/fit", "carb-train log_only=/some/fit")
            Path(os.environ["CARB_TEST_READY"]).write_text("ready")
            time.sleep(60)
            print("slept through the interrupt")


    main = hydra_command("screen")(run_app)

    if __name__ == "__main__":
        main()
''')


def _env(mode: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_"))}
    env.pop("PYTHONWARNINGS", None)
    env.update(CARB_TEST_MODE=mode, PYTHONUNBUFFERED="1", **extra)
    return env


@pytest.fixture
def app(tmp_path) -> Path:
    p = tmp_path / "app.py"
    p.write_text(APP)
    return p


def _run(app: Path, mode: str, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(app), *overrides], cwd=app.parent, env=_env(mode),
                          capture_output=True, text=True, timeout=120)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


# --------------------------------------------------------------------------- fail

@pytest.mark.parametrize("err,line", [
    (ConfigError("space.depth: 7 is not allowed"), "carb-train: error: space.depth: 7 is not allowed"),
    (DatasetError("data.path: bad file\n  column 'flops' is missing\n"),
     "carb-train: error: data.path: bad file column 'flops' is missing"),
    (ValueError("  tabs\tand   spaces\r\n collapse "), "carb-train: error: tabs and spaces collapse"),
    (RuntimeError(""), "carb-train: error: RuntimeError"),
])
def test_fail_prints_one_line_and_exits_2(capsys, err, line):
    with pytest.raises(SystemExit) as ei:
        cli.fail("train", err)
    assert ei.value.code == 2
    out, errout = capsys.readouterr()
    assert out == ""
    assert errout == line + "\n"


# --------------------------------------------------------------------------- hydra_command

def test_hydra_command_keeps_run_fn_a_plain_function():
    def run_thing(cfg):
        """Doc of run_thing."""
        return cfg["x"] * 2

    entry = cli.hydra_command("train")(run_thing)
    assert callable(entry) and entry is not run_thing
    assert entry.__name__ == "run_thing" and entry.__doc__ == "Doc of run_thing."
    assert entry.__wrapped__ is run_thing and entry.__wrapped__({"x": 21}) == 42


def test_hydra_command_runs_with_overrides(app, tmp_path):
    r = _run(app, "ok", "screen.top_k=7", f"paths.output_dir={tmp_path}/out")
    assert r.returncode == 0, r.stderr
    assert f"top_k=7 output_dir={tmp_path}/out/screen" in r.stdout   # override + interpolation


def test_hydra_command_turns_a_carb_error_into_one_line_and_exit_2(app):
    r = _run(app, "carb")
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "Error executing job" not in r.stderr
    assert _error_lines(r.stderr) == [
        "carb-screen: error: screen.objective: 'nope' is not predicted; allowed: ['energy_J', 'latency_ms']"]
    assert r.stdout.startswith("carb-screen: tracking store sqlite:///") and r.stdout.count("\n") == 1


def test_hydra_command_leaves_other_exceptions_to_hydra(app):
    """Only CarbErrors are user errors: a bug keeps Hydra's report and exit status 1, not exit 2."""
    r = _run(app, "bug")
    assert r.returncode == 1
    assert "ValueError: a plain bug" in r.stderr
    assert "carb-screen: error" not in r.stderr


def test_hydra_command_shows_warnings_as_one_line(app):
    r = _run(app, "warn")
    assert r.returncode == 0, r.stderr
    assert "warning: careful now" in _error_lines(r.stderr)
    assert "app.py" not in r.stderr and "UserWarning" not in r.stderr


@pytest.mark.parametrize("mode,line", [
    ("interrupt", "carb-screen: interrupted; finished work is kept"),
    ("interrupt-kept", "carb-screen: interrupted; finished work is in /some/fit (resume: carb-train log_only=/some/fit)"),
])
def test_ctrl_c_exits_130_and_says_finished_work_is_kept(app, tmp_path, mode, line):
    ready = tmp_path / "ready"
    # SIGINT back to its default in the child: a test run started in the background (`make test &`, nohup,
    # CI runners) passes SIGINT on as ignored, and Python then never raises KeyboardInterrupt (the app
    # slept through the signal: a 30 s timeout that did not happen when the test ran alone)
    p = subprocess.Popen([sys.executable, str(app)], cwd=app.parent, env=_env(mode, CARB_TEST_READY=str(ready)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        t0 = time.monotonic()
        while not ready.exists():
            assert p.poll() is None, p.communicate()[1]
            assert time.monotonic() - t0 < 60, "the app never started its run"
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err
    assert _error_lines(err) == [line]
    assert "Traceback" not in err and "slept through" not in out


def test_tests_use_a_temporary_store():
    """tests/conftest.py: the default store of every test is under a temporary CARB_HOME, not the checkout."""
    from carb.resources import carb_home, default_tracking_uri

    root = Path(cli.__file__).resolve().parents[2]
    assert carb_home() != root and str(root / "mlruns") not in default_tracking_uri()
    assert os.environ["CARB_HOME"] == str(carb_home())


def test_a_real_command_with_a_bad_value_exits_2_with_one_line(tmp_path):
    out = tmp_path / "never.parquet"
    r = subprocess.run([sys.executable, "-m", "carb.collect", "space=smoke", "space.precisions=[fp64]",
                        f"out={out}"], cwd=tmp_path, env=_env("-"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("carb-collect: error: "), r.stderr
    assert "fp64" in lines[0] and "fp32" in lines[0]          # names the bad value and the allowed ones
    assert not out.exists()


# --------------------------------------------------------------------------- compose / to_dict

def test_compose_applies_overrides():
    base = cli.compose("screen")
    cfg = cli.compose("screen", ["screen.top_k=7", "screen.budget.energy_J=2.5", "paths.output_dir=/x/y",
                                 "space=smoke"])
    assert base.screen.top_k != 7 and cfg.screen.top_k == 7
    assert cfg.screen.budget.energy_J == 2.5 and base.screen.budget.energy_J is None
    assert cfg.screen.output_dir == "/x/y/screen"                  # interpolation follows the override
    assert cfg.space.name == "smoke" and base.space.name != "smoke"  # config group switch
    with pytest.raises(Exception, match="no_such_key"):
        cli.compose("screen", ["screen.no_such_key=1"])


def test_compose_finds_the_packaged_configs():
    assert Path(cli.CONF_DIR, "screen.yaml").is_file()
    for name in ("train", "collect", "tune", "promote", "characterize", "screen"):
        assert cli.compose(name) is not None


def test_to_dict_resolves_interpolations():
    cfg = OmegaConf.create({"paths": {"out": "/o"}, "screen": {"dir": "${paths.out}/screen", "k": 3},
                            "items": ["${screen.k}", 1]})
    d = cli.to_dict(cfg)
    assert type(d) is dict and type(d["screen"]) is dict and type(d["items"]) is list
    assert d == {"paths": {"out": "/o"}, "screen": {"dir": "/o/screen", "k": 3}, "items": [3, 1]}
    assert cli.to_dict(cli.compose("screen", ["paths.output_dir=/p"]))["screen"]["output_dir"] == "/p/screen"


def test_to_dict_leaves_plain_dicts_alone():
    plain = {"a": "${b}", "b": {"c": 1}}
    d = cli.to_dict(plain)
    assert d == {"a": "${b}", "b": {"c": 1}}                  # no interpolation on plain data
    assert d["b"] is plain["b"]
    d["new"] = 1
    assert "new" not in plain                                 # a copy, not the caller's dict


# --------------------------------------------------------------------------- warnings

def test_concise_warnings_formats_a_warning_as_one_line(monkeypatch):
    """(A warning emitted through a real command is checked in test_hydra_command_shows_warnings_as_one_line.)"""
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)   # restored after the test
    before = warnings.formatwarning("disk almost full", UserWarning, "/some/file.py", 12, "source line")
    assert "/some/file.py" in before                                         # Python's default: file, line
    cli.concise_warnings()
    text = warnings.formatwarning("disk almost full", UserWarning, "/some/file.py", 12, "source line")
    assert text == "warning: disk almost full\n"
    assert warnings.formatwarning(RuntimeWarning("from an instance"), RuntimeWarning, "f.py", 1) == \
        "warning: from an instance\n"


def test_carb_errors_are_the_ones_turned_into_exit_2():
    assert issubclass(ConfigError, CarbError) and issubclass(DatasetError, CarbError)
    assert not issubclass(ValueError, CarbError)


@pytest.mark.parametrize("argv, needle", [
    (["space=nope"], "space: unknown key; allowed: ["),
    (["model=nope"], "model=nope: no such option; allowed: auto, carb, carb_fast, tuned"),
    (["foo=1"], "foo: unknown key; allowed: ["),
    (["nope"], "Error parsing override 'nope'"),
    (["+experiment=nah"], "experiment=nah: no such option; allowed: ablation, lobo, two_stage"),
    (["-m", "features=full,nope"], "features=nope: no such option; allowed: arch_only, full, no_util"),
])
def test_hydra_composition_errors_are_one_line_exit_2(argv, needle, tmp_path):
    """Hydra's own composition errors (unknown group option, unknown key, missing '=', a bad value
    inside a sweep) are one line and exit code 2, before anything runs."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "carb.train", *argv, f"tracking.uri=sqlite:///{tmp_path}/m.db"],
                       capture_output=True, text=True, cwd=tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr[-1500:]
    assert len(lines) == 1 and lines[0].startswith("carb-train: error: ") and needle in lines[0], lines
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize("multirun", [False, True])
def test_unwritable_run_folder_is_one_line_exit_2(multirun, tmp_path):
    """A run folder that cannot be created (its parent is a file) is one line naming the Hydra setting
    and what to set, exit code 2, before anything runs (not Hydra's traceback)."""
    import subprocess
    import sys

    (tmp_path / "afile").write_text("x")
    argv = ["-m", "features=full,arch_only"] if multirun else []
    r = subprocess.run([sys.executable, "-m", "carb.train", *argv, f"paths.output_dir={tmp_path}/afile/out",
                        f"tracking.uri=sqlite:///{tmp_path}/m.db"], capture_output=True, text=True, cwd=tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    assert r.returncode == 2, r.stderr[-1500:]
    assert len(lines) == 1 and lines[0].startswith(f"carb-train: error: {key}: cannot write"), lines
    assert "is a file" in lines[0] and "paths.output_dir=" in lines[0]
    assert not (tmp_path / "m.db").exists()


def test_unwritable_reasons(tmp_path):
    from carb.commands.cli import unwritable

    (tmp_path / "f").write_text("x")
    assert unwritable(tmp_path / "new" / "deeper") is None
    assert "is a file" in unwritable(tmp_path / "f" / "sub")
    assert not list(tmp_path.glob(".carb-probe-*"))         # the probe folder is removed
    if Path("/proc/self").is_dir():
        assert "refuses new folders" in unwritable(Path("/proc/carb-x/out"))


def test_an_unknown_nested_key_names_its_first_missing_part_and_the_allowed_keys():
    """``importer.foo.bar=1`` / ``model.foo.bar=1``: Hydra says only "Could not override ... use +"; the
    line names the first part the config lacks and the keys beside it."""
    from carb.commands.cli import allowed_keys

    missing, keys = allowed_keys("train", ["model=carb_fast"], "model.foo.bar")
    assert missing == "model.foo" and "name" in keys and "foo" not in keys
    missing, keys = allowed_keys("train", [], "nope")
    assert missing == "nope" and {"data", "model", "tracking"} <= set(keys)
    assert allowed_keys("train", [], "model.name") is None          # nothing is missing there
