"""Issue 44, point accuracy: a multi-source base. The target CPU's latency predicted by several source CPUs' models,
each transferred by its own device probe and the target's, combined as a weighted geometric mean (equal at K = 0,
after K rows each source weighted by the inverse of its K rows' leave-one-out error); ``transfer.extra_sources``
and ``transfer.source_weighting`` in conf/calibrate.yaml; the benchmark scores it beside the single source."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from test_transfer_lodo import cpu_model  # noqa: F401 - the module's fixture, shared


def _two_sources(cpu_model):  # noqa: F811
    """Two probe zero-shots to the same target CPU "cccccccccc" whose shapes differ: B's target probe times grow
    with each convolution's work (x work^0.3), so B finds big networks relatively slower than A does."""
    from carb.model.transfer import TransferredCascade

    cascade, probe, rows, fp = cpu_model
    tgt = probe.assign(time_ms=probe["time_ms"] * 0.25, device_id="cccccccccc")
    work = (probe["cin"] * probe["cout"] * probe["kernel"] ** 2 * probe["H_in"] ** 2 * probe["batch_size"]).astype(float)
    tgt_b = tgt.assign(time_ms=tgt["time_ms"] * (work / work.median()) ** 0.3)
    a = TransferredCascade(cascade).fit_probe(probe, tgt, fp, "C", "cccccccccc")
    b = TransferredCascade(cascade).fit_probe(probe, tgt_b, fp, "C", "cccccccccc")
    return a, b, rows


def test_k0_multi_source_is_the_geometric_mean_of_the_sources(cpu_model):  # noqa: F811
    """At K = 0 the multi-source base predicts each row as the equal-weight geometric mean of the two sources'
    zero-shots: a target whose truth lies between them (sqrt(pA pB)) is predicted within 2 % (screening's
    monotone-in-batch pass), while either source alone errs by more than 5 % on some row."""
    from carb.model.intervals import screening_predict

    a, b, rows = _two_sources(cpu_model)
    pa, pb = (screening_predict(m, rows)["pred_latency_ms"].to_numpy() for m in (a, b))
    assert np.max(np.abs(np.log(pa / pb))) > 0.1   # the sources disagree in shape
    multi = a.__class__.__new__(a.__class__)
    multi.__dict__.update(a.__dict__)
    multi.add_sources([b])
    assert multi.source_weights_ == [0.5, 0.5] and multi._default_base() == "multi"
    truth = np.sqrt(pa * pb)
    pm = screening_predict(multi, rows)["pred_latency_ms"].to_numpy()
    np.testing.assert_allclose(pm, truth, rtol=0.02)   # screening's monotone-in-batch pass moves a row by ~1 %
    for p in (pa, pb):
        assert 100 * np.max(np.abs(p / truth - 1)) > 5
    assert screening_predict(a, rows)["pred_latency_ms"].to_numpy() == pytest.approx(pa)   # untouched


def test_k_rows_weight_the_source_whose_shape_fits(cpu_model):  # noqa: F811
    """A target that runs as source A predicts (x 0.8, fp16 x 1.3): after 12 K rows ``inverse_loo`` gives A
    nearly all the weight and the held-out rows are predicted within 1 %, better than equal weights; the fitted
    latency entry names the weights per source device."""
    import copy

    from carb.model.intervals import screening_predict

    a, b, rows = _two_sources(cpu_model)
    prec = rows["precision"].to_numpy()
    y = screening_predict(a, rows)["pred_latency_ms"].to_numpy() * 0.8 * np.where(prec == "fp16", 1.3, 1.0)
    rows = rows.assign(latency_ms=y * np.exp(np.random.default_rng(0).normal(0, 0.002, len(rows))))
    cal = rows.groupby("precision").head(4)
    rest = rows.drop(index=cal.index)
    got = {}
    for how in ("inverse_loo", "equal"):
        m = copy.copy(a)
        m.source_weighting = how
        m.add_sources([b]).fit(cal)
        p = screening_predict(m, rest)["pred_latency_ms"].to_numpy()
        got[how] = (100 * float(np.mean(np.abs(p / rest["latency_ms"].to_numpy() - 1))), list(m.source_weights_),
                    m.transfer_["latency_ms"])
    mape, w, info = got["inverse_loo"]
    assert w[0] > 0.9 and mape < 1.0 and mape < got["equal"][0]
    assert got["equal"][1] == [0.5, 0.5]
    assert info["default_base"] == "multi" and info["form"] == "precision" and info["b"] == 1.0
    assert list(info["source_weights"].values()) == pytest.approx(w, abs=1e-4)


def test_add_sources_refuses_what_cannot_be_combined(cpu_model):  # noqa: F811
    """Only probe zero-shots to the same target combine: a transfer without probes, another target's zero-shot,
    or a base that is not a probe zero-shot is one DatasetError; a bad weighting is refused when built."""
    from carb.errors import DatasetError
    from carb.model.transfer import TransferredCascade

    a, b, rows = _two_sources(cpu_model)
    cascade, probe, _, fp = cpu_model
    with pytest.raises(DatasetError, match="fit_probe"):
        a.add_sources([TransferredCascade(cascade)])
    with pytest.raises(DatasetError, match="needs a probe zero-shot"):
        TransferredCascade(cascade).add_sources([b])
    other = TransferredCascade(cascade).fit_probe(probe, probe.assign(device_id="dddddddddd"), fp, "D", "dddddddddd")
    with pytest.raises(DatasetError, match="dddddddddd"):
        a.add_sources([other])
    with pytest.raises(DatasetError, match="transfer.source_weighting"):
        TransferredCascade(cascade, source_weighting="median")


def test_calibrate_settings_and_extra_sources(cpu_model, monkeypatch):  # noqa: F811
    """conf/calibrate.yaml: ``transfer.source_weighting`` reaches the transfer (a value outside inverse_loo /
    equal is one line naming the field); ``transfer.extra_sources: []`` gives no other source, and a model of
    the source's own CPU is refused in one line naming the key."""
    from carb.commands import calibrate
    from carb.commands.checks import check_config
    from carb.commands.cli import compose
    from carb.errors import ConfigError

    assert calibrate.transfer_settings(compose("calibrate", []))["source_weighting"] == "inverse_loo"
    assert calibrate.transfer_settings(compose("calibrate", ["transfer.source_weighting=equal"]))[
        "source_weighting"] == "equal"
    with pytest.raises(ConfigError, match="source_weighting"):
        check_config("calibrate", compose("calibrate", ["transfer.source_weighting=median"]))
    cascade, probe, rows, fp = cpu_model
    assert calibrate.extra_sources(compose("calibrate", ["transfer.extra_sources=[]"]), cascade, probe, fp, "C",
                                   "cccccccccc") == []
    monkeypatch.setattr(calibrate.tracking, "load_cascade", lambda uri: cascade)
    cfg = compose("calibrate", ["transfer.extra_sources=[models:/other@champion]"])
    with pytest.raises(ConfigError, match="transfer.extra_sources: models:/other@champion is of CPU"):
        calibrate.extra_sources(cfg, cascade, probe, fp, "C", "cccccccccc")


def test_benchmark_prints_single_source_beside_multi():
    """The benchmark's ``single_source`` line: per K the worst CPU pair-and-precision latency MAPE of CARB's
    multi-source answer beside the pair's source alone; without single-source rows it says so."""
    from scripts.bench.transfer_pairs import single_source_line

    rows = []
    for k, multi, single, mm, ms in ((0, "zero_shot", "zero_shot_single", 18.0, 21.5),
                                     (10, "calibrated", "calibrated_single", 13.5, 15.2),
                                     (12, "calibrated", "calibrated_single", 13.1, 16.0)):
        for p, f in (("fp32", 1.0), ("bf16", 0.5)):
            rows += [{"source": "X", "target_device": "Z", "target": "latency_ms", "precision": p, "k": k,
                      "model": multi, "mape_pct": mm * f},
                     {"source": "X", "target_device": "Z", "target": "latency_ms", "precision": p, "k": k,
                      "model": single, "mape_pct": ms * f}]
    t = pd.DataFrame(rows)
    line = single_source_line(t, kq=12)
    assert line == ("single_source (CPU pairs): k0_max_mape multi=18.0 single=21.5; kq_max_mape multi=13.1 "
                    "single=16.0; k10_max_mape multi=13.5 single=15.2")
    assert "not scored" in single_source_line(t[~t.model.str.endswith("single")], kq=12)
