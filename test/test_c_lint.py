"""The C core compiles warning-free and passes cppcheck; the fuzz seed corpus replays clean.

scripts/lint_c.sh (run by CI) does the full set (gcc and clang, -O0 and -O2, the header as
C++); these tests keep the essential checks inside `pytest` so a warning fails any test run.
"""
import glob
import os
import shutil
import subprocess

import pytest

import cbuild

ROOT = cbuild.ROOT
C_SOURCES = sorted(glob.glob(os.path.join(ROOT, "csrc", "*.c")))
HARNESS = [os.path.join(ROOT, "test", "fuzz", "fuzz_gemm.c"),
           os.path.join(ROOT, "test", "fuzz", "replay_main.c")]
TEST_PROGRAMS = sorted(glob.glob(os.path.join(cbuild.TEST_C, "*.c")))  # the C programs tests build
CORE_FOR_FUZZ = ([os.path.join(ROOT, "csrc", f) for f in ("core.c", "reference.c")]
                 + sorted(glob.glob(os.path.join(ROOT, "csrc", "cpu_*.c"))))  # the cpu backend
STRICT = [*cbuild.exact_flags("c"), "-Wall", "-Wextra", "-Werror", "-I" + cbuild.CSRC,
          "-I" + cbuild.KERNELS]


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def test_there_are_c_sources():
    assert len(C_SOURCES) >= 4, C_SOURCES


@pytest.mark.parametrize("src", C_SOURCES + HARNESS + TEST_PROGRAMS, ids=os.path.basename)
def test_compiles_without_warnings(src):
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    r = _run(["gcc", *STRICT, "-O2", "-c", src, "-o", os.devnull])
    assert r.returncode == 0, f"gcc -Wall -Wextra -Werror failed on {src}:\n{r.stderr}"


def test_cppcheck_is_clean():
    if shutil.which("cppcheck") is None:
        pytest.skip("cppcheck not installed (apt-get install -y cppcheck; CI installs it)")
    r = _run(["cppcheck", "--enable=warning,style,performance,portability", "--std=c11",
              "--inline-suppr", "--suppress=missingIncludeSystem", "--error-exitcode=1", "-q",
              "-I" + cbuild.CSRC, "-I" + cbuild.KERNELS, *C_SOURCES, *HARNESS, *TEST_PROGRAMS])
    assert r.returncode == 0, f"cppcheck findings:\n{r.stderr}{r.stdout}"


def test_cppcheck_would_report_a_defect(tmp_path):
    """The cppcheck invocation above does fail on a real defect (not a check that cannot fail)."""
    if shutil.which("cppcheck") is None:
        pytest.skip("cppcheck not installed")
    bad = tmp_path / "bad.c"
    bad.write_text("int f(void) { int a[4]; a[4] = 1; return a[0]; }\n")
    r = _run(["cppcheck", "--enable=warning,style,performance,portability", "--std=c11",
              "--error-exitcode=1", "-q", str(bad)])
    assert r.returncode != 0


def _sanitizer_build(tmp_path):
    """The fuzz harness with a plain main(), built by gcc with ASan and UBSan, or None."""
    exe = str(tmp_path / "replay")
    flags = [*cbuild.exact_flags("c"), "-g", "-O1", "-fsanitize=address,undefined",
             "-fno-sanitize-recover=all", "-I" + os.path.join(ROOT, "csrc")]
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    if _run(["gcc", *flags, str(probe), "-o", str(tmp_path / "probe")]).returncode != 0:
        return None
    r = _run(["gcc", *flags, *HARNESS, *CORE_FOR_FUZZ, "-pthread", "-lm", "-o", exe])
    assert r.returncode == 0, r.stderr
    return exe


def test_fuzz_corpus_replays_clean_under_sanitizers(tmp_path):
    """Every seed and regression input in test/fuzz/corpus passes the harness's checks
    (cpu == reference bit for bit, refused plans write nothing) under ASan + UBSan."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    exe = _sanitizer_build(tmp_path)
    if exe is None:
        pytest.skip("gcc cannot link the address/undefined sanitizers here")
    corpus = sorted(glob.glob(os.path.join(ROOT, "test", "fuzz", "corpus", "*")))
    assert len(corpus) >= 10
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="halt_on_error=1")
    r = _run([exe, *corpus], env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"replayed {len(corpus)} inputs" in r.stdout



def test_fuzz_harness_catches_a_wrong_cpu_backend(tmp_path):
    """The harness is not a check that cannot fail: a backend off by one bit is reported."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    exe = str(tmp_path / "replay_mutant")
    core = [f for f in CORE_FOR_FUZZ if not f.endswith("cpu_fast.c")]
    r = _run(["gcc", *cbuild.exact_flags("c"), "-O1", "-I" + cbuild.CSRC,
              *HARNESS, *core, cbuild.source("mutant_cpu.c"), "-lm", "-o", exe])
    assert r.returncode == 0, r.stderr
    seed = os.path.join(ROOT, "test", "fuzz", "corpus", "gemm_hopper_fast_bf16")
    r = _run([exe, seed])
    assert r.returncode != 0
    assert "mmaemu_gemm_cpu differs from mmaemu_gemm_reference" in r.stderr


@pytest.mark.parametrize("src", C_SOURCES, ids=os.path.basename)
def test_fast_math_is_refused(src):
    """Every C file of the core includes mmaemu_base.h, whose #error stops a -ffast-math build
    (whose rewrites would change the bits)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    r = _run(["gcc", *STRICT, "-ffast-math", "-fsyntax-only", src])
    assert r.returncode != 0 and "must not be compiled with -ffast-math" in r.stderr, src


def test_exact_flags_are_written_once():
    """-ffp-contract=off, on which the bits depend, is spelled out only in csrc/flags.txt among
    the files that build or compile C (setup.py, scripts, the C-building tests read it)."""
    users = [os.path.join(ROOT, "setup.py"), os.path.join(ROOT, "scripts", "lint_c.sh"),
             os.path.join(ROOT, "scripts", "fuzz.sh")] + glob.glob(os.path.join(ROOT, "test", "*.py"))
    spelled = [p for p in users if "-ffp-contract=off" in open(p).read()
               and not p.endswith("test_c_lint.py")]
    assert spelled == []
    assert "-ffp-contract=off" in open(os.path.join(ROOT, "csrc", "flags.txt")).read()
