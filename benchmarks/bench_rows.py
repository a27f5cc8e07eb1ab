"""Row-wise kernels and reductions on the GPU: Phobos against torch (and Triton where present).

    python benchmarks/bench_rows.py [--out bench_results]

- softmax over the rows of (4096, 4096) and (8192, 4096) fp32 matrices, against
  torch.softmax and a Triton kernel with one program per row;
- layer norm forward over (4096, 4096) and (8192, 4096), against
  torch.nn.functional.layer_norm;
- the sum of 2^26 floats (examples/vector_sum.phobos, with atomic_add), against
  torch.sum;
- causal single-head attention, (2048, 64) fp32, against
  torch.nn.functional.scaled_dot_product_attention (math backend).

GB/s count one read and one write of the matrix (softmax, layer norm) or one
read of the vector (sum).  Each result is checked against float64 first.  The
first columns time the documented calls back to back (`fn(x, y)` beside
`torch.softmax(x, 1)`, common.call_ms); the kernel columns the kernels alone.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

import phobos
from common import call_ms, gpu_ms, plot, save, table, time_phobos

ROOT = Path(__file__).parent.parent


def triton_softmax():
    """A Triton softmax with one program per row (the usual tutorial design), or None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def row_softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)

    def run(x, y):
        row_softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    softmax = phobos.load(str(ROOT / "examples" / "softmax.phobos")).softmax
    layernorm = phobos.load(str(ROOT / "examples" / "layernorm.phobos")).layernorm
    vector_sum = phobos.load(str(ROOT / "examples" / "vector_sum.phobos")).vector_sum
    attention = phobos.load(str(ROOT / "examples" / "attention.phobos")).attention
    tri = triton_softmax()
    rows = []

    for m, n in ((4096, 4096), (8192, 4096)):
        x = torch.randn(m, n, device="cuda") * 3
        y = torch.empty_like(x)
        fn = softmax
        fn(x, y)
        ref = torch.softmax(x.double(), dim=1)
        assert (y.double() - ref).abs().max().item() < 1e-6, "softmax is wrong"
        nbytes = 2 * x.numel() * 4
        row = {"kernel": f"softmax {m}x{n}", "reference": "torch.softmax",
               "call_phobos_gbs": nbytes / call_ms(lambda: fn(x, y), repeat=args.repeat) / 1e6,
               "call_torch_gbs": nbytes / call_ms(lambda: torch.softmax(x, 1), repeat=args.repeat) / 1e6,
               "phobos_gbs": nbytes / time_phobos(fn, {"x": x, "y": y}, fn.grid, args.repeat) / 1e6,
               "torch_gbs": nbytes / gpu_ms(lambda: torch.softmax(x, 1),
                                            repeat=args.repeat) / 1e6, "config": fn.config}
        if tri is not None:
            tri(x, y)
            row["triton_gbs"] = nbytes / gpu_ms(lambda: tri(x, y), repeat=args.repeat) / 1e6
            row["call_triton_gbs"] = nbytes / call_ms(lambda: tri(x, y), repeat=args.repeat) / 1e6
        rows.append(row)

    for m, n in ((4096, 4096), (8192, 4096)):
        x = torch.randn(m, n, device="cuda") + 1
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        fn = layernorm
        fn(x, w, b, y, eps=1e-5)
        ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
        assert (y.double() - ref).abs().max().item() < 1e-4, "layer norm is wrong"
        nbytes = 2 * x.numel() * 4
        rows.append({"kernel": f"layernorm {m}x{n}", "reference": "torch layer_norm",
                     "call_phobos_gbs": nbytes / call_ms(lambda: fn(x, w, b, y, eps=1e-5), repeat=args.repeat) / 1e6,
                     "call_torch_gbs": nbytes / call_ms(lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
                                                        repeat=args.repeat) / 1e6,
                     "phobos_gbs": nbytes / time_phobos(fn, {"x": x, "w": w, "b": b, "y": y, "eps": 1e-5}, fn.grid,
                                                        args.repeat) / 1e6,
                     "torch_gbs": nbytes / gpu_ms(lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
                                                  repeat=args.repeat) / 1e6, "config": fn.config})

    n = 1 << 26
    x = torch.randn(n, device="cuda")
    total = torch.zeros(1, device="cuda")
    grid = lambda config, sizes: (math.ceil(sizes["N"] / config["BLOCK"]),)  # noqa: E731
    fn = vector_sum[grid]
    fn(x, total)
    assert abs(total.item() - x.double().sum().item()) < 1e-3 * math.sqrt(n), "sum is wrong"
    rows.append({"kernel": "sum 2^26", "reference": "torch.sum",
                 "call_phobos_gbs": 4 * n / call_ms(lambda: fn(x, total), repeat=args.repeat) / 1e6,
                 "call_torch_gbs": 4 * n / call_ms(lambda: torch.sum(x), repeat=args.repeat) / 1e6,
                 "phobos_gbs": 4 * n / time_phobos(fn, {"x": x, "total": total}, fn.grid,
                                                                          args.repeat) / 1e6,
                 "torch_gbs": 4 * n / gpu_ms(lambda: torch.sum(x), repeat=args.repeat) / 1e6, "config": fn.config})

    length, head = 2048, 64
    q, k, v = (torch.randn(length, head, device="cuda") for _ in range(3))
    o = torch.empty_like(q)
    scale = 1 / math.sqrt(head)
    kt = k.t().contiguous()
    attention(q, kt, v, o, scale=scale)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double()[None], k.double()[None], v.double()[None],
                                                           is_causal=True)[0]
    assert (o.double() - ref).abs().max().item() < 1e-4, "attention is wrong"
    flops = 2 * 2 * length * length * head / 2  # two products, causal half
    ph = time_phobos(attention, {"q": q, "kt": kt, "v": v, "o": o, "scale": scale}, attention.grid, args.repeat)
    ph_call = call_ms(lambda: attention(q, kt, v, o, scale=scale), repeat=args.repeat)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None],  # noqa: E731
                                                                        is_causal=True)
        th = gpu_ms(sdpa, repeat=args.repeat)
        th_call = call_ms(sdpa, repeat=args.repeat)
    rows.append({"kernel": f"attention {length}x{head}", "reference": "torch SDPA (math)", "call_phobos_gbs": flops / ph_call / 1e9,
                 "call_torch_gbs": flops / th_call / 1e9, "phobos_gbs": flops / ph / 1e9, "torch_gbs": flops / th / 1e9,
                 "config": attention.config, "unit": "TFLOP/s"})

    for r in rows:
        r["ratio"] = r["phobos_gbs"] / r["torch_gbs"]
        r["call_ratio"] = r["call_phobos_gbs"] / r["call_torch_gbs"]
        r.setdefault("unit", "GB/s")
        r.setdefault("triton_gbs", float("nan"))
        r.setdefault("call_triton_gbs", float("nan"))
    print(table(rows, [("kernel", "kernel", ""), ("call_phobos_gbs", "Phobos call", ".1f"),
                       ("call_torch_gbs", "torch call", ".1f"), ("call_triton_gbs", "Triton call", ".1f"),
                       ("call_ratio", "call ratio", ".2f"), ("phobos_gbs", "Phobos kernel", ".1f"),
                       ("torch_gbs", "torch kernel", ".1f"), ("triton_gbs", "Triton kernel", ".1f"),
                       ("ratio", "kernel ratio", ".2f"), ("unit", "unit", "")]))
    print(f"wrote {save('rows', rows, {}, args.out)}")
    plot("rows", [r for r in rows if r["unit"] == "GB/s"], "kernel",
         [("call_phobos_gbs", "Phobos call"), ("call_torch_gbs", "torch call"), ("phobos_gbs", "Phobos kernel")],
         "GB/s", args.out)


if __name__ == "__main__":
    main()
