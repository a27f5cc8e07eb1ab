# Source locations and the one exception family that leaves Phobos.
#
# Every AST node and every IR instruction carries a `Loc`, so an error found
# late in the pipeline still points at the source.  All errors a user can cause
# are `PhobosError`s (the classes below; `phobos` exports them all).  Raised in
# Python, one shows as
#
#     phobos.errors.SemanticError: file:line:col: message
#         let x = y + 1
#                 ^
#
# and the command line prints its `diagnostic()`, the compiler's form
# `file:line:col: error: message` with the same source line and caret.  The
# caret line needs the source text, which a stage deep in the pipeline does not
# hold: `SourceFile` keeps the texts of the files being compiled, keyed by
# name, and both forms look the line up there.
from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar


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
    _unnamed: ClassVar[dict[str, str]] = {}  # text -> the name it was given (`name_for`)

    @classmethod
    def name_for(cls, text: str) -> str:
        """The name of a source given as a string, without a file name: `<string>`, as Python names code
        given to exec, for the first such text of the process; `<string 2>`, `<string 3>`... for the
        others, so that each name quotes its own lines."""
        if text not in cls._unnamed:
            count = len(cls._unnamed) + 1
            cls._unnamed[text] = "<string>" if count == 1 else f"<string {count}>"
        return cls._unnamed[text]

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
        """The message at its location, with the source line and a caret, and the notes: what a traceback
        shows after the class name, which already says it is an error."""
        return self._text(None)

    def diagnostic(self, kind: str | None = None) -> str:
        """The compiler's form, `file:line:col: error: message` (and `note:` lines), as the command line prints
        it; `kind` "warning" prints it as a warning."""
        return self._text(kind or self.kind)

    def _text(self, kind: str | None) -> str:
        parts = [_format_one(kind, self.message, self.loc)]
        parts += [_format_one("note", n.message, n.loc) for n in self.notes]
        return "\n".join(parts)


def _format_one(kind: str | None, message: str, loc: Loc | None) -> str:
    """`loc: kind: message` with the source line and a caret; the parts that are None left out."""
    head = message if kind is None else f"{kind}: {message}"
    if loc is None or loc.line == 0:
        return head
    head = f"{loc}: {head}"
    text = SourceFile.line(loc.file, loc.line)
    if text is None:
        return head
    caret = "".join(c if c == "\t" else " " for c in text[: max(loc.col - 1, 0)]) + "^"
    return f"{head}\n    {text}\n    {caret}"


#: Set to 1 to see every frame of Phobos in the traceback of an error a call raises (for debugging Phobos).
FULL_TRACEBACKS_VARIABLE = "PHOBOS_FULL_TRACEBACKS"

Function = TypeVar("Function", bound=Callable[..., Any])


def at_call_site(error: PhobosError) -> PhobosError:
    """`error` with the frames inside Phobos dropped from its traceback, so that raising it again (`raise
    at_call_site(error)` in a public entry point) shows the caller's line and that entry point only.  An
    InternalError (a bug in Phobos) keeps them, and so does every error under PHOBOS_FULL_TRACEBACKS=1."""
    if isinstance(error, InternalError) or os.environ.get(FULL_TRACEBACKS_VARIABLE, "") not in ("", "0"):
        return error
    if error.__cause__ is None:
        error.__suppress_context__ = True  # an error noticed while handling another is not caused by it
    return error.with_traceback(None)


def raised_at_call_site(function: Function) -> Function:
    """A public entry point whose PhobosErrors are raised from it, not from deep inside (`at_call_site`)."""
    @functools.wraps(function)
    def entry(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except PhobosError as error:
            raise at_call_site(error)  # the error of the call above; PHOBOS_FULL_TRACEBACKS=1 shows where
    return entry  # type: ignore[return-value]


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


class RaceError(ExecutionError):
    """Two program instances (or threads) of one launch touch the same memory with nothing ordering them,
    at least one writing: the GPU's result would depend on which runs first."""


class DeviceAssertError(ExecutionError):
    """A `device_assert` whose condition was false; the message gives its text, the notes the first
    failures (program, element and the values compared) and how many more there were."""


class InternalError(PhobosError):
    """A bug in Phobos itself; the message says where it happened."""


class ErrorList(PhobosError):
    """Several errors found in one pass over a file (`python -m phobos check`)."""

    def __init__(self, errors: list[PhobosError]):
        super().__init__(errors[0].message, errors[0].loc, errors[0].notes)
        self.errors = list(errors)

    def _text(self, kind: str | None) -> str:
        return "\n".join(e._text(kind) for e in self.errors)
