"""The 8-bit floats f8e4m3 and f8e5m2: the constant semantics (phobos.constants), the emulator's cvt forms
and the conversions compiled code makes (cvt on sm_89+, integer arithmetic before), each bit for bit
against ml_dtypes over every code and the f32/f16 edge values (tests/fp8_support.py); tensors of them from
numpy (ml_dtypes or uint8 codes) and torch, in every mode; the checker's rules."""
import numpy as np
import pytest

import phobos
from phobos.compiler import compile as compile_source
from phobos.constants import F8_NAN, convert, f8_bits, f8_values, largest_float
from phobos.errors import PhobosError
from phobos.run import emulator
from phobos.types import DType

from .emulator_support import run_elementwise
from .fp8_support import CODES, FORMATS, ML_TYPES, f8_reference, f32_edges, pair_cases
from .language_support import MODES, run

NAMES = list(FORMATS)


@pytest.mark.parametrize("name", NAMES)
def test_every_code_widens_exactly(name):
    dtype = FORMATS[name]
    values = f8_values(CODES, dtype)
    expected = CODES.view(ML_TYPES[name]).astype(np.float32)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(values.view(np.uint32)[~nan], expected.view(np.uint32)[~nan])
    assert (values.view(np.uint32)[nan] == 0x7FFFFFFF).all()  # the canonical f32 NaN
    assert nan.sum() == (2 if name == "e4m3" else 6)


@pytest.mark.parametrize("name", NAMES)
def test_conversion_rounds_to_nearest_even_and_saturates(name):
    x = f32_edges(name)
    np.testing.assert_array_equal(f8_bits(x, FORMATS[name]), f8_reference(x, name))


def test_saturation_and_signs_by_example():
    e4m3, e5m2 = DType.F8E4M3, DType.F8E5M2
    assert largest_float(e4m3) == 448 and largest_float(e5m2) == 57344
    assert [convert(v, e4m3) for v in (1e6, -np.inf, 464.0, 463.9, 2.0 ** -10, 3 * 2.0 ** -11)] == \
        [448.0, -448.0, 448.0, 448.0, 0.0, 2.0 ** -9]
    assert [convert(v, e5m2) for v in (np.inf, -1e9, 61440.0, 2.0 ** -17)] == [57344.0, -57344.0, 57344.0, 0.0]
    assert f8_bits(np.float32(-1e-30), e4m3) == 0x80  # a result of zero keeps its sign
    assert f8_bits(np.float32(np.nan), e5m2) == f8_bits(-np.float32(np.nan), e4m3) == F8_NAN
    assert f8_values(np.uint8(0x7C), e5m2) == np.inf  # e5m2 holds infinities; a conversion never makes one


@pytest.mark.parametrize("name", NAMES)
def test_emulator_cvt_forms_against_ml_dtypes(name):
    for what, instruction, out, inputs, expected in pair_cases(name):
        got = run_elementwise(instruction, out, *inputs)
        bad = np.flatnonzero(got != expected)
        assert not bad.size, f"{what}: {bad.size} results differ, first input {[a[bad[0]] for _, a in inputs]}: " \
                             f"{got[bad[0]]:#x}, expected {expected[bad[0]]:#x}"


CASTS = """
kernel casts(x: tensor<f32>[N], a: tensor<f8e4m3>[N], b: tensor<f8e5m2>[N], wide: tensor<f32>[N],
             half: tensor<f16>[N], brain: tensor<bf16>[N]) {
    let i = program_id(0) * 256
    let v = x[i :+ 256]
    a[i :+ 256] = f8e4m3(v)
    b[i :+ 256] = v
    wide[i :+ 256] = f8e4m3(v) + f8e5m2(v) * 2.0
    half[i :+ 256] = f16(f8e5m2(v))
    brain[i :+ 256] = bf16(f8e4m3(v))
}
"""


def _expected_casts(x):
    a, b = f8_bits(x, DType.F8E4M3), f8_bits(x, DType.F8E5M2)
    va, vb = f8_values(a, DType.F8E4M3), f8_values(b, DType.F8E5M2)
    return a, b, (va + vb * np.float32(2)).astype(np.float32), vb.astype(np.float16), va


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compiled_conversions_give_the_constants_bits(arch):
    """sm_80 converts with integer arithmetic, sm_90 with cvt: both as phobos.constants says."""
    x = np.concatenate([f32_edges("e4m3"), f32_edges("e5m2")[::7]])
    n = len(x)
    k = compile_source(CASTS, arch=arch)
    assert ("cvt.rn.satfinite.e4m3x2.f32" in k.ptx) == (arch == "sm_90")
    a, b, wide = np.zeros(n, np.uint8), np.zeros(n, np.uint8), np.zeros(n, np.float32)
    half, brain = np.zeros(n, np.float16), np.zeros(n, np.uint16)
    emulator.launch(k.ptx, "casts", (-(-n // 256),), (k.threads,), [x, a, b, wide, half, brain, n],
                    shared_bytes=k.shared_bytes)
    ea, eb, ewide, ehalf, ebrain = _expected_casts(x)
    np.testing.assert_array_equal(a, ea)
    np.testing.assert_array_equal(b, eb)
    np.testing.assert_array_equal(wide.view(np.uint32), ewide.view(np.uint32))
    np.testing.assert_array_equal(half.view(np.uint16)[~np.isnan(ehalf)], ehalf.view(np.uint16)[~np.isnan(ehalf)])
    np.testing.assert_array_equal(brain, (ebrain.view(np.uint32) >> 16).astype(np.uint16))


@pytest.mark.parametrize("mode", MODES)
def test_fp8_tensors_in_every_mode(mode):
    """ml_dtypes arrays, uint8 codes; stores saturate, NaNs are 0x7F."""
    x = f32_edges("e5m2")[::13]
    n = len(x)
    a = np.zeros(n, ML_TYPES["e4m3"])
    b = np.zeros(n, np.uint8)
    out = run(CASTS, mode, x, a, b, np.zeros(n, np.float32), np.zeros(n, np.float16),
              np.zeros(n, np.uint16))
    ea, eb, ewide, _, _ = _expected_casts(x)
    assert out[1].dtype == ML_TYPES["e4m3"]
    np.testing.assert_array_equal(out[1].view(np.uint8), ea)
    np.testing.assert_array_equal(out[2], eb)
    np.testing.assert_array_equal(out[3].view(np.uint32), ewide.view(np.uint32))


def test_torch_fp8_tensors_on_the_cpu():
    torch = pytest.importorskip("torch")
    mod = phobos.jit(CASTS, mode="interpret")
    x = torch.tensor(f32_edges("e4m3")[::11])
    n = len(x)
    a, b = torch.zeros(n, dtype=torch.float8_e4m3fn), torch.zeros(n, dtype=torch.float8_e5m2)
    mod.casts(x, a, b, torch.zeros(n), torch.zeros(n, dtype=torch.float16), torch.zeros(n, dtype=torch.bfloat16))
    np.testing.assert_array_equal(a.view(torch.uint8).numpy(), f8_bits(x.numpy(), DType.F8E4M3))
    np.testing.assert_array_equal(b.view(torch.uint8).numpy(), f8_bits(x.numpy(), DType.F8E5M2))


def test_a_wrong_tensor_type_names_the_ones_taken():
    mod = phobos.jit(CASTS, mode="interpret")
    n = 4
    with pytest.raises(PhobosError, match=r"argument 'a': expected a 1-D f8e4m3 tensor.*got int8 array"):
        mod.casts(np.zeros(n, np.float32), np.zeros(n, np.int8), np.zeros(n, np.uint8), np.zeros(n, np.float32),
                  np.zeros(n, np.float16), np.zeros(n, np.uint16))


def test_dlpack_names_the_fp8_codes():
    from phobos.launch.binding import ACCEPTED_DTYPES, DLPACK_FLOAT8
    assert DLPACK_FLOAT8 == {10: "float8_e4m3fn", 12: "float8_e5m2"}  # kDLFloat8_e4m3fn, kDLFloat8_e5m2
    assert set(DLPACK_FLOAT8.values()) <= {n for names in ACCEPTED_DTYPES.values() for n in names}


@pytest.mark.parametrize("src, message", [
    ("kernel k(a: tensor<f8e4m3>[16, 32], c: tensor<f32>[16, 16]) {\n"
     "    c[0 :+ 16, 0 :+ 16] = dot(a[0 :+ 16, 0 :+ 32], trans(a[0 :+ 16, 0 :+ 32]), precision=\"tf32\")\n}",
     "precision=\"tf32\" applies to f32 operands, not f8e4m3: f8e4m3 products are always exact"),
    ("kernel k(a: tensor<f8e4m3>[16], b: tensor<f8e5m2>[16], c: tensor<f32>[1, 1]) {\n"
     "    c[0 :+ 1, 0 :+ 1] = dot(reshape(a[0 :+ 16], [1, 16]), reshape(b[0 :+ 16], [16, 1]))\n}",
     "dot\\(\\) operands have different types: f8e4m3 and f8e5m2"),
])
def test_checker_rules(src, message):
    with pytest.raises(PhobosError, match=message):
        phobos.compile(src)


def test_fp8_values_compute_in_f32_and_declare_tiles():
    src = """
    kernel k(x: tensor<f32>[8], y: tensor<f32>[8]) {
        var t: tile<f8e5m2>[8] = f8e5m2(x[0 :+ 8])
        t = f8e5m2(t * 3.0)
        y[0 :+ 8] = t
    }"""
    x = np.array([1, 2, 3, 1e5, -1e5, 0.1, np.inf, -0.0], np.float32)
    (_, y) = run(src, "interpret", x, np.zeros(8, np.float32))
    e5m2 = DType.F8E5M2
    np.testing.assert_array_equal(y, f8_values(f8_bits(f8_values(f8_bits(x, e5m2), e5m2) * 3, e5m2), e5m2))


BETWEEN = """
kernel between(a: tensor<f8e4m3>[N], b: tensor<f8e5m2>[N], back: tensor<f8e4m3>[N]) {
    let i = program_id(0) * 128
    b[i :+ 128] = f8e5m2(a[i :+ 128])
    back[i :+ 128] = b[i :+ 128]
}
"""


@pytest.mark.parametrize("mode", MODES)
def test_conversions_between_the_8_bit_formats(mode):
    """Every e4m3 code to e5m2 (rounded: e5m2 has one fraction bit less) and back (exact where it fits)."""
    a = CODES.copy()
    _, b, back = run(BETWEEN, mode, a, np.zeros(256, np.uint8), np.zeros(256, np.uint8))
    want = f8_bits(f8_values(a, DType.F8E4M3), DType.F8E5M2)
    np.testing.assert_array_equal(b, want)
    np.testing.assert_array_equal(back, f8_bits(f8_values(want, DType.F8E5M2), DType.F8E4M3))
