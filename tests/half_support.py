# The 16-bit float formats f16 and bf16 for the tests of their arithmetic: rounding an exact value (a
# Fraction) once to nearest, ties to the even code, found among the format's own values (numpy's float16 and
# ml_dtypes' bfloat16 give them), independently of the emulator's rounding (numerics.round_to_format).
from __future__ import annotations

import bisect
import functools
from fractions import Fraction

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

FORMAT = {  # name -> (numpy type, fraction bits, largest finite code, infinity's code)
    "f16": (np.float16, 10, 0x7BFF, 0x7C00),
    "bf16": (ml_dtypes.bfloat16, 7, 0x7F7F, 0x7F80),
}
NAMES = {np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16"}


@functools.lru_cache(maxsize=None)
def magnitudes(name: str) -> tuple[list[float], list[int]]:
    """The values of the non-negative finite codes, increasing, then the largest value plus its ulp standing
    for the infinity: a tie between the largest value and it rounds to the infinity (the largest code is
    odd), as IEEE overflow under round-to-nearest does."""
    kind, man, top, inf = FORMAT[name]
    values = np.arange(top + 1, dtype=np.uint16).view(kind).astype(np.float64).tolist()
    return values + [values[-1] + 2.0 ** (np.floor(np.log2(values[-1])) - man)], list(range(top + 1)) + [inf]


def round_code(x: Fraction, negative_zero: bool, name: str) -> int:
    """The code of the exact value x rounded to nearest, ties to the even code; an exact zero is -0 if
    `negative_zero`."""
    if x == 0:
        return 0x8000 if negative_zero else 0
    values, codes = magnitudes(name)
    a = abs(x)
    i = bisect.bisect_left(values, float(a))
    near = [j for j in (i - 1, i, i + 1) if 0 <= j < len(values)]
    best = min(near, key=lambda j: (abs(Fraction(values[j]) - a), codes[j] & 1))
    return codes[best] | (0x8000 if x < 0 else 0)
