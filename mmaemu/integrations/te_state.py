"""Transformer Engine's FP8 state in a checkpoint (`*._extra_state`), read without TE.

How TE 2.x writes it (read in TE 2.3's transformer_engine/pytorch/module/base.py,
TransformerEngineBaseModule.get_extra_state / set_extra_state; not checked on a real Evo 2
checkpoint, which cannot be downloaded here): a uint8 tensor holding `pickle.dumps(state)`, where
state is None (the module never ran in FP8) or a dict with
    "recipe":              the DelayedScaling object (a dataclass of transformer_engine.common.recipe;
                           its fp8_format is the Enum Format whose values are _FormatHelper tuples),
    "scale_fwd":           fp32 [3 * num_gemms]: input, weight, output scale of each GEMM,
    "amax_history_fwd":    fp32 [amax_history_len, 3 * num_gemms],
    "scale_bwd", "amax_history_bwd": the same for the backward pass,
    "extra_fp8_variables": a dict of bools, ints, floats, strs, tuples and lists.
The tensors are pickled by pickle.dumps, i.e. through torch.storage._load_from_bytes. An older
format (io.BytesIO holding torch.save of the same dict) is also accepted, as TE still loads it.

Unpickling executes whatever globals a pickle names, so this reader allows only the few that
such a state needs: torch's tensor rebuild, a storage loaded with torch.load(weights_only=True),
OrderedDict, and inert stand-ins for TE's recipe classes. Anything else raises ValueError before
it is called.
"""
import collections
import dataclasses
import io
import pickle
import zipfile
from typing import Optional

import torch

__all__ = ["TEFP8State", "read_te_extra_state"]

_RECIPE_MODULE = "transformer_engine.common.recipe"
_FORMATS = {(448.0, 448.0): "E4M3", (57344.0, 57344.0): "E5M2", (448.0, 57344.0): "HYBRID"}
_RECIPE_FIELDS = {"margin", "fp8_format", "amax_history_len", "amax_compute_algo",
                  "scaling_factor_compute_algo", "reduce_amax", "fp8_dpa", "fp8_mha", "interval",
                  "override_linear_precision"}


@dataclasses.dataclass(frozen=True)
class TEFP8State:
    """The forward-pass FP8 state of one TE module, as plain tensors.

    scale:        fp32 [3 * num_gemms] quantisation scales (x_fp8 = x * scale): input, weight,
                  output of each GEMM, the order TE uses (index 0 GEMM1_INPUT, 1 GEMM1_WEIGHT).
    amax_history: fp32 [amax_history_len, 3 * num_gemms]; row 0 is the amax being collected.
    recipe:       the recorded DelayedScaling fields that are plain values (margin,
                  amax_history_len, amax_compute_algo, fp8_format as "E4M3"/"E5M2"/"HYBRID", ...).
    """
    scale: torch.Tensor
    amax_history: torch.Tensor
    recipe: dict

    @property
    def scale_x(self):
        return self.scale[0].clone()

    @property
    def scale_w(self):
        return self.scale[1].clone()


# ---------------------------------------------------------------------------------------------
# Inert stand-ins for TE's recipe classes: they keep plain values and run nothing.

class _FormatHelper(tuple):
    def __new__(cls, *args):
        return tuple.__new__(cls, args)


def _format(value):
    """Format(_FormatHelper(max_fwd, max_bwd)) -> "E4M3" / "E5M2" / "HYBRID"."""
    try:
        key = (float(value[0]), float(value[1]))
    except (TypeError, ValueError, IndexError):
        raise ValueError(f"TE _extra_state: unexpected fp8_format value {value!r}") from None
    if key not in _FORMATS:
        raise ValueError(f"TE _extra_state: unknown fp8_format (max_fwd, max_bwd) = {key}")
    return _FORMATS[key]


class _Recipe:
    """Stands in for DelayedScaling (and other recipe dataclasses): keeps the plain fields."""

    fields = {}     # (unpickling calls __new__ and __setstate__, never __init__)

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:       # (dict, slots) form
            state = {**(state[0] or {}), **(state[1] or {})}
        if not isinstance(state, dict):
            raise ValueError("TE _extra_state: the recipe's state is not a dict")
        self.fields = {}
        for key, value in state.items():
            if key in _RECIPE_FIELDS and (value is None or isinstance(value,
                                                                      (bool, int, float, str))):
                self.fields[key] = value
            elif key in _RECIPE_FIELDS and not callable(value):
                self.fields[key] = repr(value)


def _recipe_class(name):
    return type(name, (_Recipe,), {"__module__": __name__})


def _storage_from_bytes(data):
    """torch.storage._load_from_bytes, with the weights-only unpickler."""
    if not isinstance(data, (bytes, bytearray)):
        raise ValueError("TE _extra_state: a tensor storage is not bytes")
    return torch.load(io.BytesIO(bytes(data)), weights_only=True, map_location="cpu")


def _rebuild_tensor(storage, *args):
    if not isinstance(storage, (torch.UntypedStorage, torch.TypedStorage)):
        raise ValueError("TE _extra_state: a tensor is rebuilt from something not a storage")
    return torch._utils._rebuild_tensor_v2(storage, *args)


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch.storage", "_load_from_bytes"): _storage_from_bytes,
    ("collections", "OrderedDict"): collections.OrderedDict,
    (_RECIPE_MODULE, "_FormatHelper"): _FormatHelper,
    (_RECIPE_MODULE, "Format"): _format,
}
_RECIPE_CLASSES = ("DelayedScaling", "Recipe", "Float8CurrentScaling", "MXFP8BlockScaling",
                   "Float8BlockScaling")


class _AllowListUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if module == _RECIPE_MODULE and name in _RECIPE_CLASSES:
            return _recipe_class(name)
        raise ValueError(f"TE _extra_state names {module}.{name}, which a Transformer Engine FP8 "
                         f"state does not contain; refusing to load it")


class _RestrictedUnpickler(_AllowListUnpickler):
    """A plain pickle (TE 2.x's format): tensors come through _load_from_bytes only."""

    def persistent_load(self, pid):
        raise ValueError("TE _extra_state: unexpected persistent reference in a plain pickle")


class _RestrictedPickleModule:
    """A pickle_module for torch.load (the older io.BytesIO format)."""
    Unpickler = _AllowListUnpickler      # torch.load supplies persistent_load for its storages
    load = staticmethod(pickle.load)
    __name__ = "mmaemu_restricted_pickle"


def _unpickle(data):
    if data[:2] == b"PK" and zipfile.is_zipfile(io.BytesIO(data)):   # torch.save (zip) format
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False,
                          pickle_module=_RestrictedPickleModule)
    return _RestrictedUnpickler(io.BytesIO(data)).load()


def _fp32(value, what, dim):
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or value.dim() != dim:
        raise ValueError(f"TE _extra_state: {what} must be a {dim}-D float32 tensor, got "
                         f"{type(value).__name__}"
                         + (f" {value.dtype} {tuple(value.shape)}"
                            if isinstance(value, torch.Tensor) else ""))
    return value.detach().to("cpu").clone()


def read_te_extra_state(state) -> Optional[TEFP8State]:
    """The forward FP8 state of a TE module's `_extra_state`, or None if it holds none.

    state: the checkpoint value: a uint8 tensor (TE 2.x), bytes / bytearray, an io.BytesIO
    (older format), or an already unpickled dict. Raises TypeError for another type and
    ValueError for malformed content, including a pickle naming anything but the expected
    tensors and TE recipe classes (nothing it names is executed).
    """
    if isinstance(state, torch.Tensor):
        if state.dtype != torch.uint8 or state.dim() != 1:
            raise TypeError(f"TE _extra_state tensor must be 1-D uint8, got {state.dtype} "
                            f"{tuple(state.shape)}")
        state = state.detach().cpu().numpy().tobytes()
    elif isinstance(state, io.BytesIO):
        state = state.getvalue()
    elif isinstance(state, bytearray):
        state = bytes(state)
    if isinstance(state, bytes):
        if not state:
            return None
        try:
            state = _unpickle(state)
        except ValueError:
            raise
        except Exception as e:          # truncated or corrupt bytes
            raise ValueError(f"TE _extra_state is not a readable pickle: "
                             f"{type(e).__name__}: {e}") from e
    if state is None:
        return None
    if not isinstance(state, dict):
        raise TypeError(f"TE _extra_state must be a uint8 tensor, bytes, io.BytesIO or dict, "
                        f"got {type(state).__name__}")
    if "scale_fwd" not in state or "amax_history_fwd" not in state:
        raise ValueError(f"TE _extra_state has no delayed-scaling forward state (keys: "
                         f"{sorted(map(str, state))})")
    scale = _fp32(state["scale_fwd"], "scale_fwd", 1)
    history = _fp32(state["amax_history_fwd"], "amax_history_fwd", 2)
    if scale.numel() < 2 or scale.numel() % 3 or history.shape[1] != scale.numel():
        raise ValueError(f"TE _extra_state: scale_fwd {tuple(scale.shape)} and amax_history_fwd "
                         f"{tuple(history.shape)} are not [3 * num_gemms] and "
                         f"[len, 3 * num_gemms]")
    recipe = state.get("recipe")
    fields = dict(recipe.fields) if isinstance(recipe, _Recipe) else {}
    if isinstance(recipe, _Recipe):
        fields["name"] = type(recipe).__name__
    return TEFP8State(scale, history, fields)
