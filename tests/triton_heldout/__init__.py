# Held-out Triton kernels for the PTX emulator (kernels.py): cases of the corpus's kind (tests/triton_corpus
# /cases.py), kept apart from it, run by tests/test_triton_heldout.py on sm_80 and sm_90a.
from .kernels import HELDOUT

__all__ = ["HELDOUT"]
