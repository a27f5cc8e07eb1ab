# What values mean: every operator, comparison, cast and literal of the
# language on values of each dtype, defined once.  The checker evaluates
# constant expressions with it, the folding passes fold IR with it, argument
# binding converts scalars with it and the interpreter runs kernels with it, so
# the four cannot drift apart; each result is the one the GPU computes.
#
# Operations work on NumPy arrays (or NumPy scalars) of the operands' dtype:
# the interpreter applies them to whole tiles, `evaluate` to one constant.
#
#   integers   two's complement, wrapping on overflow; `div` truncates toward
#              zero and `rem` takes the dividend's sign (C).  A zero divisor
#              counts as 1 (`x / 0 == x`, `x % 0 == 0`, as in WGSL), so every
#              division has a value and none faults; the compiled code
#              substitutes the divisor the same way (irgen.nonzero_divisor).
#              `ceil_divide` (cdiv) is the quotient rounded up, exactly.
#   bits       `& | ^ ~` on the bits; `<<` and `>>` (arithmetic for signed
#              integers) by an amount read as unsigned, and an amount of the
#              width or more shifts every bit out (0, or copies of the sign for
#              a signed `>>`), as PTX's shl/shr do; `mulhi` is the high half of
#              the full product.
#   floats     IEEE, rounded to nearest even once per operation in the
#              operands' dtype (an f32 operation is never computed in double);
#              comparisons with NaN are false except `ne`; `min`/`max` ignore
#              a NaN operand (NaN only when both are: b's, as arithmetic gives
#              it) and order -0.0 below +0.0, as PTX's min and max do; `abs` and `-` change only the sign bit;
#              `rem` is C's fmod: exact, with the dividend's sign.
#   NaN bits   those the GPU gives (`arithmetic_nan`, below): every f32 result
#              that is NaN is the canonical NaN 0x7FFFFFFF (f16 and bf16 ones
#              0x7FFF); an f64 result keeps the payload of a NaN operand,
#              quieted (which one where several are: `NAN_PRECEDENCE`), and a
#              NaN made of numbers is 0xFFF8000000000000.
#              Moves (select, loads, stores, bitcast) keep every bit.
#   casts      int -> int keeps the low bits; float -> int truncates toward
#              zero and saturates at the integer's range, NaN -> 0 (cvt.rzi,
#              whose NaN is not always 0: `cvt_nan_integer`; the compiled code
#              selects 0 there); to a float rounds to nearest even; to bool is
#              `!= 0`.  To f16 or bf16: rounded once to nearest even, from any
#              dtype (an integer through f64, exactly but for an i64 past 2^53;
#              an f64 or integer through f32 rounded to odd, see
#              round_to_odd_f32).  To f8e4m3 or f8e5m2: to f32 first, then
#              rounded to nearest even and saturated as PTX's cvt.rn.satfinite
#              does (beyond the largest finite value, infinities too: the
#              largest finite value of the sign; NaN: the code 0x7F).  A NaN
#              cast to f16 or bf16, or from f16 to f32, becomes the canonical
#              NaN; bf16 -> f32 keeps the bits (it is a shift); f32 -> f64
#              keeps the payload, quieted, and f64 -> f32 its sign and top
#              payload bits, quieted (`narrow_nan`).
#   narrow     values of f16, bf16, f8e4m3 and f8e5m2 are held as f32 arrays
#   floats     whose elements the narrow format represents (`round_narrow`
#              makes them; an 8-bit NaN is the canonical f32 NaN 0x7FFFFFFF,
#              as the GPU's widening cvt gives it); an operation whose result
#              is 16-bit computes in f32 and rounds once to it (exact for
#              + - * / of two 16-bit values: f32 has more than twice their
#              precision, so the result is the one a 16-bit unit gives).
#   literals   an expression of literals alone is computed exactly (`exact`:
#              Python integers and doubles, C division), then takes the dtype
#              its context gives it, where it must be representable (`fits`).
#
# A compile-time constant of dtype d is a Python bool, int or float that d
# holds exactly: an f32 constant is a double whose value is an f32.
from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .types import COMPUTE_DTYPES, NARROW_FLOATS, DType

Constant = bool | int | float

NUMPY = {d: np.dtype(d.numpy_name) for d in COMPUTE_DTYPES}
NUMPY.update({d: np.dtype(np.float32) for d in NARROW_FLOATS})  # held as f32 (see the header)

# The language's binary operators as IR operations: opcode and attributes.
OPERATORS: dict[str, tuple[str, dict]] = {
    "+": ("add", {}), "-": ("sub", {}), "*": ("mul", {}), "/": ("div", {}), "%": ("rem", {}),
    "&&": ("and", {}), "||": ("or", {}), "&": ("and", {}), "|": ("or", {}), "^": ("xor", {}),
    "<<": ("shl", {}), ">>": ("shr", {}),
    **{op: ("cmp", {"pred": pred}) for op, pred in
       (("==", "eq"), ("!=", "ne"), ("<", "lt"), ("<=", "le"), (">", "gt"), (">=", "ge"))},
}
UNARY_OPERATORS = {"-": "neg", "!": "not", "~": "not"}
# The operations whose result on 16-bit floats is rounded to the 16-bit format (computed in f32); the
# others (neg, abs, min, max, select and moves) give one of their operands' values, which it holds.
ROUNDED_OPCODES = frozenset({"add", "sub", "mul", "div", "rem"})

# Binary floating-point formats: (bits of precision, largest exponent).
_FLOAT_FORMATS = {DType.F16: (11, 15), DType.BF16: (8, 127), DType.F32: (24, 127), DType.F64: (53, 1023)}


# ------------------------------------------------------------------ ranges
def int_range(dtype: DType) -> tuple[int, int]:
    """The smallest and largest value of an integer dtype."""
    bits = dtype.bits
    if dtype.is_signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def largest_float(dtype: DType) -> float:
    """The largest finite value of a float dtype."""
    if dtype.is_f8:
        return float(F8_FORMATS[dtype].magnitudes[-1])
    precision, emax = _FLOAT_FORMATS[dtype]
    return math.ldexp(2.0 - math.ldexp(1.0, 1 - precision), emax)


def _overflows(x: float, dtype: DType) -> bool:
    """Whether a finite double rounds to infinity in `dtype` (round to nearest even) - for an 8-bit
    float, saturates: lies beyond its largest finite value."""
    if dtype is DType.F64:
        return False
    if dtype.is_f8:
        return abs(x) > largest_float(dtype)
    precision, emax = _FLOAT_FORMATS[dtype]
    return abs(x) >= math.ldexp(2.0 - math.ldexp(1.0, -precision), emax)  # halfway past the largest


def fits(value: Constant, dtype: DType) -> bool:
    """Whether `dtype` can represent `value`: an integer within its range; a finite
    number that does not round to infinity (infinities and NaN fit every float)."""
    if dtype.is_int:
        low, high = int_range(dtype)
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if dtype.is_float:
        x = float(value)
        return not math.isfinite(x) or not _overflows(x, dtype)
    return isinstance(value, bool)


def range_text(dtype: DType) -> str:
    """The range of `dtype` for error messages: '-2147483648 to 2147483647'."""
    if dtype.is_int:
        low, high = int_range(dtype)
        return f"{low} to {high}"
    if dtype.is_float:
        return f"largest finite value {largest_float(dtype)!r}"
    return "true or false"


# ------------------------------------------------------------------ NaN bits
# Which NaN a float result that is NaN is, as the GPU gives it.  PTX ISA 9.7.3:
# "NaN payloads are supported for double-precision instructions ...
# Single-precision instructions return an unspecified NaN"; the CUDA
# programming guide (Floating-Point Standard): "The result of a single-precision
# floating-point operation involving one or more input NaNs is the quiet NaN of
# bit pattern 0x7fffffff" (an H100 gives it for `x - NaN`); `min`/`max` give
# "canonical NaN" when both inputs are NaN (f32), and conversions to f16 and
# bf16 give 0x7FFF.  An f64 NaN made of numbers (`inf - inf`, `fma(0, inf, 0)`,
# `sqrt(-1)`) is 0xFFF8000000000000 on an H100 (MADE_NAN_BITS); f64 min/max of
# two NaNs give b's, quieted, as add does (tools/probe_numerics.py measures
# both).  `arithmetic_nan` applies the rule to
# a computed result; the interpreter, the folding passes and the PTX emulator
# all go through it.
CANONICAL_NAN_BITS = {DType.F16: 0x7FFF, DType.BF16: 0x7FFF, DType.F32: 0x7FFF_FFFF}
MADE_NAN_BITS = {DType.F32: 0x7FFF_FFFF, DType.F64: 0xFFF8_0000_0000_0000}
_FLOAT_BITS = {np.dtype(np.float32): (np.uint32, DType.F32), np.dtype(np.float64): (np.uint64, DType.F64)}


def _nan_of(table: dict, dtype) -> np.floating:
    uint, name = _FLOAT_BITS[np.dtype(dtype)]
    return np.array(table[name], uint).view(dtype)[()]


def canonical_nan(dtype) -> np.floating:
    """The GPU's canonical NaN (what f32 arithmetic, and min/max of two NaNs, give) of the float32
    NumPy dtype; f64 has none (its NaNs keep payloads)."""
    return _nan_of(CANONICAL_NAN_BITS, dtype)


def made_nan(dtype) -> np.floating:
    """The NaN an arithmetic instruction makes of numbers (inf - inf, 0 * inf, sqrt(-1)), float32 or
    float64."""
    return _nan_of(MADE_NAN_BITS, dtype)


def _bits(x) -> tuple[np.ndarray, type]:
    x = np.asarray(x)
    uint = _FLOAT_BITS[x.dtype][0]
    return x.view(uint), uint


def quiet(x):
    """`x` (float32 or float64) with the quiet bit of each NaN set; other values keep their bits."""
    bits, uint = _bits(x)
    quiet_bit = uint(1 << (np.finfo(np.asarray(x).dtype).nmant - 1))
    return np.where(np.isnan(x), bits | quiet_bit, bits).astype(uint).view(np.asarray(x).dtype)[()]


def narrow_nan(x):
    """The f32 NaNs that cvt.rn.f32.f64 makes of f64 NaNs `x`: the sign and the top 22 bits of the
    payload kept, the quiet bit set (an H100 gives 0x7FE00000 for 0x7FF4000000000000).  Other values
    are rounded to nearest even."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        rounded = x.astype(np.float32)
    bits = x.view(np.uint64)
    kept = (((bits >> np.uint64(32)) & np.uint64(0x8000_0000))                    # the sign
            | np.uint64(0x7FC0_0000) | ((bits >> np.uint64(29)) & np.uint64(0x3F_FFFF)))
    return np.where(np.isnan(x), kept.astype(np.uint32).view(np.float32), rounded)[()]


# Which f64 NaN operand an instruction passes on where several are NaN: the operand positions in the
# order it looks at them (an H100, tools/probe_numerics.py: `a + b`, `a - b`, `a * b`, max and min
# give b's, quieted; fma(a, b, c) b's, then c's, then a's; div a's).  Any other instruction (div,
# sqrt, a rounding, fmod) looks at its operands in order.
NAN_PRECEDENCE = {"add": (1, 0), "sub": (1, 0), "mul": (1, 0), "max": (1, 0), "min": (1, 0),
                  "fma": (1, 2, 0)}


#: f64 operations that ptxas folds to a NaN constant operand, whatever the other operand (on an H100
#: 1 - NaN and NaN' - NaN give 0xFFF8000000000000, NaN' + NaN and NaN - NaN' 0x7FF8000000000000).
ABSORBING_NAN = {"add", "sub", "mul", "div"}


def absorbed_nan(opcode: str, a, b):
    """What f64 `a opcode b` is where one of the constant operands `a`, `b` (None: not a constant) is a
    NaN and `opcode` in ABSORBING_NAN: that NaN, negated as sub's subtrahend (x - c is x + -c); else
    None.  The IR's folder and the interpreter fold such operations to it, as ptxas would."""
    if opcode not in ABSORBING_NAN:
        return None
    for position, known in enumerate((a, b)):
        if isinstance(known, (float, np.floating)) and math.isnan(known):
            value = np.float64(known)
            return -value if opcode == "sub" and position == 1 else value
    return None


_precedence_reversed = False


@contextlib.contextmanager
def reversed_nan_precedence():
    """Within it, every instruction looks for a NaN operand to pass on in the reverse of its
    NAN_PRECEDENCE order.  Which of several f64 NaN operands the GPU passes on follows the order
    ptxas puts the operands in, which PTX does not fix (docs/language.md): the differential fuzz runs
    the CPU modes both ways and holds the GPU to one of the two answers where they differ."""
    global _precedence_reversed
    before, _precedence_reversed = _precedence_reversed, True
    try:
        yield
    finally:
        _precedence_reversed = before


def nan_precedence(opcode: str, *operands) -> tuple:
    """`operands` of an instruction `opcode` in the order it looks for a NaN to pass on."""
    order = tuple(NAN_PRECEDENCE.get(opcode, range(len(operands))))
    return tuple(operands[i] for i in (order[::-1] if _precedence_reversed else order))


def arithmetic_nan(out, *operands):
    """`out`, what an arithmetic instruction (add, sub, mul, fma, div, sqrt, a rounding, an approximate
    function) computed from `operands` - given in the order the instruction looks for a NaN in them
    (`nan_precedence`) - with the GPU's bits where it is NaN: for f32 the canonical NaN; for f64 the
    first NaN operand in that order, quieted, or `made_nan` where every operand is a number."""
    out = np.asarray(out)
    nan = np.isnan(out)
    if not nan.any():
        return out[()]
    fill = made_nan(out.dtype)
    if out.dtype == np.float64:
        for x in reversed(operands):
            x = np.asarray(x, np.float64)
            fill = np.where(np.isnan(x), quiet(x), fill)
    return np.where(nan, fill, out)[()]


def cvt_nan_integer(source_bits: int, dest_bits: int) -> int:
    """The bits a NaN gets from cvt to an integer of `dest_bits` (any integer rounding) from a float of
    `source_bits`: 0, unless the source is f64 or the destination 64 bits wide; then 1 << (dest_bits -
    1), MININT or 0x80000000 for u32 (PTX ISA 9.7.9.21, cvt, Integer Notes; an H100 gives these).  The
    language's conversion makes every NaN 0: the compiled code selects 0 where this is not 0."""
    return 0 if source_bits < 64 and dest_bits < 64 else 1 << (dest_bits - 1)


def _arithmetic(fn: Callable, opcode: str = "") -> Callable:
    """An operation whose float results that are NaN get the GPU's bits (integers are left alone)."""
    def apply(*operands):
        with np.errstate(all="ignore"):
            out = fn(*operands)
        return arithmetic_nan(out, *nan_precedence(opcode, *operands)) if np.asarray(out).dtype.kind == "f" else out
    return apply


def _sign_bit(fn_int: Callable, fn_float_bits: Callable) -> Callable:
    """neg or abs: on integers `fn_int` (wrapping); on floats a change of the sign bit alone."""
    def apply(x):
        x = np.asarray(x)
        if x.dtype.kind != "f":
            return fn_int(x)
        bits, uint = _bits(x)
        return fn_float_bits(bits, uint(1 << (8 * x.dtype.itemsize - 1))).astype(uint).view(x.dtype)[()]
    return apply


negate = _sign_bit(operator.neg, lambda bits, sign: bits ^ sign)
absolute = _sign_bit(np.abs, lambda bits, sign: bits & ~sign)


# ------------------------------------------------------------------ operations on arrays
def nonzero_divisor(b):
    """The divisor an integer division uses: `b`, with 1 in place of 0."""
    return np.where(b == 0, b.dtype.type(1), b)


def divide(a, b):
    """`a / b`: IEEE for floats; for integers truncating toward zero (C), a zero divisor counting as 1."""
    if a.dtype.kind == "f":
        return a / b
    b = nonzero_divisor(b)
    q = a // b
    if a.dtype.kind == "i":  # floor -> truncation: one more where inexact and the signs differ
        q = q + ((q * b != a) & ((a < 0) != (b < 0)))
    return q


def remainder(a, b):
    """`a % b`, with the dividend's sign: of integers a - (a / b) * b (0 for a zero divisor); of floats
    C's fmod, exact, computed as the compiled code computes it (lower/libm.py's fmod): in f64, an f32's
    operands widened exactly, its NaNs f64 arithmetic's (a NaN operand's as a + b gives it, b's first,
    quieted; a NaN made of numbers, for a zero divisor or an infinite dividend, `made_nan`), then
    narrowed back (`narrow_nan`)."""
    if a.dtype.kind == "f":
        wide_a, wide_b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        with np.errstate(all="ignore"):
            wide = arithmetic_nan(np.fmod(wide_a, wide_b), *nan_precedence("add", wide_a, wide_b))
        return wide if a.dtype == np.float64 else narrow_nan(wide)
    return a - divide(a, b) * nonzero_divisor(b)


def ceil_divide(a, b):
    """cdiv(a, b) of integers: the exact quotient rounded up (a zero divisor counting as 1).

    The truncated quotient, plus one where the remainder is not zero and has the
    divisor's sign (the exact quotient is then positive and was rounded down); no
    intermediate value can wrap, unlike `(a + b - 1) / b`."""
    r = remainder(a, b)
    up = (r != 0) & ((r < 0) == (b < 0)) if a.dtype.kind == "i" else r != 0
    return divide(a, b) + up.astype(a.dtype)


def _extreme(larger: bool):
    """PTX's max (larger) or min on two arrays: a NaN operand is ignored, -0.0 is below +0.0, and the
    result is one operand's bits - but for two NaNs, which give an arithmetic NaN of b (f32's
    canonical NaN; f64's b quieted, `NAN_PRECEDENCE`).  Written with comparisons and `isnan` alone,
    which treat signaling NaNs like the others on every platform (NumPy's fmax and fmin need not)."""
    def extreme(a, b):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind != "f":
            return (np.maximum if larger else np.minimum)(a, b)
        with np.errstate(invalid="ignore"):
            out = np.where(((b > a) if larger else (b < a)) | np.isnan(a), b, a)
            if (out == 0).any():  # (-0.0 and +0.0 compare equal: b where it is the one beyond a)
                sign_a, sign_b = np.signbit(a), np.signbit(b)
                out = np.where((a == b) & ((sign_a & ~sign_b) if larger else (sign_b & ~sign_a)), b, out)
            both_nan = np.isnan(out)  # (a NaN gave b, a NaN b gave a)
            if both_nan.any():
                out = np.where(both_nan, arithmetic_nan(b, *nan_precedence("max", a, b)), out)
            return out[()]
    return extreme


maximum = _extreme(True)
minimum = _extreme(False)


def reduce_extreme(opcode: str, x, axis, keepdims: bool):
    """The `max` or `min` of the elements of `x` along `axis` (None: all), as `maximum`/`minimum`
    combine them, each step's b the later elements: NaN ignored, -0.0 below +0.0; where every element
    is NaN, the NaN of two NaNs of the last one (f32's canonical NaN, f64's last element quieted) -
    and a single element as it is (nothing combines it)."""
    x = np.asarray(x)
    larger = opcode == "max"
    if x.dtype.kind != "f":
        return (np.max if larger else np.min)(x, axis=axis, keepdims=keepdims)
    if (x.size if axis is None else x.shape[axis]) == 1:
        return (x.reshape(()) if axis is None else (x if keepdims else np.squeeze(x, axis)))[()]
    nan = np.isnan(x)
    numbers = np.where(nan, x.dtype.type(-np.inf if larger else np.inf), x)
    out = (np.max if larger else np.min)(numbers, axis=axis, keepdims=keepdims)
    # equal zeros: the result is +0.0 (max) / -0.0 (min) when one is there
    wanted = (x == 0) & (np.signbit(x) != larger)
    zero = np.copysign(x.dtype.type(0), x.dtype.type(1 if larger else -1))
    out = np.where((out == 0) & np.any(wanted, axis=axis, keepdims=keepdims), zero, out)
    flat = x.reshape(-1) if axis is None else np.moveaxis(x, axis, -1)
    end = 0 if _precedence_reversed else -1  # the NaN two NaNs pass on is the later's, or the earlier's
    kept = flat[..., end] if axis is None or not keepdims else np.expand_dims(flat[..., end], axis)
    return np.where(np.all(nan, axis=axis, keepdims=keepdims), arithmetic_nan(kept, kept), out)[()]


def _shift(left: bool):
    def shift(a, b):
        a = np.asarray(a)
        bits = a.dtype.itemsize * 8
        amount = np.asarray(b).astype(np.int64).astype(np.uint64) if np.asarray(b).dtype.kind == "i" \
            else np.asarray(b).astype(np.uint64)
        out = amount >= bits
        k = np.where(out, 0, amount).astype(a.dtype)
        if left:
            return np.where(out, a.dtype.type(0), a << k)[()].astype(a.dtype)
        beyond = np.where(a < 0, a.dtype.type(-1), a.dtype.type(0)) if a.dtype.kind == "i" else a.dtype.type(0)
        return np.where(out, beyond, a >> k)[()].astype(a.dtype)
    return shift


def multiply_high(a, b):
    """The high half of the full product of two integers of one dtype (32 or 64 bits)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.itemsize == 8:  # 64 x 64 bits: four 32-bit partial products, as mul.hi.s64 does
        ua, ub = a.view(np.uint64), b.view(np.uint64)
        m32, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
        alo, ahi, blo, bhi = ua & m32, ua >> s32, ub & m32, ub >> s32
        lh, hl = alo * bhi, ahi * blo
        mid = ((alo * blo) >> s32) + (lh & m32) + (hl & m32)
        hi = ahi * bhi + (lh >> s32) + (hl >> s32) + (mid >> s32)
        if a.dtype.kind == "i":
            hi = hi - np.where(a < 0, ub, np.uint64(0)) - np.where(b < 0, ua, np.uint64(0))
        return hi.view(a.dtype)[()]
    wide = np.int64 if a.dtype.kind == "i" else np.uint64
    return ((a.astype(wide) * b.astype(wide)) >> wide(32)).astype(a.dtype)[()]


COMPARISONS: dict[str, Callable] = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                                    "gt": np.greater, "ge": np.greater_equal}

# opcode -> function of the operand arrays (all of one dtype) -> the result array
OPERATIONS: dict[str, Callable] = {
    "add": _arithmetic(operator.add, "add"), "sub": _arithmetic(operator.sub, "sub"),
    "mul": _arithmetic(operator.mul, "mul"),
    "div": _arithmetic(divide), "rem": remainder,
    "min": minimum, "max": maximum,
    "cdiv": ceil_divide,  # the builtin (irgen writes it as div, rem and select)
    "and": operator.and_, "or": operator.or_, "xor": operator.xor,
    "shl": _shift(True), "shr": _shift(False), "mulhi": multiply_high,
    "neg": negate, "not": operator.invert, "abs": absolute,
    "floor": _arithmetic(np.floor), "ceil": _arithmetic(np.ceil), "round": _arithmetic(np.rint),
    "trunc": _arithmetic(np.trunc),
    "select": np.where,
}


def operation(opcode: str, attrs: dict) -> Callable | None:
    """The function computing `opcode` (with its attributes) on arrays, or None for an opcode
    whose value is not defined exactly here (math functions, fma, memory)."""
    if opcode == "cmp":
        return COMPARISONS[attrs["pred"]]
    return OPERATIONS.get(opcode)


def bf16_bits(x):
    """The bf16 bit patterns (uint16) of f32 values, rounded to nearest even, as cvt.rn.bf16.f32 rounds
    them: a NaN becomes the canonical 0x7FFF."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return np.where(np.isnan(x), np.uint32(CANONICAL_NAN_BITS[DType.BF16]), rounded).astype(np.uint16)[()]


def f16_bits(x):
    """The f16 bit patterns (uint16) of f32 values, rounded to nearest even, as cvt.rn.f16.f32 rounds
    them: a NaN becomes the canonical 0x7FFF."""
    x = np.asarray(x, np.float32)
    rounded = x.astype(np.float16).view(np.uint16)
    return np.where(np.isnan(x), np.uint16(CANONICAL_NAN_BITS[DType.F16]), rounded).astype(np.uint16)[()]


HALF_BITS = {DType.F16: f16_bits, DType.BF16: bf16_bits}  # a 16-bit float's bits from its f32 value


def bf16_values(bits):
    """The f32 values of bf16 bit patterns."""
    return (np.asarray(bits, np.uint32) << 16).view(np.float32)[()]


# The canonical NaNs of the 16-bit formats as the f32 registers of compiled code hold them: f16's
# widened by cvt.f32.f16 (the f32 canonical NaN, which rounds back to 0x7FFF), bf16's shifted.
_HALF_NAN = {DType.F16: canonical_nan(np.float32), DType.BF16: bf16_values(CANONICAL_NAN_BITS[DType.BF16])}


def widen_f16(x):
    """f16 values as cvt.f32.f16 widens them (a load of an f16 tensor): exactly, a NaN the canonical
    f32 NaN.  In registers they stay f32 after that, so a conversion of an f16 value to f32 is no
    cvt: it keeps the bits (a NaN negated by `-` keeps its sign)."""
    x = np.asarray(x).astype(np.float32)
    return np.where(np.isnan(x), canonical_nan(np.float32), x)[()]


def round_half(x, dtype: DType):
    """f32 values rounded to nearest even in the 16-bit format `dtype` (f16 or bf16), as f32; NaN
    becomes the format's canonical NaN (cvt.rn.f16.f32, cvt.rn.bf16.f32)."""
    x = np.asarray(x, np.float32)
    with np.errstate(all="ignore"):
        if dtype is DType.BF16:
            return bf16_values(bf16_bits(x))
        return np.where(np.isnan(x), _HALF_NAN[dtype], x.astype(np.float16).astype(np.float32))[()]


# ------------------------------------------------------------------ 8-bit floats
@dataclass(frozen=True)
class F8Format:
    """An OCP FP8 format (OCP 8-bit Floating Point Specification, 2023): sign, `exponent` bits, `fraction`
    bits, bias 2^(exponent - 1) - 1, subnormals.  E5M2 is IEEE-like (infinities 0x7C / 0xFC, NaNs above);
    E4M3 ('fn': finite) has no infinities and one NaN code of each sign, S.1111.111, so its exponent 15
    holds numbers up to 448."""

    exponent: int
    fraction: int
    infinities: bool

    @property
    def bias(self) -> int:
        return (1 << (self.exponent - 1)) - 1

    @cached_property
    def values(self) -> np.ndarray:
        """The f32 value of each of the 256 codes (NaN: the canonical f32 NaN, as cvt.f32.f16 makes the
        NaN that cvt.rn.f16x2.e4m3x2 / .e5m2x2 gives)."""
        code = np.arange(256, dtype=np.int64)
        field = (code >> self.fraction) & ((1 << self.exponent) - 1)
        fraction = code & ((1 << self.fraction) - 1)
        significand = np.where(field == 0, fraction, fraction + (1 << self.fraction)).astype(np.float64)
        magnitude = np.ldexp(significand, np.maximum(field, 1) - self.bias - self.fraction)
        top = field == (1 << self.exponent) - 1
        if self.infinities:
            magnitude = np.where(top, np.where(fraction == 0, np.inf, np.nan), magnitude)
        else:
            magnitude = np.where(top & (fraction == (1 << self.fraction) - 1), np.nan, magnitude)
        value = np.where(code & 0x80, -magnitude, magnitude).astype(np.float32)
        return np.where(np.isnan(value), np.array(0x7FFF_FFFF, np.uint32).view(np.float32), value)

    @cached_property
    def magnitudes(self) -> np.ndarray:
        """The float64 values of the codes 0, 1, ... up to the largest finite one (0x7E, 0x7B), increasing."""
        positive = self.values[:0x80].astype(np.float64)
        return positive[:np.argmax(~np.isfinite(positive))]


F8_FORMATS = {DType.F8E4M3: F8Format(4, 3, infinities=False), DType.F8E5M2: F8Format(5, 2, infinities=True)}
F8_NAN = 0x7F  # the code cvt.rn.satfinite gives a NaN of either sign, in both formats


def f8_bits(x, dtype: DType):
    """The codes (uint8) of the 8-bit float `dtype` nearest f32 values, ties to the even code, saturated as
    cvt.rn.satfinite.e4m3x2.f32 / .e5m2x2.f32 do: beyond the largest finite value (an infinity too) that
    value of the sign; NaN F8_NAN; a result of zero keeps the sign."""
    x = np.asarray(x, np.float32)
    table = F8_FORMATS[dtype].magnitudes
    with np.errstate(invalid="ignore"):
        a = np.minimum(np.abs(x.astype(np.float64)), table[-1])
    upper = np.minimum(np.searchsorted(table, a), len(table) - 1)  # the first code whose value is >= a
    lower = np.maximum(upper - 1, 0)
    # both differences are exact (Sterbenz: neighbouring codes are within a factor 2), or the lower is 0
    below, above = a - table[lower], table[upper] - a
    code = np.where((above < below) | ((above == below) & (upper % 2 == 0)), upper, lower)
    code = code | (np.signbit(x).astype(np.int64) << 7)
    return np.where(np.isnan(x), F8_NAN, code).astype(np.uint8)[()]


def f8_values(bits, dtype: DType):
    """The f32 values of 8-bit float codes (NaN the canonical f32 NaN)."""
    return F8_FORMATS[dtype].values[np.asarray(bits, np.uint8)][()]


def round_f8(x, dtype: DType):
    """f32 values converted to the 8-bit float `dtype` (`f8_bits`), as f32."""
    return f8_values(f8_bits(x, dtype), dtype)


def round_narrow(x, dtype: DType):
    """f32 values converted to the narrow float `dtype` (see the header), as f32."""
    return round_f8(x, dtype) if dtype.is_f8 else round_half(x, dtype)


def round_tf32_even(x):
    """f32 values rounded to TF32 (10 fraction bits) to nearest, ties to even, as cvt.rn.tf32.f32 and a TMA
    copy through a tf32 tensor map round them: dot's precision="tf32".  Past the largest TF32 an infinity;
    NaN the canonical 0x7FFFFFFF (as the emulator's cvt)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000).astype(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, np.uint32(0x7FFFFFFF), rounded).view(np.float32)[()]


def round_tf32(x):
    """f32 values rounded to TF32 (10 fraction bits) to nearest, ties away from zero (cvt.rna.tf32.f32):
    tf32x3's split."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).astype(np.uint32)
    special = (bits & 0x7F800000) == 0x7F800000  # infinities and NaN keep their bits
    return np.where(special, bits, rounded).view(np.float32)[()]


def _float_to_float(x, to: DType):
    """f32 <-> f64 (cvt): a NaN keeps its sign and payload (to f32 its top bits), quieted."""
    if to is DType.F64:
        return quiet(np.asarray(x, np.float32)).astype(np.float64)[()]
    return narrow_nan(x)


def round_to_odd_f32(x):
    """f64 values as f32, rounded toward zero and the last bit set where that was inexact ("round to
    odd"): rounding these to nearest even in a format of at most 22 bits of precision gives the f64
    value's own rounding, as if once (f32 keeps two bits more than it needs).  NaN stays NaN."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        t = x.astype(np.float32)
        t = np.where(np.abs(t.astype(np.float64)) > np.abs(x), np.nextafter(t, np.float32(0)), t)
        inexact = t.astype(np.float64) != x
        return np.where(inexact & ~np.isnan(x), (t.view(np.uint32) | 1).view(np.float32), t)[()]


def convert_array(x, to: DType, frm: DType | None = None):
    """Values of `x`, of dtype `frm` (by default the one its NumPy dtype is), converted to `to`, as
    the GPU's cvt does it (see the header)."""
    x = np.asarray(x)
    frm = frm or next(d for d in COMPUTE_DTYPES if NUMPY[d] == x.dtype)
    if frm == to:
        return x[()]
    if frm.is_narrow:  # held as the f32 register holds it (its NaN the load's, its sign any neg's): as it is
        return convert_array(x, to, DType.F32)
    if to.is_half:
        if frm is DType.F64 or (frm.is_int and frm.bits >= 32):  # one rounding: through f32 rounded to odd
            return round_half(round_to_odd_f32(convert_array(x, DType.F64, frm)), to)
        return round_half(convert_array(x, DType.F32, frm), to)
    if to.is_f8:
        return round_narrow(convert_array(x, DType.F32, frm), to)
    target = NUMPY[to]
    with np.errstate(all="ignore"):
        if frm.is_float and to.is_float:
            return _float_to_float(x, to)
        if frm.is_float and to.is_int:
            low, high = int_range(to)
            t = np.trunc(np.asarray(x, np.float64))
            over, under = t >= float(high) + 1.0, t < low  # high + 1 is a power of two: exact in double
            inside = np.where(over | under | np.isnan(t), 0, t).astype(target)
            return np.where(over, target.type(high), np.where(under, target.type(low), inside))[()]
        if to is DType.BOOL:
            return (x != 0)[()]
        return x.astype(target)[()]


# ------------------------------------------------------------------ constants
def _array(value: Constant, dtype: DType) -> np.ndarray:
    return np.array([value], dtype=NUMPY[dtype])


def _constant(array: np.ndarray) -> Constant:
    v = array[0]
    return bool(v) if array.dtype == np.bool_ else (float(v) if array.dtype.kind == "f" else int(v))


def convert(value: Constant, dtype: DType) -> Constant:
    """The constant `value` (of any dtype, or exact) converted to `dtype`, as a cast does it."""
    if isinstance(value, float):
        source = DType.F64
    elif isinstance(value, bool):
        source = DType.BOOL
    else:  # an integer of any dtype, or an exact one (those are checked to fit i64 or u64 first)
        source = DType.I64 if value <= int_range(DType.I64)[1] else DType.U64
    return _converted(value, source, dtype)


def _converted(value: Constant, source: DType, dtype: DType) -> Constant:
    return _constant(np.atleast_1d(convert_array(_array(value, source), dtype, source)))


def evaluate(opcode: str, attrs: dict, operands: list[Constant], dtypes: list[DType], result: DType
             ) -> Constant | None:
    """The value of `opcode` on constant operands of `dtypes`, in `result`'s dtype; None for an
    opcode whose value is not defined here."""
    if opcode == "cast":
        return _converted(operands[0], dtypes[0], result)
    fn = operation(opcode, attrs)
    if fn is None:
        return None
    arrays = [_array(v, d) for v, d in zip(operands, dtypes)]
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*arrays)).astype(NUMPY[result])
        return _constant(round_half(out, result) if result.is_half else out)


_EXACT: dict[str, Callable] = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
                               "and": operator.and_, "or": operator.or_, "xor": operator.xor,
                               "shl": operator.lshift, "shr": operator.rshift}
_EXACT_COMPARE: dict[str, Callable] = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt,
                                       "le": operator.le, "gt": operator.gt, "ge": operator.ge}


def exact(opcode: str, attrs: dict, a: Constant, b: Constant) -> Constant:
    """`a op b` for an expression of literals alone: exact integers, doubles, C division.

    ZeroDivisionError for a division or remainder by zero (integer or float: the exact
    quotient does not exist)."""
    if opcode == "cmp":
        return _EXACT_COMPARE[attrs["pred"]](a, b)
    if opcode in ("div", "rem"):
        if b == 0:
            raise ZeroDivisionError("division by zero")
        if isinstance(a, float) or isinstance(b, float):
            if opcode == "div":
                return a / b
            return float(remainder(np.asarray(float(a)), np.asarray(float(b))))  # an infinite a: NaN
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return q if opcode == "div" else a - q * b
    return _EXACT[opcode](a, b)
