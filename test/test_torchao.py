"""torchao's FP8 inference recipes under mmaemu.emulate(), as torchao's users call them.

torchao (PyPI) quantizes a small bf16 model with Float8DynamicActivationFloat8WeightConfig,
PerTensor() and PerRow(); its linear layers then call torch._scaled_mm (tensor-wise with the
layer's bias, or row-wise scales with the bias). Under emulate() every such call must give the
bits of a direct mmaemu.scaled_mm call on the same operands, eager and compiled.

On the CPU torchao's hardware check (CUDA capability >= 8.9) refuses to quantize: the test
patches torchao.quantization.quant_api._check_hardware_support out, as docs/api.md says.
"""
import copy

import pytest
import torch

import mmaemu
from mmaemu.testing import assert_bitwise_equal

torchao = pytest.importorskip("torchao")
quant_api = pytest.importorskip("torchao.quantization.quant_api")
from torchao.quantization import (  # noqa: E402
    Float8DynamicActivationFloat8WeightConfig, PerRow, PerTensor, quantize_)


class Recording(mmaemu.emulate):
    """emulate() that keeps every intercepted call's arguments and result."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def scaled_mm(self, args, kwargs, *binder):
        y = super().scaled_mm(args, kwargs, *binder)
        # copies: compiled code may reuse these buffers for later kernels
        keep = lambda t: t.clone() if isinstance(t, torch.Tensor) else t  # noqa: E731
        self.calls.append((tuple(map(keep, args)), {k: keep(v) for k, v in kwargs.items()},
                           y.clone()))
        return y


def small_model():
    torch.manual_seed(14)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 32)).to(torch.bfloat16)


@pytest.fixture
def quantized(monkeypatch):
    monkeypatch.setattr(quant_api, "_check_hardware_support", lambda *a, **k: None)

    def make(granularity):
        m = small_model()
        # set_inductor_config=False: by default quantize_ also sets inductor options for the
        # whole process (coordinate descent tuning, ...), and every later compile would see them.
        quantize_(m, Float8DynamicActivationFloat8WeightConfig(granularity=granularity,
                                                               set_inductor_config=False))
        return m
    yield make
    torch._dynamo.reset()       # no compiled code of these models outlives the test


def bind(args, kwargs):
    names = ("mat1", "mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype",
             "use_fast_accum")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    bound.pop("out", None)    # aten._scaled_mm.out, as compiled code calls it
    return bound


def direct(args, kwargs):
    return mmaemu.scaled_mm(**bind(args, kwargs), splitk=1)


@pytest.mark.parametrize("granularity", [PerTensor(), PerRow()], ids=["PerTensor", "PerRow"])
def test_torchao_model_under_emulate(quantized, granularity):
    model = quantized(granularity)
    x = torch.randn(8, 64).to(torch.bfloat16)
    with torch.no_grad():
        rec = Recording(splitk=1)
        with rec:
            y = model(x)
        assert len(rec.calls) == 2
        for args, kwargs, out in rec.calls:
            bias = kwargs.get("bias", args[4] if len(args) > 4 else None)
            assert bias is not None and bias.dtype == torch.bfloat16
            scale_a = kwargs.get("scale_a", args[2] if len(args) > 2 else None)
            assert (scale_a.numel() > 1) == isinstance(granularity, PerRow)
            assert_bitwise_equal(out, direct(args, kwargs))
        # aot_eager: the graph runs torchao's activation quantization with eager kernels, so the
        # GEMM operands, and with them the bits, are those of the eager run.
        compiled = torch.compile(copy.deepcopy(model), backend="aot_eager")
        with mmaemu.emulate(splitk=1):
            y_compiled = compiled(x)
        assert_bitwise_equal(y_compiled, y)
        # inductor: the GEMMs are still mmaemu's (an unmodelled profile raises inside the
        # compiled code), though inductor's own quantization kernels may round differently.
        inductor = torch.compile(copy.deepcopy(model))
        with mmaemu.emulate(splitk=1):
            assert inductor(x).shape == y.shape
        if isinstance(granularity, PerRow):
            with mmaemu.emulate(profile="hopper-experimental", splitk=1), \
                    pytest.raises(mmaemu.UnsupportedFeatureError):
                inductor(x)


@pytest.mark.parametrize("granularity", [PerTensor(), PerRow()], ids=["PerTensor", "PerRow"])
def test_inductor_differs_from_eager_only_by_its_activation_quantization(quantized, granularity):
    """Inductor computes torchao's activation scale (amax / 448 of a bf16 input) in fp32 without
    the eager path's bf16 rounding, so scale_a and some FP8 codes of mat1 differ and with them
    the output. The GEMMs themselves are mmaemu's: each compiled call equals a direct call on
    the operands it received; with inductor's emulate_precision_casts the operands and the
    output equal the eager run's bit for bit."""
    model = quantized(granularity)
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    with torch.no_grad():
        eager = Recording(splitk=1)
        with eager:
            y = model(x)
        torch._dynamo.reset()
        compiled = Recording(splitk=1)
        with compiled:
            y_ind = torch.compile(copy.deepcopy(model))(x)
        sa_e = bind(*eager.calls[0][:2])["scale_a"]
        sa_c = bind(*compiled.calls[0][:2])["scale_a"]
        assert not torch.equal(sa_e, sa_c)                                # scale_a differs
        assert torch.equal(sa_c.to(torch.bfloat16).float(), sa_e)         # ... by bf16 rounding
        assert not torch.equal(y_ind.view(torch.int16), y.view(torch.int16))
        for args, kwargs, out in compiled.calls:
            assert_bitwise_equal(out, direct(args, kwargs))
        torch._dynamo.reset()
        # The option holds while inductor compiles, at the first call; config.patch puts the
        # previous value back (as torch's own API for a temporary setting).
        with torch._inductor.config.patch(emulate_precision_casts=True), \
                mmaemu.emulate(splitk=1):
            y_cast = torch.compile(copy.deepcopy(model))(x)
        assert_bitwise_equal(y_cast, y)


def test_torchao_perrow_on_ada(quantized):
    """PerRow on the ada profile: torch 2.7.1's sm_89 stream-K row-wise kernel (semantics.md 8c)."""
    model = quantized(PerRow())
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    with torch.no_grad():
        rec = Recording(profile="ada")
        with rec:
            model(x)
        assert len(rec.calls) == 2
        for args, kwargs, out in rec.calls:
            assert_bitwise_equal(out, mmaemu.scaled_mm(**bind(args, kwargs), profile="ada"))
