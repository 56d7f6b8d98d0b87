"""Throughput of the `cpu` backend against torch's own CPU `torch._scaled_mm`, fp32 torch.matmul
and `reference`, in MAC/s.

All of them run in the same process on the same tensors (E4M3 operands of the user guide's
section 3 kind; fp32 matmul on their float32 copies; torch._scaled_mm with the same FP8
operands, scales 1, bf16 output and the mode's use_fast_accum), timed in turn within each of
the rows' rounds, so the ratios in a row hold for this machine as it was loaded during that row. torch._scaled_mm on the CPU dequantises
and runs an fp32 GEMM: not the bits of any GPU, but what users have on a CPU. The reference
backend is measured on a sub-block of the operands (its cost per MAC does not depend on M or
N) and scaled; the table says so. So is torch._scaled_mm where one call on the whole shape would
take longer than --tsm-budget seconds (torch builds whose CPU _scaled_mm runs oneDNN's reference
kernel for FP8 operands, measured at about 0.03 GMAC/s on an Intel Xeon with AMX): its cell
then names the sub-block it was timed on.

    python benchmarks/cpu.py                      # decode (M = 1..64) to M = 4096, 2048^3
    python benchmarks/cpu.py --threads 1          # one thread for everything timed
    python benchmarks/cpu.py --quick              # small shapes, one mode each: a smoke run
    MMAEMU_CPU_SIMD=avx2 python benchmarks/cpu.py --shapes 512x5760x1920
    python benchmarks/cpu.py --data-scale 1       # unscaled randn: subnormal codes among them
"""
import argparse
import os
import sys
import time

# Run as a script, this directory heads sys.path and its cuda.py would shadow the `cuda` package
# (cuda.bindings) that torch imports: drop that entry, add the repository root.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import torch  # noqa: E402

import mmaemu  # noqa: E402
from mmaemu import _C  # noqa: E402

# The cpu executor timed: MMAEMU_CPU_SIMD's SIMD kernel, else the fastest one measured here.
_SIMD = os.environ.get("MMAEMU_CPU_SIMD", "auto")
_RATES = _C.cpu_simd_measure()
CPU = "cpu:" + (_SIMD if _SIMD != "auto" else max(_RATES, key=_RATES.get))

# Evo-2-like projections (N = 5760, K = 1920) from decode (M = 1) to prefill (M = 4096), and 2048^3.
SHAPES = [f"{m}x5760x1920" for m in (1, 4, 16, 64, 512, 4096)] + ["2048x2048x2048"]
QUICK_SHAPES = ["1x256x512", "16x256x512", "64x512x512"]
# (label, preset, use_fast_accum): hopper fast is the guide's Evo 2 setting (TE, bf16 out).
MODES = [("hopper fast", "hopper", True), ("hopper non-fast", "hopper", False),
         ("ada fast", "ada", True), ("b200 fast", "b200", True)]


def best_time(fn, repeat):
    return best_times([fn], repeat)[0]


def best_times(fns, repeat):
    """The best of `repeat` runs of each function, the functions taken in turn in every round, so
    that a change in the machine's load between minutes moves all of them alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return best


def scaled_mm(x, w, preset, fast, backend, rowwise=False, bias=False):
    """bf16 output, scales 1: tensor-wise, or row-wise vectors (the not-transposed instance);
    with bias=True a bf16 bias of ones in the epilogue."""
    one = torch.tensor(1.0)
    sa, sb = (torch.ones(x.shape[0], 1), torch.ones(1, w.shape[0])) if rowwise else (one, one)
    b = torch.ones(w.shape[0], dtype=torch.bfloat16) if bias else None
    return torch.ops.mmaemu.scaled_mm(x, w.t(), sa, sb, b, None, torch.bfloat16, fast, preset,
                                      1, "none", backend, 3 if rowwise else 0)


# Epilogue variants timed with --epilogues (hopper modes, cpu backend): (label, rowwise, bias).
EPILOGUES = [("tensor-wise + bias", False, True), ("row-wise", True, False),
             ("row-wise + bias", True, True)]


def torch_scaled_mm(x, w, fast):
    one = torch.tensor(1.0)
    return torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=fast)


def tsm_sub_block(x, w, fast, budget):
    """The rows and columns to time torch._scaled_mm on: the whole shape when one call fits the
    budget (seconds), else a sub-block on which one call takes about budget / 10. One call on
    ever larger sub-blocks (rows doubled up to M, then columns from 64 up to N) until the call
    on the whole shape is predicted (time per MAC of the last call) to fit, or the call took
    budget / 10. The prediction from a small call over-estimates a fast GEMM, so it never
    sends a fast one to a sub-block. Raises RuntimeError where torch refuses the shape."""
    M, N = x.shape[0], w.shape[0]
    m, n = 1, min(N, 64)
    while True:
        t = best_time(lambda: torch_scaled_mm(x[:m], w[:n], fast), 1)
        if (m, n) == (M, N) or t * (M * N) / (m * n) <= budget:
            return M, N
        if t >= budget / 10:
            return m, n
        m, n = (min(M, 2 * m), n) if m < M else (m, min(N, 2 * n))


def operands(rows, cols, scale, generator=None):
    return (torch.randn(rows, cols, generator=generator) * scale).clamp(-448, 448).to(torch.float8_e4m3fn)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=None, help="MxNxK")
    ap.add_argument("--modes", nargs="+", default=None, help="mode labels' first words, e.g. hopper ada")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs of each timed call")
    ap.add_argument("--ref-rows", type=int, default=8, help="reference sub-block rows")
    ap.add_argument("--ref-cols", type=int, default=64, help="reference sub-block columns")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (everything timed)")
    ap.add_argument("--extra", action="store_true", help="(all four modes are the default now)")
    ap.add_argument("--epilogues", action="store_true",
                    help="also bias and row-wise epilogues (hopper modes, cpu only), with their "
                         "time relative to the tensor-wise run")
    ap.add_argument("--quick", action="store_true", help="small shapes, hopper fast only, best of 1")
    ap.add_argument("--data-scale", type=float, default=40.0,
                    help="operands are randn times this, clamped to +-448 (E4M3); 1 gives about "
                         "1.2 %% subnormal codes")
    ap.add_argument("--tsm-budget", type=float, default=5.0,
                    help="seconds one torch._scaled_mm call may take; above, it is timed on a sub-block")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = args.shapes or (QUICK_SHAPES if args.quick else SHAPES)
    modes = [m for m in MODES if not args.modes or m[0].split()[0] in args.modes]
    if args.quick and not args.modes:
        modes = MODES[:1]
    repeat = 1 if args.quick else args.repeat

    threads = torch.get_num_threads()
    print(f"CPU: {mmaemu.runtime.facts.cpu_name()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}, "
          f"{threads} threads; mmaemu cpu SIMD paths here: {_C.cpu_simd_paths()}; "
          f"MMAEMU_CPU_SIMD={_SIMD}, executor {CPU} (measured here, one thread, hopper fast: "
          f"{', '.join(f'{k} {r * 1e-9:.1f} GMAC/s' for k, r in _RATES.items())}); "
          f"{_C.cpu_a_pass()}")
    print(f"best of {repeat} for every timed call; bf16 output, scales 1; reference on a "
          f"{args.ref_rows} x {args.ref_cols} x K sub-block (single-threaded, as it always runs), "
          f"hopper modes only; torch._scaled_mm on the sub-block its cell names where one call on "
          f"the whole shape would exceed {args.tsm_budget:g} s\n")
    sample = operands(1 << 20, 1, args.data_scale, torch.Generator().manual_seed(1)).view(torch.uint8)
    subnormal = (((sample & 0x78) == 0) & ((sample & 0x7F) != 0)).float().mean().item()
    print(f"operands: randn x {args.data_scale:g}, clamped to +-448, E4M3 ({100 * subnormal:.2f} % of "
          f"their codes subnormal)\n")
    print("GMAC/s (10^9 multiply-adds per second) unless a ratio\n")
    print("| M x N x K | mode | fp32 matmul | torch._scaled_mm | mmaemu cpu | cpu / _scaled_mm | "
          "cpu / fp32 matmul | reference (sub-block) | cpu / reference |")
    print("|---|---|---|---|---|---|---|---|---|")
    torch.manual_seed(0)
    for shape in shapes:
        M, N, K = (int(v) for v in shape.lower().split("x"))
        x, w = operands(M, K, args.data_scale), operands(N, K, args.data_scale)
        xf, wf = x.float(), w.float()
        macs = M * N * K
        xf @ wf.t()  # warm-up
        xs, ws = x[: args.ref_rows], w[: args.ref_cols]
        sub_macs = xs.shape[0] * ws.shape[0] * K
        for label, preset, fast in modes:
            try:
                tm, tn = tsm_sub_block(x, w, fast, args.tsm_budget)  # also its warm-up
                xt, wt = x[:tm], w[:tn]
                has_tsm = True
            except RuntimeError:  # a shape torch's CPU _scaled_mm refuses
                has_tsm = False
            scaled_mm(x, w, preset, fast, CPU)  # warm-up
            # fp32 matmul, torch._scaled_mm and the cpu backend in turn, in each of the rounds
            timed = [lambda: xf @ wf.t(), lambda: scaled_mm(x, w, preset, fast, CPU)]
            if has_tsm:
                timed.append(lambda: torch_scaled_mm(xt, wt, fast))
            t_mm, t_cpu, *t_tsm = best_times(timed, repeat)
            gm_mm, gm_cpu = macs / t_mm / 1e9, macs / t_cpu / 1e9
            gm_tsm = tm * tn * K / t_tsm[0] / 1e9 if has_tsm else None
            if preset == "hopper":
                gm_ref = sub_macs / best_time(lambda: scaled_mm(xs, ws, preset, fast, "reference"), repeat) / 1e9
                ref_cols = f"{gm_ref:.4f} | {gm_cpu / gm_ref:.0f}x"
            else:
                ref_cols = "- | -"
            tsm, ratio = (f"{gm_tsm:.3g}", f"{gm_cpu / gm_tsm:.2f}x") if gm_tsm else ("-", "-")
            if has_tsm and (tm, tn) != (M, N):
                tsm += f" (on {tm} x {tn} x {K})"
            print(f"| {M} x {N} x {K} | {label} | {gm_mm:.3g} | {tsm} | {gm_cpu:.3g} | {ratio} | "
                  f"{gm_cpu / gm_mm:.2f} | {ref_cols} |", flush=True)
            if args.epilogues and preset == "hopper":
                for variant, rowwise, bias in EPILOGUES:
                    t_var = best_time(lambda: scaled_mm(x, w, preset, fast, CPU, rowwise, bias),
                                      repeat)
                    gm_var = macs / t_var / 1e9
                    print(f"| {M} x {N} x {K} | {label}, {variant} ({t_var / t_cpu:.3f} x the "
                          f"tensor-wise time) | {gm_mm:.3g} | - | {gm_var:.3g} | - | "
                          f"{gm_var / gm_mm:.2f} | - | - |", flush=True)


if __name__ == "__main__":
    main()
