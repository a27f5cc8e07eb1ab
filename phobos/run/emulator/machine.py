# Running decoded kernels: modules, launches, thread batches and the scheduler.
#
# A launch runs the CTAs of the grid in batches (as many as fit a memory
# budget, usually all of them; always whole thread-block clusters, whose CTAs
# run together) as one array of threads: thread index = cta * threads_per_cta
# + linear tid, CTAs in launch order, cluster by cluster (cluster.ClusterShape).
# Registers are NumPy arrays over those threads; shared memory is one row per
# CTA.  Where the CTAs cannot communicate, shares of the grid run side by side
# in forked worker processes, each in batches of its own (workers.py), with
# the results and verdicts of one process.
#
# Scheduling is the classic minimum-PC scheme.  The threads at the lowest
# program counter among the runnable ones form the active group and execute
# together; a branch that splits the group writes per-thread PCs and the next
# group is chosen again, so diverged paths run one after the other and merge
# where their PCs meet.  While a group is converged the per-thread PC array is
# not touched at all: the loop only compares the group's PC with the lowest PC
# of the threads left behind.
#
# Consecutive instructions whose handlers allow it (decode.Fusable: mma.sync,
# cvt of f32 pairs) run as one batch where none reads what an earlier one
# writes (fusion_table): operands of all read first, one computation, results
# written in order - what running them one after the other does.
#
# `bar.sync` parks the threads that reach it; once every live thread of the
# CTA (or the barrier's thread count) has arrived they go on, the CTA's
# shared-memory race records are cleared and its epoch (the barriers it has
# passed, which the global race detector compares) goes up.  Exited threads do not count.  A
# CTA whose remaining threads all wait at barriers that cannot complete is a
# deadlock, and threads released together from one barrier but coming from
# different `bar.sync` instructions are reported too (a barrier in divergent
# code).
#
# barrier.cluster completes a phase once every live thread of the cluster has
# arrived (cluster.ClusterBarrier), which also counts as a barrier of each of
# its CTAs.  A thread whose `mbarrier.try_wait`/`test_wait` finds its phase
# incomplete (or whose `setmaxnreg.inc` finds too few registers in the CTA's
# pool, or whose barrier.cluster.wait finds its phase open)
# sleeps (instead of spinning, which the minimum-PC scheme would never leave)
# until no thread can run any more; then, if some mbarrier phase completed
# (or some registers were released) meanwhile, the sleepers wake and test again.  The GPU may suspend a waiting
# thread just so; only a program that needs a failed test to go on (and
# arrive itself) deadlocks here, and is reported.  An `mbarrier.arrive` that
# completes a phase while threads sleep wakes them at once and lets them run
# before every other thread goes on: the arrival releases a buffer, and the
# woken producer refilling it first exposes a consumer that released it too
# early (see async_state).
#
# A launch that runs for more than a couple of seconds logs progress lines
# (phobos.log.Progress): the CTAs done of the total, the instruction steps,
# and, once a batch of CTAs is done, the time left at that pace.
from __future__ import annotations

import contextlib
import functools
import linecache
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import LaunchError, Note, SourceFile
from ...log import Progress
from ..tensor_map import TensorMap
from . import ops_arith, ops_bulk, ops_call, ops_cluster, ops_control, ops_memory, ops_tensor  # noqa: F401  (they fill the opcode table)
from . import syntax as syn
from .async_state import AsyncMma, BulkGroups, Mbarriers, RegisterPool
from .cluster import (CLUSTER_REGISTERS, ClusterBarrier, ClusterRaceDetector, ClusterShape, ClusterSharedSpace,
                      launch_shape, rank_bits)
from .decode import BARRIER, BRANCH, PLAIN, WAIT, Decoder, Program, literal
from .errors import BarrierError, Fault, PtxSyntaxError, TrapError
from .memory import (GLOBAL_RACE_LIMIT, AsyncCopies, GenericSpace, GlobalRaceDetector, GlobalSpace, ParamSpace,
                     RaceDetector, WindowSpace)
from .numerics import TENSOR_CORE_MODELS, TensorCoreModel
from .ops_control import NUM_BARRIERS
from .ptxtypes import TYPES
from .workers import communicating_op, run_shares, shares, worker_count

DEFAULT_MAX_STEPS = 10_000_000
DEFAULT_MAX_THREADS = 1 << 16
MEMORY_BUDGET = 512 << 20
# PARKED: at a bar.sync; SLEEP: in an mbarrier wait; YIELD: let woken sleepers run first
RUN, PARKED, DONE, SLEEP, YIELD = 0, 1, 2, 3, 4
FAR = np.iinfo(np.int64).max
#: Instruction steps between two looks at the clock for progress lines.
PROGRESS_STEPS = 256
#: The most instructions run as one batch (fusion_table).
MAX_FUSED = 256

logger = logging.getLogger(__name__)

# Shared memory per block (bytes) on the targets Phobos cares about.
SHARED_LIMITS = {"sm_70": 96 << 10, "sm_75": 64 << 10, "sm_80": 163 << 10, "sm_86": 99 << 10,
                 "sm_87": 163 << 10, "sm_89": 99 << 10, "sm_90": 227 << 10, "sm_90a": 227 << 10}


@dataclass(frozen=True)
class Pointer:
    """A pointer argument `offset` bytes into `array`: several pointers into one array share its one
    allocation (views of one buffer, as a GPU sees them).  `name` names the allocation in messages
    (default: the first parameter that points into it)."""

    array: np.ndarray
    offset: int = 0
    name: str | None = None


@dataclass
class LaunchStats:
    """What a launch did: instructions issued (one per active group and step), time taken."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    threads: int
    batches: int
    steps: int
    seconds: float
    workers: int = 1  # processes that ran the CTAs (workers.py; 1 also where a run in shares was repeated)
    worker_cpu_seconds: float = 0.0  # the CPU time of the processes forked to run shares of the grid


@dataclass
class _Done:
    """How far a launch's process has come, for its progress lines: the first CTA of the batch
    running, and the instruction steps of those before it."""

    first: int = 0
    steps: int = 0


@dataclass
class LaunchConfig:
    """Everything a batch needs that is fixed for the whole launch."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    params: np.ndarray
    glob: GlobalSpace
    shared_size: int
    dynamic_shared: int
    check_races: bool
    max_steps: int
    tensor_cores: TensorCoreModel
    progress: Callable[[int], None]  # called with the steps of the batch so far, every PROGRESS_STEPS
    cluster: ClusterShape
    output: Callable[[str], Any]  # where vprintf writes (standard output unless the launch names another)
    fusion: list[int]  # per instruction, how many from it may run as one batch (fusion_table)


def fusion_table(ops: list) -> list[int]:
    """For each instruction, how many instructions from it on the scheduler may run as one batch
    (1: alone), and so run as _run_fused runs them: first the batch's register instructions
    (HOISTABLE), in order, then its fusable ones together - reading all their operands, computing,
    writing all their results.  A batch starts with a fusable instruction and ends with one; all are
    unguarded; its fusable ones have one key, and none reads or writes a register that an earlier
    one writes, but for an accumulator chain (Fusable.chain: its accumulator is exactly an earlier
    one's result, `chain_links`); a register instruction reads no register that an earlier fusable
    one writes and writes none that it reads or writes.  So the batch does what running its
    instructions one by one does.  A batch may start anywhere in such a run, so a branch into the
    middle of one is no matter."""
    table = [1] * len(ops)
    for start in range(len(ops) - 1):
        part = _fusable_part(ops[start])
        if part is None:
            continue
        written, touched = set(ops[start].writes), set(ops[start].reads | ops[start].writes)
        results = {ops[start].writes}  # the registers of each fusable one's result
        end = last = start + 1
        while end < len(ops) and end - start < MAX_FUSED:
            op, nxt = ops[end], _fusable_part(ops[end])
            if nxt is not None and nxt.key == part.key:
                shared = written & (op.reads | op.writes)
                if shared and not (shared == nxt.chain and nxt.chain in results):
                    break
                written |= op.writes
                touched |= op.reads | op.writes
                results.add(op.writes)
                last = end + 1
            elif not (_hoistable(op) and written.isdisjoint(op.reads) and touched.isdisjoint(op.writes)):
                break
            end += 1
        table[start] = last - start
    return table


#: Instructions that only read and write registers (and ldmatrix, which reads shared memory, which
#: the fusable instructions do not touch): a batch may run them before the fusable ones around them,
#: unless they touch a register of an asynchronous instruction (decode._watched: wgmma's checks
#: would then see them out of order).
HOISTABLE = frozenset({"mov", "add", "sub", "mul", "mad", "fma", "neg", "abs", "min", "max", "and", "or", "xor",
                       "not", "shl", "shr", "selp", "setp", "cvt", "ldmatrix"})


def _fusable_part(op):
    return getattr(op.run, "fusable", None) if op.guard is None else None


def _hoistable(op) -> bool:
    return (op.kind == PLAIN and op.guard is None and op.text.split(".", 1)[0].split()[0] in HOISTABLE
            and not getattr(op.run, "watched", False))


def chain_links(ops: list) -> list[int | None]:
    """For the fusable instructions of a batch (fusion_table), in order: the index among them of the
    one whose result is its accumulator (the last earlier one whose result is its Fusable.chain
    registers), else None."""
    links, last_writer = [], {}
    for i, op in enumerate(ops):
        chain = op.run.fusable.chain
        links.append(last_writer.get(chain) if chain else None)
        last_writer[op.writes] = i
    return links


@contextlib.contextmanager
def _faulting_at(op):
    """A fault raised inside names `op`'s PC unless it names one already."""
    try:
        yield
    except Fault as fault:
        fault.pc = op.index if fault.pc is None else fault.pc
        raise


def _dims(value, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(x) < 1 for x in dims):
        raise LaunchError(f"{what} must be 1 to 3 positive sizes, got {value!r}")
    return tuple(int(x) for x in dims) + (1,) * (3 - len(dims))


class Machine:
    """The threads of one batch of CTAs: registers, memory, and the scheduler."""

    def __init__(self, program: Program, config: LaunchConfig, cta_first: int, cta_count: int):
        self.program = program
        self.config = config
        self.tpc = int(np.prod(config.block))
        self.cta_first = cta_first  # launch position of the batch's first CTA (cluster.ClusterShape)
        self.cluster = config.cluster
        self.n = n = cta_count * self.tpc
        self.all_threads = np.arange(n)  # the batch index of every thread
        self.all_threads.flags.writeable = False
        self.cta_of = np.repeat(np.arange(cta_count, dtype=np.int64), self.tpc)
        self.cta_xyz = self.cluster.coordinates(cta_first + np.arange(cta_count))  # grid coordinates per CTA
        ltid = np.tile(np.arange(self.tpc, dtype=np.int64), cta_count)
        self.ltid = ltid.astype(np.int32)
        self.lane = ltid % 32
        in_warp = np.minimum(32, self.tpc - (ltid - self.lane))
        self.warp_exists = np.where(in_warp == 32, 0xFFFFFFFF, (1 << in_warp) - 1).astype(np.uint32)
        self.regs = [np.zeros(n, dt) for dt in program.reg_dtypes]
        self.special = {name: self._special_register(name, ltid) for name in program.specials}
        self.params = config.params
        self.glob = config.glob
        self.shared = WindowSpace("shared", cta_count, config.shared_size, self.cta_of)
        self.shared.rank_bits = rank_bits(self.cluster, cta_first + self.cta_of)
        self.cluster_barrier = ClusterBarrier(n, self.tpc, self.cluster)
        self.cluster_shared = ClusterSharedSpace(self.shared, self.cluster, cta_count)
        if config.check_races and config.shared_size:
            self.shared.races = RaceDetector(cta_count, self.shared.stride, self.tpc)
            if self.cluster.size > 1:
                self.shared.cluster_races = self.cluster_shared.races = ClusterRaceDetector(
                    len(self.shared.data), self.shared.stride, self.tpc, self.cluster_barrier)
        self.local = WindowSpace("local", n, program.local_size, np.arange(n, dtype=np.int64))
        self.param = ParamSpace(config.params, program.param_size)
        self.spaces = {"global": self.glob, "const": self.glob, "shared": self.shared, "local": self.local,
                       "shared::cluster": self.cluster_shared,
                       "generic": GenericSpace(self.glob, self.cluster_shared, self.local, self.param)}
        self.async_copies = AsyncCopies(n)
        self.epoch = np.zeros(cta_count, np.int32)  # whole-CTA barriers passed, per CTA
        self.async_mma = AsyncMma(n)
        self.bulk_groups = BulkGroups(n)
        self.mbarriers = Mbarriers(n)
        self.registers = RegisterPool(program.directives, [op.text for op in program.ops], cta_count, self.tpc)
        self.woken_at = 0  # wake-up events when the sleepers were last woken
        self.steps = 0

    # -- special registers and descriptions
    def _special_register(self, name: str, ltid: np.ndarray) -> np.ndarray:
        bx, by, _ = self.config.block
        lane = self.lane
        axis = {"x": 0, "y": 1, "z": 2}
        if name in CLUSTER_REGISTERS:
            value = self.cluster.register(name, self.cta_xyz[self.cta_of], self.cta_first + self.cta_of)
            if value.dtype == bool:
                return value
        elif name.startswith("%tid."):
            value = (ltid % bx, (ltid // bx) % by, ltid // (bx * by))[axis[name[-1]]]
        elif name.startswith("%ctaid."):
            value = self.cta_xyz[self.cta_of, axis[name[-1]]]
        elif name.startswith(("%ntid.", "%nctaid.")):
            dims = self.config.block if name.startswith("%ntid") else self.config.grid
            value = np.full(self.n, dims[axis[name[-1]]])
        else:
            value = {
                "%laneid": lambda: lane,
                "%warpid": lambda: ltid // 32,
                "%nwarpid": lambda: np.full(self.n, -(-self.tpc // 32)),
                "%dynamic_smem_size": lambda: np.full(self.n, self.config.dynamic_shared),
                "%total_smem_size": lambda: np.full(self.n, self.config.shared_size),
                "%lanemask_eq": lambda: 1 << lane,
                "%lanemask_lt": lambda: (1 << lane) - 1,
                "%lanemask_le": lambda: (2 << lane) - 1,
                "%lanemask_gt": lambda: 0xFFFFFFFF ^ ((2 << lane) - 1),
                "%lanemask_ge": lambda: 0xFFFFFFFF ^ ((1 << lane) - 1),
            }[name]()
        return np.asarray(value, np.int64).astype(np.uint32)

    def describe_local(self, ltid: int) -> str:
        bx, by, _ = self.config.block
        return f"({ltid % bx},{ltid // bx % by},{ltid // (bx * by)})"

    def describe_thread(self, t: int) -> str:
        """Thread `t` of the batch (or, outside it, of the launch position it would have)."""
        return f"thread {self.describe_local(t % self.tpc)} of CTA {self.describe_cta(t // self.tpc)}"

    def describe_cta(self, cta: int) -> str:
        """CTA `cta` of the batch: its coordinates in the grid (and rank in its cluster)."""
        return self.cluster.describe(self.cta_first + cta)

    def describe_shared(self, offset: int) -> str:
        for var in reversed(self.program.shared_vars):
            if var.offset <= offset:
                return f"{var.name}+{offset - var.offset} (shared offset {offset:#x})"
        return f"shared offset {offset:#x}"

    def describe_shared_at(self, flat: int) -> str:
        """A byte of the batch's shared memory (its flat offset), with its CTA where CTAs share it."""
        where = self.describe_shared(flat % self.shared.stride)
        return where if self.cluster.size == 1 else f"{where} of CTA {self.describe_cta(flat // self.shared.stride)}"

    def alive(self) -> np.ndarray:
        """Which threads of the batch have not exited."""
        return self.status != DONE

    def ptx_position(self, pc: int) -> str:
        return self.program.position(pc)

    # -- the scheduler
    def run(self) -> None:
        """Run every thread of the batch to its end."""
        ops = self.program.ops
        fusion = self.config.fusion
        regs = self.regs
        self.pc = np.zeros(self.n, np.int64)
        self.status = np.zeros(self.n, np.int8)
        self.bar_id = np.zeros(self.n, np.int64)
        self.bar_count = np.zeros(self.n, np.int64)
        self.bar_pc = np.zeros(self.n, np.int64)
        group, gpc, other = None, 0, FAR
        limit = self.config.max_steps
        steps = 0
        try:
            while True:
                if gpc >= other:
                    self._park(group, gpc)
                    group, gpc, other = self._schedule()
                    if gpc < 0:
                        break
                op = ops[gpc]
                steps += 1
                if steps > limit:
                    raise Fault(TrapError, f"more than {limit} instruction steps: an endless loop?")
                if steps % PROGRESS_STEPS == 0:
                    self.config.progress(steps)
                if op.kind == PLAIN:
                    if fusion[gpc] > 1 and other - gpc > 1:  # a batch, up to the threads left behind
                        count = min(fusion[gpc], other - gpc)
                        self._run_fused(gpc, count, group)
                        if (steps + count - 1) // PROGRESS_STEPS > steps // PROGRESS_STEPS:
                            self.config.progress(steps + count - 1)
                        steps += count - 1
                        gpc += count
                        continue
                    if op.guard is None:
                        op.run(self, group)
                    else:
                        g = regs[op.guard] if group is None else regs[op.guard][group]
                        if op.negated:
                            g = ~g
                        if g.all():
                            op.run(self, group)
                        elif g.any():
                            op.run(self, np.flatnonzero(g) if group is None else group[g])
                    gpc += 1
                    continue
                if op.guard is None:
                    g = None
                else:
                    g = regs[op.guard] if group is None else regs[op.guard][group]
                    if op.negated:
                        g = ~g
                    if not g.any():
                        gpc += 1
                        continue
                if g is None or g.all():  # the whole group takes it
                    if op.kind == BRANCH:
                        gpc = op.target
                        continue
                    lanes = self._all(group)
                    if op.kind == BARRIER:
                        self._arrive(op, lanes)
                    elif op.kind == WAIT:
                        self._wait(op, lanes)
                    else:
                        self._exit(lanes)
                else:
                    lanes = self._all(group)
                    taken, rest = lanes[g], lanes[~g]
                    if op.kind == BRANCH and op.run is not None:
                        op.run(self, taken, rest)  # bra.uni: the split must not cut a warp
                    self.pc[rest] = gpc + 1
                    if op.kind == BRANCH:
                        self.pc[taken] = op.target
                    elif op.kind == BARRIER:
                        self._arrive(op, taken)
                    elif op.kind == WAIT:
                        self._wait(op, taken)
                    else:
                        self._exit(taken)
                group, gpc, other = self._schedule()
                if gpc < 0:
                    break
        except Fault as fault:
            raise self._error(fault, gpc) from None
        finally:
            self.steps = steps

    def _all(self, group):
        return np.arange(self.n) if group is None else group

    def _run_fused(self, pc: int, count: int, group) -> None:
        """Run the `count` instructions from `pc` as one batch (see fusion_table): the register
        instructions first, then the fusable ones together."""
        fused, hoisted = [], []
        key = _fusable_part(self.program.ops[pc]).key  # (a register instruction may be fusable with others)
        for op in self.program.ops[pc: pc + count]:
            (fused if getattr(_fusable_part(op), "key", None) == key else hoisted).append(op)
        for op in hoisted:
            with _faulting_at(op):
                op.run(self, group)
        operands = []
        for op in fused:
            with _faulting_at(op):
                operands.append(op.run.fusable.inputs(self, group))
        parts = [op.run.fusable for op in fused]
        for part, result in zip(parts, parts[0].compute(self, operands, chain_links(fused))):
            if result is not None:
                part.outputs(self, group, result)

    def _park(self, group, pc: int) -> None:
        """Record the PC of the active group's threads (None: all threads)."""
        if group is None:
            self.pc.fill(pc)
        else:
            self.pc[group] = pc

    def _exit(self, threads) -> None:
        """Retire threads, completing their outstanding asynchronous operations; a barrier.cluster
        that waited only for them completes, and a CTA whose threads have all exited is gone."""
        self.status[threads] = DONE
        self.async_copies.complete(self, threads, None)
        self.async_mma.complete(self, threads, None)
        self.bulk_groups.complete(self, threads, None)
        self.cluster_barrier.complete(self)
        if self.cluster.size > 1:
            rows = np.unique(self.cta_of[threads])
            gone = rows[(self.status.reshape(-1, self.tpc)[rows] == DONE).all(axis=1)]
            self.cluster_shared.check_exit(self, gone)
            self.cluster_shared.exited[gone] = True

    def _arrive(self, op, threads) -> None:
        ids, counts = op.run(self, threads)
        self.pc[threads] = op.index + 1
        self.status[threads] = PARKED
        self.bar_id[threads] = ids
        self.bar_count[threads] = counts
        self.bar_pc[threads] = op.index

    def _events(self) -> int:
        """How many things that sleepers wait for have happened: mbarrier phases completed,
        registers returned to a pool."""
        return self.mbarriers.completions + self.registers.releases + self.cluster_barrier.completions

    def _wait(self, op, threads) -> None:
        """A blocking test, an arrival or a setmaxnreg: the lanes it lets go move on, the others
        sleep here; if it completed an mbarrier phase (or released registers), the sleepers run
        before everyone else."""
        before = self._events()
        ready = op.run(self, threads)
        self.pc[threads] = np.where(ready, op.index + 1, op.index)
        self.status[threads[~ready]] = SLEEP
        sleeping = self.status == SLEEP
        if self._events() != before and sleeping.any():
            self.woken_at = self._events()
            self.status[self.status == RUN] = YIELD
            self.status[sleeping] = RUN

    def _wake(self) -> bool:
        """Resume the yielding threads, and wake the sleepers if an mbarrier phase
        completed (or registers were released) since they last woke; True if any thread can run."""
        yielded = self.status == YIELD
        self.status[yielded] = RUN
        if self._events() == self.woken_at:
            return bool(yielded.any())
        self.woken_at = self._events()
        sleeping = self.status == SLEEP
        self.status[sleeping] = RUN
        return bool(sleeping.any() or yielded.any())

    def _schedule(self):
        """Pick the next active group: (lanes or None for all, its PC, lowest PC of the others).
        The PC is -1 when every thread has finished."""
        runnable = self.status == RUN
        if not runnable.any():
            if not self._release() and not self._wake():
                if (self.status == DONE).all():
                    return None, -1, FAR
                raise self._deadlock()
            runnable = self.status == RUN
        candidates = np.where(runnable, self.pc, FAR)
        gpc = int(candidates.min())
        here = candidates == gpc
        if here.all():
            return None, gpc, FAR
        group = np.flatnonzero(here)
        others = candidates[~here]
        return group, gpc, int(others.min())

    def _release(self) -> bool:
        """Let go the threads whose barrier is complete; True if any were."""
        waiting = np.flatnonzero(self.status == PARKED)
        if not waiting.size:
            return False
        ncta = self.n // self.tpc
        cta = self.cta_of[waiting]
        live = np.bincount(self.cta_of[self.status != DONE], minlength=ncta)
        key = cta * NUM_BARRIERS + self.bar_id[waiting]
        arrived = np.bincount(key, minlength=ncta * NUM_BARRIERS)[key]
        whole_cta = self.bar_count[waiting] == 0
        expected = np.where(whole_cta, live[cta], self.bar_count[waiting])
        ready = arrived >= expected
        if not ready.any():
            return False
        released = waiting[ready]
        at = self.bar_pc[released]
        if at.min() != at.max():
            self._check_same_barrier(released, key[ready], at)
        self.status[released] = RUN
        if whole_cta[ready].any():
            self.passed_cta_barrier(np.unique(cta[ready & whole_cta]))
        return True

    def passed_cta_barrier(self, rows: np.ndarray) -> None:
        """Every thread of the CTAs `rows` passed a barrier (bar.sync, barrier.cluster): their
        accesses before it are ordered before those after it."""
        if not len(rows):
            return
        self.epoch[rows] += 1
        rows = None if len(rows) == len(self.epoch) else rows
        self.mbarriers.share_observations(self, rows, self.tpc)
        if self.shared.races is not None:
            self.shared.races.reset(rows)

    def _check_same_barrier(self, released, keys, at) -> None:
        lo = np.full(keys.max() + 1, FAR)
        hi = np.full(keys.max() + 1, -1)
        np.minimum.at(lo, keys, at)
        np.maximum.at(hi, keys, at)
        bad = np.flatnonzero(lo[keys] != hi[keys])
        if bad.size:
            i = bad[0]
            first, second = int(lo[keys[i]]), int(hi[keys[i]])
            raise Fault(BarrierError,
                        f"threads of one CTA were released from barrier {int(self.bar_id[released[i]])} "
                        f"having reached it at different bar.sync instructions "
                        f"({self.ptx_position(first)} and {self.ptx_position(second)}): "
                        f"a barrier in divergent code",
                        thread=int(released[i]), pc=first,
                        related=[(second, "the other bar.sync")])

    def _deadlock(self) -> Fault:
        sleeping = np.flatnonzero(self.status == SLEEP)
        in_setmaxnreg = [int(t) for t in sleeping if self.program.ops[int(self.pc[t])].text.startswith("setmaxnreg")]
        in_cluster_wait = [int(t) for t in sleeping
                           if self.program.ops[int(self.pc[t])].text.startswith("barrier.cluster.wait")]
        if in_cluster_wait:
            t = in_cluster_wait[0]
            return Fault(BarrierError,
                         f"deadlock: {self.cluster_barrier.describe_waiting(self, np.array(in_cluster_wait))}, "
                         f"and no thread can run{self._other_waits(sleeping, in_cluster_wait)}",
                         thread=t, pc=int(self.pc[t]))
        if in_setmaxnreg:
            t = in_setmaxnreg[0]
            return Fault(BarrierError,
                         f"deadlock: {len(in_setmaxnreg)} threads wait in setmaxnreg.inc for registers that the "
                         f"CTA's pool can never supply ({self.registers.describe(int(self.cta_of[t]))}): the "
                         f"counts of the warpgroups add up to more than the registers the CTA started with",
                         thread=t, pc=int(self.pc[t]))
        if sleeping.size:
            t = int(sleeping[0])
            return Fault(BarrierError,
                         f"deadlock: {sleeping.size} threads wait for mbarrier phases that can no longer "
                         f"complete ({self._sleepers_barriers(sleeping)}) and no other thread can run",
                         thread=t, pc=int(self.pc[t]))
        waiting = np.flatnonzero(self.status == PARKED)
        t = int(waiting[0])
        cta = self.cta_of[t]
        mine = waiting[self.cta_of[waiting] == cta]
        live = int(np.count_nonzero((self.cta_of == cta) & (self.status != DONE)))
        summary = ", ".join(
            f"{int(np.count_nonzero(self.bar_id[mine] == b))} at barrier {b}"
            for b in np.unique(self.bar_id[mine]))
        want = int(self.bar_count[t]) or live
        return Fault(BarrierError,
                     f"barrier deadlock: the {live} live threads of the CTA wait ({summary}) and "
                     f"barrier {int(self.bar_id[t])} expects {want}",
                     thread=t, pc=int(self.bar_pc[t]))

    def _other_waits(self, sleeping, in_cluster_wait) -> str:
        """The other sleepers and parked threads, for a barrier.cluster deadlock."""
        others = np.setdiff1d(sleeping, in_cluster_wait)
        parked = np.flatnonzero(self.status == PARKED)
        parts = []
        if others.size:
            parts.append(f"{others.size} threads wait for mbarrier phases ({self._sleepers_barriers(others)})")
        if parked.size:
            parts.append(f"{parked.size} threads wait at bar.sync ({self.ptx_position(int(self.bar_pc[parked[0]]))})")
        return "; " + "; ".join(parts) if parts else ""

    def _sleepers_barriers(self, sleeping) -> str:
        """The mbarriers that sleeping threads wait on, described."""
        ops = self.program.ops
        described = []
        for pc in np.unique(self.pc[sleeping])[:3]:
            described.append(f"at {self.ptx_position(int(pc))}: `{ops[int(pc)].text}`")
        bars = [self.mbarriers.describe(self, number) for number in range(len(self.mbarriers.where))][:4]
        return "; ".join(described + bars)

    def _error(self, fault: Fault, pc: int):
        ops = self.program.ops
        pc = fault.pc if fault.pc is not None else pc
        op = ops[pc]
        who = f" [{self.describe_thread(fault.thread)}]" if fault.thread is not None else ""
        notes = [Note(f"{self.ptx_position(other)}: {what}: `{ops[other].text}`", ops[other].loc)
                 for other, what in fault.related]
        return fault.kind(f"{self.ptx_position(pc)}: {fault.message}{who} (in `{op.text}`)",
                          loc=op.loc, notes=notes, ptx_file=self.program.ptx_name, ptx_line=op.line)


class Kernel:
    """One `.entry` of a module, decoded and ready to launch."""

    def __init__(self, program: Program, module: "Module"):
        self.program = program
        self.module = module
        self.name = program.name
        self.fusion = fusion_table(program.ops)
        self.communicates = communicating_op(program.ops)  # (an instruction that keeps it to one process)

    @property
    def params(self) -> list[tuple[str, str]]:
        """(name, PTX type) of each parameter, in order ('bytes' for byte arrays)."""
        return [(p.name, p.type) for p, _ in self.program.params]

    def launch(self, grid, block, args, shared_bytes: int = 0, source_text: str | None = None, *,
               check_races: bool = True, max_steps: int = DEFAULT_MAX_STEPS,
               max_threads: int = DEFAULT_MAX_THREADS, tensor_cores: str = "hopper",
               cluster=None, output: Callable[[str], Any] | None = None,
               workers: int | None = None) -> LaunchStats:
        """Run the kernel on `grid` x `block` threads; see `launch` for the arguments."""
        if tensor_cores not in TENSOR_CORE_MODELS:
            raise LaunchError(f"tensor_cores must be one of {', '.join(TENSOR_CORE_MODELS)}, got {tensor_cores!r}")
        grid, block = _dims(grid, "grid"), _dims(block, "block")
        tpc = int(np.prod(block))
        self._check_config(grid, block, tpc, shared_bytes)
        clusters = launch_shape(self.name, self.program.directives, grid,
                                None if cluster is None else _dims(cluster, "cluster"))
        prog = self.program
        if source_text is not None and prog.files:
            SourceFile.register(prog.files[0], source_text)
        glob = GlobalSpace()
        for var in self.module.variables:
            glob.allocate(var.data, var.name, var.address)
        params, arrays = self._pack_arguments(list(args), glob)
        glob.seal()
        total = grid[0] * grid[1] * grid[2]
        tracked = check_races and len(glob.data) <= GLOBAL_RACE_LIMIT and total * tpc < 1 << 31
        processes = worker_count(workers, prog.ops, self.communicates, total // clusters.size, total * tpc,
                                 len(glob.data))
        shared_size = prog.shared_size(shared_bytes)
        races = (24 + (40 if clusters.size > 1 else 0)) if check_races else 0
        per_cta = tpc * (sum(dt.itemsize for dt in prog.reg_dtypes) + prog.local_size + 64) \
            + shared_size * (1 + races)

        def batch_of(side_by_side: int) -> int:
            """CTAs per batch where `side_by_side` processes run batches, each within its part of the budget."""
            batch = max(1, min(total, max_threads // tpc, MEMORY_BUDGET // side_by_side // max(per_cta, 1)))
            return max(clusters.size, batch // clusters.size * clusters.size)  # the CTAs of a cluster run together

        batch = batch_of(processes)
        at_once = "" if total == 1 else ", all at once" if batch >= total else f", {batch} at a time"
        spread = f" in {processes} processes" if processes > 1 else ""
        progress = Progress(logger, f"emulating {self.name} ({total} CTAs of {tpc} threads{at_once}{spread})",
                            total, "CTAs done")
        done = _Done()
        launcher = os.getpid()  # (the processes running other shares keep quiet)
        config = LaunchConfig(grid, block, params, glob, shared_size, shared_bytes, check_races, max_steps,
                              TENSOR_CORE_MODELS[tensor_cores],
                              lambda batch_steps: os.getpid() == launcher and progress.update(
                                  done.first, f"{done.steps + batch_steps} instruction steps"),
                              clusters, output or sys.stdout.write, self.fusion)

        def run(first: int, count: int, side_by_side: int = 1) -> tuple[int, int]:
            """Run CTAs first.. first + count - 1 batch by batch, global races tracked from here (by each
            process of its own, one of `side_by_side`: workers.py): (instruction steps, batches)."""
            batch = batch_of(side_by_side)
            if tracked:
                glob.races = GlobalRaceDetector(len(glob.data), tpc)
            glob.untracked = np.zeros(len(glob.data), np.uint8) if side_by_side > 1 else None
            done.steps = 0
            for at in range(first, first + count, batch):
                done.first = at
                machine = Machine(prog, config, at, min(batch, first + count - at))
                try:
                    machine.run()
                finally:
                    done.steps += machine.steps
            return done.steps, -(-count // batch)

        start = time.perf_counter()
        with np.errstate(all="ignore"):
            in_shares = run_shares(shares(total, clusters.size, processes),
                                   functools.partial(run, side_by_side=processes), glob, glob.footprint) \
                if processes > 1 else None
            if in_shares is None:  # (where it faulted, or shares raced, the one-process run reports it)
                processes, worker_cpu = 1, 0.0
                steps, batches = run(0, total)
            else:
                steps, batches, worker_cpu = in_shares
        progress.finish(f"{steps} instruction steps")
        self._copy_back(arrays, glob)
        for var in self.module.variables:
            var.data[:] = glob.contents(var.address)
        return LaunchStats(self.name, grid, block, total * tpc, batches, steps, time.perf_counter() - start,
                           processes, worker_cpu)

    def _check_config(self, grid, block, tpc: int, shared_bytes: int) -> None:
        prog = self.program
        if tpc > 1024 or block[2] > 64:
            raise LaunchError(f"block {block} has more than 1024 threads (or z > 64)")
        if grid[1] > 65535 or grid[2] > 65535 or grid[0] >= 1 << 31:
            raise LaunchError(f"grid {grid} is too large")
        if not isinstance(shared_bytes, (int, np.integer)) or shared_bytes < 0:
            raise LaunchError(f"shared_bytes must be a non-negative integer, got {shared_bytes!r}")
        req = prog.directives.get("reqntid")
        if req is not None and tuple(req) + (1,) * (3 - len(req)) != block:
            raise LaunchError(f"{self.name} requires blocks of {req} threads (.reqntid), launched with {block}")
        most = prog.directives.get("maxntid")
        if most is not None and tpc > int(np.prod(most)):
            raise LaunchError(f"{self.name} allows at most {most} threads per block (.maxntid), "
                              f"launched with {block}")
        limit = next((SHARED_LIMITS[t] for t in self.module.target if t in SHARED_LIMITS), None)
        if limit is not None and prog.shared_size(shared_bytes) > limit:
            raise LaunchError(f"{self.name} needs {prog.shared_size(shared_bytes)} bytes of shared memory; "
                              f"{self.module.target[0]} has {limit}")

    def _pack_arguments(self, args: list, glob: GlobalSpace):
        """The parameter buffer, and the (array, address) pairs to copy back after the run."""
        prog = self.program
        if len(args) != len(prog.params):
            raise LaunchError(f"{self.name} takes {len(prog.params)} arguments, got {len(args)}")
        buffer = np.zeros(prog.param_size + 8, np.uint8)
        allocated: dict[int, int] = {}
        arrays = []
        for (param, offset), value in zip(prog.params, args):
            raw = self._param_bytes(param, value, glob, allocated, arrays)
            buffer[offset: offset + param.size] = raw
        return buffer, arrays

    def _param_bytes(self, param: syn.Param, value, glob, allocated, arrays) -> np.ndarray:
        where = f"argument {param.name} of {self.name}"
        if param.type == "bytes" and isinstance(value, TensorMap):
            return self._tensor_map_bytes(param, value, glob, allocated, arrays)
        if param.type == "bytes":
            raw = np.frombuffer(bytes(memoryview(value).cast("B")), np.uint8)
            if len(raw) != param.size:
                raise LaunchError(f"{where} needs {param.size} bytes, got {len(raw)}")
            return raw
        t = TYPES[param.type]
        if isinstance(value, Pointer) or (isinstance(value, np.ndarray) and value.ndim > 0):
            if t.bits != 64 or t.is_float:
                raise LaunchError(f"{where} is .{t.name}; an array needs a .u64 pointer parameter")
            value = self._address(value, param.name, glob, allocated, arrays)
        elif value is None and t.bits == 64 and not t.is_float:
            value = 0
        if t.is_float:
            if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
                raise LaunchError(f"{where} is .{t.name}, got {value!r}")
            return np.array([value], t.dtype).view(np.uint8)
        if t.kind == "pred" or not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise LaunchError(f"{where} is .{t.name}, got {value!r}")
        low = -(1 << (t.bits - 1)) if t.kind != "u" else 0
        high = (1 << t.bits) - 1 if t.kind != "s" else (1 << (t.bits - 1)) - 1
        if not low <= int(value) <= high:
            raise LaunchError(f"{where} is .{t.name}; {int(value)} is out of range")
        return np.array([int(value) & ((1 << t.bits) - 1)], t.unsigned).view(np.uint8)

    def _tensor_map_bytes(self, param: syn.Param, tmap: TensorMap, glob, allocated, arrays) -> np.ndarray:
        """The emulator's encoding of a tensor map over a NumPy array (allocated like an
        array argument, and copied back after the run)."""
        where = f"argument {param.name} of {self.name}"
        if not isinstance(tmap.tensor, (np.ndarray, Pointer)):
            raise LaunchError(f"{where}: in the emulator a TensorMap describes a NumPy array, "
                              f"not {type(tmap.tensor).__name__}")
        if param.size != 128:
            raise LaunchError(f"{where}: a tensor map parameter is .b8 [128], not {param.size} bytes")
        address = self._address(tmap.tensor, param.name, glob, allocated, arrays)
        try:
            raw = tmap.emulator_bytes(address)
        except ValueError as problem:
            raise LaunchError(f"{where}: {problem}") from None
        return np.frombuffer(raw, np.uint8)

    def _address(self, value, name: str, glob, allocated, arrays) -> int:
        """The address of an array argument (or of a Pointer into one): each array is copied into global
        memory once, however many arguments name it, and copied back after the run."""
        array, offset = (value.array, value.offset) if isinstance(value, Pointer) else (value, 0)
        if array.dtype.hasobject:
            raise LaunchError(f"argument {name} of {self.name}: arrays of Python objects cannot be copied to the device")
        address = allocated.get(id(array))
        if address is None:
            label = value.name if isinstance(value, Pointer) and value.name else name
            address = allocated[id(array)] = glob.allocate(np.ascontiguousarray(array), label)
            arrays.append((array, address, label))
        return address + offset

    def _copy_back(self, arrays, glob: GlobalSpace) -> None:
        for array, address, name in arrays:
            data = glob.contents(address)
            if np.array_equal(data, np.ascontiguousarray(array).reshape(-1).view(np.uint8)):
                continue
            if not array.flags.writeable:
                raise LaunchError(f"{self.name} wrote to the read-only array passed as {name}")
            np.copyto(array, data.view(array.dtype).reshape(array.shape))


@dataclass
class ModuleVariable:
    """A module-level .global or .const variable: its address in every launch and its
    current contents (kept from one launch to the next, as device globals are)."""

    name: str
    space: str
    address: int
    data: np.ndarray


class Module:
    """A parsed and decoded PTX module; launch its kernels any number of times."""

    def __init__(self, ptx_text: str, name: str = "<ptx>"):
        tree = syn.parse(ptx_text, name)
        lines = ptx_text.splitlines()
        self.name = name
        self.target = tree.target
        self.files = list(tree.files.values())  # the source files its `.file` directives name
        self.variables = self._place_variables(tree)
        addresses = {v.name: (v.space, v.address) for v in self.variables}
        self.kernels = {e.name: Kernel(Decoder(tree, e, name, lines, addresses).decode(), self)
                        for e in tree.entries}

    def _place_variables(self, tree: syn.PtxModuleAst) -> list[ModuleVariable]:
        """Initial contents and addresses of the .global/.const variables: they are the
        first allocations of every launch, so their addresses are known now."""
        placed = []
        layout = GlobalSpace()
        for var in tree.variables:
            if var.space not in ("global", "const"):
                continue
            t = TYPES[var.elem]
            data = np.zeros(var.size, np.uint8)
            try:
                values = np.array([literal(v, t) for v in var.init], t.dtype)
            except ValueError as problem:
                raise PtxSyntaxError(f"{self.name}:{var.line}: {problem} (initialising {var.name})",
                                     ptx_file=self.name, ptx_line=var.line) from None
            data[: values.nbytes] = values.view(np.uint8)
            placed.append(ModuleVariable(var.name, var.space, layout.allocate(data, var.name), data))
        return placed

    def register_sources(self, *folders: str, stand_ins: tuple[str, ...] = ()) -> list[str]:
        """Give errors the text of the source files the `.file` directives name (as named, else relative
        to one of `folders`, else one of `stand_ins` with the same base name: the file a cached PTX
        compiled elsewhere came from), so that they quote the source line at fault; the names of those
        found."""
        found = []
        for name in self.files:
            candidates = [name] + [os.path.join(folder, name) for folder in folders if not os.path.isabs(name)]
            candidates += [path for path in stand_ins if os.path.basename(path) == os.path.basename(name)]
            for path in candidates:
                lines = linecache.getlines(path)
                if lines:
                    SourceFile.register(name, "".join(lines))
                    found.append(name)
                    break
        return found

    def kernel(self, name: str) -> Kernel:
        if name not in self.kernels:
            raise LaunchError(f"{self.name} has no kernel {name!r} (it has {', '.join(self.kernels) or 'none'})")
        return self.kernels[name]

    def launch(self, kernel: str, grid, block, args, shared_bytes: int = 0,
               source_text: str | None = None, **options) -> LaunchStats:
        return self.kernel(kernel).launch(grid, block, args, shared_bytes, source_text, **options)


@functools.lru_cache(maxsize=32)
def load_module(ptx_text: str, name: str = "<ptx>") -> Module:
    """Parse and decode a module once; later calls with the same text reuse it."""
    return Module(ptx_text, name)


def launch(ptx_text: str, kernel: str, grid, block, args, shared_bytes: int = 0,
           source_text: str | None = None, *, name: str = "<ptx>", **options) -> LaunchStats:
    """Run `kernel` of the PTX module `ptx_text` on the CPU.

    grid, block: 1 to 3 sizes.  args: one per `.entry` parameter, in order -
    a NumPy array for a pointer parameter (copied into emulated global memory,
    and copied back in place after the run), or a `Pointer` into one (pointers
    into the same array share its allocation), a number for a scalar parameter.
    shared_bytes: the dynamic shared memory size.  source_text: the Phobos
    source named by the module's `.file`, so that errors can quote it.
    name: the PTX file name used in messages.  options: check_races (default
    True), max_steps, max_threads (see `Kernel.launch`), tensor_cores (the
    numeric model of mma/wgmma: "hopper", the default, or "ampere"; see
    numerics.TensorCoreModel), cluster (1 to 3 sizes: the thread-block
    cluster shape, as the launch attribute gives it; by default the kernel's
    .reqnctapercluster, else clusters of one CTA), output (what printf's lines
    are written with; default sys.stdout.write), workers (how many processes
    may run the CTAs, in shares of the grid - 1: one process; by default
    PHOBOS_EMULATOR_WORKERS, else one per core for launches large enough; see
    workers.py: the results and verdicts are those of one process).  A
    `.b8 [128]` parameter takes a phobos.run.tensor_map.TensorMap over a
    NumPy array (or a Pointer).
    """
    return load_module(ptx_text, name).launch(kernel, grid, block, args, shared_bytes, source_text, **options)
