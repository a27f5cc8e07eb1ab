# What the checker hands on: a `CheckedKernel` and the values its side tables hold.
#
# The AST is shared by every configuration of a kernel and never written to,
# so the checker's results live in side tables keyed by node: the type of
# every expression, the value of every compile-time constant, the `Symbol`
# every name resolves to, the outer `var`s each loop and `if` assigns (what the
# IR generator threads through as loop-carried values or branch results), the
# flags `break`, `continue` and `return` set, and for each call of a device
# function the copy of its body checked for that call (`Inlined`).  The IR
# generator (middle/irgen.py) and the interpreter (run/interpreter.py) read
# them; nothing here checks anything.
from __future__ import annotations

from dataclasses import dataclass, field

from ...configuration import Knobs
from ...errors import Loc
from ...types import TensorType, TupleType, ValueType
from .. import ast


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
    unsigned: int | None = None  # a literal's value where a u64 is asked for, when it holds a hexadecimal pattern

    @property
    def mutable(self) -> bool:
        return self.kind == "var"


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
