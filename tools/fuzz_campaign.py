# A long fuzzing campaign: the suite's fuzz and property tests, run with many
# more examples and fresh random seeds, round after round, until a time
# budget is spent or one fails.
#
#     python tools/fuzz_campaign.py [--minutes 60] [--scale 40] [--only front|edge|compile] [--gpu]
#
# The tests themselves are the ones CI runs with a few examples each:
#   front  tests/test_frontend_fuzz.py: random tokens, statements, mutated
#          examples, text and bytes through the parser and checker; nothing
#          but a located PhobosError may escape
#   edge   tests/test_edge_property.py: random valid kernels with slices far
#          outside their tensors, run by the interpreter and the PTX emulator
#          (bounds and race checks on), which must agree; and assembled by
#          ptxas.  --gpu adds the GPU against the interpreter.
#   compile tests/test_compile_fuzz.py: generated calls of every builtin on
#          operands of every dtype, and the edge kernels; every program the
#          checker accepts must compile for sm_75, sm_80 and sm_90a
# PHOBOS_FUZZ_SCALE (--scale) multiplies each test's number of examples.  A
# failure stops the campaign and prints Hypothesis's shrunk example - a
# kernel source with its configuration, grid and arguments for `edge` - which
# Hypothesis also keeps in .hypothesis/ so the next plain pytest run replays
# it.  A JSON summary (rounds, examples, seconds, outcome) goes to --json.
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SUITES = {
    "front": ["tests/test_frontend_fuzz.py"],
    "edge": ["tests/test_edge_property.py"],
    "compile": ["tests/test_compile_fuzz.py"],
}


def run_round(files: list[str], scale: int, seed: int, gpu: bool) -> tuple[int, float]:
    """One pytest run of `files` with PHOBOS_FUZZ_SCALE=scale and Hypothesis seed `seed`: (exit code, seconds)."""
    env = dict(os.environ, PHOBOS_FUZZ_SCALE=str(scale), PYTHONPATH=str(ROOT))
    selection = [] if gpu else ["-m", "not gpu"]
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", f"--hypothesis-seed={seed}",
               *selection, *files]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, check=False)
    return done.returncode, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the fuzz and property tests with many examples, round after round.")
    parser.add_argument("--minutes", type=float, default=60.0, help="time budget (default 60)")
    parser.add_argument("--scale", type=int, default=40, help="examples per test, times CI's count (default 40)")
    parser.add_argument("--only", choices=sorted(SUITES), help="one suite (default: all)")
    parser.add_argument("--gpu", action="store_true", help="also run the tests marked gpu")
    parser.add_argument("--seed", type=int, help="first Hypothesis seed (default: random)")
    parser.add_argument("--json", type=Path, help="write a summary here")
    args = parser.parse_args(argv)
    if args.scale < 1:
        parser.error("--scale must be at least 1")

    files = [f for name, paths in SUITES.items() if args.only in (None, name) for f in paths]
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    deadline = time.monotonic() + 60 * args.minutes
    rounds, seconds, outcome = [], 0.0, "passed"
    while time.monotonic() < deadline or not rounds:
        print(f"fuzz campaign: round {len(rounds) + 1}, seed {seed}, scale {args.scale}: {' '.join(files)}",
              flush=True)
        code, spent = run_round(files, args.scale, seed, args.gpu)
        rounds.append({"seed": seed, "seconds": round(spent, 1), "exit": code})
        seconds += spent
        if code != 0:
            outcome = "failed" if code == 1 else f"pytest exited with {code}"
            break
        seed = (seed + 1) % 2**32
    print(f"fuzz campaign: {outcome} after {len(rounds)} round(s), {seconds / 60:.1f} minutes")
    if args.json is not None:
        args.json.write_text(json.dumps({"files": files, "scale": args.scale, "gpu": args.gpu, "rounds": rounds,
                                         "outcome": outcome}, indent=2))
    return 0 if outcome == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
