# Where a cluster reduction (cluster_sum, cluster_max, cluster_min) may not be reached by every CTA of
# a cluster: tile IR -> nothing, or a SemanticError.  Each CTA of the cluster waits at the reduction's
# cluster barriers for all the others, so a reduction inside an `if` whose condition, a `for` whose
# bounds or a `while` whose test depends on cluster_rank() would hang the cluster on the GPU.  The
# compiler checks every configuration before lowering; the interpreter, which runs clusters of one
# CTA, checks too, so that every mode refuses such a program alike.
from __future__ import annotations

from ..errors import SemanticError
from .ir import Block, Function, Value, walk


def _ranked(func: Function) -> set[Value]:
    """The values that depend on cluster_rank(): its results, what is computed from them, what a region
    yields of them (with every value a loop carries then)."""
    ranked: set[Value] = set()
    while True:
        before = len(ranked)
        for op in walk(func.body):
            yielded = [v for region in op.regions if region.terminator is not None
                       for v in region.terminator.operands]
            if op.opcode == "cluster_index" or any(v in ranked for v in [*op.operands, *yielded]):
                ranked.update(op.results)
                if op.opcode in ("for", "while"):
                    ranked.update(a for region in op.regions for a in region.args)
        if len(ranked) == before:
            return ranked


def check_cluster_reductions(func: Function) -> None:
    """A SemanticError at a cluster reduction that some CTAs of a cluster may not reach: one inside an `if`
    whose condition, a `for` whose bounds or a `while` whose test depends on cluster_rank().  Each CTA waits
    at the reduction's cluster barriers for all the others, so on the GPU the cluster would hang."""
    if not any(op.opcode == "cluster_reduce" for op in walk(func.body)):
        return  # the common case: one walk, no fixed point
    ranked = _ranked(func)

    def divergent(op) -> bool:
        if op.opcode == "if":
            return op.operands[0] in ranked
        if op.opcode == "for":
            return op.operands[0] in ranked or op.operands[1] in ranked
        if op.opcode == "while":
            return any(r in ranked for o in op.regions[0].ops for r in o.results)
        return False

    def visit(block: Block, why: str | None) -> None:
        for op in block.ops:
            if op.opcode == "cluster_reduce" and why is not None:
                raise SemanticError(f"a cluster reduction inside {why} that depends on cluster_rank(): every CTA "
                                    f"of the cluster must reach it (its cluster barriers wait for all of them)",
                                    op.loc)
            inner = why if why is not None or not divergent(op) else \
                {"if": "an `if`", "for": "a `for` loop", "while": "a `while` loop"}[op.opcode]
            for region in op.regions:
                visit(region, inner)
    visit(func.body, None)
