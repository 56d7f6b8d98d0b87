"""Builds mmaemu._C: the C11 core (compiled by the C compiler) plus one C++ registration shim.

Install for development with:  pip install --no-build-isolation -e .
"""
import glob
import os

from setuptools import setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
C_FLAGS = ["-std=c11", "-O3", "-fPIC", "-ffp-contract=off", "-fno-fast-math", "-Wall", "-Wextra"]


class BuildWithC(BuildExtension):
    """torch's BuildExtension compiles .c files as C++; compile them as C11 here instead."""

    def build_extensions(self):
        for ext in self.extensions:
            c_sources = [s for s in ext.sources if s.endswith(".c")]
            ext.sources = [s for s in ext.sources if not s.endswith(".c")]
            objects = self.compiler.compile(
                c_sources,
                output_dir=self.build_temp,
                include_dirs=ext.include_dirs,
                extra_postargs=C_FLAGS + ext.extra_compile_args.get("c", []),
            )
            ext.extra_objects = list(ext.extra_objects or []) + objects
        super().build_extensions()


class BuildPyWithTables(build_py):
    """Ships tables/ (profiles, presets, split-K tables) inside the package as mmaemu/tables."""

    def run(self):
        super().run()
        if self.editable_mode:
            return  # an editable install reads tables/ from the source tree
        dest = os.path.join(self.build_lib, "mmaemu", "tables")
        self.copy_tree(os.path.join(ROOT, "tables"), dest)


sources = sorted(glob.glob("csrc/*.c")) + ["csrc/torch_ops.cpp"]

setup(
    name="mmaemu",
    version="0.1.0",
    description="Bit-exact emulation of NVIDIA FP8 tensor-core GEMMs on any CPU or CUDA GPU",
    packages=["mmaemu"],
    ext_modules=[
        CppExtension(
            "mmaemu._C",
            sources,
            include_dirs=[os.path.join(ROOT, "csrc")],
            extra_compile_args={"cxx": ["-O2", "-ffp-contract=off"], "c": []},
            extra_link_args=[],
        )
    ],
    cmdclass={"build_ext": BuildWithC, "build_py": BuildPyWithTables},
    python_requires=">=3.10",
    install_requires=["torch>=2.6", "numpy"],
)
