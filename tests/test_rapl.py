"""Linux RAPL powercap reader against a fake /sys/class/powercap tree."""
from __future__ import annotations

from pathlib import Path

import pytest

from carb.measure.rapl import RaplReader


def zone(root: Path, n: int, name: str, energy_uj: int, max_range: int = 262_143_328_850) -> Path:
    z = root / f"intel-rapl:{n}"
    z.mkdir(parents=True)
    (z / "name").write_text(name + "\n")
    (z / "energy_uj").write_text(f"{energy_uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_range}\n")
    return z


def test_delta_over_packages(tmp_path):
    z0 = zone(tmp_path, 0, "package-0", 1_000_000)
    z1 = zone(tmp_path, 1, "package-1", 5_000_000)
    sub = tmp_path / "intel-rapl:0:0"  # a core sub-domain: not a package, must be ignored
    sub.mkdir()
    (sub / "name").write_text("core\n")
    r = RaplReader(tmp_path)
    assert r.available and [d.name for d in r.domains] == ["package-0", "package-1"]
    before = r.read_energy_uj()
    (z0 / "energy_uj").write_text("3500000\n")
    (z1 / "energy_uj").write_text("5500000\n")
    assert r.energy_between_J(before, r.read_energy_uj()) == pytest.approx(2.5 + 0.5)


def test_wrap_around(tmp_path):
    z = zone(tmp_path, 0, "package-0", 999_000, max_range=1_000_000)
    r = RaplReader(tmp_path)
    before = r.read_energy_uj()
    (z / "energy_uj").write_text("4000\n")  # passed the 1 J range: 1000 + 4000 uJ consumed
    assert r.energy_between_J(before, r.read_energy_uj()) == pytest.approx(0.005)


def test_absent_tree_gives_reason(tmp_path):
    r = RaplReader(tmp_path / "nope")
    assert not r.available and "does not exist" in r.reason


def test_no_package_zone(tmp_path):
    zone(tmp_path, 0, "psys", 1)
    r = RaplReader(tmp_path)
    assert not r.available and "no package zones" in r.reason


def test_unreadable_counter(tmp_path):
    z = zone(tmp_path, 0, "package-0", 1)
    (z / "energy_uj").unlink()
    (z / "energy_uj").mkdir()  # reading a directory fails like an unreadable file
    r = RaplReader(tmp_path)
    assert not r.available and "not readable" in r.reason


def test_permission_denied_gives_reason(tmp_path, monkeypatch):
    zone(tmp_path, 0, "package-0", 1)
    real = Path.read_text

    def read_text(self, *a, **kw):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", read_text)
    r = RaplReader(tmp_path)
    assert not r.available and "permission denied" in r.reason and "CVE-2020-8694" in r.reason


def test_cpu_meter_reads_a_moving_counter(tmp_path):
    """The CPU meter's energy is the RAPL delta over the timed loop (counter advanced by each read)."""
    import math

    from carb.measure.cpu import CpuMeter
    from carb.design.resnet import build_model
    from carb.design.arch import ArchConfig

    z = zone(tmp_path, 0, "package-0", 10_000_000)
    r = RaplReader(tmp_path)
    real_read = r.read_energy_uj

    def advancing():
        v = real_read()
        (z / "energy_uj").write_text(f"{v[0] + 2_000_000}\n")  # +2 J per read
        return v

    r.read_energy_uj = advancing
    cfg = ArchConfig("basic", 8, 0.25, 32, 1, "fp32", False, num_classes=10)
    with CpuMeter(dict(n_runs=2, n_warmup=1, min_window_s=0, cooldown_s=0, util_window_s=0,
                       kernel_launches=False, threads=1), rapl=r) as m:
        row = m.measure(build_model(cfg), cfg)
    assert row["energy_window_J"] == pytest.approx(2.0)
    assert row["energy_J"] == pytest.approx(2.0 / row["n_runs"])  # per batch
    assert row["avg_power_W"] == pytest.approx(2.0 / row["window_s"])
    assert "energy_J" not in (row["missing_reason"] or "") and not math.isnan(row["energy_J"])
