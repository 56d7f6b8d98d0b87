"""Grouped FP8 GEMMs (torch._scaled_grouped_mm with fp32 row-wise scales, sm_90): every offs
layout, fast and non-fast, on every executor, against the independent exact model
(mmaemu_tools/exactmodel.py); the identity of a group with the non-grouped row-wise kernel
(except the sign of an exact zero); torch's checks and messages; the offsets' device asserts."""
import random

import pytest
import torch

import mmaemu
from mmaemu import ReferenceRejectsError, UnsupportedFeatureError
from mmaemu_tools import exactmodel as em
from executors import CPU_SIMD
from test_blockwise import codes, scale_bits
from helpers import f32_bits as f32_tensor, fp8_codes as fp8

EXECUTORS = ["reference"] + [f"cpu:{k}" for k in CPU_SIMD]
E4M3 = torch.float8_e4m3fn


def bf16_bits(y):
    return [b & 0xFFFF for b in y.contiguous().view(torch.int16).flatten().tolist()]


def ends(rng, G, total, align):
    """G cumulative end offsets over `total`, each group a multiple of `align` but the last;
    some groups empty, and (2d3d / 3d2d) the last end short of the total."""
    cuts = sorted(rng.randrange(0, total // align + 1) * align for _ in range(G - 1))
    return cuts + [total if rng.random() < 0.5 else max(cuts + [0])]


def layout_case(rng, layout, G):
    """Operands in torch's layouts and the exact model's lists for one grouped call."""
    K = 16 * rng.randrange(1, 14)          # up to 208: ragged against the 128-k promotion
    N = 16 * rng.randrange(1, 5)
    M = rng.randrange(1, 12)
    sa_bits = lambda n: scale_bits(rng, n, True)   # noqa: E731
    if layout == "2d3d":
        Mt = rng.randrange(1, 40)
        offs = ends(rng, G, Mt, 1)
        A = codes(rng, Mt, K, "e4m3")
        B = [codes(rng, N, K, "e4m3") for _ in range(G)]
        sa, sb = sa_bits(Mt), [sa_bits(N) for _ in range(G)]
        t = (fp8(A, E4M3), torch.stack([fp8(b, E4M3) for b in B]).transpose(-2, -1),
             f32_tensor(sa, (Mt,)), f32_tensor([x for r in sb for x in r], (G, N)))
    elif layout == "3d2d":
        Nt = 16 * rng.randrange(1, 6)
        offs = ends(rng, G, Nt, 8)
        A = [codes(rng, M, K, "e4m3") for _ in range(G)]
        B = codes(rng, Nt, K, "e4m3")
        sa, sb = [sa_bits(M) for _ in range(G)], sa_bits(Nt)
        t = (torch.stack([fp8(a, E4M3) for a in A]), fp8(B, E4M3).t(),
             f32_tensor([x for r in sa for x in r], (G, M)), f32_tensor(sb, (Nt,)))
    elif layout == "2d2d":
        sizes = [16 * rng.randrange(1, 6) for _ in range(G - 1)] + [16 * rng.randrange(1, 6)]
        offs = [sum(sizes[:g + 1]) for g in range(G)]
        Kt = offs[-1]
        A, B = codes(rng, M, Kt, "e4m3"), codes(rng, N, Kt, "e4m3")
        sa, sb = sa_bits(G * M), sa_bits(G * N)
        t = (fp8(A, E4M3), fp8(B, E4M3).t(), f32_tensor(sa, (G * M,)), f32_tensor(sb, (G * N,)))
    else:
        offs = None
        A = [codes(rng, M, K, "e4m3") for _ in range(G)]
        B = [codes(rng, N, K, "e4m3") for _ in range(G)]
        sa, sb = [sa_bits(M) for _ in range(G)], [sa_bits(N) for _ in range(G)]
        t = (torch.stack([fp8(a, E4M3) for a in A]),
             torch.stack([fp8(b, E4M3) for b in B]).transpose(-2, -1),
             f32_tensor([x for r in sa for x in r], (G, M)),
             f32_tensor([x for r in sb for x in r], (G, N)))
    offs_t = None if offs is None else torch.tensor(offs, dtype=torch.int32)
    return (A, B, sa, sb, offs), t + (offs_t,)


def flat(model_out):
    """The model's output as bits, its unwritten entries (None) as +0 (mmaemu zero-fills them)."""
    if model_out and isinstance(model_out[0][0], list):
        return [v or 0 for m in model_out for row in m for v in row]
    return [v or 0 for row in model_out for v in row]


@pytest.mark.parametrize("layout", ["2d3d", "3d2d", "2d2d", "3d3d"])
@pytest.mark.parametrize("fast", [False, True])
def test_every_layout_and_executor_gives_the_exact_models_bits(layout, fast):
    rng = random.Random(f"{layout}{fast}")
    for G in (1, 3):
        (A, B, sa, sb, offs), (ma, mb, ta, tb, to) = layout_case(rng, layout, G)
        want = flat(em.scaled_grouped_mm_rowwise(A, B, sa, sb, offs, layout, fast))
        for backend in EXECUTORS:
            y = mmaemu.scaled_grouped_mm(ma, mb, ta, tb, to, use_fast_accum=fast, backend=backend)
            assert y.dtype == torch.bfloat16
            assert bf16_bits(y) == want, (backend, G, offs)


def test_the_result_has_torchs_shape_and_padded_strides():
    (_, _, _, _, _), (ma, mb, ta, tb, to) = layout_case(random.Random(1), "2d3d", 2)
    y = mmaemu.scaled_grouped_mm(ma, mb, ta, tb, to)
    assert y.shape == (ma.shape[0], mb.shape[-1])
    assert y.stride() == (-(-mb.shape[-1] // 8) * 8, 1)


def test_a_group_equals_the_rowwise_kernel_but_for_the_sign_of_zero():
    """2d3d groups against mmaemu.scaled_mm with row-wise scales (torch 2.7.1's CUTLASS kernel,
    its not-transposed instance at these sizes): same accumulator, and the epilogues agree
    except where fp32(acc * sa) * sb is an exact zero of negative sign (docs/semantics.md 8e).
    An all-zero row with a negative scale shows that exception."""
    from mmaemu.planning.rowwise import sm90_instance
    rng = random.Random(2)
    M, N, K, G = 24, 32, 272, 2
    assert not sm90_instance(12, N, 132).transposed
    A = codes(rng, M, K, "e4m3")
    A[0] = [0] * K
    B = [[[c if c & 0x7F != 0x7F else 0x38 for c in row] for row in codes(rng, N, K, "e4m3")]
         for _ in range(G)]   # no NaN: an all-zero row of A then gives exact zeros
    sa = [abs(rng.gauss(1, 0.3)) for _ in range(M)]
    sa[0] = -1.0
    sb = [[abs(rng.gauss(1, 0.3)) for _ in range(N)] for _ in range(G)]
    ma, sat = fp8(A, E4M3), torch.tensor(sa)
    mb = torch.stack([fp8(b, E4M3) for b in B]).transpose(-2, -1)
    sbt = torch.tensor(sb)
    offs = torch.tensor([12, 24], dtype=torch.int32)
    for fast in (False, True):
        y = mmaemu.scaled_grouped_mm(ma, mb, sat, sbt, offs, use_fast_accum=fast)
        for g, (s, e) in enumerate(((0, 12), (12, 24))):
            r = mmaemu.scaled_mm(ma[s:e], mb[g], sat[s:e, None], sbt[g][None, :],
                                 out_dtype=torch.bfloat16, use_fast_accum=fast)
            gb, rb = bf16_bits(y[s:e]), bf16_bits(r)
            differ = [(x, z) for x, z in zip(gb, rb) if x != z]
            assert all(x == 0x8000 and z == 0x0000 for x, z in differ)
            if g == 0:
                assert gb[:N] == [0x8000] * N and rb[:N] == [0] * N


def _grouped(M=16, N=32, K=32, G=2, layout="2d3d"):
    if layout == "2d3d":
        return (torch.zeros(M, K, dtype=E4M3), torch.zeros(G, N, K, dtype=E4M3).transpose(-2, -1),
                torch.ones(M), torch.ones(G, N), torch.tensor([8, 16], dtype=torch.int32))
    if layout == "3d2d":
        return (torch.zeros(G, M, K, dtype=E4M3), torch.zeros(N, K, dtype=E4M3).t(),
                torch.ones(G, M), torch.ones(N), torch.tensor([16, 32], dtype=torch.int32))
    return (torch.zeros(M, K, dtype=E4M3), torch.zeros(N, K, dtype=E4M3).t(),
            torch.ones(G * M), torch.ones(G * N), torch.tensor([16, 32], dtype=torch.int32))


def _bad(**change):
    ma, mb, sa, sb, offs = _grouped(layout=change.pop("layout", "2d3d"))
    args = dict(mat_a=ma, mat_b=mb, scale_a=sa, scale_b=sb, offs=offs)
    for k, v in change.items():
        args[k] = v(args) if callable(v) else v
    return args


@pytest.mark.parametrize("change, error, text", [
    (dict(mat_a=lambda a: a["mat_a"].t().contiguous().t()), ReferenceRejectsError,
     "Expected mat1 to not be transposed"),
    (dict(mat_b=lambda a: a["mat_b"].contiguous()), ReferenceRejectsError,
     "Expected mat2 to be transposed"),
    (dict(mat_a=lambda a: a["mat_a"][None, None]), ReferenceRejectsError,
     "mat_a has to be 2 or 3d"),
    (dict(mat_b=lambda a: torch.zeros(2, 32, 48, dtype=E4M3).transpose(-2, -1)),
     ReferenceRejectsError, "contraction dimension of mat_a and mat_b must match"),
    (dict(mat_a=lambda a: torch.zeros(16, 24, dtype=E4M3)), ReferenceRejectsError,
     "strides should be multiple of 16 bytes"),
    (dict(mat_a=lambda a: torch.zeros(16 * 32 + 1, dtype=E4M3)[1:].view(16, 32)),
     ReferenceRejectsError, "aligned to 16 bytes"),
    (dict(bias=torch.zeros(32, dtype=torch.bfloat16)), ReferenceRejectsError,
     "Bias not supported yet"),
    (dict(scale_result=torch.tensor(1.0)), ReferenceRejectsError, "Scale result not supported"),
    (dict(offs=None), ReferenceRejectsError, "Have to provide offsets"),
    (dict(offs=torch.tensor([8, 16])), ReferenceRejectsError, "Offsets have to be int32"),
    (dict(scale_a=lambda a: a["scale_a"].double()), ReferenceRejectsError,
     "both scales must both be float32"),
    (dict(scale_a=lambda a: a["scale_a"][None]), ReferenceRejectsError,
     "scale must be a 1D tensor, but got 2D, arg 0"),
    (dict(scale_b=lambda a: a["scale_b"][:, :16]), ReferenceRejectsError,
     "scale must have the same first dimension as mat for arg 1"),
    (dict(out_dtype=torch.float16), ReferenceRejectsError,
     "Only bf16 high precision output types"),
    (dict(offs=torch.tensor([8, 16, 16], dtype=torch.int32)), ReferenceRejectsError,
     "matrix batch sizes have to match"),
    (dict(mat_a=lambda a: a["mat_a"].view(torch.float8_e5m2)), ReferenceRejectsError,
     "Expected mat_a to be Float8_e4m3 matrix got Float8_e5m2"),
    (dict(offs=torch.tensor([12, 4], dtype=torch.int32)), ReferenceRejectsError,
     "greater or equal 0"),
    (dict(offs=torch.tensor([8, 20], dtype=torch.int32)), ReferenceRejectsError,
     "less than tensor size"),
    (dict(layout="3d2d", offs=torch.tensor([12, 32], dtype=torch.int32)), ReferenceRejectsError,
     "expected output tensor dynamic dimension byte size"),
    (dict(layout="2d2d", offs=torch.tensor([8, 32], dtype=torch.int32)), ReferenceRejectsError,
     "expected input tensor dynamic dimension byte size"),
    (dict(layout="2d2d", offs=torch.tensor([0, 32], dtype=torch.int32)), UnsupportedFeatureError,
     "is empty"),
    (dict(profile="ada"), UnsupportedFeatureError, "sm_90 kernels"),
    (dict(mat_a=3), TypeError, "argument 'mat_a' \\(position 1\\) must be Tensor"),
])
def test_refusals(change, error, text):
    profile = change.pop("profile", None)
    with pytest.raises(error, match=text):
        mmaemu.scaled_grouped_mm(**_bad(**change), profile=profile)


def test_mx_scales_are_refused_with_a_clear_message():
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    if e8m0 is None:
        pytest.skip("this torch has no float8_e8m0fnu")
    args = _bad(scale_a=lambda a: torch.ones(16).to(e8m0), scale_b=lambda a: torch.ones(2, 32).to(e8m0))
    with pytest.raises(UnsupportedFeatureError, match="MXFP8 scales"):
        mmaemu.scaled_grouped_mm(**args)


def test_rows_past_the_last_offset_are_zero():
    """torch leaves them uninitialised (torch.empty); mmaemu writes zeros (docs/differences.md)."""
    ma = torch.ones(16, 32).to(E4M3)
    mb = torch.ones(2, 32, 32).to(E4M3).transpose(-2, -1)
    y = mmaemu.scaled_grouped_mm(ma, mb, torch.ones(16), torch.ones(2, 32),
                                 torch.tensor([4, 10], dtype=torch.int32))
    assert (y[:10] == 32).all() and (y[10:] == 0).all()


def test_compiled_calls_give_the_eager_bits():
    (_, _, _, _, _), args = layout_case(random.Random(7), "2d3d", 3)

    def f(ma, mb, sa, sb, offs):
        return mmaemu.scaled_grouped_mm(ma, mb, sa, sb, offs)

    eager = f(*args)
    compiled = torch.compile(f, backend="eager", fullgraph=True)(*args)
    assert bf16_bits(eager) == bf16_bits(compiled)
