# Flash-attention backward in bf16 (the kernels of attention_bf16_backward.phobos after attention_lse of
# attention_bf16.phobos), causal and not, with grouped-query attention and ragged lengths, checked
# against numpy.
#
#   python examples/attention_bf16_backward.py [--size B H HKV L S D] [--mode gpu|interpret|emulate]
#
# `backward` runs attention_lse, then the three kernels (delta, dK/dV, dQ) on its O and log-sum-exp;
# `reference_backward` computes dQ, dK, dV in float64 from the bf16 inputs.  The kernels round P and
# dS to bf16 for their products and the gradients to bf16 on the way out: they agree to about 2^-7 of
# each gradient's largest element.
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import phobos
from phobos.constants import bf16_values
from example_support import arguments, pick_mode, report, run, time_on_gpu
from attention_bf16 import random_bf16, scores, softmax_rows

GPU_SIZE = (2, 8, 2, 2048 + 7, 2048 + 7, 128)  # B, H, HKV, L, S, D
CPU_SIZE = (1, 4, 2, 100, 90, 64)
HERE = Path(__file__).parent


def reference_backward(q, k, v, dout, scale: float, causal: bool = False):
    """dQ, dK, dV in float64 of float64 inputs (dK and dV of a key/value head summed over its query heads)."""
    group = q.shape[1] // k.shape[1]
    k_rep, v_rep = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    p, _ = softmax_rows(scores(q, k, scale, causal))
    o = p @ v_rep
    ds = p * (dout @ np.swapaxes(v_rep, -1, -2) - (dout * o).sum(axis=-1, keepdims=True))

    def per_kv_head(x):
        return x.reshape(x.shape[0], k.shape[1], group, *x.shape[2:]).sum(axis=2)

    return (ds @ k_rep * scale, per_kv_head(np.swapaxes(ds, -1, -2) @ q * scale),
            per_kv_head(np.swapaxes(p, -1, -2) @ dout))


def backward(forward, kernels, q, k, v, dout, o, lse, delta, dq, dk, dv, scale: float, causal: bool) -> None:
    """O and the log-sum-exp by attention_lse, then dQ, dK, dV by the three backward kernels, in place."""
    forward.attention_lse(q, k, v, o, lse, scale=scale, causal=causal)
    kernels.attention_backward_delta(o, dout, delta)
    kernels.attention_backward_dkdv(q, k, v, dout, lse, delta, dk, dv, scale=scale, causal=causal)
    kernels.attention_backward_dq(q, k, v, dout, lse, delta, dq, scale=scale, causal=causal)


def main() -> int:
    args = arguments("flash-attention backward in bf16 with the kernels of attention_bf16_backward.phobos, "
                     "checked against numpy",
                     size={"type": int, "nargs": 6, "metavar": ("B", "H", "HKV", "L", "S", "D")})
    mode = pick_mode(args.mode)
    batch, heads, kv_heads, length, keys, head = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    q, dout = random_bf16(rng, batch, heads, length, head), random_bf16(rng, batch, heads, length, head)
    k, v = random_bf16(rng, batch, kv_heads, keys, head), random_bf16(rng, batch, kv_heads, keys, head)
    forward = phobos.load(HERE / "attention_bf16.phobos", mode=mode)
    kernels = phobos.load(HERE / "attention_bf16_backward.phobos", mode=mode)
    scale = 1 / math.sqrt(head)
    print(f"B, H, HKV, L, S, D = {batch}, {heads}, {kv_heads}, {length}, {keys}, {head}, mode = {mode}")
    ok = True
    o, dq, dk, dv = np.zeros_like(q), np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    lse, delta = np.zeros((batch, heads, length), np.float32), np.zeros((batch, heads, length), np.float32)
    arrays = [q, k, v, dout, o, lse, delta, dq, dk, dv]
    for causal in (True, False):
        backward(forward, kernels, *arrays, scale, causal)
        print(f"causal = {causal}: dK/dV {kernels.attention_backward_dkdv.config}, "
              f"dQ {kernels.attention_backward_dq.config}")
        expected = reference_backward(*(bf16_values(x).astype(np.float64) for x in (q, k, v, dout)), scale, causal)
        for name, got, want in zip(("dQ", "dK", "dV"), (dq, dk, dv), expected):
            ok &= report(f"  {name} - reference", bf16_values(got).astype(np.float64), want, rtol=2.0 ** -6,
                         atol=2.0 ** -7 * float(np.abs(want).max()))
        if mode == "gpu" and ok and not args.check_only:
            ms = time_on_gpu(lambda *tensors: backward(forward, kernels, *tensors, scale, causal), arrays)
            flops = 10 * batch * heads * length * keys * head / (2 if causal else 1)
            print(f"  time: {ms:.3f} ms per forward + backward, {flops / ms / 1e9:.2f} TFLOP/s (5 products)")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
