"""Host cost of the documented call `mod.add(a, b, c)`, measured on the CPU without a GPU.

    python benchmarks/bench_call_overhead.py [--calls 20000] [--out bench_results]

What a call costs in Python before the driver takes over, piece by piece, and
the whole prepared call (phobos.launch.fastpath) on device tensors: the
direct call of the most recent signature ("whole call"), the probing path
that any other prepared signature takes (probe, key lookup, FastCall), and
what the full binding alone costs, which both skip - with the
driver replaced by a C function that does nothing (built here with the C
compiler; a Python function where there is none) but takes cuLaunchKernel's
eleven arguments through ctypes exactly as libcuda's does.  The tensors are
stand-ins with torch's attribute names (`data_ptr`, `get_device`, `dtype`,
`shape`, `is_contiguous`) and, for the second row, CuPy's
`__cuda_array_interface__`.  Add the driver's own time for cuLaunchKernel
(about 2-3 µs on the H200) to get the GPU machine's figure;
benchmarks/bench_launch.py measures that on the GPU itself.  Prints a table,
writes JSON and a plot.
"""
from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import tempfile
import timeit
import types
from pathlib import Path


ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))

import phobos  # noqa: E402
from common import cpu_name, plot, save  # noqa: E402
from phobos.launch import binding, fastpath  # noqa: E402
from phobos.run import backends, cuda, runtime  # noqa: E402

NOOP_LAUNCH = """
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) { return 0; }
"""


def noop_launch_kernel():
    """A C cuLaunchKernel that returns at once, through ctypes; a Python one where no C compiler works."""
    build = Path(tempfile.mkdtemp(prefix="phobos-bench-"))
    (build / "noop.c").write_text(NOOP_LAUNCH)
    try:
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(build / "noop.so"), str(build / "noop.c")],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return (lambda *args: 0), "Python"
    function = ctypes.CDLL(str(build / "noop.so"))["cuLaunchKernel"]  # as DriverApi binds libcuda's
    function.restype = ctypes.c_int
    return function, "C through ctypes"


class BenchApi:
    """phobos.run.cuda.DriverApi with nothing behind it but the no-op launch."""

    def __init__(self, launch_kernel):
        self.launch_kernel = launch_kernel

    def launcher(self, function, grid, block, shared_bytes, size):
        return cuda.Launcher(function, grid, block, shared_bytes, size, self.launch_kernel)

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


def install_stand_ins(launch_kernel) -> None:
    runtime._driver = lambda: None
    runtime.device_count = lambda: 1
    runtime.primary_context = lambda device: 1
    cuda._api = BenchApi(launch_kernel)
    torch = sys.modules.get("torch") or types.ModuleType("torch")
    torch._C = getattr(torch, "_C", types.SimpleNamespace())
    torch._C._cuda_getCurrentRawStream = lambda device: 0  # torch's, in a CUDA build, is a C function like this
    sys.modules.setdefault("torch", torch)


def per_call_us(statement, calls: int) -> float:
    return min(timeit.repeat(statement, number=calls, repeat=5)) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--out", default="bench_results")
    args = parser.parse_args()
    launch_kernel, launch_kind = noop_launch_kernel()
    install_stand_ins(launch_kernel)
    add = phobos.load(str(ROOT / "examples" / "add.phobos"), mode=BenchGpu()).add
    n = 1 << 24
    rows = []
    for label, make in (("torch-like tensors", TorchLike), ("CuPy-like arrays", CupyLike)):
        a, b, c = (make(0x7F00_0000_0000 + i * 4 * n, n) for i in range(3))
        add(a, b, c)  # the full path: binds, compiles, prepares
        values = (a, b, c)
        locate = add._kernel._locate
        probe_us = per_call_us(lambda: fastpath.probe(values, locate), args.calls)
        call_us = per_call_us(lambda: add(a, b, c), args.calls)
        kernel, variant = add._kernel, add._variant
        probing_us = per_call_us(lambda: kernel.call(variant, values, {}), args.calls)
        info = add._kernel.info
        bind_us = per_call_us(lambda: binding.bind("add", info.params, info.size_names, values, {}), args.calls // 4)
        rows.append({"arguments": label, "probe_us": probe_us, "call_us": call_us, "probing_call_us": probing_us,
                     "full_binding_us": bind_us})
    queued = next(iter(add._kernel._variants.values())).fast
    prepared = next(iter(queued.values())).calls[False]
    pack_us = per_call_us(lambda: prepared.queue(0, [1, 2, 3, n]), args.calls)
    handle = ctypes.c_void_p(0x1234)
    launch_us = per_call_us(lambda: launch_kernel(handle, 1, 1, 1, 1, 1, 1, 0, ctypes.c_void_p(0), None, None),
                            args.calls)
    print(f"examples/add.phobos, N = 2^24, launch replaced by a no-op {launch_kind} function\n")
    print(f"{'arguments':>20}  {'whole call µs':>13}  {'probing path µs':>15}  {'probe µs':>9}  "
          f"{'full binding alone µs':>21}")
    for row in rows:
        print(f"{row['arguments']:>20}  {row['call_us']:13.2f}  {row['probing_call_us']:15.2f}  "
              f"{row['probe_us']:9.2f}  {row['full_binding_us']:21.2f}")
    print(f"\npack + queue (QueuedKernel): {pack_us:.2f} µs; the bare no-op ctypes launch: {launch_us:.2f} µs")
    meta = {"launch": launch_kind, "pack_and_queue_us": pack_us, "bare_launch_us": launch_us}
    print(f"wrote {save('call_overhead', rows, meta, args.out, cpu_name())}")
    plot("call_overhead", rows, "arguments", [("probe_us", "probe"), ("call_us", "whole call")], "µs per call",
         args.out, cpu_name())


if __name__ == "__main__":
    main()
