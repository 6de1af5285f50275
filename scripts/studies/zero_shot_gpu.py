"""Zero-shot prediction for a GPU nobody has measured yet, saved BEFORE its data exists, then scored on it.

Issue 30 asks that the zero-shot model of the "Any device" issue be checked against a new GPU's real data,
with the prediction written down before the run. This study does both halves:

    python -m scripts.studies.zero_shot_gpu predict [--spec "H100 SXM"] [--out scripts/data/h100-zero-shot]
    python -m scripts.studies.zero_shot_gpu score --data carb/data/h100-reference.parquet [--out ...]

``predict`` fits ``carb-train``'s default model on the shipped H200 data in a temporary store (``carb-train
data=h200``), transfers it with ``carb-calibrate k=0 spec=<spec>`` (spec sheets only: nothing of the target
is measured) and predicts every configuration the GPU collector can draw (the ``paper`` space of
``conf/gpu_run.yaml``, 4,000 configurations) and the 3,072-point ``screening`` grid, as ``carb.load_model``
users would (screening-mode predictions, 90 % intervals, domain flags). Energy is the spec-record energy
physics of :mod:`carb.model.power` (time ratio x power ratio, the H200's measured power behaviour), its
interval widened for what no GPU has measured (the ``energy_note`` column says so). It writes
``<out>/prediction.parquet`` (one row per configuration: knobs, ``config_id``, ``pred_/lo_/hi_<target>``,
``space``, ``energy_note``) and
``<out>/provenance.json`` (UTC time, git commit, the commands, the source model's run and the spec record).
Commit both before the GPU's data comes back: the commit time is the proof.

``score`` joins the saved prediction with a measured dataset on ``config_id`` and prints, per target and
precision: rows, MAPE (%), Spearman rank correlation and the share of rows inside the saved interval; the
last line is machine-readable:
``zero_shot_gpu: rows=N latency_mape=X latency_spearman=X latency_coverage=X energy_mape=X memory_mape=X``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
#: The ``energy_note`` column of the saved prediction: what its energy interval does not know.
ENERGY_NOTE = ("energy zero-shot from the H200's measured power behaviour and both spec records (carb.model.power); "
               "no second GPU's energy has been measured, so the interval is widened for it")
TARGETS = ("latency_ms", "energy_J", "peak_memory_MB")


def _cli(name: str, args: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run ``carb-<name>`` (``python -m carb.<name>``) and return its output; raise with its tail on failure."""
    p = subprocess.run([sys.executable, "-m", f"carb.{name}", *args], env=env, cwd=cwd, capture_output=True,
                       text=True)
    if p.returncode:
        raise SystemExit(f"carb-{name} failed (rc {p.returncode}): {(p.stdout + p.stderr)[-600:]}")
    return p.stdout + p.stderr


def _registered(out: str, command: str) -> str:
    """The ``models:/<name>/<version>`` a command's output says it registered."""
    for line in out.splitlines():
        words = line.split()
        if line.startswith(f"carb-{command}: ") and "registered" in words and "version" in words:
            i = words.index("registered") + 1
            name = words[i + 1] if words[i] == "as" else words[i]
            return f"models:/{name}/{words[words.index('version') + 1]}"
    raise SystemExit(f"carb-{command}: no registration line in its output")


def predict(spec: str, out: Path) -> pd.DataFrame:
    """Fit, transfer and predict as the module docstring says; returns the prediction frame."""
    import carb
    from carb.design.space import space_config, space_frame

    with tempfile.TemporaryDirectory(prefix="carb-zero-shot-") as tmp:
        env = {**os.environ, "CARB_HOME": str(Path(tmp) / "home"), "MLFLOW_DISABLE_TELEMETRY": "true",
               "DO_NOT_TRACK": "1", "PYTHONPATH": str(ROOT)}
        train_out = _cli("train", ["data=h200"], env, Path(tmp))
        source = _registered(train_out, "train")
        cal_out = _cli("calibrate", [f"source={source}", "k=0", f"spec={json.dumps(spec)}"], env, Path(tmp))
        target = _registered(cal_out, "calibrate")
        model = carb.load_model(target, tracking_uri=f"sqlite:///{env['CARB_HOME']}/mlruns/mlflow.db")
        frames = []
        for name in ("paper", "screening"):
            knobs = space_frame(space_config(name))
            frames.append(model.predict(knobs).assign(space=name))
        pred = pd.concat(frames, ignore_index=True)
    pred["energy_note"] = ENERGY_NOTE
    out.mkdir(parents=True, exist_ok=True)
    pred.to_parquet(out / "prediction.parquet", index=False)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "carb", "conf"],
                                capture_output=True, text=True).stdout.strip())
    prov = {"what": f"zero-shot prediction for {spec!r} from the H200 model and two spec records, saved before "
                    "any measurement of that GPU", "written_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "git_commit": commit, "code_dirty": dirty, "spec": spec, "source_model": source, "target_model": target,
            "command": f"python -m scripts.studies.zero_shot_gpu predict --spec {spec!r}",
            "commands": [f"carb-train data=h200 -> {source}", f"carb-calibrate source={source} k=0 spec={spec!r}"],
            "calibrate_output": [ln for ln in cal_out.splitlines() if ln.startswith("carb-calibrate: ")
                                 and ("interval" in ln or ": spec" in ln or "source (" in ln
                                      or ": power (" in ln or "energy keeps" in ln)],
            "rows": {str(k): int(v) for k, v in pred["space"].value_counts().items()}}
    (out / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n")
    return pred


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two (n,) arrays (NaN below 3 rows)."""
    if len(a) < 3:
        return float("nan")
    return float(np.corrcoef(pd.Series(a).rank(), pd.Series(b).rank())[0, 1])


def score_table(pred: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Per (target, precision, and ``all``): rows, MAPE %, Spearman, interval coverage of the saved
    prediction ``pred`` on the ``measured`` rows they share a ``config_id`` with."""
    pred = pred.drop_duplicates("config_id")
    j = measured.merge(pred, on="config_id", suffixes=("", "_pred"))
    rows = []
    for t in TARGETS:
        if t not in j or f"pred_{t}" not in j:
            continue
        for prec, g in [("all", j), *j.groupby("precision")]:
            ok = g[t].notna() & (g[t] > 0) & g[f"pred_{t}"].notna()
            m, p = g.loc[ok, t].to_numpy(float), g.loc[ok, f"pred_{t}"].to_numpy(float)
            cov = float(((g.loc[ok, f"lo_{t}"] <= m) & (m <= g.loc[ok, f"hi_{t}"])).mean()) if f"lo_{t}" in g else np.nan
            rows.append({"target": t, "precision": prec, "rows": int(ok.sum()),
                         "mape_pct": float(np.mean(np.abs(p / m - 1)) * 100) if len(m) else np.nan,
                         "spearman": _spearman(m, p), "coverage": cov})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=["predict", "score"])
    ap.add_argument("--spec", default="H100 SXM", help="spec name or alias in carb/data/gpu_specs.csv")
    ap.add_argument("--out", default=str(ROOT / "scripts" / "data" / "h100-zero-shot"))
    ap.add_argument("--data", default=None, help="score: the measured dataset (.parquet)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if a.step == "predict":
        pred = predict(a.spec, out)
        print(f"zero_shot_gpu: {len(pred)} predictions for {a.spec!r} -> {out}")
        return
    if not a.data:
        raise SystemExit("--data: the measured dataset to score is required for 'score'")
    table = score_table(pd.read_parquet(out / "prediction.parquet"), pd.read_parquet(a.data))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    allrow = table[table["precision"] == "all"].set_index("target")

    def get(t: str, c: str) -> float:
        return float(allrow.loc[t, c]) if t in allrow.index else float("nan")
    print(f"zero_shot_gpu: rows={int(allrow['rows'].max()) if len(allrow) else 0} "
          f"latency_mape={get('latency_ms', 'mape_pct'):.1f} latency_spearman={get('latency_ms', 'spearman'):.3f} "
          f"latency_coverage={get('latency_ms', 'coverage'):.2f} energy_mape={get('energy_J', 'mape_pct'):.1f} "
          f"memory_mape={get('peak_memory_MB', 'mape_pct'):.1f}")


if __name__ == "__main__":
    main()
