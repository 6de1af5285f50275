"""Output that fits and leads somewhere (issue 42, item 5): the terminal output of the main job
(``carb-quickstart``), the README's worked task (``carb-screen``) and ``carb-train`` within 120 columns; the
shortlist keeps the knobs that tell its rows apart; ``next:`` commands that copy-paste as the README runs
them; run pages in MLflow's "Model training" view; ``carb-calibrate spec=`` without ``source=``; the Optuna
storage and dashboard; headline metrics before baselines; ``predict()``'s rates and provenance; and a
docs/RESULTS.md generator that keeps log lines out."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sizes import NO_EVALUATION, quickstart_without_evaluation

from carb.commands.cli import WIDTH, command_text, compose, wrap_command
from carb.errors import ConfigError

#: The README's worked task (README.md "A worked task"), as scripts/example.py runs it.
WORKED_TASK = ["screen.budget.latency_ms=10", "screen.objective=energy_J_per_image", "screen.accuracy=IMAGENET1K_V1",
               "screen.require.top1=0.76", "screen.pareto=[energy_J_per_image,-top1]"]


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    """The main job (carb-quickstart, H200 data; the training step without its evaluation refits), then the
    worked task's carb-screen on its store; each one's terminal output (stdout and stderr)."""
    from carb.commands.quickstart import run_quickstart
    from carb.commands.screen import run_screen

    d = tmp_path_factory.mktemp("fits")
    common = [f"tracking.uri=sqlite:///{d}/mlflow.db", f"paths.output_dir={d}/out"]
    import contextlib   # capsys is function-scoped: capture by hand
    import io

    out = {}
    for name, run in (("quickstart", lambda: run_quickstart(common)),
                      ("screen", lambda: run_screen(compose("screen", [*common, *WORKED_TASK])))):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            if name == "quickstart":
                with quickstart_without_evaluation():
                    result = run()
            else:
                result = run()
        out[name] = (buf.getvalue(), result)
    return {"dir": d, "common": common, **out}


@pytest.mark.slow   # the main job on H200 data: about a minute on 2 busy cores
def test_main_job_and_worked_task_stay_within_120_columns(main_job):
    for name in ("quickstart", "screen"):
        text, _ = main_job[name]
        assert "shortlist" in text and "next:" in text, name
        assert not _too_wide(text), (name, _too_wide(text))


@pytest.mark.slow
def test_main_job_ends_on_the_screen_runs_page_in_the_model_training_view(main_job):
    text, result = main_job["quickstart"]
    last = text.rstrip().splitlines()[-1]
    assert last.startswith("then open http://127.0.0.1:5000/#/experiments/")
    assert last.endswith(f"/runs/{result['run_id']}?workflowType=machine_learning")
    screen_text, screen = main_job["screen"]
    assert f"/runs/{screen['run_id']}?workflowType=machine_learning" in screen_text


@pytest.mark.slow   # carb-train with its extrapolation refits: 30-50 s on 2 busy cores
def test_carb_train_output_stays_within_120_columns(tmp_path, capsys):
    """carb-train on the CPU reference with its evaluation (the extrapolation table, sanity, coverage lines),
    small: fewer extrapolation splits' refits are not needed to print every table."""
    from carb.commands.train import run_train

    out = run_train(compose("train", [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"paths.output_dir={tmp_path}/o",
                                      "evaluate.lobo.enabled=false", "evaluate.architecture_intervals.enabled=false",
                                      "evaluate.figures=false", "model=carb_fast"]))
    text = capsys.readouterr()
    both = text.out + text.err
    assert "extrapolation" in both and f"/runs/{out['run_id']}?workflowType=machine_learning" in both
    assert not _too_wide(both), _too_wide(both)


def test_shortlist_keeps_a_knob_that_tells_rows_apart():
    """Two rows that differ only in early_downsample: the narrowed table keeps early_ds (the H200 shortlist
    dropped it, and two rows read the same with different numbers); a knob all rows share may go."""
    from carb.commands.screen_table import format_table
    from tests.test_screen_table import TARGETS, _wide_frame

    df = _wide_frame(4)
    df["early_downsample"] = [True, False, True, False]
    preds = [f"pred_{t}" for t in TARGETS] + ["pred_energy_J_per_image"]
    text = format_table(df, preds, ["pareto", "in_domain"])
    assert "early_ds" in text.splitlines()[0] and not _too_wide(text)
    same = format_table(df.assign(early_downsample=True), preds, ["pareto", "in_domain"])
    assert not _too_wide(same)
    # rows that differ in a knob the table does not show by default (stages) show it
    df2 = _wide_frame(2).assign(stages=["3-4-6-3", "2-2-2-2"])
    assert "stages" in format_table(df2, preds).splitlines()[0]


def test_commands_are_typed_as_this_process_runs_them(monkeypatch, tmp_path):
    """Off PATH, the console script is named by its path (relative under the current folder, as the
    README's `.venv/bin/carb-screen`); on PATH, by its name."""
    bindir = tmp_path / ".venv" / "bin"
    bindir.mkdir(parents=True)
    for name in ("python", "carb-screen"):
        (bindir / name).write_text("#!/bin/sh\n")
        (bindir / name).chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bindir / "python"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_text("carb-screen") == ".venv/bin/carb-screen"
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    assert command_text("carb-screen") == "carb-screen"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_text("carb-screen") == str(bindir / "carb-screen")


def test_next_block_copy_pastes_within_120_columns(monkeypatch, tmp_path):
    """Wrapped commands end in a shell continuation and join back into the one command; every line fits."""
    from carb.commands.screen_table import next_steps

    monkeypatch.chdir(tmp_path)
    lines = next_steps("models:/carb-nvidia-h200-0123456789@champion",
                       "sqlite:////home/someone/projects/carb/mlruns/mlflow.db",
                       "http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning")
    assert not _too_wide("\n".join(lines))
    joined = "\n".join(lines).replace(" \\\n", " ")
    budget = next(ln for ln in joined.splitlines() if "your budget" in ln)
    words = shlex.split(budget.split("your budget", 1)[1])
    assert words[0] == command_text("carb-screen") and words[-1] == "screen.budget.peak_memory_MB=<MB>"
    long = wrap_command("  x  ", "cmd " + " ".join(f"key{i}=value{i}" for i in range(40)), "   (note)")
    assert len(long) > 1 and all(ln.endswith(" \\") for ln in long[:-1]) and not _too_wide("\n".join(long))
    assert shlex.split(" ".join(ln.rstrip("\\") for ln in long).replace("(note)", ""))[-1] == "key39=value39"


def test_run_url_opens_the_model_training_view(tmp_path):
    from carb import tracking

    uri = f"sqlite:///{tmp_path}/m.db"
    with tracking.start_run("screen", "x", uri) as run_id:
        pass
    eid = tracking.experiment_id("carb-screen") if hasattr(tracking, "experiment_id") else None
    url = tracking.run_url(run_id, uri)
    assert url.startswith("http://127.0.0.1:5000/#/experiments/") and url.endswith(
        f"/runs/{run_id}?workflowType=machine_learning")
    if eid is not None:
        assert f"/experiments/{eid}/runs/" in url
    assert tracking.run_url(run_id, "http://mlflow.example:8080/").startswith("http://mlflow.example:8080/#/")
    assert tracking.run_url("", uri) == ""


def test_calibrate_spec_without_source_names_source_and_lists_the_models(tmp_path, monkeypatch):
    from carb import tracking
    from carb.commands.calibrate import run_calibrate

    cfg = compose("calibrate", [f"tracking.uri=sqlite:///{tmp_path}/m.db", "k=0", "spec=H100 SXM",
                                f"paths.output_dir={tmp_path}/out", "progress.enabled=false"])
    with pytest.raises(ConfigError, match=r"^source: .*pass source=models:/<name>@champion .*none in sqlite"):
        run_calibrate(cfg)
    monkeypatch.setattr(tracking, "registered_models", lambda: ["carb-amd-epyc-1", "carb-nvidia-h200-2"])
    with pytest.raises(ConfigError, match=r"registered models: carb-amd-epyc-1, carb-nvidia-h200-2\)"):
        run_calibrate(cfg)


def test_tune_prints_storage_groups_and_the_dashboard_command():
    from carb.commands.tune import dashboard_lines

    lines = dashboard_lines("sqlite:///mlruns/optuna.db", "s", ["energy_J", "latency_ms"], ["xgb", "lgbm", "et"])
    text = "\n".join(lines)
    assert "Optuna storage  sqlite:///mlruns/optuna.db" in text
    assert "optuna-dashboard sqlite:///mlruns/optuna.db" in text
    assert "s.<target>.{xgb|lgbm|et|blend}" in text and not _too_wide(text)


def test_tuned_sub_studies_share_their_targets_group(tmp_path):
    import optuna

    from carb.model.tuning import group_name, group_study, storage_for

    storage = storage_for(f"sqlite:///{tmp_path}/o.db")
    for m in ("xgb", "blend"):
        st = optuna.create_study(study_name=f"s.energy_J.{m}", storage=storage)
        group_study(st, "s", "energy_J")
        group_study(st, "s", "energy_J")   # a second worker: unchanged
    groups = {s.study_name: s.user_attrs.get("group") for s in optuna.get_all_study_summaries(storage)}
    assert groups == {"s.energy_J.xgb": group_name("s", "energy_J"), "s.energy_J.blend": "s.energy_J"}


def test_headline_metrics_sort_before_the_baselines():
    """MLflow orders metric columns by name: every test/ and val/ metric before the baselines'."""
    from carb.commands.runinfo import headline_metrics

    targets = ["energy_J", "latency_ms"]
    flat = {f"{p}_{t}_{k}": 0.5 for t in targets for p in ("test", "val", "b1", "b2", "lobo")
            for k in ("r2", "mae", "mape", "rmse")}
    keys = sorted(headline_metrics(flat, targets))
    heads = [i for i, k in enumerate(keys) if k.startswith(("test/", "val/"))]
    bases = [i for i, k in enumerate(keys) if "b1" in k.split("/")[0] or "b2" in k.split("/")[0]]
    assert heads and bases and max(heads) < min(bases), keys


def test_predict_adds_rates_and_says_where_it_came_from():
    from carb.analysis.predictor import Predictor
    from tests.test_predictor import KNOBS, _calibration
    from tests.test_screening import AnalyticModel

    m = AnalyticModel()
    m.intervals_ = _calibration(199)
    out = Predictor(m, "models:/test@champion", "7").predict(KNOBS)
    for t in ("energy_J", "latency_ms"):
        assert np.allclose(out[f"pred_{t}_per_image"], out[f"pred_{t}"] / KNOBS["batch_size"])
    assert np.allclose(out["pred_avg_power_W"], out["pred_energy_J"] / (out["pred_latency_ms"] / 1e3))
    assert out.attrs["model_uri"] == "models:/test@champion" and out.attrs["model_version"] == "7"
    assert out.attrs["interval_coverage"] == 0.9
    assert Predictor(m).predict(KNOBS, coverage=0.8).attrs["interval_coverage"] == 0.8


def test_results_generator_keeps_log_lines_out(monkeypatch, capsys, tmp_path):
    """What the work prints goes to stderr; log lines and repeated lines in the text never reach the section
    (docs/RESULTS.md opened with one stderr line 7 times and the benchmarks' progress lines)."""
    import scripts.results as results

    log = "carb-train: feature sets arch_only, full and no_util are identical on this data: 15 columns"
    section = ["## Results on this project's own data", "", "Generated by `python -m scripts.results`.", "",
               "| a | b |", "|---|---|", "| 1 | 2 |", "| 1 | 2 |", "", "`carb-calibrate` zero-shot band [-0.2, 0.1]"]
    noisy = [log] * 7 + ["== CPU pairs (latency, peak memory)", "  fitted EPYC (reference) (1350 rows) [1/2, 2 s]",
                         "                              compute  bandwidth  power", *section[:3],
                         "carb-train: [ 10%] fit stage 1/3: peak_memory_MB; 1 s elapsed, ETA 9 s",
                         "warning: could not save the fit", "UserWarning: x", *section[3:]]

    def fake_section() -> str:
        print(log)
        print("== timm GPU pairs (latency)", file=sys.stderr)
        return "\n".join(noisy)

    monkeypatch.setattr(results, "section", fake_section)
    results.main(["--print"])
    assert capsys.readouterr().out.splitlines() == section
    doc = tmp_path / "RESULTS.md"
    doc.write_text("# Results\n\n<!-- results:start -->\nold\n<!-- results:end -->\n")
    monkeypatch.setattr(results, "RESULTS_MD", doc)
    results.main([])
    block = doc.read_text().split("<!-- results:start -->\n")[1].split("\n<!-- results:end -->")[0]
    assert block.splitlines() == section


def test_quickstart_last_line_opens_the_run_in_the_model_training_view(tmp_path):
    """Fast check of the main job's closing lines: the UI command wrapped within 120 columns, then the screen
    run's page (never the UI's GenAI home); without a run, the screening experiment's runs table."""
    from carb import tracking
    from carb.commands.quickstart import ui_lines

    uri = f"sqlite:///{tmp_path}/m.db"
    with tracking.start_run("screen", "x", uri) as run_id:
        pass
    lines = ui_lines(uri, run_id)
    assert not _too_wide("\n".join(lines)) and lines[0].startswith("Open the MLflow UI:")
    assert lines[-1].startswith("then open http://127.0.0.1:5000/#/experiments/")
    assert lines[-1].endswith(f"/runs/{run_id}?workflowType=machine_learning")
    assert ui_lines(uri, "")[-1].endswith("/runs?workflowType=machine_learning")
