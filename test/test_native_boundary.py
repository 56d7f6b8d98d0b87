"""The boundary between Python and the C core: one way in (torch ops and mmaemu._C methods,
never ctypes on the extension), and no way back (the C core does not call into torch or look
for itself: the stream and every path are passed in)."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _texts(*patterns):
    for pattern in patterns:
        for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            with open(path, errors="replace") as f:
                yield path, f.read()


def test_no_ctypes_on_the_extension():
    found = [p for p, text in _texts("mmaemu/**/*.py", "test/**/*.py", "scripts/**/*.py", "benchmarks/**/*.py")
             if not p.endswith("test_native_boundary.py")
             and (re.search(r"CDLL\([^)]*_C\b", text) or "_C.__file__" in text)]
    assert found == []


C_CORE = [f"csrc/{layer}/*.{ext}" for layer in ("core", "cpu", "cuda", "include") for ext in "ch"]


def test_the_c_core_never_calls_back_into_torch():
    texts = list(_texts(*C_CORE))
    assert len(texts) > 30
    found = [p for p, text in texts if re.search(r"dladdr|libtorch|aoti_torch|torch_stream", text)]
    assert found == []


def test_the_c_core_reads_no_environment_variable():
    """Every setting comes from the caller (mmaemu/runtime/loader.py, the plan's executor)."""
    found = [p for p, text in _texts(*C_CORE, "csrc/torch/*.cpp") if re.search(r"\bgetenv\s*\(", text)]
    assert found == []


def test_the_loader_is_configured_at_import():
    """mmaemu/runtime/loader.py hands the loader its directories: the kernel sources it names are the
    ones NVRTC compiles (tests and tools compile through it)."""
    from mmaemu.runtime import loader as _loader
    assert os.path.isfile(os.path.join(_loader.kernel_dir(), "reference.cu"))
    line, version = _loader.nvrtc_status()
    if version:  # found through the configured directories, an explicit path or a loaded copy
        assert _loader.nvrtc_compile("reference", "sm_80")[0]
