"""carb-promote's selection rules (issue 11, honest selection): only versions evaluated on the same
dataset and split compete, and a champion is not replaced by a version within the tie tolerance."""
from __future__ import annotations

import pytest

from carb.commands import promote
from carb.commands.cli import compose


def v(version: int, mae: float, digest: str = "d1", split: str = "seed=0") -> dict:
    return {"version": str(version), "run_id": f"r{version}", "metrics": {"val_latency_ms_mae": mae},
            "aliases": [], "tags": {"dataset_digest": digest, "split": split}}


def test_only_versions_on_the_newest_versions_data_compete():
    versions = [v(1, 0.1, "small-32-rows"), v(2, 5.0), v(3, 4.0)]
    pool, skipped = promote.comparable(versions, across=False)
    assert [x["version"] for x in pool] == ["2", "3"] and [x["version"] for x in skipped] == ["1"]
    assert len(promote.comparable(versions, across=True)[0]) == 3
    assert promote.comparable([v(1, 1.0, split="seed=1"), v(2, 1.0)], across=False)[0][0]["version"] == "2"


@pytest.fixture
def registry(monkeypatch):
    state = {"versions": [], "aliases": {}}
    monkeypatch.setattr(promote.tracking, "configure", lambda *a, **k: None)
    monkeypatch.setattr(promote.tracking, "model_versions", lambda name: state["versions"])
    monkeypatch.setattr(promote.tracking, "get_alias", lambda name, alias: state["aliases"].get(alias))
    monkeypatch.setattr(promote.tracking, "set_alias", lambda name, alias, ver: state["aliases"].__setitem__(alias, ver))
    return state


def _promote(*extra):
    return promote.run_promote(compose("promote", ["promote.name=carb-x", "promote.metric=val_latency_ms_mae", *extra]))


def test_tie_tolerance_keeps_the_champion(registry, capsys):
    registry["versions"] = [v(1, 10.0), v(2, 10.0 - 1e-14)]
    registry["aliases"]["champion"] = "1"
    r = _promote()
    assert not r["changed"] and registry["aliases"]["champion"] == "1"
    assert "within the tie tolerance" in capsys.readouterr().out
    registry["versions"].append(v(3, 8.0))
    r = _promote()
    assert r["changed"] and registry["aliases"] == {"champion": "3", "previous": "1"}


def test_a_better_score_on_other_data_does_not_win(registry, capsys):
    registry["versions"] = [v(1, 0.01, "tiny"), v(2, 3.0), v(3, 2.0)]
    r = _promote()
    out = capsys.readouterr().out
    assert r["champion"] == "3" and "skipped 1 evaluated on other data" in out
    r = _promote("promote.across_datasets=true")
    assert r["champion"] == "1"


def test_a_version_on_other_data_never_replaces_the_champion(registry):
    """Issue 33 item 1: the champion's evaluation data is the yardstick; a newer version evaluated on
    other data is refused in one line naming both datasets, unless promote.across_datasets=true."""
    from carb.errors import ModelError

    registry["versions"] = [v(1, 1.40, "full"), v(2, 0.5, "subset-40")]
    registry["aliases"]["champion"] = "1"
    with pytest.raises(ModelError) as e:
        _promote()
    msg = str(e.value)
    assert "\n" not in msg and "digest full" in msg and "digest subset-40" in msg
    assert "promote.across_datasets=true" in msg and registry["aliases"] == {"champion": "1"}
    registry["versions"].append(v(3, 1.2, "full"))   # a newer one on the champion's data competes
    r = _promote()
    assert r["champion"] == "3" and registry["aliases"] == {"champion": "3", "previous": "1"}
    assert _promote("promote.across_datasets=true")["champion"] == "2"


@pytest.mark.slow
def test_two_trainings_on_different_data_keep_the_full_data_champion(tmp_path):
    """Two real (tiny) trainings: on a full dataset, promoted; then on a 40-row subset of it. Promote
    refuses the subset's version (exit 2, one line) and the champion stays."""
    import subprocess
    import sys
    from pathlib import Path

    from synthetic import synthetic_dataset

    from carb import tracking
    from carb.commands.train import run_train
    from carb.data.io import save_dataset

    full = synthetic_dataset(160, seed=3, device_name="Synthetic GPU")
    save_dataset(full, tmp_path / "full.parquet")
    save_dataset(full.head(40), tmp_path / "small.parquet")
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    tiny = ["model=carb_fast", "model.specialists.xgb.n_estimators=10", "model.specialists.lgbm.n_estimators=10",
            "model.specialists.et.n_estimators=5", "model.oof_folds=2", "model.probe_estimators=10",
            "model.n_jobs=1", "print_table=false", "evaluate.figures=false", "evaluate.lobo.enabled=false",
            "evaluate.extrapolation.enabled=false", f"tracking.uri={uri}", f"paths.output_dir={tmp_path}/out"]
    first = run_train(compose("train", [f"data.path={tmp_path}/full.parquet", *tiny]))
    name = first["registered_name"]
    promote.run_promote(compose("promote", [f"promote.name={name}", f"tracking.uri={uri}",
                                            "promote.metric=val_latency_ms_mae"]))
    run_train(compose("train", [f"data.path={tmp_path}/small.parquet", *tiny]))
    r = subprocess.run([str(Path(sys.executable).parent / "carb-promote"), f"promote.name={name}",
                        f"tracking.uri={uri}", f"hydra.run.dir={tmp_path}/run"],
                       capture_output=True, text=True, timeout=240)
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("carb-promote: error:")]
    assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "full.parquet" in err[0] and "small.parquet" in err[0] and "promote.across_datasets=true" in err[0]
    tracking.configure(uri)
    assert tracking.get_alias(name, "champion") == first["version"]
