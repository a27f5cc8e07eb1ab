#!/usr/bin/env bash
# The GPU tests and benchmarks of the call path, in one go, on a GPU machine
# (written for the H200: Python 3.12, torch, Triton, CuPy, JAX, PyCUDA).
#
#   bash benchmarks/run_gpu_suite.sh [OUT_DIR]      (default bench_results)
#
# What each step should show:
#   1. the GPU tests of the call path and the runtime: all pass
#      (test_call_path_gpu.py: ordering with torch's streams, stream=, CuPy's
#      stream, CUDA graph replay, torch.compile through torch_op, JAX via
#      DLPack, faults reported at the next synchronising call, the cubin loaded
#      after tuning; the second-device test skips on one GPU;
#      test_launcher_gpu.py and test_runtime_gpu.py: the documented call and
#      the runtime as before; in-place calls without read-only-cache loads).
#      Then the huge ones (tests/test_huge_tensors_gpu.py, 8 to 11 GB tensors),
#      each in a child process whose exit signal, output, peak RSS and kernel
#      log are in the failure message: past 2^31 elements the example add is
#      refused (its i32 block start would wrap), an add with an i64 start runs
#      exactly, softmax over [40000, 65536] matches torch.
#      `python -m pytest -m gpu` runs every GPU test (the huge ones last).
#   2. bench_call_overhead.py: µs per call, Phobos add(a, b, c) on torch tensors
#      at most torch.add's, beside Triton and CuPy; 100 calls in a CUDA graph;
#      bench_cold_start.py: the first call of sgemm and gemm_bf16 4096^3 in a
#      fresh process at most 2 s, in a second process at most 50 ms.
#   3. bench_add.py: add() GB/s through the call at 2^24 / 2^26 / 2^28 within
#      0.97 of torch.add() (the "call ratio" column).
#   4. bench_sgemm.py: sgemm() through the call beside torch.mm(); the call
#      ratio close to the kernel ratio (the call adds only host time).
#   5. bench_rows.py: softmax / layer norm / row sums over widths 64..262144 and
#      1..65536 rows, then sum / attention, through the call.
# Each benchmark prints a table and writes JSON (and a PNG where matplotlib
# is installed) under OUT_DIR; readme_tables.py prints README's Performance
# tables from that JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench_results}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # JAX shares the GPU with torch in the tests

python -m pytest -q -rs -m "gpu and not huge" tests/test_call_path_gpu.py tests/test_index_width.py \
    tests/test_launcher_gpu.py tests/test_runtime_gpu.py
python -m pytest -q -rs -m huge tests/test_huge_tensors_gpu.py   # each test's work in a child process
python benchmarks/bench_call_overhead.py --out "$OUT"
python benchmarks/bench_cold_start.py --out "$OUT"
python benchmarks/bench_add.py --out "$OUT"
python benchmarks/bench_sgemm.py --out "$OUT"
python benchmarks/bench_rows.py --out "$OUT"
python benchmarks/readme_tables.py "$OUT"   # README's Performance tables, in Markdown
