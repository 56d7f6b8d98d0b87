"""Every environment variable mmaemu reads: its values, its default, and how it is checked.

Each variable is read here and nowhere else (the C core is handed what it needs). A value that
is set but not accepted is an error where it is used, naming the variable and the values it
takes, never silently ignored; `python -m mmaemu info` lists every variable with its value and
whether it was accepted. This module imports nothing of mmaemu's.
"""
import os
import re
from dataclasses import dataclass
from typing import Callable, Optional

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(raw):
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"takes 1/true/yes/on or 0/false/no/off, got {raw!r}")


def _choice(*values):
    def parse(raw):
        if raw not in values:
            raise ValueError(f"takes one of {', '.join(values)}; got {raw!r}")
        return raw
    return parse


def _text(raw):
    if not raw.strip():
        raise ValueError("is empty")
    return raw


_BACKEND = re.compile(r"(auto|reference|cpu|cpu:[a-z0-9_]+|cuda|cuda:[a-z0-9_]+)")


def _backend(raw):
    if not _BACKEND.fullmatch(raw):
        raise ValueError(f"takes auto, cpu, cpu:<simd>, reference, cuda or cuda:<kernel>; "
                         f"got {raw!r}")
    return raw


@dataclass(frozen=True)
class Variable:
    name: str
    parse: Callable[[str], object]
    default: object
    meaning: str


VARIABLES = {v.name: v for v in (
    Variable("MMAEMU_PROFILE", _text, None, "default profile (a name of tables/profiles.json)"),
    Variable("MMAEMU_BACKEND", _backend, "auto", "default backend"),
    Variable("MMAEMU_SPLITK", _choice("auto", "infer"), "auto",
             "what splitk='auto' does for a shape no table, rule or envelope decides: "
             "refuse (auto) or take the stated inference (infer)"),
    Variable("MMAEMU_SPLITK_STRICT", _flag, False, "no envelope inference of S = 1"),
    Variable("MMAEMU_DISABLE_CUDA", _flag, False, "never touch CUDA (no driver, no NVRTC)"),
    Variable("MMAEMU_ALLOW_GATED_KERNELS", _flag, False,
             "allow gated kernels on capabilities they were not validated on"),
    Variable("MMAEMU_CPU_SIMD", _choice("auto", "portable", "avx2", "avx512"), "auto",
             "the cpu backend's SIMD path"),
    Variable("MMAEMU_CACHE_DIR", _text, None,
             "NVRTC cubins and cached verdicts (default ${XDG_CACHE_HOME:-~/.cache}/mmaemu)"),
    Variable("MMAEMU_FATBIN_DIR", _text, None, "prebuilt CUDA kernels (default: the package's)"),
    Variable("MMAEMU_LIBCUDA_PATH", _text, None, "explicit path of the CUDA driver library"),
    Variable("MMAEMU_NVRTC_PATH", _text, None, "explicit path of the NVRTC library"),
    Variable("MMAEMU_FORCE_NVRTC", _flag, False,
             "compile the CUDA kernels with NVRTC even where a prebuilt fatbin fits (tests)"),
    Variable("MMAEMU_DISABLE_NVRTC", _flag, False,
             "never compile with NVRTC: only prebuilt fatbins load (tests)"),
)}

# Other programs' variables mmaemu reads as they are (no check): where caches and CUDA live.
OTHER = ("XDG_CACHE_HOME", "CUDA_HOME", "CUDA_PATH")


def get(name: str):
    """The parsed value of the variable (its default when unset or empty); ValueError naming
    the variable when its value is not accepted."""
    var = VARIABLES[name]
    raw = os.environ.get(name, "")
    if raw == "":
        return var.default
    try:
        return var.parse(raw)
    except ValueError as e:
        raise ValueError(f"environment variable {name} {e}") from None


def raw(name: str) -> Optional[str]:
    """The variable's text as set, or None (for cache keys and reports); also OTHER's."""
    if name not in VARIABLES and name not in OTHER:
        raise KeyError(f"{name} is not a variable mmaemu reads")
    return os.environ.get(name)


def report():
    """[(name, value as set or None, accepted, what it means or why it was not accepted)]."""
    rows = []
    for name, var in VARIABLES.items():
        value = os.environ.get(name)
        try:
            get(name)
            rows.append((name, value, True, var.meaning))
        except ValueError as e:
            rows.append((name, value, False, str(e)))
    return rows
