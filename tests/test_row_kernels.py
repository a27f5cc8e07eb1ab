# The row kernels of examples/ - softmax, layer norm and row sums - in every variant their launch
# rules offer, at widths that reach each shape of the work and its edges: several rows to a warp
# (short rows), whole rows in registers up to 16384 columns (with a partial last row block of a
# program), and longer rows walked in blocks (with and without a partial last block); row lengths
# that are no multiple of the vector (so no vector access is aligned) and ones that are (the last
# block's vectors are masked one by one); few long rows split over a cluster of CTAs (CLUSTER, for
# softmax and row sums), each CTA holding a block or walking every CLUSTER-th one, with ranks whose
# block lies past the row.  Each configuration valid for the sizes runs in the interpreter (the
# language's meaning; it refuses clusters of several CTAs) and in the PTX emulator (the code
# generated, clusters included), against NumPy.
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

import phobos
from phobos.dag.access import sizes_in_rules

from .test_kernels import case_layernorm, case_row_sum, case_softmax, check_outputs

ROOT = Path(__file__).parent.parent

KERNELS = {"softmax": (case_softmax, 1e-6, 1e-6), "layernorm": (case_layernorm, 1e-5, 1e-5),
           "row_sum": (case_row_sum, 1e-5, 1e-4)}

# (rows, columns): a tail of rows a program of 16 or 64 rows leaves, rows of one vector or shorter,
# ragged and aligned widths, one row block exactly, the longest row held in registers and the first
# walked in blocks, and walks with and without a partial last block (and, over a cluster of two CTAs,
# one walked in blocks).
SIZES = [(37, 64), (5, 3), (70, 1), (9, 1000), (4, 1001), (3, 4096), (2, 16384), (1, 16385), (2, 24576),
         (2, 20001), (1, 20000), (1, 40000)]
CLUSTERED = {"softmax": {(0, False, True)}, "row_sum": {(0, False, True), (1, False, True)}, "layernorm": set()}


def configurations(fn, m: int, n: int) -> list[dict]:
    return fn.rules.serving(fn.rules.autotune_configurations(), {"M": m, "N": n})[0]


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_variant_at_every_edge(name, mode):
    make, rtol, atol = KERNELS[name]
    fn = getattr(phobos.load(ROOT / "examples" / f"{name}.phobos", mode=mode), name)
    ran = set()
    for m, n in SIZES:
        configs = configurations(fn, m, n)
        assert configs, f"{name}: no configuration serves {m} x {n}"
        for config in configs:
            label = f"{name} {mode} {m}x{n} {config}"
            args, expected = make(m, n)(np.random.default_rng(zlib.crc32(label.encode())))
            forced = fn.configure(**{k: v for k, v in config.items() if k in fn.rules.space})
            clustered = config.get("CLUSTER", 1) > 1
            if clustered and mode == "interpret":
                with pytest.raises(phobos.LaunchError, match="not a cluster of CLUSTER="):
                    forced(*args)
                continue
            forced(*args)
            assert forced.config == config, label
            check_outputs(label, args, expected, rtol, atol)
            ran.add((config["LOOP"], config["ROWS"] > 1, clustered))
    want = {(0, False, False), (0, True, False), (1, False, False)} | (CLUSTERED[name] if mode == "emulate" else set())
    assert ran == want, f"{name}: variants run: {sorted(ran)}"


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_variants_follow_the_sizes(name):
    fn = getattr(phobos.load(ROOT / "examples" / f"{name}.phobos", mode="interpret"), name)
    short = configurations(fn, 4096, 64)
    assert {c["BN"] for c in short} == {64} and max(c["ROWS"] for c in short) == 64
    # a vector a thread at least, but for one warp (a row of fewer than 128 columns alone)
    assert all(c["ROWS"] * 64 >= 4 * 32 * c["WARPS"] or c["WARPS"] == 1 for c in short)
    whole = configurations(fn, 64, 16384)  # a cluster's CTAs hold the row together
    held = {(0, 16384, 1)}
    walked = {(1, 512 * warps, 1) for warps in (8, 16, 32)} if name == "softmax" else set()  # its LOOP is tuned
    assert {(c["LOOP"], c["BN"] * (c.get("CLUSTER", 1) if c["LOOP"] == 0 else 1), c["ROWS"]) for c in whole} == \
        held | walked
    long = [c for c in configurations(fn, 64, 100000) if c.get("CLUSTER", 1) == 1]
    blocks = {8: 4096, 16: 8192, 32: 16384} if name == "softmax" else {8: 8192, 16: 8192, 32: 16384}
    assert sorted((c["WARPS"], c["LOOP"], c["BN"], c["ROWS"]) for c in long) == \
        [(warps, 1, bn, 1) for warps, bn in blocks.items()]
    if name == "softmax":  # a cluster of eight holds up to 8 x 16384 columns in registers
        assert {(c["CLUSTER"], c["LOOP"]) for c in configurations(fn, 1, 100000)} == {(1, 1), (8, 0)}
        assert {c["LOOP"] for c in configurations(fn, 64, 4096)} == {0}  # rows this short are read once


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_no_condition_names_the_row_count_so_the_tile_dag_cuts_calls_along_rows(name):
    """A task of the tile DAG sees fewer rows than its call: a condition on M could refuse it what the
    whole call takes, and the DAG then runs the call whole (phobos.dag.access.kernel_access)."""
    fn = getattr(phobos.load(ROOT / "examples" / f"{name}.phobos", mode="interpret"), name)
    assert "M" not in sizes_in_rules(fn.rules)


@pytest.mark.parametrize("name, m, n, clusters", [
    ("row_sum", 16, 262144, {1, 2, 4, 8}), ("row_sum", 1, 4096, {1}), ("row_sum", 4096, 262144, {1, 2, 4, 8}),
    ("softmax", 256, 16384, {1, 2, 4, 8}), ("softmax", 4096, 16384, {1, 2, 4, 8}), ("softmax", 16, 262144, {1}),
    ("softmax", 16, 100000, {1, 8}),
    ("layernorm", 16, 262144, {1})])
def test_long_rows_may_split_over_a_cluster(name, m, n, clusters):
    """Clusters are offered to rows long enough that each CTA keeps thousands of columns (softmax: rows
    held in registers only), whatever their count (the tuner finds them paying for few rows); each serving
    configuration covers the row with its CTAs."""
    fn = getattr(phobos.load(ROOT / "examples" / f"{name}.phobos", mode="interpret"), name)
    configs = configurations(fn, m, n)
    assert {c.get("CLUSTER", 1) for c in configs} == clusters
    for c in configs:
        assert c["LOOP"] == 1 or c["BN"] * c.get("CLUSTER", 1) >= n, c
