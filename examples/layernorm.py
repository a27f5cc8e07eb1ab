# Layer norm forward with the kernel of layernorm.phobos, checked against numpy.
#
#   python examples/layernorm.py [--size M N] [--mode gpu|interpret|emulate]
#
# The kernel serves rows of any length and any number of them: the sizes pick
# how the rows are spread (several to a program when they are short, one held
# whole when it fits in registers, else walked in blocks of 8192 columns), and
# the autotuner chooses the rows per program and the warps.
from __future__ import annotations

from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, report, run, time_on_gpu

EPS = 1e-5


def main() -> int:
    args = arguments("layer norm with the kernel of layernorm.phobos, checked against numpy",
                     size={"type": int, "nargs": 2, "metavar": ("M", "N")})
    mode = pick_mode(args.mode)
    m, n = args.size or ((8192, 4096) if mode == "gpu" else (5, 1000))
    rng = np.random.default_rng()
    x = (rng.standard_normal((m, n)) + 1).astype(np.float32)
    w, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    y = np.empty_like(x)
    layernorm = phobos.load(Path(__file__).with_name("layernorm.phobos"), mode=mode).layernorm
    layernorm(x, w, b, y, eps=EPS)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    expected = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(axis=1, keepdims=True) + EPS) * w + b
    print(f"layernorm: {m} x {n}, mode = {mode}, configuration {layernorm.config}")
    ok = report("y - layer_norm(x)", y, expected, rtol=1e-5, atol=1e-5)
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(layernorm, [x, w, b, y], eps=EPS)
        print(f"time: {ms:.3f} ms per call, {2 * x.nbytes / ms / 1e6:.0f} GB/s (one read, one write)")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
