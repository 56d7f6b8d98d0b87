"""The hardware scripts run end to end on the CPU (dry run against the mmaemu CPU model).

A dry run proves nothing about hardware; it proves that the scripts' logic (inputs, hypothesis
scoring, restart detection, config handling, golden encoding and replay, table and envelope
building) works, so that the one prepared GPU run does not fail on a bug. Negative controls
check that the probes and the replay can fail.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")

from mmaemu_tools import cublaslt as _cublaslt
from mmaemu.testing import assert_bitwise_equal
from mmaemu_tools import _hwcommon as hw
from mmaemu_tools import probe_hopper, record_goldens, record_heuristics


def test_probe_dry_run_end_to_end(tmp_path):
    assert probe_hopper.main(["--out", str(tmp_path), "--dry-run", "--quick"]) == 0
    doc = json.loads((tmp_path / "probes.json").read_text())
    assert doc["dry_run"] is True and "NOT hardware" in doc["platform"]["platform"]
    got = {p["id"]: p for p in doc["probes"]}
    assert set(got) == set(probe_hopper.PROBES)
    for pid, p in got.items():   # the model agrees with itself; P10 needs cuBLASLt
        assert p["verdict"] == ("skipped" if pid == "P10" else "confirmed"), (pid, p)
    # the restart detector found the promotion boundaries and the simulated split
    maps = got["P3"]["result"]["restart_maps"]
    assert maps["K=512 non-fast"]["restarts"] == [128, 256, 384]
    assert maps["K=512 fast"]["restarts"] == []
    assert got["P4"]["result"]["16x16x2048"]["restarts"] == [1024]
    assert got["P1"]["result"]["fixed_case"]["observed"] == 2048.75
    assert got["P2"]["result"]["fixed_cases"]["(ii) 2048 + 3*0.125"] == 2048.25


def test_probes_reject_a_wrong_device(tmp_path):
    """Negative control: a 'device' with Ada's 16-product blocks must be rejected."""
    args = argparse.Namespace(dry_run=True, quick=True, vectors="", only="", out=str(tmp_path), tag="")
    ctx = probe_hopper.Ctx(args)

    def ada(a_u8, b_u8, fa, fb, out_dtype, fast, sa, sb, scale_result=None, bias=None, splitk=None):
        A, B = hw.fp8_tensor(a_u8, fa), hw.fp8_tensor(b_u8, fb)
        return torch.ops.mmaemu.scaled_mm(A, B.t(), torch.tensor(float(sa)), torch.tensor(float(sb)),
                                          None, None, out_dtype, bool(fast), "ada", 1, "none",
                                          "reference", 0)
    ctx.backend.scaled_mm = ada
    assert probe_hopper.probe_p2(ctx)["verdict"] == "rejected"
    assert probe_hopper.probe_p6(ctx)["verdict"] == "rejected"


def test_exact_model_matches_the_c_model():
    """The probes' predictions (the independent exact model, mmaemu_tools/exactmodel.py) and
    mmaemu's C model agree (chains, promotion)."""
    import mmaemu
    spec = dict(rows=8, cols=400, fmt="e4m3", seed=3, exp_lo=0, exp_hi=15, zero_permille=100)
    A = hw.gen_fp8_bytes(spec)
    B = hw.gen_fp8_bytes({**spec, "seed": 4, "rows": 16})
    for fast in (True, False):
        y = mmaemu.scaled_mm(hw.fp8_tensor(A, "e4m3"), hw.fp8_tensor(B, "e4m3").t(), torch.tensor(1.0),
                             torch.tensor(1.0), out_dtype=torch.float32, use_fast_accum=fast,
                             backend="reference", splitk=1)
        for i in range(8):
            for j in range(0, 16, 5):
                m = probe_hopper.model_dot(A[i], B[j], fast)
                assert hw.f32_bits(m) == hw.f32_bits(y[i, j].item()), (fast, i, j)


def test_record_goldens_dry_run_and_replay(tmp_path):
    assert record_goldens.main(["--out", str(tmp_path), "--tag", "dry", "--dry-run",
                                "--corpus", "tiny"]) == 0
    docs = hw.load_golden_files(str(tmp_path))
    assert len(docs) == 1
    _, doc = docs[0]
    assert doc["platform"]["dry_run"] is True and "NOT hardware" in doc["note"]
    cases = doc["cases"]
    assert len(cases) >= 15 and not doc["rejected"]
    assert any(isinstance(c["mmaemu_splitk"], list) for c in cases)     # a split case
    assert any("sample" in c["output"] for c in cases)                  # a sampled replay
    assert {c["out_dtype"] for c in cases} >= {"float32", "bfloat16"}
    for c in cases:
        expected, actual = hw.replay_case(c)
        assert_bitwise_equal(actual, expected, msg=c["id"])
    # the replay can fail: one flipped output bit is caught
    c = json.loads(json.dumps(cases[0]))
    h = bytearray(bytes.fromhex(c["output"]["bits_hex"]))
    h[0] ^= 1
    c["output"]["bits_hex"] = h.hex()
    expected, actual = hw.replay_case(c)
    with pytest.raises(AssertionError):
        assert_bitwise_equal(actual, expected)
    # and a changed generator is caught by the input hash
    c["a"]["gen"]["seed"] += 1
    with pytest.raises(AssertionError, match="hash"):
        hw.replay_case(c)


def test_sampled_replay_matches_whole_output():
    """A large output's sampled block equals the same block of the whole output."""
    import mmaemu
    spec = dict(rows=40, cols=64, fmt="e4m3", seed=9, exp_lo=2, exp_hi=10)
    A, B = hw.gen_fp8_bytes(spec), hw.gen_fp8_bytes({**spec, "rows": 48, "seed": 10})
    one = torch.tensor(1.0)
    whole = mmaemu.scaled_mm(hw.fp8_tensor(A, "e4m3"), hw.fp8_tensor(B, "e4m3").t(), one, one,
                             out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
    rows, cols = hw.sample_indices(40, 48, 1)
    part = mmaemu.scaled_mm(hw.fp8_tensor(A[rows], "e4m3"), hw.fp8_tensor(B[cols], "e4m3").t(), one,
                            one, out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
    assert_bitwise_equal(part, whole[rows][:, cols])


def test_dry_run_never_writes_into_hardware_folders():
    with pytest.raises(SystemExit, match="hardware records only"):
        record_goldens.main(["--out", os.path.join(ROOT, "test", "data", "hw_goldens"), "--dry-run",
                             "--corpus", "tiny"])
    with pytest.raises(SystemExit, match="hardware records only"):
        record_heuristics.main(["--out", os.path.join(ROOT, "tables", "splitk"), "--dry-run", "--quick"])


def test_record_heuristics_dry_run_schema(tmp_path):
    assert record_heuristics.main(["--caller", "torch", "--out", str(tmp_path), "--dry-run",
                                   "--quick", "--heldout", "50"]) == 0
    (path,) = tmp_path.glob("*.json")
    doc = json.loads(path.read_text())
    assert doc["table_id"].endswith("_DRYRUN") and path.name == doc["table_id"] + ".json"
    assert set(doc["provenance"]) >= {"gpu", "sm_count", "cublaslt_version", "workspace_bytes",
                                      "caller", "recorded_with", "date", "source"}
    assert doc["provenance"]["workspace_bytes"] == 1 << 20 and "SYNTHETIC" in doc["provenance"]["source"]
    keys = {"M", "N", "K", "fmt_a", "fmt_b", "out_dtype", "fast_accum", "splits", "scheme", "algo",
            "tile", "custom_option", "note"}
    assert doc["rows"] and all(set(r) == keys for r in doc["rows"])
    assert all(r["scheme"] in ("none", "contiguous") for r in doc["rows"])
    assert all((r["scheme"] == "none") == (r["splits"] == 1) for r in doc["rows"])
    env = doc["envelope"]
    assert env["validated"] is False and "SYNTHETIC" in env["note"]
    # the envelope is the largest split M*N per K
    for b in env["bounds"]:
        split_mn = [r["M"] * r["N"] for r in doc["rows"] if r["K"] == b["K"] and r["splits"] > 1]
        assert b["max_split_mn"] == max(split_mn, default=0)


def test_cublaslt_helper_fails_cleanly_without_the_library():
    lt, why = _cublaslt.load_or_none("/nonexistent/libcublasLt.so.13")
    assert lt is None and "libcublasLt not found" in why
    with pytest.raises(_cublaslt.CublasLtUnavailable):
        _cublaslt.CublasLt("/nonexistent/libcublasLt.so.13")


def test_trace_parser():
    msg = ("A=0X7F Adesc=[type=R_8F_E4M3 rows=4096 cols=16 ld=4096] computeDesc=[computeType=COMPUTE_32F "
           "scaleType=R_32F fastAccumulationMode=1] algo=[algoId=66 tile=MATMUL_TILE_64x128 "
           "stages=MATMUL_STAGES_128x4 numSplitsK=4 reductionScheme=MATMUL_REDUCTION_COMPUTE_TYPE "
           "swizzle=0 customOption=2] workSpace=0X0 workSpaceSizeInBytes=1048576 beta=0")
    (t,) = _cublaslt.matmul_traces([(2, "cublasLtMatmul", msg), (16, "cublasLtMatmulDescCreate", "x=1")])
    assert (t["algo"], t["splits"], t["reduction_scheme"], t["custom_option"], t["workspace_bytes"]) == \
        (66, 4, "COMPUTE_TYPE", 2, 1048576)
    assert _cublaslt.parse_matmul_trace("matmulDesc=0x1 attr=MATMUL_DESC_TRANSA") is None


def test_generator_is_deterministic_and_respects_its_spec():
    spec = dict(rows=64, cols=48, fmt="e5m2", seed=7, exp_lo=3, exp_hi=20, zero_permille=100,
                patches=[[0, 0, 0x7C]])
    a, b = hw.gen_fp8_bytes(spec), hw.gen_fp8_bytes(spec)
    assert np.array_equal(a, b) and a[0, 0] == 0x7C
    v = torch.from_numpy(a).view(torch.float8_e5m2).float()
    assert torch.isfinite(v.flatten()[1:]).all()
    ef = (a.astype(int) >> 2) & 31
    nz = (a & 0x7F) != 0
    assert ((ef[nz] >= 3) & (ef[nz] <= 20)).all() or a[0, 0] == 0x7C
    assert 0.05 < float((~nz).mean()) < 0.15
    assert hw.sha256_hex(a) != hw.sha256_hex(hw.gen_fp8_bytes({**spec, "seed": 8}))
    assert np.array_equal(hw.gen_fp8_bytes(spec, [5, 0, 63]), a[[5, 0, 63]])   # rows alone
    # e4m3: random bytes never encode NaN
    e4 = hw.gen_fp8_bytes(dict(rows=200, cols=64, fmt="e4m3", seed=1, exp_lo=14, exp_hi=15))
    assert not np.any((e4 & 0x7F) == 0x7F)


def test_raw_kernel_source_is_complete():
    """The runtime-compiled kernels name every format pair (compiled with NVRTC on the GPU box)."""
    from mmaemu_tools import _rawmma
    src = _rawmma.kernel_source()
    for fa, fb in _rawmma.PAIRS:
        assert f"wgmma_{fa}_{fb}(" in src and f"mma_{fa}_{fb}(" in src
        assert f"m64n8k32.f32.{fa}.{fb}" in src and f"m16n8k32.row.col.f32.{fa}.{fb}.f32" in src


def test_h200_script_is_valid_bash():
    subprocess.run(["bash", "-n", os.path.join(SCRIPTS, "h200_ground_truth.sh")], check=True)


SLOW = pytest.mark.skipif(os.environ.get("MMAEMU_SLOW_TESTS") != "1", reason="rehearsal of the whole "
                          "GPU run (about a minute on 2 cores): set MMAEMU_SLOW_TESTS=1")


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """One dry run of scripts/h200_ground_truth.sh, shared by the tests that need its output."""
    tmp = tmp_path_factory.mktemp("rehearsal")
    env = dict(os.environ, DRY_RUN="1", QUICK="1", OUT=str(tmp / "out"), WORK=str(tmp / "w"),
               HEUR_BUDGET_S="5", PYTHON=sys.executable)
    r = subprocess.run(["bash", os.path.join(SCRIPTS, "h200_ground_truth.sh")], env=env,
                       capture_output=True, text=True, timeout=600)
    return tmp, r


@SLOW
def test_h200_script_rehearsal(rehearsal):
    tmp_path, r = rehearsal
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "out" / "ground_truth.tar.gz").exists()
    summary = (tmp_path / "out" / "gt_summary.txt").read_text()
    assert "P0" in summary and "table heur_dryrun" in summary and "goldens h200_torch.json" in summary
    assert "Traceback" not in summary


# -- mmaemu_tools/ingest_h200.py: the run's files into a repository ------------------------------------

import io  # noqa: E402
import shutil  # noqa: E402
import tarfile  # noqa: E402

from mmaemu_tools import ingest_h200  # noqa: E402  (beside the tests of it)


def _scratch_repo(path):
    """The parts of a repository the ingest touches: tables/ (profiles, splitk) and test/data/."""
    shutil.copytree(os.path.join(ROOT, "tables"), path / "tables")
    (path / "test" / "data").mkdir(parents=True)
    return path


def _pack(folder, out_dir, extra=()):
    out_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out_dir / "ground_truth.tar.gz", "w:gz") as tf:
        tf.add(str(folder), arcname=".")
        for name, data in extra:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out_dir


def _use_tables(monkeypatch, tables):
    """Points mmaemu's loaders at another tables/ folder (profiles, presets, split-K tables)."""
    import importlib
    from pathlib import Path
    P, S = importlib.import_module("mmaemu.planning.profiles"), importlib.import_module("mmaemu.planning.splitk")
    monkeypatch.setattr(P, "tables_dir", lambda: Path(tables))
    monkeypatch.setattr(S, "tables_dir", lambda: Path(tables))
    monkeypatch.setattr(P, "_PROFILES", None)
    monkeypatch.setattr(P, "_PRESETS", None)
    monkeypatch.setattr(S, "_TABLES", {})


def _synthetic_run(folder, sm_count=132, gpu="NVIDIA H200"):
    """A run's folder as the GPU run packs it: one golden, three tables, one probes file."""
    (folder / "goldens").mkdir(parents=True)
    (folder / "tables").mkdir()
    (folder / "probes").mkdir()
    (folder / "logs").mkdir()
    platform = {"dry_run": False, "gpu": gpu, "sm_count": sm_count, "capability": "9.0"}
    hw.write_json(str(folder / "goldens" / "h200_torch.json"),
                  {"format": "mmaemu-hw-goldens/1", "tag": "h200_torch", "platform": platform,
                   "cases": [], "rejected": [], "seconds": 0.1})
    for caller, ws in record_heuristics.CALLERS.items():
        tid = f"heur_h200_lt12.9.1.4_{caller}"
        rows = [{"M": 16, "N": 16, "K": 65536, "fmt_a": "e4m3", "fmt_b": "e4m3", "out_dtype": "bfloat16",
                 "fast_accum": True, "splits": 1 if caller == "ws0" else 4,
                 "scheme": "none" if caller == "ws0" else "contiguous", "algo": 66, "tile": 20,
                 "custom_option": 0, "note": "synthetic test row"}]
        prov = {"gpu": gpu, "sm_count": sm_count, "cublaslt_version": "12.9.1.4",
                "workspace_bytes": ws, "caller": caller, "recorded_with": "test", "date": "2026-12-02",
                "source": "cuBLASLt heuristic queried on the GPU (test stand-in)", "torch": "2.8.0"}
        record_heuristics.write_table(str(folder / "tables" / f"{tid}.json"),
                                      {"table_id": tid, "provenance": prov, "rows": rows,
                                       "envelope": {"bounds": [], "validated": False, "note": "test"}})
    hw.write_json(str(folder / "probes" / "probes.json"),
                  {"platform": platform, "dry_run": False, "probes": [
                      {"id": "P1", "hypothesis": "C joins the block", "verdict": "confirmed",
                       "matching_hypotheses": ["C inside the block (model)"], "result": {}},
                      {"id": "P5", "hypothesis": "sum | order", "verdict": "inconclusive",
                       "result": {"reason": "no shape split in P4 with this workspace"}}]})
    return folder


def test_ingest_h200_synthetic_run(tmp_path, monkeypatch, capsys):
    run = _synthetic_run(tmp_path / "w")
    out = _pack(run, tmp_path / "out")
    repo = _scratch_repo(tmp_path / "repo")
    before = (repo / "tables" / "profiles.json").read_text()
    # --dry-run writes nothing
    assert ingest_h200.main([str(out), "--repo", str(repo), "--dry-run"]) == 0
    assert (repo / "tables" / "profiles.json").read_text() == before
    assert not (repo / "test" / "data" / "hw_goldens").exists() and not (out / "probe_table.md").exists()
    assert ingest_h200.main([str(out), "--repo", str(repo)]) == 0
    assert (repo / "test" / "data" / "hw_goldens" / "h200_torch.json").exists()
    for caller in ("torch", "te", "ws0"):
        assert (repo / "tables" / "splitk" / f"heur_h200_lt12.9.1.4_{caller}.json").exists()
    table = (out / "probe_table.md").read_text()
    assert table in capsys.readouterr().out
    assert "| P1 | probes.json (NVIDIA H200) | C joins the block | confirmed | matches: C inside" in table
    assert "sum \\| order | inconclusive | reason: no shape split" in table
    # the loader reads the new profiles, and the table's rows are found under mmaemu's dtype names
    _use_tables(monkeypatch, repo / "tables")
    import mmaemu
    import mmaemu.planning.splitk as splitk
    p = mmaemu.get_profile("h200")
    assert (p.gpu, p.gpu_match, p.sm_count, p.cublaslt_version, p.workspace_bytes, p.preset) == \
        ("NVIDIA H200", "H200", 132, "12.9.1.4", 1 << 20, "hopper")
    assert p.caller == "torch 2.8.0 torch._scaled_mm" and p.splitk_table == "heur_h200_lt12.9.1.4_torch"
    te, ws0 = mmaemu.get_profile("h200-te"), mmaemu.get_profile("h200-ws0")
    hopper_te, hopper_ws0 = mmaemu.get_profile("hopper-te"), mmaemu.get_profile("hopper-ws0")
    assert te.workspace_bytes == 32 << 20 and te.caller == hopper_te.caller
    assert (ws0.splitk_table, ws0.split_rule, ws0.caller) == (None, "never", hopper_ws0.caller)
    d, _ = splitk.decide(p, 16, 16, 65536, "e4m3", "e4m3", "bf16", True)
    assert (d.S, d.scheme, d.source) == (4, "contiguous", "table")
    d, _ = splitk.decide(ws0, 16, 16, 65536, "e4m3", "e4m3", "bf16", True)
    assert (d.S, d.source) == (1, "rule")
    # a second ingest of the same run changes nothing
    assert ingest_h200.main([str(out), "--repo", str(repo)]) == 0
    assert "already present and identical" in capsys.readouterr().out
    # a different golden or profile is not overwritten without --force
    doc = json.loads((run / "goldens" / "h200_torch.json").read_text())
    doc["seconds"] = 9.9
    hw.write_json(str(run / "goldens" / "h200_torch.json"), doc)
    out2 = _pack(run, tmp_path / "out2")
    with pytest.raises(SystemExit, match="exists with other contents"):
        ingest_h200.main([str(out2), "--repo", str(repo)])
    assert ingest_h200.main([str(out2), "--repo", str(repo), "--force"]) == 0
    assert json.loads((repo / "test" / "data" / "hw_goldens" / "h200_torch.json").read_text())["seconds"] == 9.9
    # a hand-edited profile is not replaced without --force either
    prof = repo / "tables" / "profiles.json"
    prof.write_text(prof.read_text().replace("on an H200 (132 SMs", "on an H200 (edited, 132 SMs"))
    with pytest.raises(SystemExit, match="profile 'h200' exists"):
        ingest_h200.main([str(out2), "--repo", str(repo)])
    assert ingest_h200.main([str(out2), "--repo", str(repo), "--force"]) == 0
    assert "edited" not in prof.read_text()


def test_ingest_h200_refuses_bad_runs(tmp_path, capsys):
    repo = _scratch_repo(tmp_path / "repo")
    # missing provenance: no profile is made up
    run = _synthetic_run(tmp_path / "w")
    tpath = run / "tables" / "heur_h200_lt12.9.1.4_te.json"
    doc = json.loads(tpath.read_text())
    del doc["provenance"]["sm_count"]
    record_heuristics.write_table(str(tpath), doc)
    with pytest.raises(SystemExit, match="'sm_count' is missing"):
        ingest_h200.main([str(_pack(run, tmp_path / "o1")), "--repo", str(repo)])
    assert not (repo / "test" / "data" / "hw_goldens").exists()
    # a tar member outside the target
    run = _synthetic_run(tmp_path / "w2")
    with pytest.raises(SystemExit, match="outside"):
        ingest_h200.main([str(_pack(run, tmp_path / "o2", [("../evil.json", b"{}")])), "--repo", str(repo)])
    assert not (tmp_path / "evil.json").exists()
    # a ws0 table that splits contradicts the never-split rule: that table alone is refused
    run = _synthetic_run(tmp_path / "w3")
    tpath = run / "tables" / "heur_h200_lt12.9.1.4_ws0.json"
    doc = json.loads(tpath.read_text())
    doc["rows"][0].update(splits=2, scheme="contiguous")
    record_heuristics.write_table(str(tpath), doc)
    repo3 = _scratch_repo(tmp_path / "repo3")
    assert ingest_h200.main([str(_pack(run, tmp_path / "o3")), "--repo", str(repo3)]) == 0
    said = capsys.readouterr().out
    assert "heur_h200_lt12.9.1.4_ws0 REFUSED" in said and "never-split rule" in said
    assert '"K": 65536' in said and "1 of 1 rows split" in said          # the evidence
    assert not (repo3 / "tables" / "splitk" / "heur_h200_lt12.9.1.4_ws0.json").exists()
    for caller in ("torch", "te"):
        assert (repo3 / "tables" / "splitk" / f"heur_h200_lt12.9.1.4_{caller}.json").exists()
    assert (repo3 / "test" / "data" / "hw_goldens" / "h200_torch.json").exists()
    names = [p["name"] for p in json.loads((repo3 / "tables" / "profiles.json").read_text())["profiles"]]
    assert "h200" in names and "h200-te" in names and "h200-ws0" not in names
    # dry-run data never lands in this repository
    run = _synthetic_run(tmp_path / "w4")
    gpath = run / "goldens" / "h200_torch.json"
    doc = json.loads(gpath.read_text())
    doc["platform"]["dry_run"] = True
    hw.write_json(str(gpath), doc)
    with pytest.raises(SystemExit, match="dry-run"):
        ingest_h200.main([str(_pack(run, tmp_path / "o4")), "--allow-dry-run"])


def test_profiles_layout_round_trips():
    """The ingest rewrites tables/profiles.json in its own layout: no diff beyond new profiles."""
    text = open(os.path.join(ROOT, "tables", "profiles.json")).read()
    assert ingest_h200.profiles_text(json.loads(text)) == text


@SLOW
def test_h200_rehearsal_ingests_and_replays(rehearsal, tmp_path, monkeypatch):
    """The rehearsal's own files go through the ingest; its goldens (the CPU model) replay exactly."""
    src, r = rehearsal
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    repo = _scratch_repo(tmp_path / "repo")
    out = src / "out"
    with pytest.raises(SystemExit, match="dry-run"):            # never into this repository
        ingest_h200.main([str(out), "--allow-dry-run", "--dry-run"])
    with pytest.raises(SystemExit, match="'gpu' is missing"):   # a dry run records no GPU facts
        ingest_h200.main([str(out), "--repo", str(repo), "--allow-dry-run"])
    # complete the tables' provenance as a GPU run records it (stand-in H200 facts), repack
    for t in (src / "w" / "tables").glob("*.json"):
        doc = json.loads(t.read_text())
        doc["provenance"].update(gpu="NVIDIA H200", sm_count=132)
        record_heuristics.write_table(str(t), doc)
    out = _pack(src / "w", tmp_path / "out")
    assert ingest_h200.main([str(out), "--repo", str(repo), "--allow-dry-run"]) == 0
    goldens = sorted(p.name for p in (repo / "test" / "data" / "hw_goldens").glob("*.json"))
    assert goldens == ["h200_torch.json", "h200_ws0.json", "h200_ws32m.json"]
    assert len(list((repo / "tables" / "splitk").glob("heur_dryrun_*.json"))) == 3
    assert "| P0 |" in (out / "probe_table.md").read_text()
    _use_tables(monkeypatch, repo / "tables")
    import mmaemu
    import mmaemu.planning.splitk as splitk
    for name in ("h200", "h200-te", "h200-ws0"):
        p = mmaemu.get_profile(name)
        assert p.sm_count == 132 and p.preset == "hopper"
        if p.splitk_table:
            t = json.loads((repo / "tables" / "splitk" / f"{p.splitk_table}.json").read_text())
            for row in t["rows"][:6]:
                d, _ = splitk.decide(p, row["M"], row["N"], row["K"], row["fmt_a"], row["fmt_b"],
                                     row["out_dtype"], row["fast_accum"])
                assert (d.S, d.source) == (row["splits"], "table"), (name, row)
    replayed = 0
    for path, doc in hw.load_golden_files(str(repo / "test" / "data" / "hw_goldens")):
        for case in doc["cases"]:
            if case.get("replay", "required") != "required":
                continue
            expected, actual = hw.replay_case(case, device="cpu")
            assert_bitwise_equal(actual, expected, msg=f"{path}: {case['id']}")
            replayed += 1
    assert replayed >= 25


def test_rowwise_probes_reject_a_bias_added_after(tmp_path, monkeypatch):
    """The bias probes tell one rounding from two: a device that adds the bias after the
    rounded GEMM is rejected by rowwise_epilogue_order and rowwise_end_to_end."""
    ctx = probe_hopper.Ctx(argparse.Namespace(dry_run=True, quick=True, out=str(tmp_path),
                                              only="", vectors="", tag=""))
    real = probe_hopper._rw_scaled_mm

    def bias_after(ctx, a_u8, b_u8, fa, scale_a, scale_b, bias, out_dtype, fast):
        y = real(ctx, a_u8, b_u8, fa, scale_a, scale_b, None, torch.float32 if
                 scale_a.numel() == 1 else torch.bfloat16, fast)
        return (y.float() + (0 if bias is None else bias.float())).to(out_dtype)
    monkeypatch.setattr(probe_hopper, "_rw_scaled_mm", bias_after)
    assert probe_hopper.probe_rowwise_epilogue_order(ctx)["verdict"] == "rejected"
    assert probe_hopper.probe_rowwise_end_to_end(ctx)["verdict"] == "rejected"


# -- blockwise_cublaslt: torch's block-wise path (docs/semantics.md 8d, its probes) -----------------

def _blockwise_probe(tmp_path):
    """The probe alone, dry run: its entry of probes.json."""
    assert probe_hopper.main(["--out", str(tmp_path), "--dry-run", "--quick",
                              "--only", "blockwise_cublaslt"]) == 0
    (entry,) = json.loads((tmp_path / "probes.json").read_text())["probes"]
    return entry


def _f32_hex(x):
    return f"0x{hw.f32_bits(x):08x}"


def test_blockwise_probe_vectors_tell_the_hypotheses_apart(tmp_path):
    """The fixed vectors predict what docs/semantics.md 8d says each hypothesis gives, every rival of
    the model misses some element, and the observed bits are recorded."""
    entry = _blockwise_probe(tmp_path)
    assert entry["verdict"] == "confirmed", entry["result"].get("device")
    assert entry["matching_hypotheses"] == ["ffma/128"]
    r = entry["result"]
    pred = {v["label"]: v["predicted_f32"] for v in r["fixed_vectors"]}
    # item 1: one FFMA keeps 2^-36 (2^-35), FMUL + FADD gives +0, per element 2^-36 + 2^-46
    v1 = pred["sa=(-(1+2^-23), 1+2^-23), sb=1"]
    assert (v1["ffma/128"], v1["mul_add/128"]) == (_f32_hex(2.0 ** -36), "0x00000000")
    v2 = pred["sa=(-(1+2^-22), 1+2^-23), sb=(1, 1+2^-23)"]
    assert (v2["ffma/128"], v2["per_elem/128"], v2["mul_add/128"]) == (
        _f32_hex(2.0 ** -35), _f32_hex(2.0 ** -36 + 2.0 ** -46), "0x00000000")
    # item 2: fp32(sa*sb) * 3 = 3 + 3*2^-22 exactly; fp32(3*sa) rounds the tie to even first
    p3 = pred["sa=sb=1+2^-23, p=3"]
    assert (p3["ffma/128"], p3["per_elem/128"]) == (_f32_hex(3 + 3 * 2.0 ** -22),
                                                    _f32_hex(3 + 4 * 2.0 ** -22))
    # item 3: 1024 + 3 * 8 with a chain per 128 k, 3 * 2 more with one per 32 k, 1024 in one chain
    pi = pred["2^10 + 511 * 0.0625, unit scales"]
    assert [pi[h] for h in ("ffma/128", "ffma/32", "ffma/fast")] == [
        _f32_hex(1048.0), _f32_hex(1054.0), _f32_hex(1024.0)]
    # item 4: the ascending fold cancels to +0, a 2-way split keeps 16; the order of groups
    c = pred["+2^25, 30 x 1, -2^25"]
    assert (c["ffma/128"], c["ffma/128/split2"]) == ("0x00000000", _f32_hex(16.0))
    d = pred["3 first, then +2^25, -2^25 in the last group"]
    assert (d["ffma/128"], d["ffma/128/descending"]) == (_f32_hex(4.0), _f32_hex(3.0))
    # item 5: an all-zero A with a negative scale product: +0 from FFMA or FADD, -0 from a bare FMUL
    z = pred["A = +0, sa=(-1.5, -0.75), sb=1"]
    assert z["ffma/128"] == z["mul_add/128"] == z["per_elem/128"] == "0x00000000"
    assert z["ffma/128/first-fmul"] == "0x80000000"
    # scored on both outputs, every hypothesis on some element, each rival missing one
    n = r["elements_per_output"]
    assert n >= 100 and set(r["matches"]) == {"float32", "bfloat16"}
    for h in probe_hopper.BW_HYPOTHESES:
        got = [r["matches"][o][h] for o in ("float32", "bfloat16")]
        assert all(g["applicable"] > 0 for g in got), h
        assert (h == "ffma/128") == all(g["matches"] == g["applicable"] for g in got), h
    assert sum(len(c["observed_bits"]["bfloat16"]) for c in r["cases"]) == n
    assert all(len(b) == 10 for c in r["cases"] for b in c["observed_bits"]["float32"])


@pytest.mark.parametrize("update", ["mul_add", "per_elem"])
def test_blockwise_probe_rejects_another_update(tmp_path, monkeypatch, update):
    """Negative control: a device that rounds the update another way is rejected, and only
    that update (promoted every 128 k) matches everything."""
    monkeypatch.setattr(probe_hopper, "_bw_run", lambda ctx, case, out_dtype:
                        probe_hopper._bw_exact_device(case, out_dtype, update=update))
    entry = _blockwise_probe(tmp_path)
    assert entry["verdict"] == "rejected"
    assert entry["matching_hypotheses"] == [f"{update}/128"]


def test_blockwise_probe_uses_torchs_v2_scale_layouts():
    """docs/semantics.md 8d: scale_a [M, L] strides (1, M); scale_b [round_up(L, 4), ceil(N/128)]
    strides (1, round_up(L, 4)), the padding rows unused."""
    M, K, N = 16, 384, 256                     # L = 3: padded to 4
    sa = np.arange(M * 3, dtype=np.float32).reshape(M, 3) + 1
    sb = np.array([[10, 20, 30], [40, 50, 60]], np.float32)
    scale_a, scale_b = probe_hopper.blockwise_v2_scales(sa, sb, M, K, N)
    assert scale_a.shape == (M, 3) and scale_a.stride() == (1, M)
    assert scale_b.shape == (4, 2) and scale_b.stride() == (1, 4)
    assert torch.equal(scale_a, torch.from_numpy(sa))
    assert torch.equal(scale_b[:3], torch.from_numpy(sb).t()) and not scale_b[3].any()


def test_blockwise_probe_skips_with_a_reason(tmp_path, monkeypatch):
    """On hardware it cannot use (here: no GPU, or a torch without F.scaled_mm) the probe says
    why instead of failing."""
    ctx = probe_hopper.Ctx(argparse.Namespace(dry_run=True, quick=True, out=str(tmp_path),
                                              only="", vectors="", tag=""))
    ctx.dry = False
    got = probe_hopper.probe_blockwise_cublaslt(ctx)
    if not torch.cuda.is_available():
        assert got["verdict"] == "skipped" and "no CUDA device" in got["result"]["reason"]
    monkeypatch.delattr(torch.nn.functional, "scaled_mm")
    got = probe_hopper.probe_blockwise_cublaslt(ctx)
    assert got["verdict"] == "skipped" and "scaled_mm" in got["result"]["reason"]


def test_blockwise_probe_dry_run_without_mmaemus_blockwise_path(tmp_path, monkeypatch):
    """Where mmaemu.scaled_mm has no blockwise=, the dry run stands in the exact model's
    ffma/128 and records why the mmaemu comparison did not run."""
    def no_blockwise(case, out_dtype):
        raise TypeError("scaled_mm() got an unexpected keyword argument 'blockwise'")
    monkeypatch.setattr(probe_hopper, "_bw_mmaemu", no_blockwise)
    entry = _blockwise_probe(tmp_path)
    assert entry["verdict"] == "confirmed" and entry["matching_hypotheses"] == ["ffma/128"]
    assert "exactmodel ffma/128" in entry["result"]["device"]
    assert "blockwise" in entry["result"]["mmaemu_cublaslt"]["skipped"]


@pytest.mark.parametrize("name, sm, stem", [
    ("NVIDIA H200", 132, "h200"), ("NVIDIA H100 80GB HBM3", 132, "h100-sxm"),
    ("NVIDIA H100 PCIe", 114, "h100-pcie"), ("NVIDIA H100 NVL", 132, "h100-nvl"),
    ("NVIDIA GH200 480GB", 132, "gh200"), ("NVIDIA H100", 120, "h100-120sm")])
def test_a_runs_names_follow_its_gpu(name, sm, stem):
    assert hw.gpu_stem(name, sm) == stem


def test_ingest_names_the_profiles_after_the_gpu_it_ran_on(tmp_path, monkeypatch, capsys):
    """An H100 SXM's decisions are neither an H200's nor the H100 PCIe's: its run becomes the
    profiles h100-sxm, h100-sxm-te and h100-sxm-ws0, never h200."""
    run = _synthetic_run(tmp_path / "w", gpu="NVIDIA H100 80GB HBM3")
    out = _pack(run, tmp_path / "out")
    repo = _scratch_repo(tmp_path / "repo")
    assert ingest_h200.main([str(out), "--repo", str(repo)]) == 0
    names = [p["name"] for p in json.loads((repo / "tables" / "profiles.json").read_text())["profiles"]]
    assert {"h100-sxm", "h100-sxm-te", "h100-sxm-ws0"} <= set(names)
    assert not any(n.startswith("h200") for n in names)
    assert "get_profile('h100-sxm')" in capsys.readouterr().out
