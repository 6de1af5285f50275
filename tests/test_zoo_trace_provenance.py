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


class _InlinePool:
    """A stand-in for a spawn pool: maps in this process (so monkeypatched functions are the ones called)."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, jobs, chunksize=1):
        return [fn(j) for j in jobs]


def _inline(mod, monkeypatch):
    """Replace the script's spawn context by one whose Pool runs inline."""
    monkeypatch.setattr(mod, "get_context", lambda _: type("Ctx", (), {"Pool": _InlinePool})())


def test_refresh_with_columns_writes_only_those_columns(monkeypatch):
    """``refresh(..., columns=[...])``: the named column (new) is written on the rows ``where`` selects (0 on the other
    traced rows), an existing column the recomputation would change keeps its stored values."""
    mod = _script()
    _inline(mod, monkeypatch)
    monkeypatch.setattr(mod, "refresh_one", lambda job: {"flops": -1.0, "flops_new": 7.0})
    done = pd.DataFrame({"model": ["a_net", "b_net", "c_net"], "input_size": [224, 224, 256],
                         "settings": ["", "", ""], "refused": [None, None, "too big"], "folded": False,
                         "flops": [1e9, 0.0, float("nan")], "where_col": [1.0, 0.0, float("nan")]})
    out = mod.refresh(done, 1, "where_col", columns=["flops_new"])
    assert out["flops"].equals(done["flops"])
    assert out["flops_new"].iloc[0] == 7.0 and out["flops_new"].iloc[1] == 0.0 and pd.isna(out["flops_new"].iloc[2])


def test_hidden_copies_cuda_only_where_the_meta_trace_has_a_copy(monkeypatch):
    """``--hidden-copies-cuda``: the ``*_cl`` columns from the CUDA-layout forward on rows with a meta hidden copy;
    elsewhere, and the depthwise FLOPs on a folded row, the meta values; a failed forward (NaN) keeps the meta ones."""
    mod = _script()
    _inline(mod, monkeypatch)
    got = {"a_net": {"bytes_hidden_copy": 1.0, "n_hidden_copy": 1.0, "flops_conv_dw_native": 0.0},
           "d_net": {"bytes_hidden_copy": float("nan"), "n_hidden_copy": float("nan"),
                     "flops_conv_dw_native": float("nan")}}
    monkeypatch.setattr(mod, "hidden_cuda_one", lambda job: got[job[0]])
    done = pd.DataFrame({"model": ["a_net", "a_net", "b_net", "d_net"], "input_size": 224, "settings": "",
                         "refused": None, "folded": [False, True, False, False],
                         "bytes_hidden_copy": [4.0, 4.0, 0.0, 2.0], "n_hidden_copy": [3.0, 3.0, 0.0, 1.0],
                         "flops_conv_dw_native": [5.0, 6.0, 8.0, 9.0]})
    out = mod.hidden_copies_cuda(done, 1)
    assert out["bytes_hidden_copy_cl"].tolist() == [1.0, 1.0, 0.0, 2.0]
    assert out["flops_conv_dw_native_cl"].tolist() == [0.0, 6.0, 8.0, 9.0]
    assert out[list(done.columns)].equals(done)


def test_columns_without_refresh_is_refused(capsys):
    """``--columns`` without ``--refresh``: one line naming the option, exit 2."""
    mod = _script()
    try:
        mod.main(["--columns", "flops_new"])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("--columns without --refresh was accepted")
    assert "--columns" in capsys.readouterr().err
