"""Session drift: how far one device's speed moves between measuring sessions, and how wide that makes an
interval that must hold on a later day.

A session is a boot and an unbroken measuring window (:func:`sessions`): the Intel Xeon VM ``6a0ea403ee`` ran
11-15 % faster at 19:16 UTC than at 16:07 on the same boot, 3 % faster again at 22:12, and 28-36 % faster on another
host kernel build two days before (carb/data/cpu-intel-xeon.md). A model fitted on one window's rows has conformal
intervals calibrated on that window: on the later windows its 90 % latency intervals covered 17-55 %.

:func:`window_levels` estimates each window's latency level (a log offset, per device and precision) from the
configurations measured in more than one window: an additive fit ``log latency = configuration + window``
over those configurations, levels centred per device and precision. :func:`drift` pools the centred levels
of every (device, precision) into one log standard deviation of a session's level with its degrees of
freedom (sum of squares over sum of (windows - 1)), and :func:`drift_half` turns it into the half-width of a
two-sided interval at a coverage (Student t quantile x sd: a handful of windows gives a wide t). The shipped
table ``carb/data/session-drift.csv`` (written by ``python -m scripts.data.session_drift`` from the shipped CPU
files) holds the levels; :func:`shipped_drift` pools them for a device class. GPUs are not in it: the H200's two
windows (2026-12-04 12:57 and 17:35 UTC) share 19-23 configurations per precision, but their per-configuration log
ratios spread +-0.7 (launch-bound rows: the host), so a level fitted on them is mostly row noise, and the first
window's model already covered the later window's rows at 0.91 (docs/RESULTS.md, the prospective check): GPU
models carry no drift (``evaluate.session_drift.kinds``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb.errors import DatasetError
from carb.resources import DATA_DIR

#: The shipped window levels (``python -m scripts.data.session_drift``).
SHIPPED_TABLE = DATA_DIR / "session-drift.csv"
#: Its columns: the device, its kind, the precision, the window label (:func:`sessions`), the window's centred
#: level (log latency offset) and how many configurations shared with another window it rests on.
COLUMNS = ("device_id", "device_kind", "precision", "window", "level_log", "n_configs")


def _text(rows: pd.DataFrame, col: str) -> pd.Series:
    """Column ``col`` of ``rows`` as strings (missing: ``""``); an empty string column where absent."""
    return (rows[col].astype("string").fillna("") if col in rows.columns
            else pd.Series("", index=rows.index, dtype="string"))


def sessions(rows: pd.DataFrame, gap_h: float | None) -> pd.Series:
    """A session label per row (``"<first measured_at> <driver>"``, `` boot <session_id>`` where recorded): rows
    sorted by ``measured_at`` start a new session where the boot (``session_id``, rows measured since it was
    recorded) or the host kernel build (``driver``) changes, or more than ``gap_h`` hours passed since the row
    before (None: no gap rule). Rows without ``measured_at`` keep the order given."""
    when = (pd.to_datetime(rows["measured_at"], utc=True, errors="coerce", format="ISO8601")
            if "measured_at" in rows.columns else pd.Series(pd.NaT, index=rows.index))
    build, boot = _text(rows, "driver"), _text(rows, "session_id")
    order = when.sort_values(kind="stable").index
    hours = when[order].diff().dt.total_seconds().div(3600)
    key = build[order] + "|" + boot[order]
    changed = (key != key.shift()).fillna(True).to_numpy(dtype=bool)
    new = changed | ((hours > gap_h).to_numpy(dtype=bool) if gap_h is not None else False)
    label = pd.Series(np.cumsum(new), index=order)
    first = when[order].groupby(label).transform("min").dt.strftime("%Y-%m-%d %H:%M").fillna("?")
    tag = boot[order].map(lambda b: f" boot {b}" if b else "")
    return (first + " " + build[order] + tag).reindex(rows.index)


def _additive_levels(y: pd.Series, config: pd.Series, window: pd.Series, iterations: int = 200) -> pd.Series:
    """Window levels (centred, log units) of the additive fit ``y = config effect + window effect`` by
    alternating means (``y``, ``config``, ``window``: aligned (n,) series, each config in >= 2 windows)."""
    level = pd.Series(0.0, index=sorted(window.unique()))
    for _ in range(iterations):
        effect = (y - window.map(level)).groupby(config).transform("mean")
        new = (y - effect).groupby(window).mean()
        new -= new.mean()
        if np.allclose(new.reindex(level.index).to_numpy(), level.to_numpy(), atol=1e-9):
            return new
        level = new
    return level


def window_levels(rows: pd.DataFrame, gap_h: float | None) -> pd.DataFrame:
    """Each measuring window's latency level per device and precision (:data:`COLUMNS`): ``ok`` rows of
    ``rows`` (one or several devices, ``config_id``, ``precision``, ``latency_ms``, ``measured_at``) labelled by
    :func:`sessions`; a configuration's log latency is its median in each window; only configurations measured
    in two or more windows count, and only (device, precision) groups with two or more such windows appear."""
    need = {"device_id", "config_id", "precision", "latency_ms"}
    if missing := sorted(need - set(rows.columns)):
        raise DatasetError(f"session drift: the rows lack {', '.join(missing)}")
    ok = rows[(rows["status"] == "ok") if "status" in rows.columns else slice(None)]
    ok = ok[np.isfinite(ok["latency_ms"].astype(float)) & (ok["latency_ms"].astype(float) > 0)]
    out = []
    for dev, d in ok.groupby(ok["device_id"].astype(str)):
        d = d.assign(window=sessions(d, gap_h).to_numpy(), y=np.log(d["latency_ms"].astype(float)))
        kind = str(d["device_kind"].iloc[0]) if "device_kind" in d.columns else ""
        for prec, g in d.groupby(d["precision"].astype(str)):
            med = g.groupby(["config_id", "window"], as_index=False)["y"].median()
            med = med[med.groupby("config_id")["window"].transform("nunique") >= 2]
            if med["window"].nunique() < 2:
                continue
            level = _additive_levels(med["y"], med["config_id"], med["window"])
            counts = med.groupby("window")["config_id"].nunique()
            out += [{"device_id": dev, "device_kind": kind, "precision": prec, "window": w,
                     "level_log": float(v), "n_configs": int(counts[w])} for w, v in level.items()]
    return pd.DataFrame(out, columns=list(COLUMNS))


def drift(levels: pd.DataFrame) -> dict[str, Any] | None:
    """The pooled session drift of the window levels ``levels`` (:func:`window_levels`' form): ``sd_log`` (the log
    standard deviation of one session's level: the centred levels' sum of squares over the degrees of freedom,
    pooled over every (device, precision)), ``df`` (sum of windows - 1), ``devices``, ``windows`` (distinct
    device windows); None without two windows of any device."""
    if levels.empty:
        return None
    ss, df = 0.0, 0
    for _, g in levels.groupby(["device_id", "precision"]):
        v = g["level_log"].to_numpy(float)
        ss += float(np.sum((v - v.mean()) ** 2))
        df += len(v) - 1
    if df < 1:
        return None
    return {"sd_log": math.sqrt(ss / df), "df": int(df), "devices": int(levels["device_id"].nunique()),
            "windows": int(levels[["device_id", "window"]].drop_duplicates().shape[0])}


def drift_half(term: Mapping[str, Any] | None, coverage: float) -> float:
    """Half-width (log ratio, >= 0) that a session's level adds to a two-sided ``coverage`` interval:
    ``t(df).ppf((1 + coverage) / 2) x sd_log`` of the drift ``term`` (:func:`drift`); 0.0 without one."""
    from scipy.stats import t

    if not term or not float(term.get("sd_log") or 0.0) > 0:
        return 0.0
    return float(t.ppf((1.0 + float(coverage)) / 2.0, max(int(term.get("df", 1)), 1)) * float(term["sd_log"]))


def load_levels(path: str | Path | None = None) -> pd.DataFrame:
    """The shipped window-level table (``path``: another file of its form); empty where it is missing."""
    p = Path(path) if path is not None else SHIPPED_TABLE
    if not p.exists():
        return pd.DataFrame(columns=list(COLUMNS))
    t = pd.read_csv(p, dtype={"device_id": str, "device_kind": str, "precision": str, "window": str})
    if missing := sorted(set(COLUMNS) - set(t.columns)):
        raise DatasetError(f"{p}: a session-drift table needs the columns {', '.join(COLUMNS)}; "
                           f"lacks {', '.join(missing)}")
    return t


def shipped_drift(kind: str, path: str | Path | None = None) -> dict[str, Any] | None:
    """The pooled session drift (:func:`drift`) of every shipped device of ``kind`` (``cpu``, ``gpu``) with its
    ``kind`` and the table it came from; None where no device of that kind was measured in two windows."""
    levels = load_levels(path)
    term = drift(levels[levels["device_kind"].astype(str) == str(kind)])
    if term is None:
        return None
    return {**term, "kind": str(kind), "table": Path(path).name if path is not None else SHIPPED_TABLE.name}
