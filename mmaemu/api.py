"""The public functions: scaled_mm, accumulate, mma, explain."""
import torch

from . import errors
from .ops import splitk_args
from .plan import build_plan, dtype_name, emit, flush_denormal_check
from .profiles import get_preset
from .streamk import scaled_mm_streamk
from .validation import (validate_accumulate, validate_accumulate_types, validate_mma,
                         validate_scaled_mm, validate_scaled_mm_types)


def _traced():
    """True while torch.compile, torch.export or torch.jit.trace records the call: then the
    call becomes one planning op (mmaemu/ops.py) that validates and plans when it runs."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def _profile_name(profile):
    return getattr(profile, "name", profile)


def run_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum,
                  profile, backend, splitk, stacklevel):
    """Validate, plan from the concrete sizes, run the kernel op: every scaled_mm, in eager mode
    and in the planning op. stacklevel: the warnings' frame, counted from the caller."""
    v = validate_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                           use_fast_accum)
    flush_denormal_check(v.device.type)
    if v.empty:  # torch 2.7.1 returns before cuBLASLt: zeros (K == 0) or an empty matrix
        return torch.zeros(v.M, v.N, dtype=v.out_dtype, device=v.device)
    args = _plan_op_args(v, use_fast_accum, profile, backend, splitk, stacklevel + 1,
                         bias=None if v.bias_dtype is None else dtype_name(v.bias_dtype))
    if args["scheme"] == "streamk":  # row-wise on sm_89: per-tile k-segments
        return scaled_mm_streamk(mat1, mat2, scale_a, scale_b, bias, bool(use_fast_accum),
                                 args["preset"], _profile_name(profile), args["backend"])
    return torch.ops.mmaemu.scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result,
                                      v.out_dtype, use_fast_accum, args["preset"],
                                      args["splits"], args["scheme"], args["backend"],
                                      args["epilogue"])


def run_accumulate(x, w, use_fast_accum, profile, backend, splitk, stacklevel):
    """run_scaled_mm for accumulate (the split decision of an fp32-output scaled_mm)."""
    v = validate_accumulate(x, w, use_fast_accum)
    flush_denormal_check(v.device.type)
    if v.empty:
        return torch.zeros(v.M, v.N, dtype=torch.float32, device=v.device)
    args = _plan_op_args(v, use_fast_accum, profile, backend, splitk, stacklevel + 1)
    return torch.ops.mmaemu.accumulate(x, w, use_fast_accum, args["preset"], args["splits"],
                                       args["scheme"], args["backend"])


def _plan_op_args(v, fast, profile, backend, splitk, stacklevel, bias=None):
    plan, warns = build_plan(v.M, v.N, v.K, v.fmt_a, v.fmt_b, dtype_name(v.out_dtype), fast,
                             profile=_profile_name(profile), backend=backend, splitk=splitk,
                             device_type=v.device.type, device_index=v.device.index,
                             scaling=v.scaling, bias=bias)
    emit(warns, stacklevel=stacklevel + 1)
    return plan.op_args()


def scaled_mm(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
              use_fast_accum=False, *, profile=None, backend=None, splitk="auto"):
    """torch._scaled_mm with torch 2.7.1's arguments, as the profile's platform computes it.

    mat1 [M, K] row-major and mat2 [K, N] column-major FP8 tensors; fp32 scales, tensor-wise
    (one element each) or row-wise (scale_a [M, 1], scale_b [1, N], bf16 output); an optional
    bias [N]; y = (mat1 @ mat2) * scale_a * scale_b + bias with the hardware's rounding. profile (default
    MMAEMU_PROFILE or 'hopper'), backend (default MMAEMU_BACKEND or 'auto') and splitk ('auto',
    1 or (S, scheme)) choose the platform, the kernel and the split-K decision.
    """
    if not _traced():
        return run_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                             use_fast_accum, profile, backend, splitk, stacklevel=2)
    validate_scaled_mm_types(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                             use_fast_accum)
    text, number = splitk_args(splitk)
    return torch.ops.mmaemu.profile_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result,
                                              out_dtype, use_fast_accum, _profile_name(profile),
                                              backend, text, None, number)


def accumulate(x, w, *, use_fast_accum, profile=None, backend=None, splitk="auto"):
    """The fp32 accumulator of x @ w.T before the scales, as the profile's platform computes it.

    Both operands are [rows, K] (w, not w.t()). use_fast_accum has no default on purpose. The
    split decision is the one scaled_mm would take for an fp32 output.
    """
    if not _traced():
        return run_accumulate(x, w, use_fast_accum, profile, backend, splitk, stacklevel=2)
    validate_accumulate_types(x, w, use_fast_accum)
    text, number = splitk_args(splitk)
    return torch.ops.mmaemu.profile_accumulate(x, w, use_fast_accum, _profile_name(profile),
                                               backend, text, None, number)


def mma(a, b, c, preset="hopper"):
    """D[i] = A[i] . B[i] + C[i] as the preset's chain of tensor-core instructions over K.

    a, b: FP8 [n, K] with K a multiple of the preset's block size; c: fp32 [n]. Fast
    accumulation semantics: each block takes the previous result as its C.
    """
    p = get_preset(preset)
    if p.maturity == "experimental":
        emit([("ExperimentalPresetWarning", f"preset {p.name!r} is experimental: {p.evidence}")],
             stacklevel=2)
    validate_mma(a, b, c, p.block)
    flush_denormal_check(a.device.type if isinstance(a, torch.Tensor) else "cpu")
    return torch.ops.mmaemu.mma(a, b, c, preset)


def explain(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
            use_fast_accum=False, *, profile=None, backend=None, splitk="auto"):
    """The CallPlan of the same call to scaled_mm, without computing anything.

    Errors that scaled_mm would raise are reported in the plan (validation, split) instead.
    """
    try:
        v = validate_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                               use_fast_accum)
    except (errors.MmaemuError, TypeError, ValueError) as e:
        return errors_plan(f"{type(e).__name__}: {e}", profile)
    if v.empty:
        from .plan import CallPlan
        from .profiles import get_profile
        from .splitk import SplitDecision
        prof = get_profile(profile)
        pre = get_preset(prof.preset)
        split = SplitDecision(1, "none", "rule", True, None,
                              "M, N or K is 0: torch 2.7.1 returns before calling cuBLASLt")
        return CallPlan("ok", prof.name, pre.name, pre.maturity, split, "none", [], [])
    try:
        return explain_shape(v.M, v.N, v.K, v.fmt_a, v.fmt_b, v.out_dtype,
                             bool(use_fast_accum), profile=profile, backend=backend,
                             splitk=splitk, device=v.device, scaling=v.scaling,
                             bias=None if v.bias_dtype is None else dtype_name(v.bias_dtype))
    except errors.UnsupportedFeatureError as e:
        return errors_plan(f"UnsupportedFeatureError: {e}", profile)


def explain_shape(M, N, K, fmt_a="e4m3", fmt_b="e4m3", out_dtype=torch.bfloat16, fast=False, *,
                  profile=None, backend=None, splitk="auto", device="cpu",
                  scaling="tensorwise", bias=None):
    """explain() from sizes and formats alone (what `python -m mmaemu explain` prints)."""
    from .plan import CallPlan
    from .splitk import SplitDecision
    device = torch.device(device)
    out_name = dtype_name(out_dtype) if isinstance(out_dtype, torch.dtype) else out_dtype
    try:
        plan, _ = build_plan(M, N, K, fmt_a, fmt_b, out_name, fast, profile=profile,
                             backend=backend, splitk=splitk, device_type=device.type,
                             device_index=device.index, scaling=scaling, bias=bias)
        return plan
    except errors.SplitKUnknownError as e:
        from .profiles import get_profile
        prof = get_profile(profile)
        pre = get_preset(prof.preset)
        split = SplitDecision(None, "unknown", "unknown", False, prof.splitk_table, str(e))
        return CallPlan("ok", prof.name, pre.name, pre.maturity, split, None, [],
                        [f"SplitKUnknownError: {e}"])


def errors_plan(message, profile):
    from .plan import CallPlan
    try:
        from .profiles import get_profile
        prof = get_profile(profile)
        return CallPlan(message, prof.name, prof.preset, get_preset(prof.preset).maturity,
                        None, None, [], [])
    except (KeyError, TypeError):
        return CallPlan(message, None, None, None, None, None, [], [])
