"""The examples run as a user runs them (a fresh process) and pass their own checks.

Every example checks what it computes (bits against direct calls or stored golden hashes) and
exits non-zero on a mismatch; each test here runs one, checks its exit status and the line that
says what it checked.
"""
import importlib.util
import os
import pathlib
import re
import runpy
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
HAS_VORTEX = all(importlib.util.find_spec(m) is not None for m in ("vortex", "evo2"))


def run_example(name, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)


def test_every_example_is_tested():
    tested = {"first_gemm.py", "transformer_block.py", "torchao_fp8.py", "evo2_tiny.py",
              "deepseek_tiny.py"}
    assert set(EXAMPLES) == tested, "a new example needs its test here"


def test_first_gemm_checks_its_bits():
    r = run_example("first_gemm.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "torch.Size([64, 5760]) torch.bfloat16" in out, out
    assert re.search(r"checked: rows 0-7 equal the reference backend's bit for bit "
                     r"\(cpu:\w+ backend, split S=1 from the table\), and y's sha256 ", out), out
    assert "equals the stored golden" in out, out


def test_first_gemm_fails_on_a_wrong_golden(monkeypatch, capsys):
    """The example's golden check can fail: with a changed golden it says so and returns 1."""
    monkeypatch.setattr(sys, "argv", ["first_gemm.py"])
    g = runpy.run_path(str(ROOT / "examples" / "first_gemm.py"))
    monkeypatch.setitem(g["GOLDEN"], "y", "0" * 16)
    assert g["main"]() == 1
    assert "FAILED: y sha256" in capsys.readouterr().out


def test_transformer_block_golden_and_padding():
    r = run_example("transformer_block.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "golden check: outputs equal the stored golden outputs bit for bit" in out, out
    assert "padding check" in out, out
    assert out.count("the split decision") == 2, out
    assert "hopper, M = 64: S=1" in out, out      # the guide's table row


def test_deepseek_tiny_example():
    r = run_example("deepseek_tiny.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "torch._scaled_mm 8 calls, torch._scaled_grouped_mm 2 calls" in out, out
    assert ("swap_fp8_linears -> BlockwiseFP8Linear: attn.wq_a, attn.wq_b, attn.wkv_a, "
            "attn.wkv_b, attn.wo, ffn.shared_w1, ffn.shared_w3, ffn.shared_w2") in out, out
    assert ("checked: the model under emulate(), its direct mmaemu calls and the swapped model "
            "give the same bits, equal to the stored golden hashes") in out, out


def test_deepseek_tiny_fails_on_a_wrong_golden(monkeypatch, capsys):
    """The example's golden check can fail: with a changed golden it says so and returns 1."""
    g = runpy.run_path(str(ROOT / "examples" / "deepseek_tiny.py"))
    monkeypatch.setitem(g["GOLDEN"], "out", "0" * 16)
    assert g["main"]([]) == 1
    out = capsys.readouterr().out
    assert "FAILED: out sha256" in out and "FAILED: attention" not in out, out


def test_cpu_benchmark_runs_as_a_script():
    """benchmarks/cpu.py as a user runs it (its directory first on sys.path, beside cuda.py),
    on a tiny shape: the table has every mode and the ratio columns."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu.py"), "--shapes",
                        "32x64x128", "--repeat", "1", "--extra"], cwd=ROOT / "benchmarks",
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for mode in ("hopper fast", "hopper non-fast", "ada fast", "b200 fast"):
        assert f"| 32 x 64 x 128 | {mode} |" in out, out
    assert "cpu / fp32 matmul" in out and "cpu / reference" in out, out
    assert "torch._scaled_mm" in out and "cpu / _scaled_mm" in out, out


def test_torchao_example():
    pytest.importorskip("torchao")
    r = run_example("torchao_fp8.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PerTensor: output (16, 128) torch.bfloat16" in out, out
    assert "PerRow: output (16, 128) torch.bfloat16" in out, out
    assert "row-wise kernel: CUTLASS f8f8bf16_rowwise" in out, out
    assert ("checked: all 4 torch._scaled_mm calls (PerTensor and PerRow) returned the bits of "
            "direct mmaemu.scaled_mm calls, and each model's output is its last call's, bit for "
            "bit") in out, out


@pytest.mark.skipif(not HAS_VORTEX, reason="needs vtx and evo2 (pip install --no-deps vtx evo2)")
@pytest.mark.parametrize("splitk", ["1", "infer"])
def test_evo2_tiny_example(splitk):
    r = run_example("evo2_tiny.py", "--splitk", splitk)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert ("16 projection calls (M = 16 after vortex's padding) equal direct mmaemu.scaled_mm "
            "calls bit for bit") in out, out
    assert ("UnverifiedSplitWarning" in out) == (splitk == "infer"), out


@pytest.mark.skipif(not HAS_VORTEX, reason="needs vtx and evo2 (pip install --no-deps vtx evo2)")
def test_evo2_tiny_example_names_the_shape_auto_cannot_decide():
    r = run_example("evo2_tiny.py", "--splitk", "auto")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("--splitk auto:")]
    assert lines == [
        "--splitk auto: the split-K decision of profile 'hopper-te' is unknown for the GEMM of "
        "blocks.0.projections, M=16, N=192, K=64 (E4M3, bf16 output, fast accumulation): use "
        "--splitk 1 (no split, as the user guide states for Evo 2's projections) or --splitk "
        "infer (mmaemu infers the split of unrecorded shapes)"], r.stderr


def test_cpu_benchmark_quick_mode():
    """--quick (the CI smoke run): decode-sized shapes, hopper fast, every column filled."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu.py"), "--quick"],
                       cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "hopper fast" in line]
    assert len(rows) == 3 and rows[0].startswith("| 1 x 256 x 512 |"), out
    for row in rows:
        assert "| - |" not in row, row


def test_cpu_benchmark_times_a_slow_scaled_mm_on_a_sub_block():
    """A torch._scaled_mm call predicted to exceed --tsm-budget is timed on a sub-block, and its
    cell names that sub-block (budget 0: every shape; the first probe, 1 row x 64 columns).
    The default budget times the whole shape, as test_cpu_benchmark_runs_as_a_script's cells."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu.py"), "--shapes", "32x256x128",
                        "--modes", "hopper", "--repeat", "1", "--tsm-budget", "0"], cwd=ROOT / "benchmarks",
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    rows = [line for line in out.splitlines() if line.startswith("| 32 x 256 x 128 |")]
    assert len(rows) == 2, out
    for row in rows:
        cells = [c.strip() for c in row.split("|")]
        assert cells[4].endswith("(on 1 x 64 x 128)"), row
        assert float(cells[4].split()[0]) > 0 and cells[6].endswith("x"), row
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_cpu", ROOT / "benchmarks" / "cpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    import torch
    x = torch.zeros(8, 128).to(torch.float8_e4m3fn)
    w = torch.zeros(96, 128).to(torch.float8_e4m3fn)
    assert bench.tsm_sub_block(x, w, True, 60.0) == (8, 96)
    assert bench.tsm_sub_block(x, w, True, 0.0) == (1, 64)
