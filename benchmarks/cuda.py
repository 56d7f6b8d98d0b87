"""Throughput of mmaemu's CUDA backends beside native torch._scaled_mm, on one GPU, in one run.

    python benchmarks/cuda.py [--device 0] [--json results.json] [--quick]

--json is rewritten after every measured row (a run stopped by its time limit keeps what it
measured; "complete" says whether it ended). --quick measures the first shape only, times each
kernel for 0.5 s and takes the bits of cuda:h4 / cuda:v4 (self-tested) as the reference rather
than the CPU model: about a minute on an H200 with the kernels loaded.

Shapes (M x N x K): the guide's first GEMM / Evo 2 1B projection at 64 tokens (64 x 5760 x 1920),
the same projection at 8192 tokens (8192 x 5760 x 1920), and 8192 x 8192 x 8192. E4M3 x E4M3,
tensor-wise scales, bf16 output, fast accumulation (what Transformer Engine and Evo 2 use) and,
for the tiled and tensor-core kernels, also the promoted mode (torch's default).

Reported per backend: milliseconds per GEMM (CUDA events around back-to-back calls of the op,
after a warm-up that loads the kernel and runs its self-test), TMAC/s = M*N*K / time, the ratio to
native torch._scaled_mm with the same accumulation mode, and whether its bits equal the reference
backend's (the CPU model on the smallest shape; cuda:h4's / cuda:v4's result, themselves
self-tested, on the larger ones, where the CPU model would take minutes). The v kernels and the
wgmma kernel's ada mode compute the ada preset (16-product blocks): their ratio to native Hopper
is a throughput comparison only.
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time

# Run as a script, this file's directory heads sys.path, and its name would shadow the `cuda`
# package (cuda.bindings) that torch.cuda imports: drop that entry, add the repository root.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import torch  # noqa: E402

import mmaemu  # noqa: E402
from mmaemu.runtime import availability, facts, loader, registry
from mmaemu.testing import bits  # noqa: E402

SHAPES = [("evo2-1b (guide §3)", 64, 5760, 1920), ("evo2-1b, 8192 tokens", 8192, 5760, 1920),
          ("cube 8192", 8192, 8192, 8192)]
BACKENDS = ["cuda:wgmma", "cuda:h4", "cuda:h1", "cuda:v4", "cuda:v1", "reference"]


def timed(fn, budget_s, max_iters):
    """(ms per call, calls): one warm-up, then back-to-back calls between CUDA events."""
    fn()
    torch.cuda.synchronize()
    t0 = time.time()
    fn()
    torch.cuda.synchronize()
    one = time.time() - t0
    iters = int(max(1, min(max_iters, budget_s / max(one, 1e-6))))
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters, iters


class Results:
    """The benchmark's JSON document, written again after each row."""

    def __init__(self, path, head):
        self.path, self.doc = path, {**head, "complete": False, "results": []}
        self.save()

    def add(self, row):
        self.doc["results"].append(row)
        self.save()

    def finish(self, **extra):
        self.doc.update(extra, complete=True)
        self.save()

    def save(self):
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1)
        os.replace(tmp, self.path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--quick", action="store_true", help="the first shape only")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per measurement")
    ap.add_argument("--slow-limit", type=float, default=20.0,
                    help="skip a backend on a shape when one call would take longer (seconds)")
    args = ap.parse_args()
    if args.quick and args.budget == ap.get_default("budget"):
        args.budget = 0.5
    head = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "mmaemu": mmaemu.__version__, "python": platform.python_version(),
            "quick": args.quick}
    if not torch.cuda.is_available() or loader.device_count() == 0:
        why = (f"no CUDA device: torch.cuda.is_available()={torch.cuda.is_available()}, "
               f"driver: {loader.driver_status()}")
        print(why)
        Results(args.json, head).finish(skipped=why)
        return 0
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    info = loader.device_info(args.device)
    print(f"{info['name']} (sm_{info['cc']}, {info['sm_count']} SMs), driver {info['driver_version']}, "
          f"torch {torch.__version__}, mmaemu {mmaemu.__version__}")
    available = {}
    for name in BACKENDS:
        why = availability.static_reason(name, args.device)
        available[name] = why
        print(f"  {name:11s} {'ok: ' + loader.kernel_check(args.device, name)[1] if why is None else why}")

    rec = Results(args.json, {**head, "device": info,
                              "unavailable": {k: v for k, v in available.items() if v}})
    gen = torch.Generator(device="cpu").manual_seed(0)
    for label, M, N, K in SHAPES[:1] if args.quick else SHAPES:
        x = (torch.randn(M, K, generator=gen) * 40).clamp(-448, 448).to(torch.float8_e4m3fn).to(dev)
        w = (torch.randn(N, K, generator=gen) * 40).clamp(-448, 448).to(torch.float8_e4m3fn).to(dev)
        sx, sw = torch.tensor(1 / 64, device=dev), torch.tensor(1 / 32, device=dev)
        macs = M * N * K
        print(f"\n{label}: {M} x {N} x {K}")
        for fast in (True, False):
            row = {"shape": label, "M": M, "N": N, "K": K, "fast_accum": fast, "backends": {}}
            native_ms = None
            try:
                native_ms, n = timed(lambda: torch._scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16,
                                                              use_fast_accum=fast), args.budget, 200)
                row["native_ms"] = native_ms
                print(f"  native torch._scaled_mm  fast={fast!s:5}  {native_ms:9.3f} ms  "
                      f"{macs / native_ms / 1e9:8.2f} TMAC/s")
            except Exception as e:  # noqa: BLE001
                row["native_error"] = f"{type(e).__name__}: {e}"
                print(f"  native torch._scaled_mm  fast={fast}: {row['native_error']}")
            for preset, names, anchor in (("hopper", ["cuda:wgmma", "cuda:h4", "cuda:h1", "reference"], "cuda:h4"),
                                          ("ada", ["cuda:wgmma", "cuda:v4", "cuda:v1"], "cuda:v4")):
                ref_bits = None
                cpu_ref = macs <= 1 << 30 and not args.quick   # the CPU model, smallest shape only
                if cpu_ref:
                    t0 = time.time()
                    ref_bits = bits(torch.ops.mmaemu.scaled_mm(
                        x.cpu(), w.cpu().t(), sx.cpu(), sw.cpu(), None, None, torch.bfloat16, fast,
                        preset, 1, "none",
                        "cpu:" + [k["name"] for k in mmaemu._C.cpu_simd_kernels() if k["available"]][-1], 0))
                    row[f"cpu_model_s_{preset}"] = time.time() - t0
                else:                 # the self-tested anchor runs first and gives the bits
                    names = sorted(names, key=lambda n: n != anchor)
                for name in names:
                    key = f"{name} ({preset})"
                    why = available[name]
                    if why is None and registry.KERNELS[name].gated:
                        v = facts.verdict(name, preset, args.device)
                        why = None if v and v["passed"] else f"self-test: {v and v['detail']}"
                    if why is not None:
                        row["backends"][key] = {"skipped": why}
                        continue
                    if name == "reference" and macs > 1 << 31:
                        row["backends"][key] = {"skipped": "one thread per element: minutes on this shape"}
                        continue

                    def op():
                        return torch.ops.mmaemu.scaled_mm(x, w.t(), sx, sw, None, None, torch.bfloat16, fast,
                                                          preset, 1, "none",
                                                          name if name.startswith("cuda:") else "cuda:" + name, 0)
                    t0 = time.time()
                    out = op()
                    torch.cuda.synchronize()
                    if time.time() - t0 > args.slow_limit:
                        row["backends"][key] = {"skipped": f"one call took {time.time() - t0:.1f} s"}
                        continue
                    ms, n = timed(op, args.budget, 200)
                    b = bits(out.cpu())
                    if ref_bits is None and name == anchor:
                        ref_bits = b
                    same = None if ref_bits is None else bool((b == ref_bits).all())
                    entry = {"ms": ms, "calls": n, "tmacs": macs / ms / 1e9, "bits_equal_reference": same,
                             "reference_for_bits": "CPU model" if cpu_ref else anchor}
                    if native_ms:
                        entry["fraction_of_native"] = native_ms / ms
                    row["backends"][key] = entry
                    print(f"  mmaemu {key:20s} fast={fast!s:5}  {ms:9.3f} ms  {entry['tmacs']:8.2f} TMAC/s"
                          + (f"  {100 * entry['fraction_of_native']:6.1f} % of native" if native_ms else "")
                          + f"  bits equal: {same}")
            rec.add(row)
    rec.finish()
    if args.json:
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
