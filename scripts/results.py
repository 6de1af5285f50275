"""Regenerate the results section of docs/RESULTS.md from the shipped data (numbers are never typed in).

    python -m scripts.results            # rewrite block `results` of docs/RESULTS.md (scripts.splice)
    python -m scripts.results --print    # print the section instead

Trains ``carb-train`` (default preset, ``model=auto``) on the shipped CPU reference dataset into a
temporary MLflow store, takes the test-split metrics beside B1, the extrapolation splits, the physical
sanity figures and the interval coverage when the model has intervals, runs the extrapolation
benchmark's timm part, and reads the reproducibility recheck from the dataset's provenance. Then the same
for the shipped H200 dataset (``data=h200``, measured energy): test accuracy beside B1 and B2, the
extrapolation splits, interval coverage, and a budget classification at the median of the test split's
measured energy and latency (CARB's point predictions against B1's and B2's; the rows whose interval
crosses the budget line). Everything between ``<!-- results:start -->`` and ``<!-- results:end -->`` in
docs/RESULTS.md is replaced (:func:`scripts.splice.splice`).

On a busy 2-core machine set ``CARB_N_JOBS=1 OMP_NUM_THREADS=1``: threaded boosting under contention can
make one refit a hundred times slower.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
#: The generated document this script writes block ``results`` of; its links are relative to its folder.
RESULTS_MD = ROOT / "docs" / "RESULTS.md"
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


def seed_spread(tmp: str, first: dict, targets: list[str], *extra: str) -> str:
    """One line: test R^2 and interval coverage over split seeds 0 and :data:`SPREAD_SEEDS` (min, median,
    mean, max: split-conformal coverage holds on average over calibration draws, and one draw of a few
    hundred rows whose errors cluster by architecture varies by several points), the model refitted per seed without the extrapolation refits (they do not change these).
    ``extra``: overrides of every refit (e.g. ``data=h200``)."""
    tag = "-".join(e.replace("=", "_") for e in extra)
    runs = [first] + [train_metrics(f"{tmp}/s{s}{tag}", f"split.seed={s}", "evaluate.extrapolation.enabled=false",
                                    "evaluate.sanity.enabled=false", "register=false", *extra)["metrics"]
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


def pct(v: float | None) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:.1f} %"


def accuracy_table(m: dict, targets: list[str], b2: bool = False) -> str:
    """Random-split test accuracy, CARB beside B1 (and, with ``b2``, B2 where it has metrics: energy)."""
    base = ("b1", "b2") if b2 else ("b1",)
    head = "| target | CARB R^2 | CARB MAE | CARB MAPE | " + " | ".join(
        f"{b.upper()} R^2 | {b.upper()} MAE | {b.upper()} MAPE" for b in base) + " |"
    rows = [head, "|---|---|---|---|" + "---|---|---|" * len(base)]
    for t in targets:
        cells = [f"{fmt(m.get(f'{b}_{t}_r2'), '.3f')} | {fmt(m.get(f'{b}_{t}_mae'), '.3g')} | "
                 f"{pct(m.get(f'{b}_{t}_mape'))}" for b in base]
        rows.append(f"| {TARGET_LABEL[t]} | {fmt(m.get(f'test_{t}_r2'), '.4f')} | {fmt(m.get(f'test_{t}_mae'), '.3g')} | "
                    f"{pct(m.get(f'test_{t}_mape'))} | " + " | ".join(cells) + " |")
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
    """Leave-one-model-out latency on timm's GPUs, CARB vs B1: pooled over the folds (every row predicted
    by the fold that never saw its model; :func:`carb.analysis.extrapolation.pool_group_splits`), the
    worst single fold (2-4 rows each), and the coverage of 90 % intervals on the leave-one-model-out and
    larger-input rows, calibrated on the other GPUs' errors on both
    (:func:`carb.analysis.extrapolation.cross_dataset_coverage`)."""
    from carb.analysis.extrapolation import (
        cross_dataset_coverage,
        evaluate_splits,
        group_splits,
        pool_group_splits,
        range_splits,
    )

    from scripts.bench.extrapolation import make, timm_latency

    tabs, lomo, larger, n = {}, {}, {}, {}
    for gpu in ("RTX 3090", "RTX 4090", "RTX 5090", "RTX PRO 6000 Blackwell Max-Q"):
        t = timm_latency(gpu)
        preds: dict = {}
        splits = group_splits(t, "model", "model", min_rows=2) + range_splits(
            t, {"input_size": "input"}, train_share=0.8, min_rows=4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tab = evaluate_splits(make(True), t, splits, targets=["latency_ms"], predictions=preds)
        tabs[gpu], n[gpu] = pool_group_splits(tab, preds, "model"), len(t)
        lomo[gpu] = pd.concat([v for k, v in preds.items() if k.startswith("model_")], ignore_index=True)
        larger[gpu] = preds["input"]
    both = {g: pd.concat([lomo[g], larger[g]], ignore_index=True) for g in lomo}
    cov_m = cross_dataset_coverage(lomo, "latency_ms", 0.9, cal_rows=both).set_index("dataset")
    cov_i = cross_dataset_coverage(larger, "latency_ms", 0.9, cal_rows=both).set_index("dataset")
    lines = ["| GPU (timm, eager amp_fp16) | rows | leave-one-model-out latency R^2, pooled (MAPE) | B1 pooled (MAPE) | "
             "worst single fold of 7: CARB R^2 | B1 | folds where B1's R^2 is higher | larger inputs (> 224 px): "
             "CARB R^2 (MAPE) | B1 | 90 % interval coverage, leave-one-model-out / larger inputs (width) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for gpu, tab in tabs.items():
        p = tab[tab["split"] == "model"].iloc[0]
        i = tab[tab["split"] == "input"].iloc[0]
        f = tab[tab["fold"].astype(bool)]
        lines.append(f"| {gpu} | {n[gpu]} | {p['r2']:.4f} ({p['mape']:.1f} %) | {p['b1_r2']:.4f} ({p['b1_mape']:.1f} %) | "
                     f"{f['r2'].min():.3f} | {f['b1_r2'].min():.3f} | {int((f['r2'] < f['b1_r2']).sum())} | "
                     f"{i['r2']:.3f} ({i['mape']:.1f} %) | {i['b1_r2']:.3f} | {cov_m.loc[gpu, 'coverage']:.3f} / "
                     f"{cov_i.loc[gpu, 'coverage']:.3f} ({cov_m.loc[gpu, 'width']:.3f}) |")
    return "\n".join(lines) + "\n\n" + input_size_line()


def input_size_line(gpu: str = "RTX PRO 6000 Blackwell Max-Q") -> str:
    """Why ``gpu``'s larger inputs are missed: its bottleneck ResNets' time per multiply-add at each input
    size against 224 px, eager and compiled, and which sizes pass 2**31 elements
    (:mod:`carb.analysis.input_efficiency`)."""
    from carb.analysis.input_efficiency import input_excess, summary

    s = summary(input_excess())
    s = s[(s["device_name"] == gpu) & (s["block"] == "bottleneck")]

    def sizes(mode: str) -> str:
        r = s[(s["compile"] == "eager") == (mode == "eager")].sort_values("input_size")
        return ", ".join(f"{int(x.input_size)} px {x.median:.3f}" + (" (past 2**31)" if x.past_int32 else "")
                         for x in r.itertuples())

    return (f"Why the {gpu}'s larger inputs are missed (`carb/analysis/input_efficiency.py`): in eager mode 224 px "
            f"is its most efficient input size. Bottleneck ResNets' time per multiply-add against 224 px (median): "
            f"{sizes('eager')}; under torch.compile {sizes('compiled')}. A model trained on 160-224 px sees "
            "efficiency rise with the input and cannot know that it falls again at 288 px. Sizes below the "
            "32-bit index limit are as far off as 288 px, so tensors past 2**31 elements are not the cause.")


def outside_check_lines(path: Path | None = None) -> list[str]:
    """The prospective check (``scripts/studies/outside_check.py``): screening candidates outside the
    CPU model's domain, measured afterwards, against the model's screening-mode predictions and intervals,
    B1 beside; a table and a line per outside reason. Empty without the measured file."""
    from scripts.studies.outside_check import ANCHORS, OUT, check_report, drift, train_model

    from carb.data.io import load_training_frame

    path = Path(path or OUT)
    if not path.exists():
        return []
    measured = pd.read_parquet(path)
    ref, _ = load_training_frame("reference")
    with tempfile.TemporaryDirectory() as tmp:
        overall, by = check_report(train_model(tmp), measured, ref)
    ok = measured[measured["status"] == "ok"]
    when = pd.to_datetime(ok["measured_at"], utc=True) if "measured_at" in ok else None
    span = (f", {when.min():%Y-%m-%d %H:%M} to {when.max():%H:%M} UTC" if when is not None and len(when) else "")
    lines = [f"Prospective check (`scripts/studies/outside_check.py`): {len(ok)} candidates of the 3,072-point "
             f"screening grid that lie **outside** this model's training domain (drawn evenly over their first outside "
             f"reason and precision among those whose upper predicted latency is at most 4 s), measured afterwards by "
             f"`carb-collect` on the same fingerprinted VM (device `{ok['device_id'].iloc[0]}`{span}; "
             f"{int((measured['status'] != 'ok').sum())} not ok), scored as `carb-screen` scores them:", "",
             "| target | rows | CARB R^2 (MAPE) | B1 R^2 (MAPE) | Spearman rank | 90 % interval coverage (mean width) |",
             "|---|---|---|---|---|---|"]
    for r in overall.itertuples():
        lines.append(f"| {TARGET_LABEL.get(r.target, r.target)} | {r.n} | {r.r2:.3f} ({r.mape:.1f} %) | "
                     f"{r.b1_r2:.3f} ({r.b1_mape:.1f} %) | {r.spearman:.3f} | {r.coverage:.3f} ({r.width:.2f}) |")
    per = "; ".join(f"{TARGET_LABEL.get(t, t)}: " + ", ".join(
        f"{g.reason} {g.coverage:.2f} (MAPE {g.mape:.1f} %, n={g.n})" for g in grp.itertuples())
        for t, grp in by.groupby("target", sort=False))
    lines += ["", f"By first outside reason (`batch_size`: a batch beyond the largest measured; `flops`: more work per "
              f"batch than any measured row), coverage (MAPE, rows): {per}."]
    if ANCHORS.exists():
        d = drift(ref, pd.read_parquet(ANCHORS))
        lines += [f"The same session measured {d['n']} configurations of the reference file again: latency now / then "
                  f"median {d['median']:.3f} (min {d['min']:.3f}, max {d['max']:.3f}), so part of any under-prediction "
                  f"above is the VM, not the model."]
    return lines + [""]


def later_runs_lines() -> list[str]:
    """The H200 prospective check (``scripts/studies/later_runs.py``): the model of the first GPU
    run scored on the configurations the later runs added."""
    from scripts.studies.later_runs import later_runs_report

    r = later_runs_report()
    lines = [f"Prospective check on the H200 (`scripts/studies/later_runs.py`): `carb-train` defaults on the first "
             f"run alone ({r['n_first']} rows), scored as `carb-screen` scores them on the {r['n_later']} configurations "
             f"the two later runs added (architectures the first run never drew, measured hours later):", "",
             "| target | rows | CARB R^2 (MAPE) | B1 R^2 (MAPE) | Spearman rank | 90 % interval coverage (mean width) |",
             "|---|---|---|---|---|---|"]
    for x in r["overall"].itertuples():
        lines.append(f"| {TARGET_LABEL.get(x.target, x.target)} | {x.n} | {x.r2:.3f} ({x.mape:.1f} %) | "
                     f"{x.b1_r2:.3f} ({x.b1_mape:.1f} %) | {x.spearman:.3f} | {x.coverage:.3f} ({x.width:.2f}) |")
    w = r["overall_without_arch"].set_index("target")["coverage"]
    cov = " / ".join(f"{w[t]:.3f}" for t in r["overall"]["target"])
    names = " / ".join(TARGET_LABEL.get(t, t).split(" (")[0] for t in r["overall"]["target"])
    return lines + ["", "Every one of those rows is an architecture the model never saw: such candidates get the union "
                    "with intervals calibrated on whole architectures held out (`evaluate.architecture_intervals`); "
                    "with the calibration rows alone, which share their networks with the training rows, they "
                    f"covered {cov} ({names}).", ""]


def later_session_lines() -> list[str]:
    """A CPU model's latency intervals on later sessions of its device (``scripts/studies/later_session.py``)."""
    from scripts.studies.later_session import later_session_report

    t, terms, last = later_session_report()
    cell = t.set_index(["window", "precision", "scope"])
    scopes = ("this_session", "later_session", "later_session_lodo")
    lines = ["A later session (`scripts/studies/later_session.py`): `carb-train` defaults on the Xeon's 2026-12-07 "
             "16:07 window, its 90 % latency intervals scored on the device's other windows (coverage, median hi/lo) "
             "with the rows' own session's intervals, with the session drift screening adds (pooled over the "
             f"CPUs' windows, log sd {terms['later_session']['sd_log']:.3f}), and with the drift measured without "
             f"the Xeon (log sd {terms['later_session_lodo']['sd_log']:.3f}: the fair score):", "",
             "| window | precision | rows | this session | later session | later session, drift without the Xeon |",
             "|---|---|---|---|---|---|"]
    for (w, p), g in t.groupby(["window", "precision"], sort=False):
        vals = [cell.loc[(w, p, s)] for s in scopes]
        lines.append(f"| {w} | {p} | {int(vals[0]['n'])} | " + " | ".join(
            f"{v['coverage']:.2f} ({v['hi_lo']:.2f})" for v in vals) + " |")
    return lines + ["", f"`{last}`", ""]


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


def regime_line(m: dict, targets: list[str]) -> str:
    """One line: test-split coverage (width) per GPU regime (``interval_test_<target>_<regime>_*``
    metrics, :func:`carb.model.intervals.interval_groups`); empty when the model has no regimes."""
    parts = []
    for t in targets:
        cells = [f"{g} {m[f'interval_test_{t}_{g}_coverage']:.3f} ({m[f'interval_test_{t}_{g}_width']:.2f})"
                 for g in ("device", "launch") if f"interval_test_{t}_{g}_coverage" in m]
        if cells:
            parts.append(f"{TARGET_LABEL.get(t, t)}: " + ", ".join(cells))
    if not parts:
        return ""
    return ("Latency and energy intervals are calibrated per regime (Mondrian conformal; device-bound when the "
            "overlapped latency prior's device work is at least its host launches, else launch-bound): test-split "
            "coverage (mean width) by regime, " + "; ".join(parts) + ".")


def transfer_lines() -> list[str]:
    """The few-shot calibration benchmark (scripts/bench/transfer.py): GPU pairs per K and the
    CPU transfer at K = 10."""
    from scripts.bench.transfer import cpu_here_table, cpu_table, gpu_table, pair_summary

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
            "`scripts/bench/transfer.py`). timm's 4 GPUs, every ordered pair (12): a model fitted on one "
            "GPU's 22 ResNet rows, calibrated with K space-filling rows of another GPU, scored on that GPU's other "
            "rows (latency; at K = 20 only 2 rows are left, so that line says little):", "", *lines, "",
            f"CPU, K = 10, scored on the other {int(h['n'].iloc[0]) if len(h) else 0} rows of 100. Same VM, later: "
            f"the model of the reference file above calibrated with rows measured on the same VM after it "
            f"(`scripts/data/cpu-calibration-100.parquet`). Another VM: the model of the previous shipped file "
            f"(another 2-core VM, measured under load, bf16 without native instructions) calibrated with 100 rows "
            f"drawn from the reference file. `flops_k` = a FLOPs-only line fitted on the same K rows:", "", *cpu, ""]


def zero_shot_band_lines() -> list[str]:
    """The zero-shot bands ``carb-calibrate k=0`` applies, read from their one source (``conf/calibrate.yaml``,
    ``zero_shot``), never typed here."""
    from scripts.bench.transfer_pairs import configured_bands

    b = configured_bands()
    return [f"Zero-shot bands that `carb-calibrate k=0` applies (`conf/calibrate.yaml`, `zero_shot`): spec sheets "
            f"(GPU) log error 5-95 % [{b['spec'][0]:.3f}, {b['spec'][1]:.3f}] measured on {b['spec_devices']} GPUs; "
            f"device probes (CPU) [{b['probe'][0]:.3f}, {b['probe'][1]:.3f}] on {b['probe_devices']} CPUs"
            + (f", with the other CPUs as extra sources (the multi-source base, the default; device-level band) "
               f"[{b['probe_multi'][0]:.3f}, {b['probe_multi'][1]:.3f}] on {b['probe_multi_devices']} CPUs"
               if b.get("probe_multi") else "")
            + ". Each is added to the source model's own interval (never narrower than it; P within 5-95 %).", ""]


def transfer_pairs_lines() -> list[str]:
    """Issue 29's any-device benchmark (``python -m scripts.bench.transfer_pairs``): every ordered pair of the
    real devices the project has, one row per pair (latency MAPE %, worst precision), and its two summary lines."""
    from scripts.bench.transfer import markdown
    from scripts.bench.transfer_pairs import (all_pairs, baselines_line, coverage_cells_line, device_table, headline,
                                              pair_overview, pooled_coverage_line, quickstart_k,
                                              single_source_line)

    t, _ = all_pairs(sorted({0, 10, quickstart_k()}))
    o = pair_overview(t)
    lines = ["| source -> target | K=0 source | K=0 CARB | K=0 single source | K=10 CARB | K=10 single source | "
             "K=10 from the source alone | K=10 FLOPs-only | K=10 Spearman min | K=10 coverage min | "
             "K=10 median hi/lo max |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(v: float, digits: int = 1) -> str:
        return "n/a" if pd.isna(v) else f"{v:.{digits}f}"

    for r in o.itertuples():
        lines.append(f"| {r.source} -> {r.target_device} | {f(r.k0_source)} | {f(r.k0_carb)} | {f(r.k0_single)} | "
                     f"{f(r.k10_carb)} | {f(r.k10_single)} | {f(r.k10_source_base)} | {f(r.k10_flops_only)} | {f(r.k10_spearman_min, 3)} | "
                     f"{f(r.k10_coverage_min, 2)} | {f(r.k10_width_max, 2)} |")
    return ["Any device (`python -m scripts.bench.transfer_pairs`): every ordered pair of the real devices the "
            "project has data for (the EPYC Zen 5 reference, the EPYC Zen 4 of `carb/data/cpu-amd-zen4.parquet`, "
            "the Xeon of `../shared/data/cpu-intel-xeon`, timm's 4 GPUs), latency MAPE in %, worst precision per "
            "pair. K=0 CARB is the zero-shot model (for CPUs the multi-source base: every other CPU's model, each "
            "transferred by its device probe and the target's, combined; beside it the pair's source alone; spec "
            "sheets for GPUs); K=10 CARB is "
            "`carb-calibrate` with 10 rows of the target, scored on its other rows, with 90 % intervals from the "
            "device-level band of the pairs that involve neither of its devices (leave-one-device-out; issue 44). "
            "The H200 shares no configuration with timm's rows and is not paired.", "",
            *lines, "", "Per left-out target device (latency MAPE % worst source and precision at K=0, the "
            f"quickstart's K={quickstart_k()} and K=10; 90 % coverage pooled over the device's held-out rows; "
            "the devices its band was measured on):", "", markdown(device_table(t).round(3)), "", f"`{pooled_coverage_line(t)}` (each pair's held-out rows pooled over precisions, pairs "
            "weighted equally; beside the per-pair-and-precision minimum of the last line)", "",
            f"`{coverage_cells_line(t)}` (the K=10 pair-and-precision cells whose coverage an exact two-sided "
            "binomial test at 5 % finds inconsistent with the nominal 0.90, inside/held-out rows; a GPU cell has "
            "12 rows, where 10/12 is consistent)", "",
            f"`{baselines_line(t)}`", "", f"`{single_source_line(t)}`", "", f"`{headline(t)}`", ""]


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


H200_DATA = "carb/data/h200-reference"
#: Targets of the H200 budget classification (the budget line: the test split's measured median).
BUDGET_TARGETS = ("energy_J", "latency_ms")


def _repeat_text(rep: dict) -> str:
    """``n`` repeats and the heavy ones' latency and energy ratios (new / first), from a merged run entry."""
    lat, en = (rep.get(t, {}).get("heavy", {}) for t in ("latency_ms", "energy_J"))
    return (f"{rep.get('n', 0)} configurations measured again (those of >= {fmt(rep.get('heavy_latency_ms'), '.0f')}"
            f" ms, n={lat.get('n', 0)}: latency x{fmt(lat.get('median'))}, energy x{fmt(en.get('median'))})")


def h200_provenance_lines() -> list[str]:
    """What the shipped H200 dataset is: its provenance file (one run, or several merged by
    ``carb-collect import_run``) and the parquet's own rows."""
    p, data = ROOT / f"{H200_DATA}.provenance.json", ROOT / f"{H200_DATA}.parquet"
    if not p.exists() or not data.exists():
        return ["(no H200 dataset or provenance file)"]
    prov = json.loads(p.read_text())
    dev, counts = prov.get("device", {}), prov.get("counts", {})
    runs = prov.get("runs") or [{**prov, "seed": (prov.get("config") or {}).get("seed")}]
    d = pd.read_parquet(data)
    when = pd.to_datetime(d["measured_at"], utc=True)
    days = sorted({f"{t:%Y-%m-%d}" for t in when})
    capped = int(d["throttle_reasons"].astype(str).str.contains("power_cap").sum()) if "throttle_reasons" in d else 0
    precisions = ", ".join(sorted(d["precision"].astype(str).unique()))
    arch = ["block", "depth", "width_mult", "early_downsample"]
    n_arch = len(d[arch].drop_duplicates()) if set(arch) <= set(d.columns) else "?"
    per_run = []
    for r in runs:
        dr = r.get("drift") or {}
        t = f"seed {r.get('seed', '?')}: {r.get('rows', '?')} ok rows"
        if "rows_added" in r:
            t += f", {r['rows_added']} new, {_repeat_text(r.get('repeats') or {})}"
        t += (f", drift (end / first, median of {dr.get('n', '?')}) latency {fmt(dr.get('latency_ratio_median'))}, "
              f"energy {fmt(dr.get('energy_ratio_median'))}")
        per_run.append(t)
    return [f"Dataset: `{H200_DATA}.parquet` ([what and how]({_link(ROOT / f'{H200_DATA}.md')})), {len(d)} rows ({n_arch} architectures) "
            f"measured by `python -m carb.measure.gpu_run` with CARB's own collector on one {dev.get('device_name', '?')} "
            f"({dev.get('multiprocessors', '?')} SMs, power limit {fmt(dev.get('power_limit_W'), '.0f')} W, default "
            f"clocks, driver {dev.get('driver', '?')}, torch {dev.get('torch_version', prov.get('torch', '?'))}), "
            f"device `{prov.get('device_id', '?')}`, in {len(runs)} run{'s' if len(runs) > 1 else ''} on "
            f"{', '.join(days)} ({when.min():%H:%M} to {when.max():%H:%M} UTC); {counts.get('ok', '?')} measurements ok (repeats included), "
            f"{counts.get('oom', '?')} out of memory, {counts.get('error', '?')} errors; {precisions}, batch "
            f"{d['batch_size'].min()}-{d['batch_size'].max()}, inputs {d['input_size'].min()}-"
            f"{d['input_size'].max()} px; energy per batch from the NVML energy counter; {capped} rows ran at the "
            f"software power cap. Runs: " + "; ".join(per_run) + "."]


def classify(measured: np.ndarray, pred: np.ndarray, limit: float) -> dict[str, float]:
    """Whether "within budget" (``<= limit``) from ``pred`` against ``measured``: accuracy, precision (share of
    the predicted-within rows measured within), recall (share of the measured-within rows predicted
    within) and the counts behind them, from :func:`carb.analysis.evaluate.budget_classification`."""
    from carb.analysis.evaluate import budget_classification

    c = budget_classification(measured, pred, limit)
    tp = c["n_measured_feasible"] - c["n_false_reject"]
    pred_in = tp + c["n_false_accept"]
    return {**c, "precision": tp / pred_in if pred_in else float("nan"),
            "recall": tp / c["n_measured_feasible"] if c["n_measured_feasible"] else float("nan")}


def budget_table(fit_folder: str, split_seed: int, fractions: tuple[float, ...]) -> list[str]:
    """Budget classification on the H200 test split at the median of its measured energy and latency:
    CARB as screening scores (:func:`carb.analysis.screening.score`, telemetry not measured, with
    intervals and :func:`~carb.analysis.screening.prioritize`'s ``borderline``), CARB with the test rows'
    measured telemetry (as the accuracy table), B1 and B2 (energy; it needs the measured latency)."""
    from carb.analysis.screening import prioritize, score
    from carb.commands.train import load_fit
    from carb.data.split import split_dataset
    from carb.model.baselines import FlopsLinear, LatencyEnergyProxy

    fit = load_fit(Path(fit_folder))
    cascade, test, full = fit["cascade"], fit["test"].reset_index(drop=True), fit["full"]
    train = split_dataset(full, seed=split_seed, fractions=fractions).frames4(full)[0]
    targets = [t for t in BUDGET_TARGETS if t in cascade.targets_]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scored = score(cascade, test)
        b1_model = FlopsLinear().fit(train, train[targets])
        b1 = b1_model.predict(test)
        b2 = LatencyEnergyProxy().fit(train, train["energy_J"]).predict(test) if "energy_J" in targets else None
    limits = {t: float(test[t].median()) for t in targets}
    preds = {"CARB, screening (telemetry not measured)": lambda t: scored[f"pred_{t}"],
             "CARB, measured telemetry (as the accuracy table)": lambda t: fit["extras"]["pred"][f"pred_{t}"],
             "B1 (FLOPs-only)": lambda t: b1[f"pred_{t}"],
             "B2 (energy from measured latency)":
                 lambda t: b2[f"pred_{t}"] if b2 is not None and t == "energy_J" else None}
    head = "| predictor | " + " | ".join(f"{TARGET_LABEL[t]}: accuracy | precision | recall | false accepts"
                                          for t in targets) + " |"
    rows = [head, "|---|" + "---|---|---|---|" * len(targets)]
    none_within = []
    for name, get in preds.items():
        cells = []
        for t in targets:
            p = get(t)
            if p is None:
                cells.append("- | - | - | -")
                continue
            p = np.asarray(p, dtype=float)
            c = classify(test[t].to_numpy(float), p, limits[t])
            cells.append(f"{c['accuracy']:.3f} | {fmt(c['precision'])} | {c['recall']:.3f} | {c['n_false_accept']}")
            if not np.any(p <= limits[t]):
                icpt = (f", intercept {b1_model.models_[t].intercept_:.3g}" if name.startswith("B1")
                        and t in b1_model.models_ else "")
                none_within.append(f"{name.split(' ')[0]} calls no row within the {TARGET_LABEL[t]} budget (smallest "
                                   f"prediction {np.nanmin(p):.3g}{icpt}, budget {limits[t]:.3g})")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    if none_within:
        rows += ["", "; ".join(none_within) + ": precision undefined (`-`). A least-squares line in FLOPs follows "
                 "the large configurations; its intercept alone can lie above the median."]
    notes = []
    for t in targets:
        d = prioritize(scored, {t: limits[t]}, {})
        m = test[t].to_numpy(float)
        dec = d["decision"].to_numpy()
        within = m <= limits[t]
        wrong = (d["feasible"].to_numpy() != within)
        firm = dec != "borderline"
        firm_ok = ((dec == "accept") & within) | ((dec == "reject") & ~within)
        notes.append(f"- {TARGET_LABEL[t]} at {limits[t]:.3g} ({int(within.sum())} of {len(m)} rows measured within): "
                     f"{int((dec == 'accept').sum())} accept, {int((dec == 'reject').sum())} reject, "
                     f"{int((~firm).sum())} borderline (interval crosses the line); the accept/reject calls are right "
                     f"for {int(firm_ok[firm].sum())} of {int(firm.sum())}; {int((wrong & ~firm).sum())} of the "
                     f"{int(wrong.sum())} wrong point calls are borderline.")
    return [f"Budget classification on the test split ({len(test)} rows): \"within budget\" at the median of the "
            f"split's measured value, from each predictor's point prediction (precision: share of the rows called "
            f"within that are; recall: share of the rows within that are called so; false accept: called within, "
            f"measured over):", "", *rows, "",
            "With CARB's intervals (screening, `carb.analysis.screening.prioritize`: `borderline` when the "
            "interval crosses the budget line, else `accept` / `reject`):", "", *notes, ""]


#: Where the figures docs/RESULTS.md shows are written (linked relative to docs/).
FIGURES = ROOT / "docs" / "figures"


def _link(path: Path) -> str:
    """``path`` (a file of the repository) as a Markdown link target relative to docs/RESULTS.md's folder."""
    return Path(os.path.relpath(path, RESULTS_MD.parent)).as_posix()


def xval_figure(fit_folder: str, out: Path) -> str | None:
    """Draw the extrapolation figure of a saved ``carb-train`` fit (:func:`carb.plots.train.extrapolation_figure`)
    to ``out`` (PNG); returns its path relative to the repository root, None when the fit has no
    extrapolation predictions."""
    from carb.commands.train import load_fit
    from carb.plots.train import DPI, extrapolation_figure

    ex = load_fit(Path(fit_folder))["extras"]
    if not ex.get("extrapolation_predictions"):
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    extrapolation_figure(ex["extrapolation_predictions"], ex.get("extrapolation")).savefig(out, dpi=DPI)
    return str(out.relative_to(ROOT))


def h200_part(tmp: str) -> list[str]:
    """The H200 subsection: ``carb-train data=h200`` with the defaults, the same tables as the CPU part
    with B2 beside energy, and the budget classification."""
    from carb.commands.cli import compose

    r = train_metrics(f"{tmp}/h200", "data=h200", f"paths.output_dir={tmp}/h200/out")
    m, targets = r["metrics"], list(r["targets"])
    cfg = compose("train", ["data=h200"])
    parts = ["### NVIDIA H200: real GPU data measured by CARB", ""] + h200_provenance_lines() + [""]
    parts += [f"Same defaults (`carb-train data=h200`, `model=auto` -> `{r.get('preset', 'auto')}`, split seed "
              f"{int(cfg.split.seed)}), test rows; B1 = FLOPs-only linear regression, B2 = energy as a linear "
              f"function of the measured latency (it needs the latency measured, so it is no predictor for an "
              f"unmeasured configuration):", "", accuracy_table(m, targets, b2=True), "",
              seed_spread(tmp, m, targets, "data=h200"), ""]
    parts += ["Extrapolation (as above: train on the lower range of one knob, test on the upper; precision: train "
              "fp32, test bf16 and fp16). R^2 (MAPE) beside B1:", "", xval_table(m, targets), ""]
    fig = xval_figure(r["fit_folder"], FIGURES / "extrapolation_h200.png")
    if fig:
        parts += [f"The same splits drawn (`figures/extrapolation.png` of the `carb-train` run; every test row, CARB "
                  f"beside B1):", "", f"![H200 extrapolation splits: predicted vs measured, CARB and B1]({_link(ROOT / fig)})", ""]
    cov = coverage_table(m, targets)
    if cov:
        parts += [f"Prediction intervals (nominal coverage {fmt(m.get('interval_nominal', 0.9))}; share of held-out "
                  f"rows inside, mean relative width):", "", cov, ""]
        reg = regime_line(m, targets)
        if reg:
            parts += [reg, ""]
    parts += budget_table(r["fit_folder"], int(cfg.split.seed), tuple(float(f) for f in cfg.split.fractions))
    return parts


def section() -> str:
    """The results section of docs/RESULTS.md (Markdown)."""
    with tempfile.TemporaryDirectory() as tmp:
        r = train_metrics(tmp)
        m, targets = r["metrics"], list(r["targets"])
        spread = seed_spread(tmp, m, targets)
        h200 = h200_part(tmp)
    parts = ["## Results on this project's own data", "",
             "Generated by `python -m scripts.results` (do not edit by hand).", ""]
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
    parts += outside_check_lines()
    parts += h200
    parts += later_runs_lines()
    parts += later_session_lines()
    parts += ["### Third-party GPU latency and few-shot calibration", "",
              "Real third-party GPU latency (timm benchmark, plain ResNets mapped to `ArchConfig`, one model per GPU):",
              "", timm_summary(), ""]
    parts += transfer_lines()
    parts += ["### Any device: every pair, zero-shot and K = 10", ""] + zero_shot_band_lines() + transfer_pairs_lines()
    from scripts.studies.energy_floor import floor_lines

    parts += floor_lines()   # zero-shot energy per image against MLPerf floors (issue 45)
    from scripts.zoo_results import zoo_lines

    parts += zoo_lines()     # the zoo benchmark's saved figures (issue 43; scripts/bench/zoo.py writes them)
    return "\n".join(parts)


#: Lines a command or a benchmark prints while the section is computed, never part of it: a command's
#: ``carb-<cmd>: ...`` lines, warnings, progress lines (``[ 42%] ...``), a benchmark's ``== <part>`` headings
#: and its ``  fitted <device> (<n> rows) [i/n, <s> s]`` lines.
LOG_LINE = re.compile(r"^(carb(-[a-z]+)?: |(warning|error): |\w*Warning: |== |\s*\[\s*\d+%\] |"
                      r"\s+fitted .+ \[\d+/\d+, \d+ s\]$)")


def clean_section(text: str) -> str:
    """``text`` (the section, Markdown) without what is not the section: anything before its first ``## ``
    heading (the section starts there), log lines (:data:`LOG_LINE`) and a line repeated right after itself
    (a table row or a blank line excepted), so a log line printed once per refit never reaches the document."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("## ")), 0)
    out: list[str] = []
    for line in lines[first:]:
        if LOG_LINE.match(line):
            continue
        if out and line.strip() and line == out[-1] and not line.lstrip().startswith("|"):
            continue
        out.append(line)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    """Write the section into docs/RESULTS.md (or print it with ``--print``). What the work prints (the
    commands' and benchmarks' lines) goes to stderr, never into the section: stdout carries the section
    alone, and :func:`clean_section` drops log lines that reach the text itself."""
    import contextlib

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--print", action="store_true")
    a = ap.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):
        text = clean_section(section())
    if a.print:
        print(text)
        return
    from scripts.splice import splice

    splice(RESULTS_MD, "results", text)


if __name__ == "__main__":
    main()
