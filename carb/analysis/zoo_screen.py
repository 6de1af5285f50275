"""Screening a model zoo (``carb-screen space=zoo``): the candidates of a zoo space featurized from their layer
tables (:func:`carb.design.zoo_inputs.zoo_features_frame`), the networks the tracer refuses listed with their
reasons, and each candidate's published ImageNet top-1 joined from timm's results
(:mod:`carb.data.timm_accuracy`).

Top-1 of a name: ``timm:<arch>`` takes timm's own (default pretrained tag, evaluated at the row's input size;
NaN at another size). ``tv:<name>`` takes timm's top-1 of the timm architecture that is the same network
(:func:`timm_equivalent`: the same name or a known alias, kept only when both build with the same parameter
count), so it is timm's weights' accuracy on the same architecture, not torchvision's checkpoint; a torchvision
network without such an equivalent (e.g. ``shufflenet_v2``, ``squeezenet``, ``googlenet``) has top-1 unknown
(NaN, ``top1_source`` empty). ``top1_source`` says which architecture and tag each value is.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

#: torchvision names whose timm architecture is spelled otherwise (checked by parameter count before use).
TV_TO_TIMM: dict[str, str] = {
    "mobilenet_v2": "mobilenetv2_100", "mobilenet_v3_large": "mobilenetv3_large_100",
    "mobilenet_v3_small": "mobilenetv3_small_100", "mnasnet0_5": "mnasnet_050", "mnasnet1_0": "mnasnet_100",
    "regnet_x_400mf": "regnetx_004", "regnet_x_800mf": "regnetx_008", "regnet_x_1_6gf": "regnetx_016",
    "regnet_y_400mf": "regnety_004", "regnet_y_800mf": "regnety_008", "regnet_y_1_6gf": "regnety_016",
    "inception_v3": "inception_v3", "vit_b_16": "vit_base_patch16_224", "swin_t": "swin_tiny_patch4_window7_224",
}


def _params(name: str) -> int | None:
    """Parameter count of a zoo name built on the meta device, or None when it cannot be built."""
    from carb.design.zoo import build_model

    try:
        return sum(int(p.numel()) for p in build_model(name, device="meta").parameters())
    except Exception:   # noqa: BLE001 - no such network: no equivalent
        return None


@functools.lru_cache(maxsize=512)
def timm_equivalent(model_name: str) -> str | None:
    """The timm architecture whose top-1 a zoo name takes: a ``timm:`` name's own base name; for a
    ``tv:`` name the timm architecture of the same name or :data:`TV_TO_TIMM`'s alias when it builds with the
    same parameter count (the same network); None otherwise (top-1 unknown)."""
    from carb.design.zoo import split_name

    source, base = split_name(model_name)
    base = base.split(".", 1)[0]
    if source == "timm":
        return base
    cand = TV_TO_TIMM.get(base, base)
    n = _params(model_name)
    return cand if n is not None and _params(f"timm:{cand}") == n else None


def zoo_top1(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (``model_name``, ``input_size``) with ``top1``, ``top5`` (fractions; NaN where unknown) and
    ``top1_source`` (``<timm architecture>.<tag>``, ``""`` where unknown) per the module docstring."""
    from carb.data.timm_accuracy import join_top1

    eq = {m: timm_equivalent(m) for m in frame["model_name"].astype(str).unique()}
    arch = frame["model_name"].astype(str).map(lambda m: eq[m] or "")
    joined = join_top1(pd.DataFrame({"model": arch.to_numpy(), "input_size": frame["input_size"].to_numpy()}))
    out = frame.copy()
    out["top1"] = joined["top1"].to_numpy(float)
    out["top5"] = joined["top5"].to_numpy(float)
    tag = joined["top1_tag"].fillna("").astype(str).to_numpy()
    known = np.isfinite(out["top1"].to_numpy(float))
    out["top1_source"] = np.where(known, arch.to_numpy() + "." + tag, "")
    return out


def zoo_candidates(space: Mapping[str, Any]) -> tuple[pd.DataFrame, dict[str, str]]:
    """``(featurized candidates, refused)`` of a zoo space: every configuration of
    :func:`carb.design.zoo_space.zoo_configs` with the layer table's features and the top-1 of
    :func:`zoo_top1`; ``refused`` maps each network left out (unknown, untraceable, refusing an input size)
    to its one-line reason. Raises :class:`carb.errors.ConfigError` when nothing is left."""
    from carb.design.zoo_inputs import zoo_features_frame
    from carb.design.zoo_space import all_refused, refusals, zoo_configs
    from carb.errors import ConfigError

    configs, refused = zoo_configs(space)
    knobs = pd.DataFrame([c.to_dict() for c in configs]).drop(columns=["family"], errors="ignore")
    F = zoo_features_frame(knobs)
    bad = F["refused"] != ""
    failed = {(str(m), int(s)): str(why) for m, s, why in
              zip(F.loc[bad, "model_name"], F.loc[bad, "input_size"], F.loc[bad, "refused"])}
    tried = set(zip(F["model_name"].astype(str), F["input_size"].astype(int)))
    for label, why in refusals(failed, tried).items():
        if label.split(" at input ")[0] not in refused:
            refused[label] = why
    F = F[~bad].drop(columns="refused").reset_index(drop=True)
    if not len(F):
        raise ConfigError(all_refused(refused))
    return zoo_top1(F), refused


#: A zoo grid file's knob columns (the rest: numeric columns pass through, text ones are refused).
ZOO_GRID_KNOBS = ("model_name", "input_size", "batch_size", "precision")


def zoo_grid_candidates(path: str, defaults: Mapping[str, Any] | None = None,
                        field: str = "screen.grid_file") -> tuple[pd.DataFrame, dict[str, str]]:
    """``(featurized candidates, refused)`` of a grid file of named networks (a ``model_name`` column;
    ``input_size``, ``batch_size``, ``precision`` from the file, else ``defaults``, else 224, 1, fp32), as
    :func:`zoo_candidates` makes them for a zoo space; the file's other numeric columns (``cost_usd``) pass
    through. A bad knob value or a text column is one :class:`carb.errors.ConfigError` line naming the file,
    column and allowed values; a network the tracer refuses is left out and listed in ``refused``."""
    from pathlib import Path

    from carb.design.gridfile import check_text_values, read_frame
    from carb.design.zoo_inputs import zoo_features_frame
    from carb.design.zoo_space import ZOO_DEFAULTS, all_refused, check_zoo_knobs, refusals
    from carb.errors import ConfigError

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{field}: {str(p)!r} does not exist")
    df = read_frame(p, field).reset_index(drop=True)
    where = f"{field} {p.name}"
    check_text_values(df, where)
    text = [c for c in df.columns if c not in ZOO_GRID_KNOBS and c != "family"
            and (not pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c]))]
    if text:
        raise ConfigError(f"{where}: unknown column(s) {text}; allowed: {list(ZOO_GRID_KNOBS)} and numeric "
                          f"columns of your own (passed through)")
    knobs = df[[c for c in ZOO_GRID_KNOBS if c in df]].copy()
    for k, v in {**ZOO_DEFAULTS, **dict(defaults or {})}.items():
        if k in ZOO_GRID_KNOBS and k not in knobs:
            knobs[k] = v
    if knobs["model_name"].isna().any() or (knobs["model_name"].astype(str).str.strip() == "").any():
        row = int(np.flatnonzero(knobs["model_name"].isna() | (knobs["model_name"].astype(str).str.strip() == ""))[0])
        raise ConfigError(f"{where}: column 'model_name' row {row + 1} is empty; allowed: a zoo name "
                          f"(tv:<torchvision classifier>, timm:<timm model>)")
    try:
        check_zoo_knobs(knobs)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    knobs[["input_size", "batch_size"]] = knobs[["input_size", "batch_size"]].astype(int)
    F = zoo_features_frame(knobs[list(ZOO_GRID_KNOBS)].reset_index(drop=True))
    bad = (F["refused"] != "").to_numpy()
    failed = {(str(m), int(s)): str(why) for m, s, why in
              zip(F.loc[bad, "model_name"], F.loc[bad, "input_size"], F.loc[bad, "refused"])}
    refused = refusals(failed, set(zip(F["model_name"].astype(str), F["input_size"].astype(int))))
    if bad.all():
        raise ConfigError(all_refused(refused, "the file's input_size column").replace("space.models:", f"{where}:", 1))
    extras = df.drop(columns=[c for c in df.columns if c in ZOO_GRID_KNOBS or c == "family"])
    F = F[~bad].drop(columns="refused").reset_index(drop=True)
    out = zoo_top1(F)
    extras = extras[~bad].reset_index(drop=True).astype(float)
    out = pd.concat([out, extras.drop(columns=[c for c in extras.columns if c in out])], axis=1)
    return out, refused


def refused_lines(refused: Mapping[str, str]) -> list[str]:
    """One line per refused network: ``refused <name>: <reason>`` (``<name> at input <sizes>`` where the
    network was refused at those input sizes only: :func:`carb.design.zoo_space.refusals`)."""
    return [f"refused {m}: {why}" for m, why in sorted(refused.items())]
