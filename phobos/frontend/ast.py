# The abstract syntax tree of Phobos source, as the parser builds it.
#
# Plain data classes, one per construct, each with the `loc` of the token that
# best identifies it (a binary operation: its operator; a call: the callee's
# name).  Nodes compare by identity (`eq=False`), so the checker can keep its
# results - types, constant values, resolved symbols - in dictionaries keyed by
# node instead of writing into a tree that every autotune configuration shares.
from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..errors import Loc

node = dataclass(eq=False)


# ----------------------------------------------------------------- expressions
@node
class Expr:
    loc: Loc


@node
class IntLit(Expr):
    value: int
    pattern: bool = False  # hexadecimal past the largest i64: the i64 with those 64 bits, or a u64


@node
class FloatLit(Expr):
    value: float
    text: str


@node
class BoolLit(Expr):
    value: bool


@node
class StrLit(Expr):
    """A string literal: an option of a builtin (dot's precision) or the message of device_print and device_assert."""

    value: str


@node
class Name(Expr):
    id: str


@node
class Unary(Expr):
    op: str  # '-', '!' or '~'
    operand: Expr


@node
class Binary(Expr):
    op: str  # '+', '-', '*', '/', '%', '==', '!=', '<', '<=', '>', '>=', '&&', '||', '&', '|', '^', '<<', '>>'
    lhs: Expr
    rhs: Expr


@node
class Keyword:
    loc: Loc
    name: str
    value: Expr


@node
class Call(Expr):
    func: str
    args: list[Expr]
    kwargs: list[Keyword] = field(default_factory=list)


@node
class ListLit(Expr):
    """`[e, ...]`: only as an argument of builtins that take a shape."""

    items: list[Expr]


@node
class TupleLit(Expr):
    """`(e0, e1, ...)`: several values at once (a function's result, the operands of reduce/scan)."""

    items: list[Expr]


@node
class Slice:
    """`start :+ size` inside an index: `size` elements from `start`."""

    loc: Loc
    start: Expr
    size: Expr


Subscript = Slice | Expr


@node
class Index(Expr):
    """`base[s0, s1, ...]`; each subscript is a Slice or a single index."""

    base: Expr
    subscripts: list[Subscript]


# ----------------------------------------------------------------------- types
@node
class TypeExpr:
    """`tensor<DT>[dims]`, `tile<DT>[extents]` or a scalar dtype name."""

    loc: Loc
    kind: str  # 'tensor', 'tile' or 'scalar'
    dtype: str
    dtype_loc: Loc
    dims: list[Expr] = field(default_factory=list)


# ------------------------------------------------------------------ statements
@node
class Stmt:
    loc: Loc


@node
class Block:
    loc: Loc
    stmts: list[Stmt]


@node
class Let(Stmt):
    """`let NAME [: T] = E` (mutable=False) or `var NAME [: T] = E` (mutable=True)."""

    name: str
    name_loc: Loc
    type: TypeExpr | None
    value: Expr
    mutable: bool


@node
class Unpack(Stmt):
    """`let (a, b, ...) = E` or `var (a, b, ...) = E`: the values of a tuple, each bound to a name."""

    names: list[str]
    name_locs: list[Loc]
    value: Expr
    mutable: bool


@node
class Assign(Stmt):
    """`target op value`, op '=' or a compound one ('+=', '&=', '<<=', ...); target a Name or an Index."""

    target: Expr
    op: str
    value: Expr


@node
class ExprStmt(Stmt):
    """A call evaluated for its effect, e.g. `atomic_add(T[i :+ 8], t)`."""

    expr: Expr


@node
class For(Stmt):
    """`for var in range(start, end[, step]) { body }`."""

    var: str
    var_loc: Loc
    start: Expr
    end: Expr
    step: Expr | None
    body: Block


@node
class While(Stmt):
    """`while cond { body }`."""

    cond: Expr
    body: Block


@node
class Break(Stmt):
    """`break`: leave the innermost loop."""


@node
class Continue(Stmt):
    """`continue`: go on with the next iteration of the innermost loop."""


@node
class Return(Stmt):
    """`return` (from a kernel, or a function without a value) or `return E` (from a function)."""

    value: Expr | None


@node
class If(Stmt):
    """`if cond { then } else ...`; `else if` is an `orelse` block holding one If."""

    cond: Expr
    then: Block
    orelse: Block | None


# ------------------------------------------------------------- kernels, files
@node
class AutotuneParam:
    loc: Loc
    name: str
    values: list[Expr]


@node
class Decorator:
    """`@name(...)`: the `NAME in [...]` items (of @autotune) are `params`; the others, in order,
    are `args`: `NAME = expr` as a Keyword (of @derive) or an expression (of @require and @key)."""

    loc: Loc
    name: str
    params: list[AutotuneParam]
    args: list[Expr | Keyword] = field(default_factory=list)


@node
class Param:
    loc: Loc
    name: str
    type: TypeExpr


@node
class FnParam:
    """A parameter of a device function; without a type it takes the type of its argument."""

    loc: Loc
    name: str
    type: TypeExpr | None


@node
class Function:
    """`fn NAME(params) [-> T] { body }`: a device function, inlined where it is called."""

    loc: Loc
    name: str
    params: list[FnParam]
    result: TypeExpr | None
    body: Block


@node
class Kernel:
    loc: Loc
    name: str
    params: list[Param]
    decorators: list[Decorator]
    body: Block
    # the device functions of the kernel's file, by name (shared by its kernels; set by the parser)
    functions: dict[str, Function] = field(default_factory=dict)


@node
class Program:
    loc: Loc
    kernels: list[Kernel]
    functions: list[Function] = field(default_factory=list)


# ------------------------------------------------------------------ traversal
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def children(obj) -> list:
    """The nodes directly below `obj`, in source order (its node and node-list fields)."""
    cls = type(obj)
    names = _CHILD_FIELDS.get(cls)
    if names is None:
        names = _CHILD_FIELDS[cls] = tuple(
            f.name for f in fields(cls) if f.name != "loc" and not f.name.endswith(("_loc", "_locs"))
            and f.type not in ("str", "int", "float", "bool", "list[str]", "dict[str, Function]"))
    out = []
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, list):
            out.extend(value)
        elif hasattr(value, "__dataclass_fields__"):
            out.append(value)
    return out


def calls(root) -> list[Call]:
    """Every call in the subtree of `root` (iteratively: a program may nest deeper than Python recurses)."""
    found, pending = [], [root]
    while pending:
        node = pending.pop()
        if isinstance(node, Call):
            found.append(node)
        pending.extend(child for child in children(node) if hasattr(child, "__dataclass_fields__"))
    return found


def walk(node):
    """`node` and every node below it, in source order."""
    yield node
    for child in children(node):
        yield from walk(child)


def start_loc(e) -> Loc:
    """Where an expression's text begins (its leftmost token), for errors about the whole value.

    A node's own `loc` is the token that identifies it - a binary operation's
    operator, an index's '[' - which lies inside the text of the expression.
    """
    while True:
        if isinstance(e, Binary):
            e = e.lhs
        elif isinstance(e, Index):
            e = e.base
        elif isinstance(e, Slice):
            e = e.start
        else:
            return e.loc


# ------------------------------------------------------------------- printing
def dump(obj, indent: int = 0) -> str:
    """An indented, readable rendering of a tree (`--dump-ast`), with locations."""
    pad = "  " * indent
    if isinstance(obj, list):
        if not obj:
            return pad + "[]"
        return "\n".join(dump(x, indent) for x in obj)
    if not hasattr(obj, "__dataclass_fields__"):
        return pad + repr(obj)
    loc = getattr(obj, "loc", None)
    head = f"{pad}{type(obj).__name__}" + (f" @{loc.line}:{loc.col}" if loc else "")
    simple, nested = [], []
    for f in fields(obj):
        if f.name == "loc" or f.name.endswith(("_loc", "_locs")) or f.name == "functions" and isinstance(obj, Kernel):
            continue
        v = getattr(obj, f.name)
        if hasattr(v, "__dataclass_fields__") or (isinstance(v, list) and v and hasattr(v[0], "__dataclass_fields__")):
            nested.append((f.name, v))
        elif isinstance(v, list) and not v:
            continue
        else:
            simple.append(f"{f.name}={v!r}")
    lines = [head + (" " + " ".join(simple) if simple else "")]
    for name, v in nested:
        lines.append(f"{pad}  {name}:")
        lines.append(dump(v, indent + 2))
    return "\n".join(lines)
