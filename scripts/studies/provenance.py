"""Write the provenance of a re-collected reference dataset (run folder of collect_reference.sh).

    python scripts/studies/provenance.py data/reference-run carb/data/cpu-reference.provenance.json \
        [--previous-note 'glibc default allocator']

Records what was measured, with which commands, on which fingerprinted machine, when, how long it
took, the rows by status, how many timed windows the contention guard repeated (and the cpu_share /
steal_share seen), the FLOP caps of the spaces, the window log (load before, between and after) and the
recheck results (the text the recheck script printed).
"""
from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.data.io import load_dataset  # noqa: E402


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def _allocator() -> dict:
    """The CPU protocol's allocator setting and this machine's huge-page mode and C library."""
    from carb.measure.cpu import transparent_hugepage

    cpu = yaml.safe_load((ROOT / "conf/measure/cpu.yaml").read_text())
    return {"malloc_mmap_threshold_MB": cpu.get("malloc_mmap_threshold_MB"),
            "trim_threshold_MB": (2 * cpu["malloc_mmap_threshold_MB"]) if cpu.get("malloc_mmap_threshold_MB") else None,
            "transparent_hugepage": transparent_hugepage(), "libc": " ".join(platform.libc_ver()),
            "why": ("glibc maps every allocation >= 32 MiB anew and unmaps it when freed, so such tensors are "
                    "page-faulted and zeroed on every forward; the cpu protocol raises the threshold so they keep "
                    "their pages (see carb/measure/cpu.py pin_malloc)")}


def provenance(run: Path, dataset_name: str = "carb/data/cpu-reference.parquet", previous_note: str = "") -> dict:
    """The provenance dict of the run folder ``run``."""
    df = load_dataset(run / "reference.parquet")
    fp = json.loads(df["device_fingerprint"].dropna().iloc[0])
    spaces = {n: yaml.safe_load((ROOT / "conf/space" / f"{n}.yaml").read_text()) for n in ("reference", "reference_fp16")}
    per_prec = df.groupby(["precision", "status"]).size().unstack(fill_value=0).to_dict("index")
    window = df["window_s"]
    return {
        "dataset": dataset_name,
        "what": ("real measurements of the `reference` (fp32, bf16) and `reference_fp16` spaces by carb-collect on "
                 "this project's CPU backend, with the contention guard on, in one window with nothing else "
                 "running on the machine (not synthetic)"),
        "commands": [
            "bash scripts/studies/collect_reference.sh data/reference-run 40 6",
            "  = carb-collect space=reference device=cpu measure=cpu out=<run>/reference.parquet seed=0 max_minutes=40",
            "  + carb-collect space=reference_fp16 device=cpu measure=cpu out=<run>/reference.parquet seed=0 max_minutes=6",
        ],
        "device_name": str(df["device_name"].iloc[0]),
        "device_id": str(df["device_id"].dropna().iloc[0]),
        "fingerprint": fp,
        "machine": {"cores": fp.get("logical_cpus"), "hypervisor": fp.get("hypervisor"), "memory_GiB": 24,
                    "os": platform.platform(), "gpu": None},
        "torch_version": sorted(df["torch_version"].dropna().unique().tolist()),
        "threads": sorted(df["threads"].dropna().astype(int).unique().tolist()),
        "protocol_id": sorted(df["protocol_id"].dropna().unique().tolist()),
        "measured_from": str(df["measured_at"].min()), "measured_to": str(df["measured_at"].max()),
        "rows": {"total": int(len(df)), **{k: int(v) for k, v in df["status"].value_counts().items()}},
        "rows_by_precision_and_status": per_prec,
        "guard": {"repeated_windows": int((df["n_windows"] > 1).sum()),
                  "repeated_share": float((df["n_windows"] > 1).mean()),
                  "cpu_share_min": float(df["cpu_share"].min()), "cpu_share_median": float(df["cpu_share"].median()),
                  "steal_share_max": float(df["steal_share"].max())},
        "timed_window_s": {"min": float(window.min()), "median": float(window.median()), "max": float(window.max())},
        "protocol_s_total": float(df["protocol_s"].sum()),
        "spaces": spaces,
        "energy": ("missing on every row: the VM exposes no RAPL powercap (/sys/class/powercap absent); "
                   "missing_reason says so per row"),
        "fp16": ("this CPU has no native fp16 arithmetic (no avx512_fp16 / amx_fp16 in the fingerprint): fp16 runs "
                 "on a slow path, 20-50x slower than fp32; measured in a separate small space capped at 0.25 "
                 "GFLOPs per batch"),
        "allocator": _allocator(),
        "window_log": _read(run / "window.log"),
        "recheck_same_machine": _read(run / "recheck-new.txt"),
        "recheck_previous_file": _read(run / "recheck-old.txt"),
        **_previous(run, df, previous_note),
    }


def _previous(run: Path, df, note: str) -> dict:
    """How the previous shipped file differs: its window and device, ``note`` (how it was measured),
    and :mod:`compare`'s summary on the configurations both files hold."""
    path = run / "previous-reference.parquet"
    if not path.exists() or not path.stat().st_size:
        return {}
    from scripts.studies.compare import compare, summary

    old = load_dataset(path)
    label = (f"The previous shipped file ({str(old['measured_at'].min())[:10]}, device "
             f"{old['device_id'].dropna().iloc[0]}{', ' + note if note else ''}) re-measured here")
    return {"recheck_previous_label": label, "comparison_with_previous": summary(compare(old, df))}


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--previous-note", default="", help="how the previous shipped file was measured")
    a = ap.parse_args()
    run, dest = a.run, a.dest
    dest.write_text(json.dumps(provenance(run, previous_note=a.previous_note), indent=2, default=str) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
