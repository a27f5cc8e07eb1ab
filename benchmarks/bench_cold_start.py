"""The first call of a tuned kernel: in a fresh process with an empty cache, and in a second process.

    python benchmarks/bench_cold_start.py [--out bench_results] [--trace]

Each case runs as a script file of its own in a fresh interpreter (Triton's
@jit reads its function's source file), on torch tensors at 4096^3, timed from
the call to the end of its kernel (loading the module and making the tensors
come before, and are reported apart):

- sgemm (examples/sgemm.phobos) and gemm_bf16 (examples/gemm_bf16.phobos),
  each first with an empty PHOBOS_CACHE_DIR - compiling, assembling and
  timing every configuration that serves the sizes; the target is 2 s - then
  in a second process on the cache the first one filled (the choice, the
  compiled kernel and the cubin read from disk; the target is 50 ms); the
  module is loaded first, as a script loads its kernels at the top, then the
  tensors are made (so the compile workers, which loading starts, are up by
  the call);
- each first call with an empty cache again, the module loaded just before
  the call (the workers start up during the call);
- the same first call with PHOBOS_AUTOTUNE=0 (one configuration compiled);
- Triton's first call of a one-configuration fp32 matmul (`tl.dot` with
  input_precision="ieee") and of a bf16 one, each with an empty
  TRITON_CACHE_DIR.

Before the runs, Phobos's sources are compiled to bytecode (`python -m
compileall`), as installing a package does: a fresh checkout would otherwise
have every compile worker of the first run compile them to bytecode at once,
a cost no installed copy has.  Each Phobos run records the tuner's timing of
every configuration ("timings": milliseconds, or why it was skipped).

Every result is checked against torch.  Prints a table, writes
<out>/cold_start.json and a plot.  With --stand-in (on the CPU): the four
Phobos runs with a stand-in GPU - the compiler, ptxas, the compile workers
and the disk cache do what they do on the GPU, every configuration times at
1 ms and nothing is launched - so the seconds are this machine's compiling
(on its cores) and the Python of the warm second call; writes
<out>/cold_start_stand_in.json.  With --trace the Phobos runs log at
PHOBOS_LOG=debug, and each prints when every configuration was timed (or
skipped), in ms from the call, and then the 15 functions the call's thread
spent most time in (cProfile): where the first call's seconds go.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from common import cpu_name, plot, save, table

ROOT = Path(__file__).parent.parent

PHOBOS_FIRST_CALL = """
import cProfile, json, logging, os, pstats, sys, time
from pathlib import Path
start = time.perf_counter()
trace, called = [], [0.0]


class Trace(logging.Handler):  # with --trace (PHOBOS_LOG=debug): phobos's log lines, in ms from the call
    def emit(self, record):
        trace.append(f"{1e3 * (record.created - called[0]):8.0f} ms  {record.getMessage()}")


if os.environ.get("PHOBOS_LOG") == "debug":
    logging.getLogger().addHandler(Trace())
import torch, phobos
path, name, dtype, order = sys.argv[1], sys.argv[2], getattr(torch, sys.argv[3]), sys.argv[4]


def load():  # the kernel, and the seconds loading it took
    loaded = time.perf_counter()
    return getattr(phobos.load(path), name), time.perf_counter() - loaded


if order == "load first":  # as a script loads its kernels at the top, then makes its tensors
    fn, load_s = load()
torch.cuda.init()
a, b = (torch.randn(4096, 4096, device="cuda").to(dtype) for _ in range(2))
c = torch.zeros(4096, 4096, device="cuda", dtype=dtype)
if order == "load last":  # the module loaded just before the call
    fn, load_s = load()
torch.cuda.synchronize()
traced = bool(trace) or os.environ.get("PHOBOS_LOG") == "debug"
profile = cProfile.Profile() if traced else None  # with --trace: the call's functions, this thread's
ready, called[0] = time.perf_counter(), time.time()
if profile: profile.enable()
fn(a, b, c, alpha=1.0, beta=0.0) if name == "sgemm" else fn(a, b, c)
torch.cuda.synchronize()
first = time.perf_counter() - ready
if profile:
    profile.disable()
    stats = pstats.Stats(profile).stats  # (file, line, function) -> (calls, calls, own s, cumulative s, callers)
    top = sorted(stats.items(), key=lambda item: -item[1][2])[:15]
    trace += [f"{1e3 * own:8.1f} ms own {1e3 * cumulative:8.1f} ms with callees  {calls:6d} x "
              f"{Path(file).name}:{line} {function}" for (file, line, function), (calls, _, own, cumulative, _) in top]
want = (a.float() @ b.float()).to(dtype)
ok = bool(torch.allclose(c.float(), want.float(), rtol=1e-2, atol=1e-1))
print(json.dumps({"first_call_s": first, "load_s": load_s, "setup_s": ready - start - load_s, "ok": ok,
                  "config": fn.config, "configurations": len(fn.timings) or 1, "timings": fn.timings,
                  **({"trace": trace} if trace else {})}))
"""

STAND_IN_FIRST_CALL = """
import json, os, sys, time
start = time.perf_counter()
import torch  # a caller's process has it: its import is not the call's
import phobos
from phobos.run.runtime import DeviceProperties


class StandInGpu:
    # The GPU backend's interface with no GPU behind it: the compiler, ptxas, the workers and the cache run as
    # on the GPU; every configuration times at 1 ms and launches do nothing.
    name, compiles, host_only, tunes, maps_host_arrays = "stand-in", True, False, True, False

    def arch(self, index=0):
        return "sm_90a"

    def device(self, index=0):
        return DeviceProperties("H100 (stand-in)", (9, 0), 227 * 1024, 65536, 1024, 132)

    def locate(self, address):
        return 0

    def run(self, launch):
        pass

    def time(self, launch, warmup, repeat):
        return 1.0

    def device_copy(self, tensor):
        return None

    def free(self, copy):
        pass


class DeviceTensor:
    # A 4096 x 4096 CUDA tensor as torch shows it (the attributes the binding reads).
    is_cuda, device = True, "cuda:0"

    def __init__(self, index, dtype):
        self.pointer, self.dtype, self.shape = 0x7F00_0000_0000 + index * (1 << 27), f"torch.{dtype}", (4096, 4096)

    def data_ptr(self):
        return self.pointer

    def get_device(self):
        return 0

    def is_contiguous(self):
        return True


DeviceTensor.__module__ = "torch"
path, name, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
a, b, c = (DeviceTensor(index, dtype) for index in range(3))
imported = time.perf_counter()
fn = getattr(phobos.load(path, mode=StandInGpu()), name)
ready = time.perf_counter()
fn(a, b, c, alpha=1.0, beta=0.0) if name == "sgemm" else fn(a, b, c)
first = time.perf_counter() - ready
print(json.dumps({"first_call_s": first, "load_s": ready - imported, "setup_s": imported - start, "ok": True,
                  "config": fn.config, "configurations": len(fn.timings) or 1}))
"""

TRITON_FIRST_CALL = """
import json, sys, time
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
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty))

dtype = getattr(torch, sys.argv[1])
a, b = (torch.randn(4096, 4096, device="cuda").to(dtype) for _ in range(2))
c = torch.empty(4096, 4096, device="cuda", dtype=dtype)
torch.cuda.synchronize()
ready = time.perf_counter()
matmul[(4096 // 64, 4096 // 64)](a, b, c, 4096, 4096, 4096, BM=64, BN=64, BK=32)
torch.cuda.synchronize()
first = time.perf_counter() - ready
ok = bool(torch.allclose(c.float(), (a.float() @ b.float()), rtol=1e-2, atol=1e-1))
print(json.dumps({"first_call_s": first, "setup_s": ready - start, "ok": ok, "configurations": 1}))
"""


def fresh_process(script: str, args: list[str], env: dict[str, str]) -> dict:
    """Run `script` as a file in a fresh interpreter; the JSON its last line prints, or the error it ended with."""
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        path = Path(tmp) / "first_call.py"
        path.write_text(textwrap.dedent(script))
        done = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                              env={**os.environ, **env}, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {done.returncode}", "stderr_tail": lines[-20:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def cases(stand_in: bool = False) -> list[tuple[str, str, list[str], dict, str | None]]:
    """(label, script, arguments, environment, cache) per run, in order; runs that share a cache name share a
    cache directory, the later ones finding what the earlier ones left.  `stand_in`: the Phobos runs on the CPU
    with a stand-in GPU (STAND_IN_FIRST_CALL), and no Triton."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    sgemm = [str(ROOT / "examples" / "sgemm.phobos"), "sgemm", "float32"]
    gemm = [str(ROOT / "examples" / "gemm_bf16.phobos"), "gemm_bf16", "bfloat16"]
    if stand_in:
        return [(f"Phobos {label} (stand-in GPU), {state}", STAND_IN_FIRST_CALL, arguments, {"PYTHONPATH": path},
                 cache) for label, arguments, cache in (("sgemm 4096^3", sgemm, "sgemm"),
                                                         ("gemm_bf16 4096^3", gemm, "gemm"))
                for state in ("empty cache", "second process")]
    first, last = "load first", "load last"
    return [("Phobos sgemm 4096^3, empty cache", PHOBOS_FIRST_CALL, [*sgemm, first], {"PYTHONPATH": path}, "sgemm"),
            ("Phobos sgemm 4096^3, second process", PHOBOS_FIRST_CALL, [*sgemm, first], {"PYTHONPATH": path},
             "sgemm"),
            ("Phobos gemm_bf16 4096^3, empty cache", PHOBOS_FIRST_CALL, [*gemm, first], {"PYTHONPATH": path}, "gemm"),
            ("Phobos gemm_bf16 4096^3, second process", PHOBOS_FIRST_CALL, [*gemm, first], {"PYTHONPATH": path},
             "gemm"),
            ("Phobos sgemm 4096^3, loaded just before the call, empty cache", PHOBOS_FIRST_CALL, [*sgemm, last],
             {"PYTHONPATH": path}, "sgemm-late"),
            ("Phobos gemm_bf16 4096^3, loaded just before the call, empty cache", PHOBOS_FIRST_CALL, [*gemm, last],
             {"PYTHONPATH": path}, "gemm-late"),
            ("Phobos sgemm 4096^3, PHOBOS_AUTOTUNE=0, empty cache", PHOBOS_FIRST_CALL, [*sgemm, first],
             {"PYTHONPATH": path, "PHOBOS_AUTOTUNE": "0"}, "untuned"),
            ("Triton fp32 matmul 4096^3, one configuration, empty cache", TRITON_FIRST_CALL, ["float32"], {}, None),
            ("Triton bf16 matmul 4096^3, one configuration, empty cache", TRITON_FIRST_CALL, ["bfloat16"], {},
             None)]


TARGETS = {"empty cache": 2.0, "second process": 0.05}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--trace", action="store_true",
                        help="PHOBOS_LOG=debug in the Phobos runs: print when each configuration was timed, in ms "
                             "from the call (also under 'trace' in the JSON); the tracing costs a little time")
    parser.add_argument("--stand-in", action="store_true",
                        help="on the CPU: the Phobos runs with a stand-in GPU (compiling, ptxas, the workers and the "
                             "cache as on the GPU; nothing timed or launched), no Triton; writes cold_start_stand_in")
    args = parser.parse_args()
    rows = []
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "phobos")], check=True)
    with tempfile.TemporaryDirectory(prefix="bench-cold-cache-") as caches:
        for label, script, arguments, env, cache in cases(args.stand_in):
            place = Path(caches) / (cache or f"triton-{len(rows)}")
            variable = "PHOBOS_CACHE_DIR" if cache else "TRITON_CACHE_DIR"
            traced = {"PHOBOS_LOG": "debug"} if args.trace and cache else {}
            result = fresh_process(script, arguments, {**env, **traced, variable: str(place)})
            target = next((t for words, t in TARGETS.items() if label.startswith("Phobos") and label.endswith(words)
                           and "AUTOTUNE" not in label), None)
            rows.append({"first call": label, "target_s": target, **result})
            print(f"{label}: {({k: v for k, v in result.items() if k not in ('trace', 'timings')})}", flush=True)
            print("".join(f"    {line}\n" for line in result.get("trace", [])), end="", flush=True)
    for r in rows:
        r.setdefault("configurations", "")
        r["seconds"] = r.get("first_call_s", float("nan"))
        r["meets"] = "" if r["target_s"] is None else ("yes" if r["seconds"] <= r["target_s"] else "NO")
        r["target"] = "" if r["target_s"] is None else f"<= {r['target_s']:g} s"
    print(table(rows, [("first call", "first call (fresh process)", ""), ("seconds", "s", ".3f"),
                       ("target", "target", ""), ("meets", "met", ""),
                       ("configurations", "configurations", "")]))
    name = "cold_start_stand_in" if args.stand_in else "cold_start"
    device = cpu_name() if args.stand_in else None
    print(f"wrote {save(name, rows, {'stand_in': args.stand_in}, args.out, device)}")
    plot(name, [r for r in rows if "first_call_s" in r], "first call", [("seconds", "s")],
         "seconds to the end of the first call", args.out, device)


if __name__ == "__main__":
    main()
