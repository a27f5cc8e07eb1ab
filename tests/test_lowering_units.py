# Lowering on hand-built tile-level IR: each test builds a small ir.Function
# with ir.Builder (as irgen would), lowers it with phobos.lower.driver.lower,
# and checks properties of the thread-level IR that comes back - the uniform
# edge test and vector accesses of slices, shuffles and shared memory of
# reductions, the FMAs of dot, the cp.async pipeline - and that the thread
# coordinates lowering computes for layout.py's layouts are the ones worked
# out by hand.  A small evaluator runs the entry code (tid arithmetic) for a
# given thread.
from __future__ import annotations

import operator

import pytest

from phobos.configuration import Knobs
from phobos.errors import Loc, UnsupportedError
from phobos.lower.core import HANDLERS, Lowering
from phobos.lower.driver import lower
from phobos.lower.layout import blocked, dot_layout
from phobos.middle.ir import Block, Builder, Function, KernelParam, Op, Value, walk
from phobos.types import DType, ScalarType, TensorType, TileType

LOC = Loc("unit.phobos", 1, 1)
F32 = DType.F32
I32 = ScalarType(DType.I32)
SMEM = 227 * 1024


class Kernel:
    """A tile-level function under construction: tensors and sizes as parameters, a builder at its body."""

    def __init__(self, tensors: dict[str, tuple[tuple[str, ...], bool]], sizes: tuple[str, ...],
                 config: dict[str, int] | None = None):
        params = [KernelParam(name, "tensor", F32, dims, written) for name, (dims, written) in tensors.items()]
        params += [KernelParam(name, "size", DType.I32) for name in sizes]
        self.func = Function("unit", Block(), {"config": config or {}, "knobs": Knobs.of(config or {}),
                                               "params": params, "loc": LOC})
        self.b = Builder(self.func, loc=LOC)
        self.args: dict[str, Value] = {}
        for i, p in enumerate(params):
            t = TensorType(F32, p.dims) if p.kind == "tensor" else I32
            self.args[p.name] = self.b.value("param", [], t, index=i, name=p.name)

    def const(self, value, type_=I32) -> Value:
        return self.b.value("const", [], type_, value=value)

    def load(self, tensor: str, starts: list[Value], sizes: list[int | None]) -> Value:
        shape = tuple(n for n in sizes if n is not None)
        return self.b.value("load", [self.args[tensor], *starts], TileType(F32, shape), sizes=list(sizes))

    def store(self, tensor: str, starts: list[Value], sizes: list[int | None], value: Value) -> None:
        self.b.op("store", [self.args[tensor], *starts, value], [], {"sizes": list(sizes)})


def ops_of(block: Block, opcode: str) -> list[Op]:
    return [op for op in walk(block) if op.opcode == opcode]


def ifs(func: Function) -> list[Op]:
    return [op for op in func.body.ops if op.opcode == "if"]


def depends_on(v: Value) -> set[str]:
    """The opcodes of every op that v is computed from (v's own included)."""
    seen, stack, out = set(), [v], set()
    while stack:
        x = stack.pop()
        if id(x) in seen or not isinstance(x.owner, Op):
            continue
        seen.add(id(x))
        out.add(x.owner.opcode)
        stack += x.owner.operands
    return out


_AT_THREAD = {"add": operator.add, "mul": operator.mul, "shr": operator.rshift, "and": operator.and_}
_PREDICATES = {"eq": operator.eq, "lt": operator.lt}


def at_thread(v: Value, tid: int):
    """The value of v, computed from the thread index only, in thread `tid`."""
    op = v.owner
    if op.opcode == "tid":
        return tid
    if op.opcode == "const":
        return op.attrs["value"]
    args = [at_thread(x, tid) for x in op.operands]
    if op.opcode == "cmp":
        return _PREDICATES[op.attrs["pred"]](*args)
    return _AT_THREAD[op.opcode](*args)


def bare_lowering(threads: int) -> Lowering:
    """The state of lowering a kernel that does nothing, with `threads` threads (for coordinate helpers)."""
    k = Kernel({}, (), {"WARPS": threads // 32})
    return Lowering(k.func, SMEM, cp_async=False)


# ------------------------------------------------------------------ the table
def test_every_tile_level_opcode_has_a_handler():
    for opcode in ("param", "const", "program_id", "num_programs", "arange", "broadcast", "reshape", "extract",
                   "add", "cmp", "select", "cast", "exp", "for", "while", "if", "yield", "load", "store",
                   "gather", "scatter", "atomic", "dot", "reduce", "scan", "permute", "join", "concat", "print",
                   "assert", "shl", "shr", "mulhi", "bitcast", "floor", "ceil", "round", "trunc"):
        assert opcode in HANDLERS, opcode


def test_an_op_without_handler_is_a_located_error():
    k = Kernel({}, ())
    k.b.loc = Loc("unit.phobos", 7, 3)
    k.b.value("tid", [], I32)
    with pytest.raises(UnsupportedError) as err:
        lower(k.func, SMEM)
    assert "cannot lower 'tid'" in str(err.value)
    assert err.value.loc == Loc("unit.phobos", 7, 3)


# ------------------------------------------------------------------ slices
def copy_kernel(block: int, config=None, extra_use: bool = False) -> Function:
    """y[pid * block :+ block] = x[pid * block :+ block] (and, with extra_use, the load used twice)."""
    k = Kernel({"x": (("N",), False), "y": (("N",), True)}, ("N",), config)
    pid = k.b.value("program_id", [], I32, axis=0)
    base = k.b.value("mul", [pid, k.const(block)], I32)
    x = k.load("x", [base], [block])
    value = k.b.value("add", [x, x], TileType(F32, (block,))) if extra_use else x
    k.store("y", [base], [block], value)
    return k.func


def test_slice_copy_tests_bounds_uniformly_then_uses_vectors():
    out = lower(copy_kernel(1024), SMEM)
    assert out.attrs["threads"] == 256  # 1024 elements at 4 per thread
    (branch,) = ifs(out)  # the load is fused into the store: one edge test for both slices
    assert "tid" not in depends_on(branch.operands[0])  # the same in every thread of the CTA
    assert {"param", "program_id", "cmp"} <= depends_on(branch.operands[0])
    fast, rest = branch.regions
    (ld,), (st,) = ops_of(fast, "ld_global"), ops_of(fast, "st_global")
    assert (ld.attrs["vec"], ld.attrs["masked"], st.attrs["vec"], st.attrs["masked"]) == (4, False, 4, False)
    assert ld.attrs["read_only"]  # x is never written
    # not inside but aligned: the same vectors, each tested (a row's end is a multiple of the vector)
    (aligned,) = [op for op in rest.ops if op.opcode == "if"]
    assert "tid" not in depends_on(aligned.operands[0])
    edge, slow = aligned.regions
    assert [(o.attrs["vec"], o.attrs["masked"]) for o in ops_of(edge, "ld_global") + ops_of(edge, "st_global")] \
        == [(4, True)] * 2
    slow_ld, slow_st = ops_of(slow, "ld_global"), ops_of(slow, "st_global")
    assert [(o.attrs["vec"], o.attrs["masked"]) for o in slow_ld + slow_st] == [(1, True)] * 8


def test_a_large_tile_has_no_edge_arm_of_masked_vectors():
    out = lower(copy_kernel(16384), SMEM)  # 16 vectors a thread: past MASKED_VECTOR_ACCESSES
    (branch,) = ifs(out)
    fast, slow = branch.regions
    assert not [op for op in slow.ops if op.opcode == "if"]
    assert {o.attrs["vec"] for o in ops_of(slow, "ld_global")} == {1}


def test_a_load_with_another_use_is_not_fused():
    out = lower(copy_kernel(1024, extra_use=True), SMEM)
    load_if, store_if = ifs(out)
    assert len(load_if.results) == 4  # the loaded registers leave the branch
    assert ops_of(load_if.regions[0], "ld_global") and not ops_of(store_if.regions[0], "ld_global")


def test_a_replicated_tile_is_stored_once():
    # 64 elements on 256 threads: blocked gives 16 lanes a vector of 4 and replicates them
    out = lower(copy_kernel(64, config={"WARPS": 8}), SMEM)
    (branch,) = ifs(out)
    (st,) = ops_of(branch.regions[0], "st_global")
    pred = st.operands[-1]
    storing = [t for t in range(256) if at_thread(pred, t)]
    assert storing == list(range(16))


# ------------------------------------------------------------------ reductions
def sum_kernel(shape: tuple[int, ...], axis: int | None, config=None) -> Function:
    k = Kernel({"x": (("M", "N"), False)}, ("M", "N"), config)
    x = k.load("x", [k.const(0), k.const(0)], list(shape) if len(shape) == 2 else [None, shape[0]])
    result = TileType(F32, tuple(1 if d == axis else n for d, n in enumerate(shape))) if axis is not None \
        else ScalarType(F32)
    k.b.value("reduce", [x], result, kind="sum", axis=axis)
    return k.func


def test_sum_of_a_tile_shuffles_in_warps_then_combines_warps_in_shared_memory():
    out = lower(sum_kernel((1024,), None, {"WARPS": 8}), SMEM)
    masks = [op.operands[1].owner.attrs["value"] for op in ops_of(out.body, "shfl_bfly")]
    assert masks == [1, 2, 4, 8, 16]  # one butterfly per lane bit
    assert len(ops_of(out.body, "ld_shared")) == 8  # every thread reads the 8 warps' partial sums
    assert len(ops_of(out.body, "barrier")) == 2
    assert out.attrs["shared_bytes"] == 32


def test_row_sums_within_a_warp_need_no_shared_memory():
    # [16, 64] on 128 threads: a row is 16 lanes x 4 elements, so only lane bits 1..8 are reduced
    out = lower(sum_kernel((16, 64), 1, {"WARPS": 4}), SMEM)
    masks = [op.operands[1].owner.attrs["value"] for op in ops_of(out.body, "shfl_bfly")]
    assert masks == [1, 1, 2, 2, 4, 4, 8, 8]  # each lane bit, for both rows a thread holds
    assert not ops_of(out.body, "barrier") and out.attrs["shared_bytes"] == 0


# ------------------------------------------------------------------ thread coordinates
def test_blocked_layout_coordinates_are_the_hand_computed_ones():
    # [16, 64] on 128 threads: thread t holds rows t // 16 and t // 16 + 8, columns 4 (t % 16) .. + 3
    low = bare_lowering(128)
    layout = blocked((16, 64), 128)
    for t in (0, 1, 15, 16, 45, 127):
        got = [tuple(at_thread(low.coord(layout, r, d), t) for d in range(2)) for r in range(layout.nregs)]
        want = [(t // 16 + 8 * rep, 4 * (t % 16) + j) for rep in range(2) for j in range(4)]
        assert got == want, t


def test_collapsed_layout_replicates_the_reduced_lanes():
    # the row sums of the [16, 64] tile above: rows as before, the 16 lanes of a row hold copies
    low = bare_lowering(128)
    small = blocked((16, 64), 128).collapse([1])
    owner = low.owner(small)
    for t in range(128):
        assert [at_thread(low.coord(small, r, 0), t) for r in range(small.nregs)] == [t // 16, t // 16 + 8]
        assert at_thread(owner, t) == (t % 16 == 0)


def test_dot_layout_gives_each_element_to_one_thread():
    low = bare_lowering(64)
    layout = dot_layout((32, 64), 64)
    held = [(at_thread(low.coord(layout, r, 0), t), at_thread(low.coord(layout, r, 1), t))
            for t in range(64) for r in range(layout.nregs)]
    assert sorted(held) == [(i, j) for i in range(32) for j in range(64)]
    assert layout.vector_width() == 4  # runs of 4 columns per thread


def test_padding_slots_are_masked_by_slot_valid():
    # 48 rows on a layout that covers 64: the slots of rows 48..63 are padding
    low = bare_lowering(128)
    layout = blocked((48, 64), 128)
    for t in (0, 45, 127):
        for r in range(layout.nregs):
            row = at_thread(low.coord(layout, r, 0), t)
            valid = low.slot_valid(layout, r)
            assert (True if valid is None else at_thread(valid, t)) == (row < 48), (t, r)


# ------------------------------------------------------------------ dot
def dot_kernel(k_size: int, loop: bool = False) -> Function:
    """acc[32, 64] = A[0:32, ...] @ B[..., 0:64]: one dot of K = k_size, or a K loop of 16-wide steps."""
    k = Kernel({"A": (("M", "K"), False), "B": (("K", "N"), False), "C": (("M", "N"), True)}, ("M", "N", "K"),
               {"WARPS": 2})
    zero = k.const(0)
    acc_t = TileType(F32, (32, 64))
    if not loop:
        a = k.load("A", [zero, zero], [32, k_size])
        b = k.load("B", [zero, zero], [k_size, 64])
        acc = k.b.value("dot", [a, b], acc_t)
    else:
        init = k.const(0.0, acc_t)
        body = Block()
        for_op = k.b.op("for", [zero, k.args["K"], init], [acc_t], {"step": 16}, [body])
        outer = k.b
        k.b = Builder(k.func, body, LOC)
        kt = k.b.block_arg(body, I32, "kt")
        carried = k.b.block_arg(body, acc_t, "acc")
        a = k.load("A", [zero, kt], [32, 16])
        b = k.load("B", [kt, zero], [16, 64])
        k.b.op("yield", [k.b.value("dot", [a, b, carried], acc_t)], [])
        k.b = outer
        acc = for_op.result
    k.store("C", [zero, zero], [32, 64], acc)
    return k.func


def test_small_dot_is_unrolled_fmas_reading_a_as_vectors_along_k():
    out = lower(dot_kernel(16), SMEM)
    per_thread = 32 * 64 // 64
    assert len(ops_of(out.body, "fma")) == per_thread * 16
    a_reads = [op for op in ops_of(out.body, "ld_shared") if op.attrs["vec"] == 4]
    assert a_reads and not ops_of(out.body, "for")


def test_long_dot_loops_over_k():
    out = lower(dot_kernel(128), SMEM)
    (loop,) = ops_of(out.body, "for")
    assert loop.attrs["step"] == 16
    assert len(ops_of(loop.regions[0], "fma")) == 32 * 16  # 32 registers per thread, 16 k steps a trip
    assert len(ops_of(out.body, "fma")) == 32 * 16  # 128 is a multiple of 16: no remainder


def test_k_loop_is_pipelined_with_cp_async_only_where_the_target_has_it():
    piped = lower(dot_kernel(16, loop=True), SMEM, cp_async=True)
    assert ops_of(piped.body, "cp_async")
    waits = [op.attrs["pending"] for op in ops_of(piped.body, "cp_async_wait")]
    assert waits == [1, 0]  # STAGES = 3 by default: one group may stay in flight, all done after the loop
    plain = lower(dot_kernel(16, loop=True), SMEM, cp_async=False)
    assert not ops_of(plain.body, "cp_async")
    assert ops_of(plain.body, "ld_global") and ops_of(plain.body, "st_shared")
