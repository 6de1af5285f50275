"""Prospective check: measure screening candidates the CPU model never saw the like of, then score it.

Screening is extrapolation by nature: of the 3,072 candidates of the default grid, the CPU reference
model has most outside its training domain (batch 128 > 32, FLOPs beyond the largest measured, ...).
The extrapolation splits of ``carb-train`` test that inside the shipped data; this script tests it on new
measurements of the grid's own candidates, on the device the model was trained for:

    python scripts/studies/outside_check.py select  [--n 48] [--max-ms 4000] [--seed 0]
    python scripts/studies/outside_check.py measure [--max-minutes 25]     # alone on the machine
    python scripts/studies/outside_check.py anchors [--n-anchors 16]   # alone on the machine
    python scripts/studies/outside_check.py report

``select`` trains ``carb-train``'s default model on the shipped CPU reference (a temporary store),
screens the ``screening`` grid, and draws ``--n`` candidates outside the domain whose interval's upper
latency is at most ``--max-ms`` (so that a 2-core CPU measures them in minutes), evenly over their first
outside reason's knob and precision, seeded; it writes the plan (``scripts/data/cpu-outside-check.plan.csv``, knobs,
predictions and reasons at selection). ``measure`` refuses a device whose fingerprint is not the
reference's, then measures the plan with CARB's collector (``device=cpu measure=cpu``) into
``scripts/data/cpu-outside-check.parquet`` (resumable). ``anchors`` measures again, the same way,
``--n-anchors`` seeded configurations of the reference file itself (at least 20 ms each), into
``scripts/data/cpu-outside-check.anchors.parquet``: how the VM's speed moved since the reference was
measured, apart from any extrapolation (:func:`drift`). ``report`` retrains the same model and
scores the measured rows as ``carb-screen`` would (screening-mode predictions, intervals with the
outside calibration): R^2, MAPE, Spearman rank and interval coverage and width per target, B1 beside,
and per outside reason (:func:`check_report`).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PLAN = ROOT / "scripts" / "data" / "cpu-outside-check.plan.csv"
OUT = ROOT / "scripts" / "data" / "cpu-outside-check.parquet"
ANCHORS = ROOT / "scripts" / "data" / "cpu-outside-check.anchors.parquet"
KNOBS = ["block", "depth", "width_mult", "input_size", "batch_size", "precision", "early_downsample"]
TARGETS = ("latency_ms", "peak_memory_MB")


def train_model(tmp: str, *extra: str) -> Any:
    """``carb-train``'s default model on the shipped CPU reference, fitted into the store under ``tmp``;
    returns the fitted cascade (with its intervals and outside calibration)."""
    from carb.commands.cli import compose
    from carb.commands.train import load_fit, run_train

    cfg = compose("train", [f"tracking.uri=sqlite:///{tmp}/mlflow.db", "evaluate.figures=false", "print_table=false",
                            "evaluate.extrapolation.progress=false", "data=reference",
                            f"paths.output_dir={tmp}/outputs", *extra])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_train(cfg)
    return load_fit(Path(res["fit_folder"]))["cascade"]


def screen_rows(model: Any, configs: pd.DataFrame | list) -> pd.DataFrame:
    """Screening-mode predictions, intervals and domain flags of ``configs`` (as ``carb-screen`` scores them)."""
    from carb.analysis.screening import featurize, screen

    return screen(featurize(configs), model, outside="flag").scored


def first_knob(outside: str) -> str:
    """The column the first outside reason names (``batch_size 128 > 32; ...`` -> ``batch_size``)."""
    return outside.split("; ")[0].split(" ")[0] if isinstance(outside, str) and outside else ""


def select(scored: pd.DataFrame, n: int, max_ms: float, seed: int = 0) -> pd.DataFrame:
    """``n`` rows of ``scored`` (screened candidates) outside the domain with ``hi_latency_ms <= max_ms``,
    drawn evenly over :func:`first_knob` of their reasons x precision (round robin over the groups, each
    group in a seeded random order); fewer when fewer qualify."""
    hi = scored["hi_latency_ms"] if "hi_latency_ms" in scored else scored["pred_latency_ms"]
    pool = scored[~scored["in_domain"].astype(bool) & (hi <= max_ms)].copy()
    pool["reason_knob"] = pool["outside"].map(first_knob)
    rng = np.random.default_rng(seed)
    queues = {k: list(rng.permutation(g.index.to_numpy()))
              for k, g in sorted(pool.groupby(["reason_knob", "precision"]))}
    picked: list[int] = []
    while len(picked) < n and any(queues.values()):
        for k in list(queues):
            if queues[k] and len(picked) < n:
                picked.append(queues[k].pop(0))
    return pool.loc[picked].reset_index(drop=True)


def check_report(model: Any, measured: pd.DataFrame, reference: pd.DataFrame,
                 targets: tuple[str, ...] = TARGETS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(overall, by_reason)``: per target of ``targets``, the measured ok rows of ``measured`` against
    ``model``'s screening-mode predictions: n, R^2, MAPE (%), Spearman rank correlation, share inside the
    interval, mean relative width ((hi - lo) / pred), and B1's (FLOPs-only line fitted on ``reference``) R^2
    and MAPE; ``by_reason`` the same (no B1) per :func:`first_knob` group (``inside``: in the domain)."""
    from carb.analysis.evaluate import regression_metrics
    from carb.analysis.screening import spearman
    from carb.model.baselines import FlopsLinear

    ok = measured[measured["status"] == "ok"].reset_index(drop=True)
    s = screen_rows(model, _configs(ok))
    b1 = FlopsLinear().fit(reference, reference[list(targets)]).predict(ok)
    s["reason_knob"] = s["outside"].map(first_knob).replace("", "inside")
    rows, groups = [], []
    for t in targets:
        y, p = ok[t].to_numpy(float), s[f"pred_{t}"].to_numpy(float)
        lo, hi = s[f"lo_{t}"].to_numpy(float), s[f"hi_{t}"].to_numpy(float)
        inside = (lo <= y) & (y <= hi)
        width = (hi - lo) / p

        def stats(m: np.ndarray) -> dict[str, float]:
            r = regression_metrics(y[m], p[m])
            return {"n": int(m.sum()), "r2": r["r2"], "mape": r["mape"], "spearman": spearman(y[m], p[m]),
                    "coverage": float(inside[m].mean()), "width": float(np.mean(width[m]))}

        everything = np.isfinite(y) & np.isfinite(p)
        b = regression_metrics(y[everything], b1[f"pred_{t}"].to_numpy(float)[everything])
        rows.append({"target": t, **stats(everything), "b1_r2": b["r2"], "b1_mape": b["mape"]})
        for k, g in s.groupby("reason_knob"):
            m = everything & s.index.isin(g.index)
            if m.any():
                groups.append({"target": t, "reason": k, **stats(m)})
    return pd.DataFrame(rows), pd.DataFrame(groups)


def pick_anchors(reference: pd.DataFrame, n: int, seed: int = 0, min_ms: float = 20.0) -> pd.DataFrame:
    """``n`` seeded ok rows of ``reference`` of at least ``min_ms`` latency, evenly over precisions."""
    ok = reference[(reference["status"] == "ok") & (reference["latency_ms"] >= min_ms)]
    rng = np.random.default_rng(seed)
    per = {p: list(rng.permutation(g.index.to_numpy())) for p, g in sorted(ok.groupby("precision"))}
    picked: list[int] = []
    while len(picked) < n and any(per.values()):
        for p in per:
            if per[p] and len(picked) < n:
                picked.append(per[p].pop(0))
    return ok.loc[picked].reset_index(drop=True)


def drift(reference: pd.DataFrame, again: pd.DataFrame, target: str = "latency_ms") -> dict[str, float]:
    """Median and spread of ``again / reference`` for ``target`` over the configurations both hold (ok rows):
    ``{"n", "median", "min", "max"}`` (NaN without a common row)."""
    a = reference[reference["status"] == "ok"].set_index("config_id")[target]
    b = again[again["status"] == "ok"].set_index("config_id")[target]
    r = (b / a.reindex(b.index)).dropna()
    if not len(r):
        return {"n": 0, "median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"n": int(len(r)), "median": float(r.median()), "min": float(r.min()), "max": float(r.max())}


def _measure(configs: list, out: str, max_minutes: float) -> dict:
    """CARB's collector (``device=cpu measure=cpu``) on ``configs`` into ``out``, tracked in a temporary store."""
    from carb.commands.cli import compose
    from carb.commands.collect import run_collect

    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose("collect", ["device=cpu", "measure=cpu", f"out={out}", f"max_minutes={max_minutes}",
                                  f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"paths.output_dir={tmp}/outputs"])
        return run_collect(cfg, configs=configs)


def _configs(rows: pd.DataFrame) -> list:
    """ArchConfigs of measured rows (their knobs, ``stages`` and ``inner_mult`` included)."""
    from carb.design.arch import configs_from_records

    cols = [c for c in KNOBS + ["stages", "inner_mult"] if c in rows.columns]
    recs = rows[cols].astype(object).where(rows[cols].notna(), None).to_dict("records")
    return configs_from_records(recs, source="outside check")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=["select", "measure", "anchors", "report"])
    ap.add_argument("--n-anchors", type=int, default=16)
    ap.add_argument("--anchors", default=str(ANCHORS))
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--max-ms", type=float, default=4000.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=25.0)
    ap.add_argument("--plan", default=str(PLAN))
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    from carb.data.io import load_training_frame

    if a.step == "select":
        from carb.design.space import load_space

        with tempfile.TemporaryDirectory() as tmp:
            model = train_model(tmp)
            scored = screen_rows(model, load_space("screening"))
        plan = select(scored, a.n, a.max_ms, a.seed)
        cols = KNOBS + ["reason_knob", "outside"] + [c for c in plan.columns if c.startswith(("pred_", "lo_", "hi_"))]
        Path(a.plan).parent.mkdir(parents=True, exist_ok=True)
        plan[cols].to_csv(a.plan, index=False)
        print(f"select: {len(plan)} of {int((~scored['in_domain']).sum())} outside candidates "
              f"(hi_latency_ms <= {a.max_ms:g}) -> {a.plan}; by first reason: "
              + ", ".join(f"{k} {v}" for k, v in plan["reason_knob"].value_counts().items()))
        return 0
    if a.step in ("measure", "anchors"):
        from carb.measure.fingerprint import device_id, read_cpu_fingerprint

        ref, _ = load_training_frame("reference")
        here, there = device_id(read_cpu_fingerprint(1)), str(ref["device_id"].iloc[0])
        if here != there:
            print(f"{a.step}: this machine is device {here}, the reference model's is {there}; measure there",
                  file=sys.stderr)
            return 2
        if a.step == "measure":
            res = _measure(_configs(pd.read_csv(a.plan)), a.out, a.max_minutes)
        else:
            res = _measure(_configs(pick_anchors(ref, a.n_anchors, a.seed)), a.anchors, a.max_minutes)
            print(f"anchors: latency now / then {drift(ref, pd.read_parquet(a.anchors))}")
        print(f"{a.step}: {res['n_ok']} ok, {res['n_oom']} oom, {res['n_error']} error -> "
              f"{a.out if a.step == 'measure' else a.anchors}")
        return 0
    ref, _ = load_training_frame("reference")
    measured = pd.read_parquet(a.out)
    with tempfile.TemporaryDirectory() as tmp:
        model = train_model(tmp)
        overall, by = check_report(model, measured, ref)
    fmt = lambda v: f"{v:.3f}"  # noqa: E731
    print(overall.to_string(index=False, float_format=fmt))
    print(by.to_string(index=False, float_format=fmt))
    d = drift(ref, pd.read_parquet(a.anchors)) if Path(a.anchors).exists() else None
    if d:
        print(f"reference configurations measured again (anchors): latency now / then {d}")
    print("json: " + json.dumps({"overall": overall.to_dict("records"), "by_reason": by.to_dict("records"),
                                 "anchors": d}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
