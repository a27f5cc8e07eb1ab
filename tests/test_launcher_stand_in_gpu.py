# The launcher's GPU path end to end, on machines without a GPU: the real GPU
# backend and runtime over the stand-in pycuda.driver of
# test_runtime_stand_in_driver, extended with device attributes, device-to-
# device copies, and an add kernel that does what Phobos's add does (each
# program adds BLOCK elements, BLOCK read off the PTX) and takes a time that
# depends on BLOCK.  So the autotuner's choice, the scratch copies it times on
# and the final launch on the caller's arrays are all checked here.
from __future__ import annotations

import re
import struct

import numpy as np
import pytest

import phobos
from phobos.launch.autotune import QUICK
from phobos.run import backends, runtime
from phobos.errors import ToolchainError
from phobos.launch.launcher import benchmark
from phobos.toolchain import find_ptxas

from .launcher_fakes import ADD4, random_vectors
from .test_runtime_stand_in_driver import StandInDriver
from .test_runtime_stand_in_driver import driver as stand_in_driver  # noqa: F401 (a fixture)

#: Simulated milliseconds per launch of add with each BLOCK.
COSTS = {128: 4.0, 256: 0.5, 512: 2.0, 1024: 3.0}


class device_attribute:  # named as in pycuda
    MAX_SHARED_MEMORY_PER_BLOCK = "MAX_SHARED_MEMORY_PER_BLOCK"
    MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"
    MAX_REGISTERS_PER_BLOCK = "MAX_REGISTERS_PER_BLOCK"
    MAX_THREADS_PER_BLOCK = "MAX_THREADS_PER_BLOCK"
    MULTIPROCESSOR_COUNT = "MULTIPROCESSOR_COUNT"


ATTRIBUTES = {"MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 * 1024,
              "MAX_REGISTERS_PER_BLOCK": 65536, "MAX_THREADS_PER_BLOCK": 1024, "MULTIPROCESSOR_COUNT": 132}


class PhobosAdd:
    """Phobos's add: program p adds elements [p * BLOCK, (p + 1) * BLOCK) below N."""

    def __init__(self, driver: StandInDriver, block: int):
        self.driver = driver
        self.block = block

    def launch(self, grid, block, parameters: bytes, shared_size: int, stream: int) -> int:
        a, b, c, n = struct.unpack("<QQQi", parameters)
        elements = self.block or 4 * block[0]
        count = min(n, grid[0] * elements)
        self.driver.launches.append(dict(grid=grid, block=block, c=c, stream=stream))
        self.driver.clock += COSTS[elements]
        result = self.driver.floats_at(a, count) + self.driver.floats_at(b, count)
        self.driver.memory[c][: 4 * count] = result.tobytes()
        return 0


@pytest.fixture
def gpu(stand_in_driver, monkeypatch):
    """The stand-in driver, able to do what the launcher asks of a GPU."""
    driver = stand_in_driver
    driver.clock = 0.0
    driver.device_attribute = device_attribute
    base_device = driver.Device

    class Device(base_device):
        def compute_capability(self):
            return (9, 0)

        def get_attribute(self, attribute):
            return ATTRIBUTES[attribute]

    class Event:
        def record(self):
            self.time = driver.clock

        def synchronize(self):
            pass

        def time_till(self, other):
            return other.time - self.time

    def memcpy_dtod(destination, source, size):
        driver.memory[int(destination)][:size] = driver.memory[int(source)][:size]

    class Module:
        def __init__(self, block: int | None):
            self.block = block

        def get_function(self, name):
            assert name == "add"
            return PhobosAdd(driver, self.block)

    def module_from_buffer(image: bytes):
        """PTX names its configuration in a comment; a cubin (ELF) does not: then BLOCK is 4 elements a thread."""
        driver.images.append("cubin" if image.startswith(b"\x7fELF") else "ptx")
        found = re.search(rb"configuration BLOCK=(\d+)", image)
        return Module(int(found[1]) if found else None)

    driver.images = []  # the kind of each image loaded
    driver.Device, driver.Event = Device, Event
    driver.memcpy_dtod, driver.module_from_buffer = memcpy_dtod, module_from_buffer
    monkeypatch.setattr(backends, "_instances", {})
    return driver


def test_device_properties_come_from_the_driver(gpu):
    assert runtime.device_properties() == runtime.DeviceProperties("Stand-in GPU", (9, 0), 227 * 1024, 65536, 1024, 132)
    assert backends.GpuBackend().arch() == "sm_90a"


def test_device_copies_from_host_and_device(gpu):
    a = np.arange(5, dtype=np.float32)
    host_copy = runtime.device_copy(a)
    device_copy = runtime.device_copy(int(host_copy), a.nbytes)
    assert gpu.floats_at(int(device_copy), 5).tolist() == a.tolist()
    assert int(host_copy) != int(device_copy)


def test_tuning_picks_the_fastest_on_scratch_copies_then_runs_on_the_callers_arrays(gpu, caplog):
    add = phobos.kernel(ADD4, mode="gpu")
    a, b = random_vectors(1000)
    c = np.full(1000, np.nan, np.float32)
    add(a, b, c)
    assert add.config == {"BLOCK": 256}
    assert add.timings == {f"BLOCK={block}": ms for block, ms in COSTS.items()}
    np.testing.assert_array_equal(c, a + b)
    *timing, final = gpu.launches
    # per configuration: a quick look (warm-up, one call that sizes the samples, then samples of calls
    # filling 1 ms); BLOCK=256 is 4 times quicker than the others: no finalist to time again
    calls = [max(1, int(runtime.MIN_SAMPLE_MS / ms)) for ms in COSTS.values()]
    # a configuration of a millisecond or more: the sizing call is its one sample
    assert len(timing) == sum(QUICK.warmup + 1 + QUICK.repeat * n if n > 1 else QUICK.warmup + QUICK.repeat
                              for n in calls)
    scratch_c = {launch["c"] for launch in timing}
    assert len(scratch_c) == 1 and final["c"] not in scratch_c  # one scratch copy of c for every timing run
    assert final["grid"] == (4, 1, 1) and final["block"] == (64, 1, 1)
    assert sorted(gpu.freed) == sorted(gpu.memory)  # scratch copies and launch copies alike
    assert any(r.getMessage().startswith("tuning add over 4 configurations: best BLOCK=256: 0.5 ms")
               for r in caplog.records if r.levelname == "INFO")
    try:
        find_ptxas()
    except ToolchainError:
        return
    assert gpu.images == ["cubin"] * 4  # what ptxas made while screening, loaded as it is


def test_the_second_call_launches_once(gpu):
    add = phobos.kernel(ADD4, mode="gpu")
    a, b = random_vectors(3000)
    add(a, b, np.empty_like(a))
    launches = len(gpu.launches)
    c = np.empty_like(a)
    add(a, b, c)
    assert len(gpu.launches) == launches + 1 and gpu.launches[-1]["grid"] == (12, 1, 1)
    np.testing.assert_array_equal(c, a + b)


def test_inputs_are_never_written_back(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=512)
    a, b = random_vectors(100)
    a_before, b_before = a.copy(), b.copy()
    c = np.empty_like(a)
    add(a, b, c)
    np.testing.assert_array_equal(a, a_before)
    np.testing.assert_array_equal(b, b_before)
    np.testing.assert_array_equal(c, a + b)


def test_benchmark_is_the_median_of_event_timings(gpu):
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=1024)
    a, b = random_vectors(100)
    c = np.empty_like(a)
    assert benchmark(lambda: add(a, b, c), warmup=1, repeat=3) == COSTS[1024]
    assert len(gpu.launches) == 1 + 3  # warm-up, 3 samples of one call (the first also sized them)
    with pytest.raises(phobos.PhobosError, match="timing: need warmup >= 0 and repeat >= 1, got 0 and 0"):
        benchmark(lambda: None, warmup=0, repeat=0)
