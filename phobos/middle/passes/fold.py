# Constant folding and algebraic simplification.
#
# Folding evaluates with NumPy in the op's own dtype, so that the constant is
# bit for bit what the GPU would compute: i32 arithmetic wraps, integer division
# truncates toward zero, f32 operations round once to f32.  Operations whose GPU
# result is not exactly specified (the .approx math functions) or that round
# twice when emulated (fma) are left alone.
from __future__ import annotations

import numpy as np

from ..ir import Block, Function, Op, Value, replace_uses
from ...types import DType

_NP = {d: np.dtype(d.numpy_name) for d in (DType.BOOL, DType.I32, DType.I64, DType.U32, DType.F32, DType.F64)}


def _arr(value, dtype: DType) -> np.ndarray:
    return np.array([value], dtype=_NP[dtype])


def _int_div(a: np.ndarray, b: np.ndarray, rem: bool) -> np.ndarray:
    """C division: the quotient truncates toward zero; the remainder takes the dividend's sign."""
    q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
    q = np.where((a < 0) != (b < 0), -q, q)
    return (a.astype(np.int64) - q * b.astype(np.int64) if rem else q).astype(a.dtype)


def _div(a, b):
    if a.dtype.kind == "f":
        return a / b
    return _int_div(a, b, rem=False)


_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}

# opcode -> f(attrs, *operand arrays) -> array, or None to leave the op alone.
EVALUATE = {
    "add": lambda at, a, b: a + b,
    "sub": lambda at, a, b: a - b,
    "mul": lambda at, a, b: a * b,
    "div": lambda at, a, b: None if (a.dtype.kind != "f" and b[0] == 0) else _div(a, b),
    "rem": lambda at, a, b: None if b[0] == 0 else _int_div(a, b, rem=True),
    "min": lambda at, a, b: np.fmin(a, b),
    "max": lambda at, a, b: np.fmax(a, b),
    "and": lambda at, a, b: a & b,
    "or": lambda at, a, b: a | b,
    "xor": lambda at, a, b: a ^ b,
    "neg": lambda at, a: -a,
    "not": lambda at, a: ~a,
    "abs": lambda at, a: np.abs(a),
    "cmp": lambda at, a, b: _COMPARE[at["pred"]](a, b),
    "select": lambda at, c, a, b: np.where(c, a, b),
}


def _cast(value: np.ndarray, dtype: DType):
    if value.dtype.kind == "f" and dtype.is_int:
        v = float(value[0])
        info = np.iinfo(_NP[dtype])
        if not np.isfinite(v) or not info.min <= v <= info.max:
            return None  # the GPU saturates; leave it to the GPU
        return np.array([int(v)], dtype=_NP[dtype])
    if dtype is DType.BOOL:
        return value != 0
    return value.astype(_NP[dtype])


def _scalar(arr: np.ndarray):
    v = arr[0]
    return bool(v) if arr.dtype == np.bool_ else (float(v) if arr.dtype.kind == "f" else int(v))


def fold(func: Function) -> None:
    """Fold constant operations and simplify identities.

    Before: any valid IR.  After: every pure op whose operands are all `const`
    and whose exact value is known has become a `const`; x+0, x-0, x*1, x/1,
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
    same = identity(op.opcode, op.operands, known, dtype)
    if same is not None and same.type == op.result.type:
        replace[op.result] = same


def _evaluate(op: Op, known: list):
    return evaluate(op.opcode, op.attrs, known, [v.dtype for v in op.operands], op.result.dtype)


def evaluate(opcode: str, attrs: dict, known: list, dtypes: list[DType], result: DType):
    """The exact value of `opcode` on constant operands, or None when it is not known exactly."""
    if opcode == "cast":
        arr = _cast(_arr(known[0], dtypes[0]), result)
        return None if arr is None else _scalar(arr)
    fn = EVALUATE.get(opcode)
    if fn is None:
        return None
    arrays = [_arr(k, d) for k, d in zip(known, dtypes)]
    with np.errstate(all="ignore"):
        out = fn(attrs, *arrays)
    if out is None:
        return None
    return _scalar(out.astype(_NP[result]))


def identity(code: str, ops: list[Value], known: list, dtype: DType) -> Value | None:
    """The operand that `code(ops)` equals, when an identity makes it one (known: constant operands)."""
    if code == "select":
        if known[0] is not None:
            return ops[1] if known[0] else ops[2]
        return ops[1] if ops[1] is ops[2] else None
    if len(ops) != 2:
        return None
    a, b = known
    if code == "add" and dtype.is_int:
        return ops[0] if b == 0 else (ops[1] if a == 0 else None)
    if code == "sub" and b == 0 and (dtype.is_int or not _negative_zero(b)):
        return ops[0]
    if code == "mul":
        if b == 1:
            return ops[0]
        if a == 1:
            return ops[1]
        if dtype.is_int and (a == 0 or b == 0):
            return ops[0] if a == 0 else ops[1]
    if code == "div" and b == 1:
        return ops[0]
    if code in ("and", "or") and dtype is DType.BOOL:
        neutral = code == "and"
        if b is not None:
            return ops[0] if b == neutral else ops[1]
        if a is not None:
            return ops[1] if a == neutral else ops[0]
    return None


def _negative_zero(x) -> bool:
    return isinstance(x, float) and x == 0.0 and np.signbit(x)


def _make_const(op: Op, value, consts: dict) -> None:
    op.opcode, op.operands, op.attrs = "const", [], {"value": value}
    consts[op.result] = value

