# C = alpha * A @ B + beta * C with the kernel of sgemm.phobos, checked against numpy.
#
#   python examples/sgemm.py [--size M K N] [--mode gpu|interpret|emulate]
#
# On a machine with a GPU the first call tunes the kernel over its autotune
# configurations (remembered in the disk cache for the next run) and the script
# prints how long a call takes; without a GPU it runs a small size on the CPU,
# in the interpreter (or `--mode emulate`: the generated PTX, in the emulator).
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, report, run, time_on_gpu

GPU_SIZE = (2048 + 17, 1024 + 9, 2048 + 5)  # M, K, N: not multiples of any tile
CPU_SIZE = (40, 30, 70)
ALPHA, BETA = 1.5, 0.5


def main() -> int:
    args = arguments("C = alpha * A @ B + beta * C with the kernel of sgemm.phobos, checked against numpy",
                     size={"type": int, "nargs": 3, "metavar": ("M", "K", "N")})
    mode = pick_mode(args.mode)
    M, K, N = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    C = rng.standard_normal((M, N), dtype=np.float32)
    expected = ALPHA * (A.astype(np.float64) @ B.astype(np.float64)) + BETA * C.astype(np.float64)

    sgemm = phobos.load(Path(__file__).with_name("sgemm.phobos"), mode=mode).sgemm
    start = time.perf_counter()
    sgemm(A, B, C, alpha=ALPHA, beta=BETA)
    first_call = time.perf_counter() - start
    tried = sum(isinstance(t, float) for t in sgemm.timings.values())
    tuning = f", {tried} of {len(sgemm.timings)} configurations timed" if tried else ""
    print(f"sgemm: M, K, N = {M}, {K}, {N}, mode = {mode}, configuration {sgemm.config}{tuning}; "
          f"first call {first_call:.2f} s")
    ok = report("C - (alpha A B + beta C)", C, expected, rtol=1e-4, atol=2e-5 * K)
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(sgemm, [A, B, C], alpha=ALPHA, beta=BETA)
        print(f"time: {ms:.3f} ms per call, {2 * M * N * K / ms / 1e9:.2f} TFLOP/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
