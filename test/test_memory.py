"""Memory and 64-bit indexing: a GEMM with a huge K runs in the memory of its operands and
output plus a small constant, and row strides beyond 2^31 bytes are addressed correctly.

The huge-K test runs the `cpu` backend (backend=None picks it for CPU tensors). Beyond a K of
about 10^5 its decoded operands would outgrow their budgets, so it streams K in segments
(csrc/cpu/driver.h, MM_CPU_STREAM_CHUNK): the decoded copies stay a few MiB whatever K is.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import mmaemu  # noqa: F401  (registers torch.ops.mmaemu)
from executors import CPU
from mmaemu.testing import assert_bitwise_equal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20

# Run in a fresh interpreter so that the peak-RSS counter belongs to this GEMM alone.
HUGE_K_SCRIPT = textwrap.dedent(r"""
    import json, re, sys
    import torch
    import mmaemu

    M = N = 16
    K = 4194304
    # Each thread holds a decoded B panel of up to 4 MiB (csrc/cpu/driver.h, MM_CPU_PANEL_BUDGET):
    # two threads, whatever the machine has, so that SMALL_CONSTANT bounds them.
    torch.set_num_threads(2)

    def status():
        with open("/proc/self/status") as f:
            s = f.read()
        return {k: int(re.search(k + r":\s+(\d+) kB", s).group(1)) * 1024 for k in ("VmHWM", "VmRSS")}

    def reset_peak():
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
            return True
        except OSError:
            return False

    def finite_e4m3(rows, gen):
        # Codes 0x00-0x7E and 0x80-0xFD (0x7F and 0xFF are NaN), a row at a time so that no
        # temporary as large as an operand raises the peak before the measurement.
        t = torch.empty(rows, K, dtype=torch.uint8)
        for r in range(rows):
            v = torch.randint(0, 0xFD, (K,), dtype=torch.uint8, generator=gen)
            t[r] = v + (v >= 0x7F).to(torch.uint8)
        return t.view(torch.float8_e4m3fn)

    gen = torch.Generator().manual_seed(1234)
    x, w = finite_e4m3(M, gen), finite_e4m3(N, gen)
    one = torch.tensor(1.0)
    kw = dict(out_dtype=torch.float32, use_fast_accum=True, splitk=1)
    mmaemu.scaled_mm(x[:, :256], w[:, :256].t(), one, one, **kw)  # load everything lazy first

    before = status()
    exact = reset_peak()
    if exact:
        before = status()
    y = mmaemu.scaled_mm(x, w.t(), one, one, **kw)
    after = status()

    # Cross-check four elements through another entry point: with fast accumulation, an fp32
    # output and unit scales, y[i, j] is the chain of blocks over the whole row pair (mma, C = 0).
    pairs = [(0, 0), (3, 11), (15, 15), (9, 2)]
    rows_x = torch.stack([x[i].view(torch.uint8) for i, _ in pairs]).view(torch.float8_e4m3fn)
    rows_w = torch.stack([w[j].view(torch.uint8) for _, j in pairs]).view(torch.float8_e4m3fn)
    d = mmaemu.mma(rows_x, rows_w, torch.zeros(len(pairs)))
    got = torch.stack([y[i, j] for i, j in pairs])
    json.dump({
        "exact_peak": exact,
        "rss_before": before["VmRSS"], "hwm_before": before["VmHWM"], "hwm_after": after["VmHWM"],
        "operand_bytes": x.numel() + w.numel(), "output_bytes": y.numel() * y.element_size(),
        "shape": list(y.shape), "finite": bool(torch.isfinite(y).all()),
        "crosscheck_bits": [got.view(torch.int32).tolist(), d.view(torch.int32).tolist()],
    }, sys.stdout)
""")

# Two threads' B panels (8 MiB), decoded A rows (2.3 MiB), thread stacks; an operand copy would
# be 64 MiB. Measured: 0.1 to 9.5 MiB (the heap's state before the call decides how much is new).
SMALL_CONSTANT = 16 * MiB


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_huge_k_gemm_peak_memory_is_operands_plus_output():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", HUGE_K_SCRIPT], capture_output=True, text=True,
                       timeout=900, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-4000:]
    m = json.loads(r.stdout)
    assert m["shape"] == [16, 16] and m["finite"]
    got, expected = m["crosscheck_bits"]
    assert got == expected, f"scaled_mm {got} vs mma {expected} (bit patterns)"
    if not m["exact_peak"] and m["hwm_before"] - m["rss_before"] > 4 * MiB:
        pytest.skip("cannot reset the peak-RSS counter here and an earlier peak hides this call's")
    # The operands were resident before the call; the call may add only its output and a constant.
    growth = m["hwm_after"] - m["rss_before"]
    assert growth <= m["output_bytes"] + SMALL_CONSTANT, (
        f"peak RSS grew by {growth / MiB:.1f} MiB during a GEMM whose operands are "
        f"{m['operand_bytes'] / MiB:.0f} MiB and output {m['output_bytes']} bytes")


def _sparse_bytes(n):
    """n bytes of untouched (not resident) memory, or skip when the system refuses it."""
    try:
        return torch.empty(n, dtype=torch.uint8)
    except RuntimeError as e:
        pytest.skip(f"cannot reserve {n / 2**30:.1f} GiB of address space: {e}")


@pytest.mark.parametrize("backend", ["reference", CPU])
@pytest.mark.parametrize("fast", [False, True])
def test_row_strides_beyond_2_to_31_bytes(backend, fast):
    """Operands whose rows are 2^31 + 64 bytes apart (only the rows are touched: the rest of the
    2 GiB allocation is never resident) give the bits of their compact copies."""
    M = N = 2
    K = 320
    ld = (1 << 31) + 64
    base = _sparse_bytes(ld * (M - 1) + 2 * 4096 + K)
    gen = torch.Generator().manual_seed(7)
    rows = torch.randint(0, 0x7F, (M + N, K), dtype=torch.uint8, generator=gen)
    for r in range(M):
        base[r * ld: r * ld + K] = rows[r]
    for r in range(N):
        base[4096 + r * ld: 4096 + r * ld + K] = rows[M + r]
    fp8 = base.view(torch.float8_e4m3fn)
    a = fp8.as_strided((M, K), (ld, 1), 0)
    b = fp8.as_strided((N, K), (ld, 1), 4096)  # [N, K] rows; mat2 = b.t() is column-major
    one = torch.tensor(1.0)
    args = (None, None, torch.float32, fast, "hopper", 1, "none", backend, 0)
    y = torch.ops.mmaemu.scaled_mm(a, b.t(), one, one, *args)
    expected = torch.ops.mmaemu.scaled_mm(a.contiguous(), b.contiguous().t(), one, one, *args)
    assert_bitwise_equal(y, expected)
    acc = torch.ops.mmaemu.accumulate(a, b, fast, "hopper", 1, "none", backend)
    assert_bitwise_equal(acc, torch.ops.mmaemu.accumulate(a.contiguous(), b.contiguous(), fast,
                                                          "hopper", 1, "none", backend))


# A GEMM in an address space cut to what is mapped plus `headroom` bytes: each call raises the
# documented error or returns the bits of the unlimited call, never a crash or other bits.
OUT_OF_MEMORY_SCRIPT = textwrap.dedent(r"""
    import json, re, resource, sys
    import torch
    import mmaemu

    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(99)
    def operand(rows, k):
        v = torch.randint(0, 0x7E, (rows, k), dtype=torch.uint8, generator=gen)
        return v.view(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    cases = [(256, 256, 8192), (16, 16, 262144)]  # decoded whole (24 MiB of A), and streamed
    operands = [(operand(m, k), operand(n, k)) for m, n, k in cases]
    kw = dict(out_dtype=torch.float32, use_fast_accum=True, splitk=1, backend="cpu")
    expected = [mmaemu.scaled_mm(x, w.t(), one, one, **kw).view(torch.int32) for x, w in operands]
    # torch's own OpenMP threads first take their thread-local data here: started under the
    # limit, glibc ends the process when it cannot allocate it (not a path of mmaemu's).
    assert all(torch.equal(e, e.clone()) for e in expected)

    def mapped():
        with open("/proc/self/status") as f:
            return int(re.search(r"VmSize:\s+(\d+) kB", f.read()).group(1)) * 1024

    results = []
    for headroom_mib in [int(a) for a in sys.argv[1:]]:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = mapped() + (headroom_mib << 20)
        if hard != resource.RLIM_INFINITY and limit > hard:
            continue  # the system's own limit is lower: nothing to cut
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        for (x, w), e in zip(operands, expected):
            try:
                y = mmaemu.scaled_mm(x, w.t(), one, one, **kw)
                results.append(["bits", bool(torch.equal(y.view(torch.int32), e))])
            except RuntimeError as err:
                results.append(["error", str(err).splitlines()[0][:200]])
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    json.dump(results, sys.stdout)
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_out_of_memory_raises_or_gives_the_same_bits():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    headrooms = ["0", "1", "2", "3", "4", "6", "8", "12", "16", "24", "32", "48", "64"]
    r = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY_SCRIPT, *headrooms], capture_output=True,
                       text=True, timeout=600, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-4000:]
    results = json.loads(r.stdout)
    if not results:
        pytest.skip("the address-space limit here is already below what the test would set")
    for kind, what in results:
        if kind == "bits":
            assert what, "a GEMM short of memory returned other bits"
        else:
            assert "out of memory" in what or "can't allocate memory" in what, what
    kinds = [kind for kind, _ in results]
    assert "error" in kinds and "bits" in kinds, kinds  # both sides of the limit were reached
