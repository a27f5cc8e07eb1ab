#!/usr/bin/env bash
# Rows of every shape, what the call costs and the first call, in one go on a
# GPU machine (about five minutes on an H100):
#
#   bash benchmarks/run_shapes_suite.sh [OUT_DIR]      (default bench_results)
#
#   1. the GPU tests of CUDA graphs around the documented call (add, and the
#      tuned softmax and layer norm replayed on new data): pass;
#   2. bench_call_overhead.py: µs per call of Phobos add(a, b, c) beside
#      torch.add, Triton and CuPy (target: Phobos / torch.add at most 1), its
#      parts (the bare launch, the rest), 100 calls in a CUDA graph replayed,
#      and the driver's launch entry points timed bare beside a no-op C
#      function (the driver's own µs);
#   3. bench_cold_start.py: the first call of sgemm and gemm_bf16 at 4096^3 in
#      a fresh process with an empty cache (target 2 s) and in a second
#      process on that cache (target 50 ms), beside Triton's first calls;
#   4. bench_rows.py: softmax, layer norm and row sums, widths 64 to 262144 x
#      1 to 65536 rows, through the call beside torch and Triton: a table, a
#      matrix of ratios per kernel, the shapes below torch, rows.png;
#   5. compile_speed.py: the compiler's ms per configuration and stage, lines
#      of PTX per second, ptxas beside it, and the wall time the first call's
#      compiling takes on this machine's cores.
# Each benchmark prints its table and writes JSON (and a PNG where matplotlib
# is installed) under OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench_results}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

python -m pytest -q -rs -m gpu tests/test_call_path_gpu.py -k "cuda_graph"
python benchmarks/bench_call_overhead.py --out "$OUT"
python benchmarks/bench_cold_start.py --out "$OUT"
python benchmarks/bench_rows.py --out "$OUT"
python benchmarks/compile_speed.py --workers "$(nproc)" --out "$OUT"
