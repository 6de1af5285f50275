"""A fitted cascade with a predict that takes knobs: what :func:`carb.load_model` returns.

The cascade's own ``predict`` (sklearn contract) needs the static and runtime feature columns it was
fitted on. :class:`Predictor.predict` takes the configurations themselves (a DataFrame of knob columns,
``ArchConfig`` objects or dicts), featurizes them, fills the runtime telemetry as screening does and returns,
per row in one frame: the predictions with their calibrated intervals, the domain flags and, given a
budget, the decision inputs and the decision exactly as ``carb-screen`` makes them.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.decisions import add_probabilities, decide
from carb.analysis.axes import add_per_image
from carb.analysis.zoo_predict import all_refused_line  # noqa: F401 - also this module's public name
from carb.analysis.screening import PER_IMAGE, check_budget, domain_filter, model_targets, score, scoped_model
from carb.data.accuracy import join_top1
from carb.design.arch import KNOBS, ArchConfig
from carb.design.features import grid_features
from carb.design.identity import RESNET, ZOO, model_input_kind, row_kinds
from carb.design.zoo_space import ZOO_DEFAULTS, check_zoo_knobs  # noqa: F401 - ZOO_DEFAULTS re-exported
from carb.errors import ConfigError
from carb.model.domain import unseen_mask
from carb.model.device_check import other_device
from carb.model.intervals import new_architecture_mask

#: Columns of a knob frame that describe the configuration (the rest pass through to the output).
CONFIG_COLUMNS = (*KNOBS, "num_classes")
#: The same for a zoo model's input (:mod:`carb.design.zoo_space`).
ZOO_CONFIG_COLUMNS = ("model_name", "family", "input_size", "batch_size", "precision")
#: The knobs a ResNet knob frame may leave out (:class:`~carb.design.arch.ArchConfig`'s defaults; ``stages``
#: None: the named layout of ``depth``); ``block`` and ``depth`` have none.
RESNET_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ArchConfig) if f.init and f.name in CONFIG_COLUMNS
                   and f.default is not dataclasses.MISSING}


def is_zoo_input(x: Any) -> bool:
    """Whether ``x`` names networks: an ``nn.Module``, a string or list of strings, or a frame with a
    ``model_name`` column."""
    if isinstance(x, pd.DataFrame):
        return "model_name" in x.columns
    if isinstance(x, str) or _is_module(x):
        return True
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(v, str) or _is_module(v) for v in x)


def is_mixed_frame(x: Any) -> bool:
    """Whether ``x`` is a frame that may hold both kinds of rows (:func:`carb.design.identity.row_kinds`): a
    non-empty frame with a ``model_name`` column and the ResNet marker column (``block``), as a served
    combined model receives them (the other kind's columns null on each row)."""
    return isinstance(x, pd.DataFrame) and len(x) > 0 and ZOO.marker in x.columns and RESNET.marker in x.columns


def _is_module(x: Any) -> bool:
    """An ``nn.Module`` (checked by its class names: no torch import for other inputs)."""
    return any(c.__name__ == "Module" and c.__module__.startswith("torch.nn") for c in type(x).__mro__)


def _values(v: Any, default: Any) -> list[Any]:
    """A knob given as one value or a list of values, as a list (``default`` when None)."""
    if v is None:
        return [default]
    return list(v) if isinstance(v, (list, tuple, np.ndarray, pd.Series)) else [v]


def zoo_knobs(x: Any, batch_size: Any = None, precision: Any = None, input_size: Any = None
              ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``(knob frame, {model_name: nn.Module})`` of a zoo model's input ``x`` (see :meth:`Predictor.predict`):
    a frame keeps its columns and gets the knobs it lacks (each combination of the given values); names and
    modules give one row per name x batch size x precision x input size. A module gets its torchvision name
    where it is one (:func:`carb.design.zoo_inputs.module_name`), else ``module:<Class>``. Raises
    :class:`ConfigError` (one line) for anything else."""
    import itertools

    from carb.design.zoo_inputs import module_name

    knob_values = {"batch_size": batch_size, "precision": precision, "input_size": input_size}
    modules: dict[str, Any] = {}
    if isinstance(x, pd.DataFrame):
        if "model_name" not in x.columns:
            raise ConfigError("a zoo model predicts named networks: the frame needs a model_name column "
                              "(e.g. tv:mobilenet_v3_large), or pass an nn.Module or a list of names")
        frame = x.copy()
        for k, v in knob_values.items():
            if k not in frame.columns:
                vals = _values(v, ZOO_DEFAULTS[k])
                frame = frame.loc[frame.index.repeat(len(vals))].copy()
                frame[k] = vals * (len(frame) // len(vals))
        check_zoo_knobs(frame)
        return frame, modules
    items = [x] if isinstance(x, str) or _is_module(x) else list(x) if isinstance(x, (list, tuple)) else None
    if not items or not all(isinstance(v, str) or _is_module(v) for v in items):
        raise ConfigError(f"a zoo model predicts an nn.Module, a list of model names or a frame with a model_name "
                          f"column; got {type(x).__name__}")
    names = []
    for v in items:
        if isinstance(v, str):
            names.append(v)
        else:
            name = module_name(v)
            if name.startswith("module:"):
                modules[name] = v
            names.append(name)
    grid = itertools.product(names, *(_values(knob_values[k], ZOO_DEFAULTS[k])
                                      for k in ("input_size", "batch_size", "precision")))
    frame = pd.DataFrame(list(grid), columns=["model_name", "input_size", "batch_size", "precision"])
    check_zoo_knobs(frame)
    return frame, modules


def refused_rows(out: pd.DataFrame, all_rows: pd.DataFrame, ok: np.ndarray, refused: np.ndarray) -> pd.DataFrame:
    """The scored rows ``out`` (those of ``all_rows`` where ``ok``) with the refused rows put back in
    ``all_rows``' order: their knobs and ``config_id``, NaN predictions, ``in_domain`` False and the
    tracer's reason in ``outside``."""
    full = pd.DataFrame(index=range(len(all_rows)), columns=out.columns)
    pos = np.flatnonzero(ok)
    for c in out.columns:
        col = pd.Series([np.nan] * len(all_rows), dtype=object)
        col.iloc[pos] = out[c].to_numpy(dtype=object)
        full[c] = col
    for c in all_rows.columns:
        if c in full.columns:
            full.loc[~ok, c] = all_rows.loc[~ok, c].to_numpy(dtype=object)
    full.loc[~ok, "in_domain"] = False
    full.loc[~ok, "outside"] = refused[~ok]
    for c in ("never_measured", "new_architecture", "unbounded", "other_device"):
        if c in full.columns:
            full.loc[~ok, c] = c == "new_architecture"
    return full.infer_objects()


class Predictor:
    """``cascade`` (a fitted CARB cascade) with :meth:`predict` on knobs. Every fitted attribute of the
    cascade (``targets_``, ``intervals_``, ``domain_``, ``test_mae_``, ``device_name_``, ...) reads through;
    ``cascade.predict(X)`` is the feature-level predict. ``uri``: where it was loaded from. The screening
    functions take either (:func:`carb.analysis.screening.as_cascade`)."""

    #: Read by :func:`carb.analysis.screening.as_cascade` (no import of this module there: no cycle).
    WRAPS_CASCADE = True

    def __init__(self, cascade: Any, uri: str = "", version: str = "") -> None:
        self.cascade = cascade
        self.uri = uri
        self.version = str(version or "")

    def __getattr__(self, name: str) -> Any:
        cascade = self.__dict__.get("cascade")
        if cascade is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(cascade, name)

    def __repr__(self) -> str:
        return (f"Predictor({self.uri or 'cascade'}: device {getattr(self.cascade, 'device_name_', '?')}, "
                f"targets {model_targets(self.cascade)})")

    def predict(self, knobs: Any, budget: Mapping[str, float] | None = None, coverage: float | None = None,
                features: bool = False, accuracy: str | None = None, *, batch_size: Any = None,
                precision: Any = None, input_size: Any = None, interval_scope: str = "later_session") -> pd.DataFrame:
        """Predict n configurations in one call.

        ``knobs``: a DataFrame with knob columns (``block``, ``depth``, ``width_mult``, ``input_size``,
        ``batch_size``, ``precision``, ``early_downsample``; optional ``stages``, ``inner_mult``; a knob
        left out takes :class:`~carb.design.arch.ArchConfig`'s default; other columns, e.g. ``top1``, pass
        through), or a list of ``ArchConfig`` / dicts of knobs. ``budget``: ``{target: limit}`` in the
        target's unit per batch (``latency_ms``, ``energy_J``, ``peak_memory_MB``). ``coverage``: of the
        intervals (default: the calibrated one, 0.9). ``interval_scope``: ``later_session`` (default: a CPU model's
        latency intervals include the measured drift of a device's speed between sessions) or ``this_session``
        (the training rows' own window; :func:`carb.analysis.screening.scoped_model`; ``attrs["interval_scope"]``).
        ``features``: keep the feature columns too.
        ``accuracy``: ``IMAGENET1K_V1`` / ``IMAGENET1K_V2`` adds ``top1``, ``top5`` and ``top1_model``
        (torchvision's published ImageNet accuracy, NaN for non-standard networks; :mod:`carb.data.accuracy`).

        Returns n rows in input order: the knobs and ``config_id``; ``pred_<target>`` and, for a calibrated
        model, ``lo_<target>`` / ``hi_<target>`` (target's unit, per batch); per image
        ``pred_energy_J_per_image`` / ``pred_latency_ms_per_image`` and the average power
        ``pred_avg_power_W`` where energy and latency are predicted (:func:`with_rates`); the domain flags ``in_domain``,
        ``outside`` (why not), ``never_measured`` (precision), ``new_architecture``, ``unbounded`` (some
        interval has no finite end at this coverage: ``interval_unbounded_<target>`` of
        :func:`carb.model.intervals.interval`, the flag screening reads); with a budget also ``p_within_<target>``,
        ``p_feasible``, ``margin_<target>``, ``feasible``, ``decision`` and ``decision_reason``
        (:mod:`carb.analysis.decisions`). ``attrs``: :meth:`provenance` (model URI, version, device,
        interval coverage) and ``origin``. Bad knobs raise :class:`carb.errors.ConfigError`.

        A model trained on zoo rows (``input_kind_ == "zoo"``) takes networks instead (one trained on a combined
        dataset, ``"mixed"``, either: networks or a knob frame): an ``nn.Module``, a
        list of zoo names (``tv:mobilenet_v3_large``, ``timm:ghostnet_100``) or a frame with a ``model_name``
        column, each at ``batch_size``, ``precision`` and ``input_size`` (a value or a list of values: every
        combination; a frame's own columns win; defaults 1, ``fp32``, 224). A network the tracer refuses
        keeps NaN predictions, ``in_domain`` False and the reason in ``outside``; a family never measured is
        outside (``family ... never measured``) and ``new_architecture``. (:func:`zoo_knobs`) Any ``accuracy``
        (e.g. ``"timm"``) adds timm's published top-1 of the same architecture (``top1``, ``top5``,
        ``top1_source``; :func:`carb.analysis.zoo_screen.zoo_top1`)."""
        from carb.design.zoo_inputs import zoo_features_frame

        model = self.cascade
        if getattr(type(model), "OWN_SCORING", False):   # ZooLatencyModel behind this interface (zoo_predictor)
            from carb.analysis.zoo_predict import predict_zoo_latency

            frame, modules = zoo_knobs(knobs, batch_size, precision, input_size)
            out = predict_zoo_latency(model, frame, modules, budget, coverage, features, accuracy)
            cov = float(coverage) if coverage is not None else float(model.interval_["coverage"])
            out.attrs.update({**self.provenance(coverage), "interval_coverage": cov,
                              "origin": f"ZooLatencyModel fitted on timm's published {model.device_name_} file"})
            return out
        kind = model_input_kind(model)   # "mixed" (a combined dataset's): names or knobs
        if kind == "mixed" and is_mixed_frame(knobs):   # rows of both kinds: each kind predicted, order kept
            return self._predict_mixed(knobs, budget=budget, coverage=coverage, features=features,
                                       accuracy=accuracy, batch_size=batch_size, precision=precision,
                                       input_size=input_size, interval_scope=interval_scope)
        model, scope_note = scoped_model(model, interval_scope)
        zoo = kind == "zoo" or (kind == "mixed" and is_zoo_input(knobs))
        if zoo:
            frame, modules = zoo_knobs(knobs, batch_size, precision, input_size)
            config_cols = [c for c in frame.columns if c in ZOO_CONFIG_COLUMNS]
            from carb.model.cascade_data import with_graph   # the graph the model was fitted on (timm --reparam)

            F = zoo_features_frame(with_graph(frame[config_cols].reset_index(drop=True),
                                              getattr(model, "zoo_reparam_", False)), modules)
            refused = F.pop("refused").to_numpy(dtype=object)
        else:
            if is_zoo_input(knobs) or any(v is not None for v in (batch_size, precision, input_size)):
                raise ConfigError(f"model {self.uri or 'cascade'} was trained on ResNet knobs: predict takes a "
                                  "knob frame (block, depth, width_mult, ...), not named networks; train one on a "
                                  "zoo dataset (carb-collect space=zoo) for those")
            frame = knobs if isinstance(knobs, pd.DataFrame) else None
            if frame is None:
                records = [k.to_dict() if isinstance(k, ArchConfig) else dict(k) for k in knobs]
                frame = pd.DataFrame.from_records(records)
            if not len(frame):   # no configuration: 0 rows back, with the columns of a prediction
                return self._empty(frame, budget, coverage, features, accuracy)
            config_cols = [c for c in frame.columns if c in CONFIG_COLUMNS]
            F = grid_features(frame[config_cols].reset_index(drop=True))
            refused = np.full(len(F), "", dtype=object)
        ok = refused == ""
        if zoo and len(ok) and not ok.any():   # nothing left to score: the reason(s), one line
            raise ConfigError(all_refused_line(list(F["model_name"].astype(str)), list(refused)))
        all_rows = F
        F = F[ok].reset_index(drop=True)
        F, _, _ = domain_filter(model, F, "flag")
        F["never_measured"] = unseen_mask(getattr(model, "domain_", None), F, "precision")
        F["new_architecture"] = new_architecture_mask(model, F)
        out = score(model, F, coverage=coverage)
        note = other_device(model)   # a CPU model used on another CPU: one line per Predictor, every row flagged
        out["other_device"] = note is not None
        if note and not self.__dict__.setdefault("_warned", False):
            import textwrap   # within 120 columns, like every line CARB prints

            print(textwrap.fill(f"carb: {note}", width=120, subsequent_indent="  ", break_long_words=False,
                                break_on_hyphens=False), file=sys.stderr)
            self._warned = True
        targets = model_targets(model)
        out = with_rates(out, targets)
        flags = [f"interval_unbounded_{t}" for t in targets if f"interval_unbounded_{t}" in out]
        out["unbounded"] = out[flags].to_numpy(dtype=bool).any(axis=1) if flags else False
        clean = check_budget(budget or {}, targets)
        if clean:
            out = decide(add_probabilities(model, out, clean), clean, getattr(model, "test_mae_", {}) or {})
        if not ok.all():   # refused networks: their rows back in place, NaN predictions, the reason as outside
            out = refused_rows(out, all_rows, ok, refused)
        if accuracy and zoo:   # timm's published top-1 of the same architecture (carb.analysis.zoo_screen)
            from carb.analysis.zoo_screen import zoo_top1

            out = zoo_top1(out)
        elif accuracy:
            out = join_top1(out, accuracy, field="accuracy")
        if not features:
            keep = ["config_id", *(c for c in (ZOO_CONFIG_COLUMNS if zoo else CONFIG_COLUMNS) if c in out)]
            keep += [c for c in out.columns if c.startswith(("pred_", "lo_", "hi_", "p_within_", "margin_"))]
            keep += [c for c in ("p_feasible", "feasible", "decision", "decision_reason", "in_domain", "outside",
                                 "never_measured", "new_architecture", "unbounded", "other_device", "top1", "top5",
                                 "top1_model", "top1_source") if c in out]
            out = out[list(dict.fromkeys(keep))]
        extra = frame.drop(columns=[c for c in frame.columns if c in config_cols or c in out])
        out = pd.concat([out.reset_index(drop=True), extra.reset_index(drop=True)], axis=1)
        out.index = frame.index
        out.attrs.update(self.provenance(coverage))
        out.attrs.update({"interval_scope": interval_scope if scope_note else "this_session",
                          "interval_scope_note": scope_note or "the intervals hold for the model's rows' session"})
        from carb.model.transfer import describe_origin

        out.attrs["origin"] = describe_origin(model) or f"trained on measured rows of {getattr(model, 'device_name_', '?')}"
        return out

    def _predict_mixed(self, frame: pd.DataFrame, **kw: Any) -> pd.DataFrame:
        """:meth:`predict` of a frame holding rows of both kinds (:func:`is_mixed_frame`; a combined model):
        the ResNet rows (without the zoo columns) and the zoo rows (without the ResNet identity columns)
        predicted apart, then put back in ``frame``'s order (n rows, ``frame``'s index; the columns of both
        answers, a column of one kind NaN on the other kind's rows). A row naming neither kind is a
        :class:`ConfigError` naming its rows."""
        kinds = row_kinds(frame)
        neither = np.flatnonzero(kinds == "")
        if len(neither):
            raise ConfigError(f"rows {', '.join(map(str, neither[:5].tolist()))}: name no network; a combined "
                              f"model's row needs {ZOO.marker} (a zoo network) or {RESNET.marker} (ResNet knobs)")
        pos = np.arange(len(frame))
        parts, order = [], []
        for k, drop in ((RESNET.name, [ZOO.marker, ZOO.unit]), (ZOO.name, list(RESNET.identity))):
            sel = kinds == k
            if not sel.any():
                continue
            sub = frame.loc[sel].drop(columns=[c for c in drop if c in frame.columns])
            parts.append(self.predict(sub.reset_index(drop=True), **kw))
            order.append(pos[sel])
        out = pd.concat(parts, ignore_index=True)
        out = out.iloc[np.argsort(np.concatenate(order), kind="stable")]
        out.index = frame.index
        out.attrs = dict(parts[0].attrs)
        return out

    def _empty(self, frame: pd.DataFrame, budget: Mapping[str, float] | None, coverage: float | None,
               features: bool, accuracy: str | None) -> pd.DataFrame:
        """The answer to 0 configurations (``frame`` has no row): 0 rows with the columns :meth:`predict`
        gives for one (those of ``ArchConfig("basic", 18)``, with the same arguments),
        then ``frame``'s other columns; the index is ``frame``'s (empty)."""
        one = self.predict([ArchConfig("basic", 18)], budget=budget, coverage=coverage, features=features, accuracy=accuracy)
        out = one.iloc[:0]
        extra = [c for c in frame.columns if c not in CONFIG_COLUMNS and c not in out]
        out = pd.concat([out, frame[extra].iloc[:0]], axis=1) if extra else out
        out.index = frame.index
        return out

    def provenance(self, coverage: float | None = None) -> dict[str, Any]:
        """What a prediction frame came from, for its ``attrs``: ``model_uri`` and ``model_version`` (as
        :func:`carb.load_model` resolved them; "" when not from a registry), ``device`` (the model's), and
        ``interval_coverage``: the nominal coverage of the ``lo_``/``hi_`` columns (``coverage`` as asked,
        else the calibrated one; None for a model without intervals)."""
        cal = getattr(self.cascade, "intervals_", None) or {}
        nominal = next((float(v["coverage"]) for v in cal.values() if isinstance(v, dict) and "coverage" in v), None)
        return {"model_uri": self.uri, "model_version": self.version,
                "device": str(getattr(self.cascade, "device_name_", "") or ""),
                "interval_coverage": (float(coverage) if coverage is not None and cal else nominal)}


def with_rates(out: pd.DataFrame, targets: Sequence[str]) -> pd.DataFrame:
    """``out`` (n rows with ``pred_<target>`` per batch and ``batch_size``) with the per-image predictions
    ``pred_energy_J_per_image`` (J/image) and ``pred_latency_ms_per_image`` (ms/image) of the predicted
    targets, and, where both energy and latency are predicted, the average power over a batch
    ``pred_avg_power_W`` = ``pred_energy_J`` / (``pred_latency_ms`` / 1000) (W)."""
    out = add_per_image(out, [f"{t}{PER_IMAGE}" for t in ("energy_J", "latency_ms") if t in targets], targets)
    if "energy_J" in targets and "latency_ms" in targets:
        e = out["pred_energy_J"].to_numpy(dtype=float)
        t_s = out["pred_latency_ms"].to_numpy(dtype=float) / 1e3
        with np.errstate(divide="ignore", invalid="ignore"):
            out = out.assign(pred_avg_power_W=np.where(t_s > 0, e / t_s, np.nan))
    return out


class ServedModel:
    """What the registry logs (:func:`carb.tracking.log_cascade`): a fitted cascade whose ``predict`` takes what
    :meth:`Predictor.predict` takes and returns its frame, so MLflow's own client
    (``mlflow.pyfunc.load_model(uri).predict(knobs)``) and ``mlflow models serve`` answer a knob frame (ResNet
    knobs, or ``model_name`` with ``input_size``/``batch_size``/``precision`` for a zoo model) with
    ``pred_``/``lo_``/``hi_`` columns and the domain flags. :func:`carb.tracking.load_cascade` unwraps it
    (``WRAPS_CASCADE``): CARB's own code gets the cascade."""

    WRAPS_CASCADE = True

    def __init__(self, cascade: Any, quiet: bool = False) -> None:
        self.cascade = cascade
        self.quiet = quiet

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without ``quiet``: that is for the process that logs it (a served copy warns as usual). A quiet
        model records the logging process's id, so the copy MLflow loads back in that process to check the
        input example (``log_model``) stays quiet too (carb-train / carb-calibrate of another CPU's model)."""
        import os

        return {"cascade": self.cascade, **({"quiet_pid": os.getpid()} if getattr(self, "quiet", False) else {})}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """The cascade; ``quiet`` only in the process that pickled a quiet model (:meth:`__getstate__`)."""
        import os

        self.cascade = state["cascade"]
        self.quiet = state.get("quiet_pid") == os.getpid()

    def predict(self, X: pd.DataFrame, params: Mapping[str, Any] | None = None) -> pd.DataFrame:
        """:meth:`Predictor.predict` of the rows ``X`` (a frame; budget and coverage from ``params``:
        ``{"budget": {target: limit}, "coverage": 0.9}``). ``quiet``: without the other-CPU warning line
        (``carb-train`` predicting its input example while it logs the model)."""
        p = dict(params or {})
        pr = Predictor(self.cascade)
        if getattr(self, "quiet", False):
            pr._warned = True
        return pr.predict(pd.DataFrame(X), budget=p.get("budget"), coverage=p.get("coverage"))


#: The served signature's column type of each knob type (:func:`carb.design.identity.knob_type`).
SERVED_TYPES = {"str": "string", "int": "long", "float": "double", "bool": "boolean"}


def served_inputs(cascade: Any) -> list[tuple[str, str, bool]] | None:
    """The input columns of the served model's signature, ``[(column, type, required)]`` (type ``string``,
    ``long``, ``double``, ``boolean`` or ``any``), for what :meth:`Predictor.predict` takes from a frame: a zoo
    model a ``model_name`` (required) and the run knobs (each optional: :data:`ZOO_DEFAULTS`); a combined
    model (``input_kind_ == "mixed"``) the zoo name and every ResNet identity column, all optional (a row
    names its network by one or the other), the numeric and boolean ResNet columns typed ``any`` (null on a
    zoo row: MLflow takes no null in a typed integer or boolean column), and the run knobs; a ResNet model
    its knob columns (:data:`CONFIG_COLUMNS`), ``block`` and ``depth`` required, the others optional (a knob
    left out takes :data:`RESNET_DEFAULTS`, as :func:`carb.load_model` does). None for an unknown kind: the
    signature MLflow infers from the knob example."""
    from carb.design.identity import RUN_KNOBS, knob_type

    kind = model_input_kind(cascade)
    run = [(c, SERVED_TYPES[knob_type(c)], False) for c in RUN_KNOBS]
    if kind == ZOO.name:
        return [(ZOO.marker, "string", True), *run]
    if kind == RESNET.name:
        return [(c, SERVED_TYPES[knob_type(c) or "int"], c not in RESNET_DEFAULTS)   # num_classes: an integer
                for c in CONFIG_COLUMNS]
    if kind != "mixed":
        return None
    resnet = [(c, "string" if knob_type(c) == "str" else "any", False) for c in RESNET.identity]
    return [(ZOO.marker, "string", False), *resnet, *run]


def knob_example(cascade: Any, rows: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The first ``n`` of ``rows`` (dataset rows) as the served model's input: the columns
    :meth:`Predictor.predict` reads (a zoo model's ``model_name`` and its knobs; a ResNet model's knobs; a
    combined model's first ``n`` rows of each kind, each kind's columns null on the other kind's rows)."""
    kind = model_input_kind(cascade)
    if kind == "mixed":
        kinds = row_kinds(rows)
        both = pd.concat([rows.loc[kinds == k].head(n) for k in (RESNET.name, ZOO.name)]).reset_index(drop=True)
        out = pd.DataFrame(index=both.index)
        for c, typ, _ in served_inputs(cascade) or []:
            if c not in both.columns:
                continue
            if typ == "long":
                out[c] = both[c].astype("int64")
            else:   # text, or a ResNet number / flag: the value itself, None on the other kind's rows
                vals = both[c].astype(object)
                out[c] = [None if pd.isna(v) else (str(v) if typ == "string" else v) for v in vals]
        return out
    zoo = kind == "zoo"
    cols = (["model_name", "input_size", "batch_size", "precision"] if zoo
            else [c for c in CONFIG_COLUMNS if c in rows.columns and c != "num_classes"])
    out = rows[cols].head(n).reset_index(drop=True)
    for c in out.columns:   # plain dtypes for the logged signature (no pandas extension types)
        if isinstance(out[c].dtype, pd.StringDtype) or out[c].dtype == object:
            out[c] = out[c].astype(str)
        elif pd.api.types.is_integer_dtype(out[c].dtype):
            out[c] = out[c].astype("int64")
        elif pd.api.types.is_bool_dtype(out[c].dtype):
            out[c] = out[c].astype(bool)
    return out
