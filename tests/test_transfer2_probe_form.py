"""Zero-shot CPU transfer from two device probes (TransferredCascade.fit_probe): only the convolutions are
replaced by the target's, the rest of the network scales as the probes' fp32 ratio. Synthetic two-device
physics with a known answer: the source spends 70 % of its time in convolutions, the target runs every
convolution 1.25x slower except fp16, which it runs natively (AVX-512 FP16) at 0.75x the source's bf16
cost, where the source has only the fallback path."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from carb.model.transfer import TransferredCascade, other_ratio

CPU_NO_FP16 = json.dumps({"kind": "cpu", "isa": ["avx2", "avx512f", "avx512bw", "avx512vl", "avx512_bf16"]})
CPU_FP16 = json.dumps({"kind": "cpu", "isa": ["avx2", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                                              "avx512_fp16", "amx_bf16", "amx_tile"]})
CONV_SHARE, SLOWER, FP16_VS_BF16 = 0.7, 1.25, 0.75


class ConvSource:
    """A source 'model' whose latency is its probe's convolution time / CONV_SHARE (set ``conv``)."""

    targets_ = ["latency_ms"]
    intervals_: dict = {}
    device_fingerprint_ = CPU_NO_FP16
    conv = None

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        prec = X["precision"].astype(str).to_numpy()
        out = np.empty(len(X))
        for p in np.unique(prec):
            out[prec == p] = self.conv.network_ms(X[prec == p], p) / CONV_SHARE
        return pd.DataFrame({"pred_latency_ms": out}, index=X.index)


@pytest.fixture(scope="module")
def zero_shot():
    """(fitted zero-shot transfer, rows, measured target latency)."""
    from carb.data.io import reference_dataset
    from carb.resources import DATA_DIR

    probe = pd.read_csv(DATA_DIR / "device-probes.csv")
    src_probe = probe[probe["device_id"] == "b69ebb7443"].groupby("precision").head(100)   # fp16: fallback
    tgt = src_probe[src_probe["precision"] != "fp16"].assign(time_ms=lambda t: t["time_ms"] * SLOWER)
    fp16 = tgt[tgt["precision"] == "bf16"].assign(precision="fp16", time_ms=lambda t: t["time_ms"] * FP16_VS_BF16 / SLOWER)
    tgt = pd.concat([tgt, fp16]).assign(device_id="cccccccccc")
    src = ConvSource()
    tr = TransferredCascade(src).fit_probe(src_probe, tgt, CPU_FP16, "Synthetic CPU C", "cccccccccc")
    src.conv = tr.probe_models_["source"]          # the source's own physics: its probe's convolutions
    rows = reference_dataset().groupby("precision").head(6).reset_index(drop=True)   # knob-consistent networks
    prec = rows["precision"].astype(str).to_numpy()
    conv_t, rest = np.empty(len(rows)), np.empty(len(rows))
    for p in np.unique(prec):
        m = prec == p
        conv_t[m] = tr.probe_models_["target"].network_ms(rows[m], p)
        rest[m] = src.conv.network_ms(rows[m], tr.stand_ins_.get(p, p)) * (1 / CONV_SHARE - 1) * SLOWER
    return tr, rows, conv_t + rest


def test_other_ratio_is_the_probes_fp32_ratio(zero_shot):
    tr, _, _ = zero_shot
    assert tr.stand_ins_ == {"fp16": "bf16"}
    assert tr.probe_other_ratio_ == pytest.approx(SLOWER, rel=1e-6)
    assert other_ratio(tr.probe_models_, pd.DataFrame(columns=["precision"]), precision="int8") == 1.0


def test_zero_shot_replaces_only_the_convolutions(zero_shot):
    """Exact on every precision, the fallback-to-native fp16 included; the whole-network conv ratio (the
    earlier form, still used by models fitted without ``probe_other_ratio_``) misses fp16 by far more."""
    tr, rows, y = zero_shot
    p = tr.predict(rows)["pred_latency_ms"].to_numpy()
    assert np.allclose(p, y, rtol=1e-6)
    old = TransferredCascade.__new__(TransferredCascade)
    old.__dict__.update({k: v for k, v in tr.__dict__.items() if k != "probe_other_ratio_"})
    q = old.predict(rows)["pred_latency_ms"].to_numpy()
    fp16 = rows["precision"].astype(str).to_numpy() == "fp16"
    assert np.median(np.abs(q[fp16] / y[fp16] - 1)) > 0.1   # 0.75 p against 0.3 x 1.25 p + 0.7 x 0.75 p
    assert np.median(np.abs(q[~fp16] / y[~fp16] - 1)) < 1e-6   # uniform 1.25x: both forms agree there


def test_k_rows_after_the_probes_keep_the_corrected_base(zero_shot):
    """K = 6 rows of a target that is exactly the probes' answer x 0.8: the probe base is kept, and the
    held-out rows are within 1 %."""
    tr, rows, y = zero_shot
    rows = rows.assign(latency_ms=0.8 * y, device_fingerprint=CPU_FP16, device_id="cccccccccc",
                       device_name="Synthetic CPU C", device_kind="cpu")
    import copy

    fitted = copy.copy(tr).fit(rows.iloc[::3])
    assert fitted.transfer_["latency_ms"]["default_base"] == "probe"
    rest = rows.drop(index=rows.index[::3])
    p = fitted.predict(rest)["pred_latency_ms"].to_numpy()
    assert np.max(np.abs(p / rest["latency_ms"].to_numpy() - 1)) < 0.01
