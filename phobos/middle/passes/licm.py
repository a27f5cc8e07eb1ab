# Loop-invariant code motion for structured `for` loops.
from __future__ import annotations

from ..ir import Block, Function, Op


def licm(func: Function) -> None:
    """Hoist loop-invariant pure computations in front of their loop.

    Before: any valid IR.  After: no pure, region-free op at the top level of a
    `for` body has all its operands defined outside the loop; such ops now sit
    just before the loop, in their original order, so the IR stays in
    dominance order.  Inner loops are treated first, so an invariant climbs out
    of as many loops as it can.  Ops inside an `if` stay where they are: they
    may be on a path that seldom runs (the masked path of a load at an edge),
    and hoisting them would keep their values in registers for the whole loop.
    Ops with effects never move: a load may depend on stores in the loop.
    """
    _visit(func.body)


def _visit(block: Block) -> None:
    i = 0
    while i < len(block.ops):
        op = block.ops[i]
        for region in op.regions:
            _visit(region)
        if op.opcode == "for":
            hoisted = _hoist_from(op)
            block.ops[i:i] = hoisted
            i += len(hoisted)
        i += 1


def _hoist_from(loop: Op) -> list[Op]:
    inside: set = set()
    body = loop.regions[0]
    _defined_in(body, inside)
    hoisted: list[Op] = []
    _collect(body, inside, hoisted)
    return hoisted


def _defined_in(block: Block, out: set) -> None:
    out.update(block.args)
    for op in block.ops:
        out.update(op.results)
        for region in op.regions:
            _defined_in(region, out)


def _collect(block: Block, inside: set, hoisted: list[Op]) -> None:
    """Move the invariant ops at the top level of `block` to `hoisted`."""
    kept = []
    for op in block.ops:
        if op.pure and not op.regions and not any(v in inside for v in op.operands):
            hoisted.append(op)
            inside.difference_update(op.results)
            continue
        kept.append(op)
    block.ops = kept
