"""Products of i8 tiles on the tensor cores: `dot` of i32 tiles loaded from i8 tensors runs mma.sync m16n8k32
.s32.s8.s8.s32 (sm_80 and newer, sm_90a too), both operands K-major - A [M, K] as it lies, B as trans(B[N, K]) -
copied as bytes by cp.async; exact sums wrapped to 32 bits (no .satfinite, which clamps them), the same bits as
the CUDA cores' integer multiply-adds (sm_75, or operands not loaded from i8 tensors) and the interpreter, at
ragged sizes with the s8 extremes and accumulators that wrap.  The GPU test runs a K long enough (2^17 products
of -128 * -128) for the products alone to wrap:

    pytest -m gpu tests/test_int8_tensor_cores.py -q
"""
from __future__ import annotations

import numpy as np
import pytest

from phobos.compiler import compile as compile_source
from phobos.ptxcheck import check
from phobos.run import emulator, runtime
from phobos.run.backends import arch_for
from phobos.run.emulator import Module

from . import tensor_core_support as tc
from .emulator_support import PTXAS, ptxas_errors
from .language_support import run

GEMM = """
@autotune(TILE_M in [64, 16], TILE_N in [64, 16], TILE_K in [64, 256], WARPS in [4, 1])
kernel gemm_s8(A: tensor<i8>[M, K], B: tensor<i8>[N, K], C0: tensor<i32>[M, N], C: tensor<i32>[M, N]) {
    var acc: tile<i32>[TILE_M, TILE_N] = C0[program_id(0) * TILE_M :+ TILE_M, program_id(1) * TILE_N :+ TILE_N]
    for kt in range(0, K, TILE_K) {
        acc += dot(A[program_id(0) * TILE_M :+ TILE_M, kt :+ TILE_K],
                   trans(B[program_id(1) * TILE_N :+ TILE_N, kt :+ TILE_K]))
    }
    C[program_id(0) * TILE_M :+ TILE_M, program_id(1) * TILE_N :+ TILE_N] = acc
}
"""
SMALL = {"TILE_M": 64, "TILE_N": 64, "TILE_K": 64, "WARPS": 4}
LONG = {"TILE_M": 16, "TILE_N": 16, "TILE_K": 256, "WARPS": 1}
EXTREMES = np.array([-128, 127, -127, -1, 0, 1], np.int8)
rng = np.random.default_rng(8)


def wrapped(a: np.ndarray, b_nk: np.ndarray, c0: np.ndarray) -> np.ndarray:
    """C0 + A B^T summed exactly, wrapped to i32 (what i32 arithmetic gives in any order)."""
    return (c0.astype(np.int64) + a.astype(np.int64) @ b_nk.astype(np.int64).T).astype(np.int32)


def operands(m: int, n: int, k: int):
    """A [M, K] and B [N, K] mostly at the s8 extremes (rows of -128 and 127 throughout), and C0 within 2^10 of
    the i32 limit the product heads for, so that most sums wrap."""
    a, b = rng.choice(EXTREMES, (m, k)), rng.choice(EXTREMES, (n, k))
    a[0], b[0], a[1], b[1] = -128, -128, 127, -128
    product = a.astype(np.int64) @ b.astype(np.int64).T
    near = rng.integers(0, 2**10, (m, n))
    c0 = np.where(product >= 0, 2**31 - 1 - near, -2**31 + near).astype(np.int32)
    return a, b, c0


def wraps(a, b, c0) -> float:
    """The share of the sums that wrap."""
    exact = c0.astype(np.int64) + a.astype(np.int64) @ b.astype(np.int64).T
    return float((exact != wrapped(a, b, c0)).mean())


def emulated(arch: str, a, b, c0, config=SMALL) -> np.ndarray:
    """C from the PTX compiled for `arch`, in the emulator."""
    k = compile_source(GEMM, arch=arch, config=config)
    (m, kk), n = a.shape, b.shape[0]
    c = np.zeros((m, n), np.int32)
    grid = (-(-m // config["TILE_M"]), -(-n // config["TILE_N"]))
    emulator.launch(k.ptx, k.kernel_name, grid, (k.threads,), [a, b, c0, c, m, kk, n], shared_bytes=k.shared_bytes)
    return c


def fragment_case(warps: int):
    """Per warp A [16, 32], B [32, 8] of s8 extremes and C [16, 8] near the i32 limits: the fragment registers
    (the PTX ISA's tables, tensor_core_support), D = C + A B wrapped to 32 bits, and its exact value."""
    a, b = rng.choice(EXTREMES, (warps, 16, 32)), rng.choice(EXTREMES, (warps, 32, 8))
    c = (rng.integers(-2**12, 2**12, (warps, 16, 8)) + np.where(rng.random((warps, 16, 8)) < 0.5, 2**31, -2**31))
    c = c.astype(np.int64).astype(np.int32)
    exact = c.astype(np.int64) + np.matmul(a.astype(np.int64), b.astype(np.int64))
    args = [tc.pack_fragment(a, "a", "s8", 4), tc.pack_fragment(b, "b", "s8", 2), tc.pack_accumulator(c)]
    return args, exact.astype(np.int32), exact


@pytest.mark.parametrize("model", ["ampere", "hopper"])
def test_mma_s8_instruction_is_exact_and_wraps(model):
    """mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 in the emulator: the integer products and C summed
    exactly, wrapped to 32 bits, on every tensor-core model; ptxas takes the instruction for sm_80."""
    text = tc.mma_fragment_ptx("s8")
    if PTXAS is not None:
        assert ptxas_errors(text, "sm_80") is None
    args, want, exact = fragment_case(8)
    out = np.zeros((8 * 32, 4), np.int32)
    Module(text, "mma.ptx").launch("mma_fragments", 2, 128, args + [out], tensor_cores=model)
    np.testing.assert_array_equal(tc.unpack_accumulator(out), want)
    assert (want != exact).mean() > 0.3  # most sums wrapped


def test_mma_s8_satfinite_clamps():
    """With .satfinite the exact sums are clamped to the s32 range instead of wrapping (PTX ISA, mma:
    "on overflow, the accumulated value is limited to the range MIN_INT32..MAX_INT32")."""
    text = tc.mma_fragment_ptx("s8").replace(".row.col.s32", ".row.col.satfinite.s32")
    if PTXAS is not None:
        assert ptxas_errors(text, "sm_80") is None
    args, wrapped_sums, exact = fragment_case(8)
    out = np.zeros((8 * 32, 4), np.int32)
    Module(text, "mma.ptx").launch("mma_fragments", 2, 128, args + [out])
    want = np.clip(exact, -2**31, 2**31 - 1).astype(np.int32)
    np.testing.assert_array_equal(tc.unpack_accumulator(out), want)
    assert (want != wrapped_sums).mean() > 0.3  # most sums saturated


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_k_loop_runs_mma_s8(arch):
    k = compile_source(GEMM, arch=arch, config=SMALL)
    assert len(k.notes) == 1 and "dot runs on the tensor cores: mma.sync m16n8k32 s8" in k.notes[0], k.notes
    assert "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" in k.ptx and "satfinite" not in k.ptx
    assert "cp.async.cg.shared.global" in k.ptx and "ldmatrix" in k.ptx  # 16-byte copies of 16 bytes, K-major reads
    assert "mad.lo" not in k.ptx  # no integer multiply-add of the product on the CUDA cores
    check(k.ptx, arch=arch, name=k.kernel_name).raise_for_errors()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_wrapping_sums_are_the_cuda_cores_and_the_interpreters(arch):
    """Ragged M, N, K; the tensor cores' s32 sums wrap as the CUDA cores' (sm_75) and the interpreter's do."""
    a, b, c0 = operands(70, 100, 330)
    want = wrapped(a, b, c0)
    assert wraps(a, b, c0) > 0.5
    np.testing.assert_array_equal(emulated(arch, a, b, c0), want)
    np.testing.assert_array_equal(emulated("sm_75", a, b, c0), want)
    *_, c = run(GEMM, "interpret", a, b, c0, np.zeros_like(c0), config=SMALL, grid=(2, 2))
    np.testing.assert_array_equal(c, want)


STRAIGHT = """
kernel k(a: tensor<i8>[32, 64], b: tensor<i8>[16, 64], c: tensor<i32>[32, 16], d: tensor<i32>[32, 16]) {
    let x = a[0 :+ 32, 0 :+ 64]
    c[0 :+ 32, 0 :+ 16] = dot(x, trans(b[0 :+ 16, 0 :+ 64]))
    d[0 :+ 32, 0 :+ 16] = dot(x, trans(a[0 :+ 16, 0 :+ 64])) + x[0 :+ 32, 0 :+ 16]
}
"""


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
def test_operands_held_in_registers_are_stored_as_bytes(mode):
    """Loaded outside a K loop, one of them used twice: the registers' s8 values are stored K-major as bytes
    (B as B^T) and read by ldmatrix; `emulate` checks the PTX with ptxas for sm_75 and sm_90 too."""
    notes = compile_source(STRAIGHT, arch="sm_80").notes
    assert len(notes) == 2 and all("mma.sync m16n8k32 s8" in note for note in notes), notes
    a, b = rng.choice(EXTREMES, (32, 64)), rng.choice(EXTREMES, (16, 64))
    *_, c, d = run(STRAIGHT, mode, a, b, np.zeros((32, 16), np.int32), np.zeros((32, 16), np.int32))
    wide = a.astype(np.int64)
    np.testing.assert_array_equal(c, wide @ b.astype(np.int64).T)
    np.testing.assert_array_equal(d, wide @ wide[:16].T + wide[:, :16])


def test_before_sm_80_the_cuda_cores_multiply():
    k = compile_source(GEMM, arch="sm_75", config=SMALL)
    assert "CUDA cores: the target has no s8 tensor cores (sm_80 and newer have them)" in k.notes[0], k.notes


NOT_S8 = """
kernel k(a: tensor<{ta}>[32, 64], b: tensor<{tb}>[{bshape}], c: tensor<i32>[32, 16]) {{
    c[0 :+ 32, 0 :+ 16] = dot(a[0 :+ 32, 0 :+ 64], {b})
}}
"""
FALLBACKS = {
    "i16": (dict(ta="i16", tb="i16", bshape="16, 64", b="trans(b[0 :+ 16, 0 :+ 64])"),
            "its i32 operands are not both loaded from i8 tensors"),
    "i32 times i8": (dict(ta="i32", tb="i8", bshape="16, 64", b="trans(b[0 :+ 16, 0 :+ 64])"),
                     "its i32 operands are not both loaded from i8 tensors"),
    "computed": (dict(ta="i8", tb="i8", bshape="16, 64", b="trans(b[0 :+ 16, 0 :+ 64] + 1)"),
                 "its i32 operands are not both loaded from i8 tensors"),
    "N-major B": (dict(ta="i8", tb="i8", bshape="64, 16", b="b[0 :+ 64, 0 :+ 16]"),
                  "the tensor cores read B K-major (8-bit mma.sync and wgmma have no transposed operands), but B "
                  "is the [K, N] slice at 3:53, N-major as it lies; give B as an [N, K] tensor and write "
                  "dot(a, trans(b[...]))"),
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_other_integer_products_stay_on_the_cuda_cores(case):
    """i16 tiles, i32 ones, values computed from i8 loads, or an i8 B that is not K-major: the CUDA cores, exact
    and wrapping as before, and the note says why."""
    fields, why = FALLBACKS[case]
    src = NOT_S8.format(**fields)
    k = compile_source(src, arch="sm_80")
    assert len(k.notes) == 1 and f":3:27: dot runs on the CUDA cores: {why}" in k.notes[0], k.notes
    assert "mma.sync.aligned" not in k.ptx
    wide = {"i8": np.int8, "i16": np.int16, "i32": np.int32}
    a = rng.integers(-128, 128, (32, 64)).astype(wide[fields["ta"]])
    b = rng.integers(-128, 128, [int(x) for x in fields["bshape"].split(", ")]).astype(wide[fields["tb"]])
    if fields["ta"] == "i32":
        a[:4] = 2**31 - 1  # products that wrap
    b_kn = b if fields["bshape"] == "64, 16" else (b.astype(np.int64) + (case == "computed")).T
    want = (a.astype(np.int64) @ b_kn.astype(np.int64)).astype(np.int32)
    for mode in ("interpret", "emulate"):
        *_, c = run(src, mode, a, b, np.zeros((32, 16), np.int32))
        np.testing.assert_array_equal(c, want, err_msg=mode)


@pytest.mark.gpu
def test_gpu_mma_s8_instruction_matches_the_emulator():
    """The one-instruction kernel on 512 warps: the GPU's D bit for bit the emulator's and the wrapped sums."""
    if tuple(runtime.device_properties().compute_capability) < (8, 0):
        pytest.skip("mma.sync m16n8k32 .s8 needs compute capability 8.0 or newer")
    text = tc.mma_fragment_ptx("s8")
    args, want, _ = fragment_case(512)
    gpu, emulated = np.zeros((512 * 32, 4), np.int32), np.zeros((512 * 32, 4), np.int32)
    runtime.launch(text, "mma_fragments", 128, 128, args + [gpu], timeout_s=60)
    Module(text, "mma.ptx").launch("mma_fragments", 128, 128, args + [emulated])
    np.testing.assert_array_equal(tc.unpack_accumulator(emulated), want)
    np.testing.assert_array_equal(gpu, emulated)


@pytest.mark.gpu
@pytest.mark.parametrize("config", [SMALL, LONG], ids=["64x64x64", "16x16x256"])
def test_gpu_matches_the_interpreter(config):
    """On the GPU (mma.sync s8 on sm_80 and newer), bit for bit the interpreter's and the wrapped exact sums: at
    ragged sizes with wrapping accumulators, and with K = 2^17 + 300 of -128 * -128 from zero, whose products
    alone wrap."""
    long = config is LONG
    a, b, c0 = operands(13, 9, 2**17 + 300) if long else operands(200, 136, 1000)
    if long:
        a[2:], b[2:], c0[:] = -128, -128, 0
    want = wrapped(a, b, c0)
    assert wraps(a, b, c0) > 0.5
    grid = (-(-a.shape[0] // config["TILE_M"]), -(-b.shape[0] // config["TILE_N"]))
    arch = arch_for(tuple(runtime.device_properties().compute_capability))
    notes = compile_source(GEMM, arch=arch, config=config).notes
    assert "mma.sync m16n8k32 s8" in notes[0], (arch, notes)
    outputs = {}
    for mode in ("gpu", "interpret"):
        *_, c = run(GEMM, mode, a, b, c0, np.zeros_like(c0), config=config, grid=grid)
        outputs[mode] = c
    np.testing.assert_array_equal(outputs["interpret"], want)
    np.testing.assert_array_equal(outputs["gpu"], outputs["interpret"])
