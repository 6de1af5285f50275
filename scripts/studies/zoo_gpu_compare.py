"""Compare the GPU part of two ``scripts/bench/zoo.py --out`` JSONs, per device: families within 20 %, pooled MAPE,
worst family, lowest Spearman, mean family MAPE, coverage; the families that moved most, crossed 20 % or came back.

Usage::

    python scripts/studies/zoo_gpu_compare.py scripts/data/zoo_bench.json /tmp/zgpu8/b.json
"""
from __future__ import annotations

import json
import sys


def load(path: str) -> dict[str, dict]:
    """``{device: entry}`` of the GPU part (with the trace features) of one zoo.py JSON."""
    with open(path) as f:
        return {e["device"]: e for e in json.load(f)["gpu"] if e.get("trace", True)}


def device_lines(dev: str, b: dict, n: dict) -> list[str]:
    """The comparison lines of one device (``b``: before, ``n``: after)."""
    mean = lambda e: sum(r["carb_mape_pct"] for r in e["table"]) / len(e["table"])   # noqa: E731
    out = [f"{dev}: within20 {b['within20']}/{b['families']} -> {n['within20']}/{n['families']}; pooled "
           f"{b['carb_pooled_pct']:.2f} -> {n['carb_pooled_pct']:.2f}; worst {b['worst']} {b['mape_max']:.1f} -> "
           f"{n['worst']} {n['mape_max']:.1f}; rho_min {b['rho_min']:.2f} -> {n['rho_min']:.2f}; coverage "
           f"{b['coverage']:.3f} -> {n['coverage']:.3f}; mean fam {mean(b):.2f} -> {mean(n):.2f}; b1 wins "
           f"{b['b1_wins']} -> {n['b1_wins']}"]
    bt = {r["family"]: r["carb_mape_pct"] for r in b["table"]}
    nt = {r["family"]: r["carb_mape_pct"] for r in n["table"]}
    moves = sorted((nt[f] - bt[f], f) for f in bt if f in nt)
    fmt = lambda fs: ", ".join(f"{f} {bt[f]:.1f}->{nt[f]:.1f}" for f in fs) or "none"   # noqa: E731
    out += [f"  better: {fmt([f for _, f in moves[:8]])}", f"  worse: {fmt([f for _, f in moves[::-1][:8]])}",
            f"  crossed 20 %: {fmt([f for f in bt if f in nt and bt[f] <= 20 < nt[f]])} | back within: "
            f"{fmt([f for f in bt if f in nt and nt[f] <= 20 < bt[f]])}"]
    return out


def main() -> None:
    """Print the comparison of the two JSONs named on the command line."""
    if len(sys.argv) != 3:
        print("usage: zoo_gpu_compare.py BEFORE.json AFTER.json", file=sys.stderr)
        raise SystemExit(2)
    before, after = load(sys.argv[1]), load(sys.argv[2])
    for dev in before:
        if dev in after:
            print("\n".join(device_lines(dev, before[dev], after[dev])))


if __name__ == "__main__":
    main()
