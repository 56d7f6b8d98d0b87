"""torch's FP8 GEMM entry points, and how emulate() turns each call into mmaemu.scaled_mm's.

The installed torch may have, besides torch 2.7.1's `torch._scaled_mm(input, mat2, scale_a,
scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False, *, out=None)`:
- `torch._scaled_mm_v2` (torch >= 2.10; `torch.nn.functional.scaled_mm` calls it): scales as
  lists with a recipe per scale (torch.nn.functional.ScalingType), swizzles, no scale_result,
  and an output that defaults to bfloat16;
- `torch._scaled_grouped_mm` and `torch._scaled_grouped_mm_v2` (grouped GEMMs for MoE layers).

Each is bound to its arguments here, as torch binds them. A v2 call with tensor-wise or row-wise
recipes becomes the torch 2.7.1 call with the same operands, scales, bias and fast-accumulation
flag: mmaemu's profiles are torch 2.7.1 on the reference GPU, so that is what a profile computes
for it. A v2 call with block-wise recipes (BlockWise1x128 / BlockWise128x128) becomes the v1 call
with the scales in v1's layouts (torch's ScaledBlas.cpp, spec in docs/semantics.md 8d); a grouped
call becomes mmaemu.scaled_grouped_mm's (v2: with RowWise recipes). What mmaemu does not model
(two-level scales, swizzled scales, MX recipes, other contraction dims) raises
UnsupportedFeatureError; what torch itself rejects (a recipe that does not match the scales)
raises ReferenceRejectsError.
"""
from dataclasses import dataclass
from typing import Optional

import torch

from ..errors import ReferenceRejectsError, UnsupportedFeatureError

# torch.nn.functional.ScalingType / SwizzleType values (torch >= 2.10), as the aten op takes them.
TENSORWISE, ROWWISE, BLOCK_1X128, BLOCK_128X128 = 0, 1, 4, 5
_RECIPE_NAMES = {0: "TensorWise", 1: "RowWise", 2: "BlockWise1x16", 3: "BlockWise1x32",
                 4: "BlockWise1x128", 5: "BlockWise128x128"}
NO_SWIZZLE = 0


@dataclass
class Signature:
    """The argument names of one entry point, in order, with their defaults."""
    name: str
    names: tuple
    defaults: dict
    first_aliases: tuple = ("input", "self")


V1 = Signature("_scaled_mm", ("mat1", "mat2", "scale_a", "scale_b", "bias", "scale_result",
                              "out_dtype", "use_fast_accum"),
               {"bias": None, "scale_result": None, "out_dtype": None, "use_fast_accum": False})
GROUPED = Signature("_scaled_grouped_mm", ("mat_a", "mat_b", "scale_a", "scale_b", "offs",
                                          "bias", "scale_result", "out_dtype", "use_fast_accum"),
                    {"offs": None, "bias": None, "scale_result": None, "out_dtype": None,
                     "use_fast_accum": False})
GROUPED_V2 = Signature("_scaled_grouped_mm_v2", ("mat_a", "mat_b", "scale_a", "recipe_a",
                                                 "swizzle_a", "scale_b", "recipe_b", "swizzle_b",
                                                 "offs", "bias", "out_dtype", "contraction_dim",
                                                 "use_fast_accum"),
                       {"offs": None, "bias": None, "out_dtype": None, "contraction_dim": (),
                        "use_fast_accum": False})
V2 = Signature("_scaled_mm_v2", ("mat1", "mat2", "scale_a", "recipe_a", "swizzle_a", "scale_b",
                                 "recipe_b", "swizzle_b", "bias", "out_dtype", "contraction_dim",
                                 "use_fast_accum"),
               {"contraction_dim": (), "use_fast_accum": False})


def bind(sig, args, kwargs):
    """The call's arguments by name (the first one is `mat1`, whatever torch calls it) and its
    `out=` tensor, or the TypeError Python would raise for a wrong call."""
    if len(args) > len(sig.names):
        raise TypeError(f"{sig.name}() takes at most {len(sig.names)} positional arguments "
                        f"({len(args)} given)")
    bound = dict(zip(sig.names, args))
    out = None
    for key, value in kwargs.items():
        name = sig.names[0] if key in sig.first_aliases else key
        if name == "out":
            out = value
            continue
        if name not in sig.names:
            raise TypeError(f"{sig.name}() got an unexpected keyword argument '{key}'")
        if name in bound:
            raise TypeError(f"{sig.name}() got multiple values for argument '{key}'")
        bound[name] = value
    for name in sig.names:
        if name not in bound:
            if name not in sig.defaults:
                raise TypeError(f"{sig.name}() missing required argument '{name}'")
            bound[name] = sig.defaults[name]
    return bound, out


@dataclass
class Call:
    """One FP8 GEMM in torch 2.7.1's terms: what emulate() hands to mmaemu.scaled_mm."""
    mat1: torch.Tensor
    mat2: torch.Tensor
    scale_a: torch.Tensor
    scale_b: torch.Tensor
    bias: Optional[torch.Tensor]
    scale_result: Optional[torch.Tensor]
    out_dtype: Optional[torch.dtype]
    use_fast_accum: bool
    out: Optional[torch.Tensor]


def v1_call(args, kwargs):
    a, out = bind(V1, args, kwargs)
    return Call(a["mat1"], a["mat2"], a["scale_a"], a["scale_b"], a["bias"], a["scale_result"],
                a["out_dtype"], a["use_fast_accum"], out)


def _int_list(fn, name, value):
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
        raise TypeError(f"{fn}(): argument '{name}' must be a list of ints, "
                        f"not {type(value).__name__}")
    return [int(v) for v in value]


def _one_scale(fn, name, scales, recipes, swizzles):
    """The single fp32 scale of one operand, or the error for what mmaemu does not model."""
    if isinstance(scales, torch.Tensor) or not isinstance(scales, (list, tuple)) \
            or not all(isinstance(s, torch.Tensor) for s in scales):
        raise TypeError(f"{fn}(): argument 'scale_{name}' must be a list of Tensors, "
                        f"not {type(scales).__name__}")
    if len(scales) != 1 or len(recipes) != 1:
        raise UnsupportedFeatureError(
            f"{fn}: {len(scales)} scales with recipes "
            f"{[_RECIPE_NAMES.get(r, r) for r in recipes]} for mat_{name}: mmaemu models one "
            "scale tensor per operand (two-level scales are not supported)")
    recipe = recipes[0]
    if recipe not in (TENSORWISE, ROWWISE, BLOCK_1X128, BLOCK_128X128):
        raise UnsupportedFeatureError(
            f"{fn}: recipe {_RECIPE_NAMES.get(recipe, recipe)} for mat_{name}: MX and NVFP4 "
            "block scales are not supported (mmaemu models tensor-wise, row-wise and the "
            "DeepSeek block-wise recipes)")
    if any(s != NO_SWIZZLE for s in swizzles):
        raise UnsupportedFeatureError(
            f"{fn}: swizzled scales for mat_{name} ({swizzles}) are not supported")
    return scales[0], recipe


def v2_call(args, kwargs):
    """A `_scaled_mm_v2` call as the torch 2.7.1 `_scaled_mm` call with the same arithmetic."""
    fn = V2.name
    a, out = bind(V2, args, kwargs)
    recipe_a = _int_list(fn, "recipe_a", a["recipe_a"])
    recipe_b = _int_list(fn, "recipe_b", a["recipe_b"])
    sa, ra = _one_scale(fn, "a", a["scale_a"], recipe_a, _int_list(fn, "swizzle_a", a["swizzle_a"]))
    sb, rb = _one_scale(fn, "b", a["scale_b"], recipe_b, _int_list(fn, "swizzle_b", a["swizzle_b"]))
    contraction = _int_list(fn, "contraction_dim", a["contraction_dim"])
    if contraction not in ([], [1, 0]):
        raise UnsupportedFeatureError(
            f"{fn}: contraction_dim={contraction}: mmaemu takes K as mat_a's dim 1 and mat_b's "
            "dim 0 (contraction_dim=[] or [1, 0])")
    mat1, mat2 = a["mat1"], a["mat2"]
    if isinstance(mat1, torch.Tensor) and isinstance(mat2, torch.Tensor) \
            and mat1.dim() == 2 and mat2.dim() == 2:
        if BLOCK_1X128 in (ra, rb) or BLOCK_128X128 in (ra, rb):
            sa, sb = _blockwise_v1_scales(ra, rb, sa, sb, mat1, mat2)
        else:
            _check_recipe_matches_scales(ra, rb, sa, sb, mat1.shape[0], mat2.shape[1])
    # torch >= 2.10: an output dtype of None means bfloat16 (not the input dtype, as in 2.7.1).
    out_dtype = a["out_dtype"] if a["out_dtype"] is not None else (
        out.dtype if isinstance(out, torch.Tensor) else torch.bfloat16)
    return Call(mat1, mat2, sa, sb, a["bias"], None, out_dtype, a["use_fast_accum"], out)


def _check_recipe_matches_scales(ra, rb, sa, sb, M, N):
    """torch's acceptance rule (ScaledBlas.cpp, scale_kernel_dispatch): tensor-wise recipes need
    single-element fp32 scales, row-wise ones fp32 scales of shape (M, 1) and (1, N). The row-wise
    shape, contiguity and dtype are checked again by mmaemu.scaled_mm's torch 2.7.1 validation."""
    if ra == TENSORWISE and rb == TENSORWISE:
        ok = sa.numel() == 1 and sb.numel() == 1
    elif ra == ROWWISE and rb == ROWWISE:
        ok = tuple(sa.shape) == (M, 1) and tuple(sb.shape) == (1, N)
    else:
        ok = False
    if not ok or sa.dtype != torch.float32 or sb.dtype != torch.float32:
        raise ReferenceRejectsError(
            f"Invalid scaling configuration: recipes {_RECIPE_NAMES[ra]} x {_RECIPE_NAMES[rb]} "
            f"with scale_a of shape {tuple(sa.shape)} ({sa.dtype}) and scale_b of shape "
            f"{tuple(sb.shape)} ({sb.dtype}). For TensorWise scaling both scales are fp32 "
            f"singletons; for RowWise scaling scale_a is ({M}, 1) and scale_b is (1, {N}), fp32")


def _round_up(x, m):
    return -(-x // m) * m


def _blockwise_v1_scales(ra, rb, sa, sb, mat1, mat2):
    """The DeepSeek recipes of F.scaled_mm (ScaledBlas.cpp _scaled_mm_cuda_v2_out: the
    block_1x128_128x128, block_128x128_1x128 and block_1x128_1x128 entries): torch's shape and
    stride checks, then the same scales in v1's layouts (what torch hands cuBLASLt either way).
    v2 pads the k-groups of a 128 x 128 scale to a multiple of 4 (cuBLAS's layout); v1 does not."""
    M, K = mat1.shape
    N = mat2.shape[1]
    L = -(-K // 128)
    pairs = {(BLOCK_1X128, BLOCK_128X128), (BLOCK_128X128, BLOCK_1X128),
             (BLOCK_1X128, BLOCK_1X128)}
    e4m3 = mat1.dtype == torch.float8_e4m3fn and mat2.dtype == torch.float8_e4m3fn
    if (ra, rb) not in pairs or not e4m3 or sa.dtype != torch.float32 \
            or sb.dtype != torch.float32:
        raise ReferenceRejectsError(
            f"Invalid scaling configuration: recipes {_RECIPE_NAMES[ra]} x {_RECIPE_NAMES[rb]} "
            f"with {mat1.dtype} x {mat2.dtype} and scales {sa.dtype}, {sb.dtype}: the block-wise "
            "recipes are BlockWise1x128 with BlockWise128x128 (either way round) or with "
            "BlockWise1x128, on Float8_e4m3fn operands with fp32 scales")

    def check(name, t, shape, strides, what):
        if tuple(t.shape) != shape:
            raise ReferenceRejectsError(f"{name} must have shape {what} Float elements, got "
                                        f"{list(t.shape)}")
        if any(size > 1 and st != want for size, st, want in zip(t.shape, t.stride(), strides)):
            raise ReferenceRejectsError(f"{name} must have strides {strides}; got "
                                        f"{tuple(t.stride())}")

    L4 = _round_up(L, 4)
    if ra == BLOCK_1X128:
        check("scale_a", sa, (M, L), (1, M), "M x ceil(K/128)")
        v1_a = sa
    else:
        check("scale_a", sa, (L4, -(-M // 128)), (1, L4), "round_up(ceil(K/128), 4) x ceil(M/128)")
        v1_a = sa[:L].t().contiguous()
    if rb == BLOCK_1X128:
        check("scale_b", sb, (N, L), (1, N), "N x ceil(K/128)")
        v1_b = sb.t()
    else:
        check("scale_b", sb, (L4, -(-N // 128)), (1, L4), "round_up(ceil(K/128), 4) x ceil(N/128)")
        v1_b = sb[:L].t().contiguous().t()
    return v1_a, v1_b


@dataclass
class GroupedCall:
    """One grouped FP8 GEMM in torch's _scaled_grouped_mm terms (mmaemu.scaled_grouped_mm's)."""
    mat_a: torch.Tensor
    mat_b: torch.Tensor
    scale_a: torch.Tensor
    scale_b: torch.Tensor
    offs: Optional[torch.Tensor]
    bias: Optional[torch.Tensor]
    scale_result: Optional[torch.Tensor]
    out_dtype: Optional[torch.dtype]
    use_fast_accum: bool


def grouped_call(args, kwargs):
    a, out = bind(GROUPED, args, kwargs)
    if out is not None:
        raise TypeError("_scaled_grouped_mm() got an unexpected keyword argument 'out'")
    return GroupedCall(a["mat_a"], a["mat_b"], a["scale_a"], a["scale_b"], a["offs"], a["bias"],
                       a["scale_result"], a["out_dtype"], a["use_fast_accum"])


def grouped_v2_call(args, kwargs):
    """A `_scaled_grouped_mm_v2` call (F.scaled_grouped_mm) with RowWise recipes as the v1 call;
    MX and NVFP4 recipes are refused (not modelled), anything else as torch refuses it."""
    fn = GROUPED_V2.name
    a, out = bind(GROUPED_V2, args, kwargs)
    if out is not None:
        raise TypeError(f"{fn}() got an unexpected keyword argument 'out'")
    recipe_a = _int_list(fn, "recipe_a", a["recipe_a"])
    recipe_b = _int_list(fn, "recipe_b", a["recipe_b"])
    sa, ra = _one_scale(fn, "a", a["scale_a"], recipe_a, _int_list(fn, "swizzle_a", a["swizzle_a"]))
    sb, rb = _one_scale(fn, "b", a["scale_b"], recipe_b, _int_list(fn, "swizzle_b", a["swizzle_b"]))
    if (ra, rb) != (ROWWISE, ROWWISE):
        raise ReferenceRejectsError("No gemm implementation was found")
    contraction = _int_list(fn, "contraction_dim", a["contraction_dim"])
    if contraction not in ([], [-1, -2]):
        raise ReferenceRejectsError("Curently contraction dims must be (-1, -2) only")
    return GroupedCall(a["mat_a"], a["mat_b"], sa, sb, a["offs"], a["bias"], None,
                       a["out_dtype"], a["use_fast_accum"])


grouped_call.grouped = grouped_v2_call.grouped = True   # emulate() computes these as grouped


def _overloads(packet):
    return [packet] + [getattr(packet, name) for name in packet.overloads()]


def entry_points():
    """{callable: how to bind it} for every FP8 GEMM entry point of the installed torch, as
    torch function modes (torch.* functions, aten packets and overloads) and dispatch modes
    (aten overloads) see them."""
    table = {}
    for attr, binder in (("_scaled_mm", v1_call), ("_scaled_mm_v2", v2_call),
                         ("_scaled_grouped_mm", grouped_call),
                         ("_scaled_grouped_mm_v2", grouped_v2_call)):
        if hasattr(torch, attr):
            table[getattr(torch, attr)] = binder
        if hasattr(torch.ops.aten, attr):
            for f in _overloads(getattr(torch.ops.aten, attr)):
                table[f] = binder
    return table
