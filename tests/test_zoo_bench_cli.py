"""scripts/bench/zoo.py's command line: ``--zoo-latency`` dotted keys set nested settings, and every
``--zoo-latency`` (each device kind's section too) and ``--zoo-transfer`` setting is checked (one line, exit 2)
before any part runs or the zoo data or the traces load, whatever ``--part`` is."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.script_module import load_script

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    """scripts/bench/zoo.py as a module (it is a script, not a package)."""
    return load_script("scripts/bench/zoo.py", "zoo_bench_cli")


def test_dotted_key_sets_the_nested_setting_of_its_device_kind_only():
    """``per_device.cpu.cpu_terms=[...]`` replaces the CPU section's terms (a GPU's settings are unchanged);
    a dotted per-device key wins over the same top-level key for its kind; a section made where none was."""
    bench = _bench()
    cpu = bench.zoo_latency_settings(["per_device.cpu.cpu_terms=[extern_calls]"], device_kind="cpu")
    assert cpu["cpu_terms"] == ["extern_calls"]
    assert bench.zoo_latency_settings(["per_device.cpu.cpu_terms=[extern_calls]"], device_kind="gpu") \
        == bench.zoo_latency_settings([], device_kind="gpu")
    both = ["gemm_regimes=false", "per_device.cpu.gemm_regimes=true"]
    assert bench.zoo_latency_settings(both, device_kind="cpu")["gemm_regimes"] is True
    assert bench.zoo_latency_settings(both, device_kind="gpu")["gemm_regimes"] is False
    gpu = bench.zoo_latency_settings(["per_device.gpu.outside=clip"], device_kind="gpu")
    assert gpu["outside"] == "clip" and bench.zoo_latency_settings([], device_kind="gpu")["outside"] != "clip"


@pytest.mark.parametrize("bad, needle", [
    ("per_device.cpu.cpu_terms=[gemv]", "per_device.cpu.cpu_terms"),
    ("per_device.cpu.terms=[extern_calls]", "per_device.cpu.terms"),
    ("per_device.tpu.margin=0.1", "tpu"),
    ("base.kind=additive", "base"),
])
def test_bad_dotted_key_is_one_line_naming_it(bad, needle, capsys):
    """A bad nested value, an unknown nested key or kind, or a value used as a section: one line, exit 2."""
    with pytest.raises(SystemExit) as e:
        _bench().zoo_latency_settings([bad], device_kind="cpu")
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("--zoo-latency: ") and needle in err and "allowed" in err and "\n" not in err


@pytest.mark.parametrize("part", ["gpu", "device"], ids=["timm-files", "new-device"])
def test_bad_setting_refused_before_the_zoo_loads(part, monkeypatch, capsys):
    """A bad ``--zoo-latency`` value stops the run before timm's files or the traces are read."""
    bench = _bench()

    def must_not_load(*a, **k):
        raise AssertionError("the zoo data loaded before the settings were checked")

    monkeypatch.setattr(bench, "load_zoo_bench", must_not_load)
    monkeypatch.setattr(bench, "with_trace", must_not_load)
    monkeypatch.setattr(sys, "argv", ["zoo.py", "--part", part, "--no-census",
                                      "--zoo-latency", "per_device.cpu.cpu_terms=[gemv]"])
    with pytest.raises(SystemExit) as e:
        bench.main()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "per_device.cpu.cpu_terms" in err and "\n" not in err


def _no_part_runs(bench, monkeypatch) -> list[str]:
    """Replace every part runner of ``bench`` (and the CPU part's cascade and data) by a recorder; returns the
    list the names of those called are appended to."""
    calls: list[str] = []
    for name in ("registered", "cpu_part", "gpu_part", "device_part", "load_zoo_bench", "with_trace"):
        monkeypatch.setattr(bench, name, lambda *a, _n=name, **k: calls.append(_n))
    return calls


@pytest.mark.parametrize("part", ["all", "cpu", "gpu", "device"])
@pytest.mark.parametrize("flag, bad, needle, allowed", [
    ("--zoo-latency", "per_device.cpu.cpu_terms=[gemv]", "per_device.cpu.cpu_terms", "conv_weight_dram"),
    ("--zoo-latency", "per_device.gpu.outside=sideways", "per_device.gpu.outside", "overshoot"),
    ("--zoo-transfer", "k=-1", "k:", ">= 0"),
    ("--zoo-transfer", "same_stak=true", "same_stak", "same_stack"),
], ids=["cpu-terms-item", "gpu-outside", "transfer-k", "transfer-key"])
def test_every_setting_checked_before_any_part_whatever_the_part(part, flag, bad, needle, allowed, monkeypatch,
                                                                capsys, tmp_path):
    """A bad ``--zoo-latency`` (a per-device item too) or ``--zoo-transfer`` value is one line naming it and
    what is allowed, exit 2, before any part runs, whichever ``--part`` is given (the transfer settings are
    read by the device part only, but a bad one is never silently ignored)."""
    bench = _bench()
    calls = _no_part_runs(bench, monkeypatch)
    monkeypatch.setattr(sys, "argv", ["zoo.py", "--part", part, "--no-census", "--out", str(tmp_path / "o.json"),
                                      flag, bad])
    with pytest.raises(SystemExit) as e:
        bench.main()
    assert e.value.code == 2
    assert calls == []
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{flag}: ") and needle in err and allowed in err and "\n" not in err
    assert not (tmp_path / "o.json").exists()
