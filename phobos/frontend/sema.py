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

import copy
import difflib
import math
from dataclasses import dataclass, field

from . import ast
from .ast import start_loc
from .builtins import BUILTINS, CAST_DTYPES, DOT_PRECISIONS, KEYWORDS
from .launch_rules import RULE_DECORATORS, LaunchRules, rules_of
from ..configuration import KNOBS, Knobs, config_text, knob_problem
from ..constants import OPERATORS, convert, evaluate, exact, fits, int_range, range_text
from ..dispatch import Dispatch
from ..errors import ErrorList, Loc, Note, PhobosError, SemanticError
from ..types import (VOID, DType, ScalarType, TensorType, TileType, TupleType, ValueType, broadcast_shapes,
                    shape_of, with_dtype)

MAX_TILE_ELEMENTS = 1 << 20
SCALAR_PARAM_DTYPES = (DType.F32, DType.F64, DType.I32, DType.I64, DType.U32, DType.BOOL)
DOT_DTYPES = (DType.F32, DType.F64, DType.BF16, DType.F16)  # 16-bit floats: products exact, f32 sums


@dataclass(eq=False)
class Symbol:
    """A named thing: parameter, size, autotune constant, let/var binding or loop variable.

    The checker also makes hidden `var`s of its own, named with a '$' no source
    name can have: the flags that `break`, `continue` and `return` set and the
    values a function returns (see Frame and Loop).
    """

    name: str
    kind: str  # 'tensor', 'scalar', 'size', 'const', 'let', 'var', 'loop', 'param' (of a function),
    #            'literal' (inf, nan, and a function parameter bound to a literal-only constant)
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


@dataclass(eq=False)
class Frame:
    """What `return` means where it stands: in the kernel, or in one inlined call of a function."""

    name: str  # of the kernel or function, for messages
    returned: Symbol  # the hidden flag `return` sets
    function: ast.Function | None = None
    result_types: list[ValueType] | None = None  # a function's: fixed by its `-> T` or its first `return E`
    results: list[Symbol] = field(default_factory=list)  # hidden vars that hold the returned values
    bare_return: Loc | None = None  # a `return` without a value, in a function


@dataclass(eq=False)
class Loop:
    """A `for` or `while` and the hidden flags its `break` and `continue` set."""

    node: object
    broke: Symbol
    continued: Symbol


@dataclass(eq=False)
class Inlined:
    """One call of a device function: its body, copied and checked with the call's argument types."""

    function: ast.Function
    params: list[Symbol]  # in order; a tensor parameter is the argument's own symbol
    body: ast.Block  # a copy of the function's body: its nodes key this call's side tables
    frame: Frame

    @property
    def type(self) -> ValueType | TupleType:
        types = self.frame.result_types or []
        return types[0] if len(types) == 1 else TupleType(tuple(types))


@dataclass
class CheckedKernel:
    kernel: ast.Kernel
    config: dict[str, int]
    params: list[Symbol]
    sizes: dict[str, SizeBinding]
    types: dict[object, ValueType | TensorType] = field(default_factory=dict)
    consts: dict[object, int | float | bool] = field(default_factory=dict)
    symbols: dict[object, Symbol] = field(default_factory=dict)  # Name use / declaration -> Symbol
    carried: dict[object, list[Symbol]] = field(default_factory=dict)  # For/While/If/guard -> outer vars assigned
    written: set[str] = field(default_factory=set)  # tensor parameters the kernel stores into
    weak: set[object] = field(default_factory=set)  # literal-only expressions; their dtype follows context
    knobs: Knobs = field(default_factory=Knobs)  # what the configuration's WARPS, STAGES, GROUP_M, CTAS_PER_SM set
    frame: Frame | None = None  # the kernel's: `return` sets its flag
    loops: dict[object, Loop] = field(default_factory=dict)  # For/While -> its break/continue flags
    jumps: dict[object, Symbol] = field(default_factory=dict)  # Break/Continue/Return -> the flag it sets
    returns: dict[object, Frame] = field(default_factory=dict)  # Return -> the frame it leaves
    sets_flags: dict[object, list[Symbol]] = field(default_factory=dict)  # statement -> flags it may leave set
    calls: dict[object, Inlined] = field(default_factory=dict)  # call of a device function -> its instance

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
    constants not given take their values at the first sample sizes the conditions allow.  A knob
    (configuration.KNOBS) may be given where @autotune does not list it, as Triton's num_warps and
    num_stages may always be."""
    rules = launch_rules(kernel)
    space = rules.space
    config = dict(config or {})
    for name, value in config.items():
        if name not in space and name not in rules.derived_names and name not in KNOBS:
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
    resolved.update((name, value) for name, value in config.items() if name in KNOBS and name not in space)
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
    """Where an autotune parameter (`NAME in [...]`) or a derived constant (`NAME = ...`) is declared (the
    kernel, for a knob its decorators do not list)."""
    return next((item.loc for d in kernel.decorators for item in [*d.params, *d.args]
                 if getattr(item, "name", None) == name), kernel.loc)


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
        self.loop_stack: list[tuple[object, int]] = []  # (For/While/If node or guard, scope depth outside it)
        self.loops: list[Loop] = []  # the loops around the statement being checked, innermost last
        self.frame: Frame | None = None  # what `return` leaves
        self.flag_sinks: list[set[Symbol]] = []  # per statement being checked: the flags it may set
        self.call_stack: list[tuple[str, Loc]] = []  # the device functions being inlined, and their calls

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
        known = [n for scope in self.scopes for n in scope if not n.startswith("$")]
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
        self.frame = self.out.frame = Frame(k.name, self.define(self.flag("$return", k.loc)))
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
        """Check each statement; the rest of a block after one that may jump is guarded by its flags."""
        guards = 0
        try:
            for i, s in enumerate(block.stmts):
                self._attempt(self.stmt, s)
                if i + 1 == len(block.stmts):
                    break
                if isinstance(s, (ast.Break, ast.Continue, ast.Return)):
                    word = {ast.Break: "break", ast.Continue: "continue", ast.Return: "return"}[type(s)]
                    self.errors.append(SemanticError(f"this statement is never reached: it follows a '{word}'",
                                                     block.stmts[i + 1].loc))
                    break
                if self.out.sets_flags.get(s):
                    # the rest runs under `if !flags`: what it assigns is carried out of that branch
                    self.loop_stack.append(((block, i), len(self.scopes)))
                    guards += 1
        finally:
            del self.loop_stack[len(self.loop_stack) - guards:]

    @staticmethod
    def flag(name: str, loc: Loc) -> Symbol:
        """A hidden bool `var` for the flag of a jump (false until the jump sets it)."""
        return Symbol(name, "var", ScalarType(DType.BOOL), loc)

    def jump(self, s, flag: Symbol) -> None:
        """`s` sets `flag`: every loop and branch it is in carries the flag out."""
        self.out.jumps[s] = flag
        self.note_assigned(flag)
        self.flag_sinks[-1].add(flag)

    def block(self, block: ast.Block) -> None:
        self.scopes.append({})
        try:
            self._attempt_block_stmts(block)
        finally:
            self.scopes.pop()

    def stmt(self, s: ast.Stmt) -> None:
        """Check one statement and record the jump flags it may leave set (its own loop's excepted)."""
        self.flag_sinks.append(set())
        try:
            STATEMENTS.lookup(type(s))(self, s)
        finally:
            flags = self.flag_sinks.pop()
            loop = self.out.loops.get(s)
            if loop is not None:
                flags -= {loop.broke, loop.continued}
            if flags:
                self.out.sets_flags[s] = sorted(flags, key=lambda f: f.name)
                if self.flag_sinks:
                    self.flag_sinks[-1] |= flags

    @STATEMENTS.on(ast.Let)
    def stmt_let(self, s: ast.Let) -> None:
        sym = Symbol(s.name, "var" if s.mutable else "let", None, s.name_loc)
        self.out.symbols[s] = sym
        try:
            declared = self.value_type(s.type) if s.type is not None else None
            vt = self.single(s.value, self.expr(s.value))
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
                       "literal": "it is a constant", "param": "it is a parameter of the function",
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
        slice_t = self.types_set(target, self.index(target, bt))
        value_t = self.rhs_type(s, slice_t)
        if isinstance(value_t, TensorType):
            raise SemanticError("cannot store a tensor; index it to load a tile", start_loc(s.value))
        self.storable(bt.dtype, slice_t, s.value, value_t, start_loc(s.value))
        self.out.written.add(self.out.symbols[base].name)

    def rhs_type(self, s: ast.Assign, target_t: ValueType) -> ValueType:
        """The value being stored: the right side, or `target op right` for compound assignment."""
        if s.op == "=":
            return self.expr(s.value)
        vt = self.value(s.value)
        return self.operation(s.op[:-1], target_t, None, vt, s.value, s.loc)[0]

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
        if isinstance(e, ast.Call) and e.func in BUILTINS and BUILTINS[e.func].effect:
            self.statement_calls.add(e)
            self.expr(e)
            return
        t = self.expr(e)
        if not (isinstance(e, ast.Call) and e in self.out.calls and t == VOID):
            raise SemanticError("this expression's value is unused; bind it with 'let' or assign it", start_loc(e))

    @STATEMENTS.on(ast.For)
    def stmt_for(self, s: ast.For) -> None:
        start_t = self.scalar_int(s.start, "a loop bound")
        end_t = self.scalar_int(s.end, "a loop bound")
        dtype = self.unify_dtypes(s.start, start_t.dtype, s.end, end_t.dtype, start_loc(s.end))
        for bound in (s.start, s.end):  # literal bounds take the loop variable's dtype
            self.settle(bound, dtype)
        if s.step is not None:
            step_t = self.scalar_int(s.step, "the step of range()")
            self.unify_dtypes(s.start, dtype, s.step, step_t.dtype, start_loc(s.step))
            if self.out.consts.get(s.step) == 0:
                raise SemanticError("the step of range() cannot be zero", start_loc(s.step))
            self.settle(s.step, dtype)
        var = Symbol(s.var, "loop", ScalarType(dtype), s.var_loc)
        self.out.symbols[s] = var
        self.loop_body(s, s.body, var)

    @STATEMENTS.on(ast.While)
    def stmt_while(self, s: ast.While) -> None:
        ct = self.expr(s.cond)
        if not (isinstance(ct, ScalarType) and ct.dtype is DType.BOOL):
            hint = "; every thread of a program instance takes the same path" if isinstance(ct, TileType) else ""
            raise SemanticError(f"a while condition must be a scalar bool, not {ct}{hint}", start_loc(s.cond))
        self.loop_body(s, s.body, None)

    def loop_body(self, s, body: ast.Block, var: Symbol | None) -> None:
        """Check a loop's body in a scope of its own that holds the loop variable and the loop's flags."""
        self.loop_stack.append((s, len(self.scopes)))
        self.scopes.append({})
        loop = self.out.loops[s] = Loop(s, self.define(self.flag("$break", s.loc)),
                                        self.define(self.flag("$continue", s.loc)))
        self.loops.append(loop)
        try:
            if var is not None:
                self.define(var)
            self.block(body)
        finally:
            self.loops.pop()
            self.scopes.pop()
            self.loop_stack.pop()

    @STATEMENTS.on(ast.Break, ast.Continue)
    def stmt_break_continue(self, s) -> None:
        word = "break" if isinstance(s, ast.Break) else "continue"
        if not self.loops:
            raise SemanticError(f"'{word}' outside a loop", s.loc)
        loop = self.loops[-1]
        self.jump(s, loop.broke if word == "break" else loop.continued)

    @STATEMENTS.on(ast.Return)
    def stmt_return(self, s: ast.Return) -> None:
        frame = self.frame
        if frame.function is None:
            if s.value is not None:
                raise SemanticError("a kernel returns no value: store its results into a tensor",
                                    start_loc(s.value))
        elif s.value is None:
            if frame.result_types:
                raise SemanticError(f"function '{frame.name}' returns a value; this 'return' needs one too", s.loc)
            frame.bare_return = s.loc
        else:
            self.return_value(frame, s.value)
        self.out.returns[s] = frame
        self.jump(s, frame.returned)

    def return_value(self, frame: Frame, e: ast.Expr) -> None:
        """Check `return e` in a function: its values fix the function's result types, or must fit them."""
        if frame.bare_return is not None:
            raise SemanticError(f"function '{frame.name}' also returns without a value", start_loc(e),
                                [Note("here", frame.bare_return)])
        items = e.items if isinstance(e, ast.TupleLit) else [e]
        types = [self.value(x) for x in items]
        if frame.result_types is None:
            frame.result_types = [self.concrete(x, t) for x, t in zip(items, types)]
        elif len(types) != len(frame.result_types):
            raise SemanticError(f"function '{frame.name}' returns {len(frame.result_types)} value"
                                f"{'s' if len(frame.result_types) != 1 else ''} elsewhere, {len(types)} here",
                                start_loc(e))
        for x, t, want in zip(items, types, frame.result_types):
            self.assignable(want, x, t, start_loc(x))
        while len(frame.results) < len(frame.result_types):
            i = len(frame.results)
            sym = Symbol(f"$result{i}", "var", frame.result_types[i], frame.function.loc)
            self.scopes[KERNEL_SCOPE][sym.name] = sym  # the function's outermost scope
            frame.results.append(sym)
        for sym in frame.results:
            self.note_assigned(sym)

    @EXPRESSIONS.on(ast.StrLit)
    def expr_str_lit(self, e: ast.StrLit):
        raise SemanticError("a string can only be an option of a builtin, like dot(a, b, precision=\"tf32\"), "
                            "or the message of device_print() or device_assert()", e.loc)

    @EXPRESSIONS.on(ast.TupleLit)
    def expr_tuple_lit(self, e: ast.TupleLit):
        return TupleType(tuple(self.value(x) for x in e.items))

    # ------------------------------------------------------------ device functions
    def call_function(self, e: ast.Call, fn: ast.Function) -> ValueType | TupleType:
        """Check one call of a device function: its body, copied, under the types of the arguments."""
        args = self.bind_arguments(e, fn)
        inlined = self.inline(fn, e.loc, lambda inlined: [
            self._attempt(self.bind_parameter, inlined, param, arg) for param, arg in zip(fn.params, args)])
        self.out.calls[e] = inlined
        return inlined.type

    def inline(self, fn: ast.Function, loc: Loc, bind) -> Inlined:
        """A copy of `fn`'s body checked in a scope of its own, whose parameters `bind(inlined)` defines.

        The copy is what irgen and the interpreter inline; errors inside it
        point into the function and carry a note at the call (`loc`).
        """
        chain = [name for name, _ in self.call_stack]
        if fn.name in chain:
            cycle = " -> ".join(chain[chain.index(fn.name):] + [fn.name])
            raise SemanticError(f"recursive call of '{fn.name}' ({cycle}): device functions are inlined where "
                                f"they are called, so they cannot call themselves", loc)
        inlined = Inlined(fn, [], copy.deepcopy(fn.body), Frame(fn.name, self.flag("$return", fn.loc), fn))
        saved = (self.scopes, self.loop_stack, self.loops, self.frame, self.flag_sinks)
        self.scopes = [self.scopes[0], {inlined.frame.returned.name: inlined.frame.returned}]
        self.loop_stack, self.loops, self.frame, self.flag_sinks = [], [], inlined.frame, []
        self.call_stack.append((fn.name, loc))
        errors_before = len(self.errors)
        try:
            bind(inlined)
            if len(inlined.params) == len(fn.params):
                if fn.result is not None:
                    self._attempt(self.declared_result, inlined.frame, fn.result)
                self._attempt_block_stmts(inlined.body)
                if inlined.frame.result_types and not _always_returns(inlined.body):
                    self.errors.append(SemanticError(
                        f"function '{fn.name}' can reach the end of its body without returning a value",
                        fn.body.stmts[-1].loc if fn.body.stmts else fn.loc))
        finally:
            self.scopes, self.loop_stack, self.loops, self.frame, self.flag_sinks = saved
            self.call_stack.pop()
        if len(self.errors) > errors_before:
            for err in self.errors[errors_before:]:
                if not any(n.message.startswith(f"in the call of '{fn.name}'") for n in err.notes):
                    err.notes.append(Note(f"in the call of '{fn.name}' here", loc))
            raise _Poisoned()
        return inlined

    def bind_arguments(self, e: ast.Call, fn: ast.Function) -> list[ast.Expr]:
        """The argument of each parameter of `fn`, by position, then by name."""
        if len(e.args) > len(fn.params):
            raise SemanticError(f"{fn.name}() takes {len(fn.params)} argument{'s' if len(fn.params) != 1 else ''}, "
                                f"got {len(e.args) + len(e.kwargs)}", e.loc, [Note("defined here", fn.loc)])
        args: list[ast.Expr | None] = list(e.args) + [None] * (len(fn.params) - len(e.args))
        names = [p.name for p in fn.params]
        for kw in e.kwargs:
            if kw.name not in names:
                raise SemanticError(f"{fn.name}() has no parameter named '{kw.name}'", kw.loc,
                                    [Note("defined here", fn.loc)])
            i = names.index(kw.name)
            if args[i] is not None:
                raise SemanticError(f"{fn.name}() got parameter '{kw.name}' twice", kw.loc)
            args[i] = kw.value
        missing = [n for n, a in zip(names, args) if a is None]
        if missing:
            raise SemanticError(f"{fn.name}() is missing the argument{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(repr(m) for m in missing)}", e.loc, [Note("defined here", fn.loc)])
        for a in args:
            self.expr(a)  # in the caller's scope, before the function's scope replaces it
        return args

    def bind_parameter(self, inlined: Inlined, param: ast.FnParam, arg: ast.Expr) -> None:
        """Define a parameter of an inlined call: a tensor argument's own symbol, else a value."""
        t = self.out.types[arg]
        if isinstance(t, TupleType):
            raise SemanticError("an argument is one value; pass the values of a tuple one by one", start_loc(arg))
        if isinstance(t, TensorType):
            if param.type is not None and (param.type.kind != "tensor" or self.dtype(param.type) != t.dtype
                                           or len(param.type.dims) != t.rank):
                raise SemanticError(f"parameter '{param.name}' is declared {_type_text(param.type)} but the "
                                    f"argument is {t}", start_loc(arg), [Note("declared here", param.loc)])
            sym = self.out.symbols[arg]
            self.scopes[-1][param.name] = sym  # the function sees the caller's tensor itself
        else:
            if param.type is not None and param.type.kind == "tensor":
                raise SemanticError(f"parameter '{param.name}' is a tensor but the argument is {t}", start_loc(arg),
                                    [Note("declared here", param.loc)])
            value = self.out.consts.get(arg)
            if param.type is not None:
                ptype = self.assignable(self.value_type(param.type), arg, t, start_loc(arg))
                sym = Symbol(param.name, "param", ptype, param.loc)
            elif arg in self.weak and value is not None:
                sym = Symbol(param.name, "literal", t, param.loc)  # takes the dtype its uses ask for
            else:
                sym = Symbol(param.name, "param", self.concrete(arg, t), param.loc)
            if value is not None and isinstance(sym.type, ScalarType):
                sym.value = value if sym.kind == "literal" else convert(value, sym.type.dtype)
            self.define(sym)
        inlined.params.append(sym)

    def declared_result(self, frame: Frame, t: ast.TypeExpr) -> None:
        frame.result_types = [self.value_type(t)]
        sym = Symbol("$result0", "var", frame.result_types[0], t.loc)
        self.scopes[KERNEL_SCOPE][sym.name] = sym
        frame.results.append(sym)

    @STATEMENTS.on(ast.Unpack)
    def stmt_unpack(self, s: ast.Unpack) -> None:
        syms = [Symbol(n, "var" if s.mutable else "let", None, loc) for n, loc in zip(s.names, s.name_locs)]
        for i, sym in enumerate(syms):
            self.out.symbols[(s, i)] = sym
        try:
            t = self.expr(s.value)
            if not isinstance(t, TupleType) or not t.items:
                what = "no value" if t == VOID else f"one value ({t})"
                raise SemanticError(f"{len(s.names)} names need as many values; this gives {what}",
                                    start_loc(s.value))
            if len(t.items) != len(s.names):
                raise SemanticError(f"{len(s.names)} names but {len(t.items)} values", start_loc(s.value))
        except (SemanticError, _Poisoned):
            for sym in syms:
                self.scopes[-1].setdefault(sym.name, sym)
            raise
        items = s.value.items if isinstance(s.value, ast.TupleLit) else [None] * len(syms)
        for sym, item, vt in zip(syms, items, t.items):
            sym.type = self.concrete(item, vt) if item is not None else vt
            self.define(sym)

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
        self.single(e, vt)
        if isinstance(vt, TensorType):
            raise SemanticError("a tensor cannot be used as a value; index it to load a tile", loc)
        if not widens(vt.dtype, target.dtype) and not self.adapts(e, vt.dtype, target.dtype):
            raise SemanticError(f"cannot assign {_a(vt.dtype)} value to {_a(target.dtype)} variable; "
                                f"convert it with {target.dtype}(...)", loc)
        self.settle(e, target.dtype)
        self.fits_shape(shape_of(target), shape_of(vt), loc, "variable")
        return target

    def storable(self, dtype: DType, slice_t: ValueType, e: ast.Expr, vt: ValueType, loc: Loc) -> None:
        """Check that `vt` may be stored into a tensor slice of element type `dtype`."""
        self.single(e, vt)
        compute = dtype.compute
        if not widens(vt.dtype, compute) and not self.adapts(e, vt.dtype, compute):
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
        a literal-only side adapts to.  16-bit floats take part as f32 (their compute dtype)."""
        da, db = da.compute, db.compute
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
            t = with_dtype(t, t.dtype.compute)
            if value is not None:
                if e.operand in self.weak:
                    self.check_fits(-value, DType.I64, e.loc)
                    self.out.consts[e] = -value
                else:
                    self.out.consts[e] = evaluate("neg", {}, [value], [t.dtype], t.dtype)
        elif e.op == "~":
            if not t.dtype.is_int:
                raise SemanticError(f"'~' flips the bits of an integer, not of {_a(t.dtype)}; "
                                    f"use '!' for logical not", e.loc)
            if value is not None:
                self.out.consts[e] = ~value if e.operand in self.weak else \
                    evaluate("not", {}, [value], [t.dtype], t.dtype)
        else:
            if t.dtype is not DType.BOOL:
                raise SemanticError(f"'!' needs a bool operand, not {t.dtype}; use '~' to flip the bits of "
                                    f"an integer", e.loc)
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
        return self.single(e, t)

    def single(self, e: ast.Expr, t):
        """`t`, the type of `e`, when it is one value (or a tensor); an error for a tuple."""
        if isinstance(t, TupleType):
            if not t.items:
                raise SemanticError(f"{getattr(e, 'func', 'this')}() returns no value", start_loc(e))
            raise SemanticError(f"this gives {len(t.items)} values, not one; take them apart with "
                                f"let ({', '.join('abcdefgh'[:len(t.items)])}) = ...", start_loc(e))
        return t

    @EXPRESSIONS.on(ast.Binary)
    def expr_binary(self, e: ast.Binary):
        lt, rt = self.value(e.lhs), self.value(e.rhs)
        result, operand_dtype = self.operation(e.op, lt, e.lhs, rt, e.rhs, e.loc)
        self.fold(e, result, operand_dtype)
        if e.lhs in self.weak and e.rhs in self.weak:
            self.weak.add(e)
        return result

    def operation(self, op: str, lt: ValueType, lhs: ast.Expr | None, rt: ValueType, rhs: ast.Expr,
                  loc: Loc) -> tuple[ValueType, DType]:
        """The type of `lhs op rhs` (lhs None: the target of a compound assignment, of type lt),
        and the dtype its operands meet in."""
        shape = self.broadcast(shape_of(lt), shape_of(rt), loc)
        if op in ("&&", "||"):
            for side, t in ((lhs, lt), (rhs, rt)):
                if t.dtype is not DType.BOOL:
                    raise SemanticError(f"'{op}' needs bool operands, not {t.dtype}",
                                        start_loc(side) if side is not None else loc)
            return (ScalarType(DType.BOOL) if shape is None else TileType(DType.BOOL, shape)), DType.BOOL
        if op not in _COMPARE and op not in ("&", "|", "^") and DType.BOOL in (lt.dtype, rt.dtype):
            raise SemanticError(f"'{op}' needs numbers, not bool", loc)
        dtype = self.unify_dtypes(lhs, lt.dtype, rhs, rt.dtype, loc)
        if op in _COMPARE:
            if dtype is DType.BOOL and op not in ("==", "!="):
                raise SemanticError(f"'{op}' compares numbers, not bools", loc)
            return (ScalarType(DType.BOOL) if shape is None else TileType(DType.BOOL, shape)), dtype
        if op in ("&", "|", "^"):
            if dtype.is_float:
                raise SemanticError(f"'{op}' works on the bits of integers (or on bools), not on {dtype}; "
                                    f"see bitcast()", loc)
        elif op in ("%", "<<", ">>") and not dtype.is_int:
            raise SemanticError(f"'{op}' needs integer operands, not {dtype}", loc)
        if op in ("<<", ">>"):
            self.check_shift(rhs, dtype if lhs is None or lhs not in self.weak else DType.I64)
        return (ScalarType(dtype) if shape is None else TileType(dtype, shape)), dtype

    def arith(self, op: str, lt: ValueType, rhs: ast.Expr, rt: ValueType, loc: Loc, lhs_node) -> ValueType:
        """The type of an arithmetic builtin on two numbers (maximum, cdiv, ...)."""
        for t in (lt, rt):
            if t.dtype is DType.BOOL:
                raise SemanticError(f"'{op}' needs numbers, not bool", loc)
        dtype = self.unify_dtypes(lhs_node, lt.dtype, rhs, rt.dtype, loc)
        shape = self.broadcast(shape_of(lt), shape_of(rt), loc)
        return ScalarType(dtype) if shape is None else TileType(dtype, shape)

    def check_shift(self, amount: ast.Expr, dtype: DType) -> None:
        """A shift by a constant must be by 0 to bits-1 (a run-time amount beyond gives 0, or the sign)."""
        value = self.out.consts.get(amount)
        if value is not None and not 0 <= value < dtype.bits:
            raise SemanticError(f"a shift of {_a(dtype)} by {value}: the amount must be from 0 to {dtype.bits - 1}",
                                start_loc(amount))

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
        """Type of a tensor slice `T[...]`: a tile of the slice sizes, or a scalar.

        Integer tiles among the subscripts (a gather, or a scatter when stored
        into) must stand next to each other; their shapes broadcast together
        and that shape takes their place in the result."""
        if len(e.subscripts) != bt.rank:
            raise SemanticError(f"tensor '{getattr(e.base, 'id', '?')}' has {bt.rank} dimension"
                                f"{'s' if bt.rank != 1 else ''} but is indexed with {len(e.subscripts)}",
                                e.loc)
        shape = []
        gathered, gather_at, last_tile = None, 0, None
        for d, (dim, sub) in enumerate(zip(bt.dims, e.subscripts)):
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
                    if not t.dtype.is_int:
                        raise SemanticError(f"a tile used as an index must hold integers, not {t.dtype}",
                                            start_loc(sub))
                    if last_tile is not None and last_tile != d - 1:
                        raise SemanticError("tiles used as indices must be next to each other (their shapes "
                                            "broadcast together into one part of the result)", start_loc(sub))
                    if gathered is None:
                        gathered, gather_at = t.shape, len(shape)
                    else:
                        gathered = self.broadcast(gathered, t.shape, start_loc(sub))
                    last_tile = d
                    continue
                self.scalar_int(sub, "an index")
                self.settle(sub, DType.I32)
        if gathered is not None:
            shape[gather_at:gather_at] = gathered
        dtype = bt.dtype.loaded
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
            if isinstance(self.expr(start_e), TileType):
                raise SemanticError("a tile is indexed with compile-time constants; to pick elements by a "
                                    "tile of indices, gather from a tensor (T[idx])", start_loc(start_e))
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
            if e.func in self.kernel.functions:
                return self.call_function(e, self.kernel.functions[e.func])
            close = difflib.get_close_matches(e.func, list(BUILTINS) + list(self.kernel.functions), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise SemanticError(f"unknown function '{e.func}'{hint}", e.loc)
        if b.void and e not in self.statement_calls:
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
        self.dot_precision(e, a)
        for x, t in zip(e.args, (a, b)):
            if not isinstance(t, TileType) or len(t.shape) != 2:
                raise SemanticError(f"dot() needs 2-D tiles, got {t}", start_loc(x))
            if t.dtype not in DOT_DTYPES:
                raise SemanticError(f"dot() needs tiles of {', '.join(map(str, DOT_DTYPES))}, got {t.dtype}",
                                    start_loc(x))
        if a.dtype != b.dtype:
            raise SemanticError(f"dot() operands have different types: {a.dtype} and {b.dtype}; convert one, "
                                f"e.g. {a.dtype}(...) or {b.dtype}(...)", e.loc)
        if a.shape[1] != b.shape[0]:
            raise SemanticError(f"dot() needs [M, K] x [K, N]: got [{a.shape[0]}, {a.shape[1]}] x "
                                f"[{b.shape[0]}, {b.shape[1]}]", e.loc)
        self.check_size((a.shape[0], b.shape[1]), e.loc)
        return TileType(a.dtype.compute, (a.shape[0], b.shape[1]))

    @staticmethod
    def dot_precision(e: ast.Call, a: ValueType) -> None:
        """The precision= argument of a dot: a string naming one of DOT_PRECISIONS, for f32 operands."""
        kw = next((k for k in e.kwargs if k.name == "precision"), None)
        if kw is None:
            return
        names = ", ".join(f'"{p}"' for p in DOT_PRECISIONS)
        if not isinstance(kw.value, ast.StrLit):
            raise SemanticError(f"the precision of dot() is a string: {names}", start_loc(kw.value))
        if kw.value.value not in DOT_PRECISIONS:
            close = difflib.get_close_matches(kw.value.value, list(DOT_PRECISIONS), n=1)
            hint = f'; did you mean "{close[0]}"?' if close else ""
            raise SemanticError(f'unknown precision "{kw.value.value}" of dot(); the precisions are {names}{hint}',
                                kw.value.loc)
        dtype = a.dtype if isinstance(a, TileType) else None
        if kw.value.value != "ieee" and dtype is not DType.F32:
            what = ("bf16 and f16 products are always exact, with f32 sums, on the tensor cores"
                    if dtype is not None and dtype.is_half else "only f32 products have TF32 modes")
            raise SemanticError(f'precision="{kw.value.value}" applies to f32 operands, not {dtype}: {what}',
                                kw.loc)

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
        return self.reduced(t, axis, t.dtype.compute)

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
        t = with_dtype(t, t.dtype.compute)
        allowed = BUILTINS[e.func].dtypes
        if t.dtype not in allowed:
            names = " and ".join(str(d) for d in allowed)
            raise SemanticError(f"{e.func}() is implemented for {names} only, not {t.dtype}; convert the "
                                f"argument with {allowed[0]}(...)", start_loc(e.args[0]))
        return t

    @BUILTIN_RULES.on("unary_numeric")
    def call_unary_numeric(self, e: ast.Call):
        self.arity(e, 1)
        t = self.value(e.args[0])
        if t.dtype is DType.BOOL:
            raise SemanticError(f"{e.func}() needs a number, not bool", start_loc(e.args[0]))
        return self.concrete(e.args[0], with_dtype(t, t.dtype.compute))

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
        self.arity(e, 3 if e.func == "atomic_cas" else 2)
        target, *values = e.args
        if not (isinstance(target, ast.Index) and isinstance(self.expr(target.base), TensorType)):
            raise SemanticError(f"the first argument of {e.func}() is a tensor slice, like T[i :+ 64]",
                                start_loc(target))
        bt = self.expr(target.base)
        slice_t = self.index(target, bt)
        self.types_set(target, slice_t)
        allowed = BUILTINS[e.func].dtypes
        if bt.dtype not in allowed:
            raise SemanticError(f"{e.func}() works on {', '.join(map(str, allowed))} tensors, not {bt.dtype}",
                                start_loc(target))
        for x in values:
            self.storable(bt.dtype, slice_t, x, self.value(x), start_loc(x))
        self.out.written.add(self.out.symbols[target.base].name)
        return slice_t

    # --- the rules below read their arguments by position or by name
    def arguments(self, e: ast.Call, names: list[str], required: int) -> list[ast.Expr | None]:
        """The arguments of a call by parameter name (`names`), positional first, then keywords."""
        if not required <= len(e.args) <= len(names):
            self.arity(e, *range(required, len(names) + 1))
        args: list[ast.Expr | None] = list(e.args) + [None] * (len(names) - len(e.args))
        for kw in e.kwargs:
            i = names.index(kw.name)
            if args[i] is not None:
                raise SemanticError(f"{e.func}() got the {kw.name} twice", kw.loc)
            args[i] = kw.value
        if any(a is None for a in args[:required]):
            self.arity(e, *range(required, len(names) + 1))
        return args

    def axis_of(self, e: ast.Call, axis_e: ast.Expr | None, rank: int) -> int | None:
        if axis_e is None:
            return None
        axis = self.const_int(axis_e, f"the axis of {e.func}()")
        if not -rank <= axis < rank:
            raise SemanticError(f"axis {axis} is out of range for a tile of rank {rank}", start_loc(axis_e))
        return axis % rank

    def operands_in(self, e: ast.Call, dtypes) -> DType:
        """The dtype all arguments of `e` meet in, checked against `dtypes`."""
        types = [self.value(x) for x in e.args]
        dtype = types[0].dtype
        for x, t in zip(e.args[1:], types[1:]):
            dtype = self.unify_dtypes(e.args[0], dtype, x, t.dtype, start_loc(x))
        if dtype not in dtypes:
            names = " and ".join(map(str, dtypes))
            raise SemanticError(f"{e.func}() works on {names}, not {dtype}", e.loc)
        for x in e.args:
            self.settle(x, dtype)
        return dtype

    def shape_of_all(self, e: ast.Call, args: list[ast.Expr]) -> tuple[int, ...] | None:
        shape = None
        for x in args:
            shape = self.broadcast(shape, shape_of(self.value(x)), e.loc)
        return shape

    @BUILTIN_RULES.on("fma")
    def call_fma(self, e: ast.Call):
        self.arity(e, 3)
        dtype = self.operands_in(e, BUILTINS[e.func].dtypes)
        shape = self.shape_of_all(e, e.args)
        return ScalarType(dtype) if shape is None else TileType(dtype, shape)

    @BUILTIN_RULES.on("mulhi")
    def call_mulhi(self, e: ast.Call):
        self.arity(e, 2)
        dtype = self.operands_in(e, BUILTINS[e.func].dtypes)
        shape = self.shape_of_all(e, e.args)
        return ScalarType(dtype) if shape is None else TileType(dtype, shape)

    @BUILTIN_RULES.on("bitcast")
    def call_bitcast(self, e: ast.Call):
        self.arity(e, 2)
        t = self.value(e.args[0])
        name = e.args[1]
        to = DType.from_name(name.id) if isinstance(name, ast.Name) else None
        if to is None or to not in BITCAST_DTYPES:
            raise SemanticError(f"the second argument of bitcast() is a dtype: "
                                f"{', '.join(map(str, BITCAST_DTYPES))}", start_loc(name))
        if t.dtype not in BITCAST_DTYPES or t.dtype.bits != to.bits:
            raise SemanticError(f"bitcast() keeps the bits: {t.dtype} and {to} differ in width" if
                                t.dtype in BITCAST_DTYPES else f"bitcast() of {_a(t.dtype)}: it has no bits to read",
                                e.loc)
        self.settle(e.args[0], t.dtype)
        return with_dtype(self.concrete(e.args[0], t), to)

    @BUILTIN_RULES.on("scan_op")
    def call_scan_op(self, e: ast.Call):
        x_e, axis_e = self.arguments(e, ["x", "axis"], 1)
        t = self.value(x_e)
        if not isinstance(t, TileType) or t.dtype is DType.BOOL:
            raise SemanticError(f"{e.func}() needs a tile of numbers, got {t}", start_loc(x_e))
        self.scan_axis(e, axis_e, t)
        return t

    def scan_axis(self, e: ast.Call, axis_e: ast.Expr | None, t: TileType) -> int:
        axis = self.axis_of(e, axis_e, len(t.shape))
        if axis is None:
            if len(t.shape) > 1:
                raise SemanticError(f"{e.func}() of a tile of rank {len(t.shape)} needs an axis", e.loc)
            axis = 0
        return axis

    def combined(self, e: ast.Call, x_e: ast.Expr) -> list[TileType]:
        """The tiles a scan or reduce combines: one, or a tuple of tiles of one shape."""
        items = x_e.items if isinstance(x_e, ast.TupleLit) else [x_e]
        types = [self.value(x) for x in items]
        shape = None
        for x, t in zip(items, types):
            shape = self.broadcast(shape, shape_of(t), start_loc(x))
        if shape is None:
            raise SemanticError(f"{e.func}() combines tiles, got {types[0]}", start_loc(items[0]))
        types = [TileType(self.concrete(x, t).dtype, shape) for x, t in zip(items, types)]
        self.out.types[x_e] = TupleType(tuple(types)) if isinstance(x_e, ast.TupleLit) else types[0]
        return types

    def combine_function(self, e: ast.Call, f_e: ast.Expr, dtypes: list[DType]) -> Inlined:
        """Check `f_e`, the combine function of a scan or reduce of values of `dtypes`: a device function
        of 2k scalars returning k, straight-line code (every thread runs it on its own elements)."""
        fn = self.kernel.functions.get(f_e.id) if isinstance(f_e, ast.Name) else None
        if fn is None:
            raise SemanticError(f"the combine argument of {e.func}() is the name of a device function, like "
                                f"{e.func}(x, 0, add) with fn add(a, b) {{ return a + b }}", start_loc(f_e))
        k = len(dtypes)
        if len(fn.params) != 2 * k:
            raise SemanticError(f"'{fn.name}' must take {2 * k} parameters (two sets of {k} value"
                                f"{'s' if k > 1 else ''}) to combine {k} tile{'s' if k > 1 else ''}; it takes "
                                f"{len(fn.params)}", start_loc(f_e), [Note("defined here", fn.loc)])

        def bind(inlined: Inlined) -> None:
            for p, dtype in zip(fn.params, dtypes + dtypes):
                self._attempt(self.bind_scalar, inlined, p, dtype)
        inlined = self.inline(fn, f_e.loc, bind)
        want = [ScalarType(d) for d in dtypes]
        if inlined.frame.result_types != want:
            got = ", ".join(map(str, inlined.frame.result_types or [])) or "nothing"
            raise SemanticError(f"'{fn.name}' must return {', '.join(map(str, want))} to combine them; it returns "
                                f"{got}", start_loc(f_e), [Note("defined here", fn.loc)])
        self.straight_line(inlined.body, fn, f_e.loc)
        return inlined

    def bind_scalar(self, inlined: Inlined, param: ast.FnParam, dtype: DType) -> None:
        t = ScalarType(dtype)
        if param.type is not None and self.value_type(param.type) != t:
            raise SemanticError(f"parameter '{param.name}' is declared {_type_text(param.type)} but combines {t} "
                                f"values", param.type.loc)
        inlined.params.append(self.define(Symbol(param.name, "param", t, param.loc)))

    def straight_line(self, body: ast.Block, fn: ast.Function, loc: Loc) -> None:
        """A combine function runs per element in each thread: no branches, loops or effects."""
        for i, s in enumerate(body.stmts):
            if isinstance(s, ast.Return) and i == len(body.stmts) - 1:
                continue
            if not isinstance(s, (ast.Let, ast.Unpack, ast.Assign)) or (
                    isinstance(s, ast.Assign) and not isinstance(s.target, ast.Name)):
                raise SemanticError(f"'{fn.name}' combines elements, so it must be straight-line code: "
                                    f"lets, assignments to variables and a final return (choose with where())",
                                    s.loc, [Note("used to combine here", loc)])
        for node in ast.walk(body):
            inner = self.out.calls.get(node)
            if inner is not None:
                self.straight_line(inner.body, inner.function, loc)
            elif isinstance(node, ast.Call) and node.func in BUILTINS and BUILTINS[node.func].effect:
                raise SemanticError(f"'{fn.name}' combines elements: it cannot call {node.func}()", node.loc,
                                    [Note("used to combine here", loc)])

    @BUILTIN_RULES.on("scan")
    def call_scan(self, e: ast.Call):
        x_e, axis_e, f_e = self.arguments(e, ["x", "axis", "combine"], 3)
        types = self.combined(e, x_e)
        self.scan_axis(e, axis_e, types[0])
        self.out.calls[e] = self.combine_function(e, f_e, [t.dtype for t in types])
        return self.out.types[x_e]

    @BUILTIN_RULES.on("reduce_with")
    def call_reduce_with(self, e: ast.Call):
        x_e, axis_e, f_e = self.arguments(e, ["x", "axis", "combine"], 3)
        types = self.combined(e, x_e)
        axis = self.axis_of(e, axis_e, len(types[0].shape))
        self.out.calls[e] = self.combine_function(e, f_e, [t.dtype for t in types])
        out = [self.reduced(t, axis, t.dtype) for t in types]
        return TupleType(tuple(out)) if isinstance(x_e, ast.TupleLit) else out[0]

    @BUILTIN_RULES.on("permute")
    def call_permute(self, e: ast.Call):
        self.arity(e, 1 if e.func == "trans" else 2)
        t = self.value(e.args[0])
        if not isinstance(t, TileType):
            raise SemanticError(f"{e.func}() needs a tile, got {t}", start_loc(e.args[0]))
        if e.func == "trans":
            if len(t.shape) != 2:
                raise SemanticError(f"trans() needs a 2-D tile, got {t}; use permute() for other ranks",
                                    start_loc(e.args[0]))
            order = (1, 0)
        else:
            order = self.permutation(e.args[1], len(t.shape))
        return TileType(t.dtype, tuple(t.shape[d] for d in order))

    def permutation(self, e: ast.Expr, rank: int) -> tuple[int, ...]:
        if not isinstance(e, ast.ListLit):
            raise SemanticError("the order of permute() is a list of dimensions, like [1, 0]", start_loc(e))
        order = tuple(self.const_int(x, "a dimension of permute()") for x in e.items)
        if sorted(order) != list(range(rank)):
            raise SemanticError(f"[{', '.join(map(str, order))}] is not an order of the {rank} dimensions "
                                f"0..{rank - 1}", e.loc)
        return order

    @BUILTIN_RULES.on("join")
    def call_join(self, e: ast.Call):
        self.arity(e, 2)
        a, b = (self.value(x) for x in e.args)
        dtype = self.unify_dtypes(e.args[0], a.dtype, e.args[1], b.dtype, e.loc)
        shape = self.broadcast(shape_of(a), shape_of(b), e.loc) or ()
        self.check_size(shape + (2,), e.loc)
        return TileType(dtype, shape + (2,))

    @BUILTIN_RULES.on("split")
    def call_split(self, e: ast.Call):
        self.arity(e, 1)
        t = self.value(e.args[0])
        if not isinstance(t, TileType) or t.shape[-1] != 2:
            raise SemanticError(f"split() needs a tile whose last extent is 2, got {t}", start_loc(e.args[0]))
        half = TileType(t.dtype, t.shape[:-1]) if len(t.shape) > 1 else ScalarType(t.dtype)
        return TupleType((half, half))

    @BUILTIN_RULES.on("concat")
    def call_concat(self, e: ast.Call):
        a_e, b_e, axis_e = self.arguments(e, ["a", "b", "axis"], 2)
        a, b = self.value(a_e), self.value(b_e)
        for x, t in ((a_e, a), (b_e, b)):
            if not isinstance(t, TileType):
                raise SemanticError(f"concat() joins tiles, got {t}", start_loc(x))
        dtype = self.unify_dtypes(a_e, a.dtype, b_e, b.dtype, e.loc)
        axis = self.axis_of(e, axis_e, len(a.shape)) or 0
        if len(a.shape) != len(b.shape) or any(x != y for d, (x, y) in enumerate(zip(a.shape, b.shape)) if d != axis):
            raise SemanticError(f"concat() along axis {axis} needs the other extents equal: {a} and {b}", e.loc)
        shape = tuple(x + y if d == axis else x for d, (x, y) in enumerate(zip(a.shape, b.shape)))
        self.check_size(shape, e.loc)
        return TileType(dtype, shape)

    @BUILTIN_RULES.on("print")
    def call_print(self, e: ast.Call):
        if not e.args or not isinstance(e.args[0], ast.StrLit):
            raise SemanticError('device_print() starts with its text, a string like "x = {}"', e.loc)
        text, values = e.args[0], e.args[1:]
        holes = text.value.count("{}")
        if holes and holes != len(values):
            raise SemanticError(f"the text has {holes} {{}} but {len(values)} value{'s' if len(values) != 1 else ''} "
                                f"follow{'s' if len(values) == 1 else ''} it", text.loc)
        for x in values:
            t = self.value(x)
            self.settle(x, self.concrete(x, t).dtype)
        self.shape_of_all(e, values)
        return VOID

    @BUILTIN_RULES.on("assert")
    def call_assert(self, e: ast.Call):
        self.arity(e, 1, 2)
        t = self.value(e.args[0])
        if t.dtype is not DType.BOOL:
            raise SemanticError(f"the condition of device_assert() must be bool, not {t.dtype}", start_loc(e.args[0]))
        if len(e.args) == 2 and not isinstance(e.args[1], ast.StrLit):
            raise SemanticError("the message of device_assert() is a string", start_loc(e.args[1]))
        return VOID


BITCAST_DTYPES = (DType.I32, DType.U32, DType.F32, DType.I64, DType.F64)
_COMPARE = {"==", "!=", "<", "<=", ">", ">="}


def _type_text(t: ast.TypeExpr) -> str:
    """A type annotation as written (near enough: constant dims by name)."""
    if t.kind == "scalar":
        return t.dtype
    dims = ", ".join(str(d.value) if isinstance(d, ast.IntLit) else getattr(d, "id", "...") for d in t.dims)
    return f"{t.kind}<{t.dtype}>[{dims}]"


def _always_returns(block: ast.Block) -> bool:
    """Whether every path through `block` ends in a `return`."""
    if not block.stmts:
        return False
    last = block.stmts[-1]
    if isinstance(last, ast.Return):
        return True
    return isinstance(last, ast.If) and last.orelse is not None and _always_returns(last.then) \
        and _always_returns(last.orelse)


def widens(have: DType, want: DType) -> bool:
    """Whether a value of dtype `have` is taken where `want` is asked for: the same dtype, or a
    16-bit float where an f32 is (exact, so no conversion needs writing)."""
    return have == want or (have.is_half and want is DType.F32)


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
