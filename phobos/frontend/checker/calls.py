# A call: to a builtin, whose typing rule (`Builtin.rule` in builtins.py) is
# looked up in BUILTIN_RULES, or to a device function (functions.py); and the
# helpers the typing rules read their arguments with - by position
# (`arity`), by name (`arguments`), an axis (`axis_of`), the shape a set of
# arguments broadcasts to (`shape_of_all`).
#
# The typing rules live by concern in math_rules.py (element-wise),
# tile_rules.py (making and rearranging tiles, dot), reduce_rules.py
# (reductions and scans) and program_rules.py (program ids, atomics,
# device_print, device_assert).
from __future__ import annotations

import difflib

from ...errors import SemanticError
from ...types import shape_of
from .. import ast
from ..ast import start_loc
from ..builtins import BUILTINS, KEYWORDS
from .core import BUILTIN_RULES, EXPRESSIONS, Checker
from .functions import call_function


@EXPRESSIONS.on(ast.Call)
def expr_call(ck: Checker, e: ast.Call):
    b = BUILTINS.get(e.func)
    if b is None:
        if e.func in ck.kernel.functions:
            return call_function(ck, e, ck.kernel.functions[e.func])
        close = difflib.get_close_matches(e.func, list(BUILTINS) + list(ck.kernel.functions), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise SemanticError(f"unknown function '{e.func}'{hint}", e.loc)
    if b.void and e not in ck.statement_calls:
        raise SemanticError(f"{e.func}() has no value; call it as a statement of its own", e.loc)
    allowed = KEYWORDS.get(e.func, set())
    for kw in e.kwargs:
        if kw.name not in allowed:
            raise SemanticError(f"{e.func}() has no argument named '{kw.name}'", kw.loc)
    return BUILTIN_RULES.lookup(b.rule)(ck, e)


def arity(e: ast.Call, *counts: int) -> None:
    """A builtin call has one of `counts` positional arguments."""
    if len(e.args) not in counts:
        want = " or ".join(map(str, counts))
        raise SemanticError(f"{e.func}() takes {want} argument{'s' if counts != (1,) else ''}, "
                            f"got {len(e.args)}: {BUILTINS[e.func].signature}", e.loc)


def arguments(ck: Checker, e: ast.Call, names: list[str], required: int) -> list[ast.Expr | None]:
    """The arguments of a call by parameter name (`names`), positional first, then keywords."""
    if not required <= len(e.args) <= len(names):
        arity(e, *range(required, len(names) + 1))
    args: list[ast.Expr | None] = list(e.args) + [None] * (len(names) - len(e.args))
    for kw in e.kwargs:
        i = names.index(kw.name)
        if args[i] is not None:
            raise SemanticError(f"{e.func}() got the {kw.name} twice", kw.loc)
        args[i] = kw.value
    if any(a is None for a in args[:required]):
        arity(e, *range(required, len(names) + 1))
    return args


def axis_of(ck: Checker, e: ast.Call, axis_e: ast.Expr | None, rank: int) -> int | None:
    if axis_e is None:
        return None
    axis = ck.const_int(axis_e, f"the axis of {e.func}()")
    if not -rank <= axis < rank:
        raise SemanticError(f"axis {axis} is out of range for a tile of rank {rank}", start_loc(axis_e))
    return axis % rank


def shape_of_all(ck: Checker, e: ast.Call, args: list[ast.Expr]) -> tuple[int, ...] | None:
    shape = None
    for x in args:
        shape = ck.broadcast(shape, shape_of(ck.value(x)), e.loc)
    return shape
