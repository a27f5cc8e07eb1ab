# The golden-file fixture itself, run in a scratch pytest session with this
# suite's conftest: a match passes, a mismatch fails with a diff and the
# re-bless hint, --update-golden writes the files.
from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")

GOLDEN_TEST = """
def test_kernel_text(golden):
    golden.check("kernel.sm_90.ptx", "ld.global.f32 %f0, [%rd0];\\nadd.f32 %f2, %f0, %f1;\\nret;\\n")
"""


@pytest.fixture
def scratch(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_uses_golden=GOLDEN_TEST)
    # Hypothesis is not needed there, and re-importing it for every scratch
    # session takes seconds.
    pytester.makeini("[pytest]\naddopts = -p no:hypothesispytest\n")
    return pytester


def golden_file(pytester: pytest.Pytester) -> Path:
    return pytester.path / "golden" / "kernel.sm_90.ptx"


def test_missing_golden_file_fails_and_says_how_to_create_it(scratch):
    result = scratch.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no golden file*kernel.sm_90.ptx; run `pytest --update-golden` to create it*"])


def test_update_golden_writes_the_file_and_then_it_matches(scratch):
    scratch.runpytest("--update-golden").assert_outcomes(passed=1)
    assert golden_file(scratch).read_text() == "ld.global.f32 %f0, [%rd0];\nadd.f32 %f2, %f0, %f1;\nret;\n"
    scratch.runpytest().assert_outcomes(passed=1)


def test_mismatch_fails_with_a_unified_diff_and_the_rebless_hint(scratch):
    golden_file(scratch).parent.mkdir()
    golden_file(scratch).write_text("ld.global.f32 %f0, [%rd0];\nsub.f32 %f2, %f0, %f1;\nret;\n")
    result = scratch.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*kernel.sm_90.ptx differs from its golden file:*",
            "*kernel.sm_90.ptx (golden)",
            "*kernel.sm_90.ptx (actual)",
            "*-sub.f32 %f2, %f0, %f1;",
            "*+add.f32 %f2, %f0, %f1;",
            "*run `pytest --update-golden` to re-bless the golden files.*",
        ]
    )
    scratch.runpytest("--update-golden").assert_outcomes(passed=1)
    scratch.runpytest().assert_outcomes(passed=1)
