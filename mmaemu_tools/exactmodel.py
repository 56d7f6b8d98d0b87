"""The independent exact model of mmaemu's arithmetic, in pure Python with exact integers.

It is written from the model's description (the block operation, the GEMM schedule and the
epilogue as docs/semantics.md states them), not from the C headers, and shares no code with
them: the tests compare the two bit for bit, and the hardware probes (probe_hopper.py) compute
what each hypothesis predicts with it. Every number in this arithmetic is a dyadic rational,
held exactly as an integer pair (n, e) = n * 2^e; nothing is rounded except by an explicit step
that says how (round_dyadic). No floats take part.

Values travel as bit patterns (ints): FP8 codes 0..255, fp32 values as their 32-bit patterns,
outputs as the output format's pattern.

The validated model is the default everywhere. The probes' alternatives are the same functions
with one rule changed: the block's cut (Preset.cut), where blocks start (chain's origin), the
reduction order (reduce_partials' "reverse") and the epilogue (scaled's "fused"); see
hypothesis_preset and hypothesis_accumulator.
"""
from functools import lru_cache

# ---------------------------------------------------------------------------------------------
# Exact dyadic numbers n * 2^e (n >= 0 for magnitudes, any sign for sums).


def dy_log2(n, e):
    """floor(log2(n * 2^e)) for n > 0."""
    return n.bit_length() - 1 + e


def dy_add(n1, e1, n2, e2):
    """Exact sum of two signed dyadics, as (n, e) with e = min(e1, e2)."""
    e = min(e1, e2)
    return (n1 << (e1 - e)) + (n2 << (e2 - e)), e


def dy_cmp(n1, e1, n2, e2):
    """Sign of n1 * 2^e1 - n2 * 2^e2."""
    n, _ = dy_add(n1, e1, -n2, e2)
    return (n > 0) - (n < 0)


def round_dyadic(n, e, p, emin, mode):
    """The magnitude n * 2^e (n >= 0) rounded to p significant bits, with the spacing of
    exponent emin below 2^emin (gradual underflow) and no upper exponent limit.
    mode 'rne': round to nearest, ties to even; 'rz': toward zero; 'up': away from zero (a
    hypothesis of the probes). Returns (n', e')."""
    if n == 0:
        return 0, 0
    q = max(dy_log2(n, e), emin) - (p - 1)   # exponent of one unit in the last place
    drop = q - e
    if drop <= 0:
        return n, e                           # already on the grid: exact
    kept, rem = n >> drop, n & ((1 << drop) - 1)
    if mode == "rne":
        half = 1 << (drop - 1)
        if rem > half or (rem == half and kept & 1):
            kept += 1
    elif mode == "up":
        kept += rem != 0
    elif mode != "rz":
        raise ValueError(mode)
    return kept, q


# ---------------------------------------------------------------------------------------------
# Binary floating-point formats, by their parameters (IEEE-style; OCP for FP8).


class Fmt:
    def __init__(self, name, exp_bits, man_bits, bias):
        self.name, self.exp_bits, self.man_bits, self.bias = name, exp_bits, man_bits, bias
        self.p = man_bits + 1                      # precision, hidden bit included
        self.emin = 1 - bias                       # smallest normal exponent
        self.width = 1 + exp_bits + man_bits
        self.emax = (1 << exp_bits) - 2 - bias     # IEEE-style: the all-ones exponent is special
        self.inf_bits = ((1 << exp_bits) - 1) << man_bits

    def largest_finite(self):
        return (1 << self.p) - 1, self.emax - self.man_bits


F32 = Fmt("fp32", 8, 23, 127)
BF16 = Fmt("bf16", 8, 7, 127)
F16 = Fmt("fp16", 5, 10, 15)
E4M3 = Fmt("e4m3", 4, 3, 7)
E5M2 = Fmt("e5m2", 5, 2, 15)


def largest_finite(fmt):
    """(n, e) of the largest finite value. E4M3FN has no Inf: its largest is S.1111.110 = 448
    (S.1111.111 is NaN)."""
    if fmt is E4M3:
        return 7, 6
    return fmt.largest_finite()


def encode_finite(fmt, sign, n, e):
    """Bit pattern of sign * n * 2^e, which must be representable in fmt."""
    s = sign << (fmt.width - 1)
    if n == 0:
        return s
    lg = dy_log2(n, e)
    if lg < fmt.emin:                          # subnormal: field = value / 2^(emin - man_bits)
        shift = e - (fmt.emin - fmt.man_bits)
        assert shift >= 0 or n % (1 << -shift) == 0
        return s | (n << shift if shift >= 0 else n >> -shift)
    shift = e - (lg - fmt.man_bits)            # significand with man_bits fraction bits
    sig = n << shift if shift >= 0 else n >> -shift
    assert shift >= 0 or n % (1 << -shift) == 0
    assert lg + fmt.bias <= (1 << fmt.exp_bits) - 1
    return s | ((lg + fmt.bias) << fmt.man_bits) | (sig - (1 << fmt.man_bits))


# ---------------------------------------------------------------------------------------------
# fp32: decode, round, and the IEEE operations of the schedule (RN-even add and multiply).

F32_NAN = 0x7FFFFFFF          # canonical NaN of fp32 results
F32_PINF, F32_NINF = 0x7F800000, 0xFF800000


def f32_decode(u):
    """('nan', 0, None) | ('inf', sign, None) | ('num', sign, (n, e)) with magnitude n * 2^e."""
    sign = u >> 31
    ex = (u >> 23) & 0xFF
    man = u & 0x7FFFFF
    if ex == 0xFF:
        return ("nan", 0, None) if man else ("inf", sign, None)
    if ex == 0:
        return ("num", sign, (man, -149))
    return ("num", sign, ((1 << 23) | man, ex - 150))


def f32_round(sign, n, e, mode="rne"):
    """fp32 bits of sign * n * 2^e rounded as IEEE 754 says: RN-even overflows to Inf, RZ to
    the largest finite value."""
    rn, re = round_dyadic(n, e, F32.p, F32.emin, mode)
    if rn and dy_cmp(rn, re, *F32.largest_finite()) > 0:
        return (sign << 31) | (0x7F800000 if mode == "rne" else 0x7F7FFFFF)
    return encode_finite(F32, sign, rn, re)


def f32_is_nan(u):
    return (u & 0x7FFFFFFF) > 0x7F800000


def f32_canonical(u):
    return F32_NAN if f32_is_nan(u) else u


def f32_add(x, y):
    kx, sx, mx = f32_decode(x)
    ky, sy, my = f32_decode(y)
    if kx == "nan" or ky == "nan":
        return F32_NAN
    if kx == "inf" and ky == "inf":
        return x if sx == sy else F32_NAN
    if kx == "inf":
        return x
    if ky == "inf":
        return y
    n, e = dy_add(-mx[0] if sx else mx[0], mx[1], -my[0] if sy else my[0], my[1])
    if n == 0:          # IEEE: an exact zero sum is +0 in round-to-nearest, unless both are -0
        return 0x80000000 if (sx and sy) else 0
    return f32_round(1 if n < 0 else 0, abs(n), e)


def f32_mul(x, y):
    kx, sx, mx = f32_decode(x)
    ky, sy, my = f32_decode(y)
    s = sx ^ sy
    if kx == "nan" or ky == "nan":
        return F32_NAN
    if kx == "inf" or ky == "inf":
        if (kx == "num" and mx[0] == 0) or (ky == "num" and my[0] == 0):
            return F32_NAN
        return (s << 31) | 0x7F800000
    return f32_round(s, mx[0] * my[0], mx[1] + my[1])


def f32_fma(x, y, z):
    """fmaf: x*y + z rounded once (RN-even). An exact zero result is +0 unless both x*y and z
    are zeros of negative sign (IEEE 754 6.3, round to nearest)."""
    kx, sx, mx = f32_decode(x)
    ky, sy, my = f32_decode(y)
    kz, sz, mz = f32_decode(z)
    if "nan" in (kx, ky, kz):
        return F32_NAN
    sp = sx ^ sy
    if kx == "inf" or ky == "inf":
        if (kx == "num" and mx[0] == 0) or (ky == "num" and my[0] == 0):
            return F32_NAN
        if kz == "inf" and sz != sp:
            return F32_NAN
        return (sp << 31) | 0x7F800000
    if kz == "inf":
        return z
    pn, pe = mx[0] * my[0], mx[1] + my[1]
    n, e = dy_add(-pn if sp else pn, pe, -mz[0] if sz else mz[0], mz[1])
    if n == 0:
        return 0x80000000 if (sp and sz and pn == 0 and mz[0] == 0) else 0
    return f32_round(1 if n < 0 else 0, abs(n), e)


# ---------------------------------------------------------------------------------------------
# FP8 inputs (OCP 8-bit formats). E4M3FN: bias 7, no Inf, NaN = S.1111.111. E5M2: bias 15,
# Inf = S.11111.00, NaN = S.11111.{01,10,11}.


@lru_cache(maxsize=None)
def fp8_decode(code, fmt_name):
    """(kind, sign, m, lsb, align): kind 'zero' | 'num' | 'inf' | 'nan'; the value is
    m * 2^lsb; align = max(floor(log2|x|), emin), the exponent the tensor core aligns on."""
    fmt = E4M3 if fmt_name == "e4m3" else E5M2
    sign = code >> 7
    ex = (code >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1)
    man = code & ((1 << fmt.man_bits) - 1)
    all_ones = (1 << fmt.exp_bits) - 1
    if fmt is E4M3 and ex == all_ones and man == (1 << fmt.man_bits) - 1:
        return ("nan", sign, 0, 0, 0)
    if fmt is E5M2 and ex == all_ones:
        return ("nan", sign, 0, 0, 0) if man else ("inf", sign, 0, 0, 0)
    if ex == 0:
        if man == 0:
            return ("zero", sign, 0, 0, 0)
        return ("num", sign, man, fmt.emin - fmt.man_bits, fmt.emin)
    e = ex - fmt.bias
    return ("num", sign, (1 << fmt.man_bits) | man, e - fmt.man_bits, e)


# ---------------------------------------------------------------------------------------------
# The instruction model: one block FMA, D = (up to G products) + C.


class Preset:
    """block: products per block; frac: grid bits below the block exponent; keep: significant
    bits of the block result (truncated toward zero); promote_k: k per promotion interval
    (non-fast; a multiple of block); c_late: False when C is aligned and added with the
    products (hopper, ada), True when C is added to the block's truncated product sum by an
    fp32 RN-even add (b200). cut: how the block cuts its terms and its sum; 'rz' is the
    validated model (both toward zero), the others are the probes' alternatives: 'floor'
    (two's-complement truncation of both), 'rn' (terms toward zero, the sum to nearest even),
    'exact' (terms toward zero, no cut of the sum)."""

    def __init__(self, name, block, frac, keep, promote_k, c_late=False, split_rr_tile=0,
                 cut="rz"):
        self.name, self.block, self.frac, self.keep = name, block, frac, keep
        self.promote_k, self.c_late, self.cut = promote_k, c_late, cut
        self.split_rr_tile = split_rr_tile   # 0: contiguous split slices; T: T-k tiles round-robin


PRESETS = {
    "hopper": Preset("hopper", 32, 13, 14, 128),
    "ada": Preset("ada", 16, 13, 14, 128, split_rr_tile=64),
    "b200": Preset("b200", 32, 25, 24, 128, c_late=True),
}


def _preset(p):
    return PRESETS[p] if isinstance(p, str) else p


@lru_cache(maxsize=1 << 17)
def product_term(x, y):
    """The block term of x * y (decoded FP8 values): None for a zero product, 'nan' or
    ('inf', sign) for specials, else (sign, m, lsb, align): the exact product m * 2^lsb and its
    alignment exponent align_x + align_y (the unnormalised product's exponent)."""
    if x[0] == "nan" or y[0] == "nan":
        return "nan"
    if x[0] == "inf" or y[0] == "inf":
        if x[0] == "zero" or y[0] == "zero":
            return "nan"
        return ("inf", x[1] ^ y[1])
    if x[0] == "zero" or y[0] == "zero":
        return None
    return (x[1] ^ y[1], x[2] * y[2], x[3] + y[3], x[4] + y[4])


@lru_cache(maxsize=1 << 16)
def block_fma(terms, c, preset):
    """One block: terms = tuple of product_term results (None for zero products), c = fp32 bits
    of the incoming accumulator. Returns the fp32 bits of D. Steps (semantics.md):
      specials: any NaN, Inf * 0, or +Inf with -Inf -> NaN; otherwise an Inf wins;
      every non-zero product joins, and C too (if not +-0, with exponent floor(log2|C|) clamped
      at -126) unless the preset adds C late;
      E = the largest alignment exponent; each term's magnitude is cut toward zero to a
      multiple of 2^(E - frac); the signed cut terms are added exactly; an exact zero gives +0;
      the sum keeps its `keep` most significant bits (truncated) and becomes an fp32 value
      (toward zero below fp32 precision; from 2^128 up it is Inf);
      a late C is then added to that value with an fp32 RN-even add."""
    p = _preset(preset)
    ck, cs, cm = f32_decode(c)
    nan = ck == "nan"
    infs = {cs} if ck == "inf" else set()
    finite = []
    for t in terms:
        if t is None:
            continue
        if t == "nan":
            nan = True
        elif t[0] == "inf":
            infs.add(t[1])
        else:
            finite.append(t)
    if nan or len(infs) == 2:
        return F32_NAN
    if infs:
        return F32_NINF if 1 in infs else F32_PINF
    if cm[0] != 0 and not p.c_late:
        finite.append((cs, cm[0], cm[1], max(dy_log2(*cm), F32.emin)))
    d = 0
    if finite:
        E = max(t[3] for t in finite)
        grid = E - p.frac                       # exponent of the grid's unit
        floor = p.cut == "floor"
        S = 0
        for sign, m, lsb, _ in finite:
            if lsb >= grid:
                cut = m << (lsb - grid)
            else:   # toward zero; 'floor': a negative term's magnitude rounded up
                cut = -(-m >> (grid - lsb)) if floor and sign else m >> (grid - lsb)
            S += -cut if sign else cut
        if S != 0:
            sign = 1 if S < 0 else 0
            n, e = abs(S), grid
            if p.cut != "exact":
                mode = {"rz": "rz", "rn": "rne", "floor": "up" if sign else "rz"}[p.cut]
                n, e = round_dyadic(n, e, p.keep, -(1 << 30), mode)
            d = (sign << 31) | 0x7F800000 if dy_log2(n, e) >= 128 else f32_round(sign, n, e, "rz")
    return f32_add(d, c) if p.c_late else d


def block_terms(a_row, b_row, fa, fb, k0, k1):
    return tuple(product_term(fp8_decode(a_row[i], fa), fp8_decode(b_row[i], fb)) for i in range(k0, k1))


def chain(a_row, b_row, fa, fb, k0, k1, c, preset, origin=None):
    """Blocks over k in [k0, k1), `block` consecutive k each in ascending order, chained from
    the fp32 accumulator c (a short last block has fewer products). The blocks are counted
    from `origin` (the model: k0; a probe's alternative puts it before k0, so that the first
    block is the short one)."""
    p = _preset(preset)
    origin = k0 if origin is None else origin
    k = k0
    while k < k1:
        end = min(k1, origin + ((k - origin) // p.block + 1) * p.block)
        c = block_fma(block_terms(a_row, b_row, fa, fb, k, end), c, preset)
        k = end
    return c


def mma(a_row, b_row, c, fa="e4m3", fb="e4m3", preset="hopper"):
    """mmaemu.mma for one row: the chain of blocks over all of K starting from C."""
    return f32_canonical(chain(a_row, b_row, fa, fb, 0, len(a_row), c, preset))


# ---------------------------------------------------------------------------------------------
# The GEMM schedule: promotion, split-K, reduction.

SPLIT_GRAIN = 128


def split_accumulator(a_row, b_row, fa, fb, k0, k1, fast, preset, origin=None):
    """The raw accumulator of k in [k0, k1): fast accumulation chains all blocks from +0;
    otherwise each promotion interval of promote_k k chains from +0 and is added into an fp32
    register (RN-even) that starts at +0. origin: chain's (the model: each chain's start)."""
    if fast:
        return chain(a_row, b_row, fa, fb, k0, k1, 0, preset, origin)
    p = _preset(preset)
    step = p.promote_k
    main = 0
    for k in range(k0, k1, step):
        main = f32_add(main, chain(a_row, b_row, fa, fb, k, min(k + step, k1), 0, preset, origin))
    return main


def split_ranges(K, splits):
    """K cut on a grain of 128 into `splits` ranges of ceil(ceil(K/128)/S) grains each; the last
    non-empty range takes the rest; trailing ranges may be empty."""
    grains = -(-K // SPLIT_GRAIN)
    per = -(-grains // splits) * SPLIT_GRAIN
    return [(min(s * per, K), min((s + 1) * per, K)) for s in range(splits)]


def reduce_partials(parts, scheme):
    """fp32 (RN-even) reduction of the split partials. serial/contiguous: ((p0 + p1) + p2) ...;
    pairwise: adjacent items added level by level, an odd last item carried up unchanged;
    reverse (a probe's alternative): p0 + (p1 + (... + p_last))."""
    if scheme in ("serial", "contiguous"):
        r = parts[0]
        for x in parts[1:]:
            r = f32_add(r, x)
        return r
    if scheme == "reverse":
        r = parts[-1]
        for x in reversed(parts[:-1]):
            r = f32_add(x, r)
        return r
    if scheme == "pairwise":
        level = list(parts)
        while len(level) > 1:
            nxt = [f32_add(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        return level[0]
    raise ValueError(f"unknown scheme {scheme!r}")


def round_robin_pairwise(parts):
    """The RTX 4060 kernels' pairwise reduction of S split partials (customOption 1), cited
    from mmaemu 0.1.0's GEMM plan module docstring: h = ceil(S/2) slots, slot i = p_i +
    p_(i+h) where i + h < S - 1, else p_i; r = p_(S-1), then r + slot_0, + slot_1, ...
    Replayed on the RTX 4060 recordings (test/test_hw_mini.py)."""
    S = len(parts)
    h = -(-S // 2)
    r = parts[S - 1]
    for i in range(h):
        slot = f32_add(parts[i], parts[i + h]) if i + h < S - 1 else parts[i]
        r = f32_add(r, slot)
    return r


def round_robin_partials(a_row, b_row, fa, fb, fast, preset, splits):
    """Slice s owns the tiles [t*T, t*T + T) with t = s mod splits; its partial is the
    accumulator of its tiles laid end to end (promotion counts the slice's own k)."""
    T, K = _preset(preset).split_rr_tile, len(a_row)
    parts = []
    for s in range(splits):
        ks = [k for t in range(s, -(-K // T), splits) for k in range(t * T, min(t * T + T, K))]
        a_s, b_s = [a_row[k] for k in ks], [b_row[k] for k in ks]
        parts.append(split_accumulator(a_s, b_s, fa, fb, 0, len(ks), fast, preset) if ks else 0)
    return parts


def accumulator(a_row, b_row, fa, fb, fast, preset="hopper", splits=1, scheme="none"):
    """The fp32 accumulator (bits) of one output element, before the epilogue."""
    K = len(a_row)
    if splits <= 1:
        return split_accumulator(a_row, b_row, fa, fb, 0, K, fast, preset)
    if _preset(preset).split_rr_tile:
        parts = round_robin_partials(a_row, b_row, fa, fb, fast, preset, splits)
        if scheme == "pairwise":
            return round_robin_pairwise(parts)
        return reduce_partials(parts, "serial")
    parts = [split_accumulator(a_row, b_row, fa, fb, k0, k1, fast, preset) if k1 > k0 else 0
             for k0, k1 in split_ranges(K, splits)]
    return reduce_partials(parts, scheme)


# ---------------------------------------------------------------------------------------------
# Epilogue and output conversions.


def to_small_format(u, fmt, saturate, nan_bits):
    """fp32 bits -> fmt (bf16, fp16, E4M3, E5M2): round to nearest even with gradual underflow.
    A rounded magnitude above the largest finite value, and Inf, give the largest finite value
    when saturating (satfinite) and Inf otherwise; every NaN gives nan_bits."""
    kind, sign, mag = f32_decode(u)
    if kind == "nan":
        return nan_bits
    top = sign << (fmt.width - 1)
    big = largest_finite(fmt)
    overflow = top | (encode_finite(fmt, 0, *big) if saturate else fmt.inf_bits)
    if kind == "inf":
        return overflow
    n, e = round_dyadic(mag[0], mag[1], fmt.p, fmt.emin, "rne")
    if n and dy_cmp(n, e, *big) > 0:
        return overflow
    return encode_finite(fmt, sign, n, e)


def convert_output(v, out):
    """fp32 bits -> the output's bits. bf16/fp16: RN-even, overflow to Inf, NaN -> 0x7FFF.
    E4M3/E5M2: RN-even, saturating (satfinite), NaN -> 0x7F. fp32: NaN -> 0x7FFFFFFF."""
    if out == "f32":
        return f32_canonical(v)
    if out == "bf16":
        return to_small_format(v, BF16, False, 0x7FFF)
    if out == "f16":
        return to_small_format(v, F16, False, 0x7FFF)
    if out == "e4m3":
        return to_small_format(v, E4M3, True, 0x7F)
    if out == "e5m2":
        return to_small_format(v, E5M2, True, 0x7F)
    raise ValueError(out)


def scaled(acc, scale_a, scale_b, order="H1"):
    """acc times the scales (fp32 bits) in the epilogue's order. H1: fp32(fp32(sa*sb)*acc);
    H2: fp32(fp32(acc*sa)*sb); H3: fp32(fp32(acc*sb)*sa); fused (a probe's alternative): the
    exact acc*sa*sb rounded once."""
    if order == "H1":
        # fma(alpha, acc, +0): an exact-zero product gives +0, an underflowing one its sign
        alpha = f32_mul(scale_a, scale_b)
        v = f32_mul(alpha, acc)
        if (alpha & 0x7FFFFFFF) == 0 or (acc & 0x7FFFFFFF) == 0:
            v = f32_add(v, 0)
        return v
    if order == "H2":
        return f32_mul(f32_mul(acc, scale_a), scale_b)
    if order == "H3":
        return f32_mul(f32_mul(acc, scale_b), scale_a)
    if order == "fused":
        xs = [f32_decode(u) for u in (acc, scale_a, scale_b)]
        if any(k != "num" for k, _, _ in xs):   # NaN and Inf: as the two roundings give them
            return f32_mul(f32_mul(acc, scale_a), scale_b)
        sign = xs[0][1] ^ xs[1][1] ^ xs[2][1]
        n = xs[0][2][0] * xs[1][2][0] * xs[2][2][0]
        return f32_round(sign, n, xs[0][2][1] + xs[1][2][1] + xs[2][2][1]) if n else sign << 31
    raise ValueError(order)


def epilogue(acc, out, scale_a, scale_b, scale_result=None, order="H1"):
    """acc, scales: fp32 bits. acc times the scales in the order (scaled), then FP8 outputs
    multiply by scale_result (when given), then the output conversion."""
    v = scaled(acc, scale_a, scale_b, order)
    if out in ("e4m3", "e5m2") and scale_result is not None:
        v = f32_mul(v, scale_result)
    return convert_output(v, out)


def bias_to_f32(u, kind):
    """A bf16 or fp16 bias element's bits as fp32 bits (exact); no bias: +0."""
    if kind is None:
        return 0
    if kind == "bf16":
        return u << 16
    sign, ex, man = u >> 15, (u >> 10) & 0x1F, u & 0x3FF
    if ex == 0x1F:
        return (sign << 31) | 0x7F800000 | (man << 13)
    if ex == 0:
        return f32_round(sign, man, -24)
    return (sign << 31) | ((ex + 112) << 23) | (man << 13)


def rowwise_epilogue(acc, sa_i, sb_j, bias_j, transposed):
    """torch 2.7.1's CUTLASS row-wise epilogue: bf16(fmaf(fp32(acc*s1), s2, bias)) with
    (s1, s2) = (sa_i, sb_j), exchanged when the kernel runs transposed. All fp32 bits."""
    s1, s2 = (sb_j, sa_i) if transposed else (sa_i, sb_j)
    return convert_output(f32_fma(f32_mul(acc, s1), s2, bias_j), "bf16")


def bias_epilogue(acc, out, scale_a, scale_b, bias_j, scale_result=None):
    """Tensor-wise scales with a bias (the inferred cuBLASLt order): fmaf(fp32(sa*sb), acc,
    bias), times scale_result for FP8 outputs, then the output conversion."""
    v = f32_fma(f32_mul(scale_a, scale_b), acc, bias_j)
    if out in ("e4m3", "e5m2") and scale_result is not None:
        v = f32_mul(v, scale_result)
    return convert_output(v, out)


def accumulate(A, B, fa, fb, fast, preset="hopper", splits=1, scheme="none"):
    """A: M rows of K codes, B: N rows of K codes. M lists of N fp32 accumulator bit patterns."""
    return [[f32_canonical(accumulator(a, b, fa, fb, fast, preset, splits, scheme)) for b in B] for a in A]


def scaled_mm(A, B, fa, fb, scale_a, scale_b, out, fast, preset="hopper", splits=1,
              scheme="none", scale_result=None, order="H1"):
    """A: M rows of K codes, B: N rows of K codes (B[j] is column j of torch's mat2); scales
    as fp32 bits. Returns M lists of N output bit patterns."""
    return [[epilogue(acc, out, scale_a, scale_b, scale_result, order) for acc in row]
            for row in accumulate(A, B, fa, fb, fast, preset, splits, scheme)]


# ---------------------------------------------------------------------------------------------
# Hypotheses: the model with one rule changed, as the hardware probes (probe_hopper.py) ask.


@lru_cache(maxsize=None)
def hypothesis_preset(block=32, frac=13, keep=14, promote_k=128, c_late=False, cut="rz"):
    """The hopper preset with some of its numbers or its cut changed (one object per set, so
    that block_fma's cache serves it)."""
    return Preset(f"hypothesis({block}, {frac}, {keep}, {promote_k}, {c_late}, {cut})", block,
                  frac, keep, promote_k, c_late, cut=cut)


def hypothesis_accumulator(a_row, b_row, fa, fb, fast, partition=None, order="serial",
                           origin=None, **rules):
    """The fp32 accumulator (bits) of one output element under a set of hypotheses: rules are
    hypothesis_preset's; partition: the split ranges [(k0, k1), ...] (default all of K in one);
    order: the reduction of their partials (reduce_partials); origin: where blocks are counted
    from (chain). With no arguments it is the validated hopper model."""
    p = hypothesis_preset(**rules)
    a, b = [int(x) for x in a_row], [int(x) for x in b_row]
    parts = [split_accumulator(a, b, fa, fb, k0, k1, fast, p, origin)
             for k0, k1 in partition or [(0, len(a))]]
    return reduce_partials(parts, order) if len(parts) > 1 else parts[0]


# ---------------------------------------------------------------------------------------------
# Block-wise scaled GEMMs (DeepSeek's 1x128 / 128x128 recipe) and the grouped row-wise GEMM.
# docs/semantics.md 8d and 8e: the executors' steps, their sources and SASS. Each k group of `gran_k`
# (128) elements is one chain of hopper blocks from +0 (the first wgmma of the group runs with
# scale-d = 0), and is scaled and added into an fp32 accumulator that starts at +0, in
# ascending k. The executors differ only in how that update rounds:
#   'ffma'     acc = fmaf(fp32(sa*sb), p, acc)       DeepGEMM sm90_fp8_gemm_1d2d (SASS: FMUL, FFMA),
#                                                   CUTLASS blockwise with one scale per tile on
#                                                   a side (SASS: FMUL, FFMA ..., RZ on the first)
#   'mul_add'  acc = fp32(acc + fp32(fp32(sa*sb)*p)) the same source built with -fmad=false
#   'per_elem' acc = fmaf(fp32(p*sa), sb, acc)        CUTLASS scale_core(scaleA, scaleB), both
#                                                   sides with several scales per tile (FMUL, FFMA)
# Scales are fp32 bit patterns; fp32 multiplication commutes bit for bit, so which operand the
# source writes first does not matter; the grouping does.

BLOCKWISE_UPDATES = ("ffma", "mul_add", "per_elem")


def blockwise_update(acc, p, sa, sb, update="ffma"):
    """One promotion of a block-scaled GEMM: the fp32 accumulator after adding the group's chain
    result p scaled by sa and sb (all fp32 bits), as `update` (BLOCKWISE_UPDATES) rounds it."""
    if update == "ffma":
        return f32_fma(f32_mul(sa, sb), p, acc)
    if update == "mul_add":
        return f32_add(acc, f32_mul(f32_mul(sa, sb), p))
    if update == "per_elem":
        return f32_fma(f32_mul(p, sa), sb, acc)
    raise ValueError(update)


def blockwise_accumulator(a_row, b_row, sa_groups, sb_groups, fa="e4m3", fb="e4m3",
                          update="ffma", gran_k=128, preset="hopper"):
    """fp32 accumulator (bits) of one output element of a block-scaled GEMM, before the
    epilogue. a_row, b_row: the K FP8 codes of row m of A and of column n of B; sa_groups[g],
    sb_groups[g]: the fp32 scales (bits) that apply to k group g = [g*gran_k, (g+1)*gran_k) for
    this row and this column (1x128: scale_a[m][g]; 128x128: scale_b[n // 128][g]). A short
    last group holds only its real k (the GPU zero-fills the tail, and zero products drop out of
    the block). No split: one CTA walks all of K in ascending order."""
    K = len(a_row)
    groups = -(-K // gran_k)
    if len(sa_groups) < groups or len(sb_groups) < groups:
        raise ValueError("one scale per k group is needed on each side")
    acc = 0
    for g in range(groups):
        k0, k1 = g * gran_k, min((g + 1) * gran_k, K)
        p = chain(a_row, b_row, fa, fb, k0, k1, 0, preset)
        acc = blockwise_update(acc, p, sa_groups[g], sb_groups[g], update)
    return acc


def deepgemm_1d2d(A, B, scale_a, scale_b, update="ffma"):
    """DeepGEMM sm90_fp8_gemm_1d2d (fp8_gemm_nt with the default sm_90 recipe (1, 128, 128)):
    A: M rows of K E4M3 codes, B: N rows of K E4M3 codes (B[n] is row n of the [N, K] weight);
    scale_a: M lists of ceil(K/128) fp32 bits (one per row and 128-k group); scale_b:
    ceil(N/128) lists of ceil(K/128) fp32 bits (one per 128x128 block). Returns M lists of N
    bf16 bit patterns: bf16_rn(acc), acc as blockwise_accumulator with
    fmaf(fp32(scale_a * scale_b), p, acc) ('ffma', what nvcc makes of the kernel; 'mul_add' is
    the -fmad=false contrast)."""
    return [[convert_output(blockwise_accumulator(a, B[n], scale_a[m], scale_b[n // 128],
                                                  "e4m3", "e4m3", update), "bf16")
             for n in range(len(B))] for m, a in enumerate(A)]


def cutlass_blockwise(A, B, scale_a, scale_b, gran_m=1, gran_n=128, tile_m=128, tile_n=128,
                      fa="e4m3", fb="e4m3", out="bf16", alpha=0x3F800000):
    """CUTLASS 3.x/4.x sm90 block-wise mainloop (MainloopSm90TmaGmmaWarpSpecializedBlockwiseFP8,
    ScaleGranularityK = 128) with the LinearCombination epilogue vLLM uses (C void, beta 0):
    y = convert(fp32(alpha * acc)). scale_a: ceil(M/gran_m) lists of ceil(K/128) fp32 bits;
    scale_b: ceil(N/gran_n) lists of ceil(K/128). The update form follows the tile: scales
    multiplied first ('ffma') when tile_m // gran_m == 1 or tile_n // gran_n == 1, otherwise
    the per-element form fmaf(fp32(p * sa), sb, acc) ('per_elem')."""
    update = "ffma" if (tile_m // gran_m == 1 or tile_n // gran_n == 1) else "per_elem"
    rows = []
    for m, a in enumerate(A):
        row = []
        for n, b in enumerate(B):
            acc = blockwise_accumulator(a, b, scale_a[m // gran_m], scale_b[n // gran_n],
                                        fa, fb, update)
            row.append(convert_output(f32_mul(alpha, acc), out))
        rows.append(row)
    return rows


def grouped_rowwise_epilogue(acc, sa_i, sb_j):
    """torch's CUTLASS grouped row-wise epilogue (ScaledGroupMM.cu, EVT Cast(Multiply(ScaleB,
    Multiply(ScaleA, Acc)))): bf16_rn(fp32(fp32(acc * sa_i) * sb_j)), two roundings, no bias,
    no FMA (there is no add to contract). It differs from rowwise_epilogue(acc, sa_i, sb_j, 0,
    False) only where fp32(acc * sa_i) * sb_j is an exact zero with a negative sign: -0 here,
    +0 there."""
    return convert_output(f32_mul(f32_mul(acc, sa_i), sb_j), "bf16")


def _group_bounds(offs):
    starts = [0] + list(offs[:-1])
    return list(zip(starts, offs))


def scaled_grouped_mm_rowwise(A, B, scale_a, scale_b, offs, layout, fast, fa="e4m3",
                              fb="e4m3"):
    """torch._scaled_grouped_mm with fp32 row-wise scales on sm_90 (f8f8bf16_grouped_mm). Group g
    covers [offs[g-1], offs[g]) of the grouped dimension (offs[-1] taken as 0); each output
    element is the hopper accumulator over its k range (split_accumulator, no split) and
    grouped_rowwise_epilogue. Entries the kernel never writes (rows or columns past offs[-1])
    are None: torch's output is torch.empty there.
      '2d3d': A M_total rows of K; B G lists of N rows of K; scale_a M_total; scale_b G lists
              of N. Output M_total rows of N.
      '3d2d': A G lists of M rows of K; B N_total rows of K; scale_a G lists of M; scale_b
              N_total. Output M rows of N_total.
      '2d2d': A M rows of K_total; B N rows of K_total; scale_a G*M (group g: [g*M, g*M+M));
              scale_b G*N. Output G lists of M rows of N; group g sums k in [offs[g-1], offs[g])
              and must not be empty (torch's kernel asserts delta > 0).
      '3d3d': offs None; A G lists of M rows; B G lists of N rows; scale_a G lists of M;
              scale_b G lists of N. Output G lists of M rows of N."""
    def elem(a, b, k0, k1, sa, sb):
        acc = split_accumulator(a, b, fa, fb, k0, k1, fast, "hopper")
        return grouped_rowwise_epilogue(acc, sa, sb)

    if layout == "2d3d":
        out = [[None] * len(B[0]) for _ in A]
        for g, (r0, r1) in enumerate(_group_bounds(offs)):
            for m in range(r0, r1):
                K = len(A[m])
                out[m] = [elem(A[m], B[g][n], 0, K, scale_a[m], scale_b[g][n])
                          for n in range(len(B[g]))]
        return out
    if layout == "3d2d":
        out = [[None] * len(B) for _ in A[0]]
        for g, (c0, c1) in enumerate(_group_bounds(offs)):
            for m in range(len(A[g])):
                K = len(A[g][m])
                for n in range(c0, c1):
                    out[m][n] = elem(A[g][m], B[n], 0, K, scale_a[g][m], scale_b[n])
        return out
    if layout == "2d2d":
        M, N = len(A), len(B)
        res = []
        for g, (k0, k1) in enumerate(_group_bounds(offs)):
            if k1 <= k0:
                raise ValueError("2d-2d group %d is empty: the kernel asserts offsets > 0" % g)
            res.append([[elem(A[m], B[n], k0, k1, scale_a[g * M + m], scale_b[g * N + n])
                         for n in range(N)] for m in range(M)])
        return res
    if layout == "3d3d":
        if offs is not None:
            raise ValueError("3d-3d takes no offsets")
        return [[[elem(a, b, 0, len(a), scale_a[g][m], scale_b[g][n])
                  for n, b in enumerate(B[g])] for m, a in enumerate(A[g])]
                for g in range(len(A))]
    raise ValueError(layout)
