"""Bit-pattern comparisons for tests (user guide section 8)."""
import torch

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t):
    """The integer view of a tensor's bit patterns (uint8 for 1-byte dtypes, else signed ints)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"bits() expects a tensor, got {type(t).__name__}")
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    view = _INT_VIEW.get(t.element_size())
    if view is None:
        raise TypeError(f"bits() does not support dtype {t.dtype}")
    return t.contiguous().view(view)


def _classify(actual, expected, mism):
    """Counts mismatches by class: zero sign, NaN payload, value."""
    a = actual.float() if actual.dtype != torch.float64 else actual
    e = expected.float() if expected.dtype != torch.float64 else expected
    both_zero = (a == 0) & (e == 0)
    both_nan = torch.isnan(a) & torch.isnan(e)
    zero_sign = int((mism & both_zero).sum())
    nan_payload = int((mism & both_nan).sum())
    return {"zero sign": zero_sign, "NaN payload": nan_payload,
            "value": int(mism.sum()) - zero_sign - nan_payload}


def assert_bitwise_equal(actual, expected, msg=None):
    """Asserts equal dtype, shape and bit patterns (+0 != -0; NaN payloads count).

    On failure the AssertionError gives the mismatch count by class (zero sign, NaN payload,
    value) and the first ten mismatching elements.
    """
    for name, t in (("actual", actual), ("expected", expected)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"assert_bitwise_equal: {name} must be a tensor, got {type(t).__name__}")
    prefix = f"{msg}: " if msg else ""
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{prefix}dtype mismatch: {actual.dtype} vs {expected.dtype}")
    if actual.shape != expected.shape:
        raise AssertionError(f"{prefix}shape mismatch: {tuple(actual.shape)} vs {tuple(expected.shape)}")
    a, e = actual.detach().cpu(), expected.detach().cpu()
    mism = bits(a) != bits(e)
    n = int(mism.sum())
    if n == 0:
        return
    classes = _classify(a, e, mism)
    idx = mism.nonzero()[:10]
    lines = []
    for ix in idx.tolist():
        ix = tuple(ix)
        lines.append(f"  at {ix}: actual {a[ix].item()!r} (0x{int(bits(a)[ix]) & ((1 << (8 * a.element_size())) - 1):0{2 * a.element_size()}x})"
                     f", expected {e[ix].item()!r} (0x{int(bits(e)[ix]) & ((1 << (8 * e.element_size())) - 1):0{2 * e.element_size()}x})")
    summary = ", ".join(f"{k}: {v}" for k, v in classes.items())
    raise AssertionError(f"{prefix}{n} of {a.numel()} elements differ in their bits ({summary})\n"
                         + "\n".join(lines))


def hashed_bf16(shape, seed, exp):
    """bf16 values k * 2^exp, k in [-128, 127] from an integer hash of the index and seed:
    identical on every machine and torch version (no floating-point random number generator
    involved), for inputs whose results can be checked against stored hashes."""
    n = 1
    for s in shape:
        n *= s
    h = torch.arange(n, dtype=torch.int64) * 1103515245 + 12345 + seed * 2654435761
    h = h & 0x7FFFFFFF
    h = ((h ^ (h >> 15)) * 2246822519) & 0x7FFFFFFF
    h = h ^ (h >> 13)
    k = (h & 0xFF) - 128
    return (k.float() * 2.0 ** exp).to(torch.bfloat16).reshape(shape)
