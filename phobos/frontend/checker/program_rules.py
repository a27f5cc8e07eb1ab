# The typing rules of builtins about the program instance and its effects:
# program_id and num_programs, cluster_rank and the cluster reductions, the atomics (on a tensor slice, typed like a
# store into it: the tensor counts as written), device_print and
# device_assert (statements with no value).
from __future__ import annotations

from ...errors import SemanticError
from ...types import VOID, DType, ScalarType, TensorType
from .. import ast
from ..ast import start_loc
from ..builtins import BUILTINS
from .calls import arity, shape_of_all
from .core import BUILTIN_RULES, Checker
from .expressions import index


@BUILTIN_RULES.on("grid_index")
def call_grid_index(ck: Checker, e: ast.Call):
    arity(e, 1)
    axis = ck.const_int(e.args[0], f"the axis of {e.func}()")
    if axis not in (0, 1, 2):
        raise SemanticError(f"the axis of {e.func}() must be 0, 1 or 2, got {axis}", start_loc(e.args[0]))
    return ScalarType(DType.I32)


@BUILTIN_RULES.on("cluster_rank")
def call_cluster_rank(ck: Checker, e: ast.Call):
    arity(e, 0)
    return ScalarType(DType.I32)


@BUILTIN_RULES.on("cluster_reduce")
def call_cluster_reduce(ck: Checker, e: ast.Call):
    arity(e, 1)
    t = ck.value(e.args[0])
    if not isinstance(t, ScalarType):
        raise SemanticError(f"{e.func}() combines a scalar over the cluster, not a tile {t} (reduce the tile "
                            f"first: {e.func}(sum(x)))", start_loc(e.args[0]))
    t = ck.concrete(e.args[0], t)
    allowed = BUILTINS[e.func].dtypes
    if t.dtype not in allowed:
        raise SemanticError(f"{e.func}() works on {', '.join(map(str, allowed))}, not {t.dtype}",
                            start_loc(e.args[0]))
    return t


@BUILTIN_RULES.on("atomic")
def call_atomic(ck: Checker, e: ast.Call):
    arity(e, 3 if e.func == "atomic_cas" else 2)
    target, *values = e.args
    if not (isinstance(target, ast.Index) and isinstance(ck.expr(target.base), TensorType)):
        raise SemanticError(f"the first argument of {e.func}() is a tensor slice, like T[i :+ 64]",
                            start_loc(target))
    bt = ck.expr(target.base)
    slice_t = index(ck, target, bt)
    ck.types_set(target, slice_t)
    allowed = BUILTINS[e.func].dtypes
    if bt.dtype not in allowed:
        raise SemanticError(f"{e.func}() works on {', '.join(map(str, allowed))} tensors, not {bt.dtype}",
                            start_loc(target))
    for x in values:
        ck.storable(bt.dtype, slice_t, x, ck.value(x), start_loc(x))
    ck.out.written.add(ck.out.symbols[target.base].name)
    return slice_t


@BUILTIN_RULES.on("print")
def call_print(ck: Checker, e: ast.Call):
    if not e.args or not isinstance(e.args[0], ast.StrLit):
        raise SemanticError('device_print() starts with its text, a string like "x = {}"', e.loc)
    text, values = e.args[0], e.args[1:]
    holes = text.value.count("{}")
    if holes and holes != len(values):
        raise SemanticError(f"the text has {holes} {{}} but {len(values)} value{'s' if len(values) != 1 else ''} "
                            f"follow{'s' if len(values) == 1 else ''} it", text.loc)
    for x in values:
        t = ck.value(x)
        ck.settle(x, ck.concrete(x, t).dtype)
    shape_of_all(ck, e, values)
    return VOID


@BUILTIN_RULES.on("assert")
def call_assert(ck: Checker, e: ast.Call):
    arity(e, 1, 2)
    t = ck.value(e.args[0])
    if t.dtype is not DType.BOOL:
        raise SemanticError(f"the condition of device_assert() must be bool, not {t.dtype}", start_loc(e.args[0]))
    if len(e.args) == 2 and not isinstance(e.args[1], ast.StrLit):
        raise SemanticError("the message of device_assert() is a string", start_loc(e.args[1]))
    return VOID
