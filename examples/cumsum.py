# Running sums of the rows of a matrix with the kernel of cumsum.phobos, checked against numpy.
#
#   python examples/cumsum.py [--rows M] [--cols N] [--mode gpu|interpret|emulate]
from __future__ import annotations

from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, report, run, time_on_gpu


def main() -> int:
    args = arguments("row-wise cumulative sums with the kernel of cumsum.phobos, checked against numpy",
                     rows={"type": int}, cols={"type": int})
    mode = pick_mode(args.mode)
    m = args.rows or (4096 if mode == "gpu" else 6)
    n = args.cols or (10_000 if mode == "gpu" else 3000)
    x = np.random.default_rng().standard_normal((m, n), dtype=np.float32)
    y = np.full_like(x, np.nan)
    cumsum_rows = phobos.load(Path(__file__).with_name("cumsum.phobos"), mode=mode).cumsum_rows
    cumsum_rows(x, y)
    print(f"cumsum_rows: {m} x {n}, mode = {mode}, configuration {cumsum_rows.config}")
    want = np.cumsum(x.astype(np.float64), axis=1)
    # f32 sums of up to n terms of size ~1: good to about n * 2^-24 relative to the sums' magnitude
    ok = report("y - cumsum(x)", y, want, rtol=1e-5, atol=n * 2.0**-24 * 10)
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(cumsum_rows, [x, y])
        print(f"time: {ms:.3f} ms per call, {2 * x.nbytes / ms / 1e6:.0f} GB/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
