"""CUDA backends against the CPU model, bit for bit (skipped without a CUDA device).

For every CUDA kernel (reference, h1, h4, v1, v4, wgmma) that loads on the device: hypothesis-
drawn shapes, codes (every finite code, near-one values, NaN / zero / extreme mixes), both
accumulation modes, split-K in every scheme, every output dtype and epilogue order, odd scales
and misaligned rows; then CUDA graph capture and replay with scales changed in place (the kernels
read them on the device), launches on a non-default stream, the self-tests, the NVRTC-built
kernels, and the guide's first GEMM on CUDA.

test_reference_logic_on_cpu runs the same comparison code with CPU tensors, so the test logic
itself is exercised on machines without a GPU.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, strategies as st

import mmaemu
from mmaemu.planning import executors
from mmaemu.runtime import availability, facts, loader, registry, selftest
from mmaemu.testing import assert_bitwise_equal
from executors import named

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = torch.cuda.is_available() and loader.device_count() > 0
requires_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device (torch.cuda or the driver)")
KERNEL_NAMES = list(registry.KERNELS)
FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
OUT = [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2]
SCALES = [1.0, 0.5, 2.0 ** -7, 3.0, -1.25, 1e-30, 1e30, 2.0 ** -140, 0.0, float("inf"), float("nan")]


def codes(seed, shape, mode):
    g = torch.Generator().manual_seed(seed)
    return selftest._codes(g, shape, mode)


def run_op(case, backend, device):
    """One GEMM of a drawn case on a device (CPU inputs moved there)."""
    dev = torch.device(device)
    x = case["x"].view(FP8[case["fa"]]).to(dev)
    w = case["w"].view(FP8[case["fb"]]).to(dev)
    if case["slice"]:  # rows with lda, ldb that are not multiples of 16
        x, w = x[:, 1:1 + case["K"]], w[:, 3:3 + case["K"]]
    if case["op"] == "accumulate":
        return torch.ops.mmaemu.accumulate(x, w, case["fast"], case["preset"], case["splits"],
                                           case["scheme"], named(backend, device))
    sa = torch.tensor(case["sa"], dtype=torch.float32, device=dev)
    sb = torch.tensor(case["sb"], dtype=torch.float32, device=dev)
    sr = None if case["sr"] is None else torch.tensor(case["sr"], dtype=torch.float32, device=dev)
    return torch.ops.mmaemu.scaled_mm(x, w.t(), sa, sb, None, sr, case["out"], case["fast"],
                                      case["preset"], case["splits"], case["scheme"], named(backend, device),
                                      case["epi"])


@st.composite
def gemm_cases(draw, presets, e4m3_only):
    preset = draw(st.sampled_from(presets))
    fa = "e4m3" if e4m3_only else draw(st.sampled_from(["e4m3", "e5m2"]))
    fb = "e4m3" if e4m3_only else draw(st.sampled_from(["e4m3", "e5m2"]))
    M, N = draw(st.integers(1, 96)), draw(st.integers(1, 96))
    K = draw(st.one_of(st.integers(1, 300), st.sampled_from([16, 31, 32, 33, 127, 128, 129, 256, 513])))
    mode = draw(st.sampled_from(["wide", "narrow", "special"]))
    sl = draw(st.booleans())
    seed = draw(st.integers(0, 2 ** 31 - 1))
    splits, scheme = draw(st.sampled_from([(1, "none"), (1, "none"), (2, "contiguous"),
                                           (3, "serial"), (3, "pairwise"), (6, "pairwise")]))
    op = draw(st.sampled_from(["accumulate", "scaled_mm"]))
    out = draw(st.sampled_from(OUT))
    fp8_out = out in (torch.float8_e4m3fn, torch.float8_e5m2)
    return dict(preset=preset, fa=fa, fb=fb, K=K, x=codes(seed, (M, K + 4 * sl), mode),
                w=codes(seed + 1, (N, K + 4 * sl), mode), slice=sl, fast=draw(st.booleans()),
                splits=splits, scheme=scheme, op=op, out=out, epi=draw(st.integers(0, 2)),
                sa=draw(st.sampled_from(SCALES)), sb=draw(st.sampled_from(SCALES)),
                sr=draw(st.sampled_from([0.5, 4.0, 1e-3])) if fp8_out else None)


def check_case(case, backend, device):
    got = run_op(case, backend, device)
    want = run_op(case, "reference", "cpu")
    assert_bitwise_equal(got.cpu(), want, msg=f"{backend} on {device}")


@given(case=gemm_cases(["hopper", "ada", "b200"], e4m3_only=False))
def test_reference_logic_on_cpu(case):
    check_case(case, "auto", "cpu")  # the CPU backend against the CPU reference


def kernel_or_skip(kernel, device=0):
    why = availability.static_reason(kernel, device)
    if why:
        pytest.skip(why)
    k = registry.KERNELS[kernel]
    if k.gated:
        for preset in k.presets:
            v = facts.verdict(kernel, preset, device)
            if v is None or not v["passed"]:
                pytest.skip(f"{kernel} did not pass its self-test for {preset} "
                            f"({None if v is None else v['detail']}); "
                            "test_gated_kernel_on_its_home_device reports it")
    return k


@requires_cuda
@pytest.mark.parametrize("kernel", KERNEL_NAMES)
@given(data=st.data())
def test_cuda_kernel_matches_cpu(kernel, data):
    k = kernel_or_skip(kernel)
    case = data.draw(gemm_cases(list(k.presets), e4m3_only=kernel != "reference"))
    check_case(case, kernel, "cuda:0")


@requires_cuda
@given(case=gemm_cases(["hopper", "ada", "b200"], e4m3_only=False))
def test_cuda_auto_matches_cpu(case):
    check_case(case, "auto", "cuda:0")


@requires_cuda
def test_selftest_required_kernels_pass():
    results = selftest.selftest(0)
    assert results, "no self-test ran"
    failed = [r for r in results if r.required and not r.passed]
    assert not failed, failed
    assert any(r.kernel == "reference" and r.passed for r in results)


@requires_cuda
def test_gated_kernel_on_its_home_device():
    """cuda:wgmma on compute capability 9.0: its self-test must pass (else it is not used) and
    backend="auto" must then take it for the hopper preset."""
    info = loader.device_info(0)
    if info["cc"] != 90:
        pytest.skip(f"cuda:wgmma runs on sm_90 only (device is sm_{info['cc']})")
    why = availability.static_reason("cuda:wgmma", 0)
    assert why is None, why
    for preset in ("hopper", "ada"):
        v = facts.verdict("cuda:wgmma", preset, 0)
        assert v is not None and v["passed"], v
    x = torch.zeros(4, 32, dtype=torch.float8_e4m3fn, device="cuda")
    res = executors.resolve("auto", [x], "hopper", (x.dtype, x.dtype))
    assert res.backend == "cuda:wgmma", res


def graph_kernels():
    return [k for k in KERNEL_NAMES if availability.static_reason(k, 0, "hopper") is None
            and (not registry.KERNELS[k].gated or (facts.verdict(k, "hopper", 0) or {}).get("passed"))]


@requires_cuda
@pytest.mark.parametrize("splits", [1, 3])
def test_cuda_graph_reads_scales_and_inputs_on_device(splits):
    dev = torch.device("cuda", 0)
    K = 700
    x0, x1 = codes(1, (70, K), "wide"), codes(2, (70, K), "wide")
    w = codes(3, (50, K), "wide")
    for kernel in graph_kernels():
        x = x0.view(torch.float8_e4m3fn).to(dev)
        wd = w.view(torch.float8_e4m3fn).to(dev)
        sa = torch.tensor(0.5, device=dev)
        sb = torch.tensor(3.0, device=dev)

        def op():
            return torch.ops.mmaemu.scaled_mm(x, wd.t(), sa, sb, None, None, torch.bfloat16, False,
                                              "hopper", splits, "pairwise" if splits > 1 else "none",
                                              named(kernel, dev), 0)

        eager = op()  # loads the module before capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = op()
        graph.replay()
        torch.cuda.synchronize()
        assert_bitwise_equal(static_out.cpu(), eager.cpu(), msg=f"{kernel} graph replay")
        x.copy_(x1.view(torch.float8_e4m3fn).to(dev))
        sa.fill_(0.125)
        sb.fill_(-7.0)
        graph.replay()
        torch.cuda.synchronize()
        want = torch.ops.mmaemu.scaled_mm(x1.view(torch.float8_e4m3fn), w.view(torch.float8_e4m3fn).t(),
                                          torch.tensor(0.125), torch.tensor(-7.0), None, None,
                                          torch.bfloat16, False, "hopper", splits,
                                          "pairwise" if splits > 1 else "none", "reference", 0)
        assert_bitwise_equal(static_out.cpu(), want, msg=f"{kernel} replay with new inputs and scales")


@requires_cuda
def test_non_default_stream_orders_with_its_producer():
    dev = torch.device("cuda", 0)
    K = 512
    x_new, w = codes(4, (64, K), "wide"), codes(5, (64, K), "wide")
    want = torch.ops.mmaemu.accumulate(x_new.view(torch.float8_e4m3fn), w.view(torch.float8_e4m3fn),
                                       True, "hopper", 1, "none", "reference")
    for kernel in graph_kernels():
        x = torch.zeros(64, K, dtype=torch.float8_e4m3fn, device=dev)
        wd = w.view(torch.float8_e4m3fn).to(dev)
        src = x_new.view(torch.float8_e4m3fn).to(dev)
        torch.cuda.synchronize()
        s = torch.cuda.Stream(device=dev)
        with torch.cuda.stream(s):
            torch.cuda._sleep(20_000_000)  # a launch on another stream would overtake the copy
            x.copy_(src)
            out = torch.ops.mmaemu.accumulate(x, wd, True, "hopper", 1, "none", named(kernel, dev))
        s.synchronize()
        assert_bitwise_equal(out.cpu(), want, msg=f"{kernel} on a side stream")


@requires_cuda
def test_e5m2_and_mixed_formats_use_the_reference_backend():
    x = torch.zeros(8, 64, dtype=torch.float8_e5m2, device="cuda")
    w = torch.zeros(8, 64, dtype=torch.float8_e4m3fn, device="cuda")
    res = executors.resolve("auto", [x, w], "hopper", (x.dtype, w.dtype))
    assert res.backend == "reference"
    assert any("E5M2 and mixed formats" in f for f in res.fallbacks)
    with pytest.raises(mmaemu.BackendUnavailableError):
        executors.resolve("cuda:h4", [x, w], "hopper", (x.dtype, w.dtype))


@requires_cuda
def test_raw_op_auto_is_the_reference_kernel():
    """torch.ops.mmaemu.* run the kernel they are named; the schema default "auto" on CUDA
    tensors is the reference kernel, and "cuda" (a policy request) is refused."""
    x = codes(11, (70, 300), "wide").view(torch.float8_e4m3fn).cuda()
    w = codes(12, (50, 300), "wide").view(torch.float8_e4m3fn).cuda()
    auto = torch.ops.mmaemu.accumulate(x, w, True, "hopper", 3, "serial", "cuda:reference")
    ref = torch.ops.mmaemu.accumulate(x, w, True, "hopper", 3, "serial", "cuda:reference")
    assert_bitwise_equal(auto.cpu(), ref.cpu())
    with pytest.raises(RuntimeError, match="names no kernel"):
        torch.ops.mmaemu.accumulate(x, w, True, "hopper", 1, "none", "cuda")


@requires_cuda
def test_guide_first_gemm_on_cuda():
    torch.manual_seed(0)
    x = (torch.randn(64, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(5760, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    sx, sw = torch.tensor(1 / 64), torch.tensor(1 / 32)
    y = mmaemu.scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
    yg = mmaemu.scaled_mm(x.cuda(), w.cuda().t(), sx.cuda(), sw.cuda(), out_dtype=torch.bfloat16,
                          use_fast_accum=True, splitk=1)
    assert_bitwise_equal(yg.cpu(), y)


@requires_cuda
def test_nvrtc_built_kernels_pass_their_selftests(tmp_path):
    line, version = loader.nvrtc_status()
    if not version:
        pytest.skip(line)
    code = textwrap.dedent("""
        import json
        from mmaemu.runtime import backends
        out = []
        for r in selftest.selftest(0, force=True):
            out.append([r.kernel, r.preset, r.status, r.required, r.detail,
                        loader.kernel_check(0, r.kernel)[1] if r.status != "unavailable" else ""])
        print(json.dumps(out))
    """)
    env = dict(os.environ, MMAEMU_FORCE_NVRTC="1", MMAEMU_CACHE_DIR=str(tmp_path),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    import json
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    ran = [row for row in rows if row[2] != "unavailable"]
    assert ran, rows
    for kernel, preset, status, required, detail, load in ran:
        assert "NVRTC" in load, (kernel, load)
        if required:
            assert status == "passed", (kernel, preset, detail)
