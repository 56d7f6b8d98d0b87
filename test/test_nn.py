"""mmaemu.nn: EmulatedFP8Linear equals the functional call, under eager, compile and script."""
import io
import re
import types

import pytest
import torch

import mmaemu
from mmaemu.nn import EmulatedFP8Linear, quantize_e4m3, swap_fp8_linears
from mmaemu.testing import assert_bitwise_equal, bits


def exact_bf16(shape, seed, exp):
    """bf16 values k * 2^exp with integer k in [-127, 127]: the same on every machine."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-127, 128, shape, generator=g).float() * 2.0 ** exp).to(torch.bfloat16)


# The hopper-te split-K table has no rows yet, so these shapes have no recorded decision: the
# tests pass splitk=1 (no split) to the layers and to the functional calls alike.
S1 = {"splitk": 1}


def functional(x, weight, scale_x, scale_w, profile="hopper-te", out_dtype=torch.bfloat16,
               fast=True):
    """The guide's section 7 written out with mmaemu.scaled_mm."""
    sx, sw = torch.tensor(scale_x), torch.tensor(scale_w)
    xq = (x.float() * sx).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(-1, x.shape[-1])
    wq = (weight.detach().float() * sw).clamp(-448, 448).to(torch.float8_e4m3fn)
    y = mmaemu.scaled_mm(xq, wq.t(), 1 / sx, 1 / sw, out_dtype=out_dtype, use_fast_accum=fast,
                         profile=profile, **S1)
    return y.reshape(*x.shape[:-1], -1)


@pytest.fixture(scope="module")
def layer():
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 48, bias=False).to(torch.bfloat16)
    return lin, EmulatedFP8Linear.from_linear(lin, 3.0, 150.0, **S1)


def test_matches_functional_call(layer):
    lin, m = layer
    x = exact_bf16((2, 5, 96), seed=1, exp=-4)
    with torch.inference_mode():
        y = m(x)
    assert y.shape == (2, 5, 48) and y.dtype == torch.bfloat16
    assert_bitwise_equal(y, functional(x, lin.weight, 3.0, 150.0))


def test_options_reach_the_gemm():
    # K = 512 spans four promotion intervals of 128, so the accumulation modes differ.
    w = exact_bf16((32, 512), seed=2, exp=-8)
    x = exact_bf16((7, 512), seed=3, exp=-3)
    m = EmulatedFP8Linear(w, torch.tensor(5.0), torch.tensor(700.0), profile="hopper",
                          out_dtype=torch.float32, use_fast_accum=False, backend="reference",
                          splitk=1)
    with torch.no_grad():
        y = m(x)
    assert_bitwise_equal(y, functional(x, w, 5.0, 700.0, profile="hopper",
                                       out_dtype=torch.float32, fast=False))
    # The two accumulation modes give different bits here, so use_fast_accum did reach the GEMM.
    fast = EmulatedFP8Linear(w, 5.0, 700.0, profile="hopper", out_dtype=torch.float32, **S1)
    with torch.no_grad():
        assert (bits(fast(x)) != bits(y)).any()


def test_quantisation_saturates_and_keeps_nan():
    x = torch.tensor([1000.0, -1000.0, float("nan"), 0.3])
    q = quantize_e4m3(x, torch.tensor(1.0))
    assert q[:2].float().tolist() == [448.0, -448.0]
    assert torch.isnan(q[2].float())


def test_bias_needs_a_decision():
    lin = torch.nn.Linear(32, 16).to(torch.bfloat16)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="bias"):
        EmulatedFP8Linear.from_linear(lin, 1.0, 1.0)
    m = EmulatedFP8Linear.from_linear(lin, 2.0, 16.0, bias="after", **S1)
    x = exact_bf16((4, 32), seed=4, exp=-3)
    with torch.no_grad():
        y = m(x)
        assert_bitwise_equal(y, functional(x, lin.weight, 2.0, 16.0) + lin.bias)
    with pytest.raises(ValueError):
        EmulatedFP8Linear.from_linear(lin, 1.0, 1.0, bias="inside")


def test_fused_bias_goes_to_the_gemm():
    lin = torch.nn.Linear(32, 16).to(torch.bfloat16)
    m = EmulatedFP8Linear.from_linear(lin, 2.0, 16.0, bias="fused", **S1)
    assert m.fuse_bias and "fuse_bias=True" in repr(m)
    x = exact_bf16((4, 32), seed=4, exp=-3)
    sx, sw = torch.tensor(2.0), torch.tensor(16.0)
    xq = (x.float() * sx).clamp(-448, 448).to(torch.float8_e4m3fn)
    wq = (lin.weight.detach().float() * sw).clamp(-448, 448).to(torch.float8_e4m3fn)
    want = mmaemu.scaled_mm(xq, wq.t(), 1 / sx, 1 / sw, bias=lin.bias.detach(),
                            out_dtype=torch.bfloat16, use_fast_accum=True, profile="hopper-te",
                            **S1)
    with torch.no_grad():
        assert_bitwise_equal(m(x), want)
        assert_bitwise_equal(torch.compile(m, fullgraph=True)(x), want)
        assert_bitwise_equal(torch.jit.script(m)(x), want)
    assert m.explain(x).kernel.startswith("bias (cuBLASLt EPILOGUE_BIAS)")


def test_bad_arguments():
    w = torch.randn(16, 32)
    with pytest.raises(TypeError):
        EmulatedFP8Linear(w.to(torch.float8_e4m3fn), 1.0, 1.0)
    with pytest.raises(TypeError):
        EmulatedFP8Linear(w, torch.tensor(1.0, dtype=torch.float64), 1.0)
    with pytest.raises(TypeError):
        EmulatedFP8Linear(w, torch.ones(2), 1.0)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            EmulatedFP8Linear(w, bad, 1.0)
    with pytest.raises(ValueError):
        EmulatedFP8Linear(w, 1.0, 1.0, splitk=0)
    with pytest.raises(KeyError):
        EmulatedFP8Linear(w, 1.0, 1.0, profile="h100")
    m = EmulatedFP8Linear(w, 1.0, 1.0, **S1)
    with torch.no_grad(), pytest.raises(ValueError):
        m(torch.randn(4, 31))


def test_refuses_grad(layer):
    _, m = layer
    x = exact_bf16((4, 96), seed=5, exp=-4).requires_grad_()
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="inference only"):
        m(x)
    with torch.no_grad():
        m(x)


def test_compile_fullgraph(layer):
    lin, m = layer
    x = exact_bf16((3, 4, 96), seed=6, exp=-4)
    with torch.inference_mode():
        expected = m(x)
        got = torch.compile(m, fullgraph=True, backend="aot_eager")(x)
    assert_bitwise_equal(got, expected)


def test_compile_inductor_smoke():
    # Inductor generates its own code for the quantisation around the op; the bits must not move.
    w = exact_bf16((16, 32), seed=7, exp=-6)
    m = EmulatedFP8Linear(w, 11.0, 90.0, **S1)
    x = exact_bf16((8, 32), seed=8, exp=-2)
    with torch.inference_mode():
        assert_bitwise_equal(torch.compile(m, fullgraph=True)(x), m(x))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # TorchScript is deprecated in 2.13
def test_script_and_save_load(layer):
    lin, m = layer
    x = exact_bf16((2, 3, 96), seed=9, exp=-4)
    with torch.no_grad():
        expected = m(x)
        scripted = torch.jit.script(m)
        assert_bitwise_equal(scripted(x), expected)
        buf = io.BytesIO()
        torch.jit.save(scripted, buf)
        buf.seek(0)
        assert_bitwise_equal(torch.jit.load(buf)(x), expected)


def test_state_dict_round_trip(layer):
    lin, m = layer
    fresh = EmulatedFP8Linear(torch.zeros(48, 96), 1.0, 1.0, **S1)
    fresh.load_state_dict(m.state_dict())
    x = exact_bf16((5, 96), seed=10, exp=-4)
    with torch.no_grad():
        assert_bitwise_equal(fresh(x), m(x))


# ---------------------------------------------------------------------------------------------
# swap_fp8_linears, with a stand-in for Transformer Engine's Linear (TE is not installed here).

class TELinearStandIn(torch.nn.Module):
    """What swap_fp8_linears reads from transformer_engine.pytorch.Linear: weight, bias
    (an empty tensor when bias=False), use_bias, return_bias, tp_size, and
    fp8_meta["scaling_fwd"].scale = [input, weight, output] quantisation scales."""

    def __init__(self, n_in, n_out, scales=None, use_bias=False, return_bias=False):
        super().__init__()
        self.weight = torch.nn.Parameter(exact_bf16((n_out, n_in), seed=n_in + n_out, exp=-7))
        self.use_bias, self.return_bias, self.tp_size = use_bias, return_bias, 1
        self.bias = torch.nn.Parameter(torch.zeros(n_out)) if use_bias else torch.Tensor()
        self.fp8_meta = {}
        if scales is not None:
            self.fp8_meta["scaling_fwd"] = types.SimpleNamespace(
                scale=torch.tensor([scales[0], scales[1], 1.0]))


TELinearStandIn.__name__ = TELinearStandIn.__qualname__ = "Linear"
TELinearStandIn.__module__ = "transformer_engine.pytorch.module.linear"


class VortexStyleTELinear(TELinearStandIn):
    """A subclass of TE's Linear defined elsewhere, like vortex's TELinear."""


VortexStyleTELinear.__module__ = "vortex.model.layers"


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = VortexStyleTELinear(64, 96, scales=(4.0, 200.0))
        self.te_plain = TELinearStandIn(32, 64, scales=(2.0, 100.0))
        self.mlp = torch.nn.Sequential(torch.nn.Linear(32, 64, bias=False), torch.nn.GELU(),
                                       torch.nn.Linear(64, 32, bias=False))
        self.head = torch.nn.Linear(32, 16, bias=False)


def test_swap_replaces_named_linears_and_te_linears():
    block = Block()
    w_mlp0 = block.mlp[0].weight.detach().clone()
    w_proj = block.proj.weight.detach().clone()
    names = swap_fp8_linears(block, {"mlp.0": (3.0, 120.0), "te_plain": (1.0, 50.0)},
                             profile="hopper-te", **S1)
    assert names == ["proj", "te_plain", "mlp.0"]
    assert isinstance(block.mlp[0], EmulatedFP8Linear)
    assert isinstance(block.mlp[2], torch.nn.Linear) and isinstance(block.head, torch.nn.Linear)
    assert float(block.proj.scale_x) == 4.0 and float(block.proj.scale_w) == 200.0  # TE state
    assert float(block.te_plain.scale_x) == 1.0                                    # explicit
    x = exact_bf16((6, 32), seed=11, exp=-3)
    with torch.no_grad():
        assert_bitwise_equal(block.mlp[0](x), functional(x, w_mlp0, 3.0, 120.0))
        x64 = exact_bf16((6, 64), seed=12, exp=-3)
        assert_bitwise_equal(block.proj(x64), functional(x64, w_proj, 4.0, 200.0))


def test_swap_refuses_what_it_cannot_emulate():
    with pytest.raises(KeyError, match="nope"):
        swap_fp8_linears(Block(), {"nope": (1.0, 1.0)})
    with pytest.raises(KeyError):
        swap_fp8_linears(Block(), {"mlp.1": (1.0, 1.0)})   # a GELU, not a linear layer
    no_state = torch.nn.Sequential(TELinearStandIn(16, 16))
    with pytest.raises(ValueError, match="delayed-scaling"):
        swap_fp8_linears(no_state)
    assert swap_fp8_linears(no_state, exclude=["0"]) == []
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="return_bias"):
        swap_fp8_linears(torch.nn.Sequential(TELinearStandIn(16, 16, (1.0, 1.0),
                                                             return_bias=True)))
    biased = torch.nn.Sequential(TELinearStandIn(16, 16, (1.0, 1.0), use_bias=True))
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="bias"):
        swap_fp8_linears(biased)
    assert swap_fp8_linears(biased, bias="after") == ["0"]
    with pytest.raises(ValueError, match="from_linear"):
        swap_fp8_linears(torch.nn.Linear(16, 16), {"": (1.0, 1.0)})


def test_swap_is_all_or_nothing_and_names_the_layer():
    # Layer 1 cannot be emulated (a bias with no decision): layer 0 must not be swapped either.
    model = torch.nn.Sequential(torch.nn.Linear(32, 64, bias=False), torch.nn.Linear(64, 16))
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="layer '1': .*bias"):
        swap_fp8_linears(model, {"0": (1.0, 1.0), "1": (1.0, 1.0)}, **S1)
    assert type(model[0]) is torch.nn.Linear and type(model[1]) is torch.nn.Linear


@pytest.mark.parametrize("case", ["scale", "pair", "K", "N", "bias", "te-state", "return_bias"])
def test_every_swap_error_names_the_layer(case):
    block = torch.nn.Module()
    block.inner = torch.nn.Module()
    scales = {"inner.lin": (2.0, 8.0)}
    if case == "scale":
        block.inner.lin, scales = torch.nn.Linear(32, 16, bias=False), {"inner.lin": (0.0, 8.0)}
        expected = ValueError
    elif case == "pair":
        block.inner.lin, scales = torch.nn.Linear(32, 16, bias=False), {"inner.lin": 2.0}
        expected = TypeError
    elif case == "K":
        block.inner.lin, expected = torch.nn.Linear(100, 16, bias=False), mmaemu.ReferenceRejectsError
    elif case == "N":
        block.inner.lin, expected = torch.nn.Linear(32, 24, bias=False), mmaemu.ReferenceRejectsError
    elif case == "bias":
        block.inner.lin, expected = torch.nn.Linear(32, 16), mmaemu.UnsupportedFeatureError
    elif case == "te-state":
        block.inner.lin, scales, expected = TELinearStandIn(32, 16), {}, ValueError
    else:
        block.inner.lin = TELinearStandIn(32, 16, (1.0, 1.0), return_bias=True)
        scales, expected = {}, mmaemu.UnsupportedFeatureError
    before = block.inner.lin
    with pytest.raises(expected, match=r"swap_fp8_linears: .*'inner\.lin'"):
        swap_fp8_linears(block, scales, **S1)
    assert block.inner.lin is before


def test_swap_without_fp8_layers_says_what_it_looked_for():
    # Plain nn.Linear layers carry no FP8 scales: they are FP8 only where `scales` names them.
    model = torch.nn.Sequential(torch.nn.Linear(32, 64, bias=False), torch.nn.GELU(),
                                torch.nn.Linear(64, 32, bias=False))
    with pytest.raises(ValueError, match=r"no FP8 linear layer.*'0', '2'.*scales=\{name: "
                                         r"\(scale_x, scale_w\)\}"):
        swap_fp8_linears(model, **S1)
    with pytest.raises(ValueError, match="no module with a 2-D weight"):
        swap_fp8_linears(torch.nn.Sequential(torch.nn.GELU()))
    assert all(type(m) is torch.nn.Linear for m in (model[0], model[2]))
    assert swap_fp8_linears(model, {"2": (4.0, 256.0)}, **S1) == ["2"]


@pytest.mark.parametrize("shape,message", [
    ((48, 100), "Expected trailing dimension of mat1 to be divisible by 16"),    # K = 100
    ((24, 64), "mat2 shape (64x24) must be divisible by 16")])                  # N = 24
def test_gemm_torch_rejects_is_refused_at_construction(shape, message):
    # torch._scaled_mm refuses every GEMM of such a layer (ReferenceRejectsError, a
    # RuntimeError, as torch raises it): the constructor says so, not the first forward.
    with pytest.raises(mmaemu.ReferenceRejectsError, match=re.escape(message)) as e:
        EmulatedFP8Linear(torch.zeros(shape), 1.0, 1.0, **S1)
    assert isinstance(e.value, RuntimeError)
    assert f"in_features={shape[1]}, out_features={shape[0]}" in str(e.value)
    with pytest.raises(mmaemu.ReferenceRejectsError, match="in_features=100"):
        EmulatedFP8Linear.from_linear(torch.nn.Linear(100, 16, bias=False), 1.0, 1.0, **S1)
