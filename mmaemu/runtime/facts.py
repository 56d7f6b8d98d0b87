"""The measured facts planning reads, cached on disk: self-test verdicts and the CPU kernels' speed.

Planning never runs a kernel: it reads what is here. The facts are measured by explicit steps
(runtime/warmup.py, the first call's warm-up; `python -m mmaemu selftest`) and kept under
MMAEMU_CACHE_DIR (default ${XDG_CACHE_HOME:-~/.cache}/mmaemu), keyed by everything that could
change them: for a CUDA verdict the device (name, UUID, capability), driver, package and torch
versions, kernel sources and how the kernel was loaded; for the CPU kernels' speed the CPU model,
the kernels this CPU runs and the package version.
"""
import functools
import hashlib
import json
import os
import platform
import threading

import torch

from ..version import __version__
from . import loader
from .registry import SIMD_KERNELS

_lock = threading.RLock()
_memory = {}
_generation = [0]   # counts the facts stored or dropped in this process


def generation():
    """Changes whenever a fact is stored or dropped: what was planned from older facts is stale."""
    return _generation[0]


def _version():
    return __version__


def _path(kind, key):
    return os.path.join(loader.cache_dir(), kind, key + ".json")


def _load(kind, key):
    with _lock:
        if (kind, key) in _memory:
            return _memory[(kind, key)]
    try:
        with open(_path(kind, key)) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    with _lock:
        _memory[(kind, key)] = value
    return value


def _store(kind, key, value, persist=True):
    with _lock:
        _memory[(kind, key)] = value
        _generation[0] += 1
    if not persist:
        return
    path = _path(kind, key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(value, f, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs a measurement in the next process


def forget():
    """Drops the facts held in this process (the files stay): the next read goes to disk."""
    with _lock:
        _memory.clear()
        _generation[0] += 1


# --------------------------------------------------------------------------------------------
# Self-test verdicts of CUDA kernels

def _sources_hash():
    h = hashlib.sha256()
    d = loader.kernel_dir()
    if os.path.isdir(d):
        for name in sorted(os.listdir(d)):
            if name.endswith((".cu", ".h")):
                with open(os.path.join(d, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def verdict_key(kernel, preset, device):
    info = loader.device_info(device) or {}
    route = loader.kernel_check(device, kernel)[1].split(" (")[0]
    # "-2": the cases of section 8 (every format pair) joined the set
    parts = ["mmaemu-selftest-2", _version(), kernel, preset, info.get("name", ""),
             info.get("uuid", ""), str(info.get("cc", "")), str(info.get("driver_version", "")),
             _sources_hash(), route, torch.__version__]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def verdict(kernel, preset, device):
    """The cached self-test verdict of a kernel for a preset on a CUDA device (a dict: passed,
    cases, mismatches, detail, seconds, cached), or None where it has not been measured."""
    v = _load("selftest", verdict_key(kernel, preset, device))
    return None if v is None else dict(v, cached=True)


def store_verdict(kernel, preset, device, value, persist=True):
    _store("selftest", verdict_key(kernel, preset, device), value, persist)


# --------------------------------------------------------------------------------------------
# The CPU kernels' speed

def cpu_name():
    """This CPU's model name (Linux /proc/cpuinfo), else what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=None)
def _simd_key():
    """The measurement's key: this machine's CPU and kernels (fixed for a process)."""
    available = ",".join(n for n, k in SIMD_KERNELS.items() if k["available"])
    parts = ["mmaemu-cpu-simd-1", _version(), cpu_name(), platform.machine(), available]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def cpu_simd_rates():
    """{kernel: MAC/s} of this CPU's SIMD kernels as measured once on this machine (one thread,
    hopper fast, full tiles), or None where it has not been measured."""
    return _load("cpu_simd", _simd_key())


def store_cpu_simd_rates(rates):
    _store("cpu_simd", _simd_key(), dict(rates))
