"""``carb-train``'s figures as tasks for the refit workers (:class:`carb.analysis.refits.RefitRunner`): each
draws one figure of :func:`carb.plots.train.train_figures` into a PNG file while the command logs the rest.
This module imports no matplotlib itself (the worker that draws does), so queueing costs the command nothing.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The artifact paths of carb-train's figures (:func:`carb.plots.train.train_figures`), one task each.
FIGURES = ("figures/extrapolation.png", "figures/pred_vs_measured.png", "figures/residuals_by_batch_tier.png",
           "figures/importances.png")


def render_figures(test: Any, pred: Any, importances: Any, targets: list[str], xval: Any, xval_preds: Any,
                   folder: str, only: list[str] | None = None, note: Any = None) -> list[str]:
    """Draw the fit's figures (:func:`carb.plots.train.train_figures`; ``only`` these) into PNG files under
    ``folder``; returns their paths, ``folder``/``figures/<name>``."""
    from carb.plots.train import train_figures

    out = []
    for name, fig in train_figures(test, pred, importances, targets, xval, xval_preds, only=only).items():
        path = Path(folder) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        out.append(str(path))
    return out


def submit_figures(runner: Any, names: Sequence[str], folder: str, priority: float, *args: Any) -> list[Any]:
    """One :func:`render_figures` task per figure in ``names`` (``args``: its data, in its order); returns
    the jobs."""
    from carb.analysis.refits import Task

    return [runner.submit(Task("figures", i, None, render_figures, (*args, *([None] * (6 - len(args))), folder,
                                                                    [name]), priority=priority))
            for i, name in enumerate(names)]


def first_figures(runner: Any, folder: str, test: Any, pred: Any, importances: Any, targets: list[str]) -> list[Any]:
    """The main fit's figures (all but the extrapolation one), queued once its test predictions are in."""
    from carb.analysis.refits import PRIORITY

    return submit_figures(runner, FIGURES[1:], folder, PRIORITY["figures"], test, pred, importances, targets)


def split_figures(runner: Any, plan: dict[str, Any], runs: list[Any], folder: str, targets: list[str],
                  combined: list[Any] | None = None) -> list[Any]:
    """Queue the extrapolation figure as soon as the splits' refits are in (``runs``: their results, in
    split order), ahead of the refits still waiting (:data:`carb.analysis.refits.PRIORITY`: the longest
    figure). ``combined``: gets ``(table, predictions)`` of the splits appended (the evaluation reuses them)."""
    from carb.analysis.extrapolation import combine_splits, xval_predictions
    from carb.analysis.refits import PRIORITY

    preds: dict = {}
    xval = combine_splits([r.result for r in runs], plan["coverage"], predictions=preds)
    if combined is not None:
        combined.append((xval, preds))
    return submit_figures(runner, FIGURES[:1], folder, PRIORITY["extrapolation figure"], None, None, None, targets,
                          xval, xval_predictions(preds))
