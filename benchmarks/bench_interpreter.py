# Timings of the NumPy interpreter on the example kernels and a row softmax.
#
#     python3 benchmarks/bench_interpreter.py [--repeat N] [--json PATH]
#
# Prints a table (kernel, size, configuration, seconds: the best of N runs of
# one launch, arguments checked included, compilation to closures excluded)
# and writes the same rows as JSON.
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from phobos.compiler import parse_source, pick_kernel  # noqa: E402
from phobos.configuration import config_text  # noqa: E402
from phobos.run.interpreter import prepare  # noqa: E402
from phobos.frontend.sema import check_kernel  # noqa: E402

SOFTMAX = """
@autotune(ROWS in [8], COLS in [256])
kernel softmax(x: tensor<f32>[M, N], y: tensor<f32>[M, N]) {
    let r = program_id(0) * ROWS
    let t = x[r :+ ROWS, 0 :+ COLS]
    let e = exp(t - max(t, axis=1))
    y[r :+ ROWS, 0 :+ COLS] = e / sum(e, axis=1)
}
"""


def example(name: str) -> str:
    with open(os.path.join(ROOT, "examples", f"{name}.phobos")) as f:
        return f.read()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def cases(rng):
    """(kernel name, size text, source, config, grid, args) for each timing."""
    for n in (1 << 16, 1 << 20):
        a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
        yield "add", f"N={n}", example("add"), {"BLOCK": 1024}, cdiv(n, 1024), [a, b, np.zeros_like(a)]
    for m, n, k, config in [(256, 256, 256, {"TILE_M": 32, "TILE_N": 64, "TILE_K": 16}),
                            (512, 512, 512, {"TILE_M": 32, "TILE_N": 64, "TILE_K": 16}),
                            (512, 512, 512, {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64})]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = np.zeros((m, n), np.float32)
        grid = (cdiv(m, config["TILE_M"]), cdiv(n, config["TILE_N"]))
        yield "sgemm", f"{m}x{n}x{k}", example("sgemm"), config, grid, [a, b, c, 1.0, 0.0]
    x = rng.standard_normal((4096, 256), dtype=np.float32)
    yield "softmax", "4096x256", SOFTMAX, {"ROWS": 8, "COLS": 256}, cdiv(4096, 8), [x, np.zeros_like(x)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Time the NumPy interpreter on example kernels.")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best is reported")
    parser.add_argument("--json", default="bench_interpreter.json", help="where to write the results")
    opts = parser.parse_args(argv)
    rows = []
    for name, size, src, config, grid, args in cases(np.random.default_rng(0)):
        kernel = prepare(check_kernel(pick_kernel(parse_source(src, f"{name}.phobos"), None), config))
        best = float("inf")
        for _ in range(opts.repeat):
            start = time.perf_counter()
            kernel.run(grid, args)
            best = min(best, time.perf_counter() - start)
        rows.append({"kernel": name, "size": size, "config": config,
                     "grid": [grid] if isinstance(grid, int) else list(grid), "seconds": best})
    print(f"{'kernel':<10} {'size':<14} {'configuration':<36} {'seconds':>9}")
    for r in rows:
        print(f"{r['kernel']:<10} {r['size']:<14} {config_text(r['config']):<36} {r['seconds']:>9.4f}")
    with open(opts.json, "w") as f:
        json.dump({"interpreter": rows}, f, indent=2)
    print(f"wrote {opts.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
