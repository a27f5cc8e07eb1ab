# The typing rules of reductions and scans: sum, max, min (the reduced axis
# kept with extent 1, or all axes to a scalar), argmax and argmin (i32
# indices), cumsum and cumprod, and scan and reduce with a combine function
# (a device function checked by functions.combine_function), over one tile
# or a tuple of tiles of one shape.
from __future__ import annotations

from ...errors import SemanticError
from ...types import DType, ScalarType, TileType, TupleType, ValueType, shape_of
from .. import ast
from ..ast import start_loc
from .calls import arguments, arity, axis_of
from .core import BUILTIN_RULES, Checker
from .functions import combine_function


@BUILTIN_RULES.on("reduce")
def call_reduce(ck: Checker, e: ast.Call):
    t, axis = reduce_axis(ck, e)
    if t.dtype is DType.BOOL:
        raise SemanticError(f"{e.func}() needs numbers, not bool", start_loc(e.args[0]))
    return reduced(t, axis, t.dtype.compute)


@BUILTIN_RULES.on("reduce_index")
def call_reduce_index(ck: Checker, e: ast.Call):
    t, axis = reduce_axis(ck, e)
    if t.dtype is DType.BOOL:
        raise SemanticError(f"{e.func}() needs numbers, not bool", start_loc(e.args[0]))
    return reduced(t, axis, DType.I32)


def reduce_axis(ck: Checker, e: ast.Call) -> tuple[TileType, int | None]:
    arity(e, 1, 2)
    t = ck.value(e.args[0])
    if not isinstance(t, TileType):
        raise SemanticError(f"{e.func}() reduces a tile, got a scalar {t}", start_loc(e.args[0]))
    axis_e = e.args[1] if len(e.args) == 2 else next((k.value for k in e.kwargs if k.name == "axis"), None)
    if len(e.args) == 2 and e.kwargs:
        raise SemanticError(f"{e.func}() got the axis twice", e.kwargs[0].loc)
    if axis_e is None:
        return t, None
    axis = ck.const_int(axis_e, f"the axis of {e.func}()")
    rank = len(t.shape)
    if not -rank <= axis < rank:
        raise SemanticError(f"axis {axis} is out of range for a tile of rank {rank}", start_loc(axis_e))
    return t, axis % rank


def reduced(t: TileType, axis: int | None, dtype: DType) -> ValueType:
    if axis is None:
        return ScalarType(dtype)
    return TileType(dtype, tuple(1 if i == axis else n for i, n in enumerate(t.shape)))


@BUILTIN_RULES.on("scan_op")
def call_scan_op(ck: Checker, e: ast.Call):
    x_e, axis_e = arguments(ck, e, ["x", "axis"], 1)
    t = ck.value(x_e)
    if not isinstance(t, TileType) or t.dtype is DType.BOOL:
        raise SemanticError(f"{e.func}() needs a tile of numbers, got {t}", start_loc(x_e))
    scan_axis(ck, e, axis_e, t)
    return TileType(t.dtype.compute, t.shape)  # 16-bit floats are summed in f32


def scan_axis(ck: Checker, e: ast.Call, axis_e: ast.Expr | None, t: TileType) -> int:
    axis = axis_of(ck, e, axis_e, len(t.shape))
    if axis is None:
        if len(t.shape) > 1:
            raise SemanticError(f"{e.func}() of a tile of rank {len(t.shape)} needs an axis", e.loc)
        axis = 0
    return axis


def combined(ck: Checker, e: ast.Call, x_e: ast.Expr) -> list[TileType]:
    """The tiles a scan or reduce combines: one, or a tuple of tiles of one shape."""
    items = x_e.items if isinstance(x_e, ast.TupleLit) else [x_e]
    types = [ck.value(x) for x in items]
    shape = None
    for x, t in zip(items, types):
        shape = ck.broadcast(shape, shape_of(t), start_loc(x))
    if shape is None:
        raise SemanticError(f"{e.func}() combines tiles, got {types[0]}", start_loc(items[0]))
    types = [TileType(ck.concrete(x, t).dtype, shape) for x, t in zip(items, types)]
    ck.out.types[x_e] = TupleType(tuple(types)) if isinstance(x_e, ast.TupleLit) else types[0]
    return types


@BUILTIN_RULES.on("scan")
def call_scan(ck: Checker, e: ast.Call):
    x_e, axis_e, f_e = arguments(ck, e, ["x", "axis", "combine"], 3)
    types = combined(ck, e, x_e)
    scan_axis(ck, e, axis_e, types[0])
    ck.out.calls[e] = combine_function(ck, e, f_e, [t.dtype for t in types])
    return ck.out.types[x_e]


@BUILTIN_RULES.on("reduce_with")
def call_reduce_with(ck: Checker, e: ast.Call):
    x_e, axis_e, f_e = arguments(ck, e, ["x", "axis", "combine"], 1)  # reduce(x, combine=f): all elements
    if f_e is None:
        arity(e, 3)
    types = combined(ck, e, x_e)
    axis = axis_of(ck, e, axis_e, len(types[0].shape))
    ck.out.calls[e] = combine_function(ck, e, f_e, [t.dtype for t in types])
    out = [reduced(t, axis, t.dtype) for t in types]
    return TupleType(tuple(out)) if isinstance(x_e, ast.TupleLit) else out[0]
