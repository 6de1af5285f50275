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
