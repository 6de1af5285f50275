"""The one test-only builder of synthetic dataset rows (never a measurement; nothing outside tests/ and
the timing-only benchmarks uses it). Every builder ends in :func:`schema_frame`, so every synthetic row
passes :func:`carb.data.schema.validate_dataset`. Byte sizes and precisions come from the library
(:data:`carb.design.arch.BYTES_PER_ELEMENT`), never from a copy here.

Three shapes of data, one pipeline:

:func:`synthetic_dataset`
    ``n`` configurations drawn (seeded) from a large knob grid, with a physics-like cost model whose
    relations the predictor tests expect it to learn:

    - static features from a ResNet-like size model (ResNet-18 at 224 px: ~11 M params, ~1.8 GFLOPs):
      ``params ~ depth * width^2``, activations ``~ batch * width * (input / stem)^2 * depth``,
      FLOPs ``~ batch * params-per-pixel * pixels``;
    - ``peak_memory_MB = param_size_MB + 1.6 * max_activation_MB + 8 MB workspace`` (x noise);
    - ``latency_ms = launches * 12 us + flops / throughput(precision, batch)`` (x noise), with a
      batch-efficiency factor that saturates for large batches (low batches run far below peak);
    - ``energy_J = latency_s * power_W`` (per batch) with ``power_W = 60 + 290 * sm_util / 100`` (x noise).

    ``energy=False`` makes the energy column NaN (a device without an energy counter),
    ``telemetry=False`` makes all runtime features NaN, ``n_oom`` adds out-of-memory rows.
:func:`grid_dataset`
    A small full factorial grid (80 rows) whose targets are smooth functions of the knobs times
    ``scale``: two devices that differ by ``scale`` have a known cross-device slope (characterization).
:func:`linear_dataset`
    Rows whose targets are exact linear functions of ``flops`` (energy exactly linear in latency) and
    whose telemetry is random: known answers for metrics, regimes and the baselines.
:func:`frame`
    Hand-written partial rows (known answers for one analysis), knobs defaulted.
"""
from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from carb.data.schema import COLUMNS, conform, validate_dataset
from carb.design.arch import BYTES_PER_ELEMENT, PRECISIONS

BASIC_DEPTHS = (10, 14, 18, 26, 34)
BOTTLENECK_DEPTHS = (50, 101, 152)
WIDTHS = (0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 1.5)
INPUTS = (32, 64, 96, 128, 160, 224)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Peak dense throughput of the synthetic device per precision (TFLOP/s); one entry per library precision.
PEAK_TFLOPS = {"fp32": 30.0, "fp16": 110.0, "bf16": 100.0}

#: Knob values a partial row gets when it does not name them (:func:`frame`).
KNOB_DEFAULTS = {"block": "basic", "depth": 18, "width_mult": 1.0, "input_size": 32, "batch_size": 1,
                 "precision": "fp32", "early_downsample": True, "stages": "2-2-2-2", "params": 1000,
                 "n_conv": 20}


def _config_ids(rows: Sequence[Mapping], with_index: bool) -> list[str]:
    """Stable synthetic ids (sha1 of the row; same rows -> same ids on every device)."""
    def key(i, r):
        return f"{i}:{sorted(r.items())}" if with_index else repr(tuple(r.values()))
    return [hashlib.sha1(key(i, r).encode()).hexdigest()[:16] for i, r in enumerate(rows)]


def schema_frame(df: pd.DataFrame, device_name: str, device_kind: str = "cuda") -> pd.DataFrame:
    """The common end of every builder: device identity, ``status`` ok where not given, knob defaults
    for knobs not given, every other schema column NaN/NA, validated (raises on an invalid row)."""
    df = df.copy()
    df["device_name"] = device_name
    df["device_kind"] = device_kind
    if "status" not in df.columns:
        df["status"] = "ok"
    for c, v in KNOB_DEFAULTS.items():
        if c not in df.columns:
            df[c] = v
    return validate_dataset(conform(df, fill_missing=COLUMNS), source="synthetic")


def frame(rows: list[dict], device: str = "Synthetic GPU A") -> pd.DataFrame:
    """Schema frame from partial rows (missing columns NaN/NA; status ok; config_id from the row and
    its position unless given)."""
    df = pd.DataFrame(rows)
    if "config_id" not in df.columns:
        df["config_id"] = _config_ids(rows, with_index=True)
    return schema_frame(df, device)


def _grid() -> pd.DataFrame:
    rows = [(block, d, w, s, b, p, ed)
            for block, depths in (("basic", BASIC_DEPTHS), ("bottleneck", BOTTLENECK_DEPTHS))
            for d, w, s, b, p, ed in itertools.product(depths, WIDTHS, INPUTS, BATCHES, PRECISIONS,
                                                       (True, False))]
    return pd.DataFrame(rows, columns=["block", "depth", "width_mult", "input_size", "batch_size",
                                       "precision", "early_downsample"])


def synthetic_dataset(n: int = 600, seed: int = 0, device_name: str = "Synthetic GPU",
                      energy: bool = True, telemetry: bool = True, noise: float = 0.03,
                      n_oom: int = 0) -> pd.DataFrame:
    """``n`` distinct configurations (plus ``n_oom`` OOM rows) in the schema of
    :data:`carb.data.schema.COLUMNS`, seeded. Units as in the schema (MB = 2**20 bytes, J, ms)."""
    rng = np.random.default_rng(seed)
    grid = _grid()
    total = n + n_oom
    if total > len(grid):
        raise ValueError(f"at most {len(grid)} distinct synthetic configurations, asked {total}")
    df = grid.iloc[np.sort(rng.choice(len(grid), size=total, replace=False))].reset_index(drop=True)
    bneck = (df["block"] == "bottleneck").to_numpy()
    d = df["depth"].to_numpy(float)
    w = df["width_mult"].to_numpy(float)
    s = df["input_size"].to_numpy(float)
    b = df["batch_size"].to_numpy(float)
    nbytes = df["precision"].map(BYTES_PER_ELEMENT).to_numpy(float)
    stem = np.where(df["early_downsample"].to_numpy(bool), 4.0, 1.0)
    pix = (s / stem) ** 2

    params = np.round(150.0 * d * (w * 64) ** 2 * np.where(bneck, 0.8, 1.0) + 5e4 * w).astype(np.int64)
    per_pixel_macs = params / d * 0.9
    flops = b * per_pixel_macs * pix * np.where(bneck, 0.6, 1.0)
    act_elems = b * (w * 64) * pix * d * np.where(bneck, 3.0, 2.0)
    total_act = act_elems * nbytes / 2**20
    max_act = b * (w * 64) * pix * np.where(bneck, 4.0, 1.0) * nbytes / 2**20
    param_mb = params * nbytes / 2**20
    n_conv = np.round(d + 1).astype(np.int64)

    def jitter(size: int | tuple) -> np.ndarray:
        return np.exp(rng.normal(0.0, noise, size))

    sat = 1.0 - np.exp(-b * pix * w / 4e3)                      # batch/size efficiency in (0, 1)
    sm_util = np.clip(100 * (0.15 + 0.8 * sat) + rng.normal(0, 3, total), 1, 100)
    mem_util = np.clip(100 * (0.1 + 0.75 * sat * (nbytes / 4) ** 0.3) + rng.normal(0, 3, total), 1, 100)
    launches = 3.0 * n_conv + 4
    thr = df["precision"].map(PEAK_TFLOPS).to_numpy(float) * 1e12 * (0.05 + 0.6 * sat)
    latency = (launches * 0.012 + 1e3 * flops / thr) * jitter(total)
    n_runs = 100.0
    power = 60.0 + 290.0 * sm_util / 100.0
    energy_j = latency / 1e3 * power * jitter(total)  # per batch
    peak = (param_mb + 1.6 * max_act + 8.0) * jitter(total)
    temp = 38.0 + 0.35 * sm_util + rng.normal(0, 1.0, total)

    out = df.copy()
    out["stages"] = np.where(bneck, "3-4-6-3", "2-2-2-2")
    out["flops"] = flops
    out["params"] = params
    out["param_size_MB"] = param_mb
    out["total_activation_MB"] = total_act
    out["max_activation_MB"] = max_act
    out["flops_per_param_log"] = np.log10(flops / params)
    out["compute_intensity"] = flops / (param_mb + total_act)
    out["n_conv"] = n_conv
    out["avg_sm_util"] = sm_util if telemetry else np.nan
    out["avg_mem_util"] = mem_util if telemetry else np.nan
    out["gpu_temp_C"] = temp if telemetry else np.nan
    out["kernel_launches"] = launches if telemetry else np.nan
    out["peak_memory_MB"] = peak
    out["energy_J"] = energy_j if energy else np.nan
    out["latency_ms"] = latency
    out["n_runs"] = n_runs
    out["n_warmup"] = 10.0
    out["latency_std_ms"] = latency * 0.02
    out["avg_power_W"] = power if energy else np.nan
    out["window_s"] = n_runs * latency / 1e3
    out["energy_window_J"] = energy_j * n_runs if energy else np.nan
    out["protocol_s"] = out["window_s"] + 3.0
    out["driver"] = "synthetic"
    out["torch_version"] = "synthetic"
    out["measured_at"] = "1970-01-01T00:00:00Z"
    out["status"] = "ok"
    out["error"] = ""
    reasons = []
    if not energy:
        reasons.append("energy_J: synthetic device without an energy counter")
    if not telemetry:
        reasons.append("avg_sm_util: synthetic device without telemetry")
    out["missing_reason"] = "; ".join(reasons)
    out["config_id"] = _config_ids(df.to_dict("records"), with_index=False)
    if n_oom:
        oom = rng.choice(total, size=n_oom, replace=False)
        out.loc[oom, ["peak_memory_MB", "energy_J", "latency_ms"]] = np.nan
        out.loc[oom, "status"] = "oom"
        out.loc[oom, "error"] = "CUDA out of memory (synthetic)"
    return schema_frame(out, device_name)


def grid_dataset(device: str = "Synthetic GPU A", scale: float = 1.0, energy: bool = True,
                 sm_util: bool = True, seed: int = 0) -> pd.DataFrame:
    """A full factorial grid (2 families x 2 depths x 5 batch sizes x 2 precisions x 2 widths = 80
    rows) whose targets are smooth functions of the knobs times ``scale`` (+/- 2 % seeded noise)."""
    rng = np.random.default_rng(seed)
    rows = []
    for (block, depths), bs, prec, w in itertools.product(
            (("basic", (18, 34)), ("bottleneck", (50, 101))), (1, 4, 16, 64, 256), ("fp32", "fp16"),
            (1.0, 2.0)):
        for depth in depths:
            flops = depth * 2e7 * bs * w ** 2 * (3 if block == "bottleneck" else 1)
            noise = rng.uniform(0.98, 1.02, size=3)
            sm = min(95.0, 10.0 + 6.0 * np.log2(bs) + 35.0 * (w - 1) + 0.2 * depth)
            act_mb = bs * w * 0.5 * BYTES_PER_ELEMENT[prec] / BYTES_PER_ELEMENT["fp16"]
            rows.append({
                "config_id": hashlib.sha1(f"{block}{depth}{bs}{prec}{w}".encode()).hexdigest()[:16],
                "block": block, "depth": depth, "width_mult": w, "input_size": 32, "batch_size": bs,
                "precision": prec, "stages": "2-2-2-2", "params": int(depth * 1e5 * w ** 2),
                "n_conv": depth + 2, "flops": flops,
                "max_activation_MB": act_mb,
                "latency_ms": scale * (0.5 + flops / 1e9) * noise[0],
                "energy_J": scale * (5 + 40 * flops / 1e9 * (1.3 if prec == "fp32" else 1.0)) * noise[1]
                if energy else np.nan,
                "peak_memory_MB": (20 + act_mb) * noise[2],
                "avg_sm_util": sm if sm_util else np.nan,
                "n_runs": 10,
            })
    return frame(rows, device=device)


def linear_dataset(n: int = 40, seed: int = 0) -> pd.DataFrame:
    """``n`` rows, batch sizes cycling 1..128: ``latency_ms = 2 + flops / 1e8``,
    ``peak_memory_MB = 50 + flops / 1e7``, ``energy_J = 3 * latency_ms + 1``; SM utilization uniform in
    [10, 95] %, memory utilization half of it."""
    rng = np.random.default_rng(seed)
    bs = np.tile([1, 2, 4, 8, 16, 32, 64, 128], n // 8 + 1)[:n]
    flops = rng.uniform(1e8, 1e10, n)
    sm = rng.uniform(10, 95, n)
    lat = 2.0 + flops / 1e8
    return frame(pd.DataFrame({"batch_size": bs, "flops": flops, "avg_sm_util": sm, "avg_mem_util": sm / 2,
                               "peak_memory_MB": 50 + flops / 1e7, "latency_ms": lat,
                               "energy_J": 3.0 * lat + 1.0}).to_dict("records"))


def with_interactions(df: pd.DataFrame) -> pd.DataFrame:
    """The paper's interaction features computed inline (the contract of
    ``carb.model.encoding.interaction_features``), for tests that need them precomputed."""
    out = df.copy()
    out["batch_x_sm"] = out["batch_size"] * out["avg_sm_util"]
    out["flops_x_sm"] = np.log1p(out["flops"]) * out["avg_sm_util"]
    out["act_x_mem"] = np.log1p(out["total_activation_MB"]) * out["avg_mem_util"]
    out["util_product"] = out["avg_sm_util"] * out["avg_mem_util"]
    return out


def power_law_rows(rec: Mapping, law: Mapping[str, float], n: int = 300, seed: int = 0, noise: float = 0.0,
                   latency_scale: float = 1.0, device: str = "Synthetic power GPU") -> pd.DataFrame:
    """``n`` rows of a synthetic GPU whose spec record is ``rec`` (``power_limit_W``, peaks, bandwidth) and
    whose average power follows a known drive law (:mod:`carb.model.power`): ``P = S + (L - S) *
    sigmoid(a + b * x)``, ``law`` = ``{"a", "b", "static_W"}``, ``L`` the record's power limit,
    ``x = log(roofline_ms / latency_ms)`` with the latency a launch floor plus the roofline time over an
    efficiency (times ``latency_scale``); ``energy_J = P * latency_ms / 1000`` (x lognormal ``noise``).
    Seeded: the same seed gives the same configurations on every record (a second GPU of the same rows)."""
    from carb.model.power import roofline_ms

    rng = np.random.default_rng(seed)
    bs = rng.choice(BATCHES, n)
    prec = rng.choice(list(PRECISIONS), n)
    per_img = rng.uniform(2e8, 8e9, n)
    df = pd.DataFrame({"batch_size": bs, "precision": prec, "flops": per_img * bs,
                       "total_activation_MB": per_img / 1e7 * bs * np.array([BYTES_PER_ELEMENT[p] for p in prec]),
                       "param_size_MB": rng.uniform(5, 200, n), "n_conv": 20})
    roof = roofline_ms(df, rec)
    lat = (rng.uniform(1.0, 6.0, n) + roof / rng.uniform(0.2, 0.7, n)) * latency_scale
    lim = float(rec["power_limit_W"])
    x = np.log(roof / lat)
    p = law["static_W"] + (lim - law["static_W"]) / (1 + np.exp(-(law["a"] + law["b"] * x)))
    df["latency_ms"] = lat
    df["energy_J"] = p * lat / 1e3 * np.exp(rng.normal(0, noise, n) if noise else 0.0)
    df["config_id"] = _config_ids(df[["batch_size", "precision", "flops"]].to_dict("records"), with_index=True)
    return frame(df.to_dict("records"), device=device)


def zoo_frame(families: Mapping[str, int], seed: int = 0, law: str = "hj", noise: float = 0.0) -> pd.DataFrame:
    """Zoo rows (not schema rows: the zoo's identity and published features, as
    :mod:`carb.data.importers.timm_zoo` gives them) for ``families`` (name -> number of models, one row
    each), with a known latency law per image: ``law='flops'``: ``t = 0.02 * GMACs**0.9`` ms;
    ``law='hj'``: ``t = 0.01 * params_M**0.2 * GMACs**0.5 * macts_M**0.4`` ms; times ``batch_size`` per
    batch, times log-normal ``noise`` (sigma). Features drawn per family around a family centre."""
    rng = np.random.default_rng(seed)
    rows = []
    for f, n in families.items():
        cg, cp, ca = rng.uniform(-1, 2), rng.uniform(0, 2), rng.uniform(0, 1.5)
        for i in range(n):
            g = 10 ** (cg + rng.normal(0, 0.3))
            p = 10 ** (cp + rng.normal(0, 0.3))
            a = 10 ** (ca + rng.normal(0, 0.3))
            b = int(rng.choice([64, 256, 1024]))
            t = 0.02 * g ** 0.9 if law == "flops" else 0.01 * p ** 0.2 * g ** 0.5 * a ** 0.4
            rows.append({"model": f"{f}_{i}", "family": f, "input_size": int(rng.choice([160, 224, 288])),
                         "batch_size": b, "gmacs_per_image": g, "params": p * 1e6, "macts_M_per_image": a,
                         "latency_ms": t * b * float(np.exp(rng.normal(0, noise))) if noise else t * b})
    return pd.DataFrame(rows)


def cpu_zoo_frame(families: Mapping[str, int], seed: int = 0, rows_per_model: int = 6,
                  mem_overhead: float = 1.1) -> pd.DataFrame:
    """Measured-zoo rows (``carb-collect space=zoo`` columns that :mod:`carb.analysis.zoo_cpu_eval` reads)
    for ``families`` (name -> number of models), ``rows_per_model`` (batch, input size, precision) each,
    with known laws: latency per image ``t = 2e-6 * MFLOPs**0.9 * MB**0.1 * n_ops**0.3`` ms (bf16: x 1.5),
    times the batch; ``peak_memory_MB = mem_overhead * (peak_live_MB + param_size_MB)``."""
    rng = np.random.default_rng(seed)
    rows = []
    for f, n in families.items():
        cf, cp = rng.uniform(7.5, 9.5), rng.uniform(6, 7.5)
        for i in range(n):
            flops1, params = 10 ** (cf + rng.normal(0, 0.2)), 10 ** (cp + rng.normal(0, 0.2))
            n_ops = rng.integers(50, 400)
            for _ in range(rows_per_model):
                b, s = int(rng.choice([1, 2, 4, 8, 16])), int(rng.choice([96, 160, 224]))
                prec = str(rng.choice(["fp32", "bf16"]))
                scale = (s / 224) ** 2
                byt = 4 if prec == "fp32" else 2
                fl, mb = flops1 * scale, flops1 * scale / 2e6
                t = 2e-6 * (fl / 1e6) ** 0.9 * mb ** 0.1 * n_ops ** 0.3 * (1.5 if prec == "bf16" else 1.0)
                live, psize = b * mb / 8, params * byt / 2 ** 20
                rows.append({"model_name": f"tv:{f}_{i}", "family": f, "input_size": s, "batch_size": b,
                             "precision": prec, "flops": fl * b, "params": params, "param_size_MB": psize,
                             "activations": fl * b / 50, "peak_live_MB": live, "bytes_read_MB": mb * b * 0.6,
                             "bytes_written_MB": mb * b * 0.4, "n_ops": float(n_ops), "latency_ms": t * b,
                             "peak_memory_MB": mem_overhead * (live + psize)})
    return pd.DataFrame(rows)


#: Small torchvision networks of distinct families that trace in well under a second each (tests' zoo).
ZOO_TEST_MODELS = ("tv:squeezenet1_0", "tv:squeezenet1_1", "tv:mobilenet_v3_small", "tv:mobilenet_v2",
                   "tv:resnet18", "tv:resnet34", "tv:shufflenet_v2_x0_5", "tv:shufflenet_v2_x1_0",
                   "tv:mnasnet0_5", "tv:mnasnet1_0", "tv:regnet_x_400mf", "tv:regnet_y_400mf",
                   "tv:efficientnet_b0", "tv:googlenet")


def zoo_schema_frame(models: Sequence[str] = ZOO_TEST_MODELS, sizes: Sequence[int] = (32, 64),
                     batches: Sequence[int] = (1, 4, 16), precisions: Sequence[str] = ("fp32", "bf16"),
                     seed: int = 0, noise: float = 0.03, device_name: str = "Synthetic CPU",
                     energy: bool = False) -> pd.DataFrame:
    """Zoo dataset rows (:mod:`carb.data.zoo_schema`) of real traced networks (their static features from
    :func:`carb.design.zoo_inputs.zoo_features_frame`) with targets from a known cost law, never a
    measurement: ``peak_memory_MB = 30 + param_size_MB + peak_live_MB + input MB`` and ``latency_ms = 0.05 +
    flops / rate(precision) + 0.02 ms per MB written + 3 us per op`` (rate 20 GFLOP/s fp32, 12 bf16), each
    times log-normal ``noise``; ``energy_J = latency_s * 40 W`` when ``energy``, else NaN (CPU rows)."""
    from carb.data.zoo_schema import validate_zoo_dataset
    from carb.design.zoo_inputs import zoo_features_frame

    knobs = pd.DataFrame(list(itertools.product(models, sizes, batches, precisions)),
                         columns=["model_name", "input_size", "batch_size", "precision"])
    F = zoo_features_frame(knobs)
    F = F[F["refused"] == ""].drop(columns="refused").reset_index(drop=True)
    rng = np.random.default_rng(seed)
    bytes_ = np.array([BYTES_PER_ELEMENT[p] for p in F["precision"]])
    input_mb = F["batch_size"] * 3 * F["input_size"] ** 2 * bytes_ / 2 ** 20
    mem = 30.0 + F["param_size_MB"] + F["peak_live_MB"] + input_mb
    rate = np.where(F["precision"] == "fp32", 20e9, 12e9)
    lat = 0.05 + 1e3 * F["flops"] / rate + 0.02 * F["bytes_written_MB"] + 0.003 * F["n_ops"]
    F["peak_memory_MB"] = mem.to_numpy() * np.exp(rng.normal(0, noise, len(F)))
    F["latency_ms"] = lat.to_numpy() * np.exp(rng.normal(0, noise, len(F)))
    F["energy_J"] = F["latency_ms"] / 1e3 * 40.0 if energy else np.nan
    F["device_name"], F["device_kind"], F["status"] = device_name, ("cuda" if energy else "cpu"), "ok"
    F["device_id"] = "synthetic-" + hashlib.sha1(device_name.encode()).hexdigest()[:8]
    from carb.data.zoo_schema import ZOO_SCHEMA

    F = F[[c for c in F.columns if c in ZOO_SCHEMA]]   # as a collected file: no per-kind columns
    for c, dtype in ZOO_SCHEMA.items():
        if c not in F.columns:
            F[c] = pd.Series([pd.NA] * len(F), dtype=dtype) if dtype == "string" else np.nan
    return validate_zoo_dataset(F, source="synthetic zoo")


def zoo_trace_frame(zoo: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """A layer-table feature table (as ``scripts/data/zoo_trace_features.py`` writes it: one row per
    ``(model, input_size)`` of ``zoo``, :func:`carb.design.trace.summarize`'s columns per image at fp32,
    ``refused`` None) with made-up counts: ``n_ops`` log-uniform in [20, 2000] per model, independent of the
    published features, so a latency law on it can only be learned from the trace; FLOPs split over the
    compute kinds at random, bytes from FLOPs."""
    from carb.design.trace import KINDS

    rng = np.random.default_rng(seed)
    pairs = zoo[["model", "input_size"]].drop_duplicates()
    rows = []
    for m, s in pairs.itertuples(index=False):
        g = float(zoo.loc[zoo["model"] == m, "gmacs_per_image"].iloc[0])
        share = rng.dirichlet(np.ones(len(KINDS)))
        row = {"model": m, "input_size": int(s), "settings": "", "refused": None, "trace_s": 0.1,
               "params": 1e6, "params_traced": 1e6, "flops": 2e9 * g, "macs": 1e9 * g, "activations": 1e6,
               "peak_live_bytes": int(4e6 * rng.uniform(1, 10)), "param_bytes": 4_000_000,
               "bytes_read": int(8e6 * g), "bytes_written": int(4e6 * g),
               "n_ops": int(np.exp(rng.uniform(np.log(20), np.log(2000))))}
        for k, sh in zip(KINDS, share):
            row[f"flops_{k}"] = 2e9 * g * sh
            row[f"bytes_{k}"] = int(1.2e7 * g * sh)
        rows.append(row)
    return pd.DataFrame(rows)


def zoo_devices_frame(records: Mapping[str, Mapping[str, float]], families: Mapping[str, int], seed: int = 0,
                      noise: float = 0.0, bias: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Zoo rows of one set of networks (:func:`zoo_frame`, law ``hj``) on several GPUs (``records``: device
    name -> spec record with ``fp16_tensor_TFLOPS``, ``memory_bandwidth_GBps``, ``power_limit_W``), each row
    with ``device_name``. A network's time per image on device d is its reference time times
    ``(100 / peak_d)**a * (1000 / bw_d)**(1 - a)``, ``a = sigmoid(z(log GMACs / activations))`` (a
    compute-bound network follows the peak, a memory-bound one the bandwidth), times ``exp(bias[d])`` (a
    device-level offset no spec figure says), times log-normal ``noise``."""
    base = zoo_frame(families, seed=seed, law="hj")
    rng = np.random.default_rng(seed + 1)
    ai = np.log(base["gmacs_per_image"].to_numpy(float) / base["macts_M_per_image"].to_numpy(float))
    a = 1 / (1 + np.exp(-(ai - ai.mean()) / ai.std()))
    parts = []
    for d, rec in records.items():
        scale = (100 / rec["fp16_tensor_TFLOPS"]) ** a * (1000 / rec["memory_bandwidth_GBps"]) ** (1 - a)
        scale = scale * np.exp((bias or {}).get(d, 0.0) + (rng.normal(0, noise, len(base)) if noise else 0.0))
        parts.append(base.assign(device_name=d, latency_ms=base["latency_ms"].to_numpy(float) * scale))
    return pd.concat(parts, ignore_index=True)
