# PTX scalar types and the NumPy dtypes that hold them.
#
# Registers and memory keep raw bits; an instruction reinterprets them as its
# own type.  `.b` types are unsigned bit containers, `.f16` values are held as
# numpy float16 and `.bf16` as their 16-bit pattern (NumPy has no bfloat16);
# pairs of 8-bit floats (`.e4m3x2`, `.e5m2x2`) as their 16 bits.  `UNMODELLED_TYPES`
# names the other type words of the PTX ISA, which valid PTX may carry and the
# emulator does not implement (so that they are reported as unsupported, not as
# malformed).
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PtxType:
    """One PTX fundamental type: kind is 'b', 'u', 's', 'f', 'bf' or 'pred'."""

    name: str
    kind: str
    bits: int
    dtype: np.dtype

    @property
    def size(self) -> int:
        return max(self.bits // 8, 1)

    @property
    def is_float(self) -> bool:
        return self.kind in ("f", "bf")

    @property
    def is_signed(self) -> bool:
        return self.kind == "s"

    @property
    def unsigned(self) -> np.dtype:
        """The unsigned integer dtype of the same width (the raw-bits view)."""
        return UINT[self.bits]


UINT = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}
SINT = {8: np.dtype(np.int8), 16: np.dtype(np.int16), 32: np.dtype(np.int32), 64: np.dtype(np.int64)}


def _table() -> dict[str, PtxType]:
    types = {"pred": PtxType("pred", "pred", 1, np.dtype(np.bool_))}
    for bits in (8, 16, 32, 64):
        types[f"b{bits}"] = PtxType(f"b{bits}", "b", bits, UINT[bits])
        types[f"u{bits}"] = PtxType(f"u{bits}", "u", bits, UINT[bits])
        types[f"s{bits}"] = PtxType(f"s{bits}", "s", bits, SINT[bits])
    types["f16"] = PtxType("f16", "f", 16, np.dtype(np.float16))
    types["bf16"] = PtxType("bf16", "bf", 16, UINT[16])
    types["f32"] = PtxType("f32", "f", 32, np.dtype(np.float32))
    types["f64"] = PtxType("f64", "f", 64, np.dtype(np.float64))
    # Packed pairs only ever travel as bits here (an 8-bit float pair: two codes in 16 bits).
    types["f16x2"] = PtxType("f16x2", "b", 32, UINT[32])
    types["bf16x2"] = PtxType("bf16x2", "b", 32, UINT[32])
    types["e4m3x2"] = PtxType("e4m3x2", "b", 16, UINT[16])
    types["e5m2x2"] = PtxType("e5m2x2", "b", 16, UINT[16])
    return types


TYPES: dict[str, PtxType] = _table()


# Type words of the PTX ISA (up to 9.x) that no instruction of the emulator takes.
UNMODELLED_TYPES = frozenset({
    "b1", "b128", "s4", "u4", "s16x2", "u16x2", "f32x2", "tf32", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1",
    "ue8m0", "ue4m3", "e2m1x2", "e3m2x2", "e2m3x2", "ue8m0x2", "e2m1x4", "e4m3x4", "e5m2x4", "e3m2x4",
    "e2m3x4", "b4x16", "b4x16_p64", "b6x16_p32", "b6p2x16", "s2f6x2",
}) - set(TYPES)
