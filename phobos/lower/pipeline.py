# Software pipelining of a matrix product's K loop with cp.async (sm_80+).
#
# A loop qualifies (`pipeline_plan`) when the target has cp.async and its body
# is one `dot` whose operands are slices loaded in the body for it alone (in
# the dot's dtype), plus pure arithmetic.  Such a loop is lowered with its
# operand tiles copied global -> shared by cp.async into a ring of STAGES
# buffers, each laid out as dot.py's DotPlan stages them, so the product is
# computed straight from shared memory (`dot.finish_dot`) and no operand
# passes through registers.
#
# Stage s of the ring holds the tiles of iteration i when i = s (mod STAGES).
# Before the loop, iterations 0..STAGES-2 are requested (a loop of its own,
# one copy of the code); at iteration i each thread waits for its copies of
# iteration i, a barrier makes everyone's visible (and says everyone is done
# with iteration i-1's stage), iteration i+STAGES-1 is requested into that
# stage, and the product is computed from stage i.  Each request is one
# cp.async group, empty when its iteration is past the end.  STAGES shrinks
# (down to 2) until the ring fits the target's shared memory.
#
# The copies keep the edge contract as memory.py's loads do: 16-byte copies
# when the slice is inside the tensor and aligned, else one copy per element
# that zero-fills the elements outside.  This module builds on memory.py (slice
# geometry, addresses, bounds tests) and dot.py (the plan and the product);
# control.py's `for` handler asks it whether a loop is pipelined.
from __future__ import annotations

from ..configuration import Knobs
from ..middle.ir import Block, Op, Value
from ..types import DType
from .core import BOOL, I32, I64, U32, Lowering, access_groups
from .dot import dot_plan, finish_dot
from .layout import blocked
from .memory import aligned, element_valid, in_bounds, row_addresses, slice_geometry, vector_ok

DEFAULT_STAGES = 3  # depth of the cp.async pipeline of a K loop (autotune parameter STAGES)


def pipeline_plan(low: Lowering, op: Op):
    """(dot, [load of A, load of B], ops computing their indices) when `op` is a loop to pipeline, else None."""
    if not low.cp_async:
        return None
    body = op.regions[0].ops[:-1]
    dots = [o for o in body if o.opcode == "dot"]
    if len(dots) != 1:
        return None
    dot = dots[0]
    loads = [v.owner for v in dot.operands[:2]]
    if any(not isinstance(ld, Op) or ld.opcode != "load" or ld not in body or low.use_count[ld.result] != 1
           for ld in loads) or loads[0] is loads[1]:
        return None
    if any(ld.operands[0].dtype != dot.result.dtype for ld in loads):
        return None
    if any(o not in loads and o is not dot and (not o.pure or o.regions) for o in body):
        return None
    producers = {r: o for o in body for r in o.results}
    needed, stack = [], [v for ld in loads for v in ld.operands[1:]]
    while stack:
        v = stack.pop()
        o = producers.get(v)
        if o is not None and o not in needed:
            needed.append(o)
            stack += o.operands
    index_ops = [o for o in body if o in needed]
    return dot, loads, index_ops


def lower_pipelined(low: Lowering, op: Op, dot: Op, loads: list[Op], index_ops: list[Op]) -> None:
    """The K loop with its operand tiles copied global -> shared by cp.async, STAGES deep (see the header)."""
    plan = dot_plan(loads[0].result.type.shape, loads[1].result.type.shape[1], dot.result.dtype, low.threads)
    if any(ld in low.global_barriers for ld in loads):
        low.barrier()  # the body writes no memory, so what the loads must wait for came before the loop
    stages = low.src.attrs.get("knobs", Knobs()).stages or DEFAULT_STAGES
    while stages > 2 and stages * plan.stage_bytes > low.smem_limit:
        stages -= 1
    base = low.smem(stages * plan.stage_bytes)
    lo, hi = low.vals[op.operands[0]], low.vals[op.operands[1]]
    step = op.attrs["step"]
    before = "lt" if step > 0 else "gt"
    kt_arg = op.regions[0].args[0]

    def stage_address(index: Value) -> Value:
        offset = low.op("mul", [low.op("cast", [index], U32), low.const(plan.stage_bytes, DType.U32)], U32)
        return low.op("add", [base, offset], U32)

    def request(kt: Value, index: Value) -> None:
        """cp.async the operand tiles of the iteration with loop variable `kt` into stage `index`."""
        saved = {r: low.vals.get(r) for o in index_ops for r in o.results}
        saved[kt_arg] = low.vals.get(kt_arg)
        low.vals[kt_arg] = kt
        low.lower_ops(index_ops)
        enabled = low.op("cmp", [kt, hi], BOOL, pred=before)
        stage = stage_address(index)
        async_copy(low, loads[0], stage, 0, plan.lda, enabled)
        async_copy(low, loads[1], stage, plan.a_bytes, plan.ldb, enabled)
        low.b.op("cp_async_commit", [], [])
        low.vals.update(saved)

    # the prologue: requests for iterations 0 .. STAGES-2, as a loop (one copy of the code)
    prologue = Block()
    low.b.op("for", [low.const(0), low.const(stages - 1)], [], {"step": 1}, [prologue])
    outer = low.b
    low.b = low.builder_for(prologue, outer.block, outer.loc)
    s_arg = low.b.block_arg(prologue, I32, "stage")
    s_kt = low.op("cast", [s_arg], lo.type) if lo.dtype is not DType.I32 else s_arg
    request(low.op("add", [lo, low.op("mul", [s_kt, low.const(step, lo.dtype)], lo.type)], lo.type), s_arg)
    low.b.op("yield", [], [])
    low.b = outer

    def body(ops: list[Op], extra: list[Value]) -> list[Value]:
        (read,) = extra
        low.b.op("cp_async_wait", [], [], {"pending": stages - 2})
        low.barrier()
        kt = low.vals[kt_arg]
        ahead = low.op("add", [kt, low.const((stages - 1) * step, kt.dtype)], kt.type)
        at_start = low.op("cmp", [read, low.const(0)], BOOL, pred="eq")
        write = low.op("select", [at_start, low.const(stages - 1),
                                  low.op("sub", [read, low.const(1)], I32)], I32)
        request(ahead, write)
        low.lower_ops([o for o in ops if o not in loads and o is not dot and o not in index_ops])
        finish_dot(low, dot, plan, stage_address(read))
        at_end = low.op("cmp", [read, low.const(stages - 1)], BOOL, pred="eq")
        return [low.op("select", [at_end, low.const(0), low.op("add", [read, low.const(1)], I32)], I32)]

    low.build_for(op, [low.const(0)], body)
    low.b.op("cp_async_wait", [], [], {"pending": 0})
    low.barrier()


def async_copy(low: Lowering, load: Op, stage: Value, start: int, ld: int, enabled: Value) -> None:
    """Copy a load's slice into shared memory (row-major, rows `ld` apart) with cp.async.

    Inside the tensor and aligned: 16-byte copies.  Otherwise 4-byte copies,
    zero-filled outside the tensor (the edge contract).
    """
    tensor = low.vals[load.operands[0]]
    starts, sizes, tile_dims = slice_geometry(low, load, tensor)
    layout = blocked(load.result.type.shape, low.threads)
    eb = tensor.dtype.nbytes
    addrs = row_addresses(low, tensor, starts, tile_dims, layout)
    c0, c1 = low.thread_coord(layout.terms[0]), low.thread_coord(layout.terms[1])
    thread_index = low.op("add", [low.op("mul", [c0, low.const(ld)], I32), c1], I32)
    dst = low.smem_address(stage, thread_index, eb)
    width = vector_ok(tensor, tile_dims, layout)
    fast = in_bounds(low, tensor, starts, sizes)
    if width > 1:
        fast = low.all_of([fast, aligned(low, tensor, starts, width)])
    fast = low.all_of([enabled, fast])
    outer = low.b
    regions = [Block(), Block()]
    low.b.op("if", [fast], [], {}, regions)
    low.b = low.builder_for(regions[0], outer.block, outer.loc)
    for group in access_groups(layout, width):
        i, j = layout.offsets[group[0]]
        addr, off = addrs[group[0]]
        pred = low.slot_valid(layout, group[0])
        low.b.op("cp_async", [dst, addr] + ([pred] if pred is not None else []), [],
                 {"bytes": width * eb, "offset": start + (i * ld + j) * eb, "goffset": off,
                  "masked": pred is not None})
    low.b.op("yield", [], [])
    low.b = low.builder_for(regions[1], outer.block, outer.loc)
    inner = [Block(), Block()]
    low.b.op("if", [enabled], [], {}, inner)
    low.b.op("yield", [], [])
    low.b = low.builder_for(inner[0], regions[1], outer.loc)
    for r in range(layout.nregs):
        i, j = layout.offsets[r]
        addr, off = addrs[r]
        valid = element_valid(low, tensor, starts, sizes, tile_dims, layout, r)
        pred = low.slot_valid(layout, r)
        size = low.op("select", [valid, low.const(eb, DType.U32), low.const(0, DType.U32)], U32)
        if off:
            addr = low.op("add", [addr, low.const(off, DType.I64)], I64)
        src = low.op("select", [valid, addr, tensor.ptr], I64)
        low.b.op("cp_async", [dst, src, size] + ([pred] if pred is not None else []), [],
                 {"bytes": eb, "offset": start + (i * ld + j) * eb, "goffset": 0,
                  "masked": pred is not None, "zero_fill": True})
    low.b.op("yield", [], [])
    low.b = low.builder_for(inner[1], regions[1], outer.loc)
    low.b.op("yield", [], [])
    low.b = outer
