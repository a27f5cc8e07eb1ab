# The worker plugin without a cluster or a GPU: which arrays each mode gets
# (a CUDA context through a stand-in pycuda.driver where the runtime reports a
# GPU), and run_task on a GPU worker: regions assembled as DeviceBlocks, the
# kernel handed device pointers, the blocks it wrote returned, and failures
# reported as TaskErrors naming the task and the worker.
from __future__ import annotations

import pickle
import sys
import types

import numpy as np
import pytest

pytest.importorskip("distributed", reason="needs Dask distributed: pip install 'phobos-tile[distributed]'")

from phobos.dag import worker  # noqa: E402
from phobos.dag.blocks import DeviceArrays, DeviceBlock, FragmentSpec, HostArrays  # noqa: E402
from phobos.dag.execute import BufferSpec, TaskError, TaskSpec  # noqa: E402
from phobos.dag.region import Box  # noqa: E402
from phobos.errors import ToolchainError  # noqa: E402
from phobos.run import runtime  # noqa: E402

from .test_dag_blocks import StandInDriver  # noqa: E402

ADDRESS = "tcp://10.0.0.7:40000"


@pytest.fixture
def gpu_worker(monkeypatch):
    """A plugin set up on a worker whose runtime reports a GPU, with pycuda.driver a stand-in."""
    driver = StandInDriver()
    pycuda = types.ModuleType("pycuda")
    pycuda.driver = driver
    monkeypatch.setitem(sys.modules, "pycuda", pycuda)
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)
    monkeypatch.setattr(runtime, "gpu_available", lambda: (True, "Stand-in GPU"))
    plugin = worker.PhobosWorker()
    plugin.setup(types.SimpleNamespace(address=ADDRESS))
    monkeypatch.setattr(worker, "get_worker", lambda: types.SimpleNamespace(
        address=ADDRESS, plugins={worker.PLUGIN_NAME: plugin}))
    return plugin


def test_each_mode_gets_its_arrays(gpu_worker, monkeypatch):
    mode, arrays = gpu_worker.arrays("gpu")
    assert mode == "gpu" and isinstance(arrays, DeviceArrays)
    assert gpu_worker.arrays(None) == ("gpu", arrays)  # one context per worker, whoever asks
    assert gpu_worker.arrays("emulate")[0] == "emulate" and isinstance(gpu_worker.arrays("emulate")[1], HostArrays)
    cpu = worker.PhobosWorker()
    cpu.setup(types.SimpleNamespace(address=ADDRESS))
    monkeypatch.setattr(runtime, "gpu_available", lambda: (False, "no driver"))
    assert cpu.arrays(None)[0] == "interpret"  # what mode=None means without a GPU
    with pytest.raises(ToolchainError, match="mode 'gpu' was asked for, but this worker has no GPU: no driver"):
        cpu.arrays("gpu")


def axpy_spec(fragments_x, fragments_y) -> TaskSpec:
    buffers = (BufferSpec((4,), "float32", fragments_x, False), BufferSpec((4,), "float32", fragments_y, True))
    return TaskSpec("axpy (call 1), grid slice N[4:8]", "source", "axpy.phobos", "axpy", {}, None,
                    {"x": ("buffer", 0), "y": ("buffer", 1), "alpha": ("scalar", np.float32(3))},
                    buffers, (1,), "gpu")


def test_a_task_on_a_gpu_worker_runs_on_device_blocks(gpu_worker, monkeypatch):
    _, device = gpu_worker.arrays("gpu")
    seen = {}

    def axpy(x, y, alpha):
        seen.update(x=x.__cuda_array_interface__["data"][0], y=y.__cuda_array_interface__["data"][0])
        out = y.to_host() + alpha * x.to_host()
        device.driver.memcpy_htod(y.pointer, out)

    monkeypatch.setattr(gpu_worker, "kernel", lambda spec, mode: axpy)
    x = np.arange(8, dtype=np.float32)
    with device.current():
        x_block = device.adopt(x)
    y_block = DeviceBlock.arrived(np.ones(8, np.float32))  # from another worker, still in host memory
    spec = axpy_spec((FragmentSpec(0, 0, Box(((4, 8),)), Box(((0, 4),))),),
                     (FragmentSpec(1, 0, Box(((4, 8),)), Box(((0, 4),))),))
    (out,) = worker.run_task(spec, (x_block,), (y_block,))
    assert isinstance(out, DeviceBlock) and out.host is None
    assert seen["x"] == x_block.pointer + 16  # elements 4..8 of x's block, passed without a copy
    assert seen["y"] == out.pointer != y_block.pointer  # a new block for what the task writes
    assert (pickle.loads(pickle.dumps(out)).to_host() == 1 + 3 * x[4:]).all()
    assert y_block.host is None and (y_block.to_host() == 1).all()  # uploaded once, unchanged
    assert [label for label, _ in gpu_worker.log] == [spec.label] and gpu_worker.log[0][1] >= 0


def test_a_failing_task_names_itself_and_the_worker(gpu_worker, monkeypatch):
    def broken(**arguments):
        raise RuntimeError("the kernel fell over")

    monkeypatch.setattr(gpu_worker, "kernel", lambda spec, mode: broken)
    spec = axpy_spec((FragmentSpec(None, 0, Box(((0, 4),)), Box(((0, 4),))),), ())
    with pytest.raises(TaskError) as raised:
        worker.run_task(spec)
    assert str(raised.value) == (f"axpy (call 1), grid slice N[4:8] failed on worker {ADDRESS}: "
                                 f"RuntimeError: the kernel fell over")
    with pytest.raises(TaskError, match=f"block t0\\[0:4\\] failed on worker {ADDRESS}: ValueError: expected a "
                                        f"float32 array of shape \\(4,\\), got float64 \\(4,\\)"):
        worker.make_block("block t0[0:4]", "gpu", (4,), "float32", lambda index: np.zeros(4), (slice(0, 4),))


def test_a_failure_names_the_calls_program_ids_not_the_tasks():
    """A task runs its grid slice as a launch of its own; a device_assert in its program (0, 0, 0) failed
    in program 12 of the call, and says so."""
    from phobos.dag.execute import in_the_call
    spec = axpy_spec((), ())
    spec = TaskSpec(**{**spec.__dict__, "first_programs": ((((("T", 4),), (12, 0, 0))),)})
    interpreted = "a.phobos:5:5: error: device_assert failed: too big\nnote: in program instance (0, 1, 0) of kernel 'k'"
    emulated = "a.phobos:5:5: error: <ptx>:189: trap executed [thread (0,0,0) of CTA (3,0,0)] (in `@%p6 trap;`)"
    suffix = "\n(program ids are the call's: the programs of this task's slice start at (12, 0, 0))"
    assert in_the_call(interpreted, spec, {"T": 4}) == interpreted.replace("(0, 1, 0)", "(12, 1, 0)") + suffix
    assert in_the_call(emulated, spec, {"T": 4}) == emulated.replace("CTA (3,0,0)", "CTA (15, 0, 0)") + suffix
    assert in_the_call(interpreted, spec, {"T": 8}) == interpreted  # not a configuration of the plan: as it is
    assert in_the_call(interpreted, axpy_spec((), ()), {"T": 4}) == interpreted  # the whole grid
