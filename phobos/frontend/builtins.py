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
    effect: bool = False  # may stand alone as a statement, called for its effect
    void: bool = False  # has no value: only a statement
    dtypes: tuple[DType, ...] = ()  # the compute dtypes its operands may have, where the rule asks


F32_F64 = (DType.F32, DType.F64)
ATOMIC_INTEGERS = (DType.I32, DType.U32, DType.I64, DType.U64)
CLUSTER_DTYPES = (DType.F32, DType.F64) + ATOMIC_INTEGERS  # what a cluster reduction exchanges


def _unary_float(name: str, doc: str, dtypes: tuple[DType, ...] = (DType.F32, DType.F64)) -> Builtin:
    return Builtin(name, f"{name}(x)", doc, "unary_float", dtypes=dtypes)


#: The atomics that also order the program instance's other memory accesses around them (acquire-release
#: at GPU scope): lowering puts barriers and fences around them, the interpreter's race check counts them.
ORDERED_ATOMICS = frozenset({"xchg", "cas"})


def _atomic(op: str, doc: str, dtypes: tuple[DType, ...]) -> Builtin:
    return Builtin(f"atomic_{op}", f"atomic_{op}(T[subscripts], x)",
                   f"{doc} atomically, element by element; the value is the tile (or scalar) of the old "
                   f"elements.  Elements outside the tensor are skipped (their old value reads 0).",
                   "atomic", effect=True, dtypes=dtypes)


BUILTINS: dict[str, Builtin] = {b.name: b for b in [
    Builtin("program_id", "program_id(axis)",
            "Index of this program instance along grid axis 0, 1 or 2 (i32).", "grid_index"),
    Builtin("num_programs", "num_programs(axis)",
            "Number of program instances along grid axis 0, 1 or 2 (i32).", "grid_index"),
    Builtin("cluster_rank", "cluster_rank()",
            "The rank (i32, 0 to CLUSTER - 1) of this CTA among the CLUSTER CTAs that run the program "
            "instance (0 without the CLUSTER knob).", "cluster_rank"),
    Builtin("cluster_sum", "cluster_sum(x)",
            "The sum of the scalar x over the CTAs of the program instance's cluster, added in rank order "
            "(the same value in each; x itself without the CLUSTER knob).", "cluster_reduce",
            dtypes=CLUSTER_DTYPES),
    Builtin("cluster_max", "cluster_max(x)",
            "The largest of the scalar x over the CTAs of the cluster (NaN ignored, +0.0 above -0.0), "
            "like cluster_sum.", "cluster_reduce", dtypes=CLUSTER_DTYPES),
    Builtin("cluster_min", "cluster_min(x)",
            "The smallest of the scalar x over the CTAs of the cluster (NaN ignored, -0.0 below +0.0), "
            "like cluster_sum.", "cluster_reduce", dtypes=CLUSTER_DTYPES),
    Builtin("dot", "dot(a, b, precision=\"ieee\")",
            "Matrix product of tiles [M, K] and [K, N]: a [M, N] tile.  f32 (or f64) tiles: exact "
            "arithmetic, one fused multiply-add per term; for f32, precision=\"tf32\" or \"tf32x3\" runs "
            "on the tensor cores instead.  bf16 or f16 tiles: an f32 tile, each element the exact "
            "products summed in f32 (on the tensor cores).  f8e4m3 or f8e5m2 tiles: likewise, with sums "
            "of the tensor cores' precision (see Accuracy of dot).  i32 tiles (i8 and i16 tensors load as "
            "i32): the exact product, wrapping as i32 arithmetic does.", "dot"),
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
    _unary_float("exp10", "10 to the power x."),
    _unary_float("expm1", "e to the power x, minus 1 (accurate near 0)."),
    _unary_float("log", "Natural logarithm."),
    _unary_float("log2", "Base-2 logarithm."),
    _unary_float("log10", "Base-10 logarithm."),
    _unary_float("log1p", "log(1 + x) (accurate near 0)."),
    _unary_float("sqrt", "Square root, correctly rounded."),
    _unary_float("rsqrt", "1 / sqrt(x)."),
    _unary_float("sin", "Sine."),
    _unary_float("cos", "Cosine."),
    _unary_float("tan", "Tangent."),
    _unary_float("asin", "Arcsine, in [-pi/2, pi/2]."),
    _unary_float("acos", "Arccosine, in [0, pi]."),
    _unary_float("atan", "Arctangent, in [-pi/2, pi/2]."),
    Builtin("atan2", "atan2(y, x)", "The angle of the point (x, y), in [-pi, pi] (C's atan2; broadcast).",
            "binary_float", dtypes=F32_F64),
    _unary_float("sinh", "Hyperbolic sine."),
    _unary_float("cosh", "Hyperbolic cosine."),
    _unary_float("tanh", "Hyperbolic tangent."),
    _unary_float("asinh", "Inverse hyperbolic sine."),
    _unary_float("acosh", "Inverse hyperbolic cosine."),
    _unary_float("atanh", "Inverse hyperbolic tangent."),
    _unary_float("sigmoid", "1 / (1 + exp(-x))."),
    _unary_float("erf", "The error function."),
    _unary_float("erfc", "1 - erf(x) (accurate where erf is near 1)."),
    _unary_float("gelu", "x * (1 + erf(x / sqrt(2))) / 2, the exact GELU."),
    _unary_float("floor", "The largest integer value not above x (a float)."),
    _unary_float("ceil", "The smallest integer value not below x (a float)."),
    _unary_float("round", "x rounded to the nearest integer value, halves to even (a float)."),
    _unary_float("trunc", "x rounded toward zero to an integer value (a float)."),
    Builtin("fma", "fma(a, b, c)", "a * b + c rounded once (floats; broadcast).", "fma", dtypes=F32_F64),
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
    Builtin("mulhi", "mulhi(a, b)",
            "The high half of the full product of two integers of one dtype (i32, u32, i64, u64): the bits "
            "above the ones a * b keeps.", "mulhi", dtypes=ATOMIC_INTEGERS),
    Builtin("bitcast", "bitcast(x, DTYPE)",
            "The bits of x read as DTYPE, a dtype of the same width (f32/i32/u32, f64/i64/u64).", "bitcast"),
    Builtin("cumsum", "cumsum(x, axis=0)",
            "Inclusive running sum along `axis` (the shape stays); the axis may be left out of a 1-D tile.",
            "scan_op"),
    Builtin("cumprod", "cumprod(x, axis=0)", "Inclusive running product along `axis`, like cumsum.", "scan_op"),
    Builtin("scan", "scan(x, axis, combine)",
            "Inclusive scan along `axis` with a device function `combine(a, b)` (associative); x may be a "
            "tuple of tiles of one shape, combine then takes and returns as many values.", "scan"),
    Builtin("reduce", "reduce(x, axis, combine)",
            "Reduction along `axis` (kept with extent 1) with a device function `combine(a, b)` "
            "(associative and commutative); reduce(x, combine=f), without an axis, reduces all the "
            "elements to a scalar; x may be a tuple of tiles, like scan.", "reduce_with"),
    Builtin("trans", "trans(x)", "The transpose of a 2-D tile.", "permute"),
    Builtin("permute", "permute(x, [D0, D1, ...])",
            "The tile with its dimensions reordered: dimension i of the result is dimension Di of x.",
            "permute"),
    Builtin("join", "join(a, b)",
            "The tiles a and b (one shape) side by side along a new last dimension of extent 2.", "join"),
    Builtin("split", "split(x)",
            "The two halves of a tile whose last dimension has extent 2, without it: the inverse of join.",
            "split"),
    Builtin("concat", "concat(a, b, axis=0)",
            "a followed by b along `axis` (the other extents equal).", "concat"),
    _atomic("add", "Adds x into the tensor elements", (DType.F32, DType.F64, DType.F16, DType.BF16) + ATOMIC_INTEGERS),
    _atomic("max", "Replaces each tensor element by the larger of it and x", (DType.F32, DType.F64) + ATOMIC_INTEGERS),
    _atomic("min", "Replaces each tensor element by the smaller of it and x", (DType.F32, DType.F64) + ATOMIC_INTEGERS),
    _atomic("and", "Bitwise-ands x into the tensor elements", ATOMIC_INTEGERS),
    _atomic("or", "Bitwise-ors x into the tensor elements", ATOMIC_INTEGERS),
    _atomic("xor", "Bitwise-xors x into the tensor elements", ATOMIC_INTEGERS),
    _atomic("xchg", "Writes x into the tensor elements", (DType.F32, DType.F64) + ATOMIC_INTEGERS),
    Builtin("atomic_cas", "atomic_cas(T[subscripts], cmp, x)",
            "Compare and swap, atomically per element: where an element's bits equal those of cmp, x is "
            "written; the value is the old elements.  Elements outside the tensor are skipped.", "atomic",
            effect=True, dtypes=(DType.F32, DType.F64) + ATOMIC_INTEGERS),
    Builtin("device_print", "device_print(\"text {}\", x, ...)",
            "Prints a line per element (with its program instance and index) while the kernel runs; each "
            "{} of the text shows the next value.", "print", effect=True, void=True),
    Builtin("device_assert", "device_assert(cond, \"text\")",
            "Stops the kernel with an error (its source line and the text) where cond is false.", "assert",
            effect=True, void=True),
    *[Builtin(dt.value, f"{dt.value}(x)", f"x converted to {dt.value}.", "cast")
      for dt in (DType.F32, DType.F64, DType.I32, DType.I64, DType.U32, DType.U64)],
    *[Builtin(dt.value, f"{dt.value}(x)", f"x converted to {dt.value}: rounded once to nearest even in the "
              f"16-bit format, from any dtype (arithmetic on the result is computed in f32 and rounded back to it).",
              "cast")
      for dt in (DType.BF16, DType.F16)],
    *[Builtin(dt.value, f"{dt.value}(x)", f"x converted to {dt.value}: to f32, then rounded to nearest even "
              f"in the 8-bit format and saturated (beyond the largest finite value, {limit}, and infinities "
              f"become that value of their sign; NaN stays NaN); arithmetic on the result is computed in f32.",
              "cast")
      for dt, limit in ((DType.F8E4M3, 448), (DType.F8E5M2, 57344))],
]}

def argument(call, position: int, name: str):
    """The argument of a builtin's call (an ast.Call) at `position`, or given as `name=`; None if left out."""
    if position < len(call.args):
        return call.args[position]
    return next((k.value for k in call.kwargs if k.name == name), None)


CAST_DTYPES = {b.name: DType(b.name) for b in BUILTINS.values() if b.rule == "cast"}

# Keyword arguments each builtin accepts.
KEYWORDS = {"sum": {"axis"}, "max": {"axis"}, "min": {"axis"}, "argmax": {"axis"}, "argmin": {"axis"},
            "cumsum": {"axis"}, "cumprod": {"axis"}, "scan": {"axis", "combine"}, "reduce": {"axis", "combine"},
            "concat": {"axis"}, "dot": {"precision"}}

# The precisions of an f32 dot (its `precision=` argument): what each computes.
DOT_PRECISIONS = {
    "ieee": "exact IEEE f32: one fused multiply-add per term (the default)",
    "tf32": "the operands rounded to TF32 (10 fraction bits; nearest, ties to even), products exact, "
            "sums in f32: on the tensor cores",
    "tf32x3": "each operand split into a TF32 high part and the TF32 rounding of the rest; the sum of "
              "three products (high x high, high x low, low x high), close to f32 accuracy: on the tensor cores",
}


def dot_precision(call) -> str:
    """The precision a checked dot() call asks for (its string argument, or the default)."""
    given = next((k.value for k in call.kwargs if k.name == "precision"), None)
    return given.value if given is not None else "ieee"
