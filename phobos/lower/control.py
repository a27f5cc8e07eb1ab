# Control flow: `for`, `while`, `if` and `yield` of tile-level IR.
#
# Structured control flow stays structured: a tile-level loop or branch
# becomes a thread-level one whose carried values and results are the
# registers of the tile-level ones, flattened in order (Lowering.flat and
# unflat in core.py; placement.py gave init, block argument, result and next
# value one layout, so no conversion is needed at the edges).  Conditions and
# bounds are scalars, uniform for the CTA.
#
# A `for` that is the K loop of a matrix product is software-pipelined with
# cp.async when the target has it (pipeline.py); any other uses the plain
# loop builder (Lowering.build_for).
from __future__ import annotations

from ..middle.ir import Block, Op
from .core import HANDLERS, Lowering
from .pipeline import load_residents, lower_pipelined, pipeline_plan


@HANDLERS.on("for")
def for_loop(low: Lowering, op: Op) -> None:
    plan = pipeline_plan(low, op)
    if plan is not None:
        lower_pipelined(low, op, plan)
        return
    load_residents(low, op)  # into registers here, stored each trip by the product (mma.py)

    def body(ops: list[Op], extra: list) -> list:
        low.lower_ops(ops)
        return []  # the plain loop carries nothing beyond the tile-level values

    low.build_for(op, [], body)


@HANDLERS.on("while")
def while_loop(low: Lowering, op: Op) -> None:
    """A thread-level `while` carrying the registers of the tile-level one; its condition region
    and body see the carried values as block arguments, both in the layouts placement gave them."""
    inits = [r for v in op.operands for r in low.flat(v)]
    types = [t for v in op.results for t in low.lowered_types(v)]
    regions = [Block(), Block()]
    new = low.b.op("while", inits, types, {}, regions)
    for src, dst in zip(op.regions, regions):
        outer = low.b
        low.b = low.builder_for(dst, outer.block, outer.loc)
        for v in src.args:
            for t in low.lowered_types(v):
                low.b.block_arg(dst, t, v.name)
        pos = 0
        for v in src.args:
            pos = low.unflat(v, dst.args, pos)
        low.lower_ops(src.ops)
        low.b = outer
    pos = 0
    for v in op.results:
        pos = low.unflat(v, new.results, pos)


@HANDLERS.on("if")
def if_else(low: Lowering, op: Op) -> None:
    cond = low.vals[op.operands[0]]
    types = [t for v in op.results for t in low.lowered_types(v)]
    regions = [Block(), Block()]
    new = low.b.op("if", [cond], types, {}, regions)
    for src, dst in zip(op.regions, regions):
        low.lower_block(src, dst)
    pos = 0
    for v in op.results:
        pos = low.unflat(v, new.results, pos)


@HANDLERS.on("yield")
def yield_(low: Lowering, op: Op) -> None:
    low.b.op("yield", [r for v in op.operands for r in low.flat(v)], [])
