# The sum of a vector with the kernel of vector_sum.phobos (partial sums combined with
# atomic_add), checked against numpy.
#
#   python examples/vector_sum.py [--size N] [--mode gpu|interpret|emulate]
#
# The kernel stores nothing along its grid, so the grid comes from a function
# of the configuration: one program per BLOCK elements.
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, report, run, time_on_gpu


def main() -> int:
    args = arguments("sum of a vector with the kernel of vector_sum.phobos, checked against numpy",
                     size={"type": int, "help": "number of elements"})
    mode = pick_mode(args.mode)
    n = args.size or (2**26 if mode == "gpu" else 100_000)
    x = np.random.default_rng().standard_normal(n, dtype=np.float32)
    total = np.zeros(1, np.float32)
    vector_sum = phobos.load(Path(__file__).with_name("vector_sum.phobos"), mode=mode).vector_sum
    vector_sum = vector_sum[lambda config, sizes: (math.ceil(sizes["N"] / config["BLOCK"]),)]
    vector_sum(x, total)
    print(f"vector_sum: n = {n}, mode = {mode}, configuration {vector_sum.config}")
    # An f32 sum in any order (tree sums per program, atomic adds between them) is good to a small multiple
    # of 2^-24 of the size of its terms, sum(|x|), not of its result, which can lie near zero.
    ok = report("total - sum(x)", total, np.array([x.astype(np.float64).sum()]), rtol=0,
                atol=2.0**-24 * float(np.abs(x).astype(np.float64).sum()))
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(vector_sum, [x, total])
        print(f"time: {ms:.3f} ms per call, {x.nbytes / ms / 1e6:.0f} GB/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
