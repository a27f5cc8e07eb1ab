# Exact arithmetic for the PTX emulator.
#
# PTX arithmetic is IEEE 754: every `.rn/.rz/.rm/.rp` operation returns the
# exact result rounded once.  NumPy gives round-to-nearest for float32 and
# float64 `+ - * / sqrt`; everything else is built here, vectorised:
#
# * f32 operations with a directed rounding mode, and f32 `fma`: the exact
#   result is held as a float64 `r` plus the sign of the error `x - r`
#   (products of two f32 are exact in float64; sums come with TwoSum's error;
#   quotients and square roots with the sign of a residual computed exactly
#   with Dekker's product).  `round_to_format` then rounds `r (+ error)` to the
#   narrow format correctly, which a plain float64 -> float32 cast would not
#   do for an `r` that lies exactly half way between two float32 numbers.
# * f64 `fma.rn`: Boldo and Melquiond's emulation with round-to-odd
#   (Dekker product, TwoSum, an odd-rounded correction, one final rounding);
#   lanes whose operands are so large or small that the error terms could
#   overflow or underflow take the exact scalar path below instead.
# * f64 operations with a directed rounding mode, and conversions of 64-bit
#   integers too wide for float64: exact rational arithmetic per lane with
#   `fractions.Fraction`, rounded by `round_fraction`.  Slow, but such
#   operations are rare in generated code.
#
# NaN results carry the bits the GPU gives them, as `phobos.constants.
# arithmetic_nan` defines for the whole of Phobos: every f32 arithmetic result
# that is NaN is the canonical NaN 0x7FFFFFFF; an f64 one is a NaN operand
# with the quiet bit set (PTX supports f64 payloads) - b's before a's in add,
# sub and mul, b's, c's, a's in fma, the first in the others (`constants.
# NAN_PRECEDENCE`) - or 0xFFF8000000000000 where it is made of numbers.  The
# functions below return those bits; `min`/`max` (`extreme`) return one
# operand's bits, or for two NaNs b's quieted (f32: the canonical NaN, and so
# for any NaN under `.NaN`).
#
# The `.approx` functions that mufu.py does not model bit for bit (lg2, sin,
# cos, tanh of f32; the f64 ones) are computed in float64 and rounded to the
# result type (`approximate`; docs/emulator.md gives their distance from the
# GPU's) - sin and cos of the GPU's range reduction (`sin_approx`): ptxas
# multiplies by 1/(2 pi) rounded toward zero to f32, so at large arguments the
# GPU's results are those of the rounded number of turns (sin(2^31) is 0).
#
# Tensor-core dot products (`mma`, `wgmma`) are not IEEE operations; NVIDIA
# documents only that products are exact and the sum is at least as precise as
# f32.  `tensor_core_dot` follows the bit-accurate models that Khattak and
# Mikaitis fitted to V100..B200 hardware ("Accurate Models of NVIDIA Tensor
# Cores", arXiv:2512.07004, 2025; models in github.com/north-numerical-
# computing/MATLAB-tensor-core): see `TensorCoreModel`.  It computes them
# without a per-term loop: every product of a part of the batch in one
# broadcasting pass (in float32 where products are exact there), with the
# longest of batch, rows and columns innermost so that NumPy's inner loops are
# long (where that one is still short, `_outer` lengthens them by repeating
# an operand along it), the largest exponent sums of all blocks likewise
# (exponents looked up in tables by the bits above the fraction), then block
# by block the terms scaled, truncated and summed in int32, a few hundred
# thousand terms at a time so that they stay in cache, in buffers kept from
# call to call (`_scratch`).
# Into f16 accumulators (`round_half_accumulator`) and for f64 (`fma_dot`) the
# emulator makes an assumption each, which tests/test_emulator_ptx_forms_gpu.py
# checks on a GPU.
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ...constants import arithmetic_nan, canonical_nan, maximum, minimum, nan_precedence, quiet

MODES = ("rn", "rz", "rm", "rp")


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: explicit mantissa bits and exponent range."""

    name: str
    man: int
    emin: int
    emax: int

    @property
    def max_value(self) -> float:
        return math.ldexp(2.0 - 2.0 ** -self.man, self.emax)


F16 = FloatFormat("f16", 10, -14, 15)
BF16 = FloatFormat("bf16", 7, -126, 127)
F32 = FloatFormat("f32", 23, -126, 127)
F64 = FloatFormat("f64", 52, -1022, 1023)

_SPLITTER = 134217729.0  # 2**27 + 1, Veltkamp's splitting constant for float64


def two_sum(a, b):
    """(s, e) with s = fl(a + b) and a + b = s + e exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def two_prod(a, b):
    """(p, e) with p = fl(a * b) and a * b = p + e exactly (Dekker), barring over/underflow."""
    p = a * b
    ca = _SPLITTER * a
    ahi = ca - (ca - a)
    alo = a - ahi
    cb = _SPLITTER * b
    bhi = cb - (cb - b)
    blo = b - bhi
    return p, ((ahi * bhi - p) + ahi * blo + alo * bhi) + alo * blo


def round_to_format(r: np.ndarray, err: np.ndarray | None, fmt: FloatFormat, mode: str) -> np.ndarray:
    """Round x = r + (tiny error of sign `err`) to `fmt`; the result is float64.

    `r` must be float64 and the round-to-nearest float64 value of x (or x itself
    when err is None or 0).  Works on the quantum of `fmt` at |r|, so it handles
    subnormals and overflow of the narrow format.
    """
    r = np.asarray(r, np.float64)
    if mode == "rz" and err is None:
        return _toward_zero(r, fmt)
    out = r.copy()
    fin = np.isfinite(r) & (r != 0)
    if not fin.any():
        return out
    rv = r[fin]
    neg = rv < 0
    a = np.abs(rv)
    if err is None:
        e = np.zeros(a.shape, np.int8)
    else:
        e = np.sign(np.broadcast_to(err, r.shape)[fin]).astype(np.int8)
        e = np.where(neg, -e, e)  # the error's sign relative to the magnitude
    _, k = np.frexp(a)
    expo = np.maximum(k - 1, fmt.emin)
    ulp = np.ldexp(1.0, expo - fmt.man)
    q = a / ulp
    n = np.floor(q)
    frac = q - n
    if mode == "rn":
        odd = np.fmod(n, 2) == 1
        up = (frac > 0.5) | ((frac == 0.5) & ((e > 0) | ((e == 0) & odd)))
        down = np.zeros_like(up)
        toward_zero = np.zeros_like(up)
    else:
        away = {"rz": np.zeros_like(neg), "rm": neg, "rp": ~neg}[mode]
        up = away & ((frac > 0) | (e > 0))
        down = ~away & (frac == 0) & (e < 0)
        toward_zero = ~away
    mag = (n + up) * ulp
    if down.any():
        below = np.where((n == 2.0 ** fmt.man) & (expo > fmt.emin), ulp / 2, ulp)
        mag = np.where(down, mag - below, mag)
    over = mag > fmt.max_value
    if over.any():
        mag = np.where(over, np.where(toward_zero, fmt.max_value, np.inf), mag)
    out[fin] = np.where(neg, -mag, mag)
    return out


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    """f32 values rounded to nearest even into f16 (overflow: infinity; a NaN the canonical 0x7FFF, as
    cvt gives it), by integer operations on the bits and one f32 addition (NumPy's own cast takes
    microseconds a value where results are subnormal).

    The magnitude (at most 2^16, beyond which every number rounds to infinity) plus the power of two
    `scale` = 2^(e + 13), e its exponent but at least f16's smallest, -14, is rounded by the addition
    where f16 rounds it: the sum's ulp is 2^(e - 10), f16's quantum at e.  The sum's bits less scale's
    are then the magnitude's f16 significand (the implicit bit included where e > -14, 2^11 where it
    rounded up to 2^(e + 1)), to which (e + 14) << 10 adds the exponent field."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    magnitude = np.minimum(bits & np.uint32(0x7FFFFFFF), np.uint32(0x47800000))
    scale = np.maximum(magnitude & np.uint32(0x7F800000), np.uint32((127 - 14) << 23))
    scale += np.uint32(13 << 23)
    half = (magnitude.view(np.float32) + scale.view(np.float32)).view(np.uint32)
    half -= scale
    half += (scale >> np.uint32(13)) - np.uint32((127 - 1) << 10)
    half |= (bits >> np.uint32(16)) & np.uint32(0x8000)
    half = half.astype(np.uint16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        half = np.where(nan, np.uint16(0x7FFF), half)
    return half.view(np.float16)


def _toward_zero(r: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Exact float64 values `r` rounded toward zero to `fmt`: the float64 significand bits below the
    format's cut off (below its smallest exponent, the multiple of its smallest quantum kept),
    magnitudes beyond its largest finite value clamped to it; zeros, infinities and NaNs kept."""
    flat = r.reshape(-1)
    cut = np.uint64((1 << (F64.man - fmt.man)) - 1)
    out = (flat.view(np.uint64) & ~cut).view(np.float64)
    magnitude = np.abs(flat)
    tiny = magnitude < 2.0 ** fmt.emin
    if tiny.any():
        small = flat[tiny]
        out[tiny] = np.copysign(small - np.fmod(small, 2.0 ** (fmt.emin - fmt.man)), small)
    over = magnitude > fmt.max_value
    if over.any():
        out = np.where(over & np.isfinite(flat), np.copysign(fmt.max_value, flat), out)
    return np.where(np.isnan(flat), flat, out).reshape(r.shape)


def round_fraction(x: Fraction, fmt: FloatFormat, mode: str) -> float:
    """Round an exact rational to `fmt` (result as a Python float; a zero keeps no sign)."""
    if x == 0:
        return 0.0
    neg = x < 0
    a = -x if neg else x
    num, den = a.numerator, a.denominator
    expo = num.bit_length() - den.bit_length()
    if (num << max(-expo, 0)) < (den << max(expo, 0)):
        expo -= 1
    away = (mode == "rp" and not neg) or (mode == "rm" and neg)
    toward_zero = mode != "rn" and not away
    if expo > fmt.emax:
        return math.copysign(fmt.max_value if toward_zero else math.inf, -1.0 if neg else 1.0)
    qe = max(expo, fmt.emin) - fmt.man
    if qe >= 0:
        den <<= qe
    else:
        num <<= -qe
    q, rem = divmod(num, den)
    if mode == "rn":
        q += 2 * rem > den or (2 * rem == den and q & 1)
    elif away and rem:
        q += 1
    if q == 1 << (fmt.man + 1) and qe == fmt.emax - fmt.man:
        value = fmt.max_value if toward_zero else math.inf
    else:
        value = math.ldexp(q, qe)
    return -value if neg else value


def exact_lanes(fn, *arrays: np.ndarray, fmt: FloatFormat, mode: str, fallback=None,
                zero=None) -> np.ndarray:
    """Round `fn(*lane values)`, an exact Fraction, to `fmt` lane by lane (float64 result).

    Where `fn` returns None the lane takes `fallback` (an array of results
    computed otherwise, e.g. IEEE arithmetic on infinities); an exact zero
    becomes `zero` (per lane, +0 by default).
    """
    shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
    cols = [np.broadcast_to(a, shape).ravel() for a in arrays]
    out = np.zeros(shape, np.float64).ravel() if fallback is None \
        else np.array(np.broadcast_to(fallback, shape), np.float64).ravel()
    zeros = np.broadcast_to(0.0 if zero is None else zero, shape).ravel()
    for i, vals in enumerate(zip(*cols)):
        exact = fn(*vals)
        if exact is not None:
            out[i] = zeros[i] if exact == 0 else round_fraction(exact, fmt, mode)
    return out.reshape(shape)


# ------------------------------------------------------------------ float32 ops

def flush(x):
    """`.ftz`: subnormal values become zeros of the same sign (float32 or float64)."""
    x = np.asarray(x)
    magnitude = np.abs(x)
    subnormal = (magnitude < np.finfo(x.dtype).tiny) & (magnitude != 0)
    if not np.count_nonzero(subnormal):
        return x
    return np.where(subnormal, np.copysign(x.dtype.type(0), x), x).astype(x.dtype)


def flush_format(x, fmt: FloatFormat):
    """`.ftz` of values of the narrow format `fmt` held as float64: those below its smallest normal
    number become zeros of the same sign."""
    x = np.asarray(x, np.float64)
    return np.where(np.abs(x) < math.ldexp(1.0, fmt.emin), np.copysign(0.0, x), x)


def saturate(x):
    """`.sat`: clamp to [0, 1], NaN to +0."""
    return np.where(np.isnan(x), x.dtype.type(0), np.clip(x, 0, 1)).astype(x.dtype)


def _directed_f32(r, err, mode):
    """Round float64 `r` (+ an error of sign `err`) to float32 in a directed mode."""
    return round_to_format(r, err, F32, mode).astype(np.float32)


def _f32_suspect(r):
    """float64 values whose rounding to float32 could depend on a tiny error:
    those exactly half way between two float32s, and those in the float32
    subnormal range."""
    bits = r.view(np.uint64)
    return ((bits & 0x1FFFFFFF) == 0x10000000) | (np.abs(r) < 2.0 ** -126)


def ieee_zero_sum(x, y, mode):
    """The signed zero IEEE gives for an exact zero sum x + y: under round-down
    -0 unless both addends are +0; otherwise +0 unless both are -0."""
    both_zero = (x == 0) & (y == 0)
    if mode == "rm":
        negative = ~both_zero | np.signbit(x) | np.signbit(y)
    else:
        negative = both_zero & np.signbit(x) & np.signbit(y)
    return np.where(negative, -0.0, 0.0)


def _sign_of_difference(x, y):
    """sign(x - y) from an exact comparison, as int8."""
    return np.where(x > y, 1, np.where(x < y, -1, 0)).astype(np.int8)


def _add_f32(a, b, mode):
    if mode == "rn":
        return a + b
    r, e = two_sum(np.asarray(a, np.float64), np.asarray(b, np.float64))
    out = _directed_f32(r, e, mode)
    return np.where(r == 0, ieee_zero_sum(a, b, mode), out).astype(np.float32)


def _mul_f32(a, b, mode):
    if mode == "rn":
        return a * b
    return _directed_f32(np.asarray(a, np.float64) * np.asarray(b, np.float64), None, mode)


def _fma_f32(a, b, c, mode):
    """a * b + c with a single rounding (the product is exact in float64)."""
    p = np.multiply(a, b, dtype=np.float64)
    c64 = np.asarray(c, np.float64)
    if mode != "rn":
        r, e = two_sum(p, c64)
        out = _directed_f32(r, e, mode)
        return np.where(r == 0, ieee_zero_sum(p, c64, mode), out).astype(np.float32)
    r = p + c64  # the exact sum rounded once to float64, which rounds to f32 as the sum itself does
    shape = r.shape  # but where `_f32_suspect` says it may not
    r = np.atleast_1d(r)
    out = r.astype(np.float32)
    suspect = _f32_suspect(r)
    if np.count_nonzero(suspect):
        rr, ee = two_sum(np.broadcast_to(p, r.shape)[suspect], np.broadcast_to(c64, r.shape)[suspect])
        out[suspect] = round_to_format(rr, ee, F32, "rn")
    return out.reshape(shape)


def _div_f32(a, b, mode):
    if mode == "rn":
        return a / b
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    q = a64 / b64
    p, pe = two_prod(q, b64)
    # a - p is exact (Sterbenz), so sign(a - q*b) = sign((a - p) - pe).
    err = _sign_of_difference(a64 - p, pe) * np.sign(b64).astype(np.int8)
    err = np.where(np.isfinite(q) & (q != 0), err, 0)
    return _directed_f32(q, err, mode)


def _sqrt_f32(a, mode):
    if mode == "rn":
        return np.sqrt(a)
    a64 = np.asarray(a, np.float64)
    r = np.sqrt(a64)
    p, pe = two_prod(r, r)
    err = np.where(np.isfinite(r) & (r > 0), _sign_of_difference(a64 - p, pe), 0)
    return _directed_f32(r, err, mode)


# ------------------------------------------------------------------ float64 ops

def _f64_exact(exact, ieee, *arrays, mode: str, zero=None) -> np.ndarray:
    """A float64 operation rounded in `mode` through exact rationals, lane by lane.

    `exact` maps Fractions to the exact result, or to None where the IEEE
    result `ieee(*arrays)` applies (a zero divisor, a negative square root);
    lanes with an infinite or NaN operand always take the IEEE result.
    """
    arrays = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in arrays))
    with np.errstate(all="ignore"):
        fallback = ieee(*arrays)

    def lane(*vals):
        if not all(math.isfinite(v) for v in vals):
            return None
        return exact(*(Fraction(v) for v in vals))
    return exact_lanes(lane, *arrays, fmt=F64, mode=mode, fallback=fallback, zero=zero)


def _sqrt_fraction(a: Fraction) -> Fraction:
    """A rational with the same rounding as sqrt(a) in any format of <= 53 bits.

    Scales a by 4**k so that the integer square root has at least 64 bits;
    a root that is not exact gets a half added (a sticky bit), which keeps it
    strictly between the same two neighbouring integers as the true root.
    """
    k = max(0, 64 - (a.numerator.bit_length() - a.denominator.bit_length()) // 2)
    scaled = a * 4 ** k
    v = scaled.numerator // scaled.denominator
    root = math.isqrt(v)
    if scaled.denominator == 1 and root * root == v:
        return Fraction(root, 2 ** k)
    return Fraction(2 * root + 1, 2 ** (k + 1))


def _fma_ieee(a, b, c):
    """IEEE fma for infinite and NaN operands (a finite product plus an infinity is that infinity)."""
    return np.where(np.isfinite(a) & np.isfinite(b) & np.isinf(c), c, a * b + c)


def _add_f64(a, b, mode):
    if mode == "rn":
        return a + b
    return _f64_exact(lambda x, y: x + y, np.add, a, b, mode=mode, zero=ieee_zero_sum(a, b, mode))


def _mul_f64(a, b, mode):
    if mode == "rn":
        return a * b
    with np.errstate(all="ignore"):
        zero = np.copysign(0.0, np.asarray(a) * np.asarray(b))
    return _f64_exact(lambda x, y: x * y, np.multiply, a, b, mode=mode, zero=zero)


def _div_f64(a, b, mode):
    if mode == "rn":
        return a / b
    with np.errstate(all="ignore"):
        zero = np.copysign(0.0, np.asarray(a) * np.asarray(b))
    return _f64_exact(lambda x, y: x / y if y else None, np.divide, a, b, mode=mode, zero=zero)


def _sqrt_f64(a, mode):
    if mode == "rn":
        return np.sqrt(a)
    return _f64_exact(lambda x: _sqrt_fraction(x) if x > 0 else None, np.sqrt, a, mode=mode)


def _fma_f64(a, b, c, mode):
    """a * b + c with a single rounding for float64."""
    a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                  np.asarray(c, np.float64))
    if mode != "rn":
        with np.errstate(all="ignore"):
            zero = ieee_zero_sum(a * b, c, mode)
        return _f64_exact(lambda x, y, z: x * y + z, _fma_ieee, a, b, c, mode=mode, zero=zero)
    with np.errstate(all="ignore"):
        prod = np.abs(a * b)
        finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
        trivial = finite & ((a == 0) | (b == 0))
        safe = (finite & ~trivial & (prod > 2.0 ** -900) & (prod < 2.0 ** 1000)
                & (np.abs(a) < 2.0 ** 995) & (np.abs(b) < 2.0 ** 995) & (np.abs(c) < 2.0 ** 1000))
        out = _fma_ieee(a, b, c)  # right for the trivial lanes (an exact zero product) and specials
        uh, ul = two_prod(a, b)
        th, tl = two_sum(c, uh)
        s, e = two_sum(tl, ul)
        # Round s + e to odd: if inexact and s is even, step to the neighbour towards e.
        even = (s.view(np.int64) & 1) == 0
        step = (e != 0) & even
        v = np.where(step, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
        out = np.where(safe, th + v, out)
    rest = finite & ~trivial & ~safe
    if rest.any():
        out[rest] = _f64_exact(lambda x, y, z: x * y + z, _fma_ieee, a[rest], b[rest], c[rest], mode="rn")
    return out


# ------------------------------------------------------------------ the operations, with the GPU's NaNs

def _with_nans(raw, opcode: str):
    """An arithmetic operation `raw(*operands, mode)` whose NaN results get the GPU's bits (`opcode`
    says which NaN operand it passes on; an f32 result passes none on, so its operands are not looked at)."""
    def op(*args):
        *operands, mode = args
        with np.errstate(all="ignore"):
            out = raw(*operands, mode)
            if getattr(out, "dtype", None) == np.float32:
                return arithmetic_nan(out)
            return arithmetic_nan(out, *nan_precedence(opcode, *operands))
    op.__doc__ = raw.__doc__
    return op


add_f32, mul_f32, fma_f32 = _with_nans(_add_f32, "add"), _with_nans(_mul_f32, "mul"), _with_nans(_fma_f32, "fma")
div_f32, sqrt_f32 = _with_nans(_div_f32, "div"), _with_nans(_sqrt_f32, "sqrt")
add_f64, mul_f64, fma_f64 = _with_nans(_add_f64, "add"), _with_nans(_mul_f64, "mul"), _with_nans(_fma_f64, "fma")
div_f64, sqrt_f64 = _with_nans(_div_f64, "div"), _with_nans(_sqrt_f64, "sqrt")


def subtract(add):
    """a - b from an `add` of the format: a + (-b), whose NaN is then the one of a and b themselves."""
    def sub(a, b, mode):
        with np.errstate(all="ignore"):
            return arithmetic_nan(add(a, -np.asarray(b), mode), *nan_precedence("sub", a, b))
    return sub


def extreme(larger: bool, nan_wins: bool, xorsign_abs: bool = False):
    """PTX's max (larger) or min of two floats; `nan_wins` is the `.NaN` modifier (any NaN operand
    gives the canonical NaN), else a NaN operand is ignored; `.xorsign.abs`: of the operands'
    magnitudes, with the exclusive or of their signs (a NaN result keeps none)."""
    fn = _larger_or_smaller(larger)
    if nan_wins:
        plain_fn = fn

        def fn(a, b):
            out = plain_fn(a, b)
            return np.where(np.isnan(a) | np.isnan(b), canonical_nan(np.asarray(out).dtype), out)
    if not xorsign_abs:
        return fn

    def with_sign(a, b):
        negative = np.signbit(a) ^ np.signbit(b)
        out = np.asarray(fn(np.abs(a), np.abs(b)))
        return np.where(negative & ~np.isnan(out), -out, out)
    return with_sign


def _larger_or_smaller(larger: bool):
    """`constants.maximum` (larger) or `minimum` of floats, by NumPy's where no operand is NaN: its
    choice is theirs but for equal zeros, whose sign is then fixed (max's -0.0 only where both are -0.0,
    min's where either is; a zero result with a nonzero operand has the zero's own sign either way)."""
    general = maximum if larger else minimum
    pick = np.maximum if larger else np.minimum
    both = np.logical_and if larger else np.logical_or

    def extreme(a, b):
        out = pick(a, b)
        if np.count_nonzero(np.isnan(out)):  # (NumPy's gives the NaN)
            return general(a, b)
        zero = out == 0
        if np.count_nonzero(zero):
            out = np.where(zero, np.where(both(np.signbit(a), np.signbit(b)), -out.dtype.type(0), out.dtype.type(0)), out)
        return out[()]
    return extreme


def approximate(fn):
    """An `.approx` function computed in float64 and rounded to the argument's type, its NaNs the
    GPU's."""
    def apply(x):
        x = np.asarray(x)
        with np.errstate(all="ignore"):
            return arithmetic_nan(fn(x.astype(np.float64)).astype(x.dtype), x)
    return apply


# sin.approx.f32 and cos.approx.f32 are FMUL.RZ by the f32 nearest 1/(2 pi), then MUFU.SIN / COS of
# that many turns (SASS of ptxas 12 and 13); the unit's error is within 2^-20.5 of sin(2 pi t).
_TURN = float(np.array(0x3E22F983, np.uint32).view(np.float32))


def _of_turns(fn):
    """`fn` of f32 values (given and returned as float64) reduced as sin.approx and cos.approx do."""
    def apply(x):
        turns = round_to_format(np.asarray(x, np.float64) * _TURN, None, F32, "rz")  # the product is exact
        with np.errstate(invalid="ignore"):
            return fn(2 * np.pi * np.fmod(turns, 1.0))  # fmod keeps the sign: sin(-2^31) is -0.0
    return apply


sin_approx, cos_approx = _of_turns(np.sin), _of_turns(np.cos)


def atomic_add(old, x):
    """What atom.add.f32 and .f64 store: f32 flushes subnormal inputs and results to sign-preserving
    zero (PTX ISA, atom), a NaN result being the canonical one; f64 passes a NaN operand through
    unquieted, `x`'s before `old`'s (an H100 stores 0x7FF0000000000001 for that old value plus -1.0,
    and x = 0xFFF8000000000ABC over it), and makes the arithmetic NaN of numbers."""
    if np.asarray(old).dtype == np.float32:
        old, x = flush(old), flush(x)
        return flush(add_f32(old, x, "rn"))
    with np.errstate(all="ignore"):
        total = add_f64(old, x, "rn")
    return np.where(np.isnan(x), x, np.where(np.isnan(old), old, total))


# ------------------------------------------------------------------ integers

def div_trunc(a, b):
    """C division (truncating toward zero); b must be non-zero."""
    if np.asarray(a).dtype.kind == "u":
        return a // b
    rem = np.fmod(a, b)
    return (a - rem) // b


def rem_trunc(a, b):
    """C remainder (sign of the dividend); b must be non-zero."""
    return np.fmod(a, b)


_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def mul_hi_u64(a, b):
    """High 64 bits of the 128-bit product of two uint64 arrays."""
    alo, ahi = a & _M32, a >> _S32
    blo, bhi = b & _M32, b >> _S32
    ll = alo * blo
    lh = alo * bhi
    hl = ahi * blo
    mid = (ll >> _S32) + (lh & _M32) + (hl & _M32)
    return ahi * bhi + (lh >> _S32) + (hl >> _S32) + (mid >> _S32)


def mul_hi_s64(a, b):
    """High 64 bits of the 128-bit product of two int64 arrays."""
    ua, ub = np.asarray(a).view(np.uint64), np.asarray(b).view(np.uint64)
    hi = mul_hi_u64(ua, ub)
    hi = hi - np.where(np.asarray(a) < 0, ub, np.uint64(0)) - np.where(np.asarray(b) < 0, ua, np.uint64(0))
    return hi.view(np.int64)


# ------------------------------------------------------------------ tensor cores

@dataclass(frozen=True)
class TensorCoreModel:
    """How one generation of tensor cores sums `c + sum_k a_k * b_k` into f32.

    The k-sum is split into blocks of `block[input format]` products.  Each
    block is one fused multi-term addition: every product is exact; the
    products and the accumulator c are aligned to the largest exponent E among
    them (a product's exponent is the sum of its factors' exponents, with
    subnormal factors at the format's minimum exponent, so a product's
    significand lies in [0, 4)); each aligned term keeps `kept[input format]`
    fraction bits below 2**E (23 + extra bits: more than f32 has; fewer for
    Hopper's 8-bit floats) and is truncated (toward zero) below that; the
    truncated terms are added exactly and the sum is rounded once toward zero
    to f32, or to `fraction[input format]` fraction bits where that is fewer
    (subnormal results kept, an overflow gives an infinity).  The result is
    the c of the next block.  A NaN operand, an infinite product with a zero,
    or infinities of both signs give NaN; otherwise an infinite term gives
    that infinity.  A format missing from `block` is not one this generation
    multiplies.  `mma_sync_as`: input formats whose mma.sync the hardware runs
    as products of another format that holds their values exactly
    (`split_mma_sync`; wgmma keeps the format's own blocks and bits).
    """

    name: str
    block: dict  # input format name -> products summed in one fused step
    kept: dict  # input format name -> fraction bits an aligned term keeps below 2**E
    fraction: dict  # input format name -> fraction bits of each block's result (23: f32's)
    mma_sync_as: dict = field(default_factory=dict)  # input format name -> the one mma.sync sums as


TENSOR_CORE_MODELS = {
    # H100, H200 (sm_90): 16 products (8 for tf32) per step, 2 extra bits; 8-bit floats 32 products a step,
    # terms and results kept to 13 fraction bits (Khattak and Mikaitis's H100 model: fma 32, neab -10, the
    # output significand 23 - 10 bits; DeepSeek-V3's report measured "around 14 bits" of accumulation).
    # Its mma.sync of 8-bit floats is two f16 products and an f32 add (split_mma_sync), as ptxas writes it.
    "hopper": TensorCoreModel("hopper", {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32},
                              {"f16": 25, "bf16": 25, "tf32": 25, "e4m3": 13, "e5m2": 13},
                              {"f16": 23, "bf16": 23, "tf32": 23, "e4m3": 13, "e5m2": 13},
                              {"e4m3": "f16", "e5m2": "f16"}),
    # A100 (sm_80): 8 products (4 for tf32) per step, 1 extra bit; no 8-bit floats.
    "ampere": TensorCoreModel("ampere", {"f16": 8, "bf16": 8, "tf32": 4}, {"f16": 24, "bf16": 24, "tf32": 24},
                              {"f16": 23, "bf16": 23, "tf32": 23}),
}

TF32 = FloatFormat("tf32", 10, -126, 127)
E4M3 = FloatFormat("e4m3", 3, -6, 8)  # (its largest value is 448: S.1111.111 is NaN)
E5M2 = FloatFormat("e5m2", 2, -14, 15)
_INPUT_FORMATS = {"f16": F16, "bf16": BF16, "tf32": TF32, "e4m3": E4M3, "e5m2": E5M2}


def tensor_core_dot(a: np.ndarray, b: np.ndarray, c: np.ndarray, informat: str,
                    model: TensorCoreModel, b_informat: str | None = None) -> np.ndarray:
    """D = C + A B as the tensor cores compute it, for a batch of matrices.

    a: (..., M, K) and b: (..., K, N) hold the exact values (float64, or float32
    where that holds them) of the f16/bf16/tf32/e4m3/e5m2 inputs (b's format `b_informat`, by default a's:
    e4m3 may meet e5m2, whose blocks and kept bits are the same); c: (..., M, N)
    float32.  Returns float32 (..., M, N).
    """
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], np.shape(c)[:-2])
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    a = np.broadcast_to(a, batch + a.shape[-2:]).reshape(-1, m, k)
    b = np.broadcast_to(b, batch + b.shape[-2:]).reshape(-1, k, n)
    acc = np.broadcast_to(np.asarray(c, np.float32), batch + (m, n)).reshape(-1, m, n)
    order = dot_layout(len(acc), m, n)
    return arranged_dot(arrange(a, "bik", order), arrange(b, "bkj", order), acc, informat, model,
                        b_informat).reshape(batch + (m, n))


def split_mma_sync(a_k: np.ndarray, b_k: np.ndarray, c: np.ndarray, informat: str,
                   model: TensorCoreModel) -> np.ndarray:
    """A chain of mma.sync m16n8k32 of 8-bit floats (`informat` in model.mma_sync_as) as Hopper runs each
    instruction: ptxas converts the codes to f16 (F2FP.F16.E4M3.UNPACK_B: f16 holds every e4m3 and e5m2
    value) and issues two HMMA.16816.F32 - from zero, the products of the k with k % 4 in {0, 1} (each
    8-bit register's low codes), then into that sum those of {2, 3} - and adds the result to C with an
    f32 add (FADD: to nearest even), as the SASS of the instruction shows.  Operands as arranged_dot
    takes them (k first, K a multiple of 32: one instruction after another)."""
    half = model.mma_sync_as[informat]
    acc = np.asarray(c, np.float32)
    for start in range(0, len(a_k), 32):
        k = np.arange(start, start + 32)
        low, high = k[k % 4 < 2], k[k % 4 >= 2]
        part = arranged_dot(a_k[low], b_k[low], np.zeros_like(acc), half, model)
        part = arranged_dot(a_k[high], b_k[high], part, half, model)
        with np.errstate(all="ignore"):
            acc = acc + part
    return acc


def arranged_dot(a_k: np.ndarray, b_k: np.ndarray, c: np.ndarray, informat: str, model: TensorCoreModel,
                 b_informat: str | None = None) -> np.ndarray:
    """tensor_core_dot of operands laid out as `arrange` lays them out for c's (B, M, N) (what a caller
    that gathers them from registers produces in one step): c (B, M, N) float32, returns float32
    (B, M, N)."""
    if informat not in model.block:
        raise ValueError(f"the {model.name} tensor cores do not multiply {informat}")
    fmt, b_fmt = _INPUT_FORMATS[informat], _INPUT_FORMATS[b_informat or informat]
    size = model.block[informat]
    out_format = F32 if model.fraction[informat] == F32.man else \
        FloatFormat(f"f32 to {model.fraction[informat]} bits", model.fraction[informat], F32.emin, F32.emax)
    k = len(a_k)
    if k % size:
        raise ValueError(f"k = {k} is not a multiple of the {model.name} block of {size}")
    count, m, n = c.shape
    order = dot_layout(count, m, n)
    # the products in float32 where they are exact there (significands of at most 12 bits, exponents
    # far from float32's limits); terms scaled to below 2**(kept + 2) stay exact too
    work = np.float32 if {informat, b_informat or informat} <= _EXACT_IN_F32 else np.float64
    a_k, b_k = a_k.astype(work, copy=False), b_k.astype(work, copy=False)
    into, back = ["bij".index(x) for x in order], [order.index(x) for x in "bij"]
    out = np.empty_like(c)
    chunk = max(size, min(k, K_AT_ONCE) // size * size)
    step = max(1, TERMS_AT_ONCE // (m * chunk * n))
    with np.errstate(all="ignore"):
        for first in range(0, count, step):
            part = slice(first, first + step)
            batch = (slice(None),) * (1 + order.index("b")) + (part,)  # the part's matrices in a_k, b_k
            result = np.ascontiguousarray(np.transpose(c[part], into))
            for start in range(0, k, chunk):
                result = _dot_part(a_k[start:start + chunk][batch], b_k[start:start + chunk][batch], result, size,
                                   (fmt.emin, b_fmt.emin), model.kept[informat], out_format)
            out[part] = np.transpose(result, back)
    return out


def round_half_accumulator(d: np.ndarray) -> np.ndarray:
    """An f16 accumulator's D (float32 values): the model's f32 result of the instruction rounded once to
    nearest even into f16 (overflow: infinity).  How the tensor cores round into f16 accumulators is not
    documented; this is an assumption (docs/tensor_cores.md)."""
    return round_to_format(np.asarray(d, np.float64), None, F16, "rn").astype(np.float32)


def fma_dot(a: np.ndarray, b: np.ndarray, c: np.ndarray, mode: str) -> np.ndarray:
    """D = C + A B of f64 matrices (..., M, K) and (..., K, N) as mma .f64 computes it: PTX gives each
    multiply-add the precision of fma.f64 (rounded in `mode`); the order is not documented, this takes k
    in ascending order, d = fma(a_k, b_k, d) from d = c."""
    acc = np.asarray(c, np.float64)
    for k in range(a.shape[-1]):
        acc = fma_f64(a[..., :, k:k + 1], b[..., k:k + 1, :], acc, mode)
    return acc


#: The most terms (products) worked on at once: a batch of many matrices goes in parts, and a long K (a
#: chain of mma.sync, machine.fusion_table) K_AT_ONCE at a time, so that the parts keep many matrices
#: (the longest axis of a part is innermost in NumPy's loops; the parts cut the batch's axis, which may
#: be that one: 2^19 terms gave attention's 64-warp families inner loops of 32 and took 1.5 times as
#: long on sm_80).  K_AT_ONCE 8 is one Ampere block of f16 products: the products and exponent sums of 16
#: k steps of Triton's attention outgrew the CPU's caches (arranged_dot on its sm_80 operands: 6-24%
#: faster than at 16, three rounds on the 2-core machine of docs/emulator.md; Hopper's blocks of 16 go
#: 16 at a time either way).
TERMS_AT_ONCE = 1 << 21
K_AT_ONCE = 8


#: Input formats whose products are exact in float32.
_EXACT_IN_F32 = frozenset({"f16", "e4m3", "e5m2"})
_NONE = np.int16(-16000)  # the exponent of a zero or non-finite term: any sum with it is below _LIVE
_LIVE = -10000  # exponent sums of live terms are above this; below it, none (zeros, non-finite values)


def _dot_part(a_k, b_k, c, size: int, emins: tuple[int, int], kept: int, out_format: FloatFormat) -> np.ndarray:
    """c + a @ b in fused blocks of `size` products (see TensorCoreModel), each block's sum the c of
    the next: a_k, b_k and c laid out as `arrange` lays them out (c without the k axis).

    All K products of every element are formed at once, in one broadcasting pass (in the
    operands' precision, where they are exact), and so are the largest exponent sums of every
    block; the blocks then go one after the other (_block_sum)."""
    shape = c.shape
    k = len(a_k)
    narrow = a_k.dtype == np.float32  # exponent sums of f16 and 8-bit floats fit int8 (_NARROW_NONE)
    exponent_sums = _outer(np.add, _term_exponents(a_k, emins[0], narrow), _term_exponents(b_k, emins[1], narrow),
                           _scratch(k * c.size, np.int8 if narrow else np.int16, "sums").reshape((k,) + shape))
    # the largest of each block: (blocks, ...), at most _LIVE where no term is live
    tops = exponent_sums.reshape((k // size, size) + shape).max(axis=1)
    if narrow:
        tops = tops.astype(np.int16)
        np.putmask(tops, tops < _NARROW_LIVE, _NONE)
    products = _outer(np.multiply, a_k, b_k, _scratch(k * c.size, a_k.dtype, "products").reshape((k,) + shape))
    finite = bool(np.isfinite(a_k).all() and np.isfinite(b_k).all())
    acc = c
    for block, start in enumerate(range(0, k, size)):
        part = slice(start, start + size)
        acc = _block_sum(products[part], tops[block], acc, kept, out_format,
                         None if finite else (a_k[part], b_k[part]))
    return acc


#: The innermost loops _outer makes at least this long where it can (NumPy's per-loop cost then no longer
#: counts; a longer loop only tiles more of the operand).
INNER_LOOP = 512


def _outer(ufunc, x: np.ndarray, y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """ufunc(x, y) into `out` (returned): x and y, 4-d, broadcast against each other, as arranged_dot's
    operands do (one of them lacks the axis before the last, and both have the last).  Where the last
    axis is shorter than INNER_LOOP, NumPy's loops over it are short; the operand that lacks the axis
    before it is then repeated T times along the last (a copy of T times its size, a fraction of the
    result's, T dividing that axis), and the result's two last axes read as (n / T, T * last): loops of
    T times the length, the same elements."""
    if x.shape[-2] != 1:
        x, y = y, x  # (ufunc is commutative: add, multiply)
    n, last = out.shape[-2:]
    repeat = max((t for t in range(1, n + 1) if n % t == 0 and t * last <= INNER_LOOP), default=1)
    if x.shape[-2] != 1 or y.shape[-2] != n or x.shape[-1] != last or y.shape[-1] != last or repeat == 1:
        return ufunc(x, y, out=out)
    wide = np.broadcast_to(x, x.shape[:-2] + (repeat, last)).reshape(x.shape[:-2] + (1, repeat * last))
    lines = out.shape[:-2] + (n // repeat, repeat * last)
    ufunc(wide, y.reshape(y.shape[:-2] + lines[-2:]), out=out.reshape(lines))
    return out


def dot_layout(batch: int, m: int, n: int) -> str:
    """The order of the axes (b: batch, i: row, j: column) of a batch of products' elements as
    arranged_dot works on them: the longest last, so that NumPy's inner loops are long."""
    sizes = {"b": batch, "i": m, "j": n}
    last = max("bij", key=lambda x: sizes[x])
    return "".join(x for x in "bij" if x != last) + last


def arrange(x: np.ndarray, axes: str, order: str) -> np.ndarray:
    """x, whose axes are named by `axes` (k among them), as a contiguous array (k, *order) with a unit
    axis where x has none of `order`'s: an operand of arranged_dot."""
    present = "k" + "".join(name for name in order if name in axes)
    arranged = np.ascontiguousarray(np.transpose(x, [axes.index(name) for name in present]))
    return arranged.reshape(arranged.shape[:1] + tuple(x.shape[axes.index(name)] if name in axes else 1
                                                        for name in order))


def _block_sum(products, top, c, kept: int, out_format: FloatFormat, factors) -> np.ndarray:
    """One fused block: c float32 + the sum over its first axis of `products` (the exact products
    a b in `work` precision; scaled here in place), the terms kept to `kept` fraction bits below the
    largest exponent, the sum rounded toward zero to `out_format`.

    `top`: the largest exponent sum of a term (that of a plus that of b, each at least its
    format's emin; at most _LIVE where every term is zero or not finite: those do not count).  c
    counts too, with its exponent (at least f32's emin).  Each term is scaled by the power of two
    that puts the kept bits above the point (in `work` precision, where that is exact) and
    truncated to an integer of at most kept + 2 bits, which int32 sums exactly.  `factors`: None
    where every a and b is finite, else (a, b) of the block, whose non-finite products set their
    elements (_tensor_core_specials).  The per-element arrays it works in are _scratch's; the result
    is a new array."""
    assert len(products) << (kept + 2) <= 1 << 31, "the kept terms of a block overflow int32"
    shape = c.shape
    c_top = _F32_EXPONENTS.take(_high_halves(c), out=_scratch(c.size, np.int16, "c top").reshape(shape),
                                 mode="clip")
    # (a zero's is f32's emin here: no matter where a term's is above)
    c_special = c_top.min() == _NOT_FINITE
    if top.min() < F32.emin:
        np.putmask(c_top, c == 0, _NONE)
    scale = _scales(kept).take(np.maximum(top, c_top, out=c_top).view(np.uint16),
                               out=_scratch(c.size, np.float64, "scale").reshape(shape), mode="clip")
    tiny = scale.max() >= 2.0 ** 127  # a live top below kept - 126: the sum may be tiny
    # (scales beyond float32's range, where a product is float32, are those of blocks of zero products:
    # a live product's exponent is at least twice its format's emin, and f32 work holds f16 and 8-bit
    # floats only; they are cut to its range, so that the zeros stay zeros)
    clip = tiny and products.dtype == np.float32
    products *= (np.minimum(scale, 2.0 ** 127) if clip else scale).astype(products.dtype)  # exact: powers of 2
    total = np.multiply(c, scale, out=_scratch(c.size, np.float64, "total").reshape(shape))
    np.trunc(total, out=total)
    total += np.add.reduce(products, axis=0, dtype=np.int32)  # each term truncated toward zero, summed exactly
    total /= scale                                             # exact: fewer than 2**53 units
    if tiny:
        out = round_to_format(total, None, out_format, "rz")
        out = np.where(np.abs(total) >= 2.0 ** 128, np.copysign(np.inf, total), out).astype(np.float32)
    else:  # normal or beyond: dropping the bits below the format's is rounding toward zero; f32 holds the
        # largest value of the format below 2**128 exactly and makes 2**128 and above infinite
        bits = total.view(np.uint64)
        np.bitwise_and(bits, ~np.uint64((1 << (F64.man - out_format.man)) - 1), out=bits)
        out = total.astype(np.float32)
    if factors is None and not c_special:
        return out
    terms = products[:0] if factors is None else factors[0] * factors[1]  # finite products: none special
    return _tensor_core_specials(terms, c, out)


_NOT_FINITE = np.int16(_NONE - 1)  # the exponent of an infinite or NaN accumulator


def _high_halves(x: np.ndarray) -> np.ndarray:
    """The high 16 bits of every float32 or float64 element (sign, exponent and the fraction's first bits),
    as uint16."""
    halves = x.view(np.uint16)
    return halves[..., x.itemsize // 2 - 1::x.itemsize // 2]  # little-endian: the last half of each


@functools.cache
def _scales(kept: int) -> np.ndarray:
    """2**(kept - top) for the largest exponent `top` of a block (int16, by its bits as uint16), float64;
    2**kept where nothing is live (top at most _LIVE)."""
    tops = np.arange(1 << 16).astype(np.uint16).view(np.int16).astype(np.int64)
    return np.ldexp(1.0, kept - np.where((tops > _LIVE) & (tops < 1024), tops, 0))


#: Exponents as int8 (`narrow`: those of f16 and the 8-bit floats, from -24 to 15): a zero or non-finite
#: term's, and any sum with one, is below _NARROW_LIVE, and two of them sum to -128 exactly.
_NARROW_NONE = np.int8(-64)
_NARROW_LIVE = -48


@functools.cache
def _exponent_table(dtype: str, emin: int, narrow: bool) -> np.ndarray:
    """The exponents (at least emin) of float32 or float64 values by their high 16 bits (_high_halves)
    as int16, or int8 where `narrow`: _NONE (_NARROW_NONE) for a zero exponent field (zeros: inputs are
    never subnormal in the work precision) and for infinities and NaNs."""
    info = np.finfo(dtype)
    width = info.bits - 1 - info.nmant
    field = (np.arange(1 << 16) >> (15 - width)) & ((1 << width) - 1)
    bias = info.maxexp - 1
    live = (field != 0) & (field != (1 << width) - 1)
    if narrow:  # (exponents beyond f16's range are never looked up: they are clipped to int8's)
        return np.where(live, np.clip(field - bias, emin, 16), _NARROW_NONE).astype(np.int8)
    return np.where(live, np.maximum(field - bias, emin), _NONE).astype(np.int16)


#: The exponent of an f32 accumulator (at least f32's emin; subnormals are f32's emin) by its high 16
#: bits; the infinities and NaNs _NOT_FINITE (zeros are set apart by value).
_F32_EXPONENTS = np.where((np.arange(1 << 16) >> 7) & 0xFF == 0xFF, _NOT_FINITE,
                          np.maximum(((np.arange(1 << 16) >> 7) & 0xFF) - 127, F32.emin)).astype(np.int16)


def _term_exponents(x: np.ndarray, emin: int, narrow: bool) -> np.ndarray:
    """The exponents (at least emin) of float32 or float64 values as int16 (int8 where `narrow`), _NONE
    (_NARROW_NONE) for zeros and non-finite ones."""
    return _exponent_table(x.dtype.str, emin, narrow).take(_high_halves(x))


_SCRATCH: dict[tuple[np.dtype, str], np.ndarray] = {}


def _scratch(count: int, dtype, use: str) -> np.ndarray:
    """`count` elements of a buffer kept from call to call for one `use` (fresh arrays of a few
    hundred KiB cost the C library's allocator new pages each time, more than the arithmetic done in
    them)."""
    key = (np.dtype(dtype), use)
    buffer = _SCRATCH.get(key)
    if buffer is None or len(buffer) < count:
        buffer = _SCRATCH[key] = np.empty(count, key[0])
    return buffer[:count]


def _tensor_core_specials(terms, c64, out):
    """Infinities and NaNs of one block, whose products are `terms` (k first; NaN is the canonical
    0x7FFFFFFF)."""
    bad = ~np.isfinite(terms)
    c_bad = ~np.isfinite(c64)
    if not (bad.any() or c_bad.any()):
        return out
    pos = (terms == np.inf).any(axis=0) | (c64 == np.inf)
    neg = (terms == -np.inf).any(axis=0) | (c64 == -np.inf)
    nan = np.isnan(terms).any(axis=0) | np.isnan(c64) | (pos & neg)
    out = np.where(pos, np.float32(np.inf), np.where(neg, np.float32(-np.inf), out))
    return np.where(nan, np.array(0x7FFFFFFF, np.uint32).view(np.float32), out).astype(np.float32)


def tf32_value(bits: np.ndarray) -> np.ndarray:
    """The float64 value a tensor core reads from a .tf32 operand register: the
    f32 bit pattern with its 13 low significand bits ignored."""
    return (np.asarray(bits, np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def round_to_tf32(x: np.ndarray, mode: str) -> np.ndarray:
    """f32 values rounded to tf32 (10 significand bits) as f32 bit patterns (uint32).

    mode: 'rna' (nearest, ties away from zero), 'rn' (ties to even) or 'rz'.
    NaN stays NaN (0x7FFFFFFF) and infinities stay infinite; values beyond the
    largest tf32 round to infinity except under 'rz'.
    """
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    low = bits & np.uint64(0x1FFF)
    keep = bits - low
    if mode == "rz":
        up = np.zeros(bits.shape, bool)
    elif mode == "rna":
        up = low >= np.uint64(0x1000)
    else:
        odd = (keep >> np.uint64(13)) & np.uint64(1)
        up = (low > np.uint64(0x1000)) | ((low == np.uint64(0x1000)) & (odd == 1))
    out = (keep + np.where(up, np.uint64(0x2000), np.uint64(0))).astype(np.uint32)
    special = ~np.isfinite(np.asarray(x, np.float32))
    out = np.where(special, bits.astype(np.uint32), out)
    return np.where(np.isnan(np.asarray(x, np.float32)), np.uint32(0x7FFFFFFF), out)
