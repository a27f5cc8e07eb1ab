# The GPU's multifunction unit (MUFU) as an H100 computes it, for the `.approx`
# instructions: rcp, rsqrt, sqrt, ex2 (f32, and the 16-bit ex2 and tanh), bit
# for bit, lg2 too (f32); sin, cos and tanh of f32 as close as docs/emulator.md states.
#
# What the unit uses of its input, read off whole binades measured on the GPU
# (tools/measure_approx.py) and the SASS ptxas makes of each instruction:
#
# * MUFU.RCP depends on the significand only, MUFU.RSQ and MUFU.SQRT on the
#   significand and the parity of the exponent; the exponent of the result is
#   the input's, negated or halved.
# * MUFU.EX2 truncates |x| to a fixed-point number with 23 fraction bits; a
#   negative x with a fraction takes its ones' complement (the fraction 1 - f
#   less one unit), one that is a whole number its two's complement; the
#   result is 2^integer part times the unit's 2^fraction.
# * MUFU.LG2 adds the exponent to a fixed-point log2 of the significand with
#   36 fraction bits and truncates the sum toward zero to f32: 2^-36 F(m),
#   from the binades [1, 2) and [0.5, 1) measured (any value inside both
#   binades' bounds, the smallest stored), gives every other binade measured
#   bit for bit; the inputs where the measured binades disagree with that rule
#   (1.0, whose log2 is 0 while 0.5's is not -1) are kept as exceptions.
# * Every MUFU flushes subnormal inputs and results to zero.  The non-.ftz PTX
#   forms are the unit inside a few scaling instructions (`ptx_f32`).
#
# The unit's values over one period of its input (one binade's significands,
# 2^23 each; every input of the 16-bit forms) are kept as deltas in ulps from
# a reference computed here with IEEE float64 operations only (so the same on
# every platform) - lg2's F(m) and the 16-bit forms' results as differences
# from the previous entry -, lzma-compressed in mufu_tables.npz (tools/build_mufu_tables.py
# writes it from the measured data) and decompressed when first used (0.1 s);
# the reference is computed for the lanes an instruction runs on.
from __future__ import annotations

import functools
import lzma
from pathlib import Path

import numpy as np

from ...constants import canonical_nan

TABLES = Path(__file__).with_name("mufu_tables.npz")
SIGNIFICAND = (1 << 23) - 1
_MIN_NORMAL = np.float32(2.0 ** -126)


def ordered(bits: np.ndarray) -> np.ndarray:
    """f32 bits as int64 in the order of their values (both zeros 0)."""
    i = np.asarray(bits, np.uint32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def from_ordered(o: np.ndarray) -> np.ndarray:
    """The f32 bits of ordered integers (`ordered`'s inverse; 0 is +0.0)."""
    o = np.asarray(o, np.int64)
    return np.where(o < 0, (-o) | 0x80000000, o).astype(np.uint32)


def _ex2_fraction(f: np.ndarray) -> np.ndarray:
    """2^f in float64 for f in [0, 1), by Horner's rule on exp's series (error under 1e-15)."""
    t = np.asarray(f, np.float64) * 0.6931471805599453
    out = np.ones_like(t)
    for k in range(17, 0, -1):  # out = 1 + out * t / k, in place
        out *= t
        out /= k
        out += 1.0
    return out


EX2_LOW_BITS = 11  # _ex2_product's split of the 23 fraction bits


@functools.cache
def _ex2_factors() -> tuple[np.ndarray, np.ndarray]:
    """2^(h / 2^12) for the 12 high fraction bits h and 2^(l / 2^23) for the 11 low ones l, in float64."""
    high = _ex2_fraction(np.arange(1 << (23 - EX2_LOW_BITS)) / 2.0 ** (23 - EX2_LOW_BITS))
    return high, _ex2_fraction(np.arange(1 << EX2_LOW_BITS) / 2.0 ** 23)


def _ex2_product(i: np.ndarray) -> np.ndarray:
    """2^(i / 2^23) in float64 as the product of `_ex2_factors` of i's high and low bits: its f32
    rounding is `_ex2_fraction`'s at every one of the 2^23 indices (tests/test_mufu.py checks them all),
    at a tenth of the cost."""
    high, low = _ex2_factors()
    return high.take(i >> EX2_LOW_BITS) * low.take(i & ((1 << EX2_LOW_BITS) - 1))


# Each table: its reference (float64 function of the 23-bit significand index, or of the input
# bits for the 16-bit forms) and the number of periods it holds.
REFERENCES = {
    "rcp": lambda i: 1.0 / (1.0 + i / 2.0 ** 23),                                  # 1/m, m in [1, 2)
    "rsqrt": lambda i: 1.0 / np.sqrt((1.0 + (i & SIGNIFICAND) / 2.0 ** 23) * (1 + (i >> 23))),  # m in [1, 4)
    "sqrt": lambda i: np.sqrt((1.0 + (i & SIGNIFICAND) / 2.0 ** 23) * (1 + (i >> 23))),
    "ex2": _ex2_product,                                                           # 2^f, f in [0, 1)
}
HALF_FORMS = ("ex2.f16", "ex2.bf16", "tanh.f16", "tanh.bf16")
LG2_BITS = 36  # the fraction bits of MUFU.LG2's fixed-point sum


def reference_bits(name: str, index: np.ndarray | None = None) -> np.ndarray:
    """The f32 bits of table `name`'s reference at `index` (default: every index)."""
    if index is None:
        index = np.arange(1 << (24 if name in ("rsqrt", "sqrt") else 23), dtype=np.int64)
    return REFERENCES[name](np.asarray(index, np.int64)).astype(np.float32).view(np.uint32)


@functools.cache
def _stored(name: str) -> np.ndarray:
    """Table `name` as stored, decompressed (once): int8 deltas; the 16-bit forms' results; lg2's F(m)."""
    with np.load(TABLES) as stored:
        packed = stored[name].tobytes()
    if name in HALF_FORMS or name == "lg2":  # every entry, as differences from the previous one
        steps = np.frombuffer(lzma.decompress(packed), np.int16)
        return np.cumsum(steps, dtype=np.int64).astype(np.uint16 if name in HALF_FORMS else np.int64)
    return np.frombuffer(lzma.decompress(packed), np.int8)


@functools.cache
def _exceptions(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The (sorted input bits, result bits) where table `name`'s rule does not give the unit's result."""
    with np.load(TABLES) as stored:
        pairs = stored[f"{name}_exceptions"].reshape(2, -1)
    return pairs[0], pairs[1]


def table(name: str, index: np.ndarray) -> np.ndarray:
    """The unit's result bits at `index` of table `name` (the reference computed for those indices only)."""
    if name in HALF_FORMS:
        return _stored(name)[index]
    # (every reference is a positive number, as are the unit's values near it: their ordered integers
    # are their bits, under 2^31)
    return (reference_bits(name, index).view(np.int32) + _stored(name).take(index)).view(np.uint32)


def _fields(x: np.ndarray):
    """(sign bit, unbiased exponent, significand) of f32 values, as int64."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.int64)
    return bits >> 31, ((bits >> 23) & 0xFF) - 127, bits & SIGNIFICAND


def _scaled(value_bits: np.ndarray, exponent: np.ndarray, sign: np.ndarray | None = None) -> np.ndarray:
    """f32 of value * 2^exponent with `sign` (None: positive), flushed to zero below 2^-126 and
    infinite above."""
    with np.errstate(over="ignore"):  # ldexp rounds once, to nearest (a subnormal, flushed after)
        out = np.ldexp(value_bits.view(np.float32), exponent)
    out = np.where(out < _MIN_NORMAL, np.float32(0), out)
    return out if sign is None else np.where(sign == 1, -out, out).astype(np.float32)


def _flush(x):
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < _MIN_NORMAL, np.copysign(np.float32(0), x), x)


def mufu_rcp(x):
    """MUFU.RCP: 1/x, of the significand's table and the negated exponent.  Where every x is normal with
    an exponent below 126 (the result normal too: the table's values are in (1/2, 1]), its bits are the
    table's with the exponent field's difference from 1.0's subtracted, and x's sign."""
    x = np.asarray(x, np.float32)
    bits = x.reshape(-1).view(np.uint32)  # (arrays: their unsigned arithmetic wraps silently)
    exponent = bits & np.uint32(0x7F800000)
    inside = exponent - np.uint32(0x00800000) < np.uint32(252 << 23)  # (biased exponent 1 .. 252)
    if np.count_nonzero(inside) < inside.size:
        return _rcp_any(x)
    reciprocal = table("rcp", (bits & np.uint32(SIGNIFICAND)).astype(np.int64))
    out = (reciprocal + np.uint32(0x3F800000) - exponent) | (bits & np.uint32(0x80000000))
    return out.view(np.float32).reshape(x.shape)


def _rcp_any(x):
    """`mufu_rcp` of any f32 values: subnormals, zeros, infinities, NaNs and results that flush too."""
    x = _flush(x)
    sign, e, man = _fields(x)
    out = _scaled(table("rcp", man), -e, sign)
    out = np.where(x == 0, np.copysign(np.float32(np.inf), x), out)
    out = np.where(np.isinf(x), np.copysign(np.float32(0), x), out)
    return np.where(np.isnan(x), canonical_nan(np.float32), out).astype(np.float32)


def _root(name: str, power: int):
    """MUFU.RSQ (power -1) or MUFU.SQRT (power 1): the table of the significand and the exponent's parity."""
    def apply(x):
        x = _flush(x)
        sign, e, man = _fields(x)
        value = table(name, ((e & 1) << 23) | man)
        out = _scaled(value, power * (e >> 1))
        with np.errstate(invalid="ignore"):
            zero = np.float32(np.inf if power < 0 else 0.0)
            out = np.where(x == 0, np.copysign(zero, x), out)
            out = np.where(np.isinf(x) & (x > 0), np.float32(0.0 if power < 0 else np.inf), out)
            out = np.where((x < 0) | np.isnan(x), canonical_nan(np.float32), out)
        return out.astype(np.float32)
    return apply


mufu_rsq, mufu_sqrt = _root("rsqrt", -1), _root("sqrt", 1)


def mufu_ex2(x):
    """MUFU.EX2: 2^x of x truncated to 23 fraction bits (a negative one complemented), in int32 throughout.

    x (clamped to [-128, 128], beyond which 2^x is infinite or flushed; a NaN gives 128) times 2^23
    truncated toward zero is -q for a negative x whose magnitude truncates to q, so `fixed >> 23` is the
    integer part of the unit's fixed-point number both where it is the ones' complement ~q (a fraction)
    and where it is -q (a whole number), and its fraction is q's complement, `fixed`'s low bits less one
    (none for a whole number: 0).  The result's bits are the table's (in [1, 2)) plus the integer part
    in the exponent field: below the smallest normal number's bits the unit flushes it (no table entry
    that a negative x reaches has a significand of all ones, which would round up to 2^-126:
    tests/test_mufu.py), from infinity's bits on it is infinite."""
    x = np.asarray(x, np.float32)
    fixed = (np.fmax(np.fmin(x, np.float32(128)), np.float32(-128)) * np.float32(2 ** 23)).astype(np.int32)
    index = np.maximum((fixed & SIGNIFICAND) + (fixed >> 31), 0).astype(np.int64)
    bits = table("ex2", index).view(np.int32) + (fixed & ~SIGNIFICAND)
    out = (np.minimum(bits, 0x7F800000) * (bits >= 0x00800000)).view(np.float32)
    nan = np.isnan(x)
    if nan.any():
        out = np.where(nan, canonical_nan(np.float32), out)
    return out


def _rcp(x):
    """rcp.approx.f32: MUFU.RCP of x scaled into its range (ptxas: 2^24 below 2^-126, 1/4 above 2^126)."""
    x = np.asarray(x, np.float32)
    magnitude = np.abs(x)
    scale = np.where(magnitude < _MIN_NORMAL, np.float32(2 ** 24),
                     np.where(magnitude > np.float32(2.0 ** 126), np.float32(0.25), np.float32(1)))
    return (scale * mufu_rcp(x * scale)).astype(np.float32)


def _lifted(unit, undo):
    """The unit applied to a subnormal x times 2^24 and `undo` applied to its result (ptxas's
    sequence for rsqrt, sqrt and lg2 without .ftz: lg2 subtracts 24, rounded to nearest)."""
    def apply(x):
        x = np.asarray(x, np.float32)
        small = np.abs(x) < _MIN_NORMAL
        out = unit(np.where(small, x * np.float32(2 ** 24), x))
        return np.where(small, undo(out), out).astype(np.float32)
    return apply


def _ex2(x):
    """ex2.approx.f32: below -126, the square of 2^(x/2)."""
    x = np.asarray(x, np.float32)
    low = x < np.float32(-126)
    out = mufu_ex2(np.where(low, x * np.float32(0.5), x))
    return np.where(low, out * out, out).astype(np.float32)


def toward_zero(fixed: np.ndarray, fraction_bits: int) -> np.ndarray:
    """f32 of the fixed-point `fixed` * 2^-fraction_bits (int64, under 2^53) truncated toward zero."""
    exact = np.asarray(fixed, np.int64).astype(np.float64) * 2.0 ** -fraction_bits
    nearest = exact.astype(np.float32)
    return np.where(np.abs(nearest.astype(np.float64)) > np.abs(exact), np.nextafter(nearest, np.float32(0)),
                    nearest).astype(np.float32)


def lg2_rule(x: np.ndarray) -> np.ndarray:
    """MUFU.LG2's rule for normal positive f32 `x`: exponent + 2^-36 F(significand), toward zero."""
    _, e, man = _fields(x)
    return toward_zero((e << LG2_BITS) + _stored("lg2")[man], LG2_BITS)


def mufu_lg2(x):
    """MUFU.LG2: log2 x by `lg2_rule`, but for the measured exceptions; -inf at 0, NaN below."""
    x = _flush(x)
    out = lg2_rule(np.where((x > 0) & np.isfinite(x), x, np.float32(1)))
    inputs, results = _exceptions("lg2")
    bits = x.view(np.uint32)
    at = np.minimum(np.searchsorted(inputs, bits), inputs.size - 1)
    out = np.where(inputs[at] == bits, results[at].view(np.float32), out)
    out = np.where(x == 0, np.float32(-np.inf), out)
    out = np.where(np.isposinf(x), np.float32(np.inf), out)
    return np.where((x < 0) | np.isnan(x), canonical_nan(np.float32), out).astype(np.float32)


# PTX form -> (the .ftz form, the form without .ftz): each a function of f32 arrays.
F32_FORMS = {
    "rcp": (mufu_rcp, _rcp),
    "rsqrt": (mufu_rsq, _lifted(mufu_rsq, lambda r: r * np.float32(4096))),
    "sqrt": (mufu_sqrt, _lifted(mufu_sqrt, lambda r: r * np.float32(2.0 ** -12))),
    "ex2": (mufu_ex2, _ex2),
    "lg2": (mufu_lg2, _lifted(mufu_lg2, lambda r: r - np.float32(24))),
}


def approx_f32(op: str, ftz: bool):
    """The GPU's `op.approx{.ftz}.f32` as a function of f32 arrays."""
    return F32_FORMS[op][0 if ftz else 1]


def approx_16(op: str, type_name: str):
    """The GPU's `op.approx{.ftz}.<type_name>` (ex2 or tanh of .f16, .bf16 or their x2 pairs) as a
    function of the raw bits: every 16-bit result is in the table."""
    def apply(bits):
        name = f"{op}.{type_name.removesuffix('x2')}"
        bits = np.asarray(bits)
        if type_name.endswith("x2"):
            bits = bits.astype(np.uint32)
            low, high = table(name, bits & 0xFFFF), table(name, bits >> 16)
            return low.astype(np.uint32) | (high.astype(np.uint32) << 16)
        return table(name, bits.view(np.uint16)).view(bits.dtype)
    return apply
