#!/usr/bin/env bash
# One prepared run on an H200 (or any sm_90 GPU): split-K tables, GEMM goldens, probes P0-P10.
#
#   OUT=/some/dir bash scripts/h200_ground_truth.sh                   # on the GPU machine
#   DRY_RUN=1 QUICK=1 OUT=/tmp/x bash scripts/h200_ground_truth.sh    # rehearsal on a CPU
#
# The first of the two commands of a GPU run (docs/hardware_validation.md, "Running it"):
#   run(command="OUT=$OUT bash scripts/h200_ground_truth.sh", timeout_s=300)   # no carry needed
# then, here: python -m mmaemu_tools.ingest_h200 <files_at>  (reads ground_truth.tar.gz).
#
# Every job starts at t = 0, each under its own limit, and every limit ends TOTAL_S (default
# 240 s, below the command's timeout_s) after the start, minus a margin:
#   - the mmaemu C extension build (only the replay at the end and P8's model comparison need
#     it: the data scripts load mmaemu_tools/cublaslt.py without the package);
#   - record_heuristics.py for the h200 profiles: torch (1 MiB), te (32 MiB), ws0;
#   - record_goldens.py with torch's default workspace, then 32 MiB and 0 for the split cases;
#   - probe_hopper.py (P0-P10 and the rest) with torch's workspace, and P3-P5 again with 32 MiB;
#     the probes that compare with mmaemu itself (P8, blockwise_cublaslt, rowwise_*) again once
#     the build is there.
# As each job ends, the work folder is packed again into $OUT/ground_truth.tar.gz and
# $OUT/gt_summary.txt is rewritten: a run stopped by its timeout keeps what had finished. Files
# in $OUT: those two and probes.json, probes_ws32m.json, probes_model.json (5 of the 8 a
# command may return; none shared with h200_cuda_check.sh). In a dry run the jobs that use the
# CPU model wait for the build.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200_out}
TOTAL_S=${TOTAL_S:-240}
MARGIN_S=${MARGIN_S:-15}
W=${WORK:-$(mktemp -d /tmp/h200_work.XXXXXX)}   # outside $OUT: only a few files go back
mkdir -p "$OUT" "$W/goldens" "$W/tables" "$W/probes" "$W/logs"
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1   # mmaemu and mmaemu_tools from this tree
PY=${PYTHON:-python3}
DRY=${DRY_RUN:+--dry-run}
QK=${QUICK:+--quick}
T0=$(date +%s)
left() { echo $(( TOTAL_S - MARGIN_S - ($(date +%s) - T0) )); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }   # cap LIMIT

summarise() {  # the summary of what is in the work folder now
  "$PY" - "$W" <<'EOF'
import glob, json, os, sys
W = sys.argv[1]
print("=" * 78)
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:  # a file being written, or a broken one: say so, go on
        print(f"!! {os.path.relpath(p, W)}: {type(e).__name__}: {e}")
for p in sorted(glob.glob(os.path.join(W, "probes", "probes*.json"))):
    d = load(p)
    if d is None:
        continue
    print(f"{os.path.basename(p)}  ({'DRY RUN' if d['dry_run'] else d['platform'].get('gpu')}, "
          f"cuBLASLt {d['platform'].get('cublaslt_version', '?')}, raw kernels: {d.get('raw_kernels')})")
    for r in d["probes"]:
        extra = ", ".join(r.get("matching_hypotheses", []))
        print(f"  {r['id']:4s} {r['verdict'].upper():12s} {r['hypothesis']}" + (f"  [{extra}]" if extra else ""))
for p in sorted(glob.glob(os.path.join(W, "goldens", "*.json"))):
    d = load(p)
    if d is None:
        continue
    sp = [c for c in d["cases"] if isinstance(c.get("mmaemu_splitk"), list)]
    agree = [c["cublaslt"].get("trace_and_heuristic_agree") for c in d["cases"]]
    print(f"goldens {os.path.basename(p)}: {len(d['cases'])} cases, {len(sp)} split "
          f"({sorted({tuple(c['mmaemu_splitk']) for c in sp})}), rejected {len(d['rejected'])}, "
          f"trace/heuristic agree {sum(a is True for a in agree)}/{sum(a is not None for a in agree)}, "
          f"{d['seconds']} s")
for p in sorted(glob.glob(os.path.join(W, "tables", "*.json"))):
    d = load(p)
    if d is None:
        continue
    s, e = d["sweep"], d["envelope"]
    cc = d.get("cross_check", {})
    print(f"table {d['table_id']}: {s['rows']} rows ({'complete' if s['complete'] else 'INCOMPLETE'}, "
          f"{s['seconds']} s), {sum(1 for r in d['rows'] if (r['splits'] or 1) > 1)} split, "
          f"validated={e['validated']}, cross-check {cc.get('agree')}/{cc.get('shapes')}")
for p in sorted(glob.glob(os.path.join(W, "logs", "*.log"))):
    lines = open(p, errors="replace").read().strip().splitlines()
    name = os.path.basename(p)[:-4]
    if name == "env":
        continue
    rc = next((l for l in reversed(lines) if l.startswith("rc=")), "running")
    print(f"job {name}: {rc}" + ("" if name not in ("build", "replay") else "  | " + " | ".join(lines[-2:])))
    if any("Traceback" in l for l in lines):
        err = [l for l in lines if not l.startswith("rc=")]
        print(f"!! {name}.log has a traceback: {err[-1][:200] if err else ''}")
print("=" * 78)
EOF
}

pack() {  # packs the work folder into $OUT as it is now (one packer at a time; each file
          # replaced by a rename, so $OUT never holds half a tarball under its name)
  (
    command -v flock > /dev/null && flock 9
    tar czf "$OUT/ground_truth.tar.gz.part" -C "$W" --exclude=./.pack.lock . 2>/dev/null &&
      mv -f "$OUT/ground_truth.tar.gz.part" "$OUT/ground_truth.tar.gz"
    cp "$W"/probes/probes*.json "$OUT/" 2>/dev/null
    summarise > "$OUT/gt_summary.txt.part" 2>&1 && mv -f "$OUT/gt_summary.txt.part" "$OUT/gt_summary.txt"
  ) 9> "$W/.pack.lock"
}

job() {  # job NAME LIMIT CMD...: CMD under min(LIMIT, time left), log in logs/NAME.log, then pack
  local name=$1 limit; limit=$(cap "$2"); shift 2
  if [ "$limit" -le 0 ]; then echo "skipped: no time left" > "$W/logs/$name.log"; return 0; fi
  timeout -k 5 "$limit" "$@" > "$W/logs/$name.log" 2>&1
  echo "rc=$? (limit ${limit}s, ended at $(( $(date +%s) - T0 ))s)" >> "$W/logs/$name.log"
  pack
}

bg() { job "$@" & echo "started $1 (limit $(cap "$2")s, pid $!)"; }

built() {  # waits for the build (dry runs: the CPU model needs it); false if it failed
  while [ ! -e "$W/.build_done" ]; do sleep 1; [ "$(left)" -le 0 ] && return 1; done
  grep -q "^rc=0" "$W/logs/build.log"
}

{
  echo "date: $(date -u +%FT%TZ)"; echo "git: $(git rev-parse HEAD 2>/dev/null) $(git status --short 2>/dev/null | wc -l) changed"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  $PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)" 2>&1
  echo "TOTAL_S=$TOTAL_S; cores $(nproc)"
} > "$W/logs/env.log"
cat "$W/logs/env.log"
# the run's profiles and goldens are named after the GPU it runs on (h200, h100-sxm, ...;
# a rehearsal without a GPU: h200), not always h200
STEM=$($PY -c "from mmaemu_tools._hwcommon import device_stem; print(device_stem())" 2>>"$W/logs/env.log" || echo h200)
echo "stem: $STEM" | tee -a "$W/logs/env.log"

# 1. build (the replay and P8's model comparison; the dry run's CPU model)
( job build 150 env MAX_JOBS=${MAX_JOBS:-$(nproc)} MMAEMU_BUILD_FATBIN=0 $PY setup.py build_ext --inplace
  touch "$W/.build_done" ) &
BUILD_PID=$!
# in a dry run, what uses the CPU model starts once the build is there
model_ready() { [ -z "${DRY_RUN:-}" ] || built; }

# 2. split-K tables, three callers in parallel (ctypes heuristic queries, GPU barely used)
HB=${HEUR_BUDGET_S:-60}
for caller in torch te ws0; do
  bg "heur_$caller" $((HB + 60)) $PY -m mmaemu_tools.record_heuristics --caller $caller --out "$W/tables" \
     --budget-s "$HB" --cross-check ${CROSS_CHECK:-24} $DRY $QK
done

# 3. goldens: default workspace (all groups, most valuable first), then the split candidates
#    at 32 MiB and 0
TINY=${QUICK:+--corpus tiny}
(
  model_ready || exit 0
  job goldens_torch 120 $PY -m mmaemu_tools.record_goldens --out "$W/goldens" --tag "${STEM}_torch" --budget-s 90 $DRY $TINY
  job goldens_ws32m 50 env CUBLASLT_WORKSPACE_SIZE=32768 $PY -m mmaemu_tools.record_goldens --out "$W/goldens" \
     --tag "${STEM}_ws32m" --groups D,F --budget-s 35 $DRY $TINY
  job goldens_ws0 40 env CUBLASLT_WORKSPACE_SIZE=0 $PY -m mmaemu_tools.record_goldens --out "$W/goldens" \
     --tag "${STEM}_ws0" --groups F --budget-s 25 $DRY $TINY
) &
echo "started goldens chain (pid $!)"

# 4. probes: everything at torch's workspace; restart maps and reductions again at 32 MiB; those
#    that compare with the model again once the build is there
( model_ready || exit 0
  job probes 180 $PY -m mmaemu_tools.probe_hopper --out "$W/probes" $DRY $QK ) &
( model_ready || exit 0
  job probes_ws32m 150 env CUBLASLT_WORKSPACE_SIZE=32768 $PY -m mmaemu_tools.probe_hopper --out "$W/probes" \
     --only P3,P4,P5 --tag ws32m $DRY $QK ) &
if [ -z "${DRY_RUN:-}" ]; then   # the probes that compare with mmaemu itself: P8, block-wise, row-wise/bias
  ( built || exit 0
    ids=$($PY -c "from mmaemu_tools import probe_hopper as p; print(','.join(['P8', 'blockwise_cublaslt'] + [k for k in p.PROBES if k.startswith('rowwise_')]))")
    job probes_model 90 $PY -m mmaemu_tools.probe_hopper --out "$W/probes" --only "${ids:-P8}" --tag model ) &
fi

wait

# 5. replay the new goldens with mmaemu on this machine's CPU (and its CUDA backend if any)
if [ "$(left)" -gt 20 ] && grep -q "^rc=0" "$W/logs/build.log"; then
  job replay "$(left)" env MMAEMU_HW_GOLDENS_DIR="$W/goldens" MMAEMU_ALLOW_DRY_GOLDENS=${DRY_RUN:+1} \
    $PY -m pytest -q -x --no-header -p no:cacheprovider test/test_hw_goldens.py -k cpu
else
  echo "replay skipped: $(left) s left, build: $(tail -1 "$W/logs/build.log")" > "$W/logs/replay.log"
  pack
fi
cat "$OUT/gt_summary.txt"
echo "total $(( $(date +%s) - T0 )) s; files in $OUT: $(ls "$OUT" | tr '\n' ' '); work folder $W"
