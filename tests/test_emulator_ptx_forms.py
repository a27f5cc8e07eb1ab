"""PTX forms the emulator runs besides those the Phobos compiler emits, each checked bit for bit against a
reference computed here, independently of the emulator's numerics, on kernels ptxas accepts:

* extended-precision arithmetic through the carry flag (add.cc, addc, sub.cc, subc, mad.cc, madc: the
  multi-word arithmetic of libdevice's argument reduction and of Philox), against Python integers;
* 16-bit float arithmetic (add, sub, mul, fma, neg, abs, min, max of f16, bf16 and their pairs, with .ftz,
  .sat, .relu, .NaN, .xorsign.abs), each result rounded once from the exact value (Fractions);
* lop3, createpolicy with the .L2::cache_hint operand of ld and st;
* 24-bit multiplies (mul24, mad24) and sums of absolute differences (sad), against Python integers;
* mma.sync of every f64 shape, of s8/u8 (mixed, .satfinite) in m8n8k16, m16n8k16 and m16n8k32, of e4m3
  with e5m2, and with f16 accumulators, the fragments laid out from the PTX ISA's formulas written out here;
* and valid PTX the emulator does not model, which is UnsupportedPtx naming the instruction, never a
  PtxSyntaxError.
Triton's kernels that use these forms: tests/test_emulator_triton_ptx.py."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from phobos.run.emulator import Module
from phobos.run.emulator.errors import PtxSyntaxError, UnsupportedPtx

from . import tensor_core_support as tc
from .emulator_support import PTXAS, assert_valid_ptx, numpy_dtype, ptxas_errors, run_elementwise
from .half_support import FORMAT, ml_dtypes, round_code
rng = np.random.default_rng(42)
MASK64 = (1 << 64) - 1


def words(*arrays) -> list[list[int]]:
    return [[int(x) for x in a] for a in arrays]


def random_u64(n: int) -> np.ndarray:
    """u64 values, many near the carry boundaries (all ones, zero, the top bit)."""
    x = rng.integers(0, 1 << 64, n, dtype=np.uint64)
    x[::5] = np.uint64(MASK64) - rng.integers(0, 4, len(x[::5]), dtype=np.uint64)
    x[1::7] = rng.integers(0, 4, len(x[1::7]), dtype=np.uint64)
    x[2::9] |= np.uint64(0xFFFFFFFF)
    return x


# ------------------------------------------------------------------ carry chains

ADD128_TOP = """{
.reg .b32 %x<4>, %y<4>, %z<4>;
mov.b64 {%x0, %x1}, %a0; mov.b64 {%x2, %x3}, %a1; mov.b64 {%y0, %y1}, %a2; mov.b64 {%y2, %y3}, %a3;
add.cc.u32 %z0, %x0, %y0; addc.cc.u32 %z1, %x1, %y1; addc.cc.s32 %z2, %x2, %y2; addc.u32 %z3, %x3, %y3;
mov.b64 %d, {%z2, %z3};
}"""
SUB128_TOP = ADD128_TOP.replace("add.cc", "sub.cc").replace("addc", "subc")
ADD128_TOP_U64 = "{ .reg .b64 %lo; add.cc.u64 %lo, %a0, %a2; addc.u64 %d, %a1, %a3; }"
SUB128_TOP_S64 = "{ .reg .b64 %lo; sub.cc.s64 %lo, %a0, %a2; subc.s64 %d, %a1, %a3; }"


@pytest.mark.parametrize("text, op", [(ADD128_TOP, "add"), (SUB128_TOP, "sub"), (ADD128_TOP_U64, "add"),
                                      (SUB128_TOP_S64, "sub")], ids=["add32", "sub32", "add64", "sub64"])
def test_carry_chains_make_128_bit_sums(text, op):
    """The high 64 bits of a 128-bit sum or difference, the carry (borrow) rippling through CC.CF."""
    a_lo, a_hi, b_lo, b_hi = (random_u64(600) for _ in range(4))
    got = run_elementwise(text, "b64", *(("b64", x) for x in (a_lo, a_hi, b_lo, b_hi)))
    for g, al, ah, bl, bh in zip(got, *words(a_lo, a_hi, b_lo, b_hi)):
        a, b = ah << 64 | al, bh << 64 | bl
        exact = (a + b) if op == "add" else (a - b)
        assert int(g) == (exact >> 64) & MASK64


MAD64 = """{
.reg .b32 %c<2>, %z<2>;
mov.b64 {%c0, %c1}, %a2;
mad.lo.cc.u32 %z0, %a0, %a1, %c0; madc.hi.u32 %z1, %a0, %a1, %c1;
mov.b64 %d, {%z0, %z1};
}"""
MUL96_MIDDLE = """{
.reg .b32 %x<2>, %t, %z<3>;
mov.b64 {%x0, %x1}, %a0;
mul.hi.u32 %t, %x0, %a1;
mad.lo.cc.u32 %z1, %x1, %a1, %t; madc.hi.u32 %z2, %x1, %a1, 0;
mov.b64 %d, {%z1, %z2};
}"""
MAD128_U64 = """{
.reg .b64 %lo;
mad.lo.cc.u64 %lo, %a0, %a1, %a2; madc.hi.cc.u64 %d, %a0, %a1, %a3; madc.lo.u64 %lo, %a0, %a1, %lo;
}"""


def test_mad_cc_chains_multiply_wide():
    """mad.lo.cc + madc.hi: a u32 product plus a u64 (libdevice's 32-bit limbs); the middle 64 bits of a
    64 x 32-bit product; a u64 product plus a u128 (.u64 forms, madc.hi.cc)."""
    a, b = (rng.integers(0, 1 << 32, 800, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    a[:4], b[:4] = 0xFFFFFFFF, 0xFFFFFFFF
    c = random_u64(800)
    got = run_elementwise(MAD64, "b64", ("b32", a), ("b32", b), ("b64", c))
    assert [int(g) for g in got] == [(x * y + z) & MASK64 for x, y, z in zip(*words(a, b, c))]
    wide = random_u64(800)
    got = run_elementwise(MUL96_MIDDLE, "b64", ("b64", wide), ("b32", b))
    assert [int(g) for g in got] == [(x * y >> 32) & MASK64 for x, y in zip(*words(wide, b))]
    x, y, lo, hi = (random_u64(800) for _ in range(4))
    got = run_elementwise(MAD128_U64, "b64", *(("b64", v) for v in (x, y, lo, hi)))
    assert [int(g) for g in got] == [((p * q + (h << 64 | low)) >> 64) & MASK64
                                     for p, q, low, h in zip(*words(x, y, lo, hi))]


CARRY_OUT = """{
.reg .b32 %z;
mad.hi.cc.s32 %z, %a0, %a1, %a2; addc.u32 %d, 0, 0;
}"""


def test_the_carry_of_a_signed_mad_hi_is_that_of_its_bits():
    """mad.hi.cc.s32: the high half of the signed product plus c, the carry that of the unsigned bits."""
    a, b, c = (rng.integers(-2**31, 2**31, 1000).astype(np.int32) for _ in range(3))
    a[:3], b[:3], c[:3] = [-2**31, -1, 2**31 - 1], [-2**31, -1, 5], [-1, -1, -1]
    got = run_elementwise(CARRY_OUT, "b32", ("s32", a), ("s32", b), ("s32", c))
    for g, x, y, z in zip(got, *words(a, b, c)):
        high = ((x * y) >> 32) & 0xFFFFFFFF
        assert int(g) == int(high + (z & 0xFFFFFFFF) >= 1 << 32)


# ------------------------------------------------------------------ 16-bit floats

def codes_of(name: str, n: int) -> np.ndarray:
    """Finite codes of the format: random bit patterns, and values within a few binades of 1 (so that sums
    are not all decided by one operand), signed zeros, the smallest subnormals and the largest values."""
    kind, _, top, _ = FORMAT[name]
    wide = rng.integers(0, top + 1, n, dtype=np.uint16) | (rng.integers(0, 2, n, dtype=np.uint16) << 15)
    near = (rng.standard_normal(n) * 4).astype(np.float32).astype(kind).view(np.uint16)
    edges = np.array([0, 0x8000, 1, 0x8001, 2, top, top | 0x8000, top - 1], np.uint16)
    out = np.concatenate([wide, near, edges])
    return rng.permutation(out)


def value(code: int, name: str) -> Fraction:
    return Fraction(float(np.array([code], np.uint16).view(FORMAT[name][0])[0]))


def flushed(code: int, name: str) -> int:
    """.ftz: a subnormal becomes the zero of its sign."""
    exponent_mask = FORMAT[name][3]  # the infinity's code: every exponent bit
    return code & 0x8000 if code & exponent_mask == 0 else code


def reference(op: str, name: str, codes: list[int], ftz: bool = False, sat: bool = False,
              relu: bool = False) -> int:
    """The code `op` gives: the exact result of the operands' values rounded once (.ftz: subnormal operands
    and results flushed to zeros of their sign; .relu: negative results, -0.0 too, become +0.0; .sat:
    clamped to [0, 1])."""
    if ftz:
        codes = [flushed(c, name) for c in codes]
    x = [value(c, name) for c in codes]
    signs = [bool(c & 0x8000) for c in codes]
    if op == "add":
        exact, zero_sign = x[0] + x[1], signs[0] and signs[1]
    elif op == "sub":
        exact, zero_sign = x[0] - x[1], signs[0] and not signs[1]
    elif op == "mul":
        exact, zero_sign = x[0] * x[1], signs[0] != signs[1]
    else:
        product_sign = signs[0] != signs[1]
        exact = x[0] * x[1] + x[2]
        zero_sign = product_sign and signs[2] if x[0] * x[1] == 0 and x[2] == 0 else False
    code = round_code(exact, zero_sign, name)
    if ftz:
        code = flushed(code, name)
    if relu and code & 0x8000:
        code = 0
    if sat:
        one = int(np.array([1.0], FORMAT[name][0]).view(np.uint16)[0])
        code = 0 if code & 0x8000 else min(code, one)
    return code


OPERANDS = {"add": 2, "sub": 2, "mul": 2, "fma": 3}
ROUNDED = [  # (instruction, op, format, modifiers)
    ("add.f16", "add", "f16", {}), ("add.rn.ftz.f16", "add", "f16", {"ftz": True}),
    ("sub.rn.sat.f16", "sub", "f16", {"sat": True}), ("mul.ftz.f16", "mul", "f16", {"ftz": True}),
    ("fma.rn.f16", "fma", "f16", {}), ("fma.rn.ftz.relu.f16", "fma", "f16", {"ftz": True, "relu": True}),
    ("fma.rn.sat.f16", "fma", "f16", {"sat": True}),
    ("add.rn.bf16", "add", "bf16", {}), ("sub.bf16", "sub", "bf16", {}), ("mul.rn.bf16", "mul", "bf16", {}),
    ("fma.rn.bf16", "fma", "bf16", {}), ("fma.rn.relu.bf16", "fma", "bf16", {"relu": True}),
]


@pytest.mark.parametrize("instruction, op, name, flags", ROUNDED, ids=[r[0] for r in ROUNDED])
def test_16_bit_arithmetic_rounds_once(instruction, op, name, flags):
    count = OPERANDS[op]
    operands = [codes_of(name, 700) for _ in range(count)]
    text = f"{instruction} %d, {', '.join(f'%a{i}' for i in range(count))};"
    got = run_elementwise(text, "b16", *(("b16", x) for x in operands))
    want = [reference(op, name, list(cs), **flags) for cs in zip(*words(*operands))]
    np.testing.assert_array_equal(got, np.array(want, np.uint16))


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_packed_pairs_compute_each_half_alone(name):
    """fma.rn.{f16x2,bf16x2}: each 16-bit half of the .b32 operands on its own."""
    lo, hi = [[codes_of(name, 500) for _ in range(3)] for _ in range(2)]
    packed = [h.astype(np.uint32) << 16 | l_ for l_, h in zip(lo, hi)]
    got = run_elementwise(f"fma.rn.{name}x2 %d, %a0, %a1, %a2;", "b32", *(("b32", x) for x in packed))
    want_lo = [reference("fma", name, list(cs)) for cs in zip(*words(*lo))]
    want_hi = [reference("fma", name, list(cs)) for cs in zip(*words(*hi))]
    np.testing.assert_array_equal(got & 0xFFFF, want_lo)
    np.testing.assert_array_equal(got >> 16, want_hi)


NAN, INF, NEG_INF, ONE, ZERO = 0x7E00, 0x7C00, 0xFC00, 0x3C00, 0x0000


@pytest.mark.parametrize("instruction, operands, want", [
    ("add.f16", [INF, NEG_INF], 0x7FFF), ("mul.f16", [INF, ZERO], 0x7FFF), ("fma.rn.f16", [INF, ONE, NEG_INF], 0x7FFF),
    ("add.f16", [NAN | 0x8000, ONE], 0x7FFF), ("add.f16", [INF, 0x7BFF], INF), ("mul.f16", [0x7BFF, 0x4000], INF),
    ("fma.rn.sat.f16", [NAN, ONE, ONE], ZERO), ("neg.f16", [NAN], 0x7FFF), ("abs.f16", [0xFE01], 0x7FFF),
    ("neg.f16", [ZERO], 0x8000), ("abs.ftz.f16", [0x8001], ZERO), ("neg.ftz.f16", [0x0001], 0x8000),
    ("max.f16", [NAN, ONE], ONE), ("min.f16", [NAN, NAN | 0x8000], 0x7FFF), ("max.NaN.f16", [ONE, NAN], 0x7FFF),
    ("min.f16", [ZERO, 0x8000], 0x8000), ("max.f16", [0x8000, ZERO], ZERO), ("max.ftz.f16", [0x0001, 0x8000], ZERO),
    ("min.xorsign.abs.f16", [0xC000, 0x3C00], 0xBC00), ("max.xorsign.abs.f16", [0xC000, 0xBC00], 0x4000),
    ("max.NaN.xorsign.abs.f16", [0xC000, NAN], 0x7FFF),
    ("max.bf16", [0x7FC1, 0x3F80], 0x3F80), ("min.NaN.bf16", [0x3F80, 0xFFC0], 0x7FFF), ("neg.bf16", [0x3F80], 0xBF80),
    ("abs.bf16", [0xFF80], 0x7F80), ("add.bf16", [0x7F80, 0xFF80], 0x7FFF),
], ids=lambda x: x if isinstance(x, str) else None)
def test_16_bit_special_values(instruction, operands, want):
    """NaN results are the canonical 0x7FFF; min and max ignore one NaN (.NaN: not), order -0 below +0 and
    give |a| and |b|'s extreme the sign of a xor b under .xorsign.abs; neg and abs change the sign."""
    text = f"{instruction} %d, {', '.join(f'%a{i}' for i in range(len(operands)))};"
    got = run_elementwise(text, "b16", *(("b16", np.array([x], np.uint16)) for x in operands))
    assert int(got[0]) == want, hex(int(got[0]))


def test_16_bit_min_max_neg_abs_of_pairs():
    a, b = (codes_of("f16", 300).astype(np.uint32) << 16 | codes_of("f16", 300) for _ in range(2))
    got_min = run_elementwise("min.f16x2 %d, %a0, %a1;", "b32", ("b32", a), ("b32", b))
    got_neg = run_elementwise("neg.bf16x2 %d, %a0;", "b32", ("b32", a))
    halves = lambda x, s: ((x >> s) & 0xFFFF).astype(np.uint16).view(np.float16)  # noqa: E731
    for s in (0, 16):
        x, y = halves(a, s), halves(b, s)
        smaller = np.where((y < x) | ((x == y) & np.signbit(y)), y, x)
        np.testing.assert_array_equal(halves(got_min, s).view(np.uint16), smaller.view(np.uint16))
        np.testing.assert_array_equal((got_neg >> s) & 0xFFFF, ((a >> s) & 0xFFFF) ^ 0x8000)


def test_f32_min_max_xorsign_abs():
    """min/max.xorsign.abs.f32 (sm_86+; Triton's tl.clamp on sm_90): the extreme magnitude, with the sign
    the exclusive or of the operands' signs; a NaN result (.NaN, or two NaNs) is the canonical NaN."""
    a = np.concatenate([rng.standard_normal(300), [np.nan, 1.0, -0.0, 0.0, np.nan]]).astype(np.float32)
    b = np.concatenate([rng.standard_normal(300), [2.0, np.nan, 0.0, -0.0, np.nan]]).astype(np.float32)
    got = run_elementwise("min.xorsign.abs.f32 %d, %a0, %a1;", "f32", ("f32", a), ("f32", b))
    with np.errstate(invalid="ignore"):
        magnitude = np.fmin(np.abs(a), np.abs(b))
    want = np.where(np.signbit(a) ^ np.signbit(b), -magnitude, magnitude)
    both = np.isnan(a) & np.isnan(b)
    np.testing.assert_array_equal(got[~both].view(np.uint32), want[~both].view(np.uint32))
    assert (got[both].view(np.uint32) == 0x7FFFFFFF).all()
    got = run_elementwise("max.NaN.xorsign.abs.f32 %d, %a0, %a1;", "f32", ("f32", a), ("f32", b))
    assert (got[np.isnan(a) | np.isnan(b)].view(np.uint32) == 0x7FFFFFFF).all()


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_16_bit_comparisons_compare_values(name):
    """setp.lt.bf16 compares values (negative ones too, not their bits); setp of pairs writes p for the low
    halves and q for the high ones (the bf16 forms Triton emits on sm_90)."""
    kind = FORMAT[name][0]
    a, b = codes_of(name, 400), codes_of(name, 400)
    got = run_elementwise(f"setp.lt.{name} %d, %a0, %a1;", "pred", ("b16", a), ("b16", b))
    np.testing.assert_array_equal(got, a.view(kind).astype(np.float32) < b.view(kind).astype(np.float32))
    pair_a, pair_b = a.astype(np.uint32) | b.astype(np.uint32) << 16, b.astype(np.uint32) | a.astype(np.uint32) << 16
    low = run_elementwise(f"{{ .reg .pred %q; setp.ge.{name}x2 %d|%q, %a0, %a1; }}", "pred", ("b32", pair_a), ("b32", pair_b))
    high = run_elementwise(f"{{ .reg .pred %p; setp.ge.{name}x2 %p|%d, %a0, %a1; }}", "pred", ("b32", pair_a), ("b32", pair_b))
    values = a.view(kind).astype(np.float32), b.view(kind).astype(np.float32)
    np.testing.assert_array_equal(low, values[0] >= values[1])
    np.testing.assert_array_equal(high, values[1] >= values[0])


# ------------------------------------------------------------------ lop3, createpolicy

@pytest.mark.parametrize("table", [0x00, 0xFF, 0x96, 0xE8, 0xCA, 0x80, 0xFE, 0x1E, 0x40])
def test_lop3_evaluates_its_table_bit_by_bit(table):
    a, b, c = (rng.integers(0, 1 << 32, 300, dtype=np.uint64).astype(np.uint32) for _ in range(3))
    got = run_elementwise(f"lop3.b32 %d, %a0, %a1, %a2, {table:#x};", "b32", ("b32", a), ("b32", b), ("b32", c))
    for g, x, y, z in zip(got, *words(a, b, c)):
        want = sum(((table >> ((x >> i & 1) << 2 | (y >> i & 1) << 1 | (z >> i & 1))) & 1) << i for i in range(32))
        assert int(g) == want


CACHE_POLICIES = """
.version 8.5
.target sm_90
.address_size 64
.visible .entry copy(.param .u64 dst, .param .u64 src, .param .u64 prop)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<9>;
    ld.param.u64 %rd1, [dst];
    add.s64 %rd8, %rd1, 512;
    ld.param.u64 %rd2, [src];
    ld.param.u64 %rd7, [prop];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd1, %rd1, %rd3;
    add.s64 %rd2, %rd2, %rd3;
    createpolicy.fractional.L2::evict_last.L2::evict_unchanged.b64 %rd4, 0.5;
    createpolicy.range.global.L2::evict_first.b64 %rd5, [%rd2], 64, 128;
    createpolicy.cvt.L2.b64 %rd6, %rd7;
    ld.global.L1::evict_last.L2::cache_hint.b32 %r2, [%rd2], %rd4;
    st.global.L2::cache_hint.b32 [%rd1], %r2, %rd5;
    ld.global.nc.L2::cache_hint.b32 %r2, [%rd2+128], %rd6;
    createpolicy.fractional.L2::evict_first.b64 %rd4;
    st.global.L1::no_allocate.L2::cache_hint.b32 [%rd1+128], %r2, %rd4;
    atom.global.add.L2::cache_hint.u32 %r2, [%rd8], 1, %rd4;
    red.global.add.L2::cache_hint.u32 [%rd8], 2, %rd5;
    ret;
}
"""


def test_cache_policies_change_no_value():
    """createpolicy's three forms make policies; ld, st, atom and red take them as .L2::cache_hint operands
    (Triton's eviction_policy=) and do exactly what they would without."""
    assert_valid_ptx(CACHE_POLICIES)
    src = rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32)
    dst = np.zeros(129, np.uint32)
    Module(CACHE_POLICIES, "policies.ptx").launch("copy", 1, 32, [dst, src, 0x1234])
    np.testing.assert_array_equal(dst[:64], src)
    assert dst[128] == 32 * 3


# ------------------------------------------------------------------ mma.sync shapes

def lanes():
    lane = np.arange(32)
    return lane // 4, lane % 4  # groupID, threadID_in_group


def a_positions(shape: str, kind: str):
    """(row, column) of each (register, element) of A per lane, from the PTX ISA's formulas:
    (registers, elements per register) arrays of (32,) rows and columns."""
    g, t = lanes()
    if kind == "f64":
        regs = {"m8n8k4": 1, "m16n8k4": 2, "m16n8k8": 4, "m16n8k16": 8}[shape]
        if shape == "m16n8k16":  # row g for even i, g + 8 for odd; column 2i + t (even), 2i - 2 + t (odd)
            return [[(g + 8 * (i % 2), 2 * i + t if i % 2 == 0 else 2 * i - 2 + t)] for i in range(regs)]
        return [[(g + 8 * (i % 2), t + 4 * (i // 2))] for i in range(regs)]
    # 8-bit: a_i, four a register; rows g (i < 4 in a k16 shape, i % 8 < 4 in k32), columns 4t + i % 4 (+16)
    if shape == "m8n8k16":
        return [[(g, 4 * t + e) for e in range(4)]]
    if shape == "m16n8k16":
        return [[(g + 8 * r, 4 * t + e) for e in range(4)] for r in range(2)]
    return [[(g + 8 * (r % 2), 4 * t + e + 16 * (r // 2)) for e in range(4)] for r in range(4)]


def b_positions(shape: str, kind: str):
    g, t = lanes()
    if kind == "f64":
        regs = {"m8n8k4": 1, "m16n8k4": 1, "m16n8k8": 2, "m16n8k16": 4}[shape]
        return [[(t + 4 * i, g)] for i in range(regs)]
    regs = 2 if shape == "m16n8k32" else 1
    return [[(4 * t + e + 16 * r, g) for e in range(4)] for r in range(regs)]


def c_positions(shape: str):
    g, t = lanes()
    if shape.startswith("m8n8"):
        return [[(g, 2 * t + i)] for i in range(2)]
    return [[(g + 8 * (i // 2), 2 * t + i % 2)] for i in range(4)]


SHAPES = {"m8n8k4": (8, 8, 4), "m16n8k4": (16, 8, 4), "m16n8k8": (16, 8, 8), "m16n8k16": (16, 8, 16),
          "m8n8k16": (8, 8, 16), "m16n8k32": (16, 8, 32)}


def pack(matrices: np.ndarray, positions, element_bits: int) -> list[np.ndarray]:
    """Per register, the (warps * 32,) values holding `matrices` (warps, R, C) of raw element bits."""
    out = []
    for elements in positions:
        reg = np.zeros((len(matrices), 32), np.uint64)
        for e, (rows, cols) in enumerate(elements):
            reg |= matrices[:, rows, cols].astype(np.uint64) << np.uint64(element_bits * e)
        out.append(reg.reshape(-1))
    return out


def unpack(registers: list[np.ndarray], positions, shape) -> np.ndarray:
    warps = len(registers[0]) // 32
    out = np.zeros((warps, *shape), registers[0].dtype)
    for reg, elements in zip(registers, positions):
        for rows, cols in elements:
            out[:, rows, cols] = reg.reshape(warps, 32)
    return out


def mma_kernel(instruction: str, a_regs: int, b_regs: int, c_regs: int, operand: str, acc: str) -> str:
    """A kernel in which each thread loads its registers of A, B (.b64 slots, `operand` registers) and C
    (`acc` registers), runs one mma and stores D."""
    regs = lambda name, n: "{" + ", ".join(f"%{name}{i}" for i in range(n)) + "}"  # noqa: E731
    load = lambda name, n, param, typ: "\n".join(  # noqa: E731
        f"ld.global.{typ} %{name}{i}, [%p{param}+{8 * i}];" for i in range(n))
    return f"""
.version 8.5
.target sm_90
.address_size 64
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
    .reg .{operand} %a<8>, %b<4>;
    .reg .{acc} %c<4>, %d<4>;
    {tc.thread_pointers({"pa": 64, "pb": 64, "pc": 64, "pd": 64})}
{load("a", a_regs, 0, operand)}
{load("b", b_regs, 1, operand)}
{load("c", c_regs, 2, acc)}
    {instruction} {regs("d", c_regs)}, {regs("a", a_regs)}, {regs("b", b_regs)}, {regs("c", c_regs)};
{chr(10).join(f"st.global.{acc} [%p3+{8 * i}], %d{i};" for i in range(c_regs))}
    ret;
}}
"""


def emulate(text: str, kernel: str, grid, block, args: list, shared_bytes: int = 0) -> None:
    Module(text, f"{kernel}.ptx").launch(kernel, grid, block, args, shared_bytes)


def run_mma(instruction: str, shape: str, kind: str, a_bits, b_bits, c_regs_values, acc: str, element_bits: int,
            launcher=emulate):
    """D's registers (one (threads,) uint64 array each) of `instruction` on A and B (warps, R, C raw element
    bits) and C's registers, run by `launcher` (the emulator; the GPU tests pass the GPU's)."""
    a_pos, b_pos = a_positions(shape, kind), b_positions(shape, kind)
    operand = "f64" if kind == "f64" else "b32"
    text = mma_kernel(instruction, len(a_pos), len(b_pos), len(c_regs_values), operand, acc)
    if PTXAS is not None:
        assert ptxas_errors(text, "sm_90") is None, ptxas_errors(text, "sm_90")
    threads = len(c_regs_values[0])
    slots = lambda regs: np.stack(regs + [np.zeros(threads, np.uint64)] * (8 - len(regs)), axis=1)  # noqa: E731
    a = slots(pack(a_bits, a_pos, element_bits))
    b = slots(pack(b_bits, b_pos, element_bits))
    c = slots([np.asarray(x).astype(np.uint64) for x in c_regs_values])
    d = np.zeros_like(c)
    launcher(text, "k", -(-threads // 128), min(threads, 128), [a, b, c, d])
    return [d[:, i] for i in range(len(c_regs_values))]


def rounded(x: Fraction, mode: str) -> float:
    """x rounded to float64: to nearest (Python's correctly rounded division), or toward -inf (rm) / 0 (rz)."""
    f = float(x)
    if mode == "rm" and Fraction(f) > x or mode == "rz" and abs(Fraction(f)) > abs(x):
        f = float(np.nextafter(f, -np.inf if f > 0 or mode == "rm" else np.inf))
    return f


def fma_chain(a: np.ndarray, b: np.ndarray, c: np.ndarray, mode: str = "rn") -> np.ndarray:
    """C + A B with every multiply-add an fma rounded once (exact rationals, k ascending)."""
    out = np.zeros(c.shape)
    for index in np.ndindex(*c.shape):
        w, i, j = index
        acc = float(c[index])
        for k in range(a.shape[-1]):
            acc = rounded(Fraction(float(a[w, i, k])) * Fraction(float(b[w, k, j])) + Fraction(acc), mode)
        out[index] = acc
    return out


@pytest.mark.parametrize("shape, mode", [("m8n8k4", ""), ("m16n8k4", ""), ("m16n8k8", ""), ("m16n8k16", ""),
                                         ("m8n8k4", "rz"), ("m16n8k8", "rm")])
def test_mma_f64_is_a_chain_of_fmas(shape, mode):
    """mma .f64 (m8n8k4 from sm_80, the m16n8 shapes from sm_90): each multiply-add an fma.f64, rounded as the
    optional rounding modifier says (.rn by default)."""
    m, n, k = SHAPES[shape]
    warps = 2
    a, b = rng.standard_normal((warps, m, k)), rng.standard_normal((warps, k, n))
    c = rng.standard_normal((warps, m, n)) * 4
    c_pos = c_positions(shape)
    c_regs = pack(c.view(np.uint64), c_pos, 64)
    d = run_mma(f"mma.sync.aligned.{shape}.row.col{'.' + mode if mode else ''}.f64.f64.f64.f64", shape, "f64",
                a.view(np.uint64), b.view(np.uint64), c_regs, "f64", 64)
    got = unpack([x.view(np.float64) for x in d], c_pos, (m, n))
    want = fma_chain(a, b, c, mode or "rn")
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(want, np.matmul(a, b) + c)  # the roundings show


@pytest.mark.parametrize("shape, atype, btype, satfinite", [
    ("m8n8k16", "s8", "s8", False), ("m16n8k16", "u8", "s8", False), ("m16n8k16", "s8", "u8", True),
    ("m16n8k32", "u8", "u8", False), ("m16n8k32", "u8", "s8", True)])
def test_mma_8_bit_integers(shape, atype, btype, satfinite):
    """s8 and u8 in any pairing, s32 sums exact and wrapped, or clamped with .satfinite."""
    m, n, k = SHAPES[shape]
    warps = 2
    draw = lambda t, size: (rng.integers(-128, 128, size) if t == "s8" else rng.integers(0, 256, size))  # noqa: E731
    a, b = draw(atype, (warps, m, k)), draw(btype, (warps, k, n))
    a[:, 0], b[:, :, 0] = (127 if atype == "s8" else 255), (127 if btype == "s8" else 255)
    c = rng.integers(2**31 - 2**12, 2**31, (warps, m, n)) * rng.choice([-1, 1], (warps, m, n))
    c_pos = c_positions(shape)
    c_regs = pack(c.astype(np.int32).view(np.uint32).astype(np.uint64), c_pos, 32)
    sat = ".satfinite" if satfinite else ""
    d = run_mma(f"mma.sync.aligned.{shape}.row.col{sat}.s32.{atype}.{btype}.s32", shape, "i8",
                a.astype(np.uint8).astype(np.uint64), b.astype(np.uint8).astype(np.uint64), c_regs, "b32", 8)
    got = unpack([x.astype(np.uint32).view(np.int32) for x in d], c_pos, (m, n))
    exact = np.matmul(a, b) + c
    want = np.clip(exact, -2**31, 2**31 - 1) if satfinite else exact
    np.testing.assert_array_equal(got, want.astype(np.int64).astype(np.int32))
    assert (exact != want.astype(np.int64).astype(np.int32)).any()  # some sums wrapped or clamped


def test_mma_e4m3_with_e5m2_and_f16_accumulators():
    """m16n8k32 of e4m3 A and e5m2 B (small values, whose sums are exact in every model) and
    m16n8k16 f16 with f16 C and D (two elements a register, elements 2i and 2i + 1 of the f32 layout)."""
    warps = 2
    a = rng.integers(-4, 5, (warps, 16, 32)) / 2
    b = rng.integers(-4, 5, (warps, 32, 8)) / 4
    c = rng.integers(-64, 64, (warps, 16, 8)) / 8
    c_pos = c_positions("m16n8k32")
    d = run_mma("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", "m16n8k32", "f8",
                a.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).astype(np.uint64),
                b.astype(ml_dtypes.float8_e5m2).view(np.uint8).astype(np.uint64),
                pack(c.astype(np.float32).view(np.uint32), c_pos, 32), "f32", 8)
    got = unpack([x.astype(np.uint32).view(np.float32) for x in d], c_pos, (16, 8))
    np.testing.assert_array_equal(got, np.matmul(a, b) + c)

    a16, b16 = rng.integers(-8, 9, (warps, 16, 16)), rng.integers(-8, 9, (warps, 16, 8))
    c16 = rng.integers(-512, 512, (warps, 16, 8))
    f16_pairs = [[c_pos[0][0], c_pos[1][0]], [c_pos[2][0], c_pos[3][0]]]  # d0, d1 in one register; d2, d3
    a_pos = [[((np.arange(32) // 4) + 8 * (i % 2), 2 * (np.arange(32) % 4) + h + 8 * (i // 2)) for h in (0, 1)]
             for i in range(4)]
    b_pos = [[(2 * (np.arange(32) % 4) + h + 8 * i, np.arange(32) // 4) for h in (0, 1)] for i in range(2)]
    bits = lambda x: x.astype(np.float16).view(np.uint16).astype(np.uint64)  # noqa: E731
    text = mma_kernel("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", 4, 2, 2, "b32", "b32")
    if PTXAS is not None:
        assert ptxas_errors(text, "sm_90") is None
    slots = lambda regs: np.stack(regs + [np.zeros(64, np.uint64)] * (8 - len(regs)), axis=1)  # noqa: E731
    args = [slots(pack(bits(a16), a_pos, 16)), slots(pack(bits(b16), b_pos, 16)), slots(pack(bits(c16), f16_pairs, 16))]
    out = np.zeros_like(args[0])
    Module(text, "mma.ptx").launch("k", 1, 64, args + [out])
    got = unpack([out[:, i].astype(np.uint16).view(np.float16) for i in range(2)]
                 + [(out[:, i] >> np.uint64(16)).astype(np.uint16).view(np.float16) for i in range(2)],
                 [[p[0]] for p in f16_pairs] + [[p[1]] for p in f16_pairs], (16, 8))
    np.testing.assert_array_equal(got, (np.matmul(a16, b16) + c16).astype(np.float16))


# ------------------------------------------------------------------ wgmma: integers and f16 accumulators

def wgmma_registers(d: np.ndarray, pairs: bool) -> np.ndarray:
    """The (128, registers) accumulator registers holding the 64 x n matrix `d` (raw bits): one element a
    register, or two (f16: register j holds elements 2j and 2j + 1 of the f32 layout, the low half first)."""
    n = d.shape[1]
    regs = np.array([[d[tc.wgmma_d_position(t, r)] for r in range(n // 2)] for t in range(128)], np.uint32)
    return regs[:, 0::2] | regs[:, 1::2] << np.uint32(16) if pairs else regs


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
def test_wgmma_of_8_bit_floats_into_f16_is_unsupported_naming_the_form(kind):
    """An H100 does not give the f32 sum rounded once to f16 there (tests/test_emulator_ptx_forms_gpu.py),
    so the emulator refuses the form rather than give other numbers."""
    a_op = tc.Operand(64, 64, kind, "K", 64)
    b_op = tc.Operand(64, 64, kind, "K", 64)
    text = tc.wgmma_ptx(kind, 64, a_op, b_op, 2, acc_type="f16")
    maps = [a_op.tensor_map(a_op.global_array(np.zeros((64, 64), np.uint8))),
            b_op.tensor_map(b_op.global_array(np.zeros((64, 64), np.uint8)))]
    c_regs = wgmma_registers(np.zeros((64, 64), np.uint32), True)
    with pytest.raises(UnsupportedPtx, match=f"wgmma.mma_async.m64n64k32.f16.{kind}.{kind}: 8-bit floats into an f16"):
        Module(text, "wgmma.ptx").launch("wgmma_test", 1, 128, maps + [np.zeros(1, np.uint32), c_regs,
                                         np.zeros_like(c_regs)], shared_bytes=tc.wgmma_shared_bytes(a_op, b_op))


@pytest.mark.parametrize("kind, acc", [("f16", "f16"), ("s8", "s32"), ("u8", "s32")])
def test_wgmma_with_f16_and_s32_accumulators(kind, acc):
    """wgmma m64n64 with f16 accumulators (two a register) on values whose sums every rounding model gives
    exactly, and of s8 / u8 with s32 ones: the exact sums wrapped to 32 bits."""
    ktot, n = 64, 64
    step = tc.STEP[kind]
    swizzle = ktot * tc.ESIZE[kind] if ktot * tc.ESIZE[kind] <= 128 else 0
    if acc == "s32":
        low, high = (-128, 128) if kind == "s8" else (0, 256)
        a, b = rng.integers(low, high, (64, ktot)), rng.integers(low, high, (ktot, n))
        c = rng.integers(2**31 - 2**17, 2**31, (64, n)) * rng.choice([-1, 1], (64, n))  # near the limits
        stored_a, stored_b = a.astype(np.uint8), b.astype(np.uint8)
        c_bits = c.astype(np.int32).view(np.uint32)
        want = (c + a @ b).astype(np.int64).astype(np.int32).view(np.uint32)
    else:
        a, b = rng.integers(-4, 5, (64, ktot)) / 2, rng.integers(-4, 5, (ktot, n)) / 2
        c = rng.integers(-64, 65, (64, n)) / 4
        stored_a, stored_b = tc.encode(a, kind), tc.encode(b, kind)
        c_bits = c.astype(np.float16).view(np.uint16).astype(np.uint32)
        want = (c + a @ b).astype(np.float16).view(np.uint16).astype(np.uint32)
    a_op = tc.Operand(64, ktot, kind, "K", swizzle)
    b_op = tc.Operand(n, ktot, kind, "K", swizzle)
    text = tc.wgmma_ptx(kind, n, a_op, b_op, ktot // step, acc_type=acc)
    if PTXAS is not None:
        assert ptxas_errors(text, "sm_90a") is None, ptxas_errors(text, "sm_90a")
    maps = [a_op.tensor_map(a_op.global_array(stored_a)), b_op.tensor_map(b_op.global_array(stored_b.T))]
    c_regs = wgmma_registers(c_bits, acc == "f16")
    out = np.zeros_like(c_regs)
    Module(text, "wgmma.ptx").launch("wgmma_test", 1, 128, maps + [np.zeros(1, np.uint32), c_regs, out],
                                     shared_bytes=tc.wgmma_shared_bytes(a_op, b_op))
    np.testing.assert_array_equal(out, wgmma_registers(want, acc == "f16"))
    if acc == "s32":
        assert (want.view(np.int32) != c + a @ b).any()  # some sums wrapped


# ------------------------------------------------------------------ mul24, mad24, sad

def _low24(v: int, signed: bool) -> int:
    v &= 0xFFFFFF
    return v - (1 << 24) if signed and v & 0x800000 else v


def _mul24(half: str, signed: bool):
    return lambda a, b: (_low24(a, signed) * _low24(b, signed)) >> (16 if half == "hi" else 0)


def _clamp_s32(v: int) -> int:
    return max(-(1 << 31), min((1 << 31) - 1, v))


#: (instruction, type, reference on Python integers - the operands' values - before wrapping to the type)
INTEGER_FORMS = [
    ("mul24.lo.s32", "s32", _mul24("lo", True)), ("mul24.hi.s32", "s32", _mul24("hi", True)),
    ("mul24.lo.u32", "u32", _mul24("lo", False)), ("mul24.hi.u32", "u32", _mul24("hi", False)),
    ("mad24.lo.s32", "s32", lambda a, b, c: _mul24("lo", True)(a, b) + c),
    ("mad24.hi.u32", "u32", lambda a, b, c: _mul24("hi", False)(a, b) + c),
    ("mad24.hi.sat.s32", "s32", lambda a, b, c: _clamp_s32(_s32_of(_mul24("hi", True)(a, b)) + c)),
] + [(f"sad.{t}", t, lambda a, b, c: c + abs(a - b)) for t in ("s16", "u16", "s32", "u32", "s64", "u64")]


def _s32_of(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def integer_operands(t: str, n: int) -> np.ndarray:
    """n random values of integer type t, its extremes and small values among them."""
    info = np.iinfo(numpy_dtype(t))
    edges = np.array([info.min, info.max, 0, 1, info.max // 2 + 1, 0xFFFFFF & info.max, 0x800000 & info.max], object)
    values = rng.integers(info.min, info.max, n, dtype=numpy_dtype(t), endpoint=True)
    values[: len(edges)] = edges.astype(numpy_dtype(t))
    return rng.permutation(values)


@pytest.mark.parametrize("instruction, t, reference", INTEGER_FORMS, ids=[f[0] for f in INTEGER_FORMS])
def test_24_bit_multiplies_and_sums_of_absolute_differences(instruction, t, reference):
    count = reference.__code__.co_argcount
    operands = [integer_operands(t, 2048) for _ in range(count)]
    args = ", ".join(f"%a{i}" for i in range(count))
    got = run_elementwise(f"{instruction} %d, {args};", t, *((t, x) for x in operands))
    bits = np.dtype(numpy_dtype(t)).itemsize * 8
    want = [reference(*(int(x[k]) for x in operands)) & ((1 << bits) - 1) for k in range(len(got))]
    np.testing.assert_array_equal(got.view(f"u{bits // 8}"), np.array(want, f"u{bits // 8}"))


# ------------------------------------------------------------------ valid PTX the emulator does not model

def one_instruction(target: str, declarations: str, instruction: str) -> str:
    return (f".version 8.7\n.target {target}\n.address_size 64\n.visible .entry k()\n{{\n{declarations}\n"
            f"{instruction}\nret;\n}}\n")


UNMODELLED = [
    ("sm_90", ".reg .b32 %r<4>;", "bmsk.clamp.b32 %r0, %r1, %r2;", "bmsk"),
    ("sm_90", ".reg .b32 %r<4>;", "dp2a.lo.u32.u32 %r0, %r1, %r2, %r3;", "dp2a"),
    ("sm_90", ".reg .b32 %r<4>;", "szext.wrap.u32 %r0, %r1, %r2;", "szext"),
    ("sm_90", ".reg .b32 %a<4>, %b<2>, %c<4>;",
     "mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%c0,%c1,%c2,%c3}, {%a0,%a1,%a2,%a3}, {%b0,%b1}, "
     "{%c0,%c1,%c2,%c3};", "mma of .s4"),
    ("sm_90a", ".reg .b32 %a<4>, %c<4>; .reg .b64 %db;",
     "wgmma.mma_async.sync.aligned.m64n8k256.s32.b1.b1.and.popc {%c0,%c1,%c2,%c3}, {%a0,%a1,%a2,%a3}, %db, 1;",
     "wgmma.mma_async of .b1"),
]


@pytest.mark.parametrize("target, declarations, instruction, name", UNMODELLED, ids=[u[3] for u in UNMODELLED])
def test_valid_ptx_the_emulator_lacks_is_unsupported_naming_the_instruction(target, declarations, instruction, name):
    """Each instruction assembles with ptxas; the emulator refuses it with UnsupportedPtx quoting it (a form
    it does not model is never a PtxSyntaxError)."""
    text = one_instruction(target, declarations, instruction)
    if PTXAS is not None:
        assert ptxas_errors(text, target) is None, ptxas_errors(text, target)
    with pytest.raises(UnsupportedPtx) as info:
        Module(text, "k.ptx")
    assert not isinstance(info.value, PtxSyntaxError)
    assert instruction.split()[0] in str(info.value) and name.split()[0] in str(info.value)
