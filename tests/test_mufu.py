# The emulator's `.approx` instructions against the GPU's bits: a sample of what
# an H100 gave (tests/data/mufu_measured.npz, written by tools/build_mufu_tables.py
# from tools/measure_approx.py's measurement: inputs from every swept binade and
# every random sample, NaNs, infinities, zeros and subnormals among them), run
# through the unit's model and through one-instruction PTX kernels.
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from phobos.run import emulator
from phobos.run.emulator import mufu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from measure_approx import kernel_ptx  # noqa: E402

MEASURED = np.load(Path(__file__).parent / "data" / "mufu_measured.npz")
FORMS = sorted(key[len("input_"):] for key in MEASURED.files if key.startswith("input_"))
HALF = [form for form in FORMS if not form.endswith("f32")]


def model(form: str):
    """The emulator's function of raw bits for a PTX form such as rsqrt.approx.ftz.f32."""
    op, *modifiers = form.split(".")
    if modifiers[-1] == "f32":
        unit = mufu.approx_f32(op, "ftz" in modifiers)
        return lambda bits: unit(bits.view(np.float32)).view(np.uint32)
    return mufu.approx_16(op, modifiers[-1])


def test_every_form_is_measured():
    assert {f"{op}.approx.{ftz}f32" for op in mufu.F32_FORMS for ftz in ("", "ftz.")} <= set(FORMS)
    assert len(HALF) == 4


@pytest.mark.parametrize("form", FORMS)
def test_model_gives_the_gpus_bits(form):
    inputs, want = MEASURED[f"input_{form}"], MEASURED[f"result_{form}"]
    with np.errstate(all="ignore"):
        got = model(form)(inputs)
    wrong = np.flatnonzero(got != want)
    assert wrong.size == 0, (f"{form}: {wrong.size} of {inputs.size} differ, first: input {inputs[wrong[0]]:#x} "
                             f"GPU {want[wrong[0]]:#x} emulator {got[wrong[0]]:#x}")


def _emulate(instruction: str, bits: np.ndarray) -> np.ndarray:
    out = np.empty_like(bits)
    emulator.launch(kernel_ptx(instruction), "apply", (-(-bits.size // 256),), (256,),
                    [out, bits.copy(), np.uint32(bits.size)], check_races=False)
    return out


@pytest.mark.parametrize("form", FORMS)
def test_instruction_gives_the_gpus_bits(form):
    inputs, want = MEASURED[f"input_{form}"], MEASURED[f"result_{form}"]
    assert np.array_equal(_emulate(form, inputs), want)


@pytest.mark.parametrize("form", HALF)
def test_pair_forms_apply_the_table_to_each_half(form):
    """The x2 forms give, lane by lane, what the scalar form gives (as the GPU's do)."""
    inputs, want = MEASURED[f"input_{form}"], MEASURED[f"result_{form}"]
    pairs = inputs.astype(np.uint32) | (inputs[::-1].astype(np.uint32) << 16)
    got = _emulate(form.replace("16", "16x2"), pairs)
    assert np.array_equal(got & 0xFFFF, want) and np.array_equal(got >> 16, want[::-1])


@pytest.mark.parametrize("function", ["exp2", "exp", "rsqrt", "log2", "log"])
def test_interpreter_shares_the_units_model(function):
    """exp2, exp, rsqrt, log2 and log of f32 give the GPU's bits in the interpreter as in the emulator (the
    float64 values they used to round differ from them in many of these inputs)."""
    import phobos
    src = f"""kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {{
        y[0 :+ 1024] = {function}(x[0 :+ 1024])
    }}"""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-20, 20, 1000), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1e30,
                                                      -130.0, -126.5, 128.0, 3e-39] + [1.5] * 12]).astype(np.float32)
    if function in ("rsqrt", "log2", "log"):
        x = np.abs(x)
    results = {}
    for mode in ("interpret", "emulate"):
        y = np.zeros_like(x)
        phobos.kernel(src, filename="mufu.phobos", mode=mode)[(1,)](x, y)
        results[mode] = y.view(np.uint32)
    assert np.array_equal(results["interpret"], results["emulate"])
    with np.errstate(all="ignore"):
        rounded = {"exp2": np.exp2, "exp": np.exp, "rsqrt": lambda v: 1 / np.sqrt(v), "log2": np.log2,
                   "log": np.log}[function](
            x.astype(np.float64)).astype(np.float32).view(np.uint32)
    assert (rounded != results["emulate"]).sum() > 100


@pytest.mark.parametrize("form", ["div.full.f32", "div.approx.f32", "div.full.ftz.f32", "div.approx.ftz.f32"])
def test_approximate_division_is_the_units_reciprocal_times_the_dividend(form):
    """ptxas writes div.approx / div.full for sm_90 as MUFU.RCP of the divisor and one FMUL (after scaling
    both operands where the divisor is above 2^126 (.full) or, without .ftz, subnormal): one ulp from the
    correctly rounded quotient for a sixth of these operands."""
    from .emulator_support import run_elementwise
    rng = np.random.default_rng(7)
    a = rng.uniform(-4, 4, 4096).astype(np.float32)
    b = rng.uniform(0.5, 3, 4096).astype(np.float32)
    b[:4] = [2.0 ** 127, -3.0 * 2.0 ** 126, 2.0 ** -130, 1e-40]
    got = run_elementwise(f"{form} %d, %a0, %a1;", "f32", ("f32", a), ("f32", b))
    scale = np.ones_like(b)
    if form.startswith("div.full"):
        scale = np.where(np.abs(b) > 2.0 ** 126, np.float32(0.25), scale)
    if "ftz" not in form:
        scale = np.where(np.abs(b) < 2.0 ** -126, np.float32(2.0 ** 24), scale)
    want = mufu.mufu_rcp(b * scale) * (a * scale)
    if "ftz" in form:
        want = np.where(np.abs(want) < 2.0 ** -126, np.float32(0) * want, want)
    np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))
    assert (got[4:] != a[4:] / b[4:]).mean() > 0.05


def test_ex2_reference_product_rounds_as_the_series():
    """The ex2 table's reference, a product of two small tables of the series 2^f (mufu._ex2_product),
    rounds to f32 as the series itself does at every one of the 2^23 fractions, so that the stored deltas
    (written against the series) still give the GPU's bits."""
    fractions = np.arange(1 << 23, dtype=np.int64)
    series = mufu._ex2_fraction(fractions / 2.0 ** 23).astype(np.float32).view(np.uint32)
    assert np.array_equal(mufu.reference_bits("ex2"), series)
