# The errors a user meets: every class importable from `phobos` and listed in README.md; a
# traceback that ends at the user's call, not 7 to 20 frames inside Phobos (unless
# PHOBOS_FULL_TRACEBACKS=1); sources given as strings named `<string>`; a wrong element type
# answered with the conversion that fixes it.
from __future__ import annotations

import re
import traceback
from pathlib import Path

import numpy as np
import pytest

import phobos
from phobos import errors

README = (Path(__file__).parent.parent / "README.md").read_text()

ADD = """
@autotune(BLOCK in [256])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {
    let base = program_id(0) * BLOCK
    c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}
"""


@pytest.mark.parametrize("name", phobos.ERRORS)
def test_error_classes_are_importable_from_phobos_and_documented(name):
    error_class = getattr(phobos, name)
    assert error_class is getattr(errors, name) and issubclass(error_class, phobos.PhobosError)
    assert f"`{name}`" in README.split("## Errors")[1].split("\n## ")[0], f"README's Errors section misses {name}"
    assert name in phobos.__all__


def phobos_frames(info: pytest.ExceptionInfo) -> list[traceback.FrameSummary]:
    package = str(Path(phobos.__file__).parent)
    return [frame for frame in traceback.extract_tb(info.tb) if frame.filename.startswith(package)]


def test_a_bad_argument_is_raised_from_the_call():
    add = phobos.kernel(ADD, mode="interpret")
    with pytest.raises(phobos.LaunchError) as info:
        add(np.ones(10), np.ones(10, np.float32), np.ones(10, np.float32))
    (frame,) = phobos_frames(info)  # the call's own line, which says how to see the others
    assert "PHOBOS_FULL_TRACEBACKS=1" in frame.line


def test_a_source_error_is_raised_from_jit():
    with pytest.raises(phobos.SemanticError) as info:
        phobos.jit(ADD.replace("+ b[", "+ q["))
    assert len(phobos_frames(info)) == 1
    assert traceback.format_exception_only(info.value)[0].startswith("phobos.errors.SemanticError: <string")


def test_full_tracebacks_on_request(monkeypatch):
    monkeypatch.setenv("PHOBOS_FULL_TRACEBACKS", "1")
    with pytest.raises(phobos.SemanticError) as info:
        phobos.jit(ADD.replace("+ b[", "+ q["))
    assert len(phobos_frames(info)) > 5  # down to the checker's lookup


def test_sources_given_as_strings_are_named_string():
    first = errors.SourceFile.name_for(ADD)
    assert re.fullmatch(r"<string( \d+)?>", first)
    assert errors.SourceFile.name_for(ADD) == first
    other = errors.SourceFile.name_for(ADD + "\n")
    assert other != first and re.fullmatch(r"<string \d+>", other)
    with pytest.raises(phobos.SemanticError) as info:
        phobos.jit(ADD.replace("+ b[", "+ q["))
    text = str(info.value)
    assert re.match(r"<string( \d+)?>:5:43: 'q' is not defined\n", text), text
    assert text.splitlines()[1].strip() == "c[base :+ BLOCK] = a[base :+ BLOCK] + q[base :+ BLOCK]"


def test_each_string_source_quotes_its_own_lines():
    """Two sources of one process, each with its error at line 3, quote their own line 3."""
    first = "kernel k(x: tensor<f32>[N]) {\n    let a = 1\n    let b = y\n}\n"
    second = "kernel k(x: tensor<f32>[N]) {\n    let a = 2\n    let bb = zz\n}\n"
    for source, quoted in ((first, "let b = y"), (second, "let bb = zz")):
        with pytest.raises(phobos.SemanticError) as info:
            phobos.jit(source)
        assert str(info.value).splitlines()[1].strip() == quoted


def test_the_element_type_error_says_how_to_convert():
    add = phobos.kernel(ADD, mode="interpret")
    a = np.ones(8, np.float32)
    with pytest.raises(phobos.LaunchError, match=r"got float64 array of shape \(8,\); convert it: "
                                                 r"b = b\.astype\(np\.float32\)$"):
        add(a, np.ones(8), a.copy())


def test_the_element_type_error_speaks_torch_to_torch_tensors():
    torch = pytest.importorskip("torch", reason="needs torch: pip install 'phobos-tile[bench]'")
    add = phobos.kernel(ADD, mode="interpret")
    c = torch.zeros(8, dtype=torch.float64)
    with pytest.raises(phobos.LaunchError, match=r"convert it: c = c\.to\(torch\.float32\), and read the result "
                                                 r"from the new 'c'$"):
        add(np.ones(8, np.float32), np.ones(8, np.float32), c)
