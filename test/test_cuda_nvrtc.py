"""Every CUDA kernel source compiles with NVRTC for sm_75, sm_80, sm_89 and sm_90 (and the
wgmma kernel for sm_90a), through the loader's own NVRTC path: the shipped sources, the
mmaemu_*.h headers passed in memory (NVRTC has no system headers), --fmad=false.

Needs no GPU and no driver. Skips only when NVRTC cannot be found (pip install
nvidia-cuda-nvrtc, or set MMAEMU_NVRTC_PATH).
"""
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from mmaemu.runtime import loader
ARCHS = ["sm_75", "sm_80", "sm_89", "sm_90"]
TARGETS = [(m, a) for m in ("reference", "ieee", "wgmma") for a in ARCHS] + [("wgmma", "sm_90a")]


@pytest.fixture(scope="module")
def compiled():
    line, version = loader.nvrtc_status()
    if not version:
        pytest.skip(line)
    # NVRTC compiles independent programs in parallel (ctypes releases the GIL)
    with ThreadPoolExecutor(max_workers=max(1, min(len(TARGETS), os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda t: loader.nvrtc_compile(*t), TARGETS))
    return dict(zip(TARGETS, results))


@pytest.mark.parametrize("module, arch", TARGETS)
def test_kernel_source_compiles(compiled, module, arch):
    ok, size, detail = compiled[(module, arch)]
    assert ok, f"{module}.cu for {arch}:\n{detail}"
    assert size > 1000


def test_ptx_for_future_architectures(compiled):
    """compute_XY yields PTX: what the loader uses for GPUs newer than NVRTC knows."""
    ok, size, detail = loader.nvrtc_compile("reference", "compute_90")
    assert ok and size > 1000, detail


def test_compile_errors_are_reported():
    line, version = loader.nvrtc_status()
    if not version:
        pytest.skip(line)
    ok, _, detail = loader.nvrtc_compile("ieee", "sm_60")  # below NVRTC 12/13's oldest target
    assert not ok and detail
    ok, _, detail = loader.nvrtc_compile("nonexistent", "sm_90")
    assert not ok and "unknown module" in detail
