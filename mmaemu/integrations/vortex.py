"""vortex (PyPI `vtx`, the StripedHyena 2 code of Evo 2) on the CPU, its FP8 projections by mmaemu.

    from mmaemu.integrations import vortex as mv
    model = mv.striped_hyena(config, profile="hopper-te", splitk=1)   # a vortex StripedHyena
    with torch.inference_mode():
        logits, _ = model(input_ids)

What it does (read in vtx 1.1.0's source):
- CPU shims (install_cpu_shims): vortex.ops' __init__ imports flash_attn_2_cuda unguarded and
  vortex.model.rotary imports a triton kernel: vortex.ops is provided without that __init__ (so
  vortex's own try/except sees no flash attention) and vortex.ops.embedding.rotary with a torch
  rotary; torch.cuda.device(<cpu device>), which vortex enters around every projection, becomes
  a no-op instead of a ValueError.
- FP8 projections: vortex puts only each Hyena block's input projection
  (ParallelGatedConvBlock.projections, a TE Linear) under te.fp8_autocast(DelayedScaling(
  HYBRID, amax_history_len=16, amax_compute_algo="max")), and refuses that without TE. The model
  is built without FP8 and each projection is replaced by a DelayedScalingFP8Linear, whose
  scales follow TE's delayed scaling call by call (mmaemu/integrations/delayed_scaling.py).
- Padding: config.use_fp8_input_projections is set again, so vortex pads the sequence to a
  multiple of 16 before the projection and slices back (ParallelGatedConvBlock.pad_to_multiple).

Exact: the projections' GEMMs (the profile's bits for the operands TE would form). Not exact:
everything else in the model runs as torch runs it on this machine.
"""
import importlib.machinery
import importlib.util
import sys
import types

import torch

from .delayed_scaling import DelayedScalingFP8Linear, DelayedScalingState
from ..errors import UnsupportedFeatureError
from .te_state import read_te_extra_state

__all__ = ["install_cpu_shims", "striped_hyena", "emulate_fp8_projections",
           "states_from_checkpoint", "evo2_config", "apply_rotary"]

VORTEX_RECIPE = {"length": 16, "algo": "max", "margin": 0}   # vortex/model/layers.py


# ---------------------------------------------------------------------------------------------
# CPU shims.

def apply_rotary(x, cos, sin, seqlen_offsets=0, cu_seqlens=None, max_seqlen=None,
                 interleaved=False, inplace=False, conjugate=False):
    """vortex.ops.embedding.rotary.apply_rotary in torch: x0 * cos - x1 * sin and
    x0 * sin + x1 * cos in fp32, rounded once to x's dtype, as its triton kernel is written
    (triton may fuse those into FMAs on a GPU, so the bits can differ from a GPU's; rotary is
    not part of what mmaemu makes exact). x: [batch, seqlen, heads, headdim]."""
    if cu_seqlens is not None:
        raise NotImplementedError("mmaemu's CPU rotary has no variable-length (cu_seqlens) path")
    seqlen = x.shape[1]
    rot = cos.shape[1] * 2
    if isinstance(seqlen_offsets, torch.Tensor):
        idx = seqlen_offsets.reshape(-1, 1).long() + torch.arange(seqlen, device=x.device)
        c, s = cos[idx], sin[idx]                               # [batch, seqlen, rot / 2]
    else:
        c = cos[seqlen_offsets:seqlen_offsets + seqlen].unsqueeze(0)
        s = sin[seqlen_offsets:seqlen_offsets + seqlen].unsqueeze(0)
    c, s = c.unsqueeze(2).float(), s.unsqueeze(2).float()       # broadcast over heads
    if conjugate:
        s = -s
    xr = x[..., :rot].float()
    if interleaved:
        x0, x1 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)
    else:
        x0, x1 = xr[..., : rot // 2], xr[..., rot // 2:]
        out = torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)
    result = x if inplace else x.clone()
    result[..., :rot] = out.to(x.dtype)
    return result


class _CpuTolerantCudaDevice(torch.cuda.device):
    """torch.cuda.device that is a no-op for a non-CUDA device (vortex enters it with the
    input's device around every projection)."""

    def __init__(self, device):
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device) and device.type != "cuda":
            self.idx, self.prev_idx = -1, -1
        else:
            super().__init__(device)


def _package_without_init(name, directory):
    mod = types.ModuleType(name)
    mod.__path__ = [directory]
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    mod.__spec__.submodule_search_locations = [directory]
    mod.__package__ = name
    return mod


def install_cpu_shims():
    """Makes `import vortex.model.model` and a vortex forward pass work without flash-attn,
    triton or a CUDA device. Idempotent; call it before importing vortex (striped_hyena does).
    Leaves vortex.ops alone if it already imported (its CUDA extensions are present)."""
    if not issubclass(torch.cuda.device, _CpuTolerantCudaDevice):
        torch.cuda.device = _CpuTolerantCudaDevice
    if "vortex.ops" in sys.modules:
        return
    spec = importlib.util.find_spec("vortex")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("vortex is not installed: pip install --no-deps vtx "
                          "(plus einops, rich, tqdm, pyyaml; see docs/evo2.md)")
    root = list(spec.submodule_search_locations)[0]
    if importlib.util.find_spec("flash_attn_2_cuda") is not None:
        return
    sys.modules["vortex.ops"] = _package_without_init("vortex.ops", f"{root}/ops")
    sys.modules["vortex.ops.embedding"] = _package_without_init("vortex.ops.embedding",
                                                                f"{root}/ops/embedding")
    rotary = types.ModuleType("vortex.ops.embedding.rotary")
    rotary.apply_rotary = apply_rotary
    sys.modules["vortex.ops.embedding.rotary"] = rotary


# ---------------------------------------------------------------------------------------------
# Configs, models and their FP8 projections.

def evo2_config(name="evo2-1b-8k", **overrides):
    """An Evo 2 config from the `evo2` package's configs/<name>.yml (read as a file, so the
    package's Hugging Face dependencies need not be installed), as vortex's dotdict, with
    `overrides` applied."""
    import yaml
    spec = importlib.util.find_spec("evo2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the evo2 package is not installed: pip install --no-deps evo2")
    path = f"{list(spec.submodule_search_locations)[0]}/configs/{name}.yml"
    with open(path) as f:
        cfg = yaml.safe_load(f)
    cfg.update(overrides)
    install_cpu_shims()
    from vortex.model.utils import dotdict
    return dotdict(cfg)


def _projection_names(model):
    """Qualified names of the FP8 input projections: ParallelGatedConvBlock.projections."""
    return [f"{name}.projections" if name else "projections"
            for name, m in model.named_modules()
            if type(m).__name__ == "ParallelGatedConvBlock" and hasattr(m, "projections")]


def states_from_checkpoint(state_dict, length=VORTEX_RECIPE["length"],
                           algo=VORTEX_RECIPE["algo"], margin=VORTEX_RECIPE["margin"]):
    """{projection name: DelayedScalingState} from a checkpoint's `<name>._extra_state` entries
    (TE's FP8 state; vortex drops them when TE is absent). Entries without FP8 state are
    skipped; malformed ones raise ValueError (mmaemu.te_state.read_te_extra_state)."""
    states = {}
    for key, value in state_dict.items():
        if key.endswith(".projections._extra_state"):
            te = read_te_extra_state(value)
            if te is not None:
                states[key[: -len("._extra_state")]] = DelayedScalingState.from_te(
                    te, length, algo, margin)
    return states


def emulate_fp8_projections(model, profile="hopper-te", states=None, *, splitk="auto",
                            backend=None, out_dtype=torch.bfloat16, use_fast_accum=True):
    """Replaces every Hyena input projection of a vortex StripedHyena (in place) with a
    DelayedScalingFP8Linear under `profile`, turns vortex's FP8 padding on, and makes the
    model inference only (parameters stop requiring grad). states: {name: DelayedScalingState}
    (e.g. from states_from_checkpoint); a projection without one starts from TE's initial state
    (scales 1, empty history). Returns the replaced names."""
    states = dict(states or {})
    names = _projection_names(model)
    unknown = sorted(set(states) - set(names))
    if unknown:
        raise KeyError(f"no FP8 projection named {unknown} in the model")
    for p in model.parameters():
        p.requires_grad_(False)
    group = []      # TE's amax buffer: vortex's projections share one recipe, hence one buffer
    for name in names:
        old = model.get_submodule(name)
        if isinstance(old, DelayedScalingFP8Linear):
            raise ValueError(f"'{name}' is already emulated")
        bias = getattr(old, "bias", None)
        if isinstance(bias, torch.Tensor) and bias.numel() > 0:
            raise UnsupportedFeatureError(
                f"'{name}' has a bias (config qkv_proj_bias): TE adds it in the GEMM epilogue, "
                f"which this emulation does not model")
        state = states.get(name) or DelayedScalingState(**VORTEX_RECIPE)
        new = DelayedScalingFP8Linear(old.weight, state, profile, group=group,
                                      out_dtype=out_dtype, use_fast_accum=use_fast_accum,
                                      backend=backend, splitk=splitk)
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, new)
    model.config["use_fp8_input_projections"] = True     # vortex pads M to 16 on this path
    for m in model.modules():
        if isinstance(getattr(m, "config", None), dict) and m.config is not model.config:
            m.config["use_fp8_input_projections"] = True
    return names


def striped_hyena(config, profile="hopper-te", states=None, *, state_dict=None, splitk="auto",
                  backend=None):
    """A vortex StripedHyena for `config` (a dict or dotdict, e.g. evo2_config()) on the CPU,
    its FP8 input projections emulated under `profile` (see emulate_fp8_projections).

    state_dict: a checkpoint (e.g. torch.load of an Evo 2 .pt): loaded as vortex's
    load_checkpoint loads it, before the projections are replaced, and, unless `states` is
    given, the projections' FP8 states come from its `_extra_state` entries
    (states_from_checkpoint). Without it the weights are vortex's random initial ones.
    The config must not ask for CUDA-only kernels (use_flash_attn, use_flashfft, hc*_kernel)."""
    install_cpu_shims()
    from vortex.model.model import StripedHyena
    from vortex.model.utils import dotdict
    cfg = dotdict(dict(config))
    for flag in ("use_flash_attn", "use_flash_rmsnorm", "use_flash_depthwise", "use_flashfft",
                 "use_hcs_kernel", "use_hcm_kernel", "use_hcl_kernel"):
        if cfg.get(flag, False):
            raise ValueError(f"config sets {flag}, a CUDA-only kernel: set it False on the CPU")
    cfg["use_fp8_input_projections"] = False    # vortex refuses FP8 without TE; re-enabled below
    model = StripedHyena(cfg)
    # As vortex's load_checkpoint: bf16 but for poles and residues, around the load.
    model.to_bfloat16_except_pr_lc(to_float32=True)
    if state_dict is not None:
        if states is None:
            states = states_from_checkpoint(state_dict)
        model.custom_load_state_dict(state_dict)   # drops _extra_state without TE
    model.to_bfloat16_except_pr_lc()
    model.eval()
    emulate_fp8_projections(model, profile, states, splitk=splitk, backend=backend)
    return model
