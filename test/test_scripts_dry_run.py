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
sys.path.insert(0, SCRIPTS)

from mmaemu import _cublaslt  # noqa: E402
import _exactmodel as xm  # noqa: E402
import _hwcommon as hw  # noqa: E402
import probe_hopper  # noqa: E402
import record_goldens  # noqa: E402
import record_heuristics  # noqa: E402
from mmaemu.testing import assert_bitwise_equal  # noqa: E402


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
    """The probes' independent Python model and mmaemu's C model agree (chains, promotion)."""
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
                m = xm.dot(A[i], B[j], "e4m3", "e4m3", fast)
                assert xm.f32_bits(m) == xm.f32_bits(y[i, j].item()), (fast, i, j)


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
    import _rawmma
    src = _rawmma.kernel_source()
    for fa, fb in _rawmma.PAIRS:
        assert f"wgmma_{fa}_{fb}(" in src and f"mma_{fa}_{fb}(" in src
        assert f"m64n8k32.f32.{fa}.{fb}" in src and f"m16n8k32.row.col.f32.{fa}.{fb}.f32" in src


def test_h200_script_is_valid_bash():
    subprocess.run(["bash", "-n", os.path.join(SCRIPTS, "h200_ground_truth.sh")], check=True)


@pytest.mark.skipif(os.environ.get("MMAEMU_SLOW_TESTS") != "1", reason="rehearsal of the whole GPU run "
                    "(about a minute on 2 cores): set MMAEMU_SLOW_TESTS=1")
def test_h200_script_rehearsal(tmp_path):
    env = dict(os.environ, DRY_RUN="1", QUICK="1", OUT=str(tmp_path / "out"), WORK=str(tmp_path / "w"),
               HEUR_BUDGET_S="5", PYTHON=sys.executable)
    r = subprocess.run(["bash", os.path.join(SCRIPTS, "h200_ground_truth.sh")], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "out" / "ground_truth.tar.gz").exists()
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "P0" in summary and "table heur_dryrun" in summary and "goldens h200_torch.json" in summary
    assert "Traceback" not in summary
