# The emulator's batches (machine.fusion_table): mma.sync (and wgmma) run together - those side by side, accumulator
# chains as one product along their K, the register instructions between them first -, and so do conversions of
# f32 pairs; batches give what running every instruction alone gives, bit for bit; and a batch stops where running
# it so would differ.
from __future__ import annotations

import re

import numpy as np
import pytest

from phobos.run.emulator import machine
from phobos.run.emulator.errors import AsyncCopyHazard

from . import tensor_core_support as tc

HEAD = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out) {
    .reg .b32 %r<200>;
    .reg .b64 %rd<8>;
    mov.u32 %r1, %tid.x;
"""


def _operand(register: int, salt: int) -> str:
    """A register of two f16 values below 4 made of the lane's index (`salt` varies them)."""
    return (f"    mad.lo.u32 %r{register}, %r1, {0x00010003 * (2 * salt + 1)}, {salt * 0x01230457};\n"
            f"    and.b32 %r{register}, %r{register}, 0x43FF43FF;\n")


def _store(registers: list[int]) -> str:
    lines = ["    ld.param.u64 %rd1, [out];", "    mul.wide.u32 %rd2, %r1, 4;", "    add.u64 %rd1, %rd1, %rd2;"]
    for i, r in enumerate(registers):
        lines.append(f"    st.global.b32 [%rd1+{128 * i}], %r{r};")
    return "\n".join(lines) + "\n    ret;\n}\n"


def _mma(d: int, a: int, b: int, c: int, accumulator: str = "f32") -> str:
    if accumulator == "f16":
        return (f"    mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {{%r{d}, %r{d + 1}}}, "
                f"{{%r{a}, %r{a + 1}, %r{a + 2}, %r{a + 3}}}, {{%r{b}, %r{b + 1}}}, {{%r{c}, %r{c + 1}}};\n")
    return (f"    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%r{d}, %r{d + 1}, %r{d + 2}, %r{d + 3}}}, "
            f"{{%r{a}, %r{a + 1}, %r{a + 2}, %r{a + 3}}}, {{%r{b}, %r{b + 1}}}, "
            f"{{%r{c}, %r{c + 1}, %r{c + 2}, %r{c + 3}}};\n")


def _kernel(accumulator: str = "f32", reader: str = "", other_a: bool = False) -> tuple[str, list[int]]:
    """Two accumulators (at %r100 and %r120), each zeroed by movs between the products, then three
    steps of K each: a chain of four products an accumulator, the two chains reading one A (a family)
    unless `other_a`, where the second reads another at its third step; `reader` goes after the
    second step."""
    text = HEAD + "".join(_operand(r, r) for r in range(10, 90))
    width = 2 if accumulator == "f16" else 4
    for acc in (100, 120):
        text += "".join(f"    mov.b32 %r{acc + i}, 0;\n" for i in range(width))
        text += _mma(acc, 10, 14, acc, accumulator)
    for step in range(1, 4):
        for n, acc in enumerate((100, 120)):
            a = 10 + 16 * step + (8 if other_a and n and step == 2 else 0)
            text += _mma(acc, a, 14 + 16 * step + 2 * n, acc, accumulator)
        if step == 2:
            text += reader
    outputs = [acc + i for acc in (100, 120) for i in range(width)] + ([190] if reader else [])
    return text + _store(outputs), outputs


def _run(text: str, outputs: list[int], fused: bool) -> np.ndarray:
    module = machine.Module(text, "fusion.ptx")
    kernel = module.kernel("k")
    if not fused:
        kernel.fusion = [1] * len(kernel.fusion)
    out = np.zeros(32 * len(outputs), np.uint32)
    kernel.launch(1, 32, [out])
    return out


def _batches(text: str) -> list[int]:
    return [n for n in machine.Module(text, "fusion.ptx").kernel("k").fusion if n > 1]


def test_chains_and_the_register_instructions_between_them_run_as_one_batch():
    text, outputs = _kernel()
    assert max(_batches(text)) == 8 + 4  # the eight products and the movs that zero the second accumulator
    np.testing.assert_array_equal(_run(text, outputs, True), _run(text, outputs, False))


def test_chains_that_read_one_a_only_at_some_steps_are_not_one_family():
    text, outputs = _kernel(other_a=True)
    assert max(_batches(text)) == 8 + 4
    fused = _run(text, outputs, True)
    np.testing.assert_array_equal(fused, _run(text, outputs, False))
    assert not np.array_equal(fused, _run(*_kernel(), True))  # the other A changed the second's result


@pytest.mark.parametrize("reader", ["    mov.b32 %r190, %r100;\n", "    add.f32 %r100, %r100, %r100;\n"])
def test_a_register_instruction_that_reads_or_writes_a_product_s_result_ends_the_batch(reader):
    text, outputs = _kernel(reader=reader)
    np.testing.assert_array_equal(_run(text, outputs, True), _run(text, outputs, False))
    assert max(_batches(text)) == 2 + 4 + 2 + 2  # up to the second step: the reader comes after it


def test_f16_accumulators_are_not_chained_as_they_are_rounded_between_products():
    text, outputs = _kernel("f16")
    np.testing.assert_array_equal(_run(text, outputs, True), _run(text, outputs, False))
    module = machine.Module(text, "fusion.ptx")
    mmas = [op for op in module.kernel("k").program.ops if op.text.startswith("mma")]
    assert all(not op.run.fusable.chain for op in mmas)
    assert all(op.run.fusable.chain for op in machine.Module(_kernel()[0], "f.ptx").kernel("k").program.ops
               if op.text.startswith("mma"))


# ------------------------------------------------------------------ wgmma chains

def _wgmma_run(case, fused: bool) -> np.ndarray:
    kernel = machine.Module(case.text, "wgmma.ptx").kernel("wgmma_test")
    if not fused:
        kernel.fusion = [1] * len(kernel.fusion)
    out = case.output()
    kernel.launch(1, 128, case.arguments(out), shared_bytes=case.shared_bytes)
    return out


def _wgmma_case() -> tc.WgmmaCase:
    """One warpgroup: a chain of four bf16 wgmma m64n64k16 (K 64), the descriptors stepped between them."""
    return tc.wgmma_case(np.random.default_rng(5), "bf16", ("K", 128), ("MN", 128), 64, 64, stepped=True)


def test_a_wgmma_chain_and_its_descriptor_steps_run_as_one_batch():
    case = _wgmma_case()
    assert max(machine.Module(case.text, "w.ptx").kernel("wgmma_test").fusion) == 4 + 6  # four wgmma, six adds
    fused = _wgmma_run(case, True)
    np.testing.assert_array_equal(fused.view(np.uint32), _wgmma_run(case, False).view(np.uint32))
    np.testing.assert_array_equal(tc.unpack_wgmma(fused, case.n).view(np.uint32), case.expected.view(np.uint32))


def test_a_wgmma_chain_restarted_by_a_false_scale_d_goes_step_by_step():
    """The third product's scale-d is a predicate, false at run time: D = A B from there on."""
    case = _wgmma_case()
    third = [found.start() for found in re.finditer(r"wgmma\.mma_async", case.text)][2]
    case.text = case.text[:third] + case.text[third:].replace("%da2, %db2, 1,", "%da2, %db2, %p,", 1)
    case.text = case.text.replace("    cvt.u64.u32 %off, %s;", "    setp.ne.u32 %p, %t, %t;\n    cvt.u64.u32 %off, %s;")
    assert max(machine.Module(case.text, "w.ptx").kernel("wgmma_test").fusion) == 4 + 6
    restarted = _wgmma_run(case, True)
    np.testing.assert_array_equal(restarted.view(np.uint32), _wgmma_run(case, False).view(np.uint32))
    assert not np.array_equal(restarted, _wgmma_run(_wgmma_case(), True))  # the restart changed D


def test_a_register_instruction_touching_a_wgmma_register_is_not_run_ahead_of_the_chain():
    """A mov into the accumulator between two wgmma of a chain is an error (the first is in flight):
    reported at the mov, fused or not - the batch stops before it."""
    case = _wgmma_case()
    second = [found.start() for found in re.finditer(r"wgmma\.mma_async", case.text)][1]
    case.text = case.text[:second] + "mov.b32 %acc3, 0;\n    " + case.text[second:]
    kernel = machine.Module(case.text, "w.ptx").kernel("wgmma_test")
    mov = next(op.index for op in kernel.program.ops if op.text.startswith("mov.b32 %acc3"))
    assert all(start + length <= mov for start, length in enumerate(kernel.fusion) if start < mov and length > 1)
    for fused in (True, False):
        with pytest.raises(AsyncCopyHazard, match="register of a wgmma in flight") as caught:
            _wgmma_run(case, fused)
        assert "mov.b32 %acc3" in str(caught.value)


def _pair_conversions(reader: bool = False) -> tuple[str, list[int]]:
    """Eight cvt.rn.f16x2.f32 of operand registers (as f32 bits, of many exponents; a mov between two),
    after an mma whose batch takes one more conversion (a register instruction there); `reader`: the
    fifth converts the first's result."""
    text = HEAD + "".join(_operand(r, r) for r in range(10, 40)) + _mma(100, 10, 14, 16)
    text += "    cvt.rn.f16x2.f32 %r190, %r20, %r21;\n" + _mma(120, 10, 14, 16)
    for i in range(8):
        a = 150 if reader and i == 4 else 22 + 2 * i
        text += f"    cvt.rn.f16x2.f32 %r{150 + i}, %r{a}, %r{23 + 2 * i};\n"
        text += "    mov.b32 %r160, %r39;\n" if i == 2 else ""
    outputs = [100, 103, 120, 190, 160] + list(range(150, 158))
    return text + _store(outputs), outputs


@pytest.mark.parametrize("reader", [False, True])
def test_conversions_of_f32_pairs_run_as_one_batch(reader):
    text, outputs = _pair_conversions(reader)
    # (a batch from each instruction on: the products with the conversion between them, then the conversions
    # with the mov, up to the one that reads an earlier one's result)
    assert _batches(text)[:2] == [2 + 1, (4 if reader else 8) + 1]
    np.testing.assert_array_equal(_run(text, outputs, True), _run(text, outputs, False))
