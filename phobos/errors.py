# Source locations and the one exception family that leaves Phobos.
#
# Every AST node and every IR instruction carries a `Loc`, so an error found
# late in the pipeline still points at the source.  All errors a user can cause
# are `PhobosError`s; they print as
#
#     file:line:col: error: message
#         let x = y + 1
#                 ^
#
# The caret line needs the source text, which a stage deep in the pipeline does
# not hold: `SourceFile` keeps the texts of the files being compiled, keyed by
# name, and `PhobosError.__str__` looks the line up there.
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, order=True)
class Loc:
    """A position in a source file: 1-based line and column."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class SourceFile:
    """Source texts by file name, so that errors can quote the offending line."""

    _texts: ClassVar[dict[str, str]] = {}

    @classmethod
    def register(cls, name: str, text: str) -> None:
        cls._texts[name] = text

    @classmethod
    def line(cls, name: str, line: int) -> str | None:
        """Line `line` (1-based) of a registered file, counted as the lexer counts
        lines: only a newline ends one (str.splitlines also splits at form feeds)."""
        text = cls._texts.get(name)
        if text is None or line < 1:
            return None
        lines = text.split("\n")
        return lines[line - 1].rstrip("\r") if line <= len(lines) else None


@dataclass
class Note:
    """A secondary message attached to an error, e.g. 'previous definition here'."""

    message: str
    loc: Loc | None = None


class PhobosError(Exception):
    """Base of every error Phobos reports to its user."""

    kind: ClassVar[str] = "error"

    def __init__(self, message: str, loc: Loc | None = None, notes: list[Note] | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.notes = list(notes or [])

    def __str__(self) -> str:
        parts = [_format_one(self.kind, self.message, self.loc)]
        parts += [_format_one("note", n.message, n.loc) for n in self.notes]
        return "\n".join(parts)


def _format_one(kind: str, message: str, loc: Loc | None) -> str:
    if loc is None or loc.line == 0:
        return f"{kind}: {message}"
    head = f"{loc}: {kind}: {message}"
    text = SourceFile.line(loc.file, loc.line)
    if text is None:
        return head
    caret = "".join(c if c == "\t" else " " for c in text[: max(loc.col - 1, 0)]) + "^"
    return f"{head}\n    {text}\n    {caret}"


class LexError(PhobosError):
    """A character or literal the lexer cannot read."""


class ParseError(PhobosError):
    """Source that does not follow the grammar."""


class SemanticError(PhobosError):
    """A well-formed program that breaks a rule of the language (names, types, shapes)."""


class UnsupportedError(PhobosError):
    """A valid construct the back end cannot lower (yet) for this target."""


class ResourceError(PhobosError):
    """A configuration that needs more of a resource (shared memory, threads) than the target has."""


class ToolchainError(PhobosError):
    """A tool Phobos needs (ptxas, PyCUDA, a GPU) is missing or failed."""


class PtxasTimeout(ToolchainError):
    """ptxas ran longer than it was allowed to."""


class PtxasError(PhobosError):
    """ptxas rejected a PTX text."""


class LaunchError(PhobosError):
    """Bad arguments for a kernel launch, or a failure reported by the driver."""


class ExecutionError(PhobosError):
    """A fault found while running a kernel on the CPU (interpreter or PTX emulator)."""


class ErrorList(PhobosError):
    """Several errors found in one pass over a file (`python -m phobos check`)."""

    def __init__(self, errors: list[PhobosError]):
        super().__init__(errors[0].message, errors[0].loc, errors[0].notes)
        self.errors = list(errors)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)
