# The attention examples' kernels as test cases: for each kernel of examples/attention_bf16.phobos and
# examples/attention_bf16_backward.phobos, an argument maker from sizes {B, H, HKV, L, S, D} and its
# float64 reference, taken from the example scripts (`reference`, `reference_backward`), so that
# test_kernels, test_soundness and test_attention check every kernel against one definition.
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from phobos.constants import bf16_bits, bf16_values

EXAMPLES = Path(__file__).parent.parent / "examples"
if str(EXAMPLES) not in sys.path:  # the example scripts import their neighbours by name
    sys.path.insert(0, str(EXAMPLES))

from attention_bf16 import reference  # noqa: E402
from attention_bf16_backward import reference_backward  # noqa: E402

WINDOW = (7, 3)  # attention_window's (left, right) in the cases


def exact(x: np.ndarray) -> np.ndarray:
    return bf16_values(x).astype(np.float64)


def inputs(rng, s: dict) -> tuple[np.ndarray, ...]:
    """Q, K, V and dO in bf16 bits for the sizes s."""
    def draw(heads, length):
        return bf16_bits(rng.standard_normal((s["B"], heads, length, s["D"])).astype(np.float32))
    return draw(s["H"], s["L"]), draw(s["HKV"], s["S"]), draw(s["HKV"], s["S"]), draw(s["H"], s["L"])


def unwritten(like: np.ndarray) -> np.ndarray:
    return np.full(like.shape, bf16_bits(np.float32(np.nan)), np.uint16)


def case_forward(kernel: str, s: dict, causal: bool = True):
    """Arguments of a forward kernel (attention, attention_lse, attention_bias, attention_alibi,
    attention_window) and its outputs' references: rng -> (args, {argument index: expected})."""
    def make(rng):
        q, k, v, _ = inputs(rng, s)
        scale = 1 / math.sqrt(s["D"])
        o = unwritten(q)
        options, extra, flags = {}, [], [causal]
        if kernel == "attention_bias":  # broadcast over the batch; one row that sees no key
            bias = bf16_bits(rng.standard_normal((1, s["H"], s["L"], s["S"])).astype(np.float32))
            bias[0, 0, s["L"] // 2] = bf16_bits(np.float32(-np.inf))
            extra, options = [bias], {"bias": exact(bias)}
        elif kernel == "attention_alibi":
            slopes = (2.0 ** -np.arange(1, s["H"] + 1)).astype(np.float32)
            extra, options = [slopes], {"slopes": slopes.astype(np.float64)}
        elif kernel == "attention_window":
            flags, options = list(WINDOW), {"window": WINDOW}
        want, lse = reference(exact(q), exact(k), exact(v), scale, causal and kernel != "attention_window",
                              **options)
        args = [q, k, v, *extra, o]
        expected = {len(args) - 1: ("bf16", want)}
        if kernel == "attention_lse":
            args.append(np.full(q.shape[:3], np.nan, np.float32))
            expected[len(args) - 1] = lse
        return args + [scale, *flags], expected
    return make


def case_backward(kernel: str, s: dict, causal: bool = True):
    """Arguments of a backward kernel (attention_backward_delta, _dkdv, _dq), its inputs O, LSE and delta
    from the float64 forward, and its outputs' references."""
    def make(rng):
        q, k, v, dout = inputs(rng, s)
        scale = 1 / math.sqrt(s["D"])
        o, lse = reference(exact(q), exact(k), exact(v), scale, causal)
        o = bf16_bits(o.astype(np.float32))
        delta = (exact(o) * exact(dout)).sum(axis=-1)
        if kernel == "attention_backward_delta":
            return [o, dout, np.full(q.shape[:3], np.nan, np.float32)], {2: delta}
        dq, dk, dv = reference_backward(exact(q), exact(k), exact(v), exact(dout), scale, causal)
        args = [q, k, v, dout, lse.astype(np.float32), delta.astype(np.float32)]
        if kernel == "attention_backward_dkdv":
            return args + [unwritten(k), unwritten(v), scale, causal], {6: ("bf16", dk), 7: ("bf16", dv)}
        return args + [unwritten(q), scale, causal], {6: ("bf16", dq)}
    return make


def case_attention_bf16(kernel: str, s: dict, causal: bool = True):
    """The case of any attention kernel, by its name."""
    return (case_backward if kernel.startswith("attention_backward") else case_forward)(kernel, s, causal)
