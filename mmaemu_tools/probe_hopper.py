#!/usr/bin/env python3
"""Hardware probes P0-P10 (research note arithmetic.md section 8) for a Hopper GPU.

Each probe feeds inputs whose result differs between competing hypotheses about the hardware
arithmetic, runs them through `torch._scaled_mm` (and, for P0/P1/P9, through raw wgmma and
mma.sync kernels compiled at run time), and prints which hypothesis the observation confirms or
rejects. Results go to <out>/probes.json.

Without a CUDA device, or with --dry-run, every probe runs end to end against the mmaemu CPU
model (mmaemu.scaled_mm with an explicit split, backend='reference'; mmaemu.mma for the raw
instruction probes), which tests this script's logic. A dry run is labelled as such everywhere
and proves nothing about hardware.

Usage:  python -m mmaemu_tools.probe_hopper --out OUT [--dry-run] [--quick] [--only P0,P3]
GPU time: well under a minute for all probes on an H200 (many tiny GEMMs).
"""
import argparse
import math
import os
import sys
import time
import traceback

import numpy as np
import torch

from . import exactmodel as xm
from ._hwcommon import (REPO_ROOT, bits_f32, f32_bits, fp8_bytes_of, gen_fp8_bytes, make_backend, platform_info, want_dry_run, write_json, OUT_DTYPES)
from . import cublaslt as _cublaslt  # noqa: E402  (without mmaemu/__init__ and its _C)

F32 = np.float32


# What each hypothesis predicts: the exact model (exactmodel.py) with fp32 values as floats.

def model_dot(a, b, fast, **hypotheses):
    """The fp32 accumulator of one E4M3 x E4M3 dot under hypotheses (exactmodel's
    hypothesis_accumulator: block, frac, keep, promote_k, c_late, cut, partition, order,
    origin); with none, the validated hopper model."""
    return F32(bits_f32(xm.hypothesis_accumulator(a, b, "e4m3", "e4m3", fast, **hypotheses)))


def model_scaled(acc, sa, sb, order="H1"):
    """acc times the scales in an epilogue order (exactmodel.scaled), as a float."""
    return F32(bits_f32(xm.scaled(f32_bits(acc), f32_bits(sa), f32_bits(sb), order)))


def model_partition(K, S):
    """mmaemu's contiguous split ranges of K into S slices, the empty ones left out."""
    return [(k0, k1) for k0, k1 in xm.split_ranges(K, S) if k1 > k0]


# ------------------------------------------------------------------------------------------
# Context: the device (or the CPU model), the raw instruction kernels, the cuBLASLt trace
# ------------------------------------------------------------------------------------------

class Ctx:
    def __init__(self, args):
        self.args = args
        self.dry = want_dry_run(args.dry_run)
        self.quick = args.quick
        # Dry runs simulate a split so that the split-detection logic is exercised: every
        # shape with K >= 2048 and M*N <= 256 splits in 2 contiguous parts (mmaemu's rule).
        policy = (lambda M, N, K, fast: (2, "contiguous") if K >= 2048 and M * N <= 256 else 1)
        self.backend = make_backend(self.dry, policy)
        self.sim_policy = policy if self.dry else None
        self.lt, self.lt_reason = (None, "dry run: no cuBLASLt") if self.dry else _cublaslt.load_or_none()
        self.logging = False
        if self.lt is not None:
            try:
                self.lt.start_log()
                self.logging = True
            except Exception as e:  # noqa: BLE001
                self.lt_reason = f"logger unavailable: {e}"
        self.raw, self.raw_reason = None, None
        self.configs = {}     # (M, N, K, fmt_a, fmt_b, out, fast) -> parsed cublasLtMatmul trace

    def raw_backend(self):
        """RawMma on the GPU, or the mmaemu.mma CPU model in a dry run, or None."""
        if self.dry:
            return "model"
        if self.raw is None and self.raw_reason is None:
            try:
                from . import _rawmma
                self.raw = _rawmma.RawMma()
            except Exception as e:  # noqa: BLE001
                self.raw_reason = f"{type(e).__name__}: {e}"
        return self.raw

    def scaled_mm(self, A, B, fa, fb, out, fast, sa=1.0, sb=1.0, sr=None):
        M, K = A.shape
        N = B.shape[0]
        key = (M, N, K, fa, fb, out, bool(fast))
        first = key not in self.configs
        if self.logging and first:
            self.lt.take_log()
        y = self.backend.scaled_mm(A, B, fa, fb, OUT_DTYPES[out], fast, sa, sb, scale_result=sr)
        if self.logging and not first:
            self.lt.take_log()                # keep the captured log from growing
        if first:
            if self.logging:
                tr = _cublaslt.matmul_traces(self.lt.take_log())
                self.configs[key] = tr[-1] if tr else {"note": "no cublasLtMatmul trace captured"}
            elif self.dry:
                s = self.sim_policy(M, N, K, fast)
                self.configs[key] = {"splits": 1 if s == 1 else s[0], "note": "dry run: simulated"}
            else:
                self.configs[key] = {"note": self.lt_reason}
        return y

    def config(self, M, N, K, fa, fb, out, fast):
        return self.configs.get((M, N, K, fa, fb, out, bool(fast)), {})


def vals(bytes_row, fmt):
    return [int(x) for x in bytes_row]


def run_dots(ctx, A, B, fa="e4m3", fb="e4m3", fast=True, out="float32", shape=(16, 16),
             sa=1.0, sb=1.0, sr=None):
    """T independent dot products A[t] . B[t] (uint8 [T, K]) through GEMMs of a fixed shape:
    pair t sits in row t of mat1 and row t of the weight, so it lands on the diagonal."""
    T, K = A.shape
    M, N = shape
    per = min(M, N)
    res = []
    for t0 in range(0, T, per):
        n = min(per, T - t0)
        a = np.zeros((M, K), np.uint8)
        b = np.zeros((N, K), np.uint8)
        a[:n] = A[t0:t0 + n]
        b[:n] = B[t0:t0 + n]
        y = ctx.scaled_mm(a, b, fa, fb, out, fast, sa, sb, sr)
        res.append(torch.diagonal(y)[:n].clone())
    return torch.cat(res)


def f32_list(t):
    return [float(x) for x in t.float().tolist()]


def bits_list(t):
    """Hex bit patterns of a tensor's elements."""
    w = t.element_size()
    raw = t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
    return ["0x" + raw[i:i + w][::-1].hex() for i in range(0, len(raw), w)]


def same_bits(x, y):
    """fp32 equality by bit pattern (NaNs equal to any NaN)."""
    x, y = F32(x), F32(y)
    if math.isnan(x) and math.isnan(y):
        return True
    return f32_bits(x) == f32_bits(y)


def score(observed, predictions):
    """{hypothesis: number of elements it gets right} for parallel lists of fp32 values."""
    return {h: sum(same_bits(o, p) for o, p in zip(observed, preds))
            for h, preds in predictions.items()}


def verdict_from(scores, n, expected):
    full = sorted(h for h, s in scores.items() if s == n)
    if expected in full:
        return "confirmed", full
    return ("rejected" if n else "inconclusive"), full


def vec(K, entries, fmt="e4m3"):
    """FP8 bytes of a length-K vector, zero except {k: value}."""
    v = np.zeros(K)
    for k, x in entries.items():
        v[k] = x
    return fp8_bytes_of(v, fmt)


def discriminating(gen, hyps, want, tries):
    """Draws candidate inputs until `want` of them separate all hypotheses (pairwise)."""
    picked = []
    for i in range(tries):
        cand = gen(i)
        preds = {h: f(cand) for h, f in hyps.items()}
        vs = list(preds.values())
        if all(not same_bits(vs[p], vs[q]) for p in range(len(vs)) for q in range(p + 1, len(vs))):
            picked.append(cand)
            if len(picked) >= want:
                break
    return picked


# ------------------------------------------------------------------------------------------
# P0: wgmma == cuBLAS path == model on K=32 vectors
# ------------------------------------------------------------------------------------------

def _vendored_vectors(path):
    """test/data/tensor_core/h100_e4m3.txt.gz: lines '<a hex> <b hex> <C bits> <D bits>'."""
    import gzip
    if not os.path.isfile(path):
        return None
    A, B, D = [], [], []
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            a, b, _c, d = line.split()[:4]
            A.append(np.frombuffer(bytes.fromhex(a), np.uint8))
            B.append(np.frombuffer(bytes.fromhex(b), np.uint8))
            D.append(int(d, 16))
    return np.array(A), np.array(B), D


def _published_vectors(path):
    if path and path.endswith(".gz"):
        return _vendored_vectors(path)
    if not path or not os.path.isdir(path):
        return None
    files = os.listdir(path)
    fa = [f for f in files if f.startswith("a_")]
    fb = [f for f in files if f.startswith("b_")]
    fd = [f for f in files if f.startswith("d_")]
    if not (fa and fb and fd):
        return None

    def hexrows(name):
        out = []
        with open(os.path.join(path, name)) as f:
            for line in f:
                if line.strip():
                    out.append([bits_f32(int(h, 16)) for h in line.split()])
        return np.array(out)
    a, b = hexrows(fa[0]), hexrows(fb[0])
    with open(os.path.join(path, fd[0])) as f:
        d = [int(line.strip(), 2) for line in f if line.strip()]
    A = fp8_bytes_of(a.ravel(), "e4m3").reshape(a.shape)
    B = fp8_bytes_of(b.ravel(), "e4m3").reshape(b.shape)
    return A, B, d


def probe_p0(ctx):
    pub = None
    for p in ([ctx.args.vectors] if ctx.args.vectors else []) + [
            os.path.join(REPO_ROOT, "test/data/tensor_core/h100_e4m3.txt.gz"),
            os.path.join(REPO_ROOT, "test/data/tensor-core/H100-E4M3"),
            os.path.join(REPO_ROOT, "shared/golden/tensor-core/H100-E4M3"),
            os.path.join(REPO_ROOT, "../shared/golden/tensor-core/H100-E4M3")]:
        pub = _published_vectors(p)
        if pub is not None:
            source = f"published H100 vectors ({os.path.relpath(p, REPO_ROOT)})"
            break
    T = 64 if ctx.quick else 5000
    if pub is None:
        spec = dict(rows=T, cols=32, fmt="e4m3", seed=1000, exp_lo=0, exp_hi=8, zero_permille=30)
        A = gen_fp8_bytes(spec)
        spec["seed"] = 1001
        B = gen_fp8_bytes(spec)
        D_pub = None
        source = "generated vectors (|x| <= 3.75, subnormals, zeros; seeds 1000/1001)"
    else:
        A, B, D_pub = pub[0][:T], pub[1][:T], pub[2][:T]
    T = A.shape[0]
    model = [model_dot(A[t], B[t], True) for t in range(T)]
    alt16 = [model_dot(A[t], B[t], True, block=16) for t in range(T)]
    exact = [F32(sum(float(x) * float(y) for x, y in zip(
        torch.from_numpy(A[t]).view(torch.float8_e4m3fn).double().tolist(),
        torch.from_numpy(B[t]).view(torch.float8_e4m3fn).double().tolist()))) for t in range(T)]
    hyps = {"TC_32 (model)": model, "TC_16 chained (Ada model)": alt16, "exact sum, fp32 RN": exact}
    res = {"inputs": source, "vectors": T, "paths": {}}
    if D_pub is not None:
        res["model_vs_published"] = sum(f32_bits(m) == d for m, d in zip(model, D_pub))
    shape = (16, 16) if ctx.dry else (512, 512)
    obs = f32_list(run_dots(ctx, A, B, fast=True, shape=shape))
    res["paths"]["torch._scaled_mm K=32"] = {"matches": score(obs, hyps)}
    raw = ctx.raw_backend()
    if raw is None:
        res["paths"]["raw wgmma"] = {"skipped": ctx.raw_reason}
    else:
        for kind in ("wgmma", "mma"):
            o = raw_dots(ctx, kind, A, B, np.zeros(T, np.float32), c_mode=0)
            entry = {"matches": score(o, hyps)}
            if raw != "model":
                from . import _rawmma
                entry["layout_self_test"] = _rawmma.layout_self_test(raw, kind)
            res["paths"][f"raw {kind} (C=0, first scale-d=0)" if kind == "wgmma"
                         else "raw mma.sync m16n8k32 (lowered to HMMA.16816 on sm_90a)"] = entry
    ok = all(p.get("matches", {}).get("TC_32 (model)", T) == T for name, p in res["paths"].items()
             if "mma.sync" not in name and "skipped" not in p)
    return {"verdict": "confirmed" if ok else "rejected", "result": res}


def raw_dots(ctx, kind, A, B, C, c_mode, fa="e4m3", fb="e4m3"):
    """T dot products A[t].B[t] + C[t] through the raw instruction kernels (diagonal packing)."""
    T, K = A.shape
    if ctx.raw_backend() == "model":       # dry run: the preset's instruction chain
        import mmaemu
        a = torch.from_numpy(np.ascontiguousarray(A)).view(torch.float8_e4m3fn if fa == "e4m3" else torch.float8_e5m2)
        b = torch.from_numpy(np.ascontiguousarray(B)).view(torch.float8_e4m3fn if fb == "e4m3" else torch.float8_e5m2)
        c = torch.from_numpy(np.asarray(C, np.float32)) if c_mode else torch.zeros(T)
        return [F32(x) for x in mmaemu.mma(a, b, c, "hopper").tolist()]
    R = 64 if kind == "wgmma" else 16
    tiles = -(-T // 8)
    At = np.zeros((tiles, R, K), np.uint8)
    Bt = np.zeros((tiles, 8, K), np.uint8)
    Ct = np.zeros((tiles, R, 8), np.float32)
    for t in range(T):
        i, r = divmod(t, 8)
        At[i, r] = A[t]
        Bt[i, r] = B[t]
        Ct[i, r, r] = C[t]
    D = ctx.raw.run(kind, fa, fb, At, Bt, Ct, c_mode)
    return [F32(D[t // 8, t % 8, t % 8]) for t in range(T)]


# ------------------------------------------------------------------------------------------
# P1: the accumulator joins the 32-product block (fast accumulation)
# ------------------------------------------------------------------------------------------

def probe_p1(ctx):
    K = 64
    A = [vec(K, {0: 32, 32: 0.875, 33: 0.125})]
    B = [vec(K, {0: 64, 32: 1, 33: 1})]
    rng = np.random.default_rng(11)

    def gen(i):
        a = np.zeros(K)
        b = np.zeros(K)
        a[0], b[0] = rng.choice([16, 24, 32, 48, 64, 96]), rng.choice([32, 40, 48, 56, 64])
        for k in rng.choice(np.arange(32, 64), size=4, replace=False):
            a[k] = rng.choice([0.875, 0.625, 0.375, 0.125, 0.75, 1.25, 1.75])
            b[k] = rng.choice([1, -1, 0.5, 1.5, -0.75])
        return fp8_bytes_of(a, "e4m3"), fp8_bytes_of(b, "e4m3")
    hyp_f = {"C inside the block (model)": lambda c: model_dot(c[0], c[1], True),
             "C added after the block in fp32": lambda c: model_dot(c[0], c[1], True, c_late=True)}
    extra = discriminating(gen, hyp_f, 15 if not ctx.quick else 3, 4000)
    A = np.array(A + [c[0] for c in extra])
    B = np.array(B + [c[1] for c in extra])
    cands = list(zip(A, B))
    preds = {h: [f(c) for c in cands] for h, f in hyp_f.items()}
    obs = f32_list(run_dots(ctx, A, B, fast=True))
    sc = score(obs, preds)
    v, full = verdict_from(sc, len(obs), "C inside the block (model)")
    res = {"fixed_case": {"observed": obs[0], "model": 2048.75, "alternative": 2049.0},
           "vectors": len(obs), "matches_fast": sc}
    # non-fast: promotion interval >= 64 keeps both blocks in one chain -> same as fast
    obs_nf = f32_list(run_dots(ctx, A, B, fast=False))
    res["non_fast"] = {"observed_fixed_case": obs_nf[0],
                       "note": "2048.75 if one promotion interval covers k 0..63; 2049.0 if the "
                               "interval is 32 (each block promoted alone)"}
    raw = ctx.raw_backend()
    if raw is None:
        res["raw_wgmma"] = {"skipped": ctx.raw_reason}
    else:
        # C = 2048 loaded into the accumulator, products 0.875 and 0.125 (k 0 and 1).
        Ar = np.array([vec(32, {0: 0.875, 1: 0.125})])
        Br = np.array([vec(32, {0: 1, 1: 1})])
        o = raw_dots(ctx, "wgmma", Ar, Br, np.array([2048.0], np.float32), c_mode=1)
        res["raw_wgmma"] = {"observed": float(o[0]), "model": 2048.75, "C outside": 2049.0}
        if raw != "model":
            om = raw_dots(ctx, "mma", Ar, Br, np.array([2048.0], np.float32), c_mode=1)
            res["raw_mma_sync"] = {"observed": float(om[0]),
                                   "note": "sm_90a lowers mma.sync FP8 to HMMA + fp32 FADD of C: 2049.0 expected"}
        if not same_bits(o[0], 2048.75):
            v = "rejected"
    return {"verdict": v, "matching_hypotheses": full, "result": res}


# ------------------------------------------------------------------------------------------
# P2: truncation toward zero of the terms and of the 14-bit block result
# ------------------------------------------------------------------------------------------

def probe_p2(ctx):
    K = 32
    fixed = [(vec(K, {0: 32, 1: 0.09375}), vec(K, {0: 32, 1: -1})),
             (vec(K, {0: 32, 1: 32, 2: 0.125, 3: 0.125, 4: 0.125}), vec(K, {0: 32, 1: 32, 2: 1, 3: 1, 4: 1}))]
    modes = {"RZ terms + RZ 14-bit result (model)": dict(cut="rz"),
             "floor (two's complement)": dict(cut="floor"),
             "RZ terms + RN-even result": dict(cut="rn"),
             "RZ terms, no final cut": dict(cut="exact"),
             "12 fraction bits": dict(frac=12), "14 fraction bits": dict(frac=14)}

    def gen(i):
        spec = dict(rows=2, cols=K, fmt="e4m3", seed=5000 + i, exp_lo=0, exp_hi=14, zero_permille=300)
        u = gen_fp8_bytes(spec)
        return u[0], u[1]
    # each random vector separates at least the model from one alternative
    picked = []
    for i in range(3000):
        c = gen(i)
        p = {h: model_dot(c[0], c[1], True, **kw) for h, kw in modes.items()}
        base = p["RZ terms + RZ 14-bit result (model)"]
        if sum(not same_bits(base, x) for x in p.values()) >= 3:
            picked.append(c)
        if len(picked) >= (8 if ctx.quick else 48):
            break
    cands = fixed + picked
    A = np.array([c[0] for c in cands])
    B = np.array([c[1] for c in cands])
    preds = {h: [model_dot(a, b, True, **kw) for a, b in cands] for h, kw in modes.items()}
    obs = f32_list(run_dots(ctx, A, B, fast=True))
    sc = score(obs, preds)
    v, full = verdict_from(sc, len(obs), "RZ terms + RZ 14-bit result (model)")
    return {"verdict": v, "matching_hypotheses": full,
            "result": {"fixed_cases": {"(i) 1024 - 0.09375": obs[0], "(ii) 2048 + 3*0.125": obs[1],
                                       "model": [1024.0, 2048.25],
                                       "floor": [1023.875, 2048.25], "RN result": [1024.0, 2048.5]},
                       "vectors": len(obs), "matches": sc}}


# ------------------------------------------------------------------------------------------
# Restart maps: where a chain of blocks starts again from +0 (promotion or split-K)
# ------------------------------------------------------------------------------------------

def restart_map(ctx, M, N, K, fast, grain, out="float32"):
    """For each candidate boundary b (multiple of grain): big product 32*32 at k = b-1, a small
    one 32 * 2^-9 = 0.0625 at k = b. In one chain the small term is truncated away (1024.0);
    if a new chain starts at b (promotion or new split) it survives (1024.0625)."""
    cands = list(range(grain, K, grain))
    A = np.zeros((len(cands), K), np.uint8)
    B = np.zeros((len(cands), K), np.uint8)
    big, w = fp8_bytes_of([32.0, 2.0 ** -9], "e4m3"), fp8_bytes_of([32.0], "e4m3")[0]
    for i, b in enumerate(cands):
        A[i, b - 1], A[i, b] = big[0], big[1]
        B[i, b - 1], B[i, b] = w, w
    obs = f32_list(run_dots(ctx, A, B, fast=fast, out=out, shape=(M, N)))
    restarts = [b for b, o in zip(cands, obs) if same_bits(o, 1024.0625)]
    odd = [(b, o) for b, o in zip(cands, obs) if not (same_bits(o, 1024.0625) or same_bits(o, 1024.0))]
    return restarts, odd


def boundaries_of(partition):
    return [k0 for k0, _ in partition[1:]]


def probe_p3(ctx):
    res = {}
    # (a) the classic reading: K=1024, k=0: 32*32, every other k: 1 * 0.0625
    K = 1024
    a = np.full(K, 1.0)
    b = np.full(K, 0.0625)
    a[0] = b[0] = 32
    A, B = fp8_bytes_of(a, "e4m3")[None], fp8_bytes_of(b, "e4m3")[None]
    obs = {f: f32_list(run_dots(ctx, A, B, fast=f))[0] for f in (True, False)}
    preds = {f"interval {I}": float(model_dot(A[0], B[0], False, promote_k=I))
             for I in (32, 64, 128, 256, 512)}
    res["classic"] = {"fast": obs[True], "non_fast": obs[False], "predictions_non_fast": preds,
                      "read_interval": (K - (obs[False] - 1024) / 0.0625) if obs[False] > 1024 else None}
    # (b) restart maps in both modes
    maps = {}
    Ks = [512] if ctx.quick else [1024, 4096]
    for K in Ks:
        for fast in (False, True):
            r, odd = restart_map(ctx, 16, 16, K, fast, 16)
            maps[f"K={K} {'fast' if fast else 'non-fast'}"] = {"restarts": r, "unexpected": odd[:8],
                                                               "cublaslt": ctx.config(16, 16, K, "e4m3", "e4m3", "float32", fast)}
    res["restart_maps"] = maps
    model = [128 * i for i in range(1, 1024)]
    ok = True
    for name, m in maps.items():
        K = int(name.split()[0][2:])
        cfg = m["cublaslt"]
        S = cfg.get("splits") or 1
        split_b = boundaries_of(model_partition(K, S)) if S > 1 else []
        if "non-fast" in name:
            want = sorted(set([x for x in model if x < K] + split_b))
        else:
            want = split_b
        m["model_restarts"] = want
        m["agrees_with_model"] = m["restarts"] == want
        ok = ok and m["agrees_with_model"]
    v = "confirmed" if ok and same_bits(obs[False], preds["interval 128"]) else "rejected"
    return {"verdict": v, "hypothesis_detail": "non-fast restarts every 128 k (4 wgmma k32), relative "
            "to each split's origin; fast accumulation restarts only at split boundaries", "result": res}


# ------------------------------------------------------------------------------------------
# P4: split-K restart points; P5: reduction order and epilogue placement
# ------------------------------------------------------------------------------------------

def p4_shapes(ctx):
    if ctx.quick:
        return [(16, 16, 2048, 64)]
    return [(16, 16, 4096, 16), (16, 16, 16384, 32), (16, 16, 65536, 32), (64, 64, 16384, 32)]


def probe_p4(ctx):
    out = {}
    agree_all, any_split = True, False
    for M, N, K, grain in p4_shapes(ctx):
        r, odd = restart_map(ctx, M, N, K, True, grain)
        cfg = ctx.config(M, N, K, "e4m3", "e4m3", "float32", True)
        S = cfg.get("splits") or 1
        want = boundaries_of(model_partition(K, S)) if S > 1 else []
        ok = r == want
        agree_all = agree_all and ok
        any_split = any_split or bool(r)
        out[f"{M}x{N}x{K}"] = {"restarts": r, "splits_from_cublaslt": S, "mmaemu_partition_restarts": want,
                               "agrees": ok, "unexpected": odd[:8], "cublaslt": cfg}
    ctx.p4 = out
    if not any_split:
        v = "inconclusive" if agree_all else "rejected"
    else:
        v = "confirmed" if agree_all else "rejected"
    return {"verdict": v, "hypothesis_detail": "splits are contiguous K ranges cut on a 128 grain, "
            "ceil(ceil(K/128)/S)*128 each (mmaemu's rule), S as the heuristic reports",
            "workspace_note": os.environ.get("CUBLASLT_WORKSPACE_SIZE", "torch default"),
            "result": out}


def probe_p5(ctx):
    shapes = getattr(ctx, "p4", None)
    if shapes is None:
        probe_p4(ctx)
        shapes = ctx.p4
    target = None
    for name, r in shapes.items():
        if len(r["restarts"]) >= 1:
            target = (name, r)
            break
    if target is None:
        return {"verdict": "inconclusive", "result": {"reason": "no shape split in P4 with this workspace"}}
    name, r = target
    M, N, K = (int(x) for x in name.split("x"))
    starts = [0] + r["restarts"]
    S = len(starts)
    res = {"shape": name, "splits": S}
    big, tiny = (256.0, 256.0), (2.0 ** -5, 2.0 ** -4)     # +2^16 and 2^-9

    def vec_pair(assign):
        a, b = np.zeros(K), np.zeros(K)
        for s, kind in assign.items():
            k = starts[s]
            if kind == "+big":
                a[k], b[k] = big
            elif kind == "-big":
                a[k], b[k] = -big[0], big[1]
            else:
                a[k], b[k] = tiny
        return fp8_bytes_of(a, "e4m3"), fp8_bytes_of(b, "e4m3")
    orders = ["sequential", "reverse", "pairwise"]
    cases = []
    if S >= 3:
        import itertools
        for which in {(0, 1, 2), (S - 3, S - 2, S - 1)}:
            for perm in itertools.permutations(["+big", "-big", "tiny"]):
                cases.append(dict(zip(which, perm)))
    else:
        cases = [{0: "+big", 1: "tiny"}, {0: "tiny", 1: "-big"}]
    A = np.array([vec_pair(c)[0] for c in cases])
    B = np.array([vec_pair(c)[1] for c in cases])
    part = [(starts[i], starts[i + 1] if i + 1 < S else K) for i in range(S)]
    preds = {o: [model_dot(a, b, True, partition=part, order={"sequential": "serial"}.get(o, o))
                 for a, b in zip(A, B)] for o in orders}
    obs = f32_list(run_dots(ctx, A, B, fast=True, shape=(M, N)))
    sc = score(obs, preds)
    res["reduction_order"] = {"cases": [str(c) for c in cases], "observed": obs, "matches": sc}
    # epilogue placement: bf16 output, scale_a = 3; once after the reduction (model) or per split
    if S >= 2:
        rng = np.random.default_rng(55)
        reps = [x for x in (fp8_bytes_of([v], "e4m3")[0] for v in
                [1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875, 0.5625, 0.9375, 0.6875])]
        cand = []
        for i in range(2000):
            a, b = np.zeros(K, np.uint8), np.zeros(K, np.uint8)
            for s in range(min(S, 3)):
                a[starts[s]] = rng.choice(reps)
                b[starts[s]] = rng.choice(reps)
                if rng.random() < 0.5:
                    a[starts[s]] |= 0x80
            parts = [model_dot(a[k0:k1], b[k0:k1], True) for k0, k1 in part]
            reduced = bits_f32(xm.reduce_partials([f32_bits(p) for p in parts], "serial"))
            once = _to_bf16(model_scaled(reduced, 3.0, 1.0))
            per = _bf16_sum([_to_bf16(model_scaled(p, 3.0, 1.0)) for p in parts])
            if not same_bits(once, per):
                cand.append((a, b, once, per))
            if len(cand) >= (4 if ctx.quick else 16):
                break
        if cand:
            A2 = np.array([c[0] for c in cand])
            B2 = np.array([c[1] for c in cand])
            o2 = f32_list(run_dots(ctx, A2, B2, fast=True, out="bfloat16", shape=(M, N), sa=3.0))
            sc2 = score(o2, {"epilogue once after an fp32 reduction (model)": [c[2] for c in cand],
                             "epilogue per split, bf16 adds": [c[3] for c in cand]})
            res["epilogue_placement"] = {"vectors": len(cand), "matches": sc2}
    ok = sc.get("sequential") == len(obs)
    ep = res.get("epilogue_placement", {}).get("matches", {})
    if ep:
        ok = ok and ep.get("epilogue once after an fp32 reduction (model)") == res["epilogue_placement"]["vectors"]
    return {"verdict": "confirmed" if ok else "rejected",
            "hypothesis_detail": "partials added in fp32 in split order, epilogue once on the sum",
            "result": res}


def _to_bf16(x):
    return F32(torch.tensor([float(x)], dtype=torch.float32).to(torch.bfloat16).float().item())


def _bf16_sum(xs):
    r = xs[0]
    for x in xs[1:]:
        r = _to_bf16(F32(r + x))
    return r


# ------------------------------------------------------------------------------------------
# P6: K not a multiple of 32
# ------------------------------------------------------------------------------------------

def probe_p6(ctx):
    res = {}
    ok = True
    n = 16 if ctx.quick else 32
    for K in ([48] if ctx.quick else [16, 48, 80]):
        spec = dict(rows=n, cols=K, fmt="e4m3", seed=600 + K, exp_lo=0, exp_hi=15, zero_permille=100)
        A = gen_fp8_bytes(spec)
        spec["seed"] += 1
        B = gen_fp8_bytes(spec)
        for fast in (True, False):
            y = ctx.scaled_mm(A, B, "e4m3", "e4m3", "float32", fast)
            obs = [F32(x) for x in y.flatten().tolist()]
            pairs = [(A[i], B[j]) for i in range(n) for j in range(n)]
            hyps = {"groups of 32 from k=0, short last group (model)": dict(block=32),
                    "groups of 16": dict(block=16)}
            preds = {h: [model_dot(a, b, fast, **kw) for a, b in pairs] for h, kw in hyps.items()}
            if K % 32:
                # the short group first: groups start at K % 32
                off = K % 32
                preds["short group first"] = [
                    model_dot(a, b, fast, origin=off - 32) for a, b in pairs]
            sc = score(obs, preds)
            res[f"K={K} {'fast' if fast else 'non-fast'}"] = sc
            ok = ok and sc["groups of 32 from k=0, short last group (model)"] == len(obs)
    return {"verdict": "confirmed" if ok else "rejected", "result": res}


# ------------------------------------------------------------------------------------------
# P7: the epilogue's order of fp32 scale multiplications (and the bias add)
# ------------------------------------------------------------------------------------------

def probe_p7(ctx):
    K = 32
    rng = np.random.default_rng(77)
    mant = [1.125, 1.375, 1.625, 1.875, 1.75, 1.25, 1.5]
    accs_pairs = [(rng.choice(mant) * 2.0 ** int(rng.integers(-2, 3)), rng.choice(mant)) for _ in range(16)]
    A = np.array([vec(K, {0: a}) for a, _ in accs_pairs])
    B = np.array([vec(K, {0: b}) for _, b in accs_pairs])
    accs = [F32(a * b) for a, b in accs_pairs]
    orders = ["H1", "H2", "H3", "fused"]
    want = 6 if ctx.quick else 64
    scales = []
    while len(scales) < want:
        sa = F32(rng.uniform(0.1, 4.0))
        sb = F32(rng.uniform(0.1, 4.0))
        p = [[model_scaled(x, sa, sb, o) for x in accs] for o in orders]
        if any(len({f32_bits(q[i]) for q in p}) >= 3 for i in range(len(accs))):
            scales.append((sa, sb))
    tot = {o: 0 for o in orders}
    n = 0
    for sa, sb in scales:
        obs = f32_list(run_dots(ctx, A, B, fast=True, sa=float(sa), sb=float(sb)))
        for o in orders:
            tot[o] += sum(same_bits(x, model_scaled(acc, sa, sb, o)) for x, acc in zip(obs, accs))
        n += len(obs)
    full = sorted(o for o in orders if tot[o] == n)
    res = {"elements": n, "scale_pairs": len(scales), "matches": tot,
           "orders": {"H1": "fp32(fp32(sa*sb)*acc) (model)", "H2": "fp32(fp32(acc*sa)*sb)",
                      "H3": "fp32(fp32(acc*sb)*sa)", "fused": "one rounding of acc*sa*sb"}}
    if not ctx.dry:
        res["bias"] = _p7_bias(ctx, A, B, accs, full[0] if full else "H1")
    else:
        res["bias"] = {"skipped": "the CPU model has no bias (v0.1)"}
    v = "confirmed" if "H1" in full else ("rejected" if n else "inconclusive")
    return {"verdict": v, "matching_hypotheses": full, "result": res}


def _p7_bias(ctx, A, B, accs, order):
    """bf16 output with a bf16 bias: fp32(v) + bias then bf16 vs. one fused rounding."""
    try:
        rng = np.random.default_rng(78)
        M = N = 16
        biasv = torch.tensor(rng.uniform(-3, 3, size=N), dtype=torch.float32).to(torch.bfloat16)
        sa, sb = F32(1.3), F32(0.7)
        a = np.zeros((M, A.shape[1]), np.uint8)
        b = np.zeros((N, A.shape[1]), np.uint8)
        a[:len(A)] = A
        b[:len(B)] = B
        y = ctx.backend.scaled_mm(a, b, "e4m3", "e4m3", torch.bfloat16, True, sa, sb, bias=biasv)
        obs = [F32(x) for x in torch.diagonal(y).float().tolist()][:len(accs)]
        bias_f = [F32(x) for x in biasv.float().tolist()]
        sep = [_to_bf16(F32(model_scaled(acc, sa, sb, order) + bias_f[i])) for i, acc in enumerate(accs)]
        fused = [_to_bf16(F32(float(acc) * float(F32(sa * sb)) + float(bias_f[i]))) for i, acc in enumerate(accs)]
        return {"matches": score(obs, {"bf16(fp32(v) + bias)": sep, "bf16(fp32(fma(alpha, acc, bias)))": fused}),
                "elements": len(obs)}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}


# ------------------------------------------------------------------------------------------
# P8: special values
# ------------------------------------------------------------------------------------------

def probe_p8(ctx):
    try:
        import mmaemu
    except Exception as e:  # noqa: BLE001 - on a GPU box without the built extension
        mmaemu = None
        why = f"{type(e).__name__}: {e}"
    K = 32
    E5_INF, E5_NINF, E4_NAN, E4_NZERO = 0x7C, 0xFC, 0x7F, 0x80
    one = fp8_bytes_of([1.0], "e4m3")[0]
    cases = []

    def case(name, a_entries, b_entries, fa="e4m3", fb="e4m3", out="float32", sa=1.0, sb=1.0, sr=None,
             raw_a=None, raw_b=None):
        a = vec(K, a_entries, fa) if raw_a is None else raw_a
        b = vec(K, b_entries, fb) if raw_b is None else raw_b
        cases.append(dict(name=name, a=a, b=b, fa=fa, fb=fb, out=out, sa=sa, sb=sb, sr=sr))
    a_nan = vec(K, {0: 1.0, 1: 2.0})
    a_nan[2] = E4_NAN
    case("NaN input (e4m3 0x7F), fp32 out", None, {0: 1.0, 1: 1.0, 2: 1.0}, raw_a=a_nan)
    case("NaN input, bf16 out", None, {0: 1.0, 1: 1.0, 2: 1.0}, raw_a=a_nan, out="bfloat16")
    b_inf = vec(K, {0: 1.0}, "e5m2")
    b_inf[1] = E5_INF
    case("+Inf (e5m2) x 1, e4m3 x e5m2", {0: 1.0, 1: 1.0}, None, fb="e5m2", raw_b=b_inf)
    b_pm = vec(K, {}, "e5m2")
    b_pm[0], b_pm[1] = E5_INF, E5_NINF
    case("+Inf and -Inf products", {0: 1.0, 1: 1.0}, None, fb="e5m2", raw_b=b_pm)
    b_z = vec(K, {}, "e5m2")
    b_z[0] = E5_INF
    case("Inf x 0", {0: 0.0}, None, fb="e5m2", raw_b=b_z)
    a_nz = np.full(K, E4_NZERO, np.uint8)
    case("all products -0", None, None, raw_a=a_nz, raw_b=np.full(K, one, np.uint8))
    case("scale_a = -1, zero accumulator", {}, {}, sa=-1.0)
    case("e4m3 output, v = 1000 > 448", {0: 32.0}, {0: 31.25 if False else 32.0}, out="float8_e4m3fn", sa=1000 / 1024)
    case("e5m2 output, v = 70000 > 57344 (mixed inputs)", {0: 256.0}, {0: 256.0}, fb="e5m2",
         out="float8_e5m2", sa=70000 / 65536)
    case("fp16 output, v = 70000 > 65504", {0: 256.0}, {0: 256.0}, out="float16", sa=70000 / 65536)
    case("bf16 output, fp32 overflow of the scaled value", {0: 448.0}, {0: 448.0}, out="bfloat16",
         sa=2.0 ** 120, sb=2.0 ** 10)
    case("e4m3 output with scale_result, v*sr > 448", {0: 16.0}, {0: 16.0}, out="float8_e4m3fn", sr=3.0)
    case("fp32 output, e4m3 NaN input payload", None, {0: 1.0}, raw_a=a_nan)
    case("subnormal fp32 result (scale 2^-140)", {0: 1.5}, {0: 1.25}, sa=2.0 ** -70, sb=2.0 ** -70)
    rows = []
    mism = 0
    for c in cases:
        for fast in (True, False):
            entry = {"case": c["name"], "fast": fast, "out": c["out"]}
            try:
                y = run_dots(ctx, c["a"][None], c["b"][None], c["fa"], c["fb"], fast, c["out"],
                             sa=c["sa"], sb=c["sb"], sr=c["sr"])
                entry["observed_bits"] = bits_list(y)[0]
                entry["observed"] = repr(float(y.float()[0]))
            except Exception as e:  # noqa: BLE001
                entry["observed_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            try:
                if mmaemu is None:
                    raise RuntimeError(f"mmaemu unavailable here ({why}); compare offline")
                ym = _model_scaled(mmaemu, c, fast)
                entry["model_bits"] = bits_list(ym)[0]
                entry["model"] = repr(float(ym.float()[0]))
            except Exception as e:  # noqa: BLE001
                entry["model_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            entry["same"] = entry.get("observed_bits") == entry.get("model_bits") and "observed_bits" in entry
            mism += 0 if entry["same"] else 1
            rows.append(entry)
    if mmaemu is None:
        return {"verdict": "recorded", "result": {"cases": rows, "note": "no model comparison: " + why}}
    return {"verdict": "confirmed" if mism == 0 else "rejected",
            "hypothesis_detail": "mmaemu's special-value rules (IEEE-like NaN/Inf, +0 for exact zeros, "
                                 "output conversions as in mmaemu_formats.h)",
            "result": {"cases": rows, "differences": mism}}


def _model_scaled(mmaemu, c, fast):
    K = len(c["a"])
    a = np.zeros((16, K), np.uint8)
    b = np.zeros((16, K), np.uint8)
    a[0], b[0] = c["a"], c["b"]
    from ._hwcommon import fp8_tensor
    A, B = fp8_tensor(a, c["fa"]), fp8_tensor(b, c["fb"])
    sr = None if c["sr"] is None else torch.tensor(float(F32(c["sr"])))
    y = mmaemu.scaled_mm(A, B.t(), torch.tensor(float(F32(c["sa"]))), torch.tensor(float(F32(c["sb"]))),
                         scale_result=sr, out_dtype=OUT_DTYPES[c["out"]], use_fast_accum=fast,
                         backend="reference", splitk=1)
    return y[0, :1]


# ------------------------------------------------------------------------------------------
# P9: subnormal accumulator (raw wgmma only)
# ------------------------------------------------------------------------------------------

def probe_p9(ctx):
    raw = ctx.raw_backend()
    if raw is None:
        return {"verdict": "skipped", "result": {"reason": ctx.raw_reason}}
    rng = np.random.default_rng(99)
    C = []
    for _ in range(16 if ctx.quick else 64):
        e = int(rng.integers(-149, -126))
        C.append(F32(np.ldexp(1.0 + rng.random(), e)) * (1 if rng.random() < 0.5 else -1))
    C += [F32(2.0 ** -126 * 1.999), F32(2.0 ** -130 * 1.234567), F32(2.0 ** -149), F32(-(2.0 ** -140))]
    T = len(C)
    A = np.zeros((T, 32), np.uint8)
    B = np.zeros((T, 32), np.uint8)
    obs = raw_dots(ctx, "wgmma", A, B, np.array(C, np.float32), c_mode=1)

    def grid(c, lsb):
        q = math.floor(abs(float(c)) / 2.0 ** lsb) * 2.0 ** lsb
        return F32(math.copysign(q, float(c))) if q else F32(0.0)
    hyps = {"model: 2^-139 grid, truncated": [F32(bits_f32(xm.block_fma((), f32_bits(c), "hopper")))
                                              for c in C],
            "no truncation (2^-149 grid)": [F32(c) for c in C],
            "flush to zero": [F32(0.0) for _ in C],
            "2^-139 grid, sign kept on zero": [grid(c, -139) if grid(c, -139) != 0 else F32(math.copysign(0.0, float(c))) for c in C]}
    sc = score(obs, hyps)
    v, full = verdict_from(sc, T, "model: 2^-139 grid, truncated")
    res = {"values": T, "matches": sc}
    if raw != "model":
        om = raw_dots(ctx, "mma", A[:, :32], B[:, :32], np.array(C, np.float32), c_mode=1)
        res["mma_sync_matches"] = score(om, hyps)
    return {"verdict": v, "matching_hypotheses": full, "result": res}


# ------------------------------------------------------------------------------------------
# P10: heuristic census
# ------------------------------------------------------------------------------------------

def census_shapes(quick):
    if quick:
        return [(16, 16, 4096), (128, 5760, 1920)]
    NK = [(5760, 1920), (1920, 1920), (4096, 4096), (11008, 4096), (4096, 11008),
          (16, 65536), (128, 16384), (256, 8192), (1536, 6144), (32, 32768)]
    return [(M, N, K) for M in (1, 16, 128, 1024, 8192) for N, K in NK]


def probe_p10(ctx):
    rows = []
    lt = ctx.lt
    if ctx.dry:
        lt = _cublaslt.SyntheticLt()
    ws_env = os.environ.get("CUBLASLT_WORKSPACE_SIZE")
    ws_proc = int(ws_env) * 1024 if ws_env not in (None, "") else 1 << 20
    ptrs = (0, 0)
    if not ctx.dry:
        sa_t = torch.ones(1, device="cuda")
        ptrs = (sa_t.data_ptr(), sa_t.data_ptr())
    for M, N, K in census_shapes(ctx.quick):
        for fast in (True, False):
            entry = {"M": M, "N": N, "K": K, "fast_accum": fast}
            if not ctx.dry:
                try:
                    A = np.zeros((M, K), np.uint8)
                    B = np.zeros((N, K), np.uint8)
                    ctx.scaled_mm(A, B, "e4m3", "e4m3", "bfloat16", fast)
                    entry["ran"] = ctx.config(M, N, K, "e4m3", "e4m3", "bfloat16", fast)
                    entry["ran"].pop("raw", None)
                except Exception as e:  # noqa: BLE001
                    entry["ran"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            if lt is not None:
                for ws in sorted({ws_proc, 1 << 20, 32 << 20, 0}):
                    try:
                        h = lt.heuristic(M, N, K, "e4m3", "e4m3", "bfloat16", fast, ws, scale_ptrs=ptrs)
                        if h:
                            h.pop("algo_bytes", None)
                        entry[f"heuristic_ws{ws}"] = h
                    except Exception as e:  # noqa: BLE001
                        entry[f"heuristic_ws{ws}"] = {"error": str(e)[:200]}
            ran, hq = entry.get("ran") or {}, entry.get(f"heuristic_ws{ws_proc}") or {}
            if ran.get("splits") is not None and hq.get("splits") is not None:
                entry["ctypes_matches_trace"] = (ran.get("splits") == hq.get("splits") and
                                                 ran.get("algo") == hq.get("algo"))
            rows.append(entry)
    agree = [r["ctypes_matches_trace"] for r in rows if "ctypes_matches_trace" in r]
    res = {"rows": rows, "process_workspace_bytes": ws_proc,
           "ctypes_vs_trace": f"{sum(agree)} of {len(agree)} agree" if agree else "no comparison",
           "synthetic": ctx.dry}
    if ctx.dry:
        return {"verdict": "skipped", "result": res,
                "note": "dry run: heuristic answers are synthetic, the table logic ran"}
    return {"verdict": "confirmed" if agree and all(agree) else "inconclusive", "result": res,
            "hypothesis_detail": "the ctypes descriptor reproduces torch's heuristic answer"}


# ------------------------------------------------------------------------------------------

PROBES = {
    "P0": ("wgmma == cuBLAS path == model on K=32 vectors", probe_p0),
    "P1": ("the accumulator C joins the 32-product block (fast accumulation)", probe_p1),
    "P2": ("terms and 14-bit block result are truncated toward zero", probe_p2),
    "P3": ("non-fast accumulation promotes every 128 k into fp32 (RN add)", probe_p3),
    "P4": ("split-K restart points follow mmaemu's contiguous partition", probe_p4),
    "P5": ("split partials are added in fp32 in split order, epilogue once", probe_p5),
    "P6": ("K not a multiple of 32: groups of 32 from k=0, short last group", probe_p6),
    "P7": ("epilogue H1: fp32(fp32(scale_a*scale_b)*acc)", probe_p7),
    "P8": ("special values follow mmaemu's rules", probe_p8),
    "P9": ("a subnormal accumulator is truncated to the 2^-139 grid", probe_p9),
    "P10": ("heuristic census: the ctypes query reproduces torch's choice", probe_p10),
}


# ------------------------------------------------------------------------------------------
# Row-wise scales and bias (research note rowwise.md section 5): the epilogue's rounding order,
# the sign of a zero result, and end-to-end agreement with mmaemu. These call torch._scaled_mm
# with row-wise scale vectors and bias themselves (the shared backend passes scalar scales);
# a dry run computes them with mmaemu.scaled_mm instead.
# ------------------------------------------------------------------------------------------

def _rw_scaled_mm(ctx, a_u8, b_u8, fa, scale_a, scale_b, bias, out_dtype, fast):
    """out = a @ b.T with FP8 bytes a [M, K], b [N, K]; scale_a / scale_b: fp32 tensors
    (one element each, or [M, 1] / [1, N]); bias: a tensor or None. Returns the CPU output."""
    from ._hwcommon import fp8_tensor
    a, b = fp8_tensor(a_u8, fa), fp8_tensor(b_u8, "e4m3")
    if ctx.dry:
        import mmaemu
        return mmaemu.scaled_mm(a, b.t(), scale_a, scale_b, bias=bias, out_dtype=out_dtype,
                                use_fast_accum=bool(fast), splitk=1, backend="reference")
    dev = ctx.backend.dev
    kw = {} if bias is None else {"bias": bias.to(dev)}
    out = torch._scaled_mm(a.to(dev), b.to(dev).t(), scale_a.to(dev), scale_b.to(dev),
                           out_dtype=out_dtype, use_fast_accum=bool(fast), **kw)
    torch.cuda.synchronize()
    return out.cpu()


def _fma32(a, b, c):
    """fmaf on float32 arrays, exactly: a*b is exact in double; where the double sum is exact
    (TwoSum error 0) its fp32 rounding is fmaf's, elsewhere exact rational arithmetic decides."""
    from fractions import Fraction
    a, b, c = np.broadcast_arrays(*(np.asarray(x, np.float32) for x in (a, b, c)))
    p = a.astype(np.float64) * b.astype(np.float64)
    cd = c.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + cd
        bv = s - p
        err = (p - (s - bv)) + (cd - bv)
        out = s.astype(np.float32)
    for idx in zip(*np.nonzero(np.isfinite(s) & (err != 0))):
        fr = Fraction(float(p[idx])) + Fraction(float(cd[idx]))
        cand = out[idx]
        cands = [x for x in (cand, np.nextafter(cand, np.float32(np.inf)),
                             np.nextafter(cand, np.float32(-np.inf))) if np.isfinite(x)]
        out[idx] = min(cands, key=lambda x: (abs(Fraction(float(x)) - fr),
                                             int(np.float32(x).view(np.uint32)) & 1))
    return out


# The candidate epilogues on float32 arrays: acc [M, N], per-row and per-column scales sa
# [M, 1], sb [1, N] (tensor-wise: broadcast scalars), bias b [1, N].
def _mul(x, y):
    return (np.asarray(x, np.float32) * np.asarray(y, np.float32)).astype(np.float32)


_EPILOGUE_CANDIDATES = {
    "fma(fp32(sa*sb), acc, b)": lambda acc, sa, sb, b: _fma32(_mul(sa, sb), acc, b),
    "fp32(fp32(sa*sb)*acc) + b": lambda acc, sa, sb, b: _mul(_mul(sa, sb), acc) + b,
    "fma(fp32(acc*sa), sb, b)": lambda acc, sa, sb, b: _fma32(_mul(acc, sa), sb, b),
    "fma(fp32(acc*sb), sa, b)": lambda acc, sa, sb, b: _fma32(_mul(acc, sb), sa, b),
    "fp32(fp32(acc*sa)*sb) + b": lambda acc, sa, sb, b: _mul(_mul(acc, sa), sb) + b,
}


def _predict(acc, sa, sb, bias, out_dtype):
    """{candidate: output bit patterns (list)}."""
    out = {}
    for c, f in _EPILOGUE_CANDIDATES.items():
        v = np.asarray(f(acc, sa, sb, bias), np.float32)
        out[c] = bits_list(torch.from_numpy(v.copy()).to(out_dtype).reshape(-1))
    return out


def probe_rowwise_epilogue_order(ctx):
    """Exact accumulators (one product of small FP8 values per output), random fp32 scales and
    a bias: how many outputs each candidate epilogue reproduces, for tensor-wise + bias (bf16,
    fp16, e4m3 outputs) and row-wise (bf16, with and without bias). The bias of column j
    cancels the leading bits of output (j, j), where one rounding and two differ most often;
    only scale sets under which the candidates disagree somewhere are run."""
    rng = np.random.default_rng(514)
    M = N = 64
    K = 32
    want = 2 if ctx.quick else 24
    mant = [1.0, 1.125, 1.375, 1.625, 1.875, 1.25, 1.5, 1.75]
    xa = [rng.choice(mant) * 2.0 ** int(rng.integers(-3, 4)) * rng.choice([-1, 1]) for _ in range(M)]
    xb = [rng.choice(mant) * 2.0 ** int(rng.integers(-3, 4)) for _ in range(N)]
    A = np.array([vec(K, {0: v}) for v in xa])
    B = np.array([vec(K, {0: v}) for v in xb])
    acc = (np.array(xa, np.float32)[:, None] * np.array(xb, np.float32)[None, :]).astype(np.float32)
    res = {"torch": torch.__version__}
    settings = [("tensorwise+bias bf16", torch.bfloat16, torch.bfloat16, False),
                ("tensorwise+bias f16", torch.float16, torch.float16, False),
                ("tensorwise+bias e4m3", torch.float8_e4m3fn, torch.bfloat16, False),
                ("rowwise", torch.bfloat16, None, True),
                ("rowwise+bias", torch.bfloat16, torch.bfloat16, True)]
    for name, out_dtype, bias_dtype, rowwise in settings:
        counts = {c: 0 for c in _EPILOGUE_CANDIDATES}
        n = used = 0
        for _ in range(20 * want):
            if used == want:
                break
            if rowwise:
                sa = rng.uniform(0.05, 2.0, size=(M, 1)).astype(np.float32)
                sb = rng.uniform(0.05, 2.0, size=(1, N)).astype(np.float32)
            else:
                sa = np.full((1, 1), rng.uniform(0.05, 2.0), np.float32)
                sb = np.full((1, 1), rng.uniform(0.05, 2.0), np.float32)
            if bias_dtype is None:
                bias, bf = None, np.zeros((1, N), np.float32)
            else:
                lead = _mul(_mul(acc, sa), sb)[np.arange(N), np.arange(N)]
                if out_dtype == torch.float8_e4m3fn:
                    lead = lead * np.float32(rng.uniform(0.5, 1.5))
                bias = -torch.from_numpy(lead.astype(np.float32)).to(bias_dtype)
                bf = bias.float().numpy().reshape(1, N)
            pred = _predict(acc, sa, sb, bf, out_dtype)
            if len({tuple(v) for v in pred.values()}) < 2:
                continue                      # no output tells the candidates apart
            st = torch.from_numpy(sa) if rowwise else torch.tensor(float(sa[0, 0]))
            sn = torch.from_numpy(sb) if rowwise else torch.tensor(float(sb[0, 0]))
            y = _rw_scaled_mm(ctx, A, B, "e4m3", st, sn, bias, out_dtype, True)
            obs = bits_list(y.reshape(-1))
            for c, v in pred.items():
                counts[c] += sum(o == q for o, q in zip(obs, v))
            n += len(obs)
            used += 1
        res[name] = {"elements": n, "scale_sets": used, "matches": counts}
    tw = [k for k in res if k.startswith("tensorwise")]
    full_tw = sorted(c for c in _EPILOGUE_CANDIDATES
                     if all(res[k]["matches"][c] == res[k]["elements"] for k in tw))
    n_tw = sum(res[k]["elements"] for k in tw)
    verdict = "confirmed" if "fma(fp32(sa*sb), acc, b)" in full_tw else \
        ("rejected" if n_tw else "inconclusive")
    return {"verdict": verdict, "matching_hypotheses": full_tw, "result": res}


def probe_rowwise_signed_zero(ctx):
    """A zero accumulator times a negative scale (a -0 product): output bits with no bias, a
    +0 and a -0 bias, tensor-wise (bf16 out) and row-wise, against what mmaemu computes."""
    import mmaemu
    from ._hwcommon import fp8_tensor
    K, M, N = 32, 16, 16
    A = np.zeros((M, K), np.uint8)
    A[:, 0] = 0x80                                            # -0: every product is a zero
    B = np.array([vec(K, {0: 1.0}) for _ in range(N)])
    observed, model = {}, {}
    for label, bias in (("no bias", None), ("+0 bias", torch.zeros(N, dtype=torch.bfloat16)),
                        ("-0 bias", -torch.zeros(N, dtype=torch.bfloat16))):
        for kind, sa, sb in (("tensorwise", torch.tensor(-1.0), torch.tensor(1.0)),
                             ("rowwise", -torch.ones(M, 1), torch.ones(1, N))):
            y = _rw_scaled_mm(ctx, A, B, "e4m3", sa, sb, bias, torch.bfloat16, True)
            observed[f"{kind}, {label}"] = sorted(set(bits_list(y.reshape(-1))))
            m = mmaemu.scaled_mm(fp8_tensor(A, "e4m3"), fp8_tensor(B, "e4m3").t(), sa, sb,
                                 bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True,
                                 splitk=1, profile="hopper")
            model[f"{kind}, {label}"] = sorted(set(bits_list(m.reshape(-1))))
    ok = observed == model
    return {"verdict": "confirmed" if ok else "rejected",
            "result": {"torch": torch.__version__, "observed": observed, "model": model}}


def _rand_fp8(rng, shape, fmt, spread=4.0):
    dtype = torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2
    x = torch.tensor(rng.normal(0, spread, size=shape), dtype=torch.float32).clamp(-448, 448)
    return x.to(dtype).view(torch.uint8).numpy()


def probe_rowwise_end_to_end(ctx):
    """Random data against mmaemu.scaled_mm (profile hopper): K in {16, 112, 128, 4096, 4112},
    fast on/off, bias none/bf16, E4M3/E5M2 mat1, row-wise scales; and tensor-wise with a bias
    (splitk=1: cuBLASLt's own split is recorded by P4/P10, a mismatch here may be a split)."""
    import mmaemu
    from ._hwcommon import fp8_tensor
    rng = np.random.default_rng(2026)
    M, N = (16, 32) if ctx.quick else (64, 256)
    Ks = (16, 128) if ctx.quick else (16, 112, 128, 4096, 4112)
    rows = []
    for K in Ks:
        for fast in (False, True):
            for fa in ("e4m3", "e5m2"):
                for with_bias in (False, True):
                    A = _rand_fp8(rng, (M, K), fa)
                    B = _rand_fp8(rng, (N, K), "e4m3")
                    sa = torch.tensor(rng.uniform(0.01, 1.0, size=(M, 1)), dtype=torch.float32)
                    sb = torch.tensor(rng.uniform(0.01, 1.0, size=(1, N)), dtype=torch.float32)
                    bias = torch.tensor(rng.normal(0, 8, size=N), dtype=torch.float32).to(
                        torch.bfloat16) if with_bias else None
                    y = _rw_scaled_mm(ctx, A, B, fa, sa, sb, bias, torch.bfloat16, fast)
                    a, b = fp8_tensor(A, fa), fp8_tensor(B, "e4m3")
                    want = mmaemu.scaled_mm(a, b.t(), sa, sb, bias=bias, out_dtype=torch.bfloat16,
                                            use_fast_accum=fast, profile="hopper")
                    same = int((y.view(torch.int16) == want.view(torch.int16)).sum())
                    rows.append({"kind": "rowwise", "K": K, "fast": fast, "fmt_a": fa,
                                 "bias": with_bias, "equal": same, "elements": M * N})
                    if with_bias and fa == "e4m3":
                        s1, s2 = torch.tensor(0.37), torch.tensor(1.9)
                        y = _rw_scaled_mm(ctx, A, B, fa, s1, s2, bias, torch.bfloat16, fast)
                        want = mmaemu.scaled_mm(a, b.t(), s1, s2, bias=bias, splitk=1,
                                                out_dtype=torch.bfloat16, use_fast_accum=fast)
                        same = int((y.view(torch.int16) == want.view(torch.int16)).sum())
                        rows.append({"kind": "tensorwise+bias", "K": K, "fast": fast,
                                     "fmt_a": fa, "bias": True, "equal": same,
                                     "elements": M * N})
    rw_ok = all(r["equal"] == r["elements"] for r in rows if r["kind"] == "rowwise")
    tw_ok = all(r["equal"] == r["elements"] for r in rows if r["kind"] != "rowwise")
    verdict = "confirmed" if rw_ok and tw_ok else "rejected"
    return {"verdict": verdict, "result": {"torch": torch.__version__, "rows": rows,
                                           "rowwise_all_equal": rw_ok,
                                           "tensorwise_bias_all_equal": tw_ok}}


PROBES.update({
    "rowwise_epilogue_order": ("bias epilogue: fmaf(fp32(scale_a*scale_b), acc, bias) (tensor-wise), "
                               "fmaf(fp32(acc*s1), s2, bias) (row-wise)", probe_rowwise_epilogue_order),
    "rowwise_signed_zero": ("a -0 accumulator gives +0 unless the bias is -0", probe_rowwise_signed_zero),
    "rowwise_end_to_end": ("row-wise and biased GEMMs equal mmaemu bit for bit", probe_rowwise_end_to_end),
})



# ------------------------------------------------------------------------------------------
# torch's own block-wise path (DeepSeek's 1x128 / 128x128 recipe through cuBLASLt's VEC128 /
# BLK128x128 scales): docs/semantics.md 8d and the probes it lists.
# cuBLASLt's kernels are closed (docs/semantics.md 8d), so mmaemu models this path as DeepGEMM's
# 1d2d
# arithmetic (mmaemu/blockwise.py, 'cublaslt'); this probe scores that model and its rivals.
# Every operand is a small integer (or a power of two) so each 128-k chain is exact and the
# hypotheses differ only in how the groups are scaled, promoted and added.
# ------------------------------------------------------------------------------------------

BW_GROUP = 128                      # k per scale group and rows/columns per 128x128 block
BW_UPDATES = xm.BLOCKWISE_UPDATES   # ('ffma', 'mul_add', 'per_elem'), exactmodel.blockwise_update
BW_MODEL = "ffma/128"     # mmaemu's 'cublaslt' model: DeepGEMM 1d2d (docs/semantics.md 8d)
BW_SPLITS = (2, 4, 8)
BW_HYPOTHESES = {
    **{f"{u}/{p}": f"update {u!r} (exactmodel.blockwise_update), " + {
        "128": "a chain per 128-k group, promoted into an fp32 accumulator from +0, ascending k",
        "32": "every 32-k wgmma promoted alone (with its group's scales)",
        "fast": "one chain over all of K, scaled once (only where every group has the same scales)",
    }[p] for u in BW_UPDATES for p in ("128", "32", "fast")},
    **{f"ffma/128/split{S}": f"K cut into {S} contiguous 128-grain ranges (exactmodel.split_ranges), "
       "each folded as ffma/128 from +0, the partials added in fp32 in order" for S in BW_SPLITS},
    "ffma/128/descending": "ffma/128 with the groups folded from the last k group to the first",
    # docs/semantics.md 8d: a first FMUL without a +0 addend keeps a -0 product
    "ffma/128/first-fmul": "ffma/128 but the first group by FMUL alone (no +0 addend): -0 survives",
}


def _bw_cdiv(a, b):
    return -(-a // b)


def blockwise_hypotheses(a_row, b_row, sa_groups, sb_groups):
    """{hypothesis: fp32 accumulator bits, or None where it cannot apply} for one element: the K
    E4M3 codes of row m of A and of column n of B, and the fp32 scale bits of each 128-k group
    for this row (scale_a[m][g]) and column (the 128x128 block scale of n // 128)."""
    a, b = [int(x) for x in a_row], [int(x) for x in b_row]
    K = len(a)
    sa, sb = list(sa_groups), list(sb_groups)
    pred = {}
    for u in BW_UPDATES:
        pred[f"{u}/128"] = xm.blockwise_accumulator(a, b, sa, sb, update=u)
        # a 32-k promotion still takes the scales of the 128-k group the wgmma lies in
        pred[f"{u}/32"] = xm.blockwise_accumulator(a, b, [s for s in sa for _ in range(4)],
                                                   [s for s in sb for _ in range(4)], update=u,
                                                   gran_k=32)
        # one uninterrupted chain can only carry one scale pair
        uniform = len(set(sa)) == 1 and len(set(sb)) == 1
        pred[f"{u}/fast"] = xm.blockwise_update(
            0, xm.chain(a, b, "e4m3", "e4m3", 0, K, 0, "hopper"), sa[0], sb[0], u) if uniform else None
    for S in BW_SPLITS:
        ranges = [(k0, k1) for k0, k1 in xm.split_ranges(K, S) if k1 > k0]
        parts = [xm.blockwise_accumulator(a[k0:k1], b[k0:k1], sa[k0 // BW_GROUP:],
                                          sb[k0 // BW_GROUP:]) for k0, k1 in ranges]
        pred[f"ffma/128/split{S}"] = xm.reduce_partials(parts, "serial") if len(parts) > 1 else None
    chains = [xm.chain(a, b, "e4m3", "e4m3", k0, min(k0 + BW_GROUP, K), 0, "hopper")
              for k0 in range(0, K, BW_GROUP)]
    acc = 0
    for g in reversed(range(len(chains))):
        acc = xm.blockwise_update(acc, chains[g], sa[g], sb[g], "ffma")
    pred["ffma/128/descending"] = acc
    acc = xm.f32_mul(xm.f32_mul(sa[0], sb[0]), chains[0])
    for g in range(1, len(chains)):
        acc = xm.blockwise_update(acc, chains[g], sa[g], sb[g], "ffma")
    pred["ffma/128/first-fmul"] = acc
    return pred


def _bw_row(K, entries):
    """E4M3 codes of a length-K row: {k: value} (values) or {k: ('code', c)} (raw codes)."""
    row = np.zeros(K, np.uint8)
    for k, v in entries.items():
        row[k] = v[1] if isinstance(v, tuple) else fp8_bytes_of([v], "e4m3")[0]
    return row


def _bw_vector(item, label, K, a, b, sa, sb):
    """One probe element: rows of codes and one fp32 scale per group on each side (floats)."""
    L = _bw_cdiv(K, BW_GROUP)
    sa = list(sa) + [1.0] * (L - len(sa))
    sb = list(sb) + [1.0] * (L - len(sb))
    return {"item": item, "label": label, "K": K, "a": _bw_row(K, a), "b": _bw_row(K, b),
            "sa": [f32_bits(F32(x)) for x in sa], "sb": [f32_bits(F32(x)) for x in sb]}


def blockwise_fixed_vectors(quick=False):
    """The vectors of docs/semantics.md 8d's first probe (its items 1-5)."""
    e23, e22 = 2.0 ** -23, 2.0 ** -22
    vs = []
    # 1. FFMA vs FMUL+FADD vs per element: each group's chain is 1 + 2^-13 (0x38*0x38 +
    #    0x01*0x18); the two scaled groups cancel except for what the update rounds away.
    one_p = ({0: ("code", 0x38), 1: ("code", 0x01), 128: ("code", 0x38), 129: ("code", 0x01)},
             {0: ("code", 0x38), 1: ("code", 0x18), 128: ("code", 0x38), 129: ("code", 0x18)})
    vs.append(_bw_vector(1, "sa=(-(1+2^-23), 1+2^-23), sb=1", 256, *one_p,
                         [-(1 + e23), 1 + e23], [1.0, 1.0]))
    vs.append(_bw_vector(1, "sa=(-(1+2^-22), 1+2^-23), sb=(1, 1+2^-23)", 256, *one_p,
                         [-(1 + e22), 1 + e23], [1.0, 1 + e23]))
    # 2. the scales' product first vs one operand at a time: fp32(sa*sb) rounds, p = 3
    vs.append(_bw_vector(2, "sa=sb=1+2^-23, p=3", 128, {0: 3.0}, {0: 1.0}, [1 + e23], [1 + e23]))
    rng = np.random.default_rng(346)
    tries = 0
    while sum(v["item"] == 2 for v in vs) < (3 if quick else 9) and tries < 1000:
        tries += 1
        sa, sb = F32(rng.uniform(1, 2)), F32(rng.uniform(1, 2))
        p = float(rng.choice([3, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15]))
        v = _bw_vector(2, f"sa={float(sa)!r}, sb={float(sb)!r}, p={p:g}", 128, {0: p}, {0: 1.0},
                       [sa], [sb])
        h = blockwise_hypotheses(v["a"], v["b"], v["sa"], v["sb"])
        if h["ffma/128"] != h["per_elem/128"]:      # only pairs that tell the two apart
            vs.append(v)
    # 3. promotion interval: 32*32 = 2^10 at k=0, 1*0.0625 at every other k; 1048 (128), 1054
    #    (32), 1024 (one chain) with unit scales; again with uniform non-unit scales.
    a3 = {k: 1.0 for k in range(1, 512)}
    b3 = {k: 0.0625 for k in range(1, 512)}
    a3[0], b3[0] = 32.0, 32.0
    vs.append(_bw_vector(3, "2^10 + 511 * 0.0625, unit scales", 512, a3, b3, [1.0] * 4, [1.0] * 4))
    vs.append(_bw_vector(3, "2^10 + 511 * 0.0625, sa=1.5, sb=0.75", 512, a3, b3, [1.5] * 4,
                         [0.75] * 4))
    # 4. order of groups / split-K, K = 4096 (32 groups): +x in group 0 and -x in the last
    #    (x set by the scale), small terms between that an fp32 accumulator near x absorbs.
    K4, L4 = 4096, 32
    for e, small in ((25, 1.0), (25, 3.0), (24, 0.5)):
        a = {BW_GROUP * g: 1.0 for g in range(L4 - 1)}
        a[BW_GROUP * (L4 - 1)] = -1.0
        sa = [2.0 ** e] + [small] * (L4 - 2) + [2.0 ** e]
        vs.append(_bw_vector(4, f"+2^{e}, {L4 - 2} x {small:g}, -2^{e}", K4, a,
                             {BW_GROUP * g: 1.0 for g in range(L4)}, sa, [1.0] * L4))
    a = {0: 3.0, BW_GROUP: 1.0, BW_GROUP * (L4 - 1): -1.0}
    sa = [1.0, 2.0 ** 25] + [1.0] * (L4 - 3) + [2.0 ** 25]
    vs.append(_bw_vector(4, "3 first, then +2^25, -2^25 in the last group", K4, a,
                         {0: 1.0, BW_GROUP: 1.0, BW_GROUP * (L4 - 1): 1.0}, sa, [1.0] * L4))
    # 5. sign of zero: A all zero, negative scale products
    b5 = {k: float(v) for k, v in enumerate([1, -2, 3, 0.5] * 64)}
    vs.append(_bw_vector(5, "A = +0, sa=(-1.5, -0.75), sb=1", 256, {}, b5, [-1.5, -0.75], [1.0, 1.0]))
    vs.append(_bw_vector(5, "A = -0 codes, sa=1, sb=(-1, -3)", 256, {k: ("code", 0x80) for k in range(256)},
                         b5, [1.0, 1.0], [-1.0, -3.0]))
    return vs


def _bw_pack(name, vectors):
    """Vectors of one K as one GEMM: vector t in row t of A and column 128*t of the weight, so
    that its B block scale (one per 128 columns) is its own; the rest of the block is zero."""
    K = vectors[0]["K"]
    L = _bw_cdiv(K, BW_GROUP)
    M, N = 16 * _bw_cdiv(len(vectors), 16), BW_GROUP * len(vectors)
    A, B = np.zeros((M, K), np.uint8), np.zeros((N, K), np.uint8)
    sa = np.ones((M, L), np.float32)
    sb = np.ones((len(vectors), L), np.float32)
    for t, v in enumerate(vectors):
        A[t], B[BW_GROUP * t] = v["a"], v["b"]
        sa[t] = [bits_f32(u) for u in v["sa"]]
        sb[t] = [bits_f32(u) for u in v["sb"]]
    return {"name": name, "A": A, "B": B, "sa": sa, "sb": sb,
            "elements": [(t, BW_GROUP * t) for t in range(len(vectors))], "vectors": vectors}


def _bw_random_case(name, M, N, K, seed, rows, cols):
    """Random small integers (|x| <= 6, a fifth zeros) and random fp32 scales with full
    mantissas and either sign; the elements read are rows x cols of the output."""
    rng = np.random.default_rng(seed)
    ints = np.array([0, 0, 0, 1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6], float)
    A = fp8_bytes_of(rng.choice(ints, size=(M, K)).ravel(), "e4m3").reshape(M, K)
    B = fp8_bytes_of(rng.choice(ints, size=(N, K)).ravel(), "e4m3").reshape(N, K)
    L, nb = _bw_cdiv(K, BW_GROUP), _bw_cdiv(N, BW_GROUP)

    def scales(shape):
        s = rng.uniform(0.125, 8.0, size=shape) * np.where(rng.random(shape) < 0.25, -1, 1)
        return s.astype(np.float32)
    return {"name": name, "A": A, "B": B, "sa": scales((M, L)), "sb": scales((nb, L)),
            "elements": [(m, n) for m in rows for n in cols], "vectors": None}


def blockwise_cases(quick=False):
    """The probe's GEMMs: one per K of the fixed vectors, then the random ones (K = 384:
    ceil(K/128) = 3, so scale_b's padding to 4 rows matters; K = 208: a short last group)."""
    fixed = blockwise_fixed_vectors(quick)
    cases = []
    for K in sorted({v["K"] for v in fixed}):
        cases.append(_bw_pack(f"items K={K}", [v for v in fixed if v["K"] == K]))
    rows = range(4) if quick else range(16)
    cases.append(_bw_random_case("random 16x256x384", 16, 256, 384, 4610, rows, range(0, 256, 16)))
    cases.append(_bw_random_case("random 16x128x208", 16, 128, 208, 4611, rows, range(0, 128, 8)))
    return cases


def _bw_element_inputs(case, m, n):
    """(a_row, b_row, sa_groups, sb_groups) of output element (m, n) of a case, as Python ints
    (the exact model's arithmetic on numpy uint8 codes would wrap)."""
    return ([int(x) for x in case["A"][m]], [int(x) for x in case["B"][n]],
            [f32_bits(x) for x in case["sa"][m]],
            [f32_bits(x) for x in case["sb"][n // BW_GROUP]])


def blockwise_v2_scales(sa, sb, M, K, N):
    """torch's v2 layouts for (BlockWise1x128 A, BlockWise128x128 B), docs/semantics.md 8d
    (`_scaled_block1x128_block128x128`): scale_a [M, L] with strides (1, M); scale_b
    [round_up(L, 4), ceil(N/128)] with strides (1, round_up(L, 4)) (cuBLAS's L4 padding,
    docs/semantics.md 8d). L = ceil(K/128). sa: [M, L] floats; sb: [ceil(N/128), L] floats (one row
    per 128 columns, the weight's `weight_scale_inv`). The padding rows hold 0."""
    L = _bw_cdiv(K, BW_GROUP)
    L4 = _bw_cdiv(L, 4) * 4
    nb = _bw_cdiv(N, BW_GROUP)
    scale_a = torch.from_numpy(np.ascontiguousarray(np.asarray(sa, np.float32).T)).t()
    padded = np.zeros((nb, L4), np.float32)
    padded[:, :L] = sb
    scale_b = torch.from_numpy(padded).t()
    assert scale_a.shape == (M, L) and scale_b.shape == (L4, nb)
    return scale_a, scale_b


def _bw_to_device(t, dev):
    """A copy on dev with t's strides (the layout checks read strides)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=dev).copy_(t)


def _bw_torch_v2(ctx, case, out_dtype):
    """F.scaled_mm(A, W.t(), ...) with (BlockWise1x128, BlockWise128x128) on the GPU."""
    from ._hwcommon import fp8_tensor
    F = torch.nn.functional
    dev = ctx.backend.dev
    M, K = case["A"].shape
    N = case["B"].shape[0]
    scale_a, scale_b = blockwise_v2_scales(case["sa"], case["sb"], M, K, N)
    a = fp8_tensor(case["A"], "e4m3").to(dev)
    b = fp8_tensor(case["B"], "e4m3").to(dev)
    y = F.scaled_mm(a, b.t(), _bw_to_device(scale_a, dev), F.ScalingType.BlockWise1x128,
                    _bw_to_device(scale_b, dev), F.ScalingType.BlockWise128x128,
                    output_dtype=out_dtype)
    torch.cuda.synchronize()
    return y.cpu()


def _bw_mmaemu(case, out_dtype):
    """mmaemu.scaled_mm(..., blockwise='cublaslt') with torch's v1 layouts (mmaemu/blockwise.py:
    scale_b [L, ceil(N/128)], the transpose of a contiguous [ceil(N/128), L])."""
    import warnings

    import mmaemu
    from ._hwcommon import fp8_tensor
    M, K = case["A"].shape
    scale_a, _ = blockwise_v2_scales(case["sa"], case["sb"], M, K, case["B"].shape[0])
    scale_b = torch.from_numpy(np.ascontiguousarray(case["sb"], np.float32)).t()
    with warnings.catch_warnings():    # the probe exists because the model is experimental
        warnings.simplefilter("ignore", getattr(mmaemu, "ExperimentalPresetWarning", UserWarning))
        return mmaemu.scaled_mm(fp8_tensor(case["A"], "e4m3"), fp8_tensor(case["B"], "e4m3").t(),
                                scale_a, scale_b, out_dtype=out_dtype, blockwise="cublaslt")


def _bw_mmaemu_unavailable(e):
    if isinstance(e, ImportError):
        return f"mmaemu not importable: {e}"
    if isinstance(e, TypeError) and "blockwise" in str(e):
        return f"mmaemu.scaled_mm takes no blockwise= here: {e}"
    return None


def _bw_exact_device(case, out_dtype, update="ffma"):
    """Dry-run stand-in where mmaemu has no block-wise path: the read elements as the exact
    model with this update (promotion every 128 k) gives them, zeros elsewhere."""
    out = {torch.float32: "f32", torch.bfloat16: "bf16"}[out_dtype]
    M, N = case["A"].shape[0], case["B"].shape[0]
    bits = np.zeros((M, N), np.int64)
    for m, n in case["elements"]:
        acc = xm.blockwise_accumulator(*_bw_element_inputs(case, m, n), update=update)
        bits[m, n] = xm.convert_output(acc, out)
    if out_dtype == torch.float32:
        return torch.from_numpy(bits.astype(np.uint32).view(np.int32)).view(torch.float32)
    return torch.from_numpy(bits.astype(np.uint16).view(np.int16)).view(torch.bfloat16)


def _bw_run(ctx, case, out_dtype):
    """The block-wise GEMM of a case: torch's F.scaled_mm on the GPU; in a dry run mmaemu's
    'cublaslt' model, or, where mmaemu has none, the exact model's ffma/128."""
    if not ctx.dry:
        return _bw_torch_v2(ctx, case, out_dtype)
    if getattr(ctx, "bw_dry_device", "").startswith("exactmodel"):
        return _bw_exact_device(case, out_dtype)
    try:
        y = _bw_mmaemu(case, out_dtype)
        ctx.bw_dry_device = "mmaemu.scaled_mm(blockwise='cublaslt')"
        return y
    except Exception as e:  # noqa: BLE001
        why = _bw_mmaemu_unavailable(e)
        if why is None:
            raise
        ctx.bw_dry_device = f"exactmodel ffma/128 ({why})"
        return _bw_exact_device(case, out_dtype)


def _bw_bits(y, elements):
    """Output bit patterns (ints) of the read elements."""
    w = {torch.float32: (torch.int32, 0xFFFFFFFF), torch.bfloat16: (torch.int16, 0xFFFF)}[y.dtype]
    raw = y.contiguous().view(w[0])
    return [int(raw[m, n]) & w[1] for m, n in elements]


def blockwise_torch_support():
    """None if this torch and GPU can run the probe, else the reason: F.scaled_mm and ScalingType
    (torch >= 2.10), DeepSeek scaling on SM90 only (docs/semantics.md 8d). cuBLASLt
    < 12.9 is refused by torch at the call (docs/semantics.md 8d) and recorded then."""
    F = torch.nn.functional
    if not (hasattr(F, "scaled_mm") and hasattr(F, "ScalingType")):
        return f"torch {torch.__version__} has no torch.nn.functional.scaled_mm / ScalingType"
    for name in ("BlockWise1x128", "BlockWise128x128"):
        if not hasattr(F.ScalingType, name):
            return f"torch {torch.__version__}: ScalingType has no {name}"
    if not torch.cuda.is_available():
        return "no CUDA device"
    cap = torch.cuda.get_device_capability(0)
    if cap != (9, 0):
        return (f"compute capability {cap[0]}.{cap[1]}: torch's DeepSeek (1x128, 128x128) "
                "scaling runs on SM90 only")
    return None


def probe_blockwise_cublaslt(ctx):
    """docs/semantics.md 8d: torch's block-wise FP8 GEMM (cuBLASLt VEC128 / BLK128x128) on the
    fixed vectors of items 1-5 and random small-integer GEMMs, bf16 and fp32 outputs; every
    hypothesis of BW_HYPOTHESES scored on every element it applies to."""
    res = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "call": "F.scaled_mm(A, W.t(), scale_a, BlockWise1x128, scale_b, BlockWise128x128, "
                   "output_dtype=...), scale_a [M, L] strides (1, M), scale_b [round_up(L,4), "
                   "ceil(N/128)] strides (1, round_up(L,4))",
           "model": BW_MODEL, "hypotheses": BW_HYPOTHESES}
    if not ctx.dry:
        reason = blockwise_torch_support()
        if reason:
            return {"verdict": "skipped", "result": {**res, "reason": reason}}
    else:
        res["gpu_support"] = blockwise_torch_support() or "this torch and GPU would run it"
    cases = blockwise_cases(ctx.quick)
    outs = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    refused = {}
    for o in [] if ctx.dry else list(outs):   # a dtype torch refuses is recorded, not fatal
        try:
            _bw_run(ctx, cases[0], outs[o])
        except Exception as e:  # noqa: BLE001
            refused[o] = f"{type(e).__name__}: {e}"[:2000]
            del outs[o]
    if refused:
        res["refused_by_torch"] = refused
    if not outs:
        return {"verdict": "skipped", "result": {**res, "reason": "torch refused the block-wise "
                                                 "call for every output dtype"}}
    conv = {"float32": "f32", "bfloat16": "bf16"}
    matches = {o: {h: [0, 0] for h in BW_HYPOTHESES} for o in outs}
    by_item = {}
    fixed, recorded = [], []
    for case in cases:
        observed = {o: _bw_bits(_bw_run(ctx, case, dt), case["elements"]) for o, dt in outs.items()}
        recorded.append({"name": case["name"], "M": int(case["A"].shape[0]),
                         "N": int(case["B"].shape[0]), "K": int(case["A"].shape[1]),
                         "elements": [list(e) for e in case["elements"]],
                         "observed_bits": {o: [f"0x{x:0{8 if o == 'float32' else 4}x}" for x in v]
                                           for o, v in observed.items()}})
        for i, (m, n) in enumerate(case["elements"]):
            pred = blockwise_hypotheses(*_bw_element_inputs(case, m, n))
            item = case["vectors"][i]["item"] if case["vectors"] else "random"
            tally = by_item.setdefault(str(item), {h: [0, 0] for h in BW_HYPOTHESES})
            for h, acc in pred.items():
                if acc is None:
                    continue
                for o in outs:
                    hit = int(xm.convert_output(acc, conv[o]) == observed[o][i])
                    matches[o][h][0] += hit
                    matches[o][h][1] += 1
                    tally[h][0] += hit
                    tally[h][1] += 1
            if case["vectors"]:
                v = case["vectors"][i]
                fixed.append({"item": v["item"], "label": v["label"], "K": v["K"],
                              "sa": [f"0x{u:08x}" for u in v["sa"]],
                              "sb": [f"0x{u:08x}" for u in v["sb"]],
                              "observed": {o: f"0x{observed[o][i]:0{8 if o == 'float32' else 4}x}"
                                           for o in outs},
                              "predicted_f32": {h: None if acc is None else f"0x{acc:08x}"
                                                for h, acc in pred.items()}})
    full = sorted(h for h in BW_HYPOTHESES
                  if all(matches[o][h][1] and matches[o][h][0] == matches[o][h][1] for o in outs))
    res.update({"device": ctx.backend.describe() if not ctx.dry else
                "dry run: " + getattr(ctx, "bw_dry_device", "a stand-in device"),
                "elements_per_output": sum(len(c["elements"]) for c in cases),
                "matches": {o: {h: {"matches": m_[0], "applicable": m_[1]} for h, m_ in mh.items()}
                            for o, mh in matches.items()},
                # both outputs together: "matches/applicable"
                "matches_by_item": {i: {h: f"{m_[0]}/{m_[1]}" for h, m_ in t.items()}
                                    for i, t in by_item.items()},
                "fixed_vectors": fixed, "cases": recorded})
    res["mmaemu_cublaslt"] = _bw_compare_mmaemu(cases, recorded, outs)
    return {"verdict": "confirmed" if BW_MODEL in full else "rejected",
            "matching_hypotheses": full, "result": res}


def _bw_compare_mmaemu(cases, recorded, outs):
    """How many observed elements mmaemu's own block-wise path ('cublaslt') reproduces."""
    same = total = 0
    try:
        for case, rec in zip(cases, recorded):
            for o, dt in outs.items():
                got = _bw_bits(_bw_mmaemu(case, dt), case["elements"])
                want = [int(x, 16) for x in rec["observed_bits"][o]]
                same += sum(g == w for g, w in zip(got, want))
                total += len(want)
    except Exception as e:  # noqa: BLE001 - recorded, the probe's own scores stand
        return {"skipped": _bw_mmaemu_unavailable(e) or f"{type(e).__name__}: {e}"[:1000]}
    return {"matches": same, "elements": total}


PROBES.update({
    "blockwise_cublaslt": ("torch's block-wise FP8 GEMM (cuBLASLt VEC128 x BLK128x128) is "
                           "DeepGEMM's 1d2d arithmetic: fmaf(fp32(sa*sb), chain, acc) per 128 k "
                           "from +0, ascending, no split", probe_blockwise_cublaslt),
})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (probes.json)")
    ap.add_argument("--dry-run", action="store_true", help="run against the mmaemu CPU model")
    ap.add_argument("--quick", action="store_true", help="small inputs (for tests)")
    ap.add_argument("--only", default="", help="comma-separated probe ids")
    ap.add_argument("--vectors", default="", help="folder with published K=32 vectors for P0")
    ap.add_argument("--tag", default="", help="suffix of the output file name")
    args = ap.parse_args(argv)
    ctx = Ctx(args)
    info = platform_info(ctx.dry, ctx.lt)
    mode = "DRY RUN against the mmaemu CPU model (not hardware)" if ctx.dry else ctx.backend.describe()
    print(f"probe_hopper: {mode}")
    results = []
    ids = [i.strip() for i in args.only.split(",") if i.strip()] or list(PROBES)
    for pid in ids:
        title, fn = PROBES[pid]
        t0 = time.time()
        try:
            r = fn(ctx)
        except Exception as e:  # noqa: BLE001
            r = {"verdict": "error", "result": {"error": f"{type(e).__name__}: {e}",
                                                "traceback": traceback.format_exc()[-3000:]}}
        r = {"id": pid, "hypothesis": title, **r, "seconds": round(time.time() - t0, 2),
             "backend": mode}
        results.append(r)
        print(f"  {pid:4s} {r['verdict'].upper():12s} {title}"
              + (f"  [{', '.join(r['matching_hypotheses'])}]" if r.get("matching_hypotheses") else "")
              + f"  ({r['seconds']} s)")
    if ctx.logging:
        ctx.lt.stop_log()
    doc = {"platform": info, "dry_run": ctx.dry, "probes": results,
           "cublaslt_configs": {str(k): {kk: vv for kk, vv in v.items() if kk != "raw"}
                                for k, v in ctx.configs.items()},
           "raw_kernels": ctx.raw_reason or ("loaded" if ctx.raw not in (None, "model") else
                                             "dry run: mmaemu.mma" if ctx.dry else "not used")}
    name = f"probes{('_' + args.tag) if args.tag else ''}.json"
    write_json(os.path.join(args.out, name), doc)
    print(f"wrote {os.path.join(args.out, name)}")
    return 0 if all(r["verdict"] != "error" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
