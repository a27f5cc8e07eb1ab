# c = a + b with the kernel of add.phobos, checked against numpy.
#
#   python examples/add.py [--size N] [--mode gpu|interpret|emulate]
#
# On a machine with a GPU the kernel runs there and the script prints how long
# a call takes (CUDA events, through phobos.launch.launcher.benchmark); without one it
# runs a small size on the CPU, in the interpreter (or `--mode emulate`: the
# generated PTX, in the emulator).
from __future__ import annotations

from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, report, run, time_on_gpu

GPU_SIZE = 2**24 + 3  # not a multiple of the block: the last program is partly masked
CPU_SIZE = 10_000


def main() -> int:
    args = arguments("c = a + b with the kernel of add.phobos, checked against numpy",
                     size={"type": int, "help": "number of elements"})
    mode = pick_mode(args.mode)
    n = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    c = np.empty_like(a)
    add = phobos.load(Path(__file__).with_name("add.phobos"), mode=mode).add
    add(a, b, c)
    print(f"add: n = {n}, mode = {mode}, configuration {add.config}")
    ok = report("c - (a + b)", c, a.astype(np.float64) + b, rtol=1e-6, atol=1e-6)
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(add, [a, b, c])
        print(f"time: {ms:.3f} ms per call, {3 * a.nbytes / ms / 1e6:.0f} GB/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
