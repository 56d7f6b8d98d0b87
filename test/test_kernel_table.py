"""The CUDA kernel table exists once, in C (csrc/cuda_kernels.c), and Python's registry view
(mmaemu.backends.KERNELS) agrees with it; the policy of backends.py names only kernels the table
or the guide's not-built list has. No GPU needed."""
import glob
import os
import re

import pytest

import mmaemu
from mmaemu import _C, backends

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "csrc", "kernels")
TABLE = _C.kernel_table()


def test_table_has_the_guides_kernels():
    assert [k["name"] for k in TABLE] == ["reference", "cuda:h1", "cuda:h4", "cuda:v1", "cuda:v4",
                                          "cuda:wgmma"]


@pytest.mark.parametrize("entry", TABLE, ids=lambda e: e["name"])
def test_python_view_equals_the_c_table(entry):
    k = backends.KERNELS[entry["name"]]
    assert (k.name, k.presets, k.block, k.min_cc, k.only_cc, k.gated, k.exact, k.round_robin_splits,
            k.description) == (
        entry["name"], entry["presets"], entry["block"], entry["min_cc"], entry["only_cc"],
        entry["gated"], entry["exact"], entry["round_robin_splits"], entry["description"])
    # the one field that is Python's: where auto may take a gated kernel
    assert k.auto_ccs == (backends.GATE_TRUSTED_CCS.get(k.name, ()) if k.gated else None)


def test_view_has_nothing_the_table_lacks():
    assert list(backends.KERNELS) == [k["name"] for k in TABLE]


def _entry_points(module):
    text = open(os.path.join(KERNELS, module + ".cu")).read()
    direct = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(', text)
    return set(direct) | set(re.findall(r"^MM_WGMMA_ENTRY\((\w+),", text, re.M))


@pytest.mark.parametrize("entry", TABLE, ids=lambda e: e["name"])
def test_functions_exist_in_the_kernel_source(entry):
    names = [f for f in entry["functions"].values() if f]
    assert names and set(names) <= _entry_points(entry["module"]), (names, entry["module"])


@pytest.mark.parametrize("entry", TABLE, ids=lambda e: e["name"])
def test_presets_and_block_agree_with_the_presets(entry):
    presets = mmaemu.presets()
    assert entry["presets"] and set(entry["presets"]) <= set(presets)
    if entry["block"] is not None:
        assert {presets[p].block for p in entry["presets"]} == {entry["block"]}
    f = entry["functions"]
    if entry["kind"] == "tiled":   # one block size, one function for both accumulation modes
        assert (f["block32"] is None) != (f["block16"] is None)
        assert f["block32_fast"] is None and f["block16_fast"] is None
    if entry["kind"] == "wgmma":   # a function per preset block and accumulation mode
        assert all(f[k] for k in ("block32", "block16", "block32_fast", "block16_fast"))


@pytest.mark.parametrize("entry", TABLE, ids=lambda e: e["name"])
def test_round_robin_capability_matches_the_kernel_source(entry):
    """A kernel claims the round-robin split layout (round_robin_splits) exactly when its source
    computes each element with mm_gemm_element of mmaemu_gemm.h, whose mm_dot deals the k tiles
    round-robin (mm_rr_dot); the tiled and tensor-core kernels run their own contiguous slices."""
    text = open(os.path.join(KERNELS, entry["module"] + ".cu")).read()
    assert entry["round_robin_splits"] is ("mm_gemm_element(" in text)
    assert [k["name"] for k in TABLE if k["round_robin_splits"]] == ["reference"]


def test_wgmma_shared_memory_matches_its_source():
    text = open(os.path.join(KERNELS, "wgmma.cu")).read()
    smem = int(re.search(r"static_assert\(kSmemBytes == (\d+)", text).group(1))
    assert {k["name"]: k["smem_bytes"] for k in TABLE}["cuda:wgmma"] == smem
    assert all(k["smem_bytes"] == 0 for k in TABLE if k["name"] != "cuda:wgmma")


def test_policy_names_only_known_kernels():
    assert not set(backends.NOT_BUILT) & set(backends.KERNELS)
    for preset, order in backends.PRIORITY.items():
        assert order[-1] == "reference", preset
        for name in order:
            assert name in backends.KERNELS or name in backends.NOT_BUILT, (preset, name)
            if name in backends.KERNELS:
                assert preset in backends.KERNELS[name].presets, (preset, name)
    for name, ccs in backends.GATE_TRUSTED_CCS.items():
        k = backends.KERNELS[name]
        assert k.gated and all(cc >= k.min_cc and k.only_cc in (None, cc) for cc in ccs)
    built = [n for n in backends.BACKEND_NAMES if n not in ("auto", "cpu", "cuda")]
    assert sorted(built) == sorted(list(backends.KERNELS) + list(backends.NOT_BUILT))


def test_kernel_facts_are_written_once():
    """The facts live in csrc/cuda_kernels.c: no Python module and no other C file of the core
    spells a kernel's description or device function."""
    facts = [k["description"] for k in TABLE]
    facts += [f for k in TABLE for f in k["functions"].values() if f]
    files = glob.glob(os.path.join(ROOT, "mmaemu", "*.py")) + glob.glob(os.path.join(ROOT, "csrc", "*.[ch]*"))
    for path in files:
        if path.endswith("cuda_kernels.c"):
            continue
        text = open(path).read()
        assert not [f for f in facts if f in text], path
