# c = a + b with the kernel of add.phobos, checked against numpy.
#
#   python examples/add.py [--size N] [--mode gpu|interpret|emulate]
#
# On a machine with a GPU the kernel runs there and the script prints how long
# a call takes (CUDA events, through phobos.launcher.benchmark); without one it
# says so and runs a small size on the CPU with the interpreter.
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import phobos
from phobos import runtime
from phobos.launcher import benchmark

DESCRIPTION = "c = a + b with the kernel of add.phobos, checked against numpy"
KERNELS = Path(__file__).with_name("add.phobos")
GPU_SIZE = 2**24 + 3  # not a multiple of the block: the last program is partly masked
CPU_SIZE = 10_000


def pick_mode(requested: str | None) -> str:
    if requested is not None:
        return requested
    available, why = runtime.gpu_available()
    if available:
        return "gpu"
    print(f"no GPU here ({why}); running on the CPU with mode='interpret'")
    return "interpret"


def time_on_gpu(add, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    """Time with the data already on the GPU when torch is there to hold it; else numpy, copies included."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        on_gpu = [torch.from_numpy(x).cuda() for x in (a, b, c)]
        ms = benchmark(lambda: add(*on_gpu))
        print(f"time: {ms:.3f} ms per call on torch tensors, {3 * a.nbytes / ms / 1e6:.0f} GB/s")
    else:
        ms = benchmark(lambda: add(a, b, c))
        print(f"time: {ms:.3f} ms per call on numpy arrays, copies to and from the GPU included")


def main() -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--size", type=int, help="number of elements")
    parser.add_argument("--mode", choices=["gpu", "interpret", "emulate"], help="default: the GPU if there is one")
    args = parser.parse_args()
    mode = pick_mode(args.mode)
    n = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)

    rng = np.random.default_rng()
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    c = np.empty_like(a)
    add = phobos.load(KERNELS, mode=mode).add
    add(a, b, c)

    expected = a.astype(np.float64) + b.astype(np.float64)
    error = float(np.max(np.abs(c - expected))) if n else 0.0
    ok = np.allclose(c, expected, rtol=1e-6, atol=1e-6)
    print(f"add: n = {n}, mode = {mode}, configuration {add.config}, max |c - (a + b)| = {error:.3g}: "
          f"{'ok' if ok else 'WRONG'}")
    if mode == "gpu" and ok:
        time_on_gpu(add, a, b, c)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except phobos.PhobosError as error:
        print(f"{sys.argv[0]}: {error}", file=sys.stderr)
        sys.exit(1)
