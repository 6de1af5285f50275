"""Device probes on disk: the shipped single-convolution timings (``carb/data/device-probes.csv``, one
table, a ``device_id`` column) and any a user measured with ``carb-probe`` (``<carb home>/probes/*.csv``,
``$CARB_HOME`` when set), looked up by the fingerprinted device they ran on. See :mod:`carb.measure.probe` for what a probe is."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from carb.errors import DatasetError
from carb.resources import DATA_DIR, carb_home

#: Columns of a probe table: the device and torch threads it ran on, the precision, the convolution
#: (``cin -> cout`` channels, ``kernel x kernel``, ``stride``, padding ``kernel // 2``, input ``H_in x H_in``),
#: the batch, the best time per call in ms, and the backend torch picked ("Mkldnn", "Slow2d", ...); then the
#: operation: ``kind`` (:data:`PROBE_KINDS`), ``op`` (the ATen operator timed), ``groups``, ``tokens`` and
#: ``heads``. Tables written before the operation columns existed are regular convolutions
#: (:func:`with_op_columns`). What the shape columns mean per kind (empty where they do not apply):
#:
#: * ``conv_*``: ``cin, cout, kernel, stride, H_in, groups`` as for the regular convolutions;
#: * ``linear``: ``x (batch * tokens, cin) @ W (cout, cin)^T + bias``;
#: * ``matmul``: ``(batch * heads, tokens, cin) @ (batch * heads, cin, cout)`` (``bmm``);
#: * ``sdpa``: ``scaled_dot_product_attention`` of q, k, v of ``(batch, heads, tokens, cin)``;
#: * ``elementwise`` (binary, two operands of one shape), ``activation`` (unary), ``norm`` (``batch_norm`` in
#:   eval mode over ``(batch, cin, H_in, H_in)`` or ``layer_norm`` over the last dim of ``(batch, tokens, cin)``):
#:   a tensor of ``(batch, cin, H_in, H_in)`` when ``H_in`` is set, else ``(batch, tokens, cin)``.
PROBE_COLUMNS: tuple[str, ...] = ("device_id", "threads", "precision", "cin", "cout", "kernel", "stride", "H_in",
                                  "batch_size", "time_ms", "backend", "kind", "op", "groups", "tokens", "heads")
#: The operation columns (added by issue 43) and what a table without them holds: regular convolutions.
OP_COLUMNS: tuple[str, ...] = PROBE_COLUMNS[11:]
OP_DEFAULTS: dict[str, object] = {"kind": "conv_regular", "op": "convolution", "groups": 1}
#: Kinds of operation a probe times: the regular convolutions of a space's networks, then the operations of
#: the zoo's layer tables (:data:`carb.design.trace.KINDS`) that cost differently: depthwise, grouped and
#: pointwise convolutions, linear layers, batched matrix products, attention, and the memory-bound kinds.
PROBE_KINDS: tuple[str, ...] = ("conv_regular", "conv_depthwise", "conv_grouped", "conv_pointwise", "linear",
                                "matmul", "sdpa", "elementwise", "activation", "norm")
#: The kinds whose cost is their multiply-adds (the rest move bytes).
COMPUTE_KINDS: tuple[str, ...] = PROBE_KINDS[:7]
#: The probes shipped with the package.
SHIPPED_PROBES: Path = DATA_DIR / "device-probes.csv"


def user_probe_path(device_id: str) -> Path:
    """Where ``carb-probe`` writes a device's probe: ``<carb home>/probes/<device_id>.csv``
    (:func:`carb.resources.carb_home`: ``$CARB_HOME`` when set)."""
    return carb_home() / "probes" / f"{device_id}.csv"


def probe_paths() -> list[Path]:
    """Probe tables to search, shipped first, then ``<carb home>/probes/*.csv`` (later ones win)."""
    paths = [SHIPPED_PROBES] if SHIPPED_PROBES.exists() else []
    return paths + sorted((carb_home() / "probes").glob("*.csv"))


def load_probe(device_id: str, paths: list[Path] | None = None,
               kinds: Iterable[str] | None = ("conv_regular",)) -> pd.DataFrame | None:
    """The probe rows of ``device_id`` from the last table in ``paths`` (default :func:`probe_paths`)
    that has any, or None when no table does; with the operation columns (:func:`with_op_columns`), only
    the rows of ``kinds`` (default: the regular convolutions that :class:`carb.model.layer_cost.LayerCostModel`
    and the transfers read; None: every kind). Raises :class:`DatasetError` for an unreadable table."""
    found = None
    for p in (probe_paths() if paths is None else paths):
        try:
            t = pd.read_csv(p)
        except Exception as e:
            raise DatasetError(f"cannot read device probe {str(p)!r}: {' '.join(str(e).split())}") from None
        if "device_id" not in t.columns:
            raise DatasetError(f"device probe {str(p)!r}: no device_id column")
        rows = t[t["device_id"].astype(str) == str(device_id)]
        if len(rows):
            found = rows.reset_index(drop=True)
    if found is None:
        return None
    found = with_op_columns(found)
    if kinds is not None:
        found = found[found["kind"].isin(list(kinds))].reset_index(drop=True)
    return found


def with_op_columns(probe: pd.DataFrame) -> pd.DataFrame:
    """``probe`` with every :data:`OP_COLUMNS` column: a table (or row) written before the operation
    columns existed is a regular convolution (:data:`OP_DEFAULTS`), ``tokens`` and ``heads`` empty (NaN)."""
    out = probe.copy()
    for c in OP_COLUMNS:
        if c not in out.columns:
            out[c] = OP_DEFAULTS.get(c, float("nan"))
        elif c in OP_DEFAULTS:
            out[c] = out[c].where(out[c].notna(), OP_DEFAULTS[c])
    out["kind"] = out["kind"].astype(str)
    return out


#: The integer columns of a probe table (empty where an operation has no such dimension).
INT_COLUMNS: tuple[str, ...] = ("threads", "cin", "cout", "kernel", "stride", "H_in", "batch_size", "groups", "tokens",
                                "heads")


def for_csv(probe: pd.DataFrame) -> pd.DataFrame:
    """``probe`` as a table is written: :data:`PROBE_COLUMNS` (with :func:`with_op_columns`), the integer columns
    as integers with empty cells where a kind has no such dimension (not ``3.0`` once a column has a gap)."""
    out = with_op_columns(probe)[list(PROBE_COLUMNS)]
    for c in INT_COLUMNS:
        out[c] = pd.to_numeric(out[c], errors="coerce").round().astype("Int64")
    return out


def conv_rows(probe: pd.DataFrame) -> pd.DataFrame:
    """The regular-convolution rows of a probe table (all of a table without a ``kind`` column)."""
    if "kind" not in probe.columns:
        return probe
    kind = probe["kind"].where(probe["kind"].notna(), OP_DEFAULTS["kind"]).astype(str)
    return probe[(kind == "conv_regular").to_numpy()]


#: The columns of :func:`op_work`.
WORK_COLUMNS: tuple[str, ...] = ("macs", "act_bytes", "weight_bytes", "out_bytes")


def op_work(probe: pd.DataFrame) -> pd.DataFrame:
    """The work of each probe row per call, in the layer table's conventions (:mod:`carb.design.trace`;
    ``tests/test_probe_ops.py`` holds the two equal): ``macs`` (multiply-adds of convolutions, matrix
    products and attention, 0 for the memory-bound kinds), ``act_bytes`` (activations read), ``weight_bytes``
    (parameters and buffers read) and ``out_bytes`` (written), at the row's precision; whole batch; a frame
    of :data:`WORK_COLUMNS` with ``probe``'s index. A row of an unknown kind gets NaN."""
    from carb.design.arch import BYTES_PER_ELEMENT
    from carb.design.shapes import out_size

    t = with_op_columns(probe)
    num = {c: pd.to_numeric(t[c], errors="coerce").to_numpy(float)
           for c in ("cin", "cout", "kernel", "stride", "H_in", "groups", "tokens", "heads", "batch_size")}
    cin, cout, ker, stride, h, g = (num[c] for c in ("cin", "cout", "kernel", "stride", "H_in", "groups"))
    tok, heads, b = num["tokens"], num["heads"], num["batch_size"]
    kind, op = t["kind"].to_numpy(str), t["op"].astype(str).to_numpy()
    bpe = t["precision"].astype(str).map(BYTES_PER_ELEMENT).to_numpy(float)
    nan = np.full(len(t), np.nan)
    macs, act, w, out = nan.copy(), nan.copy(), nan.copy(), nan.copy()
    conv = np.char.startswith(kind.astype(str), "conv_")
    if conv.any():
        ho = np.array([out_size(int(x), int(k), int(s)) if ok else np.nan
                       for x, k, s, ok in zip(np.nan_to_num(h), np.nan_to_num(ker), np.nan_to_num(stride), conv)])
        wel = cout * cin / g * ker * ker
        macs = np.where(conv, b * ho * ho * wel, macs)
        act = np.where(conv, b * cin * h * h, act)
        w = np.where(conv, wel, w)
        out = np.where(conv, b * cout * ho * ho, out)
    lin = kind == "linear"
    macs, act = np.where(lin, b * tok * cin * cout, macs), np.where(lin, b * tok * cin, act)
    w, out = np.where(lin, cout * cin + cout, w), np.where(lin, b * tok * cout, out)
    mm = kind == "matmul"
    macs, act = np.where(mm, b * heads * tok * cin * cout, macs), np.where(mm, b * heads * (tok * cin + cin * cout), act)
    w, out = np.where(mm, 0.0, w), np.where(mm, b * heads * tok * cout, out)
    at = kind == "sdpa"
    macs, act = np.where(at, b * heads * tok * tok * (cin + cout), macs), np.where(at, b * heads * tok * (2 * cin + cout), act)
    w, out = np.where(at, 0.0, w), np.where(at, b * heads * tok * cout, out)
    four = np.isfinite(h) & (h > 0)
    numel = np.where(four, b * cin * h * h, b * tok * cin)
    ew = kind == "elementwise"
    macs, act, w, out = (np.where(ew, 0.0, macs), np.where(ew, 2 * numel, act), np.where(ew, 0.0, w),
                         np.where(ew, numel, out))
    un = kind == "activation"
    macs, act, w, out = (np.where(un, 0.0, macs), np.where(un, numel, act), np.where(un, 0.0, w),
                         np.where(un, numel, out))
    nm = kind == "norm"
    bn = nm & (np.char.find(op.astype(str), "batch") >= 0)
    macs, act = np.where(nm, 0.0, macs), np.where(nm, numel, act)
    w = np.where(bn, 4 * cin, np.where(nm, 2 * cin, w))   # batch norm: weight, bias, running mean and variance
    # + the saved mean and inverse std per channel (batch norm; counted per image, as the tracer scales every
    # output with the batch) or per token (layer norm)
    out = np.where(bn, numel + 2 * b * cin, np.where(nm, numel + 2 * b * tok, out))
    return pd.DataFrame({"macs": macs, "act_bytes": act * bpe, "weight_bytes": w * bpe, "out_bytes": out * bpe},
                        index=probe.index)


#: The operation shapes a probe draws from (``carb-probe``'s ``ops``): the distinct operations of the zoo's
#: layer tables by probe kind, from ``scripts/studies/probe_ops_catalog.py`` (provenance beside it).
OP_CATALOG: Path = DATA_DIR / "probe-ops.csv"


def load_op_catalog(path: Path | None = None) -> pd.DataFrame:
    """The operation catalog (:data:`OP_CATALOG`): one row per distinct operation shape of the zoo (batch 1),
    columns ``kind, op, cin, cout, kernel, stride, H_in, groups, tokens, heads, count, models``. Raises
    :class:`DatasetError` when it cannot be read."""
    p = OP_CATALOG if path is None else Path(path)
    try:
        return pd.read_csv(p)
    except Exception as e:
        raise DatasetError(f"cannot read the probe's operation catalog {str(p)!r}: {' '.join(str(e).split())}") from None


def missing_precisions(probe: pd.DataFrame | None, precisions: Iterable[str]) -> list[str]:
    """The precisions of ``precisions`` (e.g. what a source model predicts) that ``probe`` (a device's probe
    table, :func:`load_probe`; None: no probe) has no timing of, in the order given; [] when it covers them
    all. A precision a probe lacks is predicted by a stand-in, not from this device's kernels."""
    have: set[str] = set()
    if probe is not None and len(probe) and "precision" in probe.columns:
        t = pd.to_numeric(probe["time_ms"], errors="coerce") if "time_ms" in probe.columns else None
        rows = probe if t is None else probe[(t > 0).fillna(False).to_numpy()]
        have = set(rows["precision"].astype(str))
    seen: list[str] = []
    for p in precisions:
        if str(p) not in have and str(p) not in seen:
            seen.append(str(p))
    return seen


def probe_ids(paths: list[Path] | None = None) -> list[str]:
    """The device ids with a probe in ``paths`` (default :func:`probe_paths`), sorted."""
    ids: set[str] = set()
    for p in (probe_paths() if paths is None else paths):
        try:
            ids |= set(pd.read_csv(p, usecols=["device_id"])["device_id"].astype(str))
        except Exception:   # an unreadable table is load_probe's error to report
            continue
    return sorted(ids)


def probe_record(device_id: str) -> dict | None:
    """The provenance record of the probe of ``device_id`` (shipped: keyed by device id; carb-probe's:
    ``<device_id>.provenance.json`` beside its table, which wins); None when none records it."""
    import json

    found = None
    for prov in [SHIPPED_PROBES.with_suffix(".provenance.json"), user_probe_path(device_id).with_suffix(".provenance.json")]:
        try:
            d = json.loads(prov.read_text())
        except (OSError, ValueError):
            continue
        rec = d.get(str(device_id)) if str(device_id) in d else (d if str(d.get("device_id")) == str(device_id) else None)
        if isinstance(rec, dict):
            found = rec
    return found


def probe_fingerprint(device_id: str) -> str | None:
    """The fingerprint (compact JSON, sorted keys: the datasets' ``device_fingerprint`` form) of the CPU a
    probe of ``device_id`` ran on, from the probe's provenance (:func:`probe_record`); None when none records it."""
    import json

    rec = probe_record(device_id)
    if not (isinstance(rec, dict) and isinstance(rec.get("fingerprint"), dict)):
        return None
    return json.dumps(rec["fingerprint"], sort_keys=True, separators=(",", ":"))


def probe_session(device_id: str) -> str | None:
    """The measuring session (``session_id``, the boot: :func:`carb.measure.fingerprint.session_id`) the probe of
    ``device_id`` was timed in, from its provenance (:func:`probe_record`); None for probes written before
    carb-probe recorded it."""
    rec = probe_record(device_id)
    sid = rec.get("session_id") if isinstance(rec, dict) else None
    return str(sid) if sid else None


def probe_window(device_id: str) -> tuple[pd.Timestamp, pd.Timestamp] | None:
    """When the probe of ``device_id`` was timed: its provenance's ``measured_from`` and ``measured_to`` as UTC
    ``pandas.Timestamp`` (start, end); None when the provenance does not record both. One boot can hold several
    speeds hours apart (carb/data/cpu-intel-xeon.md), so the boot alone does not place a probe."""
    rec = probe_record(device_id)
    if not isinstance(rec, dict):
        return None
    when = pd.to_datetime(pd.Series([rec.get("measured_from"), rec.get("measured_to")]), utc=True, errors="coerce",
                          format="ISO8601")
    return None if when.isna().any() else (when.iloc[0], when.iloc[1])
