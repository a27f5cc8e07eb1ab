# C = A @ B for a long K with the kernel of splitk_matmul.phobos (shares of K combined with
# atomic_add), checked against numpy.
#
#   python examples/splitk_matmul.py [--m M] [--n N] [--k K] [--mode gpu|interpret|emulate]
#
# The kernel adds into C, so C starts at zero; it stores nothing along its grid, so the grid
# comes from a function of the configuration: row blocks, column blocks, SPLIT shares of K.
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, report, run, time_on_gpu


def grid(config, sizes):
    return (math.ceil(sizes["M"] / config["TILE_M"]), math.ceil(sizes["N"] / config["TILE_N"]), config["SPLIT"])


def main() -> int:
    args = arguments("split-K matrix product with atomics (splitk_matmul.phobos), checked against numpy",
                     m={"type": int}, n={"type": int}, k={"type": int})
    mode = pick_mode(args.mode)
    m, n, k = (args.m or (256 if mode == "gpu" else 40), args.n or (256 if mode == "gpu" else 50),
               args.k or (65536 if mode == "gpu" else 300))
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    matmul = phobos.load(Path(__file__).with_name("splitk_matmul.phobos"), mode=mode).splitk_matmul[grid]
    matmul(a, b, c)
    print(f"splitk_matmul: {m} x {n} x {k}, mode = {mode}, configuration {matmul.config}")
    want = a.astype(np.float64) @ b
    bound = (np.abs(a) @ np.abs(b)) * (k + 2) * 2.0**-24  # f32 sums of k products
    ok = report("C - A @ B", c, want, rtol=0, atol=float(bound.max()))
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(matmul, [a, b, c])  # C keeps accumulating over the timed calls: only the time counts
        print(f"time: {ms:.3f} ms per call, {2 * m * n * k / ms / 1e9:.1f} TFLOP/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
