"""A network's identity, one concept: which kind of network a row describes, the columns that say which
network it is, a stable key per network, the categorical identity columns encoded as numbers, and the
columns a table shows.

Two kinds today (:data:`KINDS`): a ResNet knob set (:data:`RESNET`: ``block``, ``depth``, ``width_mult``,
``inner_mult``, ``stages``, ``early_downsample``; its static features come from the ResNet walk,
:mod:`carb.design.features`) and a named zoo model (:data:`ZOO`: ``model_name`` with its ``family``; its
features come from the traced layer table, :mod:`carb.design.zoo_features`). Both share the run knobs
(:data:`RUN_KNOBS`: ``input_size``, ``batch_size``, ``precision``). A frame's kind follows from its columns
(:func:`kind_of`: a ``block`` column makes ResNet rows, a ``model_name`` column without one zoo rows).

Every layer above :mod:`carb.design` (model encoding, domain and telemetry, importers, screening, analysis)
reads ResNet columns only through this module: the column lists (:data:`ARCH_COLUMNS`,
:data:`CATEGORICAL_KNOBS`, :data:`NUMERIC_KNOBS`, :data:`DISPLAY_HEADERS`, ...) and the functions
(:func:`architecture_keys`, :func:`encode_category`, :func:`category_values`, :func:`indicator_columns`).
``tests/test_identity.py`` fails when a ResNet column is named as a string anywhere else outside
:mod:`carb.design`. A list whose order decides a result (a tree's tie-breaks, a reason's order, a table's
columns) is kept here in the order it always had.

Imports nothing of CARB but :mod:`carb.design.arch` (numpy and pandas inside functions).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from carb.design.arch import BLOCKS, KNOB_DEFAULTS, KNOBS, to_bool

#: The knobs every kind shares: how a network runs, not which network it is.
RUN_KNOBS: tuple[str, ...] = ("input_size", "batch_size", "precision")
#: Column type of each identity column: ``str``, ``int``, ``float`` or ``bool``.
ColumnType = str


@dataclass(frozen=True)
class NetworkKind:
    """One kind of network a row can describe.

    ``name``: ``resnet`` | ``zoo``; ``marker``: the column whose presence says a frame holds this kind;
    ``identity``: the columns that name the network (input size, batch and precision apart), in key order;
    ``types``: each identity column's type (:data:`ColumnType`); ``categories``: allowed values of its
    categorical identity columns (first value = the encoding's reference level); ``unit``: the column whose
    value is the architecture unit of :func:`architecture_keys` (None: the identity columns themselves);
    ``display``: the terminal headers of the knob columns a table shows, in order; ``display_varying``: those
    shown only where they tell the shown rows apart."""

    name: str
    marker: str
    identity: tuple[str, ...]
    types: Mapping[str, ColumnType]
    categories: Mapping[str, tuple] = field(default_factory=dict)
    unit: str | None = None
    display: Mapping[str, str] = field(default_factory=dict)
    display_varying: Mapping[str, str] = field(default_factory=dict)

    @property
    def numeric(self) -> tuple[str, ...]:
        """The identity columns that are numbers (int or float), in identity order."""
        return tuple(c for c in self.identity if self.types.get(c) in ("int", "float"))

    @property
    def knobs(self) -> tuple[str, ...]:
        """Every knob column of a row of this kind: the identity columns, then :data:`RUN_KNOBS`."""
        return (*self.identity, *RUN_KNOBS)


#: A ResNet knob set (:class:`carb.design.arch.ArchConfig`).
RESNET = NetworkKind(
    name="resnet", marker="block",
    identity=("block", "depth", "width_mult", "inner_mult", "stages", "early_downsample"),
    types={"block": "str", "depth": "int", "width_mult": "float", "inner_mult": "float", "stages": "str",
           "early_downsample": "bool"},
    categories={"block": BLOCKS, "early_downsample": (False, True)},
    display={"block": "block", "depth": "depth", "width_mult": "width", "input_size": "input",
             "batch_size": "batch", "precision": "prec", "early_downsample": "early_ds"},
    display_varying={"stages": "stages", "inner_mult": "inner"})
#: A named zoo model (:class:`carb.design.zoo_space.ZooConfig`); its architecture unit is its family.
ZOO = NetworkKind(name="zoo", marker="model_name", identity=("model_name",), types={"model_name": "str"},
                  unit="family", display={"model_name": "model", "input_size": "input", "batch_size": "batch",
                                          "precision": "prec"})
#: Every kind, the first whose :func:`kind_of` test passes wins.
KINDS: tuple[NetworkKind, ...] = (RESNET, ZOO)

#: The columns that make a ResNet's structure (an architecture is seen whatever its input size, batch or
#: precision), in key order.
ARCH_COLUMNS: tuple[str, ...] = RESNET.identity
#: ResNet identity columns of a configuration record, in the record's (and :class:`ArchConfig`'s) order.
ARCH_RECORD: tuple[str, ...] = tuple(k for k in KNOBS if k in RESNET.identity)
#: Knobs whose seen values a domain lists (a value never seen is outside): ResNet's categorical columns, the
#: precision, the zoo's family; in the order a domain has always listed them.
CATEGORICAL_KNOBS: tuple[str, ...] = ("block", "precision", "early_downsample", "family")
#: Knobs whose [min, max] a domain keeps, in the order it has always kept them.
NUMERIC_KNOBS: tuple[str, ...] = ("depth", "width_mult", "input_size", "batch_size", "inner_mult")
#: Knob columns of every kind, ResNet first (what a screening file leads with).
ALL_KNOBS: tuple[str, ...] = tuple(dict.fromkeys(c for k in KINDS for c in k.knobs))
#: Terminal headers of the knob columns a screening table shows, and those shown only where they vary.
DISPLAY_HEADERS: dict[str, str] = dict(RESNET.display)
VARYING_HEADERS: dict[str, str] = dict(RESNET.display_varying)
#: The column saying a row's network is a ResNet knob set (present: ResNet rows).
RESNET_MARKER: str = RESNET.marker
#: The numeric depth column (ResNet-only analyses: depth tiers, depth views).
DEPTH: str = "depth"
#: The block-type column (ResNet-only analyses: one group per block type).
BLOCK: str = "block"
#: The stem column (ResNet-only analyses).
STEM: str = "early_downsample"
#: The width multiplier column (ResNet-only analyses).
WIDTH: str = "width_mult"
#: The bottleneck's inner width multiplier column.
INNER: str = "inner_mult"
#: The blocks-per-stage layout column (implied by the block type and the depth for the named layouts).
STAGES: str = "stages"


def columns_of(frame: Any) -> set[str]:
    """The column names of a frame, a mapping or a sequence of names."""
    cols = getattr(frame, "columns", frame)
    return set(cols)


def is_resnet(frame: Any) -> bool:
    """Whether ``frame`` (a DataFrame, a mapping or column names) holds ResNet rows: it has the
    :data:`RESNET` marker column (``block``)."""
    return RESNET.marker in columns_of(frame)


def is_zoo(frame: Any) -> bool:
    """Whether ``frame`` holds zoo rows: a ``model_name`` column and no ResNet marker."""
    cols = columns_of(frame)
    return ZOO.marker in cols and RESNET.marker not in cols


def kind_of(frame: Any) -> NetworkKind | None:
    """The kind of network the rows of ``frame`` describe (:data:`RESNET` or :data:`ZOO`), None for neither."""
    if is_resnet(frame):
        return RESNET
    return ZOO if is_zoo(frame) else None


def has_resnet_structure(frame: Any) -> bool:
    """Whether ``frame`` names ResNet structures: its block type and its depth (what an architecture key
    of a ResNet needs)."""
    cols = columns_of(frame)
    return RESNET.marker in cols and DEPTH in cols


def column_type(col: str) -> ColumnType | None:
    """The type of an identity column of any kind (``str``/``int``/``float``/``bool``), None for others."""
    for k in KINDS:
        if col in k.types:
            return k.types[col]
    return None


def is_bool_column(col: str) -> bool:
    """Whether ``col`` is a boolean identity column (ResNet's stem)."""
    return column_type(col) == "bool"


def category_values(col: str, values: Iterable[Any]) -> list[Any]:
    """Plain values of a categorical column: bools (:func:`carb.design.arch.to_bool`) for a boolean
    identity column, strings otherwise."""
    if is_bool_column(col):
        return [to_bool(v) for v in values]
    return [str(v) for v in values]


def norm_value(col: str, v: Any) -> str:
    """One identity value as its key text: a missing one as the knob's default (``None`` without one),
    bools as ``True``/``False``, ints as ``20``, floats as ``0.5``, the rest as ``str``."""
    import numpy as np
    import pandas as pd

    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
        v = KNOB_DEFAULTS.get(col)
        if v is None:
            return "None"
    t = column_type(col)
    if t == "bool":
        return str(to_bool(v))
    if t == "int":
        return str(int(float(v)))
    if t == "float":
        return str(float(v))
    return str(v)


def architecture_keys(X: Any) -> list[str]:
    """One key per row naming its network's architecture unit, for the n rows of a frame ``X``: a ResNet's
    identity columns (:data:`ARCH_COLUMNS`, absent or missing ones as the knob's default) joined by ``|``,
    ``basic|20|0.5|1.0|None|True``; a zoo row's family, ``family:mobilenet`` (architecture folds then hold
    out whole families). In a combined frame (:func:`row_kinds`) each row takes its own kind's key.
    Returns a list of n strings."""
    if is_zoo(X) and ZOO.unit in columns_of(X):
        return [f"{ZOO.unit}:" + str(f) for f in X[ZOO.unit].astype(str)]
    cols = [[norm_value(c, v) for v in (X[c].astype(object).tolist() if c in X else [None] * len(X))]
            for c in ARCH_COLUMNS]
    keys = ["|".join(parts) for parts in zip(*cols)]
    return _zoo_rows_keyed(X, keys, ZOO.unit, f"{ZOO.unit}:")


def _zoo_rows_keyed(X: Any, keys: list[str], column: str | None, prefix: str) -> list[str]:
    """``keys`` (n) with the zoo rows of a combined frame (:func:`row_kinds`) keyed by ``prefix`` + their
    ``column`` instead (unchanged where ``X`` has no such column or no ResNet marker)."""
    if column is None or column not in columns_of(X) or not is_resnet(X):
        return keys
    zoo = row_kinds(X) == ZOO.name
    if not zoo.any():
        return keys
    names = X[column].astype(str).tolist()
    return [prefix + names[i] if z else k for i, (k, z) in enumerate(zip(keys, zoo))]


def network_keys(X: Any) -> list[str]:
    """A stable string per network of the n rows of ``X`` (input size, batch and precision apart): the
    ResNet key of :func:`architecture_keys`, or ``model:<model_name>`` for a zoo row."""
    if is_zoo(X):
        return [f"model:{m}" for m in X[ZOO.marker].astype(str)]
    return _zoo_rows_keyed(X, architecture_keys(X), ZOO.marker, "model:")


def categorical_identity() -> dict[str, tuple]:
    """Allowed values of every kind's categorical identity columns (``{column: values}``)."""
    return {c: v for k in KINDS for c, v in k.categories.items()}


def encode_category(col: str, values: Sequence[Any]) -> dict[str, Any]:
    """The numeric columns a categorical identity column ``col`` becomes, for the distinct ``values``
    (already checked against the allowed ones): a boolean column as 0/1 under its own name; a text column
    as one 0/1 column ``<col>_<value>`` per allowed value after the first (``block_bottleneck``). Returns
    ``{name: float array, shape (len(values),)}``."""
    import numpy as np

    if is_bool_column(col):
        return {col: np.array([bool(u) for u in values], dtype=float)}
    cats = categorical_identity()[col]
    return {f"{col}_{c}": np.array([u == c for u in values], dtype=float) for c in cats[1:]}


def indicator_columns(F: Any) -> list[Any]:
    """The 0/1 indicator columns of ResNet's categorical identity columns for the m rows of ``F``
    (:func:`encode_category`'s columns, in :data:`RESNET`'s order: bottleneck block, then the early stem),
    each a float array (m,): an absent column is all 0 (the reference level), a value that is not the
    level (or not a bool) is 0."""
    import numpy as np
    import pandas as pd

    out = []
    for col, cats in RESNET.categories.items():
        if col not in columns_of(F):
            out += [np.zeros(len(F))] * (1 if is_bool_column(col) else len(cats) - 1)
            continue
        s = F[col]
        if is_bool_column(col):
            if pd.api.types.is_bool_dtype(s.dtype) and not s.hasnans:
                out.append(s.to_numpy(dtype=bool).astype(float))
            else:
                out.append(s.astype(str).str.lower().isin(("true", "1")).to_numpy().astype(float))
            continue
        text = s.astype(str).to_numpy()
        out += [(text == c).astype(float) for c in cats[1:]]
    return out


#: Type of each run knob (:data:`RUN_KNOBS`), as :data:`NetworkKind.types` gives the identity columns'.
RUN_TYPES: dict[str, ColumnType] = {"input_size": "int", "batch_size": "int", "precision": "str"}


def knob_type(col: str) -> ColumnType | None:
    """The type of any knob column (identity or run knob): ``str``/``int``/``float``/``bool``; None for others."""
    return RUN_TYPES.get(col) or column_type(col)


def resnet_knobs(**values: Any) -> dict[str, Any]:
    """``{column: value}`` of a ResNet's identity columns from keyword arguments named like
    :class:`~carb.design.arch.ArchConfig`'s fields (scalars or arrays, e.g. ``block=..., depth=...``), in
    :data:`ARCH_COLUMNS` order; what an importer that maps a model name to a ResNet writes. Raises
    ``TypeError`` for a name that is not a ResNet identity column."""
    unknown = sorted(set(values) - set(RESNET.identity))
    if unknown:
        raise TypeError(f"not ResNet identity columns: {unknown}; allowed: {list(RESNET.identity)}")
    return {c: values[c] for c in RESNET.identity if c in values}


def text_categories() -> dict[str, tuple]:
    """Allowed values of every kind's text (non-boolean) categorical identity columns (``block``)."""
    return {c: v for c, v in categorical_identity().items() if not is_bool_column(c)}


def row_kinds(frame: Any) -> Any:
    """The kind of each of the n rows of ``frame``, an object array (n,) of :data:`NetworkKind` names: a row
    whose ResNet marker (``block``) is set is ``resnet``, one with a ``model_name`` and no marker ``zoo``,
    any other ``""`` (neither). A frame holding one kind gives that kind on every row; a combined dataset
    (ResNet and zoo rows of one device) gives each row its own."""
    import numpy as np

    n = len(frame)
    cols = columns_of(frame)
    res = frame[RESNET.marker].notna().to_numpy() if RESNET.marker in cols else np.zeros(n, dtype=bool)
    zoo = (frame[ZOO.marker].notna().to_numpy() if ZOO.marker in cols else np.zeros(n, dtype=bool)) & ~res
    out = np.full(n, "", dtype=object)
    out[res], out[zoo] = RESNET.name, ZOO.name
    return out


def kinds_in(frame: Any) -> tuple[str, ...]:
    """The kinds (:data:`NetworkKind` names, in :data:`KINDS` order) the rows of ``frame`` hold: one for a
    frame of one kind, ``("resnet", "zoo")`` for a combined dataset, () for an empty frame or rows of
    neither kind."""
    present = set(row_kinds(frame).tolist())
    return tuple(k.name for k in KINDS if k.name in present)


def input_kind(frame: Any) -> str:
    """What a model fitted on ``frame`` takes: ``"resnet"`` (knob rows), ``"zoo"`` (named networks) or
    ``"mixed"`` (a combined dataset: rows of either kind, each featurized from its own layer table). The
    one place the cascade's input kind is decided."""
    kinds = kinds_in(frame)
    if len(kinds) > 1:
        return "mixed"
    return ZOO.name if kinds == (ZOO.name,) else RESNET.name


def model_input_kind(model: Any) -> str:
    """A fitted model's input kind (its ``input_kind_``: ``resnet``, ``zoo`` or ``mixed``; ``resnet`` for a
    model saved before the attribute existed)."""
    return str(getattr(model, "input_kind_", RESNET.name) or RESNET.name)


def kinds_of_input(kind: str) -> tuple[str, ...]:
    """The kinds of rows (:data:`NetworkKind` names, in :data:`KINDS` order) a model of input kind ``kind``
    (:func:`input_kind`: ``resnet``, ``zoo`` or ``mixed``) was fitted on and predicts: ``("resnet", "zoo")``
    for a combined model."""
    if kind == "mixed":
        return tuple(k.name for k in KINDS)
    return (ZOO.name,) if kind == ZOO.name else (RESNET.name,)


def architecture_unit(kind: str) -> str:
    """What an architecture fold of a model of input kind ``kind`` holds out, as the intervals record it
    (:func:`carb.model.intervals.architecture_entries`): ``family`` where its rows include zoo rows (a zoo or
    combined model: a zoo row's architecture key is its family, and a family never measured is outside the
    domain by its family alone, so the family calibration must reach it), else ``architecture``."""
    return ZOO.unit if ZOO.name in kinds_of_input(kind) else "architecture"


def naming_columns(kind: str) -> tuple[str, ...]:
    """The columns a model of input kind ``kind`` (:func:`input_kind`) reads, beyond its features, to know
    which networks its rows are: a zoo or mixed model the ``model_name`` (its layer table comes from it); a
    ResNet model none (its knobs are features)."""
    return () if kind == RESNET.name else (ZOO.marker,)


def uses_layer_table(frame: Any) -> bool:
    """Whether a fit on ``frame`` reads every network through its layer table (zoo rows present: their
    features are the tracer's, so a ResNet row beside them takes its walk's layer table too) rather
    than the ResNet knobs and :data:`carb.design.features.STATIC_FEATURES`."""
    return ZOO.name in kinds_in(frame)
