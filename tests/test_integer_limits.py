# Arithmetic the compiler writes itself from user values, near the ends of the
# integer ranges: the step and test of a `for` loop, the pipelined K loop, the
# grouped order of program ids and the inferred grid.  Each must do exactly
# what the language says for every value (the interpreter, which computes on
# Python and NumPy integers without such arithmetic, is the reference), never
# wrap into an endless loop or a wrong program id.
from __future__ import annotations

import functools

import numpy as np
import pytest

import phobos
import phobos.run.emulator as emulator
from phobos.compiler import compile as compile_kernel
from phobos.configuration import Knobs
from phobos.constants import evaluate
from phobos.errors import LaunchError
from phobos.launch.launcher import infer_grid
from phobos.lower.core import Lowering
from phobos.lower.values import grouped_program_ids
from phobos.middle.ir import Block, Function, Op
from .emulator_support import PTXAS, ptxas_errors

MODES = ["interpret", "emulate", pytest.param("gpu", marks=pytest.mark.gpu)]
I32_MAX, I64_MAX = 2**31 - 1, 2**63 - 1


@pytest.fixture
def few_steps(monkeypatch):
    """The emulator stops a kernel after 200,000 instruction steps (an endless loop fails fast)."""
    monkeypatch.setattr(emulator, "launch", functools.partial(emulator.launch, max_steps=200_000))


def counting_loop(dtype: str, step: int) -> str:
    return f"""kernel k(out: tensor<i64>[3], lo: {dtype}, hi: {dtype}) {{
        var n = 0
        var first = i64(-1)
        var last = i64(-1)
        for i in range(lo, hi, {step}) {{
            if n == 0 {{
                first = i64(i)
            }}
            n += 1
            last = i64(i)
        }}
        out[0] = i64(n)
        out[1] = first
        out[2] = last
    }}"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype, lo, hi, step", [
    ("i32", I32_MAX - 7, I32_MAX, 4),  # i + 4 passes 2^31 - 1 after the second iteration
    ("i32", I32_MAX - 1, I32_MAX, 1),
    ("i32", I32_MAX - 3, I32_MAX, 3),  # ends exactly at the largest value
    ("i32", -2**31 + 7, -2**31, -4),  # a negative step past the smallest value
    ("i32", 5, 5, 1),  # no iteration
    ("i32", 10, 0, -3),
    ("i32", -3, 8, 5),
    ("u32", 2**32 - 6, 2**32 - 1, 4),
    ("i64", I64_MAX - 7, I64_MAX, 4),
    ("i64", -2**63 + 7, -2**63, -4),
])
def test_a_loop_near_the_end_of_its_range_runs_exactly_its_iterations(mode, dtype, lo, hi, step, few_steps):
    expected = list(range(lo, hi, step))
    out = np.zeros(3, np.int64)
    phobos.kernel(counting_loop(dtype, step), mode=mode)(out, lo, hi)
    wrap = {"i32": np.int32, "u32": np.uint32, "i64": np.int64}[dtype]
    ends = [int(wrap(v)) for v in (expected[0], expected[-1])] if expected else [-1, -1]
    assert list(out) == [len(expected), *ends]


def stepped_loop(dtype: str, exit_early: bool) -> str:
    """A loop whose step is a run-time value, or that a `break` can leave: both become a `while`."""
    leave = "if i == hi { break }" if exit_early else ""
    return f"""kernel k(out: tensor<i64>[3], lo: {dtype}, hi: {dtype}, st: {dtype}) {{
        var n = 0
        var first = i64(-1)
        var last = i64(-1)
        for i in range(lo, hi, st) {{
            {leave}
            if n == 0 {{
                first = i64(i)
            }}
            n += 1
            last = i64(i)
        }}
        out[0] = i64(n)
        out[1] = first
        out[2] = last
    }}"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("exit_early", [False, True], ids=["runtime-step", "break"])
@pytest.mark.parametrize("dtype, lo, hi, step", [
    ("i32", I32_MAX - 7, I32_MAX, 4),
    ("i32", -2**31 + 7, -2**31, -3),
    ("i32", -2**31, I32_MAX, I32_MAX),  # the distance to the end is wider than i32
    ("i32", 0, 10, 0),  # a zero step runs no iteration
    ("i32", 5, 0, -2),
    ("u32", 2**32 - 6, 2**32 - 1, 4),
    ("i64", I64_MAX - 7, I64_MAX, 4),
    ("i64", -2**63 + 7, -2**63, -4),
])
def test_a_while_shaped_loop_near_the_end_of_its_range_runs_exactly_its_iterations(
        mode, exit_early, dtype, lo, hi, step, few_steps):
    expected = list(range(lo, hi, step)) if step else []
    out = np.zeros(3, np.int64)
    phobos.kernel(stepped_loop(dtype, exit_early), mode=mode)(out, lo, hi, step)
    assert list(out) == [len(expected), *([expected[0], expected[-1]] if expected else [-1, -1])]


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not installed")
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
@pytest.mark.parametrize("dtype, step", [("i32", 4), ("i32", -4), ("u32", 3), ("i64", -7)])
def test_the_loop_test_assembles(arch, dtype, step):
    ptx = compile_kernel(counting_loop(dtype, step), arch=arch).ptx
    assert f"setp.gt.u{64 if dtype == 'i64' else 32}" in ptx  # the distance left, compared unsigned
    assert ptxas_errors(ptx, arch) is None


@pytest.mark.parametrize("mode", MODES)
def test_a_pipelined_k_loop_near_the_end_of_the_range_ends(mode, few_steps):
    """A K loop of one dot (pipelined with cp.async on sm_80+): its prefetches run ahead of the
    loop variable, which is close to 2^31; the slices are outside the tensors and read 0."""
    src = """kernel k(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N], k0: i32, k1: i32) {
        var acc: tile<f32>[16, 16] = 0.0
        for k in range(k0, k1, 16) {
            acc += dot(A[0 :+ 16, k :+ 16], B[k :+ 16, 0 :+ 16])
        }
        C[0 :+ 16, 0 :+ 16] = acc + 1.0
    }"""
    assert "cp.async" in compile_kernel(src, arch="sm_90").ptx
    a, b = np.ones((16, 32), np.float32), np.ones((32, 16), np.float32)
    c = np.zeros((16, 16), np.float32)
    phobos.kernel(src, mode=mode)(a, b, c, I32_MAX - 40, I32_MAX)  # 3 iterations
    np.testing.assert_array_equal(c, 1.0)
    phobos.kernel(src, mode=mode)(a, b, c, -16, 32)  # and the ordinary case: k = -16, 0, 16
    np.testing.assert_array_equal(c, 33.0)


# ------------------------------------------------------------------ grouped program ids
def _value(v, env: dict):
    """A thread-level entry value computed as the IR defines it (phobos.constants: i32 wraps)."""
    op = v.owner
    assert isinstance(op, Op)
    if op.opcode in ("program_id", "num_programs"):
        return env[op.opcode, op.attrs["axis"]]
    if op.opcode == "const":
        return op.attrs["value"]
    args = [_value(x, env) for x in op.operands]
    if op.opcode == "mul_wide":
        return args[0] * args[1]
    return evaluate(op.opcode, op.attrs, args, [x.dtype for x in op.operands], v.dtype)


def _grouped(group_m: int):
    func = Function("k", Block(), {"config": {}, "knobs": Knobs.of({"WARPS": 1, "GROUP_M": group_m}),
                                   "params": []})
    return grouped_program_ids(Lowering(func, 48 * 1024, cp_async=False))


def _program_ids(pids, x, y, nx, ny):
    env = {("program_id", 0): x, ("program_id", 1): y, ("num_programs", 0): nx, ("num_programs", 1): ny}
    return tuple(_value(p, env) for p in pids)


def test_grouped_program_ids_are_a_bijection_of_the_grid():
    pids = _grouped(4)
    nx, ny = 10, 7
    seen = {_program_ids(pids, x, y, nx, ny) for x in range(nx) for y in range(ny)}
    assert seen == {(x, y) for x in range(nx) for y in range(ny)}
    assert _program_ids(pids, 1, 0, nx, ny) == (1, 0) and _program_ids(pids, 4, 0, nx, ny) == (0, 1)


@pytest.mark.parametrize("nx, ny", [(I32_MAX, 2), (2**30, 4), (2**16, 2**15)])
def test_grouped_program_ids_of_a_grid_of_2_31_ctas_or_more_stay_in_the_grid(nx, ny):
    """x + y * nx no longer fits i32: such a grid keeps the plain order."""
    pids = _grouped(8)
    for x, y in [(0, 0), (nx - 1, 0), (0, ny - 1), (nx - 1, ny - 1), (nx // 2, ny // 2), (12345, 1)]:
        assert _program_ids(pids, x, y, nx, ny) == (x, y)


def test_grouped_program_ids_just_below_2_31_ctas_are_grouped():
    pids = _grouped(8)
    nx, ny = 2**31 // 4 - 1, 4  # 2^31 - 4 CTAs
    got = [_program_ids(pids, x, y, nx, ny) for x, y in [(0, 0), (8, 0), (nx - 1, ny - 1), (nx - 2, ny - 1)]]
    assert got[0] == (0, 0) and got[1] == (0, 1)  # grouped: the 9th CTA starts the next column
    assert sorted(got[2:]) == [(nx - 2, ny - 1), (nx - 1, ny - 1)]  # the last group is the last rows
    assert all(0 <= p < nx and 0 <= q < ny for p, q in got)


# ------------------------------------------------------------------ the inferred grid
def test_the_inferred_grid_is_the_exact_ceiling():
    tile = 2**23
    size = (I32_MAX - 1) * tile + 1  # as a float quotient, (2^31 - 2) + 2^-23 rounds to 2^31 - 2
    assert infer_grid("k", [("N", tile), None, None], {0}, {"N": size}) == (I32_MAX, 1, 1)
    with pytest.raises(LaunchError, match="larger than a GPU allows"):
        infer_grid("k", [("N", tile), None, None], {0}, {"N": size + tile})
    assert infer_grid("k", [("N", 128), ("M", 1), None], {0, 1}, {"N": 0, "M": 65535}) == (0, 65535, 1)
