# README's quick start on the CPU: sgemm 1000 x 300 x 700 through
# `mod.sgemm(A, B, C, alpha=1.5, beta=0.5)` on numpy arrays, with no GPU, in
# the default mode (mode=None) and in each CPU mode by name.
#
#     python3 benchmarks/bench_quickstart_cpu.py [--repeat N] [--json PATH]
#
# Each run is a fresh process (import, parse, compile where the mode needs
# PTX, run, check against numpy) over a warm disk cache, the way a user reruns
# a script.  The table gives, per mode, the median wall seconds of N runs with
# their spread, and the median CPU seconds (user + system of the process),
# which other work on a shared machine does not inflate; the same rows go to
# JSON.  The target: the default mode within 2 s on a 2-core machine.
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

QUICK_START = """
import sys
import numpy as np
import phobos

mode = None if sys.argv[1] == "default" else sys.argv[1]
mod = phobos.load("examples/sgemm.phobos", mode=mode)
A = np.random.rand(1000, 300).astype(np.float32)
B = np.random.rand(300, 700).astype(np.float32)
C = np.random.rand(1000, 700).astype(np.float32)
expected = 1.5 * A.astype(np.float64) @ B + 0.5 * C
mod.sgemm(A, B, C, alpha=1.5, beta=0.5)
assert np.allclose(C, expected, rtol=1e-4, atol=1e-3), "wrong result"
"""

MODES = ("default", "interpret", "emulate")


def run_once(mode: str, environment: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of the quick start in `mode`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", QUICK_START, mode], cwd=ROOT, env=environment,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"the quick start failed in mode {mode}:\n{done.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Time README's quick start on the CPU, per mode.")
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode (after one warming the cache)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench_results" / "quickstart_cpu.json")
    opts = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="phobos-cache-") as cache:
        environment = {**os.environ, "PHOBOS_CACHE_DIR": cache, "PHOBOS_LOG": "warning",
                       "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        environment.pop("PHOBOS_MODE", None)
        environment.pop("PHOBOS_INTERPRET", None)
        for mode in MODES:
            run_once(mode, environment)  # fills the cache
            runs = [run_once(mode, environment) for _ in range(opts.repeat)]
            walls, cpus = [wall for wall, _ in runs], [cpu for _, cpu in runs]
            rows.append({"mode": mode, "wall_median_s": statistics.median(walls), "wall_min_s": min(walls),
                         "wall_max_s": max(walls), "cpu_median_s": statistics.median(cpus), "runs": runs})
    print(f"{'mode':<10} {'wall s':>7} {'min':>6} {'max':>6} {'cpu s':>6}")
    for r in rows:
        print(f"{r['mode']:<10} {r['wall_median_s']:>7.2f} {r['wall_min_s']:>6.2f} {r['wall_max_s']:>6.2f} "
              f"{r['cpu_median_s']:>6.2f}")
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    opts.json.write_text(json.dumps({
        "date": date.today().isoformat(), "machine": platform.platform(), "cpus": os.cpu_count(),
        "python": platform.python_version(), "load_average": os.getloadavg(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {opts.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
