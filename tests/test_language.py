# The constructs of the language beyond plain slices and element-wise math, each
# run the three ways (interpreter, PTX emulator, GPU) against NumPy, with the PTX
# validated by ptxas for sm_75 and sm_90, and the located errors of bad uses.
from __future__ import annotations

import numpy as np
import pytest

import phobos
from phobos.errors import PhobosError
from tests.language_support import MODES, assert_ptxas_accepts, run

RNG = np.random.default_rng(14)


# ------------------------------------------------------------ regressions
@pytest.mark.parametrize("mode", MODES)
def test_storing_a_comparison_into_a_bool_tensor(mode):
    src = "kernel k(X: tensor<f32>[N], Z: tensor<bool>[N]) { Z[0 :+ 128] = X[0 :+ 128] > 0.0 }"
    assert_ptxas_accepts(src)
    x = RNG.standard_normal(100).astype(np.float32)
    _, z = run(src, mode, x, np.zeros(100, bool))
    np.testing.assert_array_equal(z, x > 0)


@pytest.mark.parametrize("mode", MODES)
def test_storing_the_negation_of_a_bool_tile(mode):
    src = "kernel k(a: tensor<bool>[N], c: tensor<bool>[N]) { c[0 :+ 33] = !a[0 :+ 33] }"
    assert_ptxas_accepts(src)
    a = RNG.random(40) < 0.5
    _, c = run(src, mode, a, np.zeros(40, bool))
    np.testing.assert_array_equal(c[:33], ~a[:33])
    assert not c[33:].any()


def test_softmax_with_a_mask_relaid_through_shared_memory():
    with open("tests/kernels/softmax.phobos") as f:
        assert_ptxas_accepts(f.read(), config={"BN": 3, "BM": 4})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op,expected", [("abs", lambda a: a), ("-", lambda a: (-a.astype(np.int64)) % 2**32)])
def test_abs_and_negation_of_unsigned_tiles(op, expected, mode):
    src = f"kernel k(a: tensor<u32>[N], c: tensor<u32>[N]) {{ c[0 :+ 128] = {op}(a[0 :+ 128]) }}"
    assert_ptxas_accepts(src)
    a = RNG.integers(0, 2**32, 128, dtype=np.uint32)
    _, c = run(src, mode, a, np.zeros(128, np.uint32))
    np.testing.assert_array_equal(c, expected(a).astype(np.uint32))


@pytest.mark.parametrize("mode", MODES)
def test_a_loaded_tile_stored_narrowed_and_used_again(mode):
    src = """kernel k(I: tensor<f32>[N], Z16: tensor<f16>[N], Z: tensor<f32>[N]) {
        let i = I[0 :+ 128]
        Z16[0 :+ 128] = i
        Z[0 :+ 128] = i * 2.0
    }"""
    assert_ptxas_accepts(src)
    x = RNG.standard_normal(128).astype(np.float32)
    _, z16, z = run(src, mode, x, np.zeros(128, np.float16), np.zeros(128, np.float32))
    np.testing.assert_array_equal(z16, x.astype(np.float16))
    np.testing.assert_array_equal(z, x * 2)


# ------------------------------------------------------------ gather and scatter
EMBEDDING = """
kernel embed(E: tensor<f32>[V, D], ids: tensor<i32>[B], out: tensor<f32>[B, D]) {
    let b = program_id(0) * 4
    out[b :+ 4, 0 :+ 16] = E[ids[b :+ 4], 0 :+ 16]
}
"""


@pytest.mark.parametrize("mode", MODES)
def test_gather_rows_of_an_embedding_table(mode):
    e = RNG.standard_normal((10, 16)).astype(np.float32)
    ids = np.array([3, 0, 9, -1, 10, 5, 5, 2], np.int32)  # -1 and 10 are outside: rows of zeros
    _, _, out = run(EMBEDDING, mode, e, ids, np.full((8, 16), np.nan, np.float32), grid=(2,))
    want = np.where(((ids >= 0) & (ids < 10))[:, None], e[np.clip(ids, 0, 9)], 0)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("mode", MODES)
def test_gather_with_index_tiles_that_broadcast(mode):
    src = """
    kernel k(X: tensor<f32>[M, N], r: tensor<i32>[4], c: tensor<i64>[8], out: tensor<f32>[4, 8]) {
        let rows = reshape(r[0 :+ 4], [4, 1])
        let cols = reshape(c[0 :+ 8], [1, 8])
        out[0 :+ 4, 0 :+ 8] = X[rows, cols] * 2.0
    }"""
    x = RNG.standard_normal((6, 7)).astype(np.float32)
    r, c = np.array([5, 0, 6, 2], np.int32), np.array([0, 6, 7, -2, 3, 3, 1, 2], np.int64)
    *_, out = run(src, mode, x, r, c, np.zeros((4, 8), np.float32))
    inside = ((r >= 0) & (r < 6))[:, None] & ((c >= 0) & (c < 7))[None, :]
    want = np.where(inside, x[np.clip(r, 0, 5)][:, np.clip(c, 0, 6)], 0) * 2
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("mode", MODES)
def test_scatter_through_a_permutation_skips_indices_outside(mode):
    src = """
    kernel k(x: tensor<f32>[N], perm: tensor<i32>[N], y: tensor<f32>[N]) {
        let p = program_id(0) * 64
        let inside = p + arange(64) < N  // perm past its end reads 0, a valid index: mask it
        y[where(inside, perm[p :+ 64], -1)] = x[p :+ 64] + 1.0
    }"""
    n = 100
    perm = RNG.permutation(n).astype(np.int32)
    perm[[3, 50]] = [-5, n]  # outside: not written
    x = RNG.standard_normal(n).astype(np.float32)
    *_, y = run(src, mode, x, perm, np.full(n, -7.0, np.float32), grid=(2,))
    want = np.full(n, -7.0, np.float32)
    ok = (perm >= 0) & (perm < n)
    want[perm[ok]] = x[ok] + 1
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("mode", MODES)
def test_histogram_with_atomic_add_through_an_index_tile(mode):
    src = """
    kernel hist(x: tensor<i32>[N], h: tensor<i32>[B]) {
        let p = program_id(0) * 128
        atomic_add(h[where(p + arange(128) < N, x[p :+ 128], -1)], 1)
    }"""
    x = RNG.integers(-2, 12, 300).astype(np.int32)
    _, h = run(src, mode, x, np.zeros(10, np.int32), grid=(3,))
    np.testing.assert_array_equal(h, np.bincount(x[(x >= 0) & (x < 10)], minlength=10))


def test_gather_errors_are_located():
    bad = {
        "kernel k(X: tensor<f32>[N], I: tensor<f32>[N]) { let t = X[I[0 :+ 4]] }": "must hold integers",
        "kernel k(X: tensor<f32>[N, M], I: tensor<i32>[N]) { let t = X[I[0 :+ 4], I[0 :+ 4]] }": None,
        "kernel k(X: tensor<f32>[N, M, K], I: tensor<i32>[N]) { let t = X[I[0 :+ 4], 0, I[0 :+ 4]] }":
            "next to each other",
        "kernel k(X: tensor<f32>[N, M], I: tensor<i32>[N]) { let t = X[I[0 :+ 4], I[0 :+ 3]] }": "broadcast",
    }
    for src, message in bad.items():
        if message is None:
            phobos.jit(src, mode="interpret")
            continue
        with pytest.raises(PhobosError, match=message):
            phobos.jit(src, mode="interpret")
