# The math library of f64 (and of the f32 functions computed through it):
# thread-level IR that computes each function to within 1-2 ulp, in plain
# IEEE arithmetic (add, mul, fma, div, sqrt, conversions) and 64-bit integer
# operations - no approximate instruction, no branch (every thread runs the
# same code; special values are chosen by `select`), no memory.  mathlib.py
# calls these where a function's dtype asks for them.
#
# The algorithms are the classic ones (fdlibm's, Cody and Waite's, Payne and
# Hanek's), their constants and polynomials in mathlib_tables.py (written by
# tools/fit_mathlib.py with mpmath; Taylor coefficients are exact rationals
# rounded here):
#
#   fmod (% of floats)        |x| reduced by |y| 2^k, 50 binary places a step,
#                             each step exact (see fmod)
#   exp, exp2, exp10, expm1   x = k ln2 + r, |r| <= ln2/2 (ln2 in two parts,
#                             so k ln2's part is exact), exp(r) - 1 = r + r^2 P(r)
#                             (Taylor to degree 13), then 2^k in two factors;
#                             exp2 and exp10 carry x ln2 and x ln10 as a pair
#                             of doubles
#   log, log2, log10, log1p   x = 2^e m, m in [sqrt 1/2, sqrt 2); f = m - 1,
#                             s = f / (2 + f), log(1 + f) = f - (f^2/2 - s (f^2/2
#                             + R(s^2))) with R the atanh series to s^22
#                             (fdlibm's form); log2 and log10 split the result
#                             in two parts before scaling it; log1p corrects
#                             the rounding of 1 + x
#   sin, cos, tan             Payne-Hanek reduction for every |x| >= pi/4: the
#                             53-bit mantissa times a 192-bit window of the bits
#                             of 2/pi (64-bit integer products), the quadrant
#                             and the fraction (to 2^-128) of x 2/pi, times
#                             pi/2 as a pair of doubles; then sin and cos of
#                             |r| <= pi/4 by their Taylor series (to r^17, r^18)
#                             with the pair's low part as a correction
#   atan, atan2, asin, acos   |t| <= 1 (else pi/2 - atan(1/t)) reduced to
#                             t' = (t - c) / (1 + t c), c = i/16 the nearest,
#                             atan(c) from a table as two doubles, atan(t') by
#                             its series (|t'| <= 1/32); asin(x) = atan2(x,
#                             sqrt((1 - x)(1 + x))), acos likewise
#   sinh, cosh, tanh          through expm1 and exp (fdlibm's forms)
#   asinh, acosh, atanh       through log1p and log (likewise)
#   erf, erfc, gelu           erf = x P(x^2) below 1; erfc = 1 - erf below 1/2,
#                             exp(-x^2) g(x) on four pieces to 6 (g in powers
#                             of x - the piece's middle), exp(-x^2) / x h(1/x^2)
#                             to 27.3
#                             (exp(-x^2) with x^2 as two doubles), 0 beyond;
#                             gelu of a negative x through erfc
#
# Accuracy (measured against mpmath on random and special arguments; tests/
# test_libm.py): within 2 ulp everywhere (erfc 3, gelu 4), within 1 ulp for
# most arguments; subnormal results lose the bits subnormals lack.
from __future__ import annotations

import math
from fractions import Fraction

from ..constants import made_nan
from ..middle.ir import Block, Builder, Value
from ..types import DType, ScalarType
from . import mathlib_tables as tables

F64 = ScalarType(DType.F64)
I32 = ScalarType(DType.I32)
I64 = ScalarType(DType.I64)
U64 = ScalarType(DType.U64)
BOOL = ScalarType(DType.BOOL)
LOG2E = 1.4426950408889634


class MathBuilder:
    """Builds arithmetic of one float dtype (f32 by default) at an insertion point."""

    def __init__(self, b: Builder, dtype: DType = DType.F32):
        self.b = b
        self.t = ScalarType(dtype)

    def c(self, x: float) -> Value:
        return self.b.const(float(x), self.t)

    def made_nan(self) -> Value:
        """The NaN an operation on numbers gives (0 / 0, inf - inf: constants.MADE_NAN_BITS), for a domain error."""
        return self.b.const(float(made_nan(self.t.dtype.numpy_name)), self.t)

    def int(self, x: int, t: ScalarType = I64) -> Value:
        return self.b.const(int(x), t)

    def op(self, opcode: str, *args: Value, **attrs) -> Value:
        return self.b.value(opcode, list(args), self.t, **attrs)

    def typed(self, opcode: str, t: ScalarType, *args: Value, **attrs) -> Value:
        return self.b.value(opcode, list(args), t, **attrs)

    def cmp(self, pred: str, a: Value, b: Value) -> Value:
        return self.b.value("cmp", [a, b], BOOL, pred=pred)

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        return self.b.value("select", [cond, a, b], a.type)

    def add(self, a, b):
        return self.op("add", a, b)

    def sub(self, a, b):
        return self.op("sub", a, b)

    def mul(self, a, b):
        return self.op("mul", a, b)

    def fma(self, a, b, c):
        return self.op("fma", a, b, c)

    def div(self, a, b):
        return self.op("div", a, b)

    def neg(self, a):
        return self.op("neg", a)

    def exp(self, x):
        return self.op("ex2_approx", self.mul(x, self.c(LOG2E)))

    def poly(self, x, coeffs):
        """Horner: coeffs[0] + x * (coeffs[1] + x * (...))."""
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k))
        return acc

    def erf(self, x):
        ax = self.op("abs", x)
        t = self.div(self.c(1.0), self.fma(self.c(0.3275911), ax, self.c(1.0)))
        p = self.mul(t, self.poly(t, [0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429]))
        e = self.exp(self.neg(self.mul(ax, ax)))
        y = self.sub(self.c(1.0), self.mul(p, e))
        neg = self.cmp("lt", x, self.c(0.0))
        return self.select(self.cmp("eq", x, self.c(0.0)), x, self.select(neg, self.neg(y), y))  # erf(-0) is -0

    # -- f64 bits (the methods below build f64 arithmetic: self.t is f64)
    def bits(self, x: Value) -> Value:
        return self.typed("bitcast", I64, x)

    def from_bits(self, bits: Value) -> Value:
        return self.typed("bitcast", self.t, bits)

    def i64(self, opcode: str, *args: Value) -> Value:
        return self.typed(opcode, I64, *args)

    def u64(self, opcode: str, *args: Value) -> Value:
        return self.typed(opcode, U64, *args)

    def exponent(self, x: Value) -> Value:
        """The binary exponent (i64) of a finite f64 x > 0, subnormals normalised (ilogb); -1077 for 0."""
        def field(v):
            return self.i64("and", self.i64("shr", self.bits(v), self.int(52)), self.int(0x7FF))
        normal, scaled = field(x), field(self.mul(x, self.c(2.0 ** 54)))
        return self.select(self.cmp("ne", normal, self.int(0)), self.i64("sub", normal, self.int(1023)),
                           self.i64("sub", scaled, self.int(1023 + 54)))

    def power_of_two(self, k: Value) -> Value:
        """2^k (f64) for an i64 k from -1022 to 1023."""
        return self.from_bits(self.i64("shl", self.i64("add", k, self.int(1023)), self.int(52)))

    def scale(self, x: Value, k: Value) -> Value:
        """x 2^k for an i64 k from -2044 to 2046, in two exact factors (overflow and underflow as one)."""
        half = self.i64("shr", k, self.int(1))
        return self.mul(self.mul(x, self.power_of_two(half)), self.power_of_two(self.i64("sub", k, half)))

    def loop(self, count: int, inits: list[Value], body) -> list[Value]:
        """A loop run `count` times (the same for every thread), carrying `inits`: `body(carried)` builds
        one iteration and returns the next values."""
        block = Block()
        op = self.b.op("for", [self.int(0, I32), self.int(count, I32), *inits], [v.type for v in inits],
                       {"step": 1}, [block])
        outer = self.b
        self.b = Builder(outer.func, block, outer.loc)
        self.b.block_arg(block, I32)
        carried = [self.b.block_arg(block, v.type) for v in inits]
        self.b.op("yield", body(carried), [])
        self.b = outer
        return list(op.results)

    def is_nan(self, x: Value) -> Value:
        return self.cmp("ne", x, x)

    def copysign(self, magnitude: Value, sign_of: Value) -> Value:
        sign = self.i64("and", self.bits(sign_of), self.int(-(1 << 63)))
        return self.from_bits(self.i64("or", self.i64("and", self.bits(magnitude), self.int((1 << 63) - 1)), sign))


# ------------------------------------------------------------------ constants
def _fraction(hex_digits: str, whole: int = 0) -> Fraction:
    return whole + Fraction(int(hex_digits, 16), 1 << (4 * len(hex_digits)))


def _parts(value: Fraction, bits: int, count: int) -> list[float]:
    """`value` (> 0) as `count` doubles, all but the last of `bits` significant bits (the last rounded to
    53): each such part's products with integers of up to 53 - bits bits are exact."""
    out, rest = [], value
    for i in range(count):
        exponent = math.floor(math.log2(abs(rest))) if rest else 0
        last = i == count - 1
        quantum = Fraction(2) ** (exponent - (53 if last else bits) + 1)
        part = (round(rest / quantum) if last else math.floor(rest / quantum)) * quantum
        out.append(float(part))
        rest -= part
    return out


LN2 = _fraction(tables.LN2)
LN10 = _fraction(tables.LN10_FRACTION, 2)
PI = _fraction(tables.PI_FRACTION, 3)
LN2_HI, LN2_LO = _parts(LN2, 32, 2)  # k LN2_HI is exact for |k| < 2^21
LN2_PAIR = _parts(LN2, 53, 2)
LN10_PAIR = _parts(LN10, 53, 2)
HALF_PI_PAIR = _parts(PI / 2, 53, 2)
PI_PAIR = _parts(PI, 53, 2)
INV_LN2_SPLIT = _parts(1 / LN2, 32, 2)  # 32 bits: its products with 21-bit values are exact
INV_LN10_SPLIT = _parts(1 / LN10, 32, 2)
LOG10_2_SPLIT = _parts(LN2 / LN10, 42, 2)  # 42 bits: its products with exponents (11 bits) are exact
INV_SQRT2_PAIR = _parts(Fraction(math.isqrt(1 << 255), 1 << 128), 53, 2)  # 1/sqrt 2 = sqrt(2^255) / 2^128
#: The bits of 2/pi in 64-bit words, after one word of zeros (the window of a small x starts before 2/pi's).
TWO_OVER_PI_WORDS = [0] + [int(tables.TWO_OVER_PI[i:i + 16], 16) for i in range(0, len(tables.TWO_OVER_PI), 16)]


def _taylor(start: int, count: int, step: int = 1, signs: tuple[int, int] = (1, 1)) -> list[float]:
    """1/n! for n = start, start + step, ... (count of them), signed signs[0], signs[1], signs[0], ..."""
    return [float(Fraction(signs[i % 2], math.factorial(start + i * step))) for i in range(count)]


EXPM1_TAIL = _taylor(2, 12)  # exp(r) - 1 - r = r^2 (1/2! + r/3! + ... + r^11/13!)
SIN_TAIL = _taylor(3, 8, 2, (-1, 1))  # sin r = r + r^3 (-1/3! + r^2/5! - ... + r^14/17!)
COS_TAIL = _taylor(4, 8, 2, (1, -1))  # cos r = 1 - r^2/2 + r^4 (1/4! - r^2/6! + ... - r^14/18!)
ATANH_SERIES = [2 / (2 * i + 3) for i in range(10)]  # log(1+f) terms: R(z) = z (2/3 + z (2/5 + ...)), z = s^2
ATAN_SERIES = [(-1) ** (i + 1) / (2 * i + 3) for i in range(6)]  # atan t = t + t^3 (-1/3 + t^2/5 - ...)
ATAN_TABLE = [(float.fromhex(hi), float.fromhex(lo)) for hi, lo in tables.ATAN_SIXTEENTHS]
ERF_SMALL = [float.fromhex(c) for c in tables.ERF_SMALL]
ERFC_PIECES = [(start, end, middle, [float.fromhex(c) for c in coefficients])
               for start, end, middle, coefficients in tables.ERFC_PIECES]
ERFC_TAIL = (tables.ERFC_TAIL[0], tables.ERFC_TAIL[1], [float.fromhex(c) for c in tables.ERFC_TAIL[2]])


# ------------------------------------------------------------------ fmod
def fmod(m: MathBuilder, x: Value, y: Value, steps: int) -> Value:
    """x % y of floats (f64 arithmetic, m.t f64): x - n y for the integer n = trunc(x / y), exactly, with the
    sign of x (C's fmod).  |x| is reduced by multiples of t = |y| 2^k, the largest k that leaves the
    quotient below 2^52: q = trunc(r / t) is then exact up to one too many (the division rounds), and
    r - q t is a multiple of ulp(t) below t in magnitude, so fma gives it exactly, and a negative one takes
    t back.  Each step takes 50 binary places off the exponent difference (at most 2097 for f64, 276 for
    values of f32), so `steps` of them (FMOD_STEPS), the same number in every thread, always finish; once
    r < |y| the steps leave it.  x infinite or y zero give NaN (the steps make it, of numbers: the canonical
    one, its sign kept), a NaN operand x + y (y's NaN before x's, quieted: constants.NAN_PRECEDENCE); y infinite
    gives x."""
    a, b = m.op("abs", x), m.op("abs", y)
    eb = m.exponent(b)

    def step(carried: list[Value]) -> list[Value]:
        (r,) = carried
        k = m.i64("max", m.i64("sub", m.i64("sub", m.exponent(r), eb), m.int(51)), m.int(0))
        half = m.i64("shr", k, m.int(1))
        t = m.mul(m.mul(b, m.power_of_two(half)), m.power_of_two(m.i64("sub", k, half)))
        q = m.op("trunc", m.div(r, t))
        left = m.fma(q, m.neg(t), r)  # not -q: a q of 0 / 0 or inf / inf is the made NaN, which - would sign
        left = m.select(m.cmp("lt", left, m.c(0.0)), m.add(left, t), left)
        return [m.select(m.cmp("ge", r, b), left, r)]

    (r,) = m.loop(steps, [a], step)
    signed = m.select(m.is_nan(r), r, m.copysign(r, x))
    either = m.add(x, y)
    return m.select(m.is_nan(x), either, m.select(m.is_nan(y), either, signed))


#: fmod's steps: enough for the largest exponent difference of the operands' dtype (see fmod).
FMOD_STEPS = {DType.F32: 7, DType.F64: 44}


# ------------------------------------------------------------------ exponentials
def _exp_reduced(m: MathBuilder, x: Value) -> tuple[Value, Value]:
    """(k, q) with x = k ln2 + r, |r| <= ln2/2 + a little, and q = exp(r) - 1: x clamped to +-1100 first
    (exp of beyond is 0 or infinite either way) so that k is a small i64."""
    x = m.op("max", m.op("min", x, m.c(1100.0)), m.c(-1100.0))
    kf = m.op("round", m.mul(x, m.c(LOG2E)))
    r = m.fma(m.neg(kf), m.c(LN2_LO), m.fma(m.neg(kf), m.c(LN2_HI), x))
    return m.typed("cast", I64, kf), _expm1_small(m, r)


def _expm1_small(m: MathBuilder, r: Value) -> Value:
    """exp(r) - 1 for |r| <= ln2/2 + a little: r + r^2 P(r), P Taylor's to r^11/13!."""
    return m.fma(m.mul(r, r), m.poly(r, EXPM1_TAIL), r)


def _nan_through(m: MathBuilder, x: Value, result: Value) -> Value:
    """`result`, or a NaN x itself (the clamps of the reductions would lose it)."""
    return m.select(m.is_nan(x), m.add(x, x), result)


def exp(m: MathBuilder, x: Value) -> Value:
    k, q = _exp_reduced(m, x)
    return _nan_through(m, x, m.scale(m.add(m.c(1.0), q), k))


def _exp_of_pair_parts(m: MathBuilder, hi: Value, lo: Value) -> tuple[Value, Value]:
    """(k, q) with exp(hi + lo) = 2^k (1 + q), for |lo| far below ulp(hi): exp(hi) (1 + lo)."""
    k, q = _exp_reduced(m, hi)
    return k, m.fma(q, lo, m.add(q, lo))


def _exp_of_pair(m: MathBuilder, hi: Value, lo: Value) -> Value:
    """exp(hi + lo) for |lo| far below ulp(hi)."""
    k, q = _exp_of_pair_parts(m, hi, lo)
    return m.scale(m.add(m.c(1.0), q), k)


def _scaled_product(m: MathBuilder, k: Value, q: Value, g: Value) -> Value:
    """2^k (1 + q) g, with one rounding for (1 + q) g (fma) rather than two."""
    return m.scale(m.fma(q, g, g), k)


def _times_pair(m: MathBuilder, x: Value, pair: list[float]) -> tuple[Value, Value]:
    """x times the constant hi + lo, as a pair of doubles (hi, lo)."""
    hi = m.mul(x, m.c(pair[0]))
    return hi, m.fma(x, m.c(pair[1]), m.fma(x, m.c(pair[0]), m.neg(hi)))


def exp2(m: MathBuilder, x: Value) -> Value:
    """2^x = 2^k exp(f ln2), k = round(x), f = x - k exact."""
    clamped = m.op("max", m.op("min", x, m.c(1100.0)), m.c(-1100.0))
    kf = m.op("round", clamped)
    hi, lo = _times_pair(m, m.sub(clamped, kf), LN2_PAIR)
    return _nan_through(m, x, m.scale(_exp_of_pair(m, hi, lo), m.typed("cast", I64, kf)))


def exp10(m: MathBuilder, x: Value) -> Value:
    """10^x = exp(x ln10), x ln10 carried as a pair of doubles."""
    clamped = m.op("max", m.op("min", x, m.c(400.0)), m.c(-400.0))
    hi, lo = _times_pair(m, clamped, LN10_PAIR)
    return _nan_through(m, x, _exp_of_pair(m, hi, lo))


def expm1(m: MathBuilder, x: Value) -> Value:
    """exp(x) - 1: x below -40 gives -1; else 2^k q + (2^k - 1) in one fma while 2^k - 1 is exact, the
    -1 lost in 2^k (1 + q) beyond."""
    clamped = m.op("max", x, m.c(-40.0))
    k, q = _exp_reduced(m, clamped)
    small = m.cmp("le", k, m.int(60))
    two_k = m.power_of_two(m.i64("min", k, m.int(60)))
    near = m.fma(two_k, q, m.sub(two_k, m.c(1.0)))
    far = m.scale(m.add(m.c(1.0), q), k)
    tiny = m.cmp("lt", m.op("abs", x), m.c(2.0 ** -54))  # x itself (-0.0 stays)
    return _nan_through(m, x, m.select(tiny, x, m.select(small, near, far)))


# ------------------------------------------------------------------ logarithms
def _log_parts(m: MathBuilder, x: Value) -> tuple[Value, Value, Value]:
    """(e, f, t) for finite x > 0: x = 2^e (1 + f) with 1 + f in [sqrt 1/2, sqrt 2), and t with log(1 + f)
    = f - t (fdlibm: t = hfsq - s (hfsq + R(s^2)), hfsq = f^2/2, s = f / (2 + f))."""
    subnormal = m.cmp("lt", x, m.c(2.0 ** -1022))
    x = m.select(subnormal, m.mul(x, m.c(2.0 ** 54)), x)
    bits = m.bits(x)
    # the mantissa's bits with the exponent of 1 or of 1/2, whichever brings it to [sqrt 1/2, sqrt 2)
    top = m.i64("and", bits, m.int((1 << 52) - 1))
    high = m.cmp("gt", top, m.int(0x6A09E667F3BCD))  # mantissa of sqrt 2
    biased = m.i64("shr", bits, m.int(52))
    e = m.i64("sub", m.i64("sub", biased, m.int(1023)), m.select(subnormal, m.int(54), m.int(0)))
    e = m.select(high, m.i64("add", e, m.int(1)), e)
    mant = m.from_bits(m.i64("or", top, m.select(high, m.int(0x3FE << 52), m.int(0x3FF << 52))))
    f = m.sub(mant, m.c(1.0))
    s = m.div(f, m.add(m.c(2.0), f))
    z = m.mul(s, s)
    r = m.mul(z, m.poly(z, ATANH_SERIES))
    hfsq = m.mul(m.mul(f, f), m.c(0.5))
    return m.typed("cast", F64, e), f, m.fma(m.neg(s), m.add(hfsq, r), hfsq)


def _log_special(m: MathBuilder, x: Value, result: Value) -> Value:
    """log-like functions at 0 (-inf), below it (NaN), inf and NaN (themselves)."""
    result = m.select(m.cmp("eq", x, m.c(0.0)), m.c(-math.inf), result)
    result = m.select(m.cmp("lt", x, m.c(0.0)), m.made_nan(), result)
    return m.select(m.cmp("eq", x, m.c(math.inf)), x, _nan_through(m, x, result))


def log(m: MathBuilder, x: Value) -> Value:
    e, f, t = _log_parts(m, x)
    result = m.fma(e, m.c(LN2_PAIR[0]), m.sub(f, m.fma(m.neg(e), m.c(LN2_PAIR[1]), t)))
    return _log_special(m, x, result)


def _log_scaled(m: MathBuilder, x: Value, scale: list[float], per_octave: list[float]) -> Value:
    """log(x) * scale for log2 and log10 (fdlibm's): log(1 + f) = f - t split as hi + lo (hi with its low 32
    bits cleared, scale's high part of 32 bits, so their product is exact), plus e * per_octave (its high
    part's product with e exact too), summed with the rounding of the last addition carried."""
    e, f, t = _log_parts(m, x)
    hi = m.from_bits(m.i64("and", m.bits(m.sub(f, t)), m.int(-(1 << 32))))
    lo = m.sub(m.sub(f, hi), t)
    value_hi = m.mul(hi, m.c(scale[0]))
    value_lo = m.fma(m.add(lo, hi), m.c(scale[1]), m.mul(lo, m.c(scale[0])))
    base = m.mul(e, m.c(per_octave[0]))
    total = m.add(base, value_hi)
    value_lo = m.add(value_lo, m.add(m.sub(base, total), value_hi))
    value_lo = m.fma(e, m.c(per_octave[1]), value_lo)
    return _log_special(m, x, m.add(total, value_lo))


def log2(m: MathBuilder, x: Value) -> Value:
    return _log_scaled(m, x, INV_LN2_SPLIT, [1.0, 0.0])


def log10(m: MathBuilder, x: Value) -> Value:
    return _log_scaled(m, x, INV_LN10_SPLIT, LOG10_2_SPLIT)


def log1p(m: MathBuilder, x: Value) -> Value:
    """log(1 + x): log(u) for u = 1 + x rounded, plus (x - (u - 1)) / u, which corrects the rounding."""
    u = m.add(m.c(1.0), x)
    correction = m.div(m.sub(x, m.sub(u, m.c(1.0))), u)
    tiny = m.cmp("lt", m.op("abs", x), m.c(2.0 ** -54))
    result = m.add(log(m, u), correction)
    result = m.select(tiny, x, result)
    result = m.select(m.cmp("eq", x, m.c(-1.0)), m.c(-math.inf), result)
    return m.select(m.cmp("lt", x, m.c(-1.0)), m.made_nan(), m.select(m.cmp("eq", x, m.c(math.inf)), x, result))


# ------------------------------------------------------------------ sin, cos, tan
def _word(m: MathBuilder, index: Value) -> Value:
    """TWO_OVER_PI_WORDS[index] (u64) for an i64 index from 0 to len - 1: a chain of selects."""
    word = m.int(TWO_OVER_PI_WORDS[-1], U64)
    for i in range(len(TWO_OVER_PI_WORDS) - 2, -1, -1):
        word = m.select(m.cmp("eq", index, m.int(i)), m.int(TWO_OVER_PI_WORDS[i], U64), word)
    return word


def _add_carry(m: MathBuilder, a: Value, b: Value) -> tuple[Value, Value]:
    """(a + b mod 2^64, its carry 0 or 1) of u64 values."""
    total = m.u64("add", a, b)
    return total, m.select(m.cmp("lt", total, a), m.int(1, U64), m.int(0, U64))


def _reduce_quadrant(m: MathBuilder, x: Value) -> tuple[Value, Value, Value]:
    """Payne-Hanek: (n, r_hi, r_lo) with |x| = (n + F) pi/2, F in [-1/2, 1/2), r_hi + r_lo = F pi/2 (a pair
    of doubles, F to 2^-128), for finite |x| >= 2^-53 (x's sign is ignored).

    |x| = M 2^E, M the 53-bit integer mantissa.  Bits of 2/pi of weight 2^-i with i <= E - 2 make multiples
    of 4 (quarter turns: nothing), so the product starts at bit E - 1 of 2/pi: W, 192 bits from there (the
    words table has a word of zeros first, so a small x's window may start before 2/pi), and x 2/pi = M W
    2^-190 but for whole quarter turns.  Of M W = (c3, c2, c1, c0), 64 bits each: n is the top two bits of
    c2, and F the next 128 bits, read as a signed fraction (so F >= 1/2 becomes F - 1 and n counts one
    more)."""
    bits = m.bits(m.op("abs", x))
    biased = m.i64("shr", bits, m.int(52))
    mantissa = m.typed("bitcast", U64, m.i64("or", m.i64("and", bits, m.int((1 << 52) - 1)), m.int(1 << 52)))
    start = m.i64("add", m.i64("sub", biased, m.int(1023 + 52)), m.int(62))  # bit E - 1: the zero word is bits 0-63
    index, shift = m.i64("shr", start, m.int(6)), m.typed("cast", U64, m.i64("and", start, m.int(63)))
    words = [_word(m, m.i64("add", index, m.int(j))) for j in range(4)]
    back = m.u64("sub", m.int(64, U64), shift)  # 64: a shift by 0 leaves the next word's bits out
    window = [m.u64("or", m.u64("shl", words[j], shift), m.u64("shr", words[j + 1], back)) for j in range(3)]
    low = [m.u64("mul", mantissa, w) for w in window]  # of W0 (most significant), W1, W2
    high = [m.u64("mulhi", mantissa, w) for w in window]
    c1, carry = _add_carry(m, low[1], high[2])
    c2 = m.u64("add", m.u64("add", low[0], high[1]), carry)

    def bits_at(upper: Value, lower: Value) -> Value:  # 64 bits of (upper, lower) two places down from upper's
        return m.u64("or", m.u64("shl", upper, m.int(2, U64)), m.u64("shr", lower, m.int(62, U64)))
    f_high, f_low = bits_at(c2, c1), bits_at(c1, low[2])
    quadrant = m.u64("add", m.u64("shr", c2, m.int(62, U64)), m.u64("shr", f_high, m.int(63, U64)))
    n = m.typed("cast", I64, m.u64("and", quadrant, m.int(3, U64)))
    signed = m.typed("bitcast", I64, f_high)  # F in [-1/2, 1/2): its top 64 bits, two's complement
    head = m.mul(m.typed("cast", F64, m.i64("shr", signed, m.int(11))), m.c(2.0 ** -53))  # exact, 53 bits
    tail = m.add(m.mul(m.typed("cast", F64, m.i64("and", signed, m.int(0x7FF))), m.c(2.0 ** -64)),
                 m.mul(m.typed("cast", F64, f_low), m.c(2.0 ** -128)))
    r_hi = m.mul(head, m.c(HALF_PI_PAIR[0]))
    r_lo = m.fma(tail, m.c(HALF_PI_PAIR[0]), m.fma(head, m.c(HALF_PI_PAIR[1]),
                                                  m.fma(head, m.c(HALF_PI_PAIR[0]), m.neg(r_hi))))
    hi = m.add(r_hi, r_lo)
    return n, hi, m.sub(r_lo, m.sub(hi, r_hi))


def _sin_cos_reduced(m: MathBuilder, r: Value, lo: Value) -> tuple[Value, Value]:
    """(sin, cos) of r + lo, |r| <= pi/4, lo far below ulp(r): the Taylor series, lo as a first-order
    correction (sin: + lo cos r, cos: - lo sin r), cos's 1 - r^2/2 as fdlibm keeps it."""
    z = m.mul(r, r)
    half_z = m.mul(z, m.c(0.5))
    sin = m.add(r, m.fma(m.mul(z, r), m.poly(z, SIN_TAIL), m.mul(lo, m.sub(m.c(1.0), half_z))))
    w = m.sub(m.c(1.0), half_z)
    tail = m.fma(m.mul(z, z), m.poly(z, COS_TAIL), m.fma(m.neg(r), lo, m.sub(m.sub(m.c(1.0), w), half_z)))
    return sin, m.add(w, tail)


def _quadrant_parts(m: MathBuilder, x: Value) -> tuple[Value, Value, Value]:
    """(n, sin r, cos r) with |x| = n pi/2 + r: r = |x| itself (n = 0) up to pi/4, else reduced."""
    n, r_hi, r_lo = _reduce_quadrant(m, x)
    ax = m.op("abs", x)
    small = m.cmp("le", ax, m.c(math.pi / 4))
    n = m.select(small, m.int(0), n)
    sin, cos = _sin_cos_reduced(m, m.select(small, ax, r_hi), m.select(small, m.c(0.0), r_lo))
    return n, sin, cos


def _trig_special(m: MathBuilder, x: Value, result: Value) -> Value:
    """sin, cos, tan at +-inf and NaN: NaN (x - x)."""
    return m.select(m.cmp("eq", m.op("abs", x), m.c(math.inf)), m.sub(x, x), _nan_through(m, x, result))


def _quadrant_pick(m: MathBuilder, n: Value, values: list[Value]) -> Value:
    """values[n] for n in 0..3."""
    out = values[3]
    for i in (2, 1, 0):
        out = m.select(m.cmp("eq", n, m.int(i)), values[i], out)
    return out


def _odd(m: MathBuilder, value: Value, x: Value) -> Value:
    """An odd function's value at x from its value at |x|: the sign flipped where x is negative."""
    return m.from_bits(m.i64("xor", m.bits(value), m.i64("and", m.bits(x), m.int(-(1 << 63)))))


def sin(m: MathBuilder, x: Value) -> Value:
    n, s, c = _quadrant_parts(m, x)
    value = _odd(m, _quadrant_pick(m, n, [s, c, m.neg(s), m.neg(c)]), x)
    tiny = m.cmp("lt", m.op("abs", x), m.c(2.0 ** -27))  # sin x = x (and -0.0 stays)
    return _trig_special(m, x, m.select(tiny, x, value))


def cos(m: MathBuilder, x: Value) -> Value:
    n, s, c = _quadrant_parts(m, x)
    return _trig_special(m, x, _quadrant_pick(m, n, [c, m.neg(s), m.neg(c), s]))


def tan(m: MathBuilder, x: Value) -> Value:
    n, s, c = _quadrant_parts(m, x)
    odd = m.cmp("ne", m.i64("and", n, m.int(1)), m.int(0))
    value = _odd(m, m.select(odd, m.neg(m.div(c, s)), m.div(s, c)), x)
    tiny = m.cmp("lt", m.op("abs", x), m.c(2.0 ** -27))
    return _trig_special(m, x, m.select(tiny, x, value))


# ------------------------------------------------------------------ inverse trigonometric
def _atan_unit(m: MathBuilder, t: Value) -> tuple[Value, Value]:
    """atan(t) for t in [0, 1] as a pair (hi, lo): atan(c) + atan((t - c) / (1 + t c)), c = i/16 nearest t."""
    i = m.op("round", m.mul(t, m.c(16.0)))
    c = m.mul(i, m.c(1 / 16))
    index = m.typed("cast", I64, i)
    hi, lo = m.c(ATAN_TABLE[-1][0]), m.c(ATAN_TABLE[-1][1])
    for k in range(len(ATAN_TABLE) - 2, -1, -1):
        hit = m.cmp("eq", index, m.int(k))
        hi, lo = m.select(hit, m.c(ATAN_TABLE[k][0]), hi), m.select(hit, m.c(ATAN_TABLE[k][1]), lo)
    u = m.div(m.sub(t, c), m.fma(t, c, m.c(1.0)))
    z = m.mul(u, u)
    series = m.fma(m.mul(z, u), m.poly(z, ATAN_SERIES), u)  # atan u
    return hi, m.add(lo, series)


def _atan_pair(m: MathBuilder, y: Value, x: Value) -> tuple[Value, Value, Value]:
    """(hi, lo, swapped) for |y|, |x| (not both 0 or infinite): atan(min / max) as a pair; swapped when
    |y| > |x| (the angle is then pi/2 minus it)."""
    ay, ax = m.op("abs", y), m.op("abs", x)
    swapped = m.cmp("gt", ay, ax)
    t = m.div(m.select(swapped, ax, ay), m.select(swapped, ay, ax))
    hi, lo = _atan_unit(m, t)
    return hi, lo, swapped


def _complement(m: MathBuilder, hi: Value, lo: Value) -> Value:
    """pi/2 - (hi + lo)."""
    return m.add(m.c(HALF_PI_PAIR[0]), m.sub(m.c(HALF_PI_PAIR[1]), m.add(hi, lo)))


def atan(m: MathBuilder, x: Value) -> Value:
    hi, lo, swapped = _atan_pair(m, x, m.c(1.0))
    angle = m.select(swapped, _complement(m, hi, lo), m.add(hi, lo))
    tiny = m.cmp("lt", m.op("abs", x), m.c(2.0 ** -27))
    return _nan_through(m, x, m.select(tiny, x, m.copysign(angle, x)))


def atan2(m: MathBuilder, y: Value, x: Value) -> Value:
    """The angle of (x, y) in [-pi, pi], signs of zeros and infinities as C's atan2."""
    hi, lo, swapped = _atan_pair(m, y, x)
    ay, ax = m.op("abs", y), m.op("abs", x)
    both_inf = m.typed("and", BOOL, m.cmp("eq", ay, m.c(math.inf)), m.cmp("eq", ax, m.c(math.inf)))
    hi = m.select(both_inf, m.c(ATAN_TABLE[16][0]), hi)  # atan(1) = pi/4
    lo = m.select(both_inf, m.c(ATAN_TABLE[16][1]), lo)
    first = m.select(swapped, _complement(m, hi, lo), m.add(hi, lo))
    first = m.select(m.cmp("eq", ay, m.c(0.0)), m.c(0.0), first)  # y = 0: 0 or pi, by x's sign bit
    first = m.select(m.typed("and", BOOL, m.cmp("eq", ax, m.c(0.0)), m.cmp("ne", ay, m.c(0.0))),
                     m.c(HALF_PI_PAIR[0]), first)
    negative_x = m.cmp("lt", m.bits(x), m.int(0))  # the sign bit: -0.0 counts
    behind = m.add(m.c(PI_PAIR[0]), m.sub(m.c(PI_PAIR[1]), first))
    angle = m.select(negative_x, behind, first)
    return _nan_through(m, x, _nan_through(m, y, m.copysign(angle, y)))


def asin(m: MathBuilder, x: Value) -> Value:
    """atan2(x, sqrt((1 - x)(1 + x))) (NaN beyond 1 comes from the square root)."""
    cosine = m.op("sqrt", m.mul(m.sub(m.c(1.0), x), m.add(m.c(1.0), x)))
    return atan2(m, x, cosine)


def acos(m: MathBuilder, x: Value) -> Value:
    sine = m.op("sqrt", m.mul(m.sub(m.c(1.0), x), m.add(m.c(1.0), x)))
    return atan2(m, sine, x)


# ------------------------------------------------------------------ hyperbolic
def sinh(m: MathBuilder, x: Value) -> Value:
    """(E + E / (E + 1)) / 2 with E = expm1(|x|) (no cancellation near 0); past 709 exp(|x|/2)^2 / 2."""
    ax = m.op("abs", x)
    e = expm1(m, m.op("min", ax, m.c(709.0)))
    near = m.mul(m.add(e, m.div(e, m.add(e, m.c(1.0)))), m.c(0.5))
    half = exp(m, m.mul(ax, m.c(0.5)))
    far = m.mul(m.mul(half, m.c(0.5)), half)
    return _nan_through(m, x, m.copysign(m.select(m.cmp("lt", ax, m.c(709.0)), near, far), x))


def cosh(m: MathBuilder, x: Value) -> Value:
    """1 + E^2 / (2 (1 + E)) near 0 (E = expm1(|x|)), (e + 1/e) / 2 beyond, exp(|x|/2)^2 / 2 past 709."""
    ax = m.op("abs", x)
    e = expm1(m, m.op("min", ax, m.c(709.0)))
    near = m.add(m.c(1.0), m.div(m.mul(e, e), m.mul(m.c(2.0), m.add(m.c(1.0), e))))
    grown = m.add(e, m.c(1.0))
    middle = m.fma(grown, m.c(0.5), m.div(m.c(0.5), grown))
    half = exp(m, m.mul(ax, m.c(0.5)))
    far = m.mul(m.mul(half, m.c(0.5)), half)
    result = m.select(m.cmp("lt", ax, m.c(0.5)), near, m.select(m.cmp("lt", ax, m.c(709.0)), middle, far))
    return _nan_through(m, x, result)


def tanh(m: MathBuilder, x: Value) -> Value:
    """-E / (E + 2) with E = expm1(-2|x|) below 1, 1 - 2 / (expm1(2|x|) + 2) up to 22, 1 beyond."""
    ax = m.op("abs", x)
    small = expm1(m, m.mul(m.c(-2.0), m.op("min", ax, m.c(1.0))))
    near = m.div(m.neg(small), m.add(small, m.c(2.0)))
    big = expm1(m, m.mul(m.c(2.0), m.op("min", ax, m.c(22.0))))
    middle = m.sub(m.c(1.0), m.div(m.c(2.0), m.add(big, m.c(2.0))))
    value = m.select(m.cmp("lt", ax, m.c(1.0)), near, m.select(m.cmp("lt", ax, m.c(22.0)), middle, m.c(1.0)))
    tiny = m.cmp("lt", ax, m.c(2.0 ** -28))
    return _nan_through(m, x, m.select(tiny, x, m.copysign(value, x)))


def asinh(m: MathBuilder, x: Value) -> Value:
    """log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) below 2, log(2|x| + 1 / (sqrt(x^2 + 1) + |x|)) up to 2^28,
    log(|x|) + ln2 beyond."""
    ax = m.op("abs", x)
    square = m.mul(ax, ax)
    root = m.op("sqrt", m.add(m.c(1.0), square))
    near = log1p(m, m.add(ax, m.div(square, m.add(m.c(1.0), root))))
    middle = log(m, m.add(m.mul(m.c(2.0), ax), m.div(m.c(1.0), m.add(root, ax))))
    far = m.add(log(m, ax), m.c(LN2_PAIR[0]))
    value = m.select(m.cmp("lt", ax, m.c(2.0)), near, m.select(m.cmp("lt", ax, m.c(2.0 ** 28)), middle, far))
    tiny = m.cmp("lt", ax, m.c(2.0 ** -28))
    return _nan_through(m, x, m.select(tiny, x, m.copysign(m.select(m.cmp("eq", ax, m.c(math.inf)), ax, value), x)))


def acosh(m: MathBuilder, x: Value) -> Value:
    """log1p(t + sqrt(2t + t^2)), t = x - 1, below 2; log(2x - 1 / (x + sqrt(x^2 - 1))) up to 2^28; log(x) +
    ln2 beyond; NaN below 1."""
    t = m.sub(x, m.c(1.0))
    near = log1p(m, m.add(t, m.op("sqrt", m.fma(t, t, m.mul(m.c(2.0), t)))))
    middle = log(m, m.sub(m.mul(m.c(2.0), x), m.div(m.c(1.0), m.add(x, m.op("sqrt", m.fma(x, x, m.c(-1.0)))))))
    far = m.add(log(m, x), m.c(LN2_PAIR[0]))
    value = m.select(m.cmp("lt", x, m.c(2.0)), near, m.select(m.cmp("lt", x, m.c(2.0 ** 28)), middle, far))
    value = m.select(m.cmp("eq", x, m.c(math.inf)), x, value)
    return _nan_through(m, x, m.select(m.cmp("lt", x, m.c(1.0)), m.made_nan(), value))


def atanh(m: MathBuilder, x: Value) -> Value:
    """log1p(2|x| + 2x^2 / (1 - |x|)) / 2 below 1/2, log1p(2|x| / (1 - |x|)) / 2 up to 1 (inf at 1, NaN
    beyond)."""
    ax = m.op("abs", x)
    twice = m.add(ax, ax)
    near = m.mul(m.c(0.5), log1p(m, m.add(twice, m.div(m.mul(twice, ax), m.sub(m.c(1.0), ax)))))
    far = m.mul(m.c(0.5), log1p(m, m.div(twice, m.sub(m.c(1.0), ax))))
    value = m.copysign(m.select(m.cmp("lt", ax, m.c(0.5)), near, far), x)
    value = m.select(m.cmp("gt", ax, m.c(1.0)), m.made_nan(), value)  # after copysign, which would sign it
    tiny = m.cmp("lt", ax, m.c(2.0 ** -28))
    return _nan_through(m, x, m.select(tiny, x, value))


# ------------------------------------------------------------------ the error function and relatives
def _exp_minus_square(m: MathBuilder, hi: Value, lo: Value) -> tuple[Value, Value]:
    """(k, q) with exp(-(hi + lo)^2) = 2^k (1 + q), for a pair hi + lo >= 0, its square as a pair too (a
    rounding of the square would be amplified by it)."""
    square = m.mul(hi, hi)
    error = m.fma(m.add(hi, hi), lo, m.fma(hi, hi, m.neg(square)))
    return _exp_of_pair_parts(m, m.neg(square), m.neg(error))


def _erfc_positive(m: MathBuilder, hi: Value, lo: Value, factor: Value | None = None) -> Value:
    """erfc(hi + lo) for a pair >= 0 (times `factor`, where given): 1 - erf below 1/2 (little cancellation
    there: erfc > 0.47), exp(-x^2) g(x) on the fitted pieces to 6, exp(-x^2) / x h(1/x^2) on to 27.3, 0
    beyond; the product with exp(-x^2) rounded once (_scaled_product)."""
    near = m.sub(m.c(1.0), m.mul(hi, m.poly(m.mul(hi, hi), ERF_SMALL)))
    if factor is not None:
        near = m.mul(near, factor)
    x = m.op("min", m.op("max", hi, m.c(ERFC_PIECES[0][0])), m.c(ERFC_TAIL[1]))
    g = None
    for _, end, middle, coefficients in reversed(ERFC_PIECES):
        piece = m.poly(m.sub(x, m.c(middle)), coefficients)
        g = piece if g is None else m.select(m.cmp("lt", x, m.c(end)), piece, g)
    tail = m.div(m.poly(m.div(m.c(1.0), m.mul(x, x)), ERFC_TAIL[2]), x)
    g = m.select(m.cmp("lt", x, m.c(ERFC_TAIL[0])), g, tail)
    if factor is not None:
        g = m.mul(g, factor)
    far = _scaled_product(m, *_exp_minus_square(m, x, m.select(m.cmp("eq", x, hi), lo, m.c(0.0))), g)
    value = m.select(m.cmp("lt", hi, m.c(ERFC_PIECES[0][0])), near, far)
    beyond = m.c(0.0) if factor is None else m.copysign(m.c(0.0), factor)
    return m.select(m.cmp("lt", hi, m.c(ERFC_TAIL[1])), value, beyond)


def erf(m: MathBuilder, x: Value) -> Value:
    """x P(x^2) below 1, 1 - erfc(|x|) beyond (with the sign of x)."""
    ax = m.op("abs", x)
    small = m.mul(ax, m.poly(m.mul(ax, ax), ERF_SMALL))
    value = m.select(m.cmp("lt", ax, m.c(1.0)), small, m.sub(m.c(1.0), _erfc_positive(m, ax, m.c(0.0))))
    return _nan_through(m, x, m.copysign(value, x))


def erfc(m: MathBuilder, x: Value) -> Value:
    """1 - erf(x): erfc(x) for x >= 0, 2 - erfc(-x) below."""
    value = _erfc_positive(m, m.op("abs", x), m.c(0.0))
    negative = m.cmp("lt", x, m.c(0.0))
    return _nan_through(m, x, m.select(negative, m.sub(m.c(2.0), value), value))


def gelu(m: MathBuilder, x: Value) -> Value:
    """x (1 + erf(x / sqrt 2)) / 2; for x < 0 as x erfc(|x| / sqrt 2) / 2, |x| / sqrt 2 a pair (1 + erf
    would cancel, and the rounding of x / sqrt 2 would be amplified by x^2 / 2); -0.0 at -inf (the
    limit)."""
    hi, lo = _times_pair(m, m.op("abs", x), INV_SQRT2_PAIR)
    half = m.mul(x, m.c(0.5))
    positive = m.mul(half, m.add(m.c(1.0), erf(m, hi)))
    negative = _erfc_positive(m, hi, lo, half)
    return _nan_through(m, x, m.select(m.cmp("lt", x, m.c(0.0)), negative, positive))


def sigmoid(m: MathBuilder, x: Value) -> Value:
    return m.div(m.c(1.0), m.add(m.c(1.0), exp(m, m.neg(x))))


def rsqrt(m: MathBuilder, x: Value) -> Value:
    return m.div(m.c(1.0), m.op("sqrt", x))


#: The f64 algorithms by the math builtin's name; their arguments are f64 values, their result f64.
F64_FUNCTIONS = {
    "exp": exp, "exp2": exp2, "exp10": exp10, "expm1": expm1, "log": log, "log2": log2, "log10": log10,
    "log1p": log1p, "sin": sin, "cos": cos, "tan": tan, "asin": asin, "acos": acos, "atan": atan,
    "atan2": atan2, "sinh": sinh, "cosh": cosh, "tanh": tanh, "asinh": asinh, "acosh": acosh, "atanh": atanh,
    "erf": erf, "erfc": erfc, "sigmoid": sigmoid, "gelu": gelu, "rsqrt": rsqrt,
}
