# Notices and progress lines through the logger "phobos": the Progress rules
# with a fake clock, PHOBOS_LOG, the stderr handler that stands aside once an
# application configures logging, and the progress of long emulator runs.
from __future__ import annotations

import logging
import re
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from phobos import log
from phobos.log import Progress

ROOT = Path(__file__).parent.parent
LOGGER = logging.getLogger("phobos.test")


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def messages(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("phobos")]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_run_known_to_be_long_is_shown_from_its_start(caplog, clock):
    caplog.set_level(logging.DEBUG, logger="phobos")
    progress = Progress(LOGGER, "tuning k over 8 configurations", 8, "configurations", threshold=3,
                        delay=2, interval=5, clock=clock)
    assert messages(caplog) == [("INFO", "tuning k over 8 configurations...")]
    clock.now += 1
    progress.update(1)  # the start line was a second ago: not due
    clock.now += 4
    progress.update(3)
    clock.now += 1
    progress.update(4)
    progress.finish("best BLOCK=64")
    assert messages(caplog)[1:] == [("INFO", "tuning k over 8 configurations: 3/8 configurations, 5 s so far, "
                                             "about 8 s left"),
                                    ("INFO", "tuning k over 8 configurations: best BLOCK=64 (6.0 s)")]


def test_a_run_of_unknown_length_is_shown_once_it_has_lasted(caplog, clock):
    caplog.set_level(logging.INFO, logger="phobos")
    progress = Progress(LOGGER, "emulating k", unit="instruction steps", delay=2, interval=5, clock=clock)
    clock.now += 1.5
    progress.update(100)
    assert messages(caplog) == []
    clock.now += 0.5
    progress.update(150)
    clock.now += 3
    progress.update(300)  # 3 s after the last line: not due
    clock.now += 2
    progress.update(400)
    progress.finish("400 instruction steps")
    assert messages(caplog) == [("INFO", "emulating k: 150 instruction steps, 2 s so far"),
                                ("INFO", "emulating k: 400 instruction steps, 7 s so far"),
                                ("INFO", "emulating k: 400 instruction steps (7.0 s)")]


def test_a_short_run_says_its_outcome_at_debug_only(caplog, clock):
    caplog.set_level(logging.DEBUG, logger="phobos")
    progress = Progress(LOGGER, "tuning k over 2 configurations", 2, threshold=3, delay=2, clock=clock)
    progress.update(1)
    progress.update(2)
    progress.finish("best BLOCK=64")
    assert messages(caplog) == [("DEBUG", "tuning k over 2 configurations: best BLOCK=64 (0.0 s)")]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    environment.pop("PHOBOS_LOG", None)
    environment.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment)


NOTICES = """
import logging
logging.getLogger("phobos.example").info("a progress line")
logging.getLogger("phobos.example").debug("a report")
logging.getLogger("phobos.example").warning("a notice")
"""


@pytest.mark.parametrize("level, expected", [
    ("", ["phobos: a progress line", "phobos: a notice"]),
    ("debug", ["phobos: a progress line", "phobos: a report", "phobos: a notice"]),
    ("WARNING", ["phobos: a notice"]),
    ("error", []),
    ("loud", ["phobos: PHOBOS_LOG=loud is not a level (debug, info, warning, error); using info",
              "phobos: a progress line", "phobos: a notice"]),
])
def test_phobos_log_sets_the_level_of_what_goes_to_stderr(level, expected):
    done = run_python("import phobos\n" + NOTICES, PHOBOS_LOG=level)
    assert done.returncode == 0 and done.stdout == ""
    assert done.stderr.splitlines() == expected


def test_once_the_application_configures_logging_records_go_only_to_its_handlers():
    code = "import logging, sys, phobos\nlogging.basicConfig(stream=sys.stdout, format='%(name)s %(message)s')\n"
    done = run_python(code + NOTICES)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines() == ["phobos.example a progress line", "phobos.example a notice"]


def test_configure_adds_one_handler_however_often_it_runs():
    log.configure()
    log.configure()
    handlers = logging.getLogger("phobos").handlers
    assert sum(isinstance(h, log._StderrUnlessConfigured) for h in handlers) == 1


def test_a_long_emulator_run_logs_progress(caplog, monkeypatch):
    from phobos.run import emulator
    from phobos.run.emulator import machine

    caplog.set_level(logging.INFO, logger="phobos")
    monkeypatch.setattr(log, "PROGRESS_DELAY", 0.0)
    monkeypatch.setattr(log, "PROGRESS_INTERVAL", 0.0)
    monkeypatch.setattr(machine, "PROGRESS_STEPS", 2)
    ptx = """.version 8.0
.target sm_90
.address_size 64
.visible .entry spin(.param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    .reg .pred %p<2>;
    mov.u32 %r1, 0;
LOOP:
    add.u32 %r1, %r1, 1;
    setp.lt.u32 %p1, %r1, 5;
    @%p1 bra LOOP;
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1], %r1;
    ret;
}
"""
    out = np.zeros(1, np.uint32)
    stats = emulator.launch(ptx, "spin", 1, 1, [out])
    assert out[0] == 5
    lines = [m for level, m in messages(caplog)]
    assert lines[0] == "emulating spin (1 CTAs of 1 threads): 0/1 CTAs done, 2 instruction steps, 0 s so far"
    assert lines[-1].startswith(f"emulating spin (1 CTAs of 1 threads): {stats.steps} instruction steps (")
    assert len(lines) == 2 + (stats.steps - 2) // 2  # one line every 2 steps, then the outcome
    caplog.clear()
    emulator.launch(ptx, "spin", 4, 1, [out], max_threads=1, check_races=False)  # a CTA at a time: the time left
    lines = [m for level, m in messages(caplog)]
    assert lines[0].startswith("emulating spin (4 CTAs of 1 threads, 1 at a time): 0/4 CTAs done, ")
    assert any(re.fullmatch(r"emulating spin \(4 CTAs of 1 threads, 1 at a time\): 2/4 CTAs done, \d+ instruction "
                            r"steps, 0 s so far, about 0 s left", line) for line in lines), lines
