"""The examples run as a user runs them (a fresh process) and pass their own checks."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_example(name, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)


def test_transformer_block_golden_and_padding():
    r = run_example("transformer_block.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "golden check: outputs equal the stored golden outputs bit for bit" in out, out
    assert "padding check" in out, out
    assert out.count("the split decision") == 2, out
    assert "hopper, M = 64: S=1" in out, out      # the guide's table row


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
    import pytest
    pytest.importorskip("torchao")
    r = run_example("torchao_fp8.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PerTensor: output (16, 128) torch.bfloat16" in out, out
    assert "PerRow: output (16, 128) torch.bfloat16" in out, out
    assert "row-wise kernel: CUTLASS f8f8bf16_rowwise" in out, out


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
