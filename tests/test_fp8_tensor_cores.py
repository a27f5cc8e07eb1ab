"""Products of 8-bit float tiles on the tensor cores: mma.sync m16n8k32 (sm_89 and newer) and wgmma m64nNk32
(sm_90a), both operands K-major - A [M, K] as it lies, B as trans(B[N, K]) - copied by cp.async or by TMA into
persistent CTAs, or held in registers (stored K-major; B as B^T); bit for bit against the tensor-core model in
the emulator on ragged sizes; the model's Hopper accumulation (13 fraction bits); the located error for an
operand that is not K-major, and the CUDA cores before sm_89."""
import re

import numpy as np
import pytest

import phobos
from phobos.compiler import compile as compile_source
from phobos.compiler import compile_kernel, parse_source, pick_kernel
from phobos.constants import f8_bits, f8_values
from phobos.errors import UnsupportedError
from phobos.ptxcheck import check
from phobos.run import emulator
from phobos.run.backends import EMULATED_MULTIPROCESSORS
from phobos.run.tensor_map import kernel_map
from phobos.types import DType

from .tensor_core_support import ROOT, mma_sync_reference, reference

NT = """
@autotune(TILE_M in [64], TILE_N in [64], TILE_K in [128], WARPS in [4], STAGES in [3])
kernel gemm_nt(A: tensor<{t}>[M, K], B: tensor<{t}>[N, K], C: tensor<f32>[M, N]) {{
    var acc: tile<f32>[TILE_M, TILE_N] = 0.0
    for kt in range(0, K, TILE_K) {{
        acc += dot(A[program_id(0) * TILE_M :+ TILE_M, kt :+ TILE_K],
                   trans(B[program_id(1) * TILE_N :+ TILE_N, kt :+ TILE_K]))
    }}
    C[program_id(0) * TILE_M :+ TILE_M, program_id(1) * TILE_N :+ TILE_N] = acc
}}
"""
DTYPES = {"f8e4m3": (DType.F8E4M3, "e4m3"), "f8e5m2": (DType.F8E5M2, "e5m2")}
rng = np.random.default_rng(35)


def operands(m: int, n: int, k: int, dtype: DType):
    """Random codes of A [M, K] and B [N, K] (spread over the format's range) and their values."""
    spread = 4 if dtype is DType.F8E4M3 else 8
    a, b = (f8_bits((rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape))).astype(np.float32),
                    dtype) for shape in ((m, k), (n, k)))
    return a, b, f8_values(a, dtype).astype(np.float64), f8_values(b, dtype).astype(np.float64)


def chained(a_values, b_values_kn, name: str, tile_k: int = 128, mma_sync: bool = False) -> np.ndarray:
    """A @ B as a K loop `acc += dot(...)` of 8-bit floats computes it: each K tile's product summed from zero
    by k32 instructions chained on the tensor cores, then added to acc in f32 (K padded with zeros to whole
    tiles, as its slices are): wgmma's, or (`mma_sync`) Hopper's mma.sync's (tensor_core_support)."""
    pad = -a_values.shape[1] % tile_k
    a, b = np.pad(a_values, ((0, 0), (0, pad))), np.pad(b_values_kn, ((0, pad), (0, 0)))
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k0 in range(0, a.shape[1], tile_k):
        tile = (a[:, k0:k0 + tile_k], b[k0:k0 + tile_k], np.zeros_like(acc), name)
        acc = acc + (mma_sync_reference(*tile) if mma_sync else reference(*tile, step=32))
    return acc


def _arguments(k, values: dict, grid) -> list:
    return [kernel_map(values[p.name], values[p.name].shape, p.map_dtype, p.box) if p.kind == "tensor_map"
            else grid[p.dims[0]] if p.kind == "programs" else values[p.name] for p in k.params]


def _persistent_product(k, tile: tuple[int, int], a, b) -> np.ndarray:
    """C = A @ B^T (codes A [M, K], B [N, K]) by the persistent kernel `k` of `tile` output tiles in the
    emulator, on the CTAs its launch grid starts; C's elements unwritten are NaN."""
    (m, kk), n = a.shape, b.shape[0]
    c = np.full((m, n), np.nan, np.float32)
    grid = (-(-m // tile[0]), -(-n // tile[1]), 1)
    emulator.launch(k.ptx, k.kernel_name, k.launch_grid(grid, EMULATED_MULTIPROCESSORS), (k.threads,),
                    _arguments(k, {"A": a, "B": b, "C": c, "M": m, "N": n, "K": kk}, grid),
                    shared_bytes=k.shared_bytes)
    return c


@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])
@pytest.mark.parametrize("name", list(DTYPES))
def test_k_loop_on_the_tensor_cores(arch, name):
    dtype, ptx = DTYPES[name]
    k = compile_source(NT.format(t=name), arch=arch)
    assert ("wgmma" in k.notes[0]) == (arch == "sm_90a") and "tensor cores" in k.notes[0], k.notes
    assert k.schedules and f".{ptx}" in k.ptx
    if arch == "sm_90a":  # both operands K-major: no transpose immediates
        assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n64k32\.f32\.{ptx}\.{ptx} [^;]*, 1, 1, 1;", k.ptx)
    else:
        assert f"mma.sync.aligned.m16n8k32.row.col.f32.{ptx}.{ptx}.f32" in k.ptx and "ldmatrix" in k.ptx
        assert "cp.async.cg.shared.global" in k.ptx  # 16-byte copies of 16 codes
    check(k.ptx, arch=arch, name=k.kernel_name).raise_for_errors()
    m, n, kk = 70, 136, 200
    a, b, av, bv = operands(m, n, kk, dtype)
    c = np.full((m, n), np.nan, np.float32)
    values = {"A": a, "B": b, "C": c, "M": m, "N": n, "K": kk}
    emulator.launch(k.ptx, k.kernel_name, (-(-m // 64), -(-n // 64)), (k.threads,), _arguments(k, values, None),
                    shared_bytes=k.shared_bytes)
    np.testing.assert_array_equal(c.view(np.uint32), chained(av, bv.T, ptx, mma_sync=arch != "sm_90a").view(np.uint32))


@pytest.mark.parametrize("name", list(DTYPES))
def test_tma_into_persistent_ctas(name):
    """The boxes are 128 codes wide (one swizzled row); the maps move bytes; ragged sizes, the model's bits."""
    dtype, ptx = DTYPES[name]
    k = compile_kernel(pick_kernel(parse_source(NT.format(t=name), "<nt>"), None), arch="sm_90a", tma=True)
    assert k.persistent and any("copied by TMA" in note for note in k.notes), k.notes
    maps = {p.name: (p.box, p.map_dtype) for p in k.params if p.kind == "tensor_map"}
    assert maps == {"A": ((64, 128), name), "B": ((64, 128), name), "C": ((64, 32), "f32")}, maps
    m, n, kk = 136, 200, 400  # rows 16-byte multiples apart, as tensor maps need
    a, b, av, bv = operands(m, n, kk, dtype)
    c = _persistent_product(k, (64, 64), a, b)
    np.testing.assert_array_equal(c.view(np.uint32), chained(av, bv.T, ptx).view(np.uint32))



def test_a_warpgroup_n_of_256_promotes_chunk_by_chunk_within_the_registers_setmaxnreg_gives():
    """128 x 256 tiles on two consumer warpgroups (acc 128 registers a thread): each 128-column chunk of the
    product is waited for and added before the next is issued, which ptxas fits in the 232 registers
    setmaxnreg gives the consumers - `.minnctapersm 1` lets it honour setmaxnreg (without it ptxas may drop
    the instruction, "C7508: 'setmaxnreg' ignored") - where two chunks in flight spilled 452 bytes a thread;
    the model's bits in the emulator on ragged sizes."""
    source = NT.replace("TILE_M in [64], TILE_N in [64]", "TILE_M in [128], TILE_N in [256]").replace(
        "WARPS in [4]", "WARPS in [8]").format(t="f8e4m3")
    k = compile_kernel(pick_kernel(parse_source(source, "<nt>"), None), arch="sm_90a", tma=True)
    assert k.persistent and ".minnctapersm 1" in k.ptx and "setmaxnreg.inc.sync.aligned.u32 232" in k.ptx
    assert "wgmma.wait_group.sync.aligned 1;" not in k.ptx  # no chunk's group is left in flight
    report = check(k.ptx, arch="sm_90a", name=k.kernel_name).kernel(k.kernel_name)
    assert report.spill_stores == 0 and not any("C7508" in a for a in report.advisories), report
    m, n, kk = 130, 264, 256
    a, b, av, bv = operands(m, n, kk, DType.F8E4M3)
    c = _persistent_product(k, (128, 256), a, b)
    np.testing.assert_array_equal(c.view(np.uint32), chained(av, bv.T, "e4m3").view(np.uint32))


def test_two_consumer_teams_take_promoted_8_bit_tiles_in_turn():
    """PINGPONG=1 on an 8-bit product: two teams of one warpgroup, each with a 128 x 128 tile's accumulator and
    its promoted chunks (no spills), take the tiles in turn; the model's bits in the emulator on ragged
    sizes over more tiles than CTAs."""
    source = NT.replace("TILE_M in [64], TILE_N in [64]", "TILE_M in [128], TILE_N in [128]").format(t="f8e4m3")
    k = compile_kernel(pick_kernel(parse_source(source, "<nt>"), None), arch="sm_90a", tma=True,
                       config={"PINGPONG": 1})
    assert k.persistent and k.threads == 384 and any("2 teams of 128 threads" in n for n in k.notes)
    report = check(k.ptx, arch="sm_90a", name=k.kernel_name).kernel(k.kernel_name)
    assert report.spill_stores == 0, report
    m, n, kk = 260, 264, 256  # 3 x 3 tiles on the emulator's CTAs
    a, b, av, bv = operands(m, n, kk, DType.F8E4M3)
    c = _persistent_product(k, (128, 128), a, b)
    np.testing.assert_array_equal(c.view(np.uint32), chained(av, bv.T, "e4m3").view(np.uint32))

IN_REGISTERS = """
kernel k(x: tensor<f32>[32, 64], y: tensor<f32>[64, 16], c: tensor<f32>[32, 16]) {
    c[0 :+ 32, 0 :+ 16] = dot(f8e4m3(x[0 :+ 32, 0 :+ 64]), f8e4m3(y[0 :+ 64, 0 :+ 16] * 0.5))
}
"""


@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])
def test_operands_computed_in_registers_are_stored_k_major(arch):
    """A [M, K] and B [K, N] made in registers: A stored as it is, B as B^T; read by ldmatrix as K-major."""
    k = compile_source(IN_REGISTERS, arch=arch)
    assert "mma.sync m16n8k32 f8e4m3" in k.notes[0], k.notes
    x = (rng.standard_normal((32, 64)) * 4).astype(np.float32)
    y = (rng.standard_normal((64, 16)) * 4).astype(np.float32)
    c = np.full((32, 16), np.nan, np.float32)
    emulator.launch(k.ptx, "k", (1,), (k.threads,), [x, y, c], shared_bytes=k.shared_bytes)
    e4m3 = DType.F8E4M3
    a = f8_values(f8_bits(x, e4m3), e4m3).astype(np.float64)
    b = f8_values(f8_bits(y * np.float32(0.5), e4m3), e4m3).astype(np.float64)
    np.testing.assert_array_equal(c.view(np.uint32), chained(a, b, "e4m3", tile_k=64, mma_sync=True).view(np.uint32))


NN = """
kernel gemm_nn(A: tensor<f8e4m3>[M, K], B: tensor<f8e4m3>[K, N], C: tensor<f32>[M, N]) {
    var acc: tile<f32>[64, 64] = 0.0
    for kt in range(0, K, 128) {
        acc += dot(A[program_id(0) * 64 :+ 64, kt :+ 128], B[kt :+ 128, program_id(1) * 64 :+ 64])
    }
    C[program_id(0) * 64 :+ 64, program_id(1) * 64 :+ 64] = acc
}
"""


@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])
def test_an_n_major_b_is_a_located_error(arch):
    with pytest.raises(UnsupportedError, match=r"reads B K-major .* B is this \[K, N\] slice, N-major .* "
                                               r"dot\(a, trans\(b\[\.\.\.\]\)\)") as raised:
        compile_source(NN, arch=arch)
    assert (raised.value.loc.line, raised.value.loc.col) == (5, 61)  # at B's slice


def test_before_sm_89_the_cuda_cores_multiply_exactly():
    k = compile_source(NN, arch="sm_80")
    assert "CUDA cores: the target has no e4m3 tensor cores (sm_89 and newer have them)" in k.notes[0], k.notes


# ------------------------------------------------------------------ the model of Hopper's 8-bit products

def _dot(pairs, c=0.0, name="e4m3"):
    """c + the sum of the products of (a, b) pairs of 8-bit values, one block of 32 on the Hopper model."""
    a, b = np.zeros((1, 32)), np.zeros((32, 1))
    for i, (x, y) in enumerate(pairs):
        a[0, i], b[i, 0] = x, y
    return float(reference(a, b, np.full((1, 1), c, np.float32), name, step=32)[0, 0])


def test_eight_bit_sums_keep_13_fraction_bits():
    """Terms below 2^(E - 13) are dropped and the sum is truncated to 13 fraction bits: 2^-13 survives beside
    1, three terms of 2^-14 do not; an f32 accumulator loses its low bits in the first block (what DeepSeek-V3
    promotes into f32 every 128 k for)."""
    one, tiny = (1.0, 1.0), (2.0 ** -6, 2.0 ** -8)             # 2^-8 is subnormal in e4m3
    assert _dot([one, (2.0 ** -6, 2.0 ** -7)]) == 1 + 2.0 ** -13
    assert _dot([one] + [tiny] * 3) == 1.0
    assert _dot([tiny] * 3) == 3 * 2.0 ** -14                  # alone they are exact
    assert _dot([], c=1 + 2.0 ** -20) == 1.0                   # the accumulator is truncated too
    assert _dot([(3.0, 1.0), (-1.0, 1.0), (2.0 ** -6, 2.0 ** -6)], c=1.0 + 2.0 ** -11) == 3 + 2.0 ** -12 + 2.0 ** -11
    assert _dot([(448.0, 448.0)] * 32) == 32 * 448.0 * 448.0
    assert _dot([(57344.0, 57344.0)] * 2, name="e5m2") == 2 * 57344.0 ** 2


def test_fp8_attention_reads_p_from_the_registers_the_scores_were_computed_in():
    """FP8 attention on wgmma (HEAD = BN = 128): K's rows are staged in the order of an 8-bit A fragment's
    columns, so that P V reads P from the registers of the scores: nothing goes through shared memory and no
    barrier is passed between the two products, unlike the mma.sync kernel (sm_90), which moves P there."""
    source = (ROOT / "examples" / "attention_fp8.phobos").read_text()
    config = {"BM": 128, "BN": 128, "WARPS": 8, "STAGES": 2, "CTAS_PER_SM": 1, "HEAD": 128}

    def between_products(arch: str) -> str:
        """The code from the last instruction of S = Q K^T to the first of P V (as many of each: HEAD = BN)."""
        ptx = compile_source(source, arch=arch, kernel="attention_fp8", config=config).ptx
        starts = [m.start() for m in re.finditer(r"\b(wgmma\.mma_async|mma\.sync\.aligned)\.", ptx)]
        return ptx[starts[len(starts) // 2 - 1]:starts[len(starts) // 2]]

    assert "st.shared" not in between_products("sm_90a") and "bar.sync" not in between_products("sm_90a")
    assert "st.shared" in between_products("sm_90")


def test_the_block_scales_are_loaded_while_the_tensor_cores_multiply(monkeypatch):
    """gemm_fp8_blockwise on sm_90a (TMA into persistent CTAs): each iteration's scale loads come after its
    wgmma group is issued (the products-first pass), and the kernel still gives the float64 product of the
    dequantised blocks in the emulator, on ragged sizes."""
    from phobos.run import backends
    from .test_kernels import case_gemm_fp8_blockwise, check_outputs
    source = (ROOT / "examples" / "gemm_fp8.phobos").read_text()
    config = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 128, "WARPS": 8, "STAGES": 4}
    ptx = compile_kernel(pick_kernel(parse_source(source, "gemm_fp8.phobos"), "gemm_fp8_blockwise"),
                         arch="sm_90a", config=config, tma=True).ptx
    first = ptx.index("wgmma.mma_async")
    commit = ptx.index("wgmma.commit_group", first)
    assert "ld.global" not in ptx[ptx.rindex("mbarrier.try_wait", 0, first):first]
    assert "ld.global.nc.f32" in ptx[commit:ptx.index("wgmma.wait_group", commit)]
    monkeypatch.setattr(backends.EmulateBackend, "arch", lambda self, index=0: "sm_90a")
    args, expected = case_gemm_fp8_blockwise(200, 140, 300)(np.random.default_rng(3))
    fn = phobos.load(str(ROOT / "examples" / "gemm_fp8.phobos"), mode="emulate").gemm_fp8_blockwise.configure(**config)
    fn(*args)
    assert any("wgmma" in note for note in fn.compiled.notes), fn.compiled.notes
    check_outputs("gemm_fp8_blockwise", args, expected, 2 ** -7, 2 ** -4)
