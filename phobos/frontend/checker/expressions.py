# The checking rules of expressions other than calls: literals, names,
# tuples, unary and binary operators (with their constant folding), and
# indexing - a tensor slice (a load, a gather, the target of a store or an
# atomic) or a part of a tile.
#
# Literal-only expressions are weak (core.py): their integer values are
# folded exactly and settle in the dtype their context gives them; any other
# constant expression is evaluated in its dtype by `constants.evaluate`, as
# the GPU would.  Calls are calls.py's.
from __future__ import annotations

from ...constants import OPERATORS, evaluate, exact, fits, int_range
from ...errors import Loc, SemanticError
from ...types import DType, ScalarType, TensorType, TileType, TupleType, ValueType, shape_of
from .. import ast
from ..ast import start_loc
from .core import EXPRESSIONS, Checker, Poisoned, article

_COMPARE = {"==", "!=", "<", "<=", ">", ">="}


@EXPRESSIONS.on(ast.StrLit)
def expr_str_lit(ck: Checker, e: ast.StrLit):
    raise SemanticError("a string can only be an option of a builtin, like dot(a, b, precision=\"tf32\"), "
                        "or the message of device_print() or device_assert()", e.loc)


@EXPRESSIONS.on(ast.TupleLit)
def expr_tuple_lit(ck: Checker, e: ast.TupleLit):
    return TupleType(tuple(ck.value(x) for x in e.items))


@EXPRESSIONS.on(ast.IntLit)
def expr_int_lit(ck: Checker, e: ast.IntLit):
    ck.weak.add(e)
    ck.out.consts[e] = e.value
    return ScalarType(DType.I32)


@EXPRESSIONS.on(ast.FloatLit)
def expr_float_lit(ck: Checker, e: ast.FloatLit):
    ck.weak.add(e)
    ck.out.consts[e] = e.value
    return ScalarType(DType.F32)


@EXPRESSIONS.on(ast.BoolLit)
def expr_bool_lit(ck: Checker, e: ast.BoolLit):
    ck.out.consts[e] = e.value
    return ScalarType(DType.BOOL)


@EXPRESSIONS.on(ast.Name)
def expr_name(ck: Checker, e: ast.Name):
    sym = ck.lookup(e.id, e.loc)
    ck.out.symbols[e] = sym
    if sym.type is None:
        raise Poisoned()
    if sym.value is not None:
        ck.out.consts[e] = sym.value
    if sym.kind == "literal":
        ck.weak.add(e)
    return sym.type


@EXPRESSIONS.on(ast.ListLit)
def expr_list_lit(ck: Checker, e: ast.ListLit):
    raise SemanticError("a list can only be a shape argument, as in full([4, 8], 0.0)", e.loc)


@EXPRESSIONS.on(ast.Unary)
def expr_unary(ck: Checker, e: ast.Unary):
    t = ck.value(e.operand)
    value = ck.out.consts.get(e.operand)
    if e.op == "-":
        if t.dtype is DType.BOOL:
            raise SemanticError("unary '-' needs a number, not bool; use '!' for logical not", e.loc)
        if value is not None:
            if e.operand in ck.weak:
                ck.check_fits(-value, DType.I64, e.loc)
                ck.out.consts[e] = -value
            else:
                ck.out.consts[e] = evaluate("neg", {}, [value], [t.dtype], t.dtype)
    elif e.op == "~":
        if not t.dtype.is_int:
            raise SemanticError(f"'~' flips the bits of an integer, not of {article(t.dtype)}; "
                                f"use '!' for logical not", e.loc)
        if value is not None:
            ck.out.consts[e] = ~value if e.operand in ck.weak else \
                evaluate("not", {}, [value], [t.dtype], t.dtype)
    else:
        if t.dtype is not DType.BOOL:
            raise SemanticError(f"'!' needs a bool operand, not {t.dtype}; use '~' to flip the bits of "
                                f"an integer", e.loc)
        if value is not None:
            ck.out.consts[e] = not value
    if e.operand in ck.weak:
        ck.weak.add(e)
    return t


@EXPRESSIONS.on(ast.Binary)
def expr_binary(ck: Checker, e: ast.Binary):
    lt, rt = ck.value(e.lhs), ck.value(e.rhs)
    result, operand_dtype = operation(ck, e.op, lt, e.lhs, rt, e.rhs, e.loc)
    fold(ck, e, result, operand_dtype)
    if e.lhs in ck.weak and e.rhs in ck.weak:
        ck.weak.add(e)
    return result


def operation(ck: Checker, op: str, lt: ValueType, lhs: ast.Expr | None, rt: ValueType, rhs: ast.Expr,
              loc: Loc) -> tuple[ValueType, DType]:
    """The type of `lhs op rhs` (lhs None: the target of a compound assignment, of type lt),
    and the dtype its operands meet in."""
    shape = ck.broadcast(shape_of(lt), shape_of(rt), loc)
    if op in ("&&", "||"):
        for side, t in ((lhs, lt), (rhs, rt)):
            if t.dtype is not DType.BOOL:
                raise SemanticError(f"'{op}' needs bool operands, not {t.dtype}",
                                    start_loc(side) if side is not None else loc)
        return (ScalarType(DType.BOOL) if shape is None else TileType(DType.BOOL, shape)), DType.BOOL
    if op not in _COMPARE and op not in ("&", "|", "^") and DType.BOOL in (lt.dtype, rt.dtype):
        raise SemanticError(f"'{op}' needs numbers, not bool", loc)
    dtype = ck.unify_dtypes(lhs, lt.dtype, rhs, rt.dtype, loc)
    if op in _COMPARE:
        if dtype is DType.BOOL and op not in ("==", "!="):
            raise SemanticError(f"'{op}' compares numbers, not bools", loc)
        return (ScalarType(DType.BOOL) if shape is None else TileType(DType.BOOL, shape)), dtype
    if op in ("&", "|", "^"):
        if dtype.is_float:
            raise SemanticError(f"'{op}' works on the bits of integers (or on bools), not on {dtype}; "
                                f"see bitcast()", loc)
    elif op in ("<<", ">>") and not dtype.is_int:
        raise SemanticError(f"'{op}' needs integer operands, not {dtype}", loc)
    if op in ("<<", ">>"):
        check_shift(ck, rhs, dtype if lhs is None or lhs not in ck.weak else DType.I64)
    return (ScalarType(dtype) if shape is None else TileType(dtype, shape)), dtype


def check_shift(ck: Checker, amount: ast.Expr, dtype: DType) -> None:
    """A shift by a constant must be by 0 to bits-1 (a run-time amount beyond gives 0, or the sign)."""
    value = ck.out.consts.get(amount)
    if value is not None and not 0 <= value < dtype.bits:
        raise SemanticError(f"a shift of {article(dtype)} by {value}: the amount must be from 0 to {dtype.bits - 1}",
                            start_loc(amount))


def fold(ck: Checker, e: ast.Binary, result: ValueType, operand_dtype: DType) -> None:
    """The constant value of a binary expression on constants.

    Literal-only expressions are evaluated exactly (Python ints, doubles)
    and rounded once to the dtype their context gives them; any other
    constant expression is evaluated in its dtype, as the GPU would.
    """
    a, b = ck.out.consts.get(e.lhs), ck.out.consts.get(e.rhs)
    if a is None or b is None or not isinstance(result, ScalarType):
        return
    opcode, attrs = OPERATORS[e.op]
    if e.lhs in ck.weak and e.rhs in ck.weak:
        try:
            value = exact(opcode, attrs, a, b)
        except ZeroDivisionError:
            raise SemanticError("division by zero in a constant expression", e.loc) from None
        if isinstance(value, int) and not isinstance(value, bool) and not fits(value, DType.I64) \
                and not fits(value, DType.U64):
            raise SemanticError(f"the constant {value} is not a 64-bit integer (from {int_range(DType.I64)[0]} "
                                f"to {int_range(DType.U64)[1]})", e.loc)
    elif opcode in ("div", "rem") and operand_dtype.is_int and b == 0:
        raise SemanticError("division by zero in a constant expression", e.loc)
    else:
        value = evaluate(opcode, attrs, [a, b], [operand_dtype, operand_dtype], result.dtype)
    ck.out.consts[e] = value


@EXPRESSIONS.on(ast.Index)
def expr_index(ck: Checker, e: ast.Index):
    bt = ck.single(e.base, ck.expr(e.base))  # a tuple is taken apart, not indexed
    if isinstance(bt, TensorType):
        return index(ck, e, bt)
    if isinstance(bt, ScalarType):
        raise SemanticError(f"cannot index a scalar of type {bt}", e.loc)
    return tile_index(ck, e, bt)


def index(ck: Checker, e: ast.Index, bt: TensorType) -> ValueType:
    """Type of a tensor slice `T[...]`: a tile of the slice sizes, or a scalar.

    Integer tiles among the subscripts (a gather, or a scatter when stored
    into) must stand next to each other; their shapes broadcast together
    and that shape takes their place in the result."""
    if len(e.subscripts) != bt.rank:
        raise SemanticError(f"tensor '{getattr(e.base, 'id', '?')}' has {bt.rank} dimension"
                            f"{'s' if bt.rank != 1 else ''} but is indexed with {len(e.subscripts)}",
                            e.loc)
    shape = []
    gathered, gather_at, last_tile = None, 0, None
    for d, (dim, sub) in enumerate(zip(bt.dims, e.subscripts)):
        if isinstance(sub, ast.Slice):
            ck.scalar_int(sub.start, "a slice start")
            ck.settle(sub.start, DType.I32)
            size = ck.const_int(sub.size, "the size of a slice (after ':+')")
            if size <= 0:
                raise SemanticError(f"the size of a slice must be positive, got {size}", start_loc(sub.size))
            if isinstance(dim, int) and size > dim:
                raise SemanticError(f"a slice of {size} elements is larger than the dimension ({dim})",
                                    start_loc(sub.size))
            shape.append(size)
        else:
            t = ck.expr(sub)
            if isinstance(t, TileType):
                if not t.dtype.is_int:
                    raise SemanticError(f"a tile used as an index must hold integers, not {t.dtype}",
                                        start_loc(sub))
                if last_tile is not None and last_tile != d - 1:
                    raise SemanticError("tiles used as indices must be next to each other (their shapes "
                                        "broadcast together into one part of the result)", start_loc(sub))
                if gathered is None:
                    gathered, gather_at = t.shape, len(shape)
                else:
                    gathered = ck.broadcast(gathered, t.shape, start_loc(sub))
                last_tile = d
                continue
            ck.scalar_int(sub, "an index")
            ck.settle(sub, DType.I32)
    if gathered is not None:
        shape[gather_at:gather_at] = gathered
    dtype = bt.dtype.loaded
    if not shape:
        return ScalarType(dtype)
    ck.check_size(shape, e.loc)
    return TileType(dtype, tuple(shape))


def tile_index(ck: Checker, e: ast.Index, bt: TileType) -> ValueType:
    """Type of a part of a tile `t[...]`: starts and sizes are compile-time constants."""
    if len(e.subscripts) != len(bt.shape):
        raise SemanticError(f"a tile of rank {len(bt.shape)} is indexed with {len(e.subscripts)} "
                            f"subscripts", e.loc)
    shape = []
    for extent, sub in zip(bt.shape, e.subscripts):
        start_e = sub.start if isinstance(sub, ast.Slice) else sub
        if isinstance(ck.expr(start_e), TileType):
            raise SemanticError("a tile is indexed with compile-time constants; to pick elements by a "
                                "tile of indices, gather from a tensor (T[idx])", start_loc(start_e))
        start = ck.const_int(start_e, "an index into a tile")
        size = ck.const_int(sub.size, "the size of a slice") if isinstance(sub, ast.Slice) else 1
        if size <= 0:
            raise SemanticError(f"the size of a slice must be positive, got {size}", start_loc(sub))
        if start < 0 or start + size > extent:
            raise SemanticError(f"index {start}{f' :+ {size}' if size != 1 or isinstance(sub, ast.Slice) else ''}"
                                f" is outside the tile's extent {extent}", start_loc(sub))
        if isinstance(sub, ast.Slice):
            shape.append(size)
    return TileType(bt.dtype, tuple(shape)) if shape else ScalarType(bt.dtype)
