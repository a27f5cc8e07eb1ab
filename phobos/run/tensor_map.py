# Tensor maps for TMA (`cp.async.bulk.tensor`): one description, two encodings.
#
# A kernel that copies tiles with TMA takes a 128-byte tensor map parameter
# (`.param .align 64 .b8 tmap[128]`) describing a tensor in global memory: its
# element type, sizes and byte strides, the box (tile) one copy moves, the
# shared-memory swizzle and what out-of-bound elements read as.  `TensorMap`
# holds that description and the tensor it describes; it is passed as the
# argument for such a parameter, to the GPU runtime or to the PTX emulator:
#
# * on the GPU (`runtime.encode_tensor_map`), the CUDA driver builds the real,
#   opaque CUtensorMap with `cuTensorMapEncodeTiled` (cuda.py) from the map's
#   `codes` and fields, for the tensor's device address (`device_address`: a
#   torch/CuPy tensor, anything with `__cuda_array_interface__`, or an int
#   address with explicit sizes);
# * in the emulator (`emulator_bytes`), the tensor is a NumPy array that the
#   emulator places in its global memory, and the 128 bytes are the emulator's
#   own encoding of the same fields, which its `cp.async.bulk.tensor` reads
#   back with `EmulatedTensorMap.decode`.  Little-endian, unused bytes zero:
#
#       0   8 bytes  magic b"PHOBOSTM"
#       8   u64      global address
#      16   u8 x 6   rank, data type, swizzle, interleave, L2 promotion, OOB fill
#                    (the CUtensorMap* enum values of the CUDA driver API)
#      24   u64 x 5  sizes (elements), innermost first
#      64   u64 x 4  byte strides of dimensions 1..4 (dimension 0 is dense)
#      96   u16 x 5  box sizes, innermost first
#     106   u8 x 5   element strides
#
# A kernel may build a map itself (Triton's on-device descriptors): PTX's
# tensormap.replace writes one field at a time into 128 bytes of memory, here
# at the offsets of this encoding (FIELD_OFFSETS, the magic stamped with each),
# and tensormap.cp_fenceproxy copies the map to global memory, where the bulk
# copies read it (emulator/ops_bulk.py).
#
# Sizes, strides and boxes are checked here against the driver's documented
# rules (cuda.h, cuTensorMapEncodeTiled), so a bad map is a clear error naming
# the field on both paths instead of CUDA_ERROR_INVALID_VALUE.  Nothing here
# calls the driver: the emulator reads this module without a GPU.
from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import LaunchError

# name -> (CUtensorMapDataType, bytes per element)
DTYPES = {
    "u8": (0, 1), "u16": (1, 2), "u32": (2, 4), "s32": (3, 4), "u64": (4, 8), "s64": (5, 8),
    "f16": (6, 2), "f32": (7, 4), "f64": (8, 8), "bf16": (9, 2), "f32.ftz": (10, 4), "tf32": (11, 4),
    "tf32.ftz": (12, 4),
    "f8e4m3": (0, 1), "f8e5m2": (0, 1),  # 8-bit floats move as bytes (the driver has no type of them)
}
# name -> (CUtensorMapSwizzle, span in bytes)
SWIZZLES = {"none": (0, 0), "32B": (1, 32), "64B": (2, 64), "128B": (3, 128)}
L2_PROMOTIONS = {"none": 0, "64B": 1, "128B": 2, "256B": 3}
OOB_FILLS = {"zero": 0, "nan": 1}  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE / _NAN_REQUEST_ZERO_FMA
MAX_RANK = 5
MAGIC = b"PHOBOSTM"
# The emulator's encoding, field by field (struct formats, in order; the header above gives the offsets).
_FIELDS = (("magic", "8s"), ("global_address", "Q"), ("rank", "B"), ("elemtype", "B"), ("swizzle_mode", "B"),
           ("interleave_layout", "B"), ("l2_promotion", "B"), ("fill_mode", "B"), ("", "2x"), ("global_dim", "5Q"),
           ("global_stride", "4Q"), ("box_dim", "5H"), ("element_stride", "5B"))
_LAYOUT = struct.Struct("<" + "".join(form for _, form in _FIELDS))
# field -> (byte offset, bytes per entry) in the encoding: what PTX's tensormap.replace (on a map in
# memory, Triton's on-device descriptors) rewrites.  `rank` holds the rank (the instruction gives rank - 1),
# `elemtype` the CUtensorMapDataType of the instruction's code (PTX_ELEMENT_TYPES).
FIELD_OFFSETS = {name: (struct.calcsize("<" + "".join(form for _, form in _FIELDS[:i])),
                        struct.calcsize("<" + form) // (int(form[:-1]) if form[-1] != "s" and form[:-1] else 1))
                 for i, (name, form) in enumerate(_FIELDS) if name}
# tensormap.replace.tile.elemtype's codes (PTX ISA, "Tensormap new_val validity"; they are not the driver's)
PTX_ELEMENT_TYPES = {0: "u8", 1: "u16", 2: "u32", 3: "s32", 4: "u64", 5: "s64", 6: "f16", 7: "f32",
                     8: "f32.ftz", 9: "f64", 10: "bf16", 11: "tf32", 12: "tf32.ftz"}

_NUMPY_NAMES = {"uint8": "u8", "uint16": "u16", "uint32": "u32", "int32": "s32", "uint64": "u64",
                "int64": "s64", "float16": "f16", "float32": "f32", "float64": "f64",
                "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}
_TORCH_NAMES = {"torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float32": "f32",
                "torch.float64": "f64", "torch.uint8": "u8", "torch.int32": "s32", "torch.int64": "s64",
                "torch.float8_e4m3fn": "f8e4m3", "torch.float8_e5m2": "f8e5m2"}


@dataclass(frozen=True)
class TensorMap:
    """A tiled TMA tensor map over `tensor`.  Sizes, strides and boxes are innermost
    first, as cuTensorMapEncodeTiled takes them; `TensorMap.tiled` builds one from a
    tensor and a box in the tensor's own (outermost-first) order."""

    tensor: Any
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, dimensions 1..rank-1
    box: tuple[int, ...]
    element_strides: tuple[int, ...] = ()
    swizzle: str = "none"
    l2_promotion: str = "none"
    oob_fill: str = "zero"
    interleave: str = field(default="none", init=False)

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(x) for x in self.shape))
        object.__setattr__(self, "strides", tuple(int(x) for x in self.strides))
        object.__setattr__(self, "box", tuple(int(x) for x in self.box))
        object.__setattr__(self, "element_strides",
                           tuple(int(x) for x in self.element_strides) or (1,) * len(self.shape))
        self.validate()

    @classmethod
    def tiled(cls, tensor: Any, box: tuple[int, ...], *, dtype: str | None = None, swizzle: str = "none",
              l2_promotion: str = "none", oob_fill: str = "zero") -> "TensorMap":
        """A map over a strided tensor (NumPy, torch, CuPy...) whose last dimension is
        dense, moving boxes of `box` elements (same order as the tensor's shape).
        `dtype` is required where the array's own type does not say it (bf16 data in
        a NumPy uint16 array)."""
        shape, strides, itemsize, found = _inspect(tensor)
        dtype = dtype or found
        if dtype not in DTYPES:
            raise ValueError(f"TensorMap: unknown element type {dtype!r} (one of {', '.join(DTYPES)})")
        if DTYPES[dtype][1] != itemsize:
            raise ValueError(f"TensorMap: {dtype} elements are {DTYPES[dtype][1]} bytes, the tensor's are {itemsize}")
        if len(box) != len(shape):
            raise ValueError(f"TensorMap: the box {tuple(box)} needs one size per dimension of {tuple(shape)}")
        if strides and strides[-1] != itemsize:
            raise ValueError(f"TensorMap: the last dimension of the tensor must be dense "
                             f"(stride {strides[-1]} bytes, elements of {itemsize})")
        return cls(tensor, dtype, tuple(reversed(shape)), tuple(reversed(strides[:-1])), tuple(reversed(box)),
                   swizzle=swizzle, l2_promotion=l2_promotion, oob_fill=oob_fill)

    def on(self, tensor: Any) -> "TensorMap":
        """The same map over another tensor of the same layout (a device copy of a host array)."""
        return dataclasses.replace(self, tensor=tensor)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def element_size(self) -> int:
        return DTYPES[self.dtype][1]

    @property
    def box_bytes(self) -> int:
        """Bytes one copy moves (the transaction count of its mbarrier)."""
        return int(np.prod([-(-b // s) for b, s in zip(self.box, self.element_strides)])) * self.element_size

    def validate(self) -> None:
        """Raise ValueError naming the first field that cuTensorMapEncodeTiled would reject."""
        def fail(message):
            raise ValueError(f"TensorMap: {message}")
        if self.dtype not in DTYPES:
            fail(f"unknown element type {self.dtype!r}")
        for name, table in (("swizzle", SWIZZLES), ("l2_promotion", L2_PROMOTIONS), ("oob_fill", OOB_FILLS)):
            if getattr(self, name) not in table:
                fail(f"{name} must be one of {', '.join(table)}, got {getattr(self, name)!r}")
        rank = self.rank
        if not 1 <= rank <= MAX_RANK:
            fail(f"rank {rank}: 1 to {MAX_RANK} dimensions")
        if len(self.strides) != rank - 1 or len(self.box) != rank or len(self.element_strides) != rank:
            fail(f"a rank-{rank} map needs {rank - 1} strides, {rank} box sizes and {rank} element strides")
        if any(not 1 <= d <= 1 << 32 for d in self.shape):
            fail(f"sizes {self.shape} must be 1 .. 2^32")
        if any(s % 16 or not 0 < s < 1 << 40 for s in self.strides):
            fail(f"byte strides {self.strides} must be positive multiples of 16 below 2^40")
        if any(not 1 <= b <= 256 for b in self.box):
            fail(f"box {self.box} sizes must be 1 .. 256")
        if any(not 1 <= e <= 8 for e in self.element_strides):
            fail(f"element strides {self.element_strides} must be 1 .. 8")
        inner = self.box[0] * self.element_size
        if inner % 16:
            fail(f"the box's inner dimension is {inner} bytes, not a multiple of 16")
        span = SWIZZLES[self.swizzle][1]
        if span and inner > span:
            fail(f"a {self.swizzle} swizzle needs the box's inner dimension ({inner} bytes) to be at most {span}")
        if self.oob_fill == "nan" and self.dtype not in ("f16", "bf16", "f32", "f64", "tf32", "f32.ftz", "tf32.ftz"):
            fail("NaN out-of-bound fill needs a floating-point type")

    @property
    def codes(self) -> tuple[int, int, int, int]:
        """The CUtensorMap* codes of its element type, swizzle, L2 promotion and out-of-bound fill."""
        return (DTYPES[self.dtype][0], SWIZZLES[self.swizzle][0], L2_PROMOTIONS[self.l2_promotion],
                OOB_FILLS[self.oob_fill])

    # -- the emulator's encoding
    def emulator_bytes(self, address: int) -> bytes:
        """The 128 bytes the emulator's cp.async.bulk.tensor reads (see the module header)."""
        if address % 16:
            raise ValueError(f"the global address {address:#x} is not 16-byte aligned")
        pad = MAX_RANK - self.rank
        data_type, swizzle, l2_promotion, oob_fill = self.codes
        raw = _LAYOUT.pack(MAGIC, address, self.rank, data_type, swizzle, 0, l2_promotion, oob_fill,
                           *self.shape, *(0,) * pad, *self.strides, *(0,) * pad,
                           *self.box, *(0,) * pad, *self.element_strides, *(0,) * pad)
        return raw.ljust(128, b"\0")

    # -- what the driver's encoding needs (runtime.encode_tensor_map)
    def device_address(self) -> int:
        """The device address of the tensor (torch/CuPy tensor, CUDA array interface or int)."""
        tensor = self.tensor
        if isinstance(tensor, (int, np.integer)):
            return int(tensor)
        interface = getattr(tensor, "__cuda_array_interface__", None)
        if interface is not None:
            return int(interface["data"][0])
        if hasattr(tensor, "data_ptr") and getattr(tensor, "is_cuda", False):
            return int(tensor.data_ptr())
        raise LaunchError(f"TensorMap: on the GPU the tensor must be device memory, not {type(tensor).__name__}")

    def describe(self) -> str:
        return (f"a {self.dtype} tensor map of sizes {self.shape}, byte strides {self.strides}, box {self.box}, "
                f"swizzle {self.swizzle}")


@dataclass(frozen=True)
class EmulatedTensorMap:
    """A tensor map as the emulator reads it back from its 128 bytes."""

    address: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, every dimension (dimension 0: the element size)
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: int  # span in bytes, 0 for none
    oob_fill: str

    @property
    def element_size(self) -> int:
        return DTYPES[self.dtype][1]

    @classmethod
    def decode(cls, raw: bytes) -> "EmulatedTensorMap":
        """Read the emulator's encoding; ValueError if `raw` is not one."""
        if len(raw) < _LAYOUT.size or raw[:8] != MAGIC:
            raise ValueError("the 128 bytes are not a tensor map made by TensorMap.emulator_bytes "
                             "(a CUtensorMap built by the CUDA driver is opaque to the emulator)")
        fields = _LAYOUT.unpack(raw[:_LAYOUT.size])
        _, address, rank, dtype, swizzle, _interleave, _l2, oob = fields[:8]
        shape = fields[8:8 + rank]
        strides = fields[13:13 + rank - 1]
        box = fields[17:17 + rank]
        element_strides = fields[22:22 + rank]
        names = {code: name for name, (code, _) in DTYPES.items()}
        spans = {code: span for code, span in SWIZZLES.values()}
        fills = {code: name for name, code in OOB_FILLS.items()}
        size = DTYPES[names[dtype]][1]
        return cls(address, names[dtype], tuple(shape), (size,) + tuple(strides), tuple(box),
                   tuple(element_strides), spans[swizzle], fills[oob])


def _inspect(tensor: Any) -> tuple[list[int], list[int], int, str | None]:
    """(shape, byte strides, element size, element type name or None) of a strided tensor."""
    if isinstance(tensor, np.ndarray):
        return list(tensor.shape), list(tensor.strides), tensor.itemsize, _NUMPY_NAMES.get(tensor.dtype.name)
    interface = getattr(tensor, "__cuda_array_interface__", None)
    if interface is not None and not hasattr(tensor, "data_ptr"):
        dtype = np.dtype(interface["typestr"])
        shape = list(interface["shape"])
        strides = interface.get("strides") or [int(np.prod(shape[i + 1:])) * dtype.itemsize
                                                for i in range(len(shape))]
        return shape, list(strides), dtype.itemsize, _NUMPY_NAMES.get(dtype.name)
    if hasattr(tensor, "data_ptr") and hasattr(tensor, "stride"):  # torch
        size = tensor.element_size()
        return list(tensor.shape), [s * size for s in tensor.stride()], size, _TORCH_NAMES.get(str(tensor.dtype))
    raise ValueError(f"TensorMap.tiled: cannot read the sizes of {type(tensor).__name__}; "
                     "build the TensorMap with explicit dtype, shape and strides")


# ---------------------------------------------------------------- the maps a compiled kernel asks for
#: How the maps of a compiled kernel's `tensor_map` parameters are described: the shared-memory layout
#: its stages have (the 128-byte swizzle), boxes of the shape the parameter names, zeros outside.
KERNEL_SWIZZLE = "128B"


def kernel_map(tensor: Any, shape: tuple[int, ...], dtype: str, box: tuple[int, ...],
               strides: tuple[int, ...] | None = None) -> TensorMap:
    """The map a `tensor_map` parameter takes over a tensor (a NumPy array in the emulator, else its device
    address) of `shape` and element type `dtype` (a DType value), row-major or of element `strides` (the last
    one 1), moving boxes of `box` elements (the tensor's own order).  DType values name the map's element
    types (bf16, f16, f32; tf32: f32 data the copy rounds to TF32, KernelParam.map_dtype)."""
    itemsize = DTYPES[dtype][1]
    byte_strides = [s * itemsize for s in (strides or _row_major(shape))]
    return TensorMap(tensor, dtype, tuple(reversed(shape)), tuple(reversed(byte_strides[:-1])),
                     tuple(reversed(box)), swizzle=KERNEL_SWIZZLE)


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = [1]
    for extent in reversed(shape[1:]):
        strides.append(strides[-1] * extent)
    return tuple(reversed(strides))


def describable(shape: tuple[int, ...], itemsize: int, address: int | None,
                strides: tuple[int, ...] | None = None) -> bool:
    """Whether a tensor of `shape` at `address` (None: one the launcher places, aligned), row-major or of
    element `strides`, can have a tensor map: 16-byte aligned, the last dim dense, the others a positive
    multiple of 16 bytes apart (below 2^40), every size 1 .. 2^32, rank 1 .. 5."""
    if not 1 <= len(shape) <= MAX_RANK or any(not 1 <= d <= 1 << 32 for d in shape):
        return False
    if address is not None and address % 16:
        return False
    strides = strides or _row_major(shape)
    return strides[-1] == 1 and all(0 < s * itemsize < 1 << 40 and (s * itemsize) % 16 == 0 for s in strides[:-1])
