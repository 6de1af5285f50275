"""scripts/data/zoo_trace_features.py's provenance JSON: a run merges its keys into the file, keeping the
keys it does not own (the per-column notes), on a tmp copy with synthetic rows (the real files untouched)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def _script():
    """scripts/data/zoo_trace_features.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("zoo_trace_features_prov",
                                                  ROOT / "scripts/data/zoo_trace_features.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_refresh_keeps_the_provenance_keys_it_does_not_own(tmp_path, monkeypatch, capsys):
    """``--refresh`` (its recomputation replaced by the identity: no trace is read) rewrites the counts and the
    versions but keeps ``cpu_columns`` / ``bmm_tiles``-like notes; the parquet written to the tmp path."""
    mod = _script()
    frame = pd.DataFrame({"model": ["a_net", "b_net", "c_net"], "input_size": [224, 224, 256],
                          "refused": [None, None, "too big"], "reparam": False, "folded": False,
                          "flops": [1e9, 2e9, float("nan")]})
    out, prov = tmp_path / "trace.parquet", tmp_path / "trace.provenance.json"
    frame.to_parquet(out, index=False)
    notes = {"cpu_columns": "added on the CPU file's rows", "bmm_tiles": "added by --refresh-where",
             "refresh": "every row recomputed under tracer 4"}
    prov.write_text(json.dumps({"rows": 999, "traced": 999, **notes}))
    monkeypatch.setattr(mod, "OUT", out)
    monkeypatch.setattr(mod, "PROVENANCE", prov)
    monkeypatch.setattr(mod, "refresh", lambda done, workers, where=None: done)
    assert mod.main(["--refresh"]) == 0
    info = json.loads(prov.read_text())
    assert {k: info[k] for k in notes} == notes
    assert info["rows"] == 3 and info["traced"] == 2 and info["refused"] == 1   # the run's own keys win
    assert "tracer_version" in info and "commit" in info
    assert "refreshed 2 rows" in capsys.readouterr().out


def test_provenance_starts_empty_when_the_file_is_missing_or_unreadable(tmp_path):
    """No file, or a file that is not a JSON object: only the run's own keys, no error."""
    mod = _script()
    frame = pd.DataFrame({"model": ["a_net"], "input_size": [224], "refused": [None]})
    for text in (None, "not json", "[1, 2]"):
        path = tmp_path / "p.json"
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(text)
        mod._provenance(frame, path)
        info = json.loads(path.read_text())
        assert info["rows"] == 1 and "cpu_columns" not in info
