"""The per-kind latency prior's ``linear_rate_kinds`` (issue 43, round zx43b: the Xeon CPU zoo's LeViT): kinds priced
at the linear layers' per-FLOP cost instead of a cost of their own. Synthetic targets on real traced networks
(tests/synthetic.py), never a measurement."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.design.zoo_features import ZOO_KIND_FEATURES, ZOO_WEIGHT_FEATURES
from tests.synthetic import zoo_schema_frame


@pytest.fixture(scope="module")
def kinds_rows() -> pd.DataFrame:
    """Zoo rows (traced torchvision networks, batches 1-16, fp32 and bf16) with their layer-table columns."""
    from carb.model.cascade_data import with_zoo_kinds

    return with_zoo_kinds(zoo_schema_frame(), list(ZOO_KIND_FEATURES))


def _law(X: pd.DataFrame, pointwise: float) -> np.ndarray:
    """Latency (ms) of a synthetic CPU: 1e-8 ms per FLOP of regular convolutions and linear layers, ``pointwise``
    ms per FLOP of pointwise ones, 20x for depthwise ones, 3 us per operator, 0.1 ms per MB of linear weights."""
    k = {c: X[c].to_numpy(float) for c in (*ZOO_KIND_FEATURES, *ZOO_WEIGHT_FEATURES)}
    return (0.05 + 1e-8 * (k["flops_conv_regular"] + 20 * k["flops_conv_depthwise"] + k["flops_linear"])
            + pointwise * k["flops_conv_pointwise"] + 0.003 * X["n_ops"].to_numpy(float)
            + 0.1 * k["weights_linear_MB"])


def test_a_kind_at_the_linear_rate_has_no_column_of_its_own_and_its_flops_join_linear(kinds_rows):
    """With ``linear_rate_kinds=["conv_pointwise"]`` the per-kind form has no per-FLOP column of pointwise
    convolutions; each precision's linear column holds linear + pointwise FLOPs of that precision's rows; a CPU
    whose pointwise FLOP costs a linear one is fitted as well as with the kind's own column, at the law's rate."""
    from carb.model.physics import make_prior

    y = _law(kinds_rows, 1e-8)
    tied = make_prior("latency_ms", linear_rate_kinds=["conv_pointwise"]).fit(kinds_rows, y)
    assert tied.form_ == "kinds"
    assert not any(n.startswith("per_flop_conv_pointwise") for n in tied.coef_)
    assert tied.coef_["per_flop_linear_fp32"] == pytest.approx(1e-8, rel=0.1) and tied.train_mape_ < 0.02
    D = pd.DataFrame(tied.design(kinds_rows), columns=tied.column_names())
    fp32 = (kinds_rows["precision"] == "fp32").to_numpy()
    both = (kinds_rows["flops_linear"] + kinds_rows["flops_conv_pointwise"]).to_numpy(float)
    np.testing.assert_allclose(D["per_flop_linear_fp32"], np.where(fp32, both, 0.0))
    np.testing.assert_allclose(D["per_flop_linear_bf16"], np.where(fp32, 0.0, both))
    own = make_prior("latency_ms").fit(kinds_rows, y)
    assert "per_flop_conv_pointwise_fp32" in own.coef_ and own.train_mape_ < 0.02


def test_off_cpu_rows_every_kind_keeps_its_own_cost(kinds_rows):
    """The setting is keyed to CPU rows: the same rows as CUDA rows keep the pointwise column (the GPU zoo cascades
    are unchanged)."""
    from carb.model.physics import make_prior

    cuda = kinds_rows.assign(device_kind="cuda")
    prior = make_prior("latency_ms", linear_rate_kinds=["conv_pointwise"]).fit(cuda, _law(cuda, 1e-8))
    assert prior.form_ == "kinds" and "per_flop_conv_pointwise_fp32" in prior.coef_


def test_a_kind_tied_to_linear_cannot_take_its_own_cost(kinds_rows):
    """A CPU whose pointwise FLOP costs 3x a linear one: its own column fits that law, the tied form (one rate
    for both) cannot: the setting is a constraint, not a relabelling."""
    from carb.model.physics import make_prior

    y = _law(kinds_rows, 3e-8)
    own = make_prior("latency_ms").fit(kinds_rows, y)
    tied = make_prior("latency_ms", linear_rate_kinds=["conv_pointwise"]).fit(kinds_rows, y)
    assert own.train_mape_ < 0.02 and tied.train_mape_ > 2 * own.train_mape_


def test_the_setting_reaches_the_prior_and_refuses_unknown_kinds():
    """``prior.linear_rate_kinds``: ``[matmul]`` by default in the schema; the conf's value reaches the prior; an
    unknown kind (or linear itself) is one line naming the key and the allowed kinds."""
    from carb.commands.checks import check_config
    from carb.commands.cli import compose
    from carb.errors import ConfigError
    from carb.model.prior_config import PriorSettings, cascade_params

    assert PriorSettings().linear_rate_kinds == ["matmul"]
    assert cascade_params()["prior"]["linear_rate_kinds"] == ["matmul"]
    assert cascade_params({"linear_rate_kinds": []})["prior"]["linear_rate_kinds"] == []
    for bad in ("attention", "linear"):
        with pytest.raises(ConfigError) as e:
            check_config("train", compose("train", [f"prior.linear_rate_kinds=[{bad}]"]))
        line = str(e.value)
        assert "prior.linear_rate_kinds" in line and "matmul" in line and "\n" not in line


def test_the_allowed_kinds_are_the_flop_kinds_but_linear():
    """The schema's allowed kinds are the layer table's compute kinds less ``linear`` (one list to keep)."""
    from typing import get_args

    from carb.design.zoo_features import FLOP_KINDS
    from carb.model.prior_config import LinearRateKind

    assert set(get_args(LinearRateKind)) == set(FLOP_KINDS) - {"linear"}


def test_bounded_relative_least_squares_keeps_each_coefficient_above_its_floor():
    """``nnls_relative(..., lower=)``: an unbounded solution below a floor is lifted to it, the others refitted;
    without ``lower`` it is the plain non-negative fit."""
    from carb.model.nnls import nnls_relative

    rng = np.random.default_rng(0)
    A = rng.uniform(1, 10, size=(50, 2))
    y = A @ np.array([1.0, 3.0])
    np.testing.assert_allclose(nnls_relative(A, y), [1.0, 3.0], rtol=1e-6)
    c = nnls_relative(A, y, lower=np.array([2.0, 0.0]))
    assert c[0] == pytest.approx(2.0) and c[1] < 3.0


def test_probe_flop_floor_bounds_the_per_flop_costs_from_the_device_probe(kinds_rows, monkeypatch):
    """With ``probe_flop_floor`` the per-kind form of one device's rows keeps every ``per_flop_<kind>_<precision>``
    at least the probe's fastest regular convolution of that precision (ms per FLOP: time / (2 x multiply-adds));
    a law whose pointwise FLOP is cheaper than that floor is fitted with the floor instead; without the setting
    the fit takes the law's rate. The floor of a probe: its fastest row per precision."""
    from carb.data import probes
    from carb.model.physics import make_prior, probe_flop_floor

    probe = pd.DataFrame({"device_id": ["synthetic-4ecf7a0c"] * 3, "threads": 1, "precision": ["fp32", "fp32", "bf16"],
                          "cin": 16, "cout": 16, "kernel": 3, "stride": 1, "H_in": 8, "batch_size": 1,
                          "time_ms": [1.0, 2.0, 0.5], "backend": "Mkldnn", "kind": "conv_regular",
                          "op": "convolution", "groups": 1})
    monkeypatch.setattr(probes, "load_probe", lambda device_id, *a, **k: probe)
    macs = 16 * 16 * 9 * 8 * 8   # stride 1, padding 1: 8 x 8 outputs
    floor = probe_flop_floor(kinds_rows)
    assert floor == {"fp32": pytest.approx(1.0 / (2 * macs)), "bf16": pytest.approx(0.5 / (2 * macs))}
    y = _law(kinds_rows, 1e-9)
    plain = make_prior("latency_ms").fit(kinds_rows, y)
    assert plain.coef_["per_flop_conv_pointwise_fp32"] < 0.5 * floor["fp32"]
    bounded = make_prior("latency_ms", probe_flop_floor=True).fit(kinds_rows, y)
    for name, v in bounded.coef_.items():
        if name.startswith("per_flop_") and name != "per_flop_conv_small_bf16":
            assert v >= floor[name.rsplit("_", 1)[-1]] * (1 - 1e-9), name


def test_the_study_flags_a_family_outside_the_training_composition(kinds_rows):
    """``scripts/studies/zoo_cpu_xeon_families.py``'s domain table: per row the FLOP shares of the compute kinds sum
    to 1; a family whose median share lies inside the other families' range is 0 sd outside on it; ResNet (mostly
    regular convolutions, few pointwise ones) is outside the others on a convolution share, which the table lists
    first."""
    from scripts.studies.zoo_cpu_xeon_families import domain_table, shares

    s = shares(kinds_rows)
    f = s[[c for c in s.columns if c.startswith("f_")]].sum(axis=1)
    np.testing.assert_allclose(f, 1.0)
    table = domain_table(kinds_rows, "resnet")
    assert (table["outside_sd"] >= 0).all() and table["outside_sd"].is_monotonic_decreasing
    inside = (table["family_median"] >= table["others_min"]) & (table["family_median"] <= table["others_max"])
    assert (table.loc[inside, "outside_sd"] == 0).all()
    assert table.index[0] in ("f_conv_regular", "f_conv_pointwise") and table["outside_sd"].iloc[0] > 0


def test_the_probe_floor_is_a_latency_setting_only():
    """An energy prior never takes the probe's ms-per-FLOP floor (a probe times kernels; it measures no energy)."""
    from carb.model.physics import make_prior

    assert make_prior("latency_ms", probe_flop_floor=True).probe_flop_floor is True
    assert make_prior("energy_J", probe_flop_floor=True, static_power=False).probe_flop_floor is False


def test_cpu_rows_price_each_call_at_its_precision_by_default(kinds_rows):
    """``prior.cpu_op_cost_per_precision`` (true by default) gives CPU zoo rows a call cost per precision
    (``per_op_fp32``, ``per_op_bf16``) while ``op_cost_per_precision`` stays false; CUDA rows keep one shared
    ``per_op``; a CPU whose bf16 call costs 3x an fp32 one is fitted by the per-precision costs, not the shared one."""
    from carb.model.physics import make_prior
    from carb.model.prior_config import cascade_params

    settings = cascade_params()["prior"]
    assert settings["cpu_op_cost_per_precision"] is True and settings["op_cost_per_precision"] is False
    bf16 = (kinds_rows["precision"] == "bf16").to_numpy()
    y = _law(kinds_rows, 1e-8) + np.where(bf16, 0.006, 0.0) * kinds_rows["n_ops"].to_numpy(float)
    cpu = make_prior("latency_ms", cpu_op_cost_per_precision=True).fit(kinds_rows, y)
    assert {"per_op_fp32", "per_op_bf16"} <= set(cpu.coef_) and "per_op" not in cpu.coef_
    assert cpu.coef_["per_op_bf16"] == pytest.approx(3 * cpu.coef_["per_op_fp32"], rel=0.15)
    shared = make_prior("latency_ms").fit(kinds_rows, y)
    assert "per_op" in shared.coef_ and shared.train_mape_ > 2 * cpu.train_mape_
    cuda = kinds_rows.assign(device_kind="cuda")
    assert "per_op" in make_prior("latency_ms", cpu_op_cost_per_precision=True).fit(cuda, y).coef_
