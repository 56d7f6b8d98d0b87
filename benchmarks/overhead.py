"""What a call costs besides its arithmetic: the import, the first call of a process, and every
later call, at a small shape, for one or more source trees in the same run.

Each measurement runs in a fresh Python process with the tree first on sys.path, alternating
between the trees round by round, so trees are compared on one machine within minutes. A cold
first call has an empty cache directory (MMAEMU_CACHE_DIR: the measured SIMD speeds, verdicts);
a warm one reuses the cache of the previous process, as a second program on a machine does.

    python benchmarks/overhead.py                        # this tree
    python benchmarks/overhead.py --trees . ../other     # this tree against another checkout
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import mmaemu
t2 = time.perf_counter()
M, N, K = (int(v) for v in sys.argv[1].split("x"))
g = torch.Generator().manual_seed(0)
x = (torch.randn(M, K, generator=g) * 8).to(torch.float8_e4m3fn)
w = (torch.randn(N, K, generator=g) * 8).to(torch.float8_e4m3fn)
one = torch.tensor(1.0)
def call():
    return mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, splitk=1)
t3 = time.perf_counter()
call()
t4 = time.perf_counter()
later = []
for _ in range(int(sys.argv[2])):
    s = time.perf_counter()
    call()
    later.append(time.perf_counter() - s)
later.sort()
print(json.dumps({"import_mmaemu": t2 - t1, "first_call": t4 - t3,
                  "later_call": later[len(later) // 2]}))
"""


def measure(tree, shape, calls, cache):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), MMAEMU_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", PROBE, shape, str(calls)], env=env, cwd=tree,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", nargs="+", default=["."])
    ap.add_argument("--shape", default="16x64x128", help="MxNxK")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200, help="later calls timed per process")
    args = ap.parse_args()
    rows = {t: {"cold": [], "warm": []} for t in args.trees}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for i, tree in enumerate(args.trees):
                cache = os.path.join(tmp, f"{i}-{r}")
                rows[tree]["cold"].append(measure(tree, args.shape, args.calls, cache))
                rows[tree]["warm"].append(measure(tree, args.shape, args.calls, cache))
    print(f"shape {args.shape}, {args.rounds} rounds (medians), {args.calls} later calls each\n")
    print("| tree | import mmaemu (ms) | first call, cold cache (ms) | first call, warm cache "
          "(ms) | later call (us) |")
    print("|---|---|---|---|---|")
    for tree, r in rows.items():
        def med(kind, key):
            return statistics.median(m[key] for m in r[kind])
        print(f"| {tree} | {med('warm', 'import_mmaemu') * 1e3:.0f} | "
              f"{med('cold', 'first_call') * 1e3:.1f} | {med('warm', 'first_call') * 1e3:.1f} | "
              f"{med('warm', 'later_call') * 1e6:.0f} |")


if __name__ == "__main__":
    main()
