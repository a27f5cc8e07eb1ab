# PTX text -> a syntax tree of entries, declarations and instructions.
#
# The emulator reads the PTX the Phobos compiler emits and what nvcc emits for
# small kernels: module directives, `.entry` kernels with their parameters and
# performance directives, register and shared/local variable declarations,
# labels, `.loc` line information and instructions with guards and operands.
# Of function calls it reads what calling an external function takes: the
# `.extern .func` declaration, `.param` variables declared in a kernel's body
# and the parenthesised operand lists of `call` (ops_call.py runs the calls);
# calls of the module's own `.func`s are inlined before parsing (inline.py).
# This module only reads the text; `decode` gives instructions their meaning.
#
# The tokens (tokens.py) keep newlines because `.loc` and `.file` end at the
# end of their line; everywhere else newlines are white space.  Every
# statement keeps its PTX line number so that errors can name it.
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import PtxSyntaxError, UnsupportedPtx
from .inline import inline_functions
from .tokens import Token, tokenize



# ----------------------------------------------------------------------------- tree

@dataclass(frozen=True)
class Name:
    """A register, special register, variable, parameter or label name (or `_`)."""

    text: str


@dataclass(frozen=True)
class Imm:
    """A literal: kind 'int' (value is an int), 'float' (a Python float) or
    'f32bits'/'f64bits' (the raw bits of a `0f...`/`0d...` literal)."""

    kind: str
    value: int | float


@dataclass(frozen=True)
class Vector:
    """A brace list `{a, b, ...}` of operands."""

    items: tuple


@dataclass(frozen=True)
class Address:
    """A memory operand `[base+offset]`; base is a Name or None (absolute).  A tensor
    operand `[tensor-map, {c0, c1, ...}]` has the coordinates in `coords`."""

    base: Name | None
    offset: int
    coords: tuple = ()


@dataclass(frozen=True)
class ParenList:
    """A parenthesised list `(a, b, ...)` of names: the return and argument parameters of `call`."""

    items: tuple


@dataclass(frozen=True)
class Pair:
    """`d|p`: a value destination and a predicate destination."""

    first: Name
    second: Name


@dataclass(frozen=True)
class Negated:
    """`!%p`, a negated predicate source operand."""

    name: Name


@dataclass(frozen=True)
class SymbolOffset:
    """`name+offset` outside brackets: the address of a variable plus a constant."""

    name: Name
    offset: int


@dataclass(frozen=True)
class SourceLoc:
    """A `.loc` position: file index (resolved through `.file`), line, column."""

    file: int
    line: int
    col: int


@dataclass
class Instruction:
    opcode: str
    operands: list
    guard: Name | None
    guard_negated: bool
    line: int
    loc: SourceLoc | None
    scope: int


@dataclass
class Label:
    name: str
    line: int


@dataclass
class RegDecl:
    type: str
    names: list[str]
    line: int
    scope: int


@dataclass
class VarDecl:
    """A variable of a state space (.shared, .local, .global, .const): elements of
    type `elem`, `size` bytes (None for `.extern` dynamic shared arrays), and the
    initial values of `.global`/`.const` variables (literals, zero-filled)."""

    space: str
    name: str
    align: int
    size: int | None
    line: int
    elem: str = "b8"
    init: tuple[Imm, ...] = ()


@dataclass
class Param:
    name: str
    type: str
    size: int
    align: int
    line: int


@dataclass
class Entry:
    name: str
    params: list[Param]
    directives: dict[str, tuple[int, ...]]
    statements: list = field(default_factory=list)
    variables: list[VarDecl] = field(default_factory=list)
    scopes: dict[int, int] = field(default_factory=dict)  # nested `{ }` block -> enclosing block
    line: int = 0


@dataclass
class PtxModuleAst:
    version: str | None = None
    target: list[str] = field(default_factory=list)
    address_size: int = 64
    files: dict[int, str] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)
    variables: list[VarDecl] = field(default_factory=list)
    functions: dict[str, int] = field(default_factory=dict)  # external functions declared -> line


PERFORMANCE_DIRECTIVES = {"maxntid", "reqntid", "minnctapersm", "maxnctapersm", "maxnreg",
                          "reqnctapercluster", "maxclusterrank", "explicitcluster", "noreturn",
                          "blocksareclusters"}
_SCALAR_SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
                 "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4,
                 "b64": 8, "u64": 8, "s64": 8, "f64": 8, "pred": 1}


def parse_int(text: str) -> int:
    """A PTX integer literal: decimal, hex 0x, binary 0b or octal 0..., optional U suffix."""
    body = text[:-1] if text.endswith("U") else text
    if body[:2] in ("0x", "0X"):
        return int(body[2:], 16)
    if body[:2] in ("0b", "0B"):
        return int(body[2:], 2)
    if len(body) > 1 and body[0] == "0":
        return int(body, 8)
    return int(body)


class Parser:
    """Recursive descent over the token list."""

    def __init__(self, text: str, ptx_name: str):
        self.ptx_name = ptx_name
        self.tokens = inline_functions(tokenize(text, ptx_name), ptx_name)
        self.pos = 0
        self.loc: SourceLoc | None = None
        self.scope_counter = 0

    # -- token helpers
    def peek(self, skip_newlines: bool = True) -> Token:
        if skip_newlines:
            while self.tokens[self.pos].kind == "nl":
                self.pos += 1
        return self.tokens[self.pos]

    def next(self, skip_newlines: bool = True) -> Token:
        tok = self.peek(skip_newlines)
        self.pos += 1
        return tok

    def error(self, message: str, line: int, kind=PtxSyntaxError):
        return kind(f"{self.ptx_name}:{line}: {message}", ptx_file=self.ptx_name, ptx_line=line)

    def expect(self, text: str) -> Token:
        tok = self.next()
        if tok.text != text:
            raise self.error(f"expected {text!r}, found {tok.text or 'end of file'!r}", tok.line)
        return tok

    def accept(self, text: str) -> bool:
        if self.peek().text == text:
            self.pos += 1
            return True
        return False

    def expect_kind(self, kind: str, what: str) -> Token:
        tok = self.next()
        if tok.kind != kind:
            raise self.error(f"expected {what}, found {tok.text or 'end of file'!r}", tok.line)
        return tok

    def rest_of_line(self) -> list[Token]:
        out = []
        while self.tokens[self.pos].kind not in ("nl", "eof"):
            out.append(self.tokens[self.pos])
            self.pos += 1
        return out

    def skip_block(self) -> None:
        """Skip a balanced `{ ... }` (debug sections)."""
        self.expect("{")
        depth = 1
        while depth:
            tok = self.next()
            if tok.kind == "eof":
                raise self.error("unterminated block", tok.line)
            depth += {"{": 1, "}": -1}.get(tok.text, 0)

    # -- module level
    def parse_module(self) -> PtxModuleAst:
        module = PtxModuleAst()
        while True:
            tok = self.peek()
            if tok.kind == "eof":
                return module
            self.pos += 1
            word = tok.text
            if word == ".version":
                module.version = self.next().text
            elif word == ".target":
                module.target.append(self.next().text)
                while self.accept(","):
                    module.target.append(self.next().text)
            elif word == ".address_size":
                module.address_size = parse_int(self.expect_kind("int", "an address size").text)
            elif word == ".file":
                self.parse_file(module)
            elif word == ".loc":
                self.parse_loc(tok)
            elif word == ".extern" and self.peek().text == ".func":
                self.parse_extern_function(module)
            elif word in (".visible", ".weak", ".extern"):
                after = self.peek()
                if after.text in (".shared", ".global", ".const") or word == ".extern":
                    self.parse_module_variable(module, extern=(word == ".extern"))
                # otherwise the linkage qualifier applies to the .entry/.func that follows
            elif word == ".entry":
                module.entries.append(self.parse_entry(tok.line))
            elif word in (".shared", ".global", ".const"):
                self.pos -= 1
                self.parse_module_variable(module, extern=False)
            elif word == ".section":
                self.next()
                self.skip_block()
            elif word == ".pragma":
                self.next()
                self.expect(";")
            else:
                raise self.error(f"unexpected {word!r} at module level", tok.line,
                                 UnsupportedPtx if word.startswith(".") else PtxSyntaxError)

    def parse_extern_function(self, module: PtxModuleAst) -> None:
        """`.extern .func [(ret)] name (params);`: the name is recorded, the signature skipped."""
        line = self.next().line
        depth, name = 0, None
        while True:
            tok = self.next()
            if tok.kind == "eof":
                raise self.error("unterminated .func declaration", line)
            if tok.text == "(":
                depth += 1
            elif tok.text == ")":
                depth -= 1
            elif tok.text == ";" and depth == 0:
                break
            elif depth == 0 and tok.kind == "name" and name is None:
                name = tok.text
        if name is None:
            raise self.error(".func declaration without a name", line)
        module.functions[name] = line

    def parse_file(self, module: PtxModuleAst) -> None:
        parts = self.rest_of_line()
        if len(parts) < 2 or parts[0].kind != "int" or parts[1].kind != "string":
            line = parts[0].line if parts else self.peek().line
            raise self.error("malformed .file directive", line)
        module.files[parse_int(parts[0].text)] = parts[1].text[1:-1]

    def parse_loc(self, tok: Token) -> None:
        parts = self.rest_of_line()
        if len(parts) < 3 or any(p.kind != "int" for p in parts[:3]):
            raise self.error("malformed .loc directive", tok.line)
        self.loc = SourceLoc(*(parse_int(p.text) for p in parts[:3]))

    def parse_module_variable(self, module: PtxModuleAst, extern: bool) -> None:
        space_tok = self.next()
        if space_tok.text not in (".shared", ".global", ".const"):
            raise self.error(f"module-level {space_tok.text} variables are not supported",
                             space_tok.line, UnsupportedPtx)
        module.variables.append(self.parse_variable(space_tok.text[1:], extern, space_tok.line))

    def parse_variable(self, space: str, extern: bool, line: int) -> VarDecl:
        """`[.align N] .type name[dims]... ;` after the state space word."""
        align = 0
        elem = None
        while True:
            tok = self.next()
            if tok.text == ".align":
                align = parse_int(self.expect_kind("int", "an alignment").text)
            elif tok.text.startswith(".") and tok.text[1:] in _SCALAR_SIZES:
                elem = tok.text[1:]
            elif tok.text.startswith("."):
                raise self.error(f"unsupported variable qualifier {tok.text}", tok.line, UnsupportedPtx)
            else:
                name = tok.text
                break
        if elem is None:
            raise self.error(f"variable {name} has no type", line)
        count: int | None = 1
        while self.accept("["):
            if self.accept("]"):
                count = None
                continue
            dim = parse_int(self.expect_kind("int", "an array size").text)
            self.expect("]")
            count = None if count is None else count * dim
        init: tuple[Imm, ...] = ()
        if self.accept("="):
            if space not in ("global", "const"):
                raise self.error(f"a .{space} variable cannot be initialised", line)
            init = tuple(self.parse_initializer())
            count = len(init) if count is None else count
            if len(init) > count:
                raise self.error(f"too many initial values for {name}", line)
        self.expect(";")
        if extern != (count is None):
            raise self.error(f"{name}: only .extern arrays may be declared without a size", line)
        size = None if count is None else count * _SCALAR_SIZES[elem]
        return VarDecl(space, name, align or _SCALAR_SIZES[elem], size, line, elem, init)

    def parse_initializer(self) -> list[Imm]:
        """A literal or a brace list of them (nested braces of arrays flattened)."""
        if not self.accept("{"):
            tok = self.peek()
            if tok.kind == "name":
                raise self.error(f"initialising with the address of {tok.text} is not supported",
                                 tok.line, UnsupportedPtx)
            return [self.parse_literal()]
        values = self.parse_initializer()
        while self.accept(","):
            values += self.parse_initializer()
        self.expect("}")
        return values

    # -- entries
    def parse_entry(self, line: int) -> Entry:
        name = self.expect_kind("name", "a kernel name").text
        params: list[Param] = []
        self.expect("(")
        if not self.accept(")"):
            while True:
                params.append(self.parse_param())
                if self.accept(")"):
                    break
                self.expect(",")
        directives: dict[str, tuple[int, ...]] = {}
        while self.peek().text != "{":
            tok = self.next()
            word = tok.text[1:]
            if word not in PERFORMANCE_DIRECTIVES:
                raise self.error(f"unexpected {tok.text!r} in kernel header", tok.line, UnsupportedPtx)
            values = []
            while self.peek().kind == "int":
                values.append(parse_int(self.next().text))
                if not self.accept(","):
                    break
            directives[word] = tuple(values)
        entry = Entry(name, params, directives, line=line)
        self.loc = None  # line information does not carry over from the previous kernel
        self.expect("{")
        self.parse_body(entry, scope=0)
        return entry

    def parse_param(self) -> Param:
        tok = self.expect(".param")
        ptype, align, name = None, 0, None
        while name is None:
            tok = self.next()
            if tok.kind != "name":
                raise self.error(f"unexpected {tok.text!r} in parameter", tok.line)
            if not tok.text.startswith("."):
                name = tok.text
                break
            for word in tok.text[1:].split("."):
                if word in _SCALAR_SIZES:
                    ptype = word
                elif word == "align":
                    align = parse_int(self.expect_kind("int", "an alignment").text)
                elif word not in ("ptr", "global", "shared", "const", "local"):
                    raise self.error(f"unsupported parameter qualifier .{word}", tok.line, UnsupportedPtx)
        if ptype is None:
            raise self.error(f"parameter {name} has no type", tok.line)
        size = _SCALAR_SIZES[ptype]
        if self.accept("["):
            size *= parse_int(self.expect_kind("int", "an array size").text)
            self.expect("]")
            return Param(name, "bytes", size, align or _SCALAR_SIZES[ptype], tok.line)
        return Param(name, ptype, size, align or size, tok.line)

    def parse_body(self, entry: Entry, scope: int) -> None:
        while True:
            tok = self.peek()
            if tok.kind == "eof":
                raise self.error(f"kernel {entry.name} is not closed", tok.line)
            if tok.text == "}":
                self.pos += 1
                return
            if tok.text == "{":
                self.pos += 1
                self.scope_counter += 1
                entry.scopes[self.scope_counter] = scope
                self.parse_body(entry, scope=self.scope_counter)
                continue
            start = self.pos
            self.pos += 1
            word = tok.text
            if word == ".reg":
                entry.statements.append(self.parse_reg(tok.line, scope))
            elif word in (".shared", ".local", ".param"):  # a body's .param: an argument of a call
                entry.variables.append(self.parse_variable(word[1:], False, tok.line))
            elif word == ".extern":
                space = self.next()
                if space.text != ".shared":
                    raise self.error(f".extern {space.text} is not supported", tok.line, UnsupportedPtx)
                entry.variables.append(self.parse_variable("shared", True, tok.line))
            elif word == ".loc":
                self.parse_loc(tok)
            elif word == ".pragma":
                self.next()
                self.expect(";")
            elif tok.kind == "name" and self.peek().text == ":" and not word.startswith("."):
                self.pos += 1
                entry.statements.append(Label(word, tok.line))
            elif word == "@" or (tok.kind == "name" and not word.startswith(".")):
                self.pos = start  # (the look for a label's colon may have skipped a line break)
                entry.statements.append(self.parse_instruction(scope))
            else:
                raise self.error(f"unsupported directive {word!r} in kernel body", tok.line,
                                 UnsupportedPtx if word.startswith(".") else PtxSyntaxError)

    def parse_reg(self, line: int, scope: int) -> RegDecl:
        type_tok = self.next()
        rtype = type_tok.text[1:]
        if rtype not in _SCALAR_SIZES:
            raise self.error(f"unsupported register type {type_tok.text}", line, UnsupportedPtx)
        names: list[str] = []
        while True:
            name = self.expect_kind("name", "a register name").text
            if self.accept("<"):
                count = parse_int(self.expect_kind("int", "a register count").text)
                self.expect(">")
                names.extend(f"{name}{i}" for i in range(count))
            else:
                names.append(name)
            if self.accept(";"):
                return RegDecl(rtype, names, line, scope)
            self.expect(",")

    def parse_instruction(self, scope: int) -> Instruction:
        guard, negated = None, False
        first = self.peek()
        if self.accept("@"):
            negated = self.accept("!")
            guard = Name(self.expect_kind("name", "a predicate").text)
        op_tok = self.expect_kind("name", "an instruction")
        operands = []
        if not self.accept(";"):
            while True:
                operands.append(self.parse_operand())
                if self.accept(";"):
                    break
                self.expect(",")
        return Instruction(op_tok.text, operands, guard, negated, first.line, self.loc, scope)

    def parse_operand(self):
        tok = self.peek()
        if tok.text == "(":
            self.pos += 1
            items = [Name(self.expect_kind("name", "a parameter").text)]
            while self.accept(","):
                items.append(Name(self.expect_kind("name", "a parameter").text))
            self.expect(")")
            return ParenList(tuple(items))
        if tok.text == "{":
            self.pos += 1
            items = [self.parse_operand()]
            while self.accept(","):
                items.append(self.parse_operand())
            self.expect("}")
            return Vector(tuple(items))
        if tok.text == "[":
            self.pos += 1
            return self.parse_address()
        if tok.text == "!":
            self.pos += 1
            return Negated(Name(self.expect_kind("name", "a predicate").text))
        if tok.text == "-" or tok.kind in ("int", "float", "hexfloat"):
            return self.parse_literal()
        if tok.kind == "name":
            self.pos += 1
            if self.accept("|"):
                return Pair(Name(tok.text), Name(self.expect_kind("name", "a predicate").text))
            if self.peek().text == "+":
                self.pos += 1
                return SymbolOffset(Name(tok.text), self.parse_signed_int())
            return Name(tok.text)
        raise self.error(f"unexpected {tok.text or 'end of file'!r} in operand list", tok.line)

    def parse_signed_int(self) -> int:
        sign = -1 if self.accept("-") else 1
        return sign * parse_int(self.expect_kind("int", "an integer").text)

    def parse_literal(self) -> Imm:
        negative = self.accept("-")
        tok = self.next()
        if tok.kind == "int":
            value = parse_int(tok.text)
            return Imm("int", -value if negative else value)
        if tok.kind == "float":
            return Imm("float", -float(tok.text) if negative else float(tok.text))
        if tok.kind == "hexfloat":
            bits = int(tok.text[2:], 16)
            if tok.text[1] in "fF":
                if negative:
                    bits ^= 0x80000000
                return Imm("f32bits", bits)
            if negative:
                bits ^= 1 << 63
            return Imm("f64bits", bits)
        raise self.error(f"expected a number, found {tok.text!r}", tok.line)

    def parse_address(self) -> Address:
        """`[base]`, `[base+imm]`, `[base+-imm]`, `[base-imm]`, `[imm]` or `[base, {c0, ...}]`."""
        base: Name | None = None
        offset = 0
        sign = 1
        while True:
            tok = self.next()
            if tok.text == "-":
                sign = -sign
                continue
            if tok.kind == "name" and base is None and sign > 0:
                base = Name(tok.text)
            elif tok.kind == "int":
                offset += sign * parse_int(tok.text)
            else:
                raise self.error(f"unexpected {tok.text!r} in address", tok.line)
            if self.accept("]"):
                return Address(base, offset)
            if base is not None and not offset and self.accept(","):
                coords = self.parse_operand()
                if not isinstance(coords, Vector):
                    raise self.error("expected tensor coordinates {c0, ...}", tok.line)
                self.expect("]")
                return Address(base, 0, coords.items)
            sign = -1 if self.accept("-") else 1
            if sign > 0:
                self.expect("+")


def parse(text: str, ptx_name: str = "<ptx>") -> PtxModuleAst:
    """Parse a PTX module."""
    return Parser(text, ptx_name).parse_module()

