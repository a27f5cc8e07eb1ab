# The checker's entry points: AST + one autotune configuration -> a typed
# kernel (`check_kernel`), and every error of a file under every
# configuration (`check_program`, for `phobos check`).
#
# The checker itself is in checker/, one module per concern (its
# __init__.py lists them): core.Checker holds the state of checking one
# kernel and what every concern needs, and the concern modules register
# their rules in core's tables - STATEMENTS, EXPRESSIONS and BUILTIN_RULES -
# when imported, as lowering's concern modules fill core.HANDLERS.  The
# imports below fill the tables.  The names the later stages, the launcher
# and the command line use are importable from here (`__all__`).
from __future__ import annotations

from . import ast
from .checker import (calls, expressions, functions, math_rules, program_rules, reduce_rules,  # noqa: F401
                      statements, tile_rules)
from .checker.checked import CheckedKernel, Inlined, Symbol
from .checker.config import autotune_space, configurations, launch_rules, resolve_config
from .checker.core import BUILTIN_RULES, EXPRESSIONS, STATEMENTS, Checker
from ..configuration import config_text
from ..errors import ErrorList, Note, PhobosError, SemanticError

__all__ = ["BUILTIN_RULES", "EXPRESSIONS", "STATEMENTS", "CheckedKernel", "Checker", "Inlined", "Symbol",
           "autotune_space", "check_kernel", "check_program", "configurations", "launch_rules", "resolve_config"]


def check_kernel(kernel: ast.Kernel, config: dict[str, int] | None = None) -> CheckedKernel:
    """Check one kernel under one configuration (None: the first value of each parameter)."""
    resolved = resolve_config(kernel, config)
    return Checker(kernel, resolved).check()


def check_program(program: ast.Program) -> list[PhobosError]:
    """Every error in a file, under every configuration of every kernel, without duplicates.

    An error that only some configurations of its kernel have carries a note
    naming them: the source alone does not show why it is wrong."""
    errors: list[PhobosError] = []
    seen: set[tuple] = set()
    names: dict[str, ast.Kernel] = {}

    def add(err: PhobosError) -> None:
        key = (err.loc, err.message)
        if key not in seen:
            seen.add(key)
            errors.append(err)

    if not program.kernels:
        add(SemanticError("the file defines no kernel", program.loc))
    for k in program.kernels:
        if k.name in names:
            add(SemanticError(f"kernel '{k.name}' is defined twice", k.loc,
                              [Note("previous definition is here", names[k.name].loc)]))
        names[k.name] = k
        try:
            configs = configurations(k)
        except SemanticError as err:
            add(err)
            continue
        except ErrorList as errs:
            for err in errs.errors:
                add(err)
            continue
        for err in _errors_by_configuration(k, configs):
            add(err)
    return errors


def _errors_by_configuration(kernel: ast.Kernel, configs: list[dict[str, int]]) -> list[PhobosError]:
    """The errors of `kernel` under all of `configs`, each once, noting the configurations
    it is limited to when it is not found under all of them."""
    found: dict[tuple, tuple[PhobosError, list[dict[str, int]]]] = {}
    for config in configs:
        try:
            Checker(kernel, config).check()
        except PhobosError as err:
            for one in err.errors if isinstance(err, ErrorList) else [err]:
                found.setdefault((one.loc, one.message), (one, []))[1].append(config)
    out = []
    for err, failing in found.values():
        if len(failing) < len(configs):
            err.notes.append(Note(_configurations_note(failing, len(configs))))
        out.append(err)
    return out


def _configurations_note(failing: list[dict[str, int]], total: int, shown: int = 3) -> str:
    texts = [config_text(config) for config in failing]
    if len(texts) == 1:
        return f"only in the autotune configuration {texts[0]}"
    more = f" and {len(texts) - shown} more" if len(texts) > shown else ""
    return f"only in {len(texts)} of {total} autotune configurations: {'; '.join(texts[:shown])}{more}"
