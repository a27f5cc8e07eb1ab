# Where a launched kernel runs: the GPU, or one of two CPU stand-ins.
#
#   gpu        the PTX through the CUDA driver (phobos.run.runtime / PyCUDA); the
#              only backend that can time launches, so the only one that tunes
#   interpret  the checked kernel, run by phobos.run.interpreter on numpy arrays
#   emulate    the PTX, run by phobos.run.emulator on numpy arrays
#
# The launcher talks to every backend through the same few members (see
# `Backend`), handing over a `Launch`: the kernel, the grid, and the bound
# arguments, from which each backend takes the argument order it needs (the
# source's parameters for the interpreter, the PTX's - tensors and scalars,
# then one i32 per size name - for the others).  The CPU backends' modules are
# imported only when a kernel runs on them, and none of this imports PyCUDA.
#
# `mode=None` means PHOBOS_MODE if it is set, else the GPU if there is one,
# else the interpreter (`default_mode`): on the CPU the interpreter gives the
# quick answer, and the emulator, much slower, is asked for by name when the
# generated PTX itself is under test.
#
# On the GPU a launch whose tensors are all in device memory is asynchronous:
# `prepare` gives a QueuedKernel that queues it on a stream and returns, and
# the launcher keeps it for the next calls of the same signature; a launch
# with numpy arrays goes through `run`, which copies them in, launches, waits
# for the device and copies them back.
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import runtime
from .tensor_map import TensorMap, kernel_map
from ..launch.binding import BoundCall, TensorArgument
from ..compiler import TARGETS, CompiledKernel
from ..middle.ir import KernelParam
from ..errors import LaunchError, PhobosError, ToolchainError

if TYPE_CHECKING:
    from ..frontend.sema import CheckedKernel

#: The target PTX is generated for when no GPU says otherwise.
DEFAULT_ARCH = "sm_90"

#: The SMs the emulator stands for when it starts a persistent kernel's CTAs: few, so that each CTA runs
#: several program instances.
EMULATED_MULTIPROCESSORS = 2


@dataclass
class Launch:
    """One kernel launch: what runs, on what grid, with which arguments.

    `replacements` maps tensor names to the device copies to pass instead of
    the caller's tensors (the autotuner's scratch copies).
    """

    checked: CheckedKernel
    compiled: CompiledKernel | None  # None where the backend runs the checked kernel
    grid: tuple[int, int, int]
    call: BoundCall
    replacements: dict[str, Any] = field(default_factory=dict)
    stream: int = 0  # the raw CUDA stream handle to queue on (0: the NULL stream)
    device: int = 0
    cubin: bytes | None = None  # what ptxas made of compiled.ptx for this device, when there is one

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.compiled.threads, 1, 1)

    def source_arguments(self) -> list[Any]:
        """The arguments in the source's parameter order."""
        return [self._argument(p.name) for p in self.call.params]

    def ptx_arguments(self) -> list[Any]:
        """The arguments in the PTX's parameter order (bools as 0/1, the PTX's .u8; a tensor's address or the
        memory its elements lie in; a TensorMap over the tensor a `tensor_map` parameter names; the grid's
        extent along its axis for a `programs` one; the stride a `stride` one names)."""
        return [PTX_ARGUMENTS.get(p.kind, Launch._plain)(self, p) for p in self.compiled.params]

    def _plain(self, param: KernelParam) -> Any:
        return _as_ptx_value(self._argument(param.name, compiled=True))

    def _stride(self, param: KernelParam) -> int:
        return self.call.tensors[param.name].strides[param.dims[0]]

    def _programs(self, param: KernelParam) -> int:
        return self.grid[param.dims[0]]

    def queued_arguments(self) -> list[Any]:
        """ptx_arguments with the tensor maps encoded by the driver, as a QueuedKernel packs them."""
        return [runtime.encode_tensor_map(value) if isinstance(value, TensorMap) else value
                for value in self.ptx_arguments()]

    def _tensor_map(self, param: KernelParam) -> TensorMap:
        value = self._argument(param.name, compiled=True)
        if not isinstance(value, np.ndarray):
            value = runtime.device_address(value)
        tensor = self.call.tensors[param.name]
        return kernel_map(value, tensor.shape, param.map_dtype, param.box, tensor.strides)

    @property
    def asynchronous(self) -> bool:
        """Whether every tensor is in device memory: the launch is queued and not waited for."""
        return all(tensor.host is None or name in self.replacements for name, tensor in self.call.tensors.items())

    def copy_back(self) -> list[int]:
        """The PTX indices of the host arrays the kernel writes (and that are not replaced)."""
        return [index for index, p in enumerate(self.compiled.params)
                if p.written and p.name not in self.replacements and self.call.tensors[p.name].host is not None]

    def _argument(self, name: str, compiled: bool = False) -> Any:
        """The value of parameter `name`: a replacement, or the call's (for `compiled` code, a strided host
        array's memory, TensorArgument.buffer)."""
        if name in self.replacements:
            return self.replacements[name]
        if compiled and name in self.call.tensors:
            return self.call.tensors[name].buffer
        return self.call.value(name)


def _as_ptx_value(value: Any) -> Any:
    return int(value) if isinstance(value, np.bool_) else value


#: How a Launch gives the value of each kind of compiled parameter (the others: Launch._plain).
PTX_ARGUMENTS = {"tensor_map": Launch._tensor_map, "programs": Launch._programs, "stride": Launch._stride}


class Backend(Protocol):
    """What the launcher needs of a place to run kernels."""

    name: str
    compiles: bool  # runs PTX, so needs a CompiledKernel per configuration
    host_only: bool  # takes numpy arrays only
    tunes: bool  # can time launches (`time`, `device_copy` and `free` exist)
    maps_host_arrays: bool  # can pass a TensorMap over a numpy array (kernels copying by TMA)

    def arch(self, index: int = 0) -> str:
        """The target to compile for (device `index`'s)."""

    def device(self, index: int = 0) -> runtime.DeviceProperties | None:
        """The name and limits of device `index`; None for the CPU backends."""

    def run(self, launch: Launch) -> None:
        """Run the kernel once; written host arrays hold the results afterwards (a GPU may return before
        the kernel ends when every tensor is in device memory)."""

    def time(self, launch: Launch, warmup: int, repeat: int) -> float:
        """Median milliseconds of a launch over `repeat` timed samples after `warmup` untimed launches (tuning
        backends only)."""

    def device_copy(self, tensor: TensorArgument) -> Any:
        """A scratch copy of `tensor` in device memory (tuning backends only)."""

    def free(self, copy: Any) -> None:
        """Release a copy made by `device_copy`."""


class GpuBackend:
    """The GPU, through phobos.run.runtime: PTX modules are loaded once per process, text and device."""

    name = "gpu"
    compiles = True
    host_only = False
    tunes = True
    maps_host_arrays = False  # a map holds a device address; numpy arrays are copied in during the launch

    def __init__(self) -> None:
        self._devices: dict[int, runtime.DeviceProperties] = {}

    def device(self, index: int = 0) -> runtime.DeviceProperties:
        if index not in self._devices:
            self._devices[index] = runtime.device_properties(index)
        return self._devices[index]

    def arch(self, index: int = 0) -> str:
        return arch_for(self.device(index).compute_capability)

    def locate(self, address: int) -> int | None:
        """The device that holds `address`."""
        return runtime.device_of_pointer(address)

    def capturing(self, stream: int) -> bool:
        return runtime.stream_capturing(stream)

    def check_stream(self, stream: int, device: int, what: str) -> None:
        runtime.check_stream(stream, device, what)

    def _ctas(self, launch: Launch) -> tuple[int, int, int]:
        """The CTAs to start (fewer than the grid's programs for a persistent kernel)."""
        return launch.compiled.launch_grid(launch.grid, self.device(launch.device).multiprocessors)

    def _module(self, launch: Launch) -> runtime.Module:
        return runtime.load_module(launch.compiled.ptx, launch.cubin, launch.device)

    def prepare(self, launch: Launch) -> runtime.QueuedKernel | None:
        """The launch prepared for queueing, when every tensor is in device memory (else None: use `run`)."""
        if not launch.asynchronous:
            return None
        compiled = launch.compiled
        function = self._module(launch).function(compiled.kernel_name)
        return runtime.QueuedKernel(function, runtime.launch_shape(compiled.kernel_name, self._ctas(launch),
                                                                   launch.block, compiled.shared_bytes))

    def run(self, launch: Launch) -> None:
        """Queue an asynchronous launch; otherwise copy, launch, wait and copy back."""
        queued = self.prepare(launch)
        if queued is not None:
            queued(launch.stream, launch.queued_arguments())
            return
        compiled = launch.compiled
        try:
            runtime.launch(self._module(launch), compiled.kernel_name, self._ctas(launch), launch.block,
                           launch.ptx_arguments(), shared_bytes=compiled.shared_bytes, copy_back=launch.copy_back(),
                           stream=launch.stream)
        except LaunchError as error:
            from .interpreter import assert_note  # a kernel with device_asserts may have trapped
            note = assert_note(launch.checked)
            if note is not None:
                error.notes.append(note)
            raise

    def time(self, launch: Launch, warmup: int, repeat: int) -> float:
        compiled = launch.compiled
        with runtime.on_device(launch.device):
            return runtime.time_launch(self._module(launch), compiled.kernel_name, self._ctas(launch), launch.block,
                                       launch.ptx_arguments(), shared_bytes=compiled.shared_bytes,
                                       warmup=warmup, repeat=repeat)

    def device_copy(self, tensor: TensorArgument) -> Any:
        source = tensor.buffer if tensor.host is not None else tensor.pointer
        with runtime.on_device(tensor.device or 0):
            return runtime.device_copy(source, tensor.nbytes)

    def free(self, copy: Any) -> None:
        copy.free()


def arch_for(compute_capability: tuple[int, int]) -> str:
    """The newest target Phobos has that a GPU of this compute capability runs: portable PTX
    runs on newer GPUs, an architecture-specific target (sm_90a) only on its own, and is
    preferred there (it has wgmma)."""
    major, minor = compute_capability
    here = major * 10 + minor
    runnable = [t for t in TARGETS.values()
                if (t.compute_capability == here if t.arch_specific else t.compute_capability <= here)]
    if not runnable:
        raise ToolchainError(f"this GPU is sm_{major}{minor}; Phobos generates code for {', '.join(TARGETS)}")
    return max(runnable, key=lambda t: (t.compute_capability, t.arch_specific)).arch


class CpuBackend:
    """What the CPU backends share: numpy arrays only, no device, no autotuning."""

    name = ""
    compiles = False
    host_only = True
    tunes = False
    maps_host_arrays = True

    def arch(self, index: int = 0) -> str:
        return DEFAULT_ARCH

    def device(self, index: int = 0) -> None:
        return None


class InterpretBackend(CpuBackend):
    """phobos.run.interpreter: runs the checked kernel on numpy arrays, in source-parameter order."""

    name = "interpret"

    def run(self, launch: Launch) -> None:
        interpreter = _cpu_module("phobos.run.interpreter", self.name)
        interpreter.run(launch.checked, launch.grid, launch.source_arguments())


class EmulateBackend(CpuBackend):
    """phobos.run.emulator: runs the PTX on numpy arrays, in PTX-parameter order.  The lines a failing
    device_assert prints become the DeviceAssertError the trap after them raises (interpreter.AssertionOutput),
    as in the interpreter."""

    name = "emulate"
    compiles = True

    def run(self, launch: Launch) -> None:
        emulator = _cpu_module("phobos.run.emulator", self.name)
        from .interpreter import AssertionOutput
        compiled = launch.compiled
        output = AssertionOutput(launch.checked)
        try:
            emulator.launch(compiled.ptx, compiled.kernel_name,
                            compiled.launch_grid(launch.grid, EMULATED_MULTIPROCESSORS), launch.block,
                            launch.ptx_arguments(), shared_bytes=compiled.shared_bytes, output=output.write)
        except emulator.TrapError as trap:
            raise output.error(trap.loc) or trap from None
        finally:
            output.flush()


def _cpu_module(module_name: str, mode: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        raise ToolchainError(f"mode '{mode}' needs {module_name}, which this installation of Phobos "
                             f"does not have") from None


BACKENDS: dict[str, type] = {"gpu": GpuBackend, "interpret": InterpretBackend, "emulate": EmulateBackend}
_instances: dict[str, Backend] = {}

#: Names the mode of `mode=None`; unset: the GPU if there is one, else the CPU's default mode.
MODE_VARIABLE = "PHOBOS_MODE"
#: The mode `mode=None` runs in on a machine without a GPU.  The quick start's
#: sgemm, as a whole script, takes about a second of CPU time in the
#: interpreter where the emulator, executing and checking every PTX
#: instruction of every thread, takes more than fifteen
#: (benchmarks/bench_quickstart_cpu.py); the emulator is there on request,
#: for checking generated code.
CPU_DEFAULT_MODE = "interpret"

logger = logging.getLogger(__name__)
_no_gpu_noticed = False


def check_mode(mode: Any) -> None:
    """Reject a mode that names no backend (None and Backend objects are fine)."""
    if isinstance(mode, str) and mode not in BACKENDS:
        raise PhobosError(f"unknown mode '{mode}' (modes: {', '.join(BACKENDS)}, or None to choose)")
    if mode is not None and not isinstance(mode, str) and not callable(getattr(mode, "run", None)):
        raise PhobosError(f"mode must be one of {', '.join(BACKENDS)}, None, or a backend object; got {mode!r}")


def default_mode() -> str:
    """The mode `mode=None` means.

    PHOBOS_MODE when it is set (PHOBOS_INTERPRET=1, the older switch, means
    PHOBOS_MODE=interpret); otherwise the GPU if there is one, otherwise the
    interpreter, with a one-time notice naming both CPU modes.
    """
    global _no_gpu_noticed
    named = _named_mode()
    if named is not None:
        return named
    available, reason = runtime.gpu_available()
    if available:
        return "gpu"
    if not _no_gpu_noticed:
        _no_gpu_noticed = True
        logger.warning("no GPU (%s); running kernels on the CPU in the interpreter (mode='interpret'); "
                       "mode='emulate' or %s=emulate runs the generated PTX in the emulator instead "
                       "(slower; checks what a GPU would hide)", reason, MODE_VARIABLE)
    return CPU_DEFAULT_MODE


def _named_mode() -> str | None:
    """The mode the environment names (PHOBOS_MODE, or PHOBOS_INTERPRET=1), or None."""
    named = os.environ.get(MODE_VARIABLE, "").strip().lower()
    if named:
        if named not in BACKENDS:
            raise PhobosError(f"{MODE_VARIABLE}={named} is not a mode (modes: {', '.join(BACKENDS)})")
        return named
    if os.environ.get("PHOBOS_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on"):
        return "interpret"
    return None


def tunes_likely(mode: Any) -> bool:
    """Whether kernels run in `mode` will be timed by the autotuner (a GPU, or a backend object that
    tunes), judged without touching CUDA: `mode`, or else the environment, names the GPU or nothing,
    and PyCUDA, which the GPU backend drives, is installed."""
    if mode is None:
        mode = _named_mode() or "gpu"
    if isinstance(mode, str):
        return mode == "gpu" and importlib.util.find_spec("pycuda") is not None
    return bool(getattr(mode, "tunes", False) and getattr(mode, "compiles", False))


def select_backend(mode: Any) -> Backend:
    """The backend for `mode`: a name, a backend object, or None (see `default_mode`)."""
    check_mode(mode)
    if mode is None:
        mode = default_mode()
    if not isinstance(mode, str):
        return mode
    if mode not in _instances:
        _instances[mode] = BACKENDS[mode]()
    return _instances[mode]
