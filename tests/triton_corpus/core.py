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
from phobos.run.emulator import UnsupportedPtx

from .cases import Output, Run, case, chain, close, exact, fma_f32, ulps

N = 256  # elements of the elementwise cases: two programs of BLOCK


def _ml_dtype(name: str):
    import ml_dtypes
    return getattr(ml_dtypes, name)


# -------------------- elementwise
@triton.jit
def unary_kernel(x_ptr, y_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    """y = FN(x): FN a Triton builtin (tl.exp, libdevice.tanh...) or a @triton.jit function, a constexpr."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, FN(tl.load(x_ptr + offs, mask=mask)), mask=mask)


@triton.jit
def cast_kernel(x_ptr, y_ptr, n, ROUNDING: tl.constexpr, BLOCK: tl.constexpr):
    """y = x converted to y's element type (ROUNDING: fp_downcast_rounding, None for Triton's default)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty, fp_downcast_rounding=ROUNDING), mask=mask)


@triton.jit
def _negate(x):
    return -x


@triton.jit
def _invert(x):
    return ~x


def _launch_elementwise(kernel, label: str, inputs: tuple, out_dtype, want, check, **kwargs) -> Run:
    out = np.zeros(inputs[0].shape, out_dtype)
    return Run(kernel, (triton.cdiv(out.size, 128),), (*inputs, out, out.size), dict(BLOCK=128, **kwargs),
               [Output(label, out, want, check)])


def _unary(label: str, fn, x: np.ndarray, out_dtype, want, check=exact) -> Run:
    return _launch_elementwise(unary_kernel, label, (x,), out_dtype, want, check, FN=fn)


def _cast(label: str, x: np.ndarray, out_dtype, want, rounding=None) -> Run:
    return _launch_elementwise(cast_kernel, label, (x,), out_dtype, want, exact, ROUNDING=rounding)


def _floats(rng, scale=4.0):
    x = (rng.standard_normal(N) * scale).astype(np.float32)
    x[:6] = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0]
    return x


#: The approximate functions: name -> (function, inputs, float64 reference, ulp bound).  tl.exp and exp2,
#: tl.sqrt and rsqrt are MUFU's .approx instructions (ex2, sqrt, rsqrt: 2 ulps, PTX ISA), tl.exp with a
#: scaling by log2(e) rounded in f32 before ex2 (for |x| up to 16, 2^4 ulps of the exponent more);
#: tl.sigmoid adds a div.full; the others are libdevice's, at the bounds of the CUDA Math API (single
#: precision).
APPROXIMATE = {
    "exp": (tl.exp, lambda rng: _floats(rng, 4), np.exp, 48),
    "exp2": (tl.exp2, lambda rng: _floats(rng, 4), np.exp2, 2),
    "log": (tl.log, lambda rng: np.abs(_floats(rng, 8)) + np.float32(1e-3), np.log, 4),
    "log2": (tl.log2, lambda rng: np.abs(_floats(rng, 8)) + np.float32(1e-3), np.log2, 2),
    "sqrt": (tl.sqrt, lambda rng: np.abs(_floats(rng, 8)), np.sqrt, 1),
    "rsqrt": (tl.rsqrt, lambda rng: np.abs(_floats(rng, 8)) + np.float32(1e-3), lambda x: 1 / np.sqrt(x), 2),
    "sigmoid": (tl.sigmoid, lambda rng: _floats(rng, 4), lambda x: 1 / (1 + np.exp(-x)), 64),
    "erf": (tl.erf, lambda rng: _floats(rng, 1.5), np.vectorize(math.erf), 2),
    "tanh": (libdevice.tanh, lambda rng: _floats(rng, 2), np.tanh, 2),
    "cbrt": (libdevice.cbrt, lambda rng: _floats(rng, 50), np.cbrt, 1),
    "log1p": (libdevice.log1p, lambda rng: np.abs(_floats(rng, 4)), np.log1p, 1),
    "expm1": (libdevice.expm1, lambda rng: _floats(rng, 3), np.expm1, 1),
    "erfinv": (libdevice.erfinv, lambda rng: np.clip(_floats(rng, 0.4), -0.99, 0.99),
               np.vectorize(lambda v: float(__import__("mpmath").erfinv(v))), 2),
    # libdevice's sinf and cosf: their slow path (Payne-Hanek reduction of large arguments) adds with carries
    "sin": (tl.sin, lambda rng: _floats(rng, 4), np.sin, 2),
    "cos": (tl.cos, lambda rng: _floats(rng, 4), np.cos, 2),
}


def _approximate_case(name: str, **known):
    fn, inputs, reference, bound = APPROXIMATE[name]

    def build(arch, rng):
        x = inputs(rng)
        return _unary(name, fn, x, np.float32, reference(x.astype(np.float64)), ulps(bound))
    case(f"c_math_{name}", **known)(build)


for _name in APPROXIMATE:
    _approximate_case(_name)


@case()
def c_floor_ceil_abs_neg(arch, rng):
    x = _floats(rng, 10)
    x[6:10] = [np.inf, -np.inf, 2.5, -2.5]
    return chain([_unary("floor", tl.floor, x, np.float32, np.floor(x)),
                  _unary("ceil", tl.ceil, x, np.float32, np.ceil(x)),
                  _unary("abs", tl.abs, x, np.float32, np.abs(x)),
                  _unary("neg", _negate, x, np.float32, np.float32(0) - x)])  # Triton's -x is 0 - x: -(+0) is +0


@case()
def c_sqrt_rn(arch, rng):
    x = np.abs(_floats(rng, 8))
    x[6:12] = [np.inf, 1e-45, 2.0, 1e38, 7.0, 0.1]  # a subnormal too
    return _unary("sqrt_rn", tl.sqrt_rn, x, np.float32, np.sqrt(x))  # numpy's f32 sqrt is correctly rounded


@triton.jit
def binary_kernel(x_ptr, y_ptr, z_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    """z = FN(x, y), FN a constexpr as in unary_kernel."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(z_ptr + offs, FN(tl.load(x_ptr + offs, mask=mask), tl.load(y_ptr + offs, mask=mask)), mask=mask)


@triton.jit
def operator_kernel(x_ptr, y_ptr, z_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    """z = x OP y for Python's operators (which a kernel cannot take as constexprs: they are not builtins)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    if OP == "&":
        z = x & y
    elif OP == "|":
        z = x | y
    elif OP == "^":
        z = x ^ y
    elif OP == "<<":
        z = x << y
    elif OP == ">>":
        z = x >> y
    elif OP == "+":
        z = x + y
    elif OP == "*":
        z = x * y
    elif OP == "-":
        z = x - y
    elif OP == "//":
        z = x // y
    else:
        tl.static_assert(OP == "%", "unknown OP")
        z = x % y
    tl.store(z_ptr + offs, z, mask=mask)


@triton.jit
def _maximum_nan(x, y):
    return tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _where(x, y):
    return tl.where(x > y, x, y * 2)


def _binary(label: str, fn, x: np.ndarray, y: np.ndarray, out_dtype, want, check=exact) -> Run:
    return _launch_elementwise(binary_kernel, label, (x, y), out_dtype, want, check, FN=fn)


def _operator(op: str, x: np.ndarray, y: np.ndarray, out_dtype, want) -> Run:
    return _launch_elementwise(operator_kernel, op, (x, y), out_dtype, want, exact, OP=op)


@case()
def c_div_rn(arch, rng):
    x, y = _floats(rng), _floats(rng, 3)
    y[:8] = [1.0, 3.0, 0.0, -0.0, np.inf, 1e-40, 7.0, -1e30]
    with np.errstate(all="ignore"):
        return _binary("div_rn", tl.div_rn, x, y, np.float32, x / y)  # numpy's f32 division is IEEE division


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
    return chain([_binary("maximum", tl.maximum, x, y, np.float32, np.fmax(x, y)),
                  _binary("minimum", tl.minimum, x, y, np.float32, np.fmin(x, y)),
                  _binary("maximum_nan", _maximum_nan, x, y, np.float32, np.maximum(x, y))])


@case()
def c_where(arch, rng):
    x, y = _floats(rng), _floats(rng)
    return _binary("where", _where, x, y, np.float32, np.where(x > y, x, y * 2))


@case()
def c_umulhi(arch, rng):
    x = rng.integers(0, 2 ** 32, N, dtype=np.uint64).astype(np.uint32)
    y = rng.integers(0, 2 ** 32, N, dtype=np.uint64).astype(np.uint32)
    want = ((x.astype(np.uint64) * y.astype(np.uint64)) >> np.uint64(32)).astype(np.uint32)
    # of int32 operands too, the high half of the unsigned product (mul.hi.u32)
    return chain([_binary("umulhi", tl.umulhi, x, y, np.uint32, want),
                  _binary("umulhi", tl.umulhi, x.view(np.int32), y.view(np.int32), np.int32, want.view(np.int32))])


@case()
def c_integer_arithmetic(arch, rng):
    """Wrapping add and mul, sub, and Python-style // and % of int32 (Triton rounds toward zero: C's)."""
    x = rng.integers(-2 ** 31, 2 ** 31, N, dtype=np.int64).astype(np.int32)
    y = rng.integers(-2 ** 31, 2 ** 31, N, dtype=np.int64).astype(np.int32)
    d = rng.integers(-1000, 1000, N).astype(np.int32)
    d[d == 0] = 7
    with np.errstate(over="ignore"):
        return chain([_operator("+", x, y, np.int32, x + y), _operator("*", x, y, np.int32, x * y),
                      _operator("-", x, y, np.int32, x - y),
                      _operator("//", x, d, np.int32, np.trunc(x.astype(np.float64) / d).astype(np.int32)),
                      _operator("%", x, d, np.int32, np.fmod(x, d))])


@case()
def c_bit_operations(arch, rng):
    x = rng.integers(0, 2 ** 32, N, dtype=np.uint64).astype(np.uint32)
    y = rng.integers(0, 2 ** 32, N, dtype=np.uint64).astype(np.uint32)
    shifts = rng.integers(0, 32, N).astype(np.uint32)
    sx, s_shifts = x.view(np.int32), shifts.astype(np.int32)
    popc = np.array([int(v).bit_count() for v in x], np.int32)
    clz = np.array([32 - int(v).bit_length() for v in x], np.int32)
    return chain([_operator("&", x, y, np.uint32, x & y), _operator("|", x, y, np.uint32, x | y),
                  _operator("^", x, y, np.uint32, x ^ y), _operator("<<", x, shifts, np.uint32, x << shifts),
                  _operator(">>", x, shifts, np.uint32, x >> shifts),  # logical for unsigned
                  _operator(">>", sx, s_shifts, np.int32, sx >> s_shifts),  # arithmetic for signed
                  _unary("~", _invert, x, np.uint32, ~x),
                  _unary("popc", libdevice.popc, sx, np.int32, popc), _unary("clz", libdevice.clz, sx, np.int32, clz)])


@case()
def c_libdevice_pow_atan2(arch, rng):
    x, y = np.abs(_floats(rng, 2)) + np.float32(0.01), _floats(rng, 2)
    return chain([_binary("pow", libdevice.pow, x, y, np.float32, np.power(x.astype(np.float64), y),
                          ulps(4)),  # CUDA: powf 4 ulps
                  _binary("atan2", libdevice.atan2, y, x, np.float32, np.arctan2(y.astype(np.float64), x),
                          ulps(3))])  # atan2f 3


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
    return chain([_cast("bf16", x, bf16, nearest), _cast("bf16 rtz", x, bf16, truncated, rounding="rtz")])


@case()
def c_cast_half_and_back(arch, rng):
    x = _floats(rng, 100)
    x[6:9] = [70000.0, 1e-6, np.float32(1 + 2 ** -11)]  # overflow to inf, a subnormal, a tie
    bf16 = _ml_dtype("bfloat16")
    with np.errstate(over="ignore"):
        half = x.astype(np.float16)
    brain = x.astype(bf16)
    return chain([_cast("f16", x, np.float16, half), _cast("f32 of f16", half, np.float32, half.astype(np.float32)),
                  _cast("f32 of bf16", brain, np.float32, brain.astype(np.float32))])


@case()
def c_cast_float_int(arch, rng):
    """f32 -> i32 and u32 round toward zero (in range); i32 -> f32 and u32 -> f32 round to nearest;
    f32 -> f64 is exact."""
    x = (rng.standard_normal(N) * 1e6).astype(np.float32)
    i = rng.integers(-2 ** 31, 2 ** 31, N, dtype=np.int64).astype(np.int32)
    u = rng.integers(0, 2 ** 32, N, dtype=np.uint64).astype(np.uint32)
    return chain([_cast("i32", x, np.int32, np.trunc(x).astype(np.int32)),
                  _cast("u32", np.abs(x), np.uint32, np.trunc(np.abs(x)).astype(np.uint32)),
                  _cast("f32 of i32", i, np.float32, i.astype(np.float32)),
                  _cast("f32 of u32", u, np.float32, u.astype(np.float32)),
                  _cast("f64", x, np.float64, x.astype(np.float64))])


@case()
def c_cast_fp8(arch, rng):
    """f32 -> float8e5 (both archs) and float8e4nv (sm_89 and later), rounded to nearest even (in range);
    on sm_90a f16 to and from both too (cvt's e4m3x2 and e5m2x2 forms on pairs of f16)."""
    x = np.clip(_floats(rng, 20), -400, 400)
    e5 = _ml_dtype("float8_e5m2")
    runs = [_cast("e5m2", x, e5, x.astype(e5))]
    if arch != "sm_80":
        e4 = _ml_dtype("float8_e4m3fn")
        half = x.astype(np.float16)
        runs += [_cast("e4m3", x, e4, x.astype(e4)), _cast("e4m3 of f16", half, e4, half.astype(e4)),
                 _cast("e5m2 of f16", half, e5, half.astype(e5)),
                 _cast("f16 of e4m3", x.astype(e4), np.float16, x.astype(e4).astype(np.float16)),
                 _cast("f16 of e5m2", x.astype(e5), np.float16, x.astype(e5).astype(np.float16))]
    return chain(runs)


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


@case()
def c_reductions_f32(arch, rng):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    runs = [_reduce("sum", x, 1, np.float32, x.astype(np.float64).sum(axis=1), close(1e-5, 1e-5)),
            _reduce("sum", x, 0, np.float32, x.astype(np.float64).sum(axis=0), close(1e-5, 1e-5)),
            _reduce("max", x, 1, np.float32, x.max(axis=1)), _reduce("min", x, 0, np.float32, x.min(axis=0)),
            _reduce("argmax", x, 1, np.float32, x.max(axis=1), want_index=x.argmax(axis=1).astype(np.int32)),
            _reduce("argmin", x, 0, np.float32, x.min(axis=0), want_index=x.argmin(axis=0).astype(np.int32))]
    return chain(runs)


@case()
def c_reductions_i32(arch, rng):
    x = rng.integers(-2 ** 31, 2 ** 31, (8, 128), dtype=np.int64).astype(np.int32)
    small = rng.integers(-3, 4, (8, 128)).astype(np.int32)
    with np.errstate(over="ignore"):
        runs = [_reduce("sum", x, 1, np.int32, x.sum(axis=1, dtype=np.int32)),
                _reduce("xor_sum", x, 0, np.int32, np.bitwise_xor.reduce(x, axis=0)),
                _reduce("max", x, 0, np.int32, x.max(axis=0)),
                _reduce("prod", small, 0, np.int32, small.prod(axis=0, dtype=np.int32))]
    return chain(runs)


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
    return chain(runs)


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
def atomic_kernel(x_ptr, out_ptr, n, ATOMIC: tl.constexpr, BLOCK: tl.constexpr):
    """Every element into one of 8 slots with ATOMIC (tl.atomic_add, tl.atomic_max...: a constexpr)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    ATOMIC(out_ptr + offs % 8, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def exchange_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Each element exchanged into a table, the old value added into one of 8 slots past it."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    old = tl.atomic_xchg(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
    tl.atomic_add(out_ptr + n + offs % 8, old, mask=mask)


def _atomic(atomic, x, initial, want, check=exact):
    out = initial.copy()
    return Run(atomic_kernel, (triton.cdiv(x.size, 128),), (x, out, x.size), dict(ATOMIC=atomic, BLOCK=128),
               [Output(atomic.__name__, out, want, check)])


def _by_slot(x, reduce, initial):
    return np.array([reduce(np.concatenate([[initial[s]], x[s::8]])) for s in range(8)], x.dtype)


@case()
def c_atomics_integer(arch, rng):
    x = rng.integers(-2 ** 20, 2 ** 20, 1000).astype(np.int32)
    bits = rng.integers(0, 2 ** 31, 1000).astype(np.int32)
    zeros, ones = np.zeros(8, np.int32), np.full(8, -1, np.int32)
    runs = [_atomic(tl.atomic_add, x, zeros, _by_slot(x, np.sum, zeros)),
            _atomic(tl.atomic_max, x, zeros, _by_slot(x, np.max, zeros)),
            _atomic(tl.atomic_min, x, zeros, _by_slot(x, np.min, zeros)),
            _atomic(tl.atomic_and, bits, ones, _by_slot(bits, np.bitwise_and.reduce, ones)),
            _atomic(tl.atomic_or, bits, zeros, _by_slot(bits, np.bitwise_or.reduce, zeros)),
            _atomic(tl.atomic_xor, bits, zeros, _by_slot(bits, np.bitwise_xor.reduce, zeros))]
    return chain(runs)


@case()
def c_atomics_float_max_min(arch, rng):
    """atomic_max and atomic_min of f32 (Triton splits them by sign into integer atomics)."""
    x = rng.standard_normal(1000).astype(np.float32)
    low, high = np.full(8, -np.inf, np.float32), np.full(8, np.inf, np.float32)
    return chain([_atomic(tl.atomic_max, x, low, _by_slot(x, np.max, low)),
                  _atomic(tl.atomic_min, x, high, _by_slot(x, np.min, high))])


@case(deterministic=False)
def c_atomic_add_f32(arch, rng):
    """Float atomic adds: the order, so the last bits, vary on a GPU."""
    x = rng.standard_normal(1000).astype(np.float32)
    zeros = np.zeros(8, np.float32)
    return _atomic(tl.atomic_add, x, zeros, _by_slot(x.astype(np.float64), np.sum, zeros).astype(np.float64),
                   close(1e-5, 1e-5))


@case(deterministic=False)
def c_atomic_xchg(arch, rng):
    """Each element exchanged into a fresh table (returning the old values, all zero, summed into a
    second table); the table holds the new values whatever the order."""
    n = 512
    x = rng.integers(1, 100, n).astype(np.int32)
    out = np.zeros(n + 8, np.int32)
    want = np.concatenate([x, np.zeros(8, np.int32)])
    return Run(exchange_kernel, (n // 128,), (x, out, n), dict(BLOCK=128), [Output("xchg", out, want)])


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


@case()
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


@case()
def c_dot_int8(arch, rng):
    a = rng.integers(-128, 128, (64, 64)).astype(np.int8)
    b = rng.integers(-128, 128, (64, 64)).astype(np.int8)
    c = np.zeros((64, 64), np.int32)
    return Run(dot_kernel, (1,), (a, b, c), dict(M=64, N=64, K=64, num_warps=4),
               [Output("c", c, a.astype(np.int32) @ b.astype(np.int32))])


@case()
def c_dot_f64(arch, rng):
    a, b = rng.standard_normal((32, 32)), rng.standard_normal((32, 32))
    c = np.zeros((32, 32))
    return Run(dot_kernel, (1,), (a, b, c), dict(M=32, N=32, K=32, num_warps=4),
               [Output("c", c, a @ b, close(1e-13, 1e-13))])


@triton.jit
def dot_f16_accumulator_kernel(a_ptr, b_ptr, c_ptr, K, M: tl.constexpr, N: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, BK)
    acc = tl.zeros((M, N), dtype=tl.float16)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc, out_dtype=tl.float16)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@case()
def c_dot_f16_accumulator(arch, rng):
    """An f16 accumulator carried through a K loop: on sm_90a Triton unpacks it from the wgmma's registers
    before the wgmma.wait_group (ptxas waits for the wgmma there, C7517).  Small integers: every partial
    sum is exact in f16."""
    a = rng.integers(-4, 5, (64, 96)).astype(np.float16)
    b = rng.integers(-4, 5, (96, 64)).astype(np.float16)
    c = np.zeros((64, 64), np.float16)
    return Run(dot_f16_accumulator_kernel, (1,), (a, b, c, 96), dict(M=64, N=64, BK=32, num_warps=4),
               [Output("c", c, (a.astype(np.float64) @ b).astype(np.float16))])


@triton.jit
def half_kernel(x_ptr, y_ptr, z_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    z = tl.load(z_ptr + offs)
    tl.store(out_ptr + offs, tl.abs(x * y - z))


@case()
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


@case()
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


@case()
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


@case()
def c_randn(arch, rng):
    from .tutorials import philox, uniform
    out = np.zeros(N, np.float32)
    c0, c1, _, _ = philox(42, np.arange(N))
    u1, u2 = uniform(c0), uniform(c1)
    u1 = np.maximum(np.float32(1e-7), u1).astype(np.float64)
    want = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2.astype(np.float64))
    return Run(randn_kernel, (N // 128,), (out, 42), dict(BLOCK=128), [Output("randn", out, want, close(1e-5, 1e-5))])
