# The core of lowering: the state of one lowering, the table of op handlers,
# and the helpers every concern uses.
#
# Lowering turns tile-level IR into thread-level IR.  Every tile value has a
# layout (chosen beforehand by placement.py) and becomes one scalar SSA value
# per register slot of a thread (`TileRegs`); a tensor parameter becomes its
# base address and dims (`TensorRef`); a scalar stays one value.  `vals` maps
# each tile-level value to what it became.  A value of a 16-bit float dtype is
# held in f32 registers (its compute dtype), which hold it exactly.
#
# Each tile-level op is lowered by the handler registered for its opcode in
# HANDLERS, a `phobos.dispatch.Dispatch` table.  A handler is a function
# `handler(low: Lowering, op: Op) -> None` that writes thread-level ops at
# `low.b` and records the op's results in `low.vals`.  The concern modules
# (values, control, memory, dot, mma, pipeline, reduce, scan, indexed,
# rearrange, debug) register their handlers on import; driver.py imports them
# all.  They import this module, never the other way round.
#
# What lives here is what more than one concern needs:
#
# * building: `op` writes a pure scalar op, shared with an identical one in
#   scope and folded when its operands are constants (lowering writes the same
#   index arithmetic for many elements, and sharing it as it is built keeps
#   the IR - and the passes' work - small); `const` puts constants at the
#   kernel's entry; `builder_for` opens a nested region; `build_for` writes a
#   loop carrying a tile-level loop's values as registers.
# * thread coordinates: `digit`, `thread_coord` and `coord` compute a layout's
#   coordinates (layout.py's terms) once per kernel at its entry; `slot_valid`
#   and `owner` are the predicates for padding slots and replicated threads.
# * global memory: `global_barriers` (ordering.py) names the tensor accesses
#   that a barrier must separate from earlier ones of other threads.
# * shared memory: one scratch buffer, reused by every op that needs one
#   (`smem` records the largest use and checks it against the target); each
#   such op starts with a barrier (no thread still reads the previous
#   contents) and puts a barrier between its writes and its reads.
#   `relayout` moves a tile to another layout through it; `in_layout` does so
#   only when the layouts differ.
# * the walk: `lower_block` and `lower_ops` lower a list of ops through the
#   table, leaving out the loads and element-wise ops that a fused store
#   (fusion.py) computes itself.
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..configuration import Knobs
from ..constants import evaluate
from ..dispatch import Dispatch
from ..errors import ResourceError, UnsupportedError
from ..middle.ir import Block, Builder, Function, KernelParam, Op, Value, uses, walk
from ..middle.passes.cse import freeze
from ..middle.passes.fold import identity
from ..types import DType, ScalarType, TileType
from .fusion import FusedStore, fusion_plan
from .layout import Layout, Term
from .mma_plan import MmaPlan, describe, plan_dots
from .ordering import global_barriers
from .placement import assign_layouts, check_register_need, choose_threads, program_grouping

SMEM_ALIGN = 16
I32 = ScalarType(DType.I32)
I64 = ScalarType(DType.I64)
U32 = ScalarType(DType.U32)
BOOL = ScalarType(DType.BOOL)
#: The integer type of tensor dims and element coordinates, by index width (see memory.py).
INDEX_TYPES = {32: I32, 64: I64}

HANDLERS = Dispatch("IR opcode")  # opcode -> handler(low: Lowering, op: Op) -> None


@dataclass
class TileRegs:
    """A lowered tile: its layout and one value per register slot."""

    layout: Layout
    regs: list[Value]


@dataclass
class Transposed:
    """A 2-D tile's transpose, not moved (rearrange.py, where only dots use it): its source's registers,
    which a dot stages transposed, or - a tensor-core product reading it from registers - `moved`."""

    source: TileRegs

    def moved(self, low: "Lowering", layout: Layout, dtype: DType) -> TileRegs:
        """The transpose in the registers of `layout`, moved through shared memory."""
        cols = self.source.layout.shape[1]
        return TileRegs(layout, low.relayout(self.source, layout, dtype,
                                             lambda coords: low.dot_product([coords[1], coords[0]], [cols, 1])))


@dataclass(frozen=True)
class Programs:
    """The programs of a kernel whose CTAs are persistent (schedule.TileOrder): `counts`, the virtual grid
    along x, y and z - `programs` parameters, which the launcher fills with the grid it would otherwise
    launch - and, inside a CTA's loop over them, `ids`, the program ids of the one it runs now."""

    counts: tuple[Value, Value, Value]
    ids: tuple[Value, Value, Value] | None = None

    def running(self, ids: tuple[Value, Value, Value]) -> Programs:
        return Programs(self.counts, ids)


@dataclass
class TensorRef:
    """A lowered tensor: base address (global, i64), dims (values of the index type), element type,
    whether it may be loaded through the read-only cache (ld.global.nc), and its element strides (i64
    values; a constant 1 for a last stride specialised to 1) when it was passed as a strided view - None:
    row-major, the strides follow from the dims."""

    ptr: Value
    dims: list[Value]
    dtype: DType
    read_only: bool
    strides: list[Value] | None = None

    @property
    def unit_last(self) -> bool:
        """Whether consecutive elements of the last dim are adjacent in memory (vector accesses may work)."""
        return self.strides is None or getattr(self.strides[-1].owner, "opcode", None) == "const"


class Lowering:
    """The state of lowering one tile-level function, and the helpers on it."""

    def __init__(self, func: Function, smem_limit: int, cp_async: bool, index_bits: int = 32,
                 read_only_cache: bool = True, tensor_cores: bool = False, wgmma: bool = False, tma: bool = False,
                 fp8: bool = False, strided: dict[str, bool] | None = None):
        self.src = func
        self.fp8 = fp8  # the target has 8-bit float conversions and their mma.sync (sm_89 and newer)
        self.strided = strided or {}  # tensors passed as strided views: name -> whether the last stride is 1
        self.tma = tma  # a K loop's stages may be copied by TMA, through tensor maps the launcher builds
        self.wgmma = wgmma  # the target is sm_90a (wgmma; cvt.rn.tf32 too)
        self.smem_limit = smem_limit
        self.cp_async = cp_async
        self.read_only_cache = read_only_cache  # tensors the kernel does not write may use ld.global.nc
        self.index_type = INDEX_TYPES[index_bits]  # tensor dims, bounds tests and element coordinates
        self.use_count = uses(func)
        self.threads = choose_threads(func)
        self.plans = plan_dots(func, self.threads, tensor_cores, wgmma, fp8)  # dot -> MmaPlan, or why not
        self.layouts = assign_layouts(func, self.threads, self.plans)
        self.notes = [describe(op, plan) for op, plan in self.plans.items()]  # for the compiled kernel's report
        # the loads of once_a operands: done at their loop's start (pipeline.py), not where they are
        self.resident_loads = {dot.operands[0].owner for dot, plan in self.plans.items()
                               if isinstance(plan, MmaPlan) and plan.once_a}
        self.schedules: list[str] = []  # each pipelined loop's schedule (schedule.Schedule.text), for dumps
        check_register_need(func, self.layouts, self.threads)
        attrs = dict(func.attrs, threads=self.threads, index_bits=index_bits,
                     params=list(func.attrs["params"]))  # its own: tensor_map parameters join it
        self.out = Function(func.name, Block(), attrs)
        self.entry = Builder(self.out, self.out.body)
        self.entry.index = 0
        self.b = Builder(self.out, self.out.body)
        self.vals: dict[Value, object] = {}
        self.smem_bytes = 0
        self.scratch_start = 0  # where the scratch buffer starts (see smem)
        self.staged: dict[Value, object] = {}  # loaded operands a pipelined loop keeps in shared memory
        self.wgmma_in_flight: dict[Op, int] = {}  # wgmma products whose group may stay in flight (pipeline.py)
        self.while_wgmma: Callable[[], None] | None = None  # code the next wgmma product runs before its wait
        # once a producer warpgroup has branched off (pipeline.py), barriers count the consumers alone, or
        # with consumer teams (ping-pong) those of the thread's team, whose barrier is `barrier_id`
        self.barrier_threads: int | None = None
        self.barrier_id: Value | None = None
        # threads of a consumer team where two take a persistent CTA's tiles in turn (pipeline.py): `tid` is
        # then the thread's index in its team; None: in the CTA
        self.team_threads: int | None = None
        self.cache: dict[tuple, Value] = {}
        self.params = {p.name: i for i, p in enumerate(func.attrs["params"])}
        self.memo: dict[Block, dict] = {}
        self.parents: dict[Block, Block] = {}
        self.const_values: dict[tuple, Value] = {}  # (dtype, value) -> the const op's value, at entry
        self.constants: dict[int, object] = {}  # value id -> constant, for folding as ops are built
        self.group_m = program_grouping(func)
        self.cluster = func.attrs.get("knobs", Knobs()).cluster or 1  # CTAs per program instance (CLUSTER)
        self.programs: Programs | None = None  # persistent CTAs: the virtual programs (pipeline.py)
        self.fused_stores: dict[Op, FusedStore] = {}  # filled by lower_ops from fusion.fusion_plan
        self.global_barriers = global_barriers(func, self.layouts, self.use_count)  # accesses after a barrier
        self.dot_operand_uses: dict[Value, int] = {}  # how often each value is an operand a or b of a dot
        for op in walk(func.body):
            if op.opcode == "dot":
                for v in op.operands[:2]:
                    self.dot_operand_uses[v] = self.dot_operand_uses.get(v, 0) + 1

    # ---------------------------------------------------------- building
    def op(self, opcode: str, operands: list[Value], type_, **attrs) -> Value:
        """A pure scalar op, shared with an identical one in scope and folded when constant."""
        key = (opcode, type_.dtype, freeze(attrs) if attrs else None, *[v.id for v in operands])
        scope = self.b.block
        memo = self.memo
        while scope is not None:
            table = memo.get(scope)
            if table is not None:
                hit = table.get(key)
                if hit is not None:
                    return hit
            scope = self.parents.get(scope)
        value = None
        constants = self.constants
        known = [constants.get(v.id) for v in operands]
        if operands and None not in known:
            folded = evaluate(opcode, attrs, known, [v.dtype for v in operands], type_.dtype)
            if folded is not None:
                value = self.const(folded, type_.dtype)
        elif any(k is not None for k in known):
            same = identity(opcode, operands, known, type_.dtype)
            if same is not None and same.type == type_:
                value = same
        if value is None:
            value = self.b.value(opcode, operands, type_, **attrs)
        memo.setdefault(self.b.block, {})[key] = value
        return value

    def const(self, value, dtype: DType = DType.I32) -> Value:
        key = (dtype, freeze(value), type(value))
        hit = self.const_values.get(key)
        if hit is None:
            hit = self.const_values[key] = self.entry.value("const", [], ScalarType(dtype), value=value)
            self.constants[hit.id] = value
        return hit

    def builder_for(self, region: Block, parent: Block, loc=None) -> Builder:
        """A builder for a region nested in `parent` (its values see the enclosing ones)."""
        self.parents[region] = parent
        return Builder(self.out, region, loc)

    def entry_value(self, key: tuple, make) -> Value:
        """A value that depends only on the thread, computed once at the kernel's start."""
        v = self.cache.get(key)
        if v is None:
            saved_loc = self.entry.loc
            self.entry.loc = self.b.loc
            v = self.cache[key] = make(self.entry)
            self.entry.loc = saved_loc
        return v

    def all_of(self, preds: list[Value | None]) -> Value | None:
        preds = [p for p in preds if p is not None]
        if not preds:
            return None
        acc = preds[0]
        for p in preds[1:]:
            acc = self.op("and", [acc, p], BOOL)
        return acc

    def dot_product(self, coords: list[Value], strides: list[int]) -> Value:
        """sum of coords[d] * strides[d] (i32)."""
        acc = None
        for c, s in zip(coords, strides):
            term = c if s == 1 else self.op("mul", [c, self.const(s)], I32)
            acc = term if acc is None else self.op("add", [acc, term], I32)
        return acc if acc is not None else self.const(0)

    # ---------------------------------------------------------- thread coordinates
    def tid(self) -> Value:
        """The thread's index among those that run the kernel's code: in the CTA, or in its consumer team."""
        if self.team_threads is None:
            return self.cta_tid()
        return self.entry_value(("team tid",), lambda b: b.value(
            "and", [self.cta_tid(), b.const(self.team_threads - 1, I32)], I32))

    def cta_tid(self) -> Value:
        """The thread's index in the CTA."""
        return self.entry_value(("tid",), lambda b: b.value("tid", [], I32))

    def digit(self, div: int, mod: int) -> Value:
        """(tid // div) % mod, once per kernel (the modulo left out where tid < `threads` makes it moot)."""
        whole = div * mod >= self.threads

        def make(b: Builder) -> Value:  # div and mod are powers of two, tid is never negative
            t = self.tid()
            q = t if div == 1 else b.value("shr", [t, b.const(div.bit_length() - 1, I32)], I32)
            return q if whole else b.value("and", [q, b.const(mod - 1, I32)], I32)
        return self.entry_value(("digit", div, mod, whole), make)

    def thread_coord(self, terms: tuple[Term, ...]) -> Value:
        """The thread part of a coordinate: sum of digit * scale over the terms (i32)."""
        def make(b: Builder) -> Value:
            acc = b.const(0, I32)
            for t in terms:
                d = self.digit(t.div, t.mod)
                part = d if t.scale == 1 else b.value("mul", [d, b.const(t.scale, I32)], I32)
                acc = part if acc.owner.opcode == "const" else b.value("add", [acc, part], I32)
            return acc
        return self.entry_value(("coord", terms, self.threads), make)

    def coord(self, layout: Layout, r: int, d: int) -> Value:
        """Coordinate d of the element in register slot r of `layout` (i32)."""
        base = self.thread_coord(layout.terms[d])
        off = layout.offsets[r][d]
        return base if off == 0 else self.op("add", [base, self.const(off)], I32)

    def linear(self, layout: Layout, r: int, strides, starts) -> Value:
        """The index of register slot r's element, coordinates offset by `starts`, along `strides`."""
        coords = [self.coord(layout, r, d) for d in range(layout.rank)]
        if any(starts):
            coords = [c if s == 0 else self.op("add", [c, self.const(s)], I32) for c, s in zip(coords, starts)]
        return self.dot_product(coords, strides)

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

    # ---------------------------------------------------------- shared memory
    def smem(self, nbytes: int) -> Value:
        """The scratch buffer's address; records how much of it this op uses.

        The buffer starts `scratch_start` bytes in: a pipelined loop keeps its
        ring of stages below that while its body runs (pipeline.py).
        """
        start = self.scratch_start
        self.smem_bytes = max(self.smem_bytes, start + align(nbytes, SMEM_ALIGN))
        if self.smem_bytes > self.smem_limit:
            shared_by = self.src.attrs.get("knobs", Knobs()).ctas_per_sm
            where = (f"a CTA may have {self.smem_limit} when CTAS_PER_SM={shared_by} of them share an SM"
                     if shared_by else f"the target allows {self.smem_limit} per CTA")
            raise ResourceError(f"this needs {self.smem_bytes} bytes of shared memory; {where} (use smaller tiles)",
                                self.b.loc)
        return self.entry_value(("smem", start), lambda b: b.value("smem_addr", [], U32, offset=start))

    def barrier(self) -> None:
        self.b.op("barrier", [] if self.barrier_id is None else [self.barrier_id], [],
                  {} if self.barrier_threads is None else {"threads": self.barrier_threads})

    def tensor_map(self, tensor: Value, box, rounds: bool = False) -> Value:
        """The generic address of the tensor map over tensor parameter `tensor` (tile level) that moves
        boxes of box.rows x box.cols elements (`rounds`: f32 data rounded to TF32 on the way): a
        `tensor_map` parameter of the compiled kernel, added once, which the launcher fills for each call."""
        p = self.src.attrs["params"][tensor.owner.attrs["index"]]
        params, shape = self.out.attrs["params"], (box.rows, box.cols)
        index = next((i for i, q in enumerate(params) if q.kind == "tensor_map"
                      and (q.name, q.box, q.rounds) == (p.name, shape, rounds)), None)
        if index is None:
            index = len(params)
            params.append(KernelParam(p.name, "tensor_map", p.dtype, p.dims, box=shape, rounds=rounds))
        return self.entry_value(("tensor_map", index), lambda b: b.value("tensor_map_addr", [], I64, index=index))

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
        (value,) = self.ld_shared_at(self.smem_address(base, index, eb), dtype, 1, pred, offset)
        return value

    def ld_shared_at(self, addr: Value, dtype: DType, count: int, pred: Value | None, offset: int = 0) -> list[Value]:
        """`count` consecutive elements from shared address `addr` + `offset`, one access (zeros where `pred`
        is false)."""
        return list(self.b.op("ld_shared", [addr] + ([pred] if pred is not None else []), [ScalarType(dtype)] * count,
                              {"dtype": dtype, "vec": count, "offset": offset, "masked": pred is not None}).results)

    def relayout(self, t: TileRegs, dst: Layout, dtype: DType,
                 source_index: Callable[[list[Value]], Value] | None = None) -> list[Value]:
        """Move a tile to another layout through shared memory.

        `source_index(coords)` gives, for an element of the destination, the
        row-major index of the source element it copies (default: the same
        coordinates; reshape and extract pass their own).
        """
        strides = row_major_strides(t.layout.shape)
        return self.relayout_from([t], dst, dtype, source_index or (lambda coords: self.dot_product(coords, strides)))

    def relayout_from(self, sources: list[TileRegs], dst: Layout, dtype: DType,
                      source_index: Callable[[list[Value]], Value]) -> list[Value]:
        """A tile in layout `dst` made of the elements of several tiles: the sources are stored
        row-major one after the other in shared memory, and `source_index(coords)` gives, for each
        element of the result, the index of its source element in that sequence."""
        eb = smem_bytes(dtype)
        sizes = [math.prod(t.layout.shape) for t in sources]
        base = self.smem(sum(sizes) * eb)
        self.barrier()
        start = 0
        for t, size in zip(sources, sizes):
            src = t.layout
            strides = row_major_strides(src.shape)
            owner = self.owner(src)
            for r in range(src.nregs):
                index = self.linear(src, r, strides, [0] * src.rank)
                pred = self.all_of([self.slot_valid(src, r), owner])
                self.st_shared(base, index, eb, [t.regs[r]], dtype, pred, offset=start * eb)
            start += size
        self.barrier()
        regs = []
        for r in range(dst.nregs):
            coords = [self.coord(dst, r, d) for d in range(dst.rank)]
            regs.append(self.ld_shared(base, source_index(coords), eb, dtype, self.slot_valid(dst, r)))
        return regs

    # ---------------------------------------------------------- values
    def tile(self, v: Value) -> TileRegs:
        return self.vals[v]

    def in_layout(self, v: Value, layout: Layout) -> TileRegs:
        """The registers of tile `v` in `layout`, moving data through shared memory if needed."""
        t = self.vals[v]
        if t.layout == layout:
            return t
        return TileRegs(layout, self.relayout(t, layout, v.dtype.compute))

    def flat(self, v: Value) -> list[Value]:
        """The registers of v (a tile's slots, or the one value of a scalar)."""
        x = self.vals[v]
        return x.regs if isinstance(x, TileRegs) else [x]

    def unflat(self, v: Value, regs: list[Value], pos: int) -> int:
        """Record regs[pos:...] as what v became; returns the position after its registers."""
        if isinstance(v.type, TileType):
            layout = self.layouts[v]
            self.vals[v] = TileRegs(layout, regs[pos:pos + layout.nregs])
            return pos + layout.nregs
        self.vals[v] = regs[pos]
        return pos + 1

    def lowered_types(self, v: Value) -> list[ScalarType]:
        if isinstance(v.type, TileType):
            return [ScalarType(v.dtype.compute)] * self.layouts[v].nregs
        return [ScalarType(v.dtype.compute)]

    # ---------------------------------------------------------- the walk
    def lower_block(self, block: Block, out: Block) -> None:
        saved = self.b
        self.b = self.builder_for(out, saved.block) if out is not self.out.body else Builder(self.out, out)
        self.lower_ops(block.ops)
        self.b = saved

    def lower_ops(self, ops: list[Op]) -> None:
        fused = fusion_plan(ops, self.layouts, self.use_count)
        self.fused_stores.update(fused)
        deferred = {o for plan in fused.values() for o in plan.ops + plan.loads}
        for op in ops:
            if op in deferred:
                continue  # computed with the store it feeds, a vector at a time
            self.b.loc = op.loc
            handler = HANDLERS.get(op.opcode)
            if handler is None:
                raise UnsupportedError(f"the back end cannot lower '{op.opcode}' yet", op.loc)
            handler(self, op)

    def build_for(self, op: Op, extra_inits: list[Value],
                  lower_body: Callable[[list[Op], list[Value]], list[Value]]) -> list[Value]:
        """The thread-level loop of tile-level `op`; the final values of the extra ones.

        It carries `extra_inits` first, then op's carried values, flattened to
        registers; `lower_body(ops, extra_args)` lowers the body's ops (all but
        the yield) and returns the next values of the extra ones.
        """
        lo, hi = self.vals[op.operands[0]], self.vals[op.operands[1]]
        inits = extra_inits + [r for v in op.operands[2:] for r in self.flat(v)]
        src_body = op.regions[0]
        body = Block()
        types = [v.type for v in extra_inits] + [t for v in op.results for t in self.lowered_types(v)]
        new = self.b.op("for", [lo, hi, *inits], types, dict(op.attrs), [body])
        outer = self.b
        self.b = self.builder_for(body, outer.block, outer.loc)
        self.vals[src_body.args[0]] = self.b.block_arg(body, src_body.args[0].type, src_body.args[0].name)
        extra_args = [self.b.block_arg(body, v.type) for v in extra_inits]
        for v in src_body.args[1:]:
            for t in self.lowered_types(v):
                self.b.block_arg(body, t, v.name)
        pos = 1 + len(extra_inits)
        for v in src_body.args[1:]:
            pos = self.unflat(v, body.args, pos)
        extra_next = lower_body(src_body.ops[:-1], extra_args)
        self.b.loc = src_body.ops[-1].loc
        self.b.op("yield", extra_next + [r for v in src_body.ops[-1].operands for r in self.flat(v)], [])
        self.b = outer
        pos = len(extra_inits)
        for v in op.results:
            pos = self.unflat(v, new.results, pos)
        return list(new.results[:len(extra_inits)])


# ------------------------------------------------------------------ plain helpers

def scalar_op(low: "Lowering", op: Op, operands: list[Value]) -> Value:
    """One element of element-wise `op`, on the registers of its operands' elements (a 16-bit float's in
    the f32 register that holds it)."""
    dtype = op.result.dtype
    if op.opcode == "cast" and (dtype.is_narrow or op.operands[0].dtype.is_narrow):
        return convert_register(low, operands[0], dtype)
    return low.op(op.opcode, operands, ScalarType(dtype.compute), **op.attrs)


def convert_register(low: "Lowering", x: Value, to: DType) -> Value:
    """Register `x` converted to a value of dtype `to`, in a register of its compute dtype.

    A narrow float is held in an f32 register: widening one to f32 is nothing,
    and a conversion to one rounds through the narrow format (what the
    language says a conversion does) back into f32.  To a 16-bit float it
    rounds once - from f32 (or bool), or from f64, into which an integer first
    converts (exactly, but for an i64 past 2^53; constants.convert_array); to
    an 8-bit float it goes through f32.
    """
    if to.is_narrow:
        if to.is_half and x.dtype.is_int:
            x = low.op("cast", [x], ScalarType(DType.F64))
        elif x.dtype is not DType.F32 and not (to.is_half and x.dtype is DType.F64):
            x = low.op("cast", [x], ScalarType(DType.F32))
        return low.op("cast", [low.op("cast", [x], ScalarType(to))], ScalarType(DType.F32))
    return x if to is x.dtype else low.op("cast", [x], ScalarType(to))


def write_tile(low: "Lowering", t: TileRegs, base: Value, start: int, ld: int, eb: int, dtype: DType) -> None:
    """Store a 2-D tile row-major into shared memory at byte `start`, rows `ld` elements apart."""
    owner = low.owner(t.layout)
    for group, pred, index, offset in _row_major_accesses(low, t.layout, start, ld, eb):
        low.st_shared(base, index, eb, [t.regs[r] for r in group], dtype, low.all_of([pred, owner]), offset=offset)


def read_tile(low: "Lowering", layout: Layout, base: Value, start: int, ld: int, eb: int, dtype: DType) -> list[Value]:
    """The registers of a 2-D tile in `layout` read from shared memory, row-major from byte `start`, rows
    `ld` elements apart (write_tile's inverse; every replica reads)."""
    regs: list[Value | None] = [None] * layout.nregs
    for group, pred, index, offset in _row_major_accesses(low, layout, start, ld, eb):
        for r, value in zip(group, low.ld_shared_at(low.smem_address(base, index, eb), dtype, len(group), pred,
                                                    offset)):
            regs[r] = value
    return regs


def _row_major_accesses(low: "Lowering", layout: Layout, start: int, ld: int, eb: int):
    """(register slots, their predicate, the thread's element index, byte offset) of each access of at
    most 16 bytes to a tile in `layout` lying row-major from byte `start`, rows `ld` elements apart."""
    c0, c1 = low.thread_coord(layout.terms[0]), low.thread_coord(layout.terms[1])
    thread_index = low.op("add", [low.op("mul", [c0, low.const(ld)], I32), c1], I32)
    width = layout.vector_width()
    while width * eb > 16:
        width //= 2
    out = []
    for group in access_groups(layout, width):
        i, j = layout.offsets[group[0]]
        out.append((group, low.slot_valid(layout, group[0]), thread_index, start + (i * ld + j) * eb))
    return out


def access_groups(layout: Layout | None, width: int) -> list[list[int]]:
    """The register slots in runs of `width`, one run per vector access (one slot for a scalar)."""
    nregs = layout.nregs if layout is not None else 1
    return [list(range(i, i + width)) for i in range(0, nregs, width)]


def row_major_strides(shape) -> list[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def align(n: int, a: int) -> int:
    return -(-n // a) * a


def smem_bytes(dtype: DType) -> int:
    """Bytes per element of `dtype` in shared memory (a bool takes a word)."""
    return 4 if dtype is DType.BOOL else dtype.nbytes
