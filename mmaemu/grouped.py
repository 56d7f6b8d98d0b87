"""Grouped FP8 GEMMs: torch._scaled_grouped_mm with fp32 row-wise scales, as sm_90 runs it.

Read from pytorch's source (cited; docs/semantics.md 8e has the steps):
- checks, in torch's order, and their messages: aten/src/ATen/native/cuda/GroupedBlas.cpp
  @00d4eaf9 (_scaled_grouped_mm_cuda, _check_scales_fp8_rowwise,
  _f8_f8_bf16_rowwise_grouped_mm_cuda) and aten/src/ATen/native/GroupedMMUtils.h@2295ac79
  (check_valid_strides_and_return_transposed, create_grouped_gemm_output_tensor);
- the groups `offs` makes (cumulative end offsets) and the device asserts on them:
  aten/src/ATen/native/cuda/GroupMMCommon.cuh (prepare_grouped_gemm_data);
- the kernel: aten/src/ATen/native/cuda/ScaledGroupMM.cu@017943b7, CUTLASS's grouped sm_90
  kernel: per group the same accumulator as the non-grouped kernels (one chain over the group's
  K when fast, else promotion every 128 k), then y = bf16(fp32(fp32(acc * sa[m]) * sb[n])).

Four layouts (A x B): 2d3d (A [M_total, K], B [G, K, N]: groups of rows), 3d2d (A [G, M, K],
B [K, N_total]: groups of columns), 2d2d (A [M, K_total], B [K_total, N]: groups of k, output
[G, M, N]) and 3d3d (a batch, no offs). This module checks metadata only; the offsets are data,
checked by `groups()` when the call runs.
"""
from dataclasses import dataclass

import torch

from .errors import ReferenceRejectsError, UnsupportedFeatureError
from .ops import grouped_result
from .validation import _require_devices_and_layouts, _require_no_grad, torch_name

DESCRIPTION = (
    "torch's CUTLASS grouped kernel (aten/src/ATen/native/cuda/ScaledGroupMM.cu@017943b7, "
    "sm_90): per group its output tiles walk k in ascending order, non-fast: promotion every 4 "
    "wgmma of k32 (128 k; CUTLASS v4.2.1 sm90_mma_array_tma_gmma_ss_warpspecialized_fp8.hpp:191,"
    "199), fast: one chain; epilogue bf16(fp32(fp32(acc*sa[m])*sb[n])) (its EVT Multiply(ScaleB,"
    " Multiply(ScaleA, Acc))); no split-K (cited)")
MAX_GROUPS = 1024   # "Can't process more than 1024 groups" (ScaledGroupMM.cu: group_count < 1024)
_FN = "scaled_grouped_mm"


@dataclass(frozen=True)
class ValidatedGrouped:
    """A checked grouped call: its layout, group count, output shape and strides (torch's:
    the last dimension padded to 16 bytes), and the operands' format."""
    layout: str
    groups: int
    out_shape: tuple
    out_strides: tuple
    device: torch.device
    M: int      # the rows of a group's GEMM (2d3d: of all groups)
    N: int      # its columns (3d2d: of all groups)
    K: int      # its k (2d2d: of all groups)


def _type_name(value):
    return "NoneType" if value is None else type(value).__name__


def validate_grouped_types(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None,
                           scale_result=None, out_dtype=None, use_fast_accum=False):
    """The Python types of a grouped call (TypeError), as torch's argument parser checks them."""
    for pos, (name, value, optional) in enumerate(
            (("mat_a", mat_a, False), ("mat_b", mat_b, False), ("scale_a", scale_a, False),
             ("scale_b", scale_b, False), ("offs", offs, True), ("bias", bias, True),
             ("scale_result", scale_result, True)), start=1):
        if not (isinstance(value, torch.Tensor) or (optional and value is None)):
            kind = "Tensor or None" if optional else "Tensor"
            raise TypeError(f"{_FN}(): argument '{name}' (position {pos}) must be {kind}, "
                            f"not {_type_name(value)}")
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"{_FN}(): argument 'out_dtype' (position 8) must be torch.dtype or "
                        f"None, not {_type_name(out_dtype)}")
    if not isinstance(use_fast_accum, bool):
        raise TypeError(f"{_FN}(): argument 'use_fast_accum' (position 9) must be bool, "
                        f"not {_type_name(use_fast_accum)}")


def _transposed(t):
    """check_valid_strides_and_return_transposed: True for a matrix column-major in its last two
    dims, False for row-major; refuses other strides and addresses TMA cannot take. mmaemu
    checks the address on every device (torch skips it for CPU tensors, which it never runs)."""
    if (t.storage_offset() * t.element_size()) % 16:
        raise ReferenceRejectsError("expected data_ptr to be aligned to 16 bytes")
    strides, sizes = list(t.stride()), list(t.shape)
    align = 16 // t.element_size()
    if strides[-2] == 1 and strides[-1] >= max(1, sizes[-2]):
        if strides[-1] % align:
            raise ReferenceRejectsError("strides should be multiple of 16 bytes")
        return True
    if strides[-1] == 1 and strides[-2] >= max(1, sizes[-1]):
        if strides[-2] % align:
            raise ReferenceRejectsError("strides should be multiple of 16 bytes")
        return False
    raise ReferenceRejectsError(f"Invalid strides/sizes, got {strides} for strides and {sizes} "
                                "for sizes")


def _check_rowwise_scale(mat, scale, dim, arg, multiplier):
    """_check_scales_fp8_rowwise: one fp32 per row of A (dim 0) or column of B (dim 1)."""
    if mat.dim() == 2:
        if scale.dim() != 1:
            raise ReferenceRejectsError(f"scale must be a 1D tensor, but got {scale.dim()}D, "
                                        f"arg {arg}")
        if not scale.is_contiguous():
            raise ReferenceRejectsError(f"scale must be contiguous for arg {arg}")
        if scale.shape[0] != mat.shape[dim] * multiplier:
            raise ReferenceRejectsError(f"scale must have the same length as mat for arg {arg}")
    else:
        if scale.dim() != 2:
            raise ReferenceRejectsError(f"scale must be a 2D tensor, but got {scale.dim()}D for "
                                        f"arg {arg}")
        if scale.stride(1) != 1:
            raise ReferenceRejectsError("scale must be contiguous in the last dimension for "
                                        f"arg {arg}")
        if scale.shape[0] != mat.shape[0]:
            raise ReferenceRejectsError("scale must have the same batch dimension as mat for "
                                        f"arg {arg}")
        if scale.shape[1] != mat.shape[1 + dim]:
            raise ReferenceRejectsError("scale must have the same first dimension as mat for "
                                        f"arg {arg}")


def _sizes(t):
    return f"[{', '.join(str(s) for s in t.shape)}]"


def validate_grouped(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None, scale_result=None,
                     out_dtype=None, use_fast_accum=False):
    """Check a grouped call as torch's _scaled_grouped_mm does on sm_90, in its order.

    ReferenceRejectsError with torch's message for what torch rejects, UnsupportedFeatureError
    for MX (float8_e8m0fnu) scales, TypeError for wrong Python types. Returns a
    ValidatedGrouped."""
    validate_grouped_types(mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result, out_dtype,
                           use_fast_accum)
    named = (("mat_a", mat_a), ("mat_b", mat_b), ("scale_a", scale_a), ("scale_b", scale_b))
    _require_devices_and_layouts(_FN, named + (("offs", offs),))
    for name, t in (("mat_a", mat_a), ("mat_b", mat_b)):
        if t.dim() not in (2, 3):     # before the strides are read (torch reads them first)
            raise ReferenceRejectsError(f"{name} has to be 2 or 3d")
    if _transposed(mat_a):
        raise ReferenceRejectsError("Expected mat1 to not be transposed")
    if not _transposed(mat_b):
        raise ReferenceRejectsError("Expected mat2 to be transposed")
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if not (a2 and b2) and mat_a.shape[-1] != mat_b.shape[-2]:
        raise ReferenceRejectsError("contraction dimension of mat_a and mat_b must match")
    if mat_a.shape[-1] % 16:
        raise ReferenceRejectsError("Expected trailing dimension of mat_a to be divisible by 16 "
                                    f"but got mat1 shape: ({_sizes(mat_a)}).")
    if mat_b.shape[-2] % 16 or mat_b.shape[-1] % 16:
        raise ReferenceRejectsError("Expected mat_b shape to be divisible by 16 but got mat_b "
                                    f"shape: ({_sizes(mat_b)}).")
    if bias is not None:
        raise ReferenceRejectsError("Bias not supported yet")
    if scale_result is not None:
        raise ReferenceRejectsError("Scale result not supported yet")
    if (offs is not None) != (a2 or b2):
        raise ReferenceRejectsError("Have to provide offsets if there is a 2d matrix")
    if offs is not None:
        if offs.dim() != 1:
            raise ReferenceRejectsError("offs has to be 1D")
        if offs.dtype != torch.int32:
            raise ReferenceRejectsError("Offsets have to be int32")
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    dtypes = (scale_a.dtype, scale_b.dtype)
    if dtypes != (torch.float32, torch.float32):
        if e8m0 is not None and dtypes == (e8m0, e8m0):
            raise UnsupportedFeatureError(
                f"{_FN}: MXFP8 scales (float8_e8m0fnu) are not supported: torch runs them on "
                "FBGEMM's Blackwell-oriented kernel, which mmaemu does not model; grouped GEMMs "
                "with fp32 row-wise scales are")
        raise ReferenceRejectsError(
            "For FP8 tensorwise and rowwise, both scales must both be float32 tensors. For "
            "MXFP8, scales must both be float8_e8m0fnu tensors.")
    multiplier = offs.shape[0] if (a2 and b2) else 1
    _check_rowwise_scale(mat_a, scale_a, 0, 0, multiplier)
    _check_rowwise_scale(mat_b, scale_b, 1, 1, multiplier)
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    if out_dtype != torch.bfloat16:
        raise ReferenceRejectsError("Only bf16 high precision output types are supported for "
                                    "grouped gemm")
    layout, groups, (M, N, K) = _layout(mat_a, mat_b, offs)
    for name, t in (("mat_a", mat_a), ("mat_b", mat_b)):
        if t.dtype != torch.float8_e4m3fn:   # torch's text names mat_a for both (sic)
            raise ReferenceRejectsError(
                f"Expected mat_a to be Float8_e4m3 matrix got {torch_name(t.dtype)}")
    if groups >= MAX_GROUPS:
        raise ReferenceRejectsError("Can't process more than 1024 groups")
    for name, t in (("mat_a", mat_a), ("mat_b", mat_b), ("scale_a", scale_a),
                    ("scale_b", scale_b), ("offs", offs)):
        if t is not None and t.device != mat_a.device:
            raise ReferenceRejectsError(f"{_FN}: {name} is on {t.device}, mat_a on "
                                        f"{mat_a.device}: all tensors must be on one device")
    _require_no_grad(_FN, named)
    shape, strides = grouped_result(mat_a, mat_b, offs)
    return ValidatedGrouped(layout, groups, shape, strides, mat_a.device, M, N, K)


def _layout(mat_a, mat_b, offs):
    """(layout, groups, (M, N, K) of the whole call), with create_grouped_gemm_output_tensor's
    checks; the output's shape and strides are ops.grouped_result's."""
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if a2 and b2:
        return "2d2d", offs.shape[0], (mat_a.shape[0], mat_b.shape[1], mat_a.shape[1])
    if a2:
        if offs.shape[0] != mat_b.shape[0]:
            raise ReferenceRejectsError("matrix batch sizes have to match")
        return "2d3d", offs.shape[0], (mat_a.shape[0], mat_b.shape[-1], mat_a.shape[1])
    if b2:
        if offs.shape[0] != mat_a.shape[0]:
            raise ReferenceRejectsError("matrix batch sizes have to match")
        return "3d2d", offs.shape[0], (mat_a.shape[1], mat_b.shape[1], mat_a.shape[2])
    if mat_a.shape[0] != mat_b.shape[0]:
        raise ReferenceRejectsError("batched dimension has to match")
    return "3d3d", mat_a.shape[0], (mat_a.shape[1], mat_b.shape[-1], mat_a.shape[2])


@dataclass(frozen=True)
class Group:
    """One group's GEMM: A [m, k], B [k, n] (column-major), its scales [m] and [n], and the
    output view it writes."""
    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor
    scale_b: torch.Tensor
    out: torch.Tensor


def _ends(offs, extent, what):
    """The offsets as ints, checked as the device asserts of torch's grouped kernels check them:
    non-negative group sizes (GroupMMCommon.cuh, prepare_grouped_gemm_data), ends within the
    tensor (the message of torch's cuBLAS grouped-GEMM preparation kernel; GroupMMCommon.cuh
    reads past the end instead). A call that fails them aborts or reads out of bounds on the
    GPU; mmaemu refuses it."""
    ends = [int(e) for e in offs.tolist()]
    start = 0
    for g, end in enumerate(ends):
        if end < start:
            raise ReferenceRejectsError(
                f"offs[{g}] = {end} < offs[{g - 1}] = {start}: the kernel asserts \"expected "
                "gemm dimension to be greater or equal 0\" (a device-side assert on the GPU)")
        if end > extent:
            raise ReferenceRejectsError(
                f"offs[{g}] = {end} exceeds the {extent} {what} of the operands: the kernel "
                "asserts \"expected offset to be less than tensor size\" (a device-side assert "
                "on the GPU)")
        start = end
    return ends


def _aligned(ends, align, which):
    """Every group but the last must keep TMA's 16-byte alignment along the offset dimension."""
    start = 0
    for end in ends[:-1]:
        if (end - start) % align:
            raise ReferenceRejectsError(
                f"a group of {end - start} (offsets {ends}): the kernel asserts \"expected "
                f"{which} tensor dynamic dimension byte size to be non-negative multiple of 16\" "
                "(a device-side assert on the GPU)")
        start = end


def groups(v, mat_a, mat_b, scale_a, scale_b, offs, out):
    """The groups of a validated call, each with the views of its operands and output (empty
    groups left out). Reads the offsets (data)."""
    if v.layout == "3d3d":
        return [Group(mat_a[g], mat_b[g], scale_a[g], scale_b[g], out[g])
                for g in range(v.groups)]
    if v.layout == "2d3d":
        ends = _ends(offs, mat_a.shape[0], "rows")
        spans = zip([0] + ends[:-1], ends)
        return [Group(mat_a[s:e], mat_b[g], scale_a[s:e], scale_b[g], out[s:e])
                for g, (s, e) in enumerate(spans) if e > s]
    if v.layout == "3d2d":
        ends = _ends(offs, mat_b.shape[1], "columns")
        _aligned(ends, 8, "output")     # the bf16 output's columns move with the group
        spans = zip([0] + ends[:-1], ends)
        return [Group(mat_a[g], mat_b[:, s:e], scale_a[g], scale_b[s:e], out[:, s:e])
                for g, (s, e) in enumerate(spans) if e > s]
    ends = _ends(offs, mat_a.shape[1], "k")
    _aligned(ends, 16, "input")         # A's rows and B's columns move along k
    M, N = v.M, v.N
    out_groups = []
    for g, (s, e) in enumerate(zip([0] + ends[:-1], ends)):
        if e == s:
            raise UnsupportedFeatureError(
                f"group {g} of a 2d x 2d grouped GEMM is empty (k = 0; offsets {ends}): torch "
                "versions differ (a device-side assert in some, a k = 0 problem whose output is "
                "not modelled in others)")
        out_groups.append(Group(mat_a[:, s:e], mat_b[s:e], scale_a[g * M:(g + 1) * M],
                                scale_b[g * N:(g + 1) * N], out[g]))
    return out_groups
