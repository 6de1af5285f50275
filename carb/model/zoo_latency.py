"""Latency of any backbone from published model features: two baselines and CARB's zoo model.

Input: a zoo frame (n rows), as :mod:`carb.data.importers.timm_zoo` gives it: ``gmacs_per_image``,
``params``, ``macts_M_per_image`` (millions of activations per image), ``input_size``, ``batch_size``,
optionally the module census (``n_<kind>``, ``params_<kind>``, :data:`CENSUS_FEATURES` follow from them);
target ``latency_ms`` (per batch). Every model learns the per-image time, ``log(latency_ms / batch_size)``,
and predicts ``latency_ms`` per batch (n,), so batches of different size are one law.

- :class:`FlopsLogLog` (B1): ``log t = a + b log GMACs`` ("compute volume is all you need").
- :class:`HiddenJoulesRegression`: ``log t = a + b log params + c log GMACs + d log activations``, the
  regression of the Hidden Joules study (there on energy per image; here on time per image).
- :class:`ZooLatencyModel`: a base law, and a gradient-boosted correction (LightGBM) of its log residual.
  The base of a row with a layer table is :class:`AdditiveBase`: the time per image as a non-negative sum
  of per-kind costs (GFLOPs of each compute kind, MB moved by each kind, operations launched and weights
  read per batch, a fixed cost per batch; attention off the fused kernels apart), so a family never seen
  is priced by its mix of kinds (explicit matrix products by their intensity regime, not by kind:
  :func:`carb.design.zoo_features.gemm_regimes`; under autocast the memory-bound bytes moved at fp32 apart:
  :func:`carb.design.zoo_features.amp_memory_split`; attention off the fused kernels by every byte its math
  path moves: :func:`sdpa_math_bytes`; operations of no other kind by their bytes; on a GPU, non-square depthwise
  convolutions, which PyTorch keeps off cuDNN, by their FLOPs on top: :func:`gpu_parts`; on a GPU, the fp32 input
  image's bytes where a family-disjoint cross-validation of the training rows keeps them: :func:`input_mb`,
  :func:`choose_by_family_cv`);
  it is fitted Huber-robust on the log error (:func:`huber_weights`), so a
  family whose time its layer table does not explain (a graph traced other than the one timed) pulls the
  costs of the others less. A row without one takes a log-linear base on params, GMACs, activations,
  input size and batch. The corrected prediction is kept within ``margin`` of the span between the base and
  :class:`HiddenJoulesRegression` (:func:`bounded`; a correction past HJ on HJ's side of the base falls back
  to the base; with ``nested_margin`` the evaluation chooses the margin per held-out family on the other
  families: :func:`carb.analysis.zoo_eval.nested_margin`). The correction reads the log features, their
  ratios (GMACs per activation: arithmetic intensity; params per GMAC: weight reuse) and, where present, the
  module census
  (counts of depthwise / grouped / pointwise / regular convolutions, linear layers, norms, activations,
  attention modules and their parameter shares) and, where present, the layer table's features
  (``tr_<summarize column>``, per image at fp32, joined by
  :func:`carb.data.importers.timm_zoo.with_trace`; :data:`TRACE_FEATURES` follow from them): FLOP shares of
  depthwise / pointwise / grouped / regular convolutions, linear, matmul and attention; memory-bound bytes
  (norm, activation, element-wise, copy, concat, pool, reduce) per image and per FLOP; total bytes per
  MAC; the executed-operation count (a kernel-launch proxy) and its ratio to GMACs; the liveness peak.
  A row without a trace has NaN there, which LightGBM routes down its missing-value branch.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from carb.design.trace import COMPUTE_KINDS as TRACE_COMPUTE_KINDS  # FLOP share of each: tr_flops_<kind> / tr_flops
from carb.design.trace import MEMORY_BOUND_KINDS as TRACE_MEMORY_KINDS  # bytes (tr_bytes_<kind>) summed into one
from carb.design.zoo_features import GEMM_KINDS, GEMM_REGIMES, dw_on_native
from carb.errors import DatasetError

#: Published features every model needs.
BASE_COLUMNS: tuple[str, ...] = ("gmacs_per_image", "params", "macts_M_per_image")
#: Module-census kinds (``scripts/data/timm_zoo.py``): ``n_<kind>`` and ``params_<kind>`` columns.
CENSUS_KINDS: tuple[str, ...] = ("conv", "conv_dw", "conv_grouped", "conv_pw", "linear", "norm", "act", "attn",
                                 "pool", "leaf")

#: The features :func:`log_features` derives from the trace columns.
TRACE_FEATURES: tuple[str, ...] = (*(f"tr_share_{k}" for k in TRACE_COMPUTE_KINDS), "tr_log_membound_MB",
                                   "tr_log_membound_per_gflop", "tr_log_bytes_per_mac", "tr_log_n_ops",
                                   "tr_log_ops_per_gmac", "tr_log_peak_live_MB")


def _col(frame: pd.DataFrame, c: str, who: str) -> np.ndarray:
    """``frame[c]`` as floats; a one-line :class:`DatasetError` when the column is absent."""
    if c not in frame.columns:
        raise DatasetError(f"{who} needs column {c!r}, which the data lacks")
    return pd.to_numeric(frame[c], errors="coerce").to_numpy(float)


def per_image_log_ms(frame: pd.DataFrame) -> np.ndarray:
    """``log(latency_ms / batch_size)`` (n,): the log time per image every model here learns."""
    return np.log(_col(frame, "latency_ms", "zoo latency") / _col(frame, "batch_size", "zoo latency"))


def trace_features(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """:data:`TRACE_FEATURES` (each (n,)) from the ``tr_*`` columns (per image, fp32 bytes); NaN in a row
    without a trace. FLOP shares in [0, 1]; bytes in MB (1e6); logs natural."""
    who = "the zoo latency model's trace features"
    flops = np.clip(_col(frame, "tr_flops", who), 1.0, None)
    out = {f"tr_share_{k}": _col(frame, f"tr_flops_{k}", who) / flops for k in TRACE_COMPUTE_KINDS}
    mem = sum(_col(frame, f"tr_bytes_{k}", who) for k in TRACE_MEMORY_KINDS)
    total = _col(frame, "tr_bytes_read", who) + _col(frame, "tr_bytes_written", who)
    n_ops = _col(frame, "tr_n_ops", who)
    macs = np.clip(_col(frame, "tr_macs", who), 1.0, None)
    out |= {"tr_log_membound_MB": np.log1p(mem / 1e6),
            "tr_log_membound_per_gflop": np.log1p(mem / 1e6) - np.log(flops / 1e9),
            "tr_log_bytes_per_mac": np.log(np.clip(total, 1.0, None) / macs), "tr_log_n_ops": np.log1p(n_ops),
            "tr_log_ops_per_gmac": np.log1p(n_ops) - np.log(macs / 1e9),
            "tr_log_peak_live_MB": np.log1p(_col(frame, "tr_peak_live_bytes", who) / 1e6)}
    return out


def log_features(frame: pd.DataFrame, census: bool = True, trace: bool = True) -> pd.DataFrame:
    """Model features (n rows): logs of GMACs, params (M), activations (M), input size and batch; the
    ratios ``log_ai`` (GMACs per M activations) and ``log_params_per_gmac``; with ``census`` and the
    census columns present, ``log1p`` module counts per kind and parameter shares per kind; with ``trace``
    and the ``tr_*`` columns present, :data:`TRACE_FEATURES` (:func:`trace_features`)."""
    who = "the zoo latency model"
    g = np.log(np.clip(_col(frame, "gmacs_per_image", who), 1e-4, None))
    p = np.log(_col(frame, "params", who) / 1e6)
    a = np.log(np.clip(_col(frame, "macts_M_per_image", who), 1e-4, None))
    out = {"log_gmacs": g, "log_params_M": p, "log_macts_M": a,
           "log_input": np.log(_col(frame, "input_size", who)), "log_batch": np.log(_col(frame, "batch_size", who)),
           "log_ai": g - a, "log_params_per_gmac": p - g}
    if census and "n_leaf" in frame.columns:
        total = np.clip(_col(frame, "params", who), 1, None)
        for k in CENSUS_KINDS:
            out[f"log1p_n_{k}"] = np.log1p(_col(frame, f"n_{k}", who))
            if k != "leaf":
                out[f"share_params_{k}"] = _col(frame, f"params_{k}", who) / total
        out["log_macts_per_leaf"] = a - np.log1p(_col(frame, "n_leaf", who))
    if trace and "tr_flops" in frame.columns:
        out |= trace_features(frame)
    return pd.DataFrame(out, index=frame.index)


class _LogLinear:
    """Least squares of the log time per image on some columns of :func:`log_features`."""

    columns: tuple[str, ...] = ()
    #: Whether :attr:`columns` name trace features (:data:`TRACE_FEATURES`).
    trace: bool = False

    def fit(self, frame: pd.DataFrame, weight: np.ndarray | None = None) -> _LogLinear:
        """Fit on ``frame``'s finite rows (features and ``latency_ms``), optionally weighted per row
        (``weight`` (n,)); returns self."""
        X = log_features(frame, census=False, trace=self.trace)[list(self.columns)].to_numpy(float)
        y = per_image_log_ms(frame)
        ok = np.isfinite(X).all(axis=1) & np.isfinite(y)
        if ok.sum() <= len(self.columns):
            raise DatasetError(f"{type(self).__name__}: {int(ok.sum())} usable rows, need more than "
                               f"{len(self.columns)}")
        w = np.sqrt(np.ones(len(y)) if weight is None else np.asarray(weight, float))[ok]
        A = np.c_[np.ones(ok.sum()), X[ok]]
        self.coef_, *_ = np.linalg.lstsq(A * w[:, None], y[ok] * w, rcond=None)
        return self

    def predict_log(self, frame: pd.DataFrame) -> np.ndarray:
        """Log time per image (n,), NaN where a feature is missing."""
        X = log_features(frame, census=False, trace=self.trace)[list(self.columns)].to_numpy(float)
        return self.coef_[0] + X @ self.coef_[1:]

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """``latency_ms`` per batch (n,)."""
        return np.exp(self.predict_log(frame)) * _col(frame, "batch_size", type(self).__name__)


class FlopsLogLog(_LogLinear):
    """B1: log time per image linear in log GMACs."""

    columns = ("log_gmacs",)


class HiddenJoulesRegression(_LogLinear):
    """Hidden Joules' regression: log time per image linear in log params, log GMACs, log activations."""

    columns = ("log_params_M", "log_gmacs", "log_macts_M")


class _Base(_LogLinear):
    columns = ("log_params_M", "log_gmacs", "log_macts_M", "log_input", "log_batch")


class _TraceBase(_LogLinear):
    """:class:`_Base` plus the layer table's memory-bound bytes and launch count (a roofline-like law:
    compute, memory traffic and per-kernel overhead), for rows with a trace."""

    columns = (*_Base.columns, "tr_log_membound_MB", "tr_log_n_ops")
    trace = True


#: Compute kinds whose operand bytes are a term of :class:`AdditiveBase` besides their FLOPs (weights and
#: activations a GEMM-like kernel moves); depthwise convolutions are memory-bound and count there too.
ADDITIVE_BYTE_KINDS: tuple[str, ...] = ("conv_regular", "conv_pointwise", "conv_grouped", "conv_depthwise",
                                        "linear", "matmul")


def additive_terms(frame: pd.DataFrame, gemm_regimes: bool = False, amp_split: bool = False,
                   sdpa_math_io: bool = False, other_bytes: bool = False,
                   dw_nonsquare: bool = False, bmm_tiles: bool = False,
                   input_bytes: bool = False, act_fp32: bool = False,
                   hidden_copies: bool = False, dw_native: bool = False,
                   gn_reread: bool = False, cuda_layout: bool = False, conv_tile: int | str = 0) -> pd.DataFrame:
    """The terms of :class:`AdditiveBase` (n rows, each a time source per image in its own unit), from the
    ``tr_*`` columns (per image, fp32) and ``batch_size``: ``gflop_<kind>`` (GFLOPs of each compute kind,
    :data:`TRACE_COMPUTE_KINDS`), ``mb_<kind>`` (MB read + written by each memory-bound kind,
    :data:`TRACE_MEMORY_KINDS`, and by each compute kind, :data:`ADDITIVE_BYTE_KINDS`); where the trace has
    them, attention on the math path apart (``gflop_sdpa_math``, ``mb_sdpa_math``: the scores it
    materialises; ``gflop_sdpa`` is then the fused kernels' part; :func:`carb.design.trace.summarize`),
    ``ops_per_image`` (executed operations / batch: kernel launches are paid once per batch),
    ``weight_mb_per_image`` (parameter MB / batch: weights are read once per batch) and ``per_image``
    (1 / batch: a fixed cost per batch). With ``gemm_regimes`` and the trace's
    :func:`carb.design.zoo_features.gemm_regimes` columns, the explicit matrix products (:data:`GEMM_KINDS`) are priced by intensity regime instead of by
    kind: ``gflop_gemm_<r>`` and ``mb_gemm_<r>`` for ``r`` in :data:`GEMM_REGIMES` (a 16-dim attention
    product and a 768-wide linear no longer share one cost per FLOP and per MB). With ``amp_split`` and the
    trace's :func:`carb.design.zoo_features.amp_memory_split` columns, the memory-bound bytes mixed
    precision moves at fp32 get their own costs: ``mb_norm`` becomes batch norm's (``mb_norm``) and the
    fp32-list normalisations' (``mb_norm_fp32``: LayerNorm, GroupNorm, RMSNorm), and ``mb_elementwise_param``
    (element-wise operations reading a parameter: layer scale, position embeddings, which promote the
    stream to fp32) is priced on top of ``mb_elementwise``; both 0 in a row not timed under autocast
    (:func:`autocast_rows`: there every byte moves at the one precision). With ``sdpa_math_io`` and the trace's
    ``bytes_sdpa_math_io``, ``mb_sdpa_math`` is every byte the math path of attention moves, its operands'
    passes too (:func:`sdpa_math_bytes`), not only the scores'. With ``other_bytes``, ``mb_other``: the bytes of
    operations of no other kind (VOLO's ``im2col`` / ``col2im``, blur pooling's padding), which no term priced, on
    rows timed eagerly (:func:`eager_rows`; 0 under ``torch.compile``, whose kernels lower and fuse them).
    With ``dw_nonsquare`` and the trace's ``flops_conv_dw_nonsquare`` (:func:`gpu_parts`),
    ``gflop_conv_dw_nonsquare``: the GFLOPs of non-square depthwise convolutions, priced on top of
    ``gflop_conv_depthwise`` on GPU rows (:func:`gpu_rows`: PyTorch's own depthwise kernel, not cuDNN's; 0 on a
    CPU row). With ``bmm_tiles`` and the trace's ``bmm_tiles`` (:func:`gpu_parts`), ``ktiles_bmm``: the thousands
    of :data:`BMM_TILE`-square output tiles of batched matrix products per image, one thread block each, on GPU rows
    (0 on a CPU row): VOLO's 1,176 products of 9 x 9 by 9 x 32 matrices per outlooker and image do 0.006 GFLOPs
    and pay a block each. With ``input_bytes``, ``mb_input``: the input image's MB per image at fp32
    (:func:`input_mb`), on GPU rows (0 on a CPU row), beside ``per_image`` (on timm's GPU files it takes the fixed
    cost's place: ``per_image`` is then fitted at 0). With ``act_fp32`` and the trace's ``bytes_act_fp32``
    (:func:`carb.design.zoo_features.amp_memory_split`), ``mb_act_fp32``: the bytes of activation and reduction
    operations on autocast's fp32 list (an explicit softmax, vector norms, sums), priced on top of their kind's cost
    on rows timed under autocast (:func:`autocast_rows`; 0 elsewhere): each casts its half input to fp32, runs at
    fp32 and is cast back by the next matrix product. With ``hidden_copies`` and the trace's ``bytes_hidden_copy``
    (:func:`carb.design.zoo_features.hidden_copy_bytes`: the copies CUDA's softmax and layer / group norm kernels
    make of a strided input, which a meta-device trace does not record), those bytes are copies: added to ``mb_copy``
    on GPU rows timed eagerly (:func:`gpu_rows`, :func:`eager_rows`), a classification, no cost of their own. With
    ``dw_native`` and the trace's ``flops_conv_dw_native`` (:func:`gpu_parts`), ``gflop_conv_dw_native``: the FLOPs
    of the square depthwise convolutions PyTorch also keeps off cuDNN (:func:`dw_on_native`: a 7x7 or larger kernel,
    a map narrower than 7, fewer than 32 channels, most stride-2 ones), beside the non-square ones' term, on GPU rows.
    With ``gn_reread`` and the trace's ``bytes_norm_group_read`` (:func:`gpu_parts`), the input bytes of group norms
    are counted once more among the normalisation bytes (``mb_norm_fp32`` under autocast with ``amp_split``, else
    ``mb_norm``) on GPU rows timed eagerly: CUDA's group norm reads its input twice (a moments kernel, then the
    normalising pass), layer norm once (one kernel per row). With ``cuda_layout`` and the trace's
    ``bytes_hidden_copy_cl`` / ``flops_conv_dw_native_cl`` (:func:`carb.design.zoo_features.hidden_copy_bytes` with
    ``cuda_layout``: cuDNN keeps a channels-last input channels-last, so ConvNeXt's and DaViT's permuted layer norms
    mostly read contiguous inputs), ``hidden_copies`` and ``dw_native`` read those in place of ``bytes_hidden_copy`` /
    ``flops_conv_dw_native``. With ``conv_tile`` (one of :data:`CONV_TILES`; 0: off) and the trace's
    ``flops_conv_pad<conv_tile>`` (:func:`gpu_parts`), ``gflop_conv_pad``: the GFLOPs a GPU's implicit-GEMM convolution
    computes in vain when its output channels per group do not fill a ``conv_tile``-wide tile (HRNet's 18-144-channel
    branches, FastViT's and RegNetZ's narrow stages), on GPU rows (0 on a CPU row). NaN in a row without a trace."""
    who = "the zoo latency model's additive base"
    b = _col(frame, "batch_size", who)
    out = {f"gflop_{k}": _col(frame, f"tr_flops_{k}", who) / 1e9 for k in TRACE_COMPUTE_KINDS}
    out |= {f"mb_{k}": _col(frame, f"tr_bytes_{k}", who) / 1e6 for k in (*TRACE_MEMORY_KINDS, *ADDITIVE_BYTE_KINDS)}
    if "tr_flops_sdpa_math" in frame.columns:   # attention no fused kernel takes: its own cost and scores
        math = _col(frame, "tr_flops_sdpa_math", who) / 1e9
        out["gflop_sdpa"] = out["gflop_sdpa"] - math
        scores = _col(frame, "tr_bytes_sdpa_math", who) / 1e6
        io = sdpa_math_io and "tr_bytes_sdpa_math_io" in frame.columns
        out |= {"gflop_sdpa_math": math, "mb_sdpa_math": sdpa_math_bytes(frame) if io else scores}
    if other_bytes:   # operations of no other kind (im2col / col2im, padding), each its own kernel when eager
        out["mb_other"] = np.where(eager_rows(frame), _col(frame, "tr_bytes_other", who) / 1e6, 0.0)
    if dw_nonsquare and "tr_flops_conv_dw_nonsquare" in frame.columns:   # off cuDNN on a GPU
        nonsq = _col(frame, "tr_flops_conv_dw_nonsquare", who) / 1e9
        out["gflop_conv_dw_nonsquare"] = np.where(gpu_rows(frame), nonsq, 0.0)
        dwn = "tr_flops_conv_dw_native" + ("_cl" if cuda_layout and "tr_flops_conv_dw_native_cl" in frame else "")
        if dw_native and dwn in frame.columns:   # the square ones off cuDNN: a term of their own
            native = np.clip(_col(frame, dwn, who) / 1e9 - nonsq, 0.0, None)
            out["gflop_conv_dw_native"] = np.where(gpu_rows(frame), native, 0.0)
    pad = f"tr_flops_conv_pad{conv_tile}"
    if conv_tile and pad in frame.columns:   # output-channel tiles of convolutions left partly empty
        out["gflop_conv_pad"] = np.where(gpu_rows(frame), _col(frame, pad, who) / 1e9, 0.0)
    if bmm_tiles and "tr_bmm_tiles" in frame.columns:   # a thread block per output tile of a batched product
        out["ktiles_bmm"] = np.where(gpu_rows(frame), _col(frame, "tr_bmm_tiles", who) / 1e3, 0.0)
    if gemm_regimes and all(f"tr_flops_gemm_{r}" in frame.columns for r in GEMM_REGIMES):   # GEMMs by regime
        for k in GEMM_KINDS:
            del out[f"gflop_{k}"], out[f"mb_{k}"]
        out |= {f"gflop_gemm_{r}": _col(frame, f"tr_flops_gemm_{r}", who) / 1e9 for r in GEMM_REGIMES}
        out |= {f"mb_gemm_{r}": _col(frame, f"tr_bytes_gemm_{r}", who) / 1e6 for r in GEMM_REGIMES}
    if amp_split and all(f"tr_{c}" in frame.columns for c in AMP_SPLIT_COLUMNS):   # fp32 bytes under autocast
        amp = autocast_rows(frame)
        fp32_norm = np.where(amp, _col(frame, "tr_bytes_norm_fp32", who) / 1e6, 0.0)
        out["mb_norm"] = out["mb_norm"] - fp32_norm
        out |= {"mb_norm_fp32": fp32_norm,
                "mb_elementwise_param": np.where(amp, _col(frame, "tr_bytes_elementwise_param", who) / 1e6, 0.0)}
    if gn_reread and "tr_bytes_norm_group_read" in frame.columns:   # group norm's second read of its input
        extra = np.where(gpu_rows(frame) & eager_rows(frame), _col(frame, "tr_bytes_norm_group_read", who) / 1e6, 0.0)
        into = "mb_norm_fp32" if "mb_norm_fp32" in out else "mb_norm"
        if into == "mb_norm_fp32":   # under autocast group norm is on the fp32 list; elsewhere batch norm's cost
            amp = autocast_rows(frame)
            out["mb_norm_fp32"] = out["mb_norm_fp32"] + np.where(amp, extra, 0.0)
            out["mb_norm"] = out["mb_norm"] + np.where(amp, 0.0, extra)
        else:
            out["mb_norm"] = out["mb_norm"] + extra
    out |= {"ops_per_image": _col(frame, "tr_n_ops", who) / b,
            "weight_mb_per_image": _col(frame, "tr_param_bytes", who) / 1e6 / b, "per_image": 1.0 / b}
    if input_bytes:   # the input's own passes (autocast's cast, the 3-channel stem)
        out["mb_input"] = np.where(gpu_rows(frame), input_mb(frame), 0.0)
    hc = "tr_bytes_hidden_copy" + ("_cl" if cuda_layout and "tr_bytes_hidden_copy_cl" in frame else "")
    if hidden_copies and hc in frame.columns:   # strided softmax / norm inputs made contiguous
        hidden = np.where(gpu_rows(frame) & eager_rows(frame), _col(frame, hc, who) / 1e6, 0.0)
        out["mb_copy"] = out["mb_copy"] + hidden
    if act_fp32 and "tr_bytes_act_fp32" in frame.columns:   # fp32-list activations: casts in and out, fp32 passes
        out["mb_act_fp32"] = np.where(autocast_rows(frame), _col(frame, "tr_bytes_act_fp32", who) / 1e6, 0.0)
    return pd.DataFrame(out, index=frame.index)


def input_mb(frame: pd.DataFrame) -> np.ndarray:
    """MB per image (n,) of the input image at fp32: ``3 * input_size^2 * 4 / 1e6`` (timm's files feed 3-channel
    square fp32 inputs). Under autocast it is read at fp32 and written at fp16 by the cast before the stem, and the
    stem convolution reads its 3 channels, which fp16 tensor-core kernels pad (NCHW: a layout transform too), at a
    cost per byte no per-kind throughput of the rest of the network says."""
    s = _col(frame, "input_size", "the zoo latency model's input bytes")
    return 3 * s * s * 4 / 1e6


#: The math path of attention (PyTorch's ``_scaled_dot_product_attention_math``, a call no fused kernel
#: takes) per call: ``Q * sqrt(scale)`` and ``K * sqrt(scale)`` (each read and written), ``Q K^T`` (reads both,
#: writes the scores), softmax (reads and writes them), ``@ V`` (reads them and V, writes the output): 8
#: passes over ``tokens x dim`` elements and 4 over the scores; the tracer's ``bytes_sdpa_math_io`` counts
#: 4 of the former (Q, K, V read, the output written), ``bytes_sdpa_math`` the 4 of the latter, both at the
#: table's precision. Since PyTorch 2.5 (pytorch/pytorch#128922) half-precision inputs are first cast to
#: fp32 (Q, K, V read at 2 bytes, written at 4) and the output cast back, and the 12 passes run at fp32:
#: per element 3 x 6 + 8 x 4 + 6 = 56 bytes of operands for 16 of scores (4 passes x 4 bytes), against
#: 16 and 8 at fp16 before. In the tracer's fp32 units the operands weigh 56 / 16 = 3.5 x
#: ``bytes_sdpa_math_io`` beside 1 x ``bytes_sdpa_math`` with the upcast, 2 x beside 1 x without it.
SDPA_MATH_IO_PASSES: dict[bool, float] = {True: 3.5, False: 2.0}
#: The first PyTorch release whose math attention upcasts half inputs to fp32.
SDPA_MATH_UPCAST_SINCE: tuple[int, int] = (2, 5)


def math_upcast_rows(frame: pd.DataFrame) -> np.ndarray:
    """Per row (n,): whether the math path of attention ran at fp32 on half inputs: timed under autocast
    (:func:`autocast_rows`) with PyTorch >= :data:`SDPA_MATH_UPCAST_SINCE` (``torch_version``; a row without
    one is taken as a current PyTorch's)."""
    amp = autocast_rows(frame)
    if "torch_version" not in frame.columns:
        return amp
    return amp & frame["torch_version"].map(_upcast_version).to_numpy(bool)


def _upcast_version(version: object) -> bool:
    """Whether a PyTorch version string (``2.9.1``, ``2.4.0+cu124``) is :data:`SDPA_MATH_UPCAST_SINCE` or later
    (an unreadable one: taken as current, True)."""
    parts = str(version).split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= SDPA_MATH_UPCAST_SINCE
    except (ValueError, IndexError):
        return True


def sdpa_math_bytes(frame: pd.DataFrame) -> np.ndarray:
    """MB per image (n,) that the math path of attention moves, in the tracer's fp32 units: the scores'
    passes (``tr_bytes_sdpa_math``) and, on a row run eagerly (:func:`eager_rows`), its operands' passes
    (``tr_bytes_sdpa_math_io`` times :data:`SDPA_MATH_IO_PASSES` of the row's :func:`math_upcast_rows`). Hiera's
    mask-unit attention (tokens 49-64 per window, head dim 96: operands 1.5-3x the scores) is mostly the latter,
    NesT's blocked attention (196 tokens, head dim 32) the former. Under ``torch.compile`` the composite's
    element-wise passes (scaling, casts) are the compiler's to fuse: the scores' passes alone there."""
    who = "the zoo latency model's attention bytes"
    w = np.where(math_upcast_rows(frame), SDPA_MATH_IO_PASSES[True], SDPA_MATH_IO_PASSES[False])
    w = np.where(eager_rows(frame), w, 0.0)
    return (_col(frame, "tr_bytes_sdpa_math", who) + w * _col(frame, "tr_bytes_sdpa_math_io", who)) / 1e6


def eager_rows(frame: pd.DataFrame) -> np.ndarray:
    """Per row (n,): whether it was timed eagerly (``compile`` ``eager``, or no ``compile`` column), where each
    ATen operation is its own kernel, rather than under ``torch.compile`` (``dynamo``)."""
    if "compile" not in frame.columns:
        return np.ones(len(frame), bool)
    return frame["compile"].astype(str).isin(["eager", "none", "None", "nan", ""]).to_numpy()


def autocast_rows(frame: pd.DataFrame) -> np.ndarray:
    """Per row (n,): whether it was timed under autocast (``timm_precision`` ``amp_fp16`` / ``amp_bf16``), where
    fp32 parameters and fp32-list operators move some memory-bound bytes at fp32; a file run at one precision
    throughout (fp32, or a model cast to bf16) has no such split. All True without the column."""
    if "timm_precision" not in frame.columns:
        return np.ones(len(frame), bool)
    return frame["timm_precision"].astype(str).str.startswith("amp").to_numpy()


#: The layer-table columns (without ``tr_``) :func:`additive_terms` reads with ``amp_split``
#: (:func:`carb.design.zoo_features.amp_memory_split`).
AMP_SPLIT_COLUMNS: tuple[str, ...] = ("bytes_norm_fp32", "bytes_elementwise_param")


#: The side of the output tile a batched matrix product's thread block computes (:func:`gpu_parts`'s
#: ``bmm_tiles``): 128 x 128, the largest CTA tile of cuBLAS's / CUTLASS's half-precision GEMM kernels, so a
#: matrix that fits one is one block whatever its size (VOLO's 9 x 32 outputs, a 16-token LeViT stage), and a
#: large one costs about its FLOPs' worth of blocks. 32 and 64 were tried (base alone, leave-one-family-out):
#: they charged LeViT's and GCViT's 16-49-token products per 32 / 64 tile and put LeViT 5-11 points further off.
BMM_TILE: int = 128


def gpu_parts(table: pd.DataFrame) -> dict[str, float]:
    """The GPU columns of a layer table (:func:`carb.design.trace.trace`'s rows: ``kind``, ``weight_shape``,
    ``in_shape``, ``out_shape``, ``flops``): ``bmm_tiles``, the output tiles (:data:`BMM_TILE` square) of the
    batched matrix products (kind ``matmul`` with a batch dimension: ``out_shape`` ``(..., M, N)``), summed over
    their matrices: ``prod(batch dims) * ceil(M / 128) * ceil(N / 128)``; a batched product of small matrices
    launches a thread block per matrix whatever its FLOPs (VOLO's outlook attention: 1,176 products of 9 x 9 by
    9 x 32 per call and image). A 2-D ``mm`` is left out (its rows grow with the batch: a linear layer's GEMM).
    ``flops_conv_dw_nonsquare``, the FLOPs of the depthwise convolutions whose kernel is not square
    (GhostNetV2's 1x5 / 5x1 attention, Inception-NeXt's 1x11 / 11x1 bands, a mixed kernel split along one
    axis). PyTorch gives cuDNN a half-precision depthwise convolution only for square 1, 3 or 5 kernels
    (``check_cudnn_depthwise_workload_with_filter``); a non-square one runs on its own depthwise kernel.
    ``flops_conv_dw_native``: the FLOPs of every depthwise convolution that rule keeps off cuDNN
    (:func:`dw_on_native`; the non-square ones among them). ``bytes_norm_group_read``: the bytes group norms read
    (``native_group_norm``; CUDA's reads them twice: its moments kernel, then the normalising pass). Same batch and precision as ``table`` (timm's files: traced at batch 1, fp32)."""
    dw = (table["kind"] == "conv_depthwise").to_numpy()
    nonsquare = np.array([_nonsquare(w) for w in table["weight_shape"]], bool) & dw
    none = pd.Series([None] * len(table), index=table.index)
    native = np.array([dw_on_native(i, w, s) for i, w, s in zip(table.get("in_shape", none), table["weight_shape"],
                                                               table.get("stride", none))], bool) & dw | nonsquare
    mm = (table["kind"] == "matmul").to_numpy()
    tiles = sum(_bmm_tiles(o) for o in table["out_shape"].to_numpy()[mm])
    gn = ((table["kind"] == "norm") & table.get("op", none).astype(str).str.contains("group_norm")).to_numpy()
    flops = table["flops"].to_numpy(float)
    read = table.get("bytes_read", pd.Series(np.zeros(len(table)), index=table.index)).to_numpy(float)
    return {"flops_conv_dw_nonsquare": float(flops[nonsquare].sum()), "bmm_tiles": float(tiles),
            "flops_conv_dw_native": float(flops[native].sum()), "bytes_norm_group_read": float(read[gn].sum())} \
        | conv_pad_flops(table)


#: The output-channel tile widths :func:`conv_pad_flops` writes a column for (``flops_conv_pad<tile>``) and
#: ``conf/zoo_latency/default.yaml``'s ``conv_tile`` chooses from (0: no term). cuDNN's and CUTLASS's
#: half-precision implicit-GEMM convolution kernels compute tiles of output pixels x output channels, 32 to 256
#: channels wide; a convolution with fewer output channels per group than the tile computes the rest in vain.
#: ``pow2``: each convolution in the narrowest of :data:`POW2_TILES` that holds its channels per group, whole
#: 128-wide tiles beyond (a kernel chosen for its width: 18 channels in a 32 tile, 144 in two of 128).
CONV_TILES: tuple[int | str, ...] = (64, 128, 256, "pow2")
#: The tile widths of ``pow2`` (:func:`conv_pad_flops`): the narrowest that holds a convolution's channels per group,
#: multiples of the last beyond it.
POW2_TILES: tuple[int, ...] = (32, 64, 128)
#: The convolution kinds :func:`conv_pad_flops` counts: implicit GEMMs over the output channels (depthwise ones
#: are memory-bound, their own kernels).
CONV_PAD_KINDS: tuple[str, ...] = ("conv_regular", "conv_pointwise", "conv_grouped")


def conv_pad_flops(table: pd.DataFrame, tiles: tuple[int | str, ...] = CONV_TILES) -> dict[str, float]:
    """``flops_conv_pad<tile>`` per tile of ``tiles``: the FLOPs (at the table's batch) an implicit-GEMM convolution
    of :data:`CONV_PAD_KINDS` computes in vain when its output channels per group, ``c = out / groups``, do not fill
    whole ``tile``-wide tiles: ``flops * (ceil(c / tile) * tile / c - 1)`` summed (HRNet-W18's 18-channel branch
    convolutions: 6.1x their FLOPs at a 128 tile, 0.78x with ``pow2``, :func:`_tiled`; a 256-channel convolution:
    0). Rows of a layer table
    (:func:`carb.design.trace.trace`: ``kind``, ``weight_shape`` ``(out, in / groups, kh, kw)``, ``groups``,
    ``flops``)."""
    conv = table["kind"].isin(CONV_PAD_KINDS).to_numpy()
    groups = pd.to_numeric(table["groups"], errors="coerce").fillna(1).to_numpy(float) if "groups" in table \
        else np.ones(len(table))
    c = np.array([_out_channels(w) for w in table["weight_shape"]], float) / np.maximum(groups, 1)
    ok = conv & np.isfinite(c) & (c > 0)
    c = np.where(ok, c, 1.0)
    flops = table["flops"].to_numpy(float)
    return {f"flops_conv_pad{t}": float((flops * np.where(ok, _tiled(c, t) / c - 1, 0.0)).sum()) for t in tiles}


def _tiled(c: np.ndarray, tile: int | str) -> np.ndarray:
    """Channels (n,) rounded up to whole ``tile``-wide tiles; with ``tile="pow2"`` to the narrowest of
    :data:`POW2_TILES` that holds them, or whole tiles of the last beyond it."""
    if tile != "pow2":
        return np.ceil(c / int(tile)) * int(tile)
    out = np.ceil(c / POW2_TILES[-1]) * POW2_TILES[-1]
    for t in POW2_TILES[::-1]:
        out = np.where(c <= t, t, out)
    return out


def _out_channels(weight_shape: object) -> float:
    """The output channels of a convolution weight shape ``(out, in / groups, kh, kw)``; NaN for any other shape."""
    try:
        shape = tuple(int(v) for v in weight_shape)
    except TypeError:
        return float("nan")
    return float(shape[0]) if len(shape) == 4 else float("nan")


def _bmm_tiles(out_shape: object) -> int:
    """Output tiles (:data:`BMM_TILE` square) of a batched matrix product with output ``(..., M, N)``:
    ``prod(...) * ceil(M / tile) * ceil(N / tile)``; 0 for an output of fewer than 3 dimensions (a plain
    ``mm``) or one that is not a shape."""
    try:
        shape = tuple(int(v) for v in out_shape)
    except TypeError:
        return 0
    if len(shape) < 3:
        return 0
    return int(np.prod(shape[:-2])) * -(-shape[-2] // BMM_TILE) * -(-shape[-1] // BMM_TILE)


def _nonsquare(weight_shape: object) -> bool:
    """Whether a convolution weight shape ``(out, in / groups, kh, kw)`` has ``kh != kw`` (False for any other
    shape)."""
    try:
        shape = tuple(int(v) for v in weight_shape)
    except TypeError:
        return False
    return len(shape) == 4 and shape[2] != shape[3]


def gpu_rows(frame: pd.DataFrame) -> np.ndarray:
    """Per row (n,): whether it was timed on a GPU (``device_kind`` ``gpu``; all True without the column)."""
    if "device_kind" not in frame.columns:
        return np.ones(len(frame), bool)
    return (frame["device_kind"].astype(str) == "gpu").to_numpy()


#: What :func:`bounded` makes of a corrected prediction outside its span: clip it to the span's edge; drop the
#: correction and take the base; or drop it only where it overshoots HJ on HJ's side of the base, else clip.
OUTSIDE: tuple[str, ...] = ("clip", "base", "overshoot")


def bounded(base: np.ndarray, corrected: np.ndarray, hj: np.ndarray, margin: float | None,
            outside: str = "clip") -> np.ndarray:
    """``corrected`` (n,) kept within ``[min(base, hj) - margin, max(base, hj) + margin]`` (all (n,), log
    time per image; ``margin`` in log units): with ``outside="clip"`` a value beyond it is clipped to it
    (margin 0: the median of the three), with ``outside="base"`` it becomes ``base`` (a correction that
    Hidden Joules' regression does not support is dropped, not kept at the span's edge), with
    ``outside="overshoot"`` it becomes ``base`` where it lies beyond ``hj + margin`` on ``hj``'s side of
    ``base`` (the correction and HJ agree on the direction but the correction goes further: LeViT on timm's
    GPU files) and is clipped elsewhere; ``corrected`` itself where ``margin`` is None or ``hj`` is NaN (a row
    without the published totals)."""
    if outside not in OUTSIDE:
        raise DatasetError(f"bounded: outside={outside!r} is not allowed; allowed: {', '.join(OUTSIDE)}")
    corrected = np.asarray(corrected, float)
    if margin is None:
        return corrected
    lo = np.fmin(base, hj) - margin
    hi = np.fmax(base, hj) + margin
    if outside == "base":
        out = np.where((corrected < lo) | (corrected > hi), base, corrected)
    else:
        out = np.clip(corrected, lo, hi)
        if outside == "overshoot":
            over = ((hj > base) & (corrected > hj + margin)) | ((hj < base) & (corrected < hj - margin))
            out = np.where(over, base, out)
    return np.where(np.isfinite(hj) & np.isfinite(base), out, corrected)


def choose_by_family_cv(frame: pd.DataFrame, variants: list, weight: np.ndarray | None = None,
                        folds: int = 5, min_models: int = 5, seed: int = 0) -> int:
    """The index of the variant (factories of unfitted :class:`AdditiveBase`) whose family-disjoint
    cross-validation on ``frame``'s traced rows (``folds`` groups of whole ``family`` values, shuffled with
    ``seed``; ``weight`` (n,) optional per-row fit weights) has the lowest mean family MAPE over the families
    with at least ``min_models`` models (ties and a frame without ``family``, or too few families: 0). A
    setting of the base chosen so, inside a fit, is chosen on the training families only: in a
    leave-one-family-out evaluation the held-out family never takes part (a nested choice)."""
    if "family" not in frame.columns or len(variants) < 2:
        return 0
    fam = frame["family"].astype(str).to_numpy()
    names = np.unique(fam)
    if len(names) < folds:
        return 0
    order = np.random.default_rng(seed).permutation(len(names))
    fold = pd.Series(np.arange(len(names)) % folds, index=names[order]).reindex(fam).to_numpy()
    n_models = frame.groupby(fam)["model"].nunique() if "model" in frame.columns else pd.Series(dtype=float)
    scored = np.isin(fam, n_models.index[n_models >= min_models])
    y = np.exp(per_image_log_ms(frame))
    scores = []
    for make in variants:
        pred = np.full(len(frame), np.nan)
        for g in range(folds):
            test = fold == g
            try:
                m = make().fit(frame[~test], None if weight is None else np.asarray(weight)[~test])
            except DatasetError:
                continue
            pred[test] = np.exp(m.predict_log(frame[test]))
        ok = scored & np.isfinite(pred) & np.isfinite(y)
        ape = pd.Series(np.abs(pred[ok] / y[ok] - 1)).groupby(fam[ok]).mean()
        scores.append(float(ape.mean()) if len(ape) else np.inf)
    return int(np.argmin(scores))


def huber_weights(resid: np.ndarray, k: float | None) -> np.ndarray:
    """Huber's iteratively-reweighted-least-squares weights (n,) of log residuals ``resid`` (n,): 1 where
    ``|r| <= k``, ``k / |r|`` beyond (a row 10x off counts as ``k / 2.3`` of a row, not 2.3^2 / k^2 times it);
    all 1 with ``k`` None."""
    if k is None:
        return np.ones(len(resid))
    return np.minimum(1.0, k / np.maximum(np.abs(resid), 1e-12))


class AdditiveBase:
    """A roofline-sum law of the time per image: ``t = sum_j c_j x_j`` over :func:`additive_terms` with every
    ``c_j >= 0`` (ms per GFLOP of a kind, per MB moved by a kind, per launched operation, per MB of weights,
    per batch): each operation kind costs its own throughput, and more work never predicts less time.
    Fitted on the relative error: non-negative least squares of ``x_j / t`` on 1, then Gauss-Newton steps
    on ``log t`` (each a non-negative least-squares problem), ``iterations`` of them, each row weighted by
    :func:`huber_weights` of its log residual with ``huber`` (None: plain least squares). A family never seen
    is predicted by the same per-kind costs, so its mix of kinds, not its name, sets its time.
    ``gemm_regimes``: price explicit matrix products by intensity regime; ``amp_split``: the memory-bound
    bytes mixed precision moves at fp32 apart; ``sdpa_math_io``: every byte of attention's math path;
    ``other_bytes``: the bytes of operations of no other kind; ``dw_nonsquare``: the FLOPs of non-square
    depthwise convolutions on GPU rows on top; ``bmm_tiles``: the output tiles of batched matrix products on GPU
    rows; ``input_bytes``: the fp32 input image's MB on GPU rows; ``act_fp32``: the bytes of fp32-list activations
    and reductions under autocast on top; ``hidden_copies``: the copies CUDA's softmax / norms make of a strided
    input counted as copies on GPU rows; ``conv_tile``: the FLOPs convolutions compute in vain in partly empty
    output-channel tiles of that width on GPU rows (all :func:`additive_terms`); ``cpu_terms``: CPU
    terms on top (:mod:`carb.model.zoo_latency_cpu`, a per-device setting)."""

    def __init__(self, iterations: int = 10, huber: float | None = 0.1, gemm_regimes: bool = False,
                 amp_split: bool = False, sdpa_math_io: bool = False, other_bytes: bool = False,
                 cpu_terms: tuple[str, ...] = (), dw_nonsquare: bool = False, bmm_tiles: bool = False,
                 input_bytes: bool = False, act_fp32: bool = False, hidden_copies: bool = False,
                 dw_native: bool = False, gn_reread: bool = False, cuda_layout: bool = False,
                 conv_tile: int | str = 0):
        self.iterations, self.huber, self.gemm_regimes = iterations, huber, gemm_regimes
        self.conv_tile = conv_tile
        self.dw_native, self.gn_reread, self.cuda_layout = dw_native, gn_reread, cuda_layout
        self.amp_split, self.dw_nonsquare, self.bmm_tiles = amp_split, dw_nonsquare, bmm_tiles
        self.input_bytes, self.act_fp32, self.hidden_copies = input_bytes, act_fp32, hidden_copies
        self.sdpa_math_io, self.other_bytes = sdpa_math_io, other_bytes
        self.cpu_terms = tuple(cpu_terms)

    def terms(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The law's terms (n rows): :func:`additive_terms` with this base's settings, then the per-device CPU
        terms ``cpu_terms`` (:func:`carb.model.zoo_latency_cpu.cpu_terms`; none by default), without the
        :func:`additive_terms` columns those stand for (:func:`carb.model.zoo_latency_cpu.replaced_terms`)."""
        out = additive_terms(frame, self.gemm_regimes, self.amp_split, self.sdpa_math_io, self.other_bytes,
                             self.dw_nonsquare, self.bmm_tiles, self.input_bytes, self.act_fp32,
                             self.hidden_copies, self.dw_native, self.gn_reread, self.cuda_layout, self.conv_tile)
        if not self.cpu_terms:
            return out
        from carb.model.zoo_latency_cpu import cpu_terms, replaced_terms

        out = out.drop(columns=list(replaced_terms(self.cpu_terms)))
        return pd.concat([out, cpu_terms(frame, self.cpu_terms)], axis=1)

    def fit(self, frame: pd.DataFrame, weight: np.ndarray | None = None) -> AdditiveBase:
        """Fit on ``frame``'s traced rows (``weight`` (n,) optional per-row weights); returns self."""
        from scipy.optimize import nnls

        X = self.terms(frame).to_numpy(float)
        y = np.exp(per_image_log_ms(frame))
        ok = np.isfinite(X).all(axis=1) & np.isfinite(y) & (y > 0)
        if ok.sum() <= X.shape[1]:
            raise DatasetError(f"AdditiveBase: {int(ok.sum())} traced rows, need more than {X.shape[1]}")
        pos = np.where(X[ok] > 0, X[ok], np.nan)
        with warnings.catch_warnings():   # a term that is 0 on every row (a GPU term on CPU rows): scale 1
            warnings.simplefilter("ignore", RuntimeWarning)
            scale = np.nanmedian(pos, axis=0) if np.isfinite(pos).any() else np.ones(X.shape[1])
        self.scale_ = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
        Xs, yo = X[ok] / self.scale_, y[ok]
        w0 = np.ones(len(yo)) if weight is None else np.asarray(weight, float)[ok]
        w = np.sqrt(w0)
        c, _ = nnls(Xs / yo[:, None] * w[:, None], w)
        for _ in range(self.iterations):
            pred = np.clip(Xs @ c, 1e-12, None)
            r = np.log(yo) - np.log(pred)
            w = np.sqrt(w0 * huber_weights(r, self.huber))
            J = Xs / pred[:, None]
            c, _ = nnls(J * w[:, None], (r + J @ c) * w)
        self.coef_ = c
        self.terms_ = list(self.terms(frame.iloc[:0]).columns)
        return self

    def predict_log(self, frame: pd.DataFrame) -> np.ndarray:
        """Log time per image (n,), NaN in a row without a trace."""
        X = self.terms(frame).to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log((X / self.scale_) @ self.coef_)

    def costs(self) -> dict[str, float]:
        """The fitted cost of one unit of each term (ms per GFLOP, per MB, per operation, per batch)."""
        return dict(zip(self.terms_, self.coef_ / self.scale_))


class ZooLatencyModel:
    """CARB's zoo latency model: a base law times a LightGBM correction of its log residual on
    :func:`log_features`. The base of a traced row is :class:`AdditiveBase` (``base="additive"``, the
    default: per-kind costs, non-negative) or, with ``base="loglinear"``, :class:`_Base` (log-linear on five
    published features; :class:`_TraceBase` with ``trace_base``); an untraced row always takes
    :class:`_Base`. ``residual``: the factor on the correction (1: all of it, 0: the base alone).
    ``n_estimators``, ``learning_rate``, ``num_leaves``,
    ``min_child_samples``: LightGBM's; ``census``: use the module census when the frame has it;
    ``trace``: use the layer table's features (``tr_*`` columns) when the frame has them;
    ``trace_base``: with ``trace`` and ``base="loglinear"``, the base of a traced row is :class:`_TraceBase`
    (fitted on the traced rows; untraced rows keep :class:`_Base`);
    ``n_jobs``: LightGBM threads; ``seed``: its bagging seed; ``balance``: weight each row by
    1 / sqrt(rows of its ``family``) so that a large family (193 ViTs) does not set the law alone;
    ``margin``: the corrected prediction is kept within ``margin`` (log units) of the span between the base
    and :class:`HiddenJoulesRegression` fitted on the same rows (:func:`bounded`; 0: the median of base,
    corrected and HJ; None: no bound). On timm's files the correction alone moved held-out families
    (levit, efficientvit, nest) further from the measurement than the base; the bound lets it move a
    prediction only as far as an independent regression on published totals supports.
    With ``nested_margin``, :func:`carb.analysis.zoo_eval.nested_margin` chooses it per held-out family on
    the other families.
    ``gemm_regimes``: the additive base prices explicit matrix products by intensity regime; ``amp_split``:
    it prices the memory-bound bytes autocast moves at fp32 apart (both :func:`additive_terms`; the defaults
    are ``conf/zoo_latency/default.yaml``'s). Leave-one-family-out on timm's four GPU files (amp fp16), both
    together against neither: families within 20 % 67 -> 71, 70 -> 73, 69 -> 74, 69 -> 73 (RTX 3090, 4090,
    5090, PRO 6000), worst family 38 -> 34, 42 -> 39, 52 -> 47, 52 -> 44 %, pooled MAPE lower on each; either
    alone was worse than neither on at least one GPU (docs/MODEL.md).
    ``sdpa_math_io``: the base prices every byte of attention's math path (:func:`sdpa_math_bytes`: its
    operands' passes too, at fp32 under autocast since PyTorch 2.5); ``other_bytes``: the bytes of operations
    of no other kind (both :func:`additive_terms`). Both together against neither (tracer 4): families within
    20 % 74 -> 76, 75 -> 80, 79 -> 80, 75 -> 75, pooled MAPE lower on each GPU (Hiera 33-37 % -> within 20 %).
    ``cpu_terms``: CPU terms of the additive base (:mod:`carb.model.zoo_latency_cpu`; none by default; timm's
    CPU file takes them from ``conf/zoo_latency/default.yaml``'s ``per_device`` section).
    ``outside``: what :func:`bounded` makes of a corrected prediction beyond ``margin`` of the span:
    ``overshoot`` (the default) drops the correction where it goes past HJ on HJ's side of the base and clips
    it elsewhere, ``clip`` keeps it at the span's edge, ``base`` drops it. ``nested_margin``: whether the
    leave-one-family-out evaluation re-chooses the margin per held-out family on the other families
    (:func:`carb.analysis.zoo_eval.nested_margin`) instead of taking ``margin``. ``overshoot`` with ``margin``
    0.05 against ``clip`` with the nested margin (session of 2026-12-07, round 2; timm's GPU files): families
    within 20 % 76, 81, 81, 77 against 76, 80, 80, 75 (RTX 3090, 4090, 5090, PRO 6000), pooled MAPE lower on
    each, worst family and lowest Spearman no worse on any (docs/MODEL.md). The correction lifts LeViT above
    both the base and HJ; the base alone was closer than the span's edge.
    ``dw_nonsquare``: the additive base prices the FLOPs of non-square depthwise convolutions on GPU rows on
    top of the depthwise cost (:func:`additive_terms`, :func:`gpu_parts`: PyTorch keeps them off cuDNN). On
    against off (session of 2026-12-07, round 3): families within 20 % 76, 82, 82, 79 against 76, 81, 81, 77,
    pooled MAPE lower on each GPU (GhostNetV 24-27 % -> 2-5 %, Inception 8-10 points lower); the worst family
    worse on the PRO 6000 (``test`` 37.6 -> 39.5 %) and RTX 3090 (FastViT 31.3 -> 31.6 %) (docs/MODEL.md).
    ``bmm_tiles``: the additive base prices the output tiles of batched matrix products on GPU rows
    (:func:`additive_terms`, :func:`gpu_parts`: a thread block per tile, so VOLO's thousands of tiny products
    per image cost what their FLOPs do not say). Off by default: on against off (session of 2026-12-07, round 4):
    families within 20 % 76, 82, 81, 78 against 76, 82, 82, 79, VOLO 4-8 points closer on every GPU but GCViT's
    49-token windows 4-16 points further off, pooled MAPE worse on the RTX 3090 and PRO 6000 (docs/MODEL.md).
    ``input_bytes``: the additive base prices the fp32 input image's MB per image on GPU rows (:func:`input_mb`:
    autocast's cast and the 3-channel stem, beside the fixed cost per batch, which falls to 0 beside it); ``"cv"``
    (the default): each fit keeps it where a family-disjoint cross-validation of its own training rows says so
    (:func:`choose_by_family_cv`; the choice is ``input_bytes_``), so a leave-one-family-out evaluation chooses
    it without the held-out family. ``cv`` against off (session of 2026-12-07, round 5): families within 20 % 76,
    81, 83, 81 against 76, 82, 82, 79 (RTX 3090, 4090, 5090, PRO 6000), worst family 31.6, 23.4, 27.1, 31.3 against
    31.6, 23.8, 26.7, 39.5 %, lowest Spearman 0.64, 0.76, 0.86, 0.62 against 0.64, 0.77, 0.84, 0.69 (docs/MODEL.md).
    ``cv_folds``, ``cv_min_models``, ``cv_seed``: that cross-validation's folds of whole families, the least models
    a family needs to be scored, and the seed that shuffles families into folds (:func:`choose_by_family_cv`).
    ``act_fp32``: the additive base prices the bytes of activations and reductions on autocast's fp32 list (an
    explicit softmax, vector norms) on top of their kind's cost (:func:`additive_terms`); ``"cv"`` chooses it inside
    each fit as ``input_bytes`` (both ``"cv"``: every combination; the choice is ``act_fp32_``).
    ``hidden_copies``: the additive base counts the copies CUDA's softmax and layer / group norm kernels make of a
    strided input (``tr_bytes_hidden_copy``) as copies on GPU rows (:func:`additive_terms`).
    ``dw_native``: the non-square depthwise term takes every depthwise convolution PyTorch keeps off cuDNN
    (:func:`dw_on_native`); ``gn_reread``: group norms' input bytes counted once more among the normalisation bytes
    (both :func:`additive_terms`, GPU rows; docs/MODEL.md, round 7).
    ``conv_tile``: the additive base prices the FLOPs convolutions compute in vain in partly empty output-channel
    tiles of that width (:func:`conv_pad_flops`, one of :data:`CONV_TILES`; 0: off) on GPU rows (docs/MODEL.md,
    round zg43c).
    """

    def __init__(self, n_estimators: int = 300, learning_rate: float = 0.03, num_leaves: int = 15,
                 min_child_samples: int = 20, census: bool = True, n_jobs: int = 1, seed: int = 0,
                 balance: bool = False, trace: bool = True, trace_base: bool = False, base: str = "additive",
                 residual: float = 1.0, margin: float | None = 0.05, gemm_regimes: bool = True,
                 amp_split: bool = True, sdpa_math_io: bool = True, other_bytes: bool = True,
                 cpu_terms: tuple[str, ...] = (), outside: str = "overshoot", nested_margin: bool = False,
                 dw_nonsquare: bool = True, bmm_tiles: bool = False, input_bytes: bool | str = "cv",
                 cv_folds: int = 5, cv_min_models: int = 5, cv_seed: int = 0, act_fp32: bool | str = False,
                 hidden_copies: bool = True, dw_native: bool = True, gn_reread: bool = False,
                 cuda_layout: bool = True, conv_tile: int | str = 128):
        if base not in ("loglinear", "additive"):
            raise DatasetError(f"ZooLatencyModel: base={base!r} is not allowed; allowed: loglinear, additive")
        self.n_estimators, self.learning_rate = n_estimators, learning_rate
        self.num_leaves, self.min_child_samples = num_leaves, min_child_samples
        self.census, self.n_jobs, self.seed, self.balance = census, n_jobs, seed, balance
        self.trace, self.trace_base, self.base, self.residual = trace, trace_base, base, residual
        self.margin, self.gemm_regimes, self.amp_split = margin, gemm_regimes, amp_split
        self.sdpa_math_io, self.other_bytes, self.dw_nonsquare = sdpa_math_io, other_bytes, dw_nonsquare
        self.bmm_tiles, self.input_bytes = bmm_tiles, input_bytes
        self.cv_folds, self.cv_min_models, self.cv_seed = cv_folds, cv_min_models, cv_seed
        self.act_fp32, self.hidden_copies = act_fp32, hidden_copies
        self.dw_native, self.gn_reread, self.cuda_layout = dw_native, gn_reread, cuda_layout
        self.cpu_terms = tuple(cpu_terms)   # per-device CPU terms of the additive base (timm's CPU file)
        if conv_tile not in (0, *CONV_TILES):   # 0: off
            raise DatasetError(f"ZooLatencyModel: conv_tile={conv_tile!r} is not allowed; allowed: "
                               f"{', '.join(str(t) for t in (0, *CONV_TILES))}")
        self.conv_tile = conv_tile
        for key, value in (("input_bytes", input_bytes), ("act_fp32", act_fp32)):
            if value not in (True, False, "cv"):
                raise DatasetError(f"ZooLatencyModel: {key}={value!r} is not allowed; allowed: true, false, cv")
        if outside not in OUTSIDE:
            raise DatasetError(f"ZooLatencyModel: outside={outside!r} is not allowed; allowed: {', '.join(OUTSIDE)}")
        self.outside, self.nested_margin = outside, nested_margin

    def fit(self, frame: pd.DataFrame) -> ZooLatencyModel:
        """Fit on ``frame``'s rows with a finite base prediction and target; returns self."""
        from lightgbm import LGBMRegressor

        w = None
        if self.balance and "family" in frame.columns:
            fam = frame["family"].astype(str)
            w = 1 / np.sqrt(fam.map(fam.value_counts()).to_numpy(float))
        self.base_ = _Base().fit(frame, w)
        self.hj_ = HiddenJoulesRegression().fit(frame, w)
        self.tbase_ = None
        self.input_bytes_, self.act_fp32_ = self.input_bytes is True, self.act_fp32 is True
        if self.trace and (self.trace_base or self.base == "additive") and "tr_flops" in frame.columns:
            try:
                if self.base == "additive":
                    self.input_bytes_, self.act_fp32_ = self._cv_switches(frame, w)
                self.tbase_ = (self._additive(self.input_bytes_, self.act_fp32_) if self.base == "additive"
                               else _TraceBase()).fit(frame, w)
            except DatasetError:   # too few traced rows: the plain base only
                self.tbase_ = None
        y = per_image_log_ms(frame)
        resid = y - self._base_log(frame)
        ok = np.isfinite(resid)
        self.booster_ = LGBMRegressor(n_estimators=self.n_estimators, learning_rate=self.learning_rate,
                                      num_leaves=self.num_leaves, min_child_samples=self.min_child_samples,
                                      subsample=0.8, subsample_freq=1, colsample_bytree=0.8,
                                      random_state=self.seed, n_jobs=self.n_jobs, verbose=-1)
        X = log_features(frame, self.census, self.trace)
        self.features_ = list(X.columns)
        self.booster_.fit(X[ok], resid[ok], sample_weight=None if w is None else w[ok])
        return self

    def _cv_switches(self, frame: pd.DataFrame, w: np.ndarray | None) -> tuple[bool, bool]:
        """``(input_bytes, act_fp32)`` of the additive base: each switch set to ``"cv"`` is chosen, over every
        combination of those, by :func:`choose_by_family_cv` on ``frame`` (weights ``w`` (n,) or None); a switch
        set to True / False is kept."""
        opts = [(False, True) if v == "cv" else (bool(v),) for v in (self.input_bytes, self.act_fp32)]
        combos = [(a, b) for a in opts[0] for b in opts[1]]
        if len(combos) == 1:
            return combos[0]
        i = choose_by_family_cv(frame, [lambda c=c: self._additive(*c) for c in combos], w,
                                folds=self.cv_folds, min_models=self.cv_min_models, seed=self.cv_seed)
        return combos[i]

    def _additive(self, input_bytes: bool, act_fp32: bool = False) -> AdditiveBase:
        """An unfitted :class:`AdditiveBase` with this model's settings, ``input_bytes`` and ``act_fp32``."""
        return AdditiveBase(gemm_regimes=self.gemm_regimes, amp_split=self.amp_split,
                            sdpa_math_io=self.sdpa_math_io, other_bytes=self.other_bytes,
                            cpu_terms=self.cpu_terms, dw_nonsquare=self.dw_nonsquare,
                            bmm_tiles=self.bmm_tiles, input_bytes=input_bytes, act_fp32=act_fp32,
                            hidden_copies=self.hidden_copies, dw_native=self.dw_native, gn_reread=self.gn_reread,
                            cuda_layout=self.cuda_layout, conv_tile=self.conv_tile)

    def components(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The log time per image (n rows) of the base (``base``), the base times the correction
        (``corrected``) and :class:`HiddenJoulesRegression` fitted on the same rows (``hj``), before the
        bound: :func:`bounded` of them with :attr:`margin` is :meth:`predict_log`."""
        X = log_features(frame, self.census, self.trace)[self.features_]
        base = self._base_log(frame)
        return pd.DataFrame({"base": base, "corrected": base + self.residual * self.booster_.predict(X),
                             "hj": self.hj_.predict_log(frame)}, index=frame.index)

    def predict_log(self, frame: pd.DataFrame) -> np.ndarray:
        """Log time per image (n,): :func:`bounded` :meth:`components` with :attr:`margin`."""
        c = self.components(frame)
        return bounded(c["base"].to_numpy(float), c["corrected"].to_numpy(float), c["hj"].to_numpy(float),
                       self.margin, self.outside)

    def _base_log(self, frame: pd.DataFrame) -> np.ndarray:
        """The base's log time per image (n,): :class:`_TraceBase` where fitted and the row is traced,
        else :class:`_Base`."""
        out = self.base_.predict_log(frame)
        if self.tbase_ is not None and "tr_flops" in frame.columns:
            t = self.tbase_.predict_log(frame)
            out = np.where(np.isfinite(t), t, out)
        return out

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """``latency_ms`` per batch (n,)."""
        return np.exp(self.predict_log(frame)) * _col(frame, "batch_size", "ZooLatencyModel")
