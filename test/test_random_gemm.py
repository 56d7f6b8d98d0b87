"""Random GEMMs (hypothesis) and named special cases: the torch ops (C core) against the
independent Python model (exactmodel), bit for bit."""
import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

import mmaemu
from executors import CPU
from mmaemu_tools import exactmodel as pm

DTYPE = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
OUT_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
             "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")]
PRESETS = ["hopper", "ada", "b200"]
SCHEMES = ["contiguous", "serial", "pairwise"]
ORDERS = {"H1": 0, "H2": 1, "H3": 2}
BACKENDS = ["reference", CPU]

# Codes worth sprinkling in: zeros, NaNs, Infs (E5M2), largest, smallest subnormal, largest
# subnormal, smallest normal; both signs.
SPECIAL_CODES = {
    "e4m3": [0x00, 0x80, 0x7F, 0xFF, 0x7E, 0xFE, 0x01, 0x81, 0x07, 0x87, 0x08, 0x88],
    "e5m2": [0x00, 0x80, 0x7C, 0xFC, 0x7D, 0x7E, 0xFF, 0x7B, 0xFB, 0x01, 0x81, 0x03, 0x83, 0x04],
}
EXP_FIELD_MAX = {"e4m3": 15, "e5m2": 30}   # largest exponent field of a finite value


def f32_bits(x):
    return int(np.array([x], np.float32).view(np.uint32)[0])


def scale_tensor(bits):
    return torch.tensor([bits], dtype=torch.int64).to(torch.int32).view(torch.float32).reshape(())


def as_fp8(codes, fmt):
    return torch.from_numpy(np.ascontiguousarray(codes, dtype=np.uint8)).view(DTYPE[fmt])


def bits_of(t):
    b = mmaemu.testing.bits(t).numpy().astype(np.int64)
    return b & ((1 << (8 * t.element_size())) - 1)


# Memory layouts of the operands. mat1 [M, K]: contiguous, rows padded (row stride > K, read in
# place), or a transposed view (copied to K-contiguous rows). mat2 [K, N]: w.t() of a
# contiguous or padded w [N, K] (read in place), or a row-major [K, N] (copied).
LAYOUTS_A = ["contiguous", "padded", "transposed"]
LAYOUTS_B = ["w.t()", "padded w.t()", "row-major"]


def with_layout_a(A, fmt, layout):
    if layout == "padded":
        wide = np.zeros((A.shape[0], A.shape[1] + 5), np.uint8)
        wide[:, :A.shape[1]] = A
        return as_fp8(wide, fmt)[:, :A.shape[1]]
    if layout == "transposed":
        return as_fp8(A.T, fmt).t()
    return as_fp8(A, fmt)


def with_layout_b(B, fmt, layout):
    if layout == "padded w.t()":
        wide = np.zeros((B.shape[0], B.shape[1] + 3), np.uint8)
        wide[:, :B.shape[1]] = B
        return as_fp8(wide, fmt)[:, :B.shape[1]].t()
    if layout == "row-major":
        return as_fp8(B.T, fmt)
    return as_fp8(B, fmt).t()


def random_codes(rng, shape, fmt, mode):
    """FP8 codes: 'narrow' exponents within 4 binades (much cancellation and carry), 'wide'
    every finite code, 'specials' wide plus a few special codes, 'cancel' narrow with many
    zeros."""
    man_bits = 3 if fmt == "e4m3" else 2
    if mode == "wide" or mode == "specials":
        codes = rng.integers(0, 256, size=shape)
        finite_max = (EXP_FIELD_MAX[fmt] << man_bits) | ((1 << man_bits) - 1)
        if fmt == "e4m3":
            finite_max -= 1
        codes = np.where((codes & 0x7F) > finite_max, codes & 0x80 | rng.integers(0, finite_max + 1, size=shape), codes)
        if mode == "specials":
            pick = rng.random(shape) < 1.0 / (1 + shape[-1] * 2)
            codes = np.where(pick, rng.choice(SPECIAL_CODES[fmt], size=shape), codes)
        return codes
    lo = rng.integers(1, EXP_FIELD_MAX[fmt] - 3)
    exps = rng.integers(lo, lo + 4, size=shape)
    codes = (rng.integers(0, 2, size=shape) << 7) | (exps << man_bits) | rng.integers(0, 1 << man_bits, size=shape)
    if mode == "cancel":
        codes = np.where(rng.random(shape) < 0.4, 0, codes)
    return codes


# fp32 scales: exact powers of two, numbers with full mantissas (they make the epilogue's
# rounding and order visible), negatives, a subnormal, values that overflow, zero and specials.
scale_bits = st.one_of(
    st.just(f32_bits(1.0)),
    st.integers(-30, 30).map(lambda k: f32_bits(2.0 ** k)),
    st.tuples(st.integers(0, 1), st.integers(110, 144), st.integers(0, (1 << 23) - 1)).map(
        lambda t: (t[0] << 31) | (t[1] << 23) | t[2]),
    st.sampled_from([f32_bits(-1.0), 0x00000010, 0x80400000, f32_bits(2.0 ** 100), f32_bits(-3e38),
                     0x00000000, 0x80000000, 0x7F800000, 0x7FC00000]),
)


@st.composite
def gemm_cases(draw):
    fa, fb = draw(st.sampled_from(PAIRS))
    splits = draw(st.sampled_from([1, 1, 2, 3, 4, 5, 6, 8]))
    return dict(
        M=draw(st.integers(1, 4)), N=draw(st.integers(1, 4)),
        K=draw(st.one_of(st.integers(1, 70), st.integers(71, 420),
                         st.sampled_from([16, 17, 31, 32, 33, 48, 112, 127, 128, 129, 256, 272, 384, 400]))),
        fa=fa, fb=fb,
        preset=draw(st.sampled_from(PRESETS)),
        fast=draw(st.booleans()),
        splits=splits,
        scheme="none" if splits == 1 else draw(st.sampled_from(SCHEMES)),
        mode_a=draw(st.sampled_from(["narrow", "wide", "specials", "cancel"])),
        mode_b=draw(st.sampled_from(["narrow", "wide", "specials", "cancel"])),
        seed=draw(st.integers(0, 2 ** 32 - 1)),
        scale_a=draw(scale_bits), scale_b=draw(scale_bits),
        scale_result=draw(st.one_of(st.none(), scale_bits)),
        order=draw(st.sampled_from(sorted(ORDERS))),
        layout_a=draw(st.sampled_from(LAYOUTS_A)),
        layout_b=draw(st.sampled_from(LAYOUTS_B)),
    )


def check_case(c):
    rng = np.random.default_rng(c["seed"])
    A = random_codes(rng, (c["M"], c["K"]), c["fa"], c["mode_a"])
    B = random_codes(rng, (c["N"], c["K"]), c["fb"], c["mode_b"])
    if c["mode_b"] == "cancel" and c["fa"] == c["fb"]:
        B[0] = A[0] ^ (rng.integers(0, 2, size=c["K"]) << 7)   # products of equal magnitudes
    if c["mode_a"] == "cancel":
        # Row 0's second half repeats its first half negated (against equal B halves): the
        # dot products cancel exactly, across blocks, promotion intervals and splits.
        h = c["K"] // 2
        A[0, h:2 * h] = A[0, :h] ^ 0x80
        B[:, h:2 * h] = B[:, :h]
    mat1 = with_layout_a(A, c["fa"], c.get("layout_a", "contiguous"))
    mat2 = with_layout_b(B, c["fb"], c.get("layout_b", "w.t()"))
    assert bits_of(mat1).tolist() == A.tolist() and bits_of(mat2.t()).tolist() == B.tolist()
    A_rows, B_rows = A.tolist(), B.tolist()
    acc = [[pm.accumulator(a, b, c["fa"], c["fb"], c["fast"], c["preset"], c["splits"], c["scheme"])
            for b in B_rows] for a in A_rows]
    label = {k: v for k, v in c.items()}
    for backend in BACKENDS:
        got = torch.ops.mmaemu.accumulate(mat1, mat2.t(), c["fast"], c["preset"], c["splits"], c["scheme"], backend)
        want = np.array([[pm.f32_canonical(v) for v in row] for row in acc], np.int64)
        assert_same(bits_of(got), want, f"accumulate {backend}", label)
        sr = scale_tensor(c["scale_result"]) if c["scale_result"] is not None else None
        for out, dtype in OUT_DTYPE.items():
            got = torch.ops.mmaemu.scaled_mm(mat1, mat2, scale_tensor(c["scale_a"]), scale_tensor(c["scale_b"]),
                                             None, sr, dtype, c["fast"], c["preset"], c["splits"], c["scheme"],
                                             backend, ORDERS[c["order"]])
            assert got.dtype == dtype and got.shape == (c["M"], c["N"])
            want = np.array([[pm.epilogue(v, out, c["scale_a"], c["scale_b"], c["scale_result"], c["order"])
                              for v in row] for row in acc], np.int64)
            assert_same(bits_of(got), want, f"scaled_mm {backend} -> {out}", label)


def assert_same(got, want, what, label):
    bad = np.argwhere(got != want)
    if bad.size:
        i, j = bad[0]
        raise AssertionError(f"{what}: {len(bad)} of {got.size} differ; at ({i}, {j}) C core {got[i, j]:#x}, "
                             f"model {want[i, j]:#x}; case {label}")


@given(gemm_cases())
def test_random_gemms_match_the_python_model(case):
    check_case(case)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("K", [1, 15, 16, 31, 33, 100, 129, 255, 257, 640])
def test_fixed_shapes_every_split_scheme(preset, K):
    """K not a multiple of 16 or 32 and K across the split grain, with 1..9 splits (more
    splits than grains leaves trailing splits empty) in each scheme, both accumulation modes."""
    for splits in (1, 2, 3, 4, 5, 6, 9):
        for scheme in (["none"] if splits == 1 else SCHEMES):
            for fast in (False, True):
                check_case(dict(M=2, N=3, K=K, fa="e4m3", fb="e4m3", preset=preset, fast=fast, splits=splits,
                                scheme=scheme, mode_a="narrow", mode_b="wide", seed=K * 131 + splits,
                                scale_a=f32_bits(1.0 / 3), scale_b=f32_bits(0.7), scale_result=f32_bits(0.5),
                                order="H1"))


# ---------------------------------------------------------------------------------------------
# Named cases: expected bits written from the model's rules, and cross-checked with exactmodel.

def run_all_outputs(A, B, fa, fb, preset, fast, splits=1, scheme="none", sa=1.0, sb=1.0, sr=None, order="H1"):
    """{out: bits array} of scaled_mm for every output dtype, plus 'acc' from accumulate,
    after checking each against exactmodel."""
    A, B = np.array(A), np.array(B)
    x, w = as_fp8(A, fa), as_fp8(B, fb)
    sa_b, sb_b = f32_bits(sa), f32_bits(sb)
    sr_b = None if sr is None else f32_bits(sr)
    res = {"acc": bits_of(torch.ops.mmaemu.accumulate(x, w, fast, preset, splits, scheme, "reference"))}
    model_acc = pm.accumulate(A.tolist(), B.tolist(), fa, fb, fast, preset, splits, scheme)
    assert res["acc"].tolist() == model_acc
    for out, dtype in OUT_DTYPE.items():
        got = bits_of(torch.ops.mmaemu.scaled_mm(x, w.t(), scale_tensor(sa_b), scale_tensor(sb_b), None,
                                                 None if sr_b is None else scale_tensor(sr_b), dtype, fast,
                                                 preset, splits, scheme, "reference", ORDERS[order]))
        assert got.tolist() == pm.scaled_mm(A.tolist(), B.tolist(), fa, fb, sa_b, sb_b, out, fast, preset,
                                            splits, scheme, sr_b, order)
        res[out] = got
    return res


ALL_MODES = [(preset, fast, splits, scheme) for preset in PRESETS for fast in (False, True)
             for splits, scheme in ((1, "none"), (2, "serial"), (3, "pairwise"), (2, "contiguous"))]


@pytest.mark.parametrize("preset,fast,splits,scheme", ALL_MODES)
def test_nan_propagates(preset, fast, splits, scheme):
    """A NaN input (E4M3 0x7F or 0xFF) anywhere in a dot product makes that element NaN; NaN
    has one pattern per output: fp32 0x7FFFFFFF, bf16/fp16 0x7FFF, E4M3/E5M2 0x7F. Other
    elements keep their values (here 300 * 1 * 1 = 300)."""
    K = 300
    A = [[0x38] * K, [0x38] * K, [0x38] * K]
    A[0][40] = 0x7F
    A[2][299] = 0xFF                 # negative-signed NaN, in the last split and block
    B = [[0x38] * K]
    r = run_all_outputs(A, B, "e4m3", "e4m3", preset, fast, splits, scheme)
    # 300 = 1.171875 * 2^8: fp32 0x43960000, bf16 0x4396, fp16 0x5CB0; E4M3 (spacing 32 at
    # 2^8) rounds it to 288 = 0x79; E5M2 (spacing 64) to 320 = 0x5D.
    assert r["acc"][:, 0].tolist() == [0x7FFFFFFF, 0x43960000, 0x7FFFFFFF]
    assert r["f32"][:, 0].tolist() == [0x7FFFFFFF, 0x43960000, 0x7FFFFFFF]
    assert r["bf16"][:, 0].tolist() == [0x7FFF, 0x4396, 0x7FFF]
    assert r["f16"][:, 0].tolist() == [0x7FFF, 0x5CB0, 0x7FFF]
    assert r["e4m3"][:, 0].tolist() == [0x7F, 0x79, 0x7F]
    assert r["e5m2"][:, 0].tolist() == [0x7F, 0x5D, 0x7F]


def test_nan_scale_gives_nan_everywhere():
    r = run_all_outputs([[0x38] * 32], [[0x38] * 32], "e4m3", "e4m3", "hopper", True, sa=float("nan"))
    assert [int(r[o][0, 0]) for o in ("f32", "bf16", "f16", "e4m3", "e5m2")] == [0x7FFFFFFF, 0x7FFF, 0x7FFF, 0x7F, 0x7F]


@pytest.mark.parametrize("preset,fast,splits,scheme", ALL_MODES)
def test_inf_propagates(preset, fast, splits, scheme):
    """E5M2 x E4M3 with K = 200 (splits of 128: k < 128 and k >= 128). Row 0: +Inf * 1 -> +Inf.
    Row 1: -Inf (k = 3) and +Inf (k = 150, another block, interval and split) -> NaN. Row 2:
    Inf * 0 -> NaN. Row 3: -Inf -> -Inf. Outputs: fp32 +-0x7F800000, bf16 0x7F80/0xFF80, fp16
    0x7C00/0xFC00; E4M3 and E5M2 saturate (satfinite): 0x7E/0xFE and 0x7B/0xFB."""
    K = 200
    A = [[0x3C] * K for _ in range(4)]   # E5M2 1.0
    A[0][3] = 0x7C
    A[1][3], A[1][150] = 0xFC, 0x7C
    A[2][5] = 0x7C
    A[3][7] = 0xFC
    B = [[0x38] * K]                      # E4M3 1.0 ...
    B[0][5] = 0x00                        # ... and 0 where row 2 has its Inf
    r = run_all_outputs(A, B, "e5m2", "e4m3", preset, fast, splits, scheme)
    assert r["acc"][:, 0].tolist() == [0x7F800000, 0x7FFFFFFF, 0x7FFFFFFF, 0xFF800000]
    assert r["f32"][:, 0].tolist() == [0x7F800000, 0x7FFFFFFF, 0x7FFFFFFF, 0xFF800000]
    assert r["bf16"][:, 0].tolist() == [0x7F80, 0x7FFF, 0x7FFF, 0xFF80]
    assert r["f16"][:, 0].tolist() == [0x7C00, 0x7FFF, 0x7FFF, 0xFC00]
    assert r["e4m3"][:, 0].tolist() == [0x7E, 0x7F, 0x7F, 0xFE]
    assert r["e5m2"][:, 0].tolist() == [0x7B, 0x7F, 0x7F, 0xFB]
    # A negative scale flips the infinities; a zero scale turns them into NaN (Inf * 0).
    r = run_all_outputs(A, B, "e5m2", "e4m3", preset, fast, splits, scheme, sa=-2.0)
    assert r["f32"][:, 0].tolist() == [0xFF800000, 0x7FFFFFFF, 0x7FFFFFFF, 0x7F800000]
    r = run_all_outputs(A, B, "e5m2", "e4m3", preset, fast, splits, scheme, sb=0.0)
    assert r["f32"][:, 0].tolist() == [0x7FFFFFFF] * 4


@pytest.mark.parametrize("preset,fast,splits,scheme", ALL_MODES)
def test_signed_zeros(preset, fast, splits, scheme):
    """An exact zero accumulator is +0: all products -0 (row 0: -0 * 1), exact cancellation
    (row 1: 1 - 1 in one block, row 2: +1 at k = 0 and -1 at k = 140, across blocks, intervals
    and splits). A negative scale still gives +0 in every output: the epilogue is
    fma(alpha, acc, +0) and an exact-zero product plus +0 is +0 (RTX 4060 recordings,
    test_hw_mini.py; the earlier model, -0, disagreed with the hardware); two negative scales
    give +0 too. Row 3: 2^-9 * 2^-9 = 2^-18 times
    scale -1 is an fp32/bf16/fp16 number and -0 in FP8; times scale -2^-100 it is -2^-118,
    below half of the smallest fp16/FP8 subnormal: -0 there."""
    K = 160
    A = [[0x80] * K, [0x00] * K, [0x00] * K, [0x00] * K]
    A[1][0], A[1][1] = 0x38, 0xB8
    A[2][0], A[2][140] = 0x38, 0xB8
    A[3][9] = 0x01
    B = [[0x38] * K]
    B[0][9] = 0x01
    r = run_all_outputs(A, B, "e4m3", "e4m3", preset, fast, splits, scheme, sa=-1.0)
    assert r["acc"][:, 0].tolist() == [0, 0, 0, 0x36800000]     # +0 three times, 2^-18
    assert r["f32"][:, 0].tolist() == [0] * 3 + [0xB6800000]
    assert r["bf16"][:, 0].tolist() == [0] * 3 + [0xB680]
    assert r["f16"][:, 0].tolist() == [0] * 3 + [0x8040]   # -2^-18 = -64 * 2^-24
    assert r["e4m3"][:, 0].tolist() == [0] * 3 + [0x80]    # below 2^-10 (half of 2^-9)
    assert r["e5m2"][:, 0].tolist() == [0] * 3 + [0x80]    # below 2^-17 (half of 2^-16)
    r = run_all_outputs(A[:3], B, "e4m3", "e4m3", preset, fast, splits, scheme, sa=-1.0, sb=-4.0)
    assert r["f32"][:, 0].tolist() == [0] * 3 and r["e4m3"][:, 0].tolist() == [0] * 3
    r = run_all_outputs(A[3:], B, "e4m3", "e4m3", preset, fast, splits, scheme, sa=-2.0 ** -100)
    assert [int(r[o][0, 0]) for o in ("f32", "bf16", "f16", "e4m3", "e5m2")] == [0x84800000, 0x8480, 0x8000, 0x80, 0x80]


@pytest.mark.parametrize("preset", PRESETS)
def test_overflow(preset):
    """Overflow in the epilogue and the output conversions (acc = 1 * 1 = 1, the scale sets v):
    fp16: 65519 -> 65504 (0x7BFF), 65520 (halfway, 65504 is odd) -> Inf (0x7C00);
    bf16: 0x7F7F7FFF -> 0x7F7F, 0x7F7F8000 (halfway) -> Inf (0x7F80);
    E4M3 (satfinite): 464 (halfway) and 1e30 -> 448 (0x7E), -1e30 -> 0xFE;
    E5M2 (satfinite): 61440 (halfway to 65536) -> 57344 (0x7B);
    fp32: scale_a * scale_b = 2^127 * 4 overflows in H1 -> Inf everywhere (FP8 saturates);
    scale_result: v * scale_result overflowing fp32 also saturates."""
    A, B = [[0x38]], [[0x38]]

    def out(kind, **kw):
        return int(run_all_outputs(A, B, "e4m3", "e4m3", preset, True, **kw)[kind][0, 0])

    assert out("f16", sa=65519.0) == 0x7BFF and out("f16", sa=65520.0) == 0x7C00
    assert out("f16", sa=-65520.0) == 0xFC00
    below, half = np.array([0x7F7F7FFF, 0x7F7F8000], np.uint32).view(np.float32).tolist()
    assert out("bf16", sa=below) == 0x7F7F and out("bf16", sa=half) == 0x7F80
    assert out("e4m3", sa=464.0) == 0x7E and out("e4m3", sa=1e30) == 0x7E and out("e4m3", sa=-1e30) == 0xFE
    assert out("e5m2", sa=61440.0) == 0x7B and out("e5m2", sa=-1e30) == 0xFB
    big = dict(sa=2.0 ** 127, sb=4.0)
    assert [out(k, **big) for k in ("f32", "bf16", "f16", "e4m3", "e5m2")] == [0x7F800000, 0x7F80, 0x7C00, 0x7E, 0x7B]
    assert out("e4m3", sa=2.0 ** 100, sr=2.0 ** 100) == 0x7E
    assert out("e5m2", sa=-(2.0 ** 100), sr=2.0 ** 100) == 0xFB


def test_epilogue_order_is_visible():
    """acc = 3 * 1.375 = 4.125, scale_a = 1.1f (0x3F8CCCCD), scale_b = 1.5: the three orders
    H1 fp32(fp32(sa*sb)*acc), H2 fp32(fp32(acc*sa)*sb), H3 fp32(fp32(acc*sb)*sa) round to three
    different fp32 values (also what numpy's IEEE float32 arithmetic gives), and the op returns
    the one it is asked for."""
    sa, sb = float(np.uint32(0x3F8CCCCD).view(np.float32)), 1.5
    A, B = [[0x44, 0x00]], [[0x3B, 0x00]]           # 3 * 1.375
    expected = {"H1": 0x40D9CCCE, "H2": 0x40D9CCCC, "H3": 0x40D9CCCD}
    f = np.float32
    acc = f(4.125)
    ieee = {"H1": (f(sa) * f(sb)) * acc, "H2": (acc * f(sa)) * f(sb), "H3": (acc * f(sb)) * f(sa)}
    for order, want in expected.items():
        assert int(np.array([ieee[order]], np.float32).view(np.uint32)[0]) == want
        r = run_all_outputs(A, B, "e4m3", "e4m3", "hopper", True, sa=sa, sb=sb, order=order)
        assert int(r["f32"][0, 0]) == want, order


def test_k_zero_and_empty_shapes():
    """K = 0 gives zeros (torch._scaled_mm's early return); M or N = 0 gives empty outputs."""
    x = torch.zeros(3, 0, dtype=torch.float8_e4m3fn)
    w = torch.zeros(2, 0, dtype=torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    for dtype in OUT_DTYPE.values():
        y = torch.ops.mmaemu.scaled_mm(x, w.t(), one, -one, None, None, dtype, True, "hopper", 1, "none",
                                       "reference", 0)
        assert y.shape == (3, 2) and not bits_of(y).any()
    assert torch.ops.mmaemu.accumulate(x[:0], w, True, "hopper", 1, "none", "reference").shape == (0, 2)


def conversion_probe_values():
    """fp32 patterns around every rounding decision of the output formats: for each target
    precision (bf16 7, fp16 10, E4M3 3, E5M2 2 fraction bits) and exponents from below the
    target's subnormals to beyond its overflow, a random significand cut at the target's
    precision followed by an exact tie, a tie - 1 and a tie + 1 in fp32's last place; plus
    random patterns, subnormals and the specials."""
    rng = np.random.default_rng(2024)
    vals = {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x00000001,
            0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF}
    for man_bits, lo, hi in ((7, -136, 128), (10, -27, 17), (3, -12, 10), (2, -19, 17)):
        for e in range(lo, hi):
            for _ in range(3):
                top = int(rng.integers(0, 1 << man_bits))
                tie = (top << (23 - man_bits)) | (1 << (22 - man_bits))
                for m in (tie - 1, tie, tie + 1):
                    sign = int(rng.integers(0, 2))
                    ex = e + 127
                    if 1 <= ex <= 254:
                        vals.add((sign << 31) | (ex << 23) | (m & 0x7FFFFF))
    vals.update(int(v) for v in rng.integers(0, 1 << 32, size=300, dtype=np.uint64))
    return sorted(vals)


def test_output_conversions_at_rounding_boundaries():
    """The epilogue's conversions on ~2 000 fp32 values v (acc = 1 * 1, scale_a = v, so the
    epilogue computes exactly v): the C core against exactmodel, and exactmodel against torch's own
    casts where those are defined the same way (bf16 and fp16: RN-even, overflow to Inf; FP8:
    RN-even below overflow, where torch does not saturate)."""
    x = torch.full((1, 1), 1.0).to(torch.float8_e4m3fn)
    one = scale_tensor(f32_bits(1.0))
    probes = conversion_probe_values()
    for out, dtype in OUT_DTYPE.items():
        got = [int(bits_of(torch.ops.mmaemu.scaled_mm(x, x.t(), scale_tensor(v), one, None, None, dtype, True,
                                                      "hopper", 1, "none", "reference", 0))[0, 0]) for v in probes]
        # the epilogue of acc = 1: fma(v, 1, +0), which is v except that -0 becomes +0
        want = [pm.epilogue(f32_bits(1.0), out, v, f32_bits(1.0)) for v in probes]
        bad = [(hex(v), hex(g), hex(w)) for v, g, w in zip(probes, got, want) if g != w]
        assert not bad, f"{out}: {len(bad)} differ (value, C core, model): {bad[:5]}"
        # exactmodel against torch's casts, on the values where both define the same result.
        f = torch.tensor(np.array(probes, np.uint32).view(np.int32)).view(torch.float32)
        ok = ~torch.isnan(f)
        if out in ("e4m3", "e5m2"):
            ok &= f.abs() <= {"e4m3": 448.0, "e5m2": 57344.0}[out]
        cast = bits_of(f.to(dtype)).reshape(-1)
        for i in torch.nonzero(ok).reshape(-1).tolist():
            conv = pm.convert_output(probes[i], out)
            assert int(cast[i]) == conv, (out, hex(probes[i]), hex(int(cast[i])), hex(conv))
