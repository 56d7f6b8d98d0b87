"""The public functions: scaled_mm, accumulate, mma."""
import torch

from .errors import MmaemuError
from . import _C

_SCHEMES = {1: "none"}


def _check_cpu_mode(*tensors):
    if any(t.device.type == "cpu" for t in tensors) and _C.cpu_flushes_denormals():
        raise MmaemuError("CPU flush-to-zero is on (torch.set_flush_denormal(True)): subnormal "
                          "arithmetic would change. Call torch.set_flush_denormal(False).")


def _split_args(splitk):
    if splitk == 1 or splitk == "auto":
        return 1, "none"
    s, scheme = splitk
    return int(s), scheme


def scaled_mm(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
              use_fast_accum=False, *, profile=None, backend=None, splitk="auto"):
    """torch._scaled_mm (torch 2.7.1 arguments) as the reference platform computes it."""
    _check_cpu_mode(mat1, mat2)
    splits, scheme = _split_args(splitk)
    return torch.ops.mmaemu.scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                                      use_fast_accum, "hopper", splits, scheme, backend or "auto", 0)


def accumulate(x, w, *, use_fast_accum, profile=None, backend=None, splitk="auto"):
    """The fp32 accumulator of x @ w.T before the scales (x: [M, K], w: [N, K])."""
    _check_cpu_mode(x, w)
    splits, scheme = _split_args(splitk)
    return torch.ops.mmaemu.accumulate(x, w, use_fast_accum, "hopper", splits, scheme,
                                       backend or "auto")


def mma(a, b, c, preset="hopper"):
    """D[i] = A[i] . B[i] + C[i] as the preset's chain of tensor-core instructions over K."""
    _check_cpu_mode(a, b, c)
    return torch.ops.mmaemu.mma(a, b, c, preset)
