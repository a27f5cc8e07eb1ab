"""Triton's PTX in the emulator, for the instructions Triton emits that the Phobos compiler does not: kernels
written as Triton users write them, compiled by Triton for sm_80 and sm_90a without a GPU, run with
`phobos.run.emulator.launch` and compared with numpy references exactly (the approximate functions within
their bounds, said where):

* tl.sin / tl.cos on large arguments and tl.randn (libdevice's argument reduction: mad.lo.cc, madc.hi),
  tl.rand, tl.randint and dropout against a numpy Philox;
* f16 and bf16 arithmetic (fma.rn.f16, mul.f16, sub.f16, max.NaN.f16, fma.rn.bf16, mul.rn.bf16, ...);
* eviction_policy= (createpolicy and the .L2::cache_hint operand);
* conversions to and from fp8e4nv / fp8e5 (cvt.rn.satfinite.e4m3x2.f16x2, cvt.rn.f16x2.e4m3x2, ...);
* on-device tensor descriptors (tl.make_tensor_descriptor: tensormap.replace, tensormap.cp_fenceproxy,
  fence.proxy.tensormap);
* tl.dot of int8 (mma m16n8k32 .satfinite, wgmma k32 .s8), fp8 (wgmma k32 e4m3/e5m2, f32 and f16
  accumulators), f16 with f16 accumulators and f64 (mma m8n8k4, m16n8k16) against exact products;
* the race detectors' lane-at-a-time bookkeeping against their byte-by-byte one (a pipelined matrix product).

Every kernel here was refused by the emulator before these forms were added, except the fp8 conversions
(kept as a check against Triton's PTX) and the matrix product.  The kernel takes Triton's two trailing scratch pointers (global
and profile scratch: a 0-size array or a sized one where the kernel uses it) and metadata.shared bytes of
dynamic shared memory."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from phobos.run.emulator import launch
from phobos.run.emulator.errors import AsyncCopyHazard, UnsupportedPtx

from .half_support import NAMES, ml_dtypes, round_code

triton = pytest.importorskip("triton", reason="Triton compiles the kernels: pip install triton")
tl = triton.language
rng = np.random.default_rng(7)


def compile_kernel(fn, signature: dict, constexprs: dict, arch: int, num_warps: int = 4):
    """Triton's compiled kernel for sm_{arch} (sm_90a for 90): signature by parameter name, constexprs too."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    full = {**signature, **{name: "constexpr" for name in constexprs}}
    return triton.compile(ASTSource(fn=fn, signature=full, constexprs=constexprs),
                          target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})


def run(fn, signature: dict, constexprs: dict, args: list, grid, arch: int, num_warps: int = 4,
        check_races: bool = True) -> str:
    """Compile and run in the emulator (arrays are written back in place); returns the PTX."""
    kernel = compile_kernel(fn, signature, constexprs, arch, num_warps)
    scratch = np.zeros(max(kernel.metadata.global_scratch_size, 1) * int(np.prod(grid)), np.uint8)
    ptx = kernel.asm["ptx"]
    launch(ptx, kernel.name, grid, num_warps * 32, [*args, scratch, None], kernel.metadata.shared,
           name=f"{kernel.name}.ptx", check_races=check_races)
    return ptx


ARCHS = [80, 90]


# ------------------------------------------------------------------ carry chains: sin, cos, randn

@triton.jit
def unary(x_ptr, y_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.sin(x) if OP == "sin" else tl.cos(x)
    tl.store(y_ptr + offs, y, mask=mask)


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in ulps of f32 at want."""
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


@pytest.mark.parametrize("op", ["sin", "cos"])
@pytest.mark.parametrize("arch", ARCHS)
def test_sin_and_cos_of_large_arguments(op, arch):
    """libdevice's sinf/cosf reduce arguments beyond 105615 with a 96-bit product of 2/pi (Payne-Hanek:
    mad.lo.cc.u32 / madc.hi.u32 chains); the results are within 2 ulp of the true sine (CUDA's bound for
    sinf and cosf) - a wrong carry would give garbage."""
    x = np.concatenate([rng.uniform(-1, 1, 256) * 10.0 ** rng.uniform(5.1, 38, 256),
                        [105616.0, -3.0e38, 1e30, 6.0e5, 2.0 ** 100]]).astype(np.float32)
    y = np.zeros_like(x)
    ptx = run(unary, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}, {"OP": op, "BLOCK": 128},
              [x, y, len(x)], (-(-len(x) // 128),), arch)
    assert "mad.lo.cc.u32" in ptx and "madc.hi.u32" in ptx
    want = (np.sin if op == "sin" else np.cos)(x.astype(np.float64))
    assert ulps(y, want).max() <= 2


def philox(seed: int, offsets: np.ndarray, rounds: int = 10) -> np.ndarray:
    """Triton's tl.randint4x's first output: Philox 4x32-10 of counters (offset, 0, 0, 0) and key (seed low,
    seed high) (triton/language/random.py)."""
    c0, c1, c2, c3 = (np.asarray(offsets, np.uint64).astype(np.uint32), *(np.zeros(len(offsets), np.uint32),) * 3)
    k0, k1 = np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32)
    a, b = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    for _ in range(rounds):
        p0, p2 = c0.astype(np.uint64) * a, c2.astype(np.uint64) * b
        c0, c1, c2, c3 = ((p2 >> np.uint64(32)).astype(np.uint32) ^ c1 ^ k0, p2.astype(np.uint32),
                          (p0 >> np.uint64(32)).astype(np.uint32) ^ c3 ^ k1, p0.astype(np.uint32))
        k0, k1 = np.uint32((int(k0) + 0x9E3779B9) & 0xFFFFFFFF), np.uint32((int(k1) + 0xBB67AE85) & 0xFFFFFFFF)
    return c0, c1


def uniform(bits: np.ndarray) -> np.ndarray:
    """tl.rand's floats of Philox bits (uint_to_uniform_float): |x| (ones' complement below 0) times a scale,
    in f32."""
    x = bits.view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x).astype(np.int32)
    return x.astype(np.float32) * np.float32(4.6566127342e-10)


@triton.jit
def random_kernel(y_ptr, x_ptr, n, seed, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if OP == "randint":
        y = tl.randint(seed, offs).to(tl.float32, bitcast=True)
    elif OP == "rand":
        y = tl.rand(seed, offs)
    elif OP == "dropout":
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.where(tl.rand(seed, offs) > 0.3, x / (1 - 0.3), 0.0)
    else:
        y = tl.randn(seed, offs)
    tl.store(y_ptr + offs, y, mask=mask)


@pytest.mark.parametrize("op", ["randint", "rand", "dropout", "randn"])
@pytest.mark.parametrize("arch", ARCHS)
def test_philox_random_numbers(op, arch):
    """tl.randint and tl.rand bit for bit against a numpy Philox, dropout too; tl.randn (Box-Muller with
    libdevice's logf and cosf, whose cosf has the carry chains) within 2e-6 of the float64 transform of the
    same uniforms (its log and cosine are not bit-exact to numpy's)."""
    n, seed = 1000, 0x12345678_9ABCDEF0 if op != "randn" else 1234
    y, x = np.zeros(n, np.float32), rng.standard_normal(n).astype(np.float32)
    run(random_kernel, {"y_ptr": "*fp32", "x_ptr": "*fp32", "n": "i32", "seed": "i64"}, {"OP": op, "BLOCK": 128},
        [y, x, n, seed], (-(-n // 128),), arch)
    first, second = philox(seed, np.arange(n))
    if op == "randint":
        np.testing.assert_array_equal(y.view(np.uint32), first)
    elif op == "rand":
        np.testing.assert_array_equal(y, uniform(first))
    elif op == "dropout":
        keep = uniform(first) > np.float32(0.3)
        # x / 0.7 is div.full.f32: x times the reciprocal, one rounding (ptxas folds a constant divisor's
        # reciprocal, correctly rounded; MUFU.RCP gives the same for 0.7)
        scale = np.float32(1) / np.float32(1 - 0.3)
        np.testing.assert_array_equal(y, np.where(keep, x * scale, np.float32(0)))
    else:
        u1 = np.maximum(np.float32(1e-7), uniform(first)).astype(np.float64)
        u2 = uniform(second).astype(np.float64)
        want = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)
        np.testing.assert_allclose(y, want, rtol=2e-6, atol=2e-6)


# ------------------------------------------------------------------ 16-bit arithmetic

@triton.jit
def half_ops(x_ptr, y_ptr, z_ptr, o_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x, y, z = tl.load(x_ptr + offs, mask=mask), tl.load(y_ptr + offs, mask=mask), tl.load(z_ptr + offs, mask=mask)
    if OP == "fma":
        r = tl.fma(x, y, z)
    elif OP == "mul_add":
        r = x * y + z
    elif OP == "mul":
        r = x * y
    elif OP == "sub":
        r = x - y
    elif OP == "add":
        r = x + y
    elif OP == "neg":
        r = -x
    elif OP == "abs":
        r = tl.abs(x)
    elif OP == "minimum":
        r = tl.minimum(x, y)
    elif OP == "select":
        r = tl.where(x > y, x, z)
    else:
        r = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
    tl.store(o_ptr + offs, r, mask=mask)


HALF_TYPES = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def half_inputs(dtype, n: int) -> list[np.ndarray]:
    """Values within a few binades of each other (so that the rounding of sums matters), subnormals,
    signed zeros, infinities and a NaN."""
    base = [(rng.standard_normal(n) * 10.0 ** rng.integers(-2, 3, n)).astype(np.float32).astype(dtype)
            for _ in range(3)]
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6e-8, -1e-7, 65504.0, 3.0e38], np.float32)
    with np.errstate(over="ignore"):
        specials = specials.astype(dtype)
    for b in base:
        b[:len(specials)] = rng.permutation(specials)
    return base


def round_to(exact, kind) -> np.ndarray:
    """Exact results (Fractions; the IEEE specials and zeros as floats) rounded once to the 16-bit type."""
    name = NAMES[np.dtype(kind)]
    with np.errstate(over="ignore"):
        codes = [round_code(x, False, name) if isinstance(x, Fraction) else int(np.array([x]).astype(kind).view(np.uint16)[0])
                 for x in exact]
    return np.array(codes, np.uint16).view(kind)


def exact_result(op: str, x, y, z):
    """The exact value of op (Fraction), or the IEEE special (float) where an operand or product is not
    finite, or a signed zero (float) where the exact result is zero."""
    fx, fy, fz = (float(v) for v in (x, y, z))
    with np.errstate(all="ignore"):
        special = {"fma": fx * fy + fz, "mul_add": fx * fy + fz, "mul": fx * fy, "sub": fx - fy, "add": fx + fy}[op]
    if not all(np.isfinite(v) for v in (fx, fy, fz, special)):
        return special
    a, b, c = Fraction(fx), Fraction(fy), Fraction(fz)
    value = {"fma": a * b + c, "mul_add": a * b + c, "mul": a * b, "sub": a - b, "add": a + b}[op]
    return value if value != 0 else special  # float64 gives the zero's IEEE sign (exact here)


@pytest.mark.parametrize("op", ["fma", "mul_add", "mul", "sub", "add", "neg", "abs", "minimum", "maximum_nan",
                                "select"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_16_bit_arithmetic(op, dtype, arch):
    """Triton computes f16 and bf16 arithmetic in the format (fma.rn.f16, mul.f16, ..., fma.rn.bf16 for every
    bf16 operation on sm_80): each result is the exact one rounded once (x * y + z is contracted to one fma);
    NaN results are the canonical NaN; minimum ignores a NaN, maximum with propagate_nan does not; comparisons
    (setp.gt.bf16 on sm_90) compare values."""
    kind = HALF_TYPES[dtype]
    n = 600
    x, y, z = half_inputs(kind, n)
    out = np.zeros(n, kind)
    ptx = run(half_ops, {p: f"*{dtype}" for p in ("x_ptr", "y_ptr", "z_ptr", "o_ptr")} | {"n": "i32"},
              {"OP": op, "BLOCK": 128}, [x.view(np.uint16), y.view(np.uint16), z.view(np.uint16), out.view(np.uint16), n],
              (-(-n // 128),), arch)
    assert "f32" not in " ".join(line for line in ptx.splitlines() if op in ("fma", "mul", "sub") and "cvt" in line)
    if op == "select":
        want = np.where(x.astype(np.float32) > y.astype(np.float32), x, z)
        np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))
        return
    if op == "abs":  # and.b16 of the sign bit
        want = np.abs(x)
        keep = ~np.isnan(x)
        np.testing.assert_array_equal(out.view(np.uint16)[keep], want.view(np.uint16)[keep])
        assert np.isnan(out[~keep]).all()
        return
    if op in ("minimum", "maximum_nan"):
        a, b = x.astype(np.float32), y.astype(np.float32)
        smaller = (b < a) | ((a == b) & np.signbit(b))
        pick = np.where(op == "minimum", smaller | np.isnan(a), ~smaller | np.isnan(a))
        want = np.where(pick & ~np.isnan(b), y, x)
        if op == "maximum_nan":
            want = np.where(np.isnan(a) | np.isnan(b), np.array(np.nan, kind), np.where((a == b), np.where(np.signbit(a), y, x), want))
        keep = ~np.isnan(want.astype(np.float32))
        np.testing.assert_array_equal(out.view(np.uint16)[keep], want.view(np.uint16)[keep])
        assert (out.view(np.uint16)[~keep] == 0x7FFF).all()
        return
    if op == "neg":  # Triton negates as 0 - x (0 - 0 is +0)
        op, x, y = "sub", np.zeros_like(x), x
    want = round_to([exact_result(op, *v) for v in zip(x, y, z)], kind)
    keep = ~np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(out.view(np.uint16)[keep], want.view(np.uint16)[keep])
    assert (out.view(np.uint16)[~keep] == 0x7FFF).all()  # the canonical NaN


@triton.jit
def clamp(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.clamp(tl.load(x_ptr + offs, mask=mask), -2.0, 2.0), mask=mask)


@pytest.mark.parametrize("arch", ARCHS)
def test_clamp(arch):
    """tl.clamp between -c and c: min.xorsign.abs.f32 on sm_90."""
    x = np.concatenate([rng.standard_normal(300) * 3, [0.0, -0.0, 2.0, -2.0, np.inf, -np.inf]]).astype(np.float32)
    y = np.zeros_like(x)
    ptx = run(clamp, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}, {"BLOCK": 128}, [x, y, len(x)], (3,), arch)
    assert ("min.xorsign.abs.f32" in ptx) == (arch == 90)
    np.testing.assert_array_equal(y.view(np.uint32), np.clip(x, np.float32(-2), np.float32(2)).view(np.uint32))


# ------------------------------------------------------------------ eviction policies

@triton.jit
def evict(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, eviction_policy="evict_last")
    tl.store(y_ptr + offs, x * 2 + 1, mask=mask, eviction_policy="evict_first")


@pytest.mark.parametrize("arch", ARCHS)
def test_eviction_policies(arch):
    x = rng.standard_normal(500).astype(np.float32)
    y = np.zeros_like(x)
    ptx = run(evict, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}, {"BLOCK": 128}, [x, y, len(x)], (4,), arch)
    assert "createpolicy.fractional.L2::evict_last" in ptx and "L2::cache_hint" in ptx
    np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(1))


#: The fp8 formats by Triton's name: (ml_dtypes type, largest finite value); the wider float types.
FP8 = {"fp8e4nv": (ml_dtypes.float8_e4m3fn, 448.0), "fp8e5": (ml_dtypes.float8_e5m2, 57344.0)}
WIDE = {"fp16": np.float16, "fp32": np.float32, "bf16": ml_dtypes.bfloat16}


# ------------------------------------------------------------------ on-device tensor descriptors

@triton.jit
def descriptor_copy(a_ptr, b_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    a = tl.make_tensor_descriptor(a_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    b = tl.make_tensor_descriptor(b_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    b.store([m, n], a.load([m, n]) * 3)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "i8"])
def test_tensor_descriptors_built_on_the_device(dtype):
    """tl.make_tensor_descriptor on sm_90a: the kernel zeroes 128 bytes of shared memory, writes each field
    with tensormap.replace (the emulator's encoding, tensor_map.FIELD_OFFSETS), copies the map to its global
    scratch with tensormap.cp_fenceproxy and fences it; TMA loads and stores go through it, out-of-bound
    elements of the ragged edge neither read nor written."""
    kind = {"fp32": np.float32, "fp16": np.float16, "i8": np.int8}[dtype]
    m, n = 70, 96
    a = rng.integers(-40, 40, (m, n)).astype(kind)
    b = np.full((m, n), 5, kind)
    ptx = run(descriptor_copy, {"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "M": "i32", "N": "i32"},
              {"BM": 32, "BN": 32}, [a, b, m, n], (3, 3), 90)
    assert "tensormap.replace.tile.global_address" in ptx and "tensormap.cp_fenceproxy" in ptx
    np.testing.assert_array_equal(b, a * kind(3))


# ------------------------------------------------------------------ tl.dot

@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=c_ptr.dtype.element_ty)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b, out_dtype=c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def dot(arch, a_type, c_type, a, b, c_kind, tiles=(64, 64, 32), expect="", check_races=True, b_type=None):
    (m, k), n = a.shape, b.shape[1]
    c = np.zeros((m, n), c_kind)
    ptx = run(matmul, {"a_ptr": f"*{a_type}", "b_ptr": f"*{b_type or a_type}", "c_ptr": f"*{c_type}", "M": "i32", "N": "i32",
                       "K": "i32"}, dict(zip(("BM", "BN", "BK"), tiles)), [a, b, c, m, n, k],
              (m // tiles[0], n // tiles[1]), arch, check_races=check_races)
    assert expect in ptx, f"expected {expect}"
    return c


@pytest.mark.parametrize("arch, form", [(80, "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32"),
                                        (90, "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8")])
def test_int8_dot(arch, form):
    a, b = rng.integers(-128, 128, (64, 128)).astype(np.int8), rng.integers(-128, 128, (128, 128)).astype(np.int8)
    c = dot(arch, "i8", "i32", a, b, np.int32, expect=form)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("a_type, b_type, out", [
    ("fp8e4nv", "fp8e4nv", "fp32"), ("fp8e5", "fp8e5", "fp32"), ("fp8e4nv", "fp8e5", "fp32")])
def test_fp8_dot(a_type, b_type, out):
    """wgmma m64n64k32 of e4m3 / e5m2 (and e4m3 with e5m2) with f32 accumulators, on values whose
    products and sums every rounding model gives exactly (multiples of 1/8 below 64)."""
    a, b = rng.integers(-6, 7, (64, 64)) / 2, rng.integers(-6, 7, (64, 64)) / 4
    codes = lambda x, t: x.astype(FP8[t][0]).view(np.uint8)  # noqa: E731
    names = {"fp8e4nv": "e4m3", "fp8e5": "e5m2"}
    c = dot(90, a_type, out, codes(a, a_type), codes(b, b_type), np.float32 if out == "fp32" else np.float16,
            expect=f"wgmma.mma_async.sync.aligned.m64n64k32.f{out[2:]}.{names[a_type]}.{names[b_type]}", b_type=b_type)
    np.testing.assert_array_equal(c, a @ b)


@pytest.mark.parametrize("a_type", ["fp8e4nv", "fp8e5"])
def test_fp8_dot_into_f16_is_unsupported(a_type):
    """Triton's fp8 dot with an fp16 result is a wgmma into f16 accumulators, whose rounding on an H100 the
    model does not give: the emulator refuses it, naming the form."""
    codes = np.zeros((64, 64), np.uint8)
    with pytest.raises(UnsupportedPtx, match="8-bit floats into an f16 accumulator"):
        dot(90, a_type, "fp16", codes, codes, np.float16, expect="wgmma.mma_async", b_type=a_type)


@pytest.mark.parametrize("arch, form", [(80, "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"),
                                        (90, "wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16")])
def test_f16_dot_with_f16_accumulators(arch, form):
    """On sm_90a Triton unpacks the f16 accumulators (mov.b32 {h, h}, r) between wgmma.commit_group and the
    wgmma.wait_group its inline asm says waits for them; ptxas waits for the wgmma before those reads (C7517),
    and so does the emulator (race checks on: no report)."""
    a, b = rng.integers(-8, 9, (64, 64)).astype(np.float16), rng.integers(-4, 5, (64, 64)).astype(np.float16)
    c = dot(arch, "fp16", "fp16", a, b, np.float16, expect=form)
    np.testing.assert_array_equal(c, (a.astype(np.float64) @ b).astype(np.float16))


@pytest.mark.parametrize("arch, form", [(80, "mma.sync.aligned.m8n8k4.row.col.f64"),
                                        (90, "mma.sync.aligned.m16n8k16.row.col.f64")])
def test_f64_dot_is_a_chain_of_fmas(arch, form):
    """f64 tl.dot: every multiply-add an fma.rn.f64, k ascending through the K loop (exact rationals).  (Race
    checks off: Triton's layout conversion stores replicated values, several lanes the same value to one
    address, which the shared-memory detector reports.)"""
    m = n = k = 32
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    c = dot(arch, "fp64", "fp64", a, b, np.float64, tiles=(16, 16, 16), expect=form, check_races=False)
    want = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            acc = 0.0
            for kk in range(k):
                acc = float(Fraction(a[i, kk]) * Fraction(b[kk, j]) + Fraction(acc))
            want[i, j] = acc
    np.testing.assert_array_equal(c, want)


# ------------------------------------------------------------------ race detectors: lanes and bytes

@triton.jit
def _tiled_matmul(a_ptr, b_ptr, c_ptr, K, N: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.arange(0, N)
    acc = tl.zeros((BLOCK, N), tl.float32)
    for k in range(0, K, 32):  # (a loop Triton pipelines with cp.async)
        ks = k + tl.arange(0, 32)
        a = tl.load(a_ptr + rows[:, None] * N + ks[None, :])
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(tl.float16))


@pytest.mark.parametrize("arch", ARCHS)
def test_race_detectors_record_by_lanes_what_they_record_byte_by_byte(arch, monkeypatch):
    """The detectors' lane-at-a-time paths (aligned loads and stores, cp.async sources and copies) leave the shadow
    state, the memory and the verdict just as the byte-by-byte paths do: a pipelined matrix product whose
    CTAs all read one B (bytes read by several lanes in thread order), run both ways."""
    import phobos.triton
    from phobos.run.emulator import machine, memory
    states = []
    run_batch = machine.Machine.run

    def per_byte(state, field, whole="whole"):  # (a whole chunk holds its bytes' state once, not its bytes)
        held = np.where(np.repeat(getattr(state, whole), memory.SUMMARY_CHUNK), np.repeat(getattr(state, f"chunk_{field}"), memory.SUMMARY_CHUNK), getattr(state, field))
        if field == "pc":  # (an instruction counts where an access is recorded)
            return np.where(per_byte(state, "hi") != -1, held, -1)
        if field == "write_pc":
            return np.where(per_byte(state, "writer", whole) != -1, held, -1)
        return held

    def unfenced(state):  # (the writers that no fence.proxy.async followed, and their instructions where they are)
        if state is None:
            return None
        whole = np.repeat(state.whole, memory.SUMMARY_CHUNK)
        writer, pc = (np.where(whole, np.repeat(getattr(state, f"chunk_{f}"), memory.SUMMARY_CHUNK), getattr(state, f))
                      for f in ("writer", "pc"))
        return writer, np.where(writer != 0, pc, -1)

    def recorded(m):
        try:
            run_batch(m)
        finally:
            shared, glob = m.shared.races, m.glob.races
            states.append([m.shared.data.copy(), m.glob.data.copy(), shared.pending.copy(),
                           shared.pending_chunks.copy(), unfenced(shared.unfenced),
                           *(per_byte(x, f) for x in (shared.reads, shared.writes) for f in ("lo", "hi", "pc")),
                           *(per_byte(glob, f, "whole_written") for f in ("writer", "write_epoch", "write_pc")),
                           *(per_byte(glob, f, "whole_read") for f in ("reader_lo", "reader_hi", "read_epoch",
                                                                        "read_pc"))])
    monkeypatch.setattr(machine.Machine, "run", recorded)
    n, block = 128, 32
    a = rng.standard_normal((n, n)).astype(np.float16)
    b = rng.standard_normal((n, n)).astype(np.float16)
    outputs = []
    for lanes in (True, False):
        if not lanes:
            for cls, name in ((memory.RaceDetector, "_load_by_lanes"), (memory.RaceDetector, "_write_by_lanes"),
                              (memory.GlobalRaceDetector, "_read_by_lanes"),
                              (memory.GlobalRaceDetector, "_write_by_lanes")):
                monkeypatch.setattr(cls, name, lambda *args: False)
        c = np.zeros((n, n), np.float16)
        phobos.triton.emulate(_tiled_matmul, arch=f"sm_{arch}" if arch == 80 else "sm_90a")[(n // block,)](
            a, b, c, n, N=n, BLOCK=block)
        outputs.append(c)
    assert np.array_equal(outputs[0], outputs[1])
    assert np.abs(outputs[0].astype(np.float32) - a.astype(np.float32) @ b.astype(np.float32)).max() < 0.1
    by_lanes, by_bytes = states
    for x, y in zip(by_lanes, by_bytes):
        assert (x is None and y is None) or np.array_equal(x, y)
