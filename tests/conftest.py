# Test machinery shared by the whole suite.
#
# - Tests marked `gpu` are skipped, with the reason, where kernels cannot be
#   launched (no PyCUDA, no driver, no GPU): `phobos.runtime.gpu_available`.
# - The `no_ptxas` fixture hides every ptxas on the machine from
#   phobos.toolchain, for testing what users without one see.
from __future__ import annotations

from pathlib import Path

import pytest

from phobos import runtime, toolchain

HANDWRITTEN_PTX_DIR = Path(__file__).parent.parent / "handwritten_ptx"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    available, reason = runtime.gpu_available()
    if not available:
        skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
        for item in gpu_tests:
            item.add_marker(skip)


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
