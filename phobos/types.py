# The types of Phobos values, shared by the checker, the IR and the back end.
#
# A dtype is an element type.  Values are computed in the *compute* dtypes
# (bool, i32, i64, u32, u64, f32, f64).  f16 and bf16 (*16-bit floats*) and
# f8e4m3 and f8e5m2 (*8-bit floats*, OCP FP8) are *narrow float* dtypes:
# values may have them (a load from such a tensor, a conversion bf16(x)), and
# `dot` of two of them runs on the tensor cores; arithmetic is computed in f32
# (`compute`) - on two values of one 16-bit format rounded back to it, which
# gives that format, on 8-bit floats left in f32 - and the compiler holds them
# in f32 registers.
# i8 and i16 are *storage* dtypes: only the element type of a tensor, whose
# loads give i32 values.  A store converts to the tensor's dtype (round to
# nearest even; integers keep their low bits).  Three kinds of value exist:
#
#   ScalarType(dtype)          one value, the same in every thread of a program
#   TileType(dtype, shape)     a block of values of compile-time shape
#   TensorType(dtype, dims)    an array in global memory; dims are size names
#                              bound at launch, or integer literals
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class DType(Enum):
    """Element types; the value is the name used in source and in numpy."""

    BOOL = "bool"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    U32 = "u32"
    U64 = "u64"
    F8E4M3 = "f8e4m3"
    F8E5M2 = "f8e5m2"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"

    __hash__ = object.__hash__  # members are singletons; Enum's own hash is slow Python code

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def nbytes(self) -> int:
        return max(self.bits // 8, 1)

    @property
    def is_float(self) -> bool:
        return self in (DType.F8E4M3, DType.F8E5M2, DType.F16, DType.BF16, DType.F32, DType.F64)

    @property
    def is_int(self) -> bool:
        return self in (DType.I8, DType.I16, DType.I32, DType.I64, DType.U32, DType.U64)

    @property
    def is_signed(self) -> bool:
        return self in (DType.I8, DType.I16, DType.I32, DType.I64)

    @property
    def compute(self) -> "DType":
        """The dtype that values of this element type are computed in."""
        return _PROMOTED.get(self, self)

    @property
    def is_storage_only(self) -> bool:
        """Only the element type of a tensor (i8, i16): values are never of this dtype."""
        return self in _PROMOTED and not self.is_narrow

    @property
    def is_narrow(self) -> bool:
        """A float narrower than f32 (f16, bf16, f8e4m3, f8e5m2): values may have it; arithmetic on
        them runs in f32, which holds each of their values exactly."""
        return self.is_half or self.is_f8

    @property
    def is_half(self) -> bool:
        """A 16-bit float (f16, bf16): values may have it; arithmetic on them runs in f32, rounded back."""
        return self in (DType.F16, DType.BF16)

    @property
    def is_f8(self) -> bool:
        """An 8-bit float (f8e4m3, f8e5m2: OCP FP8's E4M3 - no infinities - and E5M2)."""
        return self in (DType.F8E4M3, DType.F8E5M2)

    @property
    def dot_promotes(self) -> bool:
        """Whether `x + dot(a, b)` of tiles of this dtype sums the product from zero and then adds it to x in
        f32 (*promotes* it), rather than starting the product's sums from x (one rounding).  So for the 8-bit
        floats, whose tensor-core sums keep fewer bits than f32 (13 fraction bits on Hopper): a long K loop's
        accumulator stays f32-precise, as in cuBLAS's FP8 GEMMs and DeepSeek-V3's training."""
        return self.is_f8

    @property
    def loaded(self) -> "DType":
        """The dtype of the values a load from a tensor of this element type gives."""
        return self if self.is_narrow else self.compute

    @property
    def numpy_name(self) -> str:
        return _NUMPY[self]

    def __str__(self) -> str:
        return self.value

    @staticmethod
    def from_name(name: str) -> "DType | None":
        try:
            return DType(name)
        except ValueError:
            return None


_BITS = {
    DType.BOOL: 1, DType.I8: 8, DType.I16: 16, DType.I32: 32, DType.I64: 64, DType.U32: 32, DType.U64: 64,
    DType.F8E4M3: 8, DType.F8E5M2: 8, DType.F16: 16, DType.BF16: 16, DType.F32: 32, DType.F64: 64,
}
_PROMOTED = {DType.F8E4M3: DType.F32, DType.F8E5M2: DType.F32, DType.F16: DType.F32, DType.BF16: DType.F32,
             DType.I8: DType.I32, DType.I16: DType.I32}
# NumPy's names (bfloat16 and the 8-bit floats are ml_dtypes' types, as JAX and torch name them)
_NUMPY = {
    DType.BOOL: "bool", DType.I8: "int8", DType.I16: "int16", DType.I32: "int32",
    DType.I64: "int64", DType.U32: "uint32", DType.U64: "uint64", DType.F8E4M3: "float8_e4m3fn",
    DType.F8E5M2: "float8_e5m2", DType.F16: "float16", DType.BF16: "bfloat16", DType.F32: "float32",
    DType.F64: "float64",
}

COMPUTE_DTYPES = (DType.BOOL, DType.I32, DType.I64, DType.U32, DType.U64, DType.F32, DType.F64)
NARROW_FLOATS = (DType.F8E4M3, DType.F8E5M2, DType.F16, DType.BF16)
VALUE_DTYPES = COMPUTE_DTYPES + NARROW_FLOATS  # what values (scalars, tiles) may be


@dataclass(frozen=True)
class ScalarType:
    dtype: DType

    def __str__(self) -> str:
        return str(self.dtype)


@dataclass(frozen=True)
class TileType:
    dtype: DType
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        n = 1
        for e in self.shape:
            n *= e
        return n

    def __str__(self) -> str:
        return f"tile<{self.dtype}>[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    dims: tuple[str | int, ...]

    @property
    def rank(self) -> int:
        return len(self.dims)

    def __str__(self) -> str:
        return f"tensor<{self.dtype}>[{', '.join(map(str, self.dims))}]"


@dataclass(frozen=True)
class TupleType:
    """Several values at once: what a device function returns (`()`: no value), reduce and scan of tuples."""

    items: tuple["ScalarType | TileType", ...]

    def __str__(self) -> str:
        return f"({', '.join(map(str, self.items))})" if self.items else "no value"


ValueType = ScalarType | TileType
VOID = TupleType(())


def with_dtype(t: ValueType, dtype: DType) -> ValueType:
    return ScalarType(dtype) if isinstance(t, ScalarType) else TileType(dtype, t.shape)


def shape_of(t: ValueType) -> tuple[int, ...] | None:
    """The tile shape, or None for a scalar."""
    return t.shape if isinstance(t, TileType) else None


def broadcast_shapes(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """Numpy broadcasting of two tile shapes (None = scalar); raises ValueError when they clash."""
    if a is None:
        return b
    if b is None:
        return a
    rank = max(len(a), len(b))
    a1 = (1,) * (rank - len(a)) + a
    b1 = (1,) * (rank - len(b)) + b
    out = []
    for x, y in zip(a1, b1):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes [{', '.join(map(str, a))}] and [{', '.join(map(str, b))}] do not broadcast")
        out.append(max(x, y))
    return tuple(out)
