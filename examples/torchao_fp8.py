"""torchao's FP8 inference recipes on a CPU, as an H100/H200 with torch 2.7.1 computes them.

    pip install torchao            # check first: pip install --dry-run torchao must not change torch
    python examples/torchao_fp8.py

A small bf16 model is quantized with Float8DynamicActivationFloat8WeightConfig, per tensor
(torch._scaled_mm with tensor-wise scales and the layer's bias: cuBLASLt on the GPU) and per
row (row-wise scales and the bias: torch 2.7.1's CUTLASS f8f8bf16_rowwise kernel). Under
mmaemu.emulate() its torch._scaled_mm calls compute what that GPU computes.

torchao refuses to quantize without a CUDA GPU of compute capability >= 8.9; mmaemu needs none,
so the example switches that check off (torchao.quantization.quant_api._check_hardware_support).
"""
import torch

import mmaemu

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


def main():
    x = torch.randn(16, 256).to(torch.bfloat16)
    reference = model()
    with torch.no_grad():
        y_bf16 = reference(x)
        for name, granularity in (("PerTensor", PerTensor()), ("PerRow", PerRow())):
            m = model()
            quantize_(m, Float8DynamicActivationFloat8WeightConfig(granularity=granularity))
            # splitk=1: the tensor-wise shapes here are not in the H100 split-K table; the
            # row-wise kernel never splits K.
            with mmaemu.emulate(profile="hopper", splitk=1):
                y = m(x)
            err = (y.float() - y_bf16.float()).abs().max().item()
            print(f"{name}: output {tuple(y.shape)} {y.dtype}, max |fp8 - bf16| = {err:.4f}")
        # What the row-wise call runs, and why (the kernel instance rule of torch 2.7.1).
        xq = torch.zeros(16, 512, dtype=torch.float8_e4m3fn)
        wq = torch.zeros(128, 512, dtype=torch.float8_e4m3fn)
        plan = mmaemu.explain(xq, wq.t(), torch.ones(16, 1), torch.ones(1, 128),
                              bias=torch.zeros(128, dtype=torch.bfloat16),
                              out_dtype=torch.bfloat16, use_fast_accum=True)
        print("row-wise kernel:", plan.kernel)


if __name__ == "__main__":
    main()
