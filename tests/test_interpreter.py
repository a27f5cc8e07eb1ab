# Tests of the NumPy interpreter: its results against NumPy references, the
# edge contract of loads and stores, the arithmetic of each dtype, every
# builtin, control flow, and the errors of bad launches and faulting kernels.
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phobos.run import interpreter
from phobos.frontend.builtins import BUILTINS
from phobos.compiler import parse_source, pick_kernel
from phobos.errors import ExecutionError, LaunchError, RaceError, SemanticError
from phobos.run.interpreter import interpret, prepare, run
from phobos.frontend.sema import check_kernel

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
FILE = "test.phobos"


def launch(src, grid, *args, config=None, kernel=None):
    interpret(src, kernel, config, grid=grid, args=list(args), filename=FILE)


def checked(src, config=None):
    return check_kernel(pick_kernel(parse_source(src, FILE), None), config)


def example(name):
    with open(f"examples/{name}.phobos") as f:
        return f.read()


def cdiv(a, b):
    return -(-a // b)


# ------------------------------------------------------------ examples
@pytest.mark.parametrize("n", [1, 1000, 1024, 3000])
def test_add_matches_numpy(n):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    launch(example("add"), cdiv(n, 1024), a, b, c)
    np.testing.assert_array_equal(c, a + b)


SGEMM_CONFIG = {"TILE_M": 32, "TILE_N": 64, "TILE_K": 16}


def sgemm(m, n, k, config=SGEMM_CONFIG, alpha=1.5, beta=-0.5, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = rng.standard_normal((m, n), dtype=np.float32)
    ref = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c.astype(np.float64)
    bound = (abs(alpha) * (np.abs(a) @ np.abs(b)) + abs(beta) * np.abs(c)) * (k + 2) * 2.0**-24
    launch(example("sgemm"), (cdiv(m, config["TILE_M"]), cdiv(n, config["TILE_N"])), a, b, c, alpha, beta,
           config=config)
    return c, ref, bound


@pytest.mark.parametrize("shape", [(256, 256, 256), (100, 70, 33), (1, 1, 1), (64, 128, 16), (33, 65, 17)])
def test_sgemm_matches_float64_reference(shape):
    c, ref, bound = sgemm(*shape)
    assert np.all(np.abs(c - ref) <= bound)


@pytest.mark.parametrize("config", [{"TILE_M": 128, "TILE_N": 256, "TILE_K": 64},
                                    {"TILE_M": 32, "TILE_N": 256, "TILE_K": 16}])
def test_sgemm_other_configurations(config):
    c, ref, bound = sgemm(150, 90, 70, config=config)
    assert np.all(np.abs(c - ref) <= bound)


def test_sgemm_256_is_fast():
    start = time.perf_counter()
    sgemm(256, 256, 256)
    assert time.perf_counter() - start < 2.0


def test_prepared_kernel_runs_repeatedly_and_run_takes_checked_kernels():
    ck = checked(example("add"))
    kernel = prepare(ck)
    for n in (10, 2000):
        a, b, c = np.arange(n, dtype=np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
        kernel.run(cdiv(n, 1024), [a, b, c])
        np.testing.assert_array_equal(c, a + 1)
    c = np.zeros(5, np.float32)
    run(ck, (1,), [np.ones(5, np.float32), np.ones(5, np.float32), c])
    np.testing.assert_array_equal(c, 2)


# ------------------------------------------------------------ the edge contract
EDGE_1D = """
kernel edge(x: tensor<f32>[N], starts: tensor<i32>[2], out: tensor<f32>[2, 8]) {
    out[0, 0 :+ 8] = x[starts[0] :+ 8]
    out[1, 0 :+ 8] = x[starts[1] :+ 8]
}
"""


@pytest.mark.parametrize("start", [-3, -8, -20, 0, 2, 5, 9, 10, 40])
def test_loads_outside_the_tensor_read_zero(start):
    x = np.arange(1, 11, dtype=np.float32)
    out = np.full((2, 8), -1.0, np.float32)
    launch(EDGE_1D, 1, x, np.array([start, 0], np.int32), out)
    want = [x[i] if 0 <= i < 10 else 0.0 for i in range(start, start + 8)]
    np.testing.assert_array_equal(out[0], want)
    np.testing.assert_array_equal(out[1], x[:8])


EDGE_2D = """
kernel edge2(x: tensor<f32>[M, N], r: i32, c: i32, blk: tensor<f32>[4, 4], row: tensor<f32>[4],
             one: tensor<f32>[1]) {
    blk[0 :+ 4, 0 :+ 4] = x[r :+ 4, c :+ 4]
    row[0 :+ 4] = x[r, c :+ 4]
    one[0] = x[r, c]
}
"""


@pytest.mark.parametrize("r, c", [(-2, 5), (3, -1), (4, 6), (9, 0), (-5, -5), (0, 0), (-1, 2)])
def test_2d_loads_pad_with_zeros(r, c):
    x = np.arange(1, 36, dtype=np.float32).reshape(5, 7)
    tile, row, one = np.full((4, 4), -1, np.float32), np.full(4, -1, np.float32), np.full(1, -1, np.float32)
    launch(EDGE_2D, 1, x, r, c, tile, row, one)
    padded = np.zeros((30, 30), np.float32)
    padded[10:15, 10:17] = x
    np.testing.assert_array_equal(tile, padded[r + 10:r + 14, c + 10:c + 14])
    np.testing.assert_array_equal(row, padded[r + 10, c + 10:c + 14])
    assert one[0] == padded[r + 10, c + 10]


STORE_EDGE = """
kernel store(y: tensor<f32>[M, N], r: i32, c: i32, v: tensor<f32>[N]) {
    y[r :+ 4, c :+ 4] = reshape(f32(arange(1, 17)), [4, 4])
    v[c :+ 4] = 7.0
    v[r] = 9.0
}
"""


@pytest.mark.parametrize("r, c", [(-2, 5), (3, -1), (4, 6), (9, 0), (-9, -9), (1, 1)])
def test_stores_write_only_inside_the_tensor(r, c):
    y, v = np.zeros((5, 7), np.float32), np.zeros(7, np.float32)
    launch(STORE_EDGE, 1, y, r, c, v)
    padded = np.zeros((30, 30), np.float32)
    padded[r + 10:r + 14, c + 10:c + 14] = np.arange(1, 17).reshape(4, 4)
    np.testing.assert_array_equal(y, padded[10:15, 10:17])
    want = np.zeros(30, np.float32)
    want[c + 10:c + 14] = 7
    want[r + 10] = 9
    np.testing.assert_array_equal(v, want[10:17])


def test_compound_assignment_to_a_slice_is_load_op_store():
    src = """
    kernel upd(x: tensor<f32>[N], y: tensor<f32>[N], s: tensor<i32>[N]) {
        y[-2 :+ 8] += x[-2 :+ 8]
        y[0 :+ 4] *= 2.0
        y[4 :+ 4] -= 1.0
        y[0 :+ 2] /= 4.0
        s[1 :+ 4] /= -2
    }
    """
    x, y = np.arange(6, dtype=np.float32), np.full(6, 10.0, np.float32)
    s = np.array([5, 7, -7, 8, 9, 11], np.int32)
    launch(src, 1, x, y, s)
    np.testing.assert_array_equal(y, [5.0, 5.5, 24.0, 26.0, 13.0, 14.0])
    np.testing.assert_array_equal(s, [5, -3, 3, -4, -4, 11])


# ------------------------------------------------------------ arithmetic
def test_integer_division_truncates_and_remainder_takes_the_dividends_sign():
    src = """
    kernel divmod(a: tensor<i32>[N], b: tensor<i32>[N], q: tensor<i32>[N], r: tensor<i32>[N],
                  sq: tensor<i32>[2]) {
        let x = a[0 :+ 16]
        let y = b[0 :+ 16]
        q[0 :+ 16] = x / y
        r[0 :+ 16] = x % y
        let s = a[0]
        sq[0] = s / 4
        sq[1] = s % 4
    }
    """
    a = np.array([7, -7, 7, -7, 0, 1, -1, 9, -9, 100, -100, I32_MIN, I32_MIN, I32_MAX, 5, -5], np.int32)
    b = np.array([2, 2, -2, -2, 3, 3, 3, 4, 4, 7, -7, -1, 2, -1, 5, 5], np.int32)
    q, r, sq = np.zeros(16, np.int32), np.zeros(16, np.int32), np.zeros(2, np.int32)
    launch(src, 1, a, b, q, r, sq)
    exact = [abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a.tolist(), b.tolist())]
    np.testing.assert_array_equal(q, np.array(exact, np.int64).astype(np.int32))  # -2^31 / -1 wraps
    np.testing.assert_array_equal(r, [x - qq * y for x, y, qq in zip(a.tolist(), b.tolist(), exact)])
    np.testing.assert_array_equal(sq, [1, 3])


INT_OPS = """
kernel ops(a: tensor<DT>[N], b: tensor<DT>[N], out: tensor<DT>[5, N]) {
    let x = a[0 :+ 16]
    let y = b[0 :+ 16]
    out[0, 0 :+ 16] = x + y
    out[1, 0 :+ 16] = x - y
    out[2, 0 :+ 16] = x * y
    out[3, 0 :+ 16] = x / y
    out[4, 0 :+ 16] = x % y
}
"""
INT_RANGES = {"i32": (np.int32, -(2**31), 2**31 - 1), "i64": (np.int64, -(2**63), 2**63 - 1),
              "u32": (np.uint32, 0, 2**32 - 1)}


def wrap(value, lo, hi):
    return (value - lo) % (hi - lo + 1) + lo


@pytest.mark.parametrize("dt", sorted(INT_RANGES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_integer_arithmetic_against_python_ints(dt, data):
    npt, lo, hi = INT_RANGES[dt]
    xs = data.draw(st.lists(st.integers(lo, hi), min_size=16, max_size=16))
    ys = data.draw(st.lists(st.integers(lo, hi).filter(bool), min_size=16, max_size=16))
    out = np.zeros((5, 16), npt)
    launch(INT_OPS.replace("DT", dt), 1, np.array(xs, npt), np.array(ys, npt), out)
    for row, op in enumerate([lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y,
                              lambda x, y: abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1),
                              lambda x, y: x - abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1) * y]):
        assert out[row].tolist() == [wrap(op(x, y), lo, hi) for x, y in zip(xs, ys)]


F32_OPS = INT_OPS.replace("DT", "f32").replace("tensor<f32>[5, N]", "tensor<f32>[4, N]").replace(
    "    out[4, 0 :+ 16] = x % y\n", "")
f32s = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(xs=st.lists(f32s, min_size=16, max_size=16), ys=st.lists(f32s.filter(bool), min_size=16, max_size=16))
def test_f32_arithmetic_is_correctly_rounded(xs, ys):
    x, y = np.array(xs, np.float32), np.array(ys, np.float32)
    out = np.zeros((4, 16), np.float32)
    launch(F32_OPS, 1, x, y, out)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    # f64 holds every f32 sum, difference and product exactly, and rounding its
    # correctly rounded quotient to f32 rounds the exact quotient correctly
    with np.errstate(over="ignore"):
        want = np.array([x64 + y64, x64 - y64, x64 * y64, x64 / y64]).astype(np.float32)
    np.testing.assert_array_equal(out, want)


def test_unsigned_division():
    src = """
    kernel udiv(a: tensor<u32>[N], q: tensor<u32>[N], r: tensor<u32>[N]) {
        let x = a[0 :+ 4]
        q[0 :+ 4] = x / u32(3)
        r[0 :+ 4] = x % u32(3)
    }
    """
    a = np.array([0, 7, 2**32 - 1, 2**31], np.uint32)
    q, r = np.zeros(4, np.uint32), np.zeros(4, np.uint32)
    launch(src, 1, a, q, r)
    np.testing.assert_array_equal(q, a // 3)
    np.testing.assert_array_equal(r, a % 3)


def test_integers_wrap_around():
    src = """
    kernel wrap(a: tensor<i32>[4], out: tensor<i32>[10], big: i32, u: tensor<u32>[2]) {
        let t = a[0 :+ 4]
        out[0 :+ 4] = t + big
        out[4 :+ 4] = t * t
        out[8] = -a[2]
        out[9] = big * big
        u[0] = u[0] - u32(1)
        u[1] = -u[1]
    }
    """
    a = np.array([1, 2, I32_MIN, 65536], np.int32)
    out, u = np.zeros(10, np.int32), np.array([0, 1], np.uint32)
    launch(src, 1, a, out, I32_MAX, u)
    np.testing.assert_array_equal(out[:4], [I32_MIN, I32_MIN + 1, -1, I32_MIN + 65535])
    np.testing.assert_array_equal(out[4:8], [1, 4, 0, 0])
    assert out[8] == I32_MIN and out[9] == 1
    np.testing.assert_array_equal(u, [2**32 - 1, 2**32 - 1])


def test_f32_rounds_every_operation():
    src = """
    kernel round(x: tensor<f32>[N], big: f32, out: tensor<f32>[N], d: tensor<f64>[N]) {
        out[0] = (big + 1.0) - big
        out[1] = (x[0] + 1.0) - x[0]
        out[2] = x[1] / 3.0
        out[3] = x[1] * 0.1
        d[0] = (f64(big) + 1.0) - f64(big)
        out[4] = x[2] / 0.0
        out[5] = -x[2] / 0.0
        out[6] = 0.0 / x[3]
    }
    """
    x = np.array([1e8, 1.0, 2.0, 0.0, 0, 0, 0], np.float32)
    out, d = np.zeros(7, np.float32), np.zeros(7, np.float64)
    launch(src, 1, x, 1e8, out, d)
    assert out[0] == 0.0 and out[1] == 0.0
    assert out[2] == np.float32(1.0) / np.float32(3.0)
    assert out[3] == np.float32(1.0) * np.float32(0.1)
    assert d[0] == 1.0
    assert out[4] == np.inf and out[5] == -np.inf and np.isnan(out[6])


def test_comparisons_follow_ieee_for_nan():
    src = """
    kernel cmp(x: tensor<f32>[N], out: tensor<i32>[4, N]) {
        let t = x[0 :+ 4]
        out[0, 0 :+ 4] = where(t != t, 1, 0)
        out[1, 0 :+ 4] = where(t == t, 1, 0)
        out[2, 0 :+ 4] = where(t < 1.0 || t >= 1.0, 1, 0)
        out[3, 0 :+ 4] = where(!(t > 0.0) && t <= 2.0, 1, 0)
    }
    """
    x = np.array([np.nan, 1.0, -np.inf, 2.0], np.float32)
    out = np.zeros((4, 4), np.int32)
    launch(src, 1, x, out)
    np.testing.assert_array_equal(out, [[1, 0, 0, 0], [0, 1, 1, 1], [0, 1, 1, 1], [0, 0, 1, 0]])


def test_literals_take_the_dtype_of_their_context():
    src = """
    kernel lits(d: tensor<f64>[N], l: tensor<i64>[N], f: tensor<f32>[N]) {
        let x: f64 = 0.1
        d[0] = x
        d[1] = d[1] * 0.1
        let big = 3000000000
        l[0] = l[0] + big
        f[0] = f[0] * 2
        f[1] = 1 / 2 + f[1]
    }
    """
    d, l, f = np.array([0.0, 3.0]), np.array([5, 0], np.int64), np.array([1.5, 0.25], np.float32)
    launch(src, 1, d, l, f)
    assert d[0] == 0.1 and d[1] == 3.0 * 0.1
    assert l[0] == 3000000005
    np.testing.assert_array_equal(f, [3.0, 0.25])


# ------------------------------------------------------------ builtins
def test_every_builtin_has_an_implementation():
    rules = {b.rule for b in BUILTINS.values() if not b.void}  # effect builtins are statements
    assert rules <= set(interpreter.BUILTIN_RULES)
    assert {b.name for b in BUILTINS.values() if b.rule == "unary_float"} == set(interpreter.UNARY_FLOAT)
    assert {b.name for b in BUILTINS.values() if b.rule == "binary_numeric"} == set(interpreter.BINARY_NUMERIC)


def test_program_ids_run_in_order_axis_0_fastest():
    src = """
    kernel order(counter: tensor<i32>[1], seq: tensor<i32>[Z, Y, X], n: tensor<i32>[3]) {
        let c = atomic_add(counter[0], 1)  // the old value: how many instances ran before this one
        seq[program_id(2), program_id(1), program_id(0)] = c
        n[0 :+ 3] = where(arange(3) == 0, num_programs(0), where(arange(3) == 1, num_programs(1), num_programs(2)))
    }
    """
    counter, seq, n = np.zeros(1, np.int32), np.full((2, 3, 4), -1, np.int32), np.zeros(3, np.int32)
    launch(src, (4, 3, 2), counter, seq, n)
    np.testing.assert_array_equal(seq, np.arange(24).reshape(2, 3, 4))
    np.testing.assert_array_equal(n, [4, 3, 2])
    assert counter[0] == 24


def test_dot_is_exact_then_rounded_and_fuses_with_an_add():
    src = """
    kernel mm(a: tensor<f32>[1, 2], b: tensor<f32>[2, 1], out: tensor<f32>[4]) {
        let x = a[0 :+ 1, 0 :+ 2]
        let y = b[0 :+ 2, 0 :+ 1]
        var acc: tile<f32>[1, 1] = 1.0
        acc += dot(x, y)
        out[0] = acc[0, 0]
        let plain = dot(x, y)
        out[1] = plain[0, 0]
        let fused = dot(x, y) + full([1, 1], 1.0)
        out[2] = fused[0, 0]
        let separate = plain + 1.0
        out[3] = separate[0, 0]
    }
    """
    a, b = np.array([[2.0**24, 1.0]], np.float32), np.array([[1.0], [1.0]], np.float32)
    out = np.zeros(4, np.float32)
    launch(src, 1, a, b, out)
    # exact 2^24 + 1 rounds to 2^24 alone, but 1 + 2^24 + 1 is representable when fused
    np.testing.assert_array_equal(out, [2.0**24 + 2, 2.0**24, 2.0**24 + 2, 2.0**24])


def test_dot_f64():
    src = """
    kernel mm64(a: tensor<f64>[M, K], b: tensor<f64>[K, N], c: tensor<f64>[M, N]) {
        c[0 :+ 4, 0 :+ 3] = dot(a[0 :+ 4, 0 :+ 8], b[0 :+ 8, 0 :+ 3])
    }
    """
    rng = np.random.default_rng(1)
    a, b, c = rng.standard_normal((4, 8)), rng.standard_normal((8, 3)), np.zeros((4, 3))
    launch(src, 1, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-13)


def test_row_softmax():
    src = """
    @autotune(ROWS in [4], COLS in [16])
    kernel softmax(x: tensor<f32>[M, N], y: tensor<f32>[M, N]) {
        let r = program_id(0) * ROWS
        let t = x[r :+ ROWS, 0 :+ COLS]
        let e = exp(t - max(t, axis=1))
        y[r :+ ROWS, 0 :+ COLS] = e / sum(e, axis=1)
    }
    """
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((10, 16)) * 5).astype(np.float32)
    y = np.zeros_like(x)
    launch(src, 3, x, y)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-6, atol=1e-7)


def test_layer_norm_with_a_masked_ragged_row():
    src = """
    @autotune(COLS in [32])
    kernel layernorm(x: tensor<f32>[M, N], w: tensor<f32>[N], b: tensor<f32>[N], y: tensor<f32>[M, N],
                     eps: f32) {
        let row = program_id(0)
        let t = x[row, 0 :+ COLS]
        let n = f32(N)
        let mean = sum(t) / n
        let d = where(arange(COLS) < N, t - mean, 0.0)
        let variance = sum(d * d) / n
        y[row, 0 :+ COLS] = d * rsqrt(variance + eps) * w[0 :+ COLS] + b[0 :+ COLS]
    }
    """
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 20)).astype(np.float32) * 3 + 1
    w, b = rng.standard_normal(20).astype(np.float32), rng.standard_normal(20).astype(np.float32)
    y = np.zeros_like(x)
    launch(src, 6, x, w, b, y, 1e-5)
    x64 = x.astype(np.float64)
    mu, var = x64.mean(axis=1, keepdims=True), x64.var(axis=1, keepdims=True)
    np.testing.assert_allclose(y, (x64 - mu) / np.sqrt(var + 1e-5) * w + b, rtol=2e-5, atol=2e-5)


def test_reductions_ties_and_nan():
    src = """
    kernel red(x: tensor<f32>[4, 6], amax: tensor<i32>[4], amin: tensor<i32>[6], flat: tensor<i32>[2],
               mx: tensor<f32>[4], mn: tensor<f32>[6], total: tensor<f32>[3]) {
        let t = x[0 :+ 4, 0 :+ 6]
        amax[0 :+ 4] = reshape(argmax(t, axis=1), [4])
        amin[0 :+ 6] = reshape(argmin(t, 0), [6])
        flat[0] = argmax(t)
        flat[1] = argmin(t, axis=-2 + 2 - 1 + 1)[0, 0] * 0 + argmin(t)
        mx[0 :+ 4] = reshape(max(t, axis=1), [4])
        mn[0 :+ 6] = reshape(min(t, 0), [6])
        total[0] = max(t)
        total[1] = min(t)
        total[2] = sum(sum(t, axis=0))
    }
    """
    x = np.array([[1, 5, 5, 0, 5, 2],
                  [np.nan, 3, 3, np.nan, 1, 3],
                  [-1, -1, -1, -1, -1, -1],
                  [np.nan, np.nan, np.nan, np.nan, np.nan, np.nan]], np.float32)
    amax, amin, flat = np.zeros(4, np.int32), np.zeros(6, np.int32), np.zeros(2, np.int32)
    mx, mn, total = np.zeros(4, np.float32), np.zeros(6, np.float32), np.zeros(3, np.float32)
    launch(src, 1, x, amax, amin, flat, mx, mn, total)
    np.testing.assert_array_equal(amax, [1, 1, 0, 0])
    np.testing.assert_array_equal(amin, [2, 2, 2, 2, 2, 2])
    np.testing.assert_array_equal(flat, [1, 12])
    np.testing.assert_array_equal(mx, [5, 3, -1, np.nan])
    np.testing.assert_array_equal(mn, [-1, -1, -1, -1, -1, -1])
    assert total[0] == 5 and total[1] == -1 and np.isnan(total[2])


def test_integer_reductions_wrap_and_keep_their_dtype():
    src = """
    kernel ired(x: tensor<i32>[N], out: tensor<i32>[4]) {
        let t = x[0 :+ 4]
        out[0] = sum(t)
        out[1] = max(t)
        out[2] = min(t)
        out[3] = argmin(t)
    }
    """
    x = np.array([I32_MAX, 5, 1, 2], np.int32)
    out = np.zeros(4, np.int32)
    launch(src, 1, x, out)
    np.testing.assert_array_equal(out, [I32_MIN + 7, I32_MAX, 1, 2])


MATH = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": np.vectorize(math.erf), "gelu": lambda x: x * np.vectorize(math.erfc)(-x / math.sqrt(2)) / 2,
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "round": np.rint, "trunc": np.trunc,
}
MATH_CASES = [(name, str(dtype)) for name in sorted(MATH) for dtype in BUILTINS[name].dtypes]


@pytest.mark.parametrize("name,dtype", MATH_CASES)
def test_math_functions(name, dtype):  # f64 only where the back end has it (test_builtin_parity)
    src = f"""
    kernel m(x: tensor<{dtype}>[N], y: tensor<{dtype}>[N], s: tensor<{dtype}>[1]) {{
        y[0 :+ 64] = {name}(x[0 :+ 64])
        s[0] = {name}(x[3])
    }}
    """
    npt = np.float32 if dtype == "f32" else np.float64
    x = (np.linspace(0.05, 4.0, 64) * (-1.0) ** np.arange(64)).astype(npt)
    if name in ("log", "log2", "sqrt", "rsqrt"):
        x = np.abs(x)
    y, s = np.zeros(64, npt), np.zeros(1, npt)
    launch(src, 1, x, y, s)
    want = MATH[name](x.astype(np.float64))
    # sin and cos reduce their argument as the GPU does (a product by 1/(2 pi) rounded to f32), and log and
    # log2 of f32 are lg2.approx's bits, whose error is absolute (2^-22 near x = 1): their documented bounds
    # are absolute
    atol = 2 ** -20.5 if name in ("sin", "cos") else 2 ** -22 if name in ("log", "log2") and dtype == "f32" else 0
    np.testing.assert_allclose(y, want, rtol=1e-6 if dtype == "f32" else 1e-14, atol=atol)
    assert y.dtype == npt and s[0] == y[3]


def test_math_of_an_integer_literal_is_f32():
    src = """
    kernel lit(y: tensor<f32>[1]) {
        y[0] = sqrt(2)
    }
    """
    y = np.zeros(1, np.float32)
    launch(src, 1, y)
    assert y[0] == np.float32(math.sqrt(2))


def test_abs_maximum_minimum_full_cdiv():
    src = """
    kernel misc(x: tensor<f32>[8], z: tensor<f32>[8], n: tensor<i32>[8], out: tensor<f32>[3, 8],
                iout: tensor<i32>[3, 8]) {
        let t = x[0 :+ 8]
        out[0, 0 :+ 8] = maximum(t, z[0 :+ 8])
        out[1, 0 :+ 8] = minimum(t, 0.5)
        out[2, 0 :+ 8] = abs(t) + full([8], 1.0)
        let k = n[0 :+ 8]
        iout[0, 0 :+ 8] = abs(k)
        iout[1, 0 :+ 8] = cdiv(maximum(k, 0), 3)
        iout[2, 0 :+ 8] = minimum(k, full([1], 2))
    }
    """
    x = np.array([-2, -0.0, 0.25, 1, np.nan, 3, np.nan, -np.inf], np.float32)
    z = np.array([1, 0, -1, 2, 1, np.nan, np.nan, 0], np.float32)
    n = np.array([0, 1, 2, 3, 4, -5, I32_MIN, 9], np.int32)
    out, iout = np.zeros((3, 8), np.float32), np.zeros((3, 8), np.int32)
    launch(src, 1, x, z, n, out, iout)
    np.testing.assert_array_equal(out[0], [1, 0, 0.25, 2, 1, 3, np.nan, 0])
    np.testing.assert_array_equal(out[1], [-2, 0, 0.25, 0.5, 0.5, 0.5, 0.5, -np.inf])
    np.testing.assert_array_equal(out[2], [3, 1, 1.25, 2, np.nan, 4, np.nan, np.inf])
    np.testing.assert_array_equal(iout[0], [0, 1, 2, 3, 4, 5, I32_MIN, 9])
    np.testing.assert_array_equal(iout[1], [0, 1, 1, 1, 2, 0, 0, 3])
    np.testing.assert_array_equal(iout[2], [0, 1, 2, 2, 2, -5, I32_MIN, 2])


def test_scalar_cdiv_and_constant_cdiv():
    src = """
    @autotune(B in [64])
    kernel cd(n: i32, out: tensor<i32>[2]) {
        out[0] = cdiv(n, B)
        out[1] = cdiv(100, B)
    }
    """
    out = np.zeros(2, np.int32)
    launch(src, 1, 129, out)
    np.testing.assert_array_equal(out, [3, 2])


def test_where_with_masks_from_arange():
    src = """
    kernel mask(x: tensor<f32>[N], y: tensor<f32>[2, N]) {
        let i = arange(8)
        let t = x[0 :+ 8]
        y[0, 0 :+ 8] = where(i % 2 == 0 && i < 6, t, -t)
        let rows = reshape(arange(2, 4), [2, 1])
        y[0 :+ 2, 0 :+ 8] += where(rows * 4 > i, 100.0, 0.0)
    }
    """
    x = np.arange(1, 9, dtype=np.float32)
    y = np.zeros((2, 8), np.float32)
    launch(src, 1, x, y)
    first = np.where((np.arange(8) % 2 == 0) & (np.arange(8) < 6), x, -x)
    np.testing.assert_array_equal(y[0], first + np.where(8 > np.arange(8), 100, 0))
    np.testing.assert_array_equal(y[1], np.where(12 > np.arange(8), 100, 0))


def test_atomic_add_sums_a_vector_and_skips_outside_elements():
    src = """
    @autotune(BLOCK in [64])
    kernel total(x: tensor<f32>[N], out: tensor<f32>[1], hist: tensor<i32>[8]) {
        let base = program_id(0) * BLOCK
        atomic_add(out[0], sum(x[base :+ BLOCK]))
        atomic_add(hist[program_id(0) - 2 :+ 4], 1)
    }
    """
    x = np.arange(300, dtype=np.float32)
    out, hist = np.zeros(1, np.float32), np.zeros(8, np.int32)
    launch(src, cdiv(300, 64), x, out, hist)
    assert out[0] == x.sum()
    want = np.zeros(8, np.int32)
    for p in range(5):
        want[max(p - 2, 0):p + 2] += 1
    np.testing.assert_array_equal(hist, want)


def test_reshape_and_tile_parts():
    src = """
    kernel shapes(x: tensor<i32>[16], a: tensor<i32>[4, 4], b: tensor<i32>[3], c: tensor<i32>[1]) {
        let t = reshape(x[0 :+ 16], [2, 8])
        a[0 :+ 4, 0 :+ 4] = reshape(t, [4, 4])
        b[0 :+ 3] = t[1, 2 :+ 3]
        c[0] = t[0, 7]
    }
    """
    x = np.arange(16, dtype=np.int32) * 3
    a, b, c = np.zeros((4, 4), np.int32), np.zeros(3, np.int32), np.zeros(1, np.int32)
    launch(src, 1, x, a, b, c)
    np.testing.assert_array_equal(a, x.reshape(4, 4))
    np.testing.assert_array_equal(b, x.reshape(2, 8)[1, 2:5])
    assert c[0] == x[7]


CASTS = """
kernel casts(x: tensor<f32>[N], i: tensor<i32>[N], u: tensor<u32>[N], l: tensor<i64>[N], back: tensor<f32>[N]) {
    let t = x[0 :+ 8]
    i[0 :+ 8] = i32(t)
    u[0 :+ 8] = u32(t)
    l[0 :+ 8] = i64(f64(t) * 1e10)
    back[0 :+ 8] = f32(i[0 :+ 8])
}
"""


def test_float_to_int_casts_truncate_and_saturate():
    x = np.array([2.7, -2.7, 1e10, -1e10, np.nan, np.inf, -np.inf, 5e9], np.float32)
    i, u, l, back = (np.zeros(8, d) for d in (np.int32, np.uint32, np.int64, np.float32))
    launch(CASTS, 1, x, i, u, l, back)
    np.testing.assert_array_equal(i, [2, -2, I32_MAX, I32_MIN, 0, I32_MAX, I32_MIN, I32_MAX])
    np.testing.assert_array_equal(u, [2, 0, 2**32 - 1, 0, 0, 2**32 - 1, 0, 2**32 - 1])
    i64_max, i64_min = 2**63 - 1, -(2**63)
    np.testing.assert_array_equal(l, [np.int64(np.float64(np.float32(2.7)) * 1e10),
                                      np.int64(np.float64(np.float32(-2.7)) * 1e10),
                                      i64_max, i64_min, 0, i64_max, i64_min, i64_max])
    np.testing.assert_array_equal(back, i.astype(np.float32))


def test_integer_and_float_casts_wrap_and_round():
    src = """
    kernel icasts(a: tensor<i64>[N], b: tensor<i32>[N], f: tensor<f32>[N], u: tensor<u32>[N], d: tensor<f64>[N]) {
        b[0 :+ 2] = i32(a[0 :+ 2])
        u[0 :+ 2] = u32(b[2 :+ 2])
        f[0] = f32(b[4])
        f[1] = f32(d[0])
        d[1] = f64(u[2])
        b[5] = i32(u[2])
        f[2] = f32(b[6] > 0)
    }
    """
    a = np.array([2**32 + 5, -(2**31) - 1, 0, 0, 0, 0, 0], np.int64)
    b = np.array([0, 0, -1, 3, 16777217, 0, 7], np.int32)
    f = np.zeros(7, np.float32)
    u = np.array([0, 0, 2**32 - 1, 0, 0, 0, 0], np.uint32)
    d = np.array([1 / 3, 0, 0, 0, 0, 0, 0])
    launch(src, 1, a, b, f, u, d)
    np.testing.assert_array_equal(b[:2], [5, I32_MAX])
    np.testing.assert_array_equal(u[:2], [2**32 - 1, 3])
    assert f[0] == 16777216.0 and f[1] == np.float32(1 / 3) and f[2] == 1.0
    assert d[1] == 2**32 - 1 and b[5] == -1


# ------------------------------------------------------------ storage dtypes
def test_storage_dtypes_load_promoted_and_store_rounded():
    src = """
    kernel storage(h: tensor<f16>[9], bf: tensor<bf16>[9], b8: tensor<i8>[8], s16: tensor<i16>[8],
                   out: tensor<f32>[13], io: tensor<i32>[8]) {
        out[0 :+ 4] = h[0 :+ 4] * 2.0     // f16 arithmetic: 65504 * 2 overflows to inf
        out[4 :+ 4] = bf[0 :+ 4]
        io[0 :+ 4] = b8[0 :+ 4] + s16[0 :+ 4]
        h[4 :+ 5] = out[8 :+ 5]
        bf[4 :+ 5] = out[8 :+ 5]
        b8[4 :+ 4] = io[4 :+ 4]
        s16[4 :+ 4] = io[4 :+ 4]
    }
    """
    h = np.array([1.5, -2, 65504, 0.1, 0, 0, 0, 0, 0], np.float16)
    bf = np.array([0x3F80, 0xC000, 0x7F80, 0x3FC0, 0, 0, 0, 0, 0], np.uint16)  # 1, -2, inf, 1.5
    b8 = np.array([-128, 127, 5, -1, 0, 0, 0, 0], np.int8)
    s16 = np.array([1000, -1, 0, 32767, 0, 0, 0, 0], np.int16)
    out = np.zeros(13, np.float32)
    # halfway cases of f16 (10 fraction bits) and bf16 (7) round to even; NaN stays NaN
    out[8:13] = [1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8, np.nan]
    io = np.array([0, 0, 0, 0, 200, -129, 65535, 70000], np.int32)
    launch(src, 1, h, bf, b8, s16, out, io)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out[:4], (h[:4] * np.float16(2)).astype(np.float32))
    np.testing.assert_array_equal(out[4:8], [1, -2, np.inf, 1.5])
    np.testing.assert_array_equal(io[:4], [872, 126, 5, 32766])
    np.testing.assert_array_equal(h[4:8], [1.0, 1 + 2.0**-9, 1 + 2.0**-8, 1 + 3 * 2.0**-8])
    assert np.isnan(h[8])
    np.testing.assert_array_equal(bf[4:8], [0x3F80, 0x3F80, 0x3F80, 0x3F82])
    assert bf[8] & 0x7F80 == 0x7F80 and bf[8] & 0x7F
    np.testing.assert_array_equal(b8[4:], [-56, 127, -1, 112])
    np.testing.assert_array_equal(s16[4:], [200, -129, -1, 4464])


def test_bf16_arrays_from_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    src = """
    kernel scale(x: tensor<bf16>[N]) {
        x[0 :+ 4] = x[0 :+ 4] * 3.0
    }
    """
    x = np.array([1, 1.5, -2, 0.1], ml_dtypes.bfloat16)
    want = (x.astype(np.float32) * 3).astype(ml_dtypes.bfloat16)
    launch(src, 1, x)
    np.testing.assert_array_equal(x.astype(np.float32), want.astype(np.float32))


# ------------------------------------------------------------ control flow
def test_loops_with_negative_steps_and_empty_ranges():
    src = """
    kernel loops(out: tensor<i32>[N], count: tensor<i32>[3]) {
        var k = 0
        for i in range(10, 0, -2) {
            out[k] = i
            k += 1
        }
        count[0] = k
        var n = 0
        for j in range(0, 0) { n += 1 }
        for j in range(5, 1) { n += 1 }
        for j in range(1, 5, -1) { n += 1 }
        for j in range(N - 1, -1, -3) { n += 100 }
        count[1] = n
        var s = 0
        for a in range(0, 4) {
            for b in range(a, 4) {
                s += a * 10 + b
            }
        }
        count[2] = s
    }
    """
    out, count = np.zeros(7, np.int32), np.zeros(3, np.int32)
    launch(src, 1, out, count)
    np.testing.assert_array_equal(out[:5], [10, 8, 6, 4, 2])
    np.testing.assert_array_equal(count, [5, 300, sum(a * 10 + b for a in range(4) for b in range(a, 4))])


def test_if_else_chains_and_scoping():
    src = """
    kernel classify(x: tensor<f32>[N], out: tensor<i32>[N], flags: tensor<i32>[2]) {
        var seen = 0
        for i in range(0, N) {
            let v = x[i]
            if v < 0.0 {
                out[i] = -1
            } else if v == 0.0 {
                out[i] = 0
            } else if v < 10.0 {
                let v = 1
                out[i] = v
                seen += 1
            } else {
                out[i] = 2
            }
        }
        flags[0] = seen
        if seen > 100 { flags[1] = 1 } else { flags[1] = -1 }
    }
    """
    x = np.array([-3, 0, 5, 10, 9.5, np.nan, -0.0], np.float32)
    out, flags = np.zeros(7, np.int32), np.zeros(2, np.int32)
    launch(src, 1, x, out, flags)
    np.testing.assert_array_equal(out, [-1, 0, 1, 2, 1, 2, 0])
    np.testing.assert_array_equal(flags, [2, -1])


def test_kernel_is_chosen_by_name():
    src = """
    kernel one(x: tensor<i32>[1]) { x[0] = 1 }
    kernel two(x: tensor<i32>[1]) { x[0] = 2 }
    """
    x = np.zeros(1, np.int32)
    launch(src, 1, x, kernel="two")
    assert x[0] == 2


# ------------------------------------------------------------ errors
SCALE = """
kernel scale(x: tensor<f32>[N], y: tensor<f32>[N], m: tensor<f32>[N, 4], k: tensor<i32>[3], a: f32, n: i32) {
    y[0] = x[0] * a + f32(n) + m[0, 0] + f32(k[0])
}
"""


def scale_args(**change):
    args = dict(x=np.zeros(5, np.float32), y=np.zeros(5, np.float32), m=np.zeros((5, 4), np.float32),
                k=np.zeros(3, np.int32), a=1.0, n=2)
    args.update(change)
    return list(args.values())


@pytest.mark.parametrize("change, name, words", [
    (dict(x=np.zeros(5, np.float64)), "x", "float32"),
    (dict(x=[1.0, 2.0]), "x", "numpy array"),
    (dict(m=np.zeros(20, np.float32)), "m", "2 dimensions"),
    (dict(y=np.zeros(6, np.float32)), "y", "size 'N'"),
    (dict(m=np.zeros((4, 4), np.float32)), "m", "size 'N'"),
    (dict(m=np.zeros((5, 3), np.float32)), "m", "must be 4"),
    (dict(k=np.zeros(4, np.int32)), "k", "must be 3"),
    (dict(a="2"), "a", "f32 scalar"),
    (dict(a=np.zeros(2)), "a", "f32 scalar"),
    (dict(n=1.5), "n", "i32 scalar"),
    (dict(n=True), "n", "i32 scalar"),
    (dict(n=2**31), "n", "does not fit"),
])
def test_bad_arguments_name_the_parameter(change, name, words):
    with pytest.raises(LaunchError) as info:
        launch(SCALE, 1, *scale_args(**change))
    assert f"'{name}'" in info.value.message and words in info.value.message
    assert str(info.value).startswith(f"{FILE}:2:")


def test_read_only_output_and_argument_count_and_grid():
    y = np.zeros(5, np.float32)
    y.flags.writeable = False
    with pytest.raises(LaunchError, match="'y' is stored into"):
        launch(SCALE, 1, *scale_args(y=y))
    with pytest.raises(LaunchError, match=r"takes 6 arguments \(x, y, m, k, a, n\), got 5"):
        launch(SCALE, 1, *scale_args()[:5])
    for grid in [0, (1, 2, 3, 4), (2, -1), (1.5,), ()]:
        with pytest.raises(LaunchError, match="grid"):
            launch(SCALE, grid, *scale_args())


def test_valid_scalar_arguments_are_converted():
    src = """
    kernel conv(out: tensor<f32>[2], a: f32, n: i64, b: bool) {
        out[0] = a
        if b { out[1] = f32(n) }
    }
    """
    out = np.zeros(2, np.float32)
    launch(src, 1, out, np.float64(0.1), np.int32(7), np.bool_(True))
    np.testing.assert_array_equal(out, [np.float32(0.1), 7.0])
    launch(src, 1, out, 3, 2**40, False)
    np.testing.assert_array_equal(out, [3.0, 7.0])


def test_integer_division_by_zero_divides_by_one():
    src = """kernel div(a: tensor<i32>[N, 4], d: tensor<i32>[N]) {
    let t = a[program_id(0), 0 :+ 4]
    for i in range(0, 1) {
        a[program_id(0), 0 :+ 4] = t / d[program_id(0)]
    }
}
"""
    a, d = np.tile(np.arange(4, dtype=np.int32), (4, 1)), np.array([1, 2, 0, 4], np.int32)
    launch(src, 4, a, d)
    np.testing.assert_array_equal(a, [[0, 1, 2, 3], [0, 0, 1, 1], [0, 1, 2, 3], [0, 0, 0, 0]])  # / 1, 2, 0 (= 1), 4


def test_an_internal_fault_is_reported_at_its_statement(monkeypatch):
    def broken(x):
        raise ValueError("broken")
    monkeypatch.setitem(interpreter.UNARY_FLOAT, "log10", broken)
    src = """kernel e(a: tensor<f32>[N]) {
    a[0] = log10(a[0])
}
"""
    with pytest.raises(ExecutionError, match="internal error in the interpreter .ValueError: broken.") as info:
        launch(src, 1, np.ones(2, np.float32))
    assert info.value.loc.line == 2


def test_atomic_add_gives_the_old_values():
    src = """kernel k(a: tensor<f32>[N], old: tensor<f32>[N]) {
    old[0 :+ 4] = atomic_add(a[0 :+ 4], 1.0)
}
"""
    a, old = np.arange(3, dtype=np.float32), np.full(3, 9.0, np.float32)
    launch(src, 1, a, old)
    np.testing.assert_array_equal(a, [1, 2, 3])
    np.testing.assert_array_equal(old, [0, 1, 2])


def test_remainder_by_zero_in_a_scalar_is_zero():
    src = """kernel rem(a: tensor<i32>[N], d: i32) {
    a[0] = a[1] % d + a[1] / d
}
"""
    a = np.array([5, 7], np.int32)
    launch(src, 1, a, 0)
    np.testing.assert_array_equal(a, [7, 7])  # 7 % 0 + 7 / 0 = 0 + 7


# ------------------------------------------------------------ races between program instances
RACY_SUM = """
kernel s(x: tensor<f32>[N], y: tensor<f32>[1]) {
    let p = program_id(0)
    y[0] = sum(x[p * 4 :+ 4])
}
"""


def test_instances_storing_different_values_to_one_element_race():
    """16 instances storing their own sums into y[0] gave y = [246] (the last one's); now a located RaceError."""
    x, y = np.arange(64, dtype=np.float32), np.zeros(1, np.float32)
    with pytest.raises(RaceError) as info:
        launch(RACY_SUM, 16, x, y)
    assert isinstance(info.value, ExecutionError) and info.value.loc.line == 4
    assert info.value.message == ("data race on 'y': program (1, 0, 0) stores 22 at element (0), where program "
                                  "(0, 0, 0) stored 6; nothing orders program instances (atomic_add combines "
                                  "their values)")


def test_the_emulator_reports_the_same_race_as_the_same_kind():
    """The emulator's GlobalMemoryRace is a RaceError too: one `except` serves both CPU modes."""
    import phobos
    kernel = phobos.kernel(RACY_SUM, mode="emulate")
    with pytest.raises(RaceError) as info:
        kernel[(16,)](np.arange(64, dtype=np.float32), np.zeros(1, np.float32))
    assert info.value.loc.line == 4


def test_equal_stores_atomics_and_own_stores_do_not_race():
    same = """
    kernel k(y: tensor<f32>[M], z: tensor<f32>[N]) {
        y[0 :+ 4] = 1.0                 // every instance stores the same values
        atomic_add(z[0 :+ 4], 1.0)      // atomics are ordered
        z[program_id(0) * 4 + 8] = 2.0  // each instance its own element...
        z[program_id(0) * 4 + 8] = 3.0  // ...twice
    }
    """
    y, z = np.zeros(4, np.float32), np.zeros(24, np.float32)
    launch(same, 4, y, z)
    assert (y == 1).all() and (z[:4] == 4).all() and (z[8::4] == 3).all()


def test_a_scatter_race_names_the_element():
    scatter = """
    kernel k(y: tensor<i32>[N], where: tensor<i32>[M]) {
        y[where[0 :+ 4]] = arange(0, 4) + program_id(0) * 10
    }
    """
    y, where = np.zeros(8, np.int32), np.array([5, 1, 2, 3], np.int32)
    with pytest.raises(RaceError, match=r"program \(1, 0, 0\) stores 10 at element \(5\), where program "
                                        r"\(0, 0, 0\) stored 0"):
        launch(scatter, 2, y, where)


def test_the_quick_start_loads_neither_ml_dtypes_nor_the_emulator():
    """Importing the interpreter imported ml_dtypes (0.57 s of a 0.87 s quick start) and the emulator."""
    import subprocess
    import sys
    from pathlib import Path
    script = ("import sys, numpy as np, phobos\n"
              "mod = phobos.load('examples/sgemm.phobos', mode='interpret')\n"
              "A, B, C = (np.ones(s, np.float32) for s in ((40, 30), (30, 70), (40, 70)))\n"
              "mod.sgemm(A, B, C, alpha=1.0, beta=0.0)\n"
              "assert (C == 30).all()\n"
              "print(sorted(m for m in ('ml_dtypes', 'phobos.run.emulator') if m in sys.modules))\n")
    root = Path(__file__).parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
