# Compiling autotune configurations in parallel, before the autotuner times them.
#
# The first call of a kernel for new sizes compiles every configuration and
# runs ptxas on each: pure Python plus one ptxas process per configuration,
# seconds each for large tiles.  `CompilePool.submit` hands one configuration
# (the source text, kernel name, configuration and target) to one of a few
# worker processes, which compiles it and runs ptxas on it, keeping the cubin
# (unless the kernel needs more threads or shared memory than the device has,
# or more registers than the compiler's estimate allows: the autotuner skips
# those without asking ptxas),
# and writes what it made to the disk cache under the keys the job names
# (the compiled kernel; ptxas's report and the cubin), so that the calling
# process, which times each configuration as soon as its result is in while
# the others still compile, only keeps the results in memory: the cache's
# JSON encoding, checksums and fsyncs run in the workers, side by side,
# instead of one after another between the caller's timings.
#
# A worker is `python -m phobos.launch.parallel`, started with the pool (on
# the first job, or earlier by `CompilePool.start`: loading a module whose
# first call will tune starts it, launcher.Module) and kept for the process:
# it reads one job per line on stdin and writes one result per line on
# stdout, both JSON (the cache's own payloads).  Being a fresh interpreter,
# it never shares the caller's CUDA context or threads, and never re-runs the
# caller's script the way multiprocessing's spawn does.  A configuration
# that fails in a worker comes back as None: the launcher then compiles it
# itself, to report the error as it would have.
#
# PHOBOS_COMPILE_WORKERS sets the number of processes (default: the machine's
# cores); 1 compiles in the calling process, one configuration after another.
# At PHOBOS_LOG=debug each result's arrival is logged with the seconds the
# worker spent compiling it and in ptxas (with the autotuner's lines, a
# timeline of a first call).
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import ptxcheck, toolchain
from ..compiler import compile_kernel, parse_source, pick_kernel, register_excess
from ..errors import PhobosError, PtxasTimeout
from . import cache

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompileJob:
    """One configuration to compile: enough to redo it in another process."""

    source: str
    filename: str
    kernel: str
    config: dict[str, int]
    arch: str
    assemble: bool  # also run ptxas, keeping its report and the cubin
    label: str  # what ptxas's diagnostics are labelled with
    options: dict[str, Any] = dataclasses.field(default_factory=dict)  # CodeOptions.keywords()
    max_threads: int | None = None  # the device's limits per CTA: a kernel past them, or whose registers the
    max_shared_bytes: int | None = None  # compiler's estimate rules out (autotune.screen's first test), is not
    max_registers: int | None = None  # assembled, since it cannot run anyway
    cache_root: str | None = None  # the disk cache the worker writes its results to (None: the caller writes them)
    compiled_key: dict[str, Any] | None = None  # the key of the compiled kernel there


def compile_workers() -> int:
    """PHOBOS_COMPILE_WORKERS, or the number of cores; 1 means no pool."""
    text = os.environ.get("PHOBOS_COMPILE_WORKERS", "").strip()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    return os.cpu_count() or 1


@functools.lru_cache(maxsize=8)
def _program(source: str, filename: str) -> Any:
    return parse_source(source, filename)


def run_job(job: CompileJob) -> dict[str, Any] | None:
    """Compile (and assemble) one configuration: cache payloads, or None when it fails; the payloads are
    written to the job's cache, and `stored` says so, when it names one."""
    result = _compiled_and_assembled(job)
    if result is not None and job.cache_root is not None and job.compiled_key is not None:
        _store(job, result)
    return result


def _store(job: CompileJob, result: dict[str, Any]) -> None:
    """Write a job's payloads to its disk cache, under the keys the launcher reads them by."""
    store = cache.cache_at(Path(job.cache_root))
    store.store(cache.COMPILED, job.compiled_key, result["compiled"])
    if "report" in result:
        key = cache.assembled_key(result["compiled"]["ptx"], result["compiled"]["arch"], toolchain.find_ptxas())
        if "cubin" in result:
            store.store(cache.CUBIN, key, result["cubin"])
        store.store(cache.PTXAS, key, result["report"])
    result["stored"] = True


def _compiled_and_assembled(job: CompileJob) -> dict[str, Any] | None:
    try:
        start = time.perf_counter()
        kernel = pick_kernel(_program(job.source, job.filename), job.kernel)
        compiled = compile_kernel(kernel, arch=job.arch, config=job.config, **job.options)
        seconds = {"compile": time.perf_counter() - start}  # what the worker spent, for the debug log
        result: dict[str, Any] = {"compiled": cache.encode_compiled(compiled), "seconds": seconds}
        too_big = (job.max_threads is not None and compiled.threads > job.max_threads) or \
            (job.max_shared_bytes is not None and compiled.shared_bytes > job.max_shared_bytes) or \
            (job.max_registers is not None and register_excess(compiled.registers_estimate, compiled.threads,
                                                               job.max_registers) is not None)
        if job.assemble and not too_big:
            try:
                report, cubin = ptxcheck.assemble(compiled.ptx, job.arch, name=job.label,
                                                  timeout=toolchain.ptxas_timeout())
            except PtxasTimeout as timeout:
                result["ptxas_timeout"] = timeout.message  # the launcher does not run it a second time
                return result
            seconds["ptxas"] = time.perf_counter() - start - seconds["compile"]
            result["report"] = cache.encode_report(report)
            if cubin is not None:
                result["cubin"] = cache.encode_cubin(cubin)
        return result
    except (PhobosError, RecursionError):
        return None


class CompilePool:
    """Worker processes for CompileJobs, each fed by a thread of this process; started on the first submit."""

    def __init__(self, workers: int):
        self.workers = workers
        self._jobs: queue.Queue[tuple[CompileJob, Future]] = queue.Queue()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start the worker processes (once): their interpreters start up while the caller still works out
        which jobs to submit, and in which order."""
        if not self._threads:
            for _ in range(self.workers):
                thread = threading.Thread(target=self._serve, name="phobos-compile", daemon=True)
                thread.start()
                self._threads.append(thread)

    def submit(self, job: CompileJob) -> Future:
        self.start()
        future: Future = Future()
        self._jobs.put((job, future))
        return future

    def _serve(self) -> None:
        try:
            worker: subprocess.Popen | None = _start_worker()
        except OSError:
            worker = None  # started again at the first job, where the error reaches its future
        while True:
            job, future = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                if worker is None or worker.poll() is not None:
                    worker = _start_worker()
                worker.stdin.write(json.dumps(dataclasses.asdict(job)) + "\n")
                worker.stdin.flush()
                line = worker.stdout.readline()
                result = json.loads(line) if line else None
                _log_arrival(job, result)
                future.set_result(result)
            except (OSError, ValueError) as error:
                future.set_exception(error)


def _log_arrival(job: CompileJob, result: dict[str, Any] | None) -> None:
    """At DEBUG (PHOBOS_LOG=debug), that a worker's result is in, and what the worker spent on it."""
    if not logger.isEnabledFor(logging.DEBUG):
        return
    seconds = result.get("seconds") if isinstance(result, dict) else None
    if not isinstance(seconds, dict):
        logger.debug("compiled in a worker: %s: failed there; it compiles in this process", job.label)
        return
    spent = ", ".join(f"{stage} {value:.3f} s" for stage, value in seconds.items() if isinstance(value, float))
    logger.debug("compiled in a worker: %s: %s", job.label, spent)


def _start_worker() -> subprocess.Popen:
    root = str(Path(__file__).resolve().parent.parent.parent)  # the directory that holds this phobos
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
           "PHOBOS_COMPILE_WORKERS": "1"}
    return subprocess.Popen([sys.executable, "-m", "phobos.launch.parallel"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


_pools: dict[int, CompilePool] = {}


def pool() -> CompilePool | None:
    """The process's pool of compile_workers() processes; None when that is 1."""
    workers = compile_workers()
    if workers < 2:
        return None
    if workers not in _pools:
        _pools[workers] = CompilePool(workers)
    return _pools[workers]


def serve() -> None:
    """A worker: one JSON CompileJob per line in, one JSON result (or null) per line out."""
    for line in sys.stdin:
        result = run_job(CompileJob(**json.loads(line)))
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
