"""Row-wise scales on the ada profiles (torch 2.7.1's sm_89 stream-K kernel): the stream-K
decomposition against cases worked by hand from CUTLASS's ThreadblockSwizzleStreamK, the
arithmetic against the exact model of mmaemu_tools/exactmodel.py (staged groups and the left
fold written out here), and the public calls (scaled_mm, explain, emulate) on the ada profiles."""
import sys
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import mmaemu
from mmaemu_tools import exactmodel
from mmaemu.planning.streamk import decompose, tile_plan_lists
from mmaemu.testing import assert_bitwise_equal

BACKENDS = ("reference", "cpu")
from test_rowwise import as_f32, as_u16, draw_rowwise_operands, fp8, u16


# --- the decomposition, worked by hand from threadblock_swizzle_streamk.h (CUTLASS 3.8) ---
# Notation: tiles of 64x128, ipt = ceil(K / 64) k-iterations per tile, occupancy 2.

def test_small_grid_below_one_wave_splits_every_tile_in_two():
    # 4x3 = 12 tiles < 24 SMs, ipt = 16: get_sk_blocks(12 tiles, max occupancy 2) tries 13..48
    # blocks; 24 blocks (aligned, 2 peers, 8 iterations each) saves 16 - 8 - int(2 + 0 + 4) = 2,
    # every other count less; 24 % 12 == 0, so 12 regions of 2 blocks of 8 iterations.
    p = decompose(200, 384, 992, 24)
    assert (p.tiles_m, p.tiles_n, p.iters_per_tile) == (4, 3, 16)
    assert (p.sk_tiles, p.sk_blocks, p.sk_regions, p.sk_blocks_per_region) == (12, 24, 12, 2)
    assert (p.sk_iters_per_normal_block, p.sk_big_blocks_per_region) == (8, 0)
    assert p.reduction_blocks == 0 and not p.cohort_raster   # 24 > 2 * 12 is false: turnstile
    assert p.segments() == {(m, n): [(0, 8), (8, 16)] for m in range(4) for n in range(3)}


@pytest.mark.parametrize("M, N, K, sms", [
    (768, 256, 4096, 24),   # 24 tiles on 24 SMs: perfect quantisation, all data-parallel
    (64, 128, 64, 24),      # one tile of one iteration: no block count to try (max 0)
    (2, 16, 512, 24),       # one tile, ipt 8: 2 blocks save 8 - 4 - 6 < 0, 3 blocks 8 - 3 - 8 < 0
    (2, 16, 16, 142),
    (5000, 5000, 64, 1),    # one SM: no heuristics
])
def test_cases_that_stay_data_parallel(M, N, K, sms):
    p = decompose(M, N, K, sms)
    assert p.sk_tiles == 0 and p.sk_blocks == 0 and p.segments() == {}
    assert p.tile_segments(0) == [(0, p.iters_per_tile)]


def test_one_tile_split_like_split_k():
    # One tile, ipt 16 (K = 1024 and K = 1008 alike): t blocks save 16 - ceil(16/t) - 2 - 2t
    # (aligned, t peers): 2, 2, 2, 0, ... for t = 2, 3, 4, 5: the last of the best is 4.
    # 4 > 2 * 1 with one wave: a separate reduction wave (4 fragments).
    for K in (1024, 1008):
        p = decompose(2, 16, K, 24)
        assert (p.sk_tiles, p.sk_blocks, p.sk_iters_per_normal_block) == (1, 4, 4)
        assert p.reduction_blocks == 4
        assert p.tile_segments(0) == [(0, 4), (4, 8), (8, 12), (12, 16)]
    # ipt 12: 2 and 3 blocks both save 0 (>= 0 is profitable), 4 blocks -1: 3 blocks.
    assert decompose(2, 16, 768, 24).tile_segments(0) == [(0, 4), (4, 8), (8, 12)]


def test_58_sms_last_full_wave_joins_the_partial_wave():
    # 16x32 = 512 tiles, 58 SMs: 8 full waves (464 tiles) + 48; 8 % 2 != 1, so the SK wave is
    # the last full wave plus the partial: 106 tiles, dp 406, max occupancy 2 - 7 % 2 = 1:
    # 58 blocks only; savings 128 - 117 - int(2 + 0.02*2*117 + 4) = 1 >= 0. 6784 iterations:
    # 116 per block, 56 big blocks of 117. tm < tn: column-major raster (tile t = (t % 16, t // 16)).
    p = decompose(1024, 4096, 4096, 58)
    assert (p.sk_tiles, p.sk_blocks, p.sk_regions) == (106, 58, 1)
    assert (p.sk_iters_per_normal_block, p.sk_big_blocks_per_region) == (116, 56)
    assert p.reduction_blocks == 0 and not p.cohort_raster   # 406 / 512 < 0.85
    assert p.block_extent(0) == (0, 117) and p.block_extent(1) == (117, 234)
    assert p.block_extent(56) == (6552, 6668) and p.block_extent(57) == (6668, 6784)
    assert p.tile_segments(0) == [(0, 64)]                   # inside block 0
    assert p.tile_coord(1) == (1, 0) and p.tile_segments(1) == [(0, 53), (53, 64)]
    assert p.tile_coord(104) == (8, 6) and p.tile_segments(104) == [(0, 12), (12, 64)]
    assert p.tile_segments(105) == [(0, 64)] and p.tile_segments(106) == [(0, 64)]  # 106: DP


def test_142_sms_split_k_regions_and_separate_reduction():
    # 2x2 = 4 tiles, ipt 64, 142 SMs: 5..128 blocks tried; 20 and 24 (aligned) both save 39,
    # the last wins: 24 blocks, 6 per tile (24 % 4 == 0: 4 regions); 256 iterations: 10 per
    # block, 16 big blocks, 4 per region. 24 > 8 in one wave: a separate reduction wave.
    p = decompose(128, 256, 4096, 142)
    assert (p.sk_tiles, p.sk_blocks, p.sk_regions, p.sk_blocks_per_region) == (4, 24, 4, 6)
    assert p.reduction_blocks == 16
    segs = [(0, 11), (11, 22), (22, 33), (33, 44), (44, 54), (54, 64)]
    assert p.segments() == {(0, 0): segs, (0, 1): segs, (1, 0): segs, (1, 1): segs}


def test_cohort_raster_maps_stream_k_tiles():
    # 16x8 = 128 tiles on 24 SMs: 5 full waves, 5 % 2 == 1: the partial 8 tiles go SK with
    # max occupancy 1: 24 blocks (aligned, 3 peers) save 64 - 22 - 8 = 34; 3 per tile, 21
    # iterations each, 1 big block per region. dp = 120 >= 96 and 120 / 128 > 0.85, the last
    # SK tile inside the first cohort: cohort raster, 8x4-tile cohorts.
    p = decompose(1024, 1024, 4096, 24)
    assert (p.sk_tiles, p.sk_blocks, p.sk_regions) == (8, 24, 8) and p.cohort_raster
    assert p.tile_segments(0) == [(0, 22), (22, 43), (43, 64)]
    assert [p.tile_coord(t) for t in (0, 3, 4, 5, 7, 32, 33)] == \
        [(0, 0), (0, 3), (1, 0), (1, 1), (1, 3), (0, 4), (0, 5)]
    assert set(p.segments()) == {(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)}


def test_sm_count_comes_from_the_profile(monkeypatch):
    from dataclasses import replace
    profiles = sys.modules["mmaemu.planning.profiles"]  # (mmaemu.profiles is also a function)
    from mmaemu.api import explain_shape
    assert mmaemu.get_profile("ada").sm_count == 24
    plan = explain_shape(200, 384, 992, out_dtype=torch.bfloat16, profile="ada", scaling="rowwise")
    assert plan.split.scheme == "streamk" and plan.split.S == 2 and not plan.split.verified
    assert "24 SMs" in plan.split.note and "Inferred" in plan.split.note
    # the same shape on an Ada part with 142 SMs: 12 tiles below one wave, 142 SMs to fill
    profiles.profiles()
    monkeypatch.setitem(profiles._PROFILES, "ada", replace(mmaemu.get_profile("ada"), sm_count=142))
    plan = explain_shape(200, 384, 992, out_dtype=torch.bfloat16, profile="ada", scaling="rowwise")
    assert "142 SMs" in plan.split.note
    assert plan.split.S == max(len(s) for s in decompose(200, 384, 992, 142).segments().values())
    assert plan.split.S != 2


def test_tile_plan_lists_cover_every_tile():
    p = decompose(200, 384, 992, 24)
    offsets, bounds = tile_plan_lists(p)
    assert offsets == [2 * t for t in range(13)] and bounds == [0, 8, 8, 16] * 12


# --- the arithmetic against the exact model ---

def staged_model(a_row, b_row, fa, fb, k0, k1):
    """CUTLASS 2.x staged accumulation over k in [k0, k1): groups cut 32 k after the
    segment's start, then every 64 k; each group a chain from +0, added from +0."""
    acc, k, end = 0, k0, k0 + 32
    while k < k1:
        acc = exactmodel.f32_add(acc, exactmodel.chain(a_row, b_row, fa, fb, k, min(end, k1), 0, "ada"))
        k, end = end, end + 64
    return acc


def element_model(a_row, b_row, fa, fb, K, fast, segments):
    acc = None
    for s, e in segments:
        k0, k1 = s * 64, min(e * 64, K)
        part = exactmodel.chain(a_row, b_row, fa, fb, k0, k1, 0, "ada") if fast \
            else staged_model(a_row, b_row, fa, fb, k0, k1)
        acc = part if acc is None else exactmodel.f32_add(acc, part)
    return acc


def rowwise_model(A, B, fa, K, fast, sa, sb, bias, plan, elements):
    out = {}
    for i, j in elements:
        segs = plan.segments().get((i // 64, j // 128), [(0, plan.iters_per_tile)])
        acc = element_model(A[i], B[j], fa, "e4m3", K, fast, segs)
        out[i, j] = exactmodel.rowwise_epilogue(acc, sa[i], sb[j],
                                             exactmodel.bias_to_f32(bias[j], "bf16") if bias else 0,
                                             False)
    return out


@st.composite
def ada_case(draw):
    M = draw(st.integers(1, 2))
    N = 16
    K = draw(st.sampled_from([16, 80, 768, 1008, 1024]))   # 1, 1, 3, 4 and 4 k-segments
    A, B, sa, sb, bias = draw_rowwise_operands(draw, M, N, K, 4)
    return M, N, K, A, B, sa, sb, bias, draw(st.booleans()), draw(st.sampled_from(["e4m3", "e5m2"]))


def run_ada(A, B, fa, sa, sb, bias, fast, M, N, profile="ada", backend=None):
    a, w = fp8(A, fa), fp8(B, "e4m3")
    b = None if bias is None else as_u16(bias, torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
        return mmaemu.scaled_mm(a, w.t(), as_f32(sa).reshape(M, 1), as_f32(sb).reshape(1, N),
                                bias=b, out_dtype=torch.bfloat16, use_fast_accum=fast,
                                profile=profile, backend=backend)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(ada_case())
def test_ada_rowwise_matches_exact_model(case):
    M, N, K, A, B, sa, sb, bias, fast, fa = case
    plan = decompose(M, N, K, 24)
    want = rowwise_model(A, B, fa, K, fast, sa, sb, bias, plan,
                         [(i, j) for i in range(M) for j in range(N)])
    for backend in BACKENDS:
        got = u16(run_ada(A, B, fa, sa, sb, bias, fast, M, N, backend=backend))
        assert got == [want[i, j] for i in range(M) for j in range(N)], backend


def dense_codes(rng, rows, K):
    # E4M3 codes of mixed magnitude and sign: partial sums that the grouping changes
    mag = rng.integers(0x20, 0x58, size=(rows, K))
    return (mag | (rng.integers(0, 2, size=(rows, K)) << 7)).tolist()


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("M, N, K", [(2, 16, 1008), (200, 384, 992)])
def test_ada_dense_elements_match_exact_model(M, N, K, fast):
    """Dense operands over stream-K tiles (4 segments of one tile; 2 segments of every tile of
    a 4x3 grid), elements sampled across tiles and K tails, with a bf16 bias."""
    rng = np.random.default_rng(K + M)
    A, B = dense_codes(rng, M, K), dense_codes(rng, N, K)
    sa = [int(x) for x in rng.integers(0x3E800000, 0x40000000, size=M)]
    sb = [int(x) for x in rng.integers(0x3E800000, 0x40000000, size=N)]
    bias = [int(x) for x in rng.integers(0, 0x10000, size=N) & 0xBFFF]
    plan = decompose(M, N, K, 24)
    elements = sorted({(int(i), int(j)) for i, j in zip(rng.integers(0, M, 24), rng.integers(0, N, 24))})
    want = rowwise_model(A, B, "e4m3", K, fast, sa, sb, bias, plan, elements)
    outs = [run_ada(A, B, "e4m3", sa, sb, bias, fast, M, N, backend=be) for be in BACKENDS]
    assert_bitwise_equal(outs[0], outs[1])      # every element, not only the sampled ones
    got = np.array(u16(outs[1])).reshape(M, N)
    assert [int(got[i, j]) for i, j in elements] == [want[e] for e in elements]


def test_ada_rowwise_differs_from_one_chain():
    """The data above distinguish the stream-K split and the staged groups from one plain
    accumulation: otherwise the tests could not fail on them."""
    rng = np.random.default_rng(7)
    K = 1008
    A, B = dense_codes(rng, 2, K), dense_codes(rng, 16, K)
    a, w = fp8(A, "e4m3"), fp8(B, "e4m3")
    ones_a, ones_b = torch.ones(2, 1), torch.ones(1, 16)
    for fast in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
            ada = mmaemu.scaled_mm(a, w.t(), ones_a, ones_b, out_dtype=torch.bfloat16,
                                   use_fast_accum=fast, profile="ada")
        acc = mmaemu.accumulate(a, w, use_fast_accum=fast, profile="ada-ws0")  # one split
        one = acc.to(torch.bfloat16)
        assert not torch.equal(ada.view(torch.int16), one.view(torch.int16)), fast


def test_signed_zero_and_overflow():
    # acc = 0 everywhere: +0 without bias (the fmaf adds +0), -0 kept by a -0 bias; huge scales
    # overflow bf16 to Inf.
    A, B = [[0] * 1024] * 2, [[0] * 1024] * 16
    out = u16(run_ada(A, B, "e4m3", [0xBF800000] * 2, [0x3F800000] * 16, None, False, 2, 16))
    assert set(out) == {0x0000}
    out = u16(run_ada(A, B, "e4m3", [0xBF800000] * 2, [0x3F800000] * 16, [0x8000] * 16, True, 2, 16))
    assert set(out) == {0x8000}
    A = [[0x38] * 1024] * 2                   # 1.0 * 1.0 summed: acc = 1024
    B = [[0x38] * 1024] * 16
    out = u16(run_ada(A, B, "e4m3", [0x7F000000] * 2, [0x7F000000] * 16, None, False, 2, 16))
    assert set(out) == {0x7F80}


# --- the public calls ---

def _operands(M=200, N=384, K=992, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(M, K, generator=g) * 4).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, generator=g) * 4).to(torch.float8_e4m3fn)
    sa = torch.rand(M, 1, generator=g) + 0.5
    sb = torch.rand(1, N, generator=g) + 0.5
    bias = torch.randn(N, generator=g).to(torch.bfloat16)
    return a, w.t(), sa, sb, bias


@pytest.mark.parametrize("profile", ["ada", "ada-te", "ada-ws0"])
def test_guide_style_calls_on_ada_profiles(profile):
    a, b, sa, sb, bias = _operands()
    with pytest.warns(mmaemu.UnverifiedSplitWarning, match="stream-K kernel splits the K of 12"):
        y = mmaemu.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                             use_fast_accum=True, profile=profile)
    assert y.dtype == torch.bfloat16 and y.shape == (200, 384)
    plan = mmaemu.explain(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                          use_fast_accum=True, profile=profile)
    assert plan.validation == "ok" and plan.epilogue == "rowwise"
    assert plan.split.scheme == "streamk" and plan.split.S == 2 and plan.split.verified is False
    assert "GemmWithEpilogueVisitorStreamk" in plan.kernel and "inferred" in plan.kernel
    assert any(w.startswith("UnverifiedSplitWarning") for w in plan.warnings)
    # the same bits as the model's composition from the segments (checked exactly above):
    # here the profiles agree with each other (same GPU, same kernel, cuBLAS plays no part)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
        ref = mmaemu.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                               use_fast_accum=True, profile="ada")
    assert_bitwise_equal(y, ref)


def test_data_parallel_shape_warns_nothing():
    a, b, sa, sb, _ = _operands(M=768, N=256, K=512)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mmaemu.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, profile="ada")
    plan = mmaemu.explain(a, b, sa, sb, out_dtype=torch.bfloat16, profile="ada")
    assert plan.split.S == 1 and plan.warnings == [] and "data-parallel" in plan.split.note


def test_ada_splitk_argument():
    a, b, sa, sb, _ = _operands()
    with pytest.warns(mmaemu.UnverifiedSplitWarning):
        mmaemu.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, profile="ada", splitk=1)
    with pytest.raises(ValueError, match="stream-K rule alone"):
        mmaemu.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, profile="ada",
                         splitk=(2, "serial"))


def test_emulate_runs_ada_rowwise():
    a, b, sa, sb, bias = _operands(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
        want = mmaemu.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                                use_fast_accum=True, profile="ada")
        with mmaemu.emulate(profile="ada"):
            got = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                                   use_fast_accum=True)
    assert_bitwise_equal(got, want)


def test_ada_rowwise_under_compile_matches_eager():
    a, b, sa, sb, bias = _operands(M=130, N=256, K=1024, seed=5)

    def f(a, b, sa, sb, bias):
        return mmaemu.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                                profile="ada")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
        want = f(a, b, sa, sb, bias)
        got = torch.compile(f, backend="aot_eager", fullgraph=True)(a, b, sa, sb, bias)
    assert_bitwise_equal(got, want)


def test_tiles_op_refuses_bad_plans():
    a, b, sa, sb, _ = _operands(M=64, N=128, K=128)
    op = torch.ops.mmaemu.scaled_mm_tiles
    with pytest.raises(RuntimeError, match="mmaemu"):
        op(a, b, sa, sb, None, False, "ada", [0, 1], [0, 3], 64, 128, 64)   # past K
    with pytest.raises(RuntimeError, match="mmaemu"):
        op(a, b, sa, sb, None, False, "ada", [0, 1, 2], [0, 2, 0, 2], 64, 128, 64)  # 2 tiles
    with pytest.raises(RuntimeError, match="mmaemu"):
        op(a, b, sa, sb, None, False, "ada", [0, 1], [0, 2], 64, 128, 40)   # not whole blocks
    y = op(a, b, sa, sb, None, False, "ada", [0, 2], [0, 1, 1, 2], 64, 128, 64)
    assert y.shape == (64, 128)


@pytest.mark.parametrize("M, N, K, sms", [(448, 896, 512, 24), (130, 384, 992, 24),
                                          (300, 640, 2048, 58), (128, 256, 4096, 142)])
@pytest.mark.parametrize("fast", [False, True])
def test_cpu_backend_equals_reference(M, N, K, sms, fast, monkeypatch):
    """The cpu backend's composition (one wide call per run of equal tiles) against the scalar
    reference, on decompositions of several SM counts (the profile's count replaced); 448x896x512
    on 24 SMs mixes data-parallel tiles with stream-K tiles of 8 different segment lists."""
    from dataclasses import replace
    profiles = sys.modules["mmaemu.planning.profiles"]
    profiles.profiles()
    monkeypatch.setitem(profiles._PROFILES, "ada", replace(mmaemu.get_profile("ada"), sm_count=sms))
    a, b, sa, sb, bias = _operands(M, N, K, seed=M + sms)
    sa[0, 0] = float("inf")                       # NaN and Inf rows through the fold
    a[1, 5] = torch.tensor(float("nan")).to(torch.float8_e4m3fn)
    outs = []
    for backend in BACKENDS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
            outs.append(mmaemu.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                                         use_fast_accum=fast, profile="ada", backend=backend))
    assert_bitwise_equal(outs[0], outs[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_run_on_host_copies():
    a, b, sa, sb, bias = _operands(M=130, N=256, K=1024, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = mmaemu.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16, profile="ada")
        got = mmaemu.scaled_mm(a.cuda(), b.cuda(), sa.cuda(), sb.cuda(), bias=bias.cuda(),
                               out_dtype=torch.bfloat16, profile="ada")
    assert got.is_cuda
    assert_bitwise_equal(got.cpu(), want)
