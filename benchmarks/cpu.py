"""Throughput of the `cpu` backend against `reference` and fp32 torch.matmul, in MAC/s.

All three run in the same process on the same tensors (E4M3 operands of the user guide's
section 3 kind; fp32 matmul on their float32 copies), so the ratios hold for this machine as
it was loaded during the run. The reference backend is measured on a sub-block of the
operands (its cost per MAC does not depend on M or N) and scaled; the table says so.

    python benchmarks/cpu.py                      # the Evo-2-like shapes and 2048^3
    python benchmarks/cpu.py --shapes 512x5760x1920 --repeat 3
    MMAEMU_CPU_SIMD=portable python benchmarks/cpu.py --threads 1
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

SHAPES = ["64x5760x1920", "512x5760x1920", "2048x2048x2048"]
# (label, preset, use_fast_accum): hopper fast is the guide's Evo 2 setting (TE, bf16 out).
MODES = [("hopper fast", "hopper", True), ("hopper non-fast", "hopper", False)]
EXTRA_MODES = [("ada fast", "ada", True), ("b200 fast", "b200", True)]


def best_time(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=SHAPES, help="MxNxK")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs (cpu, matmul)")
    ap.add_argument("--ref-rows", type=int, default=8, help="reference sub-block rows")
    ap.add_argument("--ref-cols", type=int, default=64, help="reference sub-block columns")
    ap.add_argument("--extra", action="store_true", help="also ada fast and b200 fast (cpu only)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (cpu and matmul)")
    ap.add_argument("--epilogues", action="store_true",
                    help="also bias and row-wise epilogues (hopper modes, cpu only), with their "
                         "time relative to the tensor-wise run")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    threads = torch.get_num_threads()
    print(f"CPU: {mmaemu.backends.cpu_name()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}, "
          f"{threads} threads; mmaemu cpu SIMD paths here: {_C.cpu_simd_paths()} "
          f"(MMAEMU_CPU_SIMD={os.environ.get('MMAEMU_CPU_SIMD', 'auto')})")
    print(f"reference: measured on a {args.ref_rows} x {args.ref_cols} x K sub-block of the same "
          f"operands (best of {args.repeat}), single-threaded as it always runs; its MAC/s stands for the "
          f"whole shape (its cost per MAC does not depend on M or N)")
    print(f"cpu and fp32 matmul: best of {args.repeat} (matmul: of {max(args.repeat, 3)}) "
          f"on the whole shape; bf16 output, scales 1\n")
    print("| M x N x K | mode | fp32 matmul GMAC/s | cpu GMAC/s | cpu / fp32 matmul | "
          "reference GMAC/s (sub-block) | cpu / reference |")
    print("|---|---|---|---|---|---|---|")
    torch.manual_seed(0)
    for shape in args.shapes:
        M, N, K = (int(v) for v in shape.lower().split("x"))
        x = (torch.randn(M, K) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
        w = (torch.randn(N, K) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
        xf, wf = x.float(), w.float()
        macs = M * N * K
        xf @ wf.t()  # warm-up
        t_mm = best_time(lambda: xf @ wf.t(), max(args.repeat, 3))
        gm_mm = macs / t_mm / 1e9
        xs, ws = x[: args.ref_rows], w[: args.ref_cols]
        sub_macs = xs.shape[0] * ws.shape[0] * K
        modes = MODES + (EXTRA_MODES if args.extra else [])
        for label, preset, fast in modes:
            t_cpu = best_time(lambda: scaled_mm(x, w, preset, fast, "cpu"), args.repeat)
            gm_cpu = macs / t_cpu / 1e9
            if (label, preset, fast) in MODES:
                t_ref = best_time(lambda: scaled_mm(xs, ws, preset, fast, "reference"), args.repeat)
                gm_ref = sub_macs / t_ref / 1e9
                ref_cols = f"{gm_ref:.4f} | {gm_cpu / gm_ref:.0f}x"
            else:
                ref_cols = "- | -"
            print(f"| {M} x {N} x {K} | {label} | {gm_mm:.2f} | {gm_cpu:.3f} | "
                  f"1/{gm_mm / gm_cpu:.1f} | {ref_cols} |", flush=True)
            if args.epilogues and preset == "hopper":
                for variant, rowwise, bias in EPILOGUES:
                    t_var = best_time(lambda: scaled_mm(x, w, preset, fast, "cpu", rowwise, bias),
                                      args.repeat)
                    print(f"| {M} x {N} x {K} | {label}, {variant} ({t_var / t_cpu:.3f} x the "
                          f"tensor-wise time) | {gm_mm:.2f} | {macs / t_var / 1e9:.3f} | "
                          f"1/{gm_mm * t_var / macs * 1e9:.1f} | - | - |", flush=True)


if __name__ == "__main__":
    main()
