# IR generation: a checked kernel (one configuration) -> tile-level SSA IR.
#
# Variables disappear here: each `var` assignment makes a new SSA value, and the
# checker's `carried` table says which outer variables a loop or an `if` assigns,
# so they become the loop's carried values (block arguments + yield) or the
# `if`'s results.  Everything implicit in the source becomes explicit: literals
# get the dtype their context asks for, scalars and size-1 extents are widened
# by `broadcast`, compound assignment to a tensor slice becomes load-op-store,
# and a narrow (16- or 8-bit) float value used where f32 is computed is
# converted by a `cast`; arithmetic whose result is a 16-bit float is
# computed in f32 and then rounded by a `cast` to it.
#
# Jumps become data.  `break`, `continue` and `return` set hidden bool
# variables (the checker's flags), which loops and branches carry like any
# other variable; the statements after one that may have jumped run under
# `if !flag`, and a loop that a jump can leave becomes a `while` whose
# condition also tests the flags (a `for` with a step known only at run time
# too).  A device function is inlined at each call: the checker's copy of its
# body is generated in place, its parameters bound to the arguments' values,
# its `return`s assigning hidden result variables.
#
# Gathers, scatters and atomics address each element on its own: every
# subscript becomes a scalar or a tile of the result's shape (a slice `s :+ n`
# the tile s + arange(n) along its axis, in i64 so that it cannot wrap; an index tile broadcast along the
# others).
#
# Before: a CheckedKernel whose every expression has a type.  After: a Function
# that `ir.verify` accepts, with attrs `params` (the PTX signature, as
# KernelParam), `config` and `knobs` (the configuration's Knobs, for lowering).
from __future__ import annotations

from ..constants import OPERATORS, ROUNDED_OPCODES, UNARY_OPERATORS, convert
from ..dispatch import Dispatch
from ..frontend import ast
from ..frontend.builtins import BUILTINS, CAST_DTYPES, ORDERED_ATOMICS, argument, dot_precision
from .ir import Block, Builder, Function, KernelParam, Value
from ..frontend.sema import CheckedKernel, Inlined, Symbol
from ..types import DType, ScalarType, TensorType, TileType, TupleType, broadcast_shapes, shape_of, with_dtype

# The IR of each kind of statement and expression (keyed by AST class) and of
# each builtin (keyed by `Builtin.rule`; effect builtins are statements).
STATEMENTS = Dispatch("statement")
EXPRESSIONS = Dispatch("expression")
BUILTIN_RULES = Dispatch("builtin rule")

SCAN_KINDS = {"cumsum": "add", "cumprod": "mul"}


def kernel_signature(ck: CheckedKernel) -> list[KernelParam]:
    """The parameters of the compiled kernel: the source's, then one i32 per size name."""
    params = []
    for sym in ck.params:
        if isinstance(sym.type, TensorType):
            params.append(KernelParam(sym.name, "tensor", sym.type.dtype, sym.type.dims, sym.name in ck.written))
        else:
            params.append(KernelParam(sym.name, "scalar", sym.type.dtype))
    params += [KernelParam(name, "size", DType.I32) for name in ck.sizes]
    return params


class IRGen:
    def __init__(self, ck: CheckedKernel):
        self.ck = ck
        self.params = kernel_signature(ck)
        self.func = Function(ck.name, Block(), {"config": dict(ck.config), "knobs": ck.knobs,
                                                "params": self.params, "loc": ck.kernel.loc})
        self.b = Builder(self.func)
        self.env: dict[Symbol, Value] = {}

    def run(self) -> Function:
        index = {p.name: i for i, p in enumerate(self.params)}
        self.b.loc = self.ck.kernel.loc
        for sym in self.ck.params:
            self.env[sym] = self.b.value("param", [], sym.type, hint=sym.name, index=index[sym.name], name=sym.name)
        for name, binding in self.ck.sizes.items():
            self.env[binding.symbol] = self.b.value("param", [], ScalarType(DType.I32), hint=name,
                                                    index=index[name], name=name)
        self.env[self.ck.frame.returned] = self.false()
        self.block(self.ck.kernel.body)
        return self.func

    def false(self) -> Value:
        return self.b.const(False, ScalarType(DType.BOOL))

    def true(self) -> Value:
        return self.b.const(True, ScalarType(DType.BOOL))

    # ------------------------------------------------------------ helpers
    def at(self, node) -> None:
        self.b.loc = node.loc

    def coerce(self, v: Value, shape: tuple[int, ...] | None) -> Value:
        """Widen `v` to a tile of `shape` (numpy broadcasting), if it is not that already."""
        if shape is None or shape_of(v.type) == shape:
            return v
        return self.b.value("broadcast", [v], TileType(v.dtype, shape))

    def convert(self, v: Value, dtype: DType) -> Value:
        if v.dtype == dtype:
            return v
        t = ScalarType(dtype) if isinstance(v.type, ScalarType) else TileType(dtype, v.type.shape)
        return self.b.value("cast", [v], t)

    def operand_dtype(self, a: ast.Expr, b: ast.Expr) -> DType:
        """The dtype two operands meet in (the checker's unify_dtypes): a literal-only side follows the
        other; a 16-bit float meets f32, or the other 16-bit format, in f32; 8-bit floats meet as f32."""
        da, db = (self.ck.types[x].dtype for x in (a, b))
        da, db = (d.compute if d.is_f8 else d for d in (da, db))
        if da == db or b in self.ck.weak:
            return da
        return db if a in self.ck.weak else da.compute

    def typed(self, dtype: DType, shape) -> ScalarType | TileType:
        return ScalarType(dtype) if shape is None else TileType(dtype, shape)

    # ------------------------------------------------------------ statements
    def block(self, block: ast.Block, start: int = 0) -> None:
        """The statements of `block` from `start`; after one that may have jumped, the rest runs
        only where its flags are all false."""
        for i in range(start, len(block.stmts)):
            s = block.stmts[i]
            self.at(s)
            STATEMENTS.lookup(type(s))(self, s)
            flags = self.ck.sets_flags.get(s)
            if flags and i + 1 < len(block.stmts):
                self.at(block.stmts[i + 1])
                go_on = self.b.value("not", [self.any_of(flags)], ScalarType(DType.BOOL))
                carried = [c for c in self.ck.carried.get((block, i), []) if c in self.env]
                self.branch(go_on, carried, lambda: self.block(block, i + 1), None)
                return

    def any_of(self, flags: list[Symbol]) -> Value:
        acc = self.env[flags[0]]
        for f in flags[1:]:
            acc = self.b.value("or", [acc, self.env[f]], ScalarType(DType.BOOL))
        return acc

    def branch(self, cond: Value, carried: list[Symbol], then, orelse) -> None:
        """An `if` on `cond` whose arms are generated by the callables `then` and `orelse` (None:
        nothing); the variables in `carried` leave it as its results."""
        loc = self.b.loc
        regions = [Block(), Block()]
        op = self.b.op("if", [cond], [c.type for c in carried], {}, regions)
        outer_builder, outer_env = self.b, self.env
        for region, arm in zip(regions, (then, orelse)):
            self.b = Builder(self.func, region, loc)
            self.env = dict(outer_env)
            if arm is not None:
                arm()
            self.b.loc = loc
            self.b.op("yield", [self.env[c] for c in carried], [])
        self.b, self.env = outer_builder, outer_env
        for c, r in zip(carried, op.results):
            r.name = c.name
            self.env[c] = r

    @STATEMENTS.on(ast.Let)
    def stmt_let(self, s: ast.Let) -> None:
        self.bind(self.ck.symbols[s], s.value)

    def bind(self, sym: Symbol, e: ast.Expr | None, v: Value | None = None) -> None:
        """`sym` takes the value of `e` (or `v`), converted to its type."""
        if v is None:
            v = self.expr(e, sym.type.dtype)
        v = self.coerce(v, shape_of(sym.type))
        if not v.name:
            v.name = sym.name
        self.env[sym] = v

    @STATEMENTS.on(ast.Unpack)
    def stmt_unpack(self, s: ast.Unpack) -> None:
        syms = [self.ck.symbols[(s, i)] for i in range(len(s.names))]
        if isinstance(s.value, ast.TupleLit):
            for sym, item in zip(syms, s.value.items):
                self.bind(sym, item)
            return
        for sym, v in zip(syms, self.expr(s.value)):
            self.bind(sym, None, v)

    @STATEMENTS.on(ast.Assign)
    def stmt_assign(self, s: ast.Assign) -> None:
        target = s.target
        if isinstance(target, ast.Name):
            sym = self.ck.symbols[target]
            new = self.expr(s.value, sym.type.dtype)
            if s.op != "=":
                self.at(s)
                new = self.binary(OPERATORS[s.op[:-1]][0], self.env[sym], new, sym.type.dtype)
            new = self.coerce(new, shape_of(sym.type))
            if not new.name:
                new.name = sym.name
            self.env[sym] = new
            return
        tensor = self.env[self.ck.symbols[target.base]]
        slice_t = self.ck.types[target]
        dtype = tensor.type.dtype.compute
        value = self.expr(s.value, dtype)
        self.at(s)
        if self.gathers(target):
            indices = self.element_indices(target)
            self.at(s)
            if s.op != "=":
                old = self.b.value("gather", [tensor, *indices], slice_t)
                value = self.binary(OPERATORS[s.op[:-1]][0], old, value, dtype)
            self.b.op("scatter", [tensor, *indices, self.coerce(value, shape_of(slice_t))], [])
            return
        indices, sizes = self.subscripts(target)
        self.at(s)
        if s.op != "=":
            old = self.b.value("load", [tensor, *indices], slice_t, sizes=sizes)
            value = self.binary(OPERATORS[s.op[:-1]][0], old, value, dtype)
        value = self.coerce(value, shape_of(slice_t))
        self.b.op("store", [tensor, *indices, value], [], {"sizes": sizes})

    @STATEMENTS.on(ast.ExprStmt)
    def stmt_expr_stmt(self, s: ast.ExprStmt) -> None:
        call = s.expr
        if call in self.ck.calls or BUILTINS[call.func].void:
            self.expr(call)
            return
        self.atomic(call, used=False)

    @STATEMENTS.on(ast.For)
    def stmt_for(self, s: ast.For) -> None:
        iv_sym = self.ck.symbols[s]
        dtype = iv_sym.type.dtype
        lo = self.expr(s.start, dtype)
        hi = self.expr(s.end, dtype)
        step = self.ck.consts.get(s.step, 1) if s.step is not None else 1
        if (s.step is not None and s.step not in self.ck.consts) or self.exits(s):
            self.while_loop(s, lo, hi, self.expr(s.step, dtype) if s.step is not None else step)
            return
        carried = self.ck.carried.get(s, [])
        self.at(s)
        body = Block()
        loop = self.b.op("for", [lo, hi, *(self.env[c] for c in carried)],
                         [c.type for c in carried], {"step": step}, [body])
        outer_builder, outer_env = self.b, dict(self.env)
        self.b = Builder(self.func, body, s.loc)
        self.env[iv_sym] = self.b.block_arg(body, ScalarType(dtype), s.var)
        for c in carried:
            self.env[c] = self.b.block_arg(body, c.type, c.name)
        self.block(s.body)
        self.b.loc = s.loc
        self.b.op("yield", [self.env[c] for c in carried], [])
        self.b = outer_builder
        self.env = outer_env
        for c, r in zip(carried, loop.results):
            r.name = c.name
            self.env[c] = r

    def exits(self, s) -> list[Symbol]:
        """The flags that end loop `s` early: its `break`'s and a `return`'s inside it."""
        loop = self.ck.loops[s]
        flags = []
        for n in ast.walk(s.body):
            flag = self.ck.jumps.get(n)
            if flag is not None and flag not in flags and (flag is loop.broke or isinstance(n, ast.Return)):
                flags.append(flag)
        return flags

    @STATEMENTS.on(ast.While)
    def stmt_while(self, s: ast.While) -> None:
        self.while_loop(s, None, None, None)

    def while_loop(self, s, lo: Value | None, hi: Value | None, step) -> None:
        """A `while` op for a while statement, or for a `for` (lo, hi, step: its range) that a jump
        can leave or whose step is a run-time value.

        The loop carries the variables the body assigns, its `break` flag and, for
        a `for`, the loop variable.  Its condition is false once a flag that ends
        it is set (without evaluating the source condition, which may have
        effects), else the source condition, or for a `for` `i < hi` (`i > hi` for
        a negative step; a run-time step tests its sign, and a step of 0 runs no
        iteration).
        """
        loop = self.ck.loops[s]
        exits = self.exits(s)
        carried = list(self.ck.carried.get(s, []))
        if loop.broke in exits:
            self.env[loop.broke] = self.false()
            carried.insert(0, loop.broke)
        iv_sym = self.ck.symbols.get(s)
        self.at(s)
        inits = ([lo] if iv_sym is not None else []) + [self.env[c] for c in carried]
        cond_block, body = Block(), Block()
        op = self.b.op("while", inits, [v.type for v in inits], {}, [cond_block, body])
        outer_builder, outer_env = self.b, dict(self.env)

        def enter(region: Block) -> Value | None:
            self.b = Builder(self.func, region, s.loc)
            self.env = dict(outer_env)
            iv = self.b.block_arg(region, iv_sym.type, iv_sym.name) if iv_sym is not None else None
            for c in carried:
                self.env[c] = self.b.block_arg(region, c.type, c.name)
            return iv

        iv = enter(cond_block)
        if iv is None:
            go = self.unless(exits, lambda: self.expr(s.cond))
        else:
            go = self.unless(exits, lambda: self.in_range(iv, hi, step))
        self.b.loc = s.loc
        self.b.op("yield", [go], [])
        iv = enter(body)
        if iv_sym is not None:
            self.env[iv_sym] = iv
        self.env[loop.continued] = self.false()
        self.block(s.body)
        self.b.loc = s.loc
        nxt = [self.next_in_range(iv, hi, step)] if iv is not None else []
        self.b.op("yield", nxt + [self.env[c] for c in carried], [])
        self.b, self.env = outer_builder, outer_env
        results = op.results[1:] if iv_sym is not None else op.results
        for c, r in zip(carried, results):
            r.name = c.name
            self.env[c] = r

    def unless(self, flags: list[Symbol], condition) -> Value:
        """False when a flag is set, else the value of `condition()` (only then evaluated)."""
        if not flags:
            return condition()
        bool_t = ScalarType(DType.BOOL)
        regions = [Block(), Block()]
        op = self.b.op("if", [self.any_of(flags)], [bool_t], {}, regions)
        outer = self.b
        self.b = Builder(self.func, regions[0], outer.loc)
        self.b.op("yield", [self.false()], [])
        self.b = Builder(self.func, regions[1], outer.loc)
        self.b.op("yield", [condition()], [])
        self.b = outer
        return op.result

    def next_in_range(self, i: Value, hi: Value, step) -> Value:
        """The loop variable after `i`: `i + step` while that stays short of `hi`, else `hi` itself
        (which ends the loop), so the variable never wraps past the end of its dtype's range.

        `i` is inside the range here, so the distance to `hi` (`hi - i` counting up, `i - hi`
        counting down) fits the dtype's width as an unsigned number, and so does the step's
        magnitude; stepping is safe exactly when the distance is the larger, compared unsigned.
        """
        t = i.type
        step_v = step if isinstance(step, Value) else self.b.const(step, t)
        bool_t = ScalarType(DType.BOOL)
        up_distance, down_distance = self.b.value("sub", [hi, i], t), self.b.value("sub", [i, hi], t)
        magnitude_down = self.b.value("sub", [self.b.const(0, t), step_v], t)
        if isinstance(step, Value):
            up = self.b.value("cmp", [step, self.b.const(0, t)], bool_t, pred="gt")
            distance = self.b.value("select", [up, up_distance, down_distance], t)
            magnitude = self.b.value("select", [up, step_v, magnitude_down], t)
        else:
            distance, magnitude = (up_distance, step_v) if step > 0 else (down_distance, magnitude_down)
        if t.dtype.is_signed:  # unsigned order of signed numbers: flip the sign bits, compare signed
            sign = self.b.const(-(1 << (t.dtype.bits - 1)), t)
            distance = self.b.value("xor", [distance, sign], t)
            magnitude = self.b.value("xor", [magnitude, sign], t)
        take = self.b.value("cmp", [distance, magnitude], bool_t, pred="gt")
        return self.b.value("select", [take, self.binary("add", i, step_v, i.dtype), hi], t)

    def in_range(self, i: Value, hi: Value, step) -> Value:
        """`i` has not passed `hi` going by `step` (a constant, or a value whose sign is tested)."""
        bool_t = ScalarType(DType.BOOL)
        below = self.b.value("cmp", [i, hi], bool_t, pred="lt")
        above = self.b.value("cmp", [i, hi], bool_t, pred="gt")
        if not isinstance(step, Value):
            return below if step > 0 else above
        zero = self.b.const(0, step.type)
        up = self.b.value("and", [self.b.value("cmp", [step, zero], bool_t, pred="gt"), below], bool_t)
        down = self.b.value("and", [self.b.value("cmp", [step, zero], bool_t, pred="lt"), above], bool_t)
        return self.b.value("or", [up, down], bool_t)

    @STATEMENTS.on(ast.If)
    def stmt_if(self, s: ast.If) -> None:
        cond = self.expr(s.cond)
        self.at(s)
        self.branch(cond, self.ck.carried.get(s, []), lambda: self.block(s.then),
                    (lambda: self.block(s.orelse)) if s.orelse is not None else None)

    @STATEMENTS.on(ast.Break, ast.Continue)
    def stmt_jump(self, s) -> None:
        self.env[self.ck.jumps[s]] = self.true()

    @STATEMENTS.on(ast.Return)
    def stmt_return(self, s: ast.Return) -> None:
        frame = self.ck.returns[s]
        if s.value is not None:
            items = s.value.items if isinstance(s.value, ast.TupleLit) else [s.value]
            for sym, item in zip(frame.results, items):
                self.bind(sym, item)
        self.env[frame.returned] = self.true()

    # ------------------------------------------------------------ expressions
    def expr(self, e: ast.Expr, want: DType | None = None) -> Value | tuple[Value, ...]:
        """The value of `e` (a tuple of them for a tuple); a literal-only expression takes the dtype
        `want`, and a narrow float is converted when `want` is f32 (the dtype it is computed in)."""
        t = self.ck.types[e]
        value = self.ck.consts.get(e)
        if value is not None and isinstance(t, ScalarType):
            widened = want is not None and t.dtype.is_narrow and want is t.dtype.compute
            dtype = want if (want is not None and e in self.ck.weak) or widened else t.dtype
            self.at(e)
            return self.b.const(convert(value, dtype), ScalarType(dtype))
        v = EXPRESSIONS.lookup(type(e))(self, e)
        if want is not None and isinstance(v, Value) and v.dtype.is_narrow and want is v.dtype.compute:
            self.at(e)
            v = self.convert(v, want)
        return v

    @EXPRESSIONS.on(ast.Name)
    def expr_name(self, e: ast.Name) -> Value:
        return self.env[self.ck.symbols[e]]

    def binary(self, opcode: str, a: Value, b: Value, dtype: DType) -> Value:
        """`a opcode b` of `dtype`; arithmetic of a 16-bit dtype computes in f32 and rounds once to it."""
        if dtype.is_half and opcode in ROUNDED_OPCODES:
            wide = dtype.compute
            return self.convert(self.binary(opcode, self.convert(a, wide), self.convert(b, wide), wide), dtype)
        shape = broadcast_shapes(shape_of(a.type), shape_of(b.type))
        if opcode in ("div", "rem") and dtype.is_int:
            b = self.nonzero_divisor(b)
        a, b = self.coerce(a, shape), self.coerce(b, shape)
        return self.b.value(opcode, [a, b], self.typed(dtype, shape))

    def nonzero_divisor(self, b: Value) -> Value:
        """Integer divisor `b` with 1 in place of 0, as the language divides (constants.divide).

        PTX's div and rem by 0 give an unspecified value, so the code never
        divides by 0: not in an element the source divides by 0, nor in one
        outside the tensor (which reads 0), nor in a thread's padding slot."""
        if b.owner is not None and getattr(b.owner, "opcode", None) == "const" and b.owner.attrs["value"] != 0:
            return b
        shape = shape_of(b.type)
        zero, one = (self.coerce(self.b.const(x, ScalarType(b.dtype)), shape) for x in (0, 1))
        is_zero = self.b.value("cmp", [b, zero], self.typed(DType.BOOL, shape), pred="eq")
        return self.b.value("select", [is_zero, one, b], b.type)

    @EXPRESSIONS.on(ast.Unary)
    def expr_unary(self, e: ast.Unary) -> Value:
        x = self.expr(e.operand, self.ck.types[e].dtype)
        self.at(e)
        return self.b.value(UNARY_OPERATORS[e.op], [x], x.type)

    @EXPRESSIONS.on(ast.Binary)
    def expr_binary(self, e: ast.Binary) -> Value:
        dtype = self.operand_dtype(e.lhs, e.rhs)
        a, b = self.expr(e.lhs, dtype), self.expr(e.rhs, dtype)
        self.at(e)
        opcode, attrs = OPERATORS[e.op]
        if opcode == "cmp":
            shape = broadcast_shapes(shape_of(a.type), shape_of(b.type))
            a, b = self.coerce(a, shape), self.coerce(b, shape)
            return self.b.value("cmp", [a, b], self.typed(DType.BOOL, shape), **attrs)
        return self.binary(opcode, a, b, self.ck.types[e].dtype)

    def subscripts(self, e: ast.Index) -> tuple[list[Value], list[int | None]]:
        indices, sizes = [], []
        for sub in e.subscripts:
            if isinstance(sub, ast.Slice):
                indices.append(self.expr(sub.start))
                sizes.append(self.ck.consts[sub.size])
            else:
                indices.append(self.expr(sub))
                sizes.append(None)
        return indices, sizes

    @EXPRESSIONS.on(ast.TupleLit)
    def expr_tuple_lit(self, e: ast.TupleLit) -> tuple[Value, ...]:
        return tuple(self.expr(x) for x in e.items)

    def gathers(self, e: ast.Index) -> bool:
        """Whether a tensor subscript holds an index tile."""
        return any(not isinstance(sub, ast.Slice) and isinstance(self.ck.types[sub], TileType)
                   for sub in e.subscripts)

    def element_indices(self, e: ast.Index) -> list[Value]:
        """Per tensor dim of `T[...]`, the index of each element of the result: a scalar for a single
        index, else a tile of the result's shape (see the module header)."""
        result = shape_of(self.ck.types[e]) or ()
        tiles = [k for k, sub in enumerate(e.subscripts)
                 if not isinstance(sub, ast.Slice) and isinstance(self.ck.types[sub], TileType)]
        axis = 0  # the result axis the next slice (or the index tiles' shape) starts at
        gathered = len(result) - sum(1 for sub in e.subscripts if isinstance(sub, ast.Slice))
        out = []
        for k, sub in enumerate(e.subscripts):
            if isinstance(sub, ast.Slice):
                start = self.expr(sub.start)
                self.at(sub)
                if start.dtype is DType.U64:  # past the largest i64 it is outside the tensor: clamped to it
                    start = self.b.value("min", [start, self.b.const(2**63 - 1, start.type)], start.type)
                if start.dtype is not DType.I64:  # start + i is exact: an i32 or u32 start + i may wrap
                    start = self.convert(start, DType.I64)
                size = self.ck.consts[sub.size]
                ramp = self.convert(self.b.value("arange", [], TileType(DType.I32, (size,)), start=0), DType.I64)
                tile = self.binary("add", self.coerce(start, (size,)), ramp, DType.I64)
                out.append(self.place(tile, (axis,), result))
                axis += 1
            elif k in tiles:
                index = self.expr(sub)
                self.at(sub)
                shape = index.type.shape
                first = axis + gathered - len(shape)  # aligned at the end of the index tiles' part
                out.append(self.place(index, tuple(range(first, first + len(shape))), result))
                if k == tiles[-1]:
                    axis += gathered
            else:
                out.append(self.expr(sub))
        return out

    def place(self, v: Value, axes: tuple[int, ...], shape: tuple[int, ...]) -> Value:
        """`v` broadcast to `shape`, its dims becoming the result axes `axes`."""
        if v.type.shape == shape:
            return v
        return self.b.value("broadcast", [v], TileType(v.dtype, shape), axes=axes)

    @EXPRESSIONS.on(ast.Index)
    def expr_index(self, e: ast.Index) -> Value:
        base_t = self.ck.types[e.base]
        if isinstance(base_t, TensorType) and self.gathers(e):
            tensor = self.expr(e.base)
            indices = self.element_indices(e)
            self.at(e)
            return self.b.value("gather", [tensor, *indices], self.ck.types[e])
        if isinstance(base_t, TensorType):
            tensor = self.expr(e.base)
            indices, sizes = self.subscripts(e)
            self.at(e)
            return self.b.value("load", [tensor, *indices], self.ck.types[e], sizes=sizes)
        tile = self.expr(e.base)
        starts, sizes = [], []
        for sub in e.subscripts:
            if isinstance(sub, ast.Slice):
                starts.append(self.ck.consts[sub.start])
                sizes.append(self.ck.consts[sub.size])
            else:
                starts.append(self.ck.consts[sub])
                sizes.append(None)
        self.at(e)
        return self.b.value("extract", [tile], self.ck.types[e], starts=starts, sizes=sizes)

    @EXPRESSIONS.on(ast.Call)
    def expr_call(self, e: ast.Call) -> Value | tuple[Value, ...]:
        b = BUILTINS.get(e.func)
        if b is None:
            inlined = self.ck.calls[e]
            args = [self.expr(a, sym.type.dtype) for a, sym in zip(self.call_arguments(e), inlined.params)]
            return self.inline(inlined, args)
        return BUILTIN_RULES.lookup(b.rule)(self, e)

    def call_arguments(self, e: ast.Call) -> list[ast.Expr]:
        """The arguments of a device function's call in the order of its parameters."""
        names = [p.name for p in self.ck.calls[e].function.params]
        args = list(e.args) + [None] * (len(names) - len(e.args))
        for kw in e.kwargs:
            args[names.index(kw.name)] = kw.value
        return args

    def inline(self, inlined: Inlined, args: list[Value]) -> Value | tuple[Value, ...]:
        """The body of a device function generated here, its parameters bound to `args`."""
        outer_env = self.env
        self.env = dict(outer_env)
        for sym, v in zip(inlined.params, args):
            if sym not in self.env:  # a tensor parameter is the caller's own symbol
                self.bind(sym, None, self.convert(v, sym.type.dtype))
        frame = inlined.frame
        self.env[frame.returned] = self.false()
        for sym in frame.results:
            self.env[sym] = self.coerce(self.b.const(convert(0, sym.type.dtype), ScalarType(sym.type.dtype)),
                                        shape_of(sym.type))
        self.block(inlined.body)
        results = tuple(self.env[sym] for sym in frame.results)
        self.env = outer_env
        return results[0] if len(results) == 1 else results

    @BUILTIN_RULES.on("grid_index")
    def call_grid_index(self, e: ast.Call) -> Value:
        self.at(e)
        return self.b.value(e.func, [], ScalarType(DType.I32), axis=self.ck.consts[e.args[0]])

    @BUILTIN_RULES.on("cluster_rank")
    def call_cluster_rank(self, e: ast.Call) -> Value:
        """The CTA's rank in the cluster; a constant 0 for clusters of one CTA, so that what is computed from
        it stays affine in the program ids (the tile DAG's and index_reach's analyses)."""
        self.at(e)
        if (self.ck.knobs.cluster or 1) == 1:
            return self.b.const(0, ScalarType(DType.I32))
        return self.b.value("cluster_index", [], ScalarType(DType.I32))

    @BUILTIN_RULES.on("cluster_reduce")
    def call_cluster_reduce(self, e: ast.Call) -> Value:
        t = self.ck.types[e]
        x = self.expr(e.args[0], t.dtype)
        self.at(e)
        return self.b.value("cluster_reduce", [x], t, kind=e.func.removeprefix("cluster_"))

    @BUILTIN_RULES.on("dot")
    def call_dot(self, e: ast.Call) -> Value:
        a, b = self.expr(e.args[0]), self.expr(e.args[1])
        self.at(e)
        precision = dot_precision(e)
        return self.b.value("dot", [a, b], self.ck.types[e], **({"precision": precision} if precision != "ieee" else {}))

    @BUILTIN_RULES.on("reduce", "reduce_index")
    def call_reduce(self, e: ast.Call) -> Value:
        x = self.expr(e.args[0], self.ck.types[e.args[0]].dtype.compute)
        axis_e = e.args[1] if len(e.args) == 2 else next((k.value for k in e.kwargs if k.name == "axis"), None)
        axis = None
        if axis_e is not None:
            axis = self.ck.consts[axis_e] % len(x.type.shape)
        self.at(e)
        return self.b.value("reduce", [x], self.ck.types[e], kind=e.func, axis=axis)

    @BUILTIN_RULES.on("unary_float")
    def call_unary_float(self, e: ast.Call) -> Value:
        t = self.ck.types[e]
        x = self.expr(e.args[0], t.dtype.compute)
        self.at(e)
        return self.convert(self.b.value(e.func, [x], with_dtype(t, t.dtype.compute)), t.dtype)

    @BUILTIN_RULES.on("binary_float")
    def call_binary_float(self, e: ast.Call) -> Value:
        t = self.ck.types[e]
        wide = t.dtype.compute
        a, b = (self.coerce(self.expr(x, wide), shape_of(t)) for x in e.args)
        self.at(e)
        return self.convert(self.b.value(e.func, [a, b], with_dtype(t, wide)), t.dtype)

    @BUILTIN_RULES.on("unary_numeric")
    def call_unary_numeric(self, e: ast.Call) -> Value:
        x = self.expr(e.args[0], self.ck.types[e].dtype)
        self.at(e)
        return self.b.value(e.func, [x], x.type)

    @BUILTIN_RULES.on("binary_numeric")
    def call_binary_numeric(self, e: ast.Call) -> Value:
        dtype = self.operand_dtype(e.args[0], e.args[1])
        a, b = self.expr(e.args[0], dtype), self.expr(e.args[1], dtype)
        self.at(e)
        return self.binary({"maximum": "max", "minimum": "min"}[e.func], a, b, dtype)

    @BUILTIN_RULES.on("binary_int")
    def call_binary_int(self, e: ast.Call) -> Value:
        """cdiv(a, b) as constants.ceil_divide computes it: a / b, plus 1 where the remainder is
        not 0 and has b's sign (for u32: is not 0), so that nothing wraps."""
        t = self.ck.types[e]
        dtype = t.dtype
        a, b = self.expr(e.args[0], dtype), self.expr(e.args[1], dtype)
        self.at(e)
        shape = shape_of(t)
        quotient, rest = self.binary("div", a, b, dtype), self.binary("rem", a, b, dtype)
        zero = self.coerce(self.b.const(0, ScalarType(dtype)), shape)
        up = self.compare("ne", rest, zero)
        if dtype.is_signed:
            same_sign = self.compare("eq", self.compare("lt", rest, zero),
                                     self.compare("lt", self.coerce(b, shape), zero))
            up = self.b.value("and", [up, same_sign], up.type)
        one = self.coerce(self.b.const(1, ScalarType(dtype)), shape)
        return self.binary("add", quotient, self.b.value("select", [up, one, zero], t), dtype)

    def compare(self, pred: str, a: Value, b: Value) -> Value:
        return self.b.value("cmp", [a, b], self.typed(DType.BOOL, shape_of(a.type)), pred=pred)

    @BUILTIN_RULES.on("where")
    def call_where(self, e: ast.Call) -> Value:
        t = self.ck.types[e]
        c = self.expr(e.args[0])
        a, b = self.expr(e.args[1], t.dtype), self.expr(e.args[2], t.dtype)
        shape = shape_of(t)
        self.at(e)
        return self.b.value("select", [self.coerce(c, shape), self.coerce(a, shape), self.coerce(b, shape)], t)

    @BUILTIN_RULES.on("arange")
    def call_arange(self, e: ast.Call) -> Value:
        start = self.ck.consts[e.args[0]] if len(e.args) == 2 else 0
        self.at(e)
        return self.b.value("arange", [], self.ck.types[e], start=start)

    @BUILTIN_RULES.on("full")
    def call_full(self, e: ast.Call) -> Value:
        t = self.ck.types[e]
        v = self.expr(e.args[1], t.dtype)
        self.at(e)
        return self.coerce(v, t.shape)

    @BUILTIN_RULES.on("reshape")
    def call_reshape(self, e: ast.Call) -> Value:
        x = self.expr(e.args[0])
        self.at(e)
        return self.b.value("reshape", [x], self.ck.types[e])

    @BUILTIN_RULES.on("cast")
    def call_cast(self, e: ast.Call) -> Value:
        x = self.expr(e.args[0])
        self.at(e)
        return self.convert(x, CAST_DTYPES[e.func])


    @BUILTIN_RULES.on("fma", "mulhi")
    def call_fma_mulhi(self, e: ast.Call) -> Value:
        t = self.ck.types[e]
        args = [self.coerce(self.expr(x, t.dtype), shape_of(t)) for x in e.args]
        self.at(e)
        return self.b.value(e.func, args, t)

    @BUILTIN_RULES.on("bitcast")
    def call_bitcast(self, e: ast.Call) -> Value:
        x = self.expr(e.args[0])
        self.at(e)
        return self.b.value("bitcast", [x], self.ck.types[e])

    @BUILTIN_RULES.on("scan_op")
    def call_scan_op(self, e: ast.Call) -> Value:
        t = self.ck.types[e]
        x = self.expr(argument(e, 0, "x"), t.dtype)
        self.at(e)
        return self.b.value("scan", [x], t, kind=SCAN_KINDS[e.func], axis=self.axis(e, len(x.type.shape)))

    def axis(self, e: ast.Call, rank: int, default: int | None = 0, position: int = 1) -> int | None:
        """The constant axis argument of `e` (positional, or `axis=`), in 0..rank-1."""
        axis_e = argument(e, position, "axis")
        return default if axis_e is None else self.ck.consts[axis_e] % rank

    def combine_region(self, e: ast.Call, dtypes: list[DType]) -> Block:
        """The combine function of a scan or reduce as a region: block arguments a..., b...
        (scalars), ending in `yield` of the combined values."""
        region = Block()
        outer = self.b
        self.b = Builder(self.func, region, e.loc)
        args = [self.b.block_arg(region, ScalarType(d)) for d in dtypes + dtypes]
        out = self.inline(self.ck.calls[e], args)
        self.b.loc = e.loc
        self.b.op("yield", list(out) if isinstance(out, tuple) else [out], [])
        self.b = outer
        return region

    def combined(self, e: ast.Call) -> list[Value]:
        """The tiles a scan or reduce combines, broadcast to one shape (the checker's type of them)."""
        x_e = argument(e, 0, "x")
        t = self.ck.types[x_e]
        items, types = (x_e.items, t.items) if isinstance(x_e, ast.TupleLit) else ([x_e], [t])
        return [self.coerce(self.expr(x, xt.dtype), xt.shape) for x, xt in zip(items, types)]

    @BUILTIN_RULES.on("scan", "reduce_with")
    def call_scan_reduce(self, e: ast.Call) -> Value | tuple[Value, ...]:
        xs = self.combined(e)
        t = self.ck.types[e]
        types = list(t.items) if isinstance(t, TupleType) else [t]
        rank = len(xs[0].type.shape)
        axis = self.axis(e, rank, 0 if e.func == "scan" else None)
        region = self.combine_region(e, [x.dtype for x in xs])
        self.at(e)
        opcode = "scan" if e.func == "scan" else "reduce"
        op = self.b.op(opcode, xs, types, {"kind": "combine", "axis": axis}, [region])
        return tuple(op.results) if isinstance(t, TupleType) else op.result

    @BUILTIN_RULES.on("permute")
    def call_permute(self, e: ast.Call) -> Value:
        x = self.expr(e.args[0])
        order = (1, 0) if e.func == "trans" else tuple(self.ck.consts[d] for d in e.args[1].items)
        self.at(e)
        return self.b.value("permute", [x], self.ck.types[e], order=order)

    @BUILTIN_RULES.on("join")
    def call_join(self, e: ast.Call) -> Value:
        t = self.ck.types[e]
        a, b = (self.coerce(self.expr(x, t.dtype), t.shape[:-1] or None) for x in e.args)
        self.at(e)
        return self.b.value("join", [a, b], t)

    @BUILTIN_RULES.on("split")
    def call_split(self, e: ast.Call) -> tuple[Value, Value]:
        x = self.expr(e.args[0])
        half = self.ck.types[e].items[0]
        self.at(e)
        starts = [0] * (len(x.type.shape) - 1)
        sizes = list(x.type.shape[:-1])
        return tuple(self.b.value("extract", [x], half, starts=starts + [k], sizes=sizes + [None]) for k in (0, 1))

    @BUILTIN_RULES.on("concat")
    def call_concat(self, e: ast.Call) -> Value:
        t = self.ck.types[e]
        a, b = self.expr(argument(e, 0, "a"), t.dtype), self.expr(argument(e, 1, "b"), t.dtype)
        axis = self.axis(e, len(t.shape), position=2)
        self.at(e)
        return self.b.value("concat", [a, b], t, axis=axis)

    @BUILTIN_RULES.on("atomic")
    def call_atomic(self, e: ast.Call) -> Value:
        return self.atomic(e, used=True)

    def atomic(self, e: ast.Call, used: bool) -> Value | None:
        """atomic_OP(T[...], x[, y]): one `atomic` op addressing each element (see element_indices)."""
        target, *values = e.args
        tensor = self.env[self.ck.symbols[target.base]]
        slice_t = self.ck.types[target]
        dtype = tensor.type.dtype.compute
        xs = [self.coerce(self.expr(x, dtype), shape_of(slice_t)) for x in values]
        indices = self.element_indices(target)
        self.at(e)
        kind = e.func[len("atomic_"):]
        op = self.b.op("atomic", [tensor, *indices, *xs], [slice_t],
                       {"op": kind, "used": used, "ordered": kind in ORDERED_ATOMICS})
        return op.result

    @BUILTIN_RULES.on("print")
    def call_print(self, e: ast.Call) -> tuple:
        text = e.args[0].value
        values = [self.expr(x, self.ck.types[x].dtype) for x in e.args[1:]]
        shape = None
        for v in values:
            shape = broadcast_shapes(shape, shape_of(v.type))
        values = [self.coerce(v, shape) for v in values]
        self.at(e)
        self.b.op("print", values, [], {"text": text})
        return ()

    @BUILTIN_RULES.on("assert")
    def call_assert(self, e: ast.Call) -> tuple:
        """A comparison's operands go along (attr `compare` its operator), so that a failure shows them."""
        cond = self.expr(e.args[0])
        text = e.args[1].value if len(e.args) > 1 else ""
        compare = e.args[0].op if isinstance(e.args[0], ast.Binary) and OPERATORS[e.args[0].op][0] == "cmp" else None
        compared = list(cond.owner.operands) if compare is not None else []
        self.at(e)
        self.b.op("assert", [cond, *compared], [], {"text": text, "compare": compare})
        return ()


def generate(ck: CheckedKernel) -> Function:
    """Tile-level IR for one checked kernel configuration."""
    return IRGen(ck).run()
