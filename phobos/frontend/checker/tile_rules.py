# The typing rules of builtins that make or rearrange tiles - arange, full,
# reshape, trans and permute, join, split, concat - and of dot, with its
# operand dtypes (DOT_DTYPES) and its precision= option.  Shapes and axes are
# compile-time constants; every tile made is bounded by check_size.
from __future__ import annotations

import difflib

from ...constants import fits, range_text
from ...errors import SemanticError
from ...types import DType, ScalarType, TileType, TupleType, ValueType, shape_of
from .. import ast
from ..ast import start_loc
from ..builtins import DOT_PRECISIONS
from .calls import arguments, arity, axis_of
from .core import BUILTIN_RULES, Checker

DOT_DTYPES = (DType.F32, DType.F64, DType.BF16, DType.F16, DType.F8E4M3, DType.F8E5M2, DType.I32)  # narrow
# floats: products exact, f32 sums


@BUILTIN_RULES.on("arange")
def call_arange(ck: Checker, e: ast.Call):
    arity(e, 1, 2)
    bounds = [ck.const_int(x, "a bound of arange()") for x in e.args]
    start, end = (0, bounds[0]) if len(bounds) == 1 else bounds
    if end <= start:
        raise SemanticError(f"arange() needs end > start, got arange({start}, {end})", e.loc)
    ck.check_size(end - start, e.loc)
    if not (fits(start, DType.I32) and fits(end - 1, DType.I32)):
        raise SemanticError(f"the values of arange({start}, {end}) do not fit in i32 "
                            f"({range_text(DType.I32)})", e.loc)
    return TileType(DType.I32, (end - start,))


def shape_arg(ck: Checker, e: ast.Expr) -> tuple[int, ...]:
    if not isinstance(e, ast.ListLit):
        raise SemanticError("a shape is written as a list of constants, like [64, 32]", e.loc)
    shape = tuple(ck.extent(x) for x in e.items)
    ck.check_size(shape, e.loc)
    return shape


@BUILTIN_RULES.on("full")
def call_full(ck: Checker, e: ast.Call):
    arity(e, 2)
    shape = shape_arg(ck, e.args[0])
    t = ck.value(e.args[1])
    if not isinstance(t, ScalarType):
        raise SemanticError("the value of full() must be a scalar", start_loc(e.args[1]))
    return TileType(ck.concrete(e.args[1], t).dtype, shape)


@BUILTIN_RULES.on("reshape")
def call_reshape(ck: Checker, e: ast.Call):
    arity(e, 2)
    t = ck.value(e.args[0])
    if not isinstance(t, TileType):
        raise SemanticError("reshape() needs a tile", start_loc(e.args[0]))
    shape = shape_arg(ck, e.args[1])
    new = TileType(t.dtype, shape)
    if new.size != t.size:
        raise SemanticError(f"reshape() cannot turn {t.size} elements into {new.size}", start_loc(e.args[1]))
    return new


@BUILTIN_RULES.on("permute")
def call_permute(ck: Checker, e: ast.Call):
    arity(e, 1 if e.func == "trans" else 2)
    t = ck.value(e.args[0])
    if not isinstance(t, TileType):
        raise SemanticError(f"{e.func}() needs a tile, got {t}", start_loc(e.args[0]))
    if e.func == "trans":
        if len(t.shape) != 2:
            raise SemanticError(f"trans() needs a 2-D tile, got {t}; use permute() for other ranks",
                                start_loc(e.args[0]))
        order = (1, 0)
    else:
        order = permutation(ck, e.args[1], len(t.shape))
    return TileType(t.dtype, tuple(t.shape[d] for d in order))


def permutation(ck: Checker, e: ast.Expr, rank: int) -> tuple[int, ...]:
    if not isinstance(e, ast.ListLit):
        raise SemanticError("the order of permute() is a list of dimensions, like [1, 0]", start_loc(e))
    order = tuple(ck.const_int(x, "a dimension of permute()") for x in e.items)
    if sorted(order) != list(range(rank)):
        raise SemanticError(f"[{', '.join(map(str, order))}] is not an order of the {rank} dimensions "
                            f"0..{rank - 1}", e.loc)
    return order


@BUILTIN_RULES.on("join")
def call_join(ck: Checker, e: ast.Call):
    arity(e, 2)
    a, b = (ck.value(x) for x in e.args)
    dtype = ck.unify_dtypes(e.args[0], a.dtype, e.args[1], b.dtype, e.loc)
    shape = ck.broadcast(shape_of(a), shape_of(b), e.loc) or ()
    ck.check_size(shape + (2,), e.loc)
    return TileType(dtype, shape + (2,))


@BUILTIN_RULES.on("split")
def call_split(ck: Checker, e: ast.Call):
    arity(e, 1)
    t = ck.value(e.args[0])
    if not isinstance(t, TileType) or t.shape[-1] != 2:
        raise SemanticError(f"split() needs a tile whose last extent is 2, got {t}", start_loc(e.args[0]))
    half = TileType(t.dtype, t.shape[:-1]) if len(t.shape) > 1 else ScalarType(t.dtype)
    return TupleType((half, half))


@BUILTIN_RULES.on("concat")
def call_concat(ck: Checker, e: ast.Call):
    a_e, b_e, axis_e = arguments(ck, e, ["a", "b", "axis"], 2)
    a, b = ck.value(a_e), ck.value(b_e)
    for x, t in ((a_e, a), (b_e, b)):
        if not isinstance(t, TileType):
            raise SemanticError(f"concat() joins tiles, got {t}", start_loc(x))
    dtype = ck.unify_dtypes(a_e, a.dtype, b_e, b.dtype, e.loc)
    axis = axis_of(ck, e, axis_e, len(a.shape)) or 0
    if len(a.shape) != len(b.shape) or any(x != y for d, (x, y) in enumerate(zip(a.shape, b.shape)) if d != axis):
        raise SemanticError(f"concat() along axis {axis} needs the other extents equal: {a} and {b}", e.loc)
    shape = tuple(x + y if d == axis else x for d, (x, y) in enumerate(zip(a.shape, b.shape)))
    ck.check_size(shape, e.loc)
    return TileType(dtype, shape)


@BUILTIN_RULES.on("dot")
def call_dot(ck: Checker, e: ast.Call):
    arity(e, 2)
    a, b = (ck.value(x) for x in e.args)
    dot_precision(e, a)
    for x, t in zip(e.args, (a, b)):
        if not isinstance(t, TileType) or len(t.shape) != 2:
            raise SemanticError(f"dot() needs 2-D tiles, got {t}", start_loc(x))
        if t.dtype not in DOT_DTYPES:
            raise SemanticError(f"dot() needs tiles of {', '.join(map(str, DOT_DTYPES))}, got {t.dtype}",
                                start_loc(x))
    if a.dtype != b.dtype:
        raise SemanticError(f"dot() operands have different types: {a.dtype} and {b.dtype}; convert one, "
                            f"e.g. {a.dtype}(...) or {b.dtype}(...)", e.loc)
    if a.shape[1] != b.shape[0]:
        raise SemanticError(f"dot() needs [M, K] x [K, N]: got [{a.shape[0]}, {a.shape[1]}] x "
                            f"[{b.shape[0]}, {b.shape[1]}]", e.loc)
    ck.check_size((a.shape[0], b.shape[1]), e.loc)
    return TileType(a.dtype.compute, (a.shape[0], b.shape[1]))


def dot_precision(e: ast.Call, a: ValueType) -> None:
    """The precision= argument of a dot: a string naming one of DOT_PRECISIONS, for f32 operands."""
    kw = next((k for k in e.kwargs if k.name == "precision"), None)
    if kw is None:
        return
    names = ", ".join(f'"{p}"' for p in DOT_PRECISIONS)
    if not isinstance(kw.value, ast.StrLit):
        raise SemanticError(f"the precision of dot() is a string: {names}", start_loc(kw.value))
    if kw.value.value not in DOT_PRECISIONS:
        close = difflib.get_close_matches(kw.value.value, list(DOT_PRECISIONS), n=1)
        hint = f'; did you mean "{close[0]}"?' if close else ""
        raise SemanticError(f'unknown precision "{kw.value.value}" of dot(); the precisions are {names}{hint}',
                            kw.value.loc)
    dtype = a.dtype if isinstance(a, TileType) else None
    if kw.value.value != "ieee" and dtype is not DType.F32:
        what = (f"{dtype} products are always exact, with f32 sums, on the tensor cores"
                if dtype is not None and dtype.is_narrow else "only f32 products have TF32 modes")
        raise SemanticError(f'precision="{kw.value.value}" applies to f32 operands, not {dtype}: {what}',
                            kw.loc)
