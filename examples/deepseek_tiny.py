"""A DeepSeek-V3-shaped block on the CPU, its FP8 GEMMs emulated, checked bit for bit.

The block is built here (integer-hashed weights, no download) with DeepSeek-V3's layout at toy
size, for 16 tokens of width 256:

    h   = x + MLA(rms_norm(x))      q = wq_b(q_norm(wq_a(.))), kv = wkv_b(kv_norm(wkv_a(.))),
                                    causal softmax attention over 2 heads, then wo
    out = h + MoE(rms_norm(h))      sigmoid router, top-2 of 8 routed experts (with
                                    DeepSeek-V3's selection bias and route scale) + a shared expert

Its FP8 GEMMs:
- the attention projections and the shared expert are DeepSeek-convention FP8 linear layers:
  an E4M3 `weight` with one fp32 scale per 128 x 128 block, `weight_scale_inv`, as DeepSeek-V3's
  checkpoints store them (made here by mmaemu.nn.weight_quant, DeepSeek-V3's weight_quant);
  forward quantises its input per token in 1 x 128 groups (mmaemu.nn.act_quant, DeepSeek-V3's
  act_quant) and calls torch._scaled_mm with the block-wise scales, as torch >= 2.8 takes them;
- the routed experts run as two grouped GEMMs (gate and up projections together, then down):
  the (token, expert) pairs sorted by expert, `offs` the groups' cumulative ends, row-wise
  scales per token and per expert column (2d x 3d), through torch._scaled_grouped_mm.
  DeepSeek-V3's checkpoints store the experts block-wise; torch's grouped FP8 GEMM takes
  row-wise scales, so the experts are quantised row-wise here, from their bf16 weights.
Everything else runs in fp64 with correctly rounded operations only: reductions by math.fsum,
exp by Python's decimal module (integer arithmetic), then rounding to bf16 where DeepSeek-V3's
activations are bf16. torch's own float kernels (sums, exp) vectorise differently on each CPU;
these do not, so the output's bits are the same on every machine.

The same block runs three ways, which must give the same bits (exit 1 otherwise):
1. the model code as written, under mmaemu.emulate(blockwise="deepgemm"): each torch._scaled_mm
   computes DeepGEMM's sm90_fp8_gemm_1d2d, each torch._scaled_grouped_mm torch's grouped CUTLASS
   kernel on sm_90 (mmaemu/blockwise.py, mmaemu/grouped.py say what backs each step);
2. the model code with direct calls: mmaemu.scaled_mm(..., blockwise="deepgemm") and
   mmaemu.scaled_grouped_mm, with no emulate();
3. the model after mmaemu.nn.swap_fp8_linears (each DeepSeek-convention layer becomes a
   BlockwiseFP8Linear), under emulate() for the grouped experts.
The output's SHA-256 must equal the golden hash stored below (exit 1 otherwise); `--record`
prints it again. mmaemu does not model DeepSeek-V3's own Triton fp8_gemm: the GEMM here is
DeepGEMM's.
"""
import argparse
import copy
import decimal
import functools
import hashlib
import math
import sys
import time

import torch

import mmaemu
from mmaemu.nn import BlockwiseFP8Linear, act_quant, swap_fp8_linears, weight_quant
from mmaemu.testing import hashed_bf16

PROFILE = "hopper"
KERNEL = "deepgemm"
TOKENS, DIM = 16, 256
Q_LORA, KV_LORA = 128, 128                  # DeepSeek-V3: 1536 and 512
HEADS, QK_DIM, V_DIM = 2, 64, 64            # no rotary part: its sin/cos are libm's, per machine
EXPERTS, TOP_K, MOE_INTER, ROUTE_SCALE = 8, 2, 128, 2.5
EPS = 1e-6

GOLDEN = {
    "attention": "5b54558af02c3e26",
    "out": "f9cca45053de646f",
}


# ---------------------------------------------------------------------------------------------
# Arithmetic with the same bits on every machine.

# machine-independent inputs, cached (read-only): the block is built twice from the same weights
exact_bf16 = functools.lru_cache(maxsize=None)(hashed_bf16)


def to_bf16(t):
    """fp64 -> fp32 -> bf16, each a round to nearest even."""
    return t.to(torch.float32).to(torch.bfloat16)


def fsum(t):
    """The correctly rounded sums of an fp64 tensor's last dimension (math.fsum)."""
    rows = t.reshape(-1, t.shape[-1]).tolist()
    return torch.tensor([math.fsum(r) for r in rows], dtype=torch.float64).reshape(t.shape[:-1])


_EXP = decimal.Context(prec=40)


def exp(t):
    """exp of an fp64 tensor, computed by the decimal module and rounded to fp64."""
    values = [float(_EXP.exp(decimal.Decimal(v))) for v in t.reshape(-1).tolist()]
    return torch.tensor(values, dtype=torch.float64).reshape(t.shape)


def matmul(a, b):
    """a [..., n] @ b [n, m] in fp64, each dot product by fsum."""
    products = a.double().unsqueeze(-1) * b.double()            # [..., n, m]
    return fsum(products.transpose(-1, -2))


def silu(t):
    t = t.double()
    return t / (1.0 + exp(-t))


def rms_norm(x, weight):
    """DeepSeek-V3's RMSNorm (bf16 in, bf16 out), its mean square by fsum."""
    x64 = x.double()
    rms = torch.sqrt(fsum(x64 * x64) / x.shape[-1] + EPS)
    return to_bf16(x64 / rms.unsqueeze(-1) * weight.double())


def rowwise_quant(t):
    """E4M3 codes and fp32 dequantisation scales per row (amax / 448, as torchao's row-wise
    float8 does; a zero row keeps a positive scale)."""
    t = t.float()
    scale = t.abs().amax(dim=-1).clamp(min=1e-12) / 448.0
    return torch.clamp(t / scale.unsqueeze(-1), -448.0, 448.0).to(torch.float8_e4m3fn), scale


# ---------------------------------------------------------------------------------------------
# The FP8 GEMMs: torch's entry points (run 1 and 3) or direct mmaemu calls (run 2).

class TorchGEMMs:
    """What the model code calls on a GPU with torch >= 2.8."""

    def __init__(self):
        self.calls = {"torch._scaled_mm": 0, "torch._scaled_grouped_mm": 0}

    def block_scaled_mm(self, xq, w_t, scale_a, scale_b):
        self.calls["torch._scaled_mm"] += 1
        return torch._scaled_mm(xq, w_t, scale_a, scale_b, out_dtype=torch.bfloat16)

    def grouped_mm(self, aq, b_t, scale_a, scale_b, offs):
        self.calls["torch._scaled_grouped_mm"] += 1
        return torch._scaled_grouped_mm(aq, b_t, scale_a, scale_b, offs=offs,
                                        out_dtype=torch.bfloat16)


class DirectGEMMs:
    """The same GEMMs as direct mmaemu calls."""

    def block_scaled_mm(self, xq, w_t, scale_a, scale_b):
        return mmaemu.scaled_mm(xq, w_t, scale_a, scale_b, out_dtype=torch.bfloat16,
                                profile=PROFILE, blockwise=KERNEL)

    def grouped_mm(self, aq, b_t, scale_a, scale_b, offs):
        return mmaemu.scaled_grouped_mm(aq, b_t, scale_a, scale_b, offs,
                                        out_dtype=torch.bfloat16, profile=PROFILE)


# ---------------------------------------------------------------------------------------------
# The model.

class FP8Linear(torch.nn.Module):
    """A DeepSeek-convention FP8 linear layer: E4M3 `weight` [out, in] and fp32
    `weight_scale_inv` [ceil(out / 128), ceil(in / 128)]; the input quantised by act_quant."""

    def __init__(self, weight_bf16, gemms):
        super().__init__()
        codes, scales = weight_quant(weight_bf16)
        self.weight = torch.nn.Parameter(codes, requires_grad=False)
        self.weight_scale_inv = torch.nn.Parameter(scales, requires_grad=False)
        self.gemms = gemms

    def forward(self, x):
        xq, scale = act_quant(x.reshape(-1, x.shape[-1]))
        scale_a = scale.t().contiguous().t()     # M-major, as torch's block-wise path requires
        y = self.gemms.block_scaled_mm(xq, self.weight.t(), scale_a, self.weight_scale_inv.t())
        return y.reshape(*x.shape[:-1], -1)


class MLA(torch.nn.Module):
    """DeepSeek-V3's multi-head latent attention, its low-rank projections FP8."""

    def __init__(self, seed, gemms):
        super().__init__()
        self.wq_a = FP8Linear(exact_bf16((Q_LORA, DIM), seed, -10), gemms)
        self.q_norm = 1.0 + exact_bf16((Q_LORA,), seed + 1, -10)
        self.wq_b = FP8Linear(exact_bf16((HEADS * QK_DIM, Q_LORA), seed + 2, -9), gemms)
        self.wkv_a = FP8Linear(exact_bf16((KV_LORA, DIM), seed + 3, -10), gemms)
        self.kv_norm = 1.0 + exact_bf16((KV_LORA,), seed + 4, -10)
        self.wkv_b = FP8Linear(exact_bf16((HEADS * (QK_DIM + V_DIM), KV_LORA), seed + 5, -9),
                               gemms)
        self.wo = FP8Linear(exact_bf16((DIM, HEADS * V_DIM), seed + 6, -9), gemms)

    def forward(self, x):
        T = x.shape[0]
        q = self.wq_b(rms_norm(self.wq_a(x), self.q_norm)).view(T, HEADS, QK_DIM)
        kv = self.wkv_b(rms_norm(self.wkv_a(x), self.kv_norm)).view(T, HEADS, QK_DIM + V_DIM)
        k, v = kv.split([QK_DIM, V_DIM], dim=-1)
        q, k, v = (t.transpose(0, 1).double() for t in (q, k, v))          # [heads, T, dim]
        scores = fsum(q.unsqueeze(2) * k.unsqueeze(1)) * QK_DIM ** -0.5    # [heads, T, T]
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        e = exp(scores - scores.amax(dim=-1, keepdim=True))
        p = e / fsum(e).unsqueeze(-1)
        o = fsum(p.unsqueeze(-1).mul(v.unsqueeze(1)).transpose(-1, -2))   # [heads, T, V_DIM]
        return self.wo(to_bf16(o.transpose(0, 1).reshape(T, HEADS * V_DIM)))


class MoE(torch.nn.Module):
    """DeepSeek-V3's mixture of experts: a sigmoid router picks TOP_K routed experts per token
    (their selection bias only chooses, the weights are the unbiased scores, normalised and
    scaled); routed experts as grouped FP8 GEMMs, the shared expert as FP8 linear layers."""

    def __init__(self, seed, gemms):
        super().__init__()
        self.gemms = gemms
        self.gate = exact_bf16((EXPERTS, DIM), seed, -8)
        self.gate_bias = exact_bf16((EXPERTS,), seed + 1, -9).double()
        w1 = exact_bf16((EXPERTS, MOE_INTER, DIM), seed + 2, -10)
        w3 = exact_bf16((EXPERTS, MOE_INTER, DIM), seed + 3, -10)
        w2 = exact_bf16((EXPERTS, DIM, MOE_INTER), seed + 4, -9)
        # One scale per expert and output column (its row of w over K): scale_b [experts, N].
        w13 = torch.cat([w1, w3], dim=1)
        codes, scales = rowwise_quant(w13.reshape(-1, DIM))
        self.w13, self.w13_scale = codes.view(w13.shape), scales.view(EXPERTS, 2 * MOE_INTER)
        codes, scales = rowwise_quant(w2.reshape(-1, MOE_INTER))
        self.w2, self.w2_scale = codes.view(w2.shape), scales.view(EXPERTS, DIM)
        self.shared_w1 = FP8Linear(exact_bf16((MOE_INTER, DIM), seed + 5, -10), gemms)
        self.shared_w3 = FP8Linear(exact_bf16((MOE_INTER, DIM), seed + 6, -10), gemms)
        self.shared_w2 = FP8Linear(exact_bf16((DIM, MOE_INTER), seed + 7, -9), gemms)

    def route(self, x):
        """(weights fp64 [T, TOP_K], experts [T, TOP_K]) as DeepSeek-V3's Gate."""
        scores = 1.0 / (1.0 + exp(-matmul(x, self.gate.t())))
        order = torch.sort(scores + self.gate_bias, dim=-1, descending=True, stable=True)
        experts = order.indices[:, :TOP_K]
        weights = scores.gather(1, experts)
        return weights / fsum(weights).unsqueeze(-1) * ROUTE_SCALE, experts

    def forward(self, x):
        T = x.shape[0]
        weights, experts = self.route(x)
        # The (token, expert) pairs sorted by expert: group e is rows offs[e-1]:offs[e].
        pair_order = torch.sort(experts.reshape(-1), stable=True).indices
        token_of_row = pair_order // TOP_K
        offs = torch.bincount(experts.reshape(-1), minlength=EXPERTS).cumsum(0).to(torch.int32)
        aq, a_scale = rowwise_quant(x[token_of_row])
        h = self.gemms.grouped_mm(aq, self.w13.transpose(-2, -1), a_scale, self.w13_scale, offs)
        gate, up = h.split(MOE_INTER, dim=-1)
        aq, a_scale = rowwise_quant(to_bf16(silu(gate) * up.double()))
        y = self.gemms.grouped_mm(aq, self.w2.transpose(-2, -1), a_scale, self.w2_scale, offs)
        per_pair = torch.empty_like(y)
        per_pair[pair_order] = y                                   # back to (token, k) order
        routed = per_pair.view(T, TOP_K, DIM).double() * weights.unsqueeze(-1)
        shared = self.shared_w2(to_bf16(silu(self.shared_w1(x)) * self.shared_w3(x).double()))
        terms = torch.cat([routed, shared.double().unsqueeze(1)], dim=1)   # [T, TOP_K + 1, D]
        return to_bf16(fsum(terms.transpose(1, 2))), offs


class Block(torch.nn.Module):
    def __init__(self, gemms):
        super().__init__()
        self.attn_norm = 1.0 + exact_bf16((DIM,), 10, -9)
        self.attn = MLA(20, gemms)
        self.ffn_norm = 1.0 + exact_bf16((DIM,), 30, -9)
        self.ffn = MoE(40, gemms)

    def forward(self, x):
        attention = self.attn(rms_norm(x, self.attn_norm))
        h = to_bf16(x.double() + attention.double())
        moe, offs = self.ffn(rms_norm(h, self.ffn_norm))
        return {"attention": attention, "out": to_bf16(h.double() + moe.double()), "offs": offs}


# ---------------------------------------------------------------------------------------------

def sha(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="print the golden hashes to store")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    x = exact_bf16((TOKENS, DIM), 1, -6)
    torch_gemms = TorchGEMMs()
    model = Block(torch_gemms)

    with torch.inference_mode():
        with mmaemu.emulate(profile=PROFILE, blockwise=KERNEL):
            emulated = model(x)
        direct = Block(DirectGEMMs())(x)
        swapped_model = copy.deepcopy(model)
        swapped = swap_fp8_linears(swapped_model, profile=PROFILE, blockwise=KERNEL)
        with mmaemu.emulate(profile=PROFILE, blockwise=KERNEL):
            from_swapped = swapped_model(x)

    got = {name: sha(emulated[name]) for name in GOLDEN}
    if args.record:
        for name, h in got.items():
            print(f'    "{name}": "{h}",')
        return 0
    offs = emulated["offs"].tolist()
    sizes = [e - s for s, e in zip([0] + offs[:-1], offs)]
    print(f"DeepSeek-V3-shaped block: {TOKENS} tokens, width {DIM}; {len(swapped)} FP8 linear "
          f"layers, {EXPERTS} routed experts (top-{TOP_K}; rows per expert {sizes}, offs {offs})")
    print(f"under emulate(profile={PROFILE!r}, blockwise={KERNEL!r}): "
          + ", ".join(f"{n} {c} calls" for n, c in torch_gemms.calls.items()))
    print(f"swap_fp8_linears -> BlockwiseFP8Linear: {', '.join(swapped)}")
    assert all(isinstance(swapped_model.get_submodule(n), BlockwiseFP8Linear) for n in swapped)

    failed = []
    for run, result in (("direct mmaemu calls", direct), ("the swapped model", from_swapped)):
        for name in GOLDEN:
            if not torch.equal(result[name].view(torch.int16), emulated[name].view(torch.int16)):
                failed.append(f"{name} of {run} differs from the emulated model's")
    for name in GOLDEN:
        ok = got[name] == GOLDEN[name]
        print(f"  {name:9s} sha256 {got[name]}  golden {GOLDEN[name]}  "
              f"{'ok' if ok else 'MISMATCH'}")
        if not ok:
            failed.append(f"{name} sha256 {got[name]}, golden {GOLDEN[name]}: these bits should "
                          f"be the same on every machine")
    if failed:
        for line in failed:
            print(f"FAILED: {line}")
        return 1
    print("checked: the model under emulate(), its direct mmaemu calls and the swapped model "
          "give the same bits, equal to the stored golden hashes")
    print(f"runtime {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
