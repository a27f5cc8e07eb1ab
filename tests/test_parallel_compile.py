# The first call compiles its configurations in worker processes
# (phobos.launch.parallel), runs ptxas there and keeps the cubins; what comes
# back is what compiling in the calling process gives, and a configuration that
# fails in a worker is compiled again in the caller, so its error is the usual
# one.  The GPU is the recording FakeGpu.
from __future__ import annotations

import dataclasses
import logging
import re
import time
from concurrent.futures import Future

import numpy as np
import pytest

import phobos
from phobos.errors import ToolchainError
from phobos.launch import cache, launcher, parallel
from phobos.toolchain import find_ptxas

from .launcher_fakes import ADD4, AXPY, FakeGpu, forget_memory, random_vectors


@pytest.fixture
def two_workers(monkeypatch):
    """Two worker processes, and no compiled kernel in this process's memory (so the workers compile)."""
    monkeypatch.setenv("PHOBOS_COMPILE_WORKERS", "2")
    forget_memory(monkeypatch)


def test_configurations_compile_in_worker_processes_like_here(two_workers, monkeypatch, isolated_cache):
    monkeypatch.setattr(launcher, "compile_kernel", lambda *a, **k: pytest.fail("compiled in the caller"))
    gpu = FakeGpu({"BLOCK=512": 0.1})
    add = phobos.kernel(ADD4, mode=gpu)
    a, b = random_vectors(2000)
    add(a, b, np.empty_like(a))
    assert add.config == {"BLOCK": 512} and len(gpu.timed_configs()) >= 4
    monkeypatch.undo()
    here = phobos.compiler.compile(ADD4, config={"BLOCK": 512}, filename=add._kernel.module.filename)
    assert add.ptx == here.ptx
    try:
        find_ptxas()
    except ToolchainError:
        return
    assert len(list((isolated_cache / cache.CUBIN).iterdir())) == 4
    assert len(list((isolated_cache / cache.PTXAS).iterdir())) == 4


def test_a_worker_writes_what_it_made_to_the_cache_the_job_names(tmp_path):
    key = {"kernel": "add", "config": {"BLOCK": 128}}
    try:
        ptxas = find_ptxas()
    except ToolchainError:
        ptxas = None
    job = parallel.CompileJob(ADD4, "add.phobos", "add", {"BLOCK": 128}, "sm_90", ptxas is not None, "add",
                              cache_root=str(tmp_path), compiled_key=key)
    result = parallel.run_job(job)
    assert result["stored"] is True
    on_disk = cache.DiskCache(tmp_path)
    assert on_disk.load(cache.COMPILED, key) == result["compiled"]
    if ptxas is not None:
        assembled = cache.assembled_key(result["compiled"]["ptx"], "sm_90", ptxas)
        assert on_disk.load(cache.PTXAS, assembled) == result["report"]
        assert on_disk.load(cache.CUBIN, assembled) == result["cubin"]
    unnamed = parallel.run_job(parallel.CompileJob(ADD4, "add.phobos", "add", {"BLOCK": 256}, "sm_90", False, "add"))
    assert "stored" not in unnamed  # no cache named: the caller writes it


def test_the_caller_leaves_writing_the_workers_results_to_them(two_workers, monkeypatch, isolated_cache):
    written = []
    write = cache._write_atomically
    monkeypatch.setattr(cache, "_write_atomically", lambda path, text: (written.append(path), write(path, text)))
    add = phobos.kernel(ADD4, mode=FakeGpu())
    a, b = random_vectors(2000)
    add(a, b, np.empty_like(a))
    # the choice and the mark that the kernel was tuned (Module._start_compile_workers); the rest the workers wrote
    assert [path.parent.name for path in written] == [cache.AUTOTUNE, cache.TUNED]
    assert len(list((isolated_cache / cache.COMPILED).iterdir())) == 4
    forget_memory(monkeypatch)
    monkeypatch.setattr(launcher, "compile_kernel", lambda *a, **k: pytest.fail("compiled again"))
    again = phobos.kernel(ADD4, mode=FakeGpu())
    again(a, b, np.empty_like(a))  # a new process: every configuration and the choice read from disk
    assert again.config == add.config


def test_each_result_from_a_worker_is_logged_with_its_seconds_at_debug(two_workers, isolated_cache, caplog):
    caplog.set_level(logging.DEBUG, logger="phobos")
    add = phobos.kernel(ADD4, mode=FakeGpu())
    a, b = random_vectors(2000)
    add(a, b, np.empty_like(a))
    arrivals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiled in a worker")]
    assert sorted(re.search(r"BLOCK=(\d+)", line)[1] for line in arrivals) == ["1024", "128", "256", "512"]
    assert all(re.search(r": compile \d+\.\d{3} s", line) for line in arrivals)


def test_a_job_that_fails_in_a_worker_comes_back_empty():
    job = parallel.CompileJob(ADD4, "add.phobos", "sub", {"BLOCK": 128}, "sm_90", False, "sub")  # no such kernel
    assert parallel.run_job(job) is None
    good = parallel.run_job(parallel.CompileJob(ADD4, "add.phobos", "add", {"BLOCK": 128}, "sm_90", False, "add"))
    assert cache.decode_compiled(good["compiled"]).config == {"BLOCK": 128}


def test_the_number_of_workers(monkeypatch):
    monkeypatch.setenv("PHOBOS_COMPILE_WORKERS", "1")
    assert parallel.pool() is None
    monkeypatch.setenv("PHOBOS_COMPILE_WORKERS", "3")
    assert parallel.pool().workers == 3
    monkeypatch.setenv("PHOBOS_COMPILE_WORKERS", "many")
    assert parallel.compile_workers() >= 1


def test_a_kernel_past_the_devices_limits_is_not_assembled(two_workers, monkeypatch, isolated_cache):
    from .launcher_fakes import FAKE_DEVICE
    small = FAKE_DEVICE.__class__("Small GPU", (9, 0), 227 * 1024, 65536, 64)  # 64 threads: BLOCK 256 and up
    monkeypatch.setattr(launcher, "ptxas_assemble", lambda *a, **k: pytest.fail("assembled in the caller"))
    add = phobos.kernel(ADD4, mode=FakeGpu(props=small))
    a, b = random_vectors(2000)
    add(a, b, np.empty_like(a))
    assert add.config == {"BLOCK": 128} or add.config == {"BLOCK": 256}
    assert all("threads per block" in add.timings[f"BLOCK={block}"] for block in (512, 1024))
    try:
        find_ptxas()
    except ToolchainError:
        return
    assert len(list((isolated_cache / cache.PTXAS).iterdir())) == 2  # BLOCK 128 and 256 (64 threads)


def test_a_kernel_whose_registers_the_compilers_estimate_rules_out_is_not_assembled():
    try:
        find_ptxas()
    except ToolchainError:
        pytest.skip("no ptxas: nothing is assembled anyway")
    job = parallel.CompileJob(ADD4, "add.phobos", "add", {"BLOCK": 1024}, "sm_90", True, "add")
    assert "report" in parallel.run_job(job)
    compiled = cache.decode_compiled(parallel.run_job(job)["compiled"])
    few = compiled.threads * compiled.registers_estimate // 4  # a quarter of what the estimate asks for
    assert "report" not in parallel.run_job(dataclasses.replace(job, max_registers=few))  # ptxas never ran
    assert "report" in parallel.run_job(dataclasses.replace(job, max_registers=few * 4))


def test_configurations_are_timed_in_the_order_their_compiles_finish():
    from concurrent.futures import Future
    configs = [{"B": 1}, {"B": 2}, {"B": 3}, {"B": 4}]
    ahead = {(("B", 2),): Future(), (("B", 3),): Future(), (("B", 4),): Future()}  # {"B": 1} is compiled already
    order = launcher.completion_order(configs, ahead)
    assert next(order) == {"B": 1}
    ahead[(("B", 4),)].set_result(None)
    assert next(order) == {"B": 4}  # the last submitted finished first: timed first
    ahead[(("B", 2),)].set_result(None)
    ahead[(("B", 3),)].set_exception(OSError("worker gone"))  # handed over too: the caller compiles it itself
    assert sorted(c["B"] for c in order) == [2, 3]


def test_ties_go_to_the_earlier_configuration_whatever_the_timing_order():
    from phobos.launch import autotune
    configs = [{"B": 1}, {"B": 2}, {"B": 3}]
    times = {1: 2.0, 2: 1.0, 3: 1.0}
    result = autotune.tune("k", configs, lambda c: c, lambda c, timing: times[c["B"]], order=reversed(configs))
    assert result.config == {"B": 2} and set(result.timings) == {"B=1", "B=2", "B=3"}


SMALL_GEMM = """\
@autotune(TILE in [16, 32], TILE_K in [8, 32])
kernel mm(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N]) {
    var acc: tile<f32>[TILE, TILE] = 0.0
    for kt in range(0, K, TILE_K) {
        acc += dot(A[program_id(0) * TILE :+ TILE, kt :+ TILE_K], B[kt :+ TILE_K, program_id(1) * TILE :+ TILE])
    }
    C[program_id(0) * TILE :+ TILE, program_id(1) * TILE :+ TILE] = acc
}
"""


def test_the_costliest_configurations_are_submitted_first(two_workers, monkeypatch, isolated_cache):
    class RecordingPool:  # hands every job back undone: the caller compiles it itself
        started, submitted = 0, []

        def start(self):
            self.started += 1

        def submit(self, job):
            assert self.started, "jobs submitted before the workers were started"
            self.submitted.append(job.config)
            future = Future()
            future.set_result(None)
            return future

    workers = RecordingPool()
    monkeypatch.setattr(parallel, "pool", lambda: workers)
    mm = phobos.kernel(SMALL_GEMM, mode=FakeGpu())
    a = np.ones((64, 64), np.float32)
    mm(a, a, np.empty_like(a))
    info = mm._kernel.info
    work = [info.unrolled_work(config) for config in workers.submitted]
    assert len(work) == 4 and work == sorted(work, reverse=True)
    # not the order of the values' product (16 x 32 has the larger one): 32 x 8's accumulator tile, 4 times
    # the size, outweighs 16 x 32's larger operand tiles, for as many products per thread
    assert workers.submitted == [{"TILE": 32, "TILE_K": 32}, {"TILE": 32, "TILE_K": 8}, {"TILE": 16, "TILE_K": 32},
                                 {"TILE": 16, "TILE_K": 8}]
    assert mm.config in workers.submitted and len(mm.timings) == 4


def test_a_dots_products_count_in_the_unrolled_work(isolated_cache):
    info = phobos.kernel(SMALL_GEMM, mode="interpret")._kernel.info
    small, deep = info.unrolled_work({"TILE": 16, "TILE_K": 8}), info.unrolled_work({"TILE": 16, "TILE_K": 32})
    assert deep > 3 * small  # four times the products per thread, the rest of the kernel alike


def test_the_pool_starts_its_worker_processes_before_any_job(monkeypatch):
    started = []
    monkeypatch.setattr(parallel, "_start_worker", lambda: started.append(1) or None)
    workers = parallel.CompilePool(3)
    workers.start()
    deadline = time.monotonic() + 10
    while len(started) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(started) == 3
    workers.start()  # once
    time.sleep(0.05)
    assert len(started) == 3


def test_loading_a_module_starts_the_workers_where_its_first_call_will_tune(two_workers, monkeypatch, isolated_cache):
    """The workers' interpreters start up while the caller prepares its tensors, not in the first call; not where
    nothing will be tuned, nor once this build has tuned the kernel (its choices are then usually on disk)."""
    def started(source, mode) -> bool:
        monkeypatch.setattr(parallel, "_pools", {})  # a process that has not started its pool yet
        module = phobos.jit(source, mode=mode)
        return bool(parallel.pool()._threads), module
    assert started(AXPY, FakeGpu())[0] is False  # one configuration: nothing to tune
    assert started(ADD4, "interpret")[0] is False  # the CPU modes time nothing
    monkeypatch.setenv("PHOBOS_AUTOTUNE", "0")
    assert started(ADD4, FakeGpu())[0] is False
    monkeypatch.delenv("PHOBOS_AUTOTUNE")
    ready, module = started(ADD4, FakeGpu())
    assert ready is True
    a, b = random_vectors(2000)
    module.add(a, b, np.empty_like(a))
    assert started(ADD4, FakeGpu())[0] is False  # tuned once by this build: the next process reads its choice


def test_the_gpu_mode_is_foreseen_without_touching_cuda(monkeypatch):
    from phobos.run import backends
    monkeypatch.delenv("PHOBOS_MODE", raising=False)
    installed = {"pycuda": True}
    find_spec = backends.importlib.util.find_spec
    monkeypatch.setattr(backends.importlib.util, "find_spec",
                        lambda name, *rest: object() if installed.get(name) else find_spec(name, *rest))
    assert backends.tunes_likely(None) and backends.tunes_likely("gpu")
    assert not backends.tunes_likely("interpret") and not backends.tunes_likely("emulate")
    assert backends.tunes_likely(FakeGpu())
    monkeypatch.setenv("PHOBOS_MODE", "emulate")
    assert not backends.tunes_likely(None)
    monkeypatch.delenv("PHOBOS_MODE")
    installed["pycuda"] = False
    assert not backends.tunes_likely(None) and not backends.tunes_likely("gpu")


def test_each_cubin_is_decoded_once_however_often_the_tuner_launches_it(two_workers, monkeypatch, isolated_cache):
    try:
        find_ptxas()
    except ToolchainError:
        pytest.skip("needs ptxas: the cubins are ptxas's")
    decoded = []
    decode = cache.decode_cubin
    monkeypatch.setattr(cache, "decode_cubin", lambda payload: (decoded.append(1), decode(payload))[1])
    gpu = FakeGpu({"BLOCK=512": 0.1, "BLOCK=256": 0.11})  # two finalists, timed again
    add = phobos.kernel(ADD4, mode=gpu)
    a, b = random_vectors(2000)
    add(a, b, np.empty_like(a))
    add(a, b, np.empty_like(a))
    assert all(launch.cubin for launch in gpu.timed + gpu.runs)  # every launch had its cubin (sm_90 on a 9.0 GPU)
    assert len(gpu.timed) > 4 and len(decoded) == 4  # finalists timed again; one decoding per configuration
