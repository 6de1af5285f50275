"""Typed schemas of every config group (``conf/<group>/*.yaml``) and of each command's composed config
(``conf/<command>.yaml``): unknown keys, wrong types and out-of-range values are refused before any work
starts, as one line naming the dotted key and what is allowed (:func:`validate`).

Why pydantic models rather than Hydra structured configs: a structured config (a dataclass in the
ConfigStore) types a value but cannot say ``>= 1``, ``in (0, 1]``, "a non-empty list of these names" or
"null or an integer, also as the text ``CARB_N_JOBS`` gives"; its errors are multi-line OmegaConf
texts; and it would change what the commands read (typed DictConfigs). These models validate the
composed, resolved config as plain data (``OmegaConf.to_container(cfg, resolve=True)``) and leave the
config itself untouched. One model per group, composed into one per command (:data:`COMMANDS`); each
model is strict (no ``"3"`` for 3, no ``1`` for true) and forbids keys it does not know, except where a
key passes settings through to a library (the specialists' and the corrector model's parameters).
The keys of ``hydra.*`` are Hydra's own and not checked here. The physics prior's settings are written
once, in :class:`carb.model.prior_config.PriorSettings`; the other groups' values live in their YAML
files and only their types and ranges here.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from carb.errors import ConfigError
from carb.model.prior_config import PriorSettings

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


# ----------------------------------------------------------------------------------------- groups

class Data(Section):
    """``data``: a dataset (a shipped name, a .parquet/.csv file or a folder of shards) and one device's rows."""

    path: Text | None
    device: Text | None = None


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


class Depths(Section):
    """``space.depths``: depths per block type."""

    basic: list[Count]
    bottleneck: list[Count]


class Space(Section):
    """``space``: a design space (depths are checked against the ResNet layouts when it is expanded)."""

    name: Text
    description: Text
    mode: Literal["grid", "random"]
    n: Count | None
    seed: Index
    num_classes: Count
    max_flops: Positive | None = None
    blocks: Annotated[list[Literal["basic", "bottleneck"]], Field(min_length=1)]
    depths: Depths
    width_mults: Annotated[list[Positive], Field(min_length=1)]
    input_sizes: Annotated[list[Count], Field(min_length=1)]
    batch_sizes: Annotated[list[Count], Field(min_length=1)]
    precisions: Annotated[list[Precision], Field(min_length=1)]
    early_downsample: Annotated[list[bool], Field(min_length=1)]
    inner_mults: Annotated[list[Positive], Field(min_length=1)]


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


class Progress(Section):
    """``progress``: progress lines on stderr (seconds)."""

    enabled: bool
    min_interval_s: NonNegative


class Budget(Section):
    """``screen.budget``: a limit per target in its unit (null: none)."""

    energy_J: Positive | None
    peak_memory_MB: Positive | None
    latency_ms: Positive | None


class Screen(Section):
    """``screen``: what ``carb-screen`` scores, keeps and ranks."""

    target: Text | None
    source: Text | None
    source_optional: bool
    top_k: Count
    budget: Budget
    skip_unpredicted_budget: bool
    objective: Literal["energy_J", "latency_ms", "peak_memory_MB", "energy_J_per_image",
                       "latency_ms_per_image"] | None
    grid_file: Text | None
    grid_defaults: dict[str, Any] | None
    shortlist_size: Count
    outside: Literal["flag", "drop", "only"]
    interval_coverage: Coverage
    validate_: Text | None = Field(alias="validate")
    validate_split: Literal["all", "test"]
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


class CsvImporter(Section):
    """``importer=csv``: any CSV of measurements with a column map."""

    name: Literal["csv"]
    path: Text | None
    columns: CsvColumns
    constants: CsvConstants
    scale: CsvScale
    unmapped: Literal["fail", "list"]


class OptimumImporter(Section):
    """``importer=optimum``: optimum-benchmark result files."""

    name: Literal["optimum"]
    path: Text | None
    target: Text
    memory: Literal["auto", "allocator_peak", "device_used"]
    energy: Literal["auto", "gpu", "cpu", "ram", "total"]
    input_size: Count | None
    unmapped: Literal["fail", "list"]


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


Importer = Annotated[Union[CsvImporter, OptimumImporter, TimmImporter], Field(discriminator="name")]


# ----------------------------------------------------------------------------------------- commands

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


class Sanity(Section):
    """``evaluate.sanity``: screening-mode predictions on a grid."""

    enabled: bool
    space: Text


class Evaluate(Section):
    """``evaluate`` (``carb-train``): what is evaluated beside the fit."""

    interval_coverage: Coverage
    budget: BudgetCheck
    lobo: Lobo
    extrapolation: Extrapolation
    architecture_intervals: ArchitectureIntervals
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

    space: Space
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
    precision_shrink: NonNegative


class Calibrate(Command):
    """``conf/calibrate.yaml``."""

    space: Space
    device: Device
    measure: Measure
    progress: Progress
    source: Text | None
    data: Data
    k: Count
    out: Text
    transfer: Transfer
    coverage: Coverage
    register_: bool = Field(alias="register")
    alias: Text
    run_name: Text | None


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


class Probe(Command):
    """``conf/probe.yaml``."""

    space: Space
    measure: Measure
    progress: Progress
    n: Count
    seed: Index
    max_MMAC: Positive
    precisions: Annotated[list[Precision], Field(min_length=1)] | None
    repeats: Count
    min_window_s: NonNegative
    out: Text | None
    run_name: Text | None


class PromoteSettings(Section):
    """``promote``: which version becomes the champion."""

    name: Text | None
    data: Text
    metric: Text
    fallback_metric: Text
    direction: Literal["minimize", "maximize"]
    tie_tolerance: NonNegative
    across_datasets: bool
    alias: Text
    previous_alias: Text


class Promote(Command):
    """``conf/promote.yaml``."""

    promote: PromoteSettings


class ScreenCommand(Command):
    """``conf/screen.yaml``."""

    progress: Progress
    space: Space
    screen: Screen


#: The schema of each command's composed config.
COMMANDS: dict[str, type[BaseModel]] = {
    "train": Train, "tune": Fitting, "collect": Collect, "calibrate": Calibrate, "characterize": Characterize,
    "import": Import, "probe": Probe, "promote": Promote, "screen": ScreenCommand,
}


# ----------------------------------------------------------------------------------------- errors

def validate(command: str, config: dict[str, Any]) -> None:
    """Check ``config`` (the resolved composed config as plain data, ``hydra`` left out) against
    ``command``'s schema; raises the first problem as a one-line :class:`ConfigError`. A command
    without a schema is not checked."""
    schema = COMMANDS.get(command)
    if schema is None:
        return
    try:
        schema.model_validate(config)
    except ValidationError as e:
        raise ConfigError(error_line(schema, config, e.errors()[0])) from None


def error_line(schema: type[BaseModel], config: Any, err: dict[str, Any]) -> str:
    """``<dotted.key>: <what is wrong>; allowed: ...`` for one pydantic error of ``schema`` on ``config``."""
    kind, loc = err["type"], list(err["loc"])
    if "[key]" in loc:                 # a mapping's key that is not allowed (model.per_target.<target>)
        parts, tp, _ = _locate(schema, config, loc[:loc.index("[key]") - 1])
        keys = get_args(_strip(tp))
        allowed = _choices(keys[0]) if keys else None
        return f"{'.'.join(parts)}: key {loc[loc.index('[key]') - 1]!r} is not allowed; allowed: {allowed}"
    parts, tp, value = _locate(schema, config, loc)
    key = ".".join(parts) or "config"
    if kind in ("union_tag_invalid", "union_tag_not_found"):      # importer.name
        ctx = err.get("ctx") or {}
        return f"{key}.name: {ctx.get('tag')!r} is not allowed; allowed: [{ctx.get('expected_tags', '')}]"
    if kind == "extra_forbidden":
        return f"{key}: unknown key; allowed: {_fields(tp)}"
    if kind == "missing":
        return f"{key}: missing; must be {describe(tp)}"
    if kind == "carb":
        return f"{key}: {err['msg']}"
    choices = _choices(tp)
    if choices is not None:
        return f"{key}: {value!r} is not allowed; allowed: {choices}"
    items = _list_item(tp)
    if items is not None and _choices(items) is not None and isinstance(value, list) and value:
        bad = [v for v in value if v not in _choices(items)]
        if bad:
            return f"{key}: {bad} not allowed; give a non-empty list of {_choices(items)}"
    return f"{key}: must be {describe(tp)}, got {value!r}"


def _locate(schema: type[BaseModel], config: Any, loc: list[Any]) -> tuple[list[str], Any, Any]:
    """``(key parts, type, value)`` of the config node an error ``loc`` points at. A list item's error
    is reported on the whole list; an extra key on its parent (whose type lists the allowed keys)."""
    parts: list[str] = []
    tp: Any = schema
    value = config
    for i, part in enumerate(loc):
        base = _strip(tp)
        if isinstance(part, int) or _list_item(tp) is not None:
            break
        if isinstance(base, type) and issubclass(base, BaseModel):
            field = _field(base, str(part))
            if field is None:          # an unknown key (or a discriminated union's tag)
                if _union(tp) and i + 1 < len(loc):
                    continue
                parts.append(str(part))
                return parts, base, value.get(part) if isinstance(value, dict) else None
            tp = _annotated(field)
        elif _union(tp):
            tp = next((m for m in _union(tp) if getattr(_strip(m), "__name__", "") == part
                       or _tag(m) == part), tp)
            continue
        elif get_origin(base) is dict:
            tp = get_args(base)[1]
        parts.append(str(part))
        value = value.get(part) if isinstance(value, dict) else None
    return parts, tp, value


def _field(model: type[BaseModel], name: str) -> Any:
    """The field of ``model`` named ``name`` in the config (its alias when it has one), or None."""
    for fname, f in model.model_fields.items():
        if (f.alias or fname) == name:
            return f
    return None


def _annotated(field: Any) -> Any:
    """A field's type with its constraints, as ``Annotated[type, *metadata]``."""
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


def _strip(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and without a ``None`` alternative."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    args = [a for a in get_args(tp) if a is not type(None)]
    if _is_union(tp) and len(args) == 1:
        return _strip(args[0])
    return tp


def _is_union(tp: Any) -> bool:
    """Whether ``tp`` is a union (``X | Y`` or ``Union[X, Y]``)."""
    import types

    return get_origin(tp) in (Union, types.UnionType)


def _union(tp: Any) -> list[Any]:
    """The members of a union of models (``importer``), else []."""
    base = _strip(tp)
    if not _is_union(base):
        return []
    return [a for a in get_args(base) if a is not type(None)]


def _tag(tp: Any) -> Any:
    """The ``name`` literal of a union member (``csv`` of :class:`CsvImporter`), else None."""
    m = _strip(tp)
    if isinstance(m, type) and issubclass(m, BaseModel) and "name" in m.model_fields:
        return (get_args(m.model_fields["name"].annotation) or (None,))[0]
    return None


def _list_item(tp: Any) -> Any:
    """The item type of a list type, else None."""
    base = _strip(tp)
    return get_args(base)[0] if get_origin(base) is list else None


def _choices(tp: Any) -> list[Any] | None:
    """The allowed values of a ``Literal`` type, else None."""
    base = _strip(tp)
    return list(get_args(base)) if get_origin(base) is Literal else None


def _fields(tp: Any) -> list[str]:
    """The config keys of a model type (aliases where given), else []."""
    base = _strip(tp)
    if isinstance(base, type) and issubclass(base, BaseModel):
        return [f.alias or n for n, f in base.model_fields.items()]
    return []


def _bounds(tp: Any) -> dict[str, Any]:
    """The ``ge``/``gt``/``le``/``lt`` and length constraints on ``tp`` (through ``Annotated``)."""
    out: dict[str, Any] = {}
    while get_origin(tp) is Annotated:
        tp, *meta = get_args(tp)
        for m in meta:
            for item in [m, *getattr(m, "metadata", [])]:
                for name in ("ge", "gt", "le", "lt", "min_length", "max_length"):
                    if getattr(item, name, None) is not None:
                        out.setdefault(name, getattr(item, name))
    return out


def describe(tp: Any) -> str:
    """What a value of type ``tp`` must be, in words (``null or an integer >= 1``)."""
    nullable = _is_union(_unannotated(tp)) and type(None) in get_args(_unannotated(tp))
    base, b = _strip(tp), _bounds(tp)
    inner = _unannotated(tp)
    if nullable:
        inner = next(a for a in get_args(inner) if a is not type(None))
        b = {**b, **_bounds(inner)}
    prefix = "null or " if nullable else ""
    if base is bool:
        return prefix + "true or false"
    if base in (int, float):
        what = "an integer" if base is int else "a number"
        if b.get("gt") == 0 and "le" not in b:
            return prefix + ("a positive " + ("integer" if base is int else "number"))
        lo, hi = b.get("ge", b.get("gt")), b.get("le", b.get("lt"))
        if lo is not None and hi is not None:
            return prefix + f"{what} in {'[' if 'ge' in b else '('}{lo}, {hi}]"
        if lo is not None:
            return prefix + f"{what} {'>=' if 'ge' in b else '>'} {lo}"
        return prefix + what
    if base is str:
        return prefix + "a text"
    if get_origin(base) is Literal:
        return prefix + f"one of {list(get_args(base))}"
    if get_origin(base) is list:
        lo, hi = b.get("min_length"), b.get("max_length")
        size = "a non-empty list of" if lo == 1 and hi is None else "a list of"
        if lo and hi:
            size = f"a list of {lo}" if lo == hi else f"a list of {lo} to {hi}"
        elif lo and lo > 1:
            size = f"a list of at least {lo}"
        return prefix + f"{size} {_plural(get_args(base)[0])}"
    if isinstance(base, type) and issubclass(base, BaseModel):
        return prefix + f"a mapping of {_fields(base)}"
    if get_origin(base) is dict:
        return prefix + "a mapping"
    return prefix + "a valid value"


def _unannotated(tp: Any) -> Any:
    """``tp`` without ``Annotated`` (a ``None`` alternative kept)."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _plural(tp: Any) -> str:
    """``describe`` of a list's items, as a plural (``integers >= 1``, ``['fp32', 'fp16', 'bf16']``)."""
    if _choices(tp) is not None:
        return str(_choices(tp))
    words = describe(tp)
    for one, many in (("an integer", "integers"), ("a positive number", "positive numbers"),
                      ("a positive integer", "positive integers"), ("a number", "numbers"),
                      ("a text", "texts"), ("true or false", "true/false values")):
        if words.startswith(one):
            return many + words[len(one):]
    return words
