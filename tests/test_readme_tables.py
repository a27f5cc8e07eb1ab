# benchmarks/readme_tables.py: README's Performance tables from the benchmarks'
# JSON, the documented call first and the kernel alone second.
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "readme_tables.py"


def test_tables_from_the_benchmarks_json(tmp_path):
    meta = {"date": "2026-12-01", "device": "NVIDIA H200", "torch": "2.11"}
    (tmp_path / "add.json").write_text(json.dumps({**meta, "rows": [
        {"elements": "2^24", "call_phobos_gbs": 3990.4, "call_torch_gbs": 4012.0, "call_ratio": 0.9946,
         "phobos_gbs": 4079.2, "torch_gbs": 4049.9, "ratio": 1.0072, "handwritten_gbs": 3207, "copy_gbs": 3878}]}))
    (tmp_path / "sgemm.json").write_text(json.dumps({**meta, "fp32_peak_tflops": 66.9, "rows": [
        {"shape": "4096x4096x4096", "call_phobos_tflops": 47.1, "call_cublas_tflops": 50.8, "call_ratio": 0.927,
         "phobos_tflops": 47.6, "cublas_tflops": 51.2, "ratio": 0.93, "peak_percent": 71.2,
         "config": {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32, "GROUP_M": 8}}]}))
    (tmp_path / "rows.json").write_text(json.dumps({**meta, "rows": [  # an older run: kernel times only
        {"kernel": "softmax 4096x4096", "phobos_gbs": 3656.8, "torch_gbs": 2343.2, "ratio": 1.56,
         "triton_gbs": 3699.0, "unit": "GB/s"},
        *({"kernel": "row_sum", "rows": m, "columns": n, "call_ratio": m / n, "ratio": n / m, "reference": "torch.sum"}
          for m, n in ((1, 64), (16, 64), (16, 1000)))]}))
    (tmp_path / "cold_start.json").write_text(json.dumps({**meta, "rows": [
        {"first call": "Phobos sgemm 4096^3, empty cache", "first_call_s": 1.8123, "target": "<= 2 s",
         "configurations": 27}, {"first call": "Triton", "error": "no GPU"}]}))
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert "| 2^24 | 3990 | 4012 | 0.995 | 4079 | 4050 | 1.007 | 3207 | 3878 |" in lines
    assert "| 4096 x 4096 x 4096 | 47.1 | 50.8 | 0.93 | 47.6 | 51.2 | 0.93 | 71 | 64 x 128 x 32 GROUP_M=8 |" in lines
    assert "| softmax 4096x4096 | GB/s |  | torch  |  | 3656.8 | 2343.2 | 1.56 | - / 3699 |" in lines
    assert "| rows | 64 | 1000 |" in lines  # the sweep: one matrix a kernel, the call ratio (the kernel's)
    assert "| 1 | 0.02 (64.00) |  |" in lines and "| 16 | 0.25 (4.00) | 0.02 (62.50) |" in lines
    assert "| Phobos sgemm 4096^3, empty cache | 1.812 | <= 2 s | 27 |" in lines
    assert "| Triton | failed: no GPU |  |  |" in lines
    assert any("call_overhead.json not found" in line for line in lines)
    assert "<!-- measured 2026-12-01 on NVIDIA H200, torch 2.11 -->" in lines
