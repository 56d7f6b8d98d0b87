// torch_ops.cpp: registers the mmaemu ops with PyTorch and turns tensors into C plans.
//
// No arithmetic here: every bit comes from the C core (mmaemu.h). The Python layer
// (mmaemu/api.py) validates arguments exactly as torch._scaled_mm does and picks the profile,
// split and backend; these kernels re-check what they rely on so that a direct
// torch.ops.mmaemu.* call can never read out of bounds.
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <string>

#include "mmaemu.h"
#include "cuda_backend.h"

namespace {

int fp8_format(const at::Tensor& t, const char* name) {
  if (t.scalar_type() == at::kFloat8_e4m3fn) return MM_FMT_E4M3;
  if (t.scalar_type() == at::kFloat8_e5m2) return MM_FMT_E5M2;
  TORCH_CHECK(false, "Expected ", name, " to be Float8 matrix got ", t.scalar_type());
}

int out_kind(at::ScalarType dt) {
  switch (dt) {
    case at::kFloat: return MM_OUT_F32;
    case at::kBFloat16: return MM_OUT_BF16;
    case at::kHalf: return MM_OUT_F16;
    case at::kFloat8_e4m3fn: return MM_OUT_E4M3;
    case at::kFloat8_e5m2: return MM_OUT_E5M2;
    default: TORCH_CHECK(false, "mmaemu: out_dtype ", dt, " is not supported");
  }
}

int scheme_id(const std::string& s) {
  if (s == "none") return MM_SCHEME_NONE;
  if (s == "contiguous") return MM_SCHEME_CONTIGUOUS;
  if (s == "serial") return MM_SCHEME_SERIAL;
  if (s == "pairwise") return MM_SCHEME_PAIRWISE;
  TORCH_CHECK(false, "mmaemu: unknown split scheme '", s, "'");
}

int preset_id(const std::string& name) {
  int id = mmaemu_preset_id(name.c_str());
  TORCH_CHECK(id >= 0, "mmaemu: unknown preset '", name, "'");
  return id;
}

float scalar_scale(const at::Tensor& s, const char* name) {
  TORCH_CHECK(s.scalar_type() == at::kFloat && s.numel() == 1, "mmaemu: ", name,
              " must be a float32 tensor with one element");
  return s.to(at::kCPU).item<float>();
}

// A scale for a GEMM on `device`. On CUDA a CUDA scale stays on the device (the kernel reads it:
// no host synchronisation, so CUDA graphs can capture the op); returns nullptr and leaves the
// value to the kernel. Otherwise its value is stored in *value.
const float* device_scale(const at::Tensor& s, const char* name, c10::Device device, float* value) {
  TORCH_CHECK(s.scalar_type() == at::kFloat && s.numel() == 1, "mmaemu: ", name,
              " must be a float32 tensor with one element");
  if (device.is_cuda() && s.is_cuda()) {
    TORCH_CHECK(s.device() == device, "mmaemu: ", name, " is on ", s.device(),
                " but the operands are on ", device);
    return s.data_ptr<float>();
  }
  *value = scalar_scale(s, name);
  return nullptr;
}

// The scale tensors of a CUDA call, for the host fallback.
struct Scales {
  const at::Tensor* a = nullptr;
  const at::Tensor* b = nullptr;
  const at::Tensor* result = nullptr;
};

// The reference model on host copies (the cpu backend: the same bits, fast): what "reference" and "auto" do on CUDA tensors when no
// CUDA kernel can be loaded here (no driver, no usable fatbin and no NVRTC, MMAEMU_DISABLE_CUDA=1).
void host_reference(mm_gemm g, const at::Tensor& a, const at::Tensor& b, const Scales& s,
                    at::Tensor& out) {
  const at::Tensor ac = a.cpu().contiguous(), bc = b.cpu().contiguous();
  g.a = static_cast<const uint8_t*>(ac.data_ptr());
  g.b = static_cast<const uint8_t*>(bc.data_ptr());
  g.lda = ac.stride(0);
  g.ldb = bc.stride(0);
  if (s.a) g.scale_a = scalar_scale(*s.a, "scale_a");
  if (s.b) g.scale_b = scalar_scale(*s.b, "scale_b");
  if (s.result) g.scale_result = scalar_scale(*s.result, "scale_result");
  at::Tensor oc = at::empty({g.M, g.N}, out.options().device(at::kCPU));
  g.out = oc.data_ptr();
  g.ldo = g.N;
  TORCH_CHECK(!mmaemu_cpu_flushes_denormals(), "mmaemu: ",
              mmaemu_error_string(MM_ERR_FLUSH_DENORMAL));
  const int rc = mmaemu_gemm_cpu(&g, at::get_num_threads());  // the reference's bits, fast
  TORCH_CHECK(rc == MM_OK, "mmaemu: ", mmaemu_error_string(rc));
  out.copy_(oc);
}

// PyTorch's current stream on a CUDA device, through c10's device-generic interface (libc10, so
// nothing links CUDA): the stream the caller's work is ordered on, the capture stream while a
// CUDA graph is captured. Stream::id() is not the handle for pooled streams; native_handle() is
// (CUDAGuardImpl::getStreamNativeHandle returns CUDAStream(s).stream(): torch 2.13's headers;
// not yet run on a GPU).
void* current_cuda_stream(c10::Device device) {
  const c10::impl::DeviceGuardImplInterface* impl =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return impl->getStream(device).native_handle();
}

// The kernel a backend argument names on CUDA tensors. The op runs the kernel it is given:
// choosing one by priority, gates and self-tests is mmaemu.backends.resolve()'s policy. The
// schema default "auto" (a raw torch.ops.mmaemu call) means the reference kernel, the one that
// computes every plan and is not gated; "cuda" is a request for that policy, not a kernel.
std::string cuda_kernel(const std::string& backend) {
  if (backend == "auto") return "reference";
  TORCH_CHECK(backend != "cuda" && backend != "cpu", "mmaemu: backend '", backend,
              "' names no kernel on CUDA tensors; pass a kernel (reference, cuda:h1, cuda:h4, "
              "cuda:v1, cuda:v4, cuda:wgmma) or call mmaemu.scaled_mm, which picks one");
  return backend;
}

// CUDA tensors: the named kernel on PyTorch's current stream, with a workspace tensor for split
// partials; see cuda_backend.h. The reference kernel falls back to the host when no CUDA kernel
// can be loaded here (no driver, no usable fatbin and no NVRTC, MMAEMU_DISABLE_CUDA=1).
void run_cuda(const mm_gemm& g, const std::string& backend, const at::Tensor& a,
              const at::Tensor& b, const Scales& s, const float* sa, const float* sb,
              const float* sr, at::Tensor& out) {
  const std::string kernel = cuda_kernel(backend);
  const int device = out.device().index();
  mm_cuda_call call = {};
  call.g = g;
  call.device = device;
  call.scale_a = sa;
  call.scale_b = sb;
  call.scale_result = sr;
  int64_t bytes = 0;
  int rc = mmaemu_cuda_workspace_bytes(&call.g, kernel.c_str(), device, &bytes);
  at::Tensor workspace;
  if (rc == MM_OK) {
    if (bytes > 0) {
      workspace = at::empty({bytes / 4}, out.options().dtype(at::kFloat));
      call.workspace = workspace.data_ptr();
    }
    call.stream = current_cuda_stream(out.device());
    rc = mmaemu_cuda_gemm_ex(&call, kernel.c_str());
  }
  if (rc == MM_OK) return;
  if (rc == MM_ERR_UNAVAILABLE && kernel == "reference") {
    if (backend == "auto") {
      TORCH_WARN_ONCE("mmaemu: no CUDA kernel could run (", mmaemu_cuda_last_error(),
                      "); computing the reference model on the CPU instead");
    }
    host_reference(g, a, b, s, out);
    return;
  }
  TORCH_CHECK(false, "mmaemu: CUDA backend '", backend, "' failed: ", mmaemu_cuda_last_error());
}

// Rows of t along K with unit K stride: t itself when it already has them, else a copy.
at::Tensor k_contiguous(const at::Tensor& t) {
  return t.stride(1) == 1 ? t : t.contiguous();
}

void run(const mm_gemm& g, const std::string& backend, c10::Device device) {
  int rc;
  TORCH_CHECK(!device.is_cuda(), "mmaemu: internal error: CUDA plans go through run_cuda");
  TORCH_CHECK(!mmaemu_cpu_flushes_denormals(), "mmaemu: ",
              mmaemu_error_string(MM_ERR_FLUSH_DENORMAL));
  if (backend == "reference") {
    rc = mmaemu_gemm_reference(&g);
  } else {
    TORCH_CHECK(backend == "auto" || backend == "cpu", "mmaemu: backend '", backend,
                "' cannot run on CPU tensors");
    rc = mmaemu_gemm_cpu(&g, at::get_num_threads());
  }
  TORCH_CHECK(rc == MM_OK, "mmaemu: ", mmaemu_error_string(rc));
}

// The shared part of scaled_mm and accumulate: a [M, K] and b [N, K] as K-contiguous rows.
mm_gemm make_plan(const at::Tensor& a, const at::Tensor& b, bool fast, const std::string& preset,
                  int64_t splits, const std::string& scheme) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "mmaemu: operands must be matrices");
  TORCH_CHECK(a.size(1) == b.size(1), "mmaemu: operands disagree on K (", a.size(1), " vs ",
              b.size(1), ")");
  TORCH_CHECK(a.device() == b.device(), "mmaemu: operands must be on the same device");
  TORCH_CHECK(splits >= 1 && splits <= MM_MAX_SPLITS, "mmaemu: splits must be in [1, ",
              MM_MAX_SPLITS, "], got ", splits);
  mm_gemm g = {};
  g.fmt_a = fp8_format(a, "mat1");
  g.fmt_b = fp8_format(b, "mat2");
  g.a = static_cast<const uint8_t*>(a.data_ptr());
  g.b = static_cast<const uint8_t*>(b.data_ptr());
  g.lda = a.stride(0);
  g.ldb = b.stride(0);
  g.M = a.size(0);
  g.N = b.size(0);
  g.K = a.size(1);
  g.fast_accum = fast ? 1 : 0;
  g.splits = static_cast<int32_t>(splits);
  g.scheme = scheme_id(scheme);
  g.preset = mm_preset_get(preset_id(preset));
  g.epilogue_order = MM_EPI_H1;
  return g;
}

// Row-wise scales and a bias on CUDA tensors: no CUDA kernel computes them yet, so the cpu
// backend runs on host copies (with the host fallback's warning) and the result is copied back.
at::Tensor scaled_mm(const at::Tensor& mat1, const at::Tensor& mat2, const at::Tensor& scale_a,
                     const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                     const std::optional<at::Tensor>& scale_result,
                     std::optional<at::ScalarType> out_dtype, bool use_fast_accum,
                     std::string preset, int64_t splits, std::string scheme,
                     std::string backend, int64_t epilogue);

at::Tensor scaled_mm_on_host(const at::Tensor& mat1, const at::Tensor& mat2,
                             const at::Tensor& scale_a, const at::Tensor& scale_b,
                             const std::optional<at::Tensor>& bias,
                             const std::optional<at::Tensor>& scale_result,
                             std::optional<at::ScalarType> out_dtype, bool use_fast_accum,
                             const std::string& preset, int64_t splits, const std::string& scheme,
                             int64_t epilogue) {
  TORCH_WARN_ONCE("mmaemu: no CUDA kernel computes row-wise scales or a bias; computing the "
                  "reference model on the CPU instead");
  std::optional<at::Tensor> bias_h, result_h;
  if (bias.has_value()) bias_h = bias->cpu();
  if (scale_result.has_value()) result_h = scale_result->cpu();
  const at::Tensor out = scaled_mm(mat1.cpu(), mat2.cpu(), scale_a.cpu(), scale_b.cpu(), bias_h,
                                   result_h, out_dtype, use_fast_accum, preset, splits, scheme,
                                   "cpu", epilogue);
  return out.to(mat1.device());
}

int bias_kind(const at::Tensor& bias, int64_t N) {
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == N, "mmaemu: bias must be a vector of length ", N);
  if (bias.scalar_type() == at::kBFloat16) return MM_BIAS_BF16;
  if (bias.scalar_type() == at::kHalf) return MM_BIAS_F16;
  TORCH_CHECK(false, "mmaemu: bias must be bfloat16 or float16, got ", bias.scalar_type());
}

// Contiguous copies of the row-wise scales and the bias that a plan points into.
struct RowwiseInputs {
  at::Tensor scale_a, scale_b, bias;
};

void set_rowwise_scales(mm_gemm& g, const at::Tensor& scale_a, const at::Tensor& scale_b,
                        RowwiseInputs& held) {
  TORCH_CHECK(scale_a.scalar_type() == at::kFloat && scale_a.numel() == g.M &&
                  scale_b.scalar_type() == at::kFloat && scale_b.numel() == g.N,
              "mmaemu: row-wise scales must be float32 with M and N elements");
  held.scale_a = scale_a.contiguous();
  held.scale_b = scale_b.contiguous();
  g.scale_a_vec = held.scale_a.data_ptr<float>();
  g.scale_b_vec = held.scale_b.data_ptr<float>();
}

void set_bias(mm_gemm& g, const std::optional<at::Tensor>& bias, RowwiseInputs& held) {
  if (!bias.has_value()) return;
  g.bias_kind = bias_kind(*bias, g.N);
  held.bias = bias->contiguous();
  g.bias = held.bias.data_ptr();
}

at::Tensor scaled_mm(const at::Tensor& mat1, const at::Tensor& mat2, const at::Tensor& scale_a,
                     const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                     const std::optional<at::Tensor>& scale_result,
                     std::optional<at::ScalarType> out_dtype, bool use_fast_accum,
                     std::string preset, int64_t splits, std::string scheme,
                     std::string backend, int64_t epilogue) {
  TORCH_CHECK(mat1.dim() == 2 && mat2.dim() == 2, "mmaemu: mat1 and mat2 must be matrices");
  TORCH_CHECK(epilogue >= MM_EPI_H1 && epilogue <= MM_EPI_ROWWISE_T,
              "mmaemu: unknown epilogue order ", epilogue);
  const bool rowwise = epilogue >= MM_EPI_ROWWISE;
  const c10::Device device = mat1.device();
  if (device.is_cuda() && (rowwise || bias.has_value()))
    return scaled_mm_on_host(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                             use_fast_accum, preset, splits, scheme, epilogue);
  const at::Tensor a = k_contiguous(mat1);
  const at::Tensor b = k_contiguous(mat2.t());
  mm_gemm g = make_plan(a, b, use_fast_accum, preset, splits, scheme);
  const at::ScalarType odt = out_dtype.value_or(mat1.scalar_type());
  g.out_kind = out_kind(odt);
  g.epilogue_order = static_cast<int32_t>(epilogue);
  Scales s;
  s.a = &scale_a;
  s.b = &scale_b;
  const float* sa = nullptr;
  const float* sb = nullptr;
  RowwiseInputs held;
  if (rowwise) {
    TORCH_CHECK(odt == at::kBFloat16, "mmaemu: row-wise scales need a bfloat16 output");
    set_rowwise_scales(g, scale_a, scale_b, held);
  } else {
    sa = device_scale(scale_a, "scale_a", device, &g.scale_a);
    sb = device_scale(scale_b, "scale_b", device, &g.scale_b);
  }
  set_bias(g, bias, held);
  const float* sr = nullptr;
  if (scale_result.has_value()) {
    g.has_scale_result = 1;
    s.result = &*scale_result;
    sr = device_scale(*scale_result, "scale_result", device, &g.scale_result);
  }
  at::Tensor out = at::empty({g.M, g.N}, mat1.options().dtype(odt));
  if (g.M == 0 || g.N == 0) return out;
  if (g.K == 0) return out.zero_();  // torch 2.7.1 returns before any kernel, bias or not
  g.out = out.data_ptr();
  g.ldo = g.N;
  if (device.is_cuda()) run_cuda(g, backend, a, b, s, sa, sb, sr, out);
  else run(g, backend, device);
  return out;
}

// Row-wise scaled_mm over a tile plan (mmaemu_tiles.h): torch 2.7.1's sm_89 stream-K kernel,
// bf16 output. offsets [tiles + 1] and bounds (flat pairs) come from mmaemu/streamk.py. The
// "reference" backend: the scalar reference, rows in parallel; otherwise the cpu backend's
// composition (cpu_tiles.c). CUDA tensors run on host copies.
at::Tensor scaled_mm_tiles(const at::Tensor& mat1, const at::Tensor& mat2,
                           const at::Tensor& scale_a, const at::Tensor& scale_b,
                           const std::optional<at::Tensor>& bias, bool use_fast_accum,
                           std::string preset, at::IntArrayRef offsets,
                           at::IntArrayRef bounds, int64_t tile_m, int64_t tile_n,
                           int64_t iter_k, std::string backend) {
  TORCH_CHECK(mat1.dim() == 2 && mat2.dim() == 2, "mmaemu: mat1 and mat2 must be matrices");
  if (mat1.is_cuda()) {
    TORCH_WARN_ONCE("mmaemu: no CUDA kernel computes row-wise scales or a bias; computing the "
                    "reference model on the CPU instead");
    std::optional<at::Tensor> bias_h;
    if (bias.has_value()) bias_h = bias->cpu();
    return scaled_mm_tiles(mat1.cpu(), mat2.cpu(), scale_a.cpu(), scale_b.cpu(), bias_h,
                           use_fast_accum, preset, offsets, bounds, tile_m, tile_n, iter_k,
                           backend == "reference" ? "reference" : "cpu")
        .to(mat1.device());
  }
  const at::Tensor a = k_contiguous(mat1);
  const at::Tensor b = k_contiguous(mat2.t());
  mm_gemm g = make_plan(a, b, use_fast_accum, preset, 1, "none");
  g.out_kind = MM_OUT_BF16;
  g.epilogue_order = MM_EPI_ROWWISE;
  RowwiseInputs held;
  set_rowwise_scales(g, scale_a, scale_b, held);
  set_bias(g, bias, held);
  at::Tensor out = at::empty({g.M, g.N}, mat1.options().dtype(at::kBFloat16));
  if (g.M == 0 || g.N == 0) return out;
  if (g.K == 0) return out.zero_();
  g.out = out.data_ptr();
  g.ldo = g.N;
  TORCH_CHECK(bounds.size() % 2 == 0, "mmaemu: tile plan bounds come in pairs");
  const mm_tile_plan tp = {tile_m, tile_n, iter_k, tile_n > 0 ? (g.N + tile_n - 1) / tile_n : 0,
                           offsets.data(), bounds.data()};
  int rc = mmaemu_gemm_check(&g);
  if (rc == MM_OK)
    rc = mmaemu_tile_plan_check(&g, &tp, static_cast<int64_t>(offsets.size()),
                                static_cast<int64_t>(bounds.size() / 2));
  TORCH_CHECK(rc == MM_OK, "mmaemu: ", mmaemu_error_string(rc));
  TORCH_CHECK(!mmaemu_cpu_flushes_denormals(), "mmaemu: ",
              mmaemu_error_string(MM_ERR_FLUSH_DENORMAL));
  if (backend == "reference") {
    std::atomic<int> status{MM_OK};
    at::parallel_for(0, g.M, 1, [&](int64_t r0, int64_t r1) {
      const int r = mmaemu_gemm_tiles_reference(&g, &tp, r0, r1);
      if (r != MM_OK) status = r;
    });
    rc = status;
  } else {
    rc = mmaemu_gemm_tiles_cpu(&g, &tp, at::get_num_threads());
  }
  TORCH_CHECK(rc == MM_OK, "mmaemu: ", mmaemu_error_string(rc));
  return out;
}

at::Tensor accumulate(const at::Tensor& a_in, const at::Tensor& b_in, bool use_fast_accum,
                      std::string preset, int64_t splits, std::string scheme,
                      std::string backend) {
  TORCH_CHECK(a_in.dim() == 2 && b_in.dim() == 2, "mmaemu: x and w must be matrices");
  const at::Tensor a = k_contiguous(a_in);
  const at::Tensor b = k_contiguous(b_in);
  mm_gemm g = make_plan(a, b, use_fast_accum, preset, splits, scheme);
  g.out_kind = MM_OUT_ACC;
  at::Tensor out = at::empty({g.M, g.N}, a.options().dtype(at::kFloat));
  if (g.M == 0 || g.N == 0) return out;
  if (g.K == 0) return out.zero_();
  g.out = out.data_ptr();
  g.ldo = g.N;
  if (a.is_cuda()) run_cuda(g, backend, a, b, Scales(), nullptr, nullptr, nullptr, out);
  else run(g, backend, a.device());
  return out;
}

at::Tensor mma(const at::Tensor& a_in, const at::Tensor& b_in, const at::Tensor& c_in,
               std::string preset) {
  TORCH_CHECK(a_in.dim() == 2 && b_in.dim() == 2 && a_in.sizes() == b_in.sizes(),
              "mmaemu.mma: a and b must be [n, K] matrices of the same shape");
  TORCH_CHECK(c_in.dim() == 1 && c_in.size(0) == a_in.size(0) && c_in.scalar_type() == at::kFloat,
              "mmaemu.mma: c must be a float32 vector of length n");
  TORCH_CHECK(a_in.device().is_cpu() && b_in.device().is_cpu() && c_in.device().is_cpu(),
              "mmaemu.mma runs on CPU tensors");
  const int pid = preset_id(preset);
  const mm_preset p = mm_preset_get(pid);
  TORCH_CHECK(a_in.size(1) % p.block == 0, "mmaemu.mma: K = ", a_in.size(1),
              " is not a multiple of the '", preset, "' block size ", p.block);
  const at::Tensor a = k_contiguous(a_in), b = k_contiguous(b_in), c = c_in.contiguous();
  at::Tensor d = at::empty({a.size(0)}, c.options());
  TORCH_CHECK(!mmaemu_cpu_flushes_denormals(), "mmaemu: ",
              mmaemu_error_string(MM_ERR_FLUSH_DENORMAL));
  const int rc = mmaemu_mma_reference(
      static_cast<const uint8_t*>(a.data_ptr()), a.stride(0), fp8_format(a, "a"),
      static_cast<const uint8_t*>(b.data_ptr()), b.stride(0), fp8_format(b, "b"),
      c.data_ptr<float>(), a.size(0), a.size(1), pid, d.data_ptr<float>());
  TORCH_CHECK(rc == MM_OK, "mmaemu.mma: ", mmaemu_error_string(rc));
  return d;
}

}  // namespace

// The schemas of these ops (and of the planning ops) are defined in Python, in mmaemu/ops.py,
// with their fake kernels: one module holds every schema. The dispatcher accepts kernels for an
// operator whose schema is registered later and checks them against it then.

TORCH_LIBRARY_IMPL(mmaemu, CPU, m) {
  m.impl("scaled_mm", &scaled_mm);
  m.impl("accumulate", &accumulate);
  m.impl("mma", &mma);
  m.impl("scaled_mm_tiles", &scaled_mm_tiles);
}

TORCH_LIBRARY_IMPL(mmaemu, CUDA, m) {
  m.impl("scaled_mm", &scaled_mm);
  m.impl("accumulate", &accumulate);
  m.impl("scaled_mm_tiles", &scaled_mm_tiles);
}
