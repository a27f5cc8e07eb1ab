# Flash-attention forward in FP8 (the kernel of attention_fp8.phobos, on the tensor cores), causal and not,
# checked against a float64 reference of the dequantised inputs.
#
#   python examples/attention_fp8.py [--size B H HKV L S D] [--mode gpu|interpret|emulate]
#
# Q [B, H, L, D], K and V [B, HKV, S, D] are quantised to e4m3 with a scale each (their largest magnitude
# maps to 448, the largest e4m3); the kernel takes V transposed, [B, HKV, D, S] (8-bit products read both
# operands K-major).  numpy computes O = softmax(Q K^T / sqrt(D) [causal]) V from the dequantised inputs
# in float64 (attention_bf16.py's reference); the kernel's P is quantised to e4m3 for the second product
# (3 fraction bits: at most 2^-4 relative per element, so an error of at most 2^-4 (P |V|) in O, less where
# the signs of V average it out) and O rounded to bf16.
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import phobos
from phobos.constants import bf16_values, f8_bits, f8_values, largest_float
from phobos.types import DType
from example_support import arguments, pick_mode, report, run, time_on_gpu
from attention_bf16 import reference

GPU_SIZE = (2, 16, 4, 2048 + 16, 2048 + 16, 128)  # B, H, HKV, L, S, D (the float64 reference runs on the CPU)
CPU_SIZE = (1, 2, 1, 100, 90, 64)
E4M3 = DType.F8E4M3


def quantise(x: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """e4m3 codes of x / scale and the scale (x's largest magnitude / 448)."""
    scale = np.float32(np.abs(x).max() / largest_float(E4M3))
    return f8_bits(x / scale, E4M3), scale


def main() -> int:
    args = arguments("flash-attention forward in FP8 with the kernel of attention_fp8.phobos, checked "
                     "against float64", size={"type": int, "nargs": 6, "metavar": ("B", "H", "HKV", "L", "S", "D")})
    mode = pick_mode(args.mode)
    batch, heads, kv_heads, length, keys, head = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    rng = np.random.default_rng()
    (q, sq), (k, sk), (v, sv) = (quantise(rng.standard_normal(shape, dtype=np.float32)) for shape in
                                 ((batch, heads, length, head), (batch, kv_heads, keys, head),
                                  (batch, kv_heads, keys, head)))
    vt = np.ascontiguousarray(np.swapaxes(v, 2, 3))
    scale = np.float32(sq * sk / math.sqrt(head))
    dq, dk, dv = (f8_values(x, E4M3).astype(np.float64) * s for x, s in ((q, sq), (k, sk), (v, sv)))
    attention = phobos.load(Path(__file__).with_name("attention_fp8.phobos"), mode=mode).attention_fp8
    ok = True
    print(f"B, H, HKV, L, S, D = {batch}, {heads}, {kv_heads}, {length}, {keys}, {head}, mode = {mode}")
    for causal in (True, False):
        o = np.zeros((batch, heads, length, head), np.uint16)  # bf16 bit patterns
        attention(q, k, vt, o, scale=scale, v_scale=sv, causal=causal)
        print(f"attention_fp8 causal={causal}: configuration {attention.config}")
        expected, _ = reference(dq, dk, dv, 1 / math.sqrt(head), causal)
        bound = 2.0 ** -4 * float(reference(dq, dk, np.abs(dv), 1 / math.sqrt(head), causal)[0].max())
        ok &= report("  O - reference", bf16_values(o).astype(np.float64), expected, rtol=2.0 ** -8, atol=bound)
        if mode == "gpu" and ok and not args.check_only:
            ms = time_on_gpu(attention, [q, k, vt, o], scale=scale, v_scale=sv, causal=causal)
            flops = 4 * batch * heads * length * keys * head / (2 if causal else 1)
            print(f"  time: {ms:.3f} ms per call, {flops / ms / 1e9:.2f} TFLOP/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
