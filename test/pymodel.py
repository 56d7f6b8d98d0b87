"""An independent model of mmaemu's arithmetic in pure Python, with exact integers and fractions.

It is written from the model's description (docs/semantics.md; the block operation of the
research note's section 2.2 and the schedule of its section 7), not from the C headers, and it
shares no code with them: the tests compare the two bit for bit. Slow by design; every value is
exact until an explicit rounding step says how it is rounded. No floats take part in the
arithmetic (Python floats appear only to build test inputs).

Values travel as bit patterns (ints). FP8 codes are ints 0..255; fp32 values are their 32-bit
patterns; outputs are the output format's pattern (uint8/uint16/uint32 as an int).
"""
from fractions import Fraction
from functools import lru_cache

# ---------------------------------------------------------------------------------------------
# Binary floating-point formats, described by their parameters (IEEE-style, OCP for FP8).
# p: precision (significand bits including the hidden one); emin: smallest normal exponent.


class Fmt:
    def __init__(self, name, exp_bits, man_bits, bias):
        self.name, self.exp_bits, self.man_bits, self.bias = name, exp_bits, man_bits, bias
        self.p = man_bits + 1
        self.emin = 1 - bias
        self.width = 1 + exp_bits + man_bits


F32 = Fmt("fp32", 8, 23, 127)
BF16 = Fmt("bf16", 8, 7, 127)
F16 = Fmt("fp16", 5, 10, 15)
E4M3 = Fmt("e4m3", 4, 3, 7)
E5M2 = Fmt("e5m2", 5, 2, 15)

F32_NAN = 0x7FFFFFFF          # canonical NaN of fp32 results
F32_PINF, F32_NINF = 0x7F800000, 0xFF800000
TWO = Fraction(2)


def pow2(e):
    return TWO ** e


def floor_log2(x):
    """floor(log2(x)) for a positive Fraction or int, exactly."""
    x = Fraction(x)
    n, d = x.numerator, x.denominator
    e = n.bit_length() - d.bit_length()
    if (n << max(0, -e)) < (d << max(0, e)):
        e -= 1
    return e


def round_magnitude(mag, p, emin, mode):
    """mag (Fraction >= 0) rounded to p significant bits, with the spacing of exponent emin
    below 2^emin (gradual underflow), and no upper exponent limit. mode: 'rne' or 'rz'."""
    if mag == 0:
        return Fraction(0)
    q = max(floor_log2(mag), emin) - (p - 1)       # exponent of one unit in the last place
    scaled = mag / pow2(q)
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if mode == "rne":
        if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
            n += 1
    elif mode != "rz":
        raise ValueError(mode)
    return n * pow2(q)


def largest_finite(fmt):
    emax = (1 << fmt.exp_bits) - 2 - fmt.bias
    return (2 - pow2(-fmt.man_bits)) * pow2(emax)


def encode_finite(fmt, sign, mag):
    """Bit pattern of the representable value sign * mag (mag exactly representable)."""
    s = sign << (fmt.width - 1)
    if mag == 0:
        return s
    if mag < pow2(fmt.emin):
        field = mag / pow2(fmt.emin - fmt.man_bits)
        assert field.denominator == 1
        return s | int(field)
    e = floor_log2(mag)
    frac = mag / pow2(e - fmt.man_bits) - (1 << fmt.man_bits)
    assert frac.denominator == 1
    return s | ((e + fmt.bias) << fmt.man_bits) | int(frac)


# ---------------------------------------------------------------------------------------------
# fp32 values: decode, round, and the IEEE operations the GEMM uses (RN-even add and multiply).


def f32_decode(u):
    """('nan', 0, None) | ('inf', sign, None) | ('num', sign, Fraction magnitude)."""
    sign = u >> 31
    ex = (u >> 23) & 0xFF
    man = u & 0x7FFFFF
    if ex == 0xFF:
        return ("nan", 0, None) if man else ("inf", sign, None)
    if ex == 0:
        return ("num", sign, man * pow2(-149))
    return ("num", sign, ((1 << 23) | man) * pow2(ex - 150))


def f32_round(sign, mag, mode="rne"):
    """fp32 bits of sign * mag rounded (RN-even: overflow to Inf; RZ: overflow to the largest
    finite value, as IEEE 754 defines both)."""
    r = round_magnitude(mag, F32.p, F32.emin, mode)
    if r > largest_finite(F32):
        return (sign << 31) | (0x7F800000 if mode == "rne" else 0x7F7FFFFF)
    return encode_finite(F32, sign, r)


def f32_is_nan(u):
    return (u & 0x7FFFFFFF) > 0x7F800000


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
    exact = (-mx if sx else mx) + (-my if sy else my)
    if exact == 0:       # IEEE: an exact zero sum is +0 in round-to-nearest, unless both are -0
        return 0x80000000 if (sx and sy) else 0
    return f32_round(1 if exact < 0 else 0, abs(exact))


def f32_mul(x, y):
    kx, sx, mx = f32_decode(x)
    ky, sy, my = f32_decode(y)
    s = sx ^ sy
    if kx == "nan" or ky == "nan":
        return F32_NAN
    if kx == "inf" or ky == "inf":
        if (kx == "num" and mx == 0) or (ky == "num" and my == 0):
            return F32_NAN
        return (s << 31) | 0x7F800000
    return f32_round(s, mx * my)


def f32_canonical(u):
    return F32_NAN if f32_is_nan(u) else u


# ---------------------------------------------------------------------------------------------
# FP8 inputs (OCP 8-bit formats). E4M3FN: bias 7, no Inf, NaN = S.1111.111. E5M2: bias 15,
# Inf = S.11111.00, NaN = S.11111.{01,10,11}.


class Fp8:
    """A decoded FP8 value: kind ('zero', 'num', 'inf', 'nan'), sign, magnitude, and the
    alignment exponent max(floor(log2|x|), emin) that the tensor core uses."""
    __slots__ = ("kind", "sign", "mag", "align")

    def __init__(self, kind, sign, mag=None, align=None):
        self.kind, self.sign, self.mag, self.align = kind, sign, mag, align


@lru_cache(maxsize=None)
def fp8_decode(code, fmt_name):
    fmt = E4M3 if fmt_name == "e4m3" else E5M2
    sign = code >> 7
    ex = (code >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1)
    man = code & ((1 << fmt.man_bits) - 1)
    all_ones = (1 << fmt.exp_bits) - 1
    if fmt is E4M3 and ex == all_ones and man == 7:
        return Fp8("nan", sign)
    if fmt is E5M2 and ex == all_ones:
        return Fp8("nan", sign) if man else Fp8("inf", sign)
    if ex == 0:
        if man == 0:
            return Fp8("zero", sign)
        return Fp8("num", sign, man * pow2(fmt.emin - fmt.man_bits), fmt.emin)
    return Fp8("num", sign, (1 + Fraction(man, 1 << fmt.man_bits)) * pow2(ex - fmt.bias), ex - fmt.bias)


def fp8_value(code, fmt_name):
    """The exact value of a finite code as a Fraction (for building expectations in tests)."""
    d = fp8_decode(code, fmt_name)
    if d.kind in ("nan", "inf"):
        raise ValueError("not finite")
    return Fraction(0) if d.kind == "zero" else (-d.mag if d.sign else d.mag)


# ---------------------------------------------------------------------------------------------
# The instruction model: one block FMA, D = (G products) + C.


class Preset:
    """block: products per block; frac: grid bits below the block exponent; keep: significant
    bits of the block result (truncated toward zero); promote_blocks: blocks per promotion
    interval (non-fast); c_late: False when C is aligned and added with the products (hopper,
    ada), True when C is added to the block's truncated product sum by an fp32 RN-even add
    (b200)."""

    def __init__(self, name, block, frac, keep, promote_blocks, c_late=False):
        self.name, self.block, self.frac, self.keep = name, block, frac, keep
        self.promote_blocks, self.c_late = promote_blocks, c_late


PRESETS = {
    "hopper": Preset("hopper", 32, 13, 14, 4),
    "ada": Preset("ada", 16, 13, 14, 8),
    "b200": Preset("b200", 32, 25, 24, 4, c_late=True),
}


def product_term(x, y):
    """The block term of x * y: None for a zero product, 'nan' / ('inf', sign) for specials,
    else (sign, exact magnitude, alignment exponent e_x + e_y)."""
    if x.kind == "nan" or y.kind == "nan":
        return "nan"
    if x.kind == "inf" or y.kind == "inf":
        if x.kind == "zero" or y.kind == "zero":
            return "nan"
        return ("inf", x.sign ^ y.sign)
    if x.kind == "zero" or y.kind == "zero":
        return None
    return (x.sign ^ y.sign, x.mag * y.mag, x.align + y.align)


@lru_cache(maxsize=1 << 20)
def block_fma(terms, c, preset):
    """One block: terms = tuple of product_term results (None for zero products), c = fp32 bits
    of the incoming accumulator. Returns the fp32 bits of D. Steps (semantics.md):
      specials: any NaN, Inf * 0, or +Inf with -Inf -> NaN; otherwise an Inf wins;
      every non-zero product joins, and C too (if not +-0, with exponent floor(log2|C|) clamped
      at -126) unless the preset adds C late;
      E = the largest alignment exponent; each term is cut toward zero to a multiple of
      2^(E - frac); the cut terms are added exactly; an exact zero gives +0; the sum keeps its
      `keep` most significant bits (truncated) and becomes an fp32 value (toward zero below
      fp32 precision; from 2^128 up it is Inf);
      a late C is then added to that value with an fp32 RN-even add."""
    p = PRESETS[preset] if isinstance(preset, str) else preset
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
    if cm != 0 and not p.c_late:
        finite.append((cs, cm, max(floor_log2(cm), -126)))
    d = 0
    if finite:
        E = max(t[2] for t in finite)
        unit = pow2(E - p.frac)
        S = 0
        for sign, mag, _ in finite:
            q = mag / unit
            cut = q.numerator // q.denominator           # toward zero: magnitudes are >= 0
            S += -cut if sign else cut
        if S != 0:
            sign, A = (1, -S) if S < 0 else (0, S)
            kept = round_magnitude(Fraction(A), p.keep, -(1 << 30), "rz")
            value = kept * unit
            d = (sign << 31) | 0x7F800000 if value >= pow2(128) else f32_round(sign, value, "rz")
    return f32_add(d, c) if p.c_late else d


def chain(a_row, b_row, fa, fb, k0, k1, c, preset):
    """Blocks over k in [k0, k1), `block` consecutive k each in ascending order, chained from
    the fp32 accumulator c (a short last block has fewer products)."""
    p = PRESETS[preset] if isinstance(preset, str) else preset
    for k in range(k0, k1, p.block):
        end = min(k + p.block, k1)
        terms = tuple(product_term(fp8_decode(a_row[i], fa), fp8_decode(b_row[i], fb)) for i in range(k, end))
        c = block_fma(terms, c, preset)
    return c


def mma(a_row, b_row, c, fa="e4m3", fb="e4m3", preset="hopper"):
    """mmaemu.mma for one row: the chain of blocks over all of K starting from C."""
    return f32_canonical(chain(a_row, b_row, fa, fb, 0, len(a_row), c, preset))


# ---------------------------------------------------------------------------------------------
# The GEMM schedule: promotion, split-K, reduction.

SPLIT_GRAIN = 128


def split_accumulator(a_row, b_row, fa, fb, k0, k1, fast, preset):
    """The raw accumulator of k in [k0, k1): fast accumulation chains all blocks from +0;
    otherwise each interval of promote_blocks blocks chains from +0 and is added into an fp32
    register (RN-even) that starts at +0."""
    if fast:
        return chain(a_row, b_row, fa, fb, k0, k1, 0, preset)
    p = PRESETS[preset] if isinstance(preset, str) else preset
    step = p.block * p.promote_blocks
    main = 0
    for k in range(k0, k1, step):
        main = f32_add(main, chain(a_row, b_row, fa, fb, k, min(k + step, k1), 0, preset))
    return main


def split_ranges(K, splits):
    """K cut on a grain of 128 into `splits` ranges of ceil(ceil(K/128)/S) grains each; the last
    non-empty range takes the rest; trailing ranges may be empty."""
    grains = -(-K // SPLIT_GRAIN)
    per = -(-grains // splits) * SPLIT_GRAIN
    return [(min(s * per, K), min((s + 1) * per, K)) for s in range(splits)]


def reduce_partials(parts, scheme):
    """fp32 (RN-even) reduction of the split partials. serial/contiguous: ((p0 + p1) + p2) ...;
    pairwise: adjacent items added level by level, an odd last item carried up unchanged."""
    if scheme in ("serial", "contiguous", "none"):
        r = parts[0]
        for x in parts[1:]:
            r = f32_add(r, x)
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


def accumulator(a_row, b_row, fa, fb, fast, preset="hopper", splits=1, scheme="none"):
    """The fp32 accumulator (bits) of one output element, before the epilogue."""
    K = len(a_row)
    if splits <= 1:
        return split_accumulator(a_row, b_row, fa, fb, 0, K, fast, preset)
    if scheme == "none":
        raise ValueError("splits > 1 needs a scheme")
    parts = [split_accumulator(a_row, b_row, fa, fb, k0, k1, fast, preset) if k1 > k0 else 0
             for k0, k1 in split_ranges(K, splits)]
    return reduce_partials(parts, scheme)


# ---------------------------------------------------------------------------------------------
# Epilogue and output conversions.


def to_small_format(u, fmt, saturate, nan_bits):
    """fp32 bits -> fmt (bf16, fp16, E4M3, E5M2), round to nearest even with gradual underflow.
    Overflow (a rounded magnitude above the largest finite value) and Inf give the largest
    finite value when saturating (satfinite), else Inf; every NaN gives nan_bits."""
    kind, sign, mag = f32_decode(u)
    top = sign << (fmt.width - 1)
    if kind == "nan":
        return nan_bits
    big = largest_finite(fmt)
    if kind == "inf":
        return top | (encode_finite(fmt, 0, big) if saturate else (((1 << fmt.exp_bits) - 1) << fmt.man_bits))
    r = round_magnitude(mag, fmt.p, fmt.emin, "rne")
    if r > big:
        return top | (encode_finite(fmt, 0, big) if saturate else (((1 << fmt.exp_bits) - 1) << fmt.man_bits))
    return encode_finite(fmt, sign, r)


OUTPUTS = ("f32", "bf16", "f16", "e4m3", "e5m2", "acc")


def convert_output(v, out):
    """fp32 bits -> the output's bits. bf16/fp16: RN-even, overflow to Inf, NaN -> 0x7FFF.
    E4M3/E5M2: RN-even, saturating (satfinite), NaN -> 0x7F. fp32: NaN -> 0x7FFFFFFF."""
    if out in ("f32", "acc"):
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


def epilogue(acc, out, scale_a, scale_b, scale_result=None, order="H1"):
    """acc, scales: fp32 bits. order H1: fp32(fp32(sa*sb)*acc); H2: fp32(fp32(acc*sa)*sb);
    H3: fp32(fp32(acc*sb)*sa). FP8 outputs then multiply by scale_result (when given)."""
    if out == "acc":
        return f32_canonical(acc)
    if order == "H1":
        v = f32_mul(f32_mul(scale_a, scale_b), acc)
    elif order == "H2":
        v = f32_mul(f32_mul(acc, scale_a), scale_b)
    elif order == "H3":
        v = f32_mul(f32_mul(acc, scale_b), scale_a)
    else:
        raise ValueError(order)
    if out in ("e4m3", "e5m2") and scale_result is not None:
        v = f32_mul(v, scale_result)
    return convert_output(v, out)


def scaled_mm(A, B, fa, fb, scale_a, scale_b, out, fast, preset="hopper", splits=1,
              scheme="none", scale_result=None, order="H1"):
    """A: M rows of K codes, B: N rows of K codes (B[j] is column j of torch's mat2).
    Returns M lists of N output bit patterns."""
    return [[epilogue(accumulator(a, b, fa, fb, fast, preset, splits, scheme), out, scale_a,
                      scale_b, scale_result, order) for b in B] for a in A]


def accumulate(A, B, fa, fb, fast, preset="hopper", splits=1, scheme="none"):
    return [[f32_canonical(accumulator(a, b, fa, fb, fast, preset, splits, scheme)) for b in B] for a in A]
