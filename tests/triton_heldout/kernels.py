# The held-out Triton kernels: written apart from tests/triton_corpus, in the style of Triton's unit tests
# (python/test/unit/language/test_core.py) and tutorials, to find what the emulator gets wrong on kernels it
# was not fixed against: where with broadcasting, scans along axis 0 and with a tuple combine, sorting 2-D
# tiles, 3-D loads, int8 dots through a ragged K loop, 3-D permutes and 16-bit transposes, unsigned and 64-bit
# atomics with memory orders and scopes, bitcasts and integer casts, umulhi, the rounding modes of casts,
# reductions along axis 0, join/split/interleave, gather, libdevice's exact functions and hypot, 32- and
# 64-bit integer division, clamp and NaN-propagating min/max, f64 arithmetic, cache modifiers, libdevice's
# integer intrinsics (mul24, sad, hadd, byte_perm...), directed rounding (_rd/_ru/_rz), f64 pow/log/exp,
# f16 and bf16 atomic adds, inline asm, a 3-D dot and max with indices.  Each case is compared with a numpy
# reference computed from the same inputs (tests/triton_corpus/cases.py); tools/triton_gpu_compare.py
# --corpus heldout runs them on a GPU too.
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from ..triton_corpus.cases import Case, Output, Run, chain, exact, registry, ulps

HELDOUT: dict[str, Case] = {}
case = registry(HELDOUT)


# -------------------- where, broadcasting
@triton.jit
def where_broadcast_kernel(x_ptr, row_ptr, col_ptr, out_ptr, relu_ptr, M: tl.constexpr, N: tl.constexpr):
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    keep = tl.load(row_ptr + rm) > 0
    fill = tl.load(col_ptr + rn)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.where(keep[:, None], x, fill[None, :]))
    tl.store(relu_ptr + rm[:, None] * N + rn[None, :], tl.where(x > 0, x, 0.0))


@case()
def h_where_broadcast(arch, rng):
    M, N = 32, 64
    x = rng.standard_normal((M, N)).astype(np.float32)
    row, col = rng.standard_normal(M).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    out, relu = np.zeros_like(x), np.zeros_like(x)
    return Run(where_broadcast_kernel, (1,), (x, row, col, out, relu), dict(M=M, N=N, num_warps=4),
               [Output("where", out, np.where(row[:, None] > 0, x, col[None, :])),
                Output("relu", relu, np.where(x > 0, x, np.float32(0)))])


# -------------------- scans along axis 0, a tuple combine
@triton.jit
def _max_with_index(a, i, b, j):
    take = b > a
    return tl.where(take, b, a), tl.where(take, j, i)


@triton.jit
def scan_axis0_kernel(x_ptr, sum_ptr, rsum_ptr, max_ptr, arg_ptr, M: tl.constexpr, N: tl.constexpr):
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    at = rm[:, None] * N + rn[None, :]
    x = tl.load(x_ptr + at)
    tl.store(sum_ptr + at, tl.cumsum(x, axis=0))
    tl.store(rsum_ptr + at, tl.cumsum(x, axis=0, reverse=True))
    index = tl.broadcast_to(rm[:, None], (M, N))
    running, where = tl.associative_scan((x, index), 0, _max_with_index)
    tl.store(max_ptr + at, running)
    tl.store(arg_ptr + at, where)


@case()
def h_scan_axis0_tuple(arch, rng):
    M, N = 32, 16
    x = rng.integers(-50, 50, (M, N)).astype(np.int32)
    outs = [np.zeros_like(x) for _ in range(4)]
    running = np.maximum.accumulate(x, axis=0)
    first = np.array([[int(np.flatnonzero(x[: i + 1, j] == running[i, j])[0]) for j in range(N)] for i in range(M)],
                     np.int32)
    wants = [np.cumsum(x, axis=0, dtype=np.int32), np.cumsum(x[::-1], axis=0, dtype=np.int32)[::-1], running, first]
    return Run(scan_axis0_kernel, (1,), (x, *outs), dict(M=M, N=N, num_warps=4),
               [Output(label, out, want) for label, out, want in
                zip(("cumsum", "cumsum reversed", "running max", "its first index"), outs, wants)])


# -------------------- sorting 2-D tiles
@triton.jit
def sort_rows_kernel(x_ptr, up_ptr, down_ptr, M: tl.constexpr, N: tl.constexpr):
    at = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + at)
    tl.store(up_ptr + at, tl.sort(x, dim=1))
    tl.store(down_ptr + at, tl.sort(x, dim=1, descending=True))


@case()
def h_sort_rows_int16(arch, rng):
    """Rows of 16-bit integers with repeats, both directions."""
    x = rng.integers(-20, 20, (8, 32)).astype(np.int16)
    up, down = np.zeros_like(x), np.zeros_like(x)
    return Run(sort_rows_kernel, (1,), (x, up, down), dict(M=8, N=32, num_warps=2),
               [Output("ascending", up, np.sort(x, axis=1)), Output("descending", down, -np.sort(-x, axis=1))])


# -------------------- 3-D loads, permutes, 16-bit transposes
@triton.jit
def load_3d_kernel(x_ptr, sum_ptr, twice_ptr, n, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    rb, rm, rn = tl.arange(0, B), tl.arange(0, M), tl.arange(0, N)
    at = rb[:, None, None] * M * n + rm[None, :, None] * n + rn[None, None, :]
    mask = rn[None, None, :] < n
    x = tl.load(x_ptr + at, mask=mask, other=0)
    tl.store(sum_ptr + rb[:, None] * n + rn[None, :], tl.sum(x, axis=1), mask=rn[None, :] < n)
    tl.store(twice_ptr + at, x * 2, mask=mask)


@case()
def h_load_3d_masked(arch, rng):
    B, M, n = 4, 8, 27
    x = rng.integers(-1000, 1000, (B, M, n)).astype(np.int32)
    sums, twice = np.zeros((B, n), np.int32), np.zeros_like(x)
    return Run(load_3d_kernel, (1,), (x, sums, twice, n), dict(B=B, M=M, N=32, num_warps=4),
               [Output("sum over axis 1", sums, x.sum(axis=1, dtype=np.int32)), Output("twice", twice, 2 * x)])


@triton.jit
def permute_kernel(x_ptr, p_ptr, t_ptr, M, N, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr):
    ra, rb, rc = tl.arange(0, A), tl.arange(0, B), tl.arange(0, C)
    cube = tl.load(x_ptr + ra[:, None, None] * B * C + rb[None, :, None] * C + rc[None, None, :])
    moved = tl.permute(cube, (2, 0, 1))  # [c, a, b]
    tl.store(p_ptr + rc[:, None, None] * A * B + ra[None, :, None] * B + rb[None, None, :], moved,
             mask=tl.program_id(0) == 0)
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask)
    tl.store(t_ptr + rn[:, None] * M + rm[None, :], tl.trans(tile), mask=tl.trans(mask))


@case()
def h_permute_3d_and_16_bit_transpose(arch, rng):
    A, B, C = 2, 8, 16
    M, N = 40, 24
    x = rng.integers(-30000, 30000, max(A * B * C, M * N)).astype(np.int16)
    p = np.zeros((C, A, B), np.int16)
    t = np.full((N, M), 7, np.int16)
    cube = x[: A * B * C].reshape(A, B, C)
    return Run(permute_kernel, (triton.cdiv(M, 32),), (x, p, t, M, N), dict(A=A, B=B, C=C, BM=32, BN=32, num_warps=4),
               [Output("permuted", p, cube.transpose(2, 0, 1)), Output("transposed", t, x[: M * N].reshape(M, N).T)])


# -------------------- int8 dot through a K loop
@triton.jit
def ragged_dot_kernel(a_ptr, b_ptr, c_ptr, K, M: tl.constexpr, N: tl.constexpr, BK: tl.constexpr):
    """C = A B of int8 through a K loop whose last step is masked (K not a multiple of BK)."""
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    acc = tl.zeros((M, N), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BK)):
        rk = k * BK + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=rk[None, :] < K, other=0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=rk[:, None] < K, other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@case()
def h_dot_int8_ragged_k_loop(arch, rng):
    M, N, K = 64, 32, 112
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    c = np.zeros((M, N), np.int32)
    return Run(ragged_dot_kernel, (1,), (a, b, c, K), dict(M=M, N=N, BK=32, num_warps=4),
               [Output("c", c, a.astype(np.int32) @ b.astype(np.int32))])


# -------------------- atomics: unsigned and 64-bit, memory orders and scopes
@triton.jit
def atomic_kinds_kernel(u_ptr, umax_ptr, umin_ptr, w_ptr, wmax_ptr, wadd_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    u = tl.load(u_ptr + offs, mask=mask)
    tl.atomic_max(umax_ptr + offs % 4, u, mask=mask)
    tl.atomic_min(umin_ptr + offs % 4, u, mask=mask, sem="relaxed")
    w = tl.load(w_ptr + offs, mask=mask)
    tl.atomic_max(wmax_ptr + offs % 4, w, mask=mask, sem="release", scope="gpu")
    tl.atomic_add(wadd_ptr + offs % 4, w, mask=mask, sem="acq_rel", scope="sys")
    tl.atomic_add(c_ptr + offs % 4, 1, mask=mask, sem="relaxed", scope="cta")


@case()
def h_atomics_unsigned_64_bit_scoped(arch, rng):
    """atomic_max/min of uint32 (an unsigned comparison: values past 2^31 are the largest), max and add of
    int64, with memory orders and scopes; the counters count each program's elements."""
    n = 1000
    u = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    w = rng.integers(-2 ** 40, 2 ** 40, n).astype(np.int64)
    umax, umin = np.zeros(4, np.uint32), np.full(4, 2 ** 32 - 1, np.uint32)
    wmax, wadd = np.full(4, -2 ** 62, np.int64), np.zeros(4, np.int64)
    counts = np.zeros(4, np.int32)
    slot = np.arange(n) % 4
    return Run(atomic_kinds_kernel, (triton.cdiv(n, 256),), (u, umax, umin, w, wmax, wadd, counts, n), dict(BLOCK=256),
               [Output("umax", umax, np.array([u[slot == s].max() for s in range(4)], np.uint32)),
                Output("umin", umin, np.array([u[slot == s].min() for s in range(4)], np.uint32)),
                Output("wmax", wmax, np.array([w[slot == s].max() for s in range(4)], np.int64)),
                Output("wadd", wadd, np.array([w[slot == s].sum() for s in range(4)], np.int64)),
                Output("counts", counts, np.bincount(slot, minlength=4).astype(np.int32))])


# -------------------- bitcasts, integer casts, umulhi
@triton.jit
def casts_kernel(f_ptr, w_ptr, b_ptr, bits_ptr, narrow_ptr, wide_ptr, ufloat_ptr, u16_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    f = tl.load(f_ptr + offs)
    w = tl.load(w_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(bits_ptr + offs, f.to(tl.int32, bitcast=True) ^ 0x7FFFFFFF)
    tl.store(narrow_ptr + offs, w.to(tl.int8))
    tl.store(wide_ptr + offs, b.to(tl.int32) * 1000)
    tl.store(ufloat_ptr + offs, b.to(tl.uint8, bitcast=True).to(tl.float32))
    tl.store(u16_ptr + offs, w.to(tl.uint16))


@case()
def h_bitcasts_and_integer_casts(arch, rng):
    n = 256
    f = rng.standard_normal(n).astype(np.float32)
    w = rng.integers(-2 ** 40, 2 ** 40, n).astype(np.int64)
    b = rng.integers(-128, 128, n).astype(np.int8)
    outs = [np.zeros(n, np.int32), np.zeros(n, np.int8), np.zeros(n, np.int32), np.zeros(n, np.float32),
            np.zeros(n, np.uint16)]
    wants = [f.view(np.int32) ^ np.int32(0x7FFFFFFF), w.astype(np.int8), b.astype(np.int32) * 1000,
             b.view(np.uint8).astype(np.float32), w.astype(np.uint16)]
    return Run(casts_kernel, (1,), (f, w, b, *outs), dict(BLOCK=n),
               [Output(label, out, want) for label, out, want in
                zip(("bitcast", "int64 to int8", "int8 to int32", "uint8 to f32", "int64 to uint16"), outs, wants)])


@triton.jit
def umulhi_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.umulhi(tl.load(x_ptr + offs), tl.load(y_ptr + offs)))


@case()
def h_umulhi_signed_and_64_bit(arch, rng):
    """umulhi of int32 and of uint64: the high half of the unsigned product (mul.hi.u32 for int32 too)."""
    n = 256
    runs = []
    for dtype, bits in ((np.int32, 32), (np.uint64, 64)):
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        y = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        out = np.zeros(n, dtype)
        unsigned = np.uint64 if bits == 64 else np.uint32
        want = np.array([(int(a) * int(b)) >> bits for a, b in zip(x.view(unsigned), y.view(unsigned))],
                        unsigned).view(dtype)
        runs.append(Run(umulhi_kernel, (1,), (x, y, out), dict(BLOCK=n), [Output(f"umulhi {np.dtype(dtype)}", out, want)]))
    return chain(runs)


# -------------------- rounding modes of casts
@triton.jit
def round_cast_kernel(x_ptr, rtne_ptr, rtz_ptr, bf_rtz_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(rtne_ptr + offs, x.to(tl.float16, fp_downcast_rounding="rtne"))
    tl.store(rtz_ptr + offs, x.to(tl.float16, fp_downcast_rounding="rtz"))
    tl.store(bf_rtz_ptr + offs, x.to(tl.bfloat16, fp_downcast_rounding="rtz"))


def _toward_zero(x: np.ndarray, dtype) -> np.ndarray:
    """x rounded toward zero to `dtype` (NaN stays NaN; beyond the largest finite value, the largest)."""
    with np.errstate(over="ignore"):
        nearest = x.astype(dtype)
    wide = nearest.astype(np.float64)
    over = np.abs(wide) > np.abs(x.astype(np.float64))
    stepped = np.nextafter(nearest, np.zeros_like(nearest))
    return np.where(over & ~np.isnan(x), stepped, nearest).astype(dtype)


@case()
def h_cast_rounding_modes(arch, rng):
    import ml_dtypes
    n = 512
    x = np.concatenate([rng.standard_normal(n - 16) * np.float32(1000), [70000, -70000, 65519, 65521, 1e-8, -3e-6,
                        np.inf, -np.inf, np.nan, 0, -0.0, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 2 ** -24, 3 * 2 ** -26,
                        -(2 ** -25)]]).astype(np.float32)
    rtne, rtz = np.zeros(n, np.float16), np.zeros(n, np.float16)
    bf_rtz = np.zeros(n, ml_dtypes.bfloat16)
    with np.errstate(over="ignore"):
        nearest = x.astype(np.float16)
    return Run(round_cast_kernel, (1,), (x, rtne, rtz, bf_rtz), dict(BLOCK=n),
               [Output("f16 rtne", rtne, nearest), Output("f16 rtz", rtz, _toward_zero(x, np.float16)),
                Output("bf16 rtz", bf_rtz, _toward_zero(x, ml_dtypes.bfloat16))])


# -------------------- reductions along axis 0
@triton.jit
def reduce_axis0_kernel(x_ptr, sum_ptr, max_ptr, argmin_ptr, xor_ptr, M, N: tl.constexpr, BM: tl.constexpr):
    rm, rn = tl.arange(0, BM), tl.arange(0, N)
    rows = rm[:, None] < M
    at = rm[:, None] * N + rn[None, :]
    x = tl.load(x_ptr + at, mask=rows, other=0)
    tl.store(sum_ptr + rn, tl.sum(x, axis=0))
    tl.store(max_ptr + rn, tl.max(tl.where(rows, x, -2147483648), axis=0))
    tl.store(argmin_ptr + rn, tl.argmin(tl.where(rows, x, 2147483647), axis=0))
    tl.store(xor_ptr + rn, tl.reduce(x, 0, _xor))


@triton.jit
def _xor(a, b):
    return a ^ b


@case()
def h_reductions_axis0_masked(arch, rng):
    """48 rows of a 64-row tile: sum, max, argmin (the first row of the least value: values repeat) and a
    custom xor reduction, along axis 0."""
    M, N = 48, 32
    x = rng.integers(-40, 40, (M, N)).astype(np.int32)
    outs = [np.zeros(N, np.int32) for _ in range(4)]
    wants = [x.sum(axis=0, dtype=np.int32), x.max(axis=0), x.argmin(axis=0).astype(np.int32),
             np.bitwise_xor.reduce(x, axis=0)]
    return Run(reduce_axis0_kernel, (1,), (x, *outs, M), dict(N=N, BM=64, num_warps=4),
               [Output(label, out, want) for label, out, want in zip(("sum", "max", "argmin", "xor"), outs, wants)])


# -------------------- join, split, interleave, gather
@triton.jit
def join_split_kernel(x_ptr, y_ptr, pairs_ptr, inter_ptr, first_ptr, second_ptr, N: tl.constexpr):
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rn)
    y = tl.load(y_ptr + rn)
    joined = tl.join(x, y)  # [N, 2]
    tl.store(pairs_ptr + rn[:, None] * 2 + tl.arange(0, 2)[None, :], joined)
    tl.store(inter_ptr + tl.arange(0, 2 * N), tl.interleave(x, y * 10))
    back = tl.load(pairs_ptr + rn[:, None] * 2 + tl.arange(0, 2)[None, :])
    a, b = tl.split(back)
    tl.store(first_ptr + rn, b)
    tl.store(second_ptr + rn, a)


@case()
def h_join_split_interleave(arch, rng):
    N = 64
    x, y = rng.integers(-99, 99, N).astype(np.int32), rng.integers(-99, 99, N).astype(np.int32)
    pairs, inter = np.zeros((N, 2), np.int32), np.zeros(2 * N, np.int32)
    first, second = np.zeros(N, np.int32), np.zeros(N, np.int32)
    interleaved = np.stack([x, y * 10], axis=1).reshape(-1)
    return Run(join_split_kernel, (1,), (x, y, pairs, inter, first, second), dict(N=N, num_warps=2),
               [Output("join", pairs, np.stack([x, y], axis=1)), Output("interleave", inter, interleaved),
                Output("split (second)", first, y), Output("split (first)", second, x)])


@triton.jit
def gather_kernel(src_ptr, idx_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    src = tl.load(src_ptr + rm[:, None] * N + tl.arange(0, N)[None, :])
    idx = tl.load(idx_ptr + rm[:, None] * K + tl.arange(0, K)[None, :])
    tl.store(out_ptr + rm[:, None] * K + tl.arange(0, K)[None, :], tl.gather(src, idx, axis=1))


@case()
def h_gather_axis1(arch, rng):
    M, N, K = 16, 32, 8
    src = rng.standard_normal((M, N)).astype(np.float32)
    idx = rng.integers(0, N, (M, K)).astype(np.int32)
    out = np.zeros((M, K), np.float32)
    return Run(gather_kernel, (1,), (src, idx, out), dict(M=M, N=N, K=K, num_warps=2),
               [Output("gather", out, np.take_along_axis(src, idx, axis=1))])


# -------------------- libdevice, integer division, clamp and NaN
@triton.jit
def libdevice_kernel(x_ptr, y_ptr, exact_ptr, hypot_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(exact_ptr + offs, libdevice.rint(x))
    tl.store(exact_ptr + BLOCK + offs, libdevice.trunc(x))
    tl.store(exact_ptr + 2 * BLOCK + offs, libdevice.copysign(x, y))
    tl.store(exact_ptr + 3 * BLOCK + offs, libdevice.fmod(x, y))
    tl.store(exact_ptr + 4 * BLOCK + offs, libdevice.nextafter(x, y))
    tl.store(exact_ptr + 5 * BLOCK + offs, libdevice.ldexp(x, (y * 4).to(tl.int32)))
    tl.store(hypot_ptr + offs, libdevice.hypot(x, y))


@case()
def h_libdevice_exact_and_hypot(arch, rng):
    n = 256
    x = (rng.standard_normal(n) * 10).astype(np.float32)
    x[:6] = [2.5, -2.5, 3.5, 0.5, -0.0, 1e30]
    y = rng.standard_normal(n).astype(np.float32)
    exact_out, hyp = np.zeros(6 * n, np.float32), np.zeros(n, np.float32)
    # libdevice as Triton links it flushes subnormals (__CUDA_FTZ): from zero, nextafter steps to the
    # smallest normal, with the sign of the direction
    smallest = np.float32(np.finfo(np.float32).tiny)
    step = np.where((x == 0) & (y != 0), np.copysign(smallest, y), np.nextafter(x, y))
    want = np.concatenate([np.rint(x), np.trunc(x), np.copysign(x, y), np.fmod(x, y), step,
                           np.ldexp(x, (y * 4).astype(np.int32))]).astype(np.float32)
    return Run(libdevice_kernel, (1,), (x, y, exact_out, hyp), dict(BLOCK=n),
               [Output("rint, trunc, copysign, fmod, nextafter, ldexp", exact_out, want),
                Output("hypot", hyp, np.hypot(x.astype(np.float64), y.astype(np.float64)), ulps(2))])


@triton.jit
def int_div_kernel(a_ptr, b_ptr, q_ptr, r_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(q_ptr + offs, a // b)
    tl.store(r_ptr + offs, a % b)


def _c_division(a: np.ndarray, b: np.ndarray):
    """C's quotient (toward zero) and remainder (the dividend's sign), which Triton's // and % give on ints."""
    q = np.array([abs(int(x)) // abs(int(y)) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a, b)], a.dtype)
    return q, (a - q * b).astype(a.dtype)


@case()
def h_integer_division_32_and_64_bit(arch, rng):
    n = 256
    runs = []
    for dtype, span in ((np.int32, 2 ** 31 - 1), (np.int64, 2 ** 62), (np.uint32, 2 ** 32 - 1)):
        low = 0 if dtype == np.uint32 else -span
        a = rng.integers(low, span, n, dtype=dtype, endpoint=True)
        b = rng.integers(1, 1000, n).astype(dtype) * (1 if dtype == np.uint32 else rng.choice([-1, 1], n).astype(dtype))
        b[:8] = rng.integers(1, span, 8, dtype=dtype, endpoint=True)  # large divisors too
        q, r = np.zeros_like(a), np.zeros_like(a)
        want_q, want_r = _c_division(a, b)
        runs.append(Run(int_div_kernel, (1,), (a, b, q, r), dict(BLOCK=n),
                        [Output(f"{np.dtype(dtype)} //", q, want_q), Output(f"{np.dtype(dtype)} %", r, want_r)]))
    return chain(runs)


@triton.jit
def clamp_nan_kernel(x_ptr, y_ptr, clamp_ptr, clamp_nan_ptr, min_ptr, max_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(clamp_ptr + offs, tl.clamp(x, -0.5, 0.75))
    tl.store(clamp_nan_ptr + offs, tl.clamp(x, -0.5, 0.75, propagate_nan=tl.PropagateNan.ALL))
    tl.store(min_ptr + offs, tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL))
    tl.store(max_ptr + offs, tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL))


@case()
def h_clamp_and_nan_propagating_min_max(arch, rng):
    n = 256
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x[::7], y[::11] = np.nan, np.nan
    outs = [np.zeros(n, np.float32) for _ in range(4)]
    low, high = np.float32(-0.5), np.float32(0.75)
    with np.errstate(invalid="ignore"):
        # without propagate_nan, clamp is max.f32 then min.f32: a NaN gives the low bound
        wants = [np.fmin(np.fmax(x, low), high), np.clip(x, low, high), np.minimum(x, y), np.maximum(x, y)]
    return Run(clamp_nan_kernel, (1,), (x, y, *outs), dict(BLOCK=n),
               [Output(label, out, want) for label, out, want in
                zip(("clamp", "clamp propagating NaN", "minimum", "maximum"), outs, wants)])


# -------------------- f64 arithmetic, cache modifiers
@triton.jit
def f64_kernel(x_ptr, y_ptr, out_ptr, exp_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, tl.sqrt(x * x + y))
    tl.store(out_ptr + BLOCK + offs, x / y)
    tl.store(out_ptr + 2 * BLOCK + offs, tl.fma(x, y, x))
    tl.store(exp_ptr + offs, libdevice.exp(x))


@case()
def h_f64_arithmetic_and_exp(arch, rng):
    from fractions import Fraction
    n = 128
    x, y = rng.standard_normal(n), rng.uniform(0.5, 2.0, n)
    out, e = np.zeros(3 * n), np.zeros(n)
    def fma(a, b, c):  # a * b + c rounded once
        return np.array([float(Fraction(p) * Fraction(q) + Fraction(r)) for p, q, r in zip(a, b, c)])
    # x * x + y is one fma (Triton contracts it: enable_fp_fusion)
    want = np.concatenate([np.sqrt(fma(x, x, y)), x / y, fma(x, y, x)])
    return Run(f64_kernel, (1,), (x, y, out, e), dict(BLOCK=n),
               [Output("sqrt, div, fma", out, want), Output("exp", e, np.exp(x), ulps(1))])


@triton.jit
def cache_modifier_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(x_ptr + offs, mask=mask, cache_modifier=".cg")
    b = tl.load(x_ptr + n + offs, mask=mask, volatile=True)
    c = tl.load(x_ptr + 2 * n + offs, mask=mask, cache_modifier=".ca") + tl.load(x_ptr + offs, mask=mask,
                                                                                eviction_policy="evict_first")
    tl.store(y_ptr + offs, a + b, mask=mask, cache_modifier=".cs")
    tl.store(y_ptr + n + offs, c * 3, mask=mask, cache_modifier=".wt")
    tl.store(y_ptr + 2 * n + offs, a, mask=mask, eviction_policy="evict_last")


@case()
def h_cache_modifiers_and_volatile(arch, rng):
    n = 300
    x = rng.standard_normal(3 * n).astype(np.float32)
    y = np.zeros(3 * n, np.float32)
    return Run(cache_modifier_kernel, (triton.cdiv(n, 128),), (x, y, n), dict(BLOCK=128),
               [Output("y", y, np.concatenate([x[:n] + x[n:2 * n], (x[2 * n:] + x[:n]) * np.float32(3), x[:n]]))])


# -------------------- libdevice's integer intrinsics
@triton.jit
def int_intrinsics_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, libdevice.mul24(x, y))
    tl.store(out_ptr + BLOCK + offs, libdevice.sad(x, y, x.to(tl.uint32, bitcast=True)))
    tl.store(out_ptr + 2 * BLOCK + offs, libdevice.hadd(x, y))
    tl.store(out_ptr + 3 * BLOCK + offs, libdevice.rhadd(x, y))
    tl.store(out_ptr + 4 * BLOCK + offs, libdevice.byte_perm(x, y, 0x5140))
    tl.store(out_ptr + 5 * BLOCK + offs, libdevice.brev(x))
    tl.store(out_ptr + 6 * BLOCK + offs, libdevice.popc(x))
    tl.store(out_ptr + 7 * BLOCK + offs, libdevice.clz(x))
    tl.store(out_ptr + 8 * BLOCK + offs, libdevice.ffs(x))
    tl.store(out_ptr + 9 * BLOCK + offs, libdevice.mulhi(x, y))


def _s32(values) -> np.ndarray:
    return np.array([int(v) & 0xFFFFFFFF for v in values], np.uint32).view(np.int32)


def _mul24(a: int, b: int) -> int:
    """mul24.lo.s32: the low 32 bits of the product of the sign-extended low 24 bits of each."""
    def low24(v):
        v &= 0xFFFFFF
        return v - (1 << 24) if v & 0x800000 else v
    return low24(a) * low24(b)


def _byte_perm(x: int, y: int, selector: int) -> int:
    data = (x & 0xFFFFFFFF) | (y & 0xFFFFFFFF) << 32
    return sum(((data >> (8 * ((selector >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))


@case()
def h_libdevice_integer_intrinsics(arch, rng):
    """mul24, sad, hadd, rhadd, byte_perm, brev, popc, clz, ffs and mulhi of int32 (libdevice's __nv_*)."""
    n = 256
    x = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    y = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    x[:4], y[:4] = [0, -1, 1 << 23, -(1 << 31)], [5, -1, 1 << 23, 3]
    out = np.zeros(10 * n, np.int32)
    xs, ys = [int(v) for v in x], [int(v) for v in y]
    bits = [v & 0xFFFFFFFF for v in xs]
    want = np.concatenate([
        _s32(_mul24(a, b) for a, b in zip(xs, ys)),
        _s32(abs(a - b) + (a & 0xFFFFFFFF) for a, b in zip(xs, ys)),
        _s32((a + b) >> 1 for a, b in zip(xs, ys)),
        _s32((a + b + 1) >> 1 for a, b in zip(xs, ys)),
        _s32(_byte_perm(a, b, 0x5140) for a, b in zip(xs, ys)),
        _s32(int(f"{v:032b}"[::-1], 2) for v in bits),
        _s32(bin(v).count("1") for v in bits),
        _s32(32 - v.bit_length() for v in bits),
        _s32((v & -v).bit_length() for v in bits),
        _s32((a * b) >> 32 for a, b in zip(xs, ys))])
    return Run(int_intrinsics_kernel, (1,), (x, y, out), dict(BLOCK=n),
               [Output("mul24, sad, hadd, rhadd, byte_perm, brev, popc, clz, ffs, mulhi", out, want)])


# -------------------- directed rounding (libdevice's _rd, _ru, _rz)
@triton.jit
def directed_rounding_kernel(x_ptr, y_ptr, i_ptr, d_ptr, f_ptr, n_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    i = tl.load(i_ptr + offs)
    d = tl.load(d_ptr + offs)
    tl.store(f_ptr + offs, libdevice.add_rd(x, y))
    tl.store(f_ptr + BLOCK + offs, libdevice.add_ru(x, y))
    tl.store(f_ptr + 2 * BLOCK + offs, libdevice.mul_rz(x, y))
    tl.store(f_ptr + 3 * BLOCK + offs, libdevice.div_ru(x, y))
    tl.store(f_ptr + 4 * BLOCK + offs, libdevice.fma_rd(x, y, x))
    tl.store(f_ptr + 5 * BLOCK + offs, libdevice.int2float_ru(i))
    tl.store(f_ptr + 6 * BLOCK + offs, libdevice.int2float_rd(i))
    tl.store(f_ptr + 7 * BLOCK + offs, libdevice.double2float_rz(d))
    tl.store(f_ptr + 8 * BLOCK + offs, libdevice.sqrt_ru(tl.abs(x)))
    tl.store(n_ptr + offs, libdevice.float2int_rd(x * 1000))
    tl.store(n_ptr + BLOCK + offs, libdevice.float2int_ru(x * 1000))
    tl.store(n_ptr + 2 * BLOCK + offs, libdevice.float2int_rn(x * 1000))


def _round_f32(q, mode: str) -> np.float32:
    """The rational q rounded to f32 toward -inf (rd), +inf (ru), zero (rz) or to nearest even (rn)."""
    from fractions import Fraction
    guess = np.float32(float(q))
    around = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    below = max(c for c in around if Fraction(float(c)) <= q)
    above = min(c for c in around if Fraction(float(c)) >= q)
    if mode == "rn":
        return _round_nearest(q, below, above)
    return {"rd": below, "ru": above, "rz": below if q >= 0 else above}[mode]


def _round_nearest(q, below, above):
    from fractions import Fraction
    low, high = q - Fraction(float(below)), Fraction(float(above)) - q
    if low != high:
        return below if low < high else above
    return below if int(np.float32(below).view(np.uint32)) % 2 == 0 else above


@case()
def h_directed_rounding(arch, rng):
    from fractions import Fraction
    n = 128
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    y = (rng.standard_normal(n) + 0.1).astype(np.float32)
    i = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    d = rng.standard_normal(n) * 1e3
    f, nearest = np.zeros(9 * n, np.float32), np.zeros(3 * n, np.int32)
    fx, fy = [Fraction(float(v)) for v in x], [Fraction(float(v)) for v in y]

    def rounded(values, mode):
        return np.array([_round_f32(v, mode) for v in values], np.float32)

    def sqrt_up(v):  # the least f32 whose square is at least v
        r = np.float32(np.sqrt(np.float64(v)))
        while Fraction(float(r)) ** 2 < Fraction(float(v)):
            r = np.nextafter(r, np.float32(np.inf))
        while r > 0 and Fraction(float(np.nextafter(r, np.float32(0)))) ** 2 >= Fraction(float(v)):
            r = np.nextafter(r, np.float32(0))
        return r
    want_f = np.concatenate([
        rounded([a + b for a, b in zip(fx, fy)], "rd"), rounded([a + b for a, b in zip(fx, fy)], "ru"),
        rounded([a * b for a, b in zip(fx, fy)], "rz"), rounded([a / b for a, b in zip(fx, fy)], "ru"),
        rounded([a * b + a for a, b in zip(fx, fy)], "rd"), rounded([Fraction(int(v)) for v in i], "ru"),
        rounded([Fraction(int(v)) for v in i], "rd"), rounded([Fraction(float(v)) for v in d], "rz"),
        np.array([sqrt_up(abs(v)) for v in x], np.float32)])
    scaled = x * np.float32(1000)
    want_n = np.concatenate([np.floor(scaled), np.ceil(scaled), np.rint(scaled)]).astype(np.int32)
    return Run(directed_rounding_kernel, (1,), (x, y, i, d, f, nearest), dict(BLOCK=n),
               [Output("add_rd, add_ru, mul_rz, div_ru, fma_rd, int2float_ru/rd, double2float_rz, sqrt_ru", f, want_f),
                Output("float2int_rd, _ru, _rn", nearest, want_n)])


# -------------------- f64 libdevice: pow, log, exp
@triton.jit
def f64_libdevice_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, libdevice.pow(x, y))
    tl.store(out_ptr + BLOCK + offs, libdevice.log(x))
    tl.store(out_ptr + 2 * BLOCK + offs, libdevice.exp(y))


@case()
def h_f64_pow_log_exp(arch, rng):
    n = 128
    x, y = rng.uniform(0.1, 10, n), rng.uniform(-4, 4, n)
    out = np.zeros(3 * n)
    return Run(f64_libdevice_kernel, (1,), (x, y, out), dict(BLOCK=n),
               [Output("pow, log, exp", out, np.concatenate([x ** y, np.log(x), np.exp(y)]), ulps(2))])


# -------------------- 16-bit float atomics, inline asm, batched dot, max with indices
@triton.jit
def half_atomics_kernel(x_ptr, h_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.atomic_add(h_ptr + offs % 8, x.to(tl.float16), mask=mask)
    tl.atomic_add(b_ptr + offs % 8, x.to(tl.bfloat16), mask=mask)


@case()
def h_atomic_add_f16_bf16(arch, rng):
    """atomic adds of f16 and bf16, of small integers: every partial sum is exact, whatever the order."""
    import ml_dtypes
    n = 600
    x = rng.integers(-4, 5, n).astype(np.float32)
    h, b = np.zeros(8, np.float16), np.zeros(8, ml_dtypes.bfloat16)
    sums = np.array([x[s::8].sum() for s in range(8)])
    return Run(half_atomics_kernel, (triton.cdiv(n, 128),), (x, h, b, n), dict(BLOCK=128),
               [Output("f16", h, sums.astype(np.float16)), Output("bf16", b, sums.astype(ml_dtypes.bfloat16))])


@triton.jit
def inline_asm_kernel(x_ptr, y_ptr, s_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    s = tl.load(s_ptr + offs)
    z = tl.inline_asm_elementwise("shf.l.wrap.b32 $0, $1, $2, $3;", "=r,r,r,r", [x, y, s], dtype=tl.uint32,
                                  is_pure=True, pack=1)
    tl.store(out_ptr + offs, z)


@case()
def h_inline_asm_funnel_shift(arch, rng):
    n = 128
    x = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    y = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    s = rng.integers(0, 64, n).astype(np.uint32)
    out = np.zeros(n, np.uint32)
    # shf.l.wrap: (y:x << (s mod 32)), the high word
    want = np.array([(((int(b) << 32 | int(a)) << (int(k) % 32)) >> 32) & 0xFFFFFFFF for a, b, k in zip(x, y, s)],
                    np.uint32)
    return Run(inline_asm_kernel, (1,), (x, y, s, out), dict(BLOCK=n), [Output("shf.l.wrap", out, want)])


@triton.jit
def batched_dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rb, rm, rn, rk = tl.arange(0, B), tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rb[:, None, None] * M * K + rm[None, :, None] * K + rk[None, None, :])
    b = tl.load(b_ptr + rb[:, None, None] * K * N + rk[None, :, None] * N + rn[None, None, :])
    tl.store(c_ptr + rb[:, None, None] * M * N + rm[None, :, None] * N + rn[None, None, :], tl.dot(a, b))


@case()
def h_batched_dot_3d(arch, rng):
    """A 3-D tl.dot (a batch of 2 products) of f16 small integers: exact in f32."""
    B, M, N, K = 2, 16, 32, 32
    a = rng.integers(-8, 9, (B, M, K)).astype(np.float16)
    b = rng.integers(-8, 9, (B, K, N)).astype(np.float16)
    c = np.zeros((B, M, N), np.float32)
    return Run(batched_dot_kernel, (1,), (a, b, c), dict(B=B, M=M, N=N, K=K, num_warps=4),
               [Output("c", c, np.matmul(a.astype(np.float32), b.astype(np.float32)))])


@triton.jit
def max_indices_kernel(x_ptr, v_ptr, i_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    x = tl.load(x_ptr + rm[:, None] * N + tl.arange(0, N)[None, :])
    value, index = tl.max(x, axis=1, return_indices=True, return_indices_tie_break_left=True)
    tl.store(v_ptr + rm, value)
    tl.store(i_ptr + rm, index)


@case()
def h_max_with_indices_ties(arch, rng):
    """tl.max(return_indices=True) of f16 rows with repeated maxima: the leftmost index."""
    M, N = 16, 64
    x = rng.integers(-6, 7, (M, N)).astype(np.float16)
    v, i = np.zeros(M, np.float16), np.zeros(M, np.int32)
    return Run(max_indices_kernel, (1,), (x, v, i), dict(M=M, N=N, num_warps=2),
               [Output("max", v, x.max(axis=1)), Output("index", i, x.argmax(axis=1).astype(np.int32))])
