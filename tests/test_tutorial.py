# docs/tutorial.md stays true: its Python blocks run, in order and in one namespace, on the CPU
# (PHOBOS_MODE=interpret; blocks that name mode="emulate" run the PTX in the emulator), and each
# prints what the `output` block after it shows; its `console` blocks run their `$` commands and
# print what follows them.  Both run in a directory of their own, where `examples/` is the
# repository's (the files the tutorial writes land there).  A line `...` in an expected output
# stands for any number of lines, a line ending in ` ...` for any line that starts as it does.
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    """(kind, text) of every fenced block of the tutorial, in order."""
    return [(match[1], match[2]) for match in BLOCK.finditer(TUTORIAL.read_text())]


def matches(expected: str, actual: str) -> bool:
    """Whether `actual` is `expected` line for line, a line `...` in `expected` standing for any lines and a
    line ending in ` ...` for any line that starts as it does."""
    pattern = "".join(r"(?:.*\n)*?" if line == "..." else re.escape(line[:-3]) + r".*\n" if line.endswith(" ...")
                      else re.escape(line) + r"\n" for line in expected.splitlines())
    return re.fullmatch(pattern, actual if actual.endswith("\n") or not actual else actual + "\n") is not None


def test_matching_of_outputs():
    assert matches("a\n...\nd\n", "a\nb\nc\nd\n") and matches("a\n...\n", "a\n") and not matches("a\nd\n", "a\nb\nd\n")
    assert matches("a: the ...\n", "a: the rest\n") and not matches("a: the ...\n", "b: the rest\n")


def test_the_tutorial_pairs_each_output_with_code():
    kinds = [kind for kind, _ in blocks()]
    assert kinds.count("python") >= 8 and "console" in kinds
    for before, kind in zip(kinds, kinds[1:]):
        assert kind != "output" or before == "python", "an output block follows a Python block"


@pytest.mark.slow
def test_the_tutorial_runs_on_the_cpu_as_shown(monkeypatch, tmp_path):
    pytest.importorskip("ml_dtypes", reason="the tutorial makes bfloat16 arrays with ml_dtypes: pip install "
                                            "'phobos-tile[test]'")
    monkeypatch.setenv("PHOBOS_MODE", "interpret")
    monkeypatch.setenv("PHOBOS_LOG", "warning")  # progress lines of the emulator's longer runs
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__tutorial__"}
    printed = None
    for number, (kind, text) in enumerate(blocks()):
        if kind == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(text, f"{TUTORIAL.name}, block {number}", "exec"), namespace)
            printed = out.getvalue()
        elif kind == "output":
            assert matches(text, printed), f"block {number} of the tutorial shows:\n{text}\nthe code printed:\n{printed}"
        elif kind == "console":
            run_console(text, number, tmp_path)


def run_console(text: str, number: int, tmp_path: Path) -> None:
    """Run each `$ command` of a console block and compare what it prints with the lines after it."""
    steps = re.split(r"^\$ ", text, flags=re.MULTILINE)[1:]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   "PHOBOS_CACHE_DIR": str(tmp_path / "cache")}
    for step in steps:
        command, _, expected = step.partition("\n")
        command = re.sub(r"^python3? ", f"{sys.executable} ", command)
        done = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, env=environment,
                              timeout=300)
        assert matches(expected, done.stdout + done.stderr), \
            f"block {number}: `{command}` shows:\n{expected}\nit printed:\n{done.stdout + done.stderr}"
