"""A zoo network as the model's input: a knob frame of named networks (or ``nn.Module`` objects) featurized
from their layer tables (:func:`zoo_features_frame`), and the zoo name of a module (:func:`module_name`).
Apart from :mod:`carb.design.zoo_features` so that it may use :mod:`carb.design.zoo_space` (which reads the
features) without an import cycle.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from carb.design.zoo_features import (
    ZOO_KIND_FEATURES,
    ZOO_STATIC,
    ZOO_WEIGHT_FEATURES,
    kinds_of,
    module_summary,
    static_of,
    weights_of,
    zoo_summary,
)


def module_name(module: Any) -> str:
    """The zoo name of an ``nn.Module``: ``tv:<builder>`` when it is a torchvision classifier that one
    builder makes (same class, same parameter count: the same architecture), else ``module:<Class>``."""
    from carb.design.zoo import build_model, import_torchvision

    cls = type(module).__name__
    n_params = sum(int(p.numel()) for p in module.parameters())
    tv = import_torchvision()
    key = cls.lower().replace("_", "")
    for name in tv.models.list_models(module=tv.models):
        if not name.replace("_", "").startswith(key[: max(3, len(key) - 2)]):
            continue
        try:
            cand = build_model(f"tv:{name}", device="meta")
        except Exception:   # noqa: BLE001 - a builder that cannot run here is not this module
            continue
        if type(cand).__name__ == cls and sum(int(p.numel()) for p in cand.parameters()) == n_params:
            return f"tv:{name}"
    return f"module:{cls}"


def zoo_features_frame(knobs: Any, modules: Mapping[str, Any] | None = None) -> Any:
    """A zoo knob frame (``model_name``, ``input_size``, ``batch_size``, ``precision``; ``family`` optional)
    with ``family``, ``config_id``, :data:`ZOO_STATIC` and :data:`ZOO_KIND_FEATURES` added (whole batch; and the
    batch-independent :data:`ZOO_WEIGHT_FEATURES` the latency prior reads):
    what the model reads of a network nobody measured. Rows the tracer refuses keep NaN features and get
    ``refused`` (the one-line reason); the others ``""``. Shape (n, k), index of ``knobs``. A ``reparam``
    column (:data:`carb.design.zoo_features.REPARAM`) traces a row's network on its folded inference graph
    (kept in the output). ``modules``:
    ``{model_name: nn.Module}`` for rows naming a module (``module:<Class>``) rather than a zoo name."""
    import numpy as np
    import pandas as pd

    from carb.design.trace_progress import tracing
    from carb.design.zoo import family_of
    from carb.errors import ZooError

    out = knobs.copy()
    if "precision" not in out.columns:
        out["precision"] = "fp32"
    refused = np.full(len(out), "", dtype=object)
    fams = []
    for i, m in enumerate(out["model_name"].astype(str)):
        try:
            fams.append(family_of(m.split(":", 1)[1] if m.startswith("module:") else m))
        except ZooError as e:
            fams.append("")
            refused[i] = str(e)
    out["family"] = fams
    cols = {c: np.full(len(out), np.nan) for c in (*ZOO_STATIC, *ZOO_KIND_FEATURES, *ZOO_WEIGHT_FEATURES)}
    sizes = pd.to_numeric(out["input_size"], errors="coerce").to_numpy(float)
    pairs = [(m, int(s)) for m, s, bad in zip(out["model_name"].astype(str), sizes, refused)
             if not bad and not (modules and m in modules) and np.isfinite(s)]
    with tracing(pairs) as step:   # count and ETA on a cold trace cache
        ids = _fill(out, refused, cols, modules, step)
    out["config_id"] = ids
    out = pd.concat([out, pd.DataFrame(cols, index=out.index)], axis=1)
    out["refused"] = refused
    return out


def _fill(out: Any, refused: Any, cols: dict[str, Any], modules: Mapping[str, Any] | None,
          step: Any) -> list[str]:
    """:func:`zoo_features_frame`'s per-row part: each row's ``config_id`` (returned, n strings) and, in place,
    its features in ``cols`` (``{column: (n,) float array}``) or its reason in ``refused`` ((n,) object array);
    ``step(name, size)`` called before each zoo network is summarized (:func:`carb.design.trace_progress.tracing`)."""
    from carb.design.zoo_features import reparam_flags
    from carb.design.zoo_space import ZooConfig
    from carb.errors import ConfigError, ZooError

    ids = []
    folded = reparam_flags(out)
    for i, (m, s, b, p) in enumerate(zip(out["model_name"].astype(str), out["input_size"], out["batch_size"],
                                         out["precision"].astype(str))):
        try:
            cid = ZooConfig(model_name=m, input_size=int(s), batch_size=int(b), precision=p).config_id
        except (ConfigError, ValueError) as e:
            cid, refused[i] = "", refused[i] or str(e)
        ids.append(cid)
        if refused[i]:
            continue
        try:
            if not (modules and m in modules):
                step(m, int(s))
            summ = (module_summary(modules[m], int(s), p) if modules and m in modules
                    else zoo_summary(m, int(s), p, bool(folded[i])))
        except ZooError as e:
            refused[i] = str(e)
            continue
        for c, v in {**static_of(summ, int(b)), **kinds_of(summ, float(b)), **weights_of(summ)}.items():
            cols[c][i] = float(v)
    return ids
