"""``carb-calibrate k=0 spec=<GPU>`` / ``k=0 probe=<CPU device_id>|true``: a model for a device nobody
measured, from two spec sheets (GPU) or two device probes (CPU).

The source model's GPU and the target GPU are looked up in ``carb/data/gpu_specs.csv``; latency is the
source's prediction times the spec-predicted ratio per precision (:mod:`carb.model.spec_transfer`, weights
``zero_shot.weights``), memory keeps the source's prediction; the latency interval is the
leave-one-device-out error band ``zero_shot.log_error_band``. Energy is the source's prediction times the
time ratio and the ratio of predicted average power (:mod:`carb.model.power`, settings ``zero_shot.power``:
the source GPU's measured power behaviour and both spec records' power limit and static power), with an
interval widened for what nobody measured (:func:`spec_energy`). The model is logged and registered like a
calibrated one, as ``carb-<spec slug>-<spec id>`` with ``k=0`` in its tags, so ``carb-screen`` can target it.

A CPU (``probe=``): latency is the source's prediction (of the dispatch stand-in precision) times the ratio
of each network's convolution time on the two CPUs, from their device probes (shipped in
``carb/data/device-probes.csv`` or ``carb-probe``'s; ``probe=true`` probes this CPU first); the interval is
``zero_shot.probe_log_error_band``; registered as ``carb-<CPU slug>-<device_id>``, the name a later K-row
calibration of the same CPU gets.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from carb import tracking
from carb.commands.cli import sweep_suffix, sweep_tags, to_dict, wrap_line
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
        raise ConfigError(f"source: {source_uri} is of {getattr(source, 'device_name_', '?')!r}, which has no GPU "
                          "spec record (carb/data/gpu_specs.csv); zero-shot from spec sheets needs a GPU model as "
                          f"source: carb-calibrate source=models:/<GPU model>@champion k=0 spec=<GPU>; registered: "
                          f"{_registered_names()}")
    return rec


def _registered_names(n: int = 6) -> str:
    """Up to ``n`` registered model names of the store (for an error line), or a hint to make one."""
    try:
        names = tracking.registered_models()
    except Exception:   # the store is not the point of this line
        names = []
    return (", ".join(names[:n]) + (", ..." if len(names) > n else "")) if names else \
        "none (carb-quickstart registers the H200's)"


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


def say(text: str) -> None:
    """Print a ``carb-calibrate: ...`` report line in lines of at most 120 columns
    (:func:`carb.commands.cli.wrap_line`)."""
    print(wrap_line(text))


def run_zero_shot(cfg: Any, source: Any, src: dict[str, Any], prog: Any, target_probe: str | None = None
                  ) -> dict[str, Any]:
    """Fit, log and register the zero-shot model: from spec records (``cfg.spec``, a GPU) or from device
    probes (``target_probe``: the target CPU's device id, :func:`probe_zero_shot`). Returns what
    :func:`carb.commands.calibrate.run_calibrate` returns (``k`` = 0, no held-out table)."""
    if target_probe:
        tr, how = probe_zero_shot(cfg, source, src, target_probe, prog)
    elif cfg.get("spec"):
        tr, how = spec_zero_shot(cfg, source, src, prog)
    else:
        raise ConfigError("k=0 needs spec=<GPU name of carb/data/gpu_specs.csv> (zero-shot from spec sheets) or "
                          "probe=<CPU device_id>|true (from device probes); or k >= 1 with measured rows "
                          "(data.path=... or measure=...)")
    from carb.data.schema import device_slug, spec_model_name

    name = spec_model_name(tr.device_fingerprint_) or f"carb-{device_slug(tr.device_name_)}-{tr.device_id_}"
    prog.begin("logging to MLflow" + (" and registering" if cfg.register else ""))
    run_id, info = _log(cfg, tr, src, name, bool(cfg.register), how)
    version = info.get("version")
    alias_set = False
    if cfg.register and version and cfg.get("alias") and tracking.get_alias(name, str(cfg.alias)) is None:
        tracking.set_alias(name, str(cfg.alias), str(version))
        alias_set = True
    prog.finish("zero-shot model" + (f" registered as {name} version {version}" if version else " fitted"))
    if version:
        say(f"carb-calibrate: registered {name} version {version}" + (f" as @{cfg.alias}" if alias_set else "")
            + f"; screen with carb-screen screen.target=models:/{name}/{version}; MLflow run {run_id}")
    return {"transfer": tr.transfer_, "table": pd.DataFrame(), "registered_name": name if cfg.register else None,
            "version": version, "run_id": run_id, "source": src["uri"], "k": 0, "config_ids": [], "model": tr,
            "alias_set": alias_set}


def spec_zero_shot(cfg: Any, source: Any, src: dict[str, Any], prog: Any) -> tuple[Any, dict[str, Any]]:
    """The zero-shot transfer to the GPU ``cfg.spec`` from the two spec records; returns it and what to log."""
    from carb.data.gpu_specs import fingerprint_id, fingerprint_json, gpu_spec, spec_fingerprint
    from carb.model.transfer import TransferredCascade, describe_form

    zs = cfg.zero_shot
    src_rec, dst_rec = source_spec(source, src["uri"]), gpu_spec(str(cfg.spec), field="spec")
    if src_rec.get("name") == dst_rec["name"]:
        raise ConfigError(f"spec: {cfg.spec!r} is the source model's own GPU ({dst_rec['name']}); zero-shot "
                          "transfers to another GPU")
    fp = spec_fingerprint(dst_rec)
    lo, hi = (float(v) for v in zs.log_error_band)
    prog.begin(f"zero-shot transfer {src_rec['name']} -> {dst_rec['name']} from spec records")
    energy = spec_energy(cfg, source, src_rec, dst_rec, (lo, hi))
    tr = TransferredCascade(source, coverage=float(cfg.coverage)).fit_spec(
        src_rec, dst_rec, {k: float(v) for k, v in zs.weights.items()}, device_name=dst_rec["name"], energy=energy)
    tr.calibrate_zero_shot(band=(lo, hi))   # zero_shot.log_error_band, added to the source's own interval
    tr.device_id_, tr.device_fingerprint_ = fingerprint_id(fp), fingerprint_json(fp)
    tr.origin_ = zero_shot_origin(src, f"spec records ({src_rec['name']} -> {dst_rec['name']})", int(zs.band_devices))
    for target, info in tr.transfer_.items():
        say(f"carb-calibrate: {target}: {info['form']} ({describe_form(info)}) from 0 rows (spec sheets)")
    for p in tr.unsupported_precisions_:
        print(f"carb-calibrate: {p}: no {p} peak in the spec record of {src_rec['name']} or {dst_rec['name']}:"
              f"\n  {p} candidates are never_measured (unverified)")
    _print_band(tr, (lo, hi), "GPUs", int(zs.band_devices))
    if energy is not None:
        e = tr.intervals_.get("energy_J", {})
        pm = energy["power"]
        say(f"carb-calibrate: energy interval x [{np.exp(e.get('lower', 0)):.2f}, {np.exp(e.get('upper', 0)):.2f}] "
            f"of the prediction: {energy['note']} (power model on {pm['n']} source rows: leave-configuration-out "
            f"MAPE {pm['loo_mape_pct']:.1f} %; {dst_rec['name']} static power {energy['static_W']:.0f} W "
            + ("from its spec record)" if energy["static_sourced"] else
               f"= {energy['static_fraction']:.2f} x its power limit: no sourced figure)"))
    spec = tr.transfer_.get("latency_ms", {}).get("spec", {})
    return tr, {"zero_shot": "spec", "params": {"spec": str(cfg.spec), "zero_shot": to_dict(cfg.zero_shot)},
                "json": {"spec": spec, "target_spec": dst_rec}, "from": "two spec sheets"}


def spec_energy(cfg: Any, source: Any, src_rec: dict[str, Any], dst_rec: dict[str, Any],
                band: tuple[float, float]) -> dict[str, Any] | None:
    """The zero-shot energy of ``k=0 spec=`` (:func:`carb.model.power.zero_shot_energy`, settings
    ``zero_shot.power``) from the source GPU's measured rows (``zero_shot.power.data``, else the shipped
    reference dataset's rows of the source's device); None (energy keeps the source's prediction, said in
    one line) when no such rows have energy."""
    from carb.data.io import load_dataset
    from carb.model.power import zero_shot_energy
    from carb.resources import DATA_DIR

    ps = cfg.zero_shot.get("power") or {}
    path = ps.get("data") or DATA_DIR / "h200-reference.parquet"
    rows = load_dataset(path, validate=False)
    if "status" in rows.columns:
        rows = rows[rows["status"].astype(str) == "ok"]
    dev = getattr(source, "device_id_", None)
    if dev is not None and "device_id" in rows.columns:
        rows = rows[rows["device_id"].astype(str) == str(dev)]
    if "energy_J" not in rows.columns or rows["energy_J"].notna().sum() < 5:
        say(f"carb-calibrate: energy keeps the source's prediction: no measured energy of the source's GPU in "
            f"{path} (zero_shot.power.data)")
        return None
    src_entry = (getattr(source, "intervals_", None) or {}).get("energy_J")
    frac = ps.get("static_fraction")
    return zero_shot_energy(rows, src_rec, dst_rec, src_entry, band,
                            static_fraction=None if frac is None else float(frac),
                            fraction_range=[float(v) for v in ps.get("static_fraction_range", (0.1, 0.3))],
                            widen=float(ps.get("unmeasured_widen", 2.0)), folds=int(ps.get("folds", 10)))


def probe_zero_shot(cfg: Any, source: Any, src: dict[str, Any], target_id: str, prog: Any
                    ) -> tuple[Any, dict[str, Any]]:
    """The zero-shot transfer to the CPU ``target_id`` from the two CPUs' device probes
    (:meth:`carb.model.transfer.TransferredCascade.fit_probe`, latency interval ``zero_shot.probe_log_error_band``);
    returns it and what to log. One-line :class:`ConfigError` when the source is not a CPU model with a probe,
    the target has no probe or no recorded fingerprint, or is the source's own CPU."""
    from carb.data.probes import load_probe, probe_fingerprint, probe_ids
    from carb.model.transfer import TransferredCascade, describe_form

    src_id = getattr(source, "device_id_", None)
    refuse_gpu_source(source, src["uri"])
    if str(target_id) == str(src_id):
        raise ConfigError(f"probe: {target_id} is the source model's own CPU; zero-shot transfers to another CPU")
    src_probe, dst_probe = load_probe(str(src_id)) if src_id else None, load_probe(str(target_id))
    if src_probe is None:
        raise ConfigError(f"probe: the source model {src['uri']}'s CPU {src_id} has no device probe (shipped or "
                          "carb-probe's); the zero-shot transfer needs both CPUs' probes (run carb-probe on that CPU)")
    if dst_probe is None:
        raise ConfigError(f"probe: no device probe of {target_id!r}; allowed: {probe_ids()} or true (probe this CPU "
                          "now)")
    fp = probe_fingerprint(str(target_id))
    if fp is None:
        raise ConfigError(f"probe: the device probe of {target_id} records no fingerprint (its provenance JSON); "
                          "the transfer needs the CPU's instruction set: run carb-probe on that CPU again")
    name = str(json.loads(fp).get("model_name") or "unknown CPU")
    band = [float(v) for v in cfg.zero_shot.probe_log_error_band]
    prog.begin(f"zero-shot transfer {getattr(source, 'device_name_', src_id)} -> {name} from device probes")
    tr = TransferredCascade(source, coverage=float(cfg.coverage), dispatch=bool(cfg.transfer.get("dispatch", True)))
    tr.fit_probe(src_probe, dst_probe, fp, name, str(target_id))
    others = extra_sources(cfg, source, dst_probe, fp, name, str(target_id))   # transfer.extra_sources (issue 44)
    n_band = int(cfg.zero_shot.get("probe_band_devices", 2))
    if others:
        tr.add_sources(others)
        if cfg.zero_shot.get("probe_multi_log_error_band"):   # the multi-source base's own band (issue 44)
            band = [float(v) for v in cfg.zero_shot.probe_multi_log_error_band]
            n_band = int(cfg.zero_shot.get("probe_multi_band_devices", n_band))
    tr.calibrate_zero_shot(band=(band[0], band[1]))   # zero_shot.probe_(multi_)log_error_band, added to the source's
    tr.origin_ = zero_shot_origin(src, f"device probes ({src_id} -> {target_id})", n_band)
    for p, q in (tr.stand_ins_ or {}).items():
        say(f"carb-calibrate: {p} runs on another kernel path on {name} than on the source's CPU: the "
            f"source's {q} cost stands in for it")
    print_unseen(tr)   # a probe without a precision the model predicts: one warning, that interval widened
    for target, info in tr.transfer_.items():
        say(f"carb-calibrate: {target}: {info['form']} ({describe_form(info)}) from 0 rows (device probes)")
    _print_band(tr, band, "CPUs", n_band)
    return tr, {"zero_shot": "probe", "params": {"probe": str(target_id), "zero_shot": to_dict(cfg.zero_shot)},
                "json": {"probe": {"source": src_id, "target": str(target_id)}}, "from": "two device probes"}


def zero_shot_origin(src: dict[str, Any], method: str, band_devices: int) -> dict[str, Any]:
    """``origin_`` of a zero-shot model (:func:`carb.model.transfer.describe_origin` reads it): the source
    model's URI (and version), the method and the number of devices the band was measured on."""
    uri = str(src["uri"]) + (f" (version {src['version']})" if src.get("version") and "@" in str(src["uri"]) else "")
    return {"how": "zero-shot", "source": uri, "method": method, "band_devices": int(band_devices)}


def _print_band(tr: Any, band: Any, kind: str, n: int) -> None:
    """The zero-shot latency interval as printed: the source's interval plus the band (both as factors)."""
    from carb.model.transfer_band import widest_ratio

    entry = tr.intervals_.get("latency_ms") or {}
    lo, hi = widest_ratio(entry) if entry else (float("nan"), float("nan"))
    multi = bool(tr.__dict__.get("extra_sources_"))   # the multi-source base: say whose errors the band is
    what = (f"the multi-source zero-shot band x [{np.exp(band[0]):.2f}, {np.exp(band[1]):.2f}] (measured on {n} "
            f"{kind}), its errors on each {kind[:-1]} as the target\n  with the other {kind} as its sources (here: "
            f"{', '.join(tr.source_names())})" if multi else
            f"the zero-shot band x [{np.exp(band[0]):.2f}, {np.exp(band[1]):.2f}] (measured on {n} {kind})")
    print(f"carb-calibrate: latency 90 % interval x [{lo:.2f}, {hi:.2f}] of the prediction: the source model's own "
          f"plus\n  {what}; P (within a budget) stays within 5-95 %:\n  nothing was measured on this device "
          "(calibrate with K measured rows to narrow it)")


def print_unseen(tr: Any) -> None:
    """One warning line per kind of gap in what the calibration measured (issue 44): precisions the source
    predicts that none of the K rows has, and that the target's device probe lacks; both keep a fallback
    (the common factor, the source's convolution cost) and their intervals are widened
    (:meth:`carb.model.transfer.TransferredCascade._widen_unseen`)."""
    unseen = getattr(tr, "unseen_precisions_", None) or {}
    if unseen.get("rows"):
        say(f"carb-calibrate: warning: none of the {len(tr.calibration_rows_)} calibration rows is "
            f"{', '.join(unseen['rows'])}, which the model predicts: those keep the common factor and their "
            f"intervals are widened; fix: calibrate with rows of every precision (measure=cpu picks at least "
            f"transfer.min_rows_per_precision of each, or data.path with rows of {', '.join(unseen['rows'])})")
    if unseen.get("probe"):
        say(f"carb-calibrate: warning: the device probe of {tr.device_id_} has no {', '.join(unseen['probe'])} "
            f"rows, which the model predicts: those keep the source's convolution cost and their latency "
            f"intervals are widened; fix: carb-probe 'precisions=[fp32,bf16,fp16]' on that CPU")


def probe_given(cfg: Any) -> bool:
    """Whether ``probe`` names a target CPU's probe (a device id or true)."""
    probe = cfg.get("probe")
    return not (probe is None or probe is False or str(probe).lower() in ("false", "none", ""))


def refuse_spec_and_probe(cfg: Any) -> None:
    """One-line :class:`ConfigError` for ``spec=`` (a GPU) together with ``probe=`` (a CPU)."""
    if cfg.get("spec") and probe_given(cfg):
        raise ConfigError("probe: a device probe times CPU convolutions and spec= names a GPU; give one: "
                          "spec=<GPU> (zero-shot from spec sheets) or probe=<CPU device_id>|true (from device probes)")


def extra_sources(cfg: Any, source: Any, target_probe: pd.DataFrame, target_fp: str | None, name: str,
                  target_id: str) -> list[Any]:
    """``transfer.extra_sources`` (issue 44's multi-source base): ``auto`` (the default), a model of each CPU
    dataset CARB ships with a device probe (:func:`carb.data.cpu_sources.auto_sources`) except the source's and
    the target's CPU, trained on the fly with the fast model settings or read from the cache
    (:func:`shipped_source_model`); else a list of model URIs of other CPUs (``[]``: the source alone). Each is
    transferred to the target CPU by its own device probe and the target's (``fit_probe``) for
    :meth:`carb.model.transfer.TransferredCascade.add_sources`; prints which sources were used. One-line
    :class:`ConfigError` for a value that is neither ``auto`` nor a list, and for a URI that names the
    source's or the target's CPU, a GPU model, or a CPU without a device probe."""
    from carb.data.probes import load_probe
    from carb.model.transfer import TransferredCascade

    value = cfg.transfer.get("extra_sources", "auto")
    dispatch = bool(cfg.transfer.get("dispatch", True))
    if isinstance(value, str):
        if value != "auto":
            raise ConfigError(f"transfer.extra_sources: {value!r}; allowed: auto (the CPU datasets CARB ships), "
                              "[] (the source alone) or a list of CPU model URIs")
        pairs = auto_extra_models(source, target_id, target_fp, extra_source_train(cfg))
    else:
        pairs = [(str(uri), uri_source(str(uri), source, target_id)) for uri in list(value or [])]
    out = []
    seen = {str(getattr(source, "device_id_", None)), str(target_id)}
    for label, other in pairs:
        dev = str(getattr(other, "device_id_", None))
        if dev in seen:
            raise ConfigError(f"transfer.extra_sources: {label} is of CPU {dev}, already the source's or the "
                              "target's (or listed twice); allowed: models of other CPUs")
        seen.add(dev)
        out.append(TransferredCascade(other, dispatch=dispatch).fit_probe(
            load_probe(dev), target_probe, target_fp, name, str(target_id)))
    if out:
        say(f"carb-calibrate: multi-source base: the source's and {len(out)} other CPU model(s)' probe "
            f"zero-shots combined ({', '.join(lbl for lbl, _ in pairs)}; "
            f"transfer.source_weighting {cfg.transfer.get('source_weighting', 'inverse_loo')})")
    else:
        say("carb-calibrate: single-source base: the source model's probe zero-shot alone "
            f"(transfer.extra_sources {value if isinstance(value, str) else list(value or [])})")
    return out


def uri_source(uri: str, source: Any, target_id: str) -> Any:
    """The CPU model at ``uri`` (one of ``transfer.extra_sources``), checked: a CPU model of neither the
    source's nor the target's CPU whose CPU has a device probe, else one-line :class:`ConfigError` naming the
    key."""
    from carb.data.probes import load_probe

    other = tracking.load_cascade(uri)
    dev = str(getattr(other, "device_id_", None))
    kind = model_device_kind(other)
    if kind != "cpu":
        raise ConfigError(f"transfer.extra_sources: {uri} is a {kind} model; allowed: CPU models with a device "
                          "probe (their probe zero-shots combine with the source's)")
    if dev in (str(getattr(source, "device_id_", None)), str(target_id)):
        raise ConfigError(f"transfer.extra_sources: {uri} is of CPU {dev}, already the source's or the target's "
                          "(or listed twice); allowed: models of other CPUs")
    if load_probe(dev) is None:
        raise ConfigError(f"transfer.extra_sources: {uri}'s CPU {dev} has no device probe (shipped or "
                          "carb-probe's); allowed: models of CPUs with a device probe")
    return other


def extra_source_train(cfg: Any) -> list[str]:
    """``transfer.extra_source_train``: the ``carb-train`` overrides a shipped CPU dataset's model is trained with
    (``conf/calibrate.yaml``; default :data:`EXTRA_SOURCE_TRAIN`)."""
    value = cfg.transfer.get("extra_source_train")
    return [str(v) for v in value] if value else list(EXTRA_SOURCE_TRAIN)


def auto_extra_models(source: Any, target_id: str, target_fp: str | None,
                      overrides: list[str] | None = None) -> list[tuple[str, Any]]:
    """``transfer.extra_sources: auto``: ``(label, model)`` of each shipped CPU dataset with a device probe that
    is neither the source's nor the target's CPU (:func:`carb.data.cpu_sources.auto_sources`, by device id or
    fingerprint), its model from :func:`shipped_source_model` trained with ``overrides`` (None:
    :data:`EXTRA_SOURCE_TRAIN`); prints the datasets skipped and why."""
    from carb.data.cpu_sources import auto_sources
    from carb.data.probes import load_probe

    exclude = [(getattr(source, "device_id_", None), getattr(source, "device_fingerprint_", None)),
               (target_id, target_fp)]
    kept, skipped = auto_sources(exclude, lambda dev: load_probe(dev) is not None)
    if skipped:
        say(f"carb-calibrate: transfer.extra_sources auto: not used: {'; '.join(skipped)}")
    return [(f"{s.device_name} {s.device_id} (carb/data/{s.path.name})", shipped_source_model(s, overrides))
            for s in kept]


#: ``carb-train`` overrides of a shipped CPU dataset's model where ``transfer.extra_source_train`` is unset (the
#: configured default: the fast settings, 25 trees per boosted specialist, larger leaves; issue 44).
EXTRA_SOURCE_TRAIN: tuple[str, ...] = ("model=carb_fast", "model.specialists.xgb.n_estimators=25",
                                       "model.specialists.lgbm.n_estimators=25",
                                       "model.specialists.lgbm.min_child_samples=20",
                                       "model.specialists.et.min_samples_leaf=8")

#: Distributions a shipped source's cached model depends on (part of its cache key).
SOURCE_MODEL_LIBS: tuple[str, ...] = ("carb", "scikit-learn", "xgboost", "lightgbm", "numpy", "pandas")


def shipped_source_model(src: Any, overrides: list[str] | None = None) -> Any:
    """A cascade with the model settings ``overrides`` give ``conf/train.yaml`` (``transfer.extra_source_train``;
    None: :data:`EXTRA_SOURCE_TRAIN`, the fast settings) fitted on every ok row of the shipped CPU dataset ``src``
    (:class:`carb.data.cpu_sources.CpuSource`, latency and peak memory as the transfer benchmark fits its
    sources); cached in ``<CARB_CACHE>/sources/`` keyed by the dataset's SHA-256, those settings and the library
    versions (a damaged cache entry is refitted). Prints whether it was trained (and its seconds) or read from
    the cache."""
    import hashlib
    import pickle
    import time
    import warnings

    from carb.commands.cli import compose
    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows
    from carb.files import write_atomic
    from carb.model.presets import build_cascade
    from carb.resources import cache_dir, installed_versions

    overrides = list(overrides or EXTRA_SOURCE_TRAIN)
    try:
        cfg = compose("train", overrides)
    except Exception as e:  # noqa: BLE001 - Hydra's errors on a bad override: one line naming the key
        raise ConfigError(f"transfer.extra_source_train: {overrides} is not a carb-train configuration "
                          f"({str(e).splitlines()[0] if str(e) else type(e).__name__}); allowed: carb-train "
                          "overrides such as model=carb_fast") from None
    settings = {"model": to_dict(cfg.model), "features": to_dict(cfg.features), "prior": to_dict(cfg.prior)}
    ident = {"data": src.sha256(), **settings, "versions": installed_versions(SOURCE_MODEL_LIBS)}
    key = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:20]
    path = cache_dir() / "sources" / f"{src.device_id}-{key}.pkl"
    if path.exists():
        try:
            model = pickle.loads(path.read_bytes())
            say(f"carb-calibrate: extra source {src.device_name} {src.device_id}: model read from the cache {path}")
            return model
        except Exception:  # noqa: BLE001 - a damaged or stale entry: fit again and replace it
            pass
    t0 = time.perf_counter()
    rows = ok_rows(load_dataset(src.path)).reset_index(drop=True)
    targets = [t for t in ("latency_ms", "peak_memory_MB") if t in rows.columns and rows[t].notna().any()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = build_cascade(settings["model"], settings["features"], settings["prior"]).fit(rows, rows[targets])
    say(f"carb-calibrate: extra source {src.device_name} {src.device_id}: model trained on its {len(rows)} "
        f"shipped rows ({time.perf_counter() - t0:.1f} s, {' '.join(overrides)}; cached in {path.parent})")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda tmp: tmp.write_bytes(pickle.dumps(model)))
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as e:
        say(f"carb-calibrate: warning: could not cache the extra source's model in {path.parent}: {e}")
    return model


def model_device_kind(model: Any) -> str:
    """The ``kind`` of ``model``'s device fingerprint (``cpu``, ``cuda``, ...); ``cpu`` when it has none or it
    cannot be read (models fitted on data without a fingerprint are CPU models)."""
    from carb.model.transfer import fingerprint_kind

    return fingerprint_kind(getattr(model, "device_fingerprint_", None)) or "cpu"


def refuse_gpu_source(source: Any, source_uri: str) -> None:
    """One-line :class:`ConfigError` when ``source`` is a GPU model: a device probe (carb-probe) times CPU
    convolutions, so it cannot transfer a GPU's model."""
    kind = model_device_kind(source)
    if kind != "cpu":
        raise ConfigError(f"probe: device probes time CPU convolutions; the source model {source_uri} is of "
                          f"{getattr(source, 'device_name_', '?')!r} ({kind}): use spec=<GPU> for a GPU zero-shot")


def _log(cfg: Any, tr: Any, src: dict[str, Any], name: str, register: bool, how: dict[str, Any]
         ) -> tuple[str, dict[str, Any]]:
    """Log the zero-shot run and model (registered under ``name`` with ``register``); ``how``: what it was
    made from (``zero_shot`` tag, params, the ``transfer.json`` extras, a phrase)."""
    from carb.model.transfer import describe_origin

    tags = {"device": tr.device_name_, "device_id": tr.device_id_, "source_model": src["uri"],
            "source_version": src.get("version", ""), "k": 0, "zero_shot": how["zero_shot"]}
    with tracking.start_run("calibrate", cfg.get("run_name") or sweep_suffix(f"calibrate/{name}/k0"),
                            cfg.tracking.uri, tags=tags, artifact_root=cfg.tracking.get("artifact_root"),
                            sweep=sweep_tags()) as run_id:
        tracking.log_params({"source": src["uri"], "k": 0, **how["params"], "coverage": float(cfg.coverage)})
        tracking.log_dict({"transfer": tr.transfer_, **how["json"]}, "transfer.json")
        meta = {"device": tr.device_name_, "device_id": tr.device_id_, "device_fingerprint": tr.device_fingerprint_,
                "calibrated_from": src["uri"], "source_version": src.get("version", ""), "k": "0",
                "zero_shot": how["zero_shot"], "targets": ",".join(tr.targets_)}
        from carb.commands.train import served_model

        rows = example_rows(tr, to_dict(cfg.space))
        served, example, inputs = served_model(tr, rows, rows)
        info = tracking.log_cascade(
            served, example, inputs=inputs, registered_name=name if register else None, metadata=meta,
            description=f"{tr.device_name_}: {describe_origin(tr)} (k=0).",
            model_description=f"CARB cost model of {tr.device_name_}: {describe_origin(tr)}.")
    return run_id, info
