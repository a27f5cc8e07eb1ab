# The worker side of the tile DAG: a Dask worker plugin, and the functions
# the session submits as Dask tasks.
#
#   PhobosWorker   registered by the session, so every worker of the cluster
#                  (also one that joins or restarts later) has, for each mode
#                  a session asks for, where kernels run (what was asked; for
#                  None what Phobos picks: the GPU if there is one) and
#                  what blocks are (numpy arrays, or DeviceBlocks in one CUDA
#                  context: the primary context of the worker's device 0,
#                  made current in whichever thread runs a task or moves a
#                  block); the kernels of each source, parsed and checked once
#                  (phobos.jit, keyed by the source's hash; the runtime keeps
#                  their PTX loaded once per process, keyed by the PTX text);
#                  and a log of the seconds each task's kernel took
#   run_task       runs one TaskSpec on the writers' results; any failure is a
#                  TaskError naming the kernel, call, grid slice and worker,
#                  with program ids the call's (execute.in_the_call)
#   make_block     a block of a tensor, from data or from a function
#   calibrate      times a task's launch on zeros (the granularity rule)
#   task_log       a worker's log (through Client.run), for benchmarks
#   noop           nothing, to measure Dask's overhead per task
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from dask.sizeof import sizeof
from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from ..errors import ToolchainError
from ..launch.cache import text_digest
from ..launch.launcher import KernelFunction, Module, jit
from ..run import runtime
from ..run.backends import default_mode
from .blocks import DeviceArrays, DeviceBlock, HostArrays
from .cluster import CPU_MODES
from .execute import TaskError, TaskSpec, describe_failure, in_the_call, run_spec

PLUGIN_NAME = "phobos"


@sizeof.register(DeviceBlock)
def _device_block_bytes(block: DeviceBlock) -> int:
    """What Dask's scheduler weighs when it decides whether to move a block or the task."""
    return block.nbytes


class PhobosWorker(WorkerPlugin):
    """Per worker process: the arrays of each mode (one CUDA context on a GPU), kernels, a task log."""

    name = PLUGIN_NAME
    idempotent = True

    def setup(self, worker: Any) -> None:
        self.address = worker.address
        self.modules: dict[tuple[str, str, str], Module] = {}
        self.kernels: dict[tuple, KernelFunction] = {}
        self.log: list[tuple[str, float]] = []
        self.modes: dict[str | None, tuple[str, Any]] = {}
        self.gpu: DeviceArrays | None = None

    def arrays(self, requested: str | None) -> tuple[str, Any]:
        """The mode kernels run in for a session's `requested` mode, and the arrays its blocks are."""
        if requested not in self.modes:
            self.modes[requested] = self._choose(requested)
        return self.modes[requested]

    def _choose(self, requested: str | None) -> tuple[str, Any]:
        mode = requested if requested is not None else default_mode()  # what mode=None means in Phobos
        if mode in CPU_MODES:
            return mode, HostArrays()
        if self.gpu is None:
            available, why = runtime.gpu_available()  # makes the primary context of device 0 current here
            if not available:
                raise ToolchainError(f"mode 'gpu' was asked for, but this worker has no GPU: {why}")
            import pycuda.driver as driver
            self.gpu = DeviceArrays(driver, driver.Device(0).retain_primary_context())
        return "gpu", self.gpu

    def kernel(self, spec: TaskSpec, mode: str) -> Callable[..., None]:
        """The kernel callable of a spec: the source's module (checked once), configured, with its grid."""
        digest = text_digest(spec.source)
        key = (digest, spec.filename, mode, spec.kernel, tuple(sorted(spec.forced.items())), spec.grid)
        if key not in self.kernels:
            module_key = (digest, spec.filename, mode)
            if module_key not in self.modules:
                self.modules[module_key] = jit(spec.source, spec.filename, mode=mode)
            function = self.modules[module_key].kernels[spec.kernel]
            if spec.forced:
                function = function.configure(**spec.forced)
            self.kernels[key] = function[spec.grid] if spec.grid is not None else function
        return self.kernels[key]


def plugin() -> PhobosWorker:
    """The plugin of the worker running the calling task."""
    worker = get_worker()
    found = worker.plugins.get(PLUGIN_NAME)
    if found is None:
        raise TaskError("a phobos.dag task", worker.address, "the worker has no phobos plugin "
                        "(phobos.dag.Session registers it; was the client used without one?)")
    return found


def run_task(spec: TaskSpec, *inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Run one task; its result is the tuple of blocks it wrote."""
    here = plugin()
    kernel = None
    try:
        mode, arrays = here.arrays(spec.mode)
        kernel = here.kernel(spec, mode)
        with arrays.current():
            outputs, seconds = run_spec(spec, inputs, arrays, kernel)
    except Exception as error:
        config = getattr(kernel, "config", None)
        raise TaskError(spec.label, here.address, in_the_call(describe_failure(error), spec, config)) from None
    here.log.append((spec.label, seconds))
    return outputs


def calibrate(spec: TaskSpec) -> float:
    """Seconds of the task's launch on zeros, timed on the second run (the first compiles, tunes, loads)."""
    here = plugin()
    empty = spec.without_data()
    try:
        mode, arrays = here.arrays(spec.mode)
        with arrays.current():
            run_spec(empty, (), arrays, here.kernel(spec, mode))
            return run_spec(empty, (), arrays, here.kernel(spec, mode))[1]
    except Exception as error:
        raise TaskError(f"timing {spec.label}", here.address, describe_failure(error)) from None


def make_block(label: str, mode: str | None, shape: tuple[int, ...], dtype: str,
               data: np.ndarray | Callable[[tuple], Any], index: tuple[slice, ...]) -> tuple[Any]:
    """One block of a tensor: `data` itself, or `data(index)`; checked against the shape and type."""
    here = plugin()
    try:
        array = np.asarray(data(index) if callable(data) else data)
        if array.shape != tuple(shape) or array.dtype != np.dtype(dtype):
            raise ValueError(f"expected a {dtype} array of shape {tuple(shape)}, got {array.dtype} {array.shape}")
        _, arrays = here.arrays(mode)
        with arrays.current():
            return (arrays.adopt(array),)
    except Exception as error:
        raise TaskError(label, here.address, describe_failure(error)) from None


def task_log(dask_worker: Any) -> list[tuple[str, float]]:
    """(label, kernel seconds) of every task this worker ran, oldest first (for client.run)."""
    found = dask_worker.plugins.get(PLUGIN_NAME)
    return list(found.log) if found is not None else []


def noop() -> None:
    """Nothing: Dask's overhead per task, measured."""
