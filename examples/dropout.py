# Dropout with the kernel of dropout.phobos (a Philox-4x32-10 generator written with bit
# operations and mulhi), checked against numpy: the mask must be exactly the one a Python
# Philox gives for the same seed and offset, and about p of the elements dropped.
#
#   python examples/dropout.py [--size N] [--mode gpu|interpret|emulate]
from __future__ import annotations

from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, report, run, time_on_gpu

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85


def philox_first_word(counters: np.ndarray, offset: int, seed0: int, seed1: int) -> np.ndarray:
    """Word 0 of Philox-4x32-10 of the counters (i, offset, 0, 0) and key (seed0, seed1), vectorised."""
    mask = np.uint64(0xFFFFFFFF)
    c0 = counters.astype(np.uint64)
    c1 = np.full_like(c0, offset)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    k0, k1 = np.uint64(seed0), np.uint64(seed1)
    for _ in range(10):
        p0, p1 = np.uint64(M0) * c0, np.uint64(M1) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & mask)
        k0, k1 = (k0 + np.uint64(W0)) & mask, (k1 + np.uint64(W1)) & mask
    return c0.astype(np.uint32)


def main() -> int:
    args = arguments("dropout with the kernel of dropout.phobos, checked against numpy",
                     size={"type": int, "help": "number of elements"})
    mode = pick_mode(args.mode)
    n = args.size or (2**24 + 5 if mode == "gpu" else 20_000)
    p, seed0, seed1, offset = 0.3, 0x1234_5678, 0x9ABC_DEF0, 7
    x = np.random.default_rng().standard_normal(n, dtype=np.float32)
    y = np.full(n, np.nan, np.float32)
    dropout = phobos.load(Path(__file__).with_name("dropout.phobos"), mode=mode).dropout
    dropout(x, y, p, seed0, seed1, offset)
    print(f"dropout: n = {n}, p = {p}, mode = {mode}, configuration {dropout.config}")
    u = (philox_first_word(np.arange(n), offset, seed0, seed1) >> 8).astype(np.float32) * np.float32(2.0**-24)
    keep = u >= np.float32(p)
    want = np.where(keep, x / np.float32(1 - p), np.float32(0))
    ok = report("y - reference", y, want, rtol=0, atol=0)
    dropped = 1 - float(np.mean(y != 0))
    ok &= abs(dropped - p) < 5 / np.sqrt(n)
    print(f"dropped {dropped:.4f} of the elements (p = {p}): {'ok' if ok else 'WRONG'}")
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(dropout, [x, y], p=p, seed0=seed0, seed1=seed1, offset=offset)
        print(f"time: {ms:.3f} ms per call, {2 * x.nbytes / ms / 1e6:.0f} GB/s")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
