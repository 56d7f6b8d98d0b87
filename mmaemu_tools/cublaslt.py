"""cuBLASLt through ctypes: the heuristic torch._scaled_mm asks, and the library's trace log.

torch (aten/src/ATen/cuda/CUDABlas.cpp, `scaled_gemm`) calls
`cublasLtMatmulAlgoGetHeuristic(..., requestedAlgoCount = 1, ...)` and runs result #0. This
module builds the same descriptors (research note arithmetic.md section 4.3) and reads back
what the heuristic picked: algo id, tile, stages, split-K number, reduction scheme, custom
option, cluster shape, workspace. It also captures cuBLASLt's own trace of the calls torch
makes (cublasLtLoggerSetCallback), which is the ground truth of what ran: the ctypes query is
a reproduction of torch's descriptor, the trace is what torch actually passed.

Everything is loaded lazily: importing this module never needs CUDA or the library, and every
failure raises CublasLtUnavailable with the reason.

Enum values below are cuBLASLt's (cublasLt.h, CUDA 12/13); each is named after the constant.
"""
import ctypes
import os
import re

from ._hwcommon import load_standalone

library_candidates = load_standalone("runtime/cuda_libs").library_candidates   # not via mmaemu/__init__

# cudaDataType_t
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUDA_R_8F_E4M3, CUDA_R_8F_E5M2 = 28, 29
CUBLAS_COMPUTE_32F = 68
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
# cublasLtMatmulDescAttributes_t
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8
DESC_A_SCALE_POINTER, DESC_B_SCALE_POINTER, DESC_D_SCALE_POINTER = 17, 18, 20
DESC_FAST_ACCUM, DESC_BIAS_DATA_TYPE = 25, 26
CUBLASLT_EPILOGUE_BIAS = 4
# cublasLtMatmulPreferenceAttributes_t
PREF_MAX_WORKSPACE_BYTES = 1
# cublasLtMatmulAlgoConfigAttributes_t
ALGO_CONFIG = {"algo": 0, "tile": 1, "splits": 2, "reduction_scheme": 3, "cta_swizzling": 4,
               "custom_option": 5, "stages": 6, "inner_shape": 7, "cluster_shape": 8}
# cublasLtReductionScheme_t
REDUCTION_SCHEMES = {0: "NONE", 1: "INPLACE", 2: "COMPUTE_TYPE", 4: "OUTPUT_TYPE"}
# libraryPropertyType
MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL = 0, 1, 2

TYPE_OF = {"e4m3": CUDA_R_8F_E4M3, "e5m2": CUDA_R_8F_E5M2, "float32": CUDA_R_32F,
           "bfloat16": CUDA_R_16BF, "float16": CUDA_R_16F, "float8_e4m3fn": CUDA_R_8F_E4M3,
           "float8_e5m2": CUDA_R_8F_E5M2}

# How mmaemu models each cuBLAS reduction scheme (inferred until probe P5 runs on hardware):
# every split is a contiguous K range and the partials are added in split order in fp32.
SCHEME_TO_MMAEMU = {"NONE": "none", "INPLACE": "contiguous", "COMPUTE_TYPE": "contiguous",
                    "OUTPUT_TYPE": "contiguous"}


class CublasLtUnavailable(RuntimeError):
    """libcublasLt could not be loaded or used here (the message says why)."""


class _HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspaceSize", ctypes.c_size_t),
                ("state", ctypes.c_int), ("wavesCount", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


_LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p)


def candidate_paths():
    """Where libcublasLt may be: MMAEMU_CUBLASLT_PATH, the copy this process already loaded
    (torch's), then the directories of mmaemu/runtime/cuda_libs.py."""
    return library_candidates("libcublasLt", os.environ.get("MMAEMU_CUBLASLT_PATH"),
                              os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"))


class CublasLt:
    """A handle on libcublasLt; create after CUDA is initialised (torch.cuda.init())."""

    def __init__(self, path=None):
        errors = []
        self.lib = None
        for p in ([path] if path else candidate_paths()):
            try:
                self.lib = ctypes.CDLL(p)
                self.path = p
                break
            except OSError as e:
                errors.append(f"{p}: {e}")
        if self.lib is None:
            raise CublasLtUnavailable("libcublasLt not found: " + "; ".join(errors[-3:]))
        L = self.lib
        try:
            L.cublasLtGetVersion.restype = ctypes.c_size_t
            for name in ("cublasLtCreate", "cublasLtMatmulDescCreate", "cublasLtMatmulDescSetAttribute",
                         "cublasLtMatrixLayoutCreate", "cublasLtMatmulPreferenceCreate",
                         "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatmulAlgoGetHeuristic",
                         "cublasLtMatmulAlgoConfigGetAttribute", "cublasLtMatmulDescDestroy",
                         "cublasLtMatrixLayoutDestroy", "cublasLtMatmulPreferenceDestroy",
                         "cublasLtGetProperty"):
                getattr(L, name).restype = ctypes.c_int
            L.cublasLtMatrixLayoutCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                                     ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64]
            L.cublasLtMatmulDescCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                                   ctypes.c_int]
            L.cublasLtMatmulDescSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                                         ctypes.c_void_p, ctypes.c_size_t]
            L.cublasLtMatmulPreferenceSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                                               ctypes.c_void_p, ctypes.c_size_t]
            L.cublasLtMatmulAlgoGetHeuristic.argtypes = [ctypes.c_void_p] * 7 + [
                ctypes.c_int, ctypes.POINTER(_HeuristicResult), ctypes.POINTER(ctypes.c_int)]
            L.cublasLtMatmulAlgoConfigGetAttribute.argtypes = [
                ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                ctypes.POINTER(ctypes.c_size_t)]
        except AttributeError as e:
            raise CublasLtUnavailable(f"{self.path} lacks a cuBLASLt entry point: {e}") from e
        self._handle = None
        self._log_cb = None
        self.log_lines = []

    # -- versions --------------------------------------------------------------------------
    def version(self):
        return int(self.lib.cublasLtGetVersion())

    def version_string(self):
        parts = []
        for prop in (MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL):
            v = ctypes.c_int(-1)
            self.lib.cublasLtGetProperty(prop, ctypes.byref(v))
            parts.append(str(v.value))
        return ".".join(parts) + f" (cublasLtGetVersion {self.version()})"

    # -- handle ----------------------------------------------------------------------------
    def handle(self):
        if self._handle is None:
            h = ctypes.c_void_p()
            st = self.lib.cublasLtCreate(ctypes.byref(h))
            if st != 0:
                raise CublasLtUnavailable(f"cublasLtCreate failed with status {st} (no CUDA device?)")
            self._handle = h
        return self._handle

    def _check(self, st, what):
        if st != 0:
            raise RuntimeError(f"{what} failed with cuBLAS status {st}")

    # -- the heuristic ---------------------------------------------------------------------
    def heuristic(self, M, N, K, fmt_a, fmt_b, out_dtype, fast_accum, workspace_bytes,
                  scale_ptrs=(0, 0), d_scale_ptr=None, bias_dtype=None, bias_ptr=None,
                  requested=1):
        """cuBLASLt's choice for torch._scaled_mm(mat1 [M,K] fmt_a, mat2 [K,N] fmt_b) -> dict.

        The descriptor is torch's: cuBLAS computes out^T = mat2^T mat1^T, so cuBLAS A is torch's
        mat2 (transa = T, rows K, cols N, ld K), B is mat1 (rows K, cols M, ld K), C/D are
        [N, M] with ld N; C is typed by the bias dtype, else the out dtype (Half for fp8 out).
        Returns None when the heuristic offers no algorithm (torch then raises NOT_SUPPORTED).
        """
        L = self.lib
        desc, la, lb, lc, ld, pref = (ctypes.c_void_p() for _ in range(6))
        self._check(L.cublasLtMatmulDescCreate(ctypes.byref(desc), CUBLAS_COMPUTE_32F, CUDA_R_32F),
                    "cublasLtMatmulDescCreate")
        try:
            def set_desc(attr, value):
                self._check(L.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value),
                                                              ctypes.sizeof(value)),
                            f"cublasLtMatmulDescSetAttribute({attr})")
            set_desc(DESC_TRANSA, ctypes.c_int32(CUBLAS_OP_T))
            set_desc(DESC_TRANSB, ctypes.c_int32(CUBLAS_OP_N))
            set_desc(DESC_A_SCALE_POINTER, ctypes.c_void_p(scale_ptrs[1]))  # cuBLAS A = mat2
            set_desc(DESC_B_SCALE_POINTER, ctypes.c_void_p(scale_ptrs[0]))
            if d_scale_ptr is not None:
                set_desc(DESC_D_SCALE_POINTER, ctypes.c_void_p(d_scale_ptr))
            set_desc(DESC_FAST_ACCUM, ctypes.c_int8(1 if fast_accum else 0))
            if bias_dtype is not None:
                set_desc(DESC_BIAS_POINTER, ctypes.c_void_p(bias_ptr or 0))
                set_desc(DESC_EPILOGUE, ctypes.c_uint32(CUBLASLT_EPILOGUE_BIAS))
                set_desc(DESC_BIAS_DATA_TYPE, ctypes.c_int32(TYPE_OF[bias_dtype]))
            c_type = bias_dtype or ("float16" if out_dtype.startswith("float8") else out_dtype)
            for lay, t, rows, cols, ldim in ((la, TYPE_OF[fmt_b], K, N, K),
                                            (lb, TYPE_OF[fmt_a], K, M, K),
                                            (lc, TYPE_OF[c_type], N, M, N),
                                            (ld, TYPE_OF[out_dtype], N, M, N)):
                self._check(L.cublasLtMatrixLayoutCreate(ctypes.byref(lay), t, rows, cols, ldim),
                            "cublasLtMatrixLayoutCreate")
            self._check(L.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)),
                        "cublasLtMatmulPreferenceCreate")
            ws = ctypes.c_uint64(int(workspace_bytes))
            self._check(L.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE_BYTES,
                                                                ctypes.byref(ws), 8),
                        "cublasLtMatmulPreferenceSetAttribute")
            results = (_HeuristicResult * requested)()
            n = ctypes.c_int(0)
            st = L.cublasLtMatmulAlgoGetHeuristic(self.handle(), desc, la, lb, lc, ld, pref,
                                                  requested, results, ctypes.byref(n))
            if st != 0 or n.value == 0:
                return None if st in (0, 15) else {"error": f"cuBLAS status {st}"}
            return self._describe(results[0])
        finally:
            for lay in (la, lb, lc, ld):
                if lay.value:
                    L.cublasLtMatrixLayoutDestroy(lay)
            if pref.value:
                L.cublasLtMatmulPreferenceDestroy(pref)
            L.cublasLtMatmulDescDestroy(desc)

    def _config(self, res, attr):
        need = ctypes.c_size_t(0)
        st = self.lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(res.algo), attr, None, 0,
                                                           ctypes.byref(need))
        size = need.value if st == 0 and need.value in (1, 2, 4, 8) else 4
        buf = ctypes.c_uint64(0)
        wrote = ctypes.c_size_t(0)
        st = self.lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(res.algo), attr,
                                                           ctypes.byref(buf), size,
                                                           ctypes.byref(wrote))
        if st != 0:
            return None
        v = buf.value & ((1 << (8 * size)) - 1)
        return v - (1 << 32) if attr == 0 and size == 4 and v >= 1 << 31 else v

    def _describe(self, res):
        cfg = {k: self._config(res, a) for k, a in ALGO_CONFIG.items()}
        cfg["reduction_scheme"] = REDUCTION_SCHEMES.get(cfg["reduction_scheme"],
                                                        str(cfg["reduction_scheme"]))
        cfg["workspace_bytes_needed"] = int(res.workspaceSize)
        cfg["waves"] = float(res.wavesCount)
        cfg["algo_bytes"] = [f"{x:016x}" for x in res.algo]
        return cfg

    # -- trace log -------------------------------------------------------------------------
    def start_log(self, mask=0x3):
        """Captures cuBLASLt's log messages through a callback.

        Mask bits (cuBLAS docs, "cuBLASLt Logging"): 1 error, 2 trace (the calls that launch
        kernels, cublasLtMatmul's algo=[...] line among them), 4 hints, 8 info, 16 API trace
        (every API call: thousands of lines per GEMM). cuBLASLt also writes each message to its
        log file, stdout when none is set (CUBLASLT_LOG_FILE unset), so the file is opened on
        /dev/null first (cublasLtLoggerOpenFile, cuBLASLt API "cublasLtLoggerOpenFile()").
        """
        def cb(level, func, msg):
            self.log_lines.append((int(level), (func or b"").decode(errors="replace"),
                                   (msg or b"").decode(errors="replace")))
        st = self.lib.cublasLtLoggerOpenFile(ctypes.c_char_p(os.devnull.encode()))
        if st != 0:
            raise CublasLtUnavailable(f"cublasLtLoggerOpenFile({os.devnull}) failed ({st})")
        self._log_cb = _LOG_CALLBACK(cb)   # keep a reference: cuBLASLt holds a raw pointer
        st = self.lib.cublasLtLoggerSetCallback(self._log_cb)
        if st != 0:
            raise CublasLtUnavailable(f"cublasLtLoggerSetCallback failed ({st})")
        st = self.lib.cublasLtLoggerSetMask(ctypes.c_int(mask))
        if st != 0:
            raise CublasLtUnavailable(f"cublasLtLoggerSetMask failed ({st})")

    def stop_log(self):
        self.lib.cublasLtLoggerSetMask(ctypes.c_int(0))

    def take_log(self):
        lines, self.log_lines = self.log_lines, []
        return lines


# ------------------------------------------------------------------------------------------
# Parsing cuBLASLt's trace of cublasLtMatmul (works on log files and callback messages)
# ------------------------------------------------------------------------------------------

_KV = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\[[^\]]*\]|[^\s\]]+)")


def parse_kv(text):
    """key=value pairs of a trace message; bracketed groups (algo=[...]) become dicts."""
    out = {}
    for k, v in _KV.findall(text):
        if v.startswith("["):
            out[k] = {kk: vv for kk, vv in _KV.findall(v[1:-1])}
        else:
            out[k] = v
    return out


def _int_or_none(v):
    if v is None:
        return None
    m = re.search(r"-?\d+", str(v))
    return int(m.group()) if m else None


def parse_matmul_trace(message):
    """The algorithm fields of one cublasLtMatmul trace message, or None if it is not one."""
    if "algo=" not in message and "numSplitsK" not in message:
        return None
    kv = parse_kv(message)
    algo = kv.get("algo") if isinstance(kv.get("algo"), dict) else kv
    scheme_raw = str(algo.get("reductionScheme", algo.get("reduction", "")))
    scheme = "NONE"
    for name in ("INPLACE", "COMPUTE_TYPE", "OUTPUT_TYPE"):
        if name in scheme_raw.upper():
            scheme = name
    if scheme_raw.strip().isdigit():
        scheme = REDUCTION_SCHEMES.get(int(scheme_raw), scheme_raw)
    # The trace leaves out fields at their defaults: an unsplit algorithm's algo=[...] has no
    # numSplitsK, reductionScheme or customOption (as in "algo=[algoId=66 tile=MATMUL_TILE_64x16
    # stages=MATMUL_STAGES_64xAUTO customOption=1 clusterShape=CLUSTER_SHAPE_4x1x1]"), so a
    # present group means S = 1, scheme NONE, customOption 0 for what it omits.
    grouped = isinstance(kv.get("algo"), dict)
    splits = _int_or_none(algo.get("numSplitsK", algo.get("splitK")))
    custom = _int_or_none(algo.get("customOption"))
    res = {
        "algo": _int_or_none(algo.get("algoId", algo.get("id"))),
        "tile": algo.get("tile"),
        "stages": algo.get("stages"),
        "splits": 1 if splits is None and grouped else splits,
        "reduction_scheme": scheme,
        "custom_option": 0 if custom is None and grouped else custom,
        "cluster_shape": algo.get("clusterShape"),
        "workspace_bytes": _int_or_none(kv.get("workSpaceSizeInBytes")),
    }
    if res["splits"] is None and res["algo"] is None:
        return None
    for desc in ("Adesc", "Bdesc", "Ddesc"):
        if isinstance(kv.get(desc), dict):
            res[desc] = kv[desc]
    if isinstance(kv.get("computeDesc"), dict):
        res["computeDesc"] = kv["computeDesc"]
    return res


def matmul_traces(lines):
    """Parsed cublasLtMatmul traces among captured (level, function, message) lines."""
    out = []
    for _lvl, func, msg in lines:
        if "Matmul" in func and "Heuristic" not in func and "Desc" not in func and "Preference" not in func:
            p = parse_matmul_trace(msg)
            if p is not None:
                p["raw"] = msg[:2000]
                out.append(p)
    return out


def load_or_none(path=None):
    """A CublasLt, or (None, reason)."""
    try:
        return CublasLt(path), None
    except CublasLtUnavailable as e:
        return None, str(e)


class SyntheticLt:
    """A stand-in heuristic for dry runs: deterministic, workspace-dependent, and labelled.

    It exists only so that the sweep, table and envelope code can run end to end without a
    GPU; its answers are invented (split when M*N is small against K and the fp32 partials
    fit in the workspace) and every table built from it says so.
    """
    path = "synthetic (dry run)"

    def version_string(self):
        return "synthetic (dry run)"

    def heuristic(self, M, N, K, fmt_a, fmt_b, out_dtype, fast_accum, workspace_bytes, **kw):
        S = 1
        if M * N * 4 <= K:
            S = min(8, max(2, K // max(4 * M * N, 1)))
            while S > 1 and S * M * N * 4 > workspace_bytes:
                S -= 1
        return {"algo": 66, "tile": 20, "splits": S,
                "reduction_scheme": "COMPUTE_TYPE" if S > 1 else "NONE", "cta_swizzling": 0,
                "custom_option": 0, "stages": 0, "inner_shape": 0, "cluster_shape": 0,
                "workspace_bytes_needed": S * M * N * 4 if S > 1 else 0, "waves": 1.0,
                "synthetic": True}


# -- the live heuristic query (the recording tools; planning reads tables only) -----------------
_OUT_NAMES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "e4m3": "e4m3", "e5m2": "e5m2"}
_LIVE = {}


def _device_scale_ptrs():
    """Two fp32 scales on the GPU: torch's scaled_gemm always sets the A/B scale pointers to
    device tensors (CUDABlas.cpp), and the heuristic is asked with the same descriptor."""
    if "scales" not in _LIVE:
        import torch
        _LIVE["scales"] = torch.ones(2, dtype=torch.float32, device="cuda")
    t = _LIVE["scales"]
    return (t.data_ptr(), t.data_ptr() + 4)


def query_split(profile, M, N, K, fmt_a, fmt_b, out_dtype, fast):
    """(S, scheme, note) from cuBLASLt's heuristic, or None when this is not the profile's
    library. Planning never calls it: mmaemu plans from recorded tables only; the
    probe and recording tools (mmaemu_tools) ask the live library through it."""
    if "lt" not in _LIVE:
        import torch
        torch.cuda.init()
        _LIVE["lt"] = CublasLt()
    lt = _LIVE["lt"]
    ours = lt.version_string().split(" ")[0]  # major.minor.patch (the build number is not exposed)
    want = profile.cublaslt_version or ""
    if want != ours and not want.startswith(ours + "."):
        return None
    cfg = lt.heuristic(M, N, K, fmt_a, fmt_b, _OUT_NAMES[out_dtype], fast, profile.workspace_bytes,
                       scale_ptrs=_device_scale_ptrs())
    if cfg is None:
        return None
    S = int(cfg["splits"] or 1)
    scheme = "none" if S <= 1 else SCHEME_TO_MMAEMU.get(cfg["reduction_scheme"], "contiguous")
    note = (f"live cuBLASLt {lt.version_string()} heuristic: algo {cfg['algo']}, tile {cfg['tile']}, "
            f"numSplitsK {S}, reductionScheme {cfg['reduction_scheme']}, customOption "
            f"{cfg['custom_option']}")
    return S, scheme, note
