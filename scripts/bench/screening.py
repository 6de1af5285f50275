"""Benchmark: screening time and peak memory after the model is loaded, OLD commit vs the current tree,
side by side in one run (timings on a shared machine are noisy: compare the ratios of one run).

Three grids, each screened two-stage (source + target model, both the same fitted cascade, as before)
from the knob space to the screened result (candidates built, featurized, scored with intervals,
decisions, Pareto front, shortlist), the model load not counted. A tree with ``screen.rescore`` screens with
its default (``top_k``: the target re-scores only the source's top 100, the paper's two-stage) unless
``--rescore all`` (every candidate scored by both models, what older trees always did):

* ``3072``: the 3,072-point ``screening`` space, in ``--repeats`` (5) fresh processes per tree, the median
  reported (each process: load, a warm-up screening, the caches emptied, one timed screening, as a
  ``carb-screen`` process screens once; a single run moves by about a tenth from run to run);
* ``100k``: a seeded random 100,000 of a widened screening space (both families, 11 batch sizes; the
  grid of the numbers quoted in issue 32: 9,900 architectures);
* ``1m``: a seeded random 1,000,000 of a NAS-sized space (57 width multipliers, 15 input sizes, three
  bottleneck inner widths; 42,750 architectures at 3 precisions and 11 batch sizes).

Each (tree, grid) runs in its own subprocess (``PYTHONPATH`` = that tree) so ``ru_maxrss`` is that run's
peak resident memory (model and imports included). The OLD tree is ``git worktree add``-ed into a temp
folder at ``--old`` (default 1ade655, before chunked screening) and removed at the end. Without
``--target`` each tree fits the ``carb_fast`` cascade on a shipped dataset (``--data``, default ``h200``,
whose screening predicts GPU telemetry per candidate) in a subprocess of its own, not timed. The OLD tree
skips 1M when its 100k time x 10 exceeds ``--old-cap-s`` (and is stopped at that cap otherwise); the
table says so. The current tree screens in chunks of ``screen.chunk_rows`` (conf/screen/default.yaml).

Last line, machine-readable (new tree's seconds and peak MB, ratios old / new):
``screen_speed: s3072=<s> s100k=<s> s1m=<s> peak_MB_1m=<MB> ratio_3072=<x> ratio_100k=<x> ratio_1m=<x|skipped>``.

    python -m scripts.bench.screening                  # the full comparison (about 10 minutes idle)
    python -m scripts.bench.screening --sizes 3072,100000 --old-cap-s 120
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMES = {3072: "3072", 100_000: "100k", 1_000_000: "1m"}
SMALL = 10_000   # grids under this many candidates are screened in --repeats fresh processes per tree


def space_for(n: int, seed: int = 0) -> dict:
    """The knob space of grid size ``n`` as a plain dict (see the module docstring)."""
    from carb.design.space import space_config

    s = space_config("screening")
    if n == 3072:
        return s
    if n <= 108_900:    # the widened screening space of the earlier benchmark (108,900 configurations)
        s.update(mode="random", n=n, seed=seed,
                 depths={"basic": [8, 14, 20, 32, 44, 56, 110, 152, 18, 34], "bottleneck": [26, 50, 101, 152, 200]},
                 width_mults=[0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 1.5, 1.75, 2.0],
                 input_sizes=[32, 48, 64, 80, 96, 112, 128, 160, 192, 224],
                 batch_sizes=[1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256])
        return s
    s.update(mode="random", n=n, seed=seed,      # NAS-sized: 1,410,750 configurations
             depths={"basic": [8, 14, 20, 32, 44, 56, 110, 152, 18, 34], "bottleneck": [26, 50, 101, 152, 200]},
             width_mults=[round(0.25 + i / 32, 5) for i in range(57)], input_sizes=list(range(32, 257, 16)),
             batch_sizes=[1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256], inner_mults=[1.0, 1.5, 2.0])
    return s


def big_grid(n: int, seed: int = 0) -> list:
    """``n`` distinct configs (ArchConfig objects) of :func:`space_for` (kept for other scripts)."""
    from carb.design.space import configs_from_cfg

    return configs_from_cfg(space_for(n, seed))


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


# ----------------------------------------------------------------------------- worker (any tree)
def _chunk_rows() -> int | None:
    """``screen.chunk_rows`` of this tree's conf (None where the tree has no such setting)."""
    import yaml

    conf = yaml.safe_load((Path(os.environ.get("CARB_BENCH_TREE", ".")) / "conf/screen/default.yaml").read_text())
    return conf.get("chunk_rows")


def run_once(space: dict, target, source) -> dict[str, float]:
    """Screen ``space`` with this tree's API: the knob-frame path and chunks where the tree has them,
    else ArchConfig objects in one pass. Returns seconds per step and in all."""
    import inspect

    from carb.analysis import screening

    params = inspect.signature(screening.screen).parameters
    kw = {"chunk_rows": _chunk_rows()} if "chunk_rows" in params else {}   # read before the clock: the bench's own
    t0 = time.perf_counter()
    try:
        from carb.design.space import space_frame
        cands = space_frame(space)
    except ImportError:       # a tree before knob frames
        from carb.design.space import configs_from_cfg
        cands = configs_from_cfg(space)
    t1 = time.perf_counter()
    # a tree whose screen() featurizes knob frames itself (in its chunk workers) gets the knob frame, as
    # carb-screen gives it; its featurizing is then in screen_s
    feats = cands if hasattr(screening, "needs_features") and not isinstance(cands, list) else screening.featurize(cands)
    t2 = time.perf_counter()
    if "workers" in params:   # as carb-screen runs it: processes by the compute policy (cores, load, CARB_N_JOBS)
        from carb.compute import configure, estimator_threads
        configure(n_jobs=os.environ.get("CARB_N_JOBS") or "auto")
        kw["workers"] = estimator_threads(len(feats))
    if "rescore" in params and os.environ.get("CARB_BENCH_RESCORE"):
        kw["rescore"] = os.environ["CARB_BENCH_RESCORE"]
    res = screening.screen(feats, target, {"peak_memory_MB": 64.0}, None, source, 100, **kw)
    t3 = time.perf_counter()
    tm = res.timings_s
    return {"candidates_s": t1 - t0, "features_s": t2 - t1,
            "predict_s": tm.get("predict_target_s", 0) + tm.get("predict_source_s", 0),
            "screen_s": t3 - t2, "total_s": t3 - t0, "n": len(res.scored)}


def worker(args: argparse.Namespace) -> None:
    """One subprocess: ``fit`` (pickle a model) or ``screen`` (one grid); prints one JSON line."""
    import pickle

    if args.worker == "fit":
        if args.target:
            from carb.tracking import load_cascade
            m = load_cascade(args.target)
        else:
            m = fit_reference(args.data)
        Path(args.model).write_bytes(pickle.dumps(m))
        print(json.dumps({"ok": True}))
        return
    m = pickle.loads(Path(args.model).read_bytes())
    run_once(space_for(3072) | {"mode": "random", "n": 200, "seed": 1}, m, m)   # warm-up, not timed
    from carb.design import features as f
    getattr(f, "clear_caches", lambda: None)()
    before = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    r = run_once(space_for(args.n), m, m)
    after = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    r["peak_MB"] = after[0].ru_maxrss / 1024.0
    r["workers_peak_MB"] = after[1].ru_maxrss / 1024.0     # the largest worker process (0: none)
    r["cpu_s"] = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
    print(json.dumps(r))


# ----------------------------------------------------------------------------- driver
def _sub(tree: Path, argv: list[str], timeout: float | None) -> dict | str:
    """Run this script as a worker with ``tree`` on PYTHONPATH; its JSON, or why there is none."""
    env = {**os.environ, "PYTHONPATH": str(tree), "CARB_BENCH_TREE": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv]
    try:
        p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"stopped at the {timeout:.0f} s cap"
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        return f"failed (rc {p.returncode}): {(p.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    return json.loads(lines[-1])


def _old_tree(commit: str, tmp: Path) -> Path:
    path = tmp / f"old-{commit}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(path), commit],
                   check=True, capture_output=True)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", default="1ade655", help="commit to compare against (git worktree)")
    ap.add_argument("--sizes", default="3072,100000,1000000")
    ap.add_argument("--old-cap-s", type=float, default=300.0, help="most seconds the old tree may take per grid")
    ap.add_argument("--data", default="h200", help="shipped dataset to fit on without --target (h200 | reference)")
    ap.add_argument("--target", default=None, help="a registered model instead (models:/<name>@<alias>)")
    ap.add_argument("--rescore", default=None, choices=["top_k", "all"],
                    help="screen.rescore for trees that have it (default: the tree's own, top_k)")
    ap.add_argument("--repeats", type=int, default=5,
                    help=f"fresh processes per tree for grids under {SMALL:,} candidates (the median is reported: one "
                         "screening of a third of a second moves by a tenth from run to run)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.rescore:
        os.environ["CARB_BENCH_RESCORE"] = a.rescore     # read by the workers (run_once)
    with tempfile.TemporaryDirectory(prefix="carb-bench-screen-") as tmp_s:
        tmp = Path(tmp_s)
        old = _old_tree(a.old, tmp)
        try:
            res = _compare(a, sizes, {"old": old, "new": ROOT}, tmp)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], capture_output=True)
    _report(a, sizes, res)


def _compare(a: argparse.Namespace, sizes: list[int], trees: dict[str, Path], tmp: Path) -> dict:
    res: dict = {}
    for kind, tree in trees.items():
        model = tmp / f"model-{kind}.pkl"
        t = time.perf_counter()
        fit = _sub(tree, ["--worker", "fit", "--model", str(model), "--data", a.data]
                   + (["--target", a.target] if a.target else []), None)
        print(f"({kind}: model ready in {time.perf_counter() - t:.0f} s, not counted{'' if isinstance(fit, dict) else ': ' + fit})",
              flush=True)
        for n in sizes:
            prev = res.get((kind, 100_000))
            if kind == "old" and n >= 1_000_000 and isinstance(prev, dict) and prev["total_s"] * n / 100_000 > a.old_cap_s:
                res[(kind, n)] = (f"skipped: 100k took {prev['total_s']:.1f} s, x{n // 100_000} > "
                                  f"--old-cap-s {a.old_cap_s:.0f}")
            else:
                runs = [_sub(tree, ["--worker", "screen", "--model", str(model), "--n", str(n)],
                             a.old_cap_s if kind == "old" else None) for _ in range(a.repeats if n < SMALL else 1)]
                res[(kind, n)] = _median_run(runs)
            r = res[(kind, n)]
            print(f"  {kind} {NAMES.get(n, n)}: " + (f"{r['total_s']:.2f} s" + (
                  f" (median of {len(r['runs_s'])} processes: " + ", ".join(f"{v:.3f}" for v in r["runs_s"]) + ")"
                  if len(r.get("runs_s", ())) > 1 else "") + f" (candidates {r['candidates_s']:.2f}, "
                  f"features {r['features_s']:.2f}, screen {r['screen_s']:.2f} of which prediction "
                  f"{r['predict_s']:.2f}), CPU {r.get('cpu_s', float('nan')):.1f} s, peak {r['peak_MB']:.0f} MB"
                  + (f" (+ workers up to {r['workers_peak_MB']:.0f} MB each)" if r.get("workers_peak_MB") else "")
                  if isinstance(r, dict) else r), flush=True)
    return res


def _median_run(runs: list[dict | str]) -> dict | str:
    """The run of median total time among ``runs`` (each a worker's JSON, or why there is none), with every
    run's total in ``runs_s``; the first failure where one failed."""
    failed = [r for r in runs if not isinstance(r, dict)]
    if failed:
        return failed[0]
    ordered = sorted(runs, key=lambda r: r["total_s"])
    return {**ordered[(len(ordered) - 1) // 2], "runs_s": [r["total_s"] for r in runs]}


def _report(a: argparse.Namespace, sizes: list[int], res: dict) -> None:
    print(f"\nscreening after load, two-stage (rescore {a.rescore or 'top_k where the tree has it'}), old {a.old} vs "
          f"current tree (same machine, same run):")
    print(f"{'grid':>6} | {'old s':>8} {'old MB':>7} | {'new s':>8} {'new MB':>7} | {'old/new time':>12} {'old/new MB':>10}")
    line = {}
    for n in sizes:
        o, w = res.get(("old", n)), res.get(("new", n))
        name = NAMES.get(n, str(n))
        if not isinstance(w, dict):
            print(f"{name:>6} | new tree: {w}")
            continue
        if isinstance(o, dict):
            rt, rm = o["total_s"] / w["total_s"], o["peak_MB"] / w["peak_MB"]
            print(f"{name:>6} | {o['total_s']:8.2f} {o['peak_MB']:7.0f} | {w['total_s']:8.2f} {w['peak_MB']:7.0f} | "
                  f"{rt:12.2f} {rm:10.2f}")
            line[f"ratio_{name}"] = f"{rt:.2f}"
        else:
            print(f"{name:>6} | {'(' + str(o) + ')':>16} | {w['total_s']:8.2f} {w['peak_MB']:7.0f} |")
            line[f"ratio_{name}"] = "skipped"
        line[f"s{name}"] = f"{w['total_s']:.3f}"
        if n >= 1_000_000:
            line[f"peak_MB_{name}"] = f"{w['peak_MB']:.0f}"
    keys = [k for k in ("s3072", "s100k", "s1m", "peak_MB_1m", "ratio_3072", "ratio_100k", "ratio_1m") if k in line]
    print("screen_speed: " + " ".join(f"{k}={line[k]}" for k in keys))


if __name__ == "__main__":
    main()
