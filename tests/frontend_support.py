# Shared helpers of the front-end tests: run the front end on a source text the
# way `python -m phobos check` does, and find the example programs.
from __future__ import annotations

from pathlib import Path

from phobos.compiler import parse_source
from phobos.errors import PhobosError
from phobos.frontend.sema import check_program

REPO = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.phobos"))


def front_end_errors(src: str, filename: str = "test.phobos") -> list[PhobosError]:
    """Every error the front end reports for `src`: the lexer's or parser's one, or the checker's."""
    try:
        program = parse_source(src, filename)
    except PhobosError as err:
        return [err]
    return check_program(program)
