"""Call plans: every decision of a call (profile, preset, split, backend) before any computing.

`mmaemu.explain(...)` returns a CallPlan; `mmaemu.scaled_mm` builds the same plan and hands its
op arguments to torch.ops.mmaemu.scaled_mm (api.run_scaled_mm). Planning reads only sizes, dtypes
and devices; it runs each time a call runs, also in compiled code (inside the planning op
torch.ops.mmaemu.profile_scaled_mm, mmaemu/ops.py), always from the concrete sizes.
"""
import warnings
from dataclasses import dataclass, field
from typing import List, Optional

import torch

from . import errors
from .backends import resolve as resolve_backend
from .profiles import get_preset, get_profile
from .splitk import DTYPE_NAMES, SplitDecision, decide, parse_splitk

EPILOGUE_ORDERS = {"H1": 0, "H2": 1, "H3": 2, "rowwise": 3, "rowwise_t": 4}

# Tensor-wise scales with a bias: cuBLASLt's EPILOGUE_BIAS. The order is inferred.
BIAS_NOTE = ("bias (cuBLASLt EPILOGUE_BIAS): fmaf(fp32(scale_a*scale_b), acc, bias[n]), then the "
             "output conversion (scale_result after the bias); inferred: one rounding, as the "
             "tensor-wise epilogue's fma; probe rowwise_epilogue_order (mmaemu_tools/probe_hopper.py) "
             "settles it")


@dataclass
class CallPlan:
    """What a call will do: validation result, profile, preset, split, backend, warnings."""
    validation: str
    profile: Optional[str]
    preset: Optional[str]
    preset_maturity: Optional[str]
    split: Optional[SplitDecision]
    backend: Optional[str]
    fallbacks: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    epilogue: str = "H1"
    kernel: Optional[str] = None  # the reference's kernel and epilogue, where a rule picks them
    # for an unknown split (split.S None): what splitk="infer" would decide, so a user can
    # choose knowingly; None otherwise
    inferred: Optional[SplitDecision] = None

    def op_args(self) -> dict:
        """The keyword arguments of the kernel op torch.ops.mmaemu.scaled_mm that pin this plan:
        preset, splits, scheme, backend, epilogue; what mmaemu.scaled_mm passes it for this
        shape. For code that calls the kernel op directly (TorchScript) with one fixed plan:
        such code gets no validation, and the plan is only right for sizes it was made for."""
        if self.validation != "ok" or self.split is None or self.split.S is None:
            raise errors.MmaemuError(f"this plan cannot run: validation={self.validation!r}, "
                                     f"split={self.split!r}")
        return {"preset": self.preset, "splits": self.split.S, "scheme": self.split.scheme,
                "backend": self.backend, "epilogue": EPILOGUE_ORDERS[self.epilogue]}

    def __repr__(self):
        return (f"CallPlan(validation={self.validation!r}, profile={self.profile!r}, "
                f"preset={self.preset!r}, preset_maturity={self.preset_maturity!r},\n"
                f"  split={self.split!r},\n"
                f"  backend={self.backend!r}, fallbacks={self.fallbacks!r}, warnings={self.warnings!r}"
                + (f",\n  epilogue={self.epilogue!r}, kernel={self.kernel!r}" if self.kernel else "")
                + (f",\n  inferred={self.inferred!r}" if self.inferred else "") + ")")


def dtype_name(dtype) -> str:
    return DTYPE_NAMES[str(dtype)]


def build_plan(M, N, K, fmt_a, fmt_b, out_dtype, fast, *, profile=None, backend=None,
               splitk="auto", device_type="cpu", device_index=None, scaling="tensorwise",
               bias=None, explaining=False):
    """The CallPlan of a validated call; raises the documented errors of an unrunnable one.

    scaling: "tensorwise" or "rowwise"; bias: the bias dtype's name ("bfloat16", "float16") or
    None; explaining: a backend that cannot run here is reported in the plan (backend None, the
    reason in fallbacks and warnings) instead of raising BackendUnavailableError."""
    prof = get_profile(profile)
    preset = get_preset(prof.preset)
    warns = []
    if prof.experimental or preset.maturity == "experimental":
        warns.append(("ExperimentalPresetWarning",
                      f"profile {prof.name!r} (preset {preset.name!r}) is experimental: "
                      f"{preset.evidence}"))
    epilogue, kernel = "H1", None
    if scaling == "rowwise":
        split, epilogue, kernel, rowwise_warns = rowwise_decision(prof, M, N, K, splitk)
        warns += rowwise_warns
    else:
        split, split_warns = decide(prof, M, N, K, fmt_a, fmt_b, out_dtype, fast, splitk)
        warns += split_warns
        if bias is not None:
            kernel = BIAS_NOTE
    device = torch.device(device_type, device_index) if device_index is not None \
        else torch.device(device_type)
    # the kernel must compute the split layout of the plan (row-wise stream-K runs on the host)
    splits = (split.S or 1) if scaling != "rowwise" else 1
    try:
        name, fallbacks, backend_warns = resolve_backend(backend, device, preset.name,
                                                         (fmt_a, fmt_b), splits)
    except errors.BackendUnavailableError as e:
        if not explaining:
            raise
        name, fallbacks, backend_warns = None, [str(e)], [e]
    warns += [(type(w).__name__, str(w)) for w in backend_warns]
    if device.type == "cuda" and (scaling == "rowwise" or bias is not None):
        fallbacks = fallbacks + ["cpu on host copies: no CUDA kernel computes row-wise scales "
                                 "or a bias"]
    plan = CallPlan("ok", prof.name, preset.name, preset.maturity, split, name, fallbacks,
                    [f"{cat}: {msg}" for cat, msg in warns], epilogue, kernel)
    return plan, warns


def rowwise_decision(prof, M, N, K, splitk):
    """Row-wise scales: torch 2.7.1's CUTLASS f8f8bf16_rowwise. On sm_90 it never splits K and
    the (M, N) rule picks the instance, and with it the epilogue's scale order; on sm_89 the
    stream-K swizzle splits tiles' K by the profile's SM count. Returns (split, epilogue,
    kernel, warnings)."""
    from .rowwise import sm90_instance
    if prof.compute_capability not in ("9.0", "8.9") or prof.sm_count is None:
        raise errors.UnsupportedFeatureError(
            f"row-wise scales on profile {prof.name!r}: mmaemu models torch 2.7.1's row-wise "
            "kernels on sm_90 and sm_89 (the hopper and ada profiles) only")
    explicit = parse_splitk(splitk, prof)
    if explicit is not None and explicit[0] != 1:
        how = "never splits K" if prof.compute_capability == "9.0" else \
            "splits K by its stream-K rule alone (the profile's SM count)"
        raise ValueError(f"splitk={splitk!r}: torch 2.7.1's row-wise kernel {how}; "
                         "pass 'auto' or 1")
    if prof.compute_capability == "8.9":
        return ada_rowwise_decision(prof, M, N, K)
    inst = sm90_instance(M, N, prof.sm_count)
    split = SplitDecision(1, "none", "rule", True, None,
                          "row-wise: CUTLASS f8f8bf16_rowwise has no split-K or stream-K "
                          "(cited: torch 2.7.1 source and SASS)")
    return split, "rowwise_t" if inst.transposed else "rowwise", inst.describe(), []


def ada_rowwise_decision(prof, M, N, K):
    """sm_89: the stream-K plan of mmaemu/streamk.py. Inferred from source, never compared with
    Ada hardware, hence verified=False and, where a tile's K is split, UnverifiedSplitWarning."""
    from .streamk import decompose
    sk = decompose(M, N, K, prof.sm_count)
    segs = max((len(s) for s in sk.segments().values()), default=1)
    split = SplitDecision(segs, "streamk", "rule", False, None,
                          f"row-wise on sm_89: {sk.describe()}. Inferred from the source of "
                          "torch 2.7.1 and CUTLASS 3.8 (no Ada row-wise recording); S is the "
                          "most k-segments of any tile")
    kernel = ("CUTLASS 2.x GemmWithEpilogueVisitorStreamk 64x128x64 (torch 2.7.1 sm_89 "
              "f8f8bf16_rowwise), not transposed: fp32(acc*scale_a[m]) first; non-fast: staged "
              "promotion (groups of 32, then 64 k within each k-segment); inferred")
    warns = []
    if segs > 1:
        warns.append(("UnverifiedSplitWarning",
                      f"row-wise on profile {prof.name!r}: the stream-K kernel splits the K of "
                      f"{sk.sk_tiles} of {sk.tiles} output tiles ({prof.sm_count} SMs); the "
                      "decomposition and the fold of its partials are inferred from source, "
                      "never replayed on Ada hardware"))
    return split, "rowwise", kernel, warns


def emit(warns, stacklevel):
    for category, message in warns:
        warnings.warn(message, getattr(errors, category), stacklevel=stacklevel + 1)


def flush_denormal_check(device_type):
    from . import _C
    if device_type == "cpu" and _C.cpu_flushes_denormals():
        raise errors.MmaemuError(
            "CPU flush-to-zero is on (torch.set_flush_denormal(True)): subnormal arithmetic "
            "would change, so mmaemu refuses to run. Call torch.set_flush_denormal(False).")
