# The constructs of the language beyond plain slices and element-wise math, each
# run the three ways (interpreter, PTX emulator, GPU) against NumPy, with the PTX
# validated by ptxas for sm_75 and sm_90, and the located errors of bad uses.
from __future__ import annotations

import numpy as np
import pytest

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
