# phobos.run.cuda's DriverApi over a stand-in for libcuda: the calls it makes,
# how it reads their results back through ctypes pointers, and its errors.
from __future__ import annotations

import ctypes
import struct

import pytest

from phobos.errors import ToolchainError
from phobos.run import cuda


class Function:
    """A libcuda entry point: returns `code`, after `effect(*args)` fills its out-parameters."""

    def __init__(self, effect=None, code: int = 0):
        self.effect, self.code, self.calls = effect, code, []
        self.argtypes = self.restype = None

    def __call__(self, *args):
        self.calls.append(args)
        if self.effect is not None:
            self.effect(*args)
        return self.code


def store(pointer_argument, value, kind=ctypes.c_void_p):
    """Write `value` where a byref()/pointer argument points."""
    ctypes.cast(pointer_argument, ctypes.POINTER(kind))[0] = value


class Library:
    def __init__(self):
        self.functions: dict[str, Function] = {}

    def __getattr__(self, name: str) -> Function:
        if name.startswith("__"):
            raise AttributeError(name)
        return self.functions.setdefault(name, Function())

    def __getitem__(self, name: str) -> Function:
        return self.functions.setdefault("raw " + name, Function())


@pytest.fixture
def library() -> Library:
    lib = Library()
    names = {500: (b"CUDA_ERROR_NOT_FOUND", b"named symbol not found"), 906: (b"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
                                                                          b"implicit capture")}
    lib.functions["cuGetErrorName"] = Function(lambda code, out: store(out, names[code][0], ctypes.c_char_p))
    lib.functions["cuGetErrorString"] = Function(lambda code, out: store(out, names[code][1], ctypes.c_char_p))
    return lib


def test_every_call_is_declared_with_its_argument_types(library):
    cuda.DriverApi(library)
    assert library.cuModuleLoadDataEx.argtypes is not None and library.cuModuleLoadDataEx.restype is ctypes.c_int
    assert library["cuLaunchKernelEx"].argtypes is None  # the launch converts nothing: Launcher passes C values


def test_functions_are_looked_up_by_name_and_errors_are_named(library):
    api = cuda.DriverApi(library)
    library.functions["cuModuleGetFunction"] = Function(lambda out, module, name: store(out, 0xF00))
    assert api.get_function(0x10, "add") == 0xF00
    assert library.cuModuleGetFunction.calls[0][2] == b"add"
    library.functions["cuModuleGetFunction"] = Function(code=500)
    with pytest.raises(cuda.CudaError, match="CUDA_ERROR_NOT_FOUND: named symbol not found") as error:
        api.get_function(0x10, "sub")
    assert error.value.code == 500 and error.value.name == "CUDA_ERROR_NOT_FOUND"


def test_a_refused_capture_query_counts_as_capturing(library):
    api = cuda.DriverApi(library)
    library.functions["cuStreamIsCapturing"] = Function(lambda stream, out: store(out, 1, ctypes.c_int))
    assert api.stream_capturing(0x5)
    library.functions["cuStreamIsCapturing"] = Function(lambda stream, out: store(out, 0, ctypes.c_int))
    assert not api.stream_capturing(0x5)
    library.functions["cuStreamIsCapturing"] = Function(code=906)
    assert api.stream_capturing(0)


def test_the_launcher_holds_the_launch_configuration_and_the_parameters_that_extra_points_at(library):
    api = cuda.DriverApi(library)
    launcher = api.launcher(0xABC, (4, 2, 1), (128, 1, 1), 1024, 12)
    parameters = struct.Struct("<QI")
    cuda.launch_layout(parameters).pack_into(launcher.buffer, cuda.STREAM_OFFSET, 0x77, 0x1234, 5)
    assert launcher.start() == 0
    (call,) = library["cuLaunchKernelEx"].calls
    config, function, params, extra = call
    assert function.value == 0xABC and params is None
    grid_block_shared = cuda.LAUNCH_CONFIG.unpack_from(launcher.buffer, 0)
    assert config._obj is launcher.buffer and extra._obj is launcher.extra  # passed by reference
    extra = launcher.extra
    assert grid_block_shared == (4, 2, 1, 128, 1, 1, 1024, 0x77, 0, 0)  # no launch attributes
    assert extra[0] == 1 and extra[1] == ctypes.addressof(launcher.buffer) + cuda.PARAMS_OFFSET
    assert extra[2] == 2 and extra[4] is None and ctypes.c_size_t.from_address(extra[3]).value == 12
    assert parameters.unpack_from(launcher.buffer, cuda.PARAMS_OFFSET) == (0x1234, 5)
    assert launcher.queue(0x99) == 0  # the stream alone, the parameters as they were
    assert cuda.LAUNCH_CONFIG.unpack_from(launcher.buffer, 0)[7] == 0x99
    assert parameters.unpack_from(launcher.buffer, cuda.PARAMS_OFFSET) == (0x1234, 5)
    assert ctypes.sizeof(CUlaunchConfig) == cuda.LAUNCH_CONFIG.size
    assert CUlaunchConfig.hStream.offset == cuda.STREAM_OFFSET and cuda.LAUNCH_CONFIG.size <= cuda.PARAMS_OFFSET


class CUlaunchConfig(ctypes.Structure):
    """cuda.h's CUlaunchConfig, as the C compiler lays it out."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


def test_parameter_info_asks_for_the_parameters_it_is_told_of_and_stops_where_the_driver_has_no_more(library):
    layout = [(0, 8), (48, 128), (176, 128), (304, 4)]

    def info(function, index, offset, size):
        if index < len(layout):
            store(offset, layout[index][0], ctypes.c_size_t)
            store(size, layout[index][1], ctypes.c_size_t)

    class ParamInfo(Function):
        def __call__(self, function, index, offset, size):
            self.code = 0 if index < len(layout) else cuda.CUDA_ERROR_INVALID_VALUE
            return super().__call__(function, index, offset, size)

    library.functions["cuFuncGetParamInfo"] = ParamInfo(info)
    api = cuda.DriverApi(library)
    assert api.parameter_info(0xF00, 4) == layout
    assert [call[1] for call in library.cuFuncGetParamInfo.calls] == [0, 1, 2, 3]  # none past the last
    assert api.parameter_info(0xF00, 6) == layout  # the driver has fewer: the runtime names the mismatch
    assert [call[1] for call in library.cuFuncGetParamInfo.calls][4:] == [0, 1, 2, 3, 4]
    assert library.cuFuncGetParamInfo.argtypes[1] is ctypes.c_size_t


def without(library: Library, missing: str) -> Library:
    """`library` as an older driver's, which lacks the entry point `missing`."""
    class Older(Library):
        def __getattr__(self, name: str) -> Function:
            if name == missing:
                raise AttributeError(name)
            return super().__getattr__(name)

    older = Older()
    older.functions.update(library.functions)
    return older


def test_parameter_info_needs_a_driver_that_has_it(library):
    with pytest.raises(ToolchainError, match=r"cuFuncGetParamInfo needs CUDA 12.4"):
        cuda.DriverApi(without(library, "cuFuncGetParamInfo")).parameter_info(0xF00, 1)


def test_a_tensor_map_is_encoded_in_host_memory_aligned_as_the_driver_asks(library):
    def encode(out, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle, l2, oob):
        ctypes.memmove(out.value, bytes(range(128)), 128)

    library.functions["cuTensorMapEncodeTiled"] = Function(encode)
    api = cuda.DriverApi(library)
    raw = api.encode_tiled_map(9, 0x7F000000, (128, 256), (256,), (64, 128), (1, 1), 3, 2, 0)
    assert raw == bytes(range(128))
    ((out, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle, l2, oob),) = \
        library.cuTensorMapEncodeTiled.calls
    assert out.value % cuda.TENSOR_MAP_ALIGNMENT == 0  # CUDA 13's CUtensorMap is 128-byte aligned
    assert (dtype, rank, address.value, interleave, swizzle, l2, oob) == (9, 2, 0x7F000000, 0, 3, 2, 0)
    assert (list(dims), list(strides), list(box), list(element_strides)) == ([128, 256], [256], [64, 128], [1, 1])
    assert library.cuTensorMapEncodeTiled.argtypes[2] is ctypes.c_uint32


def test_a_tensor_map_the_driver_rejects_is_a_named_error(library):
    library.functions["cuTensorMapEncodeTiled"] = Function(code=500)
    with pytest.raises(cuda.CudaError, match="CUDA_ERROR_NOT_FOUND") as error:
        cuda.DriverApi(library).encode_tiled_map(9, 0x7F000000, (128,), (), (64,), (1,), 0, 0, 0)
    assert error.value.code == 500


def test_tensor_maps_need_a_driver_that_encodes_them(library):
    with pytest.raises(ToolchainError, match=r"cuTensorMapEncodeTiled needs CUDA 12"):
        cuda.DriverApi(without(library, "cuTensorMapEncodeTiled")).encode_tiled_map(
            9, 0x7F000000, (128,), (), (64,), (1,), 0, 0, 0)
