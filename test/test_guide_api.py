"""The user guide's API, one test per row of its tables (sections 3, 4, 5, 6, 9, 10)."""
import os
import subprocess
import sys
import warnings

import pytest
import torch

import mmaemu
from mmaemu.planning import splitk as splitk_mod

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2


def operands(M, N, K, seed=0, fa=E4M3, fb=E4M3):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(M, K, generator=g) * 4).to(fa)
    w = (torch.randn(N, K, generator=g) * 4).to(fb)
    return x, w


ONE = torch.tensor(1.0)


# ---- section 3: a first GEMM -------------------------------------------------------------------

def guide_example():
    torch.manual_seed(0)
    x = (torch.randn(64, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(5760, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    return x, w, torch.tensor(1 / 64), torch.tensor(1 / 32)


def test_guide_section3_example_runs_and_explain_shows_the_table_row():
    x, w, sx, sw = guide_example()
    plan = mmaemu.explain(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True)
    assert plan.validation == "ok" and plan.profile == "hopper" and plan.preset == "hopper"
    assert plan.preset_maturity == "validated"
    s = plan.split
    assert (s.S, s.scheme, s.source, s.verified, s.table_id) == (1, "none", "table", True,
                                                                 "heur_h100pcie_lt12.8.3.14")
    assert s.note == "table row: algo 66, tile 134, numSplitsK 1, customOption 0"
    assert plan.fallbacks == ["cuda: tensors on cpu"] and plan.warnings == []
    text = repr(plan)
    assert text.startswith("CallPlan(validation='ok', profile='hopper', preset='hopper', "
                           "preset_maturity='validated',\n  split=SplitDecision(S=1, scheme='none', "
                           "source='table', verified=True, table_id='heur_h100pcie_lt12.8.3.14',")
    # Only the first rows are computed here (the whole GEMM is the CI example's job); padding
    # rows never change other rows, so the same split (S = 1) gives the same bits.
    y = mmaemu.scaled_mm(x[:4], w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True,
                         splitk=1)
    ref = mmaemu.scaled_mm(x[:4], w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True,
                           splitk=1, backend="reference")
    mmaemu.testing.assert_bitwise_equal(y, ref)
    assert y.dtype == torch.bfloat16 and y.shape == (4, 5760)


def test_defaults_follow_torch_out_dtype_is_input_dtype_and_no_fast_accum():
    x, w = operands(16, 16, 64)
    y = mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=1)
    assert y.dtype == E4M3
    slow = mmaemu.scaled_mm(x, w.t(), ONE, ONE, use_fast_accum=False, splitk=1)
    mmaemu.testing.assert_bitwise_equal(y, slow)


def test_accumulate_takes_rows_and_has_no_default_for_fast_accum():
    x, w = operands(16, 32, 256)
    with pytest.raises(TypeError):
        mmaemu.accumulate(x, w)  # use_fast_accum is required
    acc = mmaemu.accumulate(x, w, use_fast_accum=True, splitk=1)
    y = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True, splitk=1)
    mmaemu.testing.assert_bitwise_equal(acc, y)  # scales of 1 leave the accumulator unchanged


def test_cli_explain_prints_the_guide_plan():
    r = subprocess.run([sys.executable, "-m", "mmaemu", "explain", "64", "5760", "1920", "--out",
                        "bf16", "--fast"], capture_output=True, text=True, check=True)
    assert "source='table'" in r.stdout and "heur_h100pcie_lt12.8.3.14" in r.stdout
    assert "algo 66, tile 134" in r.stdout


# ---- section 4: profiles -----------------------------------------------------------------------

PROFILE_ROWS = [
    ("hopper", "NVIDIA H100 PCIe", 114, 1 << 20, "hopper", "table"),
    ("hopper-te", "NVIDIA H100 PCIe", 114, 32 << 20, "hopper", "table"),
    ("hopper-ws0", "NVIDIA H100 PCIe", 114, 0, "hopper", "never"),
    ("ada", "NVIDIA GeForce RTX 4060", 24, 1 << 20, "ada", "table"),
    ("ada-te", "NVIDIA GeForce RTX 4060", 24, 4 << 20, "ada", "table"),
    ("ada-ws0", "NVIDIA GeForce RTX 4060", 24, 0, "ada", "never"),
]


@pytest.mark.parametrize("name,gpu,sms,ws,preset,rule", PROFILE_ROWS)
def test_profile_rows(name, gpu, sms, ws, preset, rule):
    p = mmaemu.get_profile(name)
    assert (p.gpu, p.sm_count, p.workspace_bytes, p.preset, p.split_rule) == (gpu, sms, ws, preset, rule)
    assert p.cublaslt_version == "12.8.3.14" and not p.experimental
    assert p.matches_device() is False  # no GPU here
    x, w = operands(16, 32, 64)
    scheme = p.split_schemes[0]
    y = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, profile=name, splitk=1)
    ref = torch.ops.mmaemu.scaled_mm(x, w.t(), ONE, ONE, None, None, torch.float32, False, preset,
                                     1, "none", "reference", 0)
    mmaemu.testing.assert_bitwise_equal(y, ref)
    assert scheme in (("contiguous",) if preset == "hopper" else ("serial", "pairwise"))


def test_hopper_is_the_default_and_MMAEMU_PROFILE_changes_it(monkeypatch):
    assert mmaemu.get_profile().name == "hopper"
    monkeypatch.setenv("MMAEMU_PROFILE", "ada")
    assert mmaemu.get_profile().name == "ada"
    x, w = operands(16, 16, 256, seed=3)
    y = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True, splitk=1)
    ada = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True,
                           splitk=1, profile="ada")
    mmaemu.testing.assert_bitwise_equal(y, ada)


@pytest.mark.parametrize("name,preset", [("hopper-experimental", "hopper"),
                                         ("b200-mma-sync-experimental", "b200")])
def test_experimental_profiles_warn_and_have_no_table(name, preset):
    p = mmaemu.get_profile(name)
    assert p.experimental and p.splitk_table is None and p.preset == preset
    x, w = operands(16, 16, 64)
    with pytest.warns(mmaemu.ExperimentalPresetWarning):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, profile=name)
    plan = mmaemu.explain(x, w.t(), ONE, ONE, out_dtype=torch.float32, profile=name)
    assert plan.split.source == "instruction" and plan.split.S == 1


def test_unknown_profile_is_a_KeyError():
    x, w = operands(16, 16, 64)
    with pytest.raises(KeyError, match="unknown profile"):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, profile="h100-sxm", splitk=1)
    with pytest.raises(TypeError):
        mmaemu.get_profile(3)


# ---- section 5: split-K decisions --------------------------------------------------------------

def test_explicit_splitk_1():
    x, w = operands(16, 16, 512)
    plan = mmaemu.explain(x, w.t(), ONE, ONE, splitk=1)
    assert (plan.split.S, plan.split.source, plan.split.verified) == (1, "explicit", True)


def test_explicit_split_hopper_contiguous_warns_unverified_and_changes_bits():
    x, w = operands(16, 16, 512, seed=5)
    with pytest.warns(mmaemu.UnverifiedSplitWarning):
        y4 = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True,
                              splitk=(4, "contiguous"))
    ref = torch.ops.mmaemu.scaled_mm(x, w.t(), ONE, ONE, None, None, torch.float32, True, "hopper",
                                     4, "contiguous", "reference", 0)
    mmaemu.testing.assert_bitwise_equal(y4, ref)
    y1 = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True, splitk=1)
    assert not torch.equal(mmaemu.testing.bits(y1), mmaemu.testing.bits(y4))


@pytest.mark.parametrize("scheme", ["serial", "pairwise"])
def test_explicit_split_ada_schemes(scheme):
    x, w = operands(16, 16, 640, seed=6)
    with pytest.warns(mmaemu.UnverifiedSplitWarning):
        plan = mmaemu.explain(x, w.t(), ONE, ONE, profile="ada", splitk=(6, scheme))
        y = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, profile="ada",
                             splitk=(6, scheme))
    assert (plan.split.S, plan.split.scheme, plan.split.verified) == (6, scheme, False)
    ref = torch.ops.mmaemu.scaled_mm(x, w.t(), ONE, ONE, None, None, torch.float32, False, "ada",
                                     6, scheme, "reference", 0)
    mmaemu.testing.assert_bitwise_equal(y, ref)


@pytest.mark.parametrize("profile,splitk,exc", [
    ("hopper", (2, "serial"), ValueError), ("ada", (2, "contiguous"), ValueError),
    ("hopper", 2, ValueError), ("hopper", "yes", ValueError), ("hopper", (0, "contiguous"), ValueError),
    ("hopper", (2,), TypeError), ("hopper", 2.0, TypeError), ("hopper", True, TypeError),
    ("hopper", ("2", "contiguous"), TypeError)])
def test_malformed_splitk(profile, splitk, exc):
    x, w = operands(16, 16, 256)
    with pytest.raises(exc):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, profile=profile, splitk=splitk)


def test_unknown_shape_raises_SplitKUnknownError_that_says_what_to_pass():
    x, w = operands(16, 16, 256)
    with pytest.raises(mmaemu.SplitKUnknownError) as e:
        mmaemu.scaled_mm(x, w.t(), ONE, ONE)
    msg = str(e.value)
    assert "splitk=1" in msg and "(S, 'contiguous')" in msg and "record_heuristics" in msg
    assert isinstance(e.value, LookupError) and isinstance(e.value, mmaemu.MmaemuError)


@pytest.mark.parametrize("name", ["hopper-ws0", "ada-ws0"])
def test_ws0_profiles_never_split(name):
    x, w = operands(48, 16, 4112)  # not a recorded shape: the rule decides
    plan = mmaemu.explain(x, w.t(), ONE, ONE, profile=name, use_fast_accum=True,
                          out_dtype=torch.bfloat16)
    assert (plan.split.S, plan.split.source, plan.split.verified) == (1, "rule", True)


@pytest.fixture
def synthetic_table():
    """A stand-in for a recorded table, registered under hopper's and hopper-te's ids."""
    saved = dict(splitk_mod._TABLES)

    def make(table_id, validated):
        return {"table_id": table_id, "provenance": {"gpu": "test", "source": "synthetic test data"},
                "rows": [{"M": 16, "N": 16, "K": 4096, "fmt_a": "e4m3", "fmt_b": "e4m3",
                          "out_dtype": "f32", "fast_accum": True, "splits": 4,
                          "scheme": "contiguous", "verified": False, "note": "synthetic row"}],
                "envelope": {"bounds": [{"K": 4096, "max_split_mn": 1024}], "validated": validated,
                             "note": "synthetic"}}
    splitk_mod.register_table(make("heur_h100pcie_lt12.8.3.14", True))
    splitk_mod.register_table(make("heur_h100pcie_lt12.8.3.14_ws32m", False))
    yield
    splitk_mod._TABLES.clear()
    splitk_mod._TABLES.update(saved)


def test_table_row_with_split(synthetic_table):
    x, w = operands(16, 16, 4096, seed=2)
    plan = mmaemu.explain(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True)
    assert (plan.split.S, plan.split.scheme, plan.split.source) == (4, "contiguous", "table")
    assert plan.warnings and plan.warnings[0].startswith("UnverifiedSplitWarning")
    with pytest.warns(mmaemu.UnverifiedSplitWarning):
        y = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True)
    ref = torch.ops.mmaemu.scaled_mm(x, w.t(), ONE, ONE, None, None, torch.float32, True, "hopper",
                                     4, "contiguous", "reference", 0)
    mmaemu.testing.assert_bitwise_equal(y, ref)


def test_table_row_without_an_algorithm_is_a_reference_rejection():
    """A recorded shape for which cuBLASLt offered no algorithm (splits null, as
    mmaemu_tools/record_heuristics.py writes it): the reference platform fails the call too."""
    saved = dict(splitk_mod._TABLES)
    splitk_mod.register_table({
        "table_id": "heur_h100pcie_lt12.8.3.14", "provenance": {"gpu": "test", "source": "synthetic"},
        "rows": [{"M": 16, "N": 16, "K": 64, "fmt_a": "e4m3", "fmt_b": "e4m3", "out_dtype": "f32",
                  "fast_accum": True, "splits": None, "scheme": None,
                  "note": "no algorithm offered (torch raises CUBLAS_STATUS_NOT_SUPPORTED)"}]})
    try:
        x, w = operands(16, 16, 64)
        with pytest.raises(mmaemu.ReferenceRejectsError, match="CUBLAS_STATUS_NOT_SUPPORTED"):
            mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.float32, use_fast_accum=True)
    finally:
        splitk_mod._TABLES.clear()
        splitk_mod._TABLES.update(saved)


def test_envelope_infers_S1_above_the_bound(synthetic_table):
    x, w = operands(48, 32, 4096)  # M*N = 1536 > 1024
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = mmaemu.explain(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True)
    assert (plan.split.S, plan.split.source, plan.split.verified) == (1, "envelope", False)
    assert "inferred" in plan.split.note and "1536" in plan.split.note
    small_x, small_w = operands(16, 32, 4096)  # M*N = 512 <= 1024: could split
    with pytest.raises(mmaemu.SplitKUnknownError):
        mmaemu.scaled_mm(small_x, small_w.t(), ONE, ONE, out_dtype=torch.bfloat16)


def test_unvalidated_envelope_warns_on_hopper_te(synthetic_table):
    x, w = operands(48, 32, 4096)
    plan = mmaemu.explain(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, profile="hopper-te")
    assert plan.split.source == "envelope"
    assert plan.warnings[0].startswith("UnvalidatedEnvelopeWarning")
    with pytest.warns(mmaemu.UnvalidatedEnvelopeWarning):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, profile="hopper-te")
    assert issubclass(mmaemu.UnvalidatedEnvelopeWarning, mmaemu.UnverifiedSplitWarning)


def test_MMAEMU_SPLITK_STRICT_turns_inference_off(synthetic_table, monkeypatch):
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "1")
    x, w = operands(48, 32, 4096)
    with pytest.raises(mmaemu.SplitKUnknownError, match="MMAEMU_SPLITK_STRICT"):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16)


def test_corrupted_and_missing_table(monkeypatch, tmp_path):
    saved = dict(splitk_mod._TABLES)
    splitk_mod._TABLES.clear()
    try:
        (tmp_path / "splitk").mkdir()
        (tmp_path / "splitk" / "heur_h100pcie_lt12.8.3.14.json").write_text("{not json")
        monkeypatch.setattr(splitk_mod, "tables_dir", lambda: tmp_path)
        x, w = operands(16, 16, 64)
        with pytest.raises(mmaemu.SplitKUnknownError, match="corrupted"):
            mmaemu.scaled_mm(x, w.t(), ONE, ONE)
        with pytest.raises(mmaemu.SplitKUnknownError, match="missing"):
            mmaemu.scaled_mm(x, w.t(), ONE, ONE, profile="ada")
        # an explicit split needs no table: the process keeps working
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=1)
    finally:
        splitk_mod._TABLES.clear()
        splitk_mod._TABLES.update(saved)


# ---- section 6: backends -----------------------------------------------------------------------

def test_auto_on_cpu_tensors_is_the_cpu_backend():
    x, w = operands(16, 16, 64)
    plan = mmaemu.explain(x, w.t(), ONE, ONE, splitk=1)
    assert plan.backend.startswith("cpu:") and plan.fallbacks == ["cuda: tensors on cpu"]
    assert plan.backend_note.startswith("SIMD kernel ")


def test_reference_backend_row():
    x, w = operands(16, 16, 64)
    y = mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=1, backend="reference")
    mmaemu.testing.assert_bitwise_equal(y, mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=1))


@pytest.mark.parametrize("name", ["cuda", "cuda:v1", "cuda:v4", "cuda:v9", "cuda:tc3", "cuda:h1", "cuda:h4"])
def test_cuda_backend_rows_on_cpu_tensors(name):
    x, w = operands(16, 16, 64)
    # cuda:v9 and cuda:tc3 are not part of this build at all; the others cannot take CPU tensors
    with pytest.raises(mmaemu.BackendUnavailableError, match="CPU tensors|not part of this build"):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=1, backend=name)
    from mmaemu.runtime import diagnostics
    rows = {r["name"]: r for r in diagnostics.status()}
    assert name == "cuda" or (name in rows and rows[name]["reason"])


def test_unknown_backend_is_a_KeyError():
    x, w = operands(16, 16, 64)
    with pytest.raises(KeyError, match="unknown backend"):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=1, backend="tpu")


def test_flush_to_zero_is_refused():
    x, w = operands(16, 16, 64)
    torch.set_flush_denormal(True)
    try:
        if not mmaemu._C.cpu_flushes_denormals():
            pytest.skip("this CPU has no flush-to-zero mode")
        with pytest.raises(mmaemu.MmaemuError, match="flush"):
            mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=1)
        with pytest.raises(RuntimeError, match="flush"):  # the op itself refuses too
            torch.ops.mmaemu.scaled_mm(x, w.t(), ONE, ONE)
    finally:
        torch.set_flush_denormal(False)
    mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=1)


# ---- section 9: errors and warnings ------------------------------------------------------------

@pytest.mark.parametrize("cls,builtin", [
    (mmaemu.ReferenceRejectsError, RuntimeError), (mmaemu.UnsupportedFeatureError, NotImplementedError),
    (mmaemu.SplitKUnknownError, LookupError), (mmaemu.BackendUnavailableError, RuntimeError),
    (mmaemu.MmaemuError, RuntimeError)])
def test_exception_classes(cls, builtin):
    assert issubclass(cls, mmaemu.MmaemuError) and issubclass(cls, builtin)


@pytest.mark.parametrize("cls", [mmaemu.ExperimentalPresetWarning, mmaemu.UnverifiedSplitWarning,
                                 mmaemu.UnvalidatedEnvelopeWarning, mmaemu.BackendFallbackWarning])
def test_warning_classes(cls):
    assert issubclass(cls, Warning)


def test_reference_rejects_e5m2_times_e5m2():
    x, w = operands(16, 16, 64, fa=E5M2, fb=E5M2)
    with pytest.raises(mmaemu.ReferenceRejectsError, match="Float8_e5m2"):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=1)


def test_bias_computes_and_unmodelled_rowwise_is_unsupported():
    x, w = operands(16, 16, 64)
    y = mmaemu.scaled_mm(x, w.t(), ONE, ONE, bias=torch.zeros(16, dtype=torch.bfloat16),
                         out_dtype=torch.bfloat16, splitk=1)
    assert y.shape == (16, 16) and y.dtype == torch.bfloat16
    with pytest.raises(mmaemu.UnsupportedFeatureError):   # no GPU profile: no row-wise kernel
        mmaemu.scaled_mm(x, w.t(), torch.ones(16, 1), torch.ones(1, 16),
                         out_dtype=torch.bfloat16, profile="hopper-experimental")


# ---- section 10: environment variables ---------------------------------------------------------

def test_MMAEMU_BACKEND(monkeypatch):
    x, w = operands(16, 16, 64)
    monkeypatch.setenv("MMAEMU_BACKEND", "reference")
    assert mmaemu.explain(x, w.t(), ONE, ONE, splitk=1).backend == "reference"
    monkeypatch.setenv("MMAEMU_BACKEND", "cuda:h4")
    with pytest.raises(mmaemu.BackendUnavailableError):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=1)
    # an explicit argument wins over the variable
    assert mmaemu.explain(x, w.t(), ONE, ONE, splitk=1, backend="cpu").backend.startswith("cpu:")


def test_MMAEMU_DISABLE_CUDA_in_info():
    env = dict(os.environ, MMAEMU_DISABLE_CUDA="1")
    r = subprocess.run([sys.executable, "-m", "mmaemu", "info"], capture_output=True, text=True,
                       env=env, check=True)
    assert "disabled by MMAEMU_DISABLE_CUDA" in r.stdout


# ---- the CLI -----------------------------------------------------------------------------------

@pytest.mark.parametrize("cmd", ["info", "selftest", "explain"])
def test_cli_help(cmd):
    r = subprocess.run([sys.executable, "-m", "mmaemu", cmd, "--help"], capture_output=True,
                       text=True, check=True)
    assert "usage:" in r.stdout


def test_cli_info_lists_profiles_backends_presets():
    r = subprocess.run([sys.executable, "-m", "mmaemu", "info"], capture_output=True, text=True,
                       check=True)
    for word in ("hopper-te", "ada-ws0", "reference", "cuda:h4", "b200", "matches="):
        assert word in r.stdout


def test_cli_selftest_passes_on_cpu():
    r = subprocess.run([sys.executable, "-m", "mmaemu", "selftest"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checking the CPU backends" in r.stdout or "PASS" in r.stdout


def test_cli_explain_bad_profile_exits_2():
    r = subprocess.run([sys.executable, "-m", "mmaemu", "explain", "16", "16", "64", "--profile",
                        "nope"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown profile" in r.stderr


@pytest.mark.parametrize("argv, cls", [
    (["64", "5760", "17"], "ReferenceRejectsError"),          # K not a multiple of 16
    (["16", "24", "64"], "ReferenceRejectsError"),            # N not a multiple of 16
    (["-1", "16", "32"], "ValueError"),
    (["64", "64", "64", "--fmt-a", "e5m2", "--fmt-b", "e5m2"], "ReferenceRejectsError"),
    (["16", "16", "64", "--device", "zz"], "ValueError"),
])
def test_cli_explain_validates_as_the_api_and_exits_2(argv, cls):
    """The CLI runs the API's validation on meta tensors: the same class and message, one line."""
    r = subprocess.run([sys.executable, "-m", "mmaemu", "explain", *argv], capture_output=True,
                       text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {cls}: "), r.stderr
    if cls == "ReferenceRejectsError":
        M, N, K = (int(v) for v in argv[:3])
        fa = getattr(torch, "float8_e5m2" if "e5m2" in argv else "float8_e4m3fn")
        mat1 = torch.zeros(M, K, dtype=torch.float32).to(fa)
        mat2 = torch.zeros(N, K, dtype=torch.float32).to(fa).t()
        with pytest.raises(mmaemu.ReferenceRejectsError) as e:
            mmaemu.scaled_mm(mat1, mat2, torch.tensor(1.0), torch.tensor(1.0), splitk=1)
        assert lines[0] == f"error: {cls}: {e.value}"


def test_planning_never_asks_cublaslt_even_on_the_profiles_own_gpu(monkeypatch):
    """A shape missing from the table is decided by recorded facts only: on the profile's own GPU
    too (the guide's live query is a tool: mmaemu_tools/record_heuristics.py adds rows)."""
    from mmaemu.planning.profiles import Profile
    monkeypatch.setattr(Profile, "matches_device", lambda self, device=None: True)
    x, w = operands(16, 16, 1024)
    with pytest.raises(mmaemu.SplitKUnknownError):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True)
    import sys
    assert not any("cublaslt" in name for name in sys.modules if name.startswith("mmaemu."))


def test_executor_names_are_backend_requests():
    """A plan's executor (cpu:<simd>, cuda:reference) can be asked for by name: the SIMD kernel
    named runs, one this CPU lacks is refused, cuda:reference is refused on CPU tensors."""
    from mmaemu import _C
    x = torch.zeros(16, 32, dtype=torch.float8_e4m3fn)
    for k in _C.cpu_simd_kernels():
        name = f"cpu:{k['name']}"
        if k["available"]:
            plan = mmaemu.explain(x, x.t(), ONE, ONE, out_dtype=torch.float32, splitk=1,
                                  backend=name)
            assert plan.backend == name, plan
            mmaemu.scaled_mm(x, x.t(), ONE, ONE, out_dtype=torch.float32, splitk=1, backend=name)
        else:
            with pytest.raises(mmaemu.BackendUnavailableError, match="this CPU has no"):
                mmaemu.scaled_mm(x, x.t(), ONE, ONE, splitk=1, backend=name)
    with pytest.raises(mmaemu.BackendUnavailableError, match="cannot run on CPU tensors"):
        mmaemu.scaled_mm(x, x.t(), ONE, ONE, splitk=1, backend="cuda:reference")


def test_explain_reports_a_bad_backend_before_the_split_decision():
    x = torch.zeros(16, 32, dtype=torch.float8_e4m3fn)
    plan = mmaemu.explain(x, x.t(), ONE, ONE, backend="bogus", splitk="bogus")
    assert plan.validation.startswith("KeyError") and "unknown backend 'bogus'" in plan.validation
    plan = mmaemu.explain(x, x.t(), ONE, ONE, splitk="bogus")
    assert plan.validation.startswith("ValueError: splitk must be")


def test_the_planning_op_refuses_bad_splitk_text_with_mmaemus_message():
    x = torch.zeros(16, 32, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="splitk must be"):
        torch.ops.mmaemu.profile_scaled_mm(x, x.t(), ONE, ONE, None, None, torch.float32, False,
                                           None, None, "bogus")
