#!/usr/bin/env bash
# Static checks of the C core, defined once (test/test_c_lint.py runs this script): every
# translation unit of csrc/{core,cpu,cuda} (with the kernel headers it includes), the fuzz
# harness, the C programs the tests build (test/c) and the C benchmarks (benchmarks/*.c) must
# compile without a single warning under -Wall -Wextra with gcc (and clang when installed), at
# -O0 and -O2 (some warnings need the optimiser), with the exact-arithmetic flags of
# csrc/flags.txt; the public headers must also be warning-free as C++ (the torch shim includes
# them), and cppcheck must report nothing.
# Exit status 0 = clean, 1 = a finding, 2 = a tool missing (gcc, g++, cppcheck).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in gcc g++ cppcheck; do
    if ! command -v "$tool" >/dev/null; then
        echo "lint_c: $tool not found (apt-get install -y $tool)" >&2
        exit 2
    fi
done
read -ra EXACT <<< "$(sed -n 's/^c: //p' csrc/flags.txt)"   # the flags the bits depend on
INCLUDES=(-Icsrc/include -Icsrc -Icsrc/kernels -Icsrc/cpu)
FLAGS=("${EXACT[@]}" -Wall -Wextra -Werror "${INCLUDES[@]}")
sources=(csrc/core/*.c csrc/cpu/*.c csrc/cuda/*.c test/fuzz/fuzz_gemm.c test/fuzz/replay_main.c
         test/c/*.c benchmarks/*.c)
compilers=(gcc)
command -v clang >/dev/null && compilers+=(clang)
jobs=$(nproc 2>/dev/null || echo 1)
for cc in "${compilers[@]}"; do
    for opt in -O0 -O2; do
        printf '%s\n' "${sources[@]}" |
            xargs -P "$jobs" -I{} "$cc" "${FLAGS[@]}" "$opt" -c {} -o /dev/null
    done
    echo "lint_c: $cc -Wall -Wextra -Werror: ${#sources[@]} files clean"
done
for header in mmaemu.h cuda_backend.h; do
    echo "#include \"$header\"" | g++ -std=c++17 -Wall -Wextra -Werror -Icsrc/include -Icsrc -x c++ -fsyntax-only -
done
echo "lint_c: csrc/include/mmaemu.h and csrc/include/cuda_backend.h clean as C++17"
cppcheck --enable=warning,style,performance,portability --std=c11 --inline-suppr \
    --suppress=missingIncludeSystem --error-exitcode=1 -q -j "$jobs" "${INCLUDES[@]}" "${sources[@]}"
echo "lint_c: cppcheck clean"
