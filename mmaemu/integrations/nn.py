"""FP8 linear layers computed by mmaemu (user guide section 7).

EmulatedFP8Linear quantises its input and weight to E4M3 with the given quantisation scales,
exactly as Transformer Engine's forward pass does for a tensor-wise (delayed-scaling) recipe,
and runs the GEMM through mmaemu with the profile's split-K decision for each input's row count.
BlockwiseFP8Linear is DeepSeek-V3's FP8 linear layer: an E4M3 weight with one fp32 scale per
128 x 128 block (`weight_scale_inv`, as DeepSeek-V3's checkpoints store it), activations quantised
per token and 128 columns as DeepSeek-V3's `act_quant` does, and the block-wise GEMM of the Hopper
kernel `blockwise=` names (mmaemu/blockwise.py).
swap_fp8_linears puts them in place of a model's FP8 linear layers.
"""
from typing import List, Optional, Tuple

import torch

from ..blockwise import GROUP_K, kernel_of
from ..ops import encode_splitk
from ..errors import ReferenceRejectsError, UnsupportedFeatureError
from ..validation import validate_scaled_mm
from .te_state import read_te_extra_state  # noqa: F401  (re-exported: TE's _extra_state reader)

__all__ = ["EmulatedFP8Linear", "BlockwiseFP8Linear", "swap_fp8_linears", "quantize_e4m3",
           "act_quant", "weight_quant", "is_te_linear", "is_deepseek_fp8_linear", "te_scales",
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
        from ..api import explain
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
# DeepSeek-V3's block-wise FP8 recipe.
#
# Its quantisation, read in deepseek-ai/DeepSeek-V3 inference/kernel.py@0623163 (Triton kernels
# act_quant_kernel and weight_quant_kernel): per group, s = max(|x|) / 448 and y = E4M3(x / s),
# in fp32. Three details of those kernels are kept, inferred from Triton's source (not checked on
# a GPU): tl.max skips NaN (core.maximum's default propagate_nan=NONE, a maxNum); the E4M3 cast
# saturates (cvt.rn.satfinite on sm_90: no effect on a finite quotient, which exceeds 448 by
# rounding at most); every NaN becomes the positive E4M3 NaN, 0x7F (the CPU's 0 / 0 is negative).
# Not kept: Triton divides fp32 with div.full.f32 (triton-lang/triton, FDivOpConversion; up to
# 2 ulp from the rounded quotient), and some Triton versions convert fp32 to E4M3 through fp16:
# a quotient that close to an E4M3 rounding midpoint may round the other way on the GPU.

def _cdiv(a, b):
    return -(-a // b)


def _block_size(block_size):
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    return block_size


def _amax_skipping_nan(a: torch.Tensor) -> torch.Tensor:
    """max(a) over the last dimension as tl.max computes it: NaN only where every element is."""
    nan = torch.isnan(a)
    amax = torch.where(nan, torch.zeros_like(a), a).amax(dim=-1)
    return amax.masked_fill(nan.all(dim=-1), float("nan"))


def _quantize_groups(x: torch.Tensor, amax: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(E4M3(x / s), s) with s = amax / 448 in fp32: x [..., groups, size], amax [..., groups]."""
    s = amax / 448.0                       # 448: E4M3's largest finite value
    y = torch.clamp(x / s.unsqueeze(-1), -448.0, 448.0)
    y = y.masked_fill(torch.isnan(y), float("nan"))     # the positive NaN: code 0x7F
    return y.to(torch.float8_e4m3fn), s


def act_quant(x, block_size=GROUP_K):
    """DeepSeek-V3's activation quantisation (inference/kernel.py@0623163, act_quant): for each
    row of x and group of block_size consecutive columns, s = max(|x|) / 448 and y = E4M3(x / s),
    in fp32.

    Returns (y, s): y E4M3 with x's shape, s fp32 [..., x.shape[-1] // block_size], the
    dequantisation scales (x ~ y * s), the GEMM's scale_a. x.shape[-1] must be a multiple of
    block_size, as the reference asserts. An all-zero group gets s = 0 and NaN codes (0 / 0), as
    in the reference: every output the GEMM computes from that row is NaN.
    """
    block_size = _block_size(block_size)
    if x.dim() == 0 or x.shape[-1] % block_size:
        raise ValueError(f"act_quant: the last dimension ({x.shape[-1] if x.dim() else None}) "
                         f"must be a multiple of block_size={block_size} (DeepSeek-V3's "
                         f"act_quant asserts it)")
    y, s = _act_quant_rows(x.reshape(-1, x.shape[-1]), block_size)
    return y.reshape(x.shape), s.reshape(x.shape[:-1] + (s.shape[-1],))


def _act_quant_rows(x: torch.Tensor, block_size: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """act_quant of a 2-D x whose width is a multiple of block_size (forward's, scriptable)."""
    groups = x.float().reshape(x.shape[0], x.shape[1] // block_size, block_size)
    y, s = _quantize_groups(groups, _amax_skipping_nan(groups.abs()))
    return y.reshape(x.shape), s


def weight_quant(weight, block_size=GROUP_K):
    """DeepSeek-V3's weight quantisation (inference/kernel.py@0623163, weight_quant): for each
    block of block_size x block_size elements of the 2-D weight [N, K] (the last ones ragged),
    s = max(|w|) / 448 and y = E4M3(w / s), in fp32.

    Returns (y, s): y E4M3 [N, K] and s fp32 [ceil(N / block_size), ceil(K / block_size)], the
    `weight_scale_inv` of DeepSeek-V3's checkpoints. An all-zero block gets s = 0 and NaN codes,
    as in the reference: every output computed from it is NaN.
    """
    block_size = _block_size(block_size)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise TypeError("weight_quant: weight must be a 2-D tensor [out_features, in_features]")
    N, K = weight.shape
    nb, kb = _cdiv(N, block_size), _cdiv(K, block_size)
    # Ragged blocks padded with zeros, which leave max(|w|) as the block's own (the reference's
    # masked loads give no `other` value for the missing elements).
    w = torch.nn.functional.pad(weight.detach().float(),
                                (0, kb * block_size - K, 0, nb * block_size - N))
    blocks = w.reshape(nb, block_size, kb, block_size).permute(0, 2, 1, 3)
    blocks = blocks.reshape(nb, kb, block_size * block_size)
    y, s = _quantize_groups(blocks, _amax_skipping_nan(blocks.abs()))
    y = y.reshape(nb, kb, block_size, block_size).permute(0, 2, 1, 3)
    return y.reshape(nb * block_size, kb * block_size)[:N, :K].contiguous(), s


class BlockwiseFP8Linear(torch.nn.Module):
    """DeepSeek-V3's FP8 linear layer: y = x @ W.T, W = weight times its 128 x 128 block's scale,
    computed as the Hopper kernel `blockwise` names does (mmaemu/blockwise.py); bf16 output.

    weight:           E4M3 [out_features, in_features];
    weight_scale_inv: fp32 [ceil(out_features / 128), ceil(in_features / 128)], the
                      dequantisation scale of each 128 x 128 block of weight. Both are
                      parameters without grad, named and laid out as in DeepSeek-V3's
                      checkpoints, so load_state_dict reads `<layer>.weight` and
                      `<layer>.weight_scale_inv`. A new layer holds zero codes and unit scales.
    bias:             False (DeepSeek-V3's linear layers have none) or True: a bf16
                      [out_features] parameter added to the bf16 output with one torch add. That
                      is this layer's choice: the block-wise kernels' epilogue bias is not modelled.
    profile, backend: as for mmaemu.scaled_mm; a Hopper profile (default MMAEMU_PROFILE or
                      'hopper').
    blockwise:        the kernel: 'deepgemm' (DeepGEMM's sm90_fp8_gemm_1d2d, default), 'cutlass',
                      or None (torch._scaled_mm's own path, cuBLASLt: inferred, experimental).

    forward(x): x [..., in_features] of any floating dtype is quantised per token in 1 x 128
    groups by act_quant (DeepSeek-V3's act_quant), then multiplied by mmaemu.scaled_mm with the
    block-wise scales; it returns bf16 [..., out_features]. Inference only, as EmulatedFP8Linear;
    works with torch.compile (fullgraph), torch.export and torch.jit.script. device: where the
    parameters are made.

    Refused at construction: in_features not a multiple of 128 (ValueError: act_quant's groups),
    and what torch or the kernel refuses for every input (out_features not a multiple of 16:
    ReferenceRejectsError with torch's message; a profile that is not Hopper:
    UnsupportedFeatureError).
    """

    in_features: int
    out_features: int
    profile: Optional[str]
    backend: Optional[str]
    blockwise: Optional[str]

    def __init__(self, in_features, out_features, bias=False, *, profile=None, backend=None,
                 blockwise="deepgemm", device=None):
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be a bool (a bf16 bias added after the GEMM), got "
                            f"{type(bias).__name__}")
        if profile is not None and not isinstance(profile, str):
            raise TypeError(f"profile must be a str or None, got {type(profile).__name__}")
        if backend is not None and not isinstance(backend, str):
            raise TypeError(f"backend must be a str or None, got {type(backend).__name__}")
        kernel_of(blockwise)
        if in_features % GROUP_K:
            raise ValueError(f"BlockwiseFP8Linear(in_features={in_features}): in_features must "
                             f"be a multiple of {GROUP_K}: act_quant quantises the input in "
                             f"groups of {GROUP_K} columns (DeepSeek-V3's act_quant asserts it)")
        self.in_features, self.out_features = in_features, out_features
        self.profile, self.backend, self.blockwise = profile, backend, blockwise
        self.weight = torch.nn.Parameter(
            torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn, device=device),
            requires_grad=False)
        self.weight_scale_inv = torch.nn.Parameter(
            torch.ones(_cdiv(out_features, GROUP_K), _cdiv(in_features, GROUP_K),
                       dtype=torch.float32, device=device), requires_grad=False)
        if bias:
            self.bias = torch.nn.Parameter(
                torch.zeros(out_features, dtype=torch.bfloat16, device=device),
                requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self._check_gemm()

    def _where(self):
        return f"BlockwiseFP8Linear(in_features={self.in_features}, " \
               f"out_features={self.out_features})"

    def _check_gemm(self):
        """The GEMM's refusals for every input, on meta tensors of 16 rows, with the class
        forward would raise: torch's checks, the kernel's, and the profile's."""
        from ..api import explain_shape
        K, N = self.in_features, self.out_features
        meta = torch.device("meta")
        xq = torch.empty(16, K, dtype=torch.float8_e4m3fn, device=meta)
        scale_a = torch.empty(_cdiv(K, GROUP_K), 16, device=meta).t()
        try:
            v = validate_scaled_mm(xq, self.weight.to(meta).t(), scale_a,
                                   self.weight_scale_inv.to(meta).t(), None, None,
                                   torch.bfloat16, False, self.blockwise)
            device = self.weight.device if self.weight.device.type in ("cpu", "cuda") else "cpu"
            explain_shape(16, N, K, "e4m3", "e4m3", torch.bfloat16, False, profile=self.profile,
                          backend=self.backend, device=device, scaling="blockwise",
                          blockwise=v.blockwise)
        except (ReferenceRejectsError, UnsupportedFeatureError) as e:
            raise type(e)(f"{self._where()}: the block-wise GEMM (blockwise="
                          f"{self.blockwise!r}) is refused for every input: {e}") from None

    @classmethod
    def from_fp8(cls, weight, weight_scale_inv, bias=None, *, profile=None, backend=None,
                 blockwise="deepgemm"):
        """The layer holding these tensors (copies): weight E4M3 [N, K], weight_scale_inv fp32
        [ceil(N / 128), ceil(K / 128)] (a DeepSeek-V3 checkpoint's pair), bias None or [N]
        (stored as bf16)."""
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2 \
                or weight.dtype != torch.float8_e4m3fn:
            got = f"{weight.dtype} with {weight.dim()} dimensions" \
                if isinstance(weight, torch.Tensor) else type(weight).__name__
            raise TypeError(f"weight must be a 2-D torch.float8_e4m3fn tensor [out_features, "
                            f"in_features], got {got}")
        N, K = int(weight.shape[0]), int(weight.shape[1])
        want = (_cdiv(N, GROUP_K), _cdiv(K, GROUP_K))
        if not isinstance(weight_scale_inv, torch.Tensor) \
                or weight_scale_inv.dtype != torch.float32:
            got = weight_scale_inv.dtype if isinstance(weight_scale_inv, torch.Tensor) \
                else type(weight_scale_inv).__name__
            raise TypeError(f"weight_scale_inv must be a float32 tensor, got {got}")
        if tuple(weight_scale_inv.shape) != want:
            raise ValueError(f"weight_scale_inv must have shape {want} (one scale per 128 x 128 "
                             f"block of the [{N}, {K}] weight), got "
                             f"{tuple(weight_scale_inv.shape)}")
        if bias is not None and (not isinstance(bias, torch.Tensor)
                                 or tuple(bias.shape) != (N,)):
            raise ValueError(f"bias must be None or a tensor of shape ({N},)")
        layer = cls(K, N, bias is not None, profile=profile, backend=backend,
                    blockwise=blockwise, device=weight.device)
        with torch.no_grad():
            layer.weight.copy_(weight.detach())
            layer.weight_scale_inv.copy_(weight_scale_inv.detach())
            if bias is not None:
                layer.bias.copy_(bias.detach().to(torch.bfloat16))
        return layer

    @classmethod
    def from_float(cls, linear, *, profile=None, backend=None, blockwise="deepgemm",
                   bias="raise"):
        """The layer of an nn.Linear (or any module with a high-precision 2-D weight), its weight
        quantised by weight_quant as DeepSeek-V3's weight_quant does (128 x 128 blocks,
        amax / 448). bias="raise" (default): a layer with a bias raises
        UnsupportedFeatureError; bias="after": it is added to the bf16 output (this layer's
        choice; DeepSeek-V3's linear layers have none)."""
        weight = getattr(linear, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise TypeError(f"{type(linear).__name__} has no 2-D weight; expected an nn.Linear")
        if not weight.is_floating_point() or weight.element_size() == 1:
            raise TypeError(f"the weight must be a high-precision floating tensor (it is "
                            f"quantised here), got {weight.dtype}; for FP8 weights with their "
                            f"scales use BlockwiseFP8Linear.from_fp8")
        b = _blockwise_bias(_linear_bias(linear), bias)
        codes, scales = weight_quant(weight, GROUP_K)
        return cls.from_fp8(codes, scales, b, profile=profile, backend=backend,
                            blockwise=blockwise)

    @torch.jit.unused
    def explain(self, x):
        """mmaemu.explain for the GEMM that forward(x) runs (nothing is computed)."""
        from ..api import explain
        rows = x.numel() // self.in_features if x.dim() > 0 else 0
        xq = torch.zeros(rows, self.in_features, dtype=torch.float8_e4m3fn,
                         device=self.weight.device)
        scale_a = torch.ones(rows, _cdiv(self.in_features, GROUP_K), device=xq.device)
        return explain(xq, self.weight.t(), scale_a.t().contiguous().t(),
                       self.weight_scale_inv.t(), out_dtype=torch.bfloat16,
                       profile=self.profile, backend=self.backend, blockwise=self.blockwise)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, blockwise={self.blockwise!r}, "
                f"profile={self.profile!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError("BlockwiseFP8Linear: the input's last dimension must be in_features")
        # 128: GROUP_K, act_quant's 1 x 128 groups (a literal for TorchScript)
        xq, scale = _act_quant_rows(x.reshape(-1, self.in_features), 128)
        # scale_a M-major: the layout torch's own block-wise path requires (the others read any)
        y = torch.ops.mmaemu.profile_scaled_mm(
            xq, self.weight.t(), scale.t().contiguous().t(), self.weight_scale_inv.t(), None,
            None, torch.bfloat16, False, self.profile, self.backend, "auto", None, 0,
            self.blockwise)
        bias = self.bias
        if bias is not None:
            y = y + bias
        shape: List[int] = list(x.shape[:-1])
        shape.append(self.out_features)
        return y.reshape(shape)


def _blockwise_bias(b, bias):
    """The bias a BlockwiseFP8Linear gets for a layer's bias b under swap_fp8_linears' and
    from_float's `bias` argument."""
    if bias not in ("raise", "after", "fused"):
        raise ValueError(f"bias must be 'raise', 'after' or 'fused', got {bias!r}")
    if b is None:
        return None
    if bias == "raise":
        raise UnsupportedFeatureError(
            "mmaemu: this linear layer has a bias (DeepSeek-V3's have none): pass bias='after' "
            "to add it to the bf16 output after the GEMM")
    if bias == "fused":
        raise UnsupportedFeatureError(
            "mmaemu: a bias fused into a block-wise GEMM: the kernels' epilogue bias is not "
            "modelled; bias='after' adds it to the bf16 output after the GEMM")
    return b


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


def is_deepseek_fp8_linear(module):
    """True for a DeepSeek-convention FP8 linear layer: a module with a `weight_scale_inv`
    tensor beside its `weight` (DeepSeek-V3's checkpoints, transformers' FP8Linear), other than
    a BlockwiseFP8Linear. Its weight and scales are checked when it is swapped."""
    return (isinstance(module, torch.nn.Module) and not isinstance(module, BlockwiseFP8Linear)
            and isinstance(getattr(module, "weight_scale_inv", None), torch.Tensor)
            and isinstance(getattr(module, "weight", None), torch.Tensor))


def swap_fp8_linears(model, scales=None, profile="hopper-te", *, exclude=(), bias="raise",
                     out_dtype=torch.bfloat16, use_fast_accum=True, backend=None,
                     splitk="auto", blockwise="deepgemm"):
    """Replaces the FP8 linear layers of `model` in place with EmulatedFP8Linear (tensor-wise
    scales) or BlockwiseFP8Linear (DeepSeek's block-wise scales).

    Which layers are FP8: every Transformer Engine Linear, every DeepSeek-convention FP8 linear
    (is_deepseek_fp8_linear: an E4M3 `weight` with its `weight_scale_inv`), and the layers
    named in `scales`. A plain nn.Linear carries no FP8 state, so it is FP8 only when `scales`
    says so.

    scales:  {qualified module name: (scale_x, scale_w)}. Every module named here that has a
             2-D `weight` [out, in] (an nn.Linear, vortex's TE-less TELinear, ...) is replaced.
             Every Transformer Engine Linear is replaced too, with its scales from here or, if
             absent, from its delayed-scaling state (te_scales); a TE Linear with neither
             raises ValueError. A DeepSeek-convention layer carries its own block scales: naming
             it here raises ValueError.
    exclude: names of TE Linear or DeepSeek-convention layers to leave alone (e.g. ones that
             never run in FP8).
    bias:    "raise", "fused" or "after", as for EmulatedFP8Linear.from_linear; a block-wise
             layer takes only "after" for a layer with a bias ("fused" raises
             UnsupportedFeatureError: the kernels' epilogue bias is not modelled).
    out_dtype, use_fast_accum, splitk: those of the EmulatedFP8Linear layers. A BlockwiseFP8Linear
             writes bf16 (any other out_dtype raises ValueError for it), never uses fast
             accumulation and never splits K, as the block-wise kernels do.
    backend: for every replacement. blockwise: the kernel of the BlockwiseFP8Linear layers
             ('deepgemm', 'cutlass', or None: torch's own cuBLASLt path).

    Returns the replaced names, in model order. All or nothing: every layer is checked and its
    replacement built before any is put in place, so on an error the model is unchanged;
    every error about a layer names it ("swap_fp8_linears: layer 'blocks.0.proj': ...").
    A name in `scales` that is not a linear layer of the model raises KeyError, so a typo cannot
    leave a layer unemulated; a model with nothing to replace (no TE Linear, no
    DeepSeek-convention layer, no `scales`, nothing excluded) raises ValueError, so a model of
    plain nn.Linear layers is not left unemulated.
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
        elif is_deepseek_fp8_linear(module):
            if name in scales:
                raise ValueError(f"swap_fp8_linears: layer '{name}': a DeepSeek-convention FP8 "
                                 f"linear (weight with weight_scale_inv) carries its own block "
                                 f"scales; do not name it in `scales`")
            plan.append((name, module, None))     # None: block-wise, its scales its own
        elif name in scales and _has_2d_weight(module):
            plan.append((name, module, scales[name]))
    found = {name for name, _, pair in plan if pair is not None}
    missing = sorted(set(scales) - found)
    if missing:
        raise KeyError(f"swap_fp8_linears: no linear layer (a module with a 2-D weight) named "
                       f"{missing} in the model (excluded names count as missing)")
    if not plan and not excluded:
        linears = [n or "(the model)" for n, m in model.named_modules() if _has_2d_weight(m)]
        shown = ", ".join(repr(n) for n in linears[:4]) + (", ..." if len(linears) > 4 else "")
        raise ValueError(
            "swap_fp8_linears: found no FP8 linear layer to replace: it looks for Transformer "
            "Engine Linear layers, DeepSeek-convention FP8 linears (a weight with "
            "weight_scale_inv) and the layers named in `scales`, and the model has no "
            "TE Linear, no DeepSeek-convention layer and `scales` is empty. "
            + (f"Its {len(linears)} plain linear layer(s) ({shown}) carry no FP8 scales: name "
               f"the FP8 ones with their quantisation scales, scales={{name: (scale_x, "
               f"scale_w)}} (x_fp8 = x * scale_x)." if linears else
               "It has no module with a 2-D weight either."))
    built = []
    for name, module, pair in plan:
        if name == "":
            raise ValueError("swap_fp8_linears: the model itself is a linear layer: use "
                             "EmulatedFP8Linear.from_linear(model, scale_x, scale_w) or "
                             "BlockwiseFP8Linear.from_fp8(model.weight, model.weight_scale_inv)")
        try:
            if pair is None:
                new = _blockwise_twin(module, profile, bias, out_dtype, backend, blockwise)
            else:
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


def _blockwise_twin(module, profile, bias, out_dtype, backend, blockwise):
    """The BlockwiseFP8Linear of a DeepSeek-convention FP8 linear layer."""
    if out_dtype != torch.bfloat16:
        raise ValueError(f"out_dtype={out_dtype}: a BlockwiseFP8Linear writes bf16, as "
                         f"DeepGEMM's kernel does")
    b = _blockwise_bias(_linear_bias(module), bias)
    return BlockwiseFP8Linear.from_fp8(module.weight, module.weight_scale_inv, b,
                                       profile=profile, backend=backend, blockwise=blockwise)
