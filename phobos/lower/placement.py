# Placement: the choices lowering makes from the whole tile-level function
# before it writes any code - how many threads a CTA has, which layout each
# tile value takes, and in which order the CTAs walk the program ids.
#
# Layouts are assigned by grouping, then anchoring, then propagating:
#
# * values joined by element-wise ops, loop-carried values (init, block
#   argument, result, next value), branch results, the operands and results
#   of a scan, and the index tiles, values and results of a gather, scatter or
#   atomic form one group, which shares one layout (union-find over values);
# * a dot's result anchors its group to the register-blocked dot layout, or,
#   for a product on the tensor cores, to the accumulator layout of its plan
#   (mma_plan.py); once everything anchored has propagated, the A operand of
#   a 16-bit tensor-core product (mma.sync's, or wgmma's read from
#   registers) anchors a group still undecided to the layout whose registers
#   are its fragments (a tile loaded once and used by every trip of a loop,
#   like attention's Q on mma.sync, is then loaded straight into them), and
#   the operands of a tf32 product on wgmma to the layouts they
#   are loaded in (`MmaPlan.operand_layouts`: A's to be stored to shared
#   memory, B's the registers wgmma reads);
# * a reduction's result takes the collapsed layout of its operand, and a
#   broadcast's operand the collapsed layout of its result, so that
#   `x - max(x, axis=1)` and the row maxima of softmax live where the row
#   elements are;
# * the group of the largest tile still undecided gets the blocked layout
#   of its shape (so that the smaller tiles broadcast onto it follow it) - its
#   warps along the dims no reduction of the group runs along, first, so
#   that the rows of a tile reduced along its rows each stay in one warp -
#   and the propagation runs again from it.
#
# So `acc`, the C tile loaded for `beta * c_old` and the stored result of
# sgemm all live in the dot layout.  Only a genuine conflict costs a trip
# through shared memory (Lowering.relayout in core.py).
#
# A tile that would take more than MAX_TILE_REGISTERS registers per thread is
# refused here (`check_register_need`), before any code is written: the need
# is known from the layouts alone, while the code for such a tile would be
# slow to generate and slower for ptxas to assemble.
#
# Nothing here writes IR: what enters is the tile-level Function, what leaves
# is plain values (a thread count, {Value: Layout}, a group size).
from __future__ import annotations

from ..configuration import Knobs
from ..errors import ResourceError
from ..middle.ir import ELEMENTWISE, Function, Op, Value, walk
from ..types import TileType
from .layout import WARP, Layout, blocked, dot_layout
from .mma_plan import MmaPlan

# The opcodes whose tile operands and results all take one layout, element for element.
ALIGNED = {"gather", "scatter", "atomic", "scan", "print", "assert"}
DEFAULT_MAX_THREADS = 256
#: The most 32-bit registers per thread one tile may take: four times the 255 a thread has, so such a
#: tile already spills three quarters of itself; beyond it the PTX grows so long that ptxas takes minutes.
MAX_TILE_REGISTERS = 1024
DEFAULT_GROUP_M = 8  # row blocks per group in the grouped order of program ids (autotune parameter GROUP_M)


# ------------------------------------------------------------------ threads
def choose_threads(func: Function) -> int:
    """Threads per CTA: 32 * WARPS when the kernel has that autotune parameter, else a guess.

    The guess aims at 8x8 dot products per thread when the kernel has a dot, and
    otherwise at about 4 elements per thread (one 128-bit vector of f32), between
    one warp and 256 threads: for memory-bound kernels more threads with one
    vector each keep more requests in flight than fewer threads with several.
    """
    warps = func.attrs.get("knobs", Knobs()).warps
    if warps is not None:
        return warps * WARP
    dots = [op.result.type.size for op in walk(func.body) if op.opcode == "dot"]
    if dots:
        want = max(dots) // 64
    else:
        sizes = [r.type.size for op in walk(func.body) for r in op.results if isinstance(r.type, TileType)]
        want = max(sizes, default=0) // 4
    threads = WARP
    while threads < want and threads < DEFAULT_MAX_THREADS:
        threads *= 2
    return threads


def check_register_need(func: Function, layouts: dict[Value, Layout], threads: int) -> None:
    """ResourceError, before any code is written, when a tile takes more than MAX_TILE_REGISTERS per thread."""
    def need(v: Value) -> int:
        return layouts[v].nregs * max(1, v.type.dtype.bits // 32)

    worst = max(layouts, key=need, default=None)
    if worst is None or need(worst) <= MAX_TILE_REGISTERS:
        return
    shape = ", ".join(map(str, worst.type.shape))
    loc = worst.owner.loc if isinstance(worst.owner, Op) else func.attrs["loc"]
    raise ResourceError(f"a tile<{worst.type.dtype}>[{shape}] takes {need(worst)} registers per thread with "
                        f"{threads} threads; a thread has 255, and at most {MAX_TILE_REGISTERS} (the rest "
                        f"spilled to memory) are accepted: use more WARPS or a smaller tile", loc)


# ------------------------------------------------------------------ program order
def program_grouping(func: Function) -> int:
    """GROUP_M when given; else 8 for kernels with a dot that use program_id(0) and (1); else 1.

    values.py's program_id handler uses it (see grouped_program_ids there).
    """
    group_m = func.attrs.get("knobs", Knobs()).group_m
    if group_m is not None:
        return group_m
    ops = list(walk(func.body))
    axes = {op.attrs["axis"] for op in ops if op.opcode == "program_id"}
    return DEFAULT_GROUP_M if {0, 1} <= axes and any(op.opcode == "dot" for op in ops) else 1


# ------------------------------------------------------------------ layouts
class _Groups:
    """Union-find over tile values."""

    def __init__(self):
        self.parent: dict[Value, Value] = {}

    def find(self, v: Value) -> Value:
        self.parent.setdefault(v, v)
        while self.parent[v] is not v:
            self.parent[v] = self.parent[self.parent[v]]
            v = self.parent[v]
        return v

    def union(self, *vs: Value) -> None:
        vs = [v for v in vs if isinstance(v.type, TileType)]
        for v in vs[1:]:
            a, b = self.find(vs[0]), self.find(v)
            if a is not b:
                self.parent[b] = a


def assign_layouts(func: Function, threads: int, plans: dict | None = None) -> dict[Value, Layout]:
    """A layout for every tile value; see the module header for the rules.

    `plans` maps each dot that asks for the tensor cores to its MmaPlan (or the
    reason it runs on the CUDA cores), as mma_plan.plan_dots gives them.
    """
    plans = plans or {}
    groups = _Groups()
    ops = list(walk(func.body))
    tiles: list[Value] = []
    for op in ops:
        for r in op.results:
            if isinstance(r.type, TileType):
                tiles.append(r)
                groups.find(r)
        for region in op.regions:
            for a in region.args:
                if isinstance(a.type, TileType):
                    tiles.append(a)
        if op.opcode in ELEMENTWISE:
            groups.union(op.result, *op.operands)
        elif op.opcode in ALIGNED:
            groups.union(*op.results, *op.operands)
        elif op.opcode == "reduce" and op.attrs["kind"] == "combine":
            groups.union(*op.operands)
            groups.union(*op.results)
        elif op.opcode == "dot" and len(op.operands) == 3:
            groups.union(op.result, op.operands[2])
        elif op.opcode == "for":
            body = op.regions[0]
            for init, arg, res, nxt in zip(op.operands[2:], body.args[1:], op.results, body.ops[-1].operands):
                groups.union(init, arg, res, nxt)
        elif op.opcode == "while":
            cond, body = op.regions
            for group in zip(op.operands, cond.args, body.args, op.results, body.ops[-1].operands):
                groups.union(*group)
        elif op.opcode == "if":
            for i, res in enumerate(op.results):
                groups.union(res, *(region.ops[-1].operands[i] for region in op.regions))

    chosen: dict[Value, Layout] = {}
    for op in ops:
        if op.opcode == "dot":
            root = groups.find(op.result)
            plan = plans.get(op)
            chosen.setdefault(root, plan.layout if isinstance(plan, MmaPlan) else
                              dot_layout(op.result.type.shape, threads))
    fragments = [(op.operands[i], layout) for op, plan in plans.items() if isinstance(plan, MmaPlan)
                 for i, layout in plan.operand_layouts.items()]

    reduced: dict[Value, tuple[int, ...]] = {}  # per group: the dims a reduction of one of its tiles runs along
    for op in ops:
        if op.opcode == "reduce" and op.attrs["axis"] is not None:
            root = groups.find(op.operands[0])
            reduced[root] = tuple(sorted({*reduced.get(root, ()), op.attrs["axis"] % len(op.operands[0].type.shape)}))

    def propagate() -> bool:
        changed = False
        for op in ops:
            if op.opcode == "reduce" and op.attrs["axis"] is not None:
                src, dst = groups.find(op.operands[0]), groups.find(op.result)
                if src in chosen and dst not in chosen:
                    chosen[dst] = chosen[src].collapse([op.attrs["axis"]])
                    changed = True
            elif op.opcode == "broadcast" and isinstance(op.operands[0].type, TileType):
                src, dst = groups.find(op.operands[0]), groups.find(op.result)
                if dst in chosen and src not in chosen:
                    chosen[src] = broadcast_source_layout(chosen[dst], op.operands[0].type.shape,
                                                          op.attrs.get("axes"))
                    changed = True
        return changed

    while True:
        while propagate():
            pass
        operand = next(((v, layout) for v, layout in fragments if groups.find(v) not in chosen), None)
        if operand is not None:
            chosen[groups.find(operand[0])] = operand[1]
            continue
        # the largest first: the smaller tiles broadcast onto it (a row's mask) then take its layout
        undecided = max((t for t in tiles if groups.find(t) not in chosen), key=lambda t: t.type.size,
                        default=None)
        if undecided is None:
            break
        root = groups.find(undecided)
        chosen[root] = blocked(undecided.type.shape, threads, reduced.get(root, ()))
    return {t: chosen[groups.find(t)] for t in tiles}


def source_axes(small: tuple[int, ...], big: tuple[int, ...], axes: tuple[int, ...] | None) -> tuple[int, ...]:
    """The dims of `big` that the dims of `small` become in a broadcast: `axes`, or the last ones."""
    return tuple(axes) if axes is not None else tuple(range(len(big) - len(small), len(big)))


def broadcast_dims(small: tuple[int, ...], big: tuple[int, ...], axes: tuple[int, ...] | None = None) -> list[int]:
    """The dims of `big` along which a tile of shape `small` is repeated by a broadcast."""
    ext = [1] * len(big)
    for n, d in zip(small, source_axes(small, big, axes)):
        ext[d] = n
    return [d for d in range(len(big)) if ext[d] == 1 and big[d] != 1]


def broadcast_source_layout(big: Layout, small_shape: tuple[int, ...], axes: tuple[int, ...] | None = None) -> Layout:
    """The layout of a tile of `small_shape` that broadcasts onto `big` with no data movement."""
    collapsed = big.collapse(broadcast_dims(small_shape, big.shape, axes))
    return keep_axes(collapsed, source_axes(small_shape, big.shape, axes))


def keep_axes(layout: Layout, axes: tuple[int, ...]) -> Layout:
    """The layout without its other dims, which have extent 1 (rank reduction for broadcasts)."""
    if tuple(axes) == tuple(range(layout.rank)):
        return layout
    return Layout(tuple(layout.shape[d] for d in axes), layout.threads, tuple(layout.terms[d] for d in axes),
                  tuple(tuple(o[d] for d in axes) for o in layout.offsets), layout.replicas)
