"""Measure what the latency prior's CPU dispatch terms model, on this CPU, and draw it.

    python scripts/studies/cpu_dispatch.py [--out docs/figures] [--repeats 3]

Run it alone on an idle machine (it times forwards). One torch thread and glibc's allocator pinned, as
``measure=cpu`` collects. Two panels, a CSV beside the PNG, and the printed table:

1. Latency per batch of bottleneck-152 (width 1.0, 32 px, ImageNet stem, fp32) at batch 1-32, beside the
   MB of weights PyTorch's native per-image path streams (:func:`carb.design.shapes.native_weight_MB`):
   with one thread, stride-1 1 x 1 convolutions at batch 2-15 run one GEMM per image, so the forward at
   batch 8 is slower than at batch 16.
2. GMAC/s of one 3 x 3 convolution (32 -> 32 channels, batch 1) in fp16 and fp32 against the map size:
   fp16 without AVX-512 FP16 runs PyTorch's fallback GEMM, whose rate falls with the power-of-two alignment
   of its rows (output pixels x 2 bytes), the ``native_aliased_MAC`` term.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MAP_SIZES = (24, 28, 32, 40, 48, 56, 64, 72, 96, 112, 128)
BATCHES = (1, 2, 4, 8, 12, 15, 16, 24, 32)
#: torch's backend names as the README calls them.
NAMES = {"Mkldnn": "oneDNN", "Slow2d": "native"}


def best_ms(fn, repeats: int, min_s: float = 0.2) -> float:
    """Best of ``repeats`` windows of at least ``min_s`` seconds; ms per call (the device probe's timer)."""
    from carb.measure.probe import best_ms as probe_best_ms

    return probe_best_ms(fn, repeats, min_s)


def network_rows(repeats: int) -> list[dict]:
    """Latency of bottleneck-152 w1.0 32 px fp32 per batch, with the native-path MB."""
    import pandas as pd
    import torch

    from carb.design.arch import ArchConfig
    from carb.design.features import grid_features
    from carb.design.resnet import build_model
    from carb.design.shapes import native_weight_MB

    rows = []
    model = build_model(ArchConfig("bottleneck", 152, 1.0, 32, 1, "fp32", True)).eval()
    for b in BATCHES:
        cfg = ArchConfig("bottleneck", 152, 1.0, 32, b, "fp32", True)
        x = torch.randn(b, 3, 32, 32)
        with torch.no_grad():
            ms = best_ms(lambda: model(x), repeats)
        mb = float(native_weight_MB(grid_features([cfg]), 1, ("fp32", "bf16")).iloc[0])
        rows.append({"panel": "network", "batch_size": b, "latency_ms": ms, "native_weight_MB": mb})
        print(f"  bottleneck-152 32 px fp32 batch {b:>2}: {ms:7.1f} ms, native path streams {mb:7.1f} MB")
    return pd.DataFrame(rows).to_dict("records")


def conv_rows(repeats: int) -> list[dict]:
    """GMAC/s of a 3 x 3 conv 32 -> 32, batch 1, per map size, fp16 and fp32, with the backend torch picks."""
    import torch

    rows = []
    for dtype, name in ((torch.float16, "fp16"), (torch.float32, "fp32")):
        conv = torch.nn.Conv2d(32, 32, 3, padding=1, bias=False).to(dtype).eval()
        for h in MAP_SIZES:
            x = torch.randn(1, 32, h, h, dtype=dtype)
            backend = str(torch._C._select_conv_backend(x, conv.weight, None, [1, 1], [1, 1], [1, 1], False,
                                                        [0, 0], 1, None)).split(".")[-1]
            with torch.no_grad():
                ms = best_ms(lambda: conv(x), repeats, min_s=0.1)
            row_bytes = h * h * (2 if name == "fp16" else 4)
            align = row_bytes & -row_bytes
            rows.append({"panel": "conv", "precision": name, "map_px": h, "gmac_per_s": h * h * 32 * 32 * 9 / ms / 1e6,
                         "backend": backend, "row_alignment_B": align})
            print(f"  3x3 conv 32->32 {name} {h:>3} px ({backend}, rows aligned to {align} B): "
                  f"{rows[-1]['gmac_per_s']:6.2f} GMAC/s")
    return rows


def draw(net: list[dict], conv: list[dict], path: Path) -> None:
    """Two panels side by side, Okabe-Ito colours, 1200 px wide."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    bs = [r["batch_size"] for r in net]
    a.plot(bs, [r["latency_ms"] for r in net], "o-", color="#0072B2", label="measured latency (ms per batch)")
    a.set_xlabel("batch size")
    a.set_ylabel("latency (ms per batch)")
    a2 = a.twinx()
    a2.plot(bs, [r["native_weight_MB"] for r in net], "s--", color="#D55E00", label="MB streamed by the native path")
    a2.set_ylabel("MB of weights streamed by the native path")
    a.set_title("bottleneck-152, 32 px, fp32, one thread", fontsize=10)
    lines = a.get_legend_handles_labels()[0] + a2.get_legend_handles_labels()[0]
    a.legend(lines, [ln.get_label() for ln in lines], fontsize=8, loc="upper right")
    for name, colour, marker in (("fp16", "#CC79A7", "o"), ("fp32", "#009E73", "s")):
        rs = [r for r in conv if r["precision"] == name]
        paths: dict[str, list[str]] = {}
        for r in rs:
            paths.setdefault(NAMES.get(r["backend"], r["backend"]), []).append(str(r["map_px"]))
        major = max(paths, key=lambda k: len(paths[k]))
        where = "; ".join([major, *(f"{k} at {', '.join(v)} px" for k, v in paths.items() if k != major)])
        b.plot([r["map_px"] for r in rs], [r["gmac_per_s"] for r in rs], marker=marker, color=colour,
               label=f"{name} ({where})")
        if name == "fp16":
            for r in rs:
                b.annotate(f"{r['row_alignment_B']} B", (r["map_px"], r["gmac_per_s"]), fontsize=7,
                           textcoords="offset points", xytext=(0, 6), ha="center")
    b.set_yscale("log")
    b.set_xlabel("feature map size (px)")
    b.set_ylabel("GMAC/s")
    b.set_title("3x3 conv 32->32, batch 1 (labels: fp16 row alignment)", fontsize=10)
    b.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures"))
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    import torch

    from carb.measure.cpu import pin_malloc

    torch.set_num_threads(1)
    pin_malloc(1024)
    print("bottleneck-152 latency per batch (one thread, allocator pinned):")
    net = network_rows(a.repeats)
    print("3x3 convolution rate per map size:")
    conv = conv_rows(a.repeats)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "cpu_dispatch.csv", "w", newline="") as f:
        keys = sorted({k for r in net + conv for k in r})
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(net + conv)
    draw(net, conv, out / "cpu_dispatch.png")
    print(f"wrote {out / 'cpu_dispatch.png'} and {out / 'cpu_dispatch.csv'}")


if __name__ == "__main__":
    main()
