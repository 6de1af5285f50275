"""Layer GEMM shapes (carb.design.shapes) and the layer roofline prior built on them (issue 11): the
sums agree with the closed-form FLOPs and parameters, scale with batch as they must, and a prior on
them recovers a known thin-layer cost law and extrapolates it to larger batches where the aggregate
roofline cannot."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.design.arch import ArchConfig
from carb.design.features import grid_features
from carb.design.shapes import GEMM_TERMS, PER_IMAGE_TERMS, gemm_terms
from carb.model.physics import LayerRooflinePrior, RooflinePrior, make_prior


def frame(configs) -> pd.DataFrame:
    return grid_features(list(configs))


def test_resnet50_terms_match_flops_and_parameters():
    g = frame([ArchConfig("bottleneck", 50, input_size=224, batch_size=1)])
    t = gemm_terms(g).iloc[0]
    # fvcore counts convs + linear (= MNK) plus batch norm (2 per element) and the pool
    assert 0.97 < t["gemm_MNK"] / g["flops"].iloc[0] < 1.0
    # weights of the convs + classifier = parameters less batch-norm affine and classifier bias
    assert 0.99 < t["gemm_NK"] / g["params"].iloc[0] < 1.0
    assert t["n_ops"] > g["n_conv"].iloc[0] and t["elementwise"] > 0


def test_batch_scales_per_image_terms_only():
    c = ArchConfig("basic", 20, 0.5, 64, 4, "bf16", False)
    a, b = gemm_terms(frame([c])).iloc[0], gemm_terms(frame([c.replace(batch_size=12)])).iloc[0]
    for term in GEMM_TERMS:
        expect = 3.0 if term in PER_IMAGE_TERMS else 1.0
        assert b[term] / a[term] == pytest.approx(expect), term


def test_thin_layers_have_more_memory_terms_per_mac():
    thin, wide = (gemm_terms(frame([ArchConfig("basic", 20, w, 64, 8)])).iloc[0] for w in (0.25, 2.0))
    assert thin["gemm_MK"] / thin["gemm_MNK"] > 4 * wide["gemm_MK"] / wide["gemm_MNK"]


def test_missing_knobs_name_the_columns():
    from carb.errors import DatasetError

    with pytest.raises(DatasetError, match="block"):
        gemm_terms(pd.DataFrame({"depth": [20], "batch_size": [1]}))


def thin_layer_rows(seed: int = 0) -> pd.DataFrame:
    """Real configurations whose latency follows a GEMM efficiency law (x 2 % noise):
    ``0.2 + MNK / 5e7 * (1 + 24 / N_eff)`` where thin layers pay more per multiply-add, written in its
    expanded form on the layer sums: MNK / 5e7 + 24 * MK / 5e7."""
    rng = np.random.default_rng(seed)
    cfgs = {}
    while len(cfgs) < 260:
        c = ArchConfig("basic", int(rng.choice([8, 14, 20, 32])), float(rng.choice([0.25, 0.5, 1.0, 2.0])),
                       int(rng.choice([32, 64, 96])), int(rng.choice([1, 2, 4, 8, 16, 32, 64])), "fp32",
                       bool(rng.integers(2)))
        cfgs[c.config_id] = c
    df = frame(cfgs.values())
    g = gemm_terms(df)
    df["latency_ms"] = (0.2 + g["gemm_MNK"] / 5e7 + 24 * g["gemm_MK"] / 5e7) * rng.lognormal(0, 0.02, len(df))
    return df


def test_layer_prior_extrapolates_a_thin_layer_law_to_larger_batches():
    df = thin_layer_rows()
    small, large = df[df["batch_size"] <= 8], df[df["batch_size"] > 8]
    y = large["latency_ms"].to_numpy()

    def r2(p: np.ndarray) -> float:
        return 1 - ((y - p) ** 2).sum() / ((y - y.mean()) ** 2).sum()

    layer = make_prior("latency_ms").fit(small, small["latency_ms"])
    agg = RooflinePrior().fit(small, small["latency_ms"])
    assert isinstance(layer, LayerRooflinePrior) and layer.form_ == "layers"
    assert all(v >= 0 for v in layer.coef_.values())
    assert r2(layer.predict(large)) > 0.98
    assert r2(layer.predict(large)) > r2(agg.predict(large)) + 0.02
    assert layer.train_mape_ < 0.05 < agg.train_mape_
    # monotone in batch: twice the batch never costs less
    assert (layer.predict(large.assign(batch_size=large["batch_size"] * 2)) >= layer.predict(large)).all()


def test_layer_prior_falls_back_to_aggregate_without_knobs():
    df = thin_layer_rows()
    bare = df.drop(columns=["block", "depth"])
    p = make_prior("latency_ms").fit(bare, bare["latency_ms"])
    assert p.form_ == "aggregate" and "block" in p.form_reason_ and "per_flop_fp32" in p.coef_
    assert p.to_dict()["form"] == "aggregate"


def test_large_outputs_count_blocked_channels_above_the_line():
    """A 4-channel 224 px map is 3.1 MiB per image in fp32, 12.25 MiB padded to 16 channels: at batch
    16 each such conv output is 49 MiB (above a 32 MiB line), at batch 8 24.5 MiB (below); bf16
    crosses at twice the batch. basic-56 has 19 such convs (stem + 2 per block in its first stage)."""
    from carb.design.shapes import large_output_MB

    c = ArchConfig("basic", 56, 0.25, 224, 8, "fp32", False)
    rows = frame([c, c.replace(batch_size=16), c.replace(batch_size=16, precision="bf16"),
                  c.replace(batch_size=32, precision="bf16")])
    mb = large_output_MB(rows, 32, channel_block=16).to_numpy()
    assert mb[0] == 0 and mb[2] == 0
    assert mb[1] == pytest.approx(19 * 49.0) and mb[3] == pytest.approx(mb[1])
    unpadded = large_output_MB(rows, 32, channel_block=1).to_numpy()
    assert unpadded[1] == 0          # 12.25 MiB per output without the blocked layout
    more = large_output_MB(rows.assign(batch_size=rows["batch_size"] * 2), 32, channel_block=16).to_numpy()
    assert (more >= mb).all() and more[0] > 0   # non-decreasing in batch
    with pytest.raises(Exception, match="precision"):
        large_output_MB(rows.drop(columns=["precision"]), 32)


def cliff_rows(seed: int = 0) -> pd.DataFrame:
    """CPU rows whose latency is a layer roofline plus 0.4 ms per MB of conv outputs >= 32 MiB (the
    page-fault cost glibc's mmap threshold causes), x 2 % noise."""
    from carb.design.shapes import large_output_MB

    rng = np.random.default_rng(seed)
    cfgs = {}
    while len(cfgs) < 180:   # of 4 x 3 x 3 x 6 = 216 distinct configurations
        c = ArchConfig("basic", int(rng.choice([8, 14, 20, 32])), float(rng.choice([0.25, 0.5, 1.0])),
                       int(rng.choice([64, 128, 224])), int(rng.choice([1, 2, 4, 8, 16, 32])), "fp32", False)
        cfgs[c.config_id] = c
    df = frame(cfgs.values()).assign(device_kind="cpu")
    g = gemm_terms(df)
    fresh = large_output_MB(df, 32, 16)
    df["latency_ms"] = (0.2 + g["gemm_MNK"] / 5e7 + 0.4 * fresh) * rng.lognormal(0, 0.02, len(df))
    return df


def test_layer_prior_learns_the_page_fault_cost_on_cpu_rows_only():
    df = cliff_rows()
    y = df["latency_ms"].to_numpy()
    from carb.design.shapes import large_output_MB

    crossing = (large_output_MB(df, 32, 16) > 0).to_numpy()
    assert 10 <= crossing.sum() <= len(df) // 2
    p = make_prior("latency_ms", large_alloc_MB=32, channel_block=16).fit(df, y)
    plain = make_prior("latency_ms").fit(df, y)
    assert p.large_alloc_ == 32.0 and p.coef_["per_fresh_page_MB"] == pytest.approx(0.4, rel=0.15)
    assert "per_fresh_page_MB" not in plain.coef_ and p.to_dict()["large_alloc_MB"] == 32.0
    err = lambda q: np.abs(np.log(q.predict(df[crossing]) / y[crossing])).mean()  # noqa: E731
    assert err(p) < 0.5 * err(plain)
    # GPU (or imported) rows: the term is off whatever the setting (no glibc mmap behind CUDA tensors)
    gpu = make_prior("latency_ms", large_alloc_MB=32, channel_block=16).fit(df.assign(device_kind="cuda"), y)
    assert gpu.large_alloc_ is None and "per_fresh_page_MB" not in gpu.coef_


def test_stem_term_is_the_first_convolution():
    """The ImageNet stem at 224 px: a 7 x 7 conv of 3 -> 64 channels onto 112 x 112, per image."""
    rows = frame([ArchConfig("bottleneck", 50, 1.0, 224, b) for b in (1, 4)])
    g = gemm_terms(rows)
    assert g["stem_MNK"].tolist() == [112 * 112 * 64 * 147, 4 * 112 * 112 * 64 * 147]
    cifar = gemm_terms(frame([ArchConfig("basic", 20, 1.0, 32, 1, early_downsample=False)]))
    assert cifar["stem_MNK"].iloc[0] == 32 * 32 * 16 * 27


def _torch_native_MB(cfg: ArchConfig, dtype) -> float:
    """MB of weights of the convolutions PyTorch itself sends to its native (Slow2d) path for ``cfg``
    (one thread, more than one output pixel per image), times the batch: the ground truth for
    :func:`carb.design.shapes.native_weight_MB`, read from ``torch._C._select_conv_backend``."""
    import torch

    from carb.design.resnet import build_model

    model = build_model(cfg).to(dtype).eval()
    total = 0.0

    def hook(mod, inputs):
        nonlocal total
        x, w = inputs[0], mod.weight
        backend = torch._C._select_conv_backend(x, w, None, list(mod.stride), list(mod.padding),
                                                list(mod.dilation), False, [0, 0], mod.groups, None)
        ho = (x.shape[-1] + 2 * mod.padding[0] - mod.kernel_size[0]) // mod.stride[0] + 1
        if str(backend).endswith("Slow2d") and ho * ho > 1:
            total += x.shape[0] * w.numel() * w.element_size() / 2.0**20

    hooks = [m.register_forward_pre_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(torch.zeros(cfg.batch_size, 3, cfg.input_size, cfg.input_size, dtype=dtype))
    for h in hooks:
        h.remove()
    return total


def test_native_path_rule_matches_torchs_own_dispatch():
    """With one thread, PyTorch runs stride-1 1 x 1 convs at batch 2-15 and small batch-1 inputs on its
    native per-image path; native_weight_MB must name exactly those weights (checked against torch's
    own choice for every conv), and a precision oneDNN cannot run here goes native everywhere."""
    import torch

    from carb.design.shapes import native_weight_MB, onednn_precisions
    from carb.measure.fingerprint import parse_cpuinfo

    if not hasattr(torch._C, "_select_conv_backend"):
        pytest.skip("this torch has no _select_conv_backend")
    try:
        flags = parse_cpuinfo(open("/proc/cpuinfo").read())["flags"]
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    precisions = ["fp32"] if "avx_ne_convert" in open("/proc/cpuinfo").read() else list(dtypes)
    cfgs = [ArchConfig("bottleneck", 26, 0.25, 32, b, p, True) for b in (1, 2, 16) for p in precisions]
    cfgs += [ArchConfig("basic", 8, 0.25, 64, b, "fp32", False) for b in (1, 3)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        truth = [_torch_native_MB(c, dtypes[c.precision]) for c in cfgs]
    finally:
        torch.set_num_threads(threads)
    ours = native_weight_MB(frame(cfgs), 1, onednn_precisions(flags)).to_numpy()
    assert ours == pytest.approx(truth, rel=1e-6, abs=1e-9)
    n = len(precisions)
    assert truth[0] > 0 and truth[n] > 0           # fp32: batch 1 and 2 take the native path somewhere
    assert truth[2 * n] == 0.0                      # fp32 at batch 16: oneDNN everywhere
    if "fp16" in precisions and "fp16" not in onednn_precisions(flags):
        assert truth[2 * n + 2] > 0                 # fp16 without AVX-512 FP16: native at any batch
    # two threads: PyTorch sends 1 x 1 convs at batch 2-15 to oneDNN
    assert native_weight_MB(frame([cfgs[n]]), 2, ("fp32",)).iloc[0] == 0.0


def test_layer_prior_learns_the_native_path_cost_on_cpu_rows_with_threads():
    """CPU rows whose latency is a roofline plus 0.19 ms per MB of weights streamed per image by the
    native path (measured on the reference VM): the prior recovers the rate, extrapolates it to deeper
    networks, and leaves the term out on GPU rows or rows without a thread count."""
    from carb.design.shapes import native_weight_MB

    rng = np.random.default_rng(1)
    cfgs = {}
    depths = {"basic": [18, 34, 56], "bottleneck": [26, 50, 101]}
    while len(cfgs) < 150:   # of 2 x 3 x 3 x 2 x 6 = 216 configurations
        block = str(rng.choice(["basic", "bottleneck"]))
        c = ArchConfig(block, int(rng.choice(depths[block])), float(rng.choice([0.25, 0.5, 1.0])),
                       int(rng.choice([32, 64])), int(rng.choice([1, 2, 4, 8, 16, 32])), "fp32", True)
        cfgs[c.config_id] = c
    df = frame(cfgs.values()).assign(device_kind="cpu", threads=1)
    g = gemm_terms(df)
    nat = native_weight_MB(df, 1, ("fp32", "bf16"))
    df["latency_ms"] = (0.2 + g["gemm_MNK"] / 5e7 + 0.19 * nat) * rng.lognormal(0, 0.02, len(df))
    y = df["latency_ms"].to_numpy()
    train = (df["depth"] <= 50).to_numpy() & (df["depth"] != 34).to_numpy()
    p = make_prior("latency_ms", cpu_dispatch=True).fit(df[train], y[train])
    plain = make_prior("latency_ms").fit(df[train], y[train])
    assert p.native_ == {"threads": 1, "onednn": ["fp32", "bf16"]}
    assert p.coef_["per_native_weight_MB_fp32"] == pytest.approx(0.19, rel=0.15)
    err = lambda q: np.abs(np.log(q.predict(df[~train]) / y[~train])).mean()  # noqa: E731
    assert err(p) < 0.5 * err(plain) and err(p) < 0.05
    for rows in (df.assign(device_kind="cuda"), df.drop(columns=["threads"])):
        off = make_prior("latency_ms", cpu_dispatch=True).fit(rows[train], y[train])
        assert off.native_ is None and not any(k.startswith("per_native") for k in off.coef_)


def test_aliased_macs_follow_power_of_two_row_alignment():
    """fp16 on a CPU without AVX-512 FP16 runs every conv natively; rows of 64 x 64 pixels x 2 bytes are
    8 KB-aligned (6 doublings past 128 bytes), rows of 72 px maps at most 128-byte aligned at every stage."""
    from carb.design.shapes import native_terms

    c = ArchConfig("basic", 8, 0.25, 64, 2, "fp16", False)
    rows = frame([c, c.replace(input_size=72), c.replace(precision="fp32"), c.replace(precision="fp32", batch_size=16)])
    t = native_terms(rows, 1, ("fp32", "bf16"))
    a = t["native_aliased_MAC"].to_numpy()
    assert a[0] > 0 and a[1] == 0.0 and a[3] == 0.0
    # the first 3 x 3 conv after the stem: 64 x 64 map, 4 -> 4 channels (width 0.25), 6 doublings, batch 2
    assert a[0] >= 2 * 6 * (64 * 64) * 4 * 36
    assert (t["native_weight_MB"].to_numpy()[:2] > 0).all()   # fp16: every conv streams its weights per image


def test_layer_prior_extrapolates_on_the_shipped_cpu_reference():
    """On the real CPU reference (one thread, allocator pinned), the latency prior alone, fitted on the
    lower range of batch, depth, width and input size, predicts the upper range with R2 >= 0.9; without
    the CPU dispatch terms it does not on every split."""
    from sklearn.metrics import r2_score

    from carb.analysis.extrapolation import range_splits
    from carb.data.io import load_training_frame

    df, _ = load_training_frame("reference")
    y = df["latency_ms"].to_numpy(float)
    r2 = {}
    for dispatch in (True, False):
        for s in range_splits(df):
            p = make_prior("latency_ms", channel_block=16, cpu_dispatch=dispatch).fit(df[s.train], y[s.train])
            r2[dispatch, s.name] = r2_score(y[s.test], p.predict(df[s.test]))
    names = [n for d, n in r2 if d]
    assert sorted(names) == ["batch", "depth", "input", "width"]
    assert all(r2[True, n] >= 0.9 for n in names), r2
    assert min(r2[False, n] for n in names) < 0.9 and all(r2[True, n] > r2[False, n] for n in names), r2
    # downward too (carb-train's leave-one-batch-tier-out: train batch > 8, test <= 8): the fp32 native-path
    # cost cannot be learned from batches >= 16 (oneDNN there) and must not be borrowed from fp16's
    low = (df["batch_size"] <= 8).to_numpy()
    lobo = {d: r2_score(y[low], make_prior("latency_ms", channel_block=16, cpu_dispatch=d)
                        .fit(df[~low], y[~low]).predict(df[low])) for d in (True, False)}
    assert lobo[True] > lobo[False] - 0.02 and lobo[True] > 0.7, lobo


def test_unseen_precision_keeps_its_own_bytes_and_convolution_path():
    """Fitted on the shipped reference's fp32 rows alone, the latency prior predicts its bf16 rows with
    fp32's coefficients but bf16's bytes and bf16's path (oneDNN, never PyTorch's per-image GEMM on this
    AVX-512 CPU): R2 >= 0.85, far better than predicting them as if they were fp32."""
    from sklearn.metrics import r2_score

    from carb.data.io import load_training_frame

    df, _ = load_training_frame("reference")
    y = df["latency_ms"].to_numpy(float)
    fp32, bf16 = (df["precision"] == "fp32").to_numpy(), (df["precision"] == "bf16").to_numpy()
    p = make_prior("latency_ms", channel_block=16, cpu_dispatch=True).fit(df[fp32], y[fp32])
    assert p.precisions_ == ["fp32"] and p.stand_in("bf16") == "fp32"
    own = r2_score(y[bf16], p.predict(df[bf16]))
    as_fp32 = r2_score(y[bf16], p.predict(df[bf16].assign(precision="fp32")))
    assert own >= 0.85 and own > as_fp32 + 0.2, (own, as_fp32)


def _torch_max_im2col_MB(cfg: ArchConfig, nbytes: int) -> float:
    """The ground truth for :func:`carb.design.shapes.max_im2col_MB`, read from the real network: the
    largest ``H_out x W_out x C_in x k x k`` over its k x k (k > 1) convolutions, times batch and bytes."""
    import torch

    from carb.design.resnet import build_model

    model = build_model(cfg).eval()
    sizes = []

    def hook(mod, inputs, out):
        if mod.kernel_size[0] > 1:
            sizes.append(out.shape[-1] * out.shape[-2] * mod.in_channels * mod.kernel_size[0] * mod.kernel_size[1])

    hooks = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(torch.zeros(1, 3, cfg.input_size, cfg.input_size))
    for h in hooks:
        h.remove()
    return max(sizes) * cfg.batch_size * nbytes / 2.0**20


@pytest.mark.parametrize("cfg", [ArchConfig("basic", 8, 0.25, 224, 4, "fp32"),
                                 ArchConfig("basic", 20, 1.0, 32, 16, "bf16", early_downsample=False),
                                 ArchConfig("bottleneck", 50, 1.5, 96, 2, "fp16")])
def test_max_im2col_is_the_largest_unfolded_input_of_the_real_network(cfg):
    from carb.design.shapes import max_im2col_MB

    got = max_im2col_MB(frame([cfg])).iloc[0]
    assert got == pytest.approx(_torch_max_im2col_MB(cfg, 4 if cfg.precision == "fp32" else 2), rel=1e-9)
    twice = max_im2col_MB(frame([ArchConfig(**{**cfg.to_dict(), "batch_size": 2 * cfg.batch_size})])).iloc[0]
    assert twice == pytest.approx(2 * got)


def test_max_im2col_names_missing_knobs():
    from carb.design.shapes import max_im2col_MB
    from carb.errors import DatasetError

    g = frame([ArchConfig("basic", 8, 0.25, 224, 4)])
    with pytest.raises(DatasetError, match="precision"):
        max_im2col_MB(g.drop(columns=["precision"]))
    with pytest.raises(DatasetError, match="depth"):
        max_im2col_MB(g.drop(columns=["depth"]))
