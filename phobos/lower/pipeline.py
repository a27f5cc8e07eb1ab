# Software pipelining of a matrix product's K loop with cp.async (sm_80+).
#
# A loop qualifies (`pipeline_plan`) when the target has cp.async, its body
# writes no memory and has no nested control flow, and either
#
# * it is one `dot` on the CUDA cores whose operands are slices loaded in the
#   body for it alone (in the dot's dtype), plus pure arithmetic - the
#   operands are staged as dot.py's DotPlan lays them out and the product is
#   computed from the stage (`dot.finish_dot`); or
# * it has products on the tensor cores (mma.py) with operands loaded in the
#   body for them alone (in the instruction's operand dtype): those loads are
#   *staged*, each in a region of the stage laid out as mma.py reads it
#   (`mma.operand_space`), and the products read them from the stage
#   (`Lowering.staged`), wherever they are in the body - the rest of the body
#   (attention's softmax, say) is lowered as usual, with the scratch buffer
#   above the ring.
#
# Either way the operand tiles go global -> shared by cp.async into a ring of
# STAGES buffers.  Stage s of the ring holds the tiles of iteration i when
# i = s (mod STAGES).  Before the loop, iterations 0..STAGES-2 are requested
# (a loop of its own, one copy of the code); at iteration i each thread waits
# for its copies of iteration i, a barrier makes everyone's visible (and says
# everyone is done with iteration i-1's stage), iteration i+STAGES-1 is
# requested into that stage, and the body computes from stage i.  Each
# request is one cp.async group, empty when its iteration is past the end.
# STAGES shrinks (down to 2) until the ring fits the target's shared memory.
#
# Register staging: the operands of a tf32 product on wgmma (the loop's one
# product, swapped: mma_plan.py) must be rounded on their way from the ring
# to the tensor cores - A in place, B in the registers that are wgmma's
# fragments - and that pass reads the *next* iteration's stage while this
# one's group runs (`Lowering.while_wgmma`).  So iteration i waits for its
# copies of iteration i + 1 instead, and after the barrier the wgmma group of
# stage i is issued on B's fragments of iteration i; while it runs, each
# thread rounds the chunks of A it copied into stage i + 1 in place (mma.py's
# `round_in_place`; tf32x3: the low parts a part further)
# and fences them for the tensor cores, and reads B's fragments of iteration
# i + 1 from stage i + 1, carried to it (rounded there, by the product).  The
# group is waited for in its iteration (it reads B's fragments until then; a
# group kept in flight would need the fragments of two iterations in
# registers that alternate).  The copies run STAGES - 2 iterations ahead of
# that pass, so register staging needs three stages at least.
#
# TMA (`lower_specialized`, sm_90a, when the launcher can build tensor maps
# for the call): a GEMM's K loop on wgmma whose operands are slices of
# tensor parameters gets a producer warpgroup - 128 threads more, one of
# which copies each stage's slices by cp.async.bulk.tensor through tensor
# map parameters, full and empty mbarriers per stage in place of the
# barrier, setmaxnreg giving the producer's registers to the consumers.
# A tf32 product's loop (`_tma_swapped`) has A and B copied through tf32 maps,
# which round them, into the stage as a 16-bit GEMM's are (B N-major, as it
# lies); the consumers read B's fragments from the stage into registers one
# iteration ahead while the group runs on the ones they read before.
#
# A wgmma product's A operand loaded before the loop (`MmaPlan.once_a`:
# attention's Q) is *resident*: the ring has room for it past its stages, and
# before the first request its slice is copied there by cp.async, in the
# swizzled K-major layout, a group of its own (`Resident`; its load is done
# nowhere else: core.Lowering's `resident_loads`, and where the loop is not
# pipelined `load_residents` loads it into registers just before the loop);
# the first iteration's wait, fence and barrier make it visible to the tensor
# cores, and every iteration's product reads it there.
#
# The copies keep the edge contract as memory.py's loads do: 16-byte copies
# when the slice is inside the tensor and aligned, else one copy per element
# that zero-fills the elements outside (16- and 8-bit elements, too small for
# cp.async, are loaded and stored instead); TMA zero-fills a box's elements
# outside the tensor itself.  This module builds on memory.py
# (slice geometry, addresses, bounds tests), dot.py and mma.py (the stage
# layouts and the products); control.py's `for` handler asks it whether a
# loop is pipelined.
from __future__ import annotations

from dataclasses import dataclass, field

from ..configuration import Knobs
from ..middle.ir import Block, KernelParam, Op, Value, walk
from ..types import DType, ScalarType, TileType
from .core import (BOOL, I32, I64, SMEM_ALIGN, U32, Lowering, Programs, TileRegs, access_groups, align,
                   convert_register, read_tile)
from .dot import DotPlan, dot_plan, finish_dot
from .layout import Layout, copy_layout
from .memory import aligned, element_valid, in_bounds, row_addresses, slice_geometry, vector_ok
from .mma import (SWIZZLE_ATOM, SWIZZLE_BYTES, RegisterOperand, SharedOperand, TileSpace, aligned_base,
                  in_registers, operand_space, read_swizzled, round_in_place, swizzled_accesses)
from .mma_plan import MmaPlan
from .values import grid_position
from .schedule import MAX_THREADS, WARPGROUP, Schedule, StageBarrier, TileOrder, Warps, entry_registers

DEFAULT_STAGES = 3  # depth of the cp.async pipeline of a K loop (autotune parameter STAGES)


@dataclass
class Staged:
    """A load copied into each stage: from byte `start` of the stage, laid out as `space` says."""

    load: Op
    start: int
    space: TileSpace
    rounded: bool = False  # a tf32 operand of a swapped product, rounded by register staging
    kept: bool = False  # read from the stage into registers, which the product reads (a swapped product's B)
    transpose: Op | None = None  # the product's operand is trans(the slice): it reads the stage so

    @property
    def operand(self) -> Value:
        """The value the product reads: the slice, or its transpose."""
        return self.transpose.result if self.transpose is not None else self.load.result


@dataclass(frozen=True)
class Resident:
    """A wgmma product's A operand loaded before the loop (attention's Q: `MmaPlan.once_a`), copied into
    shared memory once, before the loop's first request, past the ring's stages: from byte `start` past them,
    laid out as `space` says (K-major, 128-byte swizzled)."""

    value: Value
    start: int
    space: TileSpace


@dataclass
class PipelinePlan:
    staged: list[Staged]
    index_ops: list[Op]  # the body's ops that compute the staged loads' indices
    stage_bytes: int
    cuda_dot: tuple[Op, DotPlan] | None  # the product on the CUDA cores computed from the stage
    in_flight: Op | None = None  # a wgmma product whose group stays in flight into the next iteration
    tma_boxes: list | None = None  # a producer warpgroup copies the stages by TMA, each staged slice so
    # (TmaBox, in the order of `staged`; see the header)
    product: Op | None = None  # the loop's one tensor-core product, when it has one
    resident: list[Resident] = field(default_factory=list)  # A operands stored once, past the stages

    @property
    def resident_bytes(self) -> int:
        last = self.resident[-1] if self.resident else None
        return align(last.start + last.space.nbytes, SWIZZLE_ATOM) if last else 0

    @property
    def alignment(self) -> int:
        return max(st.space.alignment for st in [*self.staged, *self.resident])

    @property
    def specialized(self) -> bool:
        return self.tma_boxes is not None

    @property
    def through_registers(self) -> bool:
        return any(st.rounded for st in self.staged)

    @property
    def kept(self) -> list[Staged]:
        return [st for st in self.staged if st.kept]


def pipeline_plan(low: Lowering, op: Op) -> PipelinePlan | None:
    """How the loop `op` is pipelined, or None when it is not (see the header)."""
    if not low.cp_async:
        return None
    body = op.regions[0].ops[:-1]
    if any(o.regions or o.opcode in ("store", "atomic_add") for o in body):
        return None
    dots = [o for o in body if o.opcode == "dot"]
    tensor_core = [d for d in dots if isinstance(low.plans.get(d), MmaPlan)]
    if tensor_core:
        staged = _staged_operands(low, body, tensor_core)
        rounded = [st for st in staged if st.rounded]
        if rounded and (len(tensor_core) != 1 or len(rounded) != len(staged)):
            return None  # register staging serves one product alone
        cuda_dot = None
    else:
        if len(dots) != 1 or low.plans.get(dots[0]) is not None:  # a tf32 kind computed in f32: in registers
            return None
        dot = dots[0]
        loads = [v.owner for v in dot.operands[:2]]
        if any(not _loaded_for(low, body, v) for v in dot.operands[:2]) or loads[0] is loads[1]:
            return None
        if any(ld.operands[0].dtype != dot.result.dtype for ld in loads):
            return None
        if any(o not in loads and o is not dot and not o.pure for o in body):
            return None
        plan = dot_plan(loads[0].result.type.shape, loads[1].result.type.shape[1], dot.result.dtype, low.threads)
        (m, k), n = loads[0].result.type.shape, loads[1].result.type.shape[1]
        staged = [Staged(loads[0], 0, TileSpace(m, k, plan.eb, plan.lda * plan.eb)),
                  Staged(loads[1], plan.a_bytes, TileSpace(k, n, plan.eb, plan.ldb * plan.eb))]
        cuda_dot = (dot, plan)
    if not staged:
        return None
    producers = {r: o for o in body for r in o.results}
    needed, stack = [], [v for st in staged for v in st.load.operands[1:]]
    while stack:
        v = stack.pop()
        o = producers.get(v)
        if o is not None and o not in needed:
            if not o.pure:
                return None
            needed.append(o)
            stack += o.operands
    index_ops = [o for o in body if o in needed]
    if cuda_dot:
        stage_bytes = cuda_dot[1].stage_bytes
    else:
        stage_bytes = 0
    plan = PipelinePlan(staged, index_ops, stage_bytes, cuda_dot, _accumulating_wgmma(low, op, tensor_core),
                        product=tensor_core[0] if len(tensor_core) == 1 else None,
                        resident=_resident_operands(low, body, tensor_core) if tensor_core else [])
    if not cuda_dot:
        plan.stage_bytes = _stage_bytes(plan)
    plan.tma_boxes = _tma_boxes(low, op, plan)
    swapped = _tma_swapped(low, op, plan)
    return swapped if swapped is not None and swapped.tma_boxes is not None else plan


def _stage_bytes(plan: PipelinePlan) -> int:
    last = plan.staged[-1]
    return align(last.start + last.space.nbytes, plan.alignment)


def _tma_swapped(low: Lowering, op: Op, plan: PipelinePlan) -> PipelinePlan | None:
    """A tf32 product's K loop (swapped, B^T's fragments in registers) as a producer warpgroup runs it:
    A and B copied by TMA through tf32 tensor maps, which round them to nearest even on the way, into
    the stage - A K-major, B N-major as it lies, both 128-byte swizzled - and B's fragments read from
    there, rounded already.  None where the loop is no such loop, or TMA is off."""
    if not low.tma or plan.product is None or low.plans[plan.product].kind.name != "tf32" \
            or len(plan.staged) != 2 or not plan.staged[1].kept:
        return None
    a, b = plan.staged
    k, n = b.load.result.type.shape
    space = TileSpace(k, n, b.space.eb, 0)
    start = align(a.start + a.space.nbytes, space.alignment)
    out = PipelinePlan([Staged(a.load, a.start, a.space), Staged(b.load, start, space, kept=True)],
                       plan.index_ops, 0, None, product=plan.product)
    out.stage_bytes = _stage_bytes(out)
    out.tma_boxes = _tma_boxes(low, op, out)
    return out


def _tma_boxes(low: Lowering, op: Op, plan: PipelinePlan) -> list | None:
    """The TMA boxes of the staged slices where a producer warpgroup can copy this loop's stages by TMA,
    else None: a GEMM's K loop on wgmma (one product whose group stays in flight, or one waited for in its
    iteration - an 8-bit product promoted into its accumulator -, or a swapped one that reads B's
    fragments from the stage; operands straight from the stage, each a slice TMA can copy: `tma_box`), at
    the kernel's top level, with nothing but
    register arithmetic before it - the producer's threads run that code too, outside every layout, so
    it may not touch memory (not even a load: their elements lie past the slice) - and room in the CTA
    for the producer's threads (not with WARPS=32, which copies by cp.async)."""
    body = low.src.body.ops
    product = low.plans.get(plan.product)
    if product is None or product.instruction != "wgmma" or plan.through_registers or plan.resident \
            or low.barrier_threads is not None or op not in body or low.threads + PRODUCER_THREADS > MAX_THREADS:
        return None
    boxes = [tma_box(low, st.load, st.space) for st in plan.staged]
    before = Block(ops=body[:body.index(op)])
    if None in boxes or low.smem_bytes or not all(o.pure for o in walk(before)):
        return None
    return boxes


def _accumulating_wgmma(low: Lowering, op: Op, dots: list[Op]) -> Op | None:
    """The loop's one product, if it is a wgmma that accumulates into a carried value nothing else in the
    loop reads (a GEMM's K loop): its group may then stay in flight while the next iteration starts - unless
    it reads fragments from registers (a swapped product), or is tf32x3 or promotes (which add the product to
    acc after its wait)."""
    if len(dots) != 1 or low.plans[dots[0]].instruction != "wgmma" or len(dots[0].operands) != 3 \
            or low.plans[dots[0]].swapped or low.plans[dots[0]].kind.products != 1 or dots[0].attrs.get("promote"):
        return None
    dot, body = dots[0], op.regions[0]
    acc = dot.operands[2]
    position = next((i for i, arg in enumerate(body.args[1:]) if arg is acc), None)
    if position is None or low.use_count[acc] != 1 or body.ops[-1].operands[position] is not dot.result \
            or low.use_count[dot.result] != 1:
        return None
    return dot


def _loaded_for(low: Lowering, body: list[Op], v: Value) -> bool:
    """Whether v is a slice loaded in the loop body for this one use."""
    ld = v.owner
    return isinstance(ld, Op) and ld.opcode == "load" and ld in body and low.use_count[ld.result] == 1


def _slice_of(low: Lowering, body: list[Op], v: Value) -> tuple[Op, Op | None] | None:
    """(the load, the transpose or None) where v is a slice loaded in the loop body for this one use, or
    the 2-D transpose of one (`trans(x[...])`) made there for this one use."""
    if _loaded_for(low, body, v):
        return v.owner, None
    t = v.owner
    if isinstance(t, Op) and t.opcode == "permute" and tuple(t.attrs["order"]) == (1, 0) and t in body \
            and low.use_count[v] == 1 and _loaded_for(low, body, t.operands[0]):
        return t.operands[0].owner, t
    return None


def _staged_operands(low: Lowering, body: list[Op], dots: list[Op]) -> list[Staged]:
    """The operands of tensor-core products that are loaded for them alone, one after another in a stage."""
    staged, start = [], 0
    for dot in dots:
        plan = low.plans[dot]
        for which, v, transposed in zip("ab", dot.operands[:2], plan.transposed):
            found = _slice_of(low, body, v)
            if found is None or found[0].operands[0].dtype != plan.kind.operand or (found[1] is not None) != transposed:
                continue
            load, transpose = found
            space = operand_space(plan, which, *load.result.type.shape)  # as the slice lies
            start = align(start, space.alignment)
            staged.append(Staged(load, start, space, plan.swapped, in_registers(plan, which), transpose))
            start += space.nbytes
    return staged


def _resident_operands(low: Lowering, body: list[Op], dots: list[Op]) -> list[Resident]:
    """The A operands of the loop's wgmma products that are loaded once before it (`MmaPlan.once_a`), one
    after another."""
    out, start = [], 0
    for dot in dots:
        plan, a = low.plans[dot], dot.operands[0]
        if plan.once_a and a.owner not in body:
            space = operand_space(plan, "a", plan.m, plan.k)
            out.append(Resident(a, start, space))
            start = align(start + space.nbytes, space.alignment)
    return out


@dataclass
class Ring:
    """The stages of a pipelined loop in shared memory."""

    stages: int
    base: Value  # u32 shared address of stage 0
    end: int  # the scratch buffer's offset past the ring (and the room to align it)
    stage_bytes: int

    def stage(self, low: Lowering, index: Value) -> Value:
        """The shared address of stage `index` (an i32)."""
        offset = low.op("mul", [low.op("cast", [index], U32), low.const(self.stage_bytes, DType.U32)], U32)
        return low.op("add", [self.base, offset], U32)


def plan_schedule(low: Lowering, op: Op, plan: PipelinePlan, persistent: bool = False,
                  epilogue_bytes: int = 0) -> Schedule:
    """The schedule the loop `op`, pipelined as `plan` says, runs by (schedule.py): STAGES stages (fewer,
    down to 2 - 3 for register staging or a producer warpgroup - where they and `epilogue_bytes` of an
    epilogue's TMA store buffer do not fit the target's shared memory); every thread copying by cp.async,
    or a producer warpgroup copying by TMA beside the kernel's threads, which consume; `persistent` CTAs
    looping over the output tiles (`persistent_loop`)."""
    fewest = 3 if plan.through_registers or plan.specialized else 2
    stages = max(low.src.attrs.get("knobs", Knobs()).stages or DEFAULT_STAGES, fewest)
    teams = 1 if low.team_threads is None else 2
    epilogue_bytes *= teams  # a buffer a team
    while stages > fewest and not _fits(low, plan, stages, epilogue_bytes):
        stages -= 1
    order = TileOrder(low.group_m, persistent)
    if not plan.specialized:
        # a wgmma group in flight still reads the stage before: the copies run one iteration less ahead
        in_flight = 1 if plan.in_flight is not None and stages >= 3 else 0
        return Schedule("cp.async", stages, plan.stage_bytes, (Warps("all", low.threads, copiers=low.threads),),
                        ahead=stages - 1 - in_flight, in_flight=in_flight, fragments_ahead=plan.through_registers,
                        order=order, resident_bytes=plan.resident_bytes)
    consumers = low.threads  # (the threads of a team)
    entry = entry_registers(consumers * teams + PRODUCER_THREADS)
    given = (entry - PRODUCER_REGISTERS) * PRODUCER_THREADS // (consumers * teams) // 8 * 8
    moved = entry < 232 and given > 0  # setmaxnreg counts are multiples of 8 up to 256
    copied = sum(box.bytes * box.count for box in plan.tma_boxes)
    multicast = _multicast(low, plan) if persistent else ""
    if multicast:
        order = TileOrder(low.group_m, persistent, (2, 1) if multicast == "B" else (1, 2))
    return Schedule(
        "tma", stages, plan.stage_bytes,
        (Warps("consumers", consumers * teams, registers=entry + given if moved else None),
         Warps("producer", PRODUCER_THREADS, copiers=1, registers=PRODUCER_REGISTERS if moved else None)),
        (StageBarrier("full", 1, "producer", "consumers", copied),
         StageBarrier("empty", consumers // WARPGROUP * order.cluster_size, "consumers", "producer")),
        ahead=stages, in_flight=1 if plan.in_flight is not None else 0, fragments_ahead=bool(plan.kept),
        order=order, entry_registers=entry, multicast=multicast, epilogue="tma" if epilogue_bytes else "registers",
        teams=teams)


def _fits(low: Lowering, plan: PipelinePlan, stages: int | Schedule, epilogue_bytes: int) -> bool:
    """Whether `stages` stages (a schedule's) and an epilogue buffer of `epilogue_bytes`, aligned past the
    mbarriers, fit the target's shared memory, with room to align the ring at run time."""
    stages = stages if isinstance(stages, int) else stages.stages
    extra = epilogue_bytes + SWIZZLE_ATOM + 16 * stages if epilogue_bytes else 0
    return stages * plan.stage_bytes + plan.resident_bytes + plan.alignment - SMEM_ALIGN + extra <= low.smem_limit


def _multicast(low: Lowering, plan: PipelinePlan) -> str:
    """The operand ('A' or 'B') the CTAs of a cluster of two share, as CLUSTER_M=2 (they take tiles of C
    one above the other: the same columns of B) or CLUSTER_N=2 asks, where its copy splits in two (each
    CTA copies half the boxes, or half the rows of its one box, to both); '' for no cluster."""
    knobs = low.src.attrs.get("knobs", Knobs())
    want = {(2, 1): "B", (1, 2): "A"}.get((knobs.cluster_m or 1, knobs.cluster_n or 1), "")
    if not want or plan.in_flight is None:  # a 16-bit product accumulating in place (not tf32's fragments)
        return ""
    st, box = _operand(plan, want)
    return want if box.count % 2 == 0 or box.rows % 16 == 0 else ""


def _operand(plan: PipelinePlan, which: str) -> tuple[Staged, TmaBox]:
    """The staged slice of the product's operand `which` ('A' or 'B') and its TMA boxes."""
    value = plan.product.operands["AB".index(which)]
    return next((st, box) for st, box in zip(plan.staged, plan.tma_boxes) if st.operand is value)


def _ring(low: Lowering, plan: PipelinePlan, schedule: Schedule) -> Ring:
    """The schedule's stages in shared memory, after a barrier where one is needed."""
    if any(load in low.global_barriers for load in [*(st.load for st in plan.staged),
                                                    *(r.value.owner for r in plan.resident)]) or low.smem_bytes:
        low.barrier()  # the body writes no memory, so what the loads must wait for came before the loop;
        # and no thread may still read shared memory the ring overwrites
    pad = plan.alignment - SMEM_ALIGN  # room to align the ring at run time
    nbytes = schedule.stages * plan.stage_bytes + plan.resident_bytes
    end = low.scratch_start + nbytes + pad
    return Ring(schedule.stages, aligned_base(low, nbytes, plan.alignment), end, plan.stage_bytes)


def _at_iteration(low: Lowering, op: Op, plan: PipelinePlan, kt: Value, emit):
    """emit(enabled) with the staged loads' indices computed for the iteration whose loop variable is `kt`
    (`enabled`: whether that iteration runs); what emit returns."""
    kt_arg = op.regions[0].args[0]
    saved = {r: low.vals.get(r) for o in plan.index_ops for r in o.results}
    saved[kt_arg] = low.vals.get(kt_arg)
    low.vals[kt_arg] = kt
    low.lower_ops(plan.index_ops)
    out = emit(low.op("cmp", [kt, low.vals[op.operands[1]]], BOOL, pred="lt" if op.attrs["step"] > 0 else "gt"))
    low.vals.update(saved)
    return out


def _where(op: Op) -> str:
    """file:line:col of a tile-level op, for notes and dumps ('' where it has no location)."""
    return f"{op.loc.file}:{op.loc.line}:{op.loc.col}" if op.loc is not None else ""


def _split(values: list[Value], sizes: list[int]) -> list[list[Value]]:
    """`values` cut into consecutive lists of `sizes` (the registers of each kept tile)."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [values[start:start + n] for start, n in zip(starts, sizes)]


def _lower_body(low: Lowering, ops: list[Op], plan: PipelinePlan, ring: Ring, stage: Value,
                kept: list[list[Value]] = ()) -> None:
    """The loop body's ops but the staged loads and their indices, the staged operands read from `stage`
    (those kept in registers from `kept`, in order)."""
    registers = iter(kept)
    for st in plan.staged:
        low.staged[st.operand] = RegisterOperand(next(registers), rounded=plan.specialized) if st.kept \
            else SharedOperand(stage, st.start, st.space, st.transpose is not None)  # TMA's tf32 maps round
    for r in plan.resident:
        low.staged[r.value] = SharedOperand(ring.base, ring.stages * ring.stage_bytes + r.start, r.space)
    dot = plan.cuda_dot[0] if plan.cuda_dot else None
    staging = {st.load for st in plan.staged} | {st.transpose for st in plan.staged} | {dot}
    skipped = staging | _unread(ops, staging, plan.index_ops)
    saved_start, low.scratch_start = low.scratch_start, align(ring.end, SMEM_ALIGN)
    low.lower_ops([o for o in ops if o not in skipped])
    low.scratch_start = saved_start
    if plan.cuda_dot:
        finish_dot(low, dot, plan.cuda_dot[1], stage)
    for st in plan.staged:
        del low.staged[st.operand]
    for r in plan.resident:
        del low.staged[r.value]


def _unread(ops: list[Op], staging: set, index_ops: list[Op]) -> set:
    """The staged loads' index arithmetic that nothing else of the body reads, directly or through other
    index ops it keeps (what the body reads is lowered with it)."""
    kept = {v for o in ops if o not in staging and o not in index_ops for v in o.operands}
    unread = set(index_ops)
    changed = True
    while changed:
        changed = False
        for o in list(unread):
            if kept & set(o.results):
                unread.discard(o)
                kept.update(o.operands)
                changed = True
    return unread


def persistent_loop(low: Lowering) -> tuple[Op, PipelinePlan] | None:
    """The K loop a kernel with persistent CTAs is built around, and its plan; or None.

    A kernel gets persistent CTAs (unless PERSISTENT=0) when its one loop with products, at the top level,
    is copied by a producer warpgroup (TMA): the kernel is then that loop between register arithmetic
    before it (`_tma_boxes`) and an epilogue after it, which the consumers run per output tile while the
    producer copies the next tile's stages."""
    if low.src.attrs.get("knobs", Knobs()).persistent == 0 or not low.tma:
        return None
    body = low.src.body.ops
    loops = [o for o in body if o.opcode == "for" and any(d.opcode == "dot" for d in walk(o.regions[0]))]
    if len(loops) != 1 or any(o.opcode == "dot" for o in walk(Block(ops=[o for o in body if o is not loops[0]]))):
        return None
    plan = pipeline_plan(low, loops[0])
    return (loops[0], plan) if plan is not None and plan.specialized else None


@dataclass(frozen=True)
class TmaStore:
    """An epilogue's store of a tile to a slice of a rank-2 tensor, by TMA: the consumers write the tile's
    `box.count` boxes into a buffer above the ring - `space`, TMA's 128-byte-swizzled boxes - and one of
    them copies each box out with a bulk store, which goes on while the next tile's loop runs.  Where each
    thread holds whole boxes' elements (`boxes_kept_by_threads`) the buffer has two boxes, written in turn
    box by box while the store of the box before reads the other - room for more stages in the ring;
    else it has the whole tile, written at once."""

    store: Op
    space: TileSpace
    box: TmaBox

    @property
    def buffers(self) -> int:
        return self.space.cols // self.box.cols

    @property
    def rounds(self) -> list[list[int]]:
        """The boxes written between two barriers, in order."""
        if self.buffers == self.box.count:
            return [list(range(self.box.count))]
        return [[j] for j in range(self.box.count)]


def boxes_kept_by_threads(layout: Layout, per_box: int) -> bool:
    """Whether every element a register of `layout` holds lies in one box of `per_box` columns whichever
    thread holds it: the box of its register's column offset."""
    span = layout.thread_span(1)
    return all(off[1] // per_box == (off[1] + span) // per_box for off in layout.offsets)


def _tma_store(low: Lowering, after: list[Op]) -> TmaStore | None:
    """How the epilogue `after` stores by TMA (register arithmetic, then a store of a slice of both dims of a
    rank-2 tensor parameter, in whole 128-byte boxes of at most 256 rows); None where it cannot."""
    if not after or after[-1].opcode != "store" or not all(o.pure and not o.regions for o in after[:-1]):
        return None
    store = after[-1]
    if not _tensor_slice(low, store) or not isinstance(store.operands[-1].type, TileType):
        return None
    eb = store.operands[0].dtype.nbytes
    rows, cols = store.attrs["sizes"]
    per_box = SWIZZLE_BYTES // eb
    if rows > 256 or cols % per_box or rows % 8:
        return None
    boxes = cols // per_box
    layout = low.layouts.get(store.operands[-1])
    buffers = min(boxes, 2) if layout is not None and boxes_kept_by_threads(layout, per_box) else boxes
    return TmaStore(store, TileSpace(rows, per_box * buffers, eb, 0), TmaBox(rows, per_box, boxes))


def lower_persistent(low: Lowering, op: Op, plan: PipelinePlan) -> None:
    """The kernel's body with persistent CTAs around its K loop `op` (see `persistent_loop`).

    Before: the kernel's body not lowered yet.  After: it is, as `lower_specialized` lowers it per output
    tile; the kernel has a `programs` parameter per grid axis (the virtual grid, in `low.programs`)."""
    params = low.out.attrs["params"]

    def count(axis: int) -> Value:
        name = f"programs_{'xyz'[axis]}"
        params.append(KernelParam(name, "programs", DType.I32, dims=(axis,)))
        index = len(params) - 1
        return low.entry_value(("programs", axis), lambda b: b.value("param", [], I32, index=index, name=name))
    low.programs = Programs((count(0), count(1), count(2)))
    body = low.src.body.ops
    at = body.index(op)
    if _teams(low, op, plan, body[:at]) > 1:  # before any thread index is computed: `tid` counts in a team
        low.team_threads = low.threads
    lower_pipelined(low, op, plan, body[:at], body[at + 1:])


def _teams(low: Lowering, op: Op, plan: PipelinePlan, before: list[Op]) -> int:
    """The consumer teams taking the persistent CTAs' tiles in turn: 2 where PINGPONG=1 asks and the loop
    allows it - its bounds and step the same for every tile (the ops `before` it compute them from no
    program id), so that a team finds the stages of its tiles from their index in the CTA's sequence, and
    no fragments read a stage ahead -, else 1 (with a note where PINGPONG=1 asked)."""
    if low.src.attrs.get("knobs", Knobs()).pingpong != 1:
        return 1
    tiled = set()  # the results of `before` that vary from tile to tile
    for o in before:
        if o.opcode in ("program_id", "num_programs") or any(v in tiled for v in o.operands):
            tiled.update(o.results)
    why = ("its loop's bounds vary with the tile" if any(v in tiled for v in op.operands[:2]) else
           "its loop counts down" if op.attrs["step"] <= 0 else
           "its operands' fragments are read a stage ahead" if plan.kept else
           f"two teams of {low.threads} threads and the producer exceed {MAX_THREADS}"
           if 2 * low.threads + PRODUCER_THREADS > MAX_THREADS else "")
    if why:
        low.notes.append(f"{_where(op) or 'a K loop'}: PINGPONG=1 ignored: {why}")
        return 1
    return 2


def lower_pipelined(low: Lowering, op: Op, plan: PipelinePlan, before: list[Op] | None = None,
                    after: list[Op] = ()) -> None:
    """The K loop with its operand tiles copied global -> shared by cp.async, STAGES deep, and register
    staging's pass from the next stage while the products run (see the header); or by TMA from a producer
    warpgroup (`lower_specialized`), with persistent CTAs where `before` (the ops before the loop) and
    `after` (the epilogue) are given (`lower_persistent`).

    Before: `plan` says what is staged where.  After: the loop reads no staged load from global memory
    but through the ring, and every cp.async group is waited for when it ends."""
    persistent = before is not None
    epilogue = _tma_store(low, after) if persistent else None
    schedule = plan_schedule(low, op, plan, persistent, epilogue.space.nbytes if epilogue else 0)
    if epilogue is not None and not _fits(low, plan, schedule, epilogue.space.nbytes * schedule.teams):
        epilogue, schedule = None, plan_schedule(low, op, plan, persistent)  # stores from registers instead
    problems = schedule.problems()
    assert not problems, f"unsound schedule: {problems}"
    low.schedules.append(schedule.text(_where(op)))
    ring = _ring(low, plan, schedule)
    if schedule.specialized:
        return lower_specialized(low, op, plan, ring, schedule, before or [], after, epilogue)
    for r in plan.resident:  # the oldest group, complete at the first iteration's wait
        async_copy(low, r.value.owner, ring.base, ring.stages * ring.stage_bytes + r.start, r.space,
                   low.const(True, DType.BOOL))
    if plan.resident:
        low.b.op("cp_async_commit", [], [])
    stages, in_flight, ahead_by = ring.stages, schedule.in_flight, schedule.ahead
    # register staging reads the next iteration's stage while this one's group runs: it must have arrived
    early = 1 if schedule.fragments_ahead else 0
    swizzled = any(x.space.swizzled for x in [*plan.staged, *plan.resident]) and not early
    lo = low.vals[op.operands[0]]
    step = op.attrs["step"]
    kt_arg = op.regions[0].args[0]
    kept = plan.kept

    def request(kt: Value, index: Value) -> None:
        """cp.async the operand tiles of the iteration with loop variable `kt` into stage `index`."""
        def copy(enabled: Value) -> None:
            stage = ring.stage(low, index)
            for st in plan.staged:
                async_copy(low, st.load, stage, st.start, st.space, enabled)
            low.b.op("cp_async_commit", [], [])
        _at_iteration(low, op, plan, kt, copy)

    def from_stage(index: Value) -> list[Value]:
        """Register staging: round the tiles of stage `index` wgmma reads in place (each thread the
        chunks it copied; tf32x3: the low parts beside them) and fence them for the tensor cores; the
        registers of the kept tiles, read from the stage."""
        stage = ring.stage(low, index)
        for st in plan.staged:
            if not st.kept:
                round_in_place(low, low.layouts[st.load.result], stage, st.start, st.space,
                               low.plans[plan.product].kind)
        low.b.op("fence_proxy_async", [], [])
        return [r for st in kept for r in read_tile(low, low.layouts[st.load.result], stage, st.start,
                                                      st.space.stride // st.space.eb, st.space.eb, st.load.result.dtype)]

    # the prologue: requests for iterations 0 .. ahead_by - 1, as a loop (one copy of the code)
    prologue = Block()
    low.b.op("for", [low.const(0), low.const(ahead_by)], [], {"step": 1}, [prologue])
    outer = low.b
    low.b = low.builder_for(prologue, outer.block, outer.loc)
    s_arg = low.b.block_arg(prologue, I32, "stage")
    s_kt = low.op("cast", [s_arg], lo.type) if lo.dtype is not DType.I32 else s_arg
    request(low.op("add", [lo, low.op("mul", [s_kt, low.const(step, lo.dtype)], lo.type)], lo.type), s_arg)
    low.b.op("yield", [], [])
    low.b = outer
    carried = []
    if early:
        low.b.op("cp_async_wait", [], [], {"pending": ahead_by - 1})
        low.barrier()
        carried = from_stage(low.const(0))
    sizes = [low.layouts[st.load.result].nregs for st in kept]

    def body(ops: list[Op], extra: list[Value]) -> list[Value]:
        read, now = extra[0], extra[1:]
        low.b.op("cp_async_wait", [], [], {"pending": ahead_by - 1 - early})
        if swizzled:
            low.b.op("fence_proxy_async", [], [])  # the copies, seen by wgmma's reads
        low.barrier()
        kt = low.vals[kt_arg]
        ahead = low.op("add", [kt, low.const(ahead_by * step, kt.dtype)], kt.type)
        back = stages - ahead_by  # the stage refilled is this many behind the one read, round the ring
        if back == 1:
            wraps, over = low.op("cmp", [read, low.const(0)], BOOL, pred="eq"), low.const(stages - 1)
        else:
            wraps = low.op("cmp", [read, low.const(back)], BOOL, pred="lt")
            over = low.op("add", [read, low.const(ahead_by)], I32)
        write = low.op("select", [wraps, over, low.op("sub", [read, low.const(back)], I32)], I32)
        request(ahead, write)
        if in_flight:
            low.wgmma_in_flight[plan.in_flight] = in_flight
        fetched: list[Value] = []
        if early:
            following = next_stage(read)
            low.while_wgmma = lambda: fetched.extend(from_stage(following))
        _lower_body(low, ops, plan, ring, ring.stage(low, read), _split(now, sizes))
        assert low.while_wgmma is None, "the loop's wgmma product read the next stage"
        return [following if early else next_stage(read), *fetched]

    def next_stage(read: Value) -> Value:
        at_end = low.op("cmp", [read, low.const(stages - 1)], BOOL, pred="eq")
        return low.op("select", [at_end, low.const(0), low.op("add", [read, low.const(1)], I32)], I32)

    low.build_for(op, [low.const(0), *carried], body)
    if in_flight:
        low.b.op("wgmma_wait", [], [], {"pending": 0})
    low.b.op("cp_async_wait", [], [], {"pending": 0})
    low.barrier()


def load_residents(low: Lowering, loop: Op) -> None:
    """The resident A operands of a loop that is not pipelined (`Lowering.resident_loads`), loaded into
    registers just before it."""
    for op in loop.regions[0].ops:
        if op.opcode == "dot" and (load := op.operands[0].owner) in low.resident_loads:
            low.resident_loads.discard(load)
            low.lower_ops([load])


PRODUCER_THREADS = WARPGROUP
PRODUCER_REGISTERS = 40  # what the producer keeps (setmaxnreg): one thread issues the copies


@dataclass(frozen=True)
class TmaBox:
    """How one staged slice is copied by TMA: `count` boxes of `rows` x `cols` elements, side by side along
    the slice's columns, box j `bytes` * j into its region of the stage (the swizzled layout's boxes)."""

    rows: int
    cols: int
    count: int

    @property
    def bytes(self) -> int:
        return self.rows * SWIZZLE_BYTES


def tma_box(low: Lowering, load: Op, space: TileSpace) -> TmaBox | None:
    """The TMA boxes of a load's slice laid out as `space` says, or None where TMA cannot copy it: a slice
    of both dims of a rank-2 tensor parameter, with i32 starts (32-bit indices), into a swizzled
    single-part region whose rows lie in order (TMA cannot place them in fragment order)."""
    if not space.swizzled or space.parts != 1 or space.fragment_rows or not _tensor_slice(low, load):
        return None
    cols = SWIZZLE_BYTES // space.eb
    if space.rows > 256 or space.cols % cols:
        return None
    return TmaBox(space.rows, cols, space.cols // cols)


def _tensor_slice(low: Lowering, load: Op) -> bool:
    """Whether a producer warpgroup can copy `load` (TMA on): a slice of both dims of a rank-2 tensor
    parameter, with i32 starts (32-bit indices)."""
    tensor = load.operands[0]
    if not low.tma or low.index_type != I32 or tensor.owner is None \
            or getattr(tensor.owner, "opcode", None) != "param" or len(tensor.type.dims) != 2:
        return False
    return all(n is not None for n in load.attrs["sizes"]) and all(v.dtype is DType.I32 for v in load.operands[1:3])


def lower_specialized(low: Lowering, op: Op, plan: PipelinePlan, ring: Ring, schedule: Schedule,
                      before: list[Op] = (), after: list[Op] = (), epilogue: TmaStore | None = None) -> None:
    """The K loop with a producer warpgroup: PRODUCER_THREADS more threads, one of which copies the
    stages by TMA while the kernel's own threads, the consumers, multiply them.

    Stage s has two mbarriers: full[s] (the producer's thread arrives expecting the stage's bytes, and
    the TMA copies complete them) and empty[s] (a thread of each consumer warpgroup arrives when its
    products are done reading it).  The producer runs the loop as the kernel does: at iteration i it
    waits until the consumers emptied the stage (the parity of its use before: the first use passes),
    then copies iteration i into it, each staged slice as TmaBox says, through the tensor maps the
    launcher builds for the call (a `tensor_map` parameter per slice shape); then it exits.  The
    consumers wait for full[s], issue the product's group, wait for the group before it and release
    that one's stage.  A swapped product's B^T fragments (`plan.kept`) are read from the stage instead,
    one iteration ahead: before the loop the consumers wait for the first stage and read its fragments;
    at iteration i they issue the group on the fragments read before, and while it runs wait for
    iteration i + 1's stage (where there is one) and read its fragments, carried to it; then they wait
    for the group and release stage i.

    With persistent CTAs (`schedule.order.persistent`) both roles loop over the output tiles this CTA
    takes (`_tiles`): per tile they run `before` (the kernel's register arithmetic before the loop, with
    the tile's program ids) and the loop, the stage and its phase carried on from the tile before, and
    the consumers then release the last stage and run `after` (the epilogue) - while the producer
    already copies the next tile's stages.  An epilogue that stores by TMA (`epilogue`) writes the tile
    into a buffer and one consumer thread copies it out by bulk stores, which run on under the next
    tile's loop; the buffer is rewritten once they have read it.  Otherwise `before` ran once, for the
    CTA's own program, and the epilogue follows as the rest of the kernel.

    In a cluster of two (`schedule.multicast`) the CTAs take neighbouring tiles together and share one
    operand: each producer copies half of it into both CTAs' stages at once (TMA multicast; the bytes
    complete both CTAs' full[s]), so empty[s] waits for the consumers of both before its producer
    copies into the stage again: they release it in both CTAs (a remote arrive through `mapa`).  The
    CTAs first pass a cluster barrier (each one's mbarriers initialised before the other signals
    them); a CTA past the tiles (the virtual grid's padding to whole clusters) still copies its share
    but runs no epilogue; and before a producer exits it waits for every stage's last release
    (CUTLASS's producer tail), so that no CTA ends while the other may still signal its mbarriers.

    With consumer teams (`schedule.teams`, PINGPONG=1: `_teams`) the consumers are two teams of the kernel's
    threads that take the CTA's tiles in turn, so that one's epilogue runs under the other's products: each
    finds its tile's first stage and phase from the tile's index (`_ring_position`: every tile's loop has
    the same iterations, and the producer copies the tiles in order), and, since a parity tells only a
    phase from the one before, waits first until the other team's loop has waited for the stages of the
    tile before (order[team], on which every thread of the other team arrives after its loop where this
    team has a tile after it). Each team has its own named barrier, epilogue buffer and issuing thread,
    and `Lowering.tid` counts a thread within its team.

    Before the loop every thread ran the same register arithmetic (`_tma_boxes`); after it only the
    consumers run, so their barriers count them alone (`Lowering.barrier_threads`).  Where the CTA's
    registers are too few for the consumers' accumulators, setmaxnreg moves the producer's to them.
    Elements of a box outside the tensor are zeros (the edge contract), which TMA writes itself.

    Before: `plan.specialized`, the ring allocated, `schedule` its roles and barriers.  After: the kernel
    has PRODUCER_THREADS more threads, the producer's all exited, every copy landed and was read, and
    the mbarriers are invalidated (unless the CTAs are persistent: then nothing follows)."""
    producer, consumer = schedule.role("producer"), schedule.role("consumers")
    stages, consumers, total = ring.stages, consumer.threads, schedule.threads
    teams, team_threads = schedule.teams, consumer.threads // schedule.teams
    persistent, ranks = schedule.order.persistent, schedule.order.cluster_size
    low.out.attrs["threads"] = total
    if ranks > 1:
        low.out.attrs["cluster"] = ranks
    where = _where(op) or "a K loop"
    kept = plan.kept
    rounds = plan.product is not None and low.plans[plan.product].kind.rounding == "rn"  # tf32: maps typed tf32
    names = [low.src.attrs["params"][st.load.operands[0].owner.attrs["index"]].name for st in plan.staged]
    low.notes.append(f"{where}: the loop's {stages} stages are copied by TMA, issued by a producer warpgroup "
                     f"({PRODUCER_THREADS} threads more)"
                     + "".join(f"; {name} rounded to TF32 by the copy" for name in names if rounds)
                     + "".join(f"; {name}'s fragments read from the stage an iteration ahead"
                               for st, name in zip(plan.staged, names) if st.kept)
                     + ("; persistent CTAs, one per free slot of the GPU, each looping over output tiles"
                        if persistent else "")
                     + (f"; clusters of {ranks} CTAs along {'M' if schedule.order.cluster[0] > 1 else 'N'}, "
                        f"{schedule.multicast} multicast to both" if ranks > 1 else "")
                     + (f"; the consumers in {teams} teams of {team_threads} threads taking the tiles in turn "
                        "(ping-pong)" if teams > 1 else ""))
    # mbarriers, 8 bytes each: full[stages], then empty[stages], then with teams order[teams]
    count = 2 * stages + (teams if teams > 1 else 0)
    saved_start, low.scratch_start = low.scratch_start, align(ring.end, 8)
    barriers = low.smem(8 * count)
    low.scratch_start = saved_start
    ring = Ring(ring.stages, ring.base, align(ring.end, 8) + 8 * count, ring.stage_bytes)
    if persistent:  # the epilogue runs while the producer fills the ring: its scratch lies above it
        low.scratch_start = align(ring.end, SMEM_ALIGN)
    if epilogue is not None:  # the TMA store's buffer (a team's each), then any other scratch
        outgoing = aligned_base(low, epilogue.space.nbytes * teams, SWIZZLE_ATOM)
        low.scratch_start = align(low.smem_bytes, SMEM_ALIGN)
    shared = _operand(plan, schedule.multicast)[0] if ranks > 1 else None

    def part(st: Staged, box: TmaBox) -> TmaBox:
        """The boxes each CTA copies of a staged slice: all of them, or of the shared operand its share -
        every other box, or half the rows of its one box."""
        if st is not shared or box.count % ranks == 0:
            return box
        return TmaBox(box.rows // ranks, box.cols, box.count)
    maps = [(st, box, low.tensor_map(st.load.operands[0], part(st, box), rounds))
            for st, box in zip(plan.staged, plan.tma_boxes)]
    out_map = low.tensor_map(epilogue.store.operands[0], epilogue.box) if epilogue is not None else None
    step = op.attrs["step"]
    rank = low.op("cast", [low.op("cluster_rank", [], U32)], I32) if ranks > 1 else None

    def mbarrier(first: int, index: Value) -> Value:
        """The address of mbarrier `first` + index of the array above."""
        offset = low.op("mul", [low.op("cast", [index], U32), low.const(8, DType.U32)], U32)
        return low.op("add", [barriers, low.op("add", [offset, low.const(8 * first, DType.U32)], U32)], U32)

    def barrier(empty: bool, index: Value) -> Value:
        return mbarrier(stages * empty, index)

    def branch(cond: Value, then) -> None:
        outer, regions = low.b, [Block(), Block()]
        low.b.op("if", [cond], [], {}, regions)
        for region, fill in zip(regions, (then, lambda: None)):
            low.b = low.builder_for(region, outer.block, outer.loc)
            fill()
            low.b.op("yield", [], [])
        low.b = outer

    def ordering(team: Value) -> Value:
        """order[team]: every thread of the other team arrives once its loop has waited for its tile's last
        stage; `team` waits for that before its own tile's first."""
        return mbarrier(2 * stages, team)

    first = low.op("cmp", [low.cta_tid(), low.const(0)], BOOL, pred="eq")
    full, empty = schedule.barrier("full"), schedule.barrier("empty")
    for s in range(stages):  # full: the TMA bytes and the leader's arrival; empty: a thread a consumer warpgroup
        low.b.op("mbarrier_init", [barrier(False, low.const(s)), first], [], {"count": full.arrivals})
        low.b.op("mbarrier_init", [barrier(True, low.const(s)), first], [], {"count": empty.arrivals})
    for t in range(teams if teams > 1 else 0):  # order: every thread of a team
        low.b.op("mbarrier_init", [ordering(low.const(t)), first], [], {"count": team_threads})
    if ranks > 1:  # every thread of the cluster: the barriers of both CTAs are initialised
        low.b.op("cluster_barrier", [], [], {"init": True})
    else:
        low.barrier()  # every thread of the CTA: the barriers are initialised

    def release(s: Value, pred: Value | None) -> None:
        """A thread of each consumer warpgroup says its products are done with stage s: in this CTA, or in
        every CTA of the cluster (whose producers copied part of it)."""
        if ranks == 1:
            low.b.op("mbarrier_arrive", [barrier(True, s), *([pred] if pred is not None else [])], [])
            return
        for r in range(ranks):
            remote = low.op("mapa", [barrier(True, s), low.const(r, DType.U32)], U32)
            low.b.op("mbarrier_arrive_cluster", [remote, *([pred] if pred is not None else [])], [])

    def bounds() -> tuple[Value, Value]:
        """The loop's first and end values, as this tile's `before` computed them."""
        return low.vals[op.operands[0]], low.vals[op.operands[1]]

    def next_stage(s: Value, phase: Value) -> tuple[Value, Value]:
        wraps = low.op("cmp", [s, low.const(stages - 1)], BOOL, pred="eq")
        return (low.op("select", [wraps, low.const(0), low.op("add", [s, low.const(1)], I32)], I32),
                low.op("xor", [phase, low.op("cast", [wraps], I32)], I32))

    def runs(kt: Value) -> Value:
        return low.op("cmp", [kt, bounds()[1]], BOOL, pred="lt" if step > 0 else "gt")

    def copy(kt: Value, s: Value, phase: Value, leader: Value) -> None:
        """Thread `leader` copies iteration kt into stage s once the consumers emptied it, arriving on
        full[s] with the bytes to expect."""
        full = barrier(False, s)
        low.b.op("mbarrier_wait", [barrier(True, s), low.op("xor", [phase, low.const(1)], I32)], [])
        low.b.op("mbarrier_expect_tx", [full, leader], [], {"bytes": schedule.barrier("full").transaction})
        stage = ring.stage(low, s)

        def issue(enabled: Value) -> None:  # enabled: kt < hi, always within the loop
            for st, box, tensor_map in maps:
                starts, _, _ = slice_geometry(low, st.load, low.vals[st.load.operands[0]])
                if st is shared:  # this CTA's share, to every CTA of the cluster
                    _issue_share(low, st, box, tensor_map, stage, starts, full, leader, rank, ranks)
                    continue
                for j in range(box.count):
                    column = starts[1] if j == 0 else low.op("add", [starts[1], low.const(j * box.cols)], I32)
                    low.b.op("tma_load", [stage, tensor_map, column, starts[0], full, leader], [],
                             {"offset": st.start + j * box.bytes})
        _at_iteration(low, op, plan, kt, issue)

    def produce() -> None:  # its threads' digits count all the CTA's threads (`Lowering.digit`)
        low.threads = total
        if producer.registers is not None:
            low.b.op("setmaxnreg", [], [], {"count": producer.registers, "inc": False})
        index = low.op("sub", [low.cta_tid(), low.const(consumers)], I32)  # the thread's, in the producer
        leader = low.op("cmp", [index, low.const(0)], BOOL, pred="eq")

        def tile(s: Value, phase: Value, _place) -> list[Value]:
            lo, hi = bounds()
            body, outer = Block(), low.b
            loop = low.b.op("for", [lo, hi, s, phase], [I32, I32], {"step": step}, [body])
            low.b = low.builder_for(body, outer.block, outer.loc)
            kt = low.b.block_arg(body, lo.type, "kt")
            s, phase = low.b.block_arg(body, I32, "stage"), low.b.block_arg(body, I32, "phase")
            copy(kt, s, phase, leader)
            low.b.op("yield", [*next_stage(s, phase)], [])
            low.b = outer
            return list(loop.results)
        def run() -> None:
            s, phase = _tiles(low, schedule, before, tile, rank)
            for _ in range(stages if ranks > 1 else 0):  # the tail: every stage's last release has arrived
                low.b.op("mbarrier_wait", [barrier(True, s), low.op("xor", [phase, low.const(1)], I32)], [])
                s, phase = next_stage(s, phase)
        branch(low.op("cmp", [index, low.const(32)], BOOL, pred="lt"), run)
        low.b.op("exit", [], [])
        low.threads = team_threads
    branch(low.op("cmp", [low.cta_tid(), low.const(consumers)], BOOL, pred="ge"), produce)

    if consumer.registers is not None:
        low.b.op("setmaxnreg", [], [], {"count": consumer.registers, "inc": True})
        # ptxas honours setmaxnreg only where it can tell the registers a thread starts with (else "C7508:
        # 'setmaxnreg' ignored", and the consumers keep the entry cap): `.minnctapersm 1` beside `.maxntid`
        # tells it, and is what `entry_registers` assumes
        low.out.attrs["ctas_per_sm"] = 1
    low.barrier_threads = team_threads
    team = None
    if teams > 1:  # a team's barriers are its own: named barrier 1 + its index
        team = low.op("shr", [low.cta_tid(), low.const(team_threads.bit_length() - 1)], I32)
        low.barrier_id = low.op("add", [team, low.const(1)], I32)
    issuer = low.op("cmp", [low.tid(), low.const(0)], BOOL, pred="eq")  # (its team's first thread)
    if schedule.in_flight:
        low.wgmma_in_flight[plan.in_flight] = schedule.in_flight
    leader = low.op("cmp", [low.op("and", [low.tid(), low.const(PRODUCER_THREADS - 1)], I32), low.const(0)],
                    BOOL, pred="eq")

    def fragments(s: Value, phase: Value, kt: Value) -> list[Value]:
        """The kept tiles' registers (their bits: wgmma's b32 fragments), read from stage s once it is full,
        if iteration kt runs (else zeros: the stage may be filling for a later iteration)."""
        running = runs(kt)
        branch(running, lambda: low.b.op("mbarrier_wait", [barrier(False, s), phase], []))
        stage = ring.stage(low, s)
        return [r for st in kept for r in read_swizzled(low, low.layouts[st.load.result], stage, st.start,
                                                          st.space, DType.U32, running)]

    sizes = [low.layouts[st.load.result].nregs for st in kept]

    def consume(ops: list[Op], extra: list[Value]) -> list[Value]:
        s, phase, previous, now = extra[0], extra[1], extra[2], extra[3:]
        kt = low.vals[op.regions[0].args[0]]
        following = next_stage(s, phase) if kept else None
        fetched: list[Value] = []
        if kept:  # the group runs on the fragments read before while the next stage's are read
            ahead = low.op("add", [kt, low.const(step, kt.dtype)], kt.type)
            low.while_wgmma = lambda: fetched.extend(fragments(*following, ahead))
        else:
            low.b.op("mbarrier_wait", [barrier(False, s), phase], [])
        _lower_body(low, ops, plan, ring, ring.stage(low, s), _split(now, sizes))
        if plan.in_flight is not None:  # the group before this one is done with its stage
            not_first = low.op("cmp", [kt, bounds()[0]], BOOL, pred="ne")
            release(previous, low.all_of([not_first, leader]))
        else:  # B^T's fragments: this group is done with its stage
            release(s, leader)
        return [*(following or next_stage(s, phase)), s, *fetched]

    def tile(s: Value, phase: Value, place) -> list[Value]:
        lo, hi = bounds()
        if team is not None:  # the other team's loop has waited for the tile before's stages (so this one's
            # phases are the next of theirs: the parity tells them), and this team's stages follow them
            index, count = place
            s, phase = _ring_position(low, stages, index, lo, hi, step)
            before_it = low.op("sub", [index, low.const(1)], I32)
            branch(low.op("cmp", [index, low.const(0)], BOOL, pred="ne"), lambda: low.b.op(
                "mbarrier_wait", [ordering(team), low.op("and", [low.op("shr", [before_it, low.const(1)], I32),
                                                                  low.const(1)], I32)], []))
        carried = fragments(s, phase, lo) if kept else []
        s, phase, last = low.build_for(op, [s, phase, s, *carried], consume)[:3]
        if team is not None:  # the other team may wait for its next tile's stages
            other = low.op("sub", [low.const(1), team], I32)
            branch(low.op("cmp", [low.op("add", [index, low.const(1)], I32), count], BOOL, pred="lt"),
                   lambda: low.b.op("mbarrier_arrive", [ordering(other)], []))
        low.b.op("wgmma_wait", [], [], {"pending": 0})
        if persistent:  # the producer goes on to the next tile: release the stage the last group read
            if plan.in_flight is not None:
                ran = low.op("cmp", [lo, hi], BOOL, pred="lt" if step > 0 else "gt")
                release(last, low.all_of([ran, leader]))
            def finish() -> None:
                if epilogue is None:
                    low.lower_ops(after)
                    return
                low.lower_ops(after[:-1])
                buffer = outgoing if team is None else low.op("add", [outgoing, low.op(
                    "mul", [low.op("cast", [team], U32), low.const(epilogue.space.nbytes, DType.U32)], U32)], U32)
                _store_by_tma(low, epilogue, buffer, out_map, issuer)
            if ranks > 1:  # a tile of the padding to whole clusters copies its share, and stores nothing
                branch(_inside(low), finish)
            else:
                finish()
        return [s, phase]

    _tiles(low, schedule, before, tile, rank, team)
    if epilogue is not None:  # the last tile's bulk stores are done before the CTA (and its buffer) ends
        low.b.op("bulk_wait", [issuer], [], {"pending": 0, "read": False})
    if persistent:
        return  # nothing follows: the mbarriers end with the kernel
    low.barrier()  # no consumer still reads the ring or arrives on an mbarrier
    for s in range(stages):  # their shared memory may serve another purpose only once they are invalidated
        for empty in (False, True):
            low.b.op("mbarrier_inval", [barrier(empty, low.const(s)), first], [])
    low.barrier()


def _issue_share(low: Lowering, st: Staged, box: TmaBox, tensor_map: Value, stage: Value, starts: list[Value],
                 full: Value, leader: Value, rank: Value, ranks: int) -> None:
    """This CTA's share of the cluster's shared operand, multicast into every CTA's stage: every `ranks`-th
    box from its rank on, or (one box) its rank's part of the rows - the box of `tensor_map` - at the same
    offsets in each CTA, completing bytes on each one's full barrier."""
    mask = (1 << ranks) - 1
    if box.count % ranks == 0:
        for j in range(0, box.count, ranks):
            index = low.op("add", [rank, low.const(j)], I32)
            column = low.op("add", [starts[1], low.op("mul", [index, low.const(box.cols)], I32)], I32)
            offset = low.op("cast", [low.op("mul", [index, low.const(box.bytes)], I32)], U32)
            low.b.op("tma_load", [low.op("add", [stage, offset], U32), tensor_map, column, starts[0], full, leader],
                     [], {"offset": st.start, "multicast": mask})
        return
    rows = box.rows // ranks
    row = low.op("add", [starts[0], low.op("mul", [rank, low.const(rows)], I32)], I32)
    offset = low.op("cast", [low.op("mul", [rank, low.const(rows * SWIZZLE_BYTES)], I32)], U32)
    low.b.op("tma_load", [low.op("add", [stage, offset], U32), tensor_map, starts[1], row, full, leader], [],
             {"offset": st.start, "multicast": mask})


def _store_by_tma(low: Lowering, epilogue: TmaStore, buffer: Value, tensor_map: Value, issuer: Value) -> None:
    """The epilogue's store by TMA (see TmaStore), round by round, box j through buffer box j % buffers: the
    consumers write the elements of the round's boxes (converted to the tensor's dtype) and fence them for
    the async proxy; thread `issuer` waits until the bulk stores issued before have read their boxes; after
    a barrier it copies the round's boxes out, a bulk-store group.  So while a round is written only the
    round before's stores can still read the buffer, and they read other boxes - but for a tile's first
    round, which finds the last round of the tile before in flight: where they share a box, the issuer
    waits first."""
    store = epilogue.store
    tensor = low.vals[store.operands[0]]
    value = low.tile(store.operands[-1])
    box, buffers, rounds = epilogue.box, epilogue.buffers, epilogue.rounds
    assert buffers == box.count or boxes_kept_by_threads(value.layout, box.cols), "planned in another layout"
    if {j % buffers for j in rounds[0]} & {j % buffers for j in rounds[-1]}:
        low.b.op("bulk_wait", [issuer], [], {"pending": 0, "read": True})
        low.barrier()
    regs = [convert_register(low, r, tensor.dtype) for r in value.regs]
    whole = TileSpace(box.rows, box.cols * box.count, epilogue.space.eb, 0)
    accesses = swizzled_accesses(low, value.layout, buffer, 0, whole)
    owner = low.owner(value.layout)
    starts, _, _ = slice_geometry(low, store, tensor)
    for boxes in rounds:
        for group, address, offset, pred in accesses:
            j = value.layout.offsets[group[0]][1] // box.cols  # its box (with a buffer of two, for every thread)
            if j in boxes:
                low.st_shared(address, low.const(0), whole.eb, [regs[r] for r in group], tensor.dtype,
                              low.all_of([pred, owner]), offset=offset - (j - j % buffers) * box.bytes)
        low.b.op("fence_proxy_async", [], [])
        if len(rounds) > 1:  # the round before's stores have read the boxes the next round writes
            low.b.op("bulk_wait", [issuer], [], {"pending": 0, "read": True})
        low.barrier()
        for j in boxes:
            column = starts[1] if j == 0 else low.op("add", [starts[1], low.const(j * box.cols)], I32)
            low.b.op("tma_store", [buffer, tensor_map, column, starts[0], issuer], [],
                     {"offset": j % buffers * box.bytes})
        low.b.op("bulk_commit", [issuer], [])


def _inside(low: Lowering) -> Value:
    """Whether the program a persistent CTA runs now lies inside the virtual grid (not its padding)."""
    return low.all_of([low.op("cmp", [i, n], BOOL, pred="lt") for i, n in zip(low.programs.ids, low.programs.counts)])


def _tiles(low: Lowering, schedule: Schedule, before: list[Op], tile, rank: Value | None,
           team: Value | None = None) -> list[Value]:
    """tile(stage, phase, (index, count)) -> [stage, phase] for each output tile this CTA runs: its own
    program's, or with persistent CTAs each virtual program (`core.Programs`) it takes - in a cluster, the
    cluster takes neighbouring tiles together, its CTA of `rank` the one at that offset; of consumer teams,
    `team` every other one from its index on -; the ops `before` lowered for each with its program ids,
    the stage and phase carried from one to the next, `index` the tile's in the CTA's sequence of `count`.
    The final stage and phase."""
    start = low.const(0)
    if not schedule.order.persistent:
        return tile(start, start, (start, low.const(1)))
    (cm, cn), ranks = schedule.order.cluster, schedule.order.cluster_size
    body, outer, whole = Block(), low.b, low.programs
    cta, ctas = low.op("program_id", [], I32, axis=0), low.op("num_programs", [], I32, axis=0)
    group, groups = low.op("div", [cta, low.const(ranks)], I32), low.op("div", [ctas, low.const(ranks)], I32)
    nx, ny = (low.op("div", [low.op("add", [n, low.const(c - 1)], I32), low.const(c)], I32)
              for n, c in zip(whole.counts, (cm, cn)))  # the grid in clusters
    tiles = low.op("mul", [low.op("mul", [nx, ny], I32), whole.counts[2]], I32)
    # ceil((tiles - group) / groups): never negative, since group < groups
    mine = low.op("div", [low.op("add", [low.op("sub", [tiles, group], I32),
                                          low.op("sub", [groups, low.const(1)], I32)], I32), groups], I32)
    loop = low.b.op("for", [start if team is None else team, mine, start, start], [I32, I32],
                    {"step": 1 if team is None else schedule.teams}, [body])
    low.b = low.builder_for(body, outer.block, outer.loc)
    i = low.b.block_arg(body, I32, "tile")
    stage, phase = low.b.block_arg(body, I32, "stage"), low.b.block_arg(body, I32, "phase")
    x, y, z = grid_position(low, low.op("add", [group, low.op("mul", [i, groups], I32)], I32), nx, ny)
    if ranks > 1:
        x, y = (low.op("add", [low.op("mul", [v, low.const(c)], I32), rank], I32) if c > 1 else v
                for v, c in ((x, cm), (y, cn)))
    low.programs = whole.running((x, y, z))
    low.lower_ops(before)
    low.b.op("yield", tile(stage, phase, (i, mine)), [])
    low.programs = whole
    low.b = outer
    return list(loop.results)


def _ring_position(low: Lowering, stages: int, index: Value, lo: Value, hi: Value, step: int) -> tuple[Value, Value]:
    """The stage and phase of the first iteration of the CTA's tile `index` (from 0), when every tile's loop
    runs from `lo` to `hi` by `step` (> 0) and the ring is filled in the order of the tiles."""
    span = low.op("sub", [hi, lo], lo.type)
    trips = low.op("div", [low.op("add", [span, low.const(step - 1, lo.dtype)], lo.type), low.const(step, lo.dtype)],
                   lo.type)
    trips = low.op("max", [low.op("cast", [trips], I32) if lo.dtype is not DType.I32 else trips, low.const(0)], I32)
    at = low.op("mul", [index, trips], I32)  # the iterations of the tiles before it
    return (low.op("rem", [at, low.const(stages)], I32),
            low.op("and", [low.op("div", [at, low.const(stages)], I32), low.const(1)], I32))


def async_copy(low: Lowering, load: Op, stage: Value, start: int, space: TileSpace, enabled: Value) -> None:
    """Copy a load's slice into shared memory, from byte `start` of `stage`, laid out as `space` says,
    with cp.async.

    Inside the tensor and aligned: 16-byte copies.  Otherwise one copy per
    element, zero-filled outside the tensor (the edge contract); 16- and 8-bit
    elements are loaded and stored (cp.async moves 4 bytes or more) - always,
    for a strided view whose last stride is not 1.
    """
    tensor = low.vals[load.operands[0]]
    starts, sizes, tile_dims = slice_geometry(low, load, tensor)
    eb = tensor.dtype.nbytes
    layout = copy_layout(load.result.type.shape, low.threads, eb)
    addrs = row_addresses(low, tensor, starts, tile_dims, layout)

    # the thread's part of the address, once; the register's part an immediate where the layout allows
    c0, c1 = low.thread_coord(layout.terms[0]), low.thread_coord(layout.terms[1])
    if space.swizzled:
        thread_dst = low.op("add", [stage, low.op("cast", [space.offset(low, c0, c1)], U32)], U32)
    else:
        thread_index = low.op("add", [low.op("mul", [c0, low.const(space.stride // eb)], I32), c1], I32)
        thread_dst = low.smem_address(stage, thread_index, eb)
    chunk_aligned = layout.vector_width(16) * eb == 16  # every thread's columns start 16-byte chunks

    def destination(r: int) -> tuple[Value, int]:
        """(shared address, immediate offset) of register slot r's element in the stage."""
        i, j = layout.offsets[r]
        delta = space.delta(i, j) if chunk_aligned or not space.swizzled else None
        if delta is not None:
            return thread_dst, start + delta
        row, col = (low.coord(layout, r, d) for d in (0, 1))
        return low.op("add", [stage, low.op("cast", [space.offset(low, row, col)], U32)], U32), start

    width = vector_ok(tensor, tile_dims, layout, copy=True)
    if width * eb < 4:  # no copy of whole elements is 4 bytes or more: an element at a time
        fast = low.const(False, DType.BOOL)
    else:
        fast = in_bounds(low, tensor, starts, sizes)
        if width > 1:
            fast = low.all_of([fast, aligned(low, tensor, starts, width)])
        fast = low.all_of([enabled, fast])
    outer = low.b
    regions = [Block(), Block()]
    low.b.op("if", [fast], [], {}, regions)
    low.b = low.builder_for(regions[0], outer.block, outer.loc)
    for group in access_groups(layout, width) if width * eb >= 4 else ():
        addr, off = addrs[group[0]]
        dst, offset = destination(group[0])
        pred = low.slot_valid(layout, group[0])
        low.b.op("cp_async", [dst, addr] + ([pred] if pred is not None else []), [],
                 {"bytes": width * eb, "offset": offset, "goffset": off, "masked": pred is not None})
    low.b.op("yield", [], [])
    low.b = low.builder_for(regions[1], outer.block, outer.loc)
    inner = [Block(), Block()]
    low.b.op("if", [enabled], [], {}, inner)
    low.b.op("yield", [], [])
    low.b = low.builder_for(inner[0], regions[1], outer.loc)
    for r in range(layout.nregs):
        addr, off = addrs[r]
        valid = element_valid(low, tensor, starts, sizes, tile_dims, layout, r)
        pred = low.slot_valid(layout, r)
        dst, offset = destination(r)
        if eb < 4:
            value = low.b.op("ld_global", [addr, valid], [ScalarType(tensor.dtype)],  # the bits, as they are
                             {"dtype": tensor.dtype, "vec": 1, "offset": off, "masked": True,
                              "read_only": tensor.read_only}).result
            low.b.op("st_shared", [dst, value] + ([pred] if pred is not None else []), [],
                     {"dtype": tensor.dtype, "vec": 1, "offset": offset, "masked": pred is not None})
            continue
        size = low.op("select", [valid, low.const(eb, DType.U32), low.const(0, DType.U32)], U32)
        if off:
            addr = low.op("add", [addr, low.const(off, DType.I64)], I64)
        src = low.op("select", [valid, addr, tensor.ptr], I64)
        low.b.op("cp_async", [dst, src, size] + ([pred] if pred is not None else []), [],
                 {"bytes": eb, "offset": offset, "goffset": 0,
                  "masked": pred is not None, "zero_fill": True})
    low.b.op("yield", [], [])
    low.b = low.builder_for(inner[1], regions[1], outer.loc)
    low.b.op("yield", [], [])
    low.b = outer
