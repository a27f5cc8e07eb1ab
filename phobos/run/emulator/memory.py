# Emulated memory: global allocations, shared and local windows, the kernel
# parameters, generic addressing, the shared-memory race detector and pending
# cp.async copies.
#
# Global memory is a set of allocations at 256-byte aligned addresses in a
# fake 64-bit address space, with gaps at least as large as the allocation
# between them, so that an overrun lands outside every allocation and is
# reported instead of silently touching a neighbour.  The allocations live in
# one byte array (the heap) so that a load from many threads is one NumPy
# gather whatever allocations the addresses fall in.
#
# Shared memory is one row of bytes per CTA and local memory one row per
# thread; an address in those spaces is an offset within the row.  Generic
# addresses map three apertures onto them and onto the (read-only) parameter
# buffer (what `cvta.shared`/`cvta.local`/`cvta.param` produce); everything
# else in the generic space is global.
#
# Every access is checked: bounds, then alignment (an access of n bytes needs
# an address that is a multiple of n, as on the GPU).  Shared accesses also go
# through the race detector, which remembers per byte, since the CTA's last
# barrier, which thread wrote it and which threads read it.  It also keeps the
# shadow state of the asynchronous proxy: bytes that a wgmma or bulk store in
# flight reads (writing them is an error) and bytes that a bulk tensor copy wrote under an
# mbarrier phase (reading them before observing that phase is an error).
# Accesses that take whole 16-byte chunks (ldmatrix, cp.async.cg, 16-byte
# vector loads and stores) are recorded once per chunk until an access of part
# of a chunk writes its record out to the bytes (_Accesses.settle), and
# per-chunk summaries of what touched a chunk spare the look at its bytes.
# Global accesses go through a detector of their own (GlobalRaceDetector):
# nothing orders threads of different CTAs, so there a conflict counts
# whenever it happens, and within a CTA the CTA's barrier count (its epoch)
# tells accesses apart.
from __future__ import annotations

import bisect
import functools
import sys
from dataclasses import dataclass

import numpy as np

from .errors import (AsyncCopyHazard, Fault, GlobalMemoryRace, MemoryFault, MisalignedAddress, MissingProxyFence,
                     NonCoherentRead, SharedMemoryRace)

GLOBAL_BASE = 0x100_0000_0000
NULL_REGION = 1 << 20  # addresses below this are reported as null pointers
PARAM_APERTURE = 0x7D00_0000_0000
SHARED_APERTURE = 0x7E00_0000_0000
LOCAL_APERTURE = 0x7F00_0000_0000
APERTURE_SIZE = 1 << 32
ALLOC_ALIGN = 256
#: The bits of a shared address above RANK_SHIFT are the cluster rank of the CTA whose memory it is, those
#: below (OFFSET_MASK) the offset in its shared memory (cluster.py).
RANK_SHIFT = 24
OFFSET_MASK = (1 << RANK_SHIFT) - 1

# Access kinds; only the first three take part in shared-memory race detection.
LOAD, STORE, ATOMIC = "load", "store", "atomic"
ASYNC = "cp.async write"
NC_LOAD = "load through the non-coherent cache"  # ld.global.nc
ASYNC_SOURCE = "cp.async source read"
ASYNC_PROXY = "asynchronous-proxy access"  # bulk copies and wgmma operands: checked by the caller
STRONG_STORE = "strong store"  # st.relaxed / .volatile / .release of global memory: no race with another
MBARRIER = "mbarrier access"
BULK_READ, BULK_WRITE = "bulk tensor copy read", "bulk tensor store"  # of global memory (TMA)
UNTRACKED = frozenset({ASYNC, ASYNC_PROXY, MBARRIER})

#: Global race detection keeps 32 bytes of shadow state per byte of global memory; launches whose
#: allocations are larger than this are not checked for global races.
GLOBAL_RACE_LIMIT = 8 << 20
#: The global accesses it tracks: not atomics, nor strong stores (strong operations do not race with each
#: other; one of the values stored is written), nor bulk (TMA) copies, which the asynchronous proxy orders.
GLOBAL_TRACKED = frozenset({LOAD, NC_LOAD, STORE, ASYNC_SOURCE})
#: The bits of a footprint of global memory (what a share of a launch's CTAs accessed, per heap byte:
#: workers.py), and the global accesses that only read.
READ, WRITE = 1, 2
GLOBAL_READS = frozenset({LOAD, NC_LOAD, ASYNC_SOURCE, BULK_READ})
#: Shared bytes that asynchronous operations in flight read are counted per chunk of this many bytes:
#: a wgmma operand and a bulk tensor store read whole chunks (descriptors address 16-byte units, core
#: matrices are 16-byte rows; a tensor map's box rows are multiples of 16 bytes and the swizzles move
#: whole chunks), so a byte is being read exactly when its chunk is.
ASYNC_READ_CHUNK = 16
#: The race detectors also keep, per chunk of this many bytes, whether any access of a kind touched it, so
#: that an access of at most this many bytes aligned to its size (one chunk) is checked against untouched
#: chunks without looking at their bytes.
SUMMARY_CHUNK = 16


def lane_threads(idx, n):
    return np.arange(n) if idx is None else idx


def same_byte_twice(b, values=None):
    """Indices (i, j) of two writes of one instruction to the same byte `b[i] == b[j]` - of different
    values `values[i] != values[j]` where the values are given - else None; i is the first entry
    that writes the byte, j the first after it that clashes with it."""
    if len(b) < 2:
        return None
    order = np.argsort(b, kind="stable")
    ordered = b[order]
    starts = np.empty(len(b), bool)
    starts[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    first = np.maximum.accumulate(np.where(starts, np.arange(len(b)), 0))
    clash = ~starts if values is None else values[order] != values[order][first]
    found = np.flatnonzero(clash)
    return (order[first[found[0]]], order[found[0]]) if found.size else None


class _Lazy:
    """A value computed on first use (None stays None)."""

    def __init__(self, make):
        self.make, self.value, self.done = make, None, make is None

    def get(self):
        if not self.done:
            self.value, self.done = self.make(), True
        return self.value


def stored_bytes(values: list, dtype: np.dtype, lanes: int) -> np.ndarray:
    """The bytes a store of `values` (one array per vector element) writes, lane by lane (lane-major,
    as the race detectors list the bytes of an access)."""
    columns = [np.broadcast_to(np.asarray(v).astype(dtype, copy=False), (lanes,)) for v in values]
    return np.stack(columns, axis=1).view(np.uint8).reshape(-1)


def access_bytes(flat, nbytes: int) -> np.ndarray:
    """The bytes of accesses of `nbytes` at `flat` (one per lane), lane by lane."""
    return flat if nbytes == 1 else (np.asarray(flat)[:, None] + np.arange(nbytes)).reshape(-1)


def lane_bytes(offsets, nbytes) -> tuple[np.ndarray, np.ndarray]:
    """The bytes accessed by lanes at `offsets` of `nbytes` bytes each (one size per lane), with the
    lane of each."""
    offsets = np.asarray(offsets, np.int64)
    counts = np.broadcast_to(np.asarray(nbytes, np.int64), offsets.shape)
    lane = np.repeat(np.arange(len(offsets)), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    return offsets[lane] + (np.arange(len(lane)) - first), lane


def in_thread_order(idx) -> bool:
    """Whether the lanes `idx` (batch thread indices; None: all) come in ascending order, so that the
    accesses of any byte do too (threads that share a byte of shared memory share their CTA, whose
    linear ids then ascend as well)."""
    return idx is None or len(idx) < 2 or bool((idx[1:] >= idx[:-1]).all())


@functools.lru_cache(maxsize=64)
def _lane_numbers(n: int) -> np.ndarray:
    numbers = np.arange(n, dtype=np.int32)
    numbers.flags.writeable = False
    return numbers


@functools.lru_cache(maxsize=64)
def full_sizes(n: int, nbytes: int) -> np.ndarray:
    """`nbytes` for each of `n` lanes (the source sizes of cp.async copies of whole cp-size), read-only."""
    sizes = np.full(n, nbytes, np.int64)
    sizes.flags.writeable = False
    return sizes


def lanes_apart(flat, nbytes, stamp=None, aligned: bool = False) -> bool:
    """Whether accesses of `nbytes` (an int, or one per lane) at the offsets `flat` (one per lane)
    touch no byte twice.  `stamp`: a scratch array as long as the space, which makes the test of
    aligned accesses linear; `aligned`: the offsets are known to be multiples of nbytes."""
    flat = np.asarray(flat)
    if len(flat) < 2:
        return True
    if not isinstance(nbytes, (int, np.integer)):
        nbytes = np.asarray(nbytes)
        ordered = np.argsort(flat)
        return bool((flat[ordered][1:] - flat[ordered][:-1] >= nbytes[ordered][:-1]).all())
    if not aligned and (flat[1:] - flat[:-1] >= nbytes).all():  # ascending, without overlaps: the common case
        return True
    if stamp is not None and (aligned or nbytes == 1 or not (flat % nbytes).any()):  # apart where starts differ
        lanes, starts = _lane_numbers(len(flat)), flat // nbytes
        stamp[starts] = lanes
        return bool((stamp[starts] == lanes).all())
    ordered = np.sort(flat)
    return bool((ordered[1:] - ordered[:-1] >= nbytes).all())


def distinct_lanes(flat, tid, nbytes: int, epoch=None, flag=None):
    """distinct_bytes for accesses of `nbytes` at offsets `flat` that are multiples of nbytes (so that
    lanes with a byte in common have all in common), found from the lanes: sorting lanes, not bytes.
    `epoch`: per lane; `flag`: per byte, lane by lane."""
    flag = None if flag is None else flag.reshape(-1, nbytes)
    once, lo, hi, epoch, flag = distinct_bytes(flat, tid, epoch, flag)
    return (access_bytes(once, nbytes), np.repeat(lo, nbytes), np.repeat(hi, nbytes),
            None if epoch is None else np.repeat(epoch, nbytes), None if flag is None else flag.reshape(-1))


def distinct_bytes(b, t, epoch=None, flag=None):
    """The distinct bytes of `b` (the bytes of an access, one entry per lane and byte), each with the
    lowest and highest of the threads `t` that touch it, the highest of their `epoch`s and whether
    any of their `flag`s is set (rows of flags: column by column; those two None where not given)."""
    order = np.lexsort((t, b))
    b, t = b[order], t[order]
    first = np.empty(len(b), bool)
    first[:1] = True
    np.not_equal(b[1:], b[:-1], out=first[1:])
    last = np.empty(len(b), bool)
    last[-1:] = True
    last[:-1] = first[1:]
    starts = np.flatnonzero(first)
    if epoch is not None:
        epoch = np.maximum.reduceat(np.asarray(epoch)[order], starts)
    if flag is not None:
        flag = np.logical_or.reduceat(np.asarray(flag)[order], starts, axis=0)
    return b[first], t[first], t[last], epoch, flag


def check_alignment(space_name, addr, align, idx, access):
    if align == 1 or not int(np.bitwise_or.reduce(addr)) & (align - 1):  # (one pass: the bits any address has)
        return
    bad = (addr & np.uint64(align - 1)) != 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise Fault(MisalignedAddress,
                    f"misaligned address: {space_name} {access} at {int(addr[i]):#x}, "
                    f"which is not a multiple of {align}",
                    thread=int(lane_threads(idx, len(addr))[i]))


class Space:
    """A state space; subclasses map addresses to offsets in `self.data`."""

    name = ""

    def __init__(self):
        self.data = np.zeros(0, np.uint8)
        self._views: dict[np.dtype, np.ndarray] = {}

    def view(self, dtype: np.dtype) -> np.ndarray:
        v = self._views.get(dtype)
        if v is None:
            v = self._views[dtype] = self.data.view(dtype)
        return v

    def locate(self, m, idx, addr, nbytes, access: str, pc: int, align: int | None = None,
               stored=None) -> np.ndarray:
        """Offsets into `data` of an access of `nbytes` (an int, or one per lane) at `addr`
        by the threads `idx`; checks bounds and alignment (to `align`, default nbytes).  `stored`:
        for a store, a function giving the bytes it writes (`stored_bytes`), for the race detectors."""
        raise NotImplementedError

    def load(self, m, idx, addr, dtype: np.dtype, count: int, pc: int, access: str = LOAD) -> list[np.ndarray]:
        block = self.load_rows(m, idx, addr, dtype, count, pc, access)
        return [block[:, k] for k in range(count)]

    def load_rows(self, m, idx, addr, dtype: np.dtype, count: int, pc: int, access: str = LOAD) -> np.ndarray:
        """The `count` consecutive values of `dtype` at each lane's address: (lanes, count)."""
        size = dtype.itemsize
        pos = self.locate(m, idx, addr, size * count, access, pc) // size
        view = self.view(dtype)
        # (aligned to the whole access, as locate checked: offsets of accesses of up to 16 bytes are aligned as
        # their addresses are) rows of `count` values
        if size * count <= SUMMARY_CHUNK or not (pos % count).any():
            return view[: len(view) // count * count].reshape(-1, count).take(pos // count, axis=0)
        return view[pos[:, None] + np.arange(count)]

    def store(self, m, idx, addr, dtype: np.dtype, values: list, pc: int, access: str = STORE) -> None:
        size = dtype.itemsize
        lanes = m.n if idx is None else len(idx)
        pos = self.locate(m, idx, addr, size * len(values), access, pc,
                          stored=lambda: stored_bytes(values, dtype, lanes)) // size
        view = self.view(dtype)
        for k, v in enumerate(values):
            view[pos + k] = v

    def atomic(self, m, idx, addr, dtype: np.dtype, update, b, c, pc: int) -> np.ndarray:
        """Apply `old -> update(old, b, c)` for every lane, in thread order; return the old values."""
        size = dtype.itemsize
        pos = self.locate(m, idx, addr, size, ATOMIC, pc) // size
        return apply_atomic(self.view(dtype), pos, update, b, c)


def apply_atomic(view, pos, update, b, c):
    """Atomic read-modify-write of view[pos] by every lane, serialised in lane order.

    Lanes hitting distinct elements are done together; lanes sharing an
    element are done in rounds (the k-th lane of every element in round k), so
    every contribution counts and float sums round in thread order.
    """
    n = len(pos)
    b = np.broadcast_to(b, (n,))
    c = None if c is None else np.broadcast_to(c, (n,))
    order = np.argsort(pos, kind="stable")
    spos = pos[order]
    starts = np.empty(n, bool)
    starts[:1] = True
    np.not_equal(spos[1:], spos[:-1], out=starts[1:])
    old = np.empty(n, view.dtype)
    if starts.all():
        old[:] = view[pos]
        view[pos] = update(old, b, c)
        return old
    first = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - first
    for r in range(int(rank.max()) + 1):
        sel = np.flatnonzero(rank == r)
        p = pos[sel]
        o = view[p]
        old[sel] = o
        view[p] = update(o, b[sel], None if c is None else c[sel])
    return old


class GlobalSpace(Space):
    """Global memory: allocations in a fake 64-bit address space, backed by one heap."""

    name = "global"

    def __init__(self):
        super().__init__()
        self.blocks: list[tuple[str, int, int, int]] = []  # (name, address, size, heap offset)
        self._next_address = GLOBAL_BASE
        self._heap_size = 0
        self._pending: list[tuple[int, bytes | np.ndarray]] = []
        self.races: GlobalRaceDetector | None = None  # set by the launch when races are checked
        # READ/WRITE bits per heap byte of the accesses `races` does not track (all of them where it is
        # None), where the launch runs in shares (workers.py)
        self.untracked: np.ndarray | None = None

    def allocate(self, data, name: str, address: int | None = None) -> int:
        """Add an allocation holding a copy of `data` (bytes-like); return its address.

        Addresses are handed out in order, so the same sequence of sizes always
        gets the same addresses; `address`, if given, must be the next one.
        """
        raw = np.frombuffer(memoryview(data).cast("B"), np.uint8) if not isinstance(data, np.ndarray) \
            else data.reshape(-1).view(np.uint8)
        size = len(raw)
        if address is None:
            address = self._next_address
        elif address != self._next_address:
            raise ValueError(f"{name} expected at {address:#x}, the next address is {self._next_address:#x}")
        heap_offset = self._heap_size
        self.blocks.append((name, address, size, heap_offset))
        self._pending.append((heap_offset, raw))
        span = -(-max(size, 1) // ALLOC_ALIGN) * ALLOC_ALIGN
        self._next_address = address + span + max(span, 1 << 16)
        self._heap_size = heap_offset + span
        return address

    def seal(self) -> None:
        """Lay the allocations out in the heap; call after the last `allocate`."""
        heap = np.zeros(self._heap_size + 16, np.uint8)
        for offset, raw in self._pending:
            heap[offset: offset + len(raw)] = raw
        self._pending = []
        self.data = heap
        self._views = {}
        self._bases = np.array([b[1] for b in self.blocks], np.uint64)
        self._sizes = np.array([b[2] for b in self.blocks], np.uint64)
        self._offsets = np.array([b[3] for b in self.blocks], np.int64)
        self._starts = [b[1] for b in self.blocks]

    def contents(self, address: int) -> np.ndarray:
        """The bytes of the allocation at `address` (a view into the heap)."""
        for _, base, size, offset in self.blocks:
            if base == address:
                return self.data[offset: offset + size]
        raise KeyError(hex(address))

    def locate(self, m, idx, addr, nbytes, access, pc, align=None, stored=None):
        addr = np.asarray(addr, np.uint64)
        nbytes = np.asarray(nbytes, np.uint64) if not isinstance(nbytes, int) else np.uint64(nbytes)
        what = LOAD if access == NC_LOAD else access
        inside = self._inside_one(addr, nbytes)
        if inside is not None:  # the common case: every lane in one allocation
            check_alignment(self.name, addr, align or int(nbytes), idx, what)
            offsets = (addr - np.uint64(inside)).view(np.int64)
        else:
            offsets = self._offsets_of(idx, addr, nbytes, what)
            check_alignment(self.name, addr, align or int(nbytes), idx, what)
        if self.races is not None and access in GLOBAL_TRACKED:
            # (allocations are ALLOC_ALIGN-aligned in the heap too: offsets are aligned as addresses are)
            self.races.check(m, idx, offsets, nbytes, access, pc,
                             aligned=nbytes.ndim == 0 and (align or int(nbytes)) % int(nbytes) == 0)
        elif self.untracked is not None:
            self._mark(offsets, nbytes, READ if access in GLOBAL_READS else WRITE)
        return offsets

    def _inside_one(self, addr, nbytes) -> int | None:
        """Where every access of `nbytes` (an int or one per lane) at `addr` lies inside one allocation: its
        address less its heap offset (what turns addresses into heap offsets); else None."""
        if not addr.size or not self.blocks:
            return None
        low, high = int(addr.min()), int(addr.max())
        k = bisect.bisect_right(self._starts, low) - 1
        if k < 0:
            return None
        _, base, size, offset = self.blocks[k]
        longest = int(nbytes) if nbytes.ndim == 0 else int(nbytes.max())
        return base - offset if high < base + size and high + longest <= base + size else None

    def _offsets_of(self, idx, addr, nbytes, what: str) -> np.ndarray:
        """Heap offsets of accesses of `nbytes` at `addr`, checked to lie in the allocations."""
        bases, sizes = (self._bases, self._sizes) if self.blocks else (np.zeros(1, np.uint64),) * 2
        k = np.searchsorted(bases, addr, side="right") - 1
        kc = np.maximum(k, 0)
        rel = addr - bases[kc]
        size = sizes[kc]
        ok = (k >= 0) & (rel < size) & (rel + nbytes <= size)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            n = int(np.broadcast_to(nbytes, ok.shape)[i])
            raise Fault(MemoryFault,
                        f"out-of-bounds global {what} of {n} bytes at {int(addr[i]):#x}: "
                        f"{self.describe(int(addr[i]), n)}",
                        thread=int(lane_threads(idx, len(addr))[i]))
        return rel.astype(np.int64) + self._offsets[kc]

    def _mark(self, offsets, nbytes, bit: int) -> None:
        """Set `bit` in `untracked` for the bytes accessed at heap `offsets`, `nbytes` each (by rows of
        that many bytes where the accesses are aligned to their size)."""
        size = int(nbytes) if nbytes.ndim == 0 else 0
        if size and not (offsets % size).any():
            _units(self.untracked, size)[offsets // size] |= np.uint8(bit)
        else:
            self.untracked[access_bytes(offsets, size) if size else lane_bytes(offsets, nbytes)[0]] |= np.uint8(bit)

    def footprint(self, pristine: np.ndarray) -> np.ndarray:
        """READ/WRITE bits per heap byte of every access so far (the race detector's records, the
        untracked accesses, and the bytes that differ from `pristine`, the heap before them)."""
        bits = self.untracked.copy() if self.races is None else self.races.footprint() | self.untracked
        bits[self.data != pristine] |= WRITE
        return bits

    def describe_offset(self, offset: int) -> str:
        """A heap offset as `name+k (address)`."""
        for name, base, size, start in self.blocks:
            if start <= offset < start + size:
                return f"{name}+{offset - start} ({base + offset - start:#x})"
        return f"heap offset {offset:#x}"

    def describe(self, address: int, nbytes: int) -> str:
        """Where an access of nbytes at address lies relative to the allocations."""
        if address < NULL_REGION:
            return "not in any allocation (a null or uninitialised pointer?)"
        if not self.blocks:
            return "no memory is allocated"

        def distance(block):
            _, base, size, _ = block
            return base - address if address < base else max(0, address - (base + size))
        name, base, size, _ = min(self.blocks, key=distance)
        if address < base:
            where = f"{base - address} bytes before the start of"
        elif address < base + size:
            where = f"overrunning by {address + nbytes - base - size} bytes the end of"
        elif address == base + size:
            where = "just past the end of"
        else:
            where = f"{address - base - size} bytes past the end of"
        return f"{where} {name} ({base:#x}, {size} bytes)"


class WindowSpace(Space):
    """Shared (one row per CTA) or local (one row per thread) memory."""

    def __init__(self, name: str, rows: int, size: int, row_of_thread: np.ndarray):
        super().__init__()
        self.name = name
        self.size = size
        self.stride = max(16, -(-size // 16) * 16)  # rows stay 16-byte aligned
        self.data = np.zeros(rows * self.stride + 16, np.uint8)
        self.row_of_thread = row_of_thread
        self.row_start = row_of_thread.astype(np.int64) * self.stride  # each thread's row's first byte
        self.races: RaceDetector | None = None  # set for shared memory when races are checked
        # shared memory of clusters of several CTAs, races checked: accesses between CTAs (cluster.py)
        self.cluster_races = None
        # shared memory of clusters of several CTAs: per thread, the rank bits its CTA's own shared addresses
        # carry (cluster.rank_bits); an address may carry them or none
        self.rank_bits: np.ndarray | None = None

    def own_offsets(self, idx, addr: np.ndarray) -> np.ndarray:
        """The offsets of the executing CTAs' own shared addresses `addr` (their rank bits, or none, taken
        off); a lane whose address carries another CTA's rank is a fault.  (`addr` itself where the launch
        has no clusters of several CTAs: every bit is the offset's there.)"""
        if self.rank_bits is None:
            return addr
        bits = self.rank_bits if idx is None else self.rank_bits[idx]
        high = addr >> np.uint64(RANK_SHIFT)
        other = (high != 0) & (high != bits >> np.uint64(RANK_SHIFT))
        if other.any():
            i = int(np.flatnonzero(other)[0])
            raise Fault(MemoryFault, f"shared::cta access at {int(addr[i]):#x}, an address of the CTA of cluster rank "
                                     f"{int(high[i])}: another CTA's shared memory (from mapa) is reached with "
                                     f".shared::cluster", thread=int(lane_threads(idx, len(addr))[i]))
        return addr & np.uint64(OFFSET_MASK)

    def locate(self, m, idx, addr, nbytes, access, pc, align=None, stored=None):
        off = self.own_offsets(idx, np.asarray(addr, np.uint64))
        bad = off.size and int(off.max()) > self.size - nbytes  # (then find the lane)
        if bad:
            bad = (off >= np.uint64(self.size)) | (off + np.uint64(nbytes) > np.uint64(self.size))
            i = int(np.flatnonzero(bad)[0])
            raise Fault(MemoryFault,
                        f"out-of-bounds {self.name} {access} of {nbytes} bytes at {self.name} address "
                        f"{int(off[i]):#x}: only {self.size} bytes of {self.name} memory are declared",
                        thread=int(lane_threads(idx, len(off))[i]))
        check_alignment(self.name, off, align or nbytes, idx, access)
        flat = (self.row_start if idx is None else self.row_start[idx]) + off.view(np.int64)
        if self.races is not None and access not in UNTRACKED:
            # (rows are 16-byte aligned: accesses of up to 16 bytes are aligned in `flat` as in `off`)
            self.races.check(m, idx, flat, nbytes, access, pc, stored, aligned=align is None or align % nbytes == 0)
            if self.cluster_races is not None:
                self.cluster_races.check(m, lane_threads(idx, len(off)), flat, nbytes, access, pc)
        return flat


class ParamSpace(Space):
    """The kernel's parameter buffer, read-only, reached through generic addresses."""

    name = "param"

    def __init__(self, params: np.ndarray, size: int):
        super().__init__()
        self.data = params
        self.size = size

    def locate(self, m, idx, addr, nbytes, access, pc, align=None, stored=None):
        off = np.asarray(addr, np.uint64)
        if access != LOAD:
            raise Fault(MemoryFault, f"{access} to the kernel parameter space, which is read-only",
                        thread=int(lane_threads(idx, len(off))[0]))
        bad = off + np.uint64(nbytes) > np.uint64(self.size)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise Fault(MemoryFault, f"out-of-bounds parameter {access} of {nbytes} bytes at parameter offset "
                                     f"{int(off[i]):#x}: the parameters take {self.size} bytes",
                        thread=int(lane_threads(idx, len(off))[i]))
        check_alignment(self.name, off, align or nbytes, idx, access)
        return off.astype(np.int64)


class GenericSpace(Space):
    """The generic space: shared and local apertures, global elsewhere."""

    name = "generic"

    def __init__(self, glob: GlobalSpace, shared: WindowSpace, local: WindowSpace, params: ParamSpace):
        super().__init__()
        self.parts = ((shared, SHARED_APERTURE), (local, LOCAL_APERTURE), (params, PARAM_APERTURE))
        self.glob = glob

    def _split(self, idx, addr):
        """Yield (space, lane selector, lane thread indices, space address) per space used."""
        addr = np.asarray(addr, np.uint64)
        rest = np.ones(len(addr), bool)
        for space, base in self.parts:
            rel = addr - np.uint64(base)
            inside = rel < np.uint64(APERTURE_SIZE)
            if inside.any():
                rest &= ~inside
                yield space, inside, lane_threads(idx, len(addr))[inside], rel[inside]
        if rest.all():
            yield self.glob, slice(None), idx, addr
        elif rest.any():
            yield self.glob, rest, lane_threads(idx, len(addr))[rest], addr[rest]

    def load(self, m, idx, addr, dtype, count, pc, access=LOAD):
        out = [np.empty(len(addr), dtype) for _ in range(count)]
        for space, sel, sub, a in self._split(idx, addr):
            for k, v in enumerate(space.load(m, sub, a, dtype, count, pc, access)):
                out[k][sel] = v
        return out

    def store(self, m, idx, addr, dtype, values, pc, access=STORE):
        n = len(addr)
        for space, sel, sub, a in self._split(idx, addr):
            space.store(m, sub, a, dtype, [np.broadcast_to(v, (n,))[sel] for v in values], pc, access)

    def atomic(self, m, idx, addr, dtype, update, b, c, pc):
        n = len(addr)
        old = np.empty(n, dtype)
        for space, sel, sub, a in self._split(idx, addr):
            old[sel] = space.atomic(m, sub, a, dtype, update, np.broadcast_to(b, (n,))[sel],
                                    None if c is None else np.broadcast_to(c, (n,))[sel], pc)
        return old


# ---------------------------------------------------------------- race detector

_NOBODY = np.int32(-1)
_NOBODY_LOW = np.int32(np.iinfo(np.int32).max)
WARP = 32


def _units(shadow: np.ndarray, size: int) -> np.ndarray:
    """A per-byte shadow array viewed as rows of `size` bytes (row r: bytes r*size to r*size + size - 1)."""
    return shadow[: len(shadow) // size * size].reshape(-1, size)


def shadow_arrays(n: int, *fills: int) -> list[np.ndarray]:
    """int32 arrays of `n` entries, one per fill value, as rows of one allocation: NumPy asks the kernel
    for huge pages for allocations of 4 MiB and more, and a launch's shadow state, a few arrays of
    one entry per byte of memory, is then paged in at a fraction of the cost (page faults took a
    tenth of a launch's time).  The allocation is one that an earlier detector left where there is
    one (`_SHADOW_BLOCKS`), refilled; else a new one, whose zero rows are not touched until used."""
    block = _SHADOW_BLOCKS.take((len(fills), n))
    if block is None:
        block = _SHADOW_BLOCKS.lend(np.zeros((len(fills), n), np.int32))
        fills = tuple(fill if fill else None for fill in fills)
    for row, fill in zip(block, fills):
        if fill is not None:
            row.fill(fill)
    return list(block)


class _ShadowBlocks:
    """The shadow allocations handed out, kept for reuse once nothing refers to them but this list (no
    row or view of one is alive: a view refers to the allocation itself).  Refilling one costs a
    memset; a new one, a page fault per 4 KiB it touches, several times as much (a launch of 4 CTAs
    makes some 20 of them).  Those kept beyond `KEPT_BYTES` are let go, the oldest first."""

    KEPT_BYTES = 256 << 20

    def __init__(self):
        self.blocks: list[np.ndarray] = []

    def lend(self, block: np.ndarray) -> np.ndarray:
        spare = 0
        for at in reversed(range(len(self.blocks))):  # (newest first: the oldest go)
            if self._unused(at):
                spare += self.blocks[at].nbytes
                if spare > self.KEPT_BYTES:
                    del self.blocks[at]
        self.blocks.append(block)
        return block

    def take(self, shape: tuple[int, int]) -> np.ndarray | None:
        """An unused allocation of `shape`, lent again; None where there is none."""
        for at in range(len(self.blocks)):
            if self.blocks[at].shape == shape and self._unused(at):
                self.blocks.append(self.blocks.pop(at))
                return self.blocks[-1]
        return None

    def _unused(self, at: int) -> bool:
        return sys.getrefcount(self.blocks[at]) == 2  # (the list's reference and the argument)


_SHADOW_BLOCKS = _ShadowBlocks()


@functools.cache
def _unit(nbytes: int) -> np.dtype:
    """The dtype of one opaque element of `nbytes` bytes (a row of a shadow array moved as one)."""
    return np.dtype((np.void, nbytes))


def _unit_rows(shadow: np.ndarray, size: int) -> np.ndarray:
    """_units(shadow, size) with each row one element of _unit (NumPy indexes those far faster than
    rows of a 2-d array)."""
    return shadow[: len(shadow) // size * size].view(_unit(size * shadow.itemsize))


def _put_units(shadow: np.ndarray, rows, values: np.ndarray) -> None:
    """shadow's rows of `values.shape[1]` bytes at `rows` set to `values` (a repeated row keeps the
    last), each row moved as one element."""
    size = values.shape[1]
    _unit_rows(shadow, size)[rows] = np.ascontiguousarray(values, shadow.dtype).view(_unit(size * shadow.itemsize)) \
        .reshape(-1)


@functools.lru_cache(maxsize=4096)
def _unit_of(dtype: np.dtype, size: int, value: int):
    """One element of _unit holding `size` entries of `dtype` equal to `value`."""
    return np.full(size, value, dtype).view(_unit(size * dtype.itemsize))[0]


def _fill_units(shadow: np.ndarray, rows, size: int, value: int) -> None:
    """shadow's rows of `size` bytes at `rows` set to `value` (as _put_units does, one element a row)."""
    _unit_rows(shadow, size)[rows] = _unit_of(shadow.dtype, size, value)


def _settle_chunks(chunks, whole: np.ndarray, shadows) -> bool:
    """Write the state of the chunks among `chunks` held whole (`whole`, per chunk) to their bytes, which
    hold it from then on: each (per-byte shadow array, per-chunk array) of `shadows`.  Whether any was."""
    chunks = chunks[whole.take(chunks)]
    if not chunks.size:
        return False
    for shadow, per_chunk in shadows:
        _put_units(shadow, chunks, lane_rows(per_chunk.take(chunks), SUMMARY_CHUNK))
    whole[chunks] = False
    return True


def rows_and_chunks(offsets, nbytes: int):
    """The rows of `nbytes` bytes and the chunks of accesses of `nbytes` (at most a chunk) aligned at
    `offsets`: one array for both where they are whole chunks."""
    chunks = offsets // SUMMARY_CHUNK
    return (chunks if nbytes == SUMMARY_CHUNK else offsets // nbytes), chunks


def lane_rows(tid: np.ndarray, nbytes: int) -> np.ndarray:
    """Each lane's thread `tid` repeated for its `nbytes` bytes: (lanes, nbytes), laid out as the rows
    that _units takes (NumPy compares those far faster than against a broadcast column)."""
    return np.repeat(tid, nbytes).reshape(-1, nbytes)


def _conflict_by_lanes(kinds, rows, chunks, tid, nbytes: int) -> bool:
    """Whether an access recorded in one of `kinds` (_Accesses or None) at the rows of `nbytes` bytes
    `rows` (in the chunks `chunks`) was made by another thread than the lane's (`tid`):
    RaceDetector._conflicts a lane at a time, without warp epochs."""
    lanes = None
    for earlier in kinds:
        if earlier is not None and earlier.live and earlier.touched.take(chunks).any():
            hi = _units(earlier.hi, nbytes).take(rows, axis=0)
            made = hi != _NOBODY
            if made.any():
                lanes = lane_rows(tid, nbytes) if lanes is None else lanes
                if (made & ((_units(earlier.lo, nbytes).take(rows, axis=0) != lanes) | (hi != lanes))).any():
                    return True
    return False


def _conflict_by_chunks(kinds, chunks, tid):
    """_conflict_by_lanes for accesses of whole chunks `chunks` (one per lane): True or False, or None
    where a chunk that one of `kinds` touched holds its accesses byte by byte (not known here)."""
    for earlier in kinds:
        held = False if earlier is None else earlier.by_chunks(chunks)
        if held is None:
            return None
        if held is not False:
            lo, hi = held
            if ((hi != _NOBODY) & ((lo != tid) | (hi != tid))).any():
                return True
    return False


class _Accesses:
    """One kind of access (plain writes, plain reads or atomics) to every shared byte
    since the CTA's last barrier: the lowest and highest thread ids (linear within
    the CTA) that made one, so that 'by some other thread' is two comparisons, the
    last instruction that made one, and the warp-barrier epoch of the access.

    Per chunk of SUMMARY_CHUNK bytes it also keeps whether any access was recorded there
    since the last reset (`touched`), and, for chunks whose bytes were all accessed together
    by accesses of a whole chunk each (what ldmatrix, cp.async.cg and 16-byte vector loads and
    stores make), their state once for the chunk (`whole`: chunk_lo, chunk_hi, chunk_pc hold
    it, the chunk's bytes do not) - a sixteenth of the bookkeeping.  `settle` writes a whole
    chunk's state to its bytes before anything reads them byte by byte."""

    def __init__(self, n: int, what: str):
        self.what = what
        self.lo, self.hi, self.pc, self.epoch = shadow_arrays(n, _NOBODY_LOW, _NOBODY, 0, 0)
        chunks = n // SUMMARY_CHUNK
        self.touched, self.whole = np.zeros((2, chunks), bool)
        self.chunk_lo, self.chunk_hi, self.chunk_pc = shadow_arrays(chunks, _NOBODY_LOW, _NOBODY, 0)
        self.live = False  # whether any access was recorded since every CTA's records were last cleared
        self.bytes_live = False  # the same for the per-byte lo and hi
        self.wholes = False  # whether a chunk may be whole

    def reset(self, rows, stride: int) -> None:
        if not self.live:  # (nothing to forget)
            return
        self.live = rows is not None
        per_chunk = stride // SUMMARY_CHUNK
        clear = [(self.touched, False, per_chunk), (self.whole, False, per_chunk),
                 (self.chunk_lo, _NOBODY_LOW, per_chunk), (self.chunk_hi, _NOBODY, per_chunk)]
        if self.bytes_live:
            clear += [(self.lo, _NOBODY_LOW, stride), (self.hi, _NOBODY, stride)]
            self.bytes_live = rows is not None
        self.wholes &= rows is not None
        for arr, empty, width in clear:
            if rows is None:
                arr.fill(empty)
            else:
                arr[: len(arr) // width * width].reshape(-1, width)[rows] = empty

    def settle(self, chunks) -> None:
        """Write the state of the whole chunks among `chunks` to their bytes, which hold it from then on."""
        if self.wholes and _settle_chunks(chunks, self.whole, ((self.lo, self.chunk_lo), (self.hi, self.chunk_hi),
                                                                (self.pc, self.chunk_pc))):
            self.bytes_live = True

    def by_chunks(self, chunks):
        """The lowest and highest thread of the accesses recorded in `chunks` (one per lane), for chunks
        that are whole or untouched (whose chunk_lo and chunk_hi are empty); None where one is not (its
        bytes hold its accesses), False where none was touched."""
        if not self.live:
            return False
        touched = self.touched.take(chunks)
        if not touched.any():
            return False
        if (touched > self.whole.take(chunks)).any():
            return None
        return self.chunk_lo.take(chunks), self.chunk_hi.take(chunks)

    def record_chunks(self, chunks, lo, hi, pc: int) -> None:
        """Record accesses of whole chunks `chunks` (one per lane; several lanes at a chunk in ascending
        order of threads) by threads `lo` to `hi`: their state replaces the chunks' (merged with it by
        the caller)."""
        self.chunk_lo[chunks[::-1]] = lo[::-1]  # (a repeated index keeps the last value: the lowest)
        self.chunk_hi[chunks] = hi
        self.chunk_pc[chunks] = pc
        self.whole[chunks] = True
        self.touched[chunks] = True
        self.live = self.wholes = True

    def record(self, b, lo, hi, pc: int, epoch, keep, in_order: bool = False) -> None:
        """Add accesses of the distinct bytes `b` by threads `lo` to `hi` (the lowest and highest
        at each byte); `keep` (a mask, or True or False for all) says at which bytes the accesses
        recorded before stay (elsewhere the new ones replace them, as after a checked write).
        in_order: b may name a byte several times, its entries in ascending order of threads (keep
        True, no epochs) - indexing keeps the last value written to a repeated index, so the lowest
        thread is written last in reverse."""
        self.live = self.bytes_live = True
        self.touched[b // SUMMARY_CHUNK] = True
        if keep is True:
            lo, hi = np.minimum(self.lo.take(b), lo), np.maximum(self.hi.take(b), hi)
        elif keep is not False:
            lo = np.where(keep, np.minimum(self.lo.take(b), lo), lo)
            hi = np.where(keep, np.maximum(self.hi.take(b), hi), hi)
        self.lo[b[::-1] if in_order else b] = lo[::-1] if in_order else lo
        self.hi[b] = hi
        self.pc[b] = pc
        if epoch is not None:
            self.epoch[b] = np.maximum(self.epoch.take(b), epoch)

    def other_thread(self, i, b, t) -> int:
        lo = int(self.lo[b[i]])
        return lo if lo != t[i] else int(self.hi[b[i]])


class _Unfenced:
    """Plain writes of shared memory that the async proxy may not see yet: per byte, 1 + the linear tid
    of the writer that has not executed fence.proxy.async since (0: none) and the write's instruction
    (which counts only where the writer is not 0).  Writes of whole chunks (16-byte aligned stores,
    cp.async.cg copies, which leave 0) are held once per chunk (`whole`: chunk_writer, chunk_pc) until
    a write of part of the chunk settles them to its bytes; `dirty` marks chunks whose bytes may hold
    a writer, so that fences and the async proxy's checks look at the bytes of those only."""

    def __init__(self, n: int):
        self.writer, self.pc = shadow_arrays(n, 0, 0)
        chunks = n // SUMMARY_CHUNK
        self.chunk_writer, self.chunk_pc = shadow_arrays(chunks, 0, 0)
        self.whole, self.dirty = np.zeros((2, chunks), bool)

    def settle(self, chunks) -> None:
        if _settle_chunks(chunks, self.whole, ((self.writer, self.chunk_writer), (self.pc, self.chunk_pc))):
            self.dirty[chunks] = True  # (conservatively)

    def record_bytes(self, b, writer, pc: int) -> None:
        """Bytes `b` written by `writer` (1 + tid, per byte; 0: a cp.async copy)."""
        chunks = b // SUMMARY_CHUNK
        self.settle(chunks)
        self.writer[b] = writer
        self.pc[b] = pc
        self.dirty[chunks] = True

    def record_rows(self, rows, chunks, nbytes: int, tid, pc: int) -> None:
        """Rows of `nbytes` (at most a chunk, aligned) `rows` in `chunks` written by threads `tid` (None: by
        cp.async copies, which leave no writer); whole chunks a chunk at a time."""
        if nbytes == SUMMARY_CHUNK:
            if tid is None and not (self.whole.take(chunks) | self.dirty.take(chunks)).any():
                return  # (no writer there)
            self.chunk_writer[chunks] = 0 if tid is None else tid + 1
            self.chunk_pc[chunks] = pc
            self.whole[chunks] = True
            return
        if tid is None and not (self.whole.take(chunks) | self.dirty.take(chunks)).any():
            return
        self.settle(chunks)
        _put_units(self.writer, rows, lane_rows(np.zeros_like(rows, np.int32) if tid is None else tid + 1, nbytes))
        _fill_units(self.pc, rows, nbytes, pc)
        self.dirty[chunks] = True

    def at(self, b) -> tuple[np.ndarray, np.ndarray]:
        """The writer and instruction of each of bytes `b`."""
        c = b // SUMMARY_CHUNK
        whole = self.whole.take(c)
        return (np.where(whole, self.chunk_writer.take(c), self.writer.take(b)),
                np.where(whole, self.chunk_pc.take(c), self.pc.take(b)))

    def fence(self, row: int, stride: int, fencing: np.ndarray) -> None:
        """The threads with `fencing[1 + tid]` of the CTA of shared row `row` executed fence.proxy.async."""
        per_row = stride // SUMMARY_CHUNK
        chunks = slice(row * per_row, (row + 1) * per_row)
        held = self.chunk_writer[chunks]
        held[fencing[held]] = 0
        dirty = np.flatnonzero(self.dirty[chunks] & ~self.whole[chunks]) + row * per_row
        if dirty.size:
            rows = _unit_rows(self.writer, SUMMARY_CHUNK)
            writers = _units(self.writer, SUMMARY_CHUNK).take(dirty, axis=0)
            writers[fencing[writers]] = 0
            rows[dirty] = writers.view(_unit(SUMMARY_CHUNK * 4)).reshape(-1)
            self.dirty[dirty] = writers.any(axis=1)

    def check_clean(self, chunks) -> bool:
        """Whether no unfenced writer is held in `chunks`."""
        return not (self.chunk_writer.take(chunks) != 0)[self.whole.take(chunks)].any() and \
            not (self.dirty.take(chunks) & ~self.whole.take(chunks)).any()


class RaceDetector:
    """Shadow state of shared memory between barriers, one entry per byte.

    An access by thread t conflicts with an earlier one by another thread of
    the CTA since the last barrier if at least one of them is a plain write, or
    one is atomic and the other plain - except that a plain write of the value a
    byte already holds does not conflict with another thread's earlier write,
    nor do the lanes of one instruction that write the same value to a byte
    (compute-sanitizer's racecheck ranks those hazards as harmless too; see
    docs/emulator.md).  Threads of one warp that both passed a
    `bar.warp.sync` between their accesses are ordered too: each warp has an
    epoch that the warp barrier advances, and accesses remember the epoch they
    were made in.  Bytes with cp.async copies still pending into them count
    those copies, so that touching them is reported as a missing wait.

    The bookkeeping is array-based: the bytes of an access are one array, and
    where no byte is touched by two of its lanes (what `lanes_apart` finds from
    the lanes' addresses alone) the shadow state is updated by plain indexing.
    """

    def __init__(self, rows: int, stride: int, threads_per_cta: int):
        n = rows * stride + 16
        self.stride = stride
        self.threads_per_cta = threads_per_cta
        self.writes = _Accesses(n, "write")
        self.reads = _Accesses(n, "read")
        self.atomics: _Accesses | None = None  # created by the first shared atomic
        self.warp_epoch: np.ndarray | None = None  # [cta, warp], created by the first bar.warp.sync
        self.pending = np.zeros(n, np.int16)
        self.pending_chunks = np.zeros(n // SUMMARY_CHUNK, np.int16)  # (copies of whole chunks)
        self.pending_total = 0  # bytes pending, and of those the ones `pending` counts
        self.pending_in_bytes = 0
        self.rows = rows
        self.async_reads: np.ndarray | None = None  # reads in flight, per ASYNC_READ_CHUNK bytes
        self.tma_barrier: np.ndarray | None = None  # mbarrier whose phase a bulk copy wrote the byte in
        self.tma_phase: np.ndarray | None = None
        self.unfenced: _Unfenced | None = None  # created by the first plain write
        self._stamp = np.zeros(n, np.int32)  # scratch for lanes_apart

    def reset(self, rows: np.ndarray | None) -> None:
        """Forget all accesses of the CTAs `rows` (None: all) - they passed a barrier."""
        for accesses in (self.writes, self.reads, self.atomics):
            if accesses is not None:
                accesses.reset(rows, self.stride)

    def warp_sync(self, m, threads) -> None:
        """`bar.warp.sync` by `threads`: a new epoch for each of their warps."""
        if self.warp_epoch is None:
            self.warp_epoch = np.zeros((self.rows, -(-self.threads_per_cta // WARP)), np.int32)
        rows, warps = m.cta_of[threads], m.ltid[threads] // WARP
        keys = np.unique(rows * self.warp_epoch.shape[1] + warps)
        self.warp_epoch.reshape(-1)[keys] += 1

    def lanes_apart(self, flat, nbytes: int, aligned: bool = False) -> bool:
        """Whether accesses of `nbytes` at the flat offsets `flat` (one per lane; `aligned`: known to be
        multiples of nbytes) touch no byte twice."""
        return lanes_apart(flat, nbytes, self._stamp, aligned)

    def check(self, m, idx, flat, nbytes, access, pc, stored=None, aligned: bool = False):
        """Check and record accesses of `nbytes` at `flat` by the threads `idx`; `aligned`: the offsets are
        known to be multiples of nbytes where nbytes is at most a chunk (WindowSpace.locate checked it)."""
        tid = m.ltid if idx is None else m.ltid[idx]
        if access == STORE:
            self.record_write(m, flat, tid, nbytes, pc, stored)
            return
        if access == LOAD and self._load_by_lanes(idx, flat, tid, nbytes, pc, aligned):
            return
        b = access_bytes(flat, nbytes)
        t = tid if nbytes == 1 else np.repeat(tid, nbytes)
        self._settle(b // SUMMARY_CHUNK)
        self.check_pending(m, b, access, lambda i: self._thread(b[i], t[i]))
        if access == LOAD:
            if self.tma_barrier is not None:
                self.check_observed(m, b, t)
            self._check(m, b, t, "read", [self.writes, self.atomics])
            accesses = self.reads
        else:
            self._check(m, b, t, "atomic", [self.writes, self.reads])
            if self.atomics is None:
                self.atomics = _Accesses(len(self.pending), "atomic")
            accesses = self.atomics
        if self.warp_epoch is None and in_thread_order(idx):
            accesses.record(b, t, t, pc, None, True, in_order=True)
            return
        self._record(accesses, flat, tid, nbytes, b, t, pc, self.lanes_apart(flat, nbytes), keep=True)

    def _load_by_lanes(self, idx, flat, tid, nbytes, pc: int, aligned: bool = False) -> bool:
        """Check and record the common load lane by lane rather than byte by byte: accesses of 2 to 16
        bytes each aligned to its size, while no bulk copy or warp barrier was seen, the lanes in thread
        order or no byte read twice - the shadow state is then viewed as rows of `nbytes` bytes, a lane's
        row (or as whole chunks: _load_chunks), and each row read updated as the byte-wise path updates
        it (_Accesses.record: a row read by several lanes in thread order gets its lowest reader written
        last in reverse).  False, with nothing done, where the load is not such a one or a byte of it is
        pending or conflicts (the byte-wise path then reports that); `aligned`: known to be aligned."""
        if (nbytes not in (2, 4, 8, 16) or self.tma_barrier is not None or self.warp_epoch is not None
                or not aligned and (flat & (nbytes - 1)).any()):
            return False
        if not (in_thread_order(idx) or self.lanes_apart(flat, nbytes)):
            return False
        rows, chunks = rows_and_chunks(flat, nbytes)
        if self._pending_at(rows, chunks, nbytes):
            return False
        if nbytes == SUMMARY_CHUNK and self._load_chunks(chunks, tid, pc):
            return True
        self._settle(chunks)
        if _conflict_by_lanes((self.writes, self.atomics), rows, chunks, tid, nbytes):
            return False
        reads, lanes = self.reads, lane_rows(tid, nbytes)
        low = high = lanes
        if reads.live and reads.touched.take(chunks).any():
            low = np.minimum(_units(reads.lo, nbytes).take(rows, axis=0), lanes)
            high = np.maximum(_units(reads.hi, nbytes).take(rows, axis=0), lanes)
        _put_units(reads.lo, rows[::-1], low[::-1])
        _put_units(reads.hi, rows, high)
        _fill_units(reads.pc, rows, nbytes, pc)
        reads.touched[chunks] = True
        reads.live = reads.bytes_live = True
        return True

    def _load_chunks(self, chunks, tid, pc: int) -> bool:
        """_load_by_lanes of loads of whole chunks `chunks`, recorded per chunk; False, with nothing done,
        where a chunk that they or the earlier accesses touch holds its accesses byte by byte."""
        if _conflict_by_chunks((self.writes, self.atomics), chunks, tid) is not False:
            return False
        held = self.reads.by_chunks(chunks)
        if held is None:
            return False
        low = high = tid
        if held is not False:
            low, high = np.minimum(held[0], tid), np.maximum(held[1], tid)
        self.reads.record_chunks(chunks, low, high, pc)
        return True

    def _settle(self, chunks) -> None:
        """Bring the bytes of `chunks` up to date (_Accesses.settle) before they are read byte by byte."""
        for accesses in (self.writes, self.reads, self.atomics):
            if accesses is not None:
                accesses.settle(chunks)

    def _pending_at(self, rows, chunks, nbytes: int) -> bool:
        """Whether a cp.async is pending into accesses of `nbytes` (at most a chunk, aligned) at `rows`
        (of nbytes bytes) in `chunks`."""
        return bool(self.pending_total) and bool(
            self.pending_chunks.take(chunks).any()
            or self.pending_in_bytes and _units(self.pending, nbytes).take(rows, axis=0).any())

    def _record(self, accesses: _Accesses, flat, tid, nbytes: int, b, t, pc: int, apart: bool, keep) -> None:
        """Record accesses of `nbytes` at `flat` by threads `tid` (one per lane; b and t: their bytes
        and threads byte by byte; `apart`: no byte twice); `keep` as for _Accesses.record, per entry of
        b (the earlier accesses of a byte stay where one entry keeps them)."""
        if apart:
            accesses.record(b, t, t, pc, self._epoch(b, t), keep)
            return
        mask = keep if keep is not True and keep is not False else None
        if nbytes == 1 or not (np.asarray(flat) % nbytes).any():  # aligned: found from the lanes, fewer
            epoch = None if self.warp_epoch is None else self.warp_epoch[flat // self.stride, tid // WARP]
            b, lo, hi, epoch, mask = distinct_lanes(np.asarray(flat), tid, nbytes, epoch, mask)
        else:
            b, lo, hi, epoch, mask = distinct_bytes(b, t, self._epoch(b, t), mask)
        accesses.record(b, lo, hi, pc, epoch, keep if mask is None else mask)

    def check_remote(self, m, threads, flat, nbytes: int, access: str) -> None:
        """Accesses by `threads` (batch indices) to the shared memory of another CTA of their cluster:
        the hazards of cp.async and of the asynchronous proxy, as for the CTA's own threads (conflicts
        between threads are cluster.ClusterRaceDetector's)."""
        b = access_bytes(flat, nbytes)
        t = np.repeat(np.asarray(threads), nbytes)
        self.check_pending(m, b, access, lambda i: int(t[i]))
        rows, tid = t // self.threads_per_cta, t % self.threads_per_cta
        if access == LOAD and self.tma_barrier is not None:
            self.check_observed(m, b, tid, rows)
        elif access == STORE:
            self.check_not_read_async(m, b, tid, "write", rows)

    def check_pending(self, m, b, access: str, thread) -> None:
        """No access to bytes `b` while a cp.async into them is pending; `thread(i)`: the batch index of
        the thread of access i."""
        if not self.pending_total:
            return
        pending = self.pending.take(b) + self.pending_chunks.take(b // SUMMARY_CHUNK)
        if pending.any():
            i = int(np.flatnonzero(pending)[0])
            raise Fault(AsyncCopyHazard,
                        f"shared {access} at {m.describe_shared_at(int(b[i]))} while a cp.async "
                        f"into it is still pending (missing cp.async.wait_group/wait_all?)",
                        thread=thread(i))

    def add_issued(self, flat, nbytes: int) -> bool:
        """add_pending of cp.async copies issued; whether they touch no byte twice (lanes_apart's stamp
        test, from the rows that add_pending indexes)."""
        rows = flat // nbytes
        lanes = _lane_numbers(len(rows))
        self._stamp[rows] = lanes
        apart = bool((self._stamp[rows] == lanes).all())
        self.add_pending(flat, nbytes, 1, apart, rows)
        return apart

    def add_pending(self, flat, nbytes: int, delta: int, apart: bool, rows=None) -> None:
        """cp.async copies of `nbytes` into `flat` (one per lane, multiples of nbytes, as cp.async
        destinations are) are issued (+1) or performed (-1); `apart`: no byte twice (then a lane at a
        time: see _load_by_lanes); `rows`: flat // nbytes where known.  Copies of whole chunks are
        counted per chunk."""
        self.pending_total += delta * len(flat) * nbytes
        if apart and rows is None:
            rows = flat // nbytes
        if nbytes == SUMMARY_CHUNK:
            if apart:
                self.pending_chunks[rows] += np.int16(delta)
            else:
                np.add.at(self.pending_chunks, flat // nbytes, delta)
            return
        self.pending_in_bytes += delta * len(flat) * nbytes
        if apart:
            _put_units(self.pending, rows, _units(self.pending, nbytes).take(rows, axis=0) + np.int16(delta))
        else:
            np.add.at(self.pending, access_bytes(flat, nbytes), delta)

    def record_write(self, m, flat, tid, nbytes: int, pc, stored=None, apart=None, copy=False):
        """Check and record plain writes of `nbytes` at `flat` by threads `tid` (linear ids in the CTA,
        one per lane).  stored: a function giving the bytes written (without it, writes of equal values
        conflict too); apart: no byte twice (None: found here); copy: the writes of cp.async copies
        being performed, which the asynchronous proxy may read without a fence.proxy.async (plain
        stores need one; see docs/emulator.md)."""
        if apart is None:
            apart = self.lanes_apart(flat, nbytes)
        if apart and self._write_by_lanes(flat, tid, nbytes, pc, copy):
            return
        b = access_bytes(flat, nbytes)
        t = tid if nbytes == 1 else np.repeat(tid, nbytes)
        self._settle(b // SUMMARY_CHUNK)
        if not copy:
            self.check_pending(m, b, STORE, lambda i: self._thread(b[i], t[i]))
        self.check_not_read_async(m, b, t, "write")
        self._check(m, b, t, "write", [self.reads, self.atomics])
        values = _Lazy(stored)
        shared = self._against_writes(m, b, t, values)
        if not apart:
            pair = same_byte_twice(b, values.get())
            if pair is not None:
                i, j = pair
                raise Fault(SharedMemoryRace,
                            f"data race on shared memory at {m.describe_shared_at(int(b[i]))}: "
                            f"threads {m.describe_local(int(t[i]))} and {m.describe_local(int(t[j]))} "
                            f"write different values to it in the same instruction",
                            thread=self._thread(b[j], t[j]))
        if not copy:
            self._track_unfenced()
            self.unfenced.record_bytes(b, t + 1, pc)
        elif self.unfenced is not None:
            self.unfenced.record_bytes(b, 0, pc)
        self._record(self.writes, flat, tid, nbytes, b, t, pc, apart, keep=False if shared is None else shared)

    def _write_by_lanes(self, flat, tid, nbytes: int, pc, copy: bool) -> bool:
        """record_write lane by lane (as _load_by_lanes does) of writes that touch no byte twice: 2 to
        16 bytes each aligned to its size, while no warp barrier was seen, no cp.async is pending into
        the bytes (but the copies being performed), no wgmma or bulk copy in flight reads them and no
        other thread wrote or read them since the last barrier; `pc`: the instruction, or one per lane
        (copies of several performed together).  False, with nothing done, otherwise (the byte-wise path
        then checks it)."""
        if nbytes not in (2, 4, 8, 16) or self.warp_epoch is not None or (flat & (nbytes - 1)).any():
            return False
        # (aligned and at most ASYNC_READ_CHUNK bytes, a lane's write lies in one chunk)
        if self.async_reads is not None and (self.async_reads[flat // ASYNC_READ_CHUNK] > 0).any():
            return False
        rows, chunks = rows_and_chunks(flat, nbytes)
        if not copy and self._pending_at(rows, chunks, nbytes):
            return False
        earlier = (self.reads, self.atomics, self.writes)
        whole = nbytes == SUMMARY_CHUNK and _conflict_by_chunks(earlier, chunks, tid) is False
        if not whole:
            self._settle(chunks)
            if _conflict_by_lanes(earlier, rows, chunks, tid, nbytes):
                return False
        if not copy:
            self._track_unfenced()
        if self.unfenced is not None:
            self.unfenced.record_rows(rows, chunks, nbytes, None if copy else tid, pc)
        writes = self.writes
        if whole:
            writes.record_chunks(chunks, tid, tid, pc)
            return True
        lanes = lane_rows(tid, nbytes)
        _put_units(writes.lo, rows, lanes)
        _put_units(writes.hi, rows, lanes)
        if isinstance(pc, np.ndarray):  # (copies of several instructions performed together)
            _put_units(writes.pc, rows, lane_rows(pc, nbytes))
        else:
            _fill_units(writes.pc, rows, nbytes, pc)
        writes.touched[chunks] = True
        writes.live = writes.bytes_live = True
        return True

    def _track_unfenced(self) -> None:
        """Create the unfenced-writer state at the first plain store (cp.async copies leave it None)."""
        if self.unfenced is None:
            self.unfenced = _Unfenced(len(self.pending))

    def _against_writes(self, m, b, t, values):
        """Check writes of bytes `b` by threads `t` against the earlier writes: where another thread
        wrote, a write of the value the byte holds is no conflict (the bytes where that is so are
        returned, None if none), any other is."""
        clash = self._conflicts(b, t, self.writes)
        if clash is None:
            return None
        written = values.get()
        same = clash if written is None else clash & (written == m.shared.data[b])
        if written is None or not (same == clash).all():
            raise self._race(m, b, t, int(np.flatnonzero(clash & ~same)[0]), "write", self.writes)
        return same

    def _epoch(self, b, t):
        """The warp-barrier epoch of each access (None while no warp barrier was used)."""
        if self.warp_epoch is None:
            return None
        return self.warp_epoch[b // self.stride, t // WARP]

    def _conflicts(self, b, t, accesses: _Accesses | None):
        """Which accesses of bytes `b` by threads `t` follow an access in `accesses` by another thread
        with no barrier between (None: none)."""
        if accesses is None or not accesses.live:
            return None
        lo, hi = accesses.lo.take(b), accesses.hi.take(b)
        clash = (hi != _NOBODY) & ((lo != t) | (hi != t))
        if not clash.any():
            return None
        if self.warp_epoch is not None:
            warp = t // WARP
            same_warp = (lo // WARP == warp) & (hi // WARP == warp)
            clash &= ~(same_warp & (self._epoch(b, t) > accesses.epoch.take(b)))
            if not clash.any():
                return None
        return clash

    def _check(self, m, b, t, what: str, earlier: list) -> None:
        """Raise if any access in `earlier` by another thread conflicts with this one."""
        for accesses in earlier:
            clash = self._conflicts(b, t, accesses)
            if clash is not None:
                raise self._race(m, b, t, int(np.flatnonzero(clash)[0]), what, accesses)

    def _race(self, m, b, t, i: int, what: str, accesses: _Accesses) -> Fault:
        other = accesses.other_thread(i, b, t)
        other_pc = int(accesses.pc[b[i]])
        return Fault(SharedMemoryRace,
                     f"data race on shared memory at {m.describe_shared_at(int(b[i]))}: "
                     f"{what} by this thread conflicts with a{'n' if accesses.what[0] == 'a' else ''} "
                     f"{accesses.what} by thread {m.describe_local(other)} at "
                     f"{m.ptx_position(other_pc)} with no barrier in between",
                     thread=self._thread(b[i], t[i]),
                     related=[(other_pc, f"the conflicting {accesses.what} by thread "
                                         f"{m.describe_local(other)}")])

    def _thread(self, byte, tid) -> int:
        """The batch index of thread `tid` of the CTA that owns shared byte `byte`."""
        return int(byte) // self.stride * self.threads_per_cta + int(tid)

    # -- the asynchronous proxy
    def add_async_reads(self, b, delta: int) -> None:
        """A wgmma or bulk copy starts (+1) or finishes (-1) reading bytes `b` (whole chunks)."""
        if self.async_reads is None:
            self.async_reads = np.zeros(-(-len(self.pending) // ASYNC_READ_CHUNK), np.int64)
        # (whole chunks: each read of a chunk names its first byte once)
        np.add.at(self.async_reads, b[(b & (ASYNC_READ_CHUNK - 1)) == 0] // ASYNC_READ_CHUNK, delta)

    def check_not_read_async(self, m, b, t, what: str, rows=None) -> None:
        """Writing bytes that a wgmma or bulk copy in flight reads is an error.  `t`: the writing
        threads' linear ids in their CTA, which is that of `rows` (default: the CTA owning each byte)."""
        if self.async_reads is None:
            return
        busy = self.async_reads[b // ASYNC_READ_CHUNK] > 0
        if busy.any():
            i = int(np.flatnonzero(busy)[0])
            row = int(b[i]) // self.stride if rows is None else int(np.broadcast_to(rows, b.shape)[i])
            raise Fault(AsyncCopyHazard,
                        f"shared {what} at {m.describe_shared_at(int(b[i]))} while a wgmma or bulk "
                        f"copy that reads it is in flight (missing wgmma.wait_group or cp.async.bulk.wait_group "
                        f"before reusing the buffer?)",
                        thread=row * self.threads_per_cta + int(np.broadcast_to(t, b.shape)[i]))

    def proxy_fence(self, m, threads) -> None:
        """`fence.proxy.async` by `threads`: their plain writes so far are visible to the async proxy."""
        if self.unfenced is None:
            return
        rows, tids = m.cta_of[threads], m.ltid[threads]
        for row in np.unique(rows):
            fencing = np.zeros(self.threads_per_cta + 1, bool)
            fencing[tids[rows == row] + 1] = True
            self.unfenced.fence(int(row), self.stride, fencing)

    def check_fenced(self, m, b, thread: int, what: str) -> None:
        """The async proxy (wgmma, bulk copies) reading bytes `b` that a plain store wrote needs a
        `fence.proxy.async` by the writing thread in between (before the barrier that orders them):
        without it the tensor cores or the copy engine may read stale data."""
        if self.unfenced is None or not b.size or self.unfenced.check_clean(b // SUMMARY_CHUNK):
            return
        writers, pcs = self.unfenced.at(b)
        if writers.any():
            i = int(np.flatnonzero(writers)[0])
            raise Fault(MissingProxyFence,
                        f"{what} reads shared {m.describe_shared_at(int(b[i]))}, which thread "
                        f"{m.describe_local(int(writers[i]) - 1)} wrote with a plain store "
                        f"({m.ptx_position(int(pcs[i]))}) and no fence.proxy.async since: "
                        f"the asynchronous proxy may not see it (fence.proxy.async.shared::cta in each writing "
                        f"thread, before the barrier)", thread=thread,
                        related=[(int(pcs[i]), "the plain store")])

    def record_bulk_write(self, b, barrier: int, phase: int) -> None:
        """Bytes `b` written by a bulk tensor copy that completes phase `phase` of `barrier`."""
        if self.tma_barrier is None:
            self.tma_barrier = np.full(len(self.pending), -1, np.int32)
            self.tma_phase = np.zeros(len(self.pending), np.int64)
        self.tma_barrier[b] = barrier
        self.tma_phase[b] = phase

    def check_observed(self, m, b, t, rows=None) -> None:
        """Threads `t` (linear ids in the CTA of `rows`, default: the CTA owning each byte) read
        bytes `b`: those a bulk copy wrote must come from an mbarrier phase the reading thread has
        seen complete (mbarrier.try_wait/test_wait, or a barrier since a thread that did)."""
        if self.tma_barrier is None:
            return
        barrier = self.tma_barrier[b]
        written = barrier >= 0
        if not written.any():
            return
        bw, tw = b[written], np.broadcast_to(t, b.shape)[written]
        row = bw // self.stride if rows is None else np.broadcast_to(rows, b.shape)[written]
        threads = row * self.threads_per_cta + tw
        unseen = m.mbarriers.observed[barrier[written], threads] <= self.tma_phase[bw]
        if unseen.any():
            i = int(np.flatnonzero(unseen)[0])
            raise Fault(AsyncCopyHazard,
                        f"shared read at {m.describe_shared_at(int(bw[i]))}, written by a bulk "
                        f"tensor copy, before this thread waited for the completion of its mbarrier phase "
                        f"{int(self.tma_phase[bw[i]])} (missing mbarrier.try_wait?)",
                        thread=int(threads[i]))


# ---------------------------------------------------------------- global races

_NONE = np.int32(-1)
_HIGHEST = np.int32(np.iinfo(np.int32).max)
IN_THREAD_ORDER = "in thread order"  # how GlobalRaceDetector._read may fold repeated bytes


class GlobalRaceDetector:
    """Shadow state of global memory for one launch, one entry per heap byte.

    Threads are named by their index in the grid (CTA * threads per CTA + the
    linear thread id), and each CTA counts the barriers it has passed (its
    epoch, `Machine.epoch`).  Two accesses to a byte conflict when at least one
    is a plain write, they come from different threads, and either their CTAs
    differ (nothing orders CTAs) or they share a CTA and an epoch (no barrier
    between them).  Per byte, the detector keeps the last writer and its epoch
    (an earlier writer either conflicted with it or is ordered before it) and
    the lowest and highest reader of the latest window: a window is reset when
    a read comes from the window's only CTA in a later epoch, and grows
    otherwise, so a window spanning two CTAs conflicts with every later write.
    Bytes read with `ld.global.nc` remember it: a write to them by any thread
    is reported, as is such a read of bytes already written.  Atomics are not
    tracked (several atomics to one place are the point of them).

    Atomics with release and acquire semantics do order CTAs (a lock, a flag):
    each CTA counts its releases (its clock), accesses remember the clock of
    their CTA, and an acquire of a word that another CTA released last makes
    the acquiring CTA know that CTA's accesses up to that release (and what the
    releasing CTA knew then, so that a lock handed along a chain of CTAs
    orders them all).  A conflict with an access the CTA knows is none.
    """

    def __init__(self, heap_bytes: int, threads_per_cta: int):
        self.tpc = threads_per_cta
        (self.writer, self.write_epoch, self.write_pc, self.reader_lo, self.reader_hi, self.read_epoch,
         self.read_pc, self.write_clock, self.read_clock) = shadow_arrays(heap_bytes, _NONE, 0, 0, _HIGHEST, _NONE,
                                                                          0, 0, 0, 0)
        # (write_clock, read_clock: the writer's and latest reader's CTA's releases before the access)
        self.nc_pc: np.ndarray | None = None  # created by the first ld.global.nc
        self._mark: np.ndarray | None = None  # scratch of _in_order
        self._stamp: np.ndarray | None = None  # scratch of lanes_apart
        self._all_lanes = (None, None)  # (batch, _lanes' threads of all its lanes)
        # per chunk of SUMMARY_CHUNK heap bytes: whether any byte of it was read, written, and whether its
        # readers are held per chunk (all its bytes read by each read: chunk_reader_lo ..., not the bytes),
        # and its writer (all its bytes written by the last write: chunk_writer ...)
        chunks = -(-heap_bytes // SUMMARY_CHUNK)
        self.read, self.written, self.whole_read, self.whole_written = np.zeros((4, chunks), bool)
        (self.chunk_reader_lo, self.chunk_reader_hi, self.chunk_read_epoch, self.chunk_read_pc, self.chunk_writer,
         self.chunk_write_epoch, self.chunk_write_pc) = shadow_arrays(chunks, _HIGHEST, _NONE, 0, 0, _NONE, 0, 0)
        self.whole_reads = self.whole_writes = False  # whether a chunk may be whole_read, whole_written
        self.clock: dict[int, int] = {}  # CTA (in the grid) -> releases it has made
        self.known: dict[int, dict[int, int]] = {}  # CTA -> {other CTA: releases of it that it acquired}
        self.released: dict[int, tuple[int, int, dict[int, int]]] = {}  # byte -> (CTA, clock, what it knew)

    def footprint(self) -> np.ndarray:
        """READ/WRITE bits per heap byte: the bytes read (plainly or with ld.global.nc, which also
        opens a readers' window) and written so far."""
        n = len(self.writer)
        bits = ((self.reader_hi != _NONE) | np.repeat(self.whole_read, SUMMARY_CHUNK)[:n]).view(np.uint8) * np.uint8(READ)
        bits |= ((self.writer != _NONE) | np.repeat(self.whole_written, SUMMARY_CHUNK)[:n]).view(np.uint8) \
            * np.uint8(WRITE)
        return bits

    def synchronize(self, m, threads, offsets, acquire: bool, release: bool) -> None:
        """An atomic with acquire and/or release semantics by `threads` at heap `offsets`, in thread order."""
        for t, b in zip(np.asarray(threads).tolist(), np.asarray(offsets).tolist()):
            cta = m.cta_first + int(m.cta_of[t])
            if acquire and b in self.released:
                other, clock, knew = self.released[b]
                if other != cta:
                    mine = self.known.setdefault(cta, {})
                    for x, c in [(other, clock), *knew.items()]:
                        if x != cta and c > mine.get(x, -1):
                            mine[x] = c
            if release:
                self.released[b] = (cta, self.clock.get(cta, 0), dict(self.known.get(cta, {})))
                self.clock[cta] = self.clock.get(cta, 0) + 1

    def order_ctas(self, ctas) -> None:
        """A barrier of the CTAs `ctas` (their launch positions; barrier.cluster): the accesses each
        made so far are ordered before the later ones of every other, as by a release of each
        followed by an acquire of each."""
        ctas = [int(c) for c in ctas]
        knew: dict[int, int] = {}
        for c in ctas:
            for other, clock in [*self.known.get(c, {}).items(), (c, self.clock.get(c, 0))]:
                knew[other] = max(knew.get(other, -1), clock)
            self.clock[c] = self.clock.get(c, 0) + 1
        for c in ctas:
            mine = self.known.setdefault(c, {})
            for other, clock in knew.items():
                if other != c and clock > mine.get(other, -1):
                    mine[other] = clock

    def _clocks(self, g):
        """The clock of the CTA of each thread (global thread indices `g`; 0 for all while no CTA
        has released anything)."""
        if not self.clock:
            return 0
        return np.array([self.clock.get(int(c), 0) for c in g // self.tpc], np.int32)

    def _ordered(self, g: int, other: int, clock: int) -> bool:
        """Whether the CTA of thread g knows the access of thread `other` made at `clock` (an acquire of a
        release of that CTA after it)."""
        return self.known.get(g // self.tpc, {}).get(other // self.tpc, -1) >= clock

    def check(self, m, idx, offsets, nbytes, access: str, pc: int, aligned: bool = False) -> None:
        """Check and record accesses of `nbytes` (an int or one per lane) at heap `offsets` by the threads
        `idx`; `aligned`: the offsets are known to be multiples of nbytes (GlobalSpace.locate checked it)."""
        threads = m.all_threads if idx is None else np.asarray(idx)
        by_lanes = self._BY_LANES.get(access)
        if by_lanes is not None and getattr(self, by_lanes)(m, threads, offsets, nbytes, pc, aligned):
            return
        if nbytes.ndim == 0:
            b, t = access_bytes(np.asarray(offsets, np.int64), int(nbytes)), np.repeat(threads, int(nbytes))
        else:
            b, lane = lane_bytes(offsets, nbytes)
            t = threads[lane]
        self._settle_reads(b // SUMMARY_CHUNK)
        self._settle_writes(b // SUMMARY_CHUNK)
        g = (m.cta_first * self.tpc + t).astype(np.int32)
        epoch = m.epoch[m.cta_of[t]]
        if access == STORE:
            self._write(m, b, t, g, epoch, pc)
            return
        offsets = np.asarray(offsets, np.int64)
        if lanes_apart(offsets, int(nbytes) if nbytes.ndim == 0 else nbytes):
            distinct = None
        elif in_thread_order(idx):
            distinct = IN_THREAD_ORDER
        elif nbytes.ndim == 0 and not (offsets % int(nbytes)).any():  # aligned: found from the lanes
            lanes = m.cta_first * self.tpc + threads
            distinct = lambda reset: distinct_lanes(offsets, lanes, int(nbytes), flag=reset)  # noqa: E731
        else:
            distinct = lambda reset: distinct_bytes(b, g, flag=reset)  # noqa: E731
        self._read(m, b, t, g, epoch, pc, access == NC_LOAD, distinct)

    _BY_LANES = {LOAD: "_read_by_lanes", ASYNC_SOURCE: "_read_by_lanes", STORE: "_write_by_lanes"}

    def _lane_size(self, offsets, nbytes, aligned: bool) -> int:
        """The size of each lane's access where the lane-wise paths take it: all of one size, 2 to 16
        bytes, aligned to it (`aligned`: known to be), while no atomic has released or acquired anything;
        else 0."""
        sizes = np.asarray(nbytes)
        size = int(sizes) if sizes.ndim == 0 else int(sizes[0]) if len(sizes) and (sizes == sizes[0]).all() else 0
        if (size not in (2, 4, 8, 16) or self.known or self.clock
                or not aligned and (offsets & (size - 1)).any()):
            return 0
        if self._stamp is None:
            self._stamp = np.zeros(len(self.writer), np.int32)
        return size

    def _lanes(self, m, threads):
        """Per lane, as columns: its thread in the grid and its CTA's epoch."""
        if threads is m.all_threads:  # (the grid threads of a batch's lanes, made once per batch)
            if self._all_lanes[0] is not m:
                self._all_lanes = m, (m.cta_first * self.tpc + threads).astype(np.int32)[:, None]
            return self._all_lanes[1], m.epoch[m.cta_of][:, None]
        return ((m.cta_first * self.tpc + threads).astype(np.int32)[:, None],
                m.epoch[m.cta_of[threads]][:, None])

    def _cta_bounds(self, g):
        """The first and last thread (in the grid) of the CTA of each of `g`."""
        first = g // self.tpc * self.tpc
        return first, first + (self.tpc - 1)

    def _readers(self, chunks, rows, size: int):
        """The lowest and highest reader and the epoch of the reads of the bytes of accesses of `size`
        at `rows` (in `chunks`): per lane (a column) where all are read whole or not at all, else per lane
        and byte (the whole-read chunks among them settled)."""
        if size == SUMMARY_CHUNK and not (self.read.take(chunks) > self.whole_read.take(chunks)).any():
            return [a.take(chunks)[:, None] for a in (self.chunk_reader_lo, self.chunk_reader_hi,
                                                      self.chunk_read_epoch)]
        self._settle_reads(chunks)
        return [_units(a, size).take(rows, axis=0) for a in (self.reader_lo, self.reader_hi, self.read_epoch)]

    def _writers(self, chunks, rows, size: int):
        """The last writer and its epoch of the bytes of accesses of `size` at `rows` (in `chunks`), as
        _readers gives the readers."""
        if size == SUMMARY_CHUNK and not (self.written.take(chunks) > self.whole_written.take(chunks)).any():
            return [a.take(chunks)[:, None] for a in (self.chunk_writer, self.chunk_write_epoch)]
        self._settle_writes(chunks)
        return [_units(a, size).take(rows, axis=0) for a in (self.writer, self.write_epoch)]

    def _writes_clash(self, chunks, rows, size: int, g, epoch) -> bool:
        """Whether a write of the bytes at `rows` by another thread conflicts with accesses by `g`
        (_lanes' columns): one of another CTA, or of the CTA in the same epoch (_against_writes, no
        CTA having acquired anything)."""
        if not self.written.take(chunks).any():
            return False
        w, write_epoch = self._writers(chunks, rows, size)
        first, last = self._cta_bounds(g)
        return bool(((w != _NONE) & (w != g) & ((w < first) | (w > last) | (write_epoch == epoch))).any())

    def _read_by_lanes(self, m, threads, offsets, nbytes, pc: int, aligned: bool = False) -> bool:
        """Check and record the common read lane by lane rather than byte by byte (as
        RaceDetector._load_by_lanes does): every lane 2 to 16 bytes, aligned to their size, while no
        atomic has released or acquired anything, and no byte read twice - or the lanes in thread
        order, each byte read for the first time since its readers' window closed (as _in_order
        records those: a row read by several lanes gets its lowest reader written last in reverse).
        Reads of whole chunks are recorded per chunk where the chunks' readers are (`whole_read`).
        False, with nothing done, where the read is not such a one or conflicts with a write (the
        byte-wise path then reports it).  `aligned`: the offsets are known to be aligned."""
        offsets = np.asarray(offsets, np.int64)
        size = self._lane_size(offsets, nbytes, aligned)
        if not size:
            return False
        in_order = threads is m.all_threads or in_thread_order(threads)
        apart = lambda: lanes_apart(offsets, size, self._stamp)  # noqa: E731  (no byte read twice)
        if not (in_order or apart()):
            return False
        rows, chunks = rows_and_chunks(offsets, size)
        g, epoch = self._lanes(m, threads)
        if self._writes_clash(chunks, rows, size, g, epoch):
            return False
        read = self.read.take(chunks)
        touched = read.any()
        whole = size == SUMMARY_CHUNK and not (touched and (read > self.whole_read.take(chunks)).any())
        low = high = g
        if touched:
            lo, hi, read_epoch = self._readers(chunks, rows, size)
            reset = hi == _NONE
            if not reset.all():  # (bytes read for the first time, say)
                first, last = self._cta_bounds(g)
                # (where there are readers, lo <= hi: all of them in the lane's CTA where both are)
                reset |= (lo >= first) & (hi <= last) & (read_epoch < epoch)
                if not (reset.all() or not in_order or apart()):  # (lanes out of order are apart)
                    return False
                low = np.minimum(np.where(reset, _HIGHEST, lo), g)
                high = np.maximum(np.where(reset, _NONE, hi), g)
        self.read[chunks] = True
        if whole:
            self.chunk_reader_lo[chunks[::-1]] = low[::-1, 0]
            self.chunk_reader_hi[chunks] = high[:, 0]
            self.chunk_read_epoch[chunks] = epoch[:, 0]
            self.chunk_read_pc[chunks] = pc
            self.whole_read[chunks] = True
            self.whole_reads = True
            return True
        shape = (len(rows), size)
        _put_units(self.reader_lo, rows[::-1], np.broadcast_to(low, shape)[::-1])
        _put_units(self.reader_hi, rows, np.broadcast_to(high, shape))
        _put_units(self.read_epoch, rows, np.broadcast_to(epoch, shape))
        _fill_units(self.read_pc, rows, size, pc)
        # read_clock stays 0 throughout while no CTA has released anything
        return True

    def _write_by_lanes(self, m, threads, offsets, nbytes, pc: int, aligned: bool = False) -> bool:
        """Check and record the common write lane by lane rather than byte by byte (as _read_by_lanes
        does): every lane 2 to 16 bytes, aligned to their size, no byte written twice, while no atomic
        has released or acquired anything; writes of whole chunks are recorded per chunk
        (`whole_written`: a write of a whole chunk replaces the state of all its bytes).  False, with
        nothing done, where the write is not such a one or conflicts with an earlier access or a read
        through the non-coherent cache (the byte-wise path then reports it).  `aligned`: as for _read_by_lanes."""
        offsets = np.asarray(offsets, np.int64)
        size = self._lane_size(offsets, nbytes, aligned)
        if not size or not lanes_apart(offsets, size, self._stamp, aligned=True):
            return False
        rows, chunks = rows_and_chunks(offsets, size)
        g, epoch = self._lanes(m, threads)
        if self._writes_clash(chunks, rows, size, g, epoch):
            return False
        if self.read.take(chunks).any():
            lo, hi, read_epoch = self._readers(chunks, rows, size)
            first, last = self._cta_bounds(g)
            if ((hi != _NONE) & ((lo < first) | (hi > last) | ((read_epoch == epoch) & ((lo != g) | (hi != g))))).any():
                return False
        if self.nc_pc is not None and (_units(self.nc_pc, size).take(rows, axis=0) != _NONE).any():
            return False
        self.written[chunks] = True
        if size == SUMMARY_CHUNK:
            self.chunk_writer[chunks] = g[:, 0]
            self.chunk_write_epoch[chunks] = epoch[:, 0]
            self.chunk_write_pc[chunks] = pc
            self.whole_written[chunks] = True
            self.whole_writes = True
            return True
        self._settle_writes(chunks)
        shape = (len(rows), size)
        _put_units(self.writer, rows, np.broadcast_to(g, shape))
        _put_units(self.write_epoch, rows, np.broadcast_to(epoch, shape))
        _fill_units(self.write_pc, rows, size, pc)
        # write_clock stays 0 throughout while no CTA has released anything
        return True

    def _settle_reads(self, chunks) -> None:
        """Write the readers of the whole-read chunks among `chunks` to their bytes, which hold them from
        then on (their read_clock is 0: no CTA had released anything while chunks were read whole)."""
        if self.whole_reads:
            _settle_chunks(chunks, self.whole_read, ((self.reader_lo, self.chunk_reader_lo),
                                                     (self.reader_hi, self.chunk_reader_hi),
                                                     (self.read_epoch, self.chunk_read_epoch),
                                                     (self.read_pc, self.chunk_read_pc)))

    def _settle_writes(self, chunks) -> None:
        """_settle_reads of the writers of the whole-written chunks among `chunks`."""
        if self.whole_writes:
            _settle_chunks(chunks, self.whole_written, ((self.writer, self.chunk_writer),
                                                        (self.write_epoch, self.chunk_write_epoch),
                                                        (self.write_pc, self.chunk_write_pc)))

    def _in_order(self, b, g, reset):
        """The readers' windows of bytes `b` read by threads `g` (in the grid), each byte's entries in
        ascending order of threads, start anew where any entry of the byte has `reset`: per entry, the
        lowest and highest reader (the repeated bytes written with the lowest last, as indexing keeps
        the last value of a repeated index; see _Accesses.record)."""
        if reset.all():  # (bytes read for the first time, say)
            low, high = g, g
        else:
            if reset.any():  # a byte starts anew if any of its entries does
                if self._mark is None:
                    self._mark = np.zeros(len(self.writer), bool)
                self._mark[b[reset]] = True
                reset = self._mark[b]
                self._mark[b] = False
            low = np.minimum(np.where(reset, _HIGHEST, self.reader_lo.take(b)), g)
            high = np.maximum(np.where(reset, _NONE, self.reader_hi.take(b)), g)
        self.reader_lo[b[::-1]] = low[::-1]
        self.reader_hi[b] = high

    def _read(self, m, b, t, g, epoch, pc, nc: bool, distinct) -> None:
        """Reads of bytes `b` by threads `t` (`g` in the grid); `distinct(reset)`: the distinct bytes with
        their lowest and highest reader and whether any of their entries has `reset` set, as
        distinct_bytes gives them (None: b has no byte twice; IN_THREAD_ORDER: the entries of each
        byte come in ascending order of threads, see _in_order)."""
        self._against_writes(m, b, t, g, epoch, "read")
        if nc:
            written = self.writer.take(b) != _NONE
            if written.any():
                i = int(np.flatnonzero(written)[0])
                raise self._nc_fault(m, b, t, i, int(self.write_pc[b[i]]), "read here after a write")
            if self.nc_pc is None:
                self.nc_pc = np.full(len(self.writer), _NONE, np.int32)
            self.nc_pc[b] = pc
        lo, hi = self.reader_lo.take(b), self.reader_hi.take(b)
        cta = g // self.tpc
        window_cta = lo // self.tpc
        reset = (hi == _NONE) | ((window_cta == hi // self.tpc) & (window_cta == cta)
                                 & (self.read_epoch.take(b) < epoch))
        if self.known:  # a window of another CTA's reads that this CTA acquired after starts anew too
            single = (hi != _NONE) & (window_cta == hi // self.tpc) & (window_cta != cta)
            for i in np.flatnonzero(single).tolist():
                if self._ordered(int(g[i]), int(lo[i]), int(self.read_clock[b[i]])):
                    reset[i] = True
        if distinct is IN_THREAD_ORDER:
            self._in_order(b, g, reset)
            once = None
        elif distinct is None:  # each byte once: the window of each starts anew where `reset`
            once, low, high = b, g, g
        else:
            once, low, high, _, reset = distinct(reset)
            lo, hi = self.reader_lo[once], self.reader_hi[once]
        if once is not None:
            self.reader_lo[once] = np.minimum(np.where(reset, _HIGHEST, lo), low)
            self.reader_hi[once] = np.maximum(np.where(reset, _NONE, hi), high)
        self.read_epoch[b] = epoch
        self.read_pc[b] = pc
        self.read[b // SUMMARY_CHUNK] = True
        self.read_clock[b] = self._clocks(g)

    def _write(self, m, b, t, g, epoch, pc) -> None:
        pair = same_byte_twice(b)
        if pair is not None:
            i, j = pair
            raise Fault(GlobalMemoryRace,
                        f"data race on global memory at {m.glob.describe_offset(int(b[i]))}: "
                        f"{m.describe_thread(int(t[i]))} and {m.describe_thread(int(t[j]))} "
                        f"write it in the same instruction", thread=int(t[j]))
        self._against_writes(m, b, t, g, epoch, "write")
        lo, hi = self.reader_lo.take(b), self.reader_hi.take(b)
        cta = g // self.tpc
        clash = (hi != _NONE) & ((lo // self.tpc != cta) | (hi // self.tpc != cta)
                                 | ((self.read_epoch.take(b) == epoch) & ((lo != g) | (hi != g))))
        for i in np.flatnonzero(clash).tolist():
            other = int(lo[i]) if int(lo[i]) != int(g[i]) else int(hi[i])
            one_cta = int(lo[i]) // self.tpc == int(hi[i]) // self.tpc != int(cta[i])
            if not (one_cta and self._ordered(int(g[i]), other, int(self.read_clock[b[i]]))):
                raise self._race(m, b, t, i, "write", "read", other, int(self.read_pc[b[i]]))
        if self.nc_pc is not None:
            read_nc = self.nc_pc[b] != _NONE
            if read_nc.any():
                i = int(np.flatnonzero(read_nc)[0])
                raise self._nc_fault(m, b, t, i, int(self.nc_pc[b[i]]), "written here after a read")
        self.writer[b] = g
        self.written[b // SUMMARY_CHUNK] = True
        self.write_epoch[b] = epoch
        self.write_pc[b] = pc
        self.write_clock[b] = self._clocks(g)

    def _against_writes(self, m, b, t, g, epoch, what: str) -> None:
        w = self.writer.take(b)
        clash = (w != _NONE) & (w != g) & ((w // self.tpc != g // self.tpc) | (self.write_epoch.take(b) == epoch))
        for i in np.flatnonzero(clash).tolist():
            other_cta = int(w[i]) // self.tpc != int(g[i]) // self.tpc
            if not (other_cta and self._ordered(int(g[i]), int(w[i]), int(self.write_clock[b[i]]))):
                raise self._race(m, b, t, i, what, "write", int(w[i]), int(self.write_pc[b[i]]))

    def _race(self, m, b, t, i, what: str, earlier: str, other: int, other_pc: int) -> Fault:
        whom = m.describe_thread(other - m.cta_first * self.tpc)
        mine, theirs = m.cta_first + int(m.cta_of[t[i]]), other // self.tpc
        why = ("with no barrier in between" if theirs == mine else
               "in another CTA of the cluster, with no barrier.cluster in between"
               if theirs // m.cluster.size == mine // m.cluster.size else "in another CTA (nothing orders CTAs)")
        return Fault(GlobalMemoryRace,
                     f"data race on global memory at {m.glob.describe_offset(int(b[i]))}: {what} by this "
                     f"thread conflicts with a{'n' if earlier[0] in 'aeiou' else ''} {earlier} by {whom} at "
                     f"{m.ptx_position(other_pc)}, {why}",
                     thread=int(t[i]), related=[(other_pc, f"the conflicting {earlier} by {whom}")])

    def _nc_fault(self, m, b, t, i, other_pc: int, what: str) -> Fault:
        return Fault(NonCoherentRead,
                     f"global memory at {m.glob.describe_offset(int(b[i]))} is read with ld.global.nc and "
                     f"written by this kernel ({what}; see {m.ptx_position(other_pc)}): the read-only cache "
                     f"may return stale data (a tensor passed both as an input and as an output?)",
                     thread=int(t[i]), related=[(other_pc, "the other access")])


# ---------------------------------------------------------------- cp.async

@dataclass
class _Copy:
    """The copies of one cp.async instruction not yet performed: per lane its thread, shared
    destination, global source, bytes read (the rest are zeros) and group."""

    threads: np.ndarray
    dst: np.ndarray
    src: np.ndarray
    src_size: np.ndarray
    group: np.ndarray
    cp_size: int
    pc: int
    apart: bool  # no two lanes write one byte

    def part(self, sel) -> "_Copy":
        return _Copy(self.threads[sel], self.dst[sel], self.src[sel], self.src_size[sel], self.group[sel],
                     self.cp_size, self.pc, self.apart)


class AsyncCopies:
    """cp.async copies issued but not yet waited for, by thread and group.

    A copy is performed when a wait covers its group (or its thread exits);
    until then the destination bytes are marked pending, so that touching
    them is reported as a missing wait.  cp.async writes are generic-proxy
    writes, and they are checked as plain writes when performed; the
    asynchronous proxy (wgmma, bulk copies) may read them without a
    fence.proxy.async (docs/emulator.md says why).
    """

    def __init__(self, nthreads: int):
        self.committed = np.zeros(nthreads, np.int64)  # groups committed so far, per thread
        self.records: list[_Copy] = []

    def issue(self, threads, dst, src, src_size, cp_size, pc, races):
        apart = races is None or races.add_issued(dst, cp_size)
        self.records.append(_Copy(threads, dst, src, src_size, self.committed[threads], cp_size, pc, apart))  # (a copy)

    def commit(self, threads) -> None:
        self.committed[threads] += 1

    def complete(self, m, threads, keep: int | None) -> None:
        """Perform the copies of `threads` in all but their `keep` most recent
        committed groups (keep=None: all copies, committed or not)."""
        if not self.records:
            return
        limit = np.full(len(self.committed), -1, np.int64)
        limit[threads] = np.iinfo(np.int64).max if keep is None else self.committed[threads] - keep
        remaining, performed = [], []
        for rec in self.records:
            done = rec.group < limit[rec.threads]
            if done.all():
                performed.append(rec)
            elif done.any():
                performed.append(rec.part(done))
                remaining.append(rec.part(~done))
            else:
                remaining.append(rec)
        self.records = remaining
        if not self._perform_together(m, performed):
            for rec in performed:
                self._perform(m, rec)

    def _perform_together(self, m, records: list[_Copy]) -> bool:
        """Perform `records` as one copy, where they are copies of whole chunks, no byte twice, into
        bytes that no other thread accessed since the last barrier (RaceDetector._write_by_lanes
        checks and records them a chunk at a time, each with its instruction): the state they leave is
        the one that performing them one by one leaves.  False, with nothing done, otherwise."""
        races = m.shared.races
        if races is None or len(records) < 2 or not all(rec.apart and rec.cp_size == SUMMARY_CHUNK for rec in records):
            return False
        dst = np.concatenate([rec.dst for rec in records])
        if not races.lanes_apart(dst, SUMMARY_CHUNK, aligned=True):
            return False
        pc = np.concatenate([np.full(len(rec.dst), rec.pc, np.int32) for rec in records])
        threads = np.concatenate([rec.threads for rec in records])
        # (writes of cp.async copies being performed look at no pending copy: the order does not matter)
        if not races._write_by_lanes(dst, m.ltid[threads], SUMMARY_CHUNK, pc, True):
            return False
        races.add_pending(dst, SUMMARY_CHUNK, -1, True)
        _put_units(m.shared.data, dst // SUMMARY_CHUNK,
                   self._source_rows(m, np.concatenate([rec.src for rec in records]),
                                     np.concatenate([rec.src_size for rec in records]), SUMMARY_CHUNK))
        return True

    @staticmethod
    def _source_rows(m, src, src_size, cp: int) -> np.ndarray:
        """The bytes copies of `cp` bytes read at heap offsets `src`, `src_size` each (the rest zeros): a
        row per lane (sources are multiples of cp, and the heap's padding holds a row whole where a lane
        reads fewer)."""
        data = _units(m.glob.data, cp).take(src // cp, axis=0)
        if not (src_size == cp).all():
            data = np.where(np.arange(cp) < src_size[:, None], data, np.uint8(0))
        return data

    def _perform(self, m, rec: _Copy) -> None:
        cp = rec.cp_size
        data = self._source_rows(m, rec.src, rec.src_size, cp)
        races = m.shared.races
        if races is not None:
            races.add_pending(rec.dst, cp, -1, rec.apart)
            races.record_write(m, rec.dst, m.ltid[rec.threads], cp, rec.pc, lambda: data.reshape(-1), rec.apart,
                               copy=True)
        _put_units(m.shared.data, rec.dst // cp, data)  # (a repeated destination keeps the last lane's, as bytes do)
