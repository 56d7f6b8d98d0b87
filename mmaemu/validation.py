"""Argument validation (minimal interim version; torch 2.7.1's full checks replace it)."""
from collections import namedtuple

import torch

from .errors import ReferenceRejectsError, UnsupportedFeatureError

ValidatedCall = namedtuple("ValidatedCall", "M N K fmt_a fmt_b out_dtype device")
_FMT = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}


def validate_scaled_mm(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None,
                       out_dtype=None, use_fast_accum=False):
    if bias is not None:
        raise UnsupportedFeatureError("bias is not supported in mmaemu v0.1")
    if mat1.dim() != 2 or mat2.dim() != 2 or mat1.shape[1] != mat2.shape[0]:
        raise ReferenceRejectsError("mat1 and mat2 shapes cannot be multiplied")
    if mat1.dtype not in _FMT or mat2.dtype not in _FMT:
        raise ReferenceRejectsError("Expected mat1 to be Float8 matrix")
    return ValidatedCall(mat1.shape[0], mat2.shape[1], mat1.shape[1], _FMT[mat1.dtype],
                         _FMT[mat2.dtype], out_dtype or mat1.dtype, mat1.device)


def validate_accumulate(x, w, use_fast_accum):
    if not isinstance(use_fast_accum, bool):
        raise TypeError("use_fast_accum must be a bool")
    return ValidatedCall(x.shape[0], w.shape[0], x.shape[1], _FMT[x.dtype], _FMT[w.dtype],
                         torch.float32, x.device)


def validate_mma(a, b, c, block):
    return None
