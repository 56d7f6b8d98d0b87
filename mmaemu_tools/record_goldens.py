#!/usr/bin/env python3
"""Records GEMM-level golden outputs of torch._scaled_mm on a GPU, with the cuBLASLt config.

For every case of a designed corpus (format pairs, output dtypes, both accumulation modes,
scales that expose the epilogue order, special values, shapes from tiny to Evo-2-like, K not a
multiple of 128, shapes that split and shapes that do not) it stores:
  - the inputs as generator specs (seeded, exact bytes regenerated on any CPU) + sha256;
  - the cuBLASLt configuration: cuBLASLt's own trace of the call torch made (algo, tile,
    stages, numSplitsK, reduction scheme, workspace) and a ctypes heuristic query with torch's
    descriptor, plus whether the two agree, and the launched kernel names for split candidates;
  - the explicit mmaemu split that replays the case (1 or [S, "contiguous"]);
  - the output bits (whole when small, else sha256 + a sampled block of rows x 16 columns);
  - the platform: GPU, SM count, driver, CUDA, cuBLASLt, torch versions.
One JSON file per run: <out>/<tag>.json (the repository keeps them in test/data/hw_goldens/).

--dry-run (automatic without CUDA) records the same files from the mmaemu CPU model, with a
simulated split, into a folder outside test/data/hw_goldens (it refuses that folder): those
files test this script and the replay code, they are not hardware data.

Usage:  python -m mmaemu_tools.record_goldens --out DIR --tag h200_torch [--groups A,B,...]
        [--corpus full|tiny] [--dry-run]
Set CUBLASLT_WORKSPACE_SIZE (KiB) in the environment before starting for another workspace.
"""
import argparse
import hashlib
import os
import sys
import time

import numpy as np
import torch

from ._hwcommon import (OUT_DTYPES, encode_output, gen_fp8_bytes, input_record, make_backend,
                       platform_info, refuse_hw_folder_for_dry_run, sample_record, scale_record,
                       want_dry_run, write_json)
from . import cublaslt as _cublaslt  # noqa: E402  (without mmaemu/__init__ and its _C)

F32 = np.float32
PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3")]
OUTS = ["float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]
NAN = {"e4m3": 0x7F, "e5m2": 0x7E}
# Replay cost guard: cases above this many multiply-adds replay a sampled block in CI.
SAMPLE_ABOVE_MACS = 4_000_000


def _seed(*parts):
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def _spec(case_id, which, rows, cols, fmt, exp_lo=None, exp_hi=None, zero_permille=50, patches=()):
    hi_default = {"e4m3": 10, "e5m2": 18}[fmt]      # |x| up to about 2^3 (E4M3) / 2^3 (E5M2)
    lo_default = {"e4m3": 2, "e5m2": 8}[fmt]
    return {"rows": rows, "cols": cols, "fmt": fmt, "seed": _seed(case_id, which),
            "exp_lo": lo_default if exp_lo is None else exp_lo,
            "exp_hi": hi_default if exp_hi is None else exp_hi,
            "zero_permille": zero_permille, "patches": [list(p) for p in patches]}


def _case(cid, group, M, N, K, fa, fb, out, fast, sa=1.0, sb=1.0, sr=None, a_kw=None, b_kw=None):
    return {"id": cid, "group": group, "M": M, "N": N, "K": K, "fmt_a": fa, "fmt_b": fb,
            "out_dtype": out, "fast_accum": fast, "scale_a": float(F32(sa)), "scale_b": float(F32(sb)),
            "scale_result": None if sr is None else float(F32(sr)),
            "a_spec": _spec(cid, "a", M, K, fa, **(a_kw or {})),
            "b_spec": _spec(cid, "b", N, K, fb, **(b_kw or {}))}


def corpus(groups, tiny):
    cases = []
    fasts = (True, False)
    if "A" in groups:      # formats x output dtypes x accumulation modes
        M, N, K = (16, 16, 48) if tiny else (16, 32, 80)
        for fa, fb in PAIRS[: 1 if tiny else 3]:
            for out in (OUTS[:2] if tiny else OUTS):
                for fast in fasts:
                    sr = 0.37 if out.startswith("float8") else None
                    cases.append(_case(f"A-{fa}x{fb}-{out}-{'fast' if fast else 'slow'}", "A",
                                       M, N, K, fa, fb, out, fast, 1.1, 0.3, sr,
                                       a_kw=dict(exp_lo=0, exp_hi={"e4m3": 12, "e5m2": 20}[fa]),
                                       b_kw=dict(exp_lo=0, exp_hi={"e4m3": 12, "e5m2": 20}[fb])))
    if "B" in groups:      # epilogue: scale pairs that separate the orders of fp32 multiplications
        scales = [(1.0, 1.0), (0.0625, 0.125), (1.1, 0.3), (3.0, 1 / 3), (-1.5, 0.9)]
        for sa, sb in (scales[2:4] if tiny else scales):
            for out in ("float32", "bfloat16"):
                for fast in ((True,) if tiny else fasts):
                    cases.append(_case(f"B-s{sa:g}x{sb:.4g}-{out}-{'fast' if fast else 'slow'}", "B",
                                       16, 16, 64, "e4m3", "e4m3", out, fast, sa, sb))
    if "C" in groups:      # special values
        K = 64
        specials = [
            ("nan", "e4m3", "e4m3", dict(patches=[(0, 5, NAN["e4m3"]), (3, 40, NAN["e4m3"])]), {}),
            ("inf", "e4m3", "e5m2", dict(patches=[(5, 11, 0x00)]),
             dict(patches=[(1, 7, 0x7C), (2, 9, 0xFC), (4, 3, 0x7C), (4, 4, 0xFC), (5, 11, 0x7C)])),
            ("negzero", "e4m3", "e4m3", dict(patches=[(0, k, 0x80) for k in range(K)]), {}),
            ("huge", "e4m3", "e4m3", dict(exp_lo=13, exp_hi=15, zero_permille=0),
             dict(exp_lo=13, exp_hi=15, zero_permille=0)),
            ("tiny", "e4m3", "e4m3", dict(exp_lo=0, exp_hi=2), dict(exp_lo=0, exp_hi=2)),
        ]
        for name, fa, fb, akw, bkw in (specials[:2] if tiny else specials):
            for out in (OUTS[:2] if tiny else OUTS):
                if out == "float8_e5m2" and "e5m2" not in (fa, fb):
                    continue
                for fast in ((True,) if tiny else fasts):
                    sa, sb = (2.0 ** -60, 2.0 ** -60) if name == "tiny" else (1.0, 1.0)
                    cases.append(_case(f"C-{name}-{out}-{'fast' if fast else 'slow'}", "C", 16, 16, K,
                                       fa, fb, out, fast, sa, sb, None, akw, bkw))
    if "D" in groups:      # shapes, K not a multiple of 128 included
        shapes = [(1, 16, 16), (7, 32, 48), (64, 48, 2064)] if tiny else [
            (1, 16, 16), (7, 32, 48), (33, 48, 144), (64, 64, 1040), (128, 256, 4112), (256, 512, 4096)]
        for M, N, K in shapes:
            for fast in fasts:
                cases.append(_case(f"D-{M}x{N}x{K}-{'fast' if fast else 'slow'}", "D", M, N, K,
                                   "e4m3", "e4m3", "bfloat16", fast, 1 / 64, 1 / 32))
    if "E" in groups and not tiny:   # Evo-2-like projections (hidden 1920 / 4096)
        for M, N, K in [(256, 5760, 1920), (256, 1920, 1920), (128, 12288, 4096), (512, 4096, 4096)]:
            for fast in fasts:
                cases.append(_case(f"E-{M}x{N}x{K}-{'fast' if fast else 'slow'}", "E", M, N, K,
                                   "e4m3", "e4m3", "bfloat16", fast, 1 / 64, 1 / 32))
    if "F" in groups:      # split-K candidates: small M*N, large K
        shapes = [(16, 16, 4096)] if tiny else [
            (16, 16, 16384), (16, 16, 65536), (1, 64, 32768), (64, 64, 16384), (16, 32, 12304),
            (32, 16, 40960)]
        for M, N, K in shapes:
            for out in ("float32", "bfloat16"):
                for fast in ((True,) if tiny else fasts):
                    cases.append(_case(f"F-{M}x{N}x{K}-{out}-{'fast' if fast else 'slow'}", "F",
                                       M, N, K, "e4m3", "e4m3", out, fast, 1.1, 0.3))
    return cases


# Most valuable first, since a run out of time drops its tail: the split-K candidates (F), the
# shapes that separate promotion intervals (D), the epilogue scales (B), formats (A), special
# values (C), the large projections (E). Each fast case stays beside its promoted twin.
VALUE_ORDER = "FDBACE"


def by_value(cases):
    return sorted(cases, key=lambda c: VALUE_ORDER.index(c["group"]))   # stable: twins stay together


def kernel_names(fn):
    """Names of the CUDA kernels fn() launches (torch.profiler), or an error string."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return [e.name for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
    except Exception as e:  # noqa: BLE001
        return f"profiler unavailable: {type(e).__name__}: {e}"


def cublaslt_config(lt, logging, case, run, dry, split_policy):
    """(output, config) of one case: runs it once with the trace captured, asks the heuristic."""
    cfg = {}
    if dry:
        y = run()
        s = split_policy(case["M"], case["N"], case["K"], case["fast_accum"])
        S = 1 if s == 1 else s[0]
        cfg = {"source": "dry-run simulation", "splits": S,
               "reduction_scheme": "NONE" if S == 1 else "COMPUTE_TYPE"}
        return y, cfg
    if logging:
        lt.take_log()
    y = run()
    if logging:
        tr = _cublaslt.matmul_traces(lt.take_log())
        if tr:
            t = tr[-1]
            cfg["trace"] = {k: v for k, v in t.items() if k != "raw"}
            cfg["trace_line"] = t["raw"]
    if lt is not None:
        try:
            ws = cfg.get("trace", {}).get("workspace_bytes")
            if ws is None:
                env = os.environ.get("CUBLASLT_WORKSPACE_SIZE")
                ws = int(env) * 1024 if env not in (None, "") else 1 << 20
            ptr = torch.ones(1, device="cuda")
            h = lt.heuristic(case["M"], case["N"], case["K"], case["fmt_a"], case["fmt_b"],
                             case["out_dtype"], case["fast_accum"], ws,
                             scale_ptrs=(ptr.data_ptr(), ptr.data_ptr()),
                             d_scale_ptr=ptr.data_ptr() if case["scale_result"] is not None else None)
            cfg["heuristic"] = h
            cfg["heuristic_workspace_bytes"] = ws
        except Exception as e:  # noqa: BLE001
            cfg["heuristic"] = {"error": f"{type(e).__name__}: {e}"}
    # the trace is what ran; where it carries no split (no algo=[...] group), the heuristic's answer
    t, h = cfg.get("trace") or {}, cfg.get("heuristic") or {}
    h = {} if "error" in h else h
    src, cfg["source"] = ((t, "trace") if t.get("splits") is not None else
                          (h, "heuristic") if h.get("splits") is not None else ({}, "none"))
    cfg["splits"] = src.get("splits")
    cfg["reduction_scheme"] = src.get("reduction_scheme")
    t, h = cfg.get("trace"), cfg.get("heuristic")
    if t and h and "error" not in h:
        cfg["trace_and_heuristic_agree"] = (t.get("splits") == h.get("splits") and
                                            t.get("algo") == h.get("algo"))
    return y, cfg


def mmaemu_split(cfg):
    S = cfg.get("splits")
    if S is None:
        return None
    if S <= 1:
        return 1
    return [int(S), _cublaslt.SCHEME_TO_MMAEMU.get(cfg.get("reduction_scheme") or "", "contiguous")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--tag", default="goldens", help="file name (without .json)")
    ap.add_argument("--groups", default="A,B,C,D,E,F")
    ap.add_argument("--corpus", choices=["full", "tiny"], default=None,
                    help="default: full on a GPU, tiny in a dry run")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop adding cases after this")
    args = ap.parse_args(argv)
    dry = want_dry_run(args.dry_run)
    if dry:
        refuse_hw_folder_for_dry_run(args.out)
    tiny = (args.corpus or ("tiny" if dry else "full")) == "tiny"
    policy = (lambda M, N, K, fast: (2, "contiguous") if K >= 4096 and M * N <= 256 else 1)
    backend = make_backend(dry, policy)
    lt, why = (None, "dry run") if dry else _cublaslt.load_or_none()
    logging = False
    if lt is not None:
        try:
            lt.start_log()
            logging = True
        except Exception as e:  # noqa: BLE001
            why = f"logger: {e}"
    groups = set(args.groups.split(","))
    cases = by_value(corpus(groups, tiny))
    print(f"record_goldens: {len(cases)} cases, {'DRY RUN (CPU model)' if dry else backend.describe()}")
    t0 = time.time()
    records, rejected = [], []
    for c in cases:
        if time.time() - t0 > args.budget_s:
            rejected.append({"id": c["id"], "reason": "time budget exhausted"})
            continue
        a = gen_fp8_bytes(c["a_spec"])
        b = gen_fp8_bytes(c["b_spec"])

        def run():
            return backend.scaled_mm(a, b, c["fmt_a"], c["fmt_b"], OUT_DTYPES[c["out_dtype"]],
                                     c["fast_accum"], c["scale_a"], c["scale_b"],
                                     scale_result=c["scale_result"])
        try:
            y, cfg = cublaslt_config(lt, logging, c, run, dry, policy)
        except Exception as e:  # noqa: BLE001
            rejected.append({"id": c["id"], "reason": f"{type(e).__name__}: {str(e)[:300]}"})
            continue
        if not dry and c["group"] == "F":      # which kernels ran: GEMM, + a reduction?
            cfg["kernels"] = kernel_names(run)
        seed = _seed(c["id"], "sample")
        out = encode_output(y, seed)
        if "sample" in out or c["M"] * c["N"] * c["K"] > SAMPLE_ABOVE_MACS:
            out["sample"] = sample_record(y, seed, a, b)
        rec = {k: c[k] for k in ("id", "group", "M", "N", "K", "fmt_a", "fmt_b", "out_dtype", "fast_accum")}
        rec.update({"scale_a": scale_record(c["scale_a"]), "scale_b": scale_record(c["scale_b"]),
                    "scale_result": scale_record(c["scale_result"]),
                    "a": input_record(c["a_spec"], a), "b": input_record(c["b_spec"], b),
                    "cublaslt": cfg, "mmaemu_splitk": mmaemu_split(cfg), "output": out,
                    "replay": "required" if mmaemu_split(cfg) is not None else
                              "skip: no split decision recorded (no trace, no heuristic answer)"})
        records.append(rec)
    if logging:
        lt.stop_log()
    doc = {"format": "mmaemu-hw-goldens/1", "tag": args.tag,
           "platform": platform_info(dry, lt),
           "note": ("DRY RUN: outputs computed by the mmaemu CPU model with a simulated split; "
                    "NOT hardware data") if dry else
                   "outputs of torch._scaled_mm on the GPU named in platform; "
                   "mmaemu_splitk maps the cuBLAS reduction scheme to mmaemu's 'contiguous' split "
                   "(inferred until probe P5 confirms it)",
           "cublaslt_unavailable": None if lt is not None else why,
           "cases": records, "rejected": rejected,
           "seconds": round(time.time() - t0, 1)}
    path = os.path.join(args.out, f"{args.tag}.json")
    write_json(path, doc)
    splits = sum(1 for r in records if isinstance(r["mmaemu_splitk"], list))
    print(f"wrote {path}: {len(records)} goldens ({splits} with split-K), {len(rejected)} rejected, "
          f"{doc['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
