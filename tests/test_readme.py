"""The README's Python example runs as printed: a small H200 model is trained on the shipped H200 data and
registered in a temporary MLflow store under the name the README uses, promoted to ``champion``, and the
``python`` block of the README section "Use a model from Python" is executed against that store."""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from carb.commands.cli import compose
from carb.data.io import load_dataset
from carb.data.schema import model_name, ok_rows

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Use a model from Python"
#: A small, quick cascade (the sizes test_train.py uses) and no evaluation beyond the fit and intervals.
FAST = ["model=carb_fast", "model.specialists.xgb.n_estimators=15", "model.specialists.xgb.max_depth=4",
        "model.specialists.lgbm.n_estimators=15", "model.specialists.lgbm.num_leaves=15",
        "model.specialists.et.n_estimators=10", "model.oof_folds=2", "model.probe_estimators=15",
        "model.correctors.model.max_iter=30", "model.n_jobs=1", "print_table=false",
        "evaluate.lobo.enabled=false", "evaluate.figures=false", "evaluate.extrapolation.enabled=false",
        "evaluate.architecture_intervals.enabled=false", "evaluate.sanity.enabled=false"]


def readme_example() -> str:
    """The first ``python`` code block after the heading :data:`SECTION` of README.md."""
    text = (ROOT / "README.md").read_text()
    assert SECTION in text, f"README.md lacks the section {SECTION!r}"
    found = re.search(r"```python\n(.*?)```", text.split(SECTION, 1)[1], re.S)
    assert found, f"no python block under {SECTION!r}"
    return found.group(1)


@pytest.fixture(scope="module")
def h200_store(tmp_path_factory):
    """A temporary store holding a small model of the shipped H200 data, version 1 promoted to champion."""
    from carb import tracking
    from carb.commands.train import run_train

    d = tmp_path_factory.mktemp("readme")
    uri = f"sqlite:///{d}/mlruns/mlflow.db"
    out = run_train(compose("train", ["data=h200", f"tracking.uri={uri}", f"paths.output_dir={d}/out", *FAST]))
    tracking.configure(uri)
    tracking.set_alias(out["registered_name"], "champion", out["version"])
    return {"uri": uri, "name": out["registered_name"]}


def test_readme_names_the_shipped_h200_model(h200_store):
    assert h200_store["name"] == model_name(ok_rows(load_dataset("h200")))
    assert f"models:/{h200_store['name']}@champion" in readme_example()


def test_readme_python_example_runs(h200_store):
    from carb import tracking

    tracking.configure(h200_store["uri"])   # what the default store is for a user: this one
    printed = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(readme_example(), "README.md", "exec"), namespace)
    scored = namespace["scored"]
    assert len(scored) == 2
    for col in ("pred_energy_J", "lo_energy_J", "hi_energy_J", "pred_latency_ms", "pred_peak_memory_MB"):
        assert scored[col].notna().all() and (scored[col] > 0).all(), col
    assert (scored["lo_energy_J"] <= scored["pred_energy_J"]).all()
    assert (scored["pred_energy_J"] <= scored["hi_energy_J"]).all()
    assert "pred_energy_J" in printed.getvalue()
    # one call gives the decision inputs and the domain flags too, for the budget the example names
    for col in ("p_within_latency_ms", "p_within_peak_memory_MB", "p_feasible", "decision", "in_domain",
                "outside", "never_measured", "unbounded"):
        assert col in scored, col
    assert scored["p_feasible"].between(0, 1).all()
    assert set(scored["decision"]) <= {"accept", "borderline", "unverified", "reject"}


def test_example_excerpt_keeps_the_summary_and_the_top_rows():
    """scripts/example.py splices the carb-screen summary and the shortlist's first rows, not the store
    path or the written files (temporary paths)."""
    from scripts.example import shortlist_excerpt

    out = "\n".join(["carb-screen: tracking store sqlite:////tmp/x/mlflow.db", "note: something",
                     "grid 3 candidates; budget {}", "accept 2, borderline 1", "shortlist (3; ...):",
                     "block depth", "basic 14", "basic 18", "basic 34", "wrote /tmp/x/scored.parquet"])
    assert shortlist_excerpt(out, top_rows=2) == ["grid 3 candidates; budget {}", "accept 2, borderline 1",
                                                  "shortlist (3; ...):", "block depth", "basic 14", "basic 18"]


def test_zoo_excerpt_drops_a_skipped_line_with_its_wrapped_continuation():
    """A summary line the README leaves out (``passed through ...``) goes with its continuation lines (two
    spaces in, as ``cli.wrap_line`` wraps), and the lines after it stay."""
    from scripts.example import ZOO_SKIP, drop_skipped

    lines = ["grid 104 candidates", "accept 13, borderline 21", "passed through to every output: top1, top5,",
             "  top1_source (32 of 104 without a value)", "shortlist (20; ...):", "  input batch"]
    assert drop_skipped(lines, ZOO_SKIP) == ["grid 104 candidates", "accept 13, borderline 21",
                                             "shortlist (20; ...):", "  input batch"]


def test_zoo_example_counts_the_networks_traced_from_the_progress_lines():
    """The zoo example's header says whether the layer tables came from the trace cache: it sums the
    ``traced N networks into the trace cache`` lines of the commands' output (none: 0, a warm cache)."""
    from scripts.example import traced_count

    assert traced_count("carb-train: tracking store x\nregistered m version 1\n") == 0
    assert traced_count("tracing tv:resnet18 at 224 px (1/3, not in the trace cache)\n"
                        "traced 3 networks into the trace cache\n...\ntraced 12 networks into the trace cache") == 15
