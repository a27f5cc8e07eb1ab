# The builtin functions of Phobos: one registry read by the checker, the IR
# generator, the interpreter and the language reference.
#
# Each entry says how a call is written, what it means, and which rule types
# it (`rule`, a key into the checker's table of typing rules).  Element-wise
# math is grouped by rule so that adding a function is one line here plus its
# lowering; `docs/language.md` lists every entry (a test keeps the two in step).
from __future__ import annotations

from dataclasses import dataclass

from ..types import DType


@dataclass(frozen=True)
class Builtin:
    name: str
    signature: str
    doc: str
    rule: str  # the typing rule the checker applies
    effect: bool = False  # called for its effect (a statement), not its value


def _unary_float(name: str, doc: str) -> Builtin:
    return Builtin(name, f"{name}(x)", doc, "unary_float")


BUILTINS: dict[str, Builtin] = {b.name: b for b in [
    Builtin("program_id", "program_id(axis)",
            "Index of this program instance along grid axis 0, 1 or 2 (i32).", "grid_index"),
    Builtin("num_programs", "num_programs(axis)",
            "Number of program instances along grid axis 0, 1 or 2 (i32).", "grid_index"),
    Builtin("dot", "dot(a, b)",
            "Matrix product of tiles [M, K] and [K, N]: a [M, N] tile, computed in exact f32 "
            "(or f64) arithmetic, one fused multiply-add per term.", "dot"),
    Builtin("sum", "sum(x, axis=None)",
            "Sum of the elements of a tile along `axis` (kept with extent 1), or of all of them (a scalar).",
            "reduce"),
    Builtin("max", "max(x, axis=None)", "Largest element along `axis` (kept with extent 1), or overall "
            "(NaN ignored, +0.0 above -0.0).", "reduce"),
    Builtin("min", "min(x, axis=None)", "Smallest element along `axis` (kept with extent 1), or overall "
            "(NaN ignored, -0.0 below +0.0).", "reduce"),
    Builtin("argmax", "argmax(x, axis=None)",
            "Index (i32) of the largest element along `axis` (kept with extent 1), or the flat index "
            "overall; the first one on ties.", "reduce_index"),
    Builtin("argmin", "argmin(x, axis=None)",
            "Index (i32) of the smallest element along `axis`, like argmax.", "reduce_index"),
    _unary_float("exp", "e to the power x."),
    _unary_float("exp2", "2 to the power x."),
    _unary_float("log", "Natural logarithm."),
    _unary_float("log2", "Base-2 logarithm."),
    _unary_float("sqrt", "Square root, correctly rounded."),
    _unary_float("rsqrt", "1 / sqrt(x)."),
    _unary_float("tanh", "Hyperbolic tangent."),
    _unary_float("sigmoid", "1 / (1 + exp(-x))."),
    _unary_float("erf", "The error function."),
    _unary_float("gelu", "x * (1 + erf(x / sqrt(2))) / 2, the exact GELU."),
    _unary_float("sin", "Sine."),
    _unary_float("cos", "Cosine."),
    Builtin("abs", "abs(x)", "Absolute value (integers or floats).", "unary_numeric"),
    Builtin("maximum", "maximum(x, y)", "Element-wise larger of x and y (broadcast; NaN ignored, "
            "+0.0 above -0.0).", "binary_numeric"),
    Builtin("minimum", "minimum(x, y)", "Element-wise smaller of x and y (broadcast; NaN ignored, "
            "-0.0 below +0.0).", "binary_numeric"),
    Builtin("where", "where(cond, x, y)",
            "Element-wise choice: x where cond is true, else y (all three broadcast).", "where"),
    Builtin("arange", "arange(end) | arange(start, end)",
            "The i32 tile [start, start+1, ..., end-1]; start and end are compile-time constants.",
            "arange"),
    Builtin("full", "full([D0, D1, ...], value)",
            "A tile of the given compile-time shape with every element equal to the scalar value.", "full"),
    Builtin("reshape", "reshape(x, [D0, D1, ...])",
            "The same elements in row-major order with a new shape of equal size.", "reshape"),
    Builtin("cdiv", "cdiv(a, b)", "Integer division rounded up: the exact quotient's ceiling, "
            "without intermediate overflow (a divisor of 0 counts as 1, as for `/`).", "binary_int"),
    Builtin("atomic_add", "atomic_add(T[slices], x)",
            "Adds x (a tile of the slice's shape, or a scalar) into the tensor slice atomically; "
            "elements outside the tensor are skipped.", "atomic", effect=True),
    *[Builtin(dt.value, f"{dt.value}(x)", f"x converted to {dt.value}.", "cast")
      for dt in (DType.F32, DType.F64, DType.I32, DType.I64, DType.U32)],
]}

CAST_DTYPES = {b.name: DType(b.name) for b in BUILTINS.values() if b.rule == "cast"}

# Keyword arguments each builtin accepts.
KEYWORDS = {"sum": {"axis"}, "max": {"axis"}, "min": {"axis"}, "argmax": {"axis"}, "argmin": {"axis"}}
