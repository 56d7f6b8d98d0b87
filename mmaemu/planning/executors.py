"""Which executor computes a GEMM: the policy over the kernels that can run (user guide §6).

Every executor returns the reference bits; they differ in where they run and how fast. A plan
names one completely, and the op runs exactly it (csrc/torch/ops.cpp refuses anything else):

  reference            the scalar C model on the CPU
  cpu:<simd>           the fast exact CPU kernel with its narrow SIMD kernel: portable, avx2, avx512
  cuda:<kernel>        a CUDA kernel of the C core's table: cuda:reference (the scalar model, one
                       thread per element), cuda:h1/h4 (hopper), cuda:v1/v4 (ada), gated cuda:wgmma
  host:reference       CUDA tensors computed on host copies, by the scalar model
  host:cpu:<simd>      ... or by the fast CPU kernel: where no CUDA kernel can run the call

resolve() turns a request ("auto", "cpu", "cuda", "reference", a kernel name; None for
MMAEMU_BACKEND) into an executor, reading only facts: the kernel table (runtime/registry.py),
what can run on the device (runtime/availability.py), the cached self-test verdicts and the CPU
kernels' measured speed (runtime/facts.py). It runs nothing. On CPU tensors `auto` is
`cpu:<simd>`, the SIMD kernel whose measured speed gives this GEMM's padded tiles the least time
(MMAEMU_CPU_SIMD forces one). On CUDA tensors `auto` takes the preset's highest-priority kernel
that can run there and passed its self-test there; gated kernels also need a compute capability
where they are trusted, or MMAEMU_ALLOW_GATED_KERNELS=1.
"""
import collections

import torch

from ..errors import BackendFallbackWarning, BackendUnavailableError
from ..formats import FP8_DTYPES
from ..runtime import config, facts, loader
from ..runtime.availability import gate_reason, split_reason, static_reason
from ..runtime.registry import BACKEND_NAMES, KERNELS, NOT_BUILT, SIMD_KERNELS
from .profiles import get_preset

# backend="auto" on CUDA tensors: the preset's kernels, highest priority first.
PRIORITY = {
    "hopper": ["cuda:wgmma", "cuda:h4", "cuda:h1", "reference"],
    "ada": ["cuda:tc3", "cuda:v9", "cuda:wgmma", "cuda:v4", "cuda:v1", "reference"],
    "b200": ["reference"],
}

# The CPU's SIMD kernels in the order a tie is broken (the wider first).
SIMD_ORDER = ("avx512", "avx2")

# executor, the executors skipped ("name: why"), BackendFallbackWarning instances, and why this
# executor where that is a choice among equals (the CPU's SIMD kernel)
Resolution = collections.namedtuple("Resolution", "executor fallbacks warnings note",
                                    defaults=("",))



def cuda_executor(kernel):
    """The executor of a CUDA kernel of the table ("reference" is the CUDA reference kernel)."""
    return "cuda:reference" if kernel == "reference" else kernel


# --------------------------------------------------------------------------------------------
# The CPU

def simd_kernel(M, N, named=None):
    """(name, why) of the CPU's narrow SIMD kernel for an M x N GEMM; named: the kernel of a
    backend="cpu:<name>" request (else MMAEMU_CPU_SIMD's, else the fastest here)."""
    source = f"backend='cpu:{named}'" if named else "MMAEMU_CPU_SIMD={}"
    forced = named or config.get("MMAEMU_CPU_SIMD")
    available = [n for n, k in SIMD_KERNELS.items() if k["available"]]
    if forced != "auto":
        source = source.format(forced)
        if forced not in available:
            raise BackendUnavailableError(
                f"{source}: this CPU has no {forced} kernel (it runs {', '.join(available)})")
        return forced, source
    wide = [n for n in SIMD_ORDER if n in available]
    if not wide:
        return "portable", "no AVX2 or AVX-512 kernel on this CPU"
    rates = facts.cpu_simd_rates()
    if not rates:
        return wide[0], ("the widest kernel: their speed is not measured on this machine yet "
                         "(the first call measures it)")
    best, best_t = None, None
    for n in wide:
        k, rate = SIMD_KERNELS[n], rates.get(n, 0.0)
        if rate <= 0:
            continue
        rows = -(-max(M, 1) // k["row_step"]) * k["row_step"]
        cols = -(-max(N, 1) // k["w"]) * k["w"]
        t = rows * cols / rate
        if best is None or t < best_t:
            best, best_t = n, t
    best = best or wide[0]
    measured = ", ".join(f"{n} {rates[n] * 1e-9:.1f} GMAC/s" for n in wide if n in rates)
    return best, f"the least time for its padded tiles at the speeds measured here ({measured})"


def _cpu(request, M, N):
    if request == "reference":
        return Resolution("reference", [], [])
    name, why = simd_kernel(M, N, request[4:] if request.startswith("cpu:") else None)
    return Resolution(f"cpu:{name}", ["cuda: tensors on cpu"] if request == "auto" else [], [],
                      f"SIMD kernel {name}: {why}")


# --------------------------------------------------------------------------------------------
# CUDA

_resolve_cache = {}
_ENV_KEYS = ("MMAEMU_BACKEND", "MMAEMU_DISABLE_CUDA", "MMAEMU_ALLOW_GATED_KERNELS",
             "MMAEMU_CPU_SIMD")


def capturing():
    """Whether a CUDA graph is being captured (no self-test can run inside one)."""
    try:
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:
        return False


def _nvrtc_warnings(device, kernel):
    ok, detail = loader.kernel_check(device, kernel)
    if ok and detail.split(" (")[0].split("; ")[-1].startswith("NVRTC"):
        return [BackendFallbackWarning(f"{kernel} on cuda:{device} was compiled with NVRTC "
                                       f"({detail}); no prebuilt kernel fits this GPU")]
    return []


def _host(why, notes, M, N, request):
    """CUDA tensors computed on host copies: the scalar model if asked for, else the fast kernel."""
    if request == "reference":
        executor = "host:reference"
    else:
        executor = f"host:cpu:{simd_kernel(M, N)[0]}"
    w = BackendFallbackWarning(f"no CUDA kernel can run this call ({why}); {executor} computes "
                               "it on host copies of the operands")
    return Resolution(executor, notes + [f"{executor}: {why}"], [w])


def _cuda(request, dev, preset, rr_tile, e4m3, splits, on_host, M, N, capture):
    if request == "cpu" or request.startswith("cpu:"):
        raise BackendUnavailableError(f"backend {request!r} runs on CPU tensors only; these are "
                                      f"on cuda:{dev}; use backend='auto' or a CUDA kernel")
    if on_host:
        if request not in ("auto", "reference"):
            raise BackendUnavailableError(f"backend {request!r}: no CUDA kernel computes {on_host}")
        return _host(f"no CUDA kernel computes {on_host}", [], M, N, request)
    if config.get("MMAEMU_DISABLE_CUDA"):
        if request in ("auto", "reference"):
            return _host("MMAEMU_DISABLE_CUDA is set", [], M, N, request)
        raise BackendUnavailableError(f"backend {request!r}: CUDA disabled by MMAEMU_DISABLE_CUDA")
    if request == "reference":
        why = static_reason("reference", dev)
        return _host(why, [], M, N, request) if why else \
            Resolution("cuda:reference", [], _nvrtc_warnings(dev, "reference"))
    if request == "cuda:reference":    # the CUDA reference kernel itself, never host copies
        why = static_reason("reference", dev)
        if why:
            raise BackendUnavailableError(f"backend 'cuda:reference': {why}")
        return Resolution("cuda:reference", [], _nvrtc_warnings(dev, "reference"))
    if request not in ("auto", "cuda"):  # an explicit kernel
        why = static_reason(request, dev, preset)
        if why is None and not e4m3:
            why = f"{request} computes E4M3 x E4M3 only"
        why = why or split_reason(request, preset, rr_tile, splits)
        if why is None and KERNELS[request].gated:
            v = facts.verdict(request, preset, dev)
            if v is None:
                why = (f"{request}: its self-test has not run on cuda:{dev} (python -m mmaemu "
                       "selftest, or a call outside a graph capture, runs it)")
            elif not v["passed"]:
                why = f"{request} failed its self-test on cuda:{dev}: {v['detail']}"
        if why is not None:
            raise BackendUnavailableError(why)
        return Resolution(request, [], _nvrtc_warnings(dev, request))
    fallbacks, warns = [], []
    for name in [k for k in PRIORITY[preset] if not (request == "cuda" and k == "reference")]:
        if name in NOT_BUILT:
            fallbacks.append(f"{name}: {NOT_BUILT[name]}")
            continue
        if name != "reference" and not e4m3:
            fallbacks.append(f"{name}: E5M2 and mixed formats run on the reference kernel")
            continue
        why = split_reason(name, preset, rr_tile, splits) or static_reason(name, dev, preset) \
            or gate_reason(name, dev)
        if why is None:
            v = facts.verdict(name, preset, dev)
            if v is None and capture and KERNELS[name].exact:
                # no self-test can run inside a graph capture: an IEEE-exact kernel is exact by
                # construction, so it may run before its (safety-net) self-test has
                fallbacks.append(f"{name}: self-test pending (stream capture); used without it")
                return Resolution(cuda_executor(name), fallbacks, warns + _nvrtc_warnings(dev, name))
            if v is None:
                why = (f"self-test not run on cuda:{dev} yet (the first call's warm-up or "
                       "python -m mmaemu selftest runs it)")
            elif not v["passed"]:
                why = f"failed its self-test on cuda:{dev}: {v['detail']}"
                warns.append(BackendFallbackWarning(
                    f"{name} failed its self-test on cuda:{dev} ({v['detail']}); a slower kernel runs"))
        if why is None:
            return Resolution(cuda_executor(name), fallbacks, warns + _nvrtc_warnings(dev, name))
        fallbacks.append(f"{name}: {why}")
    if request == "cuda":
        raise BackendUnavailableError("no CUDA kernel can run this GEMM here: " + "; ".join(fallbacks))
    return _host(fallbacks[-1].split(": ", 1)[-1] if fallbacks else "unknown", fallbacks[:-1], M, N,
                 request)


# --------------------------------------------------------------------------------------------
# The request

def request_of(backend):
    """The backend request: the argument, else MMAEMU_BACKEND; checked against the known names."""
    request = backend if backend is not None else config.get("MMAEMU_BACKEND")
    if not isinstance(request, str):
        raise TypeError(f"backend must be a str, got {type(request).__name__}")
    if request not in BACKEND_NAMES:
        src = "" if backend is not None else " (from MMAEMU_BACKEND)"
        raise KeyError(f"unknown backend {request!r}{src}; expected one of {', '.join(BACKEND_NAMES)}")
    if request in NOT_BUILT:
        raise BackendUnavailableError(f"backend {request!r} is {NOT_BUILT[request]}")
    return request


def cuda_device(device):
    """A CUDA device with its index (torch's current one where none is named)."""
    if device.index is not None:
        return device
    if not torch.cuda.is_available():   # torch cannot say which device "cuda" means
        raise BackendUnavailableError("a CUDA device was named, but torch has no CUDA device "
                                      f"here (torch {torch.__version__})")
    return torch.device("cuda", torch.cuda.current_device())


def resolve(backend, device, preset, fmt_pair, splits=1, *, M=1, N=1, on_host=None):
    """The executor of a GEMM: Resolution(executor, fallbacks, warnings).

    backend: the request (None: MMAEMU_BACKEND, else "auto"); device: the operands' torch.device;
    preset: its name; fmt_pair: the operands' FP8 formats (torch dtypes or "e4m3"/"e5m2");
    splits: the plan's split count (a kernel must compute the preset's split layout for it); M, N: the GEMM's size (the CPU kernel's tile padding); on_host: what
    makes CUDA tensors run on host copies (row-wise scales, a bias), or None. fallbacks: the
    executors skipped, each with the reason ("name: why"); warnings: BackendFallbackWarning
    instances. Raises BackendUnavailableError for a request that cannot run here, TypeError for
    a name that is not a str, KeyError for an unknown name (the argument or MMAEMU_BACKEND).
    """
    request = request_of(backend)
    if preset not in PRIORITY:
        raise KeyError(f"unknown preset {preset!r}")
    if device.type == "cpu":
        if request not in ("auto", "cpu", "reference") and not request.startswith("cpu:"):
            raise BackendUnavailableError(f"backend {request!r} cannot run on CPU tensors; use "
                                          "backend='auto', 'cpu', 'cpu:<simd>' or 'reference'")
        return _cpu(request, M, N)
    if device.type != "cuda":
        raise BackendUnavailableError(f"mmaemu has no backend for {device.type} tensors")
    dev = cuda_device(device).index
    rr_tile = get_preset(preset).split_rr_tile
    fa, fb = (f.lower() if isinstance(f, str) else FP8_DTYPES.get(f, str(f)) for f in fmt_pair)
    e4m3 = fa == "e4m3" and fb == "e4m3"
    capture = capturing()
    key = (request, dev, preset, e4m3, int(splits), rr_tile, on_host, facts.generation(),
           tuple(config.raw(k) for k in _ENV_KEYS))
    hit = _resolve_cache.get(key)
    if hit is not None:
        return hit
    res = _cuda(request, dev, preset, rr_tile, e4m3, int(splits), on_host, M, N, capture)
    if not capture and not res.executor.startswith("host:"):   # host: its SIMD kernel is per size
        _resolve_cache[key] = res
    return res
