"""The self-test machinery on the CPU: the runner finds a wrong bit, each executor gets the cases
it computes, and a CUDA verdict is measured once, stored as a fact, then read (the device
simulated)."""
import torch

from mmaemu.runtime import facts, loader, selftest, warmup
from mmaemu.runtime.registry import SIMD_KERNELS
from mmaemu.planning import executors

CPU = "cpu:" + [n for n, k in SIMD_KERNELS.items() if k["available"]][-1]


def test_the_runner_passes_the_cpu_backend_and_names_a_wrong_bit(monkeypatch):
    v = selftest.check(CPU, "hopper")
    assert v["passed"] and v["mismatches"] == 0 and v["cases"] == len(selftest.cases())
    real = selftest._run_case

    def one_bit_off(op, kw, preset, executor, device):
        y = real(op, kw, preset, executor, device)
        if executor == CPU and kw["x"].shape == (192, 512):      # the "large" case
            y = y.clone()
            y.view(torch.int32)[5, 7] ^= 1
        return y
    monkeypatch.setattr(selftest, "_run_case", one_bit_off)
    v = selftest.check(CPU, "hopper")
    assert not v["passed"] and v["mismatches"] == 1
    assert v["detail"] == "large (192x192x512): 1 of 36864 outputs differ"


def test_cuda_kernels_take_the_e4m3_cases_and_presets_drop_what_they_refuse():
    every = selftest.cases()
    e4m3 = [c for c in every if (c[2]["fa"], c[2]["fb"]) == ("e4m3", "e4m3")]
    assert 0 < len(e4m3) < len(every)
    assert all(selftest._computes("cuda:h4", c[2], "hopper") == (c in e4m3) for c in every)
    unsplit = [c for c in e4m3 if c[2]["splits"] == 1]
    assert 0 < len(unsplit) < len(e4m3)            # ada's tiled kernels: no round-robin splits
    assert all(selftest._computes("cuda:v4", c[2], "ada") == (c in unsplit) for c in every)
    assert all(selftest._computes(b, c[2], p) for b in ("reference", CPU) for c in every
               for p in ("hopper", "ada"))
    assert None not in selftest._expected("hopper")
    assert None not in selftest._expected("ada")     # every pairwise S computes


def test_a_cuda_verdict_is_measured_once_then_read_as_a_fact(tmp_path, monkeypatch):
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(executors, "capturing", lambda: False)
    monkeypatch.setattr(loader, "device_info", lambda d=0: {"name": "Simulated", "uuid": "00" * 16,
                                                            "cc": 90, "driver_version": 13000})
    monkeypatch.setattr(loader, "kernel_check", lambda d, k: (True, "fatbin /x.fatbin"))
    runs = []

    def check(kernel, preset, device):
        runs.append((kernel, preset, str(device)))
        return {"passed": True, "cases": 7, "mismatches": 0, "detail": "ok", "seconds": 0.5}
    monkeypatch.setattr(selftest, "check", check)
    facts.forget()
    assert facts.verdict("cuda:h4", "hopper", 0) is None       # planning reads; it never runs
    assert runs == []
    v = selftest.measure_verdict("cuda:h4", "hopper", 0)
    assert (v["passed"], v["cached"], runs) == (True, False, [("cuda:h4", "hopper", "cuda:0")])
    assert len(list((tmp_path / "selftest").glob("*.json"))) == 1
    facts.forget()                                              # a new process: the disk
    v = facts.verdict("cuda:h4", "hopper", 0)
    assert (v["passed"], v["cached"], len(runs)) == (True, True, 1)
    assert selftest.measure_verdict("cuda:h4", "hopper", 0)["cached"] and len(runs) == 1
    v = selftest.measure_verdict("cuda:h4", "hopper", 0, force=True)
    assert (v["cached"], len(runs)) == (False, 2)
    # the first call's warm-up measures what auto may take, once
    facts.forget()
    runs.clear()
    warmup.ensure_cuda(0, "hopper", "auto")
    assert sorted(k for k, _, _ in runs) == ["cuda:h1", "cuda:wgmma", "reference"]   # h4 stored
    warmup.ensure_cuda(0, "hopper", "auto")
    assert len(runs) == 3
    facts.forget()


def test_the_cpu_part_of_the_cli_checks_every_preset_and_simd_kernel():
    results = selftest.run_cpu()
    simd = [n for n, k in SIMD_KERNELS.items() if k["available"]]
    assert [(r.kernel, r.preset) for r in results] == [("reference", "hopper")] + [
        (f"cpu:{n}", p) for n in simd for p in ("hopper", "ada", "b200")]
    assert all(r.passed and r.status == "passed" and r.device == "cpu" for r in results)
    assert results[0].cases == 4 and results[0].detail.startswith("4/4 known answers")
