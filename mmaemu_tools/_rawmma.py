"""Raw FP8 tensor-core instructions on an sm_90 GPU, compiled at run time (probes P0, P1, P9).

Two kernels per format pair, both computing D = A . B^T + C tile by tile with K a multiple of 32:
  wgmma_<fa>_<fb>:  one warpgroup (128 threads) per 64x8 tile, `wgmma.mma_async.m64n8k32`
                    with A and B in shared memory (K-major, no swizzle), chained over K in the
                    accumulator registers. c_mode 0: the first instruction runs with scale-d = 0
                    (D = A.B, as a GEMM's first k-step does); c_mode 1: C is loaded into the
                    accumulator and every instruction runs with scale-d = 1.
  mma_<fa>_<fb>:    one warp per 16x8 tile, `mma.sync.aligned.m16n8k32` (the Ada instruction,
                    also legal on sm_90), chained the same way.
Tensors: A [T, R, K] uint8, B [T, 8, K] uint8, C and D [T, R, 8] float32 with R = 64 (wgmma) or
16 (mma). The kernels are compiled with NVRTC for sm_90a (wgmma needs the "a" target), loaded
through the CUDA driver API into the context torch uses, and launched on torch's stream.
Everything goes through ctypes; nothing here is needed on machines without a GPU.

Shared-memory layout for wgmma (PTX ISA, "Shared Memory Matrix Layout", K-major, no swizzle):
8x16-byte core matrices; core (i, kb) of A (rows 8i..8i+7, bytes 16kb..16kb+15 of the k32 step)
at byte i*256 + kb*128, row r of a core at +16r. Descriptor: start >> 4 in bits 0-13, leading
byte offset (next core along K = 128) >> 4 in bits 16-29, stride byte offset (next core along
M/N = 256) >> 4 in bits 32-45, swizzle 0. Accumulator fragment (m64nN, f32): thread t of warp w
holds rows 16w + (lane>>2) [+8] and columns 2*(lane&3) [+1]. `layout_self_test` checks all of
this on the device with exactly representable integers before any result is interpreted.
"""
import ctypes
import glob
import os

import numpy as np
import torch

from ._hwcommon import load_standalone

library_candidates = load_standalone("runtime/cuda_libs").library_candidates

FORMATS = {"e4m3": "e4m3", "e5m2": "e5m2"}

_PRELUDE = r"""
__device__ __forceinline__ unsigned int load4(const unsigned char* p)
{
    return (unsigned int)p[0] | ((unsigned int)p[1] << 8) | ((unsigned int)p[2] << 16) |
           ((unsigned int)p[3] << 24);
}

"""

_KERNEL_TEMPLATE = r"""
extern "C" __global__ void __launch_bounds__(128, 1)
wgmma_{FA}_{FB}(const unsigned char* A, const unsigned char* B, const float* C, float* D,
                int K, int c_mode)
{
    __shared__ __align__(1024) unsigned char sa[64 * 32];
    __shared__ __align__(1024) unsigned char sb[8 * 32];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, q = lane & 3;
    const long long t = blockIdx.x;
    const unsigned char* At = A + t * 64LL * K;
    const unsigned char* Bt = B + t * 8LL * K;
    float d[4];
    for (int i = 0; i < 4; i++) {
        const int row = warp * 16 + g + (i >> 1) * 8, col = q * 2 + (i & 1);
        d[i] = c_mode ? C[t * 512 + row * 8 + col] : 0.0f;
    }
    unsigned int sa_addr, sb_addr;
    asm volatile("{ .reg .u64 p; cvta.to.shared.u64 p, %1; cvt.u32.u64 %0, p; }"
                 : "=r"(sa_addr) : "l"(sa));
    asm volatile("{ .reg .u64 p; cvta.to.shared.u64 p, %1; cvt.u32.u64 %0, p; }"
                 : "=r"(sb_addr) : "l"(sb));
    const unsigned long long lbo = 128 >> 4, sbo = 256 >> 4;
    const unsigned long long desc_a = ((unsigned long long)((sa_addr & 0x3FFFF) >> 4)) | (lbo << 16) | (sbo << 32);
    const unsigned long long desc_b = ((unsigned long long)((sb_addr & 0x3FFFF) >> 4)) | (lbo << 16) | (sbo << 32);
    for (int k0 = 0; k0 < K; k0 += 32) {
        __syncthreads();
        for (int e = tid; e < 64 * 32; e += 128) {
            const int i = e >> 8, kb = (e >> 7) & 1, r = (e >> 4) & 7, c = e & 15;
            sa[e] = At[(long long)(i * 8 + r) * K + k0 + kb * 16 + c];
        }
        for (int e = tid; e < 8 * 32; e += 128) {
            const int kb = e >> 7, r = (e >> 4) & 7, c = e & 15;
            sb[e] = Bt[(long long)r * K + k0 + kb * 16 + c];
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        const int scale_d = (k0 == 0 && !c_mode) ? 0 : 1;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        asm volatile(
            "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
            " wgmma.mma_async.sync.aligned.m64n8k32.f32.{FA}.{FB} {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "l"(desc_a), "l"(desc_b), "r"(scale_d) : "memory");
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    }
    for (int i = 0; i < 4; i++) {
        const int row = warp * 16 + g + (i >> 1) * 8, col = q * 2 + (i & 1);
        D[t * 512 + row * 8 + col] = d[i];
    }
}

extern "C" __global__ void mma_{FA}_{FB}(const unsigned char* A, const unsigned char* B,
                                         const float* C, float* D, int K, int c_mode)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const long long t = blockIdx.x;
    const unsigned char* At = A + t * 16LL * K;
    const unsigned char* Bt = B + t * 8LL * K;
    const float* Ct = C + t * 128;
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    if (c_mode) {
        d0 = Ct[g * 8 + q * 2]; d1 = Ct[g * 8 + q * 2 + 1];
        d2 = Ct[(g + 8) * 8 + q * 2]; d3 = Ct[(g + 8) * 8 + q * 2 + 1];
    }
    for (int k0 = 0; k0 < K; k0 += 32) {
        const unsigned int a0 = load4(At + (long long)g * K + k0 + q * 4);
        const unsigned int a1 = load4(At + (long long)(g + 8) * K + k0 + q * 4);
        const unsigned int a2 = load4(At + (long long)g * K + k0 + 16 + q * 4);
        const unsigned int a3 = load4(At + (long long)(g + 8) * K + k0 + 16 + q * 4);
        const unsigned int b0 = load4(Bt + (long long)g * K + k0 + q * 4);
        const unsigned int b1 = load4(Bt + (long long)g * K + k0 + 16 + q * 4);
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.{FA}.{FB}.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float* Dt = D + t * 128;
    Dt[g * 8 + q * 2] = d0; Dt[g * 8 + q * 2 + 1] = d1;
    Dt[(g + 8) * 8 + q * 2] = d2; Dt[(g + 8) * 8 + q * 2 + 1] = d3;
}
"""

PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")]


def kernel_source():
    return _PRELUDE + "\n".join(_KERNEL_TEMPLATE.replace("{FA}", fa).replace("{FB}", fb) for fa, fb in PAIRS)


class RawMmaUnavailable(RuntimeError):
    pass


def _find_lib(stem, env):
    errors = []
    for p in library_candidates(stem, os.environ.get(env) if env else None,
                                os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")):
        try:
            return ctypes.CDLL(p), p
        except OSError as e:
            errors.append(str(e))
    raise RawMmaUnavailable(f"{stem} not found ({'; '.join(errors[-2:])})")


def compile_cubin(arch="sm_90a", src=None):
    """NVRTC-compiles the kernels; returns (cubin bytes, nvrtc path, log)."""
    nvrtc, path = _find_lib("libnvrtc", "MMAEMU_NVRTC_PATH")
    # NVRTC dlopens its builtins library by soname; load the copy beside it first so that
    # the lookup succeeds without LD_LIBRARY_PATH.
    for b in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
        if ".alt." not in b:
            try:
                ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass
    src = (src or kernel_source()).encode()
    prog = ctypes.c_void_p()
    st = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"probe_mma.cu", 0, None, None)
    if st != 0:
        raise RawMmaUnavailable(f"nvrtcCreateProgram failed ({st})")
    opts = [f"--gpu-architecture={arch}".encode(), b"--fmad=false", b"-default-device"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    st = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t(0)
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value + 1)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if st != 0:
        raise RawMmaUnavailable(f"NVRTC compile failed ({st}): {log.value.decode()[:2000]}")
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    st = nvrtc.nvrtcGetCUBIN(prog, cubin)
    if st != 0:
        raise RawMmaUnavailable(f"nvrtcGetCUBIN failed ({st})")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin.raw, path, log.value.decode()


class RawMma:
    """The compiled kernels loaded into torch's CUDA context."""

    def __init__(self):
        if not torch.cuda.is_available():
            raise RawMmaUnavailable("no CUDA device")
        cap = torch.cuda.get_device_capability(0)
        if cap != (9, 0):
            raise RawMmaUnavailable(f"wgmma needs sm_90, device is sm_{cap[0]}{cap[1]}")
        torch.zeros(1, device="cuda")            # make torch's primary context current
        self.cubin, self.nvrtc_path, self.log = compile_cubin()
        try:
            self.cu = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RawMmaUnavailable(f"libcuda.so.1: {e}") from e
        self._ck(self.cu.cuInit(0), "cuInit")
        ctx = ctypes.c_void_p()
        self._ck(self.cu.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            raise RawMmaUnavailable("no current CUDA context")
        self.module = ctypes.c_void_p()
        self._ck(self.cu.cuModuleLoadData(ctypes.byref(self.module), self.cubin), "cuModuleLoadData")
        self.funcs = {}

    def _ck(self, st, what):
        if st != 0:
            name = ctypes.c_char_p()
            try:
                self.cu.cuGetErrorName(st, ctypes.byref(name))
            except Exception:  # noqa: BLE001
                pass
            raise RawMmaUnavailable(f"{what} failed: CUresult {st} {name.value!r}")

    def _func(self, name):
        if name not in self.funcs:
            f = ctypes.c_void_p()
            self._ck(self.cu.cuModuleGetFunction(ctypes.byref(f), self.module, name.encode()),
                     f"cuModuleGetFunction({name})")
            self.funcs[name] = f
        return self.funcs[name]

    def run(self, kind, fa, fb, A, B, C, c_mode):
        """D for A [T,R,K], B [T,8,K] (uint8 CPU arrays), C [T,R,8] float32; kind wgmma|mma."""
        R = 64 if kind == "wgmma" else 16
        T, R2, K = A.shape
        assert R2 == R and B.shape == (T, 8, K) and C.shape == (T, R, 8) and K % 32 == 0
        dev = torch.device("cuda", 0)
        tA = torch.from_numpy(np.ascontiguousarray(A)).to(dev)
        tB = torch.from_numpy(np.ascontiguousarray(B)).to(dev)
        tC = torch.from_numpy(np.ascontiguousarray(C, dtype=np.float32)).to(dev)
        tD = torch.full((T, R, 8), float("nan"), dtype=torch.float32, device=dev)
        args = [ctypes.c_void_p(tA.data_ptr()), ctypes.c_void_p(tB.data_ptr()),
                ctypes.c_void_p(tC.data_ptr()), ctypes.c_void_p(tD.data_ptr()),
                ctypes.c_int(K), ctypes.c_int(int(c_mode))]
        params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p)
                                                 for a in args])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        threads = 128 if kind == "wgmma" else 32
        self._ck(self.cu.cuLaunchKernel(self._func(f"{kind}_{fa}_{fb}"), T, 1, 1, threads, 1, 1,
                                        0, stream, params, None), "cuLaunchKernel")
        self._ck(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
        return tD.cpu().numpy()


def layout_self_test(raw, kind, fa="e4m3", fb="e4m3", tiles=3, seed=0):
    """Checks operand layouts and the accumulator fragment with integer data (exact under any
    rounding model): A, B in {-2..2}, C small integers, all distinct per element."""
    from ._hwcommon import fp8_bytes_of
    R = 64 if kind == "wgmma" else 16
    K = 64
    g = np.random.default_rng(seed)
    av = g.integers(-2, 3, size=(tiles, R, K)).astype(np.float64)
    bv = g.integers(-2, 3, size=(tiles, 8, K)).astype(np.float64)
    cv = g.integers(-64, 64, size=(tiles, R, 8)).astype(np.float32)
    want = np.einsum("trk,tnk->trn", av, bv) + cv
    A = fp8_bytes_of(av.ravel(), fa).reshape(av.shape)
    B = fp8_bytes_of(bv.ravel(), fb).reshape(bv.shape)
    got = raw.run(kind, fa, fb, A, B, cv, c_mode=1)
    bad = int(np.sum(got != want))
    got0 = raw.run(kind, fa, fb, A, B, cv, c_mode=0)
    bad0 = int(np.sum(got0 != want - cv))
    return {"kind": kind, "formats": [fa, fb], "mismatches_c_loaded": bad,
            "mismatches_scale_d0": bad0, "elements": int(want.size), "ok": bad == 0 and bad0 == 0}
