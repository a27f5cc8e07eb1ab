# Cluster instructions (sm_90): mapa and getctarank, which compute addresses of distributed shared
# memory (cluster.py describes them), and barrier.cluster.arrive / barrier.cluster.wait.
#
# barrier.cluster.arrive is of kind WAIT (it always lets its lanes go), so that an arrival that
# completes the barrier's phase lets the threads waiting for it run first; barrier.cluster.wait is
# a blocking test: a thread whose phase has not completed sleeps until it has (machine.py).  The
# barrier's state is cluster.ClusterBarrier.  `.aligned` promises that the warp executes the
# instruction together: a warp split at it (a live lane elsewhere) is an error.
from __future__ import annotations

import numpy as np

from .cluster import mapped_address
from .decode import WAIT, Semantics, opcode, plain
from .errors import BarrierError, Fault, MemoryFault
from .memory import APERTURE_SIZE, OFFSET_MASK, RANK_SHIFT, SHARED_APERTURE, lane_threads
from .ops_arith import require
from .ops_control import warp_lanes
from .ptxtypes import TYPES

U32 = TYPES["u32"]


def _cluster_addresses(m, threads, addr, generic: bool, what: str) -> np.ndarray:
    """The .shared::cluster addresses of `addr` (generic ones: in the shared aperture)."""
    addr = np.asarray(addr).astype(np.uint64)
    if not generic:
        return addr
    rel = addr - np.uint64(SHARED_APERTURE)
    outside = rel >= np.uint64(APERTURE_SIZE)
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise Fault(MemoryFault, f"{what} of generic address {int(addr[i]):#x}, which is not shared memory",
                    thread=int(threads[i]))
    return rel


def _ranks(m, threads, addr, what: str) -> np.ndarray:
    """The cluster rank of the CTA each .shared::cluster address is in."""
    window = (addr >> np.uint64(RANK_SHIFT)).astype(np.int64)
    outside = window >= m.cluster.size
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise Fault(MemoryFault, f"{what} of shared::cluster address {int(addr[i]):#x}, which names CTA rank "
                                 f"{int(window[i])} of a cluster of {m.cluster.size} CTAs", thread=int(threads[i]))
    return window


def _address_forms(d, mods, what: str):
    """(generic?, the instruction's address type) of mapa / getctarank."""
    generic = not mods.flag("shared::cluster")
    t = mods.type()
    require(d, t.name in ("u32", "u64"), f"{what} takes .u32 or .u64")
    require(d, not generic or t.name == "u64", f"generic addresses ({what} without .shared::cluster) are 64-bit")
    return generic, t


@opcode("mapa")
def build_mapa(d, ins, mods):
    """mapa{.shared::cluster}.type d, a, rank: the address in the CTA of `rank` that corresponds to `a`."""
    generic, t = _address_forms(d, mods, "mapa")
    dest, source, rank = d.operands(ins, 3)
    write, read_address, read_rank = d.writer(dest, t), d.reader(source, t), d.reader(rank, U32)
    base = np.uint64(SHARED_APERTURE if generic else 0)

    def run(m, idx):
        threads = lane_threads(idx, m.n)
        addr = _cluster_addresses(m, threads, np.broadcast_to(read_address(m, idx), threads.shape), generic, "mapa")
        _ranks(m, threads, addr, "mapa")
        target = np.broadcast_to(read_rank(m, idx), threads.shape).astype(np.int64)
        outside = target >= m.cluster.size
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            raise Fault(MemoryFault, f"mapa to CTA rank {int(target[i])}, outside the cluster of {m.cluster.size} "
                                     f"CTAs", thread=int(threads[i]))
        write(m, idx, mapped_address(target, addr & np.uint64(OFFSET_MASK)) + base)
    return plain(run)


@opcode("getctarank")
def build_getctarank(d, ins, mods):
    """getctarank{.shared::cluster}.type d, a: the cluster rank of the CTA whose shared memory `a` is in."""
    generic, t = _address_forms(d, mods, "getctarank")
    dest, source = d.operands(ins, 2)
    write, read_address = d.writer(dest, U32), d.reader(source, t)

    def run(m, idx):
        threads = lane_threads(idx, m.n)
        addr = _cluster_addresses(m, threads, np.broadcast_to(read_address(m, idx), threads.shape), generic,
                                  "getctarank")
        write(m, idx, _ranks(m, threads, addr, "getctarank").astype(np.uint32))
    return plain(run)


def _check_aligned(m, lanes, what: str) -> None:
    """The .aligned form: every lane of each warp that has not exited executes the instruction."""
    threads, lane, first, bit, active = warp_lanes(m, lanes)
    alive = np.flatnonzero(m.alive())
    live = np.zeros(m.n, np.uint32)
    np.bitwise_or.at(live, alive - m.lane[alive], np.left_shift(np.uint32(1), m.lane[alive].astype(np.uint32)))
    missing = live[first] & ~active
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        absent = int(missing[i])
        raise Fault(BarrierError, f"{what} executed by part of a warp: lane {(absent & -absent).bit_length() - 1} "
                                  f"has not exited and is elsewhere (the .aligned form needs the whole warp)",
                    thread=int(threads[i]))


def _arrive(release: bool):
    """barrier.cluster.arrive: arrive without waiting (its lanes always go on)."""
    def run(m, lanes):
        m.cluster_barrier.arrive(m, lanes, release)
        return np.ones(len(lanes), bool)
    return run


@opcode("barrier.cluster.arrive", "barrier.cluster.wait")
def build_cluster_barrier(d, ins, mods):
    """barrier.cluster.arrive{.release|.relaxed}{.aligned}; barrier.cluster.wait{.acquire}{.aligned}: the
    wait lets a thread go once the phase it arrived at has completed."""
    if mods.base == "barrier.cluster.arrive":
        step = _arrive(mods.take("release", "relaxed") != "relaxed")
    else:
        mods.flag("acquire")
        step = lambda m, lanes: m.cluster_barrier.ready(lanes)  # noqa: E731
    aligned = mods.flag("aligned")
    d.operands(ins, 0)
    what = ins.opcode

    def run(m, lanes):
        if aligned:
            _check_aligned(m, lanes, what)
        return step(m, lanes)
    return Semantics(WAIT, run)
