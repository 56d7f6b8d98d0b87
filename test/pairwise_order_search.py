"""Which pairwise reduction orders of S split partials fit the RTX 4060 recordings.

    python test/pairwise_order_search.py S [trees|chains] [--max N]

For every recorded pairwise split output with S slices (test/data/hw_mini, fp32, bf16 and
fp16 outputs; FP8 outputs are left out), the S partials of the round-robin layout are computed
with mmaemu itself (slice s = the 64-k tiles t with t mod S = s laid end to end, one unsplit
accumulation), then every candidate order is applied, followed by the epilogue
fma(fp32(scale_a * scale_b), acc, +0) and the output rounding. `trees` enumerates every binary
tree over the partials (fp32 addition is commutative, so unordered trees: (2S - 3)!! of them),
`chains` every left-deep chain (S! / 2). Prints each order that fits every output, and the
count. docs/semantics.md (section 7) reports the result for each S.
"""
import argparse
import itertools
import warnings

import numpy as np
import torch

import hw_mini  # beside this file in test/
import mmaemu

TILE = 64


def recorded_outputs(S):
    """(partials [S, E], hardware bits [E], alpha, out dtype) of every usable output."""
    index = hw_mini.load_index()
    shards = hw_mini.Shards(index)
    defaults = index["call_defaults"]
    found = []
    for case in index["cases"]:
        if case["kind"] != "gemm" or "outputs" not in case:
            continue
        for o in case["outputs"]:
            p = dict(case["params"])
            p.update(o["params"])
            if p["splitk"] != {"S": S, "scheme": "pairwise"}:
                continue
            if p["out_dtype"] not in ("float32", "bfloat16", "float16"):
                continue
            kw = hw_mini._gemm_kwargs(p, defaults)
            a = shards.array(case["inputs"]["a"])
            b = shards.array(case["inputs"]["b"])
            parts = partials(a, b, p["fmt_a"], p["fmt_b"], kw["fast"], S)
            if p.get("out_select") == "diagonal":
                parts = np.stack([np.diagonal(x) for x in parts])
            alpha = np.float32(kw["scale_a"].item()) * np.float32(kw["scale_b"].item())
            want = hw_mini._expected(shards, o["expect"]).reshape(-1)
            found.append((parts.reshape(S, -1), want, np.float32(alpha), p["out_dtype"]))
    return found


def partials(a, b, fa, fb, fast, S):
    K, N = a.shape[1], b.shape[0]
    rows = np.zeros(((N + 15) // 16 * 16, K), np.uint8)   # as recorded: N a multiple of 16
    rows[:N] = b
    x = hw_mini._fp8(a, fa)
    w = hw_mini._fp8(rows, fb)
    out = []
    for s in range(S):
        cols = [k for t in range(s, -(-K // TILE), S) for k in range(t * TILE, min(t * TILE + TILE, K))]
        if not cols:
            out.append(np.zeros((a.shape[0], N), np.float32))
            continue
        idx = torch.tensor(cols)
        acc = mmaemu.accumulate(x[:, idx].contiguous(), w[:, idx].contiguous(),
                                use_fast_accum=fast, profile="ada", splitk=1)
        out.append(acc[:, :N].numpy())
    return np.stack(out)


def epilogue_bits(acc, alpha, out):
    with np.errstate(all="ignore"):
        v = (alpha * acc).astype(np.float32)
    v = np.where((acc == 0) | (alpha == 0), v + np.float32(0), v)   # fma(alpha, acc, +0)
    nan = np.isnan(v)
    if out == "float32":
        u = v.view(np.uint32).copy()
        u[nan] = 0x7FFFFFFF
        return u
    u = torch.from_numpy(v).to(getattr(torch, out)).view(torch.int16).numpy().view(np.uint16).copy()
    u[nan] = 0x7FFF
    return u


def trees(leaves):
    if len(leaves) == 1:
        yield leaves[0]
        return
    first, rest = leaves[0], leaves[1:]
    for r in range(len(rest)):
        for comb in itertools.combinations(rest, r):
            other = tuple(e for e in rest if e not in comb)
            for left in trees((first,) + comb):
                for right in trees(other):
                    yield (left, right)


def chains(S):
    for perm in itertools.permutations(range(S)):
        if perm[0] < perm[1]:
            t = perm[0]
            for e in perm[1:]:
                t = (t, e)
            yield t


def evaluate(tree, parts):
    if isinstance(tree, int):
        return parts[tree]
    return (evaluate(tree[0], parts) + evaluate(tree[1], parts)).astype(np.float32)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("S", type=int)
    ap.add_argument("kind", nargs="?", default="trees", choices=["trees", "chains"])
    ap.add_argument("--max", type=int, default=1000, help="stop after this many fits")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    data = recorded_outputs(args.S)
    print(f"S = {args.S}: {len(data)} usable recorded outputs")
    candidates = trees(tuple(range(args.S))) if args.kind == "trees" else chains(args.S)
    tried, fits = 0, []
    for tree in candidates:
        tried += 1
        if all(np.array_equal(epilogue_bits(evaluate(tree, parts), alpha, out), want)
               for parts, want, alpha, out in data):
            fits.append(tree)
            print("fits:", tree)
            if len(fits) >= args.max:
                break
    print(f"{len(fits)} of {tried} {args.kind} fit")
    return fits


if __name__ == "__main__":
    main()
