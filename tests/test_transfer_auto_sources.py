"""Issue 44: the multi-source base by default. ``transfer.extra_sources: auto`` (conf/calibrate.yaml) combines the
source's probe zero-shot with a model of each CPU dataset CARB ships with a device probe (the EPYC Zen 4 and the
Xeon, carb/data), except the source's and the target's own CPU (by device id or fingerprint); each model is
trained with model=carb_fast and cached by the data's hash; ``[]`` keeps the source alone; a bad value is one
line (exit 2)."""
from __future__ import annotations

import json

import pytest

from test_transfer_lodo import cpu_model  # noqa: F401 - the module's fixture, shared
from test_transfer_zero_shot_cpu import store  # noqa: F401 - the module's fixture, shared

ZEN4, XEON = "34cc4b132c", "6a0ea403ee"


def _fp(dev: str) -> str:
    """The fingerprint JSON of a shipped CPU source (its provenance)."""
    from carb.data.cpu_sources import shipped_cpu_sources

    return json.dumps(next(s.fingerprint for s in shipped_cpu_sources() if s.device_id == dev))


def test_the_shipped_cpu_sources_have_provenance_and_a_probe():
    """Both shipped CPU datasets are real rows of one device each, with a provenance naming their commands and
    the data's SHA-256, a README beside them, and a device probe of that device."""
    import hashlib

    from carb.data.cpu_sources import shipped_cpu_sources
    from carb.data.io import load_dataset
    from carb.data.probes import load_probe

    got = {s.device_id: s for s in shipped_cpu_sources()}
    assert set(got) == {ZEN4, XEON}
    for dev, s in got.items():
        d = load_dataset(s.path)
        prov = json.loads(s.path.with_name(s.path.stem + ".provenance.json").read_text())
        assert len(d) == prov["rows"] == {ZEN4: 560, XEON: 227}[dev]
        assert set(d["status"]) == {"ok"} and set(d["device_id"].astype(str)) == {dev}
        assert prov["sha256"] == hashlib.sha256(s.path.read_bytes()).hexdigest() == s.sha256()
        assert any("carb-collect" in c for c in prov["commands"]) and "shipped" in prov["license"]
        assert s.path.with_suffix(".md").exists()
        assert load_probe(dev) is not None
        assert json.loads(d["device_fingerprint"].iloc[0]) == s.fingerprint


def test_auto_picks_the_shipped_cpus_except_the_target_and_source():
    """A synthetic target: both shipped CPUs; the Zen 4 as target (by device id, or only by its fingerprint
    under another id): only the Xeon; the Xeon as source and Zen 4 as target: none; a CPU without a probe is
    skipped with its reason."""
    from carb.data.cpu_sources import auto_sources

    def ids(exclude, has_probe=lambda dev: True):
        kept, skipped = auto_sources(exclude, has_probe)
        return [s.device_id for s in kept], skipped

    synthetic = ("cccccccccc", '{"kind": "cpu", "family": "99"}')
    reference = ("b69ebb7443", None)
    assert ids([reference, synthetic])[0] == [ZEN4, XEON]
    kept, skipped = ids([reference, (ZEN4, None)])
    assert kept == [XEON] and len(skipped) == 1 and ZEN4 in skipped[0] and "the target's CPU" in skipped[0]
    kept, skipped = ids([(ZEN4, None), synthetic])
    assert kept == [XEON] and "the source's CPU" in skipped[0] and "target" not in skipped[0]
    assert ids([reference, ("dddddddddd", _fp(ZEN4))])[0] == [XEON]   # same CPU, id not given: by fingerprint
    assert ids([(XEON, None), (ZEN4, None)])[0] == []
    kept, skipped = ids([reference, synthetic], has_probe=lambda dev: dev != XEON)
    assert kept == [ZEN4] and "no device probe" in skipped[0]


def test_default_extra_sources_is_auto_and_combines_the_other_shipped_cpu(cpu_model, monkeypatch, capsys):  # noqa: F811
    """carb-calibrate's default (``auto``) on the Zen 4 as target: one extra source, the Xeon's model (trained by
    :func:`shipped_source_model`, here the test's tiny cascade under the Xeon's id) transferred by the Xeon's
    probe, named in the output; ``[]`` gives none and says single-source."""
    import copy

    from carb.commands import zero_shot
    from carb.commands.cli import compose

    cascade, probe, rows, _ = cpu_model
    trained = []

    def fake(src, overrides=None):
        trained.append(src.device_id)
        m = copy.copy(cascade)
        m.device_id_, m.device_fingerprint_ = src.device_id, json.dumps(src.fingerprint)
        return m

    monkeypatch.setattr(zero_shot, "shipped_source_model", fake)
    cfg = compose("calibrate", [])
    assert cfg.transfer.extra_sources == "auto"
    tgt = probe.assign(device_id=ZEN4)
    out = zero_shot.extra_sources(cfg, cascade, tgt, _fp(ZEN4), "AMD EPYC", ZEN4)
    assert trained == [XEON] and len(out) == 1 and out[0].source_.device_id_ == XEON
    text = capsys.readouterr().out
    assert "multi-source base" in text and XEON in text and "cpu-intel-xeon.parquet" in text
    assert f"not used: cpu-amd-zen4.parquet ({ZEN4}" in text
    assert zero_shot.extra_sources(compose("calibrate", ["transfer.extra_sources=[]"]), cascade, tgt, _fp(ZEN4),
                                   "AMD EPYC", ZEN4) == []
    assert "single-source base" in capsys.readouterr().out


class _Fake:
    """A stand-in for the fast cascade that records its fits (picklable: the cache stores it)."""

    def __init__(self, fits: list) -> None:
        self.fits = fits

    def fit(self, X, y):
        self.fits.append(list(y.columns))
        self.n_ = len(X)
        return self


def test_a_shipped_source_model_is_trained_once_then_cached(monkeypatch, tmp_path, capsys):
    """:func:`shipped_source_model` fits the fast cascade on the dataset's ok rows (latency and peak memory) once,
    then reads it from ``$CARB_CACHE/sources``; a damaged cache entry is refitted."""
    from carb.commands import zero_shot
    from carb.data.cpu_sources import shipped_cpu_sources
    from carb.model import presets

    fits = []
    monkeypatch.setenv("CARB_CACHE", str(tmp_path))
    monkeypatch.setattr(presets, "build_cascade", lambda *a, **k: _Fake(fits))
    src = next(s for s in shipped_cpu_sources() if s.device_id == XEON)
    first = zero_shot.shipped_source_model(src)
    assert fits == [["latency_ms", "peak_memory_MB"]] and first.n_ == 227 and "trained" in capsys.readouterr().out
    second = zero_shot.shipped_source_model(src)
    assert len(fits) == 1 and second.n_ == 227 and "from the cache" in capsys.readouterr().out
    (entry,) = (tmp_path / "sources").glob(f"{XEON}-*.pkl")
    entry.write_bytes(b"not a pickle")
    zero_shot.shipped_source_model(src)
    assert len(fits) == 2


def test_a_bad_extra_sources_value_is_one_line_exit_2(monkeypatch, capsys):
    """``transfer.extra_sources=foo`` (neither auto nor a list): carb-calibrate exits 2 with one line naming the
    key and the allowed values, no traceback."""
    from carb.commands.checks import check_config
    from carb.commands.cli import compose
    from carb.errors import ConfigError

    with pytest.raises(ConfigError, match=r"transfer.extra_sources: 'foo' is not allowed; allowed: auto"):
        check_config("calibrate", compose("calibrate", ["transfer.extra_sources=foo"]))
    check_config("calibrate", compose("calibrate", ["transfer.extra_sources=[]"]))
    import sys

    from carb.commands import calibrate

    monkeypatch.setattr(sys, "argv", ["carb-calibrate", "k=0", "probe=6a0ea403ee", "transfer.extra_sources=foo",
                                      "progress.enabled=false"])
    with pytest.raises(SystemExit) as e:
        calibrate.main()
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert e.value.code == 2 and len(err) == 1 and "transfer.extra_sources: 'foo' is not allowed" in err[0]


@pytest.mark.slow
def test_k0_by_default_combines_the_shipped_zen4_into_the_xeon(store, capsys):  # noqa: F811
    """carb-calibrate k=0 probe=<Xeon> with the defaults, end to end: the shipped Zen 4's model is trained with
    model=carb_fast, combined with the source (two sources, equal weights at K = 0) and named in the output (the
    Xeon, the target, not used); its prediction is not the source's alone (``transfer.extra_sources=[]``)."""
    import numpy as np

    from test_transfer_zero_shot_cpu import calibrate

    from carb.data.io import reference_dataset
    from carb.model.intervals import screening_predict

    multi = calibrate(store, f"probe={XEON}", "register=false")["model"]
    out = capsys.readouterr().out
    assert multi.source_weights_ == [0.5, 0.5] and multi.source_names()[1] == ZEN4
    assert "multi-source base" in out and "cpu-amd-zen4.parquet" in out and "not used: cpu-intel-xeon.parquet" in out
    band = multi.intervals_["latency_ms"]   # issue 44: the multi-source band (zero_shot.probe_multi_log_error_band)
    from carb.commands.cli import compose

    zs = compose("calibrate", []).zero_shot   # the bands' one source, conf/calibrate.yaml
    lo, hi = (np.exp(float(v)) for v in zs.probe_multi_log_error_band)
    assert f"x [{lo:.2f}, {hi:.2f}] (measured on 3 CPUs)" in " ".join(out.split())
    single = calibrate(store, f"probe={XEON}", "register=false", "transfer.extra_sources=[]")["model"]
    lo, hi = (np.exp(float(v)) for v in zs.probe_log_error_band)
    assert f"x [{lo:.2f}, {hi:.2f}] (measured on 3 CPUs)" in " ".join(capsys.readouterr().out.split())
    assert band != single.intervals_["latency_ms"]
    rows = reference_dataset().groupby("precision").head(4).reset_index(drop=True)
    pm, ps = (screening_predict(m, rows)["pred_latency_ms"].to_numpy() for m in (multi, single))
    assert np.all(np.isfinite(pm)) and np.max(np.abs(np.log(pm / ps))) > 0.05


def test_an_extra_sources_predictions_are_reused_until_it_is_refitted(cpu_model):  # noqa: F811
    """The multi-source base memoises each extra source's screening predictions by the rows: predicting the same
    rows again calls the extra source no more and gives the same numbers; once the extra source is refitted
    (here on rows 1.5x slower), the base's prediction follows it (no stale memo)."""
    import numpy as np
    from test_transfer6_multisource import _two_sources

    from carb.model import intervals

    a, b, rows = _two_sources(cpu_model)
    multi = a.__class__.__new__(a.__class__)
    multi.__dict__.update(a.__dict__)
    multi.add_sources([b])
    calls = []
    real = intervals.screening_predict

    def counted(m, X, *args, **kw):
        calls.append(m is b)
        return real(m, X, *args, **kw)

    p = np.full(len(rows), 10.0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(intervals, "screening_predict", counted)
        first = multi.source_log_predictions(rows, p)
        second = multi.source_log_predictions(rows, p)
        assert sum(calls) == 1 and np.array_equal(first, second)
        before = real(b, rows)["pred_latency_ms"].to_numpy()
        b.fit(rows.assign(latency_ms=before * 1.5).groupby("precision").head(4))
        third = multi.source_log_predictions(rows, p)
    assert sum(calls) == 2
    np.testing.assert_allclose(third[1], np.log(real(b, rows)["pred_latency_ms"].to_numpy()))
    assert np.median(third[1] - first[1]) > 0.3
