"""carb-calibrate decides from the source model's input kind (:func:`carb.design.identity.input_kind`) what it
can transfer: a zoo or combined model only from K measured rows of its own kinds (``data.path``, k > 0; no
device probes or spec records, which read ResNet layers). Anything else (k=0, probe=, spec=, measure=) is
refused in one line naming the source, why and what works, right after loading the model: before a probe, a
measurement, a fit or a logged run (exit 2 through the command)."""
from __future__ import annotations

import pandas as pd
import pytest

from carb.commands.cli import compose
from carb.errors import ConfigError

CPU = '{"kind": "cpu", "isa": ["avx2", "avx512f"]}'
URI = "models:/carb-amd-epyc-34cc4b132c-zoo@champion"


class Source:
    """A loaded CPU 'model' of input kind ``kind`` (what :class:`carb.model.cascade.CarbCascade` records)."""

    targets_ = ["peak_memory_MB", "latency_ms"]
    device_fingerprint_, device_name_, device_id_ = CPU, "AMD EPYC", "34cc4b132c"

    def __init__(self, kind: str | None) -> None:
        if kind is not None:
            self.input_kind_ = kind


class Reached(Exception):
    """A step after the refusal point ran."""


def _stub(monkeypatch, kind, rows=None):
    """``tracking`` answers with a Source of ``kind``; every later step raises :class:`Reached` naming itself
    (``target_rows`` returns ``rows`` when given)."""
    import carb.analysis.transfer as at
    import carb.commands.calibrate as cal
    import carb.commands.zero_shot as zs
    from carb import tracking

    def reached(name):
        def f(*a, **k):
            raise Reached(name)
        return f

    monkeypatch.setattr(tracking, "configure", lambda *a, **k: None)
    monkeypatch.setattr(tracking, "load_cascade", lambda uri: Source(kind))
    monkeypatch.setattr(tracking, "resolve_version", lambda uri: {"name": "carb-amd-epyc-zoo", "version": "1"})
    for where, name in ((cal, "probe_this_machine"), (cal, "measure_rows"), (cal, "target_rows"),
                        (cal, "device_probes"), (cal, "spec_records"), (zs, "run_zero_shot"),
                        (at, "evaluate_transfer"), (tracking, "start_run")):
        monkeypatch.setattr(where, name, reached(name))
    if rows is not None:
        monkeypatch.setattr(cal, "target_rows", lambda cfg: (rows, "zoo.parquet"))
    return cal


def zoo_rows(n: int = 12) -> pd.DataFrame:
    return pd.DataFrame({"model_name": [f"tv:net{i}" for i in range(n)], "input_size": 224, "batch_size": 1,
                         "precision": "fp32", "device_id": "6a0ea403ee", "device_name": "Other CPU",
                         "device_kind": "cpu", "device_fingerprint": CPU, "config_id": [f"c{i}" for i in range(n)]})


@pytest.mark.parametrize("kind, what", [("zoo", r"a zoo model \(named networks\)"),
                                        ("mixed", r"a combined ResNet \+ zoo model")])
@pytest.mark.parametrize("args, asked", [(["k=0", "probe=6a0ea403ee"], "k=0"), (["k=0", "probe=true"], "k=0"),
                                         (["k=0", "spec=H200"], "k=0"), (["measure=cpu", "k=12"], "measure="),
                                         (["data.path=x.parquet", "k=10", "probe=6a0ea403ee"], "probe=")])
def test_a_zoo_or_combined_source_is_refused_in_one_line_before_any_work(monkeypatch, kind, what, args, asked):
    cal = _stub(monkeypatch, kind)
    cfg = compose("calibrate", [f"source={URI}", "progress.enabled=false", *args])
    with pytest.raises(ConfigError, match=rf"^source: {URI} is {what}; {asked}.* transfers ResNet models only") as e:
        cal.run_calibrate(cfg)
    msg = str(e.value)
    assert "\n" not in msg and f"source={URI} data.path=<file> k=10" in msg and "carb-collect space=zoo" in msg


def test_a_zoo_source_calibrates_on_zoo_rows_without_probes_or_spec(monkeypatch, capsys):
    """data.path with k > 0: the rows are read and the transfer fitted (evaluate_transfer reached) with no
    device probe or spec record consulted (those cost ResNet layers; the target here has a probe on disk)."""
    cal = _stub(monkeypatch, "zoo", rows=zoo_rows())
    cfg = compose("calibrate", [f"source={URI}", "data.path=x.parquet", "k=10", "progress.enabled=false"])
    with pytest.raises(Reached, match="^evaluate_transfer$"):
        cal.run_calibrate(cfg)
    assert "a zoo source: the K rows calibrate the source's prediction" in capsys.readouterr().out


@pytest.mark.parametrize("kind, rows_kind", [("zoo", "resnet"), ("resnet", "zoo")])
def test_rows_of_a_kind_the_source_does_not_predict_are_refused(monkeypatch, kind, rows_kind):
    rows = zoo_rows()
    if rows_kind == "resnet":
        rows = rows.drop(columns="model_name").assign(block="basic", depth=18, width_mult=1.0)
    cal = _stub(monkeypatch, kind, rows=rows)
    cfg = compose("calibrate", [f"source={URI}", "data.path=x.parquet", "k=10", "progress.enabled=false"])
    with pytest.raises(ConfigError, match=rf"^data.path: zoo.parquet holds {rows_kind} rows but the source model"):
        cal.run_calibrate(cfg)


@pytest.mark.parametrize("kind", ["resnet", None])   # None: a model saved before input_kind_ existed (ResNet)
def test_a_resnet_source_goes_on_to_the_transfer(monkeypatch, kind):
    cal = _stub(monkeypatch, kind)
    cfg = compose("calibrate", ["source=models:/cpu@champion", "k=0", "probe=6a0ea403ee", "progress.enabled=false"])
    with pytest.raises(Reached, match="^run_zero_shot$"):
        cal.run_calibrate(cfg)


def test_the_command_exits_2_with_the_line(monkeypatch, capsys):
    """Through the console script's wrapper: exit 2, the one line on stderr, no traceback."""
    import sys

    cal = _stub(monkeypatch, "zoo")
    monkeypatch.setattr(sys, "argv", ["carb-calibrate", "source=models:/z@champion", "k=0", "probe=6a0ea403ee",
                                      "progress.enabled=false"])
    with pytest.raises(SystemExit) as e:
        cal.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and "source: models:/z@champion is a zoo model" in err and "Traceback" not in err
