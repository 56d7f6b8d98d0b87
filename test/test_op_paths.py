"""One op layer: every way of calling mmaemu gives the eager outcome.

Each case is a scaled_mm call (test_validation.py's bad-input table, and every refusal: bias,
row-wise scales on Ada, grad mode, E5M2 x E5M2, layouts, divisibility, an unknown split). Its
eager outcome (the result's bits, or the exception's class and message) must be what eager
mmaemu.scaled_mm, torch.compile (inductor and aot_eager, fullgraph, static and dynamic
shapes), torch.export, torch.jit.trace and emulate() give. TorchScript turns every exception
into torch.jit.Error: there the test checks exactly that, with the eager message inside.
One compiled function per compile mode serves every case (compiles are slow).
"""
import warnings
from typing import Optional

import pytest
import torch

import mmaemu
from mmaemu.nn import EmulatedFP8Linear
from mmaemu.testing import bits

from test_validation import BAD_INPUTS, args, fp8, weight_t

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
NAMES = ("mat1", "mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype",
         "use_fast_accum")
BF16 = dict(out_dtype=torch.bfloat16)


def _full(a, profile="hopper", splitk=1):
    call = {n: a.get(n) for n in NAMES}
    call["use_fast_accum"] = a.get("use_fast_accum", False)
    return call, profile, splitk


def _bad_table_cases():
    for name, build, verdict, run_op in BAD_INPUTS:
        if verdict is None and not run_op:
            continue    # accepted, and too large to compute here (2**27 rows)
        yield name, (lambda build=build: _full(build()))


REFUSALS = [
    ("bias with an fp32 output", lambda: _full(args(out_dtype=torch.float32,
                                                    bias=torch.ones(16, dtype=torch.bfloat16)))),
    ("fp32 bias", lambda: _full(args(out_dtype=torch.bfloat16, bias=torch.ones(16)))),
    ("fp16 bias for a bf16 output", lambda: _full(args(out_dtype=torch.bfloat16,
                                                       bias=torch.ones(16, dtype=torch.half)))),
    ("bias of 8 elements", lambda: _full(args(bias=torch.ones(8, dtype=torch.bfloat16),
                                              out_dtype=torch.bfloat16))),
    ("row-wise scales on ada", lambda: _full(args(scale_a=torch.ones(16, 1),
                                                  scale_b=torch.ones(1, 16), **BF16), "ada")),
    ("row-wise scales with splitk=(2, ...)", lambda: _full(
        args(scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16), **BF16), "hopper",
        (2, "contiguous"))),
    ("scale_a requires grad", lambda: _full(args(scale_a=torch.ones((), requires_grad=True)))),
    ("row-major mat2, fp32 output", lambda: _full(args(mat2=fp8(32, 16), out_dtype=torch.float32))),
    ("column-major mat1, bf16 output", lambda: _full(args(mat1=fp8(32, 16).t(), **BF16))),
    ("K = 40", lambda: _full(args(K=40, **BF16))),
    ("N = 24", lambda: _full(args(N=24, **BF16))),
    ("e5m2 x e5m2, bf16 output", lambda: _full(args(mat1=fp8(16, 32, E5M2),
                                                    mat2=weight_t(16, 32, E5M2), **BF16))),
    ("unknown split (splitk='auto')", lambda: _full(args(**BF16), "hopper", "auto")),
    ("splitk=2", lambda: _full(args(**BF16), "hopper", 2)),
    ("unknown profile", lambda: _full(args(**BF16), "h100", 1)),
]

CASES = list(_bad_table_cases()) + REFUSALS
UNTRACEABLE = {"M * N bytes overflow int64 on meta"}
IDS = [name for name, _ in CASES]


def outcome(fn):
    """('returns', dtype, shape, bit patterns) or ('raises', class, message)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = fn()
    except Exception as e:      # noqa: BLE001  (the outcome is what is compared)
        return ("raises", type(e), str(e))
    if y.device.type == "meta":
        return ("returns", y.dtype, tuple(y.shape), None)
    return ("returns", y.dtype, tuple(y.shape), bits(y).flatten().tolist())


def gemm_for(profile, splitk):
    """The function a user compiles: profile and splitk are constants of the traced code."""
    def gemm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum):
        return mmaemu.scaled_mm(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                                use_fast_accum, profile=profile, splitk=splitk)
    return gemm


COMPILE_MODES = [("aot_eager", False), ("aot_eager", True), ("inductor", False),
                 ("inductor", True)]


@pytest.fixture(scope="module")
def compiled():
    """compiled(mode, profile, splitk): one compiled function per mode and constants."""
    cache = {}

    def get(mode, profile, splitk):
        key = (mode, profile, repr(splitk))
        if key not in cache:
            cache[key] = torch.compile(gemm_for(profile, splitk), fullgraph=True,
                                       backend=mode[0], dynamic=mode[1])
        return cache[key]
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=10_000, accumulated_recompile_limit=10_000):
        yield get
    torch._dynamo.reset()


class Exported(torch.nn.Module):
    """A module over the call's tensor arguments (None ones are constants of the module)."""

    def __init__(self, call, profile, splitk):
        super().__init__()
        self.call, self.profile, self.splitk = call, profile, splitk
        self.names = [n for n in NAMES[:6] if call[n] is not None]

    def inputs(self):
        return tuple(self.call[n] for n in self.names)

    def forward(self, *tensors):
        a = dict(self.call, **dict(zip(self.names, tensors)))
        return gemm_for(self.profile, self.splitk)(**a)


class Scripted(torch.nn.Module):
    """TorchScript code calling the planning op (what EmulatedFP8Linear scripts to)."""

    def forward(self, mat1, mat2, scale_a, scale_b, bias: Optional[torch.Tensor],
                scale_result: Optional[torch.Tensor], out_dtype: Optional[torch.dtype],
                use_fast_accum: bool, profile: str, splitk: str):
        return torch.ops.mmaemu.profile_scaled_mm(mat1, mat2, scale_a, scale_b, bias,
                                                  scale_result, out_dtype, use_fast_accum,
                                                  profile, None, splitk)


def _tensors_only(call):
    return all(isinstance(call[n], torch.Tensor) or (call[n] is None and n in ("bias",
               "scale_result")) for n in NAMES[:6]) and (call["out_dtype"] is None or
                                                       isinstance(call["out_dtype"], torch.dtype))


def _all_meta(call):
    return all(isinstance(call[n], torch.Tensor) and call[n].device.type == "meta"
               for n in NAMES[:6] if call[n] is not None)


def _emulated(call, profile, splitk):
    with mmaemu.emulate(profile=profile, splitk=splitk):
        return torch._scaled_mm(*(call[n] for n in NAMES))


def _scripted(call, profile, splitk, scripted=torch.jit.script(Scripted())):
    text = mmaemu.ops.encode_splitk(splitk, profile)
    return scripted(*(call[n] for n in NAMES), profile, text)


@pytest.mark.parametrize("name,build", CASES, ids=IDS)
def test_every_path_gives_the_eager_outcome(name, build, compiled):
    call, profile, splitk = build()
    expected = outcome(lambda: gemm_for(profile, splitk)(**call))
    got = {}
    for mode in COMPILE_MODES:
        if mode[0] == "inductor" and _all_meta(call):
            continue    # inductor makes a graph of meta tensors' outputs itself (docs/api.md)
        got[f"compile {mode}"] = outcome(lambda: compiled(mode, profile, splitk)(**call))
    if name in UNTRACEABLE:
        # The fake kernel cannot make an output of more than 2**63 bytes with static sizes:
        # torch refuses it while tracing (TorchRuntimeError, or inductor's RuntimeError).
        for path, result in got.items():
            assert result == expected or (result[0] == "raises" and result[1] in (
                torch._dynamo.exc.TorchRuntimeError, RuntimeError)), (name, path)
        return
    if not _tensors_only(call):
        # A wrong Python type is refused while tracing: torch reports Unsupported, its
        # message holds the TypeError's (docs/api.md); emulate() sees torch's own parser.
        for path, result in got.items():
            assert result[:2] == ("raises", torch._dynamo.exc.Unsupported), (name, path)
        return
    m = Exported(call, profile, splitk)
    got["jit.trace"] = outcome(
        lambda: torch.jit.trace(m, m.inputs(), check_trace=False)(*m.inputs()))
    got["torch.export"] = outcome(lambda: torch.export.export(m, m.inputs()).module()(
        *m.inputs()))
    got["emulate"] = outcome(lambda: _emulated(call, profile, splitk))
    for path, result in got.items():
        assert result == expected, f"{name}: {path}"
    # TorchScript: every exception becomes a plain RuntimeError whose message holds the text.
    scripted = outcome(lambda: _scripted(call, profile, splitk))
    if expected[0] == "returns":
        assert scripted == expected
    elif scripted[0] == "raises" and scripted[1] is not expected[1]:
        assert scripted[1] is RuntimeError and expected[2] in scripted[2], name


# ---------------------------------------------------------------------------------------------
# Valid calls: the same bits through every path, for several M in one compiled function; the
# split is decided for each call's own M (N = 64, K = 8192: hopper's table splits K in 3 for
# M >= 16; M = 8 is unknown to it).

def _operands(M, N=64, K=8192, seed=0):
    g = torch.Generator().manual_seed(seed + M)
    x = (torch.randn(M, K, generator=g) * 2).to(E4M3)
    w = (torch.randn(N, K, generator=g) * 2).to(E4M3)
    return x, w.t(), torch.tensor(0.5), torch.tensor(2.0)


VALID = dict(bias=None, scale_result=None, out_dtype=torch.bfloat16, use_fast_accum=True)


@pytest.mark.parametrize("profile,splitk", [("hopper", "auto"), ("hopper-ws0", "auto"),
                                            ("hopper", 1)])
def test_valid_calls_give_eager_bits_on_every_path(profile, splitk, compiled):
    gemm = gemm_for(profile, splitk)
    eager = {M: outcome(lambda: gemm(*_operands(M), **VALID)) for M in (16, 32, 48, 8)}
    assert eager[16][0] == "returns"
    if (profile, splitk) == ("hopper", "auto"):
        assert eager[8][1] is mmaemu.SplitKUnknownError      # decided per M, at run time
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            one = gemm_for("hopper", 1)(*_operands(16), **VALID)
        assert bits(one).flatten().tolist() != eager[16][3]     # S = 3 gives other bits here
    for mode in COMPILE_MODES:
        fn = compiled(mode, profile, splitk)
        for M in (16, 32, 48, 8):
            assert outcome(lambda: fn(*_operands(M), **VALID)) == eager[M], (mode, M)
    # torch.jit.trace at M = 32, run at other M: the plan is made when the traced op runs.
    m = Exported(dict(zip(NAMES, (*_operands(32), *VALID.values()))), profile, splitk)
    traced = torch.jit.trace(m, m.inputs(), check_trace=False)
    exported = torch.export.export(m, m.inputs(), dynamic_shapes=((
        {0: torch.export.Dim("M", min=1, max=4096)}, None, None, None),)).module()
    scripted = torch.jit.script(Scripted())
    for M in (16, 48, 8):
        ops_ = _operands(M)
        assert outcome(lambda: exported(*ops_)) == eager[M], ("export", M)
        assert outcome(lambda: _emulated(dict(zip(NAMES, (*ops_, *VALID.values()))), profile,
                                         splitk)) == eager[M], ("emulate", M)
        got = outcome(lambda: traced(*ops_))
        script = outcome(lambda: scripted(*ops_, *VALID.values(), profile,
                                          mmaemu.ops.encode_splitk(splitk, profile)))
        for path, result in (("jit.trace", got), ("jit.script", script)):
            if eager[M][0] == "returns":
                assert result == eager[M], (path, M)
            else:   # TorchScript: a RuntimeError holding the message
                assert result[1] is RuntimeError and eager[M][2] in result[2], (path, M)


# ---------------------------------------------------------------------------------------------
# EmulatedFP8Linear: the refusals its input can express, on every path.

# Refusals fixed by the layer's own arguments: the constructor raises them, with torch's message
# (the one the GEMM op gives for the same operands), so no forward pass can meet them.
_REFUSED_AT_CONSTRUCTION = [
    ("K = 40", dict(weight=torch.zeros(32, 40)), dict(K=40)),
    ("N = 24", dict(weight=torch.zeros(24, 64)), dict(K=64, N=24)),
    ("fused bias with an fp32 output",
     dict(weight=torch.zeros(32, 64), out_dtype=torch.float32, bias=torch.ones(32),
          fuse_bias=True),
     dict(K=64, N=32, out_dtype=torch.float32, bias=torch.ones(32, dtype=torch.bfloat16))),
]


@pytest.mark.parametrize("name,layer_args,call", _REFUSED_AT_CONSTRUCTION,
                         ids=[c[0] for c in _REFUSED_AT_CONSTRUCTION])
def test_emulated_linear_refuses_at_construction(name, layer_args, call):
    op = outcome(lambda: mmaemu.scaled_mm(**_full(args(**call))[0], profile="hopper", splitk=1))
    assert op[:2] == ("raises", mmaemu.ReferenceRejectsError), op
    kw = dict(layer_args)
    with pytest.raises(mmaemu.ReferenceRejectsError) as e:
        EmulatedFP8Linear(kw.pop("weight"), 2.0, 8.0, "hopper", splitk=1, **kw)
    assert op[2] in str(e.value), (str(e.value), op[2])     # both with 16 rows


def _layer_cases():
    yield "valid", EmulatedFP8Linear(torch.randn(32, 64), 2.0, 8.0, "hopper", splitk=1), \
        torch.randn(4, 64)
    yield "input requires grad", EmulatedFP8Linear(torch.randn(32, 64), 2.0, 8.0, "hopper",
                                                   splitk=1), \
        torch.randn(4, 64, requires_grad=True)
    yield "unknown split", EmulatedFP8Linear(torch.randn(32, 64), 2.0, 8.0, "hopper"), \
        torch.randn(4, 64)


@pytest.fixture
def recompiles():
    """Every case compiles forward again (a new module fails the guards of the last): more
    recompiles than dynamo's default limit, which the `compiled` fixture raises only while it
    is alive (when this test runs alone, it is not)."""
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=10_000, accumulated_recompile_limit=10_000):
        yield


@pytest.mark.parametrize("name,layer,x", list(_layer_cases()),
                         ids=[c[0] for c in _layer_cases()])
def test_emulated_linear_paths(name, layer, x, recompiles):
    expected = outcome(lambda: layer(x))
    assert (expected[0] == "returns") == (name == "valid"), expected
    got = {}
    for backend, dynamic in COMPILE_MODES:
        fn = torch.compile(layer, fullgraph=True, backend=backend, dynamic=dynamic)
        got[(backend, dynamic)] = outcome(lambda: fn(x))
    got["export"] = outcome(lambda: torch.export.export(layer, (x,)).module()(x))
    for path, result in got.items():
        assert result == expected, (name, path)
    scripted = outcome(lambda: torch.jit.script(layer)(x))
    if expected[0] == "returns":
        assert scripted == expected
    else:
        assert scripted[1] is RuntimeError and expected[2] in scripted[2]


def test_accumulate_paths(compiled):
    def acc(x, w):
        return mmaemu.accumulate(x, w, use_fast_accum=True, splitk="auto")
    cases = [_operands(M)[:2] for M in (16, 32, 8)]
    cases = [(x, wt.t()) for x, wt in cases] + [
        (fp8(16, 40), fp8(16, 40)),                             # K not divisible by 16
        (fp8(16, 32, E5M2), fp8(16, 32, E5M2)),                  # e5m2 x e5m2
        (fp8(16, 32), fp8(32, 16).t())]                          # w column-major
    fns = {mode: torch.compile(acc, fullgraph=True, backend=mode[0], dynamic=mode[1])
           for mode in (("aot_eager", True), ("inductor", True))}
    for x, w in cases:
        expected = outcome(lambda: acc(x, w))
        for mode, fn in fns.items():
            assert outcome(lambda: fn(x, w)) == expected, mode
        assert outcome(lambda: torch.export.export(_Acc(), (x, w))
                       .module()(x, w)) == expected
    assert outcome(lambda: acc(*cases[2]))[1] is mmaemu.SplitKUnknownError


class _Acc(torch.nn.Module):
    def forward(self, x, w):
        return mmaemu.accumulate(x, w, use_fast_accum=True, splitk="auto")
