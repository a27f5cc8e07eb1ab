# A corpus of Triton kernels for the PTX emulator: Triton's tutorials (tutorials.py) and kernels in the
# style of Triton's unit tests (core.py), each a case (cases.py) that builds its inputs, runs and
# compares with a numpy reference.  tests/test_triton_corpus.py runs them in the emulator on sm_80 and
# sm_90a; tools/triton_gpu_compare.py runs them on a GPU and in the emulator and compares the bits.
from . import core, tutorials  # noqa: F401  (they register their cases)
from .cases import ARCHES, CASES, Case, Run

__all__ = ["ARCHES", "CASES", "Case", "Run"]
