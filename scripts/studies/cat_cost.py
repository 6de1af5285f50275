"""Quiet per-operation timings behind the CPU zoo's concatenating families (issue 43): ``torch.cat`` of
DenseNet-like and Inception / SqueezeNet-like input lists, beside an element-wise add and a copy of the same
output, and the small convolutions of those families, at fp32 and bf16.

    python scripts/studies/cat_cost.py [--cases dense_b1_l6,fire_2way,...] [--precisions fp32 bf16]
        [--batch 1] [--out /tmp/cat_cost.csv] [--list]

Why: the CPU zoo's leave-one-family-out cascade (docs/MODEL.md, "Zoo networks as input") puts DenseNet 20 %
slow because its tree correction reads the concatenation bytes: every other concatenating family (SqueezeNet,
GoogLeNet, ShuffleNet, GhostNet, MixNet, MobileViT) is 14-30 % slower than the prior on this CPU, DenseNet is
not. Whether a concatenation's cost per MB depends on how many inputs it joins (DenseNet: up to 33 inputs of 32
channels; the others 2-4), or whether the others' excess is their small bf16 convolutions and pooling instead,
is what these timings say: per case ``ms`` per call, ``MB`` moved (inputs read plus output written, at the
precision's element size), ``ms_per_MB``, and ``vs_add`` (the cost per MB over an element-wise add of two
tensors of the output's shape, timed in the same run); for convolutions ``GMAC_per_s``.

Settings are ``carb-probe``'s (``conf/probe.yaml``: ``repeats`` timed windows of at least ``min_window_s``, the
best kept; ``measure=cpu``: its torch ``threads`` and the pinned allocator, ``malloc_mmap_threshold_MB``), so
the figures compare with the device probe's (``carb/data/device-probes.csv``). Run it with nothing else
running; a few seconds per case and precision.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: Concatenations, batch-1 shapes ``(channels of each input, H)``: DenseNet-121's (first input 64 or more
#: channels, then 32 per earlier layer; ``dense_b1_l6``: block 1 layer 6, 64 + 5 x 32 channels at 56 x 56 for a
#: 224 px input), GoogLeNet's inception 3a (4 inputs at 28 x 28), SqueezeNet 1.1's fire 2 expand (2 x 64 at 55 x 55)
#: and ShuffleNetV2's 2-way join (58 + 58 at 28 x 28).
CATS: dict[str, tuple[tuple[int, ...], int]] = {
    "dense_b1_l2": ((64, 32), 56),
    "dense_b1_l6": ((64, *[32] * 5), 56),
    "dense_b1_end": ((64, *[32] * 6), 56),
    "dense_b3_l24": ((256, *[32] * 23), 14),
    "dense_b1_l6_96px": ((64, *[32] * 5), 24),
    "inception_3a": ((64, 128, 32, 32), 28),
    "fire_2way": ((64, 64), 55),
    "shuffle_2way": ((58, 58), 28),
}
#: Convolutions ``(cin, cout, kernel, stride, H_in, groups)``: DenseNet's bottleneck 1x1 and growth 3x3 (block 1),
#: SqueezeNet's squeeze 1x1 and expand 3x3 (fire 2), GoogLeNet's 3a 3x3 reduce path, a ShuffleNetV2 depthwise 3x3.
CONVS: dict[str, tuple[int, int, int, int, int, int]] = {
    "dense_1x1": (224, 128, 1, 1, 56, 1),
    "dense_3x3": (128, 32, 3, 1, 56, 1),
    "fire_squeeze_1x1": (64, 16, 1, 1, 55, 1),
    "fire_expand_3x3": (16, 64, 3, 1, 55, 1),
    "inception_3x3": (96, 128, 3, 1, 28, 1),
    "shuffle_dw_3x3": (58, 58, 3, 1, 28, 58),
}


def cat_case(channels: tuple[int, ...], H: int, batch: int, dtype: Any) -> dict[str, Callable[[], Any]]:
    """Calls on tensors of ``batch`` x c x ``H`` x ``H``: ``cat`` (``torch.cat`` of one tensor per entry of
    ``channels``, dim 1), ``add`` (two tensors of the output's shape) and ``copy`` (a clone of the output)."""
    import torch

    xs = [torch.randn(batch, c, H, H).to(dtype) for c in channels]
    full = torch.randn(batch, sum(channels), H, H).to(dtype)
    other = torch.randn_like(full)
    return {"cat": lambda: torch.cat(xs, 1), "add": lambda: full + other, "copy": lambda: full.clone()}


def cat_MB(channels: tuple[int, ...], H: int, batch: int, element_bytes: int) -> dict[str, float]:
    """MB (2**20 bytes) each :func:`cat_case` call moves: inputs read plus output written."""
    out = batch * sum(channels) * H * H * element_bytes / 2**20
    return {"cat": 2 * out, "add": 3 * out, "copy": 2 * out}


def conv_case(cin: int, cout: int, kernel: int, stride: int, H: int, groups: int, batch: int,
              dtype: Any) -> tuple[Callable[[], Any], float]:
    """(call, million multiply-adds) of one 2-D convolution (padding ``kernel // 2``, no bias)."""
    import torch
    import torch.nn.functional as F

    x = torch.randn(batch, cin, H, H).to(dtype)
    w = torch.randn(cout, cin // groups, kernel, kernel).to(dtype)
    Ho = (H + 2 * (kernel // 2) - kernel) // stride + 1
    macs = batch * cout * Ho * Ho * (cin // groups) * kernel * kernel / 1e6
    return (lambda: F.conv2d(x, w, None, stride, kernel // 2, 1, groups)), macs


def settings() -> dict[str, Any]:
    """``carb-probe``'s timing settings: ``repeats``, ``min_window_s``, ``threads`` and
    ``malloc_mmap_threshold_MB`` (``conf/probe.yaml`` with ``measure=cpu``)."""
    from carb.commands.cli import compose, to_dict

    cfg = compose("probe")
    m = to_dict(cfg.measure)
    return {"repeats": int(cfg.repeats), "min_window_s": float(cfg.min_window_s), "threads": int(m["threads"]),
            "malloc_mmap_threshold_MB": m.get("malloc_mmap_threshold_MB")}


def run(cases: list[str], precisions: list[str], batch: int, s: dict[str, Any]) -> list[dict[str, Any]]:
    """Time every case at every precision with settings ``s`` (:func:`settings`); one dict per timed call."""
    import torch

    from carb.measure.base import torch_dtype
    from carb.measure.probe import best_ms

    torch.set_num_threads(s["threads"])
    out: list[dict[str, Any]] = []
    with torch.no_grad():
        for p in precisions:
            dtype, size = torch_dtype(p), torch.empty(0, dtype=torch_dtype(p)).element_size()
            for name in cases:
                if name in CATS:
                    ch, H = CATS[name]
                    calls, mb = cat_case(ch, H, batch, dtype), cat_MB(ch, H, batch, size)
                    ms = {k: best_ms(f, s["repeats"], s["min_window_s"]) for k, f in calls.items()}
                    for k in calls:
                        out.append({"precision": p, "case": name, "op": k, "inputs": len(ch), "ms": ms[k],
                                    "MB": mb[k], "ms_per_MB": ms[k] / mb[k],
                                    "vs_add": (ms[k] / mb[k]) / (ms["add"] / mb["add"])})
                else:
                    fn, macs = conv_case(*CONVS[name], batch, dtype)
                    ms = best_ms(fn, s["repeats"], s["min_window_s"])
                    out.append({"precision": p, "case": name, "op": "conv", "ms": ms, "MMAC": macs,
                                "GMAC_per_s": macs / ms})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="all", help="comma-separated case names (--list), or all")
    ap.add_argument("--precisions", nargs="*", default=["fp32", "bf16"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out", default=None, help="CSV of the timings (written atomically)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    a = ap.parse_args(argv)
    known = [*CATS, *CONVS]
    if a.list:
        print("\n".join(f"{k}: cat of {CATS[k][0]} channels at {CATS[k][1]} px" if k in CATS
                        else f"{k}: conv (cin, cout, kernel, stride, H, groups) = {CONVS[k]}" for k in known))
        return
    cases = known if a.cases == "all" else [c.strip() for c in a.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in known]
    if bad or not cases:
        print(f"--cases: unknown {bad or cases}; allowed: all or a comma-separated list of {known}", file=sys.stderr)
        raise SystemExit(2)
    if a.batch < 1:
        print(f"--batch: {a.batch}; allowed: an integer >= 1", file=sys.stderr)
        raise SystemExit(2)
    allowed = ("fp32", "bf16", "fp16")
    if not a.precisions or any(p not in allowed for p in a.precisions):
        print(f"--precisions: {a.precisions}; allowed: one or more of {list(allowed)}", file=sys.stderr)
        raise SystemExit(2)
    import pandas as pd

    from carb.measure.cpu import pin_malloc

    s = settings()
    if s["malloc_mmap_threshold_MB"]:
        pin_malloc(int(s["malloc_mmap_threshold_MB"]))
    print(f"threads {s['threads']}, repeats {s['repeats']}, min_window_s {s['min_window_s']}, "
          f"malloc_mmap_threshold_MB {s['malloc_mmap_threshold_MB']}, batch {a.batch}", flush=True)
    table = pd.DataFrame(run(cases, a.precisions, a.batch, s))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if a.out:
        from carb.files import write_atomic

        write_atomic(Path(a.out), lambda tmp: table.to_csv(tmp, index=False))


if __name__ == "__main__":
    main()
