# Reductions: sum, max, min, argmax and argmin of a tile, along one axis or
# over all of it (a reduction with a combine function is a scan: scan.py).
#
# A reduction combines in three steps, following the operand's layout: within
# a thread (the register slots that collapse onto one slot of the result,
# `Layout.collapse_map`), then across the lanes of a warp with butterfly
# shuffles (one `shfl.bfly` per bit of each in-warp thread digit of the
# reduced dims), then across warps through shared memory (`combine_warps`:
# one lane of each warp writes its partial results, every thread reads
# and combines them all).  Padding slots take the reduction's identity.
#
# argmax/argmin carry (value, index) pairs; ties go to the smaller index, so
# the result is the first position of the extreme value, whatever order the
# combination takes; NaNs lose to every number (the first NaN when all are).  The result has the collapsed layout of the operand
# (which is what placement.py gives it, so no data moves) or, when its group
# was anchored elsewhere, is moved there through shared memory.
from __future__ import annotations

from ..constants import int_range
from ..middle.ir import Op, Value
from ..types import DType, ScalarType
from .core import BOOL, HANDLERS, I32, Lowering, TileRegs, row_major_strides, smem_bytes
from .layout import Layout
from .scan import reduce_with


@HANDLERS.on("reduce")
def reduce(low: Lowering, op: Op) -> None:
    kind, axis = op.attrs["kind"], op.attrs["axis"]
    if kind == "combine":
        reduce_with(low, op)
        return
    x = low.tile(op.operands[0])
    layout = x.layout
    dims = list(range(layout.rank)) if axis is None else [axis]
    combine = _COMBINE[kind]
    src_dtype = op.operands[0].dtype
    small, index = layout.collapse_map(dims)
    with_index = kind in ("argmax", "argmin")
    identity = low.const(_identity(kind, src_dtype), src_dtype)
    big_index = low.const(2**31 - 1)
    partial: dict[int, tuple] = {}
    shape_strides = row_major_strides(layout.shape)
    for r in range(layout.nregs):
        v = x.regs[r]
        valid = low.slot_valid(layout, r, dims)
        if valid is not None:
            v = low.op("select", [valid, v, identity], ScalarType(src_dtype))
        idx = None
        if with_index:
            idx = (low.coord(layout, r, axis) if axis is not None else
                   low.dot_product([low.coord(layout, r, d) for d in dims], shape_strides))
            if valid is not None:
                idx = low.op("select", [valid, idx, big_index], I32)
        s = index[r]
        partial[s] = (v, idx) if s not in partial else combine(low, partial[s], (v, idx), src_dtype)
    lane_terms = [t for d in dims for t in layout.terms[d] if t.in_warp]
    for t in lane_terms:
        bit = t.div
        while bit < t.div * t.mod:
            for s, (v, idx) in list(partial.items()):
                other = (shuffle(low, v, bit), shuffle(low, idx, bit) if idx is not None else None)
                partial[s] = combine(low, (v, idx), other, src_dtype)
            bit *= 2
    warp_terms = [t for d in dims for t in layout.terms[d] if not t.in_warp]
    if warp_terms:
        partial = combine_warps(low, partial, small, layout, lane_terms, warp_terms, combine, src_dtype,
                                with_index)
    result = [partial[s][1] if with_index else partial[s][0] for s in range(small.nregs)]
    if axis is None:
        low.vals[op.result] = result[0]
        return
    out = TileRegs(small, result)
    target = low.layouts[op.result]
    if target != small:
        out = TileRegs(target, low.relayout(out, target, op.result.dtype))
    low.vals[op.result] = out


def shuffle(low: Lowering, v: Value, lane_mask: int) -> Value:
    """v of the lane whose index differs from this one's in the bits of `lane_mask`."""
    return low.op("shfl_bfly", [v, low.const(lane_mask)], v.type)


def combine_warps(low: Lowering, partial, small: Layout, layout: Layout, lane_terms, warp_terms, combine,
                  dtype: DType, with_index: bool):
    """Exchange per-warp partial results through shared memory; every thread combines them all."""
    nwarp = 1
    for t in warp_terms:
        nwarp *= t.mod
    slot = low.const(0)
    radix = 1
    for t in warp_terms:
        term = low.op("mul", [low.digit(t.div, t.mod), low.const(radix)], I32)
        slot = low.op("add", [slot, term], I32)
        radix *= t.mod
    size = 1
    for n_ in small.shape:
        size *= n_
    eb = max(smem_bytes(dtype), 4)
    words = 2 if with_index else 1
    base = low.smem(size * nwarp * eb * words)
    strides = row_major_strides(small.shape)
    leader = low.owner(layout, tuple((t.div, t.mod) for t in lane_terms))
    low.barrier()
    elements = {}
    for s in range(small.nregs):
        element = low.linear(small, s, strides, [0] * small.rank)
        elements[s] = element
        at = low.op("add", [low.op("mul", [element, low.const(nwarp)], I32), slot], I32)
        pred = low.all_of([low.slot_valid(small, s), leader])
        v, idx = partial[s]
        low.st_shared(base, at, eb, [v], dtype, pred)
        if with_index:
            low.st_shared(base, at, 4, [idx], DType.I32, pred, offset=size * nwarp * eb)
    low.barrier()
    out = {}
    for s in range(small.nregs):
        valid = low.slot_valid(small, s)
        acc = None
        for w in range(nwarp):
            at = low.op("add", [low.op("mul", [elements[s], low.const(nwarp)], I32), low.const(w)], I32)
            v = low.ld_shared(base, at, eb, dtype, valid)
            idx = None
            if with_index:
                idx = low.ld_shared(base, at, 4, DType.I32, valid, offset=size * nwarp * eb)
            acc = (v, idx) if acc is None else combine(low, acc, (v, idx), dtype)
        out[s] = acc
    return out


def _combine_value(opcode: str):
    def combine(low: Lowering, a, b, dtype: DType):
        return (low.op(opcode, [a[0], b[0]], ScalarType(dtype)), None)
    return combine


def _combine_arg(pred: str):
    """(value, index) pairs: b's is taken when its value is better, or equal with a smaller index;
    a NaN counts as worse than any number (as the interpreter ignores NaN), and as equal to a NaN."""
    def combine(low: Lowering, a, b, dtype: DType):
        (va, ia), (vb, ib) = a, b
        earlier = low.op("cmp", [ib, ia], BOOL, pred="lt")
        better = low.op("cmp", [vb, va], BOOL, pred=pred)
        tie = low.all_of([low.op("cmp", [vb, va], BOOL, pred="eq"), earlier])
        take = low.op("or", [better, tie], BOOL)
        if dtype.is_float:  # over a NaN, any number, or a NaN of a smaller index
            a_nan, b_nan = (low.op("cmp", [v, v], BOOL, pred="ne") for v in (va, vb))
            b_number = low.op("not", [b_nan], BOOL)
            take = low.op("or", [take, low.all_of([a_nan, low.op("or", [b_number, earlier], BOOL)])], BOOL)
        return (low.op("select", [take, vb, va], ScalarType(dtype)), low.op("select", [take, ib, ia], I32))
    return combine


_COMBINE = {"sum": _combine_value("add"), "max": _combine_value("max"), "min": _combine_value("min"),
            "argmax": _combine_arg("gt"), "argmin": _combine_arg("lt")}


def _identity(kind: str, dtype: DType):
    """The value of a padding slot: one that every element beats (NaN for floats: max and min ignore
    it, and argmax and argmin take any number over it, and a NaN of a smaller index)."""
    if kind == "sum":
        return 0.0 if dtype.is_float else 0
    if dtype.is_float:
        return float("nan")
    small, big = int_range(dtype)
    return small if kind in ("max", "argmax") else big
