"""python -m mmaemu {info, selftest, explain}: the diagnostics command line (user guide section 2)."""
import argparse
import os
import platform
import sys

import torch

from mmaemu.errors import MmaemuError

OUT_DTYPES = {"f32": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16,
              "f16": torch.float16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn,
              "e5m2": torch.float8_e5m2}


def cmd_info(args):
    import mmaemu
    from mmaemu import backends
    print(f"mmaemu {mmaemu.__version__}  torch {torch.__version__}  python {platform.python_version()}")
    print(f"CPU: {backends.cpu_name()} ({os.cpu_count()} logical cores, torch threads {torch.get_num_threads()})")
    if os.environ.get("MMAEMU_DISABLE_CUDA") == "1":
        print("CUDA: disabled by MMAEMU_DISABLE_CUDA=1")
    elif torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            print(f"CUDA device {i}: {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs")
    else:
        print("CUDA: no GPU visible to torch (torch.cuda.is_available() is False)")
    print()
    print("Profiles (* = default; matches = this machine is the reference platform):")
    default = mmaemu.get_profile().name
    for p in mmaemu.profiles().values():
        mark = "*" if p.name == default else " "
        exp = " [experimental]" if p.experimental else ""
        print(f" {mark} {p.name:28s} preset={p.preset:7s} matches={p.matches_device()!s:5s} {p.use}{exp}")
    print()
    print(f"CUDA driver: {backends.driver_status()}")
    print(f"NVRTC: {backends.nvrtc_status()[0]}")
    print()
    print("Backends (device, availability, reason; auto = the presets for which backend='auto' takes it):")
    for row in backends.status():
        state = "available" if row["available"] else "unavailable"
        dev = "-" if row["device"] is None else (row["device"] if isinstance(row["device"], str)
                                                  else f"cuda:{row['device']}")
        auto = f" [auto: {', '.join(row['auto_for'])}]" if row.get("auto_for") else ""
        print(f"  {row['name']:11s} {dev:7s} {state:11s} {row['reason']}{auto}")
    print()
    print("Presets:")
    for p in mmaemu.presets().values():
        print(f"  {p.name:7s} {p.maturity:12s} block {p.block}, grid 2^(E-{p.frac}), {p.keep}-bit "
              f"result; {p.evidence}")
    return 0


def cmd_selftest(args):
    from mmaemu import backends, selftest
    ok = True
    print("CPU:")
    for r in selftest.run_cpu():
        print(f"  {'PASS' if r.passed else 'FAIL'}  {r.backend:12s} {r.device:8s} {r.detail}")
        ok = ok and r.passed
    gpu_results = backends.selftest(force=args.force)
    if not gpu_results:
        why = ("MMAEMU_DISABLE_CUDA=1" if os.environ.get("MMAEMU_DISABLE_CUDA") == "1"
               else "no CUDA GPU is visible: " + backends.driver_status())
        print(f"No GPU kernels to test ({why}); the CPU backends were checked.")
    else:
        print("CUDA (required = IEEE-exact kernels that load; gated kernels are optional):")
    for r in gpu_results:
        mark = {"passed": "PASS", "failed": "FAIL"}.get(r.status, "----")
        need = "required" if r.required else "optional"
        cached = ", cached verdict" if r.cached else ""
        print(f"  {mark}  {r.kernel:11s} {r.preset:7s} cuda:{r.device} {need:8s} "
              f"{r.cases} cases, {r.mismatches} mismatches{cached}: {r.detail}")
        if r.required and not r.passed:
            ok = False
    print("selftest: every required kernel passed" if ok else "selftest: FAILED")
    return 0 if ok else 1


def _parse_splitk(text):
    if text == "auto":
        return "auto"
    if "," in text:
        s, scheme = text.split(",", 1)
        return (int(s), scheme.strip())
    return int(text)


def _validate_explain_args(args):
    """The checks mmaemu.scaled_mm makes, run on meta tensors of the given sizes (nothing is
    allocated): a call the API refuses is refused here with the same class and message."""
    from mmaemu.validation import validate_scaled_mm
    for name in ("M", "N", "K"):
        if getattr(args, name) < 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(args, name)}")
    try:
        torch.device(args.device)
    except RuntimeError as e:
        raise ValueError(f"--device {args.device!r}: {e}") from None
    mat1 = torch.empty(args.M, args.K, dtype=OUT_DTYPES[args.fmt_a], device="meta")
    mat2 = torch.empty(args.N, args.K, dtype=OUT_DTYPES[args.fmt_b], device="meta").t()
    scale = torch.empty((), device="meta")
    validate_scaled_mm(mat1, mat2, scale, scale, None, None, OUT_DTYPES[args.out], args.fast)


def cmd_explain(args):
    from mmaemu.api import explain_shape
    _validate_explain_args(args)
    plan = explain_shape(args.M, args.N, args.K, args.fmt_a, args.fmt_b, OUT_DTYPES[args.out],
                         args.fast, profile=args.profile, backend=args.backend,
                         splitk=_parse_splitk(args.splitk), device=args.device)
    print(plan)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mmaemu",
                                     description="mmaemu: exact FP8 tensor-core GEMMs, diagnostics.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="versions, device, matching profiles, backend status, presets",
                       description="Versions, device, matching profiles, every backend's status "
                                   "with the reason, and the presets.")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("selftest", help="run the kernel self-tests; exit 0 = every required kernel passed",
                       description="Known answers of the model, then every available backend "
                                   "against the reference. Exit status 0 only when all pass.")
    p.add_argument("--force", action="store_true",
                   help="rerun the CUDA self-tests instead of reading cached verdicts")
    p.set_defaults(func=cmd_selftest)
    p = sub.add_parser("explain", help="print the CallPlan of an M x N x K GEMM",
                       description="Print the CallPlan (profile, preset, split decision, backend) "
                                   "of mmaemu.scaled_mm for an M x N x K GEMM, without computing.")
    p.add_argument("M", type=int)
    p.add_argument("N", type=int)
    p.add_argument("K", type=int)
    p.add_argument("--out", choices=sorted(OUT_DTYPES), default="e4m3",
                   help="output dtype (default: the input dtype, as torch)")
    p.add_argument("--fast", action="store_true", help="use_fast_accum=True")
    p.add_argument("--fmt-a", choices=("e4m3", "e5m2"), default="e4m3")
    p.add_argument("--fmt-b", choices=("e4m3", "e5m2"), default="e4m3")
    p.add_argument("--profile", default=None, help="profile name (default MMAEMU_PROFILE or hopper)")
    p.add_argument("--backend", default=None, help="backend (default MMAEMU_BACKEND or auto)")
    p.add_argument("--splitk", default="auto", help="auto, 1, or S,scheme (e.g. 4,contiguous)")
    p.add_argument("--device", default="cpu", help="device of the operands (cpu or cuda)")
    p.set_defaults(func=cmd_explain)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (KeyError, ValueError, TypeError, MmaemuError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
