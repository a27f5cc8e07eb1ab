"""README's Performance tables, in Markdown, from the JSON the GPU benchmarks wrote.

    python benchmarks/readme_tables.py [bench_results]

Reads sgemm.json (bench_sgemm.py), add.json (bench_add.py), rows.json
(bench_rows.py), call_overhead.json (bench_call_overhead.py), cold_start.json
(bench_cold_start.py), gemm_tc.json (bench_gemm_tc.py) and dag.json
(bench_dag.py) where they are, and prints
one table per file: the documented call first (`mod.k(...)` back to back on
torch's stream, beside the reference called the same way), the kernel alone
second, then the ratios.  A missing file is named and skipped; a figure the
file does not have (JSON of an older run: kernel times only) is left blank.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def number(value, digits: int) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def markdown(heads: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def tile_text(config: dict) -> str:
    """64 x 128 x 32 for TILE_M, TILE_N, TILE_K (the rest after them), else NAME=value pairs."""
    tiles = [config[name] for name in ("TILE_M", "TILE_N", "TILE_K") if name in config]
    rest = [f"{name}={value}" for name, value in config.items() if name not in ("TILE_M", "TILE_N", "TILE_K")]
    return " ".join(filter(None, [" x ".join(map(str, tiles)), ", ".join(rest)]))


def sgemm_table(data: dict) -> str:
    heads = ["M x N x K", "sgemm() TFLOP/s", "torch.mm() TFLOP/s", "call ratio", "kernel TFLOP/s",
             "cuBLAS kernel TFLOP/s", "kernel ratio", "% of FP32 peak", "configuration chosen"]
    rows = [[r["shape"].replace("x", " x "), number(r.get("call_phobos_tflops"), 1), number(r.get("call_cublas_tflops"), 1),
             number(r.get("call_ratio"), 2), number(r.get("phobos_tflops"), 1), number(r.get("cublas_tflops"), 1),
             number(r.get("ratio"), 2), number(r.get("peak_percent"), 0), tile_text(r.get("config") or {})]
            for r in data["rows"]]
    peak = data.get("fp32_peak_tflops")
    note = f"SGEMM, fp32 throughout (cuBLAS through torch.mm with TF32 off; FP32 peak {number(peak, 1)} TFLOP/s):"
    return note + "\n\n" + markdown(heads, rows)


def add_table(data: dict) -> str:
    heads = ["elements (fp32)", "add() GB/s", "torch.add() GB/s", "call ratio", "kernel GB/s", "torch kernel GB/s",
             "kernel ratio", "hand-written add.ptx GB/s", "copy GB/s"]
    rows = [[r["elements"], number(r.get("call_phobos_gbs"), 0), number(r.get("call_torch_gbs"), 0),
             number(r.get("call_ratio"), 3), number(r.get("phobos_gbs"), 0), number(r.get("torch_gbs"), 0),
             number(r.get("ratio"), 3), number(r.get("handwritten_gbs"), 0), number(r.get("copy_gbs"), 0)]
            for r in data["rows"]]
    return "Vector add, c = a + b (12 bytes per element):\n\n" + markdown(heads, rows)


def rows_table(data: dict) -> str:
    """The sweep (rows with a shape: one matrix of call ratios per kernel, columns across, row counts down),
    then the other rows one a line."""
    swept = [r for r in data["rows"] if "columns" in r]
    text = ""
    for kernel in dict.fromkeys(r["kernel"] for r in swept):
        mine = [r for r in swept if r["kernel"] == kernel]
        widths = sorted({r["columns"] for r in mine})
        cell = {(r["rows"], r["columns"]): r for r in mine}
        lines = [[str(m)] + [f"{number(cell[m, n].get('call_ratio'), 2)} ({number(cell[m, n].get('ratio'), 2)})"
                             if (m, n) in cell else "" for n in widths] for m in sorted({r["rows"] for r in mine})]
        reference = mine[0].get("reference", "torch")
        text += (f"{kernel} through the call beside {reference}, Phobos / reference: the documented calls "
                 f"(the kernels alone), rows down, columns across:\n\n"
                 + markdown(["rows"] + [str(n) for n in widths], lines) + "\n\n")
    heads = ["kernel", "unit", "Phobos call", "reference call", "call ratio", "Phobos kernel", "reference kernel",
             "kernel ratio", "Triton call / kernel"]
    rows = []
    for r in data["rows"]:
        if "columns" in r:
            continue
        call, kernel = number(r.get("call_triton_gbs"), 0), number(r.get("triton_gbs"), 0)
        triton = f"{call or '-'} / {kernel or '-'}" if call or kernel else ""
        rows.append([r["kernel"], r.get("unit", "GB/s"), number(r.get("call_phobos_gbs"), 1),
                     f"{r.get('reference', 'torch')} {number(r.get('call_torch_gbs'), 1)}", number(r.get("call_ratio"), 2),
                     number(r.get("phobos_gbs"), 1), number(r.get("torch_gbs"), 1), number(r.get("ratio"), 2), triton])
    if rows:
        text += ("Row kernels and reductions (GB/s count one read and one write of the matrix; attention in "
                 "TFLOP/s):\n\n" + markdown(heads, rows))
    return text.rstrip("\n")


def call_overhead_table(data: dict) -> str:
    rows = [[r["call"], number(r["us"], 2)] for r in data["rows"]]
    return (f"Host cost per call (c = a + b on {data.get('elements', '?')} fp32 elements, back to back):\n\n"
            + markdown(["call", "µs per call"], rows))


def cold_start_table(data: dict) -> str:
    rows = [[r["first call"], number(r.get("first_call_s"), 3) or f"failed: {r.get('error', '?')}",
             r.get("target", ""), str(r.get("configurations", ""))] for r in data["rows"]]
    return "The first call of a tuned kernel, in a fresh process:\n\n" + markdown(
        ["first call", "seconds", "target", "configurations"], rows)


def gemm_tc_table(data: dict) -> str:
    heads = ["kernel", "shape", "Phobos TFLOP/s", "reference", "reference TFLOP/s", "ratio", "bar",
             "max error (reference's)", "configuration chosen"]
    rows = []
    for r in data["rows"]:
        if r.get("status", "ok") != "ok":
            rows.append([r.get("group", "?"), r.get("shape", ""), f"{r.get('status')}: {r.get('error', '')}"[:80],
                         r.get("reference", ""), "", "", "", "", ""])
            continue
        error = f"{r['phobos_error']:.2g} ({r['reference_error']:.2g})" if "phobos_error" in r else ""
        bar = r.get("target")
        rows.append([r["group"], r["shape"], number(r.get("phobos_tflops"), 0), r.get("reference", ""),
                     number(r.get("reference_tflops"), 0), number(r.get("ratio"), 2),
                     (f">= {bar}" + ("" if r.get("meets_target") else " (missed)")) if bar else "", error,
                     tile_text(r.get("config") or {})])
    return ("Tensor cores, through the call (`mod.k(...)`) beside the reference called the same way "
            "(attention: L = 4096, 32 heads, K given transposed; a causal attention counts half the products):\n\n" + markdown(heads, rows))


def dag_table(data: dict) -> str:
    heads = ["workers", "GPUs", "split", "tasks", "DAG ms", "direct call ms", "DAG / direct", "same bits", "TFLOP/s"]
    rows = [[str(r["workers"]), str(r["gpus"]), " x ".join(map(str, r.get("split", []))), str(r.get("tasks", "")),
             number(r.get("wall_ms"), 1), number(r.get("direct_ms"), 1), number(r.get("dag_over_direct"), 3),
             str(r.get("same_bits", "")), number(r.get("tflops"), 1)] for r in data["rows"]]
    return "The tile DAG (sgemm through Dask workers, against the same kernel called directly):\n\n" + markdown(heads, rows)


#: The tables, in README's order: file name -> how it is printed.
TABLES = {"sgemm.json": sgemm_table, "add.json": add_table, "rows.json": rows_table,
          "call_overhead.json": call_overhead_table, "cold_start.json": cold_start_table,
          "gemm_tc.json": gemm_tc_table, "dag.json": dag_table}


def main() -> None:
    directory = Path(sys.argv[1] if len(sys.argv) > 1 else "bench_results")
    seen = set()
    for name, make in TABLES.items():
        path = directory / name
        if not path.exists():
            print(f"<!-- {path} not found: run benchmarks/{'bench_' + path.stem}.py -->\n")
            continue
        data = json.loads(path.read_text())
        seen.add((data.get("date"), data.get("device"), data.get("torch")))
        print(make(data) + "\n")
    for day, device, torch in sorted(seen, key=str):
        print(f"<!-- measured {day} on {device}, torch {torch} -->")


if __name__ == "__main__":
    main()
