"""`with mmaemu.emulate():` runs every FP8 GEMM call of unmodified code (torch._scaled_mm and its
siblings: entry_points.py) on mmaemu.

It computes each call with `mmaemu::profile_scaled_mm` (mmaemu/ops.py), the op whose
implementation is the whole public call `mmaemu.scaled_mm(..., profile=, backend=, splitk=)`:
validation, the profile's split-K decision for the actual shape, backend choice and warnings all
happen when it runs, so compiled graphs keep it whole and its errors keep their mmaemu class.

`emulate` is a TorchFunctionMode: torch function modes see a call before any dispatch, so
`torch._scaled_mm` on CPU tensors (torch's own fp32 emulation) and on CUDA tensors (cuBLASLt)
never runs; torch.compile traces through the mode and puts the op above in the graph.
"""

import sys

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from . import entry_points
from ..api import profile_scaled_mm, write_out  # noqa: F401  (profile_scaled_mm: emulate's op)
from ..blockwise import kernel_of
from ..errors import MmaemuError, UnsupportedFeatureError
from ..ops import decode_splitk, encode_splitk  # noqa: F401

__all__ = ["emulate"]


# ---------------------------------------------------------------------------------------------
# The modes.

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


def _refuse_inside_compiled_code():
    # torch.compile does not route calls through a torch function mode entered inside the
    # compiled region (torch 2.13): refuse rather than silently not emulating. Under
    # fullgraph=True the user gets torch._dynamo.exc.Unsupported whose message quotes this one.
    if torch.compiler.is_compiling():
        raise MmaemuError("mmaemu.emulate() must be entered outside torch.compile'd code: "
                          "enter it around the call of the compiled function")


# Built once at import: torch.compile traces the mode's lookups, not the table's construction.
_ENTRY_POINTS = entry_points.entry_points()


class emulate(TorchFunctionMode):
    """Within `with mmaemu.emulate(profile=...):` every FP8 GEMM entry point of torch
    (torch._scaled_mm, torch._scaled_mm_v2, torch.nn.functional.scaled_mm, their aten overloads
    and out variants: entry_points.py) computes mmaemu.scaled_mm with the same arguments and the
    given profile, backend and splitk, in the forward pass and in the backward pass of the
    autograd nodes recorded inside the context.

    Grouped GEMMs (torch._scaled_grouped_mm, F.scaled_grouped_mm) compute
    mmaemu.scaled_grouped_mm; block-wise scales compute the Hopper kernel `blockwise` names
    ('deepgemm', 'cutlass', or None: torch's own cuBLASLt path, inferred and experimental).

    Nothing falls back: a call mmaemu cannot compute raises the error mmaemu.scaled_mm raises
    (UnsupportedFeatureError for row-wise scales on a profile without a GPU, ReferenceRejectsError for calls torch
    2.7.1 would reject, SplitKUnknownError, ...). See docs/api.md for what it cannot see.

    dispatcher=True also catches aten::_scaled_mm at the dispatcher for the whole context, so
    calls that never pass through Python (TorchScript code) are emulated too. torch.compile does
    not trace under a dispatch mode: compiled code then runs eagerly, and fullgraph=True fails.
    """

    def __init__(self, profile=None, *, backend=None, splitk="auto", dispatcher=False,
                 blockwise=None):
        _refuse_inside_compiled_code()
        super().__init__()
        if profile is not None and not isinstance(profile, str):
            raise TypeError(f"profile must be a str or None, got {type(profile).__name__}")
        if backend is not None and not isinstance(backend, str):
            raise TypeError(f"backend must be a str or None, got {type(backend).__name__}")
        kernel_of(blockwise)     # a name of mmaemu/blockwise.py's kernels, or None
        self.profile, self.backend, self.blockwise = profile, backend, blockwise
        self.splitk = splitk
        self._splitk_text = encode_splitk(splitk, profile)
        if not isinstance(dispatcher, bool):
            raise TypeError(f"dispatcher must be a bool, got {type(dispatcher).__name__}")
        self.dispatcher = dispatcher
        self._catchers = []

    def __enter__(self):
        _refuse_inside_compiled_code()
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
                f"splitk={self.splitk!r}, dispatcher={self.dispatcher!r}, "
                f"blockwise={self.blockwise!r})")

    def entry_point(self, func):
        """How to bind `func` if it is one of torch's FP8 GEMM entry points, else None."""
        try:
            return _ENTRY_POINTS.get(func)
        except TypeError:   # an unhashable callable: not one of them
            return None

    def scaled_mm(self, args, kwargs, binder=entry_points.v1_call):
        """One intercepted call, bound to torch 2.7.1's arguments and computed by mmaemu."""
        c = binder(args, kwargs)
        if not torch.compiler.is_compiling():
            _emulate_backward_of_enclosing_function(self)

        def run(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum):
            return torch.ops.mmaemu.profile_scaled_mm(
                mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum,
                self.profile, self.backend, self._splitk_text, blockwise=self.blockwise)
        args = (c.mat1, c.mat2, c.scale_a, c.scale_b, c.bias, c.scale_result, c.out_dtype,
                c.use_fast_accum)
        return run(*args) if c.out is None else write_out(c.out, run, *args)

    def grouped_mm(self, args, kwargs, binder=entry_points.grouped_call):
        """One intercepted grouped call, computed by mmaemu.scaled_grouped_mm's op."""
        c = binder(args, kwargs)
        if not torch.compiler.is_compiling():
            _emulate_backward_of_enclosing_function(self)
        return torch.ops.mmaemu.profile_scaled_grouped_mm(
            c.mat_a, c.mat_b, c.scale_a, c.scale_b, c.offs, c.bias, c.scale_result, c.out_dtype,
            c.use_fast_accum, self.profile, self.backend)

    def compute(self, args, kwargs, binder):
        """An intercepted call of either kind (entry_points.py marks the grouped binders)."""
        if getattr(binder, "grouped", False):
            return self.grouped_mm(args, kwargs, binder)
        return self.scaled_mm(args, kwargs, binder)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        binder = self.entry_point(func)
        if binder is not None:
            return self.compute(args, kwargs, binder)
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
            out = func(*args, **kwargs)
        # Autograd recorded `func` on a subclass: its backward runs the subclass's Python code
        # again, with no mode on the stack (see _catch_in_backward).
        if isinstance(out, torch.Tensor) and out.grad_fn is not None:
            _catch_in_backward(out.grad_fn, self)
        return out


# ---------------------------------------------------------------------------------------------
# The backward pass. Autograd runs a node's backward with the thread-local state of the
# backward call, not of the forward (torch 2.13: no torch function mode there, and a dispatch
# mode only if one is active around .backward()). So a node recorded under emulate() gets a
# pre-hook that pushes a _DispatchCatcher for that node's backward: its FP8 GEMMs are computed
# by mmaemu with the same profile, backend and splitk, wherever .backward() is called. The
# engine restores its thread-local state after each node (measured on CPU, torch 2.13:
# test_emulate.py::test_backward_catcher_lives_for_one_node), so the catcher never outlives it.

def _catch_in_backward(node, owner):
    if getattr(node, "_mmaemu_catcher", None) is not None:
        return

    def push_catcher(grad_outputs):
        _DispatchCatcher(owner).__enter__()

    node.register_prehook(push_catcher)
    try:
        node._mmaemu_catcher = owner
    except AttributeError:   # a C++ node takes no attributes: one more hook is harmless
        pass


_FUNCTION_APPLY = torch.autograd.function.Function.apply.__func__.__code__


def _emulate_backward_of_enclosing_function(owner, max_depth=64):
    """A call inside a custom autograd.Function's forward (torchao's float8 training linear):
    catch its node's backward too. The node is the `ctx` of the innermost forward(ctx, ...) on
    the Python stack above this call, up to the Function.apply that runs it."""
    frame = sys._getframe(2)
    for _ in range(max_depth):
        if frame is None:
            return
        if frame.f_code is _FUNCTION_APPLY:
            _refuse_unseen_backward(frame)
            return
        if "ctx" in frame.f_code.co_varnames[:frame.f_code.co_argcount]:
            ctx = frame.f_locals.get("ctx")
            if isinstance(ctx, torch.autograd.function.BackwardCFunction):
                _catch_in_backward(ctx, owner)
                return
        frame = frame.f_back


def _refuse_unseen_backward(apply_frame):
    """A Function whose forward takes no ctx (one with a separate setup_context()) gets its node
    only after forward returns, out of emulate()'s reach: refuse when it may record a graph
    (grad mode is off inside forward, so an input that requires grad is taken as the sign)."""
    if torch.is_inference_mode_enabled():
        return
    args = apply_frame.f_locals.get("args", ())
    if any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        raise UnsupportedFeatureError(
            "an FP8 GEMM inside the forward of a custom autograd.Function defined with "
            "setup_context(): emulate() cannot reach its backward pass, which would run torch's "
            "kernel. Run it under torch.inference_mode(), or write forward(ctx, ...)")


class _DispatchCatcher(TorchDispatchMode):
    """Catches aten._scaled_mm at the dispatcher, also inside a subclass's __torch_dispatch__
    (which runs with this mode pushed back on the stack)."""

    def __init__(self, owner):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        binder = self.owner.entry_point(func)
        if binder is not None:
            return self.owner.compute(args, kwargs, binder)
        subclasses = [t for t in types if t is not torch.Tensor]
        if not subclasses:
            return func(*args, **kwargs)
        with self:
            for cls in subclasses:
                out = cls.__torch_dispatch__(func, types, args, kwargs)
                if out is not NotImplemented:
                    return out
        return NotImplemented
