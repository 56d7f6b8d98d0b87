"""scaled_mm(..., out=): torch 2.7.1's `_scaled_mm.out`, checked on its own terms here; the 22
recorded RTX 4060 out= calls are replayed in test/test_hw_mini.py."""
import warnings

import pytest
import torch

import mmaemu
from mmaemu.testing import assert_bitwise_equal, bits
from helpers import fp8_randn as _fp8

ONE, HALF = torch.tensor(1.0), torch.tensor(0.5)


def _call(x, w, **kw):
    return mmaemu.scaled_mm(x, w.t(), ONE, HALF, use_fast_accum=True, splitk=1, **kw)


def test_out_receives_the_result_and_is_returned():
    x, w = _fp8((16, 64), 1), _fp8((32, 64), 2)
    want = _call(x, w, out_dtype=torch.bfloat16)
    out = torch.full((16, 32), float("nan"), dtype=torch.bfloat16)
    got = _call(x, w, out=out)               # out_dtype None: out's dtype
    assert got is out
    assert_bitwise_equal(out, want)


def test_out_dtype_must_match_out():
    x, w = _fp8((16, 64), 3), _fp8((32, 64), 4)
    with pytest.raises(mmaemu.ReferenceRejectsError, match="out_dtype must match output matrix type"):
        _call(x, w, out_dtype=torch.float32, out=torch.empty(16, 32, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="out"):
        _call(x, w, out="not a tensor")


def test_a_wrong_size_out_is_resized_with_torchs_warning():
    x, w = _fp8((16, 64), 5), _fp8((32, 64), 6)
    want = _call(x, w, out_dtype=torch.float32)
    out = torch.zeros(16, 33)
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        _call(x, w, out=out)
    assert out.shape == (16, 32)
    assert_bitwise_equal(out, want)
    empty = torch.empty(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no warning for an out without elements
        _call(x, w, out=empty)
    assert_bitwise_equal(empty, want)


def test_a_column_major_out_takes_the_swapped_shapes_split():
    # hopper's table: 64 x 1024 x 16384 (fp32, fast) splits into 2; 1024 x 64 x 16384 into 3.
    x, w = _fp8((64, 16384), 7), _fp8((1024, 16384), 8)
    kw = dict(out_dtype=torch.float32, use_fast_accum=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert mmaemu.explain(x, w.t(), ONE, ONE, **kw).split.S == 2
        assert mmaemu.explain(w, x.t(), ONE, ONE, **kw).split.S == 3
        row = mmaemu.scaled_mm(x, w.t(), ONE, ONE, **kw)
        swapped = mmaemu.scaled_mm(x, w.t(), ONE, ONE, splitk=(3, "contiguous"), **kw)
        col = torch.full((1024, 64), float("nan")).t()
        got = mmaemu.scaled_mm(x, w.t(), ONE, ONE, out=col, **kw)
    assert got is col and col.stride() == (1, 64)
    assert_bitwise_equal(col, swapped)
    assert not torch.equal(bits(row), bits(swapped))   # the layout changed the bits


def test_an_out_without_unit_stride_is_left_unchanged_as_torch_does():
    x, w = _fp8((16, 64), 9), _fp8((32, 64), 10)
    store = torch.full((16, 64), float("nan"))
    out = store[:, ::2]                      # strides (64, 2): no unit stride
    with pytest.warns(UserWarning, match="leaves out unchanged"):
        got = _call(x, w, out_dtype=torch.float32, out=out)
    assert got is out and bool(torch.isnan(out).all())


def test_column_major_out_with_row_wise_scales_is_refused():
    x, w = _fp8((16, 64), 11), _fp8((32, 64), 12)
    out = torch.empty(32, 16, dtype=torch.bfloat16).t()
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="column-major"):
        mmaemu.scaled_mm(x, w.t(), torch.ones(16, 1), torch.ones(1, 32), out_dtype=torch.bfloat16,
                         out=out)


def test_empty_k_zeroes_out():
    x, w = _fp8((16, 0), 13), _fp8((32, 0), 14)
    out = torch.full((16, 32), float("nan"))
    _call(x, w, out_dtype=torch.float32, out=out)
    assert bool((out == 0).all())


def test_emulate_routes_out_through_the_same_rules():
    x, w = _fp8((16, 64), 15), _fp8((32, 64), 16)
    want = _call(x, w, out_dtype=torch.bfloat16)
    out = torch.empty(32, 16, dtype=torch.bfloat16).t()
    with torch.inference_mode(), mmaemu.emulate(splitk=1):
        got = torch._scaled_mm(x, w.t(), scale_a=ONE, scale_b=HALF, use_fast_accum=True, out=out)
    assert got is out
    assert_bitwise_equal(out, want)


def test_accumulate_takes_any_k_and_layout():
    x, w = _fp8((4, 20), 17), _fp8((3, 20), 18)
    acc = mmaemu.accumulate(x, w, use_fast_accum=True, splitk=1)
    padded = mmaemu.accumulate(torch.cat([x, torch.zeros(4, 12, dtype=x.dtype)], 1),
                               torch.cat([w, torch.zeros(3, 12, dtype=w.dtype)], 1),
                               use_fast_accum=True, splitk=1)
    assert_bitwise_equal(acc, padded)        # zero products change no block's sum here
    xt = x.t().contiguous().t()              # column-major x
    assert_bitwise_equal(mmaemu.accumulate(xt, w, use_fast_accum=True, splitk=1), acc)
    assert mmaemu.accumulate(x[:0], w, use_fast_accum=True, splitk=1).shape == (0, 3)
