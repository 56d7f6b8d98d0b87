"""The CUDA kernel table exists once, in C (csrc/cuda/kernel_table.c; Python's registry is a view
of it), and agrees with the kernel sources; the policy of planning/executors.py names only kernels
the table or the guide's not-built list has. No GPU needed."""
import glob
import os
import re

import pytest

import mmaemu
from mmaemu import _C
from mmaemu.planning import executors
from mmaemu.runtime import availability, registry
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "csrc", "kernels")
TABLE = _C.kernel_table()


def test_table_has_the_guides_kernels():
    assert [k["name"] for k in TABLE] == ["reference", "cuda:h1", "cuda:h4", "cuda:v1", "cuda:v4",
                                          "cuda:wgmma"]


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
    assert not set(registry.NOT_BUILT) & set(registry.KERNELS)
    for preset, order in executors.PRIORITY.items():
        assert order[-1] == "reference", preset
        for name in order:
            assert name in registry.KERNELS or name in registry.NOT_BUILT, (preset, name)
            if name in registry.KERNELS:
                assert preset in registry.KERNELS[name].presets, (preset, name)
    for name, ccs in availability.GATE_TRUSTED_CCS.items():
        k = registry.KERNELS[name]
        assert k.gated and all(cc >= k.min_cc and k.only_cc in (None, cc) for cc in ccs)
    # backend= takes the policies, the kernels (built or not) and the executor names plans print
    executors_named = ["cuda:reference"] + [f"cpu:{n}" for n in registry.SIMD_KERNELS]
    built = [n for n in registry.BACKEND_NAMES
             if n not in ("auto", "cpu", "cuda") and n not in executors_named]
    assert sorted(built) == sorted(list(registry.KERNELS) + list(registry.NOT_BUILT))
    assert set(executors_named) <= set(registry.BACKEND_NAMES)


def test_kernel_facts_are_written_once():
    """The facts live in csrc/cuda/kernel_table.c: no Python module and no other C file of the
    core spells a kernel's description or device function."""
    facts = [k["description"] for k in TABLE]
    facts += [f for k in TABLE for f in k["functions"].values() if f]
    files = glob.glob(os.path.join(ROOT, "mmaemu", "**", "*.py"), recursive=True) + [
        p for layer in ("core", "cpu", "cuda", "include", "torch")
        for p in glob.glob(os.path.join(ROOT, "csrc", layer, "*.[ch]*"))]
    assert len(files) > 60
    for path in files:
        if path.endswith("kernel_table.c"):
            continue
        text = open(path).read()
        assert not [f for f in facts if f in text], path
