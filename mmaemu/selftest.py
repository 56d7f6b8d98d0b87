"""Self-tests: known answers of the instruction model, and each backend against the reference.

The known answers are the outcomes the Hopper model predicts for the hardware probes of
docs/hardware_validation.md (P1, P2), worked out by hand from the model's rules; they guard the
reference itself. Every other backend is then compared with the reference bit for bit on a
battery of products, block boundaries, specials and splits.
"""
import struct
from dataclasses import dataclass

import torch

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2


@dataclass
class Result:
    backend: str
    device: str
    passed: bool
    detail: str


def _f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _vec(values, K, dtype=E4M3):
    v = torch.zeros(1, K)
    v[0, :len(values)] = torch.tensor(values)
    return v.to(dtype)


def known_answers():
    """(name, computed, expected) for hand-worked cases of the hopper preset."""
    out = []
    # P2 (i): 32*32 + 0.09375*(-1): the small term is cut toward zero on the grid 2^(10-13).
    a = _vec([32.0, 0.09375], 32)
    b = _vec([32.0, -1.0], 32)
    out.append(("truncation toward zero", torch.ops.mmaemu.mma(a, b, torch.zeros(1), "hopper"), 1024.0))
    # P2 (ii): 32*32 + 32*32 + 3 * 0.125: exact sum 2048.375, 14 significant bits keep 2048.25.
    a = _vec([32.0, 32.0, 0.125, 0.125, 0.125], 32)
    b = _vec([32.0, 32.0, 1.0, 1.0, 1.0], 32)
    out.append(("14-bit result", torch.ops.mmaemu.mma(a, b, torch.zeros(1), "hopper"), 2048.25))
    # P1: block 1 = 32*64 = 2048; block 2 = 0.875 + 0.125 joins C = 2048 on the grid 2^(11-13).
    a = _vec([32.0] + [0.0] * 31 + [0.875, 0.125], 64)
    b = _vec([64.0] + [0.0] * 31 + [1.0, 1.0], 64)
    out.append(("C inside the block", torch.ops.mmaemu.mma(a, b, torch.zeros(1), "hopper"), 2048.75))
    # An exact zero is +0, even from -0 products.
    a = _vec([-0.0] * 32, 32)
    b = _vec([1.0] * 32, 32)
    out.append(("exact zero is +0", torch.ops.mmaemu.mma(a, b, torch.zeros(1), "hopper"), 0.0))
    return [(n, float(c[0]), e, struct.pack("<f", float(c[0])) == struct.pack("<f", e))
            for n, c, e in out]


def battery(seed=0):
    """Deterministic GEMM cases: (name, kwargs for torch.ops.mmaemu.scaled_mm minus backend)."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    specials = torch.tensor([0x00, 0x80, 0x7E, 0xFE, 0x01, 0x81, 0x08, 0x7F, 0x77, 0x3F],
                            dtype=torch.uint8)
    for fa, fb in ((E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3), (E5M2, E5M2)):
        for M, N, K in ((16, 16, 32), (17, 33, 80), (32, 16, 384)):
            a = torch.randint(0, 256, (M, K), generator=g, dtype=torch.uint8)
            b = torch.randint(0, 256, (N, K), generator=g, dtype=torch.uint8)
            a[0, :specials.numel()] = specials  # NaN, max, subnormal, signed zeros
            for preset in ("hopper", "ada"):
                for fast in (True, False):
                    for splits, scheme in ((1, "none"), (3, "contiguous"), (3, "pairwise")):
                        for out in (torch.float32, torch.bfloat16, torch.float16, E4M3):
                            cases.append((f"{fa}x{fb} {M}x{N}x{K} {preset} fast={fast} S={splits} "
                                          f"{scheme} -> {out}",
                                          dict(mat1=a.view(fa), mat2=b.view(fb).t(),
                                               scale_a=torch.tensor(_f32(0x3F7FFFFF)),
                                               scale_b=torch.tensor(0.5), out_dtype=out,
                                               use_fast_accum=fast, preset=preset,
                                               splits=splits, scheme=scheme)))
    return cases


def check_backend(backend, device="cpu"):
    """Compares `backend` with the reference on the battery; returns a Result."""
    from .testing import bits
    bad = []
    cases = battery()
    for name, kw in cases:
        kw = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        ref = torch.ops.mmaemu.scaled_mm(**{**kw, **{k: v.cpu() for k, v in kw.items()
                                                    if isinstance(v, torch.Tensor)}},
                                         backend="reference")
        got = torch.ops.mmaemu.scaled_mm(**kw, backend=backend).cpu()
        if not torch.equal(bits(got), bits(ref)):
            bad.append(name)
    detail = f"{len(cases) - len(bad)}/{len(cases)} cases bit-identical to the reference"
    if bad:
        detail += "; first failure: " + bad[0]
    return Result(backend, device, not bad, detail)


def run_cpu():
    """The CPU part of `python -m mmaemu selftest`: known answers, then the cpu backend."""
    results = []
    ka = known_answers()
    failed = [f"{n}: got {c!r}, expected {e!r}" for n, c, e, ok in ka if not ok]
    results.append(Result("reference", "cpu", not failed,
                          f"{len(ka) - len(failed)}/{len(ka)} known answers of the hopper model"
                          + (("; " + "; ".join(failed)) if failed else "")))
    results.append(check_backend("cpu", "cpu"))
    return results
