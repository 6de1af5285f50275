"""Regenerate the benchmark table of docs/RESULTS.md in one run, on the current code, dated and with the machine.

Runs every timing benchmark of ``scripts/bench/`` (``features.py``, ``screening.py``, ``collect.py``, ``train.py``) as a
subprocess and reads its machine-readable last line, then times two whole commands as a user runs them:
``carb-train model=carb_fast`` on the shipped dataset (wall time of the process, start-up and logging
included, beside the fit alone) and ``carb-tune`` (trials per minute of wall time). Everything between
``<!-- bench:start -->`` and ``<!-- bench:end -->`` in docs/RESULTS.md is replaced (:func:`scripts.splice.splice`).
Run it on an idle machine (nothing else running): the figures are timings.

    python -m scripts.figures [--print] [--skip-full-fit]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1", "PYTHONWARNINGS": "ignore"}


def last_line(script: str, *args: str) -> dict[str, str]:
    """Run ``scripts/bench/<script>`` and parse its last ``key=value`` line."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / script), *args],
                       capture_output=True, text=True, cwd=ROOT, env=ENV)
    if r.returncode != 0:
        raise SystemExit(f"{script} failed:\n{r.stderr[-2000:]}")
    line = [ln for ln in r.stdout.strip().splitlines() if "=" in ln][-1]
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)   # a leading "name:" is not a pair


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    """Wall seconds and stdout+stderr of a command."""
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=ENV)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return time.perf_counter() - t, r.stdout + r.stderr


def whole_commands() -> dict[str, float]:
    """Wall time of ``carb-train model=carb_fast`` and ``carb-tune`` trials per minute, fresh stores."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        common = [f"tracking.uri=sqlite:///{d}/m.db", f"paths.output_dir={d}/out", "progress.enabled=false"]
        train_s, _ = timed([str(BIN / "carb-train"), "model=carb_fast", "register=false", *common], d)
        tune_s, out = timed([str(BIN / "carb-tune"), "tune.n_trials=8", "tune.blend_trials=4",
                             f"tune.storage=sqlite:///{d}/optuna.db", "tune.study=bench", *common], d)
        m = re.search(r"carb-tune: study .* (\d+) trials in (\d+) s \(([\d.]+) trials/min\)", out)
        if not m:
            raise SystemExit(f"carb-tune printed no trial count:\n{out[-1500:]}")
        trials, loop_s = int(m.group(1)), float(m.group(2))
    return {"train_wall_s": train_s, "tune_wall_s": tune_s, "tune_trials": trials, "tune_loop_s": loop_s,
            "tune_trials_per_min": trials / (tune_s / 60.0), "tune_loop_trials_per_min": float(m.group(3))}


def machine() -> str:
    """The machine in one line: device id, CPU model, cores and the 1-minute load at the start."""
    from carb.measure.fingerprint import device_id, read_cpu_fingerprint

    fp = read_cpu_fingerprint(threads=1)
    return (f"device_id {device_id(fp)} ({fp.get('model_name', '?')}, {os.cpu_count()} cores), "
            f"load average at start {os.getloadavg()[0]:.2f}")


def table(skip_full_fit: bool) -> str:
    """The benchmark section of docs/RESULTS.md (Markdown)."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    host = machine()
    f = last_line("features.py")
    s = last_line("screening.py", "--data", "h200")
    sc = last_line("screening.py", "--data", "reference", "--sizes", "3072,100000")
    c = last_line("collect.py")
    t = last_line("train.py", *(["--fast-only"] if skip_full_fit else []))
    w = whole_commands()
    full = (f"`carb` (paper sizes) on 13,000 synthetic rows {float(t['fit_full_13k_s']):.0f} s"
            if t.get("fit_full_13k_s", "nan") not in ("nan", "nan\n") else "`carb` on 13,000 rows: not run (--skip-full-fit)")
    rows = [
        ("static features, 3,072-point grid (`features.py`)",
         f"{float(f['grid_features_3072_s']):.3f} s closed form vs {float(f['fvcore_per_config_s']):.2f} s per config "
         f"with fvcore (sampled) -> ratio {float(f['ratio']):,.0f}"),
        ("screening after the model is loaded, two-stage (`screening.py`)",
         f"H200 model (GPU telemetry predicted per candidate): 3,072 configs {float(s['s3072']):.2f} s, "
         f"100,000 configs {float(s['s100k']):.1f} s, 1,000,000 configs {float(s['s1m']):.1f} s (peak "
         f"{float(s['peak_MB_1m']):.0f} MB); old/new {s['ratio_3072']}x, {s['ratio_100k']}x, {s['ratio_1m']}x; "
         f"CPU reference model: 3,072 configs {float(sc['s3072']):.2f} s, 100,000 configs {float(sc['s100k']):.1f} s"),
        ("collection on this CPU (`collect.py`)",
         f"{float(c['cpu_s_per_config']):.2f} s per config; collector overhead "
         f"{100 * float(c['overhead_fraction']):.1f} % of wall time"),
        ("fit alone (`train.py`)", f"`carb_fast` on the reference dataset {float(t['fit_fast_reference_s']):.1f} s; {full}"),
        ("whole `carb-train model=carb_fast` (process wall time: start-up, fit, evaluation with the "
         "extrapolation and new-architecture refits, logging)", f"{w['train_wall_s']:.0f} s"),
        ("`carb-tune tune.n_trials=8 tune.blend_trials=4` (default targets and members; whole process)",
         f"{w['tune_trials']} trials in {w['tune_wall_s']:.0f} s wall = {w['tune_trials_per_min']:.0f} trials/min "
         f"(the trial loop alone: {w['tune_loop_trials_per_min']:.0f} trials/min)"),
    ]
    lines = [f"Measured {when} by `python -m scripts.figures` on {host}; timings on a "
             f"2-core VM vary with load, so compare ratios measured in one run.", "",
             "| benchmark | result |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print", action="store_true")
    ap.add_argument("--skip-full-fit", action="store_true", help="skip the 13,000-row paper-size fit (~5 min)")
    a = ap.parse_args()
    text = table(a.skip_full_fit)
    if a.print:
        print(text)
        return
    from scripts.splice import splice

    splice(ROOT / "docs" / "RESULTS.md", "bench", text)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
