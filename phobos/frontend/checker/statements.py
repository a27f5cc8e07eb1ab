# The checking rules of statements: `let` and `var` (and unpacking a tuple),
# assignment to a variable or a tensor slice (compound assignment included),
# a call standing as a statement, `for`, `while`, `if`, and the jumps
# `break`, `continue` and `return`.
#
# A loop or `if` records the outer `var`s its body assigns (`note_assigned`
# fills `CheckedKernel.carried`), which the IR generator threads through as
# loop-carried values or branch results.  A jump sets a hidden bool flag
# (`Checker.flag`) that every loop and branch around it carries out, and the
# rest of a block after a statement that may jump is guarded by its flags
# (`Checker.attempt_block_stmts`).  A `return` in a device function fixes the
# function's result types (its first `return E`, or its `-> T`).
from __future__ import annotations

from ...constants import convert
from ...errors import Note, SemanticError
from ...types import VOID, DType, ScalarType, TensorType, TileType, TupleType, ValueType
from .. import ast
from ..ast import start_loc
from ..builtins import BUILTINS
from .checked import Frame, Loop, Symbol
from .core import KERNEL_SCOPE, STATEMENTS, Checker, Poisoned
from .expressions import index, operation


@STATEMENTS.on(ast.Let)
def stmt_let(ck: Checker, s: ast.Let) -> None:
    sym = Symbol(s.name, "var" if s.mutable else "let", None, s.name_loc)
    ck.out.symbols[s] = sym
    try:
        declared = ck.value_type(s.type) if s.type is not None else None
        vt = ck.single(s.value, ck.expr(s.value))
        if isinstance(vt, TensorType):
            raise SemanticError("a tensor cannot be bound to a name; index it to load a tile",
                                start_loc(s.value))
        if declared is not None:
            sym.type = ck.assignable(declared, s.value, vt, start_loc(s.value))
        else:
            sym.type = ck.concrete(s.value, vt)
    except (SemanticError, Poisoned):
        ck.scopes[-1].setdefault(s.name, sym)  # poisoned: later uses are skipped, not reported
        raise
    value = ck.out.consts.get(s.value)
    if not s.mutable and value is not None and isinstance(sym.type, ScalarType):
        sym.value = convert(value, sym.type.dtype)
    ck.define(sym)


@STATEMENTS.on(ast.Assign)
def stmt_assign(ck: Checker, s: ast.Assign) -> None:
    target = s.target
    if isinstance(target, ast.Name):
        sym = ck.lookup(target.id, target.loc)
        ck.out.symbols[target] = sym
        if sym.type is None:
            raise Poisoned()
        if not sym.mutable:
            why = {"let": "it was declared with 'let' (use 'var' to make it mutable)",
                   "literal": "it is a constant", "param": "it is a parameter of the function",
                   "loop": "it is a loop variable", "const": "it is an autotune parameter",
                   "size": "it is a tensor size", "scalar": "it is a kernel parameter",
                   "tensor": "it is a tensor; assign to a slice of it, like x[i :+ 4] = ..."}[sym.kind]
            raise SemanticError(f"cannot assign to '{sym.name}': {why}", start_loc(target))
        value_t = rhs_type(ck, s, sym.type)
        ck.assignable(sym.type, s.value, value_t, start_loc(s.value))
        ck.types_set(target, sym.type)
        ck.note_assigned(sym)
        return
    base = target.base
    if not isinstance(base, ast.Name):
        raise SemanticError("can only assign to a slice of a tensor parameter", start_loc(target))
    bt = ck.expr(base)
    if not isinstance(bt, TensorType):
        raise SemanticError(f"cannot assign to an element of '{base.id}': only tensor slices can be "
                            f"assigned (tiles are values; build a new one)", start_loc(target))
    slice_t = ck.types_set(target, index(ck, target, bt))
    value_t = rhs_type(ck, s, slice_t)
    if isinstance(value_t, TensorType):
        raise SemanticError("cannot store a tensor; index it to load a tile", start_loc(s.value))
    ck.storable(bt.dtype, slice_t, s.value, value_t, start_loc(s.value))
    ck.out.written.add(ck.out.symbols[base].name)


def rhs_type(ck: Checker, s: ast.Assign, target_t: ValueType) -> ValueType:
    """The value being stored: the right side, or `target op right` for compound assignment."""
    if s.op == "=":
        return ck.expr(s.value)
    vt = ck.value(s.value)
    return operation(ck, s.op[:-1], target_t, None, vt, s.value, s.loc)[0]


@STATEMENTS.on(ast.ExprStmt)
def stmt_expr_stmt(ck: Checker, s: ast.ExprStmt) -> None:
    e = s.expr
    if isinstance(e, ast.Call) and e.func in BUILTINS and BUILTINS[e.func].effect:
        ck.statement_calls.add(e)
        ck.expr(e)
        return
    t = ck.expr(e)
    if not (isinstance(e, ast.Call) and e in ck.out.calls and t == VOID):
        raise SemanticError("this expression's value is unused; bind it with 'let' or assign it", start_loc(e))


@STATEMENTS.on(ast.For)
def stmt_for(ck: Checker, s: ast.For) -> None:
    start_t = ck.scalar_int(s.start, "a loop bound")
    end_t = ck.scalar_int(s.end, "a loop bound")
    dtype = ck.unify_dtypes(s.start, start_t.dtype, s.end, end_t.dtype, start_loc(s.end))
    for bound in (s.start, s.end):  # literal bounds take the loop variable's dtype
        ck.settle(bound, dtype)
    if s.step is not None:
        step_t = ck.scalar_int(s.step, "the step of range()")
        ck.unify_dtypes(s.start, dtype, s.step, step_t.dtype, start_loc(s.step))
        if ck.out.consts.get(s.step) == 0:
            raise SemanticError("the step of range() cannot be zero", start_loc(s.step))
        ck.settle(s.step, dtype)
    var = Symbol(s.var, "loop", ScalarType(dtype), s.var_loc)
    ck.out.symbols[s] = var
    loop_body(ck, s, s.body, var)


@STATEMENTS.on(ast.While)
def stmt_while(ck: Checker, s: ast.While) -> None:
    condition(ck, s.cond, "a while", "; every thread of a program instance takes the same path")
    loop_body(ck, s, s.body, None)


def condition(ck: Checker, cond: ast.Expr, what: str, tile_hint: str) -> None:
    """The condition of a `while` or an `if` is a scalar bool: a program instance takes one path."""
    ct = ck.expr(cond)
    if not (isinstance(ct, ScalarType) and ct.dtype is DType.BOOL):
        hint = tile_hint if isinstance(ct, TileType) else ""
        raise SemanticError(f"{what} condition must be a scalar bool, not {ct}{hint}", start_loc(cond))


def loop_body(ck: Checker, s, body: ast.Block, var: Symbol | None) -> None:
    """Check a loop's body in a scope of its own that holds the loop variable and the loop's flags."""
    ck.loop_stack.append((s, len(ck.scopes)))
    ck.scopes.append({})
    loop = ck.out.loops[s] = Loop(s, ck.define(ck.flag("$break", s.loc)),
                                    ck.define(ck.flag("$continue", s.loc)))
    ck.loops.append(loop)
    try:
        if var is not None:
            ck.define(var)
        ck.block(body)
    finally:
        ck.loops.pop()
        ck.scopes.pop()
        ck.loop_stack.pop()


@STATEMENTS.on(ast.Break, ast.Continue)
def stmt_break_continue(ck: Checker, s) -> None:
    word = "break" if isinstance(s, ast.Break) else "continue"
    if not ck.loops:
        raise SemanticError(f"'{word}' outside a loop", s.loc)
    loop = ck.loops[-1]
    ck.jump(s, loop.broke if word == "break" else loop.continued)


@STATEMENTS.on(ast.Return)
def stmt_return(ck: Checker, s: ast.Return) -> None:
    frame = ck.frame
    if frame.function is None:
        if s.value is not None:
            raise SemanticError("a kernel returns no value: store its results into a tensor",
                                start_loc(s.value))
    elif s.value is None:
        if frame.result_types:
            raise SemanticError(f"function '{frame.name}' returns a value; this 'return' needs one too", s.loc)
        frame.bare_return = s.loc
    else:
        return_value(ck, frame, s.value)
    ck.out.returns[s] = frame
    ck.jump(s, frame.returned)


def return_value(ck: Checker, frame: Frame, e: ast.Expr) -> None:
    """Check `return e` in a function: its values fix the function's result types, or must fit them."""
    if frame.bare_return is not None:
        raise SemanticError(f"function '{frame.name}' also returns without a value", start_loc(e),
                            [Note("here", frame.bare_return)])
    items = e.items if isinstance(e, ast.TupleLit) else [e]
    types = [ck.value(x) for x in items]
    if frame.result_types is None:
        frame.result_types = [ck.concrete(x, t) for x, t in zip(items, types)]
    elif len(types) != len(frame.result_types):
        raise SemanticError(f"function '{frame.name}' returns {len(frame.result_types)} value"
                            f"{'s' if len(frame.result_types) != 1 else ''} elsewhere, {len(types)} here",
                            start_loc(e))
    for x, t, want in zip(items, types, frame.result_types):
        ck.assignable(want, x, t, start_loc(x))
    while len(frame.results) < len(frame.result_types):
        i = len(frame.results)
        sym = Symbol(f"$result{i}", "var", frame.result_types[i], frame.function.loc)
        ck.scopes[KERNEL_SCOPE][sym.name] = sym  # the function's outermost scope
        frame.results.append(sym)
    for sym in frame.results:
        ck.note_assigned(sym)


@STATEMENTS.on(ast.Unpack)
def stmt_unpack(ck: Checker, s: ast.Unpack) -> None:
    syms = [Symbol(n, "var" if s.mutable else "let", None, loc) for n, loc in zip(s.names, s.name_locs)]
    for i, sym in enumerate(syms):
        ck.out.symbols[(s, i)] = sym
    try:
        t = ck.expr(s.value)
        if not isinstance(t, TupleType) or not t.items:
            what = "no value" if t == VOID else f"one value ({t})"
            raise SemanticError(f"{len(s.names)} names need as many values; this gives {what}",
                                start_loc(s.value))
        if len(t.items) != len(s.names):
            raise SemanticError(f"{len(s.names)} names but {len(t.items)} values", start_loc(s.value))
    except (SemanticError, Poisoned):
        for sym in syms:
            ck.scopes[-1].setdefault(sym.name, sym)
        raise
    items = s.value.items if isinstance(s.value, ast.TupleLit) else [None] * len(syms)
    for sym, item, vt in zip(syms, items, t.items):
        sym.type = ck.concrete(item, vt) if item is not None else vt
        ck.define(sym)


@STATEMENTS.on(ast.If)
def stmt_if(ck: Checker, s: ast.If) -> None:
    condition(ck, s.cond, "an if", "; use where(cond, a, b) to choose between tiles")
    ck.loop_stack.append((s, len(ck.scopes)))
    try:
        ck.block(s.then)
        if s.orelse is not None:
            ck.block(s.orelse)
    finally:
        ck.loop_stack.pop()
