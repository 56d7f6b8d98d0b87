"""Where NVIDIA's CUDA libraries (libnvrtc, libcublasLt, ...) may be on this machine, found once
for the loader (csrc/cuda/nvrtc.c is handed library_dirs()) and the GPU tools
(mmaemu_tools/cublaslt.py, mmaemu_tools/_rawmma.py).

The order, most specific first: the nvidia-* wheels beside the running torch and beside this
package (pip installs torch's CUDA libraries there), every other site-packages, then the CUDA
toolkit (the CUDA_HOME or CUDA_PATH its caller passes, /usr/local/cuda) and the system's
library directory. It reads no environment variable itself: the package passes what
mmaemu/runtime/config.py read, the tools what their command line and environment say.
"""
import glob
import os
import site
import sys


def _site_roots():
    roots = []
    try:
        import torch
        roots.append(os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__))))
    except ImportError:
        pass
    roots.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        roots += list(site.getsitepackages()) + [site.getusersitepackages()]
    except AttributeError:  # virtualenvs of old Pythons lack getsitepackages
        pass
    roots += [p for p in sys.path if p]
    return roots


def library_dirs(cuda_home=None):
    """Existing directories that may hold CUDA libraries, in search order, without repeats;
    cuda_home: a CUDA toolkit's root ($CUDA_HOME), or None."""
    dirs = []
    for root in _site_roots():
        dirs += [os.path.join(root, "nvidia", "cu13", "lib"), os.path.join(root, "nvidia", "cuda_nvrtc", "lib")]
        dirs += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib")))
        dirs.append(os.path.join(root, "nvidia", "lib"))
    if cuda_home:
        dirs.append(os.path.join(cuda_home, "lib64"))
    dirs += ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu"]
    out = []
    for d in dirs:
        real = os.path.realpath(d)
        if os.path.isdir(real) and real not in out:
            out.append(real)
    return out


def library_candidates(stem, explicit=None, cuda_home=None):
    """Paths to try for a library (stem: "libnvrtc", "libcublasLt"), in order: `explicit` (a
    path the user named), copies this process has already mapped (torch's), stem.so* in
    each of library_dirs() (newest version first; never NVRTC's builtins or .alt. variants),
    then the bare sonames for the dynamic loader's own search."""
    paths = []
    if explicit:
        paths.append(explicit)
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if os.path.basename(p).startswith(stem + ".so"):
                    paths.append(p)
    except OSError:
        pass
    for d in library_dirs(cuda_home):
        found = [p for p in glob.glob(os.path.join(d, stem + ".so*"))
                 if "builtins" not in os.path.basename(p) and ".alt." not in os.path.basename(p)]
        paths += sorted(found, reverse=True)
    paths += [f"{stem}.so.13", f"{stem}.so.12", f"{stem}.so"]
    return list(dict.fromkeys(paths))
