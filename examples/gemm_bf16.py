# C = A @ B in bf16 and in f16 with the kernels of gemm_bf16.phobos (tensor cores, f32 sums),
# checked against numpy.
#
#   python examples/gemm_bf16.py [--size M K N] [--mode gpu|interpret|emulate]
#
# The inputs are rounded to the 16-bit format first, and numpy multiplies those exact values in
# float64; the kernels' results differ by the f32 sums and the rounding of C to 16 bits.  NumPy has
# no bfloat16: bf16 arrays are their bit patterns as uint16 (ml_dtypes.bfloat16 arrays work too).
from __future__ import annotations

from pathlib import Path

import numpy as np

import phobos
from phobos.constants import bf16_bits, bf16_values
from example_support import arguments, pick_mode, report, run, time_on_gpu

GPU_SIZE = (4096 + 17, 4096 + 8, 4096 + 5)  # M, K, N: not multiples of any tile
CPU_SIZE = (70, 40, 90)


def main() -> int:
    args = arguments("C = A @ B in bf16 and f16 with the kernels of gemm_bf16.phobos, checked against numpy",
                     size={"type": int, "nargs": 3, "metavar": ("M", "K", "N")})
    mode = pick_mode(args.mode)
    M, K, N = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    module = phobos.load(Path(__file__).with_name("gemm_bf16.phobos"), mode=mode)
    a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
    formats = {"bf16": (bf16_bits, bf16_values), "f16": (lambda x: x.astype(np.float16), lambda x: x)}
    ok = True
    for name, (to_16, to_values) in formats.items():
        A, B = to_16(a), to_16(b)
        C = np.zeros((M, N), A.dtype)
        gemm = getattr(module, f"gemm_{name}")
        gemm(A, B, C)
        expected = to_values(A).astype(np.float64) @ to_values(B).astype(np.float64)
        print(f"gemm_{name}: M, K, N = {M}, {K}, {N}, mode = {mode}, configuration {gemm.config}")
        # C is rounded to 8 (bf16) or 11 (f16) significant bits; the f32 sums add about K * 2^-23
        ok &= report(f"C - A B ({name})", to_values(C).astype(np.float64), expected,
                     rtol=2.0 ** -7 if name == "bf16" else 2.0 ** -10, atol=1e-5 * K)
        if mode == "gpu" and ok and not args.check_only:
            ms = time_on_gpu(gemm, [A, B, C])
            print(f"time: {ms:.3f} ms per call, {2 * M * N * K / ms / 1e9:.2f} TFLOP/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
