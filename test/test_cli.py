"""What a newcomer meets at the command line and in explain: one `error:` line and exit status
2 for a bad request, never a traceback; the same plan as the Python API."""
import subprocess
import sys

import pytest
import torch

import mmaemu

ONE = torch.tensor(1.0)


def _explain(*argv):
    return subprocess.run([sys.executable, "-m", "mmaemu", "explain", *argv], capture_output=True,
                          text=True)


def test_explain_on_cuda_without_cuda_reports_it_in_the_plan():
    r = _explain("64", "5760", "1920", "--out", "bf16", "--fast", "--device", "cuda")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "backend=None" in r.stdout and "no CUDA device here" in r.stdout
    assert "source='table'" in r.stdout      # the split is still decided and shown


def test_explain_of_an_empty_shape_is_the_apis():
    r = _explain("0", "5760", "1920")
    assert r.returncode == 0 and "source='rule'" in r.stdout and "M, N or K is 0" in r.stdout
    x = torch.zeros(0, 1920, dtype=torch.float8_e4m3fn)
    w = torch.zeros(5760, 1920, dtype=torch.float8_e4m3fn)
    plan = mmaemu.explain(x, w.t(), ONE, ONE)
    assert repr(plan.split) in r.stdout


@pytest.mark.parametrize("value", ["abc", "4,", "two,contiguous"])
def test_a_malformed_splitk_is_one_error_line(value):
    r = _explain("64", "5760", "1920", "--splitk", value)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: ValueError: ")


def test_explain_of_meta_tensors_reports_the_missing_backend_in_the_plan():
    x = torch.empty(64, 1920, dtype=torch.float8_e4m3fn, device="meta")
    w = torch.empty(5760, 1920, dtype=torch.float8_e4m3fn, device="meta")
    one = torch.tensor(1.0, device="meta")
    plan = mmaemu.explain(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
    assert plan.validation == "ok" and plan.split.S == 1 and plan.backend is None
    assert plan.fallbacks == ["mmaemu has no backend for meta tensors"]
    assert plan.warnings[0].startswith("BackendUnavailableError")
    with pytest.raises(mmaemu.BackendUnavailableError):   # computing is still refused
        mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)


class UsesScaledMm(torch.nn.Module):
    """User code that calls the public function (keyword arguments and all) inside forward."""

    def forward(self, x, w, s):
        return mmaemu.scaled_mm(x, w.t(), s, s, out_dtype=torch.bfloat16, use_fast_accum=True,
                                splitk="1")


class UsesAccumulate(torch.nn.Module):
    def forward(self, x, w):
        return mmaemu.accumulate(x, w, use_fast_accum=False, profile="ada", splitk="infer")


def test_torch_jit_script_of_user_code_that_calls_the_public_functions():
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(16, 64, generator=g) * 8).to(torch.float8_e4m3fn)
    w = (torch.randn(32, 64, generator=g) * 8).to(torch.float8_e4m3fn)
    scripted = torch.jit.script(UsesScaledMm())
    want = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True,
                            splitk=1)
    mmaemu.testing.assert_bitwise_equal(scripted(x, w, ONE), want)
    acc = torch.jit.script(UsesAccumulate())
    want_acc = mmaemu.accumulate(x, w, use_fast_accum=False, profile="ada", splitk="infer")
    mmaemu.testing.assert_bitwise_equal(acc(x, w), want_acc)
