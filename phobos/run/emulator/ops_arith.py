# Arithmetic, logic, comparison, selection, move and conversion instructions.
#
# Integers wrap like the hardware (NumPy fixed-width arithmetic); division and
# remainder truncate toward zero as in C, and a zero divisor gives all ones, as
# ptxas's code does (PTX leaves the value unspecified; `_integer_division`).  Floating-point operations round exactly
# as PTX specifies through `numerics`, with the GPU's NaN bits, and min/max
# order -0.0 below +0.0 as the PTX ISA says; the `.approx` functions are the
# GPU's bits where mufu.py models its multifunction unit (rcp, rsqrt, sqrt and
# ex2 of f32; ex2 and tanh of f16, bf16 and their pairs), the others (lg2,
# sin, cos, tanh of f32, the f64 ones) computed in float64 and rounded to the
# result type, a few ulp from the GPU's (docs/emulator.md; sin and cos of the
# GPU's reduction of the argument: numerics.sin_approx); div.approx and
# div.full are ptxas's SASS for them, MUFU.RCP (a constant divisor's reciprocal
# folded, correctly rounded) and one FMUL (`_divide_by_unit`).  abs and neg
# of f64 pass a NaN through unchanged (the CUDA programming guide); of f32 they
# give the canonical NaN, like the FADD that ptxas makes of them (Phobos itself
# changes signs with and/xor, which keep every bit).
#
# 16-bit floats (.f16, .bf16 and the pairs .f16x2, .bf16x2; PTX ISA, "Half
# Precision Floating-Point Instructions"): add, sub, mul and fma are rounded
# once to nearest even from the exact result, NaN results canonical; neg and
# abs give the canonical NaN for a NaN too (unspecified by PTX, as f32's FADD
# does it); min/max as f32's; setp compares values.  The extended-precision
# instructions (add.cc, addc, sub.cc, subc, mad.cc, madc) carry through a
# per-thread flag (Decoder.carry_flag).
#
# Consecutive conversions of f32 pairs of one form (`cvt.rn.f16x2.f32`: an
# accumulator tile packed for a store, tens in a row) run as one batch
# (decode.Fusable, machine.fusion_table): the pairs of all converted at once.
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ...constants import F8_NAN, cvt_nan_integer, f8_bits, f8_values, narrow_nan
from ...types import DType
from . import mufu
from . import numerics as nx
from . import syntax as syn
from .decode import Fusable, Semantics, fusable, lanes, opcode, plain
from .errors import PtxSyntaxError
from .ptxtypes import TYPES, PtxType

ROUNDING = ("rn", "rz", "rm", "rp")
INT_ROUNDING = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}
FORMATS = {"f16": nx.F16, "bf16": nx.BF16, "f32": nx.F32, "f64": nx.F64}
PRED = TYPES["pred"]
U32 = TYPES["u32"]


def elementwise(d, ins, out_t: PtxType, in_ts: list[PtxType], fn) -> Semantics:
    """d = fn(a, b, ...) with operands read as `in_ts` and the result written as `out_t`."""
    ops = d.operands(ins, 1 + len(in_ts))
    write = d.writer(ops[0], out_t)
    readers = [d.reader(o, t) for o, t in zip(ops[1:], in_ts)]
    if len(readers) == 1:
        (ra,) = readers
        return plain(lambda m, idx: write(m, idx, fn(ra(m, idx))))
    if len(readers) == 2:
        ra, rb = readers
        return plain(lambda m, idx: write(m, idx, fn(ra(m, idx), rb(m, idx))))
    ra, rb, rc = readers
    return plain(lambda m, idx: write(m, idx, fn(ra(m, idx), rb(m, idx), rc(m, idx))))


def require(d, condition: bool, message: str) -> None:
    if not condition:
        raise d.error(message)


def float_modifiers(d, mods, t: PtxType, default: str | None = "rn") -> str:
    """Take a rounding mode (or the default; None: required) for an f32/f64 operation."""
    require(d, t.name in ("f32", "f64"), f"{mods.base}.{t.name} is not supported (f32 and f64 only)")
    mode = mods.take(*ROUNDING) or default
    if mode is None:
        raise d.error(f"{mods.base}.{t.name} needs a rounding modifier (.rn, .rz, .rm or .rp)",
                      PtxSyntaxError)
    return mode


def float_only(d, mods, t: PtxType) -> None:
    require(d, t.name in ("f32", "f64"), f"{mods.base}.{t.name} is not supported (f32 and f64 only)")


def with_ftz_sat(mods, fn, sat_allowed: bool = True):
    """Wrap a float function with the `.ftz` (flush subnormals) and `.sat` modifiers it carries."""
    ftz = mods.flag("ftz")
    sat = sat_allowed and mods.flag("sat")
    if ftz:
        inner = fn
        fn = lambda *xs: nx.flush(inner(*(nx.flush(x) for x in xs)))  # noqa: E731
    if sat:
        unsat = fn
        fn = lambda *xs: nx.saturate(np.asarray(unsat(*xs)))  # noqa: E731
    return fn


def int_type(d, t: PtxType, what: str) -> None:
    require(d, t.kind in ("b", "u", "s") and t.bits >= 16, f"{what}.{t.name} is not supported")


def wide_type(t: PtxType) -> PtxType:
    return TYPES[f"{'s' if t.is_signed else 'u'}{2 * t.bits}"]


def widen(v, t: PtxType):
    return np.asarray(v).astype(wide_type(t).dtype)


def mul_hi(t: PtxType):
    """The high half of the double-width product."""
    if t.bits == 64:
        return nx.mul_hi_s64 if t.is_signed else (lambda a, b: nx.mul_hi_u64(np.asarray(a), np.asarray(b)))
    shift = np.uint8(t.bits)
    return lambda a, b: ((widen(a, t) * widen(b, t)) >> shift).astype(t.dtype)


# ------------------------------------------------------------------ add sub mul mad fma

_ADD = {32: nx.add_f32, 64: nx.add_f64}
_SUB = {bits: nx.subtract(add) for bits, add in _ADD.items()}
_MUL = {32: nx.mul_f32, 64: nx.mul_f64}
_FMA = {32: nx.fma_f32, 64: nx.fma_f64}
_DIV = {32: nx.div_f32, 64: nx.div_f64}
_SQRT = {32: nx.sqrt_f32, 64: nx.sqrt_f64}


def _saturating_s32(op):
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    return lambda a, b: np.clip(op(np.asarray(a, np.int64), np.asarray(b, np.int64)), lo, hi).astype(np.int32)


@opcode("add", "sub")
def build_add_sub(d, ins, mods):
    if mods.flag("cc"):
        return carry_chain(d, ins, mods)
    t = mods.type()
    negate = mods.base == "sub"
    if t.name in HALF_ELEMENT:
        return half_arithmetic(d, ins, mods, t)
    if t.is_float:
        mode = float_modifiers(d, mods, t)
        add = (_SUB if negate else _ADD)[t.bits]
        return elementwise(d, ins, t, [t, t], with_ftz_sat(mods, lambda a, b: add(a, b, mode)))
    int_type(d, t, mods.base)
    op = np.subtract if negate else np.add
    if mods.flag("sat"):
        require(d, t.name == "s32", ".sat applies to .s32 only")
        op = _saturating_s32(op)
    return elementwise(d, ins, t, [t, t], op)


@opcode("mul")
def build_mul(d, ins, mods):
    t = mods.type()
    if t.name in HALF_ELEMENT:
        return half_arithmetic(d, ins, mods, t)
    if t.is_float:
        mode = float_modifiers(d, mods, t)
        mul = _MUL[t.bits]
        return elementwise(d, ins, t, [t, t], with_ftz_sat(mods, lambda a, b: mul(a, b, mode)))
    int_type(d, t, "mul")
    part = mods.take("lo", "hi", "wide")
    if part is None:
        raise d.error("integer mul needs .lo, .hi or .wide", PtxSyntaxError)
    if part == "lo":
        return elementwise(d, ins, t, [t, t], np.multiply)
    if part == "hi":
        return elementwise(d, ins, t, [t, t], mul_hi(t))
    require(d, t.bits <= 32, "mul.wide takes 16- or 32-bit operands")
    return elementwise(d, ins, wide_type(t), [t, t], lambda a, b: widen(a, t) * widen(b, t))


def _product24(t: PtxType):
    """The 48-bit product of the low 24 bits of two .s32/.u32 operands (sign- or zero-extended), in int64."""
    def low24(v):
        low = np.asarray(v).view(np.uint32).astype(np.int64) & 0xFFFFFF
        return np.where(low & 0x800000, low - (1 << 24), low) if t.is_signed else low
    return lambda a, b: low24(a) * low24(b)


def _half_of_48(part: str, t: PtxType):
    """mul24's result: the low 32 bits of the 48-bit product (.lo) or bits 47..16 (.hi), as `t`."""
    shift = 0 if part == "lo" else 16
    product = _product24(t)
    return lambda a, b: ((product(a, b) >> shift) & 0xFFFFFFFF).astype(np.uint32).view(t.dtype)


@opcode("mul24", "mad24")
def build_mul24(d, ins, mods):
    """`mul24.{lo,hi}.{s32,u32} d, a, b` and `mad24.{lo,hi}{.sat}.{s32,u32} d, a, b, c`: the product of the
    low 24 bits of a and b (48 bits), its low 32 bits or bits 47..16, plus c for mad24 (.sat: .hi.s32 only,
    the sum clamped to the s32 range)."""
    part = mods.take("lo", "hi")
    if part is None:
        raise d.error(f"{mods.base} needs .lo or .hi", PtxSyntaxError)
    sat = mods.flag("sat")
    t = mods.type()
    require(d, t.name in ("s32", "u32"), f"{mods.base}.{t.name} is not an instruction (.s32 or .u32)")
    half = _half_of_48(part, t)
    if mods.base == "mul24":
        require(d, not sat, "mul24 takes no .sat")
        return elementwise(d, ins, t, [t, t], half)
    if not sat:
        return elementwise(d, ins, t, [t, t, t], lambda a, b, c: half(a, b) + c)
    require(d, part == "hi" and t.name == "s32", ".sat applies to mad24.hi.s32 only")
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    return elementwise(d, ins, t, [t, t, t], lambda a, b, c: np.clip(
        half(a, b).astype(np.int64) + np.asarray(c, np.int64), lo, hi).astype(np.int32))


@opcode("sad")
def build_sad(d, ins, mods):
    """`sad.type d, a, b, c`: c + |a - b| (wrapping), for 16-, 32- and 64-bit integers; |a - b| is below 2^bits,
    so it is computed in the unsigned type."""
    t = mods.type()
    int_type(d, t, "sad")
    unsigned = t.unsigned

    def sad(a, b, c):
        ua, ub = np.asarray(a).view(unsigned), np.asarray(b).view(unsigned)
        difference = np.where(np.asarray(a) >= np.asarray(b), ua - ub, ub - ua)
        return (np.asarray(c).view(unsigned) + difference).view(t.dtype)
    return elementwise(d, ins, t, [t, t, t], sad)


@opcode("mad")
def build_mad(d, ins, mods):
    if mods.flag("cc"):
        return carry_chain(d, ins, mods)
    t = mods.type()
    if t.is_float or t.name in HALF_ELEMENT:
        return build_fma(d, ins, mods, t)
    int_type(d, t, "mad")
    part = mods.take("lo", "hi", "wide")
    if part is None:
        raise d.error("integer mad needs .lo, .hi or .wide", PtxSyntaxError)
    if part == "lo":
        return elementwise(d, ins, t, [t, t, t], lambda a, b, c: a * b + c)
    if part == "hi":
        hi = mul_hi(t)
        return elementwise(d, ins, t, [t, t, t], lambda a, b, c: hi(a, b) + c)
    require(d, t.bits <= 32, "mad.wide takes 16- or 32-bit operands")
    w = wide_type(t)
    return elementwise(d, ins, w, [t, t, w], lambda a, b, c: widen(a, t) * widen(b, t) + c)


@opcode("fma")
def build_fma(d, ins, mods, t: PtxType | None = None):
    t = t or mods.type()
    if t.name in HALF_ELEMENT:
        return half_arithmetic(d, ins, mods, t)
    mode = float_modifiers(d, mods, t, default=None)
    fma = _FMA[t.bits]
    return elementwise(d, ins, t, [t, t, t], with_ftz_sat(mods, lambda a, b, c: fma(a, b, c, mode)))


# ------------------------------------------------------------------ extended precision: carry chains

def _add_with_carry(a, b, carry):
    """(a + b + carry, carry out) of unsigned arrays of one width (carry: bool or None)."""
    total = a + b
    out = total < a
    if carry is not None:
        with_carry = total + carry.astype(total.dtype)
        out = out | (with_carry < total)
        total = with_carry
    return total, out


def _subtract_with_borrow(a, b, borrow):
    """(a - b - borrow, borrow out) of unsigned arrays of one width (borrow: bool or None)."""
    difference = a - b
    out = a < b
    if borrow is not None:
        owed = borrow.astype(difference.dtype)
        out = out | (difference < owed)
        difference = difference - owed
    return difference, out


@opcode("addc", "subc", "madc")
def carry_chain(d, ins, mods):
    """Extended-precision arithmetic through the carry flag CC.CF (Decoder.carry_flag): add.cc and
    sub.cc write the carry (sub: the borrow) out of a + b, a - b; addc and subc add it in (a + b + CF,
    a - (b + CF)) and write the new one with .cc; mad{.lo,.hi}.cc adds c to the low or high half of
    a * b and writes the carry of that addition, madc adds CF too.  The sums are of the bits, so .s
    and .u types give the same bits and the same carry."""
    base = mods.base
    carry_in = base.endswith("c")
    carry_out = not carry_in or mods.flag("cc")
    part = mods.take("lo", "hi") if base.startswith("mad") else None
    if base.startswith("mad") and part is None:
        raise d.error(f"{base} needs .lo or .hi", PtxSyntaxError)
    t = mods.type()
    require(d, t.kind in ("u", "s") and t.bits in (32, 64), f"{base}.{t.name} is not supported (.u32, .s32, "
            ".u64, .s64)")
    ops = d.operands(ins, 4 if part else 3)
    write = d.writer(ops[0], t)
    readers = [d.reader(x, t) for x in ops[1:]]
    flag = d.carry_flag()
    unsigned = t.unsigned
    subtract = base.startswith("sub")
    product = None if part is None else (np.multiply if part == "lo" else mul_hi(t))

    def run(m, idx):
        values = [np.asarray(r(m, idx)) for r in readers]
        if product is not None:
            values = [np.asarray(product(values[0], values[1])), values[2]]
        a, b = (np.broadcast_to(v, (lanes(m, idx),)).view(unsigned) for v in values)
        carry = (m.regs[flag] if idx is None else m.regs[flag][idx]) if carry_in else None
        result, out = (_subtract_with_borrow if subtract else _add_with_carry)(a, b, carry)
        write(m, idx, result.view(t.dtype))
        if carry_out:
            if idx is None:
                m.regs[flag][:] = out
            else:
                m.regs[flag][idx] = out
    return plain(run)


# ------------------------------------------------------------------ div rem

def _integer_division(d, ins, t: PtxType, op) -> Semantics:
    """div or rem of integers; a zero divisor gives all ones (-1, or the largest unsigned value), as the
    code ptxas makes of every width does (its last step selects ~0 where the divisor is 0; a constant
    zero divisor it folds to the same), where PTX leaves the value unspecified.  No fault: the GPU has
    none, and compilers divide speculatively (Triton's persistent loops compute the next tile's index
    past the last one, dividing by a zero group size, and never use it)."""
    ops = d.operands(ins, 3)
    write = d.writer(ops[0], t)
    ra, rb = d.reader(ops[1], t), d.reader(ops[2], t)
    all_ones = np.array(-1).astype(t.unsigned).view(t.dtype)

    def run(m, idx):
        a, b = ra(m, idx), rb(m, idx)
        zero = np.asarray(b) == 0
        if zero.any():
            write(m, idx, np.where(zero, all_ones, op(a, np.where(zero, np.ones_like(b), b))))
            return
        write(m, idx, op(a, b))
    return plain(run)


def _divide_by_unit(full: bool, ftz: bool, constant: bool):
    """div.approx / div.full of f32 as ptxas writes them for sm_90 (its SASS): the dividend times MUFU.RCP of
    the divisor, both operands first scaled by 1/4 where the divisor is above 2^126 (.full) and, without
    .ftz, by 2^24 where it is subnormal; the product is one rounded FMUL (a NaN the canonical one).  A
    `constant` divisor's reciprocal ptxas computes itself, correctly rounded."""
    reciprocal = (lambda b: np.float32(1) / b) if constant else mufu.mufu_rcp
    def scaled(a, b, where, factor):
        return np.where(where, a * factor, a), np.where(where, b * factor, b)

    def divide(a, b):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        magnitude = np.abs(b)
        with np.errstate(all="ignore"):
            if full:
                large = magnitude > np.float32(2.0 ** 126)
                if np.count_nonzero(large):
                    a, b = scaled(a, b, large, np.float32(0.25))
            if not ftz:
                small = magnitude < np.float32(2.0 ** -126)
                if np.count_nonzero(small):
                    a, b = scaled(a, b, small, np.float32(2.0 ** 24))
            out = (reciprocal(b) * a).astype(np.float32)
        return nx.arithmetic_nan(out)
    return divide


@opcode("div")
def build_div(d, ins, mods):
    t = mods.type()
    if not t.is_float:
        int_type(d, t, "div")
        return _integer_division(d, ins, t, nx.div_trunc)
    approx = mods.take("approx", "full")
    if approx:
        require(d, t.name == "f32", f"div.{approx} is for .f32")
        constant = isinstance(d.operands(ins, 3)[2], syn.Imm)
        unit = _divide_by_unit(approx == "full", "ftz" in mods.words, constant)
        return elementwise(d, ins, t, [t, t], with_ftz_sat(mods, unit, sat_allowed=False))
    mode = float_modifiers(d, mods, t, default=None)
    div = _DIV[t.bits]
    return elementwise(d, ins, t, [t, t], with_ftz_sat(mods, lambda a, b: div(a, b, mode),
                                                         sat_allowed=False))


@opcode("rem")
def build_rem(d, ins, mods):
    t = mods.type()
    int_type(d, t, "rem")
    return _integer_division(d, ins, t, nx.rem_trunc)


# ------------------------------------------------------------------ unary, min/max

def _float_sign_op(fn):
    """abs or neg of floats, whose NaN is an arithmetic one (an H100): f64 passes a NaN through
    quieted, sign and all (neg.f64 of 0xFFF4000020000000 is 0xFFFC000020000000); f32 gives the
    canonical NaN."""
    def apply(a):
        a = np.asarray(a)
        return nx.arithmetic_nan(fn(a), a)
    return apply


@opcode("abs", "neg")
def build_abs_neg(d, ins, mods):
    t = mods.type()
    fn = np.abs if mods.base == "abs" else np.negative
    if t.name in HALF_ELEMENT:
        return half_arithmetic(d, ins, mods, t)
    if t.is_float:
        float_only(d, mods, t)
        return elementwise(d, ins, t, [t], with_ftz_sat(mods, _float_sign_op(fn), sat_allowed=False))
    require(d, t.kind == "s", f"{mods.base} takes a signed integer type")
    return elementwise(d, ins, t, [t], fn)


@opcode("min", "max")
def build_min_max(d, ins, mods):
    t = mods.type()
    is_min = mods.base == "min"
    if t.name in HALF_ELEMENT:
        return half_arithmetic(d, ins, mods, t)
    if t.is_float:
        float_only(d, mods, t)
        xorsign = mods.flag("xorsign")
        require(d, xorsign == mods.flag("abs") and not (xorsign and t.name == "f64"),
                ".xorsign.abs is written so, of .f32 (and 16-bit floats)")
        fn = nx.extreme(larger=not is_min, nan_wins=mods.flag("NaN"), xorsign_abs=xorsign)
        return elementwise(d, ins, t, [t, t], with_ftz_sat(mods, fn, sat_allowed=False))
    int_type(d, t, mods.base)
    return elementwise(d, ins, t, [t, t], np.minimum if is_min else np.maximum)


@opcode("copysign")
def build_copysign(d, ins, mods):
    t = mods.type()
    float_only(d, mods, t)
    return elementwise(d, ins, t, [t, t], lambda a, b: np.copysign(b, a))


_TESTP = {
    "finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x),
    "notanumber": np.isnan,
    "normal": lambda x: np.isfinite(x) & (np.abs(x) >= np.finfo(x.dtype).tiny),
    "subnormal": lambda x: (x != 0) & (np.abs(x) < np.finfo(x.dtype).tiny),
}


@opcode("testp")
def build_testp(d, ins, mods):
    test = mods.take(*_TESTP)
    if test is None:
        raise d.error("testp needs a test (.finite, .infinite, .number, ...)", PtxSyntaxError)
    t = mods.type()
    float_only(d, mods, t)
    fn = _TESTP[test]
    return elementwise(d, ins, PRED, [t], lambda a: fn(np.asarray(a)))


# ------------------------------------------------------------------ rcp sqrt and approximations

# The `.approx` functions computed in float64 and rounded (docs/emulator.md gives their distance from the
# GPU's) where mufu.py does not model the GPU's unit.
_ROUNDED = {
    "rcp": lambda x: 1.0 / x, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "ex2": np.exp2, "lg2": np.log2, "sin": nx.sin_approx, "cos": nx.cos_approx, "tanh": np.tanh,
}
_HALVES = ("f16", "f16x2", "bf16", "bf16x2")
# The types of each `.approx` instruction (rcp's and sqrt's other forms are IEEE operations).
APPROX_TYPES = {"rcp": ("f32", "f64"), "sqrt": ("f32",), "rsqrt": ("f32", "f64"), "lg2": ("f32",),
                "sin": ("f32",), "cos": ("f32",), "ex2": ("f32",) + _HALVES, "tanh": ("f32",) + _HALVES}


def approx_function(op: str, type_name: str, ftz: bool):
    """`op.approx{.ftz}.<type_name>` as a function of register values: the GPU's unit where mufu.py models
    it (the 16-bit forms' tables hold what they flush), else float64 rounded, flushed under .ftz."""
    if type_name in _HALVES:
        return mufu.approx_16(op, type_name)
    if type_name == "f32" and op in mufu.F32_FORMS:
        return mufu.approx_f32(op, ftz)
    rounded = nx.approximate(_ROUNDED[op])
    return (lambda x: nx.flush(rounded(nx.flush(x)))) if ftz else rounded


def _approximation(d, ins, mods):
    t = mods.type()
    require(d, t.name in APPROX_TYPES[mods.base], f"{mods.base}.approx.{t.name} is not supported")
    return elementwise(d, ins, t, [t], approx_function(mods.base, t.name, mods.flag("ftz")))


@opcode("rcp")
def build_rcp(d, ins, mods):
    if mods.flag("approx"):
        return _approximation(d, ins, mods)
    t = mods.type()
    mode = float_modifiers(d, mods, t, default=None)
    div = _DIV[t.bits]
    one = t.dtype.type(1)
    return elementwise(d, ins, t, [t], with_ftz_sat(mods, lambda a: div(one, a, mode),
                                                     sat_allowed=False))


@opcode("sqrt")
def build_sqrt(d, ins, mods):
    if mods.flag("approx"):
        return _approximation(d, ins, mods)
    t = mods.type()
    mode = float_modifiers(d, mods, t, default=None)
    sqrt = _SQRT[t.bits]
    return elementwise(d, ins, t, [t], with_ftz_sat(mods, lambda a: sqrt(a, mode), sat_allowed=False))


@opcode("rsqrt", "ex2", "lg2", "sin", "cos", "tanh")
def build_approx(d, ins, mods):
    if not mods.flag("approx"):
        raise d.error(f"{mods.base} needs .approx", PtxSyntaxError)
    return _approximation(d, ins, mods)


# ------------------------------------------------------------------ bits

def _bit_type(d, mods, allow_pred: bool = False) -> PtxType:
    t = mods.type()
    require(d, (t.kind == "pred" and allow_pred) or (t.kind in ("b", "u", "s") and t.bits >= 16),
            f"{mods.base}.{t.name} is not supported")
    return t


@opcode("and", "or", "xor")
def build_logic(d, ins, mods):
    t = _bit_type(d, mods, allow_pred=True)
    fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[mods.base]
    return elementwise(d, ins, t, [t, t], fn)


@opcode("not")
def build_not(d, ins, mods):
    t = _bit_type(d, mods, allow_pred=True)
    return elementwise(d, ins, t, [t], np.invert)


@opcode("cnot")
def build_cnot(d, ins, mods):
    t = _bit_type(d, mods)
    return elementwise(d, ins, t, [t], lambda a: (np.asarray(a) == 0).astype(t.dtype))


@opcode("shl", "shr")
def build_shift(d, ins, mods):
    t = _bit_type(d, mods)
    left = mods.base == "shl"
    require(d, not left or t.kind == "b", "shl takes a .b type")
    bits = t.bits
    zero = t.dtype.type(0)

    def shift(a, b):
        b = np.asarray(b)
        amount = np.minimum(b, bits - 1).astype(t.dtype)
        if left:
            return np.where(b >= bits, zero, np.left_shift(a, amount))
        if t.is_signed:  # arithmetic: large shifts fill with the sign
            return np.right_shift(a, amount)
        return np.where(b >= bits, zero, np.right_shift(a, amount))
    return elementwise(d, ins, t, [t, U32], shift)


def _clz32(v):
    v = np.asarray(v, np.uint32)
    _, e = np.frexp(v.astype(np.float64))
    return (32 - e).astype(np.uint32)


def _clz(t):
    if t.bits == 32:
        return _clz32
    mask = np.uint64(0xFFFFFFFF)
    return lambda v: np.where((np.asarray(v) >> np.uint64(32)) != 0,
                              _clz32((np.asarray(v) >> np.uint64(32)).astype(np.uint32)),
                              32 + _clz32((np.asarray(v) & mask).astype(np.uint32))).astype(np.uint32)


_BIT_REVERSED_BYTES = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint8)


def _brev(t):
    def brev(v):
        a = np.ascontiguousarray(np.atleast_1d(v))
        rev = _BIT_REVERSED_BYTES[a.view(np.uint8).reshape(-1, t.bits // 8)[:, ::-1]]
        return np.ascontiguousarray(rev).view(t.dtype).reshape(np.shape(v))
    return brev


@opcode("popc", "clz", "brev")
def build_bit_count(d, ins, mods):
    t = _bit_type(d, mods)
    require(d, t.bits in (32, 64), f"{mods.base}.{t.name} is not supported")
    if mods.base == "brev":
        return elementwise(d, ins, t, [t], _brev(t))
    if mods.base == "popc":
        return elementwise(d, ins, U32, [t], lambda v: np.bitwise_count(v).astype(np.uint32))
    return elementwise(d, ins, U32, [t], _clz(t))


def _low_bits(count, width: int):
    """Masks of `count` low one bits (count may be up to width), as uint64."""
    count = np.asarray(count, np.uint64)
    full = np.uint64((1 << width) - 1)
    return np.where(count >= width, full, (np.uint64(1) << np.minimum(count, 63)) - np.uint64(1))


def _field(v):
    """A bit-field position or length operand: its low 8 bits, as uint64."""
    return np.asarray(v).astype(np.uint64) & np.uint64(0xFF)


@opcode("bfe")
def build_bfe(d, ins, mods):
    """Extract len bits at pos, zero- or sign-extended (pos, len: low 8 bits of b, c)."""
    t = _bit_type(d, mods)
    require(d, t.bits in (32, 64) and t.kind in ("u", "s"), f"bfe.{t.name} is not supported")
    w = t.bits

    def bfe(a, b, c):
        raw = np.asarray(a).view(t.unsigned).astype(np.uint64)
        pos, length = _field(b), _field(c)
        take = np.minimum(length, np.where(pos >= w, 0, w - pos).astype(np.uint64))
        field = np.where(pos >= w, np.uint64(0), raw >> np.minimum(pos, w - 1)) & _low_bits(take, w)
        if t.is_signed:  # fill with the field's top bit (or the operand's sign bit)
            top = np.minimum(pos + length - np.uint64(1), np.uint64(w - 1))
            sign = ((raw >> np.where(length == 0, np.uint64(0), top)) & np.uint64(1)).astype(bool)
            sign &= length != 0
            field = np.where(sign, field | (_low_bits(w, w) & ~_low_bits(take, w)), field)
        return field.astype(t.unsigned).view(t.dtype)
    return elementwise(d, ins, t, [t, U32, U32], bfe)


@opcode("bfi")
def build_bfi(d, ins, mods):
    """Insert the len low bits of f into b at pos."""
    t = _bit_type(d, mods)
    require(d, t.name in ("b32", "b64"), f"bfi.{t.name} is not supported")
    w = t.bits

    def bfi(f, b, c, e):
        pos, length = _field(c), _field(e)
        take = np.minimum(length, np.where(pos >= w, 0, w - pos).astype(np.uint64))
        mask = (_low_bits(take, w) << np.minimum(pos, w - 1)) & _low_bits(w, w)
        f64, b64 = np.asarray(f).astype(np.uint64), np.asarray(b).astype(np.uint64)
        out = (b64 & ~mask) | ((f64 << np.minimum(pos, w - 1)) & mask)
        return out.astype(t.dtype)
    ops = d.operands(ins, 5)
    write = d.writer(ops[0], t)
    rf, rb, rc, re = d.reader(ops[1], t), d.reader(ops[2], t), d.reader(ops[3], U32), d.reader(ops[4], U32)
    return plain(lambda m, idx: write(m, idx, bfi(rf(m, idx), rb(m, idx), rc(m, idx), re(m, idx))))


@opcode("bfind")
def build_bfind(d, ins, mods):
    """Position of the most significant non-sign bit (0xFFFFFFFF if none); .shiftamt: the
    left shift that would move it to the top."""
    shift_amount = mods.flag("shiftamt")
    t = _bit_type(d, mods)
    require(d, t.bits in (32, 64) and t.kind in ("u", "s"), f"bfind.{t.name} is not supported")
    clz = _clz(TYPES[f"b{t.bits}"])

    def bfind(a):
        raw = np.asarray(a).view(t.unsigned)
        if t.is_signed:
            raw = np.where(np.asarray(a) < 0, ~raw, raw)
        zeros = clz(raw).astype(np.int64)
        found = np.int64(t.bits - 1) - zeros
        result = zeros if shift_amount else found
        return np.where(raw == 0, np.uint32(0xFFFFFFFF), result.astype(np.uint32))
    return elementwise(d, ins, U32, [t], bfind)


@opcode("prmt")
def build_prmt(d, ins, mods):
    """Byte permute: each selector nibble of c picks one of the 8 bytes of {b, a}
    (bit 3 of the nibble: replicate that byte's sign instead)."""
    t = _bit_type(d, mods)
    require(d, t.name == "b32", "only prmt.b32 in its default mode is supported")

    def prmt(a, b, c):
        pool = (np.asarray(b).astype(np.uint64) << np.uint64(32)) | np.asarray(a).astype(np.uint64)
        c = np.asarray(c).astype(np.uint64)
        out = np.zeros(np.broadcast(pool, c).shape, np.uint64)
        for k in range(4):
            sel = (c >> np.uint64(4 * k)) & np.uint64(0xF)
            byte = (pool >> ((sel & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
            byte = np.where((sel & np.uint64(8)) != 0, np.where(byte & np.uint64(0x80), 0xFF, 0), byte)
            out |= byte.astype(np.uint64) << np.uint64(8 * k)
        return out.astype(np.uint32)
    return elementwise(d, ins, t, [t, t, t], prmt)


@opcode("lop3")
def build_lop3(d, ins, mods):
    """Any logic function of three operands, bit by bit: bit i of the 8-bit table immLut is the result
    for the operand bits (a, b, c) = (i >> 2 & 1, i >> 1 & 1, i & 1) (PTX: immLut = F(0xF0, 0xCC, 0xAA))."""
    t = _bit_type(d, mods)
    require(d, t.name == "b32", "lop3 is .b32")
    ops = d.operands(ins, 5)
    table = ops[4]
    if not isinstance(table, syn.Imm) or table.kind != "int" or not 0 <= table.value <= 0xFF:
        raise d.error("lop3's lookup table is an integer constant 0..255", PtxSyntaxError)
    minterms = [i for i in range(8) if table.value >> i & 1]

    def lop3(a, b, c):
        out = np.uint32(0)
        for i in minterms:
            out = out | ((a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c))
        return out
    write = d.writer(ops[0], t)
    ra, rb, rc = (d.reader(x, t) for x in ops[1:4])
    return plain(lambda m, idx: write(m, idx, lop3(ra(m, idx), rb(m, idx), rc(m, idx))))


@opcode("shf")
def build_shf(d, ins, mods):
    """Funnel shift of the 64-bit {b, a} by c (.wrap: c mod 32, .clamp: at most 32)."""
    direction = mods.take("l", "r")
    mode = mods.take("wrap", "clamp")
    if direction is None or mode is None:
        raise d.error("shf needs .l or .r and .wrap or .clamp", PtxSyntaxError)
    t = _bit_type(d, mods)
    require(d, t.name == "b32", "shf is .b32")

    def shf(a, b, c):
        pair = (np.asarray(b).astype(np.uint64) << np.uint64(32)) | np.asarray(a).astype(np.uint64)
        c = np.asarray(c).astype(np.uint64)
        n = c & np.uint64(31) if mode == "wrap" else np.minimum(c, np.uint64(32))
        shifted = (pair << n) >> np.uint64(32) if direction == "l" else pair >> n
        return (shifted & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    return elementwise(d, ins, t, [t, t, U32], shf)


# ------------------------------------------------------------------ setp selp

_INT_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}
_UNSIGNED_COMPARE = {"lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}
_FLOAT_COMPARE = {
    "eq": np.equal, "ne": lambda a, b: (a < b) | (a > b), "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
    "equ": lambda a, b: ~((a < b) | (a > b)), "neu": np.not_equal,
    "ltu": lambda a, b: ~(a >= b), "leu": lambda a, b: ~(a > b),
    "gtu": lambda a, b: ~(a <= b), "geu": lambda a, b: ~(a < b),
    "num": lambda a, b: ~(np.isnan(a) | np.isnan(b)), "nan": lambda a, b: np.isnan(a) | np.isnan(b),
}
_BOOL_OPS = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


def comparison(d, mods, t: PtxType):
    """(a, b) -> the comparison the modifiers name, of operands in t's storage (a 16-bit float pair: in
    the storage of its element type; bf16 compared by value, not by its bits)."""
    cmp = mods.take(*_FLOAT_COMPARE, *_UNSIGNED_COMPARE)
    if cmp is None:
        raise d.error(f"{mods.base} needs a comparison (.eq, .lt, ...)", PtxSyntaxError)
    if t.is_float or t.name in HALF_ELEMENT:
        require(d, cmp in _FLOAT_COMPARE, f"{mods.base}.{cmp} is not a floating-point comparison")
        fn = _FLOAT_COMPARE[cmp]
        if HALF_ELEMENT.get(t.name) == "bf16":
            to_f64 = _to_f64(TYPES["bf16"], False)
            compare = fn
            fn = lambda a, b: compare(to_f64(a), to_f64(b))  # noqa: E731
        if mods.flag("ftz"):
            return lambda a, b: fn(nx.flush(a), nx.flush(b))
        return fn
    require(d, t.kind != "pred", f"{mods.base}.pred is not supported")
    if cmp in _UNSIGNED_COMPARE:
        require(d, t.kind in ("u", "b"), f"{mods.base}.{cmp} needs an unsigned type")
        return _UNSIGNED_COMPARE[cmp]
    require(d, cmp in _INT_COMPARE, f"{mods.base}.{cmp} is not an integer comparison")
    require(d, t.kind != "b" or cmp in ("eq", "ne"), f"{mods.base}.{cmp}.{t.name}: use .u or .s types")
    return _INT_COMPARE[cmp]


@opcode("setp")
def build_setp(d, ins, mods):
    """setp: p = a CmpOp b (BoolOp c), and q its negation (BoolOp c); of 16-bit float pairs (.f16x2,
    .bf16x2) p is the low halves' comparison and q the high halves'."""
    bool_name = mods.take(*_BOOL_OPS)
    t = mods.type()
    cmp = comparison(d, mods, t)
    ops = d.operands(ins, 4 if bool_name else 3)
    dest = ops[0]
    pairwise_halves = t.name in ("f16x2", "bf16x2")
    if pairwise_halves and not isinstance(dest, syn.Pair):
        raise d.error(f"setp.{t.name} writes two predicates p|q", PtxSyntaxError)
    if isinstance(dest, syn.Pair):
        write_p, write_q = d.writer(dest.first, PRED), d.writer(dest.second, PRED)
    else:
        write_p, write_q = d.writer(dest, PRED), None
    ra, rb = d.reader(ops[1], t), d.reader(ops[2], t)
    rc = d.reader(ops[3], PRED) if bool_name else None
    combine = _BOOL_OPS.get(bool_name)
    element = TYPES[HALF_ELEMENT[t.name]].dtype if pairwise_halves else None

    def half(v, shift):
        return np.asarray((np.asarray(v, np.uint32) >> np.uint32(shift)) & np.uint32(0xFFFF), np.uint16).view(element)

    def run(m, idx):
        a, b = ra(m, idx), rb(m, idx)
        if pairwise_halves:
            r, s = cmp(half(a, 0), half(b, 0)), cmp(half(a, 16), half(b, 16))
        else:
            r = cmp(a, b)
            s = ~r
        if combine is not None:
            c = rc(m, idx)
            r, s = combine(r, c), combine(s, c)
        write_p(m, idx, r)
        if write_q is not None:
            write_q(m, idx, s)
    return plain(run)


@opcode("selp")
def build_selp(d, ins, mods):
    t = mods.type()
    return elementwise(d, ins, t, [t, t, PRED], lambda a, b, c: np.where(c, a, b).astype(t.dtype))


# ------------------------------------------------------------------ mov

@opcode("mov")
def build_mov(d, ins, mods):
    t = mods.type()
    dst, src = d.operands(ins, 2)
    if isinstance(dst, syn.Vector) or isinstance(src, syn.Vector):
        return _pack_unpack(d, t, dst, src)
    return elementwise(d, ins, t, [t], lambda a: a)


def _pack_unpack(d, t: PtxType, dst, src) -> Semantics:
    """`mov.b64 d, {a, b}` packs (first element least significant); `mov.b64 {a, b}, d` unpacks."""
    packing = isinstance(src, syn.Vector)
    items = (src if packing else dst).items
    require(d, t.kind == "b" and len(items) in (2, 4) and t.bits // len(items) >= 8,
            "vector mov needs a .b type split into 2 or 4 parts")
    width = t.bits // len(items)
    part = TYPES[f"b{width}"]
    shifts = [np.uint8(k * width) for k in range(len(items))]
    if packing:
        readers = [d.reader(x, part) for x in items]
        write = d.writer(dst, t)

        def pack(m, idx):
            value = t.dtype.type(0)
            for r, s in zip(readers, shifts):
                value = value | (np.asarray(r(m, idx)).astype(t.dtype) << s)
            write(m, idx, value)
        return plain(pack)
    read = d.reader(src, t)
    writers = [d.writer(x, part) for x in items]

    def unpack(m, idx):
        value = np.asarray(read(m, idx))
        for w, s in zip(writers, shifts):
            w(m, idx, (value >> s).astype(part.dtype))
    return plain(unpack)


# ------------------------------------------------------------------ cvt

def _to_f64(t: PtxType, ftz: bool):
    """Exact float64 value of a float operand (`.ftz`: f32 subnormals read as zero)."""
    if t.kind == "bf":
        return lambda v: (np.asarray(v).astype(np.uint32) << np.uint8(16)).view(np.float32).astype(np.float64)
    if ftz and t.name == "f32":
        return lambda v: nx.flush(v).astype(np.float64)
    return lambda v: np.asarray(v).astype(np.float64)


_CANONICAL_NAN = {"f16": 0x7FFF, "bf16": 0x7FFF, "f32": 0x7FFFFFFF}


# ------------------------------------------------------------------ 16-bit floats and their pairs

HALF_ELEMENT = {"f16": "f16", "bf16": "bf16", "f16x2": "f16", "bf16x2": "bf16"}  # a type -> its element type

# (float64 operand values) -> (float64 r, the sign of an error e or None): the exact result is r + e, r its
# value rounded to float64 (exact for the products of two 16-bit values; TwoSum gives e of the sums)
_EXACT = {
    "add": nx.two_sum,
    "sub": lambda a, b: nx.two_sum(a, -b),
    "mul": lambda a, b: (a * b, None),
    "fma": lambda a, b, c: nx.two_sum(a * b, c),
}


def half_operation(t: PtxType, op: str, ftz: bool = False, sat: bool = False, relu: bool = False):
    """(operands in the storage of the 16-bit float type t) -> `op` (add, sub, mul, fma) of their values
    rounded once to nearest even into t's format (every exact result is r + e, `_EXACT`), in t's storage:
    a NaN the canonical 0x7FFF (PTX: f16 and bf16 NaN results are canonical), an overflow infinity.
    `.ftz`: subnormal operands and results are zeros of their sign; `.relu`: negative results (-0.0 too,
    as cvt's .relu does on an H100) are +0.0; `.sat`: the result clamped to [0, 1], NaN to +0.0."""
    fmt = FORMATS[t.name]
    to_f64, encode, exact = _to_f64(t, False), _encode(t, t), _EXACT[op]

    def apply(*xs):
        values = [to_f64(x) for x in xs]
        if ftz:
            values = [nx.flush_format(v, fmt) for v in values]
        r, err = exact(*values)
        x = nx.round_to_format(r, err, fmt, "rn")
        if ftz:
            x = nx.flush_format(x, fmt)
        if relu:
            x = np.where(np.signbit(x) & ~np.isnan(x), 0.0, x)
        if sat:
            x = nx.saturate(x)
        return encode(x, x)
    return apply


def half_sum(t: PtxType):
    """a + b of two f16 or bf16 operands in t's storage (`half_operation`): `add` of 16-bit floats and
    `atom.add.noftz` of them."""
    return half_operation(t, "add")


def half_sign(t: PtxType, negate: bool, ftz: bool = False):
    """neg or abs of 16-bit floats in t's storage: the sign changed, a NaN the canonical 0x7FFF (as
    f32's FADD-made neg and abs give the canonical NaN; PTX leaves it unspecified)."""
    fmt = FORMATS[t.name]
    to_f64, encode = _to_f64(t, False), _encode(t, t)

    def apply(a):
        x = to_f64(a)
        if ftz:
            x = nx.flush_format(x, fmt)
        x = -x if negate else np.abs(x)
        return encode(x, x)
    return apply


def half_extreme(t: PtxType, larger: bool, nan_wins: bool, xorsign_abs: bool, ftz: bool = False):
    """max (larger) or min of 16-bit floats in t's storage, as for f32 (`numerics.extreme`; two NaNs, or
    under .NaN any, give the canonical NaN 0x7FFF); `.xorsign.abs`: of the magnitudes, with the sign the
    exclusive or of the operands' signs (a NaN result keeps none)."""
    fmt = FORMATS[t.name]
    to_f64, encode = _to_f64(t, False), _encode(t, t)
    pick = nx.extreme(larger, nan_wins, xorsign_abs)

    def apply(a, b):
        x, y = to_f64(a), to_f64(b)
        if ftz:
            x, y = nx.flush_format(x, fmt), nx.flush_format(y, fmt)
        out = np.asarray(pick(x.astype(np.float32), y.astype(np.float32)), np.float64)  # exact
        return encode(out, out)
    return apply


def pairwise(fn, element: PtxType):
    """`fn` of 16-bit operands (in `element`'s storage) applied to each half of packed .b32 pairs."""
    def apply(*words):
        out = np.uint32(0)
        for shift in (np.uint32(0), np.uint32(16)):
            halves = [np.asarray((np.asarray(w, np.uint32) >> shift) & np.uint32(0xFFFF), np.uint16).view(element.dtype)
                      for w in words]
            out = out | (np.asarray(fn(*halves)).view(np.uint16).astype(np.uint32) << shift)
        return out
    return apply


def _half_flags(d, mods, t: PtxType, *names: str) -> dict:
    """The modifiers `names` of a 16-bit float instruction, of which bf16 takes none but .relu, .NaN and
    .xorsign.abs (PTX gives it no .ftz and no .sat)."""
    element = HALF_ELEMENT[t.name]
    return {name: mods.flag(name) for name in names
            if element == "f16" or name in ("relu", "NaN", "xorsign")}


def half_arithmetic(d, ins, mods, t: PtxType) -> Semantics:
    """add, sub, mul, fma (and fma's alias mad), neg, abs, min and max of .f16, .bf16 and their packed
    pairs .f16x2, .bf16x2 (PTX ISA, "Half Precision Floating-Point Instructions"): each element as
    `half_operation`, `half_sign` or `half_extreme` compute it."""
    element = TYPES[HALF_ELEMENT[t.name]]
    op = mods.base
    if op in ("add", "sub", "mul", "fma", "mad"):
        mode = mods.take(*ROUNDING)
        require(d, mode in ("rn", None), f"{op}.{mode} is not valid for .{t.name} (only .rn)")
        if op in ("fma", "mad") and mode is None:
            raise d.error(f"{op}.{t.name} needs .rn", PtxSyntaxError)
        flags = _half_flags(d, mods, t, "ftz", "sat", *(["relu"] if op in ("fma", "mad") else []))
        arity = 3 if op in ("fma", "mad") else 2
        fn = half_operation(element, "fma" if arity == 3 else op, **flags)
    elif op in ("neg", "abs"):
        arity, fn = 1, half_sign(element, op == "neg", **_half_flags(d, mods, t, "ftz"))
    else:
        flags = _half_flags(d, mods, t, "ftz", "NaN", "xorsign")
        xorsign = flags.pop("xorsign")
        require(d, xorsign == mods.flag("abs"), ".xorsign is written .xorsign.abs")
        arity = 2
        fn = half_extreme(element, op == "max", flags["NaN"], xorsign, flags.get("ftz", False))
    return elementwise(d, ins, t, [t] * arity, fn if element is t else pairwise(fn, element))


def _encode(t: PtxType, src: PtxType):
    """(float64 values representable in t, the source operands) -> t's storage.  A NaN keeps its
    payload where the GPU keeps it (constants.py, 'casts'): to f64 quieted, f64 -> f32 its sign and
    top bits (`narrow_nan`); every other NaN result is the format's canonical NaN."""
    if t.name == "f64":
        return lambda x, v: nx.quiet(np.asarray(x, np.float64))
    if t.kind == "bf":
        def encode_bf16(x, v):
            bits = (np.asarray(x).astype(np.float32).view(np.uint32) >> np.uint8(16)).astype(np.uint16)
            return np.where(np.isnan(x), np.uint16(0x7FFF), bits)
        return encode_bf16
    canonical = t.unsigned.type(_CANONICAL_NAN[t.name])
    keeps_payload = (src.name, t.name) == ("f64", "f32")

    def encode(x, v):
        out = np.asarray(x).astype(t.dtype).view(t.unsigned)
        nan = np.asarray(narrow_nan(v)).view(t.unsigned) if keeps_payload else canonical
        return np.where(np.isnan(x), nan, out).view(t.dtype)
    return encode


def _round_exact(x, t: PtxType, mode: str):
    """Round exact float64 values to t's format (the result is float64)."""
    if t.name == "f64":
        return x
    if t.name == "f32" and mode == "rn":
        return np.asarray(x).astype(np.float32).astype(np.float64)
    return nx.round_to_format(np.asarray(x, np.float64), None, FORMATS[t.name], mode)


def _int_to_float(src: PtxType, dst: PtxType, mode: str):
    """Integers -> rounded float64 values of dst's format."""
    if src.bits <= 32:
        return lambda v: _round_exact(np.asarray(v).astype(np.float64), dst, mode)
    fmt = FORMATS[dst.name]

    def convert(v):
        v = np.atleast_1d(v)
        x = v.astype(np.float64)
        big = np.abs(x) >= 2.0 ** 53  # not exact in float64: round the integer itself
        out = np.array(_round_exact(np.where(big, 0.0, x), dst, mode), np.float64)
        if big.any():
            out[big] = nx.exact_lanes(lambda i: Fraction(int(i)), v[big], fmt=fmt, mode=mode)
        return out
    return convert


def _float_to_int(src: PtxType, dst: PtxType, irnd: str, ftz: bool):
    """Floats -> integers, rounded as irnd says and saturated to dst's range; a NaN gives
    `cvt_nan_integer`'s bits (0, or 1 << (width - 1) from f64 or into 64 bits)."""
    to_f64 = _to_f64(src, ftz)
    rnd = INT_ROUNDING[irnd]
    info = np.iinfo(dst.dtype)
    nan = np.array(cvt_nan_integer(src.bits, dst.bits), np.uint64).astype(dst.unsigned).view(dst.dtype)
    if dst.bits < 64:
        def convert_narrow(v):
            x = rnd(to_f64(v))
            inside = np.clip(np.nan_to_num(x, nan=0.0), info.min, info.max).astype(dst.dtype)
            return np.where(np.isnan(x), nan, inside)
        return convert_narrow
    top = 2.0 ** 64 if dst.kind == "u" else 2.0 ** 63  # the first value out of range
    bottom = 0.0 if dst.kind == "u" else -(2.0 ** 63)

    def convert(v):
        r = rnd(to_f64(v))
        x = np.nan_to_num(r, nan=0.0, posinf=top, neginf=bottom)
        inside = np.clip(x, bottom, np.nextafter(top, 0)).astype(dst.dtype)
        return np.where(np.isnan(r), nan, np.where(x >= top, dst.dtype.type(info.max), inside))
    return convert


def _saturate_int(src: PtxType, dst: PtxType):
    s, t = np.iinfo(src.dtype), np.iinfo(dst.dtype)
    lo, hi = src.dtype.type(max(s.min, t.min)), src.dtype.type(min(s.max, t.max))
    return lambda v: np.clip(v, lo, hi).astype(dst.dtype)


def _float_value(d, src: PtxType, dst: PtxType, frnd, irnd, ftz: bool):
    """Floats -> float64 values of dst's format (before .relu/.sat)."""
    to_f64 = _to_f64(src, ftz)
    if irnd is not None:
        require(d, src == dst and frnd is None, "integer rounding of a float keeps its type")
        rnd = INT_ROUNDING[irnd]
        return lambda v: rnd(to_f64(v))
    if dst.bits > src.bits:
        require(d, frnd is None, "a widening conversion is exact and takes no rounding modifier")
        return to_f64
    mode = frnd or "rn"
    if (src.name, dst.name, mode) == ("f32", "f16", "rn"):  # (f16's storage, which encode keeps)
        return (lambda v: nx.f32_to_f16(nx.flush(v))) if ftz else nx.f32_to_f16
    return lambda v: _round_exact(to_f64(v), dst, mode)


def _to_float(d, src: PtxType, dst: PtxType, frnd, irnd, ftz: bool, sat: bool, relu: bool,
              satfinite: bool):
    """The conversion of src values to dst's (float) storage, with its modifiers applied."""
    if src.is_float:
        value = _float_value(d, src, dst, frnd, irnd, ftz)
    else:
        require(d, irnd is None and not ftz, "bad modifier for an integer-to-float cvt")
        value = _int_to_float(src, dst, frnd or "rn")
    require(d, not (relu or satfinite) or dst.bits == 16, ".relu and .satfinite apply to .f16/.bf16 results")
    encode = _encode(dst, src)
    flush = ftz and dst.name == "f32"
    largest = FORMATS[dst.name].max_value
    if (src.name, dst.name, frnd or "rn") == ("f32", "f16", "rn") and not (relu or satfinite or sat):
        return value  # (f32_to_f16 gives the storage, its NaN canonical)

    def convert(v):
        x = value(v)
        if relu:
            x = np.where(x < 0, 0.0, x)
        if satfinite:
            x = np.clip(x, -largest, largest)
        if sat:
            x = nx.saturate(np.asarray(x))
        out = encode(x, v)
        return nx.flush(out) if flush else out
    return convert


def _pair_words(convert, high, low) -> np.ndarray:
    """32-bit words of convert(high) in the upper half and convert(low) in the lower, converted together
    (convert: f32 values -> 16-bit storage, elementwise)."""
    pairs = np.empty(np.broadcast_shapes(np.shape(high), np.shape(low)) + (2,), np.float32)
    pairs[..., 0], pairs[..., 1] = low, high  # (little-endian: the low half first)
    return np.ascontiguousarray(convert(pairs)).view(np.uint32)[..., 0]


def _pair_conversion(d, ins, dst: PtxType, src: PtxType, convert, key: tuple) -> Semantics:
    """`cvt d, a, b` of an f32 pair into a 16-bit pair: d = {convert(a) in the upper half, convert(b)
    in the lower}, fusable with the conversions of the same `key` (the form: `convert` is the same
    elementwise function of it), whose pairs it converts together."""
    ops = d.operands(ins, 3)
    write = d.writer(ops[0], dst)
    readers = [d.reader(o, src) for o in ops[1:]]

    def inputs(m, idx):
        return [np.broadcast_to(read(m, idx), (lanes(m, idx),)) for read in readers]

    def compute(m, operands, links):
        if len(operands) == 1:
            return [_pair_words(convert, *operands[0])]
        high, low = (np.concatenate(column) for column in zip(*operands))
        return np.split(_pair_words(convert, high, low), len(operands))

    def outputs(m, idx, result):
        write(m, idx, result)
    return fusable(Fusable(key, inputs, compute, outputs))


def _cvt_tf32(d, ins, mods) -> Semantics:
    """`cvt.rna{.satfinite}.tf32.f32` (also .rn and .rz): f32 rounded to 10 significand
    bits, kept as an f32 bit pattern with the 13 low bits zero."""
    mods.words.remove("tf32")
    mode = mods.take("rna", "rn", "rz")
    if mode is None:
        raise d.error("cvt.tf32.f32 needs .rna, .rn or .rz", PtxSyntaxError)
    satfinite = mods.flag("satfinite")
    require(d, mods.type().name == "f32", "cvt.tf32 converts .f32")
    largest = np.uint32(0x7F7FE000)

    def convert(a):
        bits = nx.round_to_tf32(a, mode)
        if satfinite:
            magnitude = bits & np.uint32(0x7FFFFFFF)
            clamp = (magnitude == np.uint32(0x7F800000))
            bits = np.where(clamp, (bits & np.uint32(0x80000000)) | largest, bits)
        return bits.astype(np.uint32)
    return elementwise(d, ins, TYPES["b32"], [TYPES["f32"]], convert)


# ------------------------------------------------------------------ cvt of 8-bit float pairs

F8_PAIRS = {"e4m3x2": DType.F8E4M3, "e5m2x2": DType.F8E5M2}


def half_bits(values):
    """f16 bit patterns of f32 values an f16 holds (NaN: the canonical 0x7FFF)."""
    out = np.asarray(values, np.float32).astype(np.float16).view(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FFF), out)


def _cvt_f8(d, ins, mods) -> Semantics:
    """`cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f32 d, a, b` (two f32: a's code the high byte of d) and
    `.f16x2 d, a` (the high half's code the high byte): to nearest even, beyond the largest finite value
    (and infinities) that value of the sign, NaN 0x7F (`constants.f8_bits`); and `cvt.rn{.relu}.f16x2.
    {e4m3x2,e5m2x2} d, a`: both codes widened exactly to f16, NaN the canonical f16 NaN 0x7FFF (as NVIDIA's
    cuda_fp8.hpp does it).  `.relu`: negative results, and -0.0, are +0."""
    dst, src = mods.types(2)
    relu = mods.flag("relu")
    if mods.take("rn") is None:
        raise d.error(f"cvt.{dst.name}.{src.name} needs .rn", PtxSyntaxError)
    if dst.name in F8_PAIRS:
        require(d, mods.flag("satfinite"), f"cvt to .{dst.name} needs .satfinite")
        require(d, src.name in ("f32", "f16x2"), f"cvt.{dst.name} converts .f32 pairs or .f16x2")
        fmt = F8_PAIRS[dst.name]

        def encode(x):
            x = np.asarray(x, np.float32)
            if relu:  # -0.0 too (an H100 gives the code 0x00 for it)
                x = np.where(np.signbit(x) & ~np.isnan(x), np.float32(0), x)
            return f8_bits(x, fmt).astype(np.uint16)

        if src.name == "f32":
            return elementwise(d, ins, dst, [src, src], lambda a, b: (encode(a) << np.uint16(8)) | encode(b))
        halves = lambda v, h: ((np.asarray(v, np.uint32) >> np.uint32(16 * h)) & np.uint32(0xFFFF)).astype(  # noqa: E731
            np.uint16).view(np.float16).astype(np.float32)
        return elementwise(d, ins, dst, [src], lambda v: (encode(halves(v, 1)) << np.uint16(8)) | encode(halves(v, 0)))
    require(d, dst.name == "f16x2" and src.name in F8_PAIRS, "cvt from an 8-bit float pair gives .f16x2")
    fmt = F8_PAIRS[src.name]

    def decode(v):
        v = np.asarray(v, np.uint16)
        out = np.zeros(v.shape, np.uint32)
        for h in (0, 1):
            x = f8_values((v >> np.uint16(8 * h)) & np.uint16(0xFF), fmt)
            if relu:
                x = np.where(x < 0, np.float32(0), x)
            out |= half_bits(x).astype(np.uint32) << np.uint32(16 * h)
        return out
    return elementwise(d, ins, dst, [src], decode)


@opcode("cvt")
def build_cvt(d, ins, mods):
    if "tf32" in mods.words:
        return _cvt_tf32(d, ins, mods)
    if any(w in F8_PAIRS for w in mods.words):
        return _cvt_f8(d, ins, mods)
    dst, src = mods.types(2)
    irnd = mods.take(*INT_ROUNDING)
    frnd = mods.take(*ROUNDING)
    ftz, sat, relu, satfinite = (mods.flag(f) for f in ("ftz", "sat", "relu", "satfinite"))
    require(d, dst.kind != "pred" and src.kind != "pred", "cvt does not take .pred")
    require(d, not ftz or "f32" in (src.name, dst.name), ".ftz applies to .f32 conversions")
    if dst.name in ("f16x2", "bf16x2"):
        require(d, src.name == "f32", f"cvt.{dst.name} converts pairs of .f32")
        half = TYPES[dst.name[:-2]]
        convert = _to_float(d, src, half, frnd, irnd, ftz, sat, relu, satfinite)
        return _pair_conversion(d, ins, dst, src, convert, ("cvt", dst.name, frnd, irnd, ftz, sat, relu, satfinite))
    require(d, all(x.name in FORMATS for x in (src, dst) if x.is_float),
            "cvt between packed float types is not supported")
    if dst.is_float:
        return elementwise(d, ins, dst, [src], _to_float(d, src, dst, frnd, irnd, ftz, sat, relu, satfinite))
    require(d, frnd is None and not relu and not satfinite, "bad rounding modifier for an integer result")
    if src.is_float:
        if irnd is None:
            raise d.error("a float-to-integer cvt needs .rni, .rzi, .rmi or .rpi", PtxSyntaxError)
        return elementwise(d, ins, dst, [src], _float_to_int(src, dst, irnd, ftz))
    require(d, irnd is None and not ftz, "an integer-to-integer cvt takes no rounding modifier")
    fn = _saturate_int(src, dst) if sat else (lambda v: np.asarray(v).astype(dst.dtype))
    return elementwise(d, ins, dst, [src], fn)
