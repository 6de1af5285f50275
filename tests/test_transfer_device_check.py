"""A CPU model used on another CPU (carb.model.device_check): one warning line from carb.load_model(...).predict
and carb-screen, every candidate flagged ``other_device``; the same CPU, a GPU model or a model without a
fingerprint: no warning."""
from __future__ import annotations

import json

from carb.model.device_check import other_device

EPYC = {"kind": "cpu", "vendor": "AuthenticAMD", "family": "26", "model": "2", "stepping": "1",
        "model_name": "AMD EPYC", "isa": ["avx2", "avx512_bf16", "avx512f"], "logical_cpus": 2, "usable_cores": 2,
        "threads": 1, "hypervisor": "KVM"}
XEON = {**EPYC, "vendor": "GenuineIntel", "family": "6", "model": "167", "model_name": "Intel(R) Xeon(R) Processor",
        "isa": ["amx_bf16", "avx2", "avx512_bf16", "avx512_fp16", "avx512f"]}


class Model:
    def __init__(self, fp, device_id="b69ebb7443"):
        self.device_fingerprint_ = json.dumps(fp) if fp is not None else None
        self.device_id_ = device_id


def test_other_device_names_both_cpus_and_the_isa_difference():
    line = other_device(Model(EPYC), here=XEON)
    assert "\n" not in line and "'AMD EPYC' (device_id b69ebb7443)" in line and "'Intel(R) Xeon(R) Processor'" in line
    assert "isa +amx_bf16 +avx512_fp16" in line and "other_device=True" in line and "carb-calibrate" in line
    assert other_device(Model(EPYC), here={**EPYC, "threads": 2, "hypervisor": "xen"}) is None   # settings only
    assert "logical_cpus 2 vs 16" in other_device(Model(EPYC), here={**EPYC, "logical_cpus": 16})
    assert other_device(Model({"kind": "cuda", "name": "NVIDIA H200"}), here=XEON) is None          # a GPU model
    assert other_device(Model(None), here=XEON) is None and other_device(Model("not json"), here=XEON) is None


def test_predict_on_another_cpu_warns_once_and_flags_every_row(monkeypatch, capsys):
    """Predictor.predict with a model of the EPYC on a machine that reads as the Xeon: one stderr line
    over two calls, ``other_device`` True on every row; on the EPYC itself: False, no line."""
    from carb.analysis.predictor import Predictor
    from carb.model import device_check
    from tests.test_predictor import KNOBS
    from tests.test_screening import AnalyticModel

    m = AnalyticModel()
    m.device_fingerprint_, m.device_id_ = json.dumps(EPYC), "b69ebb7443"
    monkeypatch.setattr(device_check, "this_cpu", lambda: XEON)
    p = Predictor(m, "models:/x/1")
    out = p.predict(KNOBS.drop(columns="top1"))
    p.predict(KNOBS.drop(columns="top1"))
    err = capsys.readouterr().err
    assert out["other_device"].all() and err.count("warning: this model describes the CPU 'AMD EPYC'") == 1
    monkeypatch.setattr(device_check, "this_cpu", lambda: EPYC)
    out = Predictor(m).predict(KNOBS.drop(columns="top1"))
    assert not out["other_device"].any() and "warning" not in capsys.readouterr().err
