"""An FP8 block with Evo 2 1B's projection shapes, emulated on the CPU, checked bit for bit.

The block is a gated (Hyena-style) mixer as in Evo 2's StripedHyena blocks:

    x [L, 1920] --pad L to 16--> FP8 input projection 1920 -> 5760 (TE Linear in Evo 2 1B)
      --slice back to L--> q, k, v = split in 3; z = v * (q * k)
      --> FP8 output projection 1920 -> 1920 --> + x

Both projections are EmulatedFP8Linear with profile "hopper-te" (Transformer Engine 2.3 on an
H100 PCIe, fast accumulation, bf16 output). Everything else is plain torch.

1. Golden outputs. The FP8 GEMMs return the reference platform's bits on any machine, and the
   rest of this block is built so that it does too (integer-derived inputs and weights, only
   correctly rounded elementwise bf16 operations). So the SHA-256 of the outputs, computed once
   and stored below, must match everywhere: a CPU CI runner, another CPU, a GPU.
   `python examples/transformer_block.py --record` prints them again.
2. Padding. Evo 2's vortex pads the sequence to a multiple of 16 before its FP8 projection.
   Padding rows never change the other rows' bits, but M is part of the split-K decision:
   mmaemu.explain shows the decision for the unpadded and the padded M (here also where a
   recorded table row decides one of them and not the other).

Costs about 2.7e8 multiply-adds in the FP8 GEMMs (seconds on the fast CPU backend).
"""
import argparse
import hashlib
import sys

import torch

import mmaemu
from mmaemu.nn import EmulatedFP8Linear
from mmaemu.testing import hashed_bf16

HIDDEN = 1920          # Evo 2 1B hidden size; its FP8 input projection is [3 * 1920, 1920]
L = 10                 # tokens: a short sequence so that the CPU run takes seconds
PAD = 16               # vortex pads L to a multiple of 16 on its FP8 path
PROFILE = "hopper-te"
# The hopper-te split-K table (cuBLASLt's recorded heuristic on an H100 PCIe, 32 MiB workspace)
# has rows for these shapes, M = 10 and the padded 16: S = 1, so splitk="auto" decides them.
SPLITK = "auto"

GOLDEN = {
    "qkv": "59c8a892f783492b",
    "out": "49a1d81eaa79f673",
}


def amax_scale(t):
    """448 / amax in fp32: the E4M3 quantisation scale of a max-based recipe with margin 0."""
    return torch.tensor(448.0) / t.abs().max().float()


class GatedFP8Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        w_in = hashed_bf16((3 * HIDDEN, HIDDEN), seed=1, exp=-11)     # |w| <= 1/16
        w_out = hashed_bf16((HIDDEN, HIDDEN), seed=2, exp=-11)
        self.scale_x = torch.tensor(448.0 / 4.0)                    # inputs are |x| <= 4
        self.proj_in = EmulatedFP8Linear(w_in, self.scale_x, amax_scale(w_in), PROFILE,
                                         splitk=SPLITK)
        self.w_out = w_out

    def mix(self, x):
        """Padded FP8 input projection (kept for the golden), then the gating."""
        pad = (-x.shape[0]) % PAD
        xp = torch.nn.functional.pad(x, (0, 0, 0, pad))
        qkv = self.proj_in(xp)
        q, k, v = qkv[: x.shape[0]].split(HIDDEN, dim=-1)
        return qkv, v * (q * k)

    def forward(self, x):
        qkv, z = self.mix(x)
        # The output projection's input scale from z itself (as current scaling would).
        proj_out = EmulatedFP8Linear(self.w_out, amax_scale(z), amax_scale(self.w_out), PROFILE,
                                     splitk=SPLITK)
        return qkv, z, proj_out, proj_out(z) + x


def sha(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def split_of(M, N, K, profile):
    """The split-K decision mmaemu.explain reports for an M x N x K projection (no computing)."""
    x = torch.zeros(M, K, dtype=torch.float8_e4m3fn)
    w = torch.zeros(N, K, dtype=torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    plan = mmaemu.explain(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True,
                          profile=profile)
    return plan.split


def show(split):
    if split.S is None:
        return f"unknown: splitk='auto' raises SplitKUnknownError (table {split.table_id})"
    return (f"S={split.S} scheme={split.scheme!r} source={split.source!r} "
            f"verified={split.verified} table={split.table_id!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="print the golden hashes to store")
    args = ap.parse_args()

    x = hashed_bf16((L, HIDDEN), seed=3, exp=-5)                         # |x| <= 4
    block = GatedFP8Block()
    with torch.inference_mode():
        qkv, z, proj_out, out = block(x)

        # Padding rows do not change the other rows: the same output projection on z padded
        # to 16 rows gives the same first L rows, bit for bit.
        z_padded = torch.nn.functional.pad(z, (0, 0, 0, (-L) % PAD))
        mmaemu.testing.assert_bitwise_equal(proj_out(z_padded)[:L] + x, out)

    got = {"qkv": sha(qkv), "out": sha(out)}
    if args.record:
        for name, h in got.items():
            print(f'    "{name}": "{h}",')
        return 0
    print(f"FP8 GEMMs: [{qkv.shape[0]} x {HIDDEN}] @ [{HIDDEN} x {3 * HIDDEN}] and "
          f"[{L} x {HIDDEN}] @ [{HIDDEN} x {HIDDEN}], profile {PROFILE!r}, splitk={SPLITK}")
    bad = [n for n in GOLDEN if got[n] != GOLDEN[n]]
    for name in GOLDEN:
        print(f"  {name:4s} sha256 {got[name]}  golden {GOLDEN[name]}  "
              f"{'ok' if got[name] == GOLDEN[name] else 'MISMATCH'}")
    if bad:
        print(f"golden check FAILED for {bad}: these bits should be the same on every machine")
        return 1
    print("golden check: outputs equal the stored golden outputs bit for bit")
    print(f"padding check: rows 0..{L - 1} are the same with and without padding rows")

    # The split-K decision of the input projection for the unpadded and the padded M. This
    # block's own sequence (L = 10, padded to 16) under hopper-te, and a 60-token sequence
    # (padded to 64) under hopper, whose table has the guide's row for M = 64.
    print("\nsplit-K decisions of the input projection (mmaemu.explain):")
    for profile, tokens in ((PROFILE, L), ("hopper", 60)):
        padded = tokens + (-tokens) % PAD
        before = split_of(tokens, 3 * HIDDEN, HIDDEN, profile)
        after = split_of(padded, 3 * HIDDEN, HIDDEN, profile)
        print(f"  {profile}, M = {tokens:2d}: {show(before)}")
        print(f"  {profile}, M = {padded:2d}: {show(after)}")
        if before.S is None and after.S is None:
            verdict = "leaves the split decision unknown"
        elif (before.S, before.scheme) == (after.S, after.scheme):
            verdict = "keeps the split decision"
        else:
            verdict = "changes the split decision"
        print(f"  -> padding {tokens} to {padded} rows {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
