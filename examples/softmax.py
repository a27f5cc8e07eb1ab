# Row softmax with the kernel of softmax.phobos, checked against numpy.
#
#   python examples/softmax.py [--size M N] [--mode gpu|interpret|emulate]
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


def main() -> int:
    args = arguments("row softmax with the kernel of softmax.phobos, checked against numpy",
                     size={"type": int, "nargs": 2, "metavar": ("M", "N")})
    mode = pick_mode(args.mode)
    m, n = args.size or ((8192, 4096) if mode == "gpu" else (7, 1000))
    x = (np.random.default_rng().standard_normal((m, n)) * 4).astype(np.float32)
    y = np.empty_like(x)
    softmax = phobos.load(Path(__file__).with_name("softmax.phobos"), mode=mode).softmax
    softmax(x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True).astype(np.float64))
    print(f"softmax: {m} x {n}, mode = {mode}, configuration {softmax.config}")
    ok = report("y - softmax(x)", y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(softmax, [x, y])
        print(f"time: {ms:.3f} ms per call, {2 * x.nbytes / ms / 1e6:.0f} GB/s (one read, one write)")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
