"""Exhaustive checks of the C core's block FMA against the independent Python model (exactmodel):
every single product of every FP8 format pair with many accumulators C, every sign pattern of
small products across block boundaries, and the model's worked examples."""
import itertools
import subprocess

import numpy as np
import pytest
import torch

import cbuild
import mmaemu
from mmaemu_tools import exactmodel as pm
from helpers import f32_bits as c_tensor, fp8_codes as fp8_tensor

PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")]
PRESETS = ["hopper", "ada", "b200"]

# Accumulator inputs: zeros, tiny and huge values of both signs, fp32 subnormals, values with
# low bits that the block cuts, and the specials.
C_BITS = [
    0x00000000, 0x80000000,              # +0, -0
    0x3F800000, 0xBF800000,              # +-1
    0x3F9CCCCD, 0xC2F6E979,              # 1.225, -123.456 (bits below the 14-bit cut)
    0x2F800000, 0xAF800001,              # +-2^-32 (tiny next to most products)
    0x4B000001, 0xCB7FFFFF,              # 2^23 + 1, -(2^24 - 1)
    0x7F7FFFFF, 0xFF7FFFFF, 0x7E967699,  # +-largest finite, 1e38
    0x00000001, 0x807FFFFF, 0x00400000,  # fp32 subnormals
    0x7F800000, 0xFF800000, 0x7FC00000,  # +Inf, -Inf, NaN
]


def out_bits(t):
    return t.view(torch.int32).numpy().view(np.uint32)


def block_size(preset):
    return pm.PRESETS[preset].block


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("fa,fb", PAIRS)
def test_every_single_product(preset, fa, fb):
    """All 256 x 256 code pairs, one product per row (at position i % K of an otherwise zero
    block), for every C in C_BITS: 65 536 x 19 instructions through the C core. The model's
    result depends only on the product term, so it is evaluated once per distinct term."""
    K = block_size(preset)
    idx = np.arange(65536)
    a = np.zeros((65536, K), np.uint8)
    b = np.zeros((65536, K), np.uint8)
    a[idx, idx % K] = idx >> 8
    b[idx, idx % K] = idx & 0xFF
    at, bt = fp8_tensor(a, fa), fp8_tensor(b, fb)
    terms = [pm.product_term(pm.fp8_decode(int(i >> 8), fa), pm.fp8_decode(int(i & 0xFF), fb)) for i in idx]
    distinct = sorted(set(terms), key=repr)
    slot = {t: n for n, t in enumerate(distinct)}
    term_index = np.array([slot[t] for t in terms])
    for c in C_BITS:
        got = out_bits(mmaemu.mma(at, bt, c_tensor(np.full(65536, c)), preset=preset))
        want_distinct = np.array([pm.f32_canonical(pm.block_fma((t,), c, preset)) for t in distinct], np.uint32)
        want = want_distinct[term_index]
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, (f"{preset} {fa}x{fb} C={c:08x}: {bad.size} differ, first a={bad[0] >> 8:#04x} "
                               f"b={bad[0] & 0xFF:#04x}: C core {got[bad[0]]:08x}, model {want[bad[0]]:08x}")
    # The shortcut above equals the model's own entry point on whole rows.
    for i in range(0, 65536, 997):
        want = pm.mma(a[i].tolist(), b[i].tolist(), C_BITS[i % len(C_BITS)], fa, fb, preset)
        got = out_bits(mmaemu.mma(at[i:i + 1], bt[i:i + 1], c_tensor([C_BITS[i % len(C_BITS)]]), preset=preset))
        assert int(got[0]) == want


# Products for the sign-pattern test: four positions, two on each side of the boundary between
# the first and second block; every magnitude set is tried with every sign (+, -, or 0) at each
# position: 81 patterns per set.
MAGNITUDE_SETS = [  # (a code, b code) per position, E4M3 x E4M3
    [(0x7E, 0x7E)] * 4,                                          # 448 * 448: carries
    [(0x7E, 0x38), (0x06, 0x38), (0x7E, 0x38), (0x06, 0x38)],    # 448 with 0.01171875 (cut)
    [(0x38, 0x38), (0x01, 0x38), (0x38, 0x38), (0x01, 0x01)],    # 1 with subnormals
    [(0x39, 0x38), (0x38, 0x38), (0x36, 0x38), (0x0B, 0x3B)],    # 1.125, 1, 0.875, small
    [(0x77, 0x38), (0x78, 0x38), (0x3E, 0x38), (0x01, 0x38)],    # 240, 256, 1.75, 2^-9
    [(0x50, 0x50), (0x38, 0x20), (0x50, 0x50), (0x2F, 0x2F)],    # 2^3*2^3, 2^-3, ...
]
C_SMALL = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x45000000, 0x4B7FFFFF, 0xCB7FFFFF,
           0x35800000, 0x00000003]


@pytest.mark.parametrize("preset", PRESETS)
def test_sign_patterns_across_block_boundaries(preset):
    G = block_size(preset)
    K = 2 * G
    positions = [0, G - 1, G, 2 * G - 1]
    rows_a, rows_b = [], []
    for mags in MAGNITUDE_SETS:
        for signs in itertools.product((0, 1, None), repeat=4):
            ra, rb = [0] * K, [0] * K
            for pos, (ca, cb), s in zip(positions, mags, signs):
                if s is not None:
                    ra[pos], rb[pos] = ca | (s << 7), cb
            rows_a.append(ra)
            rows_b.append(rb)
    at = fp8_tensor(np.array(rows_a), "e4m3")
    bt = fp8_tensor(np.array(rows_b), "e4m3")
    for c in C_SMALL:
        got = out_bits(mmaemu.mma(at, bt, c_tensor(np.full(len(rows_a), c)), preset=preset))
        for i, (ra, rb) in enumerate(zip(rows_a, rows_b)):
            want = pm.mma(ra, rb, c, "e4m3", "e4m3", preset)
            assert int(got[i]) == want, f"{preset} C={c:08x} row {i}: C core {int(got[i]):08x}, model {want:08x}"


def test_mixed_formats_sign_patterns():
    """E5M2 x E4M3 and E4M3 x E5M2 with E5M2's wide exponents (and its Inf) on both sides of a
    block boundary; C = 0 and C = 1."""
    for preset in PRESETS:
        G = block_size(preset)
        K = 2 * G
        vals_a = [0x00, 0x7B, 0xFB, 0x01, 0x81, 0x3C, 0x7C, 0x40]  # E5M2: 0, +-57344, +-2^-16, 1, Inf, 2
        vals_b = [0x38, 0x7E, 0x01]                                  # E4M3: 1, 448, 2^-9
        rows_a, rows_b = [], []
        for x0, x1, x2 in itertools.product(vals_a, repeat=3):
            for yb in vals_b:
                ra, rb = [0] * K, [0] * K
                ra[G - 1], ra[G], ra[0] = x0, x1, x2
                rb[G - 1], rb[G], rb[0] = yb, 0x38, yb
                rows_a.append(ra)
                rows_b.append(rb)
        for (fa, fb), (A, B) in (((("e5m2", "e4m3")), (rows_a, rows_b)), ((("e4m3", "e5m2")), (rows_b, rows_a))):
            at, bt = fp8_tensor(np.array(A), fa), fp8_tensor(np.array(B), fb)
            for c in (0x00000000, 0x3F800000):
                got = out_bits(mmaemu.mma(at, bt, c_tensor(np.full(len(A), c)), preset=preset))
                for i in range(len(A)):
                    want = pm.mma(A[i], B[i], c, fa, fb, preset)
                    assert int(got[i]) == want, f"{preset} {fa}x{fb} row {i}"


def test_full_blocks_of_largest_products_carry_exactly():
    """K = 64 products 448 * 448 = 200 704: the block sums need carry bits above the largest
    term. 64 * 200 704 = 12 845 056 = 1.53125 * 2^23 has 6 significant bits, so every preset
    gives it exactly (hopper: 2 blocks of 32, ada: 4 of 16, b200: 2 of 32 with C added late);
    and with all signs negative, its negation."""
    a = torch.tensor([[448.0] * 64, [-448.0] * 64]).to(torch.float8_e4m3fn)
    b = torch.full((2, 64), 448.0).to(torch.float8_e4m3fn)
    for preset in PRESETS:
        d = mmaemu.mma(a, b, torch.zeros(2), preset=preset)
        assert out_bits(d).tolist() == [0x4B440000, 0xCB440000]
        assert [pm.mma(r, [0x7E] * 64, 0, "e4m3", "e4m3", preset) for r in a.view(torch.uint8).tolist()] == \
            [0x4B440000, 0xCB440000]


def acc_bits(codes_a, codes_b, fast, preset, fa="e4m3", fb="e4m3"):
    x = fp8_tensor(np.array([codes_a]), fa)
    w = fp8_tensor(np.array([codes_b]), fb)
    return int(out_bits(torch.ops.mmaemu.accumulate(x, w, fast, preset, 1, "none", "reference"))[0, 0])


def f32_bits(x):
    return int(np.array([x], np.float32).view(np.uint32)[0])


def test_worked_example_c_joins_the_block():
    """Research note probe P1, with the model's predictions: block 1 = 32 * 64 = 2048, and at
    k = 128, 129 the products 0.875 and 0.125. Fast accumulation carries 2048 into the next
    block as C, where the grid is 2^(11-13) = 0.25: 0.875 -> 0.75, 0.125 -> 0, giving 2048.75.
    Without fast accumulation k = 128 starts a new promotion interval from 0 (exactly 1.0), and
    the fp32 add gives 2049. b200 adds C after the block: 2049 either way."""
    K = 160
    a, b = [0] * K, [0] * K
    a[0], b[0] = 0x60, 0x68          # 32 * 64
    a[128], b[128] = 0x36, 0x38      # 0.875 * 1
    a[129], b[129] = 0x20, 0x38      # 0.125 * 1
    expected = {("hopper", True): 2048.75, ("hopper", False): 2049.0, ("ada", True): 2048.75,
                ("ada", False): 2049.0, ("b200", True): 2049.0, ("b200", False): 2049.0}
    for (preset, fast), value in expected.items():
        assert acc_bits(a, b, fast, preset) == f32_bits(value), (preset, fast)
        assert pm.accumulate([a], [b], "e4m3", "e4m3", fast, preset)[0][0] == f32_bits(value)


def test_worked_example_truncation_toward_zero_and_14_bits():
    """Probe P2: (i) 32 * 32 = 1024 with -0.09375: on the grid 2^(10-13) = 0.125 the small
    term is cut toward zero to 0 (a floor would give 1023.875): 1024. (ii) 1024 + 1024 + 3 *
    0.125 = 2048.375 = 16387 grid units, 15 bits; 14 are kept, truncated: 2048.25."""
    a = [0] * 32
    b = [0] * 32
    a[0], b[0] = 0x60, 0x60          # 32 * 32
    a[5], b[5] = 0x1C, 0xB8          # 0.09375 * -1 (0x1C = 1.5 * 2^-4)
    for preset in ("hopper", "ada"):
        assert acc_bits(a, b, True, preset) == f32_bits(1024.0)
    assert acc_bits(a, b, True, "b200") == f32_bits(1023.90625)
    a2 = [0] * 32
    b2 = [0] * 32
    a2[0] = b2[0] = a2[1] = b2[1] = 0x60
    for k in (2, 3, 4):
        a2[k], b2[k] = 0x20, 0x38    # 0.125 * 1
    assert acc_bits(a2, b2, True, "hopper") == f32_bits(2048.25)
    assert pm.accumulate([a2], [b2], "e4m3", "e4m3", True, "hopper")[0][0] == f32_bits(2048.25)
    # ada: block 1 (k < 16) holds all five terms: the same cut.
    assert acc_bits(a2, b2, True, "ada") == f32_bits(2048.25)
    assert acc_bits(a2, b2, True, "b200") == f32_bits(2048.375)


def test_python_model_fp32_arithmetic_is_ieee():
    """exactmodel's exact fp32 add and multiply (the promotion adds, split reductions and the
    epilogue) against numpy's IEEE float32 arithmetic, on 20 000 random pairs of bit patterns
    weighted towards subnormals, cancellation and overflow."""
    rng = np.random.default_rng(7)
    n = 20000
    x = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    y = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    # Pull exponents together (cancellation, subnormal sums) for a third, apart for a third.
    near = rng.random(n) < 0.33
    y[near] = (y[near] & 0x807FFFFF) | (x[near] & 0x7F800000)
    tiny = rng.random(n) < 0.2
    x[tiny] &= 0x80FFFFFF
    with np.errstate(all="ignore"):
        s = (x.view(np.float32) + y.view(np.float32)).view(np.uint32)
        p = (x.view(np.float32) * y.view(np.float32)).view(np.uint32)
    for i in range(n):
        xi, yi = int(x[i]), int(y[i])
        for got, want in ((pm.f32_add(xi, yi), int(s[i])), (pm.f32_mul(xi, yi), int(p[i]))):
            if pm.f32_is_nan(want):
                assert pm.f32_is_nan(got), (hex(xi), hex(yi))
            else:
                assert got == want, (hex(xi), hex(yi), hex(got), hex(want))


def test_fp16_output_rounding_matches_the_cpu_on_every_fp32(tmp_path):
    """The epilogue's fp32 -> fp16 conversion (mm_f32_to_f16; its rounding is E4M3's and E5M2's
    too) equals the CPU's F16C conversion (round to nearest even) on all 2^32 fp32 bit patterns,
    NaNs aside, which give the canonical 0x7FFF (test/c/f16_check.c, about 12 s)."""
    cc = cbuild.c_compiler()
    if not cc:
        pytest.skip("needs a C compiler")
    exe = tmp_path / "f16_check"
    subprocess.run([cc, *cbuild.exact_flags("c"), "-O2", f"-I{cbuild.CSRC}", cbuild.source("f16_check.c"),
                    "-o", str(exe), "-lm"], check=True, timeout=120)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    if run.returncode == 77:
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0 and "4294967296 inputs, 0 differences" in run.stdout, run.stdout
