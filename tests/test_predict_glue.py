"""The prediction path's shortcuts give scikit-learn's numbers: a blend predicted from a float matrix
(``predict_matrix``) and from a frame, gradient boosting without its input check, the design matrix a
cascade prediction grows stage by stage, the member threads a block keeps, and screening's telemetry
columns set at once against setting them one by one."""
from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import GradientBoostingRegressor
from synthetic import synthetic_dataset

from carb.data.schema import INTERACTION_FEATURES, RUNTIME_FEATURES
from carb.model.correctors import Design
from carb.model.encoding import interaction_values, with_columns
from carb.model.ensemble import BlendedRegressor, boosting_predict, member_predict, member_threads, side_by_side
from carb.model.intervals import screening_features, with_telemetry
from carb.model.telemetry import TelemetryImputer

TINY = dict(xgb={"n_estimators": 15, "max_depth": 3}, lgbm={"n_estimators": 15, "num_leaves": 7, "min_child_samples": 2},
            et={"n_estimators": 10}, probe_estimators=10, n_jobs=1)


def _xy(n=240, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.uniform(0.1, 3, (n, 4)), columns=["a", "b", "c", "d"])
    y = np.exp(X["a"].to_numpy()) * X["b"].to_numpy() + 0.2 * X["c"].to_numpy() + 0.5
    return X, y


def test_predict_matrix_is_predict_bit_for_bit_and_refuses_what_predict_refuses():
    X, y = _xy()
    m = BlendedRegressor(**TINY).fit(X[:160], y[:160], X[160:], y[160:])
    assert np.array_equal(m.predict_matrix(X.to_numpy()), m.predict(X))
    assert np.array_equal(m.predict_matrix(np.ascontiguousarray(X.to_numpy())[:7]), m.predict(X.iloc[:7]))
    bad = X.to_numpy().copy()
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        m.predict_matrix(bad)
    with pytest.raises(ValueError, match="expecting 4 features"):
        m.predict_matrix(bad[:, :3])


def test_gradient_boosting_without_its_check_gives_its_numbers_and_leaves_odd_input_to_it():
    X, y = _xy(seed=1)
    g = GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=0).fit(X.to_numpy(), y)
    D = np.random.default_rng(2).normal(size=(50, 4)) * 3
    assert np.array_equal(boosting_predict(g, D), g.predict(D))
    assert np.array_equal(member_predict(g, D), g.predict(D))
    D[0, 0] = np.nan            # scikit-learn refuses it: the shortcut hands it back
    assert boosting_predict(g, D) is None
    with pytest.raises(ValueError):
        member_predict(g, D)
    assert boosting_predict(g, D[:, :3]) is None
    q = GradientBoostingRegressor(loss="absolute_error", n_estimators=5, random_state=0).fit(X.to_numpy(), y)
    assert boosting_predict(q, X.to_numpy()) is None   # starts from the median, not the mean: predict's own path


def test_design_selects_columns_by_name_and_grows():
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [4, 5, 6], "z": [0.5, 0.25, 0.125]})
    d = Design(frame, extra=1)
    assert d.names == ["x", "y", "z"] and len(d) == 3
    assert np.array_equal(d.select(["z", "x"]), frame[["z", "x"]].to_numpy(float))
    d.add("p", np.array([7.0, 8.0, 9.0]))
    d.add("q", np.array([1.0, 1.0, 1.0]))      # past the room it was made with
    d.add("p", np.array([9.0, 9.0, 9.0]))      # replaced where it stands
    assert d.names == ["x", "y", "z", "p", "q"]
    assert np.array_equal(d.select(["p", "q", "y"]), [[9, 1, 4], [9, 1, 5], [9, 1, 6]])
    with pytest.raises(KeyError):
        d.select(["nope"])


def test_a_member_threads_block_reuses_its_threads_and_ends_them():
    seen = []

    def who(i):
        seen.append(threading.get_ident())
        return i * i

    before = threading.active_count()
    with member_threads(2):
        for _ in range(5):
            assert side_by_side(who, [1, 2, 3]) == [1, 4, 9]
        assert len(set(seen)) <= 2 and threading.get_ident() not in seen
        with member_threads(1):                 # a nested block at one thread runs here, in order
            seen.clear()
            assert side_by_side(who, [4, 5]) == [16, 25] and set(seen) == {threading.get_ident()}
        assert side_by_side(who, [2]) == [4]
    assert threading.active_count() == before


def _one_by_one(features: pd.DataFrame, medians: dict, imputer: TelemetryImputer | None) -> pd.DataFrame:
    """What screening did before the columns were set at once: a copy, each runtime column set, the
    imputer's set, then the interactions set one by one."""
    from carb.data.tiers import batch_tier

    out = features.copy()
    tiers = np.asarray(batch_tier(out["batch_size"].to_numpy()), dtype=str)
    for col in RUNTIME_FEATURES:
        fallback = float(medians.get("all", {}).get(col, np.nan))
        v = np.array([float(medians.get(t, {}).get(col, fallback)) for t in tiers])
        out[col] = np.where(np.isnan(v), fallback, v)
    if imputer is not None:
        out = imputer.transform(out)
    sm, mem = out["avg_sm_util"], out["avg_mem_util"]
    out["batch_x_sm"] = out["batch_size"] * sm
    out["flops_x_sm"] = np.log1p(out["flops"].astype(float)) * sm
    out["act_x_mem"] = np.log1p(out["total_activation_MB"].astype(float)) * mem
    out["util_product"] = sm * mem
    return out


@pytest.mark.parametrize("has", [(), ("avg_sm_util", "batch_x_sm")])
def test_screening_telemetry_set_at_once_equals_one_by_one(has):
    from carb.data.tiers import telemetry_medians

    df = synthetic_dataset(300, seed=4)
    medians = telemetry_medians(df)
    imp = TelemetryImputer(n_estimators=20).fit(df.iloc[:200])
    rows = df.iloc[200:].drop(columns=[c for c in (*RUNTIME_FEATURES, *INTERACTION_FEATURES) if c not in has],
                              errors="ignore")
    if "batch_x_sm" in has:     # a column the frame has already stays where it stands
        rows.insert(2, "batch_x_sm", 1.0)

    class Cascade:
        telemetry_medians_ = medians
        telemetry_imputer_ = imp

    pd.testing.assert_frame_equal(screening_features(Cascade, rows), _one_by_one(rows, medians, imp), check_exact=True)
    pd.testing.assert_frame_equal(with_telemetry(rows, medians), _one_by_one(rows, medians, None), check_exact=True)


def test_with_columns_replaces_in_place_and_appends_in_order():
    f = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    out = with_columns(f, {"c": np.array([1.0, 2.0]), "a": np.array([5, 6]), "d": np.array([0.0, 1.0])})
    assert list(out.columns) == ["a", "b", "c", "d"] and out["a"].tolist() == [5, 6]
    assert list(f.columns) == ["a", "b"] and f["a"].tolist() == [1, 2]      # the caller's frame is untouched
    v = interaction_values(pd.DataFrame({"batch_size": [2], "flops": [np.e - 1], "total_activation_MB": [0.0]}))
    assert np.isnan(v["batch_x_sm"][0]) and np.isnan(v["util_product"][0])   # no telemetry: NaN, as before


def test_a_corrector_on_two_threads_gives_its_one_thread_numbers():
    from sklearn.ensemble import HistGradientBoostingRegressor

    from carb.model.ensemble import HIST_THREAD_ROWS, _takes_threads, hist_predict

    X, y = _xy(n=400, seed=5)
    h = HistGradientBoostingRegressor(max_iter=40, max_depth=3, random_state=0).fit(X.to_numpy(), y)
    big = np.random.default_rng(6).uniform(0, 3, (HIST_THREAD_ROWS + 37, 4))
    with member_threads(2):
        assert _takes_threads(HistGradientBoostingRegressor)   # the two-thread path is the one under test
        assert np.array_equal(hist_predict(h, big), h.predict(big))
        assert np.array_equal(hist_predict(h, big[:50]), h.predict(big[:50]))
    assert np.array_equal(hist_predict(h, big), h.predict(big))


def test_encode_spreads_each_distinct_category_and_names_the_bad_rows():
    from carb.errors import ConfigError
    from carb.model.encoding import encode

    X = pd.DataFrame({"block": ["basic", "bottleneck", "basic"], "precision": ["fp32", "bf16", "fp16"],
                      "early_downsample": ["true", "0", "FALSE"], "depth": [14, 50, 20]})
    D = encode(X, ["block", "precision", "early_downsample", "depth"])
    assert list(D.columns) == ["block_bottleneck", "precision_bits", "precision_bf16", "early_downsample", "depth"]
    assert D["block_bottleneck"].tolist() == [0, 1, 0] and D["precision_bits"].tolist() == [32, 16, 16]
    assert D["precision_bf16"].tolist() == [0, 1, 0] and D["early_downsample"].tolist() == [1, 0, 0]
    assert encode(X.assign(early_downsample=[True, False, True]), ["early_downsample"])["early_downsample"].tolist() == [1, 0, 1]
    with pytest.raises(ConfigError, match=r"column 'precision' allows .*rows 1 \(e.g. 'int8'\)"):
        encode(X.assign(precision=["fp32", "int8", "fp16"]), ["precision"])
    with pytest.raises(ConfigError, match=r"column 'early_downsample' allows .*rows 0, 2 "):
        encode(X.assign(early_downsample=["maybe", "1", None]), ["early_downsample"])


def test_gemm_terms_and_im2col_by_parts_equal_the_whole_walk():
    import random

    from carb.design import shapes as SH

    rng = random.Random(1)
    for _ in range(300):
        block = rng.choice(["basic", "bottleneck"])
        layout = tuple(rng.choice([1, 2, 3, 8, 36]) for _ in range(rng.choice([1, 3, 4, 5])))
        args = (block, layout, rng.choice([0.25, 0.61, 1.0, 2.7]), rng.choice([16, 33, 97, 224]),
                rng.choice([True, False]), rng.choice([10, 1000]), rng.choice([1.0, 1.5]))
        a, elem, n_elem = SH._walk(*args)       # every row of the network, as the walk makes them
        m, n, k = a[:, 0], a[:, 1], a[:, 2]
        whole = (float((m * n * k).sum()), float((m * k).sum()), float((m * n).sum()), float((n * k).sum()),
                 float(m.sum()), float(elem), float(len(a) + n_elem), float(m[0] * n[0] * k[0]))
        assert SH.per_image_terms(*args) == whole
        big = a[:, 3] > 1
        assert SH._max_im2col(args) == (float((a[big, 0] * a[big, 2]).max()) if big.any() else 0.0)


def test_network_counts_by_distinct_parts_equal_a_sum_over_every_layer():
    import random

    from carb.design.features import clear_caches, per_image_counts
    from carb.design.layers import walk

    rng = random.Random(2)
    clear_caches()
    for _ in range(200):
        block = rng.choice(["basic", "bottleneck"])
        layout = tuple(rng.choice([1, 2, 3, 8, 36]) for _ in range(rng.choice([1, 3, 4, 5])))
        args = (block, layout, rng.choice([0.25, 0.61, 1.0, 2.7]), rng.choice([16, 33, 97, 224]),
                rng.choice([True, False]), rng.choice([10, 1000]), rng.choice([1.0, 1.5]))
        flops = params = total = most = n_conv = 0
        for spec in walk(*args):                 # every layer of the forward, one by one
            out = spec.out_elements
            params += spec.params
            if spec.kind in ("conv", "linear"):
                flops += spec.macs
                n_conv += spec.kind == "conv"
            elif spec.kind == "bn":
                flops += 2 * out
            elif spec.kind == "avgpool":
                flops += spec.in_elements
            if spec.kind != "add":
                total += out
                most = max(most, out)
        got = per_image_counts(*args)
        assert got == (float(flops), params, float(total), float(most), n_conv)
        assert [type(v) for v in got] == [float, int, float, float, int]


def test_part_runs_from_shared_stage_shapes_equal_a_part_by_part_walk():
    """:func:`stage_parts` assumes a stage's later blocks and the next stage's input do not depend on how many
    blocks the stage has; this walks the parts one by one, each from the previous one's last layer."""
    import random

    from carb.design import layers as L

    def walked(block, layout, width_mult, input_size, early, num_classes, inner_mult):
        widths = L.stage_widths(len(layout), width_mult)
        part = L.Part("stem", L.STEM_STAGE, -1, (widths[0], input_size, bool(early)))
        runs = [(part, 1)]
        for i, (n_blocks, planes) in enumerate(zip(layout, widths)):
            for j in range(min(n_blocks, 2)):
                last = L.part_layers(part.kind, part.shape)[-1]
                part = L.Part("block", i, j, (block, last.out_channels, planes, 2 if (i > 0 and j == 0) else 1,
                                              last.out_size, inner_mult))
                count = 1 if j == 0 else n_blocks - 1
                if runs[-1][0].kind == "block" and runs[-1][0].shape == part.shape:
                    runs[-1] = (runs[-1][0], runs[-1][1] + count)
                else:
                    runs.append((part, count))
        last = L.part_layers(part.kind, part.shape)[-1]
        return runs + [(L.Part("head", len(layout), -1, (last.out_channels, last.out_size, num_classes, len(layout))), 1)]

    rng = random.Random(3)
    for _ in range(300):
        args = (rng.choice(["basic", "bottleneck"]), tuple(rng.choice([1, 2, 3, 8]) for _ in range(rng.choice([1, 3, 4, 5]))),
                rng.choice([0.25, 0.61, 1.0, 2.7]), rng.choice([16, 33, 97, 224]), rng.choice([True, False]),
                rng.choice([10, 1000]), rng.choice([1.0, 1.5, 2.0]))
        assert L.part_runs(*args) == walked(*args)
    with pytest.raises(ValueError, match="at least one stage"):
        L.part_runs("basic", (2, 0, 2), 1.0, 32, False, 10, 1.0)
