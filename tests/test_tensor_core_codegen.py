# Products on the tensor cores: which dots get them and what the report says, the code generated
# (mma.sync, ldmatrix, the A operand kept in registers, the pipelined stages), golden PTX for one
# bf16 GEMM configuration, ptxas on every target, the numerics of each precision in the
# interpreter and the emulator, and the CUDA-core fallbacks run correctly.
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import phobos
from phobos.compiler import compile_kernel, parse_source, pick_kernel
from phobos.lower.mma_plan import MMA_KINDS, MmaPlan
from phobos.constants import bf16_bits, bf16_values, round_tf32, round_tf32_even
from phobos.ptxcheck import check
from phobos.run import emulator

from .tensor_core_support import tf32_gemm_reference
from .test_backend import without_version

ROOT = Path(__file__).parent.parent
GEMM_BF16 = ROOT / "examples" / "gemm_bf16.phobos"
SGEMM_TF32 = ROOT / "examples" / "sgemm_tf32.phobos"
ATTENTION = ROOT / "examples" / "attention_bf16.phobos"
GOLDEN_CONFIG = {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32, "WARPS": 4, "STAGES": 3}

DOT = """
@autotune(WARPS in [{warps}])
kernel k(a: tensor<{dtype}>[M, K], b: tensor<{dtype}>[K, N], c: tensor<f32>[M, N]) {{
    c[0 :+ {m}, 0 :+ {n}] = dot(a[0 :+ {m}, 0 :+ {k}], b[0 :+ {k}, 0 :+ {n}]{precision})
}}
"""


def dot_source(m, n, k, dtype="bf16", warps=4, precision=""):
    return DOT.format(m=m, n=n, k=k, dtype=dtype, warps=warps,
                      precision=f', precision="{precision}"' if precision else "")


def compiled(path: Path, kernel: str, config: dict, arch: str = "sm_90a"):
    k = pick_kernel(parse_source(path.read_text(), str(path.relative_to(ROOT))), kernel)
    return compile_kernel(k, arch=arch, config=config)


def instructions(ptx: str, name: str) -> int:
    return sum(1 for line in ptx.splitlines() if line.strip().split(" ")[0].startswith(name))


# ------------------------------------------------------------------ the choice and the report
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
def test_bf16_dot_runs_on_the_tensor_cores_and_the_report_says_so(arch):
    k = phobos.compile(dot_source(64, 64, 32), arch=arch)
    (note,) = k.notes
    assert "dot runs on the tensor cores: mma.sync m16n8k16 bf16, 2 x 2 warps of 32 x 32" in note
    assert note.startswith("<string") and note in k.ptx  # located, and in the PTX header
    assert instructions(k.ptx, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 2 * 4 * 2
    assert instructions(k.ptx, "ldmatrix.sync.aligned.m8n8.x4.trans") == 2 * 2  # B: 2 k steps x 2 tile pairs


def test_sm_75_falls_back_to_the_cuda_cores_and_says_why():
    k = phobos.compile(dot_source(64, 64, 32), arch="sm_75")
    assert k.notes == [k.notes[0]] and "dot runs on the CUDA cores: the target has no bf16 tensor cores" in k.notes[0]
    assert "mma" not in k.ptx and "ldmatrix" not in k.ptx and "fma.rn.f32" in k.ptx


@pytest.mark.parametrize("shape,why", [((20, 64, 32), "M = 20 is not a multiple of 16"),
                                       ((32, 12, 32), "N = 12 is not a multiple of 8"),
                                       ((32, 64, 24), "K = 24 is not a multiple of 16")])
def test_shapes_the_instruction_cannot_tile_fall_back_and_say_why(shape, why):
    k = phobos.compile(dot_source(*shape), arch="sm_90a")
    assert len(k.notes) == 1 and "runs on the CUDA cores" in k.notes[0] and why in k.notes[0]
    assert "mma" not in k.ptx


def test_f32_dots_stay_on_the_cuda_cores_unless_a_precision_asks():
    assert phobos.compile(dot_source(64, 64, 32, "f32"), arch="sm_90a").notes == []
    k = phobos.compile(dot_source(64, 64, 32, "f32", precision="tf32x3"), arch="sm_90")  # sm_90a: wgmma
    assert "mma.sync m16n8k8 tf32x3" in k.notes[0]
    assert instructions(k.ptx, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == 3 * 2 * 4 * 4
    assert instructions(k.ptx, "cvt.rna.tf32.f32") > 0


# ------------------------------------------------------------------ the code
def test_gemm_k_loop_streams_16_byte_copies_and_reads_fragments_with_ldmatrix():
    ptx = compiled(GEMM_BF16, "gemm_bf16", GOLDEN_CONFIG).ptx
    assert "cp.async.cg.shared.global" in ptx and "cp.async.ca" not in ptx  # 16 bytes, or bf16 one by one
    assert instructions(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 2 * 2  # 2 m tiles x 2 k steps
    assert instructions(ptx, "st.shared") == instructions(ptx, "st.shared.b16")  # only the edges' elements


def test_attention_keeps_q_and_p_in_registers():
    """With mma.sync (sm_90: no wgmma) Q's fragments are packed once, before the loop; P feeds the second
    product from its accumulators (no trip through shared memory); only K (read as K^T where it lies) and V
    go through the stages."""
    k = compiled(ATTENTION, "attention", {"BM": 64, "BN": 64, "WARPS": 4, "STAGES": 2, "HEAD": 64}, "sm_90")
    assert all("4 x 1 warps" in note for note in k.notes) and len(k.notes) == 2
    label = re.findall(r"^(\$L_loop_\d+):", k.ptx, re.M)[-1]  # the main loop: the last one
    loop = k.ptx[k.ptx.index(f"{label}:"):k.ptx.index(f"bra.uni {label};")]
    body = loop.split("cp.async.commit_group;")[-1]  # after its request for the next tiles
    # B operands alone come from shared memory: K^T's as K lies (x4 ldmatrix a pair of 8-column tiles a k step:
    # 64 columns / 16 x 64 / 16 steps), V's transposed; no A operand's (that would add 4 a product)
    assert instructions(body, "ldmatrix.sync.aligned.m8n8.x4.shared") == 64 // 16 * 64 // 16
    assert instructions(body, "ldmatrix.sync.aligned.m8n8.x4.trans") == 64 // 16 * 64 // 16
    assert instructions(body, "cvt.rn.bf16x2.f32") == 64 * 64 // 128 // 2  # P packed in pairs
    assert "st.shared" not in body and "bar.sync" not in body


@pytest.mark.parametrize("head", [64, 128])
def test_attention_on_wgmma_reads_q_stored_once_and_p_from_registers(head):
    """On sm_90a both products run wgmma: S = Q K^T with Q copied into shared memory once, before the loop,
    and K's block read K-major where it lies (one wgmma per k16 step over HEAD / 64 boxes); O += P V with
    P's fragments packed from the scores' registers (wgmma's A from registers) and V's block N-major.  Each
    group is waited for before its result is read: the softmax reads S, the next iteration rewrites P."""
    k = compiled(ATTENTION, "attention", {"BM": 128, "BN": 64, "WARPS": 8, "STAGES": 2, "HEAD": head}, "sm_90a")
    assert [note.split(": ", 1)[1] for note in k.notes] == [
        "dot runs on the tensor cores: wgmma m64n64k16 bf16, A loaded before the loop, from shared memory, "
        "2 x 1 warpgroups of 64 x 64",
        f"dot runs on the tensor cores: wgmma m64n{head}k16 bf16, A from registers, 2 x 1 warpgroups of 64 x {head}"]
    label = re.findall(r"^(\$L_loop_\d+):", k.ptx, re.M)[-1]
    before, loop = k.ptx[:k.ptx.index(f"{label}:")], k.ptx[k.ptx.index(f"{label}:"):k.ptx.index(f"bra.uni {label};")]
    products = re.findall(r"wgmma\.mma_async\S* \{[^}]*\}, (\{%r\d+, %r\d+, %r\d+, %r\d+\}|%rd\d+), %rd\d+, "
                          r"([01]), 1, 1((?:, [01])+);", loop)
    q_k = [p for p in products if p[0].startswith("%rd")]
    p_v = [p for p in products if p[0].startswith("{")]
    assert len(q_k) == head // 16 and all(t == ", 0, 0" for _, _, t in q_k)  # A and B K-major
    assert len(p_v) == 64 // 16 and all(t == ", 1" for _, _, t in p_v)  # imm-trans-b alone: V N-major
    assert [scale for _, scale, _ in q_k] == ["0"] + ["1"] * (head // 16 - 1)  # S from zero
    assert instructions(loop, "wgmma.commit_group.sync.aligned") == 2
    assert re.findall(r"wgmma\.(fence|commit_group|wait_group)\S*(?: (\d))?;", loop) == [
        ("fence", ""), ("commit_group", ""), ("wait_group", "0")] * 2
    assert "ldmatrix" not in loop and "st.shared" not in loop.split("cp.async.commit_group;")[-1]
    # Q copied by cp.async straight into its place past the stages, a group of its own before the first requests
    first_group = before.split("cp.async.commit_group;")[0]
    assert instructions(first_group, "cp.async.cg.shared.global") == 128 * head * 2 // 16 // 256  # 16 bytes a copy
    assert instructions(before, "cp.async.commit_group") == 2 and "st.shared.v4" not in before
    assert f"resident  {128 * head * 2} bytes past the stages" in k.schedules[0]
    report = check(k.ptx, arch="sm_90a", name="attention")
    report.raise_for_errors()
    assert report.kernel("attention").spill_stores == 0 and not report.warnings, report


B_ALONE = """
@autotune(WARPS in [4])
kernel scores(q: tensor<bf16>[M, K], k: tensor<bf16>[N, K], o: tensor<f32>[M, N]) {
    let qb = q[0 :+ 64, 0 :+ 128]
    for c in range(0, N, 64) {  // not pipelined (it stores): Q stored from its registers each trip
        o[0 :+ 64, c :+ 64] = dot(qb, trans(k[c :+ 64, 0 :+ 128]))
    }
}

@autotune(WARPS in [8])
kernel products(x: tensor<f32>[M, K], v: tensor<bf16>[K, N], o: tensor<f32>[M, N]) {
    let p = exp2(x[0 :+ 128, 0 :+ 64] * 0.5)  // no loop: V stored into the scratch buffer
    o[0 :+ 128, 0 :+ 128] = dot(bf16(p), v[0 :+ 64, 0 :+ 128])
}
"""


def test_wgmma_with_b_alone_loaded_beside_it_runs_outside_a_pipelined_loop(tmp_path, monkeypatch):
    """The wgmma forms attention's loop takes, where no pipeline stages their operands: A loaded before a
    loop that is not pipelined (stored to the scratch buffer each trip, K of two 128-byte rows), and A
    computed in registers beside a B loaded with it (B through the scratch buffer); the bits of mma.sync's."""
    from phobos.run import backends
    path = tmp_path / "b_alone.phobos"
    path.write_text(B_ALONE)
    rng = np.random.default_rng(4)
    q, k = (bf16_bits(rng.standard_normal(shape).astype(np.float32)) for shape in ((64, 128), (150, 128)))
    x, v = rng.standard_normal((128, 64)).astype(np.float32), bf16_bits(rng.standard_normal((64, 128)).astype(np.float32))
    results = {}
    for arch, instruction in (("sm_90a", "wgmma"), ("sm_90", "mma.sync")):
        monkeypatch.setattr(backends.EmulateBackend, "arch", lambda self, index=0, arch=arch: arch)
        module = phobos.load(path, mode="emulate")
        out = [np.zeros((64, 150), np.float32), np.zeros((128, 128), np.float32)]
        module.scores(q, k, out[0])
        module.products(x, v, out[1])
        assert all(instruction in note for fn in (module.scores, module.products) for note in fn.compiled.notes)
        results[arch] = out
    assert all(np.array_equal(a, b) for a, b in zip(results["sm_90a"], results["sm_90"]))
    exact = bf16_values(q).astype(np.float64) @ bf16_values(k).astype(np.float64).T
    np.testing.assert_allclose(results["sm_90a"][0], exact, rtol=1e-5, atol=1e-4)


def test_attention_backward_dkdv_reads_k_and_v_from_shared_memory():
    """dK/dV's products by K and V read them from shared memory, copied at the start of each head's loop over
    query blocks: their fragments held in registers across both loops were lost by ptxas at this
    configuration (docs/tensor_cores.md); P^T's and dS^T's fragments come from registers."""
    k = compiled(ROOT / "examples" / "attention_bf16_backward.phobos", "attention_backward_dkdv",
                 {"BN": 64, "BM": 64, "WARPS": 4, "STAGES": 2, "CTAS_PER_SM": 2, "HEAD": 64})
    forms = [re.search(r":(\d+):\d+: dot .*bf16, (.*), 1 x 1", note).groups() for note in k.notes]
    shared, registers = "A loaded before the loop, from shared memory", "A from registers"
    assert forms == [("61", shared), ("63", registers), ("64", shared), ("66", registers)]
    assert f"resident  {2 * 64 * 64 * 2} bytes past the stages" in k.schedules[0]
    report = check(k.ptx, arch="sm_90a", name="attention_backward_dkdv")
    report.raise_for_errors()
    assert report.kernel("attention_backward_dkdv").spill_stores == 0, report


@pytest.mark.parametrize("kernel,config", [
    ("attention_backward_dq", {"BM": 64, "BN": 64, "WARPS": 4, "STAGES": 2, "CTAS_PER_SM": 2, "HEAD": 64}),
    ("attention_backward_dq", {"BM": 128, "BN": 64, "WARPS": 8, "STAGES": 3, "CTAS_PER_SM": 1, "HEAD": 128}),
    ("attention_backward_dkdv", {"BN": 64, "BM": 64, "WARPS": 4, "STAGES": 2, "CTAS_PER_SM": 2, "HEAD": 64}),
    ("attention_backward_dkdv", {"BN": 128, "BM": 32, "WARPS": 8, "STAGES": 3, "CTAS_PER_SM": 1, "HEAD": 128}),
])
def test_ptxas_keeps_the_wgmma_pipeline_of_the_attention_backward(kernel, config):
    """ptxas serializes every wgmma of a kernel (C7511) where a PTX register was another value before it
    became a wgmma's accumulator; register allocation gives accumulators registers of their own."""
    k = compiled(ROOT / "examples" / "attention_bf16_backward.phobos", kernel, config)
    report = check(k.ptx, arch="sm_90a", name=kernel)
    report.raise_for_errors()
    assert report.kernel(kernel).advisories == [], report.kernel(kernel).summary()


OUTER_A = """
@autotune(WARPS in [4])
kernel outer(q: tensor<bf16>[M, K], k: tensor<bf16>[N, K], o: tensor<f32>[M, N]) {
    let qb = q[0 :+ 64, 0 :+ 64]  // A, loaded before the loop over h, read by the product in the loop over c
    var total: tile<f32>[64, 64] = 0.0
    for h in range(0, 2) {
        var acc: tile<f32>[64, 64] = 0.0
        for c in range(0, N, 64) {
            acc += dot(qb, trans(k[c :+ 64, 0 :+ 64]))
        }
        total += acc * f32(h + 1)
        @WRITE@
    }
    o[0 :+ 64, 0 :+ 64] = total
}
"""


@pytest.mark.parametrize("writes", [False, True])
def test_wgmma_a_loaded_outside_a_loop_nest_moves_to_the_inner_loop_unless_a_tensor_is_written(
        tmp_path, monkeypatch, writes):
    """A wgmma A operand loaded before an outer loop is loaded again before the inner loop each trip and read
    from shared memory there (no A fragments held in registers across the loop nest), where nothing between
    writes a tensor; a store in the outer loop keeps the load where it is, its fragments read from registers.
    Either way the emulator computes the same products as numpy."""
    from phobos.run import backends
    source = OUTER_A.replace("@WRITE@", "o[0 :+ 64, 64 :+ 64] = acc" if writes else "")
    k = compile_kernel(pick_kernel(parse_source(source, "outer.phobos"), "outer"), arch="sm_90a", config={})
    form = "A from registers" if writes else "A loaded before the loop, from shared memory"
    assert [note.split(": ", 1)[1] for note in k.notes] == [
        f"dot runs on the tensor cores: wgmma m64n64k16 bf16, {form}, 1 x 1 warpgroups of 64 x 64"]
    loops = re.findall(r"^(\$L_loop_\d+):", k.ptx, re.M)
    inner = k.ptx[k.ptx.index(f"{loops[-1]}:"):k.ptx.index(f"bra.uni {loops[-1]};")]
    a_operands = re.findall(r"wgmma\.mma_async\S* \{[^}]*\}, (\{[^}]*\}|%rd\d+),", inner)
    assert len(a_operands) == 4 and all(a.startswith("{") == writes for a in a_operands)
    path = tmp_path / "outer.phobos"
    path.write_text(source)
    monkeypatch.setattr(backends.EmulateBackend, "arch", lambda self, index=0: "sm_90a")
    rng = np.random.default_rng(7)
    q, keys = (bf16_bits(rng.standard_normal(shape).astype(np.float32)) for shape in ((64, 64), (192, 64)))
    out = np.zeros((64, 192), np.float32)
    phobos.load(path, mode="emulate").outer(q, keys, out)
    product = bf16_values(q).astype(np.float64) @ bf16_values(keys).astype(np.float64).T
    acc = product.reshape(64, 3, 64).sum(axis=1)  # the three key blocks' products summed
    np.testing.assert_allclose(out[:, :64], 3 * acc, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(out[:, 64:128], acc if writes else 0, rtol=1e-5, atol=1e-3)


def test_golden_bf16_gemm(golden):
    golden.check("gemm_bf16.sm_90a.ptx", without_version(compiled(GEMM_BF16, "gemm_bf16", GOLDEN_CONFIG).ptx))


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90", "sm_90a"])
@pytest.mark.parametrize("path,kernel,config", [
    (GEMM_BF16, "gemm_bf16", {"TILE_M": 128, "TILE_N": 256, "TILE_K": 32, "WARPS": 8, "STAGES": 4}),
    (GEMM_BF16, "gemm_f16", GOLDEN_CONFIG),
    (SGEMM_TF32, "sgemm_tf32", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32, "WARPS": 8, "STAGES": 3}),
    (SGEMM_TF32, "sgemm_tf32x3", {"TILE_M": 128, "TILE_N": 64, "TILE_K": 32, "WARPS": 4, "STAGES": 4}),
    (ATTENTION, "attention", {"BM": 64, "BN": 64, "WARPS": 4, "STAGES": 2, "HEAD": 64}),
], ids=["gemm_bf16", "gemm_f16", "sgemm_tf32", "sgemm_tf32x3", "attention"])
def test_ptxas_accepts_the_tensor_core_kernels(path, kernel, config, arch):
    k = compiled(path, kernel, config, arch)
    report = check(k.ptx, arch=arch, name=kernel)
    report.raise_for_errors()
    assert ("mma.sync" in k.ptx or "wgmma.mma_async" in k.ptx) == (arch != "sm_75")
    if arch != "sm_75":  # the CUDA-core fallback is correct, not tuned
        assert report.kernel(kernel).spill_stores == 0, report.kernel(kernel)


# ------------------------------------------------------------------ numerics
def run_both(src: str, args_of, grid=(1,)):
    """The kernel run by the interpreter and in the emulator (sm_90a's PTX), each on fresh arguments."""
    out = {}
    for mode in ("interpret", "emulate"):
        args = args_of()
        phobos.jit(src, mode=mode).k[grid](*args)
        out[mode] = args
    return out


def test_tf32_rounds_the_operands_to_nearest_ties_to_even_and_tf32x3_splits_them_ties_away():
    halfway = np.float32(1 + 2.0 ** -11)  # halfway between 1 and 1 + 2^-10: to the even one, 1
    odd_halfway = np.float32(1 + 2.0 ** -10 + 2.0 ** -11)  # between 1 + 2^-10 (odd) and 1 + 2^-9: up
    assert round_tf32_even(halfway) == 1 and round_tf32_even(-halfway) == -1
    assert round_tf32_even(odd_halfway) == np.float32(1 + 2.0 ** -9)
    assert round_tf32_even(np.float32(1 + 2.0 ** -11 + 2.0 ** -20)) == np.float32(1 + 2.0 ** -10)
    assert round_tf32(halfway) == np.float32(1 + 2.0 ** -10)  # tf32x3's split: away from zero
    largest = np.uint32(0x7F7FFFFF).view(np.float32)  # past the largest TF32 by more than half its ulp
    assert np.isinf(round_tf32_even(largest)) and np.isnan(round_tf32_even(np.float32("nan")))
    a = np.tile(np.array([halfway, odd_halfway, -halfway, 3.0], np.float32), (16, 2))
    b = np.eye(8, dtype=np.float32)
    src = dot_source(16, 8, 8, "f32", warps=1, precision="tf32")
    for mode, (_, _, c) in run_both(src, lambda: [a, b, np.zeros((16, 8), np.float32)]).items():
        np.testing.assert_array_equal(c, round_tf32_even(a), err_msg=mode)


def test_the_integer_rounding_of_targets_before_sm_90_equals_cvt_rn_on_every_kind_of_value():
    from phobos.run.emulator import numerics as nx
    rng = np.random.default_rng(4)
    bits = np.concatenate([rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800001, 0xFFC00000, 0,
                                     0x80000000, 0x00001000, 0x00003000, 0x007FF000, 0x3F801000], np.uint32)])
    values = bits.view(np.float32)
    np.testing.assert_array_equal(round_tf32_even(values).view(np.uint32), nx.round_to_tf32(values, "rn"))


@pytest.mark.parametrize("precision,bound", [("tf32", 2.0 ** -10), ("tf32x3", 2.0 ** -21), ("ieee", 2.0 ** -22)])
def test_each_precision_is_as_accurate_as_documented(precision, bound):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((32, 64), dtype=np.float32), rng.standard_normal((64, 32), dtype=np.float32)
    exact = a.astype(np.float64) @ b
    scale = np.abs(a).astype(np.float64) @ np.abs(b)
    src = dot_source(32, 32, 64, "f32", precision=precision if precision != "ieee" else "")
    for mode, (_, _, c) in run_both(src, lambda: [a, b, np.zeros((32, 32), np.float32)]).items():
        error = np.abs(c - exact) / scale
        assert error.max() <= bound, (mode, error.max())
        if precision == "tf32":
            assert error.max() > 2.0 ** -16  # TF32 does lose precision: the operands were rounded


def test_bf16_products_are_exact_and_summed_in_f32():
    rng = np.random.default_rng(6)
    a, b = bf16_bits(rng.standard_normal((48, 32), dtype=np.float32)), bf16_bits(rng.standard_normal((32, 40),
                                                                                                       np.float32))
    exact = bf16_values(a).astype(np.float64) @ bf16_values(b)
    src = dot_source(48, 40, 32, "bf16", warps=2)
    for mode, (_, _, c) in run_both(src, lambda: [a, b, np.zeros((48, 40), np.float32)]).items():
        np.testing.assert_allclose(c, exact, rtol=0, atol=32 * 2.0 ** -22 * np.abs(exact).max(), err_msg=mode)


CONVERSIONS = """
kernel k(x: tensor<f32>[N], h: tensor<bf16>[N], y: tensor<f32>[N], z: tensor<f16>[N]) {
    let v = x[0 :+ 8]
    let b = bf16(v)              // rounded to bf16, held exactly
    h[0 :+ 8] = b
    y[0 :+ 8] = b * 0.1 + f16(v) // bf16 * a literal is bf16 (0.1 taken as a bf16); bf16 + f16 meet in f32
    z[0 :+ 8] = v                // a store rounds to the tensor's format
}
"""


def test_conversions_and_arithmetic_of_16_bit_values():
    x = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 65504 * 2, -0.1, 1e-30, 3.0, np.inf, np.nan], np.float32)
    want_b = bf16_values(bf16_bits(x))
    with np.errstate(over="ignore"):
        want_h, want_z = x.astype(np.float16).astype(np.float32), x.astype(np.float16)
    for mode, (_, h, y, z) in run_both(CONVERSIONS, lambda: [x, np.zeros(8, np.uint16), np.zeros(8, np.float32),
                                                            np.zeros(8, np.float16)]).items():
        np.testing.assert_array_equal(bf16_values(h), want_b, err_msg=mode)
        tenth = bf16_values(bf16_bits(np.float32(0.1)))
        np.testing.assert_array_equal(y, bf16_values(bf16_bits(want_b * tenth)) + want_h, err_msg=mode)
        np.testing.assert_array_equal(z, want_z, err_msg=mode)


def test_the_sm_75_fallback_computes_the_same_product_on_the_cuda_cores():
    rng = np.random.default_rng(7)
    a, b = bf16_bits(rng.standard_normal((64, 32), dtype=np.float32)), bf16_bits(rng.standard_normal((32, 64),
                                                                                                       np.float32))
    k = phobos.compile(dot_source(64, 64, 32), arch="sm_75")
    c = np.zeros((64, 64), np.float32)
    emulator.launch(k.ptx, "k", (1,), (k.threads,), [a, b, c, 64, 32, 64], shared_bytes=k.shared_bytes)
    exact = bf16_values(a).astype(np.float64) @ bf16_values(b)
    np.testing.assert_allclose(c, exact, rtol=0, atol=32 * 2.0 ** -23 * np.abs(exact).max())


# ------------------------------------------------------------------ wgmma (sm_90a)
WGMMA_CONFIGS = [
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 64, "WARPS": 8, "STAGES": 4}, (150, 300, 200), "2 x 1 warpgroups of 64 x 256"),
    ({"TILE_M": 64, "TILE_N": 128, "TILE_K": 64, "WARPS": 4, "STAGES": 3}, (70, 130, 77), "1 x 1 warpgroups of 64 x 128"),
    ({"TILE_M": 64, "TILE_N": 256, "TILE_K": 64, "WARPS": 8, "STAGES": 2}, (130, 64, 64), "1 x 2 warpgroups of 64 x 128"),
]


@pytest.mark.parametrize("config,sizes,grid_text", WGMMA_CONFIGS, ids=["128x256-4", "64x128-3", "64x256-2"])
def test_wgmma_gemm_runs_in_the_emulator_on_ragged_sizes(config, sizes, grid_text):
    k = compiled(GEMM_BF16, "gemm_bf16", config, "sm_90a")
    assert len(k.notes) == 1 and f"wgmma m64n{grid_text.split(' x ')[-1]}k16 bf16, {grid_text}" in k.notes[0]
    in_flight = config["STAGES"] >= 3  # one wgmma group stays in flight into the next iteration
    assert ("wgmma.wait_group.sync.aligned 1;" in k.ptx) == in_flight
    assert "fence.proxy.async.shared::cta" in k.ptx and "mma.sync" not in k.ptx
    m, n, kk = sizes
    rng = np.random.default_rng(8)
    a, b = bf16_bits(rng.standard_normal((m, kk), dtype=np.float32)), bf16_bits(rng.standard_normal((kk, n),
                                                                                                      np.float32))
    c = np.zeros((m, n), np.uint16)
    grid = (-(-m // config["TILE_M"]), -(-n // config["TILE_N"]))
    emulator.launch(k.ptx, "gemm_bf16", grid, (k.threads,), [a, b, c, m, kk, n], shared_bytes=k.shared_bytes)
    exact = bf16_values(a).astype(np.float64) @ bf16_values(b)
    np.testing.assert_allclose(bf16_values(c), exact, rtol=2 ** -7, atol=1e-3)


def test_wgmma_is_for_sm_90a_and_for_operands_streamed_beside_it():
    config = WGMMA_CONFIGS[0][0]
    assert "mma.sync m16n8k16" in compiled(GEMM_BF16, "gemm_bf16", config, "sm_90").notes[0]
    assert "wgmma" not in compiled(GEMM_BF16, "gemm_bf16", dict(config, TILE_K=32), "sm_90a").ptx
    # a head size not a multiple of 64: K^T's K is no whole number of 128-byte rows, V's N no whole boxes
    attention = compiled(ATTENTION, "attention", {"BM": 128, "BN": 64, "WARPS": 8, "STAGES": 2, "HEAD": 96},
                         "sm_90a")
    assert "wgmma" not in attention.ptx and all("mma.sync" in note for note in attention.notes)


def test_ptxas_accepts_the_wgmma_gemm_without_spills():
    k = compiled(GEMM_BF16, "gemm_bf16", WGMMA_CONFIGS[0][0], "sm_90a")
    report = check(k.ptx, arch="sm_90a", name="gemm_bf16")
    report.raise_for_errors()
    assert report.kernel("gemm_bf16").spill_stores == 0, report.kernel("gemm_bf16")
    assert not any("C7510" in w or "serializ" in w for w in report.warnings), report.warnings


# ------------------------------------------------------------------ tf32 and tf32x3 on wgmma (sm_90a)
TF32_WGMMA_CONFIGS = [
    ("sgemm_tf32", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32, "WARPS": 8, "STAGES": 3}, (150, 300, 100),
     "m64n128k8 tf32, computing C^T = B^T A^T, 2 x 1 warpgroups of 64 x 128"),
    ("sgemm_tf32", {"TILE_M": 128, "TILE_N": 256, "TILE_K": 32, "WARPS": 8, "STAGES": 2}, (130, 270, 70),
     "m64n128k8 tf32, computing C^T = B^T A^T, 2 x 1 warpgroups of 128 x 128"),
    ("sgemm_tf32", {"TILE_M": 64, "TILE_N": 256, "TILE_K": 32, "WARPS": 8, "STAGES": 4}, (70, 260, 97),
     "m64n64k8 tf32, computing C^T = B^T A^T, 2 x 1 warpgroups of 128 x 64"),
    ("sgemm_tf32", {"TILE_M": 256, "TILE_N": 128, "TILE_K": 32, "WARPS": 8, "STAGES": 3}, (270, 130, 70),
     "m64n256k8 tf32, computing C^T = B^T A^T, 2 x 1 warpgroups of 64 x 256"),
    ("sgemm_tf32x3", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32, "WARPS": 8, "STAGES": 3}, (150, 200, 100),
     "m64n128k8 tf32x3, computing C^T = B^T A^T, 2 x 1 warpgroups of 64 x 128"),
    ("sgemm_tf32x3", {"TILE_M": 64, "TILE_N": 64, "TILE_K": 32, "WARPS": 4, "STAGES": 2}, (70, 65, 33),
     "m64n64k8 tf32x3, computing C^T = B^T A^T, 1 x 1 warpgroups of 64 x 64"),
]


def emulate_sgemm(kernel: str, config: dict, sizes, arch: str = "sm_90a", seed: int = 9):
    """(A, B, C) of the example's kernel run in the emulator on random f32 operands of (M, N, K) `sizes`."""
    k = compiled(SGEMM_TF32, kernel, config, arch)
    m, n, kk = sizes
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, kk), dtype=np.float32), rng.standard_normal((kk, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    grid = (-(-m // config["TILE_M"]), -(-n // config["TILE_N"]))
    emulator.launch(k.ptx, kernel, grid, (k.threads,), [a, b, c, m, kk, n], shared_bytes=k.shared_bytes)
    return k, a, b, c


@pytest.mark.parametrize("kernel,config,sizes,what", TF32_WGMMA_CONFIGS,
                         ids=["tf32-128x128-3", "tf32-128x256-2", "tf32-64x256-4", "tf32-256x128-3", "tf32x3-128x128-3",
                              "tf32x3-64x64-2"])
def test_tf32_wgmma_gemm_is_bit_exact_in_the_emulator_on_ragged_sizes(kernel, config, sizes, what):
    k, a, b, c = emulate_sgemm(kernel, config, sizes)
    assert len(k.notes) == 1 and f"dot runs on the tensor cores: wgmma {what}" in k.notes[0]
    assert "mma.sync" not in k.ptx and "cp.async.cg.shared.global" in k.ptx and "ld.global" not in k_loop(k.ptx)
    precision = kernel.split("_")[1]
    assert instructions(k.ptx, {"tf32": "cvt.rn.tf32.f32", "tf32x3": "cvt.rna.tf32.f32"}[precision]) > 0
    assert "fence.proxy.async.shared::cta" in k.ptx
    assert re.search(r"wgmma\.mma_async\S* \{[^}]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd", k.ptx)  # B^T's fragments
    assert "wgmma.wait_group.sync.aligned 1;" not in k.ptx  # each group reads registers: waited for in its iteration
    expected = tf32_gemm_reference(a, b, precision, config["TILE_K"])
    np.testing.assert_array_equal(c.view(np.uint32), expected.view(np.uint32))
    scale = np.abs(a).astype(np.float64) @ np.abs(b)
    assert (np.abs(c - a.astype(np.float64) @ b) / scale).max() <= {"tf32": 2.0 ** -10, "tf32x3": 2.0 ** -21}[precision]


@pytest.mark.parametrize("kernel", ["sgemm_tf32", "sgemm_tf32x3"])
def test_tf32_wgmma_and_mma_sync_compute_the_same_bits_and_the_interpreter_agrees_to_the_documented_bound(kernel):
    config = {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32, "WARPS": 4, "STAGES": 3}
    sizes = (70, 130, 77)
    wgmma, a, b, c = emulate_sgemm(kernel, config, sizes, "sm_90a")
    mma, _, _, c_mma = emulate_sgemm(kernel, config, sizes, "sm_90")
    assert "wgmma" in wgmma.notes[0] and "mma.sync" in mma.notes[0]
    np.testing.assert_array_equal(c.view(np.uint32), c_mma.view(np.uint32))
    c_interpreted = np.zeros_like(c)
    getattr(phobos.load(SGEMM_TF32, mode="interpret"), kernel).configure(**config)(a, b, c_interpreted)
    scale = np.abs(a).astype(np.float64) @ np.abs(b)
    bound = {"sgemm_tf32": 2.0 ** -10, "sgemm_tf32x3": 2.0 ** -21}[kernel]
    for result in (c, c_interpreted):
        assert (np.abs(result - a.astype(np.float64) @ b) / scale).max() <= bound
    if kernel == "sgemm_tf32":  # the same rounded operands: the sums differ by the tensor cores' truncations
        assert np.abs(c - c_interpreted).max() <= 2.0 ** -20 * scale.max()


@pytest.mark.parametrize("precision", ["tf32", "tf32x3"])
def test_a_tf32_dot_outside_a_loop_runs_on_wgmma_from_registers_stored_rounded(precision):
    src = dot_source(128, 64, 32, "f32", warps=8, precision=precision)
    k = phobos.compile(src, arch="sm_90a")
    assert f"wgmma m64n64k8 {precision}, computing C^T = B^T A^T, 1 x 2 warpgroups of 64 x 64" in k.notes[0]
    rng = np.random.default_rng(10)
    a, b = rng.standard_normal((128, 32), dtype=np.float32), rng.standard_normal((32, 64), dtype=np.float32)
    out = run_both(src, lambda: [a, b, np.zeros((128, 64), np.float32)])
    np.testing.assert_array_equal(out["emulate"][2], tf32_gemm_reference(a, b, precision, 32))
    scale = np.abs(a).astype(np.float64) @ np.abs(b)
    for mode, (_, _, c) in out.items():
        assert (np.abs(c - a.astype(np.float64) @ b) / scale).max() <= {"tf32": 2.0 ** -10, "tf32x3": 2.0 ** -21}[
            precision], mode


def test_tf32_wgmma_needs_a_k_slice_of_32():
    config = dict(TF32_WGMMA_CONFIGS[0][1], TILE_K=16)
    assert "mma.sync m16n8k8 tf32" in compiled(SGEMM_TF32, "sgemm_tf32", config, "sm_90a").notes[0]


@pytest.mark.parametrize("kernel,config", [
    ("sgemm_tf32", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32, "WARPS": 8, "STAGES": 3}),
    ("sgemm_tf32", {"TILE_M": 128, "TILE_N": 256, "TILE_K": 32, "WARPS": 8, "STAGES": 3}),
    ("sgemm_tf32", {"TILE_M": 256, "TILE_N": 128, "TILE_K": 32, "WARPS": 8, "STAGES": 4}),  # 64 rows of C a thread
    ("sgemm_tf32x3", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32, "WARPS": 8, "STAGES": 3}),
], ids=["tf32-128x128", "tf32-128x256", "tf32-256x128", "tf32x3-128x128"])
def test_ptxas_accepts_the_tf32_wgmma_gemms_without_spills(kernel, config):
    k = compiled(SGEMM_TF32, kernel, config, "sm_90a")
    report = check(k.ptx, arch="sm_90a", name=kernel)
    report.raise_for_errors()
    assert report.kernel(kernel).spill_stores == 0, report.kernel(kernel)
    assert not any("C7510" in w or "serializ" in w for w in report.warnings), report.warnings


# ------------------------------------------------------------------ a swapped product's layouts
def element(layout, tid: int, r: int) -> tuple[int, ...]:
    """The tile coordinates of register r of thread tid."""
    return tuple(sum((tid // t.div) % t.mod * t.scale for t in terms) + off
                 for terms, off in zip(layout.terms, layout.offsets[r]))


@pytest.mark.parametrize("m,n,warps,groups", [(128, 256, 8, (2, 1)), (128, 128, 8, (2, 1)), (64, 256, 8, (2, 1)),
                                              (128, 64, 8, (1, 2)), (128, 64, 4, (1, 1))],
                         ids=["128x256", "128x128", "64x256", "128x64-1x2", "128x64-w4"])
def test_a_swapped_product_puts_each_wgmma_row_in_one_column_of_c_for_fragments_and_accumulators(m, n, warps, groups):
    """wgmma's A fragments (B's staging layout) and its accumulators (the result layout) hold the
    hardware's fragment positions, with one order of C^T's rows for both, a bijection onto the
    group's columns; each thread's columns come in runs (vectors along N)."""
    plan = MmaPlan(MMA_KINDS["tf32"], m, n, 32, *groups, warps * 32, "wgmma", swapped=True)
    fragments, result = plan.staging_layouts[1], plan.layout
    tiles, block_n = plan.wgmma_m_tiles, n // groups[0]
    column_of_row: dict[tuple[int, int], int] = {}
    for tid in range(warps * 32):
        lane, warp, group = tid % 32, tid // 32 % 4, tid // 128
        g, t = lane // 4, lane % 4
        group_m, group_n = group % groups[0], group // groups[0]
        for i in range(tiles):
            for h in (0, 1):
                row = 64 * i + 16 * warp + g + 8 * h
                for s in range(4):
                    for half_k in (0, 1):
                        k, col = element(fragments, tid, plan.wgmma_fragments(s, i)[2 * half_k + h])
                        assert k == 8 * s + t + 4 * half_k
                        assert column_of_row.setdefault((group_m, row), col) == col
                for j in range(plan.wgmma_n // 8):
                    for c in (0, 1):
                        mm, col = element(result, tid, plan.wgmma_accumulators(i)[4 * j + 2 * h + c])
                        assert mm == group_n * plan.wgmma_n + 8 * j + 2 * t + c
                        assert column_of_row[(group_m, row)] == col
    for group_m in range(groups[0]):
        columns = sorted(col for (gm, _), col in column_of_row.items() if gm == group_m)
        assert columns == list(range(group_m * block_n, (group_m + 1) * block_n))
    assert fragments.vector_width() == result.vector_width() == min(2 * tiles, 8)


def k_loop(ptx: str) -> str:
    """The PTX of a kernel's K loop (the loop with the products, not the pipeline's prologue): from its
    label to the label after it."""
    loops = [ptx[m.start():re.compile(r"^\$L_done_\d+:", re.M).search(ptx, m.end()).start()]
             for m in re.finditer(r"^\$L_loop_\d+:", ptx, re.M)]
    inner = re.compile(r"^\$L_loop_\d+:", re.M)
    (loop,) = [body for body in loops if "wgmma.mma_async" in body and not inner.search(body, 1)]  # innermost
    return loop


def test_the_tf32_wgmma_loop_copies_rounds_and_reads_as_vectors_and_holds_the_fragments_to_the_wait():
    k = compiled(SGEMM_TF32, "sgemm_tf32", {"TILE_M": 128, "TILE_N": 256, "TILE_K": 32, "WARPS": 8, "STAGES": 2})
    loop = k_loop(k.ptx)
    assert instructions(loop, "cp.async.cg.shared.global") == 4 + 8  # A: 128 x 32 / 256 / 4; B: 32 x 256 / 256 / 4
    # A rounded in place (read, stored back), B read as 2 tiles x 4 k steps of fragment vectors
    assert instructions(loop, "ld.shared.v4.f32") == 4 + 8 and instructions(loop, "st.shared.v4.u32") == 4
    assert "ld.global" not in loop and instructions(loop, "cvt.rn.tf32.f32") == 4 * (4 + 8)
    assert instructions(k.ptx, "st.global.v4.f32") > 0 and instructions(k.ptx, "st.global.f32") == 0
    # the fragment registers of each wgmma are written by nothing between it and the wait
    issued = loop.index("wgmma.mma_async")
    waited = loop.index("wgmma.wait_group")
    held = set(re.findall(r"wgmma\.mma_async.*\{(%r\d+), (%r\d+), (%r\d+), (%r\d+)\}", loop[issued:waited]))
    written = re.findall(r"^\s*(?:@%p\d+ )?[a-z][\w.:]* (%r\d+),", loop[issued:waited], re.M)
    assert held and not {r for regs in held for r in regs} & set(written)


def test_register_staging_keeps_three_stages_at_least():
    # the rounding pass reads the next iteration's stage while this one's group runs: STAGES=2 gets three
    shared = {s: compiled(SGEMM_TF32, "sgemm_tf32", {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32, "WARPS": 4,
                                                     "STAGES": s}).shared_bytes for s in (2, 3, 4)}
    stage = shared[4] - shared[3]
    assert stage >= (64 * 32 + 32 * 128) * 4 and shared[2] == shared[3] and shared[3] >= 3 * stage
    mma = {s: compiled(SGEMM_TF32, "sgemm_tf32", {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32, "WARPS": 4, "STAGES": s},
                       "sm_90") for s in (2, 3)}  # mma.sync keeps its two
    assert "wgmma" not in mma[2].ptx and mma[2].shared_bytes < mma[3].shared_bytes


def test_tf32x3_on_wgmma_starts_each_product_from_zero_with_scale_d_0():
    k = compiled(SGEMM_TF32, "sgemm_tf32x3", {"TILE_M": 128, "TILE_N": 64, "TILE_K": 32, "WARPS": 4, "STAGES": 2})
    loop = k_loop(k.ptx)
    scales = re.findall(r"wgmma\.mma_async[^;]*, %rd\d+, ([01]), 1, 1;", loop)
    assert scales == ["0"] + ["1"] * 11  # 1 tile x 4 k steps x 3 products, the first from zero
    assert not re.search(r"mov\.f32 %f\d+, 0f00000000;", loop)
