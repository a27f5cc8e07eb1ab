# The PTX emulator is exact where PTX is exact: IEEE rounding in every mode,
# fma with a single rounding, conversions with their rounding and saturation
# rules, C integer division, wrap-around, shift clamping and unordered
# comparisons.  The exact-rounding core is checked against rational
# arithmetic; instructions are checked through one-instruction kernels.
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phobos.run.emulator import numerics as nx

from .emulator_support import run_elementwise

rng = np.random.default_rng(7)
MODES = ("rn", "rz", "rm", "rp")


def exact_f32(x: Fraction, mode: str) -> np.float32:
    return np.float32(nx.round_fraction(x, nx.F32, mode))


def f32_bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def random_f32(n: int) -> np.ndarray:
    """Finite float32 values of every magnitude, including subnormals."""
    x = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(x), x, np.float32(1.5))


floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
floats64 = st.floats(allow_nan=False, allow_infinity=False)


# ------------------------------------------------------------------ the exact core

@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(MODES),
       st.sampled_from([nx.F16, nx.BF16, nx.F32]))
def test_round_to_format_matches_rational_rounding(x, mode, fmt):
    with np.errstate(all="ignore"):
        got = nx.round_to_format(np.array([x]), None, fmt, mode)[0]
    want = nx.round_fraction(Fraction(x), fmt, mode) if x != 0 else x
    assert got == want


def test_f32_to_f16_rounds_to_nearest_even_as_rational_rounding_does():
    """The bit-level f32 -> f16 conversion (cvt.rn.f16.f32) against exact rounding: the subnormal range,
    values half way between two f16 numbers, the overflow threshold, zeros, infinities and NaN."""
    halfway = (rng.integers(100, 145, 4000).astype(np.uint32) << 23) | np.uint32(0x1000) \
        | (rng.integers(0, 1 << 10, 4000).astype(np.uint32) << 13)
    edges = np.array([0, 0x33000000, 0x33000001, 0x387FE000, 0x387FF000, 0x38800000, 0x477FEFFF, 0x477FF000,
                      0x477FFFFF, 0x47800000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0x00000001], np.uint32)
    bits = np.concatenate([halfway, halfway - 1, halfway + 1, edges, random_f32(20000).view(np.uint32)])
    x = np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)
    got = nx.f32_to_f16(x)
    assert got.dtype == np.float16
    for value, half in zip(x.tolist(), got.tolist()):
        if math.isnan(value):
            assert math.isnan(half)
        elif math.isinf(value):
            assert half == value
        else:
            want = nx.round_fraction(Fraction(value), nx.F16, "rn") if value else 0.0
            assert half == want and math.copysign(1.0, half) == math.copysign(1.0, value), value


@settings(max_examples=300, deadline=None)
@given(floats64, floats64, floats64)
def test_f64_fma_is_correctly_rounded(a, b, c):
    with np.errstate(all="ignore"):
        got = float(nx.fma_f64(np.array([a]), np.array([b]), np.array([c]), "rn")[0])
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        assert got == 0
    else:
        assert got == nx.round_fraction(exact, nx.F64, "rn")


def test_f64_fma_on_cancelling_operands():
    a = rng.standard_normal(5000) * 2.0 ** rng.integers(-60, 60, 5000)
    b = rng.standard_normal(5000)
    c = -(a * b) * (1 + rng.choice([0, 2.0 ** -52, -(2.0 ** -53)], 5000))
    got = nx.fma_f64(a, b, c, "rn")
    want = [nx.round_fraction(Fraction(x) * Fraction(y) + Fraction(z), nx.F64, "rn")
            for x, y, z in zip(a, b, c)]
    np.testing.assert_array_equal(got, want)


@settings(max_examples=200, deadline=None)
@given(floats32, floats32, floats32, st.sampled_from(MODES))
def test_f32_fma_is_correctly_rounded(a, b, c, mode):
    with np.errstate(all="ignore"):
        got = nx.fma_f32(np.array([a], np.float32), np.array([b], np.float32), np.array([c], np.float32), mode)
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact != 0:
        assert got[0] == exact_f32(exact, mode)
        assert np.signbit(got[0]) == (exact < 0)
    else:  # IEEE: -0 only from (-0) + (-0), or under round-down unless both addends are +0
        product_negative = math.copysign(1, a) * math.copysign(1, b) < 0
        both_zero = (a == 0 or b == 0) and c == 0
        negative = (not both_zero or product_negative or math.copysign(1, c) < 0) if mode == "rm" \
            else both_zero and product_negative and math.copysign(1, c) < 0
        assert got[0] == 0 and bool(np.signbit(got[0])) == negative


@settings(max_examples=200, deadline=None)
@given(floats32, floats32, st.sampled_from(MODES), st.sampled_from(["add", "mul", "div"]))
def test_f32_directed_arithmetic_is_correctly_rounded(a, b, mode, op):
    fn = {"add": nx.add_f32, "mul": nx.mul_f32, "div": nx.div_f32}[op]
    if op == "div" and b == 0:
        return
    exact = {"add": lambda: Fraction(a) + Fraction(b), "mul": lambda: Fraction(a) * Fraction(b),
             "div": lambda: Fraction(a) / Fraction(b)}[op]()
    with np.errstate(all="ignore"):
        got = fn(np.array([a], np.float32), np.array([b], np.float32), mode)[0]
    if exact != 0:
        assert got == exact_f32(exact, mode)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0, allow_nan=False, allow_infinity=False), st.sampled_from(MODES))
def test_directed_square_roots(x, mode):
    if x == 0:
        return
    root = nx._sqrt_fraction(Fraction(x))
    assert nx.sqrt_f64(np.array([x]), mode)[0] == nx.round_fraction(root, nx.F64, mode)
    with np.errstate(over="ignore"):
        x32 = np.float32(x)
    if x32 != 0 and np.isfinite(x32):
        assert nx.sqrt_f32(np.array([x32]), mode)[0] == exact_f32(nx._sqrt_fraction(Fraction(float(x32))), mode)


def test_sqrt_fraction_agrees_with_math_sqrt():
    for x in np.abs(rng.standard_normal(500)) * 2.0 ** rng.integers(-1000, 1000, 500):
        assert nx.round_fraction(nx._sqrt_fraction(Fraction(x)), nx.F64, "rn") == math.sqrt(x)


# ------------------------------------------------------------------ instructions

def test_fma_rounds_once_where_mul_then_add_does_not():
    a = np.array([1 + 2 ** -23], np.float32)
    b = np.array([1 - 2 ** -23], np.float32)
    c = np.array([-1], np.float32)
    fused = run_elementwise("fma.rn.f32 %d, %a0, %a1, %a2;", "f32", ("f32", a), ("f32", b), ("f32", c))
    assert fused[0] == np.float32(-(2.0 ** -46))
    product = run_elementwise("mul.rn.f32 %d, %a0, %a1;", "f32", ("f32", a), ("f32", b))
    separate = run_elementwise("add.rn.f32 %d, %a0, %a1;", "f32", ("f32", product), ("f32", c))
    assert separate[0] == 0


@pytest.mark.parametrize("mode", MODES)
def test_fma_f32_in_every_rounding_mode(mode):
    a, b, c = random_f32(2000), random_f32(2000), random_f32(2000)
    with np.errstate(over="ignore"):
        near = -(a[:500].astype(np.float64) * b[:500]).astype(np.float32)  # near-cancellation
    c[:500] = np.where(np.isfinite(near), near, c[:500])
    got = run_elementwise(f"fma.{mode}.f32 %d, %a0, %a1, %a2;", "f32", ("f32", a), ("f32", b), ("f32", c))
    for i in range(len(a)):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        if exact != 0:
            assert f32_bits(got[i]) == f32_bits(exact_f32(exact, mode)), (a[i], b[i], c[i])


def test_fma_f64_instruction():
    a, b = rng.standard_normal(500), rng.standard_normal(500)
    c = -a * b
    got = run_elementwise("fma.rn.f64 %d, %a0, %a1, %a2;", "f64", ("f64", a), ("f64", b), ("f64", c))
    want = [float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a, b, c)]
    np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(got) > 400  # the rounding error of a*b, which mul+add would lose


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("mode", ["rz", "rm", "rp"])
def test_directed_rounding_instructions(op, mode):
    a, b = random_f32(400), random_f32(400)
    b[b == 0] = 1
    got = run_elementwise(f"{op}.{mode}.f32 %d, %a0, %a1;", "f32", ("f32", a), ("f32", b))
    formula = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
               "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[op]
    for x, y, g in zip(a, b, got):
        exact = formula(Fraction(float(x)), Fraction(float(y)))
        if exact != 0:
            assert f32_bits(g) == f32_bits(exact_f32(exact, mode))


def test_directed_f64_addition():
    a = rng.standard_normal(100)
    b = rng.standard_normal(100) * 1e-17
    up = run_elementwise("add.rp.f64 %d, %a0, %a1;", "f64", ("f64", a), ("f64", b))
    down = run_elementwise("add.rm.f64 %d, %a0, %a1;", "f64", ("f64", a), ("f64", b))
    for x, y, u, d in zip(a, b, up, down):
        exact = Fraction(x) + Fraction(y)
        assert Fraction(d) <= exact <= Fraction(u)
        assert u == nx.round_fraction(exact, nx.F64, "rp") and d == nx.round_fraction(exact, nx.F64, "rm")


def test_ftz_and_sat():
    tiny = np.array([1e-40, -1e-40, 0.75, 2.0, -3.0, np.nan], np.float32)
    flushed = run_elementwise("mul.ftz.f32 %d, %a0, %a1;", "f32", ("f32", tiny), ("f32", np.ones(6, np.float32)))
    np.testing.assert_array_equal(f32_bits(flushed[:2]), f32_bits([0.0, -0.0]))
    sat = run_elementwise("mul.sat.f32 %d, %a0, %a1;", "f32", ("f32", tiny), ("f32", np.ones(6, np.float32)))
    np.testing.assert_array_equal(sat[2:], [0.75, 1.0, 0.0, 0.0])


@pytest.mark.parametrize("mode", MODES)
def test_cvt_f32_to_f16_and_bf16(mode):
    x = np.concatenate([random_f32(1000), (rng.standard_normal(1000) * 100).astype(np.float32),
                        np.array([65504, 65520, 1e-8, -7e-8, 3e38], np.float32)])
    half = run_elementwise(f"cvt.{mode}.f16.f32 %d, %a0;", "f16", ("f32", x))
    brain = run_elementwise(f"cvt.{mode}.bf16.f32 %d, %a0;", "bf16", ("f32", x))
    for v, h, b in zip(x, half, brain):
        want_h = nx.round_fraction(Fraction(float(v)), nx.F16, mode) if v else 0.0
        want_b = nx.round_fraction(Fraction(float(v)), nx.BF16, mode) if v else 0.0
        assert float(h) == want_h
        assert float((np.uint32(b) << np.uint32(16)).view(np.float32)) == want_b


def test_cvt_f16_nan_is_canonical_and_relu_clamps():
    x = np.array([np.nan, -2.0, 3.0], np.float32)
    half = run_elementwise("cvt.rn.relu.f16.f32 %d, %a0;", "f16", ("f32", x))
    np.testing.assert_array_equal(half.view(np.uint16), [0x7FFF, 0, np.float16(3).view(np.uint16)])


@pytest.mark.parametrize("mode", MODES)
def test_cvt_f64_to_f32(mode):
    x = rng.standard_normal(1000) * 2.0 ** rng.integers(-160, 140, 1000)
    got = run_elementwise(f"cvt.{mode}.f32.f64 %d, %a0;", "f32", ("f64", x))
    for v, g in zip(x, got):
        assert f32_bits(g) == f32_bits(exact_f32(Fraction(v), mode))


@pytest.mark.parametrize("mode, fn", [("rni", np.rint), ("rzi", np.trunc), ("rmi", np.floor), ("rpi", np.ceil)])
def test_cvt_float_to_int_rounds_and_saturates(mode, fn):
    x = np.array([2.5, 3.5, -2.5, -0.5, 1e10, -1e10, np.nan, np.inf, -np.inf, 7.99], np.float32)
    got = run_elementwise(f"cvt.{mode}.s32.f32 %d, %a0;", "s32", ("f32", x))
    want = np.clip(np.nan_to_num(fn(x.astype(np.float64)), nan=0, posinf=2 ** 31, neginf=-2 ** 32),
                   -2 ** 31, 2 ** 31 - 1)
    np.testing.assert_array_equal(got, want)
    unsigned = run_elementwise(f"cvt.{mode}.u64.f64 %d, %a0;", "u64", ("f64", x.astype(np.float64) * 1e10))
    assert unsigned[3] == 0 and unsigned[4] == 2 ** 64 - 1 and unsigned[6] == 1 << 63  # NaN: see below


@pytest.mark.parametrize("instruction, source, result, want", [
    ("cvt.rzi.s32.f32", "f32", "s32", 0), ("cvt.rzi.u32.f32", "f32", "u32", 0),
    ("cvt.rni.s16.f32", "f32", "s16", 0),
    ("cvt.rzi.s64.f32", "f32", "s64", 1 << 63), ("cvt.rzi.u64.f32", "f32", "u64", 1 << 63),
    ("cvt.rzi.s32.f64", "f64", "s32", 1 << 31), ("cvt.rzi.u32.f64", "f64", "u32", 1 << 31),
    ("cvt.rmi.s64.f64", "f64", "s64", 1 << 63), ("cvt.rzi.s16.f64", "f64", "s16", 1 << 15),
])
def test_cvt_of_a_nan_to_an_integer_is_zero_only_from_f32_into_32_bits(instruction, source, result, want):
    """PTX ISA 9.7.9.21 (cvt, Integer Notes): a NaN converts to 0 if the source is not .f64 and the
    destination not 64 bits wide, else to 1 << (width - 1); an H100 gives u32(f64 NaN) = 0x80000000
    and i64(f32 NaN) = MININT (the differential fuzz)."""
    nans = np.array([0x7FFF_FFFF_FFFF_FFFF, 0xFFF0_0000_0000_0001], np.uint64).view(np.float64)
    x = nans if source == "f64" else nans.astype(np.float32)
    got = run_elementwise(f"{instruction} %d, %a0;", result, (source, x))
    assert [int(v) for v in got.view(f"u{got.itemsize}")] == [want, want]


def test_cvt_of_an_f64_nan_to_f32_keeps_its_sign_and_top_payload_bits():
    """An H100 converts the f64 NaN 0x7FF4000000000000 to 0x7FE00000 (the differential fuzz); the sign is
    kept as IEEE 754 asks (tools/probe_numerics.py measures it)."""
    x = np.array([0x7FF4_0000_0000_0000, 0xFFF8_0000_0000_0ABC, 0x7FF0_0000_0000_0001, 0x7FFF_FFFF_FFFF_FFFF],
                 np.uint64).view(np.float64)
    got = run_elementwise("cvt.rn.f32.f64 %d, %a0;", "f32", ("f64", x))
    assert [int(v) for v in got.view(np.uint32)] == [0x7FE00000, 0xFFC00000, 0x7FC00000, 0x7FFFFFFF]


def test_cvt_int_to_float_rounding():
    big = np.array([2 ** 53 + 1, -(2 ** 62) - 1, 2 ** 63 - 1, 16777217, 3], np.int64)
    for mode in MODES:
        f32 = run_elementwise(f"cvt.{mode}.f32.s64 %d, %a0;", "f32", ("s64", big))
        f64 = run_elementwise(f"cvt.{mode}.f64.s64 %d, %a0;", "f64", ("s64", big))
        for v, a, b in zip(big, f32, f64):
            assert a == exact_f32(Fraction(int(v)), mode)
            assert b == nx.round_fraction(Fraction(int(v)), nx.F64, mode)
    u = np.array([0xFFFFFFFF, 16777217], np.uint32)
    np.testing.assert_array_equal(run_elementwise("cvt.rz.f32.u32 %d, %a0;", "f32", ("u32", u)),
                                  np.array([4294967040.0, 16777216.0], np.float32))


def test_cvt_between_integers():
    x = np.array([-1, 300, -300, 127, 70000], np.int32)
    np.testing.assert_array_equal(run_elementwise("cvt.sat.s8.s32 %d, %a0;", "s8", ("s32", x)),
                                  [-1, 127, -128, 127, 127])
    np.testing.assert_array_equal(run_elementwise("cvt.u8.s32 %d, %a0;", "u8", ("s32", x)),
                                  x.astype(np.uint8))
    np.testing.assert_array_equal(run_elementwise("cvt.sat.u16.s32 %d, %a0;", "u16", ("s32", x)),
                                  [0, 300, 0, 127, 65535])
    s8 = np.array([-128, -1, 5], np.int8)
    np.testing.assert_array_equal(run_elementwise("cvt.s32.s8 %d, %a0;", "s32", ("s8", s8)), [-128, -1, 5])
    np.testing.assert_array_equal(run_elementwise("cvt.u32.u8 %d, %a0;", "u32", ("s8", s8)), [128, 255, 5])


def test_cvt_widening_is_exact_and_round_to_integer_in_float():
    h = np.array([1e-7, 65504, -0.0], np.float16)
    np.testing.assert_array_equal(run_elementwise("cvt.f32.f16 %d, %a0;", "f32", ("f16", h)),
                                  h.astype(np.float32))
    x = np.array([2.5, -2.5, 0.3, -1e30], np.float32)
    np.testing.assert_array_equal(run_elementwise("cvt.rni.f32.f32 %d, %a0;", "f32", ("f32", x)), np.rint(x))


def test_integer_division_truncates_like_c():
    a = np.array([7, -7, 7, -7, -2 ** 31, 0], np.int32)
    b = np.array([2, 2, -2, -2, -1, -5], np.int32)
    np.testing.assert_array_equal(run_elementwise("div.s32 %d, %a0, %a1;", "s32", ("s32", a), ("s32", b)),
                                  [3, -3, -3, 3, -2 ** 31, 0])
    np.testing.assert_array_equal(run_elementwise("rem.s32 %d, %a0, %a1;", "s32", ("s32", a), ("s32", b)),
                                  [1, -1, 1, -1, 0, 0])
    u = np.array([7, 0xFFFFFFFF], np.uint32)
    np.testing.assert_array_equal(run_elementwise("div.u32 %d, %a0, %a1;", "u32", ("u32", u), ("u32", u[::-1])),
                                  [0, 613566756])


def test_multiplication_variants():
    a = np.array([-3, 2 ** 31 - 1, -(2 ** 31)], np.int32)
    b = np.array([5, 2 ** 31 - 1, -(2 ** 31)], np.int32)
    wide = run_elementwise("mul.wide.s32 %d, %a0, %a1;", "s64", ("s32", a), ("s32", b))
    np.testing.assert_array_equal(wide, a.astype(np.int64) * b)
    hi = run_elementwise("mul.hi.s32 %d, %a0, %a1;", "s32", ("s32", a), ("s32", b))
    np.testing.assert_array_equal(hi, (a.astype(np.int64) * b) >> 32)
    lo = run_elementwise("mul.lo.s32 %d, %a0, %a1;", "s32", ("s32", a), ("s32", b))
    np.testing.assert_array_equal(lo, [-15, 1, 0])
    x = np.array([2 ** 64 - 1, 3 << 62, 12345], np.uint64)
    y = np.array([2 ** 64 - 1, 7, 2 ** 63], np.uint64)
    hi64 = run_elementwise("mul.hi.u64 %d, %a0, %a1;", "u64", ("u64", x), ("u64", y))
    assert hi64.tolist() == [(int(p) * int(q)) >> 64 for p, q in zip(x, y)]
    s = np.array([-1, -(2 ** 63), 2 ** 62], np.int64)
    shi = run_elementwise("mul.hi.s64 %d, %a0, %a1;", "s64", ("s64", s), ("s64", s[::-1]))
    assert shi.tolist() == [(int(p) * int(q)) >> 64 for p, q in zip(s, s[::-1])]
    mad = run_elementwise("mad.wide.u32 %d, %a0, %a1, %a2;", "u64",
                          ("u32", np.array([0xFFFFFFFF], np.uint32)), ("u32", np.array([2], np.uint32)),
                          ("u64", np.array([5], np.uint64)))
    assert mad[0] == 0xFFFFFFFF * 2 + 5


def test_shifts_clamp_their_amount():
    x = np.array([-8, -8, 8, 8, -1], np.int32)
    n = np.array([1, 40, 33, 31, 32], np.uint32)
    np.testing.assert_array_equal(run_elementwise("shr.s32 %d, %a0, %a1;", "s32", ("s32", x), ("u32", n)),
                                  [-4, -1, 0, 0, -1])
    np.testing.assert_array_equal(run_elementwise("shr.u32 %d, %a0, %a1;", "u32", ("s32", x), ("u32", n)),
                                  [0x7FFFFFFC, 0, 0, 0, 0])
    np.testing.assert_array_equal(run_elementwise("shl.b32 %d, %a0, %a1;", "u32", ("s32", x), ("u32", n)),
                                  [0xFFFFFFF0, 0, 0, 0, 0])


def test_bit_operations():
    x = np.array([0, 1, 0x80000000, 0xF0F0], np.uint32)
    np.testing.assert_array_equal(run_elementwise("popc.b32 %d, %a0;", "u32", ("u32", x)), [0, 1, 1, 8])
    np.testing.assert_array_equal(run_elementwise("clz.b32 %d, %a0;", "u32", ("u32", x)), [32, 31, 0, 16])
    np.testing.assert_array_equal(run_elementwise("brev.b32 %d, %a0;", "u32", ("u32", x)),
                                  [0, 0x80000000, 1, 0x0F0F0000])
    y = np.array([1, 2 ** 63, 2 ** 40], np.uint64)
    np.testing.assert_array_equal(run_elementwise("clz.b64 %d, %a0;", "u32", ("u64", y)), [63, 0, 23])
    np.testing.assert_array_equal(run_elementwise("not.b32 %d, %a0;", "u32", ("u32", x)), ~x)


NAN = np.float32(np.nan)
UNORDERED = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: (a < b) | (a > b), "lt": lambda a, b: a < b,
    "ge": lambda a, b: a >= b, "equ": lambda a, b: ~((a < b) | (a > b)),
    "neu": lambda a, b: a != b, "ltu": lambda a, b: ~(a >= b), "leu": lambda a, b: ~(a > b),
    "gtu": lambda a, b: ~(a <= b), "geu": lambda a, b: ~(a < b),
    "num": lambda a, b: ~np.isnan(a) & ~np.isnan(b), "nan": lambda a, b: np.isnan(a) | np.isnan(b),
}


@pytest.mark.parametrize("cmp", sorted(UNORDERED))
def test_float_comparisons_with_nan(cmp):
    a = np.array([1, NAN, 2, NAN, 3, 3], np.float32)
    b = np.array([NAN, 1, 1, NAN, 3, 4], np.float32)
    got = run_elementwise(f"setp.{cmp}.f32 %d, %a0, %a1;", "pred", ("f32", a), ("f32", b))
    np.testing.assert_array_equal(got.astype(bool), UNORDERED[cmp](a, b))
    with np.errstate(invalid="ignore"):
        assert got[1] == (cmp in ("neu", "ltu", "leu", "gtu", "geu", "equ", "nan"))


def test_unsigned_and_signed_comparisons_and_combining():
    a = np.array([1, 0xFFFFFFFF, 5], np.uint32)
    b = np.array([2, 1, 5], np.uint32)
    q = np.array([1, 1, 0], np.uint8)
    np.testing.assert_array_equal(run_elementwise("setp.lo.u32 %d, %a0, %a1;", "pred", ("u32", a), ("u32", b)),
                                  [1, 0, 0])
    np.testing.assert_array_equal(run_elementwise("setp.lt.s32 %d, %a0, %a1;", "pred", ("u32", a), ("u32", b)),
                                  [1, 1, 0])
    np.testing.assert_array_equal(
        run_elementwise("setp.le.or.u32 %d, %a0, %a1, !%a2;", "pred", ("u32", a), ("u32", b), ("pred", q)),
        [1, 0, 1])


def test_selp_min_max_and_copysign():
    a = np.array([1.0, NAN, -0.5], np.float32)
    b = np.array([2.0, 3.0, NAN], np.float32)
    np.testing.assert_array_equal(run_elementwise("min.f32 %d, %a0, %a1;", "f32", ("f32", a), ("f32", b)),
                                  [1.0, 3.0, -0.5])
    assert np.isnan(run_elementwise("max.NaN.f32 %d, %a0, %a1;", "f32", ("f32", a), ("f32", b))[1:]).all()
    np.testing.assert_array_equal(run_elementwise("copysign.f32 %d, %a0, %a1;", "f32",
                                                  ("f32", np.array([-1, 1, -1], np.float32)),
                                                  ("f32", np.array([2, -3, 4], np.float32))), [-2, 3, -4])
    np.testing.assert_array_equal(
        run_elementwise("selp.s32 %d, %a0, %a1, %a2;", "s32", ("s32", np.array([1, 2], np.int32)),
                        ("s32", np.array([-1, -2], np.int32)), ("pred", np.array([1, 0], np.uint8))), [1, -2])
    np.testing.assert_array_equal(
        run_elementwise("max.s64 %d, %a0, %a1;", "s64", ("s64", np.array([-5, 2 ** 40], np.int64)),
                        ("s64", np.array([3, -1], np.int64))), [3, 2 ** 40])


def test_wrapping_and_saturating_integer_addition():
    a = np.array([2 ** 31 - 1, -(2 ** 31)], np.int32)
    b = np.array([1, -1], np.int32)
    np.testing.assert_array_equal(run_elementwise("add.s32 %d, %a0, %a1;", "s32", ("s32", a), ("s32", b)),
                                  [-(2 ** 31), 2 ** 31 - 1])
    np.testing.assert_array_equal(run_elementwise("add.sat.s32 %d, %a0, %a1;", "s32", ("s32", a), ("s32", b)),
                                  [2 ** 31 - 1, -(2 ** 31)])
    np.testing.assert_array_equal(run_elementwise("sub.u32 %d, %a0, 5;", "u32", ("u32", np.array([3], np.uint32))),
                                  [2 ** 32 - 2])


def test_approximate_functions_are_close():
    x = (rng.standard_normal(200) * 3).astype(np.float32)
    for op, ref in [("ex2", np.exp2), ("tanh", np.tanh)]:
        got = run_elementwise(f"{op}.approx.f32 %d, %a0;", "f32", ("f32", x))
        np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=1e-6, atol=1e-7)
    turn = x[np.abs(x) <= np.pi]  # sin and cos: PTX's bound holds on [-pi, pi]
    for op, ref in [("sin", np.sin), ("cos", np.cos)]:
        got = run_elementwise(f"{op}.approx.f32 %d, %a0;", "f32", ("f32", turn))
        np.testing.assert_allclose(got, ref(turn.astype(np.float64)), rtol=0, atol=2 ** -20.5)
    pos = np.abs(x) + np.float32(0.1)
    np.testing.assert_allclose(run_elementwise("lg2.approx.f32 %d, %a0;", "f32", ("f32", pos)),
                               np.log2(pos.astype(np.float64)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(run_elementwise("rsqrt.approx.f32 %d, %a0;", "f32", ("f32", pos)),
                               1 / np.sqrt(pos.astype(np.float64)), rtol=1e-6)
    np.testing.assert_array_equal(run_elementwise("sqrt.rn.f32 %d, %a0;", "f32", ("f32", pos)), np.sqrt(pos))
    np.testing.assert_array_equal(run_elementwise("rcp.rn.f64 %d, %a0;", "f64", ("f64", pos.astype(np.float64))),
                                  1 / pos.astype(np.float64))


def test_literals_and_pack_unpack():
    x = np.array([0x1122334455667788], np.uint64)
    hi = run_elementwise("{ .reg .b32 lo, hi; mov.b64 {lo, hi}, %a0; mov.b32 %d, hi; }", "u32", ("u64", x))
    assert hi[0] == 0x11223344
    packed = run_elementwise("{ .reg .b32 one; mov.b32 one, 0x0F; mov.b64 %d, {%a0, one}; }", "u64",
                             ("u32", np.array([0xAABBCCDD], np.uint32)))
    assert packed[0] == 0x0000000FAABBCCDD
    one = run_elementwise("add.f32 %d, %a0, 0f3F800000;", "f32", ("f32", np.array([2.0], np.float32)))
    assert one[0] == 3.0
    neg = run_elementwise("mul.f64 %d, %a0, 0dC000000000000000;", "f64", ("f64", np.array([1.5])))
    assert neg[0] == -3.0


def test_packed_half_conversions():
    a = np.array([1.0, 70000, -1e-9], np.float32)
    b = np.array([2.0, -3.5, np.inf], np.float32)
    half = run_elementwise("cvt.rn.satfinite.f16x2.f32 %d, %a0, %a1;", "u32", ("f32", a), ("f32", b))
    np.testing.assert_array_equal(half, [0x3C004000, 0x7BFFC300, 0x80007BFF])  # a high, b low; inf -> max
    brain = run_elementwise("cvt.rn.bf16x2.f32 %d, %a0, %a1;", "u32", ("f32", a), ("f32", b))
    assert brain[0] == 0x3F804000 and brain[2] & 0xFFFF == 0x7F80


@settings(max_examples=150, deadline=None)
@given(floats64, floats64, floats64, st.sampled_from(["rz", "rm", "rp"]))
def test_f64_directed_arithmetic(a, b, c, mode):
    x, y, z = Fraction(a), Fraction(b), Fraction(c)
    cases = [(nx.mul_f64(np.array([a]), np.array([b]), mode), x * y),
             (nx.fma_f64(np.array([a]), np.array([b]), np.array([c]), mode), x * y + z)]
    if b != 0:
        cases.append((nx.div_f64(np.array([a]), np.array([b]), mode), x / y))
    for got, exact in cases:
        if exact != 0:
            assert got[0] == nx.round_fraction(exact, nx.F64, mode)


def test_predicate_tests_and_logical_not():
    x = np.array([1.0, np.inf, np.nan, 1e-40, 0.0], np.float32)
    for test, want in [("finite", [1, 0, 0, 1, 1]), ("infinite", [0, 1, 0, 0, 0]), ("notanumber", [0, 0, 1, 0, 0]),
                       ("normal", [1, 0, 0, 0, 0]), ("subnormal", [0, 0, 0, 1, 0])]:
        np.testing.assert_array_equal(run_elementwise(f"testp.{test}.f32 %d, %a0;", "pred", ("f32", x)), want)
    np.testing.assert_array_equal(run_elementwise("cnot.b32 %d, %a0;", "u32", ("u32", np.array([0, 5], np.uint32))),
                                  [1, 0])
    np.testing.assert_array_equal(run_elementwise("not.pred %d, %a0;", "pred", ("pred", np.array([0, 1], np.uint8))),
                                  [1, 0])


# Reference formulas of the PTX ISA for the bit-field instructions, bit by bit.

def reference_bfe(a: int, pos: int, length: int, width: int, signed: bool) -> int:
    pos, length = pos & 0xFF, length & 0xFF
    sign = (a >> min(pos + length - 1, width - 1)) & 1 if signed and length else 0
    return sum((((a >> (pos + i)) & 1) if i < length and pos + i < width else sign) << i for i in range(width))


def reference_bfi(f: int, b: int, pos: int, length: int, width: int) -> int:
    pos, length = pos & 0xFF, length & 0xFF
    for i in range(length):
        if pos + i < width:
            b = (b & ~(1 << (pos + i))) | (((f >> i) & 1) << (pos + i))
    return b


def random_u32(n):
    return rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)


@pytest.mark.parametrize("t", ["u32", "s32", "u64", "s64"])
def test_bfe(t):
    width = int(t[1:])
    a = rng.integers(0, 2 ** 63, 500, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    a = a.astype(np.uint32) if width == 32 else a
    pos, length = rng.integers(0, width + 8, 500).astype(np.uint32), rng.integers(0, width + 8, 500).astype(np.uint32)
    got = run_elementwise(f"bfe.{t} %d, %a0, %a1, %a2;", f"u{width}", (f"u{width}", a), ("u32", pos),
                          ("u32", length))
    assert got.tolist() == [reference_bfe(int(x), int(p), int(n), width, t[0] == "s")
                            for x, p, n in zip(a, pos, length)]


def test_bfi():
    f, b = random_u32(500), random_u32(500)
    pos, length = rng.integers(0, 40, 500).astype(np.uint32), rng.integers(0, 40, 500).astype(np.uint32)
    got = run_elementwise("bfi.b32 %d, %a0, %a1, %a2, %a3;", "u32", ("u32", f), ("u32", b), ("u32", pos),
                          ("u32", length))
    assert got.tolist() == [reference_bfi(int(w), int(x), int(p), int(n), 32) for w, x, p, n in zip(f, b, pos, length)]


@pytest.mark.parametrize("t", ["u32", "s32"])
@pytest.mark.parametrize("shiftamt", ["", ".shiftamt"])
def test_bfind(t, shiftamt):
    x = np.concatenate([random_u32(100), np.array([0, 1, 0xFFFFFFFF, 0x80000000], np.uint32)])

    def reference(v):
        if t == "s32" and v >= 2 ** 31:
            v = ~v & 0xFFFFFFFF
        if v == 0:
            return 0xFFFFFFFF
        return 31 - (v.bit_length() - 1) if shiftamt else v.bit_length() - 1
    got = run_elementwise(f"bfind{shiftamt}.{t} %d, %a0;", "u32", (t, x.view(np.int32) if t == "s32" else x))
    assert got.tolist() == [reference(int(v)) for v in x]


def test_prmt_and_funnel_shifts():
    a, b = random_u32(300), random_u32(300)
    selectors = rng.integers(0, 2 ** 16, 300).astype(np.uint32)

    def reference_prmt(x, y, c):
        pool, out = (y << 32) | x, 0
        for k in range(4):
            sel = (c >> (4 * k)) & 0xF
            byte = (pool >> (8 * (sel & 7))) & 0xFF
            out |= ((0xFF if byte & 0x80 else 0) if sel & 8 else byte) << (8 * k)
        return out
    got = run_elementwise("prmt.b32 %d, %a0, %a1, %a2;", "u32", ("u32", a), ("u32", b), ("u32", selectors))
    assert got.tolist() == [reference_prmt(int(x), int(y), int(c)) for x, y, c in zip(a, b, selectors)]
    counts = rng.integers(0, 70, 300).astype(np.uint32)
    for direction in ("l", "r"):
        for mode in ("wrap", "clamp"):
            def reference_shf(x, y, c):
                n = c & 31 if mode == "wrap" else min(c, 32)
                pair = (y << 32) | x
                return ((pair << n) >> 32 if direction == "l" else pair >> n) & 0xFFFFFFFF
            got = run_elementwise(f"shf.{direction}.{mode}.b32 %d, %a0, %a1, %a2;", "u32", ("u32", a), ("u32", b),
                                  ("u32", counts))
            assert got.tolist() == [reference_shf(int(x), int(y), int(c)) for x, y, c in zip(a, b, counts)]
