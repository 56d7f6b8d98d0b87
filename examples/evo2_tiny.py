"""The real Evo 2 model code (vortex StripedHyena 2) on the CPU, its FP8 projections emulated.

Needs the PyPI packages vtx (vortex) and evo2 (for its configs), installed without their heavy
dependencies:  pip install --no-deps vtx evo2 einops rich tqdm markdown-it-py mdurl pyyaml

The model is Evo 2 1B's config (evo2/configs/evo2-1b-8k.yml) scaled down to a hidden size of 64
and 5 blocks (one of each kind: HCS, HCM, HCL, attention), with vortex's random initial weights
(Evo 2's weights are not downloaded). mmaemu.integrations.vortex builds it on the CPU and
replaces each Hyena block's FP8 input projection (TE Linear on a GPU) by a delayed-scaling
FP8 layer whose GEMM is mmaemu's `hopper-te` profile.

It runs three forward passes and prints:
- a hash of the logits of each pass (the rest of the model runs natively: these hashes are
  this machine's, not a reference GPU's);
- the first and last projection's scales before each pass: under inference_mode they stay
  fixed, as in TE (Evo 2 runs under no_grad); with grad mode on they follow TE's delayed-scaling
  update, so the scales of a call depend on the calls before it (in pass 3 the first
  projection's update also updates the others, which ran under no_grad in passes 1 and 2,
  before they run: TE keeps one amax buffer for all of them);
- the split-K decision of each projection GEMM (M padded to 16 by vortex);
- that every emulated projection equals a direct mmaemu.scaled_mm call on the same E4M3
  operands, bit for bit.

--splitk: 1 (default), another fixed split, "auto" (only the profile's recorded split-K table
decides: these scaled-down shapes are not in it, so it stops, naming the first unknown shape) or
"infer" (mmaemu's stated inference decides shapes nobody recorded, with a warning).
"""
import argparse
import hashlib
import sys
import time

import torch

import mmaemu
from mmaemu.integrations.delayed_scaling import DelayedScalingFP8Linear
from mmaemu.nn import quantize_e4m3

TINY = dict(hidden_size=64, num_filters=64, num_layers=5, attn_layer_idxs=[3],
            hcs_layer_idxs=[0, 4], hcm_layer_idxs=[1], hcl_layer_idxs=[2],
            hcs_filter_groups=4, hcm_filter_groups=4, hcl_filter_groups=64,
            num_attention_heads=4, inner_mlp_size=128, max_seqlen=64,
            use_flash_attn=False)     # flash attention needs CUDA; vortex's torch path instead
PROFILE = "hopper-te"


def sha(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def build(splitk):
    import logging
    logging.disable(logging.INFO)           # vortex logs every block it builds
    from mmaemu.integrations import vortex as mv
    config = mv.evo2_config("evo2-1b-8k", **TINY)
    torch.manual_seed(0)
    return mv.striped_hyena(config, PROFILE, splitk=splitk)


class Calls(list):
    running = None      # (module, input shape) of the projection call under way


def record_calls(model):
    """Hooks that keep each projection call's input, scales in effect and output."""
    calls, scales = Calls(), {}

    def before(module, args):
        scales[module] = module.state.scale.clone()
        calls.running = (module, args[0].shape)     # the call an exception comes from

    def after(module, args, out):
        calls.append((module, args[0].detach().clone(), scales.pop(module), out.detach().clone()))
    for m in model.modules():
        if isinstance(m, DelayedScalingFP8Linear):
            m.register_forward_pre_hook(before)
            m.register_forward_hook(after)
    return calls


def direct(module, x, scale):
    """The same GEMM written out: TE's quantisation, then mmaemu.scaled_mm."""
    sx, sw = scale[0], scale[1]
    xq = quantize_e4m3(x, sx).reshape(-1, x.shape[-1])
    wq = quantize_e4m3(module.weight, sw)
    g = module.gemm
    y = mmaemu.scaled_mm(xq, wq.t(), torch.reciprocal(sx), torch.reciprocal(sw),
                         out_dtype=torch.bfloat16, use_fast_accum=True, profile=PROFILE,
                         splitk=g.splitk)
    return y.reshape(*x.shape[:-1], -1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splitk", default="1",
                    help="'1' (default: the user guide's statement that Evo 2's projections are "
                         "S = 1 on the H100), 'auto' (the profile's tables decide) or 'infer' "
                         "(the tables, else mmaemu's inference for unrecorded shapes)")
    args = ap.parse_args()
    # The rest of the model runs on torch's own CPU kernels, whose results here depended on the
    # thread count's first use: with 2 threads, 2 of 30 runs gave a different first-pass hash,
    # with MMAEMU_BACKEND=reference as well (mmaemu's reference is single-threaded); with one
    # thread, none of 16. One thread keeps the passes comparable.
    torch.set_num_threads(1)
    splitk = args.splitk if args.splitk in ("auto", "infer") else int(args.splitk)

    t0 = time.perf_counter()
    model = build(splitk)
    calls = record_calls(model)
    projections = [(n, m) for n, m in model.named_modules()
                   if isinstance(m, DelayedScalingFP8Linear)]
    print(f"vortex StripedHyena from evo2-1b-8k.yml scaled down ({TINY['num_layers']} blocks, "
          f"hidden {TINY['hidden_size']}); FP8 projections: {', '.join(n for n, _ in projections)}")

    torch.manual_seed(1)
    ids = torch.randint(0, 512, (1, 10))
    passes = [("inference_mode", torch.inference_mode), ("inference_mode", torch.inference_mode),
              ("grad mode on", torch.enable_grad), ("grad mode on", torch.enable_grad)]
    for i, (mode, ctx) in enumerate(passes, 1):
        before = [m.state.scale.tolist() for _, m in (projections[0], projections[-1])]
        try:
            with ctx():
                logits, _ = model(ids)
        except mmaemu.SplitKUnknownError as e:
            if calls.running is None:           # not from a projection: mmaemu's own message
                print(f"--splitk {splitk}: {e}", file=sys.stderr)
                return 2
            module, shape = calls.running
            name = next(n for n, m in projections if m is module)
            M = shape.numel() // shape[-1]
            hints = {"1": "--splitk 1 (no split, as the user guide states for Evo 2's "
                          "projections)",
                     "infer": "--splitk infer (mmaemu infers the split of unrecorded shapes)"}
            hints.pop(str(splitk), None)
            print(f"--splitk {splitk}: the split-K decision of profile {PROFILE!r} is unknown "
                  f"for the GEMM of {name}, M={M}, N={module.out_features}, "
                  f"K={module.in_features} (E4M3, bf16 output, fast accumulation): use "
                  f"{' or '.join(hints.values())}", file=sys.stderr)
            return 2
        print(f"pass {i} ({mode}): logits {tuple(logits.shape)} sha256 {sha(logits)}; "
              f"scales (x, w) before it: " + ", ".join(
                  f"{name} ({sx:.6g}, {sw:.6g})"
                  for (name, _), (sx, sw) in zip((projections[0], projections[-1]), before)))

    print("\nsplit-K decisions of the projection GEMMs (mmaemu.explain, M padded to 16):")
    x = torch.zeros(1, 16, TINY["hidden_size"], dtype=torch.bfloat16)
    for name, m in projections[:1]:
        s = m.explain(x).split
        print(f"  {name}: [16 x {m.in_features}] @ [{m.in_features} x {m.out_features}] "
              f"S={s.S} scheme={s.scheme!r} source={s.source!r}")

    mismatches = 0
    for module, xin, scale, out in calls:
        if not torch.equal(out.view(torch.int16), direct(module, xin, scale).view(torch.int16)):
            mismatches += 1
    if mismatches:
        print(f"FAILED: {mismatches} of {len(calls)} projection calls differ from mmaemu.scaled_mm")
        return 1
    print(f"\n{len(calls)} projection calls (M = {calls[0][1].shape[1]} after vortex's padding) "
          f"equal direct mmaemu.scaled_mm calls bit for bit")
    print(f"runtime {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
