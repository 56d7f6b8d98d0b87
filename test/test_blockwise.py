"""Block-wise scaled GEMMs (the DeepSeek recipe): every executor (the scalar reference and each
SIMD kernel of the cpu executor) gives the independent exact model's bits (mmaemu_tools/
exactmodel.py) for each Hopper kernel mmaemu models, on fuzzed shapes with ragged K and N tails,
zero, negative and non-finite scales and subnormal inputs; and the call is refused where the
kernel or torch refuses it, with the documented error."""
import random
import warnings

import pytest
import torch

import mmaemu
from mmaemu import ExperimentalPresetWarning, ReferenceRejectsError, UnsupportedFeatureError
from mmaemu_tools import exactmodel as em
from executors import CPU_SIMD
from helpers import f32_bits as f32_tensor, fp8_codes as fp8

EXECUTORS = ["reference"] + [f"cpu:{k}" for k in CPU_SIMD]
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
OUT_NAMES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
_BITS_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def cdiv(a, b):
    return -(-a // b)


def codes(rng, rows, cols, fmt):
    """FP8 codes: mostly normal values of both signs, with zeros, subnormals and (E4M3) NaN."""
    out = []
    for _ in range(rows):
        row = []
        for _ in range(cols):
            r = rng.random()
            if r < 0.05:
                c = rng.choice((0x00, 0x80))
            elif r < 0.15:
                c = rng.randrange(1, 8 if fmt == "e4m3" else 4) | rng.choice((0, 0x80))
            elif r < 0.152 and fmt == "e4m3":
                c = 0x7F
            else:
                c = rng.randrange(0x20, 0x58) | rng.choice((0, 0x80))
            row.append(c)
        out.append(row)
    return out


SPECIAL_SCALES = (0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001,
                  0x00800000, 0xBF800000)


def scale_bits(rng, n, specials):
    """fp32 scale bit patterns: positive values around 1, some negative, and (if asked) the
    special values: zeros, infinities, NaN, subnormal, the smallest normal."""
    out = []
    for _ in range(n):
        if specials and rng.random() < 0.08:
            out.append(rng.choice(SPECIAL_SCALES))
        else:
            e = rng.randrange(120, 135)
            out.append((rng.random() < 0.15) << 31 | e << 23 | rng.randrange(1 << 23))
    return out


def bits_of(y):
    return y.view(_BITS_VIEW[y.dtype]).flatten().tolist()


def as_unsigned(bits, dtype):
    mask = 0xFFFF if dtype != torch.float32 else 0xFFFFFFFF
    return [b & mask for b in bits]


def model(kernel, A, Bw, sa_rows, sb_rows, a_gran, b_gran, fa, fb, out):
    """The exact model's output bits: A M rows, Bw N rows (the [N, K] weight), sa_rows one list
    of group scales per row (or per 128 rows), sb_rows per column (or per 128 columns)."""
    out_name = OUT_NAMES[out]
    M, N = len(A), len(Bw)
    if kernel == "cutlass" and a_gran == 1 and b_gran == 1:
        return [v for row in em.cutlass_blockwise(A, Bw, sa_rows, sb_rows, gran_m=1, gran_n=1,
                                                  fa=fa, fb=fb, out=out_name) for v in row]
    # every other pair: the scales' product first (DeepGEMM's update; CUTLASS with one scale
    # per tile on a side; cuBLASLt modelled as DeepGEMM)
    return [em.convert_output(em.blockwise_accumulator(
        A[m], Bw[n], sa_rows[m // a_gran], sb_rows[n // b_gran], fa, fb, "ffma"), out_name)
        for m in range(M) for n in range(N)]


CASES = [  # kernel, (a_gran, b_gran), formats, out dtype
    ("deepgemm", (1, 128), ("e4m3", "e4m3"), torch.bfloat16),
    ("cutlass", (1, 128), ("e4m3", "e4m3"), torch.bfloat16),
    ("cutlass", (128, 1), ("e4m3", "e4m3"), torch.float16),
    ("cutlass", (1, 1), ("e4m3", "e4m3"), torch.bfloat16),
    ("cublaslt", (1, 128), ("e4m3", "e5m2"), torch.float32),
    ("cublaslt", (128, 1), ("e5m2", "e4m3"), torch.bfloat16),
    ("cublaslt", (1, 1), ("e4m3", "e4m3"), torch.float16),
]


def make_call(rng, kernel, grans, fmts, specials=True, M=None, N=None, K=None):
    """A random block-wise call in torch's layouts (for cublaslt, the strides torch demands)."""
    M = M or rng.randrange(1, 40)
    N = N or 16 * rng.randrange(1, 18)      # up to 272: ragged tails past 128 and 256
    K = K or 16 * rng.randrange(1, 25)      # up to 384: groups of 128 with a ragged last one
    fa, fb = fmts
    G = cdiv(K, 128)
    a_gran, b_gran = grans
    A, Bw = codes(rng, M, K, fa), codes(rng, N, K, fb)
    sa_rows = [scale_bits(rng, G, specials) for _ in range(cdiv(M, a_gran))]
    sb_rows = [scale_bits(rng, G, specials) for _ in range(cdiv(N, b_gran))]
    dt = {"e4m3": E4M3, "e5m2": E5M2}
    mat1, mat2 = fp8(A, dt[fa]), fp8(Bw, dt[fb]).t()
    scale_a = f32_tensor([b for r in sa_rows for b in r], (len(sa_rows), G))
    scale_b = f32_tensor([b for r in sb_rows for b in r], (len(sb_rows), G)).t()   # [G, Nb or N]
    if kernel == "cublaslt" and a_gran == 1:     # torch's 1 x 128 layout: M-major
        scale_a = scale_a.t().contiguous().t()
    if kernel == "cublaslt" and b_gran == 1:     # [G, N] row-major
        scale_b = scale_b.contiguous()
    return (A, Bw, sa_rows, sb_rows), (mat1, mat2, scale_a, scale_b)


def run(kernel, tensors, out, backend):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        return mmaemu.scaled_mm(*tensors, out_dtype=out, backend=backend,
                                blockwise=None if kernel == "cublaslt" else kernel)


@pytest.mark.parametrize("kernel, grans, fmts, out", CASES)
def test_every_executor_gives_the_exact_models_bits(kernel, grans, fmts, out):
    rng = random.Random(f"{kernel}{grans}{fmts}")
    for _ in range(3):
        (A, Bw, sa_rows, sb_rows), tensors = make_call(rng, kernel, grans, fmts)
        want = model(kernel, A, Bw, sa_rows, sb_rows, *grans, *fmts, out)
        for backend in EXECUTORS:
            got = as_unsigned(bits_of(run(kernel, tensors, out, backend)), out)
            assert got == want, (backend, len(A), len(Bw), len(A[0]))


@pytest.mark.parametrize("backend", EXECUTORS[1:])
def test_simd_kernels_match_the_reference_on_larger_shapes(backend):
    """Shapes past the kernels' tiles and panels (several row blocks, N tails of every width)."""
    rng = random.Random(backend)
    for kernel, grans, fmts, out in CASES:
        M, N, K = rng.randrange(60, 200), 16 * rng.randrange(9, 40), 16 * rng.randrange(20, 60)
        _, tensors = make_call(rng, kernel, grans, fmts, M=M, N=N, K=K)
        want = run(kernel, tensors, out, "reference")
        assert torch.equal(run(kernel, tensors, out, backend).view(_BITS_VIEW[out]),
                           want.view(_BITS_VIEW[out])), (kernel, grans, M, N, K)


def test_the_scales_product_is_formed_first_then_one_fma():
    """The hand-checkable case of docs/semantics.md 8d: two 128-k groups whose chains are
    1 + 2^-13, scale_a = -(1 + 2^-23) then 1 + 2^-23, scale_b = 1: fmaf keeps 2^-36 where a
    multiply then an add (mul_add) would give +0. fp32 output removes the last rounding."""
    a = [[0] * 256]
    a[0][0] = a[0][128] = 0x38
    a[0][1] = a[0][129] = 0x01
    b = [[0] * 256 for _ in range(16)]
    for row in b:
        row[0] = row[128] = 0x38
        row[1] = row[129] = 0x18
    mat1, mat2 = fp8(a, E4M3), fp8(b, E4M3).t()
    sa = f32_tensor([0xBF800001, 0x3F800001], (1, 2)).t().contiguous().t()
    sb = torch.ones(2, 16)
    for backend in EXECUTORS:
        with pytest.warns(ExperimentalPresetWarning):
            y = mmaemu.scaled_mm(mat1, mat2, sa, sb, out_dtype=torch.float32, backend=backend)
        assert y[0, 0].item() == 2.0 ** -36, backend


@pytest.mark.parametrize("kernel", ["deepgemm", "cutlass", None])
def test_the_plan_names_the_kernel_and_never_splits(kernel):
    rng = random.Random(3)
    grans = (1, 128)
    _, (m1, m2, sa, sb) = make_call(rng, kernel or "cublaslt", grans, ("e4m3", "e4m3"),
                                    M=8, N=32, K=4096)
    plan = mmaemu.explain(m1, m2, sa, sb, out_dtype=torch.bfloat16, blockwise=kernel)
    assert plan.validation == "ok" and plan.split.S == 1 and plan.split.scheme == "none"
    assert plan.epilogue == "blockwise" and plan.backend.startswith(("cpu:", "reference"))
    name = {"deepgemm": "DeepGEMM", "cutlass": "CUTLASS", None: "cuBLASLt"}[kernel]
    assert name in plan.kernel and "scales: A 1 x 128, B 128 x 128" in plan.kernel
    assert plan.split.verified == (kernel is not None)
    assert any("ExperimentalPresetWarning" in w for w in plan.warnings) == (kernel is None)


def test_cutlass_takes_the_per_element_form_only_with_1x128_on_both_sides():
    rng = random.Random(4)
    for grans, epilogue in (((1, 1), "blockwise_pe"), ((1, 128), "blockwise"),
                            ((128, 1), "blockwise")):
        _, (m1, m2, sa, sb) = make_call(rng, "cutlass", grans, ("e4m3", "e4m3"), M=8, N=32, K=256)
        plan = mmaemu.explain(m1, m2, sa, sb, out_dtype=torch.bfloat16, blockwise="cutlass")
        assert plan.epilogue == epilogue, grans


def _call(M=8, N=32, K=256, grans=(1, 128), fmts=(E4M3, E4M3)):
    G = cdiv(K, 128)
    mat1 = torch.zeros(M, K, dtype=fmts[0])
    mat2 = torch.zeros(N, K, dtype=fmts[1]).t()
    sa = torch.ones(cdiv(M, grans[0]), G)
    sb = torch.ones(G, cdiv(N, grans[1]))
    return mat1, mat2, sa, sb


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(blockwise="deepgemm", grans=(128, 1)), UnsupportedFeatureError, "1d1d"),
    (dict(blockwise="deepgemm", grans=(1, 1)), UnsupportedFeatureError, "sm90_fp8_gemm_1d2d"),
    (dict(blockwise="cutlass", grans=(128, 128)), ReferenceRejectsError, "128 x 128 on both"),
    (dict(blockwise="deepgemm", fmts=(E4M3, E5M2)), ReferenceRejectsError, "E4M3 operands"),
    (dict(blockwise="deepgemm", out=torch.float16), ReferenceRejectsError, "writes bfloat16"),
    (dict(blockwise="cutlass", out=torch.float32), ReferenceRejectsError, "not float32"),
    (dict(blockwise="deepgemm", fast=True), ValueError, "no fast-accumulation mode"),
    (dict(blockwise=None, fast=True), ReferenceRejectsError,
     "doesn't support fast accum with 1x128"),
    (dict(blockwise="triton"), ValueError, "the block-wise kernels are"),
    (dict(blockwise=3), TypeError, "blockwise must be a str"),
    (dict(blockwise="deepgemm", bias=True), UnsupportedFeatureError, "bias"),
    (dict(blockwise="deepgemm", splitk=(2, "contiguous")), ValueError, "do not split K"),
    (dict(blockwise="deepgemm", profile="ada"), UnsupportedFeatureError, "sm_90 kernels"),
])
def test_refusals(kwargs, error, text):
    kwargs = dict(kwargs)
    grans = kwargs.pop("grans", (1, 128))
    fmts = kwargs.pop("fmts", (E4M3, E4M3))
    mat1, mat2, sa, sb = _call(grans=grans, fmts=fmts)
    bias = torch.zeros(32, dtype=torch.bfloat16) if kwargs.pop("bias", False) else None
    if kwargs.get("blockwise") is None:
        sa = sa.t().contiguous().t()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        with pytest.raises(error, match=text):
            mmaemu.scaled_mm(mat1, mat2, sa, sb, bias, out_dtype=kwargs.pop("out", torch.bfloat16),
                             use_fast_accum=kwargs.pop("fast", False), **kwargs)


def test_torchs_path_demands_torchs_scale_layouts():
    """cuBLASLt's 1 x 128 scales are outer-dim-major (scale_a with strides (1, M)); a row-major
    scale_a is torch's "Invalid scaling configuration", while DeepGEMM takes either."""
    mat1, mat2, sa, sb = _call()
    with pytest.raises(ReferenceRejectsError, match="Invalid scaling configuration"):
        mmaemu.scaled_mm(mat1, mat2, sa.contiguous(), sb, out_dtype=torch.bfloat16)
    mmaemu.scaled_mm(mat1, mat2, sa, sb, out_dtype=torch.bfloat16, blockwise="deepgemm")


def test_blockwise_names_a_kernel_only_for_block_wise_scales():
    mat1, mat2, _, _ = _call()
    one = torch.tensor(1.0)
    with pytest.raises(ValueError, match="scales are tensorwise"):
        mmaemu.scaled_mm(mat1, mat2, one, one, out_dtype=torch.bfloat16, blockwise="deepgemm")


def test_meta_tensors_are_validated_alike():
    mat1, mat2, sa, sb = (t.to("meta") for t in _call(grans=(1, 1)))
    with pytest.raises(UnsupportedFeatureError, match="sm90_fp8_gemm_1d2d"):
        mmaemu.scaled_mm(mat1, mat2, sa, sb, out_dtype=torch.bfloat16, blockwise="deepgemm")


def test_compiled_calls_give_the_eager_bits():
    rng = random.Random(5)
    _, tensors = make_call(rng, "deepgemm", (1, 128), ("e4m3", "e4m3"), M=24, N=160, K=272)

    def f(m1, m2, sa, sb):
        return mmaemu.scaled_mm(m1, m2, sa, sb, out_dtype=torch.bfloat16, blockwise="deepgemm")

    eager = f(*tensors)
    compiled = torch.compile(f, backend="eager", fullgraph=True)(*tensors)
    assert torch.equal(eager.view(torch.int16), compiled.view(torch.int16))


def test_one_row_reads_its_scales_as_per_token():
    """M = 1: scale_a [1, groups] fits both the 1 x 128 and the 128 x 128 shape; it is the
    per-token recipe (decoding one token), so DeepGEMM takes it with 128 x 128 weight blocks."""
    rng = random.Random(6)
    for kernel, grans, N, K in (("deepgemm", (1, 128), 144, 272), ("cutlass", (1, 1), 144, 272),
                                ("deepgemm", (1, 128), 112, 128)):
        # the last: one scale on each side, which torch's rule reads as tensor-wise; the named
        # kernel computes it block-wise
        (A, Bw, sa_rows, sb_rows), tensors = make_call(rng, kernel, grans, ("e4m3", "e4m3"),
                                                       M=1, N=N, K=K)
        want = model(kernel, A, Bw, sa_rows, sb_rows, *grans, "e4m3", "e4m3", torch.bfloat16)
        for backend in EXECUTORS:
            got = as_unsigned(bits_of(run(kernel, tensors, torch.bfloat16, backend)),
                              torch.bfloat16)
            assert got == want, (kernel, backend)
        plan = mmaemu.explain(*tensors, out_dtype=torch.bfloat16, blockwise=kernel)
        assert plan.epilogue == ("blockwise_pe" if kernel == "cutlass" else "blockwise")
