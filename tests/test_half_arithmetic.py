# Arithmetic on 16-bit floats follows Triton's rule: an operation on values of
# one 16-bit format gives that format, computed in f32 and rounded once to it,
# the same bits in the interpreter, the emulator, the GPU and the constant
# folder; f16 with f32 (or with bf16) meets in f32 (docs/language.md, section
# 3).  Before, every such operation gave f32, so a masked f16 operand needed an
# explicit f16(...) before a tensor-core dot.
from __future__ import annotations

import numpy as np
import pytest

import phobos
from phobos.compiler import parse_source
from phobos.frontend.sema import check_kernel
from phobos.types import DType, ScalarType, TileType

from .language_support import MODES, run

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16

TYPED = """
kernel k(h: tensor<f16>[N], b: tensor<bf16>[N], x: tensor<f32>[N], s: f32) {
    let p = h[0 :+ 4]
    let q = b[0 :+ 4]
    let r = x[0 :+ 4]
    let e1 = p + p
    let e2 = p * 2.0
    let e3 = -p
    let e4 = abs(p)
    let e5 = maximum(p, 1.0)
    let e6 = where(p > 0.0, p, 0.0)
    let e7 = exp(q)
    let e8 = p + r
    let e9 = p * q
    let e10 = q * s
    let e11 = sum(p)
    let e12 = fma(p, p, p)
    let e13 = h[0] / h[1]
    let e14 = concat(p, p)
}
"""


def test_the_dtype_of_each_operation_on_16_bit_floats():
    kernel = check_kernel(parse_source(TYPED, "typed.phobos").kernels[0])
    types = {stmt.name: kernel.symbols[stmt].type for stmt in kernel.kernel.body.stmts}
    f16, bf16, f32 = (TileType(d, (4,)) for d in (DType.F16, DType.BF16, DType.F32))
    assert [types[f"e{i}"] for i in range(1, 8)] == [f16, f16, f16, f16, f16, f16, bf16]
    assert [types[f"e{i}"] for i in (8, 9, 10, 12)] == [f32] * 4  # with f32, or the other format: f32
    assert types["e11"] == ScalarType(DType.F32)  # sums accumulate in f32
    assert types["e13"] == ScalarType(DType.F16)
    assert types["e14"] == TileType(DType.F16, (8,))


HALF_ARITHMETIC = """
kernel k(a: tensor<f16>[N], b: tensor<f16>[N], c: tensor<bf16>[N], d: tensor<bf16>[N],
         y: tensor<f32>[N], z: tensor<f32>[N]) {
    let p = a[0 :+ 8]
    let q = b[0 :+ 8]
    y[0 :+ 8] = (p * q + 1.0) / q - p   // each step rounded to f16, stored exactly into f32
    var t = c[0 :+ 8]
    t *= 3.0
    t += d[0 :+ 8]
    z[0 :+ 8] = t                       // bf16 steps, stored exactly into f32
}
"""


@pytest.mark.parametrize("mode", MODES)
def test_16_bit_arithmetic_rounds_each_step_to_the_format(mode):
    a = np.array([65504, 1.5, -0.1, 3.0, 1e-7, 2.0, 7.0, 1000.0], np.float16)
    b = np.array([2.0, 1 / 3, 3.0, -7.0, 1e-3, 0.0, 1.0, 1000.0], np.float16)
    c = np.array([1.0, 1 / 3, 3.0e38, -7.1, 1e-30, 2.0, 1.5, 0.1], BF16)
    d = np.array([1 / 3, 1.0, 0.0, 0.01, 1.0, -6.0, np.nan, 0.2], BF16)
    *_, y, z = run(HALF_ARITHMETIC, mode, a, b, c, d, np.zeros(8, np.float32), np.zeros(8, np.float32))
    with np.errstate(all="ignore"):  # numpy's float16 arithmetic rounds each step to f16 too
        want_y = ((a * b + np.float16(1)) / b - a).astype(np.float32)
        want_z = ((c * BF16(3)) + d).astype(np.float32)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(z, want_z)
    assert np.isinf(y[0])  # 65504 * 2 overflows in f16, as it would in an f16 unit


def test_the_constant_folder_rounds_16_bit_results_too():
    src = """
    kernel k(y: tensor<f32>[N]) {
        y[0] = f16(0.1) * f16(3.0)
        y[1] = bf16(1.0) + bf16(0.00390625)
    }"""
    ptx = phobos.compile_to_ptx(src)
    y = np.zeros(2, np.float32)
    phobos.kernel(src, mode="interpret")(y)
    np.testing.assert_array_equal(y, [np.float32(np.float16(0.1) * np.float16(3.0)), 1.0])  # 1 + 2^-8 ties to 1
    assert "0f3E998000" in ptx and "0f3E999000" not in ptx  # f16(0.1) * f16(3.0): rounded to f16, not the f32 product


MASKED_DOT = """
kernel k(a: tensor<f16>[M, K], b: tensor<f16>[K, N], c: tensor<f32>[M, N]) {
    let rows = reshape(arange(0, 32), [32, 1])
    let x = where(rows < M, a[0 :+ 32, 0 :+ 16], 0.0)   // f16: no f16(...) needed before the dot
    c[0 :+ 32, 0 :+ 32] = dot(x, b[0 :+ 16, 0 :+ 32] * 2.0)
}
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_masked_16_bit_operand_goes_to_the_tensor_cores_as_it_is(mode):
    assert "runs on the tensor cores" in phobos.compile(MASKED_DOT, arch="sm_80").notes[0]
    rng = np.random.default_rng(1)
    a = rng.standard_normal((20, 16)).astype(np.float16)
    b = rng.standard_normal((16, 32)).astype(np.float16)
    *_, c = run(MASKED_DOT, mode, a, b, np.zeros((20, 32), np.float32))
    np.testing.assert_allclose(c, a.astype(np.float64) @ (b.astype(np.float64) * 2), rtol=1e-5, atol=1e-5)


def test_a_literal_must_fit_the_16_bit_format_it_takes():
    with pytest.raises(phobos.PhobosError, match=r"the constant 70000.0 does not fit in f16"):
        phobos.jit("kernel k(h: tensor<f16>[N]) {\n    h[0 :+ 4] = h[0 :+ 4] * 70000.0\n}\n")
