# Products on the tensor cores with mma.sync (sm_80 and newer).
#
# A product whose plan (mma_plan.py) puts it on the tensor cores computes its
# [M, N] result as 16 x 8 tiles, each warp those of its block of the warp grid,
# one `mma.sync` per tile and k step (m16n8k16 for bf16/f16 operands, m16n8k8
# for tf32; three per step for tf32x3).  The accumulators live in the layout
# of the plan (layout.mma_layout), which the rest of the kernel uses like any
# other: element-wise work, reductions along rows (two butterfly shuffles
# within a quad of lanes) and vector stores of column pairs.
#
# Operands come from shared memory, row-major (A [M, K], B [K, N]) with row
# strides padded so that the fragment reads have no bank conflicts
# (`operand_stride`): 16-bit A fragments by `ldmatrix.x4`, 16-bit B fragments
# by `ldmatrix.x4.trans` (two 8-column tiles at once), tf32 fragments by
# 32-bit loads, rounded to TF32 by `cvt.rna` (tf32x3: the high part and the
# TF32 rounding of the remainder).  A 16-bit A operand held in the plan's
# A layout needs no shared memory: its registers, packed in pairs, are the
# fragments (a loop-invariant operand is packed once, by LICM).
#
# `lower_dot` stages operands held in registers in the scratch buffer;
# pipeline.py copies loaded operands into its stages with cp.async and calls
# `compute` on them.  Either way, every k step of the product is unrolled.
from __future__ import annotations

from dataclasses import dataclass

from ..middle.ir import Op, Value
from ..types import DType, ScalarType
from .core import I32, SMEM_ALIGN, U32, Lowering, TileRegs, align, write_tile
from .layout import MMA_COLS, MMA_ROWS, WARP
from .mma_plan import MmaPlan

F32 = ScalarType(DType.F32)


@dataclass(frozen=True)
class SharedOperand:
    """An operand tile in shared memory: row-major from byte `start` of `base`, rows `stride` bytes apart."""

    base: Value  # u32 shared address
    start: int
    stride: int


@dataclass(frozen=True)
class RegisterOperand:
    """An A operand in the plan's A layout: its registers are the fragments."""

    regs: list[Value]


def operand_stride(plan: MmaPlan, operand: str, cols: int) -> int:
    """The row stride (bytes) of an operand tile with `cols` columns in shared memory.

    A multiple of 16 bytes (cp.async and ldmatrix move 16-byte rows), padded so
    that the rows one fragment read touches fall in different banks: eight
    rows of 16 bytes for ldmatrix and for tf32 A (an odd number of 16-byte
    units), four rows of 32 bytes for tf32 B (32 or 96 bytes past a multiple
    of 128).
    """
    eb = plan.kind.operand.nbytes
    stride = align(cols * eb, 16)
    ok = (lambda s: s % 128 in (32, 96)) if operand == "b" and not plan.kind.sixteen_bit else \
        (lambda s: (s // 16) % 2 == 1)
    while not ok(stride):
        stride += 16
    return stride


def a_in_registers(low: Lowering, plan: MmaPlan, a: Value) -> bool:
    return plan.a_layout is not None and low.tile(a).layout == plan.a_layout


@dataclass(frozen=True)
class Staging:
    """Where `lower_dot` puts operands in the scratch buffer: A (unless in registers), then B."""

    a_stride: int | None
    b_stride: int
    b_start: int
    nbytes: int


def staging(plan: MmaPlan, a_shared: bool) -> Staging:
    a_stride = operand_stride(plan, "a", plan.k) if a_shared else None
    a_bytes = align(plan.m * a_stride, SMEM_ALIGN) if a_shared else 0
    b_stride = operand_stride(plan, "b", plan.n)
    return Staging(a_stride, b_stride, a_bytes, a_bytes + plan.k * b_stride)


def lower_dot(low: Lowering, op: Op, plan: MmaPlan) -> None:
    """A tensor-core product: operands a pipelined loop staged are read from its stage; others, held
    in registers, are written to the scratch buffer - except an A operand whose registers are its
    fragments."""
    a_v, b_v = op.operands[0], op.operands[1]
    a, b = low.staged.get(a_v), low.staged.get(b_v)
    if a is None and a_in_registers(low, plan, a_v):
        a = RegisterOperand(low.tile(a_v).regs)
    if a is None or b is None:
        where = staging(plan, a is None)
        base = low.smem(where.nbytes)
        eb = plan.kind.operand.nbytes
        low.barrier()
        if a is None:
            write_tile(low, low.tile(a_v), base, 0, where.a_stride // eb, eb, plan.kind.operand)
            a = SharedOperand(base, 0, where.a_stride)
        if b is None:
            write_tile(low, low.tile(b_v), base, where.b_start, where.b_stride // eb, eb, plan.kind.operand)
            b = SharedOperand(base, where.b_start, where.b_stride)
        low.barrier()
    finish(low, op, plan, a, b)


def finish(low: Lowering, op: Op, plan: MmaPlan, a, b: SharedOperand) -> None:
    """The product of `op` from its operands into its result (accumulating into a third operand)."""
    zero = [low.const(0.0, DType.F32)] * plan.layout.nregs
    if len(op.operands) == 2:
        product = compute(low, plan, a, b, zero)
    elif plan.kind.products == 1:
        product = compute(low, plan, a, b, low.in_layout(op.operands[2], plan.layout).regs)
    else:  # tf32x3: the tensor cores' sums round toward zero; they stay within one product, added to acc as f32
        acc = low.in_layout(op.operands[2], plan.layout).regs
        product = [low.op("add", [x, y], F32) for x, y in zip(acc, compute(low, plan, a, b, zero))]
    result = TileRegs(plan.layout, product)
    layout = low.layouts[op.result]
    if layout != plan.layout:
        result = TileRegs(layout, low.relayout(result, layout, DType.F32))
    low.vals[op.result] = result


# ------------------------------------------------------------------ the product
def compute(low: Lowering, plan: MmaPlan, a, b: SharedOperand, acc: list[Value]) -> list[Value]:
    """acc + A @ B for this thread's accumulators (the registers of plan.layout)."""
    acc = list(acc)
    kind = plan.kind
    nt = plan.n_tiles
    for s in range(plan.k // kind.k):
        b_frags = _b_fragments(low, plan, b, s)
        for i in range(plan.m_tiles):
            a_frags = _a_fragments(low, plan, a, s, i)
            for j in range(nt):
                first = (i * nt + j) * 4
                c = acc[first:first + 4]
                for fa, fb in _products(a_frags, b_frags[j]):
                    c = list(low.b.op("mma", [*fa, *fb, *c], [F32] * 4,
                                      {"shape": kind.shape, "type": kind.ptx}).results)
                acc[first:first + 4] = c
    return acc


def _products(a_frags, b_frags):
    """The (A, B) fragment pairs one tile multiplies: one pair, or tf32x3's three (small terms first)."""
    if len(a_frags) == 1:
        return [(a_frags[0], b_frags[0])]
    (a_hi, a_lo), (b_hi, b_lo) = a_frags, b_frags
    return [(a_lo, b_hi), (a_hi, b_lo), (a_hi, b_hi)]


def _lane(low: Lowering) -> tuple[Value, Value]:
    """(lane / 4, lane % 4): the row and column group of a lane in a fragment."""
    return low.digit(4, 8), low.digit(1, 4)


def _warp_offset(low: Lowering, plan: MmaPlan, dim: int) -> Value:
    """The first row (dim 0) or column (dim 1) of this warp's block."""
    if dim == 0:
        return low.op("mul", [low.digit(WARP, plan.warps_m), low.const(plan.m // plan.warps_m)], I32) \
            if plan.warps_m > 1 else low.const(0)
    return low.op("mul", [low.digit(WARP * plan.warps_m, plan.warps_n), low.const(plan.n // plan.warps_n)], I32) \
        if plan.warps_n > 1 else low.const(0)


def _address(low: Lowering, op: SharedOperand, row: Value, col_bytes: Value) -> Value:
    """The shared address of (row, byte col_bytes within the row) of an operand tile."""
    offset = low.op("add", [low.op("mul", [row, low.const(op.stride)], I32), col_bytes], I32)
    return low.op("add", [op.base, low.op("cast", [offset], U32)], U32)


def _a_fragments(low: Lowering, plan: MmaPlan, a, s: int, i: int) -> list[list[Value]]:
    """The A fragments of m tile i at k step s: [registers], or [high, low] for tf32x3."""
    kind = plan.kind
    if isinstance(a, RegisterOperand):
        cols = plan.k // MMA_COLS
        regs = []
        for j8 in (2 * s, 2 * s + 1):
            first = (i * cols + j8) * 4
            r = a.regs[first:first + 4]
            regs += [_pack(low, kind.operand, r[0], r[1]), _pack(low, kind.operand, r[2], r[3])]
        return [regs]  # a0a1, a2a3 (row + 8), a4a5 (k + 8), a6a7
    if kind.sixteen_bit:  # lane l: the address of row l % 16, k chunk l / 16 (matrices a01 a23 a45 a67)
        row = low.op("add", [_warp_offset(low, plan, 0), low.digit(1, 16)], I32)
        addr = _address(low, a, row, low.op("mul", [low.digit(16, 2), low.const(16)], I32))
        offset = a.start + MMA_ROWS * i * a.stride + 2 * kind.k * s
        ld = low.b.op("ldmatrix", [addr], [ScalarType(DType.U32)] * 4, {"count": 4, "trans": False,
                                                                          "offset": offset})
        return [list(ld.results)]
    group, quad = _lane(low)
    row = low.op("add", [_warp_offset(low, plan, 0), group], I32)
    addr = _address(low, a, row, low.op("mul", [quad, low.const(4)], I32))
    values = []
    for half_k in (0, 1):
        for half_m in (0, 1):
            offset = a.start + (MMA_ROWS * i + 8 * half_m) * a.stride + (kind.k * s + 4 * half_k) * 4
            values.append(_ld_f32(low, addr, offset))
    return _tf32_fragments(low, plan, values)


def _b_fragments(low: Lowering, plan: MmaPlan, b: SharedOperand, s: int) -> list[list[list[Value]]]:
    """The B fragments of each n tile at k step s ([registers], or [high, low] for tf32x3)."""
    kind = plan.kind
    nt = plan.n_tiles
    if kind.sixteen_bit:  # lane l: the address of k row l % 16 of tile 2p + l / 16; .x2 for an odd last tile
        col = low.op("mul", [low.op("add", [_warp_offset(low, plan, 1),
                                            low.op("mul", [low.digit(16, 2), low.const(MMA_COLS)], I32)], I32),
                             low.const(2)], I32)
        addr = _address(low, b, low.digit(1, 16), col)
        frags = []
        for pair in range(0, nt, 2):
            count = 4 if pair + 1 < nt else 2
            offset = b.start + MMA_ROWS * s * b.stride + pair * MMA_COLS * 2
            regs = low.b.op("ldmatrix", [addr], [ScalarType(DType.U32)] * count,
                            {"count": count, "trans": True, "offset": offset}).results
            frags += [[list(regs[q:q + 2])] for q in range(0, count, 2)]
        return frags
    group, quad = _lane(low)
    col = low.op("mul", [low.op("add", [_warp_offset(low, plan, 1), group], I32), low.const(4)], I32)
    addr = _address(low, b, quad, col)
    return [_tf32_fragments(low, plan, [_ld_f32(low, addr, b.start + (kind.k * s + 4 * half) * b.stride
                                                 + j * MMA_COLS * 4) for half in (0, 1)])
            for j in range(nt)]


def _ld_f32(low: Lowering, addr: Value, offset: int) -> Value:
    return low.b.op("ld_shared", [addr], [F32], {"dtype": DType.F32, "vec": 1, "offset": offset,
                                                 "masked": False}).result


def _tf32_fragments(low: Lowering, plan: MmaPlan, values: list[Value]) -> list[list[Value]]:
    high = [low.op("tf32", [v], ScalarType(DType.U32)) for v in values]
    if plan.kind.products == 1:
        return [high]
    return [high, [low.op("tf32_low", [v, h], ScalarType(DType.U32)) for v, h in zip(values, high)]]


def _pack(low: Lowering, dtype: DType, lo: Value, hi: Value) -> Value:
    """Two f32 registers as one b32 of two 16-bit floats (the first in the low half)."""
    return low.op("pack_half2", [lo, hi], ScalarType(DType.U32), dtype=dtype)
