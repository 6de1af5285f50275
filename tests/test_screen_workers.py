"""Screening a knob frame in chunk worker processes (issue 32 item 3): the workers featurize the chunks and
score them, and the result is the one-process screen of the featurized grid, row for row; a knob fault found
in a worker is reported with the frame's own row number; the workers are gone when ``screen`` returns."""
from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pandas as pd
import pytest

from carb.analysis.screening import featurize, needs_features, screen
from carb.design.space import space_frame
from carb.errors import ConfigError
from tests.test_screenscale_chunks import _space, model  # noqa: F401  (the fitted fixture)

pytestmark = pytest.mark.slow     # spawns worker processes (a few seconds)


def test_knob_frame_in_workers_equals_one_process(model):  # noqa: F811
    s = _space() | {"mode": "grid", "depths": {"basic": [14], "bottleneck": [26]}, "width_mults": [0.5, 1.0],
                    "input_sizes": [32, 64], "precisions": ["fp32", "fp16"], "early_downsample": [True]}
    knobs = space_frame(s).assign(top1=lambda f: np.linspace(0.5, 0.8, len(f)))   # a user column rides along
    assert needs_features(knobs) and not needs_features(featurize(knobs.drop(columns="top1")))
    budget = {"energy_J": 1.0, "peak_memory_MB": 5e3}
    one = screen(pd.concat([featurize(knobs.drop(columns="top1")), knobs[["top1"]]], axis=1), model, budget,
                 None, model, top_k=40)
    calls: list[tuple[str, float]] = []
    many = screen(knobs, model, budget, None, model, top_k=40, chunk_rows=30, workers=2,
                  progress=lambda label, share: calls.append((label, share)))
    assert any(label.startswith("featurizing: chunk") for label, _ in calls)
    assert sum(share for _, share in calls) == pytest.approx(1.0)
    assert list(one.scored.columns) == list(many.scored.columns)
    pd.testing.assert_frame_equal(one.scored, many.scored, check_exact=False, rtol=1e-12, atol=0)
    assert one.counts == many.counts
    assert one.shortlist["config_id"].tolist() == many.shortlist["config_id"].tolist()
    assert many.timings_s["featurize_s"] > 0
    assert not mp.active_children()                  # the workers ended with the screen


def test_a_bad_row_found_in_a_worker_names_the_frames_row(model):  # noqa: F811
    knobs = space_frame(_space(200, seed=3))
    bad = knobs.copy()
    bad.loc[150, "depth"] = 21                       # no such basic-block depth
    bad.loc[150, "block"] = "basic"
    with pytest.raises(ConfigError, match=r"row 150: depth: 21"):
        screen(bad, model, {}, None, None, chunk_rows=40, workers=2)
    assert not mp.active_children()
