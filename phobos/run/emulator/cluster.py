# Thread-block clusters (sm_90): the clusters a launch is cut into, distributed shared memory,
# barrier.cluster, and the shadow state that checks accesses between the CTAs of a cluster.
#
# Geometry (`ClusterShape`).  A launch with a cluster shape (`.reqnctapercluster`, or the launch's
# `cluster=`) runs its CTAs cluster by cluster: launch position p is rank p % size of cluster
# p // size (ranks and clusters counted x fastest, as %cluster_ctarank and %clusterid are), so
# a batch of whole clusters is a run of positions and the threads of a cluster are consecutive in
# it (machine.py never splits a cluster between batches: its CTAs run together, as on the GPU).
# A kernel launched without one is a cluster of one CTA, as on the GPU.
#
# Addresses.  rank << RANK_SHIFT | offset is `offset` in the shared memory of the CTA of that rank,
# as a .shared::cluster address and as the CTA's own .shared::cta one: the .shared::cta window lies
# inside the .shared::cluster one (the ISA), and on an H100 a CTA's own shared addresses carry its
# rank in the bits above the offset - the address of a shared variable in the CTA of rank 1 of a
# cluster has bit RANK_SHIFT set (`rank_bits`: decode.py adds them where a variable's address is
# taken), which is what the unmasked wgmma descriptors of Phobos's clustered GEMMs carried into
# their leading byte offsets there.  mapa keeps the offset and puts the target's rank above it.
# Generic addresses carry the same form in the shared aperture.  A .shared::cta access
# (memory.WindowSpace) takes the executing CTA's own rank bits or none; another CTA's are a fault.
# `ClusterSharedSpace` is the .shared::cluster state space: it finds the CTA (a rank outside the
# cluster, an offset past the shared memory, a CTA that has exited are faults naming the thread
# and address) and sends an access of the CTA's own memory to the shared space unchanged.  It also
# keeps, per CTA, the latest plain access of another CTA to its shared memory and, per mbarrier,
# the latest arrival or multicast signal from another CTA: a CTA that exits before they are
# ordered before its exit (a barrier.cluster phase its threads waited for; for an mbarrier, also a
# phase of it they observed) is reported, since its shared memory goes with it.
#
# `ClusterBarrier` is barrier.cluster: per thread the arrivals and completed waits, per cluster
# the phases completed (when every thread of the cluster that has not exited has arrived).  It also
# keeps the cluster-scope fences and, for clusters of several CTAs, when each mbarrier's
# initialisation became visible to the other CTAs (a release arrival of the initialising thread,
# or a relaxed one after fence.mbarrier_init, then their wait): a peer that arrives on an mbarrier,
# or a TMA multicast that signals it, before that is reported.
#
# `ClusterRaceDetector` checks plain accesses (ld, st, atom) between the threads of different
# CTAs of a cluster, and of one CTA to another's memory; conflicts within the CTA that owns the
# bytes stay with memory.RaceDetector.  Per byte it keeps, for writes, reads and atomics, the
# lowest and highest thread (batch index) since the window was last emptied, the CTA epoch
# (bar.sync count) and the tag of the latest access and the instruction.  An access's tag is the
# count of barrier.cluster arrivals its thread had made before it; an earlier access is ordered
# before one by thread t if it is t's own, or its thread's CTA is t's and a bar.sync lies between,
# or its tag is below the count of barrier phases t has waited for (its thread arrived, and so
# released it, in a phase that t's wait acquired).  A relaxed arrival without a fence releases
# nothing: it moves its thread's latest tags up to the next arrival.  A window keeps the highest
# tag of its threads, so a thread released early beside one released late counts as late.
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import LaunchError
from .errors import BarrierError, Fault, MemoryFault, SharedMemoryRace
from .memory import (ATOMIC, LOAD, OFFSET_MASK, RANK_SHIFT, STORE, UNTRACKED, Space, WindowSpace, check_alignment,
                     lane_threads, same_byte_twice)

#: The most CTAs a cluster may have without the non-portable cluster size attribute (which Phobos's
#: runtime does not set); the driver refuses larger clusters.
PORTABLE_CLUSTER_SIZE = 8
_AXES = "xyz"

#: The special registers of clusters, and the one of them that is a predicate.
CLUSTER_REGISTERS = frozenset(
    ["%cluster_ctarank", "%cluster_nctarank", "%is_explicit_cluster"]
    + [f"%{base}.{axis}" for base in ("clusterid", "nclusterid", "cluster_ctaid", "cluster_nctaid")
       for axis in _AXES])
PREDICATE_REGISTERS = frozenset({"%is_explicit_cluster"})


def check_directives(directives: dict) -> str | None:
    """What ptxas refuses in a kernel's cluster directives, or None."""
    if "reqnctapercluster" in directives and "maxclusterrank" in directives:
        return ".reqnctapercluster and .maxclusterrank cannot both be specified (ptxas refuses them)"
    required = directives.get("reqnctapercluster")
    if required is not None and not (1 <= len(required) <= 3 and all(x >= 1 for x in required)):
        return f".reqnctapercluster needs 1 to 3 positive sizes, not {required}"
    return None


@dataclass(frozen=True)
class ClusterShape:
    """The grid of a launch cut into clusters of `dims` CTAs (1, 1, 1: no clusters)."""

    grid: tuple[int, int, int]
    dims: tuple[int, int, int] = (1, 1, 1)
    explicit: bool = False  # launched with a cluster shape (%is_explicit_cluster)

    @property
    def size(self) -> int:
        return self.dims[0] * self.dims[1] * self.dims[2]

    def coordinates(self, positions: np.ndarray) -> np.ndarray:
        """The grid coordinates (x, y, z) of the CTAs at these launch positions, one row each."""
        positions = np.asarray(positions, np.int64)
        cluster, rank = np.divmod(positions, self.size)
        counts = [g // c for g, c in zip(self.grid, self.dims)]
        return np.stack([_unravel(cluster, counts, axis) * self.dims[axis] + _unravel(rank, self.dims, axis)
                         for axis in range(3)], axis=1)

    def describe(self, position: int) -> str:
        x, y, z = (int(v) for v in self.coordinates(np.array([position]))[0])
        rank = f" (cluster rank {position % self.size})" if self.size > 1 else ""
        return f"({x},{y},{z}){rank}"

    def register(self, name: str, xyz: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The value of a cluster special register for threads of CTAs at grid coordinates `xyz`
        (one row per thread) and launch positions `positions`."""
        if name == "%cluster_ctarank":
            return positions % self.size
        if name == "%cluster_nctarank":
            return np.full(len(positions), self.size)
        if name == "%is_explicit_cluster":
            return np.full(len(positions), self.explicit)
        base, axis = name[1:].split(".")
        k = _AXES.index(axis)
        return {"clusterid": lambda: xyz[:, k] // self.dims[k],
                "nclusterid": lambda: np.full(len(positions), self.grid[k] // self.dims[k]),
                "cluster_ctaid": lambda: xyz[:, k] % self.dims[k],
                "cluster_nctaid": lambda: np.full(len(positions), self.dims[k])}[base]()


def _unravel(linear: np.ndarray, sizes, axis: int) -> np.ndarray:
    """Coordinate `axis` of linear indices over a box of `sizes`, x fastest."""
    below = int(np.prod(sizes[:axis]))
    return linear // below % sizes[axis]


def launch_shape(kernel: str, directives: dict, grid: tuple[int, int, int],
                 requested: tuple[int, int, int] | None) -> ClusterShape:
    """The clusters a launch of `grid` gets: `requested` (the launch's cluster=) or the kernel's
    .reqnctapercluster; LaunchError where the driver refuses the launch."""
    required = directives.get("reqnctapercluster")
    required = None if required is None else tuple(required) + (1,) * (3 - len(required))
    if requested is not None and required is not None and requested != required:
        raise LaunchError(f"{kernel} requires clusters of {required} CTAs (.reqnctapercluster), "
                          f"launched with cluster={requested}")
    dims = requested or required
    if dims is None:
        if "explicitcluster" in directives:
            raise LaunchError(f"{kernel} is marked .explicitcluster: launch it with cluster=(x, y, z)")
        return ClusterShape(grid)
    size = dims[0] * dims[1] * dims[2]
    if size > PORTABLE_CLUSTER_SIZE:
        raise LaunchError(f"clusters of {dims} CTAs: at most {PORTABLE_CLUSTER_SIZE} CTAs make a portable "
                          f"cluster, and the driver refuses larger ones")
    most = directives.get("maxclusterrank")
    if most and size > most[0]:
        raise LaunchError(f"{kernel} allows at most {most[0]} CTAs per cluster (.maxclusterrank), "
                          f"launched with clusters of {dims}")
    if any(g % c for g, c in zip(grid, dims)):
        raise LaunchError(f"grid {grid} is not a whole number of clusters of {dims} CTAs: the driver refuses "
                          f"the launch")
    return ClusterShape(grid, dims, True)


# ------------------------------------------------------------------ distributed shared memory

def mapped_address(rank, offset):
    """The .shared::cluster address of `offset` in the shared memory of the CTA of `rank`."""
    return (np.asarray(rank, np.uint64) << np.uint64(RANK_SHIFT)) | (np.asarray(offset, np.uint64)
                                                                      & np.uint64(OFFSET_MASK))


def rank_bits(shape: ClusterShape, positions: np.ndarray) -> np.ndarray | None:
    """What the shared addresses of CTAs at launch `positions` carry above their offsets: their cluster
    rank (uint64, shifted), or None where every CTA is rank 0 (clusters of one CTA)."""
    if shape.size == 1:
        return None
    return (np.asarray(positions, np.uint64) % np.uint64(shape.size)) << np.uint64(RANK_SHIFT)


class ClusterSharedSpace(Space):
    """The .shared::cluster state space: the shared memory of every CTA of the executing thread's
    cluster (see the module header for its addresses)."""

    name = "shared::cluster"

    def __init__(self, shared: WindowSpace, shape: ClusterShape, cta_count: int):
        super().__init__()
        self.shared = shared
        self.data = shared.data
        self.cluster = shape
        self.exited = np.zeros(cta_count, bool)  # CTAs of the batch all of whose threads have exited
        self.races: ClusterRaceDetector | None = None  # clusters of several CTAs, races checked
        # per CTA, the latest plain access to its shared memory by another CTA's thread: the highest
        # barrier.cluster tag, the thread and the instruction
        self.peer_tag = np.full(cta_count, -1, np.int64)
        self.peer_thread = np.zeros(cta_count, np.int64)
        self.peer_pc = np.zeros(cta_count, np.int64)
        # per mbarrier, what other CTAs' threads (arrivals, TMA multicasts) did to it: [highest
        # phase, highest tag, thread, instruction]
        self.signals: dict[int, list[int]] = {}

    def resolve(self, m, threads, addr, access: str) -> tuple[np.ndarray, np.ndarray]:
        """(CTA of the batch, offset in its shared memory) of each lane's .shared::cluster address;
        a rank outside the cluster and a CTA that has exited are faults."""
        addr = np.asarray(addr, np.uint64)
        window = (addr >> np.uint64(RANK_SHIFT)).astype(np.int64)
        own = m.cta_of[threads]
        size = self.cluster.size
        outside = window >= size
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            raise Fault(MemoryFault, f"{access} at shared::cluster address {int(addr[i]):#x}, which names CTA rank "
                                     f"{int(window[i])} of a cluster of {size} CTAs", thread=int(threads[i]))
        rows = own - own % size + window
        gone = self.exited[rows]
        if gone.any():
            i = int(np.flatnonzero(gone)[0])
            raise Fault(MemoryFault,
                        f"{access} at shared::cluster address {int(addr[i]):#x}, in the shared memory of CTA "
                        f"{m.describe_cta(int(rows[i]))}, which has exited: its shared memory is gone (undefined "
                        f"on the GPU; a CTA whose peers still use its shared memory must wait at a barrier.cluster "
                        f"before it exits)", thread=int(threads[i]))
        return rows, (addr & np.uint64(OFFSET_MASK)).astype(np.int64)

    def locate(self, m, idx, addr, nbytes, access, pc, align=None, stored=None):
        addr = np.asarray(addr, np.uint64)
        bits = self.shared.rank_bits
        own_bits = np.uint64(0) if bits is None else bits if idx is None else bits[idx]
        if not ((addr ^ own_bits) >> np.uint64(RANK_SHIFT)).any():  # all in the executing CTAs' own windows
            return self.shared.locate(m, idx, addr, nbytes, access, pc, align, stored)
        threads = lane_threads(idx, len(addr))
        rows, offsets = self.resolve(m, threads, addr, access)
        over = offsets + nbytes > self.shared.size
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise Fault(MemoryFault,
                        f"out-of-bounds shared::cluster {access} of {nbytes} bytes at {int(addr[i]):#x}: offset "
                        f"{int(offsets[i]):#x} in the shared memory of CTA {m.describe_cta(int(rows[i]))}, which "
                        f"has {self.shared.size} bytes", thread=int(threads[i]))
        check_alignment(self.name, addr, align or nbytes, idx, access)
        own = rows == m.cta_of[threads]
        if own.all():
            return self.shared.locate(m, idx, offsets.astype(np.uint64), nbytes, access, pc, align, stored)
        lanes = (lambda sel: lambda: stored().reshape(len(addr), -1)[sel].reshape(-1)) if stored else lambda sel: None
        if own.any():
            self.shared.locate(m, threads[own], offsets[own].astype(np.uint64), nbytes, access, pc, align,
                               lanes(own))
        flat = rows * self.shared.stride + offsets
        if access not in UNTRACKED:
            remote = ~own
            self._peer_access(m, threads[remote], rows[remote], pc)
            if self.shared.races is not None:
                self.shared.races.check_remote(m, threads[remote], flat[remote], nbytes, access)
            if self.races is not None:
                self.races.check(m, threads[remote], flat[remote], nbytes, access, pc, lanes(remote))
        return flat


    # -- the lifetime of a CTA's shared memory
    def _peer_access(self, m, threads, rows, pc: int) -> None:
        """Plain accesses by `threads` to the shared memory of other CTAs `rows`."""
        tags = m.cluster_barrier.arrived[threads]
        for row in np.unique(rows).tolist():
            mine = np.flatnonzero(rows == row)
            i = mine[np.argmax(tags[mine])]
            if tags[i] >= self.peer_tag[row]:
                self.peer_tag[row], self.peer_thread[row], self.peer_pc[row] = tags[i], threads[i], pc

    def peer_signal(self, m, number: int, threads, pc: int) -> None:
        """`threads` of another CTA arrive on mbarrier `number` or signal it (a TMA multicast)."""
        i = int(np.argmax(m.cluster_barrier.arrived[threads]))
        tag, phase = int(m.cluster_barrier.arrived[threads[i]]), m.mbarriers.phase[number]
        record = self.signals.get(number)
        if record is None or tag >= record[1] or phase >= record[0]:
            self.signals[number] = [max(phase, record[0] if record else 0), max(tag, record[1] if record else 0),
                                    int(threads[i]), pc]

    def check_exit(self, m, rows) -> None:
        """The CTAs `rows` exit: what other CTAs did to their shared memory must be ordered before, by
        a barrier.cluster phase they waited for (or, for an mbarrier, a phase of it they observed)."""
        tpc, stride = m.tpc, self.shared.stride
        for row in rows.tolist():
            members = slice(row * tpc, (row + 1) * tpc)
            waited = int(m.cluster_barrier.waited[members].max())
            if self.peer_tag[row] >= waited:
                raise self._exit_race(m, row, f"shared memory was accessed by "
                                              f"{m.describe_thread(int(self.peer_thread[row]))}",
                                      int(self.peer_pc[row]), "a barrier.cluster")
            for number, (phase, tag, thread, pc) in self.signals.items():
                if m.mbarriers.where[number] // stride == row and tag >= waited \
                        and m.mbarriers.observed[number, members].max() <= phase:
                    raise self._exit_race(m, row, f"{m.mbarriers.describe(m, number)} was signalled by "
                                                  f"{m.describe_thread(thread)}", pc,
                                          "a wait for that mbarrier phase or a barrier.cluster")

    def _exit_race(self, m, row: int, what: str, pc: int, needed: str) -> Fault:
        return Fault(SharedMemoryRace,
                     f"CTA {m.describe_cta(row)} exits, but its {what} at {m.ptx_position(pc)} with nothing "
                     f"ordering that before the exit: the access may still be in flight, or come after the "
                     f"shared memory is gone (undefined on the GPU; {needed} between them orders it)",
                     thread=row * m.tpc, related=[(pc, "the access by another CTA")])


# ------------------------------------------------------------------ barrier.cluster

class ClusterBarrier:
    """barrier.cluster for the clusters of a batch, the cluster-scope fences, and when each
    mbarrier's initialisation became visible to the other CTAs of its cluster."""

    def __init__(self, nthreads: int, threads_per_cta: int, shape: ClusterShape):
        self.per_cluster = threads_per_cta * shape.size
        self.shape = shape
        self.arrived = np.zeros(nthreads, np.int64)  # barrier.cluster.arrive executed, per thread
        self.waited = np.zeros(nthreads, np.int64)  # barrier.cluster.wait completed, per thread
        self.completed = np.zeros(nthreads // self.per_cluster, np.int64)  # phases, per cluster
        self.releases = np.ones(nthreads, bool)  # the thread's arrival in the open phase releases
        self.fenced = np.zeros(nthreads, bool)  # a cluster-scope fence since the thread's last arrival
        self.completions = 0  # phases completed, all clusters
        self.used = False  # whether any thread arrived yet
        self.pending: dict[int, dict[int, bool]] = {}  # thread -> {mbarrier: fenced since} not yet released
        self.published: dict[int, tuple[int, int | None]] = {}  # mbarrier -> (its initialising thread, phase)

    def arrive(self, m, threads, release: bool) -> None:
        """barrier.cluster.arrive by `threads` (.release, or .relaxed: `release` False)."""
        cluster = threads // self.per_cluster
        again = self.arrived[threads] > self.completed[cluster]
        if again.any():
            raise Fault(BarrierError, "barrier.cluster.arrive by a thread that already arrived at this phase of the "
                                      "cluster barrier (each thread arrives once, then waits)",
                        thread=int(threads[np.flatnonzero(again)[0]]))
        releases = self.fenced[threads] | release
        self.releases[threads] = releases
        for t in self.pending.keys() & set(threads.tolist()):
            self._publish(t, bool(self.releases[t]))
        held = threads[~releases]
        if held.size and m.cluster_shared.races is not None:
            m.cluster_shared.races.hold_back(held, self.arrived)
        self.arrived[threads] += 1
        self.fenced[threads] = False
        self.used = True
        self.complete(m)

    def ready(self, threads) -> np.ndarray:
        """barrier.cluster.wait: which of `threads` may go on (their phase completed)."""
        arrived = self.arrived[threads]
        go = (arrived > self.waited[threads]) & (self.completed[threads // self.per_cluster] >= arrived)
        self.waited[threads[go]] = arrived[go]
        return go

    def complete(self, m) -> None:
        """Complete the phase of every cluster whose threads that have not exited have all arrived
        (after arrivals, and after exits, which can release a barrier)."""
        if not self.used:
            return
        arrived = self.arrived.reshape(-1, self.per_cluster)
        live = m.alive().reshape(-1, self.per_cluster)
        done = (live.any(axis=1) & np.where(live, arrived > self.completed[:, None], True).all(axis=1))
        clusters = np.flatnonzero(done)
        if not clusters.size:
            return
        self.completed[clusters] += 1
        self.completions += len(clusters)
        size = self.shape.size
        arrived_now = arrived == self.completed[:, None]  # the threads that arrived in the completed phase
        releases = np.where(arrived_now.ravel(), self.releases, True).reshape(-1, m.tpc).all(axis=1)
        rows = (clusters[:, None] * size + np.arange(size)).ravel()
        m.passed_cta_barrier(rows[releases[rows]])
        whole = clusters[releases[rows].reshape(-1, size).all(axis=1)]
        if whole.size and size > 1:
            m.mbarriers.share_observations(m, whole, self.per_cluster)
            if m.glob.races is not None:
                for c in whole.tolist():
                    m.glob.races.order_ctas(m.cta_first + c * size + np.arange(size))

    def describe_waiting(self, m, threads) -> str:
        """What threads waiting in barrier.cluster.wait wait for (those of the first one's cluster)."""
        cluster = int(threads[0]) // self.per_cluster
        mine = threads[threads // self.per_cluster == cluster]
        elsewhere = f" (and {len(threads) - len(mine)} in other clusters)" if len(mine) < len(threads) else ""
        unannounced = mine[self.arrived[mine] <= self.waited[mine]]
        if unannounced.size:
            return (f"{unannounced.size} threads wait in barrier.cluster.wait without having arrived{elsewhere} "
                    f"(barrier.cluster.arrive comes before each barrier.cluster.wait)")
        members = np.arange(cluster * self.per_cluster, (cluster + 1) * self.per_cluster)
        missing = members[m.alive()[members] & (self.arrived[members] <= self.completed[cluster])]
        ctas = np.unique(m.cta_of[missing])
        where = np.unique(m.pc[missing])[:3]
        return (f"{mine.size} threads wait in barrier.cluster.wait{elsewhere} for {missing.size} threads of "
                f"CTA{'s' if len(ctas) > 1 else ''} {', '.join(m.describe_cta(int(c)) for c in ctas[:4])} that have "
                f"not arrived (they are at "
                f"{', '.join(f'{m.ptx_position(int(pc))} `{m.program.ops[int(pc)].text}`' for pc in where)})")

    # -- fences and mbarrier initialisation
    def fence(self, threads, full: bool) -> None:
        """A fence of cluster scope or wider (full), or fence.mbarrier_init (not full), by `threads`."""
        if full:
            self.fenced[threads] = True
        for t in self.pending.keys() & set(np.asarray(threads).tolist()):
            for number in self.pending[t]:
                self.pending[t][number] = True

    def initialised(self, number: int, thread: int) -> None:
        """mbarrier.init of mbarrier `number` by `thread`: not yet visible to other CTAs."""
        self.published[number] = (thread, None)
        self.pending.setdefault(thread, {})[number] = False

    def _publish(self, thread: int, releases: bool) -> None:
        """The thread arrives at the cluster barrier: its mbarrier initialisations that the arrival
        releases (all of them, or after a relaxed arrival those fenced since) become visible to the
        threads that wait for this phase."""
        inits = self.pending[thread]
        for number, fenced in list(inits.items()):
            if releases or fenced:
                self.published[number] = (thread, int(self.arrived[thread]))
                del inits[number]
        if not inits:
            del self.pending[thread]

    def check_published(self, m, number: int, threads, what: str) -> None:
        """`threads` of other CTAs use mbarrier `number` (`what` they do): its initialisation must
        have been released by a cluster barrier phase that they waited for."""
        owner, phase = self.published.get(number, (None, None))
        if owner is None:
            return
        early = self.waited[threads] <= (phase if phase is not None else np.iinfo(np.int64).max)
        if early.any():
            raise Fault(BarrierError,
                        f"{what} the {m.mbarriers.describe(m, number)} before its initialisation (by "
                        f"{m.describe_thread(owner)}) was made visible to the cluster: the initialising thread needs "
                        f"fence.mbarrier_init.release.cluster and barrier.cluster.arrive, this one "
                        f"barrier.cluster.wait, in between", thread=int(threads[np.flatnonzero(early)[0]]))


# ------------------------------------------------------------------ races between CTAs

_NONE = np.int32(-1)
_HIGHEST = np.int32(np.iinfo(np.int32).max)


class _Window:
    """One kind of access to every shared byte: the lowest and highest thread, the CTA epoch of
    the latest access, the highest tag and the latest instruction (see the module header)."""

    def __init__(self, n: int, what: str):
        self.what = what
        self.lo = np.full(n, _HIGHEST, np.int32)
        self.hi = np.full(n, _NONE, np.int32)
        self.epoch = np.zeros(n, np.int32)
        self.tag = np.full(n, -1, np.int32)
        self.pc = np.zeros(n, np.int32)

    def clear(self, b) -> None:
        self.lo[b] = _HIGHEST
        self.hi[b] = _NONE
        self.tag[b] = -1

    def unordered(self, b, t, cta, owner, epoch, waited, tpc: int) -> np.ndarray:
        """Which accesses (byte b by thread t of CTA cta, at epoch, having waited for `waited`
        phases) find an earlier one here that nothing orders before them."""
        lo, hi = self.lo[b], self.hi[b]
        lo_cta = lo // tpc
        one_cta = (hi != _NONE) & (lo_cta == hi // tpc) & (lo_cta == cta)
        ordered = (((lo == t) & (hi == t)) | (one_cta & ((cta == owner) | (self.epoch[b] < epoch)))
                   | (self.tag[b] < waited))
        return (hi != _NONE) & ~ordered

    def add(self, b, t, epoch, tag, pc: int, reset) -> None:
        """Record accesses; `reset`: the bytes whose earlier accesses all precede them."""
        if reset.any():
            self.clear(b[reset])
        np.minimum.at(self.lo, b, t)
        np.maximum.at(self.hi, b, t)
        np.maximum.at(self.tag, b, tag)
        self.epoch[b] = epoch
        self.pc[b] = pc


class ClusterRaceDetector:
    """Plain accesses to the shared memory of a batch's clusters between threads of different CTAs
    (see the module header)."""

    def __init__(self, nbytes: int, stride: int, threads_per_cta: int, barrier: ClusterBarrier):
        self.stride = stride
        self.tpc = threads_per_cta
        self.barrier = barrier
        self.writes = _Window(nbytes, "write")
        self.reads = _Window(nbytes, "read")
        self.atomics: _Window | None = None  # created by the first atomic

    def check(self, m, threads, flat, nbytes: int, access: str, pc: int, stored=None) -> None:
        """Accesses of `nbytes` at flat shared offsets `flat` by `threads` (batch indices); `stored`:
        for a store, a function giving the bytes written - as within a CTA (memory.RaceDetector), a
        write of the value a byte holds does not conflict with earlier writes, nor do lanes of one
        instruction writing one value."""
        threads = np.asarray(threads)
        b = (np.asarray(flat)[:, None] + np.arange(nbytes)).ravel()
        t = np.repeat(threads, nbytes).astype(np.int32)
        cta, owner = t // self.tpc, b // self.stride
        epoch, waited, tag = m.epoch[cta], self.barrier.waited[t], self.barrier.arrived[t].astype(np.int32)
        values = stored() if stored is not None and access == STORE else None
        if access == STORE:
            pair = same_byte_twice(b, values)
            if pair is not None:
                i, j = pair
                raise Fault(SharedMemoryRace, f"data race on shared memory at {m.describe_shared_at(int(b[i]))}: "
                                              f"{m.describe_thread(int(t[i]))} and {m.describe_thread(int(t[j]))} "
                                              f"write different values to it in the same instruction",
                            thread=int(t[j]))
        earlier = {LOAD: (self.writes, self.atomics), STORE: (self.writes, self.reads, self.atomics),
                   ATOMIC: (self.writes, self.reads)}[access]
        rewritten = np.zeros(len(b), bool)  # earlier writes of the value written now
        for window in earlier:
            if window is not None:
                clash = window.unordered(b, t, cta, owner, epoch, waited, self.tpc)
                if window is self.writes and values is not None:
                    rewritten = clash & (values == m.shared.data[b])
                    clash &= ~rewritten
                if clash.any():
                    raise self._race(m, window, b, t, int(np.flatnonzero(clash)[0]), access)
        if access == STORE:
            self.reads.clear(b)
            if self.atomics is not None:
                self.atomics.clear(b)
            self.writes.add(b, t, epoch, tag, pc, ~rewritten)
            return
        if access == ATOMIC and self.atomics is None:
            self.atomics = _Window(len(self.writes.lo), "atomic")
        window = self.reads if access == LOAD else self.atomics
        lo, hi = window.lo[b], window.hi[b]
        lo_cta = lo // self.tpc
        reset = ((hi == _NONE) | ((lo_cta == hi // self.tpc) & (lo_cta == cta) & (window.epoch[b] < epoch))
                 | (window.tag[b] < waited))
        window.add(b, t, epoch, tag, pc, reset)

    def hold_back(self, threads, arrived) -> None:
        """Relaxed arrivals without a fence by `threads`: their accesses since their last arrival are
        not released by it, so their tags move up to the next one."""
        held = np.zeros(len(arrived), bool)
        held[threads] = True
        for window in (self.writes, self.reads, self.atomics):
            if window is None:
                continue
            present = window.hi != _NONE
            lo, hi = np.where(present, window.lo, 0), np.where(present, window.hi, 0)
            mine = present & ((held[lo] & (window.tag == arrived[lo])) | (held[hi] & (window.tag == arrived[hi])))
            window.tag[mine] += 1

    def _race(self, m, window: _Window, b, t, i: int, access: str) -> Fault:
        byte, thread = int(b[i]), int(t[i])
        other = int(window.lo[byte]) if int(window.lo[byte]) != thread else int(window.hi[byte])
        other_pc = int(window.pc[byte])
        whom = m.describe_thread(other)
        why = ("with no barrier in between" if other // self.tpc == thread // self.tpc
               else "in another CTA, with no barrier.cluster in between")
        what = {LOAD: "read", STORE: "write", ATOMIC: "atomic"}[access]
        article = "an" if window.what[0] in "aeiou" else "a"
        return Fault(SharedMemoryRace,
                     f"data race on shared memory at {m.describe_shared_at(byte)}: {what} by this thread conflicts "
                     f"with {article} {window.what} by {whom} at {m.ptx_position(other_pc)}, {why}",
                     thread=thread, related=[(other_pc, f"the conflicting {window.what} by {whom}")])
