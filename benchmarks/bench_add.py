"""Vector add on the GPU: Phobos (examples/add.phobos, autotuned) against torch.add, in GB/s.

    python benchmarks/bench_add.py [--out bench_results]

c = a + b in fp32 for 2^24, 2^26 and 2^28 elements, counting 12 bytes per
element (two reads, one write).  The first columns time the documented calls,
`add(a, b, c)` and `torch.add(a, b, out=c)`, back to back between CUDA events
(common.call_ms); the kernel columns time the kernels alone (common.gpu_ms).
The same run measures the hand-written handwritten_ptx/add.ptx (one element
per thread, 256 threads per CTA) and a device-to-device copy (8 bytes per
element) as the bandwidth ceiling.  Prints a table, writes JSON and a PNG plot.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

import phobos
from common import call_ms, gpu_ms, plot, save, table, time_phobos
from phobos.run import runtime

ROOT = Path(__file__).parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    add = phobos.load(str(ROOT / "examples" / "add.phobos")).add
    handwritten = runtime.load_module((ROOT / "handwritten_ptx" / "add.ptx").read_text())
    rows = []
    for log2 in (24, 26, 28):
        n = 1 << log2
        a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        c = torch.full((n,), float("nan"), device="cuda")
        add(a, b, c)
        assert torch.equal(c, a + b), "wrong result"
        ph_call = call_ms(lambda: add(a, b, c), repeat=args.repeat)
        th_call = call_ms(lambda: torch.add(a, b, out=c), repeat=args.repeat)
        ph = time_phobos(add, {"a": a, "b": b, "c": c}, add.grid, args.repeat)
        th = gpu_ms(lambda: torch.add(a, b, out=c), repeat=args.repeat)
        cp = gpu_ms(lambda: c.copy_(a), repeat=args.repeat)
        with runtime.prepared_launch(handwritten, "add", (n + 255) // 256, 256, [a, b, c, n]) as launch:
            hw = gpu_ms(launch, repeat=args.repeat)
        rows.append({"elements": f"2^{log2}", "call_phobos_gbs": 12 * n / ph_call / 1e6,
                     "call_torch_gbs": 12 * n / th_call / 1e6, "call_ratio": th_call / ph_call,
                     "phobos_gbs": 12 * n / ph / 1e6, "torch_gbs": 12 * n / th / 1e6,
                     "copy_gbs": 8 * n / cp / 1e6, "handwritten_gbs": 12 * n / hw / 1e6, "ratio": th / ph,
                     "config": add.config})
    for r in rows:
        r["bandwidth_percent"] = 100 * r["phobos_gbs"] / r["copy_gbs"]
    print(table(rows, [("elements", "elements", ""), ("call_phobos_gbs", "add() GB/s", ".0f"),
                       ("call_torch_gbs", "torch.add() GB/s", ".0f"), ("call_ratio", "call ratio", ".3f"),
                       ("phobos_gbs", "kernel GB/s", ".0f"),
                       ("torch_gbs", "torch kernel GB/s", ".0f"), ("ratio", "kernel ratio", ".3f"),
                       ("handwritten_gbs", "add.ptx GB/s", ".0f"),
                       ("copy_gbs", "copy GB/s", ".0f"), ("bandwidth_percent", "% of copy", ".0f")]))
    print(f"wrote {save('add', rows, {}, args.out)}")
    plot("add", rows, "elements", [("call_phobos_gbs", "add(a, b, c)"), ("call_torch_gbs", "torch.add"),
                                   ("phobos_gbs", "Phobos kernel"), ("copy_gbs", "copy")], "GB/s", args.out)


if __name__ == "__main__":
    main()
