#!/usr/bin/env bash
# Static checks of the C core: every csrc/*.c (with the kernel headers it includes), the fuzz
# harness, the C programs the tests build (test/c) and the C benchmarks (benchmarks/*.c) must compile
# without a single warning under -Wall -Wextra with gcc (and clang when installed), at -O0 and
# -O2 (some warnings need the optimiser), with the exact-arithmetic flags of csrc/flags.txt; the
# public headers must also be warning-free as C++ (the torch shim includes them), and cppcheck
# must report nothing.
# Exit status 0 = clean. Needs gcc, g++ and cppcheck (apt-get install -y cppcheck).
set -euo pipefail
cd "$(dirname "$0")/.."
read -ra EXACT <<< "$(sed -n 's/^c: //p' csrc/flags.txt)"   # the flags the bits depend on
FLAGS=("${EXACT[@]}" -Wall -Wextra -Werror -Icsrc -Icsrc/kernels)
sources=(csrc/*.c test/fuzz/fuzz_gemm.c test/fuzz/replay_main.c test/c/*.c benchmarks/*.c)
compilers=(gcc)
command -v clang >/dev/null && compilers+=(clang)
for cc in "${compilers[@]}"; do
    for opt in -O0 -O2; do
        for src in "${sources[@]}"; do
            "$cc" "${FLAGS[@]}" "$opt" -c "$src" -o /dev/null
        done
    done
    echo "lint_c: $cc -Wall -Wextra -Werror: ${#sources[@]} files clean"
done
for header in mmaemu.h cuda_backend.h; do
    echo "#include \"$header\"" | g++ -std=c++17 -Wall -Wextra -Werror -Icsrc -x c++ -fsyntax-only -
done
echo "lint_c: csrc/mmaemu.h and csrc/cuda_backend.h clean as C++17"
if ! command -v cppcheck >/dev/null; then
    echo "lint_c: cppcheck not found (apt-get install -y cppcheck)" >&2
    exit 2
fi
cppcheck --enable=warning,style,performance,portability --std=c11 --inline-suppr \
    --suppress=missingIncludeSystem --error-exitcode=1 -q -Icsrc -Icsrc/kernels "${sources[@]}"
echo "lint_c: cppcheck clean"
