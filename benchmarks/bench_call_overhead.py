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
Phobos's call on the same tensors: the launch alone (cuLaunchKernelEx through
ctypes, as the call makes it, on parameters packed before), and the rest (the
checks of the arguments, the stream, packing, the Python call: the whole
call less that).  Then CUDA graphs: 100 calls captured by `torch.cuda.graph`
and replayed, for Phobos and for torch.add (µs per kernel in the replay),
checked against torch after the inputs change.  Last, the driver's launch
entry points on the same kernel and parameters, each bare through ctypes:
cuLaunchKernelEx with the parameter buffer (`extra`, Phobos's) or a
`kernelParams` array, cuLaunchKernel with either, and Phobos's with the GIL
held (PyDLL) - µs per launch, the same ctypes call of a C function that does
nothing, and the difference, the driver's own time.

With --stand-in (or without a GPU): the host cost of the call, piece by piece,
with the driver replaced by a C function that does nothing (built here with
the C compiler; a Python one where there is none) but takes
cuLaunchKernelEx's four arguments through ctypes as libcuda's does; the
tensors are real torch tensors in CPU memory that answer `is_cuda` as CUDA
ones do (where torch is installed: torch's own attribute and guard costs),
stand-ins with torch's attribute names (`data_ptr`, `get_device`, `dtype`,
`shape`, `is_contiguous`) and CuPy's `__cuda_array_interface__`.  The
whole call (the direct call of the most recent signature), the probing path
any other prepared signature takes (probe, key lookup, FastCall), the probe
alone, and the full binding, which both skip.

Prints a table, writes <out>/call_overhead.json and a plot.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
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
    return [{"call": name, "us": us} for name, us in best.items()]


NOOP_ENTRY_POINTS = """
int cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) { return 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) { return 0; }
"""


def entry_point_rows(torch, add, calls: int) -> list[dict]:
    """The driver's launch entry points, each through ctypes as bare as it goes (its arguments made once and
    bound in a functools.partial, as phobos.run.cuda.Launcher binds cuLaunchKernelEx's), on the kernel,
    launch shape and parameters of the call above: µs per launch back to back, and the same ctypes call of a
    C function that does nothing, so that what the driver itself takes shows (None where no C compiler)."""
    variant = next(iter(add._kernel._variants.values()))
    queued = next(iter(variant.fast.values())).calls[False].queue
    launcher = queued._own  # the call above packed its parameters there; the stream is torch's current one
    launcher.queue(torch.cuda.current_stream().cuda_stream)
    config, function = launcher.start.args[0], launcher.start.args[1]
    grid_x, grid_y, grid_z, block_x, block_y, block_z, shared, stream = cuda.LAUNCH_CONFIG.unpack_from(
        launcher.buffer, 0)[:8]
    params = runtime.parse_entry_params(add.ptx)["add"]
    base = ctypes.addressof(launcher.buffer) + cuda.PARAMS_OFFSET
    kernel_params = (ctypes.c_void_p * len(params))(*(base + offset for offset in runtime.natural_offsets(params)))
    shape = [ctypes.c_uint(value) for value in (grid_x, grid_y, grid_z, block_x, block_y, block_z, shared)]
    stream_handle = ctypes.c_void_p(stream)
    extra = ctypes.byref(launcher.extra)
    cdll, pydll = ctypes.CDLL("libcuda.so.1"), ctypes.PyDLL("libcuda.so.1")
    cases = [
        ("cuLaunchKernelEx(config, f, NULL, extra): Phobos's", cdll, "cuLaunchKernelEx",
         (config, function, None, extra)),
        ("  the same with the GIL held (PyDLL)", pydll, "cuLaunchKernelEx", (config, function, None, extra)),
        ("cuLaunchKernelEx(config, f, kernelParams, NULL)", cdll, "cuLaunchKernelEx",
         (config, function, kernel_params, None)),
        ("cuLaunchKernel(f, grid, block, shared, stream, NULL, extra)", cdll, "cuLaunchKernel",
         (function, *shape, stream_handle, None, extra)),
        ("cuLaunchKernel(f, grid, block, shared, stream, kernelParams, NULL)", cdll, "cuLaunchKernel",
         (function, *shape, stream_handle, kernel_params, None)),
    ]
    noop = compile_noop(NOOP_ENTRY_POINTS)
    rows = []
    for label, library, name, arguments in cases:
        entry = library[name]
        entry.restype = ctypes.c_int
        launch = functools.partial(entry, *arguments)
        assert launch() == 0, f"{label}: the launch failed"
        row = {"call": label, "us": min(per_call_us(launch, calls, torch.cuda.synchronize) for _ in range(3))}
        if noop is not None:
            stand_in = type(library)(noop)[name]
            stand_in.restype = ctypes.c_int
            row["ctypes_us"] = stand_in_us(functools.partial(stand_in, *arguments), calls)
            row["driver_us"] = row["us"] - row["ctypes_us"]
        rows.append(row)
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
    calls = call_rows(torch, add, args.calls)
    entries = entry_point_rows(torch, add, args.calls)
    phobos_us = calls[0]["us"]
    launch_us = entries[0]["us"]
    rows = calls + [
        {"call": "  of which the launch (cuLaunchKernelEx through ctypes, parameters packed)", "us": launch_us},
        {"call": "  of which the rest (checks, stream, packing, the Python call)", "us": phobos_us - launch_us},
    ] + graph_rows(torch, add)
    print(table(rows, [("call", f"call (c = a + b, {N} fp32, back to back)", ""), ("us", "µs per call", ".2f")]))
    torch_us = next(r["us"] for r in rows if r["call"] == "torch.add(a, b, out=c)")
    print(f"\nPhobos / torch.add: {phobos_us / torch_us:.2f} (target: at most 1)\n")
    print(table(entries, [("call", "launch entry point, bare, back to back", ""), ("us", "µs per launch", ".2f"),
                          ("ctypes_us", "ctypes alone µs", ".2f"), ("driver_us", "driver µs", ".2f")]))
    meta = {"elements": N, "phobos_over_torch": phobos_us / torch_us, "graph_calls": GRAPH_CALLS,
            "entry_points": entries}
    print(f"wrote {save('call_overhead', rows, meta, args.out)}")
    plot("call_overhead", rows, "call", [("us", "µs per call")], "µs per call", args.out)


# ---------------------------------------------------------------------------
# On the CPU, with a stand-in driver

NOOP_LAUNCH = """
int cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) { return 0; }
"""


def compile_noop(source: str) -> str | None:
    """The path of a shared library built from C `source` with the C compiler; None where none works."""
    build = Path(tempfile.mkdtemp(prefix="phobos-bench-"))
    (build / "noop.c").write_text(source)
    try:
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(build / "noop.so"), str(build / "noop.c")],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return str(build / "noop.so")


def noop_launch_kernel():
    """A C cuLaunchKernelEx that returns at once, through ctypes; a Python one where no C compiler works."""
    library = compile_noop(NOOP_LAUNCH)
    if library is None:
        return (lambda *args: 0), "Python"
    function = ctypes.CDLL(library)["cuLaunchKernelEx"]  # as DriverApi binds libcuda's
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


def torch_on_cpu():
    """Real torch tensors in CPU memory that answer as CUDA ones (torch.Tensor.is_cuda is True and
    get_device 0), so that the call reads torch's own attributes and runs torch's own guard at their
    real cost; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.Tensor.is_cuda = True  # a class attribute: cheaper to read than torch's, by some 30 ns
    torch.Tensor.get_device = lambda self: 0  # read by the full path and probing only
    return lambda pointer, n: torch.empty(n)


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
    real_torch = torch_on_cpu()
    install_stand_ins(launch_kernel_ex)
    add = phobos.load(str(ROOT / "examples" / "add.phobos"), mode=BenchGpu()).add
    n = 1 << 24
    rows = []
    kinds = [("torch-like tensors", TorchLike), ("CuPy-like arrays", CupyLike)]
    if real_torch is not None:
        kinds.insert(0, ("torch tensors (CPU memory)", real_torch))
    for label, make in kinds:
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
    launch_us = stand_in_us(prepared.queue.inline().own.start, args.calls)
    config, function, params, extra = ctypes.c_void_p(0x1000), ctypes.c_void_p(0x1234), None, None
    unbound_us = stand_in_us(lambda: launch_kernel_ex(config, function, params, extra), args.calls)
    print(f"examples/add.phobos, N = 2^24, launch replaced by a no-op {launch_kind} function\n")
    print(table(rows, [("arguments", "arguments", ""), ("call_us", "whole call µs", ".2f"),
                       ("probing_call_us", "probing path µs", ".2f"), ("probe_us", "probe µs", ".2f"),
                       ("full_binding_us", "full binding alone µs", ".2f")]))
    print(f"\npack + queue (QueuedKernel): {pack_us:.2f} µs; the no-op launch as a Launcher binds it: "
          f"{launch_us:.2f} µs (four c_void_p arguments passed at each call: {unbound_us:.2f} µs)")
    meta = {"launch": launch_kind, "pack_and_queue_us": pack_us, "bare_launch_us": launch_us,
            "unbound_launch_us": unbound_us, "stand_in": True}
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
