# The language's one definition of values (phobos.constants): hand-checked
# cases of every rule, then the definition against the PTX the compiler emits
# (run by the emulator, exact where PTX is exact) and against the constants the
# checker folds, so that the checker, the folding passes, the interpreter and
# the GPU cannot disagree.
from __future__ import annotations

import math

import numpy as np
import pytest

import phobos
from phobos import constants
from phobos.constants import convert, convert_array, evaluate, exact, fits, int_range, largest_float
from phobos.types import DType

I32_MIN, I32_MAX = -2**31, 2**31 - 1
F32_MAX = float(np.finfo(np.float32).max)


# ------------------------------------------------------------ the rules, by hand
@pytest.mark.parametrize("a, b, quotient, remainder", [
    (7, 2, 3, 1), (-7, 2, -3, -1), (7, -2, -3, 1), (-7, -2, 3, -1), (6, 3, 2, 0), (-1, 7, 0, -1),
    (I32_MIN, -1, I32_MIN, 0),  # the one overflowing quotient wraps, as div.s32 gives it
])
def test_integer_division_truncates_and_the_remainder_takes_the_dividends_sign(a, b, quotient, remainder):
    i32 = [DType.I32, DType.I32]
    assert evaluate("div", {}, [a, b], i32, DType.I32) == quotient
    assert evaluate("rem", {}, [a, b], i32, DType.I32) == remainder


def test_unsigned_division():
    u32 = [DType.U32, DType.U32]
    assert evaluate("div", {}, [4294967295, 2], u32, DType.U32) == 2147483647
    assert evaluate("rem", {}, [4294967295, 10], u32, DType.U32) == 5


@pytest.mark.parametrize("dtype", [DType.I32, DType.I64, DType.U32])
def test_a_zero_integer_divisor_counts_as_one(dtype):
    both = [dtype, dtype]
    low, high = int_range(dtype)
    for a in (7, high, low, 0, 1):
        assert evaluate("div", {}, [a, 0], both, dtype) == a
        assert evaluate("rem", {}, [a, 0], both, dtype) == 0
    x, y = np.array([5, 6, 7], constants.NUMPY[dtype]), np.array([2, 0, 3], constants.NUMPY[dtype])
    np.testing.assert_array_equal(constants.divide(x, y), [2, 6, 2])
    np.testing.assert_array_equal(constants.remainder(x, y), [1, 0, 1])
    assert evaluate("div", {}, [1.0, 0.0], [DType.F32, DType.F32], DType.F32) == math.inf


@pytest.mark.parametrize("a, b, ceiling", [
    (0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (-5, 4, -1), (-4, 4, -1), (5, -4, -1), (-5, -4, 2),
    (I32_MAX, 4, 2**29), (I32_MAX, 1, I32_MAX), (I32_MIN, 3, -715827882), (I32_MIN + 1, -2, 2**30),
    (I32_MAX, -1, -I32_MAX), (7, 0, 7),  # a zero divisor counts as 1, as for `/`
])
def test_cdiv_is_the_exact_quotient_rounded_up(a, b, ceiling):
    assert evaluate("cdiv", {}, [a, b], [DType.I32, DType.I32], DType.I32) == ceiling
    if b != 0:
        assert ceiling == -(-a // b)  # Python's floor division gives the exact ceiling


def test_cdiv_of_unsigned_and_64_bit_integers_does_not_wrap():
    assert evaluate("cdiv", {}, [2**32 - 1, 2], [DType.U32, DType.U32], DType.U32) == 2**31
    assert evaluate("cdiv", {}, [2**63 - 1, 8], [DType.I64, DType.I64], DType.I64) == 2**60


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64])
def test_maximum_and_minimum_take_positive_zero_above_negative_zero(dtype):
    both = [dtype, dtype]
    for a, b in ((-0.0, 0.0), (0.0, -0.0)):
        assert math.copysign(1, evaluate("max", {}, [a, b], both, dtype)) == 1
        assert math.copysign(1, evaluate("min", {}, [a, b], both, dtype)) == -1
    assert evaluate("max", {}, [math.nan, -0.0], both, dtype) == 0.0
    assert math.isnan(evaluate("min", {}, [math.nan, math.nan], both, dtype))
    x = np.array([[-0.0, 0.0, -0.0], [-0.0, -0.0, -1.0], [0.0, 0.0, math.nan]], constants.NUMPY[dtype])
    big = constants.reduce_extreme("max", x, 1, False)
    small = constants.reduce_extreme("min", x, 1, False)
    assert list(np.signbit(big)) == [False, True, False] and list(big) == [0.0, 0.0, 0.0]
    assert list(np.signbit(small)) == [True, True, False] and list(small) == [0.0, -1.0, 0.0]
    assert not np.signbit(constants.reduce_extreme("max", x, None, False))
    assert np.signbit(constants.reduce_extreme("min", x[:, :2], None, False))


def test_integers_wrap():
    assert evaluate("add", {}, [I32_MAX, 1], [DType.I32] * 2, DType.I32) == I32_MIN
    assert evaluate("mul", {}, [65536, 65536], [DType.I32] * 2, DType.I32) == 0
    assert evaluate("sub", {}, [0, 1], [DType.U32] * 2, DType.U32) == 2**32 - 1
    assert evaluate("neg", {}, [I32_MIN], [DType.I32], DType.I32) == I32_MIN
    assert evaluate("abs", {}, [I32_MIN], [DType.I32], DType.I32) == I32_MIN


def test_f32_rounds_once_per_operation():
    f32 = [DType.F32, DType.F32]
    assert evaluate("add", {}, [16777216.0, 1.0], f32, DType.F32) == 16777216.0  # 2^24 + 1 is not an f32
    assert evaluate("add", {}, [16777216.0, 1.0], [DType.F64] * 2, DType.F64) == 16777217.0
    third = evaluate("div", {}, [1.0, 3.0], f32, DType.F32)
    assert third == float(np.float32(1 / 3)) and third != 1 / 3
    assert evaluate("mul", {}, [F32_MAX, 2.0], f32, DType.F32) == math.inf


def test_nan_compares_false_except_not_equal_and_min_max_ignore_it():
    nan, f32 = math.nan, [DType.F32, DType.F32]
    for pred, want in (("eq", False), ("ne", True), ("lt", False), ("le", False), ("gt", False), ("ge", False)):
        assert evaluate("cmp", {"pred": pred}, [nan, nan], f32, DType.BOOL) is want
        assert evaluate("cmp", {"pred": pred}, [nan, 1.0], f32, DType.BOOL) is want
    assert evaluate("max", {}, [nan, 2.0], f32, DType.F32) == 2.0
    assert evaluate("min", {}, [3.0, nan], f32, DType.F32) == 3.0


@pytest.mark.parametrize("value, dtype, want", [
    (2.7, DType.I32, 2), (-2.7, DType.I32, -2), (3e9, DType.I32, I32_MAX), (-3e9, DType.I32, I32_MIN),
    (math.inf, DType.I32, I32_MAX), (-math.inf, DType.I64, -2**63), (math.nan, DType.I32, 0),
    (-1.5, DType.U32, 0), (5e9, DType.U32, 2**32 - 1), (1e30, DType.I64, 2**63 - 1),
    (2**32 + 5, DType.I32, 5), (-1, DType.U32, 2**32 - 1), (2**31, DType.I32, I32_MIN),
    (0.1, DType.F32, float(np.float32(0.1))), (1e39, DType.F32, math.inf), (16777217, DType.F32, 16777216.0),
    (2**63 - 1, DType.F64, 2.0**63), (3, DType.F64, 3.0), (2.0, DType.BOOL, True), (0, DType.BOOL, False),
    (True, DType.I32, 1),
])
def test_conversions(value, dtype, want):
    got = convert(value, dtype)
    assert got == want and type(got) is type(want)


def test_array_conversions_are_the_constant_ones():
    x = np.array([2.7, -2.7, 3e9, -3e9, np.inf, -np.inf, np.nan, 1e30], np.float32)
    for dtype in (DType.I32, DType.U32, DType.I64):
        got = convert_array(x, dtype)
        assert got.dtype == constants.NUMPY[dtype]
        assert [int(v) for v in got] == [convert(float(v), dtype) for v in x]


@pytest.mark.parametrize("value, dtype, ok", [
    (I32_MAX, DType.I32, True), (I32_MAX + 1, DType.I32, False), (I32_MIN, DType.I32, True),
    (I32_MIN - 1, DType.I32, False), (-1, DType.U32, False), (2**32 - 1, DType.U32, True),
    (127, DType.I8, True), (128, DType.I8, False), (2**63, DType.I64, False),
    (F32_MAX, DType.F32, True), (3.4e39, DType.F32, False), (-3.4e39, DType.F32, False),
    (3.4028235677973366e38, DType.F32, False),  # halfway between the largest f32 and 2^128 rounds up
    (3.4028235677973362e38, DType.F32, True),   # just below the halfway point rounds down to the largest
    (math.inf, DType.F32, True), (math.nan, DType.F32, True), (1e-50, DType.F32, True),
    (65504.0, DType.F16, True), (65520.0, DType.F16, False), (3.4e38, DType.BF16, False),
    (1e308, DType.F64, True), (5, DType.F32, True),
])
def test_fits(value, dtype, ok):
    assert fits(value, dtype) is ok


def test_ranges():
    assert int_range(DType.I32) == (I32_MIN, I32_MAX)
    assert int_range(DType.U32) == (0, 2**32 - 1)
    assert int_range(DType.I8) == (-128, 127)
    assert largest_float(DType.F32) == F32_MAX
    assert largest_float(DType.F16) == 65504.0
    assert largest_float(DType.F64) == np.finfo(np.float64).max


def test_exact_arithmetic_of_literals():
    assert exact("add", {}, 2**62, 2**62) == 2**63  # no wrap: the checker then says what does not fit
    assert exact("div", {}, -7, 2) == -3 and exact("rem", {}, -7, 2) == -1
    assert exact("div", {}, 3, 2.0) == 1.5
    assert exact("cmp", {"pred": "lt"}, 1, 2) is True
    for a, b in ((1, 0), (1.0, 0.0)):
        with pytest.raises(ZeroDivisionError):
            exact("div", {}, a, b)


# ------------------------------------------------------------ the definition against the GPU's code
INT_OPERANDS = {  # 16 pairs each, no zero divisor
    DType.I32: ([7, -7, 7, -7, I32_MAX, I32_MIN, I32_MIN, 46341, 0, 100000, 1, -1, 3, 65536, -65536, 12],
                [2, 2, -2, -2, 1, -1, 3, 46341, 5, -65536, 7, 7, -3, 65536, 3, -5]),
    DType.U32: ([7, 2**32 - 1, 2**31, 0, 1, 65536, 2**32 - 7, 3, 100, 2**31 - 1, 5, 9, 0, 2**16 + 1, 77, 1],
                [2, 2, 2**31 + 1, 5, 2**32 - 1, 65536, 10, 3, 7, 2, 5, 2**32 - 1, 1, 2**16 - 1, 8, 1]),
    DType.I64: ([7, -7, 2**63 - 1, -2**63, -2**63, 2**40, 3, -3, 2**32, -2**32, 1, 0, 5, -5, 2**62, 9],
                [-2, 2, 1, -1, 3, 2**40, -9, 9, 2**31, 3, -1, 4, 5, 2, 2, -3]),
}
FLOAT_OPERANDS = (
    [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, F32_MAX, 1e-45, 0.1, 16777216.0, 3.0, -2.5, 1e30,
     1e-30, 7.0, 0.0],
    [3.0, 0.0, -0.0, math.nan, math.inf, 0.1, 1e-30, 2.0, 1e-45, 0.3, 1.0, 3.0, -7.0, 1e30, 1e30, math.inf,
     -0.0],
)
INT_OPERATORS = ["+", "-", "*", "/", "%"]
FLOAT_OPERATORS = ["+", "-", "*", "/"]
COMPARISONS = ["==", "!=", "<", "<=", ">", ">="]


def literal(value, dtype: DType) -> str:
    """A source expression of `value` as a constant of `dtype`."""
    if isinstance(value, float):
        text = "nan" if math.isnan(value) else ("inf" if math.isinf(value) else repr(abs(value)))
        return f"{dtype}({'-' if math.copysign(1, value) < 0 else ''}{text})"
    if value == -2**63:
        return f"{dtype}(-9223372036854775807 - 1)"
    return f"{dtype}({value})"


def kernel_of(dtype: DType, rows: list[str], a: list, b: list) -> str:
    """Row r of `run` is rows[r] applied to tensors a and b at run time; of `folded`, to constants."""
    n = len(a)
    store = "i32" if any(r in COMPARISONS for r in rows) else str(dtype)
    lines = [f"kernel k(a: tensor<{dtype}>[N], b: tensor<{dtype}>[N], run: tensor<{store}>[R, N], "
             f"folded: tensor<{store}>[R, N]) {{",
             f"    let x = a[0 :+ {n}]", f"    let y = b[0 :+ {n}]"]

    def apply(op, p, q):
        if op in COMPARISONS:
            return f"where({p} {op} {q}, 1, 0)"
        if op in ("maximum", "minimum"):
            return f"{op}({p}, {q})"
        return f"{p} {op} {q}"

    for r, op in enumerate(rows):
        lines.append(f"    run[{r}, 0 :+ {n}] = {apply(op, 'x', 'y')}")
        for i, (p, q) in enumerate(zip(a, b)):
            lines.append(f"    folded[{r}, {i}] = {apply(op, literal(p, dtype), literal(q, dtype))}")
    return "\n".join(lines + ["}"])


def expected_rows(dtype: DType, rows: list[str], a: list, b: list) -> np.ndarray:
    x, y = (np.array(v, constants.NUMPY[dtype]) for v in (a, b))
    out = []
    with np.errstate(all="ignore"):
        for op in rows:
            if op in ("maximum", "minimum"):
                out.append(constants.operation(op[:3], {})(x, y))
            else:
                opcode, attrs = constants.OPERATORS[op]
                out.append(constants.operation(opcode, attrs)(x, y).astype(np.int32 if opcode == "cmp" else x.dtype))
    return np.array(out)


@pytest.mark.parametrize("dtype, rows, operands", [
    *[(d, INT_OPERATORS, INT_OPERANDS[d]) for d in INT_OPERANDS],
    *[(d, COMPARISONS, INT_OPERANDS[d]) for d in (DType.U32, DType.I64)],
    (DType.F32, FLOAT_OPERATORS + ["maximum", "minimum"], FLOAT_OPERANDS),
    (DType.F32, COMPARISONS, FLOAT_OPERANDS),
    (DType.F64, FLOAT_OPERATORS + ["maximum", "minimum"], FLOAT_OPERANDS),
], ids=lambda v: str(v) if isinstance(v, DType) else None)
@pytest.mark.parametrize("mode", ["emulate", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_operations_match_the_emitted_code_and_the_folded_constants(dtype, rows, operands, mode):
    a, b = operands
    want = expected_rows(dtype, rows, a, b)
    x, y = (np.array(v, constants.NUMPY[dtype]) for v in (a, b))
    run, folded = np.zeros_like(want), np.zeros_like(want)
    phobos.kernel(kernel_of(dtype, rows, a, b), mode=mode)(x, y, run, folded)
    for r, op in enumerate(rows):
        np.testing.assert_array_equal(run[r], want[r], err_msg=f"{dtype} {op} at run time")
        np.testing.assert_array_equal(folded[r], want[r], err_msg=f"{dtype} {op} folded")
        if want.dtype.kind == "f":
            # the sign of zero too (maximum(-0.0, 0.0) and maximum(0.0, -0.0) are 0.0; a NaN's is not defined)
            number = ~np.isnan(want[r])
            for got in (run[r], folded[r]):
                assert list(np.signbit(got[number])) == list(np.signbit(want[r][number])), f"{dtype} {op}"


@pytest.mark.parametrize("mode", ["interpret", "emulate", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [DType.I32, DType.I64, DType.U32])
def test_zero_divisors_at_run_time_in_every_mode(dtype, mode):
    """`/`, `%` and cdiv by zero: in elements the source divides by zero, in elements outside a
    ragged tensor (which read 0), in the padding of a 10-element tile and by a scalar zero."""
    src = f"""kernel k(x: tensor<{dtype}>[N], y: tensor<{dtype}>[M], d: {dtype},
                     q: tensor<{dtype}>[N], r: tensor<{dtype}>[N], c: tensor<{dtype}>[N], s: tensor<{dtype}>[N]) {{
        let a = x[0 :+ 10]
        let b = y[0 :+ 10]
        q[0 :+ 10] = a / b
        r[0 :+ 10] = a % b
        c[0 :+ 10] = cdiv(a, b)
        s[0 :+ 10] = a / d + a % d + cdiv(a, d)
    }}"""
    np_type = constants.NUMPY[dtype]
    low, high = int_range(dtype)
    x = np.array([7, high, low, 0, 9, 10, 11, 12, 13, high - 1], np_type)
    y = np.array([0, 0, 0, 0, 2, 3, 4], np_type)  # x[7:] divide by elements outside y: 0
    outs = [np.zeros(10, np_type) for _ in range(4)]
    phobos.kernel(src, mode=mode)(x, y, 0, *outs)
    divisor = np.concatenate([y, np.zeros(3, np_type)])
    with np.errstate(all="ignore"):
        want = [constants.divide(x, divisor), constants.remainder(x, divisor), constants.ceil_divide(x, divisor),
                x + np_type.type(0) + x]  # a / 0 + a % 0 + cdiv(a, 0): x + 0 + x (wrapping)
    for got, expected, what in zip(outs, want, ["/", "%", "cdiv", "scalar"]):
        np.testing.assert_array_equal(got, expected, err_msg=f"{dtype} {what} ({mode})")
    np.testing.assert_array_equal(outs[0][:4], x[:4])  # x / 0 == x
    np.testing.assert_array_equal(outs[1][:4], 0)  # x % 0 == 0


@pytest.mark.parametrize("mode", ["interpret", "emulate", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_max_and_min_reductions_take_positive_zero_above_negative_zero(mode):
    """Reductions across registers, lanes and warps: the sign of a zero result is the same in
    every mode, whatever the order of combination."""
    src = """@autotune(WARPS in [4])
    kernel k(x: tensor<f32>[R, C], big: tensor<f32>[R], small: tensor<f32>[R], all: tensor<f32>[2]) {
        let t = x[0 :+ 8, 0 :+ 300]
        big[0 :+ 8] = reshape(max(t, axis=1), [8])
        small[0 :+ 8] = reshape(min(t, axis=1), [8])
        all[0] = max(t)
        all[1] = min(t[0 :+ 4, 0 :+ 300])
    }"""
    rng = np.random.default_rng(7)
    x = np.where(rng.random((8, 300)) < 0.5, -0.0, 0.0).astype(np.float32)
    x[0] = -0.0  # only negative zeros
    x[1] = 0.0  # only positive zeros
    x[2, :] = -0.0
    x[2, 299] = 0.0  # one positive zero, last
    x[3, :] = 0.0
    x[3, 150] = -0.0  # one negative zero, in the middle
    x[4, ::7] = np.nan
    x[5, :] = -1.0
    x[5, 77] = -0.0
    x[6, :] = np.nan  # NaN only when every element is NaN (the padding of the tile too)
    big, small, every = np.ones(8, np.float32), np.ones(8, np.float32), np.ones(2, np.float32)
    phobos.kernel(src, mode=mode)(x, big, small, every)
    want_big = constants.reduce_extreme("max", x, 1, False)
    want_small = constants.reduce_extreme("min", x, 1, False)
    for got, want in ((big, want_big), (small, want_small)):
        np.testing.assert_array_equal(got, want)
        number = ~np.isnan(want)
        assert list(np.signbit(got[number])) == list(np.signbit(want[number]))
    assert np.isnan(want_big[6]) and np.isnan(want_small[6])
    assert list(np.signbit(want_big)[:4]) == [True, False, False, False]
    assert list(np.signbit(want_small)[:4]) == [True, False, True, True]
    assert every[0] == every[1] == 0.0 and not np.signbit(every[0]) and np.signbit(every[1])


@pytest.mark.parametrize("mode", ["interpret", "emulate", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_argmax_and_argmin_ignore_nan_in_every_mode(mode):
    """A NaN loses to every number wherever it stands (first in a thread's slots, in another lane,
    in another warp); the first NaN when all are NaN."""
    src = """@autotune(WARPS in [2])
    kernel k(x: tensor<f32>[R, C], big: tensor<i32>[R], small: tensor<i32>[R], all: tensor<i32>[2]) {
        let t = x[0 :+ 4, 0 :+ 200]
        big[0 :+ 4] = reshape(argmax(t, axis=1), [4])
        small[0 :+ 4] = reshape(argmin(t, axis=1), [4])
        all[0] = argmax(t)
        all[1] = argmin(t)
    }"""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 200)).astype(np.float32)
    x[0, 0] = np.nan  # a NaN first, before every number
    x[1, ::3] = np.nan
    x[2, :] = np.nan
    x[3, :150] = np.nan  # the numbers only in the last warp's part of the row
    big, small, every = (np.full(n, -1, np.int32) for n in (4, 4, 2))
    phobos.kernel(src, mode=mode)(x, big, small, every)
    numbers = np.where(np.isnan(x), -np.inf, x), np.where(np.isnan(x), np.inf, x)
    want_big = [int(np.argmax(numbers[0][r])) if not np.isnan(x[r]).all() else 0 for r in range(4)]
    want_small = [int(np.argmin(numbers[1][r])) if not np.isnan(x[r]).all() else 0 for r in range(4)]
    assert list(big) == want_big and list(small) == want_small
    assert list(every) == [int(np.argmax(numbers[0])), int(np.argmin(numbers[1]))]


CASTS = [  # (from, to, values)
    (DType.F32, DType.I32, [2.7, -2.7, 3e9, -3e9, math.inf, -math.inf, math.nan, 2147483520.0]),
    (DType.F32, DType.U32, [2.7, -2.7, 5e9, -1.0, math.inf, math.nan, 4294967040.0, 0.5]),
    (DType.F32, DType.I64, [2.7, 1e30, -1e30, math.nan, 9.2e18, -9.3e18, 1e10, -0.5]),
    (DType.F64, DType.F32, [0.1, 1e39, -1e39, 1e-50, 3.4028235677973366e38, math.nan, 16777217.0, -0.0]),
    (DType.I64, DType.I32, [2**32 + 5, -1, 2**31, -2**31 - 1, 2**63 - 1, 7, 0, -7]),
    (DType.I32, DType.U32, [-1, I32_MIN, 5, I32_MAX, 0, -7, 1, 2]),
    (DType.I64, DType.F32, [2**63 - 1, 16777217, -16777217, 2**24 + 3, 1, 0, -5, 2**53 + 1]),
    (DType.U32, DType.F64, [2**32 - 1, 0, 7, 2**31, 1, 3, 5, 9]),
]


@pytest.mark.parametrize("frm, to, values", CASTS, ids=lambda v: str(v) if isinstance(v, DType) else None)
def test_casts_match_the_emitted_code_and_the_folded_constants(frm, to, values):
    n = len(values)
    # a constant infinity or NaN converted to an integer is an error in the checker; only run time sees it
    constant = [i for i, v in enumerate(values) if not (to.is_int and isinstance(v, float) and not math.isfinite(v))]
    src = "\n".join([f"kernel k(a: tensor<{frm}>[N], run: tensor<{to}>[N], folded: tensor<{to}>[N]) {{",
                     f"    run[0 :+ {n}] = {to}(a[0 :+ {n}])",
                     *[f"    folded[{i}] = {to}({literal(values[i], frm)})" for i in constant], "}"])
    with np.errstate(all="ignore"):
        x = np.array(values, constants.NUMPY[frm])
        want = convert_array(x, to)
    run, folded = np.zeros(n, constants.NUMPY[to]), np.zeros(n, constants.NUMPY[to])
    phobos.kernel(src, mode="emulate")(x, run, folded)
    np.testing.assert_array_equal(run, want)
    np.testing.assert_array_equal(folded[constant], want[constant])
    np.testing.assert_array_equal(np.array([convert(v.item(), to) for v in x], want.dtype), want)


def test_a_remainder_of_literals_with_an_infinite_dividend_is_nan():
    """`inf % 1.5` of literals alone folds to NaN, as fmod gives (math.fmod raised ValueError: the
    compile fuzz found it)."""
    from phobos.constants import exact
    assert math.isnan(exact("rem", {}, math.inf, 1.5)) and exact("rem", {}, 7.5, math.inf) == 7.5
    assert exact("rem", {}, -5.5, 2.0) == -1.5
