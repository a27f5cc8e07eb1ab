# The CUDA driver calls that PyCUDA does not offer, through ctypes on libcuda.
#
# * `tensor_map` encodes TMA tensor maps with cuTensorMapEncodeTiled.
# * `runtime` asks where the driver places each kernel parameter in the
#   parameter buffer (`parameter_layouts`).  PyCUDA launches with one packed
#   buffer (cuLaunchKernel's CU_LAUNCH_PARAM_BUFFER_POINTER), so the caller must
#   put every parameter at the offset the compiled kernel reads it from.  For
#   parameters aligned to 16 bytes or less that is where a C struct would put
#   it, but ptxas aligns the *constant-bank address* of a parameter, and the
#   bank's parameters start at a GPU-dependent address (0x160 on sm_75/sm_80,
#   0x210 on sm_90): a `.param .align 64 .b8 tmap[128]` parameter first in the
#   list sits at offset 32 on sm_80 and at offset 48 on sm_90, not at 0.  Only
#   the driver knows for the GPU at hand (cuFuncGetParamInfo, CUDA 12.4+); PyCUDA
#   gives no handle to its own functions, so the module is loaded a second time
#   here to ask (the driver's JIT cache makes that cheap) and unloaded at once.
#
# All calls need a current context: runtime._driver() makes one current first.
from __future__ import annotations

import ctypes

from ..errors import LaunchError, ToolchainError

CUDA_ERROR_INVALID_VALUE = 1
_library: ctypes.CDLL | None = None


def library() -> ctypes.CDLL:
    """libcuda.so.1, loaded once; ToolchainError if it cannot be."""
    global _library
    if _library is None:
        try:
            _library = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise ToolchainError(f"cannot load the CUDA driver library libcuda.so.1: {error}") from error
    return _library


def error_name(code: int) -> str:
    """`CUDA_ERROR_... (code)` for a CUresult."""
    try:
        name = ctypes.c_char_p()
        library().cuGetErrorName(ctypes.c_int(code), ctypes.byref(name))
        return f"{name.value.decode()} ({code})" if name.value else f"CUresult {code}"
    except ToolchainError:
        return f"CUresult {code}"


def parameter_layouts(ptx_text: str, kernel_names: list[str]) -> dict[str, list[tuple[int, int]]]:
    """(offset, size) in the parameter buffer of every parameter of each named kernel,
    as the driver compiled `ptx_text` for the current GPU.  LaunchError if the driver
    cannot say (too old for cuFuncGetParamInfo) or refuses the PTX."""
    lib = library()
    if not hasattr(lib, "cuFuncGetParamInfo"):
        raise LaunchError("this CUDA driver cannot report kernel parameter offsets (cuFuncGetParamInfo needs "
                          "CUDA 12.4 or newer), which parameters aligned to more than 16 bytes need")
    module = ctypes.c_void_p()
    _check(lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(ptx_text.encode() + b"\0")),
           "cuModuleLoadData")
    try:
        return {name: _layout(lib, module, name) for name in kernel_names}
    finally:
        lib.cuModuleUnload(module)


def _layout(lib: ctypes.CDLL, module: ctypes.c_void_p, name: str) -> list[tuple[int, int]]:
    function = ctypes.c_void_p()
    _check(lib.cuModuleGetFunction(ctypes.byref(function), module, name.encode()), f"cuModuleGetFunction({name})")
    layout = []
    offset, size = ctypes.c_size_t(), ctypes.c_size_t()
    while True:
        result = lib.cuFuncGetParamInfo(function, ctypes.c_size_t(len(layout)), ctypes.byref(offset),
                                        ctypes.byref(size))
        if result == CUDA_ERROR_INVALID_VALUE:  # past the last parameter
            return layout
        _check(result, f"cuFuncGetParamInfo({name}, {len(layout)})")
        layout.append((offset.value, size.value))


def _check(result: int, call: str) -> None:
    if result != 0:
        raise LaunchError(f"{call} failed: {error_name(result)}")
