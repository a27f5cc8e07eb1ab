# Tensor cores on a real GPU (skipped with the reason where there is none):
# the emulator's numeric model, fragment tables and shared-memory layouts
# against the hardware, bit for bit, and the hand-written GEMMs against the
# emulator.  The same kernels run on both; a mismatch means the emulator's
# model of this GPU is wrong somewhere, and the message says how many results
# differ and shows the first.  A kernel that never finishes ends the run with
# the reason instead of hanging (the GPU context is lost then).
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from phobos.errors import LaunchError
from phobos.run import runtime
from phobos.run.emulator import Module
from phobos.run.tensor_map import TensorMap

from . import tensor_core_support as tc

pytestmark = pytest.mark.gpu
TIMEOUT_S = 60
rng = np.random.default_rng(2027)
gemm = tc.gemm_generator()


def capability() -> tuple[int, int]:
    return tuple(runtime.device_properties().compute_capability)


def require(major: int) -> None:
    if capability()[0] < major:
        pytest.skip(f"needs compute capability {major}.0 or newer, this GPU has {capability()}")


def model() -> str:
    """The emulator's tensor-core model for this GPU."""
    return "ampere" if capability()[0] == 8 else "hopper"


def gpu_launch(text, kernel, grid, block, args, shared_bytes=0) -> None:
    try:
        runtime.launch(text, kernel, grid, block, args, shared_bytes, timeout_s=TIMEOUT_S)
    except runtime.GpuTimeout as error:
        print(f"\n{error}", file=sys.stderr, flush=True)
        os._exit(3)


def on_device(maps, keep: list):
    """Tensor maps over device copies of their host arrays (copies kept alive in `keep`)."""
    out = []
    for tmap in maps:
        if isinstance(tmap, TensorMap):
            keep.append(runtime.device_copy(tmap.tensor))
            tmap = tmap.on(int(keep[-1]))
        out.append(tmap)
    return out


def assert_same_bits(gpu: np.ndarray, emulated: np.ndarray, what: str) -> None:
    raw = f"u{gpu.dtype.itemsize}"
    g, e = gpu.reshape(-1).view(raw), emulated.reshape(-1).view(raw)
    differ = np.flatnonzero(g != e)
    if differ.size:
        i = int(differ[0])
        pytest.fail(f"{what}: {differ.size} of {g.size} results differ from the emulator ({model()} model); first "
                    f"at {i}: GPU {gpu.reshape(-1)[i]!r} ({int(g[i]):#x}), emulator {emulated.reshape(-1)[i]!r} "
                    f"({int(e[i]):#x})", pytrace=False)


@pytest.mark.parametrize("kind", ["bf16", "f16", "tf32", "e4m3", "e5m2"])
def test_mma_sync_numerics_match_the_emulator(kind):
    """512 warps of random fragments, exponents spread wide: truncation, cancellation, subnormals (8-bit
    floats: their whole range; on Hopper mma.sync runs them as two f16 products and an f32 add of C,
    where wgmma keeps 13 fraction bits)."""
    require(8)
    if kind in tc.F8 and capability() < (8, 9):
        pytest.skip(f"{kind} tensor cores need compute capability 8.9, this GPU has {capability()}")
    k = tc.STEP[kind]
    warps = 512
    widest = {"f16": 12, "bf16": 60, "tf32": 60, "e4m3": 7, "e5m2": 14}[kind]
    spreads = rng.integers(0, widest + 1, warps)
    a = np.stack([tc.random_elements(rng, (16, k), kind, int(s)) for s in spreads])
    b = np.stack([tc.random_elements(rng, (k, 8), kind, int(s)) for s in spreads])
    if kind == "tf32":
        a = a | rng.integers(0, 1 << 13, a.shape).astype(np.uint32)      # ignored low bits
    c = (rng.standard_normal((warps, 16, 8)) * np.exp2(spreads[:, None, None] // 2)).astype(np.float32)
    args = [tc.pack_fragment(a, "a", kind, 4), tc.pack_fragment(b, "b", kind, 2), tc.pack_accumulator(c)]
    text = tc.mma_fragment_ptx(kind)
    gpu = np.zeros((warps * 32, 4), np.float32)
    gpu_launch(text, "mma_fragments", warps // 4, 128, args + [gpu])
    emulated = np.zeros_like(gpu)
    Module(text, "mma.ptx").launch("mma_fragments", warps // 4, 128, args + [emulated], tensor_cores=model())
    assert_same_bits(gpu, emulated, f"mma.sync {kind}")


@pytest.mark.parametrize("kind,a_spec,b_spec,ktot,n", tc.WGMMA_CASES)
def test_wgmma_layouts_and_numerics_match_the_emulator(kind, a_spec, b_spec, ktot, n):
    require(9)
    case = tc.wgmma_case(rng, kind, a_spec, b_spec, ktot, n, spread=30)
    keep: list = []
    gpu = case.output()
    gpu_launch(case.text, "wgmma_test", 1, 128, case.arguments(gpu, on_device(case.maps, keep)), case.shared_bytes)
    emulated = case.output()
    Module(case.text, "wgmma.ptx").launch("wgmma_test", 1, 128, case.arguments(emulated),
                                          shared_bytes=case.shared_bytes, tensor_cores=model())
    assert_same_bits(gpu, emulated, f"wgmma {kind} A {a_spec} B {b_spec}")


def test_tensor_maps_are_encoded_by_the_driver():
    require(9)
    a = np.zeros((256, 128), np.uint16)
    device = runtime.device_copy(a)
    tmap = TensorMap.tiled(a, (128, 64), dtype="bf16", swizzle="128B")
    raw = runtime.encode_tensor_map(tmap.on(int(device)))
    assert len(raw) == 128 and raw != bytes(128)
    with pytest.raises(LaunchError, match="is not 16-byte aligned"):
        runtime.encode_tensor_map(tmap.on(int(device) + 8))
    device.free()


def _gemm_inputs(m, n, k):
    return tc.bf16_bits(rng.standard_normal((m, k))), tc.bf16_bits(rng.standard_normal((k, n)))


def test_mma_sync_gemm_matches_the_emulator():
    require(8)
    cfg, (m, n, k) = gemm.MmaConfig(), (256, 256, 512)
    text = (tc.ROOT / "handwritten_ptx" / "gemm_bf16_mma.ptx").read_text()
    a, b = _gemm_inputs(m, n, k)
    grid = (m // cfg.bm) * (n // cfg.bn)
    gpu, emulated = np.zeros((m, n), np.uint16), np.zeros((m, n), np.uint16)
    gpu_launch(text, "gemm_bf16_mma", grid, cfg.threads, [a, b, gpu, m, n, k], cfg.shared_bytes)
    Module(text, "gemm_bf16_mma.ptx").launch("gemm_bf16_mma", grid, cfg.threads, [a, b, emulated, m, n, k],
                                             shared_bytes=cfg.shared_bytes, tensor_cores=model())
    assert_same_bits(gpu, emulated, "the mma.sync GEMM")


def test_wgmma_gemm_matches_the_emulator():
    require(9)
    cfg, (m, n, k) = gemm.WgmmaConfig(), (256, 512, 512)
    text = (tc.ROOT / "handwritten_ptx" / "gemm_bf16_wgmma.ptx").read_text()
    a, b = _gemm_inputs(m, n, k)
    maps = [TensorMap.tiled(a, (128, 64), dtype="bf16", swizzle="128B"),
            TensorMap.tiled(b, (64, 64), dtype="bf16", swizzle="128B")]
    grid = (m // 128) * (n // cfg.bn)
    keep: list = []
    gpu, emulated = np.zeros((m, n), np.uint16), np.zeros((m, n), np.uint16)
    gpu_launch(text, "gemm_bf16_wgmma", grid, 384, on_device(maps, keep) + [gpu, m, n, k], cfg.shared_bytes)
    Module(text, "gemm_bf16_wgmma.ptx").launch("gemm_bf16_wgmma", grid, 384, maps + [emulated, m, n, k],
                                               shared_bytes=cfg.shared_bytes, tensor_cores=model())
    assert_same_bits(gpu, emulated, "the wgmma GEMM")
