"""Issue 44, point accuracy continued: one source's base gets its own offsets' shrink
(``transfer.precision_shrink_single``, chosen leave-one-target-device-out on the single-source pairs by
``python -m scripts.studies.transfer_shrink --single``), the multi-source base keeps ``transfer.precision_shrink``;
the shipped CPU sources' models are trained with ``transfer.extra_source_train`` (part of their cache key)."""
from __future__ import annotations

import numpy as np
import pytest

from test_transfer_auto_sources import XEON, _Fake


def _rows() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic K rows (4 per precision, fp16 truly 1.25x, rows scattered +-0.3 in log around the truth):
    ``(log zero-shot x, log measured yl, residual design Z, precision)``, each (12,)."""
    prec = np.repeat(["fp32", "bf16", "fp16"], 4)
    x = np.linspace(0.0, 3.0, len(prec))
    yl = x + np.where(prec == "fp16", np.log(1.25), 0.0) + np.tile([0.3, -0.3, 0.25, -0.25], 3)
    return x, yl, np.zeros((len(prec), 1)), prec


def test_one_sources_base_takes_the_single_shrink_and_a_multi_source_base_the_other():
    """With ``precision_shrink=0`` and ``precision_shrink_single=auto``: a base of one source pools the precisions
    (empirical Bayes: the rows scatter more than the precisions differ, one common offset), the same transfer
    with extra sources keeps each precision's own mean (fp16 1.25x); unset (None), one source keeps
    ``precision_shrink`` as before."""
    from carb.model.transfer import TransferredCascade, _offsets

    x, yl, Z, prec = _rows()
    held = np.array(["fp32", "bf16", "fp16"])
    single = TransferredCascade(None, precision_shrink=0.0, precision_shrink_single="auto")
    assert single.shrink() == "auto"
    off, _ = single._fit_offsets(x, yl, Z, prec, "probe")
    assert np.ptp(_offsets(off, held)) == pytest.approx(0.0, abs=1e-12)
    multi = TransferredCascade(None, precision_shrink=0.0, precision_shrink_single="auto")
    multi.extra_sources_ = [object()]
    assert multi.shrink() == 0.0
    off, _ = multi._fit_offsets(x, yl, Z, prec, "probe")
    assert _offsets(off, held) == pytest.approx([0.0, 0.0, np.log(1.25)], abs=1e-9)
    assert TransferredCascade(None, precision_shrink=3.0).shrink() == 3.0


def test_the_single_shrink_is_configured_and_validated():
    """conf/calibrate.yaml sets 1 pseudo-row on one source's base (the leave-one-target-out choice); null falls
    back to ``precision_shrink``; a negative value is one line naming the key."""
    from carb.commands.calibrate import transfer_settings
    from carb.commands.checks import check_config
    from carb.commands.cli import compose
    from carb.errors import ConfigError

    assert transfer_settings(compose("calibrate", []))["precision_shrink_single"] == 1.0
    assert transfer_settings(compose("calibrate", ["transfer.precision_shrink_single=null"]))[
        "precision_shrink_single"] is None
    check_config("calibrate", compose("calibrate", ["transfer.precision_shrink_single=auto"]))
    with pytest.raises(ConfigError, match="precision_shrink_single"):
        check_config("calibrate", compose("calibrate", ["transfer.precision_shrink_single=-1"]))


def test_a_shipped_source_is_trained_with_the_configured_overrides(monkeypatch, tmp_path, capsys):
    """``transfer.extra_source_train`` reaches the cascade a shipped CPU dataset's model is built with, and keys
    its cache (another setting is another entry, trained again); a bad override is one line naming the key."""
    from carb.commands import zero_shot
    from carb.commands.cli import compose
    from carb.data.cpu_sources import shipped_cpu_sources
    from carb.errors import ConfigError
    from carb.model import presets

    fits, built = [], []
    monkeypatch.setenv("CARB_CACHE", str(tmp_path))
    monkeypatch.setattr(presets, "build_cascade", lambda model, *a, **k: built.append(model) or _Fake(fits))
    src = next(s for s in shipped_cpu_sources() if s.device_id == XEON)
    from carb.commands.schema.commands import Transfer

    configured = zero_shot.extra_source_train(compose("calibrate", []))
    assert configured == list(zero_shot.EXTRA_SOURCE_TRAIN) == Transfer.model_fields["extra_source_train"].default
    assert "model.specialists.xgb.n_estimators=25" in configured
    zero_shot.shipped_source_model(src, ["model=carb_fast"])
    zero_shot.shipped_source_model(src, ["model=carb_fast", "model.specialists.xgb.n_estimators=7"])
    assert len(fits) == 2 and [m["specialists"]["xgb"]["n_estimators"] for m in built] == [150, 7]
    assert len(list((tmp_path / "sources").glob(f"{XEON}-*.pkl"))) == 2
    assert "model.specialists.xgb.n_estimators=7" in capsys.readouterr().out
    with pytest.raises(ConfigError, match=r"^transfer.extra_source_train: \['model=nope'\]") as e:
        zero_shot.shipped_source_model(src, ["model=nope"])
    assert "\n" not in str(e.value)
