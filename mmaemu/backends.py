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

The self-test and its verdict cache are selftest.py; the status rows that `python -m mmaemu
info` prints are diagnostics.py. Both read the registry here, and their public names
(selftest, verdict, SelfTestResult, status, cpu_status, cpu_name, cache_dir) are importable
from this module too.
"""
import collections
import warnings

import torch

from . import _C
from . import config
from ._loader import (cache_dir, cuda_disabled, device_count, device_info,  # noqa: F401
                      driver_status, kernel_check, kernel_dir as _kernel_dir, nvrtc_compile,
                      nvrtc_status)
from .errors import BackendFallbackWarning, BackendUnavailableError
from .profiles import get_preset

# --------------------------------------------------------------------------------------------
# The registry: a view of the C core's kernel table (csrc/cuda_kernels.c), plus policy

Kernel = collections.namedtuple(
    "Kernel", "name presets block min_cc only_cc gated auto_ccs exact round_robin_splits description")

# Policy: the compute capabilities on which backend="auto" may take a gated kernel (after its
# self-test there); elsewhere only MMAEMU_ALLOW_GATED_KERNELS=1 allows it. cuda:wgmma runs on
# sm_90 only (the table's only_cc): its schedule was written for Hopper's wgmma (inferred).
GATE_TRUSTED_CCS = {"cuda:wgmma": (90,)}


def _kernel(entry):
    gated = entry["gated"]
    return Kernel(entry["name"], tuple(entry["presets"]), entry["block"], entry["min_cc"],
                  entry["only_cc"], gated, GATE_TRUSTED_CCS.get(entry["name"], ()) if gated else None,
                  entry["exact"], entry["round_robin_splits"], entry["description"])


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
    if cuda_disabled():
        return "CUDA disabled by MMAEMU_DISABLE_CUDA"
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


def _split_reason(kernel, preset, splits):
    """None if the kernel computes the plan's split layout, else why not: a preset that deals
    k tiles round-robin to S > 1 slices (ada) needs a kernel with that capability in the table
    (round_robin_splits; the reference kernel), as the loader refuses it on the others."""
    tile = get_preset(preset).split_rr_tile
    if splits <= 1 or not tile or KERNELS[kernel].round_robin_splits:
        return None
    return (f"{kernel} computes contiguous split slices only (the '{preset}' preset deals {tile}-k "
            f"tiles round-robin to its {splits} slices)")


def _gate_reason(kernel, device):
    """For gated kernels: None if auto may take it (after its self-test), else why not."""
    k = KERNELS[kernel]
    if not k.gated:
        return None
    info = device_info(device)
    if info["cc"] in k.auto_ccs or config.get("MMAEMU_ALLOW_GATED_KERNELS"):
        return None
    return (f"{kernel} is gated: trusted on sm_{', sm_'.join(map(str, k.auto_ccs))} only "
            f"(device {device} is sm_{info['cc']}); MMAEMU_ALLOW_GATED_KERNELS=1 allows it "
            "after its self-test")


# --------------------------------------------------------------------------------------------
# Graph capture (no self-test can run inside one)

def _capturing():
    try:
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:
        return False



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


def resolve(backend_request, tensors, preset, fmt_pair, splits=1):
    """Chooses the backend for a GEMM.

    backend_request: None (MMAEMU_BACKEND or "auto"), "auto", "reference", "cuda", or a kernel
    name; tensors: the operands (their device decides; a torch.device also works); preset:
    "hopper", "ada", "b200";
    fmt_pair: the operands' FP8 formats (torch dtypes or "e4m3"/"e5m2"); splits: the plan's
    split-K count S (a kernel must compute the preset's split layout for it).

    Returns Resolution(backend, fallbacks, warnings): the string to pass as the ops' `backend`
    argument, the kernels skipped with the reason for each ("name: why"), and the
    BackendFallbackWarning instances to emit (see warn_once). Raises BackendUnavailableError for
    an explicit request that cannot run here, TypeError for a name that is not a str, KeyError
    for an unknown name (the argument or MMAEMU_BACKEND).
    """
    request = backend_request if backend_request is not None else config.get("MMAEMU_BACKEND")
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
        if not torch.cuda.is_available():   # torch cannot say which device "cuda" means
            raise BackendUnavailableError("a CUDA device was named, but torch has no CUDA "
                                          f"device here (torch {torch.__version__})")
        device = torch.device("cuda", torch.cuda.current_device())
    fa, fb = (_fmt_name(f) for f in fmt_pair)
    splits = int(splits)
    key = (request, str(device), preset, fa, fb, splits, tuple(config.raw(k) for k in _ENV_KEYS))
    hit = _resolve_cache.get(key)
    if hit is not None:
        return hit
    capturing = _capturing()
    res = _resolve(request, device, preset, fa, fb, splits, capturing)
    if not capturing:
        _resolve_cache[key] = res
    return res


def _resolve(request, device, preset, fa, fb, splits=1, capturing=False):
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

    if cuda_disabled():
        if request in ("auto", "reference"):
            return host_fallback("MMAEMU_DISABLE_CUDA is set", [])
        raise BackendUnavailableError(f"backend {request!r}: CUDA disabled by MMAEMU_DISABLE_CUDA")

    if request == "reference":
        why = _static_reason("reference", dev)
        return host_fallback(why, []) if why else Resolution("reference", [], _nvrtc_warnings(dev, "reference"))

    if request not in ("auto", "cuda"):  # an explicit kernel
        k = KERNELS[request]
        why = _static_reason(request, dev, preset)
        if why is None and not e4m3:
            why = f"{request} computes E4M3 x E4M3 only (got {fa} x {fb})"
        if why is None:
            why = _split_reason(request, preset, splits)
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
        why = _split_reason(name, preset, splits) or _static_reason(name, dev, preset) \
            or _gate_reason(name, dev)
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
# The self-test (selftest.py) and the status rows (diagnostics.py), under their public names here.
# Imported last: both modules read the registry above through this module.

from .selftest import (SelfTestResult, _load_verdict, _store_verdict,  # noqa: E402,F401
                       selftest, verdict)
from .selftest import _codes  # noqa: E402,F401  (test_cuda_gpu.py draws its inputs with it)
from .diagnostics import cpu_name, cpu_status, status  # noqa: E402,F401
