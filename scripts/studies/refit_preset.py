"""Study: do lighter evaluation refits (``evaluate.refits.light``) move carb-train's evaluation figures?

``carb-train`` on the shipped CPU reference (defaults) for each split seed, once with the refits at the
registered model's sizes (``light=false``) and once light (``light=true``, ``tree_share``), and compares
the figures the refits make: each extrapolation split's R^2, MAPE and interval coverage, the new-architecture
interval bounds, leave-one-batch-tier-out R^2, and the test coverage of the model's intervals. A figure
"moves" when the mean over seeds of (light - full), paired by seed, exceeds the seed-to-seed spread (the
standard deviation over seeds of the full refits' figure).

    python -m scripts.studies.refit_preset [--seeds 0 1 2] [--tree-share 0.3] [--data reference]

Last line: ``refit_preset: figures=<n> moved=<n> max_ratio=<max |mean diff| / spread> light_s=<s> full_s=<s>``.
"""
from __future__ import annotations

import argparse
import re
import tempfile
import time

import numpy as np

#: The figures compared (metric name patterns of carb-train).
FIGURES = (r"^xval_[a-z]+_[a-zA-Z_]+_(r2|mape)$", r"^interval_(batch|depth|width|input|precision)_.+_coverage$",
           r"^interval_new_arch_.+_(lower|upper)$", r"^lobo_.+_r2$", r"^interval_test_[a-zA-Z_]+_coverage$")


def run(seed: int, light: bool, tree_share: float, data: str, store: str) -> tuple[dict[str, float], float]:
    """carb-train's metrics for one seed and refit preset, and its wall seconds."""
    from carb.commands.cli import compose
    from carb.commands.train import run_train

    cfg = compose("train", [f"data={data}", f"split.seed={seed}", f"evaluate.refits.light={str(light).lower()}",
                            f"evaluate.refits.tree_share={tree_share}", "evaluate.figures=false", "register=false",
                            "print_table=false", "progress.enabled=false", f"tracking.uri=sqlite:///{store}/mlflow.db",
                            f"paths.output_dir={store}/out"])
    t0 = time.perf_counter()
    out = run_train(cfg)
    return dict(out["metrics"]), time.perf_counter() - t0


def compare(full: list[dict[str, float]], light: list[dict[str, float]]) -> list[dict]:
    """Per figure: mean of the full and light refits, paired mean difference, seed spread, moved?"""
    keys = sorted(k for k in full[0] if any(re.match(p, k) for p in FIGURES)
                  and all(np.isfinite(m.get(k, np.nan)) for m in full + light))
    rows = []
    for k in keys:
        f = np.array([m[k] for m in full])
        g = np.array([m[k] for m in light])
        spread = float(f.std(ddof=1)) if len(f) > 1 else float("nan")
        diff = float((g - f).mean())
        rows.append({"figure": k, "full": float(f.mean()), "light": float(g.mean()), "diff": diff, "spread": spread,
                     "moved": bool(abs(diff) > max(spread, 1e-4))})   # 1e-4: figures that do not vary over seeds
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--tree-share", type=float, default=0.3)
    ap.add_argument("--data", default="reference")
    a = ap.parse_args()
    full, light, secs = [], [], {"full": 0.0, "light": 0.0}
    with tempfile.TemporaryDirectory() as store:
        for s in a.seeds:
            for is_light, bucket in ((False, full), (True, light)):
                m, dt = run(s, is_light, a.tree_share, a.data, store)
                bucket.append(m)
                secs["light" if is_light else "full"] += dt
                print(f"seed {s} {'light' if is_light else 'full '}: {dt:.1f} s", flush=True)
    rows = compare(full, light)
    print(f"\n| figure | full (mean of {len(a.seeds)} seeds) | light | light - full | seed spread (sd) | moved |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['figure']} | {r['full']:.4f} | {r['light']:.4f} | {r['diff']:+.4f} | {r['spread']:.4f} | "
              f"{'yes' if r['moved'] else 'no'} |")
    ratios = [abs(r["diff"]) / r["spread"] for r in rows if r["spread"] > 0]
    print(f"refit_preset: figures={len(rows)} moved={sum(r['moved'] for r in rows)} "
          f"max_ratio={max(ratios) if ratios else float('nan'):.2f} light_s={secs['light']:.1f} full_s={secs['full']:.1f}")


if __name__ == "__main__":
    main()
