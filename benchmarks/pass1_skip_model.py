"""How often could the FMA form skip pass 1 (the block's largest product exponent)?

A model, not a timing: it counts, on the benchmark's operands (benchmarks/cpu.py: randn x 40,
clamped, E4M3), how often the block maximum E = max(products' exponents, C's exponent) is C's
exponent alone, and how often a cheap bound proves it for a whole byte vector of pass 1 (one row,
32 columns) or a whole group (3 rows x 32 columns), the units the AVX2 kernel's pass 1 and FMA
loop work in. The bound over sub-blocks of q k: max over them of (the row's largest exponent in
the sub-block + the column's). C entering block j is the hopper chain's result over the first
32 j k, computed by mmaemu itself (profile hopper-experimental: one chain over K, fp32 out).
A product's exponent is e_a + e_b, an operand's exponent floor(log2 |x|), subnormals at E4M3's
-6 (the alignment exponent); zero products never raise E.

    python benchmarks/pass1_skip_model.py              # 48 x 256 x 2048, seed 0
    python benchmarks/pass1_skip_model.py --k 512 --seed 1
"""
import argparse
import os
import sys
import warnings

# this directory's cuda.py would shadow the `cuda` package torch imports (as in cpu.py)
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [os.path.dirname(_HERE)]

import torch  # noqa: E402

import mmaemu  # noqa: E402

BLOCK, VECTOR, GROUP_ROWS = 32, 32, 3
NONE = -(1 << 20)  # the exponent of zero: below every real one


def exponents(x, lowest):
    """Alignment exponents of fp32 values, floor(log2 |x|) raised to lowest (E4M3's -6, fp32's
    -126 for C), NONE for zeros."""
    e = torch.floor(torch.log2(x.abs())).clamp(min=lowest).to(torch.int64)
    return torch.where(x == 0, torch.full_like(e, NONE), e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=48)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    M, N, K = args.m, args.n, args.k
    assert M % GROUP_ROWS == 0 and N % VECTOR == 0 and K % BLOCK == 0
    g = torch.Generator().manual_seed(args.seed)
    x = (torch.randn(M, K, generator=g) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, generator=g) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    ea, eb = exponents(x.float(), -6), exponents(w.float(), -6).t()  # [M, K], [K, N]
    one = torch.tensor(1.0)
    warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)  # the one-chain profile
    subs = (32, 16, 8, 4, 2, 1)
    lanes_c = 0
    lanes_total = 0
    proved = {q: [0, 0, 0] for q in subs}  # lanes, row vectors, groups
    for j in range(1, K // BLOCK):  # block 0 has C = 0
        k0 = BLOCK * j
        c = mmaemu.scaled_mm(x[:, :k0], w[:, :k0].t(), one, one, out_dtype=torch.float32,
                             use_fast_accum=True, profile="hopper-experimental", backend="cpu")
        ec = exponents(c, -126)
        ks = slice(k0, k0 + BLOCK)
        p = (ea[:, ks, None] + eb[None, ks, :]).amax(1)  # the products' largest exponent
        lanes_c += int((ec >= p).sum())
        lanes_total += M * N
        for q in subs:
            bound = torch.full((M, N), NONE, dtype=torch.int64)
            for s in range(k0, k0 + BLOCK, q):
                amax = ea[:, s:s + q].amax(1)[:, None]
                bmax = eb[s:s + q, :].amax(0)[None, :]
                bound = torch.maximum(bound, amax + bmax)
            ok = ec >= bound
            proved[q][0] += int(ok.sum())
            proved[q][1] += int(ok.reshape(M, N // VECTOR, VECTOR).all(2).sum()) * VECTOR
            proved[q][2] += int(ok.reshape(M // GROUP_ROWS, GROUP_ROWS, N // VECTOR, VECTOR).all(3).all(1).sum()) \
                * VECTOR * GROUP_ROWS
    print(f"{M} x {N} x {K}, hopper, blocks 1 to {K // BLOCK - 1}, seed {args.seed}")
    print(f"outputs whose E is C's exponent (pass 1 not needed for them): {lanes_c / lanes_total:.3f}")
    print("proved by the bound over sub-blocks of q k (share of outputs):")
    print("   q   per output   whole row vector (32 columns)   whole group (3 x 32)")
    for q in subs:
        lane, row, group = (v / lanes_total for v in proved[q])
        print(f"{q:4d}   {lane:10.3f}   {row:29.3f}   {group:20.4f}")


if __name__ == "__main__":
    main()
