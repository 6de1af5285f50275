"""Issue 42, items 1-2: transfers that cannot work are refused in one line naming the command that does;
``next:`` suggests per source device a step that works; zero-shot (and CPU -> GPU K-row) intervals hold the
source model's own interval plus the transfer band, resolve no coverage the band was not measured at (P below
100 %) and say where they come from; a precision a spec record has no peak for is never_measured; one GPU is
one registered model name; the band has one source (conf/calibrate.yaml)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from carb.commands.cli import compose
from carb.data.gpu_specs import fingerprint_json, gpu_spec, spec_fingerprint
from carb.errors import ConfigError
from carb.model.intervals import conformal_bounds, interval, screening_predict
from carb.model.transfer import TransferredCascade, describe_origin
from synthetic import synthetic_dataset

H200 = fingerprint_json({"kind": "cuda", "name": "NVIDIA H200", "multiprocessors": 132, "power_limit_W": 700,
                         "compute_capability": "9.0"})
CPU = '{"kind": "cpu", "isa": ["avx2"]}'
W = {"compute": 0.306, "bandwidth": 0.342, "power": 0.352}
#: The source's own latency log-ratios: 199 points, sd 0.15 (a 90 % interval about x[0.78, 1.28]).
SRC_LOG_RATIOS = sorted(np.random.default_rng(0).normal(0.0, 0.15, 199).round(6).tolist())


class Source:
    """A source 'model' with a known prediction, a calibrated latency interval, a domain of three precisions
    and a device fingerprint (``fp``)."""

    targets_ = ["peak_memory_MB", "latency_ms"]
    domain_ = {"categorical": {"precision": ["fp32", "fp16", "bf16"]}}

    def __init__(self, fp: str | None = H200, name: str = "NVIDIA H200") -> None:
        self.device_fingerprint_, self.device_name_ = fp, name
        lo, hi = conformal_bounds(SRC_LOG_RATIOS, 0.9)
        self.intervals_ = {"coverage": 0.9, "latency_ms": {"lower": lo, "upper": hi, "n": 199, "coverage": 0.9,
                                                           "log_ratios": SRC_LOG_RATIOS}}

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        lat = X["flops"].to_numpy(float) / 1e9 + 0.05
        mem = X["param_size_MB"].to_numpy(float) + 8.0
        return pd.DataFrame({"pred_peak_memory_MB": mem, "pred_latency_ms": lat}, index=X.index)


def rows(n: int = 120) -> pd.DataFrame:
    a = synthetic_dataset(n, seed=3, device_name="Synthetic", energy=False)
    return a[a["status"] == "ok"].reset_index(drop=True)


def gpu_rows(spec: str | None, name: str = "Mystery GPU") -> pd.DataFrame:
    """Rows of a GPU: with the spec record ``spec``'s fingerprint, or a measured-style one no record matches."""
    d = rows()
    fp = spec_fingerprint(gpu_spec(spec), device_name=name) if spec else {"kind": "cuda", "name": name}
    d["device_kind"], d["device_name"], d["device_fingerprint"] = "cuda", name, fingerprint_json(fp)
    return d


def cpu_rows() -> pd.DataFrame:
    d = rows()
    d["device_kind"], d["device_fingerprint"] = "cpu", CPU
    return d


# ---------------------------------------------------------------- item 1: refuse what cannot work
def test_a_gpu_model_is_never_calibrated_with_cpu_rows_or_measure_cpu():
    from carb.commands.calibrate import refuse_unlike_devices

    cfg = compose("calibrate", [])   # measure=cpu, device auto: measuring this CPU
    for r in (None, cpu_rows()):
        with pytest.raises(ConfigError, match="carb-quickstart calibrate=true") as e:
            refuse_unlike_devices(cfg, Source(), "models:/carb-nvidia-h200-x@champion", r)
        assert "\n" not in str(e.value) and "k=0 spec=<GPU>" in str(e.value)
    refuse_unlike_devices(cfg, Source(CPU, "AMD EPYC"), "models:/cpu@champion", cpu_rows())   # CPU -> CPU works


def test_measure_cpu_from_a_gpu_model_is_refused_before_measuring(monkeypatch):
    """The refusal comes before a minute of measuring (measure_rows never runs)."""
    import carb.commands.calibrate as cal
    from carb import tracking

    monkeypatch.setattr(tracking, "configure", lambda *a, **k: None)
    monkeypatch.setattr(tracking, "load_cascade", lambda uri: Source())
    monkeypatch.setattr(tracking, "resolve_version", lambda uri: {"name": "carb-nvidia-h200-x", "version": "1"})
    monkeypatch.setattr(cal, "measure_rows", lambda cfg: pytest.fail("measured before refusing"))
    with pytest.raises(ConfigError, match="GPU model"):
        cal.run_calibrate(compose("calibrate", ["source=models:/carb-nvidia-h200-x@champion", "measure=cpu", "k=12",
                                                "progress.enabled=false"]))


def test_a_cpu_model_to_a_gpu_needs_a_spec_record_and_spec_is_used_or_refused(capsys):
    from carb.commands.calibrate import refuse_unlike_devices, spec_records

    cfg = compose("calibrate", ["data.path=x.parquet"])
    cpu_src = Source(CPU, "AMD EPYC")
    with pytest.raises(ConfigError, match=r"spec: .*without a spec record.*spec=<the GPU's name"):
        refuse_unlike_devices(cfg, cpu_src, "models:/cpu@champion", gpu_rows(None))
    refuse_unlike_devices(cfg, cpu_src, "models:/cpu@champion", gpu_rows("RTX 4090"))          # the rows' record
    with_spec = compose("calibrate", ["data.path=x.parquet", "spec=RTX 4090"])
    refuse_unlike_devices(with_spec, cpu_src, "models:/cpu@champion", gpu_rows(None))            # spec= names it
    with pytest.raises(ConfigError, match="spec: 'RTX 4090' is GeForce RTX 4090 but"):
        refuse_unlike_devices(with_spec, Source(), "models:/gpu@champion", gpu_rows("RTX 3090"))
    with pytest.raises(ConfigError, match="spec: 'RTX 4090' is a GPU's spec record but"):
        refuse_unlike_devices(with_spec, cpu_src, "models:/cpu@champion", cpu_rows())
    # k > 0 with spec=: the target GPU's record the K rows may start from (rows without a record of their own)
    src = Source(fingerprint_json(spec_fingerprint(gpu_spec("H200"))))
    s, d, _ = spec_records(with_spec, src, gpu_rows(None))
    assert d["name"] == "GeForce RTX 4090" and s["name"] == gpu_spec("H200")["name"]


def test_next_suggests_per_source_device_a_step_that_works():
    from carb.commands.screen_table import next_steps

    gpu = "\n".join(next_steps("models:/carb-nvidia-h200-x@champion", "sqlite:///m.db", kind="gpu"))
    assert "measure=cpu" not in gpu
    assert "carb-quickstart calibrate=true" in gpu and "source=models:/carb-nvidia-h200-x@champion k=0 spec=<GPU>" in gpu
    cpu = "\n".join(next_steps("models:/carb-amd-epyc-y@champion", "sqlite:///m.db", kind="cpu"))
    assert "carb-calibrate source=models:/carb-amd-epyc-y@champion measure=cpu k=12" in cpu


def test_a_precision_without_a_peak_in_the_spec_record_is_never_measured():
    """V100 has no bf16 tensor cores: no bf16 ratio (formerly the fp16 one), bf16 candidates never_measured."""
    from carb.model.domain import unseen_mask
    from carb.model.spec_transfer import lacking_precisions

    assert lacking_precisions(gpu_spec("V100")) == ["bf16"] and lacking_precisions(gpu_spec("H100 SXM")) == []
    assert lacking_precisions(gpu_spec("TITAN X (Pascal)")) == ["bf16"]
    tr = TransferredCascade(Source()).fit_spec(gpu_spec("H200"), gpu_spec("V100"), W)
    assert tr.unsupported_precisions_ == ["bf16"] and "bf16" not in tr.spec_log_ratio_
    X = pd.DataFrame({"precision": ["fp32", "fp16", "bf16"]})
    assert unseen_mask(tr.domain_, X, "precision").tolist() == [False, False, True]
    assert Source.domain_["categorical"]["precision"] == ["fp32", "fp16", "bf16"]   # the source's untouched
    full = TransferredCascade(Source()).fit_spec(gpu_spec("H200"), gpu_spec("H100 SXM"), W)
    assert full.unsupported_precisions_ == [] and "bf16" in full.spec_log_ratio_


def test_one_gpu_is_one_registered_model_name_whatever_its_rows_or_spec_call_it():
    from carb.data.importers.devices import describe_devices
    from carb.data.schema import model_name, spec_model_name

    zero_shot = spec_model_name(fingerprint_json(spec_fingerprint(gpu_spec("GeForce RTX 4090"))))
    for called in ("RTX 4090", "NVIDIA GeForce RTX 4090", "4090"):
        r = rows().assign(device_name=called, device_kind="import")
        r["device_fingerprint"], r["device_id"] = pd.NA, pd.NA
        assert model_name(describe_devices(r)) == zero_shot, called
    assert zero_shot.startswith("carb-geforce-rtx-4090-")
    measured = rows().assign(device_name="NVIDIA H200", device_id="c3acf657f4", device_fingerprint=H200)
    assert model_name(measured) == "carb-nvidia-h200-c3acf657f4"   # a measured GPU keeps its own fingerprint's


# ---------------------------------------------------------------- item 2: intervals that include the unknown
def _bounds(entry, c=0.9):
    return conformal_bounds(entry["log_ratios"], c)


def test_zero_shot_interval_is_the_sources_plus_the_band_and_p_stays_below_100():
    from carb.analysis.decisions import add_probabilities

    band = (-0.078, 0.077)
    tr = TransferredCascade(Source()).fit_spec(gpu_spec("H200"), gpu_spec("H100 SXM"), W)
    tr.calibrate_zero_shot(band=band)
    e, src = tr.intervals_["latency_ms"], Source().intervals_["latency_ms"]
    lo, hi = _bounds(e)
    assert lo <= src["lower"] + band[0] + 1e-6 and hi >= src["upper"] + band[1] - 1e-6   # source's + band
    assert lo < src["lower"] and hi > src["upper"]                                        # wider than the source's
    assert (e["lower"], e["upper"]) == (lo, hi)
    assert not np.isfinite(conformal_bounds(e["log_ratios"], 0.95)[1])    # the band says nothing beyond 90 %
    X = rows()
    scored = screening_predict(tr, X)
    far = add_probabilities(tr, X.join(scored), {"latency_ms": 1e9})   # every candidate far within the budget
    assert far["p_within_latency_ms"].max() <= 0.95 + 1e-9
    iv = interval(tr.intervals_, scored)
    assert (iv["hi_latency_ms"] / scored["pred_latency_ms"]).min() > np.exp(src["upper"])


def test_a_source_without_a_latency_interval_gets_the_band_alone_resolving_90_percent():
    class Bare(Source):
        def __init__(self):
            super().__init__()
            self.intervals_ = {}

    tr = TransferredCascade(Bare()).fit_spec(gpu_spec("H200"), gpu_spec("H100 SXM"), W).calibrate_zero_shot(
        band=(-0.1, 0.08))
    e = tr.intervals_["latency_ms"]
    assert np.allclose(_bounds(e), (-0.1, 0.08), atol=1e-6)
    assert not np.isfinite(conformal_bounds(e["log_ratios"], 0.95)[0])


def test_cpu_to_gpu_k_rows_interval_is_never_narrower_than_the_sources():
    """No CPU -> GPU band was ever measured: the K rows' band is added to the source's own interval."""
    d = gpu_rows("RTX 4090", "RTX 4090")
    d["latency_ms"] = Source().predict(d)["pred_latency_ms"].to_numpy() * 0.1
    from carb.design.select import space_filling

    cal = d.iloc[space_filling(d, 5)]
    cross = TransferredCascade(Source(CPU, "AMD EPYC"), error_prior="auto").fit(cal)
    same = TransferredCascade(Source(), error_prior="auto").fit(cal)
    src = Source().intervals_["latency_ms"]
    lo, hi = _bounds(cross.intervals_["latency_ms"])
    assert lo < src["lower"] and hi > src["upper"]
    s_lo, s_hi = _bounds(same.intervals_["latency_ms"])
    assert hi - lo > s_hi - s_lo                # GPU -> GPU keeps its measured prior alone


def test_zero_shot_says_where_it_comes_from():
    from carb.commands.zero_shot import zero_shot_origin

    tr = TransferredCascade(Source()).fit_spec(gpu_spec("H200"), gpu_spec("H100 SXM"), W)
    assert describe_origin(tr) is None and describe_origin(Source()) is None
    tr.origin_ = zero_shot_origin({"uri": "models:/carb-nvidia-h200-x@champion", "version": "3"},
                                  "spec records (H200 -> H100)", 4)
    assert describe_origin(tr) == ("zero-shot from models:/carb-nvidia-h200-x@champion (version 3) by spec records "
                                   "(H200 -> H100), band measured on 4 devices")


def test_the_band_has_one_source_the_config():
    """docs/RESULTS.md's band line is generated from conf/calibrate.yaml (not typed, not recomputed); the
    benchmark says when its recomputation differs; docs/MODEL.md types no other band."""
    from pathlib import Path

    from scripts.bench.transfer_pairs import _band_check, configured_bands
    from scripts.results import zero_shot_band_lines

    zs = compose("calibrate", []).zero_shot
    line = zero_shot_band_lines()[0]
    lo, hi = (float(v) for v in zs.log_error_band)
    assert f"[{lo:.3f}, {hi:.3f}]" in line and f"on {int(zs.band_devices)} GPUs" in line
    assert configured_bands()["spec"] == (lo, hi)
    assert "update it" not in _band_check("spec", lo, hi) and "update it" in _band_check("spec", -0.253, 0.180)
    model_md = (Path(__file__).resolve().parents[1] / "docs" / "MODEL.md").read_text()
    typed = re.findall(r"\[(-0\.\d+), (0\.\d+)\]", model_md)
    bands = {(f"{lo:.3f}", f"{hi:.3f}"), tuple(f"{float(v):.3f}" for v in zs.probe_log_error_band),
             tuple(f"{float(v):.3f}" for v in zs.probe_multi_log_error_band)}
    multi = zero_shot_band_lines()[0]
    assert f"[{float(zs.probe_multi_log_error_band[0]):.3f}, {float(zs.probe_multi_log_error_band[1]):.3f}]" in multi
    assert all(b in bands for b in typed), typed


def test_the_screen_header_says_zero_shot_within_the_table_width(capsys):
    from carb.commands.screen import _print_origin
    from carb.commands.screen_table import TABLE_WIDTH
    from carb.commands.zero_shot import zero_shot_origin

    tr = TransferredCascade(Source()).fit_spec(gpu_spec("H200"), gpu_spec("H100 SXM"), W)
    _print_origin(tr)
    assert capsys.readouterr().out == ""                              # not a transfer: nothing to say
    tr.origin_ = zero_shot_origin({"uri": "models:/carb-nvidia-h200-c3acf657f4@champion", "version": "12"},
                                  "spec records (H200 SXM 141GB -> H100 SXM5 80GB)", 4)
    _print_origin(tr)
    out = capsys.readouterr().out
    assert out.startswith("model: zero-shot from models:/carb-nvidia-h200-c3acf657f4@champion")
    assert "band measured on 4 devices" in " ".join(out.split())
    assert max(map(len, out.splitlines())) <= TABLE_WIDTH


def test_k0_spec_without_source_says_pass_source_and_lists_the_models(tmp_path):
    from carb.commands.calibrate import run_calibrate

    with pytest.raises(ConfigError, match=r"source: spec='H100 SXM' .*pass source=models:/<name>@champion"
                                          r" \(registered models: none") as e:
        run_calibrate(compose("calibrate", [f"tracking.uri=sqlite:///{tmp_path}/m.db", "k=0", "spec=H100 SXM",
                                            "progress.enabled=false"]))
    assert "\n" not in str(e.value)


def test_zero_shot_energy_given_as_bounds_resolves_only_90_percent():
    """The zero-shot energy interval (issue 45's, bounds only) gets a 19-point sample: P within 5-95 % too."""
    iv = {"lower": -1.0, "upper": 0.9, "n": 0, "coverage": 0.9, "log_ratios": [], "method": "energy"}

    class WithEnergy(Source):
        targets_ = ["peak_memory_MB", "energy_J", "latency_ms"]

    tr = TransferredCascade(WithEnergy()).fit_spec(gpu_spec("H200"), gpu_spec("H100 SXM"), W,
                                                   energy={"interval": iv, "power": {}})
    e = tr.intervals_["energy_J"]
    assert np.allclose(_bounds(e), (-1.0, 0.9), atol=1e-6)
    assert not np.isfinite(conformal_bounds(e["log_ratios"], 0.95)[1])
