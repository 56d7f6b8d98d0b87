"""python -m mmaemu {info, selftest, explain}: the diagnostics command line (user guide section 2)."""
import argparse
import sys

import torch

from mmaemu.errors import MmaemuError

from mmaemu.formats import BY_NAME

# --out: mmaemu's format names, and the spellings fp32 and fp16
OUT_DTYPES = dict({f.name: f.dtype for f in BY_NAME.values()}, fp32=torch.float32,
                  fp16=torch.float16)


def cmd_info(args):
    from mmaemu.runtime import diagnostics
    lines, ok = diagnostics.info_report()
    print("\n".join(lines))
    return 0 if ok else 2


def cmd_selftest(args):
    from mmaemu.runtime import diagnostics
    lines, ok = diagnostics.selftest_report(force=args.force)
    print("\n".join(lines))
    return 0 if ok else 1


def _parse_splitk(text):
    """--splitk: auto, infer, 1, or S,scheme."""
    if text in ("auto", "infer"):
        return text
    count, sep, scheme = text.partition(",")
    try:
        S = int(count)
    except ValueError:
        raise ValueError(f"--splitk {text!r}: expected auto, infer, 1, or S,scheme "
                         "(e.g. 4,contiguous)") from None
    return (S, scheme.strip()) if sep else S


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
    p.add_argument("--splitk", default="auto",
                   help="auto, infer (mmaemu's stated inference where nothing recorded decides), "
                        "1, or S,scheme (e.g. 4,contiguous)")
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
