// module.cpp: the Python module mmaemu._C. Importing it runs the op registrations of ops.cpp;
// its functions are everything of the C core that is not an op: the enumerations and limits,
// CPU facts and the SIMD kernels' table and measured speeds, the CUDA kernel table, the loader's
// configuration and queries, and (for the loader's tests) one GEMM launched on raw device
// addresses. Facts only: what to run is the caller's plan.
#include <Python.h>

#include <string>
#include <vector>

#include "mmaemu.h"
#include "cuda_backend.h"

namespace {

PyObject* py_cpu_flushes_denormals(PyObject*, PyObject*) {
  return PyBool_FromLong(mmaemu_cpu_flushes_denormals());
}

PyObject* py_cpu_simd_paths(PyObject*, PyObject*) {
  return PyUnicode_FromString(mmaemu_cpu_simd_paths());
}

// One dict per SIMD kernel of the `cpu` executor (mm_cpu_simd_info).
PyObject* py_cpu_simd_kernels(PyObject*, PyObject*) {
  const int n = mmaemu_cpu_simd_count();
  PyObject* out = PyList_New(n);
  if (!out) return nullptr;
  for (int i = 0; i < n; i++) {
    mm_cpu_simd_info k;
    mmaemu_cpu_simd_info(i, &k);
    const std::string decoders = std::string(k.decode_b) + "; " + k.decode_a;
    PyObject* d = Py_BuildValue("{s:s,s:O,s:i,s:i,s:i,s:s,s:s}", "name", k.name, "available",
                                k.available ? Py_True : Py_False, "mr", k.mr, "row_step",
                                k.row_step, "w", k.w, "note", k.note, "decoders", decoders.c_str());
    if (!d) {
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SET_ITEM(out, i, d);
  }
  return out;
}

// {name: MAC/s} of the SIMD kernels this CPU runs, measured now (mmaemu_cpu_simd_measure).
PyObject* py_cpu_simd_measure(PyObject*, PyObject*) {
  const int n = mmaemu_cpu_simd_count();
  std::vector<double> rates(static_cast<size_t>(n), 0.0);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = mmaemu_cpu_simd_measure(rates.data(), n);
  Py_END_ALLOW_THREADS
  if (rc != MM_OK) {
    PyErr_SetString(PyExc_RuntimeError, mmaemu_error_string(rc));
    return nullptr;
  }
  PyObject* out = PyDict_New();
  for (int i = 0; out && i < n; i++) {
    mm_cpu_simd_info k;
    mmaemu_cpu_simd_info(i, &k);
    if (!k.available) continue;
    PyObject* rate = PyFloat_FromDouble(rates[static_cast<size_t>(i)]);
    if (!rate || PyDict_SetItemString(out, k.name, rate) != 0) {
      Py_XDECREF(rate);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(rate);
  }
  return out;
}

// {enumeration: {name: value}}: every enumeration and limit of the C core (core/enums.c).
PyObject* py_enums(PyObject*, PyObject*) {
  PyObject* out = PyDict_New();
  for (int i = 0; out && i < mmaemu_enum_count(); i++) {
    const mm_enum* e = mmaemu_enum_at(i);
    PyObject* items = PyDict_New();
    for (int j = 0; items && j < e->count; j++) {
      PyObject* value = PyLong_FromLongLong(static_cast<long long>(e->items[j].value));
      if (!value || PyDict_SetItemString(items, e->items[j].name, value) != 0) Py_CLEAR(items);
      Py_XDECREF(value);
    }
    if (!items || PyDict_SetItemString(out, e->name, items) != 0) Py_CLEAR(out);
    Py_XDECREF(items);
  }
  return out;
}

PyObject* py_cpu_a_pass(PyObject*, PyObject*) {
  return PyUnicode_FromString(mmaemu_cpu_a_pass());
}

PyObject* py_cuda_status(PyObject*, PyObject*) {
  return PyUnicode_FromString(mmaemu_cuda_status());
}

// None for a NULL string or a 0 that means "none".
PyObject* str_or_none(const char* s) {
  if (s) return PyUnicode_FromString(s);
  Py_RETURN_NONE;
}

PyObject* int_or_none(int v) {
  if (v) return PyLong_FromLong(v);
  Py_RETURN_NONE;
}

PyObject* kernel_dict(const mm_cuda_kernel* k) {
  int n = 0;
  while (n < MM_KERNEL_MAX_PRESETS && k->presets[n]) n++;
  PyObject* presets = PyTuple_New(n);
  if (!presets) return nullptr;
  for (int i = 0; i < n; i++) PyTuple_SET_ITEM(presets, i, PyUnicode_FromString(k->presets[i]));
  static const char* const kinds[] = {"reference", "tiled", "wgmma"};
  const mm_kernel_functions& f = k->functions;
  return Py_BuildValue(
      "{s:s,s:s,s:s,s:N,s:N,s:i,s:N,s:O,s:O,s:O,s:i,s:i,s:{s:N,s:N,s:N,s:N},s:s}", "name", k->name,
      "module", k->module, "kind", kinds[k->kind], "presets", presets, "block",
      int_or_none(mmaemu_cuda_kernel_block(k)), "min_cc", k->min_cc, "only_cc",
      int_or_none(k->only_cc), "gated", k->gated ? Py_True : Py_False, "exact",
      k->exact ? Py_True : Py_False, "round_robin_splits", k->round_robin_splits ? Py_True : Py_False,
      "tile", k->tile, "smem_bytes", k->smem_bytes, "functions",
      "block32", str_or_none(f.block32), "block16", str_or_none(f.block16), "block32_fast",
      str_or_none(f.block32_fast), "block16_fast", str_or_none(f.block16_fast), "description",
      k->description);
}

PyObject* py_kernel_table(PyObject*, PyObject*) {
  const int n = mmaemu_cuda_kernel_count();
  PyObject* out = PyTuple_New(n);
  if (!out) return nullptr;
  for (int i = 0; i < n; i++) {
    PyObject* d = kernel_dict(mmaemu_cuda_kernel_at(i));
    if (!d) {
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, i, d);
  }
  return out;
}

// cuda_configure(kernel_dir, fatbin_dir, cache_dir, lib_dirs, libcuda_path=None,
// nvrtc_path=None, force_nvrtc=False, disable_nvrtc=False, disable_cuda=False).
PyObject* py_cuda_configure(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"kernel_dir", "fatbin_dir", "cache_dir", "lib_dirs", "libcuda_path",
                             "nvrtc_path", "force_nvrtc", "disable_nvrtc", "disable_cuda", nullptr};
  const char *kernels, *fatbins, *cache, *libcuda = nullptr, *nvrtc = nullptr;
  PyObject* dirs;
  int force_nvrtc = 0, disable_nvrtc = 0, disable_cuda = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "zzzO|zzppp", const_cast<char**>(kw), &kernels,
                                   &fatbins, &cache, &dirs, &libcuda, &nvrtc, &force_nvrtc,
                                   &disable_nvrtc, &disable_cuda))
    return nullptr;
  PyObject* seq = PySequence_Fast(dirs, "lib_dirs must be a sequence of str");
  if (!seq) return nullptr;
  std::vector<std::string> names;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
    const char* s = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
    if (!s) {
      Py_DECREF(seq);
      return nullptr;
    }
    names.emplace_back(s);
  }
  Py_DECREF(seq);
  std::vector<const char*> ptrs;
  for (const auto& s : names) ptrs.push_back(s.c_str());
  mm_cuda_config config = {};
  config.kernel_dir = kernels;
  config.fatbin_dir = fatbins;
  config.cache_dir = cache;
  config.library_dirs = ptrs.data();
  config.n_library_dirs = static_cast<int>(ptrs.size());
  config.libcuda_path = libcuda;
  config.nvrtc_path = nvrtc;
  config.force_nvrtc = force_nvrtc;
  config.disable_nvrtc = disable_nvrtc;
  config.disable_cuda = disable_cuda;
  if (mmaemu_cuda_configure(&config) != MM_OK) {
    PyErr_SetString(PyExc_ValueError, mmaemu_cuda_last_error());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* py_cuda_device_count(PyObject*, PyObject*) {
  return PyLong_FromLong(mmaemu_cuda_device_count());
}

PyObject* py_cuda_device_info(PyObject*, PyObject* args) {
  int device;
  if (!PyArg_ParseTuple(args, "i", &device)) return nullptr;
  char name[256] = "", uuid[33] = "";
  int major = 0, minor = 0, sms = 0, driver = 0;
  if (mmaemu_cuda_device_info(device, name, sizeof name, &major, &minor, &sms, &driver, uuid) != MM_OK)
    Py_RETURN_NONE;
  return Py_BuildValue("{s:i,s:s,s:i,s:(ii),s:i,s:i,s:s}", "index", device, "name", name, "cc",
                       major * 10 + minor, "capability", major, minor, "sm_count", sms,
                       "driver_version", driver, "uuid", uuid);
}

PyObject* py_cuda_kernel_check(PyObject*, PyObject* args) {
  int device;
  const char* kernel;
  if (!PyArg_ParseTuple(args, "is", &device, &kernel)) return nullptr;
  char detail[4096] = "";
  const int rc = mmaemu_cuda_kernel_check(device, kernel, detail, sizeof detail);
  return Py_BuildValue("(Ns)", PyBool_FromLong(rc == MM_OK), detail);
}

PyObject* py_nvrtc_status(PyObject*, PyObject*) {
  int version = 0;
  const char* line = mmaemu_cuda_nvrtc_status(&version);
  return Py_BuildValue("(si)", line, version);
}

PyObject* py_nvrtc_compile(PyObject*, PyObject* args) {
  const char *module, *arch;
  if (!PyArg_ParseTuple(args, "ss", &module, &arch)) return nullptr;
  std::vector<char> detail(16384);
  int64_t bytes = 0;
  int rc;
  Py_BEGIN_ALLOW_THREADS  // independent compiles run in parallel
  rc = mmaemu_cuda_nvrtc_compile(module, arch, detail.data(), static_cast<int>(detail.size()), &bytes);
  Py_END_ALLOW_THREADS
  return Py_BuildValue("(NLs)", PyBool_FromLong(rc == MM_OK), static_cast<long long>(bytes), detail.data());
}

// One GEMM on raw device addresses with the named kernel: what ops.cpp does for CUDA
// tensors, without tensors, so that the loader can be driven against a fake driver. Returns
// (rc, the loader's message). preset: a name, or (block, frac, keep, promote_k[, c_late[,
// split_rr_tile]]).
PyObject* py_cuda_run_plan(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"kernel", "M", "N", "K", "preset", "fmt_a", "fmt_b", "fast_accum",
                             "splits", "scheme", "out_kind", "a", "b", "out", "scale_a",
                             "scale_b", "scale_result", "workspace", "stream", "device", nullptr};
  const char* kernel;
  long long M, N, K;
  PyObject* preset;
  int fmt_a = MM_FMT_E4M3, fmt_b = MM_FMT_E4M3, fast = 1, splits = 1, scheme = 0, out_kind = 0, device = 0;
  unsigned long long a = 0, b = 0, out = 0, sa = 0, sb = 0, sr = 0, ws = 0, stream = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sLLLO|iiiiiiKKKKKKKKi", const_cast<char**>(kw),
                                   &kernel, &M, &N, &K, &preset, &fmt_a, &fmt_b, &fast, &splits,
                                   &scheme, &out_kind, &a, &b, &out, &sa, &sb, &sr, &ws, &stream,
                                   &device))
    return nullptr;
  mm_cuda_call call = {};
  mm_gemm& g = call.g;
  if (PyUnicode_Check(preset)) {
    const int id = mmaemu_preset_id(PyUnicode_AsUTF8(preset));
    if (id < 0) return PyErr_Format(PyExc_KeyError, "unknown preset %R", preset);
    g.preset = mm_preset_get(id);
  } else {
    int32_t p[6] = {0, 0, 0, 0, 0, 0};
    if (!PyArg_ParseTuple(preset, "iiii|ii", &p[0], &p[1], &p[2], &p[3], &p[4], &p[5])) return nullptr;
    if (p[0] < 1 || p[3] < p[0] || p[3] % p[0] != 0)
      return PyErr_Format(PyExc_ValueError,
                          "preset: promote_k (%d) must be a positive multiple of block (%d)", p[3], p[0]);
    g.preset = mm_preset{p[0], p[1], p[2], p[3], p[4], p[5]};
  }
  g.a = reinterpret_cast<const uint8_t*>(a);
  g.b = reinterpret_cast<const uint8_t*>(b);
  g.out = reinterpret_cast<void*>(out);
  g.lda = g.ldb = K;
  g.ldo = N;
  g.M = M;
  g.N = N;
  g.K = K;
  g.fmt_a = fmt_a;
  g.fmt_b = fmt_b;
  g.fast_accum = fast;
  g.splits = splits;
  g.scheme = scheme;
  g.out_kind = out_kind;
  g.epilogue_order = MM_EPI_H1;
  g.scale_a = g.scale_b = g.scale_result = 1.0f;
  call.scale_a = reinterpret_cast<const float*>(sa);
  call.scale_b = reinterpret_cast<const float*>(sb);
  call.scale_result = reinterpret_cast<const float*>(sr);
  call.workspace = reinterpret_cast<void*>(ws);
  call.stream = reinterpret_cast<void*>(stream);
  call.device = device;
  const int rc = mmaemu_cuda_gemm_ex(&call, kernel);
  return Py_BuildValue("(is)", rc, mmaemu_cuda_last_error());
}

// The arithmetic of a named preset, as the ops compute it (mmaemu_presets.h): the one source of
// these numbers for mmaemu.get_preset() and the tests. promote_k = k per promotion interval.
static PyObject* py_preset(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (!name) return nullptr;
  const int id = mmaemu_preset_id(name);
  if (id < 0) {
    PyErr_Format(PyExc_KeyError, "unknown preset '%s'", name);
    return nullptr;
  }
  const mm_preset p = mm_preset_get(id);
  return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "id", id, "block", (int)p.block,
                       "frac", (int)p.frac, "keep", (int)p.keep,
                       "promote_k", (int)p.promote_k, "c_late", (int)p.c_late,
                       "split_rr_tile", (int)p.split_rr_tile);
}

PyMethodDef methods[] = {
    {"cpu_flushes_denormals", py_cpu_flushes_denormals, METH_NOARGS,
     "True when this thread's CPU flushes fp32 subnormals to zero."},
    {"enums", py_enums, METH_NOARGS,
     "enums() -> {enumeration: {name: value}}: split_schemes, epilogues, outputs, fp8_formats, "
     "biases, presets, limits, errors, as the C core defines them."},
    {"cpu_simd_paths", py_cpu_simd_paths, METH_NOARGS,
     "The SIMD kernels of the cpu executor this CPU runs, comma-separated."},
    {"cpu_simd_kernels", py_cpu_simd_kernels, METH_NOARGS,
     "cpu_simd_kernels() -> [dict]: name, available, mr, row_step, w, note, decoders of each SIMD "
     "kernel of the cpu executor ('cpu:<name>')."},
    {"cpu_simd_measure", py_cpu_simd_measure, METH_NOARGS,
     "cpu_simd_measure() -> {name: MAC/s}: each available SIMD kernel timed now (one thread, "
     "hopper fast-accumulation tiles, a few milliseconds)."},
    {"cpu_a_pass", py_cpu_a_pass, METH_NOARGS,
     "How many of A's decoded rows the cpu executor holds per pass, and why (the cache's size)."},
    {"preset", py_preset, METH_O,
     "preset(name) -> dict: id, block, frac, keep, promote_k, c_late, split_rr_tile of the named "
     "preset as the ops compute it (KeyError for an unknown name)."},
    {"kernel_table", py_kernel_table, METH_NOARGS,
     "The CUDA kernels (csrc/cuda/kernel_table.c): a tuple of dicts, one per kernel."},
    {"cuda_configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_cuda_configure)),
     METH_VARARGS | METH_KEYWORDS,
     "cuda_configure(kernel_dir, fatbin_dir, cache_dir, lib_dirs, libcuda_path=None, "
     "nvrtc_path=None, force_nvrtc=False, disable_nvrtc=False, disable_cuda=False): every setting "
     "of the CUDA loader (None/False: not set); it reads no environment variable."},
    {"cuda_status", py_cuda_status, METH_NOARGS, "One line on the CUDA driver loader's state."},
    {"cuda_device_count", py_cuda_device_count, METH_NOARGS,
     "CUDA devices the driver sees (0 without a driver)."},
    {"cuda_device_info", py_cuda_device_info, METH_VARARGS,
     "cuda_device_info(device): a dict of the device's facts, or None."},
    {"cuda_kernel_check", py_cuda_kernel_check, METH_VARARGS,
     "cuda_kernel_check(device, kernel): (ok, how its module loaded or why not)."},
    {"nvrtc_status", py_nvrtc_status, METH_NOARGS, "(where NVRTC is or why not, its version)."},
    {"nvrtc_compile", py_nvrtc_compile, METH_VARARGS,
     "nvrtc_compile(module, arch): (ok, image bytes, NVRTC's location or log)."},
    {"cuda_run_plan", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_cuda_run_plan)),
     METH_VARARGS | METH_KEYWORDS,
     "cuda_run_plan(kernel, M, N, K, preset, ...): one GEMM on raw device addresses, for the "
     "loader's tests; (rc, message)."},
    {nullptr, nullptr, 0, nullptr}};

struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
