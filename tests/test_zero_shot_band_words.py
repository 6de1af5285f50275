"""The K = 0 band line of carb-calibrate names the band it rests on: with extra sources, that it is the
multi-source zero-shot's band, on how many CPUs it was measured and which sources are combined here; and
what the 5-95 % limit on P means, in words."""
from __future__ import annotations

import numpy as np

from carb.commands.zero_shot import _print_band


class _Transfer:
    """The attributes ``_print_band`` reads of a probe zero-shot (no latency interval: printed as nan)."""

    def __init__(self, extra: list) -> None:
        self.intervals_ = {}
        self.extra_sources_ = extra

    def source_names(self) -> list[str]:
        return ["b69ebb7443", "34cc4b132c"][: 1 + len(self.extra_sources_)]


def _printed(tr: _Transfer, capsys) -> str:
    """What ``_print_band`` prints, on one line; every printed line fits 120 characters."""
    _print_band(tr, (float(np.log(0.75)), float(np.log(1.34))), "CPUs", 3)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120, out
    return " ".join(out.split())


def test_multi_source_band_names_its_sources_and_devices(capsys):
    out = _printed(_Transfer([object()]), capsys)
    assert "the multi-source zero-shot band x [0.75, 1.34] (measured on 3 CPUs)" in out
    assert "(here: b69ebb7443, 34cc4b132c)" in out
    assert "nothing was measured on this device" in out and "P (within a budget) stays within 5-95 %" in out


def test_single_source_band_is_not_called_multi_source(capsys):
    out = _printed(_Transfer([]), capsys)
    assert "the zero-shot band x [0.75, 1.34] (measured on 3 CPUs)" in out and "multi-source" not in out
    assert "here:" not in out
