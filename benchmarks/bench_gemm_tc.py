"""Tensor cores on the GPU: Phobos's GEMMs and attention against cuBLAS and torch's flash attention.

    python benchmarks/bench_gemm_tc.py [--only gemm_bf16,gemm_f16,tf32,tf32x3,attention,gemm_fp8,attention_fp8]
                                       [--sizes 4096,8192] [--timeout 300] [--out bench_results]

Cases (each Phobos kernel is the example's, autotuned by its first call, and called through the
documented call `mod.kernel(...)` on torch tensors; the reference is called the same way, in the
same run):

  gemm_bf16, gemm_f16  C = A B, 16-bit in and out (examples/gemm_bf16.phobos)  vs torch.mm (cuBLAS)
  tf32                 C = A B, f32, TF32 (examples/sgemm_tf32.phobos)          vs torch.mm, TF32 on
  tf32x3               C = A B, f32, 3xTF32                                     vs torch.mm, TF32 off (SGEMM)
  attention            flash-attention forward, bf16, L = 4096, d = 64 and 128, causal and not
                       (examples/attention_bf16.phobos)                         vs scaled_dot_product_attention
                                                                                   (flash backend)
  gemm_fp8             C = scale_a scale_b A B^T, e4m3 in, bf16 out, per-tensor scales, at
                       M x N x K = 4096^3, 8192^3, 8192 x 8192 x 4096 (FP8_SHAPES; not --sizes)
                       (examples/gemm_fp8.phobos)                               vs torch._scaled_mm (cuBLASLt,
                                                                                   B passed as B.t())
  gemm_fp8_blockwise   the same shapes with DeepSeek-style block scales (1 x 128 for A, 128 x 128 for B)
                                                                                vs Phobos's gemm_fp8 (per-tensor
                                                                                   scales), _scaled_mm beside
  (`--only gemm_fp8` runs both.)  FP8 inputs are quantised as FP8 training does (largest magnitude of the
  tensor or block to 448); the errors are against float64 products of the dequantised inputs.
  attention_fp8        flash-attention forward, e4m3 Q, K, V (V^T given), as `attention`
                       (examples/attention_fp8.phobos)                          vs Phobos's bf16 attention

Each call is timed back to back between two CUDA events, many calls per sample, the median of the
samples; Phobos's and the reference's samples alternate, so both see the GPU in the same clock and
power state (it drifts by 10-15% under a sustained load).  Errors are max |result - float64 reference| (for attention, on the first heads only).
Prints a table (time, TFLOP/s, ratio, errors, the configuration chosen), writes
OUT/gemm_tc.json (rows of earlier runs of other cases are kept) and OUT/gemm_tc.png.

Robustness: the cases run in a worker process; a case that fails reports why and the next one
runs; a case still running after --timeout seconds (a hang, or a tuning far slower than expected)
has its worker killed and the remaining cases go on in a new one.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import timed_ms

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"
ROW = "ROW "  # the prefix of a worker's result line
HEADS = 32  # batch x heads of the attention cases
LENGTH = 4096
CHECKED_HEADS = 2  # attention heads checked against float64

TARGETS = {"gemm_bf16": 0.80, "gemm_f16": 0.80, "tf32": 0.80, "tf32x3": 1.5, "attention": 0.70,
           "gemm_fp8": 1.0, "gemm_fp8_blockwise": 0.9, "attention_fp8": 1.3}
FP8_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 4096)]  # M, N, K
FP8_MAX = 448.0  # the largest e4m3
FP8_BLOCK = 128  # the block scales' extent along K (and, for B, along N)


def cases(only: list[str], sizes: list[int]) -> list[str]:
    out = []
    for group in only:
        if group in ("attention", "attention_fp8"):
            out += [f"{group}:{d}:{int(causal)}" for d in (64, 128) for causal in (False, True)]
        elif group in ("gemm_fp8", "gemm_fp8_blockwise"):
            out += [f"{kind}:{m}x{n}x{k}" for m, n, k in FP8_SHAPES
                    for kind in (("gemm_fp8", "gemm_fp8_blockwise") if group == "gemm_fp8" else (group,))]
        else:
            out += [f"{group}:{n}" for n in sizes]
    return out


# ------------------------------------------------------------------ worker side
def triton_matmul():
    """Triton's tutorial matmul (benchmarks/triton_matmul.py), or None with the reason printed."""
    try:
        sys.path.insert(0, str(Path(__file__).parent))
        from triton_matmul import matmul
        return matmul
    except ImportError as error:
        print(f"Triton is not beside the 16-bit GEMMs: {error}", flush=True)
        return None


def fastest(kernel, count: int = 6) -> list[list]:
    """The `count` fastest configurations the first call timed, [configuration, ms], fastest first."""
    timed = [(ms, name) for name, ms in kernel.timings.items() if isinstance(ms, (int, float))]
    return [[name, ms] for ms, name in sorted(timed)[:count]]


def run_gemm(group: str, n: int) -> dict:
    import torch
    import phobos
    if group in ("gemm_bf16", "gemm_f16"):
        dtype = torch.bfloat16 if group == "gemm_bf16" else torch.float16
        kernel = getattr(phobos.load(EXAMPLES / "gemm_bf16.phobos"), group)
        reference_name, tf32 = "cuBLAS (torch.mm)", False
    else:
        dtype = torch.float32
        kernel = getattr(phobos.load(EXAMPLES / "sgemm_tf32.phobos"), f"sgemm_{group}")
        tf32 = group == "tf32"
        reference_name = "cuBLAS TF32 (torch.mm)" if tf32 else "cuBLAS SGEMM (torch.mm, TF32 off)"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n, device="cuda").to(dtype)
    b = torch.randn(n, n, device="cuda").to(dtype)
    c, c_ref = torch.empty(n, n, device="cuda", dtype=dtype), torch.empty(n, n, device="cuda", dtype=dtype)
    started = time.perf_counter()
    kernel(a, b, c)  # tunes: the first call for these sizes
    tuning_s = time.perf_counter() - started
    # What the tuned kernel chose, read now: a kernel's callables share its last launch, and the peer
    # configured with PERSISTENT=0 below launches after it.
    chosen = {"config": kernel.config, "notes": [note.split(": ", 1)[1] for note in kernel.compiled.notes],
              "fastest": fastest(kernel)}
    torch.mm(a, b, out=c_ref)
    exact = a.double() @ b.double()
    errors = {"phobos_error": (c.double() - exact).abs().max().item(),
              "reference_error": (c_ref.double() - exact).abs().max().item()}
    peers = {}
    matmul = triton_matmul() if dtype != torch.float32 else None
    if matmul is not None:  # the peer a kernel writer would otherwise pick, autotuned by its first call
        c_triton = torch.empty_like(c)
        matmul(a, b, c_triton)
        errors["triton_error"] = (c_triton.double() - exact).abs().max().item()
        peers["triton"] = lambda: matmul(a, b, c_triton)
    if kernel.compiled.persistent:  # the same kernel with one CTA per output tile, tuned alike
        single, c_single = kernel.configure(PERSISTENT=0), torch.empty_like(c)
        single(a, b, c_single)
        errors["one_cta_per_tile_error"] = (c_single.double() - exact).abs().max().item()
        peers["one_cta_per_tile"] = lambda: single(a, b, c_single)
    del exact
    phobos_ms, reference_ms, *peer_ms = timed_ms(lambda: kernel(a, b, c), lambda: torch.mm(a, b, out=c_ref),
                                                 *peers.values())
    return {"shape": f"{n}^3", "reference": reference_name, "phobos_ms": phobos_ms, "reference_ms": reference_ms,
            **{f"{name}_ms": ms for name, ms in zip(peers, peer_ms)},
            "flops": 2 * n ** 3, "tuning_s": tuning_s, **chosen, **errors}


# ------------------------------------------------------------------ FP8 quantisation (torch, any device)
def per_tensor_quantised(x):
    """(e4m3 codes, f32 scale) of x: x / scale rounded, with scale = max |x| / 448."""
    import torch
    scale = (x.abs().max() / FP8_MAX).float().clamp_min(1e-30)
    return (x / scale).to(torch.float8_e4m3fn), scale


def block_scales(x, rows: int):
    """f32 scales of the `rows` x 128 blocks of a 2-D x (the last ones partial): their max |x| / 448."""
    import torch.nn.functional as F
    m, k = x.shape
    padded = F.pad(x.abs().float(), (0, -k % FP8_BLOCK, 0, -m % rows))
    amax = padded.reshape(padded.shape[0] // rows, rows, padded.shape[1] // FP8_BLOCK, FP8_BLOCK).amax(dim=(1, 3))
    return (amax / FP8_MAX).clamp_min(1e-30)


def expanded(scales, rows: int, shape):
    """Per-element scales of blocks of `rows` x 128, cut to `shape`."""
    return scales.repeat_interleave(rows, 0).repeat_interleave(FP8_BLOCK, 1)[:shape[0], :shape[1]]


def block_quantised(x, rows: int):
    """(e4m3 codes, scales [cdiv(M, rows), cdiv(K, 128)]) of x with a scale per `rows` x 128 block."""
    import torch
    scales = block_scales(x, rows)
    return (x / expanded(scales, rows, x.shape)).to(torch.float8_e4m3fn), scales


def dequantised(codes, scales, rows: int = 0):
    """The float64 values the codes and their scales stand for (rows 0: one scale for the tensor)."""
    values = codes.double()
    return values * (scales.double() if rows == 0 else expanded(scales.double(), rows, codes.shape))


def run_fp8(group: str, m: int, n: int, k: int, device: str = "cuda", timer=None) -> dict:
    """gemm_fp8 against torch._scaled_mm (per-tensor scales, bf16 out, B passed as B.t()), or
    gemm_fp8_blockwise against gemm_fp8, both on the same data; errors against float64.  (`device` and
    `timer` - timed_ms's stand-in - let a test run the case on the CPU.)"""
    import torch
    import phobos
    timer = timer or timed_ms
    module = phobos.load(EXAMPLES / "gemm_fp8.phobos")
    x, w = torch.randn(m, k, device=device), torch.randn(n, k, device=device)
    (a, sa), (b, sb) = per_tensor_quantised(x), per_tensor_quantised(w)
    c_ref = torch.empty(m, n, device=device, dtype=torch.bfloat16)
    scaled_mm = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)  # noqa: E731
    per_tensor, c = module.gemm_fp8, torch.empty_like(c_ref)
    scales = {"scale_a": sa.item(), "scale_b": sb.item()}  # Python floats: no device read per call
    started = time.perf_counter()
    per_tensor(a, b, c, **scales)  # tunes: the first call for these sizes
    tuning_s = time.perf_counter() - started
    exact = dequantised(a, sa) @ dequantised(b, sb).T
    errors = {"phobos_error": (c.double() - exact).abs().max().item(),
              "scaled_mm_error": (scaled_mm().double() - exact).abs().max().item(), "c_max": exact.abs().max().item()}
    del exact
    phobos_per_tensor = lambda: per_tensor(a, b, c, **scales)  # noqa: E731
    if group == "gemm_fp8":
        kernel, reference_name = per_tensor, "torch._scaled_mm"
        errors["reference_error"] = errors.pop("scaled_mm_error")
        phobos_ms, reference_ms = timer(phobos_per_tensor, scaled_mm)
        peer = {}
    else:
        (ab, sab), (bb, sbb) = block_quantised(x, 1), block_quantised(w, FP8_BLOCK)
        kernel, c_block = module.gemm_fp8_blockwise, torch.empty_like(c_ref)
        started = time.perf_counter()
        kernel(ab, bb, c_block, sab, sbb)
        tuning_s = time.perf_counter() - started
        exact = dequantised(ab, sab, 1) @ dequantised(bb, sbb, FP8_BLOCK).T
        errors = {"phobos_error": (c_block.double() - exact).abs().max().item(),
                  "reference_error": errors["phobos_error"], "scaled_mm_error": errors["scaled_mm_error"],
                  "c_max": max(errors["c_max"], exact.abs().max().item())}
        del exact
        reference_name = "Phobos gemm_fp8 (per-tensor scales)"
        phobos_ms, reference_ms, scaled_mm_ms = timer(lambda: kernel(ab, bb, c_block, sab, sbb),
                                                      phobos_per_tensor, scaled_mm)
        peer = {"scaled_mm_ms": scaled_mm_ms}
    notes = [note.split(": ", 1)[1] for note in kernel.compiled.notes]
    return {"shape": f"{m}x{n}x{k}", "reference": reference_name, "phobos_ms": phobos_ms,
            "reference_ms": reference_ms, **peer, "flops": 2 * m * n * k, "config": kernel.config,
            "tuning_s": tuning_s, "notes": notes, **errors, "fastest": fastest(kernel)}


def attention_reference(q, k, v, causal: bool):
    import torch
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ v.double()


def run_attention(d: int, causal: bool) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import phobos
    attention = phobos.load(EXAMPLES / "attention_bf16.phobos").attention
    q, k, v = (torch.randn(1, HEADS, LENGTH, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, o_ref = torch.empty_like(q), None
    scale = 1 / math.sqrt(d)
    started = time.perf_counter()
    attention(q, k, v, o, scale=scale, causal=causal)
    tuning_s = time.perf_counter() - started
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o_ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        exact = attention_reference(q[0, :CHECKED_HEADS], k[0, :CHECKED_HEADS], v[0, :CHECKED_HEADS], causal)
        errors = {"phobos_error": (o[0, :CHECKED_HEADS].double() - exact).abs().max().item(),
                  "reference_error": (o_ref[0, :CHECKED_HEADS].double() - exact).abs().max().item()}
        phobos_ms, reference_ms = timed_ms(lambda: attention(q, k, v, o, scale=scale, causal=causal),
                                                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    flops = 4 * HEADS * LENGTH * LENGTH * d // (2 if causal else 1)
    notes = [note.split(": ", 1)[1] for note in attention.compiled.notes]
    return {"shape": f"{HEADS}x{LENGTH}x{d}{' causal' if causal else ''}",
            "reference": "torch SDPA (flash backend)", "phobos_ms": phobos_ms, "reference_ms": reference_ms,
            "flops": flops, "config": attention.config, "tuning_s": tuning_s, "notes": notes, **errors,
            "fastest": fastest(attention)}


def run_attention_fp8(d: int, causal: bool) -> dict:
    """attention_fp8 (e4m3 Q, K, V^T, per-tensor scales) against Phobos's bf16 attention on the same values."""
    import torch
    import phobos
    fp8 = phobos.load(EXAMPLES / "attention_fp8.phobos").attention_fp8
    bf16 = phobos.load(EXAMPLES / "attention_bf16.phobos").attention
    (q, sq), (k, sk), (v, sv) = (per_tensor_quantised(torch.randn(1, HEADS, LENGTH, d, device="cuda"))
                                 for _ in range(3))
    vt = v.transpose(2, 3).contiguous()
    scale, v_scale = (sq * sk).item() / math.sqrt(d), sv.item()
    q16, k16, v16 = (dequantised(x, s).to(torch.bfloat16) for x, s in ((q, sq), (k, sk), (v, sv)))
    o, o16 = torch.empty_like(q16), torch.empty_like(q16)
    started = time.perf_counter()
    fp8(q, k, vt, o, scale=scale, v_scale=v_scale, causal=causal)
    tuning_s = time.perf_counter() - started
    bf16(q16, k16, v16, o16, scale=1 / math.sqrt(d), causal=causal)
    exact = attention_reference(*(dequantised(x[0, :CHECKED_HEADS], s) for x, s in ((q, sq), (k, sk), (v, sv))),
                                causal)
    errors = {"phobos_error": (o[0, :CHECKED_HEADS].double() - exact).abs().max().item(),
              "reference_error": (o16[0, :CHECKED_HEADS].double() - exact).abs().max().item()}
    phobos_ms, reference_ms = timed_ms(lambda: fp8(q, k, vt, o, scale=scale, v_scale=v_scale, causal=causal),
                                       lambda: bf16(q16, k16, v16, o16, scale=1 / math.sqrt(d), causal=causal))
    notes = [note.split(": ", 1)[1] for note in fp8.compiled.notes]
    return {"shape": f"{HEADS}x{LENGTH}x{d}{' causal' if causal else ''}", "reference": "Phobos attention (bf16)",
            "phobos_ms": phobos_ms, "reference_ms": reference_ms,
            "flops": 4 * HEADS * LENGTH * LENGTH * d // (2 if causal else 1), "config": fp8.config,
            "tuning_s": tuning_s, "notes": notes, **errors, "fastest": fastest(fp8)}


def worker(names: list[str]) -> None:
    for name in names:
        group, *rest = name.split(":")
        try:
            if group == "attention":
                row = run_attention(int(rest[0]), rest[1] == "1")
            elif group == "attention_fp8":
                row = run_attention_fp8(int(rest[0]), rest[1] == "1")
            elif group.startswith("gemm_fp8"):
                row = run_fp8(group, *(int(x) for x in rest[0].split("x")))
            else:
                row = run_gemm(group, int(rest[0]))
            row.update(case=name, group=group, status="ok")
        except Exception as error:  # report and go on with the next case
            row = {"case": name, "group": group, "status": f"failed: {type(error).__name__}: {error}"}
        print(ROW + json.dumps(row), flush=True)


# ------------------------------------------------------------------ driver side
def drive(names: list[str], timeout: float) -> list[dict]:
    """Run the cases in worker processes; a case past `timeout` seconds is recorded and skipped."""
    rows, left = [], list(names)

    def record(row: dict) -> None:
        rows.append(finish(row))
        left.remove(row["case"])
        print(summary(rows[-1]), flush=True)

    while left:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", ",".join(left)], stdout=subprocess.PIPE,
                                text=True, cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                proc.kill()
                proc.wait()
                record({"case": left[0], "group": left[0].split(":")[0],
                        "status": f"timeout: still running after {timeout:g} s"})
                break
            if line is None:  # the worker ended; a case it did not report killed it
                proc.wait()
                if left:
                    record({"case": left[0], "group": left[0].split(":")[0],
                            "status": f"failed: the worker exited with status {proc.returncode}"})
                break
            if line.startswith(ROW):
                record(json.loads(line[len(ROW):]))
            else:
                print(line, end="", flush=True)  # the worker's own output (tuning progress goes to stderr)
    return rows


PEERS = ("triton", "one_cta_per_tile", "scaled_mm")  # timed beside Phobos and the reference, where a case has them


def summary(row: dict) -> str:
    if row["status"] != "ok":
        return f"{row['case']}: {row['status']}"
    return (f"{row['case']}: Phobos {row['phobos_tflops']:.0f} TFLOP/s, {row['reference']} "
            f"{row['reference_tflops']:.0f}: ratio {row['ratio']:.2f} (target {TARGETS[row['group']]}); "
            + "".join(f"{peer} {row[peer + '_tflops']:.0f}; " for peer in PEERS if peer + "_tflops" in row)
            + f"errors {row['phobos_error']:.3g} vs {row['reference_error']:.3g}; {row['config']}; fastest timed: "
            + "; ".join(f"{name} {ms:.3f} ms" for name, ms in row.get("fastest", [])))


def finish(row: dict) -> dict:
    if row["status"] == "ok":
        row["phobos_tflops"] = row["flops"] / row["phobos_ms"] / 1e9
        row["reference_tflops"] = row["flops"] / row["reference_ms"] / 1e9
        row["ratio"] = row["reference_ms"] / row["phobos_ms"]
        row["target"] = TARGETS[row["group"]]
        row["meets_target"] = row["ratio"] >= row["target"]
        for peer in PEERS:
            if f"{peer}_ms" in row:
                row[f"{peer}_tflops"] = row["flops"] / row[f"{peer}_ms"] / 1e9
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="gemm_bf16,gemm_f16,tf32,tf32x3,attention,gemm_fp8,attention_fp8")
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one case may take, tuning included")
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        sys.stdout.reconfigure(line_buffering=True)
        worker(args.worker.split(","))
        return
    sys.path.insert(0, str(Path(__file__).parent))
    import torch
    if not torch.cuda.is_available():
        sys.exit("bench_gemm_tc.py needs a GPU (torch.cuda.is_available() is false)")
    names = cases(args.only.split(","), [int(s) for s in args.sizes.split(",")])
    rows = drive(names, args.timeout)
    from common import plot, save, table
    done = [r for r in rows if r["status"] == "ok"]
    print(table(done, [("case", "case", ""), ("reference", "reference", ""), ("phobos_tflops", "Phobos TFLOP/s", ".1f"),
                       ("reference_tflops", "ref TFLOP/s", ".1f"), ("ratio", "ratio", ".2f"), ("target", "target", ".2f"),
                       ("triton_tflops", "Triton TFLOP/s", ".1f"), ("one_cta_per_tile_tflops", "PERSISTENT=0", ".1f"),
                       ("scaled_mm_tflops", "_scaled_mm TFLOP/s", ".1f"),
                       ("phobos_error", "Phobos max err", ".3g"), ("reference_error", "ref max err", ".3g"),
                       ("scaled_mm_error", "_scaled_mm max err", ".3g"),
                       ("config", "configuration", "")]) if done else "no case finished")
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['case']}: {r['status']}")
    out = Path(args.out) / "gemm_tc.json"
    if out.exists():  # keep the rows of cases this run did not touch
        rows = [r for r in json.loads(out.read_text())["rows"] if r["case"] not in names] + rows
    path = save("gemm_tc", rows, {"targets": TARGETS, "attention_heads": HEADS, "attention_length": LENGTH},
                args.out)
    print(f"wrote {path}")
    plot("gemm_tc", [r for r in rows if r["status"] == "ok"], "case",
         [("phobos_tflops", "Phobos"), ("reference_tflops", "reference"), ("triton_tflops", "Triton"),
          ("scaled_mm_tflops", "torch._scaled_mm")], "TFLOP/s", args.out)


if __name__ == "__main__":
    main()
