# Where the elements of tensor-core operands live: register fragments of
# `mma.sync`, `ldmatrix`/`stmatrix` and `wgmma`, and the shared-memory layouts
# that a `wgmma` matrix descriptor names (with the 32/64/128-byte swizzles
# that TMA copies write too).
#
# Register fragments (PTX ISA, "Matrix fragments for mma.m16n8k*" and
# "wgmma register fragments"), with g = lane / 4 and t = lane % 4:
#
#   A, 16-bit, 16x16 per warp: register i, half h (h = 0 the low 16 bits)
#       row g + 8 (i % 2),   column 2t + h + 8 (i // 2)
#   A, 32- and 64-bit (tf32, f64), 16x16: register i: row g + 8 (i % 2), column t + 4 (i // 2)
#   A, 8-bit, 16x32:           register i, byte h: row g + 8 (i % 2), column 4t + h + 16 (i // 2)
#   B, 16-bit, 16x8:           register i, half h: row (k) 2t + h + 8 i, column g
#   B, 8-bit, 32x8:            register i, byte h: row (k) 4t + h + 16 i, column g
#   B, 32- and 64-bit, 16x8:   register i: row t + 4 i, column g
#   C/D, 16x8:                 register i: row g + 8 (i // 2), column 2t + i % 2
#
# The smaller shapes hold the first registers of these (`first`): tf32 m16n8k8
# and f64 m16n8k8 the first 4 of A and 2 of B, f64 m16n8k4 2 and 1, f64 m8n8k4
# 1 and 1 (an 8x4 A) with the first 2 of C (8x8); the 8-bit m16n8k16 the first
# 2 of A and 1 of B, m8n8k16 1 and 1 with 2 of C.  C and D of f16 hold two
# elements a register, elements 2i and 2i + 1 of the f32 layout (`packed`).
#
# `wgmma` spreads a 64-row A (from registers) and D over the four warps of a
# warpgroup: warp w holds rows 16w..16w+15 exactly as one `mma` warp does, and
# D repeats the 16x8 C pattern for every 8 columns (register 4j + i covers
# columns 8j..8j+7).
#
# Each table maps (register, half, lane) to (row, column); the ops gather a
# warp's registers into matrices and scatter results back with them.
#
# Shared-memory layouts of `wgmma` (PTX ISA "Matrix Descriptor" and CUTLASS's
# canonical GMMA layouts, cute/atom/mma_traits_sm90_gmma.hpp).  A descriptor
# is a 64-bit value: bits 0-13 start address >> 4, 16-29 leading-dimension
# byte offset (LBO) >> 4, 32-45 stride-dimension byte offset (SBO) >> 4, 49-51
# base offset, 62-63 swizzle (0 none, 1 128B, 2 64B, 3 32B).  The operand is
# an R x K matrix (R = M for A, N for B); "K-major" means consecutive k are
# adjacent in memory (the default), "MN-major" that consecutive rows are (the
# transposed forms, 16-bit types only: tf32 and 8-bit operands are K-major).  With e the element size, W the
# swizzle width in bytes and T = 16 / e elements per 16 bytes:
#
#   K-major, no swizzle: 8x16-byte core matrices of 8 rows,
#       (r % 8) * 16 + (r // 8) * SBO + (k*e // 16) * LBO + (k*e % 16)
#   K-major, swizzle W:  rows of W bytes, 8-row groups SBO apart,
#       (r % 8) * W + (r // 8) * SBO + k * e
#   MN-major, no swizzle:
#       (r % T) * e + (r // T) * SBO + (k % 8) * 16 + (k // 8) * LBO
#   MN-major, swizzle W: k-rows of W bytes,
#       (r % T) * e + (r // T % (W/16)) * 16 + (r // (T W/16)) * LBO + (k % 8) * W + (k // 8) * SBO
#
# all added to the start address; then the swizzle XORs the 16-byte chunk
# bits 4.. of the shared address with bits 7.. (one bit for 32B, two for 64B,
# three for 128B), i.e. the address function is that of the absolute shared
# address, as TMA applies it when it writes a box.  A descriptor whose base
# offset is not 0 is refused: with 1024-byte aligned tiles it is always 0.
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

LANES = np.arange(32)
GROUP, THREAD = LANES // 4, LANES % 4

# swizzle code of a descriptor -> width in bytes (0: none)
DESCRIPTOR_SWIZZLE = {0: 0, 1: 128, 2: 64, 3: 32}


@dataclass(frozen=True)
class Fragment:
    """(row, column) of every (register, half, lane) of one warp's fragment."""

    rows: np.ndarray  # int (registers, halves, 32)
    cols: np.ndarray
    shape: tuple[int, int]

    @property
    def registers(self) -> int:
        return self.rows.shape[0]

    @property
    def halves(self) -> int:
        return self.rows.shape[1]

    def sources(self, warps: int) -> np.ndarray:
        """For `warps` warps, where each element (warps, R, C) lies among the registers' elements, as
        gather lays them out: (register, warp, lane, half) flattened."""
        found = self._sources.get(warps)
        if found is None:
            position = self.rows * self.shape[1] + self.cols  # (registers, halves, 32)
            register, half, lane = np.indices(position.shape)
            where = np.full(self.shape[0] * self.shape[1], -1, np.int64)
            where[position.reshape(-1)] = ((register * warps * 32 + lane) * self.halves + half).reshape(-1)
            assert (where >= 0).all(), "a fragment covers every element of its matrices"
            found = self._sources[warps] = (where[None, :] + np.arange(warps)[:, None] * 32 * self.halves) \
                .reshape((warps,) + self.shape)
        return found

    @functools.cached_property
    def _sources(self) -> dict:
        return {}

    def destinations(self, warps: int) -> np.ndarray:
        """For `warps` warps, which element of the matrices (warps, R, C) (flattened) each (register,
        half, warp, lane) holds: (registers, halves, warps * 32)."""
        found = self._destinations.get(warps)
        if found is None:
            position = (self.rows * self.shape[1] + self.cols)[:, :, None, :]  # (registers, halves, 1, 32)
            found = self._destinations[warps] = (position + (np.arange(warps) * self.shape[0] * self.shape[1])
                                                 [None, None, :, None]).reshape(self.registers, self.halves, -1)
        return found

    @functools.cached_property
    def _destinations(self) -> dict:
        return {}

    def chain_sources(self, warps: int, steps: int, axes: str, layout: str, columns: int = 1) -> np.ndarray:
        """For the `steps` instructions of a chain, or of `columns` chains side by side along the
        fragment's columns (their registers stacked step by step, then register by register, then
        chain by chain, as gather_chain lays them out), where each element of the matrices (warps, R,
        C) side by side along k (and along C) lies, in `layout`: a string of axis names, b (warps) and
        those of `axes` (b and R's and C's names: "bik" for A, "bkj" for B), with a unit axis for
        every other name."""
        key = (warps, steps, axes, layout, columns)
        found = self._chains.get(key)
        if found is None:
            per_register = warps * 32 * self.halves
            register, within = np.divmod(self.sources(warps), per_register)  # (warps, R, C) each
            step, column = np.arange(steps)[:, None, None, None, None], np.arange(columns)[None, :, None, None, None]
            where = ((step * self.registers + register) * columns + column) * per_register + within
            named = "sc" + axes  # the steps go just above k, the chains just above the column axis
            present = "".join(x for x in layout if x in axes)
            placed = present.replace("k", "sk").replace(axes[-1], "c" + axes[-1])
            where = np.transpose(where, [named.index(x) for x in placed])
            sizes = dict(zip(axes, (warps,) + self.shape))
            sizes["k"] *= steps
            sizes[axes[-1]] *= columns
            found = self._chains[key] = where.reshape(tuple(sizes.get(x, 1) for x in layout))
        return found

    @functools.cached_property
    def _chains(self) -> dict:
        return {}


def _fragment(row, col, registers: int, halves: int, shape) -> Fragment:
    i = np.arange(registers)[:, None, None]
    h = np.arange(halves)[None, :, None]
    rows = np.broadcast_to(row(i, h, GROUP[None, None, :], THREAD[None, None, :]), (registers, halves, 32))
    cols = np.broadcast_to(col(i, h, GROUP[None, None, :], THREAD[None, None, :]), (registers, halves, 32))
    return Fragment(np.ascontiguousarray(rows), np.ascontiguousarray(cols), shape)


A16 = _fragment(lambda i, h, g, t: g + 8 * (i % 2), lambda i, h, g, t: 2 * t + h + 8 * (i // 2), 4, 2, (16, 16))
A32 = _fragment(lambda i, h, g, t: g + 8 * (i % 2), lambda i, h, g, t: t + 4 * (i // 2), 8, 1, (16, 16))
A8 = _fragment(lambda i, h, g, t: g + 8 * (i % 2), lambda i, h, g, t: 4 * t + h + 16 * (i // 2), 4, 4, (16, 32))
B16 = _fragment(lambda i, h, g, t: 2 * t + h + 8 * i, lambda i, h, g, t: g, 2, 2, (16, 8))
B8 = _fragment(lambda i, h, g, t: 4 * t + h + 16 * i, lambda i, h, g, t: g, 2, 4, (32, 8))
B32 = _fragment(lambda i, h, g, t: t + 4 * i, lambda i, h, g, t: g, 4, 1, (16, 8))
C32 = _fragment(lambda i, h, g, t: g + 8 * (i // 2), lambda i, h, g, t: 2 * t + i % 2, 4, 1, (16, 8))


def first(frag: Fragment, registers: int, shape: tuple[int, int]) -> Fragment:
    """The fragment of a smaller shape made of the first `registers` registers of `frag`."""
    return Fragment(frag.rows[:registers], frag.cols[:registers], shape)


A_TF32, B_TF32 = first(A32, 4, (16, 8)), first(B32, 2, (8, 8))


def packed(frag: Fragment) -> Fragment:
    """Two elements a register (f16 accumulators): register i holds elements 2i (low half) and 2i + 1 of
    the one-element registers of `frag`."""
    return Fragment(frag.rows.reshape(-1, 2, 32), frag.cols.reshape(-1, 2, 32), frag.shape)


def wgmma_accumulator(n: int) -> Fragment:
    """D of wgmma m64nNk*: per warp 16 x n, register 4j + i like C32 shifted by 8j columns."""
    j = np.arange(n // 8)
    rows = np.repeat(C32.rows[None], len(j), axis=0).reshape(-1, 1, 32)
    cols = (C32.cols[None] + 8 * j[:, None, None, None]).reshape(-1, 1, 32)
    return Fragment(rows, cols, (16, n))


def gather(frag: Fragment, regs: list[np.ndarray], decode) -> np.ndarray:
    """Matrices (warps, R, C) from one warp-ordered array (warps*32,) per register;
    `decode(elements)` turns raw elements (the registers' values, or with several elements a
    register their unsigned parts, 8 or 16 bits, the lowest first) into element values."""
    return gather_chain(frag, regs, 1, decode, "bik", "bik")


def gather_chain(frag: Fragment, regs: list[np.ndarray], steps: int, decode, axes: str, layout: str,
                 columns: int = 1) -> np.ndarray:
    """The matrices of `steps` chained instructions side by side along k (of `columns` chains side by
    side along C), in `layout` (see Fragment.chain_sources): one gather from their registers, `regs`
    step by step, register by register, chain by chain (steps * registers * columns warp-ordered
    arrays)."""
    raw = np.stack(regs)
    if frag.halves > 1:
        raw = raw.astype(np.uint32, copy=False).view(f"u{4 // frag.halves}")
    warps = len(regs[0]) // 32
    if layout[-1] != "b" or warps == 1:
        return decode(raw.reshape(-1).take(frag.chain_sources(warps, steps, axes, layout, columns)))
    # the warps innermost: each (register, lane, part) is a row of all warps' elements, and the layout's
    # rows are those rows in another order (where one warp's elements lie, Fragment.chain_sources)
    rows = np.ascontiguousarray(raw.reshape(len(regs), warps, -1).transpose(0, 2, 1)).reshape(-1, warps)
    where = frag.chain_sources(1, steps, axes, layout, columns)
    return decode(rows.take(where.reshape(-1), axis=0)).reshape(where.shape[:-1] + (warps,))


def scatter(frag: Fragment, matrix: np.ndarray) -> list[list[np.ndarray]]:
    """The inverse of gather: (warps, R, C) -> per register, per element of it, (warps*32,) values."""
    placed = matrix.reshape(-1).take(frag.destinations(len(matrix)))  # (registers, halves, warps*32)
    return [list(register) for register in placed]


# ------------------------------------------------------------------ ldmatrix / stmatrix

def ldmatrix_lanes(count: int) -> np.ndarray:
    """For matrix m, row r of an ldmatrix/stmatrix .x{count}: the lane that gives its address."""
    return np.arange(8 * count).reshape(count, 8)


def ldmatrix_words(mats: np.ndarray, trans: bool) -> np.ndarray:
    """The registers of ldmatrix/stmatrix from 8x8 matrices of 16-bit elements (..., 8, 8): lane l
    holds row l/4, columns 2(l%4) and 2(l%4)+1 (low half first) - of the transposed matrix with
    .trans -, i.e. the matrix's 32-bit words row by row: (..., 32) uint32."""
    mats = mats.swapaxes(-1, -2) if trans else mats
    return np.ascontiguousarray(mats, np.uint16).view(np.uint32).reshape(mats.shape[:-2] + (32,))


def ldmatrix_matrices(words: np.ndarray, trans: bool) -> np.ndarray:
    """ldmatrix_words' inverse: (..., 32) register values -> (..., 8, 8) 16-bit matrices."""
    mats = np.ascontiguousarray(words, np.uint32).view(np.uint16).reshape(words.shape[:-1] + (8, 8))
    return mats.swapaxes(-1, -2) if trans else mats


# ------------------------------------------------------------------ descriptors

@dataclass(frozen=True)
class MatrixDescriptor:
    """The fields of a wgmma shared-memory matrix descriptor, in bytes."""

    start: int
    leading: int   # LBO
    stride: int    # SBO
    base_offset: int
    swizzle: int   # width in bytes, 0 for none

    @classmethod
    def decode(cls, value: int) -> "MatrixDescriptor":
        value = int(value)
        code = (value >> 62) & 3
        return cls(start=(value & 0x3FFF) << 4, leading=((value >> 16) & 0x3FFF) << 4,
                   stride=((value >> 32) & 0x3FFF) << 4, base_offset=(value >> 49) & 7,
                   swizzle=DESCRIPTOR_SWIZZLE[code])

    def encode(self) -> int:
        code = {v: k for k, v in DESCRIPTOR_SWIZZLE.items()}[self.swizzle]
        return ((self.start >> 4) & 0x3FFF) | (((self.leading >> 4) & 0x3FFF) << 16) \
            | (((self.stride >> 4) & 0x3FFF) << 32) | ((self.base_offset & 7) << 49) | (code << 62)


def swizzle(address: np.ndarray, width: int) -> np.ndarray:
    """Shared addresses after the 32/64/128-byte swizzle (width 0: unchanged)."""
    if not width:
        return address
    bits = {32: 1, 64: 2, 128: 3}[width]
    return address ^ (((address >> 7) & ((1 << bits) - 1)) << 4)


def operand_addresses(desc: MatrixDescriptor, rows: int, k: int, esize: int, mn_major: bool) -> np.ndarray:
    """Shared byte addresses (rows, k) of the elements of an R x K operand."""
    r = np.arange(rows)[:, None]
    kk = np.arange(k)[None, :]
    w = desc.swizzle
    if not mn_major:
        if w:
            offset = (r % 8) * w + (r // 8) * desc.stride + kk * esize
        else:
            offset = (r % 8) * 16 + (r // 8) * desc.stride + (kk * esize // 16) * desc.leading \
                + (kk * esize % 16)
    else:
        t = 16 // esize
        if w:
            chunks = w // 16
            offset = (r % t) * esize + (r // t % chunks) * 16 + (r // (t * chunks)) * desc.leading \
                + (kk % 8) * w + (kk // 8) * desc.stride
        else:
            offset = (r % t) * esize + (r // t) * desc.stride + (kk % 8) * 16 + (kk // 8) * desc.leading
    return swizzle(desc.start + offset, w)
