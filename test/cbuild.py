"""Building the C test programs of test/c: where things are, the compilers, the flags the bits
depend on (csrc/flags.txt, the file setup.py and the scripts read too), and the C core's
translation units by layer (the folders setup.py compiles)."""
import glob
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
INCLUDE = os.path.join(CSRC, "include")
KERNELS = os.path.join(CSRC, "kernels")
CPU = os.path.join(CSRC, "cpu")
TEST_C = os.path.join(ROOT, "test", "c")
LAYERS = ("core", "cpu", "cuda")  # the C layers of csrc, each a folder of translation units


def exact_flags(lang):
    """The flags for lang ("c", "cxx", "cuda") from csrc/flags.txt."""
    with open(os.path.join(CSRC, "flags.txt")) as f:
        for line in f:
            name, sep, flags = line.partition(":")
            if sep and not name.startswith("#") and name.strip() == lang:
                return flags.split()
    raise KeyError(f"csrc/flags.txt has no '{lang}' line")


def include_flags():
    """The include directories of the C core: the public API, then csrc (for kernels/...)."""
    return ["-I" + INCLUDE, "-I" + CSRC]


def core_sources(*layers):
    """The .c files of the given layers of csrc (all of them by default), in layer order."""
    return [p for layer in (layers or LAYERS) for p in sorted(glob.glob(os.path.join(CSRC, layer, "*.c")))]


def source(name):
    """A file of test/c."""
    return os.path.join(TEST_C, name)


def c_compiler():
    """$CC, else cc, gcc or clang (None if there is none)."""
    return next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)


def cxx_compiler():
    return next((c for c in (os.environ.get("CXX"), "c++", "g++", "clang++") if c and shutil.which(c)), None)
