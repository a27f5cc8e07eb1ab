# The optimisation passes on IR built by hand: what each pass does, and what it
# must leave alone.  Every test runs the IR verifier after the pass.
from __future__ import annotations

import math

import pytest

from phobos.middle.ir import Block, Builder, Function, Op, Value, verify, walk
from phobos.middle.passes.cse import cse
from phobos.middle.passes.dce import dce
from phobos.middle.passes.fold import fold
from phobos.middle.passes.fuse_dot import fuse_dot
from phobos.middle.passes.licm import licm
from phobos.types import DType, ScalarType, TensorType, TileType

I32 = ScalarType(DType.I32)
F32 = ScalarType(DType.F32)
BOOL = ScalarType(DType.BOOL)
TENSOR = TensorType(DType.F32, ("N",))


class Kernel:
    """A function under construction, with a builder at the end of its body."""

    def __init__(self):
        self.func = Function("k", Block())
        self.b = Builder(self.func)

    def param(self, t=I32, name="n") -> Value:
        return self.b.value("param", [], t, index=0, name=name)

    def const(self, value, t=I32) -> Value:
        return self.b.const(value, t)

    def out(self, value: Value, tensor: Value | None = None) -> Op:
        """A store of `value`, so that it is used (and the function has an effect)."""
        tensor = tensor or self.param(TENSOR, "out")
        return self.b.op("store", [tensor, self.const(0), value], [], {"sizes": [None]})

    def loop(self, lo: Value, hi: Value, carried: list[Value] = ()) -> tuple[Op, Builder, list[Value]]:
        """A `for` over [lo, hi) carrying `carried`; returns it, a builder for its body and the body's arguments."""
        body = Block()
        op = self.b.op("for", [lo, hi, *carried], [v.type for v in carried], {"step": 1}, [body])
        inner = Builder(self.func, body)
        args = [inner.block_arg(body, I32, "i")] + [inner.block_arg(body, v.type) for v in carried]
        return op, inner, args

    def verified(self) -> Function:
        verify(self.func)
        return self.func


def ops_of(func: Function, opcode: str) -> list[Op]:
    return [op for op in walk(func.body) if op.opcode == opcode]


def stored(func: Function) -> list[Value]:
    """What each store stores, in order."""
    return [op.operands[-1] for op in ops_of(func, "store")]


# ------------------------------------------------------------------ fold
@pytest.mark.parametrize("opcode, operands, t, want", [
    ("add", [2, 3], I32, 5),
    ("add", [2147483647, 1], I32, -2147483648),  # i32 wraps
    ("div", [-7, 2], I32, -3),  # C division
    ("rem", [-7, 2], I32, -1),
    ("add", [16777216.0, 1.0], F32, 16777216.0),  # f32 rounds once per operation
    ("max", [math.nan, 2.0], F32, 2.0),
])
def test_fold_computes_constants_as_the_gpu_does(opcode, operands, t, want):
    k = Kernel()
    v = k.b.value(opcode, [k.const(x, t) for x in operands], t)
    k.out(v)
    fold(k.verified())
    assert v.owner.opcode == "const" and v.owner.attrs["value"] == want and v.owner.operands == []
    verify(k.func)


def test_fold_saturates_float_to_int_conversions():
    k = Kernel()
    v = k.b.value("cast", [k.const(3e9, F32)], I32)
    k.out(v)
    fold(k.verified())
    assert v.owner.opcode == "const" and v.owner.attrs["value"] == 2147483647


@pytest.mark.parametrize("opcode, operands, value", [
    ("div", [7, 0], 7),  # a zero integer divisor counts as 1, as the language defines it
    ("rem", [5, 0], 0),
])
def test_fold_integer_division_by_zero(opcode, operands, value):
    k = Kernel()
    v = k.b.value(opcode, [k.const(x) for x in operands], I32)
    k.out(v)
    fold(k.verified())
    assert v.owner.opcode == "const" and v.owner.attrs["value"] == value


def test_fold_leaves_inexact_math_and_fma():
    k = Kernel()
    e = k.b.value("exp", [k.const(1.0, F32)], F32)  # the GPU's exp is an approximation
    f = k.b.value("fma", [k.const(0.1, F32), k.const(3.0, F32), k.const(1.0, F32)], F32)  # one rounding
    k.out(e)
    k.out(f)
    fold(k.verified())
    assert e.owner.opcode == "exp" and f.owner.opcode == "fma"


def test_fold_never_folds_ops_with_effects():
    k = Kernel()
    tensor = k.param(TENSOR, "x")
    loaded = k.b.value("load", [tensor, k.const(0)], F32, sizes=[None])
    k.out(loaded)
    fold(k.verified())
    assert [op.opcode for op in k.func.body.ops].count("load") == 1
    assert stored(k.func) == [loaded]


@pytest.mark.parametrize("opcode, right, t, simplified", [
    ("add", 0, I32, True),
    ("mul", 1, I32, True),
    ("div", 1, I32, True),
    ("sub", 0.0, F32, False),  # x - 0.0 is x but for a NaN's bits: the GPU's is the canonical NaN
    ("mul", 1.0, F32, False),  # likewise
    ("add", 0.0, F32, False),  # -0.0 + 0.0 is +0.0
    ("sub", -0.0, F32, False),  # -0.0 - -0.0 is +0.0
    ("mul", 0.0, F32, False),  # NaN * 0 is NaN, -1 * 0 is -0
])
def test_fold_identities(opcode, right, t, simplified):
    k = Kernel()
    x = k.param(t)
    v = k.b.value(opcode, [x, k.const(right, t)], t)
    k.out(v)
    fold(k.verified())
    verify(k.func)
    assert (stored(k.func) == [x]) is simplified
    assert v.owner.opcode == opcode  # the op itself stays for DCE


def test_fold_integer_multiply_by_zero_is_zero():
    k = Kernel()
    zero = k.const(0)
    k.out(k.b.value("mul", [k.param(), zero], I32))
    fold(k.verified())
    assert stored(k.func) == [zero]


def test_fold_takes_the_branch_of_a_constant_condition():
    k = Kernel()
    x = k.param()
    then, orelse = Block(), Block()
    op = k.b.op("if", [k.const(False, BOOL)], [I32], {}, [then, orelse])
    tb, eb = Builder(k.func, then), Builder(k.func, orelse)
    tb.op("yield", [tb.value("add", [x, x], I32)], [])
    doubled = eb.value("mul", [x, x], I32)
    eb.op("yield", [doubled], [])
    k.out(op.result)
    fold(k.verified())
    verify(k.func)
    assert not ops_of(k.func, "if") and not ops_of(k.func, "add")
    assert stored(k.func) == [doubled] and doubled.owner in k.func.body.ops


# ------------------------------------------------------------------ cse
def test_cse_merges_equal_pure_ops_and_commuted_operands():
    k = Kernel()
    a, b = k.param(name="a"), k.param(name="b")
    first = k.b.value("add", [a, b], I32)
    again = k.b.value("add", [a, b], I32)
    swapped = k.b.value("add", [b, a], I32)
    diff1 = k.b.value("sub", [a, b], I32)
    diff2 = k.b.value("sub", [b, a], I32)  # not commutative
    for v in (first, again, swapped, diff1, diff2):
        k.out(v)
    cse(k.verified())
    verify(k.func)
    assert stored(k.func) == [first, first, first, diff1, diff2]


def test_cse_keeps_ops_that_differ_in_attributes_or_type():
    k = Kernel()
    a, b = k.param(name="a"), k.param(name="b")
    lt = k.b.value("cmp", [a, b], BOOL, pred="lt")
    le = k.b.value("cmp", [a, b], BOOL, pred="le")
    plus_zero, minus_zero = k.const(0.0, F32), k.const(-0.0, F32)
    wide = k.b.value("cast", [a], ScalarType(DType.I64))
    unsigned = k.b.value("cast", [a], ScalarType(DType.U32))
    values = [lt, le, plus_zero, minus_zero, wide, unsigned]
    for v in values:
        k.out(v)
    cse(k.verified())
    assert stored(k.func) == values


def test_cse_does_not_merge_ops_with_effects():
    k = Kernel()
    x = k.param(TENSOR, "x")
    i = k.param(name="i")
    first = k.b.value("load", [x, i], F32, sizes=[None])
    k.b.op("store", [x, i, k.const(1.0, F32)], [], {"sizes": [None]})
    second = k.b.value("load", [x, i], F32, sizes=[None])  # reads what the store wrote
    k.out(first)
    k.out(second)
    cse(k.verified())
    assert stored(k.func)[-2:] == [first, second]


def test_cse_reuses_only_what_dominates():
    k = Kernel()
    a, c, x, zero = k.param(name="a"), k.param(BOOL, "c"), k.param(TENSOR, "x"), k.const(0)
    outer = k.b.value("neg", [a], I32)
    k.out(outer, x)
    then, orelse = Block(), Block()
    k.b.op("if", [c], [], {}, [then, orelse])
    tb, eb = Builder(k.func, then), Builder(k.func, orelse)
    inner_same = tb.value("neg", [a], I32)  # `outer` dominates it
    only_then = tb.value("abs", [a], I32)
    for v in (inner_same, only_then):
        tb.op("store", [x, zero, v], [], {"sizes": [None]})
    tb.op("yield", [], [])
    only_else = eb.value("abs", [a], I32)  # `only_then` does not dominate it
    eb.op("store", [x, zero, only_else], [], {"sizes": [None]})
    eb.op("yield", [], [])
    after = k.b.value("abs", [a], I32)  # neither branch dominates it
    k.out(after, x)
    cse(k.verified())
    verify(k.func)
    assert stored(k.func) == [outer, outer, only_then, only_else, after]


# ------------------------------------------------------------------ dce
def test_dce_removes_unused_pure_chains_and_keeps_effects():
    k = Kernel()
    x = k.param(TENSOR, "x")
    a = k.param(name="a")
    dead1 = k.b.value("add", [a, a], I32)
    k.b.value("mul", [dead1, dead1], I32)  # unused; makes dead1 dead only once it is gone
    unused_load = k.b.value("load", [x, a], F32, sizes=[None])  # a load is not pure: kept
    k.out(k.b.value("neg", [a], I32))
    dce(k.verified())
    verify(k.func)
    opcodes = [op.opcode for op in k.func.body.ops]
    assert "add" not in opcodes and "mul" not in opcodes
    assert unused_load.owner in k.func.body.ops and "neg" in opcodes and "store" in opcodes


def test_dce_drops_loop_values_nothing_reads():
    k = Kernel()
    lo, hi, zero = k.const(0), k.param(), k.const(0)
    loop, inner, (i, live, passed, unread) = k.loop(lo, hi, [zero, zero, zero])
    # `passed` goes round unchanged, `unread` is replaced each time and read by nobody
    inner.op("yield", [inner.value("add", [live, i], I32), passed, inner.value("mul", [i, i], I32)], [])
    k.out(loop.results[0])
    dce(k.verified())
    verify(k.func)
    assert len(loop.results) == 1 and len(loop.regions[0].args) == 2 and len(loop.operands) == 3
    assert not ops_of(k.func, "mul") and ops_of(k.func, "add")


def test_dce_removes_empty_loops_and_unread_branch_results():
    k = Kernel()
    c, hi, one, two = k.param(BOOL, "c"), k.param(name="hi"), k.const(1), k.const(2)
    loop, inner, (i,) = k.loop(k.const(0), hi)
    inner.value("add", [i, i], I32)  # computed, never used
    inner.op("yield", [], [])
    then, orelse = Block(), Block()
    branch = k.b.op("if", [c], [I32, I32], {}, [then, orelse])
    tb, eb = Builder(k.func, then), Builder(k.func, orelse)
    tb.op("yield", [tb.value("neg", [one], I32), two], [])
    eb.op("yield", [one, eb.value("abs", [two], I32)], [])
    k.out(branch.results[1])
    dce(k.verified())
    verify(k.func)
    assert loop not in k.func.body.ops
    assert len(branch.results) == 1 and not ops_of(k.func, "neg") and ops_of(k.func, "abs")


# ------------------------------------------------------------------ licm
def test_licm_hoists_invariant_chains_in_order():
    k = Kernel()
    a, hi, x = k.param(name="a"), k.param(name="hi"), k.param(TENSOR, "x")
    loop, inner, (i,) = k.loop(k.const(0), hi)
    twice = inner.value("add", [a, a], I32)
    four = inner.value("add", [twice, twice], I32)  # invariant through `twice`
    moving = inner.value("add", [four, i], I32)  # depends on the loop variable
    inner.op("store", [x, i, moving], [], {"sizes": [None]})
    inner.op("yield", [], [])
    licm(k.verified())
    verify(k.func)
    top = k.func.body.ops
    assert top.index(twice.owner) < top.index(four.owner) < top.index(loop)
    assert [op.opcode for op in loop.regions[0].ops] == ["add", "store", "yield"]


def test_licm_does_not_hoist_a_load_from_a_loop_that_stores_to_its_tensor():
    k = Kernel()
    x, hi, zero, one = k.param(TENSOR, "x"), k.param(name="hi"), k.const(0), k.const(1.0, F32)
    loop, inner, (i,) = k.loop(zero, hi)
    first = inner.value("load", [x, zero], F32, sizes=[None])  # invariant operands, but x[0] changes
    inner.op("store", [x, zero, inner.value("add", [first, one], F32)], [], {"sizes": [None]})
    inner.op("yield", [], [])
    licm(k.verified())
    verify(k.func)
    assert first.owner in loop.regions[0].ops and first.owner not in k.func.body.ops


def test_licm_leaves_ops_inside_a_branch_of_the_loop():
    k = Kernel()
    a, c, hi, x = k.param(name="a"), k.param(BOOL, "c"), k.param(name="hi"), k.param(TENSOR, "x")
    loop, inner, (i,) = k.loop(k.const(0), hi)
    then, orelse = Block(), Block()
    inner.op("if", [c], [], {}, [then, orelse])
    tb = Builder(k.func, then)
    rare = tb.value("mul", [a, a], I32)  # invariant, but on a path that may seldom run
    tb.op("store", [x, i, rare], [], {"sizes": [None]})
    tb.op("yield", [], [])
    Builder(k.func, orelse).op("yield", [], [])
    inner.op("yield", [], [])
    licm(k.verified())
    verify(k.func)
    assert rare.owner in then.ops


def test_licm_lifts_out_of_nested_loops():
    k = Kernel()
    a, hi, x, zero = k.param(name="a"), k.param(name="hi"), k.param(TENSOR, "x"), k.const(0)
    outer, ob, (i,) = k.loop(zero, hi)
    body = Block()
    inner_loop = ob.op("for", [zero, hi], [], {"step": 1}, [body])
    ib = Builder(k.func, body)
    j = ib.block_arg(body, I32, "j")
    invariant = ib.value("mul", [a, a], I32)
    only_outer = ib.value("mul", [i, i], I32)  # varies with the outer loop only
    ib.op("store", [x, j, ib.value("add", [invariant, only_outer], I32)], [], {"sizes": [None]})
    ib.op("yield", [], [])
    ob.op("yield", [], [])
    licm(k.verified())
    verify(k.func)
    assert invariant.owner in k.func.body.ops
    assert only_outer.owner in outer.regions[0].ops and only_outer.owner not in body.ops
    assert inner_loop in outer.regions[0].ops


# ------------------------------------------------------------------ fuse-dot
def dot_kernel():
    k = Kernel()
    a_t, b_t, c_t = TileType(DType.F32, (16, 8)), TileType(DType.F32, (8, 16)), TileType(DType.F32, (16, 16))
    x = k.param(TensorType(DType.F32, ("N", "N")), "x")
    zero = k.const(0)
    a = k.b.value("load", [x, zero, zero], a_t, sizes=[16, 8])
    b = k.b.value("load", [x, zero, zero], b_t, sizes=[8, 16])
    acc = k.b.value("load", [x, zero, zero], c_t, sizes=[16, 16])
    return k, x, a, b, acc, c_t


def test_fuse_dot_accumulates_into_the_addend():
    k, x, a, b, acc, c_t = dot_kernel()
    product = k.b.value("dot", [a, b], c_t)
    total = k.b.value("add", [acc, product], c_t)
    k.b.op("store", [x, k.const(0), k.const(0), total], [], {"sizes": [16, 16]})
    fuse_dot(k.verified())
    verify(k.func)
    assert product.owner not in k.func.body.ops
    assert total.owner.opcode == "dot" and total.owner.operands == [a, b, acc]


def test_fuse_dot_marks_an_8_bit_product_to_promote():
    """An 8-bit product's sums start from zero and it is added to the accumulator in f32 (DType.dot_promotes)."""
    k = Kernel()
    f8 = lambda shape: TileType(DType.F8E4M3, shape)  # noqa: E731
    x = k.param(TensorType(DType.F8E4M3, ("N", "N")), "x")
    out = k.param(TensorType(DType.F32, ("N", "N")), "out")
    zero = k.const(0)
    a = k.b.value("load", [x, zero, zero], f8((16, 32)), sizes=[16, 32])
    b = k.b.value("load", [x, zero, zero], f8((32, 16)), sizes=[32, 16])
    acc = k.b.value("load", [out, zero, zero], TileType(DType.F32, (16, 16)), sizes=[16, 16])
    total = k.b.value("add", [acc, k.b.value("dot", [a, b], acc.type)], acc.type)
    k.b.op("store", [out, zero, zero, total], [], {"sizes": [16, 16]})
    fuse_dot(k.verified())
    assert total.owner.opcode == "dot" and total.owner.operands == [a, b, acc] and total.owner.attrs["promote"]


def test_fuse_dot_leaves_a_dot_with_other_uses():
    k, x, a, b, acc, c_t = dot_kernel()
    product = k.b.value("dot", [a, b], c_t)
    total = k.b.value("add", [acc, product], c_t)
    for v in (total, product):  # the product is also stored on its own
        k.b.op("store", [x, k.const(0), k.const(0), v], [], {"sizes": [16, 16]})
    fuse_dot(k.verified())
    assert total.owner.opcode == "add" and product.owner.operands == [a, b]


def test_fuse_dot_leaves_a_dot_in_another_block():
    k, x, a, b, acc, c_t = dot_kernel()
    product = k.b.value("dot", [a, b], c_t)
    zero = k.const(0)
    loop, inner, (i,) = k.loop(zero, k.param(name="hi"))
    total = inner.value("add", [acc, product], c_t)
    inner.op("store", [x, i, zero, total], [], {"sizes": [16, 16]})
    inner.op("yield", [], [])
    fuse_dot(k.verified())
    assert total.owner.opcode == "add" and product.owner in k.func.body.ops
