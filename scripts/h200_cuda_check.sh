#!/usr/bin/env bash
# h200_cuda_check.sh: the CUDA backend's check on a GPU machine (an H200: torch 2.11 + CUDA 13).
#
#   OUT=/some/dir bash scripts/h200_cuda_check.sh        (from anywhere; no network needed)
#
# The second of the two commands of a GPU run (docs/hardware_validation.md, "Running it"):
#   run(command="OUT=$OUT bash scripts/h200_cuda_check.sh", carry=["mmaemu/_fatbin"],
#       timeout_s=300)   # right after command 1, on the warm machine
# Build outputs are git-ignored and do not travel; the fatbins built here do when carried:
# setup.py rebuilds a fatbin only where its SHA-256 stamp differs from the kernel sources, so a
# carried, current _fatbin costs no nvcc time there (MMAEMU_BUILD_FATBIN=0 skips nvcc entirely).
# The C files compile MAX_JOBS at a time (default: every core).
#
# Steps, most important first, each under its own time limit (seconds, overridable: T_BUILD,
# T_CUDA, T_SELFTEST, T_BENCH, T_THREADS, T_REST; 0 skips the step) and all inside TOTAL_S (default 270,
# below the command's timeout_s: a step gets at most what is left minus 10 s). The defaults
# (150, 90, 40, 60, rest) leave the benchmark its minute after a 40 s build with carried fatbins. Files in $OUT
# (7 of the 8 a command may return; none shared with h200_ground_truth.sh):
#   env_build.log    GPU, driver, toolchain; the package built from source, fatbins for every
#                    target where nvcc is there, SASS facts (QGMMA count in the wgmma kernel)
#   tests_cuda.log   the CUDA tests, GPU tests included (test/test_cuda_*.py), verbose
#   selftest.log     python -m mmaemu selftest and info
#   bench.log        benchmarks/cuda.py --quick (+ bench.json, rewritten after every row), then
#                    benchmarks/threads.py (the cpu executor at 1, 2, 4, ... threads)
#   tests_rest.log   the rest of the test suite
#   cuda_summary.txt one line per step: exit status, seconds, command
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mmaemu-h200}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export MMAEMU_CACHE_DIR=${MMAEMU_CACHE_DIR:-/tmp/mmaemu-check-cache.$$} HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-dev}
SUMMARY=$OUT/cuda_summary.txt
: > "$SUMMARY"
TOTAL_S=${TOTAL_S:-270}

step() { # step NAME LIMIT LOGFILE COMMAND...: LIMIT 0 skips (timeout 0 would mean no limit)
    local name=$1 limit=$2 log=$3; shift 3
    local t0=$SECONDS left=$((TOTAL_S - SECONDS - 10))
    if [ "$limit" -le 0 ] || [ "$left" -le 0 ]; then
        printf '%-11s skipped (%s)  %s\n' "$name" "$([ "$limit" -le 0 ] && echo "limit 0" || echo "no time left")" \
            "$*" | tee -a "$SUMMARY"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "=== $name (limit ${limit}s): $*" >> "$log"
    timeout -k 5 "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    printf '%-11s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" "$*" | tee -a "$SUMMARY"
    return $rc
}

XDIST=""
$PY -c "import xdist" >/dev/null 2>&1 && XDIST="-n 8"

# 1. environment and build (fatbins for sm_75 ... sm_120 + PTX, and sm_90a for wgmma, unless
#    carried and current)
LOG=$OUT/env_build.log
{
    date -u; uname -a; nvidia-smi || true; nvcc --version || true
    $PY -c "import torch, sys; print('python', sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
    $PY -m pip list 2>/dev/null | grep -i -E "^(torch|numpy|hypothesis|pytest|pytest-xdist|nvidia-cuda-nvrtc|setuptools) " || true
    git log --oneline -3 2>/dev/null || true
} > "$LOG" 2>&1
rm -rf build mmaemu/_C*.so mmaemu/kernels      # the carried mmaemu/_fatbin stays
echo "carried fatbins: $(ls mmaemu/_fatbin 2>/dev/null | tr '\n' ' ')" >> "$LOG"
step build "${T_BUILD:-150}" "$LOG" $PY setup.py build_ext --inplace
{
    ls -la mmaemu/_fatbin 2>&1
    for f in mmaemu/_fatbin/*.fatbin; do echo "--- $f: $(cuobjdump --list-elf "$f" 2>&1 | tr '\n' ' ')"; done
    echo "--- QGMMA (FP8 wgmma) instructions in wgmma.fatbin: $(cuobjdump --dump-sass mmaemu/_fatbin/wgmma.fatbin 2>/dev/null | grep -c QGMMA)"
    cuobjdump --dump-resource-usage mmaemu/_fatbin/wgmma.fatbin 2>&1 | grep -E "Function|REG" | head -8
} >> "$LOG" 2>&1

# 2. the CUDA tests with the GPU
step tests_cuda "${T_CUDA:-90}" "$OUT/tests_cuda.log" $PY -m pytest -v -rs $XDIST --durations=15 \
    test/test_cuda_gpu.py test/test_cuda_*.py

# 3. self-tests (verdicts cached by step 2 in $MMAEMU_CACHE_DIR) and status
LOG=$OUT/selftest.log
step selftest "${T_SELFTEST:-40}" "$LOG" $PY -m mmaemu selftest
timeout -k 5 30 $PY -m mmaemu info >> "$LOG" 2>&1

# 4. throughput beside native torch._scaled_mm
step bench "${T_BENCH:-60}" "$OUT/bench.log" $PY benchmarks/cuda.py --quick --json "$OUT/bench.json"

# 5. the cpu executor's thread scaling on this machine's cores (1, 2, 4, ... threads, one run)
step threads "${T_THREADS:-30}" "$OUT/bench.log" $PY benchmarks/threads.py --rounds 2
# 6. the rest of the suite
step tests_rest "${T_REST:-120}" "$OUT/tests_rest.log" $PY -m pytest -v -rs $XDIST --durations=15 \
    --ignore-glob='test/test_cuda_*.py' test

rm -rf "$MMAEMU_CACHE_DIR"
cat "$SUMMARY"
