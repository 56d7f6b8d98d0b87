"""Fake (meta) kernels: shapes and dtypes of the ops' results, so torch.compile can trace them."""
import torch


@torch.library.register_fake("mmaemu::scaled_mm")
def _scaled_mm_fake(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                    use_fast_accum=False, preset="hopper", splits=1, scheme="none",
                    backend="auto", epilogue=0):
    torch._check(mat1.dim() == 2 and mat2.dim() == 2, lambda: "mat1 and mat2 must be matrices")
    torch._check(mat1.shape[1] == mat2.shape[0], lambda: "mat1 and mat2 shapes cannot be multiplied")
    dtype = out_dtype if out_dtype is not None else mat1.dtype
    return mat1.new_empty((mat1.shape[0], mat2.shape[1]), dtype=dtype)


@torch.library.register_fake("mmaemu::accumulate")
def _accumulate_fake(x, w, use_fast_accum, preset="hopper", splits=1, scheme="none",
                     backend="auto"):
    torch._check(x.dim() == 2 and w.dim() == 2, lambda: "x and w must be matrices")
    torch._check(x.shape[1] == w.shape[1], lambda: "x and w disagree on K")
    return x.new_empty((x.shape[0], w.shape[0]), dtype=torch.float32)


@torch.library.register_fake("mmaemu::mma")
def _mma_fake(a, b, c, preset="hopper"):
    return c.new_empty((a.shape[0],), dtype=torch.float32)
