# IR generation: a checked kernel (one configuration) -> tile-level SSA IR.
#
# Variables disappear here: each `var` assignment makes a new SSA value, and the
# checker's `carried` table says which outer variables a loop or an `if` assigns,
# so they become the loop's carried values (block arguments + yield) or the
# `if`'s results.  Everything implicit in the source becomes explicit: literals
# get the dtype their context asks for, scalars and size-1 extents are widened
# by `broadcast`, compound assignment to a tensor slice becomes load-op-store.
#
# Before: a CheckedKernel whose every expression has a type.  After: a Function
# that `ir.verify` accepts, with attrs `params` (the PTX signature, as
# KernelParam), `config` and `knobs` (the configuration's Knobs, for lowering).
from __future__ import annotations

from ..constants import OPERATORS, UNARY_OPERATORS, convert
from ..dispatch import Dispatch
from ..frontend import ast
from ..frontend.builtins import BUILTINS, CAST_DTYPES
from .ir import Block, Builder, Function, KernelParam, Value
from ..frontend.sema import CheckedKernel, Symbol
from ..types import DType, ScalarType, TensorType, TileType, broadcast_shapes, shape_of

# The IR of each kind of statement and expression (keyed by AST class) and of
# each builtin (keyed by `Builtin.rule`; effect builtins are statements).
STATEMENTS = Dispatch("statement")
EXPRESSIONS = Dispatch("expression")
BUILTIN_RULES = Dispatch("builtin rule")


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
        self.block(self.ck.kernel.body)
        return self.func

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
        """The dtype two operands meet in: a literal-only side follows the other."""
        ta, tb = self.ck.types[a], self.ck.types[b]
        if ta.dtype == tb.dtype or b in self.ck.weak:
            return ta.dtype
        return tb.dtype

    def typed(self, dtype: DType, shape) -> ScalarType | TileType:
        return ScalarType(dtype) if shape is None else TileType(dtype, shape)

    # ------------------------------------------------------------ statements
    def block(self, block: ast.Block) -> None:
        for s in block.stmts:
            self.at(s)
            STATEMENTS.lookup(type(s))(self, s)

    @STATEMENTS.on(ast.Let)
    def stmt_let(self, s: ast.Let) -> None:
        sym = self.ck.symbols[s]
        v = self.expr(s.value, sym.type.dtype)
        v = self.coerce(v, shape_of(sym.type))
        if not v.name:
            v.name = sym.name
        self.env[sym] = v

    @STATEMENTS.on(ast.Assign)
    def stmt_assign(self, s: ast.Assign) -> None:
        target = s.target
        if isinstance(target, ast.Name):
            sym = self.ck.symbols[target]
            new = self.expr(s.value, sym.type.dtype)
            if s.op != "=":
                self.at(s)
                new = self.binary(OPERATORS[s.op[0]][0], self.env[sym], new, sym.type.dtype)
            new = self.coerce(new, shape_of(sym.type))
            if not new.name:
                new.name = sym.name
            self.env[sym] = new
            return
        tensor = self.env[self.ck.symbols[target.base]]
        indices, sizes = self.subscripts(target)
        slice_shape = tuple(s_ for s_ in sizes if s_ is not None) or None
        dtype = tensor.type.dtype.compute
        value = self.expr(s.value, dtype)
        self.at(s)
        if s.op != "=":
            old = self.b.value("load", [tensor, *indices], self.typed(dtype, slice_shape), sizes=sizes)
            value = self.binary(OPERATORS[s.op[0]][0], old, value, dtype)
        value = self.coerce(value, slice_shape)
        self.b.op("store", [tensor, *indices, value], [], {"sizes": sizes})

    @STATEMENTS.on(ast.ExprStmt)
    def stmt_expr_stmt(self, s: ast.ExprStmt) -> None:
        call = s.expr
        target, x = call.args
        tensor = self.env[self.ck.symbols[target.base]]
        indices, sizes = self.subscripts(target)
        slice_shape = tuple(s_ for s_ in sizes if s_ is not None) or None
        value = self.coerce(self.expr(x, tensor.type.dtype.compute), slice_shape)
        self.at(call)
        self.b.op("atomic_add", [tensor, *indices, value], [], {"sizes": sizes})

    @STATEMENTS.on(ast.For)
    def stmt_for(self, s: ast.For) -> None:
        iv_sym = self.ck.symbols[s]
        dtype = iv_sym.type.dtype
        lo = self.expr(s.start, dtype)
        hi = self.expr(s.end, dtype)
        step = self.ck.consts[s.step] if s.step is not None else 1
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

    @STATEMENTS.on(ast.If)
    def stmt_if(self, s: ast.If) -> None:
        cond = self.expr(s.cond)
        carried = self.ck.carried.get(s, [])
        self.at(s)
        then, orelse = Block(), Block()
        op = self.b.op("if", [cond], [c.type for c in carried], {}, [then, orelse])
        outer_builder, outer_env = self.b, self.env
        for region, body in ((then, s.then), (orelse, s.orelse)):
            self.b = Builder(self.func, region, s.loc)
            self.env = dict(outer_env)
            if body is not None:
                self.block(body)
            self.b.loc = s.loc
            self.b.op("yield", [self.env[c] for c in carried], [])
        self.b, self.env = outer_builder, outer_env
        for c, r in zip(carried, op.results):
            r.name = c.name
            self.env[c] = r

    # ------------------------------------------------------------ expressions
    def expr(self, e: ast.Expr, want: DType | None = None) -> Value:
        """The value of `e`; a literal-only expression takes the dtype `want`."""
        t = self.ck.types[e]
        value = self.ck.consts.get(e)
        if value is not None and isinstance(t, ScalarType):
            dtype = want if (want is not None and e in self.ck.weak) else t.dtype
            self.at(e)
            return self.b.const(convert(value, dtype), ScalarType(dtype))
        return EXPRESSIONS.lookup(type(e))(self, e)

    @EXPRESSIONS.on(ast.Name)
    def expr_name(self, e: ast.Name) -> Value:
        return self.env[self.ck.symbols[e]]

    def binary(self, opcode: str, a: Value, b: Value, dtype: DType) -> Value:
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
        x = self.expr(e.operand)
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

    @EXPRESSIONS.on(ast.Index)
    def expr_index(self, e: ast.Index) -> Value:
        base_t = self.ck.types[e.base]
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
    def expr_call(self, e: ast.Call) -> Value:
        return BUILTIN_RULES.lookup(BUILTINS[e.func].rule)(self, e)

    @BUILTIN_RULES.on("grid_index")
    def call_grid_index(self, e: ast.Call) -> Value:
        self.at(e)
        return self.b.value(e.func, [], ScalarType(DType.I32), axis=self.ck.consts[e.args[0]])

    @BUILTIN_RULES.on("dot")
    def call_dot(self, e: ast.Call) -> Value:
        a, b = self.expr(e.args[0]), self.expr(e.args[1])
        self.at(e)
        return self.b.value("dot", [a, b], self.ck.types[e])

    @BUILTIN_RULES.on("reduce", "reduce_index")
    def call_reduce(self, e: ast.Call) -> Value:
        x = self.expr(e.args[0])
        axis_e = e.args[1] if len(e.args) == 2 else next((k.value for k in e.kwargs if k.name == "axis"), None)
        axis = None
        if axis_e is not None:
            axis = self.ck.consts[axis_e] % len(x.type.shape)
        self.at(e)
        return self.b.value("reduce", [x], self.ck.types[e], kind=e.func, axis=axis)

    @BUILTIN_RULES.on("unary_float")
    def call_unary_float(self, e: ast.Call) -> Value:
        t = self.ck.types[e]
        x = self.expr(e.args[0], t.dtype)
        self.at(e)
        return self.b.value(e.func, [x], t)

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


def generate(ck: CheckedKernel) -> Function:
    """Tile-level IR for one checked kernel configuration."""
    return IRGen(ck).run()
