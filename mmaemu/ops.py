"""Every torch.ops.mmaemu op: its schema and its fake kernel.

Two kinds of op:
- the kernel ops `scaled_mm`, `accumulate`, `mma`, `scaled_mm_tiles` (row-wise scales over
  explicit per-tile k-segments: the sm_89 stream-K kernel, planning/streamk.py): C++ kernels
  (csrc/torch/ops.cpp registers them for CPU and CUDA) that execute a given plan: preset,
  split, scheme, executor, epilogue.
- the planning ops `profile_scaled_mm`, `profile_accumulate`: one opaque op for the whole public
  call, implemented in Python by api.py (it validates the concrete tensors, plans from the
  concrete sizes and calls the kernel op, as eager mmaemu.scaled_mm / accumulate do). Under
  torch.compile, torch.export, torch.jit.trace and TorchScript the graph keeps this op whole,
  so the checks and the split decision happen each time the graph runs, for the actual shape,
  and a refusal keeps its mmaemu class.

The fake kernels only give the result's shape and dtype (one rule, `result_dtype`); they never
raise, so a refused call is refused when the op runs, with the class and message of eager mode.
The dispatcher accepts the C++ kernels registered before these schemas and checks their
signatures against them when the schemas are defined (torch 2.13).
"""
import torch

__all__ = ["SCHEMAS", "encode_splitk", "decode_splitk", "splitk_args", "result_dtype"]

SCHEMAS = {
    "scaled_mm": (
        "scaled_mm(Tensor mat1, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
        "Tensor? scale_result=None, ScalarType? out_dtype=None, bool use_fast_accum=False, "
        "str preset=\"hopper\", int splits=1, str scheme=\"none\", str backend=\"reference\", "
        "int epilogue=0) -> Tensor"),
    "accumulate": (
        "accumulate(Tensor x, Tensor w, bool use_fast_accum, str preset=\"hopper\", int splits=1, "
        "str scheme=\"none\", str backend=\"reference\") -> Tensor"),
    "mma": "mma(Tensor a, Tensor b, Tensor c, str preset=\"hopper\") -> Tensor",
    "scaled_mm_tiles": (
        "scaled_mm_tiles(Tensor mat1, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias, "
        "bool use_fast_accum, str preset, int[] offsets, int[] bounds, int tile_m, int tile_n, "
        "int iter_k, str backend=\"reference\") -> Tensor"),
    "profile_scaled_mm": (
        "profile_scaled_mm(Tensor mat1, Tensor mat2, Tensor scale_a, Tensor scale_b, "
        "Tensor? bias=None, Tensor? scale_result=None, ScalarType? out_dtype=None, "
        "bool use_fast_accum=False, str? profile=None, str? backend=None, str splitk=\"auto\", "
        "int? grad_inputs=None, SymInt splitk_int=0, str? blockwise=None) -> Tensor"),
    "profile_scaled_grouped_mm": (
        "profile_scaled_grouped_mm(Tensor mat_a, Tensor mat_b, Tensor scale_a, Tensor scale_b, "
        "Tensor? offs=None, Tensor? bias=None, Tensor? scale_result=None, "
        "ScalarType? out_dtype=None, bool use_fast_accum=False, str? profile=None, "
        "str? backend=None, int? grad_inputs=None) -> Tensor"),
    "profile_accumulate": (
        "profile_accumulate(Tensor x, Tensor w, bool use_fast_accum, str? profile=None, "
        "str? backend=None, str splitk=\"auto\", int? grad_inputs=None, SymInt splitk_int=0) "
        "-> Tensor"),
}

_lib = torch.library.Library("mmaemu", "DEF")
for _schema in SCHEMAS.values():
    _lib.define(_schema)


# ---------------------------------------------------------------------------------------------
# splitk travels through the planning ops' schemas as a string, "auto", "infer", "1", "4:contiguous",
# or, from traced code, as a string and an int: ("int", 1), ("int:contiguous", 4). (Traced code
# cannot turn an int into text: torch.compile(dynamic=True) makes a closure's ints symbolic.)

def splitk_args(splitk):
    """(splitk, splitk_int) of the planning op for any `splitk` value, unchecked: decode_splitk
    gives the value back, so the op checks it as mmaemu.scaled_mm does (same error)."""
    if isinstance(splitk, str):
        return (splitk if splitk in ("auto", "infer") else "str:" + splitk), 0
    if isinstance(splitk, bool):
        return f"bool:{splitk}", 0
    if isinstance(splitk, int):
        return "int", splitk
    if isinstance(splitk, (tuple, list)) and len(splitk) == 2 and isinstance(splitk[1], str) \
            and isinstance(splitk[0], int) and not isinstance(splitk[0], bool):
        return "int:" + splitk[1], splitk[0]
    from .planning.splitk import parse_splitk
    parse_splitk(splitk, None)      # raises its TypeError for every other value
    raise AssertionError(f"splitk {splitk!r} has no op encoding")   # pragma: no cover


def encode_splitk(splitk, profile=None):
    """The op-schema string of a `splitk` argument ("auto", "1", "4:contiguous"), checked
    against the profile as mmaemu.scaled_mm checks it."""
    from .planning.profiles import get_profile
    from .planning.splitk import parse_splitk
    parse_splitk(splitk, get_profile(profile))
    if isinstance(splitk, str):
        return splitk
    if isinstance(splitk, int):
        return str(splitk)
    return f"{int(splitk[0])}:{splitk[1]}"


def decode_splitk(text, splitk_int=0):
    """The `splitk` value of the planning op's (splitk, splitk_int)."""
    if text in ("auto", "infer"):
        return text
    kind, sep, rest = text.partition(":")
    if kind == "str" and sep:
        return rest
    if kind == "bool" and sep:
        return rest == "True"
    if kind == "int":
        return (splitk_int, rest) if sep else splitk_int
    try:
        return (int(kind), rest) if sep else int(text)
    except ValueError:      # not an encoding: the text itself, refused by the split decision
        return text


# ---------------------------------------------------------------------------------------------
# Fake kernels: shapes and dtypes only.

def result_dtype(mat1, out_dtype):
    """torch._scaled_mm's result dtype: out_dtype, else mat1's."""
    return out_dtype if out_dtype is not None else mat1.dtype


def _rows(t):
    return t.shape[0] if t.dim() > 0 else 0


def _cols(t):
    return t.shape[-1] if t.dim() > 0 else 0


@torch.library.register_fake("mmaemu::scaled_mm", lib=_lib)
def _scaled_mm_fake(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                    use_fast_accum=False, preset="hopper", splits=1, scheme="none",
                    backend="reference", epilogue=0):
    return mat1.new_empty((_rows(mat1), _cols(mat2)), dtype=result_dtype(mat1, out_dtype))


@torch.library.register_fake("mmaemu::profile_scaled_mm", lib=_lib)
def _profile_scaled_mm_fake(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None,
                            out_dtype=None, use_fast_accum=False, profile=None, backend=None,
                            splitk="auto", grad_inputs=None, splitk_int=0, blockwise=None):
    return _scaled_mm_fake(mat1, mat2, scale_a, scale_b, out_dtype=out_dtype)


def grouped_result(mat_a, mat_b, offs):
    """torch's grouped GEMM result layout (create_grouped_gemm_output_tensor, GroupedMMUtils.h):
    (shape, strides) with the last dimension's stride padded to 16 bytes of bf16."""
    if mat_a.dim() == 2 and mat_b.dim() == 2:
        shape = (offs.shape[0] if offs is not None else 0, mat_a.shape[0], mat_b.shape[-1])
    elif mat_a.dim() == 2:
        shape = (mat_a.shape[0], mat_b.shape[-1])
    elif mat_b.dim() == 2:
        shape = (mat_a.shape[-2], mat_b.shape[-1])
    else:
        shape = (mat_a.shape[0], mat_a.shape[-2], mat_b.shape[-1])
    pad = (shape[-1] + 7) // 8 * 8
    return shape, ((pad, 1) if len(shape) == 2 else (shape[1] * pad, pad, 1))


@torch.library.register_fake("mmaemu::profile_scaled_grouped_mm", lib=_lib)
def _profile_scaled_grouped_mm_fake(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None,
                                    scale_result=None, out_dtype=None, use_fast_accum=False,
                                    profile=None, backend=None, grad_inputs=None):
    shape, strides = grouped_result(mat_a, mat_b, offs)
    return mat_a.new_empty_strided(shape, strides, dtype=torch.bfloat16)


@torch.library.register_fake("mmaemu::accumulate", lib=_lib)
def _accumulate_fake(x, w, use_fast_accum, preset="hopper", splits=1, scheme="none",
                     backend="reference"):
    return x.new_empty((_rows(x), _rows(w)), dtype=torch.float32)


@torch.library.register_fake("mmaemu::profile_accumulate", lib=_lib)
def _profile_accumulate_fake(x, w, use_fast_accum, profile=None, backend=None, splitk="auto",
                             grad_inputs=None, splitk_int=0):
    return _accumulate_fake(x, w, use_fast_accum)


@torch.library.register_fake("mmaemu::scaled_mm_tiles", lib=_lib)
def _scaled_mm_tiles_fake(mat1, mat2, scale_a, scale_b, bias, use_fast_accum, preset, offsets,
                          bounds, tile_m, tile_n, iter_k, backend="reference"):
    return mat1.new_empty((_rows(mat1), _cols(mat2)), dtype=torch.bfloat16)


@torch.library.register_fake("mmaemu::mma", lib=_lib)
def _mma_fake(a, b, c, preset="hopper"):
    return c.new_empty((_rows(a),), dtype=torch.float32)
