# The parts of the GPU benchmarks that run on the CPU: the shapes bench_rows.py
# sweeps, compile_speed.py's figures and its model of the compile workers, and
# bench_call_overhead.py with its stand-in driver, end to end.
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from phobos.compiler import CodeOptions

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_rows  # noqa: E402
import compile_speed  # noqa: E402


def test_the_row_sweep_spans_every_width_and_row_count_within_its_memory_budget():
    shapes = bench_rows.sweep()
    assert {n for _, n in shapes} == set(bench_rows.WIDTHS) and min(bench_rows.WIDTHS) == 64
    assert max(bench_rows.WIDTHS) == 262144 and {m for m, _ in shapes} == {1, 16, 256, 4096, 65536}
    assert all(m * n <= bench_rows.MAX_ELEMENTS for m, n in shapes)
    assert (1, 262144) in shapes and (65536, 64) in shapes and (64 * 1024, 4096) in shapes  # the corners
    assert (65536, 262144) not in shapes  # 64 GB


def test_the_compile_workers_are_modelled_longest_job_first():
    assert compile_speed.wall_on(2, [1.0, 3.0, 2.0, 2.0]) == 4.0  # 3 + 1 on one worker, 2 + 2 on the other
    assert compile_speed.wall_on(16, [0.5] * 27) == 1.0
    assert compile_speed.wall_on(1, [0.5, 0.25]) == 0.75


def test_compile_speed_times_every_stage_of_every_configuration():
    summary, rows = compile_speed.measure("add.phobos", "add", {"N": 1 << 20}, CodeOptions(), "sm_90", 1, None)
    assert summary["configurations"] == len(rows) == 3  # BLOCK in [1024, 2048, 4096]
    for row in rows:
        assert row["lines"] > 100 and row["compile_ms"] > 0
        staged = sum(row[f"{stage}_ms"] for stage in compile_speed.STAGES)
        assert 0 < staged <= row["compile_ms"] + 1e-6
    assert summary["compiler_lines_per_s"] > 0 and summary["cpu_s"] > 0
    assert len(summary["jobs_s"]) == 3


def test_the_stand_in_call_overhead_runs_end_to_end(tmp_path):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_call_overhead.py"), "--stand-in", "--calls",
                           "100", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "call_overhead_stand_in.json").read_text())
    with_torch = ["torch tensors (CPU memory)"] if importlib.util.find_spec("torch") else []
    assert [r["arguments"] for r in data["rows"]] == with_torch + ["torch-like tensors", "CuPy-like arrays"]
    for row in data["rows"]:
        # the prepared calls skip the full binding, which costs many times more
        assert 0 < row["call_us"] < row["full_binding_us"] and 0 < row["probing_call_us"] < row["full_binding_us"]


@pytest.mark.parametrize("script", ["bench_rows.py", "bench_cold_start.py", "bench_call_overhead.py",
                                    "compile_speed.py"])
def test_the_benchmarks_say_how_to_run_them(script):
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "usage:" in done.stdout
