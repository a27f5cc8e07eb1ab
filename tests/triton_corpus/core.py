# Kernels in the style of Triton's unit tests (python/test/unit/language/test_core.py): atomics and
# compare-and-swap loops, reductions, scans, sorting, where, casts (bf16, f16, 8-bit floats, integers),
# umulhi, bit operations, fma, div_rn and sqrt_rn, the approximate and libdevice math functions, a
# histogram, 2D loads with masks and `other`, and the instructions the emulator does not run yet (8-bit
# integer and f64 dots, f16 scalar arithmetic, eviction policies, device-side tensor descriptors, randn).
from __future__ import annotations

import math

import numpy as np
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from phobos.constants import bf16_bits
from phobos.run.emulator import PtxSyntaxError, UnsupportedPtx

from .cases import SAME_VALUE_STORES, Output, Run, case, close, exact, fma_f32, ulps

N = 256  # elements of the elementwise cases: two programs of BLOCK


def _ml_dtype(name: str):
    import ml_dtypes
    return getattr(ml_dtypes, name)


# -------------------- elementwise
@triton.jit
def unary_kernel(x_ptr, y_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if OP == "exp":
        y = tl.exp(x)
    elif OP == "exp2":
        y = tl.exp2(x)
    elif OP == "log":
        y = tl.log(x)
    elif OP == "log2":
        y = tl.log2(x)
    elif OP == "sqrt":
        y = tl.sqrt(x)
    elif OP == "rsqrt":
        y = tl.rsqrt(x)
    elif OP == "sqrt_rn":
        y = tl.sqrt_rn(x)
    elif OP == "sin":
        y = tl.sin(x)
    elif OP == "cos":
        y = tl.cos(x)
    elif OP == "abs":
        y = tl.abs(x)
    elif OP == "floor":
        y = tl.floor(x)
    elif OP == "ceil":
        y = tl.ceil(x)
    elif OP == "sigmoid":
        y = tl.sigmoid(x)
    elif OP == "erf":
        y = tl.erf(x)
    elif OP == "tanh":
        y = libdevice.tanh(x)
    elif OP == "cbrt":
        y = libdevice.cbrt(x)
    elif OP == "erfinv":
        y = libdevice.erfinv(x)
    elif OP == "log1p":
        y = libdevice.log1p(x)
    elif OP == "expm1":
        y = libdevice.expm1(x)
    elif OP == "popc":
        y = libdevice.popc(x)
    elif OP == "clz":
        y = libdevice.clz(x)
    elif OP == "bf16":
        y = x.to(tl.bfloat16)
    elif OP == "bf16_rtz":
        y = x.to(tl.bfloat16, fp_downcast_rounding="rtz")
    elif OP == "f16":
        y = x.to(tl.float16)
    elif OP == "f32":
        y = x.to(tl.float32)
    elif OP == "i32":
        y = x.to(tl.int32)
    elif OP == "u32":
        y = x.to(tl.uint32)
    elif OP == "f64":
        y = x.to(tl.float64)
    elif OP == "e4m3":
        y = x.to(tl.float8e4nv)
    elif OP == "e5m2":
        y = x.to(tl.float8e5)
    elif OP == "not":
        y = ~x
    elif OP == "neg":
        y = -x
    else:
        tl.static_assert(False, "unknown OP")
    tl.store(y_ptr + offs, y, mask=mask)


def _unary(op: str, x: np.ndarray, out_dtype, want, check=exact, **kwargs):
    y = np.zeros(x.shape, out_dtype)
    return Run(unary_kernel, (triton.cdiv(x.size, 128),), (x, y, x.size), dict(OP=op, BLOCK=128, **kwargs),
               [Output(op, y, want, check)])


def _floats(rng, scale=4.0):
    x = (rng.standard_normal(N) * scale).astype(np.float32)
    x[:6] = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0]
    return x


#: The approximate functions: op -> (inputs, float64 reference, ulp bound).  tl.exp, exp2, log, log2,
#: sqrt, rsqrt are MUFU's .approx instructions (ex2, lg2, sqrt, rsqrt: 2 ulps, PTX ISA), with a scaling
#: by log2(e) or ln(2) rounded in f32 around ex2 and lg2 (for |x| up to 30, 2^5 ulps of the exponent);
#: the others are libdevice's, at the bounds of the CUDA Math API (single precision).
APPROXIMATE = {
    "exp": (lambda rng: _floats(rng, 4), np.exp, 48),
    "exp2": (lambda rng: _floats(rng, 4), np.exp2, 2),
    "log": (lambda rng: np.abs(_floats(rng, 8)) + np.float32(1e-3), np.log, 4),
    "log2": (lambda rng: np.abs(_floats(rng, 8)) + np.float32(1e-3), np.log2, 2),
    "sqrt": (lambda rng: np.abs(_floats(rng, 8)), np.sqrt, 1),
    "rsqrt": (lambda rng: np.abs(_floats(rng, 8)) + np.float32(1e-3), lambda x: 1 / np.sqrt(x), 2),
    "sigmoid": (lambda rng: _floats(rng, 4), lambda x: 1 / (1 + np.exp(-x)), 64),
    "erf": (lambda rng: _floats(rng, 1.5), np.vectorize(math.erf), 2),
    "tanh": (lambda rng: _floats(rng, 2), np.tanh, 2),
    "cbrt": (lambda rng: _floats(rng, 50), np.cbrt, 1),
    "log1p": (lambda rng: np.abs(_floats(rng, 4)), np.log1p, 1),
    "expm1": (lambda rng: _floats(rng, 3), np.expm1, 1),
    "erfinv": (lambda rng: np.clip(_floats(rng, 0.4), -0.99, 0.99),
               np.vectorize(lambda v: float(__import__("mpmath").erfinv(v))), 2),
}


def _approximate_case(op: str, **known):
    inputs, reference, bound = APPROXIMATE[op]

    def build(arch, rng):
        x = inputs(rng)
        return _unary(op, x, np.float32, reference(x.astype(np.float64)), ulps(bound))
    case(f"c_math_{op}", **known)(build)


for _op in APPROXIMATE:
    _approximate_case(_op)

#: tl.sin and tl.cos are libdevice's sinf/cosf, whose slow path (Payne-Hanek reduction of large
#: arguments) adds with carries.
_CARRY_CHAINS = (UnsupportedPtx, "mad.lo.cc.u32 / madc.hi.u32 (carry chains), in libdevice's sinf/cosf")
for _op, _fn in (("sin", np.sin), ("cos", np.cos)):
    APPROXIMATE[_op] = (lambda rng: _floats(rng, 4), _fn, 2)
    _approximate_case(_op, xfail={"sm_80": _CARRY_CHAINS, "sm_90a": _CARRY_CHAINS})


@case()
def c_floor_ceil_abs_neg(arch, rng):
    x = _floats(rng, 10)
    x[6:10] = [np.inf, -np.inf, 2.5, -2.5]
    runs = [_unary(op, x, np.float32, want) for op, want in
            (("floor", np.floor(x)), ("ceil", np.ceil(x)), ("abs", np.abs(x)),
             ("neg", np.float32(0) - x))]  # Triton's -x is 0 - x: -(+0) is +0
    for first, second in zip(runs, runs[1:]):
        first.then = second
    return runs[0]


@case()
def c_sqrt_rn(arch, rng):
    x = np.abs(_floats(rng, 8))
    x[6:12] = [np.inf, 1e-45, 2.0, 1e38, 7.0, 0.1]  # a subnormal too
    return _unary("sqrt_rn", x, np.float32, np.sqrt(x))  # IEEE sqrt: numpy's f32 sqrt is correctly rounded


@triton.jit
def binary_kernel(x_ptr, y_ptr, z_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    if OP == "div_rn":
        z = tl.div_rn(x, y)
    elif OP == "maximum":
        z = tl.maximum(x, y)
    elif OP == "minimum":
        z = tl.minimum(x, y)
    elif OP == "maximum_nan":
        z = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
    elif OP == "umulhi":
        z = tl.umulhi(x, y)
    elif OP == "and":
        z = x & y
    elif OP == "or":
        z = x | y
    elif OP == "xor":
        z = x ^ y
    elif OP == "shl":
        z = x << y
    elif OP == "shr":
        z = x >> y
    elif OP == "add":
        z = x + y
    elif OP == "mul":
        z = x * y
    elif OP == "sub":
        z = x - y
    elif OP == "floordiv":
        z = x // y
    elif OP == "mod":
        z = x % y
    elif OP == "where":
        z = tl.where(x > y, x, y * 2)
    elif OP == "pow":
        z = libdevice.pow(x, y)
    elif OP == "atan2":
        z = libdevice.atan2(x, y)
    else:
        tl.static_assert(False, "unknown OP")
    tl.store(z_ptr + offs, z, mask=mask)


def _binary(op: str, x: np.ndarray, y: np.ndarray, out_dtype, want, check=exact):
    z = np.zeros(x.shape, out_dtype)
    return Run(binary_kernel, (triton.cdiv(x.size, 128),), (x, y, z, x.size), dict(OP=op, BLOCK=128),
               [Output(op, z, want, check)])


@case()
def c_div_rn(arch, rng):
    x, y = _floats(rng), _floats(rng, 3)
    y[:8] = [1.0, 3.0, 0.0, -0.0, np.inf, 1e-40, 7.0, -1e30]
    with np.errstate(all="ignore"):
        return _binary("div_rn", x, y, np.float32, x / y)  # numpy's f32 division is IEEE division


@triton.jit
def fma_kernel(a_ptr, b_ptr, c_ptr, d_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    c = tl.load(c_ptr + offs, mask=mask)
    tl.store(d_ptr + offs, tl.fma(a, b, c), mask=mask)


@case()
def c_fma(arch, rng):
    """tl.fma rounds once: fma.rn.f32 (TRITON_INTERPRET=1 computes it as a product then a sum)."""
    a, b = _floats(rng, 2), _floats(rng, 2)
    c = (-(a * b) + (rng.standard_normal(N) * 1e-6)).astype(np.float32)  # cancellations
    d = np.zeros_like(a)
    return Run(fma_kernel, (triton.cdiv(N, 128),), (a, b, c, d, N), dict(BLOCK=128),
               [Output("fma", d, fma_f32(a, b, c))])


@case()
def c_max_min_nan(arch, rng):
    """tl.maximum and tl.minimum ignore a NaN operand (max.f32 and min.f32 give the other one);
    propagate_nan=ALL gives NaN."""
    x, y = _floats(rng), _floats(rng)
    x[::7] = np.nan
    y[::5] = np.nan
    runs = [_binary("maximum", x, y, np.float32, np.fmax(x, y)), _binary("minimum", x, y, np.float32, np.fmin(x, y)),
            _binary("maximum_nan", x, y, np.float32, np.maximum(x, y))]
    runs[0].then, runs[1].then = runs[1], runs[2]
    return runs[0]


@case()
def c_where(arch, rng):
    x, y = _floats(rng), _floats(rng)
    return _binary("where", x, y, np.float32, np.where(x > y, x, y * 2))


@case()
def c_umulhi(arch, rng):
    x = rng.integers(0, 2 ** 32, N, dtype=np.uint64).astype(np.uint32)
    y = rng.integers(0, 2 ** 32, N, dtype=np.uint64).astype(np.uint32)
    want = ((x.astype(np.uint64) * y.astype(np.uint64)) >> np.uint64(32)).astype(np.uint32)
    # of int32 operands too, the high half of the unsigned product (mul.hi.u32)
    second = _binary("umulhi", x.view(np.int32), y.view(np.int32), np.int32, want.view(np.int32))
    first = _binary("umulhi", x, y, np.uint32, want)
    first.then = second
    return first


@case()
def c_integer_arithmetic(arch, rng):
    """Wrapping add and mul, sub, and Python-style // and % of int32 (Triton rounds toward zero: C's)."""
    x = rng.integers(-2 ** 31, 2 ** 31, N, dtype=np.int64).astype(np.int32)
    y = rng.integers(-2 ** 31, 2 ** 31, N, dtype=np.int64).astype(np.int32)
    d = rng.integers(-1000, 1000, N).astype(np.int32)
    d[d == 0] = 7
    with np.errstate(over="ignore"):
        runs = [_binary("add", x, y, np.int32, x + y), _binary("mul", x, y, np.int32, x * y),
                _binary("sub", x, y, np.int32, x - y),
                _binary("floordiv", x, d, np.int32, np.trunc(x.astype(np.float64) / d).astype(np.int32)),
                _binary("mod", x, d, np.int32, np.fmod(x, d))]
    for first, second in zip(runs, runs[1:]):
        first.then = second
    return runs[0]


@case()
def c_bit_operations(arch, rng):
    x = rng.integers(0, 2 ** 32, N, dtype=np.uint64).astype(np.uint32)
    y = rng.integers(0, 2 ** 32, N, dtype=np.uint64).astype(np.uint32)
    shifts = rng.integers(0, 32, N).astype(np.uint32)
    sx, s_shifts = x.view(np.int32), shifts.astype(np.int32)
    runs = [_binary("and", x, y, np.uint32, x & y), _binary("or", x, y, np.uint32, x | y),
            _binary("xor", x, y, np.uint32, x ^ y), _binary("shl", x, shifts, np.uint32, x << shifts),
            _binary("shr", x, shifts, np.uint32, x >> shifts),  # logical for unsigned
            _binary("shr", sx, s_shifts, np.int32, sx >> s_shifts),  # arithmetic for signed
            _unary("not", x, np.uint32, ~x),
            _unary("popc", sx, np.int32, np.array([bin(v).count("1") for v in x], np.int32)),
            _unary("clz", sx, np.int32, np.array([32 - int(v).bit_length() for v in x], np.int32))]
    for first, second in zip(runs, runs[1:]):
        first.then = second
    return runs[0]


@case()
def c_libdevice_pow_atan2(arch, rng):
    x, y = np.abs(_floats(rng, 2)) + np.float32(0.01), _floats(rng, 2)
    first = _binary("pow", x, y, np.float32, np.power(x.astype(np.float64), y), ulps(4))  # CUDA: powf 4 ulps
    first.then = _binary("atan2", y, x, np.float32, np.arctan2(y.astype(np.float64), x), ulps(3))  # atan2f 3
    return first


# -------------------- casts
@case()
def c_cast_f32_to_bf16(arch, rng):
    """f32 -> bf16 rounds to nearest even (cvt.rn.bf16.f32); TRITON_INTERPRET=1 truncates; with
    fp_downcast_rounding="rtz" the kernel truncates too."""
    x = _floats(rng)
    x[6:10] = [1.00390625, 1.01171875, -3.0078125, np.float32(1 + 2 ** -8 + 2 ** -20)]  # ties and near-ties
    bf16 = _ml_dtype("bfloat16")
    nearest = bf16_bits(x).view(bf16)
    truncated = (x.view(np.uint32) >> 16).astype(np.uint16).view(bf16)
    first = _unary("bf16", x, bf16, nearest)
    first.then = _unary("bf16_rtz", x, bf16, truncated)
    return first


@case()
def c_cast_half_and_back(arch, rng):
    x = _floats(rng, 100)
    x[6:9] = [70000.0, 1e-6, np.float32(1 + 2 ** -11)]  # overflow to inf, a subnormal, a tie
    bf16 = _ml_dtype("bfloat16")
    with np.errstate(over="ignore"):
        first = _unary("f16", x, np.float16, x.astype(np.float16))
        widened_h = x.astype(np.float16)
    widened_b = x.astype(bf16)
    first.then = _unary("f32", widened_h, np.float32, widened_h.astype(np.float32))
    first.then.then = _unary("f32", widened_b, np.float32, widened_b.astype(np.float32))
    return first


@case()
def c_cast_float_int(arch, rng):
    """f32 -> i32 and u32 round toward zero (in range); i32 -> f32 and u32 -> f32 round to nearest;
    f32 -> f64 is exact."""
    x = (rng.standard_normal(N) * 1e6).astype(np.float32)
    i = rng.integers(-2 ** 31, 2 ** 31, N, dtype=np.int64).astype(np.int32)
    u = rng.integers(0, 2 ** 32, N, dtype=np.uint64).astype(np.uint32)
    runs = [_unary("i32", x, np.int32, np.trunc(x).astype(np.int32)),
            _unary("u32", np.abs(x), np.uint32, np.trunc(np.abs(x)).astype(np.uint32)),
            _unary("f32", i, np.float32, i.astype(np.float32)),
            _unary("f32", u, np.float32, u.astype(np.float32)),
            _unary("f64", x, np.float64, x.astype(np.float64))]
    for first, second in zip(runs, runs[1:]):
        first.then = second
    return runs[0]


@case()
def c_cast_fp8(arch, rng):
    """f32 -> float8e5 (both archs) and float8e4nv (sm_89 and later), rounded to nearest even (in range)."""
    x = np.clip(_floats(rng, 20), -400, 400)
    e5 = _ml_dtype("float8_e5m2")
    first = _unary("e5m2", x, e5, x.astype(e5))
    if arch != "sm_80":
        e4 = _ml_dtype("float8_e4m3fn")
        first.then = _unary("e4m3", x, e4, x.astype(e4))
    return first


# -------------------- reductions, scans, sorting
@triton.jit
def reduce_kernel(x_ptr, out_ptr, idx_ptr, stride, OP: tl.constexpr, AXIS: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :])
    if OP == "sum":
        y = tl.sum(x, axis=AXIS)
    elif OP == "max":
        y = tl.max(x, axis=AXIS)
    elif OP == "min":
        y = tl.min(x, axis=AXIS)
    elif OP == "xor_sum":
        y = tl.xor_sum(x, axis=AXIS)
    elif OP == "argmax":
        y, i = tl.max(x, axis=AXIS, return_indices=True)
        tl.store(idx_ptr + tl.arange(0, y.shape[0]), i)
    elif OP == "argmin":
        i = tl.argmin(x, axis=AXIS)
        y = tl.min(x, axis=AXIS)
        tl.store(idx_ptr + tl.arange(0, y.shape[0]), i)
    elif OP == "prod":
        y = tl.reduce(x, AXIS, _multiply)
    else:
        tl.static_assert(False, "unknown OP")
    tl.store(out_ptr + tl.arange(0, y.shape[0]), y)


@triton.jit
def _multiply(a, b):
    return a * b


def _reduce(op, x, axis, out_dtype, want, check=exact, want_index=None):
    M, Ncols = x.shape
    length = M if axis == 1 else Ncols
    out = np.zeros(length, out_dtype)
    idx = np.zeros(length, np.int32)
    outputs = [Output(op, out, want, check)]
    if want_index is not None:
        outputs.append(Output(f"{op} index", idx, want_index))
    return Run(reduce_kernel, (1,), (x, out, idx, x.strides[0] // x.itemsize),
               dict(OP=op, AXIS=axis, BLOCK_M=M, BLOCK_N=Ncols, num_warps=4), outputs)


@case(xfail={"sm_80": SAME_VALUE_STORES, "sm_90a": SAME_VALUE_STORES})
def c_reductions_f32(arch, rng):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    runs = [_reduce("sum", x, 1, np.float32, x.astype(np.float64).sum(axis=1), close(1e-5, 1e-5)),
            _reduce("sum", x, 0, np.float32, x.astype(np.float64).sum(axis=0), close(1e-5, 1e-5)),
            _reduce("max", x, 1, np.float32, x.max(axis=1)), _reduce("min", x, 0, np.float32, x.min(axis=0)),
            _reduce("argmax", x, 1, np.float32, x.max(axis=1), want_index=x.argmax(axis=1).astype(np.int32)),
            _reduce("argmin", x, 0, np.float32, x.min(axis=0), want_index=x.argmin(axis=0).astype(np.int32))]
    for first, second in zip(runs, runs[1:]):
        first.then = second
    return runs[0]


@case(xfail={"sm_80": SAME_VALUE_STORES, "sm_90a": SAME_VALUE_STORES})
def c_reductions_i32(arch, rng):
    x = rng.integers(-2 ** 31, 2 ** 31, (8, 128), dtype=np.int64).astype(np.int32)
    small = rng.integers(-3, 4, (8, 128)).astype(np.int32)
    with np.errstate(over="ignore"):
        runs = [_reduce("sum", x, 1, np.int32, x.sum(axis=1, dtype=np.int32)),
                _reduce("xor_sum", x, 0, np.int32, np.bitwise_xor.reduce(x, axis=0)),
                _reduce("max", x, 0, np.int32, x.max(axis=0)),
                _reduce("prod", small, 0, np.int32, small.prod(axis=0, dtype=np.int32))]
    for first, second in zip(runs, runs[1:]):
        first.then = second
    return runs[0]


@triton.jit
def scan_kernel(x_ptr, y_ptr, N, OP: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + rows * N + cols)
    if OP == "cumsum":
        y = tl.cumsum(x, axis=0)
    elif OP == "cumsum_reverse":
        y = tl.cumsum(x, axis=0, reverse=True)
    elif OP == "cumprod":
        y = tl.cumprod(x, axis=0)
    else:
        y = tl.associative_scan(x, 0, _running_max)
    tl.store(y_ptr + rows * N + cols, y)


@triton.jit
def _running_max(a, b):
    return tl.maximum(a, b)


def _scan(op, x, want, check=exact):
    y = np.zeros_like(x)
    return Run(scan_kernel, (x.shape[0],), (x, y, x.shape[1]), dict(OP=op, BLOCK=x.shape[1], num_warps=2),
               [Output(op, y, want, check)])


@case()
def c_scans(arch, rng):
    i = rng.integers(-1000, 1000, (4, 128)).astype(np.int32)
    small = rng.integers(-3, 4, (4, 128)).astype(np.int32)
    f = rng.standard_normal((4, 128)).astype(np.float32)
    with np.errstate(over="ignore"):
        runs = [_scan("cumsum", i, np.cumsum(i, axis=1, dtype=np.int32)),
                _scan("cumsum_reverse", i, np.cumsum(i[:, ::-1], axis=1, dtype=np.int32)[:, ::-1]),
                _scan("cumprod", small, np.cumprod(small, axis=1, dtype=np.int32)),
                _scan("running_max", f, np.maximum.accumulate(f, axis=1)),
                _scan("cumsum", f, np.cumsum(f.astype(np.float64), axis=1), close(1e-5, 1e-5))]
    for first, second in zip(runs, runs[1:]):
        first.then = second
    return runs[0]


@triton.jit
def sort_kernel(x_ptr, y_ptr, top_ptr, N: tl.constexpr, K: tl.constexpr, DESCENDING: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * N + tl.arange(0, N))
    y = tl.sort(x, descending=DESCENDING)
    tl.store(y_ptr + row * N + tl.arange(0, N), y)
    top = tl.topk(x, K)
    tl.store(top_ptr + row * K + tl.arange(0, K), top)
    tl.store(y_ptr + row * N + tl.arange(0, N) + 4 * N, tl.flip(x, 0))


@case()
def c_sort_topk_flip(arch, rng):
    x = rng.standard_normal((4, 64)).astype(np.float32)
    y = np.zeros((8, 64), np.float32)
    top = np.zeros((4, 8), np.float32)
    want = np.concatenate([-np.sort(-x, axis=1), x[:, ::-1]])
    return Run(sort_kernel, (4,), (x, y, top), dict(N=64, K=8, DESCENDING=True, num_warps=2),
               [Output("sorted, flipped", y, want), Output("topk", top, -np.sort(-x, axis=1)[:, :8])])


# -------------------- memory
@triton.jit
def transpose_kernel(x_ptr, y_ptr, t_ptr, M, N, stride_xm, stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :], mask=mask, other=-1.0)
    tl.store(y_ptr + rn[:, None] * stride_ym + rm[None, :], tl.trans(x), mask=tl.trans(mask))
    # the tile itself, 5 rows past M: `other` fills what the mask leaves out
    inside = (rm[:, None] < M + 5) & (rn[None, :] < N)
    tl.store(t_ptr + rm[:, None] * N + rn[None, :], x, mask=inside)


@case()
def c_load_2d_masks_other(arch, rng):
    M, Ncols = 45, 37
    x = rng.standard_normal((M, Ncols)).astype(np.float32)
    y = np.full((Ncols, 64), 9.0, np.float32)  # rows 64 elements apart, columns past M untouched
    t = np.zeros((M + 5, Ncols), np.float32)
    want_y = y.copy()
    want_y[:, :M] = x.T
    want_t = np.concatenate([x, np.full((5, Ncols), -1.0, np.float32)])
    return Run(transpose_kernel, (triton.cdiv(M + 5, 32), triton.cdiv(Ncols, 32)),
               (x, y, t, M, Ncols, Ncols, y.strides[0] // 4), dict(BLOCK_M=32, BLOCK_N=32, num_warps=4),
               [Output("transposed", y, want_y), Output("tile", t, want_t)])


# -------------------- atomics
@triton.jit
def atomic_kernel(x_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    slot = offs % 8
    if OP == "add":
        tl.atomic_add(out_ptr + slot, x, mask=mask)
    elif OP == "max":
        tl.atomic_max(out_ptr + slot, x, mask=mask)
    elif OP == "min":
        tl.atomic_min(out_ptr + slot, x, mask=mask)
    elif OP == "and":
        tl.atomic_and(out_ptr + slot, x, mask=mask)
    elif OP == "or":
        tl.atomic_or(out_ptr + slot, x, mask=mask)
    elif OP == "xor":
        tl.atomic_xor(out_ptr + slot, x, mask=mask)
    elif OP == "xchg_sum":  # each element swapped in, the old value added to a second table
        old = tl.atomic_xchg(out_ptr + offs, x, mask=mask)
        tl.atomic_add(out_ptr + n + slot, old, mask=mask)


def _atomic(op, x, initial, want, check=exact):
    out = initial.copy()
    return Run(atomic_kernel, (triton.cdiv(x.size, 128),), (x, out, x.size), dict(OP=op, BLOCK=128),
               [Output(f"atomic_{op}", out, want, check)])


def _by_slot(x, reduce, initial):
    return np.array([reduce(np.concatenate([[initial[s]], x[s::8]])) for s in range(8)], x.dtype)


@case()
def c_atomics_integer(arch, rng):
    x = rng.integers(-2 ** 20, 2 ** 20, 1000).astype(np.int32)
    bits = rng.integers(0, 2 ** 31, 1000).astype(np.int32)
    zeros, ones = np.zeros(8, np.int32), np.full(8, -1, np.int32)
    runs = [_atomic("add", x, zeros, _by_slot(x, np.sum, zeros)),
            _atomic("max", x, zeros, _by_slot(x, np.max, zeros)),
            _atomic("min", x, zeros, _by_slot(x, np.min, zeros)),
            _atomic("and", bits, ones, _by_slot(bits, np.bitwise_and.reduce, ones)),
            _atomic("or", bits, zeros, _by_slot(bits, np.bitwise_or.reduce, zeros)),
            _atomic("xor", bits, zeros, _by_slot(bits, np.bitwise_xor.reduce, zeros))]
    for first, second in zip(runs, runs[1:]):
        first.then = second
    return runs[0]


@case()
def c_atomics_float_max_min(arch, rng):
    """atomic_max and atomic_min of f32 (Triton splits them by sign into integer atomics)."""
    x = rng.standard_normal(1000).astype(np.float32)
    low, high = np.full(8, -np.inf, np.float32), np.full(8, np.inf, np.float32)
    first = _atomic("max", x, low, _by_slot(x, np.max, low))
    first.then = _atomic("min", x, high, _by_slot(x, np.min, high))
    return first


@case(deterministic=False)
def c_atomic_add_f32(arch, rng):
    """Float atomic adds: the order, so the last bits, vary on a GPU."""
    x = rng.standard_normal(1000).astype(np.float32)
    zeros = np.zeros(8, np.float32)
    return _atomic("add", x, zeros, _by_slot(x.astype(np.float64), np.sum, zeros).astype(np.float64),
                   close(1e-5, 1e-5))


@case(deterministic=False)
def c_atomic_xchg(arch, rng):
    """Each element exchanged into a fresh table (returning the old values, all zero, summed into a
    second table); the table holds the new values whatever the order."""
    n = 512
    x = rng.integers(1, 100, n).astype(np.int32)
    out = np.zeros(n + 8, np.int32)
    want = np.concatenate([x, np.zeros(8, np.int32)])
    return Run(atomic_kernel, (n // 128,), (x, out, n), dict(OP="xchg_sum", BLOCK=128), [Output("xchg", out, want)])


@triton.jit
def cas_add_kernel(counter_ptr, values_ptr, BLOCK: tl.constexpr):
    """Every program adds its block's sum to one counter through a compare-and-swap loop."""
    total = tl.sum(tl.load(values_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)), axis=0)
    old = tl.load(counter_ptr, volatile=True)
    while tl.atomic_cas(counter_ptr, old, old + total) != old:
        old = tl.load(counter_ptr, volatile=True)


@case()
def c_atomic_cas_loop(arch, rng):
    values = rng.integers(-1000, 1000, 8 * 64).astype(np.int32)
    counter = np.zeros(1, np.int32)
    return Run(cas_add_kernel, (8,), (counter, values), dict(BLOCK=64, num_warps=1),
               [Output("counter", counter, np.array([values.sum()], np.int32))])


@triton.jit
def histogram_kernel(x_ptr, hist_ptr, n, BINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    counts = tl.histogram(x, BINS, mask=offs < n)
    tl.atomic_add(hist_ptr + tl.arange(0, BINS), counts)


@case(xfail={"sm_80": SAME_VALUE_STORES, "sm_90a": SAME_VALUE_STORES})
def c_histogram(arch, rng):
    n, bins = 1000, 32
    x = rng.integers(0, bins, n).astype(np.int32)
    hist = np.zeros(bins, np.int32)
    return Run(histogram_kernel, (triton.cdiv(n, 256),), (x, hist, n), dict(BINS=bins, BLOCK=256),
               [Output("histogram", hist, np.bincount(x, minlength=bins).astype(np.int32))])


# -------------------- not run by the emulator yet
@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


@case(xfail={"sm_80": (UnsupportedPtx, "mma.sync m16n8k32 with s8 operands"),
             "sm_90a": (UnsupportedPtx, "wgmma k32 with s8 operands")})
def c_dot_int8(arch, rng):
    a = rng.integers(-128, 128, (64, 64)).astype(np.int8)
    b = rng.integers(-128, 128, (64, 64)).astype(np.int8)
    c = np.zeros((64, 64), np.int32)
    return Run(dot_kernel, (1,), (a, b, c), dict(M=64, N=64, K=64, num_warps=4),
               [Output("c", c, a.astype(np.int32) @ b.astype(np.int32))])


_F64_MMA = "mma.sync with f64 operands (m8n8k4; m16n8k16 on sm_90a, today refused as a PtxSyntaxError)"


@case(xfail={"sm_80": (UnsupportedPtx, _F64_MMA), "sm_90a": ((PtxSyntaxError, UnsupportedPtx), _F64_MMA)})
def c_dot_f64(arch, rng):
    a, b = rng.standard_normal((32, 32)), rng.standard_normal((32, 32))
    c = np.zeros((32, 32))
    return Run(dot_kernel, (1,), (a, b, c), dict(M=32, N=32, K=32, num_warps=4),
               [Output("c", c, a @ b, close(1e-13, 1e-13))])


@triton.jit
def half_kernel(x_ptr, y_ptr, z_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    z = tl.load(z_ptr + offs)
    tl.store(out_ptr + offs, tl.abs(x * y - z))


_F16_SCALAR = (UnsupportedPtx, "f16 scalar arithmetic (fma.rn.f16, mul.f16, sub.f16, abs.f16)")


@case(xfail={"sm_80": _F16_SCALAR, "sm_90a": _F16_SCALAR})
def c_f16_arithmetic(arch, rng):
    x, y, z = (rng.standard_normal(N).astype(np.float16) for _ in range(3))
    out = np.zeros(N, np.float16)
    return Run(half_kernel, (N // 128,), (x, y, z, out), dict(BLOCK=128),
               # x * y - z contracted into one fma, rounded once to f16
               [Output("out", out, np.abs(x.astype(np.float64) * y - z).astype(np.float16), ulps(1))])


@triton.jit
def evict_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, eviction_policy="evict_last")
    tl.store(y_ptr + offs, x * 2, eviction_policy="evict_first")


_CREATE_POLICY = (UnsupportedPtx, "createpolicy.fractional.L2::evict_*")


@case(xfail={"sm_80": _CREATE_POLICY, "sm_90a": _CREATE_POLICY})
def c_eviction_policy(arch, rng):
    x = _floats(rng)
    y = np.zeros_like(x)
    return Run(evict_kernel, (N // 128,), (x, y), dict(BLOCK=128), [Output("y", y, x * 2)])


@triton.jit
def device_descriptor_kernel(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    out = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    tile = desc.load([pid_m * BLOCK_M, pid_n * BLOCK_N])
    out.store([pid_m * BLOCK_M, pid_n * BLOCK_N], tile + 1)


@case(xfail={"sm_90a": (UnsupportedPtx, "tensormap.replace.tile / tensormap.cp_fenceproxy (device-side TMA "
                                        "descriptors)")})
def c_device_tensor_descriptor(arch, rng):
    """tl.make_tensor_descriptor: a TMA descriptor written in the global scratch on sm_90a, plain loads on
    sm_80."""
    M, Ncols = 64, 48
    x = rng.standard_normal((M, Ncols)).astype(np.float32)
    y = np.zeros_like(x)
    return Run(device_descriptor_kernel, (M // 32, Ncols // 16), (x, y, M, Ncols),
               dict(BLOCK_M=32, BLOCK_N=16, num_warps=4), [Output("y", y, x + 1)])


@triton.jit
def randn_kernel(out_ptr, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.randn(seed, offs))


@case(xfail={"sm_80": _CARRY_CHAINS, "sm_90a": _CARRY_CHAINS})
def c_randn(arch, rng):
    from .tutorials import philox, uniform
    out = np.zeros(N, np.float32)
    c0, c1, _, _ = philox(42, np.arange(N))
    u1, u2 = uniform(c0), uniform(c1)
    u1 = np.maximum(np.float32(1e-7), u1).astype(np.float64)
    want = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2.astype(np.float64))
    return Run(randn_kernel, (N // 128,), (out, 42), dict(BLOCK=128), [Output("randn", out, want, close(1e-5, 1e-5))])
