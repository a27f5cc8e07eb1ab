# Rearranging tiles: permute (and trans), join and concat.
#
# Each moves elements between threads, so it goes through shared memory: the
# operands are stored row-major one after the other (Lowering.relayout_from)
# and every register of the result reads the element it copies, found from
# its coordinates.  (split is two `extract`s, made by irgen.)  A transpose that
# only dots use does not move: dot.py stages it straight from the
# untransposed tile.  The join of two scalars moves nothing either: every
# thread holds both, and each register of the [2] result picks one by its
# coordinate.
from __future__ import annotations

import math

from ..middle.ir import Op, Value
from ..types import ScalarType
from .core import BOOL, HANDLERS, I32, Lowering, TileRegs, Transposed, row_major_strides


@HANDLERS.on("permute")
def permute(low: Lowering, op: Op) -> None:
    src = low.tile(op.operands[0])
    order = op.attrs["order"]
    if tuple(order) == (1, 0) and low.use_count[op.result] == low.dot_operand_uses.get(op.result, 0):
        low.vals[op.result] = Transposed(src)  # only dots use it: they stage it transposed
        return
    strides = row_major_strides(src.layout.shape)
    layout = low.layouts[op.result]
    # dim i of the result is dim order[i] of the operand
    regs = low.relayout(src, layout, op.result.dtype,
                        lambda coords: low.dot_product(coords, [strides[d] for d in order]))
    low.vals[op.result] = TileRegs(layout, regs)


@HANDLERS.on("join")
def join(low: Lowering, op: Op) -> None:
    layout = low.layouts[op.result]
    if isinstance(op.operands[0].type, ScalarType):
        low.vals[op.result] = TileRegs(layout, [join_scalars(low, op, layout, r) for r in range(layout.nregs)])
        return
    a, b = (low.tile(v) for v in op.operands)
    size = math.prod(op.operands[0].type.shape)
    strides = row_major_strides(op.operands[0].type.shape)

    def source_index(coords: list[Value]) -> Value:  # (..., k): element ... of operand k
        which = low.op("mul", [coords[-1], low.const(size)], I32)
        return low.op("add", [which, low.dot_product(coords[:-1], strides)], I32)

    low.vals[op.result] = TileRegs(layout, low.relayout_from([a, b], layout, op.result.dtype, source_index))


def join_scalars(low: Lowering, op: Op, layout, r: int) -> Value:
    """Register r of join(a, b) of two scalars: a where its coordinate is 0, else b."""
    a, b = (low.vals[v] for v in op.operands)
    first = low.op("cmp", [low.coord(layout, r, 0), low.const(0)], BOOL, pred="eq")
    return low.op("select", [first, a, b], ScalarType(op.result.dtype.compute))


@HANDLERS.on("concat")
def concat(low: Lowering, op: Op) -> None:
    a, b = (low.tile(v) for v in op.operands)
    axis = op.attrs["axis"]
    layout = low.layouts[op.result]
    a_shape, b_shape = op.operands[0].type.shape, op.operands[1].type.shape
    a_strides, b_strides = row_major_strides(a_shape), row_major_strides(b_shape)
    split = low.const(a_shape[axis])

    def source_index(coords: list[Value]) -> Value:
        in_b = low.op("cmp", [coords[axis], split], BOOL, pred="ge")
        b_coords = list(coords)
        b_coords[axis] = low.op("sub", [coords[axis], split], I32)
        from_b = low.op("add", [low.dot_product(b_coords, b_strides), low.const(math.prod(a_shape))], I32)
        return low.op("select", [in_b, from_b, low.dot_product(coords, a_strides)], I32)

    low.vals[op.result] = TileRegs(layout, low.relayout_from([a, b], layout, op.result.dtype, source_index))
