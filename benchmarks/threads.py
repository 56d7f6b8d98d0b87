"""How the cpu executor scales with threads: one large GEMM at 1, 2, 4, ... threads, the thread
counts alternating round by round in one process (so they are compared within seconds).

    python benchmarks/threads.py                                   # 1, 2 and every power of 2 up to the cores
    python benchmarks/threads.py --threads 1,2,4,8,16 --shape 4096x5760x1920 --rounds 3
"""
import argparse
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import torch  # noqa: E402

import mmaemu  # noqa: E402


def main():
    cores = os.cpu_count() or 1
    default = sorted({1, 2, *(1 << i for i in range(cores.bit_length()) if 1 << i <= cores)})
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default=",".join(map(str, default)))
    ap.add_argument("--shape", default="2048x5760x1920", help="MxNxK")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    M, N, K = (int(v) for v in args.shape.split("x"))
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(M, K, generator=g) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, generator=g) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)

    def call():
        return mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16,
                                use_fast_accum=True, splitk=1)
    call()
    best = {t: float("inf") for t in counts}
    before = torch.get_num_threads()
    try:
        for _ in range(args.rounds):
            for t in counts:
                torch.set_num_threads(t)
                t0 = time.perf_counter()
                call()
                best[t] = min(best[t], time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    plan = mmaemu.explain(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True,
                          splitk=1)
    print(f"{M} x {N} x {K}, hopper fast, executor {plan.backend}, {cores} cores, best of "
          f"{args.rounds} rounds\n")
    print("| threads | seconds | GMAC/s | speed-up over 1 thread |")
    print("|---|---|---|---|")
    for t in counts:
        print(f"| {t} | {best[t]:.3f} | {M * N * K / best[t] * 1e-9:.1f} | "
              f"{best[counts[0]] / best[t]:.2f} |")


if __name__ == "__main__":
    main()
