# The register allocator on hand-written instruction lists: liveness across
# branches and loops, numbering by linear scan per class, peak pressure, and
# the property that matters - two registers of one class that are live at the
# same time never share a number.
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from phobos.ptx.emit import Imm, Instr, Label, Sym, VReg
from phobos.ptx.regalloc import allocate, live_intervals, liveness, number_in_order, peak_pressure
from phobos.types import DType


class Regs:
    """Fresh virtual registers, numbered in creation order."""

    def __init__(self):
        self.count = 0

    def __call__(self, cls: str = "b32") -> VReg:
        self.count += 1
        return VReg(cls, self.count)


def mov(dst: VReg, value: int = 1) -> Instr:
    return Instr("mov.b32", [dst, Imm(value, DType.I32)], ndefs=1)


def add(dst: VReg, a: VReg, b) -> Instr:
    return Instr("add.s32", [dst, a, b], ndefs=1)


def store(r: VReg) -> Instr:
    return Instr("st.global.b32", [Sym("[x]"), r])


def overlapping_share_a_number(items) -> list[tuple[VReg, VReg]]:
    intervals = live_intervals(items)
    regs = sorted(intervals, key=lambda r: r.id)
    return [(a, b) for i, a in enumerate(regs) for b in regs[i + 1:]
            if a.cls == b.cls and a.number == b.number
            and intervals[a][0] <= intervals[b][1] and intervals[b][0] <= intervals[a][1]]


def test_straight_line_code_reuses_registers_once_they_die():
    r = Regs()
    a, b, c, d = r(), r(), r(), r()
    items = [mov(a), add(b, a, Imm(1, DType.I32)), add(c, b, Imm(1, DType.I32)), add(d, c, Imm(1, DType.I32)),
             store(d)]
    alloc = allocate(items)
    assert alloc.counts == {"b32": 3}  # %r<3>: %r1 and %r2; each value dies where the next is written
    assert sorted({v.number for v in (a, b, c, d)}) == [1, 2]
    assert alloc.peak_pressure == 2
    assert not overlapping_share_a_number(items)


def test_values_live_together_get_distinct_numbers():
    r = Regs()
    regs = [r() for _ in range(5)]
    items = [mov(v, i) for i, v in enumerate(regs)] + [store(v) for v in regs]
    alloc = allocate(items)
    assert alloc.counts == {"b32": 6} and sorted(v.number for v in regs) == [1, 2, 3, 4, 5]
    assert alloc.peak_pressure == 5


def test_classes_are_numbered_separately_and_weighed_in_32_bit_registers():
    r = Regs()
    x, wide, flag = r("b32"), r("b64"), r("pred")
    items = [mov(x), Instr("cvt.s64.s32", [wide, x], ndefs=1), Instr("setp.eq.s32", [flag, x, Imm(0, DType.I32)], ndefs=1),
             Instr("st.global.b64", [Sym("[x]"), wide], guard=flag)]
    alloc = allocate(items)
    assert alloc.counts == {"b32": 2, "b64": 2, "pred": 2}
    assert (x.number, wide.number, flag.number) == (1, 1, 1)
    assert alloc.peak_pressure == 3  # x (1) and wide (2) at the cvt; predicates weigh nothing


def test_a_value_live_around_a_loop_keeps_its_register_for_the_whole_loop():
    r = Regs()
    acc, i, temp, later = r(), r(), r(), r()
    p = r("pred")
    items = [
        mov(acc, 0), mov(i, 0),
        Label("loop"),
        add(temp, i, Imm(3, DType.I32)),  # a temporary of each iteration
        add(acc, acc, temp),  # acc is read here and again in the next iteration
        add(i, i, Imm(1, DType.I32)),
        Instr("setp.lt.s32", [p, i, Imm(10, DType.I32)], ndefs=1),
        Instr("bra.uni", [Sym("loop")], guard=p),
        mov(later, 7),  # defined after the loop, while acc is still live
        add(later, later, acc), store(later),
    ]
    live = liveness(items)
    loop_block = 1
    assert acc in live.live_in[loop_block] and acc in live.live_out[loop_block]
    intervals = live_intervals(items, live)
    assert intervals[acc] == (0, 9)  # from its first write, across the back edge (7), to its last read
    assert intervals[temp] == (3, 4)  # written and read within one iteration
    allocate(items)
    assert temp.number not in (acc.number, i.number)
    assert later.number != acc.number
    assert not overlapping_share_a_number(items)


def test_a_guarded_write_keeps_the_old_value_live():
    r = Regs()
    v, p = r(), r("pred")
    other = r()
    items = [mov(v, 1), Instr("setp.ne.s32", [p, v, Imm(0, DType.I32)], ndefs=1), mov(other, 5),
             Instr("mov.b32", [v, Imm(2, DType.I32)], ndefs=1, guard=p),  # where p is false, v keeps 1
             store(v), store(other)]
    allocate(items)
    assert v.number != other.number  # v's first value is live across the guarded write
    assert not overlapping_share_a_number(items)


def test_peak_pressure_counts_what_is_live_at_one_instruction():
    r = Regs()
    a, b, c = r(), r("f64"), r()
    items = [mov(a), Instr("mov.f64", [b, Imm(1.0, DType.F64)], ndefs=1), mov(c), store(a), store(c),
             Instr("st.global.f64", [Sym("[x]"), b])]
    assert peak_pressure(items, liveness(items)) == 4  # a, c and the two halves of b


def test_number_in_order_gives_every_register_its_own_number():
    r = Regs()
    a, b, c = r(), r(), r("f32")
    items = [mov(a), add(b, a, a), Instr("cvt.rn.f32.s32", [c, b], ndefs=1)]
    assert number_in_order(items) == {"b32": 3, "f32": 2}
    assert (a.number, b.number, c.number) == (1, 2, 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=60),
       st.integers(0, 3))
def test_registers_live_at_once_never_share_a_number(program, loops):
    """Random code of movs, adds over earlier values, and backward branches: the allocation is sound."""
    r = Regs()
    defined: list[VReg] = []
    items = []
    for kind, x, y in program:
        dst = r("b32" if kind else "f32")
        same = [v for v in defined if v.cls == dst.cls]
        if same and kind != 2:
            items.append(Instr("add", [dst, same[x % len(same)], same[y % len(same)]], ndefs=1))
        else:
            items.append(Instr("mov", [dst, Imm(x, DType.I32)], ndefs=1))
        defined.append(dst)
    labels = sorted({(x * 7 + y) % len(items) for _, x, y in program[:loops]})
    for n, at in enumerate(reversed(labels)):
        p = r("pred")
        items.insert(at, Label(f"L{n}"))
        items.append(Instr("setp", [p, defined[0], defined[0]], ndefs=1))
        items.append(Instr("bra", [Sym(f"L{n}")], guard=p))
    items += [Instr("st", [Sym("[x]"), v]) for v in defined[-3:]]
    alloc = allocate(items)
    assert not overlapping_share_a_number(items)
    for cls in ("b32", "f32"):
        numbers = [v.number for v in defined if v.cls == cls]
        assert alloc.counts.get(cls, 0) == (max(numbers) + 1 if numbers else 0)  # %r<N> declares 0..N-1


def test_registers_an_instruction_holds_stay_live_to_it_and_unprinted():
    """A register a later instruction holds (wgmma.wait_group: the A fragments of a wgmma in flight) is
    live until there, so nothing written in between takes its number; the instruction prints without it."""
    r = Regs()
    fragment, temp, other = r(), r(), r()
    wait = Instr("wgmma.wait_group.sync.aligned", [Imm(0, DType.I32)], ndefs=0, holds=(fragment,))
    items = [mov(fragment), store(fragment), mov(temp), add(other, temp, Imm(1, DType.I32)), store(other), wait]
    allocate(items)
    assert fragment.number not in (temp.number, other.number)
    assert wait.text() == "wgmma.wait_group.sync.aligned 0;"
    free = [mov(fragment), store(fragment), mov(temp), add(other, temp, Imm(1, DType.I32)), store(other),
            Instr("wgmma.wait_group.sync.aligned", [Imm(0, DType.I32)], ndefs=0)]
    allocate(free)
    assert fragment.number in (temp.number, other.number)  # without the hold the number is reused
