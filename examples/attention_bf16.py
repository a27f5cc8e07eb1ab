# Flash-attention forward in bf16 (the kernels of attention_bf16.phobos, on the tensor cores), causal
# and not, with grouped-query attention, ragged lengths and each option kernel, checked against numpy.
#
#   python examples/attention_bf16.py [--size B H HKV L S D] [--mode gpu|interpret|emulate]
#
# O = softmax(Q K^T / sqrt(D) [+ bias] [masked]) V for B x H heads of Q [B, H, L, D] against the
# HKV heads of K and V [B, HKV, S, D] in bf16 (as SDPA takes them; the first product reads K^T
# straight from K).  `reference` computes the same from the bf16 inputs in float64 (and the
# log-sum-exp of each row that attention_lse saves); the kernel's P is rounded to bf16 for the
# second product and O to bf16 on the way out, so they agree to about 2^-8 relative.
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import phobos
from phobos.constants import bf16_bits, bf16_values
from example_support import arguments, pick_mode, report, run, time_on_gpu

GPU_SIZE = (2, 8, 2, 2048 + 7, 2048 + 7, 128)  # B, H, HKV, L, S, D (the float64 reference runs on the CPU)
CPU_SIZE = (1, 4, 2, 100, 90, 64)
LOG2E = 1.4426950408889634


def visible_keys(length: int, keys: int, causal: bool = False, window: tuple[int, int] | None = None) -> np.ndarray:
    """[L, S]: whether query r sees key c (causal: c <= r; a window (left, right): r - left <= c <= r + right,
    a negative bound none)."""
    rows, cols = np.arange(length)[:, None], np.arange(keys)[None, :]
    seen = np.ones((length, keys), bool)
    if causal:
        seen &= cols <= rows
    if window is not None:
        left, right = window
        seen &= (cols >= rows - left) | (left < 0)
        seen &= (cols <= rows + right) | (right < 0)
    return seen


def scores(q, k, scale: float, causal: bool = False, bias=None, slopes=None, window=None) -> np.ndarray:
    """The scaled, biased, masked scores [B, H, L, S] in float64 (K's heads repeated for grouped queries)."""
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    s = q @ np.swapaxes(k, -1, -2) * scale
    if bias is not None:
        s = s + bias
    if slopes is not None:
        s = s - slopes[None, :, None, None] * np.abs(np.arange(q.shape[2])[:, None] - np.arange(k.shape[2]))
    return np.where(visible_keys(q.shape[2], k.shape[2], causal, window), s, -np.inf)


def softmax_rows(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P = softmax(s) along the last axis and the log-sum-exp of each row; a row of -inf alone gives
    P = 0 and +inf (as the kernels write)."""
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    seen = total > 0
    with np.errstate(divide="ignore"):
        return e / np.where(seen, total, 1.0), np.where(seen, m + np.log(total), np.inf)[..., 0]


def reference(q, k, v, scale: float, causal: bool = False, bias=None, slopes=None, window=None):
    """O and the log-sum-exp of each row, in float64, of float64 inputs."""
    p, lse = softmax_rows(scores(q, k, scale, causal, bias, slopes, window))
    return p @ np.repeat(v, q.shape[1] // v.shape[1], axis=1), lse


def random_bf16(rng, *shape) -> np.ndarray:
    return bf16_bits(rng.standard_normal(shape, dtype=np.float32))


def main() -> int:
    args = arguments("flash-attention forward in bf16 with the kernels of attention_bf16.phobos, checked "
                     "against numpy", size={"type": int, "nargs": 6, "metavar": ("B", "H", "HKV", "L", "S", "D")})
    mode = pick_mode(args.mode)
    batch, heads, kv_heads, length, keys, head = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    q = random_bf16(rng, batch, heads, length, head)
    k, v = random_bf16(rng, batch, kv_heads, keys, head), random_bf16(rng, batch, kv_heads, keys, head)
    exact = [bf16_values(x).astype(np.float64) for x in (q, k, v)]
    module = phobos.load(Path(__file__).with_name("attention_bf16.phobos"), mode=mode)
    scale = 1 / math.sqrt(head)
    bias = bf16_bits(rng.standard_normal((batch, 1, length, keys), dtype=np.float32))
    slopes = (2.0 ** -np.arange(1, heads + 1)).astype(np.float32)
    window = (length // 4, 0)
    cases = [("attention", {"causal": True}, {}, {"causal": True}),
             ("attention", {"causal": False}, {}, {}),
             ("attention_bias", {"causal": False}, {"bias": bias}, {"bias": bf16_values(bias).astype(np.float64)}),
             ("attention_alibi", {"causal": True}, {"slopes": slopes}, {"causal": True, "slopes": slopes}),
             ("attention_window", {"left": window[0], "right": window[1]}, {}, {"window": window})]
    ok = True
    print(f"B, H, HKV, L, S, D = {batch}, {heads}, {kv_heads}, {length}, {keys}, {head}, mode = {mode}")
    for name, flags, extra, options in cases:
        kernel = getattr(module, name)
        o = np.zeros_like(q)
        arrays = [q, k, v, *extra.values(), o]
        kernel(*arrays, scale=scale, **flags)
        print(f"{name} {flags}: configuration {kernel.config}")
        expected, _ = reference(*exact, scale, **options)
        ok &= report("  O - reference", bf16_values(o).astype(np.float64), expected, rtol=2.0 ** -6,
                     atol=2.0 ** -8)
        if mode == "gpu" and ok and not args.check_only:
            ms = time_on_gpu(kernel, arrays, scale=scale, **flags)
            flops = 4 * batch * heads * length * keys * head / (2 if flags.get("causal") else 1)
            print(f"  time: {ms:.3f} ms per call, {flops / ms / 1e9:.2f} TFLOP/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
