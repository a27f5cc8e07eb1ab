# Times the PTX emulator on Triton's own compiled kernels against Triton's CPU
# interpreter (TRITON_INTERPRET=1): a matrix product (tutorial 03, the kernel of
# benchmarks/triton_matmul.py) and a fused attention forward pass (tutorial
# 06), each compiled by Triton for sm_80 (mma.sync) and sm_90a (wgmma), run
# with all race detectors, with the shared-memory ones only, and with none.
# The cases run in rounds (the interpreter in a child process that waits for
# its turn), so that all see the same load on a shared machine; the best of
# each is kept.
# Triton compiles without a GPU; the interpreter needs a process of its own
# (TRITON_INTERPRET is read when a kernel is decorated).  Every emulated result
# is compared with numpy (and the interpreted one too).  Prints a table and
# writes the figures as JSON; skips with a reason where triton or torch is not
# installed.
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
ATTENTION = dict(Z=1, H=4, N_CTX=512, HEAD_DIM=64, BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3)
ARCHS = {"sm_80": 80, "sm_90a": 90}

if triton is not None:
    from triton_matmul import _matmul  # tutorial 03's kernel, as the GPU benchmarks run it

    matmul_kernel = _matmul.fn  # without the autotuner: the configuration is MATMUL's

    @triton.jit
    def attention_kernel(Q, K, V, Out, sm_scale, stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                         stride_oh, stride_om, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr):
        start_m = tl.program_id(0)
        head = tl.program_id(1)
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + head * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :])
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        qk_scale = sm_scale * 1.44269504
        for start_n in range(0, N_CTX, BLOCK_N):
            k = tl.load(K + head * stride_kh + (start_n + offs_n)[None, :] * stride_kn + offs_d[:, None])
            qk = tl.dot(q, k)
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
            p = tl.math.exp2(qk)
            l_ij = tl.sum(p, 1)
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + l_ij
            acc = acc * alpha[:, None]
            v = tl.load(V + head * stride_vh + (start_n + offs_n)[:, None] * stride_vn + offs_d[None, :])
            acc = tl.dot(p.to(tl.float16), v, acc)
            m_i = m_ij
        acc = acc / l_i[:, None]
        tl.store(Out + head * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], acc.to(tl.float16))


def _inputs(name: str):
    """The kernel's numpy inputs (fixed seed), the output array and the numpy reference."""
    rng = np.random.default_rng(0)
    if name == "matmul":
        c = MATMUL
        a = rng.standard_normal((c["M"], c["K"])).astype(np.float16)
        b = rng.standard_normal((c["K"], c["N"])).astype(np.float16)
        out = np.zeros((c["M"], c["N"]), np.float16)
        return [a, b, out], out, a.astype(np.float32) @ b.astype(np.float32)
    c = ATTENTION
    shape = (c["Z"] * c["H"], c["N_CTX"], c["HEAD_DIM"])
    q, k, v = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))
    out = np.zeros(shape, np.float16)
    s = q.astype(np.float32) @ k.astype(np.float32).transpose(0, 2, 1) * 0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    return [q, k, v, out], out, (p / p.sum(-1, keepdims=True)) @ v.astype(np.float32)


def _launch_plan(name: str):
    """(kernel, signature, constexprs, num_warps, num_stages, grid, arguments after the arrays)."""
    if name == "matmul":
        c = MATMUL
        sig = {n: "*fp16" for n in ("a_ptr", "b_ptr", "c_ptr")} | {n: "i32" for n in (
            "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn")}
        consts = {k: c[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")}
        grid = (-(-c["M"] // c["BLOCK_M"]) * -(-c["N"] // c["BLOCK_N"]), 1, 1)
        scalars = [c["M"], c["N"], c["K"], c["K"], 1, c["N"], 1, c["N"], 1]
        return matmul_kernel, sig, consts, c["num_warps"], c["num_stages"], grid, scalars
    c = ATTENTION
    sig = {n: "*fp16" for n in ("Q", "K", "V", "Out")} | {"sm_scale": "fp32"} | {n: "i32" for n in (
        "stride_qh", "stride_qm", "stride_kh", "stride_kn", "stride_vh", "stride_vn", "stride_oh", "stride_om",
        "N_CTX")}
    consts = {k: c[k] for k in ("HEAD_DIM", "BLOCK_M", "BLOCK_N")}
    grid = (c["N_CTX"] // c["BLOCK_M"], c["Z"] * c["H"], 1)
    hstride = c["N_CTX"] * c["HEAD_DIM"]
    scalars = [0.5] + [hstride, c["HEAD_DIM"]] * 4 + [c["N_CTX"]]
    return attention_kernel, sig, consts, c["num_warps"], c["num_stages"], grid, scalars


def _specialize(kernel, sig: dict, consts: dict, scalars: list):
    """What Triton's launcher specialises on, as it would for these arguments: pointers 16-byte aligned
    (the emulator's allocations are), integers divisible by 16 marked so, integers equal to 1 made
    constants (and left out of the launch's arguments, as `kept` leaves them).  Without it Triton
    assumes nothing and loads element by element."""
    sig, consts, attrs, kept = dict(sig), dict(consts), {}, []
    values = dict(zip([n for n in sig if not sig[n].startswith("*")], scalars))
    for name, kind in list(sig.items()):
        position = (kernel.arg_names.index(name),)
        value = values.get(name)
        if kind.startswith("*") or (kind == "i32" and value % 16 == 0):
            attrs[position] = [["tt.divisibility", 16]]
        elif kind == "i32" and value == 1:
            sig[name], consts[name] = "constexpr", 1
            continue
        if name in values:
            kept.append(value)
    for const in consts:
        sig[const] = "constexpr"
    return sig, consts, attrs, kept


def compile_ptx(kernel, sig: dict, consts: dict, scalars: list, arch: str, num_warps: int, num_stages: int):
    """Triton's PTX for `kernel` (a @triton.jit function) with the given signature (parameter ->
    Triton type, pointers first), constexprs and scalar arguments, specialised as the launcher would
    (_specialize), on `arch` ("sm_80" or "sm_90a"): (ptx, kernel name, dynamic shared memory bytes,
    the scalar arguments the kernel still takes)."""
    sig, consts, attrs, kept = _specialize(kernel, sig, consts, scalars)
    src = triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs)
    compiled = triton.compile(src, target=triton.backends.compiler.GPUTarget("cuda", ARCHS[arch], 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    return compiled.asm["ptx"], compiled.metadata.name, compiled.metadata.shared, kept


def compile_kernel(name: str, arch: str):
    """Triton's PTX for the benchmark kernel `name` on `arch`, and how to launch it."""
    kernel, sig, consts, warps, stages, grid, scalars = _launch_plan(name)
    ptx, kname, shared, kept = compile_ptx(kernel, sig, consts, scalars, arch, warps, stages)
    return ptx, kname, shared, warps * 32, grid, kept


#: The emulator's modes: race detectors on (all of them), only the shared-memory ones (the global
#: detector is off for launches above memory.GLOBAL_RACE_LIMIT: the limit is set to 0), none.
MODES = {"races": None, "shared races": 0, "no races": None}


def run_emulated(name: str, arch: str, mode: str):
    """(wall, CPU) seconds of one launch in the emulator (the module decoded before timing), its
    steps and the result's largest error."""
    from phobos.run.emulator import load_module, machine
    ptx, kname, shared, threads, grid, scalars = compile_kernel(name, arch)
    module = load_module(ptx, f"{name}_{arch}.ptx")
    arrays, out, reference = _inputs(name)
    args = arrays + scalars + [None, None]  # Triton's two trailing scratch pointers
    limit = machine.GLOBAL_RACE_LIMIT
    machine.GLOBAL_RACE_LIMIT = limit if MODES[mode] is None else MODES[mode]
    try:
        start, cpu = time.perf_counter(), time.process_time()
        stats = module.launch(kname, grid, threads, args, shared, check_races=mode != "no races")
        elapsed = (time.perf_counter() - start, time.process_time() - cpu)
    finally:
        machine.GLOBAL_RACE_LIMIT = limit
    return elapsed, stats.steps, float(np.abs(out.astype(np.float32) - reference).max())


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
    kernel, sig, consts, warps, _, grid, scalars = _launch_plan(name)
    arrays, out, reference = _inputs(name)
    tensors = [torch.from_numpy(a) for a in arrays]
    start, cpu = time.perf_counter(), time.process_time()
    kernel[grid](*tensors, *scalars, **consts, num_warps=warps)
    elapsed = (time.perf_counter() - start, time.process_time() - cpu)
    return elapsed, float(np.abs(tensors[-1].numpy().astype(np.float32) - reference).max())


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
    interpreter = None if options.no_interpret else Interpreter()
    best: dict[tuple, float] = {}
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
                        seconds, steps, error = run_emulated(name, arch, mode)
                        best[name, arch, mode] = _best(best.get((name, arch, mode)), seconds)
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
                         "emulator_shared_races_only_s": best[name, arch, "shared races"][0],
                         "emulator_no_race_checks_s": best[name, arch, "no races"][0],
                         "triton_interpret_s": interp[0],
                         "emulator_cpu_s": best[name, arch, "races"][1], "triton_interpret_cpu_s": interp[1],
                         "max_error": error, "interpret_max_error": facts.get((name, "interpret"))})
    header = (f"{'kernel':<10} {'arch':<7} {'steps':>6} {'emulator s':>11} {'shared only':>12} "
              f"{'no races s':>11} {'INTERPRET s':>12} {'CPU s':>6} {'INTERPRET CPU s':>16} {'max error':>10}")
    print(header)
    print("-" * len(header))
    for r in rows:
        interp = "-" if r["triton_interpret_s"] is None else f"{r['triton_interpret_s']:.3f}"
        interp_cpu = "-" if r["triton_interpret_cpu_s"] is None else f"{r['triton_interpret_cpu_s']:.3f}"
        print(f"{r['kernel']:<10} {r['arch']:<7} {r['steps']:>6} {r['emulator_s']:>11.3f} "
              f"{r['emulator_shared_races_only_s']:>12.3f} {r['emulator_no_race_checks_s']:>11.3f} "
              f"{interp:>12} {r['emulator_cpu_s']:>6.3f} {interp_cpu:>16} {r['max_error']:>10.2g}")
    print("(seconds: wall clock, best of the rounds; CPU: the processes' CPU time with races checked, all threads)")
    options.json.parent.mkdir(parents=True, exist_ok=True)
    options.json.write_text(json.dumps({
        "machine": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "numpy": np.__version__, "triton": triton.__version__, "matmul": MATMUL, "attention": ATTENTION,
        "results": rows}, indent=2) + "\n")
    print(f"\nwrote {options.json}")


if __name__ == "__main__":
    main()
