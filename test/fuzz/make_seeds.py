"""Writes the seed corpus test/fuzz/corpus/ in the input format that fuzz_gemm.c decodes.

One seed per kind of plan (presets, output kinds, split schemes, strides, corrupted plans,
mma calls), so a short fuzzing run starts from every branch of the decoder. Regression inputs
that once failed live next to them under names starting with `regression_`.

    python test/fuzz/make_seeds.py
"""
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MODE_GEMM, MODE_CORRUPT, MODE_MMA = 0, 6, 7
SCHEMES = {"none": 0, "contiguous": 1, "serial": 2, "pairwise": 3}
OUT = {"f32": 0, "bf16": 1, "f16": 2, "e4m3": 3, "e5m2": 4, "acc": 5}
PRESETS = {"hopper": 0, "ada": 1, "b200": 2}


def splits_bytes(s):
    if s <= 4:
        return bytes([s - 1])          # sel < 160: 1 + sel % 4
    if s <= 256:
        return bytes([160, s - 1])      # 160 <= sel < 240: 1 + next byte
    return bytes([240]) + struct.pack("<H", s - 1)


def preset_bytes(p):
    if isinstance(p, str):
        return bytes([PRESETS[p]])
    block, frac, keep, promote_k = p    # custom model; the harness takes promote_k in blocks
    assert promote_k % block == 0, p
    return bytes([3, block - 1, frac, keep - 1, promote_k // block - 1])


def scale_bytes(v):
    if v == 1.0:
        return bytes([0])
    return bytes([2]) + struct.pack("<f", v)


def stride_bytes(kind):
    if kind == "packed":
        return bytes([0])
    if kind == "zero":
        return bytes([2])
    return bytes([1, kind - 1])          # padded by `kind` (1..7)


def gemm(M, N, K, *, fmt=(0, 0), fast=0, scale_result=0, out="f32", epi=0, scheme="none", splits=1,
         preset="hopper", scales=(1.0, 1.0, 1.0), threads=1, strides=("packed", "packed"), ldo_pad=0,
         corrupt=None, data_seed=0, mode=MODE_GEMM):
    flags = fmt[0] | fmt[1] << 1 | fast << 2 | scale_result << 3
    b = bytes([mode, flags, OUT[out], epi, SCHEMES[scheme]]) + splits_bytes(splits) + preset_bytes(preset)
    b += bytes([M, N]) + struct.pack("<H", K)
    b += b"".join(scale_bytes(s) for s in scales)
    b += bytes([threads - 1]) + stride_bytes(strides[0]) + stride_bytes(strides[1])
    b += bytes([3, ldo_pad - 1]) if ldo_pad else bytes([0])
    if mode == MODE_CORRUPT:
        b += bytes(corrupt)
    rng = random.Random(data_seed)
    return b + bytes(rng.randrange(256) for _ in range(97))


def mma(n, blocks, *, fmt=(0, 0), zero_c=1, preset="hopper", data_seed=0):
    flags = fmt[0] | fmt[1] << 1 | zero_c << 2
    b = bytes([MODE_MMA, flags, PRESETS[preset] + 1, n, blocks, 1, 0, 0])
    rng = random.Random(data_seed)
    if not zero_c:
        b += b"".join(bytes([2]) + struct.pack("<f", rng.uniform(-4, 4)) for _ in range(n))
    return b + bytes(rng.randrange(256) for _ in range(61))


SEEDS = {
    "gemm_hopper_fast_bf16": gemm(4, 4, 96, fast=1, out="bf16"),
    "gemm_hopper_promote_f32": gemm(3, 5, 700, out="f32", data_seed=1),
    "gemm_ada_e5m2_f16": gemm(2, 3, 200, fmt=(1, 1), preset="ada", out="f16", data_seed=2),
    "gemm_b200_mixed_acc": gemm(3, 2, 300, fmt=(0, 1), preset="b200", out="acc", fast=1, data_seed=3),
    "gemm_custom_preset": gemm(2, 2, 130, preset=(7, 30, 40, 21), out="f32", data_seed=4),
    "gemm_e4m3_out_scale_result": gemm(4, 2, 64, out="e4m3", scale_result=1, scales=(0.5, 3.0, 2.0 ** -7),
                                       epi=1, data_seed=5),
    "gemm_e5m2_out_h3": gemm(2, 4, 64, out="e5m2", scale_result=1, epi=2, data_seed=6),
    "gemm_split_contiguous": gemm(2, 2, 1000, scheme="contiguous", splits=3, fast=1, threads=2, data_seed=7),
    "gemm_split_pairwise_many": gemm(1, 2, 900, scheme="pairwise", splits=300, data_seed=8),
    "gemm_split_serial_ada": gemm(3, 3, 520, scheme="serial", splits=4, preset="ada", threads=4, data_seed=9),
    "gemm_strides_padded_zero": gemm(5, 4, 40, strides=(3, "zero"), ldo_pad=2, data_seed=10),
    "gemm_nan_scales": gemm(2, 2, 32, out="bf16", scales=(float("nan"), float("inf"), 1.0), data_seed=11),
    "gemm_empty": gemm(0, 3, 17),
    "gemm_k0": gemm(3, 3, 0, out="f16", scales=(2.0, 3.0, 1.0)),
    "corrupt_fmt": gemm(2, 2, 32, mode=MODE_CORRUPT, corrupt=(0, 1)),
    "corrupt_splits": gemm(2, 2, 32, mode=MODE_CORRUPT, corrupt=(5, 0)),
    "corrupt_stride_overflow": gemm(2, 2, 32, mode=MODE_CORRUPT, corrupt=(20, 0)),
    "corrupt_ldo_overflow": gemm(3, 1, 960, mode=MODE_CORRUPT, corrupt=(22, 0), out="e4m3"),
    "mma_hopper_zero_c": mma(4, 3),
    "mma_ada_c": mma(3, 2, preset="ada", zero_c=0, fmt=(1, 0), data_seed=12),
}


def main():
    out_dir = os.path.join(HERE, "corpus")
    os.makedirs(out_dir, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {out_dir}")


if __name__ == "__main__":
    main()
