# The checker: AST + one autotune configuration -> a typed kernel.
#
# Tile extents and slice sizes are compile-time constants that may depend on
# autotune parameters, so a kernel is checked once per configuration, with the
# configuration's values bound as constants.  The AST is shared by all of
# them and never written to: the results live in side tables of the returned
# `CheckedKernel`, keyed by node - the type of every expression, the value of
# every compile-time constant, the symbol every name resolves to, and for each
# loop and `if` the outer `var`s it assigns (what the IR generator must thread
# through as loop-carried values or branch results).
#
# Errors are collected per statement so that `phobos check` can show all of
# them; an expression that refers to a name whose declaration failed is
# skipped silently instead of producing a second, derived error.
#
# Literal-only expressions (`weak`: 2, 1.5, 4 * 1024) have no dtype of their
# own: they take the one their context asks for, so `acc * 2` stays f32.  Their
# integer values are folded exactly and must fit the dtype they settle in; an
# error names the value rather than letting it wrap.  Errors about a whole value
# point at its first token (`start_loc`), errors about an operation at its
# operator.
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field

from . import ast
from .ast import start_loc
from .builtins import BUILTINS, CAST_DTYPES, KEYWORDS
from .launch_rules import RULE_DECORATORS, LaunchRules, rules_of
from ..configuration import Knobs, config_text, knob_problem
from ..constants import OPERATORS, convert, evaluate, exact, fits, int_range, range_text
from ..dispatch import Dispatch
from ..errors import ErrorList, Loc, Note, PhobosError, SemanticError
from ..types import (DType, ScalarType, TensorType, TileType, ValueType, broadcast_shapes,
                    shape_of, with_dtype)

MAX_TILE_ELEMENTS = 1 << 20
SCALAR_PARAM_DTYPES = (DType.F32, DType.F64, DType.I32, DType.I64, DType.U32, DType.BOOL)


@dataclass(eq=False)
class Symbol:
    """A named thing: parameter, size, autotune constant, let/var binding or loop variable."""

    name: str
    kind: str  # 'tensor', 'scalar', 'size', 'const', 'let', 'var', 'loop', 'literal' (inf, nan)
    type: ValueType | TensorType | None  # None: its declaration failed to check
    loc: Loc
    value: int | float | bool | None = None  # compile-time value, when known

    @property
    def mutable(self) -> bool:
        return self.kind == "var"


KERNEL_SCOPE = 1  # scopes[0] holds NAMED_CONSTANTS
NAMED_CONSTANTS = {
    name: Symbol(name, "literal", ScalarType(DType.F32), Loc("<builtin>", 0, 0), value)
    for name, value in (("inf", float("inf")), ("nan", float("nan")))
}


@dataclass
class SizeBinding:
    """A size name and where launch arguments fix it: (parameter index, dimension)."""

    symbol: Symbol
    uses: list[tuple[int, int]]


@dataclass
class CheckedKernel:
    kernel: ast.Kernel
    config: dict[str, int]
    params: list[Symbol]
    sizes: dict[str, SizeBinding]
    types: dict[object, ValueType | TensorType] = field(default_factory=dict)
    consts: dict[object, int | float | bool] = field(default_factory=dict)
    symbols: dict[object, Symbol] = field(default_factory=dict)  # Name use / declaration -> Symbol
    carried: dict[object, list[Symbol]] = field(default_factory=dict)  # For/If -> outer vars assigned
    written: set[str] = field(default_factory=set)  # tensor parameters the kernel stores into
    weak: set[object] = field(default_factory=set)  # literal-only expressions; their dtype follows context
    knobs: Knobs = field(default_factory=Knobs)  # what the configuration's WARPS, STAGES, GROUP_M set

    @property
    def name(self) -> str:
        return self.kernel.name

    def type_of(self, e) -> ValueType | TensorType:
        return self.types[e]

    def const_of(self, e):
        return self.consts.get(e)


# The checking rule of each kind of statement and expression (keyed by AST
# class) and the typing rule of each builtin (keyed by `Builtin.rule`).
STATEMENTS = Dispatch("statement")
EXPRESSIONS = Dispatch("expression")
BUILTIN_RULES = Dispatch("builtin typing rule")


class _Poisoned(Exception):
    """An expression depends on a declaration that already failed; skip it quietly."""


# ------------------------------------------------------------ autotune space
def autotune_space(kernel: ast.Kernel) -> dict[str, list[int]]:
    """The autotune parameters of a kernel and their values, in source order."""
    space: dict[str, list[int]] = {}
    for deco in kernel.decorators:
        if deco.name in RULE_DECORATORS:
            continue  # launch_rules reads these
        if deco.name != "autotune":
            raise SemanticError(f"unknown decorator '@{deco.name}'; the decorators are @autotune, "
                                f"{', '.join('@' + name for name in RULE_DECORATORS)}", deco.loc)
        if deco.args:
            raise SemanticError("@autotune lists values as NAME in [v1, v2, ...]; conditions go in "
                                "@require(...), derived constants in @derive(NAME = ...)", start_loc(deco.args[0]))
        if not deco.params:
            raise SemanticError("@autotune needs at least one parameter, e.g. @autotune(BLOCK in [256])",
                                deco.loc)
        for p in deco.params:
            if p.name in space:
                raise SemanticError(f"autotune parameter '{p.name}' is listed twice", p.loc)
            values = []
            for v in p.values:
                value = _literal_int(v)
                if value is None:
                    raise SemanticError(f"autotune values must be integer literals, e.g. {p.name} in [64, 128]",
                                        v.loc)
                if not fits(value, DType.I32):
                    raise SemanticError(f"autotune parameters are i32 constants: {value} does not fit in i32 "
                                        f"({range_text(DType.I32)})", start_loc(v))
                problem = knob_problem(p.name, value)
                if problem is not None:
                    raise SemanticError(problem, start_loc(v))
                values.append(value)
            if len(set(values)) != len(values):
                raise SemanticError(f"autotune parameter '{p.name}' lists a value twice", p.loc)
            space[p.name] = values
    return space


def _literal_int(e: ast.Expr) -> int | None:
    if isinstance(e, ast.IntLit):
        return e.value
    if isinstance(e, ast.Unary) and e.op == "-" and isinstance(e.operand, ast.IntLit):
        return -e.operand.value
    return None


def launch_rules(kernel: ast.Kernel) -> LaunchRules:
    """The kernel's autotune space with its @derive, @require and @key, checked."""
    return rules_of(kernel, autotune_space(kernel))


def configurations(kernel: ast.Kernel) -> list[dict[str, int]]:
    """The configurations a kernel is checked and compiled under before any call: the cartesian
    product of the autotune values (less those no sizes can serve), with any derived constants
    at sample sizes (LaunchRules.representative)."""
    return launch_rules(kernel).representative()


def resolve_config(kernel: ast.Kernel, config: dict[str, int] | None) -> dict[str, int]:
    """The configuration to compile: given values, the first listed value for the rest; derived
    constants not given take their values at the first sample sizes the conditions allow."""
    rules = launch_rules(kernel)
    space = rules.space
    config = dict(config or {})
    for name, value in config.items():
        if name not in space and name not in rules.derived_names:
            known = ", ".join([*space, *rules.derived_names]) or "none"
            what = "autotune parameter or derived constant" if rules.derived else "autotune parameter"
            raise SemanticError(f"kernel '{kernel.name}' has no {what} '{name}' (it has: {known})", kernel.loc)
        if not isinstance(value, int) or isinstance(value, bool):
            raise SemanticError(f"autotune parameter '{name}' must be an integer, got {value!r}", kernel.loc)
        declared = declaration(kernel, name)
        if not fits(value, DType.I32):
            raise SemanticError(f"autotune parameter '{name}' is an i32 constant: {value} does not fit in i32 "
                                f"({range_text(DType.I32)})", declared)
        problem = knob_problem(name, value)
        if problem is not None:
            raise SemanticError(problem, declared)
    resolved = {name: config.get(name, values[0]) for name, values in space.items()}
    missing = [d for d in rules.derived if d.name not in config]
    if missing:
        fixed = {name: resolved[name] for name in space}
        sample = next(iter(rules.representative(fixed)), None)
        if sample is None:
            raise SemanticError(f"kernel '{kernel.name}' derives {missing[0].name} from its sizes, and no sample "
                                f"sizes meet its conditions: give its value (config={{'{missing[0].name}': ...}})",
                                missing[0].loc)
        config = {**sample, **config}
    return {**resolved, **{name: config[name] for name in rules.derived_names}}


def declaration(kernel: ast.Kernel, name: str) -> Loc:
    """Where an autotune parameter (`NAME in [...]`) or a derived constant (`NAME = ...`) is declared."""
    return next(item.loc for d in kernel.decorators for item in [*d.params, *d.args]
                if getattr(item, "name", None) == name)


# ------------------------------------------------------------------- checker
class Checker:
    """Checks one kernel under one configuration; see `check_kernel`."""

    def __init__(self, kernel: ast.Kernel, config: dict[str, int]):
        self.kernel = kernel
        self.errors: list[PhobosError] = []
        # the outermost scope holds the named float constants; the kernel's scope comes next
        self.scopes: list[dict[str, Symbol]] = [dict(NAMED_CONSTANTS), {}]
        self.out = CheckedKernel(kernel, config, [], {}, knobs=Knobs.of(config))
        self.weak = self.out.weak
        self.statement_calls: set[ast.Call] = set()  # effect builtins standing as statements
        self.loop_stack: list[tuple[object, int]] = []  # (For/If node, scope depth outside it)

    # ------------------------------------------------------------ scopes
    def define(self, sym: Symbol) -> Symbol:
        scope = self.scopes[-1]
        prev = scope.get(sym.name)
        if prev is not None:
            raise SemanticError(f"'{sym.name}' is already defined in this scope", sym.loc,
                                [Note("previous definition is here", prev.loc)])
        scope[sym.name] = sym
        return sym

    def lookup(self, name: str, loc: Loc) -> Symbol:
        for depth in range(len(self.scopes) - 1, -1, -1):
            sym = self.scopes[depth].get(name)
            if sym is not None:
                return sym
        known = [n for scope in self.scopes for n in scope]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        if name in BUILTINS:
            hint = f"; '{name}' is a function: call it as {BUILTINS[name].signature}"
        raise SemanticError(f"'{name}' is not defined{hint}", loc)

    def depth_of(self, sym: Symbol) -> int:
        for depth in range(len(self.scopes) - 1, -1, -1):
            if self.scopes[depth].get(sym.name) is sym:
                return depth
        return 0

    # ------------------------------------------------------------ kernel
    def check(self) -> CheckedKernel:
        k = self.kernel
        for name, value in self.out.config.items():
            loc = declaration(k, name)
            problem = knob_problem(name, value)  # a derived knob's value is known only now
            if problem is not None:
                self.errors.append(SemanticError(problem, loc))
            self.define(Symbol(name, "const", ScalarType(DType.I32), loc, value))
        for index, param in enumerate(k.params):
            try:
                self.check_param(index, param)
            except SemanticError as err:  # its uses are skipped, not reported again
                self.errors.append(err)
                kind = "scalar" if param.type.kind == "scalar" else "tensor"
                self.scopes[KERNEL_SCOPE].setdefault(param.name, Symbol(param.name, kind, None, param.loc))
        self._attempt_block_stmts(k.body)
        if self.errors:
            raise self.errors[0] if len(self.errors) == 1 else ErrorList(self.errors)
        return self.out

    def check_param(self, index: int, param: ast.Param) -> None:
        t = param.type
        dtype = self.dtype(t)
        if t.kind == "tile":
            raise SemanticError("a kernel parameter cannot be a tile; pass a tensor and load from it", t.loc)
        if t.kind == "scalar":
            if dtype not in SCALAR_PARAM_DTYPES:
                raise SemanticError(f"scalar parameters must be one of "
                                    f"{', '.join(d.value for d in SCALAR_PARAM_DTYPES)}; got {dtype}", t.dtype_loc)
            sym = self.define(Symbol(param.name, "scalar", ScalarType(dtype), param.loc))
        else:
            dims: list[str | int] = []
            for d, e in enumerate(t.dims):
                if isinstance(e, ast.IntLit):
                    if e.value <= 0:
                        raise SemanticError("a tensor dimension must be positive", e.loc)
                    if not fits(e.value, DType.I32):
                        raise SemanticError(f"a tensor dimension is an i32: {e.value} does not fit in i32 "
                                            f"({range_text(DType.I32)})", e.loc)
                    dims.append(e.value)
                elif isinstance(e, ast.Name):
                    dims.append(e.id)
                    self.bind_size(e, index, d)
                else:
                    raise SemanticError("a tensor dimension is a size name (like N) or an integer literal",
                                        start_loc(e))
            elements = math.prod(d for d in dims if isinstance(d, int))
            if not fits(elements, DType.I32):
                raise SemanticError(f"a tensor of {elements} elements is too large: kernels index tensors "
                                    f"with i32, so at most {int_range(DType.I32)[1]} elements", t.loc)
            sym = self.define(Symbol(param.name, "tensor", TensorType(dtype, tuple(dims)), param.loc))
        self.out.params.append(sym)
        self.out.symbols[param] = sym

    def bind_size(self, e: ast.Name, index: int, dim: int) -> None:
        binding = self.out.sizes.get(e.id)
        if binding is None:
            existing = self.scopes[KERNEL_SCOPE].get(e.id)
            if existing is not None:
                raise SemanticError(f"size name '{e.id}' is already defined as "
                                    f"{'an autotune parameter' if existing.kind == 'const' else 'a parameter'}",
                                    e.loc, [Note("previous definition is here", existing.loc)])
            sym = self.define(Symbol(e.id, "size", ScalarType(DType.I32), e.loc))
            binding = self.out.sizes[e.id] = SizeBinding(sym, [])
        binding.uses.append((index, dim))
        self.out.symbols[e] = binding.symbol

    def dtype(self, t: ast.TypeExpr) -> DType:
        dtype = DType.from_name(t.dtype)
        if dtype is None:
            close = difflib.get_close_matches(t.dtype, [d.value for d in DType], n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise SemanticError(f"unknown element type '{t.dtype}'{hint}", t.dtype_loc)
        return dtype

    def value_type(self, t: ast.TypeExpr) -> ValueType:
        """The type named by a `let`/`var` annotation (a scalar or a tile)."""
        dtype = self.dtype(t)
        if t.kind == "tensor":
            raise SemanticError("a variable cannot be a tensor; tensors are kernel parameters", t.loc)
        if dtype.is_storage_only:
            raise SemanticError(f"{dtype} is a storage type: values are computed in {dtype.compute}; "
                                f"declare the variable as {dtype.compute}", t.dtype_loc)
        if t.kind == "scalar":
            return ScalarType(dtype)
        shape = tuple(self.extent(e) for e in t.dims)
        self.check_size(shape, t.loc)
        return TileType(dtype, shape)

    def extent(self, e: ast.Expr) -> int:
        value = self.const_int(e, "a tile extent")
        if value <= 0:
            raise SemanticError(f"a tile extent must be positive, got {value}", start_loc(e))
        return value

    def const_int(self, e: ast.Expr, what: str) -> int:
        t = self.expr(e)
        value = self.out.consts.get(e)
        if not (isinstance(t, ScalarType) and t.dtype.is_int) or value is None:
            raise SemanticError(f"{what} must be a compile-time integer constant "
                                f"(literals, autotune parameters and arithmetic on them)", start_loc(e))
        return value

    # ------------------------------------------------------------ statements
    def _attempt(self, fn, *args) -> None:
        try:
            fn(*args)
        except _Poisoned:
            pass
        except SemanticError as err:
            self.errors.append(err)

    def _attempt_block_stmts(self, block: ast.Block) -> None:
        for s in block.stmts:
            self._attempt(self.stmt, s)

    def block(self, block: ast.Block) -> None:
        self.scopes.append({})
        try:
            self._attempt_block_stmts(block)
        finally:
            self.scopes.pop()

    def stmt(self, s: ast.Stmt) -> None:
        STATEMENTS.lookup(type(s))(self, s)

    @STATEMENTS.on(ast.Let)
    def stmt_let(self, s: ast.Let) -> None:
        sym = Symbol(s.name, "var" if s.mutable else "let", None, s.name_loc)
        self.out.symbols[s] = sym
        try:
            declared = self.value_type(s.type) if s.type is not None else None
            vt = self.expr(s.value)
            if isinstance(vt, TensorType):
                raise SemanticError("a tensor cannot be bound to a name; index it to load a tile",
                                    start_loc(s.value))
            if declared is not None:
                sym.type = self.assignable(declared, s.value, vt, start_loc(s.value))
            else:
                sym.type = self.concrete(s.value, vt)
        except (SemanticError, _Poisoned):
            self.scopes[-1].setdefault(s.name, sym)  # poisoned: later uses are skipped, not reported
            raise
        value = self.out.consts.get(s.value)
        if not s.mutable and value is not None and isinstance(sym.type, ScalarType):
            sym.value = convert(value, sym.type.dtype)
        self.define(sym)

    def concrete(self, e: ast.Expr, t: ValueType) -> ValueType:
        """The type a value keeps when nothing around it asks for another (literals: i32, or i64
        when the value needs it; f32)."""
        if e in self.weak and isinstance(t, ScalarType) and t.dtype is DType.I32:
            value = self.out.consts.get(e)
            if value is not None and not fits(value, DType.I32):
                return ScalarType(DType.I64)
        self.settle(e, t.dtype)
        return t

    @STATEMENTS.on(ast.Assign)
    def stmt_assign(self, s: ast.Assign) -> None:
        target = s.target
        if isinstance(target, ast.Name):
            sym = self.lookup(target.id, target.loc)
            self.out.symbols[target] = sym
            if sym.type is None:
                raise _Poisoned()
            if not sym.mutable:
                why = {"let": "it was declared with 'let' (use 'var' to make it mutable)",
                       "literal": "it is a constant",
                       "loop": "it is a loop variable", "const": "it is an autotune parameter",
                       "size": "it is a tensor size", "scalar": "it is a kernel parameter",
                       "tensor": "it is a tensor; assign to a slice of it, like x[i :+ 4] = ..."}[sym.kind]
                raise SemanticError(f"cannot assign to '{sym.name}': {why}", start_loc(target))
            value_t = self.rhs_type(s, sym.type)
            self.assignable(sym.type, s.value, value_t, start_loc(s.value))
            self.types_set(target, sym.type)
            self.note_assigned(sym)
            return
        base = target.base
        if not isinstance(base, ast.Name):
            raise SemanticError("can only assign to a slice of a tensor parameter", start_loc(target))
        bt = self.expr(base)
        if not isinstance(bt, TensorType):
            raise SemanticError(f"cannot assign to an element of '{base.id}': only tensor slices can be "
                                f"assigned (tiles are values; build a new one)", start_loc(target))
        slice_t = self.index(target, bt)
        value_t = self.rhs_type(s, slice_t)
        if isinstance(value_t, TensorType):
            raise SemanticError("cannot store a tensor; index it to load a tile", start_loc(s.value))
        self.storable(bt.dtype, slice_t, s.value, value_t, start_loc(s.value))
        self.out.written.add(base.id)

    def rhs_type(self, s: ast.Assign, target_t: ValueType) -> ValueType:
        """The value being stored: the right side, or `target op right` for compound assignment."""
        vt = self.expr(s.value)
        if s.op == "=":
            return vt
        if isinstance(vt, TensorType):
            raise SemanticError("a tensor cannot be used as a value; index it to load a tile", start_loc(s.value))
        return self.arith(s.op[0], target_t, s.value, vt, s.loc, lhs_node=None)

    def note_assigned(self, sym: Symbol) -> None:
        """Record `sym` as carried by every enclosing loop/if that it was declared outside of."""
        depth = self.depth_of(sym)
        for node, outer_depth in self.loop_stack:
            if depth < outer_depth:
                carried = self.out.carried.setdefault(node, [])
                if sym not in carried:
                    carried.append(sym)

    @STATEMENTS.on(ast.ExprStmt)
    def stmt_expr_stmt(self, s: ast.ExprStmt) -> None:
        e = s.expr
        if not (isinstance(e, ast.Call) and e.func in BUILTINS and BUILTINS[e.func].effect):
            self.expr(e)
            raise SemanticError("this expression's value is unused; bind it with 'let' or assign it", start_loc(e))
        self.statement_calls.add(e)
        self.expr(e)

    @STATEMENTS.on(ast.For)
    def stmt_for(self, s: ast.For) -> None:
        start_t = self.scalar_int(s.start, "a loop bound")
        end_t = self.scalar_int(s.end, "a loop bound")
        dtype = self.unify_dtypes(s.start, start_t.dtype, s.end, end_t.dtype, start_loc(s.end))
        for bound in (s.start, s.end):  # literal bounds take the loop variable's dtype
            self.settle(bound, dtype)
        if s.step is not None:
            step = self.const_int(s.step, "the step of range()")
            if step == 0:
                raise SemanticError("the step of range() cannot be zero", start_loc(s.step))
            self.settle(s.step, dtype)
        self.loop_stack.append((s, len(self.scopes)))
        self.scopes.append({})
        try:
            var = self.define(Symbol(s.var, "loop", ScalarType(dtype), s.var_loc))
            self.out.symbols[s] = var
            self.block(s.body)
        finally:
            self.scopes.pop()
            self.loop_stack.pop()

    @STATEMENTS.on(ast.If)
    def stmt_if(self, s: ast.If) -> None:
        ct = self.expr(s.cond)
        if not (isinstance(ct, ScalarType) and ct.dtype is DType.BOOL):
            hint = "; use where(cond, a, b) to choose between tiles" if isinstance(ct, TileType) else ""
            raise SemanticError(f"an if condition must be a scalar bool, not {ct}{hint}", start_loc(s.cond))
        self.loop_stack.append((s, len(self.scopes)))
        try:
            self.block(s.then)
            if s.orelse is not None:
                self.block(s.orelse)
        finally:
            self.loop_stack.pop()

    # ------------------------------------------------------------ type relations
    def assignable(self, target: ValueType, e: ast.Expr, vt, loc: Loc) -> ValueType:
        """Check that a value of type `vt` may be stored in a variable of type `target`."""
        if isinstance(vt, TensorType):
            raise SemanticError("a tensor cannot be used as a value; index it to load a tile", loc)
        if vt.dtype != target.dtype and not self.adapts(e, vt.dtype, target.dtype):
            raise SemanticError(f"cannot assign {_a(vt.dtype)} value to {_a(target.dtype)} variable; "
                                f"convert it with {target.dtype}(...)", loc)
        self.settle(e, target.dtype)
        self.fits_shape(shape_of(target), shape_of(vt), loc, "variable")
        return target

    def storable(self, dtype: DType, slice_t: ValueType, e: ast.Expr, vt: ValueType, loc: Loc) -> None:
        """Check that `vt` may be stored into a tensor slice of element type `dtype`."""
        compute = dtype.compute
        if vt.dtype != compute and not self.adapts(e, vt.dtype, compute):
            raise SemanticError(f"cannot store {_a(vt.dtype)} value into a tensor of {dtype}; "
                                f"convert it with {compute}(...)", loc)
        self.settle(e, dtype)
        self.fits_shape(shape_of(slice_t), shape_of(vt), loc, "slice")

    @staticmethod
    def fits_shape(target: tuple[int, ...] | None, value: tuple[int, ...] | None, loc: Loc, what: str) -> None:
        if value is None:
            return
        if target is None:
            raise SemanticError(f"cannot assign a tile [{', '.join(map(str, value))}] to a scalar {what}", loc)
        try:
            ok = broadcast_shapes(target, value) == target
        except ValueError:
            ok = False
        if not ok:
            raise SemanticError(f"shape mismatch: the {what} is [{', '.join(map(str, target))}] but the value "
                                f"is [{', '.join(map(str, value))}]", loc)

    def adapts(self, e: ast.Expr, have: DType, want: DType) -> bool:
        """Literal-only expressions take the dtype their context asks for (ints may become floats)."""
        if e not in self.weak:
            return False
        return (have.is_int and (want.is_int or want.is_float)) or (have.is_float and want.is_float)

    def unify_dtypes(self, a: ast.Expr | None, da: DType, b: ast.Expr | None, db: DType, loc: Loc) -> DType:
        """The dtype of an operation on `a` and `b`: theirs when equal, else the one that
        a literal-only side adapts to."""
        if da == db or (b is not None and self.adapts(b, db, da)):
            dtype = da
        elif a is not None and self.adapts(a, da, db):
            dtype = db
        else:
            raise SemanticError(f"mismatched types {da} and {db}; convert one side, e.g. {da}(...) "
                                f"or {db}(...)", loc)
        if not (a in self.weak and b in self.weak):  # literal-only operations settle later, as a whole
            self.settle(a, dtype)
            self.settle(b, dtype)
        return dtype

    def broadcast(self, sa, sb, loc: Loc):
        try:
            shape = broadcast_shapes(sa, sb)
        except ValueError as err:
            raise SemanticError(f"{err}; element-wise operations need equal shapes, a scalar, "
                                f"or extents of 1 that broadcast", loc) from None
        if shape is not None:
            self.check_size(shape, loc)
        return shape

    def scalar_int(self, e: ast.Expr, what: str) -> ScalarType:
        t = self.expr(e)
        if not (isinstance(t, ScalarType) and t.dtype.is_int):
            raise SemanticError(f"{what} must be an integer scalar, not {t}", start_loc(e))
        return t

    # ------------------------------------------------------------ expressions
    def types_set(self, e, t):
        self.out.types[e] = t
        return t

    def expr(self, e: ast.Expr):
        cached = self.out.types.get(e)
        if cached is not None:
            return cached
        t = self.out.types[e] = EXPRESSIONS.lookup(type(e))(self, e)
        return t

    @EXPRESSIONS.on(ast.IntLit)
    def expr_int_lit(self, e: ast.IntLit):
        self.weak.add(e)
        self.out.consts[e] = e.value
        return ScalarType(DType.I32)

    @EXPRESSIONS.on(ast.FloatLit)
    def expr_float_lit(self, e: ast.FloatLit):
        self.weak.add(e)
        self.out.consts[e] = e.value
        return ScalarType(DType.F32)

    @EXPRESSIONS.on(ast.BoolLit)
    def expr_bool_lit(self, e: ast.BoolLit):
        self.out.consts[e] = e.value
        return ScalarType(DType.BOOL)

    @EXPRESSIONS.on(ast.Name)
    def expr_name(self, e: ast.Name):
        sym = self.lookup(e.id, e.loc)
        self.out.symbols[e] = sym
        if sym.type is None:
            raise _Poisoned()
        if sym.value is not None:
            self.out.consts[e] = sym.value
        if sym.kind == "literal":
            self.weak.add(e)
        return sym.type

    @EXPRESSIONS.on(ast.ListLit)
    def expr_list_lit(self, e: ast.ListLit):
        raise SemanticError("a list can only be a shape argument, as in full([4, 8], 0.0)", e.loc)

    @EXPRESSIONS.on(ast.Unary)
    def expr_unary(self, e: ast.Unary):
        t = self.value(e.operand)
        value = self.out.consts.get(e.operand)
        if e.op == "-":
            if t.dtype is DType.BOOL:
                raise SemanticError("unary '-' needs a number, not bool; use '!' for logical not", e.loc)
            if value is not None:
                if e.operand in self.weak:
                    self.check_fits(-value, DType.I64, e.loc)
                    self.out.consts[e] = -value
                else:
                    self.out.consts[e] = evaluate("neg", {}, [value], [t.dtype], t.dtype)
        else:
            if t.dtype is not DType.BOOL:
                raise SemanticError(f"'!' needs a bool operand, not {t.dtype}", e.loc)
            if value is not None:
                self.out.consts[e] = not value
        if e.operand in self.weak:
            self.weak.add(e)
        return t

    def value(self, e: ast.Expr) -> ValueType:
        t = self.expr(e)
        if isinstance(t, TensorType):
            raise SemanticError(f"a tensor cannot be used as a value; index it to load a tile, "
                                f"like {getattr(e, 'id', 'x')}[i :+ 64]", start_loc(e))
        return t

    @EXPRESSIONS.on(ast.Binary)
    def expr_binary(self, e: ast.Binary):
        lt, rt = self.value(e.lhs), self.value(e.rhs)
        op = e.op
        if op in ("&&", "||"):
            for side, t in ((e.lhs, lt), (e.rhs, rt)):
                if t.dtype is not DType.BOOL:
                    raise SemanticError(f"'{op}' needs bool operands, not {t.dtype}", start_loc(side))
            shape = self.broadcast(shape_of(lt), shape_of(rt), e.loc)
            result = ScalarType(DType.BOOL) if shape is None else TileType(DType.BOOL, shape)
            operand_dtype = DType.BOOL
        elif op in ("==", "!=", "<", "<=", ">", ">="):
            operand_dtype = self.unify_dtypes(e.lhs, lt.dtype, e.rhs, rt.dtype, e.loc)
            if operand_dtype is DType.BOOL and op not in ("==", "!="):
                raise SemanticError(f"'{op}' compares numbers, not bools", e.loc)
            shape = self.broadcast(shape_of(lt), shape_of(rt), e.loc)
            result = ScalarType(DType.BOOL) if shape is None else TileType(DType.BOOL, shape)
        else:
            result = self.arith(op, lt, e.rhs, rt, e.loc, lhs_node=e.lhs)
            operand_dtype = result.dtype
        self.fold(e, result, operand_dtype)
        if e.lhs in self.weak and e.rhs in self.weak:
            self.weak.add(e)
        return result

    def arith(self, op: str, lt: ValueType, rhs: ast.Expr, rt: ValueType, loc: Loc, lhs_node) -> ValueType:
        for t in (lt, rt):
            if t.dtype is DType.BOOL:
                raise SemanticError(f"'{op}' needs numbers, not bool", loc)
        dtype = self.unify_dtypes(lhs_node, lt.dtype, rhs, rt.dtype, loc)
        if op == "%" and not dtype.is_int:
            raise SemanticError(f"'%' needs integer operands, not {dtype}", loc)
        shape = self.broadcast(shape_of(lt), shape_of(rt), loc)
        return ScalarType(dtype) if shape is None else TileType(dtype, shape)

    def fold(self, e: ast.Binary, result: ValueType, operand_dtype: DType) -> None:
        """The constant value of a binary expression on constants.

        Literal-only expressions are evaluated exactly (Python ints, doubles)
        and rounded once to the dtype their context gives them; any other
        constant expression is evaluated in its dtype, as the GPU would.
        """
        a, b = self.out.consts.get(e.lhs), self.out.consts.get(e.rhs)
        if a is None or b is None or not isinstance(result, ScalarType):
            return
        opcode, attrs = OPERATORS[e.op]
        if e.lhs in self.weak and e.rhs in self.weak:
            try:
                value = exact(opcode, attrs, a, b)
            except ZeroDivisionError:
                raise SemanticError("division by zero in a constant expression", e.loc) from None
            self.check_fits(value, DType.I64, e.loc)
        elif opcode in ("div", "rem") and operand_dtype.is_int and b == 0:
            raise SemanticError("division by zero in a constant expression", e.loc)
        else:
            value = evaluate(opcode, attrs, [a, b], [operand_dtype, operand_dtype], result.dtype)
        self.out.consts[e] = value

    def check_fits(self, value, dtype: DType, loc: Loc) -> None:
        """A constant must be representable in the dtype it takes: an integer in range, a
        finite float that does not round to infinity."""
        if isinstance(value, bool) or (dtype.is_int and isinstance(value, float)) or fits(value, dtype):
            return
        raise SemanticError(f"the constant {value} does not fit in {dtype} ({range_text(dtype)})", loc)

    def settle(self, e: ast.Expr, dtype: DType) -> None:
        """A literal-only expression takes `dtype`: its value must fit in it."""
        if e is not None and e in self.weak:
            value = self.out.consts.get(e)
            if value is not None:
                self.check_fits(value, dtype, start_loc(e))

    def settle_all(self, args, dtype: DType) -> None:
        """The literal-only arguments of a builtin take the dtype it computes in."""
        for arg in args:
            self.settle(arg, dtype)

    @EXPRESSIONS.on(ast.Index)
    def expr_index(self, e: ast.Index):
        bt = self.expr(e.base)
        if isinstance(bt, TensorType):
            return self.index(e, bt)
        if isinstance(bt, ScalarType):
            raise SemanticError(f"cannot index a scalar of type {bt}", e.loc)
        return self.tile_index(e, bt)

    def index(self, e: ast.Index, bt: TensorType) -> ValueType:
        """Type of a tensor slice `T[...]`: a tile of the slice sizes, or a scalar."""
        if len(e.subscripts) != bt.rank:
            raise SemanticError(f"tensor '{getattr(e.base, 'id', '?')}' has {bt.rank} dimension"
                                f"{'s' if bt.rank != 1 else ''} but is indexed with {len(e.subscripts)}",
                                e.loc)
        shape = []
        for dim, sub in zip(bt.dims, e.subscripts):
            if isinstance(sub, ast.Slice):
                self.scalar_int(sub.start, "a slice start")
                self.settle(sub.start, DType.I32)
                size = self.const_int(sub.size, "the size of a slice (after ':+')")
                if size <= 0:
                    raise SemanticError(f"the size of a slice must be positive, got {size}", start_loc(sub.size))
                if isinstance(dim, int) and size > dim:
                    raise SemanticError(f"a slice of {size} elements is larger than the dimension ({dim})",
                                        start_loc(sub.size))
                shape.append(size)
            else:
                t = self.expr(sub)
                if isinstance(t, TileType):
                    raise SemanticError("an index must be a scalar integer; gathers with tile indices "
                                        "are not supported", start_loc(sub))
                self.scalar_int(sub, "an index")
                self.settle(sub, DType.I32)
        dtype = bt.dtype.compute
        if not shape:
            return ScalarType(dtype)
        self.check_size(shape, e.loc)
        return TileType(dtype, tuple(shape))

    def tile_index(self, e: ast.Index, bt: TileType) -> ValueType:
        """Type of a part of a tile `t[...]`: starts and sizes are compile-time constants."""
        if len(e.subscripts) != len(bt.shape):
            raise SemanticError(f"a tile of rank {len(bt.shape)} is indexed with {len(e.subscripts)} "
                                f"subscripts", e.loc)
        shape = []
        for extent, sub in zip(bt.shape, e.subscripts):
            start_e = sub.start if isinstance(sub, ast.Slice) else sub
            start = self.const_int(start_e, "an index into a tile")
            size = self.const_int(sub.size, "the size of a slice") if isinstance(sub, ast.Slice) else 1
            if size <= 0:
                raise SemanticError(f"the size of a slice must be positive, got {size}", start_loc(sub))
            if start < 0 or start + size > extent:
                raise SemanticError(f"index {start}{f' :+ {size}' if size != 1 or isinstance(sub, ast.Slice) else ''}"
                                    f" is outside the tile's extent {extent}", start_loc(sub))
            if isinstance(sub, ast.Slice):
                shape.append(size)
        return TileType(bt.dtype, tuple(shape)) if shape else ScalarType(bt.dtype)

    @EXPRESSIONS.on(ast.Call)
    def expr_call(self, e: ast.Call):
        b = BUILTINS.get(e.func)
        if b is None:
            close = difflib.get_close_matches(e.func, list(BUILTINS), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise SemanticError(f"unknown function '{e.func}'{hint}", e.loc)
        if b.effect and e not in self.statement_calls:
            raise SemanticError(f"{e.func}() has no value; call it as a statement of its own", e.loc)
        allowed = KEYWORDS.get(e.func, set())
        for kw in e.kwargs:
            if kw.name not in allowed:
                raise SemanticError(f"{e.func}() has no argument named '{kw.name}'", kw.loc)
        return BUILTIN_RULES.lookup(b.rule)(self, e)

    # --- typing rules of builtins, one per `rule` in builtins.py
    def arity(self, e: ast.Call, *counts: int) -> None:
        if len(e.args) not in counts:
            want = " or ".join(map(str, counts))
            raise SemanticError(f"{e.func}() takes {want} argument{'s' if counts != (1,) else ''}, "
                                f"got {len(e.args)}: {BUILTINS[e.func].signature}", e.loc)

    @BUILTIN_RULES.on("grid_index")
    def call_grid_index(self, e: ast.Call):
        self.arity(e, 1)
        axis = self.const_int(e.args[0], f"the axis of {e.func}()")
        if axis not in (0, 1, 2):
            raise SemanticError(f"the axis of {e.func}() must be 0, 1 or 2, got {axis}", start_loc(e.args[0]))
        return ScalarType(DType.I32)

    @BUILTIN_RULES.on("dot")
    def call_dot(self, e: ast.Call):
        self.arity(e, 2)
        a, b = (self.value(x) for x in e.args)
        for x, t in zip(e.args, (a, b)):
            if not isinstance(t, TileType) or len(t.shape) != 2:
                raise SemanticError(f"dot() needs 2-D tiles, got {t}", start_loc(x))
            if t.dtype not in (DType.F32, DType.F64):
                raise SemanticError(f"dot() needs f32 or f64 tiles, got {t.dtype}", start_loc(x))
        if a.dtype != b.dtype:
            raise SemanticError(f"dot() operands have different types: {a.dtype} and {b.dtype}", e.loc)
        if a.shape[1] != b.shape[0]:
            raise SemanticError(f"dot() needs [M, K] x [K, N]: got [{a.shape[0]}, {a.shape[1]}] x "
                                f"[{b.shape[0]}, {b.shape[1]}]", e.loc)
        self.check_size((a.shape[0], b.shape[1]), e.loc)
        return TileType(a.dtype, (a.shape[0], b.shape[1]))

    def reduce_axis(self, e: ast.Call) -> tuple[TileType, int | None]:
        self.arity(e, 1, 2)
        t = self.value(e.args[0])
        if not isinstance(t, TileType):
            raise SemanticError(f"{e.func}() reduces a tile, got a scalar {t}", start_loc(e.args[0]))
        axis_e = e.args[1] if len(e.args) == 2 else next((k.value for k in e.kwargs if k.name == "axis"), None)
        if len(e.args) == 2 and e.kwargs:
            raise SemanticError(f"{e.func}() got the axis twice", e.kwargs[0].loc)
        if axis_e is None:
            return t, None
        axis = self.const_int(axis_e, f"the axis of {e.func}()")
        rank = len(t.shape)
        if not -rank <= axis < rank:
            raise SemanticError(f"axis {axis} is out of range for a tile of rank {rank}", start_loc(axis_e))
        return t, axis % rank

    @staticmethod
    def reduced(t: TileType, axis: int | None, dtype: DType) -> ValueType:
        if axis is None:
            return ScalarType(dtype)
        return TileType(dtype, tuple(1 if i == axis else n for i, n in enumerate(t.shape)))

    @BUILTIN_RULES.on("reduce")
    def call_reduce(self, e: ast.Call):
        t, axis = self.reduce_axis(e)
        if t.dtype is DType.BOOL:
            raise SemanticError(f"{e.func}() needs numbers, not bool", start_loc(e.args[0]))
        return self.reduced(t, axis, t.dtype)

    @BUILTIN_RULES.on("reduce_index")
    def call_reduce_index(self, e: ast.Call):
        t, axis = self.reduce_axis(e)
        if t.dtype is DType.BOOL:
            raise SemanticError(f"{e.func}() needs numbers, not bool", start_loc(e.args[0]))
        return self.reduced(t, axis, DType.I32)

    @BUILTIN_RULES.on("unary_float")
    def call_unary_float(self, e: ast.Call):
        self.arity(e, 1)
        t = self.value(e.args[0])
        if e.args[0] in self.weak:
            self.settle(e.args[0], DType.F32)
            return with_dtype(t, DType.F32)
        if not t.dtype.is_float:
            raise SemanticError(f"{e.func}() needs a float argument, got {t.dtype}; convert it with f32(...)",
                                start_loc(e.args[0]))
        return t

    @BUILTIN_RULES.on("unary_numeric")
    def call_unary_numeric(self, e: ast.Call):
        self.arity(e, 1)
        t = self.value(e.args[0])
        if t.dtype is DType.BOOL:
            raise SemanticError(f"{e.func}() needs a number, not bool", start_loc(e.args[0]))
        return self.concrete(e.args[0], t)

    @BUILTIN_RULES.on("binary_numeric")
    def call_binary_numeric(self, e: ast.Call):
        self.arity(e, 2)
        a, b = (self.value(x) for x in e.args)
        t = self.arith(e.func, a, e.args[1], b, e.loc, lhs_node=e.args[0])
        self.settle_all(e.args, t.dtype)
        return t

    @BUILTIN_RULES.on("binary_int")
    def call_binary_int(self, e: ast.Call):
        self.arity(e, 2)
        a, b = (self.value(x) for x in e.args)
        t = self.arith(e.func, a, e.args[1], b, e.loc, lhs_node=e.args[0])
        if not t.dtype.is_int:
            raise SemanticError(f"{e.func}() needs integers, got {t.dtype}", e.loc)
        self.settle_all(e.args, t.dtype)
        x, y = self.out.consts.get(e.args[0]), self.out.consts.get(e.args[1])
        if x is not None and y is not None and isinstance(t, ScalarType):
            if y == 0:
                raise SemanticError("division by zero in a constant expression", start_loc(e.args[1]))
            self.out.consts[e] = evaluate("cdiv", {}, [x, y], [t.dtype, t.dtype], t.dtype)
        return t

    @BUILTIN_RULES.on("where")
    def call_where(self, e: ast.Call):
        self.arity(e, 3)
        c, a, b = (self.value(x) for x in e.args)
        if c.dtype is not DType.BOOL:
            raise SemanticError(f"the condition of where() must be bool, got {c.dtype}", start_loc(e.args[0]))
        dtype = self.unify_dtypes(e.args[1], a.dtype, e.args[2], b.dtype, e.loc)
        self.settle_all(e.args[1:], dtype)
        shape = self.broadcast(self.broadcast(shape_of(c), shape_of(a), e.loc), shape_of(b), e.loc)
        return ScalarType(dtype) if shape is None else TileType(dtype, shape)

    @BUILTIN_RULES.on("arange")
    def call_arange(self, e: ast.Call):
        self.arity(e, 1, 2)
        bounds = [self.const_int(x, "a bound of arange()") for x in e.args]
        start, end = (0, bounds[0]) if len(bounds) == 1 else bounds
        if end <= start:
            raise SemanticError(f"arange() needs end > start, got arange({start}, {end})", e.loc)
        self.check_size(end - start, e.loc)
        if not (fits(start, DType.I32) and fits(end - 1, DType.I32)):
            raise SemanticError(f"the values of arange({start}, {end}) do not fit in i32 "
                                f"({range_text(DType.I32)})", e.loc)
        return TileType(DType.I32, (end - start,))

    def shape_arg(self, e: ast.Expr) -> tuple[int, ...]:
        if not isinstance(e, ast.ListLit):
            raise SemanticError("a shape is written as a list of constants, like [64, 32]", e.loc)
        shape = tuple(self.extent(x) for x in e.items)
        self.check_size(shape, e.loc)
        return shape

    @staticmethod
    def check_size(shape, loc: Loc) -> None:
        n = shape if isinstance(shape, int) else 1
        if not isinstance(shape, int):
            for x in shape:
                n *= x
        if n > MAX_TILE_ELEMENTS:
            raise SemanticError(f"a tile of {n} elements is too large (the limit is {MAX_TILE_ELEMENTS})", loc)

    @BUILTIN_RULES.on("full")
    def call_full(self, e: ast.Call):
        self.arity(e, 2)
        shape = self.shape_arg(e.args[0])
        t = self.value(e.args[1])
        if not isinstance(t, ScalarType):
            raise SemanticError("the value of full() must be a scalar", start_loc(e.args[1]))
        return TileType(self.concrete(e.args[1], t).dtype, shape)

    @BUILTIN_RULES.on("reshape")
    def call_reshape(self, e: ast.Call):
        self.arity(e, 2)
        t = self.value(e.args[0])
        if not isinstance(t, TileType):
            raise SemanticError("reshape() needs a tile", start_loc(e.args[0]))
        shape = self.shape_arg(e.args[1])
        new = TileType(t.dtype, shape)
        if new.size != t.size:
            raise SemanticError(f"reshape() cannot turn {t.size} elements into {new.size}", start_loc(e.args[1]))
        return new

    @BUILTIN_RULES.on("cast")
    def call_cast(self, e: ast.Call):
        self.arity(e, 1)
        t = self.value(e.args[0])
        result = with_dtype(t, CAST_DTYPES[e.func])
        value = self.out.consts.get(e.args[0])
        if value is not None and isinstance(t, ScalarType):
            dtype = CAST_DTYPES[e.func]
            if dtype.is_int and isinstance(value, float) and not math.isfinite(value):
                raise SemanticError(f"the constant {value} has no {dtype} value", start_loc(e.args[0]))
            self.out.consts[e] = convert(value, dtype)
        return result

    @BUILTIN_RULES.on("atomic")
    def call_atomic(self, e: ast.Call):
        self.arity(e, 2)
        target, x = e.args
        if not (isinstance(target, ast.Index) and isinstance(self.expr(target.base), TensorType)):
            raise SemanticError("the first argument of atomic_add() is a tensor slice, like T[i :+ 64]",
                                start_loc(target))
        bt = self.expr(target.base)
        slice_t = self.index(target, bt)
        self.types_set(target, slice_t)
        if bt.dtype not in (DType.F32, DType.I32, DType.U32, DType.I64, DType.F64):
            raise SemanticError(f"atomic_add() works on f32, f64, i32, i64 and u32 tensors, not {bt.dtype}",
                                start_loc(target))
        vt = self.value(x)
        self.storable(bt.dtype, slice_t, x, vt, start_loc(x))
        self.out.written.add(target.base.id)
        return ScalarType(DType.BOOL)  # no value; never used


def _a(dtype: DType) -> str:
    """The dtype with its indefinite article as read aloud: 'an f32', 'an i32', 'a u32', 'a bool'."""
    return f"{'an' if dtype.value[0] in 'fi' else 'a'} {dtype}"


# ------------------------------------------------------------------- driver
def check_kernel(kernel: ast.Kernel, config: dict[str, int] | None = None) -> CheckedKernel:
    """Check one kernel under one configuration (None: the first value of each parameter)."""
    resolved = resolve_config(kernel, config)
    return Checker(kernel, resolved).check()


def check_program(program: ast.Program) -> list[PhobosError]:
    """Every error in a file, under every configuration of every kernel, without duplicates.

    An error that only some configurations of its kernel have carries a note
    naming them: the source alone does not show why it is wrong."""
    errors: list[PhobosError] = []
    seen: set[tuple] = set()
    names: dict[str, ast.Kernel] = {}

    def add(err: PhobosError) -> None:
        key = (err.loc, err.message)
        if key not in seen:
            seen.add(key)
            errors.append(err)

    if not program.kernels:
        add(SemanticError("the file defines no kernel", program.loc))
    for k in program.kernels:
        if k.name in names:
            add(SemanticError(f"kernel '{k.name}' is defined twice", k.loc,
                              [Note("previous definition is here", names[k.name].loc)]))
        names[k.name] = k
        try:
            configs = configurations(k)
        except SemanticError as err:
            add(err)
            continue
        except ErrorList as errs:
            for err in errs.errors:
                add(err)
            continue
        for err in _errors_by_configuration(k, configs):
            add(err)
    return errors


def _errors_by_configuration(kernel: ast.Kernel, configs: list[dict[str, int]]) -> list[PhobosError]:
    """The errors of `kernel` under all of `configs`, each once, noting the configurations
    it is limited to when it is not found under all of them."""
    found: dict[tuple, tuple[PhobosError, list[dict[str, int]]]] = {}
    for config in configs:
        try:
            Checker(kernel, config).check()
        except PhobosError as err:
            for one in err.errors if isinstance(err, ErrorList) else [err]:
                found.setdefault((one.loc, one.message), (one, []))[1].append(config)
    out = []
    for err, failing in found.values():
        if len(failing) < len(configs):
            err.notes.append(Note(_configurations_note(failing, len(configs))))
        out.append(err)
    return out


def _configurations_note(failing: list[dict[str, int]], total: int, shown: int = 3) -> str:
    texts = [config_text(config) for config in failing]
    if len(texts) == 1:
        return f"only in the autotune configuration {texts[0]}"
    more = f" and {len(texts) - shown} more" if len(texts) > shown else ""
    return f"only in {len(texts)} of {total} autotune configurations: {'; '.join(texts[:shown])}{more}"
