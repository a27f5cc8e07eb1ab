# Dot: C[M, N] (+)= A[M, K] @ B[K, N] on the CUDA cores (products that their
# plan puts on the tensor cores go to mma.py).
#
# The result lives in the register-blocked dot layout (layout.dot_layout):
# each thread holds a block of rows x cols of C.  The operands are staged in
# shared memory, both row-major (`write_tile`): A [M, K] with rows `lda`
# elements apart, then B [K, N] with rows `ldb` apart (`DotPlan`).  A thread
# reads its rows of A as vectors along K (`lda` is a multiple of 4 and an odd
# number of 16-byte units, padding that spreads consecutive rows over the
# banks) and B's row pieces as vectors along N (`read_runs`).
#
# The product is fully unrolled fused multiply-adds up to K =
# DOT_UNROLL_LIMIT, else a loop of DOT_STEP steps plus an unrolled remainder.
# Within one k step the FMAs go row by row, every other row backwards
# (`_serpentine`), so consecutive FMAs share an operand.
#
# An operand that is `trans(x)` (rearrange.py leaves it unmoved when dots are
# its only users: `Transposed`) is staged from x's registers, each element
# stored at its transposed place, so the transpose costs no trip of its own
# through shared memory.
#
# pipeline.py stages the operands itself (cp.async straight from global
# memory into the same layout) and calls `dot_plan` and `finish_dot`.
from __future__ import annotations

from dataclasses import dataclass

from ..middle.ir import Block, Op, Value
from ..types import DType, ScalarType
from . import mma
from .core import HANDLERS, I32, SMEM_ALIGN, U32, Lowering, TileRegs, Transposed, align, write_tile
from .layout import Layout, dot_layout
from .mma_plan import MmaPlan

DOT_UNROLL_LIMIT = 64  # a dot's K up to this is fully unrolled; beyond, a loop of DOT_STEP steps
DOT_STEP = 16


@dataclass
class DotPlan:
    """How a dot product [M, K] x [K, N] is laid out in shared memory and registers."""

    layout: Layout  # of the result
    k: int
    rows: list[int]  # the row offsets each thread holds
    cols: list[int]  # the column offsets each thread holds
    lda: int  # A's row stride in shared memory (elements): a multiple of 4, an odd number of 16-byte units
    ldb: int  # B's row stride
    a_bytes: int  # A's region (B follows it)
    stage_bytes: int  # A and B together
    eb: int
    dtype: DType  # of the operands in shared memory (a 16-bit float's values are f32 in registers)
    kgroup: int  # k steps read from A at once (a vector along K)
    fma_order: list[int]  # the order of the result registers' FMAs in one k step


def dot_plan(a_shape: tuple[int, int], n: int, dtype: DType, threads: int) -> DotPlan:
    m, k = a_shape
    layout = dot_layout((m, n), threads)
    eb = dtype.nbytes
    kgroup = next(g for g in (4, 2, 1) if k % g == 0 and g * eb <= 16)
    lda = align(k, 4)
    if (lda // 4) % 2 == 0:
        lda += 4
    ldb = align(_cover(layout, 1), 4)
    a_bytes = align(_cover(layout, 0) * lda * eb, SMEM_ALIGN)
    stage = align(a_bytes + k * ldb * eb, SMEM_ALIGN)
    rows = sorted({off[0] for off in layout.offsets})
    cols = sorted({off[1] for off in layout.offsets})
    return DotPlan(layout, k, rows, cols, lda, ldb, a_bytes, stage, eb, dtype, kgroup, _serpentine(layout))


def _serpentine(layout: Layout) -> list[int]:
    """Registers row by row, every other row backwards: consecutive FMAs always share an
    operand (A's value along a row, B's at the turn), which the hardware's operand
    reuse cache then supplies instead of a register-file read."""
    by_row: dict[int, list[tuple[int, int]]] = {}
    for r, (i, j) in enumerate(layout.offsets):
        by_row.setdefault(i, []).append((j, r))
    order = []
    for n, i in enumerate(sorted(by_row)):
        cells = sorted(by_row[i], reverse=n % 2 == 1)
        order += [r for _, r in cells]
    return order


def _cover(layout: Layout, d: int) -> int:
    """How far along dim d the layout reaches (padding included)."""
    return layout.thread_span(d) + max(off[d] for off in layout.offsets) + 1


@HANDLERS.on("dot")
def dot(low: Lowering, op: Op) -> None:
    """A dot whose operands are in registers: stage them in shared memory, then multiply (on the
    tensor cores when its plan says so, mma.py)."""
    plan = low.plans.get(op)
    if isinstance(plan, MmaPlan):
        mma.lower_dot(low, op, plan)
        return
    a_v, b_v = op.operands[0], op.operands[1]
    plan = dot_plan(a_v.type.shape, b_v.type.shape[1], a_v.dtype, low.threads)
    base = low.smem(plan.stage_bytes)
    low.barrier()
    for v, start, ld in ((a_v, 0, plan.lda), (b_v, plan.a_bytes, plan.ldb)):
        staged = low.vals[v]
        if isinstance(staged, Transposed):
            write_transposed(low, staged.source, base, start, ld, plan.eb, plan.dtype)
        else:
            write_tile(low, staged, base, start, ld, plan.eb, plan.dtype)
    low.barrier()
    finish_dot(low, op, plan, base)


def finish_dot(low: Lowering, op: Op, plan: DotPlan, stage: Value) -> None:
    """Multiply the operands staged at `stage` into the result (or accumulator) registers."""
    if len(op.operands) == 3:
        acc = low.in_layout(op.operands[2], plan.layout).regs
    else:
        acc = [low.const(0.0 if plan.dtype.is_float else 0, plan.dtype.compute)] * plan.layout.nregs
    acc = dot_compute(low, plan, stage, acc)
    result = TileRegs(plan.layout, acc)
    layout = low.layouts[op.result]
    if layout != plan.layout:
        result = TileRegs(layout, low.relayout(result, layout, plan.dtype.compute))
    low.vals[op.result] = result


def write_transposed(low: Lowering, t: TileRegs, base: Value, start: int, ld: int, eb: int, dtype: DType) -> None:
    """Store the transpose of a 2-D tile row-major into shared memory: element (i, j) of `t` at row j,
    column i (scalar stores: consecutive registers lie down a column there)."""
    layout = t.layout
    owner = low.owner(layout)
    c0, c1 = low.thread_coord(layout.terms[0]), low.thread_coord(layout.terms[1])
    thread_index = low.op("add", [low.op("mul", [c1, low.const(ld)], I32), c0], I32)
    for r, (i, j) in enumerate(layout.offsets):
        pred = low.all_of([low.slot_valid(layout, r), owner])
        low.st_shared(base, thread_index, eb, [t.regs[r]], dtype, pred, offset=start + (j * ld + i) * eb)


def dot_compute(low: Lowering, plan: DotPlan, stage: Value, acc: list[Value]) -> list[Value]:
    """acc += A @ B with A [M, K] at `stage` and B [K, N] after it; fully unrolled up to a limit."""
    layout = plan.layout
    a_base = low.smem_address(stage, low.op("mul", [low.thread_coord(layout.terms[0]),
                                                    low.const(plan.lda)], I32), plan.eb)
    b_base = low.smem_address(stage, low.thread_coord(layout.terms[1]), plan.eb)
    if plan.k <= DOT_UNROLL_LIMIT:
        for k0 in range(0, plan.k, plan.kgroup):
            acc = dot_steps(low, plan, a_base, b_base, k0, min(plan.kgroup, plan.k - k0), acc)
        return acc
    main = plan.k - plan.k % DOT_STEP
    body = Block()
    loop = low.b.op("for", [low.const(0), low.const(main), *acc], [ScalarType(plan.dtype.compute)] * len(acc),
                    {"step": DOT_STEP}, [body])
    outer = low.b
    low.b = low.builder_for(body, outer.block, outer.loc)
    kk = low.b.block_arg(body, I32, "k")
    carried = [low.b.block_arg(body, ScalarType(plan.dtype.compute)) for _ in acc]
    k_bytes = low.op("mul", [low.op("cast", [kk], U32), low.const(plan.eb, DType.U32)], U32)
    a_k = low.op("add", [a_base, k_bytes], U32)
    b_k = low.op("add", [b_base, low.op("mul", [k_bytes, low.const(plan.ldb, DType.U32)], U32)], U32)
    for k0 in range(0, DOT_STEP, plan.kgroup):
        carried = dot_steps(low, plan, a_k, b_k, k0, plan.kgroup, carried)
    low.b.op("yield", carried, [])
    low.b = outer
    acc = list(loop.results)
    for k0 in range(main, plan.k, plan.kgroup):
        acc = dot_steps(low, plan, a_base, b_base, k0, min(plan.kgroup, plan.k - k0), acc)
    return acc


def dot_steps(low: Lowering, plan: DotPlan, a_base: Value, b_base: Value, k0: int, count: int,
              acc: list[Value]) -> list[Value]:
    """`count` steps of k from k0: read A's rows as vectors along K, B's row pieces, then FMAs."""
    t = ScalarType(plan.dtype.compute)
    a_vals = {}
    for row in plan.rows:
        ld = low.b.op("ld_shared", [a_base], [t] * count,
                      {"dtype": plan.dtype, "vec": count, "offset": (row * plan.lda + k0) * plan.eb,
                       "masked": False})
        for j, v in enumerate(ld.results):
            a_vals[(row, k0 + j)] = v
    for kk in range(k0, k0 + count):
        b_vals = read_runs(low, b_base, plan.cols, plan.a_bytes + kk * plan.ldb * plan.eb, plan)
        acc = list(acc)
        for r in plan.fma_order:
            i, j = plan.layout.offsets[r]
            acc[r] = low.op("fma", [a_vals[(i, kk)], b_vals[j], acc[r]], t)
    return acc


def read_runs(low: Lowering, base: Value, offsets: list[int], start: int, plan: DotPlan) -> dict[int, Value]:
    """ld.shared the elements at `offsets` from base + start, runs of contiguous ones as vectors."""
    out = {}
    per_vector = max(1, min(4, 16 // plan.eb))  # ld.shared vectors have at most 4 elements
    i = 0
    while i < len(offsets):
        run = 1
        while (i + run < len(offsets) and run < per_vector and offsets[i + run] == offsets[i] + run
               and offsets[i] % per_vector == 0):
            run += 1
        while run & (run - 1):
            run -= 1
        ld = low.b.op("ld_shared", [base], [ScalarType(plan.dtype.compute)] * run,
                      {"dtype": plan.dtype, "vec": run, "offset": start + offsets[i] * plan.eb,
                       "masked": False})
        for j in range(run):
            out[offsets[i + j]] = ld.results[j]
        i += run
    return out
