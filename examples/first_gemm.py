"""The user guide's first GEMM (section 3), on the CPU."""
import torch

import mmaemu

torch.manual_seed(0)
x = (torch.randn(64, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)    # input  [M, K], row-major
w = (torch.randn(5760, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)  # weight [N, K], row-major
scale_x, scale_w = torch.tensor(1 / 64), torch.tensor(1 / 32)                # tensor-wise fp32 scales

y = mmaemu.scaled_mm(x, w.t(), scale_x, scale_w, out_dtype=torch.bfloat16, use_fast_accum=True)
print(y.shape, y.dtype)
print(y[:2, :6])
