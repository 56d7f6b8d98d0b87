"""mmaemu.nn's block-wise FP8 layer (DeepSeek-V3's recipe): act_quant and weight_quant as
DeepSeek-V3's kernels compute them, BlockwiseFP8Linear against hand-built mmaemu.scaled_mm calls,
its weight_scale_inv layout in a state dict, and swap_fp8_linears on DeepSeek-convention layers.

The reference written out here (deepseek-ai/DeepSeek-V3 inference/kernel.py@0623163,
act_quant_kernel and weight_quant_kernel): per group s = max(|x|) / 448 and y = E4M3(x / s) in
fp32."""
import warnings

import pytest
import torch

import mmaemu
from mmaemu.nn import (BlockwiseFP8Linear, act_quant, is_deepseek_fp8_linear, swap_fp8_linears,
                       weight_quant)
from mmaemu.testing import assert_bitwise_equal, bits

E4M3 = torch.float8_e4m3fn


def exact_bf16(shape, seed, exp):
    """bf16 values k * 2^exp with integer k in [-127, 127]: the same on every machine."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-127, 128, shape, generator=g).float() * 2.0 ** exp).to(torch.bfloat16)


def reference_act_quant(x):
    """act_quant_kernel written out for finite x: per row and 128 columns, in fp32."""
    rows = x.float().reshape(-1, x.shape[-1] // 128, 128)
    s = rows.abs().amax(dim=-1) / 448.0
    return (rows / s.unsqueeze(-1)).to(E4M3).reshape(x.shape), s.reshape(*x.shape[:-1], -1)


def reference_weight_quant(w):
    """weight_quant_kernel written out, block by block."""
    N, K = w.shape
    codes = torch.empty(N, K, dtype=E4M3)
    scales = torch.empty(-(-N // 128), -(-K // 128))
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            block = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128].float()
            scales[i, j] = block.abs().max() / 448.0
            codes[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = (block / scales[i, j]).to(E4M3)
    return codes, scales


def hand_built(x, codes, scales, blockwise="deepgemm", profile=None):
    """The layer's forward written out with mmaemu.scaled_mm: torch's layouts, scale_a M-major."""
    xq, sx = reference_act_quant(x.reshape(-1, x.shape[-1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)   # blockwise=None
        y = mmaemu.scaled_mm(xq, codes.t(), sx.t().contiguous().t(), scales.t(),
                             out_dtype=torch.bfloat16, profile=profile, blockwise=blockwise)
    return y.reshape(*x.shape[:-1], -1)


@pytest.fixture(scope="module")
def linear():
    torch.manual_seed(0)
    lin = torch.nn.Linear(384, 208, bias=False)     # K: 3 groups; N: a ragged second block
    with torch.no_grad():
        lin.weight.copy_(exact_bf16((208, 384), seed=1, exp=-9))
    return lin.to(torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# act_quant and weight_quant.

def test_act_quant_is_deepseeks_per_group_amax():
    x = exact_bf16((5, 384), seed=2, exp=-4)
    x[1, 130] = 100.0                                # group 1 of row 1: its amax
    y, s = act_quant(x)
    want_y, want_s = reference_act_quant(x)
    assert y.dtype == E4M3 and s.dtype == torch.float32 and s.shape == (5, 3)
    assert_bitwise_equal(s, want_s)
    assert_bitwise_equal(y, want_y)
    assert s[1, 1] == torch.tensor(100.0) / 448.0 and bits(y)[1, 130] == 0x7E     # 448
    # the leading dimensions are kept: s [..., K / 128]
    y3, s3 = act_quant(x[:4].reshape(2, 2, 384))
    assert s3.shape == (2, 2, 3)
    assert_bitwise_equal(y3.reshape(4, 384), y[:4])


def test_act_quant_all_zero_group_gives_scale_zero_and_nan():
    # The reference divides 0 by s = 0: NaN codes (the GPU's positive NaN, 0x7F), scale 0.
    x = exact_bf16((3, 256), seed=3, exp=-4)
    x[1, 128:] = 0.0
    y, s = act_quant(x)
    assert s[1, 1].item() == 0.0 and s[1, 0].item() > 0.0
    assert (bits(y)[1, 128:] == 0x7F).all()
    assert_bitwise_equal(y[1, :128], reference_act_quant(x)[0][1, :128])
    # In the GEMM that row is NaN in every column, and the other rows are untouched.
    codes, scales = weight_quant(exact_bf16((32, 256), seed=4, exp=-8))
    layer = BlockwiseFP8Linear.from_fp8(codes, scales)
    with torch.no_grad():
        out = layer(x)
    assert torch.isnan(out[1]).all() and torch.isfinite(out[[0, 2]]).all()
    assert_bitwise_equal(out[[0, 2]], hand_built(x[[0, 2]], codes, scales))


def test_act_quant_skips_nan_in_the_amax():
    # Triton's tl.max ignores NaN (maxNum): the group's other elements keep their scale.
    x = exact_bf16((2, 128), seed=5, exp=-4)
    clean = x.clone()
    x[0, 7] = float("nan")
    clean[0, 7] = 0.0
    y, s = act_quant(x)
    want_y, want_s = act_quant(clean)
    assert_bitwise_equal(s, want_s)
    assert bits(y)[0, 7] == 0x7F
    y[0, 7] = want_y[0, 7]
    assert_bitwise_equal(y, want_y)
    _, s_all = act_quant(torch.full((1, 128), float("nan")))
    assert torch.isnan(s_all).all()


def test_act_quant_refuses_a_ragged_group():
    with pytest.raises(ValueError, match="multiple of block_size=128"):
        act_quant(torch.zeros(2, 100))
    with pytest.raises(ValueError, match="block_size"):
        act_quant(torch.zeros(2, 128), 0)


def test_weight_quant_blocks_and_scale_layout(linear):
    codes, scales = weight_quant(linear.weight)
    assert codes.shape == (208, 384) and codes.dtype == E4M3
    assert scales.shape == (2, 3) and scales.dtype == torch.float32   # [ceil(N/128), ceil(K/128)]
    want_codes, want_scales = reference_weight_quant(linear.weight.detach())
    assert_bitwise_equal(scales, want_scales)
    assert_bitwise_equal(codes, want_codes)
    # the ragged block (rows 128..207, columns 256..383) has its own amax
    assert scales[1, 2] == linear.weight[128:, 256:].detach().float().abs().max() / 448.0


# ---------------------------------------------------------------------------------------------
# BlockwiseFP8Linear.

@pytest.mark.parametrize("blockwise", ["deepgemm", "cutlass", None])
def test_layer_equals_hand_built_scaled_mm(linear, blockwise):
    layer = BlockwiseFP8Linear.from_float(linear, blockwise=blockwise)
    codes, scales = reference_weight_quant(linear.weight.detach())
    x = exact_bf16((2, 5, 384), seed=6, exp=-4)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        y = layer(x)
    assert y.shape == (2, 5, 208) and y.dtype == torch.bfloat16
    assert_bitwise_equal(y, hand_built(x, codes, scales, blockwise))


def test_one_row_and_no_rows(linear):
    # One row: the same bits as that row among others (rows are computed on their own).
    layer = BlockwiseFP8Linear.from_float(linear)
    x = exact_bf16((4, 384), seed=7, exp=-4)
    with torch.no_grad():
        many = layer(x)
        assert_bitwise_equal(layer(x[2]), many[2])
        assert_bitwise_equal(layer(x[2:3]), many[2:3])
        assert layer(x[:0]).shape == (0, 208)
    # K = 128 and N <= 128: one row has one scale on each side (tensor-wise by torch's rule);
    # DeepGEMM's kernel still computes it block-wise, with the bits of a row among others.
    small = BlockwiseFP8Linear.from_fp8(*weight_quant(exact_bf16((64, 128), seed=15, exp=-8)))
    x = exact_bf16((3, 128), seed=16, exp=-4)
    with torch.no_grad():
        assert_bitwise_equal(small(x[1:2]), small(x)[1:2])


def test_state_dict_has_deepseeks_names_and_layout(linear):
    codes, scales = weight_quant(linear.weight)
    checkpoint = {"weight": codes, "weight_scale_inv": scales}     # a DeepSeek-V3 layer's pair
    fresh = BlockwiseFP8Linear(384, 208)
    assert set(fresh.state_dict()) == {"weight", "weight_scale_inv"}
    assert not any(p.requires_grad for p in fresh.parameters())
    fresh.load_state_dict(checkpoint)
    x = exact_bf16((3, 384), seed=8, exp=-4)
    with torch.no_grad():
        assert_bitwise_equal(fresh(x), hand_built(x, codes, scales))
    with pytest.raises(RuntimeError, match="weight_scale_inv"):
        fresh.load_state_dict({"weight": codes, "weight_scale_inv": scales.t()})


def test_bias_is_added_after_the_gemm_in_bf16():
    lin = torch.nn.Linear(128, 32).to(torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(exact_bf16((32, 128), seed=9, exp=-8))
        lin.bias.copy_(exact_bf16((32,), seed=10, exp=-6))
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="bias='after'"):
        BlockwiseFP8Linear.from_float(lin)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="not modelled"):
        BlockwiseFP8Linear.from_float(lin, bias="fused")
    layer = BlockwiseFP8Linear.from_float(lin, bias="after")
    assert set(layer.state_dict()) == {"weight", "weight_scale_inv", "bias"}
    codes, scales = reference_weight_quant(lin.weight.detach())
    x = exact_bf16((4, 128), seed=11, exp=-4)
    with torch.no_grad():
        assert_bitwise_equal(layer(x), hand_built(x, codes, scales) + lin.bias)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(in_features=100, out_features=16), ValueError, "multiple of 128"),
    (dict(in_features=128, out_features=24), mmaemu.ReferenceRejectsError,
     "mat2 shape \\(128x24\\) must be divisible by 16"),
    (dict(in_features=128, out_features=16, profile="ada"), mmaemu.UnsupportedFeatureError,
     "hopper profiles"),
    (dict(in_features=128, out_features=16, blockwise="triton"), ValueError, "block-wise kernels"),
    (dict(in_features=128, out_features=16, profile="h100"), KeyError, "unknown profile"),
    (dict(in_features=128.0, out_features=16), TypeError, "in_features"),
    (dict(in_features=128, out_features=16, bias=None), TypeError, "bias"),
])
def test_refused_at_construction(kwargs, error, message):
    with pytest.raises(error, match=message) as e:
        BlockwiseFP8Linear(**kwargs)
    if error is mmaemu.ReferenceRejectsError:
        assert "BlockwiseFP8Linear(in_features=128, out_features=24)" in str(e.value)


def test_from_fp8_checks_its_tensors():
    codes = torch.zeros(32, 256, dtype=E4M3)
    with pytest.raises(ValueError, match=r"shape \(1, 2\)"):
        BlockwiseFP8Linear.from_fp8(codes, torch.ones(2, 1))
    with pytest.raises(TypeError, match="float32"):
        BlockwiseFP8Linear.from_fp8(codes, torch.ones(1, 2, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        BlockwiseFP8Linear.from_fp8(codes.to(torch.float8_e5m2), torch.ones(1, 2))
    with pytest.raises(TypeError, match="from_fp8"):     # an FP8 weight is not quantised again
        BlockwiseFP8Linear.from_float(_FP8Holder(codes, torch.ones(1, 2)))


def test_inference_only(linear):
    layer = BlockwiseFP8Linear.from_float(linear)
    x = exact_bf16((2, 384), seed=12, exp=-4).requires_grad_()
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="inference only"):
        layer(x)
    with torch.no_grad():
        layer(x)
    with torch.no_grad(), pytest.raises(ValueError, match="in_features"):
        layer(torch.zeros(2, 256))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # TorchScript is deprecated in 2.13
def test_compile_export_and_script(linear):
    layer = BlockwiseFP8Linear.from_float(linear)
    x = exact_bf16((3, 384), seed=13, exp=-4)
    with torch.no_grad():
        want = layer(x)
        assert_bitwise_equal(torch.compile(layer, fullgraph=True, backend="aot_eager")(x), want)
        assert_bitwise_equal(torch.export.export(layer, (x,)).module()(x), want)
        assert_bitwise_equal(torch.jit.script(layer)(x), want)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # torch's own use of TorchScript
def test_compile_inductor_keeps_act_quants_bits(linear):
    # Inductor generates its own code for act_quant (the division, the NaN-skipping max): an
    # all-zero group and a NaN element must give the eager bits.
    layer = BlockwiseFP8Linear.from_float(linear)
    x = exact_bf16((4, 384), seed=14, exp=-4)
    x[1, 128:256] = 0.0
    x[2, 5] = float("nan")
    with torch.no_grad():
        assert_bitwise_equal(torch.compile(layer, fullgraph=True)(x), layer(x))


# ---------------------------------------------------------------------------------------------
# swap_fp8_linears on DeepSeek-convention layers.

class _FP8Holder(torch.nn.Module):
    """A DeepSeek-convention FP8 linear layer as a checkpoint loader builds it: an E4M3 weight
    and its weight_scale_inv as parameters without grad (transformers' FP8Linear, ...)."""

    def __init__(self, weight, weight_scale_inv, bias=None):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.weight_scale_inv = torch.nn.Parameter(weight_scale_inv, requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)

    def forward(self, x):
        raise NotImplementedError("stands for a GPU layer")


def deepseek_style(n_in, n_out, seed, bias=False):
    codes, scales = weight_quant(exact_bf16((n_out, n_in), seed=seed, exp=-8))
    b = exact_bf16((n_out,), seed=seed + 1, exp=-6) if bias else None
    return _FP8Holder(codes, scales, b)


def attention_like():
    model = torch.nn.Module()
    model.attn = torch.nn.Module()
    model.attn.wq_a = deepseek_style(256, 128, seed=20)
    model.attn.wo = deepseek_style(128, 256, seed=21)
    model.gate = torch.nn.Linear(256, 16, bias=False)     # bf16 in DeepSeek-V3: not FP8
    return model


def test_swap_replaces_deepseek_layers_only():
    model = attention_like()
    wq_a = model.attn.wq_a
    names = swap_fp8_linears(model, profile="hopper")
    assert names == ["attn.wq_a", "attn.wo"]
    assert isinstance(model.attn.wq_a, BlockwiseFP8Linear) and type(model.gate) is torch.nn.Linear
    assert is_deepseek_fp8_linear(wq_a) and not is_deepseek_fp8_linear(model.attn.wq_a)
    x = exact_bf16((6, 256), seed=22, exp=-4)
    with torch.no_grad():
        assert_bitwise_equal(model.attn.wq_a(x), hand_built(x, wq_a.weight, wq_a.weight_scale_inv,
                                                            profile="hopper"))
    # A BlockwiseFP8Linear is not swapped again: nothing is left to replace.
    with pytest.raises(ValueError, match="no FP8 linear layer"):
        swap_fp8_linears(model)


def test_swap_options_reach_the_blockwise_layers():
    model = attention_like()
    assert swap_fp8_linears(model, profile="hopper-te", blockwise="cutlass", backend="reference",
                            exclude=["attn.wo"]) == ["attn.wq_a"]
    layer = model.attn.wq_a
    assert (layer.blockwise, layer.profile, layer.backend) == ("cutlass", "hopper-te",
                                                               "reference")
    assert is_deepseek_fp8_linear(model.attn.wo)     # excluded: left alone


@pytest.mark.parametrize("case", ["scale-shape", "weight-dtype", "bias", "named-in-scales",
                                  "out_dtype", "K"])
def test_swap_is_all_or_nothing_and_names_the_bad_layer(case):
    model = attention_like()
    bad, scales, kwargs = deepseek_style(256, 256, seed=30), {}, {}
    expected, where = ValueError, r"mlp\.w1"
    if case == "scale-shape":
        bad.weight_scale_inv = torch.nn.Parameter(torch.ones(2, 3), requires_grad=False)
    elif case == "weight-dtype":
        bad.weight = torch.nn.Parameter(torch.zeros(256, 256, dtype=torch.bfloat16),
                                        requires_grad=False)
        expected = TypeError
    elif case == "bias":
        bad, expected = deepseek_style(256, 256, seed=30, bias=True), mmaemu.UnsupportedFeatureError
    elif case == "named-in-scales":
        scales = {"mlp.w1": (1.0, 1.0)}
    elif case == "out_dtype":
        kwargs, where = {"out_dtype": torch.float32}, r"attn\.wq_a"    # the first one
    else:
        bad = _FP8Holder(torch.zeros(256, 200, dtype=E4M3), torch.ones(2, 2))
    model.mlp = torch.nn.Module()
    model.mlp.w1 = bad
    with pytest.raises(expected, match=rf"swap_fp8_linears: layer '{where}'"):
        swap_fp8_linears(model, scales, **kwargs)
    assert type(model.attn.wq_a) is _FP8Holder and model.mlp.w1 is bad     # nothing swapped
    if case == "bias":
        assert swap_fp8_linears(model, bias="after")[-1] == "mlp.w1"
        x = exact_bf16((2, 256), seed=31, exp=-4)
        with torch.no_grad():
            assert_bitwise_equal(model.mlp.w1(x),
                                 hand_built(x, bad.weight, bad.weight_scale_inv, profile="hopper-te")
                                 + bad.bias.to(torch.bfloat16))


def test_swap_mixes_deepseek_layers_and_named_linears():
    model = attention_like()
    names = swap_fp8_linears(model, {"gate": (4.0, 256.0)}, profile="hopper", splitk=1)
    assert names == ["attn.wq_a", "attn.wo", "gate"]
    assert isinstance(model.gate, mmaemu.nn.EmulatedFP8Linear)
