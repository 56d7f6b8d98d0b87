"""Transformer Engine's delayed-scaling FP8 linear layer, with the GEMM computed by mmaemu.

TE (DelayedScaling recipe) quantises a Linear's input and weight with scales it keeps per module
and updates them from a history of amax values. What this models, read in TE 2.3's source
(not run on a GPU by this project):
- forward (module/linear.py with Float8Quantizer): x_fp8 = sat(x * scale[0]),
  w_fp8 = sat(w * scale[1]), both with the scales in effect before the call; the GEMM gets
  their fp32 reciprocals. The cast kernel (common/util/vectorized_pointwise.h) folds
  max(|v|) with fmaxf (NaN ignored) into amax_history[0] by atomicMax, so row 0 holds the
  largest amax since the last update.
- update (pytorch/fp8.py fp8_autocast_exit -> common/recipe/delayed_scaling.cu kernel_bulk):
  only when the outermost fp8_autocast exits with grad mode on. With last = amax_history[0]:
  if last != 0, the history rolls (row i <- row i+1, the last row <- last, row 0 <- 0);
  amax = max over the rolled rows and the dropped row 1 ("max") or last ("most_recent");
  scale = (fp8_max * 2^-margin) / amax if amax is finite and > 0, else the old scale; an
  infinite result becomes FLT_MAX. vortex wraps each projection call in its own fp8_autocast,
  so the update follows every call made with grad mode on. The update covers every module in
  TE's global amax buffer for that recipe (key str(recipe): all of vortex's projections), each
  module joining at its first forward call; one whose row 0 is 0 is left as it is, but one
  that ran under no_grad since its last update is updated at another module's exit. `group`
  models that buffer (emulate_fp8_projections shares one per model). Under torch.no_grad() /
  inference_mode() (Evo 2's forward, scoring and generation) the scales never change.
- initial state (fp8.py DelayedScalingRecipeState): scales 1, a zero history; Float8Quantizer i
  takes scale[i] and amax_history[0][i].
- a history of another length (a checkpoint's) is cut to its first rows or padded with zero
  rows (module/base.py adjust_amax_history_length).
"""
import torch

from .nn import EmulatedFP8Linear, quantize_e4m3

__all__ = ["DelayedScalingState", "DelayedScalingFP8Linear"]

E4M3_MAX = 448.0
_FLT_MAX = torch.finfo(torch.float32).max


def amax_of(t):
    """max(|t|) in fp32 with NaN ignored (TE's fmaxf fold); 0 for an empty or all-NaN tensor."""
    a = t.detach().float().abs()
    a = torch.where(torch.isnan(a), torch.zeros((), dtype=torch.float32), a)
    return a.max() if a.numel() else torch.zeros((), dtype=torch.float32)


class DelayedScalingState:
    """scale [2] (input, weight) and amax_history [length, 2] of one TE Linear's forward pass."""

    def __init__(self, length=16, algo="max", margin=0, scale=None, amax_history=None):
        if algo not in ("max", "most_recent"):
            raise ValueError(f"amax_compute_algo must be 'max' or 'most_recent', got {algo!r}")
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"amax_history_len must be a positive int, got {length!r}")
        self.algo, self.margin, self.length = algo, margin, length
        # TE's initial state: scales of one, an all-zero history.
        self.scale = torch.ones(2) if scale is None else scale.detach().float()[:2].clone()
        history = torch.zeros(length, 2) if amax_history is None else \
            amax_history.detach().float()[:, :2].clone()
        if history.shape[0] > length:
            history = history[:length].clone()
        elif history.shape[0] < length:
            history = torch.nn.functional.pad(history, (0, 0, 0, length - history.shape[0]))
        self.amax_history = history
        if self.scale.shape != (2,) or not bool(torch.isfinite(self.scale).all()) \
                or not bool((self.scale > 0).all()):
            raise ValueError(f"scales must be finite and > 0, got {self.scale.tolist()}")

    @classmethod
    def from_te(cls, te_state, length=16, algo="max", margin=0):
        """From mmaemu.te_state.read_te_extra_state's result (GEMM 0's input and weight)."""
        return cls(length, algo, margin, te_state.scale[:2], te_state.amax_history[:, :2])

    def record(self, index, amax):
        """The cast kernel's atomicMax of this call's amax into row 0."""
        self.amax_history[0, index] = torch.maximum(self.amax_history[0, index], amax)

    def update(self):
        """The amax-and-scale update that follows an FP8 region run with grad mode on."""
        scaled_max = torch.tensor(E4M3_MAX * 2.0 ** -self.margin, dtype=torch.float32)
        for i in range(2):
            col = self.amax_history[:, i]
            last = col[0].clone()
            if float(last) != 0.0:
                rolled = torch.cat([col[1:], last.reshape(1)])
                amax = rolled.max()                   # includes the row dropped from position 1
                rolled[0] = 0.0
                col.copy_(rolled)
            else:
                amax = torch.zeros((), dtype=torch.float32)
            if self.algo == "most_recent":
                amax = last
            a = float(amax)
            if a > 0.0 and a != float("inf"):
                s = scaled_max / amax                 # one fp32 division
                if torch.isinf(s):
                    s = torch.tensor(_FLT_MAX, dtype=torch.float32)
                self.scale[i] = s


class DelayedScalingFP8Linear(torch.nn.Module):
    """A TE Linear under DelayedScaling, inference only: each call quantises with the current
    scales and computes the GEMM as EmulatedFP8Linear does (profile, splitk, out_dtype,
    use_fast_accum as there); calls made with grad mode on then update the scales of every
    state in `group` (a list shared by the layers whose TE modules share a recipe; default:
    this layer alone) as TE does."""

    def __init__(self, weight, state=None, profile="hopper-te", *, group=None, bias=None,
                 out_dtype=torch.bfloat16, use_fast_accum=True, backend=None, splitk="auto"):
        super().__init__()
        self.state = state if state is not None else DelayedScalingState()
        # TE's global amax buffer: the states updated together when an FP8 region exits.
        self.group = group if group is not None else []
        self.register_buffer("weight", weight.detach().clone())
        self.gemm = EmulatedFP8Linear(self.weight, self.state.scale[0], self.state.scale[1],
                                      profile, bias=bias, out_dtype=out_dtype,
                                      use_fast_accum=use_fast_accum, backend=backend,
                                      splitk=splitk)
        self.in_features, self.out_features = self.gemm.in_features, self.gemm.out_features

    def _load_scales(self):
        """Puts the state's current scales (and the weight quantised with its scale) into the
        GEMM layer; requantises the weight only when its scale changed."""
        g, sx, sw = self.gemm, self.state.scale[0], self.state.scale[1]
        g.scale_x.copy_(sx)
        g.scale_x_inv.copy_(torch.reciprocal(sx))
        if not torch.equal(g.scale_w, sw):
            g.scale_w.copy_(sw)
            g.scale_w_inv.copy_(torch.reciprocal(sw))
            g.wq.copy_(quantize_e4m3(self.weight, sw))

    def explain(self, x):
        self._load_scales()
        return self.gemm.explain(x)

    def forward(self, x):
        self._load_scales()
        y = self.gemm(x)              # (raises for an input that requires grad: inference only)
        if not any(st is self.state for st in self.group):
            self.group.append(self.state)          # joins the buffer at its first call
        self.state.record(0, amax_of(x))
        self.state.record(1, amax_of(self.weight))
        if torch.is_grad_enabled():
            for st in self.group:
                st.update()
        return y
