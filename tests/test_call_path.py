# The documented call on device memory, on machines without a GPU: the real
# launcher, GPU backend and runtime over the stand-in driver of
# test_launcher_stand_in_gpu.  Checked here: calls are queued on the caller's
# stream and not waited for; the second call of a signature skips binding and
# tuning but launches the same kernel on the new addresses; every change of
# signature (dtype, shape, contiguity, device, argument kinds) goes back
# through the full binding with its messages; streams given or named by the
# tensors; CUDA graph capture; tensors on different devices.
from __future__ import annotations

import struct
import sys
import types

import numpy as np
import pytest

import phobos
from phobos.errors import LaunchError
from phobos.launch import binding, fastpath, launcher

from .launcher_fakes import ADD4, AXPY, random_vectors
from .test_launcher_stand_in_gpu import gpu  # noqa: F401 (a fixture)
from .test_runtime_stand_in_driver import StandInRecorder
from .test_runtime_stand_in_driver import driver as stand_in_driver  # noqa: F401 (a fixture)


class Device:
    """CuPy's `array.device`."""

    def __init__(self, index: int):
        self.id = index


class OnDevice:
    """Device memory of the stand-in driver, as CuPy and Numba expose it (`__cuda_array_interface__` v3)."""

    def __init__(self, driver, values: np.ndarray, stream: int | None = None, device: int | None = None,
                 strides=None, version: int = 3):
        self.allocation = driver.mem_alloc(max(values.nbytes, 4))
        driver.memory[int(self.allocation)][: values.nbytes] = values.tobytes()
        self.driver, self.dtype, self.shape = driver, values.dtype, values.shape
        self.__cuda_array_interface__ = {"shape": values.shape, "typestr": values.dtype.str, "strides": strides,
                                         "data": (int(self.allocation), False), "version": version,
                                         **({"stream": stream} if stream is not None else {})}
        if device is not None:
            self.device = Device(device)

    def get(self) -> np.ndarray:
        count = int(np.prod(self.shape))
        return np.frombuffer(self.driver.memory[int(self.allocation)], self.dtype, count).reshape(self.shape)


def on_device(driver, *arrays: np.ndarray, **options) -> list[OnDevice]:
    return [OnDevice(driver, array, **options) for array in arrays]


def add_inputs(driver, n: int, **options):
    a, b = random_vectors(n)
    return a, b, *on_device(driver, a, b, np.zeros(n, np.float32), **options)


def refuse_binding(monkeypatch) -> None:
    monkeypatch.setattr(launcher, "bind", lambda *args, **kwargs: pytest.fail("the prepared call bound again"))


def message(error: pytest.ExceptionInfo) -> str:
    return error.value.message


# --- asynchronous launches on the caller's stream


def test_device_memory_is_queued_on_the_stream_it_names_and_not_waited_for(gpu, monkeypatch):
    synchronized = []
    monkeypatch.setattr(gpu.Context, "synchronize", staticmethod(lambda: synchronized.append(True)))
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=512)
    a, b, da, db, dc = add_inputs(gpu, 3000, stream=0x5EED)
    add(da, db, dc)
    assert gpu.launches[-1]["stream"] == 0x5EED and gpu.launches[-1]["grid"] == (6, 1, 1)
    np.testing.assert_array_equal(dc.get(), a + b)
    assert synchronized == []  # queued, not waited for


def test_interfaces_without_a_stream_run_on_the_null_stream(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=512)
    add(*add_inputs(gpu, 100, version=2)[2:])
    assert gpu.launches[-1]["stream"] == 0


def test_numpy_arguments_still_wait_and_copy_back(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    a, b = random_vectors(1000)
    c = np.zeros_like(a)
    add(a, b, c)
    np.testing.assert_array_equal(c, a + b)
    assert all(allocation in gpu.freed for allocation in gpu.memory)  # copies freed: the call is over


# --- the prepared call of a signature


def test_the_second_call_of_a_signature_skips_binding_and_tuning(gpu, monkeypatch):
    add = phobos.kernel(ADD4, mode="gpu")
    add(*add_inputs(gpu, 5000)[2:])  # tunes on scratch copies, then launches
    config, launches = add.config, len(gpu.launches)
    refuse_binding(monkeypatch)
    a, b, da, db, dc = add_inputs(gpu, 5000, stream=7)
    add(da, db, dc)
    assert len(gpu.launches) == launches + 1
    assert gpu.launches[-1]["c"] == int(dc.allocation) and gpu.launches[-1]["stream"] == 7
    np.testing.assert_array_equal(dc.get(), a + b)
    assert add.config == config and add.grid == (-(-5000 // config["BLOCK"]), 1, 1)


def test_keywords_and_positions_are_signatures_of_their_own(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=128)
    a, b, da, db, dc = add_inputs(gpu, 300)
    add(da, db, dc)
    add(da, b=db, c=dc)
    add(c=dc, a=da, b=db)
    assert len(gpu.launches) == 3 and {launch["c"] for launch in gpu.launches} == {int(dc.allocation)}
    np.testing.assert_array_equal(dc.get(), a + b)


@pytest.mark.parametrize("change, expected", [
    (lambda driver: on_device(driver, np.zeros(999, np.float32))[0],
     "add: argument 'c': expected a 1-D f32 tensor [N] with N = 1000 (from 'a'), got float32 tests.OnDevice of shape "
     "(999,)"),
    (lambda driver: on_device(driver, np.zeros(1000, np.float64))[0],
     "add: argument 'c': expected a 1-D f32 tensor [N] with N = 1000 (from 'a'), got float64 tests.OnDevice of shape "
     "(1000,)"),
    (lambda driver: on_device(driver, np.zeros(1000, np.float32), strides=(0,))[0],
     "add: argument 'c': expected a 1-D f32 tensor [N] with N = 1000 (from 'a'), got a non-contiguous float32 "
     "tests.OnDevice of shape (1000,) with strides (0,); the kernel writes it, and its elements overlap (a zero or "
     "overlapping stride): pass a copy, e.g. np.ascontiguousarray(x) or x.contiguous()"),
    (lambda driver: "c",
     "add: argument 'c': expected a 1-D f32 tensor [N] with N = 1000 (from 'a'), got str 'c'"),
])
def test_a_changed_argument_in_the_tenth_call_is_caught_like_in_the_first(gpu, change, expected):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    da, db, dc = add_inputs(gpu, 1000)[2:]
    bad = change(gpu)
    with pytest.raises(LaunchError) as first:
        add(da, db, bad)
    for _ in range(9):
        add(da, db, dc)
    launches = len(gpu.launches)
    with pytest.raises(LaunchError) as tenth:
        add(da, db, bad)
    assert message(first) == message(tenth) == expected
    assert len(gpu.launches) == launches  # nothing was launched


def test_a_misaligned_view_is_a_new_signature(gpu, monkeypatch):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    da, db, dc = add_inputs(gpu, 64)[2:]
    add(da, db, dc)
    bound = []
    real_bind = binding.bind
    monkeypatch.setattr(launcher, "bind", lambda *args, **kwargs: bound.append(1) or real_bind(*args, **kwargs))
    shifted = OnDevice(gpu, np.zeros(64, np.float32))
    address = int(shifted.allocation) + 4
    gpu.memory[address] = gpu.memory[int(shifted.allocation)]
    shifted.__cuda_array_interface__ = {**shifted.__cuda_array_interface__, "data": (address, False)}
    add(da, db, shifted)
    assert bound == [1]


def test_scalars_are_converted_on_every_call_and_bad_ones_get_the_full_message(gpu, monkeypatch):
    axpy = phobos.kernel(AXPY, mode="gpu")
    launched = []
    monkeypatch.setattr(gpu, "module_from_buffer", lambda image: Recorder(launched))
    x, y = on_device(gpu, np.ones(200, np.float32), np.zeros(200, np.float32))
    axpy(x, y, 2.0, 3, True)
    bound = []
    real_bind = binding.bind
    monkeypatch.setattr(launcher, "bind", lambda *args, **kwargs: bound.append(1) or real_bind(*args, **kwargs))
    axpy(x, y, 0.5, -4, False)
    assert [values[2:] for values in launched] == [(2.0, 3, 1, 200), (0.5, -4, 0, 200)] and bound == []
    with pytest.raises(LaunchError) as error:
        axpy(x, y, 1.0, 2**31, True)
    assert message(error) == "axpy: argument 'offset': expected an i32 integer, got int 2147483648 " \
                             "(out of range [-2147483648, 2147483647])"
    with pytest.raises(LaunchError) as error:
        axpy(x, y, 1e39, 1, True)
    assert message(error) == "axpy: argument 'alpha': expected an f32 number, got float 1e+39 (out of range for f32)"
    assert bound == [1, 1]  # each went back to the full path, which reported it
    axpy(x, y, np.float64(0.25), np.int64(5), np.bool_(True))  # other scalar types: a signature of their own
    axpy(x, y, np.float64(0.75), np.int64(6), np.bool_(False))
    assert [values[2:] for values in launched[2:]] == [(0.25, 5, 1, 200), (0.75, 6, 0, 200)]
    assert len(launched) == 4


class Recorder:
    """A module whose one kernel records the parameter values it is launched with."""

    def __init__(self, launched: list):
        self.launched = launched
        self.attributes: dict = {}

    def get_function(self, name: str) -> "Recorder":
        return self

    def launch(self, grid, block, parameters: bytes, shared_size: int, stream: int) -> int:
        import struct
        self.launched.append(struct.unpack("<QQfiBxxxi", parameters))
        return 0


def test_an_empty_tensor_launches_nothing_on_the_prepared_path_too(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    empty = on_device(gpu, *(np.zeros(0, np.float32),) * 3)
    add(*empty)
    add(*empty)
    assert gpu.launches == [] and add.grid == (0, 1, 1)


# --- streams


def test_a_stream_argument_overrides_the_tensors(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    da, db, dc = add_inputs(gpu, 100, stream=5)[2:]

    class TorchStream:
        cuda_stream = 0xAB

    add(da, db, dc, stream=0x77)
    add(da, db, dc, stream=TorchStream())
    add(da, db, dc)
    assert [launch["stream"] for launch in gpu.launches] == [0x77, 0xAB, 5]


def test_a_stream_that_is_not_one_is_refused(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    with pytest.raises(LaunchError, match=r"stream: expected a CUDA stream \(a torch.cuda.Stream, .*got 'fast'"):
        add(*add_inputs(gpu, 100)[2:], stream="fast")


def test_a_stream_of_another_context_is_refused_naming_the_argument(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    gpu.api.stream_contexts[0x99] = 0xDEAD
    da, db, dc = add_inputs(gpu, 100)[2:]
    for _ in range(2):  # on the full path and on the prepared one
        with pytest.raises(LaunchError) as error:
            add(da, db, dc, stream=0x99)
        assert message(error).startswith("add: argument 'stream': the stream belongs to another CUDA context")
        add(da, db, dc)


def test_a_kernel_parameter_named_stream_takes_the_keyword(gpu):
    kernel = phobos.kernel("""
        kernel copy(x: tensor<f32>[N], stream: tensor<f32>[N]) {
            let base = program_id(0) * 64
            stream[base :+ 64] = x[base :+ 64]
        }""", mode="gpu")
    assert not kernel._kernel.stream_keyword


# --- CUDA graphs


def test_during_capture_a_prepared_signature_is_queued_on_the_capturing_stream(gpu, monkeypatch):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    da, db, dc = add_inputs(gpu, 100, stream=0xCA)[2:]
    add(da, db, dc)  # the warm-up
    gpu.api.capturing.add(0xCA)
    monkeypatch.setattr(gpu, "mem_alloc", lambda size: pytest.fail("allocated during capture"))
    add(da, db, dc)
    assert gpu.launches[-1]["stream"] == 0xCA


def test_during_capture_numpy_arguments_and_first_calls_are_clear_errors(gpu, monkeypatch):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    torch = types.ModuleType("torch")  # inside torch.cuda.graph(...): torch's current stream captures
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: True, is_current_stream_capturing=lambda: True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    a, b = random_vectors(100)
    with pytest.raises(LaunchError) as error:
        add(a, b, np.zeros_like(a))
    assert message(error).startswith("add: argument 'a' is host memory (ndarray), which would be copied to the GPU "
                                     "and back; that is not possible while a CUDA graph is being captured")
    torch.cuda.is_current_stream_capturing = lambda: False
    gpu.api.capturing.add(0xCA)  # a stream captured by someone else (CuPy, say)
    with pytest.raises(LaunchError) as error:
        add(*add_inputs(gpu, 100, stream=0xCA)[2:])
    assert "first call with these argument types, shapes and devices while a CUDA graph is being captured" \
        in message(error)
    assert gpu.launches == []


def test_the_null_stream_is_never_asked_whether_it_captures(gpu, monkeypatch):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    monkeypatch.setattr(gpu.api, "stream_capturing", lambda stream: pytest.fail(f"asked about stream {stream}"))
    add(*add_inputs(gpu, 100, version=2)[2:])  # the NULL stream
    assert gpu.launches[-1]["stream"] == 0


# --- devices


def test_tensors_on_different_devices_are_refused_naming_them(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    a, b = random_vectors(10)
    da, dc = on_device(gpu, a, np.zeros(10, np.float32), device=0)
    (db,) = on_device(gpu, b, device=1)
    with pytest.raises(LaunchError) as error:
        add(da, db, dc)
    assert message(error) == ("add: argument 'b' is on cuda:1, but 'a' is on cuda:0; the tensors of one call must "
                              "be on one device")


# --- torch tensors (a stand-in with torch's attribute names)


@pytest.fixture
def fake_torch(monkeypatch):
    """A `torch` module whose current stream is `torch.current + device`."""
    torch = types.ModuleType("torch")
    torch.current = 0x70
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: torch.current + device)
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def torch_tensor(driver, values: np.ndarray):
    """A CUDA tensor with torch's attributes, in a class whose module is `torch`."""
    allocation = driver.mem_alloc(max(values.nbytes, 4))
    driver.memory[int(allocation)][: values.nbytes] = values.tobytes()
    return FakeTensor(allocation, values.dtype, values.shape)


class FakeTensor:
    def __init__(self, allocation, dtype, shape):
        self.allocation, self.dtype_np, self.shape = allocation, dtype, shape
        self.dtype = f"torch.{np.dtype(dtype).name}"
        self.device = "cuda:0"
        self.is_cuda = True

    def data_ptr(self) -> int:
        return int(self.allocation)

    def get_device(self) -> int:
        return 0

    def is_contiguous(self) -> bool:
        return True


FakeTensor.__module__ = "torch"


def test_torch_tensors_run_on_torchs_current_stream(gpu, fake_torch, monkeypatch):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    a, b = random_vectors(500)
    ta, tb, tc = (torch_tensor(gpu, x) for x in (a, b, np.zeros(500, np.float32)))
    add(ta, tb, tc)
    refuse_binding(monkeypatch)
    fake_torch.current = 0x90  # `with torch.cuda.stream(s)`
    add(ta, tb, tc)
    assert [launch["stream"] for launch in gpu.launches] == [0x70, 0x90]
    assert np.array_equal(np.frombuffer(gpu.memory[int(tc.allocation)], np.float32, 500), a + b)


# --- DLPack (JAX arrays and others): a numpy array's capsule, presented as GPU memory


class DlpackOnGpu:
    """An array seen only through DLPack, claiming to be on CUDA device `device` (its capsule is numpy's)."""

    def __init__(self, array: np.ndarray, device: int = 0, device_type: int = 2):
        self.array, self.device, self.device_type = array, device, device_type

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return (self.device_type, self.device)


def test_dlpack_arrays_are_read_from_their_capsule():
    from .launcher_fakes import FakeGpu
    gpu = FakeGpu()
    add = phobos.kernel(ADD4, mode=gpu).configure(BLOCK=128)
    a, b, c = (np.arange(300, dtype=np.float32) for _ in range(3))
    add(DlpackOnGpu(a), DlpackOnGpu(b), DlpackOnGpu(c))
    (launch,) = gpu.runs
    tensors = launch.call.tensors
    assert tensors["a"].pointer == a.ctypes.data and tensors["b"].pointer == b.ctypes.data
    assert tensors["c"].shape == (300,) and tensors["c"].device == 0 and launch.call.sizes == {"N": 300}


def test_dlpack_offsets_dtypes_and_strides_are_checked():
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=128)
    a = np.zeros(300, np.float32)
    with pytest.raises(LaunchError) as error:
        add(DlpackOnGpu(a), DlpackOnGpu(a), DlpackOnGpu(np.zeros(300, np.float64)))
    assert message(error) == ("add: argument 'c': expected a 1-D f32 tensor [N] with N = 300 (from 'a'), got "
                              "float64 tests.DlpackOnGpu of shape (300,) on cuda:0")
    with pytest.raises(LaunchError, match=r"got a non-contiguous float32 tests.DlpackOnGpu of shape \(300,\) on "
                                          r"cuda:0 with strides \(-1,\); kernels take strides of 0 or more"):
        add(DlpackOnGpu(a), DlpackOnGpu(a), DlpackOnGpu(np.zeros(300, np.float32)[::-1]))
    view = binding.tensor_view(DlpackOnGpu(np.zeros(400, np.float32)[100:]))
    assert view.pointer % 4 == 0 and view.shape == (300,)
    view = binding.tensor_view(DlpackOnGpu(np.zeros(600, np.float32)[::2]))
    assert not view.contiguous and view.strides == (2,)  # a strided view, taken as it lies


def test_a_dlpack_array_in_host_memory_is_refused_naming_the_argument():
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=128)
    a = np.zeros(300, np.float32)
    with pytest.raises(LaunchError) as error:
        add(a, a, DlpackOnGpu(a, device_type=1))
    assert message(error) == ("add: argument 'c': expected a 1-D f32 tensor [N] with N = 300 (from 'a'), got a "
                              "tests.DlpackOnGpu in host memory (cpu) (kernels read DLPack arrays where they lie; put "
                              "it on the GPU, or pass np.from_dlpack(x) to have it copied)")


def test_prepared_calls_are_bounded(gpu, monkeypatch):
    from phobos.launch import fastpath
    monkeypatch.setattr(fastpath, "MAX_PREPARED", 2)
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=128)
    for n in (100, 200, 300):
        add(*add_inputs(gpu, n)[2:])
    assert [key[1][0][2] for key in add._variant.fast] == [(200,), (300,)]  # the oldest went


def test_a_grid_function_is_asked_at_every_call_and_its_calls_are_prepared(gpu, monkeypatch):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=128)
    asked, blocks = [], {"count": 3}
    grid = lambda config, sizes: asked.append(dict(sizes)) or (blocks["count"],)  # noqa: E731
    bound, real_bind = [], launcher.bind
    monkeypatch.setattr(launcher, "bind", lambda *args, **kwargs: bound.append(1) or real_bind(*args, **kwargs))
    a, b, da, db, dc = add_inputs(gpu, 300)
    add[grid](da, db, dc)
    add[grid](da, db, dc)  # prepared: not bound again, the function asked again
    assert len(bound) == 1 and len(gpu.launches) == 2 and gpu.launches[-1]["grid"] == (3, 1, 1)
    assert asked[-1] == {"N": 300}
    np.testing.assert_array_equal(dc.get(), a + b)
    blocks["count"] = 2  # another answer: the full path, on the new grid
    add[grid](da, db, dc)
    assert len(bound) == 2 and gpu.launches[-1]["grid"] == (2, 1, 1) and add.grid == (2, 1, 1)
    add[grid](da, db, dc)
    assert len(bound) == 2 and gpu.launches[-1]["grid"] == (2, 1, 1)
    blocks["count"] = "many"  # a bad answer on a prepared signature gets the full path's message
    with pytest.raises(LaunchError, match=r"the grid function returned \('many',\)"):
        add[grid](da, db, dc)
    assert len(gpu.launches) == 4


def test_grid_functions_made_at_every_call_do_not_pile_up(gpu, monkeypatch):
    monkeypatch.setattr(launcher, "MAX_GRID_FUNCTIONS", 3)
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=128)
    inputs = add_inputs(gpu, 300)[2:]
    for _ in range(5):
        add[lambda config, sizes: (3,)](*inputs)
    assert sum(callable(key[1]) for key in add._kernel._variants) == 3 and len(gpu.launches) == 5


# --- the most recent signature, written out as one function (fastpath.direct_call)


def test_the_most_recent_signature_is_called_without_probing(gpu, fake_torch, monkeypatch):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    a, b = random_vectors(500)
    ta, tb, tc = (torch_tensor(gpu, x) for x in (a, b, np.zeros(500, np.float32)))
    add(ta, tb, tc)
    refuse_binding(monkeypatch)
    real_probe = launcher.fastpath.probe
    monkeypatch.setattr(launcher.fastpath, "probe", lambda *args: pytest.fail("the direct call probed"))
    fake_torch.current = 0x90
    add(ta, tb, tc)
    assert gpu.launches[-1]["stream"] == 0x90 and gpu.launches[-1]["c"] == int(tc.allocation)
    probed = []
    monkeypatch.setattr(launcher.fastpath, "probe", lambda *args: probed.append(1) or real_probe(*args))
    monkeypatch.setattr(launcher, "bind", lambda *args, **kwargs: (_ for _ in ()).throw(LaunchError("bound")))
    for changed in (lambda t: setattr(t, "dtype", "torch.float64"), lambda t: setattr(t, "shape", (499,)),
                    lambda t: setattr(t, "is_contiguous", lambda: False), lambda t: setattr(t, "is_cuda", False),
                    lambda t: setattr(t, "get_device", lambda: 1)):
        other = torch_tensor(gpu, np.zeros(500, np.float32))
        changed(other)
        with pytest.raises(LaunchError, match="bound"):  # not this signature: probed, then bound
            add(ta, tb, other)
    assert len(probed) == 5 and len(gpu.launches) == 2


@pytest.fixture
def cpu_torch_as_cuda(monkeypatch):
    """Real torch, its CPU tensors answering as CUDA ones on device 0 (their attributes and torch's own
    guard are torch's), on torch's current stream 0x70."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.Tensor, "is_cuda", True, raising=False)
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0x70, raising=False)
    return torch


def record_launches(driver, monkeypatch) -> None:
    """Kernels that record their parameters instead of adding (torch's CPU memory is not the driver's)."""
    recording = types.SimpleNamespace(get_function=lambda name: StandInRecorder(driver, name))
    monkeypatch.setattr(driver, "module_from_buffer", lambda image: recording)


def launched_pointers(driver) -> tuple[int, int, int]:
    return struct.unpack_from("<QQQ", driver.launches[-1]["parameters"])


def test_torch_tensors_are_checked_by_torchs_own_guard_and_each_attribute_where_it_refuses(
        gpu, cpu_torch_as_cuda, monkeypatch):
    torch = cpu_torch_as_cuda
    if not hasattr(torch._C._dynamo.guards, "TensorGuards"):
        pytest.skip("this torch has no TensorGuards")
    record_launches(gpu, monkeypatch)
    plus = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    plus(torch.zeros(500), torch.zeros(500), torch.zeros(500))
    direct = plus._variant.direct
    assert "tensor_check" in direct.__globals__  # written out with torch's check
    refuse_binding(monkeypatch)
    monkeypatch.setattr(launcher.fastpath, "probe", lambda *args: pytest.fail("the direct call probed"))
    a, b, c = torch.zeros(500), torch.zeros(500), torch.zeros(500)
    plus(a, b, c)  # torch's check passes
    assert launched_pointers(gpu) == (a.data_ptr(), b.data_ptr(), c.data_ptr())
    # torch's check refuses these, each attribute's accepts them: still the direct call
    inputs = (torch.zeros(500, requires_grad=True), b, c)
    assert not direct.__globals__["tensor_check"](*inputs)
    plus(*inputs)
    assert launched_pointers(gpu) == tuple(tensor.data_ptr() for tensor in inputs)
    with torch.inference_mode():
        assert not direct.__globals__["tensor_check"](a, b, c)
        plus(c, b, a)
    assert launched_pointers(gpu) == (c.data_ptr(), b.data_ptr(), a.data_ptr())
    launches = len(gpu.launches)
    monkeypatch.setattr(launcher, "bind", lambda *args, **kwargs: (_ for _ in ()).throw(LaunchError("bound")))
    monkeypatch.setattr(launcher.fastpath, "probe", lambda *args: (_ for _ in ()).throw(fastpath.Unprobed))
    for other in (torch.zeros(500, dtype=torch.float64), torch.zeros(499), torch.zeros(1000)[::2],
                  torch.zeros(501)[1:], "c"):  # another dtype, shape, a strided view, misaligned, not a tensor
        with pytest.raises(LaunchError, match="bound"):  # not this signature: the full path
            plus(a, b, other)
    assert len(gpu.launches) == launches


def test_torchs_check_compares_what_the_signature_holds(cpu_torch_as_cuda):
    torch = cpu_torch_as_cuda
    a, b = torch.zeros(4, 6), torch.zeros(6)
    parts = fastpath.probe([a, 2.0, b], lambda address: None)[0]
    check = fastpath.torch_tensor_check([a, 2.0, b], parts)
    if check is None:
        pytest.skip("this torch has no TensorGuards")
    assert check.indices == (0, 2)  # the scalar is not torch's to check
    assert check.check(torch.ones(4, 6), torch.ones(6))
    for other in (torch.zeros(4, 6, dtype=torch.float16), torch.zeros(6, 4), torch.zeros(6, 4).t(),
                  torch.zeros(4, 6, requires_grad=True), torch.zeros(4, 6, device="meta"), b):
        assert not check.check(other, b)
    assert fastpath.torch_tensor_check([2.0], fastpath.probe([2.0], lambda address: None)[0]) is None


def test_without_torchs_guard_each_attribute_is_checked(gpu, fake_torch, monkeypatch):
    """A torch without TensorGuards (the fake one has none): the direct call reads each attribute."""
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    ta, tb, tc = (torch_tensor(gpu, x) for x in (*random_vectors(500), np.zeros(500, np.float32)))
    add(ta, tb, tc)
    assert "tensor_check" not in add._variant.direct.__globals__


def test_the_overlap_test_is_the_overlap_of_the_address_ranges():
    for bytes_i, bytes_j in ((1, 1), (4, 8), (8, 4), (8, 8), (8, 12), (12, 8)):
        overlaps = fastpath.alias_test([(0, 1, bytes_i, bytes_j)])
        for p_i in range(0x7F00_0000_0000, 0x7F00_0000_0000 + 32):
            for p_j in range(0x7F00_0000_0000, 0x7F00_0000_0000 + 32):
                assert overlaps([p_i, p_j]) == bool(set(range(p_i, p_i + bytes_i)) & set(range(p_j, p_j + bytes_j)))


# --- in-place calls: a tensor the kernel reads overlaps one it writes


def test_an_in_place_call_runs_a_kernel_without_read_only_cache_loads(gpu, monkeypatch):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    a, b, da, db, dc = add_inputs(gpu, 1000)
    add(da, db, da)  # a = a + b, in place
    assert add.compiled.read_only_cache is False and ".nc" not in add.ptx
    np.testing.assert_array_equal(da.get(), a + b)
    add(da, db, dc)
    assert add.compiled.read_only_cache is True and "ld.global.nc" in add.ptx
    refuse_binding(monkeypatch)  # both aliasings of the signature are prepared now
    held = a + b
    for target in (da, dc, da, dc):
        add(da, db, target)
        assert add.compiled.read_only_cache is (target is dc)
        held = held + b if target is da else held
    np.testing.assert_array_equal(da.get(), held)
    np.testing.assert_array_equal(dc.get(), held + b)
    assert gpu.launches[-1]["c"] == int(dc.allocation)


def test_overlap_is_by_address_range_and_only_between_a_read_and_a_written_tensor(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    a, b, da, db, dc = add_inputs(gpu, 1000)
    add(da, da, dc)  # a + a: both read, nothing written overlaps
    assert add.compiled.read_only_cache is True
    tail = OnDevice(gpu, np.zeros(1000, np.float32))
    start = int(da.allocation) + 4 * 999  # c starts at a's last element
    gpu.memory[start] = gpu.memory[int(da.allocation)]
    tail.__cuda_array_interface__ = {**tail.__cuda_array_interface__, "data": (start, False)}
    add(da, db, tail)
    assert add.compiled.read_only_cache is False


def test_in_place_calls_in_the_emulator():
    """The emulator reports ld.global.nc of memory the kernel writes; the in-place call gets code without it."""
    from phobos.compiler import compile
    from phobos.errors import ExecutionError
    from phobos.run import emulator
    x, y = random_vectors(300)
    kernel = compile(ADD4, config={"BLOCK": 128})
    with pytest.raises(ExecutionError, match="read with ld.global.nc and written by this kernel"):
        inout = x.copy()
        emulator.launch(kernel.ptx, "add", (3,), (kernel.threads,), [inout, y, inout, 300])
    add = phobos.kernel(ADD4, mode="emulate").configure(BLOCK=128)
    inout = x.copy()
    add(inout, y, inout)
    np.testing.assert_array_equal(inout, x + y)
    assert add.compiled.read_only_cache is False
    out = np.zeros_like(x)
    add(x, y, out)
    np.testing.assert_array_equal(out, x + y)
    assert add.compiled.read_only_cache is True
