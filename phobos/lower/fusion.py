# Store fusion: which stores of a block are lowered together with the loads
# and element-wise ops that compute their tile.
#
# Such a store is lowered as load, compute, store one vector of registers at a
# time (memory.py's store handler), so only a few of the loaded values are
# live at once - the epilogue `C = alpha * acc + beta * C` of a matrix product
# would otherwise hold all of C beside all of acc.  The loads move down to the
# store, which is only allowed when no store or atomic lies between, and
# never for a load of another slice of the tensor stored (`x[i + 1 :+ B] =
# x[i :+ B]`: a thread would load elements other threads store).
#
# Only the plan is made here, from the tile-level ops, the layouts and the use
# counts; Lowering.lower_ops (core.py) consults it to skip the ops that a fused
# store will compute, and memory.py writes the code.
from __future__ import annotations

from dataclasses import dataclass

from ..middle.ir import ELEMENTWISE, Op, Value, writes_memory
from ..types import TileType
from .layout import Layout


@dataclass
class FusedStore:
    """A store lowered together with the element-wise ops and loads that compute its tile."""

    layout: Layout
    ops: list[Op]  # element-wise ops, consts and scalar broadcasts, in program order
    loads: list[Op]


def fusion_plan(ops: list[Op], layouts: dict[Value, Layout], use_count: dict[Value, int]) -> dict[Op, FusedStore]:
    """Stores of `ops` whose tile is an element-wise function of loads that nothing else uses."""
    index = {op: i for i, op in enumerate(ops)}
    producers = {r: op for op in ops for r in op.results}
    plans = {}
    for store in ops:
        if store.opcode != "store" or not isinstance(store.operands[-1].type, TileType):
            continue
        value = store.operands[-1]
        plan = FusedStore(layouts[value], [], [])
        _collect(value, producers, plan, layouts, use_count)
        if not plan.loads:
            continue
        first = min(index[ld] for ld in plan.loads)
        if any(writes_memory(o) for o in ops[first:index[store]]):
            continue
        if any(ld.operands[0] is store.operands[0] and (ld.operands[1:] != store.operands[1:-1]
                                                         or ld.attrs["sizes"] != store.attrs["sizes"])
               for ld in plan.loads):
            continue  # another slice of the stored tensor: a thread would load what others store
        plan.ops.sort(key=index.get)
        plans[store] = plan
    return plans


def _collect(v: Value, producers: dict, plan: FusedStore, layouts: dict[Value, Layout],
             use_count: dict[Value, int]) -> None:
    """Add the loads and element-wise ops that compute v to the plan; anything else is a leaf.

    A value used anywhere else than in the plan (the stored tile too: it may
    also be stored elsewhere or used by later code) is a leaf, computed on its
    own: the fused store only computes values that nothing else needs."""
    op = producers.get(v)
    if op is None or use_count[v] != 1 or not isinstance(v.type, TileType) \
            or layouts[v] != plan.layout:
        return  # a leaf: computed before, in registers (moved to the store's layout if need be)
    if op.opcode == "load":
        plan.loads.append(op)
    elif op.opcode in ELEMENTWISE or op.opcode == "const" or (
            op.opcode == "broadcast" and not isinstance(op.operands[0].type, TileType)):
        plan.ops.append(op)
        for x in op.operands:
            _collect(x, producers, plan, layouts, use_count)

