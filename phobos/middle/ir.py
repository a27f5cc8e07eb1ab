# The SSA intermediate representation shared by the tile level and the thread level.
#
# A Function holds one Block; a Block holds Ops and may have arguments; an Op
# has operands and results (Values), attributes, a Loc, and may own nested
# blocks (regions).  Control flow is structured, as in MLIR's scf dialect:
#
#   for   (lo, hi, init...) {step}  body(iv, carried...) ... yield(next...)  -> final carried
#   while (init...)                 cond(carried...) ... yield(go)
#                                   body(carried...) ... yield(next...)       -> final carried
#   if    (cond)                    then() ... yield(v...)  else() ... yield(v...)  -> v...
#
# so loops and branches need no phi nodes: block arguments and `yield` carry
# values in and out, a value defined in an enclosing block is visible inside,
# and passes can reason about loops without building a CFG.
#
# The same classes serve both levels.  At the tile level values may be tiles
# and tensors; after lowering (phobos/lower/) every value is a scalar of one
# thread.  What an opcode means, whether it is pure (no memory or barrier
# effects, so that CSE, DCE and LICM may move or drop it) and how many results
# it has is in OPCODES.
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..configuration import config_text
from ..errors import Loc
from ..types import DType, ScalarType, TensorType, TileType

IRType = ScalarType | TileType | TensorType


@dataclass(frozen=True)
class OpInfo:
    pure: bool
    doc: str


def _ops(pure: bool, names: str, doc: str) -> dict[str, OpInfo]:
    return {n: OpInfo(pure, doc) for n in names.split()}


#: The element-wise math functions: one opcode per builtin (atan2 of two operands, the others of one).
MATH_OPCODES = frozenset(("exp exp2 exp10 expm1 log log2 log10 log1p sqrt rsqrt tanh sigmoid erf erfc gelu sin cos tan "
                          "asin acos atan atan2 sinh cosh asinh acosh atanh").split())

#: The opcodes applied element for element: on tiles, the same op on each element of its operands, which
#: share the result's shape (lowered one register slot at a time, all in the result's layout).
ELEMENTWISE = frozenset({"add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "shl", "shr", "neg",
                         "not", "abs", "cmp", "select", "cast", "fma", "mulhi", "bitcast", "floor", "ceil", "round",
                         "trunc", *MATH_OPCODES})

OPCODES: dict[str, OpInfo] = {
    # values of every level
    **_ops(True, "const", "a constant (a tile: every element equal); attrs value"),
    **_ops(True, "param", "kernel parameter; attrs index, name (tensors: the base pointer at thread level)"),
    **_ops(True, "program_id num_programs", "grid index / grid size; attrs axis"),
    **_ops(True, "cluster_index", "the rank of the CTA among those of its cluster that run the program instance "
                                  "(i32; 0 without the CLUSTER knob)"),
    **_ops(False, "cluster_reduce", "cluster_reduce(x) -> the scalar x combined over the CTAs of the cluster in rank "
                                    "order; attrs kind (sum max min)"),
    **_ops(True, "add sub mul div rem min max and or xor shl shr neg not abs",
           "element-wise arithmetic and logic (integer div/rem truncate; their divisor is never 0 at run "
           "time: irgen selects 1 for a divisor that may be 0, since PTX's div by 0 has no defined value)"),
    **_ops(True, "cmp", "element-wise comparison giving bool; attrs pred in eq ne lt le gt ge"),
    **_ops(True, "select", "select(cond, a, b): a where cond, else b"),
    **_ops(True, "cast", "conversion to the result dtype (float->int truncates toward zero)"),
    **_ops(True, "fma", "fma(a, b, c) = a * b + c with one rounding"),
    **_ops(True, "mulhi", "the high half of the full product of two integers"),
    **_ops(True, "floor ceil round trunc", "rounding of floats to integer values (round: halves to even)"),
    **_ops(True, "bitcast", "the operand's bits as the result dtype (of the same width)"),
    **_ops(True, " ".join(sorted(MATH_OPCODES)), "element-wise math (atan2: of two operands)"),
    **_ops(True, "rcp", "1 / x"),
    **_ops(True, "ex2_approx lg2_approx rsqrt_approx sin_approx cos_approx",
           "the GPU's approximate math instructions (thread level; see mathlib.py)"),
    # tile level
    **_ops(True, "broadcast", "operand broadcast to the result tile shape (numpy rules; attrs axes: the "
                              "result axes of the operand's dims, when not the last ones)"),
    **_ops(True, "arange", "the i32 tile start..end-1; attrs start"),
    **_ops(True, "reshape", "same elements, new shape"),
    **_ops(True, "extract", "part of a tile; attrs starts, sizes (None: single index, dropped)"),
    **_ops(True, "reduce", "reduction; attrs kind (sum max min argmax argmin, or combine: several operands "
                           "and results, and a region combine(a..., b...) -> yield(c...)), axis (None: all)"),
    **_ops(True, "scan", "inclusive scan along attrs axis; attrs kind (add mul, or combine, as reduce)"),
    **_ops(True, "permute", "the operand with its dims in attrs order"),
    **_ops(True, "join", "join(a, b): a and b along a new last dim of extent 2"),
    **_ops(True, "concat", "concat(a, b): a then b along attrs axis"),
    **_ops(True, "dot", "dot(a, b[, acc]) matrix product, accumulated into acc when given"),
    **_ops(False, "load", "load(tensor, index...) a slice; attrs sizes (None: single index)"),
    **_ops(False, "store", "store(tensor, index..., value); attrs sizes"),
    **_ops(False, "gather", "gather(tensor, index...): per dim a scalar index or a tile of the result's shape"),
    **_ops(False, "scatter", "scatter(tensor, index..., value): indices as gather's"),
    **_ops(False, "atomic", "atomic(tensor, index..., value[, value2]) -> old values; indices as gather's; "
                            "attrs op (add max min and or xor xchg cas), used (the old values are read), ordered "
                            "(acquire-release: frontend.builtins.ORDERED_ATOMICS)"),
    **_ops(False, "print", "print(values...): a line per element; attrs text"),
    **_ops(False, "assert", "assert(cond[, lhs, rhs]): stops the kernel where cond is false; attrs text, compare "
                            "(the source operator when cond is `lhs compare rhs`, whose values a failure shows)"),
    # thread level
    **_ops(True, "tid", "thread index in the CTA (x)"),
    **_ops(True, "size", "a launch-bound size; attrs name"),
    **_ops(True, "smem_addr", "address of the shared-memory buffer plus attrs offset (u32)"),
    **_ops(True, "mul_wide", "i32 x i32 -> i64 product"),
    **_ops(True, "shfl_bfly", "shfl_bfly(x, lane_mask): x of lane (laneid ^ lane_mask)"),
    **_ops(False, "ld_global", "ld_global(addr[, pred]) -> vec values; attrs dtype, vec (masked: 0 where !pred)"),
    **_ops(False, "st_global", "st_global(addr, values...[, pred]); attrs dtype, vec"),
    **_ops(False, "atom_global", "atom_global(addr, value[, value2][, pred]) [-> old]; attrs op, type (PTX), "
                                 "ordered (acquire-release at GPU scope)"),
    **_ops(True, "shfl_up", "shfl_up(x, delta): x of lane (laneid - delta), this lane's own below 0"),
    **_ops(False, "printf", "printf(values...[, pred]): vprintf of attrs format"),
    **_ops(False, "trap", "trap(pred): stops the kernel with an error where pred is true"),
    **_ops(False, "ld_shared", "ld_shared(addr) -> vec values; attrs dtype, vec, cluster (addr is a shared::cluster address, from mapa)"),
    **_ops(False, "st_shared", "st_shared(addr, values...[, pred]); attrs dtype, vec"),
    **_ops(False, "cp_async", "cp_async(smem_addr, gaddr[, src_bytes]) copies attrs bytes global->shared"),
    **_ops(False, "cp_async_commit", "closes a group of cp.async copies"),
    **_ops(False, "cp_async_wait", "waits until at most attrs pending groups remain"),
    **_ops(False, "barrier", "barrier([id]): bar.sync: every thread of the CTA arrives before any goes on (attrs "
                             "threads: only that many, the first ones - a named barrier; or the threads of barrier "
                             "`id`, an i32 value)"),
    **_ops(False, "mbarrier_init", "mbarrier_init(addr[, pred]): an mbarrier in shared memory expecting attrs count arrivals "
                                   "a phase"),
    **_ops(False, "mbarrier_arrive", "mbarrier_arrive(addr[, pred]): this thread arrives (release)"),
    **_ops(False, "mbarrier_inval", "mbarrier_inval(addr[, pred]): the mbarrier ends; its bytes may be reused"),
    **_ops(False, "mbarrier_wait", "mbarrier_wait(addr, parity): waits until the phase of that parity has completed "
                                   "(acquire)"),
    **_ops(False, "mbarrier_expect_tx", "mbarrier_expect_tx(addr[, pred]): arrives, expecting attrs bytes of copies"),
    **_ops(True, "tensor_map_addr", "the generic address of tensor map parameter attrs index (u64)"),
    **_ops(False, "tma_load", "tma_load(smem, map, c0, c1, mbarrier[, pred]): a box of the map at (c0 inner, c1) into "
                              "smem + attrs offset, completing bytes on the mbarrier; attrs multicast (a CTA mask: "
                              "the box lands, and completes bytes, at the same offsets in each CTA of the cluster "
                              "it names)"),
    **_ops(False, "tma_store", "tma_store(smem, map, c0, c1[, pred]): the box of the map at (c0 inner, c1) from smem + "
                               "attrs offset to global memory (elements outside the tensor are not written), in "
                               "this thread's open bulk group"),
    **_ops(False, "bulk_commit", "bulk_commit([pred]): this thread's bulk copies since the last one form a group"),
    **_ops(False, "bulk_wait", "bulk_wait([pred]): waits until at most attrs pending of this thread's bulk groups "
                               "remain (attrs read: until they have read their source only)"),
    **_ops(True, "cluster_rank", "the CTA's rank in its cluster (u32)"),
    **_ops(True, "mapa", "mapa(addr, rank) -> the shared::cluster address of shared address addr in CTA rank of the "
                         "cluster (u32)"),
    **_ops(False, "mbarrier_arrive_cluster", "mbarrier_arrive_cluster(addr[, pred]): this thread arrives (release, "
                                             "cluster scope) on the mbarrier at shared::cluster address addr"),
    **_ops(False, "cluster_barrier", "every thread of every CTA of the cluster arrives (release) before any goes on "
                                     "(acquire); attrs init: mbarrier initialisations are made visible to the cluster "
                                     "first"),
    **_ops(False, "setmaxnreg", "this warpgroup's registers a thread become attrs count (attrs inc: more)"),
    **_ops(False, "exit", "the thread ends"),
    **_ops(False, "ldmatrix", "ldmatrix(addr) -> count b32 fragments of 8x8 16-bit matrices in shared memory; "
                              "attrs count (1, 2, 4), trans, offset"),
    **_ops(True, "mma", "mma(a..., b..., c0..c3) -> d0..d3: one warp's tensor-core product of a 16 x 8 tile; "
                        "attrs shape (m16n8k16, m16n8k8), type (bf16 f16 tf32: of a and b)"),
    **_ops(True, "pack_half2", "pack_half2(lo, hi) -> b32: two f32 rounded to 16-bit floats; attrs dtype"),
    **_ops(True, "pack_f8x4", "pack_f8x4(x0, x1, x2, x3) -> b32: four f32 converted to 8-bit floats, x0 the "
           "lowest byte; attrs dtype"),
    **_ops(True, "tf32", "tf32(x) -> b32: f32 x rounded to TF32, attrs mode (rna: nearest, ties away; rn: ties to even, sm_90+)"),
    **_ops(True, "tf32_low", "tf32_low(x, high) -> b32: x - high (high a TF32 pattern) rounded to TF32"),
    **_ops(False, "wgmma", "wgmma(desc_a, desc_b, acc...) -> acc...: one warpgroup's asynchronous product of a "
                           "64-row tile (the results take the accumulators' registers); attrs n, k, type, fence "
                           "(a wgmma.fence first), registers_a (the operands begin with the four b32 A "
                           "fragments, not desc_a), zero (no acc operands: the product starts from zero)"),
    **_ops(False, "wgmma_commit", "closes a group of wgmma"),
    **_ops(False, "wgmma_wait", "wgmma_wait(fragments...): waits until at most attrs pending wgmma groups "
                                "remain; the A fragments the groups read are kept until then"),
    **_ops(False, "fence_proxy_async", "makes this thread's shared-memory writes visible to the tensor cores' reads"),
    # structure
    **_ops(False, "for", "for(lo, hi, init...) body(iv, carried...); attrs step"),
    **_ops(False, "while", "while(init...) cond(carried...) body(carried...)"),
    **_ops(False, "if", "if(cond) then() else(); results from their yields"),
    **_ops(False, "yield", "ends a region, passing its values out"),
}

COMMUTATIVE = {"add", "mul", "min", "max", "and", "or", "xor"}


@dataclass(eq=False)
class Value:
    type: IRType
    id: int
    name: str = ""  # a hint for printing (the source name, when there is one)
    owner: "Op | Block | None" = field(default=None, repr=False)

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"%{self.id}"


@dataclass(eq=False)
class Block:
    args: list[Value] = field(default_factory=list)
    ops: list["Op"] = field(default_factory=list)
    parent: "Op | None" = field(default=None, repr=False)

    @property
    def terminator(self) -> "Op | None":
        return self.ops[-1] if self.ops and self.ops[-1].opcode == "yield" else None


@dataclass(eq=False)
class Op:
    opcode: str
    operands: list[Value]
    results: list[Value]
    attrs: dict = field(default_factory=dict)
    regions: list[Block] = field(default_factory=list)
    loc: Loc | None = None

    @property
    def result(self) -> Value:
        return self.results[0]

    @property
    def pure(self) -> bool:
        return OPCODES[self.opcode].pure


@dataclass(frozen=True)
class KernelParam:
    """One parameter of the compiled kernel, in PTX order (tensor sizes come last)."""

    name: str
    # 'tensor' (a pointer), 'scalar', 'size' (an i32 bound from tensor shapes), 'tensor_map', or 'programs'
    # (a persistent kernel's virtual grid along axis dims[0], which the launcher fills with the call's grid)
    kind: str
    dtype: DType
    dims: tuple[str | int, ...] = ()  # tensors: size names or literal extents
    written: bool = False  # tensors the kernel stores into
    box: tuple[int, ...] = ()  # a tensor_map: the box it moves (rows, columns) of tensor `name` (TMA, sm_90)
    rounds: bool = False  # a tensor_map of f32 data typed tf32: the copy rounds it to TF32 (nearest even)

    @property
    def map_dtype(self) -> str:
        """A tensor_map's element type, as tensor_map.DTYPES names it."""
        return "tf32" if self.rounds else self.dtype.value


@dataclass(eq=False)
class Function:
    name: str
    body: Block
    attrs: dict = field(default_factory=dict)
    _ids: "itertools.count" = field(default_factory=lambda: itertools.count(), repr=False)

    def new_value(self, type_: IRType, name: str = "") -> Value:
        return Value(type_, next(self._ids), name)


# ------------------------------------------------------------------- building
class Builder:
    """Appends ops to a block; the one way passes and generators create IR."""

    def __init__(self, func: Function, block: Block | None = None, loc: Loc | None = None):
        self.func = func
        self.block = block if block is not None else func.body
        self.loc = loc
        self.index: int | None = None  # insertion point; None = at the end

    def op(self, opcode: str, operands: list[Value], result_types: list[IRType], attrs: dict | None = None,
           regions: list[Block] | None = None, hint: str = "") -> Op:
        assert opcode in OPCODES, opcode
        results = [self.func.new_value(t, hint) for t in result_types]
        op = Op(opcode, list(operands), results, dict(attrs or {}), list(regions or []), self.loc)
        for r in results:
            r.owner = op
        for region in op.regions:
            region.parent = op
        if self.index is None:
            self.block.ops.append(op)
        else:
            self.block.ops.insert(self.index, op)
            self.index += 1
        return op

    def value(self, opcode: str, operands: list[Value], type_: IRType, hint: str = "", **attrs) -> Value:
        return self.op(opcode, operands, [type_], attrs, hint=hint).result

    def const(self, value, type_: IRType) -> Value:
        return self.value("const", [], type_, value=value)

    def block_arg(self, block: Block, type_: IRType, name: str = "") -> Value:
        v = self.func.new_value(type_, name)
        v.owner = block
        block.args.append(v)
        return v


# ------------------------------------------------------------------- walking
def walk(block: Block):
    """Every op in `block` and its nested regions, in program order (pre-order)."""
    for op in block.ops:
        yield op
        for region in op.regions:
            yield from walk(region)


#: The tile-level ops that write a tensor.
WRITING_OPCODES = ("store", "scatter", "atomic")


def writes_memory(op: Op) -> bool:
    """Whether `op`, or an op in its regions, writes a tensor."""
    return op.opcode in WRITING_OPCODES or any(o.opcode in WRITING_OPCODES for r in op.regions for o in walk(r))


def uses(func: Function) -> dict[Value, int]:
    """How many times each value is used as an operand."""
    count: dict[Value, int] = {}
    for op in walk(func.body):
        for v in op.operands:
            count[v] = count.get(v, 0) + 1
    return count


def replace_uses(func: Function, mapping: dict[Value, Value]) -> None:
    """Rewrite operands through `mapping` (following chains) everywhere in `func`."""
    if not mapping:
        return

    def final(v: Value) -> Value:
        while v in mapping:
            v = mapping[v]
        return v

    for op in walk(func.body):
        op.operands = [final(v) if v in mapping else v for v in op.operands]


# ------------------------------------------------------------------- printing
def format_type(t: IRType) -> str:
    if isinstance(t, TileType):
        return f"{t.dtype}[{'x'.join(map(str, t.shape))}]"
    if isinstance(t, TensorType):
        return f"tensor<{t.dtype}>"
    return str(t.dtype)


def _format_attr(v) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_format_attr(x) for x in v) + "]"
    return str(v)


def format_function(func: Function) -> str:
    """The textual form of a function, as printed by --dump-ir."""
    params = ", ".join(f"{p.name}: {p.kind} {p.dtype}" for p in func.attrs.get("params", []))
    config = func.attrs.get("config")
    lines = [f"func @{func.name}({params})" + (f" config({config_text(config)})" if config else "") + " {"]
    _format_block(func.body, 1, lines)
    lines.append("}")
    return "\n".join(lines)


def _value_name(v: Value) -> str:
    return f"%{v.id}" + (f".{v.name}" if v.name else "")


def _format_block(block: Block, depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    for op in block.ops:
        res = ", ".join(f"{_value_name(r)}: {format_type(r.type)}" for r in op.results)
        head = f"{res} = " if res else ""
        args = ", ".join(_value_name(v) for v in op.operands)
        attrs = " ".join(f"{k}={_format_attr(v)}" for k, v in op.attrs.items())
        loc = f"  // {op.loc.line}:{op.loc.col}" if op.loc else ""
        lines.append(f"{pad}{head}{op.opcode}({args}){' {' + attrs + '}' if attrs else ''}{loc}")
        for i, region in enumerate(op.regions):
            rargs = ", ".join(f"{_value_name(a)}: {format_type(a.type)}" for a in region.args)
            label = {"if": ("then", "else"), "while": ("cond", "body")}.get(op.opcode, ("body", "combine"))[
                i if op.opcode in ("if", "while") else int(op.opcode in ("reduce", "scan"))]
            lines.append(f"{pad}  {label}({rargs}):")
            _format_block(region, depth + 2, lines)


# ------------------------------------------------------------------ verifying
class VerifyError(Exception):
    """The IR broke one of its own invariants: a bug in a pass, never a user error."""


def verify(func: Function, thread_level: bool = False) -> None:
    """Check SSA dominance, region structure, and (at thread level) that only scalars remain."""
    defined: set[Value] = set()

    def check_block(block: Block, scope: set[Value]) -> None:
        visible = set(scope) | set(block.args)
        for a in block.args:
            if a in defined:
                raise VerifyError(f"{a!r} defined twice")
            defined.add(a)
        for op in block.ops:
            if op.opcode not in OPCODES:
                raise VerifyError(f"unknown opcode {op.opcode}")
            for v in op.operands:
                if v not in visible:
                    raise VerifyError(f"{op.opcode}: operand {v!r} does not dominate its use")
            if op.opcode == "yield" and op is not block.ops[-1]:
                raise VerifyError("yield must end its block")
            for region in op.regions:
                if region.terminator is None:
                    raise VerifyError(f"{op.opcode}: region without yield")
                check_block(region, visible)
            _check_structure(op)
            for r in op.results:
                if r in defined:
                    raise VerifyError(f"{r!r} defined twice")
                if thread_level and not isinstance(r.type, ScalarType):
                    raise VerifyError(f"{op.opcode}: {r!r} is {format_type(r.type)} at thread level")
                defined.add(r)
                visible.add(r)

    check_block(func.body, set())


def _check_structure(op: Op) -> None:
    if op.opcode == "for":
        body = op.regions[0]
        carried = len(op.operands) - 2
        if len(body.args) != carried + 1 or len(op.results) != carried:
            raise VerifyError("for: carried values, block arguments and results disagree")
        if len(body.terminator.operands) != carried:
            raise VerifyError("for: yield passes the wrong number of values")
        for init, arg, res, nxt in zip(op.operands[2:], body.args[1:], op.results, body.terminator.operands):
            if not (init.type == arg.type == res.type == nxt.type):
                raise VerifyError(f"for: carried value types differ: {format_type(init.type)}, "
                                  f"{format_type(arg.type)}, {format_type(res.type)}, {format_type(nxt.type)}")
    elif op.opcode == "while":
        cond, body = op.regions
        n = len(op.operands)
        if not (len(cond.args) == len(body.args) == len(op.results) == len(body.terminator.operands) == n):
            raise VerifyError("while: carried values, block arguments and results disagree")
        if len(cond.terminator.operands) != 1 or cond.terminator.operands[0].dtype is not DType.BOOL:
            raise VerifyError("while: the condition region must yield one bool")
    elif op.opcode == "if":
        if len(op.regions) != 2:
            raise VerifyError("if needs a then and an else region")
        for region in op.regions:
            ys = region.terminator.operands
            if [v.type for v in ys] != [r.type for r in op.results]:
                raise VerifyError("if: yielded types differ from the results")
