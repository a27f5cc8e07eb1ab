# PTX text -> tokens: names, numbers, strings and punctuation, each with its
# PTX line; comments and blanks dropped, newlines kept (`.loc` and `.file` end
# at the end of their line).  syntax.py parses them; inline.py rewrites them
# before it does.
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import PtxSyntaxError

_TOKEN = re.compile(r"""
    (?P<nl>\n)
  | (?P<ws>[ \t\r\f]+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"[^"\n]*")
  | (?P<hexfloat>0[fF][0-9a-fA-F]{8}(?![\w.])|0[dD][0-9a-fA-F]{16}(?![\w.]))
  | (?P<float>\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>0[xX][0-9a-fA-F]+U?|0[bB][01]+U?|\d+U?)
  | (?P<name>[A-Za-z_$%.](?:[A-Za-z0-9_$.%]|::)*)
  | (?P<punct>[;,{}\[\]()<>+\-@!|:=])
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    line: int


def tokenize(text: str, ptx_name: str) -> list[Token]:
    """Split PTX text into tokens; comments and blanks are dropped, newlines kept."""
    tokens: list[Token] = []
    line = 1
    pos = 0
    end = len(text)
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PtxSyntaxError(f"{ptx_name}:{line}: unexpected character {text[pos]!r}",
                                 ptx_file=ptx_name, ptx_line=line)
        kind = m.lastgroup
        chunk = m.group()
        if kind == "nl":
            tokens.append(Token("nl", "\n", line))
        elif kind not in ("ws", "comment"):
            tokens.append(Token(kind, chunk, line))
        line += chunk.count("\n")
        pos = m.end()
    tokens.append(Token("eof", "", line))
    return tokens
