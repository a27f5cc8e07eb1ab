"""The kernels of the language's newer constructs on the GPU, against torch, in GB/s or TFLOP/s.

    python benchmarks/bench_language.py [--out bench_results]

Each example kernel, autotuned through its documented call, then timed through that call made back
to back beside the torch reference called the same way (common.call_ms), and both kernels alone
(Phobos launched directly, common.time_phobos; torch behind a busy GPU, common.gpu_ms):

  embedding_bag   examples/embedding_bag.phobos (gathers)       vs torch.nn.functional.embedding_bag
  dropout         examples/dropout.phobos (Philox in bit ops)   vs torch.nn.functional.dropout
  cumsum          examples/cumsum.phobos (scans)                vs torch.cumsum
  top8            examples/topk.phobos (argmax, concat)         vs torch.topk
  splitk_matmul   examples/splitk_matmul.phobos (atomics)       vs torch.matmul (fp32, TF32 off)

Bandwidths count the bytes a kernel must move (rows gathered and written; input and
output once).  Every Phobos result is checked against torch's before it is timed.
Prints a table, writes JSON and a PNG plot.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

import phobos
from common import call_ms, gpu_ms, plot, save, table, time_phobos

ROOT = Path(__file__).parent.parent


def timed(call, reference, repeat: int, kernel) -> tuple[float, float, float, float]:
    """Milliseconds: the documented call and the reference called the same way, then both kernels alone."""
    return (call_ms(call, repeat=repeat), call_ms(reference, repeat=repeat), kernel(),
            gpu_ms(reference, repeat=repeat))


def row(kernel: str, unit: str, work: float, times: tuple, config: dict) -> dict:
    """A table row from the work done (MB or GFLOP, so that work / ms is GB/s or TFLOP/s) and `timed`'s times."""
    call, reference_call, alone, reference_alone = times
    return {"kernel": kernel, "unit": unit, "call_phobos": work / call, "call_torch": work / reference_call,
            "call_ratio": reference_call / call, "phobos": work / alone, "torch": work / reference_alone,
            "ratio": reference_alone / alone, "config": config}


def load(name: str, kernel: str):
    return getattr(phobos.load(str(ROOT / "examples" / f"{name}.phobos")), kernel)


def bench_embedding_bag(repeat: int) -> dict:
    vocab, dim, bags, per_bag = 1_000_000, 256, 65536, 32
    table_ = torch.randn(vocab, dim, device="cuda")
    ids = torch.randint(0, vocab, (bags * per_bag,), device="cuda", dtype=torch.int32)
    offsets = torch.arange(0, bags * per_bag + 1, per_bag, device="cuda", dtype=torch.int32)
    out = torch.empty(bags, dim, device="cuda")
    fn = load("embedding_bag", "embedding_bag")
    fn(table_, ids, offsets, out, False)
    ref = torch.nn.functional.embedding_bag(ids.long(), table_, offsets[:-1].long(), mode="sum")
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-4), "embedding_bag: wrong result"
    reference = lambda: torch.nn.functional.embedding_bag(ids.long(), table_, offsets[:-1].long(),  # noqa: E731
                                                         mode="sum")
    times = timed(lambda: fn(table_, ids, offsets, out, False), reference, repeat,
                  lambda: time_phobos(fn, {"E": table_, "ids": ids, "offsets": offsets, "out": out, "mean": False},
                                      fn.grid, repeat))
    moved = bags * per_bag * dim * 4 + out.numel() * 4
    return row("embedding_bag", "GB/s", moved / 1e6, times, fn.config)


def bench_dropout(repeat: int) -> dict:
    n = 1 << 26
    x, y = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    fn = load("dropout", "dropout")
    fn(x, y, 0.3, 1, 2, 0)
    kept = y != 0
    assert torch.allclose(y[kept], x[kept] / 0.7), "dropout: wrong result"
    assert abs(1 - kept.float().mean().item() - 0.3) < 1e-3, "dropout: wrong rate"
    times = timed(lambda: fn(x, y, 0.3, 1, 2, 0), lambda: torch.nn.functional.dropout(x, 0.3), repeat,
                  lambda: time_phobos(fn, {"x": x, "y": y, "p": 0.3, "seed0": 1, "seed1": 2, "offset": 0}, fn.grid,
                                      repeat))
    return row("dropout", "GB/s", 8 * n / 1e6, times, fn.config)


def bench_cumsum(repeat: int) -> dict:
    m, n = 4096, 16384
    x, y = torch.randn(m, n, device="cuda"), torch.empty(m, n, device="cuda")
    fn = load("cumsum", "cumsum_rows")
    fn(x, y)
    assert torch.allclose(y, torch.cumsum(x.double(), dim=1).float(), rtol=1e-4, atol=1e-2), "cumsum: wrong"
    times = timed(lambda: fn(x, y), lambda: torch.cumsum(x, dim=1, out=y), repeat,
                  lambda: time_phobos(fn, {"x": x, "y": y}, fn.grid, repeat))
    return row("cumsum", "GB/s", 8 * m * n / 1e6, times, fn.config)


def bench_top8(repeat: int) -> dict:
    m, n = 16384, 4096
    x = torch.randn(m, n, device="cuda")
    values, indices = torch.empty(m, 8, device="cuda"), torch.empty(m, 8, device="cuda", dtype=torch.int32)
    fn = load("topk", "top8")
    fn(x, values, indices)
    ref = torch.topk(x, 8, dim=1)
    assert torch.equal(values, ref.values), "top8: wrong values"
    times = timed(lambda: fn(x, values, indices), lambda: torch.topk(x, 8, dim=1), repeat,
                  lambda: time_phobos(fn, {"x": x, "values": values, "indices": indices}, fn.grid, repeat))
    return row("top8", "GB/s", 4 * m * n / 1e6, times, fn.config)


def bench_splitk(repeat: int) -> dict:
    m, n, k = 512, 512, 65536
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    c = torch.zeros(m, n, device="cuda")
    fn = load("splitk_matmul", "splitk_matmul")
    fn = fn[lambda config, sizes: (math.ceil(sizes["M"] / config["TILE_M"]), math.ceil(sizes["N"] / config["TILE_N"]),
                                   config["SPLIT"])]
    fn(a, b, c)
    assert torch.allclose(c, a.double().matmul(b.double()).float(), rtol=1e-3, atol=1e-2), "splitk: wrong"
    times = timed(lambda: fn(a, b, c), lambda: torch.matmul(a, b), repeat,  # C accumulates: only the time counts
                  lambda: time_phobos(fn, {"A": a, "B": b, "C": c}, fn.grid, repeat))
    return row("splitk_matmul", "TFLOP/s", 2 * m * n * k / 1e9, times, fn.config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rows = [bench(args.repeat) for bench in (bench_embedding_bag, bench_dropout, bench_cumsum, bench_top8,
                                              bench_splitk)]
    print(table(rows, [("kernel", "kernel", ""), ("unit", "unit", ""), ("call_phobos", "Phobos call", ".1f"),
                       ("call_torch", "torch call", ".1f"), ("call_ratio", "call ratio", ".2f"),
                       ("phobos", "Phobos kernel", ".1f"), ("torch", "torch kernel", ".1f"),
                       ("ratio", "kernel ratio", ".2f"), ("config", "configuration", "")]))
    print(f"wrote {save('language', rows, {}, args.out)}")
    plot("language", rows, "kernel", [("call_ratio", "call: Phobos / torch"), ("ratio", "kernel: Phobos / torch")],
         "throughput ratio", args.out)


if __name__ == "__main__":
    main()
