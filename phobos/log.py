# What Phobos tells its user besides errors: notices and progress lines.
#
# Everything goes through the standard `logging` module, under the logger
# "phobos" (modules log to children such as "phobos.launch.autotune"):
#
#   WARNING  something the user should know about where their code runs
#            (no GPU, so the CPU runs the kernels; the cache cannot be written)
#   INFO     progress of long runs: autotuning over many configurations,
#            compiling every configuration of a file, long emulator runs
#   DEBUG    reports on request: every configuration the autotuner tried,
#            with its time or the reason it was skipped
#
# PHOBOS_LOG=debug|info|warning|error sets the level of the "phobos" logger
# (default info).  Until the application configures logging itself (a handler
# on the root logger), records are written to stderr as `phobos: message` by
# a handler of Phobos's own; once it has, they only propagate to the
# application's handlers, so nothing is printed twice.
#
# `Progress` makes the progress lines of one long run: a first line once the
# run is known or seen to be long, then at most one line every few seconds,
# then the outcome; a run that turns out short says nothing at INFO.
from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable

ROOT = "phobos"
ENVIRONMENT_VARIABLE = "PHOBOS_LOG"
DEFAULT_LEVEL = "info"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

#: A run not known to be long gets its first progress line after this many seconds.
PROGRESS_DELAY = 2.0
#: Seconds between two progress lines of one run.
PROGRESS_INTERVAL = 5.0


class _StderrUnlessConfigured(logging.Handler):
    """Writes `phobos: message` to the current sys.stderr while the root logger has no handler."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return  # the application decides where records go
        try:
            sys.stderr.write(f"phobos: {record.getMessage()}\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001  (logging must never fail the caller)
            self.handleError(record)


def level_from_environment() -> int:
    """The level PHOBOS_LOG names (default info); an unknown name is reported and ignored."""
    text = os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower() or DEFAULT_LEVEL
    if text not in LEVELS:
        sys.stderr.write(f"phobos: {ENVIRONMENT_VARIABLE}={text} is not a level "
                         f"({', '.join(LEVELS)}); using {DEFAULT_LEVEL}\n")
        text = DEFAULT_LEVEL
    return LEVELS[text]


def configure() -> logging.Logger:
    """Give the "phobos" logger its stderr handler (once) and the level PHOBOS_LOG names."""
    logger = logging.getLogger(ROOT)
    if not any(isinstance(handler, _StderrUnlessConfigured) for handler in logger.handlers):
        logger.addHandler(_StderrUnlessConfigured())
    logger.setLevel(level_from_environment())
    return logger


class Progress:
    """The progress lines of one long run, logged at INFO: `tuning sgemm over 27 configurations...`.

    `what` names the run; `total`, when known, is the number of steps and
    `unit` what a step is.  The run is shown from its start when `total` is
    above `threshold`, otherwise once it has gone on for `delay` seconds
    (default PROGRESS_DELAY); `update(done)` then logs at most one line every
    `interval` seconds (default PROGRESS_INTERVAL), with the time left at the
    pace so far once some steps of a known total are done, and
    `finish(outcome)` the last one.  A run that was never shown logs its
    outcome at DEBUG only.
    """

    def __init__(self, logger: logging.Logger, what: str, total: int | None = None, unit: str = "steps", *,
                 threshold: int | None = None, delay: float | None = None, interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.what = what
        self.total = total
        self.unit = unit
        self.delay = PROGRESS_DELAY if delay is None else delay
        self.interval = PROGRESS_INTERVAL if interval is None else interval
        self.clock = clock
        self.start = clock()
        self.last_line: float | None = None
        if total is not None and threshold is not None and total > threshold:
            self._line(f"{what}...")

    @property
    def shown(self) -> bool:
        return self.last_line is not None

    def elapsed(self) -> float:
        return self.clock() - self.start

    def update(self, done: int, detail: str = "") -> None:
        """`done` steps are done; log a line if one is due (`detail` follows the count)."""
        now = self.clock()
        due = now - self.start >= self.delay if self.last_line is None else now - self.last_line >= self.interval
        if due:
            elapsed = now - self.start
            count = f"{done}/{self.total}" if self.total is not None else str(done)
            left = f", about {elapsed * (self.total - done) / done:.0f} s left" \
                if self.total is not None and 0 < done < self.total else ""
            self._line(f"{self.what}: {count} {self.unit}{', ' + detail if detail else ''}, {elapsed:.0f} s so far"
                       f"{left}")

    def finish(self, outcome: str) -> None:
        """The run is over: log `outcome` (at INFO if the run was shown, else at DEBUG)."""
        level = logging.INFO if self.shown else logging.DEBUG
        self.logger.log(level, "%s: %s (%.1f s)", self.what, outcome, self.elapsed())

    def _line(self, message: str) -> None:
        self.last_line = self.clock()
        self.logger.info("%s", message)
