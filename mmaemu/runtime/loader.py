"""The C core's CUDA loader as Python sees it (csrc/cuda/, reached through mmaemu._C).

At import this tells the loader where the shipped kernel sources and fatbins are, where its
cubin cache goes, which directories may hold NVRTC (runtime/cuda_libs.py) and what the
environment asks of it (explicit library paths, NVRTC forced or off); then it offers the
loader's queries: the driver's state, devices, whether a kernel loads, NVRTC compiles. The C
core never calls back into torch, reads no environment variable and looks for nothing itself:
every path and switch comes from here, read once.
"""
import os

from .. import _C
from . import config
from .cuda_libs import library_dirs


PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # mmaemu/


def cuda_disabled():
    """MMAEMU_DISABLE_CUDA: nothing of CUDA is loaded or asked (driver, NVRTC, devices)."""
    return config.get("MMAEMU_DISABLE_CUDA")


def cache_dir():
    """MMAEMU_CACHE_DIR, else ${XDG_CACHE_HOME:-~/.cache}/mmaemu (NVRTC cubins, verdicts)."""
    d = _setting("MMAEMU_CACHE_DIR")
    if d:
        return d
    x = config.raw("XDG_CACHE_HOME")
    return os.path.join(x, "mmaemu") if x else os.path.join(os.path.expanduser("~"), ".cache", "mmaemu")


def kernel_dir():
    """The kernel sources NVRTC compiles: csrc/kernels of a source checkout (so an edited kernel
    is what runs), else the copy shipped in the package (mmaemu/kernels)."""
    pkg = PACKAGE_DIR
    dev = os.path.join(pkg, "..", "csrc", "kernels")
    return dev if os.path.isfile(os.path.join(dev, "reference.cu")) else os.path.join(pkg, "kernels")


def fatbin_dir():
    """MMAEMU_FATBIN_DIR (tests and tools), else the fatbins built with the package."""
    return _setting("MMAEMU_FATBIN_DIR") or os.path.join(PACKAGE_DIR, "_fatbin")


_setting_errors = []


def _setting(name):
    """A loader variable; one that is not accepted leaves its default and is remembered: CUDA
    work then raises its error (import never fails, `python -m mmaemu info` reports it)."""
    try:
        return config.get(name)
    except ValueError as e:
        if str(e) not in map(str, _setting_errors):
            _setting_errors.append(e)
        return config.VARIABLES[name].default


_settings = [_setting(name) for name in ("MMAEMU_LIBCUDA_PATH", "MMAEMU_NVRTC_PATH",
                                         "MMAEMU_FORCE_NVRTC", "MMAEMU_DISABLE_NVRTC")]


def _disabled_at_import():
    """MMAEMU_DISABLE_CUDA for the loader itself (a value not accepted: not disabled here; every
    CUDA use raises its error through cuda_disabled())."""
    try:
        return config.get("MMAEMU_DISABLE_CUDA")
    except ValueError:
        return False


def _check_settings():
    if _setting_errors:
        raise _setting_errors[0]


_C.cuda_configure(os.path.normpath(kernel_dir()), fatbin_dir(), cache_dir(),
                  library_dirs(config.raw("CUDA_HOME") or config.raw("CUDA_PATH")), *_settings,
                  _disabled_at_import())


def driver_status():
    """One line: the driver the loader found, or why there is none."""
    if cuda_disabled():
        return "not loaded: disabled by MMAEMU_DISABLE_CUDA"
    return _C.cuda_status()


def nvrtc_status():
    """(line, version): where NVRTC was found (or why not), and its version (e.g. 13000)."""
    if cuda_disabled():
        return "not loaded: disabled by MMAEMU_DISABLE_CUDA", 0
    return _C.nvrtc_status()


def nvrtc_compile(module, arch):
    """Compiles a shipped kernel source ("reference", "ieee", "wgmma") for `arch` with NVRTC
    (no GPU needed). Returns (ok, image bytes, detail: NVRTC's location or its log)."""
    if cuda_disabled():
        return False, b"", "not compiled: MMAEMU_DISABLE_CUDA is set"
    return _C.nvrtc_compile(module, arch)


def device_count():
    """CUDA devices the driver sees (0 without a driver or with MMAEMU_DISABLE_CUDA=1)."""
    if cuda_disabled():
        return 0
    _check_settings()
    return _C.cuda_device_count()


_info_cache = {}


def device_info(device=0):
    """Name, compute capability, SMs, driver version and UUID of a CUDA device, or None."""
    if cuda_disabled():
        return None
    _check_settings()
    if device not in _info_cache:
        _info_cache[device] = _C.cuda_device_info(device)
    return _info_cache[device]


_check_cache = {}


def kernel_check(device, kernel):
    """(ok, detail): loads the kernel's module on the device (fatbin, else NVRTC) or says why not."""
    if cuda_disabled():
        return False, "not loaded: disabled by MMAEMU_DISABLE_CUDA"
    _check_settings()
    key = (device, kernel)
    if key not in _check_cache:
        _check_cache[key] = _C.cuda_kernel_check(device, kernel)
    return _check_cache[key]
