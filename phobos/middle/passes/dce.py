# Dead-code elimination, including dead values carried by loops and branches.
from __future__ import annotations

from ..ir import Block, Function, Op, uses


def dce(func: Function) -> None:
    """Delete computations whose results nobody uses.

    Before: any valid IR.  After: no pure op has all its results unused; no
    `for` carries a value that is unused after the loop and inside it either
    unread or only passed round unchanged (one computed from itself, like an
    unused sum, stays); no `if` yields a value nobody reads; a `for` or `if`
    with no results whose regions hold only their `yield` is gone.  Ops with
    effects (loads, stores, barriers) are kept.
    """
    rescan = True
    while rescan:
        rescan = _sweep(func.body, uses(func))


def _sweep(block: Block, count: dict) -> bool:
    """Remove the dead ops of `block` and its regions, last first, keeping `count` up to date; whether another
    sweep may find more.

    An op is looked at after every op that could use its results - those after
    it, and its own regions - so one sweep leaves none removable, except that
    dropping a loop's carried value or a branch's result takes an operand from
    a `yield` of a region swept already, which may leave an op there unused:
    only then is another sweep needed."""
    rescan = False
    kept = []
    for op in reversed(block.ops):
        for region in op.regions:
            rescan |= _sweep(region, count)
        if op.opcode == "for":
            rescan |= _drop_dead_carried(op, count)
        elif op.opcode == "if":
            rescan |= _drop_dead_results(op, count)
        if _removable(op, count):
            for v in op.operands:
                count[v] -= 1
            continue
        kept.append(op)
    block.ops = kept[::-1]
    return rescan


def _removable(op: Op, count: dict) -> bool:
    if any(count.get(r, 0) for r in op.results):
        return False
    if op.pure and not op.regions:
        return True
    if op.opcode in ("for", "if") and not op.results:
        return all(len(r.ops) == 1 for r in op.regions)
    return False


def _drop_dead_carried(op: Op, count: dict) -> bool:
    """Remove carried values whose result is unused and whose argument only feeds its own yield."""
    body = op.regions[0]
    yield_op = body.ops[-1]
    dead = []
    for i, (arg, res) in enumerate(zip(body.args[1:], op.results)):
        nxt = yield_op.operands[i]
        own_uses = sum(1 for v in yield_op.operands if v is arg)
        if count.get(res, 0) == 0 and count.get(arg, 0) == own_uses and (nxt is arg or own_uses == 0):
            dead.append(i)
    if not dead:
        return False
    for i in reversed(dead):
        count[op.operands[2 + i]] -= 1
        count[yield_op.operands[i]] -= 1
        del op.operands[2 + i]
        del body.args[1 + i]
        del op.results[i]
        del yield_op.operands[i]
    return True


def _drop_dead_results(op: Op, count: dict) -> bool:
    dead = [i for i, r in enumerate(op.results) if count.get(r, 0) == 0]
    if not dead:
        return False
    for region in op.regions:
        y = region.ops[-1]
        for i in reversed(dead):
            count[y.operands[i]] -= 1
            del y.operands[i]
    for i in reversed(dead):
        del op.results[i]
    return True
