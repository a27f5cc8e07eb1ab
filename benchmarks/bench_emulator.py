# Times the PTX emulator on a few kernels: the SGEMM and add that the Phobos
# compiler generates (examples/), a vector add, an nvcc-generated shared-memory
# SGEMM (with and without race detection), a block reduction, a warp-shuffle
# reduction, a tiled transpose and a divergent loop.  Prints a table and writes
# the figures as JSON.
#
#     python benchmarks/bench_emulator.py [--repeat N] [--json PATH]
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from phobos.compiler import compile  # noqa: E402
from phobos.run.emulator import Module  # noqa: E402

DATA = ROOT / "tests" / "data" / "emulator"


def module(name: str) -> Module:
    return Module((DATA / name).read_text(), name)


def cases(rng: np.random.Generator):
    """(name, module, kernel, grid, block, argument factory, launch options)."""
    vadd, nvcc, shared = module("vadd.ptx"), module("nvcc_kernels.ptx"), module("shared.ptx")
    warp, control = module("warp.ptx"), module("control.ptx")
    n = 1 << 20

    def vadd_args():
        return [rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32),
                np.zeros(n, np.float32), n]

    def sgemm_args(size):
        def make():
            a, b = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
            return [a, b, np.zeros((size, size), np.float32), size, size, size, 1.0, 0.0]
        return make

    def transpose_args():
        return [rng.standard_normal((1024, 1024)).astype(np.float32), np.zeros((1024, 1024), np.float32),
                1024, 1024]

    def collatz_args():
        return [rng.integers(1, 10000, 65536).astype(np.uint32), np.zeros(65536, np.uint32), 65536]

    def phobos_kernel(name: str, config: dict) -> tuple[Module, object]:
        k = compile((ROOT / "examples" / f"{name}.phobos").read_text(), config=config,
                    filename=f"examples/{name}.phobos")
        return Module(k.ptx, f"{name}.ptx"), k

    def phobos_sgemm(size, config):
        mod, k = phobos_kernel("sgemm", config)
        grid = (-(-size // config["TILE_M"]), -(-size // config["TILE_N"]))

        def make():
            a, b, c = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(3))
            return [a, b, c, 1.5, 0.5, size, size, size]
        return (f"phobos sgemm {size}^3 {config['TILE_M']}x{config['TILE_N']}x{config['TILE_K']}", mod, "sgemm",
                grid, k.threads, make, {"shared_bytes": k.shared_bytes})

    add_mod, add_k = phobos_kernel("add", {"BLOCK": 1024})
    return [
        phobos_sgemm(128, {"TILE_M": 32, "TILE_N": 64, "TILE_K": 16}),
        phobos_sgemm(128, {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32}),
        ("phobos add 1M", add_mod, "add", n // 1024, add_k.threads, lambda: vadd_args()[:3] + [n], {}),
        ("vadd 1M", vadd, "vadd", n // 256, 256, vadd_args, {}),
        ("sgemm 128^3 (nvcc)", nvcc, "sgemm", (2, 2), 256, sgemm_args(128), {}),
        ("sgemm 128^3, no race check", nvcc, "sgemm", (2, 2), 256, sgemm_args(128), {"check_races": False}),
        ("sgemm 256^3 (nvcc)", nvcc, "sgemm", (4, 4), 256, sgemm_args(256), {}),
        ("block_sum 1M", shared, "block_sum", n // 256, 256,
         lambda: [rng.standard_normal(n).astype(np.float32), np.zeros(n // 256, np.float32)], {}),
        ("warp_sum 1M", warp, "warp_sum", n // 256, 256,
         lambda: [rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32)], {}),
        ("transpose 1024^2", shared, "transpose", (32, 32), (32, 8), transpose_args, {}),
        ("collatz 64k (divergent)", control, "collatz", 256, 256, collatz_args, {}),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="runs per kernel (the best is kept)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench_results" / "emulator.json")
    options = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for name, mod, kernel, grid, block, make_args, launch_options in cases(rng):
        best = None
        for _ in range(options.repeat):
            args = make_args()
            start = time.perf_counter()
            stats = mod.launch(kernel, grid, block, args, **launch_options)
            elapsed = time.perf_counter() - start
            best = elapsed if best is None else min(best, elapsed)
        rows.append({"kernel": name, "threads": stats.threads, "steps": stats.steps,
                     "batches": stats.batches, "seconds": round(best, 4),
                     "us_per_step": round(1e6 * best / stats.steps, 1)})
    header = f"{'kernel':<28} {'threads':>9} {'steps':>7} {'batches':>7} {'seconds':>8} {'us/step':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['kernel']:<28} {r['threads']:>9} {r['steps']:>7} {r['batches']:>7} "
              f"{r['seconds']:>8.3f} {r['us_per_step']:>8.1f}")
    options.json.parent.mkdir(parents=True, exist_ok=True)
    options.json.write_text(json.dumps({
        "machine": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
        "results": rows}, indent=2) + "\n")
    print(f"\nwrote {options.json}")


if __name__ == "__main__":
    main()
