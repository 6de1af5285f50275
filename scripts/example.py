"""The README's generated blocks: the worked task (block ``example``), its zoo question (block ``zoo-example``)
and the set-up timings (block ``setup``).

``python -m scripts.example`` does what a new user does on the shipped H200 data: ``carb-quickstart``
(train the fast preset, promote it to ``champion``) in a temporary store, then one ``carb-screen`` with the
budgets of the worked task. It splices the command and the top of its shortlist into README.md.

``python -m scripts.example --zoo`` trains on the shipped CPU zoo (``carb-train data.path=zoo-cpu``) in a
temporary store and screens the zoo list at 224 px, batch 1, against a latency budget with top-1 as the
second Pareto axis (energy is not measurable on this CPU: no RAPL), and splices block ``zoo-example``.

``python -m scripts.example --setup-times`` clones the repository into a temporary folder, times
``make quickstart`` and ``make test`` there (a fresh venv each, as a new user gets) and splices the wall
times, the core count and the load average into block ``setup``. Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):   # run as `python scripts/example.py`: the repository root holds `scripts`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.splice import ROOT, splice  # noqa: E402

README = ROOT / "README.md"
#: The worked task: which ResNet reaching 76 % ImageNet top-1 fits 10 ms per batch on the H200 with the least
#: energy per image (torchvision's published top-1, joined by screen.accuracy; the front trades energy per
#: image against top-1). Overrides of carb-screen, exactly as the README shows them (shell-quoted there).
TASK = ["screen.budget.latency_ms=10", "screen.objective=energy_J_per_image", "screen.accuracy=IMAGENET1K_V1",
        "screen.require.top1=0.76", "screen.pareto=[energy_J_per_image,-top1]"]
#: The zoo question: which backbone of the zoo list fits 20 ms per image (batch 1, 224 px) on the CPU zoo's
#: machine with the best published top-1. carb-screen overrides after ``screen.target``.
ZOO_TASK = ["space=zoo", "space.mode=grid", "space.max_flops=null", "space.input_sizes=[224]", "space.batch_sizes=[1]",
            "screen.budget.latency_ms=20", "screen.pareto=[latency_ms,-top1]"]
#: Summary lines of a zoo screening left out of the README (the files keep them).
ZOO_SKIP = ("training domain:", "  most frequent", "  (", "passed through", "profile next", "carb-screen:")
#: Shortlist rows shown in the README (the whole shortlist is in shortlist.csv).
TOP_ROWS = 3


def run_both(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[str, str]:
    """Run ``argv`` in ``cwd``; return its (stdout, stderr). Raises ``SystemExit`` with the stderr tail on
    failure."""
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout, proc.stderr


def run_command(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run ``argv`` in ``cwd``; return its stdout. Raises ``SystemExit`` with the stderr tail on failure."""
    return run_both(argv, cwd, env)[0]


def traced_count(output: str) -> int:
    """How many networks a command traced into the trace cache (0: all came from it), read from its progress
    line ``traced N networks into the trace cache`` (:mod:`carb.design.trace_progress`)."""
    import re

    return sum(int(n) for n in re.findall(r"traced (\d+) networks into the trace cache", output))


def user_env(home: Path) -> dict[str, str]:
    """The environment of a user whose CARB home (and so default MLflow store) is ``home``."""
    env = {**os.environ, "CARB_HOME": str(home), "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def shortlist_excerpt(stdout: str, top_rows: int = TOP_ROWS) -> list[str]:
    """The summary lines of a carb-screen run (from ``grid ...`` on) and the first ``top_rows`` rows of
    its shortlist; leaves out the store line and the ``wrote ...`` line (temporary paths)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("grid "))
    out: list[str] = []
    in_table = 0
    for line in lines[start:]:
        if line.startswith(("wrote ", "note: ")):
            continue
        if line.startswith("shortlist ("):
            in_table = 1
            out.append(line)
            continue
        if in_table:
            if in_table > top_rows + 1:   # header + rows
                break
            in_table += 1
        out.append(line)
    return out


def worked_task(work: Path) -> str:
    """Run the quickstart and the worked task's carb-screen under ``work``; return the block's Markdown (the
    command wrapped at 120 columns with shell continuations, as the output is)."""
    from carb.commands.cli import wrap_command

    env = user_env(work)
    t0 = time.perf_counter()
    trained = "no champion for" in run_command([sys.executable, "-m", "carb.quickstart"], work, env)
    quick_s = time.perf_counter() - t0
    quick = (f"the quickstart (train, promote, screen) took {quick_s:.0f} s" if trained
             else "the champion was there already")
    t0 = time.perf_counter()
    stdout = run_command([sys.executable, "-m", "carb.screen", *TASK], work, env)
    screen_s = time.perf_counter() - t0
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return "\n".join([
        f"Generated by `python -m scripts.example` on {when} ({os.cpu_count()} cores; {quick}; this "
        f"screening {screen_s:.0f} s; load average {os.getloadavg()[0]:.2f} at the end).",
        "",
        "```console",
        *wrap_command("$ ", f".venv/bin/carb-screen {' '.join(shlex.quote(a) for a in TASK)}"),
        *shortlist_excerpt(stdout),
        "...",
        "```",
    ])


def drop_skipped(lines: list[str], skip: tuple[str, ...]) -> list[str]:
    """``lines`` without those starting with one of ``skip``, and without their wrapped continuation lines
    (indented by two spaces, as ``cli.wrap_line`` writes them)."""
    kept, dropping = [], False
    for line in lines:
        dropping = line.startswith(skip) or (dropping and line.startswith("  "))
        if not dropping:
            kept.append(line)
    return kept


def zoo_task(work: Path) -> str:
    """Train on the shipped CPU zoo and run the zoo question's carb-screen under ``work``; return block
    ``zoo-example``'s Markdown (the commands and the top of the shortlist, generated, never typed)."""
    import re

    from carb.commands.cli import wrap_command

    env = {**user_env(work), "CARB_N_JOBS": "1", "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    out, err = run_both([sys.executable, "-m", "carb.train", "data.path=zoo-cpu"], work, env)
    traced = traced_count(out + "\n" + err)
    train_s = time.perf_counter() - t0
    name, version = re.search(r"registered (\S+) version (\d+)", out).groups()
    task = [f"screen.target=models:/{name}/{version}", *ZOO_TASK]
    t0 = time.perf_counter()
    stdout, err = run_both([sys.executable, "-m", "carb.screen", *task], work, env)   # the shortlist: stdout alone
    screen_s = time.perf_counter() - t0
    traced += traced_count(stdout + "\n" + err)
    tables = (f"{traced} networks traced into the trace cache" if traced
              else "every layer table from this machine's trace cache; a first run traces them: docs/COMMANDS.md")
    lines = drop_skipped(shortlist_excerpt(stdout, top_rows=5), ZOO_SKIP)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return "\n".join([
        f"Generated by `python -m scripts.example --zoo` on {when} ({os.cpu_count()} cores; training {train_s:.0f} s, "
        f"screening {screen_s:.0f} s; {tables}):", "```console", "$ .venv/bin/carb-train data.path=zoo-cpu",
        *wrap_command("$ ", f".venv/bin/carb-screen {' '.join(shlex.quote(a) for a in task)}"),
        *lines, "...", "```"])


def setup_times(work: Path, make: str = "make", test_runs: int = 1) -> str:
    """Clone the repository into ``work``, time ``make quickstart`` then ``make test`` ``test_runs`` times in a
    row there (each must pass: a flaky test fails the script); return the block's Markdown (wall time of
    each, the pytest summary of the last, the core count, the load average before)."""
    import re

    clone = work / "carb"
    run_command(["git", "clone", "-q", str(ROOT), str(clone)], work, dict(os.environ))
    commit = run_command(["git", "rev-parse", "--short", "HEAD"], clone, dict(os.environ)).strip()
    load = os.getloadavg()[0]
    from carb.resources import cache_dir

    template = "an MLflow store template in its cache" if any(cache_dir().glob("mlflow-*-store.db")) else \
        "no MLflow store template yet (the first store ran the migrations)"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CARB_HOME")}
    t0 = time.perf_counter()
    run_command([make, "quickstart"], clone, env)
    quickstart_min = (time.perf_counter() - t0) / 60
    test_min, summary = [], ""
    for _ in range(max(1, test_runs)):
        t0 = time.perf_counter()
        out = run_command([make, "test"], clone, env)
        test_min.append((time.perf_counter() - t0) / 60)
        found = re.findall(r"^=*\s*(\d+ passed[^=\n]*?)\s*=*$", out, flags=re.M)
        summary = found[-1] if found else summary
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = ", ".join(f"{m:.1f}" for m in test_min)
    what = "the fast suite (the venv already there)" if len(test_min) == 1 else (
        f"the fast suite {len(test_min)} times in a row, every run passing (min: {runs})")
    return "\n".join([
        "| command | wall time, fresh clone | what it did |",
        "|---|---|---|",
        f"| `make quickstart` | {quickstart_min:.1f} min | venv + install + train, promote, screen |",
        f"| `make test` | {min(test_min):.1f} min | {what}{'; ' + summary if summary else ''} |",
        "",
        f"Generated by `python -m scripts.example --setup-times` on {when} (commit {commit}): {os.cpu_count()} cores, "
        f"load average {load:.2f} at the start; pip's download cache as this machine had it, and {template}.",
    ])


def main(argv: list[str] | None = None) -> None:
    """Regenerate block ``example`` (default) or ``setup`` (``--setup-times``) of README.md."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setup-times", action="store_true", help="time make quickstart and make test (block setup)")
    ap.add_argument("--test-runs", type=int, default=1,
                    help="with --setup-times: run make test this many times in a row (each must pass)")
    ap.add_argument("--zoo", action="store_true", help="the zoo question on the CPU zoo (block zoo-example)")
    ap.add_argument("--make", default="make", help="the make program (for a dry run: --make echo)")
    ap.add_argument("--home", default=None,
                    help="CARB home of the worked task, kept afterwards (a second run reuses its champion); "
                         "default: a temporary one")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="carb-example-") as tmp:
        if args.setup_times:
            splice(README, "setup", setup_times(Path(tmp), args.make, args.test_runs))
        elif args.zoo:
            splice(README, "zoo-example", zoo_task(Path(tmp)))
        else:
            home = Path(args.home).resolve() if args.home else Path(tmp)
            home.mkdir(parents=True, exist_ok=True)
            splice(README, "example", worked_task(home))


if __name__ == "__main__":
    main()
