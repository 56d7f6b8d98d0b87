"""Every RTX 4060 hardware recording of test/data/hw_mini/ replayed bit for bit.

1 898 recorded cases (torch 2.7.1, cuBLASLt 12.8.3.14; Apache-2.0 data of mmaemu 0.1.0, see
test/data/hw_mini/NOTICE): instruction-level mma.sync chains and whole torch._scaled_mm calls,
split and unsplit, fast and not, every output dtype, epilogue corner cases and the calls the
hardware refused. Each recorded output must match mmaemu's bits (or exception class) on every
backend and SIMD path; an output that needs something mmaemu refuses (or an input the
recording does not hold) is skipped with its reason, and the counts are printed.
"""

import numpy as np
import pytest
import torch

import hw_mini
import mmaemu
from test_cpu_backend import simd_path
from executors import named

# The reasons an output may be skipped for. Anything else is a failure of the replay itself.
# Every split plan the recordings use is computed (pairwise for every S): a refusal fails.
ALLOWED_SKIPS = ("autograd through the scales", "bias values not recorded",
                 "row-wise scale values not recorded", "computed by mmaemu; no hardware output")


def _paths():
    """The reference, and the cpu backend on every SIMD path this CPU runs (the AVX-512 kernel
    on other CPUs: test_cpu_backend.py runs it on emulated intrinsics against the reference)."""
    from mmaemu import _C
    return [("reference", None)] + [("cpu", p) for p in _C.cpu_simd_paths().split(",") if p]


@pytest.fixture(scope="module")
def all_checks():
    return hw_mini.checks()


def _report(label, res):
    print(f"\nhw_mini replay [{label}]: {res.line()}")
    for m in res.mismatched[:50]:
        print("  MISMATCH", m)


def _assert_clean(res):
    assert not res.mismatched, res.mismatched[:20]
    for reason in res.skipped:
        assert reason.startswith(ALLOWED_SKIPS), reason


def test_index_is_whole(all_checks):
    index = hw_mini.load_index()
    assert index["format"] == "mmaemu-hwmini/1"
    assert len(index["cases"]) == 1898
    kinds = {c["kind"] for c in index["cases"]}
    assert kinds == {"mma", "gemm", "gemm_call"}
    assert len(all_checks) > 10000


@pytest.mark.parametrize("backend,simd", _paths())
def test_every_recording_matches(all_checks, backend, simd):
    if simd is None:
        res = hw_mini.replay(all_checks, backend)
    else:
        with simd_path(simd):
            res = hw_mini.replay(all_checks, backend)
    _report(f"{backend} {simd or ''}".strip(), res)
    _assert_clean(res)
    assert res.matched > 10000


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_evo2_projections_match_on_ada_te(backend):
    checks = hw_mini.checks(lambda cid: cid.startswith("evo2."))
    assert len(checks) == 9 and all(c.profile == "ada-te" for c in checks)
    res = hw_mini.replay(checks, backend)
    _report(f"evo2 {backend}", res)
    assert res.matched == 9 and not res.mismatched and not res.skipped


def test_epilogue_zero_sign_reproducer():
    # a = 0, w[0,0] = 1, scale_a = -1: the accumulator is +0 and the hardware gives +0.
    a = torch.zeros(1, 32, dtype=torch.float8_e4m3fn)
    w = torch.zeros(16, 32, dtype=torch.float8_e4m3fn)
    w[0, 0] = 1
    y = mmaemu.scaled_mm(a, w.t(), torch.tensor(-1.0), torch.tensor(1.0), out_dtype=torch.float32,
                         use_fast_accum=True, profile="ada", splitk=1)
    assert mmaemu.testing.bits(y)[0, 0].item() == 0x00000000


def test_round_robin_split_reproducer():
    # 64-k tiles dealt round-robin: tiles 0 and 4 meet in slice 0, so -2^16 + 2^16 cancels
    # there and 2^-12 is lost; contiguous slices would keep it.
    a = torch.zeros(1, 320)
    a[0, 64], a[0, 128], a[0, 257] = -256, 256, 2 ** -6
    w = torch.zeros(16, 320)
    w[0, 0:257:64] = 256
    w[0, 1:258:64] = 2 ** -6
    a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    y = mmaemu.scaled_mm(a, w.t(), torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.float32,
                         use_fast_accum=True, profile="ada", splitk=(4, "serial"))
    assert mmaemu.testing.bits(y)[0, 0].item() == 0


@pytest.mark.parametrize("S", [2, 3, 5, 6, 7, 8, 17, 29, 64, 100])
def test_every_pairwise_S_computes_as_the_independent_model(S):
    """The pairwise rule holds for every S: the C model (reference and cpu backends, through
    mmaemu.accumulate and the op) and mmaemu_tools/exactmodel.py agree bit for bit, with K
    spanning every slice's tiles and a short last tile."""
    from mmaemu_tools import exactmodel as pm
    g = torch.Generator().manual_seed(S)
    K = 64 * S + 48
    a = torch.randint(0, 256, (2, K), generator=g, dtype=torch.uint8)
    w = torch.randint(0, 256, (16, K), generator=g, dtype=torch.uint8)
    a[(a & 0x7F) == 0x7F] = 0x3C   # no NaN codes: the sums stay finite and informative
    w[(w & 0x7F) == 0x7F] = 0x3C
    x, y = a.view(torch.float8_e4m3fn), w.view(torch.float8_e4m3fn)
    for fast in (True, False):
        want = np.array([[pm.f32_canonical(pm.accumulator(ra, rb, "e4m3", "e4m3", fast, "ada", S,
                                                          "pairwise"))
                          for rb in w[:3].tolist()] for ra in a.tolist()], np.int64)
        for backend in ("reference", "cpu"):
            with pytest.warns(mmaemu.UnverifiedSplitWarning):
                got = mmaemu.accumulate(x, y, use_fast_accum=fast, profile="ada",
                                        splitk=(S, "pairwise"), backend=backend)
            op = torch.ops.mmaemu.accumulate(x, y, fast, "ada", S, "pairwise", named(backend))
            for t in (got, op):
                bits = t[:, :3].contiguous().view(torch.int32).numpy().astype(np.int64) & 0xFFFFFFFF
                assert np.array_equal(bits, want), (S, fast, backend)


PM_OUT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float8_e4m3fn": "e4m3",
          "float8_e5m2": "e5m2"}


def test_python_model_agrees_with_the_hardware_on_split_recordings():
    """mmaemu_tools/exactmodel.py, written apart from the C model, against the hardware's bits:
    every recorded split-K GEMM output of at most 2^15 multiply-adds whose plan mmaemu computes
    (serial, and pairwise for the recorded orders), plus every unsplit one of that size."""
    from mmaemu_tools import exactmodel as pm
    index = hw_mini.load_index()
    shards = hw_mini.Shards(index)
    defaults = index["call_defaults"]
    compared = {"split": 0, "unsplit": 0}
    for case in index["cases"]:
        if case["kind"] != "gemm" or "outputs" not in case:
            continue
        a = shards.array(case["inputs"]["a"])
        b = shards.array(case["inputs"]["b"])
        if a.shape[0] * b.shape[0] * a.shape[1] > 1 << 15:
            continue
        for o in case["outputs"]:
            p = dict(case["params"])
            p.update(o["params"])
            S, scheme = p["splitk"]["S"], p["splitk"]["scheme"]
            kw = hw_mini._gemm_kwargs(p, defaults)
            sa = hw_mini._bits(kw["scale_a"].reshape(1))[0].item()
            sb = hw_mini._bits(kw["scale_b"].reshape(1))[0].item()
            sr = p.get("scale_result_bits")
            got = pm.scaled_mm(a.tolist(), b.tolist(), p["fmt_a"], p["fmt_b"], sa, sb,
                               PM_OUT[p["out_dtype"]], kw["fast"], "ada", S, scheme, sr)
            got = np.array(got, dtype=np.int64)
            if p.get("out_select") == "diagonal":
                got = np.diagonal(got)
            want = hw_mini._expected(shards, o["expect"]).astype(np.int64).reshape(got.shape)
            assert np.array_equal(got, want), (case["id"], o["name"])
            compared["split" if S > 1 else "unsplit"] += 1
    print(f"\nexactmodel vs RTX 4060: {compared} outputs, 0 mismatches")
    assert compared["split"] >= 100 and compared["unsplit"] >= 100
