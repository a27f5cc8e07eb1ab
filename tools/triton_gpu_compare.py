# The Triton corpus on a GPU and in the emulator, bit for bit.
#
#     python tools/triton_gpu_compare.py --json triton_gpu_compare.json     # the GPU machine
#     python tools/triton_gpu_compare.py --dry-run                          # anywhere: compile and emulate
#     python tools/triton_gpu_compare.py --corpus heldout                   # the held-out kernels
#
# Each deterministic case of tests/triton_corpus (no float atomics, no lock order in its sums) is built
# twice from its seed - the same inputs twice - and compiled ONCE by the local Triton for the local GPU
# (phobos.triton's compile: the PTX the emulator runs is the PTX the GPU runs).  One copy runs on the GPU
# through Triton's own launcher (the CompiledKernel, its arguments in device memory laid out as on the
# host: views keep their strides and overlapping arguments share one buffer), the other in the emulator
# with the race detectors off; then every output is compared bit for bit.  The table gives, per case:
# whether the outputs are identical, how many elements differ and by how many ulps at most, whether
# each side meets the case's own check against its numpy reference (so the corpus's bounds are
# checked on the hardware too), and which approximate instructions the PTX holds (`.approx`,
# `div.full`, `max.NaN`: where the emulator computes a closer value than the GPU's unit, until it
# models the unit's bits).  --dry-run needs no GPU: it compiles for --arch and emulates only.
# Exit status 1 when a case differs or fails, 0 otherwise.
from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import triton  # noqa: E402

import phobos.triton  # noqa: E402
from phobos.errors import PhobosError  # noqa: E402
from tests.triton_corpus import CASES  # noqa: E402
from tests.triton_heldout import HELDOUT  # noqa: E402
from tests.triton_corpus.cases import as_numpy, ulp_distance  # noqa: E402

#: The instructions whose GPU results the emulator does not model bit for bit (yet).
APPROXIMATE = re.compile(r"^\s*(?:@!?%p\d+\s+)?((?:\w+\.)+?(?:approx|full|NaN)(?:\.\w+)*)", re.MULTILINE)

TORCH_DTYPES = {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
                "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
                "float16": "float16", "float32": "float32", "float64": "float64", "bfloat16": "bfloat16",
                "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}


def local_arch() -> str:
    """The target of the local GPU, as phobos.triton names it."""
    import torch
    major, minor = torch.cuda.get_device_capability()
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def approximate_instructions(ptx: str) -> list[str]:
    return sorted(set(APPROXIMATE.findall(ptx)))


class DeviceMirror:
    """The host memory of a call's arguments, copied to the GPU buffer for buffer (phobos.triton.HostMemory:
    one per run of overlapping arguments), each argument a view of its buffer with its own strides."""

    def __init__(self, memory: phobos.triton.HostMemory, device: str = "cuda"):
        import torch
        self.torch = torch
        self.memory = memory
        self.device = device
        self.buffers: dict[int, tuple[np.ndarray, object]] = {}
        for pointer in memory.pointers.values():
            host = pointer.array
            if id(host) not in self.buffers:
                device = torch.zeros(-(-max(host.size, 1) // 16) * 16, dtype=torch.uint8, device=self.device)
                device[: host.size].copy_(torch.from_numpy(np.ascontiguousarray(host)))
                self.buffers[id(host)] = (host, device)

    def value(self, value):
        """The argument as the GPU takes it: arrays and tensors as device views, descriptors over them."""
        torch = self.torch
        if isinstance(value, tuple):
            return tuple(self.value(v) for v in value)
        if isinstance(value, phobos.triton.TensorDescriptor):
            return phobos.triton.TensorDescriptor(self.value(value.base), value.shape, value.strides,
                                                  value.block_shape, value.padding)
        if id(value) not in self.memory.pointers:
            return value
        pointer = self.memory.pointers[id(value)]
        _, device = self.buffers[id(pointer.array)]
        if isinstance(value, np.ndarray):
            dtype = getattr(torch, TORCH_DTYPES[value.dtype.name])
            shape, strides = value.shape, [s // value.itemsize for s in value.strides]
        else:
            dtype, shape, strides = value.dtype, tuple(value.shape), value.stride()
        size = torch.tensor([], dtype=dtype).element_size()
        return torch.as_strided(device.view(dtype), shape, strides, pointer.offset // size)

    def copy_back(self) -> None:
        """The GPU's bytes into the host memory of the arguments (as the emulator writes them)."""
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        for host, device in self.buffers.values():
            if host.flags.writeable and host.size:
                host[:] = device[: host.size].cpu().numpy()


def _grid(grid, call) -> tuple[int, int, int]:
    sizes = grid(call.originals) if callable(grid) else grid
    sizes = tuple(sizes) if isinstance(sizes, (tuple, list)) else (sizes,)
    return tuple(int(s) for s in sizes) + (1,) * (3 - len(sizes))


def run_on_gpu(run, arch: str) -> list[str]:
    """Every launch of `run` on the GPU, compiled by phobos.triton; the PTX of each."""
    import torch
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    ptx = []
    for launch in run.launches():
        kernel = phobos.triton.emulate(launch.kernel, arch=arch)
        compiled = kernel.compile(*launch.args, **launch.kwargs)
        call = kernel.bind(*launch.args, **launch.kwargs)
        mirror = DeviceMirror(call.memory)
        values = [mirror.value(v) for v in call.originals.values()]
        compiled.kernel[_grid(launch.grid, call)](*values)
        mirror.copy_back()
        ptx.append(compiled.ptx)
    return ptx


def run_in_emulator(run, arch: str) -> list[str]:
    ptx = []
    for launch in run.launches():
        done = phobos.triton.emulate(launch.kernel, arch=arch, check_races=False)[launch.grid](*launch.args,
                                                                                            **launch.kwargs)
        ptx.append(done.compiled.ptx)
    return ptx


def compare_outputs(gpu_run, emulated_run) -> dict:
    """How the outputs of two runs of one case differ: elements, largest ulp distance (float outputs)."""
    differing, largest, total = 0, 0, 0
    pairs = [(a, b) for ga, ea in zip(gpu_run.launches(), emulated_run.launches())
             for a, b in zip(ga.outputs, ea.outputs)]
    for gpu_out, emu_out in pairs:
        g, e = np.ascontiguousarray(as_numpy(gpu_out.array)), np.ascontiguousarray(as_numpy(emu_out.array))
        bits = f"u{g.dtype.itemsize}"
        same = g.view(bits) == e.view(bits)
        total += same.size
        differing += int((~same).sum())
        if (~same).any() and g.dtype.itemsize in (2, 4, 8) and g.dtype.kind not in "iub":
            values_g, values_e = g.astype(np.float64), e.astype(np.float64)
            finite = ~np.isnan(values_g) & ~np.isnan(values_e) & ~same
            if finite.any():
                largest = max(largest, int(ulp_distance(g[finite], e[finite]).max()))
    return {"elements": total, "differing": differing, "max_ulps": largest}


#: The corpora --corpus chooses from: tests/triton_corpus and the held-out kernels of tests/triton_heldout.
CORPORA = {"corpus": CASES, "heldout": HELDOUT}


def compare_case(name: str, arch: str, dry_run: bool, cases: dict = CASES) -> dict:
    case = cases[name]
    row = {"case": name, "arch": arch}
    started = time.perf_counter()
    emulated = case.make(arch)
    try:
        ptx = run_in_emulator(emulated, arch)
        row["emulator_vs_reference"] = emulated.check() or "ok"
    except PhobosError as error:
        row["emulator_error"] = f"{type(error).__name__}: {error.message}"
        ptx = []
    if not dry_run:
        on_gpu = case.make(arch)
        try:
            ptx = run_on_gpu(on_gpu, arch)
            row["gpu_vs_reference"] = on_gpu.check() or "ok"
            if "emulator_error" not in row:
                row.update(compare_outputs(on_gpu, emulated))
                row["identical"] = row["differing"] == 0
        except Exception as error:  # a GPU fault, a launcher error: recorded, the next case runs
            row["gpu_error"] = f"{type(error).__name__}: {error}"
    row["approximate"] = approximate_instructions("\n".join(ptx))
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def _cell(row: dict, dry_run: bool) -> tuple[str, str, str]:
    if "emulator_error" in row:
        return "emulator error", "", ""
    if dry_run:
        return "-", "", ""
    if "gpu_error" in row:
        return "GPU error", "", ""
    return ("yes" if row["identical"] else "NO"), str(row["differing"]), str(row["max_ulps"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--dry-run", action="store_true", help="no GPU: compile and emulate only")
    parser.add_argument("--arch", help="the target (default: the local GPU's; sm_90a with --dry-run)")
    parser.add_argument("--json", metavar="PATH", help="write every row here")
    parser.add_argument("--corpus", choices=CORPORA, default="corpus",
                        help="tests/triton_corpus (default) or the held-out kernels of tests/triton_heldout")
    parser.add_argument("cases", nargs="*", help="the cases to run (default: every deterministic one)")
    args = parser.parse_args(argv)
    cases = CORPORA[args.corpus]
    arch = args.arch or ("sm_90a" if args.dry_run else local_arch())
    names = args.cases or [name for name, case in cases.items() if case.deterministic]
    unknown = [name for name in names if name not in cases]
    if unknown:
        parser.error(f"unknown cases: {', '.join(unknown)}")
    runnable = [name for name in names if arch not in cases[name].skip and not cases[name].missing()]
    rows = []
    print(f"{'case':42s} {'arch':7s} {'identical':14s} {'differ':>7s} {'max ulp':>8s}  {'GPU ref':8s} "
          f"{'emu ref':8s} approximate instructions")
    for name in runnable:
        row = compare_case(name, arch, args.dry_run, cases)
        rows.append(row)
        identical, differing, ulps = _cell(row, args.dry_run)
        gpu_ref = "-" if args.dry_run or "gpu_error" in row else ("ok" if row["gpu_vs_reference"] == "ok" else "FAIL")
        emu_ref = "-" if "emulator_error" in row else ("ok" if row["emulator_vs_reference"] == "ok" else "FAIL")
        print(f"{name:42s} {arch:7s} {identical:14s} {differing:>7s} {ulps:>8s}  {gpu_ref:8s} {emu_ref:8s} "
              f"{', '.join(row['approximate'])}", flush=True)
        for key in ("emulator_error", "gpu_error"):
            if key in row:
                print(f"    {key}: {row[key][:300]}")
    bad = [r for r in rows if "gpu_error" in r or r.get("identical") is False
           or r.get("gpu_vs_reference", "ok") != "ok" or r.get("emulator_vs_reference", "ok") != "ok"]
    compared = [r for r in rows if "identical" in r]
    print(f"{len(rows)} cases on {arch}: " + (f"{sum(r['identical'] for r in compared)} of {len(compared)} "
                                               f"compared bit-identical" if not args.dry_run else "emulated only")
          + f", {sum('emulator_error' in r for r in rows)} not run by the emulator")
    if args.json:
        device = "none (dry run)"
        if not args.dry_run:
            import torch
            device = torch.cuda.get_device_name()
        Path(args.json).write_text(json.dumps({"arch": arch, "device": device, "triton": triton.__version__,
                                               "python": platform.python_version(), "rows": rows}, indent=2,
                                              default=str))
        print(f"wrote {args.json}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
