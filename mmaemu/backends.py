"""Backend choice: which kernel computes a call (user guide section 6)."""
import os

from .errors import BackendUnavailableError

CPU_BACKENDS = ("reference", "cpu")
CUDA_BACKENDS = ("cuda", "cuda:v1", "cuda:v4", "cuda:v9", "cuda:tc3", "cuda:h1", "cuda:h4")
KNOWN = ("auto",) + CPU_BACKENDS + CUDA_BACKENDS


def requested(backend=None):
    """The backend asked for: the argument, else MMAEMU_BACKEND, else 'auto'."""
    name = backend if backend is not None else (os.environ.get("MMAEMU_BACKEND") or "auto")
    if not isinstance(name, str):
        raise TypeError(f"backend must be a str, got {type(name).__name__}")
    if name not in KNOWN:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(KNOWN)}")
    return name


def resolve(backend, device_type, device_index, preset, fmt_a, fmt_b):
    """(backend name, fallbacks, warnings) for a call on `device_type` tensors."""
    name = requested(backend)
    if device_type == "cpu":
        if name.startswith("cuda"):
            raise BackendUnavailableError(f"backend {name!r} cannot run on CPU tensors; use "
                                          "backend='auto', 'cpu' or 'reference'")
        if name == "auto":
            return "cpu", ["cuda: tensors on cpu"], []
        return name, [], []
    raise BackendUnavailableError(f"mmaemu has no backend for {device_type} tensors in this build")


def status():
    """Every backend with whether it can run here and why."""
    rows = [{"name": "reference", "available": True, "reason": "the scalar C model (CPU tensors)"},
            {"name": "cpu", "available": True, "reason": "the fast exact CPU kernel"}]
    for name in CUDA_BACKENDS[1:]:
        rows.append({"name": name, "available": False,
                     "reason": "the CUDA backend is not part of this build"})
    return rows
