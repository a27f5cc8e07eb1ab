# Running a launch's CTAs in forked worker processes, one share of the grid each.
#
# The emulator runs a batch of CTAs on one core (NumPy over all their threads,
# one instruction at a time).  Where the CTAs of a launch cannot communicate,
# the grid is cut into contiguous shares of whole thread-block clusters and
# each share runs in its own process, forked from the launching one (which
# runs the first share itself): the children see the launch's memory as it is
# at the fork, run their share through the same code, and hand back, through
# a shared anonymous mapping, their copy of global memory and a footprint of
# it - per byte, whether the share read it and whether it wrote it (from the
# global race detector's shadow state where it is on, the accesses that
# detector does not track - all of them where it is off - and the bytes whose
# contents changed).  The launch then merges them:
#
# - where no byte written by one share was touched by another, the shares did
#   not see each other, so the result is what one process gives, bit for bit:
#   each share's written bytes are copied into the launching process's memory;
# - where any share faulted (whatever the error, a race, a trap, an assertion)
#   or two shares touched a byte that one of them wrote (a race between CTAs
#   of different shares: the one-process run reports it as a GlobalMemoryRace
#   where races are checked), global memory is put back as it was before the
#   launch and the whole launch runs again in one process (in one process's
#   batches), which reports what it reports without workers, or leaves what
#   it leaves.  So every verdict, and the first fault where there are
#   several, is the one-process run's; a faulting launch pays for the shares'
#   run before it.
#
# Only kernels in which no instruction lets CTAs communicate run in shares (a
# global or generic atomic or reduction, a strong load or store outside shared
# memory, a fence or membar at gpu or system scope, a bulk reduction into
# global memory - such kernels may spin on another CTA's write, which a share
# without that CTA would never see - or a call, whose printf lines must come
# in the one-process order), over at most PARALLEL_HEAP_LIMIT of global
# memory.  A launch with less work than MIN_PARALLEL_WORK (threads times
# instructions) is not worth the fork and runs in one process, and by default
# a share has MIN_SHARE_THREADS threads at least.
from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import mmap
import os
import resource
import signal
import sys
import threading
import warnings
from collections.abc import Callable

import numpy as np

from ...errors import LaunchError
from .memory import WRITE

#: The environment variable that sets the number of worker processes (1: one process, always).
WORKERS_ENVIRONMENT = "PHOBOS_EMULATOR_WORKERS"
#: The most worker processes a launch uses by default (one per core, up to this many).
MAX_WORKERS = 8
#: The least work (threads of the grid times instructions of the kernel) that runs in shares: a fork
#: and its merge cost about 20 ms, the work of a 512-thread, 1000-instruction launch about 0.1 s.
MIN_PARALLEL_WORK = 1 << 18
#: The fewest threads a share of a launch gets by default: every share runs each instruction step at a
#: cost mostly fixed per step, so shares of fewer threads add more than they save (Triton's 256^3 matrix
#: product, 4 CTAs of 128 threads: 0.185 s in two shares against 0.174 s in one; its attention, 16 CTAs
#: of 128: 0.67 s in two against 0.89 s, on the 2-core machine of docs/emulator.md).
MIN_SHARE_THREADS = 1024
#: The most global memory (bytes of allocations) of a launch run in shares: each process keeps a copy
#: of it, a footprint and a copy for the merge.
PARALLEL_HEAP_LIMIT = 64 << 20

_SCOPE_WORDS = frozenset({"gpu", "sys", "gl"})
_STRONG_WORDS = frozenset({"relaxed", "acquire", "release", "volatile", "mmio"})
_HEADER = 64  # bytes ahead of a child's memory in its mapping: its outcome, steps, batches, CPU time
_DONE = 1


def communicating_op(ops) -> str | None:
    """The text of the first instruction of `ops` through which CTAs may communicate (see the module
    comment), or None."""
    for op in ops:
        words = op.text.split()
        opcode = (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).rstrip(";")
        parts = opcode.split(".")
        shared = any(p.startswith("shared") for p in parts)
        if (parts[0] == "call"
                or (parts[0] in ("atom", "red", "multimem") and not shared)
                or (parts[0] in ("ld", "st") and _STRONG_WORDS & set(parts) and not shared)
                or (parts[0] in ("fence", "membar") and _SCOPE_WORDS & set(parts))
                or (parts[:2] == ["cp", "reduce"] and "global" in parts)):
            return op.text
    return None


def worker_count(requested: int | None, ops, communicates: str | None, clusters: int, threads: int,
                 heap_bytes: int) -> int:
    """How many processes run a launch of `clusters` thread-block clusters, `threads` threads in all,
    over `heap_bytes` of global memory, of a kernel of instructions `ops`: `requested` (the launch's
    `workers`, else the environment's PHOBOS_EMULATOR_WORKERS, else one per core up to MAX_WORKERS for
    launches of at least MIN_PARALLEL_WORK, with MIN_SHARE_THREADS threads a share at least), at most one
    per cluster, and 1 where the global memory is
    above PARALLEL_HEAP_LIMIT, the kernel's CTAs may communicate (`communicates`: communicating_op's) or
    the system is not Linux (macOS's system libraries are not safe to use in a forked child; Windows
    does not fork)."""
    if requested is not None and (not isinstance(requested, (int, np.integer)) or isinstance(requested, bool)
                                  or requested < 1):
        raise LaunchError(f"workers must be a positive whole number of processes, got {requested!r}")
    if requested is None:
        setting = os.environ.get(WORKERS_ENVIRONMENT, "").strip()
        if setting:
            if not setting.isdigit() or int(setting) < 1:
                raise LaunchError(f"{WORKERS_ENVIRONMENT} must be a positive whole number of processes, "
                                  f"got {setting!r}")
            requested = int(setting)
        elif threads * len(ops) < MIN_PARALLEL_WORK:
            return 1
        else:
            requested = min(MAX_WORKERS, threads // MIN_SHARE_THREADS,
                            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if (requested <= 1 or clusters <= 1 or heap_bytes > PARALLEL_HEAP_LIMIT or communicates
            or not sys.platform.startswith("linux")):
        return 1
    return min(int(requested), clusters)


def shares(ctas: int, cluster_size: int, workers: int) -> list[tuple[int, int]]:
    """(first CTA, CTAs) of each worker's share: contiguous runs of whole clusters, as even as may be."""
    clusters = ctas // cluster_size
    bounds = [clusters * k // workers * cluster_size for k in range(workers + 1)]
    return [(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def run_shares(parts: list[tuple[int, int]], run: Callable[[int, int], tuple[int, int]], glob,
               footprint: Callable[[np.ndarray], np.ndarray]) -> tuple[int, int, float] | None:
    """Run `run(first, count)` (-> steps, batches) for each share, the first here and the others in
    forked children, over global memory `glob`; `footprint(pristine)` gives a process's READ/WRITE
    bits per heap byte after its share.  The summed (steps, batches) and the children's CPU seconds,
    with every share's writes in glob.data; or None, with glob.data as it was before, where a share
    faulted or two shares touched a byte one of them wrote: the caller then runs the launch in one
    process."""
    pristine = glob.data.copy()
    size = len(pristine)
    children, results, outcome = [], [], None
    try:
        gc.freeze()  # (the children's collections then leave the launching process's pages alone)
        _release_free_memory()
        for first, count in parts[1:]:
            children.append(_fork(first, count, run, glob, pristine, footprint, size))
        try:
            outcome = run(*parts[0])
            own = footprint(pristine)
        except Exception:  # the one-process run reports it (or what comes before it), without the children
            outcome = None
        if outcome is not None:
            for child in children:
                results.append(_result(child, size))
    except OSError:  # no more processes: one does it all
        outcome = None
    finally:
        gc.unfreeze()
        for pid, _, _ in children[len(results):]:  # (not needed, or interrupted: stop them)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _reap(pid)
        for _, region, pipe in children:
            os.close(pipe)
            region.close()
    if outcome is None or any(r is None for r in results):
        glob.data[:] = pristine
        return None
    flags = [own] + [f for _, f, _ in results]
    touched = np.zeros(size, np.int32)
    written = np.zeros(size, bool)
    for f in flags:
        touched += f != 0
        written |= (f & WRITE) != 0
    if (written & (touched > 1)).any():  # a byte written by one share and touched by another
        glob.data[:] = pristine
        return None
    steps, batches = outcome
    cpu = 0.0
    for data, f, (more_steps, more_batches, microseconds) in results:
        np.copyto(glob.data, data, where=(f & WRITE) != 0)
        steps += more_steps
        batches += more_batches
        cpu += microseconds / 1e6
    return steps, batches, cpu


@functools.cache
def _malloc_trim():
    """C's malloc_trim where the C library has one (glibc), else None."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def _release_free_memory() -> None:
    """Hand the C heap's free pages back to the system before a fork: the processes' new arrays then
    get fresh pages instead of copying the shared ones they reuse (about 5% of a share's time here)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _fork(first: int, count: int, run, glob, pristine, footprint, size: int):
    """Start the child that runs CTAs first.. first + count - 1: (pid, its mapping, the pipe it
    writes one byte to when its results are in the mapping)."""
    region = mmap.mmap(-1, _HEADER + 2 * size)
    done_r, done_w = os.pipe()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # (Python 3.12 on forking a threaded process)
            pid = os.fork()
    except OSError:
        os.close(done_r)
        os.close(done_w)
        region.close()
        raise
    if pid == 0:  # the child: NumPy only, then out without running the launching process's exit handlers
        try:
            os.close(done_r)
            gc.disable()
            steps, batches = run(first, count)
            header = np.frombuffer(region, np.int64, 4)
            np.frombuffer(region, np.uint8, size, _HEADER)[:] = glob.data
            np.frombuffer(region, np.uint8, size, _HEADER + size)[:] = footprint(pristine)
            used = resource.getrusage(resource.RUSAGE_SELF)
            header[1:] = steps, batches, round((used.ru_utime + used.ru_stime) * 1e6)
            header[0] = _DONE
        except BaseException:  # noqa: BLE001  (a fault: the launch runs again in one process)
            pass
        finally:
            os.write(done_w, b"x")
            os._exit(0)
    os.close(done_w)
    return pid, region, done_r


def _result(child, size: int):
    """A child's (memory, footprint, (steps, batches, CPU microseconds)) once it is done, or None where
    it faulted."""
    pid, region, pipe = child
    os.read(pipe, 1)
    threading.Thread(target=_reap, args=(pid,), daemon=True).start()  # (its exit takes a while)
    done, *counts = np.frombuffer(region, np.int64, 4).tolist()
    if done != _DONE:
        return None
    data, flags = (np.frombuffer(region, np.uint8, size, _HEADER + k * size).copy() for k in (0, 1))
    return data, flags, tuple(counts)


def _reap(pid: int) -> None:
    """Wait for a child to end (none to wait for where the program ignores SIGCHLD)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
