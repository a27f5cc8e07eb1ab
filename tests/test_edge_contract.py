# The edge contract holds for every start a kernel is given: elements outside
# a tensor read 0 and are not written, whatever the start's type and however
# far outside it lies (near 2^31, 2^32, 2^63, negative) - run by the
# interpreter (the language's meaning) and by the PTX emulator (the generated
# code, with its bounds and race checks on), which must agree.  And within a
# program instance, a load sees the stores before it and a store does not
# overtake the loads before it, whichever threads hold the elements.
from __future__ import annotations

import numpy as np
import pytest

import phobos
from phobos.compiler import compile
from phobos.run.emulator import MemoryFault, Module

MODES = ("interpret", "emulate", pytest.param("gpu", marks=pytest.mark.gpu))
I32_MAX = 2**31 - 1

#: A store and a load of the same slice; `y` shows what the load read.
STORE_THEN_LOAD = """\
kernel k(x: tensor<f32>[N], y: tensor<f32>[N], s: {dtype}) {{
    x[s :+ 4] = 1.0
    y[0 :+ 4] = x[s :+ 4] + 2.0
}}
"""

FAR_STARTS = {
    "i32": [I32_MAX - 3, I32_MAX - 2, I32_MAX, -2**31, -2**31 + 3, -5, -3, 5, 8],
    "i64": [2**32, 2**32 + 2, 2**32 - 2, -2**32, -2**32 + 2, 2**31 - 2, 2**31, 2**63 - 1, -2**63, -2**63 + 2,
            -3, 6],
    "u32": [2**32 - 1, 2**32 - 3, 2**31, 2**31 - 2, 6],
}
CASES = [(dtype, start) for dtype, starts in FAR_STARTS.items() for start in starts]


def run(src: str, mode: str, *args, grid=(1,)):
    phobos.kernel(src, mode=mode)[grid](*args)


def expected_store_then_load(start: int) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    inside = [i for i in range(start, start + 4) if 0 <= i < 8]
    x[inside] = 1.0
    y[:4] = [(1.0 if 0 <= start + k < 8 else 0.0) + 2.0 for k in range(4)]
    return x, y


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype, start", CASES, ids=[f"{d}-{s}" for d, s in CASES])
def test_a_start_anywhere_touches_only_the_tensor(mode, dtype, start):
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    run(STORE_THEN_LOAD.format(dtype=dtype), mode, x, y, start)
    want_x, want_y = expected_store_then_load(start)
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(y, want_y)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype, start", [("i32", I32_MAX), ("i64", 2**32 + 1), ("i64", -2**32 + 1),
                                          ("u32", 2**32 - 7), ("u32", 2**32 - 1), ("i64", 7), ("u32", 0)])
def test_single_indices_and_atomics_anywhere(mode, dtype, start):
    src = f"""kernel k(x: tensor<f32>[N], y: tensor<f32>[N], s: {dtype}) {{
        x[s] = 5.0
        atomic_add(y[s :+ 2], 1.0)
    }}"""
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    run(src, mode, x, y, start)
    want_x, want_y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    if 0 <= start < 8:
        want_x[start] = 5.0
    want_y[[i for i in (start, start + 1) if 0 <= i < 8]] = 1.0
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(y, want_y)


@pytest.mark.parametrize("mode", MODES)
def test_two_dimensional_slices_far_outside(mode):
    src = """kernel k(m: tensor<f32>[R, C], r: i64, c: i32) {
        m[r :+ 2, c :+ 4] = full([2, 4], 3.0)
    }"""
    for r, c in ((2**32, 0), (0, I32_MAX - 1), (-2**32 + 1, 1), (2**63 - 1, I32_MAX), (1, -2**31)):
        m = np.zeros((4, 8), np.float32)
        run(src, mode, m, r, c)
        assert not m.any(), (r, c)
    m = np.zeros((4, 8), np.float32)
    run(src, mode, m, 3, 6)  # partly inside
    want = np.zeros((4, 8), np.float32)
    want[3, 6:] = 3.0
    np.testing.assert_array_equal(m, want)


def test_a_block_ending_past_i32_takes_the_masked_path():
    """`program_id(0) * BLOCK :+ BLOCK` on a tensor of 2^31 - 1 elements: the last block starts at
    2^31 - 1024 and ends past 2^31 - 1, which i32 `start + size <= N` took for inside.  The
    tensor is a small array whose size parameter is given as 2^31 - 1, so any access faults: the
    fault must come from the masked scalar path, never from the unmasked 128-bit one."""
    src = "kernel k(x: tensor<f32>[N], p: i32) { x[p * 1024 :+ 1024] = 1.0 }"
    kernel = compile(src, config={})
    last_block = (I32_MAX + 1) // 1024 - 1
    with pytest.raises(MemoryFault) as fault:
        Module(kernel.ptx).launch("k", 1, kernel.threads, [np.zeros(8, np.float32), last_block, I32_MAX])
    assert "store of 4 bytes" in str(fault.value) and "st.global.f32" in str(fault.value)


@pytest.mark.gpu
def test_the_largest_tensor_the_binder_accepts_on_the_gpu():
    """2^31 - 1 elements, blocks of 1024: the last block ends past 2^31 - 1 and must not write past the
    tensor, whose end is followed here by a guard that must stay zero (8.6 GB of device memory)."""
    torch = pytest.importorskip("torch")
    n = I32_MAX
    memory = torch.zeros(n + 4096, dtype=torch.float32, device="cuda")
    x = memory[:n]
    phobos.kernel("kernel k(x: tensor<f32>[N]) { x[program_id(0) * 1024 :+ 1024] = 1.0 }", mode="gpu")(x)
    torch.cuda.synchronize()
    assert int((x == 1.0).sum()) == n
    assert int(memory[n:].count_nonzero()) == 0


# --- ordering within a program instance


@pytest.mark.parametrize("mode", MODES)
def test_a_load_of_another_slice_sees_the_stores_before_it(mode):
    src = """kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {
        x[0 :+ 64] = f32(arange(64))
        y[0 :+ 64] = x[1 :+ 64] * 2.0
    }"""
    x, y = np.zeros(65, np.float32), np.zeros(65, np.float32)
    run(src, mode, x, y)
    np.testing.assert_array_equal(y[:64], 2 * np.append(np.arange(1, 64), 0))


@pytest.mark.parametrize("mode", MODES)
def test_a_shifted_copy_within_one_tensor_reads_before_it_writes(mode):
    src = "kernel k(x: tensor<f32>[N]) { x[1 :+ 64] = x[0 :+ 64] + 1.0 }"
    x = np.arange(65, dtype=np.float32)
    run(src, mode, x)
    np.testing.assert_array_equal(x, np.append(0, np.arange(64) + 1))


@pytest.mark.parametrize("mode", MODES)
def test_overlapping_updates_in_a_loop_follow_each_other(mode):
    src = """kernel k(x: tensor<f32>[N]) {
        for i in range(0, 4) {
            x[i :+ 32] = x[i :+ 32] * 2.0 + 1.0
        }
    }"""
    x = np.zeros(40, np.float32)
    run(src, mode, x)
    want = np.zeros(40)
    for i in range(4):
        want[i:i + 32] = want[i:i + 32] * 2 + 1
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("mode", MODES)
def test_a_scalar_stored_by_one_thread_is_seen_by_all(mode):
    src = """kernel k(x: tensor<f32>[N], y: tensor<f32>[M]) {
        x[0] = 7.0
        y[0 :+ 64] = full([64], x[0])
    }"""
    x, y = np.zeros(4, np.float32), np.zeros(64, np.float32)
    run(src, mode, x, y)
    assert (y == 7.0).all()


def barriers(src: str) -> int:
    return compile(src, config={}).ptx.count("bar.sync")


def test_barriers_only_where_threads_could_overtake_each_other():
    assert barriers("kernel k(x: tensor<f32>[N], s: i32) { x[s :+ 256] += 1.0 }") == 0
    assert barriers("kernel k(x: tensor<f32>[N]) { x[1 :+ 64] = x[0 :+ 64] + 1.0 }") == 1
    assert barriers("""kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {
        x[0 :+ 64] = f32(arange(64))
        y[0 :+ 64] = x[0 :+ 64] * 2.0
    }""") == 0  # the same slice in the same layout: each element stays with its thread
    walk = """kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {{
        for c in range(0, N, {step}) {{
            y[c :+ 64] = f32(arange(64)) + x[c :+ 64]
        }}
    }}"""
    assert barriers(walk.format(step=64)) == 0  # each iteration stores past the last one's slice
    assert barriers(walk.format(step=32)) == 1  # overlapping slices, each element in another thread


@pytest.mark.parametrize("mode", MODES)
def test_overlapping_stores_in_a_loop_land_in_order(mode):
    src = """kernel k(y: tensor<f32>[N]) {
        for c in range(0, 96, 32) {
            y[c :+ 64] = f32(arange(64)) + f32(c)
        }
    }"""
    y = np.zeros(160, np.float32)
    run(src, mode, y)
    want = np.zeros(160, np.float32)
    for c in range(0, 96, 32):
        want[c:c + 64] = np.arange(64) + c
    np.testing.assert_array_equal(y, want)
