# FP8 GEMMs with the kernels of gemm_fp8.phobos - per-tensor scales, and DeepSeek-style block scales (1 x 128
# for A, 128 x 128 for B) - checked against a float64 product of the dequantised inputs.
#
#   python examples/gemm_fp8.py [--size M K N] [--mode gpu|interpret|emulate]
#
# A and B are quantised to e4m3 as FP8 training does it: each tensor (or block) scaled so that its largest
# magnitude maps to 448, the largest e4m3, then rounded to nearest even (phobos.constants.f8_bits, what
# f8e4m3(x) computes; ml_dtypes.float8_e4m3fn arrays or torch.float8_e4m3fn tensors work as well).  The
# reference multiplies the dequantised values (codes times scales) in float64; the kernels' results differ by
# the tensor cores' sums (13 fraction bits within each 128-wide K block, f32 across blocks) and the rounding
# of C to bf16.
from __future__ import annotations

from pathlib import Path

import numpy as np

import phobos
from phobos.constants import bf16_values, f8_bits, f8_values, largest_float
from phobos.types import DType
from example_support import arguments, pick_mode, report, run, time_on_gpu

GPU_SIZE = (4096 + 16, 4096 + 32, 4096 + 48)  # M, K, N: not multiples of the tiles (rows 16-byte multiples)
CPU_SIZE = (80, 272, 96)
BLOCK = 128  # the scales' block along K (and B's along N)
E4M3, TOP = DType.F8E4M3, largest_float(DType.F8E4M3)


def quantise(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """e4m3 codes of x / scale (scale broadcasts against x)."""
    return f8_bits((x / scale).astype(np.float32), E4M3)


def block_scales(x: np.ndarray, rows: int) -> np.ndarray:
    """Scales of `rows` x 128 blocks of x (the last ones partial): their largest magnitude / 448."""
    m, k = x.shape
    padded = np.pad(np.abs(x), ((0, -m % rows), (0, -k % BLOCK)))
    amax = padded.reshape(-(-m // rows), rows, -(-k // BLOCK), BLOCK).max(axis=(1, 3))
    return (np.maximum(amax, 1e-30) / TOP).astype(np.float32)


def expand(scales: np.ndarray, rows: int, shape) -> np.ndarray:
    """Per-element scales of blocks of `rows` x 128, cut to `shape`."""
    return np.repeat(np.repeat(scales, rows, axis=0), BLOCK, axis=1)[:shape[0], :shape[1]]


def main() -> int:
    args = arguments("FP8 GEMMs of gemm_fp8.phobos (per-tensor and block scales), checked against float64",
                     size={"type": int, "nargs": 3, "metavar": ("M", "K", "N")})
    mode = pick_mode(args.mode)
    M, K, N = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    module = phobos.load(Path(__file__).with_name("gemm_fp8.phobos"), mode=mode)
    a = rng.standard_normal((M, K), dtype=np.float32) * np.exp2(rng.integers(-3, 4, (M, 1))).astype(np.float32)
    b = rng.standard_normal((N, K), dtype=np.float32)
    ok = True

    scale_a, scale_b = np.float32(np.abs(a).max() / TOP), np.float32(np.abs(b).max() / TOP)
    A, B = quantise(a, scale_a), quantise(b, scale_b)
    C = np.zeros((M, N), np.uint16)  # bf16 bit patterns
    module.gemm_fp8(A, B, C, scale_a=scale_a, scale_b=scale_b)
    exact = (f8_values(A, E4M3).astype(np.float64) * scale_a) @ (f8_values(B, E4M3).astype(np.float64) * scale_b).T
    print(f"gemm_fp8: M, K, N = {M}, {K}, {N}, mode = {mode}, configuration {module.gemm_fp8.config}")
    # C is rounded to 8 significant bits; the sums lose about 2^-13 of each K block's product
    ok &= report("C - scale_a scale_b A B^T", bf16_values(C).astype(np.float64), exact,
                 rtol=2.0 ** -7, atol=2.0 ** -12 * float(np.abs(exact).max()))
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(module.gemm_fp8, [A, B, C], scale_a=scale_a, scale_b=scale_b)
        print(f"time: {ms:.3f} ms per call, {2 * M * N * K / ms / 1e9:.2f} TFLOP/s")

    sa, sb = block_scales(a, 1), block_scales(b, BLOCK)
    A, B = quantise(a, expand(sa, 1, a.shape)), quantise(b, expand(sb, BLOCK, b.shape))
    C = np.zeros((M, N), np.uint16)
    module.gemm_fp8_blockwise(A, B, C, sa, sb)
    exact = (f8_values(A, E4M3).astype(np.float64) * expand(sa, 1, a.shape)) \
        @ (f8_values(B, E4M3).astype(np.float64) * expand(sb, BLOCK, b.shape)).T
    print(f"gemm_fp8_blockwise: configuration {module.gemm_fp8_blockwise.config}")
    ok &= report("C - blockwise A B^T", bf16_values(C).astype(np.float64), exact,
                 rtol=2.0 ** -7, atol=2.0 ** -12 * float(np.abs(exact).max()))
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(module.gemm_fp8_blockwise, [A, B, C, sa, sb])
        print(f"time: {ms:.3f} ms per call, {2 * M * N * K / ms / 1e9:.2f} TFLOP/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
