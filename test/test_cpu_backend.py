"""The `cpu` backend returns the `reference` backend's bits (issue 4).

Every case runs the reference once and the cpu executor with each SIMD kernel this CPU has
('cpu:<simd>') and with 1 and 2 threads, and compares bit patterns. The AVX-512 kernel is
also run on SIMDe's portable intrinsics when a C compiler and SIMDe's headers are at hand
(test_avx512_kernel_on_emulated_intrinsics), so its logic is checked on CPUs without AVX-512.
"""
import contextlib
import ctypes
import os
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

import cbuild
from executors import CPU, CPU_SIMD

import mmaemu
from mmaemu import _C
from mmaemu.runtime import diagnostics
from mmaemu.testing import assert_bitwise_equal

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATHS = _C.cpu_simd_paths().split(",")
FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
OUT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
       "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "acc": None}
PRESETS = ["hopper", "ada", "b200"]


@contextlib.contextmanager
def simd_path(name):
    old = os.environ.get("MMAEMU_CPU_SIMD")
    os.environ["MMAEMU_CPU_SIMD"] = name
    try:
        yield
    finally:
        if old is None:
            del os.environ["MMAEMU_CPU_SIMD"]
        else:
            os.environ["MMAEMU_CPU_SIMD"] = old


@contextlib.contextmanager
def num_threads(n):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def fp8_codes(rng, rows, cols, fmt, mode, zero_rate=0.05, special_rate=0.0):
    """FP8 codes as a uint8 array. mode: 'uniform' (every exponent), 'clustered' (three
    neighbouring exponents, so products align closely and cancel), 'subnormal' (exponent
    fields 0 and 1)."""
    man_bits, top = (3, 15) if fmt == "e4m3" else (2, 30)
    shape = (rows, cols)
    sign = rng.integers(0, 2, shape) << 7
    man = rng.integers(0, 1 << man_bits, shape)
    if mode == "uniform":
        ex = rng.integers(0, top + 1, shape)
    elif mode == "clustered":
        ex = int(rng.integers(0, top - 2)) + rng.integers(0, 3, shape)
    else:
        ex = rng.integers(0, 2, shape)
    code = sign | (ex << man_bits) | man
    if fmt == "e4m3":
        code = np.where((code & 0x7F) == 0x7F, code - 1, code)  # NaN only where asked for
    code = np.where(rng.random(shape) < zero_rate, sign, code)
    if special_rate:
        specials = np.array([0x7F, 0xFF] if fmt == "e4m3" else [0x7C, 0xFC, 0x7D, 0xFE, 0x7F])
        pick = specials[rng.integers(0, len(specials), shape)]
        code = np.where(rng.random(shape) < special_rate, pick, code)
    return code.astype(np.uint8)


def as_fp8(codes, fmt, pad=0):
    """A [rows, cols] FP8 tensor; with pad > 0 a column slice of a wider one (row stride > cols)."""
    t = torch.from_numpy(np.ascontiguousarray(codes))
    if pad:
        wide = torch.zeros(t.shape[0], t.shape[1] + pad, dtype=torch.uint8)
        wide[:, : t.shape[1]] = t
        t = wide[:, : t.shape[1]]
    return t.view(FP8[fmt])


def gemm(case, x, w, backend):
    if case["out"] == "acc":
        return torch.ops.mmaemu.accumulate(x, w, case["fast"], case["preset"], case["splits"],
                                           case["scheme"], backend)
    scale_result = torch.tensor(case["scale_result"]) if case["scale_result"] is not None else None
    return torch.ops.mmaemu.scaled_mm(x, w.t(), torch.tensor(case["scale_a"]),
                                      torch.tensor(case["scale_b"]), None, scale_result,
                                      OUT[case["out"]], case["fast"], case["preset"],
                                      case["splits"], case["scheme"], backend, case["epilogue"])


def check_all_paths(case, x, w, threads=(1, 2)):
    expected = gemm(case, x, w, "reference")
    for path in PATHS:
        for n in threads:
            with simd_path(path), num_threads(n):
                actual = gemm(case, x, w, f"cpu:{path}")
            assert_bitwise_equal(actual, expected, f"{path}, {n} threads, {case}")


@st.composite
def gemm_cases(draw):
    splits = draw(st.sampled_from([1, 1, 1, 2, 3, 5, 6, 8, 70]))
    out = draw(st.sampled_from(list(OUT)))
    preset = draw(st.sampled_from(PRESETS))
    scheme = "none" if splits == 1 else draw(st.sampled_from(["contiguous", "serial", "pairwise"]))
    return {
        "M": draw(st.integers(1, 12)), "N": draw(st.integers(1, 48)),
        "K": draw(st.sampled_from([1, 7, 31, 32, 33, 64, 100, 128, 129, 256, 300, 513, 700])),
        "fmt_a": draw(st.sampled_from(["e4m3", "e5m2"])),
        "fmt_b": draw(st.sampled_from(["e4m3", "e5m2"])),
        "preset": preset, "fast": draw(st.booleans()),
        "splits": splits,
        "scheme": scheme,
        "out": out, "epilogue": draw(st.integers(0, 2)),
        "scale_a": draw(st.sampled_from([1.0, 0.015625, 3.0, 1e-30])),
        "scale_b": draw(st.sampled_from([1.0, 0.03125, 7.5, 1e30])),
        "scale_result": draw(st.sampled_from([None, 2.0])) if out in ("e4m3", "e5m2") else None,
        "mode_a": draw(st.sampled_from(["uniform", "clustered", "subnormal"])),
        "mode_b": draw(st.sampled_from(["uniform", "clustered", "subnormal"])),
        "special_rate": draw(st.sampled_from([0.0, 0.0, 0.0, 0.003, 0.03])),
        "pad_a": draw(st.sampled_from([0, 0, 5])), "pad_b": draw(st.sampled_from([0, 0, 3])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


@given(gemm_cases())
def test_cpu_matches_reference(case):
    rng = np.random.default_rng(case["seed"])
    x = as_fp8(fp8_codes(rng, case["M"], case["K"], case["fmt_a"], case["mode_a"],
                         special_rate=case["special_rate"]), case["fmt_a"], case["pad_a"])
    w = as_fp8(fp8_codes(rng, case["N"], case["K"], case["fmt_b"], case["mode_b"],
                         special_rate=case["special_rate"]), case["fmt_b"], case["pad_b"])
    check_all_paths(case, x, w, threads=(1,))


BASE = {"fmt_a": "e4m3", "fmt_b": "e4m3", "splits": 1, "scheme": "none", "out": "bf16",
        "epilogue": 0, "scale_a": 0.015625, "scale_b": 0.03125, "scale_result": None}


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("fast", [True, False])
def test_threads_and_paths_agree_on_a_larger_gemm(preset, fast):
    """Large enough (40 x 100 x 700) for several work items per thread."""
    rng = np.random.default_rng(7)
    x = as_fp8(fp8_codes(rng, 40, 700, "e4m3", "clustered"), "e4m3")
    w = as_fp8(fp8_codes(rng, 100, 700, "e4m3", "uniform"), "e4m3")
    check_all_paths(dict(BASE, preset=preset, fast=fast), x, w)


@pytest.mark.parametrize("preset", PRESETS)
def test_a_gemm_whose_tiles_outgrow_l2_runs_in_segments_with_the_reference_bits(preset):
    """512 x 48 x 1024: a tile's A rows and panel over all of K outgrow half of a 512 KiB L2, so
    it runs in segments of 256 k, its row chunks' A kept in L2 (csrc/cpu/cache.c, mm_cpu_whole_k_fits_l2;
    on a CPU with a larger L2 it runs over all of K), both accumulation modes."""
    rng = np.random.default_rng(23)
    x = as_fp8(fp8_codes(rng, 512, 1024, "e4m3", "clustered"), "e4m3")
    w = as_fp8(fp8_codes(rng, 48, 1024, "e4m3", "uniform"), "e4m3")
    for fast in (True, False):
        check_all_paths(dict(BASE, preset=preset, fast=fast), x, w)


def test_the_kept_a_buffer_serves_smaller_and_larger_gemms_after_it():
    """The buffer of decoded A rows outlives its call (csrc/cpu/buffers.c, mm_cpu_a_buffer_take): a GEMM
    after a larger one reads none of the rows that one left in it, and one after a smaller one
    gets a buffer large enough (each against the reference, every SIMD path, 1 and 2 threads)."""
    rng = np.random.default_rng(11)
    for rows, cols, k in [(48, 70, 900), (5, 20, 64), (48, 70, 900), (90, 130, 1500), (3, 64, 33)]:
        x = as_fp8(fp8_codes(rng, rows, k, "e4m3", "clustered"), "e4m3")
        w = as_fp8(fp8_codes(rng, cols, k, "e4m3", "uniform"), "e4m3")
        check_all_paths(dict(BASE, preset="hopper", fast=True), x, w)


@pytest.mark.parametrize("splits,scheme", [(4, "contiguous"), (3, "serial"), (7, "pairwise")])
@pytest.mark.parametrize("out", ["acc", "f32", "e4m3"])
def test_splits_threads_and_outputs(splits, scheme, out):
    rng = np.random.default_rng(splits)
    x = as_fp8(fp8_codes(rng, 21, 900, "e4m3", "uniform"), "e4m3")
    w = as_fp8(fp8_codes(rng, 35, 900, "e5m2", "clustered"), "e5m2")
    case = dict(BASE, preset="hopper", fast=False, splits=splits, scheme=scheme, out=out,
                fmt_b="e5m2", scale_result=4.0 if out == "e4m3" else None)
    check_all_paths(case, x, w)


@pytest.mark.parametrize("preset", PRESETS)
def test_nan_and_inf_rows_and_columns(preset):
    """NaN/Inf codes in some rows and columns: those outputs come from the reference path,
    the others from the kernels."""
    rng = np.random.default_rng(3)
    a = fp8_codes(rng, 10, 200, "e5m2", "uniform")
    b = fp8_codes(rng, 40, 200, "e5m2", "uniform")
    a[2, 17] = 0x7C   # +Inf
    a[5, 3] = 0x7D    # NaN
    b[7, 150] = 0xFC  # -Inf
    b[33, 0] = 0x7C
    b[20, 5] = 0x00   # a zero where row 5 has its NaN
    for fast in (True, False):
        case = dict(BASE, fmt_a="e5m2", fmt_b="e5m2", preset=preset, fast=fast, out="f32")
        check_all_paths(case, as_fp8(a, "e5m2"), as_fp8(b, "e5m2"))
        check_all_paths(dict(case, out="acc"), as_fp8(a, "e5m2"), as_fp8(b, "e5m2"))


@contextlib.contextmanager
def rounding_mode(mode):
    """The calling thread's C rounding mode (x86-64 Linux fenv values); yields libm."""
    libm = ctypes.CDLL("libm.so.6")
    old = libm.fegetround()
    assert libm.fesetround(mode) == 0
    try:
        yield libm
    finally:
        libm.fesetround(old)


@pytest.mark.skipif(not (os.uname().machine == "x86_64" and os.uname().sysname == "Linux"),
                    reason="the fenv mode values are x86-64 Linux's")
@pytest.mark.parametrize("mode", [0x400, 0x800, 0xC00], ids=["downward", "upward", "toward-zero"])
@pytest.mark.parametrize("preset", PRESETS)
def test_the_callers_rounding_mode_changes_no_bit(mode, preset):
    """The hardware's fp32 adds round to nearest: a rounding mode the caller set changes no
    output of either CPU backend (each computes in round to nearest and gives the mode back).
    Row 3 of A is all +-0 codes, so its outputs are sums that are exactly 0."""
    rng = np.random.default_rng(11)
    a = fp8_codes(rng, 12, 600, "e4m3", "clustered")
    a[3] = 0x80 * (rng.integers(0, 2, 600))
    x, w = as_fp8(a, "e4m3"), as_fp8(fp8_codes(rng, 70, 600, "e4m3", "uniform"), "e4m3")
    for fast in (True, False):
        for splits, scheme in ((1, "none"), (3, "serial")):
            case = dict(BASE, preset=preset, fast=fast, out="acc", splits=splits, scheme=scheme)
            expected = gemm(case, x, w, "reference")
            for backend in ("reference", CPU):
                with rounding_mode(mode) as libm:
                    actual = gemm(case, x, w, backend)
                    assert libm.fegetround() == mode  # given back
                assert_bitwise_equal(actual, expected, f"{backend} under mode {mode:#x}, {case}")


def test_auto_on_cpu_tensors_is_the_cpu_backend():
    rng = np.random.default_rng(11)
    x = as_fp8(fp8_codes(rng, 64, 320, "e4m3", "clustered"), "e4m3")
    w = as_fp8(fp8_codes(rng, 48, 320, "e4m3", "clustered"), "e4m3")
    case = dict(BASE, preset="hopper", fast=True)
    assert_bitwise_equal(gemm(case, x, w, CPU), gemm(case, x, w, "reference"))
    y = mmaemu.scaled_mm(x, w.t(), torch.tensor(0.5), torch.tensor(2.0), out_dtype=torch.bfloat16,
                         use_fast_accum=True, splitk=1, backend="cpu")
    assert_bitwise_equal(y, gemm(dict(case, scale_a=0.5, scale_b=2.0), x, w, "reference"))
    plan = mmaemu.explain(x, w.t(), torch.tensor(0.5), torch.tensor(2.0), out_dtype=torch.bfloat16,
                          use_fast_accum=True, splitk=1)
    assert plan.backend == CPU or plan.backend.startswith("cpu:")   # auto: a measured SIMD kernel


@pytest.mark.parametrize("value", ["cpu:sse9", "cpu:AVX2", "cpu:fast", "cpu", "auto", "cuda:h4",
                                   "host:reference", "cuda", ""])
def test_the_op_refuses_what_is_no_cpu_executor(value):
    """The op runs exactly the executor it is named: on CPU tensors 'reference' or 'cpu:<simd>';
    anything else is refused with the accepted forms (no fallback, no default)."""
    x = torch.zeros(2, 32).to(torch.float8_e4m3fn)
    with pytest.raises(RuntimeError, match=rf"'{re.escape(value)}' names no executor of CPU tensors; pass "
                                           r"'reference' or 'cpu:<simd>' \(<simd>: portable, avx2, avx512"):
        gemm(dict(BASE, preset="hopper", fast=True), x, x, value)


def test_a_simd_kernel_this_cpu_lacks_is_refused_and_every_other_runs():
    x = torch.ones(2, 32).to(torch.float8_e4m3fn)
    case = dict(BASE, preset="hopper", fast=True)
    assert "portable" in PATHS and PATHS == CPU_SIMD
    for path in ("portable", "avx2", "avx512"):
        if path in PATHS:
            assert_bitwise_equal(gemm(case, x, x, f"cpu:{path}"), gemm(case, x, x, "reference"))
        else:
            with pytest.raises(RuntimeError, match=f"the SIMD kernel '{path}' is not available on this CPU"):
                gemm(case, x, x, f"cpu:{path}")


def test_simd_kernels_say_what_runs_here_and_measure_on_request():
    """The C table of SIMD kernels (mmaemu._C.cpu_simd_kernels) and their speeds measured when
    asked (mmaemu._C.cpu_simd_measure): nothing is timed on the GEMM path."""
    table = _C.cpu_simd_kernels()
    assert [k["name"] for k in table] == ["portable", "avx2", "avx512"]
    assert [k["name"] for k in table if k["available"]] == PATHS
    for k in table:
        assert k["mr"] % k["row_step"] == 0 and k["w"] % 16 == 0, k
        assert re.search(r"B's .*panels decoded .*; A's rows decoded ", k["decoders"]), k
    if "avx2" in PATHS:  # the SIMD kernels' B panels: csrc/cpu/decode_b_avx2.c, decode_b_avx512.c
        avx2 = table[1]["decoders"]
        assert "32-column panels decoded 32 k at a time with AVX2" in avx2, avx2
        assert re.search(r"A's rows decoded (8 k at a time with AVX2|16 k at a time with AVX-512)", avx2), avx2
    if "avx512" in PATHS:
        assert "with AVX-512" in table[2]["decoders"], table[2]
    rates = _C.cpu_simd_measure()
    assert sorted(rates) == sorted(PATHS), rates
    assert all(rate > 1e6 for rate in rates.values()), rates


def test_a_pass_size_is_reported_from_the_cache():
    """The rows of decoded A per pass (csrc/cpu/cache.c, mm_cpu_a_pass_rows): a quarter of the last-level
    cache Linux reports, within 4 and 32 MiB, or 32 MiB where the size is unknown; info says it."""
    text = _C.cpu_a_pass()
    m = re.fullmatch(r"A's rows decoded in passes of up to ([0-9.]+) MiB \((.*)\)", text)
    assert m, text
    mib = float(m.group(1))
    assert 4.0 <= mib <= 32.0, text
    llc = re.fullmatch(r"(a quarter of the|bounded; the) ([0-9.]+) MiB last-level cache", m.group(2))
    if llc:
        assert (mib == float(llc.group(2)) / 4) == (llc.group(1) == "a quarter of the"), text
    else:
        assert m.group(2) == "the last-level cache's size unknown" and mib == 32.0, text
    assert text in diagnostics.cpu_status()["reason"]


def _simde_include():
    """SIMDe >= 0.8 (older releases lack intrinsics the kernel uses): simde-py's, else the system's."""
    try:
        import simde_py  # pip install simde-py: SIMDe's headers
        dirs = [simde_py.get_include()]
    except ImportError:
        dirs = []
    for d in dirs + ["/usr/include", "/usr/local/include"]:
        common = pathlib.Path(d) / "simde" / "simde-common.h"
        if common.exists():
            text = common.read_text(errors="replace")
            version = [re.search(rf"#define SIMDE_VERSION_{part} (\d+)", text) for part in ("MAJOR", "MINOR")]
            if all(version) and tuple(int(v.group(1)) for v in version) >= (0, 8):
                return d
    return None


def _build_simd_check(tmp_path, extra_flags):
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if not cc:
        pytest.skip("needs a C compiler")
    sources = [cbuild.source("cpu_simd_check.c"), *cbuild.core_sources("core", "cpu")]
    exe = tmp_path / "cpu_simd_check"
    subprocess.run([cc, *cbuild.exact_flags("c"), "-O1", "-w",
                    *extra_flags, *cbuild.include_flags(), *sources, "-o", str(exe), "-lpthread", "-lm"],
                   check=True, timeout=300)
    return exe


# Narrowed fast-composition range: the kernels' exact fallback (mm_cpu_compose), which FP8
# operands never reach in a normal build, runs for most lanes.
NARROW_GRID = ["-DMM_CPU_GRID_MIN=-20", "-DMM_CPU_GRID_MAX_NARROW=-5", "-DMM_CPU_GRID_MAX_SPLIT=-5"]


# Tiny decode budgets (csrc/cpu/driver.h): K above 256 to 1024 (by kernel) is streamed in segments of
# 160 k (rounded to whole blocks or promotion intervals) with few columns per pass, so split
# states resume across segments, splits end inside segments and passes of columns repeat.
STREAM_K = ["-DMM_CPU_PANEL_BUDGET=49152", "-DMM_CPU_A_BUDGET=16384", "-DMM_CPU_STREAM_CHUNK=160",
            "-DMM_CPU_STATE_BUDGET=2048"]


# A tiny L2 (csrc/cpu/cache.c, mm_cpu_whole_k_fits_l2): every GEMM with K of 128 or more runs in segments of
# 64 k (rounded to whole blocks or promotion intervals), row chunk by row chunk, its panels decoded
# once per segment (run_segments), as large GEMMs do on CPUs whose L2 their tiles outgrow.
L2_SEGMENTS = ["-DMM_CPU_L2_BYTES=4096", "-DMM_CPU_SEG_K=64", "-DMM_CPU_SEG_MIN_M=1"]


@pytest.mark.parametrize("flags", [[], NARROW_GRID, STREAM_K, STREAM_K + NARROW_GRID, L2_SEGMENTS],
                         ids=["build", "fallback-compose", "stream-k", "stream-k-fallback-compose", "l2-segments"])
def test_random_preset_parameters_in_c(tmp_path, flags):
    """Presets with any parameters the plan checks accept (block 1..64, frac 0..30, keep 1..40),
    which reach the narrow, split and wide kernels; test/c/cpu_simd_check.c against the reference."""
    exe = _build_simd_check(tmp_path, flags)
    run = subprocess.run([str(exe), "120", "2024"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and " 0 failures" in run.stdout, run.stdout + run.stderr


@pytest.mark.parametrize("flags,count", [([], "popcnt"), ([], "nibbles"), (NARROW_GRID, "popcnt"),
                                         (STREAM_K, "popcnt"), (L2_SEGMENTS, "popcnt")],
                         ids=["build", "build-nibble-count", "fallback-compose", "stream-k", "l2-segments"])
def test_avx512_kernel_on_emulated_intrinsics(tmp_path, flags, count):
    """The AVX-512 kernel's source built against SIMDe (portable C for every intrinsic) and
    compared with the reference by test/c/cpu_simd_check.c. Runs on CPUs without AVX-512. Both
    counts of negative products run: VPOPCNTD's and the nibble table's (CPUs without it)."""
    include = _simde_include()
    if not include:
        pytest.skip("needs SIMDe >= 0.8 headers (pip install simde-py)")
    nibbles = ["-DMMAEMU_EMULATE_NIBBLES"] if count == "nibbles" else []
    exe = _build_simd_check(tmp_path, ["-DMMAEMU_EMULATE_AVX512", *nibbles, f"-I{include}", *flags])
    run = subprocess.run([str(exe), "100", "12345"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and " 0 failures" in run.stdout, run.stdout + run.stderr
    assert re.search(r"runs portable \d+ avx2 \d+ avx512 [1-9]", run.stdout), run.stdout  # it really ran
    assert ("nibble-table build" in run.stdout) == (count == "nibbles"), run.stdout  # info says which


def test_simd_decoding_writes_the_tables_panels_and_rows(tmp_path):
    """B panels decoded 32 k at a time with AVX2 and AVX-512 (csrc/cpu/decode_b_avx2.c,
    csrc/cpu/decode_b_avx512.c) equal, byte for byte, the panels written code by code from the
    decoding tables (test/c/cpu_decode_check.c): records, sign words and NaN/Inf flags, both formats
    and both SIMD panel widths, each decoder alone as well, codes with and without subnormals, half
    of them decoded with DAZ set (no operand may be a subnormal fp32), sign words in both layouts
    (the paired one: csrc/cpu/cpu.h, mm_cpu_sign_paired). A's rows likewise, decoded
    with AVX-512 where the CPU has it, with AVX2 (csrc/cpu/decode_a_avx512.c, decode_a_avx2.c)
    and by the scalar loop, for every table the kernels use: words, sign windows, NaN/Inf flags,
    nothing written past a row."""
    cc = cbuild.c_compiler()
    if not cc:
        pytest.skip("needs a C compiler")
    sources = [cbuild.source("cpu_decode_check.c"), *cbuild.core_sources("core", "cpu")]
    exe = tmp_path / "cpu_decode_check"
    subprocess.run([cc, *cbuild.exact_flags("c"), "-O1", "-w", *cbuild.include_flags(), "-I" + cbuild.CPU,
                    *sources, "-o", str(exe), "-lpthread", "-lm"], check=True, timeout=300)
    run = subprocess.run([str(exe), "600", "7"], capture_output=True, text=True, timeout=300)
    if run.returncode == 77:
        pytest.skip("the CPU lacks AVX2")
    assert run.returncode == 0 and " 0 failures" in run.stdout, run.stdout + run.stderr
    assert not re.search(r"\(0 groups", run.stdout), run.stdout  # the SIMD decoders really ran
    halves = re.search(r"; (\d+) of their 32-column halves with subnormal codes, (\d+) without", run.stdout)
    assert halves and int(halves.group(1)) > 0 and int(halves.group(2)) > 0, run.stdout  # both value paths ran
    alone = re.search(r"alone: (\d+) groups by AVX2, (\d+) by AVX-512; (\d+) panels with paired", run.stdout)
    assert alone and int(alone.group(1)) > 0 and int(alone.group(3)) > 0, run.stdout
    a_rows = re.search(r"A: (\d+) rows \((\d+) by AVX-512, (\d+) by AVX2\)", run.stdout)
    assert a_rows and int(a_rows.group(1)) > 0 and int(a_rows.group(3)) > 0, run.stdout
    if "avx512" in PATHS:  # a CPU with AVX-512 (F, BW, VL) runs the AVX-512 decoders
        assert int(alone.group(2)) > 0 and int(a_rows.group(2)) > 0, run.stdout


@pytest.mark.parametrize("splits,scheme", [(1, "none"), (3, "pairwise"), (2, "serial")])
def test_k_beyond_the_decode_budget_streams_to_the_reference_bits(splits, scheme):
    """A K whose decoded panel would exceed the per-thread budget (csrc/cpu/driver.h) is streamed in
    segments (split states carried across them) and gives the reference's bits."""
    rng = np.random.default_rng(5)
    K = 52_432  # above 52 428, the largest limit (portable), and a multiple of 16
    x = as_fp8(fp8_codes(rng, 3, K, "e4m3", "clustered"), "e4m3")
    w = as_fp8(fp8_codes(rng, 2, K, "e4m3", "clustered"), "e4m3")
    for fast in (True, False):
        case = dict(BASE, preset="hopper", fast=fast, splits=splits, scheme=scheme, out="acc")
        check_all_paths(case, x, w, threads=(1,))
