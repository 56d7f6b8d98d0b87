"""Many Python threads calling mmaemu at once (different presets, shapes, output dtypes, split
plans and entry points) get the same bits as the same calls made one after another."""
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

import mmaemu
from executors import CPU
from mmaemu.testing import assert_bitwise_equal

PRESETS = ["hopper", "ada", "b200"]
OUT_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn]


def _fp8(gen, rows, cols, dtype):
    return ((torch.randn(rows, cols, generator=gen) * 24).clamp(-448, 448)).to(dtype)


def _make_calls():
    """(name, thunk) pairs; each thunk recomputes one GEMM from tensors built once."""
    rnd = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    calls = []
    for n in range(24):
        preset = PRESETS[n % 3]
        M, N, K = rnd.choice([1, 5, 16, 33]), 16 * rnd.randint(1, 4), 16 * rnd.randint(1, 40)
        fmt_a = torch.float8_e5m2 if n % 5 == 0 else torch.float8_e4m3fn
        x, w = _fp8(gen, M, K, fmt_a), _fp8(gen, N, K, torch.float8_e4m3fn)
        sa, sb = torch.tensor(rnd.choice([1.0, 0.5, 3.0])), torch.tensor(rnd.choice([1.0, 2.0 ** -6]))
        fast = n % 2 == 0
        out = OUT_DTYPES[n % len(OUT_DTYPES)]
        splits, scheme = rnd.choice([(1, "none"), (2, "contiguous"), (3, "serial"), (6, "pairwise")])
        kind = n % 4
        if kind == 0:  # the public function (default profile), no split
            name = f"mmaemu.scaled_mm {M}x{N}x{K} {out}"
            calls.append((name, lambda x=x, w=w, sa=sa, sb=sb, out=out, fast=fast: mmaemu.scaled_mm(
                x, w.t(), sa, sb, out_dtype=out, use_fast_accum=fast, splitk=1)))
        elif kind == 3:  # the accumulator op
            name = f"accumulate {preset} {M}x{N}x{K} S={splits}"
            calls.append((name, lambda x=x, w=w, fast=fast, p=preset, s=splits, sc=scheme:
                          torch.ops.mmaemu.accumulate(x, w, fast, p, s, sc, CPU)))
        else:  # the op with an explicit preset and split plan
            name = f"torch.ops.mmaemu.scaled_mm {preset} {M}x{N}x{K} {out} S={splits} {scheme}"
            calls.append((name, lambda x=x, w=w, sa=sa, sb=sb, out=out, fast=fast, p=preset, s=splits,
                          sc=scheme: torch.ops.mmaemu.scaled_mm(x, w.t(), sa, sb, None, None, out, fast,
                                                                p, s, sc, CPU, 0)))
    # mma rows with a C operand, per preset
    for n, preset in enumerate(PRESETS):
        block = 16 if preset == "ada" else 32
        a, b = _fp8(gen, 7, 4 * block, torch.float8_e4m3fn), _fp8(gen, 7, 4 * block, torch.float8_e4m3fn)
        c = torch.randn(7, generator=gen) * 100
        calls.append((f"mma {preset}", lambda a=a, b=b, c=c, p=preset: mmaemu.mma(a, b, c, p)))
    return calls


def test_concurrent_calls_match_sequential_calls():
    calls = _make_calls()
    expected = [thunk() for _, thunk in calls]
    # Every call 4 times, shuffled, on 8 threads released together.
    order = [i for i in range(len(calls)) for _ in range(4)]
    random.Random(1).shuffle(order)
    start = threading.Barrier(8)

    def worker(chunk):
        start.wait()
        return [(i, calls[i][1]()) for i in chunk]

    chunks = [order[t::8] for t in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = [r for f in [pool.submit(worker, c) for c in chunks] for r in f.result()]
    assert len(results) == len(order)
    for i, got in results:
        assert_bitwise_equal(got, expected[i], msg=calls[i][0])


def test_concurrent_calls_with_different_intra_op_thread_counts():
    """Threads that each set torch's intra-op thread count (1 or 2) still agree bit for bit."""
    calls = _make_calls()[:12]
    expected = [thunk() for _, thunk in calls]
    saved = torch.get_num_threads()
    try:
        def worker(t):
            torch.set_num_threads(1 + t % 2)
            return [(i, thunk()) for i, (_, thunk) in enumerate(calls) if i % 4 == t % 4]

        with ThreadPoolExecutor(max_workers=4) as pool:
            results = [r for f in [pool.submit(worker, t) for t in range(4)] for r in f.result()]
    finally:
        torch.set_num_threads(saved)
    assert len(results) == len(calls)
    for i, got in results:
        assert_bitwise_equal(got, expected[i], msg=calls[i][0])
