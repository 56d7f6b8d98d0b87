"""Call plans: every decision of a call before any computing, in one place.

A CallPlan names the profile and its preset, the split-K decision, the epilogue, the kernel op
and the executor that runs it (planning/executors.py); the op executes exactly that (api.run
hands it over, csrc/torch/ops.cpp refuses anything else). `mmaemu.explain(...)` returns the plan
a call would run. Planning reads only sizes, dtypes, devices and cached facts (runtime/facts.py:
it runs no kernel); it happens each time a call runs, also in compiled code (inside the planning
op torch.ops.mmaemu.profile_scaled_mm, mmaemu/ops.py), always from the concrete sizes.
"""
import warnings
from dataclasses import dataclass, field
from typing import List, Optional

import torch

from .. import _C, errors
from .executors import request_of, resolve
from .profiles import get_preset, get_profile
from .splitk import SplitDecision, decide, parse_splitk

EPILOGUE_ORDERS = _C.enums()["epilogues"]   # the C core's ids: H1, H2, H3, rowwise, rowwise_t

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
    # the kernel op the executor runs: "scaled_mm", "accumulate", or "scaled_mm_tiles" (row-wise
    # over per-tile k-segments, the sm_89 stream-K kernel) with its tile plan: (offsets, bounds,
    # tile_m, tile_n, iter_k)
    op: str = "scaled_mm"
    tiles: Optional[tuple] = None
    backend_note: str = ""   # why this executor, where that is a choice among equals

    def op_args(self) -> dict:
        """The keyword arguments of the kernel op torch.ops.mmaemu.scaled_mm that pin this plan:
        preset, splits, scheme, backend, epilogue; what mmaemu.scaled_mm passes it for this
        shape. For code that calls the kernel op directly (TorchScript) with one fixed plan:
        such code gets no validation, and the plan is only right for sizes it was made for."""
        if self.validation != "ok" or self.split is None or self.split.S is None \
                or self.backend is None or self.op == "scaled_mm_tiles":
            raise errors.MmaemuError(f"this plan has no scaled_mm op arguments: validation="
                                     f"{self.validation!r}, split={self.split!r}, backend="
                                     f"{self.backend!r}, op={self.op!r}")
        return {"preset": self.preset, "splits": self.split.S, "scheme": self.split.scheme,
                "backend": self.backend, "epilogue": EPILOGUE_ORDERS[self.epilogue]}

    def __repr__(self):
        return (f"CallPlan(validation={self.validation!r}, profile={self.profile!r}, "
                f"preset={self.preset!r}, preset_maturity={self.preset_maturity!r},\n"
                f"  split={self.split!r},\n"
                f"  backend={self.backend!r}, fallbacks={self.fallbacks!r}, warnings={self.warnings!r}"
                + (f",\n  epilogue={self.epilogue!r}, kernel={self.kernel!r}" if self.kernel else "")
                + (f",\n  inferred={self.inferred!r}" if self.inferred else "")
                + (f",\n  backend_note={self.backend_note!r}" if self.backend_note else "") + ")")


def build_plan(M, N, K, fmt_a, fmt_b, out_dtype, fast, *, profile=None, backend=None,
               splitk="auto", device_type="cpu", device_index=None, scaling="tensorwise",
               bias=None, explaining=False, op="scaled_mm", blockwise=None):
    """The CallPlan of a validated call; raises the documented errors of an unrunnable one.

    scaling: "tensorwise", "rowwise", "blockwise" (blockwise: the validated recipe,
    mmaemu.blockwise.Blockwise) or "grouped" (one group of a grouped GEMM); bias: the bias dtype's name ("bfloat16", "float16") or
    None; explaining: a backend that cannot run here is reported in the plan (backend None, the
    reason in fallbacks and warnings) instead of raising BackendUnavailableError; op: the call's
    kernel op ("scaled_mm" or "accumulate")."""
    prof = get_profile(profile)
    preset = get_preset(prof.preset)
    request_of(backend)     # an unknown backend name is refused before any split decision
    warns = []
    if prof.experimental or preset.maturity == "experimental":
        warns.append(("ExperimentalPresetWarning",
                      f"profile {prof.name!r} (preset {preset.name!r}) is experimental: "
                      f"{preset.evidence}"))
    epilogue, kernel = "H1", None
    if scaling == "rowwise":
        split, epilogue, kernel, rowwise_warns = rowwise_decision(prof, M, N, K, splitk)
        warns += rowwise_warns
    elif scaling == "blockwise":
        split, epilogue, kernel, blockwise_warns = blockwise_decision(prof, blockwise, splitk)
        warns += blockwise_warns
    elif scaling == "grouped":
        split, epilogue, kernel = grouped_decision(prof)
    else:
        split, split_warns = decide(prof, M, N, K, fmt_a, fmt_b, out_dtype, fast, splitk)
        warns += split_warns
        if bias is not None:
            kernel = BIAS_NOTE
    device = torch.device(device_type, device_index) if device_index is not None \
        else torch.device(device_type)
    # the executor must compute the plan's split layout; no CUDA kernel computes row-wise scales
    # or a bias: on CUDA tensors those run on host copies
    splits = (split.S or 1) if scaling != "rowwise" else 1
    on_host = {"rowwise": "row-wise scales", "blockwise": "block-wise scales",
               "grouped": "grouped row-wise scales"}.get(scaling) \
        or ("a bias" if bias is not None else None)
    try:
        executor, fallbacks, backend_warns, note = resolve(
            backend, device, preset.name, (fmt_a, fmt_b), splits, M=M, N=N, on_host=on_host)
    except errors.BackendUnavailableError as e:
        if not explaining:
            raise
        executor, fallbacks, backend_warns, note = None, [str(e)], [e], ""
    warns += [(type(w).__name__, str(w)) for w in backend_warns]
    tiles = None
    if split.scheme == "streamk":   # row-wise on sm_89: the tiles' k-segments
        from .streamk import TILE_K, TILE_M, TILE_N, tile_plan
        op, tiles = "scaled_mm_tiles", (*tile_plan(M, N, K, prof.sm_count), TILE_M, TILE_N, TILE_K)
    plan = CallPlan("ok", prof.name, preset.name, preset.maturity, split, executor, fallbacks,
                    [f"{cat}: {msg}" for cat, msg in warns], epilogue, kernel, op=op, tiles=tiles,
                    backend_note=note)
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


def _hopper_only(prof, what):
    if prof.preset != "hopper" or prof.compute_capability not in ("9.0", None):
        raise errors.UnsupportedFeatureError(
            f"{what} on profile {prof.name!r}: mmaemu models the sm_90 kernels that compute "
            "them (the hopper profiles) only")


def blockwise_decision(prof, recipe, splitk):
    """Block-wise scales: the kernel named by the call (mmaemu/blockwise.py). None of them
    splits K; the plan names it with what backs it. Returns (split, epilogue, kernel,
    warnings)."""
    from ..blockwise import DESCRIPTIONS
    _hopper_only(prof, "block-wise scales")
    explicit = parse_splitk(splitk, prof)
    if explicit is not None and explicit[0] != 1:
        raise ValueError(f"splitk={splitk!r}: the block-wise kernels do not split K; pass "
                         "'auto' or 1")
    closed = recipe.kernel == "cublaslt"
    split = SplitDecision(1, "none", "rule", not closed, None,
                          f"block-wise ({recipe.kernel}): "
                          + ("cuBLASLt's split is not known; modelled as no split (inferred)"
                             if closed else "no split-K: one CTA walks a tile's k-blocks in "
                             "ascending order (cited)"))
    kernel = (f"{DESCRIPTIONS[recipe.kernel]}; scales: A {recipe.a_gran} x 128, "
              f"B {recipe.b_gran} x 128")
    warns = []
    if closed:
        warns.append(("ExperimentalPresetWarning",
                      "block-wise scales on torch's own path (cuBLASLt VEC128 / BLK128x128): "
                      "its arithmetic is closed and unrecorded; mmaemu computes DeepGEMM's "
                      "1d2d arithmetic for it (inferred, experimental). Pass "
                      "blockwise='deepgemm' or 'cutlass' for the kernel you run"))
    return split, recipe.epilogue, kernel, warns


def grouped_decision(prof):
    """One group of torch's grouped GEMM with row-wise scales (ScaledGroupMM.cu, sm_90): no
    split, its epilogue bf16(fp32(fp32(acc*sa)*sb)) (mmaemu/grouped.py)."""
    from ..grouped import DESCRIPTION
    _hopper_only(prof, "grouped GEMMs")
    split = SplitDecision(1, "none", "rule", True, None,
                          "grouped: CUTLASS's grouped kernel has no split-K or stream-K (cited)")
    return split, "rowwise_mul", DESCRIPTION


def ada_rowwise_decision(prof, M, N, K):
    """sm_89: the stream-K plan of mmaemu/planning/streamk.py. Inferred from source, never compared with
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
    from .. import _C
    if device_type == "cpu" and _C.cpu_flushes_denormals():
        raise errors.MmaemuError(
            "CPU flush-to-zero is on (torch.set_flush_denormal(True)): subnormal arithmetic "
            "would change, so mmaemu refuses to run. Call torch.set_flush_denormal(False).")
