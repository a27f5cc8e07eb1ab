# The Phobos lexer: source text -> tokens with line and column.
#
# Built on PLY's lex, in the manner of pycparser: a class whose `build()` makes
# the PLY lexer, token rules as `t_` attributes, keywords looked up from the
# identifier rule.  Two things are particular to Phobos:
#
# * Newlines end statements, so NEWLINE is a token - but only where a statement
#   can end: inside braces, outside any () or [] (so a long call or index can
#   span lines), and not after a token that cannot end a statement (an operator,
#   a comma, `{`), which lets an expression continue on the next line.  Runs of
#   newlines become one token, and a NEWLINE directly before `else` is dropped so
#   that `}` and `else` may stand on different lines.
# * Every token carries a `Loc`; the column is computed from the start of its
#   line, which the lexer tracks as it counts newlines.
from __future__ import annotations

import math
import re

import ply.lex as lex

from ..errors import LexError, Loc

KEYWORDS = {
    "kernel": "KERNEL", "let": "LET", "var": "VAR", "for": "FOR", "in": "IN",
    "if": "IF", "else": "ELSE", "true": "TRUE", "false": "FALSE",
    "tensor": "TENSOR", "tile": "TILE", "fn": "FN", "return": "RETURN", "while": "WHILE",
    "break": "BREAK", "continue": "CONTINUE",
}

I64_MAX = (1 << 63) - 1
U64_MAX = (1 << 64) - 1
_INT_TEXT = re.compile(r"\d+")
_HEX_TEXT = re.compile(r"0[xX][0-9a-fA-F]+")
_STRING = re.compile(r'"([^"\\\n]|\\.)*"')
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
_ESCAPE = re.compile(r"\\.")
_FLOAT_TEXT = re.compile(r"(\d+\.\d*|\.\d+)([eE][+-]?\d+)?|\d+[eE][+-]?\d+")

# Tokens after which a newline does not end the statement.
CONTINUES = {
    "PLUS", "MINUS", "TIMES", "DIVIDE", "MOD", "EQ", "NE", "LT", "LE", "GT", "GE",
    "AND", "OR", "NOT", "ASSIGN", "PLUSEQ", "MINUSEQ", "TIMESEQ", "DIVEQ", "COMMA",
    "SLICE", "LBRACE", "SEMI", "COLON", "NEWLINE", "AT",
    "AMP", "PIPE", "CARET", "TILDE", "SHL", "SHR", "ANDEQ", "OREQ", "XOREQ", "SHLEQ", "SHREQ", "ARROW",
}


class Token:
    """A token as the parser sees it (PLY needs type, value, lineno, lexpos)."""

    __slots__ = ("type", "value", "lineno", "lexpos", "loc", "lexer")  # PLY sets .lexer on errors

    def __init__(self, type_: str, value, loc: Loc, lexpos: int):
        self.type = type_
        self.value = value
        self.loc = loc
        self.lineno = loc.line
        self.lexpos = lexpos

    def __repr__(self) -> str:
        return f"Token({self.type}, {self.value!r}, {self.loc.line}:{self.loc.col})"


class Lexer:
    tokens = (
        "ID", "INT", "FLOAT", "STRING",
        "PLUS", "MINUS", "TIMES", "DIVIDE", "MOD",
        "EQ", "NE", "LT", "LE", "GT", "GE", "AND", "OR", "NOT",
        "AMP", "PIPE", "CARET", "TILDE", "SHL", "SHR",
        "ASSIGN", "PLUSEQ", "MINUSEQ", "TIMESEQ", "DIVEQ", "ANDEQ", "OREQ", "XOREQ", "SHLEQ", "SHREQ",
        "ARROW",
        "LPAREN", "RPAREN", "LBRACKET", "RBRACKET", "LBRACE", "RBRACE",
        "COMMA", "SEMI", "COLON", "SLICE", "AT", "NEWLINE",
    ) + tuple(KEYWORDS.values())

    t_ignore = " \t\r\f\v"  # whitespace; only \n ends a line
    t_SLICE = r":\+"
    t_SHLEQ = r"<<="
    t_SHREQ = r">>="
    t_SHL = r"<<"
    t_SHR = r">>"
    t_ANDEQ = r"&="
    t_OREQ = r"\|="
    t_XOREQ = r"\^="
    t_ARROW = r"->"
    t_PLUSEQ = r"\+="
    t_MINUSEQ = r"-="
    t_TIMESEQ = r"\*="
    t_DIVEQ = r"/="
    t_EQ = r"=="
    t_NE = r"!="
    t_LE = r"<="
    t_GE = r">="
    t_AND = r"&&"
    t_OR = r"\|\|"
    t_PLUS = r"\+"
    t_MINUS = r"-"
    t_TIMES = r"\*"
    t_DIVIDE = r"/"
    t_MOD = r"%"
    t_LT = r"<"
    t_GT = r">"
    t_NOT = r"!"
    t_AMP = r"&"
    t_PIPE = r"\|"
    t_CARET = r"\^"
    t_TILDE = r"~"
    t_ASSIGN = r"="
    t_LPAREN = r"\("
    t_RPAREN = r"\)"
    t_LBRACKET = r"\["
    t_RBRACKET = r"\]"
    t_LBRACE = r"\{"
    t_RBRACE = r"\}"
    t_COMMA = r","
    t_SEMI = r";"
    t_COLON = r":"
    t_AT = r"@"

    def __init__(self, filename: str = "<source>"):
        self.filename = filename
        self.line_start = 0
        self.lexer: lex.Lexer | None = None

    def build(self) -> "Lexer":
        self.lexer = lex.lex(module=self, optimize=False, debug=False, errorlog=lex.NullLogger())
        return self

    # Comments and newlines come first so that `//` is not read as two DIVIDEs.
    def t_block_comment(self, t):
        r"/\*(.|\n)*?\*/"
        self._count_newlines(t.value, t.lexpos)

    def t_unterminated_comment(self, t):
        r"/\*"
        raise LexError("unterminated /* comment", self._loc(t.lexpos))

    def t_line_comment(self, t):
        r"//[^\n]*"

    def t_NEWLINE(self, t):
        r"\n+"
        text, t.value = t.value, self._loc(t.lexpos)
        self._count_newlines(text, t.lexpos)
        return t

    # One rule reads every number, letters stuck to it included, so that `12abc`,
    # `1e` or `1.5f` is one bad number rather than a number and a name.
    def t_number(self, t):
        r"(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[A-Za-z_0-9.]*"
        text = t.value
        shown = text if len(text) <= 24 else text[:20] + "..."
        if _INT_TEXT.fullmatch(text) or _HEX_TEXT.fullmatch(text):
            hex_digits = text[2:].lstrip("0") if text[:2].lower() == "0x" else None
            digits = text.lstrip("0") or "0"
            too_long = len(hex_digits) > 16 if hex_digits is not None else len(digits) > len(str(U64_MAX))
            value = int(text, 16) if hex_digits is not None else (0 if too_long else int(digits))
            if too_long or value > U64_MAX:
                raise LexError(f"integer literal {shown} is too large; the largest is {U64_MAX} (u64)"
                               + (f" or 0x{U64_MAX:X} in hexadecimal" if hex_digits is not None else ""),
                               self._loc(t.lexpos))
            pattern = hex_digits is not None and value > I64_MAX
            if pattern:  # a 64-bit pattern written in hexadecimal: the i64 with those bits (or a u64)
                value -= 1 << 64
            t.type, t.value = "INT", (value, pattern)
        elif _FLOAT_TEXT.fullmatch(text):
            if math.isinf(float(text)):
                raise LexError(f"float literal {shown} is too large for f64", self._loc(t.lexpos))
            t.type, t.value = "FLOAT", (float(text), text)
        else:
            raise LexError(f"invalid number '{shown}'", self._loc(t.lexpos))
        return t

    def t_STRING(self, t):
        r'"([^"\\\n]|\\.)*"?'
        if not _STRING.fullmatch(t.value):
            raise LexError("unterminated string: a string ends with '\"' on the same line", self._loc(t.lexpos))
        body = t.value[1:-1]
        bad = next((m for m in _ESCAPE.finditer(body) if m.group()[1] not in _ESCAPES), None)  # in order: \\ is one
        if bad:
            raise LexError(f"unknown escape '{bad.group()}' in a string; the escapes are \\n \\t \\\" \\\\",
                           self._loc(t.lexpos + 1 + bad.start()))
        t.value = _ESCAPE.sub(lambda m: _ESCAPES[m.group()[1]], body)
        return t

    def t_ID(self, t):
        r"[A-Za-z_][A-Za-z_0-9]*"
        t.type = KEYWORDS.get(t.value, "ID")
        return t

    def t_error(self, t):
        ch = t.value[0]
        shown = repr(ch) if ch.isprintable() else f"U+{ord(ch):04X}"
        raise LexError(f"unexpected character {shown}", self._loc(t.lexpos))

    def _count_newlines(self, text: str, lexpos: int) -> None:
        n = text.count("\n")
        if n:
            self.lexer.lineno += n
            self.line_start = lexpos + text.rindex("\n") + 1

    def _loc(self, lexpos: int) -> Loc:
        return Loc(self.filename, self.lexer.lineno, lexpos - self.line_start + 1)

    def tokenize(self, text: str) -> tuple[list[Token], Loc]:
        """All tokens of `text`, with statement-ending NEWLINEs placed as the header says,
        and the end of the input: just after its last token (what an error at the end points at)."""
        if self.lexer is None:
            self.build()
        self.lexer.lineno = 1
        self.line_start = 0
        self.lexer.input(text)
        out: list[Token] = []
        nesting = 0  # depth of () and []
        braces = 0
        end = Loc(self.filename, 1, 1)
        last_start = last_end = 0  # source span of the last token that is not a newline
        while True:
            t = self.lexer.token()
            if t is None:
                break
            if t.type == "NEWLINE":
                loc = t.value  # where the newline starts, taken before its lines were counted
                if nesting or braces == 0 or (out and out[-1].type in CONTINUES):
                    continue
            else:
                loc = end = self._loc(t.lexpos)
                last_start, last_end = t.lexpos, self.lexer.lexpos
                if t.type in ("LPAREN", "LBRACKET"):
                    nesting += 1
                elif t.type in ("RPAREN", "RBRACKET"):
                    nesting = max(nesting - 1, 0)
                elif t.type == "LBRACE":
                    braces += 1
                elif t.type == "RBRACE":
                    braces = max(braces - 1, 0)
                elif t.type == "ELSE" and out and out[-1].type == "NEWLINE":
                    out.pop()
            out.append(Token(t.type, t.value, loc, t.lexpos))
        return out, Loc(end.file, end.line, end.col + last_end - last_start)


_SHARED: Lexer | None = None


def scan(text: str, filename: str = "<source>") -> tuple[list[Token], Loc]:
    """Tokens of `text` and the location of its end; raises LexError at the first
    character that is not Phobos."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Lexer().build()
    _SHARED.filename = filename
    return _SHARED.tokenize(text)


def tokenize(text: str, filename: str = "<source>") -> list[Token]:
    """Tokens of `text`; raises LexError at the first character that is not Phobos."""
    return scan(text, filename)[0]
