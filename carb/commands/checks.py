"""One validation layer for the composed configs: every value a command reads is checked before any
work starts, and a bad one is a one-line :class:`~carb.errors.ConfigError` naming the key and what is
allowed (exit code 2 through :func:`carb.commands.cli.hydra_command`).

Rules are declared per command as ``(dotted key, rule)`` pairs (:data:`RULES`); a rule is a small
function ``rule(key, value)`` that raises. Keys absent from a config are skipped (a rule does not
invent settings). :func:`check_config` runs them (with ``model=auto`` also on ``model.large``): ``run_train``, ``run_collect``, ``run_tune`` and
``run_screen`` call it first.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from carb.errors import ConfigError

Rule = Callable[[str, Any], None]
_MISSING = object()


def integer(low: int | None = None, high: int | None = None, optional: bool = False) -> Rule:
    """An integer in ``[low, high]`` (bools refused; ``null`` allowed with ``optional``)."""
    def rule(key: str, v: Any) -> None:
        if v is None and optional:
            return
        ok = isinstance(v, int) and not isinstance(v, bool)
        if not ok or (low is not None and v < low) or (high is not None and v > high):
            span = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise ConfigError(f"{key}: must be {'null or ' if optional else ''}an integer {span}, got {v!r}")
    return rule


def number(low: float | None = None, high: float | None = None, positive: bool = False,
           optional: bool = False) -> Rule:
    """A finite number (``positive``: > 0) in ``[low, high]``; ``null`` allowed with ``optional``."""
    def rule(key: str, v: Any) -> None:
        if v is None and optional:
            return
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
        if ok and positive and not float(v) > 0:
            ok = False
        if ok and ((low is not None and float(v) < low) or (high is not None and float(v) > high)):
            ok = False
        if not ok:
            what = "a positive number" if positive else "a number"
            rng = "" if low is None and high is None else f" in [{low}, {high}]"
            raise ConfigError(f"{key}: must be {'null or ' if optional else ''}{what}{rng}, got {v!r}")
    return rule


def env_integer(low: int) -> Rule:
    """null or an integer >= ``low``, also as the text an environment variable gives (``oc.env``)."""
    def rule(key: str, v: Any) -> None:
        if v is None or (isinstance(v, str) and v.strip().lower() in ("", "null", "none")):
            return
        try:
            ok = not isinstance(v, bool) and int(str(v).strip()) >= low
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"{key}: must be null or an integer >= {low} (e.g. CARB_N_JOBS=2), got {v!r}")
    return rule


def boolean() -> Rule:
    """``true`` or ``false``."""
    def rule(key: str, v: Any) -> None:
        if not isinstance(v, bool):
            raise ConfigError(f"{key}: must be true or false, got {v!r}")
    return rule


def one_of(*allowed: Any) -> Rule:
    """One of ``allowed``."""
    def rule(key: str, v: Any) -> None:
        if v not in allowed:
            raise ConfigError(f"{key}: {v!r} is not allowed; allowed: {list(allowed)}")
    return rule


def subset_of(*allowed: str, optional: bool = False) -> Rule:
    """A non-empty list whose items are among ``allowed`` (``null`` allowed with ``optional``)."""
    def rule(key: str, v: Any) -> None:
        if v is None and optional:
            return
        items = list(v) if isinstance(v, (list, tuple)) else None
        if not items or any(i not in allowed for i in items):
            bad = [i for i in (items or [v]) if i not in allowed]
            raise ConfigError(f"{key}: {bad or v!r} not allowed; give a non-empty list of {list(allowed)}")
    return rule


def log_target() -> Rule:
    """``auto``, true, false, or a mapping target -> one of those."""
    base = one_of("auto", True, False)

    def rule(key: str, v: Any) -> None:
        if isinstance(v, dict):
            for t, x in v.items():
                base(f"{key}.{t}", x)
        else:
            base(key, v)
    return rule


_MEMBERS = ("xgb", "lgbm", "et")
_TARGETS = ("peak_memory_MB", "energy_J", "latency_ms")
_MODEL = [("split.seed", integer(0)), ("model.members", subset_of(*_MEMBERS)), ("model.log_target", log_target()),
          ("model.oof_folds", integer(2)), ("model.probe_estimators", integer(1)),
          ("model.val_fraction", number(0.01, 0.9)), ("model.physics", boolean()), ("model.telemetry", one_of("model", "medians")), ("model.power_cap", boolean()),
          ("model.prior.large_alloc_MB", number(positive=True, optional=True)), ("model.prior.channel_block", integer(1)),
          ("model.prior.cpu_dispatch", boolean()), ("model.prior.device_probe", boolean()),
          ("model.prior.tensor_core_speedup", number(positive=True, optional=True)),
          ("model.prior.overlap_k", number(1.0, optional=True)), ("model.prior.static_power", boolean()),
          ("model.threshold_rows", integer(1)), ("model.n_jobs", env_integer(-1)),
          *((f"model.specialists.{m}.n_estimators", integer(1)) for m in _MEMBERS),
          ("model.specialists.xgb.max_depth", integer(1)), ("model.specialists.xgb.learning_rate", number(positive=True)),
          ("model.specialists.lgbm.learning_rate", number(positive=True)),
          ("model.specialists.lgbm.num_leaves", integer(2)), ("model.specialists.et.min_samples_leaf", integer(1))]
_PROGRESS = [("progress.enabled", boolean()), ("progress.min_interval_s", number(0.0))]
RULES: dict[str, list[tuple[str, Rule]]] = {
    "train": [*_MODEL, *_PROGRESS, ("register", one_of("auto", True, False)), ("print_table", boolean()),
              ("evaluate.lobo.enabled", boolean()), ("evaluate.lobo.max_batch", integer(1)),
              ("evaluate.extrapolation.enabled", boolean()), ("evaluate.extrapolation.train_share", number(0.05, 0.95)),
              ("evaluate.extrapolation.min_rows", integer(2)), ("evaluate.sanity.enabled", boolean()),
              ("evaluate.budget.target", one_of(*_TARGETS)), ("evaluate.budget.value", number(positive=True, optional=True)),
              ("evaluate.importances_top", integer(1)), ("evaluate.figures", boolean()),
              ("evaluate.interval_coverage", number(0.01, 0.99)),
              ("evaluate.architecture_intervals.enabled", boolean()),
              ("evaluate.architecture_intervals.folds", integer(2))],
    "tune": [*_MODEL, *_PROGRESS, ("tune.n_trials", integer(1)), ("tune.blend_trials", integer(0)), ("tune.worker", integer(0)),
             ("tune.seed", integer(0)), ("tune.timeout_s", number(positive=True, optional=True)),
             ("tune.metric", one_of("mae", "rmse", "mape")), ("tune.members", subset_of(*_MEMBERS)),
             ("tune.targets", subset_of(*_TARGETS, optional=True)), ("tune.n_startup_trials", integer(0)),
             ("tune.log_trials", boolean())],
    "collect": [("seed", integer(0)), ("limit", integer(1, optional=True)),
                ("max_minutes", number(positive=True, optional=True)), *_PROGRESS,
                ("shard.index", integer(0)), ("shard.count", integer(1)), ("retry", one_of("none", "errors")),
                ("resume.mix_protocols", boolean()), ("device.index", integer(0))],
    "calibrate": [*_PROGRESS, ("k", integer(1)), ("coverage", number(0.01, 0.99)), ("register", boolean()),
                  ("transfer.affine_min_k", integer(2)), ("transfer.residual_min_k", integer(3)),
                  ("transfer.ridge_alpha", number(positive=True)), ("transfer.slope_min", number(positive=True)),
                  ("transfer.slope_max", number(positive=True)), ("transfer.precision_shrink", number(0.0))],
    "probe": [*_PROGRESS, ("n", integer(1)), ("seed", integer(0)), ("max_MMAC", number(positive=True)),
              ("repeats", integer(1)), ("min_window_s", number(0.0)), ("precisions", subset_of("fp32", "bf16", "fp16", optional=True))],
    "screen": [*_PROGRESS, ("screen.top_k", integer(1)), ("screen.shortlist_size", integer(1)),
               ("screen.outside", one_of("flag", "drop", "only")), ("screen.interval_coverage", number(0.01, 0.99)),
               *((f"screen.budget.{t}", number(positive=True, optional=True)) for t in _TARGETS)],
}


def _select(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        try:
            if isinstance(node, dict) or hasattr(node, "keys"):
                if part not in node:
                    return _MISSING
                node = node[part]
            else:
                return _MISSING
        except Exception:  # noqa: BLE001 - an unresolvable interpolation is reported by the command itself
            return _MISSING
    return node


def _plain(cfg: Any) -> Any:
    """``cfg`` as plain containers (interpolations resolved where they resolve)."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(cfg):
            try:
                return OmegaConf.to_container(cfg, resolve=True)
            except Exception:  # noqa: BLE001 - an interpolation error is the command's to report
                return OmegaConf.to_container(cfg, resolve=False)
    except ImportError:
        pass
    return cfg


def check_config(command: str, cfg: Any, rules: Iterable[tuple[str, Rule]] | None = None) -> None:
    """Run the rules of ``command`` (or ``rules``) on ``cfg`` (a DictConfig or plain dict). Raises the
    first :class:`ConfigError`. With ``model=auto`` the model rules also apply to ``model.large``."""
    plain = _plain(cfg)
    todo = list(RULES.get(command, []) if rules is None else rules)
    model = plain.get("model") if isinstance(plain, dict) else None
    if isinstance(model, dict) and model.get("name") == "auto":
        todo += [(k.replace("model.", "model.large.", 1), r) for k, r in _MODEL if k.startswith("model.")]
    for key, rule in todo:
        v = _select(plain, key)
        if v is not _MISSING:
            rule(key, v)
