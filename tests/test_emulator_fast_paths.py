# The emulator's element-wise arithmetic takes fast paths (few NumPy passes, the
# common case proven cheaply); each is held here to a plain model of the same
# rule - the straightforward formulation the emulator used before, or its own
# general path - bit for bit over special values, random bit patterns and every
# boundary where the fast path's reasoning could slip (exponent edges, rounding
# midpoints, signed zeros, subnormals, NaN payloads, infinities).
import numpy as np
import pytest

from phobos.constants import arithmetic_nan, canonical_nan, maximum, minimum
from phobos.run.emulator import mufu
from phobos.run.emulator import numerics as nx

rng = np.random.default_rng(11)
SIGNIFICAND = mufu.SIGNIFICAND
SPECIAL_BITS = np.array([0x0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0xFFC00001,
                         0x7F800001, 0xFFBFFFFF, 0x1, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000,
                         0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x3FFFFFFF, 0x477FEFFF, 0x477FF000,
                         0x33000000, 0x33000001, 0x387FE000, 0x387FF000], np.uint32)


def random_bits(n: int) -> np.ndarray:
    return rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)


def bits_of(x) -> np.ndarray:
    return np.asarray(x).view(np.uint32)


def near(values: np.ndarray) -> np.ndarray:
    """f32 bit patterns of `values` and their neighbours one and two ulps away, of both signs."""
    bits = np.atleast_1d(np.asarray(values, np.float32)).view(np.uint32).astype(np.int64)
    around = np.concatenate([bits + k for k in (-2, -1, 0, 1, 2)]) & 0x7FFFFFFF
    return np.concatenate([around, around | 0x80000000]).astype(np.uint32)


# ------------------------------------------------------------------ ex2.approx

def ex2_model(x):
    """MUFU.EX2 as first written: |x| truncated to 23 fraction bits in int64, a negative one complemented,
    the table's value scaled by ldexp and flushed below 2^-126."""
    x = np.asarray(x, np.float32)
    q = (np.fmin(np.abs(x), np.float32(1024)) * np.float32(2 ** 23)).astype(np.int64)
    fixed = np.where(x < 0, -q - ((q & SIGNIFICAND) != 0), q)
    with np.errstate(over="ignore"):
        out = np.ldexp(mufu.table("ex2", fixed & SIGNIFICAND).view(np.float32), fixed >> 23)
    out = np.where(out < np.float32(2.0 ** -126), np.float32(0), out)
    return np.where(np.isnan(x), canonical_nan(np.float32), out)


def ex2_inputs() -> np.ndarray:
    steps = np.arange(-131 * 2 ** 12, 131 * 2 ** 12) / 2.0 ** 12  # every 2^-12 of the range where 2^x is finite
    return np.concatenate([random_bits(10 ** 6), near(steps), SPECIAL_BITS]).view(np.float32)


@pytest.mark.parametrize("ftz", [True, False])
def test_ex2_is_the_units_rule(ftz):
    x = ex2_inputs()
    with np.errstate(all="ignore"):
        got = mufu.approx_f32("ex2", ftz)(x)
        if ftz:
            want = ex2_model(x)
        else:  # (below -126: the square of 2^(x/2), as ptxas writes it)
            low = x < np.float32(-126)
            half = ex2_model(np.where(low, x * np.float32(0.5), x))
            want = np.where(low, half * half, half)
    np.testing.assert_array_equal(bits_of(got), bits_of(want))


def test_ex2_table_rounds_no_flushed_result_up():
    """mufu_ex2 flushes every result whose bits are below 2^-126's: that is ldexp's flushed result but where
    the table's value has a significand of all ones (it would round up to 2^-126); only the last entry has,
    which only a positive x reaches (a negative x's fraction index is at most 2^23 - 2)."""
    values = mufu.table("ex2", np.arange(1 << 23, dtype=np.int64))
    assert np.array_equal(np.flatnonzero((values & SIGNIFICAND) == SIGNIFICAND), [SIGNIFICAND])
    assert values.min() >= 0x3F800000 and values.max() < 0x40000000


def test_ex2_keeps_the_shape_of_its_argument():
    assert np.asarray(mufu.mufu_ex2(np.float32(-1.0))).shape == ()
    assert mufu.mufu_ex2(np.zeros((2, 3), np.float32)).shape == (2, 3)
    assert bits_of(mufu.mufu_ex2(np.float32(np.nan)))[()] == 0x7FFFFFFF


# ------------------------------------------------------------------ rcp.approx

def test_reciprocal_fast_path_is_the_general_one():
    exponents = np.arange(256, dtype=np.uint32) << 23
    edges = (exponents[:, None] | np.array([0, 1, 0x400000, SIGNIFICAND - 1, SIGNIFICAND], np.uint32)).ravel()
    for bits in (random_bits(10 ** 6), near(edges.view(np.float32)), SPECIAL_BITS):
        x = bits.view(np.float32)
        with np.errstate(all="ignore"):
            whole = mufu.mufu_rcp(x)
            lane_by_lane = np.concatenate([mufu.mufu_rcp(x[i:i + 1]) for i in range(0, x.size, max(1, x.size // 64))])
        np.testing.assert_array_equal(bits_of(whole), bits_of(mufu._rcp_any(x)))
        np.testing.assert_array_equal(bits_of(lane_by_lane), bits_of(mufu._rcp_any(x[::max(1, x.size // 64)])))


# ------------------------------------------------------------------ cvt.rn.f16.f32

def f16_model(x):
    """f32 -> f16 to nearest even as first written: integer rounding of normal results, rint of subnormal
    ones, 0x7FFF for a NaN."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    magnitude = bits & np.uint32(0x7FFFFFFF)
    normal = np.minimum((magnitude - np.uint32(0x38000000) + np.uint32(0xFFF) + ((magnitude >> 13) & np.uint32(1)))
                        >> 13, np.uint32(0x7C00))
    small = np.minimum(magnitude, np.uint32(0x38800000)).view(np.float32)
    subnormal = np.rint(small * np.float32(2.0 ** 24)).astype(np.uint32)
    half = np.where(magnitude < np.uint32(0x38800000), subnormal, normal)
    half = np.where(magnitude > np.uint32(0x7F800000), np.uint32(0x7FFF), half | ((bits >> 16) & np.uint32(0x8000)))
    return half.astype(np.uint16)


def test_f32_to_f16_rounds_as_the_model():
    every_half = np.arange(1 << 15, dtype=np.uint16).view(np.float16).astype(np.float32)
    finite = every_half[np.isfinite(every_half)].astype(np.float64)
    midpoints = (finite[:-1] + finite[1:]) / 2  # (exact in f32)
    for bits in (random_bits(10 ** 6), near(every_half), near(midpoints), SPECIAL_BITS):
        x = bits.view(np.float32)
        np.testing.assert_array_equal(nx.f32_to_f16(x).view(np.uint16), f16_model(x))
    with np.errstate(all="ignore"):  # NumPy's own cast agrees but for the NaNs' bits
        x = random_bits(10 ** 5).view(np.float32)
        numbers = ~np.isnan(x)
        np.testing.assert_array_equal(nx.f32_to_f16(x)[numbers].view(np.uint16), x[numbers].astype(np.float16).view(np.uint16))
    assert nx.f32_to_f16(np.float32(np.nan)).view(np.uint16) == 0x7FFF


# ------------------------------------------------------------------ fma.rn.f32, add, mul

def fma_general(a, b, c):
    """fma.rn.f32 by the exact path for every lane: TwoSum of the exact product and c, rounded once."""
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        r, e = nx.two_sum(p, c.astype(np.float64))
        e = np.where(np.isfinite(r), e, 0)
        out = nx.round_to_format(r, e, nx.F32, "rn").astype(np.float32)
    return arithmetic_nan(out, b, c, a)


def fma_operands():
    """Random patterns, products near every midpoint (c cancelling most of a * b so that the float64 sum
    lands on or near an f32 midpoint), subnormal results and specials."""
    n = 10 ** 6
    a, b, c = (random_bits(n).view(np.float32) for _ in range(3))
    ma = rng.uniform(1, 2, n).astype(np.float32)
    mb = rng.uniform(1, 2, n).astype(np.float32)
    product = ma.astype(np.float64) * mb.astype(np.float64)
    near_mid = (product.astype(np.float32).astype(np.float64)
                + np.ldexp(np.float64(1), (np.frexp(product)[1] - 25)) * rng.choice([-1, 1], n))
    c_mid = (near_mid - product).astype(np.float32)  # (the sum is then within an ulp of a midpoint)
    tiny_a = (rng.uniform(1, 2, n) * 2.0 ** -70).astype(np.float32)
    tiny_b = (rng.uniform(1, 2, n) * 2.0 ** -70).astype(np.float32)
    tiny_c = (rng.standard_normal(n) * 2.0 ** -139).astype(np.float32)
    sa, sb, sc = (np.repeat(SPECIAL_BITS, SPECIAL_BITS.size ** 2), np.tile(np.repeat(SPECIAL_BITS, SPECIAL_BITS.size),
                  SPECIAL_BITS.size), np.tile(SPECIAL_BITS, SPECIAL_BITS.size ** 2))
    return [(a, b, c), (ma, mb, c_mid), (-ma, mb, -c_mid), (tiny_a, tiny_b, tiny_c),
            (sa.view(np.float32), sb.view(np.float32), sc.view(np.float32))]


def test_fma_fast_path_is_the_exact_one():
    for a, b, c in fma_operands():
        np.testing.assert_array_equal(bits_of(nx.fma_f32(a, b, c, "rn")), bits_of(fma_general(a, b, c)))


@pytest.mark.parametrize("op", ["add", "mul"])
def test_f32_nans_are_canonical(op):
    a, b = random_bits(10 ** 6).view(np.float32), random_bits(10 ** 6).view(np.float32)
    a[:SPECIAL_BITS.size] = SPECIAL_BITS.view(np.float32)
    b[:SPECIAL_BITS.size ** 2] = np.repeat(SPECIAL_BITS, SPECIAL_BITS.size).view(np.float32)
    a[:SPECIAL_BITS.size ** 2] = np.tile(SPECIAL_BITS, SPECIAL_BITS.size).view(np.float32)
    fn = {"add": nx.add_f32, "mul": nx.mul_f32}[op]
    with np.errstate(all="ignore"):
        raw = a + b if op == "add" else a * b
    want = np.where(np.isnan(raw), canonical_nan(np.float32), raw)
    np.testing.assert_array_equal(bits_of(fn(a, b, "rn")), bits_of(want))
    assert np.asarray(fn(np.float32(1), np.float32(2), "rn")).shape == ()


# ------------------------------------------------------------------ max, min, .ftz

@pytest.mark.parametrize("larger", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_min_fast_path_is_the_general_one(larger, dtype):
    uint = np.uint32 if dtype == np.float32 else np.uint64
    general = maximum if larger else minimum
    fast = nx.extreme(larger, nan_wins=False)
    with np.errstate(all="ignore"):  # (f32 NaNs widened to f64 keep their payloads)
        special = SPECIAL_BITS.view(np.float32).astype(dtype)
        special = np.concatenate([special, np.array([0x7FF4000000000001], np.uint64).view(np.float64).astype(dtype)])
        a, b = np.repeat(special, special.size), np.tile(special, special.size)
        r = random_bits(2 * 10 ** 6).view(np.float32).astype(dtype)
        for x, y in ((a, b), (r[::2], r[1::2]), (r[::2], -r[::2]), (np.abs(r[::2]) * 0, -np.abs(r[1::2]) * 0)):
            np.testing.assert_array_equal(np.asarray(fast(x, y)).view(uint), np.asarray(general(x, y)).view(uint))
    assert np.asarray(fast(dtype(-0.0), dtype(0.0))).view(uint) == (0 if larger else np.asarray(dtype(-0.0)).view(uint))


def test_flush_zeroes_subnormals_alone():
    x = np.concatenate([random_bits(10 ** 6), SPECIAL_BITS, near(np.float32(2.0 ** -126))]).view(np.float32)
    want = np.where(np.abs(x) < np.float32(2.0 ** -126), np.copysign(np.float32(0), x), x)
    np.testing.assert_array_equal(bits_of(nx.flush(x)), bits_of(want))
    d = random_bits(10 ** 5).astype(np.uint64) << np.uint64(32) | random_bits(10 ** 5)
    d[:3] = [1, 0x8000000000000001, 0x0010000000000000]
    x = d.view(np.float64)
    want = np.where(np.abs(x) < 2.0 ** -1022, np.copysign(0.0, x), x)
    np.testing.assert_array_equal(nx.flush(x).view(np.uint64), want.view(np.uint64))
