"""Issue 44 item 4 (the probe): carb-probe times every precision a source model predicts (fp16 included) by
default, carb-calibrate probe=true asks for the source model's own precisions, a probe lacking a precision
is detectable (carb.data.probes.missing_precisions), and carb-quickstart calibrate=true probes again a CPU
whose probe lacks one. The timing itself is replayed (no real convolutions)."""
from __future__ import annotations

import pandas as pd
import pytest

from carb.data.probes import PROBE_COLUMNS, load_probe, missing_precisions
from carb.design.arch import PRECISIONS
from carb.model.domain import predicted_precisions


def table(precisions, device="d0") -> pd.DataFrame:
    return pd.DataFrame([{"device_id": device, "threads": 1, "precision": p, "cin": 16, "cout": 16, "kernel": 3,
                          "stride": 1, "H_in": 8, "batch_size": 1, "time_ms": 0.5, "backend": "Mkldnn"}
                         for p in precisions], columns=list(PROBE_COLUMNS))


def test_missing_precisions_of_a_probe():
    assert missing_precisions(None, ["fp32", "fp16"]) == ["fp32", "fp16"]
    assert missing_precisions(table(["fp32", "bf16"]), ["fp32", "fp16", "bf16"]) == ["fp16"]
    assert missing_precisions(table(PRECISIONS), PRECISIONS) == []
    bad = table(["fp32", "fp16"])
    bad.loc[bad["precision"] == "fp16", "time_ms"] = float("nan")     # a precision without a usable timing
    assert missing_precisions(bad, ["fp32", "fp16", "fp16"]) == ["fp16"]


def test_the_shipped_zen5_probe_covers_every_precision_the_reference_predicts():
    from carb.data.io import reference_dataset

    ref = reference_dataset("reference")
    assert missing_precisions(load_probe("b69ebb7443"), sorted(ref["precision"].unique())) == []


def test_predicted_precisions_are_the_measured_and_the_probed_ones():
    domain = {"categorical": {"precision": ["bf16", "fp32"]}, "probed": {"latency_ms": ["fp16"]}}
    assert predicted_precisions(domain) == ["fp32", "fp16", "bf16"]
    assert predicted_precisions({"categorical": {"precision": ["fp32"]}}) == ["fp32"]
    assert predicted_precisions(None) == []


@pytest.fixture
def replayed(monkeypatch, tmp_path):
    """carb-probe with run_probe replayed: records the precisions asked for, returns a table of them."""
    import carb.measure.probe as mp

    asked = []

    def fake_run_probe(plan, precisions, device_id, **kw):
        asked.append(list(precisions))
        return table(list(precisions), device_id)

    monkeypatch.setattr(mp, "run_probe", fake_run_probe)
    monkeypatch.setenv("CARB_HOME", str(tmp_path))
    return asked


def test_carb_probe_times_every_precision_by_default(replayed, tmp_path):
    from carb.commands.cli import compose
    from carb.commands.probe import run_probe_command

    out = run_probe_command(compose("probe", ["n=4", "max_MMAC=2", "progress.enabled=false",
                                              f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"]))
    assert replayed == [list(PRECISIONS)] and "fp16" in out["precisions"]
    assert missing_precisions(load_probe(out["device_id"]), PRECISIONS) == []
    run_probe_command(compose("probe", ["n=4", "max_MMAC=2", "precisions=[fp32]", "progress.enabled=false",
                                        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"]))
    assert replayed[-1] == ["fp32"]
    assert missing_precisions(load_probe(out["device_id"]), PRECISIONS) == ["fp16", "bf16"]   # detectable


def test_calibrate_probe_asks_for_the_source_models_precisions(monkeypatch):
    import carb.commands.probe as probe_cmd
    from carb.commands.calibrate import probe_this_machine
    from carb.commands.cli import compose

    seen = []
    monkeypatch.setattr(probe_cmd, "run_probe_command", lambda c: seen.append(c.precisions) or {"device_id": "d0"})

    class Source:
        domain_ = {"categorical": {"precision": ["fp32", "bf16", "fp16"]}}

    cfg = compose("calibrate", ["measure=cpu", "device=cpu", "probe=true"])
    assert probe_this_machine(cfg, Source()) == "d0" and list(seen[-1]) == ["fp32", "fp16", "bf16"]
    probe_this_machine(cfg, None)                       # no source domain: carb-probe's default (every precision)
    assert seen[-1] is None
    cfg = compose("calibrate", ["measure=cpu", "device=cpu", "probe=true", "probe_run.precisions=[bf16]"])
    probe_this_machine(cfg, Source())
    assert list(seen[-1]) == ["bf16"]                   # given by the user: kept


@pytest.mark.parametrize("on_disk, want", [(None, True), (["fp32", "bf16"], True), (list(PRECISIONS), False)])
def test_quickstart_probes_again_a_cpu_whose_probe_lacks_a_predicted_precision(monkeypatch, on_disk, want):
    import carb.data.probes as probes
    from carb.commands.cli import compose
    from carb.commands.quickstart import probe_first

    monkeypatch.setattr(probes, "load_probe", lambda dev: None if on_disk is None else table(on_disk, dev))
    cfg = compose("calibrate", ["measure=cpu", "device=cpu"])
    probe_first(cfg, [], list(PRECISIONS))
    assert (str(cfg.get("probe")).lower() == "true") is want
