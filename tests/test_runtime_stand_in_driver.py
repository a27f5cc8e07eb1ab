# The runtime's path through PyCUDA and the driver calls of phobos.run.cuda, on
# machines without a GPU: a stand-in for pycuda.driver keeps "device memory" in
# host buffers, and a stand-in for phobos.run.cuda's DriverApi loads modules
# and runs the vector add of handwritten_ptx/add.ptx by reading the packed
# parameter buffer, so these tests check what the runtime hands the driver
# (addresses, sizes, the parameter layout, the launch shape, the stream) and
# what it does with the results.
from __future__ import annotations

import _thread
import ctypes
import importlib.machinery
import struct
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest

from phobos.run import cuda, runtime
from phobos.errors import LaunchError, PtxasError
from phobos.run.tensor_map import TensorMap

from .emulator_support import PTXAS, cubin_parameter_layout

#: CUresult codes and names the stand-in driver reports.
ERRORS = {1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"),
          201: ("CUDA_ERROR_INVALID_CONTEXT", "invalid device context"),
          218: ("CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"),
          700: ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered")}


class StandInDriver(types.ModuleType):
    """Just enough of pycuda.driver for phobos.run.runtime, with the add kernel built in."""

    class Error(Exception):
        pass

    class function_attribute:  # named as in pycuda
        MAX_DYNAMIC_SHARED_SIZE_BYTES = "MAX_DYNAMIC_SHARED_SIZE_BYTES"

    def __init__(self):
        super().__init__("pycuda.driver")
        self.memory: dict[int, bytearray] = {}
        self.freed: list[int] = []
        self.launches: list[dict] = []
        self.layouts: dict[str, list[tuple[int, int]]] = {}  # kernel -> (offset, size) of its parameters
        self.asked: list[str] = []  # kernels whose parameter offsets the runtime asked for
        self.tensor_maps: list[tuple] = []  # the arguments of each cuTensorMapEncodeTiled
        self.next_address = 0x10000
        self.pushed_in: list[str] = []  # the threads that pushed a context, in order
        self.popped_in: list[str] = []  # ... and popped one
        driver = self

        class DeviceAllocation:
            def __init__(self, size: int):
                self.address = driver.next_address
                driver.next_address += (size + 255) // 256 * 256
                driver.memory[self.address] = bytearray(size)

            def __int__(self) -> int:
                return self.address

            def free(self) -> None:
                driver.freed.append(self.address)

        class Context:
            @staticmethod
            def synchronize() -> None:
                pass

            def push(self) -> None:
                driver.pushed_in.append(threading.current_thread().name)

            @staticmethod
            def pop() -> None:
                driver.popped_in.append(threading.current_thread().name)

        class Device:
            def __init__(self, ordinal: int):
                assert ordinal == 0

            @staticmethod
            def count() -> int:
                return 1

            def name(self) -> str:
                return "Stand-in GPU"

            def retain_primary_context(self) -> Context:
                return Context()

        class Event:
            clock = 0.0
            finishes = True  # what query() reports; False: a kernel that never ends

            def record(self) -> None:
                self.time = Event.clock

            def query(self) -> bool:
                return Event.finishes

            def synchronize(self) -> None:
                pass

            def time_till(self, other: "Event") -> float:
                return other.time - self.time

        self.DeviceAllocation, self.Context, self.Device, self.Event = DeviceAllocation, Context, Device, Event

    def init(self) -> None:
        pass

    def mem_alloc(self, size: int):
        return self.DeviceAllocation(size)

    def memcpy_htod(self, allocation, array: np.ndarray) -> None:
        self.memory[int(allocation)][:] = array.tobytes()

    def memcpy_dtoh(self, array: np.ndarray, allocation) -> None:
        assert array.flags.c_contiguous
        array.view(np.uint8).reshape(-1)[:] = np.frombuffer(self.memory[int(allocation)], np.uint8)

    def module_from_buffer(self, image: bytes):
        assert image.endswith(b"\0") or image.startswith(b"\x7fELF")  # PTX text, or a cubin
        return StandInModule(self)

    def floats_at(self, address: int, count: int) -> np.ndarray:
        return np.frombuffer(self.memory[address], np.float32, count)


class StandInModule:
    def __init__(self, driver: StandInDriver):
        self.driver = driver

    def get_function(self, name: str):
        return StandInAdd(self.driver) if name == "add" else StandInRecorder(self.driver, name)


class StandInAdd:
    """The add kernel: c[i] = a[i] + b[i] for i < n, run on the stand-in memory."""

    def __init__(self, driver: StandInDriver):
        self.driver = driver
        self.attributes: dict[str, int] = {}

    def launch(self, grid, block, parameters: bytes, shared_size: int, stream: int) -> int:
        """cuLaunchKernel: the CUresult."""
        assert len(parameters) == 28
        if block[0] > 1024:
            return 1
        a, b, c, n = struct.unpack("<QQQI", parameters)
        self.driver.launches.append(dict(grid=grid, block=block, shared=shared_size, attributes=dict(self.attributes),
                                         stream=stream))
        self.driver.Event.clock += 0.5  # every launch takes half a millisecond of GPU time
        count = min(n, grid[0] * block[0])
        result = self.driver.floats_at(a, count) + self.driver.floats_at(b, count)
        self.driver.memory[c][: 4 * count] = result.tobytes()
        return 0


class StandInRecorder(StandInAdd):
    """Any other kernel: records its parameter buffer; its parameter offsets are `driver.layouts[name]`."""

    def __init__(self, driver: StandInDriver, name: str):
        super().__init__(driver)
        self.name = name

    def launch(self, grid, block, parameters: bytes, shared_size: int, stream: int) -> int:
        self.driver.launches.append(dict(grid=grid, block=block, shared=shared_size, parameters=parameters))
        return 0


class StandInApi:
    """phobos.run.cuda's DriverApi over the stand-in driver: modules, functions, launches, streams, contexts."""

    def __init__(self, driver: StandInDriver):
        self.driver = driver
        self.handles: dict[int, object] = {}
        self.capturing: set[int] = set()  # streams being captured into a graph
        self.stream_contexts: dict[int, int] = {}  # streams of other contexts than the primary one
        self.devices = 1
        self.context = self.primary_context(0)

    def _handle(self, thing: object) -> int:
        handle = 0x1000 + len(self.handles)
        self.handles[handle] = thing
        return handle

    def error(self, code: int, log: str = "") -> cuda.CudaError:
        return cuda.CudaError(code, *ERRORS[code], log)

    def load_module(self, image: bytes) -> int:
        if b"bogus" in image:
            raise self.error(218, "ptxas fatal: Unresolved extern function")
        return self._handle(self.driver.module_from_buffer(image))

    def get_function(self, module: int, name: str) -> int:
        return self._handle(self.handles[module].get_function(name))

    def set_max_dynamic_shared(self, function: int, nbytes: int) -> None:
        self.handles[function].attributes["MAX_DYNAMIC_SHARED_SIZE_BYTES"] = nbytes

    def parameter_info(self, function: int, count: int) -> list[tuple[int, int]]:
        self.driver.asked.append(self.handles[function].name)
        return self.driver.layouts[self.handles[function].name]

    def launcher(self, function, grid, block, shared_bytes, size) -> "StandInLauncher":
        return StandInLauncher(self.handles[function], grid, block, shared_bytes, size)

    def stream_capturing(self, stream: int) -> bool:
        return stream in self.capturing

    def stream_context(self, stream: int) -> int:
        return self.stream_contexts.get(stream, self.primary_context(0))

    def pointer_device(self, address: int) -> int | None:
        return 0

    def device_count(self) -> int:
        return self.devices

    def current_context(self) -> int:
        return self.context

    def primary_context(self, device: int) -> int:
        return 0xC0 + device

    def push_context(self, context: int) -> None:
        self.context = context

    def pop_context(self) -> None:
        self.context = self.primary_context(0)

    def encode_tiled_map(self, *arguments) -> bytes:
        """Records the call; the first map encodes to 0x1234 and zeros, later ones are refused."""
        self.driver.tensor_maps.append(arguments)
        if len(self.driver.tensor_maps) > 1:
            raise self.error(1)
        return struct.pack("<Q", 0x1234).ljust(128, b"\0")


class StandInLauncher:
    """cuda.Launcher for a stand-in kernel: reads the stream and parameters packed in its buffer at each launch."""

    def __init__(self, kernel, grid, block, shared_bytes, size):
        self.kernel, self.grid, self.block, self.shared_bytes = kernel, grid, block, shared_bytes
        self.buffer = ctypes.create_string_buffer(cuda.PARAMS_OFFSET + max(size, 1))
        self.size = size
        self.lock = threading.Lock()

    def start(self) -> int:
        stream = struct.unpack_from("<Q", self.buffer, cuda.STREAM_OFFSET)[0]
        parameters = self.buffer.raw[cuda.PARAMS_OFFSET:cuda.PARAMS_OFFSET + self.size]
        return self.kernel.launch(self.grid, self.block, parameters, self.shared_bytes, stream)

    def queue(self, stream: int) -> int:
        struct.pack_into("<Q", self.buffer, cuda.STREAM_OFFSET, stream)
        return self.start()


@pytest.fixture
def driver(monkeypatch) -> StandInDriver:
    stand_in = StandInDriver()
    package = types.ModuleType("pycuda")
    package.__spec__ = importlib.machinery.ModuleSpec("pycuda", None)
    package.driver = stand_in
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", stand_in)
    monkeypatch.setattr(runtime, "_loaded_driver", None)
    monkeypatch.setattr(runtime, "_this_thread", threading.local())
    monkeypatch.setattr(runtime, "_modules", {})
    monkeypatch.setattr(runtime.atexit, "register", lambda *args: None)
    stand_in.api = StandInApi(stand_in)
    monkeypatch.setattr(cuda, "_api", stand_in.api)
    runtime.device_count.cache_clear()
    runtime.primary_context.cache_clear()
    yield stand_in
    runtime.device_count.cache_clear()
    runtime.primary_context.cache_clear()


@pytest.fixture
def add_ptx(add_ptx_path) -> str:
    return add_ptx_path.read_text()


def inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    return rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)


def test_launch_with_a_timeout_waits_for_the_kernel(driver, add_ptx):
    a, b = inputs(100)
    c = np.zeros(100, np.float32)
    runtime.launch(add_ptx, "add", 1, 128, [a, b, c, 100], timeout_s=5)
    np.testing.assert_array_equal(c, a + b)


def test_a_kernel_that_never_finishes_is_a_timeout_not_a_hang(driver, add_ptx):
    a, b = inputs(8)
    driver.Event.finishes = False
    with pytest.raises(runtime.GpuTimeout, match=r"kernel 'add' \(grid \(1, 1, 1\).*did not finish within 0.05 s: "
                                                 r"it is probably deadlocked"):
        runtime.launch(add_ptx, "add", 1, 8, [a, b, np.zeros(8, np.float32), 8], timeout_s=0.05)


def test_gpu_available_with_a_driver(driver):
    assert runtime.gpu_available() == (True, "Stand-in GPU")


def test_launch_copies_arrays_there_and_back_and_frees_them(driver, add_ptx):
    a, b = inputs(300)
    c = np.zeros(300, np.float32)
    runtime.launch(add_ptx, "add", 2, 256, [a, b, c, 300])
    np.testing.assert_array_equal(c, a + b)
    assert driver.launches == [dict(grid=(2, 1, 1), block=(256, 1, 1), shared=0, attributes={}, stream=0)]
    assert sorted(driver.freed) == sorted(driver.memory)


def test_inputs_are_not_changed_and_copy_back_can_be_limited(driver, add_ptx):
    a, b = inputs(100)
    a_before = a.copy()
    c = np.zeros(100, np.float32)
    runtime.launch(add_ptx, "add", 1, 128, [a, b, c, 100], copy_back=[])
    assert not c.any()
    np.testing.assert_array_equal(a, a_before)


def test_strided_arrays_are_copied_back_in_place(driver, add_ptx):
    a, b = inputs(50)
    storage = np.zeros(100, np.float32)
    runtime.launch(add_ptx, "add", 1, 64, [a, b, storage[::2], 50])
    np.testing.assert_array_equal(storage[::2], a + b)
    assert not storage[1::2].any()


def test_device_memory_is_passed_by_address(driver, add_ptx):
    a, b = inputs(10)
    on_device = [driver.mem_alloc(40) for _ in range(3)]
    driver.memcpy_htod(on_device[0], a)
    driver.memcpy_htod(on_device[1], b)

    class Tensor:  # as torch and CuPy expose device memory
        __cuda_array_interface__ = {"data": (int(on_device[1]), False)}

    runtime.launch(add_ptx, "add", 1, 32, [on_device[0], Tensor(), int(on_device[2]), 10])
    np.testing.assert_array_equal(driver.floats_at(int(on_device[2]), 10), a + b)
    assert driver.freed == []  # the runtime frees only its own copies


def test_large_dynamic_shared_memory_is_opted_into(driver, add_ptx):
    a, b = inputs(4)
    runtime.launch(add_ptx, "add", 1, 4, [a, b, np.zeros(4, np.float32), 4], shared_bytes=100_000)
    runtime.launch(add_ptx, "add", 1, 4, [a, b, np.zeros(4, np.float32), 4], shared_bytes=1024)
    first, second = driver.launches
    assert first["shared"] == 100_000
    assert first["attributes"] == {"MAX_DYNAMIC_SHARED_SIZE_BYTES": 100_000}
    assert second["shared"] == 1024


def test_driver_errors_become_launch_errors_with_the_shape(driver, add_ptx):
    a, b = inputs(4)
    with pytest.raises(LaunchError, match=r"kernel 'add' failed \(grid \(1, 1, 1\), block \(2048, 1, 1\), 0 B .*invalid"):
        runtime.launch(add_ptx, "add", 1, 2048, [a, b, np.zeros(4, np.float32), 4])
    assert sorted(driver.freed) == sorted(driver.memory)


def test_ptx_rejected_by_the_driver_is_a_ptxas_error(driver):
    with pytest.raises(PtxasError, match="the CUDA driver rejected the PTX: .*JIT compilation failed\nptxas fatal"):
        runtime.load_module(".version 7.8\n.target sm_75\n.visible .entry add() { bogus; }\n")


def test_modules_are_cached_by_text(driver, add_ptx):
    assert runtime.load_module(add_ptx) is runtime.load_module(add_ptx)
    assert runtime.load_module(add_ptx + "\n") is not runtime.load_module(add_ptx)


def test_time_launch_is_the_median_of_event_timings(driver, add_ptx):
    a, b = inputs(8)
    c = np.zeros(8, np.float32)
    assert runtime.time_launch(add_ptx, "add", 1, 8, [a, b, c, 8], warmup=2, repeat=5) == pytest.approx(0.5)
    assert len(driver.launches) == 2 + 1 + 5 * 2  # warm-up, the call that sizes the samples, 2 calls per sample
    assert not c.any()  # timing does not copy back


def test_a_call_of_a_millisecond_or_more_is_its_own_first_sample(driver, add_ptx, monkeypatch):
    monkeypatch.setattr(runtime, "MIN_SAMPLE_MS", 0.5)  # the stand-in's launches take 0.5 ms
    a, b = inputs(8)
    c = np.zeros(8, np.float32)
    assert runtime.time_launch(add_ptx, "add", 1, 8, [a, b, c, 8], warmup=1, repeat=1) == pytest.approx(0.5)
    assert len(driver.launches) == 1 + 1  # warm-up, and the call that sized the samples, which is the sample
    assert runtime.time_launch(add_ptx, "add", 1, 8, [a, b, c, 8], warmup=2, repeat=5) == pytest.approx(0.5)
    assert len(driver.launches) == 2 + 2 + 5


def test_time_launch_needs_at_least_one_timed_run(driver, add_ptx):
    with pytest.raises(LaunchError, match="need warmup >= 0 and repeat >= 1"):
        runtime.time_launch(add_ptx, "add", 1, 8, [], repeat=0)


def test_a_fault_of_an_earlier_kernel_is_reported_as_such(driver, add_ptx, monkeypatch):
    monkeypatch.setattr(StandInAdd, "launch", lambda self, *args: 700)  # the context holds a sticky fault
    a, b = inputs(4)
    with pytest.raises(LaunchError, match=r"kernel 'add' failed \(grid .*\): CUDA_ERROR_ILLEGAL_ADDRESS: an illegal "
                                          r"memory access was encountered; a kernel queued earlier on this device "
                                          r"faulted"):
        runtime.launch(add_ptx, "add", 1, 4, [a, b, np.zeros(4, np.float32), 4])


def test_a_thread_without_a_current_context_gets_the_kernels(driver, add_ptx, monkeypatch):
    codes = iter([201, 0])  # CUDA_ERROR_INVALID_CONTEXT, then success once a context is current
    launched = []
    monkeypatch.setattr(StandInAdd, "launch", lambda self, *args: launched.append(args) or next(codes))
    driver.api.context = 0
    a, b = inputs(4)
    runtime.launch(add_ptx, "add", 1, 4, [a, b, np.zeros(4, np.float32), 4])
    assert len(launched) == 2 and driver.api.context == driver.api.primary_context(0)


def test_every_thread_that_copies_gets_the_context_pushed_once(driver):
    """PyCUDA's context stack is per thread: a copy from a thread of its own (torch's autograd runs a
    backward pass in one) must find the primary context pushed there too, once."""
    runtime.device_copy(np.zeros(4, np.float32))
    worker = threading.Thread(target=lambda: [runtime.device_copy(np.zeros(4, np.float32)) for _ in range(3)],
                              name="backward")
    worker.start()
    worker.join()
    runtime.device_copy(np.zeros(4, np.float32))
    assert driver.pushed_in == [threading.current_thread().name, "backward"]


def test_a_thread_python_did_not_start_pops_the_context_when_the_call_returns(driver):
    """torch's autograd engine runs a backward pass in a thread of its own, in which no Python code runs
    at its end: a call there leaves no context pushed (PyCUDA aborts the process otherwise)."""
    done = threading.Event()

    def foreign() -> None:
        for _ in range(2):
            with runtime.thread_scope():
                runtime.device_copy(np.zeros(4, np.float32))
        done.set()

    _thread.start_new_thread(foreign, ())
    assert done.wait(10)
    assert len(driver.pushed_in) == len(driver.popped_in) == 2 and driver.pushed_in == driver.popped_in


def test_tensor_maps_are_encoded_by_cuTensorMapEncodeTiled(driver):
    tmap = TensorMap.tiled(np.zeros((256, 128), np.uint16), (128, 64), dtype="bf16", swizzle="128B",
                           l2_promotion="256B").on(0x7F000000)
    raw = runtime.encode_tensor_map(tmap)
    assert len(raw) == 128 and raw[:8] == struct.pack("<Q", 0x1234)
    # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, sizes, byte strides and box innermost first, SWIZZLE_128B, L2_256B
    assert driver.tensor_maps == [(9, 0x7F000000, (128, 256), (256,), (64, 128), (1, 1), 3, 3, 0)]
    with pytest.raises(LaunchError, match=r"cuTensorMapEncodeTiled rejected a bf16 tensor map of sizes \(128, 256\)"
                                          r".*: CUDA_ERROR_INVALID_VALUE"):
        runtime.encode_tensor_map(tmap)
    with pytest.raises(LaunchError, match=r"the device address 0x7f000008 is not 16-byte aligned"):
        runtime.encode_tensor_map(tmap.on(0x7F000008))
    params = runtime.parse_entry_params(".entry k(.param .align 64 .b8 map[128], .param .u32 n) { ret; }")["k"]
    with pytest.raises(LaunchError, match=r"parameter 'map' \(\.b8\[128\]\): cuTensorMapEncodeTiled rejected"):
        runtime.bind_arguments("k", params, [tmap, 1])


def test_a_cubin_the_driver_refuses_falls_back_to_the_ptx(driver, add_ptx):
    module = runtime.load_module(add_ptx, cubin=b"\x7fELF bogus cubin")  # "bogus": the stand-in refuses it
    assert not module.from_cubin
    assert runtime.load_module(add_ptx + " ", cubin=b"\x7fELF fine").from_cubin


# --- where parameters sit in the buffer: the kernel's layout, not a C struct's

WGMMA_GEMM = Path(__file__).parent.parent / "handwritten_ptx" / "gemm_bf16_wgmma.ptx"


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not installed")
def test_over_aligned_parameters_go_where_the_compiled_kernel_reads_them(driver):
    """The tensor maps of the wgmma GEMM, compiled for sm_90a, sit at 48 and 176, not at 0 and 128
    (where a C struct would put them, and where they were once packed: the GPU then read tensor
    maps made of parts of both and stopped with 'an illegal instruction was encountered')."""
    text = WGMMA_GEMM.read_text()
    compiled = cubin_parameter_layout(text, "gemm_bf16_wgmma", "sm_90a")
    driver.layouts["gemm_bf16_wgmma"] = compiled
    maps = [bytes([1]) * 128, bytes([2]) * 128]
    runtime.launch(text, "gemm_bf16_wgmma", 4, 384, maps + [0xC0FFEE00, 256, 512, 1024], shared_bytes=197632)
    assert driver.asked == ["gemm_bf16_wgmma"]
    offsets = [offset for offset, _ in compiled]
    assert offsets[:2] == [48, 176]
    assert offsets != runtime.natural_offsets(runtime.parse_entry_params(text)["gemm_bf16_wgmma"])
    buffer = driver.launches[-1]["parameters"]
    assert len(buffer) == compiled[-1][0] + compiled[-1][1]
    assert buffer[48:176] == maps[0] and buffer[176:304] == maps[1]
    assert struct.unpack_from("<QIII", buffer, 304) == (0xC0FFEE00, 256, 512, 1024)


def test_kernels_without_over_aligned_parameters_are_packed_like_a_c_struct(driver):
    ptx = ".version 8.0\n.target sm_80\n.visible .entry k(.param .u32 n, .param .align 16 .b8 s[32], .param .u64 p)\n{ ret; }\n"
    runtime.launch(ptx, "k", 1, 32, [7, bytes(range(32)), 0x1000])
    assert driver.asked == []  # the driver need not be asked
    assert driver.launches[-1]["parameters"] == struct.pack("<I12x32sQ", 7, bytes(range(32)), 0x1000)


def test_a_driver_layout_that_disagrees_with_the_ptx_is_a_launch_error(driver):
    ptx = ".version 8.0\n.target sm_90\n.visible .entry k(.param .align 64 .b8 map[128], .param .u32 n)\n{ ret; }\n"
    driver.layouts["k"] = [(48, 128), (176, 8)]
    with pytest.raises(LaunchError, match=r"kernel 'k', parameter 'n' \(\.u32\): the driver reports 8 bytes"):
        runtime.launch(ptx, "k", 1, 32, [bytes(128), 1])
    runtime._modules.clear()
    driver.layouts["k"] = [(48, 128)]
    with pytest.raises(LaunchError, match=r"kernel 'k': the driver reports 1 parameters, the PTX declares 2"):
        runtime.launch(ptx, "k", 1, 32, [bytes(128), 1])
