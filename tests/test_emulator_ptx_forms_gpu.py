"""The PTX forms of tests/test_emulator_ptx_forms.py on a real GPU (skipped with the reason where there is
none), against the emulator bit for bit, on random operands - where the emulator follows the PTX ISA exactly
(carry chains, 16-bit rounding, lop3, mul24, mad24, sad, f64 mma, integer mma) and where it makes an
assumption the ISA leaves open: div and rem by zero give all ones (what ptxas's code gives), neg and abs of
a 16-bit NaN give the canonical NaN (as f32's do), f64 mma chains its fmas in k order, and f16 accumulators
of mma / wgmma get the f32 model's result rounded once to nearest even.  A mismatch
names the form, how many results differ and the first.

    pytest -m gpu tests/test_emulator_ptx_forms_gpu.py -q
"""
from __future__ import annotations

import numpy as np
import pytest

from phobos.run import runtime
from phobos.run.emulator import Module

from . import tensor_core_support as tc
from . import test_emulator_ptx_forms as forms
from .emulator_support import elementwise_ptx, numpy_dtype

pytestmark = pytest.mark.gpu
rng = np.random.default_rng(2028)


def capability() -> tuple[int, int]:
    return tuple(runtime.device_properties().compute_capability)


def require(major: int, minor: int = 0) -> None:
    if capability() < (major, minor):
        pytest.skip(f"needs compute capability {major}.{minor} or newer, this GPU has {capability()}")


def on_gpu(text: str, kernel: str, grid, block, args: list, shared_bytes: int = 0) -> None:
    runtime.launch(text, kernel, grid, block, args, shared_bytes, timeout_s=60)


def assert_same_bits(gpu: np.ndarray, emulated: np.ndarray, what: str, inputs=()) -> None:
    raw = f"u{gpu.dtype.itemsize}"
    g, e = np.asarray(gpu).reshape(-1).view(raw), np.asarray(emulated).reshape(-1).view(raw)
    differ = np.flatnonzero(g != e)
    if differ.size:
        i = int(differ[0])
        given = ", ".join(f"{int(np.asarray(x).reshape(-1).view(f'u{np.asarray(x).dtype.itemsize}')[i]):#x}"
                          for x in inputs)
        pytest.fail(f"{what}: {differ.size} of {g.size} results differ; first at {i} (inputs {given}): GPU "
                    f"{int(g[i]):#x}, emulator {int(e[i]):#x}", pytrace=False)


def elementwise_on_both(instruction: str, out: str, *inputs) -> None:
    text = elementwise_ptx(instruction, out, [t for t, _ in inputs])
    n = len(inputs[0][1])
    arrays = [np.ascontiguousarray(a, numpy_dtype(t)) for t, a in inputs]
    results = []
    for launcher in (on_gpu, forms.emulate):
        result = np.zeros(n, numpy_dtype(out))
        launcher(text, "k", (-(-n // 128),), (128,), [result, *arrays, n])
        results.append(result)
    assert_same_bits(*results, instruction, [a for a in arrays])


def test_carry_chains():
    u64 = [forms.random_u64(4096) for _ in range(4)]
    for text in (forms.ADD128_TOP, forms.SUB128_TOP, forms.ADD128_TOP_U64, forms.SUB128_TOP_S64, forms.MAD128_U64):
        elementwise_on_both(text, "b64", *(("b64", x) for x in u64))
    u32 = [rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32) for _ in range(3)]
    elementwise_on_both(forms.MAD64, "b64", ("b32", u32[0]), ("b32", u32[1]), ("b64", u64[0]))
    elementwise_on_both(forms.MUL96_MIDDLE, "b64", ("b64", u64[1]), ("b32", u32[2]))
    elementwise_on_both(forms.CARRY_OUT, "b32", *(("s32", x.view(np.int32)) for x in u32))


def sixteen_bit_codes(name: str, n: int) -> np.ndarray:
    """forms.codes_of plus NaNs of several payloads and both signs, and infinities."""
    inf = forms.FORMAT[name][3]
    specials = np.array([inf, inf | 0x8000, inf | 1, inf | 0x8001, inf | 0x200, 0xFFFF, 0x7FFF], np.uint16)
    return rng.permutation(np.concatenate([forms.codes_of(name, n), np.repeat(specials, 20)]))


SIXTEEN_BIT = [row[0] for row in forms.ROUNDED] + [
    "neg.f16", "abs.f16", "neg.ftz.f16", "abs.bf16", "neg.bf16", "min.f16", "max.NaN.f16", "min.ftz.NaN.f16",
    "max.xorsign.abs.f16", "min.bf16", "max.NaN.bf16", "min.NaN.xorsign.abs.bf16", "fma.rn.f16x2",
    "fma.rn.bf16x2", "max.NaN.f16x2", "neg.bf16x2", "setp.lt.bf16", "setp.gtu.f16", "setp.ge.bf16x2"]


@pytest.mark.parametrize("instruction", SIXTEEN_BIT)
def test_16_bit_arithmetic(instruction):
    words = instruction.split(".")
    name = "bf16" if any(w.startswith("bf16") for w in words) else "f16"
    require(9 if name == "bf16" and words[0] not in ("fma", "min", "max") else 8)  # bf16 add, neg, setp: sm_90
    count = 3 if words[0] == "fma" else 1 if words[0] in ("neg", "abs") else 2
    pair = words[-1].endswith("x2")
    operands = []
    for _ in range(count):
        x = sixteen_bit_codes(name, 2000)
        operands.append(("b32", x.astype(np.uint32) << 16 | sixteen_bit_codes(name, 2000)[:len(x)]) if pair
                        else ("b16", x))
    if words[0] == "setp":
        text = (f"{{ .reg .pred %q; {instruction} %d|%q, %a0, %a1; }}" if pair else f"{instruction} %d, %a0, %a1;")
        elementwise_on_both(text, "pred", *operands)
        return
    args = ", ".join(f"%a{i}" for i in range(count))
    elementwise_on_both(f"{instruction} %d, {args};", "b32" if pair else "b16", *operands)


def test_lop3_and_xorsign():
    u32 = [rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32) for _ in range(3)]
    for table in (0x96, 0xE8, 0x1E, 0x40):
        elementwise_on_both(f"lop3.b32 %d, %a0, %a1, %a2, {table:#x};", "b32", *(("b32", x) for x in u32))
    require(8, 6)
    f32 = [np.concatenate([rng.standard_normal(2000), [np.nan, -np.nan, 0.0, -0.0]]).astype(np.float32)
           for _ in range(2)]
    for instruction in ("min.xorsign.abs.f32", "max.NaN.xorsign.abs.f32"):
        elementwise_on_both(f"{instruction} %d, %a0, %a1;", "f32", *(("f32", x) for x in f32))


@pytest.mark.parametrize("instruction, t, reference", forms.INTEGER_FORMS, ids=[f[0] for f in forms.INTEGER_FORMS])
def test_24_bit_multiplies_and_sums_of_absolute_differences(instruction, t, reference):
    count = reference.__code__.co_argcount
    args = ", ".join(f"%a{i}" for i in range(count))
    elementwise_on_both(f"{instruction} %d, {args};", t, *((t, forms.integer_operands(t, 4096)) for _ in range(count)))


@pytest.mark.parametrize("t", ["s16", "u16", "s32", "u32", "s64", "u64"])
@pytest.mark.parametrize("op", ["div", "rem"])
def test_integer_division_by_zero(op, t):
    """div and rem by a zero divisor (a register: ptxas cannot fold it) among others: the emulator gives all
    ones, as the emulator's docs say ptxas's code does."""
    dividends = forms.integer_operands(t, 4096)
    divisors = forms.integer_operands(t, 4096)
    divisors[::3] = 0
    elementwise_on_both(f"{op}.{t} %d, %a0, %a1;", t, (t, dividends), (t, divisors))


def mma_on_both(instruction, shape, kind, a, b, c_regs, acc, bits):
    gpu = forms.run_mma(instruction, shape, kind, a, b, c_regs, acc, bits, launcher=on_gpu)
    emulated = forms.run_mma(instruction, shape, kind, a, b, c_regs, acc, bits)
    assert_same_bits(np.stack(gpu), np.stack(emulated), instruction)


@pytest.mark.parametrize("shape", ["m8n8k4", "m16n8k4", "m16n8k8", "m16n8k16"])
def test_mma_f64(shape):
    require(8 if shape == "m8n8k4" else 9)
    m, n, k = forms.SHAPES[shape]
    warps = 64
    spread = lambda size: np.exp2(rng.integers(-30, 31, size))  # noqa: E731
    a, b = rng.standard_normal((warps, m, k)) * spread((warps, m, k)), rng.standard_normal((warps, k, n))
    c = rng.standard_normal((warps, m, n)) * spread((warps, m, n))
    c_regs = forms.pack(c.view(np.uint64), forms.c_positions(shape), 64)
    mma_on_both(f"mma.sync.aligned.{shape}.row.col.f64.f64.f64.f64", shape, "f64", a.view(np.uint64),
                b.view(np.uint64), c_regs, "f64", 64)


@pytest.mark.parametrize("shape, atype, btype, sat", [("m8n8k16", "s8", "u8", ""), ("m16n8k16", "u8", "s8", ".satfinite"),
                                                     ("m16n8k32", "s8", "s8", ".satfinite"), ("m16n8k32", "u8", "u8", "")])
def test_mma_integers(shape, atype, btype, sat):
    require(8)
    m, n, k = forms.SHAPES[shape]
    warps = 64
    draw = lambda t, size: rng.integers(-128, 128, size) if t == "s8" else rng.integers(0, 256, size)  # noqa: E731
    a, b = draw(atype, (warps, m, k)), draw(btype, (warps, k, n))
    c = rng.integers(2**31 - 2**18, 2**31, (warps, m, n)) * rng.choice([-1, 1], (warps, m, n))
    c_regs = forms.pack(c.astype(np.int32).view(np.uint32).astype(np.uint64), forms.c_positions(shape), 32)
    mma_on_both(f"mma.sync.aligned.{shape}.row.col{sat}.s32.{atype}.{btype}.s32", shape, "i8",
                a.astype(np.uint8).astype(np.uint64), b.astype(np.uint8).astype(np.uint64), c_regs, "b32", 8)


def test_mma_f16_accumulators():
    """m16n8k16 .f16.f16.f16.f16 on random values (sums that round): the model's f32 result rounded once to
    f16 is an assumption this checks."""
    require(8)
    warps = 128
    a = rng.standard_normal((warps, 16, 16)).astype(np.float16)
    b = (rng.standard_normal((warps, 16, 8)) * np.exp2(rng.integers(-6, 7, (warps, 1, 1)))).astype(np.float16)
    c = (rng.standard_normal((warps, 16, 8)) * 8).astype(np.float16)
    g, t = forms.lanes()
    a_pos = [[(g + 8 * (i % 2), 2 * t + h + 8 * (i // 2)) for h in (0, 1)] for i in range(4)]
    b_pos = [[(2 * t + h + 8 * i, g) for h in (0, 1)] for i in range(2)]
    c_pos = forms.c_positions("m16n8k16")
    pairs = [[c_pos[0][0], c_pos[1][0]], [c_pos[2][0], c_pos[3][0]]]
    bits = lambda x: x.view(np.uint16).astype(np.uint64)  # noqa: E731
    text = forms.mma_kernel("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", 4, 2, 2, "b32", "b32")
    slots = lambda regs: np.stack(regs + [np.zeros(warps * 32, np.uint64)] * (8 - len(regs)), axis=1)  # noqa: E731
    args = [slots(forms.pack(bits(a), a_pos, 16)), slots(forms.pack(bits(b), b_pos, 16)),
            slots(forms.pack(bits(c), pairs, 16))]
    outputs = []
    for launcher in (on_gpu, forms.emulate):
        out = np.zeros_like(args[0])
        launcher(text, "k", warps // 4, 128, args + [out])
        outputs.append(out[:, :2])
    assert_same_bits(*outputs, "mma m16n8k16 f16 accumulators")


@pytest.mark.parametrize("kind, acc", [("f16", "f16"), ("s8", "s32"), ("u8", "s32")])
def test_wgmma_f16_and_integer_accumulators(kind, acc):
    """wgmma m64n64 with f16 accumulators on random values, and of 8-bit integers into s32 (bit for bit).  The
    f16 sums are the model's f32 sum rounded once to f16; an H100 gave other bits, one ulp apart, for 2 of
    2048 results (2026-12-06), so they are held to one ulp."""
    require(9)
    ktot, n = 64, 64
    swizzle = ktot * tc.ESIZE[kind]
    if acc == "s32":
        a = rng.integers(-128, 128, (64, ktot)) if kind == "s8" else rng.integers(0, 256, (64, ktot))
        b = rng.integers(-128, 128, (ktot, n)) if kind == "s8" else rng.integers(0, 256, (ktot, n))
        stored_a, stored_b = a.astype(np.uint8), b.astype(np.uint8)
        c_bits = rng.integers(-2**31, 2**31, (64, n)).astype(np.int32).view(np.uint32)
    else:
        stored_a = tc.random_elements(rng, (64, ktot), kind, 6)
        stored_b = tc.random_elements(rng, (ktot, n), kind, 6)
        c_bits = (rng.standard_normal((64, n)) * 4).astype(np.float16).view(np.uint16).astype(np.uint32)
    a_op, b_op = tc.Operand(64, ktot, kind, "K", swizzle), tc.Operand(n, ktot, kind, "K", swizzle)
    text = tc.wgmma_ptx(kind, n, a_op, b_op, ktot // tc.STEP[kind], acc_type=acc)
    maps = [a_op.tensor_map(a_op.global_array(stored_a)), b_op.tensor_map(b_op.global_array(stored_b.T))]
    c_regs = forms.wgmma_registers(c_bits, acc == "f16")
    keep: list = []
    device_maps = []
    for tmap in maps:
        keep.append(runtime.device_copy(tmap.tensor))
        device_maps.append(tmap.on(int(keep[-1])))
    shared = tc.wgmma_shared_bytes(a_op, b_op)
    gpu, emulated = np.zeros_like(c_regs), np.zeros_like(c_regs)
    on_gpu(text, "wgmma_test", 1, 128, device_maps + [np.zeros(1, np.uint32), c_regs, gpu], shared)
    Module(text, "wgmma.ptx").launch("wgmma_test", 1, 128, maps + [np.zeros(1, np.uint32), c_regs, emulated],
                                     shared_bytes=shared)
    if acc == "f16":   # measured: the model within one f16 ulp of an H100, for a few results in a thousand
        g, e = (np.asarray(x, np.uint32).reshape(-1).view(np.uint16).view(np.float16) for x in (gpu, emulated))
        apart = np.abs(ordered_f16(g) - ordered_f16(e))
        assert apart.max() <= 1 and (apart > 0).mean() <= 0.01, (apart.max(), (apart > 0).sum())
        return
    assert_same_bits(gpu, emulated, f"wgmma {kind} into {acc}")


def ordered_f16(x: np.ndarray) -> np.ndarray:
    """f16 values as integers in the order of their values."""
    i = x.view(np.int16).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFF), i)


CLUSTER_ADDRESSES = """
.version 8.0
.target sm_90a
.address_size 64
.shared .align 16 .b8 buf[256];
.visible .entry probe(.param .u64 out) .reqnctapercluster 2, 1, 1
{
    .reg .pred %p;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p, %r1, 0;
    @%p bra DONE;
    mov.u32 %r2, buf;
    mapa.shared::cluster.u32 %r3, %r2, 0;
    mapa.shared::cluster.u32 %r4, %r2, 1;
    mov.u32 %r5, %ctaid.x;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r5, 16;
    add.s64 %rd1, %rd1, %rd2;
    st.global.v4.u32 [%rd1], {%r2, %r3, %r4, %r5};
DONE:
    ret;
}
"""


def test_a_clusters_ctas_see_their_rank_above_the_offsets_of_their_shared_addresses():
    """A CTA's own shared addresses and mapa's carry the rank above the offset, on the GPU as in the
    emulator (emulator/cluster.py); the offsets start where each puts the first variable (the GPU keeps
    the first kilobyte for itself)."""
    require(9, 0)
    results = []
    for launcher in (on_gpu, forms.emulate):
        out = np.zeros((4, 4), np.uint32)
        launcher(CLUSTER_ADDRESSES, "probe", (4,), (32,), [out])
        results.append(out[:, :3].astype(np.int64))
    gpu, emulated = results
    assert_same_bits(gpu >> 24, emulated >> 24, "rank bits")
    assert_same_bits(gpu & 0xFFFFFF, (emulated & 0xFFFFFF) + int(gpu[0, 0] & 0xFFFFFF), "offsets")
    assert (gpu[:, 0] >> 24).tolist() == [0, 1, 0, 1]
