"""The CUDA loader's decisions, without a GPU (csrc/cuda/*.c, mmaemu/runtime/loader.py,
mmaemu/planning/executors.py).

Each case runs in a fresh subprocess (the loader initialises once per process) against:
  - a missing driver (MMAEMU_LIBCUDA_PATH=/nonexistent): everything unavailable with the reason,
    CPU results unchanged;
  - a fake libcuda.so.1 built here from C: a stub library, a driver without devices, and a
    "device" of a chosen compute capability that loads any cubin/PTX/fatbin image and logs
    kernel launches instead of running them. With fake fatbins (stamped with the real source
    hash) this checks which kernel each plan gets, its grid, the split-K workspace and the
    reduction launch, stale-fatbin detection and the NVRTC fallback with its cubin cache.
"""
import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

import cbuild

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = cbuild.KERNELS


# Drives the fake device: run() launches one plan with a concrete kernel through
# mmaemu._C.cuda_run_plan (raw addresses: the fake driver never dereferences them); choose() is
# the kernel executors.resolve() picks for a request when every self-test has passed.
PLAN_HELPERS = r"""
import os, sys
import torch
import mmaemu
from mmaemu import _C
from mmaemu.planning import executors
from mmaemu.runtime import diagnostics, facts, loader
PRESETS = {"hopper": (32, 13, 14, 128), "ada": (16, 13, 14, 128), "b200": (32, 25, 24, 128)}
FORMATS = {0: torch.float8_e4m3fn, 1: torch.float8_e5m2}
facts.verdict = lambda kernel, preset, device, run=True, force=False: {
    "passed": True, "cases": 1, "mismatches": 0, "detail": "passed (simulated)", "seconds": 0.0}

def choose(request, preset="hopper", fmt=(0, 0)):
    # the kernel (its name in the C table) of the executor resolve() picks
    e = executors.resolve(request, torch.device("cuda", 0), preset.split("-")[0],
                          (FORMATS[fmt[0]], FORMATS[fmt[1]])).executor
    return "reference" if e == "cuda:reference" else e

def run(kernel, M=100, N=200, K=256, fmt=(0, 0), preset="hopper", splits=1, scheme=0,
        workspace=True, fast=1):
    return list(_C.cuda_run_plan(kernel, M, N, K, PRESETS[preset], fmt_a=fmt[0], fmt_b=fmt[1],
                                 fast_accum=fast, splits=splits, scheme=scheme, a=0x1000,
                                 b=0x2000, out=0x3000, scale_a=0x4000, scale_b=0x4004,
                                 workspace=0x5000 if workspace else 0, stream=0xABC0, device=0))
"""


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    cc = cbuild.c_compiler()
    if cc is None:
        pytest.skip("no C compiler for the fake driver")
    d = tmp_path_factory.mktemp("fakecuda")
    lib = d / "libcuda.so.1"
    r = subprocess.run([cc, "-shared", "-fPIC", "-O1", cbuild.source("fake_libcuda.c"), "-o", str(lib)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return lib


def source_hash(module):
    """The stamp setup.py writes beside a fatbin (and csrc/cuda/modules.c recomputes)."""
    names = [module + ".cu"] + sorted(n for n in os.listdir(KERNELS)
                                      if n.startswith("mmaemu_") and n.endswith(".h"))
    h = hashlib.sha256()
    for name in names:
        data = open(os.path.join(KERNELS, name), "rb").read()
        h.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()


@pytest.fixture()
def fatbins(tmp_path):
    """Fake fatbins (the fatbin magic, then padding) stamped with the current source hashes."""
    d = tmp_path / "fatbin"
    d.mkdir()
    for module in ("reference", "ieee", "wgmma"):
        (d / f"{module}.fatbin").write_bytes(b"\x50\xed\x55\xba" + b"\0" * 60)
        (d / f"{module}.fatbin.sha256").write_text(source_hash(module) + "\n")
    return d


def run_py(code, env_extra, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MMAEMU_", "FAKE_CUDA_"))}
    env.update(env_extra)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env=env, timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, f"subprocess failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def log_lines(path):
    return open(path).read().splitlines() if os.path.exists(path) else []


def test_missing_driver_reports_why_and_cpu_still_works(tmp_path):
    out = run_py("""
        import json, torch, mmaemu
        from mmaemu.planning import executors
        from mmaemu.runtime import diagnostics, facts, loader
        x = torch.zeros(16, 16)
        x[0, :2] = torch.tensor([1.0, -2.0])
        x = x.to(torch.float8_e4m3fn)
        y = mmaemu.scaled_mm(x, x.t(), torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.float32,
                             splitk=1)[:1, :1]
        print(json.dumps({"status": loader.driver_status(), "count": loader.device_count(),
                          "rows": diagnostics.status(), "y": y.tolist(),
                          "res": executors.resolve(None, x.device, "hopper", (x.dtype, x.dtype))[:3]}))
    """, {"MMAEMU_LIBCUDA_PATH": "/nonexistent/libcuda.so.1", "MMAEMU_CACHE_DIR": str(tmp_path)})
    r = json.loads(out)
    assert r["status"].startswith("no NVIDIA driver: cannot load /nonexistent/libcuda.so.1")
    assert r["count"] == 0
    assert r["y"] == [[5.0]]
    rows = {row["name"]: row for row in r["rows"]}
    assert rows["reference"]["available"] and rows["reference"]["device"] == "cpu"
    for name in ("cuda:h1", "cuda:h4", "cuda:v1", "cuda:v4", "cuda:wgmma"):
        assert not rows[name]["available"] and "/nonexistent" in rows[name]["reason"]
    assert not rows["cuda:v9"]["available"] and "not part of this build" in rows["cuda:v9"]["reason"]
    assert not rows["cuda:tc3"]["available"] and "not part of this build" in rows["cuda:tc3"]["reason"]
    assert rows["cpu"]["available"] and rows["cpu"]["device"] == "cpu"
    assert r["res"][0].startswith("cpu:") and r["res"][1:] == [["cuda: tensors on cpu"], []]


def test_disable_cuda_never_loads_the_driver(fake_driver, tmp_path):
    log = tmp_path / "log"
    out = run_py("""
        from mmaemu.planning import executors
        from mmaemu.runtime import diagnostics, facts, loader
        print(loader.driver_status()); print(loader.device_count())
        print(loader.kernel_check(0, "reference"))
    """, {"MMAEMU_DISABLE_CUDA": "1", "MMAEMU_LIBCUDA_PATH": str(fake_driver), "FAKE_CUDA_LOG": str(log)})
    assert "disabled by MMAEMU_DISABLE_CUDA" in out
    assert log_lines(log) == []  # the fake driver's constructor never ran


@pytest.mark.parametrize("mode, expect", [("stub", "stub library"), ("nodevice", "no CUDA device")])
def test_driver_without_devices(fake_driver, tmp_path, mode, expect):
    out = run_py("""
        from mmaemu.planning import executors
        from mmaemu.runtime import diagnostics, facts, loader
        print(loader.driver_status()); print(loader.device_count())
        print([r for r in diagnostics.status() if r["name"] == "cuda:h4"][0]["reason"])
    """, {"MMAEMU_LIBCUDA_PATH": str(fake_driver), "FAKE_CUDA_MODE": mode})
    lines = out.splitlines()
    assert expect in lines[0] and lines[1] == "0" and expect in lines[2]


def test_fake_device_fatbins_and_kernel_choice(fake_driver, fatbins, tmp_path):
    log = tmp_path / "log"
    out = run_py(PLAN_HELPERS + """
import json
res = {}
res["info"] = loader.device_info(0)
res["checks"] = {k: loader.kernel_check(0, k) for k in ("reference", "cuda:h1", "cuda:h4", "cuda:v4", "cuda:wgmma")}
res["auto"] = run(choose("auto"))
res["e5m2"] = run(choose("auto", fmt=(1, 0)), fmt=(1, 0))
res["ada"] = run(choose("auto", preset="ada"), preset="ada")
res["b200"] = run(choose("auto", preset="b200"), preset="b200")
res["b200_cuda"] = run("cuda:h4", preset="b200")
try:
    choose("cuda", preset="b200")
    res["b200_cuda_policy"] = "chosen"
except mmaemu.BackendUnavailableError as e:
    res["b200_cuda_policy"] = str(e)
res["raw_auto"] = run("auto")
res["split"] = run("cuda:h4", splits=3, scheme=3, K=1000)
res["split_no_ws"] = run("cuda:h4", splits=3, K=1000, workspace=False)
res["ref_split_no_ws"] = run("reference", splits=3, K=1000, workspace=False)
res["wgmma"] = run("cuda:wgmma")
res["unknown"] = run("cuda:h9")
rows = diagnostics.status(0)
res["rows"] = {r["name"]: [r["available"], r["reason"]] for r in rows}
print(json.dumps(res))
""", {"MMAEMU_LIBCUDA_PATH": str(fake_driver), "MMAEMU_FATBIN_DIR": str(fatbins),
      "MMAEMU_DISABLE_NVRTC": "1", "FAKE_CUDA_LOG": str(log), "MMAEMU_CACHE_DIR": str(tmp_path)})
    r = json.loads(out)
    assert r["info"]["name"] == "Fake GPU sm_89" and r["info"]["cc"] == 89
    assert r["info"]["uuid"] == "ab" * 16 and r["info"]["driver_version"] == 13000
    for k in ("reference", "cuda:h1", "cuda:h4", "cuda:v4"):
        ok, detail = r["checks"][k]
        assert ok and detail.startswith("fatbin "), (k, detail)
    ok, detail = r["checks"]["cuda:wgmma"]
    assert not ok and "sm_90 only" in detail
    launches = [l for l in log_lines(log) if l.startswith("launch")]
    # auto, hopper, E4M3 on sm_89: h4 with 64 x 64 tiles; the caller's stream
    assert r["auto"] == [0, r["auto"][1]]
    assert launches[0] == "launch mmaemu_h4_gemm grid 4 2 1 block 256 1 1 smem 0 stream 0xabc0"
    # E5M2 x E4M3: the reference kernel, one thread per element
    assert launches[1].startswith("launch mmaemu_reference_gemm grid 79 1 1 block 256")
    assert launches[2].startswith("launch mmaemu_v4_gemm grid 4 2 1")          # ada
    assert launches[3].startswith("launch mmaemu_reference_gemm")            # b200 (frac 25)
    assert r["b200_cuda"][0] != 0 and "frac <= 16" in r["b200_cuda"][1]
    assert r["b200_cuda_policy"].startswith("no CUDA kernel can run this GEMM here")
    # the loader runs the kernel it is named: "auto" is no kernel (the op maps it to reference)
    assert r["raw_auto"][0] != 0 and "unknown CUDA backend 'auto'" in r["raw_auto"][1]
    # splits: the tiled kernel over grid.z, then the reduction in the scheme's order
    assert launches[4].startswith("launch mmaemu_h4_gemm grid 4 2 3")
    assert launches[5].startswith("launch mmaemu_split_reduce")
    assert r["split_no_ws"][0] != 0 and "workspace" in r["split_no_ws"][1]
    assert r["ref_split_no_ws"][0] == 0                                      # the reference needs none
    assert launches[6].startswith("launch mmaemu_reference_gemm")
    assert r["wgmma"][0] != 0 and "sm_90 only" in r["wgmma"][1]
    assert r["unknown"][0] != 0 and "unknown CUDA backend" in r["unknown"][1]
    assert len(launches) == 7
    rows = r["rows"]
    assert rows["cuda:h4"][0] and rows["cuda:h4"][1].startswith("loaded: fatbin")
    assert not rows["cuda:wgmma"][0] and "sm_90 only" in rows["cuda:wgmma"][1]


def test_fake_sm90_wgmma_and_sm75(fake_driver, fatbins, tmp_path):
    log = tmp_path / "log"
    env = {"MMAEMU_LIBCUDA_PATH": str(fake_driver), "MMAEMU_FATBIN_DIR": str(fatbins),
           "MMAEMU_DISABLE_NVRTC": "1", "FAKE_CUDA_LOG": str(log)}
    run_py(PLAN_HELPERS + """
assert run("cuda:wgmma", M=300, N=130)[0] == 0
assert run("cuda:wgmma", preset="ada")[0] == 0
assert choose("auto") == "cuda:wgmma"          # trusted on sm_90 once its self-test passed
assert run("cuda:h4")[0] == 0                  # the IEEE-exact kernels run there too
assert run("cuda:wgmma", M=64, N=64, fast=0)[0] == 0
rc, err = run("cuda:wgmma", preset="b200")
assert rc != 0 and "frac 13, keep 14" in err, err
""", dict(env, FAKE_CUDA_CC="90"))
    lines = log_lines(log)
    assert "attr mmaemu_wgmma_hopper_fast_gemm 8 134144" in lines
    launches = [l for l in lines if l.startswith("launch")]
    assert launches[0].startswith("launch mmaemu_wgmma_hopper_fast_gemm grid 2 3 1 block 256 1 1 smem 134144")
    assert launches[1].startswith("launch mmaemu_wgmma_ada_fast_gemm grid 2 1 1")
    assert launches[2].startswith("launch mmaemu_h4_gemm")
    assert launches[3].startswith("launch mmaemu_wgmma_hopper_gemm grid 1 1 1")   # promotion
    os.unlink(log)
    run_py(PLAN_HELPERS + """
assert run(choose("auto"))[0] == 0 and run(choose("auto", preset="ada"), preset="ada")[0] == 0
rc, err = run("cuda:h4")
assert rc != 0 and "needs sm_80" in err, err
""", dict(env, FAKE_CUDA_CC="75"))
    launches = [l for l in log_lines(log) if l.startswith("launch")]
    assert launches[0].startswith("launch mmaemu_h1_gemm") and launches[1].startswith("launch mmaemu_v1_gemm")


def test_stale_fatbin_is_refused(fake_driver, fatbins, tmp_path):
    (fatbins / "ieee.fatbin.sha256").write_text("0" * 64 + "\n")
    out = run_py("""
        from mmaemu.planning import executors
        from mmaemu.runtime import diagnostics, facts, loader
        print(loader.kernel_check(0, "cuda:h4")); print(loader.kernel_check(0, "reference"))
    """, {"MMAEMU_LIBCUDA_PATH": str(fake_driver), "MMAEMU_FATBIN_DIR": str(fatbins),
          "MMAEMU_DISABLE_NVRTC": "1"})
    h4, ref = out.splitlines()
    assert h4.startswith("(False") and "stale" in h4 and "MMAEMU_DISABLE_NVRTC" in h4
    assert ref.startswith("(True, 'fatbin")


def test_nvrtc_fallback_and_cubin_cache(fake_driver, fatbins, tmp_path):
    """A fatbin the device rejects -> NVRTC for the device's own arch, cached for the next process."""
    from mmaemu.runtime import loader
    if not loader.nvrtc_status()[1]:
        pytest.skip("NVRTC not found: " + loader.nvrtc_status()[0])
    cache, log = tmp_path / "cache", tmp_path / "log"
    env = {"MMAEMU_LIBCUDA_PATH": str(fake_driver), "MMAEMU_FATBIN_DIR": str(fatbins),
           "FAKE_CUDA_REJECT_FATBIN": "1", "MMAEMU_CACHE_DIR": str(cache), "FAKE_CUDA_LOG": str(log),
           "FAKE_CUDA_CC": "86"}
    code = """
        from mmaemu.planning import executors
        from mmaemu.runtime import diagnostics, facts, loader
        print(loader.kernel_check(0, "reference"))
    """
    first = run_py(code, env)
    assert "fatbin not loadable on sm_86" in first and "NVRTC sm_86 (compiled, cached)" in first
    cubins = list((cache / "cubin").glob("reference-sm_86-*.cubin"))
    assert len(cubins) == 1 and cubins[0].read_bytes()[:4] == b"\x7fELF"
    second = run_py(code, env)
    assert "NVRTC sm_86 (cached " in second
    # a corrupt cache entry is replaced
    cubins[0].write_bytes(b"garbage")
    third = run_py(code, env)
    assert "NVRTC sm_86 (compiled, cached)" in third
    assert cubins[0].read_bytes()[:4] == b"\x7fELF"
    assert log_lines(log).count("load cubin") == 3


NO_DRIVER = "/nonexistent/libcuda.so.1"   # NVRTC compiles without a driver: none is loaded


def test_nvrtc_path_names_the_library(tmp_path):
    """MMAEMU_NVRTC_PATH: a path with no NVRTC says so (and nothing compiles); the real library's
    path is used as given."""
    out = run_py("""
        from mmaemu.planning import executors
        from mmaemu.runtime import diagnostics, facts, loader
        print(loader.nvrtc_status()[0]); print(loader.nvrtc_status()[1])
        print(loader.nvrtc_compile("reference", "sm_80")[0])
    """, {"MMAEMU_NVRTC_PATH": str(tmp_path / "libnvrtc.so.13"), "MMAEMU_LIBCUDA_PATH": NO_DRIVER})
    lines = out.splitlines()
    assert lines[0].startswith(f"MMAEMU_NVRTC_PATH={tmp_path / 'libnvrtc.so.13'}: no loadable libnvrtc")
    assert lines[1] == "0" and lines[2] == "False"
    from mmaemu.runtime import loader
    line, version = loader.nvrtc_status()
    if not version or " at " not in line:
        pytest.skip("NVRTC not found here: " + line)
    real = line.split(" at ", 1)[1].split(" ")[0]
    out = run_py("""
        from mmaemu.planning import executors
        from mmaemu.runtime import diagnostics, facts, loader
        print(loader.nvrtc_status()[0]); print(loader.nvrtc_compile("reference", "sm_80")[0])
    """, {"MMAEMU_NVRTC_PATH": real, "MMAEMU_LIBCUDA_PATH": NO_DRIVER})
    lines = out.splitlines()
    assert real in lines[0] and lines[1] == "True"


def test_unwritable_cache_dir_costs_only_the_cache(fake_driver, fatbins, tmp_path):
    """MMAEMU_CACHE_DIR that cannot be created (a file is in the way): NVRTC still compiles and
    loads the kernel (reported as not cached), self-test verdicts are not stored, nothing raises,
    and the process keeps computing."""
    from mmaemu.runtime import loader
    if not loader.nvrtc_status()[1]:
        pytest.skip("NVRTC not found: " + loader.nvrtc_status()[0])
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    env = {"MMAEMU_LIBCUDA_PATH": str(fake_driver), "MMAEMU_FATBIN_DIR": str(fatbins),
           "FAKE_CUDA_REJECT_FATBIN": "1", "MMAEMU_CACHE_DIR": str(blocker / "cache"),
           "FAKE_CUDA_CC": "86"}
    out = run_py("""
        import torch, mmaemu
        from mmaemu.planning import executors
        from mmaemu.runtime import diagnostics, facts, loader
        print(loader.kernel_check(0, "reference"))
        facts._store("selftest", "k", {"passed": True})
        facts.forget()                       # as a new process would: the disk
        print(facts._load("selftest", "k"))
        x = torch.ones(16, 16).to(torch.float8_e4m3fn)
        y = mmaemu.scaled_mm(x, x.t(), torch.tensor(1.0), torch.tensor(1.0),
                             out_dtype=torch.float32, splitk=1)
        print(float(y[0, 0]))
    """, env)
    lines = out.splitlines()
    assert "NVRTC sm_86 (compiled, not cached: cache dir unwritable)" in lines[0]
    assert lines[0].startswith("(True")
    assert lines[1] == "None" and lines[2] == "16.0"
    assert blocker.read_text().startswith("a file")


def test_fake_device_round_robin_split_runs_on_the_reference_kernel(fake_driver, fatbins, tmp_path):
    """The ada preset's round-robin split layout: the tiled kernels refuse it by name, and
    the reference kernel computes it (no split workspace, no reduction launch)."""
    log = tmp_path / "log"
    env = {"MMAEMU_LIBCUDA_PATH": str(fake_driver), "MMAEMU_FATBIN_DIR": str(fatbins),
           "MMAEMU_DISABLE_NVRTC": "1", "FAKE_CUDA_LOG": str(log)}
    run_py(PLAN_HELPERS + """
PRESETS["ada-rr"] = (16, 13, 14, 128, 0, 64)
rc, err = run("cuda:v4", preset="ada-rr", splits=3, scheme=2, K=1000)
assert rc != 0 and "round-robin" in err, err
assert run("reference", preset="ada-rr", splits=3, scheme=2, K=1000, workspace=False)[0] == 0
assert run(choose("auto", preset="ada-rr"), preset="ada-rr", splits=1, K=1000)[0] == 0
""", env)
    launches = [l for l in log_lines(log) if l.startswith("launch")]
    assert launches[0].startswith("launch mmaemu_reference_gemm"), launches
    assert launches[1].startswith("launch mmaemu_v4_gemm"), launches
    assert len(launches) == 2
