"""The recorded split-K tables of the six profiles (user guide sections 3, 5, 7; docs/splitk_tables.md).

Rows replay through the decision function explain() uses (mmaemu.planning.splitk.decide); the envelope
never contradicts a row; provenance and the vendored data's sha256 agree; the guide's examples
run with splitk="auto".
"""
import hashlib
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import mmaemu
from mmaemu.planning import splitk as splitk_mod
from mmaemu.__main__ import main as cli
from mmaemu.planning.profiles import get_profile, tables_dir

ROOT = Path(__file__).resolve().parent.parent
SPLITK = tables_dir() / "splitk"
TABLED = ["hopper", "hopper-te", "hopper-ws0", "ada", "ada-te", "ada-ws0"]
OUT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16",
       "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
E4M3 = torch.float8_e4m3fn
ONE = torch.tensor(1.0)


def table_doc(profile):
    return json.loads((SPLITK / f"{get_profile(profile).splitk_table}.json").read_text())


def columns(profile):
    """The profile's rows straight from the vendored npz and its metadata (not via mmaemu)."""
    doc = table_doc(profile)
    meta = json.loads((SPLITK / doc["data"]["npz"].replace(".npz", ".meta.json")).read_text())
    z = np.load(SPLITK / doc["data"]["npz"])
    sel = z["ws"] == meta["codes"]["ws"].index(doc["provenance"]["workspace_bytes"])
    return {c: z[c][sel] for c in z.files}, meta["codes"]


# ---- provenance and data -----------------------------------------------------------------------

@pytest.mark.parametrize("profile", TABLED)
def test_table_provenance_and_sha256(profile):
    p, doc = get_profile(profile), table_doc(profile)
    prov = doc["provenance"]
    assert prov["gpu"] == p.gpu and prov["sm_count"] == p.sm_count
    assert prov["workspace_bytes"] == p.workspace_bytes and prov["caller"] == p.caller
    assert prov["cublaslt_version"] == p.cublaslt_version == "12.8.3.14"
    assert prov["driver"] and prov["torch"].startswith("2.7.1") and "scaled_gemm" in prov["descriptor"]
    for f in prov["source_files"] + [doc["data"], doc["verified_combos"]]:
        path = SPLITK / f.get("path", f.get("npz"))
        assert hashlib.sha256(path.read_bytes()).hexdigest() == f["sha256"], path


def test_tables_are_what_the_build_script_makes_of_the_vendored_data():
    r = subprocess.run([sys.executable, "-m", "mmaemu_tools.build_splitk_tables", "--check"],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stdout + r.stderr


def test_vendored_data_carries_its_licence_and_notice():
    vendor = SPLITK / "mmaemu-0.1.0"
    assert "Apache License" in (vendor / "LICENSE").read_text()
    assert "Xun Ding" in (vendor / "NOTICE").read_text()
    assert "mmaemu 0.1.0" in (ROOT / "NOTICE").read_text()


def test_corrupted_npz_is_a_SplitKUnknownError(tmp_path):
    doc = table_doc("hopper")
    bad = tmp_path / doc["data"]["npz"]
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not an npz")
    t = splitk_mod.SplitTable(doc, tmp_path)
    with pytest.raises(splitk_mod.TableDataError, match="corrupted"):
        t.row(64, 5760, 1920, "e4m3", "e4m3", "bf16", True)


# ---- every split row and a stratified sample replay through decide() ---------------------------

SAMPLE_PER_SETTING = 1500


@pytest.mark.parametrize("profile", TABLED)
def test_rows_replay_to_their_recorded_S_and_scheme(profile):
    cols, codes = columns(profile)
    split = np.nonzero(cols["splitK"] > 1)[0]
    rng = np.random.default_rng(12)
    setting = cols["fa"] * 64 + cols["fb"] * 16 + cols["out"] * 2 + cols["fast"]
    unsplit = []
    for s in np.unique(setting):      # stratified: every setting, its K and M spread sampled
        idx = np.nonzero((setting == s) & (cols["splitK"] == 1))[0]
        unsplit.append(rng.choice(idx, min(SAMPLE_PER_SETTING, idx.size), replace=False))
    rows = np.concatenate([split] + unsplit)
    p = get_profile(profile)
    fmt, scheme_of = codes["fa/fb"], codes["custom -> scheme"]
    t0 = time.perf_counter()
    bad = []
    for M, N, K, fa, fb, out, fast, S, custom in zip(*(cols[c][rows].tolist() for c in (
            "M", "N", "K", "fa", "fb", "out", "fast", "splitK", "custom"))):
        d, warns = splitk_mod.decide(p, M, N, K, fmt[str(fa)], fmt[str(fb)], OUT[codes["out"][str(out)]],
                                     bool(fast))
        scheme = scheme_of.get(str(custom), codes.get("custom -> scheme, unlisted"))
        want = (S, scheme if S > 1 else "none", "table", True)
        if (d.S, d.scheme, d.source, d.verified) != want or warns:
            bad.append((M, N, K, fa, fb, out, fast, S, custom, d))
    elapsed = time.perf_counter() - t0
    assert not bad, bad[:5]
    assert rows.size >= 20000 and split.size == int(table_doc(profile)["data"]["split_rows"])
    print(f"{profile}: {rows.size} rows ({split.size} split) in {elapsed:.1f} s")


def test_replayed_rows_number_at_least_100000_with_every_split_row():
    n = 0
    for profile in TABLED:
        cols, _ = columns(profile)
        setting = cols["fa"] * 64 + cols["fb"] * 16 + cols["out"] * 2 + cols["fast"]
        n += int((cols["splitK"] > 1).sum())
        for s in np.unique(setting):
            n += min(SAMPLE_PER_SETTING, int(((setting == s) & (cols["splitK"] == 1)).sum()))
    assert n >= 100000


# ---- the envelope never contradicts the table --------------------------------------------------

@pytest.mark.parametrize("profile", ["hopper", "hopper-te", "ada", "ada-te"])
def test_every_row_above_its_envelope_bound_is_unsplit(profile):
    cols, codes = columns(profile)
    table = splitk_mod.get_table(get_profile(profile).splitk_table)
    fmt = codes["fa/fb"]
    code = (((cols["fa"].astype(np.int64) * 2 + cols["fb"]) * 8 + cols["out"]) * 2
            + cols["fast"]) << 32 | cols["K"]
    uniq, inverse = np.unique(code, return_inverse=True)
    bounds = []
    for c in uniq.tolist():                # the loader's own bound() for each (setting, K)
        K, s = c & 0xFFFFFFFF, c >> 32
        fa, fb, out, fast = s >> 5, (s >> 4) & 1, (s >> 1) & 7, s & 1
        B, _ = table.bound(K, fmt[str(fa)], fmt[str(fb)], OUT[codes["out"][str(out)]], bool(fast))
        bounds.append(-1 if B is None else B)
    B = np.array(bounds)[inverse.ravel()]
    above = (B >= 0) & (cols["M"].astype(np.int64) * cols["N"] > B)
    assert above.sum() > 50000                   # the bound is not vacuous: it covers many rows
    assert int((cols["splitK"][above] > 1).sum()) == 0


def test_rtx4060_bound_is_twice_the_largest_split_MN_of_the_setting():
    cols, _ = columns("ada")
    sel = (cols["splitK"] > 1) & (cols["fa"] == 0) & (cols["fb"] == 0) & (cols["out"] == 1) \
        & (cols["fast"] == 1)
    largest = int((cols["M"][sel].astype(np.int64) * cols["N"][sel]).max())
    B, how = splitk_mod.get_table("heur_rtx4060_lt12.8.3.14").bound(999, "e4m3", "e4m3", "bf16", True)
    assert B == 2 * largest and str(largest) in how


def test_h100_bound_rounds_K_up_to_the_grid_and_stops_at_its_ends():
    t = splitk_mod.get_table("heur_h100pcie_lt12.8.3.14")
    grid = t.K_grid
    b_at_grid, _ = t.bound(grid[3], "e4m3", "e4m3", "bf16", True)
    b_between, how = t.bound(grid[2] + 16, "e4m3", "e4m3", "bf16", True)
    assert b_between == b_at_grid and f"grid K {grid[3]}" in how
    assert t.bound(t.K_min - 16, "e4m3", "e4m3", "bf16", True)[0] is None
    assert t.bound(t.K_max + 16, "e4m3", "e4m3", "bf16", True)[0] is None


# ---- off-table shapes: envelope, its warning, strict mode, unknown -----------------------------

def test_envelope_decides_large_off_table_shapes_and_says_which_bound():
    d, warns = splitk_mod.decide(get_profile("hopper"), 4096, 4096, 5000, "e4m3", "e4m3", "bf16", True)
    assert (d.S, d.source, warns) == (1, "envelope", [])
    assert "M*N = 16777216 > B = " in d.note and "grid K 5120" in d.note and "validated" in d.note
    d, warns = splitk_mod.decide(get_profile("ada-te"), 4096, 4096, 5000, "e4m3", "e4m3", "bf16", True)
    assert (d.S, d.source, warns) == (1, "envelope", []) and "the largest M*N that split" in d.note


def test_hopper_te_envelope_warns_unvalidated():
    d, warns = splitk_mod.decide(get_profile("hopper-te"), 4096, 4096, 5000, "e4m3", "e4m3", "bf16", True)
    assert d.source == "envelope" and [w[0] for w in warns] == ["UnvalidatedEnvelopeWarning"]


def test_strict_mode_and_shapes_within_the_bound_are_unknown(monkeypatch):
    hopper = get_profile("hopper")
    with pytest.raises(mmaemu.SplitKUnknownError, match=r"M\*N = 256 <= B = \d+"):
        splitk_mod.decide(hopper, 16, 16, 5000, "e4m3", "e4m3", "bf16", True)
    with pytest.raises(mmaemu.SplitKUnknownError, match="outside the envelope"):
        splitk_mod.decide(hopper, 4096, 4096, 512, "e4m3", "e4m3", "bf16", True)
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "1")
    with pytest.raises(mmaemu.SplitKUnknownError, match="MMAEMU_SPLITK_STRICT"):
        splitk_mod.decide(hopper, 4096, 4096, 5000, "e4m3", "e4m3", "bf16", True)
    # a recorded row still decides in strict mode
    assert splitk_mod.decide(hopper, 64, 5760, 1920, "e4m3", "e4m3", "bf16", True)[0].source == "table"


# ---- verified from the replay list -------------------------------------------------------------

def test_a_split_missing_from_the_replay_list_warns_unverified(tmp_path):
    doc = table_doc("ada")
    combos = json.loads((SPLITK / doc["verified_combos"]["path"]).read_text())
    d, _ = splitk_mod.decide(get_profile("ada"), 16, 64, 8192, "e4m3", "e4m3", "bf16", True)
    assert (d.S, d.source, d.verified) == (10, "table", True)
    combos["combos"] = [c for c in combos["combos"] if not (
        c["S"] == d.S and c["scheme"] == d.scheme and c["fast"] and c["fmt_pair"] == "e4m3xe4m3"
        and c["out"] == "bfloat16")]
    (tmp_path / "combos.json").write_text(json.dumps(combos))
    doc = dict(doc, verified_combos={"path": str(tmp_path / "combos.json")})
    t = splitk_mod.SplitTable(doc, SPLITK)
    row = t.row(16, 64, 8192, "e4m3", "e4m3", "bf16", True)
    assert (row["splits"], row["verified"]) == (10, False)
    assert t.replayed(10, "pairwise", "e4m3", "e4m3", "bf16", False)   # the other combos stay


# ---- the guide's examples with splitk="auto" ---------------------------------------------------

def test_guide_section3_accumulate_and_explain_without_splitk():
    torch.manual_seed(0)
    x = (torch.randn(64, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(5760, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc = mmaemu.accumulate(x, w, use_fast_accum=True)
        plan = mmaemu.explain(x, w.t(), torch.tensor(1 / 64), torch.tensor(1 / 32),
                              out_dtype=torch.bfloat16, use_fast_accum=True)
    assert acc.shape == (64, 5760) and acc.dtype == torch.float32
    # the vendored table's row is the guide's note, word for word
    assert plan.split.note == "table row: algo 66, tile 134, numSplitsK 1, customOption 0"
    assert (plan.split.S, plan.split.source, plan.split.table_id) == (1, "table", "heur_h100pcie_lt12.8.3.14")


class EmulatedFP8Linear(torch.nn.Module):
    """The guide's section 7 module, as printed."""

    def __init__(self, weight, scale_x, scale_w, profile="hopper-te"):
        super().__init__()
        self.scale_x, self.scale_w, self.profile = scale_x, scale_w, profile
        self.wq = (weight.detach().float() * scale_w).clamp(-448, 448).to(torch.float8_e4m3fn)

    def forward(self, x):
        xq = (x.float() * self.scale_x).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(-1, x.shape[-1])
        y = mmaemu.scaled_mm(xq, self.wq.t(), 1 / self.scale_x, 1 / self.scale_w,
                             out_dtype=torch.bfloat16, use_fast_accum=True, profile=self.profile)
        return y.reshape(*x.shape[:-1], -1)


@pytest.mark.parametrize("profile,batch,expect", [
    ("hopper-te", (2, 32), "table"),        # M = 64, N = 256, K = 1024: a recorded row
    ("hopper-te", (3, 37), "envelope"),     # M = 111 off the table: UnvalidatedEnvelopeWarning
    ("ada-te", (16, 500), "envelope")])     # M*N = 2,048,000 > B = 1,966,080
def test_guide_section7_module_runs_without_splitk(profile, batch, expect):
    g = torch.Generator().manual_seed(3)
    lin = EmulatedFP8Linear(torch.randn(256, 1024, generator=g), torch.tensor(8.0), torch.tensor(16.0),
                            profile=profile)
    x = torch.randn(*batch, 1024, generator=g)
    xq = torch.zeros(x.numel() // 1024, 1024, dtype=E4M3)   # explain reads only shapes and dtypes
    plan = mmaemu.explain(xq, lin.wq.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True,
                          profile=profile)
    assert plan.split.source == expect and plan.split.S == 1
    with torch.inference_mode(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = lin(x)
    assert y.shape == (*batch, 256) and y.dtype == torch.bfloat16 and torch.isfinite(y.float()).all()
    cats = [w.category for w in caught if issubclass(w.category, mmaemu.UnverifiedSplitWarning)]
    assert cats == ([mmaemu.UnvalidatedEnvelopeWarning] if (profile, expect) == ("hopper-te", "envelope")
                    else [])


def test_cli_explain_shows_table_envelope_and_unknown_with_the_bound(capsys):
    cli(["explain", "64", "5760", "1920", "--out", "bf16", "--fast"])
    assert "source='table'" in capsys.readouterr().out
    cli(["explain", "4096", "4096", "5008", "--out", "bf16", "--fast"])
    out = capsys.readouterr().out
    assert "source='envelope'" in out and "> B = " in out
    cli(["explain", "16", "16", "5008", "--out", "bf16", "--fast"])
    out = capsys.readouterr().out
    assert "source='unknown'" in out and "<= B = " in out


# ---- cost: lazy loading, microsecond lookups ---------------------------------------------------

def test_import_does_not_load_a_table():
    code = ("import sys, mmaemu; from mmaemu.planning import splitk; "
            "assert not splitk._TABLES, splitk._TABLES; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.stdout.strip() == "ok", r.stderr


def test_lookup_takes_microseconds():
    p = get_profile("hopper")
    splitk_mod.decide(p, 64, 5760, 1920, "e4m3", "e4m3", "bf16", True)   # loads the table
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        splitk_mod.decide(p, 64, 5760, 1920, "e4m3", "e4m3", "bf16", True)
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 200e-6, per_call    # measured about 5 us; generous for a loaded CI runner
