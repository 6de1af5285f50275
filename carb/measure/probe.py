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
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from carb.data.probes import PROBE_COLUMNS
from carb.design.shapes import layer_array, out_size, space_layers
from carb.errors import ConfigError

__all__ = ["PROBE_BATCHES", "PROBE_COLUMNS", "backend", "best_ms", "layer_array", "out_size", "probe_plan",
           "run_probe", "space_layers", "torch_threads_and_version"]
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
    """Time every row of ``plan`` (:func:`probe_plan`) at each precision on this process's CPU with
    ``threads`` torch threads; a :data:`PROBE_COLUMNS` table. ``progress(done, total)`` is called after
    each timing. Restores the torch thread count."""
    import torch

    from carb.measure.base import torch_dtype

    precisions = list(precisions)
    for p in precisions:
        torch_dtype(p)   # ConfigError naming the allowed values
    prev = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    rows, total, done = [], len(plan) * len(precisions), 0
    try:
        with torch.no_grad():
            for p in precisions:
                dtype = torch_dtype(p)
                for r in plan.itertuples(index=False):
                    w = torch.randn(r.cout, r.cin, r.kernel, r.kernel).to(dtype)
                    x = torch.randn(r.batch_size, r.cin, r.H_in, r.H_in).to(dtype)
                    pad = r.kernel // 2
                    ms = best_ms(lambda: torch.nn.functional.conv2d(x, w, None, r.stride, pad), repeats, min_window_s)
                    rows.append({"device_id": device_id, "threads": int(threads), "precision": p,
                                 "cin": r.cin, "cout": r.cout, "kernel": r.kernel, "stride": r.stride, "H_in": r.H_in,
                                 "batch_size": r.batch_size, "time_ms": ms, "backend": backend(x, w, r.stride, pad)})
                    done += 1
                    if progress:
                        progress(done, total)
    finally:
        torch.set_num_threads(prev)
    return pd.DataFrame(rows, columns=list(PROBE_COLUMNS))


def backend(x: Any, w: Any, stride: int, pad: int) -> str:
    """The convolution backend torch picks for these tensors ("Mkldnn", "Slow2d", ...), "" when this
    torch cannot say."""
    import torch

    try:
        b = torch._C._select_conv_backend(x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, None)
        return str(b).split(".")[-1]
    except (AttributeError, RuntimeError, TypeError):
        return ""


def torch_threads_and_version(threads: int | None) -> tuple[int, str]:
    """``(threads, torch version)``: ``threads`` as given, or torch's current thread count when None."""
    import torch

    return (int(threads) if threads else torch.get_num_threads()), str(torch.__version__)
