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
# The tests are exact for every start the language allows, so no start can
# wrap around into the tensor.  They are done in the start's own width
# (`index_value`: i32 and i64 as they are, u32 zero-extended to i64, u64
# above the largest i64 - outside every tensor - clamped to it) and
# written so that nothing wraps: a slice is inside when 0 <= start and
# size <= dim - start (never start + size <= dim, which wraps for a start
# near 2^31; dim - start cannot wrap once start >= 0, and when start < 0 the
# first test decides).  The loop-invariant form start <= dim - size is exact
# too, but keeps dim - size live across a K loop as one more register, which
# tipped ptxas into a tighter register allocation of the SGEMM main loop
# (125 registers instead of 168, a few percent slower on the H200);
# an element at start + k (k >= 0, a coordinate within the tile) when that
# sum, in i32 read as unsigned, is below dim - true because the sum lies in
# [-2^31, 2^32) and dims are below 2^31 - or, in i64, when it is in [0, dim).
# Addresses use the start truncated to i32 (`address_index`), which is exact
# for every element that is accessed: such an element is inside the tensor,
# so its start lies in (-size, dim).
#
# With 64-bit indices (`Lowering.index_type` i64, for tensors with a dim of
# 2^31 or more) dims and element coordinates are i64 throughout: every start
# is widened to i64, the tests are the i64 ones and addresses are computed
# from i64 coordinates.
#
# Addresses are computed per row (`RowAddresses`): the part of an element's
# address that depends on the thread and the row is arithmetic, and the
# register's constant offset along the last dim becomes the access's
# immediate offset.  Offsets are 64-bit from the first product on (mul.wide).
#
# A tensor passed as a strided view (`TensorRef.strides`: i64 launch values,
# the last one the constant 1 where the launcher specialised it) is addressed
# through its strides instead of its dims: every coordinate times its stride.
# With a last stride of 1 the accesses are vectors as above, the alignment
# test asking every other stride to be a multiple of the vector; with another
# last stride every element is an access of its own.
#
# A store that fusion.py planned is lowered together with its loads and the
# element-wise ops between them, one vector of registers at a time; its fast
# path needs every one of those slices inside and aligned.  A tile held by
# replicated threads is stored by the first replica only (`owner`), which is
# also the only one to make a fused store's loads; a scalar is stored by
# thread 0.  An access that ordering.py says must not overtake an earlier one
# of other threads starts with a barrier.
#
# pipeline.py uses the slice geometry and address arithmetic here for its
# cp.async copies.
from __future__ import annotations

from ..middle.ir import Block, Op, Value
from ..types import DType, ScalarType, TileType
from .core import BOOL, HANDLERS, I32, I64, U32, Lowering, TensorRef, TileRegs, access_groups, scalar_op
from .fusion import FusedStore
from .layout import Layout


def slice_geometry(low: Lowering, op: Op, tensor: TensorRef):
    """(starts as index values, sizes per tensor dim - None for a single index, the sliced tensor dims)."""
    indices = op.operands[1:1 + len(tensor.dims)]
    sizes = op.attrs["sizes"]
    starts = [index_value(low, low.vals[v]) for v in indices]
    tile_dims = [d for d, n in enumerate(sizes) if n is not None]
    return starts, sizes, tile_dims


def index_value(low: Lowering, v: Value) -> Value:
    """A start or single index as a value the bounds tests are exact in: i32 or i64 (u32 zero-extended,
    u64 past the largest i64 clamped to it), at least as wide as the index type."""
    if v.dtype is DType.U64:
        v = low.op("min", [v, low.const(2**63 - 1, DType.U64)], ScalarType(DType.U64))
    if v.dtype is not DType.I32 or low.index_type == I64:
        return as_type(low, v, I64)
    return v


def address_index(low: Lowering, v: Value) -> Value:
    """An index value in the index type, which addresses are computed in (exact for every element accessed)."""
    return as_type(low, v, low.index_type)


def dim_as(low: Lowering, dim: Value, like: Value) -> Value:
    """A tensor dim in the width of the index `like`."""
    return as_type(low, dim, ScalarType(like.dtype))


def as_type(low: Lowering, v: Value, t: ScalarType) -> Value:
    """`v` converted to the integer type `t` (sign- or zero-extended, or truncated), if it is not of it."""
    return v if v.dtype is t.dtype else low.op("cast", [v], t)


def index_inside(low: Lowering, index: Value, dim: Value) -> Value:
    """0 <= index < dim, for an index value that has not wrapped (see the module header)."""
    if index.dtype is DType.I32:
        return unsigned_less(low, index, dim)
    return low.all_of([low.op("cmp", [index, low.const(0, index.dtype)], BOOL, pred="ge"),
                       low.op("cmp", [index, dim_as(low, dim, index)], BOOL, pred="lt")])


def strides_of(low: Lowering, tensor: TensorRef) -> list[Value]:
    """The tensor's strides in elements, as i64 values: its own, or the row-major ones of its dims."""
    if tensor.strides is not None:
        return tensor.strides
    strides = [None] * len(tensor.dims)
    acc = low.const(1, DType.I64)
    for d in reversed(range(len(tensor.dims))):
        strides[d] = acc
        if d:
            acc = low.op("mul", [acc, as_type(low, tensor.dims[d], I64)], I64)
    return strides


def in_bounds(low: Lowering, tensor: TensorRef, starts: list[Value], sizes) -> Value:
    """Uniform predicate: the whole slice lies inside the tensor (0 <= start and size <= dim - start, which
    cannot wrap)."""
    preds = []
    for dim, start, n in zip(tensor.dims, starts, sizes):
        if n is None:
            preds.append(index_inside(low, start, dim))
        else:
            kind = ScalarType(start.dtype)
            room = low.op("sub", [dim_as(low, dim, start), start], kind)
            preds.append(low.op("cmp", [start, low.const(0, start.dtype)], BOOL, pred="ge"))
            preds.append(low.op("cmp", [room, low.const(n, start.dtype)], BOOL, pred="ge"))
    return low.all_of(preds)


def unsigned_less(low: Lowering, a: Value, b: Value) -> Value:
    """0 <= a < b for i32 a and b >= 0, as one unsigned comparison."""
    return low.op("cmp", [low.op("cast", [a], U32), low.op("cast", [b], U32)], BOOL, pred="lt")


def vector_ok(tensor: TensorRef, tile_dims, layout: Layout | None, copy: bool = False) -> int:
    """The vector width (elements) usable when the slice is aligned, 1 if none: at most 16 bytes and 8
    elements - or, for cp.async's copies (`copy`), which take no registers, 16 elements, also of the small
    integers (whose loads into registers widen them one at a time)."""
    if layout is None or not tile_dims or tile_dims[-1] != len(tensor.dims) - 1 or not tensor.unit_last:
        return 1
    if tensor.dtype.nbytes < 4 and not tensor.dtype.is_narrow and not copy:
        return 1
    width = layout.vector_width(16 if copy else 8)
    while width > 1 and width * tensor.dtype.nbytes > 16:
        width //= 2
    return width


def aligned(low: Lowering, tensor: TensorRef, starts, width: int) -> Value:
    """Uniform predicate: the base pointer, row length (a strided view's strides but the last) and slice
    start allow `width`-element vectors."""
    nbytes = width * tensor.dtype.nbytes
    low_bits = low.op("and", [tensor.ptr, low.const(nbytes - 1, DType.I64)], I64)
    preds = [low.op("cmp", [low_bits, low.const(0, DType.I64)], BOOL, pred="eq")]
    rows = [tensor.dims[-1]] if tensor.strides is None else tensor.strides[:-1]
    for v in (address_index(low, starts[-1]), *rows):
        low_bits = low.op("and", [v, low.const(width - 1, v.dtype)], v.type)
        preds.append(low.op("cmp", [low_bits, low.const(0, v.dtype)], BOOL, pred="eq"))
    return low.all_of(preds)


class RowAddresses:
    """For each register of `layout`: (address of its row, byte offset of the element within the row),
    built where it is asked for (`addresses[r]`) from a base computed once.

    The address of element r is base + sum_d coord_d * stride_d * size; the
    part of the last dim that is constant per register is returned apart, to
    become the access's immediate offset.  A store asks for each row's address
    just before its access, so that no more than a few are live at once (a
    thread of a swapped product's accumulators holds 64 rows).
    """

    def __init__(self, low: Lowering, tensor: TensorRef, starts, tile_dims, layout: Layout | None):
        self.low, self.tile_dims, self.layout = low, tile_dims, layout
        self.eb = eb = tensor.dtype.nbytes
        self.strides = strides = strides_of(low, tensor)
        self.last = last = len(tensor.dims) - 1
        starts = [address_index(low, start) for start in starts]
        index_t = low.index_type
        thread_c = {}
        for k, d in enumerate(tile_dims):
            thread_c[d] = low.op("add", [starts[d], as_type(low, low.thread_coord(layout.terms[k]), index_t)],
                                 index_t)
        self.unit_last = tensor.unit_last
        base = tensor.ptr
        for d in range(len(tensor.dims)):
            c = thread_c.get(d, starts[d])
            if d == last and self.unit_last:
                term = low.op("mul_wide", [c, low.const(eb)], I64) if index_t == I32 else \
                    low.op("mul", [c, low.const(eb, DType.I64)], I64)
            elif d == last - 1 and tensor.strides is None:  # the stride is the last dim
                row = low.op("mul_wide", [c, tensor.dims[last]], I64) if index_t == I32 else \
                    low.op("mul", [c, tensor.dims[last]], I64)
                term = low.op("mul", [row, low.const(eb, DType.I64)], I64)
            else:
                term = low.op("mul", [as_type(low, c, I64), strides[d]], I64)
                term = low.op("mul", [term, low.const(eb, DType.I64)], I64)
            base = low.op("add", [base, term], I64)
        self.base = base

    def __len__(self) -> int:
        return self.layout.nregs if self.layout is not None else 1

    def __getitem__(self, r: int) -> tuple[Value, int]:
        low, addr, last_off = self.low, self.base, 0
        offsets = self.layout.offsets[r] if self.layout is not None else ()
        for k, d in enumerate(self.tile_dims):
            if offsets[k] == 0:
                continue
            if d == self.last and self.unit_last:
                last_off = offsets[k] * self.eb
            else:
                row = low.op("mul", [self.strides[d], low.const(offsets[k] * self.eb, DType.I64)], I64)
                addr = low.op("add", [addr, row], I64)
        return addr, last_off


def row_addresses(low: Lowering, tensor: TensorRef, starts, tile_dims, layout: Layout | None):
    """Every register's (row address, byte offset in the row), built now (RowAddresses)."""
    addresses = RowAddresses(low, tensor, starts, tile_dims, layout)
    return [addresses[r] for r in range(len(addresses))]


def element_valid(low: Lowering, tensor: TensorRef, starts, sizes, tile_dims, layout: Layout | None, r: int):
    """Predicate: element r is in the tile (not padding) and inside the tensor (exact: see the header)."""
    preds = [low.slot_valid(layout, r)] if layout is not None else []
    for d, (dim, start, n) in enumerate(zip(tensor.dims, starts, sizes)):
        if n is None:
            preds.append(index_inside(low, start, dim))
        else:
            k = tile_dims.index(d)
            kind = ScalarType(start.dtype)
            coord = low.thread_coord(layout.terms[k])
            c = low.op("add", [start, coord if kind == I32 else low.op("cast", [coord], kind)], kind)
            if layout.offsets[r][k]:
                c = low.op("add", [c, low.const(layout.offsets[r][k], start.dtype)], kind)
            preds.append(index_inside(low, c, dim))
    return low.all_of(preds)


@HANDLERS.on("load")
def load(low: Lowering, op: Op) -> None:
    if op in low.resident_loads:
        return  # done at its loop's start (pipeline.py: copied into its stage, or `load_residents`)
    if op in low.global_barriers:
        low.barrier()
    layout = low.layouts.get(op.result) if isinstance(op.result.type, TileType) else None
    regs = load_registers(low, op, layout)
    low.vals[op.result] = regs[0] if layout is None else TileRegs(layout, regs)


def load_registers(low: Lowering, op: Op, layout: Layout | None) -> list[Value]:
    """The registers of load `op` in `layout` (None: a scalar's one): vector loads when the slice is inside
    the tensor and aligned, masked vector loads when it is aligned only, else element by element with zeros
    outside."""
    tensor = low.vals[op.operands[0]]
    starts, sizes, tile_dims = slice_geometry(low, op, tensor)
    addrs = row_addresses(low, tensor, starts, tile_dims, layout)
    dtype = tensor.dtype.compute
    width = vector_ok(tensor, tile_dims, layout)
    alignment = [aligned(low, tensor, starts, width)] if width > 1 else []
    fast = low.all_of([in_bounds(low, tensor, starts, sizes), *alignment])

    def arm(vec: int, checked: bool) -> list[Value]:
        regs: list[Value] = []
        for group in access_groups(layout, vec):
            addr, off = addrs[group[0]]
            if checked:
                pred = element_valid(low, tensor, starts, sizes, tile_dims, layout, group[0])
            else:
                pred = low.slot_valid(layout, group[0]) if layout is not None else None
            ld = low.b.op("ld_global", [addr] + ([pred] if pred is not None else []),
                          [ScalarType(dtype)] * len(group),
                          {"dtype": tensor.dtype, "vec": len(group), "offset": off,
                           "masked": pred is not None, "read_only": tensor.read_only})
            regs += ld.results
        return regs

    return branches(low, access_arms(low, fast, alignment, width, layout), [ScalarType(dtype)] * len(addrs), arm)


#: The most vector accesses per thread a slice access may have for its edge arm of masked vectors (code
#: written once more): rows and small tiles, often partly outside their tensor, keep their vectors to the
#: end; a large tile (a GEMM's epilogue) is mostly inside, and its edge CTAs access element by element.
MASKED_VECTOR_ACCESSES = 8


def access_arms(low: Lowering, fast: Value, alignment: list[Value], width: int, layout: Layout | None
                ) -> list[tuple]:
    """The arms of a slice access, each (condition, vector width, whether each access tests its elements),
    the last one's condition None: unmasked vectors where `fast` (inside the tensor and aligned); then,
    where only the `alignment` tests hold (and the tile is small: MASKED_VECTOR_ACCESSES), vectors each
    tested by its first element - the row length and the start being multiples of the vector, a vector
    lies inside or outside the tensor as a whole, so rows of any length that are multiples of the vector
    keep their vector accesses to the end; else element by element."""
    if not alignment or len(access_groups(layout, width)) > MASKED_VECTOR_ACCESSES:
        return [(fast, width, False), (None, 1, True)]
    return [(fast, width, False), (low.all_of(alignment), width, True), (None, 1, True)]


def branches(low: Lowering, arms: list[tuple], types: list[ScalarType], emit) -> list[Value]:
    """`if c0 {emit(arm 0)} else if c1 {emit(arm 1)} ... else {emit(last arm)}` as nested `if` ops, each
    arm (condition, *arguments of emit); emit builds an arm's code at low.b and returns the values it
    gives (as many as `types`), which the result is."""
    (condition, *arguments), rest = arms[0], arms[1:]
    if not rest:
        return emit(*arguments)
    regions = [Block(), Block()]
    branch = low.b.op("if", [condition], types, {}, regions)
    outer = low.b
    for region, build in ((regions[0], lambda: emit(*arguments)),
                          (regions[1], lambda: branches(low, rest, types, emit))):
        low.b = low.builder_for(region, outer.block, outer.loc)
        low.b.op("yield", build(), [])
    low.b = outer
    return list(branch.results)


@HANDLERS.on("store")
def store(low: Lowering, op: Op) -> None:
    store_like(low, op, "st_global", low.fused_stores.get(op))


def store_like(low: Lowering, op: Op, opcode: str, fused: FusedStore | None = None) -> None:
    """A store of a slice: vector accesses when the slice - and, for a fused
    store, every slice it loads - is inside its tensor and aligned; masked ones otherwise."""
    if op in low.global_barriers:
        low.barrier()
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
    conditions, alignment = [], []
    for _, t, st, sz, _ in accesses:
        conditions.append(in_bounds(low, t, st, sz))
        if width > 1:
            alignment.append(aligned(low, t, st, width))
            conditions.append(alignment[-1])
    arms = access_arms(low, low.all_of(conditions), alignment, width, layout)
    addrs = {a[0]: RowAddresses(low, a[1], a[2], a[4], layout) for a in accesses}  # built at each access

    def arm(vec: int, checked: bool) -> list[Value]:
        for group in access_groups(layout, vec):
            def valid(access):  # the store's and its loads' (only the replica that stores loads)
                if not checked:
                    return low.all_of([low.slot_valid(layout, group[0]) if layout is not None else None, owner])
                return low.all_of([element_valid(low, access[1], access[2], access[3], access[4], layout,
                                                 group[0]), owner])
            values = dict(((v, r), regs[r]) for v, regs in leaves.items() for r in group)
            if fused is not None:
                fused_values(low, fused, accesses[1:], addrs, group, valid, values)
            addr, off = addrs[op][group[0]]
            low.b.loc = op.loc
            pred = valid(accesses[0])
            low.b.op(opcode, [addr, *(values[(value, r)] for r in group)] + ([pred] if pred is not None else []),
                     [], {"dtype": tensor.dtype, "vec": len(group), "offset": off, "masked": pred is not None})
        return []

    branches(low, arms, [], arm)


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
        low.b.loc = o.loc
        for r in group:
            if o.opcode == "const":
                values[(o.result, r)] = low.const(o.attrs["value"], o.result.dtype.compute)
            elif o.opcode == "broadcast":
                values[(o.result, r)] = low.vals[o.operands[0]]
            else:
                operands = [values[(x, r)] if (x, r) in values else low.vals[x] for x in o.operands]
                values[(o.result, r)] = scalar_op(low, o, operands)
