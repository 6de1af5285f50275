"""Analytical priors of the cascade's stages: what physics says a configuration costs on one device,
with a handful of non-negative coefficients fitted to that device's measurements.

Trees learn a bounded correction and cannot extrapolate; a prior that is linear in the work done
can. Each stage of :class:`carb.model.cascade.CarbCascade` predicts ``prior(x) * exp(r(x))`` where
the ensemble learns the log-ratio ``r = log(y / prior)``; outside the measured range the prior carries
the scaling and the correction stays within what it saw.

Priors (all coefficients >= 0, fitted by non-negative least squares on relative error, so a 1 ms and
a 1 s configuration weigh alike; units of the inputs in MB = 2**20 bytes and fvcore FLOPs):

- :class:`MemoryPrior` (``peak_memory_MB``): ``c0 + c_p * param_size_MB + c_a * max_activation_MB +
  c_i * input_MB``: parameters, the peak live activations (a multiple of the largest layer output,
  which is for the whole batch) and the input batch. On zoo rows (named networks, no ResNet knobs) the
  activation term is the tracer's liveness peak ``peak_live_MB`` (:mod:`carb.design.trace`). The final memory
  prediction is never below the parameter bytes (:meth:`MemoryPrior.floor_MB`).
- :class:`LayerRooflinePrior` (``latency_ms`` and ``energy_J``, the default when the rows carry their
  knobs): a roofline over the layers' GEMM shapes (:mod:`carb.design.shapes`): per precision, a
  cost per multiply-add, per output pixel, per operator, per multiply-add of the 3-channel stem
  convolution, and per MB of im2col input, output, weights and element-wise passes (bytes at the
  row's precision). This is the expansion of ``MNK / (rate * e_M * e_N * e_K)`` with saturating GEMM
  efficiencies, so thin layers (few channels, tiny feature maps) cost more per FLOP than wide ones,
  as they do. On CPU data two more terms follow the software stack: MB of conv outputs that the
  allocator page-faults each forward, and MB of weights that PyTorch's native convolution path
  streams once per image (:func:`carb.design.shapes.native_terms`).
- :class:`RooflinePrior` (the aggregate form, used when the knob columns are absent): a per-device
  roofline summed over the forward, ``c0 + sum_p flops_p / rate_p + c_b * bytes_MB + c_l * n_conv`` with one FLOP rate per
  precision ``p`` (``flops_p`` = flops where the row's precision is ``p``, else 0), a memory term on
  parameter + activation bytes and a per-layer launch cost. For energy the same form reads as
  energy per FLOP per precision, per byte moved, per launch and a static share; a precision never
  measured borrows the rate of the nearest measured one in bits (flagged outside the domain by
  screening; the layer form keeps the row's own bytes and CPU convolution path: fitted on the CPU
  reference's fp32 rows alone, it predicts the bf16 rows with R2 0.91, 0.37 if they were taken for fp32).
  With a device probe of the rows' device (``device_probe``, :mod:`carb.model.layer_cost`) the layer form
  swaps the stand-in's convolution time for the unmeasured precision's own, timed on single layers:
  bf16 R2 0.96 and fp16 0.98 on the same split (fp16 -0.65 without it).

On zoo rows (named networks with the layer table's per-kind columns, :mod:`carb.design.zoo_features`) the layer
roofline has a third form, ``kinds``: ``c0 + sum_p sum_k f_kp * flops_<kind>_p + sum_k b_k * bytes_<kind>_MB + c_o *
n_ops + c_w * weights_linear_MB + c_v * weights_conv_MB`` (compute kinds per precision, memory-bound kinds shared;
the last terms the bytes of the fully connected layers' and the convolutions' weights, read once a forward whatever
the batch: at batch 1-2 the former are most of AlexNet's and VGG's time on a CPU, which FLOPs that grow with the
batch cannot say; the latter eager PyTorch reorders into oneDNN's blocked layout on every forward, about 0.2 ms per
MB on the Zen 4 VM, most of Wide ResNet-50's batch-1 time at 96 px). On CPU rows the memory-bound
kinds that compute on each element are counted in fp32-equivalent MB (a bf16 pass costs what an fp32 one does,
:attr:`LayerRooflinePrior.PER_ELEMENT_KINDS`), and concatenations and copies are left to the per-operator cost
(:attr:`LayerRooflinePrior.UNPRICED_KINDS`). The form is kept only when its leave-one-family-out error is below
:attr:`LayerRooflinePrior.RICHER_GAIN` x the aggregate form's.

On a GPU (every row ``device_kind == "cuda"``, setting ``overlap_k``) the latency prior is not the sum of
its terms but a smooth maximum of the host-side ones (constant, launches) and the device work: PyTorch
launches kernels asynchronously, so launch time and GPU time overlap. On the shipped H200 data, trained on
batch <= 32 and scored on 64-256, the prior alone goes from R2 0.69 (sum) to 0.97 (``k = 4``). The energy
prior on a GPU (``static_power``) adds ``P_static x time``: the board's static power for as long as the
batch takes, the time from a latency prior fitted on the same rows (H200: ``P_static`` 95-112 W; batch
split, prior alone, R2 0.96 -> 0.98).

Every prior is monotone non-decreasing in batch size, FLOPs and activation bytes by construction
(non-negative coefficients on non-decreasing inputs; a smooth maximum of two such sums is too), except the CPU native-path term: PyTorch moves
1 x 1 convolutions from its per-image path to oneDNN at batch 16, and measured latency drops there too.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from carb.design.arch import BYTES_PER_ELEMENT, PRECISION_BITS, lookup
from carb.design.identity import ARCH_RECORD, architecture_keys, is_resnet
from carb.design.shapes import (
    SHAPE_INPUTS,
    architectures,
    gemm_terms,
    large_output_MB,
    max_im2col_MB,
    native_terms,
    onednn_precisions,
)
from carb.errors import ConfigError, DatasetError
from carb.model.nnls import fit_overlap, nnls_relative, smooth_max  # noqa: F401  (nnls_relative re-exported)

#: Raw columns the priors read.
PRIOR_INPUTS: tuple[str, ...] = ("flops", "param_size_MB", "max_activation_MB", "total_activation_MB", "n_conv",
                                 "batch_size", "input_size", "precision")
#: Knob columns the layer roofline reads when present (the identity columns the shape walk does not require,
#: ``stages`` and the inner width, optional).
LAYER_INPUTS: tuple[str, ...] = (*SHAPE_INPUTS, *(c for c in ARCH_RECORD if c not in SHAPE_INPUTS))
#: Smallest value a prior returns (target units): costs are positive.
TINY = 1e-9


def _num(X: pd.DataFrame, col: str) -> np.ndarray:
    if col not in X.columns:
        raise DatasetError(f"physics prior needs column {col!r}; the data lacks it")
    return pd.to_numeric(X[col], errors="coerce").to_numpy(float)


def input_MB(X: pd.DataFrame) -> np.ndarray:
    """Bytes of the input batch ``(B, 3, H, H)`` at the row's precision, MB; shape (n,)."""
    bits = lookup(X["precision"].astype(str), PRECISION_BITS)
    size = _num(X, "input_size")
    return _num(X, "batch_size") * 3.0 * size * size * bits / 8.0 / 2.0**20


def grouped_cv_error(A: np.ndarray, y: np.ndarray, groups: np.ndarray, n_splits: int = 5,
                     host: np.ndarray | None = None, overlap_k: float | None = None) -> float:
    """Mean |log(pred / y)| of :func:`nnls_relative` fits (with ``overlap_k``: :func:`fit_overlap` fits
    and :func:`smooth_max` predictions, ``host`` the host-side columns) on grouped folds (no group in
    both the fitting and the scored rows). A: (n, k) design, y: (n,) targets, groups: (n,) integer labels."""
    from sklearn.model_selection import GroupKFold

    ok = np.isfinite(y) & (y > 0) & np.isfinite(A).all(axis=1)
    A, y, groups = A[ok], y[ok], groups[ok]
    errs = []
    for tr, te in GroupKFold(n_splits=min(n_splits, len(np.unique(groups)))).split(A, y, groups):
        try:
            c = nnls_relative(A[tr], y[tr])
            if overlap_k:
                c = fit_overlap(A[tr], y[tr], host, overlap_k, c0=c)
        except DatasetError:
            continue
        pred = smooth_max(A[te], c, host, overlap_k) if overlap_k else A[te] @ c
        errs.append(np.abs(np.log(np.maximum(pred, TINY) / y[te])))
    return float(np.mean(np.concatenate(errs))) if errs else float("inf")


class _Prior:
    """Shared contract: ``fit(X, y) -> self``; ``predict(X) -> (n,) array`` in target units;
    ``coef_`` the fitted coefficients by name; ``train_mape_`` the prior alone on its training rows."""

    names: tuple[str, ...] = ()

    def design(self, X: pd.DataFrame) -> np.ndarray:
        raise NotImplementedError

    def host_columns(self) -> np.ndarray:
        """(p,) bool: the design columns that are host-side costs in the overlapped form (the constant,
        per convolution / per operator launches); the others are device work."""
        return np.array([n == "const" or n.startswith(("per_conv", "per_op")) for n in self.column_names()])

    def _combine(self, D: np.ndarray) -> np.ndarray:
        """Cost of design rows ``D`` (n, p): their sum ``D @ c``, or with ``overlap_k_`` the smooth
        maximum of the host-side and the device-side sums (:func:`carb.model.nnls.smooth_max`)."""
        k = getattr(self, "overlap_k_", None)   # absent on priors pickled before it existed
        if not k:
            return D @ self.coef_values_
        return smooth_max(D, self.coef_values_, self.host_columns(), k)

    def fit(self, X: pd.DataFrame, y: Any) -> _Prior:
        yv = np.asarray(y, dtype=float)
        self._learn_columns(X)
        return self._solve(X, yv)

    def _solve(self, X: pd.DataFrame, yv: np.ndarray) -> _Prior:
        """Fit the coefficients on the design of ``X`` (columns already learned); shape of yv (n,)."""
        A = self.design(X)
        self.coef_values_ = nnls_relative(A, yv)
        k = getattr(self, "overlap_k_", None)
        if k:
            self.coef_values_ = fit_overlap(A, yv, self.host_columns(), k, c0=self.coef_values_)
        self.coef_ = dict(zip(self.column_names(), map(float, self.coef_values_)))
        ok = np.isfinite(yv) & (yv > 0)
        self.train_mape_ = float(np.mean(np.abs(self.predict(X)[ok] / yv[ok] - 1.0)))
        return self

    def _learn_columns(self, X: pd.DataFrame) -> None:
        """Hook for priors whose design depends on the data (the precisions seen)."""

    def column_names(self) -> list[str]:
        return list(self.names)

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.maximum(self._combine(self.design(X)), TINY)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": type(self).__name__, "coef": dict(self.coef_), "train_mape": self.train_mape_}


class MemoryPrior(_Prior):
    """Peak memory (MB) = c0 + c_p * param_size_MB + c_a * max_activation_MB + c_i * input_MB
    [+ c_w * max_im2col_MB]: the last term, the largest im2col input of the forward
    (:func:`carb.design.shapes.max_im2col_MB`, a convolution's GEMM workspace), when the rows carry
    the knob columns of valid networks and it lowers the error on architectures the fit did not see
    (grouped cross-validation, as the layer roofline earns its form); ``form_reason_`` says why not."""

    names = ("const_MB", "per_param_MB", "per_max_activation_MB", "per_input_MB")
    IM2COL = "per_max_im2col_MB"
    #: The im2col term is kept only when its grouped cross-validated error is below this share of the
    #: error without it.
    RICHER_GAIN = 0.95

    #: Name of the activation coefficient on zoo rows: the tracer's liveness peak (``peak_live_MB``).
    LIVE = "per_peak_live_MB"

    def _learn_columns(self, X: pd.DataFrame) -> None:
        self.im2col_ = False
        # zoo rows (a layer table, no ResNet knobs): the liveness peak instead of a multiple of the largest output
        self.live_ = "peak_live_MB" in X.columns and (not is_resnet(X) or layer_rows(X))

    def fit(self, X: pd.DataFrame, y: Any) -> MemoryPrior:
        yv = np.asarray(y, dtype=float)
        self._learn_columns(X)
        self.im2col_, self.form_reason_, self.cv_error_ = self._choose_im2col(X, yv)
        return self._solve(X, yv)

    def _choose_im2col(self, X: pd.DataFrame, yv: np.ndarray) -> tuple[bool, str, dict[str, float]]:
        """``(use the im2col term, why not, grouped CV errors)``: the term is used when the knobs name
        valid networks and, over 3 or more architectures, its leave-architectures-out mean |log error|
        is below :data:`RICHER_GAIN` x the error without it."""
        try:
            max_im2col_MB(X)
        except (DatasetError, ConfigError) as e:   # no knobs, or knobs that name no valid network
            return False, str(e), {}
        arch = [c for c in LAYER_INPUTS if c in X.columns and c not in ("batch_size", "precision")]
        groups = pd.factorize(pd.Series(list(X[arch].astype(str).itertuples(index=False, name=None))))[0]
        if len(np.unique(groups)) < 3:
            return True, "fewer than 3 architectures: not cross-validated", {}
        err = {}
        for use in (True, False):
            self.im2col_ = use
            err["im2col" if use else "without"] = grouped_cv_error(self.design(X), yv, groups)
        if err["im2col"] < self.RICHER_GAIN * err["without"]:
            return True, "", err
        return False, (f"im2col term not better on unseen architectures (grouped CV mean |log error| "
                       f"{err['im2col']:.3f} vs {err['without']:.3f} without)"), err

    def column_names(self) -> list[str]:
        names = list(self.names)
        if getattr(self, "live_", False):
            names[2] = self.LIVE
        return [*names, self.IM2COL] if getattr(self, "im2col_", False) else names

    def design(self, X: pd.DataFrame) -> np.ndarray:
        n = len(X)
        act = "peak_live_MB" if getattr(self, "live_", False) else "max_activation_MB"   # absent on old pickles
        cols = [np.ones(n), _num(X, "param_size_MB"), _num(X, act), input_MB(X)]
        if getattr(self, "im2col_", False):   # absent on priors pickled before the term existed
            cols.append(max_im2col_MB(X).to_numpy(float))
        return np.column_stack(cols)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["im2col"] = bool(getattr(self, "im2col_", False))
        if getattr(self, "form_reason_", ""):
            out["im2col_reason"] = self.form_reason_
        return out

    @staticmethod
    def floor_MB(X: pd.DataFrame) -> np.ndarray:
        """Parameter bytes (MB): no forward needs less memory than its weights; shape (n,)."""
        return _num(X, "param_size_MB")


class RooflinePrior(_Prior):
    """Cost = c0 + sum_p flops_p * k_p + c_b * (param_size_MB + total_activation_MB) + c_l * n_conv,
    with one FLOP coefficient per precision seen in training (``k_p`` = 1 / rate for latency)."""

    def _learn_columns(self, X: pd.DataFrame) -> None:
        self.precisions_ = sorted(X["precision"].astype(str).unique())

    def column_names(self) -> list[str]:
        return ["const", *[f"per_flop_{p}" for p in self.precisions_], "per_MB", "per_conv"]

    def design(self, X: pd.DataFrame) -> np.ndarray:
        n = len(X)
        flops = _num(X, "flops")
        prec = X["precision"].astype(str).to_numpy()
        cols = [np.ones(n)]
        for p in self.precisions_:
            cols.append(np.where(prec == p, flops, 0.0))
        cols.append(_num(X, "param_size_MB") + _num(X, "total_activation_MB"))
        cols.append(_num(X, "n_conv"))
        return np.column_stack(cols)

    def stand_in(self, precision: str) -> str:
        """The measured precision whose per-FLOP cost an unmeasured one borrows: the nearest in bits
        (ties: the costlier). Nothing in the data says how fast an unmeasured precision runs (on
        this CPU fp16 is 30x slower than fp32, on a GPU with tensor cores it is faster), so
        screening flags such rows as outside the domain."""
        bits = PRECISION_BITS.get(precision, 32)
        k = dict(zip(self.precisions_, self.coef_values_[1:1 + len(self.precisions_)]))
        return min(self.precisions_, key=lambda p: (abs(PRECISION_BITS.get(p, 32) - bits), -k[p]))

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Cost per row; a precision not seen in training uses :meth:`stand_in`'s per-FLOP cost (divided
        by a layer roofline's ``tensor_speedup_`` for a 16-bit precision standing in for fp32 on tensor
        cores, :class:`LayerRooflinePrior`)."""
        return np.maximum(self._combine(self._predict_design(X)), TINY)

    def _predict_design(self, X: pd.DataFrame) -> np.ndarray:
        """The design :meth:`predict` combines: an unseen precision in its stand-in's columns, its
        multiply-adds divided by the tensor-core speed-up where that applies; shape (n, p)."""
        prec = X["precision"].astype(str).to_numpy()
        unseen = ~np.isin(prec, self.precisions_)
        if unseen.any():
            X = X.copy()
            X["precision"] = [self.stand_in(p) if u else p for p, u in zip(prec, unseen)]
        D = self.design(X)
        speedup = getattr(self, "tensor_speedup_", None)
        fast = unseen & np.isin(prec, ("bf16", "fp16")) & (X["precision"].astype(str).to_numpy() == "fp32")
        if speedup and fast.any() and "fp32" in self.precisions_:
            D[fast, 1 + list(self.precisions_).index("fp32")] /= speedup   # const, then one FLOPs column per precision
        return D

    def device_share(self, X: pd.DataFrame) -> np.ndarray | None:
        """Share of the device work in the overlapped prior's two parts, ``device / (host + device)``
        per row (n,), in [0, 1]: below 0.5 the host's launches take longer than the GPU's work (a
        launch-bound configuration). None for a prior that is not overlapped (its parts add up)."""
        if not getattr(self, "overlap_k_", None) or getattr(self, "form_", "aggregate") != "aggregate":
            return None
        D, h = self._predict_design(X), self.host_columns()
        c = self.coef_values_
        host, device = D[:, h] @ c[h], D[:, ~h] @ c[~h]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.clip(np.nan_to_num(device / (host + device), nan=0.0), 0.0, 1.0)


#: Why the overlapped (GPU latency) prior takes the aggregate form.
OVERLAP_AGGREGATE = ("overlapped form: the layer design's 8 terms per precision are not identified under the smooth "
                     "maximum (H200, trained on width <= 1: fp16 weight bytes at 0.1 ms/MB, 500x slower than HBM, "
                     "predicted 4x the latency of wide networks at small batch)")


class LayerRooflinePrior(RooflinePrior):
    """Cost = c0 + sum_p [k_p * MNK_p + m_p * M_p + o_p * ops_p + s_p * stem_MNK_p + b_in_p * im2col_MB_p
    + b_out_p * output_MB_p + b_w_p * weights_MB_p + b_e_p * elementwise_MB_p] [+ page-fault and
    native-path terms on CPU data] (sums over layers, :mod:`carb.design.shapes`; ``X_p`` is the term
    where the row's precision is ``p``, else 0: each precision runs kernels of its own, so even its byte
    costs are its own). Falls back to :class:`RooflinePrior`'s aggregate design (``form_ = "aggregate"``,
    ``form_reason_`` says why) when the training rows lack the knob columns or their knobs name no valid
    network."""

    PER_PRECISION = (("gemm_MNK", "per_MAC"), ("gemm_M", "per_out_pixel"), ("n_ops", "per_op"),
                     ("stem_MNK", "per_stem_MAC"), ("gemm_MK", "per_im2col_MB"), ("gemm_MN", "per_output_MB"),
                     ("gemm_NK", "per_weight_MB"), ("elementwise", "per_elementwise_MB"))
    SHARED: tuple[tuple[str, str], ...] = ()
    #: Terms counted in bytes at the row's precision (MB), not in elements.
    BYTE_TERMS = frozenset({"gemm_MK", "gemm_MN", "gemm_NK", "elementwise"})
    #: The layout of priors fitted before the stem term and per-precision byte costs (pickled models).
    LEGACY_PER_PRECISION = (("gemm_MNK", "per_MAC"), ("gemm_M", "per_out_pixel"), ("n_ops", "per_op"))
    LEGACY_SHARED = (("gemm_MK", "per_im2col_MB"), ("gemm_MN", "per_output_MB"), ("gemm_NK", "per_weight_MB"),
                     ("elementwise", "per_elementwise_MB"))
    #: Name of the coefficient on :func:`carb.design.shapes.large_output_MB` (CPU rows only).
    LARGE = "per_fresh_page_MB"
    #: Names of the coefficients on :func:`carb.design.shapes.native_terms` (CPU rows only), per precision:
    #: weights streamed per image and aliased multiply-adds (fp32 runs MKL's GEMM per image, fp16 without
    #: AVX-512 FP16 a fallback GEMM; one shared rate, learned from fp16 alone when a split holds only
    #: batches >= 16, made fp32 at batch 1-8 predictions 7x too slow).
    NATIVE = "per_native_weight_MB"
    NATIVE_ALIASED = "per_native_aliased_MAC"

    #: Memory-bound kinds the per-kind form prices per element on CPU rows (their MB at 4 bytes per element,
    #: whatever the precision): they compute on each element in caches, a 16-bit one converted to fp32 and back,
    #: so a bf16 pass costs at least what an fp32 one does (the Zen 4 VM's device probe: element-wise 0.011 ms per
    #: MB at fp32, 0.040 at bf16; activations 0.006 and 0.048). Copies are not priced per MB (:data:`UNPRICED_KINDS`).
    PER_ELEMENT_KINDS: tuple[str, ...] = ("conv_depthwise", "norm", "activation", "elementwise", "pool")
    #: Memory-bound kinds the per-kind form leaves to the per-operator cost: concatenations and copies. Fitted on
    #: the other families of the CPU zoo the cost per MB of concatenations came out 15x the device probe's
    #: element-wise one (it took up GoogLeNet's and SqueezeNet's bf16 pooling), and DenseNet, whose concatenations
    #: grow with the square of its depth, was predicted 25 % slow; copies (clone, pad, roll, index) came out
    #: 0.30-0.43 ms per MB, about 30x the probe's fp32 element-wise pass, which put Swin's window partitions and
    #: shifts (96 MB a forward at fp32) at a fifth of its time and Swin 25-34 % slow. Without either term the
    #: leave-one-family-out check is better (Swin 42 -> 9 % with the convolution-weight term, worst family 20 %).
    UNPRICED_KINDS: tuple[str, ...] = ("concat", "copy")
    #: Most folds of the per-kind form's leave-families-out check (one family per fold up to this many groups).
    KIND_CV_FOLDS = 64

    #: Multiply-add terms a tensor-core speed-up applies to (an unmeasured 16-bit precision on a GPU).
    MAC_TERMS = frozenset({"gemm_MNK", "stem_MNK"})

    def __init__(self, large_alloc_MB: float | None = None, channel_block: int = 1, cpu_dispatch: bool = False,
                 device_probe: bool = False, tensor_core_speedup: float | None = None,
                 overlap_k: float | None = None, static_power: bool = False,
                 time_settings: dict[str, Any] | None = None, op_cost_per_precision: bool = False,
                 bf16_elementwise_ratio: float = 1.0, bf16_small_conv_MMAC: float | None = None,
                 linear_rate_kinds: tuple[str, ...] | list[str] | None = None, probe_flop_floor: bool = False,
                 cpu_op_cost_per_precision: bool = False):
        """large_alloc_MB: on CPU data (every training row ``device_kind == "cpu"``), add a cost per
        MB of convolution outputs at least this large (they get fresh pages every forward: glibc maps
        allocations of 32 MiB and more); None = no such term. channel_block: channels padded to a
        multiple of this in the CPU convolution library's blocked layout (oneDNN with AVX-512: 16).
        cpu_dispatch: on CPU data whose rows record their torch ``threads``, add a cost per MB of
        weights streamed by PyTorch's native convolution path, which takes some layers per image
        (:func:`carb.design.shapes.native_terms`; the precisions oneDNN runs come from the
        rows' device fingerprint). device_probe: with ``cpu_dispatch``, on the rows of one device that
        has a device probe (:func:`carb.data.probes.load_probe`), predict a precision no row was
        measured at from the probe's single-layer timings (:meth:`predict`). tensor_core_speedup: on
        CUDA data of compute capability 8.0 or later (every row), a 16-bit precision no row was measured at
        runs the fp32 stand-in's multiply-adds this many times faster (PyTorch runs fp32 convolutions on
        TF32 tensor cores by default; NVIDIA's dense FP16/BF16 tensor peak is 2x the TF32 one since Ampere);
        its other terms (launches, bytes at its own width) are the stand-in's. None = the stand-in's rate.
        overlap_k: on CUDA data (every row), the cost is the smooth maximum ``(h**k + g**k) ** (1/k)`` of
        the host-side terms ``h`` (constant, launches per convolution or operator) and the device work ``g``
        (the other terms) instead of their sum: PyTorch launches kernels asynchronously, so the host's
        launch time and the GPU's work overlap, and a small batch that is launch-bound costs what the
        launches cost. Fitted on log error (:func:`carb.model.nnls.fit_overlap`) from the additive
        solution. Fitted on the sum instead, the launch-bound rows of small batches inflate the launch
        terms and deflate the per-FLOP ones, and latency grows too slowly with batch size. None = the sum.
        The overlapped prior takes the aggregate form (:data:`OVERLAP_AGGREGATE` says why).
        static_power: energy on CUDA data, fitted with the rows' measured latency (``fit(..., latency=)``):
        add ``P_static x time``, the power a GPU draws whatever it runs (clocks, memory, leakage) times how
        long the batch takes, with ``time`` from a latency prior (``time_settings``: the latency prior's
        settings) fitted on the same rows and ``P_static`` in W fitted with the other terms. Without it the
        energy of a batch is a sum over its work, and a launch-bound batch, whose GPU idles between
        kernels while still drawing its static power, is charged per launch instead of per millisecond.
        On the shipped H200 data ``P_static`` comes out near 100 W on every split.
        op_cost_per_precision: the per-kind form (zoo rows) prices each operator call at a cost of the row's
        precision (``per_op_<precision>``), as it prices FLOPs, instead of one cost shared by every precision:
        an eager call dispatches a kernel of its precision, and on the Zen 4 VM a bf16 call of the memory-bound
        kinds converts every element to fp32 and back (:data:`PER_ELEMENT_KINDS`). Shared, the bf16 calls'
        extra cost lands in the bf16 FLOP costs, and a network of many cheap calls is under-priced at bf16
        and one of few large ones (DenseNet) over-priced at its large input sizes. False (the default,
        ``prior.op_cost_per_precision``): one shared cost; on the CPU zoo's leave-one-family-out the cascade
        with it is better pooled but worse on its worst family (docs/MODEL.md).
        bf16_elementwise_ratio: the per-kind form on CPU rows prices a bf16 row's element-wise MB
        (``bytes_elementwise_MB``, already counted per element at 4 bytes) this many times an fp32 element's
        cost: the Zen 4 VM's quiet timings (``scripts/data/cat_cost_34cc4b132c.csv``) put a bf16 add at about 3x
        fp32's cost per MB of output, 1.5x per element. 1.0 (the default): a bf16 element costs an fp32 one's.
        bf16_small_conv_MMAC: the per-kind form on CPU rows with bf16 rows adds a cost per FLOP
        (``per_flop_conv_small_bf16``, fitted, >= 0) of a bf16 row's convolutions (regular, grouped, pointwise) of
        fewer than this many million multiply-adds per image (:func:`carb.design.zoo_features.small_conv_flops`):
        the quiet timings put SqueezeNet's 3 MMAC fire squeeze at 25 GMAC/s at bf16 against 34 at fp32, while
        28-116 MMAC convolutions run 1.6-2x faster at bf16. None (the default here; ``prior.bf16_small_conv_MMAC``
        is 10): no such term.
        linear_rate_kinds: the per-kind form on CPU rows prices the FLOPs of these kinds at the linear layers'
        per-FLOP cost (``["matmul"]``: the linear column of each precision holds both, its own column dropped): a
        kind with few training FLOPs gets its cost from a kind the device runs alike (an explicit matrix product
        is the same kind of GEMM) instead of a fit it cannot support (``prior.linear_rate_kinds``, whose default is
        ``[matmul]``). None (the default here) or []: every kind its own cost.
        probe_flop_floor: the per-kind form on CPU rows of one device with a device probe bounds each per-FLOP
        cost of a precision below by the fastest regular convolution the probe timed at that precision
        (:func:`probe_flop_floor`; ``prior.probe_flop_floor``). False: 0.
        cpu_op_cost_per_precision: ``op_cost_per_precision`` on CPU rows only (``prior.cpu_op_cost_per_precision``,
        whose default is true: on the Xeon zoo fp32 calls cost more than bf16 ones, and AlexNet's and ConvNeXt's
        fp32 rows were 0.35 in log slow with one shared call cost). False (the default here): as
        ``op_cost_per_precision``."""
        self.large_alloc_MB = large_alloc_MB
        self.channel_block = channel_block
        self.cpu_dispatch = cpu_dispatch
        self.device_probe = device_probe
        self.tensor_core_speedup = tensor_core_speedup
        self.overlap_k = overlap_k
        self.static_power = static_power
        self.time_settings = time_settings
        self.op_cost_per_precision = op_cost_per_precision
        self.bf16_elementwise_ratio = bf16_elementwise_ratio
        self.bf16_small_conv_MMAC = bf16_small_conv_MMAC
        self.linear_rate_kinds = linear_rate_kinds
        self.probe_flop_floor = probe_flop_floor
        self.cpu_op_cost_per_precision = cpu_op_cost_per_precision

    def _learn_columns(self, X: pd.DataFrame) -> None:
        super()._learn_columns(X)
        cpu = "device_kind" in X.columns and len(X) > 0 and bool((X["device_kind"].astype(str) == "cpu").all())
        self.large_alloc_ = float(self.large_alloc_MB) if (self.large_alloc_MB and cpu) else None
        self.per_precision_terms_ = self.PER_PRECISION
        self.shared_terms_ = self.SHARED
        self.native_ = native_dispatch(X) if (self.cpu_dispatch and cpu) else None
        from carb.design.zoo_features import BYTE_KINDS, ZOO_WEIGHT_FEATURES

        self.kind_weights_ = ZOO_WEIGHT_FEATURES   # the per-kind form's weight terms (read by it alone)
        self.kind_bytes_ = tuple(k for k in BYTE_KINDS if k not in self.UNPRICED_KINDS)
        self.kind_per_element_ = self.PER_ELEMENT_KINDS if cpu else ()
        self.kind_ops_per_precision_ = bool(self.op_cost_per_precision) or bool(
            cpu and getattr(self, "cpu_op_cost_per_precision", False))
        self.kind_bf16_elementwise_ = float(getattr(self, "bf16_elementwise_ratio", 1.0)) if cpu else 1.0
        small = getattr(self, "bf16_small_conv_MMAC", None)
        self.kind_small_conv_ = (float(small) if small and cpu and "bf16" in self.precisions_ else None)
        self.kind_floor_ = probe_flop_floor(X) if (getattr(self, "probe_flop_floor", False) and cpu) else {}
        self.kind_ties_ = ({k: "linear" for k in (getattr(self, "linear_rate_kinds", None) or ()) if k != "linear"}
                           if cpu else {})   # CPU zoo rows only: the GPU zoo cascades keep every kind's cost
        self.probe_, self.probe_reason_ = fit_device_probe(X, self.native_) if self.device_probe else (None, "off")
        self.tensor_speedup_ = (float(self.tensor_core_speedup)
                                if self.tensor_core_speedup and tensor_core_device(X) else None)
        cuda = len(X) > 0 and "device_kind" in X.columns and bool((X["device_kind"].astype(str) == "cuda").all())
        self.overlap_k_ = float(self.overlap_k) if (getattr(self, "overlap_k", None) and cuda) else None

    #: The layer form is kept only when its grouped cross-validated error is below this share of the
    #: aggregate form's (a richer form must earn its place on architectures it did not see).
    RICHER_GAIN = 0.95

    def fit(self, X: pd.DataFrame, y: Any, latency: Any = None) -> LayerRooflinePrior:
        """Fit on rows ``X`` and costs ``y`` (n,); ``latency`` (n,), ms, the rows' measured latency, is
        read only with ``static_power`` (energy: the time the static power is drawn for)."""
        yv = np.asarray(y, dtype=float)
        self._learn_columns(X)
        self.time_prior_ = self._fit_time(X, latency)
        self.form_, self.form_reason_, self.cv_error_ = self._choose_form(X, yv)
        return self._solve(X, yv)

    #: Fewest rows with a measured latency the static-power term's time prior is fitted on.
    MIN_TIME_ROWS = 10

    def _fit_time(self, X: pd.DataFrame, latency: Any) -> _Prior | None:
        """The latency prior behind ``P_static x time`` (``static_power``, CUDA rows, measured latency
        on >= :data:`MIN_TIME_ROWS` rows), else None."""
        cuda = len(X) > 0 and "device_kind" in X.columns and bool((X["device_kind"].astype(str) == "cuda").all())
        if not (getattr(self, "static_power", False) and cuda and latency is not None):
            return None
        lat = np.asarray(latency, dtype=float)
        ok = np.isfinite(lat) & (lat > 0)
        if ok.sum() < self.MIN_TIME_ROWS:
            return None
        return make_prior("latency_ms", **dict(self.time_settings or {})).fit(X[ok], lat[ok])

    def static_s(self, X: pd.DataFrame) -> np.ndarray | None:
        """Time (s) per row the static power is drawn for: the time prior's latency (n,), or None
        without the term. An unmeasured precision takes the time prior's own prediction for it."""
        tp = getattr(self, "time_prior_", None)   # absent on priors pickled before the term existed
        return None if tp is None else tp.predict(X) / 1e3

    def _fit_design(self, X: pd.DataFrame) -> np.ndarray:
        """The design the coefficients are fitted on: :meth:`design`, and the static-power column last."""
        D = self.design(X)
        st = self.static_s(X)
        return D if st is None else np.column_stack([D, st])

    def _solve(self, X: pd.DataFrame, yv: np.ndarray) -> LayerRooflinePrior:
        """As :meth:`_Prior._solve`; with the static-power term its coefficient is ``static_W_`` (W) and
        ``coef_["static_W"]``, and :meth:`predict` adds ``static_W_ x static_s``."""
        if getattr(self, "time_prior_", None) is None:
            self.static_W_ = 0.0
            if self.form_ == "kinds" and getattr(self, "kind_floor_", None):
                return self._solve_floored(X, yv)
            return super()._solve(X, yv)
        c = nnls_relative(self._fit_design(X), yv)
        self.coef_values_, self.static_W_ = c[:-1], float(c[-1])
        self.coef_ = {**dict(zip(self.column_names(), map(float, self.coef_values_))), "static_W": self.static_W_}
        ok = np.isfinite(yv) & (yv > 0)
        self.train_mape_ = float(np.mean(np.abs(self.predict(X)[ok] / yv[ok] - 1.0)))
        return self

    def _solve_floored(self, X: pd.DataFrame, yv: np.ndarray) -> LayerRooflinePrior:
        """The per-kind form's coefficients with each ``per_flop_<kind>_<precision>`` at least ``kind_floor_``'s
        ms per FLOP of its precision (the extra bf16 small-convolution cost is not a rate: unbounded)."""
        names = self.column_names()
        floor = getattr(self, "kind_floor_", {})
        lower = np.array([floor.get(n.rsplit("_", 1)[-1], 0.0) if n.startswith("per_flop_")
                          and n != "per_flop_conv_small_bf16" else 0.0 for n in names])
        self.coef_values_ = nnls_relative(self.design(X), yv, lower=lower)
        self.coef_ = dict(zip(names, map(float, self.coef_values_)))
        ok = np.isfinite(yv) & (yv > 0)
        self.train_mape_ = float(np.mean(np.abs(self.predict(X)[ok] / yv[ok] - 1.0)))
        return self

    def _choose_form(self, X: pd.DataFrame, yv: np.ndarray) -> tuple[str, str, dict[str, float]]:
        """``(form, reason, cv errors)``: "layers" when the knobs name valid networks and the layer
        design's leave-architectures-out error (mean |log(pred / measured)| over grouped folds) is
        below :data:`RICHER_GAIN` x the aggregate design's; else "aggregate" and why."""
        try:
            gemm_terms(X)
        except (DatasetError, ConfigError) as e:   # no knobs, or knobs that name no valid network
            if zoo_kind_rows(X) and not getattr(self, "overlap_k_", None):
                return self._choose_kinds(X, yv)
            return "aggregate", str(e), {}
        if getattr(self, "overlap_k_", None):
            return "aggregate", OVERLAP_AGGREGATE, {}
        arch = [c for c in LAYER_INPUTS if c in X.columns and c not in ("batch_size",)]
        groups = pd.factorize(pd.Series(list(X[arch].astype(str).itertuples(index=False, name=None))))[0]
        if len(np.unique(groups)) < 3:
            return "layers", "fewer than 3 architectures: not cross-validated", {}
        err = {}
        for form in ("layers", "aggregate"):
            self.form_ = form
            err[form] = grouped_cv_error(self._fit_design(X), yv, groups, host=self.host_columns(),
                                         overlap_k=getattr(self, "overlap_k_", None))
        if err["layers"] < self.RICHER_GAIN * err["aggregate"]:
            return "layers", "", err
        return "aggregate", (f"layer form not better on unseen architectures (grouped CV mean |log error| "
                             f"{err['layers']:.3f} vs aggregate {err['aggregate']:.3f})"), err

    def _choose_kinds(self, X: pd.DataFrame, yv: np.ndarray) -> tuple[str, str, dict[str, float]]:
        """For zoo rows: ``"kinds"`` (:data:`KIND_TERMS`) when its leave-families-out error (mean |log error|
        over grouped folds, a family never in both; one family a fold, as the form is used: for a family never
        measured, up to :data:`KIND_CV_FOLDS` folds) is below :data:`RICHER_GAIN` x the aggregate form's, else
        ``"aggregate"`` and why. With 5 folds of about six families each, the rarer kinds' costs (attention,
        grouped convolutions) had no support in some folds, and the per-kind form lost on the CPU zoo's folds
        that held out DenseNet, GoogLeNet or SqueezeNet."""
        # zoo rows by family; in a combined dataset ResNet rows by structure (identity.architecture_keys)
        unit = X["family"].astype(str) if not is_resnet(X) else pd.Series(architecture_keys(X))
        groups = pd.factorize(unit)[0]
        if len(np.unique(groups)) < 3:
            return "aggregate", "per-kind form: fewer than 3 families, not cross-validated", {}
        err = {}
        for form in ("kinds", "aggregate"):
            self.form_ = form
            err[form] = grouped_cv_error(self._fit_design(X), yv, groups,
                                         n_splits=min(len(np.unique(groups)), self.KIND_CV_FOLDS))
        if err["kinds"] < self.RICHER_GAIN * err["aggregate"]:
            return "kinds", "", err
        return "aggregate", (f"per-kind form not better on unseen families (grouped CV mean |log error| "
                             f"{err['kinds']:.3f} vs aggregate {err['aggregate']:.3f})"), err

    def _kind_names(self) -> list[str]:
        """Coefficient names of the per-kind form: const, per precision a cost per FLOP of each compute kind,
        then a cost per MB of each memory-bound kind and per operator, then (fits since the term existed) a cost
        per MB of the weights of each :data:`carb.design.zoo_features.WEIGHT_KINDS` kind (read once a forward)."""
        from carb.design.zoo_features import BYTE_KINDS

        ops = ([f"per_op_{p}" for p in self.precisions_] if getattr(self, "kind_ops_per_precision_", False)
               else ["per_op"])   # absent on priors pickled before: one shared cost
        return ["const", *[f"per_flop_{k}_{p}" for p in self.precisions_ for k in self._flop_kinds()],
                *[f"per_MB_{k}" for k in getattr(self, "kind_bytes_", BYTE_KINDS)], *ops,
                *[f"per_{c}" for c in getattr(self, "kind_weights_", ())],   # absent on priors pickled before
                *(["per_flop_conv_small_bf16"] if getattr(self, "kind_small_conv_", None) else [])]

    def _kind_design(self, X: pd.DataFrame, prec: np.ndarray) -> np.ndarray:
        """(n, len(:meth:`_kind_names`)) design of zoo rows: FLOPs of each compute kind in the columns of the
        row's precision ``prec`` (n,), MB of each memory-bound kind and ``n_ops`` shared, then the MB of weights
        of :data:`carb.design.zoo_features.WEIGHT_KINDS` layers (batch-independent, :func:`weight_columns`)."""
        from carb.design.zoo_features import BYTE_KINDS, FLOP_KINDS

        cols = [np.ones(len(X))]
        ties = getattr(self, "kind_ties_", {})   # absent on priors pickled before: no ties
        flops = {k: _num(X, f"flops_{k}") for k in FLOP_KINDS}
        for k, into in ties.items():   # a tied kind's FLOPs in its partner's column
            flops[into] = flops[into] + flops[k]
        for p in self.precisions_:
            mine = prec == p
            cols += [np.where(mine, flops[k], 0.0) for k in self._flop_kinds()]
        per_element = getattr(self, "kind_per_element_", ())   # these three absent on priors pickled before
        fp32_equivalent = 4.0 / lookup(X["precision"].astype(str), BYTES_PER_ELEMENT)
        cols += [_num(X, f"bytes_{k}_MB") * (fp32_equivalent if k in per_element else 1.0)
                 * (self._bf16_elementwise(X) if k == "elementwise" else 1.0)
                 for k in getattr(self, "kind_bytes_", BYTE_KINDS)]
        if getattr(self, "kind_ops_per_precision_", False):   # each call at its precision's cost (``prec``'s slot)
            cols += [np.where(prec == p, _num(X, "n_ops"), 0.0) for p in self.precisions_]
        else:
            cols.append(_num(X, "n_ops"))
        weights = getattr(self, "kind_weights_", ())
        if weights:
            cols += list(weight_columns(X, weights).T)
        if getattr(self, "kind_small_conv_", None):   # bf16 rows' small convolutions (``prec``'s slot)
            from carb.design.zoo_features import small_conv_flops

            cols.append(np.where(prec == "bf16", small_conv_flops(X, self.kind_small_conv_), 0.0))
        return np.column_stack(cols)

    def _flop_kinds(self) -> tuple[str, ...]:
        """The compute kinds with a per-FLOP column of their own: :data:`carb.design.zoo_features.FLOP_KINDS` less
        the tied ones (``kind_ties_``)."""
        from carb.design.zoo_features import FLOP_KINDS

        ties = getattr(self, "kind_ties_", {})
        return tuple(k for k in FLOP_KINDS if k not in ties)

    def _bf16_elementwise(self, X: pd.DataFrame) -> np.ndarray | float:
        """Multiplier (n,) of the element-wise MB column: ``kind_bf16_elementwise_`` on bf16 rows, 1 elsewhere
        (1.0 on priors pickled before the setting, and off CPU data)."""
        ratio = getattr(self, "kind_bf16_elementwise_", 1.0)
        if ratio == 1.0:
            return 1.0
        return np.where(X["precision"].astype(str).to_numpy() == "bf16", ratio, 1.0)

    def _terms(self) -> tuple[tuple, tuple]:
        """(per-precision terms, shared terms) of this fit; priors pickled before both existed use the legacy layout."""
        return (getattr(self, "per_precision_terms_", self.LEGACY_PER_PRECISION),
                getattr(self, "shared_terms_", self.LEGACY_SHARED))

    def column_names(self) -> list[str]:
        if self.form_ == "aggregate":
            return super().column_names()
        if self.form_ == "kinds":
            return self._kind_names()
        per, shared = self._terms()
        return ["const", *[f"{name}_{p}" for p in self.precisions_ for _, name in per],
                *[name for _, name in shared], *([self.LARGE] if getattr(self, "large_alloc_", None) else []),
                *([f"{name}_{p}" for p in self.precisions_ for name in (self.NATIVE, self.NATIVE_ALIASED)]
                  if getattr(self, "native_", None) else [])]

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Cost per row. A precision not seen in training takes :meth:`stand_in`'s coefficients, but its
        own bytes per element and its own convolution path (a 16-bit row moves half the bytes of an fp32
        row whatever its coefficients, and on a CPU it may run oneDNN where fp32 ran PyTorch's native path).
        With a device probe of both (``probe_``), it is the stand-in's prediction for the same network with
        the stand-in's convolution time replaced by its own, both from the probe
        (:meth:`carb.model.layer_cost.LayerCostModel.network_ms`): ``max(prior_s - conv_s, 0) + conv_p``."""
        st = self.static_s(X)
        base = self._predict_work(X)
        return base if st is None else base + float(getattr(self, "static_W_", 0.0)) * st

    def _predict_work(self, X: pd.DataFrame) -> np.ndarray:
        """:meth:`predict` without the static-power term (n,)."""
        if self.form_ == "aggregate":
            return super().predict(X)
        prec = X["precision"].astype(str).to_numpy()
        unseen = ~np.isin(prec, self.precisions_)
        if self.form_ == "kinds":   # an unmeasured precision in its stand-in's columns (flagged outside by screening)
            slot = np.array([self.stand_in(p) if u else p for p, u in zip(prec, unseen)], dtype=object)
            return np.maximum(self._combine(self._kind_design(X, slot)), TINY)
        slot = np.array([self.stand_in(p) if u else p for p, u in zip(prec, unseen)], dtype=object) if unseen.any() else None
        D = self.design(X, slot=slot)
        speedup = getattr(self, "tensor_speedup_", None)   # absent on priors pickled before it existed
        if speedup and unseen.any():
            per, _ = self._terms()
            fast = unseen & np.isin(prec, ("bf16", "fp16")) & (slot == "fp32")
            if fast.any() and "fp32" in self.precisions_:
                base = 1 + self.precisions_.index("fp32") * len(per)
                for j, (term, _) in enumerate(per):
                    if term in self.MAC_TERMS:
                        D[fast, base + j] /= speedup
        out = np.maximum(self._combine(D), TINY)
        probe = getattr(self, "probe_", None)
        if probe is not None and unseen.any():
            for p in np.unique(prec[unseen]):
                s = self.stand_in(p)
                if p not in probe.precisions_ or s not in probe.precisions_:
                    continue
                rows = np.flatnonzero(prec == p)
                Xp = X.iloc[rows]
                Xs = Xp.assign(precision=s)
                base = self._combine(self.design(Xs))
                out[rows] = np.maximum(base - probe.network_ms(Xs, s), 0.0) + probe.network_ms(Xp, p)
        return out

    def design(self, X: pd.DataFrame, slot: np.ndarray | None = None) -> np.ndarray:
        """(n, 1 + 8 * precisions [+ 1 page-fault term] [+ 1 + precisions native-path terms]) non-negative design; on
        GPU data non-decreasing in batch size (on CPU data the native-path term is not: see
        :func:`carb.design.shapes.native_terms`)."""
        if self.form_ == "aggregate":
            return super().design(X)
        if self.form_ == "kinds":
            return self._kind_design(X, X["precision"].astype(str).to_numpy() if slot is None else np.asarray(slot))
        per, shared = self._terms()
        arch = architectures(X)
        g = gemm_terms(X, arch=arch)
        prec = X["precision"].astype(str).to_numpy() if slot is None else np.asarray(slot)   # whose coefficients
        mb = lookup(X["precision"].astype(str), BYTES_PER_ELEMENT) / 2.0**20       # the row's own bytes
        legacy = per is self.LEGACY_PER_PRECISION

        values: dict[str, np.ndarray] = {}   # each term read once, each precision's rows found once

        def column(term: str) -> np.ndarray:
            if term not in values:
                v = g[term].to_numpy(float)
                values[term] = v * mb if (term in self.BYTE_TERMS or legacy and term in dict(shared)) else v
            return values[term]

        mine = {p: prec == p for p in self.precisions_}
        cols = [np.ones(len(X))]
        for p in self.precisions_:
            for term, _ in per:
                cols.append(np.where(mine[p], column(term), 0.0))
        for term, _ in shared:
            cols.append(column(term))
        if getattr(self, "large_alloc_", None):   # absent on priors pickled before the term existed
            cols.append(large_output_MB(X, self.large_alloc_, self.channel_block, arch=arch).to_numpy(float))
        native = getattr(self, "native_", None)
        if native:
            nt = native_terms(X, native["threads"], native["onednn"], arch=arch)
            for p in self.precisions_:
                for term in ("native_weight_MB", "native_aliased_MAC"):
                    cols.append(np.where(mine[p], nt[term].to_numpy(float), 0.0))
        return np.column_stack(cols)

    def stand_in(self, precision: str) -> str:
        """As :meth:`RooflinePrior.stand_in`, ties broken by the costlier per-MAC coefficient."""
        if self.form_ == "aggregate":
            return super().stand_in(precision)
        if self.form_ == "kinds":
            bits = PRECISION_BITS.get(precision, 32)
            return min(self.precisions_, key=lambda p: abs(PRECISION_BITS.get(p, 32) - bits))
        bits = PRECISION_BITS.get(precision, 32)
        k = {p: self.coef_.get(f"per_MAC_{p}", 0.0) for p in self.precisions_}
        return min(self.precisions_, key=lambda p: (abs(PRECISION_BITS.get(p, 32) - bits), -k[p]))

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "form": self.form_, "form_reason": self.form_reason_,
                "cv_error": dict(self.cv_error_), "large_alloc_MB": getattr(self, "large_alloc_", None),
                "native_dispatch": getattr(self, "native_", None),
                "tensor_core_speedup": getattr(self, "tensor_speedup_", None),
                "overlap_k": getattr(self, "overlap_k_", None),
                "static_W": (float(self.static_W_) if getattr(self, "time_prior_", None) is not None else None),
                "device_probe": (self.probe_.to_dict() if getattr(self, "probe_", None) is not None
                                 else getattr(self, "probe_reason_", "off"))}


def weight_columns(X: pd.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    """(n, len(columns)) MB of weights per row (:data:`carb.design.zoo_features.ZOO_WEIGHT_FEATURES`,
    batch-independent): ``X``'s own columns where present and finite, else the row's layer table's
    (:func:`carb.design.zoo_features.layer_columns`), else 0 (a network nobody can trace adds no weight term)."""
    out = np.column_stack([pd.to_numeric(X[c], errors="coerce").to_numpy(float) if c in X.columns
                           else np.full(len(X), np.nan) for c in columns]) if columns else np.zeros((len(X), 0))
    missing = ~np.isfinite(out).all(axis=1)
    if missing.any():
        from carb.design.zoo_features import layer_columns

        fresh = layer_columns(X.iloc[np.flatnonzero(missing)])
        out[missing] = np.column_stack([fresh[c] for c in columns])
    return np.nan_to_num(out, nan=0.0)


def zoo_kind_rows(X: pd.DataFrame) -> bool:
    """Whether ``X`` holds zoo rows with the layer table's per-kind columns (the per-kind prior form's input),
    or a combined dataset's rows (ResNet and zoo rows, :func:`layer_rows`)."""
    from carb.design.zoo_features import ZOO_KIND_FEATURES

    return ((("family" in X.columns and not is_resnet(X)) or layer_rows(X)) and "n_ops" in X.columns
            and all(c in X.columns for c in ZOO_KIND_FEATURES))


def layer_rows(X: pd.DataFrame) -> bool:
    """Whether every row of ``X`` carries its layer table's columns (a fit under the layer-table feature list:
    a combined dataset's ResNet rows beside zoo rows, or ResNet rows alone, each ResNet row's from its walk,
    :func:`carb.design.zoo_features.layer_columns`; ResNet datasets do not store them): the priors then read
    the layer table's terms of every row, as they do for zoo rows."""
    cols = ("n_ops", "peak_live_MB")
    return (len(X) > 0 and all(c in X.columns for c in cols)
            and bool(np.isfinite(X[list(cols)].apply(pd.to_numeric, errors="coerce").to_numpy(float)).all()))


def power_cap_W(X: pd.DataFrame) -> float | None:
    """The average power (W) a GPU's rows cannot exceed: the board's power limit from the fingerprint
    (``power_limit_W``), or the highest average power a training row measured when that is higher
    (a window's average can overshoot the limit by a few per cent). None for rows that are not all
    CUDA or whose fingerprint names no power limit."""
    if not len(X) or "device_kind" not in X.columns or not (X["device_kind"].astype(str) == "cuda").all():
        return None
    if "device_fingerprint" not in X.columns:
        return None
    import json

    limits = []
    for fp in X["device_fingerprint"].dropna().astype(str).unique():
        try:
            limits.append(float(json.loads(fp).get("power_limit_W")))
        except (ValueError, TypeError, AttributeError):
            return None
    if not limits or not np.isfinite(limits).all():
        return None
    seen = pd.to_numeric(X.get("avg_power_W", pd.Series(dtype=float)), errors="coerce").max()
    return float(max(max(limits), seen if np.isfinite(seen) else 0.0))


def tensor_core_device(X: pd.DataFrame) -> bool:
    """True when every row is a CUDA device of compute capability 8.0 or later (its fingerprint's
    ``compute_capability``): TF32 and FP16/BF16 tensor cores, FP16/BF16 at twice the TF32 peak."""
    if not len(X) or "device_kind" not in X.columns or not (X["device_kind"].astype(str) == "cuda").all():
        return False
    if "device_fingerprint" not in X.columns:
        return False
    import json

    for fp in X["device_fingerprint"].dropna().astype(str).unique():
        try:
            cc = float(json.loads(fp).get("compute_capability", "0"))
        except (ValueError, TypeError, AttributeError):
            return False
        if cc < 8.0:
            return False
    return X["device_fingerprint"].notna().all()


def probe_flop_floor(X: pd.DataFrame) -> dict[str, float]:
    """``{precision: ms per FLOP}`` of the fastest regular convolution in the device probe of the rows' one
    ``device_id`` (:func:`carb.data.probes.load_probe`; FLOPs = 2 x multiply-adds, :func:`carb.data.probes.op_work`,
    the tracer's convention), per precision the probe timed; {} for rows of several devices or none, or no
    probe. A per-FLOP cost below it is faster than anything the device was seen to run."""
    from carb.data.probes import load_probe, op_work

    ids = X["device_id"].dropna().astype(str).unique() if "device_id" in X.columns else []
    if len(ids) != 1:
        return {}
    try:
        table = load_probe(ids[0])
    except DatasetError:
        return {}
    if table is None or not len(table):
        return {}
    flops = 2.0 * op_work(table)["macs"].to_numpy(float)
    rate = pd.to_numeric(table["time_ms"], errors="coerce").to_numpy(float) / flops
    ok = np.isfinite(rate) & (rate > 0)
    by = pd.Series(rate[ok]).groupby(table["precision"].astype(str).to_numpy()[ok]).min()
    return {str(p): float(v) for p, v in by.items()}


def native_dispatch(X: pd.DataFrame) -> dict[str, Any] | None:
    """``{"threads": int, "onednn": [precisions]}`` for the native-path term of CPU rows, or None when
    the rows do not record one torch thread count (``threads``). The precisions oneDNN runs come from
    the ISA flags of the rows' ``device_fingerprint`` (JSON), unknown = fp32 and bf16."""
    import json

    if "threads" not in X.columns:
        return None
    t = pd.to_numeric(X["threads"], errors="coerce").dropna().unique()
    if len(t) != 1 or not t[0] >= 1:
        return None
    isa = None
    if "device_fingerprint" in X.columns:
        fp = X["device_fingerprint"].dropna().astype(str)
        try:
            isa = json.loads(fp.iloc[0]).get("isa") if len(fp) else None
        except (ValueError, AttributeError):
            isa = None
    return {"threads": int(t[0]), "onednn": list(onednn_precisions(isa))}


def fit_device_probe(X: pd.DataFrame, native: dict[str, Any] | None) -> tuple[Any, str]:
    """``(LayerCostModel fitted on the device probe of X's device, "")``, or ``(None, why not)``: the
    rows must be CPU rows of one ``device_id`` with a known dispatch (``native``, :func:`native_dispatch`)
    and a probe on disk (:func:`carb.data.probes.load_probe`) run with the same torch threads."""
    from carb.data.probes import load_probe
    from carb.model.layer_cost import LayerCostModel

    if native is None:
        return None, "not CPU rows of one torch thread count (cpu_dispatch off or no threads column)"
    ids = X["device_id"].dropna().astype(str).unique() if "device_id" in X.columns else []
    if len(ids) != 1:
        return None, f"rows of {len(ids)} devices, not one"
    try:
        table = load_probe(ids[0])
    except DatasetError as e:   # a broken probe file must not stop training: the prior falls back, and says why
        import warnings

        warnings.warn(f"device probe ignored: {e}", stacklevel=2)
        return None, str(e)
    if table is None:
        return None, f"no device probe of device {ids[0]}"
    table = table[pd.to_numeric(table["threads"], errors="coerce") == native["threads"]]
    if table.empty:
        return None, f"the probe of device {ids[0]} ran with other torch threads than the rows ({native['threads']})"
    seen = set(X["precision"].astype(str)) if "precision" in X.columns else set()
    if set(table["precision"].astype(str)) <= seen:
        return None, "every probed precision has measured rows (nothing to predict from the probe)"
    try:
        return LayerCostModel(threads=native["threads"], onednn=tuple(native["onednn"])).fit(table), ""
    except DatasetError as e:
        return None, str(e)


#: Which prior each target uses.
PRIORS: dict[str, type[_Prior]] = {"peak_memory_MB": MemoryPrior, "energy_J": LayerRooflinePrior,
                                   "latency_ms": LayerRooflinePrior}


def make_prior(target: str, **settings: Any) -> _Prior:
    """An unfitted prior for ``target`` (see :data:`PRIORS`); ``settings`` (the ``prior`` config group's,
    :class:`carb.model.prior_config.PriorSettings`, less ``enabled``) go to the layer roofline and are ignored
    by the others. ``device_probe``, ``probe_flop_floor`` and ``overlap_k`` apply to latency only (a probe times
    kernels, in ms; it measures no energy; energy adds up where time overlaps); ``static_power`` to energy only,
    whose time prior gets the latency settings."""
    if target not in PRIORS:
        raise DatasetError(f"no physics prior for target {target!r}; known: {list(PRIORS)}")
    cls = PRIORS[target]
    if cls is not LayerRooflinePrior:
        return cls()
    static = bool(settings.pop("static_power", False))
    if target != "latency_ms":   # energy adds up: static power over the overlapped time plus the work
        time_settings = dict(settings) if static else None
        settings = {k: v for k, v in settings.items() if k not in ("device_probe", "overlap_k", "probe_flop_floor")}
        return cls(**settings, static_power=static, time_settings=time_settings)
    return cls(**settings)
