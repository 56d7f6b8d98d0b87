"""Replays every GEMM golden recorded on real hardware (test/data/hw_goldens/*.json).

Each golden holds torch._scaled_mm's output bits on a GPU, the inputs as generator specs and
the explicit split cuBLASLt used (mmaemu_tools/record_goldens.py). mmaemu must return identical
bits: 0 mismatches, on the CPU and, when a GPU is present, with the CUDA backend. Large or
expensive outputs are replayed on their recorded sampled block (set MMAEMU_GOLDEN_FULL=1 to
replay them whole). With no goldens recorded (none yet: no H200 run has been committed) the
module holds only the check on the folder's contents; the replay tests exist once goldens do.
"""
import os

import pytest
import torch

import mmaemu
from mmaemu.testing import assert_bitwise_equal

from mmaemu_tools._hwcommon import load_golden_files, replay_case

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GOLDEN_DIR = os.environ.get("MMAEMU_HW_GOLDENS_DIR", os.path.join(ROOT, "test", "data", "hw_goldens"))
FULL = os.environ.get("MMAEMU_GOLDEN_FULL") == "1"


def _collect():
    cases, bad_docs = [], []
    for path, doc in load_golden_files(GOLDEN_DIR):
        dry = doc.get("platform", {}).get("dry_run", True)
        if dry and os.environ.get("MMAEMU_ALLOW_DRY_GOLDENS") != "1":
            bad_docs.append(path)
            continue
        for case in doc["cases"]:
            cases.append(pytest.param(case, id=f"{os.path.basename(path)[:-5]}:{case['id']}"))
    return cases, bad_docs


CASES, DRY_DOCS = _collect()


def test_no_dry_run_data_among_hardware_goldens():
    """Files written by a dry run (the CPU model) must never pass for hardware data."""
    assert not DRY_DOCS, f"dry-run golden files in {GOLDEN_DIR}: {DRY_DOCS}"


def _replay(case, device):
    if case.get("replay", "required") != "required":
        pytest.skip(f"{case['id']}: {case['replay']}")
    expected, actual = replay_case(case, device=device, full=FULL)
    assert_bitwise_equal(actual, expected, msg=f"{case['id']} (splitk={case['mmaemu_splitk']}, "
                                               f"cuBLASLt {case['cublaslt'].get('source')})")


if CASES:   # the goldens of scripts/h200_ground_truth.sh, once committed
    @pytest.mark.parametrize("case", CASES)
    def test_golden_cpu(case):
        _replay(case, "cpu")

    @pytest.mark.parametrize("case", CASES)
    def test_golden_cuda(case):
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        try:
            _replay(case, "cuda")
        except mmaemu.BackendUnavailableError as e:
            pytest.skip(f"CUDA backend unavailable: {e}")
