"""The number formats mmaemu names, in one table: FP8 inputs and the outputs of a GEMM.

Each format has mmaemu's short name (the one of plans, tables, notes and the command line), its
torch dtype and the name numpy and the recorded tables use. The C core's ids for them are
mmaemu._C.enums()'s (formats for the FP8 inputs, output kinds for the outputs).
"""
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Format:
    name: str           # mmaemu's short name
    dtype: torch.dtype
    numpy_name: str     # numpy's / the recorded tables' name
    fp8: bool           # an input format of the FP8 GEMM


FORMATS = (
    Format("e4m3", torch.float8_e4m3fn, "float8_e4m3fn", True),   # E4M3 (fn: no Inf, one NaN)
    Format("e5m2", torch.float8_e5m2, "float8_e5m2", True),       # E5M2 (IEEE-like)
    Format("f32", torch.float32, "float32", False),
    Format("bf16", torch.bfloat16, "bfloat16", False),
    Format("f16", torch.float16, "float16", False),
)
BY_NAME = {f.name: f for f in FORMATS}
BY_DTYPE = {f.dtype: f for f in FORMATS}
BY_NUMPY = {f.numpy_name: f for f in FORMATS}
FP8_DTYPES = {f.dtype: f.name for f in FORMATS if f.fp8}


def short_name(dtype) -> str:
    """mmaemu's name of a torch dtype ("bf16"); KeyError for a dtype mmaemu does not know."""
    try:
        return BY_DTYPE[dtype].name
    except KeyError:
        raise KeyError(f"mmaemu has no format for {dtype}") from None


def dtype_of(name) -> torch.dtype:
    """The torch dtype of mmaemu's short name ("e4m3" -> torch.float8_e4m3fn)."""
    return BY_NAME[name].dtype
