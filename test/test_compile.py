"""torch.compile and TorchScript: the op traces without graph breaks and scripts, saves, loads.
(opcheck of every op: test_opcheck.py.)"""
import subprocess
import sys
import warnings

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import mmaemu

E4M3 = torch.float8_e4m3fn
ONE, HALF = torch.tensor(1.0), torch.tensor(0.5)


def ops(M, N, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(M, K, generator=g) * 4).to(E4M3), (torch.randn(N, K, generator=g) * 4).to(E4M3))


class Gemm(torch.nn.Module):
    def __init__(self, splitk):
        super().__init__()
        self.splitk = splitk

    def forward(self, x, w):
        return mmaemu.scaled_mm(x, w.t(), ONE, HALF, out_dtype=torch.bfloat16, use_fast_accum=True,
                                splitk=self.splitk)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_same_bits_as_eager(dynamic):
    torch._dynamo.reset()
    m = Gemm(1)
    cc = CompileCounterWithBackend("aot_eager")
    cm = torch.compile(m, fullgraph=True, backend=cc, dynamic=dynamic)
    for M in (16, 32, 48):
        x, w = ops(M, 32, 128, seed=M)
        mmaemu.testing.assert_bitwise_equal(cm(x, w), m(x, w))
    if dynamic:
        assert cc.frame_count == 1  # an explicit split keeps shapes dynamic: no recompiles


def test_compile_accumulate():
    torch._dynamo.reset()
    x, w = ops(8, 64, 256, seed=1)

    def g(x, w):
        return mmaemu.accumulate(x, w, use_fast_accum=True, splitk=1)

    cg = torch.compile(g, fullgraph=True, backend="aot_eager")
    mmaemu.testing.assert_bitwise_equal(cg(x, w), g(x, w))


def test_compiled_warnings_are_emitted_when_the_op_runs():
    """Compiled code plans when its planning op runs: each call warns as an eager call does, and
    the warning's location is the planning op's implementation (mmaemu/api.py), so Python's default filter shows
    a warning once per process, not once per call."""
    torch._dynamo.reset()
    m = Gemm((2, "contiguous"))
    cm = torch.compile(m, fullgraph=True, backend="aot_eager")
    x, w = ops(16, 16, 512)

    def split_warnings(fn, action):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter(action)
            fn(x, w)
            fn(x, w)
        return [r for r in rec if issubclass(r.category, mmaemu.UnverifiedSplitWarning)]
    eager, compiled = split_warnings(m, "always"), split_warnings(cm, "always")
    assert len(compiled) == len(eager) == 2
    assert [str(r.message) for r in compiled] == [str(r.message) for r in eager]
    assert eager[0].filename == __file__
    assert compiled[0].filename.endswith("mmaemu/api.py")
    assert len(split_warnings(cm, "default")) == 1


def test_compile_inductor_smoke():
    torch._dynamo.reset()
    m = Gemm(1)
    x, w = ops(16, 16, 64, seed=9)
    cm = torch.compile(m, fullgraph=True)
    mmaemu.testing.assert_bitwise_equal(cm(x, w), m(x, w))


class Scripted(torch.nn.Module):
    def forward(self, x, w, sa, sb):
        # The schema's defaults: hopper preset, S = 1, auto backend.
        return torch.ops.mmaemu.scaled_mm(x, w.t(), sa, sb, out_dtype=torch.bfloat16,
                                          use_fast_accum=True)


class ScriptedPinned(torch.nn.Module):
    def forward(self, x, w, sa, sb):
        return torch.ops.mmaemu.scaled_mm(x, w.t(), sa, sb, None, None, torch.float32, False,
                                          "ada", 3, "pairwise", "reference", 0)


def test_torchscript_defaults_and_plan_op_args(tmp_path):
    x, w = ops(16, 32, 384, seed=4)
    s = torch.jit.script(Scripted())
    eager = mmaemu.scaled_mm(x, w.t(), ONE, HALF, out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
    mmaemu.testing.assert_bitwise_equal(s(x, w, ONE, HALF), eager)
    # A CallPlan exposes the op arguments for code that must pin another profile or split.
    plan = mmaemu.explain(x, w.t(), ONE, HALF, out_dtype=torch.float32, profile="ada",
                          splitk=(3, "pairwise"), backend="reference")
    assert plan.op_args() == {"preset": "ada", "splits": 3, "scheme": "pairwise",
                              "backend": "reference", "epilogue": 0}
    pinned = torch.jit.script(ScriptedPinned())
    with pytest.warns(mmaemu.UnverifiedSplitWarning):
        y = mmaemu.scaled_mm(x, w.t(), ONE, HALF, out_dtype=torch.float32, profile="ada",
                             splitk=(3, "pairwise"), backend="reference")
    mmaemu.testing.assert_bitwise_equal(pinned(x, w, ONE, HALF), y)


def test_torchscript_save_and_load_in_a_fresh_process(tmp_path):
    x, w = ops(16, 32, 128, seed=7)
    path = tmp_path / "gemm.pt"
    torch.jit.script(Scripted()).save(str(path))
    expected = Scripted()(x, w, ONE, HALF)
    torch.save({"x": x.view(torch.uint8), "w": w.view(torch.uint8), "y": expected}, tmp_path / "io.pt")
    code = (
        "import torch, mmaemu\n"
        f"m = torch.jit.load({str(path)!r})\n"
        f"d = torch.load({str(tmp_path / 'io.pt')!r})\n"
        "y = m(d['x'].view(torch.float8_e4m3fn), d['w'].view(torch.float8_e4m3fn), torch.tensor(1.0), torch.tensor(0.5))\n"
        "mmaemu.testing.assert_bitwise_equal(y, d['y'])\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
