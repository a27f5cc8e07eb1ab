# The child-process runner of the huge GPU tests (tests/child_process.py): what
# a child found, and how it ended when it did not end well, reach the report.
from __future__ import annotations

from .child_process import run_child


def test_facts_are_the_last_facts_line():
    run = run_child("""
        print("FACTS {\\"n\\": 1}")
        print("FACTS {\\"n\\": 2, \\"ok\\": true}")
    """)
    assert run.returncode == 0 and run.facts() == {"n": 2, "ok": True}
    assert run.status == "exit status 0" and "peak RSS of the largest child so far" in run.report


def test_a_child_killed_by_a_signal_is_reported_by_the_signals_name():
    run = run_child("""
        import os, signal
        print("before", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert run.returncode < 0 and run.facts() == {}
    assert "killed by SIGKILL (the out-of-memory killer sends it)" in run.report
    assert "before" in run.report and "--- kernel log (tail)" in run.report


def test_a_child_that_runs_too_long_is_stopped_and_says_so():
    run = run_child("import time; print('started', flush=True); time.sleep(60)", timeout=2)
    assert run.returncode is None and run.status == "timed out (killed)"


def test_the_child_imports_this_checkout():
    run = run_child("import phobos, json; print('FACTS ' + json.dumps({'file': phobos.__file__}))")
    from pathlib import Path
    assert Path(run.facts()["file"]).resolve().parent == (Path(__file__).parent.parent / "phobos").resolve()
