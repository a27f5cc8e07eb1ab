# phobos.triton: Triton's kernels compiled by Triton and run in the PTX emulator - the arguments (numpy
# arrays, torch CPU tensors, views and aliases, scalars of every signature type), the grid, the cache,
# the errors (naming the argument; faults at the line of the Triton source) and the detectors.
# Skipped, with the reason, without Triton.
from __future__ import annotations

import inspect
import re
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton", reason="phobos.triton needs Triton (pip install 'phobos-tile[triton]')")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import phobos.triton  # noqa: E402
from phobos.errors import DeviceAssertError, LaunchError, PhobosError  # noqa: E402
from phobos.run.emulator import DeviceAssertTrap, GlobalMemoryRace, MemoryFault, UnsupportedPtx  # noqa: E402


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask) * 2, mask=mask)


@triton.jit
def unmasked_kernel(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src_ptr + offs)
    tl.store(dst_ptr + offs, x)


@triton.jit
def rows_kernel(src_ptr, dst_ptr, src_stride, dst_stride, N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, N)
    tl.store(dst_ptr + row * dst_stride + cols, tl.load(src_ptr + row * src_stride + cols) + 1)


def _line_of(fn, text: str) -> int:
    """The file line of the first line of `fn`'s source containing `text`."""
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_runs_a_kernel_and_writes_into_numpy_arrays():
    x = np.arange(1000, dtype=np.float32)
    y = np.zeros_like(x)
    launch = phobos.triton.emulate(copy_kernel)[lambda meta: (triton.cdiv(1000, meta["BLOCK"]),)](x, y, 1000,
                                                                                                  BLOCK=256)
    np.testing.assert_array_equal(y, 2 * x)
    assert launch.grid == (4, 1, 1) and launch.stats.block == (128, 1, 1)  # num_warps=4 by default
    assert launch.compiled.arch == "sm_90a" and ".target sm_90a" in launch.compiled.ptx


def test_torch_cpu_tensors_and_the_launch_options():
    torch = pytest.importorskip("torch")
    x = torch.arange(300, dtype=torch.float32)
    y = torch.zeros(300)
    launch = phobos.triton.emulate(copy_kernel, arch="sm_80")[(3,)](x, y, 300, BLOCK=128, num_warps=2)
    assert torch.equal(y, 2 * x)
    assert launch.stats.block == (64, 1, 1) and ".target sm_80" in launch.compiled.ptx


def test_strided_views_point_into_the_callers_memory():
    """Rows 64 elements apart: the kernel gets the view's first element and indexes with its strides;
    what it writes lands in the view, nothing beside it."""
    buffer = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)
    out = np.full((8, 48), -1.0, np.float32)
    src, dst = buffer[:, 8:40], out[:, 16:48]
    phobos.triton.emulate(rows_kernel)[(8,)](src, dst, 64, 48, N=32)
    np.testing.assert_array_equal(out[:, 16:48], buffer[:, 8:40] + 1)
    np.testing.assert_array_equal(out[:, :16], -1.0)


@triton.jit
def swap_kernel(a_ptr, b_ptr, stride, N: tl.constexpr):
    offsets = tl.program_id(0) * stride + tl.arange(0, N)
    a = tl.load(a_ptr + offsets)
    b = tl.load(b_ptr + offsets)
    tl.store(a_ptr + offsets, b)
    tl.store(b_ptr + offsets, a)


def test_overlapping_views_share_one_allocation():
    """The two halves of each row swapped: two views whose byte ranges interleave are one buffer in the
    emulator, as on a GPU (copied back one after the other, each would undo the other's writes)."""
    buffer = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)
    want = np.concatenate([buffer[:, 32:], buffer[:, :32]], axis=1)
    phobos.triton.emulate(swap_kernel)[(8,)](buffer[:, :32], buffer[:, 32:], 64, N=32, num_warps=1)
    np.testing.assert_array_equal(buffer, want)


def test_the_same_array_in_and_out():
    x = np.arange(256, dtype=np.float32)
    phobos.triton.emulate(copy_kernel)[(2,)](x, x, 256, BLOCK=128)
    np.testing.assert_array_equal(x, 2 * np.arange(256, dtype=np.float32))


@triton.jit
def scalars_kernel(out_ptr, i32, i64, f32, flag, one, maybe_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr + 0, i32.to(tl.float64))
    tl.store(out_ptr + 1, i64.to(tl.float64))
    tl.store(out_ptr + 2, f32.to(tl.float64))
    tl.store(out_ptr + 3, flag.to(tl.float64))
    tl.store(out_ptr + 4, one + BLOCK)
    if maybe_ptr is not None:
        tl.store(out_ptr + 5, tl.load(maybe_ptr))


def test_scalar_arguments_as_triton_types_them():
    """i32 and i64 by value, fp32 rounded from the double, bools as u1, an int of 1 a constexpr, None a
    constexpr too (the `is not None` branch folded); numpy scalars taken as the Python numbers they are."""
    out = np.zeros(6)
    launch = phobos.triton.emulate(scalars_kernel)[(1,)](out, -7, 2 ** 40 + 3, 0.1, True, 1, None, BLOCK=16)
    np.testing.assert_array_equal(out, [-7, 2 ** 40 + 3, float(np.float32(0.1)), 1, 17, 0])
    signature = launch.compiled.signature
    assert (signature["i32"], signature["i64"], signature["f32"], signature["flag"], signature["one"],
            signature["maybe_ptr"]) == ("i32", "i64", "fp32", "u1", "constexpr", "constexpr")
    source = np.array([5.5])
    phobos.triton.emulate(scalars_kernel)[(1,)](out, np.int32(3), np.int64(-2), np.float32(2.5), np.bool_(False),
                                                2, source, BLOCK=16)
    np.testing.assert_array_equal(out, [3, -2, 2.5, 0, 18, 5.5])


def test_compiled_once_per_specialisation():
    x, y = np.ones(128, np.float32), np.zeros(128, np.float32)
    kernel = phobos.triton.emulate(copy_kernel, arch="sm_80")
    first = kernel.compile(x, y, 128, BLOCK=128)
    assert phobos.triton.emulate(copy_kernel, arch="sm_80").compile(x, y, 100, BLOCK=128) is not first  # n % 16
    assert kernel.compile(np.ones(64, np.float32), y, 32, BLOCK=128) is first  # same types, n divisible by 16
    assert kernel.compile(x, y, 128, BLOCK=64) is not first
    assert phobos.triton.emulate(copy_kernel, arch="sm_90a").compile(x, y, 128, BLOCK=128) is not first


def test_the_grid_callable_sees_the_arguments_by_name():
    x, y = np.ones(500, np.float32), np.zeros(500, np.float32)
    seen = {}

    def grid(meta):
        seen.update(meta)
        return (triton.cdiv(meta["n"], meta["BLOCK"]),)
    phobos.triton.emulate(copy_kernel)[grid](x, y, 500, BLOCK=128)
    assert seen["src_ptr"] is x and seen["dst_ptr"] is y and seen["BLOCK"] == 128
    np.testing.assert_array_equal(y, 2)


def test_num_ctas_launches_clusters_of_that_many_ctas():
    """sm_90a with num_ctas=2: grid[0] x 2 CTAs in clusters of 2 (.reqnctapercluster), a program each."""
    x, y = np.arange(512, dtype=np.float32), np.zeros(512, np.float32)
    launch = phobos.triton.emulate(copy_kernel)[(4,)](x, y, 512, BLOCK=128, num_ctas=2)
    assert launch.stats.grid == (8, 1, 1) and ".reqnctapercluster 2" in launch.compiled.ptx
    np.testing.assert_array_equal(y, 2 * x)


def test_an_empty_grid_runs_nothing():
    y = np.zeros(8, np.float32)
    launch = phobos.triton.emulate(copy_kernel)[(0,)](np.ones(8, np.float32), y, 8, BLOCK=8)
    assert launch.stats is None and not y.any()


def test_an_out_of_bounds_access_points_at_the_triton_line():
    x, y = np.ones(100, np.float32), np.zeros(100, np.float32)
    with pytest.raises(MemoryFault) as caught:
        phobos.triton.emulate(unmasked_kernel)[(1,)](x, y, BLOCK=128)
    error = caught.value
    # the file as Triton named it when it compiled the kernel first (its cache keeps the PTX across checkouts)
    assert Path(error.loc.file).name == Path(__file__).name
    assert error.loc.line == _line_of(unmasked_kernel, "tl.load(src_ptr")
    assert "out-of-bounds global load" in error.message and "src_ptr" in error.message
    assert "x = tl.load(src_ptr + offs)" in str(error)  # the source line, quoted with a caret


MOVED_KERNEL = """import triton
import triton.language as tl


@triton.jit
def moved_kernel(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs))
"""


def test_a_fault_quotes_the_line_when_triton_s_cache_names_a_checkout_that_is_gone(tmp_path, monkeypatch):
    # Triton's cache key is the kernel's text, not its path: a second checkout gets the PTX that another
    # process compiled from the first, whose `.file` names the first checkout's file
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    first, second = tmp_path / "first", tmp_path / "second"
    for checkout in (first, second):
        checkout.mkdir()
        (checkout / "moved.py").write_text(MOVED_KERNEL)
    fill_the_cache = ("import runpy, sys, numpy as np, phobos.triton\n"
                      "kernel = runpy.run_path(sys.argv[1])['moved_kernel']\n"
                      "phobos.triton.emulate(kernel, check_races=False)[(1,)](np.ones(128, np.float32), "
                      "np.zeros(128, np.float32), BLOCK=128)\n")
    subprocess.run([sys.executable, "-c", fill_the_cache, str(first / "moved.py")], check=True)
    (first / "moved.py").unlink()
    kernel = runpy.run_path(str(second / "moved.py"))["moved_kernel"]
    x, y = np.ones(100, np.float32), np.zeros(100, np.float32)
    with pytest.raises(MemoryFault) as caught:
        phobos.triton.emulate(kernel)[(1,)](x, y, BLOCK=128)
    assert Path(caught.value.loc.file) == first / "moved.py"  # the PTX came from the cache
    assert caught.value.loc.line == 8 and "tl.store(dst_ptr + offs, tl.load(src_ptr + offs))" in str(caught.value)


@triton.jit
def racing_kernel(out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.program_id(0) + tl.zeros([BLOCK], tl.int32))


def test_races_between_programs_are_reported_and_can_be_turned_off():
    out = np.zeros(64, np.int32)
    with pytest.raises(GlobalMemoryRace) as caught:
        phobos.triton.emulate(racing_kernel)[(2,)](out, BLOCK=64)
    assert caught.value.loc.line == _line_of(racing_kernel, "tl.store")
    phobos.triton.emulate(racing_kernel, check_races=False)[(2,)](out, BLOCK=64)
    assert set(out) == {1}


def test_device_print_lines_go_to_output():
    lines = []

    @triton.jit
    def print_kernel(x_ptr, BLOCK: tl.constexpr):
        tl.device_print("x", tl.load(x_ptr + tl.arange(0, BLOCK)))
    phobos.triton.emulate(print_kernel, output=lines.append)[(1,)](np.arange(4, dtype=np.int32), BLOCK=4, num_warps=1)
    assert "pid (0, 0, 0) idx (3) x: 3\n" in lines


@triton.jit
def assert_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.device_assert(x < 100, "x is too large")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_failing_device_assert_names_its_message(arch):
    """tl.device_assert (debug=True) calls __assertfail where the condition is false: the error gives the
    message, file, line and function as the GPU prints them, at the line of the assert; it is a
    DeviceAssertError, as a Phobos kernel's failing device_assert is.  Where the condition holds, nothing."""
    kernel = phobos.triton.emulate(assert_kernel, arch=arch)
    kernel[(1,)](np.array([1, 2, 3, 4], np.int32), BLOCK=4, num_warps=1, debug=True)
    with pytest.raises(DeviceAssertError) as info:
        kernel[(1,)](np.array([1, 2, 300, 4], np.int32), BLOCK=4, num_warps=1, debug=True)
    line = _line_of(assert_kernel, "tl.device_assert")
    assert isinstance(info.value, DeviceAssertTrap)
    # the file as Triton compiled it (its cache may hold the kernel compiled from a copy of this file)
    assert f"/{Path(__file__).name}:{line}: unknown: Assertion `x is too large` failed" in info.value.message
    assert "[thread (2,0,0) of CTA (0,0,0)]" in info.value.message  # the first thread holding element 2
    assert info.value.loc.line == line


@triton.jit
def divide_kernel(a_ptr, b_ptr, q_ptr, r_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a, b = tl.load(a_ptr + offs), tl.load(b_ptr + offs)
    tl.store(q_ptr + offs, a // b)
    tl.store(r_ptr + offs, a % b)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_integer_division_by_zero_goes_on_as_on_the_gpu(arch):
    """Triton's // and % of int32 by a zero divisor run on (no fault), with what an H100 gave for this kernel:
    // is div.s32, all ones (-1); % is a - (a // b) * b (LLVM's combine of the two), so the dividend."""
    a, b = np.array([-7, 7, -5, 2 ** 31 - 1], np.int32), np.array([0, 0, -3, -2], np.int32)
    q, r = np.zeros(4, np.int32), np.zeros(4, np.int32)
    launch = phobos.triton.emulate(divide_kernel, arch=arch)[(1,)](a, b, q, r, BLOCK=4)
    assert "div.s32" in launch.compiled.ptx
    np.testing.assert_array_equal(q, [-1, -1, 1, -1073741823])
    np.testing.assert_array_equal(r, [-7, 7, -2, 1])


def test_host_tensor_descriptors_are_tma_maps_on_sm_90a():
    torch = pytest.importorskip("torch")
    from triton.tools.tensor_descriptor import TensorDescriptor

    @triton.jit
    def tile_copy(src_desc, dst_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        m, n = tl.program_id(0) * BLOCK_M, tl.program_id(1) * BLOCK_N
        dst_desc.store([m, n], src_desc.load([m, n]) * 3)
    for arch, tma in (("sm_90a", True), ("sm_80", False)):
        src = torch.arange(64 * 48, dtype=torch.float32).reshape(64, 48)
        dst = torch.zeros(64, 48)
        launch = phobos.triton.emulate(tile_copy, arch=arch)[(2, 3)](
            TensorDescriptor.from_tensor(src, [32, 16]), TensorDescriptor.from_tensor(dst, [32, 16]),
            BLOCK_M=32, BLOCK_N=16)
        assert torch.equal(dst, src * 3)
        assert ("cp.async.bulk.tensor" in launch.compiled.ptx) == tma


def test_bad_arguments_name_the_parameter():
    x = np.zeros(16, np.float32)
    kernel = phobos.triton.emulate(copy_kernel)
    with pytest.raises(LaunchError, match="argument src_ptr of copy_kernel: list is not a kernel argument"):
        kernel[(1,)]([1.0, 2.0], x, 2, BLOCK=16)
    with pytest.raises(LaunchError, match="argument dst_ptr of copy_kernel: numpy arrays of complex64"):
        kernel[(1,)](x, np.zeros(16, np.complex64), 16, BLOCK=16)
    with pytest.raises(LaunchError, match="copy_kernel has no parameter 'BLOK'"):
        kernel[(1,)](x, x, 16, BLOK=16)
    with pytest.raises(LaunchError, match="copy_kernel: missing a required argument: 'n'|missing 1 required"):
        kernel[(1,)](x, x, BLOCK=16)
    with pytest.raises(LaunchError, match="the grid must be 1 to 3 non-negative sizes"):
        kernel[(1, 2, 3, 4)](x, x, 16, BLOCK=16)
    torch = pytest.importorskip("torch")
    with pytest.raises(LaunchError, match="argument src_ptr of copy_kernel: a tensor on meta"):
        kernel[(1,)](torch.zeros(16, device="meta"), x, 16, BLOCK=16)


@triton.jit
def annotated_kernel(out_ptr, value: tl.int32):
    tl.store(out_ptr, value)


def test_scalars_must_fit_their_annotated_types():
    out = np.zeros(1, np.int32)
    phobos.triton.emulate(annotated_kernel)[(1,)](out, -5)
    assert out[0] == -5
    with pytest.raises(LaunchError, match=r"argument value of annotated_kernel is i32; 1099511627776 is out of range"):
        phobos.triton.emulate(annotated_kernel)[(1,)](out, 2 ** 40)
    with pytest.raises(LaunchError, match=r"argument value of annotated_kernel is i32; 2.5 is not an integer"):
        phobos.triton.emulate(annotated_kernel)[(1,)](out, 2.5)


def test_bad_targets_and_wrapped_kernels_are_refused_clearly():
    with pytest.raises(LaunchError, match="arch must be one of sm_80, .*got 'sm_100'"):
        phobos.triton.emulate(copy_kernel, arch="sm_100")
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])(copy_kernel)
    with pytest.raises(LaunchError, match=r"Autotuner wraps one: emulate its \.fn"):
        phobos.triton.emulate(tuned)


def test_a_read_only_array_written_is_an_error_naming_it():
    x = np.ones(16, np.float32)
    y = np.zeros(16, np.float32)
    y.flags.writeable = False
    with pytest.raises(LaunchError, match="read-only array passed as dst_ptr"):
        phobos.triton.emulate(copy_kernel)[(1,)](x, y, 16, BLOCK=16)


# ---------------------------------------------------------------------------------------------------- the documentation
DOC = Path(__file__).parent.parent / "docs" / "emulator.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def _doc_blocks() -> list[tuple[str, str]]:
    """(kind, text) of the fenced blocks of docs/emulator.md's section on Triton kernels."""
    section = DOC.read_text().split("## Triton kernels on the CPU", 1)[1].split("\n## ", 1)[0]
    return [(match[1], match[2]) for match in BLOCK.finditer(section)]


def _run_block(code: str, path: Path, capsys) -> str:
    path.write_text(code)  # a file: triton.jit reads the kernel's source
    capsys.readouterr()
    runpy.run_path(str(path), run_name="__main__")
    return capsys.readouterr().out


def test_the_documented_example_runs(tmp_path, capsys):
    python = [text for kind, text in _doc_blocks() if kind == "python"]
    _run_block(python[0], tmp_path / "add_example.py", capsys)  # it asserts its result


def test_the_documented_differences_from_triton_interpret(tmp_path, capsys, monkeypatch):
    """The three differences the docs show, as the emulator gives them and as TRITON_INTERPRET=1 does."""
    pytest.importorskip("torch")
    blocks = _doc_blocks()
    index = next(i for i, (kind, text) in enumerate(blocks) if "def differences" in text)
    code, (_, emulated), (_, interpreted) = blocks[index][1], blocks[index + 1], blocks[index + 2]
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert _run_block(code, tmp_path / "differences.py", capsys) == emulated
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert _run_block(code, tmp_path / "differences_interpreted.py", capsys) == interpreted
