# The runtime's work that needs no GPU: reading kernel parameters from PTX,
# binding and converting arguments, packing the parameter buffer, launch shapes,
# and the errors users get without PyCUDA.
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from phobos.run import runtime
from phobos.errors import LaunchError, ToolchainError
from phobos.run.runtime import PtxParam

ADD_PARAMS = [PtxParam("a_ptr", "u64"), PtxParam("b_ptr", "u64"), PtxParam("c_ptr", "u64"), PtxParam("n", "u32")]


class CudaArrayLike:
    """Device memory as torch and CuPy expose it."""

    def __init__(self, address: int):
        self.__cuda_array_interface__ = {"data": (address, False), "shape": (4,), "typestr": "<f4", "version": 3}


class GPUArrayLike:
    """Device memory as a pycuda GPUArray exposes it."""

    def __init__(self, address: int):
        self.gpudata = address


# --- reading parameters


def test_parameters_of_add_ptx(add_ptx_path):
    assert runtime.parse_entry_params(add_ptx_path.read_text()) == {"add": ADD_PARAMS}


def test_parameters_with_qualifiers_arrays_and_comments():
    ptx = """
    // .visible .entry commented_out(.param .u32 x)
    /* .entry also_commented(.param .u32 y) */
    .visible .entry first(
        .param .u64 .ptr.global.align 16 data,  // a pointer with qualifiers
        .param .align 8 .b8 by_value[16],
        .param .f32 scale
    ) { ret; }
    .entry second() { ret; }
    .func helper(.param .u32 z) { ret; }
    """
    assert runtime.parse_entry_params(ptx) == {
        "first": [PtxParam("data", "u64", align=16), PtxParam("by_value", "b8", 16, align=8), PtxParam("scale", "f32")],
        "second": [],
    }


def test_unreadable_parameter_is_a_launch_error():
    with pytest.raises(LaunchError, match=r"kernel 'k': cannot read parameter declaration '\.param \.pred p'"):
        runtime.parse_entry_params(".entry k(.param .pred p) { ret; }")


# --- binding arguments


def test_binding_arrays_pointers_and_numbers():
    a = np.ones(4, np.float32)
    bound = runtime.bind_arguments("add", ADD_PARAMS, [a, CudaArrayLike(0x1000), GPUArrayLike(0x2000), 7])
    assert [b.kind for b in bound] == ["array", "pointer", "pointer", "scalar"]
    assert bound[0].value is a
    assert (bound[1].value, bound[2].value) == (0x1000, 0x2000)
    assert bound[3].value == 7 and bound[3].value.dtype == np.uint32


def test_a_plain_int_is_a_device_address_for_a_64_bit_parameter():
    bound = runtime.bind_arguments("add", ADD_PARAMS, [0x7F0000001000, 0, 1, np.int64(3)])
    assert bound[0].kind == "scalar"
    assert bound[0].value == 0x7F0000001000 and bound[0].value.dtype == np.uint64
    assert bound[3].value.dtype == np.uint32


@pytest.mark.parametrize(
    "ptx_type, value, expected",
    [
        ("f32", 1.5, np.float32(1.5)),
        ("f32", 3, np.float32(3.0)),
        ("f64", np.float32(0.25), np.float64(0.25)),
        ("f16", 2, np.float16(2)),
        ("s32", -5, np.int32(-5)),
        ("s64", np.int8(-1), np.int64(-1)),
        ("u16", True, np.uint16(1)),
        ("b32", -1, np.uint32(0xFFFFFFFF)),
        ("b8", 255, np.uint8(255)),
    ],
)
def test_numbers_are_converted_to_the_declared_type(ptx_type, value, expected):
    (bound,) = runtime.bind_arguments("k", [PtxParam("x", ptx_type)], [value])
    assert bound.value.dtype == expected.dtype
    assert bound.value == expected


INTEGER_TYPES = ["u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "b8", "b16", "b32", "b64"]


def integer_range(ptx_type: str) -> tuple[int, int]:
    bits = int(ptx_type[1:])
    if ptx_type[0] == "u":
        return 0, 2**bits - 1
    if ptx_type[0] == "s":
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return -(2 ** (bits - 1)), 2**bits - 1  # b: either signedness, stored as its bits


@given(ptx_type=st.sampled_from(INTEGER_TYPES), data=st.data())
def test_integers_in_range_keep_their_bits(ptx_type, data):
    low, high = integer_range(ptx_type)
    value = data.draw(st.integers(low, high))
    (bound,) = runtime.bind_arguments("k", [PtxParam("x", ptx_type)], [value])
    bits = int(ptx_type[1:])
    assert int(bound.value) % 2**bits == value % 2**bits


@given(ptx_type=st.sampled_from(INTEGER_TYPES), data=st.data())
def test_integers_out_of_range_are_refused(ptx_type, data):
    low, high = integer_range(ptx_type)
    value = data.draw(st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1)))
    with pytest.raises(LaunchError, match=rf"parameter 'x' \(\.{ptx_type}\): {value} is out of range"):
        runtime.bind_arguments("k", [PtxParam("x", ptx_type)], [value])


@pytest.mark.parametrize(
    "args, message",
    [
        ([1, 2, 3], r"kernel 'add' takes 4 arguments \(a_ptr, b_ptr, c_ptr, n\), got 3"),
        ([1, 2, 3, 1.5], r"parameter 'n' \(\.u32\): takes an integer, got float 1\.5"),
        ([1, 2, 3, np.zeros(2)], r"parameter 'n' \(\.u32\): takes a number, got a numpy array \(float64, shape \(2,\)\)"),
        ([1, 2, 3, CudaArrayLike(8)], r"parameter 'n' \(\.u32\): takes a number"),
        ([1, 2, "c", 3], r"parameter 'c_ptr' \(\.u64\): cannot pass a str"),
        ([[1.0], 2, 3, 4], r"parameter 'a_ptr' \(\.u64\): cannot pass a list"),
        ([1, 2, 3, 1 + 2j], r"parameter 'n' \(\.u32\): cannot pass the complex number"),
    ],
)
def test_bad_arguments_name_the_parameter(args, message):
    with pytest.raises(LaunchError, match=message):
        runtime.bind_arguments("add", ADD_PARAMS, args)


def test_numbers_too_large_for_a_float_parameter_are_refused():
    with pytest.raises(LaunchError, match=r"parameter 'x' \(\.f32\): cannot convert int 1000+ to \.f32"):
        runtime.bind_arguments("k", [PtxParam("x", "f32")], [10**400])


def test_device_memory_that_refuses_its_address_is_a_launch_error():
    class RequiresGrad:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")

    with pytest.raises(LaunchError, match=r"parameter 'a_ptr' \(\.u64\): cannot take the device address .*requires grad"):
        runtime.bind_arguments("add", ADD_PARAMS, [RequiresGrad(), 0, 0, 1])


def test_by_value_array_parameters_take_bytes_of_their_size():
    params = [PtxParam("n", "u32"), PtxParam("s", "b8", 16, align=8)]
    bound = runtime.bind_arguments("k", params, [3, b"x" * 16])
    assert runtime.pack_parameters(bound, {}) == struct.pack("<I4x16s", 3, b"x" * 16)
    with pytest.raises(LaunchError, match=r"parameter 's' \(\.b8\[16\]\): needs 16 bytes, got 15"):
        runtime.bind_arguments("k", params, [3, b"x" * 15])
    with pytest.raises(LaunchError, match=r"parameter 's' \(\.b8\[16\]\): takes a TensorMap or 16 bytes, got int 7"):
        runtime.bind_arguments("k", params, [3, 7])


def test_natural_offsets_follow_the_declared_alignment_and_given_offsets_win():
    params = runtime.parse_entry_params(".entry k(.param .u32 n, .param .align 64 .b8 tmap[128]) { ret; }")["k"]
    assert runtime.natural_offsets(params) == [0, 64] and runtime.needs_driver_layout(params)
    assert not runtime.needs_driver_layout(ADD_PARAMS + [PtxParam("s", "b8", 32, align=16)])
    bound = runtime.bind_arguments("k", params, [1, bytes(range(128))])
    packed = runtime.pack_parameters(bound, {})
    assert len(packed) == 192 and packed[64:] == bytes(range(128)) and packed[4:64] == bytes(60)
    packed = runtime.pack_parameters(bound, {}, [0, 48])  # where ptxas puts the map for sm_90
    assert len(packed) == 176 and packed[48:] == bytes(range(128)) and packed[:4] == struct.pack("<I", 1)


# --- the parameter buffer


def test_parameters_are_packed_at_aligned_offsets():
    params = [PtxParam("n", "u32"), PtxParam("p", "u64"), PtxParam("h", "f16"), PtxParam("x", "f32")]
    bound = runtime.bind_arguments("k", params, [5, np.zeros(1), 1.0, 2.5])
    packed = runtime.pack_parameters(bound, {1: 0xABCDEF})
    assert packed == struct.pack("<I4xQe2xf", 5, 0xABCDEF, 1.0, 2.5)


def test_add_parameters_pack_like_a_c_struct():
    bound = runtime.bind_arguments("add", ADD_PARAMS, [np.zeros(1), 0x10, np.zeros(1), 3])
    assert runtime.pack_parameters(bound, {0: 0x20, 2: 0x30}) == struct.pack("<QQQI", 0x20, 0x10, 0x30, 3)


# --- launch shapes and copies back


@pytest.mark.parametrize(
    "grid, block, expected",
    [(4, 256, ((4, 1, 1), (256, 1, 1))), ((2, 3), [8, 8, 4], ((2, 3, 1), (8, 8, 4))), (np.int64(7), (32,), ((7, 1, 1), (32, 1, 1)))],
)
def test_launch_shapes_are_padded_to_three_dimensions(grid, block, expected):
    shape = runtime.launch_shape("k", grid, block)
    assert (shape.grid, shape.block, shape.shared_bytes) == (*expected, 0)


@pytest.mark.parametrize(
    "grid, block, shared, message",
    [
        (0, 32, 0, r"kernel 'k': grid must be 1 to 3 positive integers, got 0"),
        ((1, 1, 1, 1), 32, 0, "grid must be"),
        (1, (32, 1.5), 0, r"block must be 1 to 3 positive integers, got \(32, 1\.5\)"),
        (1, "32", 0, "block must be"),
        (1, 32, -1, r"shared_bytes must be a non-negative integer, got -1"),
    ],
)
def test_bad_launch_shapes(grid, block, shared, message):
    with pytest.raises(LaunchError, match=message):
        runtime.launch_shape("k", grid, block, shared)


def test_copy_back_defaults_to_every_writeable_array():
    read_only = np.zeros(2)
    read_only.flags.writeable = False
    bound = runtime.bind_arguments("add", ADD_PARAMS, [np.zeros(2), read_only, np.zeros(2), 2])
    assert runtime.copy_back_indices("add", bound, None) == [0, 2]
    assert runtime.copy_back_indices("add", bound, [2]) == [2]
    assert runtime.copy_back_indices("add", bound, []) == []


def test_copy_back_must_name_writeable_array_arguments():
    read_only = np.zeros(2)
    read_only.flags.writeable = False
    bound = runtime.bind_arguments("add", ADD_PARAMS, [np.zeros(2), read_only, 0x10, 2])
    with pytest.raises(LaunchError, match="copy_back index 3 is not a numpy array argument"):
        runtime.copy_back_indices("add", bound, [3])
    with pytest.raises(LaunchError, match=r"copy_back index 1 \(b_ptr\) is a read-only array"):
        runtime.copy_back_indices("add", bound, [1])
    with pytest.raises(LaunchError, match="copy_back must be argument indices"):
        runtime.copy_back_indices("add", bound, 0)


# --- without PyCUDA


@pytest.fixture
def without_pycuda(monkeypatch):
    real_find_spec = runtime.importlib.util.find_spec
    monkeypatch.setattr(runtime, "_loaded_driver", None)
    monkeypatch.setattr(
        runtime.importlib.util, "find_spec", lambda name, *rest: None if name == "pycuda" else real_find_spec(name, *rest)
    )


def test_gpu_available_says_pycuda_is_missing(without_pycuda):
    assert runtime.gpu_available() == (False, "PyCUDA is not installed: pip install 'phobos-tile[cuda]'")


def test_launch_without_pycuda_is_a_toolchain_error(without_pycuda, add_ptx_path):
    a = np.zeros(4, np.float32)
    with pytest.raises(ToolchainError, match=r"PyCUDA is not installed: pip install 'phobos-tile\[cuda\]'"):
        runtime.launch(add_ptx_path.read_text(), "add", 1, 4, [a, a, a, 4])


def test_bad_arguments_are_reported_before_looking_for_a_gpu(without_pycuda, add_ptx_path):
    with pytest.raises(LaunchError, match="takes 4 arguments"):
        runtime.launch(add_ptx_path.read_text(), "add", 1, 4, [])
    with pytest.raises(LaunchError, match=r"no kernel 'sub' in this PTX \(kernels: add\)"):
        runtime.launch(add_ptx_path.read_text(), "sub", 1, 4, [])
