"""Replays the RTX 4060 hardware recordings of test/data/hw_mini/ (format "mmaemu-hwmini/1",
published with mmaemu 0.1.0 under Apache-2.0: see LICENSE and NOTICE there) through mmaemu.

Each recorded output becomes one Check: a function computing mmaemu's result on a backend and
what the hardware gave (bit patterns, or the exception class torch 2.7.1 raised). replay()
compares them and counts, per backend, matching and mismatching outputs and the outputs
skipped with their reason (a feature mmaemu refuses, or an input the recording does not hold).
"""
import hashlib
import json
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np
import torch

import mmaemu
from mmaemu import errors
from helpers import FORMATS as FMT, fp8_codes

DATA = Path(__file__).resolve().parent / "data" / "hw_mini"
BITS_DTYPE = {1: torch.uint8, 2: torch.uint16, 4: torch.int32}


def _f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


class Skip(Exception):
    """An output this replay cannot compute: the reason goes into the counts."""


@dataclass
class Check:
    name: str
    run: Callable[[str], torch.Tensor]    # backend -> mmaemu's output
    bits: Optional[np.ndarray] = None      # the hardware's bit patterns
    error: Optional[str] = None            # or the exception class torch 2.7.1 raised
    profile: str = "ada"


@dataclass
class Result:
    matched: int = 0
    mismatched: List[str] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    skipped_names: List[str] = field(default_factory=list)

    def line(self):
        return (f"{self.matched} outputs match, {len(self.mismatched)} mismatch, "
                f"{sum(self.skipped.values())} skipped: " +
                "; ".join(f"{n} {r}" for r, n in sorted(self.skipped.items())))


class Shards:
    """The npz shards, loaded once, with the index's sha256 checked."""

    def __init__(self, index):
        self._index = index
        self._open = {}

    def array(self, ref):
        shard, name = ref
        if shard not in self._open:
            path = DATA / shard
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            assert digest == self._index["shards"][shard]["sha256"], f"{shard}: sha256 differs"
            self._open[shard] = np.load(path)
        return self._open[shard][name]


def load_index():
    with open(DATA / "index.json") as f:
        return json.load(f)


def _expected(shards, expect):
    arr = shards.array(expect["bits"])
    assert hashlib.sha256(arr.tobytes()).hexdigest() == expect["sha256"], "recording sha256 differs"
    return arr


def _bits(t):
    t = t.contiguous()
    return t.view(BITS_DTYPE[t.element_size()]).numpy().view({1: np.uint8, 2: np.uint16, 4: np.uint32}[t.element_size()])


# ---- instruction level ------------------------------------------------------------------------

def _mma_checks(case, shards):
    p = case["params"]
    a, b, c = (shards.array(case["inputs"][k]) for k in ("a", "b", "c"))
    fa, fb = p["fmt_a"], p["fmt_b"]
    if p["layout"] == "tile":   # a [T, 16, K], b [T, 8, K], c [T, 16, 8]: D = A B^T + C per tile
        T, m, K = a.shape
        n = b.shape[1]
        rows_a = np.repeat(a[:, :, None, :], n, axis=2).reshape(-1, K)
        rows_b = np.repeat(b[:, None, :, :], m, axis=1).reshape(-1, K)
    else:                       # vectors: a [n, K], b [n, K], c [n]
        rows_a, rows_b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    c32 = torch.from_numpy(np.ascontiguousarray(c).reshape(-1).view(np.float32))
    want = _expected(shards, case["expect"]).reshape(-1)

    def run(backend):
        return mmaemu.mma(fp8_codes(rows_a, fa), fp8_codes(rows_b, fb), c32, preset=p["preset"])
    return [Check(case["id"], run, bits=want)]


# ---- torch._scaled_mm calls, recorded as GEMM cases -------------------------------------------

def _splitk(s):
    if s is None or s["S"] == 1:
        return 1
    return (s["S"], s["scheme"])


def _gemm_checks(case, shards, defaults):
    params = case["params"]
    profile = "ada-te" if case["id"].startswith("evo2.") else "ada"
    if "expect" in case:  # a call the hardware refused: zero operands of call_shape
        M, N, K = params["call_shape"]
        kw = _gemm_kwargs(params, defaults)

        def run(backend):
            if params.get("scaling") == "rowwise":
                sa, sb = torch.ones(M, 1), torch.ones(1, N)
            else:
                sa, sb = kw["scale_a"], kw["scale_b"]
            a = torch.zeros(M, K, dtype=torch.uint8).view(FMT[params["fmt_a"]])
            b = torch.zeros(N, K, dtype=torch.uint8).view(FMT[params["fmt_b"]])
            bias = None
            if params.get("bias_dtype"):
                bias = torch.zeros(N, dtype=getattr(torch, params["bias_dtype"]))
            return mmaemu.scaled_mm(a, b.t(), sa, sb, bias=bias, scale_result=kw["scale_result"],
                                    out_dtype=kw["out_dtype"], use_fast_accum=kw["fast"],
                                    profile=profile, backend=backend, splitk=kw["splitk"])
        return [Check(case["id"], run, error=case["expect"]["error"], profile=profile)]
    a = shards.array(case["inputs"]["a"])
    b = shards.array(case["inputs"]["b"])
    checks = []
    for o in case["outputs"]:
        p = dict(params)
        p.update(o["params"])
        kw = _gemm_kwargs(p, defaults)
        want = _expected(shards, o["expect"])
        diagonal = p.get("out_select") == "diagonal"

        def run(backend, kw=kw, p=p, diagonal=diagonal):
            # the recorded calls had N a multiple of 16 (torch's rule): zero columns of mat2
            # beyond the recorded ones leave the recorded outputs unchanged
            N = b.shape[0]
            w_rows = np.zeros(((N + 15) // 16 * 16, b.shape[1]), dtype=np.uint8)
            w_rows[:N] = b
            x, w = fp8_codes(a, p["fmt_a"]), fp8_codes(w_rows, p["fmt_b"])
            y = mmaemu.scaled_mm(x, w.t(), kw["scale_a"], kw["scale_b"],
                                 scale_result=kw["scale_result"], out_dtype=kw["out_dtype"],
                                 use_fast_accum=kw["fast"], profile=profile, backend=backend,
                                 splitk=kw["splitk"])
            y = y[:, :N]
            return torch.diagonal(y) if diagonal else y
        checks.append(Check(f"{case['id']}/{o['name']}", run, bits=want, profile=profile))
    return checks


def _gemm_kwargs(p, defaults):
    def scale(key, default):
        bits = p.get(key + "_bits")
        return torch.tensor(_f32(bits) if bits is not None else default, dtype=torch.float32)
    sr = p.get("scale_result_bits")
    return {"scale_a": scale("scale_a", defaults["scale_a"]["value"]),
            "scale_b": scale("scale_b", defaults["scale_b"]["value"]),
            "scale_result": torch.tensor(_f32(sr), dtype=torch.float32) if sr is not None else None,
            "out_dtype": getattr(torch, p.get("out_dtype", "float32")),
            "fast": bool(p.get("fast", False)), "splitk": _splitk(p.get("splitk"))}


# ---- torch._scaled_mm calls with their arguments as made (gemm_call) --------------------------

def _call_scale(spec, computed):
    if spec["value"] == "rowwise":   # row-wise scale values are not recorded
        if computed:
            raise Skip("row-wise scale values not recorded")
        return torch.ones(tuple(spec["shape"]), dtype=getattr(torch, spec["dtype"]))
    return torch.full(tuple(spec["shape"]), float(spec["value"]), dtype=getattr(torch, spec["dtype"]))


def _mat1(arr, spec):
    """mat1 [M, K] as the call made it: layout, leading-dimension padding, storage offset."""
    dtype = getattr(torch, spec["dtype"])
    M, K = arr.shape
    src = torch.from_numpy(np.ascontiguousarray(arr))
    if dtype.itemsize != 1:
        src = src.to(dtype)   # a non-FP8 mat1: only its refusal is compared
    else:
        src = src.view(dtype)
    pad, offset = spec.get("ld_pad", 0), spec.get("offset", 0)
    if spec.get("layout") == "col":
        return src.t().contiguous().t()
    if pad or offset:
        ld = K + pad
        store = torch.zeros(offset + M * ld, dtype=torch.uint8)
        if dtype.itemsize == 1:
            store = store.view(dtype)
        else:
            store = store.to(dtype)
        t = torch.as_strided(store, (M, K), (ld, 1), offset)
        t.copy_(src)
        return t
    return src


def _mat2(arr, spec):
    """mat2 [K, N]: column-major (the default) or row-major, with a storage offset."""
    dtype = getattr(torch, spec["dtype"])
    src = torch.from_numpy(np.ascontiguousarray(arr))
    src = src.view(dtype) if dtype.itemsize == 1 else src.to(dtype)
    if spec.get("layout") == "row":
        return src.t().contiguous()
    pad, offset = spec.get("ld_pad", 0), spec.get("offset", 0)
    if pad or offset:
        N, K = arr.shape
        store = torch.zeros(offset + N * (K + pad), dtype=torch.uint8).view(dtype)
        t = torch.as_strided(store, (K, N), (1, K + pad), offset)
        t.copy_(src.t())
        return t
    return src.t()


def _out(spec):
    """The out= tensor of a call: its dtype and shape, contiguous or column-major, NaN-filled
    where its dtype has NaN (so an element left unwritten shows)."""
    dtype, shape = getattr(torch, spec["dtype"]), tuple(spec["shape"])
    if spec.get("contiguous", True) or len(shape) != 2:
        t = torch.empty(shape, dtype=torch.float32)
    else:
        t = torch.empty(shape[::-1], dtype=torch.float32).t()
    t.fill_(float("nan"))
    return t.to(dtype) if dtype != torch.float32 else t


def _call_checks(case, shards, defaults):
    call = case["call"]
    a = shards.array(case["inputs"]["a"])
    b = shards.array(case["inputs"]["b"])
    checks = []
    for o in case["outputs"]:
        c = dict(call)
        c.update(o.get("call_diff", {}))
        expect = o["expect"]
        name = f"{case['id']}/{o['name']}"
        bits = _expected(shards, expect) if isinstance(expect, dict) else None
        error = expect if isinstance(expect, str) else None

        def run(backend, c=c, o=o):
            if "bias" in c and error is None:
                raise Skip("bias values not recorded")
            if "grad" in c and error is None:
                raise Skip("autograd through the scales")
            computed = error is None
            sa = _call_scale(c.get("scale_a", defaults["scale_a"]), computed)
            sb = _call_scale(c.get("scale_b", defaults["scale_b"]), computed)
            sr = _call_scale(c["scale_result"], computed) if c.get("scale_result") else None
            bias = None
            if "bias" in c:
                bias = torch.zeros(c["bias"]["len"], dtype=getattr(torch, c["bias"]["dtype"]))
            mat1, mat2 = _mat1(a, c["mat1"]), _mat2(b, c["mat2"])
            if "grad" in c:
                named = {"scale_a": sa, "scale_b": sb}
                for key in c["grad"]["requires_grad"]:
                    if key in named:
                        named[key].requires_grad_(True)
                    else:   # FP8 tensors cannot require grad in torch: a leaf view that does
                        t = mat1 if key == "mat1" else mat2
                        t.requires_grad_(True)
            out_dtype = getattr(torch, o["out_dtype"]) if o.get("out_dtype_passed", True) else None
            out = _out(c["out"]) if "out" in c else None
            return mmaemu.scaled_mm(mat1, mat2, sa, sb, bias=bias, out=out,
                                    scale_result=sr, out_dtype=out_dtype,
                                    use_fast_accum=o["fast"], profile="ada", backend=backend,
                                    splitk=_splitk({"S": o["splitk"][0], "scheme": o["splitk"][1]})
                                    if "splitk" in o else 1)
        checks.append(Check(name, run, bits=bits, error=error))
    return checks


def checks(select=None):
    """Every recorded output as a Check (select: a predicate on the case id)."""
    index = load_index()
    shards = Shards(index)
    defaults = index["call_defaults"]
    out = []
    for case in index["cases"]:
        if select is not None and not select(case["id"]):
            continue
        if case["kind"] == "mma":
            out += _mma_checks(case, shards)
        elif case["kind"] == "gemm":
            out += _gemm_checks(case, shards, defaults)
        else:
            out += _call_checks(case, shards, defaults)
    return out


def replay(all_checks, backend):
    """Compares every check on the backend: bit patterns, or the exception class."""
    res = Result()
    for ch in all_checks:
        try:
            got = ch.run(backend)
        except Skip as e:
            res.skipped[str(e)] += 1
            res.skipped_names.append(f"{ch.name}: {e}")
            continue
        except errors.UnsupportedFeatureError as e:
            if ch.error == "UnsupportedFeatureError":
                res.matched += 1       # the recording marks it outside mmaemu's scope
            else:
                reason = f"refused by mmaemu: {type(e).__name__}: {str(e).split(':')[0][:60]}"
                res.skipped[reason] += 1
                res.skipped_names.append(f"{ch.name}: {e}")
            continue
        except Exception as e:   # noqa: BLE001 - the class is what is compared
            if ch.error is not None and type(e).__name__ == ch.error:
                res.matched += 1
            elif ch.error is None and isinstance(e, errors.SplitKUnknownError):
                reason = "refused by mmaemu: SplitKUnknownError (reduction order not recorded)"
                res.skipped[reason] += 1
                res.skipped_names.append(f"{ch.name}: {e}")
            else:
                res.mismatched.append(f"{ch.name}: raised {type(e).__name__}: {e}"[:300])
            continue
        if ch.error is not None:
            if ch.error == "UnsupportedFeatureError":
                res.skipped["computed by mmaemu; no hardware output (outside the recording's scope)"] += 1
                continue
            res.mismatched.append(f"{ch.name}: computed, hardware raised {ch.error}")
            continue
        got_bits = _bits(got).reshape(-1)
        want = ch.bits.reshape(-1)
        if got_bits.shape != want.shape or got_bits.dtype.itemsize != want.dtype.itemsize:
            res.mismatched.append(f"{ch.name}: shape {tuple(got.shape)} / {got.dtype}, "
                                  f"hardware {ch.bits.shape} / {ch.bits.dtype}")
        elif not np.array_equal(got_bits.view(want.dtype), want):
            bad = int(np.count_nonzero(got_bits.view(want.dtype) != want))
            res.mismatched.append(f"{ch.name}: {bad} of {want.size} elements differ")
        else:
            res.matched += 1
    return res
