"""carb-calibrate without ``source=`` in a store that lacks its default model (the champion of the shipped CPU
reference dataset's model, e.g. right after ``make quickstart``, which trains the H200 one): one line saying
what the default is and how to make it, exit 2, before any probe or measurement."""
from __future__ import annotations

import subprocess
import sys


def test_missing_default_source_says_how_to_make_it(tmp_path):
    """``carb-calibrate k=0 probe=<shipped id>`` on an empty store names the default and ``carb-train``."""
    r = subprocess.run([sys.executable, "-m", "carb.calibrate", "k=0", "probe=6a0ea403ee",
                        f"tracking.uri=sqlite:///{tmp_path}/m.db", f"paths.output_dir={tmp_path}/out"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    errors = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert r.returncode == 2, r.stderr[-1500:]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert errors[0].startswith("carb-calibrate: error: source: not given, and its default models:/carb-"), errors
    assert "run carb-train, then carb-promote" in errors[0] and "source=models:/<name>@<alias>" in errors[0], errors
    # carb-promote alone stops when the store holds several models (a zoo one beside it, say): name it
    assert "carb-promote promote.name=carb-" in errors[0], errors


def test_a_given_source_that_does_not_resolve_keeps_mlflow_s_reason(tmp_path):
    """A source the user named is not blamed on the default: the line names that URI."""
    r = subprocess.run([sys.executable, "-m", "carb.calibrate", "k=0", "probe=6a0ea403ee",
                        "source=models:/nothing-here@champion",
                        f"tracking.uri=sqlite:///{tmp_path}/m.db", f"paths.output_dir={tmp_path}/out"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    errors = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert r.returncode == 2 and len(errors) == 1, r.stderr[-1500:]
    assert "cannot load model 'models:/nothing-here@champion'" in errors[0] and "its default" not in errors[0], errors
