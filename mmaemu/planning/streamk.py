"""The stream-K work decomposition of torch 2.7.1's row-wise FP8 kernel on sm_89 (Ada).

torch 2.7.1 runs row-wise scaled_mm on sm_89 as a CUTLASS 2.x `GemmWithEpilogueVisitorStreamk`
kernel: threadblock tile 64x128x64, `ThreadblockSwizzleStreamK` (kMixed reduction), avail_sms =
the device's SM count, no split-K factor (cited: RowwiseScaledMM.cu of torch 2.7.1 as built in
the torch-2.7.1+cu126 wheel, CUTLASS v3.8.0's threadblock_swizzle_streamk.h and
gemm_universal_streamk.h). The swizzle's host heuristics decide, from the problem's tiles, the
k-iterations per tile (ceil(K / 64)), the SM count and the kernel's occupancy, how many output
tiles are "stream-K" tiles and how their k-iterations are dealt to stream-K blocks; the other
tiles are data-parallel (one block over all of K). A stream-K tile's k-iterations are cut at
block boundaries into segments, each accumulated by one block from zero; the tile's finishing
block (turnstile) or a reduction block (separate reduction) adds the partials in ascending k as
a left fold (p0 + p1) + ... (cited: share/acquire_accumulators and EpilogueBaseStreamK::reduce).

What is inferred: the occupancy (2 blocks per SM, from the kernel's 48 KiB of shared memory on
every Ada part's 100 KiB), and everything about hardware bits: no Ada row-wise recording exists.

This module restates the host logic in Python; `decompose` is the planning function and
`StreamKPlan.segments` the per-tile k-segments the arithmetic runs over.
"""
import functools
from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

TILE_M, TILE_N, TILE_K = 64, 128, 64   # the sm_89 instance's threadblock tile (cited)
OCCUPANCY = 2                          # blocks per SM (inferred, see the module note)
MIN_ITERS_PER_SK_BLOCK = 2             # ThreadblockSwizzleStreamK::kMinItersPerSkBlock
COHORT_M, COHORT_N = 8, 4              # kCohortCtasM, kCohortCtasN
ACC_FRAGMENTS = 4                      # epilogue accumulator fragments of the 64x128 tile (separate reduction only)

_f32 = np.float32


def _cdiv(a, b):
    return (a + b - 1) // b


def _savings(sk_blocks, sk_tiles, iters_per_tile, avail_sms):
    """The heuristic's estimated savings (in iterations) of sk_blocks stream-K blocks over
    data-parallel tiles. fp32 arithmetic as CUTLASS's host code, truncated to int."""
    sk_iters = sk_tiles * iters_per_tile
    dp_equiv_iters = iters_per_tile * _cdiv(sk_tiles, avail_sms)
    waves = _cdiv(sk_blocks, avail_sms)
    sk_iter_equiv = _cdiv(sk_iters, sk_blocks) * waves
    if sk_blocks % sk_tiles == 0:          # aligned: every tile split into equal shares
        peers, iter_cost = sk_blocks // sk_tiles, _f32(0.0)
    else:                                  # one more peer for the alignment skew
        peers = _cdiv(sk_blocks, sk_tiles) + 1
        iter_cost = _f32(_f32(0.02) * _f32(peers)) * _f32(sk_iter_equiv)
    fixup = int((_f32(2.0) * _f32(waves) + iter_cost) + _f32(2.0) * _f32(peers))
    return dp_equiv_iters - sk_iter_equiv - fixup


def _best_sk_blocks(sk_tiles, iters_per_tile, avail_sms, max_occupancy, partial_wave_ok):
    """(sk_blocks, savings): the block count with the largest savings, the last of equals
    (CUTLASS's get_sk_blocks); (0, None) for no tiles, and savings None when no count is tried."""
    if sk_tiles == 0:
        return 0, None
    lo = min(avail_sms, sk_tiles + 1) if partial_wave_ok else avail_sms
    hi = min(avail_sms * max_occupancy, sk_tiles * iters_per_tile // MIN_ITERS_PER_SK_BLOCK)
    best, best_savings = 0, None
    for blocks in range(lo, hi + 1):
        s = _savings(blocks, sk_tiles, iters_per_tile, avail_sms)
        if best_savings is None or s >= best_savings:
            best, best_savings = blocks, s
    return best, best_savings


def _profitable(savings):
    return savings is not None and savings >= 0


def _dp_tiles_and_sk_blocks(tiles, iters_per_tile, avail_sms, occupancy):
    """CUTLASS's get_blocks: how many tiles stay data-parallel, how many stream-K blocks."""
    full_waves, partial = divmod(tiles, avail_sms)
    full_wave_tiles = full_waves * avail_sms
    if partial == 0:                       # perfect quantisation
        return tiles, 0
    if full_waves < occupancy:             # below full occupancy: the partial wave goes SK
        blocks, s = _best_sk_blocks(partial, iters_per_tile, avail_sms, occupancy - full_waves, True)
        return (full_wave_tiles, blocks) if _profitable(s) else (tiles, 0)
    if occupancy > 1 and full_waves % occupancy == occupancy - 1:
        blocks, s = _best_sk_blocks(partial, iters_per_tile, avail_sms, 1, True)
        if _profitable(s):
            return full_wave_tiles, blocks
    # the last full wave and the partial wave together
    blocks, s = _best_sk_blocks(partial + avail_sms, iters_per_tile, avail_sms,
                                occupancy - (full_waves - 1) % occupancy, False)
    return (full_wave_tiles - avail_sms, blocks) if _profitable(s) else (tiles, 0)


@dataclass(frozen=True)
class StreamKPlan:
    """The decomposition of one (M, N, K) on `sm_count` SMs. Iterations are 64-k steps."""
    M: int
    N: int
    K: int
    sm_count: int
    occupancy: int
    tiles_m: int
    tiles_n: int
    iters_per_tile: int
    sk_tiles: int              # tile indices [0, sk_tiles) are stream-K tiles
    sk_blocks: int
    sk_regions: int
    sk_blocks_per_region: int
    sk_iters_per_normal_block: int
    sk_big_blocks_per_region: int
    reduction_blocks: int      # > 0: a separate reduction wave (same left fold, same bits)
    cohort_raster: bool

    @property
    def tiles(self):
        return self.tiles_m * self.tiles_n

    def block_extent(self, block) -> Tuple[int, int]:
        """[begin, end) of stream-K block `block` in the stream-K iteration space."""
        region, b = divmod(block, self.sk_blocks_per_region)
        iters_per_region = self.sk_tiles * self.iters_per_tile // self.sk_regions
        begin = region * iters_per_region + b * self.sk_iters_per_normal_block
        big = b < self.sk_big_blocks_per_region
        begin += b if big else self.sk_big_blocks_per_region
        return begin, begin + self.sk_iters_per_normal_block + (1 if big else 0)

    def tile_coord(self, t) -> Tuple[int, int]:
        """(tile row, tile column) of tile index t (CUTLASS's get_tile_offset)."""
        if self.cohort_raster:
            cohorts_n = _cdiv(self.tiles_n, COHORT_N)
            cohort, within = divmod(t, COHORT_M * COHORT_N)
            cm, cn = divmod(cohort, cohorts_n)
            bm, bn = divmod(within, COHORT_N)
            return cm * COHORT_M + bm, cn * COHORT_N + bn
        if self.tiles_m < self.tiles_n:    # column-major raster
            n, m = divmod(t, self.tiles_m)
            return m, n
        return divmod(t, self.tiles_n)

    def tile_segments(self, t) -> List[Tuple[int, int]]:
        """The k-iteration segments [s, e) of tile index t (relative to the tile), ascending."""
        ipt = self.iters_per_tile
        if t >= self.sk_tiles:
            return [(0, ipt)]
        lo, hi = t * ipt, (t + 1) * ipt
        segs = []
        for block in range(self.sk_regions * self.sk_blocks_per_region):
            b0, b1 = self.block_extent(block)
            if b0 < hi and b1 > lo:
                segs.append((max(b0, lo) - lo, min(b1, hi) - lo))
        return segs

    def segments(self) -> Dict[Tuple[int, int], List[Tuple[int, int]]]:
        """{(tile row, tile column): segments} for every stream-K tile (others: one segment)."""
        return {self.tile_coord(t): self.tile_segments(t) for t in range(self.sk_tiles)}

    def describe(self):
        if self.sk_tiles == 0:
            return (f"stream-K: all {self.tiles} tiles of 64x128 data-parallel ({self.iters_per_tile} "
                    f"k-iterations of 64 each, {self.sm_count} SMs x occupancy {self.occupancy})")
        segs = self.segments()
        most = max(len(s) for s in segs.values())
        red = "separate reduction blocks" if self.reduction_blocks else "turnstile fix-up"
        per = self.sk_iters_per_normal_block
        per = f"{per} or {per + 1}" if self.sk_big_blocks_per_region else f"{per}"
        return (f"stream-K: {self.sk_tiles} of {self.tiles} tiles of 64x128 split over "
                f"{self.sk_blocks} stream-K blocks ({per} k-iterations of 64 each; up to {most} "
                f"k-segments per tile, added in ascending k by {red}), "
                f"{self.tiles - self.sk_tiles} tiles data-parallel; {self.sm_count} SMs x "
                f"occupancy {self.occupancy}")


def decompose(M, N, K, sm_count, occupancy=OCCUPANCY) -> StreamKPlan:
    """The stream-K plan of an (M, N, K) GEMM on a GPU with sm_count SMs (kGemm mode, split 1)."""
    tiles_m, tiles_n, ipt = _cdiv(M, TILE_M), _cdiv(N, TILE_N), _cdiv(K, TILE_K)
    tiles = tiles_m * tiles_n
    avail = max(1, sm_count)
    dp_tiles, sk_blocks = (tiles, 0) if avail <= 1 else \
        _dp_tiles_and_sk_blocks(tiles, ipt, avail, occupancy)
    sk_tiles = tiles - dp_tiles
    regions, per_region, normal, big_per_region, reduction, sk_waves = 1, 0, 0, 0, 0, 0
    if sk_blocks > 0:
        sk_waves = _cdiv(sk_blocks, avail)
        sk_iters = sk_tiles * ipt
        sk_blocks = min(sk_blocks, sk_iters)
        normal = sk_iters // sk_blocks
        if sk_blocks > sk_tiles and sk_blocks % sk_tiles == 0:
            regions = sk_tiles             # split-K-like: each tile its own region
        per_region = sk_blocks // regions
        big_per_region = (sk_iters - normal * sk_blocks) // regions
        if sk_waves < occupancy and sk_blocks > 2 * sk_tiles:
            reduction = sk_tiles * ACC_FRAGMENTS
    # Cohort rasterisation changes which tile coordinates the stream-K tile indices name.
    cohorts = _cdiv(tiles_m, COHORT_M) * _cdiv(tiles_n, COHORT_N)
    cohort_blocks = cohorts * COHORT_M * COHORT_N
    in_range = True
    if sk_tiles > 0:
        last = (sk_tiles - 1) // (COHORT_M * COHORT_N)
        cohorts_n = _cdiv(tiles_n, COHORT_N)
        cm = last // cohorts_n
        cn = cohorts_n - 1 if cm > 0 else last % cohorts_n
        in_range = (cm + 1) * COHORT_M < tiles_m and (cn + 1) * COHORT_N < tiles_n
    cohort = (in_range and dp_tiles >= sm_count * occupancy * 2
              and _f32(dp_tiles) / _f32(cohort_blocks) > _f32(0.85))
    return StreamKPlan(M, N, K, sm_count, occupancy, tiles_m, tiles_n, ipt, sk_tiles, sk_blocks,
                       regions, per_region, normal, big_per_region, reduction, bool(cohort))


def tile_plan_lists(plan: StreamKPlan):
    """The plan as the op's two lists: offsets [tiles + 1] into bounds (flat [s0, e0, s1, e1,
    ...]), tiles in row-major tile-coordinate order (tile row * tiles_n + tile column)."""
    sk = plan.segments()
    offsets, bounds = [0], []
    for m in range(plan.tiles_m):
        for n in range(plan.tiles_n):
            for s, e in sk.get((m, n), [(0, plan.iters_per_tile)]):
                bounds += (s, e)
            offsets.append(len(bounds) // 2)
    return offsets, bounds


@functools.lru_cache(maxsize=256)
def tile_plan(M, N, K, sm_count):
    """The op's lists for one shape, cached: the plan is a pure function of the sizes and the
    SM count, and a model calls the same shapes again and again."""
    offsets, bounds = tile_plan_lists(decompose(M, N, K, sm_count))
    return tuple(offsets), tuple(bounds)
