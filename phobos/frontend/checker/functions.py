# Device functions: checked where they are called, once per call.
#
# A call inlines a copy of the function's body (`inline`), checked in a scope
# of its own under the types of the call's arguments, so one function serves
# tiles of any shape and dtype; the copy is what the IR generator and the
# interpreter inline (`CheckedKernel.calls`), and an error inside it points
# into the function with a note at the call.  Recursion is an error (there is
# nothing to inline).  A function named as the combine function of a scan or
# reduction (`combine_function`) is checked the same way, on scalars of the
# combined dtypes, and must be straight-line code: every thread runs it on
# its own elements.
from __future__ import annotations

import copy

from ...constants import convert
from ...errors import Loc, Note, SemanticError
from ...types import DType, ScalarType, TensorType, TupleType, ValueType
from .. import ast
from ..ast import start_loc
from ..builtins import BUILTINS
from .checked import Frame, Inlined, Symbol
from .core import KERNEL_SCOPE, Checker, Poisoned


def call_function(ck: Checker, e: ast.Call, fn: ast.Function) -> ValueType | TupleType:
    """Check one call of a device function: its body, copied, under the types of the arguments."""
    args = bind_arguments(ck, e, fn)
    inlined = inline(ck, fn, e.loc, lambda inlined: [
        ck.attempt(bind_parameter, ck, inlined, param, arg) for param, arg in zip(fn.params, args)])
    ck.out.calls[e] = inlined
    return inlined.type


def inline(ck: Checker, fn: ast.Function, loc: Loc, bind) -> Inlined:
    """A copy of `fn`'s body checked in a scope of its own, whose parameters `bind(inlined)` defines.

    The copy is what irgen and the interpreter inline; errors inside it
    point into the function and carry a note at the call (`loc`).
    """
    chain = [name for name, _ in ck.call_stack]
    if fn.name in chain:
        cycle = " -> ".join(chain[chain.index(fn.name):] + [fn.name])
        raise SemanticError(f"recursive call of '{fn.name}' ({cycle}): device functions are inlined where "
                            f"they are called, so they cannot call themselves", loc)
    inlined = Inlined(fn, [], copy.deepcopy(fn.body), Frame(fn.name, ck.flag("$return", fn.loc), fn))
    saved = (ck.scopes, ck.loop_stack, ck.loops, ck.frame, ck.flag_sinks)
    ck.scopes = [ck.scopes[0], {inlined.frame.returned.name: inlined.frame.returned}]
    ck.loop_stack, ck.loops, ck.frame, ck.flag_sinks = [], [], inlined.frame, []
    ck.call_stack.append((fn.name, loc))
    errors_before = len(ck.errors)
    try:
        bind(inlined)
        if len(inlined.params) == len(fn.params):
            if fn.result is not None:
                ck.attempt(declared_result, ck, inlined.frame, fn.result)
            ck.attempt_block_stmts(inlined.body)
            if inlined.frame.result_types and not _always_returns(inlined.body):
                ck.errors.append(SemanticError(
                    f"function '{fn.name}' can reach the end of its body without returning a value",
                    fn.body.stmts[-1].loc if fn.body.stmts else fn.loc))
    finally:
        ck.scopes, ck.loop_stack, ck.loops, ck.frame, ck.flag_sinks = saved
        ck.call_stack.pop()
    if len(ck.errors) > errors_before:
        for err in ck.errors[errors_before:]:
            if not any(n.message.startswith(f"in the call of '{fn.name}'") for n in err.notes):
                err.notes.append(Note(f"in the call of '{fn.name}' here", loc))
        raise Poisoned()
    return inlined


def bind_arguments(ck: Checker, e: ast.Call, fn: ast.Function) -> list[ast.Expr]:
    """The argument of each parameter of `fn`, by position, then by name."""
    if len(e.args) > len(fn.params):
        raise SemanticError(f"{fn.name}() takes {len(fn.params)} argument{'s' if len(fn.params) != 1 else ''}, "
                            f"got {len(e.args) + len(e.kwargs)}", e.loc, [Note("defined here", fn.loc)])
    args: list[ast.Expr | None] = list(e.args) + [None] * (len(fn.params) - len(e.args))
    names = [p.name for p in fn.params]
    for kw in e.kwargs:
        if kw.name not in names:
            raise SemanticError(f"{fn.name}() has no parameter named '{kw.name}'", kw.loc,
                                [Note("defined here", fn.loc)])
        i = names.index(kw.name)
        if args[i] is not None:
            raise SemanticError(f"{fn.name}() got parameter '{kw.name}' twice", kw.loc)
        args[i] = kw.value
    missing = [n for n, a in zip(names, args) if a is None]
    if missing:
        raise SemanticError(f"{fn.name}() is missing the argument{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(repr(m) for m in missing)}", e.loc, [Note("defined here", fn.loc)])
    for a in args:
        ck.expr(a)  # in the caller's scope, before the function's scope replaces it
    return args


def bind_parameter(ck: Checker, inlined: Inlined, param: ast.FnParam, arg: ast.Expr) -> None:
    """Define a parameter of an inlined call: a tensor argument's own symbol, else a value."""
    t = ck.out.types[arg]
    if isinstance(t, TupleType):
        raise SemanticError("an argument is one value; pass the values of a tuple one by one", start_loc(arg))
    if isinstance(t, TensorType):
        if param.type is not None and (param.type.kind != "tensor" or ck.dtype(param.type) != t.dtype
                                       or len(param.type.dims) != t.rank):
            raise SemanticError(f"parameter '{param.name}' is declared {_type_text(param.type)} but the "
                                f"argument is {t}", start_loc(arg), [Note("declared here", param.loc)])
        sym = ck.out.symbols[arg]
        ck.scopes[-1][param.name] = sym  # the function sees the caller's tensor itself
    else:
        if param.type is not None and param.type.kind == "tensor":
            raise SemanticError(f"parameter '{param.name}' is a tensor but the argument is {t}", start_loc(arg),
                                [Note("declared here", param.loc)])
        if param.type is not None:
            ptype = ck.assignable(ck.value_type(param.type), arg, t, start_loc(arg))
            sym = Symbol(param.name, "param", ptype, param.loc)
        elif arg in ck.weak and ck.out.consts.get(arg) is not None:
            sym = Symbol(param.name, "literal", t, param.loc)  # takes the dtype its uses ask for
        else:
            sym = Symbol(param.name, "param", ck.concrete(arg, t), param.loc)
        value = ck.out.consts.get(arg)  # as settled (a u64 takes a hexadecimal 64-bit pattern unsigned)
        if value is not None and isinstance(sym.type, ScalarType):
            sym.value = value if sym.kind == "literal" else convert(value, sym.type.dtype)
            sym.unsigned = ck.unsigned_value(arg) if sym.kind == "literal" else None
        ck.define(sym)
    inlined.params.append(sym)


def declared_result(ck: Checker, frame: Frame, t: ast.TypeExpr) -> None:
    frame.result_types = [ck.value_type(t)]
    sym = Symbol("$result0", "var", frame.result_types[0], t.loc)
    ck.scopes[KERNEL_SCOPE][sym.name] = sym
    frame.results.append(sym)


def combine_function(ck: Checker, e: ast.Call, f_e: ast.Expr, dtypes: list[DType]) -> Inlined:
    """Check `f_e`, the combine function of a scan or reduce of values of `dtypes`: a device function
    of 2k scalars returning k, straight-line code (every thread runs it on its own elements)."""
    fn = ck.kernel.functions.get(f_e.id) if isinstance(f_e, ast.Name) else None
    if fn is None:
        raise SemanticError(f"the combine argument of {e.func}() is the name of a device function, like "
                            f"{e.func}(x, 0, add) with fn add(a, b) {{ return a + b }}", start_loc(f_e))
    k = len(dtypes)
    if len(fn.params) != 2 * k:
        raise SemanticError(f"'{fn.name}' must take {2 * k} parameters (two sets of {k} value"
                            f"{'s' if k > 1 else ''}) to combine {k} tile{'s' if k > 1 else ''}; it takes "
                            f"{len(fn.params)}", start_loc(f_e), [Note("defined here", fn.loc)])

    def bind(inlined: Inlined) -> None:
        for p, dtype in zip(fn.params, dtypes + dtypes):
            ck.attempt(bind_scalar, ck, inlined, p, dtype)
    inlined = inline(ck, fn, f_e.loc, bind)
    want = [ScalarType(d) for d in dtypes]
    if inlined.frame.result_types != want:
        got = ", ".join(map(str, inlined.frame.result_types or [])) or "nothing"
        raise SemanticError(f"'{fn.name}' must return {', '.join(map(str, want))} to combine them; it returns "
                            f"{got}", start_loc(f_e), [Note("defined here", fn.loc)])
    straight_line(ck, inlined.body, fn, f_e.loc)
    return inlined


def bind_scalar(ck: Checker, inlined: Inlined, param: ast.FnParam, dtype: DType) -> None:
    t = ScalarType(dtype)
    if param.type is not None and ck.value_type(param.type) != t:
        raise SemanticError(f"parameter '{param.name}' is declared {_type_text(param.type)} but combines {t} "
                            f"values", param.type.loc)
    inlined.params.append(ck.define(Symbol(param.name, "param", t, param.loc)))


def straight_line(ck: Checker, body: ast.Block, fn: ast.Function, loc: Loc) -> None:
    """A combine function runs per element in each thread: no branches, loops or effects."""
    for i, s in enumerate(body.stmts):
        if isinstance(s, ast.Return) and i == len(body.stmts) - 1:
            continue
        if not isinstance(s, (ast.Let, ast.Unpack, ast.Assign)) or (
                isinstance(s, ast.Assign) and not isinstance(s.target, ast.Name)):
            raise SemanticError(f"'{fn.name}' combines elements, so it must be straight-line code: "
                                f"lets, assignments to variables and a final return (choose with where())",
                                s.loc, [Note("used to combine here", loc)])
    for node in ast.walk(body):
        inner = ck.out.calls.get(node)
        if inner is not None:
            straight_line(ck, inner.body, inner.function, loc)
        elif isinstance(node, ast.Call) and node.func in BUILTINS and BUILTINS[node.func].effect:
            raise SemanticError(f"'{fn.name}' combines elements: it cannot call {node.func}()", node.loc,
                                [Note("used to combine here", loc)])


def _type_text(t: ast.TypeExpr) -> str:
    """A type annotation as written (near enough: constant dims by name)."""
    if t.kind == "scalar":
        return t.dtype
    dims = ", ".join(str(d.value) if isinstance(d, ast.IntLit) else getattr(d, "id", "...") for d in t.dims)
    return f"{t.kind}<{t.dtype}>[{dims}]"


def _always_returns(block: ast.Block) -> bool:
    """Whether every path through `block` ends in a `return`."""
    if not block.stmts:
        return False
    last = block.stmts[-1]
    if isinstance(last, ast.Return):
        return True
    return isinstance(last, ast.If) and last.orelse is not None and _always_returns(last.then) \
        and _always_returns(last.orelse)
