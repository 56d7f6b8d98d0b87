"""executor selection (mmaemu.planning.executors.resolve) on simulated CUDA devices, without a GPU.

The device facts, module loads and self-test verdicts that resolve() consults are replaced by
fixtures, so every branch of the choice is checked: priorities per preset, compute-capability
limits, the gate of cuda:wgmma, failed self-tests, graph capture, formats and presets that
only the reference computes, explicit requests, environment variables, NVRTC and host
fallback warnings.
"""
import pytest
import torch

from mmaemu import BackendFallbackWarning, BackendUnavailableError
from mmaemu.planning import executors
from mmaemu.runtime import facts, loader, registry

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
DEV = torch.device("cuda", 0)


@pytest.fixture
def gpu(monkeypatch):
    """A simulated device: gpu.cc, gpu.loads[kernel] (detail or None), gpu.verdicts[(kernel,
    preset)] (True, False or None = not run), gpu.capturing."""
    class Gpu:
        cc = 90
        loads = {}
        verdicts = {}
        capturing = False

    g = Gpu()

    def device_info(device=0):
        return {"index": device, "name": f"Simulated sm_{g.cc}", "cc": g.cc, "capability": divmod(g.cc, 10),
                "sm_count": 132, "driver_version": 13000, "uuid": "00" * 16}

    def kernel_check(device, kernel):
        detail = g.loads.get(kernel, "fatbin /pkg/_fatbin/x.fatbin")
        return (detail is not None and not detail.startswith("error"), detail or "error: does not load")

    def verdict(kernel, preset, device):
        v = g.verdicts.get((kernel, preset), True)
        if v is None:
            return None
        return {"passed": v, "cases": 87, "mismatches": 0 if v else 5, "detail": "5 outputs differ" if not v else "ok",
                "seconds": 0.1}

    for k in ("MMAEMU_BACKEND", "MMAEMU_DISABLE_CUDA", "MMAEMU_ALLOW_GATED_KERNELS"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(loader, "device_info", device_info)
    monkeypatch.setattr(loader, "kernel_check", kernel_check)
    monkeypatch.setattr(facts, "verdict", verdict)
    monkeypatch.setattr(executors, "capturing", lambda: g.capturing)
    executors._resolve_cache.clear()
    yield g
    executors._resolve_cache.clear()


def choose(request, preset="hopper", fmts=(E4M3, E4M3), splits=1):
    executors._resolve_cache.clear()
    return executors.resolve(request, DEV, preset, fmts, splits)


def test_hopper_gpu_takes_the_tensor_core_kernel_after_its_self_test(gpu):
    r = choose(None)
    assert r.executor == "cuda:wgmma" and r.fallbacks == [] and r.warnings == []
    r = choose("auto", "ada")
    assert r.executor == "cuda:wgmma"
    assert [f.split(":")[0] + ":" + f.split(":")[1] for f in r.fallbacks] == ["cuda:tc3", "cuda:v9"]


def test_a_failed_self_test_falls_back_with_one_warning(gpu):
    gpu.verdicts[("cuda:wgmma", "hopper")] = False
    r = choose("auto")
    assert r.executor == "cuda:h4"
    assert "cuda:wgmma: failed its self-test" in r.fallbacks[0]
    assert len(r.warnings) == 1 and isinstance(r.warnings[0], BackendFallbackWarning)
    with pytest.raises(BackendUnavailableError, match="failed its self-test"):
        choose("cuda:wgmma")
    gpu.verdicts[("cuda:h4", "hopper")] = False
    assert choose("auto").executor == "cuda:h1"


def test_compute_capability_limits(gpu):
    gpu.cc = 89
    r = choose("auto")
    assert r.executor == "cuda:h4" and "sm_90 only" in r.fallbacks[0]
    assert choose("auto", "ada").executor == "cuda:v4"
    gpu.cc = 75
    assert choose("auto").executor == "cuda:h1"
    assert choose("auto", "ada").executor == "cuda:v1"
    with pytest.raises(BackendUnavailableError, match="needs sm_80"):
        choose("cuda:h4")
    gpu.cc = 120
    assert choose("auto").executor == "cuda:h4"


def test_allow_gated_kernels_does_not_move_an_sm90a_binary(gpu, monkeypatch):
    gpu.cc = 100
    monkeypatch.setenv("MMAEMU_ALLOW_GATED_KERNELS", "1")
    assert choose("auto").executor == "cuda:h4"


def test_formats_and_presets_only_the_reference_computes(gpu):
    r = choose("auto", "hopper", (E5M2, E4M3))
    assert r.executor == "cuda:reference"
    assert all("E5M2 and mixed formats" in f for f in r.fallbacks)
    assert choose("auto", "b200").executor == "cuda:reference"
    with pytest.raises(BackendUnavailableError):
        choose("cuda:h4", "hopper", (E4M3, E5M2))
    with pytest.raises(BackendUnavailableError, match="no CUDA kernel"):
        choose("cuda", "hopper", ("e5m2", "e5m2"))
    with pytest.raises(BackendUnavailableError, match="does not implement"):
        choose("cuda:v4", "hopper")


def test_explicit_requests_and_environment(gpu, monkeypatch):
    assert choose("cuda:h1").executor == "cuda:h1"
    assert choose("reference").executor == "cuda:reference"
    assert choose("cuda").executor == "cuda:wgmma"
    monkeypatch.setenv("MMAEMU_BACKEND", "cuda:h4")
    assert choose(None).executor == "cuda:h4"
    assert choose("auto").executor == "cuda:wgmma"  # the argument wins over the variable
    with pytest.raises(KeyError, match="unknown backend"):
        choose("cuda:h9")
    for name in ("cuda:v9", "cuda:tc3"):
        with pytest.raises(BackendUnavailableError, match="not part of this build"):
            choose(name, "ada")


@pytest.mark.parametrize("cc", [89, 90])
def test_round_robin_split_takes_a_kernel_that_computes_the_layout(gpu, cc):
    """ada deals 64-k tiles round-robin to its slices: with S > 1, auto skips the kernels whose
    table entry lacks round_robin_splits (the loader would refuse them) and names one that has
    it; S = 1 and hopper's contiguous slices keep the fast kernels."""
    gpu.cc = cc
    fast = "cuda:v4" if cc == 89 else "cuda:wgmma"
    assert choose("auto", "ada").executor == fast
    r = choose("auto", "ada", splits=3)
    assert r.executor == "cuda:reference" and registry.KERNELS["reference"].round_robin_splits
    skipped = [f.split(": ")[0] for f in r.fallbacks if "round-robin" in f]
    assert skipped == ["cuda:wgmma", "cuda:v4", "cuda:v1"]
    assert all("computes contiguous split slices only" in f and "3 slices" in f
               for f in r.fallbacks if "round-robin" in f)
    assert r.warnings == []   # the reference kernel runs on the device: no host fallback
    assert choose("auto", "hopper", splits=3).executor == ("cuda:h4" if cc == 89 else "cuda:wgmma")
    with pytest.raises(BackendUnavailableError, match="round-robin"):
        choose("cuda:v4", "ada", splits=3)
    with pytest.raises(BackendUnavailableError, match="no CUDA kernel can run"):
        choose("cuda", "ada", splits=3)
    assert choose("reference", "ada", splits=3).executor == "cuda:reference"
    # the decision is remembered per split count, not per preset alone
    executors._resolve_cache.clear()
    assert executors.resolve("auto", DEV, "ada", (E4M3, E4M3), 1).executor == fast
    assert executors.resolve("auto", DEV, "ada", (E4M3, E4M3), 3).executor == "cuda:reference"


def test_the_plan_passes_its_split_to_the_kernel_choice(gpu):
    """plan.build_plan decides the split before it resolves the kernel, and the kernel it names
    computes that split (an ada plan with S > 1 on a CUDA device used to name cuda:v4, which
    the loader then refused)."""
    from mmaemu.api import explain_shape
    gpu.cc = 89
    executors._resolve_cache.clear()
    one = explain_shape(64, 64, 4096, profile="ada", splitk=1, device="cuda:0")
    assert one.split.S == 1 and one.backend == "cuda:v4"
    three = explain_shape(64, 64, 4096, profile="ada", splitk=(3, "serial"), device="cuda:0")
    assert three.split.S == 3 and three.backend == "cuda:reference"
    assert any(f.startswith("cuda:v4: ") and "round-robin" in f for f in three.fallbacks)
    hopper = explain_shape(64, 64, 4096, profile="hopper", splitk=(3, "contiguous"), device="cuda:0")
    assert hopper.split.S == 3 and hopper.backend == "cuda:h4"


def test_disable_cuda(gpu, monkeypatch):
    monkeypatch.setenv("MMAEMU_DISABLE_CUDA", "1")
    r = choose("auto")
    assert r.executor == "host:cpu:avx2" and "MMAEMU_DISABLE_CUDA" in str(r.warnings[0])
    with pytest.raises(BackendUnavailableError, match="MMAEMU_DISABLE_CUDA"):
        choose("cuda:h4")


def test_nvrtc_and_host_fallback_warnings(gpu):
    gpu.loads["cuda:wgmma"] = "no fatbin in this build; NVRTC sm_90a (compiled, cached)"
    r = choose("auto")
    assert r.executor == "cuda:wgmma" and "compiled with NVRTC" in str(r.warnings[0])
    gpu.loads = {k: "error: NVRTC not found" for k in registry.KERNELS}
    r = choose("auto")
    assert r.executor .startswith("host:cpu:")
    assert len(r.warnings) == 1 and "on host copies" in str(r.warnings[0])
    assert any(f.startswith("cuda:h4") for f in r.fallbacks)


def test_graph_capture_uses_exact_kernels_without_verdicts(gpu):
    gpu.capturing = True
    gpu.verdicts = {(k, p): None for k in registry.KERNELS for p in ("hopper", "ada", "b200")}
    r = choose("auto")
    assert r.executor == "cuda:h4"  # the gated kernel needs its verdict; h4 is exact by construction
    assert any("stream capture" in f for f in r.fallbacks)
    assert executors._resolve_cache == {}  # decisions made during capture are not remembered


def test_cpu_tensors(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.delenv("MMAEMU_CPU_SIMD", raising=False)
    auto = executors.resolve(None, cpu, "hopper", (E4M3, E4M3))
    assert auto.executor.startswith("cpu:") and auto.fallbacks == ["cuda: tensors on cpu"]
    assert executors.resolve("cpu", cpu, "ada", (E4M3, E4M3)).executor == auto.executor
    assert executors.resolve("reference", cpu, "b200", (E4M3, E4M3))[:3] == ("reference", [], [])
    monkeypatch.setenv("MMAEMU_CPU_SIMD", "portable")
    assert executors.resolve("cpu", cpu, "ada", (E4M3, E4M3)).executor == "cpu:portable"
    with pytest.raises(BackendUnavailableError, match="CPU tensors"):
        executors.resolve("cuda:h4", cpu, "hopper", (E4M3, E4M3))


def test_status_lists_auto_only_for_kernels_whose_self_test_passed(gpu):
    """auto takes a kernel after its self-test: status() says so only with a stored pass."""
    from mmaemu.runtime import diagnostics

    def auto_for():
        return {r["name"]: r["auto_for"] for r in diagnostics.status(0) if r["device"] == 0}
    assert "hopper" in auto_for()["cuda:wgmma"]
    gpu.verdicts[("cuda:wgmma", "hopper")] = None      # not run yet
    assert "hopper" not in auto_for()["cuda:wgmma"] and "hopper" in auto_for()["cuda:h4"]
    gpu.verdicts[("cuda:h4", "hopper")] = False
    assert "hopper" in auto_for()["cuda:h1"]


def test_the_cuda_warm_up_also_measures_the_cpu(monkeypatch):
    """Calls no CUDA kernel computes run on host copies with the CPU's fastest SIMD kernel, so
    the CUDA warm-up measures the CPU kernels' speed too."""
    from mmaemu.runtime import warmup
    seen = []
    monkeypatch.setattr(warmup, "ensure_cpu", lambda: seen.append("cpu"))
    monkeypatch.setattr(warmup, "_done", {("cuda", 0, "hopper", "auto", facts.generation())})
    warmup.ensure_cuda(0, "hopper", "auto")
    assert seen == ["cpu"]
