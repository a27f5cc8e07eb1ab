"""Softmax and layer norm of examples/ on the GPU, called as a user calls them (no configure): right and fast.

    python benchmarks/check_rows.py [--out bench_results] [--repeat 20]

For each shape - (4096, 4096), (8192, 4096), (4096, 1000) and (64, 100000) -
each kernel is called through the documented call, `mod.softmax(x, y)` and
`mod.layernorm(x, w, b, y, eps=1e-5)` on torch tensors, so the autotuner picks
the configuration among those valid for the shape.  Printed per row:

- the configuration chosen and the largest absolute error against float64
  torch (the script exits with status 1 if any is beyond the tolerance);
- GB/s (one read and one write of the matrix) of the documented call made
  back to back (host work included, common.call_ms) beside
  torch.softmax / torch.nn.functional.layer_norm called the same way in the
  same run, then of both kernels alone (common.time_phobos, common.gpu_ms).

Writes <out>/rows_check.json.  Memory and race checks of the same kernels:

    compute-sanitizer --tool memcheck  python examples/softmax.py   --size 64 20000
    compute-sanitizer --tool memcheck  python examples/softmax.py   --size 256 1000
    compute-sanitizer --tool racecheck python examples/softmax.py   --size 64 20000
    compute-sanitizer --tool racecheck python examples/softmax.py   --size 256 1000
    (the same four with examples/layernorm.py)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import phobos
from common import call_ms, gpu_ms, save, table, time_phobos

ROOT = Path(__file__).parent.parent
SHAPES = ((4096, 4096), (8192, 4096), (4096, 1000), (64, 100000))
EPS = 1e-5
TOLERANCE = {"softmax": 1e-6, "layernorm": 1e-4}


def softmax_case(fn, m: int, n: int):
    x = torch.randn(m, n, device="cuda") * 3
    y = torch.empty_like(x)
    values = {"x": x, "y": y}
    return (values, lambda: fn(x, y), lambda: torch.softmax(x, 1),
            lambda: (y.double() - torch.softmax(x.double(), 1)).abs().max().item())


def layernorm_case(fn, m: int, n: int):
    x = torch.randn(m, n, device="cuda") + 1
    w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    values = {"x": x, "w": w, "b": b, "y": y, "eps": EPS}
    reference = torch.nn.functional.layer_norm
    return (values, lambda: fn(x, w, b, y, eps=EPS), lambda: reference(x, (n,), w, b, EPS),
            lambda: (y.double() - reference(x.double(), (n,), w.double(), b.double(), EPS)).abs().max().item())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    kernels = {"softmax": (phobos.load(ROOT / "examples" / "softmax.phobos").softmax, softmax_case),
               "layernorm": (phobos.load(ROOT / "examples" / "layernorm.phobos").layernorm, layernorm_case)}
    rows, wrong = [], []
    for name, (fn, make) in kernels.items():
        for m, n in SHAPES:
            values, call, reference, error = make(fn, m, n)
            call()  # the first call tunes, among the configurations valid for (m, n)
            torch.cuda.synchronize()
            max_error = error()
            nbytes = 2 * m * n * 4
            row = {"kernel": name, "shape": f"{m}x{n}", "config": str(fn.config), "max_error": max_error,
                   "call_gbs": nbytes / call_ms(call, repeat=args.repeat) / 1e6,
                   "torch_call_gbs": nbytes / call_ms(reference, repeat=args.repeat) / 1e6,
                   "kernel_gbs": nbytes / time_phobos(fn, values, fn.grid, args.repeat) / 1e6,
                   "torch_gbs": nbytes / gpu_ms(reference, repeat=args.repeat) / 1e6}
            row["call_vs_torch"] = row["call_gbs"] / row["torch_call_gbs"]
            row["vs_torch"] = row["kernel_gbs"] / row["torch_gbs"]
            rows.append(row)
            if not max_error <= TOLERANCE[name]:
                wrong.append(f"{name} {m}x{n}: max error {max_error:.3g} (tolerance {TOLERANCE[name]})")
    print(table(rows, [("kernel", "kernel", ""), ("shape", "shape", ""), ("config", "configuration", ""),
                       ("max_error", "max |error|", ".2e"), ("call_gbs", "call GB/s", ".0f"),
                       ("torch_call_gbs", "torch call GB/s", ".0f"), ("call_vs_torch", "call / torch", ".2f"),
                       ("kernel_gbs", "kernel GB/s", ".0f"), ("torch_gbs", "torch kernel GB/s", ".0f"),
                       ("vs_torch", "kernel / torch", ".2f")]))
    print(f"wrote {save('rows_check', rows, {'eps': EPS}, args.out)}")
    for line in wrong:
        print(f"WRONG: {line}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
