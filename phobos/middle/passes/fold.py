# Constant folding and algebraic simplification.
#
# A constant is folded to exactly what the GPU would compute, by the language's
# one definition of constant values (`phobos.constants`): i32 arithmetic wraps,
# integer division truncates toward zero, f32 operations round once to f32,
# float -> int conversions saturate.  Operations whose GPU result is not exactly
# specified (the .approx math functions) or that round twice when emulated
# (fma), and integer divisions by zero, are left alone.
from __future__ import annotations

from ..ir import Block, Function, Op, Value, replace_uses
from ...constants import absorbed_nan, evaluate
from ...types import DType


def fold(func: Function) -> None:
    """Fold constant operations and simplify identities.

    Before: any valid IR.  After: every pure op whose operands are all `const`
    and whose exact value is known has become a `const`, and so has an f64
    + - * / with a NaN constant operand (`constants.absorbed_nan`: ptxas would
    fold it so); x+0, x-0, x*1, x/1,
    x*0 (integers), select with a constant condition or equal arms, and `if`
    with a constant condition are gone, their uses rewired.  Dead ops remain for
    DCE to remove.
    """
    consts: dict[Value, object] = {}
    replace: dict[Value, Value] = {}
    _fold_block(func.body, consts, replace)
    replace_uses(func, replace)


def _fold_block(block: Block, consts: dict, replace: dict) -> None:
    i = 0
    while i < len(block.ops):
        op = block.ops[i]
        op.operands = [_final(v, replace) for v in op.operands]
        if op.opcode == "if" and op.operands[0] in consts:
            taken = op.regions[0 if consts[op.operands[0]] else 1]
            block.ops[i:i + 1] = taken.ops[:-1]
            for r, y in zip(op.results, taken.ops[-1].operands):
                replace[r] = y
            continue  # the spliced ops are visited next
        for region in op.regions:
            _fold_block(region, consts, replace)
        if op.opcode == "const":
            consts[op.result] = op.attrs["value"]
        elif op.pure and not op.regions and len(op.results) == 1:
            _fold_op(op, consts, replace)
        i += 1


def _final(v: Value, replace: dict) -> Value:
    while v in replace:
        v = replace[v]
    return v


def _fold_op(op: Op, consts: dict, replace: dict) -> None:
    known = [consts.get(v) for v in op.operands]
    dtype = op.result.dtype
    if op.opcode == "broadcast" and known[0] is not None:
        _make_const(op, known[0], consts)
        return
    if op.operands and all(k is not None for k in known):
        value = _evaluate(op, known)
        if value is not None:
            _make_const(op, value, consts)
            return
    if dtype is DType.F64 and len(known) == 2:
        nan = absorbed_nan(op.opcode, *known)
        if nan is not None:
            _make_const(op, nan, consts)
            return
    same = identity(op.opcode, op.operands, known, dtype)
    if same is not None and same.type == op.result.type:
        replace[op.result] = same


def _evaluate(op: Op, known: list):
    return evaluate(op.opcode, op.attrs, known, [v.dtype for v in op.operands], op.result.dtype)


def identity(code: str, ops: list[Value], known: list, dtype: DType) -> Value | None:
    """The operand that `code(ops)` equals, when an identity makes it one (known: constant operands)."""
    if code == "select":
        if known[0] is not None:
            return ops[1] if known[0] else ops[2]
        return ops[1] if ops[1] is ops[2] else None
    if len(ops) != 2:
        return None
    a, b = known
    if dtype.is_int:  # not floats: x - 0.0, x * 1.0 and x / 1.0 make a NaN x the canonical NaN
        if code == "add":
            return ops[0] if b == 0 else (ops[1] if a == 0 else None)
        if code == "sub" and b == 0:
            return ops[0]
        if code == "mul":
            if b == 1 or a == 0:
                return ops[0]
            if a == 1 or b == 0:
                return ops[1]
        if code == "div" and b == 1:
            return ops[0]
    if code in ("and", "or") and dtype is DType.BOOL:
        neutral = code == "and"
        if b is not None:
            return ops[0] if b == neutral else ops[1]
        if a is not None:
            return ops[1] if a == neutral else ops[0]
    return None


def _make_const(op: Op, value, consts: dict) -> None:
    op.opcode, op.operands, op.attrs = "const", [], {"value": value}
    consts[op.result] = value

