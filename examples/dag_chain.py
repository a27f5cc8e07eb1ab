# A chain of kernels on a Dask cluster: X = A @ B, Y = softmax(X) by rows, Z = Y @ D
# (sgemm.phobos, softmax.phobos), checked against numpy.
#
#   python examples/dag_chain.py [--size M K N P] [--workers W] [--scheduler ADDRESS]
#                                [--mode gpu|interpret|emulate]
#
# Each call is split into tasks by the granularity rule (phobos.dag: tasks of
# at least 50 times Dask's overhead each, no more than the workers), the tasks
# of one call wait only for the tasks of the call before whose blocks they
# read - a softmax row block starts as soon as the product's row block it
# needs is done - and X and Y never leave the workers.  The script prints the
# graph's edges between calls.
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from example_support import arguments, connect, pick_mode, report, run
from phobos import dag

GPU_SIZE = (8192, 4096, 4096, 4096)
CPU_SIZE = (64, 48, 96, 40)  # M, K, N, P


def main() -> int:
    args = arguments("X = A B, Y = softmax(X), Z = Y D on a Dask cluster, checked against numpy",
                     size={"type": int, "nargs": 4, "metavar": ("M", "K", "N", "P")},
                     workers={"type": int, "help": "workers of the LocalCluster (default: one per GPU, else 2)"},
                     scheduler={"help": "address of a running Dask scheduler to use instead"})
    mode = pick_mode(args.mode)
    M, K, N, P = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    a, b, d = (rng.standard_normal(shape, dtype=np.float32) for shape in ((M, K), (K, N), (N, P)))
    count = args.workers or (None if mode == "gpu" else 2)
    with connect(args.scheduler) as client, dag.Session(client, workers=count, mode=mode) as session:
        here = Path(__file__).parent
        sgemm = session.load(here / "sgemm.phobos").sgemm
        softmax = session.load(here / "softmax.phobos").softmax
        A, B, D = session.from_array(a), session.from_array(b), session.from_array(d)
        X, Y, Z = session.zeros((M, N)), session.zeros((M, N)), session.zeros((M, P))
        start = time.perf_counter()
        sgemm(A, B, X, alpha=1.0, beta=0.0)
        softmax(X, Y)
        sgemm(Y, D, Z, alpha=1.0, beta=0.0)
        z = Z.gather()
        seconds = time.perf_counter() - start
        calls = {}
        for earlier, later, kind in session.graph.edges():
            if not earlier.label.startswith("block"):
                pair = (earlier.label.split(",")[0], later.label.split(",")[0], kind)
                calls[pair] = calls.get(pair, 0) + 1
        workers = f"{session.workers} worker{'s' * (session.workers != 1)}"
        print(f"dag_chain: M, K, N, P = {M}, {K}, {N}, {P}, mode = {mode}, {workers}; "
              f"tasks per call {sgemm.last_split}, {softmax.last_split}; {seconds:.2f} s (first calls included)")
        for (earlier, later, kind), count in calls.items():
            print(f"  {count} {kind} edge{'s' * (count != 1)} from {earlier} to {later}")
    x = a.astype(np.float64) @ b
    e = np.exp(x - x.max(axis=1, keepdims=True))
    expected = (e / e.sum(axis=1, keepdims=True)) @ d
    return 0 if report("Z - softmax(A B) D", z, expected, rtol=1e-4, atol=1e-4) else 1


if __name__ == "__main__":
    run(main)
