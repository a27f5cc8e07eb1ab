# Test machinery shared by the whole suite.
#
# - Tests marked `gpu` are skipped, with the reason, where kernels cannot be
#   launched (no PyCUDA, no driver, no GPU): `phobos.run.runtime.gpu_available`.
#   Tests marked `huge` (tens of GB of GPU memory, each in a child process)
#   run after all the others.
# - The `golden` fixture compares a text with a file under tests/golden/;
#   `pytest --update-golden` (re)writes those files instead.
# - The `no_ptxas` fixture hides every ptxas on the machine from
#   phobos.toolchain, for testing what users without one see.
# - Every test gets an empty PHOBOS_CACHE_DIR of its own and none of the
#   environment switches of the launcher (PHOBOS_AUTOTUNE, PHOBOS_MODE,
#   PHOBOS_INTERPRET, PHOBOS_LOG, PHOBOS_PTXAS_TIMEOUT, PHOBOS_FULL_TRACEBACKS), so no test reads or
#   fills the user's cache or depends on how the shell that runs it is set up;
#   kernels compile in the test's process (PHOBOS_COMPILE_WORKERS=1).
from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from phobos.run import runtime
from phobos import toolchain

pytest_plugins = ["pytester"]

GOLDEN_DIR = Path(__file__).parent / "golden"
HANDWRITTEN_PTX_DIR = Path(__file__).parent.parent / "handwritten_ptx"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite the golden files under tests/golden with the current output",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("huge") is not None)  # stable: the huge ones last
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    available, reason = runtime.gpu_available()
    if not available:
        skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
        for item in gpu_tests:
            item.add_marker(skip)


class Golden:
    """Compares texts with the golden files in one directory, or rewrites them."""

    def __init__(self, directory: Path, update: bool):
        self.directory = directory
        self.update = update

    def check(self, name: str, text: str) -> None:
        """Fail with a unified diff unless `text` equals the golden file `name`."""
        path = self.directory / name
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
            return
        if not path.exists():
            pytest.fail(f"no golden file {path}; run `pytest --update-golden` to create it", pytrace=False)
        expected = path.read_text()
        if text != expected:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    fromfile=f"{path} (golden)",
                    tofile=f"{name} (actual)",
                )
            )
            pytest.fail(
                f"{name} differs from its golden file:\n{diff}\n"
                "If the change is intended, run `pytest --update-golden` to re-bless the golden files.",
                pytrace=False,
            )


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty PHOBOS_CACHE_DIR; PHOBOS_AUTOTUNE, PHOBOS_MODE, PHOBOS_INTERPRET, PHOBOS_LOG,
    PHOBOS_PTXAS_TIMEOUT and PHOBOS_FULL_TRACEBACKS unset; configurations compiled in the test's own process (PHOBOS_COMPILE_WORKERS=1:
    tests of the pool set it)."""
    directory = tmp_path_factory.mktemp("phobos-cache")
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(directory))
    monkeypatch.setenv("PHOBOS_COMPILE_WORKERS", "1")
    for name in ("PHOBOS_AUTOTUNE", "PHOBOS_MODE", "PHOBOS_INTERPRET", "PHOBOS_LOG", "PHOBOS_PTXAS_TIMEOUT",
                 "PHOBOS_FULL_TRACEBACKS"):
        monkeypatch.delenv(name, raising=False)
    return directory


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """`golden.check(name, text)`: compare `text` with tests/golden/<name>."""
    return Golden(GOLDEN_DIR, request.config.getoption("--update-golden"))


@pytest.fixture
def add_ptx_path() -> Path:
    """The hand-written vector add kernel, handwritten_ptx/add.ptx."""
    return HANDWRITTEN_PTX_DIR / "add.ptx"


@pytest.fixture
def fresh_ptxas_lookup():
    """Forget cached ptxas lookups before and after the test."""
    toolchain._locate_ptxas.cache_clear()
    yield
    toolchain._locate_ptxas.cache_clear()


@pytest.fixture
def no_ptxas(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_ptxas_lookup) -> None:
    """A machine with no ptxas: empty PATH, no CUDA_HOME, no toolkit, no wheel."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.delenv("PHOBOS_PTXAS", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_BIN_DIRS", (empty,))
    monkeypatch.setattr(toolchain, "_wheel_ptxas_candidates", lambda: [])
