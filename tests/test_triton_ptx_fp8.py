# Triton's fp8 conversions for sm_90a in the emulator (cvt.rn.satfinite.e4m3x2 / e5m2x2 and back), against
# ml_dtypes.  A file of their own, named to run after tests/test_triton_corpus.py and the held-out kernels:
# once Triton 3.6 has compiled these e4m3 conversions for sm_90 in a process, it writes a later f32 ->
# float8e5 conversion for sm_80 with the same cvt form, which needs sm_89, and ptxas refuses it (the
# corpus's c_cast_fp8 on sm_80 then fails in that process).
from __future__ import annotations

import numpy as np
import pytest

from .half_support import ml_dtypes
from .test_emulator_triton_ptx import FP8, WIDE, run

triton = pytest.importorskip("triton", reason="Triton compiles the kernels: pip install triton")
tl = triton.language


@triton.jit
def convert(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask).to(y_ptr.dtype.element_ty), mask=mask)




@pytest.mark.parametrize("source, fp8", [("fp16", "fp8e4nv"), ("fp32", "fp8e4nv"), ("bf16", "fp8e4nv"),
                                         ("fp32", "fp8e5")])
def test_conversions_to_fp8_saturate_and_round_to_nearest_even(source, fp8):
    """cvt.rn.satfinite.e4m3x2.f16x2 / .e4m3x2.f32 / .e5m2x2.f32 (sm_90a; bf16 goes through f32): to nearest
    even, beyond the largest finite value that value, NaN the code 0x7F."""
    kind, top = FP8[fp8]
    x = np.concatenate([np.arange(-520, 520, 0.37), [1e5, -1e5, np.inf, -np.inf, np.nan, 0.0, -0.0, 2.0**-9,
                                                      2.0**-10 * 1.5, 3e-3]])
    with np.errstate(over="ignore"):
        x = x.astype(WIDE[source])
    y = np.zeros(len(x), np.uint8)
    ptx = run(convert, {"x_ptr": f"*{source}", "y_ptr": f"*{fp8}", "n": "i32"}, {"BLOCK": 128},
              [x.view(np.uint16) if source != "fp32" else x, y, len(x)], (-(-len(x) // 128),), 90)
    assert "satfinite" in ptx
    wide = x.astype(np.float32)
    with np.errstate(invalid="ignore"):
        want = np.clip(wide, -top, top).astype(kind).view(np.uint8)
    want = np.where(np.isnan(wide), np.uint8(0x7F), want)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("target", ["fp16", "fp32", "bf16"])
def test_conversions_from_e4m3_are_exact(target):
    codes = np.arange(256, dtype=np.uint8)
    y = np.zeros(256, WIDE[target])
    run(convert, {"x_ptr": "*fp8e4nv", "y_ptr": f"*{target}", "n": "i32"}, {"BLOCK": 128},
        [codes, y.view(np.uint16) if target != "fp32" else y, 256], (2,), 90)
    want = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(y.astype(np.float32)[finite], want[finite])
    assert np.isnan(y.astype(np.float32)[~finite]).all()


