"""Benchmark: screening time after the model is loaded, for the 3,072-point grid and a 100,000-point
grid, two-stage (source + target model), with the split between features, prediction and Pareto/flags.

Uses ``models:/<name>@champion`` from the local store when given (``--target``), else fits the
``carb_fast`` cascade on a shipped dataset in-process (``--data``: ``h200``, the main job's, whose
screening predicts GPU telemetry from the architecture, or ``reference``, the CPU one; not timed) and
uses it as both source and target. Last line: ``screen_3072_s=<s> screen_100k_s=<s>``.
"""
from __future__ import annotations

import argparse
import time

from carb.analysis import screening
from carb.design.arch import ArchConfig
from carb.design.space import configs_from_cfg, space_config


def big_grid(n: int, seed: int = 0) -> list[ArchConfig]:
    """``n`` distinct configs: a seeded sample of a widened screening product (both families)."""
    s = space_config("screening")
    s.update(mode="random", n=n, seed=seed,
             depths={"basic": [8, 14, 20, 32, 44, 56, 110, 152, 18, 34], "bottleneck": [26, 50, 101, 152, 200]},
             width_mults=[0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 1.5, 1.75, 2.0],
             input_sizes=[32, 48, 64, 80, 96, 112, 128, 160, 192, 224],
             batch_sizes=[1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256])
    return configs_from_cfg(s)


def fit_reference(data: str = "reference"):
    from carb.commands.cli import compose, to_dict
    from carb.data.io import reference_dataset
    from carb.data.schema import TARGETS, ok_rows
    from carb.data.split import split_dataset
    from carb.model.presets import build_cascade

    cfg = compose("train", ["model=carb_fast"])
    df = ok_rows(reference_dataset(data))
    tr, va, te = split_dataset(df, 0).frames(df)
    m = build_cascade(to_dict(cfg.model), to_dict(cfg.features))
    ts = [t for t in TARGETS if t in df]
    m.fit(tr, tr[ts], va, va[ts])
    m.record_test_mae(te, te[ts])
    return m


def run_once(configs, target, source) -> dict[str, float]:
    t = time.perf_counter()
    feats = screening.featurize(configs)
    t_feat = time.perf_counter() - t
    budget = {"peak_memory_MB": 64.0}
    res = screening.screen(feats, target, budget, None, source, 100)
    tm = res.timings_s
    pred = tm.get("predict_target_s", 0) + tm.get("predict_source_s", 0)
    return {"features_s": t_feat, "predict_s": pred, "pareto_flags_s": tm["screen_pareto_s"],
            "total_s": t_feat + pred + tm["screen_pareto_s"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=None)
    ap.add_argument("--source", default=None)
    ap.add_argument("--n-big", type=int, default=100_000)
    ap.add_argument("--data", default="h200", help="shipped dataset to fit on without --target (h200 | reference)")
    a = ap.parse_args()
    if a.target:
        from carb.tracking import load_cascade

        target = load_cascade(a.target)
        source = load_cascade(a.source) if a.source else target
    else:
        target = fit_reference(a.data)
        source = target
    grid = configs_from_cfg(space_config("screening"))
    run_once(grid[:200], target, source)  # warm-up
    from carb.design.features import clear_caches

    res = {}
    for name, cfgs in (("3072", grid), ("100k", None)):
        clear_caches()
        if cfgs is None:
            t = time.perf_counter()
            cfgs = big_grid(a.n_big)
            print(f"(building {len(cfgs)} ArchConfigs took {time.perf_counter() - t:.2f} s, not counted)")
        r = run_once(cfgs, target, source)
        res[name] = r
        print(f"{len(cfgs):>7} configs, two-stage: features {r['features_s']:.3f} s, prediction (source + target) "
              f"{r['predict_s']:.3f} s, budget/Pareto/flags {r['pareto_flags_s']:.3f} s, total {r['total_s']:.3f} s")
    print(f"screen_3072_s={res['3072']['total_s']:.3f} screen_100k_s={res['100k']['total_s']:.3f}")


if __name__ == "__main__":
    main()
