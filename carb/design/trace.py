"""A layer table from any PyTorch vision model: one row per executed operation of one forward, traced on
the meta device (no weights allocated, no arithmetic), cached on disk.

:func:`trace` takes an ``nn.Module`` or a zoo name (:func:`carb.design.zoo.build_model`, with its
constructor settings) and an input shape ``(batch, channels, H, W)``. It runs one forward at batch 1
under a ``TorchDispatchMode`` (as ``torch.utils.flop_counter`` does, and with its per-operator FLOP
formulas, ``flop_registry``) and records each ATen operation; counts then scale linearly to the batch.
Columns of the table (:data:`COLUMNS`):

* ``op``: the ATen operator (``convolution``, ``addmm``, ``native_batch_norm``, ...); ``module``: the
  qualified name of the innermost module running it ("" at the top level);
* ``kind``: one of :data:`KINDS`. Convolutions split by their weight: ``conv_depthwise`` (one input
  channel per group, groups > 1), ``conv_pointwise`` (1x1, groups 1), ``conv_grouped`` (other groups > 1),
  ``conv_regular``; ``linear`` is a matrix product with a parameter operand, ``matmul`` one between two
  activations; ``sdpa`` one call of ``F.scaled_dot_product_attention`` (a fused op: its decomposition on
  the meta device is not recorded); ``norm``, ``activation``, ``pool`` (window pooling and a mean over
  the two spatial dims), ``reduce`` (other reductions), ``elementwise``, ``copy``, ``reshape`` (views: no
  data moves), ``concat``, ``other``;
* ``in_shape``, ``out_shape``: of the first activation input and the first output, at batch 1 (tuples);
  ``weight_shape``: of the parameter operand of a convolution or linear row (else ());
  ``kernel``, ``stride``, ``groups``: of a convolution or pooling window (1 when none);
* ``flops``: ``torch.utils.flop_counter``'s formula where it has one (2 per multiply-add: convolutions,
  matrix products, attention), else 1 per output element (activation, element-wise), 1 per input
  element (pool, reduce), 2 per output element (norm), 0 (copy, reshape, concat);
* ``macs``: fvcore's count (the "GMACs" of timm's tables and of Hidden Joules): multiply-adds of
  convolutions, matrix products and attention, eval batch norm 2 per element (1 without affine),
  layer/group norm 5 per element (4), adaptive/mean pooling 1 per input element, nearest / bilinear
  upsampling 1 / 4 per output element; 0 otherwise;
* ``bytes_read`` / ``bytes_written``: activations and parameters read, outputs written, at the
  precision's bytes per element (:data:`carb.design.arch.BYTES_PER_ELEMENT`; every tensor, integer
  ones included, counts at it); ``param_bytes``: the parameter (and buffer) part of ``bytes_read``;
* ``params``: parameter elements the row reads (each parameter once per row that reads it);
* ``live_bytes``: activation bytes alive after the operation (the input included, parameters excluded):
  storages are tracked through weak references, so a storage counts from the operation that makes it
  until the model's code drops its last reference (eager execution's lifetimes). The peak-memory
  estimate is the maximum over rows, not a sum. Floating storages count at the precision's bytes per
  element; integer and boolean ones (``max_pool2d_with_indices``' int64 indices, masks) at their own
  dtype's, whatever the precision, as a real forward holds them (SqueezeNet 1.1 bf16, batch 4, 128 px:
  the first max-pool's indices are 4x its output; counted at 2 bytes the estimate was 21 % under the
  measured peak). A storage made only from parameters, buffers and other such storages (no input in its
  history: LeViT's and Swin's attention biases gathered from their tables) has the same size at every
  batch: it counts once, not per image. One the module still holds after the forward is a cache (LeViT's
  ``attention_bias_cache``, filled by the first eval forward): model state, not counted at all, as the
  CPU collector, which measures after warm-up forwards, does not count it (a GPU allocator's peak, which
  counts all that is allocated, does: its bytes are ``attrs["cache_elems"]`` / ``["cache_fixed"]``,
  :func:`summarize`'s ``cache_bytes``). Before (tracer 2), LeViT-128S's eleven cached bias gathers
  counted as activations of every image: the estimate was 28 % over the measured peak at batch 16, 1.6x
  the real activations at batch 1; now it equals the CPU collector's peak less the module's buffers;
* ``live_state_bytes``: the batch-independent part of ``live_bytes`` (storages derived from the state);
* ``state``: whether the operation is state-derived: every tensor operand is a parameter, a buffer or a
  storage made only from them (no input in its history: relative-position bias gathers, SwinV2's
  continuous position-bias MLP, CoAtNet's and BEiT's relative biases). Such an operation does the same
  work at every batch size: its ``flops``, ``macs``, ``bytes_read`` and ``bytes_written`` count once per
  batch, not per image (tracer 4; before, they were multiplied by the batch: BEiT's were 21-23 % of its
  activation bytes at batch 2, CoAtNet's 10-12 %, SwinV2-T's 5-6 %).

Counts are for the whole batch (a state-derived row's once). ``table.attrs`` holds ``model``, ``input_shape``, ``precision``,
``params_total`` (the module's parameter count, shared ones once), ``params_traced`` (distinct
parameter elements the forward read), ``buffer_elems`` / ``buffer_fixed`` (floating buffer elements,
integer buffer bytes), ``cache_elems`` / ``cache_fixed`` (the caches above) and ``reparam`` (whether
the traced graph is the reparameterised one, below). :func:`summarize` reduces a table to the network's totals.

Reparameterisation (``reparam=True``): structurally reparameterisable networks (RepVGG, MobileOne,
RepViT, FastViT, LeViT's conv/linear + batch-norm pairs, EfficientViT-MSRA, RepGhost, ...) run a
multi-branch training graph that folds into a plain inference graph. timm's benchmark times the folded
graph when run with ``--reparam`` (``timm.utils.reparameterize_model``). :func:`reparameterize` applies
the same rule (every child with ``fuse()`` is replaced by what it returns; ``reparameterize()`` and
``switch_to_deploy()`` fold in place) to a copy of the module on the meta device; the table is then the
folded graph's, cached under its own key. A module with nothing to fold traces as with ``reparam=False``
(``attrs["reparam"]`` False).

Faults are one line (:class:`carb.errors.ZooError`) naming the model and the reason: a forward that
needs tensor values (data-dependent control flow) or runs an operator without a meta kernel (custom
CUDA ops), an input shape the model refuses, an output that is no tensor (not a vision backbone).

The ResNet walk stays the fast path for ResNet knobs: :func:`walk_table` gives the same rows from
:func:`carb.design.layers.layer_specs` without torch (tests hold it to tracing torchvision's ResNets).

Cache: ``<cache_dir>/trace/<key>.pkl`` (:func:`carb.resources.cache_dir`: ``$CARB_CACHE`` or
``~/.cache/carb``), keyed by model identity (a name with its settings, or a structural hash of a
module: its modules' types, reprs and parameter shapes), input ``(channels, H, W)`` and the versions of
torch, timm, pandas and this tracer; the batch-1 trace is stored and every batch size and precision
scale from it. Written atomically. Torch is imported inside the functions only.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from carb.design.arch import BYTES_PER_ELEMENT, ArchConfig
from carb.errors import ZooError

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

#: Bump when the table's columns or counting conventions change (invalidates the cache).
TRACER_VERSION = 4   # 2: integer storages live at their own bytes per element; 3: state-derived storages
#                        count once (not per image), caches the module keeps not at all; buffers and caches in attrs;
#                        4: a ``state`` column flags state-derived operations, whose FLOPs / MACs / bytes count once
#                        per batch (not per image)
#: Methods of a module that fold its training-time branches (``timm.utils.reparameterize_model``'s rule):
#: ``fuse()`` returns the replacement module, the other two fold in place.
REPARAM_METHODS: tuple[str, ...] = ("fuse", "reparameterize", "switch_to_deploy")
KINDS: tuple[str, ...] = ("conv_regular", "conv_grouped", "conv_depthwise", "conv_pointwise", "linear", "matmul",
                          "sdpa", "norm", "activation", "pool", "reduce", "elementwise", "copy", "reshape",
                          "concat", "other")
CONV_KINDS: tuple[str, ...] = KINDS[:4]
#: The compute kinds (:data:`KINDS` that carry FLOPs: convolutions, linear layers, matrix products, attention).
#: Each runs as one library kernel call (oneDNN / MKL / cuBLAS), not a fused loop. The one list the latency
#: models read (:data:`carb.model.zoo_latency.TRACE_COMPUTE_KINDS`, :data:`carb.model.zoo_latency_cpu.EXTERN_KINDS`).
COMPUTE_KINDS: tuple[str, ...] = ("conv_depthwise", "conv_pointwise", "conv_grouped", "conv_regular", "linear",
                                  "matmul", "sdpa")
#: The memory-bound kinds (:data:`KINDS` whose time is their bytes, not FLOPs; views and ``other`` left out).
#: The one list the latency models read (:data:`carb.model.zoo_latency.TRACE_MEMORY_KINDS`,
#: :data:`carb.model.zoo_latency_cpu.MEMORY_KINDS`).
MEMORY_BOUND_KINDS: tuple[str, ...] = ("norm", "activation", "elementwise", "copy", "concat", "pool", "reduce")
COLUMNS: tuple[str, ...] = ("op", "module", "kind", "in_shape", "out_shape", "weight_shape", "kernel", "stride",
                            "groups", "flops", "macs", "bytes_read", "bytes_written", "param_bytes", "params",
                            "live_bytes", "live_state_bytes", "state")
#: Per-element columns of the cached batch-1 trace that scale with the batch (the rest do not).
_BATCH_COLS = ("flops", "macs", "act_read", "written", "live", "live_fixed")

_MATMUL = {"mm", "addmm", "bmm", "baddbmm"}
_NORM = {"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "batch_norm",
         "native_layer_norm", "layer_norm", "native_group_norm", "group_norm", "rms_norm", "_fused_rms_norm",
         "instance_norm"}
_BATCH_NORM = {"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "batch_norm"}
_ACTIVATION = {"relu", "relu_", "gelu", "gelu_", "silu", "silu_", "sigmoid", "sigmoid_", "hardswish", "hardswish_",
               "hardsigmoid", "hardsigmoid_", "tanh", "tanh_", "leaky_relu", "leaky_relu_", "elu", "elu_", "hardtanh",
               "hardtanh_", "clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max", "mish", "mish_", "softplus",
               "_softmax", "softmax", "_safe_softmax", "_log_softmax", "log_softmax", "prelu", "_prelu_kernel",
               "relu6", "glu", "threshold", "exp", "erf", "log", "sqrt", "rsqrt", "reciprocal", "neg", "abs",
               "pow", "square"}
_POOL = {"max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "_adaptive_avg_pool2d", "adaptive_avg_pool2d",
         "adaptive_max_pool2d", "max_pool3d_with_indices", "avg_pool3d", "_adaptive_avg_pool3d"}
_REDUCE = {"mean", "sum", "amax", "amin", "var", "var_mean", "std", "std_mean", "max", "min", "argmax", "norm",
           "linalg_vector_norm", "logsumexp", "prod"}
_UPSAMPLE = {"upsample_nearest2d": 1, "upsample_bilinear2d": 4, "_upsample_nearest_exact2d": 1,
             "_upsample_bilinear2d_aa": 4, "upsample_bicubic2d": 16}
_CONCAT = {"cat", "stack", "concat"}
_COPY = {"clone", "copy_", "_to_copy", "contiguous", "constant_pad_nd", "roll", "index", "index_select", "gather",
         "flip", "repeat", "_unsafe_index", "pixel_shuffle", "channel_shuffle", "native_channel_shuffle",
         "masked_fill", "where", "fill_", "zero_", "index_put", "scatter", "tril", "triu", "new_zeros", "zeros_like",
         "ones_like", "empty_like", "full_like", *_UPSAMPLE}


def _kind_of_conv(weight_shape: Sequence[int], groups: int, in_channels: int) -> str:
    """Convolution kind from its weight ``(out, in/groups, kh, kw)``, its groups and input channels."""
    if groups > 1 and weight_shape[1] == 1 and groups == in_channels:
        return "conv_depthwise"
    if groups > 1:
        return "conv_grouped"
    if all(k == 1 for k in weight_shape[2:]):
        return "conv_pointwise"
    return "conv_regular"


def _elements(t: Any) -> int:
    """Elements a tensor really holds (a broadcast view reads its storage once)."""
    n = t.numel()
    try:
        return min(n, t.untyped_storage().nbytes() // max(t.element_size(), 1))
    except (RuntimeError, NotImplementedError):
        return n


@functools.lru_cache(maxsize=1)
def _recorder_class() -> type:
    """The dispatch mode class (defined on first use, so importing this module loads no torch)."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    sdpa = torch.nn.functional.scaled_dot_product_attention
    Tensor = torch.Tensor

    def _tensors(items: Iterable[Any]) -> list[Any]:
        """The tensors among ``items`` and inside their lists/tuples (one level: ATen arguments)."""
        out = []
        for a in items:
            if isinstance(a, Tensor):
                out.append(a)
            elif isinstance(a, (list, tuple)):
                out.extend(t for t in a if isinstance(t, Tensor))
        return out

    class Recorder(TorchDispatchMode):
        """Records one row per ATen operation (see the module docstring), tracking live storages."""

        def __init__(self, param_storages: dict[int, tuple[int, tuple[int, ...]]], inputs: Iterable[Any]) -> None:
            super().__init__()
            self.params = param_storages           # storage key -> (parameter elements (0 for buffers), shape)
            self.rows: list[dict[str, Any]] = []
            # key -> (weak ref, float elements, fixed bytes, derived from the module's state only, creation row)
            self.live: dict[int, tuple[Any, int, int, bool, int]] = {}
            self.stack: list[str] = [""]
            self.fused = 0                          # inside an sdpa call: do not record its decomposition
            self.touched: set[int] = set()
            for t in inputs:
                self._track(t)

        def _key(self, t: Any) -> int:
            return t.untyped_storage()._cdata

        def _track(self, t: Any, derived: bool = False) -> None:
            key = self._key(t)
            if key in self.params:
                return
            old = self.live.get(key)
            if old is None or old[0].expired():
                storage = t.untyped_storage()
                if t.is_floating_point() or t.is_complex():   # scales with the precision
                    elems, fixed = storage.nbytes() // max(t.element_size(), 1), 0
                else:                                         # int64 indices, bool masks: their own bytes
                    elems, fixed = 0, int(storage.nbytes())
                self.live[key] = (StorageWeakRef(storage), elems, fixed, derived, len(self.rows))

        def _from_state(self, tensors: list[Any]) -> bool:
            """Whether every tensor operand is a parameter, a buffer or derived from them only (not from the
            input): the output then has the same size at every batch (LeViT's gathered attention biases)."""
            for t in tensors:
                key = self._key(t)
                if key not in self.params:
                    entry = self.live.get(key)
                    if entry is None or not entry[3]:
                        return False
            return bool(tensors)

        def _live(self) -> tuple[int, int, int, int]:
            """(float elements, bytes of integer / boolean storages) alive now at batch 1 that scale with the
            batch, then the same of the storages derived from the module's state only (batch-independent)."""
            dead = [k for k, v in self.live.items() if v[0].expired()]
            for k in dead:
                del self.live[k]
            out = [0, 0, 0, 0]
            for _, elems, fixed, derived, _ in self.live.values():
                out[2 * derived] += elems
                out[2 * derived + 1] += fixed
            return out[0], out[1], out[2], out[3]

        def kept_state(self, keep: Iterable[Any] = ()) -> list[tuple[int, int, int]]:
            """After the forward: the storages derived from the module's state that are still alive (caches the
            module keeps, e.g. LeViT's ``attention_bias_cache``), but the tensors ``keep``, as (creation row,
            float elements, fixed bytes)."""
            skip = {self._key(t) for t in keep}
            return [(row, elems, fixed) for key, (ref, elems, fixed, derived, row) in self.live.items()
                    if derived and not ref.expired() and key not in skip]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if not self.fused:
                self.record(func, args, kwargs, out)
            return out

        def record(self, func, args, kwargs, out, kind: str | None = None, flops: float | None = None) -> None:
            tensors = _tensors(args) + _tensors(kwargs.values())
            outs = _tensors(out if isinstance(out, (list, tuple)) else (out,))
            derived = self._from_state(tensors)
            for o in outs:
                self._track(o, derived)
            if not tensors:   # factory ops (empty, zeros): no row, their outputs are tracked
                return
            name = getattr(getattr(func, "overloadpacket", func), "__name__", str(func))
            acts, params, seen = [], [], set()
            act_read = param_read = n_params = 0
            for t in tensors:
                if id(t) in seen:
                    continue
                seen.add(id(t))
                key = self._key(t)
                if key in self.params:
                    params.append(t)
                    param_read += _elements(t)
                    n_params += self.params[key][0]
                    self.touched.add(key)
                else:
                    acts.append(t)
                    act_read += _elements(t)
            row = self._describe(name, func, args, kwargs, out, acts, params, outs, kind, flops)
            if row["kind"] == "reshape":   # a view moves no data; the op that reads it counts the parameter
                act_read = param_read = written = n_params = 0
            else:
                written = sum(o.numel() for o in outs)
            live, live_fixed, live_state, live_state_fixed = self._live()
            row.update(module=self.stack[-1], state=derived, act_read=act_read, param_read=param_read, written=written,
                       params=n_params, live=live, live_fixed=live_fixed, live_state=live_state,
                       live_state_fixed=live_state_fixed)
            self.rows.append(row)

        def _describe(self, name, func, args, kwargs, out, acts, params, outs, kind, flops) -> dict[str, Any]:
            in_shape = tuple(acts[0].shape) if acts else ()
            out_shape = tuple(outs[0].shape) if outs else ()
            out_n = outs[0].numel() if outs else 0
            in_n = acts[0].numel() if acts else 0
            weight_shape, kernel, stride, groups, macs = (), 1, 1, 1, 0.0
            packet = getattr(func, "overloadpacket", None)
            if flops is None and packet in flop_registry:
                flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            if kind is not None:
                macs = (flops or 0.0) / 2
            elif name in ("convolution", "_convolution"):
                weight_shape = tuple(args[1].shape)
                stride, groups = int(args[3][0]), int(args[8])
                kernel = int(weight_shape[2]) if len(weight_shape) > 2 else 1
                kind = _kind_of_conv(weight_shape, groups, int(args[0].shape[1]))
                macs = (flops or 0.0) / 2
            elif name in _MATMUL:
                kind = "linear" if params else "matmul"
                if params:   # the parameter's own shape (``addmm`` reads the transposed view)
                    weight_shape = max((self.params[self._key(t)][1] for t in params), key=len)
                macs = (flops or 0.0) / 2
            elif name in _NORM:
                kind = "norm"
                affine = any(t.dim() >= 1 for t in params) or (len(args) > 1 and isinstance(args[1], torch.Tensor))
                if name in _BATCH_NORM:
                    macs = out_n * (2 if affine else 1)
                else:
                    macs = out_n * (5 if affine else 4)
                flops = 2.0 * out_n
            elif name in _ACTIVATION:
                kind = "activation"
            elif name in _POOL:
                kind = "pool"
                if "adaptive" in name:
                    macs = in_n
                elif len(args) > 2 and args[1]:
                    kernel = int(args[1][0])
                    stride = int(args[2][0]) if args[2] else kernel
                flops = float(in_n)
            elif name in _REDUCE:
                dims = args[1] if len(args) > 1 else kwargs.get("dim")
                spatial = acts and acts[0].dim() == 4 and dims is not None and \
                    sorted(int(d) % 4 for d in (dims if isinstance(dims, (list, tuple)) else [dims])) == [2, 3]
                kind = "pool" if spatial and name == "mean" else "reduce"
                macs = in_n if kind == "pool" else 0
                flops = float(in_n)
            elif name in _CONCAT:
                kind = "concat"
            elif name in _COPY:
                kind = "copy"
                macs = out_n * _UPSAMPLE.get(name, 0)
            elif outs and not name.endswith("_") and \
                    any(o.untyped_storage()._cdata == self._key(a) for o in outs for a in (*acts, *params)):
                kind = "reshape"   # a view: shares its input's storage
            elif outs and len(outs) == 1 and (func._schema.is_mutable
                                              or torch.Tag.pointwise in getattr(func, "tags", ())):
                kind = "elementwise"
            else:
                kind = "other"
            if flops is None:
                flops = float(out_n) if kind in ("activation", "elementwise") else 0.0
            return dict(op=name, kind=kind, in_shape=in_shape, out_shape=out_shape, weight_shape=weight_shape,
                        kernel=kernel, stride=stride, groups=groups, flops=float(flops), macs=float(macs))

    class FusedAttention(TorchFunctionMode):
        """Records ``F.scaled_dot_product_attention`` as one ``sdpa`` row (its math decomposition on the
        meta device is not what a device runs)."""

        def __init__(self, recorder: Recorder) -> None:
            super().__init__()
            self.recorder = recorder

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is not sdpa:
                return func(*args, **kwargs)
            self.recorder.fused += 1
            try:
                out = func(*args, **kwargs)
            finally:
                self.recorder.fused -= 1
            q, k, v = args[:3]
            flops = 2.0 * q.shape[:-1].numel() * k.shape[-2] * (q.shape[-1] + v.shape[-1])  # QK^T and AV
            self.recorder.record(func, args, kwargs, out, kind="sdpa", flops=flops)
            self.recorder.rows[-1]["op"] = "scaled_dot_product_attention"
            return out

    return Recorder, FusedAttention


def _check_shape(input_shape: Any, model: str) -> tuple[int, int, int, int]:
    """``(batch, channels, H, W)`` as positive ints, or a one-line ZooError."""
    try:
        shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        shape = ()
    if len(shape) != 4 or min(shape) < 1 or any(float(a) != b for a, b in zip(input_shape, shape)):
        raise ZooError(f"model {model!r}: input_shape {input_shape!r} is not allowed; allowed: "
                       "(batch, channels, H, W), positive integers")
    return shape  # type: ignore[return-value]


def _reason(e: BaseException) -> str:
    """Why a forward failed on the meta device, in words, from the exception."""
    msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    low = msg.lower()
    if "meta" in low and ("item()" in low or "data-dependent" in low or "cannot be called on meta" in low
                          or "data dependent" in low):
        return f"cannot be traced on the meta device (data-dependent control flow): {msg}"
    if ("could not run" in low and "meta" in low) or "meta kernel" in low or "not implemented for 'meta'" in low:
        return f"cannot be traced on the meta device (an operator without a meta kernel, e.g. a custom CUDA op): {msg}"
    if "same device" in low or "expected all tensors" in low or "expected device meta" in low:
        return ("cannot be traced on the meta device: its forward uses a tensor that is neither a parameter nor a "
                f"buffer (build the module on the meta device: carb.design.zoo.build_model): {msg}")
    if isinstance(e, NotImplementedError):
        return f"cannot be traced on the meta device: {msg}"
    return f"refuses the input: {msg}"


def model_key(model: Any, settings: dict[str, Any] | None = None) -> str:
    """Identity of a model for the cache: a zoo name with its sorted settings, or the structural hash of
    a module (types, reprs and parameter/buffer shapes of its modules)."""
    if isinstance(model, str):
        return "name:" + model + json.dumps(settings or {}, sort_keys=True, default=repr)
    h = hashlib.sha256()
    for name, m in model.named_modules():
        h.update(f"{name}|{type(m).__module__}.{type(m).__qualname__}|{m.extra_repr()}\n".encode())
    for name, p in [*model.named_parameters(), *model.named_buffers()]:
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype}\n".encode())
    return "module:" + h.hexdigest()


def can_reparameterize(model: nn.Module) -> bool:
    """Whether some submodule of ``model`` has one of :data:`REPARAM_METHODS` (something to fold)."""
    return any(hasattr(m, a) for m in model.modules() if m is not model for a in REPARAM_METHODS)


def reparameterize(model: nn.Module, label: str = "") -> nn.Module:
    """A copy of ``model`` on the meta device with every reparameterisable block folded into its inference
    form (the rule of ``timm.utils.reparameterize_model``, :data:`REPARAM_METHODS`, children first-come
    depth-first), in eval mode. New layers are made on the meta device (no weights allocated); ``model``
    is not changed. Raises :class:`ZooError` (one line naming ``label`` and the reason) when a block's
    folding needs tensor values."""
    import copy

    import torch

    from carb.design.zoo import _skip_init

    def fold(m: Any) -> None:
        for name, child in m.named_children():
            if hasattr(child, "fuse"):
                setattr(m, name, child.fuse())
            elif hasattr(child, "reparameterize"):
                child.reparameterize()
            elif hasattr(child, "switch_to_deploy"):
                child.switch_to_deploy()
            fold(child)

    try:
        out = copy.deepcopy(model).to("meta")
        with torch.no_grad(), torch.device("meta"), _skip_init()():
            fold(out)
    except ZooError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of a block's folding is a refusal with its reason
        raise ZooError(f"model {label or type(model).__name__!r}: cannot be reparameterised on the meta device: "
                       f"{(str(e).strip().splitlines() or [type(e).__name__])[0][:200]}") from None
    return out.eval()


@functools.lru_cache(maxsize=1)
def _versions() -> str:
    """Versions the cached tables depend on (installed distributions; nothing is imported)."""
    from carb.resources import installed_versions

    libs = installed_versions(("torch", "torchvision", "timm", "pandas"))
    return ",".join([f"tracer={TRACER_VERSION}", *(f"{d}={v}" for d, v in libs.items())])


def cache_path(key: str, chw: tuple[int, int, int]) -> Path:
    """Where the batch-1 trace of ``key`` at ``chw`` is cached."""
    from carb.resources import cache_dir

    digest = hashlib.sha256(f"{key}|{chw}|{_versions()}".encode()).hexdigest()[:24]
    return cache_dir() / "trace" / f"{digest}.pkl"


def _meta_state(model: nn.Module) -> tuple[dict[str, Any], dict[int, tuple[int, tuple[int, ...]]]]:
    """Meta copies of the module's parameters and buffers (for ``functional_call``) and their storage
    keys -> (parameter elements (0 for buffers), shape)."""
    import torch

    state: dict[str, Any] = {}
    keys: dict[int, tuple[int, tuple[int, ...]]] = {}
    by_id: dict[int, Any] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        t = by_id.get(id(p))
        if t is None:
            t = by_id[id(p)] = p if p.device.type == "meta" else torch.empty_like(p, device="meta")
            keys[t.untyped_storage()._cdata] = (p.numel(), tuple(p.shape))
        state[name] = t
    for name, b in model.named_buffers(remove_duplicate=False):
        t = by_id.get(id(b))
        if t is None:
            t = by_id[id(b)] = b if b.device.type == "meta" else torch.empty_like(b, device="meta")
            keys.setdefault(t.untyped_storage()._cdata, (0, tuple(b.shape)))
        state[name] = t
    return state, keys


_TEXT = ("op", "module", "kind")
_SHAPES = ("in_shape", "out_shape", "weight_shape")
_BOOLS = ("state",)
_INTS = ("kernel", "stride", "groups", "act_read", "param_read", "written", "params", "live", "live_fixed",
         "live_state", "live_state_fixed")


def _columns(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch-1 rows as columns, ready to become a frame fast (text as pandas string arrays, shapes as
    object arrays of tuples, counts as int64 / float64 arrays): what the cache stores."""
    cols: dict[str, Any] = {c: pd.array([r[c] for r in rows], dtype="str") for c in _TEXT}
    for c in _SHAPES:
        arr = np.empty(len(rows), dtype=object)
        arr[:] = [r[c] for r in rows]
        cols[c] = arr
    for c in _INTS:
        cols[c] = np.array([r[c] for r in rows], dtype=np.int64)
    for c in ("flops", "macs"):
        cols[c] = np.array([r[c] for r in rows], dtype=np.float64)
    for c in _BOOLS:
        cols[c] = np.array([bool(r[c]) for r in rows], dtype=bool)
    return cols


def _trace_batch1(model: nn.Module, chw: tuple[int, int, int], label: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The batch-1 trace as columns (:func:`_columns`; per-element counts ``act_read``, ``param_read``,
    ``written``, ``live``) and the model's facts (``params_total``, ``params_traced``, ``output_shape``)."""
    import torch
    from torch.func import functional_call

    Recorder, FusedAttention = _recorder_class()
    state, keys = _meta_state(model)
    x = torch.empty((1, *chw), device="meta")
    rec = Recorder(keys, [x])
    names = {m: n for n, m in model.named_modules()}

    def enter(mod: Any, _args: Any) -> None:
        rec.stack.append(names[mod])

    def leave(_mod: Any, _args: Any, _out: Any) -> None:
        rec.stack.pop()

    hooks = []
    for m in names:
        hooks.append(m.register_forward_pre_hook(enter))
        hooks.append(m.register_forward_hook(leave))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FusedAttention(rec), rec:
            out = functional_call(model, state, (x,))
        # before the module's mode is restored (LeViT's ``train()`` clears its attention-bias cache)
        kept = rec.kept_state(o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor))
    except ZooError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the user's forward is a refusal with its reason
        raise ZooError(f"model {label!r}: {_reason(e)}") from None
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    leaves = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
    if not leaves:
        raise ZooError(f"model {label!r}: not a vision backbone: its forward returns {type(out).__name__}, no tensor")
    frame = _columns(rec.rows)
    for row, elems, fixed in kept:   # a cache the module keeps is model state, not the forward's memory
        frame["live_state"][row:] -= elems
        frame["live_state_fixed"][row:] -= fixed
    params_total = sum(p.numel() for p in model.parameters())
    info = {"params_total": int(params_total), "params_traced": int(sum(keys[k][0] for k in rec.touched)),
            "output_shape": tuple(leaves[0].shape), **_buffer_counts(model),
            "cache_elems": int(sum(k[1] for k in kept)), "cache_fixed": int(sum(k[2] for k in kept))}
    return frame, info


def _buffer_counts(model: nn.Module) -> dict[str, int]:
    """``buffer_elems`` (floating buffer elements: they take the precision, as ``model.to(dtype)`` casts
    them) and ``buffer_fixed`` (bytes of integer / boolean buffers, e.g. LeViT's int64 attention-bias
    indices) of the module's distinct buffers."""
    elems = fixed = 0
    for b in model.buffers():   # each shared buffer once
        if b.is_floating_point() or b.is_complex():
            elems += b.numel()
        else:
            fixed += b.numel() * b.element_size()
    return {"buffer_elems": int(elems), "buffer_fixed": int(fixed)}


def _scaled(frame: dict[str, Any], info: dict[str, Any], batch: int, precision: str, label: str,
            input_shape: tuple[int, ...]) -> pd.DataFrame:
    """The batch-1 columns at ``batch`` and ``precision``: the :data:`COLUMNS` table. A state-derived row
    (``state``) does the same work at every batch: its counts are not multiplied by the batch."""
    bpe = BYTES_PER_ELEMENT[precision]
    param_bytes = frame["param_read"] * bpe
    state = frame["live_state"] * bpe + frame["live_state_fixed"]
    flag = np.asarray(frame["state"], dtype=bool)
    times = np.where(flag, 1, batch)   # per row: how many times the batch repeats it
    cols = {**{c: frame[c] for c in (*_TEXT, *_SHAPES, "kernel", "stride", "groups")},
            "flops": frame["flops"] * times, "macs": frame["macs"] * times,
            "bytes_read": frame["act_read"] * (times * bpe) + param_bytes,
            "bytes_written": frame["written"] * (times * bpe), "param_bytes": param_bytes,
            "params": frame["params"],
            "live_bytes": frame["live"] * (batch * bpe) + frame["live_fixed"] * batch + state,
            "live_state_bytes": state, "state": flag}
    out = pd.DataFrame({c: cols[c] for c in COLUMNS}, copy=False)
    out.attrs = {"model": label, "input_shape": tuple(input_shape), "precision": precision, "reparam": False, **info}
    return out


def trace(model: nn.Module | str, input_shape: Sequence[int] = (1, 3, 224, 224), *, precision: str = "fp32",
          settings: dict[str, Any] | None = None, cache: bool = True, reparam: bool = False) -> pd.DataFrame:
    """The layer table (:data:`COLUMNS`, one row per executed operation; see the module docstring) of
    ``model`` on an input of ``input_shape`` = ``(batch, channels, H, W)`` at ``precision``.

    ``model``: an ``nn.Module`` (any device; its weights are not read) or a zoo name built with
    ``settings`` as constructor keywords (:func:`carb.design.zoo.build_model`). One meta trace at batch 1
    per model and ``(channels, H, W)``, cached on disk (``cache=False``: neither read nor written).
    ``reparam``: trace the reparameterised inference graph (:func:`reparameterize`; module docstring),
    cached under its own key; ``attrs["reparam"]`` says whether anything was folded.
    Raises :class:`ZooError` (one line naming the model and the reason) when the model cannot be built or
    traced or refuses the input."""
    label = model if isinstance(model, str) else type(model).__name__
    if precision not in BYTES_PER_ELEMENT:
        raise ZooError(f"precision: {precision!r} is not allowed; allowed: {list(BYTES_PER_ELEMENT)}")
    batch, *chw_list = _check_shape(input_shape, label)
    chw = tuple(chw_list)
    if settings and not isinstance(model, str):
        raise ZooError(f"model {label!r}: settings apply to a zoo name only; build the module with them")
    key = model_key(model, settings) + ("|reparam" if reparam else "")
    path = cache_path(key, chw) if cache else None
    if reparam and path is not None and nofold_path(path).exists():   # nothing to fold: the plain trace
        return trace(model, input_shape, precision=precision, settings=settings)
    if path is not None and path.exists():
        try:
            with open(path, "rb") as f:
                frame, info = pickle.load(f)
            return _scaled(frame, info, batch, precision, label, tuple(input_shape))
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, KeyError, TypeError, AttributeError):
            pass   # a damaged entry: trace again and overwrite it
    try:
        if isinstance(model, str):
            from carb.design.zoo import build_model

            module = build_model(model, device="meta", **(settings or {}))
        else:
            module = model
        folded = bool(reparam) and can_reparameterize(module)
        if reparam and not folded and cache:   # nothing to fold: the plain trace is this one
            out = trace(model, input_shape, precision=precision, settings=settings)
            _store_text(nofold_path(path), "nothing to fold: the plain trace")   # not built again next time
            return out
        if folded:
            module = reparameterize(module, label)
        frame, info = _trace_batch1(module, chw, label)
    except ZooError as e:
        if path is not None:   # remembered for the progress count only: the next call tries again
            _store_text(refusal_path(path), str(e))
        raise
    info["reparam"] = folded
    if path is not None:
        _store(path, (frame, info))
        refusal_path(path).unlink(missing_ok=True)
    return _scaled(frame, info, batch, precision, label, tuple(input_shape))


def nofold_path(path: Path) -> Path:
    """The marker beside a ``reparam=True`` cache entry ``path`` (:func:`cache_path`) of a network with nothing
    to fold: :func:`trace` then returns the plain trace without building the network again."""
    return path.with_suffix(".nofold")


def refusal_path(path: Path) -> Path:
    """Where the tracer's refusal of the cache entry ``path`` (:func:`cache_path`) is recorded, its one-line
    reason as text: read by :func:`carb.design.trace_progress.uncached` only, so a network the tracer refuses
    is not counted as missing on every run. :func:`trace` still tries it each time and deletes the record
    once it traces (its key holds the library versions: an upgrade starts afresh)."""
    return path.with_suffix(".refused")


def _store_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically; a cache that cannot be written is skipped."""
    from carb.files import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda tmp: tmp.write_text(text))
    except OSError:
        pass


def _store(path: Path, obj: Any) -> None:
    """Write a cache entry atomically; a cache that cannot be written is skipped (it only saves time)."""
    from carb.files import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda tmp: tmp.write_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)))
    except OSError:
        pass


def trace_many(models: Iterable[str], input_shape: Sequence[int] = (1, 3, 224, 224), *, precision: str = "fp32",
               cache: bool = True) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """:func:`trace` of each zoo name: ``(tables by name, reasons by refused name)``. A model that cannot
    be built or traced (:class:`ZooError`) is listed with its one-line reason; the others are traced."""
    tables: dict[str, pd.DataFrame] = {}
    refused: dict[str, str] = {}
    for name in models:
        try:
            tables[name] = trace(name, input_shape, precision=precision, cache=cache)
        except ZooError as e:
            refused[name] = str(e)
    return tables, refused


#: Kinds whose output elements are fvcore's (and timm's / Hidden Joules') "activations".
ACTIVATION_KINDS: tuple[str, ...] = (*CONV_KINDS, "linear", "matmul")


def summarize(table: pd.DataFrame) -> dict[str, Any]:
    """The network's totals from its table: ``params`` (the module's parameter count), ``params_traced``,
    ``flops``, ``macs`` (fvcore's), ``activations`` (output elements of convolution, linear and matmul rows:
    fvcore's activation count, as in timm's tables and Hidden Joules; a state-derived row's once per batch), ``peak_live_bytes`` (max of
    ``live_bytes``), ``param_bytes`` (parameters at the table's precision), ``bytes_read``, ``bytes_written``,
    ``n_ops`` (rows but views), per kind ``flops_<kind>`` and ``bytes_<kind>`` (read + written), and
    ``flops_sdpa_math`` / ``bytes_sdpa_math`` (attention on the unfused math path: :func:`_sdpa_math`). Whole
    batch; bytes at the table's precision. Batch-independent: ``peak_live_state_bytes`` (the part of the
    peak row's ``live_bytes`` derived from the module's state only, which does not grow with the batch),
    ``buffer_bytes`` (the module's buffers: floating ones at the precision, integer ones at their own
    size) and ``cache_bytes`` (storages the forward derives from the module's state and the module keeps,
    e.g. LeViT's attention-bias cache: not in ``live_bytes``; see the module docstring)."""
    attrs = table.attrs
    bpe = BYTES_PER_ELEMENT[attrs.get("precision", "fp32")]
    batch = int(attrs.get("input_shape", (1,))[0])
    acts = table["kind"].isin(ACTIVATION_KINDS)
    out_elems = table.loc[acts, "out_shape"].map(lambda s: int(np.prod(s)) if len(s) else 0)
    if "state" in table.columns:   # a state-derived row's output is made once per batch
        out_elems = out_elems * np.where(table.loc[acts, "state"].to_numpy(bool), 1.0 / max(batch, 1), 1.0)
    out: dict[str, Any] = {
        "params": int(attrs.get("params_total", 0)), "params_traced": int(attrs.get("params_traced", 0)),
        "flops": float(table["flops"].sum()), "macs": float(table["macs"].sum()),
        "activations": float(out_elems.sum() * batch),
        "peak_live_bytes": int(table["live_bytes"].max()) if len(table) else 0,
        "peak_live_state_bytes": _peak_state_bytes(table),
        "buffer_bytes": int(attrs.get("buffer_elems", 0)) * bpe + int(attrs.get("buffer_fixed", 0)),
        "cache_bytes": int(attrs.get("cache_elems", 0)) * bpe + int(attrs.get("cache_fixed", 0)),
        "param_bytes": int(attrs.get("params_total", 0)) * bpe,
        "bytes_read": int(table["bytes_read"].sum()), "bytes_written": int(table["bytes_written"].sum()),
        "n_ops": int((table["kind"] != "reshape").sum()),
    }
    by_kind = table.groupby("kind")[["flops", "bytes_read", "bytes_written"]].sum()
    for kind in KINDS:
        row = by_kind.loc[kind] if kind in by_kind.index else None
        out[f"flops_{kind}"] = float(row["flops"]) if row is not None else 0.0
        out[f"bytes_{kind}"] = int(row["bytes_read"] + row["bytes_written"]) if row is not None else 0
    out |= _sdpa_math(table, bpe)
    return out


def _peak_state_bytes(table: pd.DataFrame) -> int:
    """``live_state_bytes`` of the table's peak row (the batch-independent part of its ``live_bytes``); 0
    where unknown (the ResNet walk's table)."""
    live = table["live_bytes"].to_numpy(float)
    if not len(table) or not np.isfinite(live).any():
        return 0
    return int(table["live_state_bytes"].iloc[int(np.nanargmax(live))])


def _sdpa_math(table: pd.DataFrame, bpe: int) -> dict[str, float]:
    """``flops_sdpa_math`` and ``bytes_sdpa_math`` of a table: the attention calls no fused kernel takes.
    PyTorch's flash and memory-efficient SDPA kernels need 4-D ``(batch, heads, tokens, dim)`` inputs; a
    call on other shapes (NesT's and Hiera's 5-D blocked attention, Twins' local windows) runs the math
    path, which materialises the ``tokens x tokens`` scores: written by ``Q K^T``, read and written by the
    softmax, read by ``@ V`` (4 passes of ``flops / (4 dim)`` elements at the table's precision).
    ``bytes_sdpa_math_io``: those calls' own operands and output (Q, K, V read, the output written), which the
    math path passes over several times more (scaling Q and K, and since PyTorch 2.5 casting half inputs to
    fp32 and the output back: :func:`carb.model.zoo_latency.sdpa_math_bytes`)."""
    sd = table[table["kind"] == "sdpa"]
    math = sd[sd["in_shape"].map(len) != 4]
    if math.empty:
        return {"flops_sdpa_math": 0.0, "bytes_sdpa_math": 0.0, "bytes_sdpa_math_io": 0.0}
    dim = math["in_shape"].map(lambda s: s[-1] if len(s) else 1).to_numpy(float)
    scores = math["flops"].to_numpy(float) / (4 * np.clip(dim, 1, None))
    return {"flops_sdpa_math": float(math["flops"].sum()), "bytes_sdpa_math": float(4 * scores.sum() * bpe),
            "bytes_sdpa_math_io": float((math["bytes_read"] + math["bytes_written"]).sum())}


_WALK_KIND = {"bn": "norm", "relu": "activation", "maxpool": "pool", "avgpool": "pool", "add": "elementwise"}


def walk_table(cfg: ArchConfig, precision: str | None = None) -> pd.DataFrame:
    """The fast path for ResNet knobs: the trace's table (:data:`COLUMNS`) from the walk
    (:func:`carb.design.layers.layer_specs`), torch-free, for the layers the walk knows (convolutions,
    batch norms, ReLUs, pools, residual adds, the classifier; no views). Conv and linear rows equal the
    trace of the torchvision ResNet ``cfg`` describes (shapes at batch 1, FLOPs, MACs, parameters); counts
    for ``cfg.batch_size`` at ``precision`` (default ``cfg.precision``). The other rows write what the
    traced operators write (a batch norm also its two per-channel statistics, a max-pool its indices), and
    ``live_bytes`` follows torchvision's eager lifetimes (:func:`walk_liveness`), so :func:`summarize` of
    this table equals that of the trace (tests hold both at two depths)."""
    from carb.design.layers import layer_specs

    precision = precision or cfg.precision
    bpe, batch = BYTES_PER_ELEMENT[precision], cfg.batch_size
    rows = []
    specs = list(layer_specs(cfg))
    for s in specs:
        if s.kind == "linear":
            in_shape, out_shape = (1, s.in_channels), (1, s.out_channels)
        else:
            in_shape = (1, s.in_channels, s.in_size, s.in_size)
            out_shape = (1, s.out_channels, s.out_size, s.out_size)
        weight_shape: tuple[int, ...] = ()
        kernel, stride, groups, macs = s.kernel, s.stride, s.groups, float(s.macs)
        if s.kind == "conv":
            weight_shape = (s.out_channels, s.in_channels // s.groups, s.kernel, s.kernel)
            kind = _kind_of_conv(weight_shape, s.groups, s.in_channels)
            flops = 2.0 * macs
        elif s.kind == "linear":
            weight_shape, kind, flops = (s.out_channels, s.in_channels), "linear", 2.0 * macs
        else:
            kind = _WALK_KIND[s.kind]
            n_in, n_out = s.in_elements, s.out_elements
            flops = {"bn": 2.0 * n_out, "relu": float(n_out), "add": float(n_out)}.get(s.kind, float(n_in))
            macs = {"bn": 2.0 * n_out, "avgpool": float(n_in)}.get(s.kind, 0.0)
            if s.kind == "avgpool":
                kernel = stride = 1
        act_in = s.in_elements * (2 if s.kind == "add" else 1)
        param_read = s.params + (2 * s.out_channels if s.kind == "bn" else 0)   # bn also reads its running stats
        rows.append(dict(op=s.kind, module=s.name, kind=kind, in_shape=in_shape, out_shape=out_shape,
                         weight_shape=weight_shape, kernel=kernel, stride=stride, groups=groups,
                         flops=flops * batch, macs=macs * batch, bytes_read=(act_in * batch + param_read) * bpe,
                         bytes_written=(s.out_elements + _extra_elements(s)) * batch * bpe,
                         param_bytes=param_read * bpe, params=s.params, live_bytes=np.nan,
                         live_state_bytes=0, state=False))   # a ResNet makes no storage from its parameters
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out["live_bytes"] = walk_liveness(specs, cfg.input_size, batch, bpe)
    out.attrs = {"model": "resnet-walk", "input_shape": (batch, 3, cfg.input_size, cfg.input_size),
                 "precision": precision, "params_total": int(sum(r["params"] for r in rows)),
                 "params_traced": int(sum(r["params"] for r in rows)),
                 # batch norms' running mean and variance (at the precision) and their int64 step counters
                 "buffer_elems": int(sum(2 * s.out_channels for s in specs if s.kind == "bn")),
                 "buffer_fixed": int(8 * sum(s.kind == "bn" for s in specs))}
    return out


def _extra_elements(s: Any) -> int:
    """Elements of one image an operator writes besides its output: a batch norm's saved mean and inverse
    standard deviation (one per channel each), a max-pool's indices (one per output element)."""
    if s.kind == "bn":
        return 2 * s.out_channels
    return s.out_elements if s.kind == "maxpool" else 0


#: Bytes per element of a max-pool's int64 indices in ``live_bytes`` (a real forward holds them at their
#: own dtype whatever the precision; ``bytes_written`` counts every tensor at the precision's).
INDEX_BYTES = 8


def walk_liveness(specs: Sequence[Any], input_size: int, batch: int, bpe: int) -> list[int]:
    """``live_bytes`` after each layer of the walk ``specs`` (:class:`carb.design.layers.LayerSpec`, in
    order) of a batch of ``batch`` images of ``input_size`` px at ``bpe`` bytes per element: the activation
    storages torchvision's ResNet holds in eager execution. The input is held by the caller throughout; the
    stem and the head reassign one tensor (``x = self.bn1(x)``: the old one dies after the call); a stage's
    input is held by the network's forward until the stage returns; a block holds its input (the identity)
    and its projection shortcut's output until it returns; ReLUs and the residual add work in place; an
    operator's extra outputs (batch norm statistics, max-pool indices at :data:`INDEX_BYTES`) live only
    at that row. Returns one int per spec."""
    net_in = 3 * input_size * input_size * batch * bpe
    cur, stage_in, blk_in, ident = 0, 0, 0, 0   # bytes each name holds; cur: the stem's, a block's main path's
    block: tuple[int, int] | None = None   # (stage, block) of the block being walked
    live: list[int] = []
    for s in specs:
        out = s.out_elements * batch * bpe
        extra = _extra_elements(s) * batch * (INDEX_BYTES if s.kind == "maxpool" else bpe)
        if s.block >= 0 and (s.stage, s.block) != block:   # a block starts from the last output
            stage_in = cur if s.block == 0 else stage_in
            blk_in = cur if s.block > 0 else 0   # the first block's input is the stage input (counted once)
            cur, ident, block = 0, 0, (s.stage, s.block)
        elif s.block < 0 and block is not None:   # the head: the last stage has returned
            stage_in, blk_in, ident, block = 0, 0, 0, None
        held = net_in + stage_in + blk_in + ident
        if s.kind in ("relu", "add"):   # in place
            live.append(held + cur)
        elif s.role.startswith("downsample"):   # the shortcut path, beside the main path's output
            live.append(held + cur + out + extra)
            ident = out
        else:
            live.append(held + cur + out + extra)
            cur = out
    return live


def clear_cache() -> int:
    """Delete the on-disk trace cache; returns the number of entries removed."""
    from carb.resources import cache_dir

    n = 0
    for p in (cache_dir() / "trace").glob("*.pkl"):
        try:
            os.remove(p)
            n += 1
        except OSError:
            pass
    return n
