"""The 8-bit float conversions on a real GPU (sm_89 or newer; skipped with the reason elsewhere): every
cvt form the compiler and the emulator know - f32 pairs and f16x2 to e4m3x2/e5m2x2 (satfinite, .relu), and
both codes of every pair back to f16x2 - run as one-instruction kernels on the GPU and in the emulator over
every code and the f32/f16 edge values (tests/fp8_support.py), compared bit for bit; and the compiler's
conversions (cvt on the GPU) against the constants.  A mismatch names the form, how many results differ
and the first input.

    pytest -m gpu tests/test_fp8_gpu.py -q
"""
from __future__ import annotations

import numpy as np
import pytest

from phobos.run import runtime
from phobos.run.emulator import Module

from .emulator_support import elementwise_ptx, numpy_dtype
from .fp8_support import FORMATS, pair_cases

pytestmark = pytest.mark.gpu


def _run(text: str, out: str, inputs, on_gpu: bool) -> np.ndarray:
    n = len(inputs[0][1])
    arrays = [np.ascontiguousarray(a, numpy_dtype(t)) for t, a in inputs]
    result = np.zeros(n, numpy_dtype(out))
    args, grid = [result, *arrays, n], (-(-n // 128),)
    if on_gpu:
        runtime.launch(text, "k", grid, (128,), args, timeout_s=60)
    else:
        Module(text, "fp8.ptx").launch("k", grid, (128,), args)
    return result


@pytest.mark.parametrize("name", list(FORMATS))
def test_cvt_bits_match_the_emulator(name):
    if tuple(runtime.device_properties().compute_capability) < (8, 9):
        pytest.skip("8-bit float conversions need compute capability 8.9 or newer")
    problems = []
    for what, instruction, out, inputs, expected in pair_cases(name):
        text = elementwise_ptx(instruction, out, [t for t, _ in inputs])
        gpu, emulated = _run(text, out, inputs, True), _run(text, out, inputs, False)
        for against, values in (("the emulator", emulated), ("ml_dtypes' reference", expected)):
            bad = np.flatnonzero(gpu != values)
            if bad.size:
                first = bad[0]
                given = ", ".join(repr(np.asarray(a)[first]) for _, a in inputs)
                problems.append(f"{name} {what}: {bad.size} of {len(gpu)} GPU results differ from {against}; "
                                f"first input {given}: GPU {int(gpu[first]):#x}, {against} {int(values[first]):#x}")
    assert not problems, "\n".join(problems)


def test_compiled_conversions_on_the_gpu():
    """The CASTS kernel of test_fp8.py on the GPU through the call (cvt.rn.satfinite, cvt.rn.f16x2.e4m3x2)."""
    from .fp8_support import f32_edges
    from .language_support import run
    from .test_fp8 import CASTS, _expected_casts
    x = np.concatenate([f32_edges("e4m3"), f32_edges("e5m2")[::7]])
    n = len(x)
    out = run(CASTS, "gpu", x, np.zeros(n, np.uint8), np.zeros(n, np.uint8), np.zeros(n, np.float32),
              np.zeros(n, np.float16), np.zeros(n, np.uint16))
    ea, eb, ewide, _, _ = _expected_casts(x)
    np.testing.assert_array_equal(out[1], ea)
    np.testing.assert_array_equal(out[2], eb)
    np.testing.assert_array_equal(out[3].view(np.uint32), ewide.view(np.uint32))
