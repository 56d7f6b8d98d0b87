#!/usr/bin/env bash
# One prepared run on an H200 (or any sm_90 GPU): hardware probes, GEMM goldens, split-K tables.
#
#   OUT=/some/dir bash scripts/h200_ground_truth.sh          # on the GPU machine
#   DRY_RUN=1 QUICK=1 OUT=/tmp/x bash scripts/h200_ground_truth.sh   # rehearsal on a CPU
#
# Runs, in parallel and each under its own timeout (total wall budget TOTAL_S, default 300 s):
#   - the mmaemu C extension build (for the P8 model comparison and the replay at the end);
#   - record_heuristics.py for the h200 profiles: torch (1 MiB), te (32 MiB), ws0;
#   - record_goldens.py with torch's default workspace, then 32 MiB and 0 for the split cases;
#   - probe_hopper.py (P0-P10) with torch's workspace, and P3-P5 again with 32 MiB;
# then replays the new goldens with mmaemu on this machine's CPU if time is left, packs
# everything into $OUT/ground_truth.tar.gz and prints a summary. At most 8 files land in $OUT
# (the tarball, summary.txt, probes*.json); the work folder is $WORK or a fresh /tmp folder.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200_out}
TOTAL_S=${TOTAL_S:-300}
W=${WORK:-$(mktemp -d /tmp/h200_work.XXXXXX)}   # outside $OUT: only a few files go back
mkdir -p "$OUT" "$W/goldens" "$W/tables" "$W/probes" "$W/logs"
export PYTHONPATH=$ROOT:$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
DRY=${DRY_RUN:+--dry-run}
QK=${QUICK:+--quick}
T0=$(date +%s)
left() { echo $(( TOTAL_S - ($(date +%s) - T0) )); }
bg() {  # bg NAME LIMIT_S CMD...: runs CMD under a timeout in the background, log in logs/NAME.log
  local name=$1 limit=$2; shift 2
  ( timeout -k 5 "$limit" "$@" > "$W/logs/$name.log" 2>&1; echo "rc=$?" >> "$W/logs/$name.log" ) &
  echo "started $name (limit ${limit}s, pid $!)"
}

{
  echo "date: $(date -u +%FT%TZ)"; echo "git: $(git rev-parse HEAD 2>/dev/null) $(git status --short 2>/dev/null | wc -l) changed"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  $PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)" 2>&1
} > "$W/logs/env.log"
cat "$W/logs/env.log"

# 1. build (only needed for the model comparison of P8 and the replay)
if [ -z "${DRY_RUN:-}" ]; then
  bg build 150 env MAX_JOBS=8 MMAEMU_BUILD_FATBIN=0 $PY setup.py build_ext --inplace
  BUILD_PID=$!
else
  BUILD_PID=
fi

# 2. split-K tables, three callers in parallel (ctypes heuristic queries, GPU barely used)
HB=${HEUR_BUDGET_S:-110}
for caller in torch te ws0; do
  bg "heur_$caller" $((HB + 90)) $PY scripts/record_heuristics.py --caller $caller --out "$W/tables" \
     --budget-s "$HB" --cross-check ${CROSS_CHECK:-24} $DRY $QK
done

# 3. goldens: default workspace (all groups), then the split candidates at 32 MiB and 0
(
  timeout -k 5 130 $PY scripts/record_goldens.py --out "$W/goldens" --tag h200_torch --budget-s 100 $DRY \
     ${QUICK:+--corpus tiny} > "$W/logs/goldens_torch.log" 2>&1
  echo "rc=$?" >> "$W/logs/goldens_torch.log"
  CUBLASLT_WORKSPACE_SIZE=32768 timeout -k 5 70 $PY scripts/record_goldens.py --out "$W/goldens" \
     --tag h200_ws32m --groups D,F --budget-s 45 $DRY ${QUICK:+--corpus tiny} > "$W/logs/goldens_ws32m.log" 2>&1
  echo "rc=$?" >> "$W/logs/goldens_ws32m.log"
  CUBLASLT_WORKSPACE_SIZE=0 timeout -k 5 60 $PY scripts/record_goldens.py --out "$W/goldens" \
     --tag h200_ws0 --groups F --budget-s 30 $DRY ${QUICK:+--corpus tiny} > "$W/logs/goldens_ws0.log" 2>&1
  echo "rc=$?" >> "$W/logs/goldens_ws0.log"
) &
GOLD_PID=$!
echo "started goldens chain (pid $GOLD_PID)"

# 4. probes: everything at torch's workspace; restart maps and reductions again at 32 MiB
bg probes 170 $PY scripts/probe_hopper.py --out "$W/probes" $DRY $QK
bg probes_ws32m 120 env CUBLASLT_WORKSPACE_SIZE=32768 $PY scripts/probe_hopper.py --out "$W/probes" \
   --only P3,P4,P5 --tag ws32m $DRY $QK

wait "$GOLD_PID"
[ -n "$BUILD_PID" ] && wait "$BUILD_PID"
wait

# 5. replay the new goldens with mmaemu on this machine's CPU (and its CUDA backend if any)
if [ "$(left)" -gt 40 ]; then
  timeout -k 5 $(( $(left) - 15 )) env MMAEMU_HW_GOLDENS_DIR="$W/goldens" MMAEMU_ALLOW_DRY_GOLDENS=${DRY_RUN:+1} \
    $PY -m pytest -q -x --no-header -p no:cacheprovider test/test_hw_goldens.py -k cpu \
    > "$W/logs/replay.log" 2>&1
  echo "rc=$?" >> "$W/logs/replay.log"
else
  echo "replay skipped: $(left) s left" > "$W/logs/replay.log"
fi

# 6. pack and summarise
tar czf "$OUT/ground_truth.tar.gz" -C "$W" . 2>/dev/null
cp "$W"/probes/probes*.json "$OUT/" 2>/dev/null
$PY - "$W" <<'EOF' | tee "$OUT/summary.txt"
import glob, json, os, sys
W = sys.argv[1]
print("=" * 78)
for p in sorted(glob.glob(os.path.join(W, "probes", "probes*.json"))):
    d = json.load(open(p))
    print(f"{os.path.basename(p)}  ({'DRY RUN' if d['dry_run'] else d['platform'].get('gpu')}, "
          f"cuBLASLt {d['platform'].get('cublaslt_version', '?')}, raw kernels: {d.get('raw_kernels')})")
    for r in d["probes"]:
        extra = ", ".join(r.get("matching_hypotheses", []))
        print(f"  {r['id']:4s} {r['verdict'].upper():12s} {r['hypothesis']}" + (f"  [{extra}]" if extra else ""))
for p in sorted(glob.glob(os.path.join(W, "goldens", "*.json"))):
    d = json.load(open(p))
    sp = [c for c in d["cases"] if isinstance(c.get("mmaemu_splitk"), list)]
    agree = [c["cublaslt"].get("trace_and_heuristic_agree") for c in d["cases"]]
    print(f"goldens {os.path.basename(p)}: {len(d['cases'])} cases, {len(sp)} split "
          f"({sorted({tuple(c['mmaemu_splitk']) for c in sp})}), rejected {len(d['rejected'])}, "
          f"trace/heuristic agree {sum(a is True for a in agree)}/{sum(a is not None for a in agree)}, "
          f"{d['seconds']} s")
for p in sorted(glob.glob(os.path.join(W, "tables", "*.json"))):
    d = json.load(open(p))
    s, e = d["sweep"], d["envelope"]
    cc = d.get("cross_check", {})
    print(f"table {d['table_id']}: {s['rows']} rows ({'complete' if s['complete'] else 'INCOMPLETE'}, "
          f"{s['seconds']} s), {sum(1 for r in d['rows'] if (r['splits'] or 1) > 1)} split, "
          f"validated={e['validated']}, cross-check {cc.get('agree')}/{cc.get('shapes')}")
for name in ("build", "replay"):
    p = os.path.join(W, "logs", f"{name}.log")
    if os.path.exists(p):
        tail = open(p).read().strip().splitlines()[-3:]
        print(f"{name}: " + " | ".join(tail))
for p in sorted(glob.glob(os.path.join(W, "logs", "*.log"))):
    t = open(p).read()
    if "Traceback" in t:
        print(f"!! {os.path.basename(p)} has a traceback: " + t.strip().splitlines()[-1][:200])
print("=" * 78)
EOF
echo "total $(( $(date +%s) - T0 )) s; files in $OUT: $(ls "$OUT" | tr '\n' ' '); work folder $W"
