"""Shared pieces of the hardware scripts: input generation, bit encodings, platforms, replay.

Everything here runs without a GPU. The scripts in this folder use it to drive either the real
`torch._scaled_mm` on a CUDA GPU or, in dry-run mode, the mmaemu CPU model, and the golden
replay test uses it to regenerate recorded inputs bit for bit.

Inputs are never stored as tensors: a generator spec (seed, shape, format, exponent range,
explicit patches) regenerates the exact FP8 bytes with a counter-based hash (splitmix64) in
numpy, so the bytes do not depend on torch's random number generators or their versions.
The sha256 of the bytes is stored next to the spec and checked on regeneration.
"""
import datetime
import hashlib
import json
import os
import platform
import struct
import subprocess
import sys

import numpy as np
import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_standalone(path):
    """mmaemu/<path>.py (e.g. "runtime/cuda_libs") without importing the mmaemu package
    (registered as mmaemu_<name>_standalone).

    The package's __init__ imports the C extension (_C), a build output that a fresh checkout
    lacks while the build runs beside the GPU jobs; the modules the tools take from it need only
    ctypes, so they are loaded from their files. Where mmaemu is already imported, its own
    module is returned.
    """
    dotted = "mmaemu." + path.replace("/", ".")
    if dotted in sys.modules:
        return sys.modules[dotted]
    standalone = "mmaemu_" + path.replace("/", "_") + "_standalone"
    if standalone not in sys.modules:
        import importlib.util
        spec = importlib.util.spec_from_file_location(standalone, os.path.join(REPO_ROOT, "mmaemu", path + ".py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[standalone]


FMT_DTYPE = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
OUT_DTYPES = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
}
DTYPE_NAME = {v: k for k, v in OUT_DTYPES.items()}
# Exponent field limits of the normal/subnormal encodings (the all-ones field of E5M2 is Inf/NaN).
EXP_FIELD_MAX = {"e4m3": 15, "e5m2": 30}
MANT_BITS = {"e4m3": 3, "e5m2": 2}
EXP_BITS = {"e4m3": 4, "e5m2": 5}


# ------------------------------------------------------------------------------------------
# Deterministic FP8 input generation
# ------------------------------------------------------------------------------------------

def _splitmix64(x):
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def gen_fp8_bytes(spec, rows_subset=None):
    """The FP8 bytes [rows, cols] (row-major, np.uint8) that a generator spec describes.

    spec keys: rows, cols, fmt ('e4m3' | 'e5m2'), seed (int), exp_lo / exp_hi (inclusive range
    of the biased exponent field; field 0 gives subnormals), zero_permille (0..1000, share of
    exact zeros), patches ([[row, col, byte], ...] applied last, e.g. NaN or Inf bytes).
    Random bytes never encode NaN/Inf: only patches do. Every byte depends on its own index
    only, so `rows_subset` (a list of row indices) regenerates just those rows.
    """
    rows, cols, fmt = int(spec["rows"]), int(spec["cols"]), spec["fmt"]
    if fmt not in FMT_DTYPE:
        raise ValueError(f"unknown FP8 format {fmt!r}")
    lo, hi = int(spec.get("exp_lo", 0)), int(spec.get("exp_hi", EXP_FIELD_MAX[fmt]))
    if not 0 <= lo <= hi <= EXP_FIELD_MAX[fmt]:
        raise ValueError(f"exponent field range [{lo}, {hi}] invalid for {fmt}")
    seed = int(spec["seed"]) & 0xFFFFFFFF
    row_ids = list(range(rows)) if rows_subset is None else [int(r) for r in rows_subset]
    if any(not 0 <= r < rows for r in row_ids):
        raise ValueError("row index out of range")
    idx = (np.asarray(row_ids, dtype=np.uint64)[:, None] * np.uint64(cols)
           + np.arange(cols, dtype=np.uint64)[None, :]).ravel() + (np.uint64(seed) << np.uint64(32))
    r = _splitmix64(_splitmix64(idx))
    mb = MANT_BITS[fmt]
    sign = (r & np.uint64(1)).astype(np.uint8)
    mant = ((r >> np.uint64(1)) & np.uint64((1 << mb) - 1)).astype(np.uint8)
    span = hi - lo + 1
    expf = (lo + ((r >> np.uint64(8)) % np.uint64(span))).astype(np.uint8)
    zero = ((r >> np.uint64(40)) % np.uint64(1000)) < np.uint64(int(spec.get("zero_permille", 0)))
    out = (sign << np.uint8(7)) | (expf << np.uint8(mb)) | mant
    if fmt == "e4m3":  # S.1111.111 is NaN: use the largest finite value instead
        out = np.where((out & 0x7F) == 0x7F, out - 1, out).astype(np.uint8)
    out = np.where(zero, sign << np.uint8(7), out).astype(np.uint8).reshape(len(row_ids), cols)
    where = {r: i for i, r in enumerate(row_ids)}
    for rr, cc, byte in spec.get("patches", []):
        if int(rr) in where:
            out[where[int(rr)], int(cc)] = int(byte) & 0xFF
    return out


def sha256_hex(data):
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).tobytes()
    return hashlib.sha256(data).hexdigest()


def fp8_tensor(u8, fmt):
    """A CPU FP8 tensor with exactly these bytes."""
    return torch.from_numpy(np.ascontiguousarray(u8, dtype=np.uint8)).view(FMT_DTYPE[fmt])


def fp8_value_table(fmt):
    """float64 value of each of the 256 bytes of an FP8 format (NaN/Inf as they decode)."""
    return torch.arange(256, dtype=torch.uint8).view(FMT_DTYPE[fmt]).double().numpy()


def fp8_bytes_of(values, fmt):
    """FP8 bytes of exactly representable values (raises if one is not representable)."""
    t = torch.as_tensor(np.asarray(values, dtype=np.float64))
    q = t.to(FMT_DTYPE[fmt])
    back = q.double()
    ok = (back == t) | (torch.isnan(back) & torch.isnan(t))
    if not bool(ok.all()):
        bad = t[~ok][:4].tolist()
        raise ValueError(f"values not representable in {fmt}: {bad}")
    return q.view(torch.uint8).numpy().copy()


# ------------------------------------------------------------------------------------------
# fp32 helpers
# ------------------------------------------------------------------------------------------

def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def bits_f32(u):
    return struct.unpack("<f", struct.pack("<I", int(u) & 0xFFFFFFFF))[0]


def scale_record(v):
    """A fp32 scalar as stored in JSON: exact bits plus a readable value."""
    if v is None:
        return None
    b = f32_bits(np.float32(v))
    return {"bits": f"0x{b:08x}", "value": repr(bits_f32(b))}


def scale_from_record(rec):
    if rec is None:
        return None
    return torch.tensor([bits_f32(int(rec["bits"], 16))], dtype=torch.float32).reshape(())


def tensor_bits_hex(t):
    """Little-endian bytes of a tensor's bit patterns, as hex."""
    t = t.detach().cpu().contiguous()
    return t.view(torch.uint8).numpy().tobytes().hex()


def tensor_sha256(t):
    t = t.detach().cpu().contiguous()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()


def tensor_from_hex(hexstr, shape, dtype):
    raw = np.frombuffer(bytes.fromhex(hexstr), dtype=np.uint8).copy()
    return torch.from_numpy(raw).view(dtype).reshape(shape)


# ------------------------------------------------------------------------------------------
# Platforms: what ran, with versions
# ------------------------------------------------------------------------------------------

def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001 - a missing tool only leaves a field empty
        return ""


# The name a run's profiles and goldens take when no GPU is there (rehearsals, dry runs).
DEFAULT_STEM = "h200"


def gpu_stem(name, sm_count):
    """The short name of a GPU for its profiles (stem, stem-te, stem-ws0) and goldens
    (stem_torch, ...): "h200", "gh200", "h100-sxm", "h100-pcie", "h100-nvl", from the driver's
    device name and SM count. An H100 name without its form factor ("NVIDIA H100 80GB HBM3") is
    told by its SM count: 132 is the SXM part (114 the PCIe, which says so in its name)."""
    words = [w for w in "".join(c if c.isalnum() else " " for c in name.lower()).split()
             if w != "nvidia"]
    if not words:
        return "gpu"
    model = words[0]
    if model != "h100":
        return model
    if "pcie" in words:
        return "h100-pcie"
    if "nvl" in words:
        return "h100-nvl"
    return "h100-sxm" if sm_count == 132 else f"h100-{sm_count}sm"


def device_stem():
    """gpu_stem of CUDA device 0, or DEFAULT_STEM where there is none (a rehearsal)."""
    if not torch.cuda.is_available():
        return DEFAULT_STEM
    p = torch.cuda.get_device_properties(0)
    return gpu_stem(p.name, p.multi_processor_count)


def platform_info(dry_run, cublaslt=None):
    """Versions and hardware facts that identify the platform a record comes from."""
    info = {
        "dry_run": bool(dry_run),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "env": {k: os.environ[k] for k in ("CUBLASLT_WORKSPACE_SIZE", "CUBLAS_WORKSPACE_CONFIG",
                                           "TORCH_CUBLASLT_UNIFIED_WORKSPACE")
                if k in os.environ},
    }
    if dry_run:
        info["platform"] = "mmaemu CPU model (dry run, NOT hardware data)"
        try:
            import mmaemu
            info["mmaemu"] = getattr(mmaemu, "__version__", "?")
        except ImportError as e:      # not built yet: the heuristic dry run needs no model
            info["mmaemu"] = f"not importable ({e})"
        return info
    p = torch.cuda.get_device_properties(0)
    info.update({
        "platform": "torch._scaled_mm on CUDA",
        "gpu": p.name,
        "sm_count": p.multi_processor_count,
        "capability": f"{p.major}.{p.minor}",
        "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "cudnn": str(torch.backends.cudnn.version()),
    })
    if cublaslt is not None:
        try:
            info["cublaslt_version"] = cublaslt.version_string()
            info["cublaslt_path"] = cublaslt.path
        except Exception as e:  # noqa: BLE001
            info["cublaslt_version"] = f"unknown ({e})"
    return info


# ------------------------------------------------------------------------------------------
# Backends: the same call on real hardware or on the CPU model
# ------------------------------------------------------------------------------------------

class TorchCudaBackend:
    """torch._scaled_mm on the first CUDA device (the hardware being measured)."""
    dry_run = False

    def __init__(self):
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        self.dev = torch.device("cuda", 0)

    def describe(self):
        return f"torch._scaled_mm on {torch.cuda.get_device_name(0)}"

    def scaled_mm(self, a_u8, b_u8, fmt_a, fmt_b, out_dtype, fast, scale_a, scale_b,
                  scale_result=None, bias=None, splitk=None):
        """out = a @ b.T with a [M, K], b [N, K] FP8 bytes; returns the CPU output tensor."""
        a = fp8_tensor(a_u8, fmt_a).to(self.dev)
        b = fp8_tensor(b_u8, fmt_b).to(self.dev)
        sa = torch.tensor(float(np.float32(scale_a)), dtype=torch.float32, device=self.dev)
        sb = torch.tensor(float(np.float32(scale_b)), dtype=torch.float32, device=self.dev)
        sr = None if scale_result is None else torch.tensor(
            float(np.float32(scale_result)), dtype=torch.float32, device=self.dev)
        kw = {}                               # only what is given: keyword sets vary by version
        if bias is not None:
            kw["bias"] = bias.to(self.dev)
        if sr is not None:
            kw["scale_result"] = sr
        out = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=out_dtype, use_fast_accum=bool(fast), **kw)
        torch.cuda.synchronize()
        return out.cpu()


class ModelBackend:
    """The mmaemu CPU model with an explicit split (dry runs: no hardware involved)."""
    dry_run = True

    def __init__(self, split_policy=None):
        import mmaemu
        self.mmaemu = mmaemu
        # split_policy(M, N, K, fast) -> 1 or (S, scheme): a simulated cuBLAS decision.
        self.split_policy = split_policy or (lambda M, N, K, fast: 1)

    def describe(self):
        return "mmaemu CPU model, backend='reference' (dry run)"

    def scaled_mm(self, a_u8, b_u8, fmt_a, fmt_b, out_dtype, fast, scale_a, scale_b,
                  scale_result=None, bias=None, splitk=None):
        if bias is not None:
            raise NotImplementedError("the CPU model has no bias in v0.1")
        a = fp8_tensor(a_u8, fmt_a)
        b = fp8_tensor(b_u8, fmt_b)
        M, K = a.shape
        N = b.shape[0]
        split = splitk if splitk is not None else self.split_policy(M, N, K, fast)
        sa = torch.tensor(float(np.float32(scale_a)), dtype=torch.float32)
        sb = torch.tensor(float(np.float32(scale_b)), dtype=torch.float32)
        sr = None if scale_result is None else torch.tensor(float(np.float32(scale_result)),
                                                            dtype=torch.float32)
        return self.mmaemu.scaled_mm(a, b.t(), sa, sb, scale_result=sr, out_dtype=out_dtype,
                                     use_fast_accum=bool(fast), backend="reference",
                                     splitk=split)


def make_backend(dry_run, split_policy=None):
    if dry_run:
        return ModelBackend(split_policy)
    return TorchCudaBackend()


def want_dry_run(flag):
    """Dry run when asked for, or automatically when there is no CUDA device."""
    return bool(flag) or not torch.cuda.is_available()


# ------------------------------------------------------------------------------------------
# Golden outputs: recording and replay
# ------------------------------------------------------------------------------------------

FULL_OUTPUT_BYTES = 64 * 1024   # outputs up to this size are stored whole
SAMPLE_COLS = 16                # sampled block: a few rows x 16 columns (torch needs N % 16 == 0)


def sample_indices(M, N, seed):
    """Rows and columns of the sampled block of a large output (deterministic)."""
    g = np.random.default_rng(seed)
    rows = sorted(set([0, M - 1, M // 2] + [int(x) for x in g.integers(0, M, size=2)]))
    if N <= SAMPLE_COLS:
        cols = list(range(N))
    else:
        cols = sorted(int(x) for x in g.choice(N, size=SAMPLE_COLS, replace=False))
    return rows, cols


def encode_output(out, seed):
    """The JSON record of an output tensor: whole bits when small, else hash + sampled block."""
    M, N = out.shape
    rec = {"shape": [M, N], "dtype": DTYPE_NAME[out.dtype], "sha256": tensor_sha256(out)}
    if out.numel() * out.element_size() <= FULL_OUTPUT_BYTES:
        rec["bits_hex"] = tensor_bits_hex(out)
    else:
        rec["sample"] = sample_record(out, seed)
    return rec


def sample_record(out, seed, a=None, b=None):
    """The sampled block of an output (+ hashes of the input rows it depends on)."""
    M, N = out.shape
    rows, cols = sample_indices(M, N, seed)
    rec = {"rows": rows, "cols": cols, "bits_hex": tensor_bits_hex(out[rows][:, cols])}
    if a is not None:
        rec["a_rows_sha256"] = sha256_hex(a[rows])
        rec["b_rows_sha256"] = sha256_hex(b[cols])
    return rec


def input_record(spec, u8, store_bytes_limit=4096):
    rec = {"gen": spec, "sha256": sha256_hex(u8)}
    if u8.size <= store_bytes_limit:
        rec["hex"] = np.ascontiguousarray(u8).tobytes().hex()
    return rec


def regenerate_input(rec):
    """The bytes of a recorded input; raises if they no longer hash to the recorded value."""
    u8 = gen_fp8_bytes(rec["gen"])
    h = sha256_hex(u8)
    if h != rec["sha256"]:
        raise AssertionError(f"regenerated input hash {h} != recorded {rec['sha256']} "
                             f"(generator changed?)")
    return u8


def regenerate_rows(rec, rows, sha=None):
    """Some rows of a recorded input (checked against their recorded sha256 when given)."""
    u8 = gen_fp8_bytes(rec["gen"], rows)
    if sha is not None and sha256_hex(u8) != sha:
        raise AssertionError("regenerated sampled rows do not match their recorded hash "
                             "(generator changed?)")
    return u8


def mmaemu_splitk_of(case):
    """The explicit mmaemu split of a golden case, or None when the recorded config lacks it."""
    s = case.get("mmaemu_splitk")
    if s is None:
        return None
    if s == 1 or s == [1, "none"]:
        return 1
    return (int(s[0]), str(s[1]))


def replay_case(case, device="cpu", full=False):
    """Recomputes one golden case with mmaemu; returns (expected, actual) tensors to compare.

    Cases with a sampled block (large outputs, or expensive ones) replay only that block,
    computed from the sampled rows of mat1 and columns of mat2 (an output element depends on
    its row and column alone once the split is fixed). full=True replays the whole output and
    compares all its bits, or its sha256 when only the hash was stored.
    """
    import mmaemu
    split = mmaemu_splitk_of(case)
    if split is None:
        raise LookupError("the recorded cuBLASLt configuration has no split decision")
    out_dtype = OUT_DTYPES[case["out_dtype"]]
    sa, sb = scale_from_record(case["scale_a"]), scale_from_record(case["scale_b"])
    sr = scale_from_record(case.get("scale_result"))
    rec = case["output"]
    dev = torch.device(device)

    def run(a_u8, b_u8):
        A = fp8_tensor(a_u8, case["fmt_a"]).to(dev)
        B = fp8_tensor(b_u8, case["fmt_b"]).to(dev)
        return mmaemu.scaled_mm(A, B.t(), sa.to(dev), sb.to(dev),
                                scale_result=None if sr is None else sr.to(dev),
                                out_dtype=out_dtype, use_fast_accum=bool(case["fast_accum"]),
                                splitk=split).cpu()

    if "sample" in rec and not full:
        s = rec["sample"]
        expected = tensor_from_hex(s["bits_hex"], (len(s["rows"]), len(s["cols"])), out_dtype)
        a_rows = regenerate_rows(case["a"], s["rows"], s.get("a_rows_sha256"))
        b_rows = regenerate_rows(case["b"], s["cols"], s.get("b_rows_sha256"))
        return expected, run(a_rows, b_rows)
    a = regenerate_input(case["a"])
    b = regenerate_input(case["b"])
    if "bits_hex" in rec:
        expected = tensor_from_hex(rec["bits_hex"], tuple(rec["shape"]), out_dtype)
        return expected, run(a, b)
    whole = run(a, b)
    if tensor_sha256(whole) != rec["sha256"]:
        raise AssertionError(f"{case['id']}: sha256 of the whole output differs from the record")
    return whole, whole


def load_golden_files(folder):
    """(path, document) of every golden JSON file in a folder, sorted by name."""
    docs = []
    if not os.path.isdir(folder):
        return docs
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                docs.append((os.path.join(folder, name), json.load(f)))
    return docs


def write_json(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def refuse_hw_folder_for_dry_run(out_dir):
    """Dry-run output must never land where recorded hardware data lives."""
    real = os.path.realpath(out_dir)
    for protected in ("test/data/hw_goldens", "tables/splitk"):
        if real.startswith(os.path.realpath(os.path.join(REPO_ROOT, protected))):
            raise SystemExit(f"refusing to write dry-run (CPU model) output into {protected}/: "
                             "that folder holds hardware records only")
