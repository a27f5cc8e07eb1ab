# Times the PTX emulator on Triton's own compiled kernels against Triton's CPU
# interpreter (TRITON_INTERPRET=1): a matrix product (tutorial 03, the kernel of
# benchmarks/triton_matmul.py) and a fused attention forward pass (tutorial
# 06, the kernel of tests/triton_corpus), each compiled by Triton for sm_80
# (mma.sync) and sm_90a (wgmma) and run through phobos.triton, with all race
# detectors (in the worker processes the emulator chooses - one per core - and
# in one process), with the shared-memory ones only, and with none; the CPU
# time counts the worker processes'.  The cases run
# in rounds (the interpreter in a child process, which TRITON_INTERPRET needs
# as it is read when a kernel is decorated, waits for its turn), so that all
# see the same load on a shared machine; the best of each is kept.  Triton
# compiles without a GPU.  Every result is compared with numpy.  Prints a
# table (wall and CPU seconds) and writes the figures as JSON; skips with a
# reason where triton or torch is not installed.
#
#     python benchmarks/bench_emulator_triton.py [--repeat N] [--json PATH] [--only NAME]
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

try:
    import torch
    import triton
    import triton.language as tl
except ImportError as missing:  # pragma: no cover - depends on the machine
    triton = None
    MISSING = f"needs triton and torch ({missing})"
else:
    MISSING = ""

MATMUL = dict(M=256, N=256, K=256, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=3)
ATTENTION = dict(Z=1, H=4, N_CTX=512, HEAD_DIM=64, sm_scale=0.5, BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3)
ARCHS = ("sm_80", "sm_90a")

if triton is not None:
    from tests.triton_corpus.tutorials import _attn_fwd as attention_kernel  # tutorial 06's, as the corpus has it
    from triton_matmul import _matmul  # tutorial 03's kernel, as the GPU benchmarks run it

    matmul_kernel = _matmul.fn  # without the autotuner: the configuration is MATMUL's


def _case(name: str):
    """(kernel, grid, arguments - numpy arrays for pointers, fixed seed -, constexprs and options by
    keyword, the output array, its numpy reference: _reference's)."""
    rng = np.random.default_rng(0)
    if name == "matmul":
        c = MATMUL
        a = rng.standard_normal((c["M"], c["K"])).astype(np.float16)
        b = rng.standard_normal((c["K"], c["N"])).astype(np.float16)
        out = np.zeros((c["M"], c["N"]), np.float16)
        grid = (-(-c["M"] // c["BLOCK_M"]) * -(-c["N"] // c["BLOCK_N"]),)
        arguments = [a, b, out, c["M"], c["N"], c["K"], c["K"], 1, c["N"], 1, c["N"], 1]
        keywords = {k: c[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")}
        return matmul_kernel, grid, arguments, keywords, out, _reference(name, a, b)
    c = ATTENTION
    shape = (c["Z"], c["H"], c["N_CTX"], c["HEAD_DIM"])
    q, k, v = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))
    out = np.zeros(shape, np.float16)
    log_sums = np.zeros((c["Z"] * c["H"], c["N_CTX"]), np.float32)
    grid = (c["N_CTX"] // c["BLOCK_M"], c["Z"] * c["H"])
    strides = [s // 2 for s in q.strides]
    arguments = [q, k, v, c["sm_scale"], log_sums, out, *strides * 4, c["Z"], c["H"]]
    keywords = {k: c[k] for k in ("N_CTX", "HEAD_DIM", "BLOCK_M", "BLOCK_N", "num_warps", "num_stages")}
    reference = _reference(name, q, k, v)
    return attention_kernel, grid, arguments, {**keywords, "STAGE": 1}, out, reference  # STAGE 1: not causal


_REFERENCES: dict[str, np.ndarray] = {}


def _reference(name: str, *inputs: np.ndarray) -> np.ndarray:
    """The float64 result of case `name` from its inputs, computed once per process with einsum's own
    loops rather than BLAS, whose threads spin on the other core for a while after each product (which
    the emulator's worker process would run on)."""
    if name not in _REFERENCES:
        x = [t.astype(np.float64) for t in inputs]
        if name == "matmul":
            _REFERENCES[name] = np.einsum("ik,kj->ij", *x)
        else:
            q, k, v = x
            scores = np.einsum("zhid,zhjd->zhij", q, k) * ATTENTION["sm_scale"]
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            _REFERENCES[name] = np.einsum("zhij,zhjd->zhid", weights / weights.sum(-1, keepdims=True), v)
    return _REFERENCES[name]


#: The emulator's modes: (the global race limit, the worker processes): race detectors on (all of them),
#: in worker processes as the emulator chooses and in one process, only the shared-memory ones (the
#: global detector is off for launches above memory.GLOBAL_RACE_LIMIT: the limit is set to 0), none.
#: (Only launches with the global detector on run in worker processes: docs/emulator.md.)
MODES = {"races": (None, None), "races, one process": (None, 1), "shared races": (0, None),
         "no races": (None, None)}


def run_emulated(name: str, arch: str, mode: str):
    """(wall, CPU) seconds of one launch in the emulator through phobos.triton (compiled before, as
    Triton's cache would have it; the CPU time of its worker processes too), its steps, the result's
    largest error and the processes that ran it."""
    import phobos.triton
    from phobos.run.emulator import machine
    kernel, grid, arguments, keywords, out, reference = _case(name)
    global_limit, workers = MODES[mode]
    emulated = phobos.triton.emulate(kernel, arch=arch, check_races=mode != "no races", workers=workers)
    emulated.compile(*arguments, **keywords)
    limit = machine.GLOBAL_RACE_LIMIT
    machine.GLOBAL_RACE_LIMIT = limit if global_limit is None else global_limit
    try:
        start, cpu = time.perf_counter(), time.process_time()
        launch = emulated[grid](*arguments, **keywords)
        elapsed = (time.perf_counter() - start, time.process_time() - cpu + launch.stats.worker_cpu_seconds)
    finally:
        machine.GLOBAL_RACE_LIMIT = limit
    return elapsed, launch.stats.steps, float(np.abs(out.astype(np.float32) - reference).max()), launch.stats.workers


def _interpreter_numpy2_index() -> None:
    """Triton 3.6's interpreter holds scalars as one-element arrays and takes `int()` of them as a loop
    bound, which NumPy 2.4 refuses ('only 0-dimensional arrays can be converted'); index through the
    element instead (the patch sits on top of the interpreter's own, which restores both in order)."""
    from triton.runtime import interpreter
    patch = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    interpreter._patch_lang_tensor = patched


def run_interpreted(name: str) -> tuple[tuple[float, float], float]:
    """(wall, CPU) seconds of one run of the kernel under TRITON_INTERPRET=1 in this (child) process
    (the CPU time of all its threads), and the result's largest error."""
    kernel, grid, arguments, keywords, out, reference = _case(name)
    arguments = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in arguments]
    start, cpu = time.perf_counter(), time.process_time()
    kernel[grid](*arguments, **keywords)
    elapsed = (time.perf_counter() - start, time.process_time() - cpu)
    return elapsed, float(np.abs(out.astype(np.float32) - reference).max())  # (the tensors share out's memory)


class Interpreter:
    """A child process with TRITON_INTERPRET=1 (read when a kernel is decorated) that runs a kernel
    whenever asked, so that its runs alternate with the emulator's and both see the same machine load."""

    def __init__(self):
        env = dict(os.environ, TRITON_INTERPRET="1")
        self.child = subprocess.Popen([sys.executable, __file__, "--interpreter-child"], env=env, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def run(self, name: str) -> tuple[tuple[float, float], float]:
        self.child.stdin.write(name + "\n")
        self.child.stdin.flush()
        line = self.child.stdout.readline()
        if not line:
            raise RuntimeError(f"the TRITON_INTERPRET process ended running {name}")
        (wall, cpu), error = json.loads(line)
        return (wall, cpu), error

    def close(self) -> None:
        self.child.stdin.close()
        self.child.wait()


def interpreter_child() -> None:
    """The child's loop: a kernel name per line in, ((wall, CPU) seconds, error) as a JSON line out."""
    _interpreter_numpy2_index()
    for line in sys.stdin:
        print(json.dumps(run_interpreted(line.strip())), flush=True)


def _best(so_far, seconds) -> tuple[float, float]:
    """The lower of two (wall, CPU) timings, each part on its own, rounded to milliseconds."""
    both = seconds if so_far is None else tuple(min(a, b) for a, b in zip(so_far, seconds))
    return tuple(round(x, 3) for x in both)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of runs (the best of each case is kept)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench_results" / "emulator_triton.json")
    parser.add_argument("--only", choices=["matmul", "attention"], help="one kernel only")
    parser.add_argument("--arch", choices=list(ARCHS), help="one architecture only")
    parser.add_argument("--no-interpret", action="store_true", help="skip the TRITON_INTERPRET timings")
    parser.add_argument("--interpreter-child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if MISSING:
        print(f"skipped: {MISSING}")
        return
    if options.interpreter_child:
        interpreter_child()
        return
    names = [options.only] if options.only else ["matmul", "attention"]
    archs = [options.arch] if options.arch else list(ARCHS)
    load_before = os.getloadavg()  # (what else the machine ran: the figures are comparable on an idle one)
    interpreter = None if options.no_interpret else Interpreter()
    best: dict[tuple, float] = {}
    workers_used: dict[tuple, int] = {}
    facts: dict[tuple, tuple] = {}
    try:
        for _ in range(options.repeat):  # rounds: every case once, so that all see the same load
            for name in names:
                if interpreter is not None:
                    seconds, error = interpreter.run(name)
                    best[name, "interpret"] = _best(best.get((name, "interpret")), seconds)
                    facts[name, "interpret"] = error
                for arch in archs:
                    for mode in MODES:
                        seconds, steps, error, workers = run_emulated(name, arch, mode)
                        best[name, arch, mode] = _best(best.get((name, arch, mode)), seconds)
                        if mode == "races":
                            workers_used[name, arch] = workers
                        if mode == "races, one process":  # (the steps of one process's batches)
                            facts[name, arch] = (steps, error)
    finally:
        if interpreter is not None:
            interpreter.close()
    rows = []
    for name in names:
        for arch in archs:
            steps, error = facts[name, arch]
            interp = best.get((name, "interpret"), (None, None))
            rows.append({"kernel": name, "arch": arch, "steps": steps,
                         "emulator_s": best[name, arch, "races"][0],
                         "emulator_one_process_s": best[name, arch, "races, one process"][0],
                         "emulator_workers": workers_used[name, arch],
                         "emulator_shared_races_only_s": best[name, arch, "shared races"][0],
                         "emulator_no_race_checks_s": best[name, arch, "no races"][0],
                         "triton_interpret_s": interp[0],
                         "emulator_cpu_s": best[name, arch, "races"][1],
                         "emulator_one_process_cpu_s": best[name, arch, "races, one process"][1],
                         "triton_interpret_cpu_s": interp[1],
                         "max_error": error, "interpret_max_error": facts.get((name, "interpret"))})
    header = (f"{'kernel':<10} {'arch':<7} {'steps':>6} {'emulator s':>11} {'(CPU s)':>8} {'workers':>7} "
              f"{'one process':>12} {'shared only':>12} {'no races s':>11} {'INTERPRET s':>12} "
              f"{'(CPU s)':>8} {'max error':>10}")
    print(header)
    print("-" * len(header))
    for r in rows:
        interp = "-" if r["triton_interpret_s"] is None else f"{r['triton_interpret_s']:.3f}"
        interp_cpu = "-" if r["triton_interpret_cpu_s"] is None else f"{r['triton_interpret_cpu_s']:.3f}"
        print(f"{r['kernel']:<10} {r['arch']:<7} {r['steps']:>6} {r['emulator_s']:>11.3f} {r['emulator_cpu_s']:>8.3f} "
              f"{r['emulator_workers']:>7} {r['emulator_one_process_s']:>12.3f} "
              f"{r['emulator_shared_races_only_s']:>12.3f} {r['emulator_no_race_checks_s']:>11.3f} "
              f"{interp:>12} {interp_cpu:>8} {r['max_error']:>10.2g}")
    print("(seconds: wall clock, best of the rounds; CPU: the CPU time of all processes and threads; emulator: all "
          "race detectors, in the worker processes the emulator chose, and in one process)")
    print(f"(load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after)")
    options.json.parent.mkdir(parents=True, exist_ok=True)
    options.json.write_text(json.dumps({
        "machine": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "numpy": np.__version__, "triton": triton.__version__,
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "matmul": MATMUL, "attention": ATTENTION,
        "results": rows}, indent=2) + "\n")
    print(f"\nwrote {options.json}")


if __name__ == "__main__":
    main()
