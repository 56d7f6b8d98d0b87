"""Which CUTLASS kernel instance torch 2.7.1 runs for row-wise scaled_mm on sm_90.

torch 2.7.1 sends row-wise scales (scale_a [M, 1], scale_b [1, N], bf16 output) to
`f8f8bf16_rowwise` in aten/src/ATen/native/cuda/RowwiseScaledMM.cu: a CUTLASS 3.x kernel with
a persistent tile scheduler, no split-K and no stream-K, k-tiles of 128 in ascending order
(cited: source and SASS of the torch-2.7.1+cu126 wheel). Its host code picks a cluster shape,
a tile (64x128 or 128x128), a swizzle and whether to run the transposed problem
(out^T = W^T X^T). Of these only the transposition changes bits: the epilogue multiplies the
accumulator by the first operand's scale first, fp32(acc * s1), then fmaf(., s2, bias).

`sm90_instance` restates that host rule (cited: checked against the 2.7.1 host code on a grid
of shapes and SM counts, test/test_rowwise.py replays recorded outputs of that check).
"""
from dataclasses import dataclass


def _cdiv(a, b):
    return (a + b - 1) // b


@dataclass(frozen=True)
class RowwiseInstance:
    """One f8f8bf16_rowwise kernel instance: what runs, and the rule that chose it."""
    transposed: bool
    cluster: tuple
    tile_m: int        # 64 or 128 (the tile's M in the kernel's own problem)
    swizzle: int
    rule: str

    def describe(self):
        problem = "transposed (W^T X^T: fp32(acc*scale_b[n]) first)" if self.transposed \
            else "not transposed (fp32(acc*scale_a[m]) first)"
        return (f"CUTLASS f8f8bf16_rowwise {self.tile_m}x128x128, cluster "
                f"{self.cluster[0]}x{self.cluster[1]}, swizzle {self.swizzle}, {problem}; "
                f"rule: {self.rule}")


def sm90_instance(M, N, sm_count):
    """torch 2.7.1's choice for an (M, N) row-wise problem on an sm_90 GPU with sm_count SMs.

    M and N are rounded up to multiples of 64; the first matching rule wins."""
    m, n = _cdiv(M, 64) * 64, _cdiv(N, 64) * 64

    def pick(cluster, transposed, rule, swizzle=1):
        km, kn = (N, M) if transposed else (M, N)
        tiles = _cdiv(km, 64 * cluster[0]) * _cdiv(kn, 128 * cluster[1])
        small = tiles <= sm_count // (cluster[0] * cluster[1])
        return RowwiseInstance(transposed, cluster, 64 if small else 128, swizzle, rule)

    if m == 64 and n >= 3072:
        return pick((1, 2), False, "M == 64 and N >= 3072")
    if n == 64 and m >= 3072:
        return pick((1, 2), True, "N == 64 and M >= 3072")
    if m == 192 and n >= 4096:
        return pick((1, 2), True, "M == 192 and N >= 4096")
    if n == 192 and m >= 4096:
        return pick((1, 2), False, "N == 192 and M >= 4096")
    if m * n <= 4096 * 4096:
        if m % 256 and n % 256 == 0:
            return pick((2, 1), True, "M*N <= 4096^2, M % 256 > 0, N % 256 == 0")
        if n % 256 and m % 256 == 0:
            return pick((2, 1), False, "M*N <= 4096^2, N % 256 > 0, M % 256 == 0")
    if m % 256 and n % 256:
        t = (m <= n) != (m * n <= 1024 * 1024)
        return pick((2, 1), t, "M % 256 > 0 and N % 256 > 0: transposed iff "
                               "(M <= N) xor (M*N <= 2^20)")
    if m >= 4096 and n >= 4096:
        return pick((2, 1), m < n, "M >= 4096 and N >= 4096: transposed iff M < N", 8)
    if (m <= n) != (m >= 2048 and n >= 2048):
        return pick((1, 2), True, "(M <= N) xor (M >= 2048 and N >= 2048)")
    return pick((2, 1), True, "otherwise")
