# Kernels written from docs/language.md alone, run the three ways (interpreter, PTX emulator, GPU)
# against NumPy, with the PTX validated by ptxas for sm_75 and sm_90: each one a place where an
# implementation once disagreed with the reference.
from __future__ import annotations

import numpy as np
import pytest

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
