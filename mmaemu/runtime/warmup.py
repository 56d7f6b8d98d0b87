"""The first call's warm-up: the facts planning reads are measured here, once, before planning.

Planning never runs a kernel (planning/executors.py reads runtime/facts.py). So before a call is
planned, the API makes sure the facts its device needs exist, measuring what is missing:
- CPU tensors: the speed of each SIMD kernel of the cpu executor on this machine (one thread,
  full tiles; a few milliseconds, once per machine: the result is cached on disk);
- CUDA tensors: the self-test of each kernel `auto` (or a named gated kernel) may take for the
  preset on the device (runtime/selftest.py: every case through the kernel, compared with the CPU
  model; once per device, driver and package version, cached on disk). `python -m mmaemu
  selftest` does the same ahead of time.
"""
import threading

from .. import _C
from . import facts
from .availability import gate_reason, static_reason
from .registry import KERNELS, NOT_BUILT, SIMD_KERNELS

_lock = threading.Lock()
_done = set()


def ensure_cpu():
    """Measures the SIMD kernels' speed if this machine has no measurement yet."""
    if ("cpu", facts.generation()) in _done:
        return
    with _lock:
        if facts.cpu_simd_rates() is None and any(
                k["available"] for n, k in SIMD_KERNELS.items() if n != "portable"):
            facts.store_cpu_simd_rates(_C.cpu_simd_measure())
        _done.add(("cpu", facts.generation()))


def ensure_cuda(device, preset, request):
    """Runs the self-test of each kernel the request may take for the preset on CUDA device
    `device` (index) whose verdict is not stored yet; and ensure_cpu(), as a call that no CUDA
    kernel computes runs on host copies with the CPU's fastest SIMD kernel."""
    ensure_cpu()
    key = ("cuda", device, preset, request, facts.generation())
    if key in _done:
        return
    from ..planning.executors import PRIORITY
    from .selftest import measure_verdict
    if request in ("auto", "cuda"):
        names = [k for k in PRIORITY[preset] if k not in NOT_BUILT]
    elif request in KERNELS and KERNELS[request].gated:
        names = [request]
    else:
        names = []
    for name in names:
        if static_reason(name, device, preset) or gate_reason(name, device):
            continue
        measure_verdict(name, preset, device)
    _done.add(key[:-1] + (facts.generation(),))
