# Every example and test kernel, run and compared with NumPy in each way Phobos
# can run it: the interpreter (the language's meaning), the PTX emulator (the
# code the compiler actually generates, on the CPU), and the GPU (marked `gpu`).
# One table of cases; each gives the source, inputs drawn fresh from a seeded
# generator, a float64 reference and a tolerance.
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import zlib

import numpy as np
import pytest

import phobos
from phobos.constants import bf16_bits, bf16_values, f8_bits, f8_values
from phobos.types import DType

from .attention_support import case_attention_bf16
from .attention_support import reference as attention_reference

ROOT = Path(__file__).parent.parent
KERNELS = Path(__file__).parent / "kernels"
# grouped queries (two heads a key/value head), two batches, more queries than keys, both ragged
ATTENTION_SIZES = {"B": 2, "H": 2, "HKV": 1, "L": 100, "S": 90, "D": 64}


@dataclass
class Case:
    id: str
    path: Path
    kernel: str
    make: Callable  # rng -> (args, expected outputs as {arg index: array})
    config: dict | None = None  # forced autotune values (else the first configuration)
    grid: tuple | Callable | None = None
    rtol: float = 1e-6
    atol: float = 1e-6


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def case_add(n):
    def make(rng):
        a, b = f32(rng, n), f32(rng, n)
        c = np.full(n, np.nan, np.float32)
        return [a, b, c], {2: a.astype(np.float64) + b}
    return make


def case_sgemm(m, n, k, alpha=1.5, beta=0.5):
    def make(rng):
        a, b, c = f32(rng, m, k), f32(rng, k, n), f32(rng, m, n)
        return [a, b, c, alpha, beta], {2: alpha * (a.astype(np.float64) @ b) + beta * c}
    return make


def softmax_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def case_softmax(m, n):
    def make(rng):
        x = f32(rng, m, n) * 3
        return [x, np.full((m, n), np.nan, np.float32)], {1: softmax_rows(x.astype(np.float64))}
    return make


def layernorm_rows(x, w, b, eps):
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def case_layernorm(m, n, eps=1e-5):
    def make(rng):
        x, w, b = f32(rng, m, n) + 2, f32(rng, n), f32(rng, n)
        y = np.full((m, n), np.nan, np.float32)
        return [x, w, b, y, eps], {3: layernorm_rows(x.astype(np.float64), w, b, eps)}
    return make


def case_row_sum(m, n):
    def make(rng):
        x = f32(rng, m, n)
        return [x, np.full(m, np.nan, np.float32)], {1: x.astype(np.float64).sum(axis=1)}
    return make


def case_vector_sum(n):
    def make(rng):
        x = f32(rng, n)
        return [x, np.zeros(1, np.float32)], {1: np.array([x.astype(np.float64).sum()])}
    return make


def case_attention(length, head=64):
    def make(rng):
        q, k, v = f32(rng, length, head), f32(rng, length, head), f32(rng, length, head)
        scale = 1.0 / np.sqrt(head)
        s = (q.astype(np.float64) @ k.T.astype(np.float64)) * scale
        s[np.triu_indices(length, 1)] = -np.inf
        out = softmax_rows(s) @ v
        return [q, np.ascontiguousarray(k.T), v, np.full((length, head), np.nan, np.float32), scale], {3: out}
    return make


def case_ew2d(m, n):
    def make(rng):
        x, y = f32(rng, m, n), f32(rng, m, n)
        return [x, y, np.full((m, n), np.nan, np.float32), 0.25], {2: x.astype(np.float64) * y + 0.25}
    return make


def case_loops(n):
    def make(rng):
        x = f32(rng, n)
        y = rng.integers(-50, 50, n).astype(np.int32)
        acc = np.zeros(n, np.float32)
        for i in (10, 7, 4, 1):  # the loop's values of i, rounded to f32 at each step as the kernel does
            acc = acc + x * np.float32(i)
        acc = acc + np.float32(1)  # count == 4
        q = np.trunc(y / 3).astype(np.int32)
        out = acc.astype(np.float64) + q + (y - 3 * q)
        return [x, y, np.full(n, np.nan, np.float32)], {2: out}
    return make


def case_rowstats(m, n):
    def make(rng):
        x = f32(rng, m, n)
        x[0, 3] = x[0, 7] = x[0].max() + 1  # a tie: argmax takes the first
        return ([x, np.zeros(m, np.int32), np.zeros(m, np.float32), np.zeros(m, np.float32),
                 np.zeros(m, np.float32)],
                {1: x.argmax(axis=1), 2: x.min(axis=1), 3: x.max(axis=1), 4: x[:, 0]})
    return make


def case_half(n):
    def make(rng):
        a = f32(rng, n).astype(np.float16)
        c = rng.integers(-128, 127, n).astype(np.int8)
        b = np.zeros(n, np.uint16)
        expected_b = (a * np.float16(2) + np.float16(0.5)).astype(np.float32)  # f16 arithmetic, rounded each step
        return [a, b, c, np.zeros(n, np.int32)], {1: ("bf16", expected_b), 3: c.astype(np.int64) * 3}
    return make


def bits16(dtype: str, x: np.ndarray) -> np.ndarray:
    """x rounded to a 16-bit float array: bf16 as its uint16 bit patterns, f16 as numpy's float16."""
    return bf16_bits(x) if dtype == "bf16" else x.astype(np.float16)


def values16(x: np.ndarray) -> np.ndarray:
    """The float64 values of a 16-bit float array (bf16 bit patterns or float16)."""
    return (bf16_values(x) if x.dtype == np.uint16 else x).astype(np.float64)


def case_gemm16(dtype, m, n, k):
    """C = A B in a 16-bit format (tensor cores): the reference is the product of the rounded inputs."""
    def make(rng):
        a, b = bits16(dtype, f32(rng, m, k)), bits16(dtype, f32(rng, k, n))
        c = bits16(dtype, np.full((m, n), np.nan, np.float32))
        return [a, b, c], {2: (dtype, values16(a) @ values16(b))}
    return make


def case_sgemm_tc(m, n, k):
    def make(rng):
        a, b = f32(rng, m, k), f32(rng, k, n)
        return [a, b, np.full((m, n), np.nan, np.float32)], {2: a.astype(np.float64) @ b}
    return make


def e4m3(rng, *shape, spread: int = 0):
    """Random e4m3 codes of normal values times powers of two up to 2^+-spread, and their float64 values."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
    codes = f8_bits(x.astype(np.float32), DType.F8E4M3)
    return codes, f8_values(codes, DType.F8E4M3).astype(np.float64)


def case_gemm_fp8(m, n, k):
    """C = scale_a scale_b A B^T of e4m3 A [M, K], B [N, K]; the reference is the float64 product."""
    def make(rng):
        (a, av), (b, bv) = e4m3(rng, m, k, spread=1), e4m3(rng, n, k, spread=1)
        c = bf16_bits(np.full((m, n), np.nan, np.float32))
        return [a, b, c, 0.5, 0.375], {2: ("bf16", 0.5 * 0.375 * (av @ bv.T))}
    return make


def case_gemm_fp8_blockwise(m, n, k):
    """C = sum over 128-wide K blocks of (A's 1 x 128 scales) (B's 128 x 128 scales) A B^T of the block."""
    def make(rng):
        (a, av), (b, bv) = e4m3(rng, m, k, spread=1), e4m3(rng, n, k, spread=1)
        sa = np.exp2(rng.uniform(-2, 0, (m, -(-k // 128)))).astype(np.float32)
        sb = np.exp2(rng.uniform(-2, 0, (-(-n // 128), -(-k // 128)))).astype(np.float32)
        scale = lambda s, rows, shape: np.repeat(np.repeat(s, rows, 0), 128, 1)[:shape[0], :shape[1]]  # noqa: E731
        want = (av * scale(sa, 1, av.shape)) @ (bv * scale(sb, 128, bv.shape)).T
        return [a, b, bf16_bits(np.full((m, n), np.nan, np.float32)), sa, sb], {2: ("bf16", want)}
    return make


def case_attention_fp8(s: dict, causal: bool):
    """O = softmax(Q K^T / sqrt(D)) V of e4m3 Q [B, H, L, D], K and V [B, HKV, S, D] (V given transposed);
    P is quantised to e4m3 in the kernel, an error of at most 2^-4 (P |V|) in O (the Case's atol)."""
    def make(rng):
        (q, qv), (k, kv), (v, vv) = (e4m3(rng, s["B"], heads, length, s["D"])
                                     for heads, length in ((s["H"], s["L"]), (s["HKV"], s["S"]), (s["HKV"], s["S"])))
        want, _ = attention_reference(qv, kv, vv, 1 / np.sqrt(s["D"]), causal)
        o = bf16_bits(np.full(q.shape, np.nan, np.float32))
        vt = np.ascontiguousarray(np.swapaxes(v, 2, 3))
        return [q, k, vt, o, 1 / np.sqrt(s["D"]), 1.0, causal], {3: ("bf16", want)}
    return make


def case_reduce_sum(n):
    return case_vector_sum(n)


def case_embedding_bag(bags, vocab, dim, mean):
    def make(rng):
        table = f32(rng, vocab, dim)
        offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 30, bags))]).astype(np.int32)
        ids = rng.integers(-2, vocab + 2, int(offsets[-1])).astype(np.int32)
        want = np.zeros((bags, dim))
        for k in range(bags):
            bag = ids[offsets[k]:offsets[k + 1]]
            want[k] = table[bag[(bag >= 0) & (bag < vocab)]].astype(np.float64).sum(axis=0)
            if mean:
                want[k] /= max(len(bag), 1)
        return [table, ids, offsets, np.full((bags, dim), np.nan, np.float32), mean], {3: want}
    return make


def philox_first_word(counters, offset, seed0, seed1):
    """Word 0 of Philox-4x32-10 of the counters (i, offset, 0, 0) and the key (seed0, seed1)."""
    mask, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    c0, c2 = counters.astype(np.uint64), np.zeros(len(counters), np.uint64)
    c1, c3 = np.full(len(counters), offset, np.uint64), np.zeros(len(counters), np.uint64)
    k0, k1 = np.uint64(seed0), np.uint64(seed1)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> s32) ^ c1 ^ k0, p1 & mask, (p0 >> s32) ^ c3 ^ k1, p0 & mask
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & mask, (k1 + np.uint64(0xBB67AE85)) & mask
    return c0.astype(np.uint32)


def case_dropout(n, p=0.25, seeds=(12345, 67890), offset=3):
    def make(rng):
        x = f32(rng, n)
        u = (philox_first_word(np.arange(n), offset, *seeds) >> 8).astype(np.float32) * np.float32(2.0**-24)
        want = np.where(u >= np.float32(p), x / np.float32(1 - p), np.float32(0))
        return [x, np.full(n, np.nan, np.float32), p, *seeds, offset], {1: want}
    return make


def case_cumsum(m, n):
    def make(rng):
        x = f32(rng, m, n)
        return [x, np.full((m, n), np.nan, np.float32)], {1: np.cumsum(x.astype(np.float64), axis=1)}
    return make


def case_top8(m, n):
    def make(rng):
        x = rng.integers(-50, 50, (m, n)).astype(np.float32)  # many ties: the first is taken
        order = np.argsort(-x, axis=1, kind="stable")[:, :8]
        if n < 8:  # missing places: -inf at index -1
            order = np.pad(order, ((0, 0), (0, 8 - n)), constant_values=-1)
        values = np.where(order >= 0, np.take_along_axis(x, np.maximum(order, 0), axis=1), -np.inf)
        return [x, np.zeros((m, 8), np.float32), np.zeros((m, 8), np.int32)], {1: values, 2: order}
    return make


def case_splitk(m, n, k):
    def make(rng):
        a, b = f32(rng, m, k), f32(rng, k, n)
        return [a, b, np.zeros((m, n), np.float32)], {2: a.astype(np.float64) @ b}
    return make


def splitk_grid(config, sizes):
    return (-(-sizes["M"] // config["TILE_M"]), -(-sizes["N"] // config["TILE_N"]), config["SPLIT"])


CASES = [
    Case("add-1", ROOT / "examples/add.phobos", "add", case_add(1)),
    Case("add-3000", ROOT / "examples/add.phobos", "add", case_add(3000)),
    # dot products: an f32 sum of K terms of size ~1 is good to about K * 2^-24 absolutely
    Case("sgemm-128", ROOT / "examples/sgemm.phobos", "sgemm", case_sgemm(128, 128, 128), rtol=1e-5, atol=1e-4),
    Case("sgemm-ragged", ROOT / "examples/sgemm.phobos", "sgemm", case_sgemm(100, 70, 33), rtol=1e-5,
         atol=3e-5),
    Case("sgemm-1x1x1", ROOT / "examples/sgemm.phobos", "sgemm", case_sgemm(1, 1, 1), rtol=1e-5),
    Case("sgemm-128x64x16", ROOT / "examples/sgemm.phobos", "sgemm", case_sgemm(130, 70, 40, 1.0, 0.0),
         config={"TILE_M": 128, "TILE_N": 64, "TILE_K": 16}, rtol=1e-5, atol=3e-5),
    Case("softmax", ROOT / "examples/softmax.phobos", "softmax", case_softmax(3, 1000), config={"WARPS": 4}),
    Case("softmax-long-rows", ROOT / "examples/softmax.phobos", "softmax", case_softmax(2, 20001)),
    Case("layernorm", ROOT / "examples/layernorm.phobos", "layernorm", case_layernorm(3, 1000),
         config={"WARPS": 4}, rtol=1e-5, atol=1e-5),
    Case("layernorm-long-rows", ROOT / "examples/layernorm.phobos", "layernorm", case_layernorm(2, 20001),
         rtol=1e-5, atol=1e-5),
    Case("row_sum", ROOT / "examples/row_sum.phobos", "row_sum", case_row_sum(37, 1000), rtol=1e-5,
         atol=1e-5),
    Case("row_sum-long-rows", ROOT / "examples/row_sum.phobos", "row_sum", case_row_sum(2, 20001), rtol=1e-5,
         atol=1e-4),
    Case("vector_sum", ROOT / "examples/vector_sum.phobos", "vector_sum", case_vector_sum(10000), rtol=1e-5,
         grid=lambda config, sizes: (-(-sizes["N"] // config["BLOCK"]),)),
    Case("attention", ROOT / "examples/attention.phobos", "attention", case_attention(100), rtol=1e-4,
         atol=1e-5),
    Case("ew2d", KERNELS / "ew2d.phobos", "ew2d", case_ew2d(37, 100)),
    Case("ew2d-30", KERNELS / "ew2d.phobos", "ew2d", case_ew2d(20, 61), config={"BM": 32, "BN": 30}),
    Case("softmax-128", KERNELS / "softmax.phobos", "softmax", case_softmax(9, 100), config={"BM": 4}),
    Case("layernorm-256", KERNELS / "layernorm.phobos", "layernorm", case_layernorm(5, 200), rtol=1e-5,
         atol=1e-5),
    Case("reduce_sum", KERNELS / "reduce_sum.phobos", "reduce_sum", case_reduce_sum(5000), rtol=1e-5,
         grid=lambda config, sizes: (-(-sizes["N"] // config["BLOCK"]),)),
    Case("reduce_sum-100", KERNELS / "reduce_sum.phobos", "reduce_sum", case_reduce_sum(777),
         config={"BLOCK": 100}, rtol=1e-5, grid=(8,)),
    Case("loops", KERNELS / "loops.phobos", "loops", case_loops(200), grid=(4,)),
    Case("rowstats", KERNELS / "rowstats.phobos", "rowstats", case_rowstats(20, 32), grid=(3,)),
    Case("half", KERNELS / "half.phobos", "half", case_half(300), grid=(3,)),
    # tensor cores: 16-bit outputs are good to their rounding (2^-8 or 2^-11) plus the f32 sums
    Case("gemm_bf16-ragged", ROOT / "examples/gemm_bf16.phobos", "gemm_bf16", case_gemm16("bf16", 100, 70, 50),
         rtol=2**-7, atol=1e-4),
    Case("gemm_f16-64x128x32", ROOT / "examples/gemm_bf16.phobos", "gemm_f16", case_gemm16("f16", 130, 140, 72),
         config={"TILE_M": 64, "TILE_N": 128, "TILE_K": 32, "WARPS": 4, "STAGES": 3}, rtol=2**-10, atol=1e-4),
    Case("gemm_bf16-unaligned-k", ROOT / "examples/gemm_bf16.phobos", "gemm_bf16",
         case_gemm16("bf16", 64, 128, 45), config={"TILE_M": 64, "TILE_N": 128, "TILE_K": 64, "WARPS": 4},
         rtol=2**-7, atol=1e-4),
    # TF32: operands rounded to 2^-11 relative; 3xTF32 about f32's accuracy
    Case("sgemm_tf32", ROOT / "examples/sgemm_tf32.phobos", "sgemm_tf32", case_sgemm_tc(70, 90, 40),
         config={"TILE_M": 64, "TILE_N": 128, "TILE_K": 16, "WARPS": 4}, rtol=2**-9, atol=0.05),
    Case("sgemm_tf32x3", ROOT / "examples/sgemm_tf32.phobos", "sgemm_tf32x3", case_sgemm_tc(70, 90, 40),
         config={"TILE_M": 64, "TILE_N": 64, "TILE_K": 32, "WARPS": 4}, rtol=1e-5, atol=3e-5),
    Case("attention_bf16-causal", ROOT / "examples/attention_bf16.phobos", "attention",
         case_attention_bf16("attention", ATTENTION_SIZES, True), config={"BM": 64, "BN": 64, "WARPS": 4},
         rtol=2**-6, atol=2**-8),
    Case("attention_bf16-d128", ROOT / "examples/attention_bf16.phobos", "attention",
         case_attention_bf16("attention", dict(ATTENTION_SIZES, H=1, HKV=1, L=70, S=70, D=128), False), rtol=2**-6,
         atol=2**-8),
    *[Case(kernel, ROOT / f"examples/{path}.phobos", kernel, case_attention_bf16(kernel, ATTENTION_SIZES),
           rtol=2**-6, atol=atol) for path, kernel, atol in (("attention_bf16", "attention_lse", 2**-8),
                                                 ("attention_bf16", "attention_bias", 2**-8),
                                                 ("attention_bf16", "attention_alibi", 2**-8),
                                                 ("attention_bf16", "attention_window", 2**-8),
                                                 ("attention_bf16_backward", "attention_backward_delta", 1e-5),
                                                 ("attention_bf16_backward", "attention_backward_dkdv", 2**-5),
                                                 ("attention_bf16_backward", "attention_backward_dq", 2**-5))],
    # 8-bit products: the tensor cores' 13-bit sums err by up to 2^-11 sum |a b| (about 70 here), C's bf16 2^-8
    Case("gemm_fp8-ragged", ROOT / "examples/gemm_fp8.phobos", "gemm_fp8", case_gemm_fp8(100, 70, 200),
         rtol=2**-7, atol=2**-4),
    Case("gemm_fp8-64x256", ROOT / "examples/gemm_fp8.phobos", "gemm_fp8", case_gemm_fp8(70, 260, 300),
         config={"TILE_M": 64, "TILE_N": 256, "WARPS": 8}, rtol=2**-7, atol=2**-4),
    Case("gemm_fp8_blockwise", ROOT / "examples/gemm_fp8.phobos", "gemm_fp8_blockwise",
         case_gemm_fp8_blockwise(70, 140, 300), rtol=2**-7, atol=2**-4),
    Case("attention_fp8-causal", ROOT / "examples/attention_fp8.phobos", "attention_fp8",
         case_attention_fp8(ATTENTION_SIZES, True), config={"BM": 64, "BN": 64, "WARPS": 4}, rtol=2**-6,
         atol=2**-4),
    Case("attention_fp8-d128", ROOT / "examples/attention_fp8.phobos", "attention_fp8",
         case_attention_fp8(dict(ATTENTION_SIZES, H=1, HKV=1, L=70, S=70, D=128), False), rtol=2**-6, atol=2**-4),
    Case("embedding_bag", ROOT / "examples/embedding_bag.phobos", "embedding_bag",
         case_embedding_bag(12, 200, 70, False), rtol=1e-5, atol=1e-5),
    Case("embedding_bag-mean", ROOT / "examples/embedding_bag.phobos", "embedding_bag",
         case_embedding_bag(9, 50, 130, True), config={"BD": 64, "CHUNK": 8}, rtol=1e-5, atol=1e-5),
    Case("dropout", ROOT / "examples/dropout.phobos", "dropout", case_dropout(3000), rtol=0, atol=0),
    Case("cumsum", ROOT / "examples/cumsum.phobos", "cumsum_rows", case_cumsum(3, 2500), rtol=1e-5, atol=1e-4),
    Case("cumsum-256", ROOT / "examples/cumsum.phobos", "cumsum_rows", case_cumsum(4, 300),
         config={"BN": 256, "WARPS": 8}, rtol=1e-5, atol=1e-5),
    Case("top8", ROOT / "examples/topk.phobos", "top8", case_top8(4, 300), rtol=0, atol=0),
    Case("top8-short", ROOT / "examples/topk.phobos", "top8", case_top8(3, 5), config={"BN": 64}, rtol=0, atol=0),
    Case("splitk", ROOT / "examples/splitk_matmul.phobos", "splitk_matmul", case_splitk(40, 70, 300),
         grid=splitk_grid, rtol=1e-5, atol=1e-4),
]


def run_case(case: Case, mode: str) -> None:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    args, expected = case.make(rng)
    fn = getattr(phobos.load(str(case.path), mode=mode), case.kernel)
    if case.config:
        fn = fn.configure(**case.config)
    (fn[case.grid] if case.grid else fn)(*args)
    check_outputs(case.id, args, expected, case.rtol, case.atol)


def check_outputs(name: str, args: list, expected: dict, rtol: float, atol: float) -> None:
    """The arguments a kernel wrote against their float64 references (bf16 bits within bf16's precision)."""
    for index, want in expected.items():
        got = args[index]
        if isinstance(want, tuple):  # 16-bit floats: compare within their precision
            np.testing.assert_allclose(values16(got), want[1], rtol=max(rtol, 2**-8), atol=atol, err_msg=name)
            continue
        assert np.all(np.isfinite(got)) or not np.all(np.isfinite(want)), f"{name}: unwritten elements"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_interpreter(case):
    run_case(case, "interpret")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_emulator(case):
    run_case(case, "emulate")


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gpu(case):
    run_case(case, "gpu")


# Rows as issue-sized as the GPU makes cheap: the examples called without configure, so the autotuner
# chooses among the configurations valid for the shape (a block of columns shorter than the row gave
# wrong results before the kernels said which sizes their configurations serve).
ROWS_ON_GPU = [
    Case(f"{name}-{m}x{n}", ROOT / f"examples/{name}.phobos", name, make(m, n), rtol=1e-5, atol=atol)
    for name, make, atol in (("softmax", case_softmax, 1e-9), ("layernorm", case_layernorm, 1e-5),
                             ("row_sum", case_row_sum, 1e-3))
    for m, n in ((512, 4096), (256, 1000), (8, 100000), (4096, 64), (1, 262144))
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", ROWS_ON_GPU, ids=lambda c: c.id)
def test_gpu_rows_without_configure(case):
    run_case(case, "gpu")
