# The package's modules import one another without a circle, so each stage
# can be read, loaded and tested before the ones that use it (the layering
# docs/architecture.md describes).  The imports are read from the source, not
# from a run: every `import` and `from ... import` wherever it stands - at the
# top, inside a function (a lazy import hides a circle from a test that only
# imports the package) or under `if TYPE_CHECKING:` - and every
# `importlib.import_module`: a literal name is an import of that module, and a
# module that imports by a computed name (the package root's lazy exports,
# the backends' CPU modes) imports every module a string literal in it names.
# A module's parent packages are not counted: Python initialises them before
# the module, whatever it imports.
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "phobos"


def _module_names() -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the package (a package: its __init__.py)."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


MODULES = _module_names()


def _package_of(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _known(name: str) -> str | None:
    """The module `name` is, or the innermost package module above it (None outside the package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _from_import(module: str, node: ast.ImportFrom) -> set[str]:
    """The modules a `from X import a, b` in `module` imports: X.a where it is a module, else X."""
    if node.level:
        base = _package_of(module).split(".")
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    targets = {_known(f"{source}.{alias.name}") if f"{source}.{alias.name}" in MODULES else _known(source)
               for alias in node.names}
    return targets - {None}


def _is_import_module(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
        or isinstance(node.func, ast.Name) and node.func.id == "import_module")


def _named_modules(module: str, tree: ast.AST) -> set[str]:
    """The modules the string literals of `module` name, absolutely or relative to its package."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for candidate in (node.value, f"{_package_of(module)}.{node.value.lstrip('.')}"):
                if candidate in MODULES and candidate != module:
                    names.add(candidate)
    return names


def imports_of(module: str) -> tuple[set[str], bool]:
    """The package modules `module` imports, and whether it also imports by a computed name."""
    tree = ast.parse(MODULES[module].read_text())
    found: set[str] = set()
    computed = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {_known(alias.name) for alias in node.names} - {None}
        elif isinstance(node, ast.ImportFrom):
            found |= _from_import(module, node)
        elif _is_import_module(node) and node.args:
            name = node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                target = name.value if not name.value.startswith(".") else f"{_package_of(module)}{name.value}"
                found |= {_known(target)} - {None}
            else:
                computed = True
    if computed:
        found |= _named_modules(module, tree)
    return found - {module}, computed


def import_graph() -> dict[str, set[str]]:
    return {module: imports_of(module)[0] for module in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _path_within(graph: dict[str, set[str]], component: list[str]) -> str:
    """One circle through a component, as `a -> b -> a`, for the failure message."""
    members = set(component)
    start = component[0]
    path, node = [start], start
    while True:
        node = sorted(graph[node] & members)[0]
        if node in path:
            return " -> ".join(path[path.index(node):] + [node])
        path.append(node)


def test_no_module_imports_itself_back_through_others():
    graph = import_graph()
    circles = [_path_within(graph, component) for component in cycles(graph)]
    assert not circles, "import circles among phobos modules:\n" + "\n".join(circles)


def test_the_walk_sees_lazy_dynamic_and_type_checking_imports():
    runtime, _ = imports_of("phobos.run.runtime")
    assert {"phobos.run.cuda", "phobos.run.tensor_map", "phobos.errors"} <= runtime
    backends, computed = imports_of("phobos.run.backends")
    assert computed and {"phobos.run.interpreter", "phobos.run.emulator"} <= backends  # by name, per mode
    assert "phobos.frontend.sema" in backends  # under `if TYPE_CHECKING:`
    root, computed = imports_of("phobos")
    assert computed and {"phobos.compiler", "phobos.launch.launcher", "phobos.version"} <= root
    assert "phobos.frontend.ast" in imports_of("phobos.frontend.checker.core")[0]  # `from .. import ast`


@pytest.mark.parametrize("edges,circle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set(), "c": {"a", "b"}}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
])
def test_cycles_finds_every_circle_and_nothing_else(edges, circle):
    assert sorted(cycles(edges)) == circle
