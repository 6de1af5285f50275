"""Land what a lent GPU brought back: keep the files, append the rows to the shipped dataset, summarise.

    .venv/bin/python experiments/gpu/land.py RETURNED_DIR --seed 3 [--date 2026-12-05]
        [--out carb/data/h200-reference.parquet] [--keep scripts/data] [--tracking-uri URI]

``RETURNED_DIR``: the folder a ``run`` call's files came back in (``experiments/gpu/run.py``'s files,
and ``large_tensors.csv`` when ``scripts/studies/large_tensors.py`` ran in the same call). Steps:

1. copies every file of it into ``<keep>/h200-run-<date>-seed<seed>/`` (``date``: the run's
   ``finished_at`` day unless given; an existing folder is refused, nothing is overwritten);
2. appends its rows to ``--out`` exactly as ``carb-collect import_run=<kept folder> out=<out>`` does (same
   fingerprint only; repeats keep their first row and are summarised in the provenance's ``runs``);
3. prints the counts the typed places must now say (README set-up, ``conf/data/h200.yaml``,
   ``carb/data/h200-reference.md``, ``experiments/gpu/README.md``; ``tests/test_readme_results.py`` checks
   them) and, with ``large_tensors.csv``, the above / below 2**31 time per element per operator.

Then regenerate the README's results (``python scripts/results.py``). Bad input: one line, exit 2.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def run_day(returned: Path) -> str:
    """``YYYY-MM-DD`` of the run's ``finished_at`` (provenance.json); raises ValueError without one."""
    prov = json.loads((returned / "provenance.json").read_text())
    day = str(prov.get("finished_at") or "")[:10]
    if len(day) != 10:
        raise ValueError("provenance.json has no finished_at; give --date")
    return day


def keep_files(returned: Path, keep: Path, date: str, seed: int) -> Path:
    """Copy the plain files of ``returned`` into ``keep/h200-run-<date>-seed<seed>/``; returns that folder.
    Raises FileExistsError when it exists."""
    dest = keep / f"h200-run-{date}-seed{seed}"
    if dest.exists():
        raise FileExistsError(f"{dest} exists; a run is landed once (remove it or give another --seed/--date)")
    dest.mkdir(parents=True)
    for f in sorted(returned.iterdir()):
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    return dest


def large_tensor_ratios(path: Path) -> dict[str, float]:
    """``{"<precision>/<operator>": above / below time per element}`` from ``large_tensors.csv`` (pairs
    with an error or a non-positive time are left out)."""
    side: dict[tuple[str, str], dict[bool, float]] = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            try:
                v = float(r["ns_per_Melement"])
            except (TypeError, ValueError):
                continue
            if math.isfinite(v) and v > 0 and not r.get("error"):
                side.setdefault((r["precision"], r["operator"]), {})[r["above_2_31"] in ("True", "true", "1")] = v
    return {f"{p}/{o}": s[True] / s[False] for (p, o), s in sorted(side.items()) if True in s and False in s}


def counts(out: Path) -> tuple[int, int]:
    """(ok rows, architectures) of the dataset at ``out``."""
    from carb.data.io import load_dataset

    df = load_dataset(out)
    ok = df[df["status"] == "ok"]
    arch = ok[["block", "depth", "width_mult", "stages", "inner_mult", "early_downsample"]].astype(str)
    return len(ok), len(arch.drop_duplicates())


def land(returned: Path, seed: int, out: Path, keep: Path, date: str | None = None,
         tracking_uri: str | None = None) -> dict:
    """Steps 1-3 of the module docstring; returns ``{"kept", "n_rows", "n_arch", "large_tensors"}``."""
    from carb.commands.cli import compose
    from carb.commands.collect import run_collect
    from carb.data.importers.gpu_run import import_gpu_run

    import_gpu_run(returned)   # the folder is a run's (dataset and provenance agree) before anything is copied
    dest = keep_files(returned, keep, date or run_day(returned), seed)
    overrides = [f"import_run={dest}", f"out={out}"] + ([f"tracking.uri={tracking_uri}"] if tracking_uri else [])
    run_collect(compose("collect", overrides))
    n_rows, n_arch = counts(out)
    lt = dest / "large_tensors.csv"
    return {"kept": str(dest), "n_rows": n_rows, "n_arch": n_arch,
            "large_tensors": large_tensor_ratios(lt) if lt.exists() else {}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("returned", help="the folder the run's files came back in")
    ap.add_argument("--seed", type=int, required=True, help="the --seed the run was made with")
    ap.add_argument("--date", default=None, help="YYYY-MM-DD for the kept folder (default: the run's finished_at day)")
    ap.add_argument("--out", default=str(ROOT / "carb" / "data" / "h200-reference.parquet"))
    ap.add_argument("--keep", default=str(ROOT / "scripts" / "data"))
    ap.add_argument("--tracking-uri", default=None, help="MLflow store for the import run (default: CARB's)")
    a = ap.parse_args(argv)
    from carb.errors import CarbError

    returned = Path(a.returned)
    try:
        if not returned.is_dir():
            raise ValueError(f"returned: {str(returned)!r} is not a folder (give the folder the run's files came back in)")
        res = land(returned, a.seed, Path(a.out), Path(a.keep), a.date, a.tracking_uri)
    except (CarbError, ValueError, FileExistsError) as e:
        print(f"land: {e}", file=sys.stderr)
        return 2
    print(f"land: kept the run in {res['kept']}; {a.out} now holds {res['n_rows']:,} configurations of "
          f"{res['n_arch']} architectures: say so in README.md (set-up), conf/data/h200.yaml, "
          f"carb/data/h200-reference.md and experiments/gpu/README.md, then run scripts/results.py")
    if res["large_tensors"]:
        print("land: above / below 2**31 time per element: "
              + ", ".join(f"{k} {v:.2f}" for k, v in res["large_tensors"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
