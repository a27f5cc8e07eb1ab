# The dtypes and operations a Triton user expects: conversions to 16-bit
# floats rounded once from any dtype, float `%` (fmod), u64, integer dot,
# 16-bit atomic_add, and the math functions of f64 (and the inverse and
# hyperbolic ones of both float widths).  Each runs in the interpreter, in the
# emulator for every target family (sm_75, sm_80, sm_90a: the PTX differs
# where the hardware does) and on the GPU (marked `gpu`), and gives the same
# bits - or, for the transcendental functions, results within their documented
# bound (docs/language.md, "Accuracy of math functions").
from __future__ import annotations

import numpy as np
import pytest

import phobos
from phobos.run.backends import EmulateBackend

from .language_support import run
from .emulator_support import PTXAS, ptxas_errors

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16
TARGETS = ("sm_75", "sm_80", "sm_90a")


class EmulateFor(EmulateBackend):
    """The emulator running the PTX compiled for `target` (the plain emulate mode compiles for sm_90)."""

    def __init__(self, target: str):
        self.target = target

    def arch(self, index: int = 0) -> str:
        return self.target

    def __repr__(self) -> str:
        return f"emulate-{self.target}"


MODES = ["interpret", *(EmulateFor(t) for t in TARGETS), pytest.param("gpu", marks=pytest.mark.gpu)]


def run_in(src: str, mode, *args, **kw):
    """language_support.run in `mode`; for an emulated target, ptxas must accept its PTX first."""
    if isinstance(mode, EmulateFor) and PTXAS is not None:
        ptx = phobos.compile_to_ptx(src, arch=mode.target, config=kw.get("config"))
        errors = ptxas_errors(ptx, mode.target)
        assert errors is None, errors
    return run(src, mode, *args, **kw)


def bits(a: np.ndarray) -> np.ndarray:
    """The bit patterns of float values, every NaN as one pattern (which NaN is the NaN semantics'
    concern, tested in test_nan_bits)."""
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    values = np.asarray(a, np.float32 if a.dtype.itemsize == 2 else a.dtype)
    return np.where(np.isnan(values), uint(0x7FFF), np.ascontiguousarray(a).view(uint))


# ------------------------------------------------------------ conversions to 16-bit floats
TO_16_BIT = """
kernel k(x: tensor<f64>[N], i: tensor<i32>[N], h: tensor<f16>[N], b: tensor<bf16>[N], hi: tensor<f16>[N],
         bi: tensor<bf16>[N]) {
    h[0 :+ 16] = f16(x[0 :+ 16])
    b[0 :+ 16] = bf16(x[0 :+ 16])
    hi[0 :+ 16] = f16(i[0 :+ 16])
    bi[0 :+ 16] = bf16(i[0 :+ 16])
}
"""


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_conversions_to_16_bit_floats_round_once(mode):
    """f16(x) and bf16(x) of an f64 (or an i32) round the value itself, not its f32 rounding: 1 + 2^-11 +
    2^-40 is just above the halfway point between two f16 values, which its f32 rounding is on."""
    x = np.array([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-30, 1 + 2**-11, 65519.99, 65520.0, 1e300, -1e-300,
                  2.0**-25 * 1.0000001, np.nan, -0.0, 1 / 3, 3.4e38, 1 + 2**-8, 2.0**-133 * 1.5, -7.1, 0.1])
    i = np.array([2**24 + 2**16 + 1, -(2**24 + 2**16 + 1), 2049, 65519, 65521, 7, 0, -1, 2**31 - 1, -2**31,
                  2**25 + 2**17 + 2**16, 4, 5, 6, 8, 9], np.int32)
    zeros16, zeros_b = np.zeros(16, np.float16), np.zeros(16, BF16)
    *_, h, b, hi, bi = run_in(TO_16_BIT, mode, x, i, zeros16, zeros_b, zeros16, zeros_b)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(bits(h), bits(x.astype(np.float16)))  # numpy rounds f64 to f16 once
        np.testing.assert_array_equal(bits(hi), bits(i.astype(np.float16)))
    want_b = [0x3F80, 0x3F81, 0x3F80, 0x4780, 0x4780, 0x7F80, 0x8000, 0x3300, 0x7FFF, 0x8000, 0x3EAB, 0x7F80,
              0x3F80, 0x0002, 0xC0E3, 0x3DCD]
    np.testing.assert_array_equal(bits(b), want_b)
    assert bits(bi)[:2].tolist() == [0x4B81, 0xCB81]  # 2^24 + 2^17, not the 2^24 that f32 then bf16 gives


# ------------------------------------------------------------ float %
FLOAT_REMAINDER = """
kernel k(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f64>[N], d: tensor<f64>[N], h: tensor<f16>[H],
         y: tensor<f32>[N], z: tensor<f64>[N], w: tensor<f16>[N], lit: tensor<f64>[4]) {
    let i = program_id(0) * 64
    y[i :+ 64] = a[i :+ 64] % b[i :+ 64]
    z[i :+ 64] = c[i :+ 64] % d[i :+ 64]
    w[i :+ 64] = h[i :+ 64] % h[i + 1 :+ 64]
    if program_id(0) == 0 {
        lit[0] = 7.5 % 2.0
        lit[1] = -7.5 % 2.0
        lit[2] = f64(f32(1e30) % f32(3.0))
        lit[3] = 5.0 % inf
    }
}
"""


def remainder_operands(rng, dtype, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs that reach every case: the largest and smallest magnitudes (the most steps), signs, zeros,
    infinities, NaN, and random values over the whole exponent range."""
    info = np.finfo(dtype)
    pairs = [(info.max, info.smallest_subnormal), (-info.max, info.smallest_subnormal * 3), (info.max, info.tiny),
             (info.smallest_subnormal * 7, info.smallest_subnormal * 2), (7.5, 2.0), (-7.5, 2.0), (7.5, -2.0),
             (-0.0, 3.0), (0.0, -3.0), (5.0, np.inf), (-5.0, -np.inf), (np.inf, 2.0), (3.0, 0.0), (np.nan, 1.0),
             (1.0, np.nan), (1.0, 3.0), (0.1, 0.01), (1e10, 1e-10), (2.0, 2.0), (-6.0, 3.0)]
    exponent = np.log2(info.max)
    rest = n - len(pairs)
    x = rng.standard_normal(rest) * 2.0 ** rng.uniform(-exponent, exponent, rest)
    y = rng.standard_normal(rest) * 2.0 ** rng.uniform(-exponent, exponent, rest)
    with np.errstate(over="ignore"):
        a = np.concatenate([np.array([p[0] for p in pairs], dtype), x.astype(dtype)])
        b = np.concatenate([np.array([p[1] for p in pairs], dtype), y.astype(dtype)])
    return a, b


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_float_remainder_is_fmod_exactly(mode):
    """`%` of floats is C's fmod, as Triton's: x - trunc(x / y) y exactly, with the sign of x (was refused)."""
    rng = np.random.default_rng(5)
    a, b = remainder_operands(rng, np.float32, 128)
    c, d = remainder_operands(rng, np.float64, 128)
    h = rng.standard_normal(129).astype(np.float16)
    *_, y, z, w, lit = run_in(FLOAT_REMAINDER, mode, a, b, c, d, h, np.zeros(128, np.float32),
                              np.zeros(128, np.float64), np.zeros(128, np.float16), np.zeros(4), grid=(2,))
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(bits(y), bits(np.fmod(a, b)))
        np.testing.assert_array_equal(bits(z), bits(np.fmod(c, d)))
        np.testing.assert_array_equal(bits(w), bits(np.fmod(h[:128], h[1:])))
    np.testing.assert_array_equal(lit, [1.5, -1.5, np.fmod(np.float32(1e30), np.float32(3.0)), 5.0])


# ------------------------------------------------------------ u64
U64_KERNEL = """
kernel k(a: tensor<u64>[N], b: tensor<u64>[N], s: u64, y: tensor<u64>[NY], q: tensor<f64>[N],
         m: tensor<u64>[8], i: tensor<i64>[N]) {
    let x = a[0 :+ 8]
    let z = b[0 :+ 8]
    y[0 :+ 8] = (x / z) + (x % z) * 3 + (x >> 60) + mulhi(x, z) + (x ^ 0xFFFFFFFFFFFFFFFF) + cdiv(x, z)
    y[8 :+ 8] = where(x < z, x - z, s) + maximum(x, z) - abs(x) + (-z)
    q[0 :+ 8] = f64(x)
    i[0 :+ 8] = i64(x) + bitcast(z, i64)
    m[0] = max(x)
    m[1] = sum(x)
    m[2] = 18446744073709551615
    m[3] = u64(-1.5) + u64(3.9e19) + u64(i32(-1))
    m[4] = a[s] + a[s - 0xFFFFFFFFFFFFFFF8 :+ 4][1]   // s is past the end: 0; the slice starts at 3
    var n: u64 = 0
    for t in range(u64(18446744073709551610), 18446744073709551615, 2) {
        n += t & 0xFF
    }
    m[5] = n
    m[6] = u64(argmin(x))
    m[7] = u64(f32(x[0]))
    atomic_add(y[16 :+ 8], x)
    atomic_max(y[24 :+ 8], z)
    atomic_xor(y[32 :+ 8], z)
}
"""


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_u64(mode):
    """u64 values: arithmetic (wrapping, unsigned division and shifts), comparisons, conversions, bitcast,
    reductions, loops to the top of the range, indices past i64, atomics - the same bits everywhere."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**64, 8, dtype=np.uint64, endpoint=False)
    a[:2] = [2**64 - 1, 0]
    b = rng.integers(0, 2**64, 8, dtype=np.uint64)
    b[2:4] = [0, 1]
    s = 2**64 - 5
    *_, y, q, m, i = run_in(U64_KERNEL, mode, a, b, np.uint64(s), np.arange(40, dtype=np.uint64), np.zeros(8),
                            np.zeros(8, np.uint64), np.zeros(8, np.int64))
    with np.errstate(over="ignore"):
        nz = np.where(b == 0, np.uint64(1), b)
        wide = a.astype(object) * b.astype(object)
        want0 = (a // nz) + (a % nz) * np.uint64(3) + (a >> np.uint64(60)) \
            + np.array([w >> 64 for w in wide], np.uint64) + ~a + (a // nz + (a % nz != 0))
        want1 = np.where(a < b, a - b, np.uint64(s)) + np.maximum(a, b) - a + (np.uint64(0) - b)
    np.testing.assert_array_equal(y[:8], want0)
    np.testing.assert_array_equal(y[8:16], want1)
    np.testing.assert_array_equal(y[16:24], np.arange(16, 24, dtype=np.uint64) + a)
    np.testing.assert_array_equal(y[24:32], np.maximum(np.arange(24, 32, dtype=np.uint64), b))
    np.testing.assert_array_equal(y[32:40], np.arange(32, 40, dtype=np.uint64) ^ b)
    np.testing.assert_array_equal(q, a.astype(np.float64))
    np.testing.assert_array_equal(i, a.view(np.int64) + b.view(np.int64))
    total = sum(int(v) for v in a) % 2**64
    n = sum(t & 0xFF for t in range(2**64 - 6, 2**64 - 1, 2))
    assert m.tolist() == [int(a.max()), total, 2**64 - 1, 2**64 - 2, int(a[4]), n, int(np.argmin(a)),
                          int(np.float32(a[0])) if np.float32(a[0]) < 2**64 else 2**64 - 1]


# ------------------------------------------------------------ integer dot
INT_DOT = """
@autotune(BK in [32])
kernel k(a: tensor<i8>[M, K], b: tensor<i8>[K, N], c: tensor<i32>[M, N], d: tensor<i32>[M, N]) {
    var acc: tile<i32>[32, 16] = 0
    for k in range(0, K, BK) {
        acc += dot(a[0 :+ 32, k :+ BK], b[k :+ BK, 0 :+ 16])
    }
    c[0 :+ 32, 0 :+ 16] = acc
    d[0 :+ 32, 0 :+ 16] = dot(c[0 :+ 32, 0 :+ 16], trans(c[0 :+ 16, 0 :+ 16] * 99991))   // wraps
}
"""


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_integer_dot_is_exact(mode):
    """dot of i8 tiles (loaded as i32) is the exact i32 product, as Triton's int8 x int8 -> int32; of i32
    tiles it wraps like i32 arithmetic (was refused)."""
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (30, 70)).astype(np.int8)
    b = rng.integers(-128, 128, (70, 16)).astype(np.int8)
    *_, c, d = run_in(INT_DOT, mode, a, b, np.zeros((30, 16), np.int32), np.zeros((30, 16), np.int32))
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))
    full = np.zeros((32, 16), np.int64)
    full[:30] = c
    with np.errstate(over="ignore"):
        scaled = (full[:16] * 99991).astype(np.int32).astype(np.int64)
    np.testing.assert_array_equal(d, (full @ scaled.T).astype(np.int32)[:30])


# ------------------------------------------------------------ 16-bit atomic_add
HALF_ATOMICS = """
kernel k(h: tensor<f16>[N], b: tensor<bf16>[N], x: tensor<f32>[M], oh: tensor<f16>[M], ob: tensor<bf16>[M]) {
    let i = arange(0, 64) % 5
    atomic_add(h[i], f32(i + 1))           // repeated elements: small integers, exact in any order
    atomic_add(b[i], f32(i - 2))
    oh[0 :+ 64] = atomic_add(h[5 :+ 64], x[0 :+ 64])   // the old values, each sum rounded once
    ob[0 :+ 64] = atomic_add(b[5 :+ 64], x[0 :+ 64] * 3.0)
}
"""


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_16_bit_atomic_add(mode):
    """atomic_add into f16 and bf16 tensors (was refused): x is rounded to the tensor's format, then each
    sum once (atom/red .add.noftz.f16; bf16 natively on sm_90, by compare-and-swap before), subnormals kept."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(64) * 3).astype(np.float32)
    x[:4] = [2**-11 + 2**-30, 1e-6, 65504.0, 2**-24]  # rounds to 2^-11 first; a subnormal; overflow; the least
    h = rng.standard_normal(69).astype(np.float16)
    h[:9] = [3, -1, 0, 7, 2, 1.0, 0.0, 65504.0, 0.0]  # small integers where sums repeat: exact in any order
    b = rng.standard_normal(69).astype(BF16)
    b[:5] = [1, 2, -3, 0, 5]
    *_, h2, b2, _, oh, ob = run_in(HALF_ATOMICS, mode, h, b, x, np.zeros(64, np.float16), np.zeros(64, BF16))
    counts = np.bincount(np.arange(64) % 5, minlength=5)
    with np.errstate(over="ignore"):
        want_h = h.copy()
        want_h[:5] = (h[:5].astype(np.float32) + counts * np.arange(1, 6)).astype(np.float16)
        want_h[5:] = h[5:] + x.astype(np.float16)
        want_b = b.copy()
        want_b[:5] = (b[:5].astype(np.float32) + counts * np.arange(-2, 3)).astype(BF16)
        want_b[5:] = (b[5:].astype(np.float32) + (x * np.float32(3)).astype(BF16).astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(bits(h2), bits(want_h))
    np.testing.assert_array_equal(bits(b2), bits(want_b))
    np.testing.assert_array_equal(bits(oh), bits(h[5:]))
    np.testing.assert_array_equal(bits(ob), bits(b[5:]))
    assert h2[5] == 1.0 and np.isinf(h2[7]) and h2[8] == np.float16(2**-24)
