# The typing rules of element-wise builtins: math functions of floats
# (exp, sqrt, ...), of any number (abs), of two numbers (maximum, minimum),
# of two integers (cdiv), where, the casts (f32(x), i32(x), ...), fma, mulhi
# and bitcast.  Their operands broadcast as an operator's do, and
# literal-only operands take the dtype the rule computes in.
from __future__ import annotations

import math

from ...constants import convert, evaluate
from ...errors import Loc, SemanticError
from ...types import DType, ScalarType, TileType, ValueType, shape_of, with_dtype
from .. import ast
from ..ast import start_loc
from ..builtins import BUILTINS, CAST_DTYPES
from .calls import arity, shape_of_all
from .core import BUILTIN_RULES, Checker, article

BITCAST_DTYPES = (DType.I32, DType.U32, DType.F32, DType.I64, DType.U64, DType.F64)


def arith(ck: Checker, op: str, lt: ValueType, rhs: ast.Expr, rt: ValueType, loc: Loc, lhs_node) -> ValueType:
    """The type of an arithmetic builtin on two numbers (maximum, cdiv, ...)."""
    for t in (lt, rt):
        if t.dtype is DType.BOOL:
            raise SemanticError(f"'{op}' needs numbers, not bool", loc)
    dtype = ck.unify_dtypes(lhs_node, lt.dtype, rhs, rt.dtype, loc)
    shape = ck.broadcast(shape_of(lt), shape_of(rt), loc)
    return ScalarType(dtype) if shape is None else TileType(dtype, shape)


@BUILTIN_RULES.on("unary_float")
def call_unary_float(ck: Checker, e: ast.Call):
    arity(e, 1)
    t = ck.value(e.args[0])
    if e.args[0] in ck.weak:
        ck.settle(e.args[0], DType.F32)
        return with_dtype(t, DType.F32)
    if not t.dtype.is_float:
        raise SemanticError(f"{e.func}() needs a float argument, got {t.dtype}; convert it with f32(...)",
                            start_loc(e.args[0]))
    allowed = BUILTINS[e.func].dtypes
    if t.dtype.compute not in allowed:
        names = " and ".join(str(d) for d in allowed)
        raise SemanticError(f"{e.func}() is implemented for {names} only, not {t.dtype}; convert the "
                            f"argument with {allowed[0]}(...)", start_loc(e.args[0]))
    if t.dtype.is_f8:  # of an 8-bit float: computed in f32, an f32 (docs/language.md, section 3)
        return with_dtype(t, t.dtype.compute)
    return t  # of a 16-bit float: computed in f32, rounded to it


@BUILTIN_RULES.on("binary_float")
def call_binary_float(ck: Checker, e: ast.Call):
    """atan2(y, x): two floats (literals become f32) that meet in one dtype and broadcast."""
    arity(e, 2)
    a, b = (ck.value(x) for x in e.args)
    for x, t in zip(e.args, (a, b)):
        if not t.dtype.is_float and x not in ck.weak:
            raise SemanticError(f"{e.func}() needs float arguments, got {t.dtype}; convert it with f32(...)",
                                start_loc(x))
    a, b = (t if t.dtype.is_float else with_dtype(t, DType.F32) for t in (a, b))
    t = arith(ck, e.func, a, e.args[1], b, e.loc, lhs_node=e.args[0])
    ck.settle_all(e.args, t.dtype)
    return t


@BUILTIN_RULES.on("unary_numeric")
def call_unary_numeric(ck: Checker, e: ast.Call):
    arity(e, 1)
    t = ck.value(e.args[0])
    if t.dtype is DType.BOOL:
        raise SemanticError(f"{e.func}() needs a number, not bool", start_loc(e.args[0]))
    return ck.concrete(e.args[0], t)


@BUILTIN_RULES.on("binary_numeric")
def call_binary_numeric(ck: Checker, e: ast.Call):
    arity(e, 2)
    a, b = (ck.value(x) for x in e.args)
    t = arith(ck, e.func, a, e.args[1], b, e.loc, lhs_node=e.args[0])
    ck.settle_all(e.args, t.dtype)
    return t


@BUILTIN_RULES.on("binary_int")
def call_binary_int(ck: Checker, e: ast.Call):
    arity(e, 2)
    a, b = (ck.value(x) for x in e.args)
    t = arith(ck, e.func, a, e.args[1], b, e.loc, lhs_node=e.args[0])
    if not t.dtype.is_int:
        raise SemanticError(f"{e.func}() needs integers, got {t.dtype}", e.loc)
    ck.settle_all(e.args, t.dtype)
    x, y = ck.out.consts.get(e.args[0]), ck.out.consts.get(e.args[1])
    if x is not None and y is not None and isinstance(t, ScalarType):
        if y == 0:
            raise SemanticError("division by zero in a constant expression", start_loc(e.args[1]))
        ck.out.consts[e] = evaluate("cdiv", {}, [x, y], [t.dtype, t.dtype], t.dtype)
    return t


@BUILTIN_RULES.on("where")
def call_where(ck: Checker, e: ast.Call):
    arity(e, 3)
    c, a, b = (ck.value(x) for x in e.args)
    if c.dtype is not DType.BOOL:
        raise SemanticError(f"the condition of where() must be bool, got {c.dtype}", start_loc(e.args[0]))
    dtype = ck.unify_dtypes(e.args[1], a.dtype, e.args[2], b.dtype, e.loc)
    ck.settle_all(e.args[1:], dtype)
    shape = ck.broadcast(ck.broadcast(shape_of(c), shape_of(a), e.loc), shape_of(b), e.loc)
    return ScalarType(dtype) if shape is None else TileType(dtype, shape)


@BUILTIN_RULES.on("cast")
def call_cast(ck: Checker, e: ast.Call):
    arity(e, 1)
    t = ck.value(e.args[0])
    result = with_dtype(t, CAST_DTYPES[e.func])
    value = ck.out.consts.get(e.args[0])
    if value is not None and isinstance(t, ScalarType):
        dtype = CAST_DTYPES[e.func]
        if dtype.is_int and isinstance(value, float) and not math.isfinite(value):
            raise SemanticError(f"the constant {value} has no {dtype} value", start_loc(e.args[0]))
        ck.out.consts[e] = convert(value, dtype)
    return result


def operands_in(ck: Checker, e: ast.Call, dtypes) -> DType:
    """The dtype all arguments of `e` meet in (16-bit floats in f32), checked against `dtypes`."""
    types = [ck.value(x) for x in e.args]
    dtype = types[0].dtype
    for x, t in zip(e.args[1:], types[1:]):
        dtype = ck.unify_dtypes(e.args[0], dtype, x, t.dtype, start_loc(x))
    dtype = dtype.compute
    if dtype not in dtypes:
        names = " and ".join(map(str, dtypes))
        raise SemanticError(f"{e.func}() works on {names}, not {dtype}", e.loc)
    for x in e.args:
        ck.settle(x, dtype)
    return dtype


@BUILTIN_RULES.on("fma")
def call_fma(ck: Checker, e: ast.Call):
    return same_dtype_operation(ck, e, 3)


@BUILTIN_RULES.on("mulhi")
def call_mulhi(ck: Checker, e: ast.Call):
    return same_dtype_operation(ck, e, 2)


def same_dtype_operation(ck: Checker, e: ast.Call, count: int) -> ValueType:
    """The type of a builtin of `count` operands that meet in one of its dtypes and broadcast together."""
    arity(e, count)
    dtype = operands_in(ck, e, BUILTINS[e.func].dtypes)
    shape = shape_of_all(ck, e, e.args)
    return ScalarType(dtype) if shape is None else TileType(dtype, shape)


@BUILTIN_RULES.on("bitcast")
def call_bitcast(ck: Checker, e: ast.Call):
    arity(e, 2)
    t = ck.value(e.args[0])
    name = e.args[1]
    to = DType.from_name(name.id) if isinstance(name, ast.Name) else None
    if to is None or to not in BITCAST_DTYPES:
        raise SemanticError(f"the second argument of bitcast() is a dtype: "
                            f"{', '.join(map(str, BITCAST_DTYPES))}", start_loc(name))
    if t.dtype not in BITCAST_DTYPES or t.dtype.bits != to.bits:
        raise SemanticError(f"bitcast() keeps the bits: {t.dtype} and {to} differ in width" if
                            t.dtype in BITCAST_DTYPES else f"bitcast() of {article(t.dtype)}: it has no bits to read",
                            e.loc)
    ck.settle(e.args[0], t.dtype)
    return with_dtype(ck.concrete(e.args[0], t), to)
