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
# Only f32 has the approximate instructions.  Every function of f64, and the
# f32 functions that have no approximation here (tan, the inverse and
# hyperbolic ones, expm1, log1p, log10, exp10, atan2) and `%` of floats
# (fmod), are computed by libm.py's algorithms in f64 (an f32 argument widened
# exactly, the result rounded once to f32): within 1-2 ulp of f64, so
# correctly rounded f32 results but for a rare tie.
from __future__ import annotations

import math

import numpy as np

from ..constants import canonical_nan
from ..middle.ir import Block, Builder, Function, Op, Value, replace_uses
from ..types import DType, ScalarType
from .libm import F64_FUNCTIONS, FMOD_STEPS, MathBuilder, fmod

LN2 = 0.6931471805599453
F32 = ScalarType(DType.F32)
F64 = ScalarType(DType.F64)
BOOL = ScalarType(DType.BOOL)
#: Every math function expanded here; those of f32 in APPROXIMATE use the GPU's approximations, the rest (and
#: every one of f64) the f64 algorithms of libm.py.
EXPANDED = set(F64_FUNCTIONS)


def _tanh(m: MathBuilder, x: Value) -> Value:
    ax = m.op("abs", x)
    x2 = m.mul(x, x)
    small = m.mul(x, m.poly(x2, [1.0, -1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835]))
    e = m.exp(m.mul(ax, m.c(2.0)))
    big = m.op("sub", m.c(1.0), m.div(m.c(2.0), m.add(e, m.c(1.0))))
    neg = m.b.value("cmp", [x, m.c(0.0)], BOOL, pred="lt")
    big = m.op("select", neg, m.op("neg", big), big)
    is_small = m.b.value("cmp", [ax, m.c(0.125)], BOOL, pred="lt")
    return m.op("select", is_small, small, big)


APPROXIMATE = {
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
        replace[op.result] = expansion(MathBuilder(b, op.result.dtype), op.opcode, op.operands)
        new_ops += scratch.ops
    block.ops = new_ops


def expansion(m: MathBuilder, opcode: str, operands: list[Value]) -> Value:
    """The value of math op `opcode` (or rem of floats) in m's dtype: an f32 approximation, or in f64 (for
    f32, exact conversions around it and one rounding at the end)."""
    if m.t == F32 and opcode in APPROXIMATE:
        return APPROXIMATE[opcode](m, *operands)
    wide = MathBuilder(m.b, DType.F64)
    if opcode == "rem":
        steps = FMOD_STEPS[m.t.dtype]
        compute = lambda w, x, y: fmod(w, x, y, steps)  # noqa: E731
    else:
        compute = F64_FUNCTIONS[opcode]
    if m.t == F64:
        return compute(wide, *operands)
    narrowed = m.typed("cast", m.t, compute(wide, *(wide.typed("cast", F64, v) for v in operands)))
    if opcode == "rem":  # fmod keeps the f64 NaN narrowed, its sign and top payload bits (docs/language.md)
        return narrowed
    # cvt.rn.f32.f64 keeps a NaN's sign and payload; an f32 math function gives the canonical NaN
    return m.select(m.is_nan(narrowed), m.c(canonical_nan(np.float32)), narrowed)
