"""An energy-efficiency score of a screened set, in the spirit of the Hidden Joules study (issue 43 item 6).

Yang, Adamek and Armour, "Double-Exponential Increases in Inference Energy: The Cost of the Race for Accuracy"
(arXiv 2412.09731, also titled "The Hidden Joules") introduce "an energy efficiency scoring system" over
~1,200 timm ImageNet backbones. Its exact formula could not be read from the material at hand (the stored
copies of the paper hold its abstract and introduction only; the summary says "a weighted accuracy-energy
score"), so **this is CARB's own score, not the paper's formula**. It keeps what the summary says: a weighted
sum of accuracy and energy, with energy on a log scale since it spans four orders of magnitude there.

For the n candidates of one screening that have both a top-1 and a predicted energy per image::

    acc_i = (top1_i - min top1) / (max top1 - min top1)                     in [0, 1], 1 = most accurate
    eff_i = (max log10 E_i - log10 E_i) / (max log10 E - min log10 E)       in [0, 1], 1 = least J per image
    hj_score_i = w * acc_i + (1 - w) * eff_i                                in [0, 1], higher is better

with ``E_i = pred_energy_J_i / batch_size_i`` (J per image) and ``w`` = ``screen.hj.accuracy_weight``
(default 0.5). Minimum and maximum are taken over every candidate of the screened set with both values,
whatever the budget decides, so a candidate's score does not move with the budget; it does move with the set
(a relative score, as the summary's "interactive comparison" suggests). A term without spread (one
candidate, or all equal) is 1 for every candidate. A candidate without a top-1 or an energy gets NaN.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from carb.errors import ConfigError

#: The score's column (unitless, in [0, 1], higher is better).
HJ_SCORE = "hj_score"
#: The columns it needs: the accuracy column (a fraction) and the predicted energy (J per batch).
HJ_ACCURACY = "top1"
HJ_ENERGY = "energy_J"


def check_weight(w: object, field: str = "screen.hj.accuracy_weight") -> float:
    """``w`` as a float in [0, 1]; anything else is a one-line :class:`ConfigError` naming ``field``."""
    try:
        v = float(w)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        v = float("nan")
    if not 0.0 <= v <= 1.0:
        raise ConfigError(f"{field}: must be a number in [0, 1] (the accuracy term's weight; 1 - it weighs "
                          f"log energy per image), got {w!r}")
    return v


def _unit(v: np.ndarray, ok: np.ndarray, high_is_good: bool) -> np.ndarray:
    """(n,) ``v`` min-max scaled over the rows ``ok`` to [0, 1] (1 = best), NaN elsewhere; 1 without spread."""
    out = np.full(len(v), np.nan)
    if not ok.any():
        return out
    lo, hi = float(v[ok].min()), float(v[ok].max())
    if hi <= lo:
        out[ok] = 1.0
        return out
    out[ok] = (v[ok] - lo) / (hi - lo) if high_is_good else (hi - v[ok]) / (hi - lo)
    return out


def hj_scores(top1: np.ndarray, energy_J_per_image: np.ndarray, accuracy_weight: float = 0.5) -> np.ndarray:
    """(n,) scores of the module docstring from (n,) ``top1`` (fractions) and (n,) ``energy_J_per_image``
    (J per image, > 0), normalised over the rows where both are known; NaN where either is not."""
    a = np.asarray(top1, dtype=float)
    e = np.asarray(energy_J_per_image, dtype=float)
    w = check_weight(accuracy_weight)
    ok = np.isfinite(a) & np.isfinite(e) & (e > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        loge = np.where(ok, np.log10(np.where(ok, e, 1.0)), np.nan)
    return w * _unit(a, ok, True) + (1.0 - w) * _unit(loge, ok, False)


def hj_missing(targets: Sequence[str], frame: pd.DataFrame) -> str:
    """Why the score cannot be computed for a screening whose model predicts ``targets`` over ``frame``
    (the candidates), or ``""`` when it can: energy must be predicted and a ``top1`` column present."""
    if HJ_ENERGY not in targets:
        return (f"needs predicted energy ({HJ_ENERGY}) and the target model predicts only {list(targets)} "
                f"(a CPU model has no energy: screen with a GPU model)")
    if HJ_ACCURACY not in frame.columns:
        return (f"needs a {HJ_ACCURACY} column: space=zoo joins timm's top-1, screen.accuracy=IMAGENET1K_V1 "
                f"the ResNets', or a screen.grid_file with a {HJ_ACCURACY} column")
    return ""


def add_hj_score(scored: pd.DataFrame, accuracy_weight: float = 0.5) -> pd.DataFrame:
    """``scored`` (with ``top1``, ``pred_energy_J``, ``batch_size``) with :data:`HJ_SCORE` (added in place
    and returned; normalised over all its rows, :func:`hj_scores`)."""
    b = pd.to_numeric(scored["batch_size"], errors="coerce").to_numpy(dtype=float)
    e = scored[f"pred_{HJ_ENERGY}"].to_numpy(dtype=float) / b
    top1 = pd.to_numeric(scored[HJ_ACCURACY], errors="coerce").to_numpy(dtype=float)
    scored[HJ_SCORE] = hj_scores(top1, e, accuracy_weight)
    return scored


def named(pareto: Sequence[str] | None, objective: str | None, require: dict | None) -> list[str]:
    """The settings that name :data:`HJ_SCORE` (``screen.pareto``, ``screen.objective``, ``screen.require``)."""
    out = []
    if any(str(a).strip().lstrip("+-").strip() == HJ_SCORE for a in (pareto or [])):
        out.append("screen.pareto")
    if objective == HJ_SCORE:
        out.append("screen.objective")
    if (require or {}).get(HJ_SCORE) is not None:
        out.append(f"screen.require.{HJ_SCORE}")
    return out


def check_direction(pareto: Sequence[str] | None) -> None:
    """A Pareto axis ``hj_score`` without the ``-`` (minimized) is a one-line :class:`ConfigError`: the score
    is better when larger."""
    for a in pareto or []:
        text = str(a).strip()
        if text.lstrip("+").strip() == HJ_SCORE and not text.startswith("-"):
            raise ConfigError(f"screen.pareto: {text!r} would minimize {HJ_SCORE}, which is better when larger; "
                              f"allowed: '-{HJ_SCORE}' (a leading '-' maximizes)")
