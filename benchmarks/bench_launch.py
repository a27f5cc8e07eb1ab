"""What a call costs the host, and what the first call costs: Phobos beside Triton, torch and CuPy.

    python benchmarks/bench_launch.py [--calls 5000] [--cold/--no-cold] [--out bench_results]

Microseconds per call: c = a + b on 2^16 fp32 elements (a kernel of about two
microseconds, so the host sets the pace), called back to back `--calls` times
and timed by the wall clock from the first call to the end of the last
kernel, in one run: `add(a, b, c)` (examples/add.phobos) on torch tensors and
on CuPy arrays, a Triton add kernel `add[grid](a, b, c, n, BLOCK=1024)`,
`torch.add(a, b, out=c)` and `cupy.add(a, b, out=c)` (where Triton and CuPy
are installed).  The target is 15 µs at most for Phobos on torch tensors;
torch.add is the floor (about 9 µs on the H200).

The cold first call: in a fresh process with an empty cache, the first call of
examples/sgemm.phobos at 4096^3 on torch tensors (compiling and tuning every
configuration; the target is 5 s), the same with PHOBOS_AUTOTUNE=0 (one
configuration), and Triton's first call of a one-configuration fp32 matmul
(`tl.dot` with input_precision="ieee") in a fresh process with an empty
TRITON_CACHE_DIR; each is timed from the call to the end of its kernel.  Each
runs as a script file of its own (Triton's @jit reads its function's source
file).
Prints tables, writes JSON and a plot.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch

import phobos
from common import plot, save, table

ROOT = Path(__file__).parent.parent
N = 1 << 16


def per_call_us(fn, calls: int) -> float:
    """Wall-clock microseconds per call of `fn()` over `calls` back-to-back calls (after a warm-up)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def triton_add():
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(c_ptr + offsets, tl.load(a_ptr + offsets, mask=mask) + tl.load(b_ptr + offsets, mask=mask),
                 mask=mask)

    return lambda a, b, c: add_kernel[(triton.cdiv(N, 1024),)](a, b, c, N, BLOCK=1024)


def call_rows(calls: int) -> list[dict]:
    add = phobos.load(str(ROOT / "examples" / "add.phobos")).add
    a, b = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    c = torch.empty_like(a)
    add(a, b, c)
    assert torch.equal(c, a + b), "wrong result"
    rows = [{"call": "Phobos add(a, b, c), torch tensors", "us": per_call_us(lambda: add(a, b, c), calls)},
            {"call": "torch.add(a, b, out=c)", "us": per_call_us(lambda: torch.add(a, b, out=c), calls)}]
    tri = triton_add()
    if tri is not None:
        tri(a, b, c)
        assert torch.equal(c, a + b), "wrong Triton result"
        rows.insert(1, {"call": "Triton add[grid](a, b, c, n, BLOCK=1024)", "us": per_call_us(lambda: tri(a, b, c),
                                                                                               calls)})
    try:
        import cupy
    except ImportError:
        return rows
    ca, cb = cupy.asarray(a.cpu().numpy()), cupy.asarray(b.cpu().numpy())
    cc = cupy.empty_like(ca)
    add(ca, cb, cc)
    cupy.cuda.Device().synchronize()
    assert bool((cc == ca + cb).all()), "wrong result on CuPy arrays"

    def cupy_us(fn) -> float:
        for _ in range(10):
            fn()
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        cupy.cuda.Device().synchronize()
        return (time.perf_counter() - start) / calls * 1e6

    rows += [{"call": "Phobos add(a, b, c), CuPy arrays", "us": cupy_us(lambda: add(ca, cb, cc))},
             {"call": "cupy.add(a, b, out=c)", "us": cupy_us(lambda: cupy.add(ca, cb, out=cc))}]
    return rows


PHOBOS_COLD = """
import json, sys, time
start = time.perf_counter()
import torch, phobos
torch.cuda.init()
a, b, c = (torch.randn(4096, 4096, device="cuda") for _ in range(3))
sgemm = phobos.load(sys.argv[1]).sgemm
torch.cuda.synchronize()
ready = time.perf_counter()
sgemm(a, b, c, alpha=1.0, beta=0.0)
torch.cuda.synchronize()
first = time.perf_counter() - ready
ok = bool(torch.allclose(c, a @ b, rtol=1e-3, atol=1e-2))
print(json.dumps({"first_call_s": first, "setup_s": ready - start, "ok": ok, "config": sgemm.config,
                  "configurations": len(sgemm.timings) or 1}))
"""

TRITON_COLD = """
import json, time
start = time.perf_counter()
import torch, triton, triton.language as tl

@triton.jit
def matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y, input_precision="ieee")
    tl.store(c + rm[:, None] * N + rn[None, :], acc)

a, b, c = (torch.randn(4096, 4096, device="cuda") for _ in range(3))
torch.cuda.synchronize()
ready = time.perf_counter()
matmul[(4096 // 64, 4096 // 64)](a, b, c, 4096, 4096, 4096, BM=64, BN=64, BK=32)
torch.cuda.synchronize()
first = time.perf_counter() - ready
ok = bool(torch.allclose(c, a @ b, rtol=1e-3, atol=1e-2))
print(json.dumps({"first_call_s": first, "setup_s": ready - start, "ok": ok, "configurations": 1}))
"""


def fresh_process(script: str, args: list[str], env: dict[str, str]) -> dict:
    """Run `script` as a file in a fresh interpreter (Triton reads its kernels' source from their file, so
    `python -c` will not do); the JSON its last line prints, or the error it ended with."""
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        path = Path(tmp) / "first_call.py"
        path.write_text(textwrap.dedent(script))
        done = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                              env={**os.environ, **env}, cwd=ROOT, timeout=900)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {done.returncode}", "stderr_tail": lines[-20:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def cold_rows() -> list[dict]:
    sgemm = str(ROOT / "examples" / "sgemm.phobos")
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    rows = []
    with tempfile.TemporaryDirectory() as tuned, tempfile.TemporaryDirectory() as untuned, \
            tempfile.TemporaryDirectory() as triton_cache:
        cases = [("Phobos sgemm 4096^3, autotuned", PHOBOS_COLD, [sgemm],
                  {"PHOBOS_CACHE_DIR": tuned, "PYTHONPATH": path}),
                 ("Phobos sgemm 4096^3, PHOBOS_AUTOTUNE=0", PHOBOS_COLD, [sgemm],
                  {"PHOBOS_CACHE_DIR": untuned, "PHOBOS_AUTOTUNE": "0", "PYTHONPATH": path}),
                 ("Triton fp32 matmul 4096^3, one configuration", TRITON_COLD, [],
                  {"TRITON_CACHE_DIR": triton_cache})]
        for label, script, args, env in cases:
            result = fresh_process(script, args, env)
            rows.append({"first call": label, **result})
            print(f"{label}: {result}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--cold", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--out", default="bench_results")
    args = parser.parse_args()
    rows = call_rows(args.calls)
    print(table(rows, [("call", f"call (c = a + b, {N} fp32)", ""), ("us", "µs per call", ".1f")]))
    cold = cold_rows() if args.cold else []
    if cold:
        print(table([{**r, "seconds": r.get("first_call_s", float("nan"))} for r in cold],
                    [("first call", "first call in a fresh process, empty cache", ""), ("seconds", "s", ".2f")]))
    print(f"wrote {save('launch', rows, {'cold_first_calls': cold, 'elements': N}, args.out)}")
    plot("launch", rows, "call", [("us", "µs per call")], "µs per call", args.out)


if __name__ == "__main__":
    main()
