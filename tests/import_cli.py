"""Run ``carb-import`` as a user would (a subprocess) and return its one error line: the shared check of
the importer tests' bad-input cases (exit code 2, exactly one ``carb-import: error:`` line, no traceback,
no dataset written)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def import_error_line(tmp_path: Path, *overrides: str) -> str:
    """The single error line of ``python -m carb.import_data <overrides>`` writing into ``tmp_path``;
    asserts exit code 2, no traceback and no output file."""
    r = subprocess.run([sys.executable, "-m", "carb.import_data", *overrides, f"out={tmp_path}/x.parquet",
                        f"tracking.uri=sqlite:///{tmp_path}/m.db"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-1500:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("carb-import: error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert not (tmp_path / "x.parquet").exists()
    return lines[0]
