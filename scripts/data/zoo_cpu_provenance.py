"""Write the provenance and the figures of the data card of a zoo dataset measured by ``carb-collect space=zoo``.

    python scripts/data/zoo_cpu_provenance.py carb/data/zoo-cpu.parquet --log /tmp/quiet/window.log \
        --command "carb-collect space=zoo device=cpu measure=cpu out=... max_minutes=20"
    python scripts/data/zoo_cpu_provenance.py carb/data/zoo-cpu-xeon.parquet --commit ffa0ba9 \
        --log /tmp/xeonz/wall.log /tmp/xeonz/zoo.log --command "..."   # the Xeon's zoo (another device)

Writes ``<stem>.provenance.json`` beside the dataset (what, the command, the commit, the device fingerprint,
when, rows by status and precision, families and models, the contention guard's record, the repeat passes'
spread per precision, the window log) and prints the card's tables (Markdown) on stdout. ``--commit``: the
commit the rows were measured at (default: this checkout's HEAD); ``--log``: one or more log files of the window,
stored one after another. Any CPU's zoo: the device comes from the rows.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.data.io import load_dataset  # noqa: E402
from carb.files import write_atomic  # noqa: E402


def _commit() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def spread_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per precision: ok rows, rows with two passes, median / p90 / max run-to-run spread (%), and the
    median relative standard deviation of the timed window (``latency_std_ms / latency_ms``, %)."""
    ok = df[df["status"] == "ok"]
    rows = []
    for p, g in ok.groupby("precision"):
        s = g["latency_repeat_spread"].dropna()
        rows.append({"precision": p, "rows": len(g), "with 2 passes": len(s),
                     "spread median %": 100 * s.median() if len(s) else np.nan,
                     "spread p90 %": 100 * s.quantile(0.9) if len(s) else np.nan,
                     "spread max %": 100 * s.max() if len(s) else np.nan,
                     "window std median %": 100 * (g["latency_std_ms"] / g["latency_ms"]).median()})
    return pd.DataFrame(rows)


def window_log(paths: list[str]) -> str | None:
    """The text of the window's log files that exist, each headed by ``== <file name>``; None when none."""
    parts = [f"== {Path(p).name}\n{Path(p).read_text()}" for p in paths if Path(p).is_file()]
    return "".join(parts) if parts else None


def kept_additions(out: Path) -> dict:
    """``{"additions": [...]}`` of the provenance already at ``out`` (rows measured later into the same file, each
    with its command and window, written by hand: the rows alone cannot say which were added), else ``{}``; so
    writing the provenance again keeps them."""
    if not out.is_file():
        return {}
    old = json.loads(out.read_text())
    return {"additions": old["additions"]} if old.get("additions") else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--log", nargs="*", default=[], help="the measuring window's log files (load before and after, "
                                                       "the collector's output), stored in this order")
    ap.add_argument("--commit", default=None, help="the commit the rows were measured at (default: HEAD)")
    ap.add_argument("--command", default="", help="the command that measured it")
    a = ap.parse_args()
    path = Path(a.dataset)
    df = load_dataset(path)
    ok = df[df["status"] == "ok"]
    fp = json.loads(df["device_fingerprint"].dropna().iloc[0])
    prov = {
        "dataset": str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path),
        "what": "real measurements of model-zoo networks (torchvision classifiers, timm backbones) by carb-collect "
                "space=zoo on this project's CPU backend, contention guard on, two passes per row (the second in "
                "another order), nothing else running on the machine (not synthetic)",
        "command": a.command, "commit": a.commit or _commit(),
        "device_name": str(df["device_name"].iloc[0]), "device_id": str(df["device_id"].iloc[0]), "fingerprint": fp,
        "torch_version": sorted(df["torch_version"].dropna().unique().tolist()),
        "protocol_id": sorted(df["protocol_id"].dropna().unique().tolist()),
        "measured_from": str(df["measured_at"].min()), "measured_to": str(df["measured_at"].max()),
        "rows": {"total": len(df), **df["status"].value_counts().to_dict()},
        "rows_ok_by_precision": ok["precision"].value_counts().to_dict(),
        "models": int(ok["model_name"].nunique()), "families": int(ok["family"].nunique()),
        "family_models": ok.groupby("family")["model_name"].nunique().to_dict(),
        "guard": {"repeated_windows": int((df["n_windows"] > 1).sum()),
                  "cpu_share_min": float(ok["cpu_share"].min()), "cpu_share_median": float(ok["cpu_share"].median()),
                  "steal_share_max": float(ok["steal_share"].max())},
        "repeatability": spread_table(df).to_dict(orient="records"),
        "window_log": window_log(a.log),
    }
    out = path.with_name(path.stem + ".provenance.json")
    prov |= kept_additions(out)
    text = json.dumps(prov, indent=1, default=str)
    write_atomic(out, lambda tmp: tmp.write_text(text))
    print(f"wrote {out}")
    print(spread_table(df).to_markdown(index=False, floatfmt=".1f"))
    fam = ok.groupby("family").agg(models=("model_name", "nunique"), rows=("config_id", "size"),
                                   latency_ms_median=("latency_ms", "median")).reset_index()
    print(fam.to_markdown(index=False, floatfmt=".1f"))


if __name__ == "__main__":
    main()
