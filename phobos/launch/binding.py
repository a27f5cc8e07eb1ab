# Binding a call's arguments to a kernel's parameters, before any GPU work.
#
# A kernel called like a function, `mod.sgemm(A, B, C, alpha=1.5, beta=0.5)`,
# gets its arguments matched to the source's parameters (by position, then by
# name), and each one checked against its declaration:
#
#   tensors  a numpy array (host memory), a torch tensor, a PyCUDA GPUArray,
#            anything with `__cuda_array_interface__` or DLPack's `__dlpack__`
#            (device memory, on any one device), of the declared element type
#            and rank; literal dimensions must match, and each size name (N, M,
#            K) takes its value from the first tensor that has it and must agree
#            everywhere else.  A view that is not C-contiguous (transposed,
#            sliced, channels-last) is taken as it lies: its strides (in
#            elements) become launch values of a kernel compiled for them
#            (`strides`; phobos.compiler.CodeOptions.strided) - unless a stride
#            is negative or not a whole number of elements, or the kernel writes
#            a view whose elements overlap (a zero stride, a broadcast), which
#            are refused with the call that copies it.  A tensor the kernel
#            writes must be writeable.  Elements must be in the machine's byte
#            order: a big-endian array ('>f4', from a file or the network) is
#            refused with the call that converts it, rather than copied and
#            converted behind the caller's back (the GPU reads the bytes as
#            they are).
#   scalars  converted to the declared type: any real number for a float, an
#            integer (or an integral float) in range for an integer type, a
#            bool for a bool.
#
# Every mismatch is a LaunchError naming the kernel, the parameter, what was
# expected and what was given, e.g.
#
#   sgemm: argument 'B': expected a 2-D f32 tensor [K, N] with K = 64 (from 'A'),
#   got float32 array of shape (65, 32)
#
# Nothing here touches a GPU, so all of it runs (and is tested) anywhere.
from __future__ import annotations

import ctypes
import difflib
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..constants import convert, fits, int_range
from ..errors import LaunchError
from ..compiler import KernelParam
from ..types import DType

I32_MAX = int(np.iinfo(np.int32).max)
# NumPy has no bfloat16 and no 8-bit floats: a tensor of one may be an array of ml_dtypes' type (torch's and
# DLPack's say the same names), or its bits: uint16 for bf16, uint8 codes for f8e4m3 and f8e5m2 (CuPy arrays).
ACCEPTED_DTYPES = {DType.BF16: ("bfloat16", "uint16"), DType.F8E4M3: ("float8_e4m3fn", "uint8"),
                   DType.F8E5M2: ("float8_e5m2", "uint8")}


@dataclass(frozen=True)
class TensorArgument:
    """A tensor argument, checked: host memory (`host`) or device memory (`pointer`), and its strides in
    elements when it is not C-contiguous (None when it is)."""

    param: KernelParam
    source: Any  # the object the caller passed
    host: np.ndarray | None
    pointer: int | None
    shape: tuple[int, ...]
    device: int | None = None  # the device index of device memory; None for host memory or where unknown
    stream: int | None = None  # the stream its producer works on (`__cuda_array_interface__` version 3)
    strides: tuple[int, ...] | None = None

    @property
    def span(self) -> int:
        """The elements from the first to the last one of the tensor in memory (its size when contiguous)."""
        if 0 in self.shape:
            return 0
        if self.strides is None:
            return math.prod(self.shape)
        return 1 + sum((extent - 1) * stride for extent, stride in zip(self.shape, self.strides))

    @property
    def nbytes(self) -> int:
        """The bytes the tensor's elements lie in, first to last (what a copy of it moves)."""
        return self.span * self.param.dtype.nbytes

    @property
    def value(self) -> np.ndarray | int:
        """What the interpreter takes for this tensor: the numpy array (a view, as it lies) or the device
        address."""
        return self.host if self.host is not None else self.pointer

    @property
    def buffer(self) -> np.ndarray | int:
        """What compiled code takes for this tensor: the device address, or the numpy memory its elements lie
        in (for a strided view, a 1-D view of that memory from its first element to its last, which the
        kernel indexes with the strides)."""
        if self.host is None or self.strides is None:
            return self.value
        return np.lib.stride_tricks.as_strided(self.host, (self.span,), (self.host.itemsize,),
                                               writeable=self.host.flags.writeable)

    def specialisation(self) -> tuple[str, bool] | None:
        """How a kernel is compiled for this tensor (CodeOptions.strided): None when it is contiguous, else
        (its name, whether its last stride is 1)."""
        return None if self.strides is None else (self.param.name, self.strides[-1] == 1)


@dataclass
class BoundCall:
    """A call's arguments, checked: tensors, converted scalars and the sizes bound from shapes."""

    kernel_name: str
    params: list[KernelParam]  # the source's parameters, in order
    tensors: dict[str, TensorArgument] = field(default_factory=dict)
    scalars: dict[str, np.generic] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    size_origins: dict[str, str] = field(default_factory=dict)  # size name -> the tensor it came from
    given: dict[str, Any] = field(default_factory=dict)  # parameter name -> value, in the order given
    positional: int = 0  # how many of them were given by position
    index_bits: int = 32  # 64 when a tensor has more elements (or a longer dimension) than i32 can index

    def value(self, name: str) -> Any:
        """The value of parameter or size `name` as backends pass it."""
        if name in self.tensors:
            return self.tensors[name].value
        if name in self.scalars:
            return self.scalars[name]
        return self.sizes[name]


# ---------------------------------------------------------------------------
# Matching positional and keyword arguments to parameters


def match_arguments(kernel_name: str, params: Sequence[KernelParam], size_names: Sequence[str],
                    args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The argument for each source parameter, by name; LaunchError for missing, extra or unknown ones."""
    names = [p.name for p in params]
    listing = ", ".join(names)
    if len(args) > len(params):
        raise LaunchError(f"{kernel_name}: takes {len(params)} argument{'s' * (len(params) != 1)} "
                          f"({listing}), got {len(args)} positional")
    given = dict(zip(names, args))
    for name, value in kwargs.items():
        if name in given:
            raise LaunchError(f"{kernel_name}: argument '{name}' given twice (by position and by name)")
        if name not in names:
            raise LaunchError(f"{kernel_name}: {_unknown_name(name, names, size_names)}")
        given[name] = value
    missing = [name for name in names if name not in given]
    if missing:
        quoted = ", ".join(f"'{name}'" for name in missing)
        raise LaunchError(f"{kernel_name}: missing argument{'s' * (len(missing) > 1)} {quoted} "
                          f"(parameters: {listing})")
    return given


def _unknown_name(name: str, names: Sequence[str], size_names: Sequence[str]) -> str:
    if name in size_names:
        return f"'{name}' is a size, bound from the shapes of the tensors; it is not an argument"
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"no parameter named '{name}' (parameters: {', '.join(names)}){hint}"


# ---------------------------------------------------------------------------
# Binding


def bind(kernel_name: str, params: Sequence[KernelParam], size_names: Sequence[str], args: Sequence[Any],
         kwargs: Mapping[str, Any], host_only: str | None = None,
         view: Callable[[Any], TensorView | None] | None = None, index_widths: Sequence[int] = (32,)) -> BoundCall:
    """Check and convert a call's arguments; `host_only` names a CPU mode that takes numpy arrays only.

    `view` says how tensors are seen (default `tensor_view`; torch custom ops
    check shapes of tensors that have no data).  `index_widths` are the index
    arithmetic widths the kernel can be compiled with (KernelInfo.index_widths):
    a tensor past what i32 indexes needs 64, and is refused without it.
    """
    given = match_arguments(kernel_name, params, size_names, args, kwargs)
    call = BoundCall(kernel_name, list(params), given=given, positional=len(args))
    for param in params:
        if param.kind == "tensor":
            call.tensors[param.name] = _bind_tensor(call, param, given[param.name], host_only, view or tensor_view,
                                                    64 in index_widths)
        else:
            call.scalars[param.name] = convert_scalar(kernel_name, param, given[param.name])
    return call


def _bind_tensor(call: BoundCall, param: KernelParam, value: Any, host_only: str | None,
                 view_of: Callable[[Any], TensorView | None], wide_index: bool) -> TensorArgument:
    def fail(got: str, advice: str = "") -> LaunchError:
        return LaunchError(f"{call.kernel_name}: argument '{param.name}': expected {_expected(call, param)}, "
                           f"got {got}{advice}")

    try:
        view = view_of(value)
    except _Refused as refusal:
        raise fail(refusal.description, f" ({refusal.reason})") from None
    if view is None:
        raise fail(describe(value))
    if view.dtype_name not in ACCEPTED_DTYPES.get(param.dtype, (param.dtype.numpy_name,)):
        raise fail(view.description, conversion_advice(value, param))
    if len(view.shape) != len(param.dims):
        raise fail(view.description)
    if not view.native_order:
        raise fail(view.description, "; pass one in the machine's byte order, e.g. "
                                     "x.astype(x.dtype.newbyteorder('='))")
    strides = None if view.contiguous else view.strides
    if not view.contiguous:
        problem = _stride_problem(view, param.written)
        if problem is not None:
            raise fail(f"a non-contiguous {view.description} with strides {view.strides}",
                       f"; {problem}: pass a copy, e.g. np.ascontiguousarray(x) or x.contiguous()")
    if param.written and view.read_only:
        raise fail(f"a read-only {view.description}", f"; the kernel writes '{param.name}'")
    if host_only is not None and view.host is None:
        raise fail(view.description, f"; mode '{host_only}' runs on the CPU and takes numpy arrays")
    if math.prod(view.shape) > I32_MAX or any(extent > I32_MAX for extent in view.shape):
        if not wide_index:
            raise fail(view.description, f"; kernels index tensors with i32, so at most {I32_MAX} elements")
        call.index_bits = 64
    for dim, extent in zip(param.dims, view.shape):
        if isinstance(dim, str) and dim not in call.sizes:
            call.sizes[dim] = extent
            call.size_origins[dim] = param.name
        if extent != (dim if isinstance(dim, int) else call.sizes[dim]):
            raise fail(view.description)
    return TensorArgument(param, value, view.host, view.pointer, view.shape, view.device, view.stream, strides)


def _stride_problem(view: TensorView, written: bool) -> str | None:
    """Why a strided view cannot be passed as it lies (None if it can): strides that are not whole
    elements or are negative, or, for a tensor the kernel writes, elements that overlap."""
    if view.strides is None:
        return "its strides are not whole elements"
    if any(stride < 0 for stride in view.strides):
        return "kernels take strides of 0 or more"
    if written and not _apart(view.shape, view.strides):
        return "the kernel writes it, and its elements overlap (a zero or overlapping stride)"
    return None


def _apart(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether every element of a view lies at its own address: ordered by stride, each dimension's
    stride must pass the whole extent of the ones below it."""
    reach = 0
    for extent, stride in sorted(((n, s) for n, s in zip(shape, strides) if n > 1), key=lambda d: d[1]):
        if stride <= reach:
            return False
        reach += (extent - 1) * stride
    return True


#: How each library converts an array to another element type, by the module its arrays come from: the
#: name it gives the library, and the method.  numpy has no bfloat16 and no 8-bit floats: ml_dtypes
#: brings them.
CONVERSIONS = {"torch": ("torch", "to"), "cupy": ("cupy", "astype"), "jax": ("jnp", "astype"),
               "numpy": ("np", "astype")}
ML_DTYPES = (DType.BF16, DType.F8E4M3, DType.F8E5M2)


def conversion_advice(value: Any, param: KernelParam) -> str:
    """How to convert `value` to the element type of `param`, in the caller's own library (the result of a
    conversion is a new array: for a tensor the kernel writes, read the result from it); nothing for the
    objects of other libraries."""
    library = type(value).__module__.split(".")[0]
    if library not in CONVERSIONS:
        return ""
    module, method = CONVERSIONS[library]
    if param.dtype in ML_DTYPES and library == "numpy":
        module = "ml_dtypes"
    dtype = "bool_" if param.dtype is DType.BOOL and module == "np" else param.dtype.numpy_name
    then = f", and read the result from the new '{param.name}'" if param.written else ""
    return f"; convert it: {param.name} = {param.name}.{method}({module}.{dtype}){then}"


def _expected(call: BoundCall, param: KernelParam) -> str:
    dims = ", ".join(map(str, param.dims))
    known = [f"{dim} = {call.sizes[dim]} (from '{call.size_origins[dim]}')"
             for dim in dict.fromkeys(d for d in param.dims if isinstance(d, str) and d in call.sizes)]
    return f"a {len(param.dims)}-D {param.dtype} tensor [{dims}]" + (f" with {', '.join(known)}" if known else "")


def overlapping_tensors(call: BoundCall) -> list[tuple[str, str]]:
    """(read, written) names of each tensor the kernel only reads whose memory overlaps one it writes.

    Host arrays are compared with host arrays and device memory with device
    memory (by address and the bytes from their first element to their last,
    which for a strided view also holds what it skips).
    Such a call must not read through the read-only cache (phobos.compiler.
    CodeOptions.read_only_cache)."""
    extents = {name: _extent(tensor) for name, tensor in call.tensors.items()}
    return [(read.param.name, written.param.name)
            for read in call.tensors.values() if not read.param.written
            for written in call.tensors.values() if written.param.written
            and overlap(extents[read.param.name], extents[written.param.name])]


def _extent(tensor: TensorArgument) -> tuple[bool, int, int]:
    """(in host memory, first byte, byte past the last) of a tensor."""
    start = tensor.host.__array_interface__["data"][0] if tensor.host is not None else tensor.pointer
    return tensor.host is not None, start, start + tensor.nbytes


def overlap(a: tuple[bool, int, int], b: tuple[bool, int, int]) -> bool:
    """Whether two extents (space, first byte, byte past the last) share a byte."""
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def call_device(call: BoundCall, locate: Callable[[int], int | None]) -> int:
    """The one device that holds the call's device-memory tensors (0 when there are none).

    `locate(address)` finds the device of a tensor that did not say; a tensor
    on another device than the first one's is a LaunchError naming both.
    """
    first: TensorArgument | None = None
    for tensor in call.tensors.values():
        if tensor.host is not None:
            continue
        device = tensor.device if tensor.device is not None else locate(tensor.pointer)
        if device is None:
            continue  # memory the driver does not know: the launch reports it
        if first is None:
            first, first_device = tensor, device
        elif device != first_device:
            raise LaunchError(f"{call.kernel_name}: argument '{tensor.param.name}' is on cuda:{device}, but "
                              f"'{first.param.name}' is on cuda:{first_device}; the tensors of one call must be "
                              f"on one device")
    return first_device if first is not None else 0


# ---------------------------------------------------------------------------
# Scalars


def convert_scalar(kernel_name: str, param: KernelParam, value: Any) -> np.generic:
    """`value` as a numpy scalar of the parameter's declared type; LaunchError if it does not fit."""
    dtype = param.dtype

    def fail(problem: str = "") -> LaunchError:
        return LaunchError(f"{kernel_name}: argument '{param.name}': expected {_scalar_kind(dtype)}, "
                           f"got {describe(value)}{problem}")

    is_bool = isinstance(value, (bool, np.bool_))
    if dtype is DType.BOOL:
        if not is_bool:
            raise fail()
        return np.bool_(value)
    if is_bool or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        raise fail()
    return SCALAR_CONVERSIONS[dtype.is_float](dtype, value, fail)


def _to_float(dtype: DType, value: Any, fail: Callable[..., LaunchError]) -> np.generic:
    try:
        wide = float(value)
    except OverflowError:
        raise fail(f" (out of range for {dtype})") from None
    if not fits(wide, dtype):
        raise fail(f" (out of range for {dtype})")
    return np.dtype(dtype.numpy_name).type(convert(wide, dtype))


def _to_int(dtype: DType, value: Any, fail: Callable[..., LaunchError]) -> np.generic:
    if isinstance(value, (numbers.Integral, np.integer)):
        integer = int(value)
    elif math.isfinite(float(value)) and float(value).is_integer():
        integer = int(value)
    else:
        raise fail(" (not an integer)")
    if not fits(integer, dtype):
        low, high = int_range(dtype)
        raise fail(f" (out of range [{low}, {high}])")
    return np.dtype(dtype.numpy_name).type(integer)


#: By `dtype.is_float`: how a number becomes a scalar of that type.
SCALAR_CONVERSIONS = {True: _to_float, False: _to_int}


def _scalar_kind(dtype: DType) -> str:
    noun = "bool" if dtype is DType.BOOL else f"{dtype} {'number' if dtype.is_float else 'integer'}"
    return f"{'an' if noun[0] in 'aeiof' else 'a'} {noun}"


# ---------------------------------------------------------------------------
# What a tensor-like object is: host or device memory, element type, shape


@dataclass(frozen=True)
class TensorView:
    host: np.ndarray | None
    pointer: int | None
    shape: tuple[int, ...]
    dtype_name: str  # numpy's name for the element type: float32, bfloat16, ...
    contiguous: bool
    read_only: bool
    description: str  # e.g. "float32 array of shape (65, 32)", "big-endian float32 array of shape (4,)"
    native_order: bool = True  # elements in the machine's byte order
    device: int | None = None  # the device index of device memory, where the object says
    stream: int | None = None  # the stream its producer works on, where the object says
    strides: tuple[int, ...] | None = None  # in elements (None where they are not whole elements)


def _element_strides(byte_strides, itemsize: int) -> tuple[int, ...] | None:
    """Byte strides as element strides; None where one is not a whole number of elements."""
    if any(s % itemsize for s in byte_strides):
        return None
    return tuple(int(s) // itemsize for s in byte_strides)


class _Refused(Exception):
    """A tensor-like object that cannot be passed; `reason` says why."""

    def __init__(self, description: str, reason: str):
        super().__init__(reason)
        self.description = description
        self.reason = reason


def _numpy_view(value: Any) -> TensorView | None:
    if not isinstance(value, np.ndarray):
        return None
    return TensorView(value, None, value.shape, value.dtype.name, value.flags.c_contiguous,
                      not value.flags.writeable, f"{_element_name(value.dtype)} array of shape {value.shape}",
                      value.dtype.isnative, strides=_element_strides(value.strides, value.itemsize))


#: torch element types numpy has not: torch's integer type of their size, and the bit patterns' numpy type
TORCH_BIT_PATTERNS = {"torch.bfloat16": ("int16", np.uint16), "torch.float8_e4m3fn": ("uint8", np.uint8),
                      "torch.float8_e5m2": ("uint8", np.uint8)}


def _host_array(value: Any) -> np.ndarray:
    """A CPU torch tensor's elements as a numpy array sharing its memory; bf16 and the 8-bit floats, which
    numpy lacks, as their bits (uint16, uint8), as such arrays are passed."""
    tensor = value.detach()
    if str(tensor.dtype) not in TORCH_BIT_PATTERNS:
        return tensor.numpy()
    import torch
    same_size, bits = TORCH_BIT_PATTERNS[str(tensor.dtype)]
    return tensor.view(getattr(torch, same_size)).numpy().view(bits)


def _torch_view(value: Any) -> TensorView | None:
    if not (type(value).__module__.startswith("torch") and hasattr(value, "data_ptr") and hasattr(value, "is_cuda")):
        return None
    dtype_name = str(value.dtype).removeprefix("torch.")
    shape = tuple(value.shape)
    description = f"torch.{dtype_name} tensor of shape {shape} on {value.device}"
    if not value.is_cuda:
        try:
            array = _host_array(value)
        except (TypeError, RuntimeError) as error:
            raise _Refused(description, f"cannot view it as a numpy array: {error}") from None
        return TensorView(array, None, shape, dtype_name, value.is_contiguous(), False, description,
                          strides=_element_strides(array.strides, array.itemsize))
    contiguous = value.is_contiguous()
    return TensorView(None, value.data_ptr(), shape, dtype_name, contiguous, False, description,
                      device=value.get_device(), strides=None if contiguous else tuple(value.stride()))


def _gpuarray_view(value: Any) -> TensorView | None:
    if not all(hasattr(value, name) for name in ("gpudata", "shape", "dtype", "flags")):
        return None
    dtype = np.dtype(value.dtype)
    shape = tuple(value.shape)
    return TensorView(None, int(value.gpudata), shape, dtype.name, bool(value.flags.c_contiguous), False,
                      f"{_element_name(dtype)} {_type_name(value)} of shape {shape}", dtype.isnative,
                      strides=_element_strides(value.strides, dtype.itemsize))


def _cuda_array_interface_view(value: Any) -> TensorView | None:
    if not hasattr(type(value), "__cuda_array_interface__") and "__cuda_array_interface__" not in getattr(
            value, "__dict__", {}):
        return None
    try:
        interface = value.__cuda_array_interface__
        shape = tuple(int(extent) for extent in interface["shape"])
        dtype = np.dtype(interface["typestr"])
        pointer, read_only = interface["data"]
        strides = interface.get("strides")
        stream = interface.get("stream") if interface.get("version", 0) >= 3 else None
    except Exception as error:  # whatever the object raises: report it, do not crash
        if hasattr(value, "__dlpack_device__"):
            return None  # a JAX array on the CPU, say: DLPack says where it is
        raise _Refused(f"a {_type_name(value)}", f"its __cuda_array_interface__ is unusable: {error}") from None
    contiguous = strides is None or _c_contiguous(shape, tuple(strides), dtype.itemsize)
    device = getattr(getattr(value, "device", None), "id", None)  # CuPy says; others are asked of the driver
    return TensorView(None, int(pointer or 0), shape, dtype.name, contiguous, bool(read_only),
                      f"{_element_name(dtype)} {_type_name(value)} of shape {shape}", dtype.isnative,
                      device=device if isinstance(device, int) else None,
                      stream=int(stream) if stream is not None else None,
                      strides=None if strides is None else _element_strides(strides, dtype.itemsize))


# DLPack (https://dmlc.github.io/dlpack): the C structs a `__dlpack__` capsule points at.
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


#: DLPack device types: memory a kernel can use, and host memory.
DLPACK_GPU_DEVICES = {2: "cuda", 13: "cuda_managed"}
DLPACK_HOST_DEVICES = {1: "cpu", 3: "cuda_host"}
#: DLPack type codes (int, uint, float, bfloat) -> numpy's name stem; the 8-bit floats' -> their whole name.
DLPACK_TYPE_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}
DLPACK_FLOAT8 = {10: "float8_e4m3fn", 12: "float8_e5m2"}  # kDLFloat8_e4m3fn, kDLFloat8_e5m2 (DLPack 1.1)

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dlpack_view(value: Any) -> TensorView | None:
    """An object with `__dlpack__` and `__dlpack_device__` (JAX arrays, and others), on a GPU."""
    if not (hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__")):
        return None
    kind = _type_name(value)
    try:
        device_type, device_id = value.__dlpack_device__()
    except Exception as error:
        raise _Refused(f"a {kind}", f"its __dlpack_device__ failed: {error}") from None
    if device_type in DLPACK_HOST_DEVICES:
        raise _Refused(f"a {kind} in host memory ({DLPACK_HOST_DEVICES[device_type]})",
                       "kernels read DLPack arrays where they lie; put it on the GPU, or pass np.from_dlpack(x) "
                       "to have it copied")
    if device_type not in DLPACK_GPU_DEVICES:
        raise _Refused(f"a {kind} on DLPack device type {device_type}", "only CUDA device memory can be passed")
    try:
        try:
            capsule = value.__dlpack__(stream=1)  # the kernel runs on the legacy default stream: order before it
        except (TypeError, ValueError, BufferError):
            capsule = value.__dlpack__()  # a producer without streams
        tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
        shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
        strides = tuple(tensor.strides[i] for i in range(tensor.ndim)) if tensor.strides else None
        stem = DLPACK_TYPE_CODES.get(tensor.dtype.code, f"code{tensor.dtype.code}")
        dtype_name = "bool" if stem == "bool" else \
            DLPACK_FLOAT8.get(tensor.dtype.code, f"{stem}{tensor.dtype.bits}") \
            + ("" if tensor.dtype.lanes == 1 else f"x{tensor.dtype.lanes}")
        pointer = (tensor.data or 0) + tensor.byte_offset
    except Exception as error:
        raise _Refused(f"a {kind}", f"its DLPack capsule is unusable: {error}") from None
    contiguous = strides is None or _c_contiguous(shape, strides, 1)  # DLPack strides count elements
    return TensorView(None, pointer, shape, dtype_name, contiguous, False,
                      f"{dtype_name} {kind} of shape {shape} on cuda:{device_id}", device=int(device_id),
                      strides=strides)


def _element_name(dtype: np.dtype) -> str:
    """numpy's name for the element type, with the byte order when it is not the machine's."""
    if dtype.isnative:
        return dtype.name
    return f"{'big' if dtype.byteorder == '>' else 'little'}-endian {dtype.name}"


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    if 0 in shape:
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


#: Tried in order; the first that recognizes an object describes it.
TENSOR_VIEWS = (_numpy_view, _torch_view, _gpuarray_view, _cuda_array_interface_view, _dlpack_view)


def tensor_view(value: Any) -> TensorView | None:
    """How `value` is passed as a tensor, or None if it is not tensor-like."""
    for view in TENSOR_VIEWS:
        found = view(value)
        if found is not None:
            return found
    return None


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__.split('.')[0]}.{kind.__name__}"


def describe(value: Any) -> str:
    """A short description of any argument, for error messages."""
    if isinstance(value, (str, bytes)):
        return f"{type(value).__name__} {value!r:.40}"
    if isinstance(value, (numbers.Number, np.generic)):
        return f"{type(value).__name__} {value!r}" if not isinstance(value, np.generic) else \
            f"{value.dtype.name} {value.item()!r}"
    if value is None:
        return "None"
    try:
        view = tensor_view(value)
    except _Refused as refusal:
        return refusal.description
    return view.description if view is not None else f"a {_type_name(value)}"
