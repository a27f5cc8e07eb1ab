# Math functions in terms of what the GPU computes: thread-level IR -> thread-level IR.
#
# The GPU has fast approximate instructions for 2^x, log2, 1/sqrt, sin and cos
# (MUFU; PTX `ex2.approx` and friends) and exact IEEE square root, reciprocal
# and division.  Each Phobos math function becomes a short sequence of those
# and ordinary arithmetic, written here once so that the PTX, the dumps, the
# CPU emulator and the documented accuracy all agree.  Accuracy (f32, measured
# against float64 references; see docs/language.md):
#
#   sqrt            exact (IEEE round to nearest)
#   exp2, log2      ex2/lg2.approx: about 2 ulp
#   exp, log        via exp2/log2 with one extra rounding: about 2 ulp plus 2^-24 |x| relative
#   rsqrt           rsqrt.approx: about 2 ulp
#   sin, cos        sin/cos.approx: absolute error under 2^-20.5 on [-pi, pi], growing outside
#   tanh            odd polynomial below |x| = 0.125, else 1 - 2 / (e^2|x| + 1): about 1e-6 relative
#   sigmoid         1 / (1 + e^-x) with an exact division: about 2 ulp plus exp's error
#   erf             Abramowitz & Stegun 7.1.26: absolute error under 1.5e-7
#   gelu            x * (1 + erf(x / sqrt 2)) / 2
#
# Only f32 has the approximate instructions; in f64 only sqrt and abs exist.
from __future__ import annotations

import math

from ..errors import UnsupportedError
from ..middle.ir import Block, Builder, Function, Op, Value, replace_uses
from ..types import DType, ScalarType

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
F32 = ScalarType(DType.F32)
F64 = ScalarType(DType.F64)
I32 = ScalarType(DType.I32)
I64 = ScalarType(DType.I64)
BOOL = ScalarType(DType.BOOL)
EXPANDED = {"exp", "exp2", "log", "log2", "rsqrt", "tanh", "sigmoid", "erf", "gelu", "sin", "cos"}


class _Math:
    """Builds arithmetic of one float dtype (f32 by default) at an insertion point."""

    def __init__(self, b: Builder, dtype: DType = DType.F32):
        self.b = b
        self.t = ScalarType(dtype)

    def c(self, x: float) -> Value:
        return self.b.const(float(x), self.t)

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

    def mul(self, a, b):
        return self.op("mul", a, b)

    def fma(self, a, b, c):
        return self.op("fma", a, b, c)

    def div(self, a, b):
        return self.op("div", a, b)

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
        e = self.exp(self.op("neg", self.mul(ax, ax)))
        y = self.op("sub", self.c(1.0), self.mul(p, e))
        neg = self.cmp("lt", x, self.c(0.0))
        return self.op("select", neg, self.op("neg", y), y)

    # -- f64 bits (the methods below build f64 arithmetic: self.t is f64)
    def bits(self, x: Value) -> Value:
        return self.typed("bitcast", I64, x)

    def from_bits(self, bits: Value) -> Value:
        return self.typed("bitcast", self.t, bits)

    def exponent(self, x: Value) -> Value:
        """The binary exponent (i64) of a finite f64 x > 0, subnormals normalised (ilogb); -1077 for 0."""
        def field(v):
            return self.typed("and", I64, self.typed("shr", I64, self.bits(v), self.int(52)), self.int(0x7FF))
        normal, scaled = field(x), field(self.mul(x, self.c(2.0 ** 54)))
        return self.select(self.cmp("ne", normal, self.int(0)), self.typed("sub", I64, normal, self.int(1023)),
                           self.typed("sub", I64, scaled, self.int(1023 + 54)))

    def power_of_two(self, k: Value) -> Value:
        """2^k (f64) for an i64 k from -1022 to 1023."""
        return self.from_bits(self.typed("shl", I64, self.typed("add", I64, k, self.int(1023)), self.int(52)))

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


def _tanh(m: _Math, x: Value) -> Value:
    ax = m.op("abs", x)
    x2 = m.mul(x, x)
    small = m.mul(x, m.poly(x2, [1.0, -1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835]))
    e = m.exp(m.mul(ax, m.c(2.0)))
    big = m.op("sub", m.c(1.0), m.div(m.c(2.0), m.add(e, m.c(1.0))))
    neg = m.b.value("cmp", [x, m.c(0.0)], BOOL, pred="lt")
    big = m.op("select", neg, m.op("neg", big), big)
    is_small = m.b.value("cmp", [ax, m.c(0.125)], BOOL, pred="lt")
    return m.op("select", is_small, small, big)


def fmod(m: _Math, x: Value, y: Value, steps: int) -> Value:
    """x % y of floats (f64 arithmetic, m.t f64): x - n y for the integer n = trunc(x / y), exactly, with the
    sign of x (C's fmod).  |x| is reduced by multiples of t = |y| 2^k, the largest k that leaves the
    quotient below 2^52: q = trunc(r / t) is then exact up to one too many (the division rounds), and
    r - q t is a multiple of ulp(t) below t in magnitude, so fma gives it exactly, and a negative one takes
    t back.  Each step takes 50 binary places off the exponent difference (at most 2097 for f64, 276 for
    values of f32), so `steps` of them (FMOD_STEPS), the same number in every thread, always finish; once
    r < |y| the steps leave it.  x infinite, y zero or a NaN give NaN (the steps make it); y infinite gives x."""
    a, b = m.op("abs", x), m.op("abs", y)
    eb = m.exponent(b)

    def step(carried: list[Value]) -> list[Value]:
        (r,) = carried
        k = m.typed("max", I64, m.typed("sub", I64, m.typed("sub", I64, m.exponent(r), eb), m.int(51)), m.int(0))
        half = m.typed("shr", I64, k, m.int(1))
        t = m.mul(m.mul(b, m.power_of_two(half)), m.power_of_two(m.typed("sub", I64, k, half)))
        q = m.op("trunc", m.div(r, t))
        left = m.fma(m.op("neg", q), t, r)
        left = m.select(m.cmp("lt", left, m.c(0.0)), m.add(left, t), left)
        return [m.select(m.cmp("ge", r, b), left, r)]

    (r,) = m.loop(steps, [a], step)
    sign = m.typed("and", I64, m.bits(x), m.int(-(1 << 63)))
    signed = m.from_bits(m.typed("or", I64, m.bits(r), sign))
    return m.select(m.cmp("ne", y, y), m.add(x, y), signed)  # a NaN y: the steps leave x


#: fmod's steps: enough for the largest exponent difference of the operands' dtype (see fmod).
FMOD_STEPS = {DType.F32: 7, DType.F64: 44}


def _float_remainder(m: _Math, x: Value, y: Value) -> Value:
    """x % y of f32 or f64 operands: fmod, in f64 (exact for f32 values, and its result is one)."""
    wide = _Math(m.b, DType.F64)
    if x.dtype is DType.F64:
        return fmod(wide, x, y, FMOD_STEPS[DType.F64])
    x64, y64 = (wide.typed("cast", F64, v) for v in (x, y))
    return m.typed("cast", m.t, fmod(wide, x64, y64, FMOD_STEPS[DType.F32]))


EXPANSIONS = {
    "exp2": lambda m, x: m.op("ex2_approx", x),
    "exp": lambda m, x: m.exp(x),
    "log2": lambda m, x: m.op("lg2_approx", x),
    "log": lambda m, x: m.mul(m.op("lg2_approx", x), m.c(LN2)),
    "rsqrt": lambda m, x: m.op("rsqrt_approx", x),
    "sin": lambda m, x: m.op("sin_approx", x),
    "cos": lambda m, x: m.op("cos_approx", x),
    "tanh": _tanh,
    "sigmoid": lambda m, x: m.div(m.c(1.0), m.add(m.c(1.0), m.exp(m.op("neg", x)))),
    "erf": lambda m, x: m.erf(x),
    "gelu": lambda m, x: m.mul(m.mul(x, m.c(0.5)), m.add(m.c(1.0), m.erf(m.mul(x, m.c(1 / math.sqrt(2)))))),
}


def expand_math(func: Function) -> None:
    """Rewrite math functions into approximate instructions and arithmetic.

    Before: thread-level IR that may hold exp, exp2, log, log2, rsqrt, tanh,
    sigmoid, erf, gelu, sin, cos, and rem of floats.  After: none of those
    remain; they are computed with ex2/lg2/rsqrt/sin/cos_approx, fma, add, mul,
    div, select, integer and bit operations, and loops of a fixed count.
    """
    replace: dict[Value, Value] = {}
    _expand_block(func, func.body, replace)
    replace_uses(func, replace)


def _expand_block(func: Function, block: Block, replace: dict) -> None:
    new_ops: list[Op] = []
    for op in block.ops:
        for region in op.regions:
            _expand_block(func, region, replace)
        float_remainder = op.opcode == "rem" and op.result.dtype.is_float
        if op.opcode not in EXPANDED and not float_remainder:
            new_ops.append(op)
            continue
        scratch = Block()
        b = Builder(func, scratch, op.loc)
        if float_remainder:
            replace[op.result] = _float_remainder(_Math(b, op.result.dtype), *op.operands)
        else:
            if op.result.dtype is not DType.F32:
                raise UnsupportedError(f"{op.opcode}() is implemented for f32 only, not {op.result.dtype}", op.loc)
            replace[op.result] = EXPANSIONS[op.opcode](_Math(b), op.operands[0])
        new_ops += scratch.ops
    block.ops = new_ops
