"""The schema of each config group (``conf/<group>/*.yaml``): one pydantic model per group and its nested
sections, with the value types they share (:data:`Count`, :data:`Positive`, ...). Types and ranges are
here; the values are in the YAML files (the prior's in :mod:`carb.model.prior_config`)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, model_validator
from pydantic_core import PydanticCustomError

STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Section(BaseModel):
    """A config node: strict types, unknown keys refused."""

    model_config = STRICT


class Open(BaseModel):
    """A config node whose listed keys are typed and whose other keys pass through to a library."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


def _numbers_as_text(v: Any) -> Any:
    """A number given where text is expected (``tune.study=2024``, ``data.device=4090``) is that text."""
    return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def _env_integer(v: Any) -> Any:
    """null or an integer >= -1, also as the text an environment variable gives (``${oc.env:CARB_N_JOBS,null}``)."""
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "null", "none")):
        return None
    try:
        n = None if isinstance(v, (bool, float)) else int(str(v).strip())
    except ValueError:
        n = None
    if n is None or n < -1:
        raise PydanticCustomError("carb", "must be null or an integer >= -1 (e.g. CARB_N_JOBS=2), got {v}",
                                  {"v": repr(v)})
    return n


def _n_jobs(v: Any) -> Any:
    """:func:`carb.compute.parse_n_jobs` (one rule for the library and the schema) as a schema check."""
    from carb.compute import parse_n_jobs
    from carb.errors import ConfigError

    try:
        return parse_n_jobs(v)
    except ConfigError:
        raise PydanticCustomError("carb", "must be auto (also -1 or 0) or an integer >= 1 (e.g. CARB_N_JOBS=2), "
                                  "got {v}", {"v": repr(v)}) from None


_SPACES = ("auto", True, False)


def _log_target(v: Any) -> Any:
    """``auto``, true, false, or a mapping target -> one of those."""
    items = v.items() if isinstance(v, dict) else [(None, v)]
    for t, x in items:
        if t is not None and t not in TARGETS:
            raise PydanticCustomError("carb", "{t!r}: not a target; allowed: {allowed}", {"t": t, "allowed": list(TARGETS)})
        if not any(x is s or (isinstance(s, str) and x == s) for s in _SPACES):
            where = "" if t is None else f"{t}: "
            raise PydanticCustomError("carb", "{where}{v} is not allowed; allowed: {allowed} or a mapping target -> "
                                      "one of them", {"where": where, "v": repr(x), "allowed": list(_SPACES)})
    return v


Text = Annotated[str, BeforeValidator(_numbers_as_text)]
Count = Annotated[int, Field(ge=1)]              # an integer >= 1
Index = Annotated[int, Field(ge=0)]              # an integer >= 0 (seeds, indices)
Positive = Annotated[float, Field(gt=0)]         # a positive number
NonNegative = Annotated[float, Field(ge=0)]      # a number >= 0 (seconds, shares)
Coverage = Annotated[float, Field(ge=0.01, le=0.99)]
Fraction = Annotated[float, Field(gt=0, le=1)]   # a share in (0, 1]
EnvInteger = Annotated[int | None, BeforeValidator(_env_integer)]
LogTarget = Annotated[Any, BeforeValidator(_log_target)]

TARGETS = ("peak_memory_MB", "energy_J", "latency_ms")
Target = Literal["peak_memory_MB", "energy_J", "latency_ms"]
Member = Literal["xgb", "lgbm", "et"]
Precision = Literal["fp32", "fp16", "bf16"]
Members = Annotated[list[Member], Field(min_length=1)]




class Data(Section):
    """``data``: a dataset (a shipped name, a .parquet/.csv file or a folder of shards) and one device's rows."""

    path: Text | None
    device: Text | None = None
    # carb-calibrate: rows more than this many hours apart (measured_at) are two measuring sessions (a warning)
    session_gap_h: Annotated[float, Field(gt=0)] | None = None
    # data=timm_zoo: which model carb-train fits (carb.model.zoo_predictor.estimator_of; auto: zoo_latency on
    # every timm file, GPUs and CPU) and the family-grouped folds of zoo_latency's intervals
    estimator: Literal["auto", "zoo_latency", "cascade"] | None = None
    interval_folds: Annotated[int, Field(ge=2)] | None = None


class Device(Section):
    """``device``: where ``carb-collect`` measures."""

    kind: Literal["auto", "cpu", "cuda"]
    index: Index


class Features(Section):
    """``features``: the feature set (its columns are checked against the data by the cascade)."""

    name: Text
    columns: Annotated[list[Text], Field(min_length=1)]


class Clocks(Section):
    """``measure.clocks``: GPU clock locking (MHz)."""

    lock: bool
    sm_MHz: Count | None
    mem_MHz: Count | None


class Guard(Section):
    """``measure.guard``: the CPU contention guard (shares in (0, 1])."""

    enabled: bool
    min_cpu_share: Fraction
    max_steal_share: Fraction
    max_tries: Count


class Repeat(Section):
    """``measure.repeat``: the collector's passes over the rows (run-to-run repeatability)."""

    passes: Annotated[int, Field(ge=1, le=10)]
    order: Literal["rotated", "reversed", "shuffled"]


class Measure(Section):
    """``measure``: the measurement protocol (:class:`carb.measure.base.MeasureSettings`)."""

    n_runs: Count
    n_warmup: Index
    min_window_s: NonNegative
    max_runs: Count
    util_window_s: NonNegative
    util_interval_s: Positive
    cooldown_s: NonNegative
    threads: Count | None
    malloc_mmap_threshold_MB: Annotated[int, Field(ge=1, le=4096)] | None
    require_energy: bool
    kernel_launches: bool
    rapl_root: Text
    clocks: Clocks
    guard: Guard
    repeat: Repeat | None = None


class Depths(Section):
    """``space.depths``: depths per block type."""

    basic: list[Count]
    bottleneck: list[Count]


class _SpaceKnobs(Section):
    """The keys every design space has (:class:`Space`, :class:`ZooSpace`)."""

    name: Text
    description: Text
    mode: Literal["grid", "random"]
    n: Count | None
    seed: Index
    num_classes: Count
    max_flops: Positive | None = None
    input_sizes: Annotated[list[Count], Field(min_length=1)]
    batch_sizes: Annotated[list[Count], Field(min_length=1)]
    precisions: Annotated[list[Precision], Field(min_length=1)]


class Space(_SpaceKnobs):
    """``space``: a design space (depths are checked against the ResNet layouts when it is expanded)."""

    blocks: Annotated[list[Literal["basic", "bottleneck"]], Field(min_length=1)]
    depths: Depths
    width_mults: Annotated[list[Positive], Field(min_length=1)]
    early_downsample: Annotated[list[bool], Field(min_length=1)]
    inner_mults: Annotated[list[Positive], Field(min_length=1)]


class ZooSpace(_SpaceKnobs):
    """``space`` of kind ``zoo``: named networks with input size, batch size and precision as knobs
    (:mod:`carb.design.zoo_space`)."""

    kind: Literal["zoo"]
    models: Annotated[list[Text], Field(min_length=1)]
    input_sizes_of: dict[str, Annotated[list[Count], Field(min_length=1)]] = {}


def _space_kind(v: Any) -> str:
    """``zoo`` for a zoo space (``kind: zoo``), else ``resnet``."""
    kind = v.get("kind") if isinstance(v, dict) else getattr(v, "kind", None)
    return "zoo" if kind == "zoo" else "resnet"


#: A design space: the ResNet knobs' (:class:`Space`) or a model zoo's (:class:`ZooSpace`).
AnySpace = Annotated[Union[Annotated[Space, Tag("resnet")], Annotated[ZooSpace, Tag("zoo")]],
                     Discriminator(_space_kind)]


class XGB(Open):
    """``model.specialists.xgb``: XGBoost parameters."""

    n_estimators: Count
    max_depth: Count
    learning_rate: Positive


class LGBM(Open):
    """``model.specialists.lgbm``: LightGBM parameters."""

    n_estimators: Count
    num_leaves: Annotated[int, Field(ge=2)]
    learning_rate: Positive


class ET(Open):
    """``model.specialists.et``: ExtraTrees parameters."""

    n_estimators: Count
    min_samples_leaf: Count


class Specialists(Section):
    """Each specialist's constructor parameters (other parameters of the library pass through)."""

    xgb: XGB
    lgbm: LGBM
    et: ET


class PerTarget(Section):
    """``model.per_target.<target>``: overrides for one target (what a tuned preset supplies)."""

    xgb: dict[str, Any] | None = None
    lgbm: dict[str, Any] | None = None
    et: dict[str, Any] | None = None
    weights: list[NonNegative] | None = None
    log_target: LogTarget = None


class Regime(Section):
    """``model.correctors.<regime>``: one regime corrector."""

    enabled: bool
    targets: list[Target] | None


class Correctors(Section):
    """``model.correctors``: the regime correctors (``model``: HistGradientBoosting parameters)."""

    low_batch: Regime
    high_load: Regime
    model: dict[str, Any]
    min_rows: Count
    min_gain: float


class Shrink(Section):
    """``model.shrink``: how far a physics stage's correction may move a row from its prior
    (:mod:`carb.model.shrink`; chosen by grouped cross-validation over ``group``)."""

    enabled: bool
    group: Text
    min_groups: Annotated[int, Field(ge=2)]
    folds: Literal[0] | Annotated[int, Field(ge=2)]   # 0: one fold per group (leave-one-group-out)
    alphas: Annotated[list[Annotated[float, Field(ge=0, le=1)]], Field(min_length=1)]
    radii: Annotated[list[Positive | None], Field(min_length=1)]
    tolerance: NonNegative
    max_reference_rows: Count
    neighbours: Annotated[int, Field(ge=1)]


class TunedFrom(Section):
    """``model.tuned_from`` (``model=tuned``): the Optuna study whose best parameters are used."""

    study: Text
    storage: Text


class ModelPreset(Section):
    """``model``: one preset's sizes and settings (:class:`carb.model.cascade.CarbCascade` parameters)."""

    name: Text
    specialists: Specialists
    per_target: dict[Target, PerTarget] | None
    members: Members
    log_target: LogTarget
    probe_estimators: Count
    oof_folds: Annotated[int, Field(ge=2)]
    correctors: Correctors
    shrink: Shrink | None = None
    telemetry: Literal["model", "medians"]
    power_cap: bool
    val_fraction: Annotated[float, Field(ge=0.01, le=0.9)]
    n_jobs: EnvInteger
    random_state: Index


class Model(ModelPreset):
    """``model``: a preset; ``model=auto`` adds ``threshold_rows`` and ``large`` (the sizes from that many
    training rows on), ``model=tuned`` adds ``tuned_from`` (the Optuna study)."""

    threshold_rows: Count | None = None
    large: ModelPreset | None = None
    tuned_from: TunedFrom | None = None

    @model_validator(mode="after")
    def _auto_has_large(self) -> Model:
        """``model=auto`` needs the sizes it switches to and the row count it switches at."""
        if self.name == "auto" and (self.large is None or self.threshold_rows is None):
            raise PydanticCustomError("carb", "model=auto needs `large` and `threshold_rows`", {})
        return self


class Split(Section):
    """``split``: the stratified split (fractions train, val[, cal], test)."""

    seed: Index
    fractions: Annotated[list[Fraction], Field(min_length=3, max_length=4)]


class SearchParam(Section):
    """One hyperparameter's search range in ``tune.search_space``."""

    type: Literal["int", "float", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: Positive | None = None
    choices: list[Any] | None = None


class Pruner(Section):
    """``tune.pruner``: Optuna's median pruner (boosting rounds)."""

    n_startup_trials: Index
    n_warmup_steps: Index
    report_every: Count


class Tune(Section):
    """``tune``: the Optuna study of ``carb-tune`` (read by ``model=tuned`` too)."""

    study: Text
    storage: Text
    worker: Index
    n_trials: Count
    blend_trials: Index
    timeout_s: Positive | None
    metric: Literal["mae", "rmse", "mape"]
    members: Members
    targets: Annotated[list[Target], Field(min_length=1)] | None
    seed: Index
    n_startup_trials: Index
    pruner: Pruner
    log_trials: bool
    search_space: dict[Member, dict[Text, SearchParam]]


class Tracking(Section):
    """``tracking``: the MLflow store."""

    uri: Text
    artifact_root: Text | None


class Paths(Section):
    """``paths``: where commands write outputs."""

    output_dir: Text
    data_dir: Text


class Compute(Section):
    """``compute``: threads of model fits and predictions (carb/compute.py)."""

    n_jobs: Annotated[Any, BeforeValidator(_n_jobs)]
    rows_per_thread: Count
    blas_threads: Count


class Progress(Section):
    """``progress``: progress lines on stderr (seconds)."""

    enabled: bool
    min_interval_s: NonNegative
    heartbeat_s: NonNegative


class Budget(Section):
    """``screen.budget``: a limit per target in its unit (null: none)."""

    energy_J: Positive | None
    peak_memory_MB: Positive | None
    latency_ms: Positive | None


class HjScore(Section):
    """``screen.hj``: CARB's accuracy-energy score (``hj_score``, :mod:`carb.analysis.hj_score`)."""

    accuracy_weight: Annotated[float, Field(ge=0, le=1)]


class ZooLatencyDevice(Section):
    """``conf/zoo_latency/default.yaml``'s ``per_device.<kind>``: overrides of :class:`ZooLatency`'s keys for the
    rows of one device kind, and the CPU terms of the additive base (:mod:`carb.model.zoo_latency_cpu`)."""

    gemm_regimes: bool | None = None
    amp_split: bool | None = None
    cpu_terms: list[Literal["weight_lowreuse", "weight_lowreuse_dram", "membound_dram", "extern_calls",
                            "norm_permuted", "depthwise_dram", "matmul_spill", "pointwise_fused",
                            "conv_weight_dram", "concat_copy", "conv_permuted", "linear_wide",
                            "concat_calls", "generated_loops", "copy_dense",
                            "group_norm", "group_norm_calls", "group_norm_multi"]] = []
    margin: Annotated[float, Field(ge=0)] | None = None   # the bound: None keeps the top-level key
    outside: Literal["clip", "base", "overshoot"] | None = None
    nested_margin: bool | None = None


class ZooLatencyCpuParts(Section):
    """``conf/zoo_latency/default.yaml``'s ``cpu_parts``: the thresholds of the CPU terms' layer-table columns
    (:func:`carb.model.zoo_latency_cpu.cpu_parts`; read by ``scripts/data/zoo_trace_features.py``)."""

    low_reuse: Positive       # uses of each weight per image
    mid_reuse: Positive
    cache_MB: Positive
    spill_MB: Positive
    l2_MB: Positive
    wide_features: Positive   # input and output features of a linear layer


class ZooLatency(Section):
    """``conf/zoo_latency/default.yaml``: :class:`carb.model.zoo_latency.ZooLatencyModel`'s settings (timm's
    published files; read by ``scripts/bench/zoo.py``)."""

    base: Literal["additive", "loglinear"]
    trace_base: bool
    gemm_regimes: bool
    amp_split: bool
    sdpa_math_io: bool
    other_bytes: bool
    dw_nonsquare: bool
    bmm_tiles: bool
    input_bytes: bool | Literal["cv"] = "cv"   # ZooLatencyModel's default and the conf's
    cv_folds: Annotated[int, Field(ge=2)] = 5   # input_bytes=cv: folds of whole families
    cv_min_models: Count = 5                    # models a family needs to be scored in that CV
    cv_seed: Index = 0                          # the seed shuffling families into those folds
    act_fp32: bool | Literal["cv"] = False      # fp32-list activations under autocast (softmax, norms) priced on top
    hidden_copies: bool = True                  # copies CUDA softmax / norms make of strided inputs counted as copies
    dw_native: bool = True                      # square depthwise convs off cuDNN (7x7, ...): a term of their own
    gn_reread: bool = False                     # group norms' second read of their input among the norm bytes
    cuda_layout: bool = True                    # hidden copies / dw FLOPs off cuDNN as cuDNN lays tensors out (*_cl)
    conv_tile: Literal[0, 64, 128, 256, "pow2"] = 0   # convs' FLOPs in partly empty output-channel tiles (0: off)
    census: bool
    trace: bool
    n_estimators: Count
    learning_rate: Positive
    num_leaves: Annotated[int, Field(ge=2)]
    min_child_samples: Count
    residual: Annotated[float, Field(ge=0, le=1)]
    margin: Annotated[float, Field(ge=0)] | None = 0.05
    outside: Literal["clip", "base", "overshoot"] = "overshoot"
    nested_margin: bool = False
    per_device: dict[Literal["cpu", "gpu"], ZooLatencyDevice] = {}
    cpu_parts: ZooLatencyCpuParts


class Screen(Section):
    """``screen``: what ``carb-screen`` scores, keeps and ranks."""

    target: Text | None
    source: Text | None
    source_optional: bool
    top_k: Count
    rescore: Literal["top_k", "all"]
    budget: Budget
    skip_unpredicted_budget: bool
    objective: Literal["energy_J", "latency_ms", "peak_memory_MB", "energy_J_per_image",
                       "latency_ms_per_image", "hj_score"] | None
    hj: HjScore
    grid_file: Text | None
    grid_defaults: dict[str, Any] | None
    accuracy: Literal["IMAGENET1K_V1", "IMAGENET1K_V2"] | None
    pareto: Annotated[list[Text], Field(min_length=1)] | None
    require: dict[str, float | None]
    maximize: list[Text]
    shortlist_size: Count
    profile_next: Index
    outside: Literal["flag", "drop", "only"]
    interval_coverage: Coverage
    interval_scope: Literal["later_session", "this_session"]
    validate_: Text | None = Field(alias="validate")
    validate_split: Literal["all", "test"]
    chunk_rows: Count
    progress_min_rows: Index
    scored_csv_max_rows: Index
    output_dir: Text


class CsvColumns(Section):
    """``importer.columns`` (``importer=csv``): the file's column for each field."""

    model: Text | None
    block: Text | None
    depth: Text | None
    width_mult: Text | None
    inner_mult: Text | None
    early_downsample: Text | None
    stages: Text | None
    input_size: Text | None
    batch_size: Text | None
    precision: Text | None
    device_name: Text | None
    torch_version: Text | None
    latency_ms: Text | None
    energy_J: Text | None
    peak_memory_MB: Text | None
    memory_kind: Text | None
    latency_std_ms: Text | None
    n_runs: Text | None
    n_warmup: Text | None


class CsvConstants(Section):
    """``importer.constants`` (``importer=csv``): a value for every row of a field the file lacks."""

    model: Text | None
    block: Literal["basic", "bottleneck"] | None
    depth: Count | None
    width_mult: Positive | None
    inner_mult: Positive | None
    early_downsample: bool | None
    stages: list[Count] | None
    input_size: Count | None
    batch_size: Count | None
    precision: Text | None
    device_name: Text | None
    torch_version: Text | None
    memory_kind: Literal["allocator_peak", "device_used"] | None


class CsvScale(Section):
    """``importer.scale`` (``importer=csv``): factors into CARB's units."""

    latency_ms: Positive | None
    energy_J: Positive | None
    peak_memory_MB: Positive | None
    latency_std_ms: Positive | None


class CsvUnits(Section):
    """``importer.units`` (``importer=csv``): the unit of a target column (carb/data/units.py)."""

    latency_ms: Literal["s", "ms", "us"] | None
    latency_std_ms: Literal["s", "ms", "us"] | None
    energy_J: Literal["J", "mJ", "kJ", "Wh", "kWh"] | None
    peak_memory_MB: Literal["B", "KiB", "kB", "MiB", "MB", "GiB", "GB"] | None


#: ``importer.device_kind``: how imported devices are described (carb/data/importers/devices.py).
DeviceKind = Literal["auto", "cuda", "cpu", "import"]


class CsvImporter(Section):
    """``importer=csv``: any CSV of measurements with a column map."""

    name: Literal["csv"]
    path: Text | None
    columns: CsvColumns
    constants: CsvConstants
    scale: CsvScale
    units: CsvUnits
    unmapped: Literal["fail", "list"]
    device_kind: DeviceKind
    spec: Text | None


class OptimumImporter(Section):
    """``importer=optimum``: optimum-benchmark result files."""

    name: Literal["optimum"]
    path: Text | None
    target: Text
    memory: Literal["auto", "allocator_peak", "device_used"]
    energy: Literal["auto", "gpu", "cpu", "ram", "total"]
    input_size: Count | None
    unmapped: Literal["fail", "list"]
    device_kind: DeviceKind
    spec: Text | None


class TimmImporter(Section):
    """``importer=timm``: timm's GPU inference benchmark."""

    name: Literal["timm"]
    path: Text | None
    gpu: Text | None
    precision: Literal["amp_fp16", "amp_bf16", "bf16"] | None
    compile: Literal["eager", "inductor"] | None
    memory_layout: Literal["nchw", "nhwc"] | None
    torch: Text
    unmapped: Literal["fail", "list"]
    device_kind: DeviceKind
    spec: Text | None


class GpuRunImporter(Section):
    """``importer=gpu_run``: the files a lent GPU returned (``python -m carb.measure.gpu_run --out DIR``)."""

    name: Literal["gpu_run"]
    path: Text | None
    keep: Text | None
    seed: Index | None
    date: Text | None


Importer = Annotated[Union[CsvImporter, OptimumImporter, TimmImporter, GpuRunImporter], Field(discriminator="name")]


class ZooTransfer(Section):
    """``conf/zoo_transfer/default.yaml``: zoo latency on a GPU never measured (:mod:`carb.model.zoo_transfer`,
    evaluated leave-one-GPU-out by :mod:`carb.analysis.zoo_transfer_eval`; read by ``scripts/bench/zoo.py
    --part device``)."""

    k: Annotated[int, Field(ge=0)]
    precision: Precision
    min_models: Annotated[int, Field(ge=2)]
    alphas: Annotated[list[Annotated[float, Field(gt=0)] | None], Field(min_length=1)]   # None: no correction
    correction: bool
    source_power: Annotated[float, Field(ge=0)] | None   # None: the nearest source
    same_stack: bool
    slope_gain: Annotated[float, Field(gt=0, le=1)]
    combined: bool
