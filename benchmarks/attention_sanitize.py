"""Every attention kernel once each on the GPU, at ragged lengths, for compute-sanitizer.

    compute-sanitizer --tool memcheck  python benchmarks/attention_sanitize.py
    compute-sanitizer --tool racecheck python benchmarks/attention_sanitize.py
    python benchmarks/attention_sanitize.py emulate     # the same on the CPU, small (L = 200, d = 64)

The kernels of examples/attention_bf16.phobos (attention, attention_lse, attention_bias,
attention_alibi, attention_window) and examples/attention_bf16_backward.phobos (delta, dK/dV, dQ) run
in fixed configurations (no autotuning: every launch under the sanitizer is slow), one of each kind
the tuner picks from per head size, at L = 200 and 1000 queries against S = L + 37 keys (so the
masked edges of both run), two batches of two query heads sharing one key/value head (grouped-query
attention), head sizes 64, 128 and 256 (the backward: 64 and 128), causal and not; each result is
checked against the float64 references of examples/attention_bf16.py and attention_bf16_backward.py.
Prints one line per run and exits non-zero if any result is wrong.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

import phobos
from phobos.constants import bf16_bits, bf16_values

EXAMPLES = Path(__file__).parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from attention_bf16 import random_bf16, reference  # noqa: E402
from attention_bf16_backward import reference_backward  # noqa: E402

# per head size: the forward's configurations (small blocks several to an SM, large blocks alone)
FORWARD = {64: [dict(BM=64, BN=64, WARPS=4, STAGES=2, CTAS_PER_SM=4), dict(BM=128, BN=128, WARPS=8, STAGES=3)],
           128: [dict(BM=128, BN=128, WARPS=8, STAGES=2, CTAS_PER_SM=1), dict(BM=64, BN=64, WARPS=4, STAGES=3)],
           256: [dict(BM=128, BN=32, WARPS=8, STAGES=2, CTAS_PER_SM=1)]}
DKDV = {64: dict(BN=64, BM=64, WARPS=4, STAGES=2, CTAS_PER_SM=2), 128: dict(BN=128, BM=32, WARPS=8, STAGES=3,
                                                                           CTAS_PER_SM=1)}
DQ = {64: dict(BM=64, BN=64, WARPS=4, STAGES=2, CTAS_PER_SM=2), 128: dict(BM=128, BN=64, WARPS=8, STAGES=3,
                                                                         CTAS_PER_SM=1)}
BATCH, HEADS, KV_HEADS, EXTRA_KEYS = 2, 2, 1, 37


def check(name: str, got: np.ndarray, want: np.ndarray, tolerance: float) -> bool:
    """|got - want| within tolerance x (1 + |want|) where want is finite; infinities equal."""
    finite = np.isfinite(want)
    error = float(np.max(np.abs(got[finite] - want[finite]), initial=0.0))
    ok = bool(np.all(np.abs(got[finite] - want[finite]) <= tolerance * (1 + np.abs(want[finite])))
              and np.array_equal(got[~finite], want[~finite]))
    print(f"{name}: max |error| {error:.3g}: {'ok' if ok else 'WRONG'}", flush=True)
    return ok


def exact(x: np.ndarray) -> np.ndarray:
    return bf16_values(x).astype(np.float64)


def forward_runs(module, rng, length: int, head: int, causal: bool) -> bool:
    """Every forward kernel in each configuration of this head size."""
    keys = length + EXTRA_KEYS
    q = random_bf16(rng, BATCH, HEADS, length, head)
    k, v = random_bf16(rng, BATCH, KV_HEADS, keys, head), random_bf16(rng, BATCH, KV_HEADS, keys, head)
    scale = 1 / math.sqrt(head)
    bias = random_bf16(rng, 1, HEADS, length, keys)
    bias[:, :, length // 3] = bf16_bits(np.float32(-np.inf))  # a row that sees no key
    slopes = (2.0 ** -np.arange(1, HEADS + 1)).astype(np.float32)
    window = (length // 5, -1 if not causal else 0)
    runs = [("attention", [], {"causal": causal}, {"causal": causal}),
            ("attention_lse", [], {"causal": causal}, {"causal": causal}),
            ("attention_bias", [bias], {"causal": causal}, {"causal": causal, "bias": exact(bias)}),
            ("attention_alibi", [slopes], {"causal": causal}, {"causal": causal, "slopes": slopes.astype(np.float64)}),
            ("attention_window", [], {"left": window[0], "right": window[1]}, {"window": window})]
    ok = True
    for name, extra, flags, options in runs:
        want, want_lse = reference(exact(q), exact(k), exact(v), scale, **options)
        for config in FORWARD[head]:
            o = np.full_like(q, bf16_bits(np.float32(np.nan)))
            lse = [np.full(q.shape[:3], np.nan, np.float32)] if name == "attention_lse" else []
            getattr(module, name).configure(**config)(q, k, v, *extra, o, *lse, scale=scale, **flags)
            label = f"{name} L={length} d={head} {flags} {config}"
            ok &= check(label, exact(o), want, 2 ** -6)
            if lse:
                ok &= check(f"{label} log-sum-exp", lse[0].astype(np.float64), want_lse, 1e-5)
    return ok


def backward_runs(forward, kernels, rng, length: int, head: int, causal: bool) -> bool:
    """The three backward kernels after attention_lse, in this head size's configurations."""
    keys = length + EXTRA_KEYS
    q, dout = random_bf16(rng, BATCH, HEADS, length, head), random_bf16(rng, BATCH, HEADS, length, head)
    k, v = random_bf16(rng, BATCH, KV_HEADS, keys, head), random_bf16(rng, BATCH, KV_HEADS, keys, head)
    scale = 1 / math.sqrt(head)
    o, dq, dk, dv = (np.full_like(x, bf16_bits(np.float32(np.nan))) for x in (q, q, k, v))
    lse, delta = (np.full(q.shape[:3], np.nan, np.float32) for _ in range(2))
    forward.attention_lse.configure(**FORWARD[head][0])(q, k, v, o, lse, scale=scale, causal=causal)
    kernels.attention_backward_delta(o, dout, delta)
    ok = check(f"attention_backward_delta L={length} d={head}", delta.astype(np.float64),
               (exact(o) * exact(dout)).sum(axis=-1), 1e-5)
    kernels.attention_backward_dkdv.configure(**DKDV[head])(q, k, v, dout, lse, delta, dk, dv, scale=scale,
                                                            causal=causal)
    kernels.attention_backward_dq.configure(**DQ[head])(q, k, v, dout, lse, delta, dq, scale=scale, causal=causal)
    expected = reference_backward(exact(q), exact(k), exact(v), exact(dout), scale, causal)
    for name, got, want in zip(("attention_backward_dq dQ", "attention_backward_dkdv dK", "attention_backward_dkdv dV"),
                               (dq, dk, dv), expected):
        ok &= check(f"{name} L={length} d={head} causal={causal}", exact(got) / np.abs(want).max(),
                    want / np.abs(want).max(), 2 ** -6)
    return ok


def main(mode: str) -> int:
    rng = np.random.default_rng(0)
    forward = phobos.load(EXAMPLES / "attention_bf16.phobos", mode=mode)
    kernels = phobos.load(EXAMPLES / "attention_bf16_backward.phobos", mode=mode)
    lengths, heads = ((200, 1000), (64, 128, 256)) if mode == "gpu" else ((200,), (64,))
    ok = True
    for length in lengths:
        for head in heads:
            for causal in (False, True):
                ok &= forward_runs(forward, rng, length, head, causal)
                if head in DKDV:
                    ok &= backward_runs(forward, kernels, rng, length, head, causal)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu"))
