"""Row kernels over every shape on the GPU: softmax, layer norm and row sums beside torch and Triton.

    python benchmarks/bench_rows.py [--out bench_results] [--repeat 10] [--widths 64,1000,...] [--rows 1,256,...]

The sweep: every width in WIDTHS (64 to 262144 columns) with every row count
in ROWS (1 to 65536), fp32, where the matrix has at most MAX_ELEMENTS
elements; for each shape and kernel, the documented call on torch tensors -
`mod.softmax(x, y)`, `mod.layernorm(x, w, b, y, 1e-5)`, `mod.row_sum(x, y)`
(examples/), tuned on their first call among the variants their launch rules
offer for the shape - beside torch (`torch.softmax(x, 1)`,
`torch.nn.functional.layer_norm`, `torch.sum(x, 1, out=y)`) and a Triton
kernel (one program per row; rows longer than 8192 columns walked in
blocks), all called the same way in the same run.  Each result is checked
against float64 torch first.

Per shape: GB/s of the calls made back to back (host work included:
common.call_ms) and of the kernels alone (common.gpu_ms; Phobos's launched
directly on the configuration it chose: common.time_phobos), counting one
read and one write of the matrix (softmax, layer norm) or one read (row
sums).  Then the sum of 2^26 floats (examples/vector_sum.phobos, atomic_add)
against torch.sum and causal attention (2048 x 64) against SDPA, as before.

Prints a table (the ratios Phobos / torch and the configuration chosen) and,
per kernel, the matrix of call ratios over widths and rows; writes
<out>/rows.json and <out>/rows.png (a map of the call ratio per kernel).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from common import call_ms, gpu_ms, save, sweep_plot, table, time_phobos

ROOT = Path(__file__).parent.parent
WIDTHS = (64, 256, 1000, 4096, 16384, 100000, 262144)
ROWS = (1, 16, 256, 4096, 65536)
MAX_ELEMENTS = 1 << 28  # 1 GiB of fp32 a matrix
EPS = 1e-5
TOLERANCE = {"softmax": 1e-6, "layernorm": 1e-4, "row_sum": 1e-4}


def sweep(widths=WIDTHS, rows=ROWS, max_elements: int = MAX_ELEMENTS) -> list[tuple[int, int]]:
    """The (rows, columns) shapes of the sweep: every pair within the element budget, wide first."""
    return [(m, n) for n in widths for m in rows if m * n <= max_elements]


# ---------------------------------------------------------------------------
# Triton's kernels: one program per row, as in Triton's tutorials; long rows walked in blocks


def triton_kernels():
    """{kernel name: run(x, w, b, y)} in Triton, or {} without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return {}

    @triton.jit
    def softmax_row(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64) * n
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row + cols, mask=cols < n, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + row + cols, e / tl.sum(e, axis=0), mask=cols < n)

    @triton.jit
    def softmax_blocks(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64) * n
        cols = tl.arange(0, BLOCK)
        m = tl.full([BLOCK], -float("inf"), tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for c in range(0, n, BLOCK):
            x = tl.load(x_ptr + row + c + cols, mask=c + cols < n, other=-float("inf"))
            m_new = tl.maximum(m, x)
            s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
            s = tl.where(m_new == -float("inf"), 0.0, s)
            m = m_new
        mx = tl.max(m, axis=0)
        total = tl.sum(s * tl.exp(m - mx), axis=0)
        for c in range(0, n, BLOCK):
            x = tl.load(x_ptr + row + c + cols, mask=c + cols < n, other=-float("inf"))
            tl.store(y_ptr + row + c + cols, tl.exp(x - mx) / total, mask=c + cols < n)

    @triton.jit
    def layernorm_row(x_ptr, w_ptr, b_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64) * n
        cols = tl.arange(0, BLOCK)
        mask = cols < n
        x = tl.load(x_ptr + row + cols, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / n
        d = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n + eps)
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        tl.store(y_ptr + row + cols, d * rstd * w + b, mask=mask)

    @triton.jit
    def layernorm_blocks(x_ptr, w_ptr, b_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):  # Triton's tutorial's
        row = tl.program_id(0).to(tl.int64) * n
        cols = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], tl.float32)
        for c in range(0, n, BLOCK):
            acc += tl.load(x_ptr + row + c + cols, mask=c + cols < n, other=0.0)
        mean = tl.sum(acc, axis=0) / n
        acc = tl.zeros([BLOCK], tl.float32)
        for c in range(0, n, BLOCK):
            x = tl.load(x_ptr + row + c + cols, mask=c + cols < n, other=0.0)
            d = tl.where(c + cols < n, x - mean, 0.0)
            acc += d * d
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n + eps)
        for c in range(0, n, BLOCK):
            mask = c + cols < n
            x = tl.load(x_ptr + row + c + cols, mask=mask, other=0.0)
            w = tl.load(w_ptr + c + cols, mask=mask)
            b = tl.load(b_ptr + c + cols, mask=mask)
            tl.store(y_ptr + row + c + cols, (x - mean) * rstd * w + b, mask=mask)

    @triton.jit
    def row_sum_blocks(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64) * n
        cols = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], tl.float32)
        for c in range(0, n, BLOCK):
            acc += tl.load(x_ptr + row + c + cols, mask=c + cols < n, other=0.0)
        tl.store(y_ptr + tl.program_id(0), tl.sum(acc, axis=0))

    def shape(n: int) -> tuple[int, int, bool]:
        """(block, warps, walked in blocks) for rows of n columns."""
        block = triton.next_power_of_2(n)
        if block <= 8192:
            return block, 4 if block <= 2048 else 8, False
        return 4096, 8, True

    def softmax(x, w, b, y):
        block, warps, walk = shape(x.shape[1])
        (softmax_blocks if walk else softmax_row)[(x.shape[0],)](x, y, x.shape[1], BLOCK=block, num_warps=warps)

    def layernorm(x, w, b, y):
        block, warps, walk = shape(x.shape[1])
        (layernorm_blocks if walk else layernorm_row)[(x.shape[0],)](x, w, b, y, x.shape[1], EPS, BLOCK=block,
                                                                       num_warps=warps)

    def row_sum(x, w, b, y):
        block, warps, _ = shape(x.shape[1])
        row_sum_blocks[(x.shape[0],)](x, y, x.shape[1], BLOCK=min(block, 4096), num_warps=warps)

    return {"softmax": softmax, "layernorm": layernorm, "row_sum": row_sum}


# ---------------------------------------------------------------------------
# The sweep


def case(torch, modules: dict, name: str, m: int, n: int) -> dict:
    """The calls of one kernel and shape: Phobos's, torch's, the float64 reference, the tensors."""
    x = torch.randn(m, n, device="cuda") * 3 + (1 if name == "layernorm" else 0)
    w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    fn = getattr(modules[name], name)
    if name == "softmax":
        y = torch.empty_like(x)
        return {"fn": fn, "phobos": lambda: fn(x, y), "torch": lambda: torch.softmax(x, 1), "out": y,
                "values": {"x": x, "y": y}, "x": x, "w": w, "b": b,
                "reference": lambda: torch.softmax(x.double(), 1), "bytes": 2 * x.numel() * 4}
    if name == "layernorm":
        y = torch.empty_like(x)
        layer_norm = torch.nn.functional.layer_norm
        return {"fn": fn, "phobos": lambda: fn(x, w, b, y, EPS), "torch": lambda: layer_norm(x, (n,), w, b, EPS),
                "out": y, "values": {"x": x, "w": w, "b": b, "y": y, "eps": EPS}, "x": x, "w": w, "b": b,
                "reference": lambda: layer_norm(x.double(), (n,), w.double(), b.double(), EPS),
                "bytes": 2 * x.numel() * 4}
    y = torch.empty(m, device="cuda")
    out = torch.empty(m, device="cuda")
    return {"fn": fn, "phobos": lambda: fn(x, y), "torch": lambda: torch.sum(x, 1, out=out), "out": y,
            "values": {"x": x, "y": y}, "x": x, "w": w, "b": b, "reference": lambda: x.double().sum(1),
            "bytes": x.numel() * 4}


def measure(torch, modules: dict, tri: dict, name: str, m: int, n: int, repeat: int) -> dict:
    c = case(torch, modules, name, m, n)
    start = time.perf_counter()
    c["phobos"]()  # the first call: tunes among the variants for this shape
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    want = c["reference"]()
    error = (c["out"].double() - want).abs().max().item()
    scale = 1.0 if name != "row_sum" else max(1.0, math.sqrt(n))  # a sum of n terms of size ~3
    fn, nbytes = c["fn"], c["bytes"]
    row = {"kernel": name, "rows": m, "columns": n, "shape": f"{m}x{n}", "config": fn.config,
           "max_error": error, "correct": error <= TOLERANCE[name] * scale, "first_call_s": first_s,
           "call_phobos_gbs": nbytes / call_ms(c["phobos"], repeat=repeat) / 1e6,
           "call_torch_gbs": nbytes / call_ms(c["torch"], repeat=repeat) / 1e6,
           "phobos_gbs": nbytes / time_phobos(fn, c["values"], fn.grid, repeat) / 1e6,
           "torch_gbs": nbytes / gpu_ms(c["torch"], repeat=repeat) / 1e6}
    if name in tri:
        y = torch.empty_like(c["out"])
        run = lambda: tri[name](c["x"], c["w"], c["b"], y)  # noqa: E731
        run()
        torch.cuda.synchronize()
        if (y.double() - want).abs().max().item() <= TOLERANCE[name] * scale:
            row["call_triton_gbs"] = nbytes / call_ms(run, repeat=repeat) / 1e6
            row["triton_gbs"] = nbytes / gpu_ms(run, repeat=repeat) / 1e6
    row["call_ratio"] = row["call_phobos_gbs"] / row["call_torch_gbs"]
    row["ratio"] = row["phobos_gbs"] / row["torch_gbs"]
    return row


def reductions_and_attention(torch, repeat: int) -> list[dict]:
    """The sum of 2^26 floats (atomic_add) and causal attention, as the README's table has them."""
    import phobos
    vector_sum = phobos.load(str(ROOT / "examples" / "vector_sum.phobos")).vector_sum
    attention = phobos.load(str(ROOT / "examples" / "attention.phobos")).attention
    n = 1 << 26
    x = torch.randn(n, device="cuda")
    total = torch.zeros(1, device="cuda")
    fn = vector_sum[lambda config, sizes: (math.ceil(sizes["N"] / config["BLOCK"]),)]
    fn(x, total)
    assert abs(total.item() - x.double().sum().item()) < 1e-3 * math.sqrt(n), "sum is wrong"
    rows = [{"kernel": "sum 2^26", "reference": "torch.sum", "unit": "GB/s", "config": fn.config,
             "call_phobos_gbs": 4 * n / call_ms(lambda: fn(x, total), repeat=repeat) / 1e6,
             "call_torch_gbs": 4 * n / call_ms(lambda: torch.sum(x), repeat=repeat) / 1e6,
             "phobos_gbs": 4 * n / time_phobos(fn, {"x": x, "total": total}, fn.grid, repeat) / 1e6,
             "torch_gbs": 4 * n / gpu_ms(lambda: torch.sum(x), repeat=repeat) / 1e6}]
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
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None],  # noqa: E731
                                                                        is_causal=True)
        torch_ms, torch_call = gpu_ms(sdpa, repeat=repeat), call_ms(sdpa, repeat=repeat)
    rows.append({"kernel": f"attention {length}x{head}", "reference": "torch SDPA (math)", "unit": "TFLOP/s",
                 "config": attention.config,
                 "call_phobos_gbs": flops / call_ms(lambda: attention(q, kt, v, o, scale=scale), repeat=repeat) / 1e9,
                 "call_torch_gbs": flops / torch_call / 1e9,
                 "phobos_gbs": flops / time_phobos(attention, {"q": q, "kt": kt, "v": v, "o": o, "scale": scale},
                                                   attention.grid, repeat) / 1e9,
                 "torch_gbs": flops / torch_ms / 1e9})
    for r in rows:
        r["call_ratio"] = r["call_phobos_gbs"] / r["call_torch_gbs"]
        r["ratio"] = r["phobos_gbs"] / r["torch_gbs"]
    return rows


def ratio_matrix(rows: list[dict], kernel: str, key: str = "call_ratio") -> str:
    """The ratios of one kernel as a text matrix: widths across, row counts down."""
    mine = [r for r in rows if r["kernel"] == kernel]
    widths = sorted({r["columns"] for r in mine})
    counts = sorted({r["rows"] for r in mine})
    cell = {(r["rows"], r["columns"]): r[key] for r in mine}
    lines = [f"{kernel}: Phobos / torch ({key}), columns across, rows down",
             "rows \\ cols " + "".join(f"{n:>9}" for n in widths)]
    for m in counts:
        lines.append(f"{m:>11} " + "".join(f"{cell[m, n]:9.2f}" if (m, n) in cell else f"{'':>9}" for n in widths))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--rows", default=",".join(map(str, ROWS)))
    parser.add_argument("--no-extras", action="store_true", help="the sweep alone (no sum 2^26, no attention)")
    args = parser.parse_args()
    import torch
    import phobos
    modules = {name: phobos.load(str(ROOT / "examples" / f"{name}.phobos")) for name in TOLERANCE}
    tri = triton_kernels()
    shapes = sweep(tuple(map(int, args.widths.split(","))), tuple(map(int, args.rows.split(","))))
    rows = []
    for m, n in shapes:
        for name in TOLERANCE:
            row = measure(torch, modules, tri, name, m, n, args.repeat)
            rows.append(row)
            print(f"{name:9} {m:>6} x {n:<6}  call {row['call_ratio']:.2f}  kernel {row['ratio']:.2f}  "
                  f"{row['config']}  (first call {row['first_call_s']:.2f} s)", flush=True)
        torch.cuda.empty_cache()
    for r in rows:
        r.update(unit="GB/s", reference={"softmax": "torch.softmax", "layernorm": "torch layer_norm",
                                         "row_sum": "torch.sum"}[r["kernel"]])
        r.setdefault("call_triton_gbs", float("nan"))
        r.setdefault("triton_gbs", float("nan"))
    extras = [] if args.no_extras else reductions_and_attention(torch, args.repeat)
    print(table(rows, [("kernel", "kernel", ""), ("shape", "shape", ""), ("call_phobos_gbs", "Phobos call", ".0f"),
                       ("call_torch_gbs", "torch call", ".0f"), ("call_triton_gbs", "Triton call", ".0f"),
                       ("call_ratio", "call ratio", ".2f"), ("phobos_gbs", "Phobos kernel", ".0f"),
                       ("torch_gbs", "torch kernel", ".0f"), ("triton_gbs", "Triton kernel", ".0f"),
                       ("ratio", "kernel ratio", ".2f"), ("config", "configuration", "")]))
    if extras:
        print(table(extras, [("kernel", "kernel", ""), ("call_phobos_gbs", "Phobos call", ".1f"),
                             ("call_torch_gbs", "torch call", ".1f"), ("call_ratio", "call ratio", ".2f"),
                             ("phobos_gbs", "Phobos kernel", ".1f"), ("torch_gbs", "torch kernel", ".1f"),
                             ("ratio", "kernel ratio", ".2f"), ("unit", "unit", "")]))
    for name in TOLERANCE:
        print("\n" + ratio_matrix(rows, name) + "\n\n" + ratio_matrix(rows, name, "ratio"))
    below = [f"{r['kernel']} {r['shape']} ({r['call_ratio']:.2f})" for r in rows if r["call_ratio"] < 1.0]
    print(f"\nshapes below torch through the call: {len(below)} of {len(rows)}" +
          (": " + ", ".join(below) if below else ""))
    wrong = [f"{r['kernel']} {r['shape']}: max error {r['max_error']:.3g}" for r in rows if not r["correct"]]
    for line in wrong:
        print(f"WRONG: {line}", file=sys.stderr)
    meta = {"widths": sorted({r["columns"] for r in rows}), "row_counts": sorted({r["rows"] for r in rows}),
            "max_elements": MAX_ELEMENTS, "eps": EPS}
    print(f"wrote {save('rows', rows + extras, meta, args.out)}")
    sweep_plot("rows", rows, list(TOLERANCE), "call_ratio", "Phobos / torch through the call", args.out)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
