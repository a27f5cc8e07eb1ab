"""Compile speed: milliseconds per autotune configuration, by stage, and ptxas separately.

    python benchmarks/compile_speed.py [--repeat 5] [--json out.json]

For each example kernel and configuration: the front end (parse + check), the
back end (IR generation, passes, lowering, instruction selection, register
allocation, emission) and ptxas (sm_90), each the best of --repeat runs, on this
machine.  Prints a table and writes JSON.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from phobos.compiler import compile_kernel, parse_source
from phobos.frontend.sema import check_kernel, configurations
from phobos.toolchain import run_ptxas

ROOT = Path(__file__).parent.parent
CASES = [("add.phobos", None), ("sgemm.phobos", {"TILE_M": 32, "TILE_N": 64, "TILE_K": 16}),
         ("sgemm.phobos", {"TILE_M": 128, "TILE_N": 64, "TILE_K": 16}),
         ("sgemm.phobos", {"TILE_M": 128, "TILE_N": 256, "TILE_K": 16}),
         ("softmax.phobos", None), ("layernorm.phobos", None)]


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def measure(name: str, config, repeat: int) -> dict:
    src = (ROOT / "examples" / name).read_text()
    front, program = best_of(repeat, lambda: parse_source(src, name))
    kernel = program.kernels[0]
    config = config or configurations(kernel)[0]
    check, _ = best_of(repeat, lambda: check_kernel(kernel, config))
    total, compiled = best_of(repeat, lambda: compile_kernel(kernel, config=config))
    ptxas, _ = best_of(max(1, repeat // 2), lambda: run_ptxas(compiled.ptx, "sm_90"))
    return {"kernel": name, "config": compiled.config_text, "front_ms": 1e3 * (front + check),
            "back_ms": 1e3 * (total - check), "ptxas_ms": 1e3 * ptxas, "ptx_lines": compiled.ptx.count("\n")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", default="bench_results/compile_speed.json")
    args = parser.parse_args()
    rows = [measure(name, config, args.repeat) for name, config in CASES]
    print(f"{'kernel':18} {'configuration':36} {'front ms':>9} {'back ms':>9} {'ptxas ms':>9} {'PTX lines':>10}")
    for r in rows:
        print(f"{r['kernel']:18} {r['config']:36} {r['front_ms']:9.1f} {r['back_ms']:9.1f} {r['ptxas_ms']:9.1f} "
              f"{r['ptx_lines']:10d}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
