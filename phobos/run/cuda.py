# The CUDA driver calls of the launch path, through ctypes on libcuda.
#
# PyCUDA keeps the contexts, memory, copies and events; these are the calls it
# does not offer, or offers too slowly for a launch every few microseconds:
#
#   load_module       a cubin or PTX image (cuModuleLoadDataEx, with the JIT's
#                     error log), in the current context
#   get_function      a kernel of a loaded module
#   parameter_info    where the compiled kernel reads each parameter (offset, size),
#                     which a parameter buffer must follow (runtime.parameter_offsets)
#   launcher          a prebuilt cuLaunchKernelEx: one buffer holds the launch
#                     configuration (grid, block, shared memory, the stream) and
#                     the parameters, with the `extra` array that points at them
#                     made once, so a launch is one pack of the stream and the
#                     parameters into the buffer and one foreign call of four
#                     ready arguments, on any stream handle (torch's, CuPy's,
#                     PyCUDA's or a raw one)
#   stream_capturing  whether a stream is being captured into a CUDA graph
#   stream_context    the context a stream belongs to
#   pointer_device    the device that holds an address (None for host memory)
#   contexts          the current one, push and pop, a device's primary one
#   encode_tiled_map  a TMA tensor map (cuTensorMapEncodeTiled), in host memory
#                     aligned as the driver asks (tensor_map.py describes the
#                     map, runtime.encode_tensor_map asks for it)
#
# `api()` gives the one DriverApi of the process, or raises ToolchainError when
# libcuda cannot be loaded.  Tests put a stand-in in its place (`_api`), so
# everything above this module runs on machines without a GPU.
from __future__ import annotations

import ctypes
import functools
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ToolchainError

#: CUresult codes the runtime tells apart.
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_INVALID_CONTEXT = 201

#: CUresults of calls made while a stream capture forbids them (CUDA_ERROR_STREAM_CAPTURE_*, CAPTURED_EVENT).
CAPTURE_ERRORS = range(900, 909)

#: Stream handles with a fixed meaning: the NULL stream, the legacy default and per-thread default streams.
SPECIAL_STREAMS = frozenset({0, 1, 2})

_LAUNCH_PARAM_END = 0
_LAUNCH_PARAM_BUFFER_POINTER = 1
_LAUNCH_PARAM_BUFFER_SIZE = 2
_JIT_ERROR_LOG_BUFFER = 5
_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_STREAM_CAPTURE_STATUS_NONE = 0
_ERROR_LOG_BYTES = 16384
#: cuTensorMapEncodeTiled writes the map to host memory aligned to 64 bytes (CUDA 12; 128 in CUDA 13's
#: CUtensorMap type): the larger, so that either driver accepts it.
TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGNMENT = 128


class CudaError(Exception):
    """A driver call that failed: `code` (CUresult), `name` (CUDA_ERROR_...) and the driver's text."""

    def __init__(self, code: int, name: str, text: str, log: str = ""):
        super().__init__(f"{name}: {text}" + (f"\n{log}" if log else ""))
        self.code = code
        self.name = name
        self.log = log


#: CUlaunchConfig (CUDA 12): grid x, y, z, block x, y, z and dynamic shared memory as unsigned ints, the
#: stream at byte STREAM_OFFSET, then the attributes (a pointer and a count; none here).  A Launcher's
#: buffer holds it, and the kernel's parameters from PARAMS_OFFSET on.
LAUNCH_CONFIG = struct.Struct("<7I4xQQI4x")
STREAM_OFFSET = 32
PARAMS_OFFSET = 64
#: How a Launcher's stream is packed, at STREAM_OFFSET (the attribute fields after it stay 0); the
#: parameters' format follows it: `launch_layout`.
STREAM_FORMAT = "<Q" + "x" * (PARAMS_OFFSET - STREAM_OFFSET - 8)


def launch_layout(parameters: struct.Struct) -> struct.Struct:
    """The stream and the parameters (their little-endian layout, from offset 0) as one struct, packed at
    STREAM_OFFSET of a Launcher's buffer."""
    return struct.Struct(STREAM_FORMAT + parameters.format.lstrip("<"))


_STREAM = struct.Struct(STREAM_FORMAT)


class Launcher:
    """cuLaunchKernelEx for one function and launch shape, with its buffer made once.

    The buffer holds the CUlaunchConfig (LAUNCH_CONFIG) and, from
    PARAMS_OFFSET, the parameters (`size` bytes), which `extra` points at.
    The caller packs the stream and the parameters (`launch_layout`, at
    STREAM_OFFSET) and calls `start()` - the foreign function with its four
    arguments bound, all made once - which returns the CUresult;
    `queue(stream)` sets the stream alone and launches.  `lock` serialises
    packing and launching when several threads share one Launcher (ctypes
    releases the GIL during the call).

    The arguments are what ctypes passes on cheapest: the buffer and `extra`
    by reference (`byref`, which ctypes hands to C as it is, where a
    `c_void_p` is converted anew at every call) and all four bound in a
    `functools.partial`, so a launch builds no argument tuple in Python: 290
    ns a call against 375 ns for the four passed as `c_void_p`s, through a C
    function that does nothing (benchmarks/bench_call_overhead.py --stand-in).
    """

    def __init__(self, function: int, grid: tuple[int, int, int], block: tuple[int, int, int],
                 shared_bytes: int, size: int, launch_kernel_ex: Callable[..., int]):
        self.buffer = ctypes.create_string_buffer(PARAMS_OFFSET + max(size, 1))
        LAUNCH_CONFIG.pack_into(self.buffer, 0, *grid, *block, shared_bytes, 0, 0, 0)
        self._size = ctypes.c_size_t(size)
        base = ctypes.addressof(self.buffer)
        self.extra = (ctypes.c_void_p * 5)(_LAUNCH_PARAM_BUFFER_POINTER, base + PARAMS_OFFSET,
                                           _LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(self._size),
                                           _LAUNCH_PARAM_END)
        self.lock = threading.Lock()
        # cuLaunchKernelEx(&config, function, NULL, extra)
        self.start = functools.partial(launch_kernel_ex, ctypes.byref(self.buffer), ctypes.c_void_p(function), None,
                                       ctypes.byref(self.extra))

    def queue(self, stream: int) -> int:
        _STREAM.pack_into(self.buffer, STREAM_OFFSET, stream)
        return self.start()


class DriverApi:
    """The driver calls above, on libcuda."""

    def __init__(self, library: ctypes.CDLL):
        self._lib = library
        p, u, i = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
        signatures = {
            "cuModuleLoadDataEx": (ctypes.POINTER(p), p, u, ctypes.POINTER(i), ctypes.POINTER(p)),
            "cuModuleUnload": (p,),
            "cuModuleGetFunction": (ctypes.POINTER(p), p, ctypes.c_char_p),
            "cuFuncSetAttribute": (p, i, i),
            "cuFuncGetParamInfo": (p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                                   ctypes.POINTER(ctypes.c_size_t)),
            "cuStreamIsCapturing": (p, ctypes.POINTER(i)),
            "cuStreamGetCtx": (p, ctypes.POINTER(p)),
            "cuPointerGetAttribute": (p, i, ctypes.c_uint64),
            "cuCtxGetCurrent": (ctypes.POINTER(p),),
            "cuCtxPushCurrent_v2": (p,),
            "cuCtxPopCurrent_v2": (ctypes.POINTER(p),),
            "cuDevicePrimaryCtxRetain": (ctypes.POINTER(p), i),
            "cuDeviceGet": (ctypes.POINTER(i), i),
            "cuDeviceGetCount": (ctypes.POINTER(i),),
            "cuGetErrorName": (i, ctypes.POINTER(ctypes.c_char_p)),
            "cuGetErrorString": (i, ctypes.POINTER(ctypes.c_char_p)),
            "cuTensorMapEncodeTiled": (p, i, ctypes.c_uint32, p, p, p, p, p, i, i, i, i),
        }
        for name, argtypes in signatures.items():
            if not hasattr(library, name):  # cuFuncGetParamInfo: CUDA 12.4; cuTensorMapEncodeTiled: 12.0
                continue
            function = getattr(library, name)
            function.argtypes = argtypes
            function.restype = i
        # The launch itself without argtypes: ctypes's conversions per argument cost more than the driver's
        # call; Launcher binds every argument already as what C expects.
        self._launch_kernel_ex = library["cuLaunchKernelEx"]
        self._launch_kernel_ex.restype = i

    # --- errors
    def error(self, code: int, log: str = "") -> CudaError:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self._lib.cuGetErrorName(code, ctypes.byref(name))
        self._lib.cuGetErrorString(code, ctypes.byref(text))
        return CudaError(code, (name.value or b"CUDA_ERROR_UNKNOWN").decode(),
                         (text.value or b"unknown error").decode(), log)

    def _check(self, code: int) -> None:
        if code != CUDA_SUCCESS:
            raise self.error(code)

    # --- modules and functions
    def load_module(self, image: bytes) -> int:
        """Load a cubin, or NUL-terminated PTX, into the current context; CudaError with the JIT's log."""
        handle = ctypes.c_void_p()
        log = ctypes.create_string_buffer(_ERROR_LOG_BYTES)
        options = (ctypes.c_int * 2)(_JIT_ERROR_LOG_BUFFER, _JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (ctypes.c_void_p * 2)(ctypes.addressof(log), _ERROR_LOG_BYTES)
        code = self._lib.cuModuleLoadDataEx(ctypes.byref(handle), image, 2, options, values)
        if code != CUDA_SUCCESS:
            raise self.error(code, log.value.decode(errors="replace").strip())
        return handle.value

    def unload_module(self, handle: int) -> None:
        self._lib.cuModuleUnload(handle)

    def get_function(self, module: int, name: str) -> int:
        function = ctypes.c_void_p()
        self._check(self._lib.cuModuleGetFunction(ctypes.byref(function), module, name.encode()))
        return function.value

    def parameter_info(self, function: int, count: int) -> list[tuple[int, int]]:
        """(offset, size) of the first `count` parameters of `function` in its parameter buffer (fewer
        where it has fewer; asking past the last one is an error the driver reports, and tools such as
        compute-sanitizer with it, so a caller asks for the parameters it knows of)."""
        if not hasattr(self._lib, "cuFuncGetParamInfo"):
            raise ToolchainError("this CUDA driver cannot report kernel parameter offsets (cuFuncGetParamInfo "
                                 "needs CUDA 12.4 or newer), which parameters aligned beyond 16 bytes need")
        layout, offset, size = [], ctypes.c_size_t(), ctypes.c_size_t()
        while len(layout) < count:
            code = self._lib.cuFuncGetParamInfo(function, len(layout), ctypes.byref(offset), ctypes.byref(size))
            if code == CUDA_ERROR_INVALID_VALUE and layout:  # past the last parameter
                break
            self._check(code)
            layout.append((offset.value, size.value))
        return layout

    def set_max_dynamic_shared(self, function: int, nbytes: int) -> None:
        self._check(self._lib.cuFuncSetAttribute(function, _FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes))

    def launcher(self, function: int, grid: tuple[int, int, int], block: tuple[int, int, int],
                 shared_bytes: int, size: int) -> Launcher:
        return Launcher(function, grid, block, shared_bytes, size, self._launch_kernel_ex)

    # --- streams, pointers, contexts
    def stream_capturing(self, stream: int) -> bool:
        """Whether `stream` is being captured (asking about the NULL stream while another stream captures
        in global mode is itself refused: that counts as capturing)."""
        status = ctypes.c_int()
        code = self._lib.cuStreamIsCapturing(stream, ctypes.byref(status))
        if code in CAPTURE_ERRORS:
            return True
        self._check(code)
        return status.value != _STREAM_CAPTURE_STATUS_NONE

    def stream_context(self, stream: int) -> int:
        context = ctypes.c_void_p()
        self._check(self._lib.cuStreamGetCtx(stream, ctypes.byref(context)))
        return context.value or 0

    def pointer_device(self, address: int) -> int | None:
        ordinal = ctypes.c_int()
        code = self._lib.cuPointerGetAttribute(ctypes.byref(ordinal), _POINTER_ATTRIBUTE_DEVICE_ORDINAL, address)
        return ordinal.value if code == CUDA_SUCCESS else None

    def device_count(self) -> int:
        count = ctypes.c_int()
        self._check(self._lib.cuDeviceGetCount(ctypes.byref(count)))
        return count.value

    def current_context(self) -> int:
        context = ctypes.c_void_p()
        self._check(self._lib.cuCtxGetCurrent(ctypes.byref(context)))
        return context.value or 0

    def primary_context(self, device: int) -> int:
        """The primary context of `device` (the one torch and CuPy use), retained for the process."""
        handle, context = ctypes.c_int(), ctypes.c_void_p()
        self._check(self._lib.cuDeviceGet(ctypes.byref(handle), device))
        self._check(self._lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle.value))
        return context.value

    def push_context(self, context: int) -> None:
        self._check(self._lib.cuCtxPushCurrent_v2(context))

    def pop_context(self) -> None:
        popped = ctypes.c_void_p()
        self._check(self._lib.cuCtxPopCurrent_v2(ctypes.byref(popped)))

    # --- tensor maps
    def encode_tiled_map(self, data_type: int, address: int, sizes: Sequence[int], strides: Sequence[int],
                          box: Sequence[int], element_strides: Sequence[int], swizzle: int, l2_promotion: int,
                          oob_fill: int) -> bytes:
        """The opaque CUtensorMap (TENSOR_MAP_BYTES) of a tiled map without interleave, built by
        cuTensorMapEncodeTiled in the current context: the CUtensorMap* codes, the global address, and the
        sizes, byte strides of dimensions 1.., box and element strides innermost first; CudaError where
        the driver rejects them."""
        if not hasattr(self._lib, "cuTensorMapEncodeTiled"):
            raise ToolchainError("this CUDA driver cannot encode tensor maps (cuTensorMapEncodeTiled needs "
                                 "CUDA 12 or newer)")
        storage = (ctypes.c_uint8 * (TENSOR_MAP_BYTES + TENSOR_MAP_ALIGNMENT))()
        out = ctypes.addressof(storage) + -ctypes.addressof(storage) % TENSOR_MAP_ALIGNMENT
        rank = len(sizes)
        self._check(self._lib.cuTensorMapEncodeTiled(
            ctypes.c_void_p(out), data_type, rank, ctypes.c_void_p(address), (ctypes.c_uint64 * rank)(*sizes),
            (ctypes.c_uint64 * max(rank - 1, 1))(*strides), (ctypes.c_uint32 * rank)(*box),
            (ctypes.c_uint32 * rank)(*element_strides), 0, swizzle, l2_promotion, oob_fill))
        return ctypes.string_at(out, TENSOR_MAP_BYTES)


_api: Any = None


def api() -> DriverApi:
    """The process's DriverApi on libcuda; ToolchainError where there is no driver library."""
    global _api
    if _api is None:
        try:
            library = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise ToolchainError(f"no CUDA driver library (libcuda.so.1): {error}") from None
        _api = DriverApi(library)
    return _api
