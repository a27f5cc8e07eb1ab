# What a worker does with a task: the plain description it is sent
# (TaskSpec), and running it - assembling the argument regions, launching the
# kernel through the launcher's public call, returning the blocks it wrote.
#
#   TaskSpec      kernel source, name, forced configuration and grid; per
#                 parameter a buffer or a scalar; per buffer its shape, element
#                 type and fragments; which buffers are the task's outputs
#   run_spec      spec + the writers' results + an array kind + the kernel
#                 callable -> the output blocks and the kernel's seconds
#   TaskError     a failure, naming the kernel, call, grid slice and worker
#   in_the_call   a failure's message with the task's program ids made the
#                 whole call's: a task runs its slice of the grid as a launch
#                 of its own, whose program (0, 0, 0) is the slice's first
#
# Nothing here knows about Dask: phobos.dag.worker calls run_spec inside a
# Dask task, with the worker's plugin supplying the arrays and kernels.
from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import PhobosError
from .blocks import FragmentSpec, assemble


@dataclass(frozen=True)
class BufferSpec:
    """One argument region of a task."""

    shape: tuple[int, ...]
    dtype: str  # numpy's name
    fragments: tuple[FragmentSpec, ...]
    written: bool


@dataclass(frozen=True)
class TaskSpec:
    """Everything a worker needs to run one task (no futures, no graph: it is pickled to the worker)."""

    label: str  # "sgemm (call 3), grid slice M[0:128] x N[256:512]"
    source: str
    filename: str
    kernel: str
    forced: dict[str, int]
    grid: tuple[int, int, int] | None  # None: inferred by the launcher from the buffers' shapes
    arguments: dict[str, tuple[str, Any]]  # parameter -> ("buffer", index) or ("scalar", value)
    buffers: tuple[BufferSpec, ...]
    outputs: tuple[int, ...]  # buffer indices, in the order of the task's output blocks
    mode: str | None  # the session's mode: "gpu", "emulate", "interpret", or None (the worker's GPU, else emulate)
    # per configuration the worker may run (its items), the call's program id of the task's program (0, 0, 0)
    first_programs: tuple[tuple[tuple[tuple[str, int], ...], tuple[int, int, int]], ...] = ()

    def without_data(self) -> TaskSpec:
        """The same launch on zeros: for timing it where no input exists yet."""
        return replace(self, buffers=tuple(replace(b, fragments=()) for b in self.buffers))


class TaskError(PhobosError):
    """A task that failed on a worker; the message names the task, the worker and the cause."""

    def __init__(self, label: str, worker: str, cause: str):
        super().__init__(f"{label} failed on worker {worker}: {cause}")
        self.label, self.worker, self.cause = label, worker, cause

    def __reduce__(self) -> tuple:
        return TaskError, (self.label, self.worker, self.cause)


def run_spec(spec: TaskSpec, inputs: Sequence[Sequence[Any]], arrays: Any,
             kernel: Callable[..., None]) -> tuple[tuple[Any, ...], float]:
    """Assemble the buffers, run `kernel` on them and wait; (output blocks, seconds the kernel took)."""
    buffers = [assemble(arrays, b.shape, np.dtype(b.dtype), b.fragments, inputs, b.written) for b in spec.buffers]
    arguments = {name: buffers[value] if kind == "buffer" else value for name, (kind, value) in spec.arguments.items()}
    arrays.synchronize()  # the copies are done, whatever stream the launcher runs the kernel on
    start = time.perf_counter()
    kernel(**arguments)
    arrays.synchronize()
    seconds = time.perf_counter() - start
    return tuple(buffers[i] for i in spec.outputs), seconds


_PROGRAM_IDS = re.compile(r"(program instance \(|program \(|CTA \()(\d+),\s*(\d+),\s*(\d+)\)")


def in_the_call(cause: str, spec: TaskSpec, config: dict[str, int] | None) -> str:
    """`cause`, the message of a failure of `spec`'s launch run with `config`, with the program ids it
    names made the whole call's, and a line saying so; as it is for a task that is the whole grid."""
    first = dict(spec.first_programs).get(tuple((config or {}).items()))
    if first is None or first == (0, 0, 0):
        return cause

    def shifted(match: re.Match) -> str:
        ids = [int(match.group(k)) + first[k - 2] for k in (2, 3, 4)]
        return f"{match.group(1)}{ids[0]}, {ids[1]}, {ids[2]})"
    return (_PROGRAM_IDS.sub(shifted, cause) + f"\n(program ids are the call's: the programs of this task's slice "
            f"start at ({first[0]}, {first[1]}, {first[2]}))")


def describe_failure(error: BaseException) -> str:
    """The cause of a failure as one message: a Phobos error as Phobos prints it, anything else with its type."""
    if isinstance(error, PhobosError):
        return str(error)
    return f"{type(error).__name__}: {error}"
