"""The schema of each command's composed config (``conf/<command>.yaml``): the groups it composes
(:mod:`carb.commands.schema.groups`) and its own keys; :data:`COMMANDS` maps a command to its model."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from carb.commands.schema.groups import (
    Compute,
    Count,
    Coverage,
    Data,
    Device,
    Features,
    Importer,
    Index,
    Measure,
    Model,
    NonNegative,
    Paths,
    Positive,
    Precision,
    Progress,
    Screen,
    Section,
    AnySpace,
    Space,
    Split,
    Target,
    Text,
    Tracking,
    Tune,
    _n_jobs,
)
from carb.model.prior_config import PriorSettings


def _extra_sources(v: Any) -> Any:
    """``transfer.extra_sources``: ``auto`` or a list (of model URIs; ``[]`` the source alone), else one line."""
    if v == "auto" or isinstance(v, (list, tuple)):
        return v
    raise PydanticCustomError("carb", "{v} is not allowed; allowed: auto (the CPU datasets CARB ships), [] (the "
                              "source alone) or a list of CPU model URIs", {"v": repr(v)})


def _band(v: Any) -> Any:
    """A zero-shot band ``[lo, hi]`` (natural-log units): ``lo <= hi``, else one line."""
    if v is not None and len(v) == 2 and v[0] > v[1]:
        raise PydanticCustomError("carb", "must be [lo, hi] with lo <= hi (natural-log units, e.g. [-0.289, 0.289]: "
                                  "x [0.75, 1.34]), got {v}", {"v": list(v)})
    return v


#: A zero-shot error band: ``[lo, hi]`` of log(measured / predicted), lo <= hi.
Band = Annotated[list[float], Field(min_length=2, max_length=2), AfterValidator(_band)]


class Command(Section):
    """Keys every command has."""

    tracking: Tracking
    paths: Paths


class Fitting(Command):
    """Keys of the commands that fit a cascade (``carb-train``, ``carb-tune``)."""

    data: Data
    features: Features
    split: Split          # before `model`, whose random_state is ${split.seed}: the error names split.seed
    tune: Tune            # before `model`, whose tuned_from is ${tune.study} and ${tune.storage}
    model: Model
    prior: PriorSettings
    progress: Progress
    compute: Compute


class BudgetCheck(Section):
    """``evaluate.budget``: the budget classification (value in the target's unit)."""

    target: Target
    value: Positive | None


class Lobo(Section):
    """``evaluate.lobo``: leave-one-batch-tier-out."""

    enabled: bool
    max_batch: Count


class Extrapolation(Section):
    """``evaluate.extrapolation``: the leave-out splits that force extrapolation."""

    enabled: bool
    train_share: Annotated[float, Field(ge=0.05, le=0.95)]
    min_rows: Annotated[int, Field(ge=2)]
    progress: bool


class ArchitectureIntervals(Section):
    """``evaluate.architecture_intervals``: intervals for unseen architectures."""

    enabled: bool
    folds: Annotated[int, Field(ge=2)]


class MemoryFloor(Section):
    """``evaluate.memory_floor``: the narrowest peak-memory interval (half-widths as log ratios)."""

    measured: bool
    default_log: NonNegative
    min_log: NonNegative


class SessionDrift(Section):
    """``evaluate.session_drift``: intervals for a later session of the device (carb/data/session_drift.py)."""

    enabled: bool
    kinds: list[Literal["cpu", "gpu"]]


class CrossConformal(Section):
    """``evaluate.cross_conformal``: intervals of data whose calibration part is too small."""

    min_cal_rows: Annotated[int, Field(ge=0)]
    folds: Annotated[int, Field(ge=2)]


class Refits(Section):
    """``evaluate.refits``: how the evaluation's refits run (carb/analysis/refits.py)."""

    workers: Annotated[Any, BeforeValidator(_n_jobs)]
    light: bool
    tree_share: Annotated[float, Field(gt=0, le=1)]
    max_learning_rate: Annotated[float, Field(gt=0, le=1)]


class Sanity(Section):
    """``evaluate.sanity``: screening-mode predictions on a grid."""

    enabled: bool
    space: Text


class Evaluate(Section):
    """``evaluate`` (``carb-train``): what is evaluated beside the fit."""

    interval_coverage: Coverage
    cross_conformal: CrossConformal
    memory_floor: MemoryFloor
    session_drift: SessionDrift
    budget: BudgetCheck
    lobo: Lobo
    extrapolation: Extrapolation
    architecture_intervals: ArchitectureIntervals
    refits: Refits
    sanity: Sanity
    importances_top: Count
    figures: bool


class Train(Fitting):
    """``conf/train.yaml``."""

    evaluate: Evaluate
    register_: Literal["auto", True, False] = Field(alias="register")
    run_name: Text | None
    run_suffix: Text | None
    print_table: bool
    log_only: Text | None


class Shard(Section):
    """``shard`` (``carb-collect``): this shard of the shuffled order."""

    index: Index
    count: Count


class Resume(Section):
    """``resume`` (``carb-collect``): what a restart accepts."""

    mix_protocols: bool


class Collect(Command):
    """``conf/collect.yaml``."""

    space: AnySpace
    device: Device
    measure: Measure
    progress: Progress
    out: Text
    seed: Index
    shard: Shard
    max_minutes: Positive | None
    import_run: Text | None
    retry: Literal["none", "errors"]
    resume: Resume
    limit: Count | None
    run_name: Text | None


class Transfer(Section):
    """``transfer`` (``carb-calibrate``): the transfer model's settings."""

    affine_min_k: Annotated[int, Field(ge=2)]
    residual_min_k: Annotated[int, Field(ge=3)]
    ridge_alpha: Positive
    slope_min: Positive
    slope_max: Positive
    precision_shrink: NonNegative | Literal["auto"] = "auto"
    precision_shrink_single: NonNegative | Literal["auto"] | None = None
    offset_weighting: Literal["equal", "inverse_variance", "huber"] = "equal"
    base_offsets_only: bool = True
    keep_zero_shot: bool = False
    dispatch: bool = True
    probe: bool = True
    spec: bool = True
    error_prior: Text | None = "auto"
    prior_rows: NonNegative = 10.0
    prior_targets: list[Literal["latency_ms", "energy_J", "peak_memory_MB"]] = ["latency_ms", "energy_J"]
    repeatability_floor: dict[Literal["default", "latency_ms", "energy_J", "peak_memory_MB"], NonNegative] = {}
    min_rows_per_precision: Index = 3
    pick_where_probes_disagree: bool = False
    added_precision_max_flops: Positive = 2.5e8
    pair_prior: Text | None = "auto"
    device_widen: Literal["student-t", "predictive", "pairs", "pooled"] = "student-t"
    unmeasured_floor: Literal["configured", "class-bound"] = "class-bound"
    level_by_precision: Literal["pooled", "own", "widest"] = "widest"
    zero_shot_target_out: Literal["quantiles", "level", "device", "none"] = "device"
    target_out_fallback: Literal["own", "ratio"] = "own"
    level_noise: Literal["keep", "swap"] = "swap"
    extra_sources: Annotated[Literal["auto"] | list[Text], BeforeValidator(_extra_sources)] = "auto"
    source_weighting: Literal["inverse_loo", "equal", "inverse_loo_precision"] = "inverse_loo"
    extra_source_train: list[Text] = ["model=carb_fast", "model.specialists.xgb.n_estimators=25",
                                      "model.specialists.lgbm.n_estimators=25",
                                      "model.specialists.lgbm.min_child_samples=20",
                                      "model.specialists.et.min_samples_leaf=8"]


class TransferBenchmark(Section):
    """``benchmark`` (``python -m scripts.bench.transfer_pairs``): how many K-row picks each pair's K > 0 figures
    average over (:func:`carb.analysis.transfer.pick_split`: pick 0 carb-calibrate's own, the others the same rule
    on a random ``pool_fraction`` of the target's rows, seeded by ``seed``)."""

    picks: Count = 5
    pool_fraction: Annotated[float, Field(gt=0, le=1)] = 0.5
    seed: Index = 0


class ZeroShotPower(Section):
    """``zero_shot.power``: the zero-shot energy's power model (:mod:`carb.model.power`)."""

    data: Text | None = None
    static_fraction: Annotated[float, Field(gt=0, lt=1)] | None = None
    static_fraction_range: Annotated[list[Annotated[float, Field(gt=0, lt=1)]], Field(min_length=2, max_length=2)] = \
        [0.10, 0.30]
    unmeasured_widen: Annotated[float, Field(ge=1)] = 2.0
    folds: Annotated[int, Field(ge=2)] = 10


class ZeroShot(Section):
    """``zero_shot`` (``carb-calibrate k=0 spec=<GPU>`` / ``probe=``): the spec-ratio weights and the error bands."""

    weights: dict[Literal["compute", "bandwidth", "power"], float]
    log_error_band: Band
    probe_log_error_band: Band = [-0.354, 0.222]
    band_devices: Count = 4
    probe_band_devices: Count = 3
    probe_multi_log_error_band: Band | None = None
    probe_multi_band_devices: Count = 3
    power: ZeroShotPower | None = None


class ProbeOps(Section):
    """``ops`` of a probe's plan: how many operations of each kind besides the regular convolutions
    (:func:`carb.measure.probe.op_plan`; 0: none) and the largest call (million multiply-adds; MB of
    activations at fp32). A plan without ``ops`` (``probe_run`` of older configs) takes these defaults."""

    per_kind: Index = 4
    max_MMAC: Positive = 16.0
    max_MB: Positive = 8.0


class ProbeRun(Section):
    """A device probe's plan: ``probe_run`` (``carb-calibrate probe=true``, the short probe of this CPU) and
    ``carb-probe``'s own keys."""

    n: Count
    seed: Index
    max_MMAC: Positive
    precisions: Annotated[list[Precision], Field(min_length=1)] | None
    repeats: Count
    min_window_s: NonNegative
    ops: ProbeOps | None = None


class Calibrate(Command):
    """``conf/calibrate.yaml``."""

    space: Space
    device: Device
    measure: Measure
    progress: Progress
    compute: Compute
    source: Text | None
    data: Data
    k: Index
    spec: Text | None = None
    probe: bool | Text | None = False
    probe_run: ProbeRun | None = None
    zero_shot: ZeroShot | None = None
    out: Text
    transfer: Transfer
    benchmark: TransferBenchmark | None = None
    coverage: Coverage
    session_drift: SessionDrift | None = None
    register_: bool = Field(alias="register")
    alias: Text
    run_name: Text | None

    @model_validator(mode="after")
    def _zero_shot_has_a_spec_or_probe(self) -> "Calibrate":
        """``k=0`` is a zero-shot transfer, which needs ``spec`` (a GPU) or ``probe`` (a CPU): refused before
        any work (the quickstart checks this config before it trains)."""
        probe = self.probe not in (None, False) and str(self.probe).lower() not in ("false", "")
        if self.k == 0 and not self.spec and not probe:
            raise PydanticCustomError("carb", "k=0 needs spec=<GPU name of carb/data/gpu_specs.csv> (zero-shot "
                                      "from spec sheets) or probe=<device_id>|true (a CPU, from device probes); "
                                      "or k >= 1 with measured rows (data.path=... or measure=...)", {"key": "k"})
        return self


class Timm(Section):
    """``timm`` (``carb-characterize source=timm``): the shipped timm benchmark's filters."""

    path: Text | None
    gpu_a: Text
    gpu_b: Text
    precision: Literal["amp_fp16", "amp_bf16", "bf16"]
    compile: Literal["eager", "inductor"]
    memory_layout: Literal["nchw", "nhwc"]
    torch: Text
    plain_only: bool


class Analysis(Section):
    """``analysis`` (``carb-characterize``): SM-utilisation tiers (%) and the fewest shared configurations."""

    sm_edges: Annotated[list[NonNegative], Field(min_length=2, max_length=2)]
    min_pairs: Annotated[int, Field(ge=2)]


class Characterize(Command):
    """``conf/characterize.yaml``."""

    data: Data
    progress: Progress
    compute: Compute
    source: Literal["dataset", "timm"]
    compare: Text | None
    compare_device: Text | None
    timm: Timm
    analysis: Analysis
    run_name: Text | None


class Import(Command):
    """``conf/import.yaml``."""

    importer: Importer
    out: Text
    run_name: Text | None
    show_unmapped: Index


class Probe(Command, ProbeRun):
    """``conf/probe.yaml``: the probe's plan (:class:`ProbeRun`) and where it runs and goes."""

    space: Space
    measure: Measure
    progress: Progress
    out: Text | None
    run_name: Text | None


class PromoteSettings(Section):
    """``promote``: which version becomes the champion."""

    name: Text | None
    data: Text | None
    metric: Text
    fallback_metric: Text
    direction: Literal["minimize", "maximize"]
    zoo_metric: Text
    zoo_direction: Literal["minimize", "maximize"]
    tie_tolerance: NonNegative
    across_datasets: bool
    version: Count | None
    alias: Text
    previous_alias: Text


class Promote(Command):
    """``conf/promote.yaml``."""

    progress: Progress
    promote: PromoteSettings


class ScreenCommand(Command):
    """``conf/screen.yaml``."""

    progress: Progress
    compute: Compute
    space: AnySpace   # a zoo space screens named networks (carb.analysis.zoo_screen)
    screen: Screen


#: The schema of each command's composed config.
COMMANDS: dict[str, type[BaseModel]] = {
    "train": Train, "tune": Fitting, "collect": Collect, "calibrate": Calibrate, "characterize": Characterize,
    "import": Import, "probe": Probe, "promote": Promote, "screen": ScreenCommand,
}
