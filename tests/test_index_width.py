# Kernels compiled with 64-bit indices (compile_kernel(index_bits=64): tensor
# dims, size parameters and element coordinates in i64, for tensors with a dim
# of 2^31 or more): ptxas accepts them, and on small sizes they compute what
# the 32-bit kernels compute - the example and test kernels against NumPy in
# the emulator, and the edge contract for far starts; what they do not widen
# (the kernel's own i32 index arithmetic, sizes read by name), which a call
# refuses where it would wrap.  Tensors of more than 2^31 elements on a GPU:
# tests/test_huge_tensors_gpu.py.
from __future__ import annotations

import numpy as np
import pytest

import phobos
from phobos.compiler import compile
from phobos.errors import PhobosError
from phobos.launch import launcher
from phobos.ptxcheck import check

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


# --- what 64-bit indices do not widen: the kernel's own i32 index arithmetic (phobos.middle.index_reach)


def reach_of(src: str, config: dict | None = None):
    (info,) = phobos.compiler.kernel_infos(src, "reach.phobos")
    return info.index_reach(config or info.rules.representative({})[0])


def test_index_reach_follows_affine_i32_arithmetic_of_program_ids():
    reach = reach_of("""
kernel k(x: tensor<f32>[M, N], y: tensor<f32>[N], s: i32) {
    let r = 3 - (program_id(1) * 2 + 1) * -4
    x[i64(r), program_id(0) * 64 - 7 :+ 64] = full([64], 1.0)
    for c in range(0, 4, 1) {
        y[program_id(2) * 8 + c :+ 8] = full([8], 2.0)
        y[s * program_id(0) :+ 8] = full([8], 3.0)
    }
}""")
    forms = {(t.affine.coefficients, t.affine.offset) for t in reach.terms}
    assert ((0, 8, 0), 7) in forms  # 3 - (2 p1 + 1) * -4, widened only after it was computed
    assert ((64, 0, 0), -7) in forms and ((0, 0, 8), 0) in forms  # inside `+ c`, a loop variable
    assert all(t.dtype.value == "i32" for t in reach.terms) and reach.sizes_read == ()
    assert reach.problem("k", (1, 2**28, 1), {"M": 5, "N": 5}) is None  # 8 * (2^28 - 1) + 7 = 2^31 - 1
    problem = reach.problem("k", (1, 2**28 + 1, 1), {"M": 5, "N": 5})  # the whole start first: 8 * 2^28 + 7
    assert problem.loc.line == 3 and "reaches 2147483655 over this call's grid (1, 268435457, 1)" in problem.message
    assert reach.problem("k", (2**25, 2**27, 2**28 - 1), {"M": 5, "N": 5}) is None


def test_index_reach_of_a_widened_start_and_of_sizes_read():
    wide = reach_of("kernel k(x: tensor<f32>[N]) { x[i64(program_id(0)) * 1024 :+ 1024] = full([1024], 1.0) }")
    assert wide.problem("k", (2**31 - 1, 1, 1), {"N": 2**42}) is None
    assert [t.affine.coefficients for t in wide.terms] == [(1, 0, 0)]  # program_id itself: fits any grid
    reads = reach_of("kernel k(x: tensor<f32>[N], y: tensor<f32>[M]) { x[0] = f32(N) }")
    assert [r.name for r in reads.sizes_read] == ["N"]
    assert reads.problem("k", (1, 1, 1), {"N": 2**31 - 1, "M": 2**40}) is None
    assert "N = 2147483648 does not fit" in reads.problem("k", (1, 1, 1), {"N": 2**31, "M": 1}).message


def test_a_widened_program_id_still_gives_the_grid(wide_indices):
    from .launcher_fakes import WIDE_ADD4
    add = phobos.kernel(WIDE_ADD4, mode="emulate").configure(BLOCK=128)
    a, b = np.arange(1000, dtype=np.float32), np.ones(1000, np.float32)
    c = np.zeros_like(a)
    add(a, b, c)
    assert add.grid == (8, 1, 1)
    np.testing.assert_array_equal(c, a + b)
    assert wide_indices[-1].index_bits == 64
