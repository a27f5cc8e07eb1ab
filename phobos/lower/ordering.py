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
# Two accesses of one tensor conflict when at least one writes (a store or a
# scatter; an atomic conflicts with loads and stores, not with another atomic)
# and an element they share may be touched by different threads.  A gather,
# scatter or atomic names its elements by its index operands (a scalar, or a
# tile in the access's layout, per dim): two of them with the same index
# operands in one layout are the same elements in the same threads.  It is not when they
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
# accesses).  An access carried over from an earlier iteration never counts
# as the same slice (its start values were that iteration's), but the same
# slice expression is apart from itself when it starts at the loop variable
# (plus a constant) along a dim whose size the step reaches: `y[r, c :+ BN]`
# in `for c in range(0, N, BN)` touches other elements in every iteration.  Both branches of an `if` start from the accesses
# before it, and after it either may have run.  The loads that a fused store
# computes (fusion.py) happen at the store.  Barriers that other ops emit for
# shared memory are not counted: at worst a barrier is one too many.
from __future__ import annotations

from dataclasses import dataclass, replace

from ..middle.ir import Block, Function, Op, Value, walk
from ..types import TileType
from .fusion import fusion_plan
from .layout import Layout

@dataclass(frozen=True)
class Access:
    """One load, store or atomic add of a tensor slice, as the threads of a CTA make it."""

    tensor: Value
    kind: str  # "load", "store" or "atomic" (ACCESS_KINDS)
    starts: tuple[Value, ...]
    sizes: tuple[int | None, ...]
    layout: Layout | None  # None: a scalar
    first_replica_only: bool  # only the first of each element's replicas makes it
    carried: object | None = None  # made in an earlier iteration of the loop with this induction variable
    #                                (a while loop: the loop op itself)


def conflict(a: Access, b: Access, steps: dict[Value, int]) -> bool:
    """Whether `b`, after `a` with no barrier between, may touch an element of `a` in another thread, one writing.

    `steps` gives the step of each loop by its induction variable."""
    if a.tensor is not b.tensor or {a.kind, b.kind} in ({"load"}, {"atomic"}):
        return False
    if a.carried is not None:
        return not (a.starts == b.starts and a.sizes == b.sizes and _apart_each_iteration(a, steps))
    same_slice = a.starts == b.starts and a.sizes == b.sizes
    one_thread = a.layout == b.layout and (
        (a.first_replica_only and b.first_replica_only) or (a.layout is not None and not a.layout.replicas))
    return not (same_slice and one_thread)


def _apart_each_iteration(a: Access, steps: dict[Value, int]) -> bool:
    """Whether the slice `a`, made anew in each iteration of the loop that carried it, moves past itself:
    along some dim it starts at the induction variable (plus a constant) and the step is at least its size."""
    if a.carried not in steps:  # a while loop: no induction variable to move the slice
        return False
    step = abs(steps[a.carried])
    for start, size in zip(a.starts, a.sizes):
        if _offset_from(start, a.carried) is not None and step >= (size or 1):
            return True
    return False


def _offset_from(v: Value, iv: Value) -> int | None:
    """c when `v` is `iv + c` (or `iv` itself: 0), else None."""
    if v is iv:
        return 0
    op = v.owner
    if isinstance(op, Op) and op.opcode == "add":
        a, b = op.operands
        for x, c in ((a, b), (b, a)):
            if x is iv and isinstance(c.owner, Op) and c.owner.opcode == "const":
                return c.owner.attrs["value"]
    return None


# The tile-level ops that access tensors, and the kind of access each makes.
ACCESS_KINDS = {"load": "load", "gather": "load", "store": "store", "scatter": "store", "atomic": "atomic"}


def global_barriers(func: Function, layouts: dict[Value, Layout], use_count: dict[Value, int]) -> set[Op]:
    """The tensor accesses of `func` that need a barrier before them (see the header)."""
    marked: set[Op] = set()
    steps = {op.regions[0].args[0]: op.attrs["step"] for op in walk(func.body) if op.opcode == "for"}

    def access(op: Op, fused_load: bool = False) -> Access:
        kind = ACCESS_KINDS[op.opcode]
        value = op.result if op.opcode in ("load", "gather", "atomic") else op.operands[-1]
        ndims = len(op.operands[0].type.dims)
        indices = tuple(op.operands[1:1 + ndims])
        # a gather's, scatter's or atomic's index per dim: scalar (None) or a tile of indices (0)
        sizes = tuple(op.attrs["sizes"]) if "sizes" in op.attrs else tuple(
            0 if isinstance(v.type, TileType) else None for v in indices)
        return Access(op.operands[0], kind, indices, sizes, layouts.get(value), fused_load or kind != "load")

    def walk_block(block: Block, made: frozenset[Access]) -> frozenset[Access]:
        plans = fusion_plan(block.ops, layouts, use_count)
        at_store = {ld for plan in plans.values() for ld in plan.loads}
        for op in block.ops:
            if op.opcode in ACCESS_KINDS and op not in at_store:
                group = [access(ld, fused_load=True) for ld in plans[op].loads] if op in plans else []
                group.append(access(op))
                if any(conflict(a, b, steps) for a in made for b in group):
                    marked.add(op)
                    made = frozenset()
                made = made | frozenset(group)
            elif op.opcode == "for":
                made = made | walk_loop(op.regions[0], made)
            elif op.opcode == "while":  # the condition runs before each iteration and after the last
                end = walk_loop(Block(op.regions[0].args, op.regions[0].ops + op.regions[1].ops), made, op)
                made = made | end | walk_block(op.regions[0], end)
            elif op.opcode == "if":
                made = frozenset().union(*(walk_block(region, made) for region in op.regions))
        return made

    def walk_loop(body: Block, before: frozenset[Access], loop: object = None) -> frozenset[Access]:
        """The accesses a loop's body leaves at its end; its start grows until its own end adds nothing.
        `loop` marks the accesses of earlier iterations: the induction variable of a `for` (default), or
        the op of a `while`."""
        start = before
        marker = loop if loop is not None else body.args[0]
        while True:
            end = walk_block(body, start)
            grown = start | frozenset(replace(a, carried=marker) for a in end)
            if grown == start:
                return end
            start = grown

    walk_block(func.body, frozenset())
    return marked
