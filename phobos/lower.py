# Lowering tiles onto threads: tile-level IR -> thread-level IR.
#
# Every tile value gets a layout (layout.py) and becomes one scalar SSA value
# per register slot of a thread; every op becomes the per-thread code that
# computes its slots.  The choices that matter for speed are made here:
#
# * Layouts are assigned before any code is written (`assign_layouts`): values
#   joined by element-wise ops, loop-carried values and branch results share a
#   layout; a dot's result anchors its group to the register-blocked dot
#   layout; a reduction's result takes the collapsed layout of its operand, and
#   a broadcast's operand the collapsed layout of its result.  So `acc`, the
#   C tile loaded for `beta * c_old` and the stored result of sgemm all live in
#   the dot layout, and softmax's row maxima are where the row elements are.
#   Only a genuine conflict costs a trip through shared memory (`relayout`).
# * Tensor slices follow the edge contract: elements outside the tensor read 0
#   and are not written.  Each load and store tests once, uniformly for the
#   CTA, whether the whole slice is inside the tensor (and, for 128-bit
#   accesses, aligned); if so it runs unmasked vector accesses, else masked
#   scalar ones.  Tiles away from the edges pay one branch.
# * `dot` stages its operands in shared memory (A transposed, so both are read
#   as 128-bit vectors along M and N) and each thread computes its block of the
#   product with fully unrolled fused multiply-adds.
# * Reductions combine within a thread, then across lanes with butterfly
#   shuffles, then across warps through shared memory.
#
# Shared memory is one scratch buffer, reused by every op that needs one; each
# such op starts with a barrier (no thread still reads the previous contents)
# and puts a barrier between its writes and its reads.
from __future__ import annotations

from dataclasses import dataclass

from .errors import ResourceError, UnsupportedError
from .ir import Block, Builder, Function, Op, Value
from .layout import WARP, Layout, Term, blocked, dot_layout
from .types import DType, ScalarType, TensorType, TileType

ELEMENTWISE = {"add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "neg", "not", "abs",
               "cmp", "select", "cast", "fma", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh",
               "sigmoid", "erf", "gelu", "sin", "cos"}
MAX_THREADS = 1024
DEFAULT_MAX_THREADS = 256
DOT_UNROLL_LIMIT = 64  # a dot's K up to this is fully unrolled; beyond, a loop of DOT_STEP steps
DOT_STEP = 16
SMEM_ALIGN = 16
I32 = ScalarType(DType.I32)
I64 = ScalarType(DType.I64)
U32 = ScalarType(DType.U32)
BOOL = ScalarType(DType.BOOL)


@dataclass
class TileRegs:
    """A lowered tile: its layout and one value per register slot."""

    layout: Layout
    regs: list[Value]


@dataclass
class TensorRef:
    """A lowered tensor: base address (global, i64), dims (i32 values), element type."""

    ptr: Value
    dims: list[Value]
    dtype: DType
    read_only: bool


# ------------------------------------------------------------------ threads
def choose_threads(func: Function) -> int:
    """Threads per CTA: 32 * WARPS when the kernel has that autotune parameter, else a guess.

    The guess aims at 8x8 dot products per thread when the kernel has a dot, and
    at about 8 elements per thread otherwise, between one warp and 256 threads.
    """
    warps = func.attrs.get("config", {}).get("WARPS")
    if warps is not None:
        if warps < 1 or warps > MAX_THREADS // WARP or warps & (warps - 1):
            raise UnsupportedError(f"WARPS must be a power of two from 1 to {MAX_THREADS // WARP}, got {warps}",
                                   func.attrs["loc"])
        return warps * WARP
    from .ir import walk
    dots = [op.result.type.size for op in walk(func.body) if op.opcode == "dot"]
    if dots:
        want = max(dots) // 64
    else:
        sizes = [r.type.size for op in walk(func.body) for r in op.results if isinstance(r.type, TileType)]
        want = max(sizes, default=0) // 8
    threads = WARP
    while threads < want and threads < DEFAULT_MAX_THREADS:
        threads *= 2
    return threads


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


def assign_layouts(func: Function, threads: int) -> dict[Value, Layout]:
    """A layout for every tile value; see the module header for the rules."""
    from .ir import walk
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
        elif op.opcode == "dot" and len(op.operands) == 3:
            groups.union(op.result, op.operands[2])
        elif op.opcode == "for":
            body = op.regions[0]
            for init, arg, res, nxt in zip(op.operands[2:], body.args[1:], op.results, body.ops[-1].operands):
                groups.union(init, arg, res, nxt)
        elif op.opcode == "if":
            for i, res in enumerate(op.results):
                groups.union(res, *(region.ops[-1].operands[i] for region in op.regions))

    chosen: dict[Value, Layout] = {}
    for op in ops:
        if op.opcode == "dot":
            root = groups.find(op.result)
            chosen.setdefault(root, dot_layout(op.result.type.shape, threads))

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
                    chosen[src] = _broadcast_source_layout(chosen[dst], op.operands[0].type.shape)
                    changed = True
        return changed

    while True:
        while propagate():
            pass
        undecided = next((t for t in tiles if groups.find(t) not in chosen), None)
        if undecided is None:
            break
        chosen[groups.find(undecided)] = blocked(undecided.type.shape, threads)
    return {t: chosen[groups.find(t)] for t in tiles}


def _broadcast_dims(small: tuple[int, ...], big: tuple[int, ...]) -> list[int]:
    ext = (1,) * (len(big) - len(small)) + tuple(small)
    return [d for d in range(len(big)) if ext[d] == 1 and big[d] != 1]


def _broadcast_source_layout(big: Layout, small_shape: tuple[int, ...]) -> Layout:
    """The layout of a tile of `small_shape` that broadcasts onto `big` with no data movement."""
    collapsed = big.collapse(_broadcast_dims(small_shape, big.shape))
    return _drop_leading(collapsed, len(big.shape) - len(small_shape))


def _drop_leading(layout: Layout, n: int) -> Layout:
    """Remove `n` leading dims of extent 1 (rank reduction for broadcasts like [N] -> [M, N])."""
    if n == 0:
        return layout
    return Layout(layout.shape[n:], layout.threads, layout.terms[n:], tuple(o[n:] for o in layout.offsets),
                  layout.replicas)


def _add_leading(layout: Layout, n: int) -> Layout:
    if n == 0:
        return layout
    return Layout((1,) * n + layout.shape, layout.threads, ((),) * n + layout.terms,
                  tuple((0,) * n + o for o in layout.offsets), layout.replicas)


# ------------------------------------------------------------------ lowering
class Lowering:
    def __init__(self, func: Function, smem_limit: int):
        self.src = func
        self.smem_limit = smem_limit
        self.threads = choose_threads(func)
        self.layouts = assign_layouts(func, self.threads)
        attrs = dict(func.attrs, threads=self.threads)
        self.out = Function(func.name, Block(), attrs)
        self.entry = Builder(self.out, self.out.body)
        self.entry.index = 0
        self.b = Builder(self.out, self.out.body)
        self.vals: dict[Value, object] = {}
        self.smem_bytes = 0
        self.cache: dict[tuple, Value] = {}
        self.params = {p.name: i for i, p in enumerate(func.attrs["params"])}

    def run(self) -> Function:
        self.lower_block(self.src.body, self.out.body)
        self.out.attrs["shared_bytes"] = self.smem_bytes
        return self.out

    # ---------------------------------------------------------- small helpers
    def op(self, opcode: str, operands: list[Value], type_, **attrs) -> Value:
        return self.b.value(opcode, operands, type_, **attrs)

    def const(self, value, dtype: DType = DType.I32) -> Value:
        return self.b.const(value, ScalarType(dtype))

    def entry_value(self, key: tuple, make) -> Value:
        """A value that depends only on the thread, computed once at the kernel's start."""
        v = self.cache.get(key)
        if v is None:
            saved_loc = self.entry.loc
            self.entry.loc = self.b.loc
            v = self.cache[key] = make(self.entry)
            self.entry.loc = saved_loc
        return v

    def tid(self) -> Value:
        return self.entry_value(("tid",), lambda b: b.value("tid", [], I32))

    def digit(self, div: int, mod: int) -> Value:
        """(tid // div) % mod, once per kernel."""
        def make(b: Builder) -> Value:  # div and mod are powers of two, tid is never negative
            t = self.tid()
            q = t if div == 1 else b.value("shr", [t, b.const(div.bit_length() - 1, I32)], I32)
            return q if div * mod >= self.threads else b.value("and", [q, b.const(mod - 1, I32)], I32)
        return self.entry_value(("digit", div, mod), make)

    def thread_coord(self, terms: tuple[Term, ...]) -> Value:
        """The thread part of a coordinate: sum of digit * scale over the terms (i32)."""
        def make(b: Builder) -> Value:
            acc = b.const(0, I32)
            for t in terms:
                d = self.digit(t.div, t.mod)
                part = d if t.scale == 1 else b.value("mul", [d, b.const(t.scale, I32)], I32)
                acc = part if acc.owner.opcode == "const" else b.value("add", [acc, part], I32)
            return acc
        return self.entry_value(("coord", terms), make)

    def coord(self, layout: Layout, r: int, d: int) -> Value:
        base = self.thread_coord(layout.terms[d])
        off = layout.offsets[r][d]
        return base if off == 0 else self.op("add", [base, self.const(off)], I32)

    def slot_valid(self, layout: Layout, r: int, dims=None) -> Value | None:
        """Predicate: register r holds a real element (not padding) along `dims`; None if always."""
        preds = []
        for d in (range(layout.rank) if dims is None else dims):
            if not layout.always_valid(r, d):
                def make(b: Builder, d=d) -> Value:
                    c = b.value("add", [self.thread_coord(layout.terms[d]), b.const(layout.offsets[r][d], I32)], I32)
                    return b.value("cmp", [c, b.const(layout.shape[d], I32)], BOOL, pred="lt")
                preds.append(self.entry_value(("valid", layout.terms[d], layout.offsets[r][d], layout.shape[d]),
                                              make))
        return self.all_of(preds)

    def owner(self, layout: Layout, extra: tuple[tuple[int, int], ...] = ()) -> Value | None:
        """Predicate: this thread is the first of its replicas (None if the layout has none)."""
        preds = []
        for div, mod in layout.replicas + extra:
            preds.append(self.entry_value(("first", div, mod), lambda b, div=div, mod=mod: b.value(
                "cmp", [self.digit(div, mod), b.const(0, I32)], BOOL, pred="eq")))
        return self.all_of(preds)

    def all_of(self, preds: list[Value | None]) -> Value | None:
        preds = [p for p in preds if p is not None]
        if not preds:
            return None
        acc = preds[0]
        for p in preds[1:]:
            acc = self.op("and", [acc, p], BOOL)
        return acc

    def smem(self, nbytes: int) -> Value:
        """The scratch buffer's address; records how much of it this op uses."""
        self.smem_bytes = max(self.smem_bytes, _align(nbytes, SMEM_ALIGN))
        if self.smem_bytes > self.smem_limit:
            raise ResourceError(f"this needs {self.smem_bytes} bytes of shared memory; the target allows "
                                f"{self.smem_limit} per CTA (use smaller tiles)", self.b.loc)
        return self.entry_value(("smem",), lambda b: b.value("smem_addr", [], U32, offset=0))

    def barrier(self) -> None:
        self.b.op("barrier", [], [])

    # ---------------------------------------------------------- values
    def tile(self, v: Value) -> TileRegs:
        return self.vals[v]

    def in_layout(self, v: Value, layout: Layout) -> TileRegs:
        """The registers of tile `v` in `layout`, moving data through shared memory if needed."""
        t = self.vals[v]
        if t.layout == layout:
            return t
        return TileRegs(layout, self.relayout(t, layout, v.dtype))

    def flat(self, v: Value) -> list[Value]:
        x = self.vals[v]
        return x.regs if isinstance(x, TileRegs) else [x]

    def unflat(self, v: Value, regs: list[Value], pos: int) -> int:
        if isinstance(v.type, TileType):
            layout = self.layouts[v]
            self.vals[v] = TileRegs(layout, regs[pos:pos + layout.nregs])
            return pos + layout.nregs
        self.vals[v] = regs[pos]
        return pos + 1

    def lowered_types(self, v: Value) -> list[ScalarType]:
        if isinstance(v.type, TileType):
            return [ScalarType(v.dtype)] * self.layouts[v].nregs
        return [v.type]

    # ---------------------------------------------------------- blocks
    def lower_block(self, block: Block, out: Block) -> None:
        saved = self.b
        self.b = Builder(self.out, out)
        for op in block.ops:
            self.b.loc = op.loc
            handler = getattr(self, "op_" + op.opcode, None)
            if handler is None:
                if op.opcode in ELEMENTWISE:
                    handler = self.elementwise
                else:
                    raise UnsupportedError(f"the back end cannot lower '{op.opcode}' yet", op.loc)
            handler(op)
        self.b = saved

    def op_yield(self, op: Op) -> None:
        self.b.op("yield", [r for v in op.operands for r in self.flat(v)], [])

    def op_for(self, op: Op) -> None:
        lo, hi = self.vals[op.operands[0]], self.vals[op.operands[1]]
        inits = [r for v in op.operands[2:] for r in self.flat(v)]
        src_body = op.regions[0]
        body = Block()
        types = [t for v in op.results for t in self.lowered_types(v)]
        new = self.b.op("for", [lo, hi, *inits], types, dict(op.attrs), [body])
        builder = Builder(self.out, body)
        builder.block_arg(body, src_body.args[0].type, src_body.args[0].name)
        self.vals[src_body.args[0]] = body.args[0]
        for v in src_body.args[1:]:
            for t in self.lowered_types(v):
                builder.block_arg(body, t, v.name)
        pos = 1
        for v in src_body.args[1:]:
            pos = self.unflat(v, body.args, pos)
        self.lower_block(src_body, body)
        pos = 0
        for v in op.results:
            pos = self.unflat(v, new.results, pos)

    def op_if(self, op: Op) -> None:
        cond = self.vals[op.operands[0]]
        types = [t for v in op.results for t in self.lowered_types(v)]
        regions = [Block(), Block()]
        new = self.b.op("if", [cond], types, {}, regions)
        for src, dst in zip(op.regions, regions):
            self.lower_block(src, dst)
        pos = 0
        for v in op.results:
            pos = self.unflat(v, new.results, pos)

    # ---------------------------------------------------------- leaves
    def op_param(self, op: Op) -> None:
        t = op.result.type
        if isinstance(t, TensorType):
            ptr = self.op("param", [], I64, **op.attrs)
            p = self.src.attrs["params"][op.attrs["index"]]
            dims = [self.param_size(d) if isinstance(d, str) else self.const(d) for d in t.dims]
            self.vals[op.result] = TensorRef(ptr, dims, t.dtype, not p.written)
        else:
            self.vals[op.result] = self.op("param", [], t, **op.attrs)

    def param_size(self, name: str) -> Value:
        return self.entry_value(("size", name), lambda b: b.value(
            "param", [], I32, index=self.params[name], name=name))

    def op_const(self, op: Op) -> None:
        t = op.result.type
        if isinstance(t, TileType):
            v = self.const(op.attrs["value"], t.dtype)
            self.vals[op.result] = TileRegs(self.layouts[op.result], [v] * self.layouts[op.result].nregs)
        else:
            self.vals[op.result] = self.const(op.attrs["value"], t.dtype)

    def op_program_id(self, op: Op) -> None:
        self.vals[op.result] = self.op(op.opcode, [], I32, **op.attrs)

    op_num_programs = op_program_id

    def elementwise(self, op: Op) -> None:
        if not isinstance(op.result.type, TileType):
            self.vals[op.result] = self.op(op.opcode, [self.vals[v] for v in op.operands], op.result.type, **op.attrs)
            return
        layout = self.layouts[op.result]
        operands = [self.in_layout(v, layout).regs for v in op.operands]
        t = ScalarType(op.result.dtype)
        regs = [self.op(op.opcode, [o[r] for o in operands], t, **op.attrs) for r in range(layout.nregs)]
        self.vals[op.result] = TileRegs(layout, regs)

    def op_broadcast(self, op: Op) -> None:
        layout = self.layouts[op.result]
        src = op.operands[0]
        if not isinstance(src.type, TileType):
            self.vals[op.result] = TileRegs(layout, [self.vals[src]] * layout.nregs)
            return
        dims = _broadcast_dims(src.type.shape, layout.shape)
        small, index = layout.collapse_map(dims)
        lead = len(layout.shape) - len(src.type.shape)
        regs = self.in_layout(src, _drop_leading(small, lead)).regs
        self.vals[op.result] = TileRegs(layout, [regs[i] for i in index])

    def op_arange(self, op: Op) -> None:
        layout = self.layouts[op.result]
        start = op.attrs["start"]
        base = self.thread_coord(layout.terms[0])
        regs = [self.op("add", [base, self.const(start + off[0])], I32) for off in layout.offsets]
        self.vals[op.result] = TileRegs(layout, regs)

    # ---------------------------------------------------------- shared-memory moves
    def relayout(self, t: TileRegs, dst: Layout, dtype: DType, source_index=None) -> list[Value]:
        """Move a tile to another layout through shared memory.

        `source_index(coords)` gives, for an element of the destination, the
        row-major index of the source element it copies (default: the same
        coordinates; reshape and extract pass their own).
        """
        src = t.layout
        eb = _smem_bytes(dtype)
        size = 1
        for n in src.shape:
            size *= n
        base = self.smem(size * eb)
        strides = _row_major_strides(src.shape)
        self.barrier()
        owner = self.owner(src)
        for r in range(src.nregs):
            index = self.linear(src, r, strides, [0] * src.rank)
            pred = self.all_of([self.slot_valid(src, r), owner])
            self.st_shared(base, index, eb, [t.regs[r]], dtype, pred)
        self.barrier()
        regs = []
        for r in range(dst.nregs):
            coords = [self.coord(dst, r, d) for d in range(dst.rank)]
            index = source_index(coords) if source_index else self.dot_product(coords, strides)
            regs.append(self.ld_shared(base, index, eb, dtype, self.slot_valid(dst, r)))
        return regs

    def linear(self, layout: Layout, r: int, strides, starts) -> Value:
        coords = [self.coord(layout, r, d) for d in range(layout.rank)]
        if any(starts):
            coords = [c if s == 0 else self.op("add", [c, self.const(s)], I32) for c, s in zip(coords, starts)]
        return self.dot_product(coords, strides)

    def dot_product(self, coords: list[Value], strides: list[int]) -> Value:
        acc = None
        for c, s in zip(coords, strides):
            term = c if s == 1 else self.op("mul", [c, self.const(s)], I32)
            acc = term if acc is None else self.op("add", [acc, term], I32)
        return acc if acc is not None else self.const(0)

    def smem_address(self, base: Value, index: Value, eb: int) -> Value:
        off = self.op("mul", [self.op("cast", [index], U32), self.const(eb, DType.U32)], U32)
        return self.op("add", [base, off], U32)

    def st_shared(self, base: Value, index: Value, eb: int, values: list[Value], dtype: DType,
                  pred: Value | None, offset: int = 0) -> None:
        addr = self.smem_address(base, index, eb)
        self.b.op("st_shared", [addr, *values] + ([pred] if pred is not None else []), [],
                  {"dtype": dtype, "vec": len(values), "offset": offset, "masked": pred is not None})

    def ld_shared(self, base: Value, index: Value, eb: int, dtype: DType, pred: Value | None,
                  offset: int = 0) -> Value:
        addr = self.smem_address(base, index, eb)
        return self.b.op("ld_shared", [addr] + ([pred] if pred is not None else []), [ScalarType(dtype)],
                         {"dtype": dtype, "vec": 1, "offset": offset, "masked": pred is not None}).result

    def op_reshape(self, op: Op) -> None:
        src = self.tile(op.operands[0])
        layout = self.layouts[op.result]
        strides = _row_major_strides(layout.shape)
        regs = self.relayout(src, layout, op.result.dtype, lambda coords: self.dot_product(coords, strides))
        self.vals[op.result] = TileRegs(layout, regs)

    def op_extract(self, op: Op) -> None:
        src = self.tile(op.operands[0])
        starts, sizes = op.attrs["starts"], op.attrs["sizes"]
        strides = _row_major_strides(src.layout.shape)
        result_t = op.result.type

        def source_index(coords: list[Value]) -> Value:
            it = iter(coords)
            full = []
            for s, n in zip(starts, sizes):
                c = next(it) if n is not None else self.const(0)
                full.append(c if s == 0 else self.op("add", [c, self.const(s)], I32))
            return self.dot_product(full, strides)

        if isinstance(result_t, TileType):
            layout = self.layouts[op.result]
            self.vals[op.result] = TileRegs(layout, self.relayout(src, layout, op.result.dtype, source_index))
        else:
            scalar_layout = Layout((), self.threads, (), ((),), ((1, self.threads),))
            self.vals[op.result] = self.relayout(src, scalar_layout, op.result.dtype, source_index)[0]

    # ---------------------------------------------------------- global memory
    def slice_geometry(self, op: Op, tensor: TensorRef, value_count: int):
        """Tile dim -> tensor dim mapping, starts, and the tensor's strides (elements)."""
        indices = op.operands[1:1 + len(tensor.dims)]
        sizes = op.attrs["sizes"]
        starts = [self.vals[v] for v in indices]
        starts = [s if s.dtype is DType.I32 else self.op("cast", [s], I32) for s in starts]
        tile_dims = [d for d, n in enumerate(sizes) if n is not None]
        return starts, sizes, tile_dims

    def strides_of(self, tensor: TensorRef) -> list[Value]:
        """Row-major strides in elements, as i64 values."""
        strides = [None] * len(tensor.dims)
        acc = self.const(1, DType.I64)
        for d in reversed(range(len(tensor.dims))):
            strides[d] = acc
            if d:
                dim64 = self.op("cast", [tensor.dims[d]], I64)
                acc = self.op("mul", [acc, dim64], I64)
        return strides

    def in_bounds(self, tensor: TensorRef, starts: list[Value], sizes) -> Value:
        """Uniform predicate: the whole slice lies inside the tensor."""
        preds = []
        for dim, start, n in zip(tensor.dims, starts, sizes):
            if n is None:
                preds.append(self.unsigned_less(start, dim))
            else:
                preds.append(self.op("cmp", [start, self.const(0)], BOOL, pred="ge"))
                end = self.op("add", [start, self.const(n)], I32)
                preds.append(self.op("cmp", [end, dim], BOOL, pred="le"))
        return self.all_of(preds)

    def unsigned_less(self, a: Value, b: Value) -> Value:
        """0 <= a < b for i32 a and b >= 0, as one unsigned comparison."""
        return self.op("cmp", [self.op("cast", [a], U32), self.op("cast", [b], U32)], BOOL, pred="lt")

    def vector_ok(self, tensor: TensorRef, starts, tile_dims, layout: Layout | None) -> int:
        """The vector width (elements) usable when the slice is aligned, 1 if none."""
        if layout is None or not tile_dims or tile_dims[-1] != len(tensor.dims) - 1:
            return 1
        if tensor.dtype.nbytes < 4:
            return 1
        width = layout.vector_width()
        while width > 1 and width * tensor.dtype.nbytes > 16:
            width //= 2
        return width

    def aligned(self, tensor: TensorRef, starts, width: int) -> Value:
        """Uniform predicate: the base pointer, row length and slice start allow `width`-element vectors."""
        nbytes = width * tensor.dtype.nbytes
        low = self.op("and", [tensor.ptr, self.const(nbytes - 1, DType.I64)], I64)
        preds = [self.op("cmp", [low, self.const(0, DType.I64)], BOOL, pred="eq")]
        for v in (starts[-1], tensor.dims[-1]):
            low = self.op("and", [v, self.const(width - 1)], I32)
            preds.append(self.op("cmp", [low, self.const(0)], BOOL, pred="eq"))
        return self.all_of(preds)

    def row_addresses(self, tensor: TensorRef, starts, tile_dims, layout: Layout | None):
        """For each register: (address of its row, byte offset of the element within the row).

        The address of element r is base + sum_d coord_d * stride_d * size; the
        part of the last dim that is constant per register is returned apart, to
        become the access's immediate offset.
        """
        eb = tensor.dtype.nbytes
        strides = self.strides_of(tensor)
        last = len(tensor.dims) - 1
        nregs = layout.nregs if layout is not None else 1
        thread_c = {}
        for k, d in enumerate(tile_dims):
            thread_c[d] = self.op("add", [starts[d], self.thread_coord(layout.terms[k])], I32)
        base = tensor.ptr
        for d in range(len(tensor.dims)):
            c = thread_c.get(d, starts[d])
            if d == last:
                term = self.op("mul_wide", [c, self.const(eb)], I64)
            elif d == last - 1:  # the stride is the last dim, an i32
                term = self.op("mul", [self.op("mul_wide", [c, tensor.dims[last]], I64),
                                       self.const(eb, DType.I64)], I64)
            else:
                term = self.op("mul", [self.op("cast", [c], I64), strides[d]], I64)
                term = self.op("mul", [term, self.const(eb, DType.I64)], I64)
            base = self.op("add", [base, term], I64)
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
                    row = self.op("mul", [strides[d], self.const(offsets[k] * eb, DType.I64)], I64)
                    addr = self.op("add", [addr, row], I64)
            out.append((addr, last_off))
        return out

    def element_valid(self, tensor: TensorRef, starts, sizes, tile_dims, layout: Layout | None, r: int):
        """Predicate: element r is in the tile (not padding) and inside the tensor."""
        preds = [self.slot_valid(layout, r)] if layout is not None else []
        for d, (dim, start, n) in enumerate(zip(tensor.dims, starts, sizes)):
            if n is None:
                preds.append(self.unsigned_less(start, dim))
            else:
                k = tile_dims.index(d)
                c = self.op("add", [start, self.thread_coord(layout.terms[k])], I32)
                if layout.offsets[r][k]:
                    c = self.op("add", [c, self.const(layout.offsets[r][k])], I32)
                preds.append(self.unsigned_less(c, dim))
        return self.all_of(preds)

    def access_groups(self, layout: Layout | None, width: int) -> list[list[int]]:
        nregs = layout.nregs if layout is not None else 1
        return [list(range(i, i + width)) for i in range(0, nregs, width)]

    def op_load(self, op: Op) -> None:
        tensor = self.vals[op.operands[0]]
        result_t = op.result.type
        layout = self.layouts.get(op.result) if isinstance(result_t, TileType) else None
        starts, sizes, tile_dims = self.slice_geometry(op, tensor, 0)
        addrs = self.row_addresses(tensor, starts, tile_dims, layout)
        dtype = tensor.dtype.compute
        width = self.vector_ok(tensor, starts, tile_dims, layout)
        fast = self.in_bounds(tensor, starts, sizes)
        if width > 1:
            fast = self.all_of([fast, self.aligned(tensor, starts, width)])
        nregs = len(addrs)
        regions = [Block(), Block()]
        branch = self.b.op("if", [fast], [ScalarType(dtype)] * nregs, {}, regions)
        outer = self.b
        for region, vec in ((regions[0], width), (regions[1], 1)):
            self.b = Builder(self.out, region, outer.loc)
            regs: list[Value] = []
            for group in self.access_groups(layout, vec):
                addr, off = addrs[group[0]]
                if vec > 1 or region is regions[0]:
                    pred = self.slot_valid(layout, group[0]) if layout is not None else None
                else:
                    pred = self.element_valid(tensor, starts, sizes, tile_dims, layout, group[0])
                ld = self.b.op("ld_global", [addr] + ([pred] if pred is not None else []),
                               [ScalarType(dtype)] * len(group),
                               {"dtype": tensor.dtype, "vec": len(group), "offset": off,
                                "masked": pred is not None, "read_only": tensor.read_only})
                regs += ld.results
            self.b.op("yield", regs, [])
        self.b = outer
        if layout is None:
            self.vals[op.result] = branch.results[0]
        else:
            self.vals[op.result] = TileRegs(layout, list(branch.results))

    def store_like(self, op: Op, opcode: str) -> None:
        tensor = self.vals[op.operands[0]]
        value = op.operands[-1]
        starts, sizes, tile_dims = self.slice_geometry(op, tensor, 1)
        if isinstance(value.type, TileType):
            layout = self.layouts[value]
            regs = self.tile(value).regs
            owner = self.owner(layout)
        else:
            layout, regs = None, [self.vals[value]]
            owner = self.entry_value(("thread0",), lambda b: b.value(
                "cmp", [self.tid(), b.const(0, I32)], BOOL, pred="eq"))
        addrs = self.row_addresses(tensor, starts, tile_dims, layout)
        width = self.vector_ok(tensor, starts, tile_dims, layout) if opcode == "st_global" else 1
        fast = self.in_bounds(tensor, starts, sizes)
        if width > 1:
            fast = self.all_of([fast, self.aligned(tensor, starts, width)])
        regions = [Block(), Block()]
        self.b.op("if", [fast], [], {}, regions)
        outer = self.b
        for region, vec in ((regions[0], width), (regions[1], 1)):
            self.b = Builder(self.out, region, outer.loc)
            for group in self.access_groups(layout, vec):
                addr, off = addrs[group[0]]
                if region is regions[0]:
                    valid = self.slot_valid(layout, group[0]) if layout is not None else None
                else:
                    valid = self.element_valid(tensor, starts, sizes, tile_dims, layout, group[0])
                pred = self.all_of([valid, owner])
                self.b.op(opcode, [addr, *(regs[r] for r in group)] + ([pred] if pred is not None else []), [],
                          {"dtype": tensor.dtype, "vec": len(group), "offset": off, "masked": pred is not None})
            self.b.op("yield", [], [])
        self.b = outer

    def op_store(self, op: Op) -> None:
        self.store_like(op, "st_global")

    def op_atomic_add(self, op: Op) -> None:
        self.store_like(op, "atom_add_global")

    # ---------------------------------------------------------- dot
    def op_dot(self, op: Op) -> None:
        a_v, b_v = op.operands[0], op.operands[1]
        (m, k), n = a_v.type.shape, b_v.type.shape[1]
        dtype = op.result.dtype
        eb = dtype.nbytes
        natural = dot_layout((m, n), self.threads)
        a, bt = self.tile(a_v), self.tile(b_v)
        lda = _align(_cover(natural, 0), 4) + 4  # +4: fewer bank conflicts on the transposed writes
        ldb = _align(_cover(natural, 1), 4)
        a_bytes = k * lda * eb
        base = self.smem(a_bytes + k * ldb * eb)
        # stage A (transposed: As[k][m]) and B (Bs[k][n]) in shared memory
        self.barrier()
        self.stage(a, base, 0, lambda row, col: (col, row), lda, eb, dtype)
        self.stage(bt, base, a_bytes, lambda row, col: (row, col), ldb, eb, dtype)
        self.barrier()
        if len(op.operands) == 3:
            acc = self.in_layout(op.operands[2], natural).regs
        else:
            acc = [self.const(0.0, dtype)] * natural.nregs
        rows = sorted({off[0] for off in natural.offsets})
        cols = sorted({off[1] for off in natural.offsets})
        a_base = self.smem_address(base, self.thread_coord(natural.terms[0]), eb)
        b_base = self.smem_address(base, self.thread_coord(natural.terms[1]), eb)
        plan = _DotPlan(natural, rows, cols, lda, ldb, a_bytes, eb, dtype)
        if k <= DOT_UNROLL_LIMIT:
            for kk in range(k):
                acc = self.dot_step(plan, a_base, b_base, kk, acc)
        else:
            acc = self.dot_loop(plan, a_base, b_base, k, acc)
        result = TileRegs(natural, acc)
        layout = self.layouts[op.result]
        if layout != natural:
            result = TileRegs(layout, self.relayout(result, layout, dtype))
        self.vals[op.result] = result

    def stage(self, t: TileRegs, base: Value, start: int, place, ld: int, eb: int, dtype: DType) -> None:
        """Write a dot operand into shared memory at `start`: element (i, j) to row/col `place(i, j)`."""
        layout = t.layout
        owner = self.owner(layout)
        c0, c1 = self.thread_coord(layout.terms[0]), self.thread_coord(layout.terms[1])
        srow, scol = place(c0, c1)
        thread_index = self.op("add", [self.op("mul", [srow, self.const(ld)], I32), scol], I32)
        width = layout.vector_width() if place(0, 1) == (0, 1) else 1
        while width * eb > 16:
            width //= 2
        for group in self.access_groups(layout, width):
            i, j = layout.offsets[group[0]]
            orow, ocol = place(i, j)
            pred = self.all_of([self.slot_valid(layout, group[0]), owner])
            self.st_shared(base, thread_index, eb, [t.regs[r] for r in group], dtype, pred,
                           offset=start + (orow * ld + ocol) * eb)

    def dot_step(self, plan: "_DotPlan", a_base: Value, b_base: Value, kk, acc: list[Value],
                 k_offset: Value | None = None) -> list[Value]:
        """One k of the product: read this thread's A column and B row pieces, then RM*RN FMAs."""
        if k_offset is not None:
            a_base = self.op("add", [a_base, k_offset[0]], U32)
            b_base = self.op("add", [b_base, k_offset[1]], U32)
        a_vals = self.read_fragment(a_base, plan.rows, kk * plan.lda * plan.eb, plan)
        b_vals = self.read_fragment(b_base, plan.cols, plan.a_bytes + kk * plan.ldb * plan.eb, plan)
        t = ScalarType(plan.dtype)
        return [self.op("fma", [a_vals[i], b_vals[j], acc[r]], t)
                for r, (i, j) in enumerate(plan.layout.offsets)]

    def read_fragment(self, base: Value, offsets: list[int], start: int, plan: "_DotPlan") -> dict[int, Value]:
        """ld.shared the elements at `offsets` (runs of 4 contiguous as vectors) from base + start."""
        out = {}
        per_vector = max(1, 16 // plan.eb)
        i = 0
        while i < len(offsets):
            run = 1
            while (i + run < len(offsets) and run < per_vector and offsets[i + run] == offsets[i] + run
                   and offsets[i] % per_vector == 0):
                run += 1
            while run & (run - 1):
                run -= 1
            ld = self.b.op("ld_shared", [base], [ScalarType(plan.dtype)] * run,
                           {"dtype": plan.dtype, "vec": run, "offset": start + offsets[i] * plan.eb,
                            "masked": False})
            for j in range(run):
                out[offsets[i + j]] = ld.results[j]
            i += run
        return out

    def dot_loop(self, plan: "_DotPlan", a_base: Value, b_base: Value, k: int, acc: list[Value]) -> list[Value]:
        """A runtime loop over k in steps of DOT_STEP (unrolled inside), then the remainder unrolled."""
        main = k - k % DOT_STEP
        body = Block()
        loop = self.b.op("for", [self.const(0), self.const(main), *acc], [ScalarType(plan.dtype)] * len(acc),
                         {"step": DOT_STEP}, [body])
        outer = self.b
        self.b = Builder(self.out, body, outer.loc)
        kk = self.b.block_arg(body, I32, "k")
        carried = [self.b.block_arg(body, ScalarType(plan.dtype)) for _ in acc]
        ku = self.op("cast", [kk], U32)
        k_offset = (self.op("mul", [ku, self.const(plan.lda * plan.eb, DType.U32)], U32),
                    self.op("mul", [ku, self.const(plan.ldb * plan.eb, DType.U32)], U32))
        for step in range(DOT_STEP):
            carried = self.dot_step(plan, a_base, b_base, step, carried, k_offset)
        self.b.op("yield", carried, [])
        self.b = outer
        acc = list(loop.results)
        for kk_rest in range(main, k):
            acc = self.dot_step(plan, a_base, b_base, kk_rest, acc)
        return acc

    # ---------------------------------------------------------- reductions
    def op_reduce(self, op: Op) -> None:
        x = self.tile(op.operands[0])
        kind, axis = op.attrs["kind"], op.attrs["axis"]
        layout = x.layout
        dims = list(range(layout.rank)) if axis is None else [axis]
        combine = _COMBINE[kind]
        src_dtype = op.operands[0].dtype
        small, index = layout.collapse_map(dims)
        with_index = kind in ("argmax", "argmin")
        identity = self.const(_identity(kind, src_dtype), src_dtype)
        big_index = self.const(2**31 - 1)
        partial: dict[int, tuple] = {}
        shape_strides = _row_major_strides(layout.shape)
        for r in range(layout.nregs):
            v = x.regs[r]
            valid = self.slot_valid(layout, r, dims)
            if valid is not None:
                v = self.op("select", [valid, v, identity], ScalarType(src_dtype))
            idx = None
            if with_index:
                idx = (self.coord(layout, r, axis) if axis is not None else
                       self.dot_product([self.coord(layout, r, d) for d in dims], shape_strides))
                if valid is not None:
                    idx = self.op("select", [valid, idx, big_index], I32)
            s = index[r]
            partial[s] = (v, idx) if s not in partial else combine(self, partial[s], (v, idx), src_dtype)
        lane_terms = [t for d in dims for t in layout.terms[d] if t.in_warp]
        for t in lane_terms:
            bit = t.div
            while bit < t.div * t.mod:
                for s, (v, idx) in list(partial.items()):
                    other = (self.shuffle(v, bit), self.shuffle(idx, bit) if idx is not None else None)
                    partial[s] = combine(self, (v, idx), other, src_dtype)
                bit *= 2
        warp_terms = [t for d in dims for t in layout.terms[d] if not t.in_warp]
        if warp_terms:
            partial = self.combine_warps(partial, small, layout, dims, lane_terms, warp_terms, combine, src_dtype,
                                         with_index)
        result = [partial[s][1] if with_index else partial[s][0] for s in range(small.nregs)]
        if axis is None:
            self.vals[op.result] = result[0]
            return
        out = TileRegs(small, result)
        target = self.layouts[op.result]
        if target != small:
            out = TileRegs(target, self.relayout(out, target, op.result.dtype))
        self.vals[op.result] = out

    def shuffle(self, v: Value, lane_mask: int) -> Value:
        return self.op("shfl_bfly", [v, self.const(lane_mask)], v.type)

    def combine_warps(self, partial, small: Layout, layout: Layout, dims, lane_terms, warp_terms, combine,
                      dtype: DType, with_index: bool):
        """Exchange per-warp partial results through shared memory; every thread combines them all."""
        nwarp = 1
        for t in warp_terms:
            nwarp *= t.mod
        slot = self.const(0)
        radix = 1
        for t in warp_terms:
            term = self.op("mul", [self.digit(t.div, t.mod), self.const(radix)], I32)
            slot = self.op("add", [slot, term], I32)
            radix *= t.mod
        size = 1
        for n_ in small.shape:
            size *= n_
        eb = max(_smem_bytes(dtype), 4)
        words = 2 if with_index else 1
        base = self.smem(size * nwarp * eb * words)
        strides = _row_major_strides(small.shape)
        leader = self.owner(layout, tuple((t.div, t.mod) for t in lane_terms))
        self.barrier()
        elements = {}
        for s in range(small.nregs):
            element = self.linear(small, s, strides, [0] * small.rank)
            elements[s] = element
            at = self.op("add", [self.op("mul", [element, self.const(nwarp)], I32), slot], I32)
            pred = self.all_of([self.slot_valid(small, s), leader])
            v, idx = partial[s]
            self.st_shared(base, at, eb, [v], dtype, pred)
            if with_index:
                self.st_shared(base, at, 4, [idx], DType.I32, pred, offset=size * nwarp * eb)
        self.barrier()
        out = {}
        for s in range(small.nregs):
            valid = self.slot_valid(small, s)
            acc = None
            for w in range(nwarp):
                at = self.op("add", [self.op("mul", [elements[s], self.const(nwarp)], I32), self.const(w)], I32)
                v = self.ld_shared(base, at, eb, dtype, valid)
                idx = None
                if with_index:
                    idx = self.ld_shared(base, at, 4, DType.I32, valid, offset=size * nwarp * eb)
                acc = (v, idx) if acc is None else combine(self, acc, (v, idx), dtype)
            out[s] = acc
        return out


@dataclass
class _DotPlan:
    layout: Layout
    rows: list[int]
    cols: list[int]
    lda: int
    ldb: int
    a_bytes: int
    eb: int
    dtype: DType


def _combine_value(opcode: str):
    def combine(low: Lowering, a, b, dtype: DType):
        return (low.op(opcode, [a[0], b[0]], ScalarType(dtype)), None)
    return combine


def _combine_arg(pred: str):
    def combine(low: Lowering, a, b, dtype: DType):
        (va, ia), (vb, ib) = a, b
        better = low.op("cmp", [vb, va], BOOL, pred=pred)
        tie = low.all_of([low.op("cmp", [vb, va], BOOL, pred="eq"), low.op("cmp", [ib, ia], BOOL, pred="lt")])
        take = low.op("or", [better, tie], BOOL)
        return (low.op("select", [take, vb, va], ScalarType(dtype)), low.op("select", [take, ib, ia], I32))
    return combine


_COMBINE = {"sum": _combine_value("add"), "max": _combine_value("max"), "min": _combine_value("min"),
            "argmax": _combine_arg("gt"), "argmin": _combine_arg("lt")}


def _identity(kind: str, dtype: DType):
    if kind == "sum":
        return 0.0 if dtype.is_float else 0
    big = float("inf") if dtype.is_float else {DType.I32: 2**31 - 1, DType.I64: 2**63 - 1, DType.U32: 2**32 - 1}[dtype]
    small = float("-inf") if dtype.is_float else {DType.I32: -2**31, DType.I64: -2**63, DType.U32: 0}[dtype]
    return small if kind in ("max", "argmax") else big


def _cover(layout: Layout, d: int) -> int:
    """How far along dim d the layout reaches (padding included)."""
    return layout.thread_span(d) + max(off[d] for off in layout.offsets) + 1


def _row_major_strides(shape) -> list[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _smem_bytes(dtype: DType) -> int:
    return 4 if dtype is DType.BOOL else dtype.nbytes


def lower(func: Function, smem_limit: int) -> Function:
    """Thread-level IR for a tile-level function; see the module header."""
    return Lowering(func, smem_limit).run()

