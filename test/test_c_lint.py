"""The C core compiles warning-free and passes cppcheck; the fuzz seed corpus replays clean.

The lint is defined once, in scripts/lint_c.sh (gcc and clang, -O0 and -O2, the public headers as
C++, cppcheck); test_lint_script_is_clean runs it, so a warning fails any test run. The other
checks take their files from test/cbuild.py (the translation units of csrc/{core,cpu,cuda}).
"""
import glob
import os
import shutil
import subprocess

import pytest

import cbuild

ROOT = cbuild.ROOT
C_SOURCES = cbuild.core_sources()
HARNESS = [os.path.join(ROOT, "test", "fuzz", "fuzz_gemm.c"),
           os.path.join(ROOT, "test", "fuzz", "replay_main.c")]
CPU_EXECUTOR = cbuild.core_sources("core", "cpu")  # what the fuzz harness drives


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def test_there_are_c_sources():
    for layer in cbuild.LAYERS:
        assert cbuild.core_sources(layer), layer
    assert len(C_SOURCES) >= 10, C_SOURCES


def test_lint_script_is_clean():
    missing = [tool for tool in ("gcc", "g++", "cppcheck") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (apt-get install -y {' '.join(missing)})")
    r = _run(["bash", os.path.join(ROOT, "scripts", "lint_c.sh")])
    assert r.returncode == 0, f"scripts/lint_c.sh:\n{r.stdout}{r.stderr[-8000:]}"
    assert "cppcheck clean" in r.stdout


def test_cppcheck_would_report_a_defect(tmp_path):
    """cppcheck, as the script runs it, does fail on a real defect (not a check that cannot fail)."""
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
             "-fno-sanitize-recover=all", *cbuild.include_flags()]
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    if _run(["gcc", *flags, str(probe), "-o", str(tmp_path / "probe")]).returncode != 0:
        return None
    r = _run(["gcc", *flags, *HARNESS, *CPU_EXECUTOR, "-pthread", "-lm", "-o", exe])
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


def test_fuzz_harness_catches_a_wrong_cpu_executor(tmp_path):
    """The harness is not a check that cannot fail: an executor off by one bit is reported."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    exe = str(tmp_path / "replay_mutant")
    core = [f for f in CPU_EXECUTOR if os.path.relpath(f, cbuild.CSRC) != os.path.join("cpu", "gemm.c")]
    assert len(core) == len(CPU_EXECUTOR) - 1  # the file that defines mmaemu_gemm_cpu is left out
    r = _run(["gcc", *cbuild.exact_flags("c"), "-O1", *cbuild.include_flags(),
              *HARNESS, *core, cbuild.source("mutant_cpu.c"), "-pthread", "-lm", "-o", exe])
    assert r.returncode == 0, r.stderr
    seed = os.path.join(ROOT, "test", "fuzz", "corpus", "gemm_hopper_fast_bf16")
    r = _run([exe, seed])
    assert r.returncode != 0
    assert "mmaemu_gemm_cpu differs from mmaemu_gemm_reference" in r.stderr


@pytest.mark.parametrize("src", C_SOURCES, ids=lambda p: os.path.relpath(p, cbuild.CSRC))
def test_fast_math_is_refused(src):
    """Every C file of the core includes mmaemu_base.h, whose #error stops a -ffast-math build
    (whose rewrites would change the bits)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    r = _run(["gcc", *cbuild.exact_flags("c"), *cbuild.include_flags(), "-ffast-math",
              "-fsyntax-only", src])
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
