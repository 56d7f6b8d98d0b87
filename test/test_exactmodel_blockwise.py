"""The exact model's block-wise scaled GEMMs (DeepGEMM 1d2d, CUTLASS block-wise) and torch's grouped
row-wise GEMM (mmaemu_tools/exactmodel.py): hand-checkable cases, and their agreement with the
model's existing chains, promotion and epilogues (docs/semantics.md 8d, 8e)."""
import random
import struct

import pytest

from mmaemu_tools import exactmodel as em

ONE = 0x3F800000                 # 1.0
ONE_ULP = 0x3F800001             # 1 + 2^-23
NEG_ONE_ULP = 0xBF800001         # -(1 + 2^-23)
E4M3_ONE = 0x38                  # 1.0
E4M3_TINY = 0x01                 # 2^-9 (smallest subnormal)
E4M3_SIXTEENTH = 0x18            # 0.0625 = 2^-4


def f32(x):
    """fp32 bits of an exactly representable Python float."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def group_one_plus(K=128):
    """Row pair whose 128-k chain is exactly 1 + 2^-13 (14 significant bits): 1*1 + 2^-9 * 2^-4."""
    a, b = [0] * K, [0] * K
    a[0], b[0] = E4M3_ONE, E4M3_ONE
    a[1], b[1] = E4M3_TINY, E4M3_SIXTEENTH
    return a, b


def test_group_chain_is_one_plus_2_to_minus_13():
    a, b = group_one_plus()
    assert em.chain(a, b, "e4m3", "e4m3", 0, 128, 0, "hopper") == f32(1 + 2 ** -13)


def test_one_group_is_the_chain_times_the_scale_product():
    rng = random.Random(1)
    for _ in range(20):
        a = [rng.randrange(0, 0x7F) for _ in range(128)]
        b = [rng.randrange(0, 0x7F) for _ in range(128)]
        sa, sb = rng.randrange(0x3E000000, 0x40800000), rng.randrange(0x3E000000, 0x40800000)
        p = em.chain(a, b, "e4m3", "e4m3", 0, 128, 0, "hopper")
        want = em.convert_output(em.f32_mul(em.f32_mul(sa, sb), p), "bf16")
        assert em.deepgemm_1d2d([a], [b], [[sa]], [[sb]]) == [[want]]
        # fmaf(s, p, +0) rounds like fp32(s * p) (bar the sign of an exact zero)
        assert em.blockwise_accumulator(a, b, [sa], [sb], update="mul_add") == \
            em.blockwise_accumulator(a, b, [sa], [sb], update="ffma")


def test_unit_scales_give_the_promoted_accumulator():
    """With every scale 1.0, fmaf(1, p, acc) is the RN add of the 128-k promotion (section 6)."""
    rng = random.Random(2)
    for K in (128, 256, 384, 200):
        a = [rng.randrange(0, 0x7F) | rng.choice((0, 0x80)) for _ in range(K)]
        b = [rng.randrange(0, 0x7F) for _ in range(K)]
        G = -(-K // 128)
        acc = em.blockwise_accumulator(a, b, [ONE] * G, [ONE] * G)
        assert acc == em.split_accumulator(a, b, "e4m3", "e4m3", 0, K, False, "hopper")


def test_ffma_and_mul_add_differ_on_a_constructed_input():
    """Group 0 leaves acc = -(1 + 2^-13 + 2^-23); group 1 adds (1 + 2^-23)(1 + 2^-13), whose last
    bit 2^-36 survives only the fused update."""
    a0, b0 = group_one_plus()
    a = a0 + a0
    b = b0 + b0
    sa = [NEG_ONE_ULP, ONE_ULP]
    sb = [ONE, ONE]
    fused = em.blockwise_accumulator(a, b, sa, sb, update="ffma")
    split = em.blockwise_accumulator(a, b, sa, sb, update="mul_add")
    assert fused == f32(2.0 ** -36)
    assert split == 0
    # the bf16 outputs differ too
    scale_a, scale_b = [sa], [[ONE, ONE]]
    assert em.deepgemm_1d2d([a], [b], scale_a, scale_b) == [[0x2D80]]
    assert em.deepgemm_1d2d([a], [b], scale_a, scale_b, update="mul_add") == [[0x0000]]


def test_per_element_order_differs_from_scales_first():
    """fmaf(fp32(p*sa), sb, acc) against fmaf(fp32(sa*sb), p, acc), p = 1 + 2^-13, sa = sb = 1 + 2^-23:
    the exact residues after cancelling group 0 are 2^-36 + 2^-46 and 2^-35."""
    cancel = f32(-(1 + 2 ** -13 + 2 ** -22))
    p = f32(1 + 2 ** -13)
    per_elem = em.blockwise_update(cancel, p, ONE_ULP, ONE_ULP, "per_elem")
    first = em.blockwise_update(cancel, p, ONE_ULP, ONE_ULP, "ffma")
    assert per_elem == f32(2.0 ** -36 + 2.0 ** -46)
    assert first == f32(2.0 ** -35)


def test_cutlass_scales_first_equals_deepgemm_1d2d():
    rng = random.Random(3)
    M, N, K = 3, 130, 256
    A = [[rng.randrange(0, 0x7F) | rng.choice((0, 0x80)) for _ in range(K)] for _ in range(M)]
    B = [[rng.randrange(0, 0x7F) for _ in range(K)] for _ in range(N)]
    sa = [[rng.randrange(0x3C000000, 0x42000000) for _ in range(2)] for _ in range(M)]
    sb = [[rng.randrange(0x3C000000, 0x42000000) for _ in range(2)] for _ in range(2)]
    assert em.cutlass_blockwise(A, B, sa, sb) == em.deepgemm_1d2d(A, B, sa, sb)


def test_cutlass_form_follows_the_tile():
    """Tile 128 x 256 with 1x128 / 128x128 scales has two scales per tile on each side: the
    per-element form; it differs from the scales-first form on the constructed input."""
    a0, b0 = group_one_plus()
    a, b = a0 + a0, b0 + b0
    sa = [[f32(-(1 + 2 ** -22)), ONE_ULP]]
    sb = [[ONE, ONE_ULP]]
    narrow = em.cutlass_blockwise([a], [b], sa, sb, tile_n=128)
    wide = em.cutlass_blockwise([a], [b], sa, sb, tile_n=256)
    acc_first = em.blockwise_accumulator(a, b, sa[0], sb[0], update="ffma")
    acc_elem = em.blockwise_accumulator(a, b, sa[0], sb[0], update="per_elem")
    assert narrow == [[em.convert_output(acc_first, "bf16")]]
    assert wide == [[em.convert_output(acc_elem, "bf16")]]
    assert acc_first != acc_elem


def test_k_tail_group_uses_its_own_scale():
    """K = 200: group 1 holds k 128..199 and takes scale index 1."""
    a, b = [0] * 200, [0] * 200
    a[150], b[150] = E4M3_ONE, E4M3_ONE
    got = em.deepgemm_1d2d([a], [b], [[ONE, f32(3.0)]], [[f32(5.0), ONE]])
    assert got == [[em.convert_output(f32(3.0), "bf16")]]


def test_n_uses_the_128_block_scale():
    a, b = [0] * 128, [0] * 128
    a[0], b[0] = E4M3_ONE, E4M3_ONE
    B = [b] * 130
    got = em.deepgemm_1d2d([a], B, [[ONE]], [[f32(2.0)], [f32(4.0)]])[0]
    assert got[127] == em.convert_output(f32(2.0), "bf16")
    assert got[128] == got[129] == em.convert_output(f32(4.0), "bf16")


def test_grouped_2d3d_matches_rowwise_per_group_and_leaves_the_tail_unwritten():
    rng = random.Random(4)
    K, N, G = 160, 4, 3
    offs = [2, 2, 5]                                   # group 1 is empty; row 5 is past the end
    A = [[rng.randrange(0, 0x7F) | rng.choice((0, 0x80)) for _ in range(K)] for _ in range(6)]
    B = [[[rng.randrange(0, 0x7F) for _ in range(K)] for _ in range(N)] for _ in range(G)]
    sa = [rng.randrange(0x3E000000, 0x40800000) for _ in range(6)]
    sb = [[rng.randrange(0x3E000000, 0x40800000) for _ in range(N)] for _ in range(G)]
    for fast in (False, True):
        out = em.scaled_grouped_mm_rowwise(A, B, sa, sb, offs, "2d3d", fast)
        assert out[5] == [None] * N
        for g, (r0, r1) in enumerate([(0, 2), (2, 2), (2, 5)]):
            for m in range(r0, r1):
                accs = em.accumulate([A[m]], B[g], "e4m3", "e4m3", fast)[0]
                want = [em.rowwise_epilogue(accs[n], sa[m], sb[g][n], 0, False) for n in range(N)]
                assert out[m] == want


def test_grouped_epilogue_differs_from_rowwise_only_in_the_sign_of_zero():
    # acc = +0 with a negative scale: fp32(+0 * -1) * 1 = -0; the row-wise FMA adds +0 -> +0
    assert em.grouped_rowwise_epilogue(0, 0xBF800000, ONE) == 0x8000
    assert em.rowwise_epilogue(0, 0xBF800000, ONE, 0, False) == 0x0000
    rng = random.Random(5)
    for _ in range(2000):
        acc, sa, sb = (rng.randrange(0, 1 << 32) for _ in range(3))
        g = em.grouped_rowwise_epilogue(acc, sa, sb)
        r = em.rowwise_epilogue(acc, sa, sb, 0, False)
        assert g == r or (g, r) == (0x8000, 0x0000)


def test_grouped_2d2d_splits_k_and_3d2d_splits_n():
    rng = random.Random(6)
    M, N, Kt = 2, 3, 256
    A = [[rng.randrange(0, 0x7F) for _ in range(Kt)] for _ in range(M)]
    B = [[rng.randrange(0, 0x7F) for _ in range(Kt)] for _ in range(N)]
    offs = [128, 256]
    sa = [ONE] * (2 * M)
    sb = [ONE] * (2 * N)
    out = em.scaled_grouped_mm_rowwise(A, B, sa, sb, offs, "2d2d", False)
    for g, (k0, k1) in enumerate([(0, 128), (128, 256)]):
        for m in range(M):
            for n in range(N):
                acc = em.split_accumulator(A[m], B[n], "e4m3", "e4m3", k0, k1, False, "hopper")
                assert out[g][m][n] == em.convert_output(acc, "bf16")
    with pytest.raises(ValueError):
        em.scaled_grouped_mm_rowwise(A, B, sa, sb, [128, 128], "2d2d", False)
    # 3d x 2d: group g owns columns [offs[g-1], offs[g]); columns past the end stay unwritten
    A3 = [A, A]
    out = em.scaled_grouped_mm_rowwise(A3, B, [[ONE] * M] * 2, [ONE] * N, [1, 2], "3d2d", True)
    assert all(row[2] is None for row in out)
    assert out[0][1] == em.convert_output(
        em.split_accumulator(A[0], B[1], "e4m3", "e4m3", 0, Kt, True, "hopper"), "bf16")
