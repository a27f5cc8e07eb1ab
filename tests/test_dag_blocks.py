# Blocks and argument regions without a GPU: numpy blocks, and DeviceBlocks
# over a stand-in for pycuda.driver whose "device memory" is a bytearray
# (allocations, copies host<->device, cuMemcpy2D, memset, context push/pop),
# so the GPU worker's code paths - views, strided copies, travelling through
# host memory and uploading once - are checked here; and running a task's
# spec with a kernel that records what it is given.
from __future__ import annotations

import pickle
import types

import numpy as np
import pytest

from phobos.dag.blocks import DeviceArrays, DeviceBlock, FragmentSpec, HostArrays, assemble
from phobos.dag.execute import BufferSpec, TaskError, TaskSpec, run_spec
from phobos.dag.region import Box


class StandInDriver(types.SimpleNamespace):
    """Device memory as one bytearray; addresses start at BASE (so 0 is never valid)."""

    BASE = 0x10000

    def __init__(self, size: int = 1 << 20):
        memory = bytearray(size)
        driver = self
        state = {"next": self.BASE, "stack": [], "copies": 0, "uploads": 0}

        class Allocation:
            def __init__(self, nbytes: int):
                self.address = state["next"]
                state["next"] += (nbytes + 255) // 256 * 256

            def __int__(self) -> int:
                return self.address

        class Context:
            def push(self) -> None:
                state["stack"].append(self)

            @staticmethod
            def pop() -> None:
                state["stack"].pop()

            @staticmethod
            def synchronize() -> None:
                pass

        class Memcpy2D:
            def set_src_device(self, address: int) -> None:
                self.src = address

            def set_dst_device(self, address: int) -> None:
                self.dst = address

            def __call__(self, aligned: bool = True) -> None:
                driver.check_current()
                state["copies"] += 1
                for row in range(self.height):
                    src = self.src - driver.BASE + row * self.src_pitch
                    dst = self.dst - driver.BASE + row * self.dst_pitch
                    memory[dst:dst + self.width_in_bytes] = memory[src:src + self.width_in_bytes]

        class Device:
            def __init__(self, ordinal: int):
                self.ordinal = ordinal

            def retain_primary_context(self) -> Context:
                return Context()

        super().__init__(memory=memory, state=state, Context=Context, Memcpy2D=Memcpy2D, Allocation=Allocation,
                         Device=Device)

    def check_current(self) -> None:
        assert self.state["stack"], "a driver call with no current context"

    def mem_alloc(self, nbytes: int):
        self.check_current()
        return self.Allocation(nbytes)

    def memset_d8(self, address: int, value: int, count: int) -> None:
        self.check_current()
        start = int(address) - self.BASE
        self.memory[start:start + count] = bytes([value]) * count

    def memcpy_htod(self, address: int, array: np.ndarray) -> None:
        self.check_current()
        self.state["uploads"] += 1
        start = int(address) - self.BASE
        self.memory[start:start + array.nbytes] = array.tobytes()

    def memcpy_dtoh(self, array: np.ndarray, address: int) -> None:
        self.check_current()
        start = int(address) - self.BASE
        array[...] = np.frombuffer(bytes(self.memory[start:start + array.nbytes]), array.dtype).reshape(array.shape)


@pytest.fixture
def device():
    driver = StandInDriver()
    arrays = DeviceArrays(driver, driver.Context())
    with arrays.current():
        yield arrays


def grid(shape, dtype="float32"):
    return np.arange(np.prod(shape), dtype=dtype).reshape(shape)


# ---------------------------------------------------------------------------
# Regions from fragments


def test_a_region_that_is_whole_rows_of_one_block_is_a_view_and_read_only():
    block = grid((6, 4))
    fragments = [FragmentSpec(0, 0, Box(((2, 5), (0, 4))), Box(((0, 3), (0, 4))))]
    region = assemble(HostArrays(), (3, 4), np.dtype("float32"), fragments, [(block,)], written=False)
    assert np.shares_memory(region, block) and (region == block[2:5]).all()
    assert not region.flags.writeable


def test_written_regions_and_column_panels_are_new_arrays():
    block = grid((6, 4))
    rows = [FragmentSpec(0, 0, Box(((2, 5), (0, 4))), Box(((0, 3), (0, 4))))]
    written = assemble(HostArrays(), (3, 4), np.dtype("float32"), rows, [(block,)], written=True)
    assert not np.shares_memory(written, block) and (written == block[2:5]).all()
    columns = [FragmentSpec(0, 0, Box(((0, 6), (1, 3))), Box(((0, 6), (0, 2))))]
    panel = assemble(HostArrays(), (6, 2), np.dtype("float32"), columns, [(block,)], written=False)
    assert panel.flags.c_contiguous and (panel == block[:, 1:3]).all()


def test_a_region_is_put_together_from_several_blocks_and_zeros():
    first, second = grid((2, 4)), grid((3, 4)) + 100
    fragments = [FragmentSpec(0, 1, Box(((0, 2), (0, 4))), Box(((0, 2), (0, 4)))),
                 FragmentSpec(1, 0, Box(((0, 3), (1, 3))), Box(((2, 5), (1, 3)))),
                 FragmentSpec(None, 0, Box(((0, 3), (0, 1))), Box(((2, 5), (0, 1)))),
                 FragmentSpec(None, 0, Box(((0, 3), (3, 4))), Box(((2, 5), (3, 4))))]
    region = assemble(HostArrays(), (5, 4), np.dtype("float32"), fragments, [(None, first), (second,)], False)
    expected = np.zeros((5, 4), np.float32)
    expected[:2] = first
    expected[2:, 1:3] = second[:, 1:3]
    assert (region == expected).all()


# ---------------------------------------------------------------------------
# DeviceBlocks


def test_device_blocks_hold_their_data_on_the_device(device):
    data = grid((3, 5))
    block = device.adopt(data)
    assert isinstance(block, DeviceBlock) and block.host is None and block.nbytes == data.nbytes
    interface = block.__cuda_array_interface__
    assert interface["shape"] == (3, 5) and interface["typestr"] == "<f4" and interface["data"][0] == block.pointer
    assert (block.to_host() == data).all()
    assert (device.zeros((2, 3), np.dtype("float32")).to_host() == 0).all()


def test_device_views_share_memory_and_strided_boxes_are_copied(device):
    data = grid((4, 3, 5))
    block = device.adopt(data)
    view = device.window(block, Box(((1, 2), (1, 3), (0, 5))))
    assert view.allocation is block.allocation and (view.to_host() == data[1:2, 1:3]).all()
    target = device.zeros((4, 3, 5), np.dtype("float32"))
    device.copy(target, Box(((0, 2), (1, 3), (2, 5))), block, Box(((2, 4), (0, 2), (1, 4))))
    expected = np.zeros_like(data)
    expected[0:2, 1:3, 2:5] = data[2:4, 0:2, 1:4]
    assert (target.to_host() == expected).all()
    assert device.driver.state["copies"] == 2  # one 2-D copy per index of the leading dimension


def test_device_regions_are_assembled_like_host_ones(device):
    first, second = grid((2, 6)), grid((4, 6)) + 50
    inputs = [(device.adopt(first),), (device.adopt(second),)]
    fragments = [FragmentSpec(0, 0, Box(((0, 2), (2, 6))), Box(((0, 2), (0, 4)))),
                 FragmentSpec(1, 0, Box(((1, 3), (2, 6))), Box(((2, 4), (0, 4))))]
    region = assemble(device, (4, 4), np.dtype("float32"), fragments, inputs, written=True)
    assert (region.to_host() == np.concatenate([first[:, 2:], second[1:3, 2:]])).all()
    whole_rows = [FragmentSpec(1, 0, Box(((1, 3), (0, 6))), Box(((0, 2), (0, 6))))]
    view = assemble(device, (2, 6), np.dtype("float32"), whole_rows, inputs, written=False)
    assert view.allocation is inputs[1][0].allocation


def test_a_device_block_travels_through_host_memory_and_is_uploaded_once(device):
    data = grid((4, 4))
    travelled = pickle.loads(pickle.dumps(device.adopt(data)))
    assert travelled.host is not None and (travelled.to_host() == data).all()  # what the client gathers
    with pytest.raises(ValueError, match="in host memory"):
        travelled.__cuda_array_interface__
    uploads = device.driver.state["uploads"]
    assert device.adopt(travelled) is travelled and travelled.host is None
    assert device.adopt(travelled) is travelled and device.driver.state["uploads"] == uploads + 1
    assert (travelled.to_host() == data).all()
    assert (HostArrays().adopt(pickle.loads(pickle.dumps(travelled))) == data).all()  # a CPU worker's view


# ---------------------------------------------------------------------------
# Running a spec


def spec(buffers, arguments, outputs=(1,)):
    return TaskSpec("axpy (call 1), grid slice N[0:4]", "source", "f.phobos", "axpy", {}, None, arguments,
                    tuple(buffers), tuple(outputs), "emulate")


def test_a_spec_runs_its_kernel_on_assembled_buffers_and_returns_what_it_wrote():
    seen = {}

    def kernel(x, y, alpha):
        seen.update(x=x.copy(), alpha=alpha)
        y += alpha * x

    x_block, y_block = grid((8,)), np.ones(8, np.float32)
    buffers = [BufferSpec((4,), "float32", (FragmentSpec(0, 0, Box(((4, 8),)), Box(((0, 4),))),), False),
               BufferSpec((4,), "float32", (FragmentSpec(1, 0, Box(((4, 8),)), Box(((0, 4),))),), True)]
    outputs, seconds = run_spec(spec(buffers, {"x": ("buffer", 0), "y": ("buffer", 1), "alpha": ("scalar", 2.0)}),
                                [(x_block,), (y_block,)], HostArrays(), kernel)
    assert (seen["x"] == x_block[4:]).all() and seen["alpha"] == 2.0 and seconds >= 0
    assert (outputs[0] == 1 + 2 * x_block[4:]).all()
    assert (y_block == 1).all()  # blocks never change: the task wrote a new one


def test_calibration_specs_run_on_zeros():
    buffers = [BufferSpec((3,), "float32", (FragmentSpec(0, 0, Box(((0, 3),)), Box(((0, 3),))),), True)]
    empty = spec(buffers, {"y": ("buffer", 0)}, outputs=(0,)).without_data()
    outputs, _ = run_spec(empty, [], HostArrays(), lambda y: None)
    assert (outputs[0] == 0).all()


def test_task_errors_name_the_task_and_worker_and_survive_pickling():
    error = TaskError("sgemm (call 2), grid slice M[0:128] x N[0:256]", "tcp://10.0.0.5:4000", "LaunchError: boom")
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == ("sgemm (call 2), grid slice M[0:128] x N[0:256] failed on worker "
                         "tcp://10.0.0.5:4000: LaunchError: boom")
    assert (copy.label, copy.worker, copy.cause) == (error.label, error.worker, error.cause)
