# Flash-attention forward in bf16 (the kernel of attention_bf16.phobos, on the tensor cores),
# causal and not, checked against numpy.
#
#   python examples/attention_bf16.py [--size H L D] [--mode gpu|interpret|emulate]
#
# O = softmax(Q K^T / sqrt(D) [causal]) V for H heads of Q, K, V of shape [L, D] in bf16 (as SDPA takes
# them; the first product reads K^T straight from K).  numpy computes
# the same from the bf16 inputs in float64; the kernel's P is rounded to bf16 for the second
# product and O to bf16 on the way out, so they agree to about 2^-8 relative.
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import phobos
from phobos.constants import bf16_bits, bf16_values
from example_support import arguments, pick_mode, report, run, time_on_gpu

GPU_SIZE = (4, 2048 + 7, 128)  # heads, sequence length, head size (the float64 reference runs on the CPU)
CPU_SIZE = (2, 100, 64)


def reference(q, k, v, causal: bool):
    s = q @ np.swapaxes(k, 1, 2) / math.sqrt(q.shape[2])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return (p / p.sum(axis=2, keepdims=True)) @ v


def main() -> int:
    args = arguments("flash-attention forward in bf16 with the kernel of attention_bf16.phobos, checked "
                     "against numpy", size={"type": int, "nargs": 3, "metavar": ("H", "L", "D")})
    mode = pick_mode(args.mode)
    heads, length, head = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    q, k, v = (bf16_bits(rng.standard_normal((heads, length, head), dtype=np.float32)) for _ in range(3))
    attention = phobos.load(Path(__file__).with_name("attention_bf16.phobos"), mode=mode).attention
    ok = True
    for causal in (True, False):
        o = np.zeros_like(q)
        attention(q, k, v, o, scale=1 / math.sqrt(head), causal=causal)
        print(f"attention: H, L, D = {heads}, {length}, {head}, causal = {causal}, mode = {mode}, "
              f"configuration {attention.config}")
        expected = reference(*(bf16_values(x).astype(np.float64) for x in (q, k, v)), causal)
        ok &= report("O - attention(Q, K, V)", bf16_values(o).astype(np.float64), expected, rtol=2.0 ** -6,
                     atol=2.0 ** -8)
        if mode == "gpu" and ok and not args.check_only:
            ms = time_on_gpu(attention, [q, k, v, o], scale=1 / math.sqrt(head), causal=causal)
            flops = 4 * heads * length * length * head / (2 if causal else 1)
            print(f"time: {ms:.3f} ms per call, {flops / ms / 1e9:.2f} TFLOP/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
