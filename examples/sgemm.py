# C = alpha * A @ B + beta * C with the kernel of sgemm.phobos, checked against numpy.
#
#   python examples/sgemm.py [--size M K N] [--mode gpu|interpret|emulate]
#
# On a machine with a GPU the first call tunes the kernel over its autotune
# configurations (remembered in the disk cache for the next run) and the script
# prints how long a call takes (CUDA events, through phobos.launcher.benchmark);
# without a GPU it says so and runs a small size on the CPU with the interpreter.
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import phobos
from phobos import runtime
from phobos.launcher import benchmark

DESCRIPTION = "C = alpha * A @ B + beta * C with the kernel of sgemm.phobos, checked against numpy"
KERNELS = Path(__file__).with_name("sgemm.phobos")
GPU_SIZE = (2048 + 17, 1024 + 9, 2048 + 5)  # M, K, N: not multiples of any tile
CPU_SIZE = (40, 30, 70)
ALPHA, BETA = 1.5, 0.5


def pick_mode(requested: str | None) -> str:
    if requested is not None:
        return requested
    available, why = runtime.gpu_available()
    if available:
        return "gpu"
    print(f"no GPU here ({why}); running on the CPU with mode='interpret'")
    return "interpret"


def time_on_gpu(sgemm, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> float:
    """Milliseconds per call: on torch tensors when torch is there, else on numpy arrays (copies included)."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        on_gpu = [torch.from_numpy(x).cuda() for x in (A, B, C)]
        print("timing on torch tensors")
        return benchmark(lambda: sgemm(*on_gpu, alpha=ALPHA, beta=BETA))
    print("timing on numpy arrays, copies to and from the GPU included")
    return benchmark(lambda: sgemm(A, B, C, alpha=ALPHA, beta=BETA))


def main() -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--size", type=int, nargs=3, metavar=("M", "K", "N"))
    parser.add_argument("--mode", choices=["gpu", "interpret", "emulate"], help="default: the GPU if there is one")
    args = parser.parse_args()
    mode = pick_mode(args.mode)
    M, K, N = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)

    rng = np.random.default_rng()
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    C = rng.standard_normal((M, N), dtype=np.float32)
    expected = ALPHA * (A.astype(np.float64) @ B.astype(np.float64)) + BETA * C.astype(np.float64)

    sgemm = phobos.load(KERNELS, mode=mode).sgemm
    start = time.perf_counter()
    sgemm(A, B, C, alpha=ALPHA, beta=BETA)
    first_call = time.perf_counter() - start

    error = float(np.max(np.abs(C - expected))) if C.size else 0.0
    ok = np.allclose(C, expected, rtol=1e-4, atol=2e-5 * K)
    tried = sum(isinstance(t, float) for t in sgemm.timings.values())
    tuning = f", {tried} of {len(sgemm.timings)} configurations timed" if sgemm.timings else ""
    print(f"sgemm: M, K, N = {M}, {K}, {N}, mode = {mode}, configuration {sgemm.config}{tuning}")
    print(f"first call {first_call:.2f} s; max |C - (alpha A B + beta C)| = {error:.3g}: {'ok' if ok else 'WRONG'}")
    if mode == "gpu" and ok:
        ms = time_on_gpu(sgemm, A, B, C)
        print(f"time: {ms:.3f} ms per call, {2 * M * N * K / ms / 1e9:.2f} TFLOP/s")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except phobos.PhobosError as error:
        print(f"{sys.argv[0]}: {error}", file=sys.stderr)
        sys.exit(1)
