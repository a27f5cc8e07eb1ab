# The emulator's tensor-core instructions and the hand-written tensor-core
# GEMMs: the numeric model of the tensor cores (against an exact rational
# rendering of the same model, and on inputs that tell the models apart),
# mma.sync / ldmatrix / stmatrix fragments against the PTX ISA tables,
# cvt to tf32, elect.sync, wgmma on every canonical shared-memory layout
# (filled by TMA copies, A also from registers), the two GEMM prototypes
# bit for bit, and the hazards a pipeline can get wrong (releasing a stage
# too early, reading before the mbarrier wait, a missing wgmma.fence,
# accumulators touched in flight, wrong transaction counts).
import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phobos.errors import LaunchError
from phobos.run.emulator import (AsyncCopyHazard, BarrierError, MemoryFault, MisalignedAddress, MissingProxyFence,
                                 Module, TrapError, UnsupportedPtx, WarpSyncError)
from phobos.run.emulator import numerics as nx
from phobos.run.tensor_map import EmulatedTensorMap, TensorMap

from . import tensor_core_support as tc
from .emulator_support import PTXAS, ptxas_errors, run_elementwise

rng = np.random.default_rng(15)
gemm = tc.gemm_generator()
HANDWRITTEN = tc.ROOT / "handwritten_ptx"
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas is not installed")


# ------------------------------------------------------------------ the numeric model

def _exponent(x: float, emin: int) -> int:
    return max(math.frexp(x)[1] - 1, emin)


def rational_block(a, b, c: float, emin: int, kept: int, fraction: int = 23) -> float:
    """One fused block of the model, in exact rational arithmetic (finite products): terms truncated
    `kept` bits below the largest exponent, the sum truncated to `fraction` bits."""
    if math.isinf(c):
        return c
    pairs = [(x, y) for x, y in zip(a, b) if x * y != 0]
    exps = [_exponent(x, emin) + _exponent(y, emin) for x, y in pairs]
    if c != 0:
        exps.append(_exponent(c, -126))
    if not exps:
        return 0.0
    unit = Fraction(2) ** (max(exps) - kept)
    terms = [Fraction(x) * Fraction(y) for x, y in pairs] + [Fraction(c)]
    total = sum(int(t / unit) for t in terms) * unit     # int() truncates toward zero
    if abs(total) >= 2 ** 128:
        return math.copysign(math.inf, total)
    return nx.round_fraction(total, nx.FloatFormat("out", fraction, -126, 127), "rz") if total else 0.0


@pytest.mark.parametrize("model", ["hopper", "ampere"])
@pytest.mark.parametrize("kind,spread", [("bf16", 40), ("f16", 12), ("tf32", 40), ("bf16", 120), ("e4m3", 4),
                                         ("e5m2", 10)])
def test_block_model_matches_its_rational_rendering(kind, spread, model):
    """Wide exponent spreads: cancellation, truncated terms, subnormals, overflow to infinity."""
    if kind not in nx.TENSOR_CORE_MODELS[model].block:
        pytest.skip(f"the {model} tensor cores have no {kind}")
    k = 32 if kind in ("e4m3", "e5m2") else 16
    a = tc.value(tc.random_elements(rng, (24, k), kind, spread), kind)
    b = tc.value(tc.random_elements(rng, (k, 8), kind, spread), kind)
    c_spread = min(spread, 100)
    c = (rng.standard_normal((24, 8)) * np.exp2(rng.integers(-c_spread, c_spread + 1, (24, 8)))).astype(np.float32)
    got = tc.reference(a, b, c, kind, model, step=k)
    spec = nx.TENSOR_CORE_MODELS[model]
    size = spec.block[kind]
    emin = {"f16": -14, "e4m3": -6, "e5m2": -14}.get(kind, -126)
    want = np.zeros_like(c)
    for i in range(24):
        for j in range(8):
            acc = float(c[i, j])
            for start in range(0, k, size):
                acc = float(np.float32(rational_block(a[i, start:start + size], b[start:start + size, j], acc,
                                                      emin, spec.kept[kind], spec.fraction[kind])))
            want[i, j] = acc
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_a_batch_in_parts_gives_each_matrix_s_own_product(kind, monkeypatch):
    count = 300
    a = tc.value(tc.random_elements(rng, (count, 16, 16), kind, 12), kind)
    b = tc.value(tc.random_elements(rng, (count, 16, 8), kind, 12), kind)
    c = (rng.standard_normal((count, 16, 8)) * np.exp2(rng.integers(-12, 13, (count, 16, 8)))).astype(np.float32)
    model = nx.TENSOR_CORE_MODELS["ampere"]
    alone = np.stack([nx.tensor_core_dot(a[i], b[i], c[i], kind, model) for i in range(count)])
    monkeypatch.setattr(nx, "TERMS_AT_ONCE", 1 << 14)  # parts of 8 matrices
    got = nx.tensor_core_dot(a, b, c, kind, model)
    np.testing.assert_array_equal(got.view(np.uint32), alone.view(np.uint32))


def _dot(a_values, kind="bf16", model="hopper", c=0.0):
    a = np.zeros((1, 16))
    a[0, :len(a_values)] = a_values
    b = np.ones((16, 1))
    return float(tc.reference(a, b, np.full((1, 1), c, np.float32), kind, model)[0, 0])


def test_extra_alignment_bits_tell_hopper_from_ampere():
    small = [1.0] + [2.0 ** -25] * 4          # four terms below 2**-24, above 2**-26
    assert _dot(small, model="hopper") == 1 + 2.0 ** -23     # kept with 2 extra bits, summed exactly
    assert _dot(small, model="ampere") == 1.0                 # truncated away with 1 extra bit


def test_the_sum_is_truncated_once_not_rounded():
    assert _dot([1.0] + [2.0 ** -25] * 6) == 1 + 2.0 ** -23   # 1 + 1.5 ulp: to nearest would give 2 ulp
    assert _dot([-1.0] + [-(2.0 ** -25)] * 6) == -(1 + 2.0 ** -23)
    assert _dot([1.0] + [2.0 ** -25] * 3) == 1.0               # 0.75 ulp


def test_products_and_accumulator_are_added_in_one_fused_step():
    # f32 additions one after the other would lose every +1 to 2**25: a fused sum keeps them
    assert _dot([1.0] * 16, c=2.0 ** 25) == 2.0 ** 25 + 16
    assert _dot([1.0] * 16, c=2.0 ** 30) == 2.0 ** 30          # below the aligned window
    assert _dot([3.0, 5.0, -2.0], kind="f16") == 6.0


def test_infinities_and_nans():
    assert _dot([np.inf, 1.0]) == np.inf
    assert _dot([1.0], c=-np.inf) == -np.inf
    assert np.isnan(_dot([np.inf, -np.inf]))
    a = np.zeros((1, 16))
    a[0, 0] = np.inf
    out = tc.reference(a, np.zeros((16, 1)), np.zeros((1, 1), np.float32), "bf16")   # inf * 0
    assert out.view(np.uint32)[0, 0] == 0x7FFFFFFF                                     # the canonical NaN


def _rna(x: Fraction) -> float:
    """Nearest tf32, ties away from zero, by exact arithmetic."""
    if x == 0:
        return 0.0
    e = max(math.floor(math.log2(abs(x))) if abs(x) >= Fraction(2) ** -126 else -126, -126)
    while abs(x) >= Fraction(2) ** (e + 1):
        e += 1
    while e > -126 and abs(x) < Fraction(2) ** e:
        e -= 1
    ulp = Fraction(2) ** (e - 10)
    q = abs(x) / ulp
    n = math.floor(q) + (1 if q - math.floor(q) >= Fraction(1, 2) else 0)
    value = float(n * ulp)
    return math.copysign(value if value < 2.0 ** 128 else math.inf, x)


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_round_to_tf32_in_every_mode(x):
    f = np.float32(x)
    exact = Fraction(float(f))
    for mode, want in (("rna", _rna(exact)), ("rn", nx.round_fraction(exact, nx.TF32, "rn") if exact else 0.0),
                       ("rz", nx.round_fraction(exact, nx.TF32, "rz") if exact else 0.0)):
        got = float(nx.round_to_tf32(np.array([f]), mode).view(np.float32)[0])
        assert abs(got) == abs(want), (mode, x)


def test_cvt_to_tf32_instructions():
    x = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, -1.5 - 2 ** -11, 3.4e38, np.inf, 2 ** -140, 0.1], np.float32)
    rna = run_elementwise("cvt.rna.tf32.f32 %d, %a0;", "b32", ("f32", x))
    np.testing.assert_array_equal(rna, nx.round_to_tf32(x, "rna"))
    assert rna.view(np.float32)[0] == 1 + 2 ** -10 and rna.view(np.float32)[2] == -1.5 - 2 ** -10
    assert (rna & 0x1FFF == 0).all()
    sat = run_elementwise("cvt.rna.satfinite.tf32.f32 %d, %a0;", "b32", ("f32", np.float32([3.4028235e38, -np.inf])))
    assert list(sat) == [0x7F7FE000, 0xFF7FE000]
    rz = run_elementwise("cvt.rz.tf32.f32 %d, %a0;", "b32", ("f32", x))
    np.testing.assert_array_equal(rz, x.view(np.uint32) & 0xFFFFE000)


def test_mov_packs_two_halves():
    lo = tc.bf16_bits(rng.standard_normal(64))
    hi = tc.bf16_bits(rng.standard_normal(64))
    packed = run_elementwise("mov.b32 %d, {%a0, %a1};", "b32", ("b16", lo), ("b16", hi))
    np.testing.assert_array_equal(packed, lo.astype(np.uint32) | (hi.astype(np.uint32) << 16))


# ------------------------------------------------------------------ mma.sync, ldmatrix, stmatrix

@pytest.mark.parametrize("kind", ["bf16", "f16", "tf32", "e4m3", "e5m2"])
@pytest.mark.parametrize("model", ["hopper", "ampere"])
def test_mma_sync_fragments_and_numerics(kind, model):
    if kind not in nx.TENSOR_CORE_MODELS[model].block:
        pytest.skip(f"the {model} tensor cores have no {kind}")
    k = tc.STEP[kind]
    module = Module(tc.mma_fragment_ptx(kind), "mma.ptx")
    for spread in (0, 20 if kind != "f16" else 4):
        if spread:
            a = tc.random_elements(rng, (16, k), kind, spread)
            b = tc.random_elements(rng, (k, 8), kind, spread)
            if kind == "tf32":   # f32 patterns with low bits set: the tensor core ignores them
                a = (a | rng.integers(0, 1 << 13, a.shape).astype(np.uint32))
            c = rng.standard_normal((16, 8)).astype(np.float32)
        else:                    # small integers: every layout slip shows
            a = tc.encode(rng.integers(-9, 10, (16, k)), kind)
            b = tc.encode(rng.integers(-9, 10, (k, 8)), kind)
            c = rng.integers(-9, 10, (16, 8)).astype(np.float32)
        out = np.zeros((32, 4), np.float32)
        module.launch("mma_fragments", 1, 32, [tc.pack_fragment(a, "a", kind, 4), tc.pack_fragment(b, "b", kind, 2),
                                               tc.pack_accumulator(c), out], tensor_cores=model)
        got = tc.unpack_accumulator(out)
        want = tc.mma_sync_reference(tc.value(a, kind), tc.value(b, kind), c, kind, model)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        if not spread:
            np.testing.assert_array_equal(got, tc.value(a, kind) @ tc.value(b, kind) + c)


def test_mma_sync_needs_whole_warps():
    module = Module(tc.mma_fragment_ptx("bf16"), "mma.ptx")
    z = np.zeros((32, 4), np.uint32)
    with pytest.raises(WarpSyncError, match="mma.sync needs all 32 threads of each warp; thread 16 .* does not exist"):
        module.launch("mma_fragments", 1, 16, [z, z[:, :2].copy(), z.view(np.float32), np.zeros((32, 4), np.float32)])


def test_unknown_tensor_core_model_is_a_launch_error():
    module = Module(tc.mma_fragment_ptx("bf16"), "mma.ptx")
    with pytest.raises(LaunchError, match="tensor_cores must be one of hopper, ampere"):
        module.launch("mma_fragments", 1, 32, [], tensor_cores="volta")


MATRIX_PTX = """\
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 src, .param .u64 dst)
{{
    .reg .b32 %t, %s, %a, %r<4>;
    .reg .b64 %p, %q, %off;
    .shared .align 128 .b8 buf[512];
    mov.u32 %t, %tid.x;
    ld.param.u64 %p, [src];
    ld.param.u64 %q, [dst];
    mul.wide.u32 %off, %t, 16;
    add.s64 %p, %p, %off;
    add.s64 %q, %q, %off;
    mov.u32 %s, buf;
    mul.lo.u32 %a, %t, 16;
    add.u32 %a, %s, %a;                 // lane l: row l % 8 of matrix l / 8
    {body}
    ret;
}}
"""


def _matrix_positions(lane: int, trans: bool):
    """(row, column) pairs of the two halves lane `lane` holds (PTX ISA, ldmatrix)."""
    row, col = lane // 4, 2 * (lane % 4)
    return [(col, row), (col + 1, row)] if trans else [(row, col), (row, col + 1)]


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_and_stmatrix(count, trans):
    regs = ", ".join(f"%r{i}" for i in range(count))
    t = ".trans" if trans else ""
    load = MATRIX_PTX.format(body=f"""ld.global.v4.b32 {{%r0, %r1, %r2, %r3}}, [%p];
    st.shared.v4.b32 [%a], {{%r0, %r1, %r2, %r3}};
    bar.sync 0;
    ldmatrix.sync.aligned.m8n8.x{count}{t}.shared.b16 {{{regs}}}, [%a];
    st.global.v4.b32 [%q], {{%r0, %r1, %r2, %r3}};""")
    mats = rng.integers(0, 1 << 16, (4, 8, 8)).astype(np.uint16)
    out = np.zeros((32, 4), np.uint32)
    Module(load, "ld.ptx").launch("k", 1, 32, [mats, out])
    for i in range(count):
        for lane in range(32):
            (r0, c0), (r1, c1) = _matrix_positions(lane, trans)
            assert out[lane, i] == int(mats[i, r0, c0]) | (int(mats[i, r1, c1]) << 16)
    store = MATRIX_PTX.format(body=f"""ld.global.v4.b32 {{%r0, %r1, %r2, %r3}}, [%p];
    stmatrix.sync.aligned.m8n8.x{count}{t}.shared.b16 [%a], {{{regs}}};
    bar.sync 0;
    ld.shared.v4.b32 {{%r0, %r1, %r2, %r3}}, [%a];
    st.global.v4.b32 [%q], {{%r0, %r1, %r2, %r3}};""")
    regs_in = rng.integers(0, 1 << 32, (32, 4), dtype=np.uint64).astype(np.uint32)
    back = np.zeros((4, 8, 8), np.uint16)
    Module(store, "st.ptx").launch("k", 1, 32, [regs_in, back])
    for i in range(count):
        for lane in range(32):
            for half, (r, c) in enumerate(_matrix_positions(lane, trans)):
                assert back[i, r, c] == (int(regs_in[lane, i]) >> (16 * half)) & 0xFFFF
    if PTXAS is not None:
        assert ptxas_errors(load) is None and ptxas_errors(store) is None


def test_elect_sync_picks_the_lowest_member():
    text = MATRIX_PTX.format(body=""".reg .pred %e, %low;
    .reg .b32 %lead, %flag;
    setp.lt.u32 %low, %t, 4;
    @%low bra SKIP;                     // lanes 0-3 stay out
    elect.sync %lead|%e, 0xfffffff0;
    selp.u32 %flag, 1, 0, %e;
    st.global.v2.b32 [%q], {%lead, %flag};
SKIP:""")
    out = np.zeros((32, 4), np.uint32)
    Module(text, "elect.ptx").launch("k", 1, 32, [np.zeros((32, 4), np.uint32), out])
    assert (out[4:, 0] == 4).all() and list(out[4:, 1]) == [1] + [0] * 27 and (out[:4] == 0).all()


# ------------------------------------------------------------------ wgmma on every layout

def run_wgmma(case: tc.WgmmaCase) -> np.ndarray:
    out = case.output()
    Module(case.text, "wgmma.ptx").launch("wgmma_test", 1, 128, case.arguments(out), shared_bytes=case.shared_bytes)
    return tc.unpack_wgmma(out, case.n)


@pytest.mark.parametrize("kind,a_spec,b_spec,ktot,n", tc.WGMMA_CASES)
def test_wgmma_reads_every_canonical_layout(kind, a_spec, b_spec, ktot, n):
    case = tc.wgmma_case(rng, kind, a_spec, b_spec, ktot, n)
    np.testing.assert_array_equal(run_wgmma(case).view(np.uint32), case.expected.view(np.uint32))
    if PTXAS is not None:
        assert ptxas_errors(case.text, "sm_90a") is None


def test_a_wgmma_reading_what_a_cp_async_in_flight_writes_is_reported():
    """The copy's data may or may not have landed when the tensor cores read the bytes."""
    case = tc.wgmma_case(rng, "bf16", ("K", 128), ("MN", 128), 64, 64)
    case.text = case.text.replace("    cvt.u64.u32 %off, %s;", "    cp.async.cg.shared.global [%s+16], [%ptr], 16;\n"
                                  "    cp.async.commit_group;\n    cvt.u64.u32 %off, %s;")
    with pytest.raises(AsyncCopyHazard, match="wgmma operand read at .* while a cp.async into it is still pending"):
        run_wgmma(case)


def test_wgmma_scale_d_and_negated_a():
    case = tc.wgmma_case(rng, "bf16", ("K", 128), ("MN", 128), 64, 64, scale_d=0, scale_a=-1)
    np.testing.assert_array_equal(run_wgmma(case).view(np.uint32), case.expected.view(np.uint32))


def test_wgmma_needs_whole_warpgroups_and_canonical_descriptors():
    a_op, b_op = tc.Operand(64, 64, "bf16", "K", 128), tc.Operand(64, 64, "bf16", "K", 128)
    text = tc.wgmma_ptx("bf16", 64, a_op, b_op, 4)
    a = tc.random_elements(rng, (64, 64), "bf16")
    args = lambda: [a_op.tensor_map(a), b_op.tensor_map(a), np.zeros(1, np.uint32),  # noqa: E731
                    np.zeros(128 * 32, np.float32), np.zeros(128 * 32, np.float32)]
    with pytest.raises(WarpSyncError, match="needs all 128 threads of each warpgroup"):
        Module(text, "w.ptx").launch("wgmma_test", 1, 96, args(), shared_bytes=tc.wgmma_shared_bytes(a_op, b_op))
    based = re.sub(r"add\.s64 %db, %off, (0x[0-9a-f]+);",               # base offset 1 in B's descriptor
                   lambda found: f"add.s64 %db, %off, {int(found[1], 16) | 1 << 49:#x};", text)
    with pytest.raises(UnsupportedPtx, match="non-zero base offset is not modelled"):
        Module(based, "w.ptx").launch("wgmma_test", 1, 128, args(), shared_bytes=tc.wgmma_shared_bytes(a_op, b_op))


# ------------------------------------------------------------------ TMA and tensor maps

TMA_PTX = """\
.version 8.0
.target sm_90a
.address_size 64
.shared .align 8 .b64 bar;
.shared .align 1024 .b8 buf[{size}];
.visible .entry tma(.param .align 64 .b8 map[128], .param .u64 out, .param .s32 x, .param .s32 y)
{{
    .reg .pred %p, %q;
    .reg .b32 %t, %s, %bar, %x, %y, %v;
    .reg .b64 %m, %o, %off, %tok;
    mov.u32 %t, %tid.x;
    mov.u32 %s, buf;
    mov.u32 %bar, bar;
    setp.eq.u32 %p, %t, 0;
    @%p mbarrier.init.shared::cta.b64 [%bar], 1;
    bar.sync 0;
    mov.b64 %m, map;
    cvta.param.u64 %m, %m;
    ld.param.s32 %x, [x];
    ld.param.s32 %y, [y];
    @%p mbarrier.arrive.expect_tx.shared::cta.b64 %tok, [%bar], {size};
    @%p cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%s], [%m, {{%x, %y}}], [%bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %q, [%bar], 0;
    @!%q bra WAIT;
    mul.lo.u32 %v, %t, 4;
    add.u32 %s, %s, %v;
    ld.shared.b32 %v, [%s];             // each thread copies 4 bytes of the box out
    ld.param.u64 %o, [out];
    mul.wide.u32 %off, %t, 4;
    add.s64 %o, %o, %off;
    st.global.b32 [%o], %v;
    ret;
}}
"""


@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
def test_tma_box_with_out_of_bound_zeros_and_swizzle(swizzle):
    width = {"none": 64, "32B": 16, "64B": 32, "128B": 64}[swizzle]   # elements of u16 per box row
    rows = 16
    src = rng.integers(1, 1 << 16, (40, 104)).astype(np.uint16)
    tmap = TensorMap.tiled(src, (rows, width), swizzle=swizzle)
    size = rows * width * 2
    out = np.zeros(size // 2, np.uint16)
    Module(TMA_PTX.format(size=size), "tma.ptx").launch("tma", 1, size // 4, [tmap, out, 96, -3])
    box = np.zeros((rows, width), np.uint16)             # box at column 96, row -3: partly outside
    box[3:, :8] = src[0:rows - 3, 96:104]
    span = {"none": 0, "32B": 32, "64B": 64, "128B": 128}[swizzle]
    image = np.zeros(size // 2, np.uint16)
    for r in range(rows):
        for col in range(width):
            address = (r * width + col) * 2
            if span:
                address ^= ((address >> 7) & (span // 16 - 1)) << 4
            image[address // 2] = box[r, col]
    np.testing.assert_array_equal(out, image)
    if PTXAS is not None:
        assert ptxas_errors(TMA_PTX.format(size=size), "sm_90a") is None


def test_tma_box_of_rank_three():
    text = (TMA_PTX.format(size=256).replace(".2d.", ".3d.").replace("{%x, %y}", "{%x, %y, %y}")
            .replace(".param .s32 y)", ".param .s32 y, .param .s32 unused)"))
    src = rng.integers(1, 1 << 16, (6, 10, 16)).astype(np.uint16)        # planes, rows, 16 columns
    out = np.zeros(128, np.uint16)
    Module(text, "tma3.ptx").launch("tma", 1, 64, [TensorMap.tiled(src, (4, 4, 8)), out, 8, 1, 0])
    np.testing.assert_array_equal(out.reshape(4, 4, 8), src[1:5, 1:5, 8:16])   # coordinates {8, 1, 1}
    if PTXAS is not None:
        assert ptxas_errors(text, "sm_90a") is None


TMA_STORE_PTX = """\
.version 8.0
.target sm_90a
.address_size 64
.shared .align 1024 .b8 buf[2048];
.visible .entry tma_store(.param .align 64 .b8 map[128], .param .s32 x, .param .s32 y)
{{
    .reg .pred %p;
    .reg .b32 %t, %s, %a, %v, %x, %y;
    .reg .b64 %m;
    mov.u32 %t, %tid.x;
    mov.u32 %s, buf;
    mul.lo.u32 %a, %t, 4;
    add.u32 %a, %s, %a;
    add.u32 %v, %t, 1000;
    st.shared.b32 [%a], %v;             // the box's bytes, in shared memory order
    fence.proxy.async.shared::cta;      // visible to the asynchronous proxy
    bar.sync 0;
    mov.b64 %m, map;
    cvta.param.u64 %m, %m;
    ld.param.s32 %x, [x];
    ld.param.s32 %y, [y];
    setp.eq.u32 %p, %t, 0;
    @%p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%m, {{%x, %y}}], [%s];
    @%p cp.async.bulk.commit_group;
    {after}
    ret;
}}
"""


def test_tma_store_writes_the_in_bound_part_of_the_box():
    dst = np.zeros((8, 64), np.uint32)
    tmap = TensorMap.tiled(dst, (16, 32), swizzle="128B")          # 16 rows of 128 bytes
    text = TMA_STORE_PTX.format(after="@%p cp.async.bulk.wait_group.read 0;")
    Module(text, "store.ptx").launch("tma_store", 1, 512, [tmap, 48, -4])
    image = np.arange(1000, 1512, dtype=np.uint32)                 # shared word w holds 1000 + w
    box = np.zeros((16, 32), np.uint32)
    for r in range(16):
        for col in range(32):
            address = (r * 32 + col) * 4
            box[r, col] = image[(address ^ (((address >> 7) & 7) << 4)) // 4]
    want = np.zeros((8, 64), np.uint32)
    want[0:8, 48:64] = box[4:12, 0:16]                             # rows -4.., columns 48..: the rest is outside
    np.testing.assert_array_equal(dst, want)
    if PTXAS is not None:
        assert ptxas_errors(text, "sm_90a") is None


def test_reusing_a_bulk_store_source_before_its_wait_is_reported():
    text = TMA_STORE_PTX.format(after="@%p st.shared.b32 [%s], %v;\n    @%p cp.async.bulk.wait_group.read 0;")
    with pytest.raises(AsyncCopyHazard, match="while a wgmma or bulk copy that reads it is in flight"):
        Module(text, "store.ptx").launch("tma_store", 1, 512, [TensorMap.tiled(np.zeros((8, 64), np.uint32), (16, 32),
                                                                              swizzle="128B"), 0, 0])


def test_tensor_map_descriptions():
    a = np.zeros((256, 96), np.uint16)
    tmap = TensorMap.tiled(a, (128, 64), dtype="bf16", swizzle="128B", l2_promotion="256B")
    assert (tmap.shape, tmap.strides, tmap.box, tmap.box_bytes) == ((96, 256), (192,), (64, 128), 16384)
    back = EmulatedTensorMap.decode(tmap.emulator_bytes(0x10000))
    assert (back.address, back.dtype, back.shape, back.strides, back.box, back.swizzle) == \
        (0x10000, "bf16", (96, 256), (2, 192), (64, 128), 128)
    for bad, message in [
        (dict(box=(128, 128), swizzle="128B"), r"128B swizzle needs the box's inner dimension \(256 bytes\) to be at most 128"),
        (dict(box=(300, 8)), r"box \(8, 300\) sizes must be 1 .. 256"),
        (dict(box=(8, 4)), "inner dimension is 8 bytes, not a multiple of 16"),
        (dict(box=(8, 8), swizzle="96B"), "swizzle must be one of"),
    ]:
        with pytest.raises(ValueError, match=message):
            TensorMap.tiled(a, dtype="bf16", **bad)
    with pytest.raises(ValueError, match="byte strides .* multiples of 16"):
        TensorMap.tiled(np.zeros((8, 12), np.uint16), (8, 8), dtype="bf16")
    with pytest.raises(ValueError, match="bf16 elements are 2 bytes, the tensor's are 4"):
        TensorMap.tiled(np.zeros((8, 8), np.float32), (8, 8), dtype="bf16")
    with pytest.raises(ValueError, match="not a tensor map made by TensorMap.emulator_bytes"):
        EmulatedTensorMap.decode(bytes(128))


def test_tensor_map_arguments_in_the_emulator():
    module = Module(TMA_PTX.format(size=256), "tma.ptx")
    with pytest.raises(LaunchError, match="argument map of tma: in the emulator a TensorMap describes a NumPy array"):
        module.launch("tma", 1, 64, [TensorMap(0x1000, "u16", (64, 64), (128,), (8, 8)), np.zeros(64, np.uint32), 0, 0])
    src = np.zeros((64, 64), np.uint16)
    with pytest.raises(MemoryFault, match="not a tensor map made by TensorMap.emulator_bytes"):
        module.launch("tma", 1, 64, [bytes(128), np.zeros(64, np.uint32), 0, 0])
    misaligned = TMA_PTX.format(size=256).replace("[%s], [%m,", "[%s+64], [%m,")
    with pytest.raises(MisalignedAddress, match="not 128-byte aligned"):
        Module(misaligned, "tma.ptx").launch("tma", 1, 64, [TensorMap.tiled(src, (2, 64)), np.zeros(64, np.uint32), 0, 0])
    uninitialised = TMA_PTX.format(size=256).replace("@%p mbarrier.init.shared::cta.b64 [%bar], 1;", "")
    with pytest.raises(MemoryFault, match="no mbarrier.init initialised"):
        Module(uninitialised, "tma.ptx").launch("tma", 1, 64, [TensorMap.tiled(src, (2, 64)),
                                                               np.zeros(64, np.uint32), 0, 0])


# ------------------------------------------------------------------ the GEMM prototypes

def test_checked_in_prototypes_are_the_generator_output():
    for name, make in gemm.FILES.items():
        assert (HANDWRITTEN / name).read_text() == make(), f"run python handwritten_ptx/gemm_ptx.py ({name})"


@needs_ptxas
def test_prototypes_assemble():
    assert ptxas_errors((HANDWRITTEN / "gemm_bf16_mma.ptx").read_text(), "sm_80") is None
    assert ptxas_errors((HANDWRITTEN / "gemm_bf16_wgmma.ptx").read_text(), "sm_90a") is None
    assert ptxas_errors(gemm.wgmma_gemm(gemm.WgmmaConfig(bn=128, stages=3, out="f32")), "sm_90a") is None
    for key, _, cfg in gemm.WGMMA_LADDER:
        assert ptxas_errors(gemm.wgmma_gemm(cfg), "sm_90a") is None, key


def _inputs(m, n, k):
    return tc.bf16_bits(rng.standard_normal((m, k))), tc.bf16_bits(rng.standard_normal((k, n)))


def _check(c, a, b, out):
    want = tc.reference(tc.value(a, "bf16"), tc.value(b, "bf16"), np.zeros((a.shape[0], b.shape[1]), np.float32), "bf16")
    if out == "bf16":
        want = tc.bf16_bits(want)
    np.testing.assert_array_equal(c, want)


@pytest.mark.parametrize("cfg,shape", [(gemm.MmaConfig(), (256, 128, 96)),
                                       (gemm.MmaConfig(bk=64, stages=3, out="f32", warps_m=4, warps_n=2), (128, 256, 256))])
def test_mma_sync_gemm_is_bit_exact(cfg, shape):
    m, n, k = shape
    text = (HANDWRITTEN / "gemm_bf16_mma.ptx").read_text() if cfg == gemm.MmaConfig() else gemm.mma_sync_gemm(cfg)
    a, b = _inputs(m, n, k)
    c = np.zeros((m, n), np.uint16 if cfg.out == "bf16" else np.float32)
    gemm.check_shape(m, n, k, cfg.bm, cfg.bn, cfg.bk)
    Module(text, "gemm_bf16_mma.ptx").launch("gemm_bf16_mma", (m // cfg.bm) * (n // cfg.bn), cfg.threads,
                                             [a, b, c, m, n, k], shared_bytes=cfg.shared_bytes)
    _check(c, a, b, cfg.out)


@pytest.mark.parametrize("cfg,shape", [(gemm.WgmmaConfig(), (128, 256, 320)),   # 5 k tiles, 4 stages
                                       (gemm.WgmmaConfig(bn=128, stages=2, out="f32", group_m=1), (256, 128, 192))])
def test_wgmma_gemm_is_bit_exact(cfg, shape):
    m, n, k = shape
    text = (HANDWRITTEN / "gemm_bf16_wgmma.ptx").read_text() if cfg == gemm.WgmmaConfig() else gemm.wgmma_gemm(cfg)
    a, b = _inputs(m, n, k)
    c = np.zeros((m, n), np.uint16 if cfg.out == "bf16" else np.float32)
    maps = [TensorMap.tiled(a, (128, 64), dtype="bf16", swizzle="128B"),
            TensorMap.tiled(b, (64, 64), dtype="bf16", swizzle="128B")]
    Module(text, "gemm_bf16_wgmma.ptx").launch("gemm_bf16_wgmma", (m // 128) * (n // cfg.bn), 384,
                                               maps + [c, m, n, k], shared_bytes=cfg.shared_bytes)
    _check(c, a, b, cfg.out)


def _wgmma_arguments(cfg, a, b):
    """The A and B arguments of a wgmma GEMM: tensor maps, or the arrays for plain loads."""
    if cfg.load == "plain":
        return [a, b]
    return [TensorMap.tiled(a, (cfg.bm, 64), dtype="bf16", swizzle="128B"),
            TensorMap.tiled(b, (64, 64), dtype="bf16", swizzle="128B")]


@pytest.mark.parametrize("key,cfg", [(key, cfg) for key, _, cfg in gemm.WGMMA_LADDER if cfg != gemm.WgmmaConfig()])
def test_every_step_of_the_wgmma_ladder_is_bit_exact(key, cfg):
    """The simpler kernels benchmarks/tc_bisect.py runs on the GPU, over two tile rows and more
    k tiles than stages (the last step is the prototype, tested above)."""
    m, n, k = 2 * cfg.bm, cfg.bn, 64 * (cfg.stages + 1)
    a, b = _inputs(m, n, k)
    c = np.zeros((m, n), np.uint16)
    Module(gemm.wgmma_gemm(cfg), f"ladder_{key}.ptx").launch(
        "gemm_bf16_wgmma", (m // cfg.bm) * (n // cfg.bn), cfg.threads, _wgmma_arguments(cfg, a, b) + [c, m, n, k],
        shared_bytes=cfg.shared_bytes)
    _check(c, a, b, cfg.out)


def test_parameter_probe_writes_back_its_parameters():
    text = gemm.parameter_probe()
    if PTXAS is not None:
        assert ptxas_errors(text, "sm_90") is None
    maps = [bytes(range(128)), bytes(range(255, 127, -1))]
    out = np.zeros(67, np.uint32)
    Module(text, "probe.ptx").launch("parameter_probe", 1, 32, [out] + maps + [5, 6, 7])
    assert out.tobytes() == maps[0] + maps[1] + np.array([5, 6, 7], np.uint32).tobytes()


def test_shapes_that_are_not_whole_tiles_are_refused():
    with pytest.raises(ValueError, match="K = 100 is not a positive multiple of the tile size 64"):
        gemm.check_shape(128, 256, 100, 128, 256, 64)


# ------------------------------------------------------------------ pipeline hazards

HAZARD_CFG = gemm.WgmmaConfig(bn=64, stages=2, out="f32")


def run_prototype(text: str):
    m, n, k = 128, 64, 256
    a, b = _inputs(m, n, k)
    maps = [TensorMap.tiled(a, (128, 64), dtype="bf16", swizzle="128B"),
            TensorMap.tiled(b, (64, 64), dtype="bf16", swizzle="128B")]
    Module(text, "gemm.ptx").launch("gemm_bf16_wgmma", 1, 384, maps + [np.zeros((m, n), np.float32), m, n, k],
                                    shared_bytes=HAZARD_CFG.shared_bytes)


def _hazard_text(mutate) -> str:
    lines = gemm.wgmma_gemm(HAZARD_CFG).splitlines()
    return "\n".join(mutate(lines)) + "\n"


def _release_before_wait(lines):
    wait = next(i for i, line in enumerate(lines) if "wgmma.wait_group.sync.aligned 0" in line)
    arrive = next(i for i, line in enumerate(lines) if "mbarrier.arrive.shared::cta.b64 %token" in line)
    lines.insert(arrive, lines.pop(wait))
    return lines


@pytest.mark.parametrize("mutate,error,message", [
    (_release_before_wait, AsyncCopyHazard, "while a wgmma or bulk copy that reads it is in flight"),
    (lambda ls: [x.replace("wait_group.sync.aligned 0", "wait_group.sync.aligned 1") for x in ls],
     AsyncCopyHazard, "while a wgmma or bulk copy that reads it is in flight"),
    (lambda ls: [x for x in ls if "WAIT_FULL" not in x and "%p_wait, [%y], %phase" not in x],
     AsyncCopyHazard, "written by a bulk tensor copy, before this thread waited for .* mbarrier phase 0"),
    (lambda ls: [x for x in ls if "wgmma.fence" not in x], AsyncCopyHazard, "without a wgmma.fence"),
    (lambda ls: [re.sub(r"mbarrier.arrive.expect_tx.shared::cta.b64 %token, \[%y\], (\d+)",
                        r"mbarrier.expect_tx.shared::cta.b64 [%y], \1", x) for x in ls],
     BarrierError, r"deadlock: .* wait for mbarrier phases .* 1 of 1 arrivals pending"),
])
def test_pipeline_mistakes_are_reported(mutate, error, message):
    run_prototype(_hazard_text(lambda ls: ls))                 # the unmutated kernel runs
    with pytest.raises(error, match=message):
        run_prototype(_hazard_text(mutate))


@pytest.mark.parametrize("old,new,error,message", [
    # 40 * 128 + 2 * 240 * 128 registers are more than the 168 * 384 the CTA starts with: ptxas
    # accepts it, and the second consumer warpgroup waits in setmaxnreg.inc forever on the GPU
    ("inc.sync.aligned.u32 232", "inc.sync.aligned.u32 240", BarrierError,
     r"deadlock: 128 threads wait in setmaxnreg.inc .* started with 168 registers .* 7168 are free"),
    ("dec.sync.aligned.u32 40", "dec.sync.aligned.u32 200", TrapError,
     "setmaxnreg.dec to 200 registers, but warp 0 holds 168"),
    # without a register cap at entry ptxas ignores setmaxnreg (C7508), and so does the emulator
    (".maxntid 384, 1, 1 .minnctapersm 1", "", None, None),
    # the cap is lowered to the largest count asked for: the consumers start with 160 already
    ("inc.sync.aligned.u32 232", "inc.sync.aligned.u32 160", None, None),
])
def test_setmaxnreg_moves_registers_through_the_ctas_pool(old, new, error, message):
    text = _hazard_text(lambda ls: [x.replace(old, new) for x in ls])
    if error is None:
        run_prototype(text)
        return
    with pytest.raises(error, match=message):
        run_prototype(text)


def test_register_caps_follow_the_performance_directives():
    from phobos.run.emulator.async_state import _register_cap
    assert _register_cap({"maxntid": (384, 1, 1), "minnctapersm": (1,)}) == 168  # what ptxas reports
    assert _register_cap({"maxntid": (384,)}) == 168
    assert _register_cap({"maxntid": (128,)}) == 255
    assert _register_cap({"maxntid": (256,), "minnctapersm": (2,)}) == 128
    assert _register_cap({"maxnreg": (200,), "maxntid": (256,)}) == 200
    assert _register_cap({}) is None


def test_plain_stores_read_by_wgmma_need_a_proxy_fence():
    """Shared memory written by st.shared and read by the tensor cores (the async proxy) needs
    fence.proxy.async in the writing threads; without it the GPU may read stale data."""
    cfg = gemm.WGMMA_LADDER[0][2]
    m, n, k = 64, 64, 128
    a, b = _inputs(m, n, k)
    text = gemm.wgmma_gemm(cfg)

    def launch(t):
        Module(t, "plain.ptx").launch("gemm_bf16_wgmma", 1, 128, [a, b, np.zeros((m, n), np.uint16), m, n, k],
                                      shared_bytes=cfg.shared_bytes)

    launch(text)
    with pytest.raises(MissingProxyFence, match=r"A wgmma reads shared .* wrote with a plain store \(plain.ptx:\d+\) "
                                                r"and no fence.proxy.async since") as info:
        launch(text.replace("fence.proxy.async.shared::cta;", ""))
    assert isinstance(info.value, AsyncCopyHazard) and "st.shared" in info.value.notes[0].message


def test_missing_proxy_fence_is_reported_alike_from_whole_chunk_records(monkeypatch):
    """16-byte stores record their unfenced writer once per 16-byte chunk; the byte-by-byte path (forced)
    must give the same fault, at the same byte, thread and line, and the fenced program must pass both ways."""
    from phobos.run.emulator import memory
    cfg = gemm.WGMMA_LADDER[0][2]
    m, n, k = 64, 64, 128
    a, b = _inputs(m, n, k)
    text = gemm.wgmma_gemm(cfg)

    def outcome(t):
        c = np.zeros((m, n), np.uint16)
        try:
            Module(t, "plain.ptx").launch("gemm_bf16_wgmma", 1, 128, [a, b, c, m, n, k], shared_bytes=cfg.shared_bytes)
        except MissingProxyFence as err:
            return str(err), err.ptx_line
        return c

    unfenced = text.replace("fence.proxy.async.shared::cta;", "")
    fast = [outcome(text), outcome(unfenced)]
    monkeypatch.setattr(memory.RaceDetector, "_write_by_lanes", lambda *args: False)
    slow = [outcome(text), outcome(unfenced)]
    np.testing.assert_array_equal(fast[0], slow[0])
    assert isinstance(fast[1], tuple) and fast[1] == slow[1]


def _wgmma_of(edit) -> np.ndarray:
    """D of tc.wgmma_ptx's bf16 m64n64k16 (C read from memory, D stored), its text edited by `edit`."""
    a_op, b_op = tc.Operand(64, 16, "bf16", "K", 32), tc.Operand(64, 16, "bf16", "K", 32)
    text = edit(tc.wgmma_ptx("bf16", 64, a_op, b_op, 1))
    a = tc.random_elements(np.random.default_rng(5), (64, 16), "bf16")
    c = np.random.default_rng(6).standard_normal(128 * 32).astype(np.float32)
    d = np.zeros(128 * 32, np.float32)
    Module(text, "w.ptx").launch("wgmma_test", 1, 128, [a_op.tensor_map(a), b_op.tensor_map(a), np.zeros(1, np.uint32),
                                                        c, d], shared_bytes=tc.wgmma_shared_bytes(a_op, b_op))
    return d


WAIT, COMMIT = "wgmma.wait_group.sync.aligned 0;", "wgmma.commit_group.sync.aligned;"


@pytest.mark.parametrize("edit, bump", [
    pytest.param(lambda t: t.replace(WAIT, ""), False, id="no-wait"),
    pytest.param(lambda t: t.replace(COMMIT, COMMIT + "\n    add.f32 %acc3, %acc3, 0f3F800000;"), True,
                 id="read-after-commit"),
    pytest.param(lambda t: t.replace(COMMIT, "add.f32 %acc3, %acc3, 0f3F800000;\n    " + COMMIT), True,
                 id="read-before-commit"),
    pytest.param(lambda t: t.replace(COMMIT, COMMIT + "\n    setp.lt.u32 %q, %t, 32;\n"
                                     "    @%q add.f32 %acc3, %acc3, 0f3F800000;"), 32, id="read-by-one-warp"),
])
def test_accumulators_read_before_the_wait_wait_for_the_wgmma(edit, bump):
    """ptxas tracks wgmma's registers: a read of an accumulator before the wgmma.wait_group that covers it
    gets a warpgroup.wait injected before it (C7517; and a warpgroup.arrive before a commit, C7519), so the
    read sees the product, as the emulator gives it.  Where one warp reads, the others wait at the wait_group."""
    want = _wgmma_of(lambda t: t)
    if bump:
        want.reshape(128, 32)[: 128 if bump is True else bump, 3] += np.float32(1)
    np.testing.assert_array_equal(_wgmma_of(edit), want)


def test_accumulators_written_in_flight_are_reported():
    """A write of an accumulator of a wgmma in flight, not reading it (ptxas serializes every wgmma of the
    kernel for it, C7515; the PTX ISA leaves it undefined), is reported."""
    with pytest.raises(AsyncCopyHazard, match="register of a wgmma in flight .* written before the wgmma.wait_group"):
        _wgmma_of(lambda t: t.replace(COMMIT, COMMIT + "\n    mov.f32 %acc3, 0f3F800000;"))