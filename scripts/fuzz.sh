#!/usr/bin/env bash
# Builds the libFuzzer harness test/fuzz/fuzz_gemm.c (clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, every finding fatal) and runs it for the given number of seconds
# (default 60; a third each with the default decode budgets, with budgets that make the cpu
# backend stream K in segments, and with a tiny L2 that makes it take short segments), starting from the seed corpus test/fuzz/corpus/. New inputs go to a scratch
# corpus under build/fuzz/, never into the repository. Exit status 0: nothing found; non-zero:
# a crash, sanitizer report or bit mismatch, with the input saved under build/fuzz/artifacts/
# (replay it with: build/fuzz/fuzz_gemm build/fuzz/artifacts/crash-...).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
CC="${FUZZ_CC:-clang}"
if ! command -v "$CC" >/dev/null; then
    echo "fuzz.sh: $CC not found (apt-get install -y clang)" >&2
    exit 2
fi
out=build/fuzz
mkdir -p "$out/corpus" "$out/artifacts"
# Two builds: the default budgets, and budgets shrunk so that the cpu backend streams K in
# segments for every K above 128 (test/test_cpu_backend.py does the same with STREAM_K).
STREAM_FLAGS=(-DMM_CPU_PANEL_BUDGET=12288 -DMM_CPU_A_BUDGET=4096 -DMM_CPU_STREAM_CHUNK=96
              -DMM_CPU_STATE_BUDGET=1024)
read -ra EXACT <<< "$(sed -n 's/^c: //p' csrc/flags.txt)"   # the flags the bits depend on
build() { # build NAME EXTRA_FLAGS...
    local name=$1; shift
    "$CC" "${EXACT[@]}" -g -O1 -Wall -Wextra -Werror "$@" \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
        -Icsrc/include -Icsrc test/fuzz/fuzz_gemm.c csrc/core/*.c csrc/cpu/*.c \
        -pthread -lm -o "$out/$name"
}
# and a tiny L2, so that every K of 128 or more runs in short segments row chunk by row chunk
L2_FLAGS=(-DMM_CPU_L2_BYTES=4096 -DMM_CPU_SEG_K=64 -DMM_CPU_SEG_MIN_M=1)
build fuzz_gemm
build fuzz_gemm_stream "${STREAM_FLAGS[@]}"
build fuzz_gemm_l2seg "${L2_FLAGS[@]}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
third=$(( (seconds + 2) / 3 ))
for exe in fuzz_gemm fuzz_gemm_stream fuzz_gemm_l2seg; do
    echo "fuzz.sh: $exe for ${third}s"
    "$out/$exe" -max_total_time="$third" -timeout=20 -rss_limit_mb=2048 -max_len=4096 \
        -print_final_stats=1 -artifact_prefix="$out/artifacts/" "$out/corpus" test/fuzz/corpus
done
