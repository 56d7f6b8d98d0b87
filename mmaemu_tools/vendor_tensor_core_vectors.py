#!/usr/bin/env python3
"""Converts the published tensor-core hardware vectors into the compact files in test/data/tensor_core.

Source: north-numerical-computing/MATLAB-tensor-core at commit b12b5a7 (Khattak & Mikaitis,
"Accurate Models of NVIDIA Tensor Cores", arXiv:2512.07004; BSD 2-Clause), folders
model_validation/{H100,Ada,B200}/E4M3. Each input file holds, per vector, 32 FP8 values written
as the 8 hex digits of the fp32 number they represent; C and D are fp32 bit patterns written as
32 binary digits, one per line.

Output, one gzip'd text file per set (`<set>.txt.gz`), one line per vector:

    <a: 32 E4M3 codes, 64 hex digits> <b: 64 hex digits> <C: fp32 bits, 8 hex> <D: fp32 bits, 8 hex>

Lines starting with '#' are comments. For H100 the C column is 00000000: the hardware ran
wgmma with D = A.B + 0, so the published c file was not used by the hardware (the authors'
Validate_TC_models.m zeroes it too).

Usage: python -m mmaemu_tools.vendor_tensor_core_vectors SRC_DIR [OUT_DIR]
  SRC_DIR holds H100-E4M3/, Ada-E4M3/, B200-E4M3/ (the published files, renamed folders);
  OUT_DIR defaults to test/data/tensor_core.
"""
import gzip
import os
import struct
import sys
from fractions import Fraction

K = 32
N_VECTORS = 5000

# (output name, source folder, file tag, whether the hardware used the c file)
SETS = [
    ("h100_e4m3", "H100-E4M3", "H100", False),
    ("ada_e4m3", "Ada-E4M3", "Ada", True),
    ("b200_e4m3", "B200-E4M3", "B200", True),
]


def f32_from_bits(u):
    return struct.unpack("<f", struct.pack("<I", u))[0]


def e4m3_table():
    """Exact value of every finite E4M3FN code, from the OCP definition (bias 7, NaN = S.1111.111)."""
    table = {}
    for code in range(256):
        sign, ex, man = code >> 7, (code >> 3) & 0xF, code & 7
        if ex == 15 and man == 7:
            continue  # NaN
        mag = Fraction(man, 8) * Fraction(2) ** -6 if ex == 0 else (1 + Fraction(man, 8)) * Fraction(2) ** (ex - 7)
        table[code] = -mag if sign else mag
    return table


def encode_e4m3(u32, by_value):
    """The E4M3 code of the fp32 bit pattern u32; refuses values E4M3 cannot hold exactly."""
    x = f32_from_bits(u32)
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError(f"non-finite input {u32:08x}")
    neg = (u32 >> 31) == 1
    key = (Fraction(x), neg if x == 0 else None)
    if key not in by_value:
        raise ValueError(f"{u32:08x} ({x!r}) is not an E4M3 value")
    return by_value[key]


def read_inputs(path, by_value):
    rows = []
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if len(words) != K:
                raise ValueError(f"{path}: expected {K} values per line, got {len(words)}")
            rows.append(bytes(encode_e4m3(int(w, 16), by_value) for w in words))
    return rows


def read_bits(path):
    out = []
    with open(path) as f:
        for line in f:
            s = line.strip()
            if not s:
                continue
            if len(s) != 32 or set(s) - {"0", "1"}:
                raise ValueError(f"{path}: bad fp32 bit string {s!r}")
            out.append(int(s, 2))
    return out


def convert(src, out_dir):
    table = e4m3_table()
    by_value = {(v, (c >> 7 == 1) if v == 0 else None): c for c, v in table.items()}
    os.makedirs(out_dir, exist_ok=True)
    for name, folder, tag, uses_c in SETS:
        d = os.path.join(src, folder)
        a = read_inputs(os.path.join(d, f"a_{tag}_E4M3.txt"), by_value)
        b = read_inputs(os.path.join(d, f"b_{tag}_E4M3.txt"), by_value)
        c = read_bits(os.path.join(d, f"c_{tag}_fp32.txt"))
        dd = read_bits(os.path.join(d, f"d_{tag}_fp32.txt"))
        if not (len(a) == len(b) == len(c) == len(dd) == N_VECTORS):
            raise ValueError(f"{folder}: expected {N_VECTORS} vectors, got {len(a)}, {len(b)}, {len(c)}, {len(dd)}")
        if not uses_c:
            c = [0] * N_VECTORS
        path = os.path.join(out_dir, f"{name}.txt.gz")
        header = (f"# {tag} E4M3 x E4M3 -> fp32, K = {K}, {N_VECTORS} vectors; from "
                  f"north-numerical-computing/MATLAB-tensor-core@b12b5a7 "
                  f"model_validation/{tag}/E4M3 (BSD-2, see LICENCE)\n"
                  f"# columns: a (32 E4M3 codes, hex) b (32 E4M3 codes, hex) C (fp32 bits) D (fp32 bits, hardware)\n")
        if not uses_c:
            header += "# C = 0: the hardware ran D = A.B + 0 (wgmma), the published c file was not used\n"
        lines = [f"{ra.hex()} {rb.hex()} {rc:08x} {rd:08x}\n" for ra, rb, rc, rd in zip(a, b, c, dd)]
        # mtime=0 keeps the gzip bytes reproducible.
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            gz.write((header + "".join(lines)).encode("ascii"))
        print(f"{path}: {len(lines)} vectors, {os.path.getsize(path)} bytes")


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    out = argv[2] if len(argv) > 2 else os.path.join(here, "..", "test", "data", "tensor_core")
    convert(argv[1], os.path.normpath(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
