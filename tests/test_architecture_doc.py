# docs/architecture.md names files, functions and classes and quotes the
# compiler's output for examples/add.phobos; these tests keep it true to the
# code: every path it cites exists, every dotted name (`Checker.const_int`,
# `lower.core.HANDLERS`) and every other name in backquotes is defined in the
# package, and the dumps and PTX it quotes are what the compiler gives today.
from __future__ import annotations

import ast
import builtins
import importlib
import keyword
import pkgutil
import re
from pathlib import Path

import pytest

import phobos
from phobos.compiler import Dumps, compile as compile_source

ROOT = Path(__file__).parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()
SPANS = re.findall(r"`([^`\n]+)`", DOC)

# Dotted words in backquotes that are PTX, not Python (`bra.uni`, `cp.async`, `ld.global.nc.v4.f32`).
PTX_HEADS = {"add", "and", "bra", "cp", "cvt", "cvta", "fence", "ld", "mma", "mul", "setp", "st", "wgmma"}
# Words in backquotes that name no definition: the generic table of dispatch.py's example, the
# lexer's library, the parser's rule prefix.
NOT_DEFINITIONS = {"TABLE", "PLY", "p_"}


#: Libraries of optional extras that modules of the package import, and the extra that brings each.
OPTIONAL_LIBRARIES = {"dask": "distributed", "distributed": "distributed", "triton": "triton"}


def _modules() -> tuple[dict[str, object], dict[str, str]]:
    """The package's modules by name, and those that cannot be imported here for want of an optional
    extra, with the extra's library."""
    mods: dict[str, object] = {"phobos": phobos}
    missing: dict[str, str] = {}
    for info in pkgutil.walk_packages(phobos.__path__, "phobos."):
        try:
            mods[info.name] = importlib.import_module(info.name)
        except ModuleNotFoundError as error:
            library = (error.name or "").split(".")[0]
            if library not in OPTIONAL_LIBRARIES:
                raise
            missing[info.name] = library
    return mods, missing


def _names_in_sources() -> set[str]:
    """Every name the package defines or uses as a string: functions, classes, assignments,
    parameters, attributes, keywords, and the words of its string constants (IR opcodes, token
    types, environment variables) other than docstrings."""
    names: set[str] = set()
    for path in (ROOT / "phobos").rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.value) for node in ast.walk(tree)
                      if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                names.update(re.findall(r"[A-Za-z_]\w*", node.value))
    return names


def _cited_paths() -> set[str]:
    paths = set()
    for span in SPANS:
        paths.update(re.findall(r"[\w./]*\w\.(?:py|md|ptx|phobos)\b", span))
        paths.update(re.findall(r"^[\w/]+/$", span))
    paths.update(p.rstrip(".") for p in re.findall(r"(?<![\w/`])((?:phobos|docs|tests|examples)/[\w./]*\w/?)", DOC))
    return paths


@pytest.mark.parametrize("path", sorted(_cited_paths()))
def test_cited_paths_exist(path):
    stem = path.rstrip("/")
    candidates = [ROOT / stem, ROOT / "phobos" / stem, ROOT / "tests" / stem]
    assert any(c.exists() for c in candidates) or any(ROOT.glob(f"phobos/**/{stem}")), \
        f"docs/architecture.md cites {path}, which does not exist"


def _resolves(dotted: str, mods: dict[str, object]) -> bool:
    """`a.b.c`: a module path suffix followed by attributes, or a name some module defines followed by
    attributes (a dataclass field counts)."""
    parts = dotted.split(".")
    starts = []
    for name, module in mods.items():
        segments = name.split(".")
        starts += [(module, k) for k in range(1, len(parts) + 1) if segments[-k:] == parts[:k]]
        if parts[0] in vars(module):
            starts.append((vars(module)[parts[0]], 1))
    for obj, used in starts:
        for attr in parts[used:]:
            fields = getattr(obj, "__dataclass_fields__", {})
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
            elif attr in fields:
                obj = None
            else:
                break
        else:
            return True
    return False


def test_dotted_names_resolve():
    mods, missing = _modules()
    dotted = {tok for span in SPANS for tok in re.findall(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", span)
              if not re.search(r"\.(?:py|md|ptx|phobos)$", tok)}
    unresolved = [tok for tok in sorted(dotted) if tok.split(".")[0] not in PTX_HEADS | NOT_DEFINITIONS
                  and not _resolves(tok, mods)]
    if unresolved and missing:
        extras = sorted({OPTIONAL_LIBRARIES[library] for library in missing.values()})
        pytest.skip(f"{', '.join(unresolved)} may be defined in {', '.join(sorted(missing))}, which cannot be "
                    f"imported without the {' and '.join(extras)} extra: pip install 'phobos-tile[test]'")
    assert not unresolved, f"names in docs/architecture.md that the package does not define: {unresolved}"


def test_plain_names_are_defined():
    known = _names_in_sources() | NOT_DEFINITIONS | set(dir(builtins)) | set(keyword.kwlist)
    words = {w for span in SPANS if not re.search(r"[/]|\.(?:py|md|ptx|phobos)\b", span)
             for w in re.findall(r"(?<![.%\w])[A-Za-z_]\w*(?![.\w])", span)}
    # Words with an underscore or a capital inside are code names; plain lower-case words may be
    # prose or PTX inside a span.
    code_like = {w for w in words if "_" in w.strip("_") or re.search(r"[a-z][A-Z]|^[A-Z]\w*[a-z]", w)}
    missing = sorted(w for w in code_like if w not in known)
    assert not missing, f"names in docs/architecture.md that the package does not define: {missing}"


def _fenced_after(marker: str) -> list[str]:
    """The lines of the first fenced block after `marker`."""
    rest = DOC[DOC.index(marker):]
    return [line for line in rest.split("```")[1].split("\n") if line.strip()]


def test_quoted_dumps_are_the_compilers():
    source = (ROOT / "examples" / "add.phobos").read_text()
    dumps = Dumps(ast=True, ir=True, thread_ir=True)
    compiled = compile_source(source, filename="examples/add.phobos", dumps=dumps)
    # --dump-ir prints the schedules of pipelined loops between the two levels of IR
    ast_text, tile_ir, *_schedules, thread_ir = (set(line.strip() for line in text.split("\n")) for text in dumps.texts)
    quoted_ast = [line.strip() for line in _fenced_after("`--dump-ast` shows them")]
    assert set(quoted_ast) <= ast_text, set(quoted_ast) - ast_text
    quoted_ir = [line.strip() for line in _fenced_after("`--dump-ir`:")]
    assert set(quoted_ir) <= tile_ir, set(quoted_ir) - tile_ir
    for fragment in re.findall(r"`(%\d+: [^`]+|if\(%\d+\)|ld_global\(%\d+\) \{[^`]+\})`", DOC):
        assert fragment in "\n".join(thread_ir), fragment
    # The PTX quoted is a subsequence of the PTX compiled ('...' lines stand for what is left out).
    ptx = compiled.ptx.split("\n")
    at = 0
    for line in _fenced_after("the slice's part is:"):
        if line.strip().startswith("..."):
            continue
        while at < len(ptx) and ptx[at] != line:
            at += 1
        assert at < len(ptx), f"the PTX of add does not have, in this order: {line!r}"
        at += 1
