"""The public functions: scaled_mm, accumulate, mma, explain."""
import torch

from . import errors
from .plan import _decide, build_plan, dtype_name, emit, flush_denormal_check
from .profiles import get_preset
from .streamk import scaled_mm_streamk
from .validation import validate_accumulate, validate_mma, validate_scaled_mm


def _plan_args(kind, M, N, K, fmt_a, fmt_b, out_dtype, fast, profile, backend, splitk, device,
               scaling="tensorwise", bias=None):
    if isinstance(profile, torch.nn.Module):  # pragma: no cover - defensive
        raise TypeError("profile must be a str")
    profile_name = getattr(profile, "name", profile)
    if isinstance(splitk, str) or scaling == "rowwise":
        # The table, the envelope, the live query and the row-wise kernel rule depend on the
        # exact shape: under torch.compile with dynamic shapes this specialises the graph.
        M, N, K = int(M), int(N), int(K)
    else:
        # An explicit split does not depend on the shape: keep dynamic shapes dynamic.
        M = N = K = -1
    return _decide(kind, M, N, K, fmt_a, fmt_b, dtype_name(out_dtype), fast, profile_name,
                   backend, splitk, device.type, device.index, scaling,
                   None if bias is None else dtype_name(bias))


def scaled_mm(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
              use_fast_accum=False, *, profile=None, backend=None, splitk="auto"):
    """torch._scaled_mm with torch 2.7.1's arguments, as the profile's platform computes it.

    mat1 [M, K] row-major and mat2 [K, N] column-major FP8 tensors; fp32 scales, tensor-wise
    (one element each) or row-wise (scale_a [M, 1], scale_b [1, N], bf16 output); an optional
    bias [N]; y = (mat1 @ mat2) * scale_a * scale_b + bias with the hardware's rounding. profile (default
    MMAEMU_PROFILE or 'hopper'), backend (default MMAEMU_BACKEND or 'auto') and splitk ('auto',
    1 or (S, scheme)) choose the platform, the kernel and the split-K decision.
    """
    if not torch.compiler.is_compiling():
        v = validate_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                               use_fast_accum)
        flush_denormal_check(v.device.type)
        out_dtype = v.out_dtype
        if v.empty:  # torch 2.7.1 returns before cuBLASLt: zeros (K == 0) or an empty matrix
            return torch.zeros(v.M, v.N, dtype=out_dtype, device=v.device)
        scaling = v.scaling
    else:
        if out_dtype is None:
            out_dtype = mat1.dtype
        scaling = "tensorwise" if int(scale_a.numel()) == 1 and int(scale_b.numel()) == 1 \
            else "rowwise"
    fmt_a, fmt_b = dtype_name(mat1.dtype), dtype_name(mat2.dtype)
    preset, splits, scheme, name, epilogue = _plan_args(
        "scaled_mm", mat1.shape[0], mat2.shape[1], mat1.shape[1], fmt_a, fmt_b, out_dtype,
        bool(use_fast_accum), profile, backend, splitk, mat1.device, scaling,
        None if bias is None else bias.dtype)
    if scheme == "streamk":  # row-wise on sm_89: per-tile k-segments
        return scaled_mm_streamk(mat1, mat2, scale_a, scale_b, bias, bool(use_fast_accum),
                                 preset, getattr(profile, "name", profile), name)
    return torch.ops.mmaemu.scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result,
                                      out_dtype, bool(use_fast_accum), preset, splits, scheme,
                                      name, epilogue)


def accumulate(x, w, *, use_fast_accum, profile=None, backend=None, splitk="auto"):
    """The fp32 accumulator of x @ w.T before the scales, as the profile's platform computes it.

    Both operands are [rows, K] (w, not w.t()). use_fast_accum has no default on purpose. The
    split decision is the one scaled_mm would take for an fp32 output.
    """
    if not torch.compiler.is_compiling():
        v = validate_accumulate(x, w, use_fast_accum)
        flush_denormal_check(v.device.type)
        if v.empty:
            return torch.zeros(v.M, v.N, dtype=torch.float32, device=v.device)
    fmt_a, fmt_b = dtype_name(x.dtype), dtype_name(w.dtype)
    preset, splits, scheme, name, _ = _plan_args(
        "accumulate", x.shape[0], w.shape[0], x.shape[1], fmt_a, fmt_b, torch.float32,
        bool(use_fast_accum), profile, backend, splitk, x.device)
    return torch.ops.mmaemu.accumulate(x, w, bool(use_fast_accum), preset, splits, scheme, name)


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
