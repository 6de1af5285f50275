"""``carb-calibrate k=0 spec=<GPU>``: a model for a GPU nobody measured, from two spec sheets.

The source model's GPU and the target GPU are looked up in ``carb/data/gpu_specs.csv``; latency is the
source's prediction times the spec-predicted ratio per precision (:mod:`carb.model.spec_transfer`, weights
``zero_shot.weights``), memory and energy keep the source's prediction; the latency interval is the
leave-one-device-out error band ``zero_shot.log_error_band``. The model is logged and registered like a
calibrated one, as ``carb-<spec slug>-<spec id>`` with ``k=0`` in its tags, so ``carb-screen`` can target it.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from carb import tracking
from carb.commands.cli import sweep_suffix, sweep_tags, to_dict
from carb.errors import ConfigError


def source_spec(source: Any, source_uri: str) -> dict[str, Any]:
    """The spec record of the source model's GPU (from its device fingerprint); one-line error if none."""
    from carb.data.gpu_specs import record_for_fingerprint

    try:
        fp = json.loads(getattr(source, "device_fingerprint_", None) or "{}")
    except (TypeError, ValueError):
        fp = {}
    rec = record_for_fingerprint(fp) if isinstance(fp, dict) and fp.get("kind") == "cuda" else None
    if rec is None:
        raise ConfigError(f"k=0: the source model {source_uri} is of {getattr(source, 'device_name_', '?')!r}, "
                          "which has no GPU spec record (carb/data/gpu_specs.csv); zero-shot needs a GPU model "
                          "as source")
    return rec


def example_rows(model: Any, space: dict[str, Any], n: int = 5) -> pd.DataFrame:
    """``n`` featurized configurations of ``space`` with the columns ``model.predict`` reads (the logged
    input example)."""
    from carb.analysis.screening import featurize
    from carb.design.space import configs_from_cfg
    from carb.model.intervals import screening_features

    rows = screening_features(model, featurize(configs_from_cfg(space)[:n]))
    for c in model.input_columns_:
        if c not in rows:
            rows[c] = np.nan
    return rows[list(model.input_columns_)].reset_index(drop=True)


def run_zero_shot(cfg: Any, source: Any, src: dict[str, Any], prog: Any) -> dict[str, Any]:
    """Fit, log and register the zero-shot model (``cfg.spec`` the target). Returns what
    :func:`carb.commands.calibrate.run_calibrate` returns (``k`` = 0, no held-out table)."""
    from carb.data.gpu_specs import fingerprint_id, fingerprint_json, gpu_spec, spec_fingerprint
    from carb.data.schema import device_slug
    from carb.model.transfer import TransferredCascade, describe_form

    if not cfg.get("spec"):
        raise ConfigError("k=0 needs spec=<GPU name of carb/data/gpu_specs.csv> (zero-shot from spec sheets); "
                          "or k >= 1 with measured rows (data.path=... or measure=...)")
    zs = cfg.zero_shot
    src_rec, dst_rec = source_spec(source, src["uri"]), gpu_spec(str(cfg.spec), field="spec")
    if src_rec.get("name") == dst_rec["name"]:
        raise ConfigError(f"spec: {cfg.spec!r} is the source model's own GPU ({dst_rec['name']}); zero-shot "
                          "transfers to another GPU")
    fp = spec_fingerprint(dst_rec)
    lo, hi = (float(v) for v in zs.log_error_band)
    prog.begin(f"zero-shot transfer {src_rec['name']} -> {dst_rec['name']} from spec records")
    tr = TransferredCascade(source, coverage=float(cfg.coverage)).fit_spec(
        src_rec, dst_rec, {k: float(v) for k, v in zs.weights.items()}, device_name=dst_rec["name"])
    tr.calibrate_zero_shot(band=(lo, hi))   # zero_shot.log_error_band
    tr.device_id_, tr.device_fingerprint_ = fingerprint_id(fp), fingerprint_json(fp)
    for target, info in tr.transfer_.items():
        print(f"carb-calibrate: {target}: {info['form']} ({describe_form(info)}) from 0 rows (spec sheets)")
    print(f"carb-calibrate: latency interval x [{np.exp(lo):.2f}, {np.exp(hi):.2f}] of the prediction (measured "
          "zero-shot errors between other GPUs); nothing of this GPU was measured: calibrate with k >= 3 rows")
    name = f"carb-{device_slug(dst_rec['name'])}-{tr.device_id_}"
    prog.begin("logging to MLflow" + (" and registering" if cfg.register else ""))
    run_id, info = _log(cfg, tr, src, name, bool(cfg.register))
    version = info.get("version")
    alias_set = False
    if cfg.register and version and cfg.get("alias") and tracking.get_alias(name, str(cfg.alias)) is None:
        tracking.set_alias(name, str(cfg.alias), str(version))
        alias_set = True
    prog.finish("zero-shot model" + (f" registered as {name} version {version}" if version else " fitted"))
    if version:
        print(f"carb-calibrate: registered {name} version {version}" + (f" as @{cfg.alias}" if alias_set else "")
              + f"; screen with carb-screen screen.target=models:/{name}/{version}; MLflow run {run_id}")
    return {"transfer": tr.transfer_, "table": pd.DataFrame(), "registered_name": name if cfg.register else None,
            "version": version, "run_id": run_id, "source": src["uri"], "k": 0, "config_ids": [], "model": tr,
            "alias_set": alias_set}


def _log(cfg: Any, tr: Any, src: dict[str, Any], name: str, register: bool) -> tuple[str, dict[str, Any]]:
    """Log the zero-shot run and model (registered under ``name`` with ``register``)."""
    spec = tr.transfer_.get("latency_ms", {}).get("spec", {})
    tags = {"device": tr.device_name_, "device_id": tr.device_id_, "source_model": src["uri"],
            "source_version": src.get("version", ""), "k": 0, "zero_shot": "spec"}
    with tracking.start_run("calibrate", cfg.get("run_name") or sweep_suffix(f"calibrate/{name}/k0"),
                            cfg.tracking.uri, tags=tags, artifact_root=cfg.tracking.get("artifact_root"),
                            sweep=sweep_tags()) as run_id:
        tracking.log_params({"source": src["uri"], "spec": str(cfg.spec), "k": 0,
                             "zero_shot": to_dict(cfg.zero_shot), "coverage": float(cfg.coverage)})
        tracking.log_dict({"transfer": tr.transfer_, "spec": spec}, "transfer.json")
        meta = {"device": tr.device_name_, "device_id": tr.device_id_, "device_fingerprint": tr.device_fingerprint_,
                "calibrated_from": src["uri"], "source_version": src.get("version", ""), "k": "0",
                "targets": ",".join(tr.targets_)}
        info = tracking.log_cascade(
            tr, example_rows(tr, to_dict(cfg.space)), registered_name=name if register else None, metadata=meta,
            description=f"{tr.device_name_}: zero-shot from {src['uri']} and two spec sheets (k=0).",
            model_description=f"CARB cost model of {tr.device_name_} (zero-shot from spec sheets).")
    return run_id, info
