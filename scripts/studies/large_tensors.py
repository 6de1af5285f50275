"""Do single operators slow down on tensors of more than 2**31 elements? A one-minute GPU check.

    python3 scripts/studies/large_tensors.py --out $OUT/h200          # on the lent GPU (torch only)
    python3 scripts/studies/large_tensors.py --out /tmp/lt --fake     # dry run on a CPU, tiny tensors

Why: the two largest misses of CARB's extrapolation were both configurations whose activations pass 2**31
elements: on the shipped H200 data the 12 such rows (of 1,138) are under-predicted by 3-7 % out of fold
where other heavy rows are over-predicted, and timm's RTX PRO 6000 Max-Q runs bottleneck ResNets at 288 px,
batch 2048 (every stage-1 block on 2.7e9-element tensors) 4-7 % slower per multiply-add than at 224 px.
PyTorch indexes with 32 bits when it can: past 2**31 - 1 elements cuDNN convolutions run in batch chunks,
and batch norm leaves cuDNN for its native kernel (fp32, or fp16 with fp32 weights; bf16 never uses it).
timm's own table rules that out for the Max-Q (:mod:`carb.analysis.input_efficiency`: 160 and 176 px,
far below the line, are even slower per multiply-add than 288 px), so the question left is the H200's.
This script times the operators a ResNet is made of on NCHW tensors just below and just above that line
(``--margin``, 5 % by default), per precision, so the slowdown per element is measured instead of guessed.

Writes ``large_tensors.csv`` into ``--out``: one row per precision x operator x side of the line, with
``N, C, H`` (the input shape ``(N, C, H, H)``), ``elements`` (of the input), ``above_2_31``,
``ms_median`` and ``ms_min`` (per call; CUDA events; ``--repeats`` timed calls after 2 warm-ups),
``ns_per_Melement`` (median time per million input elements) and ``error`` (out of memory or another
runtime error, then no timing). The last line it prints compares the two sides per operator and precision
(``above / below`` time per element). Imports torch and the standard library only.
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from pathlib import Path

#: The line: 32-bit signed indexing covers tensors of fewer elements than this.
LIMIT = 2**31
#: Operators timed (name -> what it is in a ResNet).
OPERATORS = ("conv3x3", "conv1x1", "batchnorm", "relu", "add")
COLUMNS = ("precision", "operator", "N", "C", "H", "elements", "above_2_31", "ms_median", "ms_min",
           "ns_per_Melement", "error")


def batch_for(elements: float, C: int, H: int) -> int:
    """The batch size N whose input ``(N, C, H, H)`` has the element count closest to ``elements``."""
    return max(1, int(round(elements / (C * H * H))))


def make_op(torch, name: str, C: int, dtype, device):
    """``(module or callable, needs a second input)`` for one operator at ``C`` channels."""
    nn = torch.nn
    if name == "conv3x3":
        return nn.Conv2d(C, C, 3, padding=1, bias=False).to(device=device, dtype=dtype).eval(), False
    if name == "conv1x1":
        return nn.Conv2d(C, C, 1, bias=False).to(device=device, dtype=dtype).eval(), False
    if name == "batchnorm":
        return nn.BatchNorm2d(C).to(device=device, dtype=dtype).eval(), False
    if name == "relu":
        return nn.ReLU(inplace=False), False
    if name == "add":
        return (lambda a, b: a + b), True
    raise ValueError(f"operator {name!r}; allowed: {OPERATORS}")


def time_calls(torch, fn, repeats: int, cuda: bool) -> list[float]:
    """Milliseconds of ``repeats`` calls of ``fn`` after 2 warm-up calls (CUDA events on a GPU)."""
    for _ in range(2):
        fn()
    out = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            out.append(float(start.elapsed_time(end)))
        else:
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def measure(torch, precision: str, name: str, N: int, C: int, H: int, repeats: int, device, limit: int) -> dict:
    """One row of the table (see the module docstring); errors become the ``error`` column."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    cuda = device.type == "cuda"
    row = {"precision": precision, "operator": name, "N": N, "C": C, "H": H, "elements": N * C * H * H,
           "above_2_31": N * C * H * H >= limit, "ms_median": math.nan, "ms_min": math.nan,
           "ns_per_Melement": math.nan, "error": ""}
    x = y = None
    try:
        op, binary = make_op(torch, name, C, dtype, device)
        # constant inputs: these kernels' time does not depend on the values, and a fill kernel is safe
        # at any size (the point is to time the operator, not the random number generator above 2**31)
        x = torch.full((N, C, H, H), 0.5, device=device, dtype=dtype)
        y = torch.full_like(x, 0.25) if binary else None
        with torch.no_grad():
            ms = time_calls(torch, (lambda: op(x, y)) if binary else (lambda: op(x)), repeats, cuda)
        row.update(ms_median=statistics.median(ms), ms_min=min(ms),
                   ns_per_Melement=statistics.median(ms) * 1e6 / (row["elements"] / 1e6))
    except RuntimeError as e:   # out of memory, or a kernel that refuses the size
        row["error"] = " ".join(str(e).split())[:200]
    finally:
        del x, y
        if cuda:
            torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for large_tensors.csv")
    ap.add_argument("--precisions", default="bf16,fp16,fp32")
    ap.add_argument("--channels", type=int, default=256, help="C of the (N, C, H, H) input")
    ap.add_argument("--size", type=int, default=56, help="H of the input")
    ap.add_argument("--margin", type=float, default=0.05, help="below: (1 - margin) x 2**31 elements, above: (1 + margin) x")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--fake", action="store_true", help="CPU dry run: the line at 2**14 elements, C=4, H=8")
    a = ap.parse_args(argv)
    import torch

    limit, C, H = (2**14, 4, 8) if a.fake else (LIMIT, a.channels, a.size)
    device = torch.device("cpu" if a.fake else "cuda")
    if not a.fake:
        torch.backends.cudnn.benchmark = False
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for precision in [p for p in a.precisions.split(",") if p]:
        for name in OPERATORS:
            for side in (1 - a.margin, 1 + a.margin):
                N = batch_for(side * limit, C, H)
                rows.append(measure(torch, precision, name, N, C, H, a.repeats, device, limit))
                r = rows[-1]
                print(f"{precision} {name} N={N} elements={r['elements']:.3g} "
                      f"{'above' if r['above_2_31'] else 'below'}: {r['ms_median']:.3f} ms {r['error']}", flush=True)
    with open(out / "large_tensors.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    ratios = []
    for precision in {r["precision"] for r in rows}:
        for name in OPERATORS:
            side = {r["above_2_31"]: r["ns_per_Melement"] for r in rows if r["precision"] == precision and r["operator"] == name}
            if side.get(True, math.nan) > 0 and side.get(False, math.nan) > 0:
                ratios.append(f"{precision}/{name} {side[True] / side[False]:.2f}")
    print("above/below time per element: " + ", ".join(sorted(ratios)), flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
