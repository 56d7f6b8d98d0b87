"""Block-wise and grouped GEMMs on the cpu executor against tensor-wise scales, in time ratios
measured in one run.

Every variant runs on the same E4M3 operands, in turn within each round (so a round's ratios are
seconds apart on one loaded machine); a variant's time is the median over rounds of its best of
`--repeat` calls. Variants: tensor-wise (hopper preset, non-fast: the same 128-k promotion as the
block-wise kernels; and fast), block-wise DeepGEMM 1d2d (1 x 128 activations, 128 x 128 weight
blocks), CUTLASS's per-element form (1 x 128 on both sides), and the grouped GEMM (the rows split
into --groups groups of one weight each, 2d x 3d, non-fast).

    python benchmarks/blockwise.py                          # 512 x 5760 x 1920, 12 rounds
    python benchmarks/blockwise.py --shape 64x5760x1920 --rounds 6
"""
import argparse
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import torch  # noqa: E402

import mmaemu  # noqa: E402


def best(fn, repeat):
    t = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def variants(M, N, K, groups):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(M, K, generator=g) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, generator=g) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    L = -(-K // 128)
    one = torch.tensor(1.0)
    sa = torch.rand(M, L, generator=g) + 0.5
    sw = torch.rand(-(-N // 128), L, generator=g) + 0.5
    sb_cols = torch.rand(L, N, generator=g) + 0.5
    w3 = w.view(1, N, K).expand(groups, N, K).contiguous().transpose(-2, -1)
    offs = torch.tensor([M * (i + 1) // groups for i in range(groups)], dtype=torch.int32)

    def tensorwise(fast):
        return lambda: mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16,
                                        use_fast_accum=fast, splitk=1)
    return {
        "tensor-wise, non-fast": tensorwise(False),
        "tensor-wise, fast": tensorwise(True),
        "block-wise deepgemm (1x128, 128x128)": lambda: mmaemu.scaled_mm(
            x, w.t(), sa, sw.t(), out_dtype=torch.bfloat16, blockwise="deepgemm"),
        "block-wise cutlass (1x128, 1x128)": lambda: mmaemu.scaled_mm(
            x, w.t(), sa, sb_cols, out_dtype=torch.bfloat16, blockwise="cutlass"),
        f"grouped 2d x 3d, {groups} groups, non-fast": lambda: mmaemu.scaled_grouped_mm(
            x, w3, sa[:, 0].contiguous(), torch.ones(groups, N), offs),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="512x5760x1920", help="MxNxK")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=2, help="best of this many calls per round")
    ap.add_argument("--groups", type=int, default=8)
    args = ap.parse_args()
    M, N, K = (int(v) for v in args.shape.split("x"))
    fns = variants(M, N, K, args.groups)
    for fn in fns.values():   # warm-up: first-call measurement, caches
        fn()
    times = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            times[name].append(best(fn, args.repeat))
    base = statistics.median(times["tensor-wise, non-fast"])
    plan = mmaemu.explain(*(torch.zeros(M, K, dtype=torch.float8_e4m3fn),
                            torch.zeros(N, K, dtype=torch.float8_e4m3fn).t(),
                            torch.tensor(1.0), torch.tensor(1.0)),
                          out_dtype=torch.bfloat16, splitk=1)
    print(f"{M} x {N} x {K}, executor {plan.backend}, {torch.get_num_threads()} threads, "
          f"{args.rounds} rounds\n")
    print("| variant | median time (ms) | / tensor-wise non-fast | GMAC/s |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"| {name} | {t * 1e3:.1f} | {t / base:.2f} | {M * N * K / t * 1e-9:.1f} |")


if __name__ == "__main__":
    main()
