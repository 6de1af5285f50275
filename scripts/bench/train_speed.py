"""Benchmark (issue 32): ``carb-train`` wall time, old commit against this tree, side by side, idle and with a
competing busy process pinned to one core, and the time ``carb-quickstart`` takes to show its first shortlist.

The old commit (default ``1ade655``, before the parallel, lighter evaluation refits) is checked out into a
temporary ``git worktree`` and run with ``PYTHONPATH`` pointing at it; this tree runs the same way. Each run
is ``python -m carb.train`` on the shipped CPU reference with its defaults (full evaluation, figures,
registration) in a fresh ``CARB_HOME`` and working folder, so both pay for creating the store (this tree starts
a new store as a copy of the empty one in its cache, ``CARB_CACHE``, as it does on any machine after its first
store; ``--fresh-cache`` gives every run an empty cache, so that it pays MLflow's migrations as the old one does). Runs
alternate old, new, old, new... so a change in the machine's load hits both alike. ``CARB_N_JOBS``,
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` are removed from the runs'
environment (the defaults are measured; ``--keep-env`` keeps them).

Loaded: a python busy loop pinned to CPU 0 (``taskset -c 0``) runs during the loaded runs; the goal is
new loaded <= 2 x new idle. Quickstart: ``python -m carb.quickstart`` (default data, champion absent:
fresh store), the wall time from start until its shortlist is printed (this tree: the line
``carb-quickstart: first shortlist after``; the old commit prints its shortlist last, so its marker is
``carb-quickstart: done in``); the goal is under 60 s on an idle 2-core machine.

    python -m scripts.bench.train_speed [--old 1ade655] [--repeats 2] [--no-loaded] [--no-quickstart]

Timings are only comparable within one run of this script. Last line (machine-readable):
``train_speed: old_s=<median idle> new_s=<median idle> ratio=<new/old> loaded_ratio=<new loaded/new idle>
quickstart_first_shortlist_s=<new> old_loaded_s=.. new_loaded_s=.. old_quickstart_first_shortlist_s=..``
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Thread settings removed from the runs' environment (the defaults are what is measured).
THREAD_VARS = ("CARB_N_JOBS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: The line after which a quickstart's shortlist is on screen: this tree's, then the old commit's.
SHORTLIST_MARKERS = ("carb-quickstart: first shortlist after", "carb-quickstart: done in")


#: ``--fresh-cache``: each run gets an empty ``CARB_CACHE`` (no store template).
FRESH_CACHE = [False]


def run_env(tree: Path, home: Path, keep_env: bool) -> dict[str, str]:
    """The environment of one run: ``tree`` first on the path, a fresh ``CARB_HOME`` (and with ``--fresh-cache``
    an empty ``CARB_CACHE`` beside it), no telemetry."""
    env = {k: v for k, v in os.environ.items() if keep_env or k not in THREAD_VARS}
    env.update({"PYTHONPATH": str(tree), "CARB_HOME": str(home), "MLFLOW_DISABLE_TELEMETRY": "true",
                "DO_NOT_TRACK": "1", "PYTHONWARNINGS": "ignore"})
    if FRESH_CACHE[0]:
        env["CARB_CACHE"] = str(home.parent / "cache")
    return env


def timed(cmd: list[str], env: dict[str, str], cwd: Path, markers: tuple[str, ...] = ()) -> tuple[float, float]:
    """``(wall seconds, seconds until the first output line starting with a marker)`` of one command (the
    second is NaN without a marker line); raises with the output's tail when the command fails."""
    t0 = time.perf_counter()
    at = float("nan")
    tail: list[str] = []
    with subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as p:
        assert p.stdout is not None
        for line in p.stdout:
            if at != at and any(line.startswith(m) for m in markers):
                at = time.perf_counter() - t0
            tail = (tail + [line])[-30:]
        rc = p.wait()
    wall = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {rc}):\n{''.join(tail)}")
    return wall, at


def check_tree(tree: Path, env: dict[str, str], cwd: Path) -> None:
    """Refuse to time a tree whose ``carb`` is not imported from it (e.g. an editable install winning)."""
    out = subprocess.run([sys.executable, "-c", "import carb; print(carb.__file__)"], env=env, cwd=cwd,
                         capture_output=True, text=True, check=True).stdout.strip()
    if not Path(out).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"train_speed: carb is imported from {out}, not from {tree}")


class Busy:
    """A python busy loop pinned to CPU 0 (``taskset -c 0``), for the loaded runs."""

    def __enter__(self) -> Busy:
        loop = [sys.executable, "-c", "while True: pass"]
        cmd = (["taskset", "-c", "0"] + loop) if shutil.which("taskset") else loop
        self.proc = subprocess.Popen(cmd, preexec_fn=None if shutil.which("taskset") else
                                     (lambda: os.sched_setaffinity(0, {0})))
        time.sleep(2.0)   # let the load average see it (the thread policy reads it)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def train_runs(trees: dict[str, Path], work: Path, repeats: int, label: str, keep_env: bool) -> dict[str, list[float]]:
    """``repeats`` carb-train runs per tree, alternating; ``{tree label: [wall seconds]}``."""
    out: dict[str, list[float]] = {k: [] for k in trees}
    for i in range(repeats):
        for name, tree in trees.items():
            d = work / f"{label}-{name}-{i}"
            d.mkdir(parents=True)
            wall, _ = timed([sys.executable, "-m", "carb.train"], run_env(tree, d / "home", keep_env), d)
            out[name].append(wall)
            print(f"carb-train {label:6s} {name}: {wall:6.1f} s", flush=True)
    return out


def quickstart_run(name: str, tree: Path, work: Path, keep_env: bool) -> float:
    """Seconds until one fresh-store ``carb-quickstart`` shows its shortlist."""
    d = work / f"quickstart-{name}"
    d.mkdir(parents=True)
    wall, at = timed([sys.executable, "-m", "carb.quickstart"], run_env(tree, d / "home", keep_env), d,
                     SHORTLIST_MARKERS)
    print(f"carb-quickstart {name}: first shortlist after {at:.1f} s (all done {wall:.1f} s)", flush=True)
    return at


def median(v: list[float]) -> float:
    return statistics.median(v) if v else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="1ade655", help="the old commit (default 1ade655)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per tree and condition (alternating)")
    ap.add_argument("--no-loaded", action="store_true", help="skip the runs beside a busy process")
    ap.add_argument("--no-quickstart", action="store_true", help="skip the quickstart timings")
    ap.add_argument("--keep-env", action="store_true", help="keep CARB_N_JOBS / *_NUM_THREADS in the runs' env")
    ap.add_argument("--fresh-cache", action="store_true", help="an empty CARB_CACHE per run (no store template)")
    a = ap.parse_args()
    FRESH_CACHE[0] = a.fresh_cache
    with tempfile.TemporaryDirectory(prefix="train_speed-") as tmp:
        work = Path(tmp)
        old = work / "old-tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), a.old], check=True,
                       capture_output=True)
        try:
            trees = {"old": old, "new": ROOT}
            for name, tree in trees.items():
                check_tree(tree, run_env(tree, work / "check", a.keep_env), work)
            rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip()
            print(f"old = {a.old} (worktree {old}), new = this tree ({ROOT}, HEAD {rev}, with its uncommitted "
                  f"changes); {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}", flush=True)
            idle = train_runs(trees, work, a.repeats, "idle", a.keep_env)
            loaded: dict[str, list[float]] = {"old": [], "new": []}
            if not a.no_loaded:
                with Busy():
                    loaded = train_runs(trees, work, a.repeats, "loaded", a.keep_env)
            qs = {"old": float("nan"), "new": float("nan")}
            if not a.no_quickstart:
                for name in ("old", "new"):
                    qs[name] = quickstart_run(name, trees[name], work, a.keep_env)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], capture_output=True)
    o, n = median(idle["old"]), median(idle["new"])
    ol, nl = median(loaded["old"]), median(loaded["new"])
    print("\n| carb-train, CPU reference, defaults | old | new | new / old |\n|---|---|---|---|")
    print(f"| idle (median of {a.repeats}) | {o:.1f} s | {n:.1f} s | {n / o:.2f} |")
    if loaded["new"]:
        print(f"| busy process on CPU 0 | {ol:.1f} s | {nl:.1f} s | {nl / ol:.2f} |")
        print(f"| loaded / idle | {ol / o:.2f} | {nl / n:.2f} | |")
    if not a.no_quickstart:
        print(f"| quickstart: first shortlist (fresh store) | {qs['old']:.1f} s | {qs['new']:.1f} s | "
              f"{qs['new'] / qs['old']:.2f} |")
    print(f"train_speed: old_s={o:.1f} new_s={n:.1f} ratio={n / o:.3f} loaded_ratio={nl / n:.3f} "
          f"quickstart_first_shortlist_s={qs['new']:.1f} old_loaded_s={ol:.1f} new_loaded_s={nl:.1f} "
          f"old_quickstart_first_shortlist_s={qs['old']:.1f}")


if __name__ == "__main__":
    main()
