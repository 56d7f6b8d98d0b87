"""`with mmaemu.emulate():` runs every torch._scaled_mm call of unmodified code on mmaemu.

It computes each call with `mmaemu::profile_scaled_mm` (mmaemu/ops.py), the op whose
implementation is the whole public call `mmaemu.scaled_mm(..., profile=, backend=, splitk=)`:
validation, the profile's split-K decision for the actual shape, backend choice and warnings all
happen when it runs, so compiled graphs keep it whole and its errors keep their mmaemu class.

`emulate` is a TorchFunctionMode: torch function modes see a call before any dispatch, so
`torch._scaled_mm` on CPU tensors (torch's own fp32 emulation) and on CUDA tensors (cuBLASLt)
never runs; torch.compile traces through the mode and puts the op above in the graph.
"""

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .errors import MmaemuError, ReferenceRejectsError
from .ops import decode_splitk, encode_splitk, profile_scaled_mm  # noqa: F401  (emulate's op)

__all__ = ["emulate"]


# ---------------------------------------------------------------------------------------------
# Argument binding: torch 2.7.1's _scaled_mm(input, mat2, scale_a, scale_b, bias=None,
# scale_result=None, out_dtype=None, use_fast_accum=False, *, out=None). The first argument is
# `input` for torch._scaled_mm and `self` for torch.ops.aten._scaled_mm.

_NAMES = ("mat1", "mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype",
          "use_fast_accum")
_DEFAULTS = {"bias": None, "scale_result": None, "out_dtype": None, "use_fast_accum": False}


def _bind(args, kwargs):
    if len(args) > len(_NAMES):
        raise TypeError(f"_scaled_mm() takes at most {len(_NAMES)} positional arguments "
                        f"({len(args)} given)")
    bound = dict(zip(_NAMES, args))
    out = None
    for key, value in kwargs.items():
        name = "mat1" if key in ("input", "self") else key
        if name == "out":
            out = value
            continue
        if name not in _NAMES:
            raise TypeError(f"_scaled_mm() got an unexpected keyword argument '{key}'")
        if name in bound:
            raise TypeError(f"_scaled_mm() got multiple values for argument '{key}'")
        bound[name] = value
    for name in _NAMES[:4]:
        if name not in bound:
            raise TypeError(f"_scaled_mm() missing required argument '{name}'")
    for name, value in _DEFAULTS.items():
        bound.setdefault(name, value)
    return bound, out


# ---------------------------------------------------------------------------------------------
# The modes.

def _scaled_mm_functions():
    return (torch._scaled_mm, torch.ops.aten._scaled_mm, torch.ops.aten._scaled_mm.default,
            torch.ops.aten._scaled_mm.out)


def _tensor_subclass_in(args, kwargs):
    """True when an argument (or an element of a list/tuple argument) is a tensor subclass
    other than nn.Parameter: its Python code may call torch._scaled_mm out of our sight."""
    for v in list(args) + list(kwargs.values()):
        items = v if isinstance(v, (list, tuple)) else (v,)
        for t in items:
            if isinstance(t, torch.Tensor) and type(t) is not torch.Tensor \
                    and type(t) is not torch.nn.Parameter:
                return True
    return False


def _overrides_torch_function(cls):
    impl = getattr(cls, "__torch_function__", None)
    if impl is None or impl is torch._C._disabled_torch_function_impl:
        return False
    return getattr(impl, "__func__", impl) is not torch.Tensor.__torch_function__.__func__


class emulate(TorchFunctionMode):
    """Within `with mmaemu.emulate(profile=...):` every torch._scaled_mm call (also
    torch.ops.aten._scaled_mm and its .out overload) computes mmaemu.scaled_mm with the same
    arguments and the given profile, backend and splitk.

    Nothing falls back: a call mmaemu cannot compute raises the error mmaemu.scaled_mm raises
    (UnsupportedFeatureError for row-wise scales on an Ada profile, ReferenceRejectsError for calls torch
    2.7.1 would reject, SplitKUnknownError, ...). See docs/api.md for what it cannot see.

    dispatcher=True also catches aten::_scaled_mm at the dispatcher for the whole context, so
    calls that never pass through Python (TorchScript code) are emulated too. torch.compile does
    not trace under a dispatch mode: compiled code then runs eagerly, and fullgraph=True fails.
    """

    def __init__(self, profile=None, *, backend=None, splitk="auto", dispatcher=False):
        super().__init__()
        if profile is not None and not isinstance(profile, str):
            raise TypeError(f"profile must be a str or None, got {type(profile).__name__}")
        if backend is not None and not isinstance(backend, str):
            raise TypeError(f"backend must be a str or None, got {type(backend).__name__}")
        self.profile, self.backend = profile, backend
        self.splitk = splitk
        self._splitk_text = encode_splitk(splitk, profile)
        self._targets = _scaled_mm_functions()
        if not isinstance(dispatcher, bool):
            raise TypeError(f"dispatcher must be a bool, got {type(dispatcher).__name__}")
        self.dispatcher = dispatcher
        self._catchers = []

    def __enter__(self):
        # torch.compile does not route calls through a torch function mode entered inside the
        # compiled region (torch 2.13): refuse rather than silently not emulating.
        if torch.compiler.is_compiling():
            raise MmaemuError("mmaemu.emulate() must be entered outside torch.compile'd code: "
                              "enter it around the call of the compiled function")
        out = super().__enter__()
        if self.dispatcher:
            catcher = _DispatchCatcher(self)
            catcher.__enter__()
            self._catchers.append(catcher)
        return out

    def __exit__(self, exc_type, exc_value, traceback):
        if self.dispatcher:
            self._catchers.pop().__exit__(exc_type, exc_value, traceback)
        return super().__exit__(exc_type, exc_value, traceback)

    def __repr__(self):
        return (f"mmaemu.emulate(profile={self.profile!r}, backend={self.backend!r}, "
                f"splitk={self.splitk!r}, dispatcher={self.dispatcher!r})")

    def scaled_mm(self, args, kwargs):
        """One intercepted call, bound to torch 2.7.1's arguments and computed by mmaemu."""
        a, out = _bind(args, kwargs)
        out_dtype = a["out_dtype"]
        if out is not None:
            if out_dtype is not None and out_dtype != out.dtype:
                raise ReferenceRejectsError("out_dtype must match output matrix type")
            out_dtype = out.dtype
        y = torch.ops.mmaemu.profile_scaled_mm(
            a["mat1"], a["mat2"], a["scale_a"], a["scale_b"], a["bias"], a["scale_result"],
            out_dtype, a["use_fast_accum"], self.profile, self.backend, self._splitk_text)
        if out is None:
            return y
        out.resize_(y.shape)
        out.copy_(y)
        return out

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(func is f for f in self._targets):
            return self.scaled_mm(args, kwargs)
        if not _tensor_subclass_in(args, kwargs):
            return func(*args, **kwargs)
        # A tensor subclass runs Python code for `func`, and that code may call torch._scaled_mm
        # (torchao's float8 tensors do). This mode is off the stack while this handler runs:
        # - a subclass with its own __torch_function__ gets NotImplemented, so torch calls its
        #   __torch_function__ with this mode back on the stack;
        # - for one that works in __torch_dispatch__, `func` runs under _DispatchCatcher, which
        #   catches aten._scaled_mm at the dispatcher (eager only: torch.compile does not trace
        #   dispatch modes, see docs/api.md).
        if torch._C._is_torch_function_enabled() and any(_overrides_torch_function(t)
                                                         for t in types):
            return NotImplemented
        if torch.compiler.is_compiling():
            return func(*args, **kwargs)
        with _DispatchCatcher(self):
            return func(*args, **kwargs)


class _DispatchCatcher(TorchDispatchMode):
    """Catches aten._scaled_mm at the dispatcher, also inside a subclass's __torch_dispatch__
    (which runs with this mode pushed back on the stack)."""

    def __init__(self, owner):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._scaled_mm.default or func is torch.ops.aten._scaled_mm.out:
            return self.owner.scaled_mm(args, kwargs)
        subclasses = [t for t in types if t is not torch.Tensor]
        if not subclasses:
            return func(*args, **kwargs)
        with self:
            for cls in subclasses:
                out = cls.__torch_dispatch__(func, types, args, kwargs)
                if out is not NotImplemented:
                    return out
        return NotImplemented
