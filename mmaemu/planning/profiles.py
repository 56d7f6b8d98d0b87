"""Presets (instruction models) and profiles (reference platforms), read from tables/.

A preset is the arithmetic of one tensor-core instruction. A profile is a platform whose results
mmaemu reproduces: a GPU with its SM count, a cuBLASLt version and a caller with its workspace
size, which together decide split-K. Profiles are data (tables/profiles.json,
tables/splitk/*.json), so tables recorded later on real GPUs drop in without code changes. A
preset's numbers are the C header's (csrc/kernels/mmaemu_presets.h, which the ops compute
with, read through mmaemu._C.preset); tables/presets.json gives each its maturity and evidence.
"""
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Tuple

from ..runtime import config

DEFAULT_PROFILE = "hopper"


def tables_dir() -> Path:
    """The directory holding presets.json, profiles.json and splitk/."""
    here = Path(__file__).resolve().parent.parent     # mmaemu/: installed, tables/ is inside it
    for candidate in (here / "tables", here.parent / "tables"):
        if (candidate / "profiles.json").is_file():
            return candidate
    raise FileNotFoundError(f"mmaemu: no tables directory next to {here} (profiles.json missing)")


@dataclass(frozen=True)
class Preset:
    """An instruction model: block size, grid bits, kept bits, promotion interval (promote_k,
    in k). The numbers are csrc/kernels/mmaemu_presets.h's, the ones the ops compute with;
    tables/presets.json adds the maturity and the evidence."""
    name: str
    maturity: str  # "validated" or "experimental"
    block: int
    frac: int
    keep: int
    promote_k: int
    c_late: int
    evidence: str
    # The split-K layout of the library kernels the preset stands for: 0 = contiguous slices on
    # the 128-k grain (H100 cuBLASLt), > 0 = tiles of this many k dealt round-robin to the
    # slices (RTX 4060 cuBLASLt).
    split_rr_tile: int = 0


@dataclass(frozen=True)
class Profile:
    """A reference platform: GPU, SM count, cuBLASLt version, caller and workspace, preset."""
    name: str
    gpu: Optional[str]
    gpu_match: Optional[str]
    compute_capability: Optional[str]
    sm_count: Optional[int]
    cublaslt_version: Optional[str]
    caller: str
    workspace_bytes: Optional[int]
    preset: str
    splitk_table: Optional[str]
    split_rule: str  # "table", "never" (ws0) or "instruction" (experimental: one chain over K)
    split_schemes: Tuple[str, ...]
    experimental: bool
    use: str
    default: bool = field(default=False)

    def matches_device(self, device=None) -> bool:
        """True when `device` (default: the current CUDA device) is this profile's GPU.

        Compares the device name and SM count with the profile's. The cuBLASLt version in use
        is not compared here (PyTorch does not expose it); `python -m mmaemu info` reports it.
        """
        if self.gpu_match is None or config.get("MMAEMU_DISABLE_CUDA"):
            return False
        import torch
        if not torch.cuda.is_available():
            return False
        props = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
        return self.gpu_match in props.name and props.multi_processor_count == self.sm_count

    def __repr__(self):
        return f"Profile({self.name!r}, gpu={self.gpu!r}, preset={self.preset!r}, table={self.splitk_table!r})"


def _load_json(name):
    with open(tables_dir() / name) as f:
        return json.load(f)


_PRESETS = None
_PROFILES = None


def _arithmetic(name):
    """block, frac, keep, promote_k, c_late, split_rr_tile of a preset, from
    csrc/kernels/mmaemu_presets.h through the extension."""
    from .. import _C
    fields = _C.preset(name)
    fields.pop("id")
    return fields


def presets():
    """All presets by name."""
    global _PRESETS
    if _PRESETS is None:
        # the arithmetic from the C header the ops compute with; names and provenance from the table
        _PRESETS = {p["name"]: Preset(**p, **_arithmetic(p["name"]))
                    for p in _load_json("presets.json")["presets"]}
    return dict(_PRESETS)


def profiles():
    """All profiles by name (the default, 'hopper', first)."""
    global _PROFILES
    if _PROFILES is None:
        out = {}
        for p in _load_json("profiles.json")["profiles"]:
            p = dict(p)
            p["split_schemes"] = tuple(p["split_schemes"])
            out[p["name"]] = Profile(**p)
        _PROFILES = out
    return dict(_PROFILES)


def get_preset(name: str) -> Preset:
    if not isinstance(name, str):
        raise TypeError(f"preset must be a str, got {type(name).__name__}")
    try:
        return presets()[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(presets())}") from None


def get_profile(name=None) -> Profile:
    """The named profile; None means MMAEMU_PROFILE or, if unset, 'hopper'."""
    if name is None:
        name = config.get("MMAEMU_PROFILE") or DEFAULT_PROFILE
    if isinstance(name, Profile):
        return name
    if not isinstance(name, str):
        raise TypeError(f"profile must be a str or Profile, got {type(name).__name__}")
    try:
        return profiles()[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r}; known: {', '.join(profiles())}") from None
