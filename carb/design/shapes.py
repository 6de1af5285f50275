"""Per-layer GEMM shapes of a configuration: what each operator of one forward asks of the hardware.

A convolution runs as a matrix product ``(M x K) @ (K x N)``: ``M`` output pixels (batch x H_out x
W_out), ``N`` output channels, ``K`` = input channels x kernel area. Its cost is not its FLOPs alone:
a GEMM with a thin side (16 channels, a 1 x 1 feature map) runs far below the device's peak, and
the bytes it streams (the im2col input ``M x K``, the output ``M x N``, the weights ``N x K``) matter
when they do not fit in cache. Expanding the usual efficiency law
``time = MNK / (rate * e_M * e_N * e_K)`` with ``e_X = X / (X + X0)`` gives a cost that is *linear*
in the sums over layers of ``MNK``, ``MK``, ``MN``, ``NK`` and ``M`` with non-negative coefficients
(``MK / N0``, ...), which :class:`carb.model.physics.RooflinePrior` fits per device. Batch norm,
ReLU, max-pool and the residual add are memory-bound element-wise passes, counted as tensor elements.

:func:`gemm_terms` gives these sums for many rows at once (cached per architecture, scaled by batch);
like :func:`carb.design.features.per_image_counts`, it sums over the one walk of the network
(:mod:`carb.design.layers`).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from functools import lru_cache

import numpy as np
import pandas as pd

from carb.design.arch import BYTES_PER_ELEMENT, KNOB_DEFAULTS, KNOBS, ArchConfig, configs_from_records, lookup
from carb.design.candidates import arch_codes, frame_records
from carb.design.layers import arch_key, network_summary, out_side, part_layers, part_runs
from carb.errors import ConfigError, DatasetError

#: Columns of :func:`gemm_terms`, in elements (not bytes) at the row's batch size:
#: ``gemm_MNK`` multiply-adds of every conv and the classifier, ``gemm_MK`` im2col input elements,
#: ``gemm_MN`` output elements, ``gemm_NK`` weight elements, ``gemm_M`` output pixels (summed over
#: layers), ``elementwise`` elements passed by batch norm, ReLU, pooling and the residual add,
#: ``n_ops`` operators in one forward (convs, linear, element-wise passes).
#: ``stem_MNK`` multiply-adds of the first convolution alone (3 input channels: libraries run it with a
#: kernel of its own, far below the rate of the others).
GEMM_TERMS: tuple[str, ...] = ("gemm_MNK", "gemm_MK", "gemm_MN", "gemm_NK", "gemm_M", "elementwise", "n_ops",
                               "stem_MNK")
#: Terms that grow with the batch (the others do not depend on it).
PER_IMAGE_TERMS: tuple[str, ...] = ("gemm_MNK", "gemm_MK", "gemm_MN", "gemm_M", "elementwise", "stem_MNK")
#: Knob columns :func:`gemm_terms` needs (``stages`` and ``inner_mult`` are optional).
SHAPE_INPUTS: tuple[str, ...] = ("block", "depth", "width_mult", "input_size", "batch_size", "early_downsample")
#: Columns of the per-layer array :func:`_walk` returns.
CONV_COLUMNS: tuple[str, ...] = ("M_per_image", "N", "K", "kernel", "stride", "H_in")
_ARCH_KNOBS = tuple(k for k in KNOBS if k not in ("batch_size", "precision"))


@lru_cache(maxsize=65536)
def _walk(block: str, layout: tuple[int, ...], width_mult: float, input_size: int, early_downsample: bool,
          num_classes: int = 1000, inner_mult: float = 1.0) -> tuple[np.ndarray, float, int]:
    """``(convs, elementwise elements, element-wise passes)`` of one image over the layers of
    :func:`carb.design.layers.walk` (same arguments): ``convs`` is an (n, 6) array of
    ``(M per image, N, K, kernel, stride, H_in)``, one row per convolution and the classifier (kernel 0:
    a matrix product, not a convolution), in forward order; see :data:`CONV_COLUMNS`."""
    rows, elem, n_elem = [], 0, 0
    for part, k in part_runs(block, layout, width_mult, input_size, early_downsample, num_classes, inner_mult):
        convs, e, n = _part_shapes(part.kind, part.shape)
        rows.extend([convs] * k)      # the part's rows k times, in order: one concatenation (np.tile: 10 us a call)
        elem, n_elem = elem + k * e, n_elem + k * n
    a = np.concatenate(rows)
    a.setflags(write=False)
    return a, float(elem), n_elem


@lru_cache(maxsize=65536)
def _part_shapes(kind: str, shape: tuple) -> tuple[np.ndarray, int, int]:
    """``(GEMM rows, elements passed, element-wise passes)`` of the layers of one part of the walk
    (:func:`carb.design.layers.part_layers`), as :func:`_walk` counts them: a convolution or the
    classifier is a :data:`CONV_COLUMNS` row; batch norm, ReLU and the residual add pass their output,
    the max-pool and the average pool read their whole input."""
    rows = []
    elem = n_elem = 0
    for spec in part_layers(kind, shape):
        if spec.kind == "conv":
            rows.append((spec.out_size**2, spec.out_channels, spec.in_channels // spec.groups * spec.kernel**2,
                         spec.kernel, spec.stride, spec.in_size))
        elif spec.kind == "linear":
            rows.append((1, spec.out_channels, spec.in_channels, 0, 1, 1))
        else:
            elem += spec.in_elements if spec.kind in ("maxpool", "avgpool") else spec.out_elements
            n_elem += 1
    a = np.array(rows, dtype=float).reshape(-1, len(CONV_COLUMNS))
    a.setflags(write=False)
    return a, elem, n_elem


@lru_cache(maxsize=65536)
def per_image_terms(block: str, layout: tuple[int, ...], width_mult: float, input_size: int,
                    early_downsample: bool, num_classes: int = 1000, inner_mult: float = 1.0) -> tuple[float, ...]:
    """:data:`GEMM_TERMS` of one image (batch 1), as a tuple in that order: the sums over :func:`_walk`'s
    rows, from each distinct part once (:func:`carb.design.layers.network_summary`; whole numbers below
    2**53, so the same floats in any order of summing)."""
    t = network_summary(block, layout, width_mult, input_size, early_downsample, num_classes, inner_mult)
    return tuple(float(v) for v in (t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[13]))


_SHARED = threading.local()   # .entries: [[frame, its architectures or None], ...] inside shared_architectures


@contextlib.contextmanager
def shared_architectures(*frames: pd.DataFrame) -> Iterator[None]:
    """Within the block (in this thread), :func:`architectures` of each of ``frames``, these very objects, is
    computed once: a cascade's priors ask for it four or five times per prediction (4 ms each for the 6,912 knot
    rows of a 3,072-candidate screening; about 200 times in one ``carb-train``'s refits). The caller must not
    change the frames' knob columns inside the block."""
    prev = getattr(_SHARED, "entries", None)
    _SHARED.entries = [[f, None] for f in frames] + list(prev or [])
    try:
        yield
    finally:
        _SHARED.entries = prev


def architectures(frame: pd.DataFrame) -> tuple[np.ndarray, dict[int, object]]:
    """:func:`find_architectures`, once per frame inside :func:`shared_architectures` of it."""
    for entry in getattr(_SHARED, "entries", None) or ():
        if entry[0] is frame:
            if entry[1] is None:
                entry[1] = find_architectures(frame)
            return entry[1]
    return find_architectures(frame)


def find_architectures(frame: pd.DataFrame) -> tuple[np.ndarray, dict[int, object]]:
    """``(key per row, {key: ArchConfig at batch 1})`` for the frame's architecture knobs: the key is the
    code of the row's distinct architecture (int, 0.. in first-seen order; shape (n,)); pass it as
    ``arch`` to :func:`gemm_terms` and :func:`large_output_MB` on the same frame to build it once. Each
    distinct architecture is validated once (vectorized: a million rows take about a second).

    Raises :class:`DatasetError` naming the missing knob columns."""
    missing = [c for c in SHAPE_INPUTS if c not in frame.columns]
    if missing:
        raise DatasetError(f"layer shapes need knob column(s) {missing}; the data lacks them")
    arch_cols = [c for c in _ARCH_KNOBS if c in frame.columns]
    keys, uniq = arch_codes(frame, arch_cols)   # a missing knob is a value of its own here: its default is put
    for k, v in KNOB_DEFAULTS.items():          # in below, per distinct architecture (two codes may then name
        if k in uniq.columns:                   # the same network; each row still gets its own one)
            uniq[k] = uniq[k].fillna(v)
    if "stages" in uniq.columns:
        uniq["stages"] = uniq["stages"].astype(object).where(uniq["stages"].notna(), None)
    recs = [dict(r, batch_size=1, precision="fp32") for r in frame_records(uniq)]
    try:     # each architecture validated once per process (a cascade's priors ask a dozen times per predict)
        return keys, {u: _arch_config(tuple(r.items())) for u, r in enumerate(recs)}
    except (ConfigError, TypeError):
        return keys, dict(enumerate(configs_from_records(recs, source="layer shapes")))   # names the row


@lru_cache(maxsize=65536)
def _arch_config(items: tuple) -> ArchConfig:
    """``ArchConfig(**dict(items))``, cached: knob values to a validated configuration."""
    return ArchConfig(**dict(items))


def _row_values(keys: np.ndarray, cfgs: dict[int, object], fn) -> np.ndarray:
    """``fn(walk arguments)`` of each distinct architecture of :func:`architectures`, gathered per row:
    shape (n, ...) (float)."""
    per = np.array([fn(*_args(cfgs[u])) for u in range(len(cfgs))], dtype=float)
    return per[np.asarray(keys, dtype=np.int64)]


def _args(c) -> tuple:
    """The arguments of :func:`_walk` for an :class:`~carb.design.arch.ArchConfig`."""
    return arch_key(c)


def gemm_terms(frame: pd.DataFrame, arch: tuple | None = None) -> pd.DataFrame:
    """:data:`GEMM_TERMS` for each row of ``frame`` (knob columns, see :data:`SHAPE_INPUTS`): a
    DataFrame with the frame's index, in elements at the row's batch size; shape (n, 8).

    Raises :class:`DatasetError` naming the missing knob columns."""
    keys, cfgs = arch if arch is not None else architectures(frame)
    vals = _row_values(keys, cfgs, per_image_terms).reshape(len(keys), len(GEMM_TERMS))
    out = pd.DataFrame(vals, columns=list(GEMM_TERMS), index=frame.index)
    batch = pd.to_numeric(frame["batch_size"], errors="coerce").to_numpy(float)
    for t in PER_IMAGE_TERMS:
        out[t] = out[t].to_numpy() * batch
    return out


@lru_cache(maxsize=65536)
def _sorted_outputs(args: tuple, channel_block: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Output elements per image of each convolution (channels padded up to a multiple of
    ``channel_block``), ascending, and their suffix sums (one longer)."""
    a = _walk(*args)[0]
    out = np.sort(a[:, 0] * np.ceil(a[:, 1] / channel_block) * channel_block)
    return out, np.concatenate([np.cumsum(out[::-1])[::-1], [0.0]])


def large_output_MB(frame: pd.DataFrame, threshold_MB: float, channel_block: int = 1,
                    arch: tuple | None = None) -> pd.Series:
    """MB (2**20 bytes) per forward of the convolution outputs that are each at least ``threshold_MB``
    at the row's batch size and precision, channels padded up to a multiple of ``channel_block`` (the
    blocked layout a CPU convolution library computes in: oneDNN pads to 16 channels with AVX-512);
    a Series with the frame's index.

    Why: a CPU allocator hands a buffer that large fresh pages on every forward (glibc's ``malloc``
    maps allocations of 32 MiB and more with ``mmap`` and unmaps them when freed), so every such
    tensor pays page faults and zeroing on top of its compute. Measured on the CPU reference VM:
    basic-56 width 0.25 at 224 px in fp32 takes 20.5 ms per image at batch 8 (16-channel maps of
    25 MiB in the 16-channel blocked layout) and 41 ms per image at batch 16 (49 MiB, about 1 GB of
    page faults per forward); bf16 crosses the same line at batch 32. Non-decreasing in batch size; zero below the line.

    Raises :class:`DatasetError` naming the missing knob or precision column."""
    if "precision" not in frame.columns:
        raise DatasetError("layer shapes need knob column(s) ['precision']; the data lacks them")
    keys, cfgs = arch if arch is not None else architectures(frame)
    batch = pd.to_numeric(frame["batch_size"], errors="coerce").to_numpy(float)
    nbytes = lookup(frame["precision"].astype(str), BYTES_PER_ELEMENT)
    out = np.full(len(frame), np.nan)
    threshold = float(threshold_MB) * 2.0**20
    ok = np.isfinite(batch) & np.isfinite(nbytes) & (batch > 0)
    codes = np.asarray(keys, dtype=np.int64)
    ok_rows = np.flatnonzero(ok)
    order = ok_rows[np.argsort(codes[ok_rows], kind="stable")]
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0]) if len(order) else np.zeros(0, int)
    for idx in np.split(order, starts[1:]) if len(order) else []:       # vectorised per architecture
        k = int(codes[idx[0]])
        elems, suffix = _sorted_outputs(_args(cfgs[k]), int(channel_block))
        per = batch[idx] * nbytes[idx]    # bytes per output element of one image, times the batch
        out[idx] = suffix[np.searchsorted(elems, threshold / per, side="left")] * per / 2.0**20
    return pd.Series(out, index=frame.index, name="large_output_MB")


@lru_cache(maxsize=65536)
def _max_im2col(args: tuple) -> float:
    """The largest im2col input ``M x K`` (elements per image) over the convolutions of one network
    whose kernel is larger than 1 x 1 (0 when there is none), from :func:`carb.design.layers.network_summary`."""
    return float(network_summary(*args)[12])


def max_im2col_MB(frame: pd.DataFrame, arch: tuple | None = None) -> pd.Series:
    """MB (2**20 bytes) of the largest im2col input of one forward: over the convolutions with a
    kernel larger than 1 x 1, the most ``M x K`` (output pixels x input channels x kernel area) at the
    row's batch size and precision; a Series with the frame's index. Non-decreasing in batch size.

    Why: a convolution library that lowers a k x k convolution to a matrix product (cuDNN's GEMM and
    precomputed-index algorithms, PyTorch's native CPU path) takes a workspace of about this size for
    the layer it runs, on top of the live activations. On the shipped H200 data, fitted on batch <= 32,
    a memory prior with this term predicts batch 64-256 with R^2 0.9986 (0.9892 without) and the 90th
    percentile |log error| falls from 0.41 to 0.25: small networks at large batch, whose peak is the
    workspace of the stem or first-stage convolutions, were 30-60 % under.

    Raises :class:`DatasetError` naming the missing knob or precision column."""
    if "precision" not in frame.columns:
        raise DatasetError("layer shapes need knob column(s) ['precision']; the data lacks them")
    keys, cfgs = arch if arch is not None else architectures(frame)
    batch = pd.to_numeric(frame["batch_size"], errors="coerce").to_numpy(float)
    nbytes = lookup(frame["precision"].astype(str), BYTES_PER_ELEMENT)
    vals = _row_values(keys, cfgs, lambda *a: _max_im2col(a)) * batch * nbytes / 2.0**20
    return pd.Series(vals, index=frame.index, name="max_im2col_MB")


#: Precisions PyTorch runs through oneDNN on an x86 CPU, by the ISA flags that enable them (any one
#: set suffices; the fingerprint records these flags): fp32 always; bf16 with AVX-512 BW/VL or AMX;
#: fp16 with AVX-512 FP16 or AMX FP16. Without them a precision takes the native path everywhere.
ONEDNN_ISA: dict[str, tuple[frozenset[str], ...]] = {
    "fp32": (frozenset(),),
    "bf16": (frozenset({"avx512bw", "avx512vl"}), frozenset({"amx_bf16"})),
    "fp16": (frozenset({"avx512_fp16"}), frozenset({"amx_fp16"})),
}


def onednn_precisions(isa: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The precisions PyTorch convolves with oneDNN on a CPU with these ISA flags (see
    :data:`ONEDNN_ISA`); ``isa=None`` (unknown) assumes an AVX-512 x86 without FP16: fp32 and bf16."""
    if isa is None:
        return ("fp32", "bf16")
    have = set(isa)
    return tuple(p for p, sets in ONEDNN_ISA.items() if any(req <= have for req in sets))


#: Columns of :func:`native_terms`.
NATIVE_TERMS: tuple[str, ...] = ("native_weight_MB", "native_aliased_MAC")
#: Row strides (bytes) of the native path's GEMM operands up to 2**ALIAS_FREE_LOG2 bytes of power-of-two
#: alignment run at full rate; each doubling of alignment above it costs more, up to 2**ALIAS_MAX_LOG2.
ALIAS_FREE_LOG2, ALIAS_MAX_LOG2 = 7, 13


def _aliasing(m: np.ndarray, nbytes: int) -> np.ndarray:
    """Doublings of power-of-two alignment of a native GEMM's row (``m`` output pixels per image x
    ``nbytes``) past the free ones (:data:`ALIAS_FREE_LOG2`), at most ``ALIAS_MAX_LOG2 - ALIAS_FREE_LOG2``."""
    row = (np.asarray(m) * nbytes).astype(np.int64)
    log2 = np.log2((row & -row).astype(float))
    return np.clip(log2, ALIAS_FREE_LOG2, ALIAS_MAX_LOG2) - ALIAS_FREE_LOG2


def _native_mask(a: np.ndarray, batch: np.ndarray | float, threads: int) -> np.ndarray:
    """Which rows of a :data:`CONV_COLUMNS` array PyTorch's fp32 CPU convolution runs natively at
    ``batch`` (scalar or one per row) with ``threads`` torch threads (ATen ``Convolution.cpp``,
    ``use_mkldnn``), counting only layers with more than one output pixel per image."""
    m, k, ker, stride, h = a[:, 0], a[:, 2], a[:, 3], a[:, 4], a[:, 5]
    conv = (ker > 0) & (m > 1)
    cin = k / np.maximum(ker, 1) ** 2
    one_by_one = (ker == 1) & (stride == 1)
    first = ~one_by_one | (batch >= 16) | (threads > 1)
    second = (ker > 3) | (batch > 1) | (batch * cin * h * h > 20480)
    return conv & ~(first & second)


@lru_cache(maxsize=65536)
def _native_sums(args: tuple, threads: int) -> np.ndarray:
    """Per-image sums over the convolutions PyTorch runs on its native CPU path (``slow_conv2d``: one
    GEMM per image), for the regimes batch 1, batch 2-15 and "every convolution" (a precision oneDNN
    cannot run), counting only layers with more than one output pixel per image (a 1 x 1 map is a
    matrix-vector product): shape (3, 3), rows = regimes, columns = weight elements (sum of ``N x K``),
    aliased multiply-adds at 4-byte and at 2-byte elements (see :func:`native_terms`)."""
    a = _walk(*args)[0]
    m, n, k, ker = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
    conv = (ker > 0) & (m > 1)
    w, macs = n * k, m * n * k
    a4, a2 = _aliasing(m, 4), _aliasing(m, 2)
    out = np.array([[float((w * sel).sum()), float((macs * a4 * sel).sum()), float((macs * a2 * sel).sum())]
                    for sel in (_native_mask(a, 1, threads), _native_mask(a, 2, threads), conv)])
    out.setflags(write=False)
    return out


def layer_terms(layers: np.ndarray, batch: np.ndarray, precision: np.ndarray, threads: int,
                onednn: tuple[str, ...] | list[str], stem: np.ndarray | None = None) -> pd.DataFrame:
    """:data:`GEMM_TERMS` (elements) and :data:`NATIVE_TERMS` of single convolutions, one per row, as
    :func:`gemm_terms` and :func:`native_terms` count them inside a network: ``layers`` is an (n, 6)
    :data:`CONV_COLUMNS` array, ``batch`` and ``precision`` one value per row; shape (n, 10). A layer
    is a stem where ``stem`` (bool, one per row) says so; default: the layers with 3 input channels (a
    single probed convolution of 3 channels is a network's first). Used to fit a device probe (:mod:`carb.measure.probe`) in
    the same terms as the latency prior."""
    a = np.asarray(layers, dtype=float).reshape(-1, len(CONV_COLUMNS))
    b = np.asarray(batch, dtype=float)
    prec = np.asarray(precision).astype(str)
    m, n, k, ker = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
    macs = m * n * k
    cin = k / np.maximum(ker, 1) ** 2
    nbytes = lookup(pd.Series(prec), BYTES_PER_ELEMENT)
    out = pd.DataFrame({"gemm_MNK": macs * b, "gemm_MK": m * k * b, "gemm_MN": m * n * b, "gemm_NK": n * k,
                        "gemm_M": m * b, "elementwise": 0.0, "n_ops": 1.0,
                        "stem_MNK": np.where(((cin == 3) if stem is None else np.asarray(stem, bool)) & (ker > 0),
                                             macs * b, 0.0)})
    on = np.isin(prec, list(onednn))
    native = np.where(on, (prec == "fp32") & _native_mask(a, b, threads), (ker > 0) & (m > 1))
    alias = np.where(nbytes >= 4, _aliasing(m, 4), _aliasing(m, 2))
    out["native_weight_MB"] = np.where(native, b * n * k * nbytes / 2.0**20, 0.0)
    out["native_aliased_MAC"] = np.where(native, b * macs * alias, 0.0)
    return out


def native_terms(frame: pd.DataFrame, threads: int, onednn: tuple[str, ...] | list[str],
                 arch: tuple | None = None) -> pd.DataFrame:
    """What PyTorch's native CPU convolution path costs beyond oneDNN, per row at its batch size and
    precision: a DataFrame with the frame's index and :data:`NATIVE_TERMS` columns,

    - ``native_weight_MB``: MB (2**20 bytes) of weights it streams once per image;
    - ``native_aliased_MAC``: its multiply-adds, each weighted by how many doublings of power-of-two
      alignment the GEMM's row stride (output pixels per image x bytes per element) has beyond
      ``2**ALIAS_FREE_LOG2`` bytes (at most ``ALIAS_MAX_LOG2 - ALIAS_FREE_LOG2``).

    Why: on a CPU, PyTorch hands a convolution to oneDNN or to its native ``slow_conv2d`` (a GEMM per
    image) by a fixed rule: with one thread, stride-1 1 x 1 convolutions at batch 2-15 go native, and so
    do small batch-1 inputs (at most 20480 elements); a precision oneDNN cannot run on this ISA (fp16
    without AVX-512 FP16) goes native everywhere. Per image, a GEMM over a few output pixels is bound by
    reading its weights: measured on the CPU reference VM with one thread, a 1 x 1 convolution of
    1024 -> 256 channels on a 2 x 2 map takes 0.19 ms per image at batch 1-15 and 0.04 ms per image at
    batch 16 (oneDNN); bottleneck-152 at 32 px takes 272 ms at batch 15 and 68 ms at batch 16. And the
    fallback GEMM of a precision without a tuned kernel suffers cache-set conflicts when its rows are
    aligned to large powers of two: a 3 x 3 fp16 convolution on that VM runs at 2.8-3.3 GMAC/s on maps
    of 24, 28, 40, 56 or 72 px (rows aligned to at most 128 bytes), 1.3 at 48 and 112 px (512 bytes),
    0.9 at 32 and 96 px (2 KB) and 0.5 at 64 and 128 px (8 KB and more; scripts/studies/cpu_dispatch.py).
    ``threads``: the torch threads the rows were measured with; ``onednn``: the precisions oneDNN runs
    (:func:`onednn_precisions`). Zero at batch 16 and more for fp32: not monotone in batch, as measured."""
    if "precision" not in frame.columns:
        raise DatasetError("layer shapes need knob column(s) ['precision']; the data lacks them")
    keys, cfgs = arch if arch is not None else architectures(frame)
    batch = pd.to_numeric(frame["batch_size"], errors="coerce").to_numpy(float)
    prec = frame["precision"].astype(str).to_numpy()
    nbytes = lookup(prec, BYTES_PER_ELEMENT)
    sums = _row_values(keys, cfgs, lambda *a: _native_sums(a, int(threads))).reshape(len(keys), 3, 3)
    on = np.isin(prec, list(onednn))
    regime = np.where(~on, 2, np.where(prec != "fp32", -1, np.where(batch <= 1, 0, np.where(batch < 16, 1, -1))))
    rows = np.arange(len(keys))
    picked = np.where((regime >= 0)[:, None], sums[rows, np.maximum(regime, 0)], 0.0)   # (n, 3)
    aliased = np.where(nbytes >= 4, picked[:, 1], picked[:, 2])
    return pd.DataFrame({"native_weight_MB": batch * picked[:, 0] * nbytes / 2.0**20,
                         "native_aliased_MAC": batch * aliased}, index=frame.index)


def native_weight_MB(frame: pd.DataFrame, threads: int, onednn: tuple[str, ...] | list[str],
                     arch: tuple | None = None) -> pd.Series:
    """The ``native_weight_MB`` column of :func:`native_terms` (MB of weights PyTorch's native CPU
    convolution streams once per image); a Series with the frame's index."""
    return native_terms(frame, threads, onednn, arch)["native_weight_MB"].rename("native_weight_MB")


def space_layers(frame: pd.DataFrame) -> np.ndarray:
    """Distinct convolutions ``(cin, cout, kernel, stride, H_in)`` of the networks the rows of ``frame``
    name (knob columns, see :data:`carb.design.shapes.SHAPE_INPUTS`), classifiers left out; shape (n, 5)."""
    _, cfgs = architectures(frame)
    rows = set()
    for c in cfgs.values():
        a = _walk(*_args(c))[0]
        for m, n, k, ker, stride, h in a:
            if ker > 0:
                rows.add((int(round(k / ker**2)), int(n), int(ker), int(stride), int(h)))
    return np.array(sorted(rows), dtype=int).reshape(-1, 5)


def out_size(h: int, kernel: int, stride: int) -> int:
    """Output map side of a convolution with padding ``kernel // 2``."""
    return out_side(h, kernel, stride, kernel // 2)


def layer_array(probe: pd.DataFrame) -> np.ndarray:
    """The probe's layers as a :data:`carb.design.shapes.CONV_COLUMNS` array ``(M per image, N, K,
    kernel, stride, H_in)``; shape (n, 6)."""
    cin, cout, ker, stride, h = (probe[c].to_numpy(float) for c in ("cin", "cout", "kernel", "stride", "H_in"))
    ho = np.array([out_size(int(a), int(b), int(c)) for a, b, c in zip(h, ker, stride)], dtype=float)
    return np.column_stack([ho * ho, cout, cin * ker * ker, ker, stride, h])


@lru_cache(maxsize=65536)
def _largest_output(args: tuple) -> float:
    """Elements per image of the largest convolution output of one network."""
    a = _walk(*args)[0]
    conv = a[:, 3] > 0
    return float((a[conv, 0] * a[conv, 1]).max()) if conv.any() else 0.0


def largest_output_elements(frame: pd.DataFrame, arch: tuple | None = None) -> pd.Series:
    """Elements of the largest convolution output of one forward at the row's batch size (the tensor
    its batch norm reads); a Series with the frame's index. PyTorch indexes tensors of fewer than 2**31 - 1
    elements with 32 bits; at or past that line it takes other kernels (batch norm leaves cuDNN for its
    native kernel). Raises :class:`DatasetError` naming the missing knob columns."""
    keys, cfgs = arch if arch is not None else architectures(frame)
    batch = pd.to_numeric(frame["batch_size"], errors="coerce").to_numpy(float)
    return pd.Series(_row_values(keys, cfgs, lambda *a: _largest_output(a)) * batch, index=frame.index,
                     name="largest_output")
