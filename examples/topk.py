# The 8 largest elements of each row, and where they are, with the kernel of topk.phobos,
# checked against numpy's stable sort.
#
#   python examples/topk.py [--rows M] [--cols N] [--mode gpu|interpret|emulate]
from __future__ import annotations

from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, run, time_on_gpu


def main() -> int:
    args = arguments("top-8 of each row with the kernel of topk.phobos, checked against numpy",
                     rows={"type": int}, cols={"type": int})
    mode = pick_mode(args.mode)
    m = args.rows or (8192 if mode == "gpu" else 5)
    n = args.cols or (4096 if mode == "gpu" else 700)
    rng = np.random.default_rng()
    x = rng.integers(-1000, 1000, (m, n)).astype(np.float32)  # ties happen: the first one is taken
    values, indices = np.zeros((m, 8), np.float32), np.zeros((m, 8), np.int32)
    top8 = phobos.load(Path(__file__).with_name("topk.phobos"), mode=mode).top8
    top8(x, values, indices)
    print(f"top8: {m} x {n}, mode = {mode}, configuration {top8.config}")
    order = np.argsort(-x, axis=1, kind="stable")[:, :8]
    ok = np.array_equal(indices, order) and np.array_equal(values, np.take_along_axis(x, order, axis=1))
    print(f"values and indices equal numpy's: {'ok' if ok else 'WRONG'}")
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(top8, [x, values, indices])
        print(f"time: {ms:.3f} ms per call, {x.nbytes / ms / 1e6:.0f} GB/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
