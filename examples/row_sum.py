# The sum of each row with the kernel of row_sum.phobos, checked against numpy.
#
#   python examples/row_sum.py [--size M N] [--mode gpu|interpret|emulate]
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
    args = arguments("the sum of each row with the kernel of row_sum.phobos, checked against numpy",
                     size={"type": int, "nargs": 2, "metavar": ("M", "N")})
    mode = pick_mode(args.mode)
    m, n = args.size or ((8192, 4096) if mode == "gpu" else (37, 1000))
    x = np.random.default_rng().standard_normal((m, n)).astype(np.float32)
    y = np.empty(m, np.float32)
    row_sum = phobos.load(Path(__file__).with_name("row_sum.phobos"), mode=mode).row_sum
    row_sum(x, y)
    print(f"row_sum: {m} x {n}, mode = {mode}, configuration {row_sum.config}")
    ok = report("y - x.sum(axis=1)", y, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5 * np.sqrt(n))
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(row_sum, [x, y])
        print(f"time: {ms:.3f} ms per call, {x.nbytes / ms / 1e6:.0f} GB/s (one read)")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
