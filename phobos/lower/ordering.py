# Ordering global memory within a CTA: which tensor accesses need a barrier
# before them.
#
# The statements of a program instance run in order, but the CTA's threads do
# not run in step, and each holds its own elements of a tile: when thread t
# stores an element that thread u loads later (or loads one that u stores
# later), u may run ahead of t and see the wrong value.  A barrier
# (`bar.sync`) orders every memory access of the CTA's threads, so lowering
# puts one before such a later access; memory.py and pipeline.py ask
# `Lowering.global_barriers` for the accesses that need one.
#
# Two accesses of one tensor conflict when at least one writes (a store; an
# atomic add conflicts with loads and stores, not with another atomic) and an
# element they share may be touched by different threads.  It is not when they
# are the same slice (the same start values and sizes) in the same layout and
# one thread touches each element in both: a layout without replicas, or
# replicas of which only the first takes part (stores, and the loads a fused
# store makes, are done by the first replica alone; a scalar is stored by
# thread 0).  So `x[s :+ B] += y` needs no barrier, while a store followed by
# a load of another slice of the same tensor, or in another layout, does.
#
# `global_barriers` walks the tile-level function in program order, keeping
# the accesses made since the last barrier.  A loop's body is walked again,
# starting from the accesses before the loop and those its end leaves, until
# that start stops growing (it only grows, and there are finitely many
# accesses); those carried over from an earlier iteration never count as the
# same slice (their start values were that iteration's).  Both branches of an `if` start from the accesses
# before it, and after it either may have run.  The loads that a fused store
# computes (fusion.py) happen at the store.  Barriers that other ops emit for
# shared memory are not counted: at worst a barrier is one too many.
from __future__ import annotations

from dataclasses import dataclass, replace

from ..middle.ir import Block, Function, Op, Value
from .fusion import fusion_plan
from .layout import Layout

@dataclass(frozen=True)
class Access:
    """One load, store or atomic add of a tensor slice, as the threads of a CTA make it."""

    tensor: Value
    kind: str  # "load", "store" or "atomic_add"
    starts: tuple[Value, ...]
    sizes: tuple[int | None, ...]
    layout: Layout | None  # None: a scalar
    first_replica_only: bool  # only the first of each element's replicas makes it
    carried: bool = False  # made in an earlier iteration of an enclosing loop


def conflict(a: Access, b: Access) -> bool:
    """Whether `b`, after `a` with no barrier between, may touch an element of `a` in another thread, one writing."""
    if a.tensor is not b.tensor or {a.kind, b.kind} in ({"load"}, {"atomic_add"}):
        return False
    same_slice = not a.carried and a.starts == b.starts and a.sizes == b.sizes
    one_thread = a.layout == b.layout and (
        (a.first_replica_only and b.first_replica_only) or (a.layout is not None and not a.layout.replicas))
    return not (same_slice and one_thread)


def global_barriers(func: Function, layouts: dict[Value, Layout], use_count: dict[Value, int]) -> set[Op]:
    """The loads, stores and atomic adds of `func` that need a barrier before them (see the header)."""
    marked: set[Op] = set()

    def access(op: Op, fused_load: bool = False) -> Access:
        value = op.result if op.opcode == "load" else op.operands[-1]
        ndims = len(op.operands[0].type.dims)
        return Access(op.operands[0], op.opcode, tuple(op.operands[1:1 + ndims]), tuple(op.attrs["sizes"]),
                      layouts.get(value), fused_load or op.opcode != "load")

    def walk_block(block: Block, made: frozenset[Access]) -> frozenset[Access]:
        plans = fusion_plan(block.ops, layouts, use_count)
        at_store = {ld for plan in plans.values() for ld in plan.loads}
        for op in block.ops:
            if op.opcode in ("load", "store", "atomic_add") and op not in at_store:
                group = [access(ld, fused_load=True) for ld in plans[op].loads] if op in plans else []
                group.append(access(op))
                if any(conflict(a, b) for a in made for b in group):
                    marked.add(op)
                    made = frozenset()
                made = made | frozenset(group)
            elif op.opcode == "for":
                made = made | walk_loop(op.regions[0], made)
            elif op.opcode == "if":
                made = frozenset().union(*(walk_block(region, made) for region in op.regions))
        return made

    def walk_loop(body: Block, before: frozenset[Access]) -> frozenset[Access]:
        """The accesses a loop's body leaves at its end; its start grows until its own end adds nothing."""
        start = before
        while True:
            end = walk_block(body, start)
            grown = start | frozenset(replace(a, carried=True) for a in end)
            if grown == start:
                return end
            start = grown

    walk_block(func.body, frozenset())
    return marked
