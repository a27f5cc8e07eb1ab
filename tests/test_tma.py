# A GEMM's K loop copied by TMA (sm_90a): a producer warpgroup, tensor map parameters the launcher
# builds per call, the same bits as the cp.async kernel in the emulator on ragged sizes, ptxas without
# spills, and the launcher's choice: TMA where every tensor of the call can have a tensor map, the
# cp.async kernel where one cannot (rows not a multiple of 16 bytes apart, an empty dimension).
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

import phobos
from phobos.compiler import compile_kernel, parse_source, pick_kernel
from phobos.constants import bf16_bits, bf16_values
from phobos.launch import cache, fastpath
from phobos.ptxcheck import check
from phobos.run import backends, emulator, runtime
from phobos.run.emulator.errors import AsyncCopyHazard
from phobos.lower import mma
from phobos.lower.layout import WARPGROUP, swapped_fragment_layout
from phobos.run.tensor_map import EmulatedTensorMap, describable, kernel_map

from .tensor_core_support import tf32_gemm_reference
from .test_backend import without_version
from .test_tensor_core_codegen import GEMM_BF16, ROOT, SGEMM_TF32, k_loop

CONFIGS = [
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 64, "WARPS": 8, "STAGES": 3}, (130, 264, 600)),
    ({"TILE_M": 256, "TILE_N": 128, "TILE_K": 64, "WARPS": 8, "STAGES": 4}, (250, 136, 648)),
    ({"TILE_M": 64, "TILE_N": 128, "TILE_K": 64, "WARPS": 4, "STAGES": 3}, (70, 128, 456)),
]


TF32_CONFIGS = [
    ({"TILE_M": 256, "TILE_N": 128, "TILE_K": 32, "WARPS": 8, "STAGES": 4}, (250, 136, 200)),
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 32, "WARPS": 8, "STAGES": 3}, (130, 264, 100)),
    ({"TILE_M": 64, "TILE_N": 128, "TILE_K": 32, "WARPS": 4, "STAGES": 3}, (70, 132, 76)),
]


def gemm(config: dict, tma: bool, path=GEMM_BF16, name: str = "gemm_bf16"):
    k = pick_kernel(parse_source(path.read_text(), str(path.relative_to(ROOT))), name)
    return compile_kernel(k, arch="sm_90a", config=config, tma=tma)


def run(k, config: dict, a, b, c, multiprocessors: int = backends.EMULATED_MULTIPROCESSORS, **options) -> None:
    """Launch `k` in the emulator as the launcher would: tensors, sizes, a persistent kernel's grid, then
    the tensor maps; a persistent kernel on as many CTAs as `multiprocessors` SMs hold (`options`: the
    emulator's)."""
    (m, kk), n = a.shape, b.shape[1]
    values = {"A": a, "B": b, "C": c, "M": m, "K": kk, "N": n}
    grid = (-(-m // config["TILE_M"]), -(-n // config["TILE_N"]), 1)
    args = [kernel_map(values[p.name], values[p.name].shape, p.map_dtype, p.box) if p.kind == "tensor_map"
            else grid[p.dims[0]] if p.kind == "programs" else values[p.name] for p in k.params]
    emulator.launch(k.ptx, k.kernel_name, k.launch_grid(grid, multiprocessors), (k.threads,), args,
                    shared_bytes=k.shared_bytes, **options)


@pytest.mark.parametrize("config,sizes", CONFIGS, ids=["128x256-3", "256x128-4", "64x128-3"])
def test_tma_gemm_computes_the_cp_async_kernels_bits_on_ragged_sizes(config, sizes):
    k, plain = gemm(config, tma=True), gemm(config, tma=False)
    assert "copied by TMA, issued by a producer warpgroup (128 threads more)" in k.notes[-1]
    assert k.threads == config["WARPS"] * 32 + 128 and plain.threads == config["WARPS"] * 32
    maps = [(p.name, p.box) for p in k.params if p.kind == "tensor_map"]
    assert maps == [("A", (config["TILE_M"], 64)), ("B", (64, 64)), ("C", (config["TILE_M"], 64))], maps
    assert k.params[:len(plain.params)] == plain.params  # the grid and the maps come after the others
    assert [(p.name, p.kind, p.dims) for p in k.params[len(plain.params):len(plain.params) + 3]] == \
        [(f"programs_{axis}", "programs", (i,)) for i, axis in enumerate("xyz")]  # persistent CTAs
    assert ".param .align 64 .b8 gemm_bf16_param_9[128]" in k.ptx
    loop = k_loop(k.ptx)
    assert "cp.async.cg" not in k.ptx and "mbarrier.try_wait.parity" in loop
    producer = k.ptx[k.ptx.index("setmaxnreg.dec") if "setmaxnreg.dec" in k.ptx else 0:k.ptx.index("exit;")]
    boxes = 1 + config["TILE_N"] // 64  # A's one box, B's TILE_N / 64
    copies = [line.strip() for line in producer.splitlines() if "cp.async.bulk.tensor.2d" in line]
    assert len(copies) == boxes and all(line.startswith("@%p") for line in copies)  # one lane issues them
    m, n, kk = sizes
    rng = np.random.default_rng(3)
    a, b = bf16_bits(rng.standard_normal((m, kk), dtype=np.float32)), bf16_bits(rng.standard_normal((kk, n),
                                                                                                     np.float32))
    c, c_plain = np.zeros((m, n), np.uint16), np.zeros((m, n), np.uint16)
    run(k, config, a, b, c)
    run(plain, config, a, b, c_plain)
    np.testing.assert_array_equal(c, c_plain)
    exact = bf16_values(a).astype(np.float64) @ bf16_values(b)
    np.testing.assert_allclose(bf16_values(c), exact, rtol=2 ** -7, atol=1e-3)


def test_the_epilogue_of_a_wide_tile_stores_box_by_box_through_two_buffer_boxes_and_keeps_four_stages():
    """128 x 256 bf16: four boxes of 128 x 64 through a buffer of two (32 KB), each its own bulk-store group
    after the issuer waited for the store before to read its box; the ring keeps STAGES=4 beside it.  The
    tf32 product's accumulators spread a box over several threads: its buffer holds the whole tile."""
    config = dict(CONFIGS[0][0], STAGES=4)
    k = gemm(config, tma=True)
    assert k.ptx.count("mbarrier.init") == 2 * 4
    epilogue = k.ptx[k.ptx.rindex("wgmma.wait_group.sync.aligned 0;"):]
    stores = re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.bulk_group \[[^]]*\], \[%r\d+(\+\d+)?\];",
                        epilogue)
    assert stores == ["", "+16384", "", "+16384"], stores  # boxes 0..3 through buffer boxes 0, 1, 0, 1
    assert epilogue.count("cp.async.bulk.commit_group;") == 4
    assert epilogue.count("cp.async.bulk.wait_group.read 0;") == 4  # the store before read its box
    offsets = [int(x) for x in re.findall(r"st\.shared\S* \[%r\d+([+-]\d+)?\]", epilogue) if x]
    assert max(offsets) < 2 * 16384 and min(offsets) >= 0  # every write inside the two boxes
    tf32 = gemm(TF32_CONFIGS[2][0], True, SGEMM_TF32, "sgemm_tf32")
    tail = tf32.ptx[tf32.ptx.rindex("wgmma.wait_group.sync.aligned 0;"):]
    assert tail.count("cp.async.bulk.commit_group;") == 1 and tail.count("cp.async.bulk.wait_group.read 0;") == 1


def test_golden_tma_gemm(golden):
    golden.check("gemm_bf16_tma.sm_90a.ptx", without_version(gemm(CONFIGS[2][0], tma=True).ptx))


def test_the_consumers_of_a_tma_loop_get_the_producers_registers_and_nothing_spills():
    config = CONFIGS[0][0]
    k = gemm(config, tma=True)
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in k.ptx and "setmaxnreg.inc.sync.aligned.u32 232;" in k.ptx
    assert ".maxntid 384, 1, 1" in k.ptx and "bar.sync 1, 256;" in k.ptx  # barriers after it: consumers only
    assert k.ptx.count("mbarrier.inval") == 0  # persistent: nothing follows the loop over tiles
    single = gemm(dict(config, PERSISTENT=0), tma=True)  # the epilogue follows: invalidated before it
    assert single.ptx.count("mbarrier.inval") == 2 * config["STAGES"]
    report = check(k.ptx, arch="sm_90a", name="gemm_bf16")
    report.raise_for_errors()
    assert report.kernel("gemm_bf16").spill_stores == 0, report.kernel("gemm_bf16")


def test_tma_needs_sm_90a_and_a_gemm_k_loop():
    k = pick_kernel(parse_source(GEMM_BF16.read_text(), "gemm_bf16.phobos"), "gemm_bf16")
    config = CONFIGS[0][0]
    assert all(p.kind != "tensor_map" for p in compile_kernel(k, arch="sm_90", config=config, tma=True).params)
    mma = compile_kernel(k, arch="sm_90a", config=dict(config, TILE_K=32), tma=True)  # mma.sync: no TMA
    assert "cp.async.cg" in mma.ptx and all(p.kind != "tensor_map" for p in mma.params)


def test_a_tensor_can_have_a_map_when_aligned_with_rows_16_bytes_apart_and_no_empty_dim():
    assert describable((130, 264), 2, 0x1000) and describable((64,), 2, None)
    assert not describable((130, 260), 2, None)  # 520-byte rows
    assert not describable((128, 0), 2, None) and not describable((130, 264), 2, 0x1008)


@pytest.fixture
def emulate_sm_90a(monkeypatch):
    """The emulator backend compiling for sm_90a (it compiles for sm_90 unless told)."""
    monkeypatch.setattr(backends.EmulateBackend, "arch", lambda self, index=0: "sm_90a")


@pytest.mark.parametrize("sizes,tma", [((130, 136, 200), True), ((64, 130, 64), False), ((64, 128, 0), False)],
                         ids=["maps", "rows-260-bytes", "k-0"])
def test_the_launcher_copies_by_tma_where_every_tensor_can_have_a_map(emulate_sm_90a, sizes, tma):
    import ml_dtypes
    fn = phobos.load(GEMM_BF16, mode="emulate").gemm_bf16.configure(TILE_M=128, TILE_N=128, TILE_K=64, WARPS=8,
                                                                     STAGES=3)
    m, n, kk = sizes
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, kk), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((kk, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    c = np.full((m, n), np.nan, ml_dtypes.bfloat16)
    fn(a, b, c)
    assert any("copied by TMA" in note for note in fn.compiled.notes) == tma, fn.compiled.notes
    assert any(p.kind == "tensor_map" for p in fn.compiled.params) == tma
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), exact, rtol=2 ** -7, atol=1e-3)


def test_a_kernel_map_describes_the_tensor_innermost_first_with_the_kernels_swizzle():
    a = np.zeros((130, 264), np.uint16)
    tmap = kernel_map(a, a.shape, "bf16", (128, 64))
    assert (tmap.shape, tmap.strides, tmap.box, tmap.swizzle) == ((264, 130), (528,), (64, 128), "128B")
    decoded = EmulatedTensorMap.decode(tmap.emulator_bytes(4096))
    assert decoded.address == 4096 and tuple(decoded.box) == (64, 128)


def test_the_fast_path_encodes_a_map_per_address_and_keeps_the_last_ones(monkeypatch):
    encoded = []
    monkeypatch.setattr(runtime, "encode_tensor_map",
                        lambda tmap: encoded.append(tmap.tensor) or tmap.tensor.to_bytes(128, "little"))
    encoder = runtime.MapEncoder((130, 264), "bf16", (128, 64))
    assemble = fastpath.assembler([("pointer", 0), ("tensor_map", 0, encoder), ("const", 7)])
    first = assemble([], [4096])
    assert first == (4096, (4096).to_bytes(128, "little"), 7) and assemble([], [4096]) == first
    assemble([], [8192])
    assert encoded == [4096, 8192]  # each address encoded once


def test_the_disk_cache_keeps_a_tensor_maps_box_and_rounding():
    for k in (gemm(CONFIGS[0][0], tma=True), gemm(TF32_CONFIGS[2][0], True, SGEMM_TF32, "sgemm_tf32")):
        assert cache.decode_compiled(cache.encode_compiled(k)).params == k.params


@pytest.mark.parametrize("config,sizes", TF32_CONFIGS, ids=["256x128-4", "128x256-3", "64x128-3"])
def test_tf32_tma_gemm_rounds_both_by_the_copy_reads_b_fragments_from_the_stage_and_gives_the_model_bits(config,
                                                                                                        sizes):
    k = gemm(config, True, SGEMM_TF32, "sgemm_tf32")
    assert "A rounded to TF32 by the copy; B rounded to TF32 by the copy; B's fragments read from the stage an " \
        "iteration ahead" in k.notes[-1], k.notes
    epilogue = [("C", (config["TILE_M"], 32), "f32")] if "bulk stores" in k.schedules[0] else []  # fits beside?
    assert [(p.name, p.box, p.map_dtype) for p in k.params if p.kind == "tensor_map"] == \
        [("A", (config["TILE_M"], 32), "tf32"), ("B", (32, 32), "tf32"), *epilogue]  # B: TILE_N / 32 boxes
    producer = k.ptx[k.ptx.index(".maxntid"):k.ptx.index("exit;")]
    consumer = k.ptx[k.ptx.index("exit;"):]
    copies = [line.strip() for line in producer.splitlines() if "cp.async.bulk.tensor.2d" in line]
    assert len(copies) == 1 + config["TILE_N"] // 32  # A's box, B's
    assert all(line.startswith("@%p") for line in copies)  # one lane issues them
    assert "cp.async.cg" not in k.ptx and "cvt.rn.tf32" not in k.ptx and "ld.shared" not in producer
    loop = k_loop(consumer)
    assert "cvt.rn" not in loop and re.search(r"ld\.shared\.v[24]\.u32", loop) and "st.shared" not in loop  # rounded
    assert re.search(r"wgmma\.mma_async\S*tf32 \{[^}]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, 1, 1, 1;", loop)
    assert "wgmma.wait_group.sync.aligned 0;" in loop  # each group waited for in its iteration
    m, n, kk = sizes
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((m, kk), dtype=np.float32), rng.standard_normal((kk, n), dtype=np.float32)
    a.flat[::7] = np.float32(1 + 2.0 ** -11)  # ties: to even, in both copies
    b.flat[::5] = np.float32(1 + 2.0 ** -10 + 2.0 ** -11)
    c, c_plain = np.zeros((m, n), np.float32), np.zeros((m, n), np.float32)
    run(k, config, a, b, c)
    run(gemm(config, False, SGEMM_TF32, "sgemm_tf32"), config, a, b, c_plain)
    expected = tf32_gemm_reference(a, b, "tf32", 32)
    np.testing.assert_array_equal(c.view(np.uint32), expected.view(np.uint32))
    np.testing.assert_array_equal(c_plain.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("kk", [20, 40, 4], ids=["one-iteration", "two", "k-4"])
def test_tf32_tma_gemm_of_one_or_two_k_iterations_gives_the_model_bits(kk):
    """A loop of one or two iterations (K = 4 a ragged one): the fragments of stage 0 read before the loop,
    no wait for a stage past its end, and the bits are the model's."""
    config = TF32_CONFIGS[2][0]
    k = gemm(config, True, SGEMM_TF32, "sgemm_tf32")
    rng = np.random.default_rng(kk)
    a, b = rng.standard_normal((66, kk), dtype=np.float32), rng.standard_normal((kk, 132), dtype=np.float32)
    c = np.full((66, 132), np.nan, np.float32)
    run(k, config, a, b, c)
    np.testing.assert_array_equal(c.view(np.uint32), tf32_gemm_reference(a, b, "tf32", 32).view(np.uint32))


@pytest.mark.parametrize("n,tma", [(132, True), (130, False)], ids=["maps", "b-rows-520-bytes"])
def test_a_tf32_call_copies_by_tma_only_where_b_can_have_a_map_too(emulate_sm_90a, n, tma):
    fn = phobos.load(SGEMM_TF32, mode="emulate").sgemm_tf32.configure(TILE_M=64, TILE_N=128, TILE_K=32, WARPS=4,
                                                                       STAGES=3)
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((40, 72), dtype=np.float32), rng.standard_normal((72, n), dtype=np.float32)
    c = np.full((40, n), np.nan, np.float32)
    fn(a, b, c)
    assert any("copied by TMA" in note for note in fn.compiled.notes) == tma, fn.compiled.notes
    np.testing.assert_array_equal(c.view(np.uint32), tf32_gemm_reference(a, b, "tf32", 32).view(np.uint32))


def _chunk(row: int, col: int, eb: int = 4) -> int:
    """The 16-byte chunk of 128 (bank group) that element (row, col) of a 128-byte swizzled tile falls in."""
    return (col * eb % 128 // 16) ^ (row % 8)


@pytest.mark.parametrize("n", [128, 256, 512], ids=["tiles-1", "tiles-2", "tiles-4"])
def test_b_fragments_read_from_the_swizzled_stage_touch_every_bank_once_a_phase(n):
    """Each phase of lanes of a fragment read - 16 lanes of 8-byte vectors with one 64-row tile a warpgroup,
    8 lanes of 16 bytes with more - touches every bank once: four k rows of the lanes' columns, in the
    order of the swapped layouts, fall in distinct chunks of the 128-byte swizzled N-major B."""
    layout = swapped_fragment_layout((32, n), 2 * WARPGROUP, 2, 1)
    width = min(4, 2 * n // 128)  # the thread's consecutive columns a vector reads
    lanes = 128 // (4 * width)

    def coord(t: int, r: int, d: int) -> int:
        return sum((t // term.div) % term.mod * term.scale for term in layout.terms[d]) + layout.offsets[r][d]

    for warp in range(8):
        for r in range(0, layout.nregs, width):
            for first in range(0, 32, lanes):
                words = {(coord(t, r, 0), _chunk(coord(t, r, 0), coord(t, r, 1)), coord(t, r, 1) % 4 // width)
                         for t in range(32 * warp + first, 32 * warp + first + lanes)}
                banks = {(chunk, part) for _, chunk, part in words}
                assert len(words) == lanes and len(banks) == lanes, (n, warp, r, first, sorted(words))


def test_golden_tf32_tma_gemm(golden):
    golden.check("sgemm_tf32_tma.sm_90a.ptx", without_version(gemm(TF32_CONFIGS[2][0], True, SGEMM_TF32,
                                                                     "sgemm_tf32").ptx))


def test_the_tf32_tma_gemm_the_tuner_picks_has_no_spills():
    k = gemm(TF32_CONFIGS[0][0], True, SGEMM_TF32, "sgemm_tf32")
    report = check(k.ptx, arch="sm_90a", name="sgemm_tf32")
    report.raise_for_errors()
    assert report.kernel("sgemm_tf32").spill_stores == 0, report.kernel("sgemm_tf32")


def test_a_persistent_kernel_from_the_cache_launches_without_the_back_end(tmp_path):
    """A second process finds the chosen kernel in the disk cache and never compiles: counting a persistent
    kernel's CTAs per SM (launch_grid) takes the registers a thread starts with from the schedule's facts,
    without importing the back end (lowering, which costs such a process tens of milliseconds)."""
    k = gemm({"TILE_M": 128, "TILE_N": 256, "TILE_K": 64, "WARPS": 8, "STAGES": 3}, tma=True)
    assert k.persistent
    (tmp_path / "kernel.json").write_text(json.dumps(cache.encode_compiled(k)))
    probe = ("import json, sys; from phobos.launch import cache\n"
             f"k = cache.decode_compiled(json.loads(open({str(tmp_path / 'kernel.json')!r}).read()))\n"
             "print(k.launch_grid((32, 16, 1), 132), sorted(m for m in sys.modules if m.startswith('phobos.lower')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.split() == [*f"{k.launch_grid((32, 16, 1), 132)}".split(), "['phobos.lower',", "'phobos.lower.schedule']"]


def _matches_one_cta_per_program(k, single, config: dict, sizes: tuple[int, int, int], rng,
                                 multiprocessors: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random bf16 A [m, kk] and B [kk, n], and C as the persistent kernel `k` stores it on `multiprocessors`
    CTAs, asserted bit for bit equal to the one-CTA-per-program kernel `single`'s (C filled with NaN before:
    an element unwritten shows)."""
    m, n, kk = sizes
    a = bf16_bits(rng.standard_normal((m, kk), dtype=np.float32))
    b = bf16_bits(rng.standard_normal((kk, n), dtype=np.float32))
    c, expected = np.full((m, n), 0x7fc0, np.uint16), np.full((m, n), 0x7fc0, np.uint16)
    run(k, config, a, b, c, multiprocessors)
    run(single, config, a, b, expected)
    np.testing.assert_array_equal(c, expected)
    return a, b, c


@pytest.mark.parametrize("multiprocessors", [1, 4])
def test_persistent_ctas_run_every_tile_and_match_one_cta_per_program(multiprocessors):
    """Persistent CTAs (the default with TMA) loop over the output tiles, the ring's stages and phases
    carried from tile to tile: one CTA running all six tiles, or four running two or one, give the bits
    of the kernel with one CTA per program (PERSISTENT=0), on ragged sizes with a one-iteration K loop
    beside a three-iteration one."""
    config = {"TILE_M": 64, "TILE_N": 128, "TILE_K": 64, "WARPS": 4, "STAGES": 3}
    k, single = gemm(config, tma=True), gemm(dict(config, PERSISTENT=0), tma=True)
    assert k.persistent and not single.persistent
    assert "persistent CTAs" in k.notes[-1] and "persistent" not in single.notes[-1]
    assert k.launch_grid((3, 2, 1), multiprocessors) == (min(6, multiprocessors), 1, 1)  # one CTA an SM
    assert single.launch_grid((3, 2, 1), multiprocessors) == (3, 2, 1)
    rng = np.random.default_rng(7)
    for sizes in ((130, 200, 136), (150, 248, 8)):
        a, b, c = _matches_one_cta_per_program(k, single, config, sizes, rng, multiprocessors)
        exact = bf16_values(a).astype(np.float64) @ bf16_values(b)
        np.testing.assert_allclose(bf16_values(c), exact, rtol=2 ** -7, atol=1e-3)


@pytest.mark.parametrize("multiprocessors", [1, 2, 5])
def test_two_consumer_teams_take_the_tiles_in_turn_and_match_one_cta_per_program(multiprocessors):
    """PINGPONG=1: two teams of WARPS warps take a persistent CTA's tiles in turn (each finding its stages from
    the tile's index, after the other team's loop waited for the tile before's, then storing through a
    buffer of its own under the other's products) and give the bits of one CTA per program on ragged sizes
    - one CTA with all six tiles, two with three (odd: the first team takes one more), five with one or two
    - with a one-iteration K loop beside a three-iteration one and a ring of 3 stages that neither divides."""
    config = {"TILE_M": 64, "TILE_N": 128, "TILE_K": 64, "WARPS": 4, "STAGES": 3}
    k, single = gemm(dict(config, PINGPONG=1), tma=True), gemm(dict(config, PERSISTENT=0), tma=True)
    assert k.threads == 2 * 128 + 128 and "2 teams of 128 threads taking the tiles in turn" in k.notes[-1]
    assert "in 2 teams taking the tiles in turn (ping-pong)" in k.schedules[0]
    assert "bar.sync %r" in k.ptx  # each team's barrier its own
    rng = np.random.default_rng(5)
    for sizes in ((130, 200, 136), (150, 248, 8)):
        _matches_one_cta_per_program(k, single, config, sizes, rng, multiprocessors)


def test_pingpong_is_ignored_with_a_note_where_the_loop_cannot_take_it_and_refused_beside_clusters():
    config = {"TILE_M": 256, "TILE_N": 128, "TILE_K": 64, "WARPS": 16, "STAGES": 3, "PINGPONG": 1}
    k = gemm(config, tma=True)  # two teams of 512 threads and the producer: past 1024
    assert k.threads == 512 + 128 and any("PINGPONG=1 ignored: two teams of 512 threads" in n for n in k.notes)
    assert "teams" not in k.schedules[0]
    band = """
@autotune(TILE_M in [64], TILE_N in [128], TILE_K in [64], WARPS in [4], STAGES in [3], PINGPONG in [1])
kernel band(A: tensor<bf16>[M, K], B: tensor<bf16>[K, N], C: tensor<bf16>[M, N]) {
    var acc: tile<f32>[TILE_M, TILE_N] = 0.0
    for kt in range(0, (program_id(0) + 1) * TILE_M, TILE_K) {
        acc += dot(A[program_id(0) * TILE_M :+ TILE_M, kt :+ TILE_K], B[kt :+ TILE_K, program_id(1) * TILE_N :+ TILE_N])
    }
    C[program_id(0) * TILE_M :+ TILE_M, program_id(1) * TILE_N :+ TILE_N] = acc
}
"""
    k = compile_kernel(pick_kernel(parse_source(band, "band.phobos"), "band"), arch="sm_90a",
                       config=dict(config, WARPS=4, TILE_M=64), tma=True)  # a tile's loop of its own length
    assert k.persistent and any("PINGPONG=1 ignored: its loop's bounds vary with the tile" in n for n in k.notes)
    with pytest.raises(phobos.PhobosError, match="PINGPONG=1 runs one CTA's tiles by two teams"):
        gemm(dict(config, WARPS=4, CLUSTER_M=2), tma=True)


@pytest.mark.parametrize("cluster,multiprocessors", [("CLUSTER_M", 2), ("CLUSTER_N", 2), ("CLUSTER_M", 4)],
                         ids=["along-m", "along-n", "along-m-two-clusters"])
def test_clusters_of_two_share_an_operand_by_multicast_and_match_one_cta_per_program(cluster, multiprocessors):
    """Clusters of two persistent CTAs (each copying half the shared operand to both by multicast TMA, and
    releasing each stage in both) give the bits of one CTA per program on ragged sizes whose tile grid is
    odd along the cluster (a padding tile that copies and stores nothing), in the emulator's clusters."""
    config = {"TILE_M": 64, "TILE_N": 128, "TILE_K": 64, "WARPS": 4, "STAGES": 3}
    k, single = gemm(dict(config, **{cluster: 2}), tma=True), gemm(dict(config, PERSISTENT=0), tma=True)
    assert k.cluster == 2 and ".reqnctapercluster 2, 1, 1" in k.ptx and ".multicast::cluster" in k.ptx
    assert k.launch_grid((3, 3, 1), multiprocessors) == (multiprocessors, 1, 1)
    _matches_one_cta_per_program(k, single, config, (150, 360, 136), np.random.default_rng(11),
                                 multiprocessors)  # 3 x 3 tiles



def test_a_matrix_descriptor_takes_the_low_14_bits_of_its_address_over_16():
    """A wgmma descriptor's start address field is address / 16 in 14 bits; a CTA's shared addresses may have
    bits above them (in a cluster, the CTA's rank), which the unmasked sum carried into the leading byte
    offset - every B box past the first read at the wrong place in the second CTA of each cluster on an
    H100. Every descriptor's start is masked (and.b32 with 16383) before the fields are added."""
    config = {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64, "WARPS": 8, "STAGES": 4}
    for k in (gemm(dict(config, CLUSTER_M=2), tma=True), gemm(config, tma=True)):
        shifted = re.findall(r"shr\.u32 (%r\d+), %r\d+, 4;\n\tand\.b32 %r\d+, \1, 16383;", k.ptx)
        assert len(shifted) == 2 and not re.search(r"shr\.u32 (%r\d+), %r\d+, 4;\n\tcvt\.s64\.u32", k.ptx)
    assert "clusters of 2 CTAs" in gemm(dict(config, CLUSTER_N=2), tma=True).notes[-1]


def test_the_emulator_shows_what_unmasked_descriptors_did_to_the_second_cta_of_a_cluster(monkeypatch):
    """The emulator gives the shared addresses of a CTA of a cluster its rank above the offset, as an H100
    does (emulator/cluster.py), so the defect the descriptor mask mended shows on the CPU: without the mask,
    the CTAs of rank 1 read the boxes of B past the first at the wrong place (the rank bit lands in the
    leading byte offset) - a stage a TMA copy is still filling, which the race checks report; without them,
    wrong columns in the second 64 of those CTAs' tiles (as on the GPU), the rest of C right."""
    config = {"TILE_M": 64, "TILE_N": 128, "TILE_K": 64, "WARPS": 4, "STAGES": 3}
    single = gemm(dict(config, PERSISTENT=0), tma=True)
    masked = gemm(dict(config, CLUSTER_M=2), tma=True)
    monkeypatch.setattr(mma, "DESCRIPTOR_ADDRESS_BITS", (1 << 32) - 1)
    unmasked = gemm(dict(config, CLUSTER_M=2), tma=True)
    rng = np.random.default_rng(5)
    m, n, kk = 256, 256, 128
    a = bf16_bits(rng.standard_normal((m, kk), dtype=np.float32))
    b = bf16_bits(rng.standard_normal((kk, n), dtype=np.float32))
    expected, c = np.zeros((m, n), np.uint16), np.zeros((m, n), np.uint16)
    run(single, config, a, b, expected)
    with pytest.raises(AsyncCopyHazard, match=r"shared read at phobos_smem\+\d+ .* of CTA \(1,0,0\) \(cluster rank "
                                              r"1\), written by a bulk tensor copy, before this thread waited"):
        run(unmasked, config, a, b, c, 4)
    run(unmasked, config, a, b, c, 4, check_races=False)
    rows, columns = np.nonzero(c != expected)
    assert len(rows) and (columns % config["TILE_N"] >= 64).all()
    assert len(np.unique(rows // config["TILE_M"])) < m // config["TILE_M"]  # some tiles' CTAs were right
    run(masked, config, a, b, c, 4)
    np.testing.assert_array_equal(c, expected)


@pytest.mark.gpu
@pytest.mark.parametrize("cluster", ["CLUSTER_M", "CLUSTER_N"])
def test_clusters_of_two_give_one_cta_per_programs_bits_on_the_gpu(cluster):
    """On an H100 the second CTA of each cluster read B's boxes past the first at the wrong place until the
    descriptors masked their addresses (the test above): a clustered persistent kernel through the call gives
    the bits of one CTA per program on ragged device tensors."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    config = {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64, "WARPS": 8, "STAGES": 4}
    gemms = phobos.load(GEMM_BF16)
    a = torch.randn(389, 264, device="cuda").to(torch.bfloat16)
    b = torch.randn(264, 1032, device="cuda").to(torch.bfloat16)
    c, expected = (torch.full((389, 1032), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2))
    gemms.gemm_bf16.configure(**config, **{cluster: 2})(a, b, c)
    gemms.gemm_bf16.configure(**config, PERSISTENT=0)(a, b, expected)
    assert torch.equal(c.view(torch.int16), expected.view(torch.int16))


def test_no_producer_warpgroup_where_it_would_take_a_cta_past_1024_threads():
    """WARPS=32 and a producer warpgroup made a CTA of 1152 threads, which no GPU launches (and a failed
    assertion of the schedule): the loop copies by cp.async instead."""
    src = """
@autotune(WARPS in [32])
kernel g(A: tensor<bf16>[M, K], B: tensor<bf16>[K, N], C: tensor<f32>[M, N]) {
    var acc: tile<f32>[256, 256] = 0.0
    for k in range(0, K, 64) {
        acc += dot(A[program_id(0) * 256 :+ 256, k :+ 64], B[k :+ 64, program_id(1) * 256 :+ 256])
    }
    C[program_id(0) * 256 :+ 256, program_id(1) * 256 :+ 256] = acc
}
"""
    kernel = pick_kernel(parse_source(src, "w32.phobos"), None)
    k = compile_kernel(kernel, arch="sm_90a", tma=True)
    assert k.threads == 1024 and "cp.async" in k.ptx and "cp.async.bulk.tensor" not in k.ptx
