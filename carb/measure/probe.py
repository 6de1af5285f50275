"""Device probe: the time of single convolutions at each precision, so that a precision no network
was measured at can still be predicted on this device.

Why: the latency prior (:class:`carb.model.physics.LayerRooflinePrior`) learns a cost per
multiply-add, per byte and per operator for each precision it has network rows of. A precision
without rows borrows another's costs, and on a CPU that is badly wrong: fp16 without AVX-512 FP16 runs
PyTorch's fallback GEMM, 30-50x slower than fp32 on the CPU reference VM. A few seconds of single-layer
timings per precision (the layers the networks of the space are made of, at the batch sizes they run
at) tell the prior how this device's kernels scale from one precision to another, without a single
network measured at that precision. That is what a roofline's peak rates are: device facts from
micro-benchmarks, measured once per fingerprinted device.

A probe is a table (:data:`PROBE_COLUMNS`): one row per (layer, batch, precision), with the time per
call in ms (the best of ``repeats`` windows of at least ``min_window_s``), the backend torch picked
and the device it ran on (``device_id``). Layers are ``(cin, cout, kernel, stride, H_in)``, padding
``kernel // 2``, no bias, NCHW, ``torch.no_grad``, the thread count and allocator as the collector sets
them. Run it alone on an idle machine.

Beside the regular convolutions, a probe times the other kinds of operation a model zoo is made of
(:data:`carb.data.probes.PROBE_KINDS`: depthwise, grouped and pointwise convolutions, linear layers,
batched matrix products, scaled-dot-product attention, and the memory-bound element-wise, activation and
normalisation operations, whose time is a bandwidth), each at shapes drawn from the zoo's layer tables
(:func:`op_catalog` of :mod:`carb.design.trace` tables, shipped as :data:`carb.data.probes.OP_CATALOG`;
:func:`op_plan`) and timed by :func:`run_probe` with the same best-of-windows protocol. Their rows carry
``kind`` and ``op``; :class:`carb.model.op_cost.OpCostModel` fits a cost per kind on them.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from carb.data.probes import COMPUTE_KINDS, PROBE_COLUMNS, PROBE_KINDS, op_work
from carb.design.shapes import layer_array, out_size, space_layers
from carb.errors import ConfigError

__all__ = ["OP_BATCHES", "PROBE_BATCHES", "PROBE_COLUMNS", "backend", "best_ms", "layer_array", "op_catalog",
           "op_plan", "out_size", "probe_plan", "run_probe", "space_layers", "torch_threads_and_version"]
#: The batch sizes a probe layer may run at (PyTorch's CPU dispatch changes at 2 and 16).
PROBE_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


def probe_plan(layers: np.ndarray, n: int, seed: int = 0, max_MMAC: float = 40.0,
               batches: Iterable[int] = PROBE_BATCHES) -> pd.DataFrame:
    """``n`` (layer, batch) pairs drawn from ``layers`` (:func:`space_layers`), each at most ``max_MMAC``
    million multiply-adds per call (the slowest precision must stay quick), stratified so that every
    kernel size and stride present is drawn; columns ``cin, cout, kernel, stride, H_in, batch_size``."""
    rng = np.random.default_rng(seed)
    cand = []
    for cin, cout, ker, stride, h in layers:
        ho = out_size(h, ker, stride)
        for b in batches:
            if b * ho * ho * cout * cin * ker * ker <= max_MMAC * 1e6:
                cand.append((cin, cout, ker, stride, h, b))
    if not cand:
        raise ConfigError(f"probe.max_MMAC: no layer of the space fits {max_MMAC} MMAC per call; allowed: a larger value")
    cand = np.array(cand, dtype=int)
    kinds = {tuple(r) for r in cand[:, [2, 3]]}
    first = [rng.choice(np.flatnonzero((cand[:, 2] == k) & (cand[:, 3] == s))) for k, s in sorted(kinds)]
    rest = rng.permutation(np.setdiff1d(np.arange(len(cand)), first))[: max(0, n - len(first))]
    pick = cand[np.sort(np.concatenate([first, rest]).astype(int))]
    return pd.DataFrame(pick, columns=["cin", "cout", "kernel", "stride", "H_in", "batch_size"])


def best_ms(fn: Callable[[], Any], repeats: int, min_window_s: float) -> float:
    """Best over ``repeats`` windows (each at least ``min_window_s`` seconds) of ms per call of ``fn``."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        calls, t0 = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            dt = time.perf_counter() - t0
            if dt >= min_window_s:
                break
        best = min(best, dt / calls * 1e3)
    return best


def run_probe(plan: pd.DataFrame, precisions: Iterable[str], device_id: str, threads: int = 1,
              repeats: int = 3, min_window_s: float = 0.03,
              progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Time every row of ``plan`` (:func:`probe_plan`'s regular convolutions, :func:`op_plan`'s operations, or
    both concatenated) at each precision on this process's CPU with ``threads`` torch threads; a
    :data:`PROBE_COLUMNS` table. ``progress(done, total)`` is called after each timing. Restores the torch
    thread count."""
    import torch

    from carb.measure.base import torch_dtype

    precisions = list(precisions)
    for p in precisions:
        torch_dtype(p)   # ConfigError naming the allowed values
    for r in plan.itertuples(index=False):
        check_row(plan_row(r._asdict()))   # before any timing: a bad row costs no measured minutes
    prev = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    rows, total, done = [], len(plan) * len(precisions), 0
    try:
        with torch.no_grad():
            for p in precisions:
                dtype = torch_dtype(p)
                for r in plan.itertuples(index=False):
                    fn, how = op_call(r._asdict(), dtype)
                    ms = best_ms(fn, repeats, min_window_s)
                    rows.append({"device_id": device_id, "threads": int(threads), "precision": p,
                                 **plan_row(r._asdict()), "time_ms": ms, "backend": how})
                    done += 1
                    if progress:
                        progress(done, total)
    finally:
        torch.set_num_threads(prev)
    return pd.DataFrame(rows, columns=list(PROBE_COLUMNS))


def backend(x: Any, w: Any, stride: int, pad: int, groups: int = 1) -> str:
    """The convolution backend torch picks for these tensors ("Mkldnn", "Slow2d", ...), "" when this
    torch cannot say."""
    import torch

    try:
        b = torch._C._select_conv_backend(x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], groups, None)
        return str(b).split(".")[-1]
    except (AttributeError, RuntimeError, TypeError):
        return ""


def torch_threads_and_version(threads: int | None) -> tuple[int, str]:
    """``(threads, torch version)``: ``threads`` as given, or torch's current thread count when None."""
    import torch

    return (int(threads) if threads else torch.get_num_threads()), str(torch.__version__)


#: The batch sizes an operation of the zoo may run at (the zoo space's).
OP_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16)
#: The shape columns of an operation row (:data:`carb.data.probes.PROBE_COLUMNS`; batch 1 in a catalog).
OP_SHAPE: tuple[str, ...] = ("kind", "op", "cin", "cout", "kernel", "stride", "H_in", "groups", "tokens", "heads")
_INT_SHAPE = ("cin", "cout", "kernel", "stride", "H_in", "groups", "tokens", "heads", "batch_size")
#: Operators the probe times for each memory-bound kind (a zoo row with another operator is not drawn).
BINARY_OPS: tuple[str, ...] = ("add", "add_", "mul", "mul_")
UNARY_OPS: tuple[str, ...] = ("relu", "relu_", "gelu", "silu", "silu_", "hardswish", "hardswish_", "sigmoid",
                              "sigmoid_", "hardsigmoid", "hardsigmoid_", "hardtanh", "hardtanh_", "tanh", "_softmax")
_NORM_OPS = {"native_batch_norm": "batch_norm", "_native_batch_norm_legit_no_training": "batch_norm",
             "_native_batch_norm_legit": "batch_norm", "batch_norm": "batch_norm",
             "native_layer_norm": "layer_norm", "layer_norm": "layer_norm"}


def plan_row(r: dict[str, Any]) -> dict[str, Any]:
    """The shape columns of one plan row as a probe row: a row without ``kind`` is a regular convolution
    (``op`` "convolution", ``groups`` 1); missing shape entries are NaN."""
    out: dict[str, Any] = {}
    kind = r.get("kind")
    kind = "conv_regular" if kind is None or (isinstance(kind, float) and np.isnan(kind)) else str(kind)
    out["kind"] = kind
    op = r.get("op")
    out["op"] = "convolution" if op is None or (isinstance(op, float) and np.isnan(op)) else str(op)
    for c in _INT_SHAPE:
        v = r.get(c)
        if c == "groups" and (v is None or not np.isfinite(float(v))):
            v = 1
        out[c] = int(v) if v is not None and np.isfinite(float(v)) else float("nan")
    return out


def check_row(r: dict[str, Any]) -> None:
    """One-line :class:`ConfigError` when a plan row (:func:`plan_row`) names a kind or operator the probe
    cannot time (see :func:`op_call`)."""
    kind, op = r["kind"], r["op"]
    ok = (kind in PROBE_KINDS and (kind.startswith("conv_") or kind in ("linear", "matmul", "sdpa"))
          or (kind == "elementwise" and op in BINARY_OPS) or (kind == "activation" and op in UNARY_OPS)
          or (kind == "norm" and op in ("batch_norm", "layer_norm")))
    if not ok:
        raise ConfigError(f"probe plan: kind {kind!r} with op {op!r} cannot be timed; allowed kinds: "
                          f"{list(PROBE_KINDS)} (element-wise ops {list(BINARY_OPS)}, activations {list(UNARY_OPS)}, "
                          "norms batch_norm and layer_norm)")


def _shape(r: dict[str, Any]) -> tuple[int, ...]:
    """The memory-bound operand shape of a plan row: ``(batch, cin, H_in, H_in)`` when ``H_in`` is set, else
    ``(batch, tokens, cin)``."""
    h = r["H_in"]
    if np.isfinite(h) and h > 0:
        return (r["batch_size"], r["cin"], int(h), int(h))
    return (r["batch_size"], int(r["tokens"]), r["cin"])


def op_call(row: dict[str, Any], dtype: Any) -> tuple[Callable[[], Any], str]:
    """``(fn, backend)``: a no-argument call of one plan row's operation on fresh random tensors of ``dtype``
    (see :data:`carb.data.probes.PROBE_COLUMNS` for the shapes of each kind), and the convolution backend
    torch picks ("" for the other kinds). Raises :class:`ConfigError` for an unknown kind or operator."""
    import torch
    import torch.nn.functional as F

    r = plan_row(row)
    kind, op, b = r["kind"], r["op"], r["batch_size"]
    rand = lambda *shape: torch.randn(*shape).to(dtype)  # noqa: E731
    if kind.startswith("conv_") and kind in PROBE_KINDS:
        g, k, s = r["groups"], r["kernel"], r["stride"]
        w, x = rand(r["cout"], r["cin"] // g, k, k), rand(b, r["cin"], r["H_in"], r["H_in"])
        return (lambda: F.conv2d(x, w, None, s, k // 2, 1, g)), backend(x, w, s, k // 2, g)
    if kind == "linear":
        x, w, bias = rand(b * r["tokens"], r["cin"]), rand(r["cout"], r["cin"]), rand(r["cout"])
        return (lambda: F.linear(x, w, bias)), ""
    if kind == "matmul":
        a, m = rand(b * r["heads"], r["tokens"], r["cin"]), rand(b * r["heads"], r["cin"], r["cout"])
        return (lambda: torch.bmm(a, m)), ""
    if kind == "sdpa":
        q, kk = rand(b, r["heads"], r["tokens"], r["cin"]), rand(b, r["heads"], r["tokens"], r["cin"])
        v = rand(b, r["heads"], r["tokens"], r["cout"])
        return (lambda: F.scaled_dot_product_attention(q, kk, v)), ""
    shape = _shape(r)
    if kind == "elementwise" and op in BINARY_OPS:
        x = rand(*shape)
        y = torch.ones(shape, dtype=dtype) if op.startswith("mul") else rand(*shape)
        fn = getattr(torch.Tensor, op) if op.endswith("_") else getattr(torch, op)
        return (lambda: fn(x, y)), ""
    if kind == "activation" and op in UNARY_OPS:
        x = rand(*shape)
        unary = {"relu": F.relu, "relu_": F.relu_, "gelu": F.gelu, "silu": F.silu,
                 "silu_": lambda t: F.silu(t, inplace=True), "hardswish": F.hardswish,
                 "hardswish_": lambda t: F.hardswish(t, inplace=True), "sigmoid": torch.sigmoid,
                 "sigmoid_": torch.sigmoid_, "hardsigmoid": F.hardsigmoid,
                 "hardsigmoid_": lambda t: F.hardsigmoid(t, inplace=True), "hardtanh": F.hardtanh,
                 "hardtanh_": F.hardtanh_, "tanh": torch.tanh, "_softmax": lambda t: torch.softmax(t, -1)}[op]
        return (lambda: unary(x)), ""
    if kind == "norm" and op == "batch_norm" and len(shape) == 4:
        x, c = rand(*shape), r["cin"]
        mean, var, w, bias = rand(c), torch.rand(c).to(dtype) + 0.5, rand(c), rand(c)
        return (lambda: F.batch_norm(x, mean, var, w, bias, False)), ""
    if kind == "norm" and op == "layer_norm":
        x, c = rand(*shape), shape[-1]
        w, bias = rand(c), rand(c)
        return (lambda: F.layer_norm(x, (c,), w, bias)), ""
    check_row(r)
    raise ConfigError(f"probe plan: kind {kind!r} with op {op!r} needs a 4-d shape (H_in set); allowed: batch_norm "
                      "over (batch, cin, H_in, H_in), layer_norm over (batch, tokens, cin) or a 4-d shape")


def catalog_row(row: Any) -> dict[str, Any] | None:
    """The probe shape (:data:`OP_SHAPE`, batch 1) of one layer-table row (:data:`carb.design.trace.COLUMNS`),
    or None when the probe does not time it: regular convolutions (the space's are probed), non-square
    convolutions or maps, operators outside :data:`BINARY_OPS` / :data:`UNARY_OPS` and batch or layer norms,
    and kinds without a cost of their own (pooling, copies, views, ...)."""
    kind, op = str(row["kind"]), str(row["op"])
    ins, outs, ws = tuple(row["in_shape"]), tuple(row["out_shape"]), tuple(row["weight_shape"])
    nan = float("nan")
    base = {"kind": kind, "op": op, "cin": nan, "cout": nan, "kernel": nan, "stride": nan, "H_in": nan,
            "groups": nan, "tokens": nan, "heads": nan}
    if kind in ("conv_depthwise", "conv_grouped", "conv_pointwise"):
        if len(ins) != 4 or ins[2] != ins[3] or len(ws) != 4 or ws[2] != ws[3]:
            return None
        return {**base, "cin": ins[1], "cout": ws[0], "kernel": ws[2], "stride": int(row["stride"]), "H_in": ins[2],
                "groups": int(row["groups"])}
    if kind == "linear" and len(ins) >= 1 and len(ws) == 2:
        return {**base, "op": "linear", "cin": ins[-1], "cout": ws[0], "tokens": int(np.prod(ins[:-1])), "heads": 1}
    if kind in ("matmul", "sdpa") and len(ins) >= 2 and len(outs) >= 2:
        return {**base, "op": "bmm" if kind == "matmul" else "scaled_dot_product_attention", "cin": ins[-1],
                "cout": outs[-1], "tokens": ins[-2], "heads": int(np.prod(ins[:-2]))}
    memory = (kind == "elementwise" and op in BINARY_OPS) or (kind == "activation" and op in UNARY_OPS)
    norm = _NORM_OPS.get(op) if kind == "norm" else None
    if not (memory or norm) or len(ins) < 2:
        return None
    square = len(ins) == 4 and ins[2] == ins[3]
    if norm == "batch_norm" and not square:
        return None
    if norm:
        base["op"] = norm
    if square and norm != "layer_norm":
        return {**base, "cin": ins[1], "H_in": ins[2]}
    return {**base, "cin": ins[-1], "tokens": int(np.prod(ins[1:-1])) if len(ins) > 2 else 1}


def op_catalog(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The distinct probe shapes (:func:`catalog_row`) of batch-1 layer tables ``{name: table}``
    (:func:`carb.design.trace.trace`; a name may end in ``@<input size>``), with ``count`` (rows of all tables
    with that shape) and ``models`` (distinct names, the ``@`` part left out, that have it); sorted by kind,
    operator and shape. Columns :data:`OP_SHAPE`, ``count``, ``models``."""
    seen: dict[tuple, dict[str, Any]] = {}
    for name, table in tables.items():
        model = str(name).split("@")[0]
        for r in table.to_dict("records"):
            c = catalog_row(r)
            if c is None:
                continue
            key = tuple(str(c[k]) for k in OP_SHAPE)
            entry = seen.setdefault(key, {**c, "count": 0, "models": set()})
            entry["count"] += 1
            entry["models"].add(model)
    rows = [{**e, "models": len(e["models"])} for e in seen.values()]
    out = pd.DataFrame(rows, columns=[*OP_SHAPE, "count", "models"])
    for c in _INT_SHAPE[:-1]:
        out[c] = pd.to_numeric(out[c]).astype("Int64")   # empty where the kind has no such dimension
    return out.sort_values(["kind", "op", "cin", "cout", "H_in", "tokens"], kind="stable").reset_index(drop=True)


def op_plan(catalog: pd.DataFrame, per_kind: int, seed: int = 0, max_MMAC: float = 16.0, max_MB: float = 8.0,
            batches: Iterable[int] = OP_BATCHES, kinds: Iterable[str] | None = None) -> pd.DataFrame:
    """``per_kind`` (operation, batch) pairs of each kind of ``catalog`` (:func:`op_catalog`; ``kinds``:
    only those), distinct shapes drawn at random (seeded) and each at a batch drawn from those where the
    call stays within ``max_MMAC`` million multiply-adds (compute kinds) and ``max_MB`` MB of activations read
    and written at fp32 (every kind); attention and batched products too large at batch 1 run fewer
    ``heads``. Columns :data:`OP_SHAPE` and ``batch_size``; empty when ``per_kind`` is 0."""
    rng = np.random.default_rng(seed)
    batches = sorted(int(b) for b in batches)
    cols = [*OP_SHAPE, "batch_size"]
    if per_kind <= 0 or catalog is None or not len(catalog):
        return pd.DataFrame(columns=cols)
    want = list(kinds) if kinds is not None else [k for k in PROBE_KINDS if k in set(catalog["kind"])]
    shapes = catalog[list(OP_SHAPE)].reset_index(drop=True)
    one_head = shapes.assign(heads=np.where(shapes["kind"].isin(["matmul", "sdpa"]), 1, shapes["heads"]))
    fits, fits_one = _fit_matrix(shapes, batches, max_MMAC, max_MB), _fit_matrix(one_head, batches, max_MMAC, max_MB)
    picked = []
    for kind in want:
        got = 0
        for i in rng.permutation(np.flatnonzero((shapes["kind"] == kind).to_numpy())):
            if got >= per_kind:
                break
            r, ok = shapes.iloc[int(i)].to_dict(), fits[i]
            if not ok.any() and kind in ("matmul", "sdpa"):
                r, ok = one_head.iloc[int(i)].to_dict(), fits_one[i]   # one head of a product too large for a call
            if ok.any():
                picked.append({**r, "batch_size": int(rng.choice(np.asarray(batches)[ok]))})
                got += 1
    return pd.DataFrame(picked, columns=cols)


def _fit_matrix(shapes: pd.DataFrame, batches: list[int], max_MMAC: float, max_MB: float) -> np.ndarray:
    """(n shapes, n batches) bool: whether each operation at each batch stays within the plan's budget (work at
    fp32, :func:`carb.data.probes.op_work`)."""
    out = np.zeros((len(shapes), len(batches)), dtype=bool)
    compute = shapes["kind"].isin(COMPUTE_KINDS).to_numpy()
    for j, b in enumerate(batches):
        w = op_work(shapes.assign(batch_size=b, precision="fp32"))
        macs, moved = w["macs"].to_numpy(float), (w["act_bytes"] + w["out_bytes"]).to_numpy(float)
        ok = np.isfinite(macs) & np.isfinite(moved) & (moved <= max_MB * 2.0**20)
        out[:, j] = ok & (~compute | (macs <= max_MMAC * 1e6))
    return out
