# Device functions (`.func`) inlined at their calls, on the token list, before parsing.
#
# Compilers call `.func`s that the module defines - libdevice's f64 `pow`
# (`__internal_accurate_pow`), for one - with the calling sequence of the
# PTX ISA: a block declaring `.param` variables, `st.param` of the arguments,
# `call (ret), f, (args);`, `ld.param` of the result.  Each such call becomes
# the function's body in a nested block `{ ... }` (its `.reg` declarations are
# scoped there, so they shadow the caller's names) in which the function's
# parameter names are the caller's argument variables and its return
# parameter the caller's result variable, its labels and `.local` variables
# are renamed apart for this call, and every `ret` is a branch to a label
# just after the block.  A guarded call is skipped by a branch on the negated
# guard.  Tokens keep their PTX lines, so errors inside a function name the
# function's lines.  Definitions and prototypes of `.func`s are removed from
# the module; calls of functions the module does not define (`vprintf`,
# `__assertfail`) are left to ops_call.py.  Recursion cannot be inlined and
# is refused (UnsupportedPtx).
from __future__ import annotations

from dataclasses import dataclass

from .errors import PtxSyntaxError, UnsupportedPtx
from .tokens import Token

#: How deep calls inside inlined functions may nest before the module is taken to recurse.
MAX_DEPTH = 16


@dataclass
class Function:
    """A `.func` definition: its parameter names, its return parameter's name (or None) and its body's
    tokens (between its braces)."""

    name: str
    params: list[str]
    result: str | None
    body: list
    line: int


def inline_functions(tokens: list, ptx_name: str) -> list:
    """The token list with every call of a `.func` the module defines replaced by the function's body."""
    functions, rest = _take_functions(tokens, ptx_name)
    if not functions:
        return rest
    counter = [0]

    def error(message: str, line: int, kind=PtxSyntaxError):
        return kind(f"{ptx_name}:{line}: {message}", ptx_file=ptx_name, ptx_line=line)

    def expand(stream: list, depth: int) -> list:
        out, pos = [], 0
        while pos < len(stream):
            call = _call_at(stream, pos, functions)
            if call is None:
                out.append(stream[pos])
                pos += 1
                continue
            start, end, guard, result, callee, args = call
            if depth >= MAX_DEPTH:
                raise error(f"calls of {callee} nest more than {MAX_DEPTH} deep (recursion is not supported)",
                            stream[start].line, UnsupportedPtx)
            function = functions[callee]
            line = stream[start].line
            if len(args) != len(function.params):
                raise error(f"call of {callee} with {len(args)} arguments; it takes {len(function.params)}", line)
            if (result is None) != (function.result is None):
                raise error(f"call of {callee} {'without its' if result is None else 'for a'} result; it returns "
                            f"{'one' if result is None else 'none'}", line)
            counter[0] += 1
            suffix = f"$inl{counter[0]}"
            done = f"$__{callee}_return{suffix}"
            names = dict(zip(function.params, args))
            if function.result is not None:
                names[function.result] = result
            names.update({label: label + suffix for label in _defined_names(function.body)})
            tok = lambda kind, text: Token(kind, text, line)  # noqa: E731
            if guard is not None:
                negated, predicate = guard
                out += [tok("punct", "@")] + ([] if negated else [tok("punct", "!")]) + [
                    tok("name", predicate), tok("name", "bra"), tok("name", done), tok("punct", ";")]
            body = _returns_to(_renamed(function.body, names), done)
            out += [tok("punct", "{")] + expand(body, depth + 1) + [tok("punct", "}"), tok("name", done),
                                                                    tok("punct", ":")]
            pos = end
        return out
    return expand(rest, 0)


def _take_functions(tokens: list, ptx_name: str) -> tuple[dict[str, Function], list]:
    """The `.func` definitions of the module, and its tokens without them and without `.func` prototypes
    (`.extern .func` declarations stay: ops_call.py calls those)."""
    functions, rest, pos, depth = {}, [], 0, 0
    while pos < len(tokens):
        tok = tokens[pos]
        if depth == 0 and tok.text == ".func" and not (rest and rest[-1].text == ".extern"):
            if rest and rest[-1].text in (".visible", ".weak"):
                rest.pop()
            function, pos = _read_function(tokens, pos, ptx_name)
            if function is not None:
                functions[function.name] = function
            continue
        depth += {"{": 1, "}": -1}.get(tok.text, 0) if tok.kind == "punct" else 0
        rest.append(tok)
        pos += 1
    return functions, rest


def _read_function(tokens: list, pos: int, ptx_name: str) -> tuple[Function | None, int]:
    """The `.func` at `pos`: its definition (None for a prototype) and the position after it."""
    line = tokens[pos].line
    pos += 1

    def skip_newlines(p):
        while tokens[p].kind == "nl":
            p += 1
        return p

    def parameter_list(p):
        names, depth, last = [], 0, None
        while True:
            tok = tokens[p]
            if tok.kind == "eof":
                raise PtxSyntaxError(f"{ptx_name}:{line}: unterminated .func parameter list", ptx_file=ptx_name,
                                     ptx_line=line)
            depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(tok.text, 0) if tok.kind == "punct" else 0
            if tok.kind == "name" and depth == 1 and not tok.text.startswith("."):
                last = tok.text
            if tok.text in (",", ")") and depth <= 1 and last is not None:
                names.append(last)
                last = None
            p += 1
            if depth == 0:
                return names, p
    pos = skip_newlines(pos)
    result = None
    if tokens[pos].text == "(":
        results, pos = parameter_list(pos)
        result = results[0] if results else None
    pos = skip_newlines(pos)
    name = tokens[pos].text
    pos = skip_newlines(pos + 1)
    params = []
    if tokens[pos].text == "(":
        params, pos = parameter_list(pos)
    while tokens[pos].kind != "eof" and tokens[pos].text not in (";", "{"):
        pos += 1  # performance directives, .noreturn
    if tokens[pos].text == ";":
        return None, pos + 1
    start, depth = pos + 1, 0
    while True:
        tok = tokens[pos]
        if tok.kind == "eof":
            raise PtxSyntaxError(f"{ptx_name}:{line}: unterminated body of .func {name}", ptx_file=ptx_name,
                                 ptx_line=line)
        depth += {"{": 1, "}": -1}.get(tok.text, 0) if tok.kind == "punct" else 0
        pos += 1
        if depth == 0:
            return Function(name, params, result, tokens[start:pos - 1], line), pos


def _call_at(stream: list, pos: int, functions: dict):
    """A call of a defined function starting at `pos` (its guard included): (start, end, guard, result
    variable, callee, argument variables), or None."""
    start, guard = pos, None
    if stream[pos].text == "@":
        negated = stream[pos + 1].text == "!"
        at = pos + 1 + negated
        if stream[at].kind != "name":
            return None
        guard, pos = (negated, stream[at].text), at + 1
    head = stream[pos]
    if head.kind != "name" or head.text.split(".")[0] != "call":
        return None
    items, p = [], pos + 1
    while stream[p].text != ";":
        if stream[p].kind == "eof":
            return None
        items.append(stream[p])
        p += 1
    groups, current, depth = [], [], 0
    for tok in items:
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
        if tok.text == "," and depth == 0:
            groups.append(current)
            current = []
        else:
            current.append(tok)
    groups.append(current)
    names = [[t.text for t in group if t.kind == "name"] for group in groups]
    callee = next((n[0] for n, g in zip(names, groups) if g and g[0].text != "(" and n), None)
    if callee not in functions:
        return None
    result = names[0][0] if groups[0] and groups[0][0].text == "(" and len(groups) == 3 and names[0] else None
    args = names[-1] if groups[-1] and groups[-1][0].text == "(" else []
    return start, p + 1, guard, result, callee, args


def _defined_names(body: list) -> set[str]:
    """The labels of a body (a name and a colon) and its `.local` variables, which each call renames."""
    names = set()
    for k, tok in enumerate(body[:-1]):
        if tok.kind == "name" and body[k + 1].text == ":" and (k == 0 or body[k - 1].text in (";", "{", "}")
                                                                or body[k - 1].kind == "nl"):
            names.add(tok.text)
        if tok.text == ".local":
            declared = next((t for t in body[k + 1:] if t.kind == "name" and not t.text.startswith(".")), None)
            if declared is not None:
                names.add(declared.text)
    return names


def _renamed(body: list, names: dict[str, str]) -> list:
    return [Token(tok.kind, names[tok.text], tok.line) if tok.kind == "name" and tok.text in names else tok
            for tok in body]


def _returns_to(body: list, label: str) -> list:
    """`ret` and `ret.uni` (guarded or not) as branches to `label`."""
    out = []
    for k, tok in enumerate(body):
        if tok.kind == "name" and tok.text in ("ret", "ret.uni") and k + 1 < len(body) and body[k + 1].text == ";":
            out += [Token("name", "bra", tok.line), Token("name", label, tok.line)]
        else:
            out.append(tok)
    return out
