"""mmaemu.integrations.te_state: TE's FP8 _extra_state read without TE, and refused when malformed.

The states are built the way TE 2.3 writes them (module/base.py get_extra_state: pickle.dumps
of a dict, in a uint8 tensor; the older torch.save into io.BytesIO), with stand-ins for TE's
recipe classes under TE's module name (TE is not installed here)."""
import contextlib
import dataclasses
import enum
import io
import os
import pickle
import sys
import types
from typing import NamedTuple

import pytest
import torch

from mmaemu.nn import read_te_extra_state


class _FormatHelper(NamedTuple):
    max_fwd: float
    max_bwd: float


class Format(enum.Enum):
    E4M3 = _FormatHelper(448, 448)
    E5M2 = _FormatHelper(57344, 57344)
    HYBRID = _FormatHelper(448, 57344)


@dataclasses.dataclass(frozen=True)
class DelayedScaling:
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    scaling_factor_compute_algo: object = None


@contextlib.contextmanager
def te_importable():
    """TE's recipe module name resolvable while pickling (never while reading)."""
    names = ("transformer_engine", "transformer_engine.common", "transformer_engine.common.recipe")
    mods = {n: types.ModuleType(n) for n in names}
    for c in (_FormatHelper, Format, DelayedScaling):
        c.__module__ = names[-1]
        setattr(mods[names[-1]], c.__name__, c)
    sys.modules.update(mods)
    try:
        yield
    finally:
        for n in names:
            del sys.modules[n]


def te_state(history_len=16):
    scale = torch.tensor([112.0, 1792.0, 1.0])
    history = torch.zeros(history_len, 3)
    history[0, 0], history[1, 0] = 3.5, 4.0
    return {"recipe": DelayedScaling(amax_history_len=history_len), "scale_fwd": scale,
            "amax_history_fwd": history, "scale_bwd": torch.ones(2),
            "amax_history_bwd": torch.zeros(history_len, 2),
            "extra_fp8_variables": {"num_gemms": 1, "fp8_checkpoint": True}}


def as_te2_tensor(obj):
    with te_importable():
        return torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)


def test_reads_te2_byte_tensor_and_bytesio_and_dict():
    st = te_state()
    got = read_te_extra_state(as_te2_tensor(st))
    assert got.scale.tolist() == [112.0, 1792.0, 1.0]
    assert float(got.scale_x) == 112.0 and float(got.scale_w) == 1792.0
    assert torch.equal(got.amax_history, st["amax_history_fwd"])
    assert got.recipe == {"margin": 0, "fp8_format": "HYBRID", "amax_history_len": 16,
                          "amax_compute_algo": "max", "scaling_factor_compute_algo": None,
                          "name": "DelayedScaling"}
    buf = io.BytesIO()
    with te_importable():
        torch.save(st, buf)
    old = read_te_extra_state(buf)
    assert torch.equal(old.scale, got.scale) and old.recipe == got.recipe
    assert torch.equal(read_te_extra_state(as_te2_tensor(st).numpy().tobytes()).scale, got.scale)
    assert torch.equal(read_te_extra_state(dict(st)).scale, got.scale)


def test_no_fp8_state_is_none():
    assert read_te_extra_state(as_te2_tensor(None)) is None
    assert read_te_extra_state(b"") is None


class SideEffect:
    """A pickle whose reduce would create a file: it must never run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_refuses_foreign_globals_without_running_them(tmp_path):
    marker = str(tmp_path / "executed")
    st = te_state()
    st["recipe"] = SideEffect(marker)
    payload = pickle.dumps(st)
    assert b"mkdir" in payload
    for form in (torch.frombuffer(bytearray(payload), dtype=torch.uint8), payload,
                 io.BytesIO(payload)):
        with pytest.raises(ValueError, match=r"posix\.mkdir|os\.mkdir|refusing"):
            read_te_extra_state(form)
    buf = io.BytesIO()
    torch.save(st, buf)
    with pytest.raises(ValueError, match="refusing"):
        read_te_extra_state(buf)
    assert not os.path.exists(marker)
    # A callable amax_compute_algo is a global too.
    with te_importable():
        bad = pickle.dumps({**te_state(), "recipe": DelayedScaling(amax_compute_algo=os.getcwd)})
    with pytest.raises(ValueError, match="refusing"):
        read_te_extra_state(bad)


def test_malformed_states():
    with pytest.raises(TypeError):
        read_te_extra_state(torch.zeros(4))                   # not uint8
    with pytest.raises(TypeError):
        read_te_extra_state(12)
    with pytest.raises(ValueError, match="not a readable pickle"):
        read_te_extra_state(pickle.dumps(te_state.__name__)[:-3] + b"\x00")
    with pytest.raises(ValueError, match="not a readable pickle"):
        read_te_extra_state(as_te2_tensor(te_state())[:50])  # truncated
    with pytest.raises(TypeError):
        read_te_extra_state(as_te2_tensor([1, 2]))            # not a dict
    with pytest.raises(ValueError, match="no delayed-scaling"):
        read_te_extra_state({"recipe": None})
    bad = te_state()
    bad["scale_fwd"] = bad["scale_fwd"].double()
    with pytest.raises(ValueError, match="float32"):
        read_te_extra_state(as_te2_tensor(bad))
    bad = te_state()
    bad["amax_history_fwd"] = torch.zeros(16, 2)
    with pytest.raises(ValueError, match="num_gemms"):
        read_te_extra_state(as_te2_tensor(bad))
