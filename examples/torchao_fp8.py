"""torchao's FP8 inference recipes on a CPU, as an H100/H200 with torch 2.7.1 computes them.

    pip install torchao            # check first: pip install --dry-run torchao must not change torch
    python examples/torchao_fp8.py

A small bf16 model is quantized with Float8DynamicActivationFloat8WeightConfig, per tensor
(torch._scaled_mm with tensor-wise scales and the layer's bias: cuBLASLt on the GPU) and per
row (row-wise scales and the bias: torch 2.7.1's CUTLASS f8f8bf16_rowwise kernel). Under
mmaemu.emulate() its torch._scaled_mm calls compute what that GPU computes.

torchao refuses to quantize without a CUDA GPU of compute capability >= 8.9; mmaemu needs none,
so the example switches that check off (torchao.quantization.quant_api._check_hardware_support).

What it checks (exit 1 on a mismatch): every torch._scaled_mm call of the two models is
recorded, and its result must have the bits of a direct mmaemu.scaled_mm call on the operands it
received; each model's output must be its last call's result, bit for bit (torchao passes the
bias to the GEMM, whose output is the layer's).
"""
import sys

import torch

import mmaemu
from mmaemu.testing import assert_bitwise_equal

try:
    from torchao.quantization import (Float8DynamicActivationFloat8WeightConfig, PerRow,
                                      PerTensor, quant_api, quantize_)
except ImportError:
    raise SystemExit("this example needs torchao: pip install torchao")

quant_api._check_hardware_support = lambda *args, **kwargs: None   # no GPU needed here


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                               torch.nn.Linear(512, 128)).to(torch.bfloat16)


class Recording(mmaemu.emulate):
    """emulate() that keeps each intercepted call's arguments (bound to torch._scaled_mm's
    names) and result."""

    NAMES = ("mat1", "mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype",
             "use_fast_accum")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def scaled_mm(self, args, kwargs, *binder):
        y = super().scaled_mm(args, kwargs, *binder)
        call = dict(zip(self.NAMES, args), **kwargs)
        call.pop("out", None)
        self.calls.append((call, y.clone()))
        return y


def main():
    x = torch.randn(16, 256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    reference = model()
    checked = 0
    with torch.no_grad():
        y_bf16 = reference(x)
        for name, granularity in (("PerTensor", PerTensor()), ("PerRow", PerRow())):
            m = model()
            quantize_(m, Float8DynamicActivationFloat8WeightConfig(granularity=granularity))
            # splitk=1: the tensor-wise shapes here are not in the H100 split-K table; the
            # row-wise kernel never splits K.
            rec = Recording(profile="hopper", splitk=1)
            with rec:
                y = m(x)
            err = (y.float() - y_bf16.float()).abs().max().item()
            print(f"{name}: output {tuple(y.shape)} {y.dtype}, max |fp8 - bf16| = {err:.4f}")
            if len(rec.calls) != 2:
                print(f"FAILED: {name}: {len(rec.calls)} torch._scaled_mm calls, expected 2")
                return 1
            try:
                for call, out in rec.calls:
                    direct = mmaemu.scaled_mm(**call, profile="hopper", splitk=1)
                    assert_bitwise_equal(out, direct)
                    checked += 1
                assert_bitwise_equal(y, rec.calls[-1][1])
            except AssertionError as e:
                print(f"FAILED: {name}: {e}")
                return 1
        # What the row-wise call runs, and why (the kernel instance rule of torch 2.7.1).
        xq = torch.zeros(16, 512, dtype=torch.float8_e4m3fn)
        wq = torch.zeros(128, 512, dtype=torch.float8_e4m3fn)
        plan = mmaemu.explain(xq, wq.t(), torch.ones(16, 1), torch.ones(1, 128),
                              bias=torch.zeros(128, dtype=torch.bfloat16),
                              out_dtype=torch.bfloat16, use_fast_accum=True)
        print("row-wise kernel:", plan.kernel)
    print(f"checked: all {checked} torch._scaled_mm calls (PerTensor and PerRow) returned the bits "
          f"of direct mmaemu.scaled_mm calls, and each model's output is its last call's, bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
