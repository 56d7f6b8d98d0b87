"""Environment variables: one module reads them (mmaemu/runtime/config.py); a value it does not accept is
an error that names the variable, and `python -m mmaemu info` shows every variable."""
import os
import subprocess
import sys

import pytest
import torch

import mmaemu
from mmaemu.runtime import config

ONE = torch.tensor(1.0)


def _info(**env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("MMAEMU_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "mmaemu", "info"], capture_output=True,
                          text=True, env=full)


@pytest.mark.parametrize("name,good,bad", [
    ("MMAEMU_SPLITK", "infer", "sometimes"),
    ("MMAEMU_SPLITK_STRICT", "true", "sure"),
    ("MMAEMU_DISABLE_CUDA", "1", "please"),
    ("MMAEMU_ALLOW_GATED_KERNELS", "off", "2"),
    ("MMAEMU_CPU_SIMD", "avx2", "sse"),
    ("MMAEMU_BACKEND", "cuda:h4", "bogus")])
def test_each_variable_accepts_its_values_and_names_itself_when_it_refuses(monkeypatch, name,
                                                                          good, bad):
    monkeypatch.setenv(name, good)
    config.get(name)
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=name):
        config.get(name)
    monkeypatch.setenv(name, "")
    assert config.get(name) == config.VARIABLES[name].default


def test_only_config_reads_the_environment():
    """Every other module asks config (the tools under mmaemu_tools/ excepted; the C core reads
    none: test/test_c_layers.py)."""
    import pathlib
    pkg = pathlib.Path(mmaemu.__file__).parent
    readers = sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
                     if "os.environ" in p.read_text() or "getenv(" in p.read_text())
    assert readers == ["runtime/config.py"]


def test_info_reports_every_variable_and_fails_on_a_refused_one():
    ok = _info()
    assert ok.returncode == 0
    for name in config.VARIABLES:
        assert name in ok.stdout
    bad = _info(MMAEMU_BACKEND="bogus")
    assert bad.returncode == 2
    assert "MMAEMU_BACKEND=bogus" in bad.stdout and "NOT ACCEPTED" in bad.stdout
    unknown_profile = _info(MMAEMU_PROFILE="h100-sxm")
    assert unknown_profile.returncode == 2 and "unknown profile 'h100-sxm'" in unknown_profile.stdout


def test_a_refused_backend_variable_fails_the_call_not_silently(monkeypatch):
    x = torch.zeros(64, 1920, dtype=torch.float8_e4m3fn)
    monkeypatch.setenv("MMAEMU_BACKEND", "bogus")
    with pytest.raises(ValueError, match="MMAEMU_BACKEND"):
        mmaemu.scaled_mm(x, x.t(), ONE, ONE, out_dtype=torch.bfloat16, splitk=1)


def test_disable_cuda_loads_neither_the_driver_nor_nvrtc():
    code = ("import torch, mmaemu\n"
            "from mmaemu.runtime import diagnostics\n"
            "x = torch.zeros(64, 1920, dtype=torch.float8_e4m3fn)\n"
            "mmaemu.scaled_mm(x, x.t(), torch.tensor(1.), torch.tensor(1.), splitk=1)\n"
            "diagnostics.info_report(); diagnostics.selftest_report()\n"
            "maps = open('/proc/self/maps').read()\n"
            "print('nvrtc' in maps, 'libcuda.so' in maps)\n")
    env = dict(os.environ, MMAEMU_DISABLE_CUDA="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("name", ["MMAEMU_CACHE_DIR", "MMAEMU_FATBIN_DIR"])
def test_a_blank_directory_variable_never_breaks_the_import(name):
    """A refused loader variable leaves its default: the CPU computes, `info` names it."""
    code = ("import torch, mmaemu\n"
            "x = torch.zeros(16, 32, dtype=torch.float8_e4m3fn)\n"
            "print(mmaemu.scaled_mm(x, x.t(), torch.tensor(1.), torch.tensor(1.), splitk=1,\n"
            "                       out_dtype=torch.float32).shape)\n")
    env = dict(os.environ, **{name: "  "})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and "torch.Size([16, 16])" in out.stdout, out.stderr
    info = _info(**{name: "  "})
    assert info.returncode == 2 and f"environment variable {name} is empty" in info.stdout


@pytest.mark.parametrize("value", ["cpu:portable", "cuda:reference"])
def test_backend_variable_takes_executor_names(monkeypatch, value):
    monkeypatch.setenv("MMAEMU_BACKEND", value)
    assert config.get("MMAEMU_BACKEND") == value
