# Kernels written from docs/language.md alone, run the three ways (interpreter, PTX emulator, GPU)
# against NumPy, with the PTX validated by ptxas for sm_75 and sm_90: each one a place where an
# implementation once disagreed with the reference.
from __future__ import annotations

import numpy as np
import pytest

import phobos
from phobos.errors import PhobosError
from tests.language_support import MODES, assert_ptxas_accepts, run

ml_dtypes = pytest.importorskip("ml_dtypes")


# ------------------------------------------------------------ 16-bit float atomics
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("addend", ["0.1", "-2.75", "nan"])
def test_atomic_add_of_a_constant_into_a_16_bit_tensor(dtype, addend, mode):
    """The constant is rounded to the tensor's format and added as such (its bits, not its integer part)."""
    src = f"kernel k(h: tensor<{dtype}>[N]) {{ atomic_add(h[0 :+ 8], {addend}) }}"
    assert_ptxas_accepts(src)
    npdt = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    h = np.arange(8).astype(npdt)
    (got,) = run(src, mode, h)
    want = (h.astype(np.float32) + np.float32(npdt(float(addend)))).astype(npdt)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


# ------------------------------------------------------------ reduce of every element
WELFORD = """
fn welford(m1, s1, n1, m2, s2, n2) {
    let n = n1 + n2
    let d = m2 - m1
    let w = where(n > 0.0, n2 / n, 0.0)
    return (m1 + d * w, s1 + s2 + d * d * n1 * w, n)
}
kernel k(X: tensor<f32>[M, N], mean: tensor<f32>[M], var_: tensor<f32>[M]) {
    let r = program_id(0)
    let x = X[r, 0 :+ 64]
    let ones = where(arange(64) < N, 1.0, 0.0)
    let (mu, m2, n) = reduce((x, 0.0 * x, ones), combine=welford)
    mean[r] = mu
    var_[r] = m2 / n
}
"""


@pytest.mark.parametrize("mode", MODES)
def test_reduce_without_an_axis_reduces_every_element_to_a_scalar(mode):
    assert_ptxas_accepts(WELFORD)
    x = np.random.default_rng(0).standard_normal((3, 50)).astype(np.float32)
    _, mean, var = run(WELFORD, mode, x, np.zeros(3, np.float32), np.zeros(3, np.float32), grid=(3,))
    np.testing.assert_allclose(mean, x.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, x.var(1), rtol=1e-5)


# ------------------------------------------------------------ knobs forced where @autotune does not list them
ROWS = """
@autotune(BN in [16])
kernel rows(x: tensor<f32>[M, N], y: tensor<f32>[M, N]) {
    let r = program_id(0)
    y[r, 0 :+ BN] = x[r, 0 :+ BN] * 2.0
}
"""


def test_a_knob_forced_by_configure_where_autotune_does_not_list_it_is_used():
    kernel = phobos.jit(ROWS, mode="emulate").kernels["rows"].configure(WARPS=8)
    x = np.ones((2, 10), np.float32)
    y = np.zeros_like(x)
    kernel[(2,)](x, y)
    np.testing.assert_array_equal(y, 2 * x)
    assert kernel.config == {"BN": 16, "WARPS": 8}
    assert "// 256 threads per CTA" in kernel.ptx


@pytest.mark.parametrize("knob,value,rule", [("WARPS", 0, "a power of two from 1 to 32"), ("STAGES", 9, "from 2 to 8")])
def test_a_knob_forced_by_configure_outside_its_range_is_refused(knob, value, rule):
    kernel = phobos.jit(ROWS, mode="interpret").kernels["rows"]
    with pytest.raises(PhobosError, match=f"rows: configure\\({knob}={value}\\): {knob} must be {rule}, got {value}"):
        kernel.configure(**{knob: value})


# ------------------------------------------------------------ scan and reduce of 16-bit floats
COMBINE_16 = """
fn add(a, b) { return a + b }
fn larger(a, b) { return maximum(a, b) }
kernel k(h: tensor<DT>[N], s: tensor<DT>[N], m: tensor<DT>[N], r: tensor<DT>[4]) {
    let x = h[0 :+ 48]
    s[0 :+ 48] = scan(x, 0, add)
    m[0 :+ 48] = scan(x, 0, larger)
    r[0] = reduce(x, combine=add)
    r[1 :+ 1] = reduce(x, 0, larger)
    r[2] = reduce(reshape(x, [6, 8]), combine=larger)
}
"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_scan_and_reduce_with_a_combine_function_of_16_bit_floats(dtype, mode):
    """The combine function runs on the f32 registers that hold 16-bit floats (the PTX shuffled and selected
    them as 16-bit registers, which ptxas refuses); integers keep the sums exact in any order."""
    src = COMBINE_16.replace("DT", dtype)
    assert_ptxas_accepts(src)
    npdt = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    h = np.round(np.random.default_rng(3).standard_normal(48) * 4).astype(npdt)
    _, s, m, r = run(src, mode, h, np.zeros(48, npdt), np.zeros(48, npdt), np.zeros(4, npdt))
    x = h.astype(np.float32)
    np.testing.assert_array_equal(s.astype(np.float32), np.cumsum(x))
    np.testing.assert_array_equal(m.astype(np.float32), np.maximum.accumulate(x))
    np.testing.assert_array_equal(r.astype(np.float32), [x.sum(), x.max(), x.max(), 0])


# ------------------------------------------------------------ located errors
@pytest.mark.parametrize("dtype,conversion", [("f16", "f16"), ("bf16", "bf16"), ("f8e4m3", "f8e4m3"), ("i8", "i32")])
def test_storing_an_f64_into_a_narrow_tensor_suggests_the_conversion_that_rounds_once(dtype, conversion):
    """f16(x) of an f64 rounds once; the f32(x) suggested before rounded twice."""
    src = f"kernel k(a: tensor<f64>[N], h: tensor<{dtype}>[N]) {{ h[0 :+ 4] = a[0 :+ 4] }}"
    with pytest.raises(PhobosError, match=rf"test.phobos:1:\d+: cannot store an f64 value into a tensor of {dtype}; "
                                          rf"convert it with {conversion}\(\.\.\.\)"):
        phobos.jit(src, filename="test.phobos", mode="interpret")


# ------------------------------------------------------------ the call
@pytest.mark.parametrize("dtype,numpy_name", [("f8e4m3", "float8_e4m3fn"), ("f8e5m2", "float8_e5m2"), ("bf16", "bfloat16")])
def test_a_numpy_array_of_the_wrong_type_for_an_ml_dtypes_format_is_told_to_convert_with_ml_dtypes(dtype, numpy_name):
    """numpy has no 8-bit floats: the advice names ml_dtypes' type, not np.float8_e4m3fn."""
    kernel = phobos.jit(f"kernel k(f: tensor<{dtype}>[N]) {{ }}", mode="interpret").kernels["k"]
    with pytest.raises(PhobosError, match=rf"argument 'f': .*; convert it: f = f\.astype\(ml_dtypes\.{numpy_name}\)"):
        kernel(np.zeros(8, np.float32))


# ------------------------------------------------------------ NaN bits of the math library
LIBM_FUNCTIONS = ["exp10", "expm1", "log10", "log1p", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                  "acosh", "atanh", "erfc"]


@pytest.mark.parametrize("mode", MODES)
def test_f32_math_functions_of_the_f64_library_give_the_canonical_nan(mode):
    """docs/language.md: a math function whose f32 result is NaN gives 0x7FFFFFFF (the compiled code narrowed
    the f64 library's NaN with its sign and payload: 0x7FC00000, 0xFFC00000, an argument's 0x7FE00001)."""
    outs = "".join(f", o_{f}: tensor<f32>[N]" for f in LIBM_FUNCTIONS)
    body = "".join(f"    o_{f}[0 :+ 8] = {f}(x)\n" for f in LIBM_FUNCTIONS)
    src = f"kernel k(a: tensor<f32>[N]{outs}) {{\n    let x = a[0 :+ 8]\n{body}}}"
    assert_ptxas_accepts(src)
    x = np.array([-1.0, -2.0, np.inf, -np.inf, 0.0, -5.0, 0.5, 2.0], np.float32)
    x.view(np.uint32)[4] = 0x7FA00001  # a signaling NaN with a payload
    results = run(src, mode, x, *[np.zeros(8, np.float32) for _ in LIBM_FUNCTIONS])[1:]
    for name, got in zip(LIBM_FUNCTIONS, results):
        nan = np.isnan(got)
        assert nan[4], name
        assert (got.view(np.uint32)[nan] == 0x7FFFFFFF).all(), (name, [hex(b) for b in got.view(np.uint32)[nan]])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("function,x", [("log", -1.0), ("log2", -2.0), ("log10", -np.inf), ("log1p", -2.0),
                                        ("acosh", 0.5), ("atanh", 2.0)])
def test_an_f64_math_function_out_of_its_domain_gives_the_nan_made_of_numbers(function, x, mode):
    """docs/language.md: a NaN made of numbers is 0xFFF8000000000000 in f64 (the library's was 0x7FF8...)."""
    src = f"kernel k(a: tensor<f64>[N], o: tensor<f64>[N]) {{ o[0 :+ 2] = {function}(a[0 :+ 2]) }}"
    assert_ptxas_accepts(src)
    _, got = run(src, mode, np.array([x, x]), np.zeros(2))
    assert [hex(b) for b in got.view(np.uint64)] == ["0xfff8000000000000"] * 2


@pytest.mark.parametrize("mode", MODES)
def test_f64_sigmoid_passes_on_the_nan_of_minus_x(mode):
    """sigmoid is 1 / (1 + exp(-x)): an f64 NaN argument comes back quieted with its sign flipped, as the
    compiled code gives it (the interpreter kept the sign)."""
    src = "kernel k(a: tensor<f64>[N], o: tensor<f64>[N]) { o[0 :+ 2] = sigmoid(a[0 :+ 2]) }"
    x = np.array([0x7FF4000000000001, 0xFFF0000000000002], np.uint64).view(np.float64)
    _, got = run(src, mode, x, np.zeros(2))
    assert [hex(b) for b in got.view(np.uint64)] == ["0xfffc000000000001", "0x7ff8000000000002"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_erf_of_a_signed_zero_keeps_its_sign(dtype, mode):
    """erf(-0.0) is -0.0, as C's (the compiled Abramowitz & Stegun formula gave +0.0)."""
    src = f"kernel k(a: tensor<{dtype}>[N], o: tensor<{dtype}>[N]) {{ o[0 :+ 2] = erf(a[0 :+ 2]) }}"
    assert_ptxas_accepts(src)
    npdt = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[dtype]
    _, got = run(src, mode, np.array([-0.0, 0.0], npdt), np.ones(2, npdt))
    assert list(np.signbit(got.astype(np.float32))) == [True, False] and not got.astype(np.float32).any()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,made", [("f32", 0xFFC00000), ("f64", 0xFFF8000000000000)])
def test_remainder_of_zero_by_zero_and_inf_by_inf_is_the_nan_made_of_numbers(dtype, made, mode):
    """As inf % 2 and 5 % 0 are (tests/test_nan_bits.py): the compiled fmod negated the quotient 0 / 0 (or
    inf / inf), a NaN, and so flipped its sign (0x7FC00000)."""
    src = f"kernel k(a: tensor<{dtype}>[N], o: tensor<{dtype}>[N]) {{ o[0 :+ 4] = a[0 :+ 4] % a[0 :+ 4] }}"
    assert_ptxas_accepts(src)
    npdt, uint = (np.float32, np.uint32) if dtype == "f32" else (np.float64, np.uint64)
    _, got = run(src, mode, np.array([0.0, -0.0, np.inf, -np.inf], npdt), np.zeros(4, npdt))
    assert [hex(b) for b in got.view(uint)] == [hex(made)] * 4


# ------------------------------------------------------------ 8-bit floats
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2"])
def test_a_math_function_of_an_8_bit_float_gives_f32(dtype, mode):
    """docs/language.md: any operation on 8-bit floats computes in f32 and gives f32 (the compiled code rounded
    exp(x) back to the 8-bit format, and saturated floor(inf) of e5m2 to 57344)."""
    src = f"""kernel k(a: tensor<{dtype}>[N], e: tensor<f32>[N], s: tensor<f32>[N], f: tensor<f32>[N]) {{
        let x = a[0 :+ 4]
        e[0 :+ 4] = exp(x)
        s[0 :+ 4] = sqrt(x)
        var y: tile<f32>[4] = floor(x)
        f[0 :+ 4] = y
    }}"""
    assert_ptxas_accepts(src)
    npdt = ml_dtypes.float8_e4m3fn if dtype == "f8e4m3" else ml_dtypes.float8_e5m2
    x = np.array([1.5, 2.5, 5.0, np.inf if dtype == "f8e5m2" else 448.0], npdt)
    _, e, s, f = run(src, mode, x, *[np.zeros(4, np.float32) for _ in range(3)])
    wide = x.astype(np.float32)
    np.testing.assert_allclose(e[:3], np.exp(wide[:3]), rtol=1e-6)
    np.testing.assert_array_equal(s, np.sqrt(wide))
    np.testing.assert_array_equal(f, np.floor(wide))


@pytest.mark.parametrize("mode", MODES)
def test_f32_atan2_of_a_nan_gives_the_canonical_nan(mode):
    """atan2 is one of the f64 library's functions: in f32 its NaN is the canonical one in every mode (the
    interpreter passed on a NaN argument's payload)."""
    src = "kernel k(a: tensor<f32>[N], b: tensor<f32>[N], o: tensor<f32>[N]) { o[0 :+ 3] = atan2(a[0 :+ 3], b[0 :+ 3]) }"
    assert_ptxas_accepts(src)
    y = np.array([0x7FA00001, 0x3F800000, 0xFFA00005], np.uint32).view(np.float32)
    x = np.array([0xFFA00002, 0x7FA00003, 0x3F800000], np.uint32).view(np.float32)
    *_, got = run(src, mode, y, x, np.zeros(3, np.float32))
    assert [hex(b) for b in got.view(np.uint32)] == ["0x7fffffff"] * 3


@pytest.mark.parametrize("expr", ["(1.0, 2.0)[0]", "split(join(a[0 :+ 4], a[0 :+ 4]))[0]", "pair(a[0])[1]"])
def test_indexing_a_tuple_is_a_located_error(expr):
    """A tuple is taken apart with let (a, b) = ..., not indexed (an internal AttributeError before)."""
    src = f"fn pair(x) {{ return (x, x) }}\nkernel k(a: tensor<f32>[N]) {{ let t = {expr} }}"
    with pytest.raises(PhobosError, match=r"test.phobos:2:\d+: this gives 2 values, not one; take them apart"):
        phobos.jit(src, filename="test.phobos", mode="interpret")


# ------------------------------------------------------------ knobs
KNOBBED = "kernel k(x: tensor<f32>[M, N]) { x[0, 0 :+ 4] = x[0, 0 :+ 4] * 2.0 }"


def test_cluster_m_and_cluster_n_both_2_is_refused_at_the_decorator():
    """docs/language.md: CLUSTER_M and CLUSTER_N take 1 or 2, not both 2 (a configuration with both was taken
    and its clusters silently dropped)."""
    src = "@autotune(CLUSTER_M in [1, 2], CLUSTER_N in [1, 2])\n" + KNOBBED
    with pytest.raises(PhobosError, match=r"test.phobos:1:\d+: CLUSTER_M and CLUSTER_N cannot both be 2"):
        phobos.jit(src, filename="test.phobos", mode="interpret")
    with pytest.raises(PhobosError, match="CLUSTER_M and CLUSTER_N cannot both be 2"):
        phobos.jit(KNOBBED, mode="interpret").kernels["k"].configure(CLUSTER_M=2, CLUSTER_N=2)


def test_a_require_leaves_the_pair_of_clusters_out():
    src = "@autotune(CLUSTER_M in [1, 2], CLUSTER_N in [1, 2])\n@require(CLUSTER_M * CLUSTER_N < 4)\n" + KNOBBED
    x = np.ones((2, 4), np.float32)
    phobos.jit(src, mode="interpret").kernels["k"](x)
    np.testing.assert_array_equal(x[0], 2.0)


# ------------------------------------------------------------ literals
@pytest.mark.parametrize("mode", MODES)
def test_hexadecimal_64_bit_patterns_in_a_literal_expression_taken_as_u64(mode):
    """docs/language.md: a hexadecimal literal past the largest i64 is the i64 with those bits, or where a u64
    is asked for, the u64; an expression of literals alone is computed exactly, then takes its context's
    dtype. Stored into a u64 tensor the patterns were i64s (0xFFFFFFFFFFFFFFFF / 2 gave 0; 0x8000000000000000
    >> 63 and 0xFFFFFFFF00000000 | 0xFF were refused as negative)."""
    exprs = ["0xFFFFFFFFFFFFFFFF / 2", "0x8000000000000000 >> 63", "0xFFFFFFFF00000000 | 0xFF",
             "0xFFFFFFFFFFFFFFFF % 10", "0xFFFFFFFFFFFFFFFF - 1"]
    body = "\n".join(f"    u[{i}] = {e}\n    s[{i}] = {e}" for i, e in enumerate(exprs))
    src = f"kernel k(u: tensor<u64>[N], s: tensor<i64>[N]) {{\n{body}\n}}"
    assert_ptxas_accepts(src)
    u, s = run(src, mode, np.zeros(5, np.uint64), np.zeros(5, np.int64))
    assert [int(v) for v in u] == [2**63 - 1, 1, 0xFFFFFFFF000000FF, 5, 2**64 - 2]
    assert [int(v) for v in s] == [0, -1, -4294967041, -1, -2]  # the i64s with those bits, C's division


@pytest.mark.parametrize("text", [r"a\\ b", r"\"q\" \\ x", r"\\\\n"])
def test_an_escaped_backslash_before_any_character_is_one_escape(text):
    """docs/language.md: the escapes are \\n \\t \\" \\\\; the lexer read the second backslash of \\\\ as the
    start of an unknown escape when a space or letter followed ("a\\\\ b")."""
    src = f'kernel k(a: tensor<f32>[N]) {{ device_print("{text}") }}'
    phobos.jit(src, filename="test.phobos", mode="interpret")


def test_an_unknown_escape_is_still_a_located_error():
    src = 'kernel k(a: tensor<f32>[N]) { device_print("\\\\ \\q") }'
    with pytest.raises(PhobosError, match=r"test.phobos:1:\d+: unknown escape '\\q' in a string"):
        phobos.jit(src, filename="test.phobos", mode="interpret")


@pytest.mark.parametrize("mode", MODES)
def test_hexadecimal_64_bit_patterns_passed_to_a_function_where_a_u64_is_asked_for(mode):
    """A declared u64 parameter, and an untyped one used with a u64, take the literal expression unsigned."""
    src = """fn typed(x: u64) -> u64 { return x }
fn masked(v, m) { return v & m }
kernel k(o: tensor<u64>[N], x: tensor<u64>[N]) {
    o[0] = typed(0xFFFFFFFFFFFFFFFF >> 60)
    o[1] = masked(x[0], 0xFFFFFFFF00000000 | 0xFF)
}"""
    assert_ptxas_accepts(src)
    o, _ = run(src, mode, np.zeros(2, np.uint64), np.array([0xFFFFFFFFFFFFFFF5, 0], np.uint64))
    assert [hex(int(v)) for v in o] == ["0xf", "0xffffffff000000f5"]


# ------------------------------------------------------------ scatters onto one element
@pytest.mark.parametrize("mode", MODES)
def test_a_scatter_that_writes_one_element_from_several_places_of_the_tile_writes_one_of_the_values(mode):
    """Duplicate indices among the threads of a program instance and among the stores of each thread: no
    race in any mode (the stores are relaxed, strong ones), and each element holds one of the values sent
    to it."""
    src = "kernel k(idx: tensor<i32>[N], x: tensor<f32>[N], y: tensor<f32>[M]) { y[idx[0 :+ 1024]] = x[0 :+ 1024] }"
    assert_ptxas_accepts(src)
    assert "st.relaxed.gpu.global" in phobos.compile_to_ptx(src)
    idx = (np.arange(1024) * 7 % 13).astype(np.int32)  # 13 targets, each from about 79 places
    x = np.arange(1024, dtype=np.float32)
    _, _, y = run(src, mode, idx, x, np.full(16, -1, np.float32))
    for target in range(16):
        sent = x[idx == target]
        assert (y[target] in sent) if len(sent) else y[target] == -1
