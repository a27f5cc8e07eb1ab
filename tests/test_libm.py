# The math library of f64 (phobos/lower/libm.py): every function, on random
# arguments over its whole domain and on special ones, against mpmath at 40
# digits - within 2 ulp (erfc 3, gelu 4; docs/language.md, "Accuracy of math
# functions"), NaN
# and infinities and signed zeros where C puts them - in the emulator and on
# the GPU (marked `gpu`).  The f32 functions computed through it are correctly
# rounded (at most half an ulp off) and give the interpreter's bits.  Its
# constants and fits (phobos/lower/mathlib_tables.py) are what
# tools/fit_mathlib.py writes.  Before, every math function but sqrt was f32
# only, and tan, the inverse and hyperbolic functions, expm1, log1p, log10,
# exp10 and erfc did not exist.
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import phobos

from .language_support import MODES

mpmath = pytest.importorskip("mpmath")
mpmath.mp.dps = 40

REFERENCE = {
    "exp": mpmath.exp, "exp2": lambda x: mpmath.power(2, x), "exp10": lambda x: mpmath.power(10, x),
    "expm1": mpmath.expm1, "log": mpmath.log, "log2": lambda x: mpmath.log(x, 2), "log10": mpmath.log10,
    "log1p": mpmath.log1p, "sin": mpmath.sin, "cos": mpmath.cos, "tan": mpmath.tan, "asin": mpmath.asin,
    "acos": mpmath.acos, "atan": mpmath.atan, "sinh": mpmath.sinh, "cosh": mpmath.cosh, "tanh": mpmath.tanh,
    "asinh": mpmath.asinh, "acosh": mpmath.acosh, "atanh": mpmath.atanh, "erf": mpmath.erf, "erfc": mpmath.erfc,
    "sigmoid": lambda x: 1 / (1 + mpmath.exp(-x)), "gelu": lambda x: x * mpmath.erfc(-x / mpmath.sqrt(2)) / 2,
    "rsqrt": lambda x: 1 / mpmath.sqrt(x),
}
#: (low, high) of the random arguments; a positive low draws them log-uniformly
DOMAINS = {
    "exp": (-746, 710), "exp2": (-1076, 1024), "exp10": (-324, 309), "expm1": (-50, 710), "log": (1e-310, 1e308),
    "log2": (1e-310, 1e308), "log10": (1e-310, 1e308), "log1p": (1e-300, 1e308), "asin": (-1, 1), "acos": (-1, 1),
    "acosh": (1, 1e308), "atanh": (-1, 1), "sinh": (-711, 711), "cosh": (-711, 711), "erfc": (-10, 28),
    "gelu": (-40, 40), "rsqrt": (1e-310, 1e308),
}
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, -0.5, 2.0 ** -1074, 1e-300, 1e-20, 2.0 ** -30,
           1.7976931348623157e308, -1.7976931348623157e308, 709.78, 710.0, -745.2, 6381956970095103.0 * 2.0 ** 797,
           math.pi / 2, math.pi, 1e22, 27.3, 30.0, -30.0, 0.75, 1.5, 3.0]
BATCH = 128


def arguments(fn: str, rng) -> np.ndarray:
    low, high = DOMAINS.get(fn, (-1e308, 1e308))
    if low > 0:
        spread = np.exp(rng.uniform(np.log(low), np.log(high), 160))
    elif high > 1e100:  # every exponent, both signs
        spread = np.sign(rng.standard_normal(160)) * np.exp(rng.uniform(-700, 700, 160))
    else:
        spread = rng.uniform(low, high, 160)
    near = rng.uniform(max(low, -4), min(high, 4), 100)
    values = np.concatenate([SPECIAL, spread, near])
    return np.concatenate([values, np.zeros(-len(values) % BATCH)])


#: The documented bound of each function in ulps, where it is not 2 (CUDA's double erfc is within 4).
BOUNDS = {"erfc": 3, "gelu": 4}


def error(got: float, want, bound: float = 2) -> float:
    """|got - want| in ulps of want, over the bound: `bound` ulp, or below 2^-1022 16 units of 2^-1074 (a
    subnormal's ulp, whose bits a subnormal result lacks); inf where the kind differs: a NaN, an infinity, a
    zero of the other sign (`want` a float for those, an mpf otherwise)."""
    if isinstance(want, float):
        same = (math.isnan(got) and math.isnan(want)) or (got == want and math.copysign(1, got) == math.copysign(1, want))
        return 0.0 if same else math.inf
    if math.isnan(got) or math.isinf(got):
        return math.inf
    exponent = int(mpmath.floor(mpmath.log(abs(want), 2)))
    bound = bound if exponent >= -1022 else 16
    return float(abs(mpmath.mpf(got) - want) / mpmath.mpf(2) ** (max(exponent, -1022) - 52)) / bound


EVEN = ("cos", "cosh", "exp", "exp2", "exp10", "erfc", "sigmoid", "rsqrt", "acos", "log", "log2", "log10")


def reference(fn: str, x: float):
    """The exact value as an mpf, or as a float where it is a NaN, an infinity or a zero (C's, signed; gelu
    at -inf its limit, -0.0)."""
    if fn == "gelu" and x == -math.inf:
        return -0.0
    with np.errstate(all="ignore"):
        numpy_value = NUMPY.get(fn, lambda v: None)(np.float64(x))
    if numpy_value is not None and (not np.isfinite(numpy_value) or numpy_value == 0):
        return float(numpy_value)  # NumPy (C's libm) has the specials right
    try:
        value = REFERENCE[fn](mpmath.mpf(x))
    except (ValueError, ZeroDivisionError):
        return math.nan
    except OverflowError:  # mpmath's erfc of a huge argument: the limits
        return {"erfc": 0.0 if x > 0 else 2.0, "erf": math.copysign(1.0, x),
                "gelu": x if x > 0 else -0.0}[fn]
    if isinstance(value, mpmath.mpc) or mpmath.isnan(value):
        return math.nan
    if mpmath.isinf(value) or abs(value) >= mpmath.mpf(2) ** 1024 * (1 - mpmath.mpf(2) ** -54):
        return math.copysign(math.inf, value)  # rounds to an infinity
    if abs(value) <= mpmath.mpf(2) ** -1075:
        value = 0  # rounds to a zero
    if value == 0:
        return -0.0 if math.copysign(1, x) < 0 and fn not in EVEN else 0.0
    return value


NUMPY = {"exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10,
         "log1p": np.log1p, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
         "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
         "acosh": np.arccosh, "atanh": np.arctanh, "rsqrt": lambda v: 1 / np.sqrt(v)}


def run(fn: str, x: np.ndarray, mode) -> np.ndarray:
    src = f"kernel k(x: tensor<f64>[N], y: tensor<f64>[N]) {{\n    let i = program_id(0) * {BATCH}\n" \
          f"    y[i :+ {BATCH}] = {fn}(x[i :+ {BATCH}])\n}}\n"
    y = np.zeros_like(x)
    phobos.kernel(src, mode=mode)[(len(x) // BATCH,)](x, y)
    return y


def worst(fn: str, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    errors = [error(float(g), reference(fn, float(v)), BOUNDS.get(fn, 2)) for g, v in zip(y, x)]
    i = int(np.argmax(errors))
    return errors[i], float(x[i])


@pytest.mark.parametrize("mode", ["emulate", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("fn", sorted(REFERENCE))
def test_f64_functions_are_within_two_ulp(fn, mode):
    x = arguments(fn, np.random.default_rng(sorted(REFERENCE).index(fn)))
    y = run(fn, x, mode)
    err, at = worst(fn, x, y)
    assert err <= 1.0, f"{fn}({at!r}) is {err:.2f} times its bound off"


F32_THROUGH_F64 = ["exp10", "expm1", "log10", "log1p", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                   "acosh", "atanh", "erfc"]
F32_DOMAINS = {"log10": (1e-30, 1e30), "log1p": (-0.99, 1e30), "asin": (-1, 1), "acos": (-1, 1), "acosh": (1, 1e30),
               "atanh": (-1, 1), "exp10": (-45, 38), "expm1": (-20, 88), "sinh": (-89, 89), "cosh": (-89, 89),
               "erfc": (-5, 10)}


@pytest.mark.parametrize("mode", MODES)
def test_the_f32_functions_through_f64_are_correctly_rounded(mode):
    rng = np.random.default_rng(1)
    source = "\n".join(f"    {fn}_out[i :+ 128] = {fn}({fn}_in[i :+ 128])" for fn in F32_THROUGH_F64)
    params = ", ".join(f"{fn}_in: tensor<f32>[N], {fn}_out: tensor<f32>[N]" for fn in F32_THROUGH_F64)
    src = f"kernel k({params}) {{\n    let i = program_id(0) * 128\n{source}\n}}\n"
    args = []
    for fn in F32_THROUGH_F64:
        low, high = F32_DOMAINS.get(fn, (-1e4, 1e4))
        args += [rng.uniform(low, high, 256).astype(np.float32), np.zeros(256, np.float32)]
    phobos.kernel(src, mode=mode)[(2,)](*args)
    for fn, x, y in zip(F32_THROUGH_F64, args[::2], args[1::2]):
        for a, b in zip(x, y):
            want = REFERENCE[fn](mpmath.mpf(float(a)))
            ulp = mpmath.mpf(2) ** (max(int(mpmath.floor(mpmath.log(abs(want), 2))), -126) - 23)
            assert abs(mpmath.mpf(float(b)) - want) <= ulp / 2 * (1 + 1e-6), f"{fn}({a!r}): {b!r}, not {want}"


def test_atan2_takes_c_s_quadrants_and_special_cases():
    inf, nan = math.inf, math.nan
    y = np.array([0.0, -0.0, 0.0, -0.0, 1.0, 1.0, -1.0, inf, inf, -inf, 1.0, 1.0, 3.0, -2.0, nan, 1.0] + [0.0] * 112)
    x = np.array([1.0, 1.0, -1.0, -1.0, 0.0, -0.0, 0.0, inf, -inf, -inf, inf, -inf, -4.0, 0.5, 1.0, nan] + [1.0] * 112)
    src = "kernel k(y: tensor<f64>[N], x: tensor<f64>[N], a: tensor<f64>[N], s: tensor<f32>[N]) {\n" \
          "    a[0 :+ 128] = atan2(y[0 :+ 128], x[0 :+ 128])\n" \
          "    s[0 :+ 128] = atan2(f32(y[0 :+ 128]), f32(x[0 :+ 128]))\n}\n"
    for mode in ("interpret", "emulate"):
        a, s = np.zeros(128), np.zeros(128, np.float32)
        phobos.kernel(src, mode=mode)(y, x, a, s)
        want = np.arctan2(y, x)
        np.testing.assert_array_equal(np.signbit(a[:14]), np.signbit(want[:14]))
        np.testing.assert_allclose(a, want, rtol=2 ** -52, atol=0)
        np.testing.assert_array_equal(s, np.arctan2(y, x).astype(np.float32))


def test_the_tables_are_what_the_fitting_tool_writes():
    done = subprocess.run([sys.executable, "tools/fit_mathlib.py", "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
