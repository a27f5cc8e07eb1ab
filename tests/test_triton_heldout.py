# The held-out Triton kernels (tests/triton_heldout) in the emulator, as tests/test_triton_corpus.py runs
# the corpus: every case on sm_80 and sm_90a, race checks on, compared with its numpy reference; a case
# failing for a reason outside it is a strict xfail pinned to its error.  Skipped, with the reason, without
# Triton.
from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="the held-out Triton kernels need Triton (pip install 'phobos-tile[triton]')")

from .triton_corpus.cases import params, run_and_check  # noqa: E402
from .triton_heldout import HELDOUT  # noqa: E402


@pytest.mark.parametrize("name, arch", list(params(HELDOUT)))
def test_heldout_case(name, arch):
    run_and_check(HELDOUT[name], arch, check_races=True)
