"""SGEMM on the GPU: Phobos (examples/sgemm.phobos, autotuned) against cuBLAS (torch.mm, TF32 off).

    python benchmarks/bench_sgemm.py [--sizes 1024,2048,...] [--out bench_results]

Both compute C = A @ B in exact fp32 (no TF32) on the same fresh random
matrices, timed in the same run with CUDA events (see common.py): first as
users call them, `sgemm(A, B, C, alpha=1.0, beta=0.0)` and `torch.mm(A, B,
out=C)` back to back, then the kernels alone.  Each shape's
first Phobos call (where the autotuner picks the configuration) computes
C = 1.5 A @ B + 0.5 C and is checked against float64 first.  Prints a table (TFLOP/s,
ratio to cuBLAS, % of the FP32 peak, the configuration chosen), writes JSON and
a PNG plot.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

import phobos
from common import call_ms, gpu_ms, plot, save, table, time_phobos

ROOT = Path(__file__).parent.parent
SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (4096, 4096, 1024), (8192, 1024, 8192)]  # (M, N, K)


def fp32_peak_tflops() -> float:
    """SMs x 128 FP32 lanes x 2 flops x the boost clock."""
    from phobos.run import runtime
    driver = runtime._driver()
    device = driver.Device(0)
    clock_khz = device.get_attribute(driver.device_attribute.CLOCK_RATE)
    sms = device.get_attribute(driver.device_attribute.MULTIPROCESSOR_COUNT)
    return sms * 128 * 2 * clock_khz * 1e3 / 1e12


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sgemm = phobos.load(str(ROOT / "examples" / "sgemm.phobos")).sgemm
    peak = fp32_peak_tflops()
    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        c = torch.randn(m, n, device="cuda")
        ref = 1.5 * (a.double() @ b.double()) + 0.5 * c.double()
        sgemm(a, b, c, alpha=1.5, beta=0.5)  # tunes on the first call for this shape
        error = ((c.double() - ref).norm() / ref.norm()).item()
        assert error < 1e-5, f"{m}x{n}x{k}: relative error {error}"
        flops = 2 * m * n * k
        ph_call = call_ms(lambda: sgemm(a, b, c, alpha=1.0, beta=0.0), repeat=args.repeat)
        cu_call = call_ms(lambda: torch.mm(a, b, out=c), repeat=args.repeat)
        ph = time_phobos(sgemm, {"A": a, "B": b, "C": c, "alpha": 1.0, "beta": 0.0}, sgemm.grid, args.repeat)
        cu = gpu_ms(lambda: torch.mm(a, b, out=c), repeat=args.repeat)
        rows.append({"shape": f"{m}x{n}x{k}", "call_phobos_tflops": flops / ph_call / 1e9,
                     "call_cublas_tflops": flops / cu_call / 1e9, "call_ratio": cu_call / ph_call,
                     "phobos_tflops": flops / ph / 1e9, "cublas_tflops": flops / cu / 1e9,
                     "ratio": cu / ph, "peak_percent": 100 * flops / ph / 1e9 / peak, "rel_error": error,
                     "config": sgemm.config, "phobos_ms": ph, "cublas_ms": cu})
        print(f"{m}x{n}x{k}: sgemm() {flops / ph_call / 1e9:.1f} TFLOP/s ({sgemm.config}), torch.mm() "
              f"{flops / cu_call / 1e9:.1f}", flush=True)
    print(table(rows, [("shape", "M x N x K", ""), ("call_phobos_tflops", "sgemm() TFLOP/s", ".1f"),
                       ("call_cublas_tflops", "torch.mm() TFLOP/s", ".1f"), ("call_ratio", "call ratio", ".2f"),
                       ("phobos_tflops", "kernel TFLOP/s", ".1f"),
                       ("cublas_tflops", "cuBLAS kernel", ".1f"), ("ratio", "kernel ratio", ".2f"),
                       ("peak_percent", "% of FP32 peak", ".0f")]))
    print(f"FP32 peak {peak:.1f} TFLOP/s; wrote {save('sgemm', rows, {'fp32_peak_tflops': peak}, args.out)}")
    plot("sgemm", rows, "shape", [("call_phobos_tflops", "sgemm()"), ("call_cublas_tflops", "torch.mm() (TF32 off)"),
                                  ("phobos_tflops", "Phobos kernel")], "TFLOP/s", args.out)


if __name__ == "__main__":
    main()
