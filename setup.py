"""Builds mmaemu._C: the C11 core (compiled by the C compiler) plus one C++ registration shim.

Install for development with:  pip install --no-build-isolation -e .

When nvcc is found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin), the CUDA kernels of
csrc/kernels are also built into fatbins (mmaemu/_fatbin/*.fatbin, each stamped with the SHA-256
of the sources it was built from); MMAEMU_BUILD_FATBIN=0 skips that (about two minutes on one
core). Either way the kernel sources ship in mmaemu/kernels, so that the runtime can compile
them with NVRTC where no fatbin fits. Nothing links against CUDA: the extension builds against
the CPU-only torch wheel.
"""
import glob
import hashlib
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(ROOT, "mmaemu", "version.py")) as _f:   # the one place the version is
    VERSION = _f.read().split('"')[-2]


def exact_flags(lang):
    """The flags the bits depend on for lang ("c", "cxx", "cuda"), from csrc/flags.txt."""
    with open(os.path.join(ROOT, "csrc", "flags.txt")) as f:
        for line in f:
            name, sep, flags = line.partition(":")
            if sep and not name.startswith("#") and name.strip() == lang:
                return flags.split()
    raise KeyError(f"csrc/flags.txt has no '{lang}' line")


C_FLAGS = exact_flags("c") + ["-O3", "-fPIC", "-Wall", "-Wextra"]


KERNEL_DIR = os.path.join(ROOT, "csrc", "kernels")
# Fatbin targets: SASS for every architecture from Turing to Blackwell, plus PTX for newer ones.
# The wgmma kernel uses sm_90a-only instructions: SASS for sm_90a and nothing else.
FATBIN_ARCHS = ["75", "80", "86", "89", "90", "100", "120"]
FATBIN_MODULES = {
    "reference": [f"-gencode=arch=compute_{a},code=sm_{a}" for a in FATBIN_ARCHS]
                 + ["-gencode=arch=compute_120,code=compute_120"],
    "ieee": [f"-gencode=arch=compute_{a},code=sm_{a}" for a in FATBIN_ARCHS]
            + ["-gencode=arch=compute_120,code=compute_120"],
    "wgmma": ["-gencode=arch=compute_90a,code=sm_90a"],
}


def kernel_source_hash(module):
    """SHA-256 over (name, length, bytes) of module.cu and every mmaemu_*.h, as csrc/cuda/modules.c
    computes it: a fatbin whose stamp differs from the sources is not loaded."""
    names = [module + ".cu"] + sorted(os.path.basename(p)
                                      for p in glob.glob(os.path.join(KERNEL_DIR, "mmaemu_*.h")))
    h = hashlib.sha256()
    for name in names:
        with open(os.path.join(KERNEL_DIR, name), "rb") as f:
            data = f.read()
        h.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()


def find_nvcc():
    for cand in (shutil.which("nvcc"),
                 os.path.join(os.environ.get("CUDA_HOME", ""), "bin", "nvcc"),
                 "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def progress(message):
    """One line per build step, so `pip install -v` shows where the build is."""
    print(f"mmaemu build: {message}", flush=True)


def build_kernels(package_dir):
    """Copies the kernel sources into the package and, with nvcc, builds the fatbins."""
    kernels = os.path.join(package_dir, "kernels")
    os.makedirs(kernels, exist_ok=True)
    for src in glob.glob(os.path.join(KERNEL_DIR, "*.cu")) + glob.glob(os.path.join(KERNEL_DIR, "*.h")):
        shutil.copy2(src, kernels)
    if os.environ.get("MMAEMU_BUILD_FATBIN", "1") == "0":
        print("mmaemu: MMAEMU_BUILD_FATBIN=0: no fatbins (the runtime compiles with NVRTC)")
        return
    nvcc = find_nvcc()
    if nvcc is None:
        print("mmaemu: nvcc not found: no fatbins (the runtime compiles with NVRTC)")
        return
    out = os.path.join(package_dir, "_fatbin")
    os.makedirs(out, exist_ok=True)
    for i, (module, gencode) in enumerate(FATBIN_MODULES.items(), start=1):
        progress(f"CUDA fatbin {i}/{len(FATBIN_MODULES)}: {module}.cu (nvcc, up to a minute each)")
        target = os.path.join(out, module + ".fatbin")
        stamp = kernel_source_hash(module)
        if os.path.exists(target + ".sha256") and open(target + ".sha256").read().strip() == stamp:
            continue  # up to date
        carried = os.path.join(ROOT, "mmaemu", "_fatbin", module + ".fatbin")   # e.g. brought to a GPU machine
        if os.path.realpath(carried) != os.path.realpath(target) and os.path.exists(carried + ".sha256") \
                and open(carried + ".sha256").read().strip() == stamp:
            print(f"mmaemu: {module}.fatbin: the in-place copy matches the sources, reused")
            shutil.copy2(carried, target)
            shutil.copy2(carried + ".sha256", target + ".sha256")
            continue
        cmd = [nvcc, "-fatbin", *exact_flags("cuda"), "-O3", "-std=c++17", "-I", KERNEL_DIR, *gencode,
               "--threads", os.environ.get("MAX_JOBS", "1"),
               "-o", target, os.path.join(KERNEL_DIR, module + ".cu")]
        print("mmaemu:", " ".join(cmd))
        subprocess.run(cmd, check=True)
        with open(target + ".sha256", "w") as f:
            f.write(stamp + "\n")


class BuildWithC(BuildExtension):
    """torch's BuildExtension compiles .c files as C++; compile them as C11 here instead.
    Also ships the CUDA kernels (sources, and fatbins where nvcc exists)."""

    def build_extensions(self):
        build_kernels(os.path.dirname(self.get_ext_fullpath("mmaemu._C")))
        if getattr(self, "editable_mode", False):  # pip install -e: the package is the source tree
            self._copy_kernels_to_source()
        for ext in self.extensions:
            c_sources = [s for s in ext.sources if s.endswith(".c")]
            ext.sources = [s for s in ext.sources if not s.endswith(".c")]
            objects = self._compile_c(c_sources, ext)
            ext.extra_objects = list(ext.extra_objects or []) + objects
        super().build_extensions()

    def _compile_c(self, c_sources, ext):
        """The C files, MAX_JOBS at a time (one compiler process each; the C++ part has ninja)."""
        from concurrent.futures import ThreadPoolExecutor

        done = []

        def one(src):
            objs = self.compiler.compile([src], output_dir=self.build_temp, include_dirs=ext.include_dirs,
                                         extra_postargs=C_FLAGS + ext.extra_compile_args.get("c", []))
            done.append(src)
            progress(f"C {len(done)}/{len(c_sources)}: {os.path.relpath(src, ROOT)}")
            return objs
        jobs = max(1, int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1))
        with ThreadPoolExecutor(jobs) as pool:
            objects = [obj for objs in pool.map(one, c_sources) for obj in objs]
        progress("C++: the torch ops and the _C module (then linking)")
        return objects

    def copy_extensions_to_source(self):
        """In-place builds: the kernel sources and fatbins go beside the .so too."""
        super().copy_extensions_to_source()
        self._copy_kernels_to_source()

    def _copy_kernels_to_source(self):
        built = os.path.dirname(self.get_ext_fullpath("mmaemu._C")) if not self.inplace \
            else os.path.join(self.build_lib, "mmaemu")
        for sub in ("kernels", "_fatbin"):
            if os.path.isdir(os.path.join(built, sub)):
                shutil.copytree(os.path.join(built, sub), os.path.join(ROOT, "mmaemu", sub),
                                dirs_exist_ok=True)


class BuildPyWithTables(build_py):
    """Ships tables/ (profiles, presets, split-K tables) inside the package as mmaemu/tables."""

    def run(self):
        super().run()
        if self.editable_mode:
            return  # an editable install reads tables/ from the source tree
        dest = os.path.join(self.build_lib, "mmaemu", "tables")
        self.copy_tree(os.path.join(ROOT, "tables"), dest)


# One folder per layer (docs/architecture.md): the core, the CPU executor, the CUDA loader, and the
# torch shim; csrc/kernels holds headers and device code only. C files compile as C11 (BuildWithC).
C_LAYERS = ("core", "cpu", "cuda")
sources = [p for layer in C_LAYERS for p in sorted(glob.glob(f"csrc/{layer}/*.c"))] \
    + sorted(glob.glob("csrc/torch/*.cpp"))

setup(
    name="mmaemu",
    version=VERSION,
    description="Bit-exact emulation of NVIDIA FP8 tensor-core GEMMs on any CPU or CUDA GPU",
    packages=["mmaemu", "mmaemu.planning", "mmaemu.runtime", "mmaemu.integrations", "mmaemu_tools"],  # mmaemu_tools: python -m mmaemu_tools.X
    package_data={"mmaemu": ["kernels/*", "_fatbin/*"]},  # tables/ goes in by BuildPyWithTables
    ext_modules=[
        CppExtension(
            "mmaemu._C",
            sources,
            include_dirs=[os.path.join(ROOT, "csrc", "include"), os.path.join(ROOT, "csrc")],
            extra_compile_args={"cxx": ["-O2", *exact_flags("cxx")], "c": []},
            extra_link_args=["-ldl", "-pthread"],  # the CUDA loader: dlopen, pthread_once
        )
    ],
    cmdclass={"build_ext": BuildWithC, "build_py": BuildPyWithTables},
    python_requires=">=3.10",
    install_requires=["torch>=2.6", "numpy"],
)
