# Causal single-head attention with the kernel of attention.phobos, checked against numpy.
#
#   python examples/attention.py [--size L] [--mode gpu|interpret|emulate]
#
# O = softmax(Q K^T / sqrt(D), causal) V for Q, K, V of shape [L, 64]; the kernel
# takes K transposed ([64, L]) so that both products read row-major tiles.
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, report, run, time_on_gpu

HEAD = 64


def reference(q, k, v):
    s = (q.astype(np.float64) @ k.T.astype(np.float64)) / math.sqrt(q.shape[1])
    s[np.triu_indices(len(q), 1)] = -np.inf
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


def main() -> int:
    args = arguments("causal attention with the kernel of attention.phobos, checked against numpy",
                     size={"type": int, "help": "sequence length L"})
    mode = pick_mode(args.mode)
    length = args.size or (2048 if mode == "gpu" else 130)
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((length, HEAD), dtype=np.float32) for _ in range(3))
    o = np.empty_like(q)
    attention = phobos.load(Path(__file__).with_name("attention.phobos"), mode=mode).attention
    attention(q, np.ascontiguousarray(k.T), v, o, scale=1 / math.sqrt(HEAD))
    print(f"attention: L = {length}, D = {HEAD}, mode = {mode}, configuration {attention.config}")
    ok = report("O - attention(Q, K, V)", o, reference(q, k, v), rtol=1e-4, atol=1e-5)
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(attention, [q, np.ascontiguousarray(k.T), v, o], scale=1 / math.sqrt(HEAD))
        print(f"time: {ms:.3f} ms per call, {2 * length * length * HEAD / ms / 1e9:.2f} TFLOP/s (causal)")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
