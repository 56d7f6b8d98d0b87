"""Argument checks of mmaemu.scaled_mm, accumulate and mma, before any arithmetic runs.

scaled_mm accepts exactly what torch 2.7.1 `torch._scaled_mm` accepts on the reference GPU, and
refuses the rest with torch's own message, in torch's order. What the checks are backed by:

* Order and structure: `_scaled_mm_out_cuda`, `get_scaling_type` and `cublasCommonArgs` in
  PyTorch's aten/src/ATen/native/cuda/Blas.cpp of the 2.6 era and of the 2.8 era, which bracket
  2.7.1 and agree on everything used here except where noted.
* Text: every torch message fragment used below appears verbatim among the string literals of
  libtorch_cuda.so / libtorch_cpu.so in the torch-2.7.1+cu126 wheel (git e2d141dbde55). That
  settles the 2.7.1 spellings where the 2.6 and 2.8 sources differ ("high precision", not
  "precsion"; "Bias must be either Half or BFloat16"; "Expected mat1 to be Float8 matrix got";
  the "For BlockWise scaling" messages exist in 2.7.1). Literals too short to find that way
  ("x", ").") are those of both bracketing sources. Where a message is mmaemu's own because
  torch's failure happens inside cuBLASLt (or cannot be established), the comment says so.

Three kinds of refusal (user guide section 9):
* ReferenceRejectsError (a RuntimeError): torch 2.7.1 or the reference's cuBLASLt rejects it.
* UnsupportedFeatureError (a NotImplementedError): torch accepts it, mmaemu does not (block-wise
  scales, row-wise scales on a profile without a row-wise kernel model, grad mode). These are checked after all of torch's checks, so a
  call that torch would reject always gets ReferenceRejectsError.
* TypeError / ValueError: an argument of the wrong Python type, or a bad value outside torch's
  domain (as torch's own argument parser raises TypeError before the op runs).

Values are never read here (no device synchronisation, meta and fake tensors work): NaN and Inf
scales are accepted, as torch accepts them, and propagate through the epilogue.
"""
from dataclasses import dataclass

import torch

from . import blockwise as _blockwise
from .errors import ReferenceRejectsError, UnsupportedFeatureError
from .formats import FP8_DTYPES


# c10::isFloat8Type in 2.7.1: the fn/fnuz formats, and (inferred: added with the dtype in 2.7)
# e8m0fnu. The fnuz and e8m0 ones pass torch's "Float8 matrix" check but cuBLASLt on an NVIDIA
# GPU has no type for them.
_TORCH_FLOAT8 = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                              "float8_e5m2fnuz", "float8_e8m0fnu")
                 if hasattr(torch, n)}
_E8M0 = getattr(torch, "float8_e8m0fnu", None)

# Output types cuBLASLt's FP8 GEMM produces (cuBLAS docs, cublasLtMatmul FP8 type table; torch's
# own test_float8_basics expects a RuntimeError for E4M3 x E4M3 -> E5M2 on CUDA).
_HIGH_PRECISION_OUT = (torch.float32, torch.bfloat16, torch.float16)

# How c10 prints a ScalarType (c10::toString), which torch's messages use for dtypes.
_SCALAR_TYPE_NAMES = {
    "float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
    "complex32": "ComplexHalf", "complex64": "ComplexFloat", "complex128": "ComplexDouble",
    "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
    "bool": "Bool", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
    "qint8": "QInt8", "quint8": "QUInt8", "qint32": "QInt32", "quint4x2": "QUInt4x2",
    "quint2x4": "QUInt2x4", "float8_e4m3fn": "Float8_e4m3fn", "float8_e5m2": "Float8_e5m2",
    "float8_e4m3fnuz": "Float8_e4m3fnuz", "float8_e5m2fnuz": "Float8_e5m2fnuz",
    "float8_e8m0fnu": "Float8_e8m0fnu", "float4_e2m1fn_x2": "Float4_e2m1fn_x2",
}

_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class ValidatedCall:
    """What a validated call computes. `empty`: torch 2.7.1 returns before the GEMM (M, N or K is
    0); the result is an [M, N] tensor of out_dtype, all +0 when K == 0 and M, N > 0."""
    M: int
    N: int
    K: int
    fmt_a: object       # "e4m3" or "e5m2" (None only in an empty call with another Float8)
    fmt_b: object
    out_dtype: torch.dtype
    device: torch.device
    empty: bool
    has_scale_result: bool = False
    scaling: str = "tensorwise"   # "tensorwise", "rowwise" or "blockwise"
    bias_dtype: object = None     # torch.bfloat16 / torch.float16, or None
    blockwise: object = None      # for block-wise scales: blockwise.Blockwise


@dataclass(frozen=True)
class ValidatedMma:
    """A validated mmaemu.mma call: n rows of K products each."""
    n: int
    K: int
    fmt_a: str
    fmt_b: str
    device: torch.device


def torch_name(dtype):
    """The name torch's C++ messages give a dtype ("Float", "BFloat16", "Float8_e4m3fn", ...)."""
    return _SCALAR_TYPE_NAMES.get(str(dtype).replace("torch.", ""), str(dtype))


# ---------------------------------------------------------------------------------------------
# Python argument types (torch's argument parser raises these before the op runs)

def _type_name(value):
    return "NoneType" if value is None else type(value).__name__


def _require_tensor(fn, name, pos, value, optional=False):
    if isinstance(value, torch.Tensor) or (optional and value is None):
        return
    kind = "Tensor" if not optional else "Tensor or None"
    raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be {kind}, "
                    f"not {_type_name(value)}")


def _require_bool(fn, name, pos, value):
    if not isinstance(value, bool):
        raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be bool, "
                        f"not {_type_name(value)}")


def _require_devices_and_layouts(fn, named):
    """mmaemu computes on strided CPU and CUDA tensors; meta (and fake) tensors validate too.

    This takes the place of torch's first check ("torch._scaled_mm is only supported on CUDA
    devices with compute capability >= 9.0 or 8.9, or ROCm MI300+"), which is about the GPU that
    runs the call: mmaemu reproduces the reference GPU wherever it runs, so CPU tensors pass."""
    for name, t in named:
        if t is None:
            continue
        if t.device.type not in ("cpu", "cuda", "meta"):
            raise UnsupportedFeatureError(
                f"{fn}: {name} is on {t.device}; mmaemu computes on CPU and CUDA tensors")
        if t.layout != torch.strided or t.is_nested:
            raise UnsupportedFeatureError(
                f"{fn}: {name} has layout {t.layout}; mmaemu takes dense (strided) tensors")


def _require_no_grad(fn, named):
    if not torch.is_grad_enabled():
        return
    for name, t in named:
        if t is not None and t.requires_grad:
            raise UnsupportedFeatureError(
                f"{fn}: {name} requires grad while grad mode is on; mmaemu is inference only "
                "(detach the tensor, or run under torch.inference_mode() or torch.no_grad())")


# ---------------------------------------------------------------------------------------------
# torch's layout decision (cublasCommonArgs / prepare_matrix_for_cublas, Blas.cpp)

def _non_overlapping_and_dense(t):
    """c10's compute_non_overlapping_and_dense for a 2-D tensor: the sizes, sorted by stride and
    ignoring size-1 dims, tile memory with no gaps and no overlap (0/1-element tensors are)."""
    if t.numel() < 2:
        return True
    dims = sorted((d for d in range(2) if t.shape[d] >= 2), key=lambda d: t.stride(d))
    required = 1
    for d in dims:
        if t.stride(d) != required:
            return False
        required *= t.shape[d]
    return True


def cublas_layout(t):
    """How prepare_matrix_for_cublas (aten/src/ATen/native/cuda/Blas.cpp) hands a matrix to
    cuBLAS: "row" (row-major), "col" (column-major), or "copy" (neither: torch clones it into a
    contiguous, row-major copy)."""
    if _non_overlapping_and_dense(t):
        return "row" if t.is_contiguous() else "col"
    (s0, s1), (n0, n1) = t.stride(), t.shape
    if s0 == 1 and s1 >= max(1, n0):
        return "col"
    if s1 == 1 and s0 >= max(1, n1):
        return "row"
    return "copy"


def _cublas_transposes(t):
    """prepare_matrix_for_cublas(t, transpose_tensor, transpose_result=true)'s transpose_tensor:
    True when cuBLAS sees t as row-major (t itself, or the contiguous copy torch makes of a
    strided view that is neither row- nor column-major), False when it sees t column-major."""
    return cublas_layout(t) != "col"


def _layout_ok(mat1, mat2):
    """torch's `args.transa == 't' && args.transb == 'n'` for out = mat1 @ mat2.

    out is a fresh contiguous [M, N] tensor, so transpose_result is true: cuBLAS computes
    out^T = mat2^T mat1^T with A = mat2 and B = mat1, each transpose flag negated. transa is 't'
    iff mat2 is seen column-major; transb is 'n' iff mat1 is seen row-major. Size-1 dims are
    ignored by is_contiguous, so a (1, K) mat1 with unit column stride is row-major whatever
    its stride(0)."""
    return _cublas_transposes(mat1) and not _cublas_transposes(mat2)


# ---------------------------------------------------------------------------------------------
# scaled_mm

_SCALED_MM = "scaled_mm"
_TORCH_FN = "_scaled_mm_out_cuda"   # the __func__ torch's checkAllSameGPU message names


def _scaling_type(scale_a, scale_b, M, K, N):
    """get_scaling_type(scale_a, scale_b, dim_m, dim_k, dim_n) of torch 2.7.1."""
    if _E8M0 is not None and scale_a.dtype == _E8M0 and scale_b.dtype == _E8M0:
        # MX block scaling (2.7 addition). Sizes and text as in the 2.8-era test
        # test_blockwise_mxfp8_nvfp4_error_messages; the literals are in the 2.7.1 binary.
        def ceil_div(a, b):
            return (a + b - 1) // b
        padded_k_blocks = ceil_div(ceil_div(K, 32), 4) * 4
        expected_a = 128 * ceil_div(M, 128) * padded_k_blocks
        expected_b = 128 * ceil_div(N, 128) * padded_k_blocks
        if scale_a.numel() != expected_a:
            raise ReferenceRejectsError(f"For BlockWise scaling: Expected scale_a size to be "
                                        f"{expected_a} but got {scale_a.numel()}")
        if scale_b.numel() != expected_b:
            raise ReferenceRejectsError(f"For BlockWise scaling: Expected scale_b size to be "
                                        f"{expected_b} but got {scale_b.numel()}")
        if not (scale_a.is_contiguous() and scale_b.is_contiguous()):
            raise ReferenceRejectsError(
                "For BlockWise scaling: Both scale_a and scale_b must be contiguous")
        return "mx"
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
        raise ReferenceRejectsError("Both scale_a and scale_b must be float (fp32) tensors.")
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return "tensorwise"          # any shape: (), (1,), (1, 1), ...
    if scale_a.dim() != 2 or scale_b.dim() != 2:
        raise ReferenceRejectsError(
            "For non-TensorWise scaling, scale tensors must be 2-dimensional, but got "
            f"scale_a.dim()={scale_a.dim()} and scale_b.dim()={scale_b.dim()}")
    if tuple(scale_a.shape) == (M, 1) and tuple(scale_b.shape) == (1, N):
        if not (scale_a.is_contiguous() and scale_b.is_contiguous()):
            raise ReferenceRejectsError(
                "Both scale_a and scale_b must be contiguous for RowWise scaling.")
        return "rowwise"
    # the DeepSeek recipe's scales (torch >= 2.8 accepts them; 2.7.1 does not): blockwise.py
    if _blockwise.granularity(scale_a, scale_b, M, K, N) is not None:
        return "blockwise"
    raise ReferenceRejectsError(
        "Invalid scaling configuration. For TensorWise scaling, both scales should be scalar. "
        f"For RowWise scaling, scale_a should be ({M}, 1) and scale_b should be (1, {N}). "
        f"Got scale_a.size()=({scale_a.shape[0]}, {scale_a.shape[1]}) and "
        f"scale_b.size()=({scale_b.shape[0]}, {scale_b.shape[1]})")


def _describe(t):
    return "argument #{} '{}'".format(*t) if t[0] else f"'{t[1]}'"


def _check_same_device(fn, torch_fn, out_device, named, first="mat1"):
    """checkAllSameGPU over out, mat1, mat2, bias, scale_a, scale_b, scale_result.

    out is allocated on mat1's device. On CUDA the text is torch's (TensorUtils.cpp
    checkSameGPU). On the CPU (and meta), where torch would refuse every tensor for not being on
    a GPU, mmaemu names the one tensor that is not with the others instead."""
    out = (0, "out")
    for pos, name, t in named:
        if t is None or t.device == out_device:
            continue
        arg = (pos, name)
        if out_device.type == "cuda":
            if t.device.type == "cpu":
                raise ReferenceRejectsError(
                    f"Tensor for {_describe(arg)} is on CPU, but expected it to be on GPU "
                    f"(while checking arguments for {torch_fn})")
            raise ReferenceRejectsError(
                f"Expected tensor for {_describe(out)} to have the same device as tensor for "
                f"{_describe(arg)}; but device {out_device.index} does not equal "
                f"{t.get_device()} (while checking arguments for {torch_fn})")
        raise ReferenceRejectsError(
            f"Expected tensor for {_describe(arg)} to be on the same device as the result "
            f"({first}'s device, {out_device}), but it is on {t.device} "
            f"(while checking arguments for {fn})")


def _check_cublas_operand_types(name_a, a, name_b, b):
    """Formats torch lets through (c10::isFloat8Type) that cuBLASLt has no type for on an NVIDIA
    GPU: torch 2.7.1 fails converting them to a cudaDataType inside at::cuda::blas::scaled_gemm.
    mmaemu's message (torch's own is an internal assert about the conversion)."""
    for name, t in ((name_a, a), (name_b, b)):
        if t.dtype not in FP8_DTYPES:
            raise ReferenceRejectsError(
                f"{name} is {torch_name(t.dtype)}: cuBLASLt on NVIDIA GPUs multiplies only "
                "Float8_e4m3fn and Float8_e5m2 (torch 2.7.1 fails converting "
                f"{torch_name(t.dtype)} to a cudaDataType in scaled_gemm)")


def _check_alignment(named):
    """cuBLASLt's FP8 kernels need 16-byte aligned operand pointers (cuBLAS docs, FP8
    requirements; pytorch issue #141749: an E4M3 operand starting 1 byte into its allocation
    makes torch 2.5.1 raise CUBLAS_STATUS_NOT_SUPPORTED from cublasLt). Allocations are
    aligned on every device, so the storage offset decides."""
    for name, t in named:
        offset_bytes = t.storage_offset() * t.element_size()
        if offset_bytes % 16:
            raise ReferenceRejectsError(
                f"{name} starts {offset_bytes} bytes into its storage, which is not a multiple "
                "of 16: cuBLASLt's FP8 kernels need 16-byte aligned operands (torch 2.7.1 "
                "raises CUBLAS_STATUS_NOT_SUPPORTED from cublasLt). Pass a copy "
                "(.contiguous() of a transposed weight: .t().contiguous().t()) instead.")


def _check_leading_dimensions(named):
    """The leading dimension cuBLASLt gets (the stride between the rows of a row-major
    operand, the columns of a column-major one) must be a multiple of 16 bytes for the FP8
    kernels (cuBLAS docs, FP8 requirements). Validated on RTX 4060 recordings: a mat1 with
    leading dimension K + 1 is refused by torch 2.7.1 (CUBLAS_STATUS_NOT_SUPPORTED), K + 16
    runs, and so for mat2 (K + 1 refused). Operands with one row or column are not checked:
    torch picks their leading dimension itself."""
    for name, t in named:
        (s0, s1), (n0, n1) = t.stride(), t.shape
        if n0 < 2 or n1 < 2:
            continue                    # one row or column: torch picks the leading dimension
        if s1 == 1 and s0 >= max(1, n1):
            ld = s0                     # row-major as it is
        elif s0 == 1 and s1 >= max(1, n0):
            ld = s1                     # column-major as it is
        else:
            continue                    # torch passes a contiguous copy
        ld_bytes = ld * t.element_size()
        if ld_bytes % 16:
            raise ReferenceRejectsError(
                f"{name} has a leading dimension of {ld_bytes} bytes, not a multiple of 16: "
                "cuBLASLt's FP8 kernels need 16-byte aligned leading dimensions (torch 2.7.1 "
                "raises CUBLAS_STATUS_NOT_SUPPORTED from cublasLtMatmulAlgoGetHeuristic). "
                "Pass a contiguous copy instead.")


def _check_out_dtype_supported(out_dtype, a_dtype, b_dtype):
    """cuBLASLt's FP8 GEMM writes fp32, bf16, fp16 or E4M3, and E5M2 only when an input is E5M2
    (cuBLAS docs, cublasLtMatmul FP8 type table). torch 2.7.1 allocates any out_dtype and the
    failure comes from cuBLASLt (CUBLAS_STATUS_NOT_SUPPORTED): mmaemu's message."""
    if out_dtype in _HIGH_PRECISION_OUT or out_dtype == torch.float8_e4m3fn:
        return
    if out_dtype == torch.float8_e5m2 and torch.float8_e5m2 in (a_dtype, b_dtype):
        return
    raise ReferenceRejectsError(
        f"out_dtype {torch_name(out_dtype)} is not supported for {torch_name(a_dtype)} x "
        f"{torch_name(b_dtype)} inputs: cuBLASLt's FP8 GEMM writes Float, BFloat16, Half or "
        "Float8_e4m3fn, and Float8_e5m2 only when an input is Float8_e5m2 (torch 2.7.1 raises "
        "CUBLAS_STATUS_NOT_SUPPORTED from cublasLt)")


def _check_output_size(M, N, out_dtype):
    """resize_output(out, {M, N}) refuses sizes whose byte count overflows int64 (text of c10's
    storage size check; that it is the first check to fire in resize_output is inferred)."""
    if M * N * out_dtype.itemsize > _INT64_MAX:
        raise ReferenceRejectsError(f"Storage size calculation overflowed with sizes=[{M}, {N}]")


def validate_scaled_mm_types(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None,
                             out_dtype=None, use_fast_accum=False):
    """The Python types of a scaled_mm call (TypeError); the first checks of validate_scaled_mm,
    and the only ones that can run while torch.compile traces (a list is no op argument)."""
    fn = _SCALED_MM
    for pos, (name, value, optional) in enumerate(
            (("mat1", mat1, False), ("mat2", mat2, False), ("scale_a", scale_a, False),
             ("scale_b", scale_b, False), ("bias", bias, True),
             ("scale_result", scale_result, True)), start=1):
        _require_tensor(fn, name, pos, value, optional)
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"{fn}(): argument 'out_dtype' (position 7) must be torch.dtype or None, "
                        f"not {_type_name(out_dtype)}")
    _require_bool(fn, "use_fast_accum", 8, use_fast_accum)


def validate_scaled_mm(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None,
                       out_dtype=None, use_fast_accum=False, blockwise=None):
    """Check a scaled_mm call as torch 2.7.1 `torch._scaled_mm` does, in torch's order.

    Returns a ValidatedCall; raises ReferenceRejectsError with torch's message when torch 2.7.1
    (or the reference's cuBLASLt) would reject the call, UnsupportedFeatureError for valid calls
    mmaemu v0.1 cannot compute, TypeError for arguments of the wrong Python type."""
    fn = _SCALED_MM
    validate_scaled_mm_types(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                             use_fast_accum)
    tensors = (("mat1", mat1), ("mat2", mat2), ("bias", bias), ("scale_a", scale_a),
               ("scale_b", scale_b), ("scale_result", scale_result))
    _require_devices_and_layouts(fn, tensors)

    # torch 2.7.1 _scaled_mm_cuda: out = at::empty({0}, mat1.options().dtype(out_dtype or
    # mat1's dtype)), then _scaled_mm_out_cuda. (Its "out_dtype must match output matrix type"
    # check can only fire for the out= variant, so it is not here.)
    out_dtype = mat1.dtype if out_dtype is None else out_dtype
    if mat1.dim() != 2:
        raise ReferenceRejectsError("mat1 must be a matrix")
    if mat2.dim() != 2:
        raise ReferenceRejectsError("mat2 must be a matrix")
    M, K = mat1.shape
    K2, N = mat2.shape
    if K != K2:
        raise ReferenceRejectsError(
            f"mat1 and mat2 shapes cannot be multiplied ({M}x{K} and {K2}x{N})")
    scaling = _scaling_type(scale_a, scale_b, M, K, N)
    if scaling == "tensorwise" and blockwise not in (None, "cublaslt") \
            and _blockwise.granularity(scale_a, scale_b, M, K, N) is not None:
        # one row, one group and one column block: torch's rule reads the [1, 1] scales as
        # tensor-wise (and so does its own path, cublaslt); DeepGEMM or CUTLASS, named by the
        # call, computes them as its own
        scaling = "blockwise"
    if scale_result is not None and not (scale_result.numel() == 1
                                         and scale_result.dtype == torch.float32):
        raise ReferenceRejectsError("scale_result must be a float scalar")
    if bias is not None and bias.numel() != N:
        raise ReferenceRejectsError(f"Bias must be size {N} but got {bias.numel()}")
    if K % 16:
        raise ReferenceRejectsError("Expected trailing dimension of mat1 to be divisible by 16 "
                                    f"but got mat1 shape: ({M}x{K}).")
    if K2 % 16 or N % 16:
        raise ReferenceRejectsError(f"mat2 shape ({K2}x{N}) must be divisible by 16")
    for name, t in (("mat1", mat1), ("mat2", mat2)):
        if t.dtype not in _TORCH_FLOAT8:
            raise ReferenceRejectsError(
                f"Expected {name} to be Float8 matrix got {torch_name(t.dtype)}")
    # "Type restrictions imposed by CuBLASLt as of CUDA-12.1"
    if mat1.dtype == torch.float8_e5m2 and mat2.dtype == torch.float8_e5m2:
        raise ReferenceRejectsError("Multiplication of two Float8_e5m2 matrices is not supported")
    if bias is not None:
        out_name, bias_name = torch_name(out_dtype), torch_name(bias.dtype)
        if out_dtype == torch.float32:
            raise ReferenceRejectsError("Bias is not supported when out_dtype is set to Float32")
        if bias.dtype not in (torch.bfloat16, torch.float16):
            raise ReferenceRejectsError(
                f"Bias must be either Half or BFloat16, but got {bias_name}")
        if out_dtype in (torch.float32, torch.bfloat16) and bias.dtype != torch.bfloat16:
            raise ReferenceRejectsError(
                f"Bias must be BFloat16 to compute {out_name} output, but got {bias_name}")
        if out_dtype == torch.float16 and bias.dtype != torch.float16:
            raise ReferenceRejectsError(
                f"Bias must be Float16 to compute {out_name} output, but got {bias_name}")
    _check_same_device(fn, _TORCH_FN, mat1.device,
                       ((1, "mat1", mat1), (2, "mat2", mat2), (3, "bias", bias),
                        (4, "scale_a", scale_a), (5, "scale_b", scale_b),
                        (6, "scale_result", scale_result)))
    _check_output_size(M, N, out_dtype)

    # "If any of M, K, N is 0 - return early": no layout or kernel checks for these.
    empty = M == 0 or N == 0 or K == 0
    if not empty and scaling == "rowwise":
        # The CUTLASS row-wise kernel's checks (2.7.1 text: RowwiseScaledMM.cu check_inputs).
        if out_dtype != torch.bfloat16:
            raise ReferenceRejectsError(
                "Only bf16 high precision output types are supported for row-wise scaling.")
        improve = ("  (Could this error message be improved?  If so, please report an "
                   "enhancement request to PyTorch.)")
        if mat1.dtype not in FP8_DTYPES:
            raise ReferenceRejectsError("Expected a.dtype() == at::kFloat8_e4m3fn || a.dtype() "
                                        "== at::kFloat8_e5m2 to be true, but got false." + improve)
        if mat2.dtype != torch.float8_e4m3fn:
            raise ReferenceRejectsError(
                "Expected b.dtype() == at::kFloat8_e4m3fn to be true, but got false." + improve)
        # check_inputs of RowwiseScaledMM.cu (2.7.1): plain TORCH_CHECKs, in its order. The
        # scale shapes and dtypes were settled by get_scaling_type above; scale strides can
        # still differ where a size is 1 (is_contiguous ignores those).
        for cond, ok in (("a.stride(1) == 1", mat1.stride(1) == 1),
                         ("a.stride(0) >= a.size(1)", mat1.stride(0) >= K),
                         ("b.stride(0) == 1", mat2.stride(0) == 1),
                         ("b.stride(1) >= b.size(0)", mat2.stride(1) >= K2),
                         ("scale_a.stride(0) == 1", scale_a.stride(0) == 1),
                         ("scale_b.stride(1) == 1", scale_b.stride(1) == 1)):
            if not ok:
                raise ReferenceRejectsError(f"Expected {cond} to be true, but got false." + improve)
        if bias is not None:
            if bias.dim() != 1:
                raise ReferenceRejectsError(
                    "Expected bias->dim() == 1 to be true, but got false." + improve)
            if bias.stride(0) != 1:
                raise ReferenceRejectsError(
                    "Expected bias->stride(0) == 1 to be true, but got false." + improve)
    elif not empty:
        # Tensor-wise (and block-wise) scaling: cuBLASLt through cublasCommonArgs.
        if not _layout_ok(mat1, mat2):
            raise ReferenceRejectsError("Only multiplication of row-major and column-major "
                                        "matrices is supported by cuBLASLt")
        _check_cublas_operand_types("mat1", mat1, "mat2", mat2)
        _check_out_dtype_supported(out_dtype, mat1.dtype, mat2.dtype)
        _check_alignment((("mat1", mat1), ("mat2", mat2)))
        _check_leading_dimensions((("mat1", mat1), ("mat2", mat2)))

    # torch 2.7.1 would run everything below: mmaemu does not.
    if bias is not None and scaling != "rowwise" and not empty and not bias.is_contiguous():
        # torch hands cuBLASLt bias.data_ptr(), which reads N consecutive elements (inferred
        # from Blas.cpp; not checked on a GPU): not the strided tensor's values.
        raise UnsupportedFeatureError(
            "a non-contiguous bias with tensor-wise scales: cuBLASLt would read N consecutive "
            "elements from its data pointer; pass bias.contiguous()")
    if scaling == "mx":
        # On a Hopper GPU torch 2.7.1 most likely fails too (MX block scaling is a Blackwell
        # cuBLASLt feature; inferred), but that is not established.
        raise UnsupportedFeatureError(
            "MX block scales (Float8_e8m0fnu) are not supported: MX scaling is a Blackwell "
            "cuBLASLt feature, not modelled")
    recipe = None
    if scaling == "blockwise":
        recipe = _blockwise.validate(_blockwise.kernel_of(blockwise), mat1, mat2, scale_a, scale_b,
                                     bias, scale_result, out_dtype, use_fast_accum,
                                     _blockwise.granularity(scale_a, scale_b, M, K, N))
    elif _blockwise.kernel_of(blockwise) != "cublaslt":   # torch's path takes any scales
        raise ValueError(f"blockwise={blockwise!r} names a block-wise kernel, but the scales are "
                         f"{scaling}")
    _require_no_grad(fn, tensors)
    return ValidatedCall(M=M, N=N, K=K, fmt_a=FP8_DTYPES.get(mat1.dtype),
                         fmt_b=FP8_DTYPES.get(mat2.dtype), out_dtype=out_dtype,
                         device=mat1.device, empty=empty, has_scale_result=scale_result is not None,
                         scaling=scaling, bias_dtype=None if bias is None else bias.dtype,
                         blockwise=recipe)


# ---------------------------------------------------------------------------------------------
# accumulate

def validate_accumulate_types(x, w, use_fast_accum):
    """The Python types of an accumulate call (TypeError), as validate_scaled_mm_types."""
    fn = "accumulate"
    _require_tensor(fn, "x", 1, x)
    _require_tensor(fn, "w", 2, w)
    _require_bool(fn, "use_fast_accum", 3, use_fast_accum)


def validate_accumulate(x, w, use_fast_accum):
    """Check mmaemu.accumulate(x, w, use_fast_accum): the fp32 accumulator of x @ w.T.

    x [M, K] and w [N, K] (w as stored, not w.t()), FP8, any K and any strides: the model's
    accumulator is defined for every K and layout, so torch's divisibility, layout and alignment
    rules for a cuBLASLt call do not apply (api.run_accumulate copies operands whose K is not
    their unit-stride dimension). The format pair is still one the hardware multiplies (not
    E5M2 x E5M2). No scales, bias or output type."""
    fn = "accumulate"
    validate_accumulate_types(x, w, use_fast_accum)
    _require_devices_and_layouts(fn, (("x", x), ("w", w)))
    if x.dim() != 2:
        raise ReferenceRejectsError("x must be a matrix")
    if w.dim() != 2:
        raise ReferenceRejectsError("w must be a matrix")
    (M, K), (N, Kw) = x.shape, w.shape
    if K != Kw:
        raise ReferenceRejectsError(
            f"x and w shapes cannot be multiplied as x @ w.T ({M}x{K} and {N}x{Kw})")
    if x.dtype not in _TORCH_FLOAT8:
        raise ReferenceRejectsError(f"Expected x to be Float8 matrix got {torch_name(x.dtype)}")
    if w.dtype not in _TORCH_FLOAT8:
        raise ReferenceRejectsError(f"Expected w to be Float8 matrix got {torch_name(w.dtype)}")
    if x.dtype == torch.float8_e5m2 and w.dtype == torch.float8_e5m2:
        raise ReferenceRejectsError("Multiplication of two Float8_e5m2 matrices is not supported")
    _check_same_device(fn, fn, x.device, ((2, "w", w),), first="x")
    _check_output_size(M, N, torch.float32)
    empty = M == 0 or N == 0 or K == 0
    if not empty:
        _check_cublas_operand_types("x", x, "w", w)
    _require_no_grad(fn, (("x", x), ("w", w)))
    return ValidatedCall(M=M, N=N, K=K, fmt_a=FP8_DTYPES.get(x.dtype),
                         fmt_b=FP8_DTYPES.get(w.dtype), out_dtype=torch.float32,
                         device=x.device, empty=empty)


# ---------------------------------------------------------------------------------------------
# out=

def validate_out(out, out_dtype, mat1):
    """torch 2.7.1 `_scaled_mm.out`'s own checks of `out`; returns the output dtype (out_dtype,
    else out's dtype). "out_dtype must match output matrix type" is torch's message."""
    _require_tensor(_SCALED_MM, "out", 9, out)
    if out_dtype is not None and out_dtype != out.dtype:
        raise ReferenceRejectsError("out_dtype must match output matrix type")
    if isinstance(mat1, torch.Tensor) and out.device != mat1.device:
        raise ReferenceRejectsError(f"Expected all tensors to be on the same device, but found "
                                    f"at least two devices, {mat1.device} and {out.device}!")
    return out.dtype


# ---------------------------------------------------------------------------------------------
# mma

def validate_mma(a, b, c, block):
    """Check mmaemu.mma(a, b, c, preset) with the preset's block size `block`.

    a, b: [n, K] E4M3/E5M2 matrices of the same shape (any strides; every format pair, as the
    instruction level has them), c: float32 [n], K a multiple of block. Not a torch op, so bad
    values raise ValueError."""
    fn = "mma"
    _require_tensor(fn, "a", 1, a)
    _require_tensor(fn, "b", 2, b)
    _require_tensor(fn, "c", 3, c)
    if not isinstance(block, int) or isinstance(block, bool):
        raise TypeError(f"{fn}(): block must be int, not {_type_name(block)}")
    if block < 1:
        raise ValueError(f"{fn}(): block must be at least 1, got {block}")
    named = (("a", a), ("b", b), ("c", c))
    _require_devices_and_layouts(fn, named)
    for name, t in named:
        if t.device.type == "cuda":
            raise UnsupportedFeatureError(
                f"mmaemu.mma runs on CPU tensors in v0.1; {name} is on {t.device}")
        if t.device != a.device:
            raise ValueError(f"mmaemu.mma: a, b and c must be on one device, but a is on "
                             f"{a.device} and {name} on {t.device}")
    if a.dim() != 2 or b.dim() != 2 or a.shape != b.shape:
        raise ValueError("mmaemu.mma: a and b must be [n, K] matrices of the same shape, got "
                         f"a {tuple(a.shape)} and b {tuple(b.shape)}")
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in FP8_DTYPES:
            raise ValueError(f"mmaemu.mma: {name} must be float8_e4m3fn or float8_e5m2, got "
                             f"{t.dtype}")
    n, K = a.shape
    if c.dim() != 1 or c.shape[0] != n or c.dtype != torch.float32:
        raise ValueError(f"mmaemu.mma: c must be a float32 vector of length {n}, got "
                         f"{c.dtype} {tuple(c.shape)}")
    if K % block:
        raise ValueError(f"mmaemu.mma: K = {K} is not a multiple of the preset's block size "
                         f"{block}")
    _require_no_grad(fn, named)
    return ValidatedMma(n=n, K=K, fmt_a=FP8_DTYPES[a.dtype], fmt_b=FP8_DTYPES[b.dtype],
                        device=a.device)
