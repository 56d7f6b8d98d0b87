"""The kernels: a view of the C core's kernel table, and the guide's names this build lacks.

The facts of every CUDA kernel (presets, block, capabilities, gating, exactness, whether it
computes the round-robin split layout) are the C core's table (csrc/cuda/kernel_table.c,
read through mmaemu._C.kernel_table()); nothing here is decided. A leaf: it imports only the C extension.
"""
import collections

from .. import _C

Kernel = collections.namedtuple(
    "Kernel", "name presets block min_cc only_cc gated exact round_robin_splits description")

KERNELS = collections.OrderedDict(
    (e["name"], Kernel(e["name"], tuple(e["presets"]), e["block"], e["min_cc"], e["only_cc"],
                       e["gated"], e["exact"], e["round_robin_splits"], e["description"]))
    for e in _C.kernel_table())

# Named by the user guide, not part of this build.
NOT_BUILT = collections.OrderedDict([
    ("cuda:v9", "not part of this build: its bf16 tensor-core exponent trick was validated only on "
                "sm_89 (RTX 4060) and has not been reimplemented and revalidated here"),
    ("cuda:tc3", "not part of this build: its fp16 tensor-core trick was validated only on "
                 "sm_80/86/89 binaries and has not been reimplemented and revalidated here"),
])

# The CPU executor's narrow kernels, as the C core describes them (name, available on this CPU,
# row_step, w: the tile geometry whose padding decides a GEMM's time, and a note).
SIMD_KERNELS = collections.OrderedDict((k["name"], k) for k in _C.cpu_simd_kernels())

# What backend= takes: a policy ("auto", "cuda"), a place ("cpu", "reference"), a CUDA kernel,
# or an executor name a plan prints (a CPU SIMD kernel, the CUDA reference kernel). Which
# executor a request resolves to is planning/executors.py's.
BACKEND_NAMES = ("auto", "reference", "cpu", "cuda") \
    + tuple(k for k in KERNELS if k != "reference") + tuple(NOT_BUILT) \
    + ("cuda:reference",) + tuple(f"cpu:{n}" for n in SIMD_KERNELS)
