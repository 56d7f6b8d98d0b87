import torch

import mmaemu


def test_first_gemm_matches_fp32_roughly_and_is_deterministic():
    torch.manual_seed(0)
    x = (torch.randn(16, 64) * 8).to(torch.float8_e4m3fn)
    w = (torch.randn(32, 64) * 8).to(torch.float8_e4m3fn)
    y1 = mmaemu.scaled_mm(x, w.t(), torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.float32,
                          use_fast_accum=True, splitk=1)
    y2 = mmaemu.scaled_mm(x, w.t(), torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.float32,
                          use_fast_accum=True, splitk=1)
    mmaemu.testing.assert_bitwise_equal(y1, y2)
    assert y1.shape == (16, 32)
