# Running a test's work in a child process, so that a crash cannot end the
# test run, and saying what happened when it does.
#
# Work on tensors of many GB can take the whole process down without a word:
# the kernel's out-of-memory killer sends SIGKILL (no traceback, no "Fatal
# Python error"), a GPU fault kills the CUDA context for every later test.
# `run_child(script)` runs a Python script in a fresh interpreter (this
# checkout's phobos first on the path, the test's environment otherwise) and
# returns a ChildRun: its exit status (a negative one is the signal that
# ended it, by name), the tails of its output, the peak resident memory of
# the largest child so far (resource.getrusage(RUSAGE_CHILDREN)) and the
# tail of the kernel log where it can be read (`dmesg`: an OOM kill shows
# there).  `report` puts all of that in one text for an assertion message.
#
# A script says what it found on a line `FACTS {json}`; `facts()` reads the
# last one.  Scripts compare huge tensors themselves and print numbers: a
# failed `assert (c == a + b).all()` on a tensor of 2^31 elements makes
# pytest's explanation iterate it (torch's __iter__ unbinds it into 2^31
# Python objects, about 640 bytes each): terabytes of host memory.
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parent.parent

#: How much of each output stream a report shows.
TAIL_CHARS = 4000


@dataclass
class ChildRun:
    returncode: int | None  # None: still running at the timeout (then killed)
    stdout: str
    stderr: str
    peak_rss_kib: int
    kernel_log: str

    def facts(self) -> dict:
        """The last `FACTS {json}` line the script printed ({} when none)."""
        lines = [line for line in self.stdout.splitlines() if line.startswith("FACTS ")]
        return json.loads(lines[-1].removeprefix("FACTS ")) if lines else {}

    @property
    def status(self) -> str:
        if self.returncode is None:
            return "timed out (killed)"
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed by {name}" + (" (the out-of-memory killer sends it)" if name == "SIGKILL" else "")
        return f"exit status {self.returncode}"

    @property
    def report(self) -> str:
        return (f"child process: {self.status}; peak RSS of the largest child so far "
                f"{self.peak_rss_kib / 2**20:.2f} GiB\n"
                f"--- stdout (tail)\n{self.stdout[-TAIL_CHARS:]}\n--- stderr (tail)\n{self.stderr[-TAIL_CHARS:]}\n"
                f"--- kernel log (tail)\n{self.kernel_log}")


def run_child(script: str, timeout: float = 900) -> ChildRun:
    """Run `script` (dedented) in a fresh Python process from the repository root; never raises for its end."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONFAULTHANDLER": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=timeout)
        returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        returncode = None
        stdout, stderr = (_text(expired.stdout), _text(expired.stderr))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    return ChildRun(returncode, stdout, stderr, peak, kernel_log_tail())


def _text(output: bytes | str | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def kernel_log_tail(lines: int = 20) -> str:
    """The last lines of the kernel log, or why they cannot be read."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"(dmesg cannot be run: {error})"
    if done.returncode != 0:
        return f"(dmesg is not readable here: {done.stderr.strip() or done.returncode})"
    return "\n".join(done.stdout.splitlines()[-lines:])
