# Soundness of every autotune space: for every kernel in examples/ and
# tests/kernels/, every configuration valid for a size (what the launcher would
# let the autotuner choose), at three sizes - a small one, a ragged one and one
# larger than the largest tile - computes what NumPy computes.  The interpreter
# runs them all; the PTX emulator runs one configuration of each kernel at the
# ragged size.  A kernel that gives wrong answers for some configuration and
# size (such as a softmax whose block of columns is shorter than the row) fails
# here, whichever configuration the autotuner would have picked on a GPU.
#
# REGISTRY holds, per kernel, its argument maker and NumPy reference (from
# test_kernels), the sizes, and sizes no configuration serves (the launcher
# must refuse them).  A kernel without an entry fails the first test: add one
# when you add a kernel.
from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import phobos
from phobos.compiler import parse_source
from phobos.errors import LaunchError, ResourceError

from .attention_support import case_attention_bf16
from .test_kernels import (case_add, case_attention, case_attention_fp8, case_cumsum, case_dropout, case_embedding_bag,
                           case_ew2d, case_gemm16, case_gemm_fp8, case_gemm_fp8_blockwise, case_half, case_layernorm,
                           case_loops, case_reduce_sum, case_row_sum, case_rowstats, case_sgemm, case_sgemm_tc,
                           case_softmax, case_splitk, case_top8, case_vector_sum, check_outputs, splitk_grid)

ROOT = Path(__file__).parent.parent
SOURCES = sorted((ROOT / "examples").glob("*.phobos")) + sorted((ROOT / "tests" / "kernels").glob("*.phobos"))


def blocks(name: str) -> Callable:
    """A grid of ceil(N / config[name]) programs along x (kernels that only add into a total)."""
    return lambda config, sizes: (-(-sizes["N"] // config[name]),)


@dataclass
class Entry:
    make: Callable  # sizes -> (rng -> (arguments, expected outputs as {argument index: array}))
    sizes: tuple[dict, dict, dict]  # small, ragged, larger than the largest tile
    grid: Callable | None = None
    rtol: float = 1e-6
    atol: float = 1e-6
    refused: dict | None = None  # sizes that no configuration serves (a LaunchError, never a wrong result)


ATTENTION_ONE = {"B": 1, "H": 1, "HKV": 1, "L": 1, "S": 1}  # one head, one query, one key


def attention_sizes(kernel: str, last_head: int) -> tuple[dict, dict, dict]:
    """One query and key; two batches of grouped queries, ragged; past the largest tiles at head size
    `last_head`.  The bias (attention_bias) is [1, H, L, S]."""
    sizes = (dict(ATTENTION_ONE, D=64), dict(ATTENTION_ONE, B=2, H=2, L=70, S=60, D=64),
             dict(ATTENTION_ONE, L=150, S=140, D=last_head))
    return tuple(dict(s, BB=1, HB=s["H"]) for s in sizes) if kernel == "attention_bias" else sizes


REGISTRY: dict[tuple[str, str], Entry] = {
    ("examples/add.phobos", "add"): Entry(
        lambda s: case_add(s["N"]), ({"N": 1}, {"N": 3001}, {"N": 9000})),
    ("examples/sgemm.phobos", "sgemm"): Entry(
        lambda s: case_sgemm(s["M"], s["N"], s["K"]),
        ({"M": 1, "N": 1, "K": 1}, {"M": 33, "N": 70, "K": 17}, {"M": 130, "N": 260, "K": 70}),
        rtol=1e-5, atol=1e-4),
    ("examples/softmax.phobos", "softmax"): Entry(
        lambda s: case_softmax(s["M"], s["N"]), ({"M": 3, "N": 1}, {"M": 5, "N": 1000}, {"M": 2, "N": 20001})),
    ("examples/layernorm.phobos", "layernorm"): Entry(
        lambda s: case_layernorm(s["M"], s["N"]), ({"M": 3, "N": 1}, {"M": 5, "N": 1000}, {"M": 2, "N": 20001}),
        rtol=1e-5, atol=1e-5),
    ("examples/row_sum.phobos", "row_sum"): Entry(
        lambda s: case_row_sum(s["M"], s["N"]), ({"M": 3, "N": 1}, {"M": 37, "N": 1000}, {"M": 2, "N": 20001}),
        rtol=1e-5, atol=1e-4),
    ("examples/vector_sum.phobos", "vector_sum"): Entry(
        lambda s: case_vector_sum(s["N"]), ({"N": 1}, {"N": 5001}, {"N": 40000}), grid=blocks("BLOCK"),
        rtol=1e-5, atol=1e-3),
    ("examples/attention.phobos", "attention"): Entry(
        lambda s: case_attention(s["L"], s["D"]), ({"L": 1, "D": 64}, {"L": 100, "D": 64}, {"L": 200, "D": 64}),
        rtol=1e-4, atol=1e-5, refused={"L": 8, "D": 32}),
    **{("examples/gemm_bf16.phobos", f"gemm_{dtype}"): Entry(
        lambda s, dtype=dtype: case_gemm16(dtype, s["M"], s["N"], s["K"]),
        ({"M": 1, "N": 1, "K": 1}, {"M": 70, "N": 90, "K": 40}, {"M": 130, "N": 260, "K": 70}),
        rtol=2 ** -7 if dtype == "bf16" else 2 ** -10, atol=1e-4) for dtype in ("bf16", "f16")},
    ("examples/sgemm_tf32.phobos", "sgemm_tf32"): Entry(
        lambda s: case_sgemm_tc(s["M"], s["N"], s["K"]),
        ({"M": 1, "N": 1, "K": 1}, {"M": 70, "N": 90, "K": 40}, {"M": 130, "N": 260, "K": 70}),
        rtol=2 ** -9, atol=0.05),
    ("examples/sgemm_tf32.phobos", "sgemm_tf32x3"): Entry(
        lambda s: case_sgemm_tc(s["M"], s["N"], s["K"]),
        ({"M": 1, "N": 1, "K": 1}, {"M": 70, "N": 90, "K": 40}, {"M": 130, "N": 140, "K": 70}),
        rtol=1e-5, atol=1e-4),
    **{(f"examples/{path}.phobos", kernel): Entry(
        lambda s, kernel=kernel: case_attention_bf16(kernel, s),
        attention_sizes(kernel, last),
        rtol=2 ** -6, atol=atol, refused=refused)
       for path, kernel, last, atol, refused in (
           ("attention_bf16", "attention", 256, 2 ** -8, dict(ATTENTION_ONE, D=272)),
           ("attention_bf16", "attention_lse", 128, 2 ** -8, None),
           ("attention_bf16", "attention_bias", 128, 2 ** -8, None),
           ("attention_bf16", "attention_alibi", 128, 2 ** -8, None),
           ("attention_bf16", "attention_window", 256, 2 ** -8, None),
           ("attention_bf16_backward", "attention_backward_delta", 256, 1e-5, None),
           ("attention_bf16_backward", "attention_backward_dkdv", 128, 2 ** -5, dict(ATTENTION_ONE, D=256)),
           ("attention_bf16_backward", "attention_backward_dq", 128, 2 ** -5, dict(ATTENTION_ONE, D=256)))},
    **{("examples/gemm_fp8.phobos", name): Entry(
        lambda s, make=make: make(s["M"], s["N"], s["K"]),
        ({"M": 1, "N": 1, "K": 1}, {"M": 70, "N": 90, "K": 40}, {"M": 130, "N": 260, "K": 300}),
        rtol=2 ** -7, atol=2 ** -4)
       for name, make in (("gemm_fp8", case_gemm_fp8), ("gemm_fp8_blockwise", case_gemm_fp8_blockwise))},
    ("examples/attention_fp8.phobos", "attention_fp8"): Entry(
        lambda s: case_attention_fp8(s, causal=True), attention_sizes("attention_fp8", 128),
        rtol=2 ** -6, atol=2 ** -4, refused=dict(ATTENTION_ONE, D=160)),
    ("examples/embedding_bag.phobos", "embedding_bag"): Entry(
        lambda s: case_embedding_bag(s["B"], s["V"], s["D"], s.get("mean", False)),
        ({"B": 1, "V": 1, "D": 1}, {"B": 7, "V": 50, "D": 100, "mean": True}, {"B": 3, "V": 300, "D": 300}),
        rtol=1e-5, atol=1e-5),
    ("examples/dropout.phobos", "dropout"): Entry(
        lambda s: case_dropout(s["N"]), ({"N": 1}, {"N": 3001}, {"N": 9000}), rtol=0, atol=0),
    ("examples/cumsum.phobos", "cumsum_rows"): Entry(
        lambda s: case_cumsum(s["M"], s["N"]), ({"M": 1, "N": 1}, {"M": 3, "N": 1000}, {"M": 2, "N": 9000}),
        rtol=1e-5, atol=2e-4),
    ("examples/topk.phobos", "top8"): Entry(
        lambda s: case_top8(s["M"], s["N"]), ({"M": 1, "N": 1}, {"M": 3, "N": 300}, {"M": 2, "N": 2100}),
        rtol=0, atol=0),
    ("examples/splitk_matmul.phobos", "splitk_matmul"): Entry(
        lambda s: case_splitk(s["M"], s["N"], s["K"]),
        ({"M": 1, "N": 1, "K": 1}, {"M": 33, "N": 70, "K": 45}, {"M": 130, "N": 130, "K": 70}), grid=splitk_grid,
        rtol=1e-5, atol=1e-4),
    ("tests/kernels/ew2d.phobos", "ew2d"): Entry(
        lambda s: case_ew2d(s["M"], s["N"]), ({"M": 1, "N": 1}, {"M": 37, "N": 100}, {"M": 40, "N": 130})),
    ("tests/kernels/half.phobos", "half"): Entry(
        lambda s: case_half(s["N"]), ({"N": 1}, {"N": 300}, {"N": 1000})),
    ("tests/kernels/layernorm.phobos", "layernorm"): Entry(
        lambda s: case_layernorm(s["M"], s["N"]), ({"M": 1, "N": 1}, {"M": 5, "N": 200}, {"M": 3, "N": 256}),
        rtol=1e-5, atol=1e-5, refused={"M": 2, "N": 257}),
    ("tests/kernels/loops.phobos", "loops"): Entry(
        lambda s: case_loops(s["N"]), ({"N": 1}, {"N": 100}, {"N": 200})),
    ("tests/kernels/reduce_sum.phobos", "reduce_sum"): Entry(
        lambda s: case_reduce_sum(s["N"]), ({"N": 1}, {"N": 777}, {"N": 5000}), grid=blocks("BLOCK"),
        rtol=1e-5, atol=1e-4),
    ("tests/kernels/rowstats.phobos", "rowstats"): Entry(
        lambda s: case_rowstats(s["M"], s["N"]), ({"M": 1, "N": 8}, {"M": 21, "N": 25}, {"M": 20, "N": 32}),
        refused={"M": 2, "N": 33}),
    ("tests/kernels/softmax.phobos", "softmax"): Entry(
        lambda s: case_softmax(s["M"], s["N"]), ({"M": 1, "N": 1}, {"M": 9, "N": 100}, {"M": 13, "N": 128}),
        refused={"M": 2, "N": 129}),
}


def kernels_in(path: Path) -> list[str]:
    return [k.name for k in parse_source(path.read_text(), str(path)).kernels]


ALL_KERNELS = [(path.relative_to(ROOT).as_posix(), name) for path in SOURCES for name in kernels_in(path)]


def valid_configurations(fn, sizes: dict) -> list[dict]:
    """The complete configurations the launcher offers a call with these sizes (every backend alike)."""
    return fn.rules.serving(fn.rules.autotune_configurations(), sizes)[0]


def run_configuration(module, kernel: str, entry: Entry, sizes: dict, config: dict, label: str) -> None:
    """Run one configuration (its autotune values forced; derived constants follow the sizes) against NumPy."""
    rng = np.random.default_rng(zlib.crc32(label.encode()))
    args, expected = entry.make(sizes)(rng)
    fn = getattr(module, kernel)
    forced = fn.configure(**{name: value for name, value in config.items() if name in fn.rules.space})
    (forced[entry.grid] if entry.grid else forced)(*args)
    assert forced.config == config, f"{label}: ran {forced.config}"
    check_outputs(label, args, expected, entry.rtol, entry.atol)


def test_every_kernel_has_a_registry_entry():
    missing = [f"{path}: {name}" for path, name in ALL_KERNELS if (path, name) not in REGISTRY]
    assert not missing, ("kernels without an entry in tests/test_soundness.py REGISTRY (an argument maker, "
                         "a NumPy reference and three sizes): " + ", ".join(missing))
    stale = sorted(set(REGISTRY) - set(ALL_KERNELS))
    assert not stale, f"REGISTRY entries for kernels that do not exist: {stale}"


@pytest.mark.parametrize("path, kernel", sorted(REGISTRY), ids=lambda x: x)
def test_every_valid_configuration_matches_numpy_in_the_interpreter(path, kernel):
    entry = REGISTRY[path, kernel]
    module = phobos.load(ROOT / path, mode="interpret")
    for sizes in entry.sizes:
        configs = valid_configurations(getattr(module, kernel), sizes)
        assert configs, f"{path} {kernel}: no configuration serves {sizes}; choose sizes it serves"
        unfit = []
        for config in configs:
            if config.get("CLUSTER", 1) > 1:  # the interpreter runs an instance as one CTA (test_cluster_knob.py)
                continue
            try:
                run_configuration(module, kernel, entry, sizes, config, f"{path} {kernel} {sizes} {config}")
            except ResourceError:  # too big for sm_90: the autotuner skips it, and the CPU modes refuse it
                unfit.append(config)
        assert len(unfit) < len(configs), f"{path} {kernel}: no configuration that serves {sizes} fits sm_90"


@pytest.mark.parametrize("path, kernel", sorted(REGISTRY), ids=lambda x: x)
def test_one_valid_configuration_matches_numpy_in_the_emulator(path, kernel):
    entry = REGISTRY[path, kernel]
    sizes = entry.sizes[1]
    module = phobos.load(ROOT / path, mode="emulate")
    configs = valid_configurations(getattr(module, kernel), sizes)
    config = configs[zlib.crc32(f"{path} {kernel}".encode()) % len(configs)]
    run_configuration(module, kernel, entry, sizes, config, f"{path} {kernel} {sizes} {config}")


@pytest.mark.parametrize("path, kernel", sorted(k for k, e in REGISTRY.items() if e.refused), ids=lambda x: x)
def test_sizes_no_configuration_serves_are_refused(path, kernel):
    entry = REGISTRY[path, kernel]
    fn = getattr(phobos.load(ROOT / path, mode="interpret"), kernel)
    assert valid_configurations(fn, entry.refused) == []
    args, _ = entry.make(entry.refused)(np.random.default_rng(0))
    with pytest.raises(LaunchError, match="no configuration can serve"):
        (fn[entry.grid] if entry.grid else fn)(*args)


# The softmax of examples/ before it said which sizes its configurations serve: the autotuner could
# pick a block of columns shorter than the row.
UNSOUND_SOFTMAX = """\
@autotune(BN in [4096, 1024, 2048, 8192], BM in [1], WARPS in [4])
kernel softmax(x: tensor<f32>[M, N], y: tensor<f32>[M, N]) {
    let rows = program_id(0) * BM
    let t = where(arange(BN) < N, x[rows :+ BM, 0 :+ BN], -inf)
    let e = exp(t - max(t, axis=1))
    y[rows :+ BM, 0 :+ BN] = e / sum(e, axis=1)
}
"""


def test_the_check_catches_configurations_that_compute_something_else():
    module = phobos.jit(UNSOUND_SOFTMAX, "unsound.phobos", mode="interpret")
    entry = REGISTRY["examples/softmax.phobos", "softmax"]
    sizes = {"M": 2, "N": 4096}
    run_configuration(module, "softmax", entry, sizes, {"BN": 4096, "BM": 1, "WARPS": 4}, "BN=4096")
    with pytest.raises(AssertionError):
        run_configuration(module, "softmax", entry, sizes, {"BN": 1024, "BM": 1, "WARPS": 4}, "BN=1024")
