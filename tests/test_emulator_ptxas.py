# The hand-written and nvcc-generated PTX the emulator tests run must be legal
# PTX: ptxas assembles every file of tests/data/emulator.
import pytest

from .emulator_support import DATA, PTXAS, ptxas_errors

FILES = sorted(p.name for p in DATA.glob("*.ptx"))


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not installed")
@pytest.mark.parametrize("name", FILES)
def test_test_kernels_assemble(name):
    assert ptxas_errors((DATA / name).read_text()) is None


def test_there_are_test_kernels():
    assert {"vadd.ptx", "control.ptx", "shared.ptx", "memory.ptx", "warp.ptx"} <= set(FILES)
