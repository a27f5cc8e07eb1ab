# How many tasks a call becomes, and which cells of its grid each one gets.
#
#   task_count(T, o, W, cells)   the granularity rule: tasks hold at least
#                                o / OVERHEAD_SHARE of work, no more tasks
#                                than workers, at least one
#   axis_counts(n, cells, cost)  n tasks as per-axis counts: the largest
#                                product <= n, then the fewest bytes touched
#   cell_ranges(cells, count)    `count` contiguous, near-equal ranges
#
# A call's grid, along each axis it can be split on (phobos.dag.access), is a
# row of cells; a task is one range of cells per split axis.  The rule and the
# measurements behind it are in docs/distributed.md, section 6.
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

from .graph import DagError

#: The most of a task's time Dask's per-task overhead may take.
OVERHEAD_SHARE = 0.02


def task_count(call_seconds: float, overhead_seconds: float, workers: int, cells: int) -> int:
    """Tasks for a call of `call_seconds` (on one worker): min(workers, floor(share * T / o)),
    at least 1 and at most `cells`."""
    if cells < 1:
        return 0
    affordable = math.floor(OVERHEAD_SHARE * call_seconds / overhead_seconds) if overhead_seconds > 0 else cells
    return max(1, min(workers, affordable, cells))


def axis_counts(n: int, cells: Sequence[int], cost: Callable[[tuple[int, ...]], float]) -> tuple[int, ...]:
    """Per-axis task counts (each at most that axis's cells) whose product is the largest that is at
    most n, and among those the one of least `cost` (bytes the tasks touch, say)."""
    return min(_products_up_to(n, tuple(cells)), key=lambda counts: (-math.prod(counts), cost(counts)))


def _products_up_to(n: int, cells: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Every tuple of counts, count i from 1 to cells[i], whose product is at most n."""
    if not cells:
        yield ()
        return
    for first in range(1, min(n, cells[0]) + 1):
        for rest in _products_up_to(n // first, cells[1:]):
            yield (first,) + rest


def cell_ranges(cells: int, count: int) -> list[tuple[int, int]]:
    """`count` contiguous ranges covering [0, cells), sizes differing by at most one."""
    bounds = [i * cells // count for i in range(count + 1)]
    return list(zip(bounds, bounds[1:]))


def explicit_counts(kernel_name: str, requested: int | Sequence[int], cells: Sequence[int],
                    cost: Callable[[tuple[int, ...]], float]) -> tuple[int, ...]:
    """The per-axis counts for `kernel.split(requested)`: a total (spread as axis_counts does) or one
    count per split axis; DagError when it does not fit the grid."""
    if isinstance(requested, int):
        if requested < 1:
            raise DagError(f"{kernel_name}: split into {requested} tasks; give at least 1")
        return axis_counts(requested, cells, cost)
    counts = tuple(requested)
    if len(counts) != len(cells):
        raise DagError(f"{kernel_name}: split {counts} gives {len(counts)} count{'s' * (len(counts) != 1)}, but the "
                       f"kernel is split along {len(cells)} grid {'axis' if len(cells) == 1 else 'axes'}")
    for axis, (count, available) in enumerate(zip(counts, cells)):
        if not isinstance(count, int) or not 1 <= count <= available:
            raise DagError(f"{kernel_name}: split {counts}: count {count!r} for split axis {axis} must be an "
                           f"integer from 1 to its {available} cells")
    return counts
