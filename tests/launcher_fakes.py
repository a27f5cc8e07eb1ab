# Stand-ins for the launcher's tests on machines without a GPU: kernels to
# launch, a GPU backend that records what it is asked to do (and times each
# configuration with a given number instead of CUDA events), device memory as
# torch and CuPy expose it, and the CPU backends' modules.
from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from phobos.configuration import config_text
from phobos.run.backends import Launch
from phobos.launch.binding import TensorArgument
from phobos.run.runtime import DeviceProperties

ADD4 = """\
// c = a + b with four block sizes to choose from
@autotune(BLOCK in [128, 256, 512, 1024])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {
    let base = program_id(0) * BLOCK
    c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}
"""

# ADD4 for tensors past 2^31 elements: the block's start is computed in i64, so it does not wrap.
WIDE_ADD4 = ADD4.replace("program_id(0) * BLOCK", "i64(program_id(0)) * i64(BLOCK)")

AXPY = """\
kernel axpy(x: tensor<f32>[N], y: tensor<f32>[N], alpha: f32, offset: i32, on: bool) {
    let base = program_id(0) * 128
    if on {
        y[base :+ 128] = alpha * x[base :+ 128] + f32(offset)
    }
}
"""

# program_id(1) indexes a single row, so nothing says how many rows programs there are.
FILL_ROWS = """\
kernel fill_rows(x: tensor<f32>[M, N]) {
    let r = program_id(1) * 2
    x[r, program_id(0) * 64 :+ 64] = full([64], 1.0)
}
"""

TYPES = """\
kernel types(h: tensor<f16>[N], i: tensor<i32>[N], m: tensor<bool>[N], w: tensor<f32>[4, N],
             out: tensor<f32>[N]) {
    let base = program_id(0) * 64
    out[base :+ 64] = h[base :+ 64] + f32(i[base :+ 64]) + w[0, base :+ 64]
}
"""

TWO_PARAMETERS = """\
@autotune(BLOCK in [128, 256], ROWS in [1, 2])
kernel scale(x: tensor<f32>[N], y: tensor<f32>[N], alpha: f32) {
    let base = program_id(0) * BLOCK
    y[base :+ BLOCK] = alpha * x[base :+ BLOCK] + f32(ROWS - ROWS)
}
"""

FAKE_DEVICE = DeviceProperties("Fake GPU", (9, 0), 227 * 1024, 65536, 1024)


@dataclass(eq=False)
class Scratch:
    """A device copy the fake GPU made of a tensor argument."""

    tensor: TensorArgument


@dataclass(eq=False)
class FakeGpu:
    """A tuning backend that runs nothing: it records launches, timings and copies."""

    times: dict[str, float] = field(default_factory=dict)  # config text -> ms (default 1.0)
    props: DeviceProperties = FAKE_DEVICE
    runs: list[Launch] = field(default_factory=list)
    timed: list[Launch] = field(default_factory=list)
    copies: list[Scratch] = field(default_factory=list)
    freed: list[Scratch] = field(default_factory=list)

    name = "fake-gpu"
    compiles = True
    host_only = False
    tunes = True

    def arch(self, index: int = 0) -> str:
        return "sm_90"

    def device(self, index: int = 0) -> DeviceProperties:
        return self.props

    def run(self, launch: Launch) -> None:
        self.runs.append(launch)

    def time(self, launch: Launch, warmup: int, repeat: int) -> float:
        self.timed.append(launch)
        return self.times.get(config_text(launch.compiled.config), 1.0)

    def device_copy(self, tensor: TensorArgument) -> Scratch:
        copy = Scratch(tensor)
        self.copies.append(copy)
        return copy

    def free(self, copy: Scratch) -> None:
        self.freed.append(copy)

    def timed_configs(self) -> list[dict[str, int]]:
        return [launch.compiled.config for launch in self.timed]


class DeviceArray:
    """Device memory as torch, CuPy and Numba expose it: `__cuda_array_interface__`."""

    def __init__(self, shape: tuple[int, ...], typestr: str = "<f4", address: int = 0x7000_0000,
                 strides: tuple[int, ...] | None = None, read_only: bool = False):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (address, read_only),
                                         "strides": strides, "version": 3}


class CpuModule(types.ModuleType):
    """phobos.run.interpreter or phobos.run.emulator: records each call's arguments."""

    def __init__(self, name: str, entry: str):
        super().__init__(name)
        self.calls: list[tuple] = []

        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append((args, kwargs))

        setattr(self, entry, record)


def install_cpu_module(monkeypatch, name: str, entry: str) -> CpuModule:
    module = CpuModule(name, entry)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def forget_memory(monkeypatch) -> None:
    """Empty the per-process layers above the disk cache, as in a new process."""
    from phobos.launch import cache, launcher
    monkeypatch.setattr(cache, "_caches", {})
    monkeypatch.setattr(launcher, "_compiled_kernels", {})


def random_vectors(n: int, count: int = 2, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n, dtype=np.float32) for _ in range(count)]
