"""The tensor-core examples once each on the GPU, small and ragged, for compute-sanitizer.

    compute-sanitizer --tool memcheck  python benchmarks/tc_sanitize.py
    compute-sanitizer --tool racecheck python benchmarks/tc_sanitize.py
    python benchmarks/tc_sanitize.py emulate        # the same on the CPU (sm_90's code: no wgmma)

Each kernel runs in fixed configurations (no autotuning: every launch under the sanitizer is
slow), covering mma.sync (TILE_K 32), wgmma (TILE_K 64, sm_90a only; on the GPU also with TMA
copies, from torch tensors whose rows are 16-byte multiples apart, and two consumer teams: PINGPONG=1), TF32 (on the GPU also with TMA) and 3xTF32,
on sizes that are not multiples of any tile (so the masked edges run too), each checked against
float64 NumPy; then the FP8 examples (gemm_fp8, gemm_fp8_blockwise: by cp.async, and on the GPU also by
TMA into persistent CTAs; attention_fp8), against float64 of their dequantised inputs.  Prints one line
per run and exits non-zero if any result is wrong.  The bf16 attention kernels have a script of their
own, benchmarks/attention_sanitize.py.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

import phobos
from phobos.constants import bf16_bits, bf16_values, f8_bits, f8_values
from phobos.types import DType

EXAMPLES = Path(__file__).parent.parent / "examples"
GEMM_CONFIGS = [dict(TILE_M=128, TILE_N=128, TILE_K=32, WARPS=8, STAGES=4),
                dict(TILE_M=128, TILE_N=256, TILE_K=64, WARPS=8, STAGES=4),
                dict(TILE_M=64, TILE_N=128, TILE_K=64, WARPS=4, STAGES=2)]


def check(name: str, got, want, rtol: float, atol: float) -> bool:
    error = float(np.max(np.abs(got - want)))
    ok = bool(np.allclose(got, want, rtol=rtol, atol=atol))
    print(f"{name}: max |error| {error:.3g}: {'ok' if ok else 'WRONG'}", flush=True)
    return ok


def main(mode: str) -> int:
    rng = np.random.default_rng(0)
    ok = True
    gemms = phobos.load(EXAMPLES / "gemm_bf16.phobos", mode=mode)
    m, k, n = 200 + 3, 150 + 5, 300 + 1
    a, b = bf16_bits(rng.standard_normal((m, k), dtype=np.float32)), bf16_bits(rng.standard_normal((k, n),
                                                                                                     np.float32))
    exact = bf16_values(a).astype(np.float64) @ bf16_values(b)
    for config in GEMM_CONFIGS:
        c = np.zeros((m, n), np.uint16)
        fn = gemms.gemm_bf16.configure(**config)
        fn(a, b, c)
        ok &= check(f"gemm_bf16 {config} ({fn.compiled.notes[0].split(': ', 2)[-1]})", bf16_values(c), exact,
                    2 ** -7, 1e-3)
    if mode == "gpu":  # device tensors whose rows are 16-byte multiples apart: the K loop copies by TMA
        import torch
        mt, kt, nt = m, k + 5, n + 3  # 160 and 304 elements a row
        at, bt = (torch.randn(*shape, device="cuda").to(torch.bfloat16) for shape in ((mt, kt), (kt, nt)))
        exact_t = (at.double() @ bt.double()).cpu().numpy()
        for config in (dict(TILE_M=128, TILE_N=256, TILE_K=64, WARPS=8, STAGES=4),
                       dict(TILE_M=256, TILE_N=128, TILE_K=64, WARPS=8, STAGES=3),
                       dict(TILE_M=128, TILE_N=128, TILE_K=64, WARPS=4, STAGES=4, PINGPONG=1)):
            ct = torch.zeros(mt, nt, device="cuda", dtype=torch.bfloat16)
            fn = gemms.gemm_bf16.configure(**config)
            fn(at, bt, ct)
            ok &= check(f"gemm_bf16 {config} ({fn.compiled.notes[-1].split(': ', 1)[-1]})",
                        ct.double().cpu().numpy(), exact_t, 2 ** -7, 1e-3)
    tf32 = phobos.load(EXAMPLES / "sgemm_tf32.phobos", mode=mode)
    af, bf = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    for name, config, tol in (("sgemm_tf32", dict(TILE_M=128, TILE_N=128, TILE_K=32, WARPS=8, STAGES=3), 0.05),
                              ("sgemm_tf32", dict(TILE_M=128, TILE_N=256, TILE_K=32, WARPS=8, STAGES=3), 0.05),
                              ("sgemm_tf32", dict(TILE_M=128, TILE_N=256, TILE_K=32, WARPS=8, STAGES=4), 0.05),
                              ("sgemm_tf32", dict(TILE_M=256, TILE_N=128, TILE_K=32, WARPS=8, STAGES=3), 0.05),
                              ("sgemm_tf32x3", dict(TILE_M=64, TILE_N=64, TILE_K=32, WARPS=4, STAGES=3), 1e-4),
                              ("sgemm_tf32x3", dict(TILE_M=128, TILE_N=64, TILE_K=32, WARPS=4, STAGES=2), 1e-4),
                              ("sgemm_tf32x3", dict(TILE_M=128, TILE_N=128, TILE_K=32, WARPS=8, STAGES=3), 1e-4)):
        c = np.zeros((m, n), np.float32)
        getattr(tf32, name).configure(**config)(af, bf, c)
        ok &= check(f"{name} {config}", c, af.astype(np.float64) @ bf, 0, tol)
    if mode == "gpu":  # rows 16-byte multiples apart: A and B by TMA, B transposed by the producer
        import torch
        at, bt = (torch.randn(*shape, device="cuda") for shape in ((m, k + 1), (k + 1, n + 3)))
        exact_t = (at.double() @ bt.double()).cpu().numpy()
        for config in (dict(TILE_M=256, TILE_N=128, TILE_K=32, WARPS=8, STAGES=4),
                       dict(TILE_M=128, TILE_N=128, TILE_K=32, WARPS=8, STAGES=3)):
            ct = torch.zeros(m, n + 3, device="cuda")
            fn = tf32.sgemm_tf32.configure(**config)
            fn(at, bt, ct)
            ok &= check(f"sgemm_tf32 {config} ({fn.compiled.notes[-1].split(': ', 1)[-1]})", ct.cpu().numpy(),
                        exact_t, 0, 0.05)
    return 0 if ok and fp8(mode, rng) else 1


FP8_CONFIGS = {"gemm_fp8": [dict(TILE_M=128, TILE_N=128, TILE_K=128, WARPS=8, STAGES=4),
                            dict(TILE_M=64, TILE_N=256, TILE_K=128, WARPS=8, STAGES=3),
                            dict(TILE_M=128, TILE_N=128, TILE_K=128, WARPS=4, STAGES=4, PINGPONG=1)],
               "gemm_fp8_blockwise": [dict(TILE_M=128, TILE_N=128, TILE_K=128, WARPS=8, STAGES=4),
                                      dict(TILE_M=64, TILE_N=64, TILE_K=128, WARPS=4, STAGES=3)]}


def fp8(mode: str, rng) -> bool:
    """The FP8 examples: ragged sizes (cp.async), on the GPU also with rows 16-byte multiples apart (TMA)."""
    ok = True
    e4m3 = DType.F8E4M3
    gemms = phobos.load(EXAMPLES / "gemm_fp8.phobos", mode=mode)
    # M, N, K, and whether the arrays are torch tensors on the GPU (rows 16-byte multiples apart: TMA)
    shapes = [(200 + 3, 300 + 1, 150 + 5, False)] + ([(200 + 3, 300 + 12, 400 + 16, True)] if mode == "gpu" else [])
    for m, n, k, device in shapes:
        a, b = (f8_bits(rng.standard_normal(shape, dtype=np.float32), e4m3) for shape in ((m, k), (n, k)))
        av, bv = f8_values(a, e4m3).astype(np.float64), f8_values(b, e4m3).astype(np.float64)
        sa = np.exp2(rng.uniform(-2, 0, (m, -(-k // 128)))).astype(np.float32)
        sb = np.exp2(rng.uniform(-2, 0, (-(-n // 128), -(-k // 128)))).astype(np.float32)
        scale = lambda s, rows, shape: np.repeat(np.repeat(s, rows, 0), 128, 1)[:shape[0], :shape[1]]  # noqa: E731
        blockwise = (av * scale(sa, 1, av.shape)) @ (bv * scale(sb, 128, bv.shape)).T
        for name, args, want in (("gemm_fp8", (0.5, 0.25), 0.125 * (av @ bv.T)),
                                 ("gemm_fp8_blockwise", (sa, sb), blockwise)):
            for config in FP8_CONFIGS[name]:
                c = np.zeros((m, n), np.uint16)
                fn = getattr(gemms, name).configure(**config)
                if device:  # codes as uint8, C's bf16 bits as uint16, scales as f32: torch tensors on the GPU
                    import torch
                    cuda = [torch.from_numpy(x).cuda() if isinstance(x, np.ndarray) else x for x in (a, b, c, *args)]
                    fn(*cuda)
                    c = cuda[2].cpu().numpy()
                else:
                    fn(a, b, c, *args)
                ok &= check(f"{name} {m}x{n}x{k} {config} ({fn.compiled.notes[-1].split(': ', 1)[-1][:60]})",
                            bf16_values(c), want, 2 ** -7, 2 ** -6 * float(np.abs(want).max()))
    attention = phobos.load(EXAMPLES / "attention_fp8.phobos", mode=mode).attention_fp8
    batch, heads, kv_heads, length, keys = 2, 2, 1, 200 + 7, 200 + 37  # grouped queries, ragged
    for head in (64, 128):
        (q, qf), (kk, kf), (v, vf) = ((x, f8_values(x, e4m3).astype(np.float64)) for x in
                                      (f8_bits(rng.standard_normal(shape, dtype=np.float32), e4m3) for shape in
                                       ((batch, heads, length, head), (batch, kv_heads, keys, head),
                                        (batch, kv_heads, keys, head))))
        kf, vf = (np.repeat(x, heads // kv_heads, axis=1) for x in (kf, vf))
        for causal in (False, True):
            s = qf @ np.swapaxes(kf, 2, 3) / math.sqrt(head)
            if causal:
                s = np.where(np.tril(np.ones((length, keys), bool)), s, -np.inf)
            p = np.exp(s - s.max(axis=3, keepdims=True))
            p /= p.sum(3, keepdims=True)
            o = np.zeros((batch, heads, length, head), np.uint16)
            fn = attention.configure(BM=64, BN=64, WARPS=4, STAGES=2, CTAS_PER_SM=2)
            fn(q, kk, np.ascontiguousarray(np.swapaxes(v, 2, 3)), o, scale=1 / math.sqrt(head), v_scale=1.0,
               causal=causal)
            # P quantised to e4m3 in the kernel: at most 2^-4 (P |V|) off
            ok &= check(f"attention_fp8 d={head} causal={causal}", bf16_values(o), p @ vf, 2 ** -6,
                        2 ** -4 * float((p @ np.abs(vf)).max()))
    return ok


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu"))
