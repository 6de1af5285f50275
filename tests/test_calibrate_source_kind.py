"""carb-calibrate decides from the source model's input kind (:func:`carb.design.identity.input_kind`) whether
it can transfer it: a zoo or combined model is refused in one line naming the source, why and what works,
right after loading it: before a probe, a measurement, a fit or a logged run (exit 2 through the command)."""
from __future__ import annotations

import pytest

from carb.commands.cli import compose
from carb.errors import ConfigError

CPU = '{"kind": "cpu", "isa": ["avx2", "avx512f"]}'


class Source:
    """A loaded CPU 'model' of input kind ``kind`` (what :class:`carb.model.cascade.CostCascade` records)."""

    targets_ = ["peak_memory_MB", "latency_ms"]
    device_fingerprint_, device_name_, device_id_ = CPU, "AMD EPYC", "34cc4b132c"

    def __init__(self, kind: str | None) -> None:
        if kind is not None:
            self.input_kind_ = kind


def _stub_everything_after_loading(monkeypatch, kind):
    """``tracking`` answers with a Source of ``kind``; every later step fails the test if it is reached."""
    import carb.commands.calibrate as cal
    import carb.commands.zero_shot as zs
    from carb import tracking

    monkeypatch.setattr(tracking, "configure", lambda *a, **k: None)
    monkeypatch.setattr(tracking, "load_cascade", lambda uri: Source(kind))
    monkeypatch.setattr(tracking, "resolve_version", lambda uri: {"name": "carb-amd-epyc-zoo", "version": "1"})
    for where, name in ((cal, "target_probe_id"), (cal, "measure_rows"), (cal, "target_rows"),
                        (zs, "run_zero_shot"), (tracking, "start_run")):
        monkeypatch.setattr(where, name, lambda *a, _n=name, **k: pytest.fail(f"{_n} reached before refusing"))
    return cal


@pytest.mark.parametrize("kind, what", [("zoo", r"a zoo model \(named networks\)"),
                                        ("mixed", r"a combined ResNet \+ zoo model")])
@pytest.mark.parametrize("args", [["k=0", "probe=6a0ea403ee"], ["k=0", "probe=true"], ["measure=cpu", "k=12"],
                                  ["data.path=x.parquet", "k=10"]])
def test_a_zoo_or_combined_source_is_refused_in_one_line_before_any_work(monkeypatch, kind, what, args):
    cal = _stub_everything_after_loading(monkeypatch, kind)
    uri = "models:/carb-amd-epyc-34cc4b132c-zoo@champion"
    cfg = compose("calibrate", [f"source={uri}", "progress.enabled=false", *args])
    start = rf"^source: {uri} is {what}; carb-calibrate transfers ResNet models only"
    with pytest.raises(ConfigError, match=start) as e:
        cal.run_calibrate(cfg)
    msg = str(e.value)
    assert "\n" not in msg and "carb-train data.path=" in msg and "source=models:/<ResNet model>@champion" in msg


@pytest.mark.parametrize("kind", ["resnet", None])   # None: a model saved before input_kind_ existed (ResNet)
def test_a_resnet_source_goes_on_to_the_transfer(monkeypatch, kind):
    cal = _stub_everything_after_loading(monkeypatch, kind)
    cfg = compose("calibrate", ["source=models:/cpu@champion", "k=0", "probe=6a0ea403ee", "progress.enabled=false"])
    with pytest.raises(pytest.fail.Exception, match="target_probe_id reached"):
        cal.run_calibrate(cfg)


def test_the_command_exits_2_with_the_line(monkeypatch, capsys):
    """Through the console script's wrapper: exit 2, the one line on stderr, no traceback."""
    import sys

    cal = _stub_everything_after_loading(monkeypatch, "zoo")
    monkeypatch.setattr(sys, "argv", ["carb-calibrate", "source=models:/z@champion", "k=0", "probe=6a0ea403ee",
                                      "progress.enabled=false"])
    with pytest.raises(SystemExit) as e:
        cal.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and "source: models:/z@champion is a zoo model" in err and "Traceback" not in err
