# State of the asynchronous units of sm_90: wgmma groups in flight, mbarriers,
# bulk async-groups, and the register pool of setmaxnreg.
#
# The emulator performs an asynchronous operation when it is issued (a wgmma
# writes its accumulators at once, a bulk tensor copy writes shared memory at
# once) and keeps, until the operation is waited for, what a program must not
# touch meanwhile, so that a program that would race on the GPU is stopped
# instead of silently getting the right answer here:
#
# * `AsyncMma`: per thread, the committed wgmma groups; per wgmma in flight,
#   its accumulator and A-fragment registers and the shared bytes it reads
#   (writing them is an error, see memory.RaceDetector).  Registers follow
#   ptxas, which tracks them: an instruction that reads an accumulator of a
#   wgmma in flight first waits for it (ptxas injects a `warpgroup.wait`,
#   info C7517), committed or not, as if a `wgmma.wait_group` covering it came
#   just before; one that writes a register of a wgmma in flight without
#   reading it is an error (the PTX ISA leaves it undefined; ptxas serializes
#   every wgmma of the kernel for it, C7515).  A wgmma also needs a
#   `wgmma.fence` after any other instruction touched registers that wgmmas use.
# * `Mbarriers`: the mbarrier objects of every CTA (expected arrivals, pending
#   arrivals, transaction count, phase), and per thread the phases it has seen
#   complete, which the race detector asks before a thread reads bytes that a
#   bulk tensor copy wrote.  A phase completes when its pending arrivals and
#   its transaction count are both zero.
# * `BulkGroups`: the bulk async-groups of bulk stores (shared -> global),
#   whose shared sources stay read until `cp.async.bulk.wait_group` covers them.
# * `RegisterPool`: the registers each warp holds and each CTA's pool, which
#   `setmaxnreg` moves between them (an .inc that can never be served is a
#   deadlock, as on the GPU).
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .errors import AsyncCopyHazard, Fault, MemoryFault


@dataclass
class _Pending:
    """One asynchronous operation in flight: its threads, group, registers and shared bytes."""

    threads: np.ndarray
    group: np.ndarray
    slots: frozenset  # the registers it uses
    shared: np.ndarray  # flat shared bytes it reads (a multiset: one entry per read)
    pc: int
    results: frozenset = frozenset()  # the registers it defines (of `slots`)


class _Groups:
    """Operations issued, committed into groups and waited for, per thread."""

    what = ""

    def __init__(self, nthreads: int):
        self.committed = np.zeros(nthreads, np.int64)
        self.records: list[_Pending] = []

    def issue(self, m, threads, slots, shared, pc, results=frozenset()) -> None:
        if shared.size and m.shared.races is not None:
            m.shared.races.check_fenced(m, shared, int(threads[0]), self.what.capitalize())
        self.records.append(_Pending(threads, self.committed[threads].copy(), frozenset(slots), shared, pc,
                                     frozenset(results)))
        if shared.size and m.shared.races is not None:
            m.shared.races.add_async_reads(shared, 1)

    def commit(self, threads) -> None:
        self.committed[threads] += 1

    def complete(self, m, threads, keep: int | None) -> None:
        """Finish the operations of `threads` in all but their `keep` most recent committed
        groups (keep=None: all, committed or not)."""
        if not self.records:
            return
        limit = np.full(len(self.committed), -1, np.int64)
        limit[threads] = np.iinfo(np.int64).max if keep is None else self.committed[threads] - keep
        self._finish(m, limit, partial=False)

    def _finish(self, m, limit: np.ndarray, partial: bool) -> None:
        """Finish, for each thread, its operations in groups below `limit[thread]`.  An operation
        finished by only some of its threads is an error, or with `partial` stays in flight for
        the others (its shared bytes stay read until the last of them)."""
        remaining = []
        races = m.shared.races
        for rec in self.records:
            done = rec.group < limit[rec.threads]
            if done.all():
                if rec.shared.size and races is not None:
                    races.add_async_reads(rec.shared, -1)
                continue
            if done.any():
                if not partial:
                    raise Fault(AsyncCopyHazard, f"{self.what} waited for by only some of the threads that "
                                                 "issued it", thread=int(rec.threads[np.flatnonzero(done)[0]]),
                                pc=rec.pc)
                rec.threads, rec.group = rec.threads[~done], rec.group[~done]
            remaining.append(rec)
        self.records = remaining


class AsyncMma(_Groups):
    """wgmma.mma_async operations in flight."""

    what = "a wgmma"

    def __init__(self, nthreads: int):
        super().__init__(nthreads)
        self.needs_fence = np.ones(nthreads, bool)

    def touched(self, m, idx, reads: frozenset, writes: frozenset, pc: int) -> None:
        """An instruction other than wgmma reads or writes registers that wgmmas use: the wgmmas in
        flight that define a register it reads are waited for first, with the groups before theirs
        (ptxas's injected warpgroup.wait); a write to a register of one still in flight is an error."""
        threads = m.all_threads if idx is None else idx
        if reads:
            self._wait_for_results(m, threads, reads)
        for rec in self.records:
            if rec.slots & writes:
                inside = np.isin(threads, rec.threads)
                if inside.any():
                    raise Fault(AsyncCopyHazard,
                                "a register of a wgmma in flight (its accumulator or A fragment) is written "
                                "before the wgmma.wait_group that covers it",
                                thread=int(threads[np.flatnonzero(inside)[0]]), related=[(rec.pc, "the wgmma")])
        if idx is None:
            self.needs_fence.fill(True)
        else:
            self.needs_fence[threads] = True

    def _wait_for_results(self, m, threads: np.ndarray, reads: frozenset) -> None:
        """Each of `threads` waits for the wgmmas in flight that define a register of `reads`, and for the
        groups before theirs; the others of a wgmma's warpgroup wait at their own read or wait_group."""
        waited = [rec for rec in self.records if rec.results & reads]
        if not waited:
            return
        limit = np.full(len(self.committed), -1, np.int64)
        for rec in waited:
            inside = np.isin(rec.threads, threads)
            limit[rec.threads[inside]] = np.maximum(limit[rec.threads[inside]], rec.group[inside] + 1)
        if (limit >= 0).any():
            self._finish(m, limit, partial=True)

    def fence(self, threads) -> None:
        self.needs_fence[threads] = False

    def check_fenced(self, threads) -> None:
        if self.needs_fence[threads].any():
            i = int(np.flatnonzero(self.needs_fence[threads])[0])
            raise Fault(AsyncCopyHazard, "wgmma.mma_async without a wgmma.fence after the registers it uses "
                                         "were last touched by other instructions (or before the first wgmma)",
                        thread=int(threads[i]))


class BulkGroups(_Groups):
    """Bulk copies from shared memory (cp.async.bulk...bulk_group) not yet waited for."""

    what = "a bulk copy"


class Mbarriers:
    """The mbarrier objects of a batch of CTAs, keyed by their flat shared-memory offset."""

    def __init__(self, nthreads: int):
        self.nthreads = nthreads
        self.index: dict[int, int] = {}
        self.where: list[int] = []
        self.expected: list[int] = []
        self.pending: list[int] = []
        self.tx: list[int] = []
        self.phase: list[int] = []
        self.observed = np.zeros((0, nthreads), np.int64)  # [barrier, thread]: phases seen complete
        self.completions = 0

    def describe(self, m, number: int) -> str:
        return (f"mbarrier at {m.describe_shared_at(self.where[number])} (phase {self.phase[number]}, "
                f"{self.pending[number]} of {self.expected[number]} arrivals pending, "
                f"transaction count {self.tx[number]})")

    def init(self, flat: int, count: int) -> int:
        """Initialise the mbarrier at flat shared offset `flat`; returns its number."""
        number = self.index.get(flat)
        if number is None:
            number = self.index[flat] = len(self.where)
            self.where.append(flat)
            for column in (self.expected, self.pending, self.tx, self.phase):
                column.append(0)
            self.observed = np.vstack([self.observed, np.zeros((1, self.nthreads), np.int64)])
        self.expected[number] = self.pending[number] = count
        self.tx[number] = self.phase[number] = 0
        self.observed[number] = 0
        return number

    def lookup(self, flat: int, thread: int) -> int:
        number = self.index.get(flat)
        if number is None:
            raise Fault(MemoryFault, "mbarrier operation on shared memory that no mbarrier.init initialised",
                        thread=thread)
        return number

    def arrive(self, m, number: int, count: int, thread: int) -> int:
        """`count` arrivals; returns the phase they belong to (the state token)."""
        phase = self.phase[number]
        if count > self.pending[number]:
            raise Fault(AsyncCopyHazard, f"{count} arrivals on {self.describe(m, number)}: more than pending",
                        thread=thread)
        self.pending[number] -= count
        self._maybe_complete(number)
        return phase

    def expect_tx(self, number: int, nbytes: int) -> None:
        self.tx[number] += nbytes

    def complete_tx(self, number: int, nbytes: int) -> None:
        self.tx[number] -= nbytes
        self._maybe_complete(number)

    def _maybe_complete(self, number: int) -> None:
        if self.pending[number] == 0 and self.tx[number] == 0:
            self.phase[number] += 1
            self.pending[number] = self.expected[number]
            self.completions += 1

    def completed(self, number: int, parity: int | None, token: int | None) -> bool:
        """Has the phase of the given parity (the current or the preceding phase), or the
        phase of the state token, completed?"""
        if parity is not None:
            return self.phase[number] % 2 != parity
        return self.phase[number] > token

    def observe(self, number: int, threads) -> None:
        """`threads` saw the completion of every phase so far."""
        self.observed[number, threads] = self.phase[number]

    def share_observations(self, m, groups, size: int) -> None:
        """A barrier of groups of `size` consecutive threads (a CTA, a cluster): what one thread of
        a group has seen, all of them have.  groups: their indices (None: all)."""
        if not len(self.where):
            return
        view = self.observed.reshape(len(self.where), m.n // size, size)
        groups = slice(None) if groups is None else groups
        view[:, groups, :] = view[:, groups, :].max(axis=2, keepdims=True)


#: Registers of an SM's register file that one CTA can use (sm_90: 64K 32-bit registers).
REGISTER_FILE = 65536
_SETMAXNREG_COUNT = re.compile(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)")


class RegisterPool:
    """The registers `setmaxnreg` moves between the warps of each CTA (sm_90a).

    A CTA gets `entry` registers per thread for each of its warps; .dec returns a
    warp's registers above the new count to the CTA's pool, .inc takes them from
    it and waits while the pool holds too few.  `entry` is what ptxas gives the
    kernel: the register cap the performance directives set (`.maxnreg`, or 64K
    shared by `.maxntid` threads times `.minnctapersm`, in steps of 8), lowered
    to the largest setmaxnreg count of the kernel (seen with ptxas 13.0).  Without
    a cap ptxas ignores setmaxnreg (warning C7508) and so does the pool
    (`entry` None).  Registers of exited warps are not returned to the pool.
    """

    def __init__(self, directives: dict, op_texts: list[str], ncta: int, tpc: int):
        counts = [int(found[1]) for text in op_texts if (found := _SETMAXNREG_COUNT.search(text))]
        cap = _register_cap(directives)
        self.entry = None if cap is None or not counts else min(cap, max(counts))
        self.warps_per_cta = -(-tpc // 32)
        self.held = np.full(ncta * self.warps_per_cta, self.entry or 0, np.int64)
        self.free = np.zeros(ncta, np.int64)
        self.releases = 0

    def describe(self, cta: int) -> str:
        warps = self.held[cta * self.warps_per_cta:(cta + 1) * self.warps_per_cta]
        return (f"the CTA's {self.warps_per_cta} warps started with {self.entry} registers a thread "
                f"({self.entry * 32 * self.warps_per_cta} in all) and now hold {', '.join(map(str, warps))}; "
                f"{int(self.free[cta])} are free")


def _register_cap(directives: dict) -> int | None:
    """Registers per thread a kernel may use at entry, from its performance directives."""
    caps = []
    if "maxnreg" in directives:
        caps.append(int(directives["maxnreg"][0]))
    if "maxntid" in directives:
        warps = -(-int(np.prod(directives["maxntid"])) // 32)
        per_sm = int(directives.get("minnctapersm", (1,))[0]) or 1
        caps.append(min(REGISTER_FILE // (per_sm * warps * 32) // 8 * 8, 255))
    return min(caps) if caps else None
