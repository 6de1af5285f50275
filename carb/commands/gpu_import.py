"""``carb-import importer=gpu_run``: bring home the files a lent GPU returned (``python -m
carb.measure.gpu_run --out DIR``).

    carb-import importer=gpu_run importer.path=<returned folder> out=carb/data/h200-reference.parquet \
        importer.keep=scripts/data importer.seed=3

``run_gpu_import(cfg)`` takes the composed ``conf/import.yaml`` with ``importer`` = ``conf/importer/gpu_run.yaml``
and

1. checks the folder is a run's (dataset and provenance agree on the device) before anything is written;
2. with ``importer.keep``, copies its files into ``<keep>/<gpu>-run-<day>-seed<seed>/`` (``day``: the run's
   ``finished_at`` day unless ``importer.date`` is given); an existing folder is refused, nothing is
   overwritten;
3. writes (or appends) its rows to ``out`` exactly as ``carb-collect import_run=<folder> out=<out>`` does
   (same fingerprint only; repeats keep their first row and are summarised in the provenance's ``runs``;
   one MLflow run in ``carb-collect``);
4. prints the ok rows and architectures ``out`` now holds and, when the 2**31-element check ran in the
   same call (``large_tensors.csv``), its above / below time per element per operator.

Bad input is one line naming the setting and what it allows, exit code 2.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from carb.commands.cli import to_dict
from carb.errors import ConfigError

DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def check_settings(params: Mapping[str, Any]) -> tuple[Path, Path | None, int | None, str | None]:
    """``(folder, keep, seed, date)`` of the ``importer`` node; one-line :class:`ConfigError` naming the
    setting and its allowed values otherwise (``seed`` is required with ``keep``)."""
    path = params.get("path")
    if path is None or not str(path).strip():
        raise ConfigError("importer.path: give the folder a GPU run's files came back in "
                          "(written by python -m carb.measure.gpu_run --out DIR)")
    folder = Path(str(path))
    if not folder.is_dir():
        raise ConfigError(f"importer.path: {str(folder)!r} is not a folder; give the folder the run's files "
                          f"came back in")
    keep = Path(str(params["keep"])) if params.get("keep") else None
    seed = params.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ConfigError(f"importer.seed: must be an integer >= 0 (the --seed the run was made with), got {seed!r}")
    if keep is not None and seed is None:
        raise ConfigError("importer.seed: required with importer.keep (an integer >= 0, the --seed the run was "
                          "made with; it names the kept folder)")
    date = params.get("date")
    if date is not None and not DATE.match(str(date)):
        raise ConfigError(f"importer.date: must be null or YYYY-MM-DD, got {date!r}")
    return folder, keep, seed, None if date is None else str(date)


def run_gpu_import(cfg: Any) -> dict[str, Any]:
    """Steps 1-4 of the module docstring. Returns :func:`carb.commands.collect.import_run`'s result plus
    ``kept`` (the kept folder or None), ``n_ok``, ``n_arch`` and ``large_tensors`` (ratios by
    ``"<precision>/<operator>"``)."""
    from carb.commands.collect import import_run
    from carb.data.importers.gpu_run import dataset_counts, import_gpu_run, keep_run, large_tensor_ratios
    from carb.data.io import load_dataset

    c = to_dict(cfg)
    folder, keep, seed, date = check_settings(c.get("importer") or {})
    import_gpu_run(folder)      # a run's folder (dataset and provenance agree) before anything is copied
    src = keep_run(folder, keep, seed, date) if keep is not None else folder
    res = import_run({"import_run": str(src), "out": c.get("out"), "tracking": c.get("tracking"),
                      "run_name": c.get("run_name")})
    n_ok, n_arch = dataset_counts(load_dataset(res["out"]))
    lt = src / "large_tensors.csv"
    ratios = large_tensor_ratios(lt) if lt.exists() else {}
    if keep is not None:
        print(f"carb-import: kept the run's files in {src}")
    print(f"carb-import: {res['out']} now holds {n_ok:,} configurations of {n_arch} architectures")
    if ratios:
        print("carb-import: above / below 2**31 time per element: "
              + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    return {**res, "kept": str(src) if keep is not None else None, "n_ok": n_ok, "n_arch": n_arch,
            "large_tensors": ratios}
