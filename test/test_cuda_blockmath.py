"""CPU check of the arithmetic the CUDA kernels are built from (no GPU needed).

The IEEE-exact tiled kernels (h1, h4, v1, v4) compute each block FMA with the fp32 tricks of
csrc/kernels/mmaemu_exact.h, and every tiled kernel reduces split partials with
mm_reduce_partials (csrc/kernels/mmaemu_launch.h). A small C program, compiled here with the
same C11 flags as the core (plus -frounding-math for the host versions of fma_rz / add_rz),
compares both with the C model (mm_block, mm_dot) bit for bit on exhaustive and random inputs.
"""
import os
import subprocess

import pytest

import cbuild



@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    cc = cbuild.c_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("blockmath")
    exe = d / "harness"
    cmd = [cc, *cbuild.exact_flags("c"), "-O2", "-frounding-math", "-I", cbuild.KERNELS,
           cbuild.source("blockmath_check.c"), "-o", str(exe), "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"harness does not compile:\n{r.stderr}"
    return exe


def test_exact_block_and_split_reduction_match_the_c_model(harness):
    iters = 200000 if os.environ.get("CI") else 60000
    r = subprocess.run([str(harness), str(iters)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 mismatches" in r.stdout
