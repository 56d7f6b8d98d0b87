"""Every torch.ops.mmaemu op: its schema, its fake kernel, and the planning ops' implementations.

Two kinds of op:
- the kernel ops `scaled_mm`, `accumulate`, `mma`, `scaled_mm_tiles` (row-wise scales over
  explicit per-tile k-segments: the sm_89 stream-K kernel, streamk.py): C++ kernels (csrc/torch_ops.cpp registers
  them for CPU and CUDA) that execute a given plan: preset, split, scheme, backend, epilogue.
- the planning ops `profile_scaled_mm`, `profile_accumulate`: one opaque op for the whole public
  call. Their Python implementation validates the concrete tensors, plans from the concrete sizes
  and calls the kernel op (api.run_scaled_mm / api.run_accumulate, the functions eager
  mmaemu.scaled_mm / accumulate call). Under torch.compile, torch.export, torch.jit.trace and
  TorchScript the graph keeps this op whole, so the checks and the split decision happen each
  time the graph runs, for the actual shape, and a refusal keeps its mmaemu class.

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
        "str preset=\"hopper\", int splits=1, str scheme=\"none\", str backend=\"auto\", "
        "int epilogue=0) -> Tensor"),
    "accumulate": (
        "accumulate(Tensor x, Tensor w, bool use_fast_accum, str preset=\"hopper\", int splits=1, "
        "str scheme=\"none\", str backend=\"auto\") -> Tensor"),
    "mma": "mma(Tensor a, Tensor b, Tensor c, str preset=\"hopper\") -> Tensor",
    "scaled_mm_tiles": (
        "scaled_mm_tiles(Tensor mat1, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias, "
        "bool use_fast_accum, str preset, int[] offsets, int[] bounds, int tile_m, int tile_n, "
        "int iter_k, str backend=\"auto\") -> Tensor"),
    "profile_scaled_mm": (
        "profile_scaled_mm(Tensor mat1, Tensor mat2, Tensor scale_a, Tensor scale_b, "
        "Tensor? bias=None, Tensor? scale_result=None, ScalarType? out_dtype=None, "
        "bool use_fast_accum=False, str? profile=None, str? backend=None, str splitk=\"auto\", "
        "int? grad_inputs=None, SymInt splitk_int=0) -> Tensor"),
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
    from .splitk import parse_splitk
    parse_splitk(splitk, None)      # raises its TypeError for every other value
    raise AssertionError(f"splitk {splitk!r} has no op encoding")   # pragma: no cover


def encode_splitk(splitk, profile=None):
    """The op-schema string of a `splitk` argument ("auto", "1", "4:contiguous"), checked
    against the profile as mmaemu.scaled_mm checks it."""
    from .profiles import get_profile
    from .splitk import parse_splitk
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
    return (int(kind), rest) if sep else int(text)


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
                    backend="auto", epilogue=0):
    return mat1.new_empty((_rows(mat1), _cols(mat2)), dtype=result_dtype(mat1, out_dtype))


@torch.library.register_fake("mmaemu::profile_scaled_mm", lib=_lib)
def _profile_scaled_mm_fake(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None,
                            out_dtype=None, use_fast_accum=False, profile=None, backend=None,
                            splitk="auto", grad_inputs=None, splitk_int=0):
    return _scaled_mm_fake(mat1, mat2, scale_a, scale_b, out_dtype=out_dtype)


@torch.library.register_fake("mmaemu::accumulate", lib=_lib)
def _accumulate_fake(x, w, use_fast_accum, preset="hopper", splits=1, scheme="none",
                     backend="auto"):
    return x.new_empty((_rows(x), _rows(w)), dtype=torch.float32)


@torch.library.register_fake("mmaemu::profile_accumulate", lib=_lib)
def _profile_accumulate_fake(x, w, use_fast_accum, profile=None, backend=None, splitk="auto",
                             grad_inputs=None, splitk_int=0):
    return _accumulate_fake(x, w, use_fast_accum)


@torch.library.register_fake("mmaemu::scaled_mm_tiles", lib=_lib)
def _scaled_mm_tiles_fake(mat1, mat2, scale_a, scale_b, bias, use_fast_accum, preset, offsets,
                          bounds, tile_m, tile_n, iter_k, backend="auto"):
    return mat1.new_empty((_rows(mat1), _cols(mat2)), dtype=torch.bfloat16)


@torch.library.register_fake("mmaemu::mma", lib=_lib)
def _mma_fake(a, b, c, preset="hopper"):
    return c.new_empty((_rows(a),), dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# The planning ops' implementation (CPU and CUDA): the public call, from concrete tensors.
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
                      splitk="auto", grad_inputs=None, splitk_int=0):
    """mmaemu.scaled_mm as one op (torch 2.7.1 _scaled_mm arguments plus the profile's).
    Its result is always a new tensor, as an op's must be."""
    from .api import run_scaled_mm
    (mat1, mat2, scale_a, scale_b, bias, scale_result), grad = _as_the_caller_saw(
        (mat1, mat2, scale_a, scale_b, bias, scale_result), grad_inputs)
    with torch.set_grad_enabled(grad):
        return run_scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                             use_fast_accum, profile=profile, backend=backend,
                             splitk=decode_splitk(splitk, splitk_int), stacklevel=1)


def profile_accumulate(x, w, use_fast_accum, profile=None, backend=None, splitk="auto",
                       grad_inputs=None, splitk_int=0):
    """mmaemu.accumulate as one op."""
    from .api import run_accumulate
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
                     ("profile_accumulate", profile_accumulate)):
    # Meta too: eager calls with meta tensors are validated (and refused) as real ones; the
    # fake kernel serves torch.compile's fake tensors only.
    for _key in ("CPU", "CUDA", "Meta"):
        _lib.impl(_name, _impl, _key)
    _lib.impl(_name, _pinning_grad_inputs(getattr(torch.ops.mmaemu, _name).default), "Autograd")
