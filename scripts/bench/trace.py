"""Benchmark: meta-device layer tables (:func:`carb.design.trace.trace`) for a zoo of models, cold and
from the on-disk cache (issue 43's goal: 300 models cold in <= 60 s on 2 cores, from the cache <= 1 s).

The model list is ``--models FILE`` (one zoo name a line, ``#`` comments; e.g. the shipped zoo list) or,
by default, every torchvision classifier followed by timm's models with pretrained weights (tags dropped,
sorted, deduplicated, every k-th so the list spans timm's families) up to ``--n``. Each model is traced
at batch 1 and its default input size (timm's ``pretrained_cfg`` input size; 224 px, 299 for
inception_v3), in a fresh cache folder. Picking the list and the sizes is not timed.

* cold: ``--workers`` processes (fresh interpreters: the time includes importing torch, torchvision and
  timm, building each model on the meta device and tracing it) over the list, wall time;
* cache: the same tables again in this process, read from the cache (no torch import).

Refused models (one-line reasons) are counted and listed, not retried. Last line:
``trace: models=M traced=T refused=R workers=W trace_cold_s=X trace_cache_s=X cold_ms_per_model=X``.
Run it on a quiet machine: ``python scripts/bench/trace.py --n 300 --workers 2``.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

#: torchvision classifiers whose default input side is not 224.
TV_SIDES = {"inception_v3": 299}


def default_models(n: int) -> list[str]:
    """torchvision's classifiers, then timm models with pretrained weights (every k-th), ``n`` in all."""
    from carb.design.zoo import import_torchvision

    from carb.design.zoo import import_timm

    tv = import_torchvision()
    names = [f"tv:{m}" for m in sorted(tv.models.list_models(module=tv.models))]
    timm = import_timm()
    timm_names = sorted({m.split(".")[0] for m in timm.list_models(pretrained=True)})
    need = max(n - len(names), 0)
    step = max(len(timm_names) // max(need, 1), 1)
    names += [f"timm:{m}" for m in timm_names[::step][:need]]
    return names[:n]


def input_side(name: str) -> int:
    """The model's default input side (px)."""
    from carb.design.zoo import import_timm, resolve

    lib, base = resolve(name)
    if lib == "tv":
        return TV_SIDES.get(base, 224)
    timm = import_timm()

    try:
        cfg = timm.models.get_pretrained_cfg(base)
        return int(cfg.input_size[-1]) if cfg is not None and cfg.input_size else 224
    except Exception:  # noqa: BLE001 - an odd entry keeps the common default
        return 224


def _trace_chunk(jobs: list[tuple[str, int]]) -> list[tuple[str, str | None]]:
    """Trace each ``(name, side)`` in this worker; ``(name, None)`` or ``(name, reason)``."""
    import warnings

    from carb.design.trace import trace
    from carb.errors import ZooError

    warnings.filterwarnings("ignore")
    out = []
    for name, side in jobs:
        try:
            trace(name, (1, 3, side, side))
            out.append((name, None))
        except ZooError as e:
            out.append((name, str(e)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="models (default list only)")
    ap.add_argument("--models", type=Path, help="file of zoo names, one a line")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    os.environ["CARB_CACHE"] = tempfile.mkdtemp(prefix="carb-trace-bench-")
    if args.models:
        lines = [s.split("#")[0].strip() for s in args.models.read_text().splitlines()]
        names = [s for s in lines if s]
    else:
        names = default_models(args.n)
    from carb.errors import ZooError

    jobs, unknown = [], {}
    for n in names:
        try:
            jobs.append((n, input_side(n)))
        except ZooError as e:
            unknown[n] = str(e)
    chunks = [jobs[i::args.workers] for i in range(args.workers)]

    t = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        results = [r for part in pool.map(_trace_chunk, chunks) for r in part]
    cold = time.perf_counter() - t
    refused = {**unknown, **{n: why for n, why in results if why is not None}}
    traced = [(n, s) for n, s in jobs if n not in refused]

    from carb.design.trace import trace

    t = time.perf_counter()
    for name, side in traced:
        trace(name, (1, 3, side, side))
    cached = time.perf_counter() - t
    for name, why in sorted(refused.items()):
        print(f"refused: {why}")
    print(f"cold: {len(jobs)} models on {args.workers} processes in {cold:.2f} s; "
          f"cache: {len(traced)} tables in {cached:.3f} s (torch imported: {'torch' in sys.modules})")
    print(f"trace: models={len(names)} traced={len(traced)} refused={len(refused)} workers={args.workers} "
          f"trace_cold_s={cold:.2f} trace_cache_s={cached:.3f} cold_ms_per_model={1000 * cold / max(len(jobs), 1):.0f}")


if __name__ == "__main__":
    main()
