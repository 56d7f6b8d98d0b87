"""Backends: which kernel computes a GEMM, why, and the per-device self-tests (user guide §6).

Every backend returns the reference bits; they differ in where they run and how fast:

  reference    the scalar C model, on the tensors' device (CPU, or one CUDA thread per element)
  cpu          the fast exact CPU kernel (csrc/cpu_fast.c): SIMD tiles and threads, CPU tensors
  cuda:h1/h4   IEEE-exact tiled kernels, 32-product blocks (the hopper preset); sm_75+ / sm_80+
  cuda:v1/v4   IEEE-exact tiled kernels, 16-product blocks (the ada preset); sm_75+ / sm_80+
  cuda:wgmma   gated: Hopper's FP8 wgmma issued in mmaemu's schedule; compute capability 9.0 only
  cuda:v9/tc3  listed by the guide; not part of this build (see NOT_BUILT)

The kernels and their facts (presets, block, capabilities, gating, exactness) are the C core's
table (csrc/cuda_kernels.c, mmaemu._C.kernel_table()); KERNELS is a view of it. This module holds
the policy: the priorities of backend="auto", where gated kernels are trusted, the guide's names
that are not built, and the user's overrides.

resolve() turns a request ("auto", "cpu", "cuda", "reference", a kernel name, or MMAEMU_BACKEND)
into the concrete backend to pass to torch.ops.mmaemu.* (which runs exactly that kernel), with
the fallbacks it skipped and the warnings to emit. On CPU tensors "auto" is "cpu". On CUDA
tensors it takes the preset's highest-priority kernel that loads on the device and passed its
self-test there. IEEE-exact kernels cannot depend on the GPU, but the self-test still
gates them (it also catches a broken build or driver); gated kernels additionally need the
device's compute capability to be one where they are trusted, or MMAEMU_ALLOW_GATED_KERNELS=1.

Self-test verdicts are cached per device (name, UUID, compute capability), driver, package
version, kernel sources and load route under MMAEMU_CACHE_DIR (default
${XDG_CACHE_HOME:-~/.cache}/mmaemu)/selftest.
"""
import collections
import hashlib
import json
import os
import sys
import threading
import time
import warnings

import torch

from . import _C
from ._loader import (cache_dir, device_count, device_info, driver_status,  # noqa: F401
                      env_flag as _env, kernel_check, kernel_dir as _kernel_dir, nvrtc_compile,
                      nvrtc_status)
from .errors import BackendFallbackWarning, BackendUnavailableError

# --------------------------------------------------------------------------------------------
# The registry: a view of the C core's kernel table (csrc/cuda_kernels.c), plus policy

Kernel = collections.namedtuple(
    "Kernel", "name presets block min_cc only_cc gated auto_ccs exact description")

# Policy: the compute capabilities on which backend="auto" may take a gated kernel (after its
# self-test there); elsewhere only MMAEMU_ALLOW_GATED_KERNELS=1 allows it. cuda:wgmma runs on
# sm_90 only (the table's only_cc): its schedule was written for Hopper's wgmma (inferred).
GATE_TRUSTED_CCS = {"cuda:wgmma": (90,)}


def _kernel(entry):
    gated = entry["gated"]
    return Kernel(entry["name"], tuple(entry["presets"]), entry["block"], entry["min_cc"],
                  entry["only_cc"], gated, GATE_TRUSTED_CCS.get(entry["name"], ()) if gated else None,
                  entry["exact"], entry["description"])


KERNELS = collections.OrderedDict((e["name"], _kernel(e)) for e in _C.kernel_table())

# Named by the guide, not part of this build.
NOT_BUILT = collections.OrderedDict([
    ("cuda:v9", "not part of this build: its bf16 tensor-core exponent trick was validated only on "
                "sm_89 (RTX 4060) and has not been reimplemented and revalidated here"),
    ("cuda:tc3", "not part of this build: its fp16 tensor-core trick was validated only on "
                 "sm_80/86/89 binaries and has not been reimplemented and revalidated here"),
])

# backend="auto": the preset's kernels, highest priority first.
PRIORITY = {
    "hopper": ["cuda:wgmma", "cuda:h4", "cuda:h1", "reference"],
    "ada": ["cuda:tc3", "cuda:v9", "cuda:wgmma", "cuda:v4", "cuda:v1", "reference"],
    "b200": ["reference"],
}

BACKEND_NAMES = ("auto", "reference", "cpu", "cuda") + tuple(k for k in KERNELS if k != "reference") \
    + tuple(NOT_BUILT)

Resolution = collections.namedtuple("Resolution", "backend fallbacks warnings")

_FP8 = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}


# --------------------------------------------------------------------------------------------
# Static availability: can this kernel run this preset on this device at all?

def _static_reason(kernel, device, preset=None):
    """None if the kernel may run (preset) on the device, else the reason in words."""
    if kernel in NOT_BUILT:
        return NOT_BUILT[kernel]
    k = KERNELS[kernel]
    if preset is not None and preset not in k.presets:
        return f"{kernel} does not implement the '{preset}' preset"
    if _env("MMAEMU_DISABLE_CUDA"):
        return "CUDA disabled by MMAEMU_DISABLE_CUDA=1"
    info = device_info(device)
    if info is None:
        return f"no CUDA device {device}: {driver_status()}"
    if k.only_cc is not None and info["cc"] != k.only_cc:
        return f"{kernel} runs on sm_{k.only_cc} only (device {device} is sm_{info['cc']})"
    if info["cc"] < k.min_cc:
        return f"{kernel} needs sm_{k.min_cc} or newer (device {device} is sm_{info['cc']})"
    ok, detail = kernel_check(device, kernel)
    if not ok:
        return f"{kernel} does not load: {detail}"
    return None


def _gate_reason(kernel, device):
    """For gated kernels: None if auto may take it (after its self-test), else why not."""
    k = KERNELS[kernel]
    if not k.gated:
        return None
    info = device_info(device)
    if info["cc"] in k.auto_ccs or _env("MMAEMU_ALLOW_GATED_KERNELS"):
        return None
    return (f"{kernel} is gated: trusted on sm_{', sm_'.join(map(str, k.auto_ccs))} only "
            f"(device {device} is sm_{info['cc']}); MMAEMU_ALLOW_GATED_KERNELS=1 allows it "
            "after its self-test")


# --------------------------------------------------------------------------------------------
# Self-tests

SelfTestResult = collections.namedtuple(
    "SelfTestResult", "kernel preset device status passed required cases mismatches detail seconds cached")

_verdict_lock = threading.RLock()
_verdicts = {}
_expected_cache = {}


def _sources_hash():
    h = hashlib.sha256()
    d = _kernel_dir()
    if os.path.isdir(d):
        for name in sorted(os.listdir(d)):
            if name.endswith((".cu", ".h")):
                with open(os.path.join(d, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def _version():
    return getattr(sys.modules.get("mmaemu"), "__version__", "unknown")


def _verdict_key(kernel, preset, device):
    info = device_info(device) or {}
    route = kernel_check(device, kernel)[1].split(" (")[0]
    parts = ["mmaemu-selftest-1", _version(), kernel, preset, info.get("name", ""),
             info.get("uuid", ""), str(info.get("cc", "")), str(info.get("driver_version", "")),
             _sources_hash(), route, torch.__version__]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _verdict_path(key):
    return os.path.join(cache_dir(), "selftest", key + ".json")


def _load_verdict(key):
    try:
        with open(_verdict_path(key)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _store_verdict(key, verdict):
    path = _verdict_path(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(verdict, f, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs a rerun


def _codes(gen, shape, mode):
    """FP8 E4M3 codes: 'wide' (every finite code), 'narrow' (|x| near 1), 'special' (NaNs,
    zeros, -0, extremes, subnormals mixed in), as uint8."""
    if mode == "narrow":
        c = torch.randint(0x30, 0x48, shape, generator=gen, dtype=torch.int32)
        c |= torch.randint(0, 2, shape, generator=gen, dtype=torch.int32) << 7
        return c.to(torch.uint8)
    c = torch.randint(0, 256, shape, generator=gen, dtype=torch.int32)
    if mode == "wide":
        c = torch.where((c & 0x7F) == 0x7F, c ^ 0x01, c)  # no NaN
    else:
        specials = torch.tensor([0x00, 0x80, 0x7F, 0xFF, 0x7E, 0xFE, 0x01, 0x81, 0x07, 0x87, 0x08])
        pick = torch.randint(0, len(specials), shape, generator=gen)
        c = torch.where(torch.rand(shape, generator=gen) < 0.08, specials[pick], c)
    return c.to(torch.uint8)


def _fp8(codes):
    return codes.view(torch.float8_e4m3fn)


_cases_cache = []


def _selftest_cases():
    """The self-test: (name, op, arguments) for a kernel and preset, with deterministic CPU
    inputs; the kernel's result on the device must equal the CPU model's bits in every case."""
    if not _cases_cache:
        _cases_cache.extend(_build_cases())
    return _cases_cache


def _build_cases():
    cases = []

    def acc_case(name, a, b, fast, splits=1, scheme="none"):
        cases.append((name, "accumulate", dict(x=a, w=b, fast=fast, splits=splits, scheme=scheme)))

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
    for out in (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2):
        for sa, sb in ((2.0 ** -7, 3.0), (1e-30, 1e-12), (1e30, 1e8)):
            for epi in (0, 1, 2):
                cases.append((f"epilogue ({out}, scales {sa:g} {sb:g}, order {epi})", "scaled_mm",
                              dict(x=a, w=b, fast=True, out=out, sa=sa, sb=sb, epi=epi,
                                   sr=0.5 if out in (torch.float8_e4m3fn, torch.float8_e5m2) else None)))
    cases.append(("epilogue with splits (bf16, 3 pairwise)", "scaled_mm",
                  dict(x=_codes(gen, (24, 700), "wide"), w=_codes(gen, (20, 700), "wide"), fast=False,
                       out=torch.bfloat16, sa=0.25, sb=0.5, epi=0, sr=None, splits=3, scheme="pairwise")))
    # 7. many tiles and blocks
    acc_case("large (192x192x512)", _codes(gen, (192, 512), "wide"), _codes(gen, (192, 512), "wide"), True)
    return cases


def _run_case(op, kw, preset, backend, device):
    x, w = _fp8(kw["x"]).to(device), _fp8(kw["w"]).to(device)
    splits, scheme = kw.get("splits", 1), kw.get("scheme", "none")
    if op == "accumulate":
        return torch.ops.mmaemu.accumulate(x, w, kw["fast"], preset, splits, scheme, backend)
    dev = x.device
    sa = torch.tensor(kw["sa"], dtype=torch.float32, device=dev)
    sb = torch.tensor(kw["sb"], dtype=torch.float32, device=dev)
    sr = None if kw["sr"] is None else torch.tensor(kw["sr"], dtype=torch.float32, device=dev)
    return torch.ops.mmaemu.scaled_mm(x, w.t(), sa, sb, None, sr, kw["out"], kw["fast"], preset,
                                      splits, scheme, backend, kw["epi"])


def _expected(preset):
    """The CPU model's results for every case of the preset (computed once per process)."""
    if preset not in _expected_cache:
        from .testing import bits
        _expected_cache[preset] = [bits(_run_case(op, kw, preset, "reference", "cpu"))
                                   for _, op, kw in _selftest_cases()]
    return _expected_cache[preset]


def _selftest_one(kernel, preset, device):
    from .testing import bits
    t0 = time.time()
    cases = _selftest_cases()
    expected = _expected(preset)
    dev = torch.device("cuda", device)
    mismatches, first = 0, None
    for (name, op, kw), want in zip(cases, expected):
        try:
            got = bits(_run_case(op, kw, preset, kernel, dev).cpu())
        except Exception as e:  # a kernel that cannot run a case fails the test (not cached)
            return {"passed": False, "cases": len(cases), "mismatches": -1, "error": True,
                    "detail": f"{name}: {type(e).__name__}: {e}", "seconds": time.time() - t0}
        n = int((got != want).sum())
        if n and first is None:
            first = f"{name}: {n} of {want.numel()} outputs differ"
        mismatches += n
    torch.cuda.synchronize(dev)
    return {"passed": mismatches == 0, "cases": len(cases), "mismatches": mismatches,
            "detail": first or f"{len(cases)} cases, every output bit-identical to the CPU model",
            "seconds": time.time() - t0}


def _capturing():
    try:
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:
        return False


def verdict(kernel, preset, device, run=True, force=False):
    """The self-test verdict of a kernel for a preset on a device: a dict with passed, cases,
    mismatches, detail, seconds, cached; None if unknown and not run (run=False, or while a CUDA
    graph is being captured)."""
    with _verdict_lock:
        mem_key = (kernel, preset, device)
        if not force and mem_key in _verdicts:
            return _verdicts[mem_key]
        key = _verdict_key(kernel, preset, device)
        v = None if force else _load_verdict(key)
        if v is not None:
            v["cached"] = True
        elif run and not _capturing() and torch.cuda.is_available():
            v = _selftest_one(kernel, preset, device)
            v.update(cached=False, kernel=kernel, preset=preset, device=device_info(device),
                     mmaemu=_version(), torch=torch.__version__)
            if not v.get("error"):
                _store_verdict(key, v)
        if v is not None:
            _verdicts[mem_key] = v
        return v


def selftest(device=None, kernels=None, presets=None, force=False):
    """Runs (or reads the cached verdicts of) every kernel's self-test on the device(s).

    Returns a list of SelfTestResult, one per (kernel, preset, device); status is 'passed',
    'failed' or 'unavailable' (with the reason in detail). `required` marks the results that
    must pass on this device: every IEEE-exact kernel that loads (gated kernels are optional).
    """
    if device is None:
        devices = list(range(device_count())) if torch.cuda.is_available() else []
    else:
        devices = [device.index if isinstance(device, torch.device) else int(device)]
    out = []
    names = kernels or [k for k in KERNELS] + list(NOT_BUILT)
    for dev in devices:
        for kernel in names:
            k = KERNELS.get(kernel)
            for preset in (presets or (k.presets if k else ("ada",))):
                if k is not None and preset not in k.presets:
                    continue
                reason = _static_reason(kernel, dev, preset)
                if reason is not None:
                    out.append(SelfTestResult(kernel, preset, dev, "unavailable", False, False, 0, 0,
                                              reason, 0.0, False))
                    continue
                v = verdict(kernel, preset, dev, force=force)
                if v is None:
                    out.append(SelfTestResult(kernel, preset, dev, "unavailable", False, False, 0, 0,
                                              "self-test not run (no CUDA in torch, or a graph capture)",
                                              0.0, False))
                    continue
                out.append(SelfTestResult(kernel, preset, dev, "passed" if v["passed"] else "failed",
                                          v["passed"], not k.gated, v["cases"], v["mismatches"],
                                          v["detail"], v["seconds"], v.get("cached", False)))
    return out


# --------------------------------------------------------------------------------------------
# Selection

def _fmt_name(f):
    if isinstance(f, str):
        return f.lower()
    return _FP8.get(f, str(f))


def _device_of(tensors):
    if isinstance(tensors, (torch.Tensor, torch.device)):
        tensors = [tensors]
    for t in tensors:
        if isinstance(t, torch.Tensor):
            return t.device
        if isinstance(t, torch.device):
            return t
    return torch.device("cpu")


_warned = set()


def warn_once(warning_list, stacklevel=3):
    """Emits each BackendFallbackWarning of a Resolution once per process."""
    for w in warning_list:
        msg = str(w)
        if msg not in _warned:
            _warned.add(msg)
            warnings.warn(w, stacklevel=stacklevel)


_resolve_cache = {}
_ENV_KEYS = ("MMAEMU_BACKEND", "MMAEMU_DISABLE_CUDA", "MMAEMU_ALLOW_GATED_KERNELS")


def resolve(backend_request, tensors, preset, fmt_pair):
    """Chooses the backend for a GEMM.

    backend_request: None (MMAEMU_BACKEND or "auto"), "auto", "reference", "cuda", or a kernel
    name; tensors: the operands (their device decides; a torch.device also works); preset:
    "hopper", "ada", "b200";
    fmt_pair: the operands' FP8 formats (torch dtypes or "e4m3"/"e5m2").

    Returns Resolution(backend, fallbacks, warnings): the string to pass as the ops' `backend`
    argument, the kernels skipped with the reason for each ("name: why"), and the
    BackendFallbackWarning instances to emit (see warn_once). Raises BackendUnavailableError for
    an explicit request that cannot run here, TypeError for a name that is not a str, KeyError
    for an unknown name (the argument or MMAEMU_BACKEND).
    """
    request = backend_request if backend_request is not None else os.environ.get("MMAEMU_BACKEND") or "auto"
    if not isinstance(request, str):
        raise TypeError(f"backend must be a str, got {type(request).__name__}")
    if request not in BACKEND_NAMES:
        src = "" if backend_request is not None else " (from MMAEMU_BACKEND)"
        raise KeyError(f"unknown backend {request!r}{src}; expected one of {', '.join(BACKEND_NAMES)}")
    if preset not in PRIORITY:
        raise KeyError(f"unknown preset {preset!r}")
    if request in NOT_BUILT:
        raise BackendUnavailableError(f"backend {request!r} is {NOT_BUILT[request]}")
    device = _device_of(tensors)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    fa, fb = (_fmt_name(f) for f in fmt_pair)
    key = (request, str(device), preset, fa, fb, tuple(os.environ.get(k) for k in _ENV_KEYS))
    hit = _resolve_cache.get(key)
    if hit is not None:
        return hit
    capturing = _capturing()
    res = _resolve(request, device, preset, fa, fb, capturing)
    if not capturing:
        _resolve_cache[key] = res
    return res


def _resolve(request, device, preset, fa, fb, capturing=False):
    if device.type != "cuda":
        if device.type == "cpu" and request in ("auto", "cpu", "reference"):
            name = "cpu" if request == "auto" else request
            return Resolution(name, ["cuda: tensors on cpu"] if request == "auto" else [], [])
        if device.type == "cpu":
            raise BackendUnavailableError(f"backend {request!r} cannot run on CPU tensors; use "
                                          "backend='auto', 'cpu' or 'reference'")
        raise BackendUnavailableError(f"mmaemu has no backend for {device.type} tensors")
    if request == "cpu":
        raise BackendUnavailableError("backend 'cpu' runs on CPU tensors only; these are on "
                                      f"{device}; use backend='auto' or a CUDA kernel")
    dev = device.index
    e4m3 = fa == "e4m3" and fb == "e4m3"

    def host_fallback(why, notes):
        w = BackendFallbackWarning(f"no CUDA kernel can run on cuda:{dev} ({why}); the reference "
                                   "model runs on the CPU with copies of the operands")
        return Resolution("reference", notes + [f"reference (CUDA): {why}"], [w])

    if _env("MMAEMU_DISABLE_CUDA"):
        if request in ("auto", "reference"):
            return host_fallback("MMAEMU_DISABLE_CUDA=1", [])
        raise BackendUnavailableError(f"backend {request!r}: CUDA disabled by MMAEMU_DISABLE_CUDA=1")

    if request == "reference":
        why = _static_reason("reference", dev)
        return host_fallback(why, []) if why else Resolution("reference", [], _nvrtc_warnings(dev, "reference"))

    if request not in ("auto", "cuda"):  # an explicit kernel
        k = KERNELS[request]
        why = _static_reason(request, dev, preset)
        if why is None and not e4m3:
            why = f"{request} computes E4M3 x E4M3 only (got {fa} x {fb})"
        if why is None and k.gated:
            v = verdict(request, preset, dev)
            if v is None:
                why = f"{request}: its self-test has not run on cuda:{dev} (run it before capturing a graph)"
            elif not v["passed"]:
                why = f"{request} failed its self-test on cuda:{dev}: {v['detail']}"
        if why is not None:
            raise BackendUnavailableError(why)
        return Resolution(request, [], _nvrtc_warnings(dev, request))

    # auto / cuda: the preset's priority list
    fallbacks, warns = [], []
    candidates = [k for k in PRIORITY[preset] if not (request == "cuda" and k == "reference")]
    for name in candidates:
        if name in NOT_BUILT:
            fallbacks.append(f"{name}: {NOT_BUILT[name]}")
            continue
        k = KERNELS[name]
        if name != "reference" and not e4m3:
            fallbacks.append(f"{name}: E5M2 and mixed formats run on the reference backend")
            continue
        why = _static_reason(name, dev, preset) or _gate_reason(name, dev)
        if why is None:
            v = verdict(name, preset, dev)
            if v is None and capturing and k.exact:
                # no self-test can run inside a graph capture: an IEEE-exact kernel is exact by
                # construction, so it may run before its (safety-net) self-test has
                fallbacks.append(f"{name}: self-test pending (stream capture); used without it")
                return Resolution(name, fallbacks, warns + _nvrtc_warnings(dev, name))
            if v is None:
                why = f"self-test not run on cuda:{dev} (torch has no CUDA, or a graph capture)"
            elif not v["passed"]:
                why = f"failed its self-test on cuda:{dev}: {v['detail']}"
                warns.append(BackendFallbackWarning(
                    f"{name} failed its self-test on cuda:{dev} ({v['detail']}); a slower kernel runs"))
        if why is None:
            return Resolution(name, fallbacks, warns + _nvrtc_warnings(dev, name))
        fallbacks.append(f"{name}: {why}")
    if request == "cuda":
        raise BackendUnavailableError("no CUDA kernel can run this GEMM here: " + "; ".join(fallbacks))
    return host_fallback(fallbacks[-1].split(": ", 1)[-1] if fallbacks else "unknown", fallbacks[:-1])


def _nvrtc_warnings(device, kernel):
    ok, detail = kernel_check(device, kernel)
    if ok and detail.split(" (")[0].split("; ")[-1].startswith("NVRTC"):
        return [BackendFallbackWarning(f"{kernel} on cuda:{device} was compiled with NVRTC "
                                       f"({detail}); no prebuilt kernel fits this GPU")]
    return []


# --------------------------------------------------------------------------------------------
# Status (for `python -m mmaemu info`)

def cpu_name():
    """This CPU's model name (Linux /proc/cpuinfo), else what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def cpu_status():
    """The `cpu` backend's row: always available on CPU tensors; which SIMD paths this CPU has."""
    forced = os.environ.get("MMAEMU_CPU_SIMD") or "auto"
    return dict(name="cpu", device="cpu", available=True,
                reason=f"the fast exact CPU kernel; SIMD paths here: {_C.cpu_simd_paths()}; "
                       f"MMAEMU_CPU_SIMD={forced}, {_C.cpu_simd_choice()}; "
                       f"{torch.get_num_threads()} threads",
                presets=list(KERNELS["reference"].presets), gated=False, exact=True,
                auto_for=list(PRIORITY), load=None)


def status(device=None):
    """Every backend with available / unavailable and the reason, per CUDA device (or for the
    CPU when there is none). A list of dicts: name, device, available, reason, presets, gated,
    exact, auto_for (the presets for which backend="auto" picks it now, among kernels whose
    verdict is known; self-tests are not run here), load (how its module was loaded)."""
    rows = [dict(name="reference", device="cpu", available=True,
                 reason="the scalar C model, on the CPU", presets=list(KERNELS["reference"].presets),
                 gated=False, exact=True, auto_for=[], load=None),
            cpu_status()]
    if device is None:
        devices = list(range(device_count()))
    else:
        devices = [device.index if isinstance(device, torch.device) else int(device)]
    if not devices:
        why = ("CUDA disabled by MMAEMU_DISABLE_CUDA=1" if _env("MMAEMU_DISABLE_CUDA")
               else driver_status())
        for name, k in KERNELS.items():
            if name != "reference":
                rows.append(dict(name=name, device=None, available=False, reason=why,
                                 presets=list(k.presets), gated=k.gated, exact=k.exact,
                                 auto_for=[], load=None))
        for name, why_nb in NOT_BUILT.items():
            rows.append(dict(name=name, device=None, available=False, reason=why_nb, presets=["ada"],
                             gated=True, exact=False, auto_for=[], load=None))
        return rows
    for dev in devices:
        auto = {}
        for preset, order in PRIORITY.items():
            for name in order:
                if name in NOT_BUILT or _static_reason(name, dev, preset) or _gate_reason(name, dev):
                    continue
                v = verdict(name, preset, dev, run=False)
                if v is not None and not v["passed"]:
                    continue
                auto[preset] = name
                break
        for name, k in KERNELS.items():
            why = _static_reason(name, dev)
            gate = None if why else _gate_reason(name, dev)
            load = kernel_check(dev, name)[1] if why is None else None
            verdicts = {p: verdict(name, p, dev, run=False) for p in k.presets} if why is None else {}
            failed = [p for p, v in verdicts.items() if v is not None and not v["passed"]]
            reason = why or gate or ("failed its self-test for " + ", ".join(failed) if failed else
                                     "loaded: " + load)
            rows.append(dict(name=name, device=dev, available=why is None, reason=reason,
                             presets=list(k.presets), gated=k.gated, exact=k.exact,
                             auto_for=[p for p, n in auto.items() if n == name], load=load,
                             selftest={p: (None if v is None else v["passed"]) for p, v in verdicts.items()}))
        for name, why_nb in NOT_BUILT.items():
            rows.append(dict(name=name, device=dev, available=False, reason=why_nb, presets=["ada"],
                             gated=True, exact=False, auto_for=[], load=None))
    return rows
