"""Compile speed: milliseconds per configuration and stage, lines of PTX per second, and ptxas beside it.

    python benchmarks/compile_speed.py [--quick] [--workers 16] [--arch sm_90a] [--out bench_results]

For each kernel and each configuration its first call would compile - the
autotune space of sgemm and gemm_bf16 at 4096^3 (gemm_bf16 as the GPU builds
it for torch tensors: with TMA), the row kernels at a few widths, add - this
compiles the configuration in this process and prints, per kernel:

- the compiler's milliseconds per configuration, by stage (check, IR and tile
  passes, lowering and thread passes, instruction selection and register
  allocation, emission: CompiledKernel.timings), the lines of PTX and the
  compiler's lines of PTX per second;
- ptxas's milliseconds per configuration (-arch=ARCH, as the autotuner runs it)
  and its lines per second;
- what the first call's compiling costs: CPU seconds over all configurations,
  and the wall time the compile workers need for them on --workers cores
  (the configurations dealt, longest first, to the worker that is free first,
  as phobos.launch.parallel does; the workers' start-up excluded).

Each configuration is compiled once (--repeat for the best of several); the
parse is timed once per file.  Needs ptxas for its columns (else they are
left out).  Prints a table, writes <out>/compile_speed.json.  A regression in
any stage shows as a change in its column; the per-kernel totals say what a
cold first call spends compiling before the GPU times anything.
"""
from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))

import phobos  # noqa: E402
from phobos import toolchain  # noqa: E402
from phobos.compiler import CodeOptions, compile_kernel, parse_source, pick_kernel  # noqa: E402
from phobos.errors import PhobosError, ToolchainError  # noqa: E402

GEMM = {"M": 4096, "N": 4096, "K": 4096}
# (file, kernel, sizes the first call has, code options the call gives)
CASES = [("add.phobos", "add", {"N": 1 << 24}, CodeOptions()),
         ("sgemm.phobos", "sgemm", GEMM, CodeOptions()),
         ("gemm_bf16.phobos", "gemm_bf16", GEMM, CodeOptions(tma=True)),
         ("softmax.phobos", "softmax", {"M": 4096, "N": 1000}, CodeOptions()),
         ("softmax.phobos", "softmax", {"M": 64, "N": 100000}, CodeOptions()),
         ("layernorm.phobos", "layernorm", {"M": 4096, "N": 4096}, CodeOptions()),
         ("row_sum.phobos", "row_sum", {"M": 65536, "N": 64}, CodeOptions())]
QUICK_CASES = [CASES[0], CASES[1], CASES[3]]
STAGES = ["check", "irgen+tile passes", "lower+thread passes", "isel+regalloc", "emit"]


def best_of(repeat: int, fn):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def ptxas_seconds(ptx: str, arch: str) -> float | None:
    try:
        start = time.perf_counter()
        toolchain.run_ptxas(ptx, arch)
        return time.perf_counter() - start
    except ToolchainError:
        return None


def wall_on(workers: int, seconds: list[float]) -> float:
    """The makespan of jobs dealt longest first to whichever of `workers` is free first."""
    free = [0.0] * max(1, workers)
    for job in sorted(seconds, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + job)
    return max(free)


def measure(file: str, kernel_name: str, sizes: dict, options: CodeOptions, arch: str, repeat: int,
            limit: int | None) -> tuple[dict, list[dict]]:
    source = (ROOT / "examples" / file).read_text()
    parse_s, program = best_of(1, lambda: parse_source(source, file))
    kernel = pick_kernel(program, kernel_name)
    fn = getattr(phobos.jit(source, file, mode="interpret"), kernel_name)
    configs = fn.rules.serving(fn.rules.autotune_configurations(), sizes)[0][:limit]
    rows = []
    for config in configs:
        try:
            seconds, compiled = best_of(repeat, lambda: compile_kernel(kernel, arch=arch, config=config,
                                                                      **options.keywords()))
        except PhobosError as error:  # a configuration the compiler refuses (too many registers): the tuner skips it
            rows.append({"config": config, "error": error.message.splitlines()[0]})
            continue
        lines = compiled.ptx.count("\n")
        row = {"config": config, "compile_ms": 1e3 * seconds, "lines": lines,
               **{f"{stage}_ms": 1e3 * compiled.timings.get(stage, 0.0) for stage in STAGES}}
        ptxas = ptxas_seconds(compiled.ptx, arch)
        if ptxas is not None:
            row["ptxas_ms"] = 1e3 * ptxas
        rows.append(row)
    done = [r for r in rows if "compile_ms" in r]
    compile_s = sum(r["compile_ms"] for r in done) / 1e3
    lines = sum(r["lines"] for r in done)
    summary = {"kernel": f"{kernel_name} {'x'.join(map(str, sizes.values()))}", "file": file,
               "options": options.keywords(), "configurations": len(configs), "parse_ms": 1e3 * parse_s,
               "compile_ms_mean": 1e3 * compile_s / max(1, len(done)), "lines_mean": lines / max(1, len(done)),
               "compiler_lines_per_s": lines / compile_s if compile_s else 0.0,
               **{f"{stage}_ms_mean": sum(r[f"{stage}_ms"] for r in done) / max(1, len(done))
                  for stage in STAGES}}
    if done and all("ptxas_ms" in r for r in done):
        ptxas_s = sum(r["ptxas_ms"] for r in done) / 1e3
        summary.update(ptxas_ms_mean=1e3 * ptxas_s / len(done), ptxas_lines_per_s=lines / ptxas_s,
                       cpu_s=compile_s + ptxas_s)
        jobs = [(r["compile_ms"] + r["ptxas_ms"]) / 1e3 for r in done]
    else:
        summary["cpu_s"] = compile_s
        jobs = [r["compile_ms"] / 1e3 for r in done]
    summary["jobs_s"] = jobs
    return summary, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--workers", type=int, default=16, help="cores the first call's compile workers get")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="three kernels, at most 6 configurations each")
    parser.add_argument("--out", default="bench_results")
    args = parser.parse_args()
    summaries, details = [], {}
    for file, kernel_name, sizes, options in (QUICK_CASES if args.quick else CASES):
        summary, rows = measure(file, kernel_name, sizes, options, args.arch, args.repeat, 6 if args.quick else None)
        summary[f"wall_s_on_{args.workers}"] = wall_on(args.workers, summary.pop("jobs_s"))
        summaries.append(summary)
        details[summary["kernel"]] = rows
        print(f"{summary['kernel']}: {summary['configurations']} configurations compiled", flush=True)
    heads = [("kernel", "kernel", "", 24), ("configurations", "configs", "d", 7),
             ("lines_mean", "PTX lines", ".0f", 9)] + \
        [(f"{stage}_ms_mean", stage.split("+")[0] + " ms", ".1f", 9) for stage in STAGES] + \
        [("compile_ms_mean", "compile ms", ".1f", 10), ("compiler_lines_per_s", "lines/s", ".0f", 8),
         ("ptxas_ms_mean", "ptxas ms", ".1f", 8), ("ptxas_lines_per_s", "ptxas lines/s", ".0f", 13),
         ("cpu_s", "CPU s", ".2f", 6), (f"wall_s_on_{args.workers}", f"wall s on {args.workers}", ".2f", 12)]
    print(f"\nper configuration, means ({args.arch}; this machine: {platform_text()})")
    print("  ".join(head.rjust(width) for _, head, _, width in heads))
    for s in summaries:
        print("  ".join((format(s[key], fmt) if key in s else "-").rjust(width) if fmt else str(s[key]).rjust(width)
                        for key, _, fmt, width in heads))
    out = Path(args.out) / "compile_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "compile_speed", "arch": args.arch, "machine": platform_text(),
                               "workers": args.workers, "kernels": summaries, "configurations": details}, indent=2))
    print(f"wrote {out}")


def platform_text() -> str:
    import os
    import platform
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


if __name__ == "__main__":
    main()
