# What a kernel touches, per grid axis: can a launch be cut into slices that
# run on regions of the tensors instead of the whole tensors?
#
#   checked kernel (one configuration) -> tile IR after the tile passes
#     -> ConfigAccess: tensors read and written; per grid axis, either the
#        sizes that follow it and the tile length S, or why it cannot be split
#   every configuration a worker may pick for the call's sizes -> KernelAccess:
#     the axes that can be split in all of them (and whose sizes no @derive or
#     @require uses), with the cell (lcm of S) their cuts fall on
#
# A slice of programs along axis d, run on arrays cut out of the tensors along
# the sizes that follow d, computes what the same programs of the whole launch
# compute, when (docs/distributed.md, section 1):
#   1. program_id(d) is used only as a tile index `program_id(d) * S` (or
#      `program_id(d)` of a single element) of loads and stores whose tile is
#      S long along that dimension, with one S throughout;
#   2. those dimensions are size names, every dimension with one of those
#      names is indexed that way, and the kernel uses none of them as a value;
#   3. num_programs(d) is not used;
#   4. every written tensor has a dimension that follows d (tasks then write
#      disjoint regions).
# Nothing here runs a kernel or needs a GPU.
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from ..compiler import grid_hints
from ..frontend import ast
from ..frontend.launch_rules import LaunchRules
from ..frontend.sema import check_kernel
from ..middle.ir import WRITING_OPCODES, Function, Op, Value, walk
from ..middle.irgen import generate
from ..middle.passes import TILE_PIPELINE, run_pipeline

MEMORY_OPS = ("load", "store", "gather", "scatter", "atomic")
READ_MODIFY_WRITE_OPS = ("atomic",)


@dataclass(frozen=True)
class AxisSplit:
    """A grid axis a launch can be cut along: the sizes that follow it and the cell length."""

    axis: int
    sizes: tuple[str, ...]
    cell: int  # elements of each following size per cell: cuts fall on multiples of it
    tiles: tuple[int, ...] = ()  # the tile length S of each configuration (KernelAccess.configs), in order


@dataclass
class ConfigAccess:
    """What the tile IR of one configuration shows."""

    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    tiles: dict[int, int] = field(default_factory=dict)  # axis -> S
    sizes: dict[int, set[str]] = field(default_factory=dict)  # axis -> size names following it
    refused: dict[int, str] = field(default_factory=dict)  # axis -> why it cannot be split
    grid_problem: str | None = None  # why the launcher cannot infer the grid, if it cannot

    @property
    def splittable(self) -> list[int]:
        return sorted(axis for axis in self.tiles if axis not in self.refused)


@dataclass(frozen=True)
class KernelAccess:
    """What every configuration a worker may pick agrees on."""

    reads: frozenset[str]
    writes: frozenset[str]
    axes: tuple[AxisSplit, ...]  # the axes that can be split, in axis order
    refused: dict[int, str]  # axes programs run along that cannot be split, and why
    grid_problem: str | None
    configs: tuple[dict[str, int], ...] = ()  # the configurations these are common to

    def axis_of(self, size: str) -> AxisSplit | None:
        """The split axis size `size` follows, if any."""
        return next((a for a in self.axes if size in a.sizes), None)


def kernel_access(node: ast.Kernel, configs: list[dict[str, int]], rules: LaunchRules | None = None) -> KernelAccess:
    """The access pattern common to `configs` (complete, valid configurations of `node`); an axis
    whose sizes the launch `rules` (@derive, @require) use is not split either: a task's smaller
    sizes could derive other constants, or fail a condition the whole call meets."""
    found = [config_access(tile_ir(node, config)) for config in configs]
    first = found[0]
    axes, refused = [], dict(first.refused)
    in_rules = sizes_in_rules(rules) if rules is not None else set()
    for axis in first.splittable:
        named = sorted(first.sizes[axis] & in_rules)
        if named:
            refused[axis] = f"size '{named[0]}' appears in the kernel's @derive or @require, and a task sees less of it"
            continue
        disagreeing = next((c for c in found if axis not in c.splittable or c.sizes[axis] != first.sizes[axis]), None)
        if disagreeing is not None:
            refused[axis] = disagreeing.refused.get(axis, "its configurations index it differently")
            continue
        cell = math.lcm(*(c.tiles[axis] for c in found))
        axes.append(AxisSplit(axis, tuple(sorted(first.sizes[axis])), cell, tuple(c.tiles[axis] for c in found)))
    return KernelAccess(frozenset().union(*(c.reads for c in found)), frozenset().union(*(c.writes for c in found)),
                        tuple(axes), refused, first.grid_problem, tuple(dict(c) for c in configs))


def sizes_in_rules(rules: LaunchRules) -> set[str]:
    """The size names a kernel's @derive and @require expressions use."""
    terms = [d.term for d in rules.derived] + [c.term for c in rules.conditions]
    return set().union(*(t.names() for t in terms)) & set(rules.sizes)


def tile_ir(node: ast.Kernel, config: dict[str, int]) -> Function:
    """The kernel's tile-level IR for one configuration, after the tile passes (as the compiler has it)."""
    func = generate(check_kernel(node, config))
    run_pipeline(func, TILE_PIPELINE, stage="tile")
    return func


def config_access(func: Function) -> ConfigAccess:
    """The access pattern of one configuration's tile IR (see the header for the rules)."""
    params = func.attrs["params"]
    found = ConfigAccess()
    users: dict[Value, list[tuple[Op, int]]] = defaultdict(list)
    program_ids: list[Op] = []
    used_sizes: set[str] = set()
    memory_ops: list[Op] = []
    for op in walk(func.body):
        for position, operand in enumerate(op.operands):
            users[operand].append((op, position))
        if op.opcode == "program_id":
            program_ids.append(op)
        elif op.opcode == "num_programs":
            found.refused.setdefault(op.attrs["axis"], f"num_programs({op.attrs['axis']}) is used")
        elif op.opcode in MEMORY_OPS:
            memory_ops.append(op)
    for op in walk(func.body):
        if op.opcode == "param" and params[op.attrs["index"]].kind == "size" and users[op.result]:
            used_sizes.add(params[op.attrs["index"]].name)

    # Tile indices: which dimension of which tensor follows which axis, with which S.
    other_indices: list[tuple[str, Op]] = []  # (size name, op) indexed otherwise
    for op in memory_ops:
        tensor = params[op.operands[0].owner.attrs["index"]]
        (found.writes if op.opcode in WRITING_OPCODES else found.reads).add(tensor.name)
        if op.opcode in READ_MODIFY_WRITE_OPS:
            found.reads.add(tensor.name)
        if "sizes" not in op.attrs:  # a gather, scatter or atomic: its elements depend on the data
            other_indices += [(dim, op) for dim in tensor.dims if isinstance(dim, str)]
            continue
        for dim, index, size in zip(tensor.dims, op.operands[1:], op.attrs["sizes"]):
            tile = program_tile(index, size)
            if tile is None:
                if isinstance(dim, str):
                    other_indices.append((dim, op))
                continue
            axis, length = tile
            if not isinstance(dim, str):
                found.refused.setdefault(axis, f"it indexes a dimension of '{tensor.name}' of literal extent {dim}")
                continue
            if found.tiles.setdefault(axis, length) != length:
                found.refused.setdefault(axis, f"its tiles have different lengths ({found.tiles[axis]} and {length})")
            found.sizes.setdefault(axis, set()).add(dim)

    for op in program_ids:
        axis = op.attrs["axis"]
        if not all(_is_tile_index_use(use, axis, users) for use in users[op.result]):
            found.refused.setdefault(axis, f"program_id({axis}) is used other than as a tile index "
                                           f"'program_id({axis}) * S :+ S' (at {op.loc})")
    for axis, names in found.sizes.items():
        shared = [n for n in names if any(n in other for a, other in found.sizes.items() if a != axis)]
        if shared:
            found.refused.setdefault(axis, f"size '{shared[0]}' follows two grid axes")
        as_value = sorted(names & used_sizes)
        if as_value:
            found.refused.setdefault(axis, f"size '{as_value[0]}' is used as a value, and a task sees less of it")
        elsewhere = next(((n, op) for n, op in other_indices if n in names), None)
        if elsewhere is not None:
            found.refused.setdefault(axis, f"a dimension of size '{elsewhere[0]}' is also indexed otherwise "
                                           f"(at {elsewhere[1].loc})")
        for written in sorted(found.writes):
            dims = next(p.dims for p in params if p.name == written)
            if not any(d in names for d in dims):
                found.refused.setdefault(axis, f"'{written}' is written, but none of its dimensions follows "
                                               f"axis {axis}, so every task would write all of it")
    found.grid_problem = _grid_problem(func, program_ids, found)
    return found


def program_tile(index: Value, size: int | None) -> tuple[int, int] | None:
    """(axis, S) when `index` with tile length `size` is `program_id(axis) * S` with S == size,
    or `program_id(axis)` indexing a single element (S = 1)."""
    op = index.owner if isinstance(index.owner, Op) else None
    if op is None:
        return None
    if op.opcode == "program_id":
        return (op.attrs["axis"], 1) if size in (None, 1) else None
    if op.opcode != "mul" or size is None:
        return None
    for pid, factor in (op.operands, reversed(op.operands)):
        pid_op, factor_op = pid.owner, factor.owner
        if getattr(pid_op, "opcode", None) == "program_id" and getattr(factor_op, "opcode", None) == "const" \
                and factor_op.attrs["value"] == size:
            return pid_op.attrs["axis"], size
    return None


def _is_tile_index_use(use: tuple[Op, int], axis: int, users: dict[Value, list[tuple[Op, int]]]) -> bool:
    """Whether a use of program_id(axis) is a tile index, directly or through `* S`."""
    op, position = use
    if op.opcode in MEMORY_OPS:
        return _indexes_tile(op, position, axis)
    if op.opcode == "mul":
        return all(user.opcode in MEMORY_OPS and _indexes_tile(user, pos, axis) for user, pos in users[op.result])
    return False


def _indexes_tile(op: Op, position: int, axis: int) -> bool:
    sizes = op.attrs.get("sizes")
    if sizes is None:  # a gather's, scatter's or atomic's indices are element indices, not tile starts
        return False
    if not 1 <= position <= len(sizes):
        return False  # the value stored, not an index
    tile = program_tile(op.operands[position], sizes[position - 1])
    return tile is not None and tile[0] == axis


def _grid_problem(func: Function, program_ids: list[Op], found: ConfigAccess) -> str | None:
    """Why the launcher cannot infer this kernel's grid (so a call must give one), or None."""
    hints = grid_hints(func)
    used = sorted({op.attrs["axis"] for op in program_ids} | set(found.refused) | set(found.tiles))
    missing = [axis for axis in used if hints[axis] is None]
    if missing:
        return (f"the launcher cannot infer its grid along axis {missing[0]} (no store at "
                f"'program_id({missing[0]}) * T :+ T' along a size)")
    return None
