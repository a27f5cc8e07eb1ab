# Data-dependent addressing: gathers, scatters and atomics.
#
# Each of these ops (made by irgen) gives, per tensor dim, a scalar index or a
# tile of indices in the layout of the op's tile (placement.py put them in one
# group), so every register slot knows the full index of its element.  The
# element's address is computed on its own, in 64 bits (base + sum of
# index * stride, times the element size), and so is its edge predicate: an
# element with an index outside its dim is not read (it reads 0) and not
# written.  Accesses are scalar and masked: the elements of a gather are
# anywhere.
#
# An access that ordering.py says must not overtake an earlier one of other
# threads starts with a barrier.
#
# A scatter and an atomic run in the first replica of each element only
# (`owner`); a scalar atomic runs in thread 0, and its old value reaches every
# thread through shared memory, as do the old values of a replicated tile.
# Atomics map to `atom` (`red` when the old values are unused).  A 16-bit
# float's add rounds x to the tensor's format first and the sum once
# (`add.noftz.f16`; bf16 natively from sm_90, else a compare-and-swap loop
# that isel writes).  Float max and
# min use the integer trick: a value with its sign bit clear orders like its
# bits as a signed integer (atom.max.s32 for max), one with the sign bit set
# in reverse like its bits as unsigned (atom.min.u32 for max), so -0 < +0 and
# the NaNs lie beyond the infinities.  Exchange and compare-and-swap, the
# building blocks of locks, are acquire-release at GPU scope and have a
# barrier on each side, so the accesses of every thread of the CTA before
# (after) them come before (after) them.
from __future__ import annotations

from ..middle.ir import Op, Value
from ..types import DType, ScalarType, TileType
from .core import BOOL, HANDLERS, I32, I64, Lowering, TensorRef, TileRegs
from .layout import Layout
from .memory import as_type, index_inside, index_value, strides_of

ATOMIC_PTX_TYPE = {  # (op, dtype) -> the PTX type of the atom instruction
    **{("add", d): t for d, t in ((DType.F32, "f32"), (DType.F64, "f64"), (DType.I32, "s32"),
                                  (DType.U32, "u32"), (DType.I64, "u64"), (DType.U64, "u64"),
                                  (DType.F16, "noftz.f16"), (DType.BF16, "noftz.bf16"))},
    **{(op, d): t for op in ("max", "min") for d, t in ((DType.I32, "s32"), (DType.U32, "u32"),
                                                         (DType.I64, "s64"), (DType.U64, "u64"))},
    **{(op, d): ("b64" if d.bits == 64 else "b32") for op in ("and", "or", "xor", "xchg", "cas")
       for d in (DType.I32, DType.U32, DType.I64, DType.U64, DType.F32, DType.F64)},
}


def element_address(low: Lowering, tensor: TensorRef, indices: list[Value], layout: Layout | None,
                    r: int) -> tuple[Value, Value | None]:
    """(address, inside) of register r's element: its index per dim from `indices` (scalars, or tiles
    in `layout`), 64-bit arithmetic; `inside` is None when no dim can be outside."""
    strides = strides_of(low, tensor)
    offset, preds = None, []
    for index, dim, stride in zip(indices, tensor.dims, strides):
        i = index_value(low, low.in_layout(index, layout).regs[r] if isinstance(index.type, TileType)
                        else low.vals[index])
        preds.append(index_inside(low, i, dim))
        term = low.op("mul", [as_type(low, i, I64), stride], I64)
        offset = term if offset is None else low.op("add", [offset, term], I64)
    nbytes = low.op("mul", [offset, low.const(tensor.dtype.nbytes, DType.I64)], I64)
    return low.op("add", [tensor.ptr, nbytes], I64), low.all_of(preds)


def _operands(op: Op, tensor: TensorRef) -> tuple[list[Value], list[Value]]:
    rank = len(tensor.dims)
    return op.operands[1:1 + rank], op.operands[1 + rank:]


def _slot_value(low: Lowering, v: Value, layout: Layout | None, r: int) -> Value:
    return low.in_layout(v, layout).regs[r] if isinstance(v.type, TileType) else low.vals[v]


@HANDLERS.on("gather")
def gather(low: Lowering, op: Op) -> None:
    tensor = low.vals[op.operands[0]]
    indices, _ = _operands(op, tensor)
    layout = low.layouts[op.result]
    if op in low.global_barriers:
        low.barrier()
    regs = []
    for r in range(layout.nregs):
        addr, inside = element_address(low, tensor, indices, layout, r)
        pred = low.all_of([inside, low.slot_valid(layout, r)])
        regs += low.b.op("ld_global", [addr] + ([pred] if pred is not None else []),
                         [ScalarType(tensor.dtype.compute)],
                         {"dtype": tensor.dtype, "vec": 1, "offset": 0, "masked": pred is not None,
                          "read_only": tensor.read_only}).results
    low.vals[op.result] = TileRegs(layout, regs)


@HANDLERS.on("scatter")
def scatter(low: Lowering, op: Op) -> None:
    tensor = low.vals[op.operands[0]]
    indices, (value,) = _operands(op, tensor)
    layout = low.layouts[value]
    owner = low.owner(layout)
    if op in low.global_barriers:
        low.barrier()
    for r in range(layout.nregs):
        addr, inside = element_address(low, tensor, indices, layout, r)
        pred = low.all_of([inside, low.slot_valid(layout, r), owner])
        low.b.op("st_global", [addr, low.in_layout(value, layout).regs[r]] + ([pred] if pred is not None else []),
                 [], {"dtype": tensor.dtype, "vec": 1, "offset": 0, "masked": pred is not None, "relaxed": True})


@HANDLERS.on("atomic")
def atomic(low: Lowering, op: Op) -> None:
    tensor = low.vals[op.operands[0]]
    indices, values = _operands(op, tensor)
    kind, used, ordered = op.attrs["op"], op.attrs["used"], op.attrs["ordered"]
    tile = isinstance(op.result.type, TileType)
    layout = low.layouts[op.result] if tile else scalar_layout(low)
    owner = low.owner(layout)
    if ordered or op in low.global_barriers:
        low.barrier()
    regs = []
    for r in range(layout.nregs):
        addr, inside = element_address(low, tensor, indices, layout if tile else None, r)
        pred = low.all_of([inside, low.slot_valid(layout, r) if tile else None, owner])
        xs = [_slot_value(low, v, layout if tile else None, r) for v in values]
        regs.append(atomic_element(low, kind, tensor.dtype, addr, xs, pred, used, ordered))
    if ordered:
        low.barrier()
    if used and layout.replicas:  # the first replica did the atomic: share its old values
        regs = low.relayout(TileRegs(layout, regs), layout, op.result.dtype)
    low.vals[op.result] = TileRegs(layout, regs) if tile else regs[0]


def scalar_layout(low: Lowering) -> Layout:
    """The layout of a scalar held by thread 0 (every other thread a replica of it)."""
    return Layout((), low.threads, (), ((),), ((1, low.threads),))


def atomic_element(low: Lowering, kind: str, dtype: DType, addr: Value, xs: list[Value], pred: Value | None,
                   used: bool, ordered: bool = False) -> Value | None:
    """One element's atomic; its old value (0 where `pred` is false), or None when unused; `ordered`: with
    acquire-release semantics (the tile op's attr, from frontend.builtins.ORDERED_ATOMICS)."""
    if dtype.is_float and kind in ("max", "min"):
        bits_t = ScalarType(DType.I64 if dtype.bits == 64 else DType.I32)
        bits = low.op("bitcast", [xs[0]], bits_t)
        negative = low.op("cmp", [bits, low.const(0, bits_t.dtype)], BOOL, pred="lt")
        positive = low.op("not", [negative], BOOL)
        signed, unsigned = ("s64", "u64") if dtype.bits == 64 else ("s32", "u32")
        other = "min" if kind == "max" else "max"
        old_pos = _atom(low, kind, signed, addr, [bits], low.all_of([pred, positive]), used, bits_t, ordered)
        old_neg = _atom(low, other, unsigned, addr, [bits], low.all_of([pred, negative]), used, bits_t, ordered)
        if not used:
            return None
        return low.op("bitcast", [low.op("select", [negative, old_neg, old_pos], bits_t)], ScalarType(dtype))
    t = ScalarType(dtype)
    if dtype.is_half:  # add: x in the tensor's format (a 16-bit register), the old value back in f32
        x16 = low.op("cast", [xs[0]], t)
        old = _atom(low, kind, ATOMIC_PTX_TYPE[(kind, dtype)], addr, [x16], pred, used, t, ordered)
        return low.op("cast", [old], ScalarType(DType.F32)) if used else None
    if kind in ("and", "or", "xor", "xchg", "cas") and dtype.is_float:
        bits_t = ScalarType(DType.I64 if dtype.bits == 64 else DType.I32)
        old = _atom(low, kind, ATOMIC_PTX_TYPE[(kind, dtype)], addr, [low.op("bitcast", [x], bits_t) for x in xs],
                    pred, used, bits_t, ordered)
        return low.op("bitcast", [old], t) if used else None
    return _atom(low, kind, ATOMIC_PTX_TYPE[(kind, dtype)], addr, xs, pred, used, t, ordered)


def _atom(low: Lowering, kind: str, ptx_type: str, addr: Value, xs: list[Value], pred: Value | None, used: bool,
          t: ScalarType, ordered: bool) -> Value | None:
    operands = [addr, *xs] + ([pred] if pred is not None else [])
    attrs = {"op": kind, "type": ptx_type, "masked": pred is not None, "ordered": ordered}
    results = low.b.op("atom_global", operands, [t] if used else [], attrs).results
    return results[0] if used else None
