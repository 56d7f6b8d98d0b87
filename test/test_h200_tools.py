"""The GPU run's tools, checked where they would break on the device machine.

Each test stands for one way the prepared H200 run could record nothing: the data scripts on a
fresh tree (no build outputs), cuBLASLt's trace of an unsplit algorithm, the logger's echo, the
device machine's limits on returned files and time, and the order in which a run out of time
loses its data. Shell-script tests run on a copy of the tree, never on this one.
"""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
TOOLS = os.path.join(ROOT, "mmaemu_tools")

from mmaemu_tools import cublaslt as _cublaslt
from mmaemu_tools import record_goldens, record_heuristics

# cuBLASLt 13.1's trace of an unsplit algorithm: no numSplitsK, reductionScheme (defaults)
UNSPLIT_LINE = ("[cublasLt][2][Trace][cublasLtMatmul] A=0x7f0 Adesc=[type=R_8F_E4M3 rows=64 cols=16 ld=64] "
                "computeDesc=[computeType=COMPUTE_32F scaleType=R_32F transa=OP_T] "
                "algo=[algoId=66 tile=MATMUL_TILE_64x16 stages=MATMUL_STAGES_64xAUTO customOption=1 "
                "clusterShape=CLUSTER_SHAPE_4x1x1] workSpace=0x7f1 workSpaceSizeInBytes=1048576 stream=0x0")
RETURNABLE = re.compile(r"^[A-Za-z0-9._-]+$")


def _tree_copy(dest, with_build_outputs=False):
    """The files that travel to the device machine: tracked and untracked-not-ignored ones."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for n in filter(None, names):
        src = os.path.join(ROOT, n)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, n)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, n))
    assert not any(n.startswith("_C") for n in os.listdir(os.path.join(dest, "mmaemu")))
    return dest


def _returned(out):
    """What the device tool brings back from $OUT: plain files, at most 2 folders down."""
    files = []
    for d, _, fs in os.walk(out):
        for f in fs:
            rel = os.path.relpath(os.path.join(d, f), out)
            assert rel.count(os.sep) <= 2 and all(RETURNABLE.match(p) for p in rel.split(os.sep)), rel
            files.append(rel)
    return sorted(files)


# 1 ------------------------------------------------------------------------------------------------
# An editable install elsewhere would lend its own mmaemu._C through its import finder: the
# subprocesses drop that finder, as on a fresh machine where none exists.
_NO_EDITABLE = ("import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path "
                "if 'editable' not in repr(f).lower()]; ")


def _py(tree, code=None, module=None, args=()):
    prog = _NO_EDITABLE + (code if code else f"sys.argv = {[module, *args]!r}; runpy.run_module({module!r}, "
                                             "run_name='__main__', alter_sys=True)")
    return subprocess.run([sys.executable, "-c", prog], cwd=tree, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(tree)))


def test_data_scripts_run_on_a_tree_without_the_extension(tmp_path):
    tree = _tree_copy(tmp_path / "tree")
    assert "_C" in _py(tree, "import mmaemu").stderr        # the package itself cannot load here
    r = _py(tree, "from mmaemu_tools import record_heuristics, record_goldens, probe_hopper; "
                  "print(record_heuristics._cublaslt.__file__)")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().startswith(str(tree))
    r = _py(tree, module="mmaemu_tools.record_heuristics",
            args=["--dry-run", "--quick", "--out", str(tmp_path / "t"), "--heldout", "10"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(list((tmp_path / "t").glob("heur_*.json"))) == 1


# 2 ------------------------------------------------------------------------------------------------
def test_an_unsplit_trace_line_means_one_split():
    p = _cublaslt.parse_matmul_trace(UNSPLIT_LINE)
    assert (p["algo"], p["splits"], p["reduction_scheme"], p["custom_option"]) == (66, 1, "NONE", 1)
    assert p["workspace_bytes"] == 1 << 20 and p["tile"] == "MATMUL_TILE_64x16"
    bare = _cublaslt.parse_matmul_trace("algo=[algoId=31 tile=MATMUL_TILE_128x128]")
    assert (bare["splits"], bare["custom_option"]) == (1, 0)
    split = _cublaslt.parse_matmul_trace("algo=[algoId=66 numSplitsK=4 reductionScheme=COMPUTE_TYPE]")
    assert (split["splits"], split["reduction_scheme"]) == (4, "COMPUTE_TYPE")


def _case(M=16, N=16, K=4096):
    return {"M": M, "N": N, "K": K, "fmt_a": "e4m3", "fmt_b": "e4m3", "out_dtype": "bfloat16",
            "fast_accum": True, "scale_result": None}


class _FakeLt:
    def __init__(self, message, answer):
        self.message, self.answer, self.lines = message, answer, []

    def take_log(self):
        lines, self.lines = self.lines, []
        return lines

    def heuristic(self, *a, **k):
        return dict(self.answer)


def test_goldens_replay_unsplit_cases_and_fall_back_to_the_heuristic(monkeypatch):
    import torch
    real_ones = torch.ones
    monkeypatch.setattr(record_goldens.torch, "ones", lambda *a, **k: real_ones(1))   # no GPU here
    lt = _FakeLt(UNSPLIT_LINE, {"algo": 66, "splits": 1, "reduction_scheme": "NONE"})

    def run():
        lt.lines.append((2, "cublasLtMatmul", lt.message))
        return "y"
    _, cfg = record_goldens.cublaslt_config(lt, True, _case(), run, False, None)
    assert (cfg["source"], cfg["splits"], cfg["trace_and_heuristic_agree"]) == ("trace", 1, True)
    assert record_goldens.mmaemu_split(cfg) == 1
    # a trace without the algo group: the heuristic's answer decides
    lt = _FakeLt("cublasLtMatmul: no algorithm fields here", {"algo": 66, "splits": 4,
                                                              "reduction_scheme": "COMPUTE_TYPE"})
    _, cfg = record_goldens.cublaslt_config(lt, True, _case(), run, False, None)
    assert (cfg["source"], record_goldens.mmaemu_split(cfg)) == ("heuristic", [4, "contiguous"])


# 3 ------------------------------------------------------------------------------------------------
class _FakeLib:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def f(*args):
            self.calls.append((name, [getattr(a, "value", a) for a in args]))
            return 0
        return f


def test_the_logger_writes_to_dev_null_and_traces_only():
    lt = _cublaslt.CublasLt.__new__(_cublaslt.CublasLt)
    lt.lib, lt.log_lines, lt._log_cb = _FakeLib(), [], None
    lt.start_log()
    names = [c[0] for c in lt.lib.calls]
    assert names == ["cublasLtLoggerOpenFile", "cublasLtLoggerSetCallback", "cublasLtLoggerSetMask"]
    assert lt.lib.calls[0][1] == [os.devnull.encode()] and lt.lib.calls[2][1] == [0x3]
    for script in ("record_goldens.py", "record_heuristics.py", "probe_hopper.py"):
        src = open(os.path.join(TOOLS, script)).read()
        assert "start_log(" in src and "start_log(mask" not in src, script


# 4, 5, 9 -------------------------------------------------------------------------------------------
def _fake_python(path):
    """A python3 for the ground-truth script: the heuristic sweep runs (a CPU dry run), every
    other job hangs, as a job stuck on the device would."""
    path.write_text("#!/bin/bash\ncase \"$*\" in\n"
                    f"  -c\\ *|-\\ *) exec {sys.executable} \"$@\";;\n"
                    f"  *record_heuristics*) exec {sys.executable} \"$@\" --heldout 0;;\n"
                    "  *) exec sleep 1000;;\nesac\n")
    path.chmod(0o755)
    return str(path)


def test_ground_truth_packs_as_jobs_end_and_stops_inside_its_total(tmp_path):
    tree = _tree_copy(tmp_path / "tree")
    out, work = tmp_path / "out", tmp_path / "w"
    env = dict(os.environ, OUT=str(out), WORK=str(work), QUICK="1", TOTAL_S="60", MARGIN_S="5",
               CROSS_CHECK="0", PYTHON=_fake_python(tmp_path / "python3"),
               PYTHONPATH=str(tree))
    t0 = time.time()
    proc = subprocess.Popen(["bash", "scripts/h200_ground_truth.sh"], cwd=tree, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen_while_running = None
        while proc.poll() is None and time.time() - t0 < 90:
            tb = out / "ground_truth.tar.gz"
            if tb.exists() and seen_while_running is None:
                with tarfile.open(tb) as tf:
                    names = tf.getnames()
                if sum(n.startswith("./tables/heur_") for n in names) == 3:
                    seen_while_running = time.time() - t0
            time.sleep(0.5)
        log = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.time() - t0
    assert proc.returncode == 0, log[-3000:]
    assert seen_while_running is not None and seen_while_running < 50, log[-3000:]   # before the end
    assert took < 60 + 15, (took, log[-2000:])         # every limit ended inside TOTAL_S
    files = _returned(out)
    assert files == ["ground_truth.tar.gz", "gt_summary.txt"], files
    summary = (out / "gt_summary.txt").read_text()
    assert "table heur_dryrun_ltsynthetic_torch_DRYRUN" in summary and "job build: rc=124" in summary


def test_cuda_check_keeps_carried_fatbins_skips_zero_limits_and_fits_its_files(tmp_path):
    tree = _tree_copy(tmp_path / "tree")
    fat = tmp_path / "tree" / "mmaemu" / "_fatbin"
    fat.mkdir()
    (fat / "wgmma.fatbin").write_bytes(b"carried")
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable, T_BUILD="0", T_CUDA="0", T_SELFTEST="0",
               T_BENCH="0", T_REST="0", PYTHONPATH=str(tree))
    r = subprocess.run(["bash", "scripts/h200_cuda_check.sh"], cwd=tree, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (fat / "wgmma.fatbin").read_bytes() == b"carried"
    summary = (out / "cuda_summary.txt").read_text()
    assert summary.count("skipped (limit 0)") == 5, summary
    files = _returned(out)
    assert len(files) <= 8 and "cuda_summary.txt" in files, files
    # the two commands share no file name (each has its own 8-file budget and summary)
    gt = re.findall(r"\$OUT/([A-Za-z0-9_.*-]+)", open(os.path.join(SCRIPTS, "h200_ground_truth.sh")).read())
    assert not set(files) & {g for g in gt if "*" not in g and not g.endswith(".part")}, (files, gt)


def test_the_build_reuses_carried_fatbins_that_match_the_sources(tmp_path, monkeypatch):
    import runpy
    import setuptools
    tree = _tree_copy(tmp_path / "tree")
    monkeypatch.setattr(setuptools, "setup", lambda **kw: None)
    g = runpy.run_path(os.path.join(tree, "setup.py"))
    fat = tree / "mmaemu" / "_fatbin"
    fat.mkdir()
    for module in g["FATBIN_MODULES"]:
        (fat / f"{module}.fatbin").write_bytes(b"carried " + module.encode())
        (fat / f"{module}.fatbin.sha256").write_text(g["kernel_source_hash"](module) + "\n")
    # an nvcc that fails: any fatbin it is asked for breaks the build
    monkeypatch.setitem(g["build_kernels"].__globals__, "find_nvcc", lambda: "/bin/false")
    monkeypatch.setenv("MMAEMU_BUILD_FATBIN", "1")
    g["build_kernels"](str(tmp_path / "pkg"))
    for module in g["FATBIN_MODULES"]:
        assert (tmp_path / "pkg" / "_fatbin" / f"{module}.fatbin").read_bytes() == b"carried " + module.encode()


# 6 ------------------------------------------------------------------------------------------------
def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_cuda", os.path.join(ROOT, "benchmarks", "cuda.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cuda_benchmark_writes_its_json_as_it_goes(tmp_path):
    bench = _bench_module()
    path = str(tmp_path / "bench.json")
    rec = bench.Results(path, {"torch": "x"})
    assert json.load(open(path)) == {"torch": "x", "complete": False, "results": []}
    rec.add({"shape": "a", "native_ms": 1.0})
    assert [r["shape"] for r in json.load(open(path))["results"]] == ["a"]
    rec.finish()
    assert json.load(open(path))["complete"] is True
    # without a GPU the run still leaves its file, saying why it measured nothing
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "cuda.py"), "--quick", "--json",
                        str(tmp_path / "cpu.json")], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.load(open(tmp_path / "cpu.json"))
    assert doc["complete"] and doc["quick"] and "no CUDA device" in doc["skipped"]


# 7 ------------------------------------------------------------------------------------------------
def test_goldens_out_of_time_keep_the_split_cases(tmp_path, monkeypatch):
    clock = {"t": 0.0}

    def tick():
        clock["t"] += 1.0
        return clock["t"]
    monkeypatch.setattr(record_goldens, "time", types.SimpleNamespace(time=tick))
    assert record_goldens.main(["--out", str(tmp_path), "--tag", "t", "--dry-run", "--corpus", "tiny",
                                "--budget-s", "4"]) == 0
    doc = json.loads((tmp_path / "t.json").read_text())
    n_split = sum(c["group"] == "F" for c in record_goldens.corpus(set("ABCDEF"), True))
    kept = [c["group"] for c in doc["cases"]]
    assert n_split and kept[:n_split] == ["F"] * n_split and doc["rejected"], kept
    order = [c["group"] for c in record_goldens.by_value(record_goldens.corpus(set("ABCDEF"), False))]
    assert order[0] == "F" and order == sorted(order, key=record_goldens.VALUE_ORDER.index)
    cases = record_goldens.by_value(record_goldens.corpus(set("ABCDEF"), False))
    ids = [c["id"] for c in cases]
    for i, cid in enumerate(ids):      # each fast case beside its promoted twin
        if cid.endswith("-fast") and cid[:-5] + "-slow" in ids:
            assert ids[i + 1] == cid[:-5] + "-slow", cid


# 8 ------------------------------------------------------------------------------------------------
def test_heuristics_table_is_written_before_the_held_out_test(tmp_path, monkeypatch):
    swept = set(record_heuristics.grid(True)[0])

    class Flaky(_cublaslt.SyntheticLt):
        def heuristic(self, M, N, K, *a, **k):
            if (M, N, K) not in swept:
                raise RuntimeError("cuBLAS status 7 on a held-out shape")
            return super().heuristic(M, N, K, *a, **k)
    monkeypatch.setattr(record_heuristics._cublaslt, "SyntheticLt", Flaky)
    assert record_heuristics.main(["--dry-run", "--quick", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("heur_*.json")
    doc = json.loads(path.read_text())
    assert doc["rows"] and doc["envelope"]["validated"] is False
    assert "held-out test failed: RuntimeError: cuBLAS status 7" in doc["envelope"]["note"]


# 10 -----------------------------------------------------------------------------------------------
# The device tool returns at most 8 files from $OUT, 16 MiB each (/work/.library/device/README.md,
# "files back from $OUT"). The three split-K tables of a run (torch, te, ws0) come back inside
# ground_truth.tar.gz with the goldens and probes: at --max-mib (5 MiB) each, they fit in one such
# file even before compression.
RETURNED_FILE_BYTES = 16 << 20


def test_heuristic_sweep_covers_formats_and_outputs_within_the_file_limit(tmp_path, monkeypatch):
    assert 3 * record_heuristics.MAX_MIB * (1 << 20) < RETURNED_FILE_BYTES
    # The table's head holds the command line, which the size limit must count whatever its
    # length (pytest's own command line varies with how the suite was started).
    monkeypatch.setattr(sys, "argv", ["pytest"] + ["test/some_long_test_path.py"] * 200)
    assert record_heuristics.main(["--dry-run", "--out", str(tmp_path), "--heldout", "50"]) == 0
    (path,) = tmp_path.glob("heur_*.json")
    assert path.stat().st_size <= record_heuristics.MAX_MIB * (1 << 20)
    doc = json.loads(path.read_text())
    assert doc["sweep"]["complete"] is False                # the size limit, not the plan, ended it
    assert len(doc["provenance"]["command"]) > 5000
    combos = {(r["fmt_a"], r["fmt_b"], r["out_dtype"]) for r in doc["rows"]}
    assert combos == {(a, b, o) for a, b in record_heuristics.PAIRS for o in ("bf16", "f32", "f16")}
    assert len(doc["sweep"]["stages_done"]) >= 2            # coarse and sparse stages complete
    dense = sum(1 for r in doc["rows"] if (r["fmt_a"], r["fmt_b"], r["out_dtype"]) == ("e4m3", "e4m3", "f32"))
    assert dense >= 2 * len(record_heuristics.grid(False)[0])


def test_live_split_query_passes_device_scale_pointers(monkeypatch):
    seen = {}

    class Lt:
        def version_string(self):
            return "13.1.0 (cublasLtGetVersion 130100)"

        def heuristic(self, *a, **k):
            seen.update(k)
            return {"algo": 66, "tile": 20, "splits": 1, "reduction_scheme": "NONE", "custom_option": 0}
    monkeypatch.setitem(_cublaslt._LIVE, "lt", Lt())
    monkeypatch.setattr(_cublaslt, "_device_scale_ptrs", lambda: (0x7000, 0x7004))
    prof = types.SimpleNamespace(cublaslt_version="13.1.0", workspace_bytes=1 << 20)
    S, scheme, _ = _cublaslt.query_split(prof, 16, 16, 4096, "e4m3", "e4m3", "bf16", True)
    assert (S, scheme) == (1, "none") and seen["scale_ptrs"] == (0x7000, 0x7004)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_device_scale_pointers_are_on_the_gpu():
    a, b = _cublaslt._device_scale_ptrs()
    assert a and b == a + 4
