"""How the split-K decisions of public models' FP8 linear layers are taken, per profile.

    python -m mmaemu_tools.splitk_coverage [--markdown]

For each model's linear-layer shapes (N = out_features, K = in_features, from the models'
published configurations) and batch sizes M = 1 ... 8192, E4M3 x E4M3 with a bf16 output, with
and without fast accumulation, it asks mmaemu's split-K decision (mmaemu.planning.splitk.decide, what
mmaemu.scaled_mm and explain use) with the default splitk="auto" and with the opt-in
splitk="infer", and counts where each decision came from: table, rule, envelope, inferred, or
unknown (SplitKUnknownError). Nothing is computed; it only reads the tables.
"""
import argparse
import warnings
from collections import Counter

from mmaemu.errors import SplitKUnknownError
from mmaemu.planning.profiles import get_profile
from mmaemu.planning.splitk import decide

# (name, [(N, K), ...]): the distinct shapes of each model's linear layers. Sources: the models'
# Hugging Face config.json (hidden size, intermediate size, attention and key-value heads) and,
# for Evo 2 1B, evo2's evo2-1b-8k config (hidden 1920, Hyena input projection 3 x 1920, MLP 5120).
MODELS = [
    ("GPT-2 small", [(2304, 768), (768, 768), (3072, 768), (768, 3072)]),
    ("BERT base", [(768, 768), (3072, 768), (768, 3072)]),
    ("Qwen2.5-0.5B", [(896, 896), (128, 896), (4864, 896), (896, 4864)]),
    ("Llama-3.2-1B", [(2048, 2048), (512, 2048), (8192, 2048), (2048, 8192)]),
    ("Llama-3-8B", [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]),
    ("Evo 2 1B", [(5760, 1920), (1920, 1920), (5120, 1920), (1920, 5120)]),
]
BATCHES = [1, 4, 16, 64, 256, 1024, 4096, 8192]
PROFILES = ["hopper", "hopper-te", "hopper-ws0", "ada", "ada-te", "ada-ws0"]
SOURCES = ["table", "rule", "envelope", "inferred", "unknown"]


def source(profile, M, N, K, fast, splitk):
    """Where the decision comes from, or "unknown" where mmaemu refuses; an inferred one as
    "inferred:<rule>" (the rule of mmaemu/planning/splitk_infer.py its note names)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            split, _ = decide(profile, M, N, K, "e4m3", "e4m3", "bf16", fast, splitk)
    except SplitKUnknownError:
        return "unknown"
    if split.source == "inferred":
        rule = split.note.split("(", 1)[1].split(")", 1)[0] if split.note.startswith("inferred (") \
            else "other"
        return f"inferred:{rule}" + (":split" if split.S > 1 else "")
    return split.source


def coverage(splitk, profiles=PROFILES, models=MODELS, batches=BATCHES):
    """{(profile, model): Counter of sources} over every shape, batch size and mode (inferred
    decisions counted under "inferred" and under their "inferred:<rule>" key)."""
    out = {}
    for name in profiles:
        prof = get_profile(name)
        for model, shapes in models:
            c = Counter(source(prof, M, N, K, fast, splitk) for N, K in shapes
                        for M in batches for fast in (True, False))
            c["inferred"] = sum(n for k, n in c.items() if k.startswith("inferred:"))
            c["inferred, S > 1"] = sum(n for k, n in c.items() if k.endswith(":split"))
            out[(name, model)] = c
    return out


def table(counts, profiles=PROFILES, models=MODELS):
    """Markdown: per profile, the calls decided by each source (summed over the models), and
    per model the unknown ones."""
    lines = ["| profile | calls | " + " | ".join(SOURCES) + " | inferred: S > 1, by rule | "
             "unknown per model: " + ", ".join(m for m, _ in models) + " |",
             "|---" * (len(SOURCES) + 4) + "|"]
    for p in profiles:
        total = Counter()
        for m, _ in models:
            total += counts[(p, m)]
        calls = sum(total[s] for s in SOURCES)
        per_model = ", ".join(f"{counts[(p, m)]['unknown']}/"
                              f"{sum(counts[(p, m)][s] for s in SOURCES)}" for m, _ in models)
        rules = Counter()
        for k, n in total.items():
            if k.startswith("inferred:"):
                rules[k.split(":")[1]] += n
        by_rule = "; ".join(f"{r} {n}" for r, n in sorted(rules.items())) or "-"
        inferred = f"{total['inferred, S > 1']}; {by_rule}" if total["inferred"] else "-"
        lines.append(f"| `{p}` | {calls} | " + " | ".join(str(total[s]) for s in SOURCES)
                     + f" | {inferred} | {per_model} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    n = sum(len(s) for _, s in MODELS) * len(BATCHES) * 2
    print(f"{len(MODELS)} models, {n} calls per profile (E4M3 x E4M3 -> bf16, M in {BATCHES}, "
          "fast and non-fast accumulation)\n")
    for splitk in ("auto", "infer"):
        print(f'splitk="{splitk}":\n')
        print(table(coverage(splitk)))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
