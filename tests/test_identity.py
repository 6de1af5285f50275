"""A network's identity is one concept owned by :mod:`carb.design.identity`: no module outside
:mod:`carb.design` names a ResNet column as a string (an explicit allow-list says why where one still does),
and the identity functions give the keys, encodings and kinds the layers above read."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb.design import identity

CARB = Path(__file__).resolve().parents[1] / "carb"
#: The ResNet columns the issue names (issue 43, item 3), and the stage layout.
RESNET_COLUMNS = {"block", "depth", "width_mult", "early_downsample", "inner_mult", "stages"}
#: Modules outside carb.design that may still name a ResNet column, each with its reason.
ALLOWED: dict[str, str] = {}


def _literals(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every string constant in ``path`` that is exactly a ResNet column name."""
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in RESNET_COLUMNS]


def _offenders() -> dict[str, list[tuple[int, str]]]:
    out = {}
    for p in sorted(CARB.rglob("*.py")):
        rel = p.relative_to(CARB).as_posix()
        if rel.startswith("design/") or rel.startswith("conf/"):
            continue
        found = _literals(p)
        if found:
            out[rel] = found
    return out


def test_no_resnet_column_literal_outside_design():
    offenders = {k: v for k, v in _offenders().items() if k not in ALLOWED}
    assert not offenders, ("ResNet column names outside carb.design (read them through carb.design.identity): "
                           + "; ".join(f"{k}: {v}" for k, v in offenders.items()))


def test_allow_list_is_current():
    found = _offenders()
    stale = [k for k in ALLOWED if k not in found]
    assert not stale, f"allow-listed modules no longer name a ResNet column; drop them from ALLOWED: {stale}"


def test_the_check_sees_a_literal(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('x = df["depth"]\ny = "depth of field"\n')
    assert _literals(p) == [(1, "depth")]


def test_kind_of_frames():
    assert identity.kind_of(pd.DataFrame(columns=["block", "depth"])) is identity.RESNET
    assert identity.kind_of(pd.DataFrame(columns=["model_name", "family"])) is identity.ZOO
    assert identity.kind_of(pd.DataFrame(columns=["model_name", "block"])) is identity.RESNET
    assert identity.kind_of(pd.DataFrame(columns=["flops"])) is None
    assert identity.has_resnet_structure({"block": "basic", "depth": 20})
    assert not identity.has_resnet_structure({"block": "basic"})


def test_architecture_keys_resnet_and_zoo():
    X = pd.DataFrame({"block": ["basic", "bottleneck"], "depth": [20.0, 50], "width_mult": [0.5, 1],
                      "early_downsample": [True, "false"], "input_size": [32, 224]})
    assert identity.architecture_keys(X) == ["basic|20|0.5|1.0|None|True", "bottleneck|50|1.0|1.0|None|False"]
    Z = pd.DataFrame({"model_name": ["tv:mobilenet_v2"], "family": ["mobilenet"]})
    assert identity.architecture_keys(Z) == ["family:mobilenet"]
    assert identity.network_keys(Z) == ["model:tv:mobilenet_v2"]


def test_encode_category_and_indicators():
    enc = identity.encode_category(identity.BLOCK, ["basic", "bottleneck"])
    assert list(enc) == ["block_bottleneck"] and enc["block_bottleneck"].tolist() == [0.0, 1.0]
    assert identity.encode_category(identity.STEM, [True, False])[identity.STEM].tolist() == [1.0, 0.0]
    F = pd.DataFrame({"block": ["bottleneck", "basic", None], "early_downsample": ["True", "0", None]})
    ind = identity.indicator_columns(F)
    assert [v.tolist() for v in ind] == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert [v.tolist() for v in identity.indicator_columns(pd.DataFrame({"x": [1, 2]}))] == [[0, 0], [0, 0]]


def test_resnet_knobs_and_types():
    row = identity.resnet_knobs(depth=50, block="bottleneck")
    assert list(row) == ["block", "depth"]
    with pytest.raises(TypeError, match="not ResNet identity columns"):
        identity.resnet_knobs(model_name="x")
    assert identity.knob_type("early_downsample") == "bool" and identity.knob_type("batch_size") == "int"
    assert identity.knob_type("flops") is None
    assert set(identity.RESNET.numeric) == {"depth", "width_mult", "inner_mult"}
    assert np.all([c in identity.ALL_KNOBS for c in ("model_name", "block", "precision")])


def test_every_kind_is_in_the_domain_lists():
    """A new kind is an entry in carb.design.identity: its categorical, numeric and unit columns must be in the
    lists the domain, the encoding and telemetry read, or this fails."""
    for kind in identity.KINDS:
        assert set(kind.categories) <= set(identity.CATEGORICAL_KNOBS), kind.name
        assert set(kind.numeric) <= set(identity.NUMERIC_KNOBS), kind.name
        assert kind.unit is None or kind.unit in identity.CATEGORICAL_KNOBS, kind.name
        assert all(identity.knob_type(c) for c in kind.knobs), kind.name
        assert set(kind.display) <= set(kind.knobs) and set(kind.display_varying) <= set(kind.knobs), kind.name
    assert set(identity.RUN_KNOBS) <= set(identity.NUMERIC_KNOBS) | set(identity.CATEGORICAL_KNOBS)


def test_model_layers_read_the_identity_lists():
    """The domain, the encoding and the screen table take their column lists from carb.design.identity."""
    from carb.commands.screen_table import FILE_KNOBS, KNOB_HEADERS
    from carb.model import domain, encoding

    assert domain.ARCH_KNOBS == identity.ARCH_COLUMNS and domain.CATEGORICAL_KNOBS == identity.CATEGORICAL_KNOBS
    assert {c for c in encoding.CATEGORIES if c != "precision"} == set(identity.categorical_identity())
    assert KNOB_HEADERS == identity.DISPLAY_HEADERS and FILE_KNOBS[-1] == "config_id"
    X = pd.DataFrame({"block": ["bottleneck", "basic"], "early_downsample": [False, True]})
    enc = encoding.encode(X, ["block", "early_downsample"])
    assert enc.columns.tolist() == ["block_bottleneck", "early_downsample"]
    assert enc.to_numpy().tolist() == [[1.0, 0.0], [0.0, 1.0]]
