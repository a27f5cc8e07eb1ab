# Values in registers: the ops whose lowering touches no global memory -
# parameters, constants, program ids, arange, element-wise ops, broadcast,
# reshape and extract.
#
# An element-wise op is the same scalar op on each register slot of its
# operands, all in the result's layout (placement.py put them in one group, so
# a conversion happens only where groups meet).  A constant tile is the one
# constant in every slot; arange adds each slot's offset to the thread's
# coordinate.  A broadcast whose operand has the collapsed layout of its
# result (what placement.py chooses) copies registers and moves no data;
# reshape and extract change which element sits where, so they go through
# shared memory (Lowering.relayout) with their own index map.
#
# program_id(0) and program_id(1) of a kernel with a dot are renumbered in
# grouped order (GROUP_M) so that the CTAs running at one time share operand
# blocks in L2; see grouped_program_ids.  With CLUSTER > 1 a program instance
# is a cluster of CTAs along x (per_cluster), which combine scalars through
# distributed shared memory (cluster_reduce).
from __future__ import annotations

from ..middle.ir import ELEMENTWISE, Builder, KernelParam, Op, Value
from ..types import DType, ScalarType, TensorType, TileType
from .core import BOOL, HANDLERS, I32, I64, Lowering, TensorRef, TileRegs, row_major_strides, scalar_op
from .layout import Layout
from .placement import broadcast_dims, keep_axes, source_axes


@HANDLERS.on("param")
def param(low: Lowering, op: Op) -> None:
    t = op.result.type
    p = low.src.attrs["params"][op.attrs["index"]]
    if isinstance(t, TensorType):
        ptr = low.op("param", [], I64, **op.attrs)
        dims = [param_size(low, d) if isinstance(d, str) else low.const(d, low.index_type.dtype) for d in t.dims]
        strides = param_strides(low, p) if p.name in low.strided else None
        low.vals[op.result] = TensorRef(ptr, dims, t.dtype, not p.written and low.read_only_cache, strides)
    elif p.kind == "size":  # the language's i32 (with 64-bit indices, the low half of the parameter)
        size = param_size(low, p.name)
        low.vals[op.result] = size if size.type == t else low.op("cast", [size], t)
    else:
        low.vals[op.result] = low.op("param", [], t, **op.attrs)


def param_strides(low: Lowering, p: KernelParam) -> list[Value]:
    """The element strides of tensor parameter `p`, passed as a strided view: a `stride` parameter (i64) per
    dim, added to the kernel's once and read at its start, but a constant 1 for a last stride specialised
    to 1."""
    params = low.out.attrs["params"]
    strides = []
    for d in range(len(p.dims)):
        if d == len(p.dims) - 1 and low.strided[p.name]:
            strides.append(low.const(1, DType.I64))
            continue
        index = next((i for i, q in enumerate(params) if (q.kind, q.name, q.dims) == ("stride", p.name, (d,))), None)
        if index is None:
            index = len(params)
            params.append(KernelParam(p.name, "stride", DType.I64, (d,)))
        strides.append(low.entry_value(("stride", index), lambda b, index=index, d=d: b.value(
            "param", [], I64, index=index, name=f"{p.name}_stride{d}")))
    return strides


def param_size(low: Lowering, name: str) -> Value:
    """The size parameter `name`, of the index type, read once at the kernel's start."""
    return low.entry_value(("size", name), lambda b: b.value(
        "param", [], low.index_type, index=low.params[name], name=name))


@HANDLERS.on("const")
def const(low: Lowering, op: Op) -> None:
    t = op.result.type
    if isinstance(t, TileType):
        v = low.const(op.attrs["value"], t.dtype.compute)
        low.vals[op.result] = TileRegs(low.layouts[op.result], [v] * low.layouts[op.result].nregs)
    else:
        low.vals[op.result] = low.const(op.attrs["value"], t.dtype.compute)


@HANDLERS.on("program_id")
def program_id(low: Lowering, op: Op) -> None:
    low.vals[op.result] = program_index(low, op.attrs["axis"])


def program_index(low: Lowering, axis: int) -> Value:
    """What program_id(axis) gives the kernel (in grouped order for axes 0 and 1 when GROUP_M > 1; with
    persistent CTAs, of the virtual program the CTA runs now; with CLUSTER > 1, of the cluster)."""
    if low.programs is not None:
        return low.programs.ids[axis]
    if low.group_m > 1 and axis in (0, 1):
        return grouped_program_ids(low)[axis]
    return per_cluster(low, low.op("program_id", [], I32, axis=axis), axis)


@HANDLERS.on("num_programs")
def num_programs(low: Lowering, op: Op) -> None:
    axis = op.attrs["axis"]
    low.vals[op.result] = low.programs.counts[axis] if low.programs is not None else \
        per_cluster(low, low.op("num_programs", [], I32, **op.attrs), axis)


def per_cluster(low: Lowering, ctas: Value, axis: int) -> Value:
    """A CTA index or count along `axis` as one of program instances: with CLUSTER > 1 the launcher starts
    CLUSTER CTAs, a cluster, per program instance along x (CompiledKernel.launch_grid)."""
    if axis != 0 or low.cluster == 1:
        return ctas
    return low.op("div", [ctas, low.const(low.cluster, DType.I32)], I32)


@HANDLERS.on("cluster_index")
def cluster_index(low: Lowering, op: Op) -> None:
    low.vals[op.result] = low.const(0, DType.I32) if low.cluster == 1 else \
        low.op("cast", [low.op("cluster_rank", [], ScalarType(DType.U32))], I32)


#: How cluster_reduce combines two values, by its attrs kind.
CLUSTER_COMBINE = {"sum": "add", "max": "max", "min": "min"}


@HANDLERS.on("cluster_reduce")
def cluster_reduce(low: Lowering, op: Op) -> None:
    """The scalar combined over the CTAs of the cluster: the first thread of each puts its value in its
    shared memory, and after a barrier.cluster every thread reads the CTAs' values through distributed
    shared memory (mapa) and combines them in rank order, so each CTA gets the same bits; a second
    barrier.cluster keeps each CTA's value (and the CTA) there until its peers have read it."""
    x = low.vals[op.operands[0]]
    if low.cluster == 1:
        low.vals[op.result] = x
        return
    dtype = x.dtype
    slot = low.smem(dtype.nbytes)
    low.barrier()  # the scratch buffer's earlier readers are done with it
    first = low.op("cmp", [low.tid(), low.const(0, DType.I32)], BOOL, pred="eq")
    low.st_shared(slot, low.const(0, DType.I32), dtype.nbytes, [x], dtype, first)
    low.b.op("cluster_barrier", [], [], {})
    total = None
    for rank in range(low.cluster):
        remote = low.op("mapa", [slot, low.const(rank, DType.U32)], ScalarType(DType.U32))
        (value,) = low.b.op("ld_shared", [remote], [ScalarType(dtype)],
                            {"dtype": dtype, "vec": 1, "offset": 0, "masked": False, "cluster": True}).results
        total = value if total is None else low.op(CLUSTER_COMBINE[op.attrs["kind"]], [total, value], x.type)
    low.b.op("cluster_barrier", [], [], {})
    low.vals[op.result] = total


def grouped_program_ids(low: Lowering) -> tuple[Value, Value]:
    """program_id(0) and program_id(1) in grouped order, for kernels whose CTAs share operands.

    The hardware starts CTAs in order of their linear index (x fastest).  A
    matrix product whose program_id(0) walks the rows of C would then have
    the CTAs running at one time touch every row block of A; taking them
    instead in groups of GROUP_M row blocks, column after column, keeps the
    A and B blocks that run together few enough to stay in L2.  The map is
    a bijection of the grid onto itself, so each program id pair still
    occurs exactly once, as the language promises (instances run in no
    particular order).  The linear index is an i32: a grid of 2^31 CTAs or
    more (possible with a grid given by hand) keeps the plain order instead,
    which nothing in it can wrap.
    """
    def make(b: Builder) -> tuple[Value, Value]:
        x, y = (b.value("program_id", [], I32, axis=a) for a in (0, 1))
        nx, ny = (b.value("num_programs", [], I32, axis=a) for a in (0, 1))
        linear = b.value("add", [x, b.value("mul", [y, nx], I32)], I32)
        pid0, pid1 = _grouped(b.value, b.const(low.group_m, I32), linear, nx, ny)
        ctas = b.value("mul_wide", [nx, ny], I64)
        fits = b.value("cmp", [ctas, b.const(2**31 - 1, I64)], BOOL, pred="le")
        return b.value("select", [fits, pid0, x], I32), b.value("select", [fits, pid1, y], I32)
    return low.entry_value(("grouped program ids",), make)


def grid_position(low: Lowering, linear: Value, nx: Value, ny: Value) -> tuple[Value, Value, Value]:
    """(x, y, z) of the program with linear index `linear` over a grid of nx x ny x any (x fastest, then y,
    then z; the launcher keeps it under 2^31 programs), x and y in grouped order (see grouped_program_ids):
    the program ids a persistent CTA runs (core.Programs)."""
    plane = low.op("mul", [nx, ny], I32)
    z, within = low.op("div", [linear, plane], I32), low.op("rem", [linear, plane], I32)
    if low.group_m > 1:
        x, y = _grouped(low.op, low.const(low.group_m), within, nx, ny)
    else:
        x, y = low.op("rem", [within, nx], I32), low.op("div", [within, nx], I32)
    return x, y, z


def _grouped(value, group: Value, linear: Value, nx: Value, ny: Value) -> tuple[Value, Value]:
    """(x, y) of the program with index `linear` (< nx * ny) in the order of groups of `group` (GROUP_M)
    rows of programs, column after column; `value(opcode, operands, type, **attrs)` builds each op."""
    per_group = value("mul", [group, ny], I32)
    first = value("mul", [value("div", [linear, per_group], I32), group], I32)
    size = value("min", [value("sub", [nx, first], I32), group], I32)
    within = value("rem", [linear, per_group], I32)
    return value("add", [first, value("rem", [within, size], I32)], I32), value("div", [within, size], I32)


@HANDLERS.on(*ELEMENTWISE)
def elementwise(low: Lowering, op: Op) -> None:
    if not isinstance(op.result.type, TileType):
        low.vals[op.result] = scalar_op(low, op, [low.vals[v] for v in op.operands])
        return
    layout = low.layouts[op.result]
    operands = [low.in_layout(v, layout).regs for v in op.operands]
    regs = [scalar_op(low, op, [o[r] for o in operands]) for r in range(layout.nregs)]
    low.vals[op.result] = TileRegs(layout, regs)


@HANDLERS.on("broadcast")
def broadcast(low: Lowering, op: Op) -> None:
    layout = low.layouts[op.result]
    src = op.operands[0]
    if not isinstance(src.type, TileType):
        low.vals[op.result] = TileRegs(layout, [low.vals[src]] * layout.nregs)
        return
    axes = op.attrs.get("axes")
    small, index = layout.collapse_map(broadcast_dims(src.type.shape, layout.shape, axes))
    regs = low.in_layout(src, keep_axes(small, source_axes(src.type.shape, layout.shape, axes))).regs
    low.vals[op.result] = TileRegs(layout, [regs[i] for i in index])


@HANDLERS.on("arange")
def arange(low: Lowering, op: Op) -> None:
    layout = low.layouts[op.result]
    start = op.attrs["start"]
    base = low.thread_coord(layout.terms[0])
    regs = [low.op("add", [base, low.const(start + off[0])], I32) for off in layout.offsets]
    low.vals[op.result] = TileRegs(layout, regs)


@HANDLERS.on("reshape")
def reshape(low: Lowering, op: Op) -> None:
    src = low.tile(op.operands[0])
    layout = low.layouts[op.result]
    strides = row_major_strides(layout.shape)
    regs = low.relayout(src, layout, op.result.dtype.compute, lambda coords: low.dot_product(coords, strides))
    low.vals[op.result] = TileRegs(layout, regs)


@HANDLERS.on("extract")
def extract(low: Lowering, op: Op) -> None:
    src = low.tile(op.operands[0])
    starts, sizes = op.attrs["starts"], op.attrs["sizes"]
    strides = row_major_strides(src.layout.shape)
    result_t = op.result.type

    def source_index(coords: list[Value]) -> Value:
        it = iter(coords)
        full = []
        for s, n in zip(starts, sizes):
            c = next(it) if n is not None else low.const(0)
            full.append(c if s == 0 else low.op("add", [c, low.const(s)], I32))
        return low.dot_product(full, strides)

    if isinstance(result_t, TileType):
        layout = low.layouts[op.result]
        low.vals[op.result] = TileRegs(layout, low.relayout(src, layout, op.result.dtype.compute, source_index))
    else:
        scalar_layout = Layout((), low.threads, (), ((),), ((1, low.threads),))
        low.vals[op.result] = low.relayout(src, scalar_layout, op.result.dtype.compute, source_index)[0]
