"""Hand-written tensor-core GEMMs (PTX) against torch.mm in bf16, on the GPU, in TFLOP/s.

    python benchmarks/bench_tensor_core_ptx.py [--out bench_results] [--sizes 4096 8192] [--repeat 20]

C = A B with bf16 A (M x K), B (K x N) and C, M = N = K for each of --sizes:
handwritten_ptx/gemm_bf16_mma.ptx (mma.sync + ldmatrix + a cp.async
pipeline, sm_80+) and handwritten_ptx/gemm_bf16_wgmma.ptx (wgmma + TMA +
mbarriers, producer and consumer warpgroups, sm_90a), loaded and launched
through phobos.run.runtime (tensor maps built by the driver, through
phobos.run.tensor_map), beside torch.mm in the same run.

Every result is checked before it is timed: against torch.mm of the float64
inputs, its largest error relative to the largest |C| must be at most four
times torch.mm's own (both round C to bf16).  A wrong result, a kernel the
driver rejects, or one still running after 60 s (a deadlock) stops the run
with the reason and a non-zero exit status instead of hanging or timing it.
Prints a table (TFLOP/s and the ratio to torch.mm), writes JSON and a PNG plot.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import torch

from common import gpu_ms, plot, save, table
from phobos.errors import PhobosError
from phobos.run import runtime
from phobos.run.tensor_map import TensorMap

ROOT = Path(__file__).parent.parent
TIMEOUT_S = 60
ERROR_FACTOR = 4  # allowed error, in units of torch.mm's own


def _generator():
    spec = importlib.util.spec_from_file_location("gemm_ptx", ROOT / "handwritten_ptx" / "gemm_ptx.py")
    module = sys.modules["gemm_ptx"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEMM = _generator()
# key, PTX file, entry, tile configuration, lowest compute capability
KERNELS = [("mma", "gemm_bf16_mma.ptx", "gemm_bf16_mma", GEMM.MmaConfig(), (8, 0)),
           ("wgmma", "gemm_bf16_wgmma.ptx", "gemm_bf16_wgmma", GEMM.WgmmaConfig(), (9, 0))]


def fail(message: str, exit_now: bool = False) -> None:
    """Stop with the reason; `exit_now` when the GPU is stuck (a running kernel cannot be stopped)."""
    print(f"bench_tensor_core_ptx: {message}", file=sys.stderr, flush=True)
    if exit_now:
        os._exit(2)
    sys.exit(1)


def arguments(key: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> list:
    m, k = a.shape
    n = b.shape[1]
    if key == "mma":
        return [a, b, c, m, n, k]
    maps = [TensorMap.tiled(a, (128, 64), swizzle="128B", l2_promotion="256B"),
            TensorMap.tiled(b, (64, 64), swizzle="128B", l2_promotion="256B")]
    return maps + [c, m, n, k]


def relative_error(c: torch.Tensor, reference: torch.Tensor, scale: float) -> float:
    error = (c.double() - reference).abs().max().item() / scale
    return error if error == error else float("inf")  # NaN (entries never written) counts as wrong


def measure(key, module, entry, cfg, a, b, reference, scale, bound, repeat) -> dict:
    """Check one kernel's result, then time it."""
    m, n = a.shape[0], b.shape[1]
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grid = ((m // cfg.bm) * (n // cfg.bn),)
    what = f"{entry} at {m}x{n}x{a.shape[1]}"
    try:
        with runtime.prepared_launch(module, entry, grid, (cfg.threads,), arguments(key, a, b, c),
                                     cfg.shared_bytes) as launch:
            launch()
            runtime.wait_for_gpu(TIMEOUT_S, what)
            error = relative_error(c, reference, scale)
            if error > bound:
                fail(f"{what} is wrong: largest error {error:.3g} of max |C|, allowed {bound:.3g} "
                     f"({ERROR_FACTOR}x torch.mm's)")
            ms = gpu_ms(launch, repeat=repeat)
    except runtime.GpuTimeout as timeout:
        fail(str(timeout), exit_now=True)
    except PhobosError as error:
        fail(f"{what}: {error}")
    return {"ms": ms, "error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        fail("needs a CUDA GPU; torch sees none")
    capability = torch.cuda.get_device_capability()
    modules = {}
    for key, file, entry, cfg, lowest in KERNELS:
        if capability < lowest:
            print(f"skipping {file}: needs compute capability {lowest}, this GPU has {capability}", file=sys.stderr)
            continue
        try:
            modules[key] = runtime.load_module((ROOT / "handwritten_ptx" / file).read_text())
        except PhobosError as error:
            fail(f"{file}: {error}")
    rows = []
    for size in args.sizes:
        for key, _, _, cfg, _ in KERNELS:
            try:
                GEMM.check_shape(size, size, size, cfg.bm, cfg.bn, cfg.bk)
            except ValueError as problem:
                fail(f"size {size}: {problem}")
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        reference = torch.mm(a.double(), b.double())
        scale = reference.abs().max().item()
        c = torch.mm(a, b)
        torch_error = relative_error(c, reference, scale)
        torch_ms = gpu_ms(lambda: torch.mm(a, b, out=c), repeat=args.repeat)
        flop = 2.0 * size ** 3
        row = {"size": f"{size}^3", "torch_tflops": flop / torch_ms / 1e9, "torch_error": torch_error}
        for key, _, entry, cfg, _ in KERNELS:
            if key in modules:
                result = measure(key, modules[key], entry, cfg, a, b, reference, scale,
                                 ERROR_FACTOR * torch_error, args.repeat)
                row.update({f"{key}_tflops": flop / result["ms"] / 1e9, f"{key}_ratio": torch_ms / result["ms"],
                            f"{key}_error": result["error"]})
            else:
                row.update({f"{key}_tflops": float("nan"), f"{key}_ratio": float("nan"), f"{key}_error": float("nan")})
        rows.append(row)
        del a, b, c, reference
        torch.cuda.empty_cache()
    print(table(rows, [("size", "M=N=K", ""), ("torch_tflops", "torch.mm TFLOP/s", ".0f"),
                       ("mma_tflops", "mma.sync TFLOP/s", ".0f"), ("mma_ratio", "/torch", ".3f"),
                       ("wgmma_tflops", "wgmma TFLOP/s", ".0f"), ("wgmma_ratio", "/torch", ".3f"),
                       ("torch_error", "torch err", ".2e"), ("mma_error", "mma err", ".2e"),
                       ("wgmma_error", "wgmma err", ".2e")]))
    meta = {"kernels": {key: {"ptx": f"handwritten_ptx/{file}", "config": repr(cfg)}
                        for key, file, _, cfg, _ in KERNELS},
            "error": "max |C - C64| / max |C64|, C64 = torch.mm of the float64 inputs"}
    print(f"wrote {save('tensor_core_ptx', rows, meta, args.out)}")
    plot("tensor_core_ptx", rows, "size", [("torch_tflops", "torch.mm (bf16)"), ("mma_tflops", "mma.sync PTX"),
                                           ("wgmma_tflops", "wgmma + TMA PTX")], "TFLOP/s", args.out)


if __name__ == "__main__":
    main()
