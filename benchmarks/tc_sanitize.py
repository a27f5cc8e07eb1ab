"""The tensor-core examples once each on the GPU, small and ragged, for compute-sanitizer.

    compute-sanitizer --tool memcheck  python benchmarks/tc_sanitize.py
    compute-sanitizer --tool racecheck python benchmarks/tc_sanitize.py
    python benchmarks/tc_sanitize.py emulate        # the same on the CPU (sm_90's code: no wgmma)

Each kernel runs in fixed configurations (no autotuning: every launch under the sanitizer is
slow), covering mma.sync (TILE_K 32), wgmma (TILE_K 64, sm_90a only; on the GPU also with TMA
copies, from torch tensors whose rows are 16-byte multiples apart), TF32 (on the GPU also with TMA) and 3xTF32,
on sizes that are not multiples of any tile (so the masked edges run too), each checked against
float64 NumPy.  Prints one line per run and exits non-zero if any result is wrong.  The attention
kernels have a script of their own, benchmarks/attention_sanitize.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import phobos
from phobos.constants import bf16_bits, bf16_values

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
                       dict(TILE_M=256, TILE_N=128, TILE_K=64, WARPS=8, STAGES=3)):
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
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu"))
