"""Row-wise scales and bias: every backend against the exact model (mmaemu_tools/exactmodel.py),
the host fmaf against exact arithmetic, the sm_90 instance rule against recorded reference
outputs, and torch 2.7.1's row-wise checks."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import mmaemu
import cbuild
from mmaemu_tools import exactmodel
from mmaemu.errors import ReferenceRejectsError, UnsupportedFeatureError
from mmaemu.planning.rowwise import sm90_instance
from mmaemu.testing import assert_bitwise_equal
from helpers import fp8_codes as fp8

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("reference", "cpu")

# fp32 bit patterns the epilogue must get right: zeros, subnormals, the extremes, Inf, NaN.
SPECIAL_F32 = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00400000,
               0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000,
               0x3F800000, 0xBF800000, 0x3F7FFFFF, 0x3F800001, 0x5F800000, 0x1F800000,
               0x7E800000, 0x02000000]
SPECIAL_BF16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0x3F80]


def f32_bits_strategy():
    return st.one_of(st.sampled_from(SPECIAL_F32),
                     st.integers(0, 0xFFFFFFFF),
                     # ordinary scales near 1 (most real calls)
                     st.integers(0x3E000000, 0x40800000).map(lambda u: u | (0x80000000 * (u & 1))))


def bf16_bits_strategy():
    return st.one_of(st.sampled_from(SPECIAL_BF16), st.integers(0, 0xFFFF))


def fp8_code_strategy():
    # mostly finite codes, some NaN (0x7F / 0xFF in E4M3)
    return st.one_of(st.integers(0, 0x7E), st.integers(0x80, 0xFE), st.sampled_from([0x7F, 0xFF]))


def as_f32(bits):
    return torch.tensor(np.array(bits, dtype=np.uint32).view(np.int32)).view(torch.float32)


def as_u16(bits, dtype):
    return torch.tensor(np.array(bits, dtype=np.uint16).view(np.int16)).view(dtype)


def u32(t):
    return [int(x) & 0xFFFFFFFF for x in t.contiguous().view(torch.int32).reshape(-1).tolist()]


def u16(t):
    return [int(x) & 0xFFFF for x in t.contiguous().view(torch.int16).reshape(-1).tolist()]


def draw_rowwise_operands(draw, M, N, K, b_codes):
    """A [M, K] of random codes; B rows mostly zero with at most b_codes random codes (keeps the
    exact accumulator model fast); row-wise scale bits; an optional bf16 bias."""
    A = [[draw(fp8_code_strategy()) for _ in range(K)] for _ in range(M)]
    B = []
    for _ in range(N):
        row = [0] * K
        for k in draw(st.lists(st.integers(0, K - 1), max_size=b_codes)):
            row[k] = draw(fp8_code_strategy())
        B.append(row)
    sa = [draw(f32_bits_strategy()) for _ in range(M)]
    sb = [draw(f32_bits_strategy()) for _ in range(N)]
    bias = draw(st.one_of(st.none(), st.lists(bf16_bits_strategy(), min_size=N, max_size=N)))
    return A, B, sa, sb, bias


@st.composite
def rowwise_case(draw):
    M = draw(st.integers(1, 3))
    N = draw(st.sampled_from([16, 256]))    # 256 makes the sm_90 kernel run transposed
    K = draw(st.sampled_from([16, 32, 144]))
    A, B, sa, sb, bias = draw_rowwise_operands(draw, M, N, K, 3)
    fast = draw(st.booleans())
    fa = draw(st.sampled_from(["e4m3", "e5m2"]))
    return M, N, K, A, B, sa, sb, bias, fast, fa


@settings(max_examples=60, deadline=None, derandomize=True)
@given(rowwise_case())
def test_rowwise_matches_exact_model(case):
    M, N, K, A, B, sa, sb, bias, fast, fa = case
    a = fp8(A, fa)
    w = fp8(B, "e4m3")
    scale_a = as_f32(sa).reshape(M, 1)
    scale_b = as_f32(sb).reshape(1, N)
    b = None if bias is None else as_u16(bias, torch.bfloat16)
    transposed = sm90_instance(M, N, 114).transposed
    plan = mmaemu.explain(a, w.t(), scale_a, scale_b, bias=b, out_dtype=torch.bfloat16,
                          use_fast_accum=fast)
    assert plan.epilogue == ("rowwise_t" if transposed else "rowwise")
    assert plan.split.S == 1
    accs = exactmodel.accumulate(A, B, fa, "e4m3", fast, "hopper")
    want = [[exactmodel.rowwise_epilogue(accs[i][j], sa[i], sb[j],
                                      exactmodel.bias_to_f32(bias[j], "bf16") if bias else 0,
                                      transposed) for j in range(N)] for i in range(M)]
    want = torch.tensor(np.array(want, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)
    for backend in BACKENDS:
        got = mmaemu.scaled_mm(a, w.t(), scale_a, scale_b, bias=b, out_dtype=torch.bfloat16,
                               use_fast_accum=fast, backend=backend)
        assert_bitwise_equal(got, want, msg=f"backend {backend}")


@st.composite
def bias_case(draw):
    M = draw(st.integers(1, 3))
    N = 16
    K = draw(st.sampled_from([16, 48]))
    A = [[draw(fp8_code_strategy()) for _ in range(K)] for _ in range(M)]
    B = [[draw(st.integers(0, 0x7E)) if draw(st.integers(0, 7)) == 0 else 0 for _ in range(K)]
         for _ in range(N)]
    out = draw(st.sampled_from(["bf16", "f16", "e4m3"]))
    kind = {"bf16": "bf16", "f16": "f16", "e4m3": draw(st.sampled_from(["bf16", "f16"]))}[out]
    bias = [draw(bf16_bits_strategy() if kind == "bf16" else st.integers(0, 0xFFFF))
            for _ in range(N)]
    sa, sb = draw(f32_bits_strategy()), draw(f32_bits_strategy())
    sr = draw(st.one_of(st.none(), f32_bits_strategy())) if out == "e4m3" else None
    return M, N, K, A, B, out, kind, bias, sa, sb, sr, draw(st.booleans())


OUT_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "e4m3": torch.float8_e4m3fn}
BIAS_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(bias_case())
def test_tensorwise_bias_matches_exact_model(case):
    M, N, K, A, B, out, kind, bias, sa, sb, sr, fast = case
    a, w = fp8(A, "e4m3"), fp8(B, "e4m3")
    b = as_u16(bias, BIAS_DTYPES[kind])
    accs = exactmodel.accumulate(A, B, "e4m3", "e4m3", fast, "hopper")
    want = [[exactmodel.bias_epilogue(accs[i][j], out, sa, sb, exactmodel.bias_to_f32(bias[j], kind), sr)
             for j in range(N)] for i in range(M)]
    if out == "e4m3":
        want = torch.tensor(want, dtype=torch.uint8).view(torch.float8_e4m3fn)
    else:
        want = torch.tensor(np.array(want, dtype=np.uint16).view(np.int16)).view(OUT_DTYPES[out])
    for backend in BACKENDS:
        got = mmaemu.scaled_mm(a, w.t(), as_f32([sa])[0], as_f32([sb])[0], bias=b,
                               scale_result=None if sr is None else as_f32([sr])[0],
                               out_dtype=OUT_DTYPES[out], use_fast_accum=fast, backend=backend,
                               splitk=1)
        assert_bitwise_equal(got, want, msg=f"backend {backend}")


def test_rowwise_epilogue_signed_zero_and_overflow():
    """acc = -0 (every product -0) gives +0 (the fmaf adds +0); a huge scale overflows bf16
    to Inf; both instances on their shapes."""
    for N in (16, 256):
        a = torch.zeros(2, 32, dtype=torch.uint8)
        a[:, 0] = 0x80                                      # -0 codes
        a = a.view(torch.float8_e4m3fn)
        w = torch.zeros(N, 32, dtype=torch.uint8)
        w[:, 0] = 0x38                                      # 1.0
        w[0, 1] = 0x7E                                      # 448 in one column
        w = w.view(torch.float8_e4m3fn)
        a2 = a.view(torch.uint8).clone()
        a2[1, 1] = 0x7E
        a2 = a2.view(torch.float8_e4m3fn)
        sa = torch.tensor([[1.0], [3.0e38]])
        sb = torch.full((1, N), 1.0)
        for backend in BACKENDS:
            y = mmaemu.scaled_mm(a2, w.t(), sa, sb, out_dtype=torch.bfloat16, backend=backend)
            bits = u16(y)
            assert bits[0] == 0x0000                         # -0 * 1 + (+0) = +0
            assert bits[N] == 0x7F80                         # 448*448*3e38 -> +Inf
            assert bits[N + 1] == 0x0000


def test_rowwise_sm90_rule_matches_reference_outputs():
    data = json.loads((ROOT / "test" / "data" / "rowwise_sm90_dispatch.json").read_text())
    assert len(data["rows"]) > 4000
    for M, N, sms, transposed, tile_m, cm, cn, swizzle in data["rows"]:
        inst = sm90_instance(M, N, sms)
        assert (inst.transposed, inst.tile_m, inst.cluster, inst.swizzle) == \
            (bool(transposed), tile_m, (cm, cn), swizzle), (M, N, sms)


# ---------------------------------------------------------------------------------------------
# The host fmaf of the shared headers (mm_fmaf), compiled alone.

def _fmaf_cases(rng, n):
    """Random triples, and triples built so that a*b lands near half an ulp of c (where a
    double sum rounded twice would go wrong), and specials."""
    rand = rng.integers(0, 2**32, size=(n, 3), dtype=np.uint64).astype(np.uint32)
    c = rng.integers(0x00800000, 0x7F000000, size=n, dtype=np.uint64).astype(np.uint32)
    c |= (rng.integers(0, 2, size=n, dtype=np.uint64).astype(np.uint32) << 31)
    cf = c.view(np.float32).astype(np.float64)
    ulp = np.spacing(np.abs(c.view(np.float32))).astype(np.float64)
    k = rng.integers(-3, 4, size=n)
    j = rng.integers(-3, 4, size=n)
    sign = np.where(rng.integers(0, 2, size=n) == 1, -1.0, 1.0)
    a = (sign * ulp / 2 * (1 + k * 2.0**-23)).astype(np.float32)
    b = (1 + j * 2.0**-23).astype(np.float32)
    near = np.stack([a.view(np.uint32), b.view(np.uint32), c], axis=1)
    assert np.all(cf == c.view(np.float32))
    specials = np.array([[x, y, z] for x in SPECIAL_F32[:12] for y in SPECIAL_F32[:12]
                         for z in SPECIAL_F32[:12]], dtype=np.uint32)
    return np.concatenate([rand, near, specials])


def test_host_fmaf_is_exact(tmp_path):
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if not cc:
        pytest.skip("needs a C compiler")
    exe = tmp_path / "fmaf_check"
    subprocess.run([cc, *cbuild.exact_flags("c"), "-O2",
                    f"-I{ROOT / 'csrc'}", cbuild.source("fmaf_check.c"), "-o", str(exe),
                    "-lm"], check=True, timeout=120)
    cases = _fmaf_cases(np.random.default_rng(14), 200_000)
    (tmp_path / "in.bin").write_bytes(cases.tobytes())
    subprocess.run([str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], check=True,
                   timeout=120)
    res = np.frombuffer((tmp_path / "out.bin").read_bytes(), dtype=np.uint32).reshape(-1, 4)
    ours, libm = res[:, 0], res[:, 1]
    nan = lambda u: (u & 0x7FFFFFFF) > 0x7F800000  # noqa: E731
    same = (ours == libm) | (nan(ours) & nan(libm))
    assert same.all(), f"{(~same).sum()} of {len(cases)} differ from libm's fmaf"
    # The tensor-wise epilogue's host shortcut, mm_alpha_times(a, b), is mm_fmaf(a, b, +0) bit for
    # bit (-0 products, subnormal and overflowing ones, Inf and NaN among the cases).
    alpha, fma0 = res[:, 2], res[:, 3]
    same0 = (alpha == fma0) | (nan(alpha) & nan(fma0))
    assert same0.all(), f"{(~same0).sum()} of {len(cases)}: mm_alpha_times differs from mm_fmaf(a, b, +0)"
    # An exact check independent of libm: every near-tie case and specials, a random sample.
    n_rand = 200_000
    pick = list(range(n_rand, len(cases))) + list(range(0, n_rand, 97))
    for i in pick:
        x, y, z = (int(v) for v in cases[i])
        want = exactmodel.f32_fma(x, y, z)
        got = int(ours[i])
        assert exactmodel.f32_canonical(got) == want, (hex(x), hex(y), hex(z), hex(got), hex(want))


# ---------------------------------------------------------------------------------------------
# torch 2.7.1's row-wise checks

def _rowwise_operands(M=32, N=32, K=32):
    a = torch.zeros(M, K, dtype=torch.float8_e4m3fn)
    w = torch.zeros(N, K, dtype=torch.float8_e4m3fn)
    return a, w.t(), torch.ones(M, 1), torch.ones(1, N)


def test_rowwise_refusals_use_torch_messages():
    a, b, sa, sb = _rowwise_operands()
    with pytest.raises(ReferenceRejectsError, match="Only bf16 high precision output types"):
        mmaemu.scaled_mm(a, b, sa, sb, out_dtype=torch.float16)
    with pytest.raises(ReferenceRejectsError, match=r"b.dtype\(\) == at::kFloat8_e4m3fn"):
        mmaemu.scaled_mm(a, b.view(torch.uint8).view(torch.float8_e5m2), sa, sb,
                         out_dtype=torch.bfloat16)
    with pytest.raises(ReferenceRejectsError, match=r"a.stride\(1\) == 1"):
        mmaemu.scaled_mm(a.t().contiguous().t(), b, sa, sb, out_dtype=torch.bfloat16)
    with pytest.raises(ReferenceRejectsError, match=r"b.stride\(0\) == 1"):
        mmaemu.scaled_mm(a, b.contiguous(), sa, sb, out_dtype=torch.bfloat16)
    with pytest.raises(ReferenceRejectsError, match="must be contiguous for RowWise"):
        mmaemu.scaled_mm(a, b, torch.ones(32, 2)[:, :1], sb, out_dtype=torch.bfloat16)
    a1 = torch.zeros(1, 32, dtype=torch.float8_e4m3fn)
    mmaemu.scaled_mm(a1, b, torch.ones(1, 1), sb, out_dtype=torch.bfloat16)   # accepted
    one = torch.ones(8, 1)[3:4].as_strided((1, 1), (5, 1))
    with pytest.raises(ReferenceRejectsError, match=r"scale_a.stride\(0\) == 1"):
        mmaemu.scaled_mm(a1, b, one, sb, out_dtype=torch.bfloat16)
    with pytest.raises(ReferenceRejectsError, match="Bias must be BFloat16"):
        mmaemu.scaled_mm(a, b, sa, sb, bias=torch.zeros(32, dtype=torch.float16),
                         out_dtype=torch.bfloat16)
    with pytest.raises(ReferenceRejectsError, match=r"bias->stride\(0\) == 1"):
        mmaemu.scaled_mm(a, b, sa, sb, bias=torch.zeros(64, dtype=torch.bfloat16)[::2],
                         out_dtype=torch.bfloat16)
    with pytest.raises(UnsupportedFeatureError, match="non-contiguous bias"):
        mmaemu.scaled_mm(a, b, torch.tensor(1.0), torch.tensor(1.0),
                         bias=torch.zeros(64, dtype=torch.bfloat16)[::2],
                         out_dtype=torch.bfloat16, splitk=1)
    with pytest.raises(ReferenceRejectsError, match="Bias is not supported when out_dtype is"):
        mmaemu.scaled_mm(a, b, torch.tensor(1.0), torch.tensor(1.0),
                         bias=torch.zeros(32, dtype=torch.bfloat16), out_dtype=torch.float32)


def test_rowwise_needs_a_gpu_profile_and_no_split():
    a, b, sa, sb = _rowwise_operands()
    with pytest.raises(UnsupportedFeatureError,
                       match="row-wise scales on profile 'hopper-experimental'"):
        mmaemu.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, profile="hopper-experimental")
    plan = mmaemu.explain(a, b, sa, sb, out_dtype=torch.bfloat16, profile="hopper-experimental")
    assert plan.validation.startswith("UnsupportedFeatureError")
    with pytest.raises(ValueError, match="never splits K"):
        mmaemu.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, splitk=(2, "contiguous"))
    plan = mmaemu.explain(a, b, sa, sb, out_dtype=torch.bfloat16, profile="hopper-ws0")
    assert plan.split.S == 1 and "f8f8bf16_rowwise" in plan.kernel


def test_rowwise_k0_returns_zeros():
    a = torch.zeros(4, 0, dtype=torch.float8_e4m3fn)
    b = torch.zeros(16, 0, dtype=torch.float8_e4m3fn).t()
    y = mmaemu.scaled_mm(a, b, torch.ones(4, 1), torch.ones(1, 16),
                         bias=torch.ones(16, dtype=torch.bfloat16), out_dtype=torch.bfloat16)
    assert_bitwise_equal(y, torch.zeros(4, 16, dtype=torch.bfloat16))


def test_rowwise_under_compile_matches_eager():
    torch.manual_seed(3)
    a = (torch.randn(8, 64) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(256, 64) * 4).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(8, 1) + 0.5, torch.rand(1, 256) + 0.5
    bias = torch.randn(256).to(torch.bfloat16)

    def f(a, b, sa, sb, bias):
        return mmaemu.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                                use_fast_accum=True)
    assert_bitwise_equal(torch.compile(f, fullgraph=True)(a, b, sa, sb, bias),
                         f(a, b, sa, sb, bias))


def test_rowwise_scale_order_follows_the_instance():
    """fp32(acc * s1) overflows for one order only: (448 * 1.5*2^127) * 2^-20 is Inf, (448 *
    2^-20) * 1.5*2^127 is finite. N = 16 runs not transposed (scale_a first), N = 256
    transposed (scale_b first)."""
    for N, transposed in ((16, False), (256, True)):
        assert sm90_instance(2, N, 114).transposed is transposed
        a = torch.full((2, 16), 0x7E, dtype=torch.uint8).view(torch.float8_e4m3fn)
        a.view(torch.uint8)[:, 1:] = 0
        w = torch.zeros(N, 16, dtype=torch.uint8)
        w[:, 0] = 0x38
        w = w.view(torch.float8_e4m3fn)
        sa = torch.full((2, 1), 1.5 * 2.0**127)
        sb = torch.full((1, N), 2.0**-20)
        for backend in BACKENDS:
            y = mmaemu.scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16, backend=backend)
            assert torch.isinf(y).all().item() is (not transposed), (N, backend)


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("M,N,K", [(8, 256, 4112), (37, 48, 512), (5, 4096, 64)])
def test_cpu_backend_equals_reference_on_larger_shapes(M, N, K, fast):
    """The cpu backend's tiles, threads and streamed K segments store the same row-wise and
    bias epilogues as the scalar reference (the instance rule picks both orders here)."""
    g = torch.Generator().manual_seed(M * N + K)
    a = (torch.randn(M, K, generator=g) * 8).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, generator=g) * 8).clamp(-448, 448).to(torch.float8_e4m3fn)
    sa = torch.rand(M, 1, generator=g) * 1e-3
    sb = torch.rand(1, N, generator=g) * 1e-2
    bias = (torch.randn(N, generator=g) * 4).to(torch.bfloat16)
    for kwargs in (dict(scale_a=sa, scale_b=sb, bias=bias), dict(scale_a=sa, scale_b=sb),
                   dict(scale_a=torch.tensor(1e-3), scale_b=torch.tensor(3e-2), bias=bias,
                        splitk=1)):
        got = mmaemu.scaled_mm(a, w.t(), out_dtype=torch.bfloat16, use_fast_accum=fast,
                               backend="cpu", **kwargs)
        want = mmaemu.scaled_mm(a, w.t(), out_dtype=torch.bfloat16, use_fast_accum=fast,
                                backend="reference", **kwargs)
        assert_bitwise_equal(got, want)
