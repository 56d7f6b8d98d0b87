"""Held-out accuracy of the split-K inference (mmaemu/planning/splitk_infer.py) on the recorded tables.

For each profile's table, rows are held out, the inference is built from the rest
(splitk_infer.Inference on the remaining columns) and the held-out rows are predicted; a
prediction is right when (S, scheme) equals the recorded decision. Hold-outs:

  K        each recorded K in turn: every row at that K (all settings) predicted from the others
  rows10   random 10 % of the rows (seed 0), in 10 folds: every row predicted once
  rows1    a random 1 % of the rows (seed 1), one fold
  setting  each setting in turn (what the "absent" rule sees)
  proxies  the extrapolations, which cannot be measured directly: the smallest recorded K held out
           (for K below the recording), the largest K (K above), M > 4096 (larger M),
           N > 8192 (larger N), each predicted from the rest

Accuracy is reported on all held-out rows and on the rows where the inference is used: those the
envelope (the table's bound(): S = 1 when M*N > B) does not decide. Deterministic; no subsampling.

    python -m mmaemu_tools.splitk_infer_eval               # the markdown tables
    python -m mmaemu_tools.splitk_infer_eval --constants   # also splitk_infer.ACCURACY's literal
"""
import argparse
import sys
import time

import numpy as np

from mmaemu.planning import splitk_infer
from mmaemu.planning.profiles import get_profile
from mmaemu.planning.splitk import get_table

PROFILES = ("hopper", "hopper-te", "ada", "ada-te")
_FMT, _OUT = ("e4m3", "e5m2"), ("f32", "bf16", "f16", "e4m3", "e5m2")
SMALL_MN = 65536  # the M*N that separates "small" from "large" shapes in the tables


def setting_names(code):
    return _FMT[code & 1], _FMT[code >> 1 & 1], _OUT[code >> 2 & 7], bool(code >> 5 & 1)


def envelope_decides(table, cols):
    """Per row: True where decide()'s envelope step (S = 1 when M*N > B) would decide."""
    out = np.zeros(cols["M"].size, bool)
    pairs = np.unique(np.stack([cols["setting"], cols["K"]], 1), axis=0)
    for s, k in pairs:
        B, _ = table.bound(int(k), *setting_names(int(s)))
        if B is not None:
            m = (cols["setting"] == s) & (cols["K"] == k)
            out[m] = cols["M"][m] * cols["N"][m] > B
    return out


def predict(cols, train, test):
    """Predicted S, scheme and rule for the rows `test`, from an Inference built on `train`."""
    inf = splitk_infer.Inference({c: v[train] for c, v in cols.items()})
    S = np.zeros(test.size, np.int64)
    sch, rule = np.zeros_like(S), np.zeros_like(S)
    settings = cols["setting"][test]
    for s in np.unique(settings):
        i = np.flatnonzero(settings == s)
        r = test[i]
        p = inf.predict(cols["M"][r], cols["N"][r], cols["K"][r], int(s))
        S[i], sch[i], rule[i] = p["S"], p["scheme"], p["rule"]
    return S, sch, rule


def holdouts(cols):
    """(name, [(train mask, test indices), ...]) per hold-out."""
    n = cols["M"].size
    K, M, N, st = cols["K"], cols["M"], cols["N"], cols["setting"]

    def split(mask):
        return ~mask, np.flatnonzero(mask)

    perm = np.random.default_rng(0).permutation(n)
    one = np.random.default_rng(1).permutation(n)[: n // 100]
    folds = []
    for f in range(10):
        test = np.sort(perm[f::10])
        train = np.ones(n, bool)
        train[test] = False
        folds.append((train, test))
    train1 = np.ones(n, bool)
    train1[one] = False
    Ks = np.unique(K)
    return [("K", [split(K == k) for k in Ks]),
            ("rows10", folds),
            ("rows1", [(train1, np.sort(one))]),
            ("setting", [split(st == s) for s in np.unique(st)]),
            ("K below (smallest K held out)", [split(K == Ks[0])]),
            ("K above (largest K held out)", [split(K == Ks[-1])]),
            ("M > 4096 held out", [split(M > 4096)]),
            ("N > 8192 held out", [split(N > 8192)])]


def evaluate(profile):
    table = get_table(get_profile(profile).splitk_table)
    cols = table.columns()
    env = envelope_decides(table, cols)
    results = {}
    for name, plan in holdouts(cols):
        idx, S, sch, rule = [], [], [], []
        for train, test in plan:
            if test.size == 0:
                continue
            s, c, r = predict(cols, train, test)
            idx.append(test), S.append(s), sch.append(c), rule.append(r)
        idx = np.concatenate(idx)
        S, sch, rule = np.concatenate(S), np.concatenate(sch), np.concatenate(rule)
        right = (S == cols["S"][idx]) & (sch == cols["scheme"][idx])
        results[name] = {"idx": idx, "right": right, "rule": rule, "pred_S": S}
    return table, cols, env, results


def pct(right):
    return f"{100 * right.mean():.1f}" if right.size else "-"


def cell(right):
    return f"{pct(right)} ({right.size})" if right.size else "-"


def region_rows(profile, cols, env, res):
    idx, right = res["idx"], res["right"]
    use = ~env[idx]
    split = cols["S"][idx] > 1
    mn = cols["M"][idx] * cols["N"][idx]
    return [profile, cell(right), cell(right[use]), cell(right[use & split]),
            cell(right[use & ~split]), cell(right[use & (mn <= SMALL_MN)]),
            cell(right[use & (mn > SMALL_MN)])]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--constants", action="store_true",
                    help="also print the ACCURACY literal of mmaemu/planning/splitk_infer.py")
    args = ap.parse_args(argv)
    t0 = time.time()
    evals = {p: evaluate(p) for p in PROFILES}
    out = sys.stdout
    head = ("| profile | all held-out rows | envelope-undecided | of them split | of them unsplit "
            f"| undecided, M*N <= {SMALL_MN} | undecided, M*N > {SMALL_MN} |\n"
            "|---|---|---|---|---|---|---|\n")
    names = list(evals[PROFILES[0]][3])
    out.write("Exact match of (S, scheme) in percent (rows predicted), per hold-out. "
              "\"envelope-undecided\": rows where decide()'s envelope would not decide, where the "
              "inference is used.\n")
    for name in names:
        out.write(f"\n**Hold-out: {name}**\n\n{head}")
        for p in PROFILES:
            _, cols, env, results = evals[p]
            out.write("| " + " | ".join(region_rows(p, cols, env, results[name])) + " |\n")
    out.write("\n**Per rule** (envelope-undecided rows; percent (rows))\n\n")
    for name in ("K", "rows10", "K below (smallest K held out)"):
        out.write(f"\nHold-out: {name}\n\n| rule | " + " | ".join(PROFILES) + " |\n|---|"
                  + "---|" * len(PROFILES) + "\n")
        for code, rule in enumerate(splitk_infer.RULES):
            cells = []
            for p in PROFILES:
                _, cols, env, results = evals[p]
                r = results[name]
                m = (~env[r["idx"]]) & (r["rule"] == code)
                cells.append(cell(r["right"][m]))
            out.write(f"| {rule} | " + " | ".join(cells) + " |\n")
    if args.constants:
        # the note of a decision quotes these: per rule, the K and 10 % row hold-outs, and for the
        # rules that extrapolate in K the smallest/largest-K proxies; a whole setting for "absent"
        quote = {"K": "K hold-out", "rows10": "row hold-out",
                 "K below (smallest K held out)": "proxy: smallest K held out",
                 "K above (largest K held out)": "proxy: largest K held out",
                 "setting": "proxy: whole setting held out"}
        out.write("\nACCURACY = {\n")
        for p in PROFILES:
            table, cols, env, results = evals[p]
            out.write(f'    "{table.table_id}": {{\n')
            for code, rule in enumerate(splitk_infer.RULES):
                entries = []
                for name, label in quote.items():
                    r = results[name]
                    m = (~env[r["idx"]]) & (r["rule"] == code)
                    if m.sum() >= 20:
                        entries.append(f'            ("{pct(r["right"][m])}", {int(m.sum())}, "{label}"),\n')
                if entries:
                    out.write(f'        "{rule}": (\n' + "".join(entries) + "        ),\n")
            out.write("    },\n")
        out.write("}\n")
    out.write(f"\n(python -m mmaemu_tools.splitk_infer_eval; {time.time() - t0:.0f} s)\n")


if __name__ == "__main__":
    main()
