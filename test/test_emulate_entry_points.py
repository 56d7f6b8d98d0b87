"""emulate() and torch's other FP8 GEMM entry points (torch._scaled_mm_v2,
torch.nn.functional.scaled_mm, the grouped GEMMs), and the backward pass under emulate()."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import mmaemu
from mmaemu.testing import assert_bitwise_equal, bits
from helpers import fp8_clamp as fp8

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
ONE = torch.tensor(1.0)
S1 = {"splitk": 1}
TW, RW = F.ScalingType.TensorWise, F.ScalingType.RowWise


def operands(m=16, n=32, k=256, seed=0, spread=16.0):
    g = torch.Generator().manual_seed(seed)
    return fp8(torch.randn(m, k, generator=g) * spread), fp8(torch.randn(n, k, generator=g) * spread)


def rowwise_scales(m, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(m, 1, generator=g) + 0.5, torch.rand(1, n, generator=g) + 0.5


def direct(x, w, sa, sb, **kw):
    return mmaemu.scaled_mm(x, w.t(), sa, sb, **kw, **S1)


# ---------------------------------------------------------------------------------------------
# torch._scaled_mm_v2 and F.scaled_mm

def _v2_forms(x, w, sa, sb, out_dtype, fast):
    wt = w.t()
    yield "torch._scaled_mm_v2", lambda: torch._scaled_mm_v2(
        x, wt, [sa], [0], [], [sb], [0], [], None, out_dtype, [], fast)
    yield "keywords", lambda: torch._scaled_mm_v2(
        x, wt, scale_a=[sa], recipe_a=[0], swizzle_a=[0], scale_b=[sb], recipe_b=[0],
        swizzle_b=[0], bias=None, out_dtype=out_dtype, use_fast_accum=fast)
    yield "aten packet", lambda: torch.ops.aten._scaled_mm_v2(
        x, wt, [sa], [0], [], [sb], [0], [], None, out_dtype, [1, 0], fast)
    yield "aten .default", lambda: torch.ops.aten._scaled_mm_v2.default(
        x, wt, [sa], [0], [], [sb], [0], [], None, out_dtype, [], fast)

    def aten_out():
        out = torch.empty(1, dtype=out_dtype)
        r = torch.ops.aten._scaled_mm_v2.out(x, wt, [sa], [0], [], [sb], [0], [], None,
                                             out_dtype, [], fast, out=out)
        assert r is out
        return out
    yield "aten .out", aten_out
    yield "F.scaled_mm", lambda: F.scaled_mm(x, wt, sa, TW, sb, TW, output_dtype=out_dtype,
                                             use_fast_accum=fast)


@pytest.mark.parametrize("out_dtype, fast", [(torch.float32, True), (torch.bfloat16, False),
                                             (torch.float16, True)])
def test_v2_tensorwise_gives_mmaemu_bits_in_every_spelling(out_dtype, fast):
    x, w = operands()
    sa, sb = torch.tensor(0.5), torch.tensor(3.0)
    expected = direct(x, w, sa, sb, out_dtype=out_dtype, use_fast_accum=fast)
    native = torch._scaled_mm_v2(x, w.t(), [sa], [0], [], [sb], [0], [], None, out_dtype, [],
                                 fast)
    assert (bits(native) != bits(expected)).any()     # torch's CPU kernel is not the reference
    with mmaemu.emulate(**S1):
        for name, call in _v2_forms(x, w, sa, sb, out_dtype, fast):
            assert_bitwise_equal(call(), expected, msg=name)


def test_v2_defaults_to_bfloat16_and_takes_bias_and_rowwise():
    x, w = operands(m=32, n=48, k=128)
    sa, sb = rowwise_scales(32, 48)
    bias = torch.randn(48, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    with mmaemu.emulate(**S1):
        y_none = torch._scaled_mm_v2(x, w.t(), [ONE], [0], [], [ONE], [0], [], None, None)
        y_f = F.scaled_mm(x, w.t(), ONE, TW, ONE, TW)
        y_row = F.scaled_mm(x, w.t(), sa, RW, sb, RW, bias=bias, use_fast_accum=True)
    expected = direct(x, w, ONE, ONE, out_dtype=torch.bfloat16)
    assert y_none.dtype == torch.bfloat16
    assert_bitwise_equal(y_none, expected)
    assert_bitwise_equal(y_f, expected)
    assert_bitwise_equal(y_row, direct(x, w, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                                       use_fast_accum=True))


def test_v2_refusals():
    x, w = operands(m=16, n=32, k=128)
    wt = w.t()
    sa, sb = rowwise_scales(16, 32)
    block_a = torch.ones(16, 1)
    with mmaemu.emulate(**S1):
        def v2(scale_a=(ONE,), recipe_a=(0,), swizzle_a=(), scale_b=(ONE,), recipe_b=(0,),
               swizzle_b=(), contraction_dim=()):
            return torch._scaled_mm_v2(x, wt, list(scale_a), list(recipe_a), list(swizzle_a),
                                       list(scale_b), list(recipe_b), list(swizzle_b), None,
                                       torch.bfloat16, list(contraction_dim), False)
        with pytest.raises(mmaemu.ReferenceRejectsError, match="scale_b must have shape"):
            v2(scale_a=[block_a], recipe_a=[4], scale_b=[ONE], recipe_b=[4])
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="BlockWise1x32.*MX and NVFP4"):
            v2(scale_a=[block_a], recipe_a=[3], scale_b=[ONE], recipe_b=[3])
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="two-level"):
            v2(scale_a=[ONE, ONE], recipe_a=[0, 0])
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="swizzled"):
            v2(swizzle_a=[1])
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="contraction_dim"):
            v2(contraction_dim=[0, 1])
        # What torch itself rejects: recipes that do not match the scales.
        with pytest.raises(mmaemu.ReferenceRejectsError, match="Invalid scaling configuration"):
            v2(scale_a=[sa], recipe_a=[1], scale_b=[ONE], recipe_b=[0])
        with pytest.raises(mmaemu.ReferenceRejectsError, match="Invalid scaling configuration"):
            v2(scale_a=[sa], recipe_a=[0], scale_b=[sb], recipe_b=[0])
        with pytest.raises(mmaemu.ReferenceRejectsError, match="Invalid scaling configuration"):
            v2(scale_a=[ONE.double()], scale_b=[ONE])
        # And what torch 2.7.1 rejects, as mmaemu.scaled_mm does (E5M2 x E5M2).
        with pytest.raises(mmaemu.ReferenceRejectsError, match="Float8_e5m2"):
            torch._scaled_mm_v2(x.to(E5M2), wt.to(E5M2), [ONE], [0], [], [ONE], [0], [], None,
                                torch.bfloat16)
        with pytest.raises(TypeError, match="unexpected keyword"):
            torch._scaled_mm_v2(x, wt, [ONE], [0], [], [ONE], [0], [], None, None, scale_c=1)
        with pytest.raises(TypeError, match="of Tensors"):
            torch._scaled_mm_v2(x, wt, ONE, [0], [], [ONE], [0], [], None, None)
        with pytest.raises(mmaemu.ReferenceRejectsError, match="out_dtype must match"):
            torch.ops.aten._scaled_mm_v2.out(x, wt, [ONE], [0], [], [ONE], [0], [], None,
                                             torch.float32, [], False,
                                             out=torch.empty(0, dtype=torch.bfloat16))


def _deepseek_operands(m=24, n=160, k=272, seed=3):
    """A block-wise call: per-token 1 x 128 scales for x, 128 x 128 blocks for w, in torch's v1
    layouts (scale_a M-major, scale_b the transpose of w's [ceil(N/128), ceil(K/128)] scales)."""
    x, w = operands(m=m, n=n, k=k, seed=seed)
    g = torch.Generator().manual_seed(seed)
    L = -(-k // 128)
    sa = (torch.rand(L, m, generator=g) + 0.5).t()
    sw = torch.rand(-(-n // 128), L, generator=g) + 0.5
    return x, w, sa, sw


def test_blockwise_recipes_give_mmaemu_bits_in_every_spelling():
    x, w, sa, sw = _deepseek_operands()
    L4 = -(-sw.shape[1] // 4) * 4
    sw_v2 = torch.zeros(sw.shape[0], L4)
    sw_v2[:, :sw.shape[1]] = sw
    sw_v2 = sw_v2.t()        # (round_up(L, 4), ceil(N/128)) with strides (1, L4)
    B1, B128 = F.ScalingType.BlockWise1x128, F.ScalingType.BlockWise128x128
    for kernel in (None, "deepgemm", "cutlass"):
        with pytest.warns(mmaemu.ExperimentalPresetWarning) if kernel is None else _no_warning():
            want = mmaemu.scaled_mm(x, w.t(), sa, sw.t(), out_dtype=torch.bfloat16,
                                    blockwise=kernel)
        with mmaemu.emulate(blockwise=kernel), _no_warning(mmaemu.ExperimentalPresetWarning):
            got = [torch._scaled_mm(x, w.t(), sa, sw.t(), out_dtype=torch.bfloat16),
                   F.scaled_mm(x, w.t(), sa, B1, sw_v2, B128),
                   torch.ops.aten._scaled_mm_v2(x, w.t(), [sa], [4], [], [sw_v2], [5], [], None,
                                                torch.bfloat16, [], False)]
        for y in got:
            assert_bitwise_equal(y, want)


class _no_warning:
    """Record warnings of a category (all by default) and ignore them: the block-wise default
    warns once per call site; the bits are what these tests compare."""
    def __init__(self, category=Warning):
        self.category = category

    def __enter__(self):
        import warnings
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("ignore", self.category)

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def test_blockwise_v2_layout_checks():
    x, w, sa, sw = _deepseek_operands()
    B1, B128 = F.ScalingType.BlockWise1x128, F.ScalingType.BlockWise128x128
    with mmaemu.emulate(blockwise="deepgemm"):
        with pytest.raises(mmaemu.ReferenceRejectsError, match="scale_b must have shape"):
            F.scaled_mm(x, w.t(), sa, B1, sw.t(), B128)      # v1's layout, not v2's padded one
        with pytest.raises(mmaemu.ReferenceRejectsError, match="scale_a must have strides"):
            F.scaled_mm(x, w.t(), sa.contiguous(), B1, sw.t(), B1)
        with pytest.raises(mmaemu.ReferenceRejectsError, match="Invalid scaling configuration"):
            F.scaled_mm(x, w.t(), sa, B1, ONE, TW)


def _grouped_operands(seed=4):
    g = torch.Generator().manual_seed(seed)
    x = fp8(torch.randn(40, 64, generator=g) * 8)
    w = fp8(torch.randn(3, 32, 64, generator=g) * 8)
    sa = torch.rand(40, generator=g) + 0.5
    sb = torch.rand(3, 32, generator=g) + 0.5
    offs = torch.tensor([8, 8, 30], dtype=torch.int32)
    return x, w.transpose(-2, -1), sa, sb, offs


@pytest.mark.parametrize("fast", [False, True])
def test_grouped_gemms_give_mmaemu_bits_in_every_spelling(fast):
    x, wt, sa, sb, offs = _grouped_operands()
    want = mmaemu.scaled_grouped_mm(x, wt, sa, sb, offs, use_fast_accum=fast)
    with mmaemu.emulate():
        got = [torch._scaled_grouped_mm(x, wt, sa, sb, offs=offs, out_dtype=torch.bfloat16,
                                        use_fast_accum=fast),
               torch.ops.aten._scaled_grouped_mm.default(x, wt, sa, sb, offs, None, None,
                                                        torch.bfloat16, fast),
               F.scaled_grouped_mm(x, wt, sa, RW, sb, RW, offs=offs, use_fast_accum=fast)]
    for y in got:
        assert_bitwise_equal(y, want)
    with mmaemu.emulate(dispatcher=True):
        assert_bitwise_equal(torch.ops.aten._scaled_grouped_mm.default(
            x, wt, sa, sb, offs, None, None, torch.bfloat16, fast), want)


def test_grouped_refusals_under_emulate():
    x, wt, sa, sb, offs = _grouped_operands()
    with mmaemu.emulate():
        with pytest.raises(mmaemu.ReferenceRejectsError, match="No gemm implementation"):
            F.scaled_grouped_mm(x, wt, sa, TW, sb, TW, offs=offs)
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="MX and NVFP4"):
            F.scaled_grouped_mm(x, wt, sa, F.ScalingType.BlockWise1x32, sb,
                                F.ScalingType.BlockWise1x32, offs=offs)
        with pytest.raises(mmaemu.ReferenceRejectsError, match="Offsets have to be int32"):
            torch._scaled_grouped_mm(x, wt, sa, sb, offs=offs.long())


def test_dispatcher_option_catches_v2_below_python():
    x, w = operands()
    expected = direct(x, w, ONE, ONE, out_dtype=torch.float32, use_fast_accum=True)
    with mmaemu.emulate(dispatcher=True, **S1), torch._C.DisableTorchFunction():
        # With torch functions off, only the dispatcher sees the call.
        y = torch.ops.aten._scaled_mm_v2.default(x, w.t(), [ONE], [0], [], [ONE], [0], [], None,
                                                 torch.float32, [], True)
    assert_bitwise_equal(y, expected)


# ---------------------------------------------------------------------------------------------
# The backward pass

class FP8Linear(torch.autograd.Function):
    """A float8 training linear as torchao writes one: forward(ctx, ...) and a backward that
    calls torch._scaled_mm on FP8 casts of the gradient and the saved operands."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch._scaled_mm(fp8(x), fp8(w).t(), ONE, ONE, out_dtype=torch.float32,
                                use_fast_accum=True)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g8 = fp8(g, E5M2)
        grad_x = torch._scaled_mm(g8, fp8(w).t().contiguous().t(), ONE, ONE,
                                  out_dtype=torch.float32)
        grad_w = torch._scaled_mm(g8.t().contiguous(), fp8(x).t().contiguous().t(), ONE, ONE,
                                  out_dtype=torch.float32)
        return grad_x, grad_w


def fp8_linear_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(16, 64, generator=g) * 8).requires_grad_()
    w = (torch.randn(32, 64, generator=g) * 8).requires_grad_()
    grad = torch.randn(16, 32, generator=g) * 8
    return x, w, grad


def expected_fp8_linear(x, w, grad, **kw):
    """The three GEMMs of FP8Linear computed by mmaemu.scaled_mm directly."""
    x8, w8, g8 = fp8(x.detach()), fp8(w.detach()), fp8(grad, E5M2)
    y = mmaemu.scaled_mm(x8, w8.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True,
                         **kw)
    gx = mmaemu.scaled_mm(g8, w8.t().contiguous().t(), ONE, ONE, out_dtype=torch.float32, **kw)
    gw = mmaemu.scaled_mm(g8.t().contiguous(), x8.t().contiguous().t(), ONE, ONE,
                          out_dtype=torch.float32, **kw)
    return y, gx, gw


@pytest.mark.parametrize("where", ["inside", "outside"])
def test_backward_of_a_custom_function_is_emulated(where):
    x, w, grad = fp8_linear_inputs()
    y_exp, gx_exp, gw_exp = expected_fp8_linear(x, w, grad, **S1)
    with mmaemu.emulate(**S1):
        y = FP8Linear.apply(x, w)
        if where == "inside":
            y.backward(grad)
    if where == "outside":     # the graph was recorded under emulate(): still emulated
        y.backward(grad)
    assert_bitwise_equal(y, y_exp)
    assert_bitwise_equal(x.grad, gx_exp)
    assert_bitwise_equal(w.grad, gw_exp)
    # Without emulate() the same code runs torch's kernel (other bits).
    x2, w2, _ = fp8_linear_inputs()
    FP8Linear.apply(x2, w2).backward(grad)
    assert (bits(x2.grad) != bits(gx_exp)).any() or (bits(w2.grad) != bits(gw_exp)).any()


def test_backward_catcher_lives_for_one_node():
    # The catcher is pushed by a pre-hook of the recorded node and popped by autograd restoring
    # its thread-local state after the node: nothing is left on the dispatch mode stack, and a
    # later call outside emulate() runs torch's kernel again.
    x, w, grad = fp8_linear_inputs(seed=2)
    with mmaemu.emulate(**S1):
        y = FP8Linear.apply(x, w)
    (y * 2).sum().backward()
    assert _get_current_dispatch_mode_stack() == []
    a, b = operands()
    native = torch._scaled_mm(a, b.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True)
    assert (bits(native) != bits(direct(a, b, ONE, ONE, out_dtype=torch.float32,
                                        use_fast_accum=True))).any()


class _E5M2Backward(FP8Linear):
    """Its backward multiplies E5M2 by E5M2, which torch 2.7.1 (and so mmaemu) rejects."""

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        grad_x = torch._scaled_mm(fp8(g, E5M2), fp8(w, E5M2).t().contiguous().t(), ONE, ONE,
                                  out_dtype=torch.float32)
        return grad_x, None


def test_backward_errors_keep_their_class():
    x, w, grad = fp8_linear_inputs(seed=3)
    with mmaemu.emulate(**S1):
        y = _E5M2Backward.apply(x, w)
    with pytest.raises(mmaemu.ReferenceRejectsError, match="Float8_e5m2"):
        y.backward(grad)
    assert _get_current_dispatch_mode_stack() == []


class _SetupContextLinear(torch.autograd.Function):
    @staticmethod
    def forward(x, w):
        return torch._scaled_mm(fp8(x), fp8(w).t(), ONE, ONE, out_dtype=torch.float32)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return None, None


def test_setup_context_function_is_refused_when_it_records_a_graph():
    x, w, _ = fp8_linear_inputs(seed=4)
    with mmaemu.emulate(**S1):
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="setup_context"):
            _SetupContextLinear.apply(x, w)
        with torch.inference_mode():
            y = _SetupContextLinear.apply(x, w)
    assert_bitwise_equal(y, mmaemu.scaled_mm(fp8(x.detach()), fp8(w.detach()).t(), ONE, ONE,
                                             out_dtype=torch.float32, **S1))


def test_torchao_float8_training_layer_backward_is_emulated(monkeypatch):
    pytest.importorskip("torchao")
    from torchao.float8 import convert_to_float8_training
    import sys
    emulate_cls = sys.modules["mmaemu.integrations.emulate"].emulate
    calls = []
    real = emulate_cls.scaled_mm

    def counting(self, args, kwargs, *binder):
        calls.append(torch.is_grad_enabled())
        return real(self, args, kwargs, *binder)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False))
    convert_to_float8_training(model)
    x = torch.randn(16, 64, requires_grad=True)
    native_y = model(x)
    native_y.sum().backward()
    native_grad = x.grad.clone()
    x.grad = None
    monkeypatch.setattr(emulate_cls, "scaled_mm", counting)
    with mmaemu.emulate(**S1):
        y = model(x)
    y.sum().backward()
    assert len(calls) == 3          # forward, grad_input, grad_weight: all three by mmaemu
    assert (bits(y) != bits(native_y)).any() or (bits(x.grad) != bits(native_grad)).any()


def test_compiled_float8_training_layer_gives_the_eager_emulated_bits():
    pytest.importorskip("torchao")
    from torchao.float8 import convert_to_float8_training
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False))
    convert_to_float8_training(model)
    x = torch.randn(16, 64, requires_grad=True)
    with mmaemu.emulate(**S1):
        y_eager = model(x)
    y_eager.sum().backward()
    grad_eager, x.grad = x.grad.clone(), None
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    with mmaemu.emulate(**S1):
        y = compiled(x)
    y.sum().backward()
    assert_bitwise_equal(y, y_eager)
    assert_bitwise_equal(x.grad, grad_eager)
