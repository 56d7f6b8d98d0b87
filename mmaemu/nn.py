"""FP8 linear layers computed by mmaemu (user guide section 7).

EmulatedFP8Linear quantises its input and weight to E4M3 with the given quantisation scales,
exactly as Transformer Engine's forward pass does for a tensor-wise (delayed-scaling) recipe,
and runs the GEMM through mmaemu with the profile's split-K decision for each input's row count.
swap_fp8_linears puts it in place of a model's FP8 linear layers.
"""
from typing import List, Optional

import torch

from .ops import encode_splitk
from .errors import ReferenceRejectsError, UnsupportedFeatureError
from .validation import validate_scaled_mm
from .te_state import read_te_extra_state  # noqa: F401  (re-exported: TE's _extra_state reader)

__all__ = ["EmulatedFP8Linear", "swap_fp8_linears", "quantize_e4m3", "is_te_linear", "te_scales",
           "read_te_extra_state"]



def quantize_e4m3(x, scale):
    """E4M3 codes of x * scale: an fp32 multiply, saturation to +-448, then the round-to-nearest
    cast (NaN stays NaN). The E4M3 cast of Transformer Engine's delayed scaling saturates the same
    way (inferred from its source, not checked on a GPU)."""
    return torch.clamp(x.float() * scale, -448.0, 448.0).to(torch.float8_e4m3fn)  # 448: E4M3 max


def _as_scale(value, name, device):
    """A quantisation scale as a 0-dim fp32 tensor: finite and > 0."""
    if isinstance(value, torch.Tensor):
        if value.dtype != torch.float32 or value.numel() != 1:
            raise TypeError(f"{name} must be a float32 tensor with one element (or a Python "
                            f"number), got {value.dtype} with {value.numel()} elements")
        t = value.detach().reshape(()).to(device)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        t = torch.tensor(float(value), dtype=torch.float32, device=device)
    else:
        raise TypeError(f"{name} must be a float32 tensor or a Python number, "
                        f"got {type(value).__name__}")
    v = float(t)
    if not (v > 0.0 and v != float("inf")):
        raise ValueError(f"{name} must be finite and > 0, got {v}")
    return t.clone()


class EmulatedFP8Linear(torch.nn.Module):
    """y = x @ W.T with E4M3 operands, as the profile's reference platform computes it.

    weight:   [out_features, in_features], any floating dtype; it is quantised here.
    scale_x, scale_w: the quantisation scales (x_fp8 = x * scale_x), float32 tensors of one
              element or Python numbers; the GEMM gets their reciprocals, as in TE.
    profile:  default "hopper-te" (Transformer Engine 2.3 on an H100 PCIe).
    bias:     None, or a [out_features] tensor: added after the GEMM with one torch add in
              out_dtype, or with fuse_bias=True passed to the GEMM (torch._scaled_mm's bias,
              added in its epilogue; stored as out_dtype, bf16 for FP8 outputs).
    out_dtype, use_fast_accum: those of the GEMM; TE's forward pass uses bf16 and True.
    backend, splitk: as for mmaemu.scaled_mm.

    A layer whose GEMM torch._scaled_mm rejects for every input raises ReferenceRejectsError
    here, with torch's message, rather than in forward: in_features (K) and out_features (N)
    must be multiples of 16, and a fused bias must have the dtype torch requires.

    Inference only: forward raises UnsupportedFeatureError for an input that requires grad
    while grad mode is on (the planning op's refusal of a mat1 that requires grad, also under
    torch.compile). Works with torch.compile (fullgraph), torch.export and torch.jit.script.
    """

    in_features: int
    out_features: int
    profile: str
    backend: Optional[str]
    splitk_text: str
    out_dtype: torch.dtype
    use_fast_accum: bool
    fuse_bias: bool

    def __init__(self, weight, scale_x, scale_w, profile="hopper-te", *, bias=None,
                 out_dtype=torch.bfloat16, use_fast_accum=True, backend=None, splitk="auto",
                 fuse_bias=False):
        super().__init__()
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise TypeError("weight must be a 2-D tensor [out_features, in_features]")
        if not weight.is_floating_point() or weight.element_size() == 1:
            raise TypeError(f"weight must be a high-precision floating tensor (it is quantised "
                            f"here), got {weight.dtype}")
        if not isinstance(profile, str):
            raise TypeError(f"profile must be a str, got {type(profile).__name__}")
        if backend is not None and not isinstance(backend, str):
            raise TypeError(f"backend must be a str or None, got {type(backend).__name__}")
        if not isinstance(out_dtype, torch.dtype):
            raise TypeError(f"out_dtype must be a torch.dtype, got {type(out_dtype).__name__}")
        device = weight.device
        self.out_features, self.in_features = int(weight.shape[0]), int(weight.shape[1])
        self.profile = profile
        self.backend = backend
        self.splitk = splitk
        self.splitk_text = encode_splitk(splitk, profile)
        self.out_dtype = out_dtype
        self.use_fast_accum = bool(use_fast_accum)
        self.fuse_bias = bool(fuse_bias) and bias is not None
        self.register_buffer("scale_x", _as_scale(scale_x, "scale_x", device))
        self.register_buffer("scale_w", _as_scale(scale_w, "scale_w", device))
        # torch._scaled_mm takes dequantisation scales: the fp32 reciprocals, as TE's scale_inv.
        self.register_buffer("scale_x_inv", torch.reciprocal(self.scale_x))
        self.register_buffer("scale_w_inv", torch.reciprocal(self.scale_w))
        with torch.no_grad():
            self.register_buffer("wq", quantize_e4m3(weight.detach(), self.scale_w))
        if bias is not None:
            if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (self.out_features,):
                raise ValueError(f"bias must be a tensor of shape ({self.out_features},)")
            fp8_out = out_dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
            bias_dtype = torch.bfloat16 if self.fuse_bias and fp8_out else out_dtype
            self.register_buffer("bias", bias.detach().to(device=device, dtype=bias_dtype).clone())
        else:
            self.register_buffer("bias", None)
        self._check_gemm()

    def _check_gemm(self):
        """torch._scaled_mm's checks of the GEMM forward runs, on meta tensors of 16 rows: what
        does not depend on the input (K and N divisible by 16, the fused bias's dtype) fails
        here, at construction, with torch's message and the same class forward would raise."""
        meta = dict(device="meta")
        xq = torch.empty(16, self.in_features, dtype=torch.float8_e4m3fn, **meta)
        wq = torch.empty(self.out_features, self.in_features, dtype=torch.float8_e4m3fn, **meta)
        one = torch.empty((), dtype=torch.float32, **meta)
        bias = self.bias.to(**meta) if self.fuse_bias else None
        try:
            validate_scaled_mm(xq, wq.t(), one, one, bias, None, self.out_dtype,
                               self.use_fast_accum)
        except ReferenceRejectsError as e:
            raise ReferenceRejectsError(
                f"EmulatedFP8Linear(in_features={self.in_features}, out_features="
                f"{self.out_features}): torch._scaled_mm rejects this layer's GEMM for every "
                f"input (here checked with 16 rows): {e}") from None

    @classmethod
    def from_linear(cls, linear, scale_x, scale_w, profile="hopper-te", *, bias="raise",
                    out_dtype=torch.bfloat16, use_fast_accum=True, backend=None, splitk="auto"):
        """The emulated twin of an nn.Linear (or a Transformer Engine Linear) and its scales.

        bias="raise" (default): a layer with a bias raises UnsupportedFeatureError: say where
        the reference adds it.
        bias="fused": it is passed to the GEMM, as torch._scaled_mm(..., bias=...) and torchao
        do (cuBLASLt's epilogue bias; its rounding order is inferred, docs/semantics.md).
        bias="after": it is added after the GEMM in out_dtype (as TE and fp32 models do).
        """
        if bias not in ("raise", "after", "fused"):
            raise ValueError(f"bias must be 'raise', 'after' or 'fused', got {bias!r}")
        weight = getattr(linear, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise TypeError(f"{type(linear).__name__} has no 2-D weight; expected an nn.Linear "
                            f"or a Transformer Engine Linear")
        b = _linear_bias(linear)
        if b is not None and bias == "raise":
            raise UnsupportedFeatureError(
                "mmaemu: this linear layer has a bias: pass bias='fused' if the reference passes "
                "it to torch._scaled_mm (its GEMM epilogue adds it), or bias='after' if the "
                "reference adds it after the GEMM (limitations.md).")
        return cls(weight, scale_x, scale_w, profile, bias=b, out_dtype=out_dtype,
                   use_fast_accum=use_fast_accum, backend=backend, splitk=splitk,
                   fuse_bias=bias == "fused")

    @torch.jit.unused
    def explain(self, x):
        """mmaemu.explain for the GEMM that forward(x) runs: a CallPlan with the profile's
        split-K decision for this input's row count (nothing is computed)."""
        from . import explain   # the package-level mmaemu.explain
        rows = x.numel() // self.in_features if x.dim() > 0 else 0
        xq = torch.zeros(rows, self.in_features, dtype=torch.float8_e4m3fn, device=self.wq.device)
        return explain(xq, self.wq.t(), self.scale_x_inv, self.scale_w_inv,
                       self.bias if self.fuse_bias else None, None,
                       self.out_dtype, self.use_fast_accum, profile=self.profile,
                       backend=self.backend, splitk=self.splitk)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"profile={self.profile!r}, bias={self.bias is not None}, "
                f"fuse_bias={self.fuse_bias}, "
                f"out_dtype={self.out_dtype}, use_fast_accum={self.use_fast_accum}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError("EmulatedFP8Linear: the input's last dimension must be in_features")
        # An input that requires grad makes xq require grad: the planning op refuses it when it
        # runs (UnsupportedFeatureError, "... mat1 requires grad ..."), also in compiled code.
        xq = quantize_e4m3(x, self.scale_x).reshape(-1, self.in_features)
        bias = self.bias
        fused: Optional[torch.Tensor] = None
        if self.fuse_bias:
            fused = bias
        y = torch.ops.mmaemu.profile_scaled_mm(
            xq, self.wq.t(), self.scale_x_inv, self.scale_w_inv, fused, None, self.out_dtype,
            self.use_fast_accum, self.profile, self.backend, self.splitk_text)
        if bias is not None and not self.fuse_bias:
            y = y + bias
        shape: List[int] = list(x.shape[:-1])
        shape.append(self.out_features)
        return y.reshape(shape)


# ---------------------------------------------------------------------------------------------
# Finding and swapping FP8 linear layers.

def _linear_bias(module):
    """The layer's bias, or None. Transformer Engine keeps an empty tensor when bias=False."""
    if getattr(module, "use_bias", True) is False:
        return None
    b = getattr(module, "bias", None)
    if isinstance(b, torch.Tensor) and b.numel() > 0:
        return b
    return None


def _has_2d_weight(module):
    w = getattr(module, "weight", None)
    return isinstance(w, torch.Tensor) and w.dim() == 2 and isinstance(module, torch.nn.Module)


def is_te_linear(module):
    """True for Transformer Engine's Linear (transformer_engine.pytorch.Linear) and its
    subclasses, recognised by name so that TE need not be importable."""
    return any(c.__name__ == "Linear" and c.__module__.split(".")[0] == "transformer_engine"
               for c in type(module).__mro__)


def te_scales(module):
    """(scale_x, scale_w) from a TE Linear's delayed-scaling state: fp8_meta["scaling_fwd"].scale
    at GEMM1_INPUT (0) and GEMM1_WEIGHT (1). These are the scales the module's next forward pass
    uses; after a forward pass TE updates them from its amax history."""
    meta = getattr(module, "fp8_meta", None)
    state = meta.get("scaling_fwd") if isinstance(meta, dict) else None
    scale = getattr(state, "scale", None)
    if not isinstance(scale, torch.Tensor) or scale.numel() < 2:
        return None
    return scale[0].detach().float().cpu().clone(), scale[1].detach().float().cpu().clone()


def _naming(name, e):
    """e's class with its message prefixed by the layer's qualified name."""
    msg = e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else str(e)
    try:
        return type(e)(f"swap_fp8_linears: layer '{name}': {msg}")
    except Exception:  # noqa: BLE001  (a class that takes other arguments: keep it as it is)
        return e


def swap_fp8_linears(model, scales=None, profile="hopper-te", *, exclude=(), bias="raise",
                     out_dtype=torch.bfloat16, use_fast_accum=True, backend=None,
                     splitk="auto"):
    """Replaces the FP8 linear layers of `model` in place with EmulatedFP8Linear.

    Which layers are FP8: every Transformer Engine Linear, and the layers named in `scales`.
    A plain nn.Linear carries no FP8 state, so it is FP8 only when `scales` says so.

    scales:  {qualified module name: (scale_x, scale_w)}. Every module named here that has a
             2-D `weight` [out, in] (an nn.Linear, vortex's TE-less TELinear, ...) is replaced.
             Every Transformer Engine Linear is replaced too, with its scales from here or, if
             absent, from its delayed-scaling state (te_scales); a TE Linear with neither
             raises ValueError.
    exclude: names of TE Linear layers to leave alone (e.g. ones that never run in FP8).
    bias, out_dtype, use_fast_accum, backend, splitk: as for EmulatedFP8Linear.from_linear
             (bias: "raise", "fused" or "after").

    Returns the replaced names, in model order. All or nothing: every layer is checked and its
    EmulatedFP8Linear built before any is put in place, so on an error the model is unchanged;
    every error about a layer names it ("swap_fp8_linears: layer 'blocks.0.proj': ...").
    A name in `scales` that is not a linear layer of the model raises KeyError, so a typo cannot
    leave a layer unemulated; a model with nothing to replace (no TE Linear, no `scales`, nothing
    excluded) raises ValueError, so a model of plain nn.Linear layers is not left unemulated.
    """
    scales = dict(scales or {})
    exclude = set(exclude)
    plan, excluded = [], []
    for name, module in model.named_modules():
        if name in exclude:
            excluded.append(name)
            continue
        if is_te_linear(module):
            if getattr(module, "return_bias", False):
                raise UnsupportedFeatureError(
                    f"swap_fp8_linears: layer '{name}': a TE Linear with return_bias=True: "
                    f"its bias is left to the caller to fuse, which EmulatedFP8Linear does not "
                    f"model")
            if getattr(module, "tp_size", 1) != 1:
                raise UnsupportedFeatureError(f"swap_fp8_linears: layer '{name}': a "
                                              f"tensor-parallel TE Linear "
                                              f"(tp_size={module.tp_size})")
            pair = scales.get(name) or te_scales(module)
            if pair is None:
                raise ValueError(f"swap_fp8_linears: layer '{name}': a TE Linear with no "
                                 f"delayed-scaling state (it has not run under fp8_autocast); "
                                 f"pass scales['{name}'] or exclude it")
            plan.append((name, module, pair))
        elif name in scales and _has_2d_weight(module):
            plan.append((name, module, scales[name]))
    found = {name for name, _, _ in plan}
    missing = sorted(set(scales) - found)
    if missing:
        raise KeyError(f"swap_fp8_linears: no linear layer (a module with a 2-D weight) named "
                       f"{missing} in the model (excluded names count as missing)")
    if not plan and not excluded:
        linears = [n or "(the model)" for n, m in model.named_modules() if _has_2d_weight(m)]
        shown = ", ".join(repr(n) for n in linears[:4]) + (", ..." if len(linears) > 4 else "")
        raise ValueError(
            "swap_fp8_linears: found no FP8 linear layer to replace: it looks for Transformer "
            "Engine Linear layers and for the layers named in `scales`, and the model has no "
            "TE Linear and `scales` is empty. "
            + (f"Its {len(linears)} plain linear layer(s) ({shown}) carry no FP8 scales: name "
               f"the FP8 ones with their quantisation scales, scales={{name: (scale_x, "
               f"scale_w)}} (x_fp8 = x * scale_x)." if linears else
               "It has no module with a 2-D weight either."))
    built = []
    for name, module, pair in plan:
        if name == "":
            raise ValueError("swap_fp8_linears: the model itself is a linear layer: use "
                             "EmulatedFP8Linear.from_linear(model, scale_x, scale_w)")
        try:
            scale_x, scale_w = pair
            new = EmulatedFP8Linear.from_linear(module, scale_x, scale_w, profile, bias=bias,
                                                out_dtype=out_dtype,
                                                use_fast_accum=use_fast_accum,
                                                backend=backend, splitk=splitk)
        except Exception as e:  # noqa: BLE001  (re-raised as its own class, with the name)
            raise _naming(name, e) from e
        built.append((name, new))
    for name, new in built:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, new)
    return [name for name, _ in built]
