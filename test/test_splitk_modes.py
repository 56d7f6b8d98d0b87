"""splitk="auto" (refuse rather than guess) and the opt-in splitk="infer", end to end.

The inference itself (its rules, notes and measured accuracy) is test/test_splitk_infer.py's;
here: that `auto` still takes every decision it took before `infer` existed, that `infer`
decides every shape of the coverage report on every profile, and that the argument reaches the
decision through every entry point: scaled_mm, accumulate, explain, the CLI, emulate(),
EmulatedFP8Linear, compiled code, and MMAEMU_SPLITK for unmodified code.
"""
import json
import subprocess
from collections import Counter
import sys
import warnings
from pathlib import Path

import pytest
import torch

import mmaemu
from mmaemu.errors import SplitKUnknownError
from mmaemu.planning.profiles import get_profile
from mmaemu.planning.splitk import decide
from mmaemu.testing import assert_bitwise_equal
from mmaemu_tools import splitk_coverage
from helpers import fp8_randn as _fp8

DATA = Path(__file__).resolve().parent / "data"
ONE = torch.tensor(1.0)
# 16 x 16 x 256: below every table's K range on the H100, so "auto" refuses it on hopper
UNKNOWN = dict(M=16, N=16, K=256, profile="hopper")


def _decide(profile, M, N, K, fast, splitk):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return decide(get_profile(profile), M, N, K, "e4m3", "e4m3", "bf16", fast, splitk)[0]


@pytest.fixture(scope="module")
def snapshot():
    with open(DATA / "splitk_auto_decisions.json") as f:
        return json.load(f)["rows"]


def test_auto_takes_every_decision_it_took_before_infer_existed(snapshot, monkeypatch):
    monkeypatch.delenv("MMAEMU_SPLITK", raising=False)
    assert len(snapshot) == 1920
    for profile, M, N, K, fast, S, scheme, source in snapshot:
        try:
            d = _decide(profile, M, N, K, fast, "auto")
            got = [d.S, d.scheme, d.source]
        except SplitKUnknownError:
            got = [None, "unknown", "unknown"]
        assert got == [S, scheme, source], (profile, M, N, K, fast)


def test_infer_decides_every_coverage_shape_and_agrees_with_auto_where_auto_decides(snapshot):
    inferred = 0
    for profile, M, N, K, fast, S, scheme, source in snapshot:
        d = _decide(profile, M, N, K, fast, "infer")
        assert d.S is not None and d.S >= 1, (profile, M, N, K, fast)
        assert d.scheme == "none" if d.S == 1 else d.scheme in get_profile(profile).split_schemes
        if source == "unknown":
            assert (d.source, d.verified) == ("inferred", False)
            assert d.note.startswith("inferred") and any(ch.isdigit() for ch in d.note)
            inferred += 1
        else:
            assert [d.S, d.scheme, d.source] == [S, scheme, source]
    assert inferred == sum(r[-1] == "unknown" for r in snapshot) > 500


def test_coverage_report_counts_match_the_decisions(snapshot):
    counts = splitk_coverage.coverage("auto", profiles=["hopper"])
    source = {(r[1], r[2], r[3], r[4]): r[-1] for r in snapshot if r[0] == "hopper"}
    for model, shapes in splitk_coverage.MODELS:
        want = Counter(source[(M, N, K, fast)] for N, K in shapes
                       for M in splitk_coverage.BATCHES for fast in (True, False))
        assert counts[("hopper", model)] == want, model
    infer = splitk_coverage.coverage("infer", profiles=["hopper", "ada"])
    assert all(c["unknown"] == 0 for c in infer.values())
    assert "| `hopper` |" in splitk_coverage.table(counts, profiles=["hopper"])


def test_infer_warns_and_labels_its_decision():
    d, warns = decide(get_profile("hopper"), 16, 16, 256, "e4m3", "e4m3", "bf16", True, "infer")
    assert d.source == "inferred" and d.table_id == "heur_h100pcie_lt12.8.3.14"
    assert [w[0] for w in warns] == ["UnverifiedSplitWarning"]
    assert "inferred, not recorded" in warns[0][1] and d.note in warns[0][1]


def test_scaled_mm_and_accumulate_with_infer_compute_the_inferred_split():
    x, w = _fp8((16, 256), 1), _fp8((16, 256), 2)
    with pytest.raises(SplitKUnknownError, match="splitk='infer'"):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True)
    d = _decide("hopper", 16, 16, 256, True, "infer")
    explicit = 1 if d.S == 1 else (d.S, d.scheme)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True,
                                splitk=explicit)
    with pytest.warns(mmaemu.UnverifiedSplitWarning):
        got = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True,
                               splitk="infer")
    assert_bitwise_equal(got, want)
    with pytest.warns(mmaemu.UnverifiedSplitWarning):
        acc = mmaemu.accumulate(x, w, use_fast_accum=True, splitk="infer")
    assert acc.shape == (16, 16) and acc.dtype == torch.float32


def test_environment_variable_turns_auto_into_infer_for_unmodified_code(monkeypatch):
    x, w = _fp8((16, 256), 3), _fp8((16, 256), 4)
    monkeypatch.setenv("MMAEMU_SPLITK", "infer")
    with pytest.warns(mmaemu.UnverifiedSplitWarning):
        y = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True)
    assert y.shape == (16, 16)
    assert mmaemu.explain(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16,
                          use_fast_accum=True).split.source == "inferred"
    # an explicit split is the caller's, whatever the variable says
    assert _decide("hopper", 16, 16, 256, True, 1).source == "explicit"
    monkeypatch.setenv("MMAEMU_SPLITK", "maybe")
    with pytest.raises(ValueError, match="MMAEMU_SPLITK"):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True)


@pytest.mark.parametrize("value,strict", [("1", True), ("true", True), ("YES", True), ("0", False),
                                          ("false", False)])
def test_strict_accepts_the_usual_spellings(monkeypatch, value, strict):
    # 64 x 5760 x 5000 (hopper, bf16, fast) is decided by the envelope unless strict
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", value)
    if strict:
        with pytest.raises(SplitKUnknownError, match="MMAEMU_SPLITK_STRICT"):
            _decide("hopper", 4096, 5760, 5000, True, "auto")
        assert _decide("hopper", 4096, 5760, 5000, True, "infer").source == "inferred"
    else:
        assert _decide("hopper", 4096, 5760, 5000, True, "auto").source == "envelope"


def test_strict_refuses_a_value_it_does_not_know(monkeypatch):
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "sure")
    with pytest.raises(ValueError, match="MMAEMU_SPLITK_STRICT"):
        _decide("hopper", 4096, 5760, 5000, True, "auto")


def test_explain_of_an_unknown_shape_shows_what_infer_would_decide():
    x, w = _fp8((16, 256), 5), _fp8((16, 256), 6)
    plan = mmaemu.explain(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True)
    assert plan.split.S is None and plan.warnings[0].startswith("SplitKUnknownError")
    assert plan.inferred is not None and plan.inferred.source == "inferred"
    assert "inferred=SplitDecision(" in repr(plan)
    chosen = mmaemu.explain(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True,
                            splitk="infer")
    assert chosen.warnings[0].startswith("UnverifiedSplitWarning")
    assert chosen.split == plan.inferred and chosen.inferred is None


def test_cli_explain_with_infer_and_a_bad_splitk():
    run = [sys.executable, "-m", "mmaemu", "explain", "16", "16", "256", "--out", "bf16", "--fast"]
    out = subprocess.run(run + ["--splitk", "infer"], capture_output=True, text=True)
    assert out.returncode == 0 and "source='inferred'" in out.stdout
    out = subprocess.run(run, capture_output=True, text=True)
    assert out.returncode == 0 and "source='unknown'" in out.stdout and "inferred=" in out.stdout
    out = subprocess.run(run + ["--splitk", "abc"], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("error: ValueError: --splitk 'abc'")


def test_emulate_and_the_linear_layer_take_infer():
    x, w = _fp8((16, 256), 7), _fp8((16, 256), 8)
    with pytest.warns(mmaemu.UnverifiedSplitWarning):
        want = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True,
                                splitk="infer")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.inference_mode(), mmaemu.emulate(splitk="infer"):
            got = torch._scaled_mm(x, w.t(), scale_a=ONE, scale_b=ONE, out_dtype=torch.bfloat16,
                                   use_fast_accum=True)
        assert_bitwise_equal(got, want)
        lin = mmaemu.nn.EmulatedFP8Linear(w.float(), 1.0, 1.0, splitk="infer", profile="hopper")
        with torch.inference_mode():
            y = lin(x.float())               # scale 1: the layer's E4M3 codes are x's and w's
    assert_bitwise_equal(y, want)


def test_compiled_code_plans_infer_when_it_runs():
    x, w = _fp8((16, 256), 9), _fp8((16, 256), 10)

    def f(a, b):
        return mmaemu.scaled_mm(a, b.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True,
                                splitk="infer")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = f(x, w)
        got = torch.compile(f, backend="eager", fullgraph=True)(x, w)
    assert_bitwise_equal(got, want)


@pytest.mark.parametrize("bad,match", [(0, r"may only be 1 \(no split\); give a split as \(S, scheme\) with S >= 2"),
                                       ("sometimes", "'auto', 'infer', 1 or"),
                                       ((1921, "contiguous"), "more slices than K = 1920")])
def test_splitk_argument_errors_say_what_is_accepted(bad, match):
    x, w = _fp8((64, 1920), 11), _fp8((64, 1920), 12)
    with pytest.raises(ValueError, match=match):
        mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True,
                         splitk=bad)


def test_one_with_scheme_none_is_no_split():
    x, w = _fp8((64, 1920), 13), _fp8((64, 1920), 14)
    y1 = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, splitk=1)
    yn = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out_dtype=torch.bfloat16, splitk=(1, "none"))
    assert_bitwise_equal(yn, y1)
