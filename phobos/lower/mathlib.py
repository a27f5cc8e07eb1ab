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
#   sin, cos        sin/cos.approx: absolute error under 2^-20.5 on [-pi, pi]; the GPU reduces x to
#                   f32 turns (x / 2 pi rounded toward zero), which lose their fraction as |x| grows
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
BOOL = ScalarType(DType.BOOL)
EXPANDED = {"exp", "exp2", "log", "log2", "rsqrt", "tanh", "sigmoid", "erf", "gelu", "sin", "cos"}


class _Math:
    """Builds f32 arithmetic at an insertion point."""

    def __init__(self, b: Builder):
        self.b = b

    def c(self, x: float) -> Value:
        return self.b.const(float(x), F32)

    def op(self, opcode: str, *args: Value, **attrs) -> Value:
        return self.b.value(opcode, list(args), F32, **attrs)

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
        neg = self.b.value("cmp", [x, self.c(0.0)], BOOL, pred="lt")
        return self.op("select", neg, self.op("neg", y), y)


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
    sigmoid, erf, gelu, sin, cos.  After: none of those remain; they are
    computed with ex2/lg2/rsqrt/sin/cos_approx, fma, add, mul, div, select.
    """
    replace: dict[Value, Value] = {}
    _expand_block(func, func.body, replace)
    replace_uses(func, replace)


def _expand_block(func: Function, block: Block, replace: dict) -> None:
    new_ops: list[Op] = []
    for op in block.ops:
        for region in op.regions:
            _expand_block(func, region, replace)
        if op.opcode not in EXPANDED:
            new_ops.append(op)
            continue
        if op.result.dtype is not DType.F32:
            raise UnsupportedError(f"{op.opcode}() is implemented for f32 only, not {op.result.dtype}", op.loc)
        scratch = Block()
        b = Builder(func, scratch, op.loc)
        replace[op.result] = EXPANSIONS[op.opcode](_Math(b), op.operands[0])
        new_ops += scratch.ops
    block.ops = new_ops
