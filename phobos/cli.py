# What Phobos's commands (`python -m phobos`, `python -m phobos.ptxcheck`)
# share: the `--version` text, and running a command so that a reader that
# goes away early (`... | head`) ends it quietly instead of with a traceback.
from __future__ import annotations

import os
import sys
from collections.abc import Callable

from .version import __version__

VERSION_TEXT = f"Phobos {__version__}"


def run(command: Callable[[], int]) -> int:
    """`command()`'s exit status; 1, quietly, when stdout is a pipe whose reader has gone."""
    try:
        status = command()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
