# Launch rules: what a kernel's decorators say about the sizes it is called with.
#
#   @autotune(WARPS in [4, 8])        the configurations to choose from (checker.config.autotune_space)
#   @derive(BN = next_pow2(N))        constants computed from the sizes at launch
#   @require(BN >= N, ...)            conditions a configuration must meet to serve a call
#   @key(N, next_pow2(M))             what of the sizes an autotuning choice depends on
#
# Their expressions, *launch expressions*, are small and computed on the host
# before anything is compiled or run: integer and bool literals, the kernel's
# size names, autotune parameters and derived constants (those derived before,
# within @derive), `+ - * / %` (C division), comparisons, `&& || !`, and the
# functions next_pow2, cdiv, minimum and maximum.  They compute as expressions
# of literals alone do (phobos.constants.exact): exact integers, no
# wrap-around (a product of two sizes does not overflow); a derived constant
# must fit i32, since the kernel sees it as an i32 constant.
#
# `rules_of(kernel, space)` checks the decorators, with located errors, and
# builds a `LaunchRules`: each expression as a `Term` (a small typed tree) that
# evaluates exactly (`Term.value`, through EVALUATE) and over intervals
# (`Term.bounds`, through BOUNDS).  The launcher asks it, per call, which
# configurations serve the sizes (`serving`) and what the tuning key is
# (`tuning_key`); the checker asks it which configurations to check a body
# under before any call (`representative`: the autotune configurations with
# the derived constants at sample sizes).  Interval reasoning proves, as errors
# at load, a condition that no sizes can meet in any configuration and a
# derived constant that overflows i32 for every size.
#
# The configurations are the cartesian product of the autotune lists, made one
# at a time (`autotune_configurations` is a generator), and a space of more
# than MAX_CONFIGURATIONS is refused at load, where its size is counted from
# the lists without making any: every configuration is checked at load and may
# be compiled and timed at a call.
from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from . import ast
from .ast import start_loc
from ..configuration import configuration_problem
from ..constants import OPERATORS, exact, int_range
from ..dispatch import Dispatch
from ..errors import ErrorList, LaunchError, Loc, Note, PhobosError, SemanticError
from ..types import DType

Config = dict[str, int]

#: The decorators this module reads (@autotune is the checker's).
RULE_DECORATORS = ("derive", "require", "key")

#: Before any call, a kernel with derived constants is checked with every size equal to each of these
#: (moved into the range its conditions allow), wherever its conditions hold.
SAMPLE_SIZES = (1000, 1, 100000)

I32_MIN, I32_MAX = int_range(DType.I32)
UNBOUNDED = math.inf

#: The most configurations an autotune space may have (the product of its lists' lengths); past it,
#: checking every configuration at load, and tuning over them, would take minutes and gigabytes.
MAX_CONFIGURATIONS = 1024

#: The functions a launch expression may call: name -> number of arguments.
FUNCTIONS = {"next_pow2": 1, "cdiv": 2, "minimum": 2, "maximum": 2}


# ---------------------------------------------------------------------------
# Terms: checked launch expressions


@dataclass(frozen=True, eq=False)
class Term:
    """A checked launch expression: `op` is 'const', 'name' or an operation of EVALUATE."""

    op: str
    kind: str  # 'int' or 'bool'
    args: tuple[Term, ...] = ()
    value: int | bool | str | None = None  # the constant, or the name

    def evaluate(self, env: Mapping[str, int]) -> int | bool:
        """The exact value; ZeroDivisionError for a division by zero."""
        if self.op == "const":
            return self.value
        if self.op == "name":
            return env[self.value]
        return EVALUATE[self.op](*(a.evaluate(env) for a in self.args))

    def bounds(self, ranges: Mapping[str, tuple[float, float]]) -> tuple | frozenset:
        """What the value can be when each name lies in its range: (low, high) for an
        integer (possibly infinite), the set of possible values for a bool."""
        if self.op == "const":
            return frozenset([self.value]) if self.kind == "bool" else (self.value, self.value)
        if self.op == "name":
            return ranges[self.value]
        return BOUNDS[self.op](*(a.bounds(ranges) for a in self.args))

    def names(self) -> set[str]:
        if self.op == "name":
            return {self.value}
        return set().union(*(a.names() for a in self.args)) if self.args else set()


def next_pow2(x: int) -> int:
    """The smallest power of two at least x (1 for x <= 1)."""
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def _divide(a: int, b: int) -> int:
    """C division: truncates toward zero; ZeroDivisionError for b == 0."""
    return exact("div", {}, a, b)


def _ceil_divide(a: int, b: int) -> int:
    """cdiv: the exact quotient rounded up, as in a kernel (phobos.constants.ceil_divide), but on
    exact integers; ZeroDivisionError for b == 0."""
    return -(-a // b)


def _exactly(symbol: str) -> Callable:
    """The language's binary operator `symbol` on exact values (phobos.constants)."""
    opcode, attrs = OPERATORS[symbol]
    return lambda a, b: exact(opcode, attrs, a, b)


# The binary operators of launch expressions, as Term ops: a comparison's predicate, else the IR opcode.
_BINARY = {symbol: OPERATORS[symbol][1].get("pred", OPERATORS[symbol][0])
           for symbol in ("+", "-", "*", "/", "%", "&&", "||", "==", "!=", "<", "<=", ">", ">=")}

EVALUATE: dict[str, Callable] = {
    **{op: _exactly(symbol) for symbol, op in _BINARY.items()},
    "neg": lambda a: -a, "not": lambda a: not a,
    "next_pow2": next_pow2, "cdiv": _ceil_divide,
    "minimum": min, "maximum": max,
}
_ARITHMETIC = {"add", "sub", "mul", "div", "rem"}
_LOGIC = {"and", "or"}
_SYMBOLS = {op: symbol for symbol, op in _BINARY.items()}


# --- intervals: sound over-approximations (an operation it cannot bound well gives everything)

_EVERYTHING = (-UNBOUNDED, UNBOUNDED)
_BOTH = frozenset([False, True])


def _product(a: float, b: float) -> float:
    return 0 if a == 0 or b == 0 else a * b


def _bound_mul(a, b):
    corners = [_product(x, y) for x in a for y in b]
    return min(corners), max(corners)


def _quotient(x: float, y: float) -> float | None:
    """x / y (C division) for a divisor y >= 1 that may be infinite; None when both are infinite."""
    if math.isfinite(x) and math.isfinite(y):
        return _divide(int(x), int(y))
    if math.isfinite(x):
        return 0
    return x if math.isfinite(y) else None


def _bound_div(a, b):
    if b[0] < 1:
        return _EVERYTHING  # a divisor that may be zero or negative: anything
    corners = [_quotient(x, y) for x in a for y in b]
    if None in corners:
        return _EVERYTHING
    return min(corners), max(corners)


def _bound_rem(a, b):
    if b[0] < 1:
        return _EVERYTHING
    largest = b[1] - 1  # |a % b| < b, with the sign of a
    if a[0] >= 0:
        return 0, min(a[1], largest)
    if a[1] <= 0:
        return max(a[0], -largest), 0
    return -largest, largest


def _bound_cdiv(a, b):
    if a[0] < 0 or b[0] < 1:
        return _EVERYTHING
    low = _ceil_divide(a[0], b[1]) if math.isfinite(b[1]) else (1 if a[0] > 0 else 0)
    high = _ceil_divide(a[1], b[0]) if math.isfinite(a[1]) else UNBOUNDED
    return low, high


def _compare(test: Callable[[tuple, tuple], bool], never: Callable[[tuple, tuple], bool]):
    """An interval comparison: true when `test` holds of the bounds, false when `never` does."""
    def bound(a, b):
        if test(a, b):
            return frozenset([True])
        if never(a, b):
            return frozenset([False])
        return _BOTH
    return bound


BOUNDS: dict[str, Callable] = {
    "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "mul": _bound_mul, "div": _bound_div, "rem": _bound_rem,
    "neg": lambda a: (-a[1], -a[0]),
    "not": lambda a: frozenset(not x for x in a),
    "and": lambda a, b: frozenset(x and y for x in a for y in b),
    "or": lambda a, b: frozenset(x or y for x in a for y in b),
    "lt": _compare(lambda a, b: a[1] < b[0], lambda a, b: a[0] >= b[1]),
    "le": _compare(lambda a, b: a[1] <= b[0], lambda a, b: a[0] > b[1]),
    "gt": _compare(lambda a, b: a[0] > b[1], lambda a, b: a[1] <= b[0]),
    "ge": _compare(lambda a, b: a[0] >= b[1], lambda a, b: a[1] < b[0]),
    "eq": lambda a, b: (frozenset(x == y for x in a for y in b) if isinstance(a, frozenset) else
                        frozenset([True]) if a[0] == a[1] == b[0] == b[1] else
                        frozenset([False]) if a[1] < b[0] or b[1] < a[0] else _BOTH),
    "ne": lambda a, b: BOUNDS["not"](BOUNDS["eq"](a, b)),
    "next_pow2": lambda a: (next_pow2(a[0]) if math.isfinite(a[0]) else 1,
                            next_pow2(a[1]) if math.isfinite(a[1]) else UNBOUNDED),
    "cdiv": _bound_cdiv,
    "minimum": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "maximum": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
}


def term_text(t: Term) -> str:
    """The expression as source text, with the parentheses it needs."""
    return _text(t, 0)


_PRECEDENCE = {"or": 1, "and": 2, "eq": 3, "ne": 3, "lt": 3, "le": 3, "gt": 3, "ge": 3,
               "add": 4, "sub": 4, "mul": 5, "div": 5, "rem": 5}


def _text(t: Term, outer: int) -> str:
    if t.op == "const":
        return str(t.value).lower() if t.kind == "bool" else str(t.value)
    if t.op == "name":
        return t.value
    if t.op in FUNCTIONS:
        return f"{t.op}({', '.join(_text(a, 0) for a in t.args)})"
    if t.op in ("neg", "not"):
        return ("-" if t.op == "neg" else "!") + _text(t.args[0], 6)
    level = _PRECEDENCE[t.op]
    left = level + 1 if level == _PRECEDENCE["eq"] else level  # comparisons do not chain: both sides bracketed
    text = f"{_text(t.args[0], left)} {_SYMBOLS[t.op]} {_text(t.args[1], level + 1)}"
    return f"({text})" if level < outer else text


# ---------------------------------------------------------------------------
# The rules of one kernel


@dataclass(frozen=True)
class Derived:
    name: str
    term: Term
    loc: Loc


@dataclass(frozen=True)
class Condition:
    term: Term
    loc: Loc

    @property
    def text(self) -> str:
        return term_text(self.term)

    def describe(self) -> str:
        """`@require(BN >= N) at examples/rows.phobos:2:10`: how messages name a condition."""
        return f"@require({self.text}) at {self.loc}"


@dataclass
class Rejection:
    """Why a configuration cannot serve a call: the condition it fails."""

    config: Config
    condition: Condition


def _forced_conflict(config: Mapping[str, int], forced: Mapping[str, int]) -> bool:
    """Whether the configuration's knobs conflict only because of the forced values: they do with them and
    do not without them."""
    if configuration_problem(config) is None:
        return False
    return configuration_problem({n: v for n, v in config.items() if n not in forced}) is None


@dataclass
class LaunchRules:
    kernel_name: str
    space: dict[str, list[int]]
    sizes: list[str]
    derived: list[Derived] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)
    key: list[Term] | None = None  # None: the default key, every size rounded up to a power of two

    @property
    def derived_names(self) -> list[str]:
        return [d.name for d in self.derived]

    def autotune_configurations(self, forced: Mapping[str, int] | None = None) -> Iterator[Config]:
        """The autotune space's cartesian product, with the `forced` values fixed, one at a time; a forced
        knob that the space does not list (configuration.KNOBS: `configure(WARPS=8)`) is in each.  A
        configuration whose knobs conflict only because of a forced value (`configure(PERSISTENT=0)` beside
        `PINGPONG in [0, 1]`: configuration.configuration_problem) is left out, as a @require would leave
        it; a conflict within the space itself stays, for the checker to report."""
        forced = forced or {}
        names = list(self.space)
        choices = [[forced[n]] if n in forced else self.space[n] for n in names]
        unlisted = {n: v for n, v in forced.items() if n not in self.space}
        configs = ({**dict(zip(names, combo)), **unlisted} for combo in itertools.product(*choices))
        if not forced:
            return configs
        return (config for config in configs if not _forced_conflict(config, forced))

    def space_size(self, forced: Mapping[str, int] | None = None) -> int:
        """How many configurations `autotune_configurations` makes, counted without making them (those a
        forced value conflicts with still counted)."""
        forced = forced or {}
        return math.prod(1 if n in forced else len(values) for n, values in self.space.items())

    # --- at launch
    def complete(self, config: Mapping[str, int], sizes: Mapping[str, int]) -> Config:
        """`config` (autotune values) with the derived constants for `sizes` appended."""
        full = dict(config)
        if not self.derived:
            return full
        env = {**sizes, **full}
        for d in self.derived:
            try:
                value = d.term.evaluate(env)
            except ZeroDivisionError:
                raise LaunchError(f"{self.kernel_name}: @derive({d.name} = {term_text(d.term)}) at {d.loc} "
                                  f"divides by zero for {sizes_text(sizes)}") from None
            if not I32_MIN <= value <= I32_MAX:
                raise LaunchError(f"{self.kernel_name}: @derive({d.name} = {term_text(d.term)}) at {d.loc} "
                                  f"is {value} for {sizes_text(sizes)}, which does not fit the i32 constant "
                                  f"{d.name}")
            env[d.name] = full[d.name] = value
        return full

    def failing(self, full: Mapping[str, int], sizes: Mapping[str, int]) -> Condition | None:
        """The first condition that a complete configuration does not meet for `sizes`, or None."""
        env = {**sizes, **full}
        for c in self.conditions:
            try:
                if not c.term.evaluate(env):
                    return c
            except ZeroDivisionError:
                raise LaunchError(f"{self.kernel_name}: {c.describe()} divides by zero for "
                                  f"{sizes_text(sizes)}") from None
        return None

    def serving(self, configs: Sequence[Mapping[str, int]], sizes: Mapping[str, int]
                ) -> tuple[list[Config], list[Rejection]]:
        """The complete configurations among `configs` that meet every condition for `sizes`,
        in order, and the rejected ones with the condition each fails."""
        valid, rejected = [], []
        for config in configs:
            full = self.complete(config, sizes)
            failed = self.failing(full, sizes)
            if failed is None:
                valid.append(full)
            else:
                rejected.append(Rejection(full, failed))
        return valid, rejected

    def tuning_key(self, sizes: Mapping[str, int]) -> dict[str, int] | list[int | bool]:
        """What an autotuning choice for `sizes` is kept under: the values of @key, or by
        default every size rounded up to a power of two."""
        if self.key is None:
            return {name: next_pow2(value) for name, value in sizes.items()}
        try:
            return [t.evaluate(sizes) for t in self.key]
        except ZeroDivisionError:
            raise LaunchError(f"{self.kernel_name}: @key divides by zero for {sizes_text(sizes)}") from None

    def key_text(self) -> str:
        """How the tuning key is made, for cache keys and messages."""
        if self.key is None:
            return "default: next_pow2 of each size"
        return f"@key({', '.join(term_text(t) for t in self.key)})"

    # --- before any call
    def ranges(self, config: Mapping[str, int]) -> tuple[dict[str, tuple], Condition | None]:
        """The range each size (and derived constant) can take when every condition holds under
        `config`, and the condition that no sizes can meet (None while some sizes may meet all)."""
        ranges: dict[str, tuple] = {name: (0, I32_MAX) for name in self.sizes}
        ranges.update({name: (value, value) for name, value in config.items()})
        for _ in range(len(self.sizes) + 2):
            self._derive_ranges(ranges)
            changed = False
            for condition in self.conditions:
                for conjunct in _conjuncts(condition.term):
                    narrowed = _narrow(conjunct, ranges, self.sizes)
                    if narrowed is None:
                        continue
                    name, bounds = narrowed
                    if bounds != ranges[name]:
                        ranges[name] = bounds
                        changed = True
                    if bounds[0] > bounds[1]:
                        return ranges, condition
            if not changed:
                break
        self._derive_ranges(ranges)
        for condition in self.conditions:
            if condition.term.bounds(ranges) == frozenset([False]):
                return ranges, condition
        return ranges, None

    def _derive_ranges(self, ranges: dict[str, tuple]) -> None:
        for d in self.derived:
            ranges[d.name] = _bounds_or_everything(d.term, ranges)

    def representative(self, forced: Mapping[str, int] | None = None) -> list[Config]:
        """The complete configurations a body is checked under before any call: each autotune
        configuration that some sizes may serve, with the derived constants at sample sizes
        (every size equal to one of SAMPLE_SIZES, moved into the range the conditions allow)
        where every condition holds; in order, without repeats."""
        out: list[Config] = []
        for config in self.autotune_configurations(forced):
            ranges, never = self.ranges(config)
            if never is not None:
                continue
            if not self.derived:
                out.append(config)
                continue
            for sample in SAMPLE_SIZES:
                sizes = self._sample(ranges, sample)
                try:
                    full = self.complete(config, sizes)
                    served = self.failing(full, sizes) is None
                except LaunchError:  # a derived constant beyond i32, a division by zero: not a sample
                    continue
                if served and full not in out:
                    out.append(full)
        return out

    def sample_problem(self, forced: Mapping[str, int] | None = None) -> str | None:
        """Why `representative(forced)` has no configuration where the conditions let sizes serve one: what
        `complete` says of its derived constants at the first sample sizes (beyond i32, a division by zero);
        None where the conditions alone leave no sample."""
        for config in self.autotune_configurations(forced):
            ranges, never = self.ranges(config)
            if never is None:
                try:
                    self.complete(config, self._sample(ranges, SAMPLE_SIZES[0]))
                except LaunchError as error:
                    return str(error)
        return None

    def _sample(self, ranges, sample: int) -> dict[str, int]:
        """Every size equal to `sample`, moved into the range the conditions allow it."""
        return {n: int(min(max(sample, ranges[n][0]), ranges[n][1])) for n in self.sizes}


def _bounds_or_everything(t: Term, ranges) -> tuple:
    try:
        return t.bounds(ranges)
    except ZeroDivisionError:
        return _EVERYTHING


def _conjuncts(t: Term) -> list[Term]:
    if t.op == "and":
        return _conjuncts(t.args[0]) + _conjuncts(t.args[1])
    return [t]


_MIRRORED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}


def _narrow(t: Term, ranges: dict[str, tuple], sizes: list[str]) -> tuple[str, tuple] | None:
    """The range of a size that a comparison `SIZE op E` (or `E op SIZE`) confines it to."""
    if t.op not in _MIRRORED:
        return None
    lhs, rhs = t.args
    op = t.op
    if not (lhs.op == "name" and lhs.value in sizes):
        lhs, rhs, op = rhs, lhs, _MIRRORED[op]
        if not (lhs.op == "name" and lhs.value in sizes):
            return None
    low, high = ranges[lhs.value]
    e_low, e_high = _bounds_or_everything(rhs, ranges)
    if op in ("lt", "le", "eq"):
        high = min(high, e_high - (op == "lt"))
    if op in ("gt", "ge", "eq"):
        low = max(low, e_low + (op == "gt"))
    return lhs.value, (low, high)


def sizes_text(sizes: Mapping[str, int]) -> str:
    """`M=4, N=100000`."""
    return ", ".join(f"{name}={value}" for name, value in sizes.items()) or "no sizes"


# ---------------------------------------------------------------------------
# Checking the decorators


class _RuleChecker:
    """Builds the Terms of one kernel's launch expressions; errors are collected, located."""

    def __init__(self, kernel: ast.Kernel, space: dict[str, list[int]]):
        self.kernel = kernel
        self.space = space
        self.sizes: dict[str, Loc] = {}
        self.params: dict[str, ast.Param] = {p.name: p for p in kernel.params}
        for p in kernel.params:
            if p.type.kind == "tensor":
                for d in p.type.dims:
                    if isinstance(d, ast.Name):
                        self.sizes.setdefault(d.id, d.loc)
        self.derived: dict[str, Loc] = {}
        self.errors: list[PhobosError] = []
        self.allowed = "sizes"  # which names the expression being checked may use

    def term(self, e: ast.Expr, allowed: str) -> Term:
        self.allowed = allowed
        return self.expr(e)

    def expr(self, e) -> Term:
        handler = EXPRESSIONS.get(type(e))
        if handler is None:
            raise SemanticError(f"launch expressions are integer arithmetic on sizes and constants; "
                                f"this {_describe(e)} cannot appear in one", start_loc(e))
        return handler(self, e)

    @property
    def what(self) -> str:
        return {"sizes": "a tuning key depends on the sizes only",
                "all": "a launch expression may use the sizes, autotune parameters and derived constants"
                }[self.allowed]


EXPRESSIONS = Dispatch("launch expression")


def _describe(e) -> str:
    return {ast.FloatLit: "float literal", ast.Index: "index", ast.ListLit: "list"}.get(
        type(e), type(e).__name__.lower())


@EXPRESSIONS.on(ast.IntLit)
def _int_literal(checker: _RuleChecker, e: ast.IntLit) -> Term:
    return Term("const", "int", value=e.value)


@EXPRESSIONS.on(ast.BoolLit)
def _bool_literal(checker: _RuleChecker, e: ast.BoolLit) -> Term:
    return Term("const", "bool", value=e.value)


@EXPRESSIONS.on(ast.FloatLit)
def _float_literal(checker: _RuleChecker, e: ast.FloatLit) -> Term:
    raise SemanticError("launch expressions compute on integers; a float cannot appear here", e.loc)


@EXPRESSIONS.on(ast.Name)
def _name(checker: _RuleChecker, e: ast.Name) -> Term:
    name = e.id
    if name in checker.sizes:
        return Term("name", "int", value=name)
    kind = ("an autotune parameter" if name in checker.space else
            "a derived constant" if name in checker.derived else None)
    if kind is not None:
        if checker.allowed == "sizes":
            raise SemanticError(f"'{name}' is {kind}; {checker.what}", e.loc)
        return Term("name", "int", value=name)
    if name in checker.params:
        kind = "a tensor" if checker.params[name].type.kind == "tensor" else "a scalar parameter"
        raise SemanticError(f"'{name}' is {kind}, not known before the launch; {checker.what}", e.loc)
    known = list(checker.sizes) + ([] if checker.allowed == "sizes" else list(checker.space) + list(checker.derived))
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    sizes = ", ".join(checker.sizes) or "none"
    raise SemanticError(f"'{name}' is not a size of kernel '{checker.kernel.name}' (its sizes: {sizes})"
                        f"{'' if checker.allowed == 'sizes' else ', an autotune parameter or a derived constant'}"
                        f"{hint}", e.loc)


@EXPRESSIONS.on(ast.Unary)
def _unary(checker: _RuleChecker, e: ast.Unary) -> Term:
    operand = checker.expr(e.operand)
    kind = "int" if e.op == "-" else "bool"
    if operand.kind != kind:
        raise SemanticError(f"'{e.op}' needs {'an integer' if kind == 'int' else 'a condition'}", e.loc)
    return Term("neg" if e.op == "-" else "not", kind, (operand,))


@EXPRESSIONS.on(ast.Binary)
def _binary(checker: _RuleChecker, e: ast.Binary) -> Term:
    op = _BINARY.get(e.op)
    if op is None:
        raise SemanticError(f"'{e.op}' cannot appear in a launch expression", e.loc)
    lhs, rhs = checker.expr(e.lhs), checker.expr(e.rhs)
    if op in _LOGIC:
        want, kind = "bool", "bool"
    elif op in _ARITHMETIC:
        want, kind = "int", "int"
    else:
        want, kind = (lhs.kind if op in ("eq", "ne") else "int"), "bool"
    for side, t in ((e.lhs, lhs), (e.rhs, rhs)):
        if t.kind != want:
            raise SemanticError(f"'{e.op}' needs {'conditions' if want == 'bool' else 'integers'} on both sides",
                                start_loc(side))
    if op in ("div", "rem"):
        _refuse_zero(rhs, e.rhs)
    return Term(op, kind, (lhs, rhs))


@EXPRESSIONS.on(ast.Call)
def _call(checker: _RuleChecker, e: ast.Call) -> Term:
    arity = FUNCTIONS.get(e.func)
    if arity is None:
        raise SemanticError(f"'{e.func}' cannot be called in a launch expression (it may call "
                            f"{', '.join(FUNCTIONS)})", e.loc)
    if e.kwargs or len(e.args) != arity:
        raise SemanticError(f"{e.func}() takes {arity} argument{'s' * (arity != 1)}", e.loc)
    args = tuple(checker.expr(a) for a in e.args)
    for a, t in zip(e.args, args):
        if t.kind != "int":
            raise SemanticError(f"{e.func}() needs integers", start_loc(a))
    if e.func == "cdiv":
        _refuse_zero(args[1], e.args[1])
    return Term(e.func, "int", args)


def _refuse_zero(divisor: Term, e: ast.Expr) -> None:
    if not divisor.names():
        try:
            zero = divisor.evaluate({}) == 0
        except ZeroDivisionError:
            zero = True
        if zero:
            raise SemanticError("division by zero", start_loc(e))


def rules_of(kernel: ast.Kernel, space: dict[str, list[int]]) -> LaunchRules:
    """The kernel's @derive, @require and @key, checked (SemanticError or ErrorList, located)."""
    _refuse_huge_space(kernel, space)
    checker = _RuleChecker(kernel, space)
    rules = LaunchRules(kernel.name, space, list(checker.sizes))
    key_decorator: ast.Decorator | None = None

    def attempt(fn: Callable[[], None]) -> None:
        try:
            fn()
        except SemanticError as error:
            checker.errors.append(error)

    # @derive first: conditions and keys may name every derived constant, wherever it is derived
    ordered = sorted((d for d in kernel.decorators if d.name in RULE_DECORATORS), key=lambda d: d.name != "derive")
    for deco in ordered:
        if deco.params:
            checker.errors.append(SemanticError(
                f"'NAME in [...]' lists autotune values; it belongs in @autotune, not @{deco.name}",
                deco.params[0].loc))
            continue
        if not deco.args:
            example = {"derive": "@derive(BN = next_pow2(N))", "require": "@require(BN >= N)",
                       "key": "@key(N)"}[deco.name]
            checker.errors.append(SemanticError(f"@{deco.name} needs at least one item, e.g. {example}", deco.loc))
            continue
        if deco.name == "key":
            if key_decorator is not None:
                checker.errors.append(SemanticError("a kernel has one @key", deco.loc,
                                                    [Note("the first one is here", key_decorator.loc)]))
                continue
            key_decorator = deco
            rules.key = []
        for arg in deco.args:
            attempt(lambda: _rule_item(checker, rules, deco.name, arg))
    if checker.errors:
        raise checker.errors[0] if len(checker.errors) == 1 else ErrorList(checker.errors)
    _refuse_impossible(rules)
    _refuse_overflowing(rules)
    return rules


def _refuse_huge_space(kernel: ast.Kernel, space: dict[str, list[int]]) -> None:
    """A located error for an autotune space of more than MAX_CONFIGURATIONS, giving its size."""
    size = math.prod(len(values) for values in space.values())
    if size <= MAX_CONFIGURATIONS:
        return
    where = next(d.loc for d in kernel.decorators if d.name == "autotune")
    lengths = " x ".join(str(len(values)) for values in space.values())
    raise SemanticError(f"this autotune space has {size} configurations ({lengths}), more than the "
                        f"{MAX_CONFIGURATIONS} a kernel may have: list fewer values, or compute a constant "
                        f"from the sizes with @derive", where)


def _rule_item(checker: _RuleChecker, rules: LaunchRules, decorator: str, arg) -> None:
    if decorator == "derive":
        if not isinstance(arg, ast.Keyword):
            raise SemanticError("@derive gives names to values: NAME = expression, like "
                                "@derive(BN = next_pow2(N))", start_loc(arg))
        _check_new_name(checker, arg)
        term = checker.term(arg.value, "all")
        if term.kind != "int":
            raise SemanticError(f"a derived constant is an integer; '{arg.name}' would be a condition "
                                f"(conditions go in @require)", start_loc(arg.value))
        rules.derived.append(Derived(arg.name, term, arg.loc))
        checker.derived[arg.name] = arg.loc
        return
    if isinstance(arg, ast.Keyword):
        hint = "; '=' is not a comparison: did you mean '=='?" if decorator == "require" else ""
        raise SemanticError(f"@{decorator} takes expressions, not NAME = value{hint}", arg.loc)
    if decorator == "require":
        term = checker.term(arg, "all")
        if term.kind != "bool":
            raise SemanticError("a condition is true or false, like BN >= N; this is an integer",
                                start_loc(arg))
        rules.conditions.append(Condition(term, start_loc(arg)))
    else:
        rules.key.append(checker.term(arg, "sizes"))


def _check_new_name(checker: _RuleChecker, arg: ast.Keyword) -> None:
    name = arg.name
    previous = (checker.sizes.get(name) or checker.derived.get(name) or
                (checker.params[name].loc if name in checker.params else None) or
                next((p.loc for d in checker.kernel.decorators for p in d.params if p.name == name), None))
    if previous is not None:
        what = ("a size" if name in checker.sizes else "a derived constant" if name in checker.derived else
                "a parameter" if name in checker.params else "an autotune parameter")
        raise SemanticError(f"'{name}' is already {what}; a derived constant needs a name of its own", arg.loc,
                            [Note("previous definition is here", previous)])


def _refuse_overflowing(rules: LaunchRules) -> None:
    """A located error for a derived constant that lies outside i32 for every size the conditions allow,
    in every configuration some sizes may serve."""
    for d in rules.derived:
        lowest = highest = None
        for config in rules.autotune_configurations():
            ranges, never = rules.ranges(config)
            if never is not None:
                continue
            low, high = ranges[d.name]
            if low <= I32_MAX and high >= I32_MIN:
                break
            lowest = low if lowest is None else min(lowest, low)
            highest = high if highest is None else max(highest, high)
        else:
            if lowest is None:
                continue
            what = f"at least {lowest}" if lowest > I32_MAX else f"at most {highest}"
            raise SemanticError(f"{d.name} = {term_text(d.term)} overflows i32 for every size: it is {what}, "
                                f"and a derived constant is an i32 ({I32_MIN} to {I32_MAX})", d.loc)


def _refuse_impossible(rules: LaunchRules) -> None:
    """A located error when, in every autotune configuration, some condition can never hold."""
    if not rules.conditions:
        return
    blamed: list[Condition] = []
    for config in rules.autotune_configurations():
        never = rules.ranges(config)[1]
        if never is None:
            return
        blamed.append(never)
    condition = blamed[0]
    others = " together with the other conditions" if len(rules.conditions) > 1 else ""
    where = "in any autotune configuration" if rules.space else ""
    raise SemanticError(f"this condition can never hold: no sizes meet '{condition.text}'{others}"
                        f"{' ' + where if where else ''}", condition.loc)
