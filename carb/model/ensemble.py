"""Per-target specialist ensemble: XGBoost + LightGBM + ExtraTrees blended with weights calibrated on a
validation split (the paper's Section 5.3).

:class:`BlendedRegressor` is a plain scikit-learn regressor on a numeric matrix (NaN allowed). Every
hyperparameter of the three specialists comes in as a dict (``xgb``, ``lgbm``, ``et``), straight from
``conf/model/*.yaml``, so a tuned preset only has to supply other dicts.

Blend weights: non-negative and summing to 1, chosen to minimise the squared validation error of the
blended prediction in the fitting space (log space when the target is fitted in log space), solved with
``scipy.optimize.minimize`` (SLSQP, from equal weights; bounds ``[0, 1]``, equality ``sum w = 1``).

Log space: ``log_target="auto"`` decides per fit by measurement. A probe LightGBM (the ``lgbm`` params
with ``n_estimators`` capped at ``probe_estimators``) is fitted on the raw target and on ``log(y)``; the
space with the lower validation MAE in the target's own units wins. The choice and the two probe MAEs
are kept in ``log_target_`` and ``probe_val_mae_``.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.ensemble import ExtraTreesRegressor
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from carb.compute import estimator_threads

#: Specialist names in blend order (weights are reported in this order).
MEMBERS: tuple[str, ...] = ("xgb", "lgbm", "et")
#: Below this many rows no internal validation split is made (equal weights, raw space).
MIN_ROWS_FOR_SPLIT = 20


def make_member(name: str, params: Mapping[str, Any] | None, n_jobs: int, random_state: int):
    """One unfitted specialist with ``params`` (threads and seed set here, not in ``params``)."""
    p = dict(params or {})
    if name == "xgb":
        from xgboost import XGBRegressor

        p.setdefault("tree_method", "hist")
        return XGBRegressor(**p, n_jobs=n_jobs, random_state=random_state)
    if name == "lgbm":
        from lightgbm import LGBMRegressor

        p.setdefault("verbose", -1)
        return LGBMRegressor(**p, n_jobs=n_jobs, random_state=random_state)
    if name == "et":
        return LeanExtraTrees(**p, n_jobs=n_jobs, random_state=random_state)
    raise ValueError(f"unknown specialist {name!r}; allowed: {list(MEMBERS)}")


class LeanExtraTrees(ExtraTreesRegressor):
    """:class:`sklearn.ensemble.ExtraTreesRegressor` whose trees are made without scikit-learn's per-tree
    ``clone`` and parameter introspection (``inspect.signature`` five times a tree, about 0.2 ms: 15 % of a
    30-tree fit on 700 rows, 0.8 s of CPU in one ``carb-train``). Each tree gets the same parameters and the same
    seed from the forest's random state, in the same order, so the forest is the same, tree for tree
    (``tests/test_ensemble.py`` compares the predictions bit for bit); where a scikit-learn version makes trees
    another way (a tree with other seeded parameters), it falls back to scikit-learn's own."""

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> LeanExtraTrees:
        self._tree_params = None
        try:
            return super().fit(X, y, sample_weight=sample_weight)
        finally:
            self.__dict__.pop("_tree_params", None)

    def _make_estimator(self, append: bool = True, random_state: Any = None) -> Any:
        params = self.__dict__.get("_tree_params")
        if params is None:   # one real clone per fit: the tree's parameters, and whether it has one seed
            proto = clone(self.estimator_)
            proto.set_params(**{p: getattr(self, p) for p in self.estimator_params})
            seeded = [k for k in proto.get_params(deep=True) if k == "random_state" or k.endswith("__random_state")]
            params = self._tree_params = proto.get_params(deep=False) if seeded == ["random_state"] else False
        if params is False:
            return super()._make_estimator(append=append, random_state=random_state)
        tree = type(self.estimator_)(**params)
        if random_state is not None:   # what sklearn.ensemble._base._set_random_states draws for it
            tree.random_state = check_random_state(random_state).randint(np.iinfo(np.int32).max)
        if append:
            self.estimators_.append(tree)
        return tree


_THREADS = [1]   # threads of side_by_side (member_threads sets it for a block)
_POOL: list[Any] = [None]   # the ThreadPoolExecutor of the innermost member_threads block, made on first use


@contextlib.contextmanager
def member_threads(n: int) -> Iterator[None]:
    """Within the block, :func:`side_by_side` (a blend's members) runs on up
    to ``n`` threads: each model predicts on one thread as before, several at once (the libraries release
    the GIL while they predict), results gathered in order, so the numbers are the same. Callers take ``n``
    from :mod:`carb.compute` (screening: the free cores, in its own process only; chunk workers are the
    parallelism themselves and run at 1). The block's threads are started once, at the first
    :func:`side_by_side`, and end with the block (a two-stage screening calls it five times, a blend per
    stage: a pool each time cost 0.6-0.8 ms of start and join). :func:`hist_predict` takes the same count.
    """
    old, _THREADS[0] = _THREADS[0], max(1, int(n))
    old_pool, _POOL[0] = _POOL[0], None
    try:
        yield
    finally:
        made, _POOL[0] = _POOL[0], old_pool
        _THREADS[0] = old
        if made is not None:
            made.shutdown(wait=True)


def side_by_side(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``[fn(x) for x in items]``, on up to :func:`member_threads` threads where that allows more than one."""
    n = min(_THREADS[0], len(items))
    if n <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    if _POOL[0] is None:   # a pool starts a thread per item up to its size, so fewer items use fewer threads
        _POOL[0] = ThreadPoolExecutor(max_workers=_THREADS[0], thread_name_prefix="carb-member")
    return list(_POOL[0].map(fn, items))


def member_predict(est: Any, X: np.ndarray) -> np.ndarray:
    """``est.predict(X)``, shape (n,), the same numbers; a single-output scikit-learn forest that predicts on
    one thread (``n_jobs`` 1 or None) is evaluated by :func:`forest_predict` (one input check for all trees
    instead of one per tree, no joblib round trip per tree)."""
    from sklearn.ensemble import ExtraTreesRegressor, GradientBoostingRegressor, RandomForestRegressor

    if isinstance(est, (ExtraTreesRegressor, RandomForestRegressor)) and getattr(est, "n_outputs_", 1) == 1 \
            and est.n_jobs in (None, 1):
        return forest_predict(est, X)
    if type(est) is GradientBoostingRegressor:
        out = boosting_predict(est, X)
        if out is not None:
            return out
    return est.predict(X)


#: Fewest rows a histogram-boosting corrector predicts on several OpenMP threads (below, the team's start
#: per tree costs more than the rows: 100 trees x a few microseconds).
HIST_THREAD_ROWS = 1000


def hist_predict(est: Any, X: np.ndarray) -> np.ndarray:
    """``est.predict(X)`` of a fitted ``HistGradientBoostingRegressor``, shape (n,), on :func:`member_threads`
    OpenMP threads where ``X`` has at least :data:`HIST_THREAD_ROWS` rows (scikit-learn's own ``_raw_predict``
    with its ``n_threads``: each row's trees are summed in the same order, so the same numbers; a regime
    corrector on 3,072 knot rows: 5.4 ms on one thread, 4.2 on two); else, or where scikit-learn has no such
    argument, ``est.predict``."""
    n = _THREADS[0] if len(X) >= HIST_THREAD_ROWS else 1
    if n > 1 and _takes_threads(type(est)):
        return est._loss.link.inverse(est._raw_predict(X, n_threads=n).ravel())
    return est.predict(X)


@functools.lru_cache(maxsize=None)
def _takes_threads(cls: type) -> bool:
    """Whether ``cls`` is scikit-learn's histogram-boosting regressor with ``_raw_predict(X, n_threads)``."""
    import inspect

    from sklearn.ensemble import HistGradientBoostingRegressor

    raw = getattr(cls, "_raw_predict", None)
    return cls is HistGradientBoostingRegressor and raw is not None and "n_threads" in inspect.signature(raw).parameters


def boosting_predict(est: Any, X: np.ndarray) -> np.ndarray | None:
    """What ``GradientBoostingRegressor.predict`` computes for a numeric matrix ``X`` (n, k), shape (n,), without
    its input check (0.16 ms a call, six times its own work on a few hundred rows): ``X`` as C-ordered float32
    as the check makes it, the mean the trees start from, then scikit-learn's own ``predict_stages``, the same
    numbers. None (use ``predict``, which checks and raises) for other inputs: not finite, the wrong width, a
    start other than the training mean, or a scikit-learn without that function."""
    try:
        from sklearn.dummy import DummyRegressor
        from sklearn.ensemble._gradient_boosting import predict_stages
    except ImportError:   # pragma: no cover - a scikit-learn that moved it
        return None
    init = getattr(est, "init_", None)
    X32 = np.ascontiguousarray(X, dtype=np.float32) if isinstance(X, np.ndarray) else None
    if (X32 is None or X32.ndim != 2 or X32.shape[1] != getattr(est, "n_features_in_", -1)
            or type(init) is not DummyRegressor or init.strategy != "mean" or np.size(init.constant_) != 1
            or est.estimators_.shape[1] != 1 or not np.isfinite(X32).all()):
        return None
    raw = np.full((X32.shape[0], 1), float(np.ravel(init.constant_)[0]))
    predict_stages(est.estimators_, X32, est.learning_rate, raw)
    return raw.ravel()


def forest_predict(forest: Any, X: np.ndarray) -> np.ndarray:
    """What ``ForestRegressor.predict`` computes with one thread, shape (n,): ``X`` checked once (float32,
    NaN as the forest allows), each tree's ``tree_.predict`` added in the forest's order into float64 zeros,
    then divided by the number of trees; the same operations in the same order, so the same numbers."""
    X32 = forest._validate_X_predict(X)
    out = np.zeros(X32.shape[0], dtype=np.float64)
    for tree in forest.estimators_:
        out += tree.tree_.predict(X32)[:, 0]
    out /= len(forest.estimators_)
    return out


def simplex_weights(preds: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Weights ``w >= 0, sum(w) = 1`` minimising ``mean((preds @ w - y)**2)``.

    ``preds``: (n_rows, n_members); ``y``: (n_rows,). SLSQP from equal weights; falls back to equal
    weights if the solver fails."""
    from scipy.optimize import minimize

    k = preds.shape[1]
    w0 = np.full(k, 1.0 / k)
    if k == 1:
        return w0
    scale = float(np.var(y)) or 1.0
    r = preds - y[:, None]

    def fun(w):
        e = r @ w
        return float(e @ e) / (len(y) * scale), (2.0 / (len(y) * scale)) * (r.T @ e)

    res = minimize(fun, w0, jac=True, method="SLSQP", bounds=[(0.0, 1.0)] * k,
                   constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0,
                                 "jac": lambda w: np.ones_like(w)}],
                   options={"maxiter": 200, "ftol": 1e-12})
    w = np.clip(res.x if res.success else w0, 0.0, None)
    return w / w.sum() if w.sum() > 0 else w0


class BlendedRegressor(RegressorMixin, BaseEstimator):
    """Blend of XGBoost, LightGBM and ExtraTrees for one target.

    Parameters
    ----------
    xgb, lgbm, et : dict or None
        Constructor params of ``xgboost.XGBRegressor``, ``lightgbm.LGBMRegressor`` and
        ``sklearn.ensemble.ExtraTreesRegressor`` (without ``n_jobs``/``random_state``).
    members : sequence of str
        Which specialists to blend (subset of :data:`MEMBERS`).
    weights : sequence of float or None
        Fixed blend weights (normalised to sum 1); None calibrates them on validation.
    log_target : "auto", True or False
        Fit ``log(y)`` (predictions are ``exp`` of the blend); "auto" measures (module docstring).
    probe_estimators : int
        Trees of the LightGBM probe used by ``log_target="auto"``.
    val_fraction : float
        Share of rows held out for calibration when ``fit`` gets no ``X_val`` and something needs
        calibrating (weights None or log "auto"). The specialists are then fitted on the rest.
    n_jobs : int or None
        Threads per specialist; None = every available core.
    random_state : int
        Seed of the specialists and of the internal split.

    Fitted attributes: ``members_`` (dict name -> fitted specialist), ``weights_`` (array, order of
    ``members``), ``log_target_`` (bool), ``probe_val_mae_`` (dict raw/log, NaN if not probed),
    ``val_mae_`` (validation MAE of the blend, target units, NaN without validation),
    ``member_val_mae_`` (dict), ``n_features_in_`` (and ``feature_names_in_`` for DataFrame input).
    """

    def __init__(self, xgb: Mapping[str, Any] | None = None, lgbm: Mapping[str, Any] | None = None,
                 et: Mapping[str, Any] | None = None, members: Sequence[str] = MEMBERS,
                 weights: Sequence[float] | None = None, log_target: str | bool = "auto",
                 probe_estimators: int = 200, val_fraction: float = 0.2, n_jobs: int | None = None,
                 random_state: int = 0):
        self.xgb = xgb
        self.lgbm = lgbm
        self.et = et
        self.members = members
        self.weights = weights
        self.log_target = log_target
        self.probe_estimators = probe_estimators
        self.val_fraction = val_fraction
        self.n_jobs = n_jobs
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    # ------------------------------------------------------------------ helpers
    def _params(self, name: str) -> dict[str, Any]:
        return dict({"xgb": self.xgb, "lgbm": self.lgbm, "et": self.et}[name] or {})

    def _check_members(self) -> list[str]:
        names = list(self.members)
        bad = [m for m in names if m not in MEMBERS]
        if not names or bad:
            raise ValueError(f"members must be a non-empty subset of {list(MEMBERS)}, got {names}")
        if self.weights is not None and len(self.weights) != len(names):
            raise ValueError(f"weights has {len(self.weights)} entries for {len(names)} members {names}")
        if self.log_target not in ("auto", True, False):
            raise ValueError(f"log_target allows 'auto', True, False; got {self.log_target!r}")
        return names

    def _probe(self, X, y, Xv, yv, n_jobs: int) -> tuple[bool, dict[str, float]]:
        p = self._params("lgbm")
        p["n_estimators"] = int(min(self.probe_estimators, p.get("n_estimators", 100)))
        mae = {}
        for space, fwd, inv in (("raw", lambda v: v, lambda v: v), ("log", np.log, np.exp)):
            m = make_member("lgbm", p, n_jobs, self.random_state).fit(X, fwd(y))
            mae[space] = float(np.mean(np.abs(inv(m.predict(Xv)) - yv)))
        return bool(mae["log"] < mae["raw"]), mae

    # ------------------------------------------------------------------ API
    def fit(self, X, y, X_val=None, y_val=None) -> BlendedRegressor:
        """Fit the specialists on (X, y); calibrate weights (and the log choice) on (X_val, y_val),
        or on an internal ``val_fraction`` split when no validation set is given. X: (n, p), y: (n,)."""
        names = self._check_members()
        X, y = validate_data(self, X, y, ensure_all_finite="allow-nan", y_numeric=True)
        y = np.asarray(y, dtype=float)
        if not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or infinite values; drop unmeasured rows before fitting")
        n_jobs = estimator_threads(len(y), self.n_jobs)   # carb.compute: cores, load, data size
        need_val = self.weights is None or self.log_target == "auto"
        if X_val is not None and y_val is not None:
            Xv = validate_data(self, X_val, ensure_all_finite="allow-nan", reset=False)
            yv = np.asarray(y_val, dtype=float).ravel()
            Xf, yf = X, y
        elif need_val and len(y) >= MIN_ROWS_FOR_SPLIT:
            Xf, Xv, yf, yv = train_test_split(X, y, test_size=self.val_fraction,
                                              random_state=self.random_state)
        else:
            Xf, yf, Xv, yv = X, y, None, None
        positive = bool(np.all(yf > 0) and (yv is None or np.all(yv > 0)))
        self.probe_val_mae_ = {"raw": float("nan"), "log": float("nan")}
        if self.log_target == "auto":
            if Xv is not None and positive and len(yv):
                self.log_target_, self.probe_val_mae_ = self._probe(Xf, yf, Xv, yv, n_jobs)
            else:
                self.log_target_ = False
        else:
            if self.log_target and not positive:
                raise ValueError("log_target=True needs a strictly positive target")
            self.log_target_ = bool(self.log_target)
        fwd = np.log if self.log_target_ else (lambda v: v)
        inv = np.exp if self.log_target_ else (lambda v: v)
        self.members_ = {m: make_member(m, self._params(m), n_jobs, self.random_state).fit(Xf, fwd(yf))
                         for m in names}
        self.member_val_mae_ = {m: float("nan") for m in names}
        if Xv is not None and len(yv):
            P = np.column_stack([self.members_[m].predict(Xv) for m in names])
            self.member_val_mae_ = {m: float(np.mean(np.abs(inv(P[:, i]) - yv)))
                                    for i, m in enumerate(names)}
        if self.weights is not None:
            w = np.clip(np.asarray(self.weights, dtype=float), 0, None)
            if w.sum() <= 0:
                raise ValueError(f"weights must have a positive sum, got {list(self.weights)}")
            self.weights_ = w / w.sum()
        elif Xv is not None and len(yv) >= 2:
            self.weights_ = simplex_weights(P, fwd(yv))
        else:
            self.weights_ = np.full(len(names), 1.0 / len(names))
        self.val_mae_ = (float(np.mean(np.abs(inv(P @ self.weights_) - yv)))
                         if Xv is not None and len(yv) else float("nan"))
        return self

    def _blend(self, X) -> np.ndarray:
        """The blend in the fitting space, shape (n,): the members' predictions times ``weights_``. A member
        of weight 0 is not evaluated (its column is 0: the same product, since trees predict finite values);
        inside :func:`member_threads` the others predict side by side."""
        live = [m for m, w in zip(self.members_, self.weights_) if w != 0]
        got = dict(zip(live, side_by_side(lambda m: member_predict(self.members_[m], X), live)))
        return np.column_stack([got[m] if m in got else np.zeros(len(X)) for m in self.members_]) @ self.weights_

    def predict(self, X) -> np.ndarray:
        """Blended prediction in the target's units, shape (n,)."""
        check_is_fitted(self, "members_")
        X = validate_data(self, X, ensure_all_finite="allow-nan", reset=False)
        z = self._blend(X)
        return np.exp(z) if self.log_target_ else z

    def predict_matrix(self, X: np.ndarray) -> np.ndarray:
        """:meth:`predict` of a float matrix (n, ``n_features_in_``) in the fitted columns' order, as a cascade
        stage selects it from its design rows (:func:`carb.model.correctors._design`): the same numbers without
        scikit-learn's input check (0.07 ms a call); infinity is refused as that check refuses it."""
        check_is_fitted(self, "members_")
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[-1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")
        if np.isinf(X).any():
            raise ValueError("Input X contains infinity or a value too large for dtype('float64').")
        z = self._blend(X)
        return np.exp(z) if self.log_target_ else z

    def weights_by_member(self) -> dict[str, float]:
        """Fitted blend weights as ``{member: weight}``."""
        check_is_fitted(self, "weights_")
        return {m: float(w) for m, w in zip(self.members_, self.weights_)}

    def importances(self, kind: str = "split"):
        """LightGBM feature importances (``split`` counts or ``gain``) as a Series sorted descending,
        indexed by feature name (``x<i>`` for array input). Needs the ``lgbm`` member."""
        import pandas as pd

        check_is_fitted(self, "members_")
        if "lgbm" not in self.members_:
            raise ValueError("importances need the 'lgbm' member")
        names = list(getattr(self, "feature_names_in_", [f"x{i}" for i in range(self.n_features_in_)]))
        vals = self.members_["lgbm"].booster_.feature_importance(importance_type=kind)
        return pd.Series(vals, index=names, dtype=float).sort_values(ascending=False, kind="stable")
