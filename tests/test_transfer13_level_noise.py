"""k44b (issue 44): the target-out level band knows each device's own run-to-run noise. Each pair's held-out errors
carry the noise of the device they were measured on; ``level_noise: swap`` takes it out (quadrature, per precision)
and adds the new target's own, so a quiet device no longer inherits a noisy one's width and the reverse."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

MODEL_SD = 0.05   # the transfer's own row error (log), the same on every device


def _pair(src: str, dst: str, noise_sd: float, own_half: float, seed: int, n: int = 40000) -> dict:
    """A pair's held-out log errors: the model's error plus its target device's run-to-run noise ``noise_sd``."""
    rng = np.random.default_rng(seed)
    e = rng.normal(0.0, MODEL_SD, n) + rng.normal(0.0, noise_sd, n)
    return {"pair": (src, dst), "err": e, "precision": np.array(["fp32"] * n), "kind": "cpu",
            "own_half": own_half, "noise": {"fp32": noise_sd, "default": noise_sd}}


def _coverage(band: dict, noise_sd: float, seed: int = 99) -> float:
    """Share of a new device's rows (model error plus its own noise ``noise_sd``) inside ``band``'s fp32 half."""
    rng = np.random.default_rng(seed)
    new = rng.normal(0.0, MODEL_SD, 20000) + rng.normal(0.0, noise_sd, 20000)
    half = max((band.get("precision_log_ratios") or {}).get("fp32", [band["upper"]]))
    return float(np.mean(np.abs(new) <= half))


def _band(records: list[dict], own_noise: float, rule: str) -> dict:
    from carb.model.transfer_prior import configure, held_out_level_band

    return held_out_level_band(records, 0.9, "cpu", configure(level_noise=rule),
                               own_noise={"fp32": own_noise, "default": own_noise})


@pytest.mark.parametrize("pair_noise, own_noise", [(0.15, 0.02), (0.02, 0.15)])
def test_a_band_from_other_devices_noise_covers_the_target_with_its_own(pair_noise, own_noise):
    """Pairs measured on a noisy device (log sd 0.15) and a quiet target (0.02): kept, the band over-covers (> 0.95,
    the Zen 5's bf16); swapped, 0.85-0.95. The reverse (quiet pairs, noisy target: the Zen 4's bf16): kept covers
    < 0.80, swapped 0.85-0.95."""
    recs = [_pair("A", "B", pair_noise, 0.5, seed=1), _pair("B", "A", pair_noise, 0.01, seed=2)]
    keep, swap = _band(recs, own_noise, "keep"), _band(recs, own_noise, "swap")
    kept = _coverage(keep, own_noise)
    assert (kept > 0.95) if pair_noise > own_noise else (kept < 0.80)
    assert 0.85 <= _coverage(swap, own_noise) <= 0.95
    assert "level_noise: swap" in swap["method"] and "level_noise" not in keep["method"]


def test_the_band_width_follows_the_target_noise_and_not_the_pairs():
    """Swapped, the half-width grows with the target's noise as sqrt(h0^2 + (z s)^2) (h0: the noiseless level,
    z 1.645) whatever the pairs' own noise; kept, it follows the pairs' noise and ignores the target's."""
    z = 1.6448536
    quiet = [_pair("A", "B", 0.02, 0.5, seed=3), _pair("B", "A", 0.02, 0.01, seed=4)]
    noisy = [{**r, "err": r["err"] + np.random.default_rng(5 + i).normal(0.0, 0.15, len(r["err"])),
              "noise": {"fp32": float(np.hypot(0.02, 0.15))}} for i, r in enumerate(quiet)]
    for own in (0.0, 0.05, 0.2):
        a, b = _band(quiet, own, "swap")["upper"], _band(noisy, own, "swap")["upper"]
        assert a == pytest.approx(b, rel=0.05)
        assert a == pytest.approx(np.hypot(z * MODEL_SD, z * own), rel=0.06)
    assert _band(quiet, 0.0, "keep")["upper"] == _band(quiet, 0.2, "keep")["upper"]
    assert _band(noisy, 0.0, "keep")["upper"] > 2.0 * _band(quiet, 0.0, "keep")["upper"]


def test_per_precision_noise_is_swapped_per_precision():
    """A pair whose bf16 rows are noisy (0.15) and fp32 quiet (0.02), a target the reverse: swapped, the target's
    bf16 band is narrower than its fp32 band (kept: wider)."""
    from carb.model.transfer_prior import configure, held_out_level_band

    rng = np.random.default_rng(11)
    recs = []
    for i, own_half in enumerate((0.5, 0.01)):
        e32 = rng.normal(0.0, MODEL_SD, 3000) + rng.normal(0.0, 0.02, 3000)
        e16 = rng.normal(0.0, MODEL_SD, 3000) + rng.normal(0.0, 0.15, 3000)
        recs.append({"pair": (f"s{i}", f"t{i}"), "err": np.concatenate([e32, e16]), "kind": "cpu",
                     "precision": np.array(["fp32"] * 3000 + ["bf16"] * 3000), "own_half": own_half,
                     "noise": {"fp32": 0.02, "bf16": 0.15, "default": 0.05}})
    own = {"fp32": 0.15, "bf16": 0.02, "default": 0.05}
    halves = {}
    for rule in ("keep", "swap"):
        b = held_out_level_band(recs, 0.9, "cpu", configure(level_by_precision="own", level_noise=rule),
                                own_noise=own)
        halves[rule] = {p: max((b.get("precision_log_ratios") or {}).get(p, [b["upper"]])) for p in ("fp32", "bf16")}
    assert halves["keep"]["bf16"] > 1.5 * halves["keep"]["fp32"]
    assert halves["swap"]["bf16"] < 0.6 * halves["swap"]["fp32"]


def test_level_noise_is_a_checked_setting():
    """A value outside keep / swap: one line naming transfer.level_noise and the allowed values; the schema and the
    shipped conf agree."""
    from omegaconf import OmegaConf

    from carb.commands.schema.commands import Transfer
    from carb.model.transfer_prior import LEVEL_NOISES, configure

    with pytest.raises(ValueError, match=r"transfer\.level_noise: 'loud'; allowed: keep, swap"):
        configure(level_noise="loud")
    conf = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "calibrate.yaml").transfer.level_noise
    assert conf in LEVEL_NOISES and Transfer.model_fields["level_noise"].default in LEVEL_NOISES


def test_the_benchmark_gives_each_pair_its_target_devices_noise():
    """The benchmark's records carry the noise of the rows they were scored on (their target device's repeat rows:
    per precision, measured; none: the configured floor), one lookup per (target, device)."""
    import pandas as pd

    from scripts.bench.transfer_pairs import _noise_of, repeat_floor

    cache: dict = {}
    assert _noise_of({"target": "latency_ms", "target_device": "quiet", "repeat_rows": None}, cache) == \
        repeat_floor("latency_ms")
    rows = pd.DataFrame({"precision": ["bf16"] * 10 + ["fp32"] * 10, "latency_repeat_spread": [0.3] * 10 + [0.02] * 10,
                         "latency_passes": 2})
    rec = {"target": "latency_ms", "target_device": "noisy", "repeat_rows": rows}
    noise = _noise_of(rec, cache)
    assert noise["bf16"] > 5 * noise["fp32"] and "default" in noise
    assert _noise_of({**rec, "repeat_rows": None}, cache) is noise
