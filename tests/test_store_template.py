"""A new SQLite store starts as a copy of this MLflow version's empty store (carb.tracking.store.seed_from_template):
the template holds the schema and no experiment, a store made from it works like a migrated one, and a template
MLflow refuses is replaced by the slow way, never an error."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from carb.tracking import store


@pytest.fixture
def real_init(_stores_from_a_template, monkeypatch, tmp_path):
    """The product's own store set-up (not the test session's copy), with a cache of this test's own."""
    monkeypatch.setenv("CARB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(store, "_init_sqlite", _stores_from_a_template.real)
    return _stores_from_a_template.real


def open_store(db: Path) -> str:
    """Point MLflow at ``db`` (CARB's set-up) and make the carb-train experiment; returns its id."""
    store._INITIALIZED.discard(str(db))
    store.configure(f"sqlite:///{db}")
    return store.experiment_id("carb-train")


def experiments(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT experiment_id, name, lifecycle_stage FROM experiments ORDER BY 1").fetchall()


def test_first_store_leaves_a_template_and_the_next_starts_from_it(real_init, tmp_path, monkeypatch):
    first = tmp_path / "a" / "mlflow.db"
    assert open_store(first) == "1"
    tpl = store.template_path()
    assert tpl.is_file() and tpl.parent == tmp_path / "cache"
    assert experiments(tpl) == []                      # the schema only: no experiment, no path of the first store
    with sqlite3.connect(tpl) as c:
        assert c.execute("SELECT count(*) FROM alembic_version").fetchone()[0] == 1

    calls = []
    real_seed = store.seed_from_template
    monkeypatch.setattr(store, "seed_from_template", lambda db: calls.append(real_seed(db)) or calls[-1])
    second = tmp_path / "b" / "mlflow.db"
    assert open_store(second) == "1"
    assert calls == [True]
    # the same state as a migrated store: Default made by MLflow for this store and hidden, carb-train active
    assert experiments(second) == experiments(first) == [(0, "Default", "deleted"), (1, "carb-train", "active")]
    client = store.mlflow_module().MlflowClient(f"sqlite:///{second}")
    run = client.create_run("1")
    client.log_metric(run.info.run_id, "latency_ms", 1.5)
    assert client.get_run(run.info.run_id).data.metrics == {"latency_ms": 1.5}


def test_an_existing_store_is_never_made_a_template(real_init, tmp_path):
    db = tmp_path / "a" / "mlflow.db"
    open_store(db)
    store.template_path().unlink()
    open_store(db)                                     # opened again: not fresh, so not copied
    assert not store.template_path().exists()


def test_a_template_mlflow_refuses_falls_back_to_the_migration(real_init, tmp_path):
    tpl = store.template_path()
    tpl.parent.mkdir(parents=True)
    tpl.write_bytes(b"not a database" * 100)
    db = tmp_path / "a" / "mlflow.db"
    assert open_store(db) == "1"
    assert experiments(db)[-1] == (1, "carb-train", "active")
    assert experiments(tpl) == []                      # replaced by a good one


def test_no_template_where_the_cache_cannot_be_written(real_init, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("CARB_CACHE", str(blocker / "cache"))   # under a file: cannot be made
    db = tmp_path / "a" / "mlflow.db"
    assert open_store(db) == "1"
    assert not store.template_path().exists()


def test_a_template_of_another_schema_revision_is_not_used(real_init, tmp_path):
    open_store(tmp_path / "a" / "mlflow.db")
    tpl = store.template_path()
    with sqlite3.connect(tpl) as c:
        c.execute("UPDATE alembic_version SET version_num = 'older'")
    assert not store.seed_from_template(tmp_path / "b" / "mlflow.db")
    assert not (tmp_path / "b" / "mlflow.db").exists() and not tpl.exists()
