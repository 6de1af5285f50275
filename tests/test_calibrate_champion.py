"""carb-calibrate's alias: a model calibrated on measured rows replaces a zero-shot (k=0) champion of the same
registered model, never a champion that itself had measured rows (carb-promote moves that one)."""
from __future__ import annotations

import pytest
from registry_store import one_model_store

from carb import tracking
from carb.commands.calibrate import place_alias


@pytest.fixture
def store(tmp_path):
    """A fresh sqlite store with one registered model; ``add(**tags)`` registers the next version with the
    version tags calibrate logs (``k``, ``zero_shot``), no model behind it (the alias code reads tags only)."""
    name = "carb-champion-test"
    _, add = one_model_store(tmp_path, name, "calibrate")
    return name, lambda **tags: add(tags=tags)


def test_calibrated_version_replaces_a_zero_shot_champion(store):
    name, add = store
    v1 = add(k="0", zero_shot="probe")
    tracking.set_alias(name, "champion", v1)                 # what carb-calibrate k=0 did
    v2 = add(k="10")
    moved, said = place_alias(name, "champion", v2)
    assert moved and tracking.get_alias(name, "champion") == v2
    assert f"zero-shot version {v1}" in said and "\n" not in said


def test_a_champion_with_measured_rows_stays(store):
    name, add = store
    v1 = add(k="10")
    tracking.set_alias(name, "champion", v1)
    v2 = add(k="12")
    moved, said = place_alias(name, "champion", v2)
    assert not moved and tracking.get_alias(name, "champion") == v1
    assert f"left on version {v1}" in said and "carb-promote" in said
    v3 = add()                                               # a trained version (no k tag) is not zero-shot
    tracking.set_alias(name, "champion", v3)
    assert not place_alias(name, "champion", add(k="5"))[0] and tracking.get_alias(name, "champion") == v3


def test_first_version_takes_the_alias(store):
    name, add = store
    v1 = add(k="10")
    assert place_alias(name, "champion", v1) == (True, " as @champion")
    assert tracking.get_alias(name, "champion") == v1
