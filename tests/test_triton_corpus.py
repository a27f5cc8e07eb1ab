# The Triton corpus (tests/triton_corpus) in the emulator: every case on sm_80 and sm_90a, race checks
# on, compared with its numpy reference.  Cases that fail today for a reason outside the corpus (an
# instruction the emulator does not implement, a false alarm of a detector) are strict xfails pinned to
# the error they raise, so that they show up when that changes; those failing for a false alarm of a race
# detector must be right with the detectors off.  Skipped, with the reason, without Triton.
from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="the Triton corpus needs Triton (pip install 'phobos-tile[triton]')")

import phobos.triton  # noqa: E402
from phobos.run.emulator import AsyncCopyHazard, SharedMemoryRace  # noqa: E402

from .triton_corpus import ARCHES, CASES  # noqa: E402


def _params():
    for name, case in CASES.items():
        for arch in ARCHES:
            marks = [pytest.mark.slow] if case.heavy else []
            if case.missing():
                marks.append(pytest.mark.skip(reason=f"needs {', '.join(case.missing())}"))
            elif arch in case.skip:
                marks.append(pytest.mark.skip(reason=case.skip[arch]))
            elif arch in case.xfail:
                raises, reason = case.xfail[arch]
                marks.append(pytest.mark.xfail(raises=raises, strict=True, reason=reason))
            yield pytest.param(name, arch, marks=marks, id=f"{name}-{arch}")


def _run_and_check(name: str, arch: str, check_races: bool) -> None:
    run = CASES[name].make(arch)
    for launch in run.launches():
        kernel = phobos.triton.emulate(launch.kernel, arch=arch, check_races=check_races)
        kernel[launch.grid](*launch.args, **launch.kwargs)
    assert run.check() == []


@pytest.mark.parametrize("name, arch", list(_params()))
def test_corpus_case(name, arch):
    _run_and_check(name, arch, check_races=True)


#: The errors of the race detectors, which check_races=False turns off.
DETECTORS = (SharedMemoryRace, AsyncCopyHazard)


def _false_alarms():
    for name, case in CASES.items():
        for arch, (raises, reason) in case.xfail.items():
            if raises in DETECTORS and not case.missing():
                yield pytest.param(name, arch, marks=[pytest.mark.slow] if case.heavy else [], id=f"{name}-{arch}")


@pytest.mark.parametrize("name, arch", list(_false_alarms()))
def test_cases_failing_for_a_false_alarm_are_right_without_the_detectors(name, arch):
    _run_and_check(name, arch, check_races=False)
