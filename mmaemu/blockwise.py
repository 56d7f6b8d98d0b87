"""Block-wise scales (the DeepSeek recipe): their shapes, the kernels that compute them, and
each kernel's own refusals.

scale_a gives one fp32 per row of A and 128-k group (1 x 128) or per 128 rows and group
(128 x 128); scale_b, in torch's layout for mat2 = w.t(), one per group and column (1 x 128:
[ceil(K/128), N]) or per group and 128 columns (128 x 128: [ceil(K/128), ceil(N/128)], the
transpose of the weight's [ceil(N/128), ceil(K/128)] `weight_scale_inv`). Three Hopper kernels
compute them, each named by `blockwise=`; docs/semantics.md 8d gives their arithmetic and what
backs each step:

  deepgemm   DeepGEMM's sm90_fp8_gemm_1d2d (1 x 128 A, 128 x 128 B; E4M3; bf16 out)
  cutlass    CUTLASS 3.x's sm90 block-wise mainloop as vLLM builds it (tile 128 x 128 x 128,
             persistent scheduler): the scales' product first where a side has one scale per
             tile, else the per-element form
  cublaslt   torch's own block-wise path (cuBLASLt's VEC128 / BLK128x128 scales): closed
             source, modelled as DeepGEMM's arithmetic; inferred and experimental
"""
from dataclasses import dataclass

import torch

from .errors import ReferenceRejectsError, UnsupportedFeatureError

KERNELS = ("cublaslt", "deepgemm", "cutlass")
GROUP_K = 128   # the k of a scale group (and the rows or columns of a 128 x 128 block)

# What each kernel computes and what backs it (docs/semantics.md 8d has the steps and sources).
DESCRIPTIONS = {
    "deepgemm": (
        "DeepGEMM sm90_fp8_gemm_1d2d (deepseek-ai/DeepGEMM@54e2261, impls/sm90_fp8_gemm_1d2d.cuh"
        ":283-346): per 128-k group a chain of four k32 wgmma from +0, then acc = fmaf(fp32(sa*sb)"
        ", chain, acc) in ascending k (one FFMA: SASS of the kernel built with its JIT flags), "
        "bf16 round to nearest; no split-K (cited)"),
    "cutlass": (
        "CUTLASS 3.x sm90 block-wise mainloop as vLLM builds it (tile 128x128x128, persistent "
        "scheduler; cutlass v4.2.1 fp8_accumulation.hpp:82-124, sm90_mma_..._fp8_blockwise_"
        "scaling.hpp:881-912): promotion every 128 k, acc = fmaf(fp32(sa*sb), chain, acc) where "
        "a side has one scale per tile (SASS of vLLM's kernel), else fmaf(fp32(chain*sa), sb, "
        "acc) (SASS of CUTLASS's scale loop alone; inferred for a whole kernel); no split-K "
        "(cited; SGLang's stream-K when k > 3n is not modelled)"),
    "cublaslt": (
        "torch's block-wise path (cuBLASLt VEC128 / BLK128x128 scales, closed source): modelled "
        "as DeepGEMM's 1d2d arithmetic (per 128-k group a chain from +0, fmaf(fp32(sa*sb), chain, "
        "acc), no split-K); inferred and experimental, never compared with hardware "
        "(probe blockwise_cublaslt in mmaemu_tools/probe_hopper.py settles it)"),
}


def _cdiv(a, b):
    return -(-a // b)


@dataclass(frozen=True)
class Blockwise:
    """A validated block-wise call: the kernel, rows (or columns) per scale on each side, and
    the update form ("blockwise": the scales' product first; "blockwise_pe": per element)."""
    kernel: str
    a_gran: int
    b_gran: int
    epilogue: str


def granularity(scale_a, scale_b, M, K, N):
    """(a_gran, b_gran) when the fp32 scales have a block-wise recipe's shapes, else None."""
    if scale_a.dim() != 2 or scale_b.dim() != 2 or K == 0:
        return None
    groups = _cdiv(K, GROUP_K)
    # one row (or column) fits both shapes: it is read as 1 x 128, the per-token recipe (the
    # arithmetic is the same; CUTLASS's form then follows the kernel built for 1 x 128)
    a = {(_cdiv(M, GROUP_K), groups): GROUP_K, (M, groups): 1}.get(tuple(scale_a.shape))
    b = {(groups, _cdiv(N, GROUP_K)): GROUP_K, (groups, N): 1}.get(tuple(scale_b.shape))
    if a is None or b is None:
        return None
    return a, b


def kernel_of(blockwise):
    """The kernel a `blockwise=` argument names (None: torch's own path, cuBLASLt)."""
    if blockwise is None:
        return "cublaslt"
    if not isinstance(blockwise, str):
        raise TypeError(f"blockwise must be a str or None, got {type(blockwise).__name__}")
    if blockwise not in KERNELS:
        raise ValueError(f"blockwise={blockwise!r}: the block-wise kernels are "
                         f"{', '.join(KERNELS)}")
    return blockwise


def _strides_ok(t, want):
    """t's strides are `want` wherever its size exceeds 1 (torch's check_size_stride)."""
    return all(size <= 1 or stride == w for size, stride, w in zip(t.shape, t.stride(), want))


def validate(kernel, mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum,
             grans):
    """The refusals of the kernel named for a block-wise call (after torch's common checks).
    Returns a Blockwise."""
    a_gran, b_gran = grans
    M, K = mat1.shape
    N = mat2.shape[1]
    groups = _cdiv(K, GROUP_K)
    if a_gran == GROUP_K and b_gran == GROUP_K:
        raise ReferenceRejectsError(
            "block-wise scales of 128 x 128 on both operands: cuBLASLt has no such pair "
            "(BLK128x128 with BLK128x128), and neither DeepGEMM nor vLLM's CUTLASS kernel takes it")
    if kernel == "cublaslt":
        if use_fast_accum:   # torch's CUDABlas.cpp get_scale_mode
            which = "1x128" if a_gran == 1 else "128x128"
            raise ReferenceRejectsError(
                f"scaled_gemm doesn't support fast accum with {which} blockwise scaling")
        # torch's layouts (Blas.cpp is_blockwise_*_scaling): 1 x 128 outer-dim-major, 128 x 128
        # near-inner-dim-major, each seen on (mat1, scale_a) and (mat2.t(), scale_b.t())
        a_ok = _strides_ok(scale_a, (1, M) if a_gran == 1 else (groups, 1))
        b_ok = _strides_ok(scale_b.t(), (1, N) if b_gran == 1 else (groups, 1))
        if not (a_ok and b_ok):
            raise ReferenceRejectsError(
                "Invalid scaling configuration. For BlockWise 1x128 scaling, scale_a should be "
                f"({M}, {groups}) and scale_b should be ({groups}, {N}), both outer-dim-major; "
                f"for BlockWise 128x128 scaling, scale_a should be ({_cdiv(M, GROUP_K)}, {groups}) "
                f"and scale_b ({groups}, {_cdiv(N, GROUP_K)}), both near-inner-dim-major. Got "
                f"scale_a.stride()={tuple(scale_a.stride())} and "
                f"scale_b.stride()={tuple(scale_b.stride())}")
        outs = (torch.bfloat16, torch.float16, torch.float32)
    else:
        if use_fast_accum:
            raise ValueError(f"use_fast_accum=True with blockwise={kernel!r}: the kernel has no "
                             "fast-accumulation mode (it joins every 128-k group's chain to an "
                             "fp32 accumulator); pass use_fast_accum=False")
        if mat1.dtype != torch.float8_e4m3fn or mat2.dtype != torch.float8_e4m3fn:
            raise ReferenceRejectsError(f"blockwise={kernel!r}: the kernel multiplies E4M3 "
                                        "operands only")
        if kernel == "deepgemm" and (a_gran, b_gran) != (1, GROUP_K):
            raise UnsupportedFeatureError(
                "blockwise='deepgemm' with these scales: sm90_fp8_gemm_1d2d takes 1 x 128 scales "
                "for A and 128 x 128 for B; DeepGEMM's 1d1d kernel (1 x 128 on both, an fp32 "
                "output accumulated into D) is not modelled")
        outs = (torch.bfloat16,) if kernel == "deepgemm" else (torch.bfloat16, torch.float16)
    if out_dtype not in outs:
        raise ReferenceRejectsError(
            f"blockwise={kernel!r} writes {', '.join(str(d).replace('torch.', '') for d in outs)}, "
            f"not {str(out_dtype).replace('torch.', '')}")
    if bias is not None or scale_result is not None:
        raise UnsupportedFeatureError("a bias or scale_result with block-wise scales: the "
                                      "kernels' epilogue with them is not modelled")
    # CUTLASS picks the form from its tile (128 x 128): the scales multiplied first when a side
    # has one scale per tile, else per element (docs/semantics.md 8d)
    per_element = kernel == "cutlass" and a_gran == 1 and b_gran == 1
    return Blockwise(kernel, a_gran, b_gran, "blockwise_pe" if per_element else "blockwise")


def op_scales(scale_a, scale_b, a_gran, M):
    """The kernel op's block-wise scales: scale_a one row per row of A ([M, groups]), scale_b one
    row per scale of B's columns ([ceil(N/128) or N, groups], a view of torch's layout)."""
    if a_gran != 1:
        scale_a = scale_a.repeat_interleave(a_gran, dim=0)[:M]
    return scale_a, scale_b.t()
