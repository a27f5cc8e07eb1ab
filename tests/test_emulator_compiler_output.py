# The race detectors on compilers' PTX: what Triton's kernels legitimately do
# must pass (several lanes of one instruction storing one value; cp.async data
# read by wgmma with no proxy fence), and the real hazards next to them must
# still be reported (lanes or threads storing different values with no barrier
# between; plain stores read by wgmma with no fence.proxy.async, which
# test_emulator_tensor_cores.py checks).  The Triton
# kernels are PTX that Triton 3.6 compiled (tests/data/emulator/triton, written
# by its generate.py), so these tests need no Triton.
import numpy as np
import pytest

from phobos.run.emulator import Module, SharedMemoryRace

from .emulator_support import DATA, PTXAS, ptxas_errors

TRITON = DATA / "triton"
rng = np.random.default_rng(7)


def triton_module(name: str) -> tuple[Module, int]:
    """The module of a Triton-compiled PTX file and the dynamic shared memory its header names."""
    text = (TRITON / name).read_text()
    shared = int(text.splitlines()[1].split(" bytes of dynamic shared memory")[0].rsplit(" ", 1)[1])
    return Module(text, name), shared


def test_zero_fill_by_replicated_lanes_is_no_race():
    """tl.histogram zeroes its bins with every thread storing 0 to the bins its lanes replicate:
    several lanes of one st.shared write one word, all with the same value."""
    module, shared = triton_module("histogram_sm80.ptx")
    x = rng.integers(0, 64, 1024).astype(np.int32)
    bins = np.zeros(64, np.int32)
    module.launch("histogram", 1, 128, [x, bins, 1024, None, None], shared)
    np.testing.assert_array_equal(bins, np.bincount(x, minlength=64))


def test_replicated_stores_of_a_reduction_are_no_race():
    """tl.sum and tl.max change layouts through shared memory, where the lanes that hold copies of
    one element (after the butterfly shuffles) all store it: st.shared.v4 of equal values."""
    module, shared = triton_module("column_sums_sm80.ptx")
    x = rng.standard_normal((64, 16)).astype(np.float32)
    out = np.zeros(16 + 64, np.float32)
    module.launch("column_sums", 1, 128, [x, out, None, None], shared)
    np.testing.assert_allclose(out[:16], x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[16:], x.max(1))


def test_cp_async_data_read_by_wgmma_needs_no_proxy_fence():
    """Triton's pipelined matrix product (tutorial 03) on sm_90a fills shared memory with cp.async,
    waits for it (cp.async.wait_group, bar.sync) and multiplies with wgmma, with no fence.proxy.async:
    accepted, as NVIDIA's own cp.async + GMMA mainloops do the same (docs/emulator.md)."""
    module, shared = triton_module("matmul_sm90a.ptx")
    m, n, k = 128, 64, 96  # the sizes generate.py compiled it for
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float16)
    module.launch("_matmul", 2, 128, [a, b, c, m, n, k, k, n, n, None, None], shared)
    np.testing.assert_allclose(c.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2,
                               atol=2e-2)


def one_word_kernel(body: str) -> str:
    """A kernel of 64 threads (two warps) with a shared word `w` and %t = %tid.x."""
    return f"""\
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<3>;
    .reg .b32 %t, %v, %r<4>;
    .reg .b64 %o;
    .shared .align 16 .b8 w[16];
    mov.u32 %t, %tid.x;
{body}
    bar.sync 0;
    ld.param.u64 %o, [out];
    ld.shared.u32 %v, [w];
    setp.eq.u32 %p2, %t, 0;
    @%p2 st.global.u32 [%o], %v;
    ret;
}}
"""


def run_one_word(body: str) -> int:
    text = one_word_kernel(body)
    if PTXAS is not None:
        assert ptxas_errors(text, "sm_80") is None
    out = np.zeros(1, np.uint32)
    Module(text, "word.ptx").launch("k", 1, 64, [out])
    return int(out[0])


@pytest.mark.parametrize("body", [
    "    st.shared.u32 [w], 7;",                                                    # every lane, one instruction
    "    st.shared.u32 [w], 7;\n    st.shared.u32 [w], 7;",                         # again, no barrier
    "    setp.lt.u32 %p1, %t, 32;\n    @%p1 st.shared.u32 [w], 7;\n"               # warp 0, then warp 1
    "    @!%p1 st.shared.u32 [w], 7;",
    "    mov.u32 %r1, 7;\n    st.shared.v4.u32 [w], {%r1, %r1, %r1, %r1};",          # vectors of one value
])
def test_stores_of_one_value_without_a_barrier_are_no_race(body):
    assert run_one_word(body) == 7


@pytest.mark.parametrize("body, message", [
    ("    st.shared.u32 [w], %t;",
     r"threads \(0,0,0\) and \(1,0,0\) write different values to it in the same instruction"),
    ("    and.b32 %r1, %t, 1;\n    st.shared.v4.u32 [w], {7, 7, %r1, 7};",           # one word of four differs
     r"at w\+8 .* threads \(0,0,0\) and \(1,0,0\) write different values to it in the same instruction"),
    ("    setp.lt.u32 %p1, %t, 32;\n    @%p1 st.shared.u32 [w], 7;\n"
     "    @!%p1 st.shared.u32 [w], 8;",
     r"write by this thread conflicts with a write by thread \(\d+,0,0\) .* with no barrier in between"),
    ("    st.shared.u32 [w], 7;\n    setp.eq.u32 %p1, %t, 5;\n    @%p1 st.shared.u32 [w], 8;",
     r"write by this thread conflicts with a write by thread \(0,0,0\)"),
])
def test_stores_of_different_values_without_a_barrier_are_races(body, message):
    with pytest.raises(SharedMemoryRace, match=message):
        run_one_word(body)


def test_reads_still_race_with_stores_of_the_value_already_there():
    """The value rule is for writes against writes: a read between them is still a race."""
    body = ("    st.shared.u32 [w], 7;\n    bar.sync 0;\n    setp.eq.u32 %p1, %t, 0;\n"
            "    @%p1 st.shared.u32 [w], 7;\n    setp.eq.u32 %p2, %t, 40;\n    @%p2 ld.shared.u32 %r1, [w];")
    with pytest.raises(SharedMemoryRace, match=r"read by this thread conflicts with a write by thread \(0,0,0\)"):
        run_one_word(body)

