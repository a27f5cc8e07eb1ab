# The PTX emulator runs hand-written kernels correctly: bounds-checked vector
# add, divergent loops and branches, shared memory with barriers, vector
# accesses, atomics, cp.async, generic/local addressing and warp shuffles.
import numpy as np
import pytest

from phobos.errors import LaunchError
from phobos.run.emulator import Module, NonCoherentRead, launch, load_module

from .emulator_support import DATA, data_module

rng = np.random.default_rng(1234)


def test_vector_add_with_partial_last_block():
    x = rng.standard_normal(1000).astype(np.float32)
    y = rng.standard_normal(1000).astype(np.float32)
    out = np.zeros_like(x)
    stats = data_module("vadd.ptx").launch("vadd", (4,), (256,), [x, y, out, 1000])
    np.testing.assert_array_equal(out, x + y)
    assert stats.threads == 1024 and stats.steps > 0


def test_an_instruction_may_continue_on_the_next_line():
    text = (DATA / "vadd.ptx").read_text().replace("mad.lo.s32 \t%r5, %r2, %r3, %r4;", "mad.lo.s32\n\t\t%r5, %r2,\n%r3, %r4;")
    assert "mad.lo.s32\n" in text
    x = np.arange(300, dtype=np.float32)
    out = np.zeros_like(x)
    Module(text, "vadd.ptx").launch("vadd", 2, 256, [x, x, out, 300])
    np.testing.assert_array_equal(out, 2 * x)


def test_launch_function_caches_the_parsed_module():
    text = (DATA / "vadd.ptx").read_text()
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    launch(text, "vadd", 1, 8, [x, x, out, 8], name="vadd.ptx")
    np.testing.assert_array_equal(out, 2 * x)
    assert load_module(text, "vadd.ptx") is load_module(text, "vadd.ptx")


def test_collatz_loops_diverge_and_reconverge():
    values = rng.integers(1, 3000, 300).astype(np.uint32)
    out = np.zeros(300, np.uint32)
    data_module("control.ptx").launch("collatz", (2,), (256,), [values, out, 300])

    def steps(n):
        count = 0
        while n > 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            count += 1
        return count
    assert out.tolist() == [steps(int(v)) for v in values]


def test_nested_branches_and_predicated_instructions():
    x = np.arange(-40, 24, dtype=np.int32)
    out = np.zeros_like(x)
    data_module("control.ptx").launch("branches", 1, 64, [x, out])
    expected = np.where(x < 0, np.where(x < -10, -100, 2 * x), np.where(x > 10, x * x, x + 1000))
    np.testing.assert_array_equal(out, expected)


def test_block_reduction_with_barriers_matches_tree_order():
    x = rng.standard_normal(1024).astype(np.float32)
    out = np.zeros(4, np.float32)
    data_module("shared.ptx").launch("block_sum", (4,), (256,), [x, out])
    partial = x.reshape(4, 256).copy()
    stride = 128
    while stride:
        partial[:, :stride] += partial[:, stride:2 * stride]
        stride //= 2
    np.testing.assert_array_equal(out, partial[:, 0])


def test_tiled_transpose_in_two_dimensional_grid():
    a = rng.standard_normal((64, 96)).astype(np.float32)
    out = np.zeros((96, 64), np.float32)
    data_module("shared.ptx").launch("transpose", (3, 2), (32, 8), [a, out, 96, 64])
    np.testing.assert_array_equal(out, a.T)


def test_dynamic_shared_memory():
    x = rng.standard_normal(128).astype(np.float32)
    out = np.zeros_like(x)
    data_module("shared.ptx").launch("reverse_dynamic", 1, 128, [x, out], shared_bytes=512)
    np.testing.assert_array_equal(out, x[::-1])


def test_all_ctas_in_several_batches_give_the_same_result():
    x = rng.standard_normal(1024).astype(np.float32)
    one, many = np.zeros(4, np.float32), np.zeros(4, np.float32)
    kernel = data_module("shared.ptx").kernel("block_sum")
    assert kernel.launch(4, 256, [x, one], workers=1).batches == 1  # (in one process: the batches of one)
    assert kernel.launch(4, 256, [x, many], max_threads=256).batches == 4
    np.testing.assert_array_equal(one, many)


def test_vector_loads_and_stores():
    x = rng.standard_normal(1024).astype(np.float32)
    out = np.zeros_like(x)
    data_module("memory.ptx").launch("scale_v4", 2, 128, [x, out, 2.5])
    np.testing.assert_array_equal(out, x * np.float32(2.5))


def test_v2_f64_with_negative_offset():
    data = rng.standard_normal(64)
    expected = data.reshape(32, 2)[:, ::-1].ravel()
    data_module("memory.ptx").launch("swap_v2", 1, 32, [data])
    np.testing.assert_array_equal(data, expected)


def test_atomics_count_every_contribution_in_thread_order():
    n = 512
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    total = np.zeros(1, np.float32)
    tickets = np.zeros(n, np.uint32)
    counter = np.zeros(1, np.uint32)
    ints = np.array([2 ** 31 - 1, -2 ** 31, 0, 7], np.int32)
    data_module("memory.ptx").launch("atomics", 4, 128, [x, total, tickets, counter, ints])
    assert total[0] == np.cumsum(x, dtype=np.float32)[-1]
    np.testing.assert_array_equal(tickets, np.arange(n))
    assert counter[0] == n
    truncated = np.trunc(x).astype(np.int32)
    assert ints[0] == truncated.min() and ints[1] == truncated.max()
    assert ints[2] == 4 * 128 * 2  # each block adds its shared counter (2 per thread)
    assert ints[3] == n  # thread 7's cas swaps in 1000, then each thread exchanges in id + 1: the last stays


def test_cp_async_copies_and_zero_fills():
    src = np.arange(2048, dtype=np.uint32).view(np.uint8)[:2048].copy()
    out = np.zeros(2048, np.uint8)
    words = np.arange(256, dtype=np.uint32)
    data_module("memory.ptx").launch("async_copy", 1, 128, [src, out, words, 1000])
    filled = src.copy()
    filled[1000:] = 0
    np.testing.assert_array_equal(out, np.roll(filled.reshape(128, 16), -1, axis=0).ravel())
    np.testing.assert_array_equal(words[128:], np.roll(np.arange(128), -1))


def test_generic_addressing_of_shared_and_local_memory():
    x = np.arange(64, dtype=np.uint32) * 5
    out = np.zeros(64, np.uint32)
    data_module("memory.ptx").launch("generic", 1, 64, [x, out])
    np.testing.assert_array_equal(out, 3 * x + np.arange(64))


def test_butterfly_shuffle_reduction():
    x = rng.standard_normal(256).astype(np.float32)
    out = np.zeros_like(x)
    data_module("warp.ptx").launch("warp_sum", 2, 128, [x, out])
    lanes = x.reshape(-1, 32).copy()
    for offset in (16, 8, 4, 2, 1):
        lanes = lanes + lanes[:, np.arange(32) ^ offset]
    np.testing.assert_array_equal(out, lanes.ravel())


def test_shuffle_modes_and_votes():
    x = rng.integers(0, 1000, 64).astype(np.uint32)
    out = np.zeros(4 * 64, np.uint32)
    flags = np.zeros(3 * 64, np.uint32)
    data_module("warp.ptx").launch("shfl_modes", 1, 64, [x, out, flags])
    out, flags = out.reshape(64, 4), flags.reshape(64, 3)
    lane = np.arange(64) % 32
    warp = np.arange(64) - lane
    np.testing.assert_array_equal(out[:, 0], np.where(lane >= 1, x[warp + np.maximum(lane - 1, 0)], x))
    np.testing.assert_array_equal(out[:, 3], lane >= 1)
    np.testing.assert_array_equal(out[:, 1], np.where(lane + 2 <= 31, x[warp + np.minimum(lane + 2, 31)], x))
    np.testing.assert_array_equal(out[:, 2], x[warp + (lane & 24) + 5])
    odd = (x & 1).astype(bool).reshape(2, 32)
    ballots = [sum(1 << i for i in range(32) if odd[w, i]) for w in range(2)]
    np.testing.assert_array_equal(flags[:, 0], np.repeat(ballots, 32))
    expected = [2 * odd[w].any() + 4 * odd[w].all() + 8 for w in range(2)]
    np.testing.assert_array_equal(flags[:, 1], np.repeat(expected, 32))
    np.testing.assert_array_equal(flags[:, 2], 0xFFFFFFFF)


def test_kernel_lists_its_parameters():
    kernel = data_module("vadd.ptx").kernel("vadd")
    assert kernel.params == [("vadd_x", "u64"), ("vadd_y", "u64"), ("vadd_out", "u64"), ("vadd_n", "u32")]


def test_the_same_array_passed_twice_is_one_allocation():
    x = np.arange(16, dtype=np.float32)
    with pytest.raises(NonCoherentRead, match="a tensor passed both as an input and as an output"):
        data_module("vadd.ptx").launch("vadd", 1, 16, [x, x, x, 16])  # x is read with ld.global.nc
    np.testing.assert_array_equal(x, np.arange(16, dtype=np.float32))
    data_module("vadd.ptx").launch("vadd", 1, 16, [x, x, x, 16], check_races=False)
    np.testing.assert_array_equal(x, 2 * np.arange(16, dtype=np.float32))


def test_non_contiguous_arrays_are_copied_back_in_place():
    base = np.zeros((16, 2), np.float32)
    out = base[:, 0]
    x = np.arange(16, dtype=np.float32)
    data_module("vadd.ptx").launch("vadd", 1, 16, [x, x, out, 16])
    np.testing.assert_array_equal(base[:, 0], 2 * x)
    np.testing.assert_array_equal(base[:, 1], 0)


@pytest.mark.parametrize("args, message", [
    ([np.zeros(4, np.float32)], "takes 4 arguments"),
    ([np.zeros(4, np.float32)] * 3 + [-1], "out of range"),
    ([np.zeros(4, np.float32)] * 3 + [1.5], "is .u32"),
    ([np.zeros(4, np.float32)] * 4, "array needs a .u64"),
])
def test_bad_arguments_are_launch_errors(args, message):
    with pytest.raises(LaunchError, match=message):
        data_module("vadd.ptx").launch("vadd", 1, 4, args)


@pytest.mark.parametrize("grid, block, message", [
    (1, 512, "maxntid"), (1, 2048, "1024 threads"), ((1, 70000), 32, "too large"), ((), 32, "1 to 3"),
])
def test_bad_launch_configurations(grid, block, message):
    x = np.zeros(4, np.float32)
    with pytest.raises(LaunchError, match=message):
        data_module("vadd.ptx").launch("vadd", grid, block, [x, x, x, 4])


def test_unknown_kernel_name():
    with pytest.raises(LaunchError, match="no kernel 'nope'.*vadd"):
        data_module("vadd.ptx").launch("nope", 1, 1, [])


def test_read_only_inputs_are_fine_but_not_written():
    x = np.arange(8, dtype=np.float32)
    x.flags.writeable = False
    out = np.zeros(8, np.float32)
    data_module("vadd.ptx").launch("vadd", 1, 8, [x, x, out, 8])
    np.testing.assert_array_equal(out, 2 * x)
    with pytest.raises(LaunchError, match="read-only"):
        data_module("vadd.ptx").launch("vadd", 1, 8, [out, out, x, 8])


def test_module_parses_once_and_launches_many_times():
    module = Module((DATA / "vadd.ptx").read_text(), "vadd.ptx")
    x = np.ones(32, np.float32)
    for k in range(3):
        out = np.zeros(32, np.float32)
        module.launch("vadd", 1, 32, [x * k, x, out, 32])
        np.testing.assert_array_equal(out, x * (k + 1))


SYNTAX_FORMS = """
.version 8.5
.target sm_90
.address_size 64
/* A block comment
   over lines. */
.visible .entry forms(
	.param .u64 .ptr .global .align 16 forms_out,
	.param .align 8 .b8 forms_pair[8],
	.param .f64 forms_scale
)
.reqntid 32, 1, 1
.minnctapersm 2
.maxnreg 64
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	.reg .f64 	%fd<3>;
	.reg .b64 	%rd<4>;
	.pragma "nounroll";
	ld.param.u64 	%rd1, [forms_out];   // a trailing comment
	ld.param.u32 	%r1, [forms_pair];
	ld.param.u32 	%r2, [forms_pair+4];
	ld.param.f64 	%fd1, [forms_scale];
	mov.u32 	%r3, %tid.x;
	{
	.reg .b32 %r<2>;
	add.s32 	%r1, %r3, 100;
	mov.u32 	%r3, %r1;
	}
	mad.lo.s32 	%r3, %r3, %r1, %r2;
	cvt.rn.f64.s32 	%fd2, %r3;
	mul.f64 	%fd2, %fd2, %fd1;
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd2, %r1, 8;
	add.s64 	%rd3, %rd1, %rd2;
	st.global.f64 	[%rd3], %fd2;
	ret;
}
"""


def test_parameter_qualifiers_directives_scopes_and_comments():
    from .emulator_support import assert_valid_ptx
    assert_valid_ptx(SYNTAX_FORMS)
    module = Module(SYNTAX_FORMS, "forms.ptx")
    out = np.zeros(32)
    pair = np.array([3, 5], np.int32)
    module.launch("forms", 1, 32, [out, pair.tobytes(), 0.5])
    tid = np.arange(32)
    np.testing.assert_array_equal(out, ((tid + 100) * 3 + 5) * 0.5)  # the inner %r1 shadows the outer one
    assert module.kernel("forms").program.directives == {"reqntid": (32, 1, 1), "minnctapersm": (2,),
                                                         "maxnreg": (64,)}
    with pytest.raises(LaunchError, match="reqntid"):
        module.launch("forms", 1, 64, [np.zeros(64), pair.tobytes(), 0.5])
    with pytest.raises(LaunchError, match="needs 8 bytes"):
        module.launch("forms", 1, 32, [out, b"1234", 0.5])


def test_more_shared_memory_than_the_target_has():
    x = np.zeros(128, np.float32)
    with pytest.raises(LaunchError, match="needs 240000 bytes of shared memory; sm_90 has 232448"):
        data_module("shared.ptx").launch("reverse_dynamic", 1, 128, [x, x.copy()], shared_bytes=240000)
