"""carb.design.trace: the meta-device layer table of any model against fvcore (FLOPs/MACs within 1 %,
activation counts) and the libraries' parameter counts, the ResNet walk's table against the trace of
every torchvision ResNet and wide ResNet, liveness (peak = max of live bytes, checked by hand on a
chain), batch and precision scaling, the on-disk cache, and one-line refusals."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from carb.design import trace as T
from carb.design.arch import ArchConfig
from carb.design.resnet import TORCHVISION
from carb.design.zoo import build_model
from carb.errors import ZooError

GEMM = (*T.CONV_KINDS, "linear")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CARB_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", *(pytest.param(n, marks=pytest.mark.slow) for n in (
    "resnet50", "densenet121", "vgg11", "efficientnet_b0", "resnext50_32x4d", "shufflenet_v2_x0_5"))])
def test_macs_and_activations_agree_with_fvcore_and_parameters_with_the_module(name):
    from fvcore.nn import ActivationCountAnalysis, FlopCountAnalysis

    model = build_model(name, device="cpu")
    x = torch.zeros(1, 3, 64, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flops = FlopCountAnalysis(model, (x,)).unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        acts = ActivationCountAnalysis(model, (x,)).unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        ref_flops, ref_acts = flops.total(), acts.total()
    s = T.summarize(T.trace(model, (2, 3, 64, 64), cache=False))
    assert s["macs"] == pytest.approx(2 * ref_flops, rel=0.01)
    assert s["activations"] == 2 * ref_acts
    assert s["params"] == s["params_traced"] == sum(p.numel() for p in model.parameters())
    assert s["flops"] == pytest.approx(sum(s[f"flops_{k}"] for k in T.KINDS))


@pytest.mark.parametrize("name,side", [("tv:mobilenet_v3_large", 96), ("timm:ghostnet_100", 96),
                                       ("timm:efficientvit_b0", 96), ("tv:convnext_tiny", 96), ("timm:repvgg_a0", 96),
                                       ("timm:deit_tiny_patch16_224", 224)])
def test_zoo_names_trace_with_the_libraries_parameter_count(name, side):
    table = T.trace(name, (1, 3, side, side))
    model = build_model(name)
    assert table.attrs["params_total"] == table.attrs["params_traced"] == sum(p.numel() for p in model.parameters())
    assert table["params"].sum() == table.attrs["params_traced"]   # each parameter on the one row that reads it
    assert set(table["kind"]) <= set(T.KINDS) and "other" not in set(table["kind"])
    conv = table[table["kind"].isin(T.CONV_KINDS)]
    dw = conv["kind"] == "conv_depthwise"
    assert (conv.loc[dw, "weight_shape"].map(lambda w: w[1]) == 1).all()
    pw = conv["kind"] == "conv_pointwise"
    assert (conv.loc[pw, "kernel"] == 1).all() and (conv.loc[pw, "groups"] == 1).all()


def test_attention_is_one_sdpa_row_per_block_with_the_attention_flops():
    table = T.trace("timm:vit_tiny_patch16_224", (2, 3, 224, 224))
    sdpa = table[table["kind"] == "sdpa"]
    assert len(sdpa) == 12   # one per transformer block
    heads, tokens, dim = 3, 197, 64
    assert (sdpa["macs"] == 2 * 2 * heads * tokens * tokens * dim).all()   # batch 2; QK^T and AV
    assert (table["kind"] == "linear").sum() == 12 * 4 + 1


CFGS = {n: ArchConfig(block=b, depth=d, width_mult=1.0, input_size=64, batch_size=3, precision="bf16",
                      early_downsample=True, inner_mult=inner) for n, (b, d, inner) in TORCHVISION.items()}
COMPARED = ["kind", "in_shape", "out_shape", "weight_shape", "kernel", "stride", "groups", "flops", "macs",
            "params", "bytes_read", "bytes_written", "param_bytes"]


@pytest.mark.parametrize("name", sorted(TORCHVISION))
def test_the_resnet_walk_is_the_trace_of_the_torchvision_resnet(name):
    cfg = CFGS[name]
    walk = T.walk_table(cfg)
    traced = T.trace(f"tv:{name}", (3, 3, 64, 64), precision="bf16")
    pick = lambda t: t[t["kind"].isin(GEMM)][COMPARED].reset_index(drop=True)  # noqa: E731
    assert len(pick(walk)) > 20
    assert pick(walk).equals(pick(traced))
    assert walk.attrs["params_total"] == traced.attrs["params_total"]
    norm = lambda t: t[t["kind"] == "norm"][["in_shape", "macs", "params"]].reset_index(drop=True)  # noqa: E731
    assert norm(walk).equals(norm(traced))
    # every row but the views, liveness included: so the walk's layer-table features are the trace's
    ops = lambda t: t[t["kind"] != "reshape"][[*COMPARED, "live_bytes"]].reset_index(drop=True)  # noqa: E731
    assert ops(walk).astype(str).equals(ops(traced).astype(str))
    assert T.summarize(walk) == T.summarize(traced)


def test_a_walk_wrong_in_one_layer_differs_from_the_trace(monkeypatch):
    """The comparison above can fail: a walk whose one downsampling convolution has stride 1 differs."""
    import carb.design.layers as layers

    real = layers.layer_specs
    wrong = lambda cfg: [s._replace(stride=1) if s.name == "layers.1.0.downsample.0" else s  # noqa: E731
                         for s in real(cfg)]
    monkeypatch.setattr(layers, "layer_specs", wrong)
    walk = T.walk_table(CFGS["resnet18"])
    traced = T.trace("tv:resnet18", (3, 3, 64, 64), precision="bf16")
    pick = lambda t: t[t["kind"].isin(GEMM)][COMPARED].reset_index(drop=True)  # noqa: E731
    assert len(pick(walk)) == len(pick(traced))
    assert not pick(walk).equals(pick(traced))


def test_live_bytes_follow_tensor_lifetimes_on_a_chain():
    """x -> a -> b -> c in an nn.Sequential: while b is computed, a is alive (the loop still holds it);
    after c, a is freed. Peak = input + max(a + b, b + c), not the sum of every output."""
    chain = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1), nn.Conv2d(16, 4, 1))
    table = T.trace(chain, (2, 3, 8, 8), precision="fp16", cache=False)
    x, a, b, c = (2 * ch * 64 * 2 for ch in (3, 8, 16, 4))
    assert list(table["live_bytes"]) == [x + a, x + a + b, x + b + c]
    assert T.summarize(table)["peak_live_bytes"] == x + a + b < x + a + b + c


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_live_bytes_equal_the_collectors_peak_on_a_real_cpu_forward(precision):
    """A max-pool returns int64 indices beside its output: they are alive at that op at 8 bytes per
    element whatever the precision. The trace's peak (input included) equals the peak that the CPU
    collector's tracker (:class:`carb.measure.cpu.PeakTensorMemory`) measures on a real forward of the same
    module at the same precision (before: 4 bytes per index element at fp32 and 2 at bf16, so the trace
    was under at the max-pool, by 21 % on SqueezeNet 1.1 at bf16)."""
    from carb.measure.cpu import live_storage_bytes, peak_tensor_memory_class

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
                        nn.Conv2d(16, 8, 1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    table = T.trace(net, (4, 3, 32, 32), precision=precision, cache=False)   # traced as built (fp32)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    net = net.to(dtype).eval()   # the collector's forward at the precision (CpuMeter.prepare)
    x = torch.randn(4, 3, 32, 32, dtype=dtype)
    _, known = live_storage_bytes(net)   # parameters only: the trace counts the input as live
    tracker = peak_tensor_memory_class()(known)
    with torch.no_grad(), tracker:
        net(x)
    measured = tracker.peak_bytes + x.untyped_storage().nbytes()
    assert T.summarize(table)["peak_live_bytes"] == measured
    pool = table[table["op"] == "max_pool2d_with_indices"].iloc[0]
    out = 4 * 16 * 15 * 15
    assert pool["live_bytes"] >= out * (8 + T.BYTES_PER_ELEMENT[precision])   # indices at 8 bytes each


class _GatheredBias(nn.Module):
    """Attention biases gathered from a parameter table by an int64 index buffer, added to a per-image
    score map: LeViT's pattern (``cached``: the first eval forward keeps the gather in a dict, which
    ``train()`` clears) or Swin's (gathered again every forward). 8x8 px in: 64 tokens, 4 heads."""

    def __init__(self, cached: bool) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, 4, 3, padding=1)
        self.table = nn.Parameter(torch.randn(4, 225))
        self.register_buffer("idx", torch.randint(0, 225, (64, 64)), persistent=False)
        self.cached, self.cache = cached, {}

    def train(self, mode: bool = True) -> nn.Module:
        super().train(mode)
        self.cache = {}
        return self

    def bias(self, device: torch.device) -> torch.Tensor:
        if not self.cached:
            return self.table[:, self.idx]
        if str(device) not in self.cache:
            self.cache[str(device)] = self.table[:, self.idx]
        return self.cache[str(device)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.proj(x).flatten(2)                                        # (B, 4, 64)
        attn = q.unsqueeze(-1) * q.unsqueeze(-2) + self.bias(x.device)     # (B, 4, 64, 64)
        return attn.softmax(-1).sum(-1)


def _collector_peak_bytes(net: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """``(peak bytes the CPU collector measures, bytes of the module's parameters and buffers)``: as
    :meth:`carb.measure.cpu.CpuMeter.peak_memory_MB` after the warm-up forwards of the protocol."""
    from carb.measure.cpu import live_storage_bytes, peak_tensor_memory_class

    with torch.no_grad():
        net(x)   # warm-up
        base, known = live_storage_bytes(net, x)
        tracker = peak_tensor_memory_class()(known)
        with tracker:
            net(x)
    return base + tracker.peak_bytes, live_storage_bytes(net)[0]


@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_biases_gathered_from_parameters_count_once_and_a_kept_cache_not_at_all(cached, precision):
    """The gathered bias does not grow with the batch, and a gather the module keeps (LeViT's
    ``attention_bias_cache``) is made by the collector's warm-up forward, before its measured one: the
    trace's peak plus the module's state (parameters and buffers) equals the collector's peak at batch 4.
    Before (tracer 2) the gather counted as an activation of every image: 4 x 4 x 64 x 64 elements at
    batch 4, 3 of them too many (the cached one 4)."""
    from carb.design.zoo_features import module_summary, static_of

    torch.manual_seed(0)
    net = _GatheredBias(cached)
    table = T.trace(net, (4, 3, 8, 8), precision=precision, cache=False)
    s = T.summarize(table)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    measured, state = _collector_peak_bytes(net.to(dtype).eval(), torch.randn(4, 3, 8, 8, dtype=dtype))
    assert s["buffer_bytes"] == 64 * 64 * 8 and s["param_bytes"] + s["buffer_bytes"] == state
    assert s["peak_live_bytes"] + state == measured
    bias = 4 * 64 * 64 * T.BYTES_PER_ELEMENT[precision]
    assert s["cache_bytes"] == (bias if cached else 0)
    assert s["peak_live_state_bytes"] == (0 if cached else bias)
    # the zoo row's columns at another batch, from the batch-1 summary: the same equality
    net.float()
    row = static_of(module_summary(net, 8, precision), 3)
    measured3, _ = _collector_peak_bytes(net.to(dtype).eval(), torch.randn(3, 3, 8, 8, dtype=dtype))
    assert (row["peak_live_MB"] + row["param_size_MB"]) * 2 ** 20 == pytest.approx(measured3, abs=0.5)


def test_state_derived_rows_count_once_per_batch_not_per_image():
    """The bias gather (a parameter table indexed by a fixed int64 buffer: the relative-position bias of
    Swin, BEiT, CoAtNet) is flagged ``state`` and its FLOPs and bytes are the same at batch 1 and 4; every
    other row that does work scales 4x. The zoo features at batch 4 from the batch-1 summary equal the
    batch-4 table's totals (before tracer 4 the gather was counted per image: 4x at batch 4)."""
    from carb.design.zoo_features import MB, kinds_of, module_summary, static_of

    net = _GatheredBias(cached=False)
    one, four = (T.trace(net, (b, 3, 8, 8), cache=False) for b in (1, 4))
    flag = four["state"].to_numpy(bool)
    assert np.array_equal(flag, one["state"].to_numpy(bool))
    gather = (four["op"] == "index").to_numpy() & (four["bytes_written"] > 0).to_numpy()
    assert gather.any() and flag[gather].all()
    assert not flag[(four["kind"].isin(["conv_regular", "activation"])).to_numpy()].any()
    for col in ("flops", "macs", "bytes_read", "bytes_written"):
        assert np.array_equal(four.loc[flag, col], one.loc[flag, col])
    assert four.loc[gather, "bytes_written"].sum() == 4 * 64 * 64 * 4   # 4 heads x 64 x 64 at fp32, once
    per_image = ~flag & (four["kind"] != "reshape").to_numpy()
    for col in ("flops", "bytes_written"):
        assert np.array_equal(four.loc[per_image, col], 4 * one.loc[per_image, col])
    total = T.summarize(four)
    s = module_summary(net, 8)
    assert s["state_bytes_written"] > 0 and s["state_bytes_copy"] > 0
    row, kinds = static_of(s, 4), kinds_of(s, 4)
    assert row["bytes_written_MB"] * MB == pytest.approx(total["bytes_written"])
    # bytes read: the same, but the features count the convolution's weights per image (their convention)
    conv_weights = 3 * four.loc[~flag, "param_bytes"].sum()
    assert row["bytes_read_MB"] * MB == pytest.approx(total["bytes_read"] + conv_weights)
    assert row["flops"] == pytest.approx(total["macs"])
    assert kinds["bytes_copy_MB"] * MB == pytest.approx(total["bytes_copy"])
    assert kinds["bytes_copy_MB"] < 4 * s["bytes_copy"] / MB   # tracer 3's count: the gather per image


class _StdConvNet(nn.Module):
    """NFNet's pattern: a convolution whose weight is standardised every forward (a storage of the weight's
    size made from parameters only), late where the feature map is small, after a stem with a large output."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, padding=1)
        self.pool = nn.AvgPool2d(4)
        self.weight = nn.Parameter(torch.randn(64, 32, 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.stem(x))
        w = nn.functional.batch_norm(self.weight.reshape(1, 64, -1), None, None, training=True, momentum=0.0)
        return nn.functional.conv2d(x, w.reshape_as(self.weight), padding=1)


def test_the_peak_at_any_batch_comes_from_the_batch_1_trace_where_state_derived_storages_are_large():
    """At batch 1 the standardised weight makes the late convolution the peak, at batch 4 the stem is: the
    zoo row's ``peak_live_MB`` (from the batch-1 summary, :func:`carb.design.zoo_features.live_frontier`)
    plus its state equals the collector's peak at both (batch 4: tracer 2 counted the weight per image, 1.8x
    over; the batch-1 peak row times the batch would be 18 % under)."""
    from carb.design.zoo_features import module_summary, static_of

    torch.manual_seed(0)
    net = _StdConvNet()
    s = module_summary(net, 16)
    assert len(s["peak_live_frontier"]) >= 2
    for batch in (1, 4):
        measured, _ = _collector_peak_bytes(net.eval(), torch.randn(batch, 3, 16, 16))
        row = static_of(s, batch)
        assert (row["peak_live_MB"] + row["param_size_MB"]) * 2 ** 20 == pytest.approx(measured, abs=0.5)


@pytest.mark.slow
def test_levits_trace_peak_plus_its_state_is_the_collectors_peak():
    """LeViT-128S (eleven cached attention-bias gathers): tracer 2 was 28 % over the collector's peak at
    batch 16; now the estimate equals it (batch 2 here)."""
    from carb.design.zoo_features import static_of, zoo_summary

    torch.manual_seed(0)
    net = build_model("timm:levit_128s", device="cpu")
    measured, _ = _collector_peak_bytes(net.eval(), torch.randn(2, 3, 224, 224))
    s = zoo_summary("timm:levit_128s", 224)
    assert s["cache_bytes"] > 0
    row = static_of(s, 2)
    assert (row["peak_live_MB"] + row["param_size_MB"]) * 2 ** 20 == pytest.approx(measured, abs=0.5)


def test_batch_and_precision_scale_one_cached_trace(monkeypatch):
    one = T.trace("tv:mobilenet_v3_small", (1, 3, 64, 64))
    calls = []
    real = T._trace_batch1
    monkeypatch.setattr(T, "_trace_batch1", lambda *a: calls.append(a) or real(*a))
    four = T.trace("tv:mobilenet_v3_small", (4, 3, 64, 64), precision="bf16")
    assert calls == []   # from the cache
    for col in ("flops", "macs"):
        assert np.array_equal(four[col], 4 * one[col])
    assert np.array_equal(four["param_bytes"], one["param_bytes"] // 2)
    assert np.array_equal(four["live_bytes"], 2 * one["live_bytes"])
    assert np.array_equal(four["bytes_read"] - four["param_bytes"], 2 * (one["bytes_read"] - one["param_bytes"]))
    assert four.attrs["input_shape"] == (4, 3, 64, 64)
    T.trace("tv:mobilenet_v3_small", (1, 3, 96, 96))   # another input size is another trace
    T.trace("tv:mobilenet_v3_small", (1, 3, 64, 64), settings={"num_classes": 10})   # other settings too
    assert len(calls) == 2


def test_a_damaged_cache_entry_is_traced_again():
    first = T.trace("tv:squeezenet1_0", (1, 3, 64, 64))
    path = T.cache_path(T.model_key("tv:squeezenet1_0"), (3, 64, 64))
    path.write_bytes(b"not a pickle")
    again = T.trace("tv:squeezenet1_0", (1, 3, 64, 64))
    assert again.equals(first)


def test_module_identity_is_structural():
    a, b = build_model("tv:resnet18"), build_model("tv:resnet18")
    assert T.model_key(a) == T.model_key(b)
    assert T.model_key(a) != T.model_key(build_model("tv:resnet18", num_classes=10))
    assert T.model_key(a) != T.model_key(build_model("tv:resnet34"))


class _DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        return y if y.sum() > 0 else -y


class _PlainTensor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.scale = torch.ones(4, 1, 1)   # neither parameter nor buffer: stays on the CPU

    def forward(self, x):
        return self.conv(x) * self.scale


class _ReturnsShape(nn.Module):
    def forward(self, x):
        return x.shape


def _custom_op_model() -> nn.Module:
    if not hasattr(torch.ops.carbtest, "cpu_only"):
        torch.library.define("carbtest::cpu_only", "(Tensor x) -> Tensor")
        torch.library.impl("carbtest::cpu_only", "CPU")(lambda x: x.clone())

    class Custom(nn.Module):
        def forward(self, x):
            return torch.ops.carbtest.cpu_only(x)
    return Custom()


@pytest.mark.parametrize("make,shape,reason", [
    (_DataDependent, (1, 3, 16, 16), r"^model '_DataDependent': cannot be traced on the meta device \(data-dependent"),
    (_custom_op_model, (1, 3, 16, 16), r"^model 'Custom': cannot be traced on the meta device .*meta kernel"),
    (_ReturnsShape, (1, 3, 16, 16), r"^model '_ReturnsShape': not a vision backbone"),
    (_PlainTensor, (1, 3, 16, 16), r"^model '_PlainTensor': cannot be traced .* neither a parameter nor a buffer"),
    (lambda: nn.LSTM(4, 4), (1, 3, 16, 16), r"^model 'LSTM': refuses the input"),
    (lambda: "timm:vit_tiny_patch16_224", (1, 3, 64, 64), r"^model 'timm:vit_tiny_patch16_224': refuses the input"),
    (lambda: "no_such_net", (1, 3, 64, 64), r"^model 'no_such_net': unknown model"),
    (lambda: "resnet18", (1, 3, 64), r"^model 'resnet18': input_shape \(1, 3, 64\) is not allowed"),
])
def test_refusals_are_one_line_naming_the_model_and_the_reason(make, shape, reason):
    with pytest.raises(ZooError, match=reason) as e:
        T.trace(make(), shape)
    assert "\n" not in str(e.value)


def test_a_grid_traces_the_others_and_lists_the_refused():
    tables, refused = T.trace_many(["tv:squeezenet1_1", "no_such_net", "timm:vit_tiny_patch16_224"], (1, 3, 64, 64))
    assert list(tables) == ["tv:squeezenet1_1"] and len(tables["tv:squeezenet1_1"]) > 10
    assert set(refused) == {"no_such_net", "timm:vit_tiny_patch16_224"}
    assert "refuses the input" in refused["timm:vit_tiny_patch16_224"]


def test_reparam_traces_the_folded_graph_timm_benchmarks_with_reparam():
    """timm's benchmark with ``--reparam`` times (and counts the parameters of) the folded graph: the
    published 4090/5090/PRO 6000 files give mobileone_s0 2.08 M parameters, the 3090 (torch 2.4) file
    5.29 M. The reparameterised trace gives the first, the default trace the second; the folded graph
    runs about a seventh of the operations, and ResNet (nothing to fold) is unchanged."""
    import pandas as pd

    from carb.data.importers.timm_zoo import ZOO_BENCH

    pub = pd.read_parquet(ZOO_BENCH, columns=["model", "device_name", "params"])
    pub = pub[pub["model"] == "mobileone_s0"].groupby("device_name")["params"].first()
    plain = T.trace("timm:mobileone_s0", (1, 3, 96, 96))
    fused = T.trace("timm:mobileone_s0", (1, 3, 96, 96), reparam=True)
    assert not plain.attrs["reparam"] and fused.attrs["reparam"]
    assert round(fused.attrs["params_total"] / 1e6, 2) * 1e6 == pub["RTX 4090"] == pub["RTX 5090"] == 2.08e6
    assert round(plain.attrs["params_total"] / 1e6, 2) * 1e6 == pub["RTX 3090"] == 5.29e6
    assert fused.attrs["params_traced"] == fused.attrs["params_total"]
    assert len(fused) < len(plain) / 5 and T.summarize(fused)["macs"] < T.summarize(plain)["macs"] / 3
    assert not (fused["kind"] == "norm").any()   # every batch norm folded into its convolution
    same = T.trace("tv:resnet18", (1, 3, 64, 64), reparam=True)
    assert not same.attrs["reparam"] and same.equals(T.trace("tv:resnet18", (1, 3, 64, 64)))


@pytest.mark.parametrize("name,side", [("repvgg_a0", 64), *(pytest.param(n, s, marks=pytest.mark.slow) for n, s in (
    ("mobileone_s0", 64), ("repvit_m0_9", 64), ("levit_conv_128s", 224), ("fastvit_t8", 64)))])
def test_meta_reparam_is_timms_reparameterize_model_on_real_weights(name, side):
    """Folding on the meta device gives the table of timm's own ``reparameterize_model`` run on a CPU
    model with real weights (same operations, shapes, FLOPs and parameters); the input module is untouched."""
    from timm.utils.model import reparameterize_model

    model = build_model(f"timm:{name}", device="cpu")
    before = sum(p.numel() for p in model.parameters())
    ours = T.trace(model, (1, 3, side, side), reparam=True, cache=False)
    timms = T.trace(reparameterize_model(model), (1, 3, side, side), cache=False)
    assert sum(p.numel() for p in model.parameters()) == before   # not folded in place
    cols = ["op", "kind", "in_shape", "out_shape", "weight_shape", "flops", "macs", "params"]
    assert ours[cols].reset_index(drop=True).equals(timms[cols].reset_index(drop=True))
    assert ours.attrs["params_total"] == timms.attrs["params_total"] < before


def test_reparam_is_its_own_cache_entry(monkeypatch):
    T.trace("timm:repvgg_a0", (1, 3, 64, 64))
    calls = []
    real = T._trace_batch1
    monkeypatch.setattr(T, "_trace_batch1", lambda *a: calls.append(a) or real(*a))
    fused = T.trace("timm:repvgg_a0", (2, 3, 64, 64), reparam=True)
    assert len(calls) == 1 and fused.attrs["reparam"]
    again = T.trace("timm:repvgg_a0", (2, 3, 64, 64), reparam=True)
    assert len(calls) == 1 and again.attrs["reparam"] and again.equals(fused)


def test_nothing_to_fold_is_remembered_without_building_again(monkeypatch):
    """A reparam trace of a network with nothing to fold is its plain trace, and the cache remembers that:
    the next reparam call builds nothing (the cascade on timm's folded files asks it of every predicted name)."""
    import carb.design.zoo as Z

    plain = T.trace("timm:resnet10t", (1, 3, 64, 64))
    first = T.trace("timm:resnet10t", (1, 3, 64, 64), reparam=True)
    assert not first.attrs["reparam"] and first.equals(plain)
    builds = []
    real = Z.build_model
    monkeypatch.setattr(Z, "build_model", lambda *a, **k: builds.append(a) or real(*a, **k))
    again = T.trace("timm:resnet10t", (2, 3, 64, 64), reparam=True)
    assert builds == [] and not again.attrs["reparam"]
    assert again.equals(T.trace("timm:resnet10t", (2, 3, 64, 64)))


class _Attention(nn.Module):
    """q = k = v = the input reshaped to ``shape``: one scaled-dot-product attention call."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape
        self.proj = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        y = self.proj(x).reshape(self.shape)
        return torch.nn.functional.scaled_dot_product_attention(y, y, y)


def test_attention_off_the_fused_kernels_is_counted_apart():
    """Fused SDPA kernels take 4-D inputs only; a 5-D call (NesT, Hiera) runs the math path, which
    materialises tokens x tokens scores: flops_sdpa_math and 4 passes over the scores in bytes_sdpa_math."""
    four = T.summarize(T.trace(_Attention((1, 3, 64, 16)), (1, 3, 32, 32), precision="fp16", cache=False))
    five = T.summarize(T.trace(_Attention((1, 3, 4, 16, 16)), (1, 3, 32, 32), precision="fp16", cache=False))
    assert four["flops_sdpa"] == five["flops_sdpa"] * 4 > 0      # 64 tokens vs 4 blocks of 16
    assert four["flops_sdpa_math"] == four["bytes_sdpa_math"] == 0
    assert five["flops_sdpa_math"] == five["flops_sdpa"]
    assert five["bytes_sdpa_math"] == 4 * (3 * 4 * 16 * 16) * 2   # heads x blocks x 16 x 16 scores, fp16


def test_attention_on_the_math_path_counts_its_operands_apart():
    """``bytes_sdpa_math_io``: the math-path calls' Q, K, V read and output written (at the table's precision),
    which the latency model prices with the passes the math path makes over them; 0 for fused 4-D calls."""
    four = T.summarize(T.trace(_Attention((1, 3, 64, 16)), (1, 3, 32, 32), precision="fp16", cache=False))
    five = T.summarize(T.trace(_Attention((1, 3, 4, 16, 16)), (1, 3, 32, 32), precision="fp16", cache=False))
    assert four["bytes_sdpa_math_io"] == 0
    # Q = K = V here: one operand read, the output written; fp16
    assert five["bytes_sdpa_math_io"] == 2 * (3 * 4 * 16 * 16) * 2 == five["bytes_sdpa"]
