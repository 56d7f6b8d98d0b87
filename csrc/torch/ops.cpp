// ops.cpp: registers the mmaemu kernel ops with PyTorch and turns tensors into C plans.
//
// No arithmetic and no decision here: every bit comes from the C core (mmaemu.h), and the op
// runs exactly the executor its `backend` argument names, or refuses. The Python layer validates
// the arguments as torch._scaled_mm does and plans the profile, split and executor; these kernels
// re-check what they rely on so that a direct torch.ops.mmaemu.* call can never read out of
// bounds. Names (split schemes, presets) are looked up in the C core's one table (core/enums.c).
//
// Executors. CPU tensors: "reference" (the scalar C model) or "cpu:<simd>" (the fast CPU
// executor with the named SIMD kernel). CUDA tensors: "cuda:<kernel>" (a kernel of the C kernel
// table, on PyTorch's current stream), or "host:reference" / "host:cpu:<simd>" (the operands,
// scales and bias copied to the host, computed there, the result copied back).
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <string>

#include "mmaemu.h"
#include "cuda_backend.h"

namespace {

// ---- executors ---------------------------------------------------------------------------------

struct Executor {
  enum Kind { REFERENCE, CPU, CUDA } kind = REFERENCE;
  bool host = false;   // CUDA tensors computed on host copies
  std::string simd;    // CPU: the SIMD kernel (mmaemu_gemm_cpu's simd)
  std::string kernel;  // CUDA: the kernel table's name
  std::string name;    // as the caller gave it
  // The executor of the host computation ("reference" or "cpu:<simd>").
  std::string on_host() const { return kind == CPU ? "cpu:" + simd : "reference"; }
};

const std::string kHostPrefix = "host:";
const std::string kCpuPrefix = "cpu:";
const std::string kCudaPrefix = "cuda:";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The SIMD kernels of the C table, all of them or those this CPU runs, comma-separated.
std::string simd_names(bool available_only) {
  std::string out;
  for (int i = 0; i < mmaemu_cpu_simd_count(); i++) {
    mm_cpu_simd_info info;
    if (mmaemu_cpu_simd_info(i, &info) != MM_OK || (available_only && !info.available)) continue;
    out += (out.empty() ? "" : ", ") + std::string(info.name);
  }
  return out;
}

// The CUDA kernel table's entries as executors: "cuda:<kernel>".
std::string cuda_executor_of(const std::string& kernel) {
  return starts_with(kernel, kCudaPrefix) ? kernel : kCudaPrefix + kernel;
}

std::string cuda_kernel_names() {
  std::string out;
  for (int i = 0; i < mmaemu_cuda_kernel_count(); i++)
    out += (i ? ", " : "") + cuda_executor_of(mmaemu_cuda_kernel_at(i)->name).substr(kCudaPrefix.size());
  return out;
}

std::string cpu_forms() {
  return "'reference' or 'cpu:<simd>' (<simd>: " + simd_names(false) + "; on this CPU: " +
         simd_names(true) + ")";
}

std::string cuda_forms() {
  return "'cuda:<kernel>' (<kernel>: " + cuda_kernel_names() +
         "), or 'host:reference' or 'host:cpu:<simd>' to compute on host copies";
}

std::string refusal(const std::string& name, bool cuda) {
  const std::string what = cuda ? "kernel or host executor of CUDA" : "executor of CPU";
  return "mmaemu: '" + name + "' names no " + what + " tensors; pass " +
         (cuda ? cuda_forms() : cpu_forms()) + " (mmaemu.scaled_mm plans one)";
}

// "reference" or "cpu:<simd>" with a SIMD kernel of the table; false for anything else.
bool parse_cpu(const std::string& form, const std::string& name, Executor& e) {
  if (form == "reference") {
    e.kind = Executor::REFERENCE;
    return true;
  }
  if (!starts_with(form, kCpuPrefix)) return false;
  e.kind = Executor::CPU;
  e.simd = form.substr(kCpuPrefix.size());
  for (int i = 0; i < mmaemu_cpu_simd_count(); i++) {
    mm_cpu_simd_info info;
    if (mmaemu_cpu_simd_info(i, &info) != MM_OK || e.simd != info.name) continue;
    TORCH_CHECK(info.available, "mmaemu: executor '", name, "': the SIMD kernel '", e.simd,
                "' is not available on this CPU (on this CPU: ", simd_names(true), ")");
    return true;
  }
  return false;
}

// The executor `name` names for tensors on `device`, or a refusal naming the accepted forms.
Executor parse_executor(const std::string& name, c10::Device device) {
  Executor e;
  e.name = name;
  if (!device.is_cuda()) {
    TORCH_CHECK(parse_cpu(name, name, e), refusal(name, false));
    return e;
  }
  if (starts_with(name, kHostPrefix)) {
    e.host = true;
    TORCH_CHECK(parse_cpu(name.substr(kHostPrefix.size()), name, e), refusal(name, true));
    return e;
  }
  if (starts_with(name, kCudaPrefix)) {
    for (int i = 0; i < mmaemu_cuda_kernel_count(); i++) {
      const char* kernel = mmaemu_cuda_kernel_at(i)->name;
      if (cuda_executor_of(kernel) != name) continue;
      e.kind = Executor::CUDA;
      e.kernel = kernel;
      return e;
    }
  }
  TORCH_CHECK(false, refusal(name, true));
}

// What no CUDA kernel computes runs only on host copies, and only when the plan says so.
void require_host(const Executor& e, const char* what) {
  TORCH_CHECK(e.host, "mmaemu: no CUDA kernel computes ", what, " (executor '", e.name,
              "'); pass 'host:reference' or 'host:cpu:<simd>' to compute it on host copies");
}

// ---- tensors to plans --------------------------------------------------------------------------

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

// A name of one of the C core's enumerations (core/enums.c), as its id.
int enum_id(const char* enumeration, const std::string& name, const char* what) {
  const int64_t id = mmaemu_enum_value(enumeration, name.c_str());
  TORCH_CHECK(id >= 0, "mmaemu: unknown ", what, " '", name, "'");
  return static_cast<int>(id);
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

// PyTorch's current stream on a CUDA device, through c10's device-generic interface (libc10, so
// nothing links CUDA): the stream the caller's work is ordered on, the capture stream while a
// CUDA graph is captured. Stream::id() is not the handle for pooled streams; native_handle() is.
void* current_cuda_stream(c10::Device device) {
  const c10::impl::DeviceGuardImplInterface* impl =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return impl->getStream(device).native_handle();
}

// The named CUDA kernel on PyTorch's current stream, with a workspace tensor for split partials
// (cuda_backend.h). A kernel that cannot load or run this plan is an error.
void run_cuda(const mm_gemm& g, const Executor& e, const float* sa, const float* sb,
              const float* sr, at::Tensor& out) {
  const int device = out.device().index();
  mm_cuda_call call = {};
  call.g = g;
  call.device = device;
  call.scale_a = sa;
  call.scale_b = sb;
  call.scale_result = sr;
  int64_t bytes = 0;
  int rc = mmaemu_cuda_workspace_bytes(&call.g, e.kernel.c_str(), device, &bytes);
  at::Tensor workspace;
  if (rc == MM_OK) {
    if (bytes > 0) {
      workspace = at::empty({bytes / 4}, out.options().dtype(at::kFloat));
      call.workspace = workspace.data_ptr();
    }
    call.stream = current_cuda_stream(out.device());
    rc = mmaemu_cuda_gemm_ex(&call, e.kernel.c_str());
  }
  TORCH_CHECK(rc == MM_OK, "mmaemu: executor '", e.name, "' failed: ", mmaemu_cuda_last_error());
}

void check_no_flush() {
  TORCH_CHECK(!mmaemu_cpu_flushes_denormals(), "mmaemu: ",
              mmaemu_error_string(MM_ERR_FLUSH_DENORMAL));
}

// A CPU executor on CPU tensors.
void run_cpu(const mm_gemm& g, const Executor& e) {
  check_no_flush();
  const int rc = e.kind == Executor::REFERENCE
                     ? mmaemu_gemm_reference(&g)
                     : mmaemu_gemm_cpu(&g, at::get_num_threads(), e.simd.c_str());
  TORCH_CHECK(rc == MM_OK, "mmaemu: ", mmaemu_error_string(rc));
}

// Rows of t along K with unit K stride: t itself when it already has them, else a copy.
at::Tensor k_contiguous(const at::Tensor& t) {
  return t.stride(1) == 1 ? t : t.contiguous();
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
  g.scheme = enum_id("split_schemes", scheme, "split scheme");
  g.preset = mm_preset_get(enum_id("presets", preset, "preset"));
  g.epilogue_order = MM_EPI_H1;
  return g;
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

// Block-wise scales (MM_EPI_BLOCKWISE*): scale_a [M, groups], one per row and 128-k group;
// scale_b [ceil(N/128), groups] (one per 128 columns) or [N, groups] (one per column); any strides.
void set_blockwise_scales(mm_gemm& g, const at::Tensor& scale_a, const at::Tensor& scale_b,
                          RowwiseInputs& held) {
  const int64_t groups = (g.K + MM_BLOCKWISE_K - 1) / MM_BLOCKWISE_K;
  const int64_t blocks_n = (g.N + MM_BLOCKWISE_K - 1) / MM_BLOCKWISE_K;
  TORCH_CHECK(scale_a.scalar_type() == at::kFloat && scale_b.scalar_type() == at::kFloat &&
                  scale_a.dim() == 2 && scale_b.dim() == 2 && scale_a.size(0) == g.M &&
                  scale_a.size(1) == groups && scale_b.size(1) == groups &&
                  (scale_b.size(0) == blocks_n || scale_b.size(0) == g.N),
              "mmaemu: block-wise scales must be float32 [M, ceil(K/128)] and [ceil(N/128) or N, "
              "ceil(K/128)]");
  held.scale_a = scale_a;
  held.scale_b = scale_b;
  g.scale_a_vec = scale_a.data_ptr<float>();
  g.scale_b_vec = scale_b.data_ptr<float>();
  g.sa_rs = scale_a.stride(0);
  g.sa_gs = scale_a.stride(1);
  g.sb_rs = scale_b.stride(0);
  g.sb_gs = scale_b.stride(1);
  g.sb_gran = scale_b.size(0) == blocks_n ? MM_BLOCKWISE_K : 1;
}

void set_bias(mm_gemm& g, const std::optional<at::Tensor>& bias, RowwiseInputs& held) {
  if (!bias.has_value()) return;
  g.bias_kind = bias_kind(*bias, g.N);
  held.bias = bias->contiguous();
  g.bias = held.bias.data_ptr();
}

std::optional<at::Tensor> on_host(const std::optional<at::Tensor>& t) {
  return t.has_value() ? std::optional<at::Tensor>(t->cpu()) : std::nullopt;
}

// ---- the ops -----------------------------------------------------------------------------------

at::Tensor scaled_mm(const at::Tensor& mat1, const at::Tensor& mat2, const at::Tensor& scale_a,
                     const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                     const std::optional<at::Tensor>& scale_result,
                     std::optional<at::ScalarType> out_dtype, bool use_fast_accum,
                     std::string preset, int64_t splits, std::string scheme,
                     std::string backend, int64_t epilogue) {
  TORCH_CHECK(mat1.dim() == 2 && mat2.dim() == 2, "mmaemu: mat1 and mat2 must be matrices");
  TORCH_CHECK(epilogue >= MM_EPI_H1 && epilogue <= MM_EPI_ROWWISE_MUL,
              "mmaemu: unknown epilogue order ", epilogue);
  fp8_format(mat1, "mat1");  // torch's messages for the operands before the executor's
  fp8_format(mat2, "mat2");
  const c10::Device device = mat1.device();
  const Executor e = parse_executor(backend, device);
  const bool blockwise = epilogue == MM_EPI_BLOCKWISE || epilogue == MM_EPI_BLOCKWISE_PE;
  const bool rowwise = epilogue >= MM_EPI_ROWWISE && !blockwise;
  if (device.is_cuda() && (rowwise || blockwise || bias.has_value()))
    require_host(e, "row-wise or block-wise scales or a bias");
  if (e.host)
    return scaled_mm(mat1.cpu(), mat2.cpu(), scale_a.cpu(), scale_b.cpu(), on_host(bias),
                     on_host(scale_result), out_dtype, use_fast_accum, preset, splits, scheme,
                     e.on_host(), epilogue)
        .to(device);
  const at::Tensor a = k_contiguous(mat1);
  const at::Tensor b = k_contiguous(mat2.t());
  mm_gemm g = make_plan(a, b, use_fast_accum, preset, splits, scheme);
  const at::ScalarType odt = out_dtype.value_or(mat1.scalar_type());
  g.out_kind = out_kind(odt);
  g.epilogue_order = static_cast<int32_t>(epilogue);
  const float* sa = nullptr;
  const float* sb = nullptr;
  RowwiseInputs held;
  if (blockwise) {
    set_blockwise_scales(g, scale_a, scale_b, held);
  } else if (rowwise) {
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
    sr = device_scale(*scale_result, "scale_result", device, &g.scale_result);
  }
  at::Tensor out = at::empty({g.M, g.N}, mat1.options().dtype(odt));
  if (g.M == 0 || g.N == 0) return out;
  if (g.K == 0) return out.zero_();  // torch 2.7.1 returns before any kernel, bias or not
  g.out = out.data_ptr();
  g.ldo = g.N;
  if (device.is_cuda()) run_cuda(g, e, sa, sb, sr, out);
  else run_cpu(g, e);
  return out;
}

// Row-wise scaled_mm over a tile plan (mmaemu_tiles.h): torch 2.7.1's sm_89 stream-K kernel,
// bf16 output. offsets [tiles + 1] and bounds (flat pairs) come from the Python planner.
// "reference": the scalar reference, rows in parallel; "cpu:<simd>": the cpu executor's
// composition (cpu/tiles.c). No CUDA kernel computes it: CUDA tensors need a host executor.
at::Tensor scaled_mm_tiles(const at::Tensor& mat1, const at::Tensor& mat2,
                           const at::Tensor& scale_a, const at::Tensor& scale_b,
                           const std::optional<at::Tensor>& bias, bool use_fast_accum,
                           std::string preset, at::IntArrayRef offsets,
                           at::IntArrayRef bounds, int64_t tile_m, int64_t tile_n,
                           int64_t iter_k, std::string backend) {
  TORCH_CHECK(mat1.dim() == 2 && mat2.dim() == 2, "mmaemu: mat1 and mat2 must be matrices");
  const Executor e = parse_executor(backend, mat1.device());
  if (mat1.is_cuda()) {
    require_host(e, "a tile plan");
    return scaled_mm_tiles(mat1.cpu(), mat2.cpu(), scale_a.cpu(), scale_b.cpu(), on_host(bias),
                           use_fast_accum, preset, offsets, bounds, tile_m, tile_n, iter_k,
                           e.on_host())
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
  check_no_flush();
  if (e.kind == Executor::REFERENCE) {
    std::atomic<int> status{MM_OK};
    at::parallel_for(0, g.M, 1, [&](int64_t r0, int64_t r1) {
      const int r = mmaemu_gemm_tiles_reference(&g, &tp, r0, r1);
      if (r != MM_OK) status = r;
    });
    rc = status;
  } else {
    rc = mmaemu_gemm_tiles_cpu(&g, &tp, at::get_num_threads(), e.simd.c_str());
  }
  TORCH_CHECK(rc == MM_OK, "mmaemu: ", mmaemu_error_string(rc));
  return out;
}

at::Tensor accumulate(const at::Tensor& a_in, const at::Tensor& b_in, bool use_fast_accum,
                      std::string preset, int64_t splits, std::string scheme,
                      std::string backend) {
  TORCH_CHECK(a_in.dim() == 2 && b_in.dim() == 2, "mmaemu: x and w must be matrices");
  const Executor e = parse_executor(backend, a_in.device());
  if (e.host)
    return accumulate(a_in.cpu(), b_in.cpu(), use_fast_accum, preset, splits, scheme, e.on_host())
        .to(a_in.device());
  const at::Tensor a = k_contiguous(a_in);
  const at::Tensor b = k_contiguous(b_in);
  mm_gemm g = make_plan(a, b, use_fast_accum, preset, splits, scheme);
  g.out_kind = MM_OUT_ACC;
  at::Tensor out = at::empty({g.M, g.N}, a.options().dtype(at::kFloat));
  if (g.M == 0 || g.N == 0) return out;
  if (g.K == 0) return out.zero_();
  g.out = out.data_ptr();
  g.ldo = g.N;
  if (a.is_cuda()) run_cuda(g, e, nullptr, nullptr, nullptr, out);
  else run_cpu(g, e);
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
  const int pid = enum_id("presets", preset, "preset");
  const mm_preset p = mm_preset_get(pid);
  TORCH_CHECK(a_in.size(1) % p.block == 0, "mmaemu.mma: K = ", a_in.size(1),
              " is not a multiple of the '", preset, "' block size ", p.block);
  const at::Tensor a = k_contiguous(a_in), b = k_contiguous(b_in), c = c_in.contiguous();
  at::Tensor d = at::empty({a.size(0)}, c.options());
  check_no_flush();
  const int rc = mmaemu_mma_reference(
      static_cast<const uint8_t*>(a.data_ptr()), a.stride(0), fp8_format(a, "a"),
      static_cast<const uint8_t*>(b.data_ptr()), b.stride(0), fp8_format(b, "b"),
      c.data_ptr<float>(), a.size(0), a.size(1), pid, d.data_ptr<float>());
  TORCH_CHECK(rc == MM_OK, "mmaemu.mma: ", mmaemu_error_string(rc));
  return d;
}

}  // namespace

// The schemas of these ops (and of the planning ops) are defined in Python, with their fake
// kernels: one module holds every schema. The dispatcher accepts kernels for an operator whose
// schema is registered later and checks them against it then.

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
