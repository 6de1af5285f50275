"""CPU package energy from Linux RAPL through the powercap interface (``/sys/class/powercap``).

Each CPU package is a top-level zone ``intel-rapl:<N>`` (also on AMD processors with the
``intel_rapl``/``amd_energy`` powercap driver) whose ``name`` starts with ``package``; its
``energy_uj`` is a cumulative counter in microjoules that wraps around at ``max_energy_range_uj``.
Sub-zones (``intel-rapl:0:0`` core, uncore, dram) are inside the package and are not added again.

Since 2020 (CVE-2020-8694) ``energy_uj`` is readable only by root on most distributions, and virtual
machines usually expose no powercap at all; then :attr:`RaplReader.reason` says why and energy is
recorded as missing. RAPL measures the whole package, including other processes on the machine.

A counter wraps at most once between two reads if the reads are closer than
``max_energy_range_uj / power`` (about 262 kJ / 200 W = 22 minutes on common parts); the timed loops
here are seconds long.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_PACKAGE_ZONE = re.compile(r"^intel-rapl:\d+$")


@dataclass(frozen=True)
class RaplDomain:
    """One package zone: its folder, ``name`` and wrap-around range (µJ)."""

    path: Path
    name: str
    max_energy_range_uj: int


class RaplReader:
    """Reads the package-domain energy counters under ``root``.

    ``available`` tells whether every package counter could be read; otherwise ``reason`` is a
    one-line explanation (no powercap folder, no package zones, permission denied, ...)."""

    def __init__(self, root: str | Path = "/sys/class/powercap") -> None:
        self.root = Path(root)
        self.domains: list[RaplDomain] = []
        self.reason: str | None = None
        try:
            self._discover()
        except OSError as e:  # unreadable tree
            self.domains = []
            self.reason = f"RAPL powercap not readable under {self.root}: {e.strerror or e}"

    @property
    def available(self) -> bool:
        return self.reason is None and bool(self.domains)

    def _discover(self) -> None:
        if not self.root.is_dir():
            self.reason = (f"RAPL powercap not available: {self.root} does not exist (no RAPL driver, "
                           f"or a virtual machine)")
            return
        zones = sorted((p for p in self.root.iterdir() if _PACKAGE_ZONE.match(p.name)),
                       key=lambda p: int(p.name.split(":")[1]))
        for z in zones:
            name = _read_text(z / "name", default="")
            if not name.startswith("package"):
                continue
            rng = _read_text(z / "max_energy_range_uj", default="")
            self.domains.append(RaplDomain(z, name, int(rng) if rng.isdigit() else 0))
        if not self.domains:
            self.reason = f"RAPL powercap has no package zones (intel-rapl:N named package-*) under {self.root}"
            return
        for d in self.domains:
            try:
                int((d.path / "energy_uj").read_text().strip())
            except PermissionError:
                self.reason = (f"RAPL counter {d.path / 'energy_uj'} is not readable (permission denied; "
                               f"root only since CVE-2020-8694)")
                return
            except (OSError, ValueError) as e:
                self.reason = f"RAPL counter {d.path / 'energy_uj'} is not readable: {e}"
                return

    def read_energy_uj(self) -> tuple[int, ...]:
        """Current counter of each package domain, microjoules (raises OSError if unreadable)."""
        return tuple(int((d.path / "energy_uj").read_text().strip()) for d in self.domains)

    def energy_between_J(self, before: tuple[int, ...], after: tuple[int, ...]) -> float:
        """Joules consumed between two readings, summed over packages, one wrap-around per domain
        handled (``after < before`` means the counter passed ``max_energy_range_uj``)."""
        total = 0
        for d, b, a in zip(self.domains, before, after):
            delta = a - b
            if delta < 0:
                delta += d.max_energy_range_uj
            total += delta
        return total / 1e6

    def read_energy_J(self) -> float:
        """Sum of the package counters in joules (cumulative since an arbitrary origin; not
        wrap-safe on its own, use :meth:`energy_between_J` for differences)."""
        return sum(self.read_energy_uj()) / 1e6


def _read_text(path: Path, default: str) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default
