# Kernels compiled with 64-bit indices (compile_kernel(index_bits=64): tensor
# dims, size parameters and element coordinates in i64, for tensors with a dim
# of 2^31 or more): ptxas accepts them, and on small sizes they compute what
# the 32-bit kernels compute - the example and test kernels against NumPy in
# the emulator, and the edge contract for far starts.  On a GPU, one runs over
# a tensor of more than 2^31 elements.
from __future__ import annotations

import numpy as np
import pytest

import phobos
from phobos.compiler import compile
from phobos.errors import PhobosError
from phobos.launch import launcher
from phobos.ptxcheck import check
from phobos.run import runtime
from phobos.run.backends import select_backend

from .emulator_support import PTXAS
from .launcher_fakes import forget_memory
from .test_edge_contract import CASES as FAR_CASES
from .test_edge_contract import STORE_THEN_LOAD, expected_store_then_load
from .test_kernels import CASES, ROOT, run_case

WIDE_CASES = ["add-3000", "sgemm-128x64x16", "softmax", "layernorm", "attention", "ew2d-30", "half", "loops",
              "reduce_sum-100", "vector_sum", "rowstats"]


@pytest.fixture
def wide_indices(monkeypatch):
    """Every kernel the launcher compiles gets 64-bit indices; the PTX it ran is recorded."""
    compiled = []

    def compile_wide(*args, **kwargs):
        kernel = phobos.compiler.compile_kernel(*args, **kwargs, index_bits=64)
        compiled.append(kernel)
        return kernel

    forget_memory(monkeypatch)
    monkeypatch.setattr(launcher, "compile_kernel", compile_wide)
    return compiled


def test_the_size_parameters_are_64_bit_and_starts_are_widened_not_truncated():
    src = "kernel k(x: tensor<f32>[N], s: i64) { x[s :+ 4] = 1.0 }"
    narrow, wide = compile(src), compile(src, index_bits=64)
    assert ".param .s32 k_param_2" in narrow.ptx and ".param .s64 k_param_2" in wide.ptx
    assert "cvt.s32.s64" in narrow.ptx and "cvt.s32.s64" not in wide.ptx
    assert wide.index_bits == 64 and "64-bit indices" in wide.ptx.splitlines()[2]
    with pytest.raises(PhobosError, match="index_bits must be 32 or 64, got 16"):
        compile(src, index_bits=16)


@pytest.mark.skipif(PTXAS is None, reason="needs ptxas")
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
@pytest.mark.parametrize("example", ["add", "sgemm", "softmax", "layernorm", "attention", "vector_sum"])
def test_ptxas_accepts_64_bit_indices(example, arch):
    src = (ROOT / "examples" / f"{example}.phobos").read_text()
    kernel = compile(src, arch=arch, index_bits=64, filename=f"examples/{example}.phobos")
    check(kernel.ptx, arch, name=f"{example}.ptx").raise_for_errors()


@pytest.mark.parametrize("case", [c for c in CASES if c.id in WIDE_CASES], ids=lambda c: c.id)
def test_kernels_with_64_bit_indices_in_the_emulator(case, wide_indices):
    run_case(case, "emulate")
    assert wide_indices and all(k.index_bits == 64 and ".param .s64" in k.ptx for k in wide_indices)


@pytest.mark.parametrize("dtype, start", FAR_CASES, ids=[f"{d}-{s}" for d, s in FAR_CASES])
def test_far_starts_with_64_bit_indices(dtype, start, wide_indices):
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    phobos.kernel(STORE_THEN_LOAD.format(dtype=dtype), mode="emulate")[(1,)](x, y, start)
    want_x, want_y = expected_store_then_load(start)
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(y, want_y)
    assert wide_indices[-1].index_bits == 64


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c in CASES if c.id in WIDE_CASES], ids=lambda c: c.id)
def test_kernels_with_64_bit_indices_on_the_gpu(case, wide_indices):
    run_case(case, "gpu")


@pytest.mark.gpu
def test_a_tensor_of_more_than_2_31_elements_on_the_gpu():
    """2^31 + 2048 elements (8.6 GB) and a guard after them, filled by blocks of 1024 through the 64-bit
    kernel launched directly (the launcher's binder still refuses tensors this large)."""
    torch = pytest.importorskip("torch")
    n = 2**31 + 2048
    src = "kernel k(x: tensor<f32>[N]) { x[i64(program_id(0)) * 1024 :+ 1024] = 1.0 }"
    kernel = compile(src, arch=select_backend("gpu").arch(), index_bits=64)
    memory = torch.zeros(n + 4096, dtype=torch.float32, device="cuda")
    runtime.launch(kernel.ptx, "k", (-(-n // 1024),), (kernel.threads,), [memory, n])
    torch.cuda.synchronize()
    assert int((memory[:n] == 1.0).sum()) == n
    assert int(memory[n:].count_nonzero()) == 0
