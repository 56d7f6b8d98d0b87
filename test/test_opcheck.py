"""torch.library.opcheck for mmaemu's kernel ops and the grouped planning op: fake (meta) kernels, autograd registration
and AOT dispatch agree with the real CPU kernels, and the schemas hold.

opcheck's own schema test ("test_schema") cannot run on FP8 inputs: its mutation detector
compares inputs with torch.allclose, which has no FP8 kernel in torch 2.13 ("mul_cpu_reduced_float"
not implemented for 'Float8_e4m3fn'). The schema's promises (no input is mutated, the output
aliases no input) are checked here directly, on the inputs' bit patterns."""
import pytest
import torch

import mmaemu  # registers torch.ops.mmaemu.*


def fp8(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 4).to(dtype)


def scaled_mm_samples():
    one, half = torch.tensor(1.0), torch.tensor(0.5)
    x = fp8((8, 64), torch.float8_e4m3fn, 0)
    w = fp8((16, 64), torch.float8_e4m3fn, 1)
    w5 = fp8((16, 64), torch.float8_e5m2, 2)
    yield (x, w.t(), one, half), dict(out_dtype=torch.bfloat16, use_fast_accum=True)
    yield (x, w.t(), half, one), dict(out_dtype=torch.float32, use_fast_accum=False, preset="ada",
                                      splits=2, scheme="serial", backend="reference", epilogue=1)
    yield (x, w5.t(), one, one, None, half), dict(out_dtype=torch.float8_e5m2, use_fast_accum=True,
                                                  preset="b200", splits=3, scheme="pairwise", epilogue=2)
    yield (x, w.t().contiguous(), one, one), dict(out_dtype=torch.float16)
    yield (x, w.t(), one, one), dict()   # out_dtype None: mat1's dtype
    # block-wise scales ([M, groups], [ceil(N/128) or N, groups]) and the grouped epilogue
    epi = mmaemu._C.enums()["epilogues"]
    sa, sb_blocks, sb_cols = torch.rand(8, 1) + 0.5, torch.rand(1, 1) + 0.5, torch.rand(16, 1) + 0.5
    yield (x, w.t(), sa, sb_blocks), dict(out_dtype=torch.bfloat16, epilogue=epi["blockwise"])
    yield (x, w.t(), sa, sb_cols), dict(out_dtype=torch.float32, epilogue=epi["blockwise_pe"])
    yield (x, w.t(), torch.rand(8) + 0.5, torch.rand(16) + 0.5), dict(
        out_dtype=torch.bfloat16, use_fast_accum=True, epilogue=epi["rowwise_mul"])


def accumulate_samples():
    x = fp8((5, 96), torch.float8_e4m3fn, 3)
    w = fp8((7, 96), torch.float8_e5m2, 4)
    yield (x, w, True), dict()
    yield (x, w, False), dict(preset="ada", splits=2, scheme="contiguous", backend="reference")


def mma_samples():
    a = fp8((6, 64), torch.float8_e4m3fn, 5)
    b = fp8((6, 64), torch.float8_e4m3fn, 6)
    c = torch.randn(6, generator=torch.Generator().manual_seed(7))
    for preset in ("hopper", "ada", "b200"):
        yield (a, b, c), dict(preset=preset)


def grouped_samples():
    """The grouped planning op (it runs the kernel op per group): 2d x 3d with an empty group."""
    x = fp8((12, 32), torch.float8_e4m3fn, 8)
    w = fp8((3, 16, 32), torch.float8_e4m3fn, 9).transpose(-2, -1)
    offs = torch.tensor([4, 4, 10], dtype=torch.int32)
    yield (x, w, torch.rand(12) + 0.5, torch.rand(3, 16) + 0.5, offs), dict()


CASES = ([("scaled_mm", a, k) for a, k in scaled_mm_samples()]
         + [("accumulate", a, k) for a, k in accumulate_samples()]
         + [("mma", a, k) for a, k in mma_samples()]
         + [("profile_scaled_grouped_mm", a, k) for a, k in grouped_samples()])


OPCHECK_UTILS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
IDS = [f"{n}-{i}" for i, (n, _, _) in enumerate(CASES)]


@pytest.mark.parametrize("name,args,kwargs", CASES, ids=IDS)
def test_opcheck(name, args, kwargs):
    torch.library.opcheck(getattr(torch.ops.mmaemu, name).default, args, kwargs, test_utils=OPCHECK_UTILS)


def bit_view(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int32)


@pytest.mark.parametrize("name,args,kwargs", CASES, ids=IDS)
def test_schema_no_mutation_no_aliasing(name, args, kwargs):
    """The schemas declare every input read-only and a fresh output."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    before = [bit_view(t).clone() for t in tensors]
    out = getattr(torch.ops.mmaemu, name)(*args, **kwargs)
    for t, b in zip(tensors, before):
        assert torch.equal(bit_view(t), b), "an input was modified"
        assert not torch._C._overlaps(out, t), "the output aliases an input"
    schema = getattr(torch.ops.mmaemu, name).default._schema
    assert not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    assert all(r.alias_info is None for r in schema.returns)


def test_fake_kernels_give_the_real_shapes_and_dtypes():
    """opcheck compares the fake kernel with the real one; check the shapes against the
    definitions as well (scaled_mm: [M, N] in out_dtype or mat1's dtype)."""
    for (args, kwargs) in scaled_mm_samples():
        y = torch.ops.mmaemu.scaled_mm(*args, **kwargs)
        assert y.shape == (args[0].shape[0], args[1].shape[1])
        assert y.dtype == (kwargs.get("out_dtype") or args[0].dtype)
