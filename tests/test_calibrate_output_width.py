"""carb-calibrate's report lines within 120 columns (:data:`carb.commands.cli.WIDTH`): the per-target form
lines, the device-probe line and the multi-source base's lines, with the long values real runs give (three
precisions, three source weights, CPU names and dataset paths)."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
from omegaconf import OmegaConf

from carb.commands import calibrate, zero_shot
from carb.commands.cli import WIDTH

EPYC = "AMD EPYC 9B14 96-Core Processor"


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


def test_per_target_form_lines_fit(capsys):
    info = {"form": "precision", "b": 1.0, "k": 10, "a_precision": {"fp32": 0.11, "bf16": 0.52, "fp16": 0.73},
            "default_base": "multi", "source_weights": {"7d0d2ecd64": 0.51, "6a0ea403ee": 0.29, "34cc4b132c": 0.2},
            "bases": {"bf16": {"base": "probe"}, "fp16": {"base": "source"}},
            "precision_loo": {"bf16": {"n": 4, "zero_shot": 0.2, "calibrated": 0.1, "kept": "zero_shot"}}}
    tr = SimpleNamespace(device_name_=EPYC, device_id_="34cc4b132c", stand_ins_={"fp16": "bf16"},
                         unseen_precisions_={"rows": ["fp16"], "probe": ["fp16"]}, calibration_rows_=["a"] * 10,
                         transfer_={"latency_ms": info},
                         intervals_={"latency_ms": {"coverage": 0.9, "lower": -0.2, "upper": 0.3,
                                                    "method": "split conformal on the K rows' leave-one-out errors"}})
    calibrate._print_transfer(tr, pd.DataFrame(), 0)
    out = capsys.readouterr().out
    assert "latency_ms: precision (p^1.000 x per precision" in out and "7d0d2ecd64 0.51" in out
    assert not _too_wide(out), _too_wide(out)


def test_device_probes_line_fits(monkeypatch, capsys):
    import carb.data.probes
    import carb.model.cascade_data

    fp = '{"kind": "cpu"}'
    monkeypatch.setattr(carb.model.cascade_data, "device_identity", lambda rows: (EPYC, "34cc4b132c", fp))
    monkeypatch.setattr(carb.data.probes, "load_probe", lambda dev: pd.DataFrame({"dev": [dev]}))
    got = calibrate.device_probes(SimpleNamespace(device_id_="7d0d2ecd64"), pd.DataFrame())
    out = capsys.readouterr().out
    assert got is not None and "device probes of 7d0d2ecd64 and 34cc4b132c" in out
    assert not _too_wide(out), _too_wide(out)


def test_multi_source_base_lines_fit(monkeypatch, capsys):
    import carb.data.cpu_sources
    import carb.data.probes
    import carb.model.transfer

    skipped = [f"cpu_{d}_resnet_long_dataset_name.csv ({d}: no device probe)" for d in ("aa11", "bb22", "cc33")]
    monkeypatch.setattr(carb.data.cpu_sources, "auto_sources", lambda exclude, has_probe: ([], skipped))
    monkeypatch.setattr(carb.data.probes, "load_probe", lambda dev: None)
    assert zero_shot.auto_extra_models(SimpleNamespace(), "34cc4b132c", None) == []
    labels = [(f"Intel(R) Core(TM) i9-10940X CPU @ 3.30GHz {d} (carb/data/cpu_{d}_resnet.csv)",
               SimpleNamespace(device_id_=d)) for d in ("6a0ea403ee", "5b1c2d3e4f")]
    monkeypatch.setattr(zero_shot, "auto_extra_models", lambda *a: labels)

    class Fitted:
        def __init__(self, other, dispatch=True):
            self.other = other

        def fit_probe(self, *a):
            return self

    monkeypatch.setattr(carb.model.transfer, "TransferredCascade", Fitted)
    cfg = OmegaConf.create({"transfer": {"extra_sources": "auto", "source_weighting": "inverse_loo"}})
    assert len(zero_shot.extra_sources(cfg, SimpleNamespace(device_id_="7d0d2ecd64"), None, None, EPYC,
                                       "34cc4b132c")) == 2
    out = capsys.readouterr().out
    assert "transfer.extra_sources auto: not used" in out and "multi-source base" in out
    assert not _too_wide(out), _too_wide(out)
