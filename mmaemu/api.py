"""The public functions: scaled_mm, accumulate, mma, explain."""
import warnings

import torch

from . import errors
from .ops import splitk_args
from .plan import build_plan, dtype_name, emit, flush_denormal_check
from .profiles import get_preset
from .streamk import scaled_mm_streamk
from .validation import (out_layout, validate_accumulate, validate_accumulate_types,
                         validate_mma, validate_out, validate_scaled_mm, validate_scaled_mm_types)


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
    # the model's accumulator is defined for any layout: the op reads rows with unit stride in K
    x, w = (t if t.stride(1) == 1 else t.contiguous() for t in (x, w))
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
              use_fast_accum=False, *, out=None, profile=None, backend=None, splitk="auto"):
    """torch._scaled_mm with torch 2.7.1's arguments, as the profile's platform computes it.

    mat1 [M, K] row-major and mat2 [K, N] column-major FP8 tensors; fp32 scales, tensor-wise
    (one element each) or row-wise (scale_a [M, 1], scale_b [1, N], bf16 output); an optional
    bias [N]; y = (mat1 @ mat2) * scale_a * scale_b + bias with the hardware's rounding. out: the
    `_scaled_mm.out` variant, as torch 2.7.1 treats it (write_out). profile (default
    MMAEMU_PROFILE or 'hopper'), backend (default MMAEMU_BACKEND or 'auto') and splitk ('auto',
    'infer', 1 or (S, scheme)) choose the platform, the kernel and the split-K decision.
    """
    if out is not None:
        def run(m1, m2, sa, sb, b, sr, dt, fast):
            return scaled_mm(m1, m2, sa, sb, b, sr, dt, fast, profile=profile, backend=backend,
                             splitk=splitk)
        return write_out(out, run, mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                         use_fast_accum)
    if not _traced():
        return run_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                             use_fast_accum, profile, backend, splitk, stacklevel=2)
    validate_scaled_mm_types(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                             use_fast_accum)
    text, number = splitk_args(splitk)
    return torch.ops.mmaemu.profile_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result,
                                              out_dtype, use_fast_accum, _profile_name(profile),
                                              backend, text, None, number)


def write_out(out, run, mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
              use_fast_accum):
    """torch 2.7.1's `_scaled_mm.out`: run(mat1, mat2, scale_a, scale_b, bias, scale_result,
    out_dtype, use_fast_accum) computes the GEMM, the result goes into `out`, which is returned.

    Backed by torch 2.7.1's aten/src/ATen/native/cuda/Blas.cpp (resize_output, then
    cublasCommonArgs / prepare_matrix_for_cublas on the result) and by mmaemu 0.1.0's RTX 4060
    measurements with torch 2.7.1 (cited; 22 recorded out= calls replayed, test/test_hw_mini.py):
    out_dtype None takes out's dtype, another one must equal it; an out of the wrong size is
    resized (torch's UserWarning when it had elements); a column-major out makes cuBLASLt compute
    the transposed GEMM, so the split decision is the swapped shape's (and its formats'); an out
    with no unit stride is computed into a contiguous copy and left unchanged."""
    out_dtype = validate_out(out, out_dtype, mat1)
    if not isinstance(mat1, torch.Tensor) or not isinstance(mat2, torch.Tensor) \
            or mat1.dim() != 2 or mat2.dim() != 2:
        return run(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
    shape = (mat1.shape[0], mat2.shape[1])
    if tuple(out.shape) != shape:
        if out.numel() != 0:
            warnings.warn(f"An output with one or more elements was resized since it had shape "
                          f"{list(out.shape)}, which does not match the required output shape "
                          f"{list(shape)}. This behavior is deprecated, and in a future PyTorch "
                          "release outputs will not be resized unless they have zero elements. "
                          "You can explicitly reuse an out tensor t by resizing it, inplace, to "
                          "zero elements with t.resize_(0).", UserWarning, stacklevel=3)
        out.resize_(shape)
    layout = out_layout(out)
    if layout == "col" and min(shape) > 0 and mat1.shape[1] > 0:
        if bias is not None or scale_a.numel() != 1 or scale_b.numel() != 1:
            raise errors.UnsupportedFeatureError(
                "out= in column-major layout with a bias or row-wise scales: the transposed "
                "call torch 2.7.1 makes then is not modelled; pass a row-major out")
        y = run(mat2.t(), mat1.t(), scale_b, scale_a, None, scale_result, out_dtype,
                use_fast_accum).t()
    else:
        y = run(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
    if layout == "copy":
        warnings.warn("out= has no unit stride: torch 2.7.1 computes into a contiguous copy and "
                      "leaves out unchanged; so does mmaemu", UserWarning, stacklevel=3)
        return out
    return out.copy_(y)


def accumulate(x, w, *, use_fast_accum, profile=None, backend=None, splitk="auto"):
    """The fp32 accumulator of x @ w.T before the scales, as the profile's platform computes it.

    Both operands are [rows, K] (w, not w.t()), any K and strides. use_fast_accum has no
    default on purpose. The split decision is the one scaled_mm would take for an fp32 output.
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
    from .profiles import get_profile
    from .splitk import SplitDecision
    device = torch.device(device)
    out_name = dtype_name(out_dtype) if isinstance(out_dtype, torch.dtype) else out_dtype
    if min(M, N, K) == 0:
        prof = get_profile(profile)
        pre = get_preset(prof.preset)
        split = SplitDecision(1, "none", "rule", True, None,
                              "M, N or K is 0: torch 2.7.1 returns before calling cuBLASLt")
        return CallPlan("ok", prof.name, pre.name, pre.maturity, split, "none", [], [])
    try:
        plan, _ = build_plan(M, N, K, fmt_a, fmt_b, out_name, fast, profile=profile,
                             backend=backend, splitk=splitk, device_type=device.type,
                             device_index=device.index, scaling=scaling, bias=bias,
                             explaining=True)
        return plan
    except errors.SplitKUnknownError as e:
        from .splitk import decide
        prof = get_profile(profile)
        pre = get_preset(prof.preset)
        split = SplitDecision(None, "unknown", "unknown", False, prof.splitk_table, str(e))
        try:   # what splitk="infer" would decide (a missing or broken table: nothing to show)
            would, _ = decide(prof, M, N, K, fmt_a, fmt_b, out_name, fast, "infer")
        except errors.SplitKUnknownError:
            would = None
        return CallPlan("ok", prof.name, pre.name, pre.maturity, split, None, [],
                        [f"SplitKUnknownError: {e}"], inferred=would)


def errors_plan(message, profile):
    from .plan import CallPlan
    try:
        from .profiles import get_profile
        prof = get_profile(profile)
        return CallPlan(message, prof.name, prof.preset, get_preset(prof.preset).maturity,
                        None, None, [], [])
    except (KeyError, TypeError):
        return CallPlan(message, None, None, None, None, None, [], [])


def _script_as_planning_ops():
    """TorchScript cannot compile Python functions with keyword-only arguments: scripted code
    that calls scaled_mm / accumulate calls their planning ops instead (the op behind them
    under torch.compile too), so it is checked and planned when it runs. There `splitk` is
    text, as the op takes it: "auto", "infer", "1" or "S:scheme" (docs/api.md)."""
    try:
        from torch.jit._builtins import _register_builtin
    except ImportError:   # pragma: no cover - a torch without it: scripting such code fails
        return
    _register_builtin(scaled_mm, "mmaemu::profile_scaled_mm")
    _register_builtin(accumulate, "mmaemu::profile_accumulate")


_script_as_planning_ops()
