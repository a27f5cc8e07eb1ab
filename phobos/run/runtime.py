# Loading PTX onto the GPU and launching its kernels, through PyCUDA and the
# driver calls of phobos.run.cuda.
#
# The CUDA driver JIT-compiles PTX text itself, so a PTX string is all a launch
# needs; where ptxas already made the cubin for the device's exact target,
# `load_module` loads that instead.  `launch` takes the kernel's arguments as the user has them: numpy
# arrays are copied to the GPU and back, device memory (plain pointers, PyCUDA
# allocations and GPUArrays, torch/CuPy tensors through
# `__cuda_array_interface__`) is passed as is, and Python or numpy numbers are
# converted to the type the kernel declares for that parameter, read off the
# `.entry` line of the PTX.  A byte-array parameter (`.param .align 64 .b8
# tmap[128]`) takes a phobos.run.tensor_map.TensorMap, which the driver
# encodes (`encode_tensor_map`; `MapEncoder` keeps the encodings of one
# parameter per address), or raw bytes of its size.  The parameter buffer is packed here, so no
# argument is ever passed with a type the kernel did not ask for, each at the
# offset the compiled kernel reads it from: where a C struct would put it, or,
# for kernels with a parameter aligned to more than 16 bytes (tensor maps),
# where the driver says (`parameter_offsets`).  `time_launch` times a kernel with CUDA events; `device_properties`
# and `device_copy` give the launcher the device's limits and the scratch
# copies it times kernels on.
#
# `QueuedKernel` is a launch prepared once (parameter layout, grid, block,
# shared memory) and queued many times on a raw stream handle without waiting:
# what the kernel callables keep per call signature; `launch` builds one,
# queues it and waits for the device.  A fault of a queued kernel surfaces at
# the next call that waits or launches on that device.
#
# PyCUDA is imported only when something is loaded or launched: parsing
# parameters and binding arguments work on any machine, and without PyCUDA or a
# GPU the first launch raises a ToolchainError saying which one is missing.
# Everything runs in the primary context of the device that holds the tensors
# (device 0 unless they say otherwise), which torch and CuPy share, so their
# tensors can be passed straight in; `on_device` makes a device's current.
from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import numbers
import re
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple, Union

import numpy as np

from . import cuda
from ..errors import LaunchError, PtxasError, ToolchainError
from .tensor_map import TensorMap, kernel_map

PYCUDA_MISSING = "PyCUDA is not installed: pip install 'phobos-tile[cuda]'"

#: Above this much dynamic shared memory a kernel must opt in (cuFuncSetAttribute).
DEFAULT_DYNAMIC_SHARED_LIMIT = 48 * 1024

#: The numpy type of each PTX scalar parameter type.
PARAM_DTYPES: dict[str, type[np.generic]] = {
    "b8": np.uint8, "b16": np.uint16, "b32": np.uint32, "b64": np.uint64,
    "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
    "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
    "f16": np.float16, "f32": np.float32, "f64": np.float64,
}  # fmt: skip

#: Parameter types wide enough to hold a device pointer.
POINTER_TYPES = frozenset({"u64", "s64", "b64"})

#: Parameters aligned to at most this many bytes sit where a C struct would put them on every GPU
#: (the constant bank's parameters start 16-byte aligned); beyond it the driver is asked.
NATURAL_ALIGNMENT_LIMIT = 16


# ---------------------------------------------------------------------------
# Kernel parameters, read from the PTX text


@dataclass(frozen=True)
class PtxParam:
    """One `.param` of a kernel: `.param .u64 a_ptr` is PtxParam("a_ptr", "u64").

    `array_length` is set for byte-array parameters such as `.param .align 64
    .b8 tmap[128]` (structs passed by value, tensor maps); `align` is the
    declared `.align`, if any.
    """

    name: str
    type: str
    array_length: int | None = None
    align: int | None = None

    @property
    def size(self) -> int:
        return np.dtype(PARAM_DTYPES[self.type]).itemsize * (self.array_length or 1)

    @property
    def alignment(self) -> int:
        """Where the parameter sits in the buffer: the declared .align, else its type's size."""
        return self.align or np.dtype(PARAM_DTYPES[self.type]).itemsize

    def __str__(self) -> str:
        suffix = f"[{self.array_length}]" if self.array_length is not None else ""
        return f"'{self.name}' (.{self.type}{suffix})"


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_ENTRY = re.compile(r"\.entry\s+(?P<name>[\w$%]+)\s*(?:\((?P<params>[^)]*)\))?")
_PARAM = re.compile(
    r"\.param\b(?P<qualifiers>(?:\s*\.\w+(?:\s+\d+)?)*)\s+(?P<name>[\w$%]+)\s*(?:\[\s*(?P<length>\d+)\s*\])?$"
)


def parse_entry_params(ptx_text: str) -> dict[str, list[PtxParam]]:
    """The parameters of every kernel (.entry) in `ptx_text`, by kernel name.

    Raises LaunchError for a parameter whose type Phobos cannot pass.
    """
    text = _COMMENTS.sub("", ptx_text)
    kernels: dict[str, list[PtxParam]] = {}
    for entry in _ENTRY.finditer(text):
        declarations = [d.strip() for d in (entry["params"] or "").split(",") if d.strip()]
        kernels[entry["name"]] = [_parse_param(entry["name"], d) for d in declarations]
    return kernels


def _parse_param(kernel_name: str, declaration: str) -> PtxParam:
    match = _PARAM.match(" ".join(declaration.split()))
    types = [q for q in re.findall(r"\.(\w+)", match["qualifiers"]) if q in PARAM_DTYPES] if match else []
    if not match or len(types) != 1:
        raise LaunchError(f"kernel '{kernel_name}': cannot read parameter declaration '{declaration}'")
    length = int(match["length"]) if match["length"] else None
    align = re.search(r"\.align\s+(\d+)", match["qualifiers"])
    return PtxParam(match["name"], types[0], length, int(align[1]) if align else None)


# ---------------------------------------------------------------------------
# Binding arguments to parameters (no GPU needed)


@dataclass
class BoundArgument:
    """An argument matched to its parameter.

    kind is "array" (a numpy array to copy to the GPU; `value` is the array),
    "pointer" (device memory; `value` is the address as an int), "scalar"
    (`value` is a numpy scalar of the parameter's type) or "bytes" (the
    contents of a byte-array parameter, e.g. an encoded tensor map).
    """

    param: PtxParam
    kind: str
    value: Any


def bind_arguments(kernel_name: str, params: Sequence[PtxParam], args: Sequence[Any]) -> list[BoundArgument]:
    """Match `args` to the kernel's `params`, converting numbers to the declared types.

    Raises LaunchError, naming the parameter, for a wrong number of arguments,
    an argument of the wrong kind, or a number the parameter cannot hold.
    """
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise LaunchError(f"kernel '{kernel_name}' takes {len(params)} arguments ({names}), got {len(args)}")
    return [_bind_one(kernel_name, param, arg) for param, arg in zip(params, args)]


def _bind_one(kernel_name: str, param: PtxParam, arg: Any) -> BoundArgument:
    def fail(problem: str) -> LaunchError:
        return LaunchError(f"kernel '{kernel_name}', parameter {param}: {problem}")

    if param.array_length is not None:
        return BoundArgument(param, "bytes", _byte_array(param, arg, fail))
    try:
        pointer = _device_pointer(arg)
    except Exception as error:  # e.g. torch refuses tensors that require grad
        raise fail(f"cannot take the device address of {_describe(arg)}: {error}") from error
    if isinstance(arg, np.ndarray) or pointer is not None:
        if param.type not in POINTER_TYPES:
            raise fail(f"takes a number, got {_describe(arg)}")
        if isinstance(arg, np.ndarray):
            return BoundArgument(param, "array", arg)
        return BoundArgument(param, "pointer", pointer)
    if isinstance(arg, (numbers.Number, np.generic)):
        return BoundArgument(param, "scalar", _convert_scalar(param, arg, fail))
    raise fail(f"cannot pass {_describe(arg)}; expected a number, a numpy array or device memory")


def _byte_array(param: PtxParam, arg: Any, fail: Callable[[str], LaunchError]) -> bytes:
    """The contents of a byte-array parameter: a TensorMap (encoded by the driver) or bytes."""
    if isinstance(arg, TensorMap):
        try:
            raw = encode_tensor_map(arg)
        except LaunchError as error:
            raise fail(error.message) from error
    elif isinstance(arg, (bytes, bytearray, memoryview)):
        raw = bytes(arg)
    else:
        raise fail(f"takes a TensorMap or {param.size} bytes, got {_describe(arg)}")
    if len(raw) != param.size:
        raise fail(f"needs {param.size} bytes, got {len(raw)}")
    return raw


def device_address(arg: Any) -> int:
    """The device address of a launch argument in device memory (an int, or what `_device_pointer` knows)."""
    if isinstance(arg, (int, np.integer)):
        return int(arg)
    address = _device_pointer(arg)
    if address is None:
        raise LaunchError(f"expected device memory, got {_describe(arg)}")
    return address


def _device_pointer(arg: Any) -> int | None:
    """The device address `arg` stands for, or None if it is not device memory."""
    interface = getattr(arg, "__cuda_array_interface__", None)
    if interface is not None:
        return int(interface["data"][0])
    if hasattr(arg, "gpudata"):  # pycuda.gpuarray.GPUArray
        return int(arg.gpudata)
    driver = sys.modules.get("pycuda.driver")  # a pycuda allocation implies pycuda is loaded
    allocation_types = tuple(
        getattr(driver, name) for name in ("DeviceAllocation", "PooledDeviceAllocation") if hasattr(driver, name)
    )
    if allocation_types and isinstance(arg, allocation_types):
        return int(arg)
    return None


def _convert_scalar(param: PtxParam, value: Any, fail: Callable[[str], LaunchError]) -> np.generic:
    dtype = np.dtype(PARAM_DTYPES[param.type])
    if isinstance(value, (complex, np.complexfloating)):
        raise fail(f"cannot pass the complex number {value}")
    if dtype.kind == "f":
        try:
            return dtype.type(value)
        except (OverflowError, ValueError, TypeError) as error:
            raise fail(f"cannot convert {_describe(value)} to .{param.type}: {error}") from error
    if not isinstance(value, (numbers.Integral, np.integer)):
        raise fail(f"takes an integer, got {_describe(value)}")
    value = int(value)
    bits = dtype.itemsize * 8
    low = -(1 << (bits - 1)) if param.type[0] in "sb" else 0
    high = (1 << (bits - 1)) - 1 if param.type[0] == "s" else (1 << bits) - 1
    if not low <= value <= high:
        raise fail(f"{value} is out of range [{low}, {high}]")
    return dtype.type(value & ((1 << bits) - 1) if param.type[0] == "b" else value)


def _describe(arg: Any) -> str:
    if isinstance(arg, np.ndarray):
        return f"a numpy array ({arg.dtype}, shape {arg.shape})"
    if isinstance(arg, (numbers.Number, np.generic)):
        return f"{type(arg).__name__} {arg}"
    kind = type(arg)
    return f"a {kind.__qualname__}" if kind.__module__ == "builtins" else f"a {kind.__module__}.{kind.__qualname__}"


#: The struct format (standard sizes) of each PTX scalar parameter type.
PARAM_FORMATS = {
    "b8": "B", "b16": "H", "b32": "I", "b64": "Q", "u8": "B", "u16": "H", "u32": "I", "u64": "Q",
    "s8": "b", "s16": "h", "s32": "i", "s64": "q", "f16": "e", "f32": "f", "f64": "d",
}  # fmt: skip


def natural_offsets(params: Sequence[PtxParam]) -> list[int]:
    """Where a C struct of the parameters would put each: at the next multiple of its alignment
    (its size, or its declared .align)."""
    offsets, end = [], 0
    for param in params:
        end += -end % param.alignment
        offsets.append(end)
        end += param.size
    return offsets


def needs_driver_layout(params: Sequence[PtxParam]) -> bool:
    """Whether the parameter offsets depend on the GPU: a parameter aligned beyond 16 bytes.

    ptxas aligns a parameter's address in the constant bank, whose parameters
    start at a GPU-dependent address (0x160 on sm_75/sm_80, 0x210 on sm_90): a
    `.align 64` tensor map first in the list sits at offset 32 on sm_80 and 48
    on sm_90, not at 0.  Alignments up to 16 come out as in a C struct.
    """
    return any(param.alignment > NATURAL_ALIGNMENT_LIMIT for param in params)


def parameter_layout(params: Sequence[PtxParam], offsets: Sequence[int] | None = None) -> struct.Struct:
    """The kernel parameter buffer as a struct: each value little-endian at its offset (`offsets`, else
    `natural_offsets`); a byte-array parameter (a struct passed by value, a tensor map) as its bytes."""
    text, end = "<", 0
    for param, offset in zip(params, natural_offsets(params) if offsets is None else offsets):
        text += "x" * (offset - end) + (f"{param.size}s" if param.array_length is not None else PARAM_FORMATS[param.type])
        end = offset + param.size
    return struct.Struct(text)


def pack_parameters(
    bound: Sequence[BoundArgument], array_pointers: dict[int, int], offsets: Sequence[int] | None = None
) -> bytes:
    """The kernel parameter buffer of bound arguments (`parameter_layout`).

    `array_pointers` maps the index of each "array" argument to the device
    address of its copy.
    """
    return parameter_layout([argument.param for argument in bound], offsets).pack(*_values(bound, array_pointers))


def _values(bound: Sequence[BoundArgument], array_pointers: dict[int, int]) -> list[Any]:
    """What goes into the parameter buffer for each bound argument (bytes for a byte-array parameter)."""
    return [array_pointers[index] if argument.kind == "array" else argument.value
            for index, argument in enumerate(bound)]


# ---------------------------------------------------------------------------
# Launch configuration (no GPU needed)


@dataclass(frozen=True)
class LaunchShape:
    """Grid and block dimensions (x, y, z) and dynamic shared memory in bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0

    def __str__(self) -> str:
        return f"grid {self.grid}, block {self.block}, {self.shared_bytes} B dynamic shared memory"


def launch_shape(kernel_name: str, grid: Any, block: Any, shared_bytes: Any = 0) -> LaunchShape:
    """Normalize grid and block (an int or 1 to 3 ints) to 3-tuples; LaunchError if malformed."""

    def dims(value: Any, what: str) -> tuple[int, int, int]:
        items = (value,) if isinstance(value, (numbers.Integral, np.integer)) else value
        try:
            items = tuple(items)
        except TypeError:
            items = ()
        if not 1 <= len(items) <= 3 or not all(
            isinstance(d, (numbers.Integral, np.integer)) and not isinstance(d, bool) and d >= 1 for d in items
        ):
            raise LaunchError(f"kernel '{kernel_name}': {what} must be 1 to 3 positive integers, got {value!r}")
        return tuple(int(d) for d in items) + (1,) * (3 - len(items))

    if not isinstance(shared_bytes, (numbers.Integral, np.integer)) or shared_bytes < 0:
        raise LaunchError(f"kernel '{kernel_name}': shared_bytes must be a non-negative integer, got {shared_bytes!r}")
    return LaunchShape(dims(grid, "grid"), dims(block, "block"), int(shared_bytes))


def copy_back_indices(kernel_name: str, bound: Sequence[BoundArgument], copy_back: Any) -> list[int]:
    """Which numpy-array arguments to copy back after a launch.

    None means every writeable numpy array; otherwise an iterable of argument
    indices, each of which must be a writeable numpy array.
    """
    arrays = [i for i, argument in enumerate(bound) if argument.kind == "array"]
    if copy_back is None:
        return [i for i in arrays if bound[i].value.flags.writeable]
    try:
        requested = [int(i) for i in copy_back]
    except (TypeError, ValueError):
        raise LaunchError(f"kernel '{kernel_name}': copy_back must be argument indices, got {copy_back!r}") from None
    for index in requested:
        if index not in arrays:
            raise LaunchError(f"kernel '{kernel_name}': copy_back index {index} is not a numpy array argument")
        if not bound[index].value.flags.writeable:
            raise LaunchError(
                f"kernel '{kernel_name}': copy_back index {index} ({bound[index].param.name}) is a read-only array"
            )
    return requested


# ---------------------------------------------------------------------------
# The CUDA driver, contexts and loaded modules


def gpu_available() -> tuple[bool, str]:
    """(True, device name) when kernels can be launched here, else (False, why not)."""
    try:
        return True, _driver().Device(0).name()
    except ToolchainError as error:
        return False, error.message


_loaded_driver: ModuleType | None = None
_primary: Any = None  # device 0's primary context, retained once for the process
_this_thread = threading.local()  # `driver` once this thread made the context current for PyCUDA


def _driver() -> ModuleType:
    """pycuda.driver with the primary context of device 0 made current in the calling thread (PyCUDA's
    context stack is per thread: torch runs a backward pass, Dask a task, in threads of their own);
    ToolchainError if impossible."""
    driver = getattr(_this_thread, "driver", None)
    if driver is None:
        driver = _current_in_this_thread(_load_driver())
    return driver


def _load_driver() -> ModuleType:
    """pycuda.driver, initialised, with device 0's primary context retained (once per process)."""
    global _loaded_driver, _primary
    if _loaded_driver is not None:
        return _loaded_driver
    if importlib.util.find_spec("pycuda") is None:
        raise ToolchainError(PYCUDA_MISSING)
    try:
        import pycuda.driver as driver
    except ImportError as error:  # PyCUDA is there but libcuda is not
        raise ToolchainError(f"no CUDA GPU/driver found: {error}") from error
    try:
        driver.init()
        if driver.Device.count() == 0:
            raise ToolchainError("no CUDA GPU/driver found: the driver sees no device")
        _primary = driver.Device(0).retain_primary_context()
    except driver.Error as error:
        raise ToolchainError(f"no CUDA GPU/driver found: {error}") from error
    _loaded_driver = driver
    return driver


def _current_in_this_thread(driver: ModuleType) -> ModuleType:
    """Push the primary context in the calling thread, popped when the process (main thread) or the
    thread ends - or, in a thread Python did not start (torch's autograd engine runs a backward pass in
    one, and no Python code runs at its end), when the call that needed it returns (`thread_scope`)."""
    _primary.push()
    thread = threading.current_thread()
    if thread is threading.main_thread():
        atexit.register(_release_context, _primary)
    elif isinstance(thread, threading._DummyThread):
        _this_thread.foreign = True
    else:  # PyCUDA aborts the process when a thread ends with a context pushed (a Dask executor's)
        _this_thread.release = _PopAtThreadExit(driver)
    _this_thread.driver = driver
    return driver


@contextlib.contextmanager
def thread_scope() -> Iterator[None]:
    """A call into the driver from any thread: where the block made the context current in a thread
    Python did not start, it is popped again at the block's end (PyCUDA aborts the process if such a
    thread ends with a context pushed, and nothing would pop it there)."""
    try:
        yield
    finally:
        if getattr(_this_thread, "foreign", False):
            _this_thread.driver.Context.pop()
            _this_thread.driver = None
            _this_thread.foreign = False


def _release_context(context: Any) -> None:
    _modules.clear()  # forget modules while their context is still current
    context.pop()


class _PopAtThreadExit:
    """Pops the context `_driver` pushed in a thread other than the main one when that thread ends
    (Python clears the thread's locals before the thread's own C++ cleanup checks its stack)."""

    def __init__(self, driver: ModuleType):
        self.driver = driver

    def __del__(self) -> None:
        try:
            self.driver.Context.pop()
        except Exception:  # the driver is already shut down: nothing is left to pop
            pass


@functools.lru_cache(maxsize=None)
def device_count() -> int:
    """How many devices the driver sees (a single one lets launches skip every context check)."""
    _driver()
    return cuda.api().device_count()


@functools.lru_cache(maxsize=None)
def primary_context(device: int) -> int:
    """The primary context of `device`, the one torch and CuPy use too (retained for the process)."""
    _driver()
    return cuda.api().primary_context(device)


def device_of_pointer(address: int) -> int | None:
    """The device that holds `address` (0 on a machine with one device); None for host memory."""
    if device_count() == 1:
        return 0
    return cuda.api().pointer_device(address)


_pycuda_contexts: dict[int, Any] = {}


@contextlib.contextmanager
def on_device(device: int) -> Iterator[None]:
    """Make the primary context of `device` current for the block (PyCUDA's allocations and copies too)."""
    driver = _driver()
    if device == 0 and device_count() == 1 or cuda.api().current_context() == primary_context(device):
        yield
        return
    if device not in _pycuda_contexts:
        _pycuda_contexts[device] = driver.Device(device).retain_primary_context()
    _pycuda_contexts[device].push()
    try:
        yield
    finally:
        driver.Context.pop()


@dataclass
class Function:
    """A kernel of a loaded module: its driver handle, parameters (and their offsets in the parameter
    buffer, `parameter_offsets`) and device."""

    handle: int
    name: str
    params: list[PtxParam]
    device: int
    offsets: list[int] = field(default_factory=list)
    shared_opt_in: int = DEFAULT_DYNAMIC_SHARED_LIMIT  # dynamic shared memory it may use without asking again

    def allow_shared(self, nbytes: int) -> None:
        """Opt in to `nbytes` of dynamic shared memory (needed above 48 KiB)."""
        if nbytes > self.shared_opt_in:
            try:
                cuda.api().set_max_dynamic_shared(self.handle, nbytes)
            except cuda.CudaError as error:
                raise driver_error(error, f"kernel '{self.name}': cannot allow {nbytes} B of shared memory") from None
            self.shared_opt_in = nbytes


@dataclass
class Module:
    """A PTX text loaded onto one device (from its cubin where one was given): its kernels' parameters."""

    ptx: str
    params: dict[str, list[PtxParam]]
    handle: int
    device: int = 0
    from_cubin: bool = False
    _functions: dict[str, Function] = field(default_factory=dict, repr=False)

    def function(self, kernel_name: str) -> Function:
        """The kernel `kernel_name`; LaunchError if the PTX has none."""
        params = _kernel_params(self.params, kernel_name)
        if kernel_name not in self._functions:
            try:
                with on_device(self.device):
                    handle = cuda.api().get_function(self.handle, kernel_name)
                    offsets = parameter_offsets(handle, kernel_name, params)
            except cuda.CudaError as error:
                raise driver_error(error, f"kernel '{kernel_name}'") from None
            self._functions[kernel_name] = Function(handle, kernel_name, params, self.device, offsets)
        return self._functions[kernel_name]


def parameter_offsets(handle: int, kernel_name: str, params: list[PtxParam]) -> list[int]:
    """The offset of each parameter in the buffer the compiled kernel reads (`needs_driver_layout`):
    the natural ones, or what the driver reports for the function `handle`.  LaunchError, naming the
    parameter, where the driver's sizes disagree with the PTX's."""
    if not needs_driver_layout(params):
        return natural_offsets(params)
    layout = cuda.api().parameter_info(handle, len(params))
    if len(layout) != len(params):
        raise LaunchError(f"kernel '{kernel_name}': the driver reports {len(layout)} parameters, the PTX declares "
                          f"{len(params)}")
    for param, (_, size) in zip(params, layout):
        if size != param.size:
            raise LaunchError(f"kernel '{kernel_name}', parameter {param}: the driver reports {size} bytes, "
                              f"the PTX declares {param.size}")
    return [offset for offset, _ in layout]


def _kernel_params(params: dict[str, list[PtxParam]], kernel_name: str) -> list[PtxParam]:
    if kernel_name not in params:
        raise LaunchError(f"no kernel '{kernel_name}' in this PTX (kernels: {', '.join(params) or 'none'})")
    return params[kernel_name]


_modules: dict[tuple[str, int], Module] = {}


def load_module(ptx_text: str, cubin: bytes | None = None, device: int = 0) -> Module:
    """Load PTX onto `device` (once per process for a given text and device).

    `cubin` is what ptxas made of this PTX for this device's exact target: the
    driver loads it as it is instead of compiling the PTX again.  Raises
    PtxasError when the driver rejects the image, ToolchainError without
    PyCUDA or a GPU.
    """
    key = (ptx_text, device)  # a str caches its own hash: repeated launches of one text cost a dict lookup
    if key not in _modules:
        params = parse_entry_params(ptx_text)
        _driver()
        images = ([cubin] if cubin else []) + [ptx_text.encode() + b"\0"]  # a cubin the driver refuses: the PTX
        for image in images:
            try:
                with on_device(device):
                    handle = cuda.api().load_module(image)
                break
            except cuda.CudaError as error:
                if error.name in STICKY_ERRORS:
                    raise driver_error(error, "cannot load a module") from None
                if image is images[-1]:
                    raise PtxasError(f"the CUDA driver rejected the PTX: {error}") from error
        _modules[key] = Module(ptx_text, params, handle, device, image is cubin)
    return _modules[key]


PtxOrModule = Union[str, Module]


# ---------------------------------------------------------------------------
# Tensor maps, encoded by the driver


def encode_tensor_map(tmap: TensorMap) -> bytes:
    """The CUtensorMap the CUDA driver builds for `tmap` over its tensor's device address (128 bytes)."""
    _driver()  # a current context, or a ToolchainError saying why there is none
    address = tmap.device_address()
    if address % 16:
        raise LaunchError(f"TensorMap: the device address {address:#x} is not 16-byte aligned")
    data_type, swizzle, l2_promotion, oob_fill = tmap.codes
    try:
        return cuda.api().encode_tiled_map(data_type, address, tmap.shape, tmap.strides, tmap.box,
                                           tmap.element_strides, swizzle, l2_promotion, oob_fill)
    except cuda.CudaError as error:
        raise driver_error(error, f"cuTensorMapEncodeTiled rejected {tmap.describe()}") from None


class MapEncoder:
    """The driver's encoding of one `tensor_map` parameter for each device address it is given (the launcher's
    fast path: shape, strides, type and box fixed by the call's signature), the last few kept."""

    KEPT = 64

    def __init__(self, shape: tuple[int, ...], dtype: str, box: tuple[int, ...],
                 strides: tuple[int, ...] | None = None):
        self.shape, self.dtype, self.box, self.strides = shape, dtype, box, strides
        self.encoded: dict[int, bytes] = {}

    def __call__(self, address: int) -> bytes:
        raw = self.encoded.get(address)
        if raw is None:
            if len(self.encoded) >= self.KEPT:
                del self.encoded[next(iter(self.encoded))]
            raw = self.encoded[address] = encode_tensor_map(kernel_map(address, self.shape, self.dtype, self.box,
                                                                       self.strides))
        return raw


# ---------------------------------------------------------------------------
# Queueing launches


#: Errors after which the context is unusable: a kernel queued earlier faulted.
STICKY_ERRORS = frozenset({"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_MISALIGNED_ADDRESS",
                           "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_FAILED",
                           "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
                           "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT"})


class Inline(NamedTuple):
    """What QueuedKernel.__call__ does, in pieces, for a caller that writes the launch into its own code
    (phobos.launch.fastpath.direct_call): in the thread `owner`, `pack_into(own.buffer, cuda.STREAM_OFFSET,
    stream, *values)` and `own.start()` without a lock (no other thread packs into that
    buffer); in any other, the same with `shared`, under `shared.lock`; then, for a CUresult that is not 0,
    `fail(code, stream, launcher)`."""

    owner: int
    own: cuda.Launcher
    shared: cuda.Launcher
    pack_into: Callable[..., None]
    fail: Callable[[int, int, cuda.Launcher], None]


class QueuedKernel:
    """A kernel with its launch shape and parameter layout fixed, made once and called for every launch.

    `queue(stream, values)` packs the stream and `values` (in the PTX's
    parameter order: device addresses and numbers) into the launch's buffer
    and queues the kernel on `stream` (a raw CUstream handle: 0 is the NULL
    stream); it does not wait.  On a machine with several devices the
    kernel's context is made current for the launch when it is not.  The
    thread that made it has a buffer of its own besides (`inline`), which
    the calls written out for it pack without taking the lock.
    """

    def __init__(self, function: Function, shape: LaunchShape):
        _driver()
        api = cuda.api()
        self.name = function.name
        self.shape = shape
        self.layout = parameter_layout(function.params, function.offsets)
        self.context = primary_context(function.device)
        self.only_device = device_count() == 1  # the driver sees this device alone: every CUDA tensor is on it
        self.switch_context = not self.only_device
        function.allow_shared(shape.shared_bytes)
        launcher = functools.partial(api.launcher, function.handle, shape.grid, shape.block, shape.shared_bytes,
                                     self.layout.size)
        self._launcher, self._own = launcher(), launcher()
        self._owner = threading.get_ident()
        self._pack_into = cuda.launch_layout(self.layout).pack_into

    def __call__(self, stream: int, values: Sequence[Any]) -> None:
        """Queue the launch; a value that does not fit its parameter raises struct.error or OverflowError
        before anything is queued (callers bind values first, or fall back to binding on it)."""
        launcher = self._launcher
        with launcher.lock:
            self._pack_into(launcher.buffer, cuda.STREAM_OFFSET, stream, *values)
            code = launcher.start() if not self.switch_context else \
                self._queue_in_context(stream)
        if code:
            self._retry_or_raise(code, stream, launcher)

    def inline(self) -> Inline | None:
        """The pieces of a launch (Inline); None when a launch must make the kernel's context current first."""
        if self.switch_context:
            return None
        return Inline(self._owner, self._own, self._launcher, self._pack_into, self._retry_or_raise)

    def _queue_in_context(self, stream: int) -> int:
        api = cuda.api()
        if api.current_context() == self.context:
            return self._launcher.queue(stream)
        api.push_context(self.context)
        try:
            return self._launcher.queue(stream)
        finally:
            api.pop_context()

    def _retry_or_raise(self, code: int, stream: int, launcher: cuda.Launcher) -> None:
        """After a launch from `launcher`'s buffer failed: again in the kernel's context, where the calling
        thread had none current; else the error."""
        api = cuda.api()
        if code == cuda.CUDA_ERROR_INVALID_CONTEXT and not api.current_context():
            api.push_context(self.context)  # a thread that never made a context current: use the kernel's
            with launcher.lock:
                code = launcher.queue(stream)
            if not code:
                return
        raise self.error(api.error(code))

    def error(self, cause: cuda.CudaError) -> LaunchError:
        return driver_error(cause, f"kernel '{self.name}' failed ({self.shape})")


def stream_capturing(stream: int) -> bool:
    """Whether `stream` is being captured into a CUDA graph, or (where torch is in use) torch's current one.

    The legacy NULL stream is not asked of the driver: asking it while another
    stream captures in global mode would break that capture.
    """
    _driver()
    torch_cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if torch_cuda is not None and torch_cuda.is_initialized() and torch_cuda.is_current_stream_capturing():
        return True
    if stream in (0, 1):
        return False
    try:
        return cuda.api().stream_capturing(stream)
    except cuda.CudaError as error:
        raise driver_error(error, f"cannot ask whether stream {stream:#x} is being captured") from None


def driver_error(error: cuda.CudaError, what: str) -> LaunchError:
    """A LaunchError for a failed driver call; after a kernel's fault, saying so."""
    note = ""
    if error.name in STICKY_ERRORS:
        note = ("; a kernel queued earlier on this device faulted (launches return before their kernels "
                "finish, so a fault is reported by the next call that launches or waits)")
    return LaunchError(f"{what}: {error}{note}")


def check_stream(stream: int, device: int, what: str) -> None:
    """LaunchError, naming `what`, when `stream` belongs to another context than `device`'s primary one."""
    if stream in cuda.SPECIAL_STREAMS:
        return
    try:
        context = cuda.api().stream_context(stream)
    except cuda.CudaError as error:
        raise LaunchError(f"{what}: not a usable CUDA stream handle ({stream:#x}): {error}") from None
    if context != primary_context(device):
        raise LaunchError(f"{what}: the stream belongs to another CUDA context than the primary context of "
                          f"device {device}, where the tensors are; pass a stream of that device's primary "
                          f"context (torch's and CuPy's streams are)")


def synchronize(device: int = 0) -> None:
    """Wait for everything queued on `device`; a fault of an asynchronous kernel is raised here as a LaunchError."""
    driver = _driver()
    with on_device(device):
        try:
            driver.Context.synchronize()
        except driver.Error as error:
            raise LaunchError(f"an asynchronous kernel on device {device} failed: {error}") from error


# ---------------------------------------------------------------------------
# Launching


def _bind(
    ptx_or_module: PtxOrModule, kernel_name: str, grid: Any, block: Any, args: Sequence[Any], shared_bytes: Any
) -> tuple[list[BoundArgument], LaunchShape]:
    """Check a launch's arguments and shape against the kernel, before anything touches the GPU."""
    params = ptx_or_module.params if isinstance(ptx_or_module, Module) else parse_entry_params(ptx_or_module)
    bound = bind_arguments(kernel_name, _kernel_params(params, kernel_name), args)
    return bound, launch_shape(kernel_name, grid, block, shared_bytes)


@dataclass
class _Launch:
    """A kernel with its arguments on the GPU, ready to run (possibly many times) on `stream`."""

    kernel_name: str
    shape: LaunchShape
    queued: QueuedKernel | None = None
    values: list[Any] = field(default_factory=list)
    stream: int = 0
    device_copies: dict[int, Any] = field(default_factory=dict)  # argument index -> allocation

    def run(self) -> None:
        self.queued(self.stream, self.values)

    def synchronize(self, timeout_s: float | None = None) -> None:
        driver = _driver()
        try:
            if timeout_s is not None:
                wait_for_gpu(timeout_s, f"kernel '{self.kernel_name}' ({self.shape})")
            driver.Context.synchronize()
        except driver.Error as error:
            raise self.error(error) from error

    def error(self, cause: Exception) -> LaunchError:
        return LaunchError(f"kernel '{self.kernel_name}' failed ({self.shape}): {cause}")


@contextlib.contextmanager
def _on_gpu(
    ptx_or_module: PtxOrModule, kernel_name: str, bound: list[BoundArgument], shape: LaunchShape, stream: int = 0
) -> Iterator[_Launch]:
    """Load the kernel and copy the numpy arguments to the GPU; free the copies afterwards."""
    module = ptx_or_module if isinstance(ptx_or_module, Module) else load_module(ptx_or_module)
    driver = _driver()
    launch = _Launch(kernel_name, shape, stream=stream)
    with on_device(module.device):
        try:
            for index, argument in enumerate(bound):
                if argument.kind == "array" and argument.value.nbytes > 0:
                    launch.device_copies[index] = driver.mem_alloc(argument.value.nbytes)
                    driver.memcpy_htod(launch.device_copies[index], np.ascontiguousarray(argument.value))
            pointers = {index: int(launch.device_copies[index]) if index in launch.device_copies else 0
                        for index, argument in enumerate(bound) if argument.kind == "array"}
            launch.values = _values(bound, pointers)
            launch.queued = QueuedKernel(module.function(kernel_name), shape)
            yield launch
        except (driver.Error, cuda.CudaError) as error:
            raise launch.error(error) from error
        finally:
            for allocation in launch.device_copies.values():
                with contextlib.suppress(driver.Error):  # fails after a fault has killed the context
                    allocation.free()


def launch(
    ptx_or_module: PtxOrModule,
    kernel_name: str,
    grid: Any,
    block: Any,
    args: Sequence[Any],
    shared_bytes: int = 0,
    copy_back: Sequence[int] | None = None,
    stream: int = 0,
    timeout_s: float | None = None,
) -> None:
    """Run kernel `kernel_name` of a PTX text (or loaded Module) once and wait for it.

    grid and block are an int or 1 to 3 ints.  numpy arrays in `args` are
    copied to the GPU, and after the launch back into the same arrays (all
    writeable ones, or the argument indices listed in `copy_back`).  Device
    memory is passed as its address; numbers are converted to the parameter's
    PTX type.  The kernel runs on `stream` (a raw handle; 0, the NULL stream,
    by default), and the whole device is waited for.  Raises LaunchError for
    bad arguments or a failure the driver reports, ToolchainError without
    PyCUDA or a GPU, GpuTimeout if the kernel is still running after
    `timeout_s` seconds.
    """
    bound, shape = _bind(ptx_or_module, kernel_name, grid, block, args, shared_bytes)
    to_copy = copy_back_indices(kernel_name, bound, copy_back)
    with _on_gpu(ptx_or_module, kernel_name, bound, shape, stream) as run:
        run.run()
        run.synchronize(timeout_s)
        for index in to_copy:
            if index in run.device_copies:
                _copy_to_host(bound[index].value, run.device_copies[index])


class GpuTimeout(LaunchError):
    """The GPU's work did not finish in time (a kernel that never ends, such as one waiting for an
    mbarrier phase that cannot complete).  The kernel still runs: the process must exit."""


def wait_for_gpu(timeout_s: float, what: str = "the GPU's queued work") -> None:
    """Wait until the work queued so far has finished; GpuTimeout after `timeout_s` seconds."""
    driver = _driver()
    done = driver.Event()
    done.record()
    deadline = time.monotonic() + timeout_s
    delay = 1e-4
    while not done.query():
        if time.monotonic() > deadline:
            raise GpuTimeout(f"{what} did not finish within {timeout_s:g} s: it is probably deadlocked (an mbarrier "
                             "phase or bar.sync that never completes); the GPU context cannot be used any more")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _copy_to_host(array: np.ndarray, allocation: Any) -> None:
    driver = _driver()
    if array.flags.c_contiguous:
        driver.memcpy_dtoh(array, allocation)
    else:
        staging = np.empty_like(array, order="C")
        driver.memcpy_dtoh(staging, allocation)
        array[...] = staging


MIN_SAMPLE_MS = 1.0  # a timed sample runs short kernels back to back for at least this long
MAX_CALLS_PER_SAMPLE = 64


def time_launch(
    ptx_or_module: PtxOrModule,
    kernel_name: str,
    grid: Any,
    block: Any,
    args: Sequence[Any],
    shared_bytes: int = 0,
    warmup: int = 3,
    repeat: int = 20,
) -> float:
    """Median milliseconds per launch, timed by `time_calls` (`repeat` samples after `warmup` launches).

    numpy arrays are copied to the GPU once and not copied back.
    """
    _check_timing_counts(f"kernel '{kernel_name}'", warmup, repeat)
    with prepared_launch(ptx_or_module, kernel_name, grid, block, args, shared_bytes) as run:
        return time_calls(run, warmup, repeat)


@contextlib.contextmanager
def prepared_launch(
    ptx_or_module: PtxOrModule, kernel_name: str, grid: Any, block: Any, args: Sequence[Any], shared_bytes: int = 0
) -> Iterator[Callable[[], None]]:
    """A function that queues the launch and returns at once (no copies back, no waiting).

    For timing and benchmarks: arguments are bound and numpy arrays copied to
    the GPU once, when the `with` block starts; the copies live until it ends.
    """
    bound, shape = _bind(ptx_or_module, kernel_name, grid, block, args, shared_bytes)
    with _on_gpu(ptx_or_module, kernel_name, bound, shape) as run:
        yield run.run
        run.synchronize()


def time_calls(
    work: Callable[[], Any], warmup: int = 3, repeat: int = 20, synchronize: Callable[[], None] | None = None
) -> float:
    """Median milliseconds per call of `work` over `repeat` timed samples, after `warmup` untimed calls.

    Each sample is bracketed by a pair of CUDA events, so what is measured is
    the GPU work `work` queues (and any host work it waits for).  A call
    shorter than MIN_SAMPLE_MS is repeated back to back inside each sample (how
    many times is set by one first timed call), so that the host's time to
    queue a launch overlaps the GPU's work instead of adding to it and the
    events' resolution is not felt; a sample's time is divided by its calls.
    A call of MIN_SAMPLE_MS or more makes samples of one call, as the first
    timed call is: that call is then the first sample (an autotuner's first
    look at a long GEMM configuration costs two launches instead of three).
    """
    _check_timing_counts("timing", warmup, repeat)
    driver = _driver()
    for _ in range(warmup):
        work()
    (synchronize or driver.Context.synchronize)()
    start, end = driver.Event(), driver.Event()

    def sample(calls: int) -> float:
        start.record()
        for _ in range(calls):
            work()
        end.record()
        end.synchronize()
        return start.time_till(end) / calls

    first = sample(1)
    calls = MAX_CALLS_PER_SAMPLE if first <= 0 else max(1, min(MAX_CALLS_PER_SAMPLE, int(MIN_SAMPLE_MS / first)))
    if calls == 1:
        return statistics.median([first] + [sample(1) for _ in range(repeat - 1)])
    return statistics.median(sample(calls) for _ in range(repeat))


def _check_timing_counts(what: str, warmup: int, repeat: int) -> None:
    if warmup < 0 or repeat < 1:
        raise LaunchError(f"{what}: need warmup >= 0 and repeat >= 1, got {warmup} and {repeat}")


# ---------------------------------------------------------------------------
# The device's limits, and device copies (for running kernels on scratch data)


@dataclass(frozen=True)
class DeviceProperties:
    """What the launcher needs to know about a device."""

    name: str
    compute_capability: tuple[int, int]
    max_shared_bytes_per_block: int  # dynamic shared memory one CTA may opt into
    max_registers_per_block: int
    max_threads_per_block: int
    multiprocessors: int = 1


def device_properties(index: int = 0) -> DeviceProperties:
    """The name, compute capability and per-CTA limits of device `index`; ToolchainError without a GPU."""
    driver = _driver()
    device = driver.Device(index)
    attributes = driver.device_attribute
    shared = getattr(attributes, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", attributes.MAX_SHARED_MEMORY_PER_BLOCK)
    return DeviceProperties(
        name=device.name(),
        compute_capability=tuple(device.compute_capability()),
        max_shared_bytes_per_block=device.get_attribute(shared),
        max_registers_per_block=device.get_attribute(attributes.MAX_REGISTERS_PER_BLOCK),
        max_threads_per_block=device.get_attribute(attributes.MAX_THREADS_PER_BLOCK),
        multiprocessors=device.get_attribute(attributes.MULTIPROCESSOR_COUNT),
    )


def device_copy(source: np.ndarray | int, nbytes: int | None = None) -> Any:
    """A new device allocation holding a copy of `source`; free it with `.free()`.

    `source` is a numpy array, or the device address of `nbytes` bytes.
    """
    driver = _driver()
    size = source.nbytes if isinstance(source, np.ndarray) else int(nbytes or 0)
    allocation = driver.mem_alloc(max(size, 1))
    try:
        if isinstance(source, np.ndarray):
            driver.memcpy_htod(allocation, np.ascontiguousarray(source))
        elif size:
            driver.memcpy_dtod(allocation, int(source), size)
    except driver.Error as error:
        allocation.free()
        raise LaunchError(f"cannot copy {size} bytes to the GPU: {error}") from error
    return allocation
