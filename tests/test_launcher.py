# Kernels called like functions, on the CPU: loading, argument binding and
# every error it reports, grid inference, mode selection, the backends'
# argument orders, and inspection.  The GPU is played by tests/launcher_fakes.
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import phobos
from phobos.configuration import config_text
from phobos.run import backends, runtime
from phobos.launch import launcher
from phobos.launch.binding import bind
from phobos.compiler import CompiledKernel
from phobos.errors import LaunchError, PhobosError, ToolchainError
from phobos.ptxcheck import Report
from phobos.toolchain import find_ptxas

from .launcher_fakes import (ADD4, WIDE_ADD4, AXPY, FAKE_DEVICE, FILL_ROWS, TWO_PARAMETERS, TYPES, DeviceArray, FakeGpu,
                             install_cpu_module, random_vectors)


def message(error: pytest.ExceptionInfo) -> str:
    return error.value.message


@pytest.fixture
def gpu() -> FakeGpu:
    return FakeGpu()


@pytest.fixture
def interpreter(monkeypatch):
    return install_cpu_module(monkeypatch, "phobos.run.interpreter", "run")


@pytest.fixture
def emulator(monkeypatch):
    return install_cpu_module(monkeypatch, "phobos.run.emulator", "launch")


# --- loading


def test_import_phobos_loads_neither_the_compiler_nor_pycuda():
    probe = "import sys, phobos; print(sorted(m for m in sys.modules if m.startswith(('phobos.', 'pycuda'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['phobos.errors', 'phobos.log', 'phobos.version']"


def test_public_names_come_from_their_modules():
    assert phobos.jit is launcher.jit and phobos.load is launcher.load and phobos.kernel is launcher.kernel
    from phobos import compiler
    assert phobos.compile is compiler.compile and phobos.compile_to_ptx is compiler.compile_to_ptx
    with pytest.raises(AttributeError, match="no attribute 'run_kernel'"):
        phobos.run_kernel


def test_jit_gives_one_callable_per_kernel(gpu):
    module = phobos.jit(ADD4 + AXPY, mode=gpu)
    assert list(module.kernels) == ["add", "axpy"]
    assert module.add is module.kernels["add"] and module.axpy.name == "axpy"
    assert {"add", "axpy"} <= set(dir(module))
    with pytest.raises(AttributeError, match=r"has no kernel 'sub' \(kernels: add, axpy\)"):
        module.sub


def test_kernel_needs_exactly_one(gpu):
    assert phobos.kernel(ADD4, mode=gpu).name == "add"
    with pytest.raises(PhobosError, match=r"defines 2 kernels \(add, axpy\); use phobos.jit\(src\).<name>"):
        phobos.kernel(ADD4 + AXPY)


def test_load_reads_a_file(tmp_path, gpu):
    path = tmp_path / "kernels.phobos"
    path.write_text(AXPY)
    module = phobos.load(path, mode=gpu)
    assert module.filename == str(path)
    assert repr(module) == f"<phobos module {path}: axpy>"
    with pytest.raises(PhobosError, match=r"cannot read .*missing.phobos: No such file"):
        phobos.load(tmp_path / "missing.phobos")


def test_errors_are_reported_at_jit_time_with_their_location():
    with pytest.raises(PhobosError) as error:
        phobos.jit(AXPY.replace("alpha * x", "alpha * z"), filename="axpy.phobos")
    assert str(error.value).startswith("axpy.phobos:4:34: 'z' is not defined")
    with pytest.raises(PhobosError, match="expected .*"):
        phobos.jit("kernel broken(", filename="broken.phobos")


def test_errors_in_any_configuration_are_reported_at_jit_time():
    source = ADD4.replace("[128, 256, 512, 1024]", "[128, 0]")
    with pytest.raises(PhobosError, match="must be positive"):
        phobos.jit(source)


def test_default_file_names_differ_between_sources():
    first, second = phobos.jit(ADD4, mode="interpret"), phobos.jit(AXPY, mode="interpret")
    assert first.filename.startswith("<string") and first.filename != second.filename
    assert phobos.jit(ADD4, mode="interpret").filename == first.filename


def test_jit_and_load_need_text_and_paths():
    with pytest.raises(PhobosError, match="phobos.jit takes the source text as a str, got bytes"):
        phobos.jit(ADD4.encode())
    with pytest.raises(PhobosError, match="phobos.jit: filename must be a str, got int"):
        phobos.jit(ADD4, filename=3)
    with pytest.raises(PhobosError, match="phobos.load takes a file path, got NoneType"):
        phobos.load(None)


# --- modes


def test_unknown_mode_is_an_error_at_jit_time():
    with pytest.raises(PhobosError, match=r"unknown mode 'cuda' \(modes: gpu, interpret, emulate"):
        phobos.jit(ADD4, mode="cuda")
    with pytest.raises(PhobosError, match="mode must be one of gpu, interpret, emulate, None, or a backend"):
        phobos.jit(ADD4, mode=42)


def test_no_gpu_means_the_interpreter_with_a_notice_naming_both_cpu_modes(monkeypatch, caplog):
    monkeypatch.setattr(runtime, "gpu_available", lambda: (False, "PyCUDA is not installed"))
    monkeypatch.setattr(backends, "_no_gpu_noticed", False)
    add = phobos.kernel(ADD4)
    a, b = random_vectors(8)
    c = np.empty_like(a)
    add(a, b, c)
    np.testing.assert_array_equal(c, a + b)
    assert add._kernel.module.backend() is backends.select_backend("interpret")
    [record] = [r for r in caplog.records if r.name.startswith("phobos")]
    assert record.levelname == "WARNING"
    assert record.getMessage() == (
        "no GPU (PyCUDA is not installed); running kernels on the CPU in the interpreter (mode='interpret'); "
        "mode='emulate' or PHOBOS_MODE=emulate runs the generated PTX in the emulator instead "
        "(slower; checks what a GPU would hide)")
    phobos.kernel(ADD4)(a, b, c)
    assert len([r for r in caplog.records if r.name.startswith("phobos")]) == 1  # once per process


@pytest.mark.parametrize("mode", ["interpret", "emulate", "gpu"])
def test_phobos_mode_names_the_default_mode(monkeypatch, mode):
    monkeypatch.setenv("PHOBOS_MODE", mode)
    monkeypatch.setattr(runtime, "gpu_available", lambda: pytest.fail("the GPU must not be probed"))
    assert backends.select_backend(None) is backends.select_backend(mode)


def test_an_unknown_phobos_mode_is_an_error(monkeypatch):
    monkeypatch.setenv("PHOBOS_MODE", "cuda")
    with pytest.raises(PhobosError, match=r"PHOBOS_MODE=cuda is not a mode \(modes: gpu, interpret, emulate\)"):
        backends.select_backend(None)


def test_phobos_interpret_picks_the_interpreter(monkeypatch, interpreter):
    monkeypatch.setenv("PHOBOS_INTERPRET", "1")
    monkeypatch.setattr(runtime, "gpu_available", lambda: pytest.fail("the GPU must not be probed"))
    a, b = random_vectors(8)
    phobos.kernel(ADD4)(a, b, np.empty_like(a))
    assert len(interpreter.calls) == 1


def test_a_gpu_is_used_when_there_is_one(monkeypatch):
    monkeypatch.setattr(runtime, "gpu_available", lambda: (True, "Fake GPU"))
    assert isinstance(backends.select_backend(None), backends.GpuBackend)


def test_a_missing_cpu_backend_module_is_a_toolchain_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "phobos.run.interpreter", None)
    a, b = random_vectors(8)
    with pytest.raises(ToolchainError, match="mode 'interpret' needs phobos.run.interpreter, which this installation"):
        phobos.kernel(ADD4, mode="interpret")(a, b, np.empty_like(a))


# --- calling: arguments


def test_positional_keyword_and_mixed_arguments_bind_alike(gpu):
    axpy = phobos.kernel(AXPY, mode=gpu)
    x, y = random_vectors(300)
    axpy(x, y, 2, 3, True)
    axpy(y=y, on=True, offset=3, alpha=2, x=x)
    axpy(x, y, 2, on=True, offset=3.0)
    first, *others = [launch.ptx_arguments() for launch in gpu.runs]
    assert first[0] is x and first[1] is y
    assert first[2] == np.float32(2) and first[2].dtype == np.float32
    assert first[3] == 3 and first[3].dtype == np.int32
    assert first[4] == 1 and type(first[4]) is int  # a bool goes to the PTX as its .u8
    assert first[5] == 300
    for arguments in others:
        assert [type(v) for v in arguments] == [type(v) for v in first]
        assert all(a is b if isinstance(a, np.ndarray) else a == b for a, b in zip(arguments, first))


@pytest.mark.parametrize("args, kwargs, expected", [
    ((1, 2, 3, 4, 5, 6), {}, "axpy: takes 5 arguments (x, y, alpha, offset, on), got 6 positional"),
    ((), {"x": 1, "y": 2, "alpah": 3}, "axpy: no parameter named 'alpah' (parameters: x, y, alpha, offset, on); "
                                        "did you mean 'alpha'?"),
    ((), {"N": 3}, "axpy: 'N' is a size, bound from the shapes of the tensors; it is not an argument"),
    ((1, 2), {"x": 1}, "axpy: argument 'x' given twice (by position and by name)"),
    ((1, 2, 3), {}, "axpy: missing arguments 'offset', 'on' (parameters: x, y, alpha, offset, on)"),
    ((1, 2, 3, 4), {}, "axpy: missing argument 'on' (parameters: x, y, alpha, offset, on)"),
])
def test_wrong_argument_lists(gpu, args, kwargs, expected):
    with pytest.raises(LaunchError) as error:
        phobos.kernel(AXPY, mode=gpu)(*args, **kwargs)
    assert message(error) == expected
    assert gpu.runs == []


SGEMM_SIGNATURE = """\
kernel sgemm(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N], alpha: f32, beta: f32) {
    let pm = program_id(0)
    let pn = program_id(1)
    C[pm * 16 :+ 16, pn * 16 :+ 16] = alpha * dot(A[pm * 16 :+ 16, 0 :+ 16], B[0 :+ 16, pn * 16 :+ 16])
}
"""


def sgemm_error(A, B, C, alpha=1.5, beta=0.5) -> str:
    with pytest.raises(LaunchError) as error:
        phobos.kernel(SGEMM_SIGNATURE, mode=FakeGpu())(A, B, C, alpha=alpha, beta=beta)
    return message(error)


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape, dtype=np.float32)


def test_size_mismatch_names_the_binding_and_where_it_came_from():
    assert sgemm_error(f32(32, 64), f32(65, 32), f32(32, 32)) == (
        "sgemm: argument 'B': expected a 2-D f32 tensor [K, N] with K = 64 (from 'A'), "
        "got float32 array of shape (65, 32)")
    assert sgemm_error(f32(32, 64), f32(64, 16), f32(32, 17)) == (
        "sgemm: argument 'C': expected a 2-D f32 tensor [M, N] with M = 32 (from 'A'), N = 16 (from 'B'), "
        "got float32 array of shape (32, 17)")


def test_dtype_and_rank_mismatches():
    assert sgemm_error(f32(32, 64).astype(np.float64), f32(64, 16), f32(32, 16)) == (
        "sgemm: argument 'A': expected a 2-D f32 tensor [M, K], got float64 array of shape (32, 64); "
        "convert it: A = A.astype(np.float32)")
    assert sgemm_error(f32(32, 64), f32(64, 16), f32(32, 16).astype(np.float16)) == (
        "sgemm: argument 'C': expected a 2-D f32 tensor [M, N] with M = 32 (from 'A'), N = 16 (from 'B'), got "
        "float16 array of shape (32, 16); convert it: C = C.astype(np.float32), and read the result from the "
        "new 'C'")
    assert sgemm_error(f32(32, 64), f32(64 * 16), f32(32, 16)) == (
        "sgemm: argument 'B': expected a 2-D f32 tensor [K, N] with K = 64 (from 'A'), "
        "got float32 array of shape (1024,)")


def test_non_tensors_are_named():
    assert sgemm_error([[1.0]], f32(1, 1), f32(1, 1)) == (
        "sgemm: argument 'A': expected a 2-D f32 tensor [M, K], got a list")
    assert sgemm_error(f32(1, 1), 2.0, f32(1, 1)) == (
        "sgemm: argument 'B': expected a 2-D f32 tensor [K, N] with K = 1 (from 'A'), got float 2.0")


def test_views_that_cannot_be_taken_as_they_lie_and_read_only_tensors():
    """Strided views are taken as they lie (test_strided_tensors), but for negative strides and, in a tensor the
    kernel writes, elements that overlap."""
    A = f32(32, 64)[:, ::-1]
    assert sgemm_error(A, f32(64, 16), f32(32, 16)) == (
        "sgemm: argument 'A': expected a 2-D f32 tensor [M, K], got a non-contiguous float32 array of shape "
        "(32, 64) with strides (64, -1); kernels take strides of 0 or more: pass a copy, e.g. "
        "np.ascontiguousarray(x) or x.contiguous()")
    C = np.lib.stride_tricks.as_strided(f32(16), (32, 16), (0, 4))  # every row the same memory
    assert sgemm_error(f32(32, 64), f32(64, 16), C) == (
        "sgemm: argument 'C': expected a 2-D f32 tensor [M, N] with M = 32 (from 'A'), N = 16 (from 'B'), got a "
        "non-contiguous float32 array of shape (32, 16) with strides (0, 1); the kernel writes it, and its "
        "elements overlap (a zero or overlapping stride): pass a copy, e.g. np.ascontiguousarray(x) or "
        "x.contiguous()")
    C = f32(32, 16)
    C.flags.writeable = False
    assert sgemm_error(f32(32, 64), f32(64, 16), C) == (
        "sgemm: argument 'C': expected a 2-D f32 tensor [M, N] with M = 32 (from 'A'), N = 16 (from 'B'), "
        "got a read-only float32 array of shape (32, 16); the kernel writes 'C'")


def test_arrays_in_a_foreign_byte_order_are_refused_before_anything_runs(gpu):
    advice = "; pass one in the machine's byte order, e.g. x.astype(x.dtype.newbyteorder('='))"
    foreign = ">" if np.little_endian else "<"
    order = "big" if np.little_endian else "little"
    a = np.arange(4, dtype=f"{foreign}f4")
    with pytest.raises(LaunchError) as error:
        phobos.kernel(ADD4, mode=gpu)(a, np.ones(4, np.float32), np.empty(4, np.float32))
    assert message(error) == (f"add: argument 'a': expected a 1-D f32 tensor [N], got {order}-endian float32 "
                              f"array of shape (4,){advice}")
    with pytest.raises(LaunchError) as error:
        phobos.kernel(ADD4, mode=gpu)(np.ones(4, np.float32), np.ones(4, np.float32),
                                      DeviceArray((4,), f"{foreign}f4"))
    assert message(error) == (f"add: argument 'c': expected a 1-D f32 tensor [N] with N = 4 (from 'a'), "
                              f"got {order}-endian float32 tests.DeviceArray of shape (4,){advice}")
    assert gpu.runs == []
    phobos.kernel(ADD4, mode=gpu)(a.astype(a.dtype.newbyteorder("=")), np.ones(4, np.float32),
                                  np.empty(4, np.float32))
    assert len(gpu.runs) == 1
    one_byte = "kernel k(x: tensor<i8>[N], y: tensor<i32>[N]) { y[0 :+ 4] = x[0 :+ 4] }"
    phobos.kernel(one_byte, mode=gpu)(np.zeros(4, np.int8).view(f"{foreign}i1"), np.zeros(4, np.int32))
    assert len(gpu.runs) == 2  # one-byte elements have no byte order


def test_a_foreign_byte_order_array_never_reaches_the_emulator():
    c = np.zeros(4, np.float32)
    with pytest.raises(LaunchError, match="big-endian|little-endian"):
        phobos.kernel(ADD4, mode="emulate")(np.arange(4, dtype=">f4" if np.little_endian else "<f4"),
                                            np.ones(4, np.float32), c)
    assert (c == 0).all()


def test_read_only_inputs_are_fine(gpu):
    A = f32(32, 64)
    A.flags.writeable = False
    phobos.kernel(SGEMM_SIGNATURE, mode=gpu)[(2, 1)](A, f32(64, 16), f32(32, 16), 1.0, 0.0)
    assert len(gpu.runs) == 1


def test_literal_dimensions_and_element_types():
    types = phobos.kernel(TYPES, mode=FakeGpu())
    n = 100
    good = dict(h=np.ones(n, np.float16), i=np.arange(n, dtype=np.int32), m=np.ones(n, bool),
                w=np.ones((4, n), np.float32), out=np.empty(n, np.float32))
    types(**good)
    with pytest.raises(LaunchError) as error:
        types(**{**good, "w": np.ones((3, n), np.float32)})
    assert message(error) == ("types: argument 'w': expected a 2-D f32 tensor [4, N] with N = 100 (from 'h'), "
                              "got float32 array of shape (3, 100)")
    with pytest.raises(LaunchError) as error:
        types(**{**good, "i": np.arange(n)})
    assert message(error) == ("types: argument 'i': expected a 1-D i32 tensor [N] with N = 100 (from 'h'), "
                              "got int64 array of shape (100,); convert it: i = i.astype(np.int32)")
    with pytest.raises(LaunchError) as error:
        types(**{**good, "m": np.ones(n, np.uint8)})
    assert message(error) == ("types: argument 'm': expected a 1-D bool tensor [N] with N = 100 (from 'h'), "
                              "got uint8 array of shape (100,); convert it: m = m.astype(np.bool_)")


def test_a_size_repeated_within_one_tensor_must_agree():
    square = "kernel sq(x: tensor<f32>[N, N]) { x[program_id(0) :+ 1, 0 :+ 4] = full([1, 4], 0.0) }"
    with pytest.raises(LaunchError) as error:
        phobos.kernel(square, mode=FakeGpu())[(1,)](f32(3, 4))
    assert message(error) == ("sq: argument 'x': expected a 2-D f32 tensor [N, N] with N = 3 (from 'x'), "
                              "got float32 array of shape (3, 4)")


def test_device_memory_is_passed_by_address(gpu):
    add = phobos.kernel(ADD4, mode=gpu)
    a = DeviceArray((1000,), address=0x1000)
    b = DeviceArray((1000,), address=0x2000, read_only=True)
    c = np.empty(1000, np.float32)
    add.configure(BLOCK=256)(a, b, c)
    (launch,) = gpu.runs
    assert launch.ptx_arguments()[:3] == [0x1000, 0x2000, c]
    assert launch.copy_back() == [2]


def test_device_memory_mismatches():
    def add_error(*args) -> str:
        with pytest.raises(LaunchError) as error:
            phobos.kernel(ADD4, mode=FakeGpu())(*args)
        return message(error)

    c = np.empty(10, np.float32)
    assert add_error(DeviceArray((10,), "<f8"), f32(10), c) == (
        "add: argument 'a': expected a 1-D f32 tensor [N], got float64 tests.DeviceArray of shape (10,)")
    assert add_error(DeviceArray((10,), strides=(6,)), f32(10), c).endswith(
        "got a non-contiguous float32 tests.DeviceArray of shape (10,) with strides None; its strides are not "
        "whole elements: pass a copy, e.g. np.ascontiguousarray(x) or x.contiguous()")
    assert add_error(f32(10), f32(10), DeviceArray((10,), read_only=True)) == (
        "add: argument 'c': expected a 1-D f32 tensor [N] with N = 10 (from 'a'), got a read-only float32 "
        "tests.DeviceArray of shape (10,); the kernel writes 'c'")
    assert add_error(DeviceArray((2**31,)), f32(10), c) == (  # a tensor past i32 is fine (64-bit indices)
        "add: argument 'b': expected a 1-D f32 tensor [N] with N = 2147483648 (from 'a'), got float32 array of "
        "shape (10,)")

    class Broken:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("Can't export tensors that require grad")

    assert add_error(Broken(), f32(10), c) == (
        "add: argument 'a': expected a 1-D f32 tensor [N], got a tests.Broken "
        "(its __cuda_array_interface__ is unusable: Can't export tensors that require grad)")


def test_c_contiguous_strides_are_accepted(gpu):
    x = DeviceArray((1, 4, 3), strides=(999, 12, 4))  # the stride of an extent-1 axis does not matter
    phobos.kernel("kernel k(x: tensor<f32>[A, B, C]) { x[0 :+ 1, 0 :+ 1, 0 :+ 1] = full([1, 1, 1], 0.0) }",
                  mode=gpu)(x)
    assert len(gpu.runs) == 1


def test_cpu_modes_take_numpy_arrays_only(interpreter):
    with pytest.raises(LaunchError) as error:
        phobos.kernel(ADD4, mode="interpret")(DeviceArray((10,)), f32(10), f32(10))
    assert message(error) == ("add: argument 'a': expected a 1-D f32 tensor [N], got float32 "
                              "tests.DeviceArray of shape (10,); mode 'interpret' runs on the CPU and "
                              "takes numpy arrays")


@pytest.mark.parametrize("name, value, expected", [
    ("alpha", "2", "expected an f32 number, got str '2'"),
    ("alpha", True, "expected an f32 number, got bool True"),
    ("alpha", 1e40, "expected an f32 number, got float 1e+40 (out of range for f32)"),
    ("alpha", 10**400, "expected an f32 number, got int " + repr(10**400) + " (out of range for f32)"),
    ("alpha", np.ones(1), "expected an f32 number, got float64 array of shape (1,)"),
    ("offset", 2.5, "expected an i32 integer, got float 2.5 (not an integer)"),
    ("offset", float("nan"), "expected an i32 integer, got float nan (not an integer)"),
    ("offset", 2**31, "expected an i32 integer, got int 2147483648 (out of range [-2147483648, 2147483647])"),
    ("offset", np.int64(-2**31 - 1), "expected an i32 integer, got int64 -2147483649 "
                                     "(out of range [-2147483648, 2147483647])"),
    ("offset", None, "expected an i32 integer, got None"),
    ("on", 1, "expected a bool, got int 1"),
])
def test_scalar_mismatches(name, value, expected):
    x, y = random_vectors(10)
    arguments = dict(x=x, y=y, alpha=1.0, offset=0, on=False)
    with pytest.raises(LaunchError) as error:
        phobos.kernel(AXPY, mode=FakeGpu())(**{**arguments, name: value})
    assert message(error) == f"axpy: argument '{name}': {expected}"


@pytest.mark.parametrize("name, value, converted", [
    ("alpha", 3, np.float32(3)),
    ("alpha", np.float64(0.1), np.float32(0.1)),
    ("offset", 7.0, np.int32(7)),
    ("offset", np.uint8(200), np.int32(200)),
    ("on", np.bool_(True), np.bool_(True)),
])
def test_scalar_conversions(name, value, converted):
    x, y = random_vectors(10)
    call = bind("axpy", phobos.kernel(AXPY, mode=FakeGpu())._kernel.info.params, ["N"], (x, y),
                {"alpha": 1.0, "offset": 0, "on": False, name: value})
    assert call.scalars[name] == converted and call.scalars[name].dtype == converted.dtype


# --- grids


def test_the_grid_is_inferred_per_configuration(gpu):
    add = phobos.kernel(ADD4, mode=gpu)
    a, b = random_vectors(1000)
    c = np.empty_like(a)
    add.configure(BLOCK=256)(a, b, c)
    add.configure(BLOCK=1024)(a, b, c)
    assert [launch.grid for launch in gpu.runs] == [(4, 1, 1), (1, 1, 1)]
    assert [launch.block for launch in gpu.runs] == [(64, 1, 1), (256, 1, 1)]


def test_an_explicit_grid(gpu):
    add = phobos.kernel(ADD4, mode=gpu).configure(BLOCK=128)
    a, b = random_vectors(100)
    add[(7,)](a, b, np.empty_like(a))
    add[5](a, b, np.empty_like(a))
    add[[2, 3]](a, b, np.empty_like(a))
    add[(np.int64(3), 1, 2)](a, b, np.empty_like(a))
    assert [launch.grid for launch in gpu.runs] == [(7, 1, 1), (5, 1, 1), (2, 3, 1), (3, 1, 2)]
    assert all(type(n) is int for n in gpu.runs[-1].grid)


def test_a_grid_function_gets_the_configuration_and_the_sizes(gpu):
    seen = []

    def grid(config, sizes):
        seen.append((config, sizes))
        return (-(-sizes["N"] // config["BLOCK"]), 2)

    a, b = random_vectors(1000)
    phobos.kernel(ADD4, mode=gpu).configure(BLOCK=512)[grid](a, b, np.empty_like(a))
    assert seen == [({"BLOCK": 512}, {"N": 1000})]
    assert gpu.runs[0].grid == (2, 2, 1)


@pytest.mark.parametrize("grid, expected", [
    ((1, 2, 3, 4), "got (1, 2, 3, 4)"),
    ((), "got ()"),
    ((1.5,), "got (1.5,)"),
    ((True,), "got (True,)"),
    ((-1,), "got (-1,)"),
    ((2.0,), "got (2.0,)"),
    ("4", "got '4'"),
])
def test_malformed_grids(grid, expected):
    with pytest.raises(LaunchError) as error:
        phobos.kernel(ADD4, mode=FakeGpu())[grid]
    assert message(error) == f"add: a grid is 1 to 3 non-negative integers, or a function grid(config, sizes) " \
                             f"returning them; {expected}"


def test_grids_beyond_the_gpu_limits():
    with pytest.raises(LaunchError) as error:
        phobos.kernel(ADD4, mode=FakeGpu())[(1, 65536)]
    assert message(error) == ("add: grid (1, 65536, 1) is larger than a GPU allows "
                              "(x up to 2147483647, y and z up to 65535)")


def test_a_grid_function_returning_nonsense():
    a, b = random_vectors(10)
    with pytest.raises(LaunchError) as error:
        phobos.kernel(ADD4, mode=FakeGpu()).configure(BLOCK=128)[lambda config, sizes: "many"](a, b, a.copy())
    assert message(error).endswith("; the grid function returned 'many'")


def test_an_axis_without_a_hint_needs_an_explicit_grid(gpu):
    fill = phobos.kernel(FILL_ROWS, mode=gpu)
    x = np.zeros((3, 128), np.float32)
    with pytest.raises(LaunchError) as error:
        fill(x)
    assert message(error) == (
        "fill_rows: cannot infer the grid: the kernel uses program_id(1) or num_programs(1), but stores nothing "
        "at 'program_id(1) * T :+ T' along a tensor size; give the grid: mod.fill_rows[(gx, gy)](...)")
    fill[(2, 3)](x)
    assert gpu.runs[0].grid == (2, 3, 1)


def test_a_single_index_program_id_gives_one_program_per_row(gpu):
    rows = phobos.kernel(FILL_ROWS.replace("program_id(1) * 2", "program_id(1)"), mode=gpu)
    rows(np.zeros((3, 130), np.float32))
    assert gpu.runs[0].grid == (3, 3, 1) == rows.grid


ROW_LOOP = "kernel k(X: tensor<f32>[4, 8]) { for j in range(0, 4) { X[j, 0 :+ 8] = f32(j) } }"


def test_a_store_indexed_by_a_loop_variable_gives_no_grid_hint():
    assert phobos.compile(ROW_LOOP).grid_hint == [None, None, None]


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
def test_a_loop_over_rows_runs_as_one_program(mode):
    k = phobos.kernel(ROW_LOOP, mode=mode)
    x = np.full((4, 8), np.nan, np.float32)
    k(x)
    assert k.grid == (1, 1, 1)
    np.testing.assert_array_equal(x, np.repeat(np.arange(4, dtype=np.float32)[:, None], 8, axis=1))


def test_unused_axes_get_one_program(gpu):
    phobos.kernel(AXPY, mode=gpu)(*random_vectors(1000), 1.0, 0, True)
    assert gpu.runs[0].grid == (8, 1, 1)


def test_empty_tensors_launch_nothing(gpu):
    add = phobos.kernel(ADD4, mode=gpu)
    empty = np.empty(0, np.float32)
    add(empty, empty, empty.copy())
    assert gpu.runs == [] and gpu.timed == []
    assert add.config == {"BLOCK": 128}


# --- backends: what each one is handed


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
@pytest.mark.parametrize("grid", [(0,), (2, 0), (1, 1, 0)])
def test_a_grid_with_a_zero_extent_launches_nothing(mode, grid):
    """Documented in docs/language.md, section 4: no instances, no error (as a Triton launch over an empty grid)."""
    add = phobos.kernel(ADD4, mode=mode)
    a, c = np.ones(8, np.float32), np.zeros(8, np.float32)
    add[grid](a, a, c)
    assert (c == 0).all() and 0 in add.grid
    assert "extent of zero" in (Path(__file__).parent.parent / "docs" / "language.md").read_text()


def test_the_interpreter_gets_the_checked_kernel_and_source_order(interpreter):
    axpy = phobos.kernel(AXPY, mode="interpret")
    x, y = random_vectors(300)
    axpy(x, y, 2, 3, True)
    ((checked, grid, arguments), kwargs), = interpreter.calls
    assert checked.name == "axpy" and grid == (3, 1, 1) and kwargs == {}
    assert arguments[0] is x and arguments[1] is y  # arrays are modified in place
    assert arguments[2:] == [np.float32(2), np.int32(3), np.bool_(True)]
    assert axpy.config == {} and axpy.timings == {"no autotune parameters": "not timed: the only configuration that "
                                                                             "serves the call"}


def test_cpu_modes_take_the_first_configuration_or_the_forced_one(interpreter):
    add = phobos.kernel(ADD4, mode="interpret")
    a, b = random_vectors(1000)
    add(a, b, np.empty_like(a))
    add.configure(BLOCK=512)(a, b, np.empty_like(a))
    assert [call[0][0].config for call in interpreter.calls] == [{"BLOCK": 128}, {"BLOCK": 512}]
    assert [call[0][1] for call in interpreter.calls] == [(8, 1, 1), (2, 1, 1)]


def test_the_emulator_gets_the_ptx_and_ptx_order(emulator):
    axpy = phobos.kernel(AXPY, mode="emulate")
    x, y = random_vectors(300)
    axpy(x, y, 2, 3, True)
    ((ptx, name, grid, block, arguments), kwargs), = emulator.calls
    assert ptx == axpy.ptx and ".entry axpy" in ptx
    output = kwargs.pop("output")  # printf's lines go through the reader of device_assert's failures
    assert output.__self__.asserts == {} and output.__name__ == "write"
    assert (name, grid, block, kwargs) == ("axpy", (3, 1, 1), (32, 1, 1), {"shared_bytes": 0})
    assert arguments[0] is x and arguments[1] is y and arguments[2:] == [np.float32(2), np.int32(3), 1, 300]


def test_the_gpu_backend_loads_once_and_copies_back_written_arrays(monkeypatch):
    launches, loads = [], []
    monkeypatch.setattr(runtime, "device_properties", lambda index: FAKE_DEVICE)
    monkeypatch.setattr(runtime, "load_module",
                        lambda ptx, cubin, device: loads.append(ptx) or f"module of {len(ptx)} chars")
    monkeypatch.setattr(runtime, "launch", lambda *args, **kwargs: launches.append((args, kwargs)))
    monkeypatch.setattr(runtime, "stream_capturing", lambda stream: False)
    gpu = backends.GpuBackend()
    axpy = phobos.kernel(AXPY, mode=gpu)
    x, y = random_vectors(300)
    axpy(x, y, 2, 3, True)
    (module, name, grid, block, arguments), kwargs = launches[0]
    assert module == f"module of {len(axpy.ptx)} chars" and loads == [axpy.ptx]
    assert (name, grid, block) == ("axpy", (3, 1, 1), (32, 1, 1))
    assert arguments[:2] == [x, y] and arguments[2:] == [np.float32(2), np.int32(3), 1, 300]
    assert kwargs == {"shared_bytes": 0, "copy_back": [1], "stream": 0}
    assert gpu.arch() == "sm_90a"  # FAKE_DEVICE is compute capability 9.0: the wgmma target


@pytest.mark.parametrize("capability, arch", [((7, 5), "sm_75"), ((8, 6), "sm_86"), ((8, 9), "sm_89"),
                                              ((9, 0), "sm_90a"), ((10, 0), "sm_90"), ((12, 1), "sm_90")])
def test_the_target_follows_the_compute_capability(capability, arch):
    assert backends.arch_for(capability) == arch  # sm_90a (wgmma) runs on 9.0 only; sm_90 beyond it


def test_gpus_older_than_the_oldest_target_are_refused():
    with pytest.raises(ToolchainError, match="this GPU is sm_70; Phobos generates code for sm_75, sm_80"):
        backends.arch_for((7, 0))


def test_a_configuration_the_gpu_cannot_launch_is_an_error_before_launching():
    small = FakeGpu(props=FAKE_DEVICE.__class__("Small GPU", (9, 0), 1024, 65536, 64))
    a, b = random_vectors(2048)
    with pytest.raises(LaunchError) as error:
        phobos.kernel(ADD4, mode=small).configure(BLOCK=1024)(a, b, np.empty_like(a))
    assert message(error) == ("add: configuration BLOCK=1024 cannot run on this GPU: needs 256 threads per block; "
                              "Small GPU allows 64")
    assert small.runs == []


# --- inspection


def test_inspection_before_and_after_a_call(gpu):
    add = phobos.kernel(ADD4, mode=gpu)
    assert add.config is None and add.timings == {}
    assert isinstance(add.compiled, CompiledKernel) and add.compiled.config == {"BLOCK": 128}
    assert ".entry add" in add.ptx
    add.configure(BLOCK=512)(*random_vectors(1000), np.empty(1000, np.float32))
    assert add.config == {"BLOCK": 512} and add.compiled.config == {"BLOCK": 512}
    assert add.compiled.arch == "sm_90"


def test_inspection_without_a_gpu_shows_the_default_target(monkeypatch):
    monkeypatch.setattr(runtime, "gpu_available", lambda: (False, "no driver"))
    assert phobos.kernel(ADD4).compiled.arch == backends.DEFAULT_ARCH


def test_ptxas_report(gpu):
    try:
        find_ptxas()
    except ToolchainError as error:
        pytest.skip(error.message)
    add = phobos.kernel(ADD4, mode=gpu)
    report = add.ptxas
    assert isinstance(report, Report) and report.ok
    assert report.kernel("add").registers > 0 and report.kernel("add").spill_stores == 0


def test_ptxas_report_without_ptxas(no_ptxas, gpu):
    with pytest.raises(ToolchainError, match="ptxas not found"):
        phobos.kernel(ADD4, mode=gpu).ptxas


def test_repr_shows_the_signature_the_configurations_and_the_last_launch(gpu):
    add = phobos.kernel(ADD4, mode=gpu, filename="add.phobos")
    assert repr(add) == ("<phobos kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) from add.phobos: "
                         "4 configurations (BLOCK in [128, 256, 512, 1024])>")
    gridded = add.configure(BLOCK=256)[(4,)]
    gridded(*random_vectors(1000), np.empty(1000, np.float32))
    assert repr(gridded) == ("<phobos kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) from "
                            "add.phobos: 1 configuration (BLOCK = 256); grid (4, 1, 1); last ran BLOCK=256>")
    axpy = phobos.kernel(AXPY, mode=gpu)
    assert repr(axpy).endswith("axpy(x: tensor<f32>[N], y: tensor<f32>[N], alpha: f32, offset: i32, on: bool) "
                               f"from {axpy._kernel.module.filename}: 1 configuration>")


def test_configure_checks_names_values_and_the_kernel():
    add = phobos.kernel(ADD4, mode=FakeGpu())
    with pytest.raises(PhobosError, match=r"add: no autotune parameter 'BLOK' \(it has: BLOCK\)"):
        add.configure(BLOK=64)
    with pytest.raises(PhobosError, match="add: autotune parameter 'BLOCK' must be an integer, got 64.0"):
        add.configure(BLOCK=64.0)
    with pytest.raises(PhobosError, match="must be positive"):
        add.configure(BLOCK=0)
    assert add.configure(BLOCK=64)._forced == {"BLOCK": 64}


def test_configure_keeps_the_other_parameters_free():
    scale = phobos.kernel(TWO_PARAMETERS, mode=FakeGpu())
    assert scale._kernel.candidates(scale.configure(ROWS=2)._forced) == [{"BLOCK": 128, "ROWS": 2},
                                                                          {"BLOCK": 256, "ROWS": 2}]


# --- the examples, on the CPU


EXAMPLE_SCRIPTS = sorted(p.name for p in (Path(__file__).parent.parent / "examples").glob("*.py")
                         if p.name != "example_support.py" and not p.name.startswith("dag_"))  # dag_*: test_dag_dask
EXAMPLE_EXTRAS = {"attention_torch.py": "torch"}  # scripts that need an optional package


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS)
def test_examples_run_on_the_cpu(script, mode):
    if script in EXAMPLE_EXTRAS:
        pytest.importorskip(EXAMPLE_EXTRAS[script])
    root = Path(__file__).parent.parent
    done = subprocess.run([sys.executable, str(root / "examples" / script), "--mode", mode],
                          capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"mode = {mode}" in done.stdout and ": ok" in done.stdout

def test_the_launcher_reads_kernels_through_kernel_info_only():
    """phobos.launch imports neither the front end nor the middle (the compiler hands it a KernelInfo), and
    the interpreter does not import the compiler driver."""
    package = Path(phobos.__file__).parent
    for path in sorted((package / "launch").glob("*.py")):
        text = path.read_text()
        assert "..frontend" not in text and "..middle" not in text, path.name
    assert "..compiler" not in (package / "run" / "interpreter.py").read_text()
    (info,) = phobos.compiler.kernel_infos(AXPY, "axpy.phobos")
    assert [p.name for p in info.params] == ["x", "y", "alpha", "offset", "on"] and info.size_names == ("N",)
    assert info.axes_used({}) == {0} and info.grid_hint({}) == [("N", 128), None, None]


def test_tensors_past_i32_choose_the_64_bit_variant_where_the_kernel_has_one(monkeypatch):
    import dataclasses
    from .launcher_fakes import DeviceArray, forget_memory
    forget_memory(monkeypatch)
    compiles = []
    real = launcher.compile_kernel

    def recording(kernel, *, arch, config, **options):
        compiles.append(options)
        return real(kernel, arch=arch, config=config, **options)

    monkeypatch.setattr(launcher, "compile_kernel", recording)
    add = phobos.kernel(WIDE_ADD4, mode=FakeGpu()).configure(BLOCK=1024)
    big = [DeviceArray((2**31 + 4099,), address=(i + 1) << 40) for i in range(3)]
    assert add._kernel.info.index_widths == (32, 64)
    add(*big)
    assert add.grid == (-(-(2**31 + 4099) // 1024), 1, 1) and add.compiled.index_bits == 64
    add(*random_vectors(3000), np.empty(3000, np.float32))
    assert compiles == [{"index_bits": 64}, {}]  # and each variant is kept under its own key
    assert add.compiled.index_bits == 32
    add._kernel.info = dataclasses.replace(add._kernel.info, index_widths=(32,))  # a kernel without the variant
    with pytest.raises(LaunchError, match="kernels index tensors with i32, so at most 2147483647 elements"):
        add(*big)


def test_with_64_bit_indices_an_index_that_wraps_in_i32_is_refused_before_any_gpu_work():
    """`program_id(0) * BLOCK` is an i32: over 2^31 + 4099 elements it would wrap and skip the tail."""
    gpu = FakeGpu()
    add = phobos.kernel(ADD4, mode=gpu, filename="add4.phobos")
    with pytest.raises(LaunchError) as error:
        add(*[DeviceArray((2**31 + 4099,), address=(i + 1) << 40) for i in range(3)])
    assert error.value.loc.line == 4 and error.value.message.startswith(
        "add: this index is computed in i32 from program_id and reaches 2147487744 over this call's grid "
        "(16777249, 1, 1); i32 arithmetic wraps")
    assert "i64(program_id(0)) * i64(BLOCK)" in error.value.message
    assert gpu.timed == [] and gpu.runs == [] and gpu.copies == []  # refused before tuning
    add(*[DeviceArray((2**31,), address=(i + 1) << 40) for i in range(3)])  # 64-bit indices, and the last block starts below 2^31
    assert add.compiled.index_bits == 64 and gpu.runs


def test_with_64_bit_indices_configurations_whose_index_wraps_are_not_tuned():
    """A grid of 2^21 + 5 programs: blocks of 1024 would start past 2^31 (and wrap), smaller ones do not."""
    gpu = FakeGpu()
    add = phobos.kernel(ADD4, mode=gpu)[(2**21 + 5,)]
    add(*[DeviceArray((2**31 + 4099,), address=(i + 1) << 40) for i in range(3)])
    skipped = {text: reason for text, reason in add.timings.items() if isinstance(reason, str)}
    assert list(skipped) == ["BLOCK=1024"] and "computed in i32 from program_id" in skipped["BLOCK=1024"]
    assert {config_text(c) for c in gpu.timed_configs()} == {"BLOCK=128", "BLOCK=256", "BLOCK=512"}
    assert add.config != {"BLOCK": 1024}


def test_with_64_bit_indices_a_size_read_as_an_i32_that_does_not_fit_is_refused():
    src = """
kernel fill(x: tensor<f32>[N]) {
    let base = i64(program_id(0)) * 1024
    x[base :+ 1024] = f32(N) + full([1024], 0.0)
}
"""
    with pytest.raises(LaunchError) as error:
        phobos.kernel(src, mode=FakeGpu(), filename="fill.phobos")(DeviceArray((2**31 + 5,)))
    assert error.value.loc.line == 4 and error.value.message.startswith(
        "fill: the kernel reads the size N as an i32, and N = 2147483653 does not fit (the i32 holds -2147483643)")

# --- the target's limits in the CPU modes: what the GPU would refuse is refused on the CPU too
BIG_TILES = """
@autotune(TILE in [{tiles}])
kernel big(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N]) {{
    let a = A[0 :+ TILE, 0 :+ TILE]
    C[0 :+ TILE, 0 :+ TILE] = dot(a, B[0 :+ TILE, 0 :+ TILE])
}}
"""


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
def test_a_configuration_past_the_targets_shared_memory_is_refused_on_the_cpu(mode):
    """The interpreter ran a kernel needing 2105344 bytes of shared memory (sm_90 allows 232448) silently."""
    big = phobos.jit(BIG_TILES.format(tiles="512"), filename="big.phobos", mode=mode).big
    A = np.ones((64, 64), np.float32)
    with pytest.raises(phobos.ResourceError) as info:
        big(A, A, np.zeros((64, 64), np.float32))
    assert str(info.value).startswith("big.phobos:5:31: this needs 2105344 bytes of shared memory; the target "
                                      "allows 232448 per CTA")
    assert info.value.notes[0].message == "in configuration TILE=512 of kernel 'big' for sm_90"


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
def test_the_cpu_modes_skip_configurations_that_do_not_fit_as_the_autotuner_does(mode):
    big = phobos.jit(BIG_TILES.format(tiles="512, 16"), filename="big.phobos", mode=mode).big
    A, C = np.ones((16, 16), np.float32), np.zeros((16, 16), np.float32)
    big(A, A, C)
    assert (C == 16).all() and big.config == {"TILE": 16}
    assert big.timings["TILE=512"].startswith("this needs 2105344 bytes of shared memory")
    assert big.timings["TILE=16"] == (f"not timed: mode '{mode}' runs the first configuration that serves the call "
                                      f"and fits sm_90 (only mode 'gpu' times them)")


def test_more_registers_than_the_target_has_is_refused_on_the_cpu():
    src = """
    @autotune(WARPS in [32])
    kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {
        let a = x[0 :+ 131072]
        let b = y[0 :+ 131072]
        y[0 :+ 131072] = a * b + exp(a) * b
    }"""
    k = phobos.kernel(src, filename="regs.phobos", mode="interpret")
    with pytest.raises(phobos.ResourceError) as info:
        k(np.ones(8, np.float32), np.ones(8, np.float32))
    assert info.value.loc.line == 3  # the kernel
    assert info.value.message.startswith("the compiler estimates ")
    assert "registers per thread, more than 2 times the 64 each of 1024 threads may use" in info.value.message
