"""The public functions: scaled_mm, accumulate, mma, explain.

Every call flows one way: validate (validation.py, on metadata only), warm up the facts the plan
reads where they are missing (runtime/warmup.py: measured once, then cached), plan
(planning/plan.py: every decision, once), then run: the plan's kernel op with its executor.
"""
import warnings

import torch

from . import errors
from .blockwise import op_scales
from .ops import _lib, decode_splitk, splitk_args
from .formats import short_name
from .planning.executors import cuda_device, request_of
from .planning.plan import EPILOGUE_ORDERS, build_plan, emit, flush_denormal_check
from .planning.profiles import get_preset, get_profile
from .runtime import warmup
from .grouped import groups, validate_grouped, validate_grouped_types
from .validation import (cublas_layout, validate_accumulate, validate_accumulate_types,
                         validate_mma, validate_out, validate_scaled_mm, validate_scaled_mm_types)


def _traced():
    """True while torch.compile, torch.export or torch.jit.trace records the call: then the
    call becomes one planning op (mmaemu/ops.py) that validates and plans when it runs."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def _profile_name(profile):
    return getattr(profile, "name", profile)


def run_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum,
                  profile, backend, splitk, stacklevel, blockwise=None):
    """Validate, plan from the concrete sizes, run the kernel op: every scaled_mm, in eager mode
    and in the planning op. stacklevel: the warnings' frame, counted from the caller."""
    v = validate_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                           use_fast_accum, blockwise)
    flush_denormal_check(v.device.type)
    if v.empty:  # torch 2.7.1 returns before cuBLASLt: zeros (K == 0) or an empty matrix
        return torch.zeros(v.M, v.N, dtype=v.out_dtype, device=v.device)
    plan = _plan(v, use_fast_accum, profile, backend, splitk, stacklevel + 1,
                 bias=None if v.bias_dtype is None else short_name(v.bias_dtype))
    if v.blockwise is not None:   # the kernel op's block-wise scale layout (blockwise.py)
        scale_a, scale_b = op_scales(scale_a, scale_b, v.blockwise.a_gran, v.M)
    if plan.op == "scaled_mm_tiles":   # row-wise on sm_89: each tile over its k-segments
        return torch.ops.mmaemu.scaled_mm_tiles(mat1, mat2, scale_a, scale_b, bias,
                                                bool(use_fast_accum), plan.preset, *plan.tiles,
                                                plan.backend)
    return torch.ops.mmaemu.scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result,
                                      v.out_dtype, use_fast_accum, plan.preset, plan.split.S,
                                      plan.split.scheme, plan.backend,
                                      EPILOGUE_ORDERS[plan.epilogue])


def run_accumulate(x, w, use_fast_accum, profile, backend, splitk, stacklevel):
    """run_scaled_mm for accumulate (the split decision of an fp32-output scaled_mm)."""
    v = validate_accumulate(x, w, use_fast_accum)
    flush_denormal_check(v.device.type)
    if v.empty:
        return torch.zeros(v.M, v.N, dtype=torch.float32, device=v.device)
    plan = _plan(v, use_fast_accum, profile, backend, splitk, stacklevel + 1, op="accumulate")
    # the model's accumulator is defined for any layout: the op reads rows with unit stride in K
    x, w = (t if t.stride(1) == 1 else t.contiguous() for t in (x, w))
    return torch.ops.mmaemu.accumulate(x, w, use_fast_accum, plan.preset, plan.split.S,
                                       plan.split.scheme, plan.backend)


def _warm_up(device, profile, backend):
    """The facts this call's plan reads, measured here where they are missing (once)."""
    if device.type == "cpu":
        warmup.ensure_cpu()
    elif device.type == "cuda":
        warmup.ensure_cuda(cuda_device(device).index, get_profile(profile).preset,
                           request_of(backend))


def _plan(v, fast, profile, backend, splitk, stacklevel, bias=None, op="scaled_mm"):
    profile = _profile_name(profile)
    _warm_up(v.device, profile, backend)
    plan, warns = build_plan(v.M, v.N, v.K, v.fmt_a, v.fmt_b, short_name(v.out_dtype), fast,
                             profile=profile, backend=backend, splitk=splitk,
                             device_type=v.device.type, device_index=v.device.index,
                             scaling=v.scaling, bias=bias, op=op,
                             blockwise=v.blockwise)
    emit(warns, stacklevel=stacklevel + 1)
    return plan


def scaled_mm(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
              use_fast_accum=False, *, out=None, profile=None, backend=None, splitk="auto",
              blockwise=None):
    """torch._scaled_mm with torch 2.7.1's arguments, as the profile's platform computes it.

    mat1 [M, K] row-major and mat2 [K, N] column-major FP8 tensors; fp32 scales, tensor-wise
    (one element each), row-wise (scale_a [M, 1], scale_b [1, N], bf16 output) or block-wise
    (the DeepSeek recipe in torch's layouts: scale_a [M, ceil(K/128)], scale_b [ceil(K/128),
    ceil(N/128)] or [ceil(K/128), N]; blockwise names the Hopper kernel that computes them:
    'deepgemm', 'cutlass', or None for torch's own path, 'cublaslt', inferred; mmaemu/
    blockwise.py); an optional bias [N]; y = (mat1 @ mat2) * scale_a * scale_b + bias with the
    hardware's rounding. out: the `_scaled_mm.out` variant, as torch 2.7.1 treats it
    (write_out). profile (default MMAEMU_PROFILE or 'hopper'), backend (default MMAEMU_BACKEND
    or 'auto') and splitk ('auto', 'infer', 1 or (S, scheme)) choose the platform, the kernel
    and the split-K decision.
    """
    if out is not None:
        def run(m1, m2, sa, sb, b, sr, dt, fast):
            return scaled_mm(m1, m2, sa, sb, b, sr, dt, fast, profile=profile, backend=backend,
                             splitk=splitk, blockwise=blockwise)
        return write_out(out, run, mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                         use_fast_accum)
    if not _traced():
        return run_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                             use_fast_accum, profile, backend, splitk, stacklevel=2,
                             blockwise=blockwise)
    validate_scaled_mm_types(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                             use_fast_accum)
    text, number = splitk_args(splitk)
    return torch.ops.mmaemu.profile_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result,
                                              out_dtype, use_fast_accum, _profile_name(profile),
                                              backend, text, None, number, blockwise)


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
    layout = cublas_layout(out)   # a column-major out: cuBLASLt computes the swapped GEMM
    if layout == "col" and min(shape) > 0 and mat1.shape[1] > 0:
        if bias is not None or scale_a.numel() != 1 or scale_b.numel() != 1:
            raise errors.UnsupportedFeatureError(
                "out= in column-major layout with a bias, row-wise or block-wise scales: the "
                "transposed "
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


def scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None, scale_result=None,
                      out_dtype=None, use_fast_accum=False, *, profile=None, backend=None):
    """torch._scaled_grouped_mm with fp32 row-wise scales, as an sm_90 GPU computes it (torch's
    CUTLASS grouped kernel; mmaemu/grouped.py).

    mat_a [M_total, K] or [G, M, K] row-major; mat_b [G, K, N] or [K, N_total] column-major in
    its last two dims (w.transpose(-2, -1)); offs: int32 cumulative end offsets of the groups
    (the rows of a 2-D mat_a, the columns of a 2-D mat_b, or the k of both when both are 2-D);
    scale_a one fp32 per row of A, scale_b one per column of B; bf16 output. Rows (columns) of
    the output past offs[-1] are zero (torch leaves them uninitialised). profile and backend as
    for scaled_mm; grouped GEMMs never split K.
    """
    if not _traced():
        return run_scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result,
                                     out_dtype, use_fast_accum, profile, backend, stacklevel=2)
    validate_grouped_types(mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result, out_dtype,
                           use_fast_accum)
    return torch.ops.mmaemu.profile_scaled_grouped_mm(
        mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result, out_dtype, use_fast_accum,
        _profile_name(profile), backend)


def run_scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result, out_dtype,
                          use_fast_accum, profile, backend, stacklevel):
    """Validate, plan once for the call, then each group through the kernel op with the grouped
    kernel's epilogue (rowwise_mul): one GEMM per group, on the plan's executor."""
    v = validate_grouped(mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result, out_dtype,
                         use_fast_accum)
    flush_denormal_check(v.device.type)
    out = torch.empty_strided(v.out_shape, v.out_strides, dtype=torch.bfloat16,
                              device=v.device).zero_()
    if out.numel() == 0 or v.device.type == "meta":
        return out
    profile = _profile_name(profile)
    _warm_up(v.device, profile, backend)
    plan, warns = build_plan(v.M, v.N, v.K, "e4m3", "e4m3", "bf16", use_fast_accum,
                             profile=profile, backend=backend, device_type=v.device.type,
                             device_index=v.device.index, scaling="grouped")
    emit(warns, stacklevel=stacklevel + 1)
    epilogue = EPILOGUE_ORDERS[plan.epilogue]
    for g in groups(v, mat_a, mat_b, scale_a, scale_b, offs, out):
        if g.a.shape[1] == 0:   # k = 0 (3d inputs of width 0): the group's output stays 0
            continue
        g.out.copy_(torch.ops.mmaemu.scaled_mm(g.a, g.b, g.scale_a, g.scale_b, None, None,
                                               torch.bfloat16, use_fast_accum, plan.preset, 1,
                                               "none", plan.backend, epilogue))
    return out


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
            use_fast_accum=False, *, profile=None, backend=None, splitk="auto", blockwise=None):
    """The CallPlan of the same call to scaled_mm, without computing anything.

    Errors that scaled_mm would raise are reported in the plan (validation, split) instead.
    """
    try:
        v = validate_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                               use_fast_accum, blockwise)
    except (errors.MmaemuError, TypeError, ValueError) as e:
        return errors_plan(f"{type(e).__name__}: {e}", profile)
    try:
        return explain_shape(v.M, v.N, v.K, v.fmt_a, v.fmt_b, v.out_dtype,
                             bool(use_fast_accum), profile=profile, backend=backend,
                             splitk=splitk, device=v.device, scaling=v.scaling,
                             bias=None if v.bias_dtype is None else short_name(v.bias_dtype),
                             blockwise=v.blockwise)
    except (errors.MmaemuError, TypeError, ValueError, KeyError) as e:
        return errors_plan(f"{type(e).__name__}: {e}", profile)


def explain_shape(M, N, K, fmt_a="e4m3", fmt_b="e4m3", out_dtype=torch.bfloat16, fast=False, *,
                  profile=None, backend=None, splitk="auto", device="cpu",
                  scaling="tensorwise", bias=None, blockwise=None):
    """explain() from sizes and formats alone (what `python -m mmaemu explain` prints)."""
    from .planning.plan import CallPlan
    from .planning.profiles import get_profile
    from .planning.splitk import SplitDecision
    device = torch.device(device)
    out_name = short_name(out_dtype) if isinstance(out_dtype, torch.dtype) else out_dtype
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
                             explaining=True, blockwise=blockwise)
        return plan
    except errors.SplitKUnknownError as e:
        from .planning.splitk import decide
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
    from .planning.plan import CallPlan
    try:
        from .planning.profiles import get_profile
        prof = get_profile(profile)
        return CallPlan(message, prof.name, prof.preset, get_preset(prof.preset).maturity,
                        None, None, [], [])
    except (KeyError, TypeError):
        return CallPlan(message, None, None, None, None, None, [], [])


# ---------------------------------------------------------------------------------------------
# The planning ops' implementation (CPU, CUDA, Meta): the public call, from concrete tensors.
#
# grad_inputs: which tensor arguments (bit i: the i-th) require grad while grad mode is on, as
# the caller saw them (None: look now). mmaemu refuses those. Compiled code (aot_autograd) runs
# its forward graph with grad mode off, on intermediates that no longer require grad, so the
# planning ops' Autograd kernel, which sees the caller's view while eager code runs and while
# torch.compile traces, pins it in the call it passes on.

def _tensor_names(op):
    return [a.name for a in op._schema.arguments if "Tensor" in str(a.type)]


def _grad_inputs(tensors):
    if not torch.is_grad_enabled():
        return 0
    return sum(1 << i for i, t in enumerate(tensors) if t is not None and t.requires_grad)


def _as_the_caller_saw(tensors, grad_inputs):
    """The tensors as the caller saw them: grad mode and requires_grad as pinned."""
    if grad_inputs is None:
        return tensors, torch.is_grad_enabled()
    seen = [t.detach().requires_grad_() if grad_inputs >> i & 1 and not t.requires_grad else t
            for i, t in enumerate(tensors)]
    return seen, grad_inputs != 0


def profile_scaled_mm(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None,
                      out_dtype=None, use_fast_accum=False, profile=None, backend=None,
                      splitk="auto", grad_inputs=None, splitk_int=0, blockwise=None):
    """mmaemu.scaled_mm as one op (torch 2.7.1 _scaled_mm arguments plus the profile's).
    Its result is always a new tensor, as an op's must be."""
    (mat1, mat2, scale_a, scale_b, bias, scale_result), grad = _as_the_caller_saw(
        (mat1, mat2, scale_a, scale_b, bias, scale_result), grad_inputs)
    with torch.set_grad_enabled(grad):
        return run_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                             use_fast_accum, profile=profile, backend=backend,
                             splitk=decode_splitk(splitk, splitk_int), stacklevel=1,
                             blockwise=blockwise)


def profile_scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None,
                              scale_result=None, out_dtype=None, use_fast_accum=False,
                              profile=None, backend=None, grad_inputs=None):
    """mmaemu.scaled_grouped_mm as one op."""
    (mat_a, mat_b, scale_a, scale_b), grad = _as_the_caller_saw(
        (mat_a, mat_b, scale_a, scale_b), grad_inputs)
    with torch.set_grad_enabled(grad):
        return run_scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result,
                                     out_dtype, use_fast_accum, profile, backend, stacklevel=1)


def profile_accumulate(x, w, use_fast_accum, profile=None, backend=None, splitk="auto",
                       grad_inputs=None, splitk_int=0):
    """mmaemu.accumulate as one op."""
    (x, w), grad = _as_the_caller_saw((x, w), grad_inputs)
    with torch.set_grad_enabled(grad):
        return run_accumulate(x, w, use_fast_accum, profile=profile, backend=backend,
                              splitk=decode_splitk(splitk, splitk_int), stacklevel=1)


def _pinning_grad_inputs(op):
    names, tensor_names = [a.name for a in op._schema.arguments], _tensor_names(op)

    def autograd_kernel(*args, **kwargs):
        bound = dict(zip(names, args), **kwargs)
        if bound.get("grad_inputs") is None:
            bound["grad_inputs"] = _grad_inputs([bound.get(n) for n in tensor_names])
        with torch._C._AutoDispatchBelowAutograd():
            return op(**bound)
    return autograd_kernel


for _name, _impl in (("profile_scaled_mm", profile_scaled_mm),
                     ("profile_accumulate", profile_accumulate),
                     ("profile_scaled_grouped_mm", profile_scaled_grouped_mm)):
    # Meta too: eager calls with meta tensors are validated (and refused) as real ones; the
    # fake kernel serves torch.compile's fake tensors only.
    for _key in ("CPU", "CUDA", "Meta"):
        _lib.impl(_name, _impl, _key)
    _lib.impl(_name, _pinning_grad_inputs(getattr(torch.ops.mmaemu, _name).default), "Autograd")


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
    _register_builtin(scaled_grouped_mm, "mmaemu::profile_scaled_grouped_mm")


_script_as_planning_ops()
