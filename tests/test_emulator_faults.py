# The PTX emulator stops at what a GPU would hide: out-of-bounds and
# misaligned accesses, shared- and global-memory races, ld.global.nc of data
# the kernel writes, cp.async data read before its wait, barriers in divergent
# code, barrier counts that are not whole warps, divergent bra.uni, deadlocks,
# shuffles with absent lanes, division by zero, endless loops - and any PTX it
# does not know.  Errors name the PTX
# line, the thread, and the Phobos source position from `.loc`.
import numpy as np
import pytest

from phobos.errors import ExecutionError, Loc, PhobosError
from phobos.run.emulator import (AsyncCopyHazard, BarrierError, DeviceAssertTrap, DivergentBranch,
                                 EmulatorError, GlobalMemoryRace, MemoryFault, MisalignedAddress, Module, NonCoherentRead,
                                 PtxSyntaxError, SharedMemoryRace, TrapError, UnsupportedPtx, WarpSyncError)

from .emulator_support import PTXAS, assert_valid_ptx, data_module, ptxas_errors, source_text

HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"


def kernel_text(body: str, params: str = ".param .u64 k_p") -> str:
    return f"{HEADER}\n.visible .entry k({params})\n{{\n{body}\n}}\n"


def ptx_line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_emulator_errors_are_execution_errors():
    assert issubclass(EmulatorError, ExecutionError) and issubclass(EmulatorError, PhobosError)


def test_global_overrun_names_ptx_line_thread_address_and_source():
    x = np.zeros(1000, np.float32)
    with pytest.raises(MemoryFault) as info:
        data_module("vadd.ptx").launch("vadd_unchecked", 4, 256, [x, x, x.copy()],
                                       source_text=source_text("vadd.phobos"))
    err = info.value
    line = ptx_line_of(source_text("vadd.ptx"), "ld.global.f32 \t%f1, [%rd5]")
    assert err.ptx_line == line and err.ptx_file == "vadd.ptx"
    assert err.loc == Loc("vadd.phobos", 4, 9)
    text = str(err)
    assert text.startswith(f"vadd.phobos:4:9: vadd.ptx:{line}: out-of-bounds global load of 4 bytes")
    assert "just past the end of vadd_unchecked_x (0x10000000000, 4000 bytes)" in text
    assert "thread (232,0,0) of CTA (3,0,0)" in text  # the first of the 24 threads past the end
    assert "out[i] = x[i] + y[i]" in text  # the source line is quoted


def test_null_pointer():
    body = ".reg .f32 %f1;\n.reg .b64 %rd1;\nld.param.u64 %rd1, [k_p];\nld.global.f32 %f1, [%rd1+8];\nret;"
    text = kernel_text(body)
    assert_valid_ptx(text)
    with pytest.raises(MemoryFault, match="load of 4 bytes at 0x8: not in any allocation .a null"):
        Module(text).launch("k", 1, 1, [None])


def test_shared_overrun():
    with pytest.raises(MemoryFault, match=r"shared store of 4 bytes at shared address 0x80: only 128 bytes") as info:
        data_module("shared.ptx").launch("shared_overrun", 1, 32, [np.zeros(1, np.float32)])
    assert info.value.loc == Loc("shared.phobos", 22, 9)
    assert "thread (31,0,0)" in str(info.value)


def test_dynamic_shared_overrun_when_launched_with_too_little():
    x = np.zeros(128, np.float32)
    with pytest.raises(MemoryFault, match="only 256 bytes of shared"):
        data_module("shared.ptx").launch("reverse_dynamic", 1, 128, [x, x.copy()], shared_bytes=256)


def test_misaligned_vector_load():
    x = np.zeros(16, np.float32)
    with pytest.raises(MisalignedAddress, match="not a multiple of 16"):
        data_module("memory.ptx").launch("misaligned", 1, 1, [x, x.copy()])


def test_read_after_write_race_reports_both_accesses():
    x = np.ones(1024, np.float32)
    with pytest.raises(SharedMemoryRace) as info:
        data_module("shared.ptx").launch("block_sum_racy", 4, 256, [x, np.zeros(4, np.float32)])
    err = info.value
    text = source_text("shared.ptx")
    read_line = ptx_line_of(text, "ld.shared.f32 \t%f2, [%r9];")
    assert err.ptx_line > ptx_line_of(text, "block_sum_racy(") and err.loc == Loc("shared.phobos", 14, 17)
    assert "read by this thread conflicts with a write by thread (64,0,0)" in err.message
    assert "partial+256" in err.message and "thread (0,0,0) of CTA (0,0,0)" in err.message
    assert err.ptx_line == ptx_line_of(text[text.index("block_sum_racy("):], "ld.shared.f32 \t%f2") \
        + text[:text.index("block_sum_racy(")].count("\n")
    assert read_line < err.ptx_line
    (note,) = err.notes
    assert note.loc == Loc("shared.phobos", 15, 13) and "st.shared.f32" in note.message


def test_write_write_race_in_one_instruction():
    with pytest.raises(SharedMemoryRace,
                       match=r"threads \(0,0,0\) and \(1,0,0\) write different values to it in the same instruction"):
        data_module("shared.ptx").launch("same_word", 1, 64, [np.zeros(1, np.uint32)])


def test_write_after_read_race():
    with pytest.raises(SharedMemoryRace, match=r"write by this thread conflicts with a read by thread \(0,0,0\)"):
        data_module("shared.ptx").launch("shift_left", 1, 32, [np.zeros(32, np.uint32)])


def test_race_checking_can_be_turned_off():
    out = np.zeros(1, np.uint32)
    data_module("shared.ptx").launch("same_word", 1, 64, [out], check_races=False)
    assert out[0] == 63  # the last writer wins


def test_own_writes_then_reads_and_atomics_are_not_races():
    # Thread t writes slot t and reads it back, and all threads add to one
    # shared word atomically: neither is a race.
    body = """
    .reg .b32 %r<6>;
    .reg .b64 %rd<3>;
    .shared .align 4 .b8 slots[132];
    ld.param.u64 %rd1, [k_p];
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, slots;
    add.s32 %r3, %r3, %r2;
    st.shared.u32 [%r3+4], %r1;
    ld.shared.u32 %r4, [%r3+4];
    atom.shared.add.u32 %r5, [slots], %r4;
    bar.sync 0;
    ld.shared.u32 %r5, [slots];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd1, %rd1, %rd2;
    st.global.u32 [%rd1], %r5;
    ret;"""
    text = kernel_text(body)
    assert_valid_ptx(text)
    out = np.zeros(32, np.uint32)
    Module(text).launch("k", 1, 32, [out])
    np.testing.assert_array_equal(out, sum(range(32)))


def test_plain_read_racing_an_atomic():
    body = """
    .reg .b32 %r<3>;
    .shared .align 4 .b8 word[4];
    mov.u32 %r1, %tid.x;
    atom.shared.add.u32 %r2, [word], 1;
    ld.shared.u32 %r2, [word];
    ret;"""
    text = kernel_text(body)
    assert_valid_ptx(text)
    with pytest.raises(SharedMemoryRace, match="read by this thread conflicts with an atomic"):
        Module(text).launch("k", 1, 32, [0])


def test_cp_async_destination_read_before_wait():
    with pytest.raises(AsyncCopyHazard, match="pending"):
        data_module("memory.ptx").launch("async_no_wait", 1, 32, [np.zeros(512, np.uint8),
                                                                  np.zeros(512, np.uint8)])


def test_barrier_in_divergent_code():
    with pytest.raises(BarrierError, match="different bar.sync instructions") as info:
        data_module("shared.ptx").launch("split_barrier", 1, 64, [0])
    assert len(info.value.notes) == 1


def test_barrier_deadlock():
    with pytest.raises(BarrierError, match=r"deadlock.*32 at barrier 1, 32 at barrier 2"):
        data_module("shared.ptx").launch("barrier_deadlock", 1, 64, [0])


def test_exited_threads_do_not_block_a_barrier():
    body = """
    .reg .pred %p1;
    .reg .b32 %r<3>;
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 40;
    @%p1 exit;
    bar.sync 0;
    ret;"""
    text = kernel_text(body)
    assert_valid_ptx(text)
    assert Module(text).launch("k", 1, 64, [0]).steps > 0


def test_shuffle_over_a_partial_warp():
    x = np.zeros(48, np.float32)
    with pytest.raises(WarpSyncError, match="lane 16 of the member mask 0xffffffff does not exist"):
        data_module("warp.ptx").launch("warp_sum", 1, 48, [x, x.copy()])


def test_shuffle_in_divergent_code():
    with pytest.raises(WarpSyncError, match="lane 1 .* has exited or is not at this instruction"):
        data_module("warp.ptx").launch("shfl_divergent", 1, 32, [np.zeros(32, np.uint32)])


@pytest.mark.parametrize("t", ["s16", "u16", "s32", "u32", "s64", "u64"])
def test_integer_division_by_zero_gives_all_ones(t):
    """div and rem by a zero divisor give all ones (-1, or the largest unsigned value) - what ptxas's code for
    every width gives - and no fault, as on the GPU; the other threads' quotients are C's."""
    size = int(t[1:]) // 8
    body = f"""
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;
    .reg .{t} %x<5>;
    mov.u32 %r1, %tid.x;
    cvt.{t}.u32 %x1, %r1;
    sub.{t} %x2, %x1, 3;
    div.{t} %x3, 100, %x2;
    rem.{t} %x4, 100, %x2;
    ld.param.u64 %rd1, [k_p];
    mul.wide.u32 %rd2, %r1, {2 * size};
    add.s64 %rd1, %rd1, %rd2;
    st.global.v2.{t} [%rd1], {{%x3, %x4}};
    ret;"""
    text = kernel_text(body)
    assert_valid_ptx(text)
    out = np.zeros((8, 2), f"{'i' if t[0] == 's' else 'u'}{size}")
    Module(text).launch("k", 1, 8, [out])
    divisors = np.arange(8).astype(out.dtype) - out.dtype.type(3)
    assert (out[3] == np.array(-1).astype(out.dtype)).all()
    others = divisors != 0
    quotients = np.array([int(100 / int(d)) for d in divisors[others]])  # toward zero
    np.testing.assert_array_equal(out[others, 0], quotients.astype(out.dtype))
    np.testing.assert_array_equal(out[others, 1], (100 - quotients * divisors[others].astype(np.float64)).astype(out.dtype))


def test_endless_loop_hits_the_step_limit():
    text = kernel_text("$L__spin:\nbra.uni $L__spin;")
    assert_valid_ptx(text)
    with pytest.raises(TrapError, match="more than 1000 instruction steps"):
        Module(text).launch("k", 1, 1, [0], max_steps=1000)


def test_trap():
    text = kernel_text("trap;")
    assert_valid_ptx(text)
    with pytest.raises(TrapError, match="trap executed"):
        Module(text).launch("k", 1, 1, [0])


def _c_string(name: str, text: str) -> str:
    codes = ", ".join(str(b) for b in text.encode() + b"\0")
    return f".global .align 1 .b8 {name}[{len(text) + 1}] = {{{codes}}};"


ASSERTFAIL = "\n".join([
    HEADER, ".extern .func __assertfail (.param .b64 m, .param .b64 f, .param .b32 l, .param .b64 fn, .param .b64 c)"
    " .noreturn;", _c_string("message", "i < 5"), _c_string("file", "check.cu"), _c_string("function", "void k()"),
    """.visible .entry k(.param .u32 limit)
{
    .reg .pred %p;
    .reg .b32 %r<3>;
    .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    ld.param.u32 %r2, [limit];
    setp.lt.u32 %p, %r1, %r2;
    @%p bra DONE;
    {
    .param .b64 param0;
    .param .b64 param1;
    .param .b32 param2;
    .param .b64 param3;
    .param .b64 param4;
    cvta.global.u64 %rd1, message;
    st.param.b64 [param0], %rd1;
    cvta.global.u64 %rd2, file;
    st.param.b64 [param1], %rd2;
    st.param.b32 [param2], 41;
    cvta.global.u64 %rd3, function;
    st.param.b64 [param3], %rd3;
    st.param.b64 [param4], 1;
    call.uni __assertfail, (param0, param1, param2, param3, param4);
    }
    trap;
DONE:
    ret;
}
"""])


def test_assertfail_stops_the_launch_with_the_assertions_text():
    """__assertfail (CUDA's assert) where it is called: a DeviceAssertTrap with what the GPU prints; a launch
    that never calls it runs."""
    assert_valid_ptx(ASSERTFAIL)
    Module(ASSERTFAIL).launch("k", 1, 8, [8])
    with pytest.raises(DeviceAssertTrap, match=r"check.cu:41: void k\(\): Assertion `i < 5` failed \(and 2 more "
                                               r"threads\) \[thread \(5,0,0\)"):
        Module(ASSERTFAIL).launch("k", 1, 8, [5])


@pytest.mark.parametrize("body, error, message", [
    ("dp4a.u32.u32 %r1, %r2, %r3, %r1;", UnsupportedPtx, "unknown instruction dp4a.u32.u32"),
    ("min.relu.s32 %r1, %r2, %r3;", UnsupportedPtx, "unsupported modifier .relu on min"),
    ("ld.global.L1::no_allocate.lu.f32 %f1, [%rd1];", None, None),
    ("add.u32 %r1, %r2, %r9;", PtxSyntaxError, "%r9 is not a declared register"),
    ("add.u64 %rd1, %rd1, %r2;", PtxSyntaxError, "a .b32 register is too narrow for .u64"),
    ("ld.global.f32 %f1, [16];", PtxSyntaxError, "immediate addresses"),
    ("bar.arrive 0, 32;", UnsupportedPtx, "only bar.sync"),
    ("bra $L__nowhere;", PtxSyntaxError, "undefined label"),
])
def test_unknown_or_malformed_instructions_are_reported_at_load_time(body, error, message):
    text = kernel_text(".reg .b32 %r<4>;\n.reg .f32 %f<2>;\n.reg .b64 %rd<2>;\n"
                       f"mov.u64 %rd1, 0;\n{body}\nret;")
    if error is None:
        Module(text)
        return
    with pytest.raises(error, match=message) as info:
        Module(text, "bad.ptx")
    assert info.value.ptx_line == ptx_line_of(text, body)
    assert str(info.value).startswith(f"bad.ptx:{info.value.ptx_line}: ")


def test_ptxas_agrees_the_unknown_instruction_is_valid_ptx():
    # The "unknown instruction" and the unsupported modifier above are real PTX the emulator does not implement.
    for instruction in ("dp4a.u32.u32 %r1, %r2, %r3, %r1;", "min.relu.s32 %r1, %r2, %r3;"):
        assert_valid_ptx(kernel_text(f".reg .b32 %r<4>;\nmov.u32 %r2, 5;\nmov.u32 %r3, 7;\n{instruction}\nret;"))


def test_unsupported_directives():
    Module(HEADER + ".func f()\n{\nret;\n}\n")  # a device function, never called (inline.py inlines calls)
    with pytest.raises(UnsupportedPtx, match="initialising with the address of table"):
        Module(HEADER + ".global .align 4 .b8 table[16];\n.global .align 8 .u64 pointer[1] = {table};\n")


def test_syntax_errors_name_the_line():
    text = kernel_text("#")
    with pytest.raises(PtxSyntaxError, match=rf"<ptx>:{ptx_line_of(text, '#')}: unexpected character '#'"):
        Module(text)


def test_location_comes_from_the_last_loc_of_the_same_kernel():
    # split_barrier follows kernels with .loc lines but has none of its own.
    with pytest.raises(BarrierError) as info:
        data_module("shared.ptx").launch("split_barrier", 1, 64, [0])
    assert info.value.loc is None


def test_vector_load_straddling_the_end_of_an_allocation():
    x = np.zeros(1002, np.float32)
    with pytest.raises(MemoryFault, match=r"load of 16 bytes .* overrunning by 8 bytes the end of scale_v4_in"):
        data_module("memory.ptx").launch("scale_v4", 2, 128, [x, np.zeros(1024, np.float32), 1.0])


@pytest.mark.parametrize("partner, races", [(1, False), (32, True)])
def test_warp_barrier_orders_only_its_own_warp(partner, races):
    body = f"""
    .reg .b32 %r<6>;
    .shared .align 4 .b8 slots[256];
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, slots;
    add.s32 %r4, %r3, %r2;
    st.shared.u32 [%r4], %r1;
    bar.warp.sync -1;
    xor.b32 %r5, %r1, {partner};
    shl.b32 %r5, %r5, 2;
    add.s32 %r5, %r3, %r5;
    ld.shared.u32 %r5, [%r5];
    ret;"""
    text = kernel_text(body)
    assert_valid_ptx(text)
    if races:
        with pytest.raises(SharedMemoryRace, match=r"read by this thread conflicts with a write by thread \(32,0,0\)"):
            Module(text).launch("k", 1, 64, [0])
    else:
        Module(text).launch("k", 1, 64, [0])


# --- global memory: races within a CTA between barriers and between CTAs, ld.global.nc


def global_kernel(*lines: str) -> str:
    """A kernel over the u32 array k_p; %r1 is the thread id, %r2 the CTA id, %rd1 the array."""
    body = "\n".join([".reg .pred %p<4>;", ".reg .b32 %r<8>;", ".reg .b64 %rd<4>;",
                      "ld.param.u64 %rd1, [k_p];", "cvta.to.global.u64 %rd1, %rd1;",
                      "mov.u32 %r1, %tid.x;", "mov.u32 %r2, %ctaid.x;", *lines, "ret;"])
    text = kernel_text(body)
    assert_valid_ptx(text)
    return text


THREAD_0_WRITES = ("setp.eq.u32 %p1, %r1, 0;", "@%p1 st.global.u32 [%rd1], %r1;")
THREAD_1_WRITES = ("setp.eq.u32 %p2, %r1, 1;", "@%p2 st.global.u32 [%rd1], %r1;")
ALL_READ = ("ld.global.u32 %r3, [%rd1];",)


def run_global(text: str, grid: int = 1, block: int = 32, **options) -> np.ndarray:
    out = np.zeros(64, np.uint32)
    Module(text).launch("k", grid, block, [out], **options)
    return out


def test_global_writes_of_one_word_by_threads_of_one_instruction():
    with pytest.raises(GlobalMemoryRace, match=r"at k_p\+0 .*: thread \(0,0,0\) of CTA \(0,0,0\) and "
                                               r"thread \(1,0,0\) of CTA \(0,0,0\) write it in the same"):
        run_global(global_kernel("st.global.u32 [%rd1], %r1;"))


@pytest.mark.parametrize("first, second, message", [
    (THREAD_0_WRITES, THREAD_1_WRITES, r"write by this thread conflicts with a write by thread \(0,0,0\)"),
    (THREAD_0_WRITES, ALL_READ, r"read by this thread conflicts with a write by thread \(0,0,0\)"),
    (ALL_READ, THREAD_0_WRITES, r"write by this thread conflicts with a read by thread \(31,0,0\)"),
])
def test_global_races_within_a_cta_and_the_barrier_that_orders_them(first, second, message):
    with pytest.raises(GlobalMemoryRace, match=message + r" of CTA \(0,0,0\) at .*, with no barrier in between"):
        run_global(global_kernel(*first, *second))
    out = run_global(global_kernel(*first, "bar.sync 0;", *second))
    assert out[0] == (1 if second is THREAD_1_WRITES else 0)
    run_global(global_kernel(*first, *second), check_races=False)


def test_a_thread_may_read_and_write_its_own_global_words():
    text = global_kernel("mul.wide.u32 %rd2, %r1, 4;", "add.s64 %rd2, %rd1, %rd2;", "ld.global.u32 %r3, [%rd2];",
                         "add.u32 %r3, %r3, %r1;", "st.global.u32 [%rd2], %r3;", "ld.global.u32 %r3, [%rd2];",
                         "st.global.u32 [%rd2], %r3;")
    np.testing.assert_array_equal(run_global(text, block=64), np.arange(64))


@pytest.mark.parametrize("max_threads, message", [
    (1 << 16, r"thread \(0,0,0\) of CTA \(0,0,0\) and thread \(0,0,0\) of CTA \(1,0,0\) write it in the same "
              r"instruction"),  # both CTAs in one batch, run side by side
    (32, r"write by this thread conflicts with a write by thread \(0,0,0\) of CTA \(0,0,0\) at .*, in another "
         r"CTA \(nothing orders CTAs\)"),  # one CTA per batch, one batch after the other
])
def test_global_races_between_ctas_are_found_whatever_the_barriers(max_threads, message):
    writes = global_kernel("bar.sync 0;", *THREAD_0_WRITES, "bar.sync 0;")
    with pytest.raises(GlobalMemoryRace, match=message):
        run_global(writes, grid=2, max_threads=max_threads)
    read_after = global_kernel("setp.eq.u32 %p1, %r2, 1;", "@%p1 bra.uni SKIP;", *THREAD_0_WRITES, "SKIP:",
                               "bar.sync 0;", "setp.eq.u32 %p3, %r2, 1;", "@%p3 ld.global.u32 %r3, [%rd1];")
    with pytest.raises(GlobalMemoryRace, match=r"read by this thread conflicts with a write by .* in another CTA"):
        run_global(read_after, grid=2, max_threads=max_threads)


@pytest.mark.parametrize("order", ["relaxed.gpu", "volatile", "release.gpu"])
def test_strong_global_stores_to_one_word_are_no_race(order):
    # the PTX memory model: conflicting strong operations are no data race; one of the values is written
    out = run_global(global_kernel(f"st.{order}.global.u32 [%rd1], %r1;", "bar.sync 0;",
                                   f"st.{order}.global.u32 [%rd1], %r2;"), grid=3)
    assert out[0] in (0, 1, 2)
    with pytest.raises(GlobalMemoryRace):  # plain stores to it still race
        run_global(global_kernel(f"st.{order}.global.u32 [%rd1], %r1;", "st.global.u32 [%rd1], %r2;"))


def test_ctas_may_share_what_they_only_read_and_add_atomically():
    text = global_kernel("ld.global.u32 %r3, [%rd1+4];", "red.global.add.u32 [%rd1], 1;",
                         "mul.wide.u32 %rd2, %r2, 4;", "add.s64 %rd2, %rd1, %rd2;", *ALL_READ,
                         "setp.eq.u32 %p1, %r1, 0;", "@%p1 st.global.u32 [%rd2+8], %r2;")
    out = run_global(text, grid=4)
    assert out[0] == 128 and list(out[2:6]) == [0, 1, 2, 3]


@pytest.mark.parametrize("lines, message", [
    (("mul.wide.u32 %rd2, %r1, 4;", "add.s64 %rd2, %rd1, %rd2;", "st.global.u32 [%rd2], %r1;",
      "ld.global.nc.u32 %r3, [%rd2];"), "read here after a write"),
    (("mul.wide.u32 %rd2, %r1, 4;", "add.s64 %rd2, %rd1, %rd2;", "ld.global.nc.u32 %r3, [%rd2];",
      "st.global.u32 [%rd2], %r1;"), "written here after a read"),
])
def test_ld_global_nc_of_data_the_kernel_writes(lines, message):
    with pytest.raises(NonCoherentRead, match=f"read with ld.global.nc and written by this kernel .{message}"):
        run_global(global_kernel(*lines))


def test_ld_global_nc_of_data_nobody_writes_is_fine():
    text = global_kernel("ld.global.nc.u32 %r3, [%rd1];", "mul.wide.u32 %rd2, %r1, 4;", "add.s64 %rd2, %rd1, %rd2;",
                         "st.global.u32 [%rd2+4], %r3;")
    assert (run_global(text)[1:33] == 0).all()


def test_a_divergent_bra_uni():
    with pytest.raises(DivergentBranch, match="bra.uni taken by some active threads of a warp and not by others"):
        run_global(global_kernel("setp.lt.u32 %p1, %r1, 5;", "@%p1 bra.uni DONE;", "DONE:"))
    run_global(global_kernel("setp.lt.u32 %p1, %r1, 32;", "@%p1 bra.uni DONE;", "DONE:"), block=64)  # whole warps


def test_barrier_thread_counts_are_whole_warps():
    text = kernel_text("bar.sync 0, 48;\nret;")
    if PTXAS is not None:
        assert ptxas_errors(text) is not None  # ptxas refuses it too
    with pytest.raises(PtxSyntaxError, match="the thread count of bar.sync must be a positive multiple of 32"):
        Module(text)
    text = kernel_text(".reg .b32 %r1;\nmov.u32 %r1, 48;\nbar.sync 0, %r1;\nret;")
    assert_valid_ptx(text)
    with pytest.raises(BarrierError, match="barrier thread count 48 is not a positive multiple of 32"):
        Module(text).launch("k", 1, 64, [0])
    Module(kernel_text("bar.sync 0, 64;\nret;")).launch("k", 1, 64, [0])


# ------------------------------------------------------------------ the detectors' fast paths
# 16-byte accesses (ld/st.shared.v4, cp.async.cg, ldmatrix) are checked and recorded a lane or a whole
# 16-byte chunk at a time, and an access of many lanes inside one allocation is located without a search;
# the byte-by-byte paths must report exactly the same.

_TILE = """
    .reg .b32 %r<12>;
    .reg .b64 %rd<5>;
    .reg .pred %p<2>;
    .shared .align 16 .b8 tile[1024];
    ld.param.u64 %rd1, [k_p];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 4;
    mov.u32 %r3, tile;
    add.s32 %r4, %r3, %r2;
    add.s32 %r5, %r1, 1;
    and.b32 %r6, %r5, 63;
    shl.b32 %r6, %r6, 4;
    add.s32 %r6, %r3, %r6;
    mul.wide.u32 %rd2, %r1, 16;
    add.s64 %rd3, %rd1, %rd2;
    mul.wide.u32 %rd2, %r5, 16;
    add.s64 %rd4, %rd1, %rd2;
    mov.u32 %r11, %ctaid.x;
    setp.eq.u32 %p1, %r11, 1;
"""
_V4 = "{%r7, %r8, %r9, %r10}"
_NEXT_CHUNK = "and.b32 %r11, %r5, 63;\n mul.wide.u32 %rd2, %r11, 16;\n add.s64 %rd4, %rd1, %rd2;\n"  # (wrapped)
_HALVES = "setp.lt.u32 %p0, %r1, 32;\n "
_LDMATRIX = f"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {_V4},"
_TWO_COPIES = ("@%p0 cp.async.cg.shared.global [%r4], [%rd3], 16, %r11;\n"  # (CTA 0 copies zeros: src-size 0)
               " @!%p0 cp.async.cg.shared.global [%r4], [%rd3], 16;\n")
_FAST_PATH_CASES = {
    "read after a whole-chunk write": f"st.shared.v4.b32 [%r4], {_V4};\n ld.shared.v4.b32 {_V4}, [%r6];",
    "write after a whole-chunk read": f"ld.shared.v4.b32 {_V4}, [%r6];\n st.shared.v4.b32 [%r4], {_V4};",
    "word read of a whole-chunk write": f"st.shared.v4.b32 [%r4], {_V4};\n ld.shared.u32 %r7, [%r6+4];",
    "word write into a whole-chunk read": f"st.shared.v4.b32 [%r4], {_V4};\n bar.sync 0;\n"
                                          f" ld.shared.v4.b32 {_V4}, [%r6];\n st.shared.u32 [%r4+8], %r1;",
    "no race": f"st.shared.v4.b32 [%r4], {_V4};\n bar.sync 0;\n ld.shared.v4.b32 {_V4}, [%r6];\n"
               f" ld.shared.v4.b32 {_V4}, [%r4];\n bar.sync 0;\n st.shared.v4.b32 [%r6], {_V4};\n"
               f" st.global.v4.b32 [%rd3], {_V4};",
    "cp.async destination read before its wait": f"cp.async.cg.shared.global [%r4], [%rd3], 16;\n"
                                                 f" ld.shared.v4.b32 {_V4}, [%r4];",
    "cp.async source out of bounds": "cp.async.cg.shared.global [%r4], [%rd4], 16;\n cp.async.wait_all;",
    "read of another thread's cp.async": f"cp.async.cg.shared.global [%r4], [%rd3], 16;\n cp.async.wait_all;\n"
                                         f" ld.shared.v4.b32 {_V4}, [%r6];",
    "cp.async into a chunk another thread read": f"ld.shared.v4.b32 {_V4}, [%r6];\n"
                                                 f" cp.async.cg.shared.global [%r4], [%rd3], 16;\n"
                                                 f" cp.async.wait_all;",
    # (copies of several instructions that one wait completes are performed together where they can be)
    "copies of two instructions into chunks another thread read": _HALVES + f"ld.shared.v4.b32 {_V4}, [%r6];\n"
                                                                  f" {_TWO_COPIES} cp.async.wait_all;",
    "read of a copy of the second of two instructions": _HALVES + f"{_TWO_COPIES} cp.async.wait_all;\n"
                                                        f" @!%p0 ld.shared.v4.b32 {_V4}, [%r6];",
    "no race after copies of two instructions": _HALVES + f"{_TWO_COPIES} cp.async.wait_all;\n bar.sync 0;\n"
                                                f" ld.shared.v4.b32 {_V4}, [%r6];\n st.global.v4.b32 [%rd3], {_V4};",
    # (ldmatrix rows are whole chunks, checked a chunk at a time; their alignment is known from the address check)
    "ldmatrix of a chunk another thread wrote": f"st.shared.v4.b32 [%r4], {_V4};\n {_LDMATRIX} [%r6];",
    "ldmatrix of a copy before its wait": f"cp.async.cg.shared.global [%r4], [%rd3], 16;\n {_LDMATRIX} [%r4];",
    "ldmatrix of a misaligned row": f"{_LDMATRIX} [%r3+8];",
    "no race with ldmatrix": "mov.u32 %r7, %r1;\n mov.u32 %r8, %r5;\n mov.u32 %r9, %r2;\n mov.u32 %r10, %r6;\n"
                             f" st.shared.v4.b32 [%r4], {_V4};\n bar.sync 0;\n {_LDMATRIX} [%r6];\n"
                             f" st.global.v4.b32 [%rd3], {_V4};",
    # (an issued cp.async finds from its destination chunks whether two lanes copy into one)
    "copies of one instruction into one chunk": "cp.async.cg.shared.global [%r3], [%rd3], 16;\n cp.async.wait_all;",
    "read of a chunk two lanes copy into, before the wait": f"cp.async.cg.shared.global [%r3], [%rd3], 16;\n"
                                                           f" ld.shared.v4.b32 {_V4}, [%r6];",
    "global write of what another CTA read": f"ld.global.v4.b32 {_V4}, [%rd3];\n @%p1 st.global.v4.b32 [%rd3], {_V4};",
    "global write of what another CTA copied": f"cp.async.cg.shared.global [%r4], [%rd3], 16;\n"
                                               f" cp.async.wait_all;\n @%p1 st.global.v4.b32 [%rd3], {_V4};",
    "shared read out of bounds": f"ld.shared.v4.b32 {_V4}, [%r4+16];",
    "global write of what another CTA wrote": f"@!%p1 st.global.v4.b32 [%rd3], {_V4};\n"
                                              f" @%p1 st.global.v4.b32 [%rd3], {_V4};",
    "global read of what another CTA wrote": f"@!%p1 st.global.v4.b32 [%rd3], {_V4};\n"
                                             f" @%p1 ld.global.v4.b32 {_V4}, [%rd3];",
    "global write of a chunk another thread wrote": _NEXT_CHUNK + f"@%p1 st.global.v4.b32 [%rd3], {_V4};\n"
                                                    f" @%p1 st.global.v4.b32 [%rd4], {_V4};",
    "global write of a chunk another thread read": _NEXT_CHUNK + f"@%p1 ld.global.v4.b32 {_V4}, [%rd4];\n"
                                                   f" @%p1 st.global.v4.b32 [%rd3], {_V4};",
    "global word read of a whole-chunk write": _NEXT_CHUNK + f"@%p1 st.global.v4.b32 [%rd3], {_V4};\n"
                                               f" @%p1 ld.global.u32 %r7, [%rd4+4];",
    "global word write into a whole-chunk write": _NEXT_CHUNK + f"@%p1 st.global.v4.b32 [%rd3], {_V4};\n"
                                                  f" @%p1 st.global.u32 [%rd4+8], %r1;",
    "global pair writes of another thread's pair": _NEXT_CHUNK + "@%p1 st.global.v2.b32 [%rd3], {%r7, %r8};\n"
                                                   " @%p1 st.global.v2.b32 [%rd4], {%r7, %r8};",
    "global write of what ld.global.nc read": f"@%p1 ld.global.nc.v4.b32 {_V4}, [%rd3];\n"
                                              f" @%p1 st.global.v4.b32 [%rd3], {_V4};",
    "global writes of one chunk in one instruction": f"@%p1 st.global.v4.b32 [%rd1], {_V4};",
    "no race in global memory": _NEXT_CHUNK + f"st.global.v4.b32 [%rd3], {_V4};\n st.global.u32 [%rd3+4], %r1;\n bar.sync 0;\n"
                                f" ld.global.v4.b32 {_V4}, [%rd4];\n ld.global.u32 %r7, [%rd3+8];\n bar.sync 0;\n"
                                f" st.global.v4.b32 [%rd4], {_V4};\n bar.sync 0;\n st.global.v2.b32 [%rd3+8], {{%r7, %r1}};",
}


def _launch_outcome(body: str, ctas: int):
    buffer = np.arange(64 * 4, dtype=np.uint32)
    try:
        Module(kernel_text(_TILE + body + "\n    ret;")).launch("k", ctas, 64, [buffer])
    except EmulatorError as err:
        return type(err), str(err), err.ptx_line
    return buffer


@pytest.mark.parametrize("case", _FAST_PATH_CASES)
def test_fast_paths_report_what_the_byte_paths_report(case, monkeypatch):
    from phobos.run.emulator import memory
    ctas = 2 if case.startswith("global") else 1
    fast = _launch_outcome(_FAST_PATH_CASES[case], ctas)
    for cls, name in ((memory.RaceDetector, "_load_by_lanes"), (memory.RaceDetector, "_write_by_lanes"),
                      (memory.GlobalRaceDetector, "_read_by_lanes"), (memory.GlobalRaceDetector, "_write_by_lanes")):
        monkeypatch.setattr(cls, name, lambda *args: False)
    monkeypatch.setattr(memory.GlobalSpace, "_inside_one", lambda *args: None)

    def add_issued(races, flat, nbytes):  # (whether two lanes copy into one byte, by sorting)
        apart = memory.lanes_apart(flat, nbytes)
        races.add_pending(flat, nbytes, 1, apart)
        return apart
    monkeypatch.setattr(memory.RaceDetector, "add_issued", add_issued)
    slow = _launch_outcome(_FAST_PATH_CASES[case], ctas)
    if case.startswith("no race"):
        np.testing.assert_array_equal(fast, slow)
    else:
        assert isinstance(fast, tuple) and fast == slow


def test_launches_that_reuse_the_shadow_allocations_report_their_own_races_alone():
    # each case on its own, then all of them again in another order: the detectors of a launch take the
    # shadow allocations an earlier one left, refilled, and must find exactly what they found fresh
    cases = ["ldmatrix of a chunk another thread wrote", "no race with ldmatrix", "global read of what another CTA wrote",
             "no race in global memory", "global writes of one chunk in one instruction", "no race after copies of two instructions"]
    alone = {}
    for case in cases:
        alone[case] = _launch_outcome(_FAST_PATH_CASES[case], 2 if case.startswith("global") else 1)
    for case in reversed(cases + cases):
        again = _launch_outcome(_FAST_PATH_CASES[case], 2 if case.startswith("global") else 1)
        if case.startswith("no race"):
            np.testing.assert_array_equal(again, alone[case])
        else:
            assert isinstance(again, tuple) and again == alone[case]


def test_a_shadow_allocation_is_lent_again_only_once_nothing_refers_to_it():
    import weakref

    from phobos.run.emulator.memory import shadow_arrays
    first = shadow_arrays(5000, 7, 0)
    first[0][:10], first[1][:10] = 1, 2
    block = weakref.ref(first[0].base)
    assert shadow_arrays(5000, 7, 0)[0].base is not block()  # `first` is alive: another allocation
    view = first[1][4:8]
    del first
    assert shadow_arrays(5000, 7, 0)[0].base is not block()  # a view of it is alive
    del view
    again = shadow_arrays(5000, 7, 0)
    assert block() is not None and again[0].base is block()  # kept, and lent again refilled, as new
    assert (again[0] == 7).all() and (again[1] == 0).all()
