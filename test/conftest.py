import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# torch's compiler settings, where a test (or a library it calls: torchao's quantize_ sets
# inductor options unless told not to) could change them for every test after it.
CONFIG_MODULES = ("torch._inductor.config", "torch._dynamo.config", "torch._functorch.config")
# Environment variables that configure mmaemu, cuBLAS, CUDA or the CPU thread pools. Not the
# TORCH* ones: torch sets some when first used (TORCHINDUCTOR_CACHE_DIR), and reads its config
# variables at import, so a later change would not act anyway; nor pytest's.
ENV_PREFIXES = ("MMAEMU_", "PYTORCH_", "CUBLAS", "CUDA_", "NVIDIA_", "OMP_", "MKL_", "KMP_")


def _flushes_denormals():
    c = sys.modules.get("mmaemu._C")       # torch has no getter; mmaemu's extension reads MXCSR
    return c.cpu_flushes_denormals() if c is not None else None


def _process_state():
    state = {
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "flush-to-zero (torch.set_flush_denormal)": _flushes_denormals(),
        "os.getcwd()": os.getcwd(),
        "os.environ": {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)},
    }
    for name in CONFIG_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            state[name] = module.get_config_copy()
    return state


def _restore(key, value):
    if key == "torch.get_num_threads()":
        torch.set_num_threads(value)
    elif key == "torch.get_default_dtype()":
        torch.set_default_dtype(value)
    elif key == "torch.is_grad_enabled()":
        torch.set_grad_enabled(value)
    elif key.startswith("flush-to-zero"):
        torch.set_flush_denormal(value)
    elif key == "os.getcwd()":
        os.chdir(value)
    elif key == "os.environ":
        for k in [k for k in os.environ if k.startswith(ENV_PREFIXES)]:
            del os.environ[k]
        os.environ.update(value)


@pytest.fixture(autouse=True)
def isolated_process_state():
    """Each test starts from the same random state and leaves the process as it found it.

    torch seeds its generator differently in every process (torch 2.13), so a test drawing
    unseeded random numbers would see other values on each run and after other tests: every
    test starts from torch.manual_seed(0). A test that leaves a process-wide setting changed
    (threads, default dtype, grad mode, flush-to-zero, working directory, environment, torch's
    compiler configs) would change the tests after it: it fails here, naming the setting, and
    the setting is put back."""
    torch.manual_seed(0)
    before = _process_state()
    yield
    after = _process_state()
    changed = []
    for key, old in before.items():
        new = after.get(key, old)
        if new == old or new is None or old is None:      # None: not readable then
            continue
        if key in CONFIG_MODULES:
            module = sys.modules[key]
            diff = sorted(k for k in old if new.get(k) != old[k])
            changed.append(f"{key}: {', '.join(f'{k}={new.get(k)!r} (was {old[k]!r})' for k in diff)}")
            for k in diff:
                setattr(module, k, old[k])
        elif key == "os.environ":
            diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            changed.append(f"os.environ: {', '.join(f'{k}={new.get(k)!r} (was {old.get(k)!r})' for k in diff)}")
            _restore(key, old)
        else:
            changed.append(f"{key} = {new!r} (was {old!r})")
            _restore(key, old)
    if changed:
        pytest.fail("the test left process-wide state changed (now restored): " + "; ".join(changed),
                    pytrace=False)
