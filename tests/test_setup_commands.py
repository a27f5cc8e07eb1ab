# The set-up a newcomer follows is the one CI runs: .ci/run runs exactly README's install
# command and test command (the two `python3 -m` lines of the quick start that install and
# test), and nothing else; the extra they install brings what every test and example imports.
from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```\n(.*?)^```", section, re.MULTILINE | re.DOTALL)[1]
    return [line.strip() for line in block.splitlines() if line.strip()]


def ci_commands() -> list[str]:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line.strip() for line in lines
            if line.strip() and not line.startswith(("#", "set ", "cd ")) and not line.startswith("#!")]


def test_ci_runs_exactly_readmes_install_and_test_commands():
    readme = quick_start_commands()
    install = [c for c in readme if " pip install " in c]
    tests = [c for c in readme if c.startswith("python3 -m pytest")]
    assert len(install) == 1 and len(tests) == 1, readme
    assert ci_commands() == install + tests


def test_the_test_extra_brings_what_the_examples_and_the_dag_tests_need():
    """README's install gave a suite whose architecture test failed, and dag examples that stopped, without
    Dask."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    extras = setup["options.extras_require"]
    test = extras["test"]
    assert "ml_dtypes" in test
    (own,) = re.findall(r"phobos-tile\[([\w,]+)\]", test)
    assert {"ptxas", "distributed", "triton"} <= set(own.split(","))
    assert "dask[distributed]" in extras["distributed"]
    assert "triton==3.6.0" in extras["triton"]  # the version phobos.triton follows (its binder and launcher)
    assert '-e ".[test]"' in quick_start_commands()[0]
