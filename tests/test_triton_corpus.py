# The Triton corpus (tests/triton_corpus) in the emulator: every case on sm_80 and sm_90a, race checks
# on, compared with its numpy reference.  Cases that fail today for a reason outside the corpus (an
# instruction the emulator does not implement, a false alarm of a detector) are strict xfails pinned to
# the error they raise, so that they show up when that changes; those failing for a false alarm of a race
# detector must be right with the detectors off.  Skipped, with the reason, without Triton.
from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="the Triton corpus needs Triton (pip install 'phobos-tile[triton]')")

from phobos.run.emulator import AsyncCopyHazard, SharedMemoryRace  # noqa: E402

from .triton_corpus import CASES  # noqa: E402
from .triton_corpus.cases import false_alarm_params, params, run_and_check  # noqa: E402


@pytest.mark.parametrize("name, arch", list(params(CASES)))
def test_corpus_case(name, arch):
    run_and_check(CASES[name], arch, check_races=True)


#: The errors of the race detectors, which check_races=False turns off.
DETECTORS = (SharedMemoryRace, AsyncCopyHazard)


@pytest.mark.parametrize("name, arch", list(false_alarm_params(CASES, DETECTORS)))
def test_cases_failing_for_a_false_alarm_are_right_without_the_detectors(name, arch):
    run_and_check(CASES[name], arch, check_races=False)
