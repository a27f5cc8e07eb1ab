# What a kernel compiled with 64-bit indices still computes in 32 bits.
#
# A call with a tensor past 2^31 - 1 elements runs the kernel compiled with
# 64-bit indices (compile_kernel(index_bits=64)): tensor dims, bounds and
# element coordinates are i64.  The kernel's own values keep their dtypes,
# though: `program_id(0) * BLOCK` is an i32, and i32 arithmetic wraps (the
# language says so), so over a grid of more than 2^31 / BLOCK programs the
# start of a block wraps to a negative number or back into the tensor; the
# edge contract then skips those elements, or writes some twice, without a
# word.  A size the kernel reads by name is the i32 low half of the size.
#
# `index_reach(func)` finds, in the tile IR, what such a call depends on:
#   - every 32-bit value a slice start or single index (of a load, store or
#     atomic_add) is computed from that is affine in the program ids:
#     c0 * program_id(0) + c1 * program_id(1) + c2 * program_id(2) + k, through
#     constants, add, sub, neg, mul by a constant and integer casts;
#   - the size names the kernel reads as values.
# `IndexReach.problem(kernel, grid, sizes)` says, for one launch, whether one
# of them leaves its dtype's range: a LaunchError located there, or None.  Indices
# computed from anything else (loop variables, loaded values, scalars) are not
# followed: the check finds the common ways to get it wrong, it is no proof.
from __future__ import annotations

from dataclasses import dataclass

from ..dispatch import Dispatch
from ..errors import LaunchError, Loc
from ..types import DType, ScalarType
from .ir import Function, Op, Value, walk

#: The 32-bit integer dtypes whose arithmetic wraps within these bounds.
NARROW_RANGES = {DType.I32: (-2**31, 2**31 - 1), DType.U32: (0, 2**32 - 1)}

#: Ops whose operands after the tensor are element indices, and how many trailing operands are not.
INDEXED_OPS = {"load": 0, "store": 1, "atomic_add": 1}


@dataclass(frozen=True)
class Affine:
    """coefficients[d] * program_id(d) summed over the axes, plus offset (exact integers)."""

    coefficients: tuple[int, int, int]
    offset: int

    def reach(self, grid: tuple[int, int, int]) -> tuple[int, int]:
        """The least and greatest value over every program of `grid`."""
        low = high = self.offset
        for coefficient, programs in zip(self.coefficients, grid):
            ends = (0, coefficient * (programs - 1))
            low, high = low + min(ends), high + max(ends)
        return low, high

    def __add__(self, other: Affine) -> Affine:
        return Affine(tuple(a + b for a, b in zip(self.coefficients, other.coefficients)), self.offset + other.offset)

    def scaled(self, factor: int) -> Affine:
        return Affine(tuple(factor * c for c in self.coefficients), factor * self.offset)


@dataclass(frozen=True)
class NarrowTerm:
    """A 32-bit value an index is computed from, affine in the program ids."""

    affine: Affine
    dtype: DType
    loc: Loc | None


@dataclass(frozen=True)
class SizeRead:
    """A size name the kernel reads as a value (an i32), and where."""

    name: str
    loc: Loc | None


@dataclass(frozen=True)
class IndexReach:
    terms: tuple[NarrowTerm, ...]
    sizes_read: tuple[SizeRead, ...]

    def problem(self, kernel: str, grid: tuple[int, int, int], sizes: dict[str, int]) -> LaunchError | None:
        """Why this launch (64-bit indices, this grid and these sizes) would compute a wrapped index, or None."""
        for read in self.sizes_read:
            value = sizes.get(read.name, 0)
            if value > NARROW_RANGES[DType.I32][1]:
                return LaunchError(
                    f"{kernel}: the kernel reads the size {read.name} as an i32, and {read.name} = {value} "
                    f"does not fit (the i32 holds {_wrapped(value, DType.I32)}).  Tensors past 2^31 - 1 elements "
                    f"run with 64-bit indices, but a size read by name stays i32: index such a tensor without "
                    f"reading {read.name} (slices past its end read 0 and are not written)", read.loc)
        for term in self.terms:
            low, high = term.affine.reach(grid)
            floor, ceiling = NARROW_RANGES[term.dtype]
            if low < floor or high > ceiling:
                return LaunchError(
                    f"{kernel}: this index is computed in {term.dtype} from program_id and reaches "
                    f"{high if high > ceiling else low} over this call's grid {grid}; {term.dtype} arithmetic "
                    f"wraps, so elements would be skipped or written twice.  Tensors past 2^31 - 1 elements run "
                    f"with 64-bit indices, but the kernel's own {term.dtype} values stay {term.dtype}: widen "
                    f"before multiplying, e.g. i64(program_id(0)) * i64(BLOCK)", term.loc)
        return None


def _wrapped(value: int, dtype: DType) -> int:
    floor, ceiling = NARROW_RANGES[dtype]
    return (value - floor) % (ceiling - floor + 1) + floor


def index_reach(func: Function) -> IndexReach:
    """The narrow index terms and the size reads of a tile-level function (see the header)."""
    params = func.attrs["params"]
    size_params = {param.name for param in params if param.kind == "size"}
    affine: dict[Value, Affine | None] = {}
    terms: dict[Value, NarrowTerm] = {}
    reads: dict[str, SizeRead] = {}
    for op in walk(func.body):
        for operand in op.operands:
            owner = operand.owner
            if isinstance(owner, Op) and owner.opcode == "param" and owner.attrs["name"] in size_params:
                reads.setdefault(owner.attrs["name"], SizeRead(owner.attrs["name"], op.loc))
        if op.opcode in INDEXED_OPS:
            trailing = INDEXED_OPS[op.opcode]
            for index in op.operands[1:len(op.operands) - trailing]:
                _collect(index, affine, terms)
    return IndexReach(tuple(terms.values()), tuple(reads.values()))


def _collect(value: Value, affine: dict[Value, Affine | None], terms: dict[Value, NarrowTerm]) -> None:
    """Record the narrow affine values `value` is computed from by arithmetic (itself included)."""
    pending = [value]
    while pending:
        v = pending.pop()
        if v in terms or not isinstance(v.owner, Op):
            continue
        form = _affine(v, affine)
        if form is not None and v.dtype in NARROW_RANGES and any(form.coefficients):
            terms[v] = NarrowTerm(form, v.dtype, v.owner.loc)
        if v.owner.opcode in AFFINE_RULES:  # arithmetic: its operands may be affine where it is not
            pending.extend(operand for operand in v.owner.operands if _is_scalar_int(operand))


def _is_scalar_int(value: Value) -> bool:
    return isinstance(value.type, ScalarType) and value.dtype.is_int


#: How each IR op of a scalar integer is an affine function of the program ids (absent: it is not one).
AFFINE_RULES = Dispatch("IR opcode")


def _affine(value: Value, memo: dict[Value, Affine | None]) -> Affine | None:
    """`value` as an affine function of the program ids, computed exactly; None when it is not one."""
    if value not in memo:
        op = value.owner
        rule = AFFINE_RULES.get(op.opcode) if isinstance(op, Op) and _is_scalar_int(value) else None
        memo[value] = rule(op, memo) if rule is not None else None
    return memo[value]


def _operands(op: Op, memo: dict) -> list[Affine] | None:
    forms = [_affine(operand, memo) for operand in op.operands]
    return None if any(form is None for form in forms) else forms


@AFFINE_RULES.on("const")
def _const(op: Op, memo: dict) -> Affine | None:
    value = op.attrs["value"]
    return Affine((0, 0, 0), value) if isinstance(value, int) and not isinstance(value, bool) else None


@AFFINE_RULES.on("program_id")
def _program_id(op: Op, memo: dict) -> Affine:
    coefficients = [0, 0, 0]
    coefficients[op.attrs["axis"]] = 1
    return Affine(tuple(coefficients), 0)


@AFFINE_RULES.on("add")
def _add(op: Op, memo: dict) -> Affine | None:
    forms = _operands(op, memo)
    return forms[0] + forms[1] if forms else None


@AFFINE_RULES.on("sub")
def _sub(op: Op, memo: dict) -> Affine | None:
    forms = _operands(op, memo)
    return forms[0] + forms[1].scaled(-1) if forms else None


@AFFINE_RULES.on("mul")
def _mul(op: Op, memo: dict) -> Affine | None:
    forms = _operands(op, memo)
    if not forms:
        return None
    a, b = forms
    if not any(b.coefficients):
        return a.scaled(b.offset)
    if not any(a.coefficients):
        return b.scaled(a.offset)
    return None  # a product of program ids: not affine


@AFFINE_RULES.on("neg")
def _neg(op: Op, memo: dict) -> Affine | None:
    forms = _operands(op, memo)
    return forms[0].scaled(-1) if forms else None


@AFFINE_RULES.on("cast")
def _cast(op: Op, memo: dict) -> Affine | None:
    forms = _operands(op, memo)
    return forms[0] if forms else None  # the exact value; a narrowing cast is a narrow term itself
