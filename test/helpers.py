"""What many tests build: FP8 operands from codes or from seeded random values, fp32 tensors
from bit patterns. One definition each, so every test means the same thing by them."""
import numpy as np
import torch

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FORMATS = {"e4m3": E4M3, "e5m2": E5M2}


def _dtype(fmt):
    return FORMATS[fmt] if isinstance(fmt, str) else fmt


def fp8_codes(codes, fmt=E4M3):
    """An FP8 tensor with these codes (nested lists or an array of uint8 values)."""
    arr = np.ascontiguousarray(codes, dtype=np.uint8)
    return torch.from_numpy(arr.copy()).view(_dtype(fmt))


def fp8_randn(shape, seed, spread=16.0, fmt=E4M3):
    """Seeded randn * spread, clamped to E4M3's range, cast to the FP8 format."""
    g = torch.Generator().manual_seed(seed)
    return fp8_clamp(torch.randn(*shape, generator=g) * spread, fmt)


def fp8_clamp(t, fmt=E4M3):
    """A float tensor clamped to +-448 and cast (round to nearest) to the FP8 format."""
    return t.clamp(-448, 448).to(_dtype(fmt))


def f32_bits(bits, shape=None):
    """An fp32 tensor with these bit patterns (unsigned ints, lists or an array)."""
    arr = np.asarray(bits, dtype=np.uint64).astype(np.uint32).view(np.int32)
    t = torch.from_numpy(arr.copy()).view(torch.float32)
    return t if shape is None else t.reshape(shape)
