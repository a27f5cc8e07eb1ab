# The core of the checker: the state of checking one kernel under one
# configuration, the tables of rules, and what every concern needs.
#
# Tile extents and slice sizes are compile-time constants that may depend on
# autotune parameters, so a kernel is checked once per configuration, with the
# configuration's values bound as constants (`Checker.check`).  The results go
# into the side tables of a `CheckedKernel` (checked.py).
#
# Each kind of statement and expression is checked by the rule registered for
# its AST class in STATEMENTS or EXPRESSIONS, and each builtin call by the
# typing rule registered for its `Builtin.rule` in BUILTIN_RULES
# (`phobos.dispatch.Dispatch` tables).  A rule is a function
# `rule(ck: Checker, node)` returning the node's type (expressions) or None
# (statements); the concern modules (statements, expressions, calls,
# functions and the *_rules modules) register theirs on import, and
# sema.py imports them all.  They import this module, never the other way
# round.
#
# Errors are collected per statement so that `phobos check` can show all of
# them; an expression that refers to a name whose declaration failed is
# skipped silently (`Poisoned`) instead of producing a second, derived error.
#
# Literal-only expressions (`weak`: 2, 1.5, 4 * 1024) have no dtype of their
# own: they take the one their context asks for, so `acc * 2` stays f32.  Their
# integer values are folded exactly and must fit the dtype they settle in; an
# error names the value rather than letting it wrap.  Errors about a whole value
# point at its first token (`start_loc`), errors about an operation at its
# operator.
#
# What lives here is what more than one concern needs: scopes and symbols,
# the kernel's parameters and sizes, types and constants written in the
# source (`dtype`, `value_type`, `const_int`, `check_size`), the walk through
# the tables (`stmt`, `expr`, `block`, and the loops and branches that carry
# assigned variables and jump flags out), and the relations between types
# (`assignable`, `storable`, `unify_dtypes`, `broadcast`, `settle`).
from __future__ import annotations

import difflib
import math

from ...configuration import Knobs, configuration_problem, knob_problem
from ...constants import OPERATORS, exact, fits, int_range, range_text
from ...dispatch import Dispatch
from ...errors import ErrorList, Loc, Note, PhobosError, SemanticError
from ...types import DType, ScalarType, TensorType, TileType, TupleType, ValueType, broadcast_shapes, shape_of
from .. import ast
from ..ast import start_loc
from ..builtins import BUILTINS
from .checked import CheckedKernel, Frame, Loop, SizeBinding, Symbol
from .config import declaration

MAX_TILE_ELEMENTS = 1 << 20
SCALAR_PARAM_DTYPES = (DType.F32, DType.F64, DType.I32, DType.I64, DType.U32, DType.U64, DType.BOOL)

KERNEL_SCOPE = 1  # scopes[0] holds NAMED_CONSTANTS
NAMED_CONSTANTS = {
    name: Symbol(name, "literal", ScalarType(DType.F32), Loc("<builtin>", 0, 0), value)
    for name, value in (("inf", float("inf")), ("nan", float("nan")))
}


# The checking rule of each kind of statement and expression (keyed by AST
# class) and the typing rule of each builtin (keyed by `Builtin.rule`).
STATEMENTS = Dispatch("statement")
EXPRESSIONS = Dispatch("expression")
BUILTIN_RULES = Dispatch("builtin typing rule")


class Poisoned(Exception):
    """An expression depends on a declaration that already failed; skip it quietly."""


class Checker:
    """Checks one kernel under one configuration; see `sema.check_kernel`."""

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
        joint = configuration_problem(self.out.config)
        if joint is not None:
            self.errors.append(SemanticError(joint.for_the_space, declaration(k, joint.knob)))
        for index, param in enumerate(k.params):
            try:
                self.check_param(index, param)
            except SemanticError as err:  # its uses are skipped, not reported again
                self.errors.append(err)
                kind = "scalar" if param.type.kind == "scalar" else "tensor"
                self.scopes[KERNEL_SCOPE].setdefault(param.name, Symbol(param.name, kind, None, param.loc))
        self.frame = self.out.frame = Frame(k.name, self.define(self.flag("$return", k.loc)))
        self.attempt_block_stmts(k.body)
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

    # ------------------------------------------------------------ types in the source
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

    def scalar_int(self, e: ast.Expr, what: str) -> ScalarType:
        t = self.expr(e)
        if not (isinstance(t, ScalarType) and t.dtype.is_int):
            raise SemanticError(f"{what} must be an integer scalar, not {t}", start_loc(e))
        return t

    @staticmethod
    def check_size(shape, loc: Loc) -> None:
        n = shape if isinstance(shape, int) else 1
        if not isinstance(shape, int):
            for x in shape:
                n *= x
        if n > MAX_TILE_ELEMENTS:
            raise SemanticError(f"a tile of {n} elements is too large (the limit is {MAX_TILE_ELEMENTS})", loc)

    # ------------------------------------------------------------ the walk
    def attempt(self, fn, *args) -> None:
        """`fn(*args)`, keeping its SemanticError for the report (checking goes on with what follows) and
        dropping a Poisoned one."""
        try:
            fn(*args)
        except Poisoned:
            pass
        except SemanticError as err:
            self.errors.append(err)

    def attempt_block_stmts(self, block: ast.Block) -> None:
        """Check each statement; the rest of a block after one that may jump is guarded by its flags."""
        guards = 0
        try:
            for i, s in enumerate(block.stmts):
                self.attempt(self.stmt, s)
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

    def block(self, block: ast.Block) -> None:
        self.scopes.append({})
        try:
            self.attempt_block_stmts(block)
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

    @staticmethod
    def flag(name: str, loc: Loc) -> Symbol:
        """A hidden bool `var` for the flag of a jump (false until the jump sets it)."""
        return Symbol(name, "var", ScalarType(DType.BOOL), loc)

    def jump(self, s, flag: Symbol) -> None:
        """`s` sets `flag`: every loop and branch it is in carries the flag out."""
        self.out.jumps[s] = flag
        self.note_assigned(flag)
        self.flag_sinks[-1].add(flag)

    def note_assigned(self, sym: Symbol) -> None:
        """Record `sym` as carried by every enclosing loop/if that it was declared outside of."""
        depth = self.depth_of(sym)
        for node, outer_depth in self.loop_stack:
            if depth < outer_depth:
                carried = self.out.carried.setdefault(node, [])
                if sym not in carried:
                    carried.append(sym)

    def expr(self, e: ast.Expr):
        cached = self.out.types.get(e)
        if cached is not None:
            return cached
        t = self.out.types[e] = EXPRESSIONS.lookup(type(e))(self, e)
        return t

    def types_set(self, e, t):
        self.out.types[e] = t
        return t

    # ------------------------------------------------------------ values
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

    def concrete(self, e: ast.Expr, t: ValueType) -> ValueType:
        """The type a value keeps when nothing around it asks for another (literals: i32, or i64 - u64 -
        when the value needs it; f32)."""
        if e in self.weak and isinstance(t, ScalarType) and t.dtype is DType.I32:
            value = self.out.consts.get(e)
            if value is not None and not fits(value, DType.I32):
                return ScalarType(DType.I64 if fits(value, DType.I64) else DType.U64)
        self.settle(e, t.dtype)
        return t

    # ------------------------------------------------------------ type relations
    def assignable(self, target: ValueType, e: ast.Expr, vt, loc: Loc) -> ValueType:
        """Check that a value of type `vt` may be stored in a variable of type `target`."""
        self.single(e, vt)
        if isinstance(vt, TensorType):
            raise SemanticError("a tensor cannot be used as a value; index it to load a tile", loc)
        if not widens(vt.dtype, target.dtype) and not self.adapts(e, vt.dtype, target.dtype):
            raise SemanticError(f"cannot assign {article(vt.dtype)} value to {article(target.dtype)} variable; "
                                f"convert it with {target.dtype}(...)", loc)
        self.settle(e, target.dtype)
        self.fits_shape(shape_of(target), shape_of(vt), loc, "variable")
        return target

    def storable(self, dtype: DType, slice_t: ValueType, e: ast.Expr, vt: ValueType, loc: Loc) -> None:
        """Check that `vt` may be stored into a tensor slice of element type `dtype`."""
        self.single(e, vt)
        compute = dtype.compute
        if not widens(vt.dtype, compute) and not self.adapts(e, vt.dtype, compute):
            # the conversion to the tensor's own format: f16(x) of an f64 rounds once, f32(x) would round twice
            raise SemanticError(f"cannot store {article(vt.dtype)} value into a tensor of {dtype}; "
                                f"convert it with {dtype.loaded}(...)", loc)
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
        """The dtype of an operation on `a` and `b`: theirs when equal (f16 op f16 is f16, as in
        Triton), else the one that a literal-only side adapts to; a 16-bit float meets f32, or the
        other 16-bit format, in f32.  8-bit floats take part as f32 (their compute dtype)."""
        da, db = (d.compute if d.is_f8 else d for d in (da, db))
        if da == db or (b is not None and self.adapts(b, db, da)):
            dtype = da
        elif a is not None and self.adapts(a, da, db):
            dtype = db
        elif da.is_float and da.compute == db.compute:
            dtype = da.compute
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

    # ------------------------------------------------------------ literal-only constants
    def check_fits(self, value, dtype: DType, loc: Loc) -> None:
        """A constant must be representable in the dtype it takes: an integer in range, a
        finite float that does not round to infinity."""
        if isinstance(value, bool) or (dtype.is_int and isinstance(value, float)) or fits(value, dtype):
            return
        raise SemanticError(f"the constant {value} does not fit in {dtype} ({range_text(dtype)})", loc)

    def settle(self, e: ast.Expr, dtype: DType) -> None:
        """A literal-only expression takes `dtype`: its value must fit in it."""
        if e is not None and e in self.weak:
            if dtype is DType.U64 and self.unsigned_value(e) is not None:
                self.out.consts[e] = self.unsigned_value(e)
            value = self.out.consts.get(e)
            if value is not None:
                self.check_fits(value, dtype, start_loc(e))

    def unsigned_value(self, e: ast.Expr) -> int | None:
        """The value of literal-only integer `e` with each 64-bit pattern in hexadecimal in it as the u64 with
        those bits (the lexer gives the i64), as a u64 context asks: 0xFFFFFFFFFFFFFFFF / 2 is
        0x7FFFFFFFFFFFFFFF there; None where `e` is not such an expression."""
        if not isinstance(self.out.consts.get(e), int):
            return None
        if isinstance(e, ast.IntLit):
            return e.value + (1 << 64) if e.pattern else e.value
        if isinstance(e, ast.Name):
            sym = self.out.symbols.get(e)
            return sym.unsigned if sym is not None and sym.unsigned is not None else self.out.consts[e]
        if isinstance(e, ast.Unary) and e.op in ("-", "~"):
            value = self.unsigned_value(e.operand)
            return None if value is None else -value if e.op == "-" else ~value
        if isinstance(e, ast.Binary) and e.lhs in self.weak and e.rhs in self.weak:
            a, b = self.unsigned_value(e.lhs), self.unsigned_value(e.rhs)
            return None if a is None or b is None else exact(*OPERATORS[e.op], a, b)
        return None

    def settle_all(self, args, dtype: DType) -> None:
        """The literal-only arguments of a builtin take the dtype it computes in."""
        for arg in args:
            self.settle(arg, dtype)



def widens(have: DType, want: DType) -> bool:
    """Whether a value of dtype `have` is taken where `want` is asked for: the same dtype, or a
    narrow float (16- or 8-bit) where an f32 is (exact, so no conversion needs writing)."""
    return have == want or (have.is_narrow and want is DType.F32)


def article(dtype: DType) -> str:
    """The dtype with its indefinite article as read aloud: 'an f32', 'an i32', 'a u32', 'a bool'."""
    return f"{'an' if dtype.value[0] in 'fi' else 'a'} {dtype}"
