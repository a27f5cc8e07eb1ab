"""Attention forward and backward in bf16 on the GPU: Phobos's kernels beside torch's SDPA (flash and cuDNN).

    python benchmarks/bench_attention.py [--only fwd,bwd] [--lengths 4096,16384] [--heads 64,128,256]
                                         [--samples 5] [--out bench_results]

Cases: forward and backward, L = 4096 and 16384 (queries = keys), head size d = 64, 128, 256, causal and
not; B x H as FlashAttention's benchmarks take them, 16384 tokens and a model width of 2048 (B = 16384 / L,
H = 2048 / d), so every case does about the same work.  In each case, in one process and on the same
tensors:

  Phobos     forward: attention (examples/attention_bf16.phobos) through the call, autotuned by its
             first call (not timed).  backward: attention_backward_delta, _dkdv and _dq
             (examples/attention_bf16_backward.phobos) on the O and log-sum-exp attention_lse saved
  flash      torch.nn.functional.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION)
  cuDNN      the same under sdpa_kernel(CUDNN_ATTENTION)
  (backward: torch.autograd.grad of each SDPA's output, whose forward ran once, outside the timing)

Samples alternate between the three (common.timed_ms), so all see the GPU in the same clock and power
state.  TFLOP/s count 4 B H L^2 d for the forward and 2.5 times that for the backward (five products),
half of each when causal.  Errors: max |result - float32 reference| over the first batch and
CHECKED_HEADS heads (forward: O; backward: the largest of dQ, dK, dV), for each of the three.  A
backend that cannot run a case (SDPA refuses a head size, say) is reported as such and the others
still run.  Prints a table, writes OUT/attention.json and OUT/attention.png.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import phobos
from common import plot, save, table, timed_ms

EXAMPLES = Path(__file__).parent.parent / "examples"
TOKENS, WIDTH = 16384, 2048  # B x L and H x d of every case
CHECKED_HEADS = 2
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def reference(q, k, v, causal: bool, do=None):
    """O (or dQ, dK, dV for dO) of the first batch and CHECKED_HEADS heads, in float32, by the definition."""
    q, k, v = (x[:1, :CHECKED_HEADS].float().requires_grad_(do is not None) for x in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -math.inf)
    o = torch.softmax(s, dim=-1) @ v
    if do is None:
        return [o.detach()]
    return list(torch.autograd.grad(o, (q, k, v), do[:1, :CHECKED_HEADS].float()))


def error(got: list, want: list) -> float:
    return max((g[:1, :CHECKED_HEADS].float() - w).abs().max().item() for g, w in zip(got, want))


class Phobos:
    """The example kernels, loaded once; forward(q, k, v, causal) -> O, backward(...) -> dQ, dK, dV."""

    def __init__(self):
        self.forward_kernels = phobos.load(EXAMPLES / "attention_bf16.phobos")
        self.backward_kernels = phobos.load(EXAMPLES / "attention_bf16_backward.phobos")

    def forward(self, q, k, v, causal: bool, o=None):
        o = torch.empty_like(q) if o is None else o
        self.forward_kernels.attention(q, k, v, o, scale=1 / math.sqrt(q.shape[-1]), causal=causal)
        return o

    def saved(self, q, k, v, causal: bool):
        """O and the log-sum-exp, as the forward of a training step saves them."""
        o, lse = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)
        self.forward_kernels.attention_lse(q, k, v, o, lse, scale=1 / math.sqrt(q.shape[-1]), causal=causal)
        return o, lse

    def backward(self, q, k, v, do, o, lse, causal: bool, grads=None):
        scale = 1 / math.sqrt(q.shape[-1])
        dq, dk, dv = grads or (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
        delta = torch.empty_like(lse)
        kernels = self.backward_kernels
        kernels.attention_backward_delta(o, do, delta)
        kernels.attention_backward_dkdv(q, k, v, do, lse, delta, dk, dv, scale=scale, causal=causal)
        kernels.attention_backward_dq(q, k, v, do, lse, delta, dq, scale=scale, causal=causal)
        return [dq, dk, dv]

    def configurations(self, direction: str) -> dict:
        """The configurations the last calls of the forward ('fwd') or the backward's kernels ran."""
        kernels = [(self.forward_kernels, "attention")] if direction == "fwd" else [
            (self.forward_kernels, "attention_lse"), (self.backward_kernels, "attention_backward_dkdv"),
            (self.backward_kernels, "attention_backward_dq")]
        return {name: getattr(module, name).config for module, name in kernels
                if getattr(module, name).config is not None}


def sdpa_forward(backend: str, q, k, v, causal: bool):
    with sdpa_kernel(BACKENDS[backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def run_case(ours: Phobos, direction: str, length: int, head: int, causal: bool, samples: int) -> dict:
    batch, heads = TOKENS // length, WIDTH // head
    q, k, v, do = (torch.randn(batch, heads, length, head, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    flops = 4 * batch * heads * length * length * head * (2.5 if direction == "bwd" else 1) / (2 if causal else 1)
    row = {"case": f"{direction} L={length} d={head}{' causal' if causal else ''}", "direction": direction,
           "batch": batch, "heads": heads, "length": length, "head": head, "causal": causal, "flops": flops}
    timed, errors = {}, {}
    want = reference(q, k, v, causal, do if direction == "bwd" else None)
    try:
        started = time.perf_counter()
        if direction == "fwd":
            o = ours.forward(q, k, v, causal)  # tunes
            errors["phobos"] = error([o], want)
            timed["phobos"] = lambda: ours.forward(q, k, v, causal, o)
        else:
            o, lse = ours.saved(q, k, v, causal)
            grads = ours.backward(q, k, v, do, o, lse, causal)  # tunes
            errors["phobos"] = error(grads, want)
            timed["phobos"] = lambda: ours.backward(q, k, v, do, o, lse, causal, grads)
        row["tuning_s"] = time.perf_counter() - started
    except phobos.PhobosError as failure:  # no configuration serves d = 256 backward, say
        row["phobos_status"] = str(failure).splitlines()[0][:160]
    for backend in BACKENDS:
        try:
            if direction == "fwd":
                errors[backend] = error([sdpa_forward(backend, q, k, v, causal)], want)
                timed[backend] = lambda backend=backend: sdpa_forward(backend, q, k, v, causal)
            else:
                leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                out = sdpa_forward(backend, *leaves, causal)
                errors[backend] = error(list(torch.autograd.grad(out, leaves, do, retain_graph=True)), want)
                timed[backend] = lambda out=out, leaves=leaves: torch.autograd.grad(out, leaves, do,
                                                                                   retain_graph=True)
        except RuntimeError as failure:  # this backend does not run this case
            row[f"{backend}_status"] = str(failure).splitlines()[0][:160]
    for name, ms in zip(timed, timed_ms(*timed.values(), samples=samples)):
        row[f"{name}_ms"], row[f"{name}_tflops"] = ms, flops / ms / 1e9
    for name, value in errors.items():
        row[f"{name}_error"] = value
    for backend in BACKENDS:
        if f"{backend}_ms" in row and "phobos_ms" in row:
            row[f"vs_{backend}"] = row[f"{backend}_ms"] / row["phobos_ms"]
    row["config"] = ours.configurations(direction)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="fwd,bwd")
    parser.add_argument("--lengths", default="4096,16384")
    parser.add_argument("--heads", default="64,128,256", help="head sizes d")
    parser.add_argument("--samples", type=int, default=5, help="timed samples of each, alternating")
    parser.add_argument("--out", default="bench_results")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_attention.py needs a GPU (torch.cuda.is_available() is false)")
    ours = Phobos()
    rows = []
    for direction in args.only.split(","):
        for length in map(int, args.lengths.split(",")):
            for head in map(int, args.heads.split(",")):
                for causal in (False, True):
                    row = run_case(ours, direction, length, head, causal, args.samples)
                    rows.append(row)
                    print(summary(row), flush=True)
    done = [r for r in rows if any(f"{name}_ms" in r for name in ("phobos", *BACKENDS))]
    print(table(done, [("case", "case", ""), ("phobos_tflops", "Phobos TFLOP/s", ".0f"),
                       ("flash_tflops", "SDPA flash", ".0f"), ("cudnn_tflops", "SDPA cuDNN", ".0f"),
                       ("vs_flash", "vs flash", ".2f"), ("vs_cudnn", "vs cuDNN", ".2f"),
                       ("phobos_error", "Phobos err", ".2g"), ("flash_error", "flash err", ".2g"),
                       ("cudnn_error", "cuDNN err", ".2g")]) if done else "no case finished")
    path = save("attention", rows, {"tokens": TOKENS, "width": WIDTH, "checked_heads": CHECKED_HEADS}, args.out)
    print(f"wrote {path}")
    plot("attention", done, "case", [("phobos_tflops", "Phobos"), ("flash_tflops", "SDPA flash"),
                                     ("cudnn_tflops", "SDPA cuDNN")], "TFLOP/s", args.out)


def summary(row: dict) -> str:
    parts = []
    for name in ("phobos", *BACKENDS):
        if f"{name}_ms" in row:
            ratio = f", Phobos / {name} {row[f'vs_{name}']:.2f}" if f"vs_{name}" in row else ""
            parts.append(f"{name} {row[f'{name}_tflops']:.0f} TFLOP/s (error {row[f'{name}_error']:.2g}{ratio})")
        else:
            parts.append(f"{name}: {row.get(f'{name}_status', 'not run')}")
    tuning = f"; tuning {row['tuning_s']:.1f} s" if "tuning_s" in row else ""
    return f"{row['case']}: " + "; ".join(parts) + tuning + f"; {row['config']}"


if __name__ == "__main__":
    main()
