# The PTX emulator runs what nvcc generates for small CUDA kernels
# (tests/data/emulator/nvcc_kernels.cu): a shared-memory tiled SGEMM, a
# shuffle-and-atomic reduction, an atomic histogram and a mix of f64, 64-bit
# integer and f16 operations, with results checked against NumPy.
import numpy as np
import pytest

from phobos.errors import Loc
from phobos.run.emulator import MemoryFault
from phobos.run.emulator import numerics as nx

from .emulator_support import data_module

rng = np.random.default_rng(99)


def module():
    return data_module("nvcc_kernels.ptx")


def test_sgemm_matches_the_exact_fma_chain():
    m = n = k = 128
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    c0 = c.copy()
    alpha, beta = np.float32(1.5), np.float32(0.5)
    module().launch("sgemm", (n // 64, m // 64), 256, [a, b, c, m, n, k, alpha, beta])
    acc = np.zeros((m, n), np.float32)
    for kk in range(k):  # acc[i][j] = fmaf(a[i][kk], b[kk][j], acc[i][j]) in order
        acc = nx.fma_f32(np.broadcast_to(a[:, kk:kk + 1], (m, n)), np.broadcast_to(b[kk], (m, n)), acc, "rn")
    expected = nx.fma_f32(acc, alpha, c0 * beta, "rn")
    np.testing.assert_array_equal(c, expected)
    np.testing.assert_allclose(c, 1.5 * (a.astype(np.float64) @ b) + 0.5 * c0, rtol=1e-4, atol=1e-4)


def test_shuffle_reduction_with_atomics():
    x = rng.standard_normal(10000).astype(np.float32)
    out = np.zeros(1, np.float32)
    module().launch("reduce", 8, 256, [x, out, len(x)])
    assert out[0] == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-5, abs=1e-3)


def test_histogram_counts_every_atomic():
    x = rng.integers(-1000, 1000, 5000).astype(np.int32)
    h = np.zeros(7, np.uint32)
    module().launch("hist", 20, 256, [x, h, len(x), 7])
    np.testing.assert_array_equal(h, np.bincount(x % 7, minlength=7))


def test_histogram_with_too_few_bins_is_an_out_of_bounds_atomic():
    x = np.arange(64, dtype=np.int32)
    with pytest.raises(MemoryFault, match="out-of-bounds global atomic of 4 bytes") as info:
        module().launch("hist", 1, 64, [x, np.zeros(7, np.uint32), 64, 8])
    assert isinstance(info.value.loc, Loc) and info.value.loc.line > 0


def test_f64_int64_and_f16_arithmetic():
    n = 300
    a = rng.standard_normal(n) * 10
    b = np.zeros(n)
    c = rng.integers(-100, 100, n).astype(np.int64)
    s = rng.integers(-3000, 3000, n).astype(np.int16)
    h = np.zeros(n, np.float16)
    c0 = c.copy()
    module().launch("misc", 2, 256, [a, b, c, s, h, n])
    fused = nx.fma_f64(a, a, np.ones(n), "rn")
    np.testing.assert_array_equal(b, fused / (a + 2.0))
    whole = np.trunc(a).astype(np.int64)
    np.testing.assert_array_equal(c, (whole - np.fmod(whole, 3)) // 3 + np.fmod(c0, 7))
    np.testing.assert_array_equal(h, (s.astype(np.float32) * np.float32(0.5)).astype(np.float16))


def test_math_library_functions():
    x = np.concatenate([rng.standard_normal(200) * 3, [1e5, -3e4, 123456.7, 0.0, -0.5]]).astype(np.float32)
    y = np.zeros(5 * len(x), np.float32)
    module().launch("math_functions", 1, 256, [x, y, len(x)])
    y = y.reshape(-1, 5).astype(np.float64)
    v = x.astype(np.float64)
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(y[:, 0], np.exp(v) + np.log(np.abs(v) + 1), rtol=2e-6)
    np.testing.assert_allclose(y[:, 1], np.sin(v) * np.cos(v), rtol=1e-5, atol=1e-6)  # large arguments too
    np.testing.assert_allclose(y[:, 2], np.sqrt(np.abs(v)) + 1 / np.sqrt(np.abs(v) + 1) + np.minimum(v, 0.5),
                               rtol=2e-6, atol=1e-6)
    small = np.abs(v) < 50
    np.testing.assert_allclose(y[small, 3], np.tanh(v[small]) + np.abs(v[small]) ** 1.5, rtol=2e-6, atol=1e-6)
    from math import erf
    np.testing.assert_allclose(y[:, 4], np.rint(v) + [erf(t) for t in v], rtol=2e-6, atol=1e-6)


def test_integer_intrinsics():
    x = np.concatenate([rng.integers(0, 2 ** 32, 300, dtype=np.uint64).astype(np.uint32),
                        np.array([0, 1, 0x80000000, 0xFFFFFFFF], np.uint32)])
    y = np.zeros(4 * len(x), np.uint32)
    module().launch("bit_intrinsics", 2, 256, [x, y, len(x)])
    y = y.reshape(-1, 4)
    mask = 0xFFFFFFFF
    for v, got in zip(x.tolist(), y.tolist()):
        popc, clz = bin(v).count("1"), 32 - v.bit_length()
        brev = int(f"{v:032b}"[::-1], 2)
        ffs = (v & -v).bit_length()
        assert got[0] == (popc + clz + brev + ffs) & mask
        assert got[1] == (v // 7 + v % 13 + min(v, 77)) & mask
        hi, shift = (v * 3) & mask, v & 31
        funnel = ((((hi << 32) | v) << shift) >> 32) & mask
        pool = ((v >> 3) << 32) | v
        perm = sum(((pool >> (8 * ((0x5140 >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))
        assert got[2] == funnel ^ perm
        assert got[3] == (v * ((v + 12345) & mask)) >> 32


def test_pipeline_async_copy():
    x = rng.standard_normal(4 * 128).astype(np.float32)
    y = np.zeros_like(x)
    module().launch("pipeline_copy", 1, 128, [x, y])
    np.testing.assert_array_equal(y.reshape(128, 4), x.reshape(128, 4)[::-1])


def test_warp_primitives_and_syncwarp_ordered_shared_exchange():
    x = rng.integers(-50, 50, 64).astype(np.int32)
    y = np.zeros(64, np.int32)
    module().launch("warp_primitives", 1, 64, [x, y])
    lane = np.arange(64) % 32
    v = x + np.where(lane > 0, x[np.arange(64) - (lane > 0)], x)
    warp = np.arange(64) // 32
    ballots = np.array([np.count_nonzero(v[warp == w] > 0) for w in range(2)])
    alls = np.array([int((v[warp == w] > -100).all()) for w in range(2)])
    sums = np.array([v[warp == w].sum() for w in range(2)])
    np.testing.assert_array_equal(y, v + ballots[warp] + alls[warp] + sums[warp] + v[np.arange(64) ^ 1])
