# The tile DAG without Dask: boxes, which axes a kernel's launch can be cut
# along, the granularity rule, and the graph's edges, pieces and refusals.
# The edges are checked by running recorded tasks in place, in random orders
# that respect them, against the order they were added in.
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phobos.compiler import parse_source
from phobos.dag.access import kernel_access
from phobos.dag.graph import RAW, WAR, WAW, Access, DagError, Graph, Task, TensorState
from phobos.dag.region import Box
from phobos.dag.split import OVERHEAD_SHARE, axis_counts, cell_ranges, explicit_counts, task_count
from phobos.frontend.sema import configurations, launch_rules

EXAMPLES = Path(__file__).parent.parent / "examples"


# ---------------------------------------------------------------------------
# Boxes

boxes = st.lists(st.tuples(st.integers(0, 6), st.integers(1, 6)), min_size=1, max_size=3).map(
    lambda dims: Box(tuple((lo, lo + n) for lo, n in dims)))


@given(boxes, boxes)
@settings(max_examples=200, deadline=None)
def test_box_difference_partitions_what_is_left(first, second):
    if first.rank != second.rank:
        return
    parts = first.minus(second)
    covered = np.zeros([12] * first.rank, int)
    for part in parts:
        assert first.intersect(part) == part and not part.overlaps(second)
        covered[part.slices()] += 1
    expected = np.zeros_like(covered)
    expected[first.slices()] = 1
    common = first.intersect(second)
    if common is not None:
        expected[common.slices()] = 0
    assert (covered == expected).all()  # disjoint, and together exactly first without second
    assert len(parts) <= 2 * first.rank


def test_box_geometry():
    box = Box(((2, 5), (10, 20)))
    assert box.shape == (3, 10) and box.lower == (2, 10)
    assert box.intersect(Box(((4, 9), (0, 12)))) == Box(((4, 5), (10, 12)))
    assert box.intersect(Box(((5, 9), (0, 30)))) is None
    inner = Box(((3, 4), (15, 20)))
    assert inner.relative_to(box) == Box(((1, 2), (5, 10)))
    assert str(box) == "[2:5, 10:20]"


@pytest.mark.parametrize("ranges, contiguous", [
    (((0, 4), (0, 8)), True),                 # the whole array
    (((1, 3), (0, 8)), True),                 # whole rows
    (((1, 2), (2, 6)), True),                 # part of one row
    (((1, 3), (2, 6)), False),                # parts of two rows
    (((0, 4), (0, 4)), False),                # a column panel
])
def test_contiguous_boxes_of_a_row_major_array(ranges, contiguous):
    assert Box(ranges).contiguous_in((4, 8)) is contiguous


def test_contiguous_boxes_in_three_dimensions():
    assert Box(((2, 3), (1, 5), (0, 16))).contiguous_in((4, 8, 16))
    assert not Box(((2, 4), (1, 5), (0, 16))).contiguous_in((4, 8, 16))


# ---------------------------------------------------------------------------
# Which axes a launch can be cut along


def access_of(source: str, all_configurations: bool = True, name: str = "k"):
    kernel = parse_source(source, name).kernels[0]
    configs = configurations(kernel)
    return kernel_access(kernel, configs if all_configurations else configs[:1], launch_rules(kernel))


def example_access(name: str, all_configurations: bool = True):
    return access_of((EXAMPLES / f"{name}.phobos").read_text(), all_configurations, name)


def test_sgemm_splits_along_m_and_n_on_cells_every_configuration_fits():
    access = example_access("sgemm")
    assert [(a.axis, a.sizes, a.cell) for a in access.axes] == [(0, ("M",), 128), (1, ("N",), 256)]
    assert access.reads == {"A", "B", "C"} and access.writes == {"C"}
    first = example_access("sgemm", all_configurations=False)
    assert [a.cell for a in first.axes] == [32, 64]  # TILE_M, TILE_N of the first configuration


@pytest.mark.parametrize("name, size", [("softmax", "M"), ("layernorm", "M"), ("add", "N")])
def test_row_and_elementwise_kernels_split_along_their_one_axis(name, size):
    access = example_access(name)
    assert [a.axis for a in access.axes] == [0] and access.axes[0].sizes == (size,)
    assert access.refused == {} and access.grid_problem is None


def test_attention_is_not_split_and_says_why():
    access = example_access("attention")
    assert access.axes == ()
    assert "program_id(0) is used other than as a tile index" in access.refused[0]


def test_vector_sum_is_not_split_and_needs_a_grid():
    access = example_access("vector_sum")
    assert access.axes == ()
    assert "'total' is written, but none of its dimensions follows axis 0" in access.refused[0]
    assert "cannot infer its grid along axis 0" in access.grid_problem


@pytest.mark.parametrize("body, reason", [
    ("y[p :+ 64] = x[p :+ 64] * f32(num_programs(0))", "num_programs(0) is used"),
    ("y[p :+ 64] = x[p :+ 64] + f32(N)", "size 'N' is used as a value"),
    ("y[p :+ 64] = x[p + 32 :+ 64]", "program_id(0) is used other than as a tile index"),
    ("y[p :+ 64] = x[p :+ 64] + x[0 :+ 64]", "also indexed otherwise"),
])
def test_axes_that_cannot_be_split(body, reason):
    access = access_of(f"kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {{\n"
                       f"    let p = program_id(0) * 64\n    {body}\n}}\n")
    assert access.axes == ()
    assert reason in access.refused[0]


def test_tiles_of_different_lengths_are_refused():
    access = access_of("kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {\n"
                       "    let p = program_id(0)\n"
                       "    y[p * 64 :+ 64] = x[p * 64 :+ 64] + sum(x[p * 32 :+ 32])\n"
                       "}\n")
    assert access.axes == () and "different lengths" in access.refused[0]


def test_sizes_the_launch_rules_use_are_not_split():
    access = access_of("@autotune(B in [64, 128])\n@require(M >= B)\n"
                       "kernel k(x: tensor<f32>[M], y: tensor<f32>[M]) {\n"
                       "    y[program_id(0) * B :+ B] = x[program_id(0) * B :+ B]\n}\n")
    assert access.axes == () and "size 'M' appears in the kernel's @derive or @require" in access.refused[0]
    # softmax derives BN from N, the columns every task has whole: its rows still split
    assert [a.sizes for a in example_access("softmax").axes] == [("M",)]


def test_literal_dimensions_are_refused():
    access = access_of("kernel k(x: tensor<f32>[4, N], y: tensor<f32>[4, N]) {\n"
                       "    y[program_id(0), 0 :+ 64] = x[program_id(0), 0 :+ 64]\n}\n")
    assert access.axes == () and "literal extent 4" in access.refused[0]


# ---------------------------------------------------------------------------
# The granularity rule and the cells of a split


def test_tasks_hold_at_least_fifty_times_the_overhead():
    overhead = 0.002
    assert OVERHEAD_SHARE == 0.02
    assert task_count(1.0, overhead, workers=100, cells=1000) == 10  # 0.02 * 1 s / 2 ms
    assert task_count(1.0, overhead, workers=4, cells=1000) == 4  # no more tasks than can run at once
    assert task_count(0.01, overhead, workers=4, cells=1000) == 1  # too little work to split
    assert task_count(10.0, overhead, workers=8, cells=3) == 3  # no more tasks than cells
    for seconds in (0.1, 0.5, 2.0, 9.0):
        n = task_count(seconds, overhead, workers=64, cells=10**6)
        assert n == 1 or overhead / (seconds / n) <= OVERHEAD_SHARE


def gemm_footprint(m: int, n: int, k: int):
    """Bytes all tasks touch for a split (rows of C, columns of C) of an m x n x k product."""
    return lambda c: 4 * (m * k * c[1] + k * n * c[0] + m * n)


def test_splits_are_spread_over_axes_to_move_the_fewest_bytes():
    assert axis_counts(4, (64, 64), gemm_footprint(4096, 4096, 4096)) == (2, 2)
    assert axis_counts(8, (64, 64), gemm_footprint(4096, 4096, 4096)) in ((2, 4), (4, 2))
    # a tall C with a short K: cut the rows (each task then reads all of B, which is small)
    assert axis_counts(4, (64, 64), gemm_footprint(65536, 1024, 64)) == (4, 1)
    assert axis_counts(5, (2, 2), gemm_footprint(64, 64, 64)) == (2, 2)  # as many as the cells allow
    assert axis_counts(7, (64,), lambda c: 0.0) == (7,)


def test_cells_are_divided_evenly():
    assert cell_ranges(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert cell_ranges(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_explicit_splits_are_checked():
    cost = lambda c: 0.0  # noqa: E731
    assert explicit_counts("k", (2, 3), (4, 4), cost) == (2, 3)
    with pytest.raises(DagError, match="split axis 1 must be an integer from 1 to its 2 cells"):
        explicit_counts("k", (2, 3), (4, 2), cost)
    with pytest.raises(DagError, match="gives 1 count, but the kernel is split along 2 grid axes"):
        explicit_counts("k", (2,), (4, 4), cost)
    with pytest.raises(DagError, match="at least 1"):
        explicit_counts("k", 0, (4, 4), cost)


# ---------------------------------------------------------------------------
# The graph


def access(tensor: TensorState, box, mode: str, argument: str = "x") -> Access:
    return Access(tensor, Box(box), "r" in mode or "w" in mode, "w" in mode, argument)


def test_edges_of_each_kind():
    x = TensorState("x", (8, 8), np.dtype("float32"))
    graph = Graph()
    write_top = Task("write top", [access(x, ((0, 4), (0, 8)), "w")])
    read_row = Task("read rows 2..5", [access(x, ((2, 6), (0, 8)), "r")])
    write_bottom = Task("write rows 4..8", [access(x, ((4, 8), (0, 8)), "w")])
    write_all = Task("write all", [access(x, ((0, 8), (0, 8)), "w")])
    for task in (write_top, read_row, write_bottom, write_all):
        graph.add([task])
    assert read_row.dependencies == {write_top: {RAW}}
    assert write_bottom.dependencies == {read_row: {WAR}}  # rows 4..5 were read; rows 4..8 held zeros
    assert write_all.dependencies == {write_top: {RAW, WAW}, write_bottom: {RAW, WAW}, read_row: {WAR}}
    assert [p.writer for p in x.pieces] == [write_all]


def test_pieces_partition_the_tensor_and_sources_name_their_blocks():
    x = TensorState("x", (6, 6), np.dtype("float32"))
    graph = Graph()
    left = Task("left", [access(x, ((0, 6), (0, 3)), "w")])
    middle = Task("middle", [access(x, ((2, 4), (0, 6)), "w")])
    graph.add([left])
    graph.add([middle])
    owner = np.full((6, 6), -1)
    for piece in x.pieces:
        assert (owner[piece.box.slices()] == -1).all()
        owner[piece.box.slices()] = {None: 0, left: 1, middle: 2}[piece.writer]
    assert (owner[2:4] == 2).all() and (owner[:2, :3] == 1).all() and (owner[4:, 3:] == 0).all()
    reader = Task("reader", [access(x, ((1, 3), (2, 5)), "r")])
    graph.add([reader])
    by_writer = {f.writer: f for f in reader.sources[0]}
    assert by_writer[left].box == Box(((1, 2), (2, 3))) and by_writer[left].block == Box(((0, 6), (0, 3)))
    assert by_writer[middle].box == Box(((2, 3), (2, 5)))
    assert by_writer[None].box == Box(((1, 2), (3, 5)))  # zeros, stored nowhere


def test_tasks_of_one_call_that_would_race_are_refused_before_anything_changes():
    x = TensorState("x", (8,), np.dtype("float32"))
    graph = Graph()
    graph.add([Task("first", [access(x, ((0, 8),), "w")])])
    pieces = list(x.pieces)
    racing = [Task("call 2, slice 0", [access(x, ((0, 4),), "r", "a"), access(x, ((0, 4),), "w", "c")])]
    with pytest.raises(DagError, match="arguments 'a' .* and 'c' .* overlap in x\\[0:4\\] and the kernel writes 'c'"):
        graph.add(racing)
    across = [Task("call 2, slice 0", [access(x, ((0, 8),), "r", "a")]),
              Task("call 2, slice 1", [access(x, ((4, 8),), "w", "c")])]
    with pytest.raises(DagError, match="call 2, slice 1: its region 'c' \\(x\\[4:8\\]\\) overlaps 'a' "
                                       "\\(x\\[0:8\\]\\) of call 2, slice 0 .* cannot be ordered"):
        graph.add(across)
    assert x.pieces == pieces and len(graph.tasks) == 1
    graph.add([Task("reads may overlap", [access(x, ((0, 8),), "r")]),
               Task("reads may overlap", [access(x, ((2, 6),), "r")])])


def test_random_orders_that_respect_the_edges_give_the_sequential_result():
    """Run recorded tasks in place (each one's function on the tensors as they are when it runs): any
    order the edges allow must give what the order of adding gives.  A missing edge of any kind
    would let some order read a value too new or too old, or write over a newer one."""
    rng = random.Random(7)
    shapes = {"x": (12, 12), "y": (12, 12)}
    for trial in range(30):
        tensors = {name: TensorState(name, shape, np.dtype("float64")) for name, shape in shapes.items()}
        graph, work = Graph(), []
        for step in range(12):
            source, target = rng.choice([("x", "y"), ("y", "x"), ("x", "x"), ("y", "y")])
            read, write = (Box(tuple(sorted(rng.sample(range(13), 2)) for _ in range(2))) for _ in range(2))
            if source == target and read.overlaps(write):
                continue
            task = Task(f"step {step}", [access(tensors[source], read.ranges, "r", "src"),
                                         access(tensors[target], write.ranges, "w", "dst")])
            graph.add([task])
            work.append((task, source, read, target, write, step + 1.0))

        def run(order):
            data = {name: np.zeros(shape) for name, shape in shapes.items()}
            for task, source, read, target, write, scale in order:
                total = data[source][read.slices()].sum()
                data[target][write.slices()] = data[target][write.slices()] * 0.5 + total + scale
            return data

        expected = run(work)
        by_task = {item[0]: item for item in work}
        for _ in range(5):
            done, order, waiting = set(), [], [item[0] for item in work]
            while waiting:
                ready = [t for t in waiting if all(d in done for d in t.dependencies)]
                pick = rng.choice(ready)
                waiting.remove(pick)
                done.add(pick)
                order.append(by_task[pick])
            got = run(order)
            assert all(np.array_equal(got[name], expected[name]) for name in shapes)
