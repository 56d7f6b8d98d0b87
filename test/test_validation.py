"""mmaemu.validation: torch 2.7.1 torch._scaled_mm's argument checks, with torch's messages and
in torch's order, and mmaemu's own refusals (UnsupportedFeatureError, TypeError, ValueError).

Each check has one test with the exact expected message and the exception's classes. A bad-input
table then runs every kind of bad call through the validator and through the C++ op
torch.ops.mmaemu.scaled_mm (which must raise cleanly or return, never crash), and checks that
the process still computes afterwards."""
import math

import pytest
import torch
from hypothesis import given, strategies as st

import mmaemu
from mmaemu import MmaemuError, ReferenceRejectsError, UnsupportedFeatureError
from mmaemu.validation import (ValidatedCall, ValidatedMma, _check_same_device,
                               _non_overlapping_and_dense, torch_name, validate_accumulate,
                               validate_mma, validate_scaled_mm)

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
E8M0 = torch.float8_e8m0fnu


def fp8(rows, cols, dtype=E4M3, value=1.0, device="cpu"):
    return torch.full((rows, cols), value, device=device).to(dtype)


def weight_t(N, K, dtype=E4M3, device="cpu"):
    """torch's usual mat2: the transpose of a row-major [N, K] weight (column-major [K, N])."""
    return fp8(N, K, dtype, device=device).t()


def one():
    return torch.tensor(1.0)


def args(M=16, K=32, N=16, **overrides):
    a = dict(mat1=fp8(M, K), mat2=weight_t(N, K), scale_a=one(), scale_b=one())
    a.update(overrides)
    return a


def expect(cls, builtin, message, fn, *a, **kw):
    """fn raises cls (also an instance of builtin) whose message is exactly `message`."""
    with pytest.raises(cls) as info:
        fn(*a, **kw)
    assert isinstance(info.value, builtin)
    assert str(info.value) == message
    return info.value


def rejects(message, **overrides):
    e = expect(ReferenceRejectsError, RuntimeError, message, validate_scaled_mm,
               **args(**overrides))
    assert isinstance(e, MmaemuError)


def unsupported(message_start, **overrides):
    with pytest.raises(UnsupportedFeatureError) as info:
        validate_scaled_mm(**args(**overrides))
    assert isinstance(info.value, NotImplementedError) and isinstance(info.value, MmaemuError)
    assert str(info.value).startswith(message_start)


# ---------------------------------------------------------------------------------------------
# A valid call and what it reports

def test_valid_call_reports_shape_formats_and_torch_default_out_dtype():
    v = validate_scaled_mm(**args(M=3, K=48, N=32, mat2=weight_t(32, 48, E5M2)))
    assert v == ValidatedCall(M=3, N=32, K=48, fmt_a="e4m3", fmt_b="e5m2", out_dtype=E4M3,
                              device=torch.device("cpu"), empty=False, has_scale_result=False)
    v = validate_scaled_mm(**args(out_dtype=torch.bfloat16, scale_result=one()),
                           use_fast_accum=True)
    assert v.out_dtype == torch.bfloat16 and v.has_scale_result


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (1, 1, 1)])
def test_tensorwise_scales_are_any_one_element_fp32_tensor(shape):
    validate_scaled_mm(**args(scale_a=torch.ones(shape), scale_b=torch.ones(shape)))


# ---------------------------------------------------------------------------------------------
# torch's checks, in torch's order, with torch's messages

def test_mat1_must_be_a_matrix():
    rejects("mat1 must be a matrix", mat1=torch.ones(2, 16, 32).to(E4M3))


def test_mat2_must_be_a_matrix():
    rejects("mat2 must be a matrix", mat2=torch.ones(32).to(E4M3))


def test_shapes_must_multiply():
    rejects("mat1 and mat2 shapes cannot be multiplied (16x32 and 48x16)", mat2=weight_t(16, 48))


def test_scales_must_be_fp32():
    rejects("Both scale_a and scale_b must be float (fp32) tensors.",
            scale_b=torch.tensor(1.0, dtype=torch.bfloat16))


def test_non_tensorwise_scales_must_be_2d():
    rejects("For non-TensorWise scaling, scale tensors must be 2-dimensional, but got "
            "scale_a.dim()=1 and scale_b.dim()=0", scale_a=torch.ones(16))


def test_invalid_scaling_configuration():
    rejects("Invalid scaling configuration. For TensorWise scaling, both scales should be scalar. "
            "For RowWise scaling, scale_a should be (16, 1) and scale_b should be (1, 32). "
            "Got scale_a.size()=(2, 1) and scale_b.size()=(1, 32)",
            N=32, mat2=weight_t(32, 32), scale_a=torch.ones(2, 1), scale_b=torch.ones(1, 32))


def test_rowwise_scales_must_be_contiguous():
    rejects("Both scale_a and scale_b must be contiguous for RowWise scaling.",
            scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 32)[:, ::2])


def test_blockwise_scale_sizes_and_contiguity():
    # M = N = 16, K = 32: ceil(ceil(32 / 32) / 4) * 4 = 4 padded k blocks, 128 * 1 * 4 = 512.
    rejects("For BlockWise scaling: Expected scale_a size to be 512 but got 511",
            scale_a=torch.empty(511, dtype=E8M0), scale_b=torch.empty(512, dtype=E8M0))
    rejects("For BlockWise scaling: Expected scale_b size to be 512 but got 513",
            scale_a=torch.empty(512, dtype=E8M0), scale_b=torch.empty(513, dtype=E8M0))
    rejects("For BlockWise scaling: Both scale_a and scale_b must be contiguous",
            scale_a=torch.empty(1024, dtype=E8M0)[::2], scale_b=torch.empty(512, dtype=E8M0))


def test_scale_result_must_be_a_float_scalar():
    rejects("scale_result must be a float scalar", scale_result=torch.ones(2))
    rejects("scale_result must be a float scalar",
            scale_result=torch.tensor(1.0, dtype=torch.float64))


def test_bias_must_have_n_elements():
    rejects("Bias must be size 16 but got 8", bias=torch.ones(8, dtype=torch.bfloat16))


def test_k_must_be_divisible_by_16():
    rejects("Expected trailing dimension of mat1 to be divisible by 16 but got mat1 shape: "
            "(16x24).", K=24)


def test_n_must_be_divisible_by_16_but_m_is_free():
    rejects("mat2 shape (32x24) must be divisible by 16", N=24)
    validate_scaled_mm(**args(M=1))
    validate_scaled_mm(**args(M=17))


def test_operands_must_be_float8():
    rejects("Expected mat1 to be Float8 matrix got Float", mat1=torch.ones(16, 32))
    rejects("Expected mat2 to be Float8 matrix got BFloat16",
            mat2=torch.ones(16, 32, dtype=torch.bfloat16).t())


def test_e5m2_times_e5m2_is_rejected():
    rejects("Multiplication of two Float8_e5m2 matrices is not supported",
            mat1=fp8(16, 32, E5M2), mat2=weight_t(16, 32, E5M2))


@pytest.mark.parametrize("out_dtype,bias_dtype,message", [
    (torch.float32, torch.bfloat16, "Bias is not supported when out_dtype is set to Float32"),
    (torch.bfloat16, torch.float32, "Bias must be either Half or BFloat16, but got Float"),
    (torch.bfloat16, torch.float16,
     "Bias must be BFloat16 to compute BFloat16 output, but got Half"),
    (torch.float16, torch.bfloat16,
     "Bias must be Float16 to compute Half output, but got BFloat16"),
])
def test_bias_dtype_rules(out_dtype, bias_dtype, message):
    rejects(message, out_dtype=out_dtype, bias=torch.ones(16, dtype=bias_dtype))


def test_devices_must_match_on_cpu():
    rejects("Expected tensor for argument #4 'scale_a' to be on the same device as the result "
            "(mat1's device, cpu), but it is on meta (while checking arguments for scaled_mm)",
            scale_a=torch.tensor(1.0, device="meta"))
    rejects("Expected tensor for argument #2 'mat2' to be on the same device as the result "
            "(mat1's device, meta), but it is on cpu (while checking arguments for scaled_mm)",
            mat1=fp8(16, 32, device="meta"))


def test_devices_on_cuda_use_torchs_check_all_same_gpu_text():
    # The CUDA branch needs no GPU to check: out's device is passed in.
    cuda0 = torch.device("cuda", 0)
    expect(ReferenceRejectsError, RuntimeError,
           "Tensor for argument #4 'scale_a' is on CPU, but expected it to be on GPU "
           "(while checking arguments for _scaled_mm_out_cuda)",
           _check_same_device, "scaled_mm", "_scaled_mm_out_cuda", cuda0,
           ((4, "scale_a", torch.ones(1)),))
    expect(ReferenceRejectsError, RuntimeError,
           "Expected tensor for 'out' to have the same device as tensor for argument #6 "
           "'scale_result'; but device 0 does not equal -1 "
           "(while checking arguments for _scaled_mm_out_cuda)",
           _check_same_device, "scaled_mm", "_scaled_mm_out_cuda", cuda0,
           ((6, "scale_result", torch.ones(1, device="meta")),))


def test_output_whose_size_overflows_int64_is_rejected():
    M = N = 2**57
    rejects(f"Storage size calculation overflowed with sizes=[{M}, {N}]",
            mat1=torch.empty(M, 32, device="meta", dtype=E4M3),
            mat2=torch.empty(N, 32, device="meta", dtype=E4M3).t(),
            scale_a=torch.ones((), device="meta"), scale_b=torch.ones((), device="meta"))


@pytest.mark.parametrize("M,K,N", [(0, 32, 16), (16, 0, 16), (16, 32, 0), (0, 0, 0)])
def test_zero_size_returns_early_as_torch_does(M, K, N):
    v = validate_scaled_mm(**args(M=M, K=K, N=N))
    assert v.empty and (v.M, v.N, v.K) == (M, N, K)
    # torch returns before the layout and cuBLAS checks: a row-major mat2 and an E5M2 output
    # for E4M3 inputs pass when the GEMM is empty.
    v = validate_scaled_mm(**args(M=M, K=K, N=N, mat2=fp8(K, N), out_dtype=E5M2))
    assert v.empty


def test_mat1_must_be_row_major_and_mat2_column_major():
    msg = "Only multiplication of row-major and column-major matrices is supported by cuBLASLt"
    rejects(msg, mat1=fp8(32, 16).t())                  # column-major mat1
    rejects(msg, mat2=fp8(32, 16))                      # row-major mat2
    rejects(msg, mat2=fp8(16, 64)[:, ::2].t())          # strided both ways: torch copies it
    rejects(msg, mat2=fp8(1, 32).expand(16, 32).t())    # stride-0 weight rows: torch copies it


@pytest.mark.parametrize("name,mat1,mat2", [
    ("row-major slice of a wider mat1", fp8(16, 64)[:, :32], weight_t(16, 32)),
    ("every other row of mat1", fp8(32, 32)[::2], weight_t(16, 32)),
    ("mat1 strided both ways (torch copies it)", fp8(16, 64)[:, ::2], weight_t(16, 32)),
    ("mat1 rows broadcast (stride 0, torch copies it)", fp8(1, 32).expand(16, 32),
     weight_t(16, 32)),
    ("(1, K) mat1 made by transposing a column", fp8(32, 1).t(), weight_t(16, 32)),
    ("column slice of a wider weight", fp8(16, 32), fp8(16, 64)[:, :32].t()),
])
def test_layouts_torch_accepts(name, mat1, mat2):
    validate_scaled_mm(mat1, mat2, one(), one())


@given(sizes=st.tuples(st.integers(0, 4), st.integers(0, 4)),
       strides=st.tuples(st.integers(0, 9), st.integers(0, 9)))
def test_dense_rule_is_the_definition(sizes, strides):
    # Non-overlapping and dense: the element offsets are exactly 0 .. numel - 1, once each.
    t = torch.empty(64).as_strided(sizes, strides)
    offsets = sorted(i * strides[0] + j * strides[1] for i in range(sizes[0])
                     for j in range(sizes[1]))
    assert _non_overlapping_and_dense(t) == (offsets == list(range(len(offsets))))


# ---------------------------------------------------------------------------------------------
# Where torch 2.7.1 fails inside cuBLASLt: mmaemu's messages

def test_float8_formats_cublaslt_lacks():
    rejects("mat1 is Float8_e4m3fnuz: cuBLASLt on NVIDIA GPUs multiplies only Float8_e4m3fn and "
            "Float8_e5m2 (torch 2.7.1 fails converting Float8_e4m3fnuz to a cudaDataType in "
            "scaled_gemm)", mat1=fp8(16, 32, torch.float8_e4m3fnuz))


def test_out_dtypes_cublaslt_writes():
    for out in (torch.float32, torch.bfloat16, torch.float16, E4M3):
        validate_scaled_mm(**args(out_dtype=out))
    validate_scaled_mm(**args(mat2=weight_t(16, 32, E5M2), out_dtype=E5M2))
    validate_scaled_mm(**args(mat1=fp8(16, 32, E5M2)))     # default out: mat1's E5M2
    tail = (": cuBLASLt's FP8 GEMM writes Float, BFloat16, Half or Float8_e4m3fn, and "
            "Float8_e5m2 only when an input is Float8_e5m2 (torch 2.7.1 raises "
            "CUBLAS_STATUS_NOT_SUPPORTED from cublasLt)")
    rejects("out_dtype Float8_e5m2 is not supported for Float8_e4m3fn x Float8_e4m3fn inputs"
            + tail, out_dtype=E5M2)
    rejects("out_dtype Int is not supported for Float8_e4m3fn x Float8_e4m3fn inputs" + tail,
            out_dtype=torch.int32)


def test_operands_must_be_16_byte_aligned():
    misaligned = torch.ones(16 * 32 + 1).to(E4M3)[1:].view(16, 32)
    rejects("mat1 starts 1 bytes into its storage, which is not a multiple of 16: cuBLASLt's FP8 "
            "kernels need 16-byte aligned operands (torch 2.7.1 raises CUBLAS_STATUS_NOT_SUPPORTED "
            "from cublasLt). Pass a copy (.contiguous() of a transposed weight: "
            ".t().contiguous().t()) instead.", mat1=misaligned)
    validate_scaled_mm(**args(mat1=torch.ones(17, 32).to(E4M3)[1:]))   # 32 bytes in: aligned


# ---------------------------------------------------------------------------------------------
# Valid for torch, not for mmaemu v0.1

def test_rowwise_path_checks_then_accepted():
    rowwise = dict(scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16))
    rejects("Only bf16 high precision output types are supported for row-wise scaling.",
            **rowwise)
    rejects("Expected b.dtype() == at::kFloat8_e4m3fn to be true, but got false.  (Could this "
            "error message be improved?  If so, please report an enhancement request to "
            "PyTorch.)", mat2=weight_t(16, 32, E5M2), out_dtype=torch.bfloat16, **rowwise)
    v = validate_scaled_mm(**args(out_dtype=torch.bfloat16, **rowwise))
    assert v.scaling == "rowwise" and v.out_dtype == torch.bfloat16


def test_mx_scales_are_unsupported():
    unsupported("MX block scales (Float8_e8m0fnu) are not supported",
                scale_a=torch.empty(512, dtype=E8M0), scale_b=torch.empty(512, dtype=E8M0))


def test_bias_is_accepted_after_torchs_checks():
    v = validate_scaled_mm(**args(bias=torch.ones(16, dtype=torch.float16)))
    assert v.bias_dtype == torch.float16
    v = validate_scaled_mm(**args(bias=torch.ones(16, dtype=torch.bfloat16),
                                  out_dtype=torch.bfloat16))
    assert v.bias_dtype == torch.bfloat16
    # A call torch rejects is ReferenceRejectsError even with a bias.
    rejects("Only multiplication of row-major and column-major matrices is supported by cuBLASLt",
            mat2=fp8(32, 16), bias=torch.ones(16, dtype=torch.float16))


def test_grad_mode_is_unsupported():
    msg = "scaled_mm: scale_a requires grad while grad mode is on"
    unsupported(msg, scale_a=torch.ones((), requires_grad=True))
    with torch.no_grad():
        validate_scaled_mm(**args(scale_a=torch.ones((), requires_grad=True)))
    with torch.inference_mode():
        validate_scaled_mm(**args())


def test_nan_and_inf_scales_are_accepted_and_propagate():
    for value in (math.nan, math.inf, -math.inf):
        validate_scaled_mm(**args(scale_a=torch.tensor(value)))
        validate_scaled_mm(**args(scale_result=torch.tensor(value)))
    a = args()
    y = torch.ops.mmaemu.scaled_mm(a["mat1"], a["mat2"], torch.tensor(math.nan), one(),
                                   None, None, torch.float32)
    assert torch.isnan(y).all()
    y = torch.ops.mmaemu.scaled_mm(a["mat1"], a["mat2"], torch.tensor(math.inf), one(),
                                   None, None, torch.float32)
    assert (y == math.inf).all()     # 32 * inf


def test_other_devices_and_layouts_are_unsupported():
    unsupported("scaled_mm: scale_a has layout torch.sparse_coo",
                scale_a=torch.tensor([1.0]).to_sparse())


def test_first_failing_check_in_torchs_order_wins():
    # Not Float8 and K % 16 != 0: torch checks divisibility first.
    rejects("Expected trailing dimension of mat1 to be divisible by 16 but got mat1 shape: "
            "(16x24).", mat1=torch.ones(16, 24), mat2=torch.ones(24, 16))
    # Bad scale dtype and bad shapes: the shapes come first.
    rejects("mat1 and mat2 shapes cannot be multiplied (16x32 and 48x16)", mat2=weight_t(16, 48),
            scale_a=torch.ones((), dtype=torch.float16))


# ---------------------------------------------------------------------------------------------
# Python argument types

@pytest.mark.parametrize("overrides,message", [
    (dict(mat1=3), "scaled_mm(): argument 'mat1' (position 1) must be Tensor, not int"),
    (dict(scale_b=1.0), "scaled_mm(): argument 'scale_b' (position 4) must be Tensor, not float"),
    (dict(bias="x"), "scaled_mm(): argument 'bias' (position 5) must be Tensor or None, not str"),
    (dict(out_dtype="bf16"),
     "scaled_mm(): argument 'out_dtype' (position 7) must be torch.dtype or None, not str"),
    (dict(use_fast_accum=1),
     "scaled_mm(): argument 'use_fast_accum' (position 8) must be bool, not int"),
])
def test_wrong_python_types_raise_type_error(overrides, message):
    a = args()
    a.update(overrides)
    e = expect(TypeError, TypeError, message, validate_scaled_mm, **a)
    assert not isinstance(e, MmaemuError)


def test_dtype_names_are_torchs():
    # The C++ op prints c10's names; the validator must print the same.
    a = args()
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                  torch.uint8, torch.int32, torch.int64, torch.bool, torch.complex64):
        with pytest.raises(RuntimeError) as info:
            torch.ops.mmaemu.scaled_mm(torch.zeros(16, 32, dtype=dtype), a["mat2"], one(), one())
        assert f"Expected mat1 to be Float8 matrix got {torch_name(dtype)}" in str(info.value)


# ---------------------------------------------------------------------------------------------
# accumulate and mma

def test_accumulate_checks():
    x, w = fp8(16, 32), fp8(3, 32)          # N need not be a multiple of 16
    v = validate_accumulate(x, w, True)
    assert (v.M, v.N, v.K, v.out_dtype, v.empty) == (16, 3, 32, torch.float32, False)

    def rej(message, x=x, w=w):
        expect(ReferenceRejectsError, RuntimeError, message, validate_accumulate, x, w, False)
    rej("x must be a matrix", x=torch.ones(32).to(E4M3))
    rej("x and w shapes cannot be multiplied as x @ w.T (16x32 and 16x48)", w=fp8(16, 48))
    # the model's accumulator is defined for any K and layout: torch's cuBLASLt rules do not apply
    assert validate_accumulate(fp8(16, 24), fp8(16, 24), False).K == 24
    assert validate_accumulate(x, fp8(32, 16).t(), False).N == 16
    rej("Expected w to be Float8 matrix got Half", w=torch.ones(16, 32, dtype=torch.float16))
    rej("Multiplication of two Float8_e5m2 matrices is not supported", x=fp8(16, 32, E5M2),
        w=fp8(16, 32, E5M2))
    rej("Expected tensor for argument #2 'w' to be on the same device as the result (x's "
        "device, cpu), but it is on meta (while checking arguments for accumulate)",
        w=fp8(16, 32, device="meta"))
    for flag in (None, 0, "yes"):
        with pytest.raises(TypeError,
                           match="argument 'use_fast_accum' \\(position 3\\) must be bool"):
            validate_accumulate(x, w, flag)
    with pytest.raises(TypeError):
        validate_accumulate(x, w)           # no default on purpose
    assert validate_accumulate(fp8(0, 32), w, False).empty


def test_mma_checks():
    a, b, c = fp8(4, 64), fp8(4, 64, E5M2), torch.zeros(4)
    assert validate_mma(a, b, c, 32) == ValidatedMma(n=4, K=64, fmt_a="e4m3", fmt_b="e5m2",
                                                     device=torch.device("cpu"))
    validate_mma(fp8(4, 64, E5M2), fp8(4, 64, E5M2), c, 16)     # every format pair

    def bad(message, a=a, b=b, c=c, block=32):
        expect(ValueError, ValueError, message, validate_mma, a, b, c, block)
    bad("mmaemu.mma: a and b must be [n, K] matrices of the same shape, got a (4, 64) and "
        "b (4, 32)", b=fp8(4, 32))
    bad("mmaemu.mma: b must be float8_e4m3fn or float8_e5m2, got torch.float32",
        b=torch.ones(4, 64))
    bad("mmaemu.mma: c must be a float32 vector of length 4, got torch.float64 (4,)",
        c=torch.zeros(4, dtype=torch.float64))
    bad("mmaemu.mma: K = 48 is not a multiple of the preset's block size 32", a=fp8(4, 48),
        b=fp8(4, 48))
    bad("mma(): block must be at least 1, got 0", block=0)
    bad("mmaemu.mma: a, b and c must be on one device, but a is on cpu and c on meta",
        c=torch.zeros(4, device="meta"))
    expect(TypeError, TypeError, "mma(): block must be int, not float", validate_mma, a, b, c,
           32.0)
    with pytest.raises(UnsupportedFeatureError, match="c requires grad"):
        validate_mma(a, b, torch.zeros(4, requires_grad=True), 32)


# ---------------------------------------------------------------------------------------------
# The bad-input table: validator verdicts, the C++ op never crashes, the process keeps working

def _meta(rows, cols, dtype=E4M3):
    return torch.empty(rows, cols, device="meta", dtype=dtype)


# (id, builder of the call's arguments, expected verdict: None = accepted, else the class,
#  run_op: whether torch.ops.mmaemu.scaled_mm is also called with these arguments)
BAD_INPUTS = [
    ("float32 operands", lambda: args(mat1=torch.ones(16, 32)), ReferenceRejectsError, True),
    ("int8 weight", lambda: args(mat2=torch.ones(16, 32, dtype=torch.int8).t()),
     ReferenceRejectsError, True),
    ("bool operands", lambda: args(mat1=torch.ones(16, 32, dtype=torch.bool)),
     ReferenceRejectsError, True),
    ("fnuz operand", lambda: args(mat1=fp8(16, 32, torch.float8_e5m2fnuz)),
     ReferenceRejectsError, True),
    ("e5m2 x e5m2", lambda: args(mat1=fp8(16, 32, E5M2), mat2=weight_t(16, 32, E5M2)),
     ReferenceRejectsError, True),
    ("3-D mat1", lambda: args(mat1=torch.ones(1, 16, 32).to(E4M3)), ReferenceRejectsError, True),
    ("0-D mat2", lambda: args(mat2=torch.tensor(1.0).to(E4M3)), ReferenceRejectsError, True),
    ("column-major mat1", lambda: args(mat1=fp8(32, 16).t()), ReferenceRejectsError, True),
    ("row-major mat2", lambda: args(mat2=fp8(32, 16)), ReferenceRejectsError, True),
    ("mat2 strided both ways", lambda: args(mat2=fp8(16, 64)[:, ::2].t()),
     ReferenceRejectsError, True),
    ("mat2 with stride-0 rows", lambda: args(mat2=fp8(1, 32).expand(16, 32).t()),
     ReferenceRejectsError, True),
    ("non-contiguous mat1 view", lambda: args(mat1=fp8(16, 64)[:, ::2]), None, True),
    ("mat1 with stride-0 rows", lambda: args(mat1=fp8(1, 32).expand(16, 32)), None, True),
    ("misaligned mat1", lambda: args(mat1=torch.ones(513).to(E4M3)[1:].view(16, 32)),
     ReferenceRejectsError, True),
    ("K not divisible by 16", lambda: args(K=40), ReferenceRejectsError, True),
    ("N not divisible by 16", lambda: args(N=8), ReferenceRejectsError, True),
    ("K mismatch", lambda: args(mat2=weight_t(16, 48)), ReferenceRejectsError, True),
    ("scale_a on meta", lambda: args(scale_a=torch.ones((), device="meta")),
     ReferenceRejectsError, True),
    ("mat2 on meta", lambda: args(mat2=_meta(16, 32).t()), ReferenceRejectsError, True),
    ("M = 0", lambda: args(M=0), None, True),
    ("N = 0", lambda: args(N=0), None, True),
    ("K = 0", lambda: args(K=0), None, True),
    ("K = 0 with a row-major mat2", lambda: args(K=0, mat2=fp8(0, 16)), None, True),
    ("M * K > 2**32 by a stride-0 view", lambda: args(mat1=fp8(1, 32).expand(2**27, 32)),
     None, False),
    ("K > 2**31 on meta",
     lambda: dict(mat1=_meta(16, 2**31 + 16), mat2=_meta(16, 2**31 + 16).t(),
                  scale_a=torch.ones((), device="meta"), scale_b=torch.ones((), device="meta")),
     None, True),
    ("M * N > 2**32 on meta",
     lambda: dict(mat1=_meta(2**20, 32), mat2=_meta(2**20, 32).t(),
                  scale_a=torch.ones((), device="meta"), scale_b=torch.ones((), device="meta")),
     None, True),
    ("M * N bytes overflow int64 on meta",
     lambda: dict(mat1=_meta(2**57, 32), mat2=_meta(2**57, 32).t(),
                  scale_a=torch.ones((), device="meta"), scale_b=torch.ones((), device="meta")),
     ReferenceRejectsError, False),
    ("NaN scale_a", lambda: args(scale_a=torch.tensor(math.nan)), None, True),
    ("Inf scale_b", lambda: args(scale_b=torch.tensor(-math.inf)), None, True),
    ("NaN scale_result", lambda: args(scale_result=torch.tensor(math.nan)), None, True),
    ("float64 scale", lambda: args(scale_a=torch.tensor(1.0, dtype=torch.float64)),
     ReferenceRejectsError, True),
    ("int scale", lambda: args(scale_b=torch.tensor(1)), ReferenceRejectsError, True),
    ("empty scale", lambda: args(scale_a=torch.ones(0)), ReferenceRejectsError, True),
    ("(M, 2) scale", lambda: args(scale_a=torch.ones(16, 2)), ReferenceRejectsError, True),
    ("row-wise scales", lambda: args(scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16),
                                     out_dtype=torch.bfloat16), None, True),
    ("two-element scale_result", lambda: args(scale_result=torch.ones(2)),
     ReferenceRejectsError, True),
    ("out_dtype float64", lambda: args(out_dtype=torch.float64), ReferenceRejectsError, True),
    ("out_dtype int32", lambda: args(out_dtype=torch.int32), ReferenceRejectsError, True),
    ("out_dtype e5m2 for e4m3 inputs", lambda: args(out_dtype=E5M2), ReferenceRejectsError, True),
    ("bias", lambda: args(bias=torch.ones(16, dtype=torch.bfloat16), out_dtype=torch.bfloat16),
     None, True),
    ("row-wise bias with a stride", lambda: args(
        scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16), out_dtype=torch.bfloat16,
        bias=torch.ones(32, dtype=torch.bfloat16)[::2]), ReferenceRejectsError, True),
    ("grad mode", lambda: args(scale_b=torch.ones((), requires_grad=True)),
     UnsupportedFeatureError, True),
    ("non-tensor mat1", lambda: args(mat1=[[1.0]]), TypeError, True),
    ("string out_dtype", lambda: args(out_dtype="float32"), TypeError, True),
]


def _run_op(a):
    return torch.ops.mmaemu.scaled_mm(a["mat1"], a["mat2"], a["scale_a"], a["scale_b"],
                                      a.get("bias"), a.get("scale_result"), a.get("out_dtype"),
                                      a.get("use_fast_accum", False))


def test_bad_input_table():
    for name, build, verdict, run_op in BAD_INPUTS:
        a = build()
        if verdict is None:
            assert isinstance(validate_scaled_mm(**a), ValidatedCall), name
        else:
            with pytest.raises(verdict):
                validate_scaled_mm(**a)
        if run_op:
            # The C++ op, called directly, re-checks what it relies on: a clean Python
            # exception or a tensor, never a crash.
            try:
                out = _run_op(a)
            except (RuntimeError, TypeError, ValueError, NotImplementedError):
                continue
            assert isinstance(out, torch.Tensor), name
            if out.device.type == "cpu" and a["mat1"].dim() == 2:
                assert out.shape == (a["mat1"].shape[0], a["mat2"].shape[-1]), name

    # The process still computes exactly: all-ones 16 x 32 operands give 32.0 everywhere.
    a = args()
    assert validate_scaled_mm(**a, out_dtype=torch.float32).M == 16
    y = mmaemu.scaled_mm(**a, out_dtype=torch.float32, splitk=1)
    mmaemu.testing.assert_bitwise_equal(y, torch.full((16, 16), 32.0))


def test_unwritable_cache_dir_is_not_an_error(tmp_path, monkeypatch):
    """MMAEMU_CACHE_DIR that cannot be created (a file is in the way): storing a self-test
    verdict does nothing, reading one finds none, and calls keep computing. (With a driver and
    NVRTC, test_cuda_loader.py checks that cubins are then compiled but not cached.)"""
    from mmaemu.runtime import facts, loader
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(blocker / "cache"))
    assert loader.cache_dir() == str(blocker / "cache")
    facts._store("selftest", "key", {"passed": True})   # in memory; the disk write fails quietly
    facts.forget()                                         # as a new process: the disk has none
    assert facts._load("selftest", "key") is None
    a = args()
    y = mmaemu.scaled_mm(**a, out_dtype=torch.float32, splitk=1)
    mmaemu.testing.assert_bitwise_equal(y, torch.full((16, 16), 32.0))
