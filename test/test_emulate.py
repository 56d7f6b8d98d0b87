"""mmaemu.emulate(): torch._scaled_mm calls of unmodified code give mmaemu.scaled_mm's bits."""
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, strategies as st

import mmaemu
from mmaemu.testing import assert_bitwise_equal, bits
from helpers import fp8_clamp as fp8

emulate_module = sys.modules["mmaemu.integrations.emulate"]
ONE = torch.tensor(1.0)
# The split-K tables hold few rows so far, so these small shapes have no recorded decision:
# the tests pass splitk=1 (no split), to emulate() and to the direct calls alike.
S1 = {"splitk": 1}


def operands(m=16, n=32, k=64, seed=0, spread=8.0):
    g = torch.Generator().manual_seed(seed)
    x = fp8(torch.randn(m, k, generator=g) * spread)
    w = fp8(torch.randn(n, k, generator=g) * spread)
    return x, w


class HandWrittenFP8(torch.nn.Module):
    """FP8 code as people write it: torch._scaled_mm with keyword scales, nothing else."""

    def __init__(self, w, scale_w):
        super().__init__()
        self.w, self.scale_w = w, scale_w

    def forward(self, x, scale_x):
        y = torch._scaled_mm(x, self.w.t(), scale_a=scale_x, scale_b=self.scale_w,
                             out_dtype=torch.bfloat16, use_fast_accum=True)
        return torch.relu(y)


def test_model_under_emulate_matches_direct_call():
    x, w = operands(m=24, n=48, k=96)
    sx, sw = torch.tensor(0.0625), torch.tensor(0.375)
    model = HandWrittenFP8(w, sw)
    expected = torch.relu(mmaemu.scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16,
                                           use_fast_accum=True, profile="hopper-te", **S1))
    with torch.inference_mode(), mmaemu.emulate(profile="hopper-te", **S1):
        got = model(x, sx)
    assert_bitwise_equal(got, expected)


def test_intercepts_before_torch_cpu_kernel():
    # One block, K = 32: 32*32 + 32*32 + 3 * (0.125*1), exact sum 2048.375. The hopper block
    # puts the terms on the grid 2^(10-13) = 0.125 (all exact), and its 14-bit result truncates
    # 16387 * 0.125 to 16386 * 0.125 = 2048.25 (probe P2(ii) of research/arithmetic.md);
    # torch's CPU _scaled_mm adds in fp32 and returns 2048.375.
    x = torch.zeros(16, 32)
    w = torch.zeros(16, 32)
    x[0, 0:2], w[0, 0:2] = 32, 32
    x[0, 2:5], w[0, 2:5] = 0.125, 1
    x, w = fp8(x), fp8(w)
    native = torch._scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True)
    with mmaemu.emulate(**S1):
        got = torch._scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True)
    direct = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True,
                              **S1)
    assert_bitwise_equal(got, direct)
    assert native[0, 0].item() == 2048.375
    assert got[0, 0].item() == 2048.25
    # Outside the context torch's own kernel runs again.
    again = torch._scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True)
    assert_bitwise_equal(again, native)


def test_random_operands_differ_from_torch_cpu_and_match_mmaemu():
    x, w = operands(m=16, n=32, k=256, spread=16.0)
    with mmaemu.emulate(**S1):
        got = torch._scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True)
    native = torch._scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True)
    assert_bitwise_equal(got, mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32,
                                               use_fast_accum=True, **S1))
    assert (mmaemu.testing.bits(got) != mmaemu.testing.bits(native)).any()


def _call_forms(x, w, sa, sb):
    """The same GEMM through every spelling of torch._scaled_mm."""
    wt = w.t()
    yield "positional", lambda: torch._scaled_mm(x, wt, sa, sb, None, None, torch.bfloat16, True)
    yield "keywords", lambda: torch._scaled_mm(input=x, mat2=wt, scale_a=sa, scale_b=sb,
                                               out_dtype=torch.bfloat16, use_fast_accum=True)
    yield "aten packet", lambda: torch.ops.aten._scaled_mm(x, wt, sa, sb,
                                                           out_dtype=torch.bfloat16,
                                                           use_fast_accum=True)
    yield "aten default", lambda: torch.ops.aten._scaled_mm.default(
        x, wt, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)

    def with_out():
        out = torch.empty(0, dtype=torch.bfloat16)
        r = torch._scaled_mm(x, wt, sa, sb, use_fast_accum=True, out=out)
        assert r is out
        return out
    yield "out=", with_out

    def aten_out():
        out = torch.empty(3, dtype=torch.bfloat16)
        torch.ops.aten._scaled_mm.out(x, wt, sa, sb, use_fast_accum=True, out=out)
        return out
    yield "aten .out", aten_out


def test_every_spelling_is_intercepted():
    x, w = operands(m=16, n=32, k=64)
    sa, sb = torch.tensor(0.5), torch.tensor(3.0)
    expected = mmaemu.scaled_mm(x, w.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True,
                                **S1)
    native = torch._scaled_mm(x, w.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    assert (mmaemu.testing.bits(native) != mmaemu.testing.bits(expected)).any()
    with mmaemu.emulate(**S1):
        for name, call in _call_forms(x, w, sa, sb):
            assert_bitwise_equal(call(), expected, msg=name)


def test_profile_backend_splitk_reach_mmaemu(monkeypatch):
    seen = []
    real = mmaemu.api.run_scaled_mm     # what the planning op runs

    def spy(*args, **kwargs):
        seen.append({k: kwargs[k] for k in ("profile", "backend", "splitk")})
        return real(*args, **kwargs)
    monkeypatch.setattr(mmaemu.api, "run_scaled_mm", spy)
    x, w = operands()
    with mmaemu.emulate(profile="hopper-ws0", backend="reference", splitk=1):
        torch._scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32)
    with mmaemu.emulate(splitk=(2, "contiguous")), pytest.warns(mmaemu.UnverifiedSplitWarning):
        torch._scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32)
    assert seen == [{"profile": "hopper-ws0", "backend": "reference", "splitk": 1},
                    {"profile": None, "backend": None, "splitk": (2, "contiguous")}]


def test_bias_and_rowwise_are_emulated():
    x, w = operands(m=16, n=32, k=64)
    bias = torch.randn(32, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    sa, sb = torch.rand(16, 1) + 0.5, torch.rand(1, 32) + 0.5
    with mmaemu.emulate(**S1):
        y_bias = torch._scaled_mm(x, w.t(), ONE, ONE, bias=bias, out_dtype=torch.bfloat16)
        y_row = torch._scaled_mm(x, w.t(), sa, sb, bias=bias, out_dtype=torch.bfloat16,
                                 use_fast_accum=True)
    assert_bitwise_equal(y_bias, mmaemu.scaled_mm(x, w.t(), ONE, ONE, bias=bias,
                                                  out_dtype=torch.bfloat16, **S1))
    assert_bitwise_equal(y_row, mmaemu.scaled_mm(x, w.t(), sa, sb, bias=bias,
                                                 out_dtype=torch.bfloat16, use_fast_accum=True))
    with mmaemu.emulate(profile="ada", **S1):    # the sm_89 stream-K kernel (semantics.md 8c)
        y_ada = torch._scaled_mm(x, w.t(), sa, sb, out_dtype=torch.bfloat16)
    assert_bitwise_equal(y_ada, mmaemu.scaled_mm(x, w.t(), sa, sb, out_dtype=torch.bfloat16,
                                                 profile="ada"))
    with mmaemu.emulate(profile="hopper-experimental", **S1):
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="row-wise"):
            torch._scaled_mm(x, w.t(), sa, sb, out_dtype=torch.bfloat16)


def test_bad_arguments_raise_type_error():
    x, w = operands()
    with mmaemu.emulate(**S1):
        with pytest.raises(TypeError, match="unexpected keyword"):
            torch._scaled_mm(x, w.t(), ONE, ONE, out_dtyp=torch.float32)
        with pytest.raises(TypeError, match="multiple values"):
            torch._scaled_mm(x, w.t(), ONE, ONE, None, None, torch.float32, out_dtype=torch.float32)
        with pytest.raises(TypeError, match="missing"):
            torch._scaled_mm(x, w.t(), ONE)
    with pytest.raises(TypeError):
        mmaemu.emulate(profile=3)
    with pytest.raises(ValueError):
        mmaemu.emulate(splitk=0)
    with pytest.raises(ValueError):
        mmaemu.emulate(splitk=(2, "serial"))      # an Ada scheme, not one of hopper's
    with pytest.raises(TypeError):
        mmaemu.emulate(splitk=2.0)
    with pytest.raises(KeyError):
        mmaemu.emulate(profile="h100")


def test_unknown_split_raises_instead_of_running_native(monkeypatch):
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "1")
    x, w = operands(m=17, n=48, k=80)
    with mmaemu.emulate(profile="hopper"), pytest.raises(mmaemu.SplitKUnknownError):
        torch._scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True)


def test_splitk_encoding_round_trips():
    for s, profile in (("auto", None), (1, None), ((4, "contiguous"), "hopper"),
                       ((3, "pairwise"), "ada")):
        assert emulate_module.decode_splitk(emulate_module.encode_splitk(s, profile)) == s


def test_compile_fullgraph_through_emulate():
    x, w = operands(m=16, n=32, k=64)
    sx, sw = torch.tensor(0.25), torch.tensor(2.0)
    model = HandWrittenFP8(w, sw)
    with torch.inference_mode():
        with mmaemu.emulate(profile="hopper", **S1):
            eager = model(x, sx)
            compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
            got = compiled(x, sx)
        assert_bitwise_equal(got, eager)
        assert_bitwise_equal(eager, torch.relu(mmaemu.scaled_mm(
            x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, **S1)))



def test_emulate_entered_inside_compiled_code_never_runs_native():
    # torch.compile does not route calls through a mode entered inside the compiled region:
    # emulate() refuses there, so fullgraph fails loudly and a normal compile falls back to eager.
    x, w = operands(m=16, n=32, k=64)
    sx, sw = torch.tensor(0.25), torch.tensor(2.0)
    model = HandWrittenFP8(w, sw)
    expected = torch.relu(mmaemu.scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16,
                                           use_fast_accum=True, **S1))

    def inner(x):
        with mmaemu.emulate(**S1):
            return model(x, sx)
    with torch.inference_mode():
        # What the user gets under fullgraph (torch wraps an exception raised while tracing):
        # torch._dynamo.exc.Unsupported, caused by mmaemu's MmaemuError.
        with pytest.raises(torch._dynamo.exc.Unsupported) as info:
            torch.compile(inner, fullgraph=True, backend="aot_eager")(x)
        assert "mmaemu.emulate() must be entered outside torch.compile'd code" \
            in str(info.value.__cause__)
        torch._dynamo.reset()
        assert_bitwise_equal(torch.compile(inner, backend="aot_eager")(x), expected)


def test_compile_keeps_the_error_class():
    x, w = operands(m=16, n=32, k=64)
    sa, sb = torch.ones(16, 1), torch.ones(1, 32)

    def f(x):   # row-wise scales on a profile without a GPU: not modelled
        return torch._scaled_mm(x, w.t(), sa, sb, out_dtype=torch.bfloat16)
    with mmaemu.emulate(profile="hopper-experimental", **S1), pytest.raises(mmaemu.UnsupportedFeatureError):
        torch.compile(f, fullgraph=True, backend="aot_eager")(x)


# Tensor subclasses whose Python code calls torch._scaled_mm (as torchao's float8 tensors do).

class FunctionSubclass(torch.Tensor):
    """Holds FP8 weight codes; F.linear goes to torch._scaled_mm in __torch_function__."""

    @staticmethod
    def __new__(cls, data):
        return torch.Tensor._make_subclass(cls, data)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is F.linear:
            x, w = args[0], args[1]
            return torch._scaled_mm(fp8(x), w.as_subclass(torch.Tensor).t(), ONE, ONE,
                                    out_dtype=torch.float32, use_fast_accum=True)
        return super().__torch_function__(func, types, args, kwargs or {})


class DispatchSubclass(torch.Tensor):
    """Wraps FP8 weight codes; aten.mm goes to torch._scaled_mm in __torch_dispatch__."""
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, inner):
        t = torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=torch.float32)
        t.inner = inner
        return t

    def __repr__(self):
        return f"DispatchSubclass({self.inner.shape})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.t.default:
            return DispatchSubclass(args[0].inner.t())
        if func is torch.ops.aten.mm.default:
            x, w = args
            return torch._scaled_mm(fp8(x), w.inner, ONE, ONE, out_dtype=torch.float32,
                                    use_fast_accum=True)
        raise NotImplementedError(f"DispatchSubclass: {func}")


def test_scaled_mm_inside_tensor_subclasses_is_intercepted():
    x, w = operands(m=16, n=32, k=128, spread=16.0)
    xf = x.float()
    expected = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True,
                                **S1)
    native = F.linear(xf, FunctionSubclass(w))
    assert (mmaemu.testing.bits(native) != mmaemu.testing.bits(expected)).any()
    with mmaemu.emulate(**S1):
        assert_bitwise_equal(F.linear(xf, FunctionSubclass(w)).as_subclass(torch.Tensor),
                             expected)
        assert_bitwise_equal(torch.mm(xf, DispatchSubclass(w).t()), expected)
        assert_bitwise_equal(F.linear(xf, DispatchSubclass(w)), expected)
        # Ordinary work on subclasses still runs.
        assert torch.equal(FunctionSubclass(w).float().sum(), w.float().sum())


@given(m=st.integers(1, 24), n16=st.integers(1, 3), k16=st.integers(1, 6),
       fast=st.booleans(), out=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
       seed=st.integers(0, 2**16), keyword=st.booleans())
def test_emulate_equals_direct_call(m, n16, k16, fast, out, seed, keyword):
    x, w = operands(m=m, n=16 * n16, k=16 * k16, seed=seed)
    sa, sb = torch.tensor(0.75), torch.tensor(1.5)
    expected = mmaemu.scaled_mm(x, w.t(), sa, sb, out_dtype=out, use_fast_accum=fast, **S1)
    with mmaemu.emulate(**S1):
        if keyword:
            got = torch._scaled_mm(x, w.t(), scale_a=sa, scale_b=sb, out_dtype=out,
                                   use_fast_accum=fast)
        else:
            got = torch._scaled_mm(x, w.t(), sa, sb, None, None, out, fast)
    assert_bitwise_equal(got, expected)


def test_op_passes_opcheck():
    # test_schema is left out: it fails inside torch on arithmetic with float8 inputs.
    x, w = operands(m=16, n=32, k=64)
    torch.library.opcheck(torch.ops.mmaemu.profile_scaled_mm.default, (x, w.t(), ONE, ONE),
                          {"out_dtype": torch.bfloat16, "use_fast_accum": True,
                           "profile": "hopper", "splitk": "1"},
                          test_utils=("test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))


def test_function_compiled_outside_is_recompiled_inside():
    x, w = operands(m=16, n=32, k=256, spread=16.0)
    f = torch.compile(lambda x: torch._scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32,
                                                 use_fast_accum=True), backend="aot_eager")
    native = f(x)
    with mmaemu.emulate(**S1):
        got = f(x)
    assert_bitwise_equal(got, mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32,
                                               use_fast_accum=True, **S1))
    assert (bits(got) != bits(native)).any()


@torch.jit.script
def scripted_fp8(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return torch._scaled_mm(x, w.t(), s, s, out_dtype=torch.float32, use_fast_accum=True)


def test_torchscript_code_needs_the_dispatcher_option():
    x, w = operands(m=16, n=32, k=256, spread=16.0)
    expected = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True,
                                **S1)
    native = scripted_fp8(x, w, ONE)
    assert (bits(native) != bits(expected)).any()
    # TorchScript runs its ops without Python: a torch function mode cannot see them ...
    with mmaemu.emulate(**S1):
        assert_bitwise_equal(scripted_fp8(x, w, ONE), native)
    # ... the dispatcher can.
    with mmaemu.emulate(dispatcher=True, **S1):
        assert_bitwise_equal(scripted_fp8(x, w, ONE), expected)
        assert_bitwise_equal(torch._scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32,
                                              use_fast_accum=True), expected)
    assert_bitwise_equal(scripted_fp8(x, w, ONE), native)      # the dispatcher is left clean
    with pytest.raises(TypeError):
        mmaemu.emulate(dispatcher="yes")
