# Which products run on the tensor cores, and how: decided from the whole
# tile-level function before any code is written (placement.py needs the
# layouts the decisions imply, mma.py and pipeline.py the decisions).
#
# A `dot` is a tensor-core product when its operands are bf16 or f16, or
# f8e4m3 or f8e5m2, or f32 with precision "tf32" or "tf32x3", or i32 tiles
# loaded from i8 tensors (s8 values: `holds_s8`) (`MMA_KINDS`), the target
# has `mma.sync` of them (sm_80 and newer; 8-bit floats sm_89), and its tile
# shape is whole instruction tiles: M a multiple of 16, N of 8 and K of the
# instruction's k (16 for 16-bit operands, 32 for 8-bit ones, 8 for tf32).
# Otherwise it runs on the CUDA cores, and a note names the dot and the
# reason (a tensor-core kind that falls back: narrow operands are exact in
# f32, so the products are exact there too, and the sums are f32's fused
# multiply-adds; tf32 kinds are computed in full f32 there, more accurately
# than asked; i32 products are exact and wrap alike on both).  The tensor
# cores read 8-bit operands K-major only (mma.sync's and wgmma's 8-bit forms
# have no transposed operands): a loaded slice an 8-bit float product would
# read otherwise - B [K, N] as it lies, or A as trans(slice) - is a located
# error saying how to give it (B as [N, K] and trans(...)); an s8 product so
# loaded runs on the CUDA cores, as i32 products always did, its note saying
# how to give it; an operand computed in registers is stored K-major.  s8
# products run mma.sync only (wgmma's s8 forms are not used yet).
#
# On sm_90a a product whose operands are both slices loaded beside it for it
# alone (a K loop's: the pipeline streams them into shared memory), whose K
# is one 128-byte row of an operand in the 128-byte swizzled layout wgmma
# reads (64 16-bit elements, 32 f32) and whose warps make whole warpgroups
# that tile it by 64-row blocks and column blocks of at most 256 (multiples
# of 64 for 16-bit operands, which wgmma reads N-major) runs `wgmma.mma_async`
# instead (`instruction` "wgmma"): the warpgroups form a grid over the
# product.  wgmma reads tf32 operands in shared memory K-major only, and the
# tensor cores truncate them where dot rounds, so a tf32 kind computes the
# product's transpose, C^T = B^T A^T (`swapped`): wgmma's A operand is B^T,
# its fragments read from B into registers and rounded there (or, in a K
# loop copied by TMA, B^T stored into shared memory K-major by a producer
# warpgroup from B's rounding copy: pipeline.py); its B operand is A, rounded on its way to
# shared memory (in place, in a K loop's stage, or by its TMA copy), where it
# lies K-major as it is in memory.  The warpgroups then tile C^T (64-row
# tiles along N, wgmma's N along M: multiples of 8), and the plan names the
# layouts the operands are loaded in (`staging_layouts`).  A 16-bit product
# whose B alone is a slice loaded beside it runs wgmma too, its A either a
# tile computed in registers, read as wgmma's register fragments in the A
# layout (`registers_a`: the accumulators of wgmma and of mma.sync are per
# warp the same, so the scores' registers are P's fragments, as attention's P
# V reads them), or a slice loaded just before the loop the product is in
# (`once_a`: attention's Q), which the pipeline copies into shared memory
# once, K-major, at the loop's start (pipeline.py's `Resident`; a slice
# loaded further out moves to just before the loop first; either only where
# no tensor is written from the load to there: `_deferrable`).  Its K is then any
# number of 128-byte rows of a K-major operand in shared memory (a wgmma per
# k16 step of each row's box: attention's K^T at HEAD = 128, 256), or of k16
# steps (A from registers, B N-major).  A head size not a multiple of 64 (no
# whole rows, no whole boxes of N), warps not whole warpgroups and the other
# targets keep mma.sync; with one 64-row tile a warpgroup the two
# instructions' accumulator layouts are the same (layout.wgmma_layout), so a
# product on one feeds a product on the other in place.  An 8-bit float product
# whose B alone is a slice loaded beside it does the same (B K-major, K whole
# 128-byte rows); its A fragments from registers hold columns 4t .. 4t + 3 of
# each 16 where wgmma's accumulators hold 2t, 2t + 1, 8 + 2t, 9 + 2t, so the
# product whose result it reads through element-wise ops is asked for with
# its columns in the fragments' order (`fragment_columns`: fp8 attention's S,
# whose K rows are staged in that order), one 64-row tile a warpgroup.
# Otherwise the warps
# of the CTA form a warps_m x warps_n grid over the product (`MmaPlan`); each
# warp computes its block as 16 x 8 tiles with mma.sync.  The grid is
# chosen to load the fewest fragments per k step (balanced warp blocks), or
# with one warp column when the product's rows matter as a whole: when its A
# operand is computed in registers (the warps then read it from their own
# registers), or its result feeds a row reduction or another product's A
# operand (softmax and P V of attention stay within each warp).
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from ..errors import UnsupportedError
from ..middle.ir import ELEMENTWISE, Block, Function, Op, Value, walk, writes_memory
from ..types import DType
from .layout import (MMA_COLS, MMA_ROWS, WARP, WARPGROUP, WGMMA_ROWS, Layout, copy_layout, mma_a8_layout,
                     mma_layout, swapped_fragment_layout, swapped_wgmma_layout, wgmma_layout)

WGMMA_ROW_BYTES = 128  # a wgmma product's K, in bytes of an operand: one row of the 128-byte swizzle
WGMMA_MAX_N = 256

ELEMENTWISE_LIKE = {"add", "sub", "mul", "div", "min", "max", "neg", "abs", "select", "cast", "exp", "exp2", "fma",
                    "broadcast"}


@dataclass(frozen=True)
class MmaKind:
    """One way of running a product on the tensor cores."""

    name: str  # as dot's precision names it, or the operand dtype
    operand: DType  # the operands' element dtype in shared memory
    k: int  # the instruction's k: m16n8k16 or m16n8k8
    ptx: str  # the PTX operand type
    products: int  # 1, or 3 for tf32x3 (split operands)
    rounding: str = ""  # how f32 operands become TF32: "rn" (nearest, ties to even: dot's tf32), "rna"
    # (ties away: tf32x3's high parts, whose rests make up the difference)
    accumulator: DType = DType.F32  # the accumulators' dtype (i32: s32 sums, exact and wrapping)

    @property
    def ptx_accumulator(self) -> str:
        """The PTX type of the accumulators."""
        return "s32" if self.integer else "f32"

    @property
    def integer(self) -> bool:
        return self.accumulator is DType.I32

    @property
    def zero(self) -> int | float:
        """The accumulators' zero, as a constant of their dtype."""
        return 0 if self.integer else 0.0

    @property
    def eight_bit(self) -> bool:
        """8-bit operands (floats or s8): four a register, read K-major only."""
        return self.operand.nbytes == 1

    @property
    def shape(self) -> str:
        return f"m16n8k{self.k}"

    @property
    def sixteen_bit(self) -> bool:
        return self.operand.is_half

    @property
    def tf32(self) -> bool:
        """An f32 product rounded to TF32 (swapped on wgmma: its operands are rounded on their way)."""
        return self.ptx == "tf32"

    @property
    def wgmma_k(self) -> int:
        """The K of a product wgmma runs: one 128-byte swizzled row of the operand."""
        return WGMMA_ROW_BYTES // self.operand.nbytes


MMA_KINDS = {
    "bf16": MmaKind("bf16", DType.BF16, 16, "bf16", 1),
    "f16": MmaKind("f16", DType.F16, 16, "f16", 1),
    "f8e4m3": MmaKind("f8e4m3", DType.F8E4M3, 32, "e4m3", 1),
    "f8e5m2": MmaKind("f8e5m2", DType.F8E5M2, 32, "e5m2", 1),
    "tf32": MmaKind("tf32", DType.F32, 8, "tf32", 1, "rn"),
    "tf32x3": MmaKind("tf32x3", DType.F32, 8, "tf32", 3, "rna"),
    "s8": MmaKind("s8", DType.I8, 32, "s8", 1, accumulator=DType.I32),
}


@dataclass(frozen=True)
class MmaPlan:
    """A product [M, K] x [K, N] on the tensor cores: its instruction and warp grid."""

    kind: MmaKind
    m: int
    n: int
    k: int
    warps_m: int  # for wgmma: warpgroups
    warps_n: int
    threads: int
    instruction: str = "mma"  # or "wgmma"
    swapped: bool = False  # wgmma computes C^T = B^T A^T; warps_m, warps_n then group C^T's rows, columns
    # (A, B): the operand is the transpose of a slice loaded for it (`trans(x[...])`, 16-bit kinds), staged as
    # the slice lies - A M-major, B K-major - and read so (ldmatrix of the other orientation, wgmma's
    # transpose bits)
    transposed: tuple[bool, bool] = (False, False)
    # wgmma (16-bit, not swapped) whose B alone is a slice loaded beside it: A is a tile computed in registers,
    # read from them in the plan's A layout (`a_layout`: attention's P, the scores' registers) - or (`once_a`)
    # a slice loaded before the loop, copied once into shared memory K-major at its start, the load done
    # there (attention's Q: pipeline.py's `Resident`, core.Lowering's `resident_loads`)
    registers_a: bool = False
    once_a: bool = False
    # wgmma of 8-bit operands, one 64-row tile a warpgroup, whose result an 8-bit product reads (through
    # element-wise ops) as its A from registers (attention_fp8's S, whose P feeds P V): the result's columns
    # in the order of an 8-bit A fragment's (`layout`: mma_a8_layout), B's rows staged in that order
    # (TileSpace.fragment_rows), so that P's registers are its fragments as they are
    fragment_columns: bool = False

    @property
    def m_tiles(self) -> int:
        """16-row tiles per warp."""
        return self.m // self.warps_m // MMA_ROWS

    @property
    def n_tiles(self) -> int:
        """8-column tiles per warp."""
        return self.n // self.warps_n // MMA_COLS

    @property
    def wgmma_shape(self) -> tuple[int, int]:
        """The [rows, columns] of the product wgmma computes: C's, or C^T's when swapped."""
        return (self.n, self.m) if self.swapped else (self.m, self.n)

    @property
    def wgmma_m_tiles(self) -> int:
        """64-row tiles per warpgroup."""
        return self.wgmma_shape[0] // self.warps_m // WGMMA_ROWS

    @property
    def wgmma_n(self) -> int:
        """The N of each warpgroup's wgmma instructions."""
        return self.wgmma_shape[1] // self.warps_n

    @cached_property
    def layout(self) -> Layout:
        """Of the result (the accumulators)."""
        if self.swapped:
            return swapped_wgmma_layout((self.m, self.n), self.threads, self.warps_m, self.warps_n)
        if self.fragment_columns:
            return mma_a8_layout((self.m, self.n), self.threads, self.threads // WARP, 1)
        if self.instruction == "wgmma":
            return wgmma_layout((self.m, self.n), self.threads, self.warps_m, self.warps_n)
        return mma_layout((self.m, self.n), self.threads, self.warps_m, self.warps_n)

    def wgmma_accumulators(self, tile: int) -> list[int]:
        """The result layout's registers that are the accumulators of a warpgroup's wgmma on its 64-row
        tile `tile`, in the instruction's order."""
        per_tile = self.wgmma_n // 2
        if self.fragment_columns:  # c0..c3 of 8-column tile j: (row g, columns 2t, 2t + 1), (row g + 8, the same),
            # which B's rows placed in fragment order make columns 16(j / 2) + 4t + 2(j % 2) + (0, 1)
            return [tile * per_tile + 8 * (j // 2) + 4 * half + 2 * (j % 2) + b
                    for j in range(self.wgmma_n // MMA_COLS) for half in (0, 1) for b in (0, 1)]
        if not self.swapped:
            return list(range(tile * per_tile, (tile + 1) * per_tile))
        at = self.layout.register_of
        return [at[(MMA_COLS * j + c, 2 * tile + half)]
                for j in range(self.wgmma_n // MMA_COLS) for half in (0, 1) for c in (0, 1)]

    def wgmma_fragments(self, step: int, tile: int) -> list[int]:
        """The registers of B's staging layout that are a swapped product's A fragments a0..a3 of k step
        `step` and 64-row tile `tile`."""
        at = self.staging_layouts[1].register_of
        return [at[(MMA_COLS * step + 4 * half_k, 2 * tile + half)] for half_k in (0, 1) for half in (0, 1)]

    @cached_property
    def a_layout(self) -> Layout | None:
        """Of an A operand whose registers are its fragments (16-bit and 8-bit float kinds with mma.sync, and
        16-bit ones on wgmma with `registers_a`; an s8 A, loaded, goes through shared memory)."""
        if self.registers_a and self.kind.eight_bit:  # one 64-row tile a warpgroup: its warps' rows in order
            return mma_a8_layout((self.m, self.k), self.threads, self.threads // WARP, 1)
        if self.registers_a:
            return wgmma_layout((self.m, self.k), self.threads, self.warps_m, self.warps_n, share_columns=True)
        if self.kind.tf32 or self.kind.integer or self.instruction == "wgmma":
            return None
        if self.kind.operand.is_f8:
            return mma_a8_layout((self.m, self.k), self.threads, self.warps_m, self.warps_n)
        return mma_layout((self.m, self.k), self.threads, self.warps_m, self.warps_n, share_columns=True)

    @cached_property
    def staging_layouts(self) -> tuple[Layout, Layout] | None:
        """Of the A and B operands of a swapped product, rounded in registers: A to be stored into shared
        memory (as each thread copies it, in a K loop), B in the layout of B^T's wgmma fragments; None for
        products whose operands go to shared memory as they are."""
        if not self.swapped:
            return None
        return (copy_layout((self.m, self.k), self.threads, self.kind.operand.nbytes),
                swapped_fragment_layout((self.k, self.n), self.threads, self.warps_m, self.warps_n))

    @property
    def operand_layouts(self) -> dict[int, Layout]:
        """The layouts operands (by position) should be given when nothing else decides theirs."""
        out = {0: self.a_layout} if self.a_layout is not None else {}
        if self.staging_layouts is not None:
            out.update(enumerate(self.staging_layouts))
        return out


def kind_of(op: Op) -> MmaKind | None:
    """The tensor-core kind a dot asks for by its operands and precision (i32: s8, which `plan_dots` takes
    only where both operands hold s8 values); None for the CUDA cores."""
    dtype = op.operands[0].dtype
    if dtype.is_narrow:
        return MMA_KINDS[dtype.value]
    if dtype is DType.I32:
        return MMA_KINDS["s8"]
    return MMA_KINDS.get(op.attrs.get("precision", "ieee"))


def holds_s8(v: Value) -> bool:
    """Whether tile v is loaded from an i8 tensor, as it lies or transposed (`trans(x[...])`): its i32
    values are then s8 values, which the tensor cores multiply as bytes."""
    owner = v.owner
    if isinstance(owner, Op) and owner.opcode == "permute" and tuple(owner.attrs["order"]) == (1, 0):
        owner = owner.operands[0].owner
    return isinstance(owner, Op) and owner.opcode == "load" and owner.operands[0].dtype is DType.I8


def plan_dots(func: Function, threads: int, tensor_cores: bool, wgmma: bool = False,
              fp8: bool = False) -> dict[Op, MmaPlan | str]:
    """For each dot of a tensor-core kind: its plan, or why it runs on the CUDA cores.  The load of a once_a
    operand that lies before an enclosing loop is moved to just before the product's loop (`func` changes)."""
    ops = list(walk(func.body))
    users: dict[Value, list[Op]] = {}
    for op in ops:
        for v in op.operands:
            users.setdefault(v, []).append(op)
    block_of = {o: block for block in _blocks(func.body) for o in block.ops}
    region_of = {id(region): o for o in ops for region in o.regions}  # the op whose region a block is
    out: dict[Op, MmaPlan | str] = {}
    sunk: list[tuple[Op, Op]] = []  # (a once_a operand's load, the loop it moves to just before)
    for op in ops:
        if op.opcode != "dot" or (kind := kind_of(op)) is None:
            continue
        if kind.integer and not all(holds_s8(v) for v in op.operands[:2]):
            out[op] = "its i32 operands are not both loaded from i8 tensors (the tensor cores multiply s8 values)"
            continue
        if not tensor_cores or (kind.operand.is_f8 and not fp8):
            out[op] = f"the target has no {kind.ptx} tensor cores ({'sm_89' if kind.operand.is_f8 else 'sm_80'} " \
                      "and newer have them)"
            continue
        m, k = op.operands[0].type.shape
        n = op.operands[1].type.shape[1]
        wrong = [f"{name} = {size} is not a multiple of {unit}"
                 for name, size, unit in (("M", m, MMA_ROWS), ("N", n, MMA_COLS), ("K", k, kind.k)) if size % unit]
        if wrong:
            out[op] = f"the {kind.shape} instruction cannot tile it ({', '.join(wrong)})"
            continue
        sources = [loaded_slice(v, users, not kind.tf32) for v in op.operands[:2]]
        if kind.eight_bit and (why := _not_k_major(op, kind, sources)) is not None:
            out[op] = why
            continue
        here = [src is not None and block_of.get(v.owner) is block_of.get(src[0]) is block_of[op]
                for v, src in zip(op.operands, sources)]
        transposed = tuple(src is not None and src[1] for src in sources)
        swapped = kind.tf32
        b_only = (kind.sixteen_bit or kind.operand.is_f8) and here[1] and not here[0]  # A from registers, or loaded once
        # A loaded before the loop the product is in, copied into shared memory at the loop's start (one
        # loaded further out moves there first: `_deferrable`)
        loop = region_of.get(id(block_of[op]))
        once_a = b_only and sources[0] is not None and not transposed[0] and loop is not None \
            and loop.opcode == "for" and _deferrable(sources[0][0], loop, block_of, region_of)
        if once_a and block_of[loop] is not block_of[sources[0][0]]:
            sunk.append((sources[0][0], loop))
        if b_only:
            transposed = (False, transposed[1])
        groups = wgmma_groups(kind, *((n, m) if swapped else (m, n)), threads, _wgmma_k_fits(kind, k, here, once_a,
                                                                                               transposed[1])) \
            if wgmma and (all(here) or b_only) and not kind.integer else None
        if groups is not None and kind.eight_bit and b_only and not once_a and groups != (m // WGMMA_ROWS, 1):
            groups = None  # 8-bit A fragments from registers: one 64-row tile a warpgroup (a_layout)
        if groups is not None:
            out[op] = MmaPlan(kind, m, n, k, *groups, threads, "wgmma", swapped, transposed, b_only and not once_a,
                              once_a)
            continue
        rows_only = sources[0] is None or _feeds_rows(op.result, users)
        warps_m, warps_n = choose_warps(m, n, threads // WARP, rows_only)
        out[op] = MmaPlan(kind, m, n, k, warps_m, warps_n, threads, transposed=transposed)
    for load, loop in sunk:
        block_of[load].ops.remove(load)
        block_of[loop].ops.insert(block_of[loop].ops.index(loop), load)
    for op, plan in list(out.items()):
        source = _fragment_source(op, plan, out)
        if source is not None:
            out[source] = replace(out[source], fragment_columns=True)
    return out


def _fragment_source(op: Op, plan: MmaPlan | str, plans: dict[Op, MmaPlan | str]) -> Op | None:
    """The product whose result `op` (an 8-bit wgmma reading A from registers) reads as its A through
    element-wise ops alone, where that one can give its result in the layout of A's fragments: 8-bit wgmma,
    B staged K-major, one 64-row tile a warpgroup, N whole 16-column chunks (MmaPlan.fragment_columns).
    (An 8-bit mma.sync reading A from registers could take it too, but runs on H100 as conversions to
    16-bit products, whose registers ptxas then spills inside the loop: P is moved to it instead.)"""
    if not isinstance(plan, MmaPlan) or not plan.registers_a or not plan.kind.eight_bit:
        return None
    found, seen, todo = [], set(), [op.operands[0]]
    while todo:
        v = todo.pop()
        owner = v.owner
        if id(v) in seen or not isinstance(owner, Op):
            continue
        seen.add(id(v))
        if owner.opcode == "dot":
            found.append(owner)
        elif owner.opcode in ELEMENTWISE:
            todo.extend(owner.operands)
    source = plans.get(found[0]) if len(found) == 1 else None
    fits = isinstance(source, MmaPlan) and source.instruction == "wgmma" and source.kind.eight_bit \
        and not source.registers_a and not source.swapped and source.transposed[1] and source.n % 16 == 0 \
        and (source.warps_m, source.warps_n) == (source.m // WGMMA_ROWS, 1)
    return found[0] if fits and replace(source, fragment_columns=True).layout == plan.a_layout else None


def _deferrable(load: Op, loop: Op, block_of: dict, region_of: dict) -> bool:
    """Whether `load`, in the block `loop` is in or one enclosing it, may be done at `loop`'s start instead:
    no tensor is written from the load to the loop - nor, where it moves into other ops, in the outermost
    of them (each of their iterations then loads what the load read once).

    A resident A is copied straight into shared memory at its loop's start (pipeline.py's `Resident`),
    with no registers: wgmma's A fragments held in registers across a loop nest were lost by ptxas (CUDA
    13.0) where register pressure was high - attention's backward at HEAD = 64, BM = 64 read K's and V's
    fragments, loaded before the loop over heads, and from the second iteration of the loop over query
    blocks on found other values in V's registers."""
    outer, block = loop, block_of.get(loop)
    while block is not None and block is not block_of[load]:
        outer = region_of.get(id(block))
        block = block_of.get(outer) if outer is not None else None
    if block is None:
        return False
    ops = block.ops
    return not any(writes_memory(o) for o in ops[ops.index(load) + 1:ops.index(outer)]) \
        and (outer is loop or not writes_memory(outer))


def _not_k_major(op: Op, kind: MmaKind, sources) -> str | None:
    """An 8-bit product's loaded operands must lie K-major: A [M, K] as it lies, B as trans(a slice [N, K]).
    Where one does not: for 8-bit floats a located error, for s8 why the product runs on the CUDA cores."""
    (a, b), name = sources, kind.operand
    found = None
    if b is not None and not b[1]:
        found = (b[0], "B K-major (8-bit mma.sync and wgmma have no transposed operands), but B is {this} [K, N] "
                       "slice{at}, N-major as it lies; give B as an [N, K] tensor and write dot(a, trans(b[...]))")
    elif a is not None and a[1]:
        found = (a[0], "A K-major (8-bit mma.sync and wgmma have no transposed operands), but A is the transpose of "
                       "{this} [K, M] slice{at}, M-major; give A as an [M, K] tensor and load it as it lies")
    if found is None:
        return None
    load, why = found
    loc = load.loc or op.loc
    if kind.integer:
        return "the tensor cores read " + why.format(this="the", at=f" at {loc.line}:{loc.col}" if loc else "")
    raise UnsupportedError(f"dot of {name} tiles on the tensor cores reads {why.format(this='this', at='')}", loc)


def _wgmma_k_fits(kind: MmaKind, k: int, here: list[bool], once_a: bool, k_major_b: bool) -> bool:
    """Whether wgmma serves a product's K: one 128-byte row where both operands stream through a K loop's
    stages; where B alone does, any number of 128-byte rows of a K-major operand in shared memory (A loaded
    once, or B as trans(slice): a wgmma per k16 step of each row's box), else of k16 steps (B N-major, A
    from registers)."""
    if all(here):
        return k == kind.wgmma_k
    return k % (kind.wgmma_k if once_a or k_major_b else kind.k) == 0


def wgmma_groups(kind: MmaKind, m: int, n: int, threads: int, k_fits: bool = True) -> tuple[int, int] | None:
    """The warpgroup grid of an [m, n] product wgmma can run (see the header; `k_fits`: whether it serves the
    product's K), the most rows of groups first."""
    if not k_fits or threads % WARPGROUP:
        return None
    groups = threads // WARPGROUP
    for gm in reversed(_powers_upto(groups)):
        gn = groups // gm
        if m % (gm * WGMMA_ROWS) or n % gn:
            continue
        block_n = n // gn
        if block_n > WGMMA_MAX_N or block_n % MMA_COLS:
            continue
        if not kind.sixteen_bit or block_n % 64 == 0 or (gn == 1 and block_n < 64):
            return gm, gn
    return None


def describe(op: Op, plan: MmaPlan | str) -> str:
    """What the compiled kernel's report says about a product that asks for the tensor cores."""
    where = f"{op.loc.file}:{op.loc.line}:{op.loc.col}" if op.loc is not None else "a dot"
    if isinstance(plan, str):
        return f"{where}: dot runs on the CUDA cores: {plan}"
    if plan.instruction == "wgmma":
        rows, _ = plan.wgmma_shape
        swapped = ", computing C^T = B^T A^T" if plan.swapped else ", A from registers" if plan.registers_a else \
            ", A loaded before the loop, from shared memory" if plan.once_a else ""
        return (f"{where}: dot runs on the tensor cores: wgmma m64n{plan.wgmma_n}k{plan.kind.k} {plan.kind.name}{swapped}, "
                f"{plan.warps_m} x {plan.warps_n} warpgroups of {rows // plan.warps_m} x {plan.wgmma_n}")
    return (f"{where}: dot runs on the tensor cores: mma.sync {plan.kind.shape} {plan.kind.name}, "
            f"{plan.warps_m} x {plan.warps_n} warps of {plan.m // plan.warps_m} x {plan.n // plan.warps_n}")


def choose_warps(m: int, n: int, warps: int, rows_only: bool) -> tuple[int, int]:
    """The warp grid of an [m, n] product: every warp a whole number of 16 x 8 tiles, as many
    warps as can take part, then the fewest fragment loads per warp and k step (an ldmatrix.x4
    per 16-row tile of A, one per two 8-column tiles of B); one warp column if `rows_only`."""
    best = None
    wm = 1
    while wm <= warps:
        for wn in ([1] if rows_only else _powers_upto(warps // wm)):
            if m % (wm * MMA_ROWS) or n % (wn * MMA_COLS):
                continue
            loads = m // wm // MMA_ROWS + n // wn // MMA_COLS / 2
            cost = (-(wm * wn), loads, -wm)
            if best is None or cost < best[0]:
                best = (cost, (wm, wn))
        wm *= 2
    return best[1]


def _powers_upto(n: int) -> list[int]:
    out, p = [], 1
    while p <= n:
        out.append(p)
        p *= 2
    return out


def _blocks(block: Block):
    yield block
    for op in block.ops:
        for region in op.regions:
            yield from _blocks(region)


def loaded_slice(v: Value, users: dict[Value, list[Op]], transposes: bool = True) -> tuple[Op, bool] | None:
    """(the load, whether v is its transpose) when v is a slice loaded for this one use, or (`transposes`)
    the 2-D transpose of one (`trans(x[...])`, the transpose its load's one use); else None."""
    owner = v.owner
    if not isinstance(owner, Op) or len(users.get(v, [])) != 1:
        return None
    if owner.opcode == "load":
        return owner, False
    if transposes and owner.opcode == "permute" and tuple(owner.attrs["order"]) == (1, 0):
        return (owner.operands[0].owner, True) if loaded_slice(owner.operands[0], users, False) else None
    return None


def _feeds_rows(v: Value, users: dict[Value, list[Op]]) -> bool:
    """Whether v, through element-wise ops, reaches a reduction along its last axis or the A
    operand of a product."""
    seen, stack = set(), [v]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        for op in users.get(x, []):
            if op.opcode == "reduce" and op.attrs["axis"] == len(x.type.shape) - 1:
                return True
            if op.opcode == "dot" and op.operands[0] is x:
                return True
            if op.opcode in ELEMENTWISE_LIKE:
                stack += op.results
            elif op.opcode in ("for", "yield"):
                stack += _carried_onwards(op, x)
    return False


def _carried_onwards(op: Op, x: Value) -> list[Value]:
    """The values a loop's init or a yielded value becomes (block argument, result)."""
    out = []
    if op.opcode == "for":
        body = op.regions[0]
        for i, init in enumerate(op.operands[2:]):
            if init is x:
                out += [body.args[1 + i], op.results[i]]
    return out
