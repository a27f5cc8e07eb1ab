# C = A @ B on a Dask cluster, SUMMA-style, with the kernel of sgemm.phobos.
#
#   python examples/dag_sgemm.py [--size M K N] [--panels P] [--workers W] [--scheduler ADDRESS]
#                                [--mode gpu|interpret|emulate]
#
# A is cut into row blocks and K-panels, B into K-panels and column blocks,
# and C into a 2-D grid of blocks, one task each.  The product is P panel
# updates, C += A[:, panel] @ B[panel, :]: each is one call of the kernel on
# views of A and B, split into the same blocks of C, so the task that updates
# block (i, j) at step k needs row block i of A's panel k and column block j
# of B's panel k (SUMMA's broadcasts, done by Dask moving blocks to the tasks)
# and the block (i, j) of the step before.  Without --scheduler a LocalCluster
# starts here: one worker per GPU, or W CPU workers running the kernel in the
# PTX emulator or the interpreter.  The result is checked against numpy.
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from example_support import arguments, connect, pick_mode, report, run
from phobos import dag

GPU_SIZE = (8192, 8192, 8192)
CPU_SIZE = (96, 96, 160)  # M, K, N


def main() -> int:
    args = arguments("C = A @ B on a Dask cluster, SUMMA-style, checked against numpy",
                     size={"type": int, "nargs": 3, "metavar": ("M", "K", "N")},
                     panels={"type": int, "default": 3, "help": "K-panels (default 3)"},
                     workers={"type": int, "help": "workers of the LocalCluster (default: one per GPU, else 2)"},
                     scheduler={"help": "address of a running Dask scheduler to use instead"})
    mode = pick_mode(args.mode)
    M, K, N = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    count = args.workers or (None if mode == "gpu" else 2)
    with connect(args.scheduler) as client, dag.Session(client, workers=count, mode=mode) as session:
        rows = cols = 1
        while rows * cols < session.workers:  # a grid of C blocks with one block per worker
            rows, cols = (rows * 2, cols) if rows <= cols else (rows, cols * 2)
        panel = -(-K // args.panels)
        A = session.from_array(a, blocks=(rows, args.panels))
        B = session.from_array(b, blocks=(args.panels, cols))
        C = session.zeros((M, N))
        sgemm = session.load(Path(__file__).with_name("sgemm.phobos")).sgemm.split((rows, cols))
        start = time.perf_counter()
        for k in range(0, K, panel):
            sgemm(A[:, k:k + panel], B[k:k + panel, :], C, alpha=1.0, beta=1.0)
        session.wait()
        seconds = time.perf_counter() - start
        c = C.gather()
        tasks = sum(t.label.startswith("sgemm") for t in session.graph.tasks)
        workers = f"{session.workers} worker{'s' * (session.workers != 1)}"
        print(f"dag_sgemm: M, K, N = {M}, {K}, {N}, mode = {mode}, {workers}, "
              f"{args.panels} panels x {rows} x {cols} blocks of C = {tasks} tasks; {seconds:.2f} s "
              f"({2 * M * N * K / seconds / 1e12:.2f} TFLOP/s, first calls included)")
    return 0 if report("C - A B", c, a.astype(np.float64) @ b, rtol=1e-4, atol=2e-5 * K) else 1


if __name__ == "__main__":
    run(main)
