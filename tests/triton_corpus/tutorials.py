# Triton's tutorials 01-10, in their style, at small sizes: vector add, fused softmax, matrix
# multiplication (fp16, bf16, fp32, tf32; grouped ordering; a persistent one, and one with host TMA
# descriptors), low-memory dropout (tl.rand), layer normalisation forward and backward (with its
# spin lock), fused attention forward, libdevice, grouped GEMM, 8-bit float and block-scaled matmuls.
#
# Deviations from the tutorials, each for the emulator's sake: sizes are small; the grouped GEMM
# reads element offsets into one buffer per operand where the tutorial reads a table of device pointers
# (an int64 tensor of data_ptr()s is host addresses, which mean nothing to the emulator's memory); no
# @triton.autotune (each case names one configuration).
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from phobos.run.emulator import UnsupportedPtx

from .cases import Output, Run, case, close, dot_bound, magnitude_bound, ulps

LOG2E = 1.4426950408889634



def _ml_dtype(name: str):
    import ml_dtypes
    return getattr(ml_dtypes, name)


# -------------------- 01 vector add
@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)


@case()
def t01_vector_add(arch, rng):
    n = 1000
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    return Run(add_kernel, lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),), (x, y, out, n),
               dict(BLOCK_SIZE=256), [Output("output", out, x + y)])


@case(requires=("torch",))
def t01_vector_add_torch(arch, rng):
    import torch
    n = 777
    x = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    y = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    out = torch.empty_like(x)
    return Run(add_kernel, (triton.cdiv(n, 128),), (x, y, out, n), dict(BLOCK_SIZE=128, num_warps=2),
               [Output("output", out, (x + y).numpy())])


# -------------------- 02 fused softmax
@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float('inf'))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


@case()
def t02_fused_softmax(arch, rng):
    n_rows, n_cols = 37, 200
    buffer = rng.standard_normal((n_rows, 256)).astype(np.float32) * 4
    x = buffer[:, :n_cols]  # a strided view: rows 256 elements apart
    y = np.zeros((n_rows, n_cols), np.float32)
    return Run(softmax_kernel, (8,), (y, x, x.strides[0] // 4, y.strides[0] // 4, n_rows, n_cols),
               dict(BLOCK_SIZE=triton.next_power_of_2(n_cols), num_stages=2, num_warps=4),
               [Output("output", y, _softmax(x), close(2e-6, 1e-9))])


# -------------------- 03 matmul
@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr, ACTIVATION: tl.constexpr, INPUT_PRECISION: tl.constexpr = None):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    tl.assume(stride_am > 0)
    tl.assume(stride_ak > 0)
    tl.assume(stride_bn > 0)
    tl.assume(stride_bk > 0)
    tl.assume(stride_cm > 0)
    tl.assume(stride_cn > 0)

    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(c_ptr.dtype.element_ty)

    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


#: element type -> (numpy dtype of the operands, the products' relative rounding unit, output dtype)
MATMUL_TYPES = {
    "fp16": ("float16", 2.0 ** -23, "float16"),
    "bf16": ("bfloat16", 2.0 ** -23, "bfloat16"),
    "fp32": ("float32", 2.0 ** -23, "float32"),   # input_precision="ieee": f32 FMAs
    "tf32": ("float32", 2.0 ** -10, "float32"),   # the default for f32 operands: rounded to tf32
    # the products are exact in f32; Hopper keeps 13 fraction bits of their sums
    "e4m3": ("float8_e4m3fn", 2.0 ** -13, "float16"),
}


def _operand(rng, shape, dtype_name):
    dtype = _ml_dtype(dtype_name) if dtype_name in ("bfloat16", "float8_e4m3fn") else np.dtype(dtype_name)
    return (rng.standard_normal(shape) * 0.5).astype(np.float32).astype(dtype)


def _matmul_run(rng, kind, M, N, K, activation="", **config):
    in_dtype, unit, out_dtype = MATMUL_TYPES[kind]
    a = _operand(rng, (M, K), in_dtype)
    b = _operand(rng, (K, N), in_dtype)
    c = np.zeros((M, N), _ml_dtype(out_dtype) if out_dtype == "bfloat16" else out_dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    if activation == "leaky_relu":
        want = np.where(want >= 0, want, 0.01 * want)
    out_unit = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24}[out_dtype]
    config = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=32, GROUP_SIZE_M=2, num_warps=4,
                  num_stages=3) | config
    precision = {"fp32": "ieee", "tf32": "tf32"}.get(kind)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)
    return Run(matmul_kernel, grid,
               (a, b, c, M, N, K, a.strides[0] // a.itemsize, a.strides[1] // a.itemsize,
                b.strides[0] // b.itemsize, b.strides[1] // b.itemsize, N, 1),
               dict(ACTIVATION=activation, INPUT_PRECISION=precision, **config),
               [Output("c", c, want, dot_bound(a, b, unit, out_unit))])


@case(heavy=True)
def t03_matmul_fp16_leaky_relu(arch, rng):
    return _matmul_run(rng, "fp16", 128, 128, 96, activation="leaky_relu")


@case(heavy=True)
def t03_matmul_bf16(arch, rng):
    """num_stages=1: no cp.async pipeline, the operands go through registers to shared memory."""
    return _matmul_run(rng, "bf16", 96, 128, 64, num_stages=1)


@case(heavy=True)
def t03_matmul_fp32_ieee(arch, rng):
    return _matmul_run(rng, "fp32", 64, 96, 48, BLOCK_SIZE_K=16)


@case(heavy=True)
def t03_matmul_tf32(arch, rng):
    return _matmul_run(rng, "tf32", 64, 64, 64)


@case()
def t03_matmul_fp16_ragged(arch, rng):
    """M, N, K not multiples of the blocks: the masked K tail, the wrapped rows and columns."""
    return _matmul_run(rng, "fp16", 50, 40, 40, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=16, GROUP_SIZE_M=1,
                       num_stages=2)


# -------------------- 04 low-memory dropout
@triton.jit
def _seeded_dropout(x_ptr, output_ptr, n_elements, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    random = tl.rand(seed, offsets)
    x_keep = random > p
    output = tl.where(x_keep, x / (1 - p), 0.0)
    tl.store(output_ptr + offsets, output, mask=mask)


PHILOX_ROUND_A, PHILOX_ROUND_B = 0xD2511F53, 0xCD9E8D57
PHILOX_KEY_A, PHILOX_KEY_B = 0x9E3779B9, 0xBB67AE85


def philox(seed: int, offsets: np.ndarray) -> tuple[np.ndarray, ...]:
    """tl.randint4x(seed, offsets) for int32 offsets: Philox 4x32, 10 rounds (triton/language/random.py)."""
    mask = np.uint64(0xFFFFFFFF)
    c0, c1 = offsets.astype(np.uint64) & mask, np.zeros(len(offsets), np.uint64)
    c2, c3 = c1.copy(), c1.copy()
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    for _ in range(10):
        prev_c0, prev_c2 = c0, c2
        c0 = ((np.uint64(PHILOX_ROUND_B) * prev_c2) >> np.uint64(32)) ^ c1 ^ k0
        c2 = ((np.uint64(PHILOX_ROUND_A) * prev_c0) >> np.uint64(32)) ^ c3 ^ k1
        c1 = (np.uint64(PHILOX_ROUND_B) * prev_c2) & mask
        c3 = (np.uint64(PHILOX_ROUND_A) * prev_c0) & mask
        k0 = (k0 + np.uint64(PHILOX_KEY_A)) & mask
        k1 = (k1 + np.uint64(PHILOX_KEY_B)) & mask
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def uniform(bits: np.ndarray) -> np.ndarray:
    """uint_to_uniform_float of 32-bit values: |x| (as -x - 1 for negatives) times 4.6566127342e-10, in f32."""
    x = bits.view(np.int32)
    x = np.where(x < 0, -x - 1, x)
    return x.astype(np.float32) * np.float32(4.6566127342e-10)


@case()
def t04_low_memory_dropout(arch, rng):
    n, p, seed = 1000, 0.5, 123
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    keep = uniform(philox(seed, np.arange(n))[0]) > np.float32(p)
    want = np.where(keep, x / (np.float32(1) - np.float32(p)), np.float32(0))
    return Run(_seeded_dropout, (triton.cdiv(n, 256),), (x, out, n, p, seed), dict(BLOCK_SIZE=256),
               [Output("output", out, want, ulps(2))])


# -------------------- 05 layer norm
@triton.jit
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    mean = 0
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)


@triton.jit
def _layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, GROUP_SIZE_M: tl.constexpr,
                             BLOCK_SIZE_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = tl.where(mask, xhat, 0.)
    wdy = tl.where(mask, wdy, 0.)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = (dy).to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.debug_barrier()
    tl.atomic_xchg(Lock, 0)


@triton.jit
def _layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.)
        db += tl.load(DB + offs, mask=mask, other=0.)
    sum_dw = tl.sum(dw, axis=0)
    sum_db = tl.sum(db, axis=0)
    tl.store(FINAL_DW + cols, sum_dw, mask=cols < N)
    tl.store(FINAL_DB + cols, sum_db, mask=cols < N)


def _layer_norm_inputs(rng, M, N):
    x = (rng.standard_normal((M, N)) * 2 + 0.5).astype(np.float32)
    w = rng.random(N, dtype=np.float32) + 0.5
    b = rng.standard_normal(N).astype(np.float32)
    return x, w, b


@case()
def t05_layer_norm_forward(arch, rng):
    M, N, eps = 24, 300, 1e-5
    x, w, b = _layer_norm_inputs(rng, M, N)
    y = np.zeros_like(x)
    mean, rstd = np.zeros(M, np.float32), np.zeros(M, np.float32)
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=1)
    inv = 1 / np.sqrt(x64.var(axis=1) + eps)
    want_y = (x64 - mu[:, None]) * inv[:, None] * w + b
    return Run(_layer_norm_fwd_fused, (M,), (x, y, w, b, mean, rstd, N, N, eps), dict(BLOCK_SIZE=128, num_warps=4),
               [Output("mean", mean, mu, close(1e-6, 1e-6)), Output("rstd", rstd, inv, close(1e-5)),
                Output("y", y, want_y, close(1e-5, 1e-5))])


@case(deterministic=False)
def t05_layer_norm_backward(arch, rng):
    """dx per row; dw and db summed through GROUP_SIZE_M buffers guarded by a spin lock (atomic_cas,
    atomic_xchg), then reduced by a second kernel.  The lock's order varies on a GPU, so the sums'
    last bits do."""
    M, N, eps, group = 32, 128, 1e-5, 4
    x, w, b = _layer_norm_inputs(rng, M, N)
    dy = rng.standard_normal((M, N)).astype(np.float32)
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=1)
    rstd64 = 1 / np.sqrt(x64.var(axis=1) + eps)
    mean, rstd = mu.astype(np.float32), rstd64.astype(np.float32)
    xhat = (x64 - mu[:, None]) * rstd64[:, None]
    wdy = w * dy.astype(np.float64)
    c1 = (xhat * wdy).mean(axis=1, keepdims=True)
    c2 = wdy.mean(axis=1, keepdims=True)
    want_dx = (wdy - (xhat * c1 + c2)) * rstd64[:, None]
    want_dw, want_db = (dy * xhat).sum(axis=0), dy.astype(np.float64).sum(axis=0)
    dx = np.zeros_like(x)
    locks = np.zeros(2 * group, np.int32)
    partial_dw, partial_db = np.zeros((group, N), np.float32), np.zeros((group, N), np.float32)
    dw, db = np.zeros(N, np.float32), np.zeros(N, np.float32)
    second = Run(_layer_norm_bwd_dwdb, lambda meta: (triton.cdiv(N, meta["BLOCK_SIZE_N"]),),
                 (partial_dw, partial_db, dw, db, group, N), dict(BLOCK_SIZE_M=4, BLOCK_SIZE_N=64),
                 [Output("dw", dw, want_dw, close(1e-4, 1e-4)), Output("db", db, want_db, close(1e-4, 1e-4))])
    return Run(_layer_norm_bwd_dx_fused, (M,),
               (dx, dy, partial_dw, partial_db, x, w, mean, rstd, locks, N, N),
               dict(GROUP_SIZE_M=group, BLOCK_SIZE_N=128, num_warps=4),
               [Output("dx", dx, want_dx, close(1e-4, 1e-4))], then=second)


# -------------------- 06 fused attention
@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m, qk_scale, BLOCK_M: tl.constexpr,
                    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr, offs_m: tl.constexpr,
                    offs_n: tl.constexpr, N_CTX: tl.constexpr):
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    K_block_ptr = tl.advance(K_block_ptr, (0, lo))
    V_block_ptr = tl.advance(V_block_ptr, (lo, 0))
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = tl.load(K_block_ptr)
        qk = tl.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = tl.load(V_block_ptr)
        p = p.to(tl.float16)
        acc = tl.dot(p, v, acc)
        m_i = m_ij
        V_block_ptr = tl.advance(V_block_ptr, (BLOCK_N, 0))
        K_block_ptr = tl.advance(K_block_ptr, (0, BLOCK_N))
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(Q, K, V, sm_scale, M, Out, stride_qz, stride_qh, stride_qm, stride_qk, stride_kz, stride_kh,
              stride_kn, stride_kk, stride_vz, stride_vh, stride_vk, stride_vn, stride_oz, stride_oh, stride_om,
              stride_on, Z, H, N_CTX: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, STAGE: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    qvk_offset = off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
    Q_block_ptr = tl.make_block_ptr(base=Q + qvk_offset, shape=(N_CTX, HEAD_DIM), strides=(stride_qm, stride_qk),
                                    offsets=(start_m * BLOCK_M, 0), block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    V_block_ptr = tl.make_block_ptr(base=V + qvk_offset, shape=(N_CTX, HEAD_DIM), strides=(stride_vk, stride_vn),
                                    offsets=(0, 0), block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    K_block_ptr = tl.make_block_ptr(base=K + qvk_offset, shape=(HEAD_DIM, N_CTX), strides=(stride_kk, stride_kn),
                                    offsets=(0, 0), block_shape=(HEAD_DIM, BLOCK_N), order=(0, 1))
    O_block_ptr = tl.make_block_ptr(base=Out + qvk_offset, shape=(N_CTX, HEAD_DIM), strides=(stride_om, stride_on),
                                    offsets=(start_m * BLOCK_M, 0), block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale
    qk_scale *= 1.44269504
    q = tl.load(Q_block_ptr)
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m, qk_scale, BLOCK_M,
                                        HEAD_DIM, BLOCK_N, 4 - STAGE, offs_m, offs_n, N_CTX)
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m, qk_scale, BLOCK_M,
                                        HEAD_DIM, BLOCK_N, 2, offs_m, offs_n, N_CTX)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    m_ptrs = M + off_hz * N_CTX + offs_m
    tl.store(m_ptrs, m_i)
    tl.store(O_block_ptr, acc.to(Out.type.element_ty))


def _attention_run(rng, causal: bool):
    Z, H, N_CTX, HEAD_DIM, sm_scale = 1, 2, 128, 64, 0.5
    q, k, v = (rng.standard_normal((Z, H, N_CTX, HEAD_DIM)).astype(np.float16) for _ in range(3))
    o = np.zeros_like(q)
    m = np.zeros((Z * H, N_CTX), np.float32)
    scores = (q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), -1, -2)) * sm_scale
    if causal:
        scores = np.where(np.tril(np.ones((N_CTX, N_CTX), bool)), scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - top)
    total = weights.sum(axis=-1, keepdims=True)
    want_o = (weights / total) @ v.astype(np.float64)
    want_m = ((top + np.log(total))[..., 0] * LOG2E).reshape(Z * H, N_CTX)
    strides = [s // 2 for s in q.strides]
    return Run(_attn_fwd, lambda meta: (triton.cdiv(N_CTX, meta["BLOCK_M"]), Z * H, 1),
               (q, k, v, sm_scale, m, o, *strides, *strides, *strides, *strides, Z, H),
               dict(N_CTX=N_CTX, HEAD_DIM=HEAD_DIM, BLOCK_M=64, BLOCK_N=32, STAGE=3 if causal else 1, num_warps=4,
                    num_stages=2),
               # p is rounded to f16 before the second product: 2^-11 of each weight
               [Output("out", o, want_o, close(4e-3, 4e-3)), Output("M", m, want_m, close(1e-4, 1e-4))])


@case(heavy=True)
def t06_fused_attention(arch, rng):
    return _attention_run(rng, causal=False)


@case(heavy=True)
def t06_fused_attention_causal(arch, rng):
    return _attention_run(rng, causal=True)


# -------------------- 07 libdevice
@triton.jit
def asin_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    x = libdevice.asin(x)
    tl.store(y_ptr + offsets, x, mask=mask)


@case()
def t07_libdevice_asin(arch, rng):
    n = 512
    x = rng.uniform(-1, 1, n).astype(np.float32)
    x[:4] = [0.0, -0.0, 1.0, -1.0]
    y = np.zeros(n, np.float32)
    return Run(asin_kernel, (triton.cdiv(n, 256),), (x, y, n), dict(BLOCK_SIZE=256),
               # CUDA's asinf: at most 2 ulps (CUDA Math API, single precision)
               [Output("y", y, np.arcsin(x.astype(np.float64)), ulps(2))])


# -------------------- 08 grouped GEMM
@triton.jit
def grouped_matmul_kernel(a_ptr, b_ptr, c_ptr, group_a_offsets, group_b_offsets, group_c_offsets, group_gemm_sizes,
                          g_lds, group_size, NUM_SM: tl.constexpr, BLOCK_SIZE_M: tl.constexpr,
                          BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    tile_idx = tl.program_id(0)
    last_problem_end = 0
    for g in range(group_size):
        gm = tl.load(group_gemm_sizes + g * 3)
        gn = tl.load(group_gemm_sizes + g * 3 + 1)
        gk = tl.load(group_gemm_sizes + g * 3 + 2)
        num_m_tiles = tl.cdiv(gm, BLOCK_SIZE_M)
        num_n_tiles = tl.cdiv(gn, BLOCK_SIZE_N)
        num_tiles = num_m_tiles * num_n_tiles
        while (tile_idx >= last_problem_end and tile_idx < last_problem_end + num_tiles):
            k = gk
            lda = tl.load(g_lds + g * 3)
            ldb = tl.load(g_lds + g * 3 + 1)
            ldc = tl.load(g_lds + g * 3 + 2)
            a_base = a_ptr + tl.load(group_a_offsets + g)
            b_base = b_ptr + tl.load(group_b_offsets + g)
            c_base = c_ptr + tl.load(group_c_offsets + g)
            tile_idx_in_gemm = tile_idx - last_problem_end
            tile_m_idx = tile_idx_in_gemm // num_n_tiles
            tile_n_idx = tile_idx_in_gemm % num_n_tiles
            offs_am = tile_m_idx * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_bn = tile_n_idx * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            offs_k = tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_base + offs_am[:, None] * lda + offs_k[None, :]
            b_ptrs = b_base + offs_k[:, None] * ldb + offs_bn[None, :]
            accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for kk in range(0, tl.cdiv(k, BLOCK_SIZE_K)):
                tl.multiple_of(a_ptrs, [16, 16])
                tl.multiple_of(b_ptrs, [16, 16])
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
                accumulator += tl.dot(a, b)
                a_ptrs += BLOCK_SIZE_K
                b_ptrs += BLOCK_SIZE_K * ldb
            c = accumulator.to(tl.float16)
            offs_cm = tile_m_idx * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_cn = tile_n_idx * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            c_ptrs = c_base + ldc * offs_cm[:, None] + offs_cn[None, :]
            tl.store(c_ptrs, c)
            tile_idx += NUM_SM
        last_problem_end = last_problem_end + num_tiles


@case(heavy=True)
def t08_grouped_gemm(arch, rng):
    sizes = [(64, 64, 32), (32, 64, 64), (64, 32, 32)]
    blocks = dict(BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32)
    a_list = [(rng.standard_normal((m, k)) * 0.5).astype(np.float16) for m, n, k in sizes]
    b_list = [(rng.standard_normal((k, n)) * 0.5).astype(np.float16) for m, n, k in sizes]
    a_all, b_all = np.concatenate([a.ravel() for a in a_list]), np.concatenate([b.ravel() for b in b_list])
    c_all = np.zeros(sum(m * n for m, n, _ in sizes), np.float16)

    def offsets(arrays):
        return np.cumsum([0] + [a.size for a in arrays[:-1]]).astype(np.int64)

    c_offsets = np.cumsum([0] + [m * n for m, n, _ in sizes[:-1]]).astype(np.int64)
    gemm_sizes = np.array(sizes, np.int32).ravel()
    lds = np.array([(k, n, n) for m, n, k in sizes], np.int32).ravel()
    want = np.concatenate([(a.astype(np.float64) @ b.astype(np.float64)).ravel() for a, b in zip(a_list, b_list)])
    magnitude = np.concatenate([(np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))).ravel()
                                for a, b in zip(a_list, b_list)])
    num_sm = 4
    return Run(grouped_matmul_kernel, (num_sm,),
               (a_all, b_all, c_all, offsets(a_list), offsets(b_list), c_offsets, gemm_sizes, lds, len(sizes)),
               dict(NUM_SM=num_sm, num_warps=4, **blocks),
               [Output("c", c_all, want, magnitude_bound(magnitude, 64, 2.0 ** -23, 2.0 ** -11))])


# -------------------- 09 persistent matmul
@triton.jit
def _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M: tl.constexpr):
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _tiles(M, N, K, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
           GROUP_SIZE_M: tl.constexpr):
    """The tiles of a persistent matmul: row blocks, tiles per group, tiles, K steps."""
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    return num_pid_m, GROUP_SIZE_M * num_pid_n, num_pid_m * num_pid_n, tl.cdiv(K, BLOCK_SIZE_K)


@triton.jit
def matmul_kernel_persistent(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                             stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                             BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr):
    start_pid = tl.program_id(axis=0)
    num_pid_m, num_pid_in_group, num_tiles, k_tiles = _tiles(M, N, K, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K,
                                                             GROUP_SIZE_M)
    tile_id_c = start_pid - NUM_SMS
    offs_k_for_mask = tl.arange(0, BLOCK_SIZE_K)
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        start_m = pid_m * BLOCK_SIZE_M
        start_n = pid_n * BLOCK_SIZE_N
        offs_am = start_m + tl.arange(0, BLOCK_SIZE_M)
        offs_bn = start_n + tl.arange(0, BLOCK_SIZE_N)
        offs_am = tl.where(offs_am < M, offs_am, 0)
        offs_bn = tl.where(offs_bn < N, offs_bn, 0)
        offs_am = tl.max_contiguous(tl.multiple_of(offs_am, BLOCK_SIZE_M), BLOCK_SIZE_M)
        offs_bn = tl.max_contiguous(tl.multiple_of(offs_bn, BLOCK_SIZE_N), BLOCK_SIZE_N)
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
            b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
            a = tl.load(a_ptrs, mask=offs_k_for_mask[None, :] < K - ki * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k_for_mask[:, None] < K - ki * BLOCK_SIZE_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
        tile_id_c += NUM_SMS
        pid_m, pid_n = _compute_pid(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        c = accumulator.to(tl.float16)
        tl.store(c_ptrs, c, mask=c_mask)


def _persistent_run(rng, M, N, K, num_sms):
    a = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
    b = (rng.standard_normal((K, N)) * 0.5).astype(np.float16)
    c = np.zeros((M, N), np.float16)
    return Run(matmul_kernel_persistent, (num_sms,), (a, b, c, M, N, K, K, 1, N, 1, N, 1),
               dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=2, NUM_SMS=num_sms, num_warps=4,
                    num_stages=3),
               [Output("c", c, a.astype(np.float64) @ b.astype(np.float64), dot_bound(a, b, 2.0 ** -23, 2.0 ** -11))])


@case(heavy=True)
def t09_persistent_matmul(arch, rng):
    """3 row blocks: the tile index the flattened loop computes past the last tile is in a group of 1."""
    return _persistent_run(rng, 192, 64, 64, 4)


@case(heavy=True)
def t09_persistent_matmul_tile_overshoot(arch, rng):
    """2 row blocks in groups of 2: past the last tile, group_size_m is 0, and the flattened loop's index of the
    next tile divides by it (rem.s32 by zero: all ones, as on the GPU; the value is never used)."""
    return _persistent_run(rng, 128, 64, 64, 3)


@triton.jit
def matmul_kernel_descriptor_persistent(a_desc, b_desc, c_desc, M, N, K, BLOCK_SIZE_M: tl.constexpr,
                                        BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                                        GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr):
    dtype = tl.float16
    start_pid = tl.program_id(axis=0)
    num_pid_m, num_pid_in_group, num_tiles, k_tiles = _tiles(M, N, K, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K,
                                                             GROUP_SIZE_M)
    tile_id_c = start_pid - NUM_SMS
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        offs_am = pid_m * BLOCK_SIZE_M
        offs_bn = pid_n * BLOCK_SIZE_N
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_SIZE_K
            a = a_desc.load([offs_am, offs_k])
            b = b_desc.load([offs_bn, offs_k])
            accumulator = tl.dot(a, b.T, accumulator)
        tile_id_c += NUM_SMS
        pid_m, pid_n = _compute_pid(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        offs_cm = pid_m * BLOCK_SIZE_M
        offs_cn = pid_n * BLOCK_SIZE_N
        c = accumulator.to(dtype)
        c_desc.store([offs_cm, offs_cn], c)


@case(heavy=True, requires=("torch",))
def t09_persistent_matmul_tma_descriptors(arch, rng):
    """Host TensorDescriptors: TMA copies on sm_90a, plain loads from the base pointer, shape and strides on
    sm_80 (Triton lowers them so where TMA is absent)."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor
    M, N, K, num_sms = 192, 64, 96, 2
    BM, BN, BK = 64, 64, 32
    a = torch.from_numpy((rng.standard_normal((M, K)) * 0.5).astype(np.float16))
    b = torch.from_numpy((rng.standard_normal((N, K)) * 0.5).astype(np.float16))  # B transposed: N x K
    c = torch.zeros((M, N), dtype=torch.float16)
    a_desc = TensorDescriptor.from_tensor(a, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(b, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(c, [BM, BN])
    a64, b64 = a.numpy().astype(np.float64), b.numpy().astype(np.float64).T
    return Run(matmul_kernel_descriptor_persistent, (num_sms,), (a_desc, b_desc, c_desc, M, N, K),
               dict(BLOCK_SIZE_M=BM, BLOCK_SIZE_N=BN, BLOCK_SIZE_K=BK, GROUP_SIZE_M=2, NUM_SMS=num_sms, num_warps=4,
                    num_stages=3),
               [Output("c", c, a64 @ b64, dot_bound(a.numpy(), b.numpy().T, 2.0 ** -23, 2.0 ** -11))])


# -------------------- 10 8-bit floats, block scaling
@case(heavy=True, skip={"sm_80": "Triton 3.6 has no float8e4nv below sm_89"})
def t10_fp8_e4m3_matmul(arch, rng):
    """Tutorial 03's kernel on 8-bit float operands (as its fp8 variant runs it), an f16 result."""
    return _matmul_run(rng, "e4m3", 64, 64, 64)


def _fp8_operands(rng, shape, dtype_name):
    return (rng.standard_normal(shape) * 2).astype(np.float32).astype(_ml_dtype(dtype_name))


@triton.jit
def block_scaled_matmul_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, VEC_SIZE: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_s = tl.arange(0, BLOCK_K // VEC_SIZE)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :])
        b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :])
        a_scale = tl.load(a_scale_ptr + offs_m[:, None] * (K // VEC_SIZE) + (k // VEC_SIZE + offs_s)[None, :])
        b_scale = tl.load(b_scale_ptr + offs_n[:, None] * (K // VEC_SIZE) + (k // VEC_SIZE + offs_s)[None, :])
        acc = tl.dot_scaled(a, a_scale, "e4m3", b, b_scale, "e4m3", acc)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc)


@case(heavy=True, skip={"sm_80": "Triton 3.6 has no float8e4nv below sm_89"})
def t10_block_scaled_matmul(arch, rng):
    """tl.dot_scaled with e4m3 operands and e8m0 scales, one per 32 elements of K (Triton 3.6 decomposes it
    into an upcast to bf16 and a bf16 dot where the hardware has no scaled MMA)."""
    M, N, K, vec = 64, 64, 64, 32
    a, b = _fp8_operands(rng, (M, K), "float8_e4m3fn"), _fp8_operands(rng, (K, N), "float8_e4m3fn")
    a_scale = rng.integers(124, 131, (M, K // vec)).astype(np.uint8)  # 2^(e - 127)
    b_scale = rng.integers(124, 131, (N, K // vec)).astype(np.uint8)
    c = np.zeros((M, N), np.float32)
    a_scaled = a.astype(np.float64) * np.repeat(2.0 ** (a_scale.astype(np.float64) - 127), vec, axis=1)
    b_scaled = b.astype(np.float64) * np.repeat(2.0 ** (b_scale.astype(np.float64) - 127), vec, axis=1).T
    return Run(block_scaled_matmul_kernel, (1, 1), (a, a_scale, b, b_scale, c, M, N, K),
               dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, VEC_SIZE=vec, num_warps=4),
               [Output("c", c, a_scaled @ b_scaled, dot_bound(a_scaled, b_scaled, 2.0 ** -13))])
