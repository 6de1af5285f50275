"""What :class:`carb.model.cascade.CarbCascade` does with its raw frames before any stage fits: checking
and preparing them, the internal stratified validation split, which targets and feature columns a fit can
use (dropping unmeasured ones with a warning), and which device the rows come from.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from carb.data.schema import INTERACTION_FEATURES, TARGETS
from carb.data.tiers import strata_key
from carb.design.identity import DEPTH
from carb.errors import DatasetError
from carb.model.encoding import INTERACTION_INPUTS, add_interactions

Frames = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]

#: Fewest rows a fit without validation rows takes (its internal validation split needs them); the
#: evaluation refits of ``carb-train`` skip a fold or split with fewer training rows.
MIN_FIT_ROWS = 10


def targets_frame(y) -> pd.DataFrame:
    """``y`` (DataFrame or Series of target columns among :data:`TARGETS`) as a float DataFrame
    (non-numeric values -> NaN)."""
    if isinstance(y, pd.Series):
        y = y.to_frame()
    if not isinstance(y, pd.DataFrame):
        raise DatasetError(f"y must be a DataFrame with target columns among {list(TARGETS)}")
    unknown = [c for c in y.columns if c not in TARGETS]
    if unknown:
        raise DatasetError(f"y has unknown target column(s) {unknown}; allowed: {list(TARGETS)}")
    return y.apply(pd.to_numeric, errors="coerce").astype(float)


def raw_inputs(features: Sequence[str]) -> list[str]:
    """The raw columns the features need: each non-interaction feature, plus the inputs of the
    interaction features when any is named."""
    cols = [f for f in features if f not in INTERACTION_FEATURES]
    if any(f in INTERACTION_FEATURES for f in features):
        cols += [c for c in INTERACTION_INPUTS if c not in cols]
    return cols


def prepare(X: pd.DataFrame, features: Sequence[str], feature_set: str, what: str) -> pd.DataFrame:
    """``X`` with the interaction features added when named and absent; one-line :class:`DatasetError`
    when ``X`` is no DataFrame or lacks a feature (``what``: ``training``, ``validation``, ``prediction``)."""
    if not isinstance(X, pd.DataFrame):
        raise DatasetError(f"{what}: X must be a pandas DataFrame with the feature columns "
                           f"(got {type(X).__name__})")
    X = add_interactions(X) if any(f in INTERACTION_FEATURES for f in features) else X
    X = with_zoo_kinds(X, features)
    missing = [f for f in features if f not in X.columns]
    if missing:
        raise DatasetError(f"feature set {feature_set!r} needs column(s) {missing} that the "
                           f"{what} data lacks")
    return X


def with_zoo_kinds(X: pd.DataFrame, features: Sequence[str]) -> pd.DataFrame:
    """``X`` with the layer table's columns, each row's from its own network
    (:func:`carb.design.zoo_features.layer_columns`: a zoo row's from the current tracer, a ResNet row's from
    its walk; each network once, cached): the per-kind and static columns added where ``features`` names
    them and ``X`` lacks them, and the static columns (:data:`carb.design.zoo_features.ZOO_STATIC`) ``X`` has
    replaced where the layer table knows the network, and the latency prior's weight columns
    (:data:`carb.design.zoo_features.ZOO_WEIGHT_FEATURES`) wherever X lacks them. Zoo rows always read the layer table; ResNet rows
    only under a layer-table feature list (:func:`carb.model.encoding.reads_layer_table`: a model fitted
    with zoo rows), so a ResNet model's own features stay as they are. So the rows a model is fitted on
    and the networks it predicts read one layer table: a dataset's stored columns are the tracer's of the
    day it was collected (``zoo-cpu``'s ``peak_live_MB`` predates the integer-storage fix of
    :mod:`carb.design.trace`, 21 % under SqueezeNet's measured peak at bf16). Also the device probe's
    per-operation time (:func:`carb.model.op_cost.with_probe_op_ms`) where ``features`` names
    ``probe_op_ms`` (opt-in: no default feature list does). On rows whose ``reparam`` column
    (:data:`carb.design.zoo_features.REPARAM`) is set, every layer-table column ``X`` stores (static, per-kind,
    weights) is the folded graph's where the tracer knows the network (a frame featurized on the plain graph,
    e.g. by a caller that did not know the model's graph, is read on the model's)."""
    from carb.design.identity import RESNET, ZOO, row_kinds
    from carb.design.zoo_features import ZOO_KIND_FEATURES, ZOO_STATIC, ZOO_WEIGHT_FEATURES
    from carb.model.encoding import reads_layer_table
    from carb.model.op_cost import PROBE_OP_FEATURE

    if PROBE_OP_FEATURE in features and PROBE_OP_FEATURE not in X.columns and "model_name" in X.columns:
        from carb.model.op_cost import with_probe_op_ms

        X = with_probe_op_ms(X)

    if not {"input_size", "batch_size"} <= set(X.columns):
        return X
    kinds = row_kinds(X)
    fresh_rows = (kinds == ZOO.name) | ((kinds == RESNET.name) & reads_layer_table(features))
    if not fresh_rows.any():
        return X
    need = [f for f in features if f in (*ZOO_KIND_FEATURES, *ZOO_STATIC) and f not in X.columns]
    # the latency prior's batch-independent weight columns, whenever the layer table is read
    need += [c for c in ZOO_WEIGHT_FEATURES if c not in X.columns]
    stored = [c for c in ZOO_STATIC if c in X.columns]
    from carb.design.zoo_features import layer_columns, reparam_flags

    folded = fresh_rows & reparam_flags(X)   # rows on the folded graph: every stored layer column replaced
    if folded.any():
        stored += [c for c in (*ZOO_KIND_FEATURES, *ZOO_WEIGHT_FEATURES) if c in X.columns]
    if not need and not stored:
        return X
    from carb.model.encoding import with_columns

    cols = layer_columns(X)
    fresh = {c: cols[c] for c in need}
    for c in stored:   # the layer table's value where it knows the network, the stored one elsewhere
        old = pd.to_numeric(X[c], errors="coerce").to_numpy(float)
        rows = folded if c not in ZOO_STATIC else fresh_rows
        fresh[c] = np.where(rows & np.isfinite(cols[c]), cols[c], old)
    return with_columns(X, fresh)


def with_graph(X: pd.DataFrame, reparam: bool) -> pd.DataFrame:
    """``X`` with the ``reparam`` column (:data:`carb.design.zoo_features.REPARAM`) set to ``reparam`` on
    every row when ``reparam`` is True, ``X`` has named networks (``model_name``) and no such column: a model
    fitted on rows of the folded inference graph (timm's files timed with ``--reparam``) reads the names it
    predicts on that graph too. ``X`` unchanged otherwise (a caller's own column wins)."""
    from carb.design.zoo_features import REPARAM

    if not reparam or "model_name" not in X.columns or REPARAM in X.columns:
        return X
    return X.assign(**{REPARAM: True})


def internal_split(X: pd.DataFrame, y: pd.DataFrame, val_fraction: float, random_state: int) -> Frames:
    """``(X_train, y_train, X_val, y_val)``: a ``val_fraction`` validation share, stratified by
    :func:`carb.data.tiers.strata_key` where every stratum allows it (small ones pooled), else random."""
    n = len(X)
    if n < MIN_FIT_ROWS:
        raise DatasetError(f"too few rows to fit the cascade: {n} rows, need at least {MIN_FIT_ROWS}")
    strat = None
    if "batch_size" in X.columns and (DEPTH in X.columns or "family" in X.columns):
        key = pd.Series(strata_key(X))
        counts = key.map(key.value_counts())
        key = key.where(counts >= 4, "pooled")
        if key.value_counts().min() >= 2:
            strat = key.to_numpy()
    idx = np.arange(n)
    try:
        tr, va = train_test_split(idx, test_size=val_fraction, random_state=random_state, stratify=strat)
    except ValueError:
        tr, va = train_test_split(idx, test_size=val_fraction, random_state=random_state)
    tr, va = np.sort(tr), np.sort(va)
    return (X.iloc[tr].reset_index(drop=True), y.iloc[tr].reset_index(drop=True),
            X.iloc[va].reset_index(drop=True), y.iloc[va].reset_index(drop=True))


def training_frames(X: pd.DataFrame, y, X_val: pd.DataFrame | None, y_val, features: Sequence[str],
                    feature_set: str, val_fraction: float, random_state: int) -> Frames:
    """The four frames a fit works on, each with a fresh 0..n-1 index: ``(X, y, X_val, y_val)`` as
    given, or (without validation rows) an :func:`internal_split` of ``(X, y)``; X frames prepared."""
    yf = targets_frame(y)
    if X_val is None or y_val is None:
        if len(X) != len(yf):
            raise DatasetError(f"X has {len(X)} rows but y has {len(yf)}")
        X, yf, X_val, yv = internal_split(X.reset_index(drop=True), yf.reset_index(drop=True),
                                          val_fraction, random_state)
    else:
        yv = targets_frame(y_val)
    X = prepare(X, features, feature_set, "training").reset_index(drop=True)
    X_val = prepare(X_val, features, feature_set, "validation").reset_index(drop=True)
    yf, yv = yf.reset_index(drop=True), yv.reset_index(drop=True)
    if len(X) != len(yf) or len(X_val) != len(yv):
        raise DatasetError(f"X/y row counts differ: train {len(X)}/{len(yf)}, validation "
                           f"{len(X_val)}/{len(yv)}")
    return X, yf, X_val, yv


def measured_targets(y: pd.DataFrame, y_val: pd.DataFrame) -> tuple[list[str], dict[str, str]]:
    """The targets to fit, in cascade order, and the dropped ones (target -> reason, each warned):
    a target without a measured value in the training or the validation rows has no stage."""
    dropped: dict[str, str] = {}
    targets = []
    for t in TARGETS:
        if t not in y.columns:
            continue
        if y[t].notna().sum() == 0:
            reason = f"{t}: no measured value in the training data (all NaN); its stage is dropped"
        elif y_val.get(t, pd.Series(dtype=float)).notna().sum() == 0:
            reason = f"{t}: no measured value in the validation data; its stage is dropped"
        else:
            targets.append(t)
            continue
        dropped[t] = reason
        warnings.warn(f"CARB cascade: {reason}", UserWarning, stacklevel=3)
    if not targets:
        raise DatasetError(f"no target to fit: y needs measured values in at least one of {list(TARGETS)} "
                           f"(got columns {list(y.columns)})")
    return targets, dropped


def usable_features(X: pd.DataFrame, features: Sequence[str], feature_set: str) -> tuple[list[str], dict[str, str]]:
    """The feature columns to fit on and the dropped ones (column -> reason, warned once): a column
    that is all NaN in the training rows (telemetry a device cannot report) is dropped."""
    dropped = {f: "all NaN in the training data" for f in features if X[f].isna().all()}
    kept = [f for f in features if f not in dropped]
    if dropped:
        msg = (f"CARB cascade: feature set {feature_set!r}: dropping feature(s) "
               f"{list(dropped)} (all NaN in the training data)")
        warnings.warn(msg, UserWarning, stacklevel=3)
    if not kept:
        raise DatasetError(f"feature set {feature_set!r}: every feature column is all NaN")
    return kept, dropped


def device_identity(X: pd.DataFrame) -> tuple[str, str | None, str | None]:
    """``(device_name, device_id, device_fingerprint)`` of the rows: the most frequent name and id,
    the fingerprint (JSON) of a row with that id; ``"unknown"``/None where the data has none."""
    name = "unknown"
    if "device_name" in X.columns and X["device_name"].notna().any():
        name = str(X["device_name"].dropna().astype(str).mode().iloc[0])
    device_id, fingerprint = None, None
    if "device_id" in X.columns and X["device_id"].notna().any():
        device_id = str(X["device_id"].dropna().astype(str).mode().iloc[0])
        fps = X.loc[X["device_id"].astype(str) == device_id, "device_fingerprint"].dropna()
        fingerprint = str(fps.iloc[0]) if len(fps) else None
    return name, device_id, fingerprint
