# EmbeddingBag with the kernel of embedding_bag.phobos (a gather of table rows by id),
# checked against numpy.
#
#   python examples/embedding_bag.py [--bags B] [--mode gpu|interpret|emulate]
#
# Bags of random lengths (some empty) of random ids, a few of them outside the table (they add
# nothing, as the edge contract says), summed and averaged.
from __future__ import annotations

from pathlib import Path

import numpy as np

import phobos
from example_support import arguments, pick_mode, report, run, time_on_gpu


def reference(table: np.ndarray, ids: np.ndarray, offsets: np.ndarray, mean: bool) -> np.ndarray:
    out = np.zeros((len(offsets) - 1, table.shape[1]))
    for b in range(len(offsets) - 1):
        bag = ids[offsets[b]:offsets[b + 1]]
        rows = table[bag[(bag >= 0) & (bag < len(table))]].astype(np.float64)
        out[b] = rows.sum(axis=0) / (max(len(bag), 1) if mean else 1)
    return out


def main() -> int:
    args = arguments("EmbeddingBag with the kernel of embedding_bag.phobos, checked against numpy",
                     bags={"type": int, "help": "number of bags"})
    mode = pick_mode(args.mode)
    bags = args.bags or (65536 if mode == "gpu" else 40)
    vocab, dim = (100_000, 256) if mode == "gpu" else (500, 96)
    rng = np.random.default_rng()
    table = rng.standard_normal((vocab, dim), dtype=np.float32)
    lengths = rng.integers(0, 40, bags)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = rng.integers(-2, vocab + 2, int(offsets[-1])).astype(np.int32)
    out = np.full((bags, dim), np.nan, np.float32)
    embedding_bag = phobos.load(Path(__file__).with_name("embedding_bag.phobos"), mode=mode).embedding_bag
    ok = True
    for mean in (False, True):
        embedding_bag(table, ids, offsets, out, mean)
        print(f"embedding_bag: {bags} bags of up to 40 ids, table {vocab} x {dim}, mean = {mean}, "
              f"mode = {mode}, configuration {embedding_bag.config}")
        ok &= report("out - reference", out, reference(table, ids, offsets, mean), rtol=1e-5, atol=1e-5)
    if mode == "gpu" and ok and not args.check_only:
        ms = time_on_gpu(embedding_bag, [table, ids, offsets, out], mean=False)
        moved = offsets[-1] * dim * 4 + out.nbytes
        print(f"time: {ms:.3f} ms per call, {moved / ms / 1e6:.0f} GB/s of rows gathered and written")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
