"""The physics prior's settings (the ``prior`` config group, ``conf/prior/*.yaml``): each key written once,
here, with its unit, meaning and default.

The prior is what :mod:`carb.model.physics` fits under every cascade stage (memory: parameters +
activations + input; latency and energy: a per-device layer roofline). Its terms depend on the device
the training rows were measured on: the CPU terms (``large_alloc_MB``, ``channel_block``,
``cpu_dispatch``, ``device_probe``) fit only on rows that are all ``device_kind == "cpu"``, the CUDA
terms (``tensor_core_speedup``, ``overlap_k``, ``static_power``) only on rows that are all ``"cuda"``.
The group's options only select or override these defaults:

- ``prior=auto`` (default): every term at its default; the training data's device decides which apply.
- ``prior=cpu``: the CPU terms only (the CUDA terms off); on CPU data the same fit as ``auto``.
- ``prior=cuda``: the CUDA terms only (the CPU terms off); on CUDA data the same fit as ``auto``.
- ``prior=off``: no prior; the specialists fit the targets themselves (the paper's plain cascade).

:func:`cascade_params` turns a ``prior`` section into :class:`~carb.model.cascade.CarbCascade`'s
``physics`` and ``prior`` parameters. The class is a pydantic model (strict, unknown keys refused),
composed into each command's schema by :mod:`carb.commands.schema`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


#: Compute kinds the per-kind form may price at the linear layers' rate (:data:`carb.design.zoo_features.FLOP_KINDS`
#: less ``linear``; a test holds the two equal).
LinearRateKind = Literal["conv_regular", "conv_grouped", "conv_depthwise", "conv_pointwise", "matmul", "sdpa"]


class PriorSettings(BaseModel):
    """Settings of the physics priors (``prior.*``). Defaults are ``prior=auto``'s."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    enabled: bool = Field(True, description=(
        "physics-informed stages: each stage fits the prior and its specialists learn log(target / prior); "
        "false (prior=off): the specialists fit the target itself, the paper's plain cascade"))
    large_alloc_MB: float | None = Field(None, gt=0, description=(
        "CPU rows, MB: a cost per MB of convolution outputs at least this large, which get fresh pages each "
        "forward (glibc maps allocations >= 32 MiB; set 32 for data measured with glibc's default allocator, "
        "measure.malloc_mmap_threshold_MB=null); null: no such term (measure=cpu pins the allocator)"))
    channel_block: int = Field(16, ge=1, description=(
        "CPU rows, channels: convolution channels padded to a multiple of this in the CPU conv library's "
        "blocked layout (oneDNN with AVX-512: 16); read by the large_alloc_MB term"))
    cpu_dispatch: bool = Field(True, description=(
        "CPU rows that record their torch threads: the costs of PyTorch's native convolution path (weights "
        "streamed per image: 1x1 convs at batch 2-15 on one thread, fp16 without AVX-512 FP16; its GEMM's "
        "power-of-two row alignment)"))
    device_probe: bool = Field(True, description=(
        "CPU rows of one device, latency only, with cpu_dispatch: a precision no row was measured at takes "
        "its convolution time from the device's probe (carb-probe; carb/data/device-probes.csv)"))
    tensor_core_speedup: float | None = Field(2.0, gt=0, description=(
        "CUDA rows of compute capability >= 8.0, times: a 16-bit precision no row was measured at runs "
        "fp32's (TF32) multiply-adds this many times faster (NVIDIA dense FP16/BF16 tensor peak = 2x TF32); "
        "null: fp32's rate as is"))
    overlap_k: float | None = Field(4.0, ge=1.0, description=(
        "CUDA rows, latency, exponent >= 1: host launches and GPU work overlap, cost = (host^k + device^k)^(1/k), "
        "a smooth max; null: their sum (H200 batch split, prior alone: R2 0.69 sum, 0.97 k=4)"))
    static_power: bool = Field(True, description=(
        "CUDA rows, energy: + P_static (W, fitted) x the time a latency prior fitted on the same rows gives: "
        "a GPU draws its static power whatever it runs (H200: P_static 95-112 W on every split)"))
    op_cost_per_precision: bool = Field(False, description=(
        "zoo rows (the per-kind form), latency and energy: a cost per operator call for each precision, as "
        "FLOPs have, not one shared by every precision (an eager call runs a kernel of its precision; on the "
        "Zen 4 VM a bf16 call of the per-element kinds converts to fp32 and back). Off: CPU zoo "
        "leave-one-family-out (issue 43) pooled 12.28 -> 11.98 %, but densenet 20.4 -> 21.5 %, lowest "
        "Spearman 0.86 -> 0.80 (hrnet); with model.shrink on, densenet 12.2 % but squeezenet 20.0 % "
        "(docs/MODEL.md)"))
    cpu_op_cost_per_precision: bool = Field(True, description=(
        "CPU zoo rows (the per-kind form): op_cost_per_precision on CPU rows only, whatever op_cost_per_precision "
        "says (the GPU zoo cascades keep one shared call cost). With linear_rate_kinds [matmul], CPU zoo "
        "leave-one-family-out: Xeon 28 -> 31/32 families within 20 % (alexnet 24.4 -> 15.8, convnext 24.5 -> 18.3, "
        "swin 20.2 -> 16.7 %; densenet 32.9 -> 40.6 %), Zen 4 32/32 kept, worst 16.9 -> 19.1 % (densenet), pooled "
        "12.15 -> 11.70 % (docs/MODEL.md, round zx43b); false: op_cost_per_precision decides"))
    bf16_elementwise_ratio: float = Field(1.0, gt=0, description=(
        "CPU zoo rows (the per-kind form), times: a bf16 element of the element-wise kind (adds, muls) costs "
        "this many fp32 elements (Zen 4 VM quiet timings, scripts/data/cat_cost_34cc4b132c.csv: bf16 add 3x "
        "fp32 per MB = 1.5x per element); 1.0: the same cost (docs/MODEL.md)"))
    bf16_small_conv_MMAC: float | None = Field(10.0, gt=0, description=(
        "CPU zoo rows with bf16 rows (the per-kind form), million multiply-adds per image: a fitted extra cost "
        "per FLOP of bf16 convolutions (regular, grouped, pointwise) smaller than this (Zen 4 VM quiet timings: "
        "a 3 MMAC 1x1 conv 25 GMAC/s bf16 vs 34 fp32, 28-116 MMAC ones 1.6-2x faster; 10 lies between, chosen "
        "from the timings alone); CPU zoo leave-one-family-out: worst family 20.4 -> 15.5 % (densenet), 31 -> "
        "32/32 within 20 % (docs/MODEL.md); null: no such term"))
    linear_rate_kinds: list[LinearRateKind] = Field(default_factory=lambda: ["matmul"], description=(
        "CPU zoo rows (the per-kind form): compute kinds whose FLOPs are priced at the linear layers' per-FLOP cost "
        "(one column per precision holds both), e.g. [matmul]: an explicit matrix product runs the same kind of "
        "GEMM as a linear layer (device probes, attention's small shapes: 1.6-3.7x linear's ms per FLOP), but "
        "fitted on its own (training rows: at most 3 % of their FLOPs) its cost came out 16x (fp32) and 57x (bf16) "
        "linear's on the Xeon zoo and LeViT 53 % off; allowed: conv_regular, conv_grouped, "
        "conv_depthwise, conv_pointwise, matmul, sdpa; []: every kind its own cost (docs/MODEL.md, round zx43b)"))
    probe_flop_floor: bool = Field(False, description=(
        "CPU zoo rows of one device with a device probe (the per-kind form), latency: no per-FLOP cost of a "
        "precision below the fastest regular convolution the probe timed at that precision (ms per FLOP, "
        "carb/data/device-probes.csv): a fit that prices a kind faster than the device ever ran a convolution "
        "has moved its cost into other terms (Xeon zoo: fp32 pointwise 4.3e-9 ms/FLOP against the probe's "
        "fastest 5.9e-9; docs/MODEL.md, round zx43b); false: 0"))


#: The CPU-only and CUDA-only settings (which ``prior=cpu`` / ``prior=cuda`` keep).
CPU_TERMS = ("large_alloc_MB", "channel_block", "cpu_dispatch", "device_probe")
CUDA_TERMS = ("tensor_core_speedup", "overlap_k", "static_power")


def default_prior() -> dict[str, Any]:
    """``prior=auto``'s settings as a plain dict (the ``prior`` section a command composes by default)."""
    return PriorSettings().model_dump()


def cascade_params(prior: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:class:`~carb.model.cascade.CarbCascade`'s ``physics`` (bool) and ``prior`` (the settings
    :func:`carb.model.physics.make_prior` takes) from a ``prior`` section; None: ``prior=auto``."""
    settings = {**default_prior(), **dict(prior or {})}
    return {"physics": bool(settings.pop("enabled")), "prior": settings}
