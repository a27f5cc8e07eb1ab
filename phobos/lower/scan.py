# Scans: cumsum, cumprod and scan with a combine function, along one axis; and
# reductions with a combine function (a scan, then its last element).
#
# A scan follows the operand's layout, which placement.py gives as a grid:
# along the axis each thread holds runs of `spt` consecutive elements, the
# threads' digits along the axis (a lane digit, then a warp digit) number the
# runs, and the pattern repeats every `cover` elements (chunks).  So the
# elements along the axis come in the order chunk, warp, lane, element of the
# run, and the scan is built in that order:
#
#   1. in each thread, a running combination over each run (register order);
#   2. across the lanes of the axis, an inclusive scan of the runs' totals
#      with shfl.up (Hillis-Steele: log2(lanes) steps), and each thread's
#      exclusive prefix from the lane before it;
#   3. through shared memory, the total of each warp's part of each chunk:
#      every thread combines the totals of the warps before its own, and of
#      all the chunks before its chunk;
#   4. each element: (chunk prefix, warp prefix, lane prefix, own run value),
#      combined in that order where present.
#
# No identity is needed (a combine function has none): prefixes are taken
# only where they exist, selected by the thread's digits.  Padding elements
# (past the tile's extent) come last along the axis, so they never feed a
# real element.  Combining happens in a tree, not left to right: the result of
# a combine function that is not associative (float rounding) may differ from
# the interpreter's in the last bits.
from __future__ import annotations

import math
from typing import Callable

from ..errors import UnsupportedError
from ..middle.ir import ELEMENTWISE, Op, Value
from ..types import DType, ScalarType, TileType
from .core import BOOL, HANDLERS, I32, Lowering, TileRegs, row_major_strides, scalar_op, smem_bytes
from .layout import Layout, blocked

Combine = Callable[[tuple, tuple], tuple]


@HANDLERS.on("scan")
def scan(low: Lowering, op: Op) -> None:
    layout = low.layouts[op.results[0]]
    values = [low.in_layout(v, layout).regs for v in op.operands]
    out = scan_registers(low, layout, op.attrs["axis"], values, combiner(low, op))
    for v, regs in zip(op.results, out):
        low.vals[v] = TileRegs(layout, regs)


def reduce_with(low: Lowering, op: Op) -> None:
    """reduce(x, axis, combine): the scan's last element along the axis (over all elements, flattened,
    when there is no axis)."""
    axis = op.attrs["axis"]
    layout = low.layouts[op.operands[0]]
    values = [low.in_layout(v, layout).regs for v in op.operands]
    if axis is None:  # flatten: a 1-D tile in the blocked layout
        flat = blocked((math.prod(layout.shape),), low.threads)
        values = [low.relayout(TileRegs(layout, regs), flat, v.dtype.compute, lambda coords: coords[0])
                  for regs, v in zip(values, op.operands)]
        layout, axis = flat, 0
    scanned = scan_registers(low, layout, axis, values, combiner(low, op))
    strides = row_major_strides(layout.shape)
    last = layout.shape[axis] - 1

    def source_index(coords: list[Value]) -> Value:  # the same element, at the end of the axis
        if not coords:
            return low.const(last)
        coords = list(coords)
        coords[axis] = low.const(last)
        return low.dot_product(coords, strides)

    for v, regs in zip(op.results, scanned):
        if isinstance(v.type, TileType):
            target = low.layouts[v]
            low.vals[v] = TileRegs(target, low.relayout(TileRegs(layout, regs), target, v.dtype.compute, source_index))
        else:
            one = Layout((), low.threads, (), ((),), ((1, low.threads),))
            low.vals[v] = low.relayout(TileRegs(layout, regs), one, v.dtype.compute, source_index)[0]


def combiner(low: Lowering, op: Op) -> Combine:
    """The combine function of a scan or reduce on tuples of register values."""
    kind = op.attrs["kind"]
    if kind != "combine":
        t = ScalarType(op.results[0].dtype)
        return lambda a, b: (low.op(kind, [a[0], b[0]], t),)
    region = op.regions[0]
    for o in region.ops[:-1]:
        if o.opcode not in ELEMENTWISE and o.opcode != "const":
            raise UnsupportedError(f"a combine function can use element-wise operations only, not "
                                   f"'{o.opcode}'", o.loc)

    def combine(a: tuple, b: tuple) -> tuple:
        values = dict(zip(region.args, a + b))
        for o in region.ops[:-1]:
            if o.opcode == "const":
                values[o.result] = low.const(o.attrs["value"], o.result.dtype.compute)
                continue
            operands = [values[x] if x in values else low.vals[x] for x in o.operands]
            values[o.result] = scalar_op(low, o, operands)  # a 16-bit float in its f32 register
        return tuple(values[x] if x in values else low.vals[x] for x in region.ops[-1].operands)
    return combine


def _merge(low: Lowering, combine: Combine, first, second):
    """(values, presence) of `first` then `second`, each (values, presence) where presence is True,
    False or a bool value: combined where both are present, else the one that is."""
    (a, pa), (b, pb) = first, second
    if pa is False:
        return second
    if pb is False:
        return first
    both = combine(a, b)
    if pa is True and pb is True:
        return both, True
    if pa is True:  # b may be absent
        return tuple(low.op("select", [pb, x, y], x.type) for x, y in zip(both, a)), True
    if pb is True:
        return tuple(low.op("select", [pa, x, y], x.type) for x, y in zip(both, b)), True
    either = tuple(low.op("select", [pa, x, y], x.type) for x, y in zip(a, b))
    out = tuple(low.op("select", [low.op("and", [pa, pb], BOOL), x, y], x.type) for x, y in zip(both, either))
    return out, low.op("or", [pa, pb], BOOL)


def scan_registers(low: Lowering, layout: Layout, axis: int, values: list[list[Value]],
                   combine: Combine) -> list[list[Value]]:
    """The inclusive scan along `axis` of tiles in `layout` (one register list per tile of a tuple)."""
    terms = layout.terms[axis]
    lane = next((t for t in terms if t.in_warp), None)
    warp = next((t for t in terms if not t.in_warp), None)
    lanes, warps = (lane.mod if lane else 1), (warp.mod if warp else 1)
    spt = min((t.scale for t in terms), default=layout.shape[axis])
    cover = spt * lanes * warps
    others = [d for d in range(layout.rank) if d != axis]

    # 1. running combination over each run, in register order
    groups: dict[tuple, list[int]] = {}
    for r, off in enumerate(layout.offsets):
        key = (tuple(off[d] for d in others), off[axis] // cover)
        groups.setdefault(key, []).append(r)
    run: dict[int, tuple] = {}
    totals: dict[tuple, tuple] = {}
    for key, regs in groups.items():
        regs.sort(key=lambda r: layout.offsets[r][axis])
        acc = None
        for r in regs:
            cur = tuple(v[r] for v in values)
            acc = cur if acc is None else combine(acc, cur)
            run[r] = acc
        totals[key] = acc
    if not terms:  # the whole axis lies in each thread
        return [[run[r][i] for r in range(layout.nregs)] for i in range(len(values))]

    # 2. across the lanes of the axis
    lane_prefix: dict[tuple, tuple] = {}
    has_lane = False
    inclusive = dict(totals)
    if lane is not None:
        digit = low.digit(lane.div, lane.mod)
        step = 1
        while step < lanes:
            take = low.op("cmp", [digit, low.const(step)], BOOL, pred="ge")
            for key, acc in inclusive.items():
                before = tuple(_shuffle_up(low, x, step * lane.div) for x in acc)
                both = combine(before, acc)
                inclusive[key] = tuple(low.op("select", [take, x, y], x.type) for x, y in zip(both, acc))
            step *= 2
        for key, acc in inclusive.items():
            lane_prefix[key] = tuple(_shuffle_up(low, x, lane.div) for x in acc)
        has_lane = low.op("cmp", [digit, low.const(0)], BOOL, pred="gt")

    # 3. the totals of each warp's part of each chunk, through shared memory
    small, index = layout.collapse_map([axis])
    rows = math.prod(small.shape)
    chunks = max(rep for _, rep in groups) + 1
    w = low.digit(warp.div, warp.mod) if warp is not None else low.const(0)
    last_lane = low.op("cmp", [low.digit(lane.div, lane.mod), low.const(lanes - 1)], BOOL, pred="eq") \
        if lane is not None else None
    writer = low.all_of([last_lane, low.owner(layout)])
    small_strides = row_major_strides(small.shape)
    words = [smem_bytes(x.dtype) for x in next(iter(inclusive.values()))]
    word = max(max(words), 4)
    slots = chunks * rows * warps
    base = low.smem(slots * word * len(words))
    first_reg = {key: regs[0] for key, regs in groups.items()}
    row_of = {key: low.linear(small, index[r], small_strides, [0] * small.rank) for key, r in first_reg.items()}
    row_valid = {key: low.slot_valid(layout, r, others) for key, r in first_reg.items()}

    def slot(key, chunk: int, warp_index: Value) -> Value:
        at = low.op("add", [low.op("mul", [row_of[key], low.const(warps)], I32), warp_index], I32)
        return low.op("add", [at, low.const(chunk * rows * warps)], I32)

    low.barrier()
    for key, acc in inclusive.items():
        pred = low.all_of([writer, row_valid[key]])
        for i, x in enumerate(acc):
            low.st_shared(base, slot(key, key[1], w), word, [x], x.dtype, pred, offset=i * slots * word)
    low.barrier()
    read: dict[tuple, tuple] = {}

    def total(key, chunk: int, j: int) -> tuple:
        """The inclusive total of warp j's part of chunk `chunk` of key's row."""
        k = (key[0], chunk, j)
        if k not in read:
            read[k] = tuple(low.ld_shared(base, slot(key, chunk, low.const(j)), word, x.dtype, row_valid[key],
                                          offset=i * slots * word)
                            for i, x in enumerate(inclusive[key]))
        return read[k]

    chunk_total: dict[tuple, tuple] = {}
    out: dict[int, tuple] = {}
    for key, regs in sorted(groups.items(), key=lambda item: item[0][1]):
        others_key, chunk = key
        carry = (None, False)
        for c in range(chunk):  # every chunk before this one, all its warps
            if (others_key, c) not in chunk_total:
                acc = total(key, c, 0)
                for j in range(1, warps):
                    acc = combine(acc, total(key, c, j))
                chunk_total[(others_key, c)] = acc
            carry = _merge(low, combine, carry, (chunk_total[(others_key, c)], True))
        warp_prefix = (None, False)
        if warp is not None:  # the warps before this thread's, in this chunk
            acc, chosen = None, None
            for j in range(warps - 1):
                acc = total(key, chunk, j) if acc is None else combine(acc, total(key, chunk, j))
                is_mine = low.op("cmp", [w, low.const(j + 1)], BOOL, pred="eq")
                chosen = acc if chosen is None else tuple(
                    low.op("select", [is_mine, x, y], x.type) for x, y in zip(acc, chosen))
            warp_prefix = (chosen, low.op("cmp", [w, low.const(0)], BOOL, pred="gt"))
        prefix = _merge(low, combine, carry, warp_prefix)
        if lane is not None:
            prefix = _merge(low, combine, prefix, (lane_prefix[key], has_lane))
        for r in regs:
            out[r] = _merge(low, combine, prefix, (run[r], True))[0]
    return [[out[r][i] for r in range(layout.nregs)] for i in range(len(values))]


def _shuffle_up(low: Lowering, v: Value, delta: int) -> Value:
    """v of the lane `delta` below this one (this lane's own where there is none)."""
    return low.op("shfl_up", [v, low.const(delta)], v.type)
