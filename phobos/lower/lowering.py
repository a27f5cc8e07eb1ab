# Lowering tiles onto threads: tile-level IR -> thread-level IR.
#
# Every tile value gets a layout (layout.py) and becomes one scalar SSA value
# per register slot of a thread; every op becomes the per-thread code that
# computes its slots.  The choices that matter for speed are made here:
#
# * Layouts are assigned before any code is written (`assign_layouts`): values
#   joined by element-wise ops, loop-carried values and branch results share a
#   layout; a dot's result anchors its group to the register-blocked dot
#   layout; a reduction's result takes the collapsed layout of its operand, and
#   a broadcast's operand the collapsed layout of its result.  So `acc`, the
#   C tile loaded for `beta * c_old` and the stored result of sgemm all live in
#   the dot layout, and softmax's row maxima are where the row elements are.
#   Only a genuine conflict costs a trip through shared memory (`relayout`).
# * Tensor slices follow the edge contract: elements outside the tensor read 0
#   and are not written.  Each load and store tests once, uniformly for the
#   CTA, whether the whole slice is inside the tensor (and, for 128-bit
#   accesses, aligned); if so it runs unmasked vector accesses, else masked
#   scalar ones.  Tiles away from the edges pay one branch.
# * `dot` stages its operands in shared memory (A transposed, so both are read
#   as 128-bit vectors along M and N) and each thread computes its block of the
#   product with fully unrolled fused multiply-adds.
# * Reductions combine within a thread, then across lanes with butterfly
#   shuffles, then across warps through shared memory.
#
# Shared memory is one scratch buffer, reused by every op that needs one; each
# such op starts with a barrier (no thread still reads the previous contents)
# and puts a barrier between its writes and its reads.
from __future__ import annotations

from dataclasses import dataclass

from ..configuration import Knobs
from ..errors import ResourceError, UnsupportedError
from ..middle.ir import Block, Builder, Function, Op, Value, uses, walk
from ..middle.passes.cse import freeze
from ..middle.passes.fold import evaluate, identity
from .layout import WARP, Layout, Term, blocked, dot_layout
from ..types import DType, ScalarType, TensorType, TileType

ELEMENTWISE = {"add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "neg", "not", "abs",
               "cmp", "select", "cast", "fma", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh",
               "sigmoid", "erf", "gelu", "sin", "cos"}
DEFAULT_MAX_THREADS = 256
DOT_UNROLL_LIMIT = 64  # a dot's K up to this is fully unrolled; beyond, a loop of DOT_STEP steps
DOT_STEP = 16
DEFAULT_STAGES = 3  # depth of the cp.async pipeline of a K loop (autotune parameter STAGES)
DEFAULT_GROUP_M = 8  # row blocks per group in the grouped order of program ids (autotune parameter GROUP_M)
SMEM_ALIGN = 16
I32 = ScalarType(DType.I32)
I64 = ScalarType(DType.I64)
U32 = ScalarType(DType.U32)
BOOL = ScalarType(DType.BOOL)


@dataclass
class TileRegs:
    """A lowered tile: its layout and one value per register slot."""

    layout: Layout
    regs: list[Value]


@dataclass
class TensorRef:
    """A lowered tensor: base address (global, i64), dims (i32 values), element type."""

    ptr: Value
    dims: list[Value]
    dtype: DType
    read_only: bool


# ------------------------------------------------------------------ threads
def choose_threads(func: Function) -> int:
    """Threads per CTA: 32 * WARPS when the kernel has that autotune parameter, else a guess.

    The guess aims at 8x8 dot products per thread when the kernel has a dot, and
    otherwise at about 4 elements per thread (one 128-bit vector of f32), between
    one warp and 256 threads: for memory-bound kernels more threads with one
    vector each keep more requests in flight than fewer threads with several.
    """
    warps = func.attrs.get("knobs", Knobs()).warps
    if warps is not None:
        return warps * WARP
    dots = [op.result.type.size for op in walk(func.body) if op.opcode == "dot"]
    if dots:
        want = max(dots) // 64
    else:
        sizes = [r.type.size for op in walk(func.body) for r in op.results if isinstance(r.type, TileType)]
        want = max(sizes, default=0) // 4
    threads = WARP
    while threads < want and threads < DEFAULT_MAX_THREADS:
        threads *= 2
    return threads


# ------------------------------------------------------------------ layouts
class _Groups:
    """Union-find over tile values."""

    def __init__(self):
        self.parent: dict[Value, Value] = {}

    def find(self, v: Value) -> Value:
        self.parent.setdefault(v, v)
        while self.parent[v] is not v:
            self.parent[v] = self.parent[self.parent[v]]
            v = self.parent[v]
        return v

    def union(self, *vs: Value) -> None:
        vs = [v for v in vs if isinstance(v.type, TileType)]
        for v in vs[1:]:
            a, b = self.find(vs[0]), self.find(v)
            if a is not b:
                self.parent[b] = a


def assign_layouts(func: Function, threads: int) -> dict[Value, Layout]:
    """A layout for every tile value; see the module header for the rules."""
    groups = _Groups()
    ops = list(walk(func.body))
    tiles: list[Value] = []
    for op in ops:
        for r in op.results:
            if isinstance(r.type, TileType):
                tiles.append(r)
                groups.find(r)
        for region in op.regions:
            for a in region.args:
                if isinstance(a.type, TileType):
                    tiles.append(a)
        if op.opcode in ELEMENTWISE:
            groups.union(op.result, *op.operands)
        elif op.opcode == "dot" and len(op.operands) == 3:
            groups.union(op.result, op.operands[2])
        elif op.opcode == "for":
            body = op.regions[0]
            for init, arg, res, nxt in zip(op.operands[2:], body.args[1:], op.results, body.ops[-1].operands):
                groups.union(init, arg, res, nxt)
        elif op.opcode == "if":
            for i, res in enumerate(op.results):
                groups.union(res, *(region.ops[-1].operands[i] for region in op.regions))

    chosen: dict[Value, Layout] = {}
    for op in ops:
        if op.opcode == "dot":
            root = groups.find(op.result)
            chosen.setdefault(root, dot_layout(op.result.type.shape, threads))

    def propagate() -> bool:
        changed = False
        for op in ops:
            if op.opcode == "reduce" and op.attrs["axis"] is not None:
                src, dst = groups.find(op.operands[0]), groups.find(op.result)
                if src in chosen and dst not in chosen:
                    chosen[dst] = chosen[src].collapse([op.attrs["axis"]])
                    changed = True
            elif op.opcode == "broadcast" and isinstance(op.operands[0].type, TileType):
                src, dst = groups.find(op.operands[0]), groups.find(op.result)
                if dst in chosen and src not in chosen:
                    chosen[src] = _broadcast_source_layout(chosen[dst], op.operands[0].type.shape)
                    changed = True
        return changed

    while True:
        while propagate():
            pass
        undecided = next((t for t in tiles if groups.find(t) not in chosen), None)
        if undecided is None:
            break
        chosen[groups.find(undecided)] = blocked(undecided.type.shape, threads)
    return {t: chosen[groups.find(t)] for t in tiles}


def _broadcast_dims(small: tuple[int, ...], big: tuple[int, ...]) -> list[int]:
    ext = (1,) * (len(big) - len(small)) + tuple(small)
    return [d for d in range(len(big)) if ext[d] == 1 and big[d] != 1]


def _broadcast_source_layout(big: Layout, small_shape: tuple[int, ...]) -> Layout:
    """The layout of a tile of `small_shape` that broadcasts onto `big` with no data movement."""
    collapsed = big.collapse(_broadcast_dims(small_shape, big.shape))
    return _drop_leading(collapsed, len(big.shape) - len(small_shape))


def _drop_leading(layout: Layout, n: int) -> Layout:
    """Remove `n` leading dims of extent 1 (rank reduction for broadcasts like [N] -> [M, N])."""
    if n == 0:
        return layout
    return Layout(layout.shape[n:], layout.threads, layout.terms[n:], tuple(o[n:] for o in layout.offsets),
                  layout.replicas)


# ------------------------------------------------------------------ lowering
class Lowering:
    def __init__(self, func: Function, smem_limit: int, cp_async: bool):
        self.src = func
        self.smem_limit = smem_limit
        self.cp_async = cp_async
        self.use_count = uses(func)
        self.threads = choose_threads(func)
        self.layouts = assign_layouts(func, self.threads)
        attrs = dict(func.attrs, threads=self.threads)
        self.out = Function(func.name, Block(), attrs)
        self.entry = Builder(self.out, self.out.body)
        self.entry.index = 0
        self.b = Builder(self.out, self.out.body)
        self.vals: dict[Value, object] = {}
        self.smem_bytes = 0
        self.cache: dict[tuple, Value] = {}
        self.params = {p.name: i for i, p in enumerate(func.attrs["params"])}
        self.memo: dict[Block, dict] = {}
        self.parents: dict[Block, Block] = {}
        self.const_values: dict[tuple, Value] = {}  # (dtype, value) -> the const op's value, at entry
        self.constants: dict[int, object] = {}  # value id -> constant, for folding as ops are built
        self.group_m = self.program_grouping(func)

    @staticmethod
    def program_grouping(func: Function) -> int:
        """GROUP_M when given; else 8 for kernels with a dot that use program_id(0) and (1); else 1."""
        group_m = func.attrs.get("knobs", Knobs()).group_m
        if group_m is not None:
            return group_m
        ops = list(walk(func.body))
        axes = {op.attrs["axis"] for op in ops if op.opcode == "program_id"}
        return DEFAULT_GROUP_M if {0, 1} <= axes and any(op.opcode == "dot" for op in ops) else 1

    def run(self) -> Function:
        self.lower_block(self.src.body, self.out.body)
        self.out.attrs["shared_bytes"] = self.smem_bytes
        return self.out

    # ---------------------------------------------------------- small helpers
    def op(self, opcode: str, operands: list[Value], type_, **attrs) -> Value:
        """A pure scalar op, shared with an identical one in scope and folded when constant.

        Lowering writes the same index arithmetic for many elements; sharing and
        folding it as it is built keeps the IR - and the passes' work - small.
        """
        key = (opcode, type_.dtype, freeze(attrs) if attrs else None, *[v.id for v in operands])
        scope = self.b.block
        memo = self.memo
        while scope is not None:
            table = memo.get(scope)
            if table is not None:
                hit = table.get(key)
                if hit is not None:
                    return hit
            scope = self.parents.get(scope)
        value = None
        constants = self.constants
        known = [constants.get(v.id) for v in operands]
        if operands and None not in known:
            folded = evaluate(opcode, attrs, known, [v.dtype for v in operands], type_.dtype)
            if folded is not None:
                value = self.const(folded, type_.dtype)
        elif any(k is not None for k in known):
            same = identity(opcode, operands, known, type_.dtype)
            if same is not None and same.type == type_:
                value = same
        if value is None:
            value = self.b.value(opcode, operands, type_, **attrs)
        memo.setdefault(self.b.block, {})[key] = value
        return value

    def const(self, value, dtype: DType = DType.I32) -> Value:
        key = (dtype, value if not isinstance(value, float) else value.hex(), type(value))
        hit = self.const_values.get(key)
        if hit is None:
            hit = self.const_values[key] = self.entry.value("const", [], ScalarType(dtype), value=value)
            self.constants[hit.id] = value
        return hit

    def builder_for(self, region: Block, parent: Block, loc=None) -> Builder:
        """A builder for a region nested in `parent` (its values see the enclosing ones)."""
        self.parents[region] = parent
        return Builder(self.out, region, loc)

    def entry_value(self, key: tuple, make) -> Value:
        """A value that depends only on the thread, computed once at the kernel's start."""
        v = self.cache.get(key)
        if v is None:
            saved_loc = self.entry.loc
            self.entry.loc = self.b.loc
            v = self.cache[key] = make(self.entry)
            self.entry.loc = saved_loc
        return v

    def tid(self) -> Value:
        return self.entry_value(("tid",), lambda b: b.value("tid", [], I32))

    def digit(self, div: int, mod: int) -> Value:
        """(tid // div) % mod, once per kernel."""
        def make(b: Builder) -> Value:  # div and mod are powers of two, tid is never negative
            t = self.tid()
            q = t if div == 1 else b.value("shr", [t, b.const(div.bit_length() - 1, I32)], I32)
            return q if div * mod >= self.threads else b.value("and", [q, b.const(mod - 1, I32)], I32)
        return self.entry_value(("digit", div, mod), make)

    def thread_coord(self, terms: tuple[Term, ...]) -> Value:
        """The thread part of a coordinate: sum of digit * scale over the terms (i32)."""
        def make(b: Builder) -> Value:
            acc = b.const(0, I32)
            for t in terms:
                d = self.digit(t.div, t.mod)
                part = d if t.scale == 1 else b.value("mul", [d, b.const(t.scale, I32)], I32)
                acc = part if acc.owner.opcode == "const" else b.value("add", [acc, part], I32)
            return acc
        return self.entry_value(("coord", terms), make)

    def coord(self, layout: Layout, r: int, d: int) -> Value:
        base = self.thread_coord(layout.terms[d])
        off = layout.offsets[r][d]
        return base if off == 0 else self.op("add", [base, self.const(off)], I32)

    def slot_valid(self, layout: Layout, r: int, dims=None) -> Value | None:
        """Predicate: register r holds a real element (not padding) along `dims`; None if always."""
        preds = []
        for d in (range(layout.rank) if dims is None else dims):
            if not layout.always_valid(r, d):
                def make(b: Builder, d=d) -> Value:
                    c = b.value("add", [self.thread_coord(layout.terms[d]), b.const(layout.offsets[r][d], I32)], I32)
                    return b.value("cmp", [c, b.const(layout.shape[d], I32)], BOOL, pred="lt")
                preds.append(self.entry_value(("valid", layout.terms[d], layout.offsets[r][d], layout.shape[d]),
                                              make))
        return self.all_of(preds)

    def owner(self, layout: Layout, extra: tuple[tuple[int, int], ...] = ()) -> Value | None:
        """Predicate: this thread is the first of its replicas (None if the layout has none)."""
        preds = []
        for div, mod in layout.replicas + extra:
            preds.append(self.entry_value(("first", div, mod), lambda b, div=div, mod=mod: b.value(
                "cmp", [self.digit(div, mod), b.const(0, I32)], BOOL, pred="eq")))
        return self.all_of(preds)

    def all_of(self, preds: list[Value | None]) -> Value | None:
        preds = [p for p in preds if p is not None]
        if not preds:
            return None
        acc = preds[0]
        for p in preds[1:]:
            acc = self.op("and", [acc, p], BOOL)
        return acc

    def smem(self, nbytes: int) -> Value:
        """The scratch buffer's address; records how much of it this op uses."""
        self.smem_bytes = max(self.smem_bytes, _align(nbytes, SMEM_ALIGN))
        if self.smem_bytes > self.smem_limit:
            raise ResourceError(f"this needs {self.smem_bytes} bytes of shared memory; the target allows "
                                f"{self.smem_limit} per CTA (use smaller tiles)", self.b.loc)
        return self.entry_value(("smem",), lambda b: b.value("smem_addr", [], U32, offset=0))

    def barrier(self) -> None:
        self.b.op("barrier", [], [])

    # ---------------------------------------------------------- values
    def tile(self, v: Value) -> TileRegs:
        return self.vals[v]

    def in_layout(self, v: Value, layout: Layout) -> TileRegs:
        """The registers of tile `v` in `layout`, moving data through shared memory if needed."""
        t = self.vals[v]
        if t.layout == layout:
            return t
        return TileRegs(layout, self.relayout(t, layout, v.dtype))

    def flat(self, v: Value) -> list[Value]:
        x = self.vals[v]
        return x.regs if isinstance(x, TileRegs) else [x]

    def unflat(self, v: Value, regs: list[Value], pos: int) -> int:
        if isinstance(v.type, TileType):
            layout = self.layouts[v]
            self.vals[v] = TileRegs(layout, regs[pos:pos + layout.nregs])
            return pos + layout.nregs
        self.vals[v] = regs[pos]
        return pos + 1

    def lowered_types(self, v: Value) -> list[ScalarType]:
        if isinstance(v.type, TileType):
            return [ScalarType(v.dtype)] * self.layouts[v].nregs
        return [v.type]

    # ---------------------------------------------------------- blocks
    def lower_block(self, block: Block, out: Block) -> None:
        saved = self.b
        self.b = self.builder_for(out, saved.block) if out is not self.out.body else Builder(self.out, out)
        self.lower_ops(block.ops)
        self.b = saved

    def op_yield(self, op: Op) -> None:
        self.b.op("yield", [r for v in op.operands for r in self.flat(v)], [])

    def op_for(self, op: Op) -> None:
        plan = self.pipeline_plan(op)
        if plan is not None:
            self.lower_pipelined(op, *plan)
            return
        self.build_for(op, [], lambda body_ops, extra: (self.lower_ops(body_ops), [])[1])

    def build_for(self, op: Op, extra_inits: list[Value], lower_body) -> None:
        """The thread-level loop of tile-level `op`.

        It carries `extra_inits` first, then op's carried values, flattened to
        registers; `lower_body(ops, extra_args)` lowers the body's ops (all but
        the yield) and returns the next values of the extra ones.
        """
        lo, hi = self.vals[op.operands[0]], self.vals[op.operands[1]]
        inits = extra_inits + [r for v in op.operands[2:] for r in self.flat(v)]
        src_body = op.regions[0]
        body = Block()
        types = [v.type for v in extra_inits] + [t for v in op.results for t in self.lowered_types(v)]
        new = self.b.op("for", [lo, hi, *inits], types, dict(op.attrs), [body])
        outer = self.b
        self.b = self.builder_for(body, outer.block, outer.loc)
        self.vals[src_body.args[0]] = self.b.block_arg(body, src_body.args[0].type, src_body.args[0].name)
        extra_args = [self.b.block_arg(body, v.type) for v in extra_inits]
        for v in src_body.args[1:]:
            for t in self.lowered_types(v):
                self.b.block_arg(body, t, v.name)
        pos = 1 + len(extra_inits)
        for v in src_body.args[1:]:
            pos = self.unflat(v, body.args, pos)
        extra_next = lower_body(src_body.ops[:-1], extra_args)
        self.b.loc = src_body.ops[-1].loc
        self.b.op("yield", extra_next + [r for v in src_body.ops[-1].operands for r in self.flat(v)], [])
        self.b = outer
        pos = len(extra_inits)
        for v in op.results:
            pos = self.unflat(v, new.results, pos)

    def lower_ops(self, ops: list[Op]) -> None:
        fused = self.fusion_plan(ops)
        deferred = {o for plan in fused.values() for o in plan.ops + plan.loads}
        for op in ops:
            if op in deferred:
                continue  # computed with the store it feeds, a vector at a time
            self.b.loc = op.loc
            if op in fused:
                self.store_like(op, "st_global", fused[op])
                continue
            handler = getattr(self, "op_" + op.opcode, None)
            if handler is None:
                if op.opcode in ELEMENTWISE:
                    handler = self.elementwise
                else:
                    raise UnsupportedError(f"the back end cannot lower '{op.opcode}' yet", op.loc)
            handler(op)

    def fusion_plan(self, ops: list[Op]) -> dict[Op, "FusedStore"]:
        """Stores whose tile is an element-wise function of loads that nothing else uses.

        Such a store is lowered as load, compute, store one vector of registers
        at a time, so only a few of the loaded values are live at once - the
        epilogue `C = alpha * acc + beta * C` of a matrix product would
        otherwise hold all of C beside all of acc.  The loads move down to the
        store, which is only allowed when no store or atomic lies between.
        """
        index = {op: i for i, op in enumerate(ops)}
        producers = {r: op for op in ops for r in op.results}
        plans = {}
        for store in ops:
            if store.opcode != "store" or not isinstance(store.operands[-1].type, TileType):
                continue
            value = store.operands[-1]
            plan = FusedStore(self.layouts[value], [], [])
            if not self.fusable(value, producers, plan, top=True) or not plan.loads:
                continue
            first = min(index[ld] for ld in plan.loads)
            if any(self.writes_memory(o) for o in ops[first:index[store]]):
                continue
            plan.ops.sort(key=index.get)
            plans[store] = plan
        return plans

    def fusable(self, v: Value, producers: dict, plan: "FusedStore", top: bool = False) -> bool:
        """Add the loads and element-wise ops that compute v to the plan (always True: the rest are leaves)."""
        op = producers.get(v)
        if op is None or (not top and self.use_count[v] != 1) or not isinstance(v.type, TileType) \
                or self.layouts[v] != plan.layout:
            return True  # a leaf: computed before, in registers (moved to the store's layout if need be)
        if op.opcode == "load":
            plan.loads.append(op)
            return True
        if op.opcode in ELEMENTWISE or op.opcode == "const" or (
                op.opcode == "broadcast" and not isinstance(op.operands[0].type, TileType)):
            plan.ops.append(op)
            return all(self.fusable(x, producers, plan) for x in op.operands)
        return True

    @staticmethod
    def writes_memory(op: Op) -> bool:
        inner = [op] + [o for region in op.regions for o in walk(region)]
        return any(o.opcode in ("store", "atomic_add") for o in inner)

    # ---------------------------------------------------------- software pipelining
    def pipeline_plan(self, op: Op):
        """(dot, [load of A, load of B], ops computing their indices) when `op` is a loop to pipeline.

        The loop qualifies when the target has cp.async and its body is one
        `dot` whose operands are slices loaded in the body for it alone (in the
        dot's dtype), plus pure arithmetic - the K loop of a matrix product.
        """
        if not self.cp_async:
            return None
        body = op.regions[0].ops[:-1]
        dots = [o for o in body if o.opcode == "dot"]
        if len(dots) != 1:
            return None
        dot = dots[0]
        loads = [v.owner for v in dot.operands[:2]]
        if any(not isinstance(ld, Op) or ld.opcode != "load" or ld not in body or self.use_count[ld.result] != 1
               for ld in loads) or loads[0] is loads[1]:
            return None
        if any(ld.operands[0].dtype != dot.result.dtype for ld in loads):
            return None
        if any(o not in loads and o is not dot and (not o.pure or o.regions) for o in body):
            return None
        producers = {r: o for o in body for r in o.results}
        needed, stack = [], [v for ld in loads for v in ld.operands[1:]]
        while stack:
            v = stack.pop()
            o = producers.get(v)
            if o is not None and o not in needed:
                needed.append(o)
                stack += o.operands
        index_ops = [o for o in body if o in needed]
        return dot, loads, index_ops

    def lower_pipelined(self, op: Op, dot: Op, loads: list[Op], index_ops: list[Op]) -> None:
        """The K loop with its operand tiles copied global -> shared by cp.async, STAGES deep.

        Stage s of the ring buffer holds the tiles of iteration i when i = s
        (mod STAGES).  Before the loop, iterations 0..STAGES-2 are requested;
        at iteration i each thread waits for its copies of iteration i, a
        barrier makes everyone's visible (and says everyone is done with
        iteration i-1's stage), iteration i+STAGES-1 is requested into that
        stage, and the product is computed from stage i.  Each request is one
        cp.async group, empty when its iteration is past the end.
        """
        plan = dot_plan(loads[0].result.type.shape, loads[1].result.type.shape[1], dot.result.dtype,
                        self.threads)
        stages = self.src.attrs.get("knobs", Knobs()).stages or DEFAULT_STAGES
        while stages > 2 and stages * plan.stage_bytes > self.smem_limit:
            stages -= 1
        base = self.smem(stages * plan.stage_bytes)
        lo, hi = self.vals[op.operands[0]], self.vals[op.operands[1]]
        step = op.attrs["step"]
        before = "lt" if step > 0 else "gt"
        kt_arg = op.regions[0].args[0]

        def stage_address(index: Value) -> Value:
            offset = self.op("mul", [self.op("cast", [index], U32), self.const(plan.stage_bytes, DType.U32)], U32)
            return self.op("add", [base, offset], U32)

        def request(kt: Value, index: Value) -> None:
            """cp.async the operand tiles of the iteration with loop variable `kt` into stage `index`."""
            saved = {r: self.vals.get(r) for o in index_ops for r in o.results}
            saved[kt_arg] = self.vals.get(kt_arg)
            self.vals[kt_arg] = kt
            self.lower_ops(index_ops)
            enabled = self.op("cmp", [kt, hi], BOOL, pred=before)
            stage = stage_address(index)
            self.async_copy(loads[0], stage, 0, plan.lda, enabled)
            self.async_copy(loads[1], stage, plan.a_bytes, plan.ldb, enabled)
            self.b.op("cp_async_commit", [], [])
            self.vals.update(saved)

        # the prologue: requests for iterations 0 .. STAGES-2, as a loop (one copy of the code)
        prologue = Block()
        self.b.op("for", [self.const(0), self.const(stages - 1)], [], {"step": 1}, [prologue])
        outer = self.b
        self.b = self.builder_for(prologue, outer.block, outer.loc)
        s_arg = self.b.block_arg(prologue, I32, "stage")
        s_kt = self.op("cast", [s_arg], lo.type) if lo.dtype is not DType.I32 else s_arg
        request(self.op("add", [lo, self.op("mul", [s_kt, self.const(step, lo.dtype)], lo.type)], lo.type), s_arg)
        self.b.op("yield", [], [])
        self.b = outer

        def body(ops: list[Op], extra: list[Value]) -> list[Value]:
            (read,) = extra
            self.b.op("cp_async_wait", [], [], {"pending": stages - 2})
            self.barrier()
            kt = self.vals[kt_arg]
            ahead = self.op("add", [kt, self.const((stages - 1) * step, kt.dtype)], kt.type)
            at_start = self.op("cmp", [read, self.const(0)], BOOL, pred="eq")
            write = self.op("select", [at_start, self.const(stages - 1),
                                       self.op("sub", [read, self.const(1)], I32)], I32)
            request(ahead, write)
            self.lower_ops([o for o in ops if o not in loads and o is not dot and o not in index_ops])
            self.finish_dot(dot, plan, stage_address(read))
            at_end = self.op("cmp", [read, self.const(stages - 1)], BOOL, pred="eq")
            return [self.op("select", [at_end, self.const(0), self.op("add", [read, self.const(1)], I32)], I32)]

        self.build_for(op, [self.const(0)], body)
        self.b.op("cp_async_wait", [], [], {"pending": 0})
        self.barrier()

    def async_copy(self, load: Op, stage: Value, start: int, ld: int, enabled: Value) -> None:
        """Copy a load's slice into shared memory (row-major, rows `ld` apart) with cp.async.

        Inside the tensor and aligned: 16-byte copies.  Otherwise 4-byte copies,
        zero-filled outside the tensor (the edge contract).
        """
        tensor = self.vals[load.operands[0]]
        starts, sizes, tile_dims = self.slice_geometry(load, tensor)
        layout = blocked(load.result.type.shape, self.threads)
        eb = tensor.dtype.nbytes
        addrs = self.row_addresses(tensor, starts, tile_dims, layout)
        c0, c1 = self.thread_coord(layout.terms[0]), self.thread_coord(layout.terms[1])
        thread_index = self.op("add", [self.op("mul", [c0, self.const(ld)], I32), c1], I32)
        dst = self.smem_address(stage, thread_index, eb)
        width = self.vector_ok(tensor, starts, tile_dims, layout)
        fast = self.in_bounds(tensor, starts, sizes)
        if width > 1:
            fast = self.all_of([fast, self.aligned(tensor, starts, width)])
        fast = self.all_of([enabled, fast])
        outer = self.b
        regions = [Block(), Block()]
        self.b.op("if", [fast], [], {}, regions)
        self.b = self.builder_for(regions[0], outer.block, outer.loc)
        for group in self.access_groups(layout, width):
            i, j = layout.offsets[group[0]]
            addr, off = addrs[group[0]]
            pred = self.slot_valid(layout, group[0])
            self.b.op("cp_async", [dst, addr] + ([pred] if pred is not None else []), [],
                      {"bytes": width * eb, "offset": start + (i * ld + j) * eb, "goffset": off,
                       "masked": pred is not None})
        self.b.op("yield", [], [])
        self.b = self.builder_for(regions[1], outer.block, outer.loc)
        inner = [Block(), Block()]
        self.b.op("if", [enabled], [], {}, inner)
        self.b.op("yield", [], [])
        self.b = self.builder_for(inner[0], regions[1], outer.loc)
        for r in range(layout.nregs):
            i, j = layout.offsets[r]
            addr, off = addrs[r]
            valid = self.element_valid(tensor, starts, sizes, tile_dims, layout, r)
            pred = self.slot_valid(layout, r)
            size = self.op("select", [valid, self.const(eb, DType.U32), self.const(0, DType.U32)], U32)
            if off:
                addr = self.op("add", [addr, self.const(off, DType.I64)], I64)
            src = self.op("select", [valid, addr, tensor.ptr], I64)
            self.b.op("cp_async", [dst, src, size] + ([pred] if pred is not None else []), [],
                      {"bytes": eb, "offset": start + (i * ld + j) * eb, "goffset": 0,
                       "masked": pred is not None, "zero_fill": True})
        self.b.op("yield", [], [])
        self.b = self.builder_for(inner[1], regions[1], outer.loc)
        self.b.op("yield", [], [])
        self.b = outer

    def op_if(self, op: Op) -> None:
        cond = self.vals[op.operands[0]]
        types = [t for v in op.results for t in self.lowered_types(v)]
        regions = [Block(), Block()]
        new = self.b.op("if", [cond], types, {}, regions)
        for src, dst in zip(op.regions, regions):
            self.lower_block(src, dst)
        pos = 0
        for v in op.results:
            pos = self.unflat(v, new.results, pos)

    # ---------------------------------------------------------- leaves
    def op_param(self, op: Op) -> None:
        t = op.result.type
        if isinstance(t, TensorType):
            ptr = self.op("param", [], I64, **op.attrs)
            p = self.src.attrs["params"][op.attrs["index"]]
            dims = [self.param_size(d) if isinstance(d, str) else self.const(d) for d in t.dims]
            self.vals[op.result] = TensorRef(ptr, dims, t.dtype, not p.written)
        else:
            self.vals[op.result] = self.op("param", [], t, **op.attrs)

    def param_size(self, name: str) -> Value:
        return self.entry_value(("size", name), lambda b: b.value(
            "param", [], I32, index=self.params[name], name=name))

    def op_const(self, op: Op) -> None:
        t = op.result.type
        if isinstance(t, TileType):
            v = self.const(op.attrs["value"], t.dtype)
            self.vals[op.result] = TileRegs(self.layouts[op.result], [v] * self.layouts[op.result].nregs)
        else:
            self.vals[op.result] = self.const(op.attrs["value"], t.dtype)

    def op_program_id(self, op: Op) -> None:
        axis = op.attrs["axis"]
        if self.group_m > 1 and axis in (0, 1):
            self.vals[op.result] = self.grouped_program_ids()[axis]
        else:
            self.vals[op.result] = self.op("program_id", [], I32, axis=axis)

    def op_num_programs(self, op: Op) -> None:
        self.vals[op.result] = self.op("num_programs", [], I32, **op.attrs)

    def grouped_program_ids(self) -> tuple[Value, Value]:
        """program_id(0) and program_id(1) in grouped order, for kernels whose CTAs share operands.

        The hardware starts CTAs in order of their linear index (x fastest).  A
        matrix product whose program_id(0) walks the rows of C would then have
        the CTAs running at one time touch every row block of A; taking them
        instead in groups of GROUP_M row blocks, column after column, keeps the
        A and B blocks that run together few enough to stay in L2.  The map is
        a bijection of the grid onto itself, so each program id pair still
        occurs exactly once, as the language promises (instances run in no
        particular order).
        """
        def make(b: Builder) -> tuple[Value, Value]:
            x, y = (b.value("program_id", [], I32, axis=a) for a in (0, 1))
            nx, ny = (b.value("num_programs", [], I32, axis=a) for a in (0, 1))
            linear = b.value("add", [x, b.value("mul", [y, nx], I32)], I32)
            group = b.const(self.group_m, I32)
            per_group = b.value("mul", [group, ny], I32)
            first = b.value("mul", [b.value("div", [linear, per_group], I32), group], I32)
            rest = b.value("sub", [nx, first], I32)
            size = b.value("min", [rest, group], I32)
            within = b.value("rem", [linear, per_group], I32)
            pid0 = b.value("add", [first, b.value("rem", [within, size], I32)], I32)
            pid1 = b.value("div", [within, size], I32)
            return pid0, pid1
        return self.entry_value(("grouped program ids",), make)

    def elementwise(self, op: Op) -> None:
        if not isinstance(op.result.type, TileType):
            self.vals[op.result] = self.op(op.opcode, [self.vals[v] for v in op.operands], op.result.type, **op.attrs)
            return
        layout = self.layouts[op.result]
        operands = [self.in_layout(v, layout).regs for v in op.operands]
        t = ScalarType(op.result.dtype)
        regs = [self.op(op.opcode, [o[r] for o in operands], t, **op.attrs) for r in range(layout.nregs)]
        self.vals[op.result] = TileRegs(layout, regs)

    def op_broadcast(self, op: Op) -> None:
        layout = self.layouts[op.result]
        src = op.operands[0]
        if not isinstance(src.type, TileType):
            self.vals[op.result] = TileRegs(layout, [self.vals[src]] * layout.nregs)
            return
        dims = _broadcast_dims(src.type.shape, layout.shape)
        small, index = layout.collapse_map(dims)
        lead = len(layout.shape) - len(src.type.shape)
        regs = self.in_layout(src, _drop_leading(small, lead)).regs
        self.vals[op.result] = TileRegs(layout, [regs[i] for i in index])

    def op_arange(self, op: Op) -> None:
        layout = self.layouts[op.result]
        start = op.attrs["start"]
        base = self.thread_coord(layout.terms[0])
        regs = [self.op("add", [base, self.const(start + off[0])], I32) for off in layout.offsets]
        self.vals[op.result] = TileRegs(layout, regs)

    # ---------------------------------------------------------- shared-memory moves
    def relayout(self, t: TileRegs, dst: Layout, dtype: DType, source_index=None) -> list[Value]:
        """Move a tile to another layout through shared memory.

        `source_index(coords)` gives, for an element of the destination, the
        row-major index of the source element it copies (default: the same
        coordinates; reshape and extract pass their own).
        """
        src = t.layout
        eb = _smem_bytes(dtype)
        size = 1
        for n in src.shape:
            size *= n
        base = self.smem(size * eb)
        strides = _row_major_strides(src.shape)
        self.barrier()
        owner = self.owner(src)
        for r in range(src.nregs):
            index = self.linear(src, r, strides, [0] * src.rank)
            pred = self.all_of([self.slot_valid(src, r), owner])
            self.st_shared(base, index, eb, [t.regs[r]], dtype, pred)
        self.barrier()
        regs = []
        for r in range(dst.nregs):
            coords = [self.coord(dst, r, d) for d in range(dst.rank)]
            index = source_index(coords) if source_index else self.dot_product(coords, strides)
            regs.append(self.ld_shared(base, index, eb, dtype, self.slot_valid(dst, r)))
        return regs

    def linear(self, layout: Layout, r: int, strides, starts) -> Value:
        coords = [self.coord(layout, r, d) for d in range(layout.rank)]
        if any(starts):
            coords = [c if s == 0 else self.op("add", [c, self.const(s)], I32) for c, s in zip(coords, starts)]
        return self.dot_product(coords, strides)

    def dot_product(self, coords: list[Value], strides: list[int]) -> Value:
        acc = None
        for c, s in zip(coords, strides):
            term = c if s == 1 else self.op("mul", [c, self.const(s)], I32)
            acc = term if acc is None else self.op("add", [acc, term], I32)
        return acc if acc is not None else self.const(0)

    def smem_address(self, base: Value, index: Value, eb: int) -> Value:
        off = self.op("mul", [self.op("cast", [index], U32), self.const(eb, DType.U32)], U32)
        return self.op("add", [base, off], U32)

    def st_shared(self, base: Value, index: Value, eb: int, values: list[Value], dtype: DType,
                  pred: Value | None, offset: int = 0) -> None:
        addr = self.smem_address(base, index, eb)
        self.b.op("st_shared", [addr, *values] + ([pred] if pred is not None else []), [],
                  {"dtype": dtype, "vec": len(values), "offset": offset, "masked": pred is not None})

    def ld_shared(self, base: Value, index: Value, eb: int, dtype: DType, pred: Value | None,
                  offset: int = 0) -> Value:
        addr = self.smem_address(base, index, eb)
        return self.b.op("ld_shared", [addr] + ([pred] if pred is not None else []), [ScalarType(dtype)],
                         {"dtype": dtype, "vec": 1, "offset": offset, "masked": pred is not None}).result

    def op_reshape(self, op: Op) -> None:
        src = self.tile(op.operands[0])
        layout = self.layouts[op.result]
        strides = _row_major_strides(layout.shape)
        regs = self.relayout(src, layout, op.result.dtype, lambda coords: self.dot_product(coords, strides))
        self.vals[op.result] = TileRegs(layout, regs)

    def op_extract(self, op: Op) -> None:
        src = self.tile(op.operands[0])
        starts, sizes = op.attrs["starts"], op.attrs["sizes"]
        strides = _row_major_strides(src.layout.shape)
        result_t = op.result.type

        def source_index(coords: list[Value]) -> Value:
            it = iter(coords)
            full = []
            for s, n in zip(starts, sizes):
                c = next(it) if n is not None else self.const(0)
                full.append(c if s == 0 else self.op("add", [c, self.const(s)], I32))
            return self.dot_product(full, strides)

        if isinstance(result_t, TileType):
            layout = self.layouts[op.result]
            self.vals[op.result] = TileRegs(layout, self.relayout(src, layout, op.result.dtype, source_index))
        else:
            scalar_layout = Layout((), self.threads, (), ((),), ((1, self.threads),))
            self.vals[op.result] = self.relayout(src, scalar_layout, op.result.dtype, source_index)[0]

    # ---------------------------------------------------------- global memory
    def slice_geometry(self, op: Op, tensor: TensorRef):
        """(starts as i32 values, sizes per tensor dim - None for a single index, the sliced tensor dims)."""
        indices = op.operands[1:1 + len(tensor.dims)]
        sizes = op.attrs["sizes"]
        starts = [self.vals[v] for v in indices]
        starts = [s if s.dtype is DType.I32 else self.op("cast", [s], I32) for s in starts]
        tile_dims = [d for d, n in enumerate(sizes) if n is not None]
        return starts, sizes, tile_dims

    def strides_of(self, tensor: TensorRef) -> list[Value]:
        """Row-major strides in elements, as i64 values."""
        strides = [None] * len(tensor.dims)
        acc = self.const(1, DType.I64)
        for d in reversed(range(len(tensor.dims))):
            strides[d] = acc
            if d:
                dim64 = self.op("cast", [tensor.dims[d]], I64)
                acc = self.op("mul", [acc, dim64], I64)
        return strides

    def in_bounds(self, tensor: TensorRef, starts: list[Value], sizes) -> Value:
        """Uniform predicate: the whole slice lies inside the tensor."""
        preds = []
        for dim, start, n in zip(tensor.dims, starts, sizes):
            if n is None:
                preds.append(self.unsigned_less(start, dim))
            else:
                preds.append(self.op("cmp", [start, self.const(0)], BOOL, pred="ge"))
                end = self.op("add", [start, self.const(n)], I32)
                preds.append(self.op("cmp", [end, dim], BOOL, pred="le"))
        return self.all_of(preds)

    def unsigned_less(self, a: Value, b: Value) -> Value:
        """0 <= a < b for i32 a and b >= 0, as one unsigned comparison."""
        return self.op("cmp", [self.op("cast", [a], U32), self.op("cast", [b], U32)], BOOL, pred="lt")

    def vector_ok(self, tensor: TensorRef, starts, tile_dims, layout: Layout | None) -> int:
        """The vector width (elements) usable when the slice is aligned, 1 if none."""
        if layout is None or not tile_dims or tile_dims[-1] != len(tensor.dims) - 1:
            return 1
        if tensor.dtype.nbytes < 4:
            return 1
        width = layout.vector_width()
        while width > 1 and width * tensor.dtype.nbytes > 16:
            width //= 2
        return width

    def aligned(self, tensor: TensorRef, starts, width: int) -> Value:
        """Uniform predicate: the base pointer, row length and slice start allow `width`-element vectors."""
        nbytes = width * tensor.dtype.nbytes
        low = self.op("and", [tensor.ptr, self.const(nbytes - 1, DType.I64)], I64)
        preds = [self.op("cmp", [low, self.const(0, DType.I64)], BOOL, pred="eq")]
        for v in (starts[-1], tensor.dims[-1]):
            low = self.op("and", [v, self.const(width - 1)], I32)
            preds.append(self.op("cmp", [low, self.const(0)], BOOL, pred="eq"))
        return self.all_of(preds)

    def row_addresses(self, tensor: TensorRef, starts, tile_dims, layout: Layout | None):
        """For each register: (address of its row, byte offset of the element within the row).

        The address of element r is base + sum_d coord_d * stride_d * size; the
        part of the last dim that is constant per register is returned apart, to
        become the access's immediate offset.
        """
        eb = tensor.dtype.nbytes
        strides = self.strides_of(tensor)
        last = len(tensor.dims) - 1
        nregs = layout.nregs if layout is not None else 1
        thread_c = {}
        for k, d in enumerate(tile_dims):
            thread_c[d] = self.op("add", [starts[d], self.thread_coord(layout.terms[k])], I32)
        base = tensor.ptr
        for d in range(len(tensor.dims)):
            c = thread_c.get(d, starts[d])
            if d == last:
                term = self.op("mul_wide", [c, self.const(eb)], I64)
            elif d == last - 1:  # the stride is the last dim, an i32
                term = self.op("mul", [self.op("mul_wide", [c, tensor.dims[last]], I64),
                                       self.const(eb, DType.I64)], I64)
            else:
                term = self.op("mul", [self.op("cast", [c], I64), strides[d]], I64)
                term = self.op("mul", [term, self.const(eb, DType.I64)], I64)
            base = self.op("add", [base, term], I64)
        out = []
        for r in range(nregs):
            offsets = layout.offsets[r] if layout is not None else ()
            addr = base
            last_off = 0
            for k, d in enumerate(tile_dims):
                if offsets[k] == 0:
                    continue
                if d == last:
                    last_off = offsets[k] * eb
                else:
                    row = self.op("mul", [strides[d], self.const(offsets[k] * eb, DType.I64)], I64)
                    addr = self.op("add", [addr, row], I64)
            out.append((addr, last_off))
        return out

    def element_valid(self, tensor: TensorRef, starts, sizes, tile_dims, layout: Layout | None, r: int):
        """Predicate: element r is in the tile (not padding) and inside the tensor."""
        preds = [self.slot_valid(layout, r)] if layout is not None else []
        for d, (dim, start, n) in enumerate(zip(tensor.dims, starts, sizes)):
            if n is None:
                preds.append(self.unsigned_less(start, dim))
            else:
                k = tile_dims.index(d)
                c = self.op("add", [start, self.thread_coord(layout.terms[k])], I32)
                if layout.offsets[r][k]:
                    c = self.op("add", [c, self.const(layout.offsets[r][k])], I32)
                preds.append(self.unsigned_less(c, dim))
        return self.all_of(preds)

    def access_groups(self, layout: Layout | None, width: int) -> list[list[int]]:
        nregs = layout.nregs if layout is not None else 1
        return [list(range(i, i + width)) for i in range(0, nregs, width)]

    def op_load(self, op: Op) -> None:
        tensor = self.vals[op.operands[0]]
        result_t = op.result.type
        layout = self.layouts.get(op.result) if isinstance(result_t, TileType) else None
        starts, sizes, tile_dims = self.slice_geometry(op, tensor)
        addrs = self.row_addresses(tensor, starts, tile_dims, layout)
        dtype = tensor.dtype.compute
        width = self.vector_ok(tensor, starts, tile_dims, layout)
        fast = self.in_bounds(tensor, starts, sizes)
        if width > 1:
            fast = self.all_of([fast, self.aligned(tensor, starts, width)])
        nregs = len(addrs)
        regions = [Block(), Block()]
        branch = self.b.op("if", [fast], [ScalarType(dtype)] * nregs, {}, regions)
        outer = self.b
        for region, vec in ((regions[0], width), (regions[1], 1)):
            self.b = self.builder_for(region, outer.block, outer.loc)
            regs: list[Value] = []
            for group in self.access_groups(layout, vec):
                addr, off = addrs[group[0]]
                if vec > 1 or region is regions[0]:
                    pred = self.slot_valid(layout, group[0]) if layout is not None else None
                else:
                    pred = self.element_valid(tensor, starts, sizes, tile_dims, layout, group[0])
                ld = self.b.op("ld_global", [addr] + ([pred] if pred is not None else []),
                               [ScalarType(dtype)] * len(group),
                               {"dtype": tensor.dtype, "vec": len(group), "offset": off,
                                "masked": pred is not None, "read_only": tensor.read_only})
                regs += ld.results
            self.b.op("yield", regs, [])
        self.b = outer
        if layout is None:
            self.vals[op.result] = branch.results[0]
        else:
            self.vals[op.result] = TileRegs(layout, list(branch.results))

    def store_like(self, op: Op, opcode: str, fused: "FusedStore | None" = None) -> None:
        """A store (or atomic add) of a slice: vector accesses when the slice - and, for a fused
        store, every slice it loads - is inside its tensor and aligned; masked ones otherwise."""
        tensor = self.vals[op.operands[0]]
        value = op.operands[-1]
        starts, sizes, tile_dims = self.slice_geometry(op, tensor)
        leaves: dict[Value, list[Value]] = {}
        if isinstance(value.type, TileType):
            layout = self.layouts[value]
            owner = self.owner(layout)
            if fused is None:
                leaves[value] = self.tile(value).regs
        else:
            layout, leaves[value] = None, [self.vals[value]]
            owner = self.entry_value(("thread0",), lambda b: b.value(
                "cmp", [self.tid(), b.const(0, I32)], BOOL, pred="eq"))
        accesses = [(op, tensor, starts, sizes, tile_dims)]
        if fused is not None:
            for ld in fused.loads:
                t = self.vals[ld.operands[0]]
                accesses.append((ld, t, *self.slice_geometry(ld, t)))
            for o in fused.ops:
                for x in o.operands:
                    if isinstance(x.type, TileType) and x.owner not in fused.ops and x.owner not in fused.loads:
                        leaves[x] = self.in_layout(x, layout).regs
        width = self.vector_ok(tensor, starts, tile_dims, layout) if opcode == "st_global" else 1
        for _, t, st, _, dims in accesses[1:]:
            width = min(width, self.vector_ok(t, st, dims, layout))
        conditions = []
        for _, t, st, sz, _ in accesses:
            conditions.append(self.in_bounds(t, st, sz))
            if width > 1:
                conditions.append(self.aligned(t, st, width))
        fast = self.all_of(conditions)
        addrs = {a[0]: self.row_addresses(a[1], a[2], a[4], layout) for a in accesses}
        regions = [Block(), Block()]
        self.b.op("if", [fast], [], {}, regions)
        outer = self.b
        for region, vec in ((regions[0], width), (regions[1], 1)):
            self.b = self.builder_for(region, outer.block, outer.loc)
            for group in self.access_groups(layout, vec):
                def valid(access):
                    if region is regions[0]:
                        return self.slot_valid(layout, group[0]) if layout is not None else None
                    return self.element_valid(access[1], access[2], access[3], access[4], layout, group[0])
                values = dict(((v, r), regs[r]) for v, regs in leaves.items() for r in group)
                if fused is not None:
                    self.fused_values(fused, accesses[1:], addrs, group, valid, values)
                addr, off = addrs[op][group[0]]
                self.b.loc = op.loc
                pred = self.all_of([valid(accesses[0]), owner])
                self.b.op(opcode, [addr, *(values[(value, r)] for r in group)] + ([pred] if pred is not None else []),
                          [], {"dtype": tensor.dtype, "vec": len(group), "offset": off, "masked": pred is not None})
            self.b.op("yield", [], [])
        self.b = outer

    def fused_values(self, fused: "FusedStore", loads, addrs, group: list[int], valid, values: dict) -> None:
        """Load one group of registers of a fused store's slices and compute its value from them."""
        for access in loads:
            ld, tensor = access[0], access[1]
            self.b.loc = ld.loc
            addr, off = addrs[ld][group[0]]
            pred = valid(access)
            results = self.b.op("ld_global", [addr] + ([pred] if pred is not None else []),
                                [ScalarType(tensor.dtype.compute)] * len(group),
                                {"dtype": tensor.dtype, "vec": len(group), "offset": off, "masked": pred is not None,
                                 "read_only": tensor.read_only}).results
            values.update(((ld.result, r), v) for r, v in zip(group, results))
        for o in fused.ops:
            t = ScalarType(o.result.dtype)
            self.b.loc = o.loc
            for r in group:
                if o.opcode == "const":
                    values[(o.result, r)] = self.const(o.attrs["value"], o.result.dtype)
                elif o.opcode == "broadcast":
                    values[(o.result, r)] = self.vals[o.operands[0]]
                else:
                    operands = [values[(x, r)] if (x, r) in values else self.vals[x] for x in o.operands]
                    values[(o.result, r)] = self.op(o.opcode, operands, t, **o.attrs)

    def op_store(self, op: Op) -> None:
        self.store_like(op, "st_global")

    def op_atomic_add(self, op: Op) -> None:
        self.store_like(op, "atom_add_global")

    # ---------------------------------------------------------- dot
    def op_dot(self, op: Op) -> None:
        """A dot whose operands are in registers: stage them in shared memory, then multiply."""
        a_v, b_v = op.operands[0], op.operands[1]
        plan = dot_plan(a_v.type.shape, b_v.type.shape[1], op.result.dtype, self.threads)
        base = self.smem(plan.stage_bytes)
        self.barrier()
        self.write_tile(self.tile(a_v), base, 0, plan.lda, plan.eb, plan.dtype)
        self.write_tile(self.tile(b_v), base, plan.a_bytes, plan.ldb, plan.eb, plan.dtype)
        self.barrier()
        self.finish_dot(op, plan, base)

    def finish_dot(self, op: Op, plan: "DotPlan", stage: Value) -> None:
        """Multiply the operands staged at `stage` into the result (or accumulator) registers."""
        if len(op.operands) == 3:
            acc = self.in_layout(op.operands[2], plan.layout).regs
        else:
            acc = [self.const(0.0, plan.dtype)] * plan.layout.nregs
        acc = self.dot_compute(plan, stage, acc)
        result = TileRegs(plan.layout, acc)
        layout = self.layouts[op.result]
        if layout != plan.layout:
            result = TileRegs(layout, self.relayout(result, layout, plan.dtype))
        self.vals[op.result] = result

    def write_tile(self, t: TileRegs, base: Value, start: int, ld: int, eb: int, dtype: DType) -> None:
        """Store a 2-D tile row-major into shared memory at byte `start`, rows `ld` elements apart."""
        layout = t.layout
        owner = self.owner(layout)
        c0, c1 = self.thread_coord(layout.terms[0]), self.thread_coord(layout.terms[1])
        thread_index = self.op("add", [self.op("mul", [c0, self.const(ld)], I32), c1], I32)
        width = layout.vector_width()
        while width * eb > 16:
            width //= 2
        for group in self.access_groups(layout, width):
            i, j = layout.offsets[group[0]]
            pred = self.all_of([self.slot_valid(layout, group[0]), owner])
            self.st_shared(base, thread_index, eb, [t.regs[r] for r in group], dtype, pred,
                           offset=start + (i * ld + j) * eb)

    def dot_compute(self, plan: "DotPlan", stage: Value, acc: list[Value]) -> list[Value]:
        """acc += A @ B with A [M, K] at `stage` and B [K, N] after it; fully unrolled up to a limit."""
        layout = plan.layout
        a_base = self.smem_address(stage, self.op("mul", [self.thread_coord(layout.terms[0]),
                                                          self.const(plan.lda)], I32), plan.eb)
        b_base = self.smem_address(stage, self.thread_coord(layout.terms[1]), plan.eb)
        if plan.k <= DOT_UNROLL_LIMIT:
            for k0 in range(0, plan.k, plan.kgroup):
                acc = self.dot_steps(plan, a_base, b_base, k0, min(plan.kgroup, plan.k - k0), acc)
            return acc
        main = plan.k - plan.k % DOT_STEP
        body = Block()
        loop = self.b.op("for", [self.const(0), self.const(main), *acc], [ScalarType(plan.dtype)] * len(acc),
                         {"step": DOT_STEP}, [body])
        outer = self.b
        self.b = self.builder_for(body, outer.block, outer.loc)
        kk = self.b.block_arg(body, I32, "k")
        carried = [self.b.block_arg(body, ScalarType(plan.dtype)) for _ in acc]
        k_bytes = self.op("mul", [self.op("cast", [kk], U32), self.const(plan.eb, DType.U32)], U32)
        a_k = self.op("add", [a_base, k_bytes], U32)
        b_k = self.op("add", [b_base, self.op("mul", [k_bytes, self.const(plan.ldb, DType.U32)], U32)], U32)
        for k0 in range(0, DOT_STEP, plan.kgroup):
            carried = self.dot_steps(plan, a_k, b_k, k0, plan.kgroup, carried)
        self.b.op("yield", carried, [])
        self.b = outer
        acc = list(loop.results)
        for k0 in range(main, plan.k, plan.kgroup):
            acc = self.dot_steps(plan, a_base, b_base, k0, min(plan.kgroup, plan.k - k0), acc)
        return acc

    def dot_steps(self, plan: "DotPlan", a_base: Value, b_base: Value, k0: int, count: int,
                  acc: list[Value]) -> list[Value]:
        """`count` steps of k from k0: read A's rows as vectors along K, B's row pieces, then FMAs."""
        t = ScalarType(plan.dtype)
        a_vals = {}
        for row in plan.rows:
            ld = self.b.op("ld_shared", [a_base], [t] * count,
                           {"dtype": plan.dtype, "vec": count, "offset": (row * plan.lda + k0) * plan.eb,
                            "masked": False})
            for j, v in enumerate(ld.results):
                a_vals[(row, k0 + j)] = v
        for kk in range(k0, k0 + count):
            b_vals = self.read_runs(b_base, plan.cols, plan.a_bytes + kk * plan.ldb * plan.eb, plan)
            acc = list(acc)
            for r in plan.fma_order:
                i, j = plan.layout.offsets[r]
                acc[r] = self.op("fma", [a_vals[(i, kk)], b_vals[j], acc[r]], t)
        return acc

    def read_runs(self, base: Value, offsets: list[int], start: int, plan: "DotPlan") -> dict[int, Value]:
        """ld.shared the elements at `offsets` from base + start, runs of contiguous ones as vectors."""
        out = {}
        per_vector = max(1, 16 // plan.eb)
        i = 0
        while i < len(offsets):
            run = 1
            while (i + run < len(offsets) and run < per_vector and offsets[i + run] == offsets[i] + run
                   and offsets[i] % per_vector == 0):
                run += 1
            while run & (run - 1):
                run -= 1
            ld = self.b.op("ld_shared", [base], [ScalarType(plan.dtype)] * run,
                           {"dtype": plan.dtype, "vec": run, "offset": start + offsets[i] * plan.eb,
                            "masked": False})
            for j in range(run):
                out[offsets[i + j]] = ld.results[j]
            i += run
        return out

    # ---------------------------------------------------------- reductions
    def op_reduce(self, op: Op) -> None:
        x = self.tile(op.operands[0])
        kind, axis = op.attrs["kind"], op.attrs["axis"]
        layout = x.layout
        dims = list(range(layout.rank)) if axis is None else [axis]
        combine = _COMBINE[kind]
        src_dtype = op.operands[0].dtype
        small, index = layout.collapse_map(dims)
        with_index = kind in ("argmax", "argmin")
        identity = self.const(_identity(kind, src_dtype), src_dtype)
        big_index = self.const(2**31 - 1)
        partial: dict[int, tuple] = {}
        shape_strides = _row_major_strides(layout.shape)
        for r in range(layout.nregs):
            v = x.regs[r]
            valid = self.slot_valid(layout, r, dims)
            if valid is not None:
                v = self.op("select", [valid, v, identity], ScalarType(src_dtype))
            idx = None
            if with_index:
                idx = (self.coord(layout, r, axis) if axis is not None else
                       self.dot_product([self.coord(layout, r, d) for d in dims], shape_strides))
                if valid is not None:
                    idx = self.op("select", [valid, idx, big_index], I32)
            s = index[r]
            partial[s] = (v, idx) if s not in partial else combine(self, partial[s], (v, idx), src_dtype)
        lane_terms = [t for d in dims for t in layout.terms[d] if t.in_warp]
        for t in lane_terms:
            bit = t.div
            while bit < t.div * t.mod:
                for s, (v, idx) in list(partial.items()):
                    other = (self.shuffle(v, bit), self.shuffle(idx, bit) if idx is not None else None)
                    partial[s] = combine(self, (v, idx), other, src_dtype)
                bit *= 2
        warp_terms = [t for d in dims for t in layout.terms[d] if not t.in_warp]
        if warp_terms:
            partial = self.combine_warps(partial, small, layout, dims, lane_terms, warp_terms, combine, src_dtype,
                                         with_index)
        result = [partial[s][1] if with_index else partial[s][0] for s in range(small.nregs)]
        if axis is None:
            self.vals[op.result] = result[0]
            return
        out = TileRegs(small, result)
        target = self.layouts[op.result]
        if target != small:
            out = TileRegs(target, self.relayout(out, target, op.result.dtype))
        self.vals[op.result] = out

    def shuffle(self, v: Value, lane_mask: int) -> Value:
        return self.op("shfl_bfly", [v, self.const(lane_mask)], v.type)

    def combine_warps(self, partial, small: Layout, layout: Layout, dims, lane_terms, warp_terms, combine,
                      dtype: DType, with_index: bool):
        """Exchange per-warp partial results through shared memory; every thread combines them all."""
        nwarp = 1
        for t in warp_terms:
            nwarp *= t.mod
        slot = self.const(0)
        radix = 1
        for t in warp_terms:
            term = self.op("mul", [self.digit(t.div, t.mod), self.const(radix)], I32)
            slot = self.op("add", [slot, term], I32)
            radix *= t.mod
        size = 1
        for n_ in small.shape:
            size *= n_
        eb = max(_smem_bytes(dtype), 4)
        words = 2 if with_index else 1
        base = self.smem(size * nwarp * eb * words)
        strides = _row_major_strides(small.shape)
        leader = self.owner(layout, tuple((t.div, t.mod) for t in lane_terms))
        self.barrier()
        elements = {}
        for s in range(small.nregs):
            element = self.linear(small, s, strides, [0] * small.rank)
            elements[s] = element
            at = self.op("add", [self.op("mul", [element, self.const(nwarp)], I32), slot], I32)
            pred = self.all_of([self.slot_valid(small, s), leader])
            v, idx = partial[s]
            self.st_shared(base, at, eb, [v], dtype, pred)
            if with_index:
                self.st_shared(base, at, 4, [idx], DType.I32, pred, offset=size * nwarp * eb)
        self.barrier()
        out = {}
        for s in range(small.nregs):
            valid = self.slot_valid(small, s)
            acc = None
            for w in range(nwarp):
                at = self.op("add", [self.op("mul", [elements[s], self.const(nwarp)], I32), self.const(w)], I32)
                v = self.ld_shared(base, at, eb, dtype, valid)
                idx = None
                if with_index:
                    idx = self.ld_shared(base, at, 4, DType.I32, valid, offset=size * nwarp * eb)
                acc = (v, idx) if acc is None else combine(self, acc, (v, idx), dtype)
            out[s] = acc
        return out


@dataclass
class FusedStore:
    """A store lowered together with the element-wise ops and loads that compute its tile."""

    layout: Layout
    ops: list[Op]  # element-wise ops, consts and scalar broadcasts, in program order
    loads: list[Op]


@dataclass
class DotPlan:
    """How a dot product [M, K] x [K, N] is laid out in shared memory and registers."""

    layout: Layout  # of the result
    k: int
    rows: list[int]  # the row offsets each thread holds
    cols: list[int]  # the column offsets each thread holds
    lda: int  # A's row stride in shared memory (elements): a multiple of 4, an odd number of 16-byte units
    ldb: int  # B's row stride
    a_bytes: int  # A's region (B follows it)
    stage_bytes: int  # A and B together
    eb: int
    dtype: DType
    kgroup: int  # k steps read from A at once (a vector along K)
    fma_order: list[int]  # the order of the result registers' FMAs in one k step


def dot_plan(a_shape: tuple[int, int], n: int, dtype: DType, threads: int) -> DotPlan:
    m, k = a_shape
    layout = dot_layout((m, n), threads)
    eb = dtype.nbytes
    kgroup = next(g for g in (4, 2, 1) if k % g == 0 and g * eb <= 16)
    lda = _align(k, 4)
    if (lda // 4) % 2 == 0:
        lda += 4
    ldb = _align(_cover(layout, 1), 4)
    a_bytes = _align(_cover(layout, 0) * lda * eb, SMEM_ALIGN)
    stage = _align(a_bytes + k * ldb * eb, SMEM_ALIGN)
    rows = sorted({off[0] for off in layout.offsets})
    cols = sorted({off[1] for off in layout.offsets})
    return DotPlan(layout, k, rows, cols, lda, ldb, a_bytes, stage, eb, dtype, kgroup, _serpentine(layout))


def _serpentine(layout: Layout) -> list[int]:
    """Registers row by row, every other row backwards: consecutive FMAs always share an
    operand (A's value along a row, B's at the turn), which the hardware's operand
    reuse cache then supplies instead of a register-file read."""
    by_row: dict[int, list[tuple[int, int]]] = {}
    for r, (i, j) in enumerate(layout.offsets):
        by_row.setdefault(i, []).append((j, r))
    order = []
    for n, i in enumerate(sorted(by_row)):
        cells = sorted(by_row[i], reverse=n % 2 == 1)
        order += [r for _, r in cells]
    return order


def _combine_value(opcode: str):
    def combine(low: Lowering, a, b, dtype: DType):
        return (low.op(opcode, [a[0], b[0]], ScalarType(dtype)), None)
    return combine


def _combine_arg(pred: str):
    def combine(low: Lowering, a, b, dtype: DType):
        (va, ia), (vb, ib) = a, b
        better = low.op("cmp", [vb, va], BOOL, pred=pred)
        tie = low.all_of([low.op("cmp", [vb, va], BOOL, pred="eq"), low.op("cmp", [ib, ia], BOOL, pred="lt")])
        take = low.op("or", [better, tie], BOOL)
        return (low.op("select", [take, vb, va], ScalarType(dtype)), low.op("select", [take, ib, ia], I32))
    return combine


_COMBINE = {"sum": _combine_value("add"), "max": _combine_value("max"), "min": _combine_value("min"),
            "argmax": _combine_arg("gt"), "argmin": _combine_arg("lt")}


def _identity(kind: str, dtype: DType):
    if kind == "sum":
        return 0.0 if dtype.is_float else 0
    big = float("inf") if dtype.is_float else {DType.I32: 2**31 - 1, DType.I64: 2**63 - 1, DType.U32: 2**32 - 1}[dtype]
    small = float("-inf") if dtype.is_float else {DType.I32: -2**31, DType.I64: -2**63, DType.U32: 0}[dtype]
    return small if kind in ("max", "argmax") else big


def _cover(layout: Layout, d: int) -> int:
    """How far along dim d the layout reaches (padding included)."""
    return layout.thread_span(d) + max(off[d] for off in layout.offsets) + 1


def _row_major_strides(shape) -> list[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _smem_bytes(dtype: DType) -> int:
    return 4 if dtype is DType.BOOL else dtype.nbytes


def lower(func: Function, smem_limit: int, cp_async: bool = False) -> Function:
    """Thread-level IR for a tile-level function; see the module header."""
    return Lowering(func, smem_limit, cp_async).run()

