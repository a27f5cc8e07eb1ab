# Tensor-core products issued before the loads they do not need.
from __future__ import annotations

from ..ir import Block, Function, Op


def products_first(func: Function) -> None:
    """Issue each block's first wgmma group before the read-only loads that precede it in the block but
    that no op up to the group's commit needs: those move to just after the commit, in their order, so
    that their latency passes while the tensor cores work.

    ptxas hoists arithmetic that does not need a group's results above the group, and a thread then waits
    there for the loads it reads (an FP8 GEMM's block scales, multiplied into the factor its product is
    scaled by) before it issues the group; loads written after the group stay after it.

    Before: thread-level IR in dominance order.  After: the same ops, still in dominance order; in every
    block with a `wgmma`, no load before the first one is movable and unused by the ops that stay before
    the commit closing its group (the ops in between included).  Movable: loads of tensors the kernel
    never writes (`read_only`: no store can be crossed) and `if`s of nothing but them and the arithmetic
    they need (a load's bounds checks).  Arithmetic at the block's level stays where lowering wrote it
    (what it computes, its addresses included, is ready before the group)."""
    _visit(func.body)


def _visit(block: Block) -> None:
    for op in block.ops:
        for region in op.regions:
            _visit(region)
    first = next((i for i, op in enumerate(block.ops) if op.opcode == "wgmma"), None)
    commit = None if first is None else \
        next((i for i in range(first, len(block.ops)) if block.ops[i].opcode == "wgmma_commit"), None)
    if commit is None:
        return
    needed: set[int] = set()
    for op in block.ops[first:commit + 1]:
        _uses(op, needed)
    kept, moved = [], []
    for op in reversed(block.ops[:first]):
        if _movable(op) and not any(id(r) in needed for r in op.results):
            moved.append(op)
            continue
        kept.append(op)
        _uses(op, needed)
    if moved:
        block.ops[:commit + 1] = kept[::-1] + block.ops[first:commit + 1] + moved[::-1]


def _movable(op: Op) -> bool:
    """A load of a tensor the kernel never writes, or an `if` of such loads and the arithmetic they need
    (a load's bounds checks)."""
    if op.opcode == "if":
        inner = [o for region in op.regions for o in region.ops if o.opcode != "yield"]
        return any(o.opcode == "ld_global" for o in inner) and \
            all(_movable(o) or (o.pure and not o.regions) for o in inner)
    return op.opcode == "ld_global" and bool(op.attrs.get("read_only"))


def _uses(op: Op, out: set[int]) -> None:
    """Add the ids of the values `op` reads, in its regions too."""
    out.update(id(v) for v in op.operands)
    for region in op.regions:
        for inner in region.ops:
            _uses(inner, out)
