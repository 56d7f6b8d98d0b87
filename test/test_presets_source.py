"""One source of the presets' arithmetic: csrc/kernels/mmaemu_presets.h, the header the ops
compute with. mmaemu.get_preset() reads it through mmaemu._C.preset, tables/presets.json holds
only names and provenance, and the independent Python model's copy (mmaemu_tools/exactmodel.py)
must equal it."""
import json
import os

import pytest

import mmaemu
from mmaemu_tools import exactmodel
from mmaemu import _C

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARITHMETIC = ("block", "frac", "keep", "promote_k", "c_late", "split_rr_tile")


def table():
    with open(os.path.join(ROOT, "tables", "presets.json")) as f:
        return json.load(f)["presets"]


def test_the_table_holds_no_arithmetic():
    for p in table():
        assert set(p) == {"name", "maturity", "evidence"}, p["name"]


def test_every_preset_of_the_table_is_one_of_the_headers():
    ids = sorted(_C.preset(p["name"])["id"] for p in table())
    assert ids == list(range(len(ids))) and len(ids) == 3
    with pytest.raises(KeyError, match="unknown preset 'nope'"):
        _C.preset("nope")


@pytest.mark.parametrize("name", ["hopper", "ada", "b200"])
def test_get_preset_and_the_python_model_equal_the_header(name):
    c = _C.preset(name)
    assert {k: getattr(mmaemu.get_preset(name), k) for k in ARITHMETIC} == {k: c[k] for k in ARITHMETIC}
    m = exactmodel.PRESETS[name]
    assert {k: int(getattr(m, k)) for k in ARITHMETIC} == {k: c[k] for k in ARITHMETIC}


def test_the_header_values_are_the_documented_ones():
    """docs/presets_profiles.md's table: block, grid bits, kept bits, promotion interval."""
    got = {n: tuple(_C.preset(n)[k] for k in ARITHMETIC) for n in ("hopper", "ada", "b200")}
    assert got == {"hopper": (32, 13, 14, 128, 0, 0), "ada": (16, 13, 14, 128, 0, 64),
                   "b200": (32, 25, 24, 128, 1, 0)}


def test_the_promotion_interval_is_whole_blocks():
    """promote_k is in k and ends on a block boundary: the named presets have it so, and a preset
    given as numbers (the loader's test entry point) is refused otherwise, by name."""
    for name in ("hopper", "ada", "b200"):
        p = _C.preset(name)
        assert p["promote_k"] >= p["block"] and p["promote_k"] % p["block"] == 0, name
    for bad in ((32, 13, 14, 100), (16, 13, 14, 0), (32, 13, 14, 16)):
        with pytest.raises(ValueError, match=r"promote_k \(\d+\) must be a positive multiple of block"):
            _C.cuda_run_plan("reference", 1, 1, 32, bad)
