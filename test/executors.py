"""The executor strings of the kernel ops (torch.ops.mmaemu.scaled_mm, accumulate,
scaled_mm_tiles), for tests that call the ops directly: the op runs exactly the executor it is
named (csrc/torch/ops.cpp), so these tests name one."""
from mmaemu import _C

# The SIMD kernels of the cpu executor this CPU runs, in the C table's order (portable first,
# the widest last).
CPU_SIMD = [k["name"] for k in _C.cpu_simd_kernels() if k["available"]]

# What the backend name "cpu" ran for most shapes: the widest SIMD kernel this CPU runs.
CPU = "cpu:" + CPU_SIMD[-1]


def named(backend, device="cpu"):
    """The executor a backend name of the old op meant on tensors of `device`: "cpu" and "auto"
    on CPU tensors the cpu executor (CPU), "reference" and "auto" on CUDA tensors the reference
    kernel; every other name as it is."""
    cuda = str(device).startswith("cuda")
    if backend in ("auto", "reference") and cuda:
        return "cuda:reference"
    return CPU if backend in ("auto", "cpu") and not cuda else backend
