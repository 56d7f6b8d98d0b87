"""An independent, slow, exact model of the FP8 tensor-core arithmetic, with its alternatives.

Used by probe_hopper.py to compute what each hypothesis predicts for a probe input. Integer
arithmetic for the blocks (research note arithmetic.md section 2.2), numpy float32 for every
IEEE fp32 operation (promotion adds, split reductions, epilogue), so no double rounding.

Block variants (`mode`): 'rz' the validated model (terms and result truncated toward zero),
'floor' (two's-complement truncation of terms and result), 'rn' (terms truncated, result
rounded to nearest even), 'exact' (terms truncated, no final cut). `frac` is the number of
fraction bits of the alignment grid (13 validated), `keep` the significant bits kept (14).
"""
import math
import struct

import numpy as np

F32 = np.float32
INF = float("inf")


def decode_fp8(byte, fmt):
    """('zero', s) | ('nan', s) | ('inf', s) | ('num', s, m, lsb, align)."""
    s = (byte >> 7) & 1
    if fmt == "e4m3":
        ef, mf = (byte >> 3) & 15, byte & 7
        if ef == 15 and mf == 7:
            return ("nan", s)
        if ef == 0:
            return ("zero", s) if mf == 0 else ("num", s, mf, -9, -6)
        E = ef - 7
        return ("num", s, 8 + mf, E - 3, E)
    ef, mf = (byte >> 2) & 31, byte & 3
    if ef == 31:
        return ("inf", s) if mf == 0 else ("nan", s)
    if ef == 0:
        return ("zero", s) if mf == 0 else ("num", s, mf, -16, -14)
    E = ef - 15
    return ("num", s, 4 + mf, E - 2, E)


def f32_term(x):
    """An fp32 value as a block term (sign, 24-bit significand, lsb exponent, align exponent)."""
    u = struct.unpack("<I", struct.pack("<f", float(x)))[0]
    s, ef, frac = u >> 31, (u >> 23) & 255, u & 0x7FFFFF
    if ef == 0:
        return None if frac == 0 else (s, frac, -149, -126)
    return (s, frac | 0x800000, ef - 150, ef - 127)


def products(a_bytes, b_bytes, fa, fb):
    """Per k: None (zero product), ('nan',), ('inf', sign) or (sign, m, lsb, align)."""
    out = []
    for x, y in zip(a_bytes, b_bytes):
        da, db = decode_fp8(int(x), fa), decode_fp8(int(y), fb)
        if da[0] == "nan" or db[0] == "nan":
            out.append(("nan",))
        elif da[0] == "inf" or db[0] == "inf":
            other = db if da[0] == "inf" else da
            out.append(("nan",) if other[0] == "zero" else ("inf", da[1] ^ db[1]))
        elif da[0] == "zero" or db[0] == "zero":
            out.append(None)
        else:
            out.append((da[1] ^ db[1], da[2] * db[2], da[3] + db[3], da[4] + db[4]))
    return out


def _special(terms, c):
    nan = any(t is not None and t[0] == "nan" for t in terms) or (c is not None and math.isnan(c))
    infs = {t[1] for t in terms if t is not None and t[0] == "inf"}
    if c is not None and math.isinf(c):
        infs.add(1 if c < 0 else 0)
    if nan or len(infs) == 2:
        return float("nan")
    if infs:
        return -INF if 1 in infs else INF
    return None


def block(terms, c=0.0, frac=13, keep=14, mode="rz", c_inside=True):
    """One tensor-core block: products `terms` plus the fp32 accumulator `c` -> fp32 value."""
    sp = _special(terms, c if c_inside else None)
    if sp is not None:
        return F32(sp)
    nums = [t for t in terms if t is not None]
    if c_inside and c is not None and c != 0.0:
        ct = f32_term(c)
        if ct is not None:
            nums.append(ct)
    if not nums:
        r = F32(0.0)
    else:
        E = max(t[3] for t in nums)
        S = 0
        for s, m, lsb, _ in nums:
            sh = lsb - (E - frac)
            if sh >= 0:
                v = m << sh
            elif mode == "floor" and s:
                v = (m + (1 << -sh) - 1) >> -sh   # magnitude rounded up = floor of -m
            else:
                v = m >> -sh                      # magnitude truncated = toward zero
            S += -v if s else v
        if S == 0:
            r = F32(0.0)
        else:
            neg = S < 0
            A = -S if neg else S
            L = A.bit_length()
            if L > keep and mode != "exact":
                cut = L - keep
                q, rem = A >> cut, A & ((1 << cut) - 1)
                if mode == "rn":
                    half = 1 << (cut - 1)
                    if rem > half or (rem == half and q & 1):
                        q += 1
                elif mode == "floor" and neg and rem:
                    q += 1
                A = q << cut
            val = math.ldexp(A, E - frac)
            if val >= 2.0 ** 128:
                val = INF
            r = F32(-val if neg else val)
    if not c_inside and c is not None:
        r = F32(F32(c) + r)
    return r


def chain(prods, k0, k1, c=0.0, group=32, origin=None, **kw):
    """Blocks of `group` consecutive k over [k0, k1), groups counted from `origin` (k0)."""
    origin = k0 if origin is None else origin
    acc = F32(c)
    k = k0
    while k < k1:
        end = min(k1, origin + ((k - origin) // group + 1) * group)
        acc = block(prods[k:end], acc, **kw)
        k = end
    return acc


def split_acc(prods, k0, k1, fast, promote_k=128, group=32, **kw):
    """One split's accumulator: a chain (fast) or promoted chains of `promote_k` k (non-fast)."""
    if fast or promote_k is None:
        return chain(prods, k0, k1, 0.0, group, **kw)
    main = F32(0.0)
    for k in range(k0, k1, promote_k):
        main = F32(main + chain(prods, k, min(k1, k + promote_k), 0.0, group, **kw))
    return main


def reduce_partials(parts, order="sequential"):
    """fp32 reduction of split partials in a given order."""
    parts = [F32(p) for p in parts]
    if order == "sequential":
        r = parts[0]
        for p in parts[1:]:
            r = F32(r + p)
        return r
    if order == "reverse":
        r = parts[-1]
        for p in reversed(parts[:-1]):
            r = F32(p + r)
        return r
    if order == "pairwise":          # ((p0+p1)+(p2+p3))..., odd one carried up (mmaemu's)
        level = parts
        while len(level) > 1:
            nxt = [F32(level[i] + level[i + 1]) for i in range(0, len(level) - 1, 2)]
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        return level[0]
    raise ValueError(order)


def mmaemu_partition(K, S, grain=128):
    """mmaemu's split rule: S slices of ceil(ceil(K/grain)/S)*grain k (the last takes the rest)."""
    if S <= 1:
        return [(0, K)]
    chunk = -(-(-(-K // grain)) // S) * grain
    out, k = [], 0
    while k < K:
        out.append((k, min(K, k + chunk)))
        k += chunk
    return out


def dot(a_bytes, b_bytes, fa, fb, fast, partition=None, promote_k=128, group=32,
        order="sequential", **kw):
    """The raw fp32 accumulator of one output element under a full set of hypotheses."""
    prods = products(a_bytes, b_bytes, fa, fb)
    K = len(prods)
    partition = partition or [(0, K)]
    parts = [split_acc(prods, k0, k1, fast, promote_k, group, **kw) for k0, k1 in partition]
    return reduce_partials(parts, order) if len(parts) > 1 else parts[0]


# -- epilogue variants (fp32) ---------------------------------------------------------------

def epilogue(acc, sa, sb, order):
    acc, sa, sb = F32(acc), F32(sa), F32(sb)
    if order == "H1":   # alpha = sa*sb folded, then alpha*acc
        return F32(F32(sa * sb) * acc)
    if order == "H2":   # (acc*sa)*sb
        return F32(F32(acc * sa) * sb)
    if order == "H3":   # (acc*sb)*sa
        return F32(F32(acc * sb) * sa)
    if order == "fused":  # one rounding of the exact product
        return F32(float(acc) * float(sa) * float(sb)) if abs(float(acc) * float(sa) * float(sb)) < 2.0 ** 1000 else F32(INF)
    raise ValueError(order)


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]
