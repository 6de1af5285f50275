"""Zero-shot GPU-to-GPU latency ratio from two spec records (``carb/data/gpu_specs.csv``).

Eager PyTorch reaches a device-dependent share of a GPU's peak, so no single spec figure predicts how much
faster one GPU runs a network than another. The ratio of per-image latency (target / source) is modelled as
a weighted geometric mean of three spec ratios, each source / target::

    log(t_dst / t_src) = w_c log(peak_src / peak_dst) + w_b log(bw_src / bw_dst) + w_p log(P_src / P_dst)

with the peak at the row's precision as PyTorch runs it (fp16/bf16 on tensor cores with FP32 accumulate,
fp32 convolutions as TF32 where the GPU has it: cuDNN's default), memory bandwidth and the board power
limit. The weights are fitted by least squares on measured device pairs (:func:`fit_weights`), on the
simplex (``geometric``: non-negative, summing to 1) or free, whichever predicts left-out devices better
(:func:`choose_form`; with timm's four GPUs: geometric, leave-one-device-out mean |log error| 0.01 against
0.13 free);
``scripts/bench/transfer_pairs.py`` fits them leaving each target device out, which is also where the
shipped weights (``conf/calibrate.yaml``, ``zero_shot.weights``) and their error come from.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from carb.errors import ConfigError

#: Spec figure per precision, first present wins (TFLOP/s).
RATE_FIELDS: dict[str, tuple[str, ...]] = {
    "fp16": ("fp16_tensor_TFLOPS", "fp16_TFLOPS", "fp32_TFLOPS"),
    "bf16": ("bf16_tensor_TFLOPS", "fp16_tensor_TFLOPS", "fp32_TFLOPS"),
    "fp32": ("tf32_tensor_TFLOPS", "fp32_TFLOPS"),
}
#: The peak fields that say a GPU runs a precision natively (its own units: bf16 needs bf16 tensor cores, fp16
#: tensor cores or fp16 CUDA cores): a record without one has no figure for that precision, and the fallbacks of
#: :data:`RATE_FIELDS` (fp16's or fp32's rate) would predict a path the GPU does not have.
NATIVE_FIELDS: dict[str, tuple[str, ...]] = {
    "fp16": ("fp16_tensor_TFLOPS", "fp16_TFLOPS"),
    "bf16": ("bf16_tensor_TFLOPS",),
    "fp32": ("tf32_tensor_TFLOPS", "fp32_TFLOPS"),
}


def lacking_precisions(rec: Mapping[str, Any], precisions: Sequence[str] = ("fp32", "fp16", "bf16")) -> list[str]:
    """The ``precisions`` the spec record ``rec`` has no native peak for (:data:`NATIVE_FIELDS`), e.g. bf16 on
    a V100 (no bf16 tensor cores) or a Pascal GPU."""
    def has(p: str) -> bool:
        return any(rec.get(f) is not None and not (isinstance(rec.get(f), float) and math.isnan(rec[f]))
                   and float(rec[f]) > 0 for f in NATIVE_FIELDS.get(p, ()))
    return [p for p in precisions if p in NATIVE_FIELDS and not has(p)]


#: The three axes, in the order of :func:`spec_axes`.
AXES: tuple[str, ...] = ("compute", "bandwidth", "power")


def _field(rec: Mapping[str, Any], names: Sequence[str], what: str) -> float:
    for n in names:
        v = rec.get(n)
        if v is not None and not (isinstance(v, float) and math.isnan(v)) and float(v) > 0:
            return float(v)
    raise ConfigError(f"spec {rec.get('name', '?')!r}: no {what} ({' or '.join(names)}); the zero-shot "
                      "transfer needs it")


def spec_axes(src: Mapping[str, Any], dst: Mapping[str, Any], precision: str) -> np.ndarray:
    """log(source / target) of (peak rate at ``precision``, memory bandwidth, power limit); shape (3,)."""
    rate = RATE_FIELDS.get(precision, RATE_FIELDS["fp32"])
    return np.log([_field(src, rate, f"{precision} rate") / _field(dst, rate, f"{precision} rate"),
                   _field(src, ("memory_bandwidth_GBps",), "bandwidth") / _field(dst, ("memory_bandwidth_GBps",),
                                                                                  "bandwidth"),
                   _field(src, ("power_limit_W",), "power limit") / _field(dst, ("power_limit_W",), "power limit")])


def log_ratio(src: Mapping[str, Any], dst: Mapping[str, Any], precision: str,
              weights: Mapping[str, float]) -> float:
    """Predicted log(latency on ``dst`` / latency on ``src``) for rows of ``precision``."""
    w = np.array([float(weights[a]) for a in AXES])
    return float(spec_axes(src, dst, precision) @ w)


#: Forms of the weights: ``geometric`` (non-negative, summing to 1: a weighted geometric mean of the three
#: ratios, so a GPU whose every figure is c times another's runs c times faster) or ``free`` (least squares).
FORMS: tuple[str, ...] = ("geometric", "free")


def fit_weights(axes: np.ndarray, log_ratios: np.ndarray, form: str = "geometric") -> dict[str, float]:
    """Weights from measured pairs: ``axes`` (pairs, 3) of :func:`spec_axes`, ``log_ratios`` (pairs,)
    measured log(target / source) per-image latency; ``form`` one of :data:`FORMS` (``geometric``: least
    squares on the simplex, by NNLS with a stiff sum-to-one row)."""
    from scipy.optimize import nnls

    axes, y = np.asarray(axes, float), np.asarray(log_ratios, float)
    if form not in FORMS:
        raise ConfigError(f"zero-shot weights form: {form!r}; allowed: {list(FORMS)}")
    if len(y) < (2 if form == "geometric" else len(AXES)):
        raise ConfigError(f"zero-shot weights: {len(y)} device pairs, need at least {len(AXES)}")
    if form == "free":
        coef, *_ = np.linalg.lstsq(axes, y, rcond=None)
    else:
        stiff = 1e3 * max(1.0, float(np.abs(axes).max()))
        coef, _ = nnls(np.vstack([axes, np.full(len(AXES), stiff)]), np.append(y, stiff))
    return dict(zip(AXES, map(float, coef)))


def choose_form(pair_axes: Mapping[tuple[str, str], np.ndarray], log_ratios: Mapping[tuple[str, str], float]
                ) -> tuple[str, dict[str, float]]:
    """The weights' form (:data:`FORMS`) with the lower leave-one-device-out error on these pairs: for each
    device, weights fitted on the pairs without it predict the pairs into it; mean |log error| per form.
    ``pair_axes`` / ``log_ratios``: by ordered pair (source, target). Ties, or too few pairs for a form:
    ``geometric``. Returns ``(form, {form: mean |log error|})``."""
    devices = sorted({d for q in pair_axes for d in q})
    scores: dict[str, float] = {}
    for form in FORMS:
        errs = []
        for e in devices:
            train = [q for q in pair_axes if e not in q]
            test = [q for q in pair_axes if q[1] == e]
            try:
                w = np.array(list(fit_weights(np.array([pair_axes[q] for q in train]),
                                              np.array([log_ratios[q] for q in train]), form).values()))
            except ConfigError:
                continue
            errs += [abs(log_ratios[q] - float(pair_axes[q] @ w)) for q in test]
        scores[form] = float(np.mean(errs)) if errs else float("inf")
    best = min(FORMS, key=lambda f: (scores[f], f != "geometric"))
    return best, scores
