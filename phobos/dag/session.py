# A session: distributed tensors, kernels called on them, and the Dask client
# their tasks run on.
#
#   session = Session()                    # or Session(client), Session(workers=4, mode="emulate")
#   kernels = session.load("sgemm.phobos") # kernels.sgemm(A, B, C, alpha=1.0, beta=0.0)
#   A = session.from_array(a)              # from_function(...), zeros(...); A[0:512, :] is a view
#   C.gather()                             # numpy, once the tasks it needs are done
#
# A call is checked like a direct call (same errors, naming the argument),
# then planned: the axes it can be split on (phobos.dag.access), the cells of
# its grid, how many tasks (phobos.dag.split: by hand, or the granularity rule
# from Dask's measured overhead and a timed calibration task), each task's
# regions; then added to the graph (phobos.dag.graph: edges, sources, or a
# DagError for regions it cannot order) and submitted at once, each task with
# the futures of the writers it reads as its Dask dependencies.  The session
# keeps the futures of the blocks its live tensors are made of, and drops the
# others so Dask can free them.
#
# No wait is unbounded: waiting for tasks (wait, gather, a calibration, the
# overhead probe) ends with a DagError once none of the awaited tasks has
# finished for `stall_seconds` (Session(stall_seconds=...), default
# STALL_SECONDS), say when every worker is gone for good.  Tasks carry no
# worker restrictions, so a restarted worker can recompute any lost block.
from __future__ import annotations

import itertools
import math
import time
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..compiler import parse_source
from ..errors import ErrorList, LaunchError, PhobosError, SourceFile, ToolchainError
from ..frontend import ast
from ..frontend.launch_rules import LaunchRules, sizes_text
from ..frontend.sema import check_kernel, check_program, launch_rules
from ..launch.binding import ACCEPTED_DTYPES, convert_scalar, describe, match_arguments
from ..configuration import config_text
from ..launch.cache import text_digest
from ..launch.launcher import normalize_grid
from ..middle.ir import KernelParam
from ..middle.irgen import kernel_signature
from .access import KernelAccess, kernel_access
from .blocks import FragmentSpec, HostArrays
from .cluster import CPU_MODES, start_cluster
from .execute import BufferSpec, TaskSpec
from .graph import Access, DagError, Graph, Task, TensorState
from .region import Box
from .split import axis_counts, cell_ranges, explicit_counts, task_count

MODES = (None, "gpu", *CPU_MODES)
DISTRIBUTED_MISSING = "phobos.dag needs Dask distributed: pip install 'phobos-tile[distributed]'"

#: No-op tasks timed, after as many untimed ones, to measure the overhead per task.
OVERHEAD_PROBE_TASKS = 64

#: How long a wait goes on while none of the tasks it waits for finishes (seconds).
STALL_SECONDS = 600.0

#: How often a wait looks for progress (seconds).
POLL_SECONDS = 1.0


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as error:
        raise ToolchainError(f"{DISTRIBUTED_MISSING} ({error})") from None
    return distributed


class Session:
    """Distributed tensors and kernel calls on one Dask cluster.

    `client`: a distributed.Client to use; None starts a LocalCluster here
    (phobos.dag.cluster: one worker per GPU, or `workers` CPU processes; `gpus`
    picks GPUs).  `mode`: what workers run kernels with - "gpu", "emulate",
    "interpret", or None (what mode=None means on each worker: its GPU if it
    has one).
    `task_overhead`: Dask's seconds per task, measured on first need if None.
    `stall_seconds`: how long a wait goes on while none of the tasks it waits
    for finishes, before it gives up with a DagError.
    """

    def __init__(self, client: Any = None, *, workers: int | None = None, gpus: int | list[str] | None = None,
                 mode: str | None = None, task_overhead: float | None = None,
                 stall_seconds: float = STALL_SECONDS):
        if mode not in MODES:
            raise PhobosError(f"unknown mode {mode!r} (modes: gpu, emulate, interpret, or None to choose)")
        if not isinstance(stall_seconds, (int, float)) or isinstance(stall_seconds, bool) or not stall_seconds > 0:
            raise PhobosError(f"stall_seconds must be a positive number of seconds, got {stall_seconds!r}")
        self.stall_seconds = float(stall_seconds)
        distributed = _distributed()
        from .worker import PLUGIN_NAME, PhobosWorker
        self._cluster = None
        if client is None:
            self._cluster = start_cluster(workers, gpus, mode)
            client = distributed.Client(self._cluster)
        self.client = client
        self.mode = mode
        self.client.register_plugin(PhobosWorker(), name=PLUGIN_NAME)
        self.graph = Graph()
        self._futures: dict[Task, Any] = {}
        self._tensors: weakref.WeakSet[Tensor] = weakref.WeakSet()
        self._overhead = task_overhead
        self._call_seconds: dict[tuple, float] = {}
        self._calls = itertools.count(1)
        self._names = itertools.count()
        self._token = uuid.uuid4().hex[:8]

    # --- the cluster
    @property
    def workers(self) -> int:
        """Threads of all workers: how many tasks can run at once."""
        return sum(self.client.nthreads().values())

    @property
    def task_overhead(self) -> float:
        """Dask's seconds per task on one worker: a burst of no-op tasks, timed after a warm-up burst."""
        if self._overhead is None:
            self._overhead = measure_overhead(self.client, stall_seconds=self.stall_seconds)
        return self._overhead

    @property
    def tunes(self) -> bool:
        """Whether workers may autotune (so a split must suit every configuration)."""
        return self.mode not in CPU_MODES

    def wait(self) -> None:
        """Wait for every task the session's tensors need; raise the first failure (a TaskError), or a
        DagError when they stall (see the header)."""
        pending = sorted(self._futures.items(), key=lambda item: item[0].number)
        wait_for([future for _, future in pending], self.stall_seconds, "the session's tasks")
        for _, future in pending:
            if future.status == "error":
                raise future.exception()

    def close(self) -> None:
        """Close the client and cluster this session started (a client it was given stays open)."""
        self._futures.clear()
        if self._cluster is not None:
            self.client.close()
            self._cluster.close()
            self._cluster = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        try:
            if kind is None:
                self.wait()
        finally:
            self.close()

    # --- kernels
    def jit(self, source: str, filename: str | None = None) -> DagModule:
        """The kernels of `source`, called on this session's tensors."""
        if not isinstance(source, str):
            raise PhobosError(f"Session.jit takes the source text as a str, got {type(source).__name__}")
        return DagModule(self, source, filename or SourceFile.name_for(source))

    def load(self, path: str | Path) -> DagModule:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise PhobosError(f"cannot read {path}: {error.strerror or error}") from None
        return DagModule(self, text, str(path))

    # --- tensors
    def zeros(self, shape: Sequence[int], dtype: Any = "float32", name: str | None = None) -> Tensor:
        """A tensor of zeros (stored nowhere until a task writes it)."""
        return self._tensor(TensorState(name or self._name(), _shape(shape), np.dtype(dtype)))

    def from_array(self, array: np.ndarray, blocks: Sequence[int] | None = None, name: str | None = None) -> Tensor:
        """A tensor holding `array`, cut into `blocks` (blocks per dimension; default one per worker along
        the first), each made on a worker by a task that carries its data (so it can be made again)."""
        array = np.ascontiguousarray(array)
        state = TensorState(name or self._name(), array.shape, array.dtype)
        return self._blocks(state, blocks, lambda box: array[box.slices()].copy())

    def from_function(self, shape: Sequence[int], dtype: Any, function: Any, blocks: Sequence[int] | None = None,
                      name: str | None = None) -> Tensor:
        """A tensor whose blocks are computed on the workers: `function(index)` returns the block at
        `index` (a tuple of slices) as a numpy array; nothing travels from here."""
        state = TensorState(name or self._name(), _shape(shape), np.dtype(dtype))
        return self._blocks(state, blocks, lambda box: function)

    def _name(self) -> str:
        return f"t{next(self._names)}"

    def _tensor(self, state: TensorState) -> Tensor:
        tensor = Tensor(self, state, Box.whole(state.shape))
        self._tensors.add(tensor)
        return tensor

    def _blocks(self, state: TensorState, blocks: Sequence[int] | None, data: Any) -> Tensor:
        from .worker import make_block
        counts = _block_counts(state.shape, blocks, self.workers)
        boxes = [Box(ranges) for ranges in itertools.product(
            *(cell_ranges(extent, count) for extent, count in zip(state.shape, counts)))]
        tasks = [Task(f"block {state.name}{box}", [Access(state, box, False, True, state.name)]) for box in boxes]
        self.graph.add(tasks)
        for task, box in zip(tasks, boxes):  # no worker restrictions: Dask spreads them, and any worker remakes them
            self._futures[task] = self.client.submit(
                make_block, task.label, self.mode, box.shape, state.dtype.name, data(box), box.slices(),
                key=f"{state.name}-block-{task.number}-{self._token}", pure=False)
        return self._tensor(state)

    def gather(self, tensor: Tensor) -> np.ndarray:
        """`tensor`'s contents in host memory; the TaskError of a failed task it needs, never a partial result."""
        pieces = [p for p in tensor.state.pieces if p.box.overlaps(tensor.box)]
        writers = list(dict.fromkeys(p.writer for p in pieces if p.writer is not None))
        futures = [self._futures[w] for w in writers]
        wait_for(futures, self.stall_seconds, f"the tasks that write {tensor.describe()}")
        results = dict(zip(writers, (f.result(timeout=self.stall_seconds) for f in futures)))
        host = HostArrays()
        out = np.zeros(tensor.shape, tensor.dtype)
        for piece in pieces:
            if piece.writer is not None:
                common = piece.box.intersect(tensor.box)
                block = host.adopt(results[piece.writer][piece.output])
                out[common.relative_to(tensor.box).slices()] = block[common.relative_to(piece.block).slices()]
        return out

    def owners(self, tensor: Tensor) -> list[tuple[Box, tuple[str, ...]]]:
        """Which workers hold each piece of `tensor` (in its coordinates); () for zeros stored nowhere."""
        pieces = [p for p in tensor.state.pieces if p.box.overlaps(tensor.box)]
        futures = {p.writer: self._futures[p.writer] for p in pieces if p.writer is not None}
        holders = self.client.who_has(list(futures.values()))
        return [(p.box.intersect(tensor.box).relative_to(tensor.box),
                 tuple(holders.get(futures[p.writer].key, ())) if p.writer is not None else ()) for p in pieces]

    # --- calls
    def call(self, kernel: DagKernel, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Check a call, split it into tasks, add them to the graph and submit them."""
        info = kernel.info
        given = match_arguments(info.name, info.params, info.size_names, args, kwargs)
        sizes: dict[str, int] = {}
        tensors = {p.name: self._bind(info.name, p, given[p.name], sizes) for p in info.params if p.kind == "tensor"}
        scalars = {p.name: convert_scalar(info.name, p, given[p.name]) for p in info.params if p.kind == "scalar"}
        access = info.access(kernel.forced, self.tunes, sizes)
        plan = _Plan(info, kernel, access, tensors, sizes)
        if kernel.grid is None and not plan.axes and access.grid_problem is not None:
            raise LaunchError(f"{info.name}: {access.grid_problem}; give the grid: kernels.{info.name}[(gx, ...)](...)")
        if 0 in plan.cells:
            return  # an empty grid: nothing runs, as in a direct call
        number = next(self._calls)
        counts = self._counts(kernel, plan, number, scalars)
        info.last_split = counts
        slices = list(itertools.product(*(cell_ranges(c, k) for c, k in zip(plan.cells, counts))))
        tasks = [plan.task(number, cells) for cells in slices]
        self.graph.add(tasks)
        for task, cells in zip(tasks, slices):
            self._submit(task, plan.spec(task, cells, scalars))
        self._forget_unreachable()

    def _bind(self, kernel_name: str, param: KernelParam, value: Any, sizes: dict[str, int]) -> Tensor:
        """A tensor argument checked as binding checks a direct call's (element type, rank, sizes)."""
        dims = ", ".join(map(str, param.dims))
        expected = f"a {len(param.dims)}-D {param.dtype} phobos.dag tensor [{dims}]"
        if not isinstance(value, Tensor):
            raise LaunchError(f"{kernel_name}: argument '{param.name}': expected {expected}, got {describe(value)}")
        if value.session is not self:
            raise DagError(f"{kernel_name}: argument '{param.name}' is a tensor of another session")
        accepted = ACCEPTED_DTYPES.get(param.dtype, (param.dtype.numpy_name,))
        if value.dtype.name not in accepted or value.ndim != len(param.dims):
            raise LaunchError(f"{kernel_name}: argument '{param.name}': expected {expected}, got {value.describe()}")
        for dim, extent in zip(param.dims, value.shape):
            if isinstance(dim, str):
                sizes.setdefault(dim, extent)
            if extent != (dim if isinstance(dim, int) else sizes[dim]):
                known = f" with {dim} = {sizes[dim]} from an earlier argument" if isinstance(dim, str) else ""
                raise LaunchError(f"{kernel_name}: argument '{param.name}': expected {expected}{known}, "
                                  f"got {value.describe()}")
        return value

    def _counts(self, kernel: DagKernel, plan: _Plan, number: int, scalars: dict[str, Any]) -> tuple[int, ...]:
        """Tasks per split axis: as asked (kernel.split), or by the granularity rule."""
        if kernel.tasks is not None:
            return explicit_counts(kernel.info.name, kernel.tasks, plan.cells, plan.footprint)
        if not plan.axes:
            return ()
        total = math.prod(plan.cells)
        workers = self.workers
        key = (kernel.info.key, tuple(sorted(kernel.forced.items())),
               tuple((name, t.shape) for name, t in plan.tensors.items()))
        if key not in self._call_seconds:
            trial = axis_counts(min(workers, total), plan.cells, plan.footprint)
            cells = tuple(cell_ranges(c, k)[0] for c, k in zip(plan.cells, trial))
            seconds = self._calibrate(plan.spec(plan.task(number, cells), cells, scalars))
            self._call_seconds[key] = seconds * total / math.prod(hi - lo for lo, hi in cells)
        kernel.info.last_estimate = self._call_seconds[key]
        n = task_count(self._call_seconds[key], self.task_overhead, workers, total)
        return axis_counts(n, plan.cells, plan.footprint)

    def _calibrate(self, spec: TaskSpec) -> float:
        from .worker import calibrate
        future = self.client.submit(calibrate, spec, pure=False, priority=100)
        wait_for([future], self.stall_seconds, f"timing {spec.label}")
        return future.result(timeout=self.stall_seconds)

    def _submit(self, task: Task, spec: TaskSpec) -> None:
        from .worker import run_task
        writers = list(dict.fromkeys(f.writer for sources in task.sources for f in sources if f.writer is not None))
        self._futures[task] = self.client.submit(
            run_task, spec, *(self._futures[w] for w in writers),
            key=f"{spec.kernel}-{task.number}-{self._token}", pure=False)

    def _forget_unreachable(self) -> None:
        """Drop the futures no live tensor's pieces refer to; Dask frees their blocks once no task needs them."""
        live = {p.writer for t in list(self._tensors) for p in t.state.pieces if p.writer is not None}
        for task in [t for t in self._futures if t not in live]:
            del self._futures[task]


def measure_overhead(client: Any, tasks: int = OVERHEAD_PROBE_TASKS, stall_seconds: float = STALL_SECONDS) -> float:
    """Seconds per task of a burst of independent no-op tasks on one worker (after a warm-up burst)."""
    from .worker import noop
    workers = sorted(client.nthreads())
    if not workers:
        raise DagError("the cluster has no workers to measure Dask's overhead per task on")
    for _ in range(2):
        start = time.perf_counter()
        wait_for([client.submit(noop, pure=False, workers=[workers[0]]) for _ in range(tasks)], stall_seconds,
                 "the tasks that measure Dask's overhead")
        seconds = (time.perf_counter() - start) / tasks
    return seconds


def wait_for(futures: list, stall_seconds: float, what: str) -> None:
    """Wait until every future is finished (done, failed or cancelled); a DagError naming `what` once
    none of them has finished for `stall_seconds` (every worker gone, a task no worker can run)."""
    distributed = _distributed()
    finished, since = -1, time.monotonic()
    while True:
        try:
            distributed.wait(futures, timeout=min(POLL_SECONDS, stall_seconds))
            return
        except (TimeoutError, distributed.TimeoutError):
            pass
        now_finished = sum(f.done() for f in futures)
        if now_finished != finished:
            finished, since = now_finished, time.monotonic()
        elif time.monotonic() - since >= stall_seconds:
            states = sorted({f.status for f in futures if not f.done()})
            raise DagError(f"waited {stall_seconds:g} s for {what} without one of them finishing "
                           f"({len(futures) - finished} of {len(futures)} not done, status {', '.join(states)}; "
                           f"the cluster has {len(_distributed_workers(futures))} worker(s)): "
                           f"Session(stall_seconds=...) sets how long a wait may stall")


def _distributed_workers(futures: list) -> dict:
    """The cluster's workers, as the futures' client sees them (none when it cannot say)."""
    try:
        return futures[0].client.nthreads() if futures else {}
    except Exception:  # the scheduler itself is gone
        return {}


# ---------------------------------------------------------------------------
# Distributed tensors


class Tensor:
    """A distributed tensor, or a view of one (a box of it): `A[0:512, :]`; `.gather()` its contents."""

    def __init__(self, session: Session, state: TensorState, box: Box):
        self.session = session
        self.state = state
        self.box = box

    @property
    def shape(self) -> tuple[int, ...]:
        return self.box.shape

    @property
    def dtype(self) -> np.dtype:
        return self.state.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, key: Any) -> Tensor:
        items = key if isinstance(key, tuple) else (key,)
        if len(items) > self.ndim or not all(isinstance(k, slice) and k.step in (None, 1) for k in items):
            raise PhobosError(f"a view of {self.describe()} takes up to {self.ndim} slices with step 1 "
                              f"(x[a:b, c:d]), got {key!r}")
        ranges = list(self.box.ranges)
        for dim, item in enumerate(items):
            lo, hi = ranges[dim]
            start, stop, _ = item.indices(hi - lo)
            ranges[dim] = (lo + start, lo + max(start, stop))
        view = Tensor(self.session, self.state, Box(tuple(ranges)))
        self.session._tensors.add(view)
        return view

    def gather(self) -> np.ndarray:
        return self.session.gather(self)

    def owners(self) -> list[tuple[Box, tuple[str, ...]]]:
        return self.session.owners(self)

    def describe(self) -> str:
        whole = self.box == Box.whole(self.state.shape)
        return f"{self.dtype.name} tensor '{self.state.name}'" + ("" if whole else f"{self.box}") + \
            f" of shape {self.shape}"

    def __repr__(self) -> str:
        return f"<phobos.dag {self.describe()}>"


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    dims = tuple(shape)
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in dims):
        raise PhobosError(f"a tensor shape is a sequence of non-negative integers, got {shape!r}")
    return tuple(int(n) for n in dims)


def _block_counts(shape: tuple[int, ...], blocks: Sequence[int] | None, workers: int) -> tuple[int, ...]:
    if blocks is None:
        return tuple([min(workers, shape[0]) if shape else 1] + [1] * (len(shape) - 1)) if shape else ()
    counts = tuple(blocks)
    if len(counts) != len(shape) or not all(isinstance(c, int) and 1 <= c <= max(n, 1)
                                            for c, n in zip(counts, shape)):
        raise PhobosError(f"blocks={blocks!r}: give one count per dimension of {shape}, from 1 to the extent")
    return counts


# ---------------------------------------------------------------------------
# Kernels


@dataclass(eq=False)
class KernelInfo:
    """What every callable of one kernel in a session shares: its source, parameters, launch rules,
    access patterns."""

    session: Session
    source: str
    filename: str
    node: ast.Kernel
    params: list[KernelParam] = field(init=False)
    size_names: list[str] = field(init=False)
    rules: LaunchRules = field(init=False)
    last_split: tuple[int, ...] | None = field(default=None, init=False)  # tasks per split axis, last call
    last_estimate: float | None = field(default=None, init=False)  # calibrated seconds of the last auto-split call
    _accesses: dict[tuple, KernelAccess] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        signature = kernel_signature(check_kernel(self.node))
        self.params = [p for p in signature if p.kind != "size"]
        self.size_names = [p.name for p in signature if p.kind == "size"]
        self.rules = launch_rules(self.node)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def key(self) -> tuple[str, str, str]:
        return text_digest(self.source), self.filename, self.name

    def access(self, forced: dict[str, int], tunes: bool, sizes: dict[str, int]) -> KernelAccess:
        """The access pattern over the configurations a worker may pick for a call of these sizes:
        every one that serves them if it tunes, else the first (what the CPU backends run)."""
        configs = self.serving(forced, sizes)
        configs = configs if tunes else configs[:1]
        key = tuple(tuple(config.items()) for config in configs)
        if key not in self._accesses:
            self._accesses[key] = kernel_access(self.node, configs, self.rules)
        return self._accesses[key]

    def serving(self, forced: dict[str, int], sizes: dict[str, int]) -> list[dict[str, int]]:
        """The complete configurations (derived constants included) that serve these sizes, as the
        launcher offers them; a LaunchError naming a condition when none does."""
        configs = list(self.rules.autotune_configurations(forced))
        if not self.rules.derived and not self.rules.conditions:
            return configs
        valid, rejected = self.rules.serving(configs, sizes)
        if not valid:
            first = rejected[0]
            raise LaunchError(f"{self.name}: no configuration{' with ' + config_text(forced) if forced else ''} "
                              f"can serve {sizes_text(sizes)}: {first.condition.describe()} does not hold for "
                              f"{config_text(first.config)}")
        return valid


class DagModule:
    """The kernels of one source, as attributes, called on a session's tensors."""

    def __init__(self, session: Session, source: str, filename: str):
        program = parse_source(source, filename)
        errors = check_program(program)
        if errors:
            raise errors[0] if len(errors) == 1 else ErrorList(errors)
        self.filename = filename
        self.kernels = {k.name: DagKernel(KernelInfo(session, source, filename, k)) for k in program.kernels}

    def __getattr__(self, name: str) -> DagKernel:
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"{self.__dict__.get('filename', 'this module')} has no kernel '{name}' "
                             f"(kernels: {', '.join(kernels) or 'none'})")


class DagKernel:
    """A kernel called on distributed tensors: `k(A, B, C, alpha=1.0)` splits the call into tasks.

    `k.split(n)` (or one count per split axis) sets the number of tasks by hand; `k[grid]` gives the
    grid (the call is then one task); `k.configure(NAME=value)` fixes autotune parameters.  After a
    call, `.last_split` holds the tasks per split axis and `.last_estimate` the calibrated seconds.
    """

    def __init__(self, info: KernelInfo, forced: dict[str, int] | None = None,
                 grid: tuple[int, int, int] | None = None, tasks: int | tuple[int, ...] | None = None):
        self.info = info
        self.forced = dict(forced or {})
        self.grid = grid
        self.tasks = tasks

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def last_split(self) -> tuple[int, ...] | None:
        return self.info.last_split

    @property
    def last_estimate(self) -> float | None:
        return self.info.last_estimate

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.info.session.call(self, args, kwargs)

    def __getitem__(self, grid: Any) -> DagKernel:
        return DagKernel(self.info, self.forced, normalize_grid(self.name, grid, f"got {grid!r}"), self.tasks)

    def split(self, tasks: int | Sequence[int]) -> DagKernel:
        return DagKernel(self.info, self.forced, self.grid, tasks if isinstance(tasks, int) else tuple(tasks))

    def configure(self, **values: int) -> DagKernel:
        """This kernel with autotune parameters fixed, checked now under the configurations left."""
        rules = self.info.rules
        for name, value in values.items():
            if name in rules.derived_names:
                raise PhobosError(f"{self.name}: '{name}' is derived from the sizes (@derive); it cannot be forced")
            if name not in rules.space:
                raise PhobosError(f"{self.name}: no autotune parameter '{name}' "
                                  f"(it has: {', '.join(rules.space) or 'none'})")
            if not isinstance(value, int) or isinstance(value, bool):
                raise PhobosError(f"{self.name}: autotune parameter '{name}' must be an integer, got {value!r}")
        forced = {**self.forced, **values}
        for config in rules.representative(forced):
            check_kernel(self.info.node, config)
        return DagKernel(self.info, forced, self.grid, self.tasks)


# ---------------------------------------------------------------------------
# Planning one call


class _Plan:
    """One call's split: the axes, their cells, and for a slice of cells the task and its spec."""

    def __init__(self, info: KernelInfo, kernel: DagKernel, access: KernelAccess, tensors: dict[str, Tensor],
                 sizes: dict[str, int]):
        self.info, self.kernel, self.access, self.tensors, self.sizes = info, kernel, access, tensors, sizes
        self.axes = access.axes if kernel.grid is None else ()
        self.cells = tuple(math.ceil(max(sizes[s] for s in axis.sizes if s in sizes) / axis.cell)
                           for axis in self.axes)
        self.groups = self._argument_groups()

    def _argument_groups(self) -> list[list[str]]:
        """Tensor parameters that share one buffer: the same view passed twice, where every dimension of
        both follows a grid axis with the same tile (so each program reads exactly what it writes)."""
        groups: list[list[str]] = []
        for name, tensor in self.tensors.items():
            group = next((g for g in groups if self._same_tiles(g[0], name)), None)
            if group is None:
                groups.append([name])
            else:
                group.append(name)
        return groups

    def _same_tiles(self, first: str, second: str) -> bool:
        a, b = self.tensors[first], self.tensors[second]
        if a.state is not b.state or a.box != b.box:
            return False
        dims = [p.dims for p in self.info.params if p.name in (first, second)]
        return dims[0] == dims[1] and all(self.access.axis_of(d) is not None for d in dims[0])

    def footprint(self, counts: tuple[int, ...]) -> float:
        """Bytes all tasks of a split into `counts` touch (the cost a split into more tasks pays)."""
        total = 0.0
        for param in self.info.params:
            if param.name in self.tensors:
                tensor = self.tensors[param.name]
                elements = 1.0
                for dim, extent in zip(param.dims, tensor.shape):
                    axis = self._axis_index(dim)
                    elements *= extent / counts[axis] if axis is not None else extent
                total += elements * tensor.dtype.itemsize
        return total * math.prod(counts)

    def _axis_index(self, dim: str | int) -> int | None:
        return next((i for i, axis in enumerate(self.axes) if dim in axis.sizes), None)

    def region(self, name: str, cells: tuple[tuple[int, int], ...]) -> Box:
        """The box of tensor `name`'s tensor that the slice `cells` touches."""
        tensor = self.tensors[name]
        dims = next(p.dims for p in self.info.params if p.name == name)
        ranges = []
        for dim, (lo, hi) in zip(dims, tensor.box.ranges):
            axis = self._axis_index(dim)
            if axis is None:
                ranges.append((lo, hi))
            else:
                first, last = cells[axis]
                cell = self.axes[axis].cell
                ranges.append((lo + first * cell, lo + min(last * cell, hi - lo)))
        return Box(tuple(ranges))

    def label(self, number: int, cells: tuple[tuple[int, int], ...]) -> str:
        call = f"{self.info.name} (call {number})"
        if not self.axes:
            return f"{call}, whole grid" + (f" {self.kernel.grid}" if self.kernel.grid is not None else "")
        parts = []
        for axis, (first, last) in zip(self.axes, cells):
            size = next(s for s in axis.sizes if s in self.sizes)
            parts.append(f"{size}[{first * axis.cell}:{min(last * axis.cell, self.sizes[size])}]")
        return f"{call}, grid slice {' x '.join(parts)}"

    def task(self, number: int, cells: tuple[tuple[int, int], ...]) -> Task:
        """The task of slice `cells`: one access per argument group the kernel reads or writes."""
        accesses = []
        for group in self.groups:
            reads = any(n in self.access.reads for n in group)
            writes = any(n in self.access.writes for n in group)
            if reads or writes:
                tensor = self.tensors[group[0]]
                accesses.append(Access(tensor.state, self.region(group[0], cells), reads or writes, writes,
                                       ", ".join(group)))
        return Task(self.label(number, cells), accesses)

    def spec(self, task: Task, cells: tuple[tuple[int, int], ...], scalars: dict[str, Any]) -> TaskSpec:
        """What the worker is sent for the task of slice `cells`: a buffer per argument group, filled
        from the task's sources (none before Graph.add: zeros)."""
        writers = list(dict.fromkeys(f.writer for sources in task.sources for f in sources if f.writer is not None))
        inputs = {writer: index for index, writer in enumerate(writers)}
        by_argument = {a.argument: (a, task.sources[i] if task.sources else []) for i, a in enumerate(task.accesses)}
        buffers, arguments, outputs = [], {}, []
        for group in self.groups:
            found = by_argument.get(", ".join(group))
            region = found[0].box if found else self.region(group[0], cells)
            fragments = tuple(
                FragmentSpec(inputs[f.writer] if f.writer is not None else None, f.output,
                             f.box.relative_to(f.block), f.box.relative_to(region))
                for f in (found[1] if found else []))
            written = bool(found and found[0].writes)
            if written:
                outputs.append(len(buffers))
            for name in group:
                arguments[name] = ("buffer", len(buffers))
            buffers.append(BufferSpec(region.shape, self.tensors[group[0]].dtype.name, fragments, written))
        arguments.update({name: ("scalar", value) for name, value in scalars.items()})
        return TaskSpec(task.label, self.info.source, self.info.filename, self.info.name, dict(self.kernel.forced),
                        self.kernel.grid, arguments, tuple(buffers), tuple(outputs), self.info.session.mode,
                        self.first_programs(cells))

    def first_programs(self, cells: tuple[tuple[int, int], ...]) -> tuple:
        """Per configuration a worker may run, the call's program id of the task's first program: along
        each split axis, the slice's first cell times the programs (tiles) a cell holds."""
        out = []
        for i, config in enumerate(self.access.configs):
            first = [0, 0, 0]
            for axis, (lo, _) in zip(self.axes, cells):
                first[axis.axis] = lo * axis.cell // axis.tiles[i]
            out.append((tuple(config.items()), tuple(first)))
        return tuple(out)
