# Global memory: loads and stores of tensor slices (indexed.py: gathers,
# scatters and atomics, which address each element on its own).
#
# A slice `x[i :+ N, j]` names a start per tensor dim and, per dim, a size (a
# tile dim) or none (a single index).  Its elements follow the edge contract:
# those outside the tensor read 0 and are not written.
#
# Each access tests once, uniformly for the CTA, whether the whole slice is
# inside the tensor (`in_bounds`) and, for 128-bit accesses, aligned
# (`aligned`: base pointer, row length and start a multiple of the vector);
# if so it runs unmasked vector accesses, else masked scalar ones, each
# element tested on its own (`element_valid`).  Tiles away from the edges pay
# one branch.  The vector width comes from the layout's run of consecutive
# elements along the last dim (`vector_ok`), at most 16 bytes.
#
# Addresses are computed per row (`row_addresses`): the part of an element's
# address that depends on the thread and the row is arithmetic, and the
# register's constant offset along the last dim becomes the access's
# immediate offset.  Offsets are 64-bit from the first product on (mul.wide).
#
# A store that fusion.py planned is lowered together with its loads and the
# element-wise ops between them, one vector of registers at a time; its fast
# path needs every one of those slices inside and aligned.  A tile held by
# replicated threads is stored by the first replica only (`owner`), a scalar
# by thread 0.
#
# pipeline.py uses the slice geometry and address arithmetic here for its
# cp.async copies.
from __future__ import annotations

from ..middle.ir import Block, Op, Value
from ..types import DType, ScalarType, TileType
from .core import BOOL, HANDLERS, I32, I64, U32, Lowering, TensorRef, TileRegs, access_groups
from .fusion import FusedStore
from .layout import Layout


def slice_geometry(low: Lowering, op: Op, tensor: TensorRef):
    """(starts as i32 values, sizes per tensor dim - None for a single index, the sliced tensor dims)."""
    indices = op.operands[1:1 + len(tensor.dims)]
    sizes = op.attrs["sizes"]
    starts = [low.vals[v] for v in indices]
    starts = [s if s.dtype is DType.I32 else low.op("cast", [s], I32) for s in starts]
    tile_dims = [d for d, n in enumerate(sizes) if n is not None]
    return starts, sizes, tile_dims


def strides_of(low: Lowering, tensor: TensorRef) -> list[Value]:
    """Row-major strides in elements, as i64 values."""
    strides = [None] * len(tensor.dims)
    acc = low.const(1, DType.I64)
    for d in reversed(range(len(tensor.dims))):
        strides[d] = acc
        if d:
            dim64 = low.op("cast", [tensor.dims[d]], I64)
            acc = low.op("mul", [acc, dim64], I64)
    return strides


def in_bounds(low: Lowering, tensor: TensorRef, starts: list[Value], sizes) -> Value:
    """Uniform predicate: the whole slice lies inside the tensor."""
    preds = []
    for dim, start, n in zip(tensor.dims, starts, sizes):
        if n is None:
            preds.append(unsigned_less(low, start, dim))
        else:
            preds.append(low.op("cmp", [start, low.const(0)], BOOL, pred="ge"))
            end = low.op("add", [start, low.const(n)], I32)
            preds.append(low.op("cmp", [end, dim], BOOL, pred="le"))
    return low.all_of(preds)


def unsigned_less(low: Lowering, a: Value, b: Value) -> Value:
    """0 <= a < b for i32 a and b >= 0, as one unsigned comparison."""
    return low.op("cmp", [low.op("cast", [a], U32), low.op("cast", [b], U32)], BOOL, pred="lt")


def vector_ok(tensor: TensorRef, tile_dims, layout: Layout | None) -> int:
    """The vector width (elements) usable when the slice is aligned, 1 if none."""
    if layout is None or not tile_dims or tile_dims[-1] != len(tensor.dims) - 1:
        return 1
    if tensor.dtype.nbytes < 4:
        return 1
    width = layout.vector_width()
    while width > 1 and width * tensor.dtype.nbytes > 16:
        width //= 2
    return width


def aligned(low: Lowering, tensor: TensorRef, starts, width: int) -> Value:
    """Uniform predicate: the base pointer, row length and slice start allow `width`-element vectors."""
    nbytes = width * tensor.dtype.nbytes
    low_bits = low.op("and", [tensor.ptr, low.const(nbytes - 1, DType.I64)], I64)
    preds = [low.op("cmp", [low_bits, low.const(0, DType.I64)], BOOL, pred="eq")]
    for v in (starts[-1], tensor.dims[-1]):
        low_bits = low.op("and", [v, low.const(width - 1)], I32)
        preds.append(low.op("cmp", [low_bits, low.const(0)], BOOL, pred="eq"))
    return low.all_of(preds)


def row_addresses(low: Lowering, tensor: TensorRef, starts, tile_dims, layout: Layout | None):
    """For each register: (address of its row, byte offset of the element within the row).

    The address of element r is base + sum_d coord_d * stride_d * size; the
    part of the last dim that is constant per register is returned apart, to
    become the access's immediate offset.
    """
    eb = tensor.dtype.nbytes
    strides = strides_of(low, tensor)
    last = len(tensor.dims) - 1
    nregs = layout.nregs if layout is not None else 1
    thread_c = {}
    for k, d in enumerate(tile_dims):
        thread_c[d] = low.op("add", [starts[d], low.thread_coord(layout.terms[k])], I32)
    base = tensor.ptr
    for d in range(len(tensor.dims)):
        c = thread_c.get(d, starts[d])
        if d == last:
            term = low.op("mul_wide", [c, low.const(eb)], I64)
        elif d == last - 1:  # the stride is the last dim, an i32
            term = low.op("mul", [low.op("mul_wide", [c, tensor.dims[last]], I64),
                                  low.const(eb, DType.I64)], I64)
        else:
            term = low.op("mul", [low.op("cast", [c], I64), strides[d]], I64)
            term = low.op("mul", [term, low.const(eb, DType.I64)], I64)
        base = low.op("add", [base, term], I64)
    out = []
    for r in range(nregs):
        offsets = layout.offsets[r] if layout is not None else ()
        addr = base
        last_off = 0
        for k, d in enumerate(tile_dims):
            if offsets[k] == 0:
                continue
            if d == last:
                last_off = offsets[k] * eb
            else:
                row = low.op("mul", [strides[d], low.const(offsets[k] * eb, DType.I64)], I64)
                addr = low.op("add", [addr, row], I64)
        out.append((addr, last_off))
    return out


def element_valid(low: Lowering, tensor: TensorRef, starts, sizes, tile_dims, layout: Layout | None, r: int):
    """Predicate: element r is in the tile (not padding) and inside the tensor."""
    preds = [low.slot_valid(layout, r)] if layout is not None else []
    for d, (dim, start, n) in enumerate(zip(tensor.dims, starts, sizes)):
        if n is None:
            preds.append(unsigned_less(low, start, dim))
        else:
            k = tile_dims.index(d)
            c = low.op("add", [start, low.thread_coord(layout.terms[k])], I32)
            if layout.offsets[r][k]:
                c = low.op("add", [c, low.const(layout.offsets[r][k])], I32)
            preds.append(unsigned_less(low, c, dim))
    return low.all_of(preds)


@HANDLERS.on("load")
def load(low: Lowering, op: Op) -> None:
    tensor = low.vals[op.operands[0]]
    result_t = op.result.type
    layout = low.layouts.get(op.result) if isinstance(result_t, TileType) else None
    starts, sizes, tile_dims = slice_geometry(low, op, tensor)
    addrs = row_addresses(low, tensor, starts, tile_dims, layout)
    dtype = tensor.dtype.compute
    width = vector_ok(tensor, tile_dims, layout)
    fast = in_bounds(low, tensor, starts, sizes)
    if width > 1:
        fast = low.all_of([fast, aligned(low, tensor, starts, width)])
    nregs = len(addrs)
    regions = [Block(), Block()]
    branch = low.b.op("if", [fast], [ScalarType(dtype)] * nregs, {}, regions)
    outer = low.b
    for region, vec in ((regions[0], width), (regions[1], 1)):
        low.b = low.builder_for(region, outer.block, outer.loc)
        regs: list[Value] = []
        for group in access_groups(layout, vec):
            addr, off = addrs[group[0]]
            if vec > 1 or region is regions[0]:
                pred = low.slot_valid(layout, group[0]) if layout is not None else None
            else:
                pred = element_valid(low, tensor, starts, sizes, tile_dims, layout, group[0])
            ld = low.b.op("ld_global", [addr] + ([pred] if pred is not None else []),
                          [ScalarType(dtype)] * len(group),
                          {"dtype": tensor.dtype, "vec": len(group), "offset": off,
                           "masked": pred is not None, "read_only": tensor.read_only})
            regs += ld.results
        low.b.op("yield", regs, [])
    low.b = outer
    if layout is None:
        low.vals[op.result] = branch.results[0]
    else:
        low.vals[op.result] = TileRegs(layout, list(branch.results))


@HANDLERS.on("store")
def store(low: Lowering, op: Op) -> None:
    store_like(low, op, "st_global", low.fused_stores.get(op))


def store_like(low: Lowering, op: Op, opcode: str, fused: FusedStore | None = None) -> None:
    """A store of a slice: vector accesses when the slice - and, for a fused
    store, every slice it loads - is inside its tensor and aligned; masked ones otherwise."""
    tensor = low.vals[op.operands[0]]
    value = op.operands[-1]
    starts, sizes, tile_dims = slice_geometry(low, op, tensor)
    leaves: dict[Value, list[Value]] = {}
    if isinstance(value.type, TileType):
        layout = low.layouts[value]
        owner = low.owner(layout)
        if fused is None:
            leaves[value] = low.tile(value).regs
    else:
        layout, leaves[value] = None, [low.vals[value]]
        owner = low.entry_value(("thread0",), lambda b: b.value(
            "cmp", [low.tid(), b.const(0, I32)], BOOL, pred="eq"))
    accesses = [(op, tensor, starts, sizes, tile_dims)]
    if fused is not None:
        for ld in fused.loads:
            t = low.vals[ld.operands[0]]
            accesses.append((ld, t, *slice_geometry(low, ld, t)))
        for o in fused.ops:
            for x in o.operands:
                if isinstance(x.type, TileType) and x.owner not in fused.ops and x.owner not in fused.loads:
                    leaves[x] = low.in_layout(x, layout).regs
    width = vector_ok(tensor, tile_dims, layout) if opcode == "st_global" else 1
    for _, t, _, _, dims in accesses[1:]:
        width = min(width, vector_ok(t, dims, layout))
    conditions = []
    for _, t, st, sz, _ in accesses:
        conditions.append(in_bounds(low, t, st, sz))
        if width > 1:
            conditions.append(aligned(low, t, st, width))
    fast = low.all_of(conditions)
    addrs = {a[0]: row_addresses(low, a[1], a[2], a[4], layout) for a in accesses}
    regions = [Block(), Block()]
    low.b.op("if", [fast], [], {}, regions)
    outer = low.b
    for region, vec in ((regions[0], width), (regions[1], 1)):
        low.b = low.builder_for(region, outer.block, outer.loc)
        for group in access_groups(layout, vec):
            def valid(access):
                if region is regions[0]:
                    return low.slot_valid(layout, group[0]) if layout is not None else None
                return element_valid(low, access[1], access[2], access[3], access[4], layout, group[0])
            values = dict(((v, r), regs[r]) for v, regs in leaves.items() for r in group)
            if fused is not None:
                fused_values(low, fused, accesses[1:], addrs, group, valid, values)
            addr, off = addrs[op][group[0]]
            low.b.loc = op.loc
            pred = low.all_of([valid(accesses[0]), owner])
            low.b.op(opcode, [addr, *(values[(value, r)] for r in group)] + ([pred] if pred is not None else []),
                     [], {"dtype": tensor.dtype, "vec": len(group), "offset": off, "masked": pred is not None})
        low.b.op("yield", [], [])
    low.b = outer


def fused_values(low: Lowering, fused: FusedStore, loads, addrs, group: list[int], valid, values: dict) -> None:
    """Load one group of registers of a fused store's slices and compute its value from them."""
    for access in loads:
        ld, tensor = access[0], access[1]
        low.b.loc = ld.loc
        addr, off = addrs[ld][group[0]]
        pred = valid(access)
        results = low.b.op("ld_global", [addr] + ([pred] if pred is not None else []),
                           [ScalarType(tensor.dtype.compute)] * len(group),
                           {"dtype": tensor.dtype, "vec": len(group), "offset": off, "masked": pred is not None,
                            "read_only": tensor.read_only}).results
        values.update(((ld.result, r), v) for r, v in zip(group, results))
    for o in fused.ops:
        t = ScalarType(o.result.dtype)
        low.b.loc = o.loc
        for r in group:
            if o.opcode == "const":
                values[(o.result, r)] = low.const(o.attrs["value"], o.result.dtype)
            elif o.opcode == "broadcast":
                values[(o.result, r)] = low.vals[o.operands[0]]
            else:
                operands = [values[(x, r)] if (x, r) in values else low.vals[x] for x in o.operands]
                values[(o.result, r)] = low.op(o.opcode, operands, t, **o.attrs)
