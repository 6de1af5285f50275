"""``carb-characterize``: the paper's Section 4 analyses of one dataset (and a second device's, or a pair
of GPUs from the shipped timm benchmark), as tables and figures.

``run_characterize(cfg)`` takes the composed ``conf/characterize.yaml``, loads the datasets
(:func:`load_inputs`), computes every table (:func:`carb.analysis.characterize.report.characterize_tables`),
draws the figures (:mod:`carb.plots.characterize`), writes tables (CSV + Markdown), figures (PNG) and a
summary into the run's folder and logs it all to one MLflow run (experiment ``carb-characterize``).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from carb.analysis.characterize.common import SM_EDGES, device_label, ok_only
from carb.analysis.characterize.report import (
    characterize_tables,
    headline_metrics,
    summary_markdown,
    to_markdown,
)
from carb.commands.cli import (
    finished_work,
    hydra_command,
    hydra_run_dir,
    kept_if_logging_fails,
    sweep_suffix,
    sweep_tags,
    to_dict,
)
from carb.commands.progress import Progress
from carb.data.io import load_dataset
from carb.data.schema import device_slug
from carb.errors import ConfigError


def _select_device(df: pd.DataFrame, device: str | None, field: str) -> pd.DataFrame:
    names = sorted(str(n) for n in pd.Series(df["device_name"]).dropna().unique())
    if device:
        if device not in names:
            raise ConfigError(f"{field}={device!r} is not in the dataset; allowed: {names}")
        return df[(df["device_name"] == device).fillna(False).to_numpy()].reset_index(drop=True)
    if len(names) > 1:
        raise ConfigError(f"{field}: the dataset holds {len(names)} devices; pick one of {names}")
    return df


def _dataset_ref(ref: Any, device: Any) -> tuple[str | None, str | None]:
    """A dataset given as a path/name string, or as a node with ``path`` (and optional ``device``),
    as the ``conf/data`` group gives it; returns (path or None, device or None)."""
    if ref is not None and not isinstance(ref, str) and hasattr(ref, "get"):
        return (str(ref.get("path")) if ref.get("path") else None), (device or ref.get("device"))
    return (str(ref) if ref else None), (str(device) if device else None)


def load_inputs(cfg: Any) -> tuple[pd.DataFrame, pd.DataFrame | None, str, dict[str, Any]]:
    """Datasets A (and B) named by a characterize config, a label for the run and provenance params."""
    source = str(cfg.get("source") or "dataset")
    if source == "timm":
        from carb.data.importers.timm import TIMM_DATA, timm_pair

        t = cfg.timm
        a, b = timm_pair(t.gpu_a, t.gpu_b, precision=t.precision, compile=t.compile,
                         memory_layout=t.memory_layout, torch=str(t.torch), plain_only=bool(t.plain_only),
                         path=t.get("path"))
        label = f"timm-{device_slug(t.gpu_a)}-vs-{device_slug(t.gpu_b)}-{t.precision}-{t.compile}"
        prov = {"source": "timm", "data": str(t.get("path") or TIMM_DATA),
                **{f"timm.{k}": v for k, v in to_dict(t).items()},
                "torch_a": ",".join(sorted(a["torch_version"].dropna().unique())),
                "torch_b": ",".join(sorted(b["torch_version"].dropna().unique()))}
        return a, b, label, prov
    if source != "dataset":
        raise ConfigError(f"source={source!r} is not allowed; allowed: ['dataset', 'timm']")
    data, device = _dataset_ref(cfg.get("data"), None)
    compare, compare_device = _dataset_ref(cfg.get("compare"), cfg.get("compare_device"))
    if not data:
        raise ConfigError("data.path: give a dataset (.parquet/.csv file, folder of shards, or "
                          "'reference'), or source=timm")
    a = _select_device(load_dataset(data), device, "data.device")
    b = None
    if compare:
        b = _select_device(load_dataset(compare), compare_device, "compare_device")
    label = device_slug(device_label(a)) + (f"-vs-{device_slug(device_label(b))}" if b is not None else "")
    prov = {"source": "dataset", "data": str(data), "compare": str(compare), "data_device": str(device),
            "compare_device": str(compare_device)}
    return a, b, label, prov


#: Relative cost of the steps of :func:`run_characterize`, for the ETA (measured on the shipped data).
CHARACTERIZE_STEPS = {"load": 1.0, "tables": 1.0, "figures": 2.0, "log": 3.0}


def run_characterize(cfg: Any) -> dict[str, Any]:
    """Run all analyses named by ``cfg`` (conf/characterize.yaml), write tables (CSV + Markdown) and
    figures (PNG) to the run's folder (Hydra's ``<paths.output_dir>/characterize/<time>/`` from the
    command line; ``<paths.output_dir>/characterize/<run name>/`` when called with a composed config)
    and log them to one MLflow run.

    Returns ``{"run_id", "output_dir", "tables": {name: csv path}, "figures": {name: png path},
    "skipped_figures": {name: reason}, "cross_device": [row dicts], "label"}``."""
    from carb.plots import characterize as plots
    from carb.tracking import log_artifact, log_metrics, log_params, start_run

    prog = Progress.from_cfg("carb-characterize", sum(CHARACTERIZE_STEPS.values()), cfg, throttle=False)
    prog.begin("loading the data", CHARACTERIZE_STEPS["load"])
    a, b, label, prov = load_inputs(cfg)
    an = cfg.get("analysis") or {}
    prog.begin(f"computing the tables ({len(a)} rows" + ("" if b is None else f" + {len(b)} rows") + ")",
               CHARACTERIZE_STEPS["tables"])
    tables = characterize_tables(a, b, sm_edges=tuple(an.get("sm_edges", SM_EDGES)),
                                 min_pairs=int(an.get("min_pairs", 3)))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_name = str(cfg.get("run_name") or sweep_suffix(f"characterize/{label}"))
    # one run, one folder: Hydra's run folder when run as a command, else one named after the run (+ time)
    folder = str(cfg.get("run_name") or f"{label}-{stamp}").replace("/", "-")
    out_dir = hydra_run_dir() or Path(cfg.paths.output_dir) / "characterize" / folder
    (out_dir / "tables").mkdir(parents=True, exist_ok=True)
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    table_paths = {}
    for name, t in tables.items():
        t.to_csv(out_dir / "tables" / f"{name}.csv", index=False)
        (out_dir / "tables" / f"{name}.md").write_text(to_markdown(t))
        table_paths[name] = str(out_dir / "tables" / f"{name}.csv")
    prog.begin("drawing the figures", CHARACTERIZE_STEPS["figures"])
    figures, skipped = plots.characterize_figures(tables, dev_a=device_label(ok_only(a)),
                                                  dev_b=None if b is None else device_label(ok_only(b)))
    fig_paths = {}
    for name, fig in figures.items():
        path = out_dir / "figures" / f"{name}.png"
        fig.savefig(path, dpi=150, bbox_inches="tight")
        fig_paths[name] = str(path)
    (out_dir / "summary.md").write_text(summary_markdown(label, prov, a, b, tables, skipped))
    (out_dir / "inputs.json").write_text(json.dumps({k: str(v) for k, v in prov.items()}, indent=2))
    tags = {"source": prov["source"], "device_a": device_label(ok_only(a))}
    if b is not None:
        tags["device_b"] = device_label(ok_only(b))
    prog.begin("logging to MLflow", CHARACTERIZE_STEPS["log"])
    finished_work(out_dir)
    with kept_if_logging_fails(f"the tables, figures and summary are saved in {out_dir}", cfg.tracking.uri), \
            start_run("characterize", run_name, tracking_uri=cfg.tracking.uri, tags=tags,
                      artifact_root=cfg.tracking.get("artifact_root"), sweep=sweep_tags()) as run_id:
        log_params({**prov, "rows_a": len(ok_only(a)), "rows_b": None if b is None else len(ok_only(b)),
                    "analysis": to_dict(an) if an else {}})
        log_metrics(headline_metrics(tables))
        log_artifact(out_dir)
    prog.finish(f"{label}: tables, figures and run written")
    xd = tables.get("cross_device")
    print(f"carb-characterize: {label}: {len(tables)} tables, {len(fig_paths)} figures in {out_dir} "
          f"(MLflow run {run_id})")
    from carb.commands.cli import say_run_page

    say_run_page(run_id, cfg.tracking.uri)
    if xd is not None:
        print(to_markdown(xd.drop(columns=["device_a", "device_b"])), end="")
    return {"run_id": run_id, "output_dir": str(out_dir), "label": label, "tables": table_paths,
            "figures": fig_paths, "skipped_figures": dict(skipped),
            "cross_device": [] if xd is None else xd.to_dict("records")}


main = hydra_command("characterize")(run_characterize)

if __name__ == "__main__":
    main()
