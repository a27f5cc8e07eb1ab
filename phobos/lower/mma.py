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
# 32-bit loads, rounded to TF32 (`round_tf32`: tf32 to nearest even, as
# `cvt.rn`; tf32x3: the high part by `cvt.rna` and the TF32 rounding of the
# remainder).  A 16-bit A operand held in the plan's
# A layout needs no shared memory: its registers, packed in pairs, are the
# fragments (a loop-invariant operand is packed once, by LICM).
#
# On sm_90a a product whose plan says "wgmma" runs `wgmma.mma_async` instead
# (`wgmma_compute`): each warpgroup issues one m64nNk16 (16-bit) or m64nNk8
# (tf32; three for tf32x3) per 64-row tile and k step, then commits the
# group; the caller waits for it (at once, or, in a pipelined K loop, one
# iteration later: pipeline.py).  16-bit operands are read from shared memory
# through 64-bit matrix descriptors in the 128-byte swizzled layout
# (`TileSpace`): A K-major, B N-major (imm-trans-b).  A tf32 kind computes
# C^T = B^T A^T (mma_plan.py): wgmma's A is B^T, from registers - B's
# fragments rounded there, or by the TMA copy that brought B (tf32x3: the
# high parts and the TF32 roundings of the rests), kept until the wait that
# covers the group - and its B is A,
# K-major in shared memory, rounded on its way there or in place
# (`store_operand`, `round_in_place`; tf32x3: the high parts, then the low
# parts) or by the TMA copy that brings it (pipeline.py).  The
# accumulators are wgmma's registers in place (isel ties them), and every
# thread fences its shared-memory writes for the asynchronous proxy
# (fence.proxy.async) before the barrier that precedes the wgmmas.
#
# A 16-bit A read from registers (`MmaPlan.registers_a`: attention's P) is
# packed into wgmma's A fragments - per warp mma.sync's, `_a_fragments` -
# all of a group's before its wgmma.fence, and the wait that covers the
# group holds them (`Instr.holds`): no instruction rewrites them while the
# group reads them.  A K-major operand of several 128-byte rows (attention's
# Q stored once and K^T at HEAD = 128) is read a box per row
# (`k_major_step`).
#
# `lower_dot` stages operands held in registers in the scratch buffer;
# pipeline.py copies loaded operands into its stages with cp.async and calls
# `finish` on them.  Either way, every k step of the product is unrolled.
from __future__ import annotations

from dataclasses import dataclass

from ..middle.ir import Op, Value
from ..types import DType, ScalarType
from .core import BOOL, I32, I64, SMEM_ALIGN, U32, Lowering, TileRegs, Transposed, access_groups, align, write_tile
from .layout import MMA_COLS, MMA_ROWS, WARP, WARPGROUP, WGMMA_ROWS, Layout
from .mma_plan import MmaKind, MmaPlan

F32 = ScalarType(DType.F32)


@dataclass(frozen=True)
class TileSpace:
    """How an operand tile of `rows` x `cols` elements of `eb` bytes lies in shared memory.

    Padded (`stride` > 0): row-major, rows `stride` bytes apart (mma.sync).
    Swizzled (`stride` 0): wgmma's canonical 128-byte-swizzled layout - boxes
    of 128 bytes of each row (64 16-bit elements, 32 f32), box after box;
    within a box, row r at 128 r, its 16-byte chunk c at chunk c ^ (r % 8).  A
    K-major tile of K = 128 bytes is one box; an N-major B tile is N / 64
    boxes.  Starts 1024-byte aligned (the swizzle repeats every 8 rows).
    `parts`: copies of that geometry one after another (tf32x3: the high
    parts, then the low parts).  `fragment_rows` (swizzled): within each 16
    rows, row r = 4t + 2h + b (b, h one bit, t two) lies at row 8h + 2t + b
    (`placed_row`), so that a K-major B so placed gives wgmma's accumulator
    column 8h + 2t + b the product's column r: its lane 4g + t then holds
    columns 4t .. 4t + 3 of each 16, the columns of an 8-bit A fragment
    (MmaPlan.fragment_columns).
    """

    rows: int
    cols: int
    eb: int
    stride: int
    parts: int = 1
    fragment_rows: bool = False

    @property
    def swizzled(self) -> bool:
        return self.stride == 0

    @property
    def row_period(self) -> int:
        """Rows whose offsets differ by a multiple of this lie the same way (the swizzle's 8 rows; 16 where
        the rows are placed in fragment order)."""
        return 16 if self.fragment_rows else 8

    def placed_row(self, low: Lowering, row: Value) -> Value:
        """The row at which tile row `row` lies: itself, or its place in fragment order."""
        if not self.fragment_rows:
            return row
        def bits(shift: int, mask: int, to: int) -> Value:
            field = low.op("and", [low.op("shr", [row, low.const(shift)], I32), low.const(mask)], I32)
            return low.op("shl", [field, low.const(to)], I32)
        kept = low.op("and", [row, low.const(~14)], I32)  # the group of 16, and b
        return low.op("or", [low.op("or", [kept, bits(2, 3, 1)], I32), bits(1, 1, 3)], I32)

    @property
    def box_bytes(self) -> int:
        return self.rows * SWIZZLE_BYTES

    @property
    def part_bytes(self) -> int:
        if self.swizzled:
            return -(-self.cols * self.eb // SWIZZLE_BYTES) * self.box_bytes
        return self.rows * self.stride

    @property
    def nbytes(self) -> int:
        return self.parts * self.part_bytes

    @property
    def alignment(self) -> int:
        return SWIZZLE_ATOM if self.swizzled else SMEM_ALIGN

    def delta(self, i: int, j: int) -> int | None:
        """offset(row + i, col + j) - offset(row, col) when that is the same for every (row, col) with
        col a 16-byte chunk's first element; None when it is not."""
        if not self.swizzled:
            return i * self.stride + j * self.eb
        per_box = SWIZZLE_BYTES // self.eb
        if i % self.row_period or j % per_box >= 16 // self.eb:
            return None
        return j // per_box * self.box_bytes + i * SWIZZLE_BYTES + j % per_box * self.eb

    def offset(self, low: Lowering, row: Value, col: Value) -> Value:
        """The byte offset of element (row, col) from the tile's start (i32)."""
        if not self.swizzled:
            return low.op("add", [low.op("mul", [row, low.const(self.stride)], I32),
                                  low.op("mul", [col, low.const(self.eb)], I32)], I32)
        per_box, per_chunk = SWIZZLE_BYTES // self.eb, 16 // self.eb
        row = self.placed_row(low, row)
        box = low.op("div", [col, low.const(per_box)], I32)
        within = low.op("rem", [col, low.const(per_box)], I32)
        chunk = low.op("xor", [low.op("div", [within, low.const(per_chunk)], I32),
                               low.op("rem", [row, low.const(8)], I32)], I32)
        parts = [low.op("mul", [box, low.const(self.box_bytes)], I32),
                 low.op("mul", [row, low.const(SWIZZLE_BYTES)], I32),
                 low.op("mul", [chunk, low.const(16)], I32),
                 low.op("mul", [low.op("rem", [within, low.const(per_chunk)], I32), low.const(self.eb)], I32)]
        total = parts[0]
        for part in parts[1:]:
            total = low.op("add", [total, part], I32)
        return total


SWIZZLE_BYTES = 128  # the width of a swizzled box
SWIZZLE_ATOM = 1024  # 8 rows of it: where the pattern repeats


@dataclass(frozen=True)
class SharedOperand:
    """An operand tile in shared memory, from byte `start` of `base`, laid out as `space` says; `transposed`:
    what lies there is the operand's transpose (a slice the product reads as trans(slice): A M-major, B
    K-major), `space` its geometry."""

    base: Value  # u32 shared address
    start: int
    space: TileSpace
    transposed: bool = False

    @property
    def stride(self) -> int:
        return self.space.stride


@dataclass(frozen=True)
class RegisterOperand:
    """An operand whose registers are its fragments: an A operand in the plan's A layout, or the B
    operand of a swapped product in its staging layout (B^T's wgmma fragments; `rounded`: TF32 values
    already, as a tf32 tensor map's copy leaves them)."""

    regs: list[Value]
    rounded: bool = False


def in_registers(plan: MmaPlan, operand: str) -> bool:
    """Whether the plan reads an operand ("a" or "b") loaded for it from registers, not shared memory."""
    return plan.swapped and operand == "b"


def operand_space(plan: MmaPlan, operand: str, rows: int, cols: int) -> TileSpace:
    """How an operand tile lies in shared memory for the plan's instruction.

    wgmma: swizzled (TileSpace), A K-major (two parts for tf32x3); B N-major
    (16-bit operands).  mma.sync, and the B a swapped product reads into its
    fragment registers: row-major with a row stride that is a multiple of 16
    bytes (cp.async and ldmatrix move 16-byte rows), padded so that the rows
    one fragment read touches fall in different banks: eight rows of 16 bytes
    for ldmatrix and for tf32 A (an odd number of 16-byte units), four rows of
    32 bytes for mma.sync's tf32 B (32 or 96 bytes past a multiple of 128);
    a swapped product's B an odd number of 16-byte units too (the four k rows
    a phase of lanes reads, its columns in the order of layout.py's swapped
    layouts).
    """
    eb = plan.kind.operand.nbytes
    if plan.instruction == "wgmma" and not in_registers(plan, operand):
        return TileSpace(rows, cols, eb, 0, parts=2 if plan.kind.products == 3 else 1,
                         fragment_rows=plan.fragment_columns and operand == "b")
    stride = align(cols * eb, 16)
    ok = (lambda s: s % 128 in (32, 96)) if operand == "b" and plan.kind.tf32 and not plan.swapped else \
        (lambda s: (s // 16) % 2 == 1)
    while not ok(stride):
        stride += 16
    return TileSpace(rows, cols, eb, stride)


def a_in_registers(low: Lowering, plan: MmaPlan, a: Value) -> bool:
    """Whether the product reads A from registers: always on wgmma with `registers_a` (moved into the A
    layout where it is not there), on mma.sync where A already is in the A layout."""
    return plan.registers_a or plan.a_layout is not None and low.tile(a).layout == plan.a_layout


def aligned_base(low: Lowering, nbytes: int, alignment: int) -> Value:
    """The scratch buffer's address rounded up to `alignment` (recording `nbytes` past it)."""
    base = low.smem(nbytes + (alignment - SMEM_ALIGN if alignment > SMEM_ALIGN else 0))
    if alignment <= SMEM_ALIGN:
        return base
    return low.op("and", [low.op("add", [base, low.const(alignment - 1, DType.U32)], U32),
                          low.const(-alignment % 2**32, DType.U32)], U32)


def lower_dot(low: Lowering, op: Op, plan: MmaPlan) -> None:
    """A tensor-core product: operands a pipelined loop staged are read from its stage; others, held
    in registers, are written to the scratch buffer - except an A operand whose registers are its
    fragments and a swapped product's B.  An 8-bit B is written K-major, as B^T (the transpose of
    trans(x) is x's registers as they are)."""
    a_v, b_v = op.operands[0], op.operands[1]
    a, b = low.staged.get(a_v), low.staged.get(b_v)
    k_major_b = plan.kind.eight_bit
    for v, staged in ((a_v, a), (b_v, b)):
        if staged is None and isinstance(low.vals[v], Transposed) and not (v is b_v and k_major_b):
            low.vals[v] = low.vals[v].moved(low, low.layouts[v], v.dtype.compute)  # a transpose in registers
    if a is None and a_in_registers(low, plan, a_v):
        a = RegisterOperand(_unrounded(low, plan, a_v))
    if b is None and in_registers(plan, "b"):
        b = RegisterOperand(low.in_layout(b_v, plan.staging_layouts[1]).regs)
    if a is None or b is None:
        spaces = {"a": operand_space(plan, "a", plan.m, plan.k) if a is None else None,
                  "b": (operand_space(plan, "b", plan.n, plan.k) if k_major_b else operand_space(plan, "b", plan.k, plan.n))
                  if b is None else None}
        starts, at = {}, 0
        for name, space in spaces.items():
            if space is not None:
                at = align(at, space.alignment)
                starts[name], at = at, at + space.nbytes
        base = aligned_base(low, at, max(sp.alignment for sp in spaces.values() if sp is not None))
        low.barrier()
        tiles = {"a": lambda: low.tile(a_v), "b": lambda: _b_transposed(low, b_v) if k_major_b else low.tile(b_v)}
        for name in ("a", "b"):
            if spaces[name] is not None:
                store_operand(low, tiles[name](), base, starts[name], spaces[name], plan)
        if plan.instruction == "wgmma":
            low.b.op("fence_proxy_async", [], [])  # the stores, seen by the tensor cores' reads
        low.barrier()
        if a is None:
            a = SharedOperand(base, starts["a"], spaces["a"])
        if b is None:
            b = SharedOperand(base, starts["b"], spaces["b"], transposed=k_major_b)
    finish(low, op, plan, a, b)


def _b_transposed(low: Lowering, b: Value) -> TileRegs:
    """B^T in registers without moving anything: the source of a transpose trans(x), or B's registers in the
    transposed layout."""
    held = low.vals[b]
    if isinstance(held, Transposed):
        return held.source
    t = low.tile(b)
    return TileRegs(t.layout.transposed(), t.regs)


def _unrounded(low: Lowering, plan: MmaPlan, a: Value) -> list[Value]:
    """The registers of A operand `a` in the plan's A layout; for a conversion of an f32 tile to the operand's
    16-bit dtype (attention's bf16(P); f8e4m3(P)) held there, those of the f32 tile: packing rounds them
    alike, and the conversion's own rounding is then left unused (and removed)."""
    source = a.owner.operands[0] if isinstance(a.owner, Op) and a.owner.opcode == "cast" else None
    if source is not None and source.dtype is DType.F32 and low.tile(source).layout == plan.a_layout:
        return low.tile(source).regs
    return low.in_layout(a, plan.a_layout).regs


def store_operand(low: Lowering, t: TileRegs, base: Value, start: int, space: TileSpace, plan: MmaPlan) -> None:
    """Store operand tile `t` of a product into shared memory at byte `start` of `base`, laid out as `space`
    says: as it is, or - tf32 kinds on wgmma - rounded to TF32 (tf32x3: the high parts, then the TF32
    roundings of the rests, a part further), in 16-byte vectors along the rows where the layout holds
    them (`swizzled_accesses`)."""
    if not plan.kind.tf32 or not space.swizzled:
        store_tile(low, t, base, start, space, plan.kind.operand)
        return
    owner = low.owner(t.layout)
    for group, address, offset, pred in swizzled_accesses(low, t.layout, base, start, space):
        _store_rounded(low, [t.regs[g] for g in group], address, offset, low.all_of([pred, owner]), space,
                       plan.kind)


def round_in_place(low: Lowering, layout: Layout, base: Value, start: int, space: TileSpace,
                   kind: MmaKind) -> None:
    """Round to TF32 the f32 elements of a tile in `layout` that lie in the swizzled `space` from byte
    `start` of `base` as they are (tf32x3: the TF32 roundings of the rests a part further), chunk by
    chunk: read, rounded and written back, one replica of each element."""
    owner = low.owner(layout)
    for group, address, offset, pred in swizzled_accesses(low, layout, base, start, space):
        pred = low.all_of([pred, owner])
        _store_rounded(low, low.ld_shared_at(address, DType.F32, len(group), pred, offset), address, offset, pred,
                       space, kind)


def _store_rounded(low: Lowering, values: list[Value], address: Value, offset: int, pred: Value | None,
                   space: TileSpace, kind: MmaKind) -> None:
    """Store f32 `values` rounded to TF32 as one access (tf32x3: the roundings of the rests a part further)."""
    high = [round_tf32(low, v, kind) for v in values]
    parts = [high] + ([[low.op("tf32_low", [v, h], U32) for v, h in zip(values, high)]] if space.parts == 2 else [])
    for p, regs in enumerate(parts):
        low.b.op("st_shared", [address, *regs] + ([pred] if pred is not None else []),
                 [], {"dtype": DType.U32, "vec": len(regs), "offset": offset + p * space.part_bytes,
                      "masked": pred is not None})


def round_tf32(low: Lowering, v: Value, kind: MmaKind) -> Value:
    """f32 `v` rounded to TF32 as `kind` rounds its operands (the b32 pattern): tf32x3's high parts to
    nearest, ties away (cvt.rna); tf32 to nearest, ties to even - cvt.rn from sm_90 on (wgmma's targets
    here), before it integer arithmetic: add 0xFFF and the lowest kept bit, drop the 13 low bits (past
    the largest TF32: an infinity), NaN the canonical 0x7FFFFFFF."""
    if kind.rounding == "rna" or low.wgmma:
        return low.op("tf32", [v], U32, mode=kind.rounding)
    bits = low.op("bitcast", [v], U32)
    odd = low.op("and", [low.op("shr", [bits, low.const(13, DType.U32)], U32), low.const(1, DType.U32)], U32)
    up = low.op("add", [low.op("add", [bits, low.const(0xFFF, DType.U32)], U32), odd], U32)
    rounded = low.op("and", [up, low.const(0xFFFFE000, DType.U32)], U32)
    nan = low.op("cmp", [low.op("and", [bits, low.const(0x7FFFFFFF, DType.U32)], U32),
                         low.const(0x7F800000, DType.U32)], BOOL, pred="gt")
    return low.op("select", [nan, low.const(0x7FFFFFFF, DType.U32), rounded], U32)


def read_swizzled(low: Lowering, layout: Layout, base: Value, start: int, space: TileSpace,
                  dtype: DType = DType.F32, when: Value | None = None) -> list[Value]:
    """The registers of a tile of 32-bit `dtype` in `layout` read from the swizzled `space` from byte
    `start` of `base` (every replica reads; only where `when` holds, zeros elsewhere)."""
    regs: list[Value | None] = [None] * layout.nregs
    for group, address, offset, pred in swizzled_accesses(low, layout, base, start, space):
        pred = low.all_of([pred, when])
        for r, value in zip(group, low.ld_shared_at(address, dtype, len(group), pred, offset)):
            regs[r] = value
    return regs


def swizzled_accesses(low: Lowering, layout: Layout, base: Value, start: int, space: TileSpace):
    """(register slots, shared address, byte offset from it, predicate) of each access to a tile in
    `layout` lying in the swizzled `space` from byte `start` of `base`: vectors along the rows, as wide as
    the aligned runs of columns the layout holds (16 bytes at most: a chunk).  Each distinct (row % 8,
    column within the box) of the thread's elements gets an address of its own; the rest are immediate
    offsets."""
    per_chunk, per_box = 16 // space.eb, SWIZZLE_BYTES // space.eb
    at = {off: r for r, off in enumerate(layout.offsets)}
    width = per_chunk
    while width > 1 and not (all(term.scale % width == 0 for term in layout.terms[1]) and
                             all((row, col - col % width + x) in at for row, col in at for x in range(width))):
        width //= 2
    thread_row, thread_col = (low.thread_coord(layout.terms[d]) for d in (0, 1))
    addresses: dict[tuple[int, int], Value] = {}
    out = []
    for (row, col), r in sorted(at.items()):
        if col % width:
            continue
        group = [at[(row, col + x)] for x in range(width)]
        key = (row % space.row_period, col % per_box)
        if key not in addresses:
            offset = space.offset(low, low.op("add", [thread_row, low.const(key[0])], I32),
                                  low.op("add", [thread_col, low.const(key[1])], I32))
            addresses[key] = low.op("add", [base, low.op("cast", [offset], U32)], U32)
        pred = low.all_of([low.slot_valid(layout, g) for g in group])
        out.append((group, addresses[key], start + space.delta(row - key[0], col - key[1]), pred))
    return out


def store_tile(low: Lowering, t: TileRegs, base: Value, start: int, space: TileSpace, dtype: DType) -> None:
    """Store a 2-D tile into shared memory at byte `start` of `base`, laid out as `space` says."""
    if not space.swizzled:
        write_tile(low, t, base, start, space.stride // space.eb, space.eb, dtype)
        return
    layout = t.layout
    owner = low.owner(layout)
    width = layout.vector_width()
    while width * space.eb > 16:
        width //= 2
    for group in access_groups(layout, width):
        row, col = (low.coord(layout, group[0], d) for d in (0, 1))
        pred = low.all_of([low.slot_valid(layout, group[0]), owner])
        addr = low.op("add", [base, low.op("cast", [space.offset(low, row, col)], U32)], U32)
        low.st_shared(addr, low.const(0), space.eb, [t.regs[r] for r in group], dtype, pred, offset=start)


def finish(low: Lowering, op: Op, plan: MmaPlan, a, b: SharedOperand) -> None:
    """The product of `op` from its operands into its result (accumulating into a third operand)."""
    if op.attrs.get("promote"):  # 8-bit: the sums from zero, added to acc in f32, chunk by chunk
        promoted = _promoted_wgmma if plan.instruction == "wgmma" else _promoted_compute
        product = promoted(low, plan, a, b, low.in_layout(op.operands[2], plan.layout).regs)
    elif plan.instruction == "wgmma":
        acc = low.in_layout(op.operands[2], plan.layout).regs if len(op.operands) == 3 else None
        apart = plan.kind.products == 3 and acc is not None  # tf32x3: summed apart, as mma.sync does
        product, fragments = wgmma_compute(low, plan, a, b, None if apart else acc)
        overlap, low.while_wgmma = low.while_wgmma, None
        if overlap is not None:
            overlap()
        low.b.op("wgmma_wait", fragments, [], {"pending": low.wgmma_in_flight.get(op, 0)})
        if apart:
            product = [low.op("add", [x, y], F32) for x, y in zip(acc, product)]
    elif len(op.operands) == 2:
        product = compute(low, plan, a, b, [low.const(plan.kind.zero, plan.kind.accumulator)] * plan.layout.nregs)
    elif plan.kind.products == 1:
        product = compute(low, plan, a, b, low.in_layout(op.operands[2], plan.layout).regs)
    else:  # tf32x3: the tensor cores' sums round toward zero; they stay within one product, added to acc as f32
        acc = low.in_layout(op.operands[2], plan.layout).regs
        zero = [low.const(0.0, DType.F32)] * plan.layout.nregs
        product = [low.op("add", [x, y], F32) for x, y in zip(acc, compute(low, plan, a, b, zero))]
    result = TileRegs(plan.layout, product)
    layout = low.layouts[op.result]
    if layout != plan.layout:
        result = TileRegs(layout, low.relayout(result, layout, plan.kind.accumulator))
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
                    c = list(low.b.op("mma", [*fa, *fb, *c], [ScalarType(kind.accumulator)] * 4,
                                      {"shape": kind.shape, "type": kind.ptx}).results)
                acc[first:first + 4] = c
    return acc


def _promoted_compute(low: Lowering, plan: MmaPlan, a, b: SharedOperand, acc: list[Value]) -> list[Value]:
    """acc + A @ B with mma.sync, each 16 x 8 tile's product summed from zero over the k steps and then added to
    acc in f32 (a promoting product): the A fragments of every k step first, then per pair of 8-column tiles
    its B fragments step by step into four registers a tile, added once the pair's steps are done."""
    acc, kind = list(acc), plan.kind
    steps, nt = plan.k // kind.k, plan.n_tiles
    a_frags = {(s, i): _a_fragments(low, plan, a, s, i) for s in range(steps) for i in range(plan.m_tiles)}
    for pair in range(0, nt, 2):
        sums: dict[tuple[int, int], list[Value]] = {}
        for s in range(steps):
            b_frags = _b_fragments(low, plan, b, s, [pair])
            for i in range(plan.m_tiles):
                for j, fb in zip(range(pair, nt), b_frags):
                    c = sums.get((i, j), [low.const(0.0, DType.F32)] * 4)
                    for fa, fbp in _products(a_frags[s, i], fb):
                        c = list(low.b.op("mma", [*fa, *fbp, *c], [F32] * 4,
                                          {"shape": kind.shape, "type": kind.ptx}).results)
                    sums[i, j] = c
        for (i, j), c in sums.items():
            first = (i * nt + j) * 4
            acc[first:first + 4] = [low.op("add", [x, y], F32) for x, y in zip(acc[first:first + 4], c)]
    return acc


PROMOTED_COLUMNS = 128  # the columns of one chunk of a promoting wgmma product (n >= 128 keeps wgmma fed)
PROMOTED_REGISTERS = 192  # acc and the chunks' sums a consumer thread may hold (setmaxnreg's 232 less addresses)


def _promoted_wgmma(low: Lowering, plan: MmaPlan, a, b: SharedOperand, acc: list[Value]) -> list[Value]:
    """acc + A @ B with wgmma, the product summed from zero and added to acc in f32 (a promoting product): per
    64-row tile and chunk of PROMOTED_COLUMNS columns of the warpgroup's N a group of its own into registers
    of its own (scale-d 0), then added to acc.  Where acc and two chunks' sums fit PROMOTED_REGISTERS, a
    chunk is waited for while the next one's group runs; else (a warpgroup N of 256: 128 registers of acc)
    each is waited for at once, and the other consumer warpgroups' groups keep the tensor cores busy while
    it is added (two sets there made ptxas spill 452 bytes a thread at 128 x 256 tiles, one none)."""
    acc = list(acc)
    width = min(plan.wgmma_n, PROMOTED_COLUMNS)
    overlapped = len(acc) + width <= PROMOTED_REGISTERS  # two chunks of width / 2 registers beside acc
    chunks = [(i, c) for i in range(plan.wgmma_m_tiles) for c in range(0, plan.wgmma_n, width)]
    waiting: list[tuple[list[int], list[Value]]] = []
    for n, (i, c) in enumerate(chunks):
        sums, _ = wgmma_compute(low, plan, a, b, None, tiles=[i], columns=(c, width))
        registers = plan.wgmma_accumulators(i)[c // 2:(c + width) // 2]
        waiting.append((registers, [sums[r] for r in registers]))
        last = n == len(chunks) - 1 or not overlapped
        done, waiting = (waiting, []) if last else (waiting[:-1], waiting[-1:])
        if done:
            low.b.op("wgmma_wait", [], [], {"pending": 0 if last else 1})
        for registers, values in done:
            for r, x in zip(registers, values):
                acc[r] = low.op("add", [acc[r], x], F32)
    return acc


def wgmma_compute(low: Lowering, plan: MmaPlan, a, b, acc: list[Value] | None, tiles: list[int] | None = None,
                  columns: tuple[int, int] | None = None) -> tuple[list[Value], list[Value]]:
    """acc + A @ B with wgmma (A @ B when acc is None: each tile's first wgmma starts from zero, its
    scale-d 0): each warpgroup its block, one wgmma per 64-row tile and k step (tf32x3:
    three, low x high, high x low, high x high, as mma.sync runs them), then a commit.  16-bit operands
    are swizzled tiles (TileSpace), A K-major, B N-major (imm-trans-b) or K-major; 8-bit ones both
    K-major; a swapped product's A (wgmma's B) is one K-major and its B (wgmma's A) the registers of B^T's
    fragments (rounded here unless they are already; tf32x3: split here).  Only the 64-row `tiles` given,
    and of a K-major B only `columns` (first, count) of the warpgroup's N, where they are given.  Returns
    the accumulators and the fragment registers the group reads: the caller's wait (wgmma_wait) keeps them
    and must come before the result is used."""
    kind = plan.kind
    group_m = low.digit(WARPGROUP, plan.warps_m)
    group_n = low.digit(WARPGROUP * plan.warps_m, plan.warps_n)
    step_bytes = kind.k * kind.operand.nbytes  # a k step's part of a K-major row
    if plan.swapped:  # wgmma's B is A, K-major: the warpgroup's first row of it; its A B^T's fragments
        shared = a
        desc_b = _descriptor(low, a, low.op("mul", [group_n, low.const(plan.wgmma_n * SWIZZLE_BYTES)], I32),
                             leading=16)
        fragments = [b.regs] if b.rounded else _tf32_fragments(low, plan, b.regs)  # [high] or [high, low]
    else:  # B N-major: its first box of columns; A K-major, the warpgroup's first row (transposed slices:
        # B K-major, its first row; A M-major, its first box of columns), or A's fragments from registers
        shared = b
        desc_b = _major_descriptor(low, b, group_n, plan.wgmma_n, not b.transposed)
        if not plan.registers_a:
            desc_a = _major_descriptor(low, a, group_m, plan.m // plan.warps_m, a.transposed)
    tiles = range(plan.wgmma_m_tiles) if tiles is None else tiles
    # A's fragments from registers, packed before the group's wgmma.fence (they are registers it reads)
    packed = {(s, i): _a_fragments(low, plan, a, s, i)[0] for s in range(plan.k // kind.k) for i in tiles} \
        if plan.registers_a else {}
    pairs = [(1, 0), (0, 1), (0, 0)] if kind.products == 3 else [(0, 0)]  # (A part, B part): 1 the low parts
    acc = list(acc) if acc is not None else [None] * plan.layout.nregs
    accumulators = [plan.wgmma_accumulators(i) for i in range(plan.wgmma_m_tiles)]
    n = plan.wgmma_n
    if columns is not None:  # K-major B: rows of 128 bytes
        assert not plan.swapped and b.transposed, "columns of a K-major B alone"
        first, n = columns
        desc_b = _plus(low, desc_b, first * SWIZZLE_BYTES >> 4)
        accumulators = [registers[first // 2:(first + n) // 2] for registers in accumulators]
    for s in range(plan.k // kind.k):
        k_major = k_major_step(shared.space, step_bytes, s)
        db = _plus(low, desc_b, (k_major if plan.swapped or b.transposed else kind.k * s * SWIZZLE_BYTES) >> 4)
        for i in tiles:
            for pa, pb in pairs:
                if plan.swapped:  # wgmma's A: part pb of B^T's fragments; its B: part pa of A
                    operands = [*(fragments[pb][r] for r in plan.wgmma_fragments(s, i)),
                                _plus(low, db, pa * shared.space.part_bytes >> 4)]
                elif plan.registers_a:  # A's fragments of tile i and k step s
                    operands = [*packed[s, i], db]
                else:  # A K-major: tile i's rows, k step s's bytes; M-major: tile i's box, k step s's rows
                    at = i * WGMMA_ROWS * kind.operand.nbytes // SWIZZLE_BYTES * a.space.box_bytes \
                        + kind.k * s * SWIZZLE_BYTES if a.transposed else \
                        i * WGMMA_ROWS * SWIZZLE_BYTES + k_major_step(a.space, step_bytes, s)
                    da = _plus(low, desc_a, at >> 4)
                    operands = [_plus(low, da, pa * a.space.part_bytes >> 4),
                                _plus(low, db, pb * shared.space.part_bytes >> 4)]
                registers = accumulators[i]
                zero = acc[registers[0]] is None
                results = low.b.op(
                    "wgmma", [*operands, *([] if zero else (acc[r] for r in registers))], [F32] * len(registers),
                    {"n": n, "k": kind.k, "type": kind.ptx, "registers_a": plan.swapped or plan.registers_a,
                     "zero": zero, "fence": s == 0 and i == tiles[0] and (pa, pb) == pairs[0],
                     "trans": (int(not plan.swapped and not plan.registers_a and a.transposed),
                               int(not plan.swapped and not b.transposed))
                     }).results
                for r, result in zip(registers, results):
                    acc[r] = result
    low.b.op("wgmma_commit", [], [])
    return acc, [r for part in fragments for r in part] if plan.swapped else [r for f in packed.values() for r in f]


def k_major_step(space: TileSpace, step_bytes: int, s: int) -> int:
    """The byte offset of k step `s` (of `step_bytes`) in a K-major swizzled tile: past the 128-byte boxes of
    the steps before, then into the box's rows (K beyond one row: a box a 64-element chunk of 16-bit K)."""
    at = step_bytes * s
    return at // SWIZZLE_BYTES * space.box_bytes + at % SWIZZLE_BYTES


def _major_descriptor(low: Lowering, operand: SharedOperand, group: Value, extent: int, mn_major: bool) -> Value:
    """The descriptor of warpgroup `group`'s part (`extent` rows of the product's M or N) of a 16-bit
    operand: MN-major (N-major B, or a transposed slice's M-major A), its first box of columns, the next
    box a leading offset away; K-major, its first row."""
    if mn_major:
        boxes = extent * operand.space.eb // SWIZZLE_BYTES
        return _descriptor(low, operand, low.op("mul", [group, low.const(boxes * operand.space.box_bytes)], I32),
                           leading=operand.space.box_bytes)
    return _descriptor(low, operand, low.op("mul", [group, low.const(extent * SWIZZLE_BYTES)], I32), leading=16)


#: The bits of a shared address that a matrix descriptor's start address field holds (bits 4 to 17, as
#: address / 16 in 14 bits).  A CTA's shared addresses may have bits above them: in a cluster, those of
#: the CTA's rank (the .shared::cta window lies inside the .shared::cluster one), which would otherwise
#: carry into the leading byte offset.
DESCRIPTOR_ADDRESS_BITS = (1 << 14) - 1


def _descriptor(low: Lowering, operand: SharedOperand, offset: Value, leading: int) -> Value:
    """The 64-bit shared-memory matrix descriptor of a swizzled tile from `offset` bytes into it:
    start address / 16 (its low 14 bits: DESCRIPTOR_ADDRESS_BITS), the leading byte offset (the next
    box), the stride byte offset (the next 8 rows: 1024) and the 128-byte swizzle mode."""
    addr = low.op("add", [operand.base, low.op("cast", [low.op("add", [offset, low.const(operand.start)], I32)], U32)],
                  U32)
    start = low.op("cast", [low.op("and", [low.op("shr", [addr, low.const(4, DType.U32)], U32),
                                           low.const(DESCRIPTOR_ADDRESS_BITS, DType.U32)], U32)], I64)
    template = (1 << 62) | ((SWIZZLE_ATOM >> 4) << 32) | ((leading >> 4) << 16)
    return low.op("add", [start, low.const(template, DType.I64)], I64)


def _plus(low: Lowering, desc: Value, units: int) -> Value:
    return desc if units == 0 else low.op("add", [desc, low.const(units, DType.I64)], I64)


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
    if isinstance(a, RegisterOperand) and kind.operand.is_f8:  # mma_a8_layout: four codes a register
        first = (i * plan.k // 16 + 2 * s) * 8
        r = a.regs[first:first + 16]
        return [[low.op("pack_f8x4", r[q:q + 4], ScalarType(DType.U32), dtype=kind.operand) for q in (0, 4, 8, 12)]]
    if isinstance(a, RegisterOperand):
        cols = plan.k // MMA_COLS
        regs = []
        for j8 in (2 * s, 2 * s + 1):
            first = (i * cols + j8) * 4
            r = a.regs[first:first + 4]
            regs += [_pack(low, kind.operand, r[0], r[1]), _pack(low, kind.operand, r[2], r[3])]
        return [regs]  # a0a1, a2a3 (row + 8), a4a5 (k + 8), a6a7
    if kind.sixteen_bit and a.transposed:  # A^T row-major (k rows): lane l the k row l % 8 of matrix l / 8,
        # which holds m + 8 (l / 8 % 2), k + 8 (l / 16); .trans gives each the A fragment's orientation
        row = low.op("add", [low.digit(1, 8), low.op("mul", [low.digit(16, 2), low.const(8)], I32)], I32)
        col = low.op("add", [_warp_offset(low, plan, 0), low.op("mul", [low.digit(8, 2), low.const(8)], I32)], I32)
        addr = _address(low, a, row, low.op("mul", [col, low.const(2)], I32))
        offset = a.start + kind.k * s * a.stride + 2 * MMA_ROWS * i
        ld = low.b.op("ldmatrix", [addr], [ScalarType(DType.U32)] * 4, {"count": 4, "trans": True, "offset": offset})
        return [list(ld.results)]
    if not kind.tf32:  # lane l: the address of row l % 16, 16-byte k chunk l / 16 (matrices a01 a23 a45 a67;
        # 8-bit: a0..a3, a4..a7, a8..a11, a12..a15 - four codes a register, the same bytes)
        row = low.op("add", [_warp_offset(low, plan, 0), low.digit(1, 16)], I32)
        addr = _address(low, a, row, low.op("mul", [low.digit(16, 2), low.const(16)], I32))
        offset = a.start + MMA_ROWS * i * a.stride + kind.operand.nbytes * kind.k * s
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


def _b_fragments(low: Lowering, plan: MmaPlan, b: SharedOperand, s: int,
                 pairs: list[int] | None = None) -> list[list[list[Value]]]:
    """The B fragments of each n tile at k step s ([registers], or [high, low] for tf32x3); of a transposed
    16- or 8-bit B, only those of the pairs of tiles that start at `pairs`, where given."""
    kind = plan.kind
    nt = plan.n_tiles
    if not kind.tf32 and b.transposed:  # B^T row-major (n rows): lane l the n row l % 8 of tile 2p + l / 16,
        # 16-byte k chunk l / 8 % 2; each 8 x 8 matrix (of b16) as it lies is a B fragment register (8-bit: four
        # codes, k 4t..4t+3 of the chunk); .x2 for an odd last tile
        row = low.op("add", [_warp_offset(low, plan, 1), low.op("add", [low.digit(1, 8), low.op(
            "mul", [low.digit(16, 2), low.const(MMA_COLS)], I32)], I32)], I32)
        addr = _address(low, b, row, low.op("mul", [low.digit(8, 2), low.const(16)], I32))
        frags = []
        for pair in range(0, nt, 2) if pairs is None else pairs:
            count = 4 if pair + 1 < nt else 2
            offset = b.start + pair * MMA_COLS * b.stride + kind.operand.nbytes * kind.k * s
            regs = low.b.op("ldmatrix", [addr], [ScalarType(DType.U32)] * count,
                            {"count": count, "trans": False, "offset": offset}).results
            frags += [[list(regs[q:q + 2])] for q in range(0, count, 2)]
        return frags
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
    high = [round_tf32(low, v, plan.kind) for v in values]
    if plan.kind.products == 1:
        return [high]
    return [high, [low.op("tf32_low", [v, h], ScalarType(DType.U32)) for v, h in zip(values, high)]]


def _pack(low: Lowering, dtype: DType, lo: Value, hi: Value) -> Value:
    """Two f32 registers as one b32 of two 16-bit floats (the first in the low half)."""
    return low.op("pack_half2", [lo, hi], ScalarType(DType.U32), dtype=dtype)
