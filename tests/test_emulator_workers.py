# A launch's CTAs run in shares in forked worker processes (phobos/run/emulator/workers.py) where
# they cannot communicate: the memory they leave and every verdict - a fault in any share, a race
# between CTAs of different shares, the first of several faults - are those of one process.
import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from phobos.errors import LaunchError
from phobos.run.emulator import GlobalMemoryRace, MemoryFault, MisalignedAddress, Module
from phobos.run.emulator import workers
from phobos.run.emulator.memory import BULK_READ, BULK_WRITE, READ, WRITE, GlobalSpace

from .emulator_support import assert_valid_ptx

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker processes run on Linux only")

HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"
GRID, BLOCK = 4, 32  # two shares of two CTAs with two workers


def kernel(*lines: str) -> str:
    """A kernel over u32 arrays x (%rd1) and out (%rd2): %r1 the thread id, %r2 the CTA id, %r3 the thread's
    index in the grid, %rd3 its word of out; the lines run before each thread stores x[%r3] * 3 + %r2 there."""
    body = "\n".join([
        ".reg .pred %p<4>;", ".reg .b32 %r<12>;", ".reg .b64 %rd<8>;",
        "ld.param.u64 %rd1, [x_p];", "cvta.to.global.u64 %rd1, %rd1;",
        "ld.param.u64 %rd2, [out_p];", "cvta.to.global.u64 %rd2, %rd2;",
        "mov.u32 %r1, %tid.x;", "mov.u32 %r2, %ctaid.x;", "mov.u32 %r4, %ntid.x;", "mad.lo.u32 %r3, %r2, %r4, %r1;",
        "mul.wide.u32 %rd4, %r3, 4;", "add.s64 %rd5, %rd1, %rd4;", "add.s64 %rd3, %rd2, %rd4;",
        *lines,
        "ld.global.u32 %r5, [%rd5];", "mul.lo.u32 %r5, %r5, 3;", "add.u32 %r5, %r5, %r2;", "st.global.u32 [%rd3], %r5;",
        "ret;"])
    text = f"{HEADER}\n.visible .entry k(.param .u64 x_p, .param .u64 out_p)\n{{\n{body}\n}}\n"
    assert_valid_ptx(text)
    return text


def launch(text: str, processes: int, **options):
    """(out, x, stats) of a launch of `text` over GRID x BLOCK threads with `processes` workers."""
    x = np.arange(GRID * BLOCK + 8, dtype=np.uint32) * 7 + 1
    out = np.zeros(GRID * BLOCK + 8, np.uint32)
    stats = Module(text).launch("k", GRID, BLOCK, [x, out], workers=processes, **options)
    return out, x, stats


def verdict(text: str, processes: int):
    """The error (type, message) of the launch with `processes` workers."""
    with pytest.raises(Exception) as info:
        launch(text, processes)
    return type(info.value), str(info.value)


@pytest.fixture
def shares_run(monkeypatch):
    """What each run in shares returned (None: it was run again in one process)."""
    outcomes = []
    run_shares = workers.run_shares

    def recorded(*args):
        outcomes.append(run_shares(*args))
        return outcomes[-1]
    monkeypatch.setattr("phobos.run.emulator.machine.run_shares", recorded)
    return outcomes


def test_shares_leave_the_same_memory_bit_for_bit(shares_run):
    text = kernel()
    one, x1, stats1 = launch(text, 1)
    two, x2, stats2 = launch(text, 2)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(x1, x2)
    expected = (np.arange(GRID * BLOCK) * 7 + 1) * 3 + np.arange(GRID * BLOCK) // BLOCK
    np.testing.assert_array_equal(two[:GRID * BLOCK], expected)
    assert (stats1.workers, stats2.workers) == (1, 2) and len(shares_run) == 1 and shares_run[0] is not None
    assert stats2.steps >= stats1.steps and stats2.worker_cpu_seconds > 0


def test_the_shares_are_whole_clusters_as_even_as_may_be():
    assert workers.shares(16, 1, 2) == [(0, 8), (8, 8)]
    assert workers.shares(5, 1, 2) == [(0, 2), (2, 3)]
    assert workers.shares(12, 2, 4) == [(0, 2), (2, 4), (6, 2), (8, 4)]
    assert workers.shares(4, 2, 3) == [(0, 2), (2, 2)]  # (no share without a cluster)


# CTA 0's thread 0 accesses x[0], and so does CTA 3 (in the other share with two workers)
CTA_0 = ("setp.eq.u32 %p1, %r3, 0;",)
CTA_3 = (f"setp.eq.u32 %p2, %r3, {3 * BLOCK};",)


@pytest.mark.parametrize("lines, error", [
    (CTA_0 + CTA_3 + ("@%p1 st.global.u32 [%rd1], %r1;", "@%p2 ld.global.u32 %r6, [%rd1];"), GlobalMemoryRace),
    (CTA_0 + CTA_3 + ("@%p2 st.global.u32 [%rd1], %r1;", "@%p1 ld.global.u32 %r6, [%rd1];"), GlobalMemoryRace),
    # both store the value x[128] holds: nothing changes, and still they race
    (CTA_0 + CTA_3 + ("mov.u32 %r6, 897;", "@%p1 st.global.u32 [%rd1+512], %r6;",
                      "@%p2 st.global.u32 [%rd1+512], %r6;"), GlobalMemoryRace),
    # thread 0 of every CTA writes x[130] in one instruction (the one-process run says so, with all CTAs in
    # one batch: run again, it has one process's batches)
    (("setp.eq.u32 %p1, %r1, 0;", "@%p1 st.global.u32 [%rd1+520], %r2;"), GlobalMemoryRace),
    # a read through the non-coherent cache and a write (the read's window of another CTA comes first)
    (CTA_0 + CTA_3 + ("@%p1 ld.global.nc.u32 %r6, [%rd1+520];", "@%p2 st.global.u32 [%rd1+520], %r1;"),
     GlobalMemoryRace),
])
def test_a_race_between_ctas_of_different_shares_is_the_one_process_verdict(lines, error, shares_run):
    text = kernel(*lines)
    one = verdict(text, 1)
    assert one[0] is error
    assert verdict(text, 2) == one
    assert shares_run == [None]  # (the shares ran, found the race and ran the launch again in one process)
    if "@%p1 st.global.u32 [%rd1+520], %r2;" in text:
        assert "write it in the same instruction" in one[1]


@pytest.mark.parametrize("lines, error", [
    # an out-of-bounds load in CTA 3 only: the second share
    (("setp.eq.u32 %p1, %r2, 3;", "@%p1 ld.global.u32 %r6, [%rd1+100000];"), MemoryFault),
    # faults in both shares, of different kinds: the one the one-process run meets first (CTA 3's, in the
    # second share, where the first share meets a misaligned load of CTA 1)
    (("setp.eq.u32 %p1, %r2, 3;", "@%p1 ld.global.u32 %r6, [%rd1+100000];",
      "setp.eq.u32 %p2, %r2, 1;", "@%p2 ld.global.u32 %r6, [%rd1+2];"), MemoryFault),
    (("setp.eq.u32 %p2, %r2, 1;", "@%p2 ld.global.u32 %r6, [%rd1+2];",
      "setp.eq.u32 %p1, %r2, 3;", "@%p1 ld.global.u32 %r6, [%rd1+100000];"), MisalignedAddress),
])
def test_a_fault_in_any_share_is_the_one_process_verdict(lines, error, shares_run):
    text = kernel(*lines)
    one = verdict(text, 1)
    assert one[0] is error
    assert verdict(text, 2) == one
    assert shares_run == [None]


def test_kernels_whose_ctas_may_communicate_run_in_one_process():
    text = kernel("atom.global.add.u32 %r6, [%rd1+512], 1;")
    _, x, stats = launch(text, 2)
    assert stats.workers == 1 and x[128] == 897 + GRID * BLOCK
    op = lambda text: SimpleNamespace(text=text)  # noqa: E731
    for text in ["atom.global.add.u32 %r1, [%rd1], 1;", "@%p1 red.add.u32 [%rd1], 1;",
                 "st.relaxed.gpu.global.u32 [%rd1], 1;", "ld.acquire.gpu.u32 %r1, [%rd1];", "fence.acq_rel.gpu;",
                 "membar.gl;", "call.uni vprintf, (%rd1, %rd2);",
                 "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [%r1], 16;"]:
        assert workers.communicating_op([op("mov.u32 %r1, 0;"), op(text)]) == text
    for text in ["atom.shared.add.u32 %r1, [%r2], 1;", "ld.volatile.shared.u32 %r1, [%r2];",
                 "fence.proxy.async.shared::cta;", "membar.cta;", "fence.acq_rel.cta;", "ld.global.nc.u32 %r1, [%rd1];",
                 "st.global.v4.b32 [%rd1], {%r1, %r2, %r3, %r4};"]:
        assert workers.communicating_op([op(text)]) is None


def test_small_launches_and_launches_over_much_memory_run_in_one_process(monkeypatch):
    monkeypatch.delenv(workers.WORKERS_ENVIRONMENT, raising=False)
    text = kernel()
    assert launch(text, None)[2].workers == 1  # 128 threads of 30 instructions: below MIN_PARALLEL_WORK
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert workers.worker_count(None, [None] * 1000, None, 16, 2048, 1 << 20) == min(workers.MAX_WORKERS, cores, 2)
    assert workers.worker_count(None, [None] * 1000, None, 16, 16384, 1 << 20) == min(workers.MAX_WORKERS, cores)
    # four CTAs of 128 threads: enough work, but shares of 256 threads cost more than they save
    assert workers.worker_count(None, [None] * 2000, None, 4, 512, 1 << 20) == 1
    assert workers.worker_count(8, [None] * 10, None, 3, 96, 1 << 20) == 3  # (at most one per cluster)
    assert workers.worker_count(8, [None] * 10, "membar.gl;", 3, 96, 1 << 20) == 1
    assert workers.worker_count(8, [None] * 10, None, 3, 96, workers.PARALLEL_HEAP_LIMIT + 1) == 1


def test_without_race_checks_the_shares_footprints_still_find_what_they_share(shares_run):
    # with the race detectors off, every global access is in the footprint: shares that touch what another
    # writes run again in one process, whose result, racy as it is, is what one process gives
    text = kernel()
    one, _, stats1 = launch(text, 1, check_races=False)
    two, _, stats2 = launch(text, 2, check_races=False)
    np.testing.assert_array_equal(one, two)
    assert stats2.workers == 2 and shares_run[-1] is not None
    racy = kernel(*CTA_0, *CTA_3, "@%p2 st.global.u32 [%rd1], %r2;")  # CTA 3 writes x[0] and CTA 0 reads it
    one, x1, _ = launch(racy, 1, check_races=False)
    two, x2, stats = launch(racy, 2, check_races=False)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(x1, x2)
    assert stats.workers == 1 and shares_run[-1] is None


def test_the_environment_sets_the_workers(monkeypatch):
    text = kernel()
    monkeypatch.setenv(workers.WORKERS_ENVIRONMENT, "2")
    assert launch(text, None)[2].workers == 2
    assert launch(text, 1)[2].workers == 1  # (the launch's own choice comes first)
    monkeypatch.setenv(workers.WORKERS_ENVIRONMENT, "1")
    assert launch(text, None)[2].workers == 1
    monkeypatch.setenv(workers.WORKERS_ENVIRONMENT, "two")
    with pytest.raises(LaunchError, match="PHOBOS_EMULATOR_WORKERS must be a positive whole number of processes, "
                                          "got 'two'"):
        launch(text, None)
    with pytest.raises(LaunchError, match="workers must be a positive whole number of processes, got 0"):
        launch(text, 0)


def test_accesses_the_race_detector_does_not_track_are_in_the_footprint():
    glob = GlobalSpace()
    address = glob.allocate(np.zeros(64, np.uint8), "x")
    glob.seal()
    glob.untracked = np.zeros(len(glob.data), np.uint8)
    glob.locate(None, None, np.array([address + 8], np.uint64), 4, BULK_WRITE, 0)
    glob.locate(None, None, np.array([address + 16, address + 32], np.uint64), np.array([2, 4], np.uint64),
                BULK_READ, 0, align=2)
    glob.locate(None, None, np.array([address + 42], np.uint64), 4, BULK_READ, 0, align=2)
    glob.locate(None, None, np.array([address + 8], np.uint64), 8, BULK_READ, 0)
    expected = np.zeros(len(glob.data), np.uint8)
    expected[8:16] = READ
    expected[8:12] |= WRITE
    expected[16:18] = expected[32:36] = expected[42:46] = READ
    np.testing.assert_array_equal(glob.untracked, expected)


@pytest.mark.parametrize("name, arch", [("matmul", "sm_80"), ("matmul", "sm_90a"), ("attention", "sm_90a")])
def test_tritons_kernels_in_shares_are_bit_identical(name, arch):
    pytest.importorskip("triton", reason="needs Triton")
    pytest.importorskip("torch", reason="needs torch")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_emulator_triton as bench
    import phobos.triton
    kernel_fn, grid, arguments, keywords, out, reference = bench._case(name)
    results = []
    for processes in (1, 2):
        out[...] = 0
        launched = phobos.triton.emulate(kernel_fn, arch=arch, workers=processes)[grid](*arguments, **keywords)
        assert launched.stats.workers == processes
        results.append(out.copy())
    np.testing.assert_array_equal(results[0].view(np.uint16), results[1].view(np.uint16))
    assert np.abs(results[1].astype(np.float32) - reference).max() < 0.1


def test_a_launch_run_again_has_the_batches_of_one_process(monkeypatch, shares_run):
    def batches(budget: int, processes: int) -> int:
        monkeypatch.setattr("phobos.run.emulator.machine.MEMORY_BUDGET", budget)
        return launch(kernel(), processes)[2].batches

    low, high = 1, 1 << 24  # the least memory budget that fits all four CTAs in one process's batch
    while high - low > 1:
        low, high = (low, (low + high) // 2) if batches((low + high) // 2, 1) == 1 else ((low + high) // 2, high)
    assert batches(high, 1) == 1 and batches(high, 2) == 2  # (two processes have half of it each: 2 CTAs)
    # thread 0 of CTAs 0 and 3 write x[130] in one instruction: one process, all CTAs in one batch, says so
    racy = kernel(*CTA_0, *CTA_3, "or.pred %p3, %p1, %p2;", "@%p3 st.global.u32 [%rd1+520], %r2;")
    one = verdict(racy, 1)
    assert "write it in the same instruction" in one[1]
    assert verdict(racy, 2) == one and shares_run[-1] is None  # (run again with one process's batches)


def test_where_no_process_can_be_forked_one_does_it_all(monkeypatch, shares_run):
    def refused():
        raise OSError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(os, "fork", refused)
    one, _, _ = launch(kernel(), 1)
    two, _, stats = launch(kernel(), 2)
    np.testing.assert_array_equal(one, two)
    assert stats.workers == 1 and shares_run == [None]


def test_a_program_that_ignores_its_children_still_gets_its_results(monkeypatch, shares_run):
    import signal
    import threading
    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)  # (what the threads reaping children raise)
    before = set(threading.enumerate())
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # (children are then reaped by the system)
    try:
        one, _, _ = launch(kernel(), 1)
        two, _, stats = launch(kernel(), 2)
        for thread in set(threading.enumerate()) - before:
            thread.join(10)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    np.testing.assert_array_equal(one, two)
    assert stats.workers == 2 and shares_run[-1] is not None and failures == []
