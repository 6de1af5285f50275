"""Overrides that keep logic tests small (the test suite's own sizes, never a product default).

:data:`NO_EVALUATION` turns off the evaluation refits of ``carb-train`` (leave-one-batch-tier-out,
extrapolation splits, intervals for unseen architectures, the screening sanity grid, figures): for tests
about what happens around a fit (registration, promotion, loading, errors), not about its evaluation.
The tests of the evaluation itself (tests/test_train.py's synthetic run, the quickstart) keep it on.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

NO_EVALUATION = ["evaluate.lobo.enabled=false", "evaluate.extrapolation.enabled=false",
                 "evaluate.architecture_intervals.enabled=false", "evaluate.sanity.enabled=false",
                 "evaluate.figures=false"]


@contextmanager
def quickstart_without_evaluation() -> Iterator[None]:
    """``carb-quickstart``'s training step with :data:`NO_EVALUATION` added (its command line gives the
    training step no overrides): for tests of what the quickstart does with the model it trains (promote,
    screen, decisions), not of the evaluation, which tests/test_train.py covers."""
    import carb.commands.quickstart as quickstart

    real = quickstart.compose

    def compose(name: str, overrides: Sequence[str] = (), **kw):
        return real(name, [*overrides, *NO_EVALUATION] if name == "train" else overrides, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quickstart, "compose", compose)
        yield
