# The 8-bit floats' conversions, for the tests that check them: the inputs
# (every code, the f32 and f16 values at their edges) and what OCP FP8 with
# PTX's satfinite saturation makes of them, computed by ml_dtypes - an
# implementation independent of Phobos's - on inputs clipped to the largest
# finite value (saturation), with NaN the code 0x7F (what NVIDIA's cuda_fp8.hpp
# gives for any NaN).  The same one-instruction kernels run in the emulator
# (tests/test_fp8.py) and on the GPU (tests/test_fp8_gpu.py).
from __future__ import annotations

import numpy as np
import pytest

from phobos.constants import F8_FORMATS, F8_NAN
from phobos.types import DType

ml_dtypes = pytest.importorskip("ml_dtypes")

FORMATS = {"e4m3": DType.F8E4M3, "e5m2": DType.F8E5M2}
ML_TYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
CODES = np.arange(256, dtype=np.uint8)


def f32_edges(name: str) -> np.ndarray:
    """f32 inputs that decide a conversion to the format: every code's value, each half way between two
    neighbouring codes (the ties) and the f32 values either side of it, the values around and beyond the
    largest finite one, infinities, NaNs of both signs and several payloads, signed zeros, the f32
    subnormals, and every f16 value."""
    magnitudes = F8_FORMATS[FORMATS[name]].magnitudes.astype(np.float32)
    ties = ((magnitudes[1:].astype(np.float64) + magnitudes[:-1]) / 2).astype(np.float32)
    near = [np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(0))]
    top = magnitudes[-1]
    beyond = np.array([top * 1.0625, top * 1.125, top * 1.0625 + 1, top * 2, 3.4e38, np.inf], np.float32)
    specials = np.array([0.0, 1e-45, 2.0 ** -130, 2.0 ** -126, 1.5e-38], np.float32)
    nans = np.array([0x7FC00000, 0x7FFFFFFF, 0x7F800001, 0xFFC00000, 0xFF800001], np.uint32).view(np.float32)
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    positive = np.concatenate([magnitudes, ties, *near, beyond, specials])
    return np.concatenate([positive, -positive, nans, halves])


def f8_reference(x: np.ndarray, name: str) -> np.ndarray:
    """The codes cvt.rn.satfinite gives `x` (see the header)."""
    x = np.asarray(x, np.float32)
    top = np.float32(F8_FORMATS[FORMATS[name]].magnitudes[-1])
    with np.errstate(invalid="ignore"):
        codes = np.clip(x, -top, top).astype(ML_TYPES[name]).view(np.uint8)
    return np.where(np.isnan(x), np.uint8(F8_NAN), codes)


def f16_reference(codes: np.ndarray, name: str) -> np.ndarray:
    """The f16 bit patterns cvt.rn.f16x2.e4m3x2 / .e5m2x2 gives codes: exact, NaN the canonical 0x7FFF."""
    values = np.asarray(codes, np.uint8).view(ML_TYPES[name]).astype(np.float16)
    return np.where(np.isnan(values), np.uint16(0x7FFF), values.view(np.uint16))


def pair_cases(name: str) -> list[tuple[str, str, str, list[tuple[str, np.ndarray]], np.ndarray]]:
    """(what, instruction, its result's PTX type, its inputs by PTX type, the results expected) of each cvt
    form of the format:
    pairs of f32 (the first operand's code in the high byte), pairs of f16 (every f16 value in the low
    half, a permutation of them in the high one), every pair of codes widened to f16x2, and .relu."""
    x = f32_edges(name)
    y = np.random.default_rng(8).permutation(x)
    halves = np.arange(1 << 16, dtype=np.uint32)
    shuffled = np.random.default_rng(9).permutation(halves)
    f16 = lambda bits: bits.astype(np.uint16).view(np.float16).astype(np.float32)  # noqa: E731
    pairs16 = (shuffled << 16) | halves
    codes = halves.astype(np.uint16)
    relu = np.where(np.signbit(x) & ~np.isnan(x), np.float32(0), x)  # .relu makes -0.0 +0.0 too
    return [
        ("f32 pairs", f"cvt.rn.satfinite.{name}x2.f32 %d, %a0, %a1;", "b16", [("f32", x), ("f32", y)],
         (f8_reference(x, name).astype(np.uint16) << 8) | f8_reference(y, name)),
        ("f16 pairs", f"cvt.rn.satfinite.{name}x2.f16x2 %d, %a0;", "b16", [("b32", pairs16)],
         (f8_reference(f16(shuffled), name).astype(np.uint16) << 8) | f8_reference(f16(halves), name)),
        ("codes to f16", f"cvt.rn.f16x2.{name}x2 %d, %a0;", "b32", [("b16", codes)],
         (f16_reference(codes >> 8, name).astype(np.uint32) << 16) | f16_reference(codes & 0xFF, name)),
        ("relu", f"cvt.rn.satfinite.relu.{name}x2.f32 %d, %a0, %a0;", "b16", [("f32", x)],
         (f8_reference(relu, name).astype(np.uint16) << 8) | f8_reference(relu, name)),
    ]
