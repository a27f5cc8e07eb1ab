# C = A @ B in f32 on the tensor cores with the kernels of sgemm_tf32.phobos - TF32 (the operands
# rounded to 10 fraction bits) and 3xTF32 (close to f32) - checked against numpy.
#
#   python examples/sgemm_tf32.py [--size M K N] [--mode gpu|interpret|emulate]
#
# Both are compared with the float64 product of the f32 inputs: TF32's error is about 2^-11 of the
# sum of |a| |b| (its operands' rounding), 3xTF32's about 2^-22 (like an f32 SGEMM's).
from __future__ import annotations

from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, report, run, time_on_gpu

GPU_SIZE = (4096 + 17, 4096 + 9, 4096 + 5)  # M, K, N: not multiples of any tile
CPU_SIZE = (70, 40, 90)
RELATIVE_ERROR = {"tf32": 2.0 ** -10, "tf32x3": 2.0 ** -20}  # of the sum of |a| |b|, with room


def main() -> int:
    args = arguments("C = A @ B in f32 with TF32 and 3xTF32 tensor-core kernels, checked against numpy",
                     size={"type": int, "nargs": 3, "metavar": ("M", "K", "N")})
    mode = pick_mode(args.mode)
    M, K, N = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    A, B = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
    expected = A.astype(np.float64) @ B.astype(np.float64)
    scale = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    module = phobos.load(Path(__file__).with_name("sgemm_tf32.phobos"), mode=mode)
    ok = True
    for precision, bound in RELATIVE_ERROR.items():
        gemm = getattr(module, f"sgemm_{precision}")
        C = np.zeros((M, N), np.float32)
        gemm(A, B, C)
        print(f"sgemm_{precision}: M, K, N = {M}, {K}, {N}, mode = {mode}, configuration {gemm.config}")
        error = np.abs(C - expected) / scale
        fine = bool(np.all(error <= bound))
        print(f"|C - A B| / (|A| |B|): max {error.max():.3g} (bound {bound:.3g}): {'ok' if fine else 'WRONG'}")
        ok &= fine
        if mode == "gpu" and ok and not args.check_only:
            ms = time_on_gpu(gemm, [A, B, C])
            print(f"time: {ms:.3f} ms per call, {2 * M * N * K / ms / 1e9:.2f} TFLOP/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
