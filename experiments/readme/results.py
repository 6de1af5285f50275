"""Regenerate the README's results section from the shipped data (numbers are never typed in).

    python experiments/readme/results.py            # rewrite README.md between the results markers
    python experiments/readme/results.py --print    # print the section instead

Trains ``carb-train`` (default preset, ``model=auto``) on the shipped CPU reference dataset into a
temporary MLflow store, takes the test-split metrics beside B1, the extrapolation splits, the physical
sanity figures and the interval coverage when the model has intervals, runs the extrapolation
benchmark's timm part, and reads the reproducibility recheck from the dataset's provenance. Everything
between ``<!-- results:start -->`` and ``<!-- results:end -->`` in README.md is replaced.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import warnings
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
START, END = "<!-- results:start -->", "<!-- results:end -->"
TARGET_LABEL = {"peak_memory_MB": "peak memory (MB)", "energy_J": "energy (J/batch)", "latency_ms": "latency (ms/batch)"}


def train_metrics(tmp: str, *extra: str) -> dict:
    """``run_train`` on the reference dataset (default config, plus ``extra`` overrides) into a temporary
    store."""
    from carb.commands.cli import compose
    from carb.commands.train import run_train

    cfg = compose("train", [f"tracking.uri=sqlite:///{tmp}/mlflow.db", "evaluate.figures=false", "print_table=false",
                            "evaluate.extrapolation.progress=false", *extra])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_train(cfg)


#: Split seeds besides 0 for the spread of the random-split figures (one split is one draw).
SPREAD_SEEDS = (1, 2, 3, 4, 5)


def seed_spread(tmp: str, first: dict, targets: list[str]) -> str:
    """One line: test R^2 and interval coverage over split seeds 0 and :data:`SPREAD_SEEDS` (min, median,
    mean, max: split-conformal coverage holds on average over calibration draws, and one draw of a few
    hundred rows whose errors cluster by architecture varies by several points), the model refitted per seed without the extrapolation refits (they do not change these)."""
    runs = [first] + [train_metrics(f"{tmp}/s{s}", f"split.seed={s}", "evaluate.extrapolation.enabled=false",
                                    "evaluate.sanity.enabled=false", "register=false")["metrics"]
                      for s in SPREAD_SEEDS]
    cells = []
    for t in targets:
        for key, label in ((f"test_{t}_r2", "test R^2"), (f"interval_test_{t}_coverage", "coverage")):
            v = sorted(float(m[key]) for m in runs if key in m and pd.notna(m[key]))
            if v:
                cells.append(f"{TARGET_LABEL[t]} {label} {v[0]:.3f} / {float(pd.Series(v).median()):.3f} / "
                             f"{float(pd.Series(v).mean()):.3f} / {v[-1]:.3f}")
    seeds = ", ".join(str(s) for s in (0, *SPREAD_SEEDS))
    return (f"One random split is one draw: over split seeds {seeds} (min / median / mean / max): " + "; ".join(cells) +
            ". On this data a few extreme configurations decide raw-scale R^2 (see the extrapolation benchmark's "
            "error concentration).")


def fmt(v: float, spec: str = ".3f") -> str:
    return "-" if v is None or pd.isna(v) else format(v, spec)


def accuracy_table(m: dict, targets: list[str]) -> str:
    """Random-split test accuracy, CARB beside B1."""
    rows = ["| target | CARB R^2 | CARB MAE | CARB MAPE | B1 R^2 | B1 MAE | B1 MAPE |", "|---|---|---|---|---|---|---|"]
    for t in targets:
        rows.append(f"| {TARGET_LABEL[t]} | {fmt(m.get(f'test_{t}_r2'), '.4f')} | {fmt(m.get(f'test_{t}_mae'), '.3g')} | "
                    f"{fmt(m.get(f'test_{t}_mape'), '.1f')} % | {fmt(m.get(f'b1_{t}_r2'), '.3f')} | "
                    f"{fmt(m.get(f'b1_{t}_mae'), '.3g')} | {fmt(m.get(f'b1_{t}_mape'), '.1f')} % |")
    return "\n".join(rows)


def xval_table(m: dict, targets: list[str]) -> str:
    """Extrapolation splits, CARB beside B1 (R^2 and MAPE)."""
    splits = sorted({k.split("_")[1] for k in m if k.startswith("xval_") and k.endswith("_b1_r2")})
    head = "| split | " + " | ".join(f"{TARGET_LABEL[t]}: CARB R^2 (MAPE) | B1 R^2" for t in targets) + " |"
    rows = [head, "|---|" + "---|---|" * len(targets)]
    for s in splits:
        cells = []
        for t in targets:
            cells.append(f"{fmt(m.get(f'xval_{s}_{t}_r2'))} ({fmt(m.get(f'xval_{s}_{t}_mape'), '.1f')} %) | "
                         f"{fmt(m.get(f'xval_{s}_{t}_b1_r2'))}")
        rows.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def timm_summary() -> str:
    """Leave-one-model-out latency on timm's GPUs: pooled R^2 range and worst split, CARB vs B1."""
    from carb.analysis.extrapolation import evaluate_splits, group_splits

    sys.path.insert(0, str(ROOT / "experiments" / "benchmarks"))
    from extrapolation import make, timm_latency

    lines = ["| GPU (timm, eager amp_fp16) | rows | leave-one-model-out latency R^2, worst of 7 | B1 worst | MAPE median |",
             "|---|---|---|---|---|"]
    for gpu in ("RTX 3090", "RTX 4090", "RTX 5090", "RTX PRO 6000 Blackwell Max-Q"):
        t = timm_latency(gpu)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tab = evaluate_splits(make(True), t, group_splits(t, "model", "model", min_rows=2), targets=["latency_ms"])
        lines.append(f"| {gpu} | {len(t)} | {tab['r2'].min():.3f} | {tab['b1_r2'].min():.3f} | {tab['mape'].median():.1f} % |")
    return "\n".join(lines)


def coverage_table(m: dict, targets: list[str]) -> str:
    """Markdown table: one row per split (test first), per target ``coverage (width)`` from the
    ``interval_<split>_<target>_{coverage,width}`` metrics; empty when there are none."""
    splits = sorted({k[len("interval_"):-len(f"_{t}_coverage")] for k in m for t in targets
                     if k.startswith("interval_") and k.endswith(f"_{t}_coverage")}, key=lambda s: (s != "test", s))
    if not splits:
        return ""
    head = "| split | " + " | ".join(f"{TARGET_LABEL.get(t, t)}: coverage (width)" for t in targets) + " |"
    lines = [head, "|---|" + "---|" * len(targets)]
    for sp in splits:
        cells = []
        for t in targets:
            c, w = m.get(f"interval_{sp}_{t}_coverage"), m.get(f"interval_{sp}_{t}_width")
            cells.append(f"{c:.3f} ({w:.2f})" if c is not None and w is not None else "-")
        lines.append(f"| {sp} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def transfer_lines() -> list[str]:
    """The few-shot calibration benchmark (experiments/benchmarks/transfer.py): GPU pairs per K and the
    CPU transfer at K = 10."""
    sys.path.insert(0, str(ROOT / "experiments" / "benchmarks"))
    from transfer import cpu_here_table, cpu_table, gpu_table, pair_summary

    ks = [3, 5, 10, 20]
    s = pair_summary(gpu_table(ks))
    lines = ["| K | held-out rows per pair | calibrated: Spearman min | MAPE median / max | uncalibrated source: "
             "Spearman min | MAPE median / max | FLOPs-only fit on the K rows: Spearman min | MAPE median / max | "
             "calibrated beats FLOPs-only (MAPE and Spearman) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in s.itertuples():
        lines.append(f"| {r.k} | {r.held_out_rows} | {r.calibrated_spearman_min:.3f} | {r.calibrated_mape_median:.1f} / "
                     f"{r.calibrated_mape_max:.1f} % | {r.source_spearman_min:.3f} | {r.source_mape_median:.1f} / "
                     f"{r.source_mape_max:.1f} % | {r.flops_k_spearman_min:.3f} | {r.flops_k_mape_median:.1f} / "
                     f"{r.flops_k_mape_max:.1f} % | {r.beats_flops_k} |")
    c, h = cpu_table([10]), cpu_here_table([10])
    cpu = ["| target | model | same VM, later: Spearman | MAPE | R^2 | another VM: Spearman | MAPE | R^2 |",
           "|---|---|---|---|---|---|---|---|"]
    for r, o in zip(h.itertuples(), c.itertuples()):
        cpu.append(f"| {TARGET_LABEL[r.target]} | {r.model} | {r.spearman:.3f} | {r.mape_pct:.1f} % | {r.r2:.3f} | "
                   f"{o.spearman:.3f} | {o.mape_pct:.1f} % | {o.r2:.3f} |")
    return ["Few-shot calibration to a device the model never saw (`carb-calibrate`; "
            "`experiments/benchmarks/transfer.py`). timm's 4 GPUs, every ordered pair (12): a model fitted on one "
            "GPU's 22 ResNet rows, calibrated with K space-filling rows of another GPU, scored on that GPU's other "
            "rows (latency; at K = 20 only 2 rows are left, so that line says little):", "", *lines, "",
            f"CPU, K = 10, scored on the other {int(h['n'].iloc[0]) if len(h) else 0} rows of 100. Same VM, later: "
            f"the model of the reference file above calibrated with rows measured on the same VM after it "
            f"(`experiments/data/cpu-calibration-100.parquet`). Another VM: the model of the previous shipped file "
            f"(another 2-core VM, measured under load, bf16 without native instructions) calibrated with 100 rows "
            f"drawn from the reference file. `flops_k` = a FLOPs-only line fitted on the same K rows:", "", *cpu, ""]


def provenance_lines() -> list[str]:
    """What the shipped dataset is, from its provenance file."""
    p = ROOT / "carb" / "data" / "cpu-reference.provenance.json"
    if not p.exists():
        return ["(no provenance file)"]
    prov = json.loads(p.read_text())
    rows = prov.get("rows", {})
    guard = prov.get("guard", {})
    fp = prov.get("fingerprint", {})
    out = [f"Dataset: `carb/data/cpu-reference.parquet`, {rows.get('total', '?')} rows "
           f"({', '.join(f'{k} {v}' for k, v in rows.items() if k != 'total')}), measured "
           f"{prov.get('measured_from', '?')[:16]} to {prov.get('measured_to', '?')[11:16]} UTC on device "
           f"`{prov.get('device_id', '?')}` ({fp.get('model_name', '?')}, family {fp.get('family', '?')}, "
           f"{fp.get('logical_cpus', '?')} cores, {fp.get('hypervisor', '?')}, ISA {', '.join(fp.get('isa', []))}); "
           f"{prov.get('threads', ['?'])[0]} thread; the contention guard repeated "
           f"{guard.get('repeated_windows', '?')} timed window(s) (cpu_share median "
           f"{fmt(guard.get('cpu_share_median'))}, min {fmt(guard.get('cpu_share_min'))})."]
    previous = prov.get("recheck_previous_label", "The previous shipped file re-measured here")
    for key, label in (("recheck_same_machine", "Re-measured on the same machine right after"),
                       ("recheck_previous_file", previous)):
        text = prov.get(key) or ""
        m = re.search(r"all: latency new/shipped (median [^;]+); memory (median [^)]*\))", text)
        if m:
            out.append(f"{label}: latency ratio {m.group(1)}; peak memory ratio {m.group(2)}.")
    return out


def section() -> str:
    """The README results section (Markdown)."""
    with tempfile.TemporaryDirectory() as tmp:
        r = train_metrics(tmp)
        m, targets = r["metrics"], list(r["targets"])
        spread = seed_spread(tmp, m, targets)
    parts = ["## Results on this project's own data", "",
             "Generated by `python experiments/readme/results.py` (do not edit by hand).", ""]
    parts += provenance_lines() + [""]
    from carb.commands.cli import compose

    fr = "/".join(f"{100 * float(f):.0f}" for f in compose("train").split.fractions)
    parts += [f"Random split (train/val/cal/test {fr} %, stratified, seed 0), test rows, `carb-train` defaults (`model=auto` -> "
              f"`{r.get('preset', 'auto')}`, physics-informed stages); B1 = FLOPs-only linear regression. Energy is "
              f"not measurable on this VM (no RAPL).", "", accuracy_table(m, targets), "", spread, ""]
    parts += ["Extrapolation (train on the lower range of one knob, test on the upper; precision: train fp32, test "
              "the others). R^2 (MAPE) beside B1:", "", xval_table(m, targets), ""]
    san = {k: v for k, v in m.items() if k.startswith("sanity_") and k != "sanity_n"}
    if san:
        parts += ["Physical sanity of screening-mode predictions on the 3,072-candidate grid: " +
                  ", ".join(f"{k[7:].replace('_', ' ')} {100 * v:.2f} %" for k, v in san.items()) + ".", ""]
    cov = coverage_table(m, targets)
    if cov:
        parts += [f"Prediction intervals (split-conformal log-ratios, nominal coverage "
                  f"{fmt(m.get('interval_nominal', 0.9))}): share of held-out rows inside the interval (mean "
                  f"width (hi - lo) / prediction). `test` = the random test split; the others = the extrapolation "
                  f"splits above, calibrated on a held-out share of their training rows.", "", cov, ""]
    parts += ["Real third-party GPU latency (timm benchmark, plain ResNets mapped to `ArchConfig`, one model per GPU):",
              "", timm_summary(), ""]
    parts += transfer_lines()
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--print", action="store_true")
    a = ap.parse_args(argv)
    text = section()
    if a.print:
        print(text)
        return
    readme = ROOT / "README.md"
    src = readme.read_text()
    if START not in src or END not in src:
        raise SystemExit(f"README.md lacks the markers {START} ... {END}")
    head, rest = src.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{text}\n{END}{tail}")
    print("README.md results section regenerated")


if __name__ == "__main__":
    main()
