# Layouts: which thread of a CTA holds which elements of a tile.
#
# A tile of shape S lives in the registers of the T threads of a CTA.  A layout
# says, for thread `tid` and register slot `r`, which element that is:
#
#     coord[d] = sum over terms (div, mod, scale) of dim d:  ((tid // div) % mod) * scale
#                + offsets[r][d]
#
# Every layout Phobos builds is a *grid layout*: each thread holds `spt[d]`
# consecutive elements along dim d (a vector along the last dim gives 128-bit
# accesses), the 32 lanes of a warp form a grid over the dims, the warps form a
# grid of such warp tiles, and the pattern repeats until it covers the tile.
# Coordinates at or beyond the tile's extent are padding: such slots exist in
# every thread (code is the same for all) but are masked wherever it matters.
# Thread digits that appear in no dimension's terms are *replicas*: those
# threads hold copies of the same elements (a [64, 1] tile held by 256
# threads, say) and must not all store them.
#
# `collapse(dims)` gives the layout of the size-1 broadcast of a tile along
# `dims` - and equally the layout a reduction along `dims` produces - so that
# `x - max(x, axis=1)` moves no data between threads.
from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property

WARP = 32


@dataclass(frozen=True)
class Term:
    """One thread digit, (tid // div) % mod, contributing digit * scale to a coordinate."""

    div: int
    mod: int
    scale: int

    @property
    def in_warp(self) -> bool:
        return self.div * self.mod <= WARP


@dataclass(frozen=True)
class Layout:
    shape: tuple[int, ...]
    threads: int
    terms: tuple[tuple[Term, ...], ...]  # per dim
    offsets: tuple[tuple[int, ...], ...]  # per register slot
    replicas: tuple[tuple[int, int], ...]  # (div, mod) digits that only copy data

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nregs(self) -> int:
        return len(self.offsets)

    def thread_span(self, d: int) -> int:
        """The largest thread part of a coordinate along dim d."""
        return sum((t.mod - 1) * t.scale for t in self.terms[d])

    def always_valid(self, r: int, d: int) -> bool:
        return self.offsets[r][d] + self.thread_span(d) < self.shape[d]

    @cached_property
    def register_of(self) -> dict[tuple[int, ...], int]:
        return {off: r for r, off in enumerate(self.offsets)}

    def vector_width(self, most: int = 8) -> int:
        """Elements each thread holds contiguously along the last dim, aligned (1 when none), at most `most` (a
        power of two; 8: the widest vector of registers PTX has)."""
        if not self.offsets:
            return 1
        for v in (16, 8, 4, 2):
            if v > most:
                continue
            if self.shape[-1] % v == 0 and all(t.scale % v == 0 for t in self.terms[-1]) \
                    and self._runs_of(v):
                return v
        return 1

    def _runs_of(self, v: int) -> bool:
        if self.nregs % v:
            return False
        for start in range(0, self.nregs, v):
            base = self.offsets[start]
            if base[-1] % v:
                return False
            for i in range(1, v):
                if self.offsets[start + i] != base[:-1] + (base[-1] + i,):
                    return False
        return True

    def transposed(self) -> "Layout":
        """The layout of a 2-D tile's transpose held in the same registers (nothing moves)."""
        return Layout(self.shape[::-1], self.threads, self.terms[::-1], tuple(off[::-1] for off in self.offsets),
                      self.replicas)

    def collapse(self, dims) -> "Layout":
        """This layout with `dims` reduced to extent 1: their thread digits become replicas."""
        dims = set(dims)
        shape = tuple(1 if d in dims else n for d, n in enumerate(self.shape))
        terms = tuple(() if d in dims else ts for d, ts in enumerate(self.terms))
        replicas = self.replicas + tuple((t.div, t.mod) for d in sorted(dims) for t in self.terms[d])
        offsets: list[tuple[int, ...]] = []
        seen = set()
        for off in self.offsets:
            new = tuple(0 if d in dims else x for d, x in enumerate(off))
            if new not in seen:
                seen.add(new)
                offsets.append(new)
        return Layout(shape, self.threads, terms, tuple(offsets), _sorted(replicas))

    def collapse_map(self, dims) -> tuple["Layout", list[int]]:
        """The collapsed layout, and for each register of self the register it maps to there."""
        small = self.collapse(dims)
        dims = set(dims)
        index = [small.register_of[tuple(0 if d in dims else x for d, x in enumerate(off))]
                 for off in self.offsets]
        return small, index


def _sorted(replicas) -> tuple[tuple[int, int], ...]:
    return tuple(sorted(r for r in replicas if r[1] > 1))


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def grid_layout(shape: tuple[int, ...], threads: int, spt: tuple[int, ...],
                lanes: tuple[int, ...], warps: tuple[int, ...]) -> Layout:
    """The layout with `spt` elements per thread, a lane grid and a warp grid (all per dim).

    Lane and warp digits are taken row-major (the last dim varies fastest);
    lanes or warps beyond the grids' products are replicas.
    """
    rank = len(shape)
    nlanes = _prod(lanes)
    nwarps = _prod(warps)
    assert nlanes <= WARP and nlanes * nwarps <= threads, (shape, lanes, warps, threads)
    terms = []
    for d in range(rank):
        lane_div = _prod(lanes[d + 1:])
        warp_div = WARP * _prod(warps[d + 1:])
        ts = []
        if lanes[d] > 1:
            ts.append(Term(lane_div, lanes[d], spt[d]))
        if warps[d] > 1:
            ts.append(Term(warp_div, warps[d], spt[d] * lanes[d]))
        terms.append(tuple(ts))
    replicas = []
    if nlanes < WARP:
        replicas.append((nlanes, WARP // nlanes))
    if WARP * nwarps < threads:
        replicas.append((WARP * nwarps, threads // (WARP * nwarps)))
    # registers: repeats of the whole thread grid (outer), then the per-thread vector (inner)
    cover = [spt[d] * lanes[d] * warps[d] for d in range(rank)]
    reps = [_cdiv(shape[d], cover[d]) for d in range(rank)]
    offsets = []
    for rep in itertools.product(*(range(r) for r in reps)):
        for inner in itertools.product(*(range(s) for s in spt)):
            off = tuple(rep[d] * cover[d] + inner[d] for d in range(rank))
            if all(off[d] < shape[d] for d in range(rank)):
                offsets.append(off)
    return Layout(tuple(shape), threads, tuple(terms), tuple(offsets), _sorted(replicas))


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def _spread(shape: tuple[int, ...], spt: tuple[int, ...], budget: int, start: tuple[int, ...],
            order: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Powers of two per dim whose product is at most `budget`, covering what is left, given to the dims
    in `order` (default: the last dim first)."""
    rank = len(shape)
    out = [1] * rank
    left = budget
    for d in (reversed(range(rank)) if order is None else order):
        need = _pow2_at_least(_cdiv(shape[d], spt[d] * start[d]))
        out[d] = min(left, need)
        left //= out[d]
    return tuple(out)


def blocked(shape: tuple[int, ...], threads: int, reduced: tuple[int, ...] = ()) -> Layout:
    """The default layout: a vector of up to 4 along the last dim, threads row-major over the tile.

    Consecutive lanes take consecutive vectors of a row, so a warp's accesses to
    a row-major tensor are contiguous (coalesced) and 128 bits wide per thread.
    The warps go to the dims not in `reduced` first (the dims a reduction of
    the tile runs along), so that a tile of several rows reduced along its rows
    has whole rows in each warp: the reduction then takes shuffles only, no
    exchange through shared memory and no barrier.
    """
    rank = len(shape)
    vec = next(v for v in (4, 2, 1) if shape[-1] % v == 0)
    spt = (1,) * (rank - 1) + (vec,)
    lanes = _spread(shape, spt, WARP, (1,) * rank)
    last_first = tuple(reversed(range(rank)))
    order = tuple(d for d in last_first if d not in reduced) + tuple(d for d in last_first if d in reduced)
    warps = _spread(shape, spt, threads // WARP, lanes, order)
    return grid_layout(shape, threads, spt, lanes, warps)


def dot_layout(shape: tuple[int, int], threads: int) -> Layout:
    """The layout of a dot product's result: each thread RM rows x RN columns (register blocking).

    Each thread holds runs of 4 columns (128-bit vectors of B and C) and single
    rows, the rows of one warp's lanes being consecutive: A is kept row-major in
    shared memory and read as 128-bit vectors along K, and with a row stride of
    an odd number of 16-byte units, consecutive rows fall in different banks.
    The pattern repeats with the stride of the whole thread grid.  The lane
    grid (4x8, 8x4, ...) and the warp grid are chosen to waste the fewest
    slots, then to minimise the operand loads per step, RM/4 + RN/4.
    """
    m, n = shape
    fn = next(v for v in (4, 2, 1) if n % v == 0)
    nwarps = threads // WARP
    best = None
    for lanes in ((4, 8), (8, 4), (2, 16), (16, 2), (1, 32), (32, 1)):
        for wy in _powers_of_two_upto(nwarps):
            warps = (wy, nwarps // wy)
            ty, tx = lanes[0] * warps[0], lanes[1] * warps[1]
            rm, rn = _cdiv(m, ty), _cdiv(n, tx * fn) * fn
            waste = rm * ty * rn * tx - m * n
            cost = (waste, _cdiv(rm, 4) + rn // fn, abs(rm - rn), rm)  # ties: fewer rows (A fragments)
            if best is None or cost < best[0]:
                best = (cost, lanes, warps)
    _, lanes, warps = best
    return grid_layout((m, n), threads, (1, fn), lanes, warps)


def _powers_of_two_upto(n: int):
    p = 1
    while p <= n:
        yield p
        p *= 2


MMA_ROWS = 16  # an mma tile: 16 rows x 8 columns, four f32 registers per lane
MMA_COLS = 8


def mma_layout(shape: tuple[int, int], threads: int, warps_m: int, warps_n: int,
               share_columns: bool = False) -> Layout:
    """The layout of the accumulators of `mma.sync` (and wgmma) on tiles of 16 x 8.

    The warps form a warps_m x warps_n grid, warp w at (w % warps_m, w //
    warps_m), each holding a block of shape[0] / warps_m rows by shape[1] /
    warps_n columns as 16 x 8 tiles.  In a tile, lane l holds rows l/4 and
    l/4 + 8, columns 2(l%4) and 2(l%4) + 1: registers c0, c1 (row l/4), c2, c3
    (row l/4 + 8), in that order, tile after tile (rows of tiles outer).

    With `share_columns` every warp holds all the columns of its rows (the
    warps along N are replicas): the layout of an [M, K] tile whose registers,
    packed in pairs, are the A fragments of an m16n8k16 mma (c0..c3 of column
    tiles 2k and 2k + 1 are a0..a7 of k step k) - which is also the result
    layout of a product whose warps are warps_m x 1, so a product fed to
    another (attention's P V) stays in registers.
    """
    m, n = shape
    col_warps = 1 if share_columns else warps_n
    block_m, block_n = m // warps_m, n // col_warps
    assert block_m % MMA_ROWS == 0 and block_n % MMA_COLS == 0, (shape, warps_m, warps_n)
    rows = [Term(4, 8, 1)] + ([Term(WARP, warps_m, block_m)] if warps_m > 1 else [])
    cols = [Term(1, 4, 2)] + ([Term(WARP * warps_m, warps_n, block_n)] if col_warps > 1 else [])
    replicas = []
    if share_columns and warps_n > 1:
        replicas.append((WARP * warps_m, warps_n))
    if WARP * warps_m * warps_n < threads:
        replicas.append((WARP * warps_m * warps_n, threads // (WARP * warps_m * warps_n)))
    offsets = [(MMA_ROWS * i + 8 * half, MMA_COLS * j + c)
               for i in range(block_m // MMA_ROWS) for j in range(block_n // MMA_COLS)
               for half in (0, 1) for c in (0, 1)]
    return Layout((m, n), threads, (tuple(rows), tuple(cols)), tuple(offsets), _sorted(replicas))


def mma_a8_layout(shape: tuple[int, int], threads: int, warps_m: int, warps_n: int) -> Layout:
    """The layout of an [M, K] tile whose registers, packed four at a time, are the A fragments of an 8-bit
    mma m16n8k32: as `mma_layout` with `share_columns` (the warps along N replicas), but in each 16-row tile
    and 16-column chunk lane l holds four consecutive columns, 4(l%4)..4(l%4) + 3, of rows l/4 and l/4 + 8:
    registers 4r..4r + 3 are fragment byte 0..3 of a0 (row l/4, chunk 2s), a1 (row l/4 + 8), a2 (chunk 2s + 1),
    a3, k step s after k step s."""
    m, k = shape
    block_m = m // warps_m
    assert block_m % MMA_ROWS == 0 and k % 32 == 0, (shape, warps_m)
    rows = [Term(4, 8, 1)] + ([Term(WARP, warps_m, block_m)] if warps_m > 1 else [])
    cols = [Term(1, 4, 4)]
    replicas = [(WARP * warps_m, warps_n)] if warps_n > 1 else []
    if WARP * warps_m * warps_n < threads:
        replicas.append((WARP * warps_m * warps_n, threads // (WARP * warps_m * warps_n)))
    offsets = [(MMA_ROWS * i + 8 * half, 16 * chunk + x)
               for i in range(block_m // MMA_ROWS) for chunk in range(k // 16) for half in (0, 1) for x in range(4)]
    return Layout((m, k), threads, (tuple(rows), tuple(cols)), tuple(offsets), _sorted(replicas))


def copy_layout(shape: tuple[int, ...], threads: int, elem_bytes: int) -> Layout:
    """`blocked`, but with vectors of up to 16 bytes along the last dim (8 elements of 16 bits)."""
    rank = len(shape)
    vec = next(v for v in (16 // elem_bytes, 8, 4, 2, 1) if v * elem_bytes <= 16 and shape[-1] % v == 0)
    spt = (1,) * (rank - 1) + (vec,)
    lanes = _spread(shape, spt, WARP, (1,) * rank)
    warps = _spread(shape, spt, threads // WARP, lanes)
    return grid_layout(shape, threads, spt, lanes, warps)


WARPGROUP = 128  # four warps: what one wgmma runs on
WGMMA_ROWS = 64


def wgmma_layout(shape: tuple[int, int], threads: int, groups_m: int, groups_n: int,
                 share_columns: bool = False) -> Layout:
    """The layout of the accumulators of `wgmma.mma_async` m64nN (sm_90a).

    The warpgroups (four warps each) form a groups_m x groups_n grid, group g
    at (g % groups_m, g // groups_m), each holding shape[0] / groups_m rows (a
    stack of 64-row tiles) by shape[1] / groups_n columns.  Within a 64-row
    tile, warp w of the group holds rows 16w .. 16w + 15 as mma.sync's
    accumulators do (lane l: rows l/4 and l/4 + 8, columns 2(l%4) and
    2(l%4) + 1 of each 8 columns, registers c0 c1 c2 c3), column tile after
    column tile: the registers of one 64-row tile are one wgmma's, in order.

    With `share_columns` every warpgroup holds all the columns of its rows (the
    groups along N are replicas): the layout of an [M, K] tile whose registers,
    packed in pairs, are wgmma's 16-bit A fragments read from registers (per
    warp those of mma.sync m16n8k16: c0..c3 of column tiles 2s and 2s + 1 are
    a0..a7 of k step s, tile after tile) - also the result layout of a product
    whose groups are groups_m x 1, so that attention's P feeds P V from the
    registers the scores were computed in.  With one 64-row tile a warpgroup
    the warp digit and the group digit of the rows are one digit: the layout is
    then mma_layout's of 4 groups_m x 1 warps, the same object, so that a
    product on either instruction feeds the other without moving data.
    """
    m, n = shape
    col_groups = 1 if share_columns else groups_n
    block_m, block_n = m // groups_m, n // col_groups
    assert block_m % WGMMA_ROWS == 0 and block_n % MMA_COLS == 0, (shape, groups_m, groups_n)
    if block_m == WGMMA_ROWS:
        rows = [Term(4, 8, 1), Term(WARP, 4 * groups_m, MMA_ROWS)]
    else:
        rows = [Term(4, 8, 1), Term(WARP, 4, MMA_ROWS)] + ([Term(WARPGROUP, groups_m, block_m)] if groups_m > 1 else [])
    cols = [Term(1, 4, 2)] + ([Term(WARPGROUP * groups_m, groups_n, block_n)] if col_groups > 1 else [])
    used = WARPGROUP * groups_m * groups_n
    replicas = [(WARPGROUP * groups_m, groups_n)] if share_columns and groups_n > 1 else []
    if used < threads:
        replicas.append((used, threads // used))
    offsets = [(WGMMA_ROWS * i + 8 * half, MMA_COLS * j + c)
               for i in range(block_m // WGMMA_ROWS) for j in range(block_n // MMA_COLS)
               for half in (0, 1) for c in (0, 1)]
    return Layout((m, n), threads, (tuple(rows), tuple(cols)), tuple(offsets), _sorted(replicas))


# A product computed as its transpose, C^T = B^T A^T (tf32 on wgmma: mma_plan.py), may take C^T's rows
# in any order, the same in B^T's fragments and in the accumulators, since wgmma sums over k alone.  Of
# a warpgroup's block of T 64-row tiles, wgmma's row 64 i + 16 w + g + 8 h (tile i, warp w, lane group
# g = lane / 4, half h) is taken to be C^T's row - C's column - in the warpgroup's block: 2 i + h, then
# the bits of g and w spread over the column's higher bits (`_row_bits`).  Each thread then holds 2T
# consecutive columns of C, loaded from B and stored to C as vectors of 8 T bytes.  The digit of g that
# still varies within one phase of those accesses (16 lanes for 8-byte vectors, 8 for 16-byte ones)
# takes column bit 4 - half a 128-byte box of f32 - so that the four k rows those lanes read from a
# 128-byte swizzled N-major B (the TMA copy's layout: chunk c of row k at chunk c ^ k % 8) fall in
# eight distinct chunks of banks, and rows padded by an odd number of 16 bytes (cp.async) likewise.
def _row_bits(tiles: int) -> list[int]:
    """The column bit each of g's three bits and w's two takes (lowest first), for T 64-row tiles a
    warpgroup: bit 4 to the digit of g that varies within a phase, the rest above the thread's 2T columns
    in order."""
    assert tiles <= 4, tiles  # bit 4 lies above the thread's columns
    run = (2 * tiles).bit_length() - 1
    in_phase = 1 if tiles == 1 else 0  # 8-byte vectors: phases of 16 lanes (g's bits 0, 1); 16 bytes: 8 lanes
    free = [b for b in range(run, run + 6) if b != 4][:4]
    return free[:in_phase] + [4] + free[in_phase:]


def _transposed_rows(groups_m: int, tiles: int) -> list[Term]:
    """The thread terms of C's column in a swapped product (see above)."""
    bits = _row_bits(tiles)
    return [Term(4 << d, 2, 1 << bit) for d, bit in enumerate(bits)] + (
        [Term(WARPGROUP, groups_m, WGMMA_ROWS * tiles)] if groups_m > 1 else [])


def swapped_wgmma_layout(shape: tuple[int, int], threads: int, groups_m: int, groups_n: int) -> Layout:
    """The layout of C [M, N] held in the accumulators of `wgmma.mma_async` computing C^T, the
    warpgroups a groups_m x groups_n grid over C^T (along N, along M), C^T's rows in the order above.
    Lane l holds C's rows 2(l%4) and 2(l%4) + 1 of each 8 (wgmma's columns, registers c0 c1 of a
    half).  Registers: 8-row block j, row c, then the thread's 2T consecutive columns (vectors along N;
    mma_plan.py's `wgmma_accumulators` picks each wgmma's)."""
    m, n = shape
    block_m, block_n = m // groups_n, n // groups_m
    assert block_n % WGMMA_ROWS == 0 and block_m % MMA_COLS == 0, (shape, groups_m, groups_n)
    tiles = block_n // WGMMA_ROWS
    rows = [Term(1, 4, 2)] + ([Term(WARPGROUP * groups_m, groups_n, block_m)] if groups_n > 1 else [])
    used = WARPGROUP * groups_m * groups_n
    replicas = [(used, threads // used)] if used < threads else []
    offsets = [(MMA_COLS * j + c, col) for j in range(block_m // MMA_COLS) for c in (0, 1) for col in range(2 * tiles)]
    return Layout((m, n), threads, (tuple(rows), tuple(_transposed_rows(groups_m, tiles))), tuple(offsets),
                  _sorted(replicas))


def swapped_fragment_layout(shape: tuple[int, int], threads: int, groups_m: int, groups_n: int) -> Layout:
    """The layout of B [K, N] loaded as the 32-bit A fragments of `wgmma.mma_async` m64nNk8 computing
    C^T, B^T's rows in the order above: as mma.sync's m16n8k8 A, lane l holds k l%4 and l%4 + 4 of each
    k step (a0 a1 the first, a2 a3 the second, B^T's rows h = 0, 1 of each).  Registers: k step s, half
    of it, then the thread's 2T consecutive columns (vectors along N).  The groups along M hold copies."""
    k, n = shape
    block_n = n // groups_m
    assert block_n % WGMMA_ROWS == 0 and k % MMA_COLS == 0, (shape, groups_m, groups_n)
    tiles = block_n // WGMMA_ROWS
    replicas = [(WARPGROUP * groups_m, groups_n)]
    used = WARPGROUP * groups_m * groups_n
    if used < threads:
        replicas.append((used, threads // used))
    offsets = [(MMA_COLS * s + 4 * half_k, col) for s in range(k // MMA_COLS) for half_k in (0, 1)
               for col in range(2 * tiles)]
    return Layout((k, n), threads, ((Term(1, 4, 1),), tuple(_transposed_rows(groups_m, tiles))), tuple(offsets),
                  _sorted(replicas))
