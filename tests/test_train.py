"""carb-train end to end: run_train on a small synthetic dataset and on the shipped CPU reference
(model=carb_fast), the MLflow run (metrics, params, tags, figures, dataset input, registered version),
the MLflow round trip, the ablation multirun as a subprocess, and one-line errors for bad input."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from sizes import NO_EVALUATION
from synthetic import synthetic_dataset

from carb import load_model, tracking
from carb.analysis.evaluate import regression_metrics
from carb.commands.cli import compose
from carb.data.io import load_dataset, save_dataset
from carb.data.schema import TARGETS, model_name, ok_rows
from carb.data.split import split_dataset
from carb.errors import DatasetError

ROOT = Path(__file__).resolve().parent.parent
TINY = ["model=carb_fast", "model.specialists.xgb.n_estimators=15", "model.specialists.xgb.max_depth=4",
        "model.specialists.lgbm.n_estimators=15", "model.specialists.lgbm.num_leaves=15",
        "model.specialists.et.n_estimators=10", "model.oof_folds=2", "model.probe_estimators=15",
        "model.correctors.model.max_iter=30", "model.n_jobs=1", "print_table=false"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("train")
    data = d / "syn.parquet"
    save_dataset(synthetic_dataset(240, seed=7, device_name="Synthetic GPU", n_oom=5), data)
    return {"dir": d, "data": str(data), "uri": f"sqlite:///{d}/mlruns/mlflow.db"}


def over(env, *extra):
    return [f"data.path={env['data']}", f"tracking.uri={env['uri']}", f"paths.output_dir={env['dir']}/out",
            *extra]


@pytest.fixture(scope="module")
def syn_run(env):
    from carb.commands.train import run_train

    return run_train(compose("train", over(env, *TINY, "evaluate.architecture_intervals.folds=2")))


def _run(env, run_id):
    tracking.configure(env["uri"])
    return mlflow.get_run(run_id)


def _metric_table(run_id) -> dict[str, float]:
    """Every metric of a train run: its table artifact ``metrics.json`` as ``{metric: value}``."""
    exp = mlflow.get_run(run_id).info.experiment_id
    table = mlflow.MlflowClient().load_table(exp, "metrics.json", run_ids=[run_id])
    return dict(zip(table["metric"], table["value"]))


def test_synthetic_run_is_logged_and_registered(env, syn_run):
    assert syn_run["targets"] == list(TARGETS) and syn_run["dropped_targets"] == {}
    assert syn_run["registered_name"] == "carb-synthetic-gpu" and syn_run["version"] == "1"
    assert syn_run["run_name"] == "synthetic-gpu/full/carb_fast"
    run = _run(env, syn_run["run_id"])
    m = _metric_table(run.info.run_id)          # every metric is in the run's table; headline ones are scalars
    assert len(run.data.metrics) <= 60 and m == pytest.approx(syn_run["metrics"], rel=1e-12)
    for t in TARGETS:
        for k in ("r2", "mae", "rmse", "mape"):
            assert f"test_{t}_{k}" in m and f"lobo_{t}_{k}" in m and f"b1_{t}_{k}" in m
            assert run.data.metrics[f"test/{t}_{k}"] == pytest.approx(m[f"test_{t}_{k}"])
        assert f"val_{t}_mae" in m and f"test_low_batch_{t}_r2" in m
        assert f"resid_spearman_sm_overall_{t}" in m and f"fit_{t}_s" in m
        # flags are tags, not metrics
        assert f"log_target_{t}" not in m and run.data.tags[f"log_target_{t}"] in ("true", "false")
        assert f"corrector_low_batch_{t}_kept" not in m
        assert run.data.tags[f"corrector_low_batch_{t}_kept"] in ("true", "false")
        assert abs(sum(m[f"weight_{t}_{w}"] for w in ("xgb", "lgbm", "et")) - 1) < 1e-6
    for k in ("b2_energy_J_r2", "budget_accuracy", "budget_false_accept_rate", "budget_false_reject_rate",
              "fit_total_s", "evaluate_s", "calibrate_s", "lobo_fit_s"):
        assert k in m
    # counts and settings are params, not metrics
    p = run.data.params
    for k in ("lobo_n_train", "lobo_n_test", "test_low_batch_n", "sanity_n", "budget_n", "interval_nominal"):
        assert k in p and k not in m
    assert int(p["lobo_n_train"]) + int(p["lobo_n_test"]) == 240
    assert m["test_peak_memory_MB_r2"] > 0.8  # the known cost model is learnable
    tags = run.data.tags
    assert tags["device"] == "Synthetic GPU" and tags["device_slug"] == "synthetic-gpu"
    assert tags["feature_set"] == "full" and tags["preset"] == "carb_fast"
    assert tags["git_commit"] and len(tags["dataset_digest"]) > 0
    assert run.data.params["model.specialists.xgb.n_estimators"] == "15"
    assert run.data.params["features.name"] == "full"
    # lean params: no tuning search space on a run that did not tune, no display settings
    assert not [k for k in p if k.startswith(("tune.", "progress.", "tracking."))]
    assert len(p) <= 60, len(p)
    # the split's parts are the run's inputs, each with its context
    inputs = {i.dataset.name: [t.value for t in i.tags if t.key == "mlflow.data.context"]
              for i in run.inputs.dataset_inputs}
    assert inputs == {"syn.train": ["training"], "syn.val": ["validation"], "syn.cal": ["calibration"],
                      "syn.test": ["testing"]}
    # telemetry present: the feature set is not the same as another one; the columns it used are a tag
    assert tags["feature_set_same_as"] == "none" and "avg_sm_util" in tags["feature_columns"].split(",")
    exp = mlflow.get_experiment(run.info.experiment_id)
    assert exp.name == "carb-train"
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "figures")}
    assert arts == {"figures/pred_vs_measured.png", "figures/importances.png",
                    "figures/residuals_by_batch_tier.png", "figures/extrapolation.png"}
    top = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"cascade_summary.json", "importances.json"} <= top
    # the saved fit keeps each extrapolation split's predictions (the figure is redrawn by log_only)
    from carb.commands.train import load_fit

    fit = load_fit(Path(tags["fit_folder"]))
    xp, xt = fit["extras"]["extrapolation_predictions"], fit["extras"]["extrapolation"]
    assert set(xp) == set(xt["split"]) and all(len(v) for v in xp.values())
    for name, rows in xp.items():
        n = xt[(xt["split"] == name) & (xt["target"] == "latency_ms")]["n_test"]
        assert len(rows) >= int(n.iloc[0]) and {"latency_ms", "pred_latency_ms", "b1_pred_latency_ms"} <= set(rows)


def test_registered_version_describes_itself(env, syn_run):
    """The registered model says what it is for; the version gives data, rows, preset, feature set, test,
    extrapolation and coverage numbers, has sortable metric tags and links its source run."""
    tracking.configure(env["uri"])
    info = tracking.registered_model_info("carb-synthetic-gpu", syn_run["version"])
    assert "Synthetic GPU" in info["description"] and "latency_ms" in info["description"]
    assert "fingerprint" in info["description"]
    d = info["version_description"]
    m = syn_run["metrics"]
    for part in ("**Data**", "240 rows", "preset carb_fast", "feature set full", "**Test**",
                 f"latency_ms R2 {m['test_latency_ms_r2']:.3f}", "**Extrapolation R2**", "**Interval coverage**",
                 syn_run["run_id"]):
        assert part in d, (part, d)
    vt = info["version_tags"]
    assert float(vt["test_latency_ms_r2"]) == pytest.approx(m["test_latency_ms_r2"], rel=1e-5)
    assert "xval_min_latency_ms_r2" in vt and "interval_test_latency_ms_coverage" in vt
    assert info["run_id"] == syn_run["run_id"] and vt["source_run"] == syn_run["run_id"]
    # the versions are sortable by a metric tag through the client
    found = mlflow.MlflowClient().search_model_versions("name = 'carb-synthetic-gpu' and tag.preset = 'carb_fast'")
    assert [str(v.version) for v in found] == [syn_run["version"]]


def test_no_duplicate_lines_and_identical_feature_sets(env, capsys):
    """Data without energy or telemetry: the dropped-target and dropped-feature lines print once per
    run (the leave-one-batch-tier-out refit warns again from elsewhere), registration prints only CARB's
    own line, and the command says that the feature sets collapse to the same columns (and tags it)."""
    from carb.commands.cli import warnings_once
    from carb.commands.train import run_train

    df = synthetic_dataset(120, seed=3, device_name="Bare CPU", energy=False, telemetry=False)
    path = env["dir"] / "bare.parquet"
    save_dataset(df, path)
    uri = f"sqlite:///{env['dir']}/bare/mlflow.db"
    capsys.readouterr()
    with warnings_once():
        r = run_train(compose("train", [f"data.path={path}", f"tracking.uri={uri}", f"paths.output_dir={env['dir']}/out",
                                        "evaluate.figures=false", "evaluate.extrapolation.enabled=false",
                                        "evaluate.sanity.enabled=false", "evaluate.architecture_intervals.folds=2",
                                        *TINY[:-1]]))
    out = capsys.readouterr()
    lines = [ln for ln in (out.out + out.err).splitlines() if ln.strip() and not ln.startswith(("carb-train: [", "  "))]
    dupes = {ln for ln in lines if lines.count(ln) > 1}
    assert not dupes, dupes
    text = out.out + out.err
    assert text.count("energy_J: no measured value") == 1 and text.count("dropping feature(s)") == 1
    assert "already exists" not in text and "Successfully registered" not in text and "Created version" not in text
    assert f"registered {r['registered_name']} version 1" in text
    # what to run next names the new version (a new model has no @champion) and the promote that sets it
    joined = re.sub(r" \\\n *", " ", text)   # the wrapped commands joined back
    assert f"screen.target=models:/{r['registered_name']}/1 screen.budget.latency_ms=<ms>" in joined
    assert f"carb-promote promote.name={r['registered_name']}" in text and "space=zoo" not in text
    same = [ln for ln in lines if "are identical on this data" in ln]
    assert len(same) == 1 and "feature sets arch_only, full and no_util are identical on this data: 15 columns" in same[0]
    tracking.configure(uri)
    tags = mlflow.get_run(r["run_id"]).data.tags
    assert tags["feature_set_same_as"] == "arch_only,no_util"
    assert tags["feature_columns"].split(",")[:2] == ["block", "depth"] and "avg_sm_util" not in tags["feature_columns"]


def test_mlflow_round_trip_predicts_the_logged_numbers(env, syn_run):
    """Load the registered version and reproduce the logged test metrics from its predictions."""
    from carb.model.intervals import screening_predict

    by_version = load_model(f"models:/carb-synthetic-gpu/{syn_run['version']}", tracking_uri=env["uri"])
    by_run = tracking.load_cascade(f"runs:/{syn_run['run_id']}/model", tracking_uri=env["uri"])
    full = ok_rows(load_dataset(env["data"]))
    test = split_dataset(full, seed=0, fractions=tuple(by_version.split_fractions_)).frames4(full)[3]
    p = by_version.cascade.predict(test)   # carb.load_model wraps the cascade (Predictor); .cascade is it
    pd.testing.assert_frame_equal(p, by_run.predict(test))
    for t in TARGETS:
        r = regression_metrics(test[t], p[f"pred_{t}"])
        assert r["mae"] == pytest.approx(syn_run["metrics"][f"test_{t}_mae"], rel=1e-9)
        # test_mae_ (borderline flags) is measured as screening predicts: imputed telemetry, monotone in batch
        rs = regression_metrics(test[t], screening_predict(by_version.cascade, test)[f"pred_{t}"])
        assert by_version.test_mae_[t] == pytest.approx(rs["mae"], rel=1e-9)
    assert by_version.device_name_ == "Synthetic GPU" and by_version.feature_set_ == "full"


@pytest.mark.slow
def test_reference_dataset_carb_fast(env):
    """The shipped CPU data (no RAPL, no telemetry): energy is dropped, memory and latency fit."""
    from carb.commands.train import run_train

    uri = f"sqlite:///{env['dir']}/ref/mlflow.db"
    r = run_train(compose("train", [f"tracking.uri={uri}", f"paths.output_dir={env['dir']}/out",
                                    "model=carb_fast", "model.n_jobs=2", "evaluate.figures=false",
                                    "evaluate.lobo.enabled=false"]))
    assert r["targets"] == ["peak_memory_MB", "latency_ms"] and "energy_J" in r["dropped_targets"]
    assert r["registered_name"] == model_name(ok_rows(load_dataset("reference"))) and r["version"] == "1"
    assert r["registered_name"].startswith("carb-amd-epyc-")                  # name + fingerprint id
    m = r["metrics"]
    assert m["test_peak_memory_MB_r2"] > 0.95 and m["test_latency_ms_r2"] > 0.8
    assert m["test_latency_ms_r2"] > m["b1_latency_ms_r2"]  # CARB beats FLOPs-only
    assert "test_energy_J_mae" not in m and "b2_energy_J_r2" not in m
    assert "latency_ms" in r["table"] and "energy_J" not in r["table"]


def _cli(args, env=None, timeout=300):
    e = {**os.environ, "CARB_N_JOBS": "1", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", **(env or {})}
    return subprocess.run([sys.executable, "-m", "carb.train", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=e)


@pytest.mark.slow
def test_ablation_multirun_subprocess(env):
    uri = f"sqlite:///{env['dir']}/abl/mlflow.db"
    out = _cli(["-m", "features=full,no_util,arch_only", f"data.path={env['data']}", f"tracking.uri={uri}",
                f"hydra.sweep.dir={env['dir']}/sweep", "evaluate.lobo.enabled=false",
                "evaluate.figures=false", *TINY])
    assert out.returncode == 0, out.stderr[-2000:]
    tracking.configure(uri)
    exp = mlflow.get_experiment_by_name("carb-train")
    allruns = mlflow.search_runs([exp.experiment_id], output_format="list")
    parents = [r for r in allruns if r.data.tags.get("carb.sweep_parent") == "true"]
    runs = [r for r in allruns if r not in parents]
    # the sweep's parent run groups its three jobs in the UI
    assert len(parents) == 1 and parents[0].info.run_name.startswith("train/sweep/")
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in runs)
    assert sorted(r.data.tags["feature_set"] for r in runs) == ["arch_only", "full", "no_util"]
    assert all("test/latency_ms_r2" in r.data.metrics for r in runs)
    assert {r.info.run_name for r in runs} == {f"synthetic-gpu/{f}/carb_fast" for f in
                                              ("full", "no_util", "arch_only")}
    # one sweep: the UI groups its runs by the sweep tag; each run says which override it ran
    assert len({r.data.tags["sweep"] for r in runs}) == 1
    assert sorted(r.data.tags["sweep_overrides"].split()[0] for r in runs) == [
        "features=arch_only", "features=full", "features=no_util"]
    assert mlflow.get_experiment_by_name("carb-train").tags["mlflow.note.content"].startswith("Fitted cascades")
    # a sweep does not register (register=auto): its versions would only compete on noise
    assert tracking.model_versions("carb-synthetic-gpu") == []


def test_register_auto_only_outside_a_sweep():
    from carb.commands.train import should_register

    assert should_register("auto") and should_register(True) and not should_register(False)
    with pytest.raises(Exception, match="register: 'maybe' is not allowed"):
        should_register("maybe")


def test_too_few_rows_one_line_error(env):
    from carb.commands.train import run_train

    small = env["dir"] / "small.parquet"
    save_dataset(synthetic_dataset(12, seed=1, device_name="Synthetic GPU"), small)
    with pytest.raises(DatasetError, match="too few rows") as e:
        run_train(compose("train", [f"data.path={small}", f"tracking.uri={env['uri']}", *TINY]))
    assert "\n" not in str(e.value)


def test_thirty_rows_train_with_cross_conformal_intervals_and_skip_lines(env, capsys):
    """30 rows: the main fit works, each evaluation refit without rows for it says so in one line, nothing
    fails after the fit, and the 3-row calibration part gives way to cross-conformal intervals, finite."""
    from carb.commands.train import load_fit, run_train

    small = env["dir"] / "thirty.parquet"
    save_dataset(synthetic_dataset(30, seed=3, device_name="Synthetic GPU"), small)
    r = run_train(compose("train", [f"data.path={small}", f"tracking.uri={env['uri']}",
                                    f"paths.output_dir={env['dir']}/out", *TINY, "evaluate.sanity.enabled=false",
                                    "evaluate.figures=false", "evaluate.cross_conformal.folds=3",
                                    "evaluate.architecture_intervals.folds=2", "register=false"]))
    out = capsys.readouterr().out.replace("\n  ", " ")   # report lines wrapped at 120 columns, joined back
    for line in ("intervals are cross-conformal, 3-fold", "leave-one-batch-tier-out skipped:",
                 "extrapolation splits skipped:"):
        assert sum(line in s for s in out.splitlines()) == 1, (line, out)
    cascade = load_fit(Path(r["fit_folder"]))["cascade"]
    assert cascade.intervals_["method"].startswith("cross-conformal") and cascade.intervals_["rows"] == 25
    for t in TARGETS:
        assert np.isfinite(cascade.intervals_[t]["upper"]) and np.isfinite(r["metrics"][f"interval_test_{t}_width"])


def test_dataset_without_any_target_one_line_error(env):
    from carb.commands.train import run_train

    df = synthetic_dataset(60, seed=1, device_name="Synthetic GPU")
    df[list(TARGETS)] = np.nan
    path = env["dir"] / "notarget.parquet"
    save_dataset(df, path)
    with pytest.raises(DatasetError, match="no measured target") as e:
        run_train(compose("train", [f"data.path={path}", f"tracking.uri={env['uri']}", *TINY]))
    assert "\n" not in str(e.value)
    # from the command line: one line on stderr, exit 2, no traceback
    out = _cli([f"data.path={path}", f"tracking.uri={env['uri']}", f"hydra.run.dir={env['dir']}/run"])
    assert out.returncode == 2
    err = [line for line in out.stderr.splitlines() if line.startswith("carb-train: error:")]
    assert len(err) == 1 and "no measured target" in err[0] and "Traceback" not in out.stderr


def test_feature_set_naming_a_missing_column(env):
    from carb.commands.train import run_train

    with pytest.raises(DatasetError, match="no_such_col") as e:
        run_train(compose("train", over(env, *TINY, "features=arch_only",
                                        "features.columns=[batch_size,flops,no_such_col]",
                                        "register=false")))
    assert "\n" not in str(e.value) and "arch_only" in str(e.value)


def test_store_fault_after_the_fit_loses_nothing(env, tmp_path):
    """A damaged store fails after the fit: one line naming the saved fit; log_only logs it later."""
    from carb.commands.train import run_train
    from carb.errors import TrackingError

    bad = tmp_path / "broken" / "mlflow.db"
    bad.parent.mkdir()
    bad.write_bytes(b"this is not a sqlite database" * 100)
    over_bad = [f"data.path={env['data']}", f"tracking.uri=sqlite:///{bad}", f"paths.output_dir={tmp_path}/out",
                *NO_EVALUATION, *TINY]
    with pytest.raises(TrackingError) as e:
        run_train(compose("train", over_bad))
    msg = str(e.value)
    assert "\n" not in msg and "log_only=" in msg
    folder = msg.split("log_only=")[1].strip()
    assert (Path(folder) / "cascade.pkl").exists() and (Path(folder) / "fit.json").exists()
    good = f"sqlite:///{tmp_path}/good/mlflow.db"
    r = run_train(compose("train", [f"log_only={folder}", f"tracking.uri={good}", "evaluate.figures=false",
                                    "print_table=false"]))
    assert r["version"] == "1" and r["metrics"]["test_latency_ms_r2"] > 0.5
    tracking.configure(good)
    run = mlflow.get_run(r["run_id"])
    assert run.data.tags["fit_folder"] == folder and "test/latency_ms_mae" in run.data.metrics
    with pytest.raises(Exception, match="is not a saved fit"):
        run_train(compose("train", [f"log_only={tmp_path}", f"tracking.uri={good}"]))


def test_logged_interval_summary_gives_bounds_not_log_ratios():
    """intervals.json: per target the pooled bounds, each regime's and the outside calibration's row
    count and bounds; none of the stored log-ratios."""
    from carb.commands.train import interval_summary

    r = list(np.linspace(-0.3, 0.3, 40))
    entry = {"lower": -0.27, "upper": 0.27, "n": 40, "coverage": 0.9, "log_ratios": r,
             "groups": {"launch": r, "device": [v / 10 for v in r]}, "group_rule": "x",
             "outside": {"lower": -0.5, "upper": 0.6, "n": 90, "log_ratios": r, "by_split": {"batch": r}}}
    s = interval_summary(entry)
    assert "log_ratios" not in s and s["group_rule"] == "x" and s["outside"] == {"n": 90, "lower": -0.5, "upper": 0.6}
    assert s["groups"]["launch"]["n"] == 40 and s["groups"]["device"]["upper"] == pytest.approx(s["groups"]["launch"]["upper"] / 10)
    import json
    json.dumps(s)
