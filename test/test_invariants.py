"""Invariants of the model that hold bit for bit (hypothesis).

- Rows are independent: adding rows to M (anywhere) never changes the other rows' bits for
  the same split plan. Columns likewise: permuting N (or M) permutes the output.
- Zero products are dropped by the block FMA (model step 1), so appending products with a zero
  factor changes nothing, with this precise scope:
    * inside the last block, and in further blocks: a chain's carried value has at most `keep`
      significant bits and a block that adds only +-0 products cuts it to 2^(E - frac); that is
      exact when keep <= frac + 1, true for every preset (hopper/ada 14 <= 14, b200 24 <= 26);
    * across promotion intervals: an interval of zero products adds +0 to the fp32 register,
      which is never -0 (chain results are never -0), so the register is unchanged;
    * with split-K (S > 1) only while ceil(K / 128) stays the same: the split chunk is
      ceil(ceil(K / 128) / S) * 128, so more grains can move every split boundary. The last test
      shows such a case where the bits do change.
- Products inside one block may be permuted: the block adds them exactly (model steps 3-4).
- Results do not depend on torch's intra-op thread count or on the CPU backend (reference/cpu).
The ws0-profiles-never-split property needs the profile layer and lives with it.
"""
import torch
from hypothesis import given, strategies as st

import mmaemu  # noqa: F401  (registers torch.ops.mmaemu)
from executors import CPU, CPU_SIMD
from mmaemu.testing import assert_bitwise_equal

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
OUT = [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2]
PRESETS = ["hopper", "ada", "b200"]
BLOCK = {"hopper": 32, "ada": 16, "b200": 32}
NAN_OR_INF = {torch.float8_e4m3fn: (0x7F, 0xFF),
              torch.float8_e5m2: (0x7C, 0x7D, 0x7E, 0x7F, 0xFC, 0xFD, 0xFE, 0xFF)}


def fp8(seed, rows, cols, dtype, kind):
    """[rows, cols] FP8: 'codes' = uniform finite bit patterns (every exponent), 'normal' =
    a normal distribution (cancellation, near-ties), 'small' = magnitudes below 2 (small
    accumulators, fine grids), 'special' = codes with NaN/Inf too."""
    gen = torch.Generator().manual_seed(seed)
    if kind == "small":
        codes = torch.randint(0, 0x40, (rows, cols), dtype=torch.uint8, generator=gen)
        codes |= torch.randint(0, 2, (rows, cols), dtype=torch.uint8, generator=gen) << 7
        return codes.view(dtype)
    if kind == "normal":
        lim = 448.0 if dtype == torch.float8_e4m3fn else 57344.0
        return (torch.randn(rows, cols, generator=gen) * 16).clamp(-lim, lim).to(dtype)
    codes = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, generator=gen)
    if kind == "codes":
        for c in NAN_OR_INF[dtype]:
            codes[codes == c] = 0x01
    return codes.view(dtype)


@st.composite
def settings(draw, max_k=600):
    preset = draw(st.sampled_from(PRESETS))
    splits = draw(st.sampled_from([1, 1, 2, 3, 4, 7]))
    scheme = "none" if splits == 1 else draw(st.sampled_from(["contiguous", "serial", "pairwise"]))
    return dict(
        preset=preset, splits=splits, scheme=scheme,
        fast=draw(st.booleans()),
        out=draw(st.sampled_from(OUT)),
        fmt_a=draw(st.sampled_from(FP8)), fmt_b=draw(st.sampled_from(FP8)),
        kind=draw(st.sampled_from(["codes", "normal", "normal", "small", "special"])),
        scales=(draw(st.sampled_from([1.0, 0.5, 3.0, 2.0 ** -9])), draw(st.sampled_from([1.0, 1.5, 2.0 ** 7]))),
        seed=draw(st.integers(0, 2 ** 31 - 1)),
        M=draw(st.integers(1, 6)), N=draw(st.integers(1, 6)), K=draw(st.integers(1, max_k)),
    )


def gemm(x, w, s, backend=CPU):
    """torch.ops.mmaemu.scaled_mm with x [M, K], w [N, K] and the settings' plan."""
    sa, sb = (torch.tensor(v) for v in s["scales"])
    return torch.ops.mmaemu.scaled_mm(x, w.t(), sa, sb, None, None, s["out"], s["fast"],
                                      s["preset"], s["splits"], s["scheme"], backend, 0)


def operands(s, M=None, N=None, K=None):
    M, N, K = M or s["M"], N or s["N"], K or s["K"]
    return (fp8(s["seed"], M, K, s["fmt_a"], s["kind"]),
            fp8(s["seed"] + 1, N, K, s["fmt_b"], s["kind"]))


@given(settings(), st.integers(1, 5), st.data())
def test_adding_rows_never_changes_other_rows(s, extra, data):
    x, w = operands(s)
    y = gemm(x, w, s)
    more = fp8(s["seed"] + 2, extra, s["K"], s["fmt_a"], s["kind"])
    # Insert the extra rows at random positions among the original ones.
    pos = sorted(data.draw(st.lists(st.integers(0, s["M"]), min_size=extra, max_size=extra)))
    rows, orig_idx, e = [], [], 0
    for i in range(s["M"] + 1):
        while e < extra and pos[e] == i:
            rows.append(more[e].view(torch.uint8)); e += 1
        if i < s["M"]:
            orig_idx.append(len(rows)); rows.append(x[i].view(torch.uint8))
    big = torch.stack(rows).view(s["fmt_a"])
    y_big = gemm(big, w, s)
    assert_bitwise_equal(y_big[orig_idx], y)


@given(settings(), st.randoms(use_true_random=False))
def test_permuting_n_or_m_permutes_the_output(s, rnd):
    x, w = operands(s)
    y = gemm(x, w, s)
    pn, pm = list(range(s["N"])), list(range(s["M"]))
    rnd.shuffle(pn); rnd.shuffle(pm)
    pn, pm = torch.tensor(pn), torch.tensor(pm)
    assert_bitwise_equal(gemm(x, w[pn], s), y[:, pn])
    assert_bitwise_equal(gemm(x[pm], w, s), y[pm])


def _pad_k(x, w, pad, seed, zero_side):
    """Appends `pad` products with a zero factor (+0 or -0) and a large finite other factor
    (codes 0x60-0x7A, either sign: finite in both formats), whose exponent would raise the
    block's alignment exponent if zero products were not dropped."""
    gen = torch.Generator().manual_seed(seed)

    def signs(rows):
        return torch.randint(0, 2, (rows, pad), dtype=torch.uint8, generator=gen) << 7

    zeros_x, zeros_w = signs(x.shape[0]), signs(w.shape[0])
    finite_x = torch.randint(0x60, 0x7B, (x.shape[0], pad), dtype=torch.uint8, generator=gen) | signs(x.shape[0])
    finite_w = torch.randint(0x60, 0x7B, (w.shape[0], pad), dtype=torch.uint8, generator=gen) | signs(w.shape[0])
    tail_x = zeros_x if zero_side == "x" else finite_x
    tail_w = zeros_w if zero_side == "w" else finite_w
    xp = torch.cat([x.view(torch.uint8), tail_x], 1).view(x.dtype)
    wp = torch.cat([w.view(torch.uint8), tail_w], 1).view(w.dtype)
    return xp, wp


@given(settings(), st.integers(1, 700), st.sampled_from(["x", "w"]))
def test_appending_zero_products_changes_nothing(s, pad, zero_side):
    K = s["K"]
    if s["splits"] > 1:  # stay within the same number of 128-wide split grains
        pad = 1 + (pad - 1) % (-(-K // 128) * 128 - K) if K % 128 else 0
        if pad == 0:
            return
    x, w = operands(s)
    xp, wp = _pad_k(x, w, pad, s["seed"] + 3, zero_side)
    assert_bitwise_equal(gemm(xp, wp, s), gemm(x, w, s), msg=f"K {K} -> {K + pad}")


@given(settings(), st.randoms(use_true_random=False))
def test_products_inside_a_block_commute(s, rnd):
    """The same permutation of k inside every block (the blocks of every split and interval
    start at multiples of the block size, since 128 is a multiple of it)."""
    block = BLOCK[s["preset"]]
    x, w = operands(s)
    perm = []
    for start in range(0, s["K"], block):
        idx = list(range(start, min(start + block, s["K"])))
        rnd.shuffle(idx)
        perm += idx
    perm = torch.tensor(perm)
    assert_bitwise_equal(gemm(x[:, perm].contiguous(), w[:, perm].contiguous(), s), gemm(x, w, s))


@given(settings(max_k=1000))
def test_backends_and_thread_counts_agree(s):
    x, w = operands(s)
    expected = gemm(x, w, s, backend="reference")
    saved = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for backend in tuple("cpu:" + simd for simd in CPU_SIMD):
                assert_bitwise_equal(gemm(x, w, s, backend=backend), expected,
                                     msg=f"{backend}, {threads} threads")
    finally:
        torch.set_num_threads(saved)


def test_zero_padding_across_a_split_grain_can_change_bits():
    """The limit of the statement above: with S = 2, K = 256 splits as [0, 128) + [128, 256),
    two partials added in fp32; padded to K = 384 the chunk becomes 256, so [0, 256) is one
    chain, whose blocks cut small products to the grid of the carried value."""
    s = dict(preset="hopper", splits=2, scheme="contiguous", fast=True, out=torch.float32,
             scales=(1.0, 1.0))
    x = torch.zeros(1, 256, dtype=torch.uint8)
    w = torch.zeros(1, 256, dtype=torch.uint8)
    x[0, 0], w[0, 0] = 0x78, 0x38      # E4M3 256 * 1, in the first split
    x[0, 128], w[0, 128] = 0x09, 0x38  # E4M3 1.125 * 2^-6 * 1, in the second split
    x, w = x.view(torch.float8_e4m3fn), w.view(torch.float8_e4m3fn)
    xp, wp = _pad_k(x, w, 128, 0, "x")
    # Two splits: 256 + 1.125 * 2^-6 is exact in fp32. One chain: the block after 256 has the
    # grid 2^(8 - 13), which cuts 1.125 * 2^-6 to 0.
    assert gemm(x, w, s).item() == 256 + 1.125 * 2 ** -6
    assert gemm(xp, wp, s).item() == 256.0


@given(M=st.integers(1, 1 << 16), N=st.integers(1, 1 << 12).map(lambda n: 16 * n),
       K=st.integers(1, 1 << 18).map(lambda k: 16 * k), fast=st.booleans(),
       out=st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn]),
       profile=st.sampled_from(["hopper-ws0", "ada-ws0"]))
def test_ws0_profiles_never_split(M, N, K, fast, out, profile):
    from mmaemu.api import explain_shape
    plan = explain_shape(M, N, K, "e4m3", "e4m3", out, fast, profile=profile)
    # A shape the ws0 table records is decided by its row (always S = 1), any other by the rule.
    assert (plan.split.S, plan.split.scheme) == (1, "none")
    assert plan.split.source in ("table", "rule"), plan.split
