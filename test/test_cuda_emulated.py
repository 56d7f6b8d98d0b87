"""The CUDA kernels' device code executed on the CPU (no GPU needed).

ieee.cu (h1, h4, v1, v4), wgmma.cu and reference.cu (the split-K reduction) are compiled as C++
with MMAEMU_EMULATE and a small CUDA emulator (below): one OS thread per CUDA thread, a barrier
for __syncthreads, __shared__ as block-shared storage, synchronous copies for cp.async, and
wgmma m64n128k32 computed by the model's block FMA from the operands its descriptors address,
with the K-major no-swizzle operand layout and the accumulator fragment layout that the PTX ISA
documents (what CUTLASS's GMMA traits encode). Every kernel's output is compared bit for bit
with mm_gemm_element over shapes at tile edges, both accumulation modes, split-K with the
reduction kernel, output kinds with device-read scales, and misaligned rows.

What this checks: tiling, indexing, pipelines, schedules, split handling and epilogues of the
kernels as written. What it cannot check: the hardware itself (real wgmma numerics and layouts,
memory ordering); the self-tests on a GPU do that.
"""
import os
import subprocess

import pytest

import cbuild



@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    cxx = cbuild.cxx_compiler()
    if cxx is None:
        pytest.skip("no C++ compiler")
    d = tmp_path_factory.mktemp("emulated")
    flags = ["-std=c++17", *cbuild.exact_flags("cxx"), "-O2", "-frounding-math", "-fno-strict-aliasing",
             "-pthread", "-w", "-include", cbuild.source("cuda_emulator.h"), "-I", cbuild.KERNELS]
    objs = []
    for src in (os.path.join(cbuild.KERNELS, "ieee.cu"), os.path.join(cbuild.KERNELS, "wgmma.cu"),
                cbuild.source("cuda_emulated_check.cpp")):
        obj = d / (os.path.basename(src) + ".o")
        r = subprocess.run([cxx, *flags, "-x", "c++", "-c", src, "-o", str(obj)], capture_output=True, text=True)
        assert r.returncode == 0, f"{src} does not compile under the emulator:\n{r.stderr[-4000:]}"
        objs.append(str(obj))
    exe = d / "harness"
    r = subprocess.run([cxx, "-pthread", *objs, "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


def test_kernels_execute_the_model_schedule(harness):
    r = subprocess.run([str(harness)], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "0 mismatching" in r.stdout
