# The configurations a kernel is checked under: its autotune space, the
# configurations compiled before any call, and the one a caller asks for.
#
# `@autotune(NAME in [v1, v2, ...])` lists i32 constants; the knobs among them
# (WARPS, STAGES, GROUP_M: configuration.py) must take values that steer code
# generation sensibly, reported at the value in the decorator.  @derive,
# @require and @key are launch_rules.py's; `launch_rules` joins them to the
# space.  The checker binds each configuration's values as constants
# (core.Checker.check), since tile shapes depend on them; `declaration` is
# where an error about one of them points.
from __future__ import annotations

from ...configuration import KNOBS, knob_problem
from ...constants import fits, range_text
from ...errors import Loc, SemanticError
from ...types import DType
from .. import ast
from ..ast import start_loc
from ..launch_rules import RULE_DECORATORS, LaunchRules, rules_of


def autotune_space(kernel: ast.Kernel) -> dict[str, list[int]]:
    """The autotune parameters of a kernel and their values, in source order."""
    space: dict[str, list[int]] = {}
    for deco in kernel.decorators:
        if deco.name in RULE_DECORATORS:
            continue  # launch_rules reads these
        if deco.name != "autotune":
            raise SemanticError(f"unknown decorator '@{deco.name}'; the decorators are @autotune, "
                                f"{', '.join('@' + name for name in RULE_DECORATORS)}", deco.loc)
        if deco.args:
            raise SemanticError("@autotune lists values as NAME in [v1, v2, ...]; conditions go in "
                                "@require(...), derived constants in @derive(NAME = ...)", start_loc(deco.args[0]))
        if not deco.params:
            raise SemanticError("@autotune needs at least one parameter, e.g. @autotune(BLOCK in [256])",
                                deco.loc)
        for p in deco.params:
            if p.name in space:
                raise SemanticError(f"autotune parameter '{p.name}' is listed twice", p.loc)
            values = []
            for v in p.values:
                value = _literal_int(v)
                if value is None:
                    raise SemanticError(f"autotune values must be integer literals, e.g. {p.name} in [64, 128]",
                                        v.loc)
                if not fits(value, DType.I32):
                    raise SemanticError(f"autotune parameters are i32 constants: {value} does not fit in i32 "
                                        f"({range_text(DType.I32)})", start_loc(v))
                problem = knob_problem(p.name, value)
                if problem is not None:
                    raise SemanticError(problem, start_loc(v))
                values.append(value)
            if len(set(values)) != len(values):
                raise SemanticError(f"autotune parameter '{p.name}' lists a value twice", p.loc)
            space[p.name] = values
    return space


def _literal_int(e: ast.Expr) -> int | None:
    if isinstance(e, ast.IntLit):
        return e.value
    if isinstance(e, ast.Unary) and e.op == "-" and isinstance(e.operand, ast.IntLit):
        return -e.operand.value
    return None


def launch_rules(kernel: ast.Kernel) -> LaunchRules:
    """The kernel's autotune space with its @derive, @require and @key, checked."""
    return rules_of(kernel, autotune_space(kernel))


def configurations(kernel: ast.Kernel) -> list[dict[str, int]]:
    """The configurations a kernel is checked and compiled under before any call: the cartesian
    product of the autotune values (less those no sizes can serve), with any derived constants
    at sample sizes (LaunchRules.representative)."""
    return launch_rules(kernel).representative()


def resolve_config(kernel: ast.Kernel, config: dict[str, int] | None) -> dict[str, int]:
    """The configuration to compile: given values, the first listed value for the rest; derived
    constants not given take their values at the first sample sizes the conditions allow.  A knob
    (configuration.KNOBS) may be given where @autotune does not list it, as Triton's num_warps and
    num_stages may always be."""
    rules = launch_rules(kernel)
    space = rules.space
    config = dict(config or {})
    for name, value in config.items():
        if name not in space and name not in rules.derived_names and name not in KNOBS:
            known = ", ".join([*space, *rules.derived_names]) or "none"
            what = "autotune parameter or derived constant" if rules.derived else "autotune parameter"
            raise SemanticError(f"kernel '{kernel.name}' has no {what} '{name}' (it has: {known})", kernel.loc)
        if not isinstance(value, int) or isinstance(value, bool):
            raise SemanticError(f"autotune parameter '{name}' must be an integer, got {value!r}", kernel.loc)
        declared = declaration(kernel, name)
        if not fits(value, DType.I32):
            raise SemanticError(f"autotune parameter '{name}' is an i32 constant: {value} does not fit in i32 "
                                f"({range_text(DType.I32)})", declared)
        problem = knob_problem(name, value)
        if problem is not None:
            raise SemanticError(problem, declared)
    resolved = {name: config.get(name, values[0]) for name, values in space.items()}
    resolved.update((name, value) for name, value in config.items() if name in KNOBS and name not in space)
    missing = [d for d in rules.derived if d.name not in config]
    if missing:
        fixed = {name: resolved[name] for name in space}
        sample = next(iter(rules.representative(fixed)), None)
        if sample is None:
            problem = rules.sample_problem(fixed)
            why = f"but no sample sizes give it a value ({problem})" if problem else \
                "and no sample sizes meet its conditions"
            raise SemanticError(f"kernel '{kernel.name}' derives {missing[0].name} from its sizes, {why}: "
                                f"give its value (config={{'{missing[0].name}': ...}})", missing[0].loc)
        config = {**sample, **config}
    return {**resolved, **{name: config[name] for name in rules.derived_names}}


def declaration(kernel: ast.Kernel, name: str) -> Loc:
    """Where an autotune parameter (`NAME in [...]`) or a derived constant (`NAME = ...`) is declared (the
    kernel, for a knob its decorators do not list)."""
    return next((item.loc for d in kernel.decorators for item in [*d.params, *d.args]
                 if getattr(item, "name", None) == name), kernel.loc)
