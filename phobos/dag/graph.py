# The graph of tile tasks: tasks, the regions they touch, and the edges that
# order them, inferred from overlap.
#
#   Graph.add(task)   for each region the task reads: a read-after-write edge
#                     from the writer of every piece it overlaps, and those
#                     pieces' parts become the task's sources; for each region
#                     it writes: write-after-write edges from the pieces'
#                     writers, write-after-read edges from their readers; then
#                     the pieces are cut and the region is a new piece.
#
# The pieces of a tensor partition it; each names its writer (a task, or None
# for zeros that were never stored) and the block of that writer's output it
# is part of, so they are also the record of who owns which part of a tensor
# (docs/distributed.md, sections 2 and 3).  Writes make new versions, never
# change a block in place, so an executor only has to honour read-after-write
# edges; the other two are recorded so that claim can be checked.
#
# Tasks of one call are slices of one launch and have no order among them
# (Graph.add takes them together): an overlap between two of them, or between
# two regions of one task, where one is written is a DagError, never a race.
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from ..errors import PhobosError
from .region import Box

RAW, WAR, WAW = "read-after-write", "write-after-read", "write-after-write"


class DagError(PhobosError):
    """Work the tile DAG refuses: overlapping regions it cannot order, tensors of another session."""


@dataclass(eq=False)
class TensorState:
    """A distributed tensor's bookkeeping: shape, element type and the pieces its contents are made of."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    pieces: list[Piece] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.pieces:
            self.pieces.append(Piece(Box.whole(self.shape), None, 0, Box.whole(self.shape)))


@dataclass(eq=False)
class Piece:
    """A box of a tensor whose contents are part of one block: output `output` of `writer`,
    which covers `block` (None writer: zeros, stored nowhere)."""

    box: Box
    writer: Task | None
    output: int
    block: Box
    readers: list[tuple[Task, Box]] = field(default_factory=list)

    def cut(self, region: Box) -> list[Piece]:
        """What is left of this piece outside `region`, keeping the readers of each part."""
        return [Piece(part, self.writer, self.output, self.block,
                      [(task, box) for task, box in self.readers if box.overlaps(part)])
                for part in self.box.minus(region)]


@dataclass(frozen=True)
class Access:
    """A region of a tensor a task touches: read, written (a written region is also read: the task
    starts from its current contents), through the argument(s) named `argument`."""

    tensor: TensorState
    box: Box
    reads: bool
    writes: bool
    argument: str

    def describe(self) -> str:
        return f"'{self.argument}' ({self.tensor.name}{self.box})"


@dataclass(frozen=True)
class Fragment:
    """Part of a region a task reads: `box` (tensor coordinates) taken from output `output` of
    `writer`, a block covering `block`; zeros when writer is None."""

    box: Box
    writer: Task | None
    output: int
    block: Box


_task_numbers = itertools.count()


@dataclass(eq=False)
class Task:
    """One node: a label (what runs: kernel, call, grid slice) and the regions it touches; after
    Graph.add, its dependencies (task -> kinds of edge) and, per access, the fragments it reads."""

    label: str
    accesses: list[Access]
    number: int = field(default_factory=lambda: next(_task_numbers))
    dependencies: dict[Task, set[str]] = field(default_factory=dict)
    sources: list[list[Fragment]] = field(default_factory=list)

    @property
    def outputs(self) -> list[Access]:
        """The regions this task writes, in the order of its output blocks."""
        return [a for a in self.accesses if a.writes]

    def __repr__(self) -> str:
        return f"<task {self.number}: {self.label}>"


class Graph:
    """Tasks in the order they were added, with the edges between them."""

    def __init__(self) -> None:
        self.tasks: list[Task] = []

    def add(self, tasks: list[Task]) -> None:
        """Add the tasks of one call - slices of one launch, with no order among them - inferring each
        one's edges and sources from the pieces it overlaps, then recording its writes.  DagError,
        before anything changes, when two of them (or two regions of one) overlap and one writes."""
        check_unordered(tasks)
        for task in tasks:
            task.sources = [self._read(task, access) if access.reads else [] for access in task.accesses]
            for index, access in enumerate(task.outputs):
                self._write(task, access, index)
            self.tasks.append(task)

    def edges(self) -> list[tuple[Task, Task, str]]:
        """(earlier, later, kind) for every edge, in task order."""
        return [(dep, task, kind) for task in self.tasks for dep, kinds in task.dependencies.items()
                for kind in sorted(kinds)]

    def _read(self, task: Task, access: Access) -> list[Fragment]:
        fragments = []
        for piece in access.tensor.pieces:
            common = piece.box.intersect(access.box)
            if common is None:
                continue
            if piece.writer is not None:
                task.dependencies.setdefault(piece.writer, set()).add(RAW)
            piece.readers.append((task, common))
            fragments.append(Fragment(common, piece.writer, piece.output, piece.block))
        return fragments

    def _write(self, task: Task, access: Access, output: int) -> None:
        kept = []
        for piece in access.tensor.pieces:
            if not piece.box.overlaps(access.box):
                kept.append(piece)
                continue
            if piece.writer is not None:
                task.dependencies.setdefault(piece.writer, set()).add(WAW)
            for reader, box in piece.readers:
                if reader is not task and box.overlaps(access.box):
                    task.dependencies.setdefault(reader, set()).add(WAR)
            kept += piece.cut(access.box)
        kept.append(Piece(access.box, task, output, access.box))
        access.tensor.pieces = kept


def check_unordered(tasks: list[Task]) -> None:
    """DagError when regions of unordered tasks overlap and one of them is written (a race)."""
    for task in tasks:
        for first, second in itertools.combinations(task.accesses, 2):
            _check_pair(task, first, task, second)
    by_tensor: dict[int, list[tuple[Access, Task]]] = {}
    for task in tasks:
        for access in task.accesses:
            by_tensor.setdefault(id(access.tensor), []).append((access, task))
    for items in by_tensor.values():
        if not any(access.writes for access, _ in items):
            continue
        # Sweep along the dimension with the most distinct starts: only boxes whose ranges there
        # overlap are compared.
        rank = items[0][0].box.rank
        dim = max(range(rank), key=lambda d: len({a.box.ranges[d][0] for a, _ in items}), default=None)
        if dim is None:
            items_sorted, start, end = items, (lambda a: 0), (lambda a: 1)
        else:
            items_sorted = sorted(items, key=lambda item: item[0].box.ranges[dim][0])
            start, end = (lambda a: a.box.ranges[dim][0]), (lambda a: a.box.ranges[dim][1])
        active: list[tuple[Access, Task]] = []
        for access, task in items_sorted:
            active = [(a, t) for a, t in active if end(a) > start(access)]
            for other, other_task in active:
                if other_task is not task:
                    _check_pair(other_task, other, task, access)
            active.append((access, task))


def _check_pair(first_task: Task, first: Access, second_task: Task, second: Access) -> None:
    if first.tensor is not second.tensor or not (first.writes or second.writes):
        return
    common = first.box.intersect(second.box)
    if common is None:
        return
    written = first if first.writes else second
    if first_task is second_task:
        raise DagError(f"{first_task.label}: arguments {first.describe()} and {second.describe()} overlap in "
                       f"{first.tensor.name}{common} and the kernel writes '{written.argument}'; pass regions that "
                       f"do not overlap (programs would read elements other programs write)")
    raise DagError(f"{second_task.label}: its region {second.describe()} overlaps {first.describe()} of "
                   f"{first_task.label} in {first.tensor.name}{common}, and one of them is written; the tasks of "
                   f"one call are slices of one launch and cannot be ordered (a direct launch would race)")
