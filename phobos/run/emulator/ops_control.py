# Control flow, barriers and warp-synchronous instructions.
#
# Branches, exits and barriers only describe themselves here (their kind and,
# for barriers, the barrier id and expected count, a whole number of warps;
# for `bra.uni`, the check that the guard does not split a warp, which the
# scheduler runs when it splits the active threads); the scheduler in
# machine.py moves the threads.  Memory fences are no-ops: the emulator runs
# one instruction at a time, so every access is already visible to all.  The
# exceptions are `fence.proxy.async`, which the race detector records (the
# tensor cores and TMA, the async proxy, may not see plain shared stores
# without it: memory.RaceDetector.check_fenced), and fences of cluster scope
# or wider, after which a relaxed barrier.cluster.arrive releases.
#
# shfl.sync, vote.sync, redux.sync, elect.sync and bar.warp.sync work per warp (32
# consecutive threads of a CTA).  Their member mask must name exactly lanes
# that execute the instruction together: a lane in the mask that has exited,
# diverged elsewhere or does not exist (a partial last warp) is undefined
# behaviour on the GPU and an error here, as is reading a lane that is not
# active.  bar.warp.sync also tells the race detector that the warp's shared
# memory accesses before it are ordered with those after it.
from __future__ import annotations

import weakref

import numpy as np

from . import syntax as syn
from .decode import BARRIER, BRANCH, EXIT, Semantics, opcode, plain
from .errors import BarrierError, DivergentBranch, Fault, PtxSyntaxError, TrapError, WarpSyncError
from .ops_arith import require
from .ptxtypes import TYPES

NUM_BARRIERS = 16
WARP = 32
WARPS_PER_CTA_BOUND = 1024 // WARP + 1  # more warps than any CTA has: keys warps of different CTAs apart
U32 = TYPES["u32"]
B32 = TYPES["b32"]
PRED = TYPES["pred"]


@opcode("bra")
def build_bra(d, ins, mods):
    uniform = mods.flag("uni")
    (target,) = d.operands(ins, 1)
    if not isinstance(target, syn.Name):
        raise d.error("bra needs a label (indirect branches are not supported)")
    return Semantics(BRANCH, _check_uniform if uniform else None, target.text)


def _check_uniform(m, taken, rest) -> None:
    """bra.uni whose guard split the active threads: no warp may have threads on both sides."""
    taken_warps = _warp_keys(m, taken)
    split = np.intersect1d(taken_warps, _warp_keys(m, rest))
    if split.size:
        t = int(taken[np.flatnonzero(taken_warps == split[0])[0]])
        raise Fault(DivergentBranch, "bra.uni taken by some active threads of a warp and not by others: "
                                     "the branch was promised uniform", thread=t)


def _warp_keys(m, threads) -> np.ndarray:
    """One number per warp of the batch, for each of `threads`."""
    return m.cta_of[threads] * WARPS_PER_CTA_BOUND + m.ltid[threads] // WARP


@opcode("exit", "ret")
def build_exit(d, ins, mods):
    mods.flag("uni")
    d.operands(ins, 0)
    return Semantics(EXIT, None)


@opcode("bar", "barrier")
def build_barrier(d, ins, mods):
    if not mods.flag("sync"):
        raise d.error(f"only {mods.base}.sync is supported")
    mods.flag("cta")
    mods.flag("aligned")
    ops = d.operands(ins, 1, 2)
    read_id = d.reader(ops[0], U32)
    read_count = d.reader(ops[1], U32) if len(ops) == 2 else None
    if len(ops) == 2 and isinstance(ops[1], syn.Imm):
        if ops[1].kind != "int" or ops[1].value <= 0 or ops[1].value % WARP:
            raise d.error(f"the thread count of {mods.base}.sync must be a positive multiple of {WARP}",
                          PtxSyntaxError)

    def run(m, idx):
        ids = np.asarray(read_id(m, idx))
        if (ids >= NUM_BARRIERS).any():
            raise Fault(BarrierError, f"barrier id {int(ids.max())} is not below {NUM_BARRIERS}")
        if read_count is None:
            return ids, 0
        counts = np.asarray(read_count(m, idx))
        bad = (counts == 0) | (counts % WARP != 0)
        if bad.any():
            count = int(counts.flat[np.flatnonzero(bad)[0]])
            raise Fault(BarrierError, f"barrier thread count {count} is not a positive multiple of {WARP}")
        return ids, counts
    return Semantics(BARRIER, run)


_WIDE_SCOPES = frozenset({"cluster", "gpu", "sys", "gl"})  # scopes (membar levels) that reach other CTAs


@opcode("membar", "fence", "nanosleep")
def build_no_op(d, ins, mods):
    """Ordering is a no-op for one instruction at a time, except for what the detectors keep:
    `fence.proxy.async` (plain shared stores read by wgmma or TMA need it, see
    memory.RaceDetector), and fences of cluster scope or wider and `fence.mbarrier_init`, after
    which a relaxed barrier.cluster.arrive releases (cluster.ClusterBarrier)."""
    words = ins.opcode.split(".")
    mods.drop(lambda word: True)
    if words[1:3] == ["proxy", "async"]:
        def run(m, idx):
            if m.shared.races is not None:
                m.shared.races.proxy_fence(m, np.arange(m.n) if idx is None else idx)
        return plain(run)
    mbarrier_init = words[1:2] == ["mbarrier_init"]
    if words[0] == "nanosleep" or words[1:2] == ["proxy"] or "acquire" in words \
            or not (mbarrier_init or _WIDE_SCOPES & set(words)):
        return plain(lambda m, idx: None)
    return plain(lambda m, idx: m.cluster_barrier.fence(np.arange(m.n) if idx is None else idx,
                                                        full=not mbarrier_init))


@opcode("trap")
def build_trap(d, ins, mods):
    d.operands(ins, 0)

    def run(m, idx):
        raise Fault(TrapError, "trap executed", thread=0 if idx is None else int(idx[0]))
    return plain(run)


# ------------------------------------------------------------------ warps

def warp_lanes(m, idx):
    """(threads, lane ids, lane-0 thread of each lane's warp, lane bits, active lanes per warp)."""
    if idx is None:  # every thread of the batch: the same each time, kept for the batch
        whole = _WHOLE_BATCH.get(m)
        if whole is None:
            whole = _WHOLE_BATCH[m] = _warp_lanes(m, np.arange(m.n))
        return whole
    return _warp_lanes(m, idx)


_WHOLE_BATCH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # machine -> warp_lanes(m, None)


def _warp_lanes(m, threads):
    lane = m.lane[threads]
    first = threads - lane
    bit = np.left_shift(np.uint32(1), lane.astype(np.uint32))
    active = np.bincount(first, weights=bit, minlength=m.n).astype(np.uint32)  # (a sum of distinct bits, exact)
    return threads, lane, first, bit, active[first]


def _check_members(m, what, threads, bit, active, member):
    """Every executing lane is in the member mask, and every member lane executes."""
    outside = (member & bit) == 0
    if np.count_nonzero(outside):
        member = np.broadcast_to(member, threads.shape)
        i = int(np.flatnonzero(outside)[0])
        raise Fault(WarpSyncError, f"{what}: the executing lane is not in the member mask "
                                   f"{int(member[i]):#010x}", thread=int(threads[i]))
    missing = member & ~active
    if np.count_nonzero(missing):
        member, missing = np.broadcast_arrays(member, missing)
        i = int(np.flatnonzero(missing)[0])
        absent = int(missing[i])
        lane = (absent & -absent).bit_length() - 1
        exists = int(m.warp_exists[threads[i]])
        why = ("does not exist (partial warp)" if not exists >> lane & 1
               else "has exited or is not at this instruction (divergence)")
        raise Fault(WarpSyncError, f"{what}: lane {lane} of the member mask {int(member[i]):#010x} "
                                   f"{why}", thread=int(threads[i]))


_SHFL_SOURCE = {
    "up": lambda lane, b, lo, hi: (lane - b, lane - b >= hi),
    "down": lambda lane, b, lo, hi: (lane + b, lane + b <= hi),
    "bfly": lambda lane, b, lo, hi: (lane ^ b, (lane ^ b) <= hi),
    "idx": None,
}


@opcode("shfl")
def build_shfl(d, ins, mods):
    if not mods.flag("sync"):
        raise d.error("only shfl.sync is supported")
    mode = mods.take(*_SHFL_SOURCE)
    if mode is None:
        raise d.error("shfl.sync needs .up, .down, .bfly or .idx", PtxSyntaxError)
    t = mods.type()
    require(d, t.name == "b32", "shfl.sync moves .b32 values")
    dest, a, b, c, mask = d.operands(ins, 5)
    if isinstance(dest, syn.Pair):
        write_d, write_p = d.writer(dest.first, B32), d.writer(dest.second, PRED)
    else:
        write_d, write_p = d.writer(dest, B32), None
    read_a, read_b, read_c, read_mask = (d.reader(a, B32), d.reader(b, U32), d.reader(c, U32),
                                         d.reader(mask, U32))
    source = _SHFL_SOURCE[mode]

    def run(m, idx):
        threads, lane, first, bit, active = warp_lanes(m, idx)
        _check_members(m, "shfl.sync", threads, bit, active, read_mask(m, idx))
        bval = (read_b(m, idx) & np.uint32(31)).astype(np.int64)  # (a constant b or c stays a scalar)
        cval = np.asarray(read_c(m, idx)).astype(np.int64)
        segment = (cval >> 8) & 31
        lo = lane & segment
        hi = lo | (cval & 31 & ~segment)
        if source is None:
            j = lo | (bval & ~segment)
            ok = j <= hi
        else:
            j, ok = source(lane, bval, lo, hi)
        if np.count_nonzero(ok) < ok.size:
            j = np.where(ok, j, lane)
        inactive = (active >> j.astype(np.uint32)) & np.uint32(1) == 0
        if np.count_nonzero(inactive):
            i = int(np.flatnonzero(inactive)[0])
            raise Fault(WarpSyncError, f"shfl.sync reads lane {int(j[i])}, which is not active",
                        thread=int(threads[i]))
        write_d(m, idx, read_a(m, first + j))
        if write_p is not None:
            write_p(m, idx, ok)
    return plain(run)


@opcode("vote")
def build_vote(d, ins, mods):
    if not mods.flag("sync"):
        raise d.error("only vote.sync is supported")
    mode = mods.take("all", "any", "uni", "ballot")
    if mode is None:
        raise d.error("vote.sync needs .all, .any, .uni or .ballot", PtxSyntaxError)
    t = mods.type()
    require(d, t.name == ("b32" if mode == "ballot" else "pred"), f"vote.sync.{mode}.{t.name} is not valid")
    dest, a, mask = d.operands(ins, 3)
    write = d.writer(dest, t)
    read_a, read_mask = d.reader(a, PRED), d.reader(mask, U32)

    def run(m, idx):
        threads, lane, first, bit, active = warp_lanes(m, idx)
        n = len(threads)
        member = np.broadcast_to(read_mask(m, idx), (n,))
        _check_members(m, "vote.sync", threads, bit, active, member)
        votes = np.zeros(m.n, np.uint32)
        np.bitwise_or.at(votes, first, np.where(np.broadcast_to(read_a(m, idx), (n,)), bit, np.uint32(0)))
        ballot = votes[first] & member
        result = {"ballot": ballot, "any": ballot != 0, "all": ballot == member,
                  "uni": (ballot == 0) | (ballot == member)}[mode]
        write(m, idx, result)
    return plain(run)


@opcode("bar.warp.sync")
def build_warp_barrier(d, ins, mods):
    """`bar.warp.sync membermask`: the member lanes meet; their shared-memory
    accesses before it are ordered with those after it."""
    (mask,) = d.operands(ins, 1)
    read_mask = d.reader(mask, U32)

    def run(m, idx):
        threads, lane, first, bit, active = warp_lanes(m, idx)
        _check_members(m, "bar.warp.sync", threads, bit, active,
                       np.broadcast_to(read_mask(m, idx), (len(threads),)))
        if m.shared.races is not None:
            m.shared.races.warp_sync(m, threads)
    return plain(run)


_REDUX = {"add": np.add, "min": np.minimum, "max": np.maximum,
          "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@opcode("redux")
def build_redux(d, ins, mods):
    """`redux.sync.op.type d, a, membermask`: every member lane gets op over the members' a."""
    if not mods.flag("sync"):
        raise d.error("only redux.sync is supported")
    op = mods.take(*_REDUX)
    if op is None:
        raise d.error("redux.sync needs .add, .min, .max, .and, .or or .xor", PtxSyntaxError)
    t = mods.type()
    require(d, t.name in (("b32",) if op in ("and", "or", "xor") else ("u32", "s32")),
            f"redux.sync.{op}.{t.name} is not supported")
    dest, a, mask = d.operands(ins, 3)
    write, read_a, read_mask = d.writer(dest, t), d.reader(a, t), d.reader(mask, U32)
    combine = _REDUX[op]

    def run(m, idx):
        threads, lane, first, bit, active = warp_lanes(m, idx)
        n = len(threads)
        _check_members(m, "redux.sync", threads, bit, active, np.broadcast_to(read_mask(m, idx), (n,)))
        values = np.broadcast_to(read_a(m, idx), (n,))
        order = np.argsort(first, kind="stable")  # lanes of one warp together
        warps, starts = np.unique(first[order], return_index=True)
        totals = combine.reduceat(values[order], starts)
        write(m, idx, totals[np.searchsorted(warps, first)])
    return plain(run)


@opcode("elect")
def build_elect(d, ins, mods):
    """`elect.sync d|p, membermask`: the lowest member lane is the leader; d is its
    lane id in every member, p is true in the leader only."""
    if not mods.flag("sync"):
        raise d.error("elect needs .sync", PtxSyntaxError)
    dest, mask = d.operands(ins, 2)
    if isinstance(dest, syn.Pair):
        write_d, write_p = d.writer(dest.first, B32), d.writer(dest.second, PRED)
    else:
        write_d, write_p = d.writer(dest, B32), None
    read_mask = d.reader(mask, U32)

    def run(m, idx):
        threads, lane, first, bit, active = warp_lanes(m, idx)
        member = np.broadcast_to(read_mask(m, idx), (len(threads),))
        _check_members(m, "elect.sync", threads, bit, active, member)
        leader = np.frexp((member & -member.astype(np.int64)).astype(np.float64))[1].astype(np.uint32) - 1
        write_d(m, idx, leader)
        if write_p is not None:
            write_p(m, idx, lane == leader)
    return plain(run)


@opcode("activemask")
def build_activemask(d, ins, mods):
    t = mods.type()
    require(d, t.name == "b32", "activemask.b32")
    (dest,) = d.operands(ins, 1)
    write = d.writer(dest, t)
    return plain(lambda m, idx: write(m, idx, warp_lanes(m, idx)[4]))
