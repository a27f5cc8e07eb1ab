# Fusing `acc + dot(a, b)` into a dot that accumulates into acc.
from __future__ import annotations

from ..ir import Block, Function, uses


def fuse_dot(func: Function) -> None:
    """Turn `add(x, dot(a, b))` into `dot(a, b, x)` when the dot has no other use.

    Before: tile-level IR.  After: such a dot starts each element's chain of
    fused multiply-adds from x instead of from 0, and the add is gone: one
    rounding per product term either way, but no separate rounding of the sum
    x + (a @ b), and no second tile of registers.  `acc += dot(a, b)` is the
    case this is for.  The fused dot takes the add's place (where x and the
    dot's operands are all defined); the add and dot must share a block.
    A product of 8-bit floats fused so promotes (attr `promote`, DType.dot_promotes): its sums start from
    zero and it is added to x in f32 after them - in chunks small enough that x and the chunk's sums fit
    in registers together (mma.py).
    """
    _fuse_block(func.body, uses(func))


def _fuse_block(block: Block, count: dict) -> None:
    dead = set()
    for op in block.ops:
        for region in op.regions:
            _fuse_block(region, count)
        if op.opcode != "add":
            continue
        for i, v in enumerate(op.operands):
            dot = v.owner
            if (getattr(dot, "opcode", None) == "dot" and len(dot.operands) == 2 and count.get(v) == 1
                    and dot in block.ops and v.type == op.result.type):
                op.opcode, op.operands = "dot", [*dot.operands, op.operands[1 - i]]
                op.attrs = dict(dot.attrs, **({"promote": True} if dot.operands[0].dtype.dot_promotes else {}))
                dead.add(dot)
                break
    block.ops = [op for op in block.ops if op not in dead]
