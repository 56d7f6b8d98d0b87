"""The self-test (user guide section 6): one set of cases and one runner.

Known answers guard the reference itself: the outcomes the Hopper model predicts for the
hardware probes of docs/hardware_validation.md (P1, P2), worked out by hand from the model's
rules. Every other executor (the fast CPU kernel with each SIMD kernel, each CUDA kernel) then
runs the same deterministic cases and must return the CPU reference model's bits in every one:
products, block and tile boundaries, specials, misaligned rows, split-K in every scheme, every
epilogue, and every format pair where the executor computes it.

A CUDA kernel's verdict is stored as a fact (runtime/facts.py) that planning reads; it is
measured here, by an explicit step: the first call's warm-up (runtime/warmup.py) or
`python -m mmaemu selftest`.
"""
import collections
import struct
import threading
import time

import torch

from . import facts
from ..formats import dtype_of
from .availability import split_reason, static_reason
from .loader import device_count, device_info
from .registry import KERNELS, NOT_BUILT, SIMD_KERNELS
from ..planning.profiles import get_preset

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2


SelfTestResult = collections.namedtuple(
    "SelfTestResult", "kernel preset device status passed required cases mismatches detail seconds cached")


# --------------------------------------------------------------------------------------------
# Known answers of the reference (hopper preset)

def _f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _vec(values, K):
    v = torch.zeros(1, K)
    v[0, :len(values)] = torch.tensor(values)
    return v.to(E4M3)


def known_answers():
    """(name, computed, expected, ok) for hand-worked cases of the hopper preset."""
    out = []
    # P2 (i): 32*32 + 0.09375*(-1): the small term is cut toward zero on the grid 2^(10-13).
    out.append(("truncation toward zero", [32.0, 0.09375], [32.0, -1.0], 32, 1024.0))
    # P2 (ii): 32*32 + 32*32 + 3 * 0.125: exact sum 2048.375, 14 significant bits keep 2048.25.
    out.append(("14-bit result", [32.0, 32.0, 0.125, 0.125, 0.125], [32.0, 32.0, 1.0, 1.0, 1.0], 32,
                2048.25))
    # P1: block 1 = 32*64 = 2048; block 2 = 0.875 + 0.125 joins C = 2048 on the grid 2^(11-13).
    out.append(("C inside the block", [32.0] + [0.0] * 31 + [0.875, 0.125],
                [64.0] + [0.0] * 31 + [1.0, 1.0], 64, 2048.75))
    # An exact zero is +0, even from -0 products.
    out.append(("exact zero is +0", [-0.0] * 32, [1.0] * 32, 32, 0.0))
    results = []
    for name, a, b, K, want in out:
        got = float(torch.ops.mmaemu.mma(_vec(a, K), _vec(b, K), torch.zeros(1), "hopper")[0])
        results.append((name, got, want, struct.pack("<f", got) == struct.pack("<f", want)))
    return results


# --------------------------------------------------------------------------------------------
# The cases

def _codes(gen, shape, mode):
    """FP8 E4M3 codes: 'wide' (every finite code), 'narrow' (|x| near 1), 'special' (NaNs,
    zeros, -0, extremes, subnormals mixed in), 'any' (every code, uniformly), as uint8."""
    if mode == "narrow":
        c = torch.randint(0x30, 0x48, shape, generator=gen, dtype=torch.int32)
        c |= torch.randint(0, 2, shape, generator=gen, dtype=torch.int32) << 7
        return c.to(torch.uint8)
    c = torch.randint(0, 256, shape, generator=gen, dtype=torch.int32)
    if mode == "wide":
        c = torch.where((c & 0x7F) == 0x7F, c ^ 0x01, c)  # no NaN
    elif mode == "special":
        specials = torch.tensor([0x00, 0x80, 0x7F, 0xFF, 0x7E, 0xFE, 0x01, 0x81, 0x07, 0x87, 0x08])
        pick = torch.randint(0, len(specials), shape, generator=gen)
        c = torch.where(torch.rand(shape, generator=gen) < 0.08, specials[pick], c)
    return c.to(torch.uint8)


_cases_lock = threading.Lock()
_cases_cache = []


def cases():
    """(name, op, arguments) of every case, with deterministic CPU inputs (uint8 codes and
    their formats); built once per process."""
    with _cases_lock:
        if not _cases_cache:
            _cases_cache.extend(_build_cases())
    return _cases_cache


def _build_cases():
    out = []

    def acc_case(name, a, b, fast, splits=1, scheme="none"):
        out.append((name, "accumulate", dict(x=a, w=b, fa="e4m3", fb="e4m3", fast=fast, splits=splits,
                                             scheme=scheme)))

    def mm_case(name, a, b, fa, fb, fast, res, sa, sb, epi=0, sr=None, splits=1, scheme="none"):
        out.append((name, "scaled_mm", dict(x=a, w=b, fa=fa, fb=fb, fast=fast, out=res, sa=sa, sb=sb,
                                            epi=epi, sr=sr, splits=splits, scheme=scheme)))

    gen = torch.Generator().manual_seed(20251202)
    # 1. every product: row i of A holds code i at one k, row j of B code j (all 65 536 pairs)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for K, at in ((32, 0), (48, 40)):
        a = torch.zeros(256, K, dtype=torch.uint8)
        a[:, at] = codes
        for fast in (True, False):
            acc_case(f"all products (K={K}, k={at}, fast={fast})", a, a.clone(), fast)
    # 2. block and tile boundaries: K around 16/32/128, M and N past the 64 and 128 tiles
    for K in (1, 16, 17, 31, 32, 33, 127, 128, 129, 257, 1000):
        for fast in (True, False):
            acc_case(f"boundaries (136x72x{K}, fast={fast})", _codes(gen, (136, K), "wide"),
                     _codes(gen, (72, K), "wide"), fast)
    # 3. specials: NaNs, zeros, -0, extremes; rows that cancel exactly; all-zero rows
    for fast in (True, False):
        a, b = _codes(gen, (64, 300), "special"), _codes(gen, (40, 300), "special")
        a[3], b[5] = 0x80, 0x00                     # -0 row, +0 row
        a[7, :150] = 0x40; a[7, 150:] = 0xC0        # +2 ... -2: the sum cancels to zero
        b[9] = 0x38                                 # all ones
        acc_case(f"specials (64x40x300, fast={fast})", a, b, fast)
    # 4. misaligned rows (lda, ldb not multiples of 16) and narrow data
    big_a, big_b = _codes(gen, (50, 213), "narrow"), _codes(gen, (30, 219), "narrow")
    acc_case("misaligned rows (50x30x200)", big_a[:, 3:203], big_b[:, 7:207], True)
    acc_case("misaligned rows, promoted (50x30x200)", big_a[:, 3:203], big_b[:, 7:207], False)
    # 5. split-K in every scheme
    for splits, scheme in ((2, "contiguous"), (3, "serial"), (5, "pairwise"), (4, "pairwise"),
                           (16, "serial")):
        for fast in (True, False):
            acc_case(f"split-K {splits} {scheme} (20x24x1500, fast={fast})",
                     _codes(gen, (20, 1500), "wide"), _codes(gen, (24, 1500), "wide"), fast,
                     splits, scheme)
    # 6. the epilogue: every output dtype and order, scales that overflow and underflow
    a, b = _codes(gen, (40, 96), "wide"), _codes(gen, (36, 96), "wide")
    for res in (torch.float32, torch.bfloat16, torch.float16, E4M3, E5M2):
        for sa, sb in ((2.0 ** -7, 3.0), (1e-30, 1e-12), (1e30, 1e8)):
            for epi in (0, 1, 2):
                mm_case(f"epilogue ({res}, scales {sa:g} {sb:g}, order {epi})", a, b, "e4m3", "e4m3",
                        True, res, sa, sb, epi, 0.5 if res in (E4M3, E5M2) else None)
    mm_case("epilogue with splits (bf16, 3 pairwise)", _codes(gen, (24, 700), "wide"),
            _codes(gen, (20, 700), "wide"), "e4m3", "e4m3", False, torch.bfloat16, 0.25, 0.5,
            splits=3, scheme="pairwise")
    # 7. many tiles and blocks
    acc_case("large (192x192x512)", _codes(gen, (192, 512), "wide"), _codes(gen, (192, 512), "wide"), True)
    # 8. every format pair: any code (NaN, max, subnormals, signed zeros at the start of row 0),
    #    odd shapes, both accumulations, split-K, each output dtype, a scale just below 1
    row0 = torch.tensor([0x00, 0x80, 0x7E, 0xFE, 0x01, 0x81, 0x08, 0x7F, 0x77, 0x3F], dtype=torch.uint8)
    g = torch.Generator().manual_seed(0)
    for fa, fb in (("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")):
        for M, N, K in ((16, 16, 32), (17, 33, 80), (32, 16, 384)):
            a, b = _codes(g, (M, K), "any"), _codes(g, (N, K), "any")
            a[0, :row0.numel()] = row0
            for fast in (True, False):
                for splits, scheme in ((1, "none"), (3, "contiguous"), (3, "pairwise")):
                    for res in (torch.float32, torch.bfloat16, torch.float16, E4M3):
                        mm_case(f"{fa}x{fb} {M}x{N}x{K} fast={fast} S={splits} {scheme} -> {res}",
                                a, b, fa, fb, fast, res, _f32(0x3F7FFFFF), 0.5, splits=splits,
                                scheme=scheme)
    return out


def _computes(kernel, kw, preset):
    """Whether a kernel computes the case: the reference (CPU or CUDA) and the cpu executor
    compute every case; the tiled and tensor-core CUDA kernels compute E4M3 x E4M3 only
    (planning sends the other formats to the reference), and a round-robin split layout (ada
    with S > 1) only where the kernel table says so (round_robin_splits), as the loader
    (csrc/cuda/kernel_table.c) refuses the rest."""
    if kernel == "reference" or kernel.startswith("cpu"):
        return True
    if (kw["fa"], kw["fb"]) != ("e4m3", "e4m3"):
        return False
    return split_reason(kernel, preset, get_preset(preset).split_rr_tile, kw["splits"]) is None


def _run_case(op, kw, preset, executor, device):
    x = kw["x"].view(dtype_of(kw["fa"])).to(device)
    w = kw["w"].view(dtype_of(kw["fb"])).to(device)
    splits, scheme = kw["splits"], kw["scheme"]
    if op == "accumulate":
        return torch.ops.mmaemu.accumulate(x, w, kw["fast"], preset, splits, scheme, executor)
    dev = x.device
    sa = torch.tensor(kw["sa"], dtype=torch.float32, device=dev)
    sb = torch.tensor(kw["sb"], dtype=torch.float32, device=dev)
    sr = None if kw["sr"] is None else torch.tensor(kw["sr"], dtype=torch.float32, device=dev)
    return torch.ops.mmaemu.scaled_mm(x, w.t(), sa, sb, None, sr, kw["out"], kw["fast"], preset,
                                      splits, scheme, executor, kw["epi"])


_expected_lock = threading.Lock()
_expected_cache = {}


def _reference_bits(op, kw, preset):
    """The CPU reference model's bits for a case, or None where the preset refuses the case."""
    from ..testing import bits
    try:
        return bits(_run_case(op, kw, preset, "reference", "cpu"))
    except RuntimeError:
        return None


def _expected(preset):
    """_reference_bits of every case for the preset (computed once per process)."""
    with _expected_lock:
        if preset not in _expected_cache:
            _expected_cache[preset] = [_reference_bits(op, kw, preset) for _, op, kw in cases()]
    return _expected_cache[preset]


def check(kernel, preset, device="cpu"):
    """Runs every case that the preset defines and the kernel computes on `device` (a CPU
    executor: "reference", "cpu:<simd>"; a CUDA kernel of the table on a CUDA device), and
    compares its bits with the CPU reference model's. Returns a dict: passed, cases,
    mismatches, detail, seconds, and error (True when a case raised: such a verdict is not
    stored)."""
    from ..planning.executors import cuda_executor
    from ..testing import bits
    t0 = time.time()
    dev = torch.device(device)
    todo = [(c, want) for c, want in zip(cases(), _expected(preset))
            if want is not None and _computes(kernel, c[2], preset)]
    executor = cuda_executor(kernel) if dev.type == "cuda" else kernel
    mismatches, first = 0, None
    for (name, op, kw), want in todo:
        try:
            got = bits(_run_case(op, kw, preset, executor, dev).cpu())
        except Exception as e:  # a backend that cannot run a case fails the test
            return {"passed": False, "cases": len(todo), "mismatches": -1, "error": True,
                    "detail": f"{name}: {type(e).__name__}: {e}", "seconds": time.time() - t0}
        n = int((got != want).sum())
        if n and first is None:
            first = f"{name}: {n} of {want.numel()} outputs differ"
        mismatches += n
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return {"passed": mismatches == 0, "cases": len(todo), "mismatches": mismatches,
            "detail": first or f"{len(todo)} cases, every output bit-identical to the CPU model",
            "seconds": time.time() - t0}


def run_cpu():
    """The CPU part of `python -m mmaemu selftest`: the known answers of the reference, then the
    cpu executor with every SIMD kernel this CPU runs, on every case and preset. A list of
    SelfTestResult (device 'cpu')."""
    t0 = time.time()
    ka = known_answers()
    failed = [f"{n}: got {c!r}, expected {e!r}" for n, c, e, ok in ka if not ok]
    out = [SelfTestResult("reference", "hopper", "cpu", "failed" if failed else "passed", not failed,
                          True, len(ka), len(failed),
                          f"{len(ka) - len(failed)}/{len(ka)} known answers of the hopper model"
                          + (("; " + "; ".join(failed)) if failed else ""), time.time() - t0, False)]
    for simd, k in SIMD_KERNELS.items():
        if not k["available"]:
            continue
        for preset in KERNELS["reference"].presets:
            v = check(f"cpu:{simd}", preset)
            out.append(SelfTestResult(f"cpu:{simd}", preset, "cpu",
                                      "passed" if v["passed"] else "failed", v["passed"], True,
                                      v["cases"], v["mismatches"], v["detail"], v["seconds"],
                                      False))
    return out


# --------------------------------------------------------------------------------------------
# CUDA kernels: measuring the verdicts planning reads

_measure_lock = threading.Lock()


def measure_verdict(kernel, preset, device, force=False):
    """The verdict of a kernel for a preset on CUDA device `device`: the stored one, else (or
    with force) measured now and stored; None where it cannot run here (no CUDA in torch, or
    a CUDA graph is being captured)."""
    from ..planning.executors import capturing
    with _measure_lock:
        v = None if force else facts.verdict(kernel, preset, device)
        if v is not None or capturing() or not torch.cuda.is_available():
            return v
        v = check(kernel, preset, torch.device("cuda", device))
        v.update(cached=False, kernel=kernel, preset=preset, device=device_info(device),
                 mmaemu=facts._version(), torch=torch.__version__)
        facts.store_verdict(kernel, preset, device, v, persist=not v.get("error"))
        return v


def selftest(device=None, kernels=None, presets=None, force=False):
    """Runs (or reads the stored verdicts of) every kernel's self-test on the CUDA device(s).

    Returns a list of SelfTestResult, one per (kernel, preset, device); status is 'passed',
    'failed' or 'unavailable' (with the reason in detail). `required` marks the results that
    must pass on this device: every IEEE-exact kernel that loads (gated kernels are optional).
    Empty without a CUDA device (run_cpu() checks the CPU executors).
    """
    if device is None:
        devices = list(range(device_count())) if torch.cuda.is_available() else []
    else:
        devices = [device.index if isinstance(device, torch.device) else int(device)]
    out = []
    names = kernels or list(KERNELS) + list(NOT_BUILT)
    for dev in devices:
        for kernel in names:
            k = KERNELS.get(kernel)
            for preset in (presets or (k.presets if k else ("ada",))):
                if k is not None and preset not in k.presets:
                    continue
                reason = static_reason(kernel, dev, preset)
                if reason is not None:
                    out.append(SelfTestResult(kernel, preset, dev, "unavailable", False, False, 0, 0,
                                              reason, 0.0, False))
                    continue
                v = measure_verdict(kernel, preset, dev, force=force)
                if v is None:
                    out.append(SelfTestResult(kernel, preset, dev, "unavailable", False, False, 0, 0,
                                              "self-test not run (no CUDA in torch, or a graph capture)",
                                              0.0, False))
                    continue
                out.append(SelfTestResult(kernel, preset, dev, "passed" if v["passed"] else "failed",
                                          v["passed"], not k.gated, v["cases"], v["mismatches"],
                                          v["detail"], v["seconds"], v.get("cached", False)))
    return out
