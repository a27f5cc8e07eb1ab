# Common-subexpression elimination over structured regions.
#
# A value defined in a block is visible in every block nested inside it, so a
# scoped table - one dictionary per open block, looked up from the innermost out
# - finds every earlier equal computation that dominates an op.
from __future__ import annotations

import struct

from ..ir import COMMUTATIVE, Block, Function, Op, Value, replace_uses


def freeze(x):
    """A hashable form of an attribute value (lists to tuples, floats by bit pattern)."""
    if isinstance(x, (list, tuple)):
        return tuple(freeze(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, freeze(v)) for k, v in x.items()))
    if isinstance(x, float):
        return ("f", struct.pack("<d", x))  # 0.0 and -0.0 differ; so do NaNs of other signs or payloads
    return x


def _key(op: Op) -> tuple:
    operands = tuple(v.id for v in op.operands)
    if op.opcode in COMMUTATIVE:
        operands = tuple(sorted(operands))
    return (op.opcode, operands, freeze(op.attrs), tuple(r.type for r in op.results))


def cse(func: Function) -> None:
    """Replace each pure op by an earlier identical one that dominates it.

    Before: any valid IR.  After: no two pure, region-free ops with the same
    opcode, operands (up to commutation), attributes and result types where one
    dominates the other; the later one's uses point at the earlier one's
    results.  The duplicates stay in place for DCE to remove.
    """
    replace: dict[Value, Value] = {}
    _cse_block(func.body, [], replace)
    replace_uses(func, replace)


def _cse_block(block: Block, scopes: list[dict], replace: dict[Value, Value]) -> None:
    table: dict[tuple, Op] = {}
    scopes.append(table)
    for op in block.ops:
        op.operands = [replace.get(v, v) for v in op.operands]
        for region in op.regions:
            _cse_block(region, scopes, replace)
        if not op.pure or op.regions or not op.results:
            continue
        key = _key(op)
        earlier = next((s[key] for s in reversed(scopes) if key in s), None)
        if earlier is None:
            table[key] = op
        else:
            for mine, theirs in zip(op.results, earlier.results):
                replace[mine] = theirs
    scopes.pop()
