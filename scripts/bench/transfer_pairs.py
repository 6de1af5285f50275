"""Benchmark: transfer between every ordered pair of real devices the project has data for.

Devices: the shipped CPU reference (AMD EPYC Zen 5, ``carb/data/cpu-reference.parquet``), the AMD EPYC Zen 4
VM (``carb/data/cpu-amd-zen4.parquet``), the Intel Xeon with AMX and AVX-512 FP16
(``carb/data/cpu-intel-xeon.parquet``; all three measured by CARB's collector),
and the four GPUs of timm's public benchmark (eager amp_fp16 torchvision/timm ResNets, latency only;
``scripts/bench/extrapolation.py:timm_latency``). The H200 data has no configuration in common with the
timm rows (CARB's knob grid at batch <= 256 against timm's named models at batch 1024), so it is not paired.

For each ordered pair a ``carb_fast`` cascade fitted on all of the source's rows (a CPU dataset CARB ships as an extra
source, the Zen 4 and the Xeon: with ``transfer.extra_source_train``, :func:`fit_cpu_source`) is calibrated with K
space-filling rows of the target (``carb-calibrate``'s transfer) and scored on the target's other rows,
K in {0, 3, 10, 20}, per precision and target (latency, peak memory where both devices measure it):

* ``calibrated`` (what ``carb-calibrate`` fits): the K rows calibrate the pair's zero-shot model where it
  has one (the device probes' prediction on CPU pairs whose two devices have a probe, the spec records' on
  GPU pairs), else the source's; on a zero-shot base the K rows fit offsets only (common and per precision,
  empirical-Bayes shrunk: ``transfer.base_offsets_only``), else the base per precision and the form chosen by
  leave-one-out on the K rows; dispatch stand-ins on for CPU pairs;
* ``source_base``: the same transfer from the source's own prediction alone;
* ``no_dispatch``: ``source_base`` without dispatch stand-ins (CPU pairs only);
* ``source``: the source model uncalibrated (K = 0);
* ``zero_shot`` (K = 0): CPU pairs whose two devices have a device probe, ``TransferredCascade.fit_probe``;
  GPU pairs, ``TransferredCascade.fit_spec`` from the two spec records with weights fitted on the pairs
  without the target device (their form too: :func:`carb.model.spec_transfer.choose_form` on those pairs
  alone); latency intervals from the zero-shot errors into the other devices (both:
  leave-one-device-out);
* ``flops_k``: a FLOPs-only line fitted on the same K rows.

CPU pairs, multi-source base (issue 44; ``--single-source``: off): CARB's answer (``zero_shot`` at K = 0, the base
of ``calibrated``) is the pair's probe zero-shot combined with the zero-shots into the same target from every
other CPU (:func:`multi_source_models`; what ``carb-calibrate`` does by default, ``transfer.extra_sources: auto``:
the shipped CPUs' models except the target's). The target is left out of everything: each source model is fitted
on its own CPU's rows and transferred by the two CPUs' probes; the target's K rows only weight the sources and fit
the offsets. With three CPUs both pairs into a target share one base, so a pair's row is the target's answer; the
pair's source alone is scored beside it (``zero_shot_single`` / ``calibrated_single``, the ``single_source`` line
and the ``k0_single`` / ``k10_single`` columns of :func:`pair_overview`).

Coverage and width (median hi/lo) are those of the nominal 90 % intervals of ``calibrated`` (K > 0) and
``zero_shot`` (K = 0), leave-one-device-out (issue 44): each pair's interval is the device-level band
(:func:`carb.model.transfer_prior.device_level_band`) of the held-out errors of the pairs of its device class
that involve neither of its two devices (scale-free at K > 0, each pair's errors over its K rows'
leave-one-out scale; at K = 0 in log units), never narrower than the target device's repeatability floor per
precision (:func:`repeat_floor`); ``n_devices``: how many devices of its class it rests on. With three CPUs
no CPU pair avoids both devices of a CPU pair: a CPU pair's K > 0 interval then comes from the CPU pairs
without its target device (:func:`carb.model.transfer_prior.held_out_level_band`: their held-out error level
where it is steadier across them than its ratio to their own K-row intervals), else its own K rows'
leave-one-out interval, and at K = 0 the band of the CPU pairs without its target device
(:func:`carb.model.transfer_prior.zero_shot_target_out_band`, ``transfer.zero_shot_target_out: device``: the
device-level band of the other targets' multi-source zero-shot errors, t(df = their devices) x their bias rms plus
the row residual, naming the devices; the GPU pairs' band it would borrow is scored beside it,
``coverage_borrowed``, for comparison only); the same band over all three CPUs is
``zero_shot.probe_multi_log_error_band`` (:func:`multi_source_band`, checked against the config). The band's rules
are ``conf/calibrate.yaml``'s (``transfer.device_widen``, ``unmeasured_floor``, ``level_by_precision``,
``zero_shot_target_out``: :func:`interval_rules`, passed explicitly as :data:`RULES`). ``coverage_loo`` / ``width_loo``:
from the K rows' residuals alone. ``--errors-out carb/data/transfer-errors.csv`` writes the table of every
pair's errors that ``carb-calibrate`` ships and the per-pair table beside it (``transfer-pairs.csv``, the
device-level band of ``transfer.pair_prior``), with provenance. ``--interval-sweep`` / ``--precision-sweep``
study the shipped table prior (:func:`set_prior_intervals`, leave-one-device-out too).

    python -m scripts.bench.transfer_pairs [--ks 0,10,12] [--no-gpu] [--csv out.csv] [--errors-out FILE]
        [--loo-stat median|mean|rms] [--prior-rows N] [--interval-sweep] [--precision-band pooled|widest]
        [--precision-sweep] [--error-sources] [--single-source] [--parts-out FILE] [--parts-in FILE]
        [--extra-session DATASET=PROBE ...] [--pool-sessions]

``--extra-session DATASET=PROBE`` (issue 44, k44d; repeatable): a further measuring session of a benchmark CPU (its
rows and the device probe of the same session, e.g. ``carb/data/cpu-intel-xeon-2026-12-07.parquet`` with
``scripts/data/xeon-probe-2026-12-07.csv``) joins the multi-source base of every CPU target that is not its device
(never a target, never a pair's source; weighted as the other sources); with ``--pool-sessions`` its rows are moved
by its own probe to its device's shipped probe and pooled with that device's rows into one source instead. A study
option: measured not to help (docs/MODEL.md, "Round k44d").

K-row picks (k44): every K > 0 figure is the mean over ``benchmark.picks`` picks of the K rows (``conf/calibrate.yaml``;
:func:`carb.analysis.transfer.pick_split`: pick 0 carb-calibrate's own, the others the same rule on a random
``benchmark.pool_fraction`` of each precision's rows), each pick's intervals from the other pairs' errors of the same
pick; the tables print each cell's min-max over the picks beside the mean (:func:`average_picks`), and the last line
appends ``picks=N kq_max_mape_range=a-b k10_max_mape_range=a-b`` (the worst cell's). ``--errors-out`` and the
sweeps use pick 0 (carb-calibrate's own pick); the baselines ``source_base`` / ``no_dispatch`` are fitted on pick 0.

``--parts-out FILE`` saves every pair's fits and held-out errors; ``--parts-in FILE`` rebuilds only the intervals
and tables from them (seconds instead of minutes: for exploring interval rules; point accuracy as saved).

``--error-sources`` (issue 44): per CPU pair and precision at K = 10, how much of the calibrated latency error an
exactly known per-precision offset or one exactly known feature slope would remove, how much the source model's
generalisation to configurations it never measured adds, and the floors: the target's run-to-run noise and a
cascade cross-validated on the target's own rows (:func:`error_sources`).

Default K: 0, 10 and the quickstart's (``k`` of ``conf/calibrate.yaml``). Devices: the three CPUs (Zen 5
reference, Zen 4 of ``carb/data/cpu-amd-zen4.parquet``, the Xeon) and timm's four GPUs. The last line is
machine-readable (latency MAPE in percent, worst over pairs and precisions; per pair CARB's answer: the
zero-shot model at K = 0 where one exists, ``calibrated`` at the quickstart's K and at K = 10; coverage pooled
over each left-out target device's rows, latency and memory, K = 10):
``transfer: devices=N pairs=P k0_max_mape=X kq_max_mape=X k10_max_mape=X k10_min_spearman=X
lodo_coverage_min=X lodo_coverage_max=X width_median_max=X``; before it the per-device table
(:func:`device_table`), the baselines (uncalibrated source, the transfer from the source alone, intervals
from the K rows alone) and the K = 10 pair-and-precision cells whose coverage an exact binomial test at 5 %
finds inconsistent with the nominal 0.90 (``coverage_cells``).
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
#: The Xeon's rows, shipped in carb/data (issue 44: an extra source of ``transfer.extra_sources: auto``; the same
#: bytes as ``../shared/data/cpu-intel-xeon``).
INTEL = ROOT / "carb" / "data" / "cpu-intel-xeon.parquet"


#: The third CPU, an AMD EPYC Zen 4 VM (device_id 34cc4b132c), shipped in carb/data (data card
#: carb/data/cpu-amd-zen4.md).
ZEN4 = ROOT / "carb" / "data" / "cpu-amd-zen4.parquet"


#: Shipped rows with a measured run-to-run spread (``latency_repeat_spread``): the Zen 4 configurations
#: re-measured in two passes and the CPU zoo (both on 34cc4b132c), the Xeon's session of 2026-12-07 (6a0ea403ee);
#: a device's floor uses those of its device_id.
REPEAT_ROWS = (ROOT / "scripts" / "data" / "cpu-amd-zen4-repeat.parquet", ROOT / "carb" / "data" / "zoo-cpu.parquet",
               ROOT / "carb" / "data" / "cpu-intel-xeon-2026-12-07.parquet")


def fit_cpu_source(rows: pd.DataFrame, targets: list[str]):
    """The benchmark's model of a device: ``carb_fast`` (:func:`scripts.bench.transfer.fit_source`), except a
    shipped CPU dataset of ``transfer.extra_sources: auto`` (:mod:`carb.data.cpu_sources`, by device id), fitted
    with ``transfer.extra_source_train`` (``conf/calibrate.yaml``) as ``carb-calibrate`` trains it (issue 44)."""
    from carb.commands.cli import compose, to_dict
    from carb.commands.zero_shot import extra_source_train
    from carb.data.cpu_sources import shipped_cpu_sources
    from carb.model.presets import build_cascade
    from scripts.bench.transfer import fit_source

    ids = {s.device_id for s in shipped_cpu_sources()}
    overrides = extra_source_train(compose("calibrate", []))
    if "device_id" not in rows or not set(rows["device_id"].dropna().astype(str)) & ids or overrides == ["model=carb_fast"]:
        return fit_source(rows, targets)
    cfg = compose("train", overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_cascade(to_dict(cfg.model), to_dict(cfg.features), to_dict(cfg.prior)).fit(rows, rows[targets])


def measured_repeat_rows(rows: pd.DataFrame) -> pd.DataFrame | None:
    """The rows with a measured ``latency_repeat_spread`` on the device of ``rows`` (its modal ``device_id``):
    ``rows``' own and those of :data:`REPEAT_ROWS`; None where there are none (the configured floor holds)."""
    from carb.data.repeatability import measured_spreads

    if "device_id" not in rows.columns or rows["device_id"].dropna().empty:
        return None
    dev = str(rows["device_id"].dropna().astype(str).mode().iloc[0])
    frames = [rows] + [pd.read_parquet(f) for f in REPEAT_ROWS if f.exists()]
    parts = [measured_spreads(f[f["device_id"].astype(str) == dev]) for f in frames if "device_id" in f.columns]
    parts = [m for m in parts if len(m)]
    return pd.concat(parts, ignore_index=True) if parts else None


def cpu_devices() -> dict[str, pd.DataFrame]:
    """The CPU datasets (ok rows), by short name: the Zen 5 reference, the Zen 4 of ``scripts/data`` and the
    Xeon (only where its file exists)."""
    from carb.data.io import load_dataset, reference_dataset
    from carb.data.schema import ok_rows

    out = {"EPYC Zen 5 (reference)": ok_rows(reference_dataset()).reset_index(drop=True)}
    if ZEN4.exists():
        out["EPYC Zen 4"] = ok_rows(load_dataset(str(ZEN4))).reset_index(drop=True)
    if INTEL.exists():
        out["Xeon (AVX-512 FP16)"] = ok_rows(load_dataset(str(INTEL))).reset_index(drop=True)
    return out


def gpu_devices() -> dict[str, pd.DataFrame]:
    """timm's four GPUs (latency only)."""
    from scripts.bench.extrapolation import timm_latency
    from scripts.bench.transfer import GPUS

    return {g: timm_latency(g) for g in GPUS}


def _scores(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    from carb.analysis.transfer import scores

    return scores(y, p)


def _identity(rows: pd.DataFrame) -> tuple[str, str | None, str | None]:
    from carb.model.cascade_data import device_identity

    return device_identity(rows)


def configured_bands() -> dict[str, object]:
    """The zero-shot bands as ``conf/calibrate.yaml`` (``zero_shot``, their one source) states them: ``spec`` /
    ``probe`` (lo, hi) log errors and the devices each was measured on."""
    from carb.commands.cli import compose

    zs = compose("calibrate", []).zero_shot
    multi = zs.get("probe_multi_log_error_band")
    return {"spec": tuple(float(v) for v in zs.log_error_band), "spec_devices": int(zs.band_devices),
            "probe": tuple(float(v) for v in zs.probe_log_error_band), "probe_devices": int(zs.probe_band_devices),
            "probe_multi": tuple(float(v) for v in multi) if multi else None,
            "probe_multi_devices": int(zs.get("probe_multi_band_devices") or 0)}


def _band_check(kind: str, lo: float, hi: float) -> str:
    """``conf/calibrate.yaml``'s band beside the one recomputed here: the same, or how to update it."""
    c = configured_bands()[kind]
    same = abs(c[0] - lo) < 5e-4 and abs(c[1] - hi) < 5e-4
    return (f"the band conf/calibrate.yaml states" if same else
            f"conf/calibrate.yaml states [{c[0]:.3f}, {c[1]:.3f}]: update it to this")


def configured_single_shrink() -> float | str | None:
    """``transfer.precision_shrink_single`` of ``conf/calibrate.yaml``: the offsets' shrink on one source's base
    (the pairs' single-source calibrations; the multi-source base keeps ``precision_shrink``)."""
    from carb.commands.calibrate import _shrink_or_none
    from carb.commands.cli import compose

    return _shrink_or_none(compose("calibrate", []).transfer.get("precision_shrink_single"))


def configured_source_weighting() -> str:
    """``transfer.source_weighting`` of ``conf/calibrate.yaml``: how the multi-source base's sources are weighted
    after K rows (as ``carb-calibrate`` weights them)."""
    from carb.commands.cli import compose

    return str(compose("calibrate", []).transfer.get("source_weighting", "inverse_loo"))


def configured_offset_weighting() -> str:
    """``transfer.offset_weighting`` of ``conf/calibrate.yaml``: how a precision's K rows are weighted in its
    latency offset (as ``carb-calibrate`` weights them)."""
    from carb.commands.cli import compose

    return str(compose("calibrate", []).transfer.get("offset_weighting", "equal"))


def zero_shot_models(models: dict, devices: dict[str, pd.DataFrame]) -> dict[tuple[str, str], object]:
    """Zero-shot transfers from device probes (``TransferredCascade.fit_probe``) for every ordered CPU
    pair whose two devices have a probe; each latency interval is calibrated on the zero-shot log errors
    of the pairs into other target devices (leave-one-device-out), none when there are none."""
    from carb.data.probes import load_probe
    from carb.model.transfer import TransferredCascade

    probes = {n: load_probe(_identity(d)[1]) for n, d in devices.items()}
    pairs = [(s, d) for s in devices for d in devices if s != d and probes[s] is not None and probes[d] is not None]
    single_shrink, weighting = configured_single_shrink(), configured_source_weighting()
    out = {}
    for s, d in pairs:
        name, dev_id, fp = _identity(devices[d])
        out[(s, d)] = TransferredCascade(models[s], precision_shrink_single=single_shrink,
                                         source_weighting=weighting,
                                         offset_weighting=configured_offset_weighting()).fit_probe(
            probes[s], probes[d], fp, name, dev_id)
    for s, d in pairs:
        if s not in [q[0] for q in pairs[:pairs.index((s, d))]]:
            print(f"  {probe_form_check(models[s], devices[s], out[(s, d)].probe_models_['source'], s)}", flush=True)
    band = _lodo_zero_shot_intervals(out, devices)
    if band:
        lo, hi = band
        print(f"  zero-shot from device probes, log error 5-95 % over {len(pairs)} pairs: [{lo:.3f}, {hi:.3f}] "
              f"({_band_check('probe', lo, hi)})", flush=True)
    return out


def _lodo_zero_shot_intervals(out: dict[tuple[str, str], object], devices: dict[str, pd.DataFrame]
                              ) -> tuple[float, float] | None:
    """Calibrate each pair's zero-shot latency interval in ``out`` (pair -> transfer) on the log errors
    log(measured / predicted) of the pairs involving neither of its devices (leave-one-device-out; none when
    there are none; the benchmark resets these); returns the 5-95 % of every pair's log error (None: no pair)."""
    from carb.model.intervals import screening_predict

    errors = {}
    for (s, d), tr in out.items():
        y = devices[d]["latency_ms"].to_numpy(float)
        errors[(s, d)] = np.log(y / screening_predict(tr, devices[d])["pred_latency_ms"].to_numpy(float))
    for s, d in out:
        others = [e for q, e in errors.items() if not set(q) & {s, d}]
        out[(s, d)].calibrate_zero_shot(np.concatenate(others) if others else None)
    if not errors:
        return None
    lo, hi = np.quantile(np.concatenate(list(errors.values())), [0.05, 0.95])
    return float(lo), float(hi)


#: ``--single-source``: CARB's answer on a CPU pair is the source's probe zero-shot alone (the earlier base), not
#: the multi-source base (:func:`multi_source_models`).
SINGLE_SOURCE: list[bool] = [False]


def multi_source_models(single: dict[tuple[str, str], object], devices: dict[str, pd.DataFrame],
                        extra: dict[str, list] | None = None) -> dict[tuple[str, str], object]:
    """Each CPU pair's multi-source base (issue 44; :meth:`carb.model.transfer.TransferredCascade.add_sources`):
    the pair's probe zero-shot (``single``) combined with the zero-shots into the same target from every other
    CPU of ``devices`` (never the target: each is a source model fitted on its own device's rows, transferred by
    the two CPUs' probes). With three CPUs both pairs into a target share one base (their weights after K rows
    the same; each pair's row order puts its own source first), so the per-pair table shows one answer per
    target twice; the single-source figures are printed beside (``single_source``). Latency intervals at K = 0
    from the other targets' multi-source errors (leave-one-device-out as :func:`zero_shot_models`)."""
    out = {}
    for (s, d), z in single.items():
        others = [single[(u, d)] for u in devices if u not in (s, d) and (u, d) in single] + (extra or {}).get(d, [])
        out[(s, d)] = copy.copy(z).add_sources(others) if others else z
    band = _lodo_zero_shot_intervals(out, devices)
    if band:
        print(f"  zero-shot multi-source base (every other CPU's probe zero-shot, equal weights), log error 5-95 % "
              f"over {len(out)} pairs: [{band[0]:.3f}, {band[1]:.3f}]", flush=True)
    entry = multi_source_band(out, devices)
    if entry is not None:
        c = configured_bands()["probe_multi"]
        same = c is not None and abs(c[0] + entry["upper"]) < 5e-4 and abs(c[1] - entry["upper"]) < 5e-4
        print("  zero-shot multi-source device-level band (what carb-calibrate k=0 probe=... ships with extra "
              "sources): "
              f"[{-entry['upper']:.3f}, {entry['upper']:.3f}] on {entry['n_devices']} CPUs ({entry['method']}; "
              + ("the band conf/calibrate.yaml states)" if same else
                 f"conf/calibrate.yaml's zero_shot.probe_multi_log_error_band is {c}: update it to this)"), flush=True)
    return out


def multi_source_band(out: dict[tuple[str, str], object], devices: dict[str, pd.DataFrame]) -> dict | None:
    """The device-level band (:func:`carb.model.transfer_prior.device_level_band`, :data:`RULES`) of the
    multi-source zero-shot's latency errors into every CPU (``out``: pair -> transfer; each target one draw per
    precision, df = the CPUs): ``zero_shot.probe_multi_log_error_band``, what ``carb-calibrate k=0 probe=...``
    adds to the source's interval when extra sources join (issue 44). None without a pair."""
    from carb.model.intervals import screening_predict
    from carb.model.transfer_prior import device_level_band

    recs = []
    for (s, d), tr in out.items():
        rows = devices[d]
        pred = screening_predict(tr, rows)["pred_latency_ms"].to_numpy(float)
        err = np.log(rows["latency_ms"].to_numpy(float) / pred)
        recs.append({"pair": (s, d), "err": err, "precision": rows["precision"].astype(str).to_numpy(), "kind": "cpu"})
    return device_level_band(recs, 0.9, 0.0, kind="cpu", rules=RULES[0]) if recs else None


def probe_form_check(model, rows: pd.DataFrame, probe_model, name: str) -> str:
    """The probe transfer's form checked on the source CPU alone (its own rows, model and probe; no target
    row): each precision's rows predicted from the model's prediction at another precision, either the
    whole network scaled by the convolutions' ratio (``ratio``, the earlier form) or only the convolutions
    replaced (``additive``, :meth:`carb.model.transfer.TransferredCascade.probe_ratio` with r = 1: same
    device). One line: the MAPE range over the ordered precision pairs of each form."""
    from carb.model.intervals import screening_predict

    prec = rows["precision"].astype(str).to_numpy()
    y = rows["latency_ms"].to_numpy(float)
    got: dict[str, list[float]] = {"ratio": [], "additive": []}
    for p in np.unique(prec):
        if p not in probe_model.coef_:   # a probe without this precision (the Zen 4's has no fp16)
            continue
        m = prec == p
        c_p = probe_model.network_ms(rows[m], p)
        for q in np.unique(prec):
            if q == p or q not in probe_model.coef_ or p not in probe_model.coef_:
                continue
            as_q = rows[m].assign(precision=q)
            p_q = screening_predict(model, as_q)["pred_latency_ms"].to_numpy(float)
            c_q = probe_model.network_ms(as_q, q)
            got["ratio"].append(100 * np.mean(np.abs(p_q * c_p / c_q / y[m] - 1)))
            got["additive"].append(100 * np.mean(np.abs((np.maximum(p_q - c_q, 0) + c_p) / y[m] - 1)))
    return (f"probe form check on {name} alone (one precision from another, {len(got['ratio'])} precision pairs): "
            + ", ".join(f"{k} MAPE {min(v):.1f}-{max(v):.1f} %" for k, v in got.items() if v))


def spec_zero_shot_models(models: dict, devices: dict[str, pd.DataFrame]) -> tuple[dict, pd.DataFrame]:
    """Zero-shot GPU transfers from spec records (``TransferredCascade.fit_spec``) for every ordered pair,
    the weights fitted on the measured pairs that do not involve the target device (leave-one-device-out),
    each latency interval calibrated on the zero-shot log errors into the other target devices. Returns the
    models by pair and the weights per held-out device."""
    from carb.data.gpu_specs import find_spec, gpu_spec
    from carb.model.intervals import screening_predict
    from carb.model.spec_transfer import choose_form, fit_weights, spec_axes
    from carb.model.transfer import TransferredCascade

    spec = {g: gpu_spec(find_spec(g)) for g in devices}
    pairs = [(s, d) for s in devices for d in devices if s != d]
    meas = {}
    for s, d in pairs:
        a, b = devices[s].set_index("model"), devices[d].set_index("model")
        m = a.index.intersection(b.index)
        per_img = (b.loc[m, "latency_ms"] / b.loc[m, "batch_size"]) / (a.loc[m, "latency_ms"] / a.loc[m, "batch_size"])
        meas[(s, d)] = float(np.median(np.log(per_img)))
    weights, fitted, errors, forms = {}, {}, {}, {}
    for d in devices:
        train = [q for q in pairs if d not in q]
        prec = str(devices[d]["precision"].iloc[0])
        axes = {q: spec_axes(spec[q[0]], spec[q[1]], prec) for q in train}
        forms[d] = choose_form(axes, meas)   # the form too is chosen without the target device (nested)
        weights[d] = {**fit_weights(np.array([axes[q] for q in train]), np.array([meas[q] for q in train]),
                                    forms[d][0]), "form": forms[d][0]}
    for s, d in pairs:
        rows = devices[d][devices[d]["model"].isin(set(devices[s]["model"]))]
        w = {a: v for a, v in weights[d].items() if a != "form"}
        fitted[(s, d)] = TransferredCascade(models[s]).fit_spec(spec[s], spec[d], w, device_name=d)
        errors[(s, d)] = np.log(rows["latency_ms"].to_numpy(float)
                                / screening_predict(fitted[(s, d)], rows)["pred_latency_ms"].to_numpy(float))
    prec = str(next(iter(devices.values()))["precision"].iloc[0])
    axes = {q: spec_axes(spec[q[0]], spec[q[1]], prec) for q in pairs}
    form, scores = choose_form(axes, meas)
    every = fit_weights(np.array([axes[q] for q in pairs]), np.array([meas[q] for q in pairs]), form)
    lo, hi = np.quantile(np.concatenate(list(errors.values())), [0.05, 0.95])
    print(f"  zero-shot spec weights on all {len(pairs)} pairs (conf/calibrate.yaml zero_shot), form {form} "
          f"(leave-one-device-out mean |log error|: " + ", ".join(f"{k} {v:.3f}" for k, v in scores.items()) + "): "
          + ", ".join(f"{k}: {v:.3f}" for k, v in every.items())
          + f"; leave-one-device-out log error 5-95 %: [{lo:.3f}, {hi:.3f}] ({_band_check('spec', lo, hi)})",
          flush=True)
    for s, d in pairs:   # leave-one-device-out (the benchmark resets these with the device-level band)
        others = [errors[q] for q in pairs if not set(q) & {s, d}]
        fitted[(s, d)].calibrate_zero_shot(np.concatenate(others) if others else None)
    return fitted, pd.DataFrame(weights).T


def pick_settings() -> dict[str, float]:
    """``benchmark`` of ``conf/calibrate.yaml``: ``picks`` (how many K-row picks each K > 0 figure averages over),
    ``pool_fraction`` and ``seed`` (:func:`carb.analysis.transfer.pick_split`); one pick (carb-calibrate's own)
    where the key is absent."""
    from omegaconf import OmegaConf

    b = OmegaConf.load(ROOT / "conf" / "calibrate.yaml").get("benchmark") or {}
    return {"picks": int(b.get("picks", 1)), "pool_fraction": float(b.get("pool_fraction", 0.5)),
            "seed": int(b.get("seed", 0))}


def average_picks(t: pd.DataFrame) -> pd.DataFrame:
    """``t`` (one row per pair, target, precision, K, model and pick) averaged over the picks: the mean of every
    figure (MAPE, Spearman, coverage, width, rows inside, ...; ``n_devices`` the fewest), ``picks`` (how many), and the
    spread beside it:
    ``mape_pct_min`` / ``mape_pct_max`` / ``mape_pct_sd``, ``coverage_min`` / ``coverage_max``, and each pick's
    coverage (``coverage_pick<i>``, for :func:`pick_coverage_range`). A table without ``pick`` is returned as it is."""
    if "pick" not in t.columns or t.empty:
        return t
    key = ["source", "target_device", "target", "precision", "k", "model"]
    num = [c for c in t.columns if c not in key + ["pick"] and pd.api.types.is_numeric_dtype(t[c])]
    g = t.groupby(key, sort=False, dropna=False)
    out = g[num].mean()
    if "n_devices" in t.columns:   # the fewest devices a pick's band rested on
        out["n_devices"] = g["n_devices"].min()
    out["picks"] = g["pick"].nunique()
    for c in ("mape_pct", "coverage"):
        if c in t.columns:
            out[f"{c}_min"], out[f"{c}_max"] = g[c].min(), g[c].max()
    out["mape_pct_sd"] = g["mape_pct"].std(ddof=0)
    if "coverage" in t.columns:
        by = t.pivot_table(index=key, columns="pick", values="coverage", aggfunc="first", dropna=False)
        out = out.join(by.rename(columns=lambda i: f"coverage_pick{int(i)}"))
    return out.reset_index()


def score_pair(source, rows: pd.DataFrame, k: int, targets: list[str], cpu: bool, zero_shot=None, single=None,
               pick: int = 0, held_out: pd.DataFrame | None = None) -> tuple[list[dict], list[dict]]:
    """Records (target, precision, model, k, n, mape_pct, spearman[, coverage, width]) of ``source``
    transferred with ``k`` of the target's ``rows`` and scored on the rest, and the calibrated model's
    held-out errors (``pending``: its intervals are set later, from the other pairs' errors).

    Models: ``source`` (uncalibrated), ``zero_shot`` (k = 0, ``zero_shot`` given), ``calibrated`` (k > 0: what
    carb-calibrate fits: the zero-shot model's base, the probes' or the spec records', where the pair has one,
    the bases and forms chosen by leave-one-out), ``source_base`` (k > 0: the same from the source's own
    prediction alone), ``no_dispatch`` (CPU, k > 0: ``source_base`` without dispatch stand-ins), ``flops_k``;
    ``single`` (a CPU pair's probe zero-shot from its source alone where ``zero_shot`` is the multi-source base):
    ``zero_shot_single`` (k = 0) and ``calibrated_single`` (k > 0), the single-source figures beside. ``pick``: which
    K-row pick (:func:`carb.analysis.transfer.pick_split` with :func:`pick_settings`; 0: carb-calibrate's own; the
    baselines ``source_base`` and ``no_dispatch`` are fitted on pick 0 only). ``held_out``: rows to score on instead
    of the pick's other rows (the K rows still picked from ``rows``; e.g. another measuring session's rows,
    ``scripts/studies/transfer_sessions.py``); None: the rest of ``rows``."""
    from carb.analysis.transfer import flops_fit, pick_split
    from carb.model.intervals import interval, screening_predict
    from carb.model.transfer import TransferredCascade

    fitted = {}
    if k == 0:
        cal, rest = rows.iloc[:0], (rows if held_out is None else held_out)
        preds = {"source": screening_predict(source, rest)}
        ivs = {}
        if zero_shot is not None:
            preds["zero_shot"] = screening_predict(zero_shot, rest)
        if single is not None:
            preds["zero_shot_single"] = screening_predict(single, rest)
    else:
        picks = pick_settings()
        cal, rest = pick_split(rows, k, pick, picks["pool_fraction"], picks["seed"])
        rest = rest if held_out is None else held_out
        preds, ivs = {"source": screening_predict(source, rest)}, {}
        base = copy.copy(zero_shot) if zero_shot is not None else TransferredCascade(source)
        fitted["calibrated"] = base.fit(cal)   # the zero-shot's probe models shared: fit replaces, never mutates them
        if pick == 0:   # the baselines from carb-calibrate's own pick only (runtime)
            fitted["source_base"] = TransferredCascade(source).fit(cal)
        if single is not None:
            fitted["calibrated_single"] = copy.copy(single).fit(cal)
        if cpu and pick == 0:
            fitted["no_dispatch"] = TransferredCascade(source, dispatch=False).fit(cal)
        preds.update({n: screening_predict(tr, rest) for n, tr in fitted.items()})
    out, pending = [], []
    prec = rest["precision"].astype(str).to_numpy()
    for t in targets:
        y = rest[t].to_numpy(float)
        fk = flops_fit(cal, t)(rest) if k >= 2 else None
        if k == 0 and zero_shot is not None and t in zero_shot.transfer_:
            p_zs = preds["zero_shot"][f"pred_{t}"].to_numpy(float)
            pending.append({"target": t, "k": 0, "pick": 0, "err": np.log(y / p_zs), "precision": prec, "y": y,
                            "pred": preds["zero_shot"], "model": zero_shot, "loo": [], "name": "zero_shot"})
        if "calibrated" in fitted and t in fitted["calibrated"].transfer_:
            p_cal = preds["calibrated"][f"pred_{t}"].to_numpy(float)
            pending.append({"target": t, "k": k, "pick": pick, "err": np.log(y / p_cal), "precision": prec, "y": y,
                            "pred": preds["calibrated"], "model": fitted["calibrated"],
                            "loo": fitted["calibrated"].transfer_[t].get("loo", []), "name": "calibrated",
                            "loo_precision": fitted["calibrated"].transfer_[t].get("loo_precision")})
        for p_name in sorted(set(prec)):
            m = (prec == p_name) & np.isfinite(y)
            if m.sum() < 3:
                continue
            models = {n: f[f"pred_{t}"].to_numpy(float) for n, f in preds.items()}
            if fk is not None:
                models["flops_k"] = fk
            for n, p in models.items():
                rec = {"target": t, "precision": p_name, "model": n, "k": k, "pick": pick, "n": int(m.sum()),
                       **{c: v for c, v in _scores(y[m], p[m]).items() if c in ("mape_pct", "spearman")}}
                if n in ivs and f"lo_{t}" in ivs[n]:
                    rec.update(_coverage(ivs[n], t, y, m))
                out.append(rec)
    return out, pending


def _coverage(iv: pd.DataFrame, t: str, y: np.ndarray, m: np.ndarray, suffix: str = "") -> dict[str, float]:
    """Share of rows ``m`` of ``y`` inside ``iv``'s interval of ``t`` and its median hi/lo."""
    lo, hi = iv[f"lo_{t}"].to_numpy(float)[m], iv[f"hi_{t}"].to_numpy(float)[m]
    return {f"coverage{suffix}": float(np.mean((lo <= y[m]) & (y[m] <= hi))),
            f"width{suffix}": float(np.median(hi / np.maximum(lo, 1e-12)))}


#: ``--prior-rows``: pseudo-rows of the transfer-error prior (None: the model's default).
PRIOR_ROWS: list[float | None] = [None]


#: The device-level band's rules every interval of this run uses (:func:`interval_rules`; None: the defaults).
RULES: list = [None]
#: ``--level-noise``: overrides ``transfer.level_noise`` (None: the conf's).
LEVEL_NOISE: list[str | None] = [None]


def interval_rules() -> None:
    """The device-level band's rules from ``transfer`` of ``conf/calibrate.yaml`` (``device_widen``,
    ``unmeasured_floor``, ``level_by_precision``, ``zero_shot_target_out``:
    :func:`carb.model.transfer_prior.configure`), as carb-calibrate reads them, kept in :data:`RULES`."""
    from omegaconf import OmegaConf

    from carb.model import transfer_prior

    t = OmegaConf.load(ROOT / "conf" / "calibrate.yaml").transfer
    RULES[0] = transfer_prior.configure(t.get("device_widen"), t.get("unmeasured_floor"), t.get("level_by_precision"),
                                        t.get("zero_shot_target_out"), t.get("target_out_fallback"),
                                        LEVEL_NOISE[0] or t.get("level_noise"))


def repeat_floor(target: str, rows: pd.DataFrame | None = None) -> float | dict[str, float]:
    """The repeatability floor of ``target``'s intervals as a log standard deviation: for latency, per precision
    the target device's measured run-to-run spread (``rows``: :func:`measured_repeat_rows`;
    :func:`carb.data.repeatability.floor_log_sd`) with ``default`` the configured floor for a precision not
    measured; else ``transfer.repeatability_floor`` of ``conf/calibrate.yaml`` (one number)."""
    from omegaconf import OmegaConf

    from carb.data.repeatability import floor_log_sd

    floor = OmegaConf.load(ROOT / "conf" / "calibrate.yaml").transfer.get("repeatability_floor") or {}
    default = float(floor.get(target, floor.get("default", 0.0))) if hasattr(floor, "get") else float(floor)
    measured = floor_log_sd(rows) if target == "latency_ms" and rows is not None and len(rows) else {}
    return {**measured, "default": default} if measured else default


def _noise_of(record: dict, cache: dict) -> float | dict[str, float]:
    """The run-to-run noise (log sd, per precision where measured: :func:`repeat_floor`) of the rows a pending
    ``record`` was scored on, its target device's; ``cache`` keyed by (target, device)."""
    key = (record["target"], record.get("target_device"))
    if key not in cache:
        cache[key] = repeat_floor(record["target"], record.get("repeat_rows"))
    return cache[key]


def set_prior_intervals(table: pd.DataFrame, pending: list[dict], kind: str) -> pd.DataFrame:
    """The shipped carb-calibrate prior's intervals (issue 29; what ``--interval-sweep`` and ``--precision-sweep``
    tune, :mod:`carb.model.transfer_prior`'s table): coverage and width of each pair's calibrated model (``table``'s rows of model ``calibrated``), its
    interval from the transfer errors of the other pairs of this ``kind`` (leave-one-pair-out: pairs into
    the same target device left out too) combined with its own K rows' leave-one-out residuals
    (:mod:`carb.model.transfer_prior`), beside the K rows' residuals alone (``coverage_loo``, ``width_loo``)."""
    from carb.model.intervals import interval
    from carb.model.transfer_prior import error_table

    table = table.copy()
    for q in pending:
        others = [r for r in pending if not {r["source"], r["target_device"]} & {q["source"], q["target_device"]}
                  and r["k"] == q["k"] and r["target"] == q["target"]
                  and r.get("pick", 0) == q.get("pick", 0)]   # leave-one-device-out, within one pick
        prior = error_table([{**r, "kind": kind, "pair": (r["source"], r["target_device"])} for r in others])
        tr = q["model"]
        tr.device_kind_ = kind
        if PRIOR_ROWS[0] is not None:
            tr.prior_rows = PRIOR_ROWS[0]
        ivs = {suffix: interval(tr.recalibrate(tab).intervals_, q["pred"], precision=q["precision"])
               for suffix, tab in (("_loo", None), ("", prior))}
        at = ((table.source == q["source"]) & (table.target_device == q["target_device"]) & (table.k == q["k"])
              & (table.target == q["target"]) & (table.model == "calibrated")
              & ((table.pick if "pick" in table else 0) == q.get("pick", 0)))
        for i in table.index[at]:
            m = (q["precision"] == table.at[i, "precision"]) & np.isfinite(q["y"])
            for suffix, iv in ivs.items():
                if f"lo_{q['target']}" in iv:
                    for c, v in _coverage(iv, q["target"], q["y"], m, suffix).items():
                        table.at[i, c] = v
    return table


def set_intervals(table: pd.DataFrame, pending: list[dict], kind: str | None = None) -> pd.DataFrame:
    """Coverage and width of each pair's interval (``table``'s rows of model ``calibrated`` at K > 0,
    ``zero_shot`` at K = 0): the device-level band (:func:`carb.model.transfer_prior.device_level_band`) of
    the held-out errors of the pairs of the same device class (cpu / gpu) that involve neither of its devices
    (leave-one-device-out): at K > 0 scale-free (each pair's errors over its K rows' leave-one-out scale,
    times this pair's), at K = 0 in log units. Where no such pair exists (a CPU pair among three CPUs), no
    other class's errors are borrowed: at K > 0 the K rows' leave-one-out residuals alone (this device's own
    out-of-sample errors), at K = 0 no interval (``coverage`` NaN; ``coverage_borrowed``: what the other
    class's band would have covered, for comparison only); at K > 0 the pairs without the target device are
    tried first (``target_out``: :meth:`~carb.model.transfer.TransferredCascade.set_device_band`). Never
    narrower than the repeatability floor
    (:func:`repeat_floor`, per precision where measured). Beside it at K > 0: the K rows' residuals alone
    (``coverage_loo``, ``width_loo``). ``n_devices``: the devices of its class the band was measured on.
    ``kind``: only that kind's pairs are scored (None: all), and the kind of a record that names none."""
    from carb.model.intervals import interval
    from carb.model.transfer_prior import lodo_records, row_scale, target_out_records, zero_shot_target_out_band

    table = table.copy()
    if "pick" not in table.columns:
        table["pick"] = 0
    floors: dict = {}
    recs = [{"pair": (r["source"], r["target_device"]), "err": r["err"], "precision": r["precision"], "k": r["k"],
             "target": r["target"], "kind": r.get("kind") or kind, "scale": row_scale(r["loo"], r.get("loo_precision")),
             "loo": r["loo"], "pick": r.get("pick", 0), "noise": _noise_of(r, floors)}
            for r in pending]
    for q, own in zip(pending, recs):
        if kind is not None and q.get("kind", kind) != kind:
            continue
        same = [r for r in recs if r["k"] == q["k"] and r["target"] == q["target"] and r["pick"] == own["pick"]]
        others = lodo_records(same, own["pair"])
        tr = q["model"]
        if q["k"] == 0:
            saved = copy.copy(tr.intervals_)
        floor = repeat_floor(q["target"], q.get("repeat_rows"))
        entry = tr.set_device_band(q["target"], others, floor, scaled=q["k"] > 0, kind=own["kind"],
                                   target_out=target_out_records(same, own["pair"]), rules=RULES[0])
        ivs = {"": interval(tr.intervals_, q["pred"], precision=q["precision"])} if entry else {}
        if q["k"] > 0:
            ivs["_loo"] = interval(tr.recalibrate(None).intervals_, q["pred"], precision=q["precision"])
            if entry:
                tr.intervals_[q["target"]] = entry
        else:
            none_of_class = entry is None and bool(own["kind"])
            if none_of_class:   # no pair of its class avoids both devices (three CPUs)
                entry = zero_shot_target_out_band(target_out_records(same, own["pair"]), tr.coverage, own["kind"],
                                                  floor, RULES[0])
                if entry is not None:   # what carb-calibrate k=0 ships for a new CPU, measured without the target
                    tr.intervals_ = {**dict(tr.intervals_ or {}), q["target"]: entry}
                    ivs[""] = interval(tr.intervals_, q["pred"], precision=q["precision"])
                    tr.intervals_ = copy.copy(saved)
            if none_of_class:   # the other class's band, for comparison only
                other = next((r["kind"] for r in others if r["kind"] != own["kind"]), None)
                if other and tr.set_device_band(q["target"], others, floor, scaled=False, kind=other, rules=RULES[0]):
                    ivs["_borrowed"] = interval(tr.intervals_, q["pred"], precision=q["precision"])
            tr.intervals_ = saved   # the zero-shot model is shared by every K of the pair
        at = ((table.source == q["source"]) & (table.target_device == q["target_device"]) & (table.k == q["k"])
              & (table.target == q["target"]) & (table.model == q.get("name", "calibrated"))
              & (table.pick == q.get("pick", 0)))
        for i in table.index[at]:
            m = (q["precision"] == table.at[i, "precision"]) & np.isfinite(q["y"])
            table.at[i, "n_devices"] = entry.get("n_devices", 0) if entry else 0
            for suffix, iv in ivs.items():
                if f"lo_{q['target']}" in iv:
                    for c, v in _coverage(iv, q["target"], q["y"], m, suffix).items():
                        table.at[i, c] = v
                    inside = _coverage(iv, q["target"], q["y"], m, suffix)[f"coverage{suffix}"] * int(m.sum())
                    table.at[i, f"inside{suffix}"] = inside
    return table


#: ``--extra-session DATASET=PROBE`` (issue 44, k44d): further measuring sessions of a benchmark CPU, each its rows
#: (a CARB dataset) and the device probe measured in the same session (a probe table): sources only, never a target
#: nor a pair's source. ``--pool-sessions`` says how: ``False``, each session is one more source of the multi-source
#: base of every target that is not its device (:func:`multi_source_models`); ``True``, its rows are moved by its own
#: probe to the level of its device's shipped probe (:func:`session_rows_moved`) and pooled with that device's rows
#: into one source model (:func:`pair_table`).
EXTRA_SESSIONS: list[tuple[str, str]] = []
POOL_SESSIONS: list[bool] = [False]


def load_sessions() -> list[dict]:
    """The sessions of :data:`EXTRA_SESSIONS`: per session its ``name`` (the file's stem), ok ``rows``, ``probe``
    (conv_regular rows of its device id in the probe file), ``device_id`` and ``fingerprint``."""
    from carb.data.io import load_dataset
    from carb.data.probes import load_probe
    from carb.data.schema import ok_rows

    out = []
    for data, probe in EXTRA_SESSIONS:
        rows = ok_rows(load_dataset(data)).reset_index(drop=True)
        name, dev_id, fp = _identity(rows)
        pr = load_probe(str(dev_id), paths=[Path(probe)])
        if pr is None:
            print(f"--extra-session: the probe {probe} has no rows of the dataset's device {dev_id}", file=sys.stderr)
            raise SystemExit(2)
        out.append({"name": Path(data).stem, "rows": rows, "probe": pr, "device_id": str(dev_id), "fingerprint": fp})
    return out


def session_rows_moved(session: dict, model, level_probe: pd.DataFrame) -> pd.DataFrame:
    """A session's rows with their latency moved by the probes' ratio (``TransferredCascade.probe_ratio``: the
    network's convolution time replaced, the rest scaled by the fp32 convolution ratio) from the session's own
    probe to ``level_probe`` (the same device's probe of another session), the measured latency standing in for
    the source's prediction; ``model``: a source model of the session's rows (its fingerprint for dispatch)."""
    from carb.model.transfer import TransferredCascade

    rows = session["rows"].copy()
    tr = TransferredCascade(model).fit_probe(session["probe"], level_probe, session["fingerprint"], "level",
                                              session["device_id"])
    y = rows["latency_ms"].to_numpy(float)
    rows["latency_ms"] = y * tr.probe_ratio(rows, y)
    return rows


def session_zero_shots(sessions: list[dict], devices: dict[str, pd.DataFrame]) -> dict[str, list]:
    """Per target device of ``devices``: the probe zero-shots (``fit_probe``) into it from every session of
    ``sessions`` (each with its fitted ``model``) whose device is not the target's (leave-one-device-out: a
    session of the target's CPU is never a source of it)."""
    from carb.data.probes import load_probe
    from carb.model.transfer import TransferredCascade

    out = {}
    for d, rows in devices.items():
        name, dev_id, fp = _identity(rows)
        probe = load_probe(str(dev_id))
        out[d] = [TransferredCascade(s["model"], precision_shrink_single=configured_single_shrink(),
                                     source_weighting=configured_source_weighting(),
                                     offset_weighting=configured_offset_weighting()).fit_probe(
            s["probe"], probe, fp, name, dev_id) for s in sessions if s["device_id"] != str(dev_id)]
    return out


def pair_table(devices: dict[str, pd.DataFrame], ks: list[int], targets: list[str], cpu: bool
               ) -> tuple[pd.DataFrame, list[dict]]:
    """Every ordered pair of ``devices``: :func:`score_pair` records with ``source`` and ``target_device``
    (intervals by :func:`set_intervals`), and each pair's calibrated held-out errors (records of
    :func:`carb.model.transfer_prior.error_table`)."""
    from scripts.bench.transfer import fit_source

    t0 = time.perf_counter()
    models = {}
    for i, (name, d) in enumerate(devices.items()):
        use = [t for t in targets if t in d and np.isfinite(d[t].to_numpy(float)).any()]
        models[name] = fit_cpu_source(d, use) if cpu else fit_source(d, use)
        print(f"  fitted {name} ({len(d)} rows) [{i + 1}/{len(devices)}, {time.perf_counter() - t0:.0f} s]",
              flush=True)
    sessions = load_sessions() if cpu and EXTRA_SESSIONS else []
    for s in sessions:
        use = [t for t in targets if t in s["rows"] and np.isfinite(s["rows"][t].to_numpy(float)).any()]
        s["model"] = fit_cpu_source(s["rows"], use)
        own = [n for n, d in devices.items() if str(_identity(d)[1]) == s["device_id"]]
        if POOL_SESSIONS[0] and own:
            from carb.data.probes import load_probe

            moved = session_rows_moved(s, s["model"], load_probe(s["device_id"]))
            pooled = pd.concat([devices[own[0]], moved], ignore_index=True)
            models[own[0]] = fit_cpu_source(pooled, use)
            print(f"  session {s['name']} ({len(moved)} rows) moved by its probe and pooled into {own[0]}'s source "
                  f"({len(pooled)} rows)", flush=True)
        else:
            print(f"  session {s['name']} ({len(s['rows'])} rows, its own probe) fitted as an extra source", flush=True)
    extra = session_zero_shots(sessions, devices) if sessions and not POOL_SESSIONS[0] else {}
    single = {}
    if cpu:
        zs = zero_shot_models(models, devices)
        if not SINGLE_SOURCE[0]:
            single, zs = zs, multi_source_models(zs, devices, extra)
    else:
        zs, w = spec_zero_shot_models(models, devices)
        print("  zero-shot spec weights, leaving each target device out:\n" + w.round(3).to_string(), flush=True)
    out, pending = [], []
    n_picks = pick_settings()["picks"]
    for src, m in models.items():
        for dst, rows in devices.items():
            if src == dst:
                continue
            if "model" in rows.columns and "model" in devices[src].columns:
                rows = rows[rows["model"].isin(set(devices[src]["model"]))].reset_index(drop=True)
            use = [t for t in targets if t in rows and np.isfinite(rows[t].to_numpy(float)).any()
                   and t in getattr(m, "targets_", [])]
            for k in ks:
                if k >= len(rows):
                    continue
                for pick in range(n_picks if k > 0 else 1):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        recs, pend = score_pair(m, rows, k, use, cpu, zs.get((src, dst)), single.get((src, dst)),
                                                pick)
                    out += [{"source": src, "target_device": dst, **r} for r in recs]
                    pending += [{"source": src, "target_device": dst, **q} for q in pend]
    kind = "cpu" if cpu else "gpu"
    ids = {n: (_identity(d)[1] or n) for n, d in devices.items()}
    reps = {n: measured_repeat_rows(d) for n, d in devices.items()}
    for n, r in reps.items():
        if r is not None:
            fl = repeat_floor("latency_ms", r)
            per = ", ".join(f"{p} {v:.3f}" for p, v in fl.items()) if isinstance(fl, dict) else f"{fl:.3f}"
            print(f"  {n}: latency repeatability floor from {len(r)} measured rows, log sd per precision: {per}",
                  flush=True)
    return pd.DataFrame(out), [{**q, "kind": kind, "pair": (q["source"], q["target_device"]),
                                "source_id": ids[q["source"]], "target_id": ids[q["target_device"]],
                                "repeat_rows": reps[q["target_device"]]} for q in pending]


def interval_sweep(parts: list, k: int = 10, stats: tuple[str, ...] = ("median", "mean", "rms"),
                   prior_rows: tuple[float, ...] = (0, 10, 30, 100)) -> pd.Series:
    """The interval settings (LOO statistic x prior pseudo-rows) chosen fully nested leave-one-pair-out: for
    each held-out pair P, every other pair's K-row latency interval is rebuilt (:func:`set_intervals`) from
    priors that never hold P's errors, and P's choice is the option whose pooled coverage (rows of a pair
    pooled over precisions) over the other pairs is nearest 0.90 on average. ``parts``: :func:`pair_table`
    results. Returns the choices' counts (``--interval-sweep``; a few minutes)."""
    from carb.model import transfer_prior

    saved = transfer_prior.LOO_STAT, PRIOR_ROWS[0]
    every = [q["pair"] for _, pend in parts for q in pend if q["k"] == k]
    models = [(q["model"], q["model"].prior_rows) for _, pend in parts for q in pend]   # set_intervals sets them
    records = []
    try:
        for stat in stats:
            for rows_ in prior_rows:
                transfer_prior.LOO_STAT, PRIOR_ROWS[0] = stat, rows_
                for (table, pend), kind in zip(parts, ("cpu", "gpu")):
                    pend = [q for q in pend if q["k"] == k and q["target"] == "latency_ms"]
                    for held in dict.fromkeys(every):
                        keep = [q for q in pend if q["pair"] != held]
                        if not keep:
                            continue
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            t = set_prior_intervals(table[table.k == k], keep, kind)
                        c = t[(t.model == "calibrated") & (t.target == "latency_ms") & t["coverage"].notna()]
                        per = c.assign(i=c["coverage"] * c["n"]).groupby(["source", "target_device"])[["i", "n"]].sum()
                        records += [{"option": f"{stat}/{rows_:g}", "held": held, "cv": r.i / r.n}
                                    for pair, r in per.iterrows() if pair != held]
    finally:
        transfer_prior.LOO_STAT, PRIOR_ROWS[0] = saved
        for tr, rows_ in models:
            tr.prior_rows = rows_
    r = pd.DataFrame(records)
    choice = {h: g.groupby("option")["cv"].apply(lambda v: float(np.mean(np.abs(v - 0.9)))).idxmin()
              for h, g in r.groupby("held")}
    return pd.Series(choice).value_counts()


def _cell_score(t: pd.DataFrame, held: tuple) -> float:
    """Mean ``|coverage - 0.90|`` over the pair-and-precision latency cells of ``calibrated`` in ``t`` (one K),
    the cells of pair ``held`` left out."""
    c = t[(t.model == "calibrated") & (t.target == "latency_ms") & t["coverage"].notna()]
    c = c[[(s, d) != held for s, d in zip(c.source, c.target_device)]]
    return float(np.mean(np.abs(c["coverage"] - 0.9)))


def precision_sweep(parts: list, k: int = 10) -> dict[str, pd.Series]:
    """The precision band (:data:`carb.model.transfer_prior.PRECISION_BANDS`) chosen leave-one-pair-out: for
    each held-out pair P, the band whose pair-and-precision cells of the other pairs lie nearest 0.90 (mean
    ``|coverage - 0.90|``, :func:`_cell_score`). Two schemes: ``pair_out`` scores the other pairs with their
    intervals as the benchmark sets them (their priors may hold P's errors, P's rows are never scored);
    ``nested`` rebuilds every other pair's interval from priors without P (as :func:`interval_sweep`; with two
    CPU pairs the other CPU pair then has no prior, and the GPU pairs have one precision, so the bands tie
    there). Returns per scheme the choices' counts, ``tie`` where the bands score the same."""
    from carb.model import transfer_prior

    saved = transfer_prior.PRECISION_BAND
    every = list(dict.fromkeys(q["pair"] for _, pend in parts for q in pend if q["k"] == k))
    scores: dict[str, dict] = {"pair_out": {}, "nested": {}}
    try:
        for band in transfer_prior.PRECISION_BANDS:
            transfer_prior.PRECISION_BAND = band
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                full = pd.concat([set_prior_intervals(table[table.k == k], [q for q in pend if q["k"] == k], kind)
                                  for (table, pend), kind in zip(parts, ("cpu", "gpu"))], ignore_index=True)
                for held in every:
                    scores["pair_out"].setdefault(held, {})[band] = _cell_score(full, held)
                    nested = pd.concat([set_prior_intervals(table[table.k == k], [q for q in pend if q["k"] == k
                                                                          and q["pair"] != held], kind)
                                        for (table, pend), kind in zip(parts, ("cpu", "gpu"))], ignore_index=True)
                    scores["nested"].setdefault(held, {})[band] = _cell_score(nested, held)
    finally:
        transfer_prior.PRECISION_BAND = saved
    out = {}
    for scheme, per in scores.items():
        picks = [("tie" if abs(max(v.values()) - min(v.values())) < 1e-12 else min(v, key=v.get)) for v in per.values()]
        out[scheme] = pd.Series(picks).value_counts()
    return out


def k0_offset_line(pending: list[dict]) -> str:
    """A study beside the headline (not what carb-calibrate does yet): the K = 0 zero-shot latency MAPE (worst
    pair and precision, CPU pairs with device probes) with :func:`carb.model.transfer_prior.probe_offset_correction`
    applied: per precision, the target's offset from its probe taken as the mean of the other devices', from the
    zero-shot biases of the pairs without the target device (the Xeon runs networks ~15 % slower than its probe
    implies and, as a source, made Xeon -> Zen 5 fp32 err 21.5 %). ``k0_offset: max_mape=X (was Y) worst=...``."""
    from carb.model.transfer_prior import probe_offset_correction

    zs = [q for q in pending if q["k"] == 0 and q.get("name") == "zero_shot" and q["target"] == "latency_ms"
          and q.get("kind", "cpu") == "cpu"]
    if not zs:
        return "k0_offset: no zero-shot pairs"
    biases: dict[str, dict] = {}
    for q in zs:
        err, prec = np.asarray(q["err"], float), np.asarray(q["precision"]).astype(str)
        for p in np.unique(prec):
            m = (prec == p) & np.isfinite(err)
            if m.sum() >= 3:
                biases.setdefault(p, {})[q["pair"]] = float(np.median(err[m]))
    cells = []
    for q in zs:
        err, prec = np.asarray(q["err"], float), np.asarray(q["precision"]).astype(str)
        for p in np.unique(prec):
            m = (prec == p) & np.isfinite(err)
            if m.sum() < 3:
                continue
            c = probe_offset_correction(biases.get(p, {}), *map(str, q["pair"]))
            old, new = (100 * float(np.mean(np.abs(np.exp(-e) - 1))) for e in (err[m], err[m] - c))
            cells.append((new, old, f"{q['pair'][0]} -> {q['pair'][1]} {p}"))
    new_max, old_max = max(cells)[0], max(c[1] for c in cells)
    return (f"k0_offset: max_mape={new_max:.1f} (was {old_max:.1f}) worst={max(cells)[2]} cells={len(cells)} "
            f"better={sum(n < o for n, o, _ in cells)}")


#: Row features a transfer's error could trend with (issue 44's K-row slope idea), each a log of a dataset column
#: or of a ratio of two: ``{name: (numerator, denominator or None)}``.
ERROR_FEATURES = {"log_flops": ("flops", None), "log_flops_per_image": ("flops", "batch_size"),
                  "log_batch": ("batch_size", None), "log_intensity": ("compute_intensity", None),
                  "log_activation_MB": ("total_activation_MB", None), "log_params": ("params", None)}


def _mape_of(err: np.ndarray) -> float:
    """Latency MAPE (%) of log errors ``err`` = log(measured / predicted): mean |predicted / measured - 1|."""
    return 100.0 * float(np.mean(np.abs(np.exp(-np.asarray(err, float)) - 1.0)))


def noise_mape(sd: float) -> float:
    """The MAPE (%) a perfect predictor of a row's mean still shows against one measurement whose log has
    run-to-run standard deviation ``sd``: E|exp(-sd Z) - 1|, Z standard normal (Gauss-Hermite, 40 nodes)."""
    z, w = np.polynomial.hermite_e.hermegauss(40)
    return 100.0 * float(np.sum(w * np.abs(np.exp(-float(sd) * z) - 1.0)) / np.sum(w))


def _feature_matrix(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """:data:`ERROR_FEATURES` of ``rows`` that the frame has and that are finite and positive, each (n,)."""
    out = {}
    for name, (num, den) in ERROR_FEATURES.items():
        if num not in rows or (den is not None and den not in rows):
            continue
        v = pd.to_numeric(rows[num], errors="coerce").to_numpy(float)
        if den is not None:
            v = v / pd.to_numeric(rows[den], errors="coerce").to_numpy(float)
        with np.errstate(all="ignore"):
            v = np.log(v)
        if np.isfinite(v).all():
            out[name] = v
    return out


def error_sources(pending: list[dict], rows: dict[str, pd.DataFrame], k: int = 10,
                  noise: dict[str, dict[str, float]] | None = None,
                  own_cv: dict[str, dict[str, float]] | None = None) -> pd.DataFrame:
    """Where a K-row transfer's latency error lives, per CPU pair and precision, on the pair's held-out rows at
    ``k`` (issue 44). ``pending``: the benchmark's records (the pair's zero-shot errors over all of the target's
    ``rows[target]`` at K = 0, its calibrated errors on the rows :func:`carb.analysis.transfer.split_k` holds
    out at ``k``); ``noise``: per target device and precision the log sd of one measurement (its run-to-run
    spread); ``own_cv``: per target device and precision the MAPE (%) of a cascade fitted on the target's own
    rows, cross-validated (what the model class reaches with all of the target's rows).

    Columns (MAPE %): ``k0`` the zero-shot, ``k`` the calibrated transfer, ``offset_oracle`` the zero-shot with
    its precision's offset known exactly (the mean log error of these rows: what K rows estimate),
    ``trend_oracle`` / ``trend_feature`` beside it the best single :data:`ERROR_FEATURES` slope known exactly
    (least squares on these rows: the most a K-row slope could win), ``offset_oracle_seen`` / ``_unseen`` the
    exact-offset error on the rows whose configuration the source device measured (``n_seen``: its model was
    fitted on them) and on the others (where the source model's own generalisation error shows), ``noise``
    :func:`noise_mape` of the target's spread, ``noise_share`` its variance over the calibrated log errors' mean square (capped at 1), ``own_cv``."""
    from carb.analysis.transfer import split_k

    lat = [q for q in pending if q["target"] == "latency_ms" and q.get("kind", "cpu") == "cpu"]
    zs = {q["pair"]: q for q in lat if q["k"] == 0 and q.get("name") == "zero_shot"}
    out = []
    for q in lat:
        if q["k"] != k or q.get("name") != "calibrated" or q["pair"] not in zs:
            continue
        src, dst = map(str, q["pair"])
        frame = rows[dst].reset_index(drop=True)
        rest = split_k(frame, k)[1].index.to_numpy()
        e0 = np.asarray(zs[q["pair"]]["err"], float)[rest]
        ek, prec = np.asarray(q["err"], float), np.asarray(q["precision"]).astype(str)
        feats = {n: v[rest] for n, v in _feature_matrix(frame).items()}
        have = set(rows[src]["config_id"].astype(str)) if src in rows and "config_id" in rows[src] else set()
        seen = frame["config_id"].astype(str).isin(have).to_numpy()[rest] if "config_id" in frame else \
            np.zeros(len(rest), bool)
        for p in sorted(set(prec)):
            m = (prec == p) & np.isfinite(ek) & np.isfinite(e0)
            if m.sum() < 3:
                continue
            r = e0[m] - e0[m].mean()
            best, best_name = _mape_of(r), None
            for name, v in feats.items():
                x = v[m] - v[m].mean()
                if float(x @ x) > 1e-12:
                    cand = _mape_of(r - x * float(x @ r) / float(x @ x))
                    if cand < best:
                        best, best_name = cand, name
            seen_mask = seen[m]
            sd = (noise or {}).get(dst, {}).get(p, float("nan"))
            out.append({"source": src, "target_device": dst, "precision": p, "n": int(m.sum()),
                        "k0": _mape_of(e0[m]), "k": _mape_of(ek[m]), "offset_oracle": _mape_of(r),
                        "trend_oracle": best, "trend_feature": best_name,
                        "n_seen": int(seen_mask.sum()),
                        "offset_oracle_seen": _mape_of(r[seen_mask]) if seen_mask.sum() >= 3 else float("nan"),
                        "offset_oracle_unseen": _mape_of(r[~seen_mask]) if (~seen_mask).sum() >= 3 else float("nan"),
                        "noise": noise_mape(sd) if np.isfinite(sd) else float("nan"),
                        "noise_share": min(1.0, sd ** 2 / float(np.mean(ek[m] ** 2))) if np.isfinite(sd)
                        else float("nan"),
                        "own_cv": (own_cv or {}).get(dst, {}).get(p, float("nan"))})
    return pd.DataFrame(out)


def own_cv_mape(rows: pd.DataFrame, folds: int = 5, seed: int = 0) -> dict[str, float]:
    """Per precision, the latency MAPE (%) of the benchmark's source cascade fitted on ``folds`` - 1 folds of a
    device's own ``rows`` and scored on the last (random folds, ``seed``): the error left with all of the
    device's rows, i.e. the target's noise plus what the model class cannot express (a floor for a transfer)."""
    from carb.model.intervals import screening_predict
    from scripts.bench.transfer import fit_source

    rows = rows.reset_index(drop=True)
    fold = np.random.default_rng(seed).integers(0, folds, len(rows))
    err = np.full(len(rows), np.nan)
    for f in range(folds):
        te = rows[fold == f]
        if len(te):
            m = fit_source(rows[fold != f], ["latency_ms"])
            err[fold == f] = np.log(te["latency_ms"].to_numpy(float)
                                    / screening_predict(m, te)["pred_latency_ms"].to_numpy(float))
    prec = rows["precision"].astype(str).to_numpy()
    return {p: _mape_of(err[(prec == p) & np.isfinite(err)]) for p in sorted(set(prec))}


def error_sources_line(d: pd.DataFrame) -> str:
    """One line of :func:`error_sources`: the worst calibrated cell, what an exact offset and an exact slope
    would leave there, and how many cells the run-to-run noise or the own-rows floor already explains."""
    if d.empty:
        return "error_sources: no CPU pair with a zero-shot and calibrated rows"
    w = d.loc[d["k"].idxmax()]
    floor = np.fmax(d["noise"].fillna(0.0), d["own_cv"].fillna(0.0))
    return (f"error_sources: cells={len(d)} k_max={w['k']:.1f} ({w['source']} -> {w['target_device']} "
            f"{w['precision']}: offset_oracle={w['offset_oracle']:.1f} trend_oracle={w['trend_oracle']:.1f} "
            f"own_cv={w['own_cv']:.1f}) offset_oracle_max={d['offset_oracle'].max():.1f} "
            f"trend_oracle_max={d['trend_oracle'].max():.1f} cells_within_1.2x_floor={int((d['k'] <= 1.2 * floor).sum())}")


def coverage_cells_line(t: pd.DataFrame, k: int = 10, nominal: float = 0.9, alpha: float = 0.05) -> str:
    """The pair-and-precision latency cells of ``calibrated`` at ``k`` whose coverage is inconsistent with the
    ``nominal`` coverage by an exact two-sided binomial test at ``alpha`` (rows inside of the cell's held-out
    rows; rows taken as independent): ``coverage_cells: n=N inconsistent=M (pair precision inside/rows p=..;
    ...)``. A cell of 12 rows at 10/12 is consistent (p = 0.64); one of 89 rows at 72/89 is not."""
    from scipy.stats import binomtest

    c = t[(t["target"] == "latency_ms") & (t.k == k) & (t.model == "calibrated") & t["coverage"].notna()]
    bad = []
    for r in c.itertuples():
        inside = int(round(r.coverage * r.n))
        p = binomtest(inside, int(r.n), nominal).pvalue
        if p < alpha:
            bad.append(f"{r.source} -> {r.target_device} {r.precision} {inside}/{int(r.n)} p={p:.2g}")
    return f"coverage_cells: n={len(c)} inconsistent={len(bad)}" + (f" ({'; '.join(bad)})" if bad else "")


def product(lat: pd.DataFrame, k: int, preferred: str, fallback: str) -> pd.DataFrame:
    """The rows of what CARB answers at ``k`` for each pair: model ``preferred`` where the pair has it
    (zero-shot at K = 0, the probes' calibration at K > 0), else ``fallback``."""
    at = lat[lat.k == k]
    has = set(map(tuple, at[at.model == preferred][["source", "target_device"]].to_numpy()))
    pick = [(preferred if (r.source, r.target_device) in has else fallback) == r.model for r in at.itertuples()]
    return at[pick]


def quickstart_k() -> int:
    """The quickstart's default K (``k`` of ``conf/calibrate.yaml``)."""
    from omegaconf import OmegaConf

    return int(OmegaConf.load(ROOT / "conf" / "calibrate.yaml").k)


def worst_cell_range(frame: pd.DataFrame) -> str:
    """The K-row picks' spread of ``frame``'s worst cell (the row of largest mean ``mape_pct``): ``"min-max"`` of
    its MAPE over the picks (:func:`average_picks`), ``"n/a"`` without picks or rows."""
    if frame.empty or "mape_pct_min" not in frame or frame["mape_pct"].isna().all():
        return "n/a"
    r = frame.loc[frame["mape_pct"].idxmax()]
    return f"{r['mape_pct_min']:.1f}-{r['mape_pct_max']:.1f}"


def pick_coverage_range(t: pd.DataFrame, model: str = "calibrated", k: int = 10) -> pd.DataFrame:
    """Per left-out target device and target (latency, memory): min and max over the K-row picks of the coverage
    pooled over the device's held-out rows (``coverage_pick<i>`` of :func:`average_picks`); empty without them."""
    cols = [c for c in t.columns if c.startswith("coverage_pick")]
    f = t[(t.k == k) & (t.model == model)]
    if not cols or f.empty:
        return pd.DataFrame(columns=["target_device", "target", "coverage_pick_min", "coverage_pick_max"])
    per = []
    for c in cols:
        ok = f[f[c].notna()]
        g = ok.assign(inside=ok[c] * ok["n"]).groupby(["target_device", "target"])[["inside", "n"]].sum()
        per.append(g["inside"] / g["n"])
    both = pd.concat(per, axis=1)
    return pd.DataFrame({"coverage_pick_min": both.min(axis=1), "coverage_pick_max": both.max(axis=1)}).reset_index()


def device_table(t: pd.DataFrame, kq: int | None = None) -> pd.DataFrame:
    """One row per left-out target device (every pair into it, each with that device left out of every
    prior): latency MAPE % (worst source and precision) at K = 0 (CARB's answer, :func:`product`), at the
    quickstart's K and at K = 10 (``calibrated``); coverage of the 90 % intervals pooled over the device's
    held-out rows (latency and memory, K = 10; latency K = 0), the widest median hi/lo (K = 0 too), and the fewest
    devices a band was measured on (latency, memory). Figures at K > 0 are means over the K-row picks
    (:func:`average_picks`); beside them the spread: ``kq_range`` / ``k10_range`` (min-max over the picks of the
    worst cell, :func:`worst_cell_range`) and ``k10_coverage_range`` / ``k10_memory_coverage_range`` (min-max of
    the pooled coverage over the picks)."""
    kq = quickstart_k() if kq is None else kq
    lat, mem = t[t["target"] == "latency_ms"], t[t["target"] == "peak_memory_MB"]

    def pooled(frame: pd.DataFrame) -> pd.Series:
        f = frame[frame["coverage"].notna()] if "coverage" in frame else frame.iloc[:0]
        f = f.assign(inside=f["coverage"] * f["n"]) if "inside" not in f else f
        g = f.groupby("target_device")[["inside", "n"]].sum()
        return g["inside"] / g["n"]

    def pooled_borrowed(frame: pd.DataFrame) -> pd.Series:
        if "coverage_borrowed" not in frame:
            return pd.Series(dtype=float)
        f = frame[frame["coverage_borrowed"].notna()]
        g = f.assign(i=f["coverage_borrowed"] * f["n"]).groupby("target_device")[["i", "n"]].sum()
        return g["i"] / g["n"]

    k10 = lat[(lat.k == 10) & (lat.model == "calibrated")]
    out = pd.DataFrame({
        "pairs": lat.groupby("target_device")["source"].nunique(),
        "k0_mape_max": product(lat, 0, "zero_shot", "source").groupby("target_device")["mape_pct"].max(),
        "kq_mape_max": lat[(lat.k == kq) & (lat.model == "calibrated")].groupby("target_device")["mape_pct"].max(),
        "k10_mape_max": k10.groupby("target_device")["mape_pct"].max(),
        "k10_spearman_min": k10.groupby("target_device")["spearman"].min(),
        "k0_coverage": pooled(lat[(lat.k == 0) & (lat.model == "zero_shot")]),
        "k0_width_max": (lat[(lat.k == 0) & (lat.model == "zero_shot")].groupby("target_device")["width"].max()
                         if "width" in lat else np.nan),
        "k0_borrowed_coverage": pooled_borrowed(lat[(lat.k == 0) & (lat.model == "zero_shot")]),
        "k10_coverage": pooled(k10),
        "k10_memory_coverage": pooled(mem[(mem.k == 10) & (mem.model == "calibrated")]),
        "k10_width_max": k10.groupby("target_device")["width"].max() if "width" in k10 else np.nan,
        "k10_memory_width_max": (mem[(mem.k == 10) & (mem.model == "calibrated")].groupby("target_device")["width"].max()
                                 if "width" in mem else np.nan),
        "k0_band_devices_min": (lat[(lat.k == 0) & (lat.model == "zero_shot") & lat["coverage"].notna()].groupby(
            "target_device")["n_devices"].min() if {"n_devices", "coverage"} <= set(lat.columns) else np.nan),
        "band_devices_min": k10.groupby("target_device")["n_devices"].min() if "n_devices" in k10 else np.nan,
        "memory_band_devices_min": (mem[(mem.k == 10) & (mem.model == "calibrated")].groupby("target_device")[
            "n_devices"].min() if "n_devices" in mem else np.nan),
    })
    kqc = lat[(lat.k == kq) & (lat.model == "calibrated")]
    out.insert(out.columns.get_loc("kq_mape_max") + 1, "kq_range",
               pd.Series({d: worst_cell_range(f) for d, f in kqc.groupby("target_device")}, dtype=object))
    out.insert(out.columns.get_loc("k10_mape_max") + 1, "k10_range",
               pd.Series({d: worst_cell_range(f) for d, f in k10.groupby("target_device")}, dtype=object))
    cr = pick_coverage_range(t)
    for target, col in (("latency_ms", "k10_coverage"), ("peak_memory_MB", "k10_memory_coverage")):
        c = cr[cr.target == target].set_index("target_device")
        rng = {d: f"{r.coverage_pick_min:.2f}-{r.coverage_pick_max:.2f}" for d, r in c.iterrows()}
        out.insert(out.columns.get_loc(col) + 1, f"{col}_range", pd.Series(rng, dtype=object))
    return out.reset_index().rename(columns={"index": "target_device"})


def headline(t: pd.DataFrame, kq: int | None = None) -> str:
    """The machine-readable last line, as issue 44 names it (latency MAPE over ordered pairs and precisions;
    CARB's answer per pair: the zero-shot model at K = 0 where the pair has one, else the source
    (:func:`product`), the calibrated model at the quickstart's K and at K = 10; coverage and width of the
    K = 10 intervals per left-out target device, latency and memory, :func:`device_table`)."""
    kq = quickstart_k() if kq is None else kq
    lat = t[t["target"] == "latency_ms"]
    k0, k10 = product(lat, 0, "zero_shot", "source"), lat[(lat.k == 10) & (lat.model == "calibrated")]
    kqm = lat[(lat.k == kq) & (lat.model == "calibrated")]
    pairs = lat[["source", "target_device"]].drop_duplicates()
    d = device_table(t, kq)
    cov = pd.concat([d["k10_coverage"], d["k10_memory_coverage"]]).dropna()
    widths = pd.concat([d["k10_width_max"], d["k10_memory_width_max"]]).dropna()
    return (f"transfer: devices={len(d)} pairs={len(pairs)} k0_max_mape={k0['mape_pct'].max():.1f} "
            f"kq_max_mape={kqm['mape_pct'].max():.1f} k10_max_mape={k10['mape_pct'].max():.1f} "
            f"k10_min_spearman={k10['spearman'].min():.3f} lodo_coverage_min={cov.min():.2f} "
            f"lodo_coverage_max={cov.max():.2f} width_median_max={widths.max():.2f}"
            f"{picks_keys(kqm, k10)}")


def picks_keys(kqm: pd.DataFrame, k10: pd.DataFrame) -> str:
    """The headline's spread keys (:func:`average_picks`): `` picks=N kq_max_mape_range=a-b
    k10_max_mape_range=a-b`` (min-max over the K-row picks of the worst cell at the quickstart's K and at K = 10);
    empty for a table of one pick."""
    if "picks" not in k10 or k10.empty:
        return ""
    return (f" picks={int(k10['picks'].max())} kq_max_mape_range={worst_cell_range(kqm)} "
            f"k10_max_mape_range={worst_cell_range(k10)}")


def single_source_line(t: pd.DataFrame, kq: int | None = None) -> str:
    """The CPU pairs' latency MAPE maxima (pair and precision) of the multi-source base (CARB's answer) beside
    the single-source base (each pair's source alone: ``zero_shot_single`` / ``calibrated_single``), at K = 0,
    the quickstart's K and K = 10: ``single_source: k0 multi=X single=Y kq ... k10 ...``; empty without them."""
    kq = quickstart_k() if kq is None else kq
    lat = t[t["target"] == "latency_ms"]
    if not (lat.model == "calibrated_single").any():
        return "single_source: not scored (--single-source or no CPU pair with probes)"
    pairs = set(map(tuple, lat[lat.model.isin(["zero_shot_single", "calibrated_single"])][
        ["source", "target_device"]].to_numpy()))
    on = lat[[(a, b) in pairs for a, b in zip(lat.source, lat.target_device)]]
    parts = []
    for k, multi, one in ((0, "zero_shot", "zero_shot_single"), (kq, "calibrated", "calibrated_single"),
                          (10, "calibrated", "calibrated_single")):
        a, b = on[(on.k == k) & (on.model == multi)], on[(on.k == k) & (on.model == one)]
        if len(a) and len(b):
            parts.append(f"k{'q' if k == kq and k != 10 else k}_max_mape multi={a['mape_pct'].max():.1f} "
                         f"single={b['mape_pct'].max():.1f}")
    return "single_source (CPU pairs): " + "; ".join(parts)


def baselines_line(t: pd.DataFrame) -> str:
    """The baselines beside the headline: the uncalibrated source at K = 0, the transfer from the source's
    own prediction alone at K = 10 (latency MAPE maxima), the K = 10 intervals from the K rows alone, and how
    many pairs had a zero-shot model."""
    lat = t[t["target"] == "latency_ms"]
    src, sb = lat[(lat.k == 0) & (lat.model == "source")], lat[(lat.k == 10) & (lat.model == "source_base")]
    cal = lat[(lat.k == 10) & (lat.model == "calibrated")]
    n_zs = lat[lat.model == "zero_shot"][["source", "target_device"]].drop_duplicates().shape[0]
    return (f"baselines: k0_source_max_mape={src['mape_pct'].max():.1f} k10_source_base_max_mape="
            f"{sb['mape_pct'].max():.1f} k10_loo_only_coverage_min={cal['coverage_loo'].min():.2f} "
            f"k10_loo_only_width_median_max={cal['width_loo'].max():.2f} k0_zero_shot_pairs={n_zs}")


def pooled_coverage_line(t: pd.DataFrame, k: int = 10) -> str:
    """Latency coverage of the nominal 90 % intervals of ``calibrated`` at ``k``, pooled: per ordered pair the
    share of all its held-out rows inside (precisions pooled, row-weighted), then the mean over the pairs of
    each device kind and of all, each with its pairs and rows. An additional line beside the headline's
    per-pair-and-precision minimum (a GPU pair rests on 12 rows: one row is 0.083 of coverage), never a
    replacement for it."""
    c = t[(t["target"] == "latency_ms") & (t.k == k) & (t.model == "calibrated") & t["coverage"].notna()]
    per = c.assign(inside=c["coverage"] * c["n"]).groupby(["source", "target_device"])[["inside", "n"]].sum()
    per["coverage"] = per["inside"] / per["n"]
    kind = pd.Series(["gpu" if any(g in s for g in ("RTX", "GPU", "Tesla", "A100", "H100", "H200")) else "cpu"
                      for s, _ in per.index], index=per.index)
    parts = []
    for name, m in (("cpu", kind == "cpu"), ("gpu", kind == "gpu"), ("all", kind.notna())):
        if m.any():
            parts.append(f"{name}={per.loc[m, 'coverage'].mean():.2f} (pairs={int(m.sum())} rows={int(per.loc[m, 'n'].sum())})")
    return f"coverage_pooled_k{k}: " + " ".join(parts)


def summary(t: pd.DataFrame) -> pd.DataFrame:
    """Per source -> target, target, precision, K: MAPE and Spearman of each model, coverage and width."""
    w = t.pivot_table(index=["source", "target_device", "target", "precision", "k"], columns="model",
                      values=["mape_pct", "spearman"])
    w.columns = [f"{m}_{v}" for v, m in w.columns]
    cov = t[t.model.isin(["calibrated", "zero_shot"])].groupby(
        ["source", "target_device", "target", "precision", "k"])[
        [c for c in ("coverage", "width", "coverage_loo", "width_loo", "coverage_min", "coverage_max")
         if c in t.columns]].first()
    spread = t[t.model == "calibrated"].groupby(["source", "target_device", "target", "precision", "k"])[
        [c for c in ("mape_pct_min", "mape_pct_max") if c in t.columns]].first()
    spread.columns = [f"calibrated_{c}" for c in spread.columns]
    return w.join(cov).join(spread).reset_index()


def write_errors(path: str, pending: list[dict]) -> None:
    """The transfer-error table of every pair's calibrated model (:func:`carb.model.transfer_prior.error_table`)
    to ``path``, and its provenance (``<stem>.provenance.json``: command, commit, date, pairs per kind)."""
    import json
    import subprocess
    import sys
    from datetime import datetime, timezone

    from carb.model.transfer_prior import error_table

    table = error_table(pending)
    table.to_csv(path, index=False)
    from carb.model.transfer_prior import pair_summary

    pairs_path = Path(path).with_name(Path(path).name.replace("transfer-errors", "transfer-pairs")
                                      if "transfer-errors" in Path(path).name else Path(path).stem + "-pairs.csv")
    floors: dict = {}   # each pair's target device's run-to-run noise (noise_log_sd: level_noise swap in carb-calibrate)
    pair_summary([{**q, "noise": _noise_of(q, floors)} for q in pending]).to_csv(pairs_path, index=False)
    print(f"  wrote {pairs_path} (per pair and precision: bias, row scale, |residual| quantiles; the device-level "
          "band of carb-calibrate, transfer.pair_prior)", flush=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    pairs = {}
    for q in pending:
        pairs.setdefault(q["kind"], set()).add(f"{q['source']} -> {q['target_device']}")
    prov = {"command": "python -m scripts.bench.transfer_pairs " + " ".join(sys.argv[1:]), "commit": commit,
            "written_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "what": "quantiles of |log(measured / predicted)| of the target rows a K-row carb-calibrate transfer "
                    "was not fitted on, each ordered device pair weighted equally; loo_scale: median over pairs of "
                    "the mean |leave-one-out residual| of the K rows (carb/model/transfer_prior.py: LOO_STAT)",
            "pairs": {k: sorted(v) for k, v in pairs.items()}}
    Path(path).with_suffix("").with_suffix(".provenance.json").write_text(json.dumps(prov, indent=1) + "\n")
    print(f"  wrote {path} ({len(table)} rows) and its provenance", flush=True)


def all_pairs(ks: list[int], gpu: bool = True) -> tuple[pd.DataFrame, list]:
    """Every ordered CPU pair (latency, peak memory) and, with ``gpu``, every timm GPU pair (latency):
    ``(table, parts)``, the per-pair rows of every model and K averaged over the K-row picks
    (:func:`average_picks`; the spread beside), and each kind's :func:`pair_table` result (every pick's records)."""
    print("== CPU pairs (latency, peak memory)", flush=True)
    parts = [pair_table(cpu_devices(), ks, ["latency_ms", "peak_memory_MB"], cpu=True)]
    if gpu:
        print("== timm GPU pairs (latency)", flush=True)
        parts.append(pair_table(gpu_devices(), ks, ["latency_ms"], cpu=False))
    every = [q for p in parts for q in p[1]]
    with warnings.catch_warnings():   # intervals across kinds: a CPU pair's band may rest on GPU pairs
        warnings.simplefilter("ignore")
        table = set_intervals(pd.concat([p[0] for p in parts], ignore_index=True), every)
    return average_picks(table), parts


def saved_pairs(path: str) -> tuple[pd.DataFrame, list]:
    """:func:`all_pairs`' ``(table, parts)`` from a ``--parts-out`` file: the saved fits and held-out errors,
    intervals rebuilt by :func:`set_intervals` with the current interval code (exploration: seconds)."""
    import cloudpickle

    parts = cloudpickle.loads(Path(path).read_bytes())
    every = [q for p in parts for q in p[1]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = set_intervals(pd.concat([p[0] for p in parts], ignore_index=True), every)
    return average_picks(table), parts


def pair_overview(t: pd.DataFrame) -> pd.DataFrame:
    """One row per ordered pair, latency, worst precision (MAPE %): the uncalibrated source and CARB's answer
    at K = 0 (:func:`product`), at K = 10 CARB's calibrated model beside the transfer from the source alone and
    a FLOPs-only fit on the same rows, CPU pairs' single-source base at K = 0 and 10 (``k0_single`` /
    ``k10_single``, NaN where CARB's answer is single-source), the lowest Spearman, the lowest 90 % coverage and widest median hi/lo."""
    lat = t[t["target"] == "latency_ms"]
    key = ["source", "target_device"]

    def worst(frame: pd.DataFrame, col: str = "mape_pct", how: str = "max") -> pd.Series:
        return frame.groupby(key)[col].agg(how)

    k10 = lat[lat.k == 10]
    cal = k10[k10.model == "calibrated"]
    out = pd.DataFrame({
        "k0_source": worst(lat[(lat.k == 0) & (lat.model == "source")]),
        "k0_carb": worst(product(lat, 0, "zero_shot", "source")),
        "k10_carb": worst(cal),
        "k10_source_base": worst(k10[k10.model == "source_base"]),
        "k0_single": worst(lat[(lat.k == 0) & (lat.model == "zero_shot_single")]),
        "k10_single": worst(k10[k10.model == "calibrated_single"]),
        "k10_flops_only": worst(k10[k10.model == "flops_k"]),
        "k10_spearman_min": worst(cal, "spearman", "min"),
        "k10_coverage_min": worst(cal, "coverage", "min"),
        "k10_width_max": worst(cal, "width", "max"),
    })
    return out.reset_index()


def print_error_sources(parts: list) -> None:
    """Print :func:`error_sources` of the CPU pairs at K = 10 with each CPU's measured noise and own-rows floor."""
    from scripts.bench.transfer import markdown

    devices = cpu_devices()
    noise = {}
    for n, d in devices.items():
        fl = repeat_floor("latency_ms", measured_repeat_rows(d))
        noise[n] = {p: v for p, v in fl.items() if p != "default"} if isinstance(fl, dict) else {}
    own = {n: own_cv_mape(d) for n, d in devices.items()}
    cpu = [q for q in parts[0][1]]
    d = error_sources(cpu, devices, 10, noise, own)
    print("where the K=10 latency error lives (MAPE %, CPU pairs, held-out rows; scripts.bench.transfer_pairs."
          "error_sources):")
    print(markdown(d.round(3)))
    print(error_sources_line(d), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default=None, help="K values (default: 0, 10 and the quickstart's K)")
    ap.add_argument("--no-gpu", action="store_true")
    ap.add_argument("--csv", default=None, help="write the per-pair table here")
    ap.add_argument("--errors-out", default=None,
                    help="write the transfer-error table (carb/data/transfer-errors.csv) from every pair here")
    ap.add_argument("--prior-rows", type=float, default=None, help="pseudo-rows of the transfer-error prior")
    ap.add_argument("--loo-stat", default=None, choices=["median", "mean", "rms"],
                    help="statistic of the K rows' |leave-one-out residuals| the prior scales by (default: the model's)")
    ap.add_argument("--precision-band", default=None, choices=["pooled", "widest"],
                    help="band of each precision in the transfer-error prior (default: the model's)")
    ap.add_argument("--precision-sweep", action="store_true",
                    help="also print the precision band chosen leave-one-pair-out (about a minute)")
    ap.add_argument("--error-sources", action="store_true",
                    help="also print where the CPU pairs' K=10 latency error lives (offset, slope, noise, own-rows "
                         "floor; fits each CPU's cascade 5 more times: a few minutes)")
    ap.add_argument("--single-source", action="store_true",
                    help="CPU pairs: CARB's answer from the pair's source alone (the earlier base), not the "
                         "multi-source base (every other CPU's probe zero-shot combined)")
    ap.add_argument("--interval-sweep", action="store_true",
                    help="also print the interval settings chosen fully nested leave-one-pair-out (a few minutes)")
    ap.add_argument("--level-noise", default=None, choices=["keep", "swap"],
                    help="override transfer.level_noise of conf/calibrate.yaml (the pairs' own run-to-run noise in "
                         "the target-out level band: kept, or swapped for the target's)")
    ap.add_argument("--parts-out", default=None,
                    help="save every pair's fitted transfers and held-out errors here (cloudpickle) for --parts-in")
    ap.add_argument("--parts-in", default=None,
                    help="skip the fits: rebuild only the intervals and tables from a --parts-out file (seconds; "
                         "for exploring interval rules, point accuracy as saved)")
    ap.add_argument("--extra-session", action="append", default=[], metavar="DATASET=PROBE",
                    help="a further session of a benchmark CPU (its rows and the probe of the same session) as an "
                         "extra source of the other CPU targets (repeatable)")
    ap.add_argument("--pool-sessions", action="store_true",
                    help="pool each --extra-session's rows, moved by its own probe to its device's shipped probe, "
                         "with that device's rows into one source instead")
    a = ap.parse_args()
    bad = [v for v in a.extra_session if v.count("=") != 1 or not all(map(Path.exists, map(Path, v.split("="))))]
    if bad:
        print(f"--extra-session: {bad[0]!r} must be DATASET=PROBE, two existing files", file=sys.stderr)
        raise SystemExit(2)
    EXTRA_SESSIONS[:] = [tuple(v.split("=", 1)) for v in a.extra_session]
    POOL_SESSIONS[0] = a.pool_sessions
    LEVEL_NOISE[0] = a.level_noise
    interval_rules()
    PRIOR_ROWS[0] = a.prior_rows
    SINGLE_SOURCE[0] = a.single_source
    if a.loo_stat:
        from carb.model import transfer_prior

        transfer_prior.LOO_STAT = a.loo_stat
    if a.precision_band:
        from carb.model import transfer_prior

        transfer_prior.PRECISION_BAND = a.precision_band
    ks = [int(k) for k in a.ks.split(",")] if a.ks else sorted({0, 10, quickstart_k()})
    from scripts.bench.transfer import markdown

    t, parts = saved_pairs(a.parts_in) if a.parts_in else all_pairs(ks, gpu=not a.no_gpu)
    if a.parts_out:
        import cloudpickle

        Path(a.parts_out).write_bytes(cloudpickle.dumps(parts))
    if a.errors_out:
        write_errors(a.errors_out, [q for p in parts for q in p[1] if q["k"] > 0 and q.get("pick", 0) == 0])
    if a.interval_sweep or a.precision_sweep or a.error_sources:   # these study carb-calibrate's own pick
        parts = [(p[0][p[0]["pick"] == 0] if "pick" in p[0] else p[0], [q for q in p[1] if q.get("pick", 0) == 0])
                 for p in parts]
    if a.interval_sweep:
        counts = interval_sweep(parts)
        print("  interval settings (LOO statistic / prior pseudo-rows) chosen fully nested leave-one-pair-out, "
              "folds: " + ", ".join(f"{o} {n}" for o, n in counts.items()), flush=True)
    if a.precision_sweep:
        for scheme, counts in precision_sweep(parts).items():
            print(f"  precision band chosen leave-one-pair-out ({scheme}), folds: "
                  + ", ".join(f"{o} {n}" for o, n in counts.items()), flush=True)
    if a.csv:
        t.to_csv(a.csv, index=False)
    s = summary(t)
    cols = [c for c in ("source", "target_device", "target", "precision", "k", "zero_shot_mape_pct",
                        "zero_shot_spearman", "calibrated_mape_pct", "calibrated_mape_pct_min",
                        "calibrated_mape_pct_max", "source_base_mape_pct",
                        "no_dispatch_mape_pct", "source_mape_pct", "flops_k_mape_pct", "calibrated_spearman",
                        "coverage", "coverage_min", "coverage_max", "width", "coverage_loo", "width_loo")
            if c in s.columns]
    print(markdown(s[s.k.isin([0, 10])][cols]))
    print(pooled_coverage_line(t))
    print(coverage_cells_line(t))
    print(k0_offset_line([q for p in parts for q in p[1]]))
    print(baselines_line(t))
    print(single_source_line(t))
    if a.error_sources:
        print_error_sources(parts)
    d = device_table(t)
    print("per left-out target device (latency MAPE %, worst source and precision; coverage pooled over its rows):")
    print(markdown(d.round(3)))
    print(headline(t))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
