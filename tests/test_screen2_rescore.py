"""Two-stage screening as the paper has it (issue 32 item 3): with ``screen.rescore=top_k`` the target model
scores only the source's top K, and those rows are the numbers ``rescore=all`` gives, row for row; the other
rows carry the source's objective and rank, ``reject`` and NaN target columns, and everything downstream
(tables, files, figure, run record, closest candidates) takes them.

"The same numbers" is to 1e-12 relative, decisions and lists exactly: the physics priors' ``D @ coef``
(OpenBLAS dgemv) can round a row's sum differently by 1 ulp depending on the rows scored with it, as
chunked screening already could."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.screening import RESCORE_MODES, closest_candidates, featurize, screen, spearman
from carb.design.candidates import arch_codes
from carb.design.space import space_frame
from carb.errors import ConfigError
from tests.test_screenscale_chunks import _space, model  # noqa: F401  (the fitted cascade with intervals)

def same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal frames: numbers to 1e-12 relative, text and flags exactly."""
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-12, atol=0)
    for c in ("decision", "decision_reason", "feasible", "pareto", "rank", "profile_rank", "stage1_rank"):
        assert a[c].equals(b[c]), c


KEYS = ("block", "depth", "width_mult", "input_size", "precision", "early_downsample", "stages", "inner_mult")


@pytest.fixture(scope="module")
def pair(model):  # noqa: F811
    """The same two-stage screen (source = target = the fitted cascade) under both rescore modes."""
    grid = featurize(space_frame(_space(400, seed=7)))
    first = screen(grid, model, {"energy_J": 1.0}, None, model, top_k=60, rescore="all")
    budget = {"energy_J": float(np.median(first.scored.loc[first.scored["stage1_kept"], "pred_energy_J"])),
              "peak_memory_MB": 5e3}
    both = {mode: screen(grid, model, budget, None, model, top_k=60, rescore=mode) for mode in RESCORE_MODES}
    return grid, both["top_k"], both["all"]


def test_top_k_rows_are_the_all_rows(pair):
    grid, top, full = pair
    kept = top.scored["stage1_kept"].to_numpy(bool)
    assert kept.sum() == 60 and np.array_equal(kept, full.scored["stage1_kept"].to_numpy(bool))
    assert list(top.scored.columns) == list(full.scored.columns)
    same(top.scored[kept], full.scored[kept])
    for c in ("source_pred_energy_J", "stage1_rank", "config_id", "in_domain", "flops"):   # every row
        pd.testing.assert_series_equal(top.scored[c], full.scored[c], check_exact=True)
    assert top.shortlist["config_id"].tolist() == full.shortlist["config_id"].tolist()
    assert top.profile["config_id"].tolist() == full.profile["config_id"].tolist()
    assert top.counts == full.counts
    assert top.scored.loc[kept, "decision"].nunique() > 1
    # the test means something: some kept rows' architectures start (first row) outside the top K
    codes, _ = arch_codes(grid, [k for k in KEYS if k in grid])
    first = np.unique(codes, return_index=True)[1]
    assert (~kept[first[np.unique(codes[kept])]]).any()


def test_rows_outside_the_top_k_have_the_source_only(pair):
    _, top, full = pair
    s = top.scored
    rest = s[~s["stage1_kept"]]
    assert len(rest) == len(s) - 60
    assert rest["decision"].eq("reject").all() and rest["decision_reason"].eq("not in the source model's top 60").all()
    assert not rest["feasible"].any() and not rest["pareto"].any() and rest["profile_rank"].isna().all()
    target_cols = [c for c in s.columns if c.startswith(("pred_", "lo_", "hi_", "p_within_", "margin_"))
                   and not c.startswith("source_")] + ["p_feasible", "avg_sm_util", "util_product"]
    assert {"pred_energy_J", "lo_energy_J", "p_feasible"} <= set(target_cols)
    assert rest[target_cols].isna().all().all()
    assert rest["source_pred_energy_J"].notna().all() and rest["stage1_rank"].min() == 61
    assert full.scored.loc[~full.scored["stage1_kept"], target_cols].notna().all().all()   # all: scored anyway
    # the Pareto front, shortlist and profile list only ever come from re-scored rows
    for frame in (top.shortlist, top.profile):
        assert frame["stage1_kept"].all()
    # Spearman: over the re-scored rows (top_k) or the whole grid (all)
    kept = s["stage1_kept"].to_numpy(bool)
    assert top.stages["stage2_rescored"] == 60 and full.stages["stage2_rescored"] == len(s)
    assert top.stages["spearman_source_target"] == pytest.approx(
        spearman(s.loc[kept, "source_pred_energy_J"].to_numpy(), s.loc[kept, "pred_energy_J"].to_numpy()))
    assert full.stages["spearman_source_target"] == pytest.approx(1.0)


def test_top_k_in_chunks_is_one_pass(model, pair):  # noqa: F811
    grid, top, _ = pair
    calls: list[tuple[str, float]] = []
    many = screen(grid, model, top.budget, None, model, top_k=60, chunk_rows=90,
                  progress=lambda label, share: calls.append((label, share)))
    same(top.scored, many.scored)
    assert top.stages == pytest.approx(many.stages, rel=1e-12)
    assert sum(share for _, share in calls) == pytest.approx(1.0)
    assert calls[0][0].startswith("chunk 1/") and calls[-1][0].startswith("re-scoring the source's top 60")


def test_nan_target_columns_downstream(pair, tmp_path):
    """The terminal table, the files, the figure, the run record and the closest candidates take a top_k
    result (NaN target columns outside the top K)."""
    from carb.commands.runinfo import screen_record
    from carb.commands.screen_table import file_frame, format_table
    from carb.plots.screen import pareto_figure

    _, top, _ = pair
    targets = ["peak_memory_MB", "energy_J", "latency_ms"]
    preds = [f"pred_{t}" for t in targets]
    table = format_table(top.scored.sort_values("stage1_rank").iloc[55:65], preds, ["decision_reason"])
    assert " - " in table or "- [" in table          # a missing prediction prints as "-"
    frame = file_frame(top.scored, targets)
    frame.to_parquet(tmp_path / "scored.parquet", index=False)
    frame.to_csv(tmp_path / "scored.csv", index=False)
    back = pd.read_parquet(tmp_path / "scored.parquet")
    assert back["pred_energy_J"].isna().sum() == len(back) - 60
    fig = pareto_figure(top)
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert f"not drawn ({len(top.scored) - 60}): not re-scored by the target model" in texts
    rec = screen_record({"screen": {"top_k": 60, "rescore": "top_k"}}, top, "models:/m/1", "1", "GPU",
                        "two-stage", len(top.scored))
    assert rec["params"]["screen.rescore"] == "top_k"
    near = closest_candidates(top.scored, {"energy_J": 1e-9})   # nothing meets it: only re-scored rows
    assert len(near) == 5 and near["stage1_kept"].all()


def test_bad_rescore_is_one_line(model):  # noqa: F811
    grid = featurize(space_frame(_space(30, seed=3)))
    with pytest.raises(ConfigError) as e:
        screen(grid, model, {}, None, model, rescore="some")
    assert str(e.value) == "screen.rescore: 'some' is not allowed; allowed: ['top_k', 'all']"


def test_bad_rescore_in_the_config_is_one_line():
    from carb.commands.checks import check_config
    from carb.commands.cli import compose

    check_config("screen", compose("screen", ["screen.rescore=all"]))
    with pytest.raises(ConfigError) as e:
        check_config("screen", compose("screen", ["screen.rescore=some"]))
    assert "screen.rescore" in str(e.value) and "'top_k', 'all'" in str(e.value) and "\n" not in str(e.value)
