"""What the documented call costs the host: Phobos beside torch, Triton and CuPy, and in a CUDA graph.

    python benchmarks/bench_call_overhead.py [--calls 5000] [--out bench_results]        (on a GPU)
    python benchmarks/bench_call_overhead.py --stand-in [--calls 20000]                  (on the CPU)

On a GPU (torch with CUDA): microseconds per call of c = a + b on 2^16 fp32
elements (a kernel of about two microseconds, so the host sets the pace),
called back to back `--calls` times and timed by the wall clock from the first
call to the end of the last kernel, in one run, the rows interleaved over
three rounds and the best kept: `add(a, b, c)` (examples/add.phobos) on torch
tensors, `torch.add(a, b, out=c)`, a Triton add `add[grid](a, b, c, n,
BLOCK=1024)` and, where CuPy is installed, `add` on CuPy arrays and
`cupy.add`.  The target: Phobos at most torch.add's cost.  Then the parts of
Phobos's call on the same tensors: the prepared launch alone (packing the
stream and the parameters, cuLaunchKernelEx: QueuedKernel), and the checks of
the arguments before it (the whole call less that).  Then CUDA graphs: 100
calls captured by `torch.cuda.graph` and replayed, for Phobos and for
torch.add (µs per kernel in the replay), checked against torch after the
inputs change.

With --stand-in (or without a GPU): the host cost of the call, piece by piece,
with the driver replaced by a C function that does nothing (built here with
the C compiler; a Python one where there is none) but takes
cuLaunchKernelEx's four arguments through ctypes as libcuda's does; the
tensors are stand-ins with torch's attribute names (`data_ptr`, `get_device`,
`dtype`, `shape`, `is_contiguous`) and CuPy's `__cuda_array_interface__`.  The
whole call (the direct call of the most recent signature), the probing path
any other prepared signature takes (probe, key lookup, FastCall), the probe
alone, and the full binding, which both skip.

Prints a table, writes <out>/call_overhead.json and a plot.
"""
from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import tempfile
import time
import timeit
import types
from pathlib import Path

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))

import phobos  # noqa: E402
from common import cpu_name, plot, save, table  # noqa: E402
from phobos.launch import binding, fastpath  # noqa: E402
from phobos.run import backends, cuda, runtime  # noqa: E402

N = 1 << 16
GRAPH_CALLS = 100


# ---------------------------------------------------------------------------
# On the GPU


def per_call_us(fn, calls: int, synchronize) -> float:
    """Wall-clock microseconds per call of `fn()` over `calls` back-to-back calls, to the end of the last kernel."""
    for _ in range(10):
        fn()
    synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize()
    return (time.perf_counter() - start) / calls * 1e6


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


def call_rows(torch, add, calls: int) -> list[dict]:
    a, b = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    c = torch.empty_like(a)
    add(a, b, c)
    assert torch.equal(c, a + b), "wrong result"
    sync = torch.cuda.synchronize
    cases = {"Phobos add(a, b, c), torch tensors": (lambda: add(a, b, c), sync),
             "torch.add(a, b, out=c)": (lambda: torch.add(a, b, out=c), sync)}
    tri = triton_add()
    if tri is not None:
        tri(a, b, c)
        assert torch.equal(c, a + b), "wrong Triton result"
        cases["Triton add[grid](a, b, c, n, BLOCK=1024)"] = (lambda: tri(a, b, c), sync)
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        ca, cb = cupy.asarray(a.cpu().numpy()), cupy.asarray(b.cpu().numpy())
        cc = cupy.empty_like(ca)
        add(ca, cb, cc)
        cupy.cuda.Device().synchronize()
        assert bool((cc == ca + cb).all()), "wrong result on CuPy arrays"
        cupy_sync = cupy.cuda.Device().synchronize
        cases["Phobos add(a, b, c), CuPy arrays"] = (lambda: add(ca, cb, cc), cupy_sync)
        cases["cupy.add(a, b, out=c)"] = (lambda: cupy.add(ca, cb, out=cc), cupy_sync)
    best = {name: float("inf") for name in cases}
    for _ in range(3):  # interleaved rounds: a machine that speeds up or slows down affects them all alike
        for name, (fn, synchronize) in cases.items():
            best[name] = min(best[name], per_call_us(fn, calls, synchronize))
    rows = [{"call": name, "us": us} for name, us in best.items()]
    # The parts of Phobos's call: the prepared launch alone (QueuedKernel: pack, cuLaunchKernelEx), the rest
    variant = next(iter(add._kernel._variants.values()))
    queued = next(iter(variant.fast.values())).calls[False].queue
    stream = torch.cuda.current_stream().cuda_stream
    values = [a.data_ptr(), b.data_ptr(), c.data_ptr(), N]
    launch_us = min(per_call_us(lambda: queued(stream, values), calls, sync) for _ in range(3))
    rows.append({"call": "  of which the prepared launch (pack, cuLaunchKernelEx)", "us": launch_us})
    rows.append({"call": "  of which the argument checks (the rest)",
                 "us": best["Phobos add(a, b, c), torch tensors"] - launch_us})
    return rows


def graph_rows(torch, add) -> list[dict]:
    """CUDA graph replay of GRAPH_CALLS calls captured with torch.cuda.graph: µs per kernel, checked."""
    a, b = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    c = torch.empty_like(a)
    rows = []
    for name, call in (("Phobos add(a, b, c)", lambda: add(a, b, c)),
                       ("torch.add(a, b, out=c)", lambda: torch.add(a, b, out=c))):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            call()  # the warm-up torch.cuda.graph asks for: the first call prepares the launch
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(GRAPH_CALLS):
                call()
        a.copy_(torch.randn_like(a))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(c, a + b), f"{name}: the replayed graph computed something else"
        replay_us = min(per_call_us(graph.replay, 50, torch.cuda.synchronize) for _ in range(3)) / GRAPH_CALLS
        rows.append({"call": f"{name}, {GRAPH_CALLS} calls in a CUDA graph, replayed", "us": replay_us})
    return rows


def on_gpu(args) -> None:
    import torch
    add = phobos.load(str(ROOT / "examples" / "add.phobos")).add
    rows = call_rows(torch, add, args.calls) + graph_rows(torch, add)
    print(table(rows, [("call", f"call (c = a + b, {N} fp32, back to back)", ""), ("us", "µs per call", ".2f")]))
    phobos_us = rows[0]["us"]
    torch_us = next(r["us"] for r in rows if r["call"] == "torch.add(a, b, out=c)")
    print(f"\nPhobos / torch.add: {phobos_us / torch_us:.2f} (target: at most 1)")
    meta = {"elements": N, "phobos_over_torch": phobos_us / torch_us, "graph_calls": GRAPH_CALLS}
    print(f"wrote {save('call_overhead', rows, meta, args.out)}")
    plot("call_overhead", rows, "call", [("us", "µs per call")], "µs per call", args.out)


# ---------------------------------------------------------------------------
# On the CPU, with a stand-in driver

NOOP_LAUNCH = """
int cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) { return 0; }
"""


def noop_launch_kernel():
    """A C cuLaunchKernelEx that returns at once, through ctypes; a Python one where no C compiler works."""
    build = Path(tempfile.mkdtemp(prefix="phobos-bench-"))
    (build / "noop.c").write_text(NOOP_LAUNCH)
    try:
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(build / "noop.so"), str(build / "noop.c")],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return (lambda *args: 0), "Python"
    function = ctypes.CDLL(str(build / "noop.so"))["cuLaunchKernelEx"]  # as DriverApi binds libcuda's
    function.restype = ctypes.c_int
    return function, "C through ctypes"


class BenchApi:
    """phobos.run.cuda.DriverApi with nothing behind it but the no-op launch."""

    def __init__(self, launch_kernel_ex):
        self.launch_kernel_ex = launch_kernel_ex

    def launcher(self, function, grid, block, shared_bytes, size):
        return cuda.Launcher(function, grid, block, shared_bytes, size, self.launch_kernel_ex)

    def get_function(self, module, name):
        return 0x1234

    def set_max_dynamic_shared(self, function, nbytes):
        pass

    def stream_capturing(self, stream):
        return False


class BenchGpu(backends.GpuBackend):
    """The real GPU backend, on an H200's properties, over BenchApi (nothing to time: no tuning)."""

    tunes = False

    def device(self, index: int = 0):
        return runtime.DeviceProperties("NVIDIA H200 (stand-in)", (9, 0), 227 * 1024, 65536, 1024)

    def _module(self, launch):
        return runtime.Module(launch.compiled.ptx, runtime.parse_entry_params(launch.compiled.ptx), 0)


class TorchLike:
    """A CUDA tensor as torch shows it (the attributes the probe reads), in a class of module `torch`."""

    __slots__ = ("_pointer", "dtype", "shape")
    is_cuda = True

    def __init__(self, pointer: int, n: int):
        self._pointer, self.dtype, self.shape = pointer, "torch.float32", (n,)

    def data_ptr(self) -> int:
        return self._pointer

    def get_device(self) -> int:
        return 0

    def is_contiguous(self) -> bool:
        return True

    @property
    def device(self) -> str:
        return "cuda:0"


TorchLike.__module__ = "torch"


class CupyLike:
    """A device array as CuPy shows it: `__cuda_array_interface__` (built at each read, as CuPy does)."""

    def __init__(self, pointer: int, n: int):
        self._pointer, self._n = pointer, n

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (self._n,), "typestr": "<f4", "data": (self._pointer, False), "strides": None,
                "version": 3, "stream": 1}


def install_stand_ins(launch_kernel_ex) -> None:
    runtime._driver = lambda: None
    runtime.device_count = lambda: 1
    runtime.primary_context = lambda device: 1
    cuda._api = BenchApi(launch_kernel_ex)
    torch = sys.modules.get("torch") or types.ModuleType("torch")
    torch._C = getattr(torch, "_C", types.SimpleNamespace())
    torch._C._cuda_getCurrentRawStream = lambda device: 0  # torch's, in a CUDA build, is a C function like this
    sys.modules.setdefault("torch", torch)


def stand_in_us(statement, calls: int) -> float:
    return min(timeit.repeat(statement, number=calls, repeat=5)) / calls * 1e6


def on_cpu(args) -> None:
    launch_kernel_ex, launch_kind = noop_launch_kernel()
    install_stand_ins(launch_kernel_ex)
    add = phobos.load(str(ROOT / "examples" / "add.phobos"), mode=BenchGpu()).add
    n = 1 << 24
    rows = []
    for label, make in (("torch-like tensors", TorchLike), ("CuPy-like arrays", CupyLike)):
        a, b, c = (make(0x7F00_0000_0000 + i * 4 * n, n) for i in range(3))
        add(a, b, c)  # the full path: binds, compiles, prepares
        values = (a, b, c)
        locate = add._kernel._locate
        probe_us = stand_in_us(lambda: fastpath.probe(values, locate), args.calls)
        call_us = stand_in_us(lambda: add(a, b, c), args.calls)
        kernel, variant = add._kernel, add._variant
        probing_us = stand_in_us(lambda: kernel.call(variant, values, {}), args.calls)
        info = add._kernel.info
        bind_us = stand_in_us(lambda: binding.bind("add", info.params, info.size_names, values, {}),
                              args.calls // 4)
        rows.append({"arguments": label, "probe_us": probe_us, "call_us": call_us, "probing_call_us": probing_us,
                     "full_binding_us": bind_us})
    queued = next(iter(add._kernel._variants.values())).fast
    prepared = next(iter(queued.values())).calls[False]
    pack_us = stand_in_us(lambda: prepared.queue(0, [1, 2, 3, n]), args.calls)
    config, function, params, extra = ctypes.c_void_p(0x1000), ctypes.c_void_p(0x1234), None, None
    launch_us = stand_in_us(lambda: launch_kernel_ex(config, function, params, extra), args.calls)
    print(f"examples/add.phobos, N = 2^24, launch replaced by a no-op {launch_kind} function\n")
    print(table(rows, [("arguments", "arguments", ""), ("call_us", "whole call µs", ".2f"),
                       ("probing_call_us", "probing path µs", ".2f"), ("probe_us", "probe µs", ".2f"),
                       ("full_binding_us", "full binding alone µs", ".2f")]))
    print(f"\npack + queue (QueuedKernel): {pack_us:.2f} µs; the bare no-op ctypes launch: {launch_us:.2f} µs")
    meta = {"launch": launch_kind, "pack_and_queue_us": pack_us, "bare_launch_us": launch_us, "stand_in": True}
    print(f"wrote {save('call_overhead_stand_in', rows, meta, args.out, cpu_name())}")
    plot("call_overhead_stand_in", rows, "arguments", [("probe_us", "probe"), ("call_us", "whole call")],
         "µs per call", args.out, cpu_name())


def gpu_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=None, help="calls per sample (5000 on a GPU, 20000 stand-in)")
    parser.add_argument("--stand-in", action="store_true", help="the CPU measurement, with a stand-in driver")
    parser.add_argument("--out", default="bench_results")
    args = parser.parse_args()
    stand_in = args.stand_in or not gpu_present()
    args.calls = args.calls or (20000 if stand_in else 5000)
    (on_cpu if stand_in else on_gpu)(args)


if __name__ == "__main__":
    main()
