# The differential fuzz of the three modes: random valid kernels over the hard
# values of every dtype (tests/value_generator.py) run in the interpreter, in
# the PTX emulator and on the GPU, and their outputs compared - bit for bit,
# except the `.approx` functions (within their documented bounds) and the
# order-dependent reductions (NaN with any NaN); the module header of
# tests/value_generator.py says which is which.  Which of several f64 NaN
# operands the GPU passes on, the language leaves open (docs/language.md): a
# GPU f64 NaN that differs from a CPU mode's is checked against that mode run
# with the reverse NaN precedence, and counted apart when it matches it.
#
#     python tools/fuzz_modes.py --gpu --programs 2000 --json fuzz.json   # the GPU machine
#     python tools/fuzz_modes.py --no-gpu --programs 300                  # anywhere: interpret vs emulate
#
# Programs are checked in worker processes (--jobs, default: the CPU count),
# each one whole in one process: it is compiled once, for the GPU's target when
# there is a GPU (the emulator then runs exactly the PTX the GPU runs), and run
# in every mode, the GPU through Phobos's own mode="gpu" launch.  Compiled
# kernels go to a fresh cache directory (--cache-dir to keep one).  The summary
# table gives, per pair of modes, the programs and output elements that
# disagree, the errors per mode, and the seconds per program spent in each
# phase (checking and interpreting, compiling, emulating, assembling and
# running on the GPU); --json writes all of it, with every disagreement's seed,
# source, output and bits.  A program is a function of its seed: rerun one
# with --seed S --programs 1.  Exit status 1 when anything disagrees or fails.
from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAIRS = (("interpret", "emulate"), ("emulate", "gpu"), ("interpret", "gpu"))
PHASES = ("interpret", "compile", "emulate", "gpu")
EXAMPLES_KEPT = 40  # disagreements and errors written out in full


def _setup_path() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def check_seeds(seeds: list[int], gpu: bool) -> list[dict]:
    """Run the programs of `seeds` in every mode (in this worker process) and compare them."""
    _setup_path()
    from phobos.run.backends import EmulateBackend, select_backend

    arch = select_backend("gpu").arch() if gpu else None

    class EmulateAsGpu(EmulateBackend):
        """The emulator running the code compiled for the GPU's target."""

        def arch(self, index: int = 0) -> str:
            return arch or super().arch(index)

    modes = {"interpret": "interpret", "emulate": EmulateAsGpu()}
    if gpu:
        modes["gpu"] = "gpu"
    return [check_program(seed, modes) for seed in seeds]


def check_program(seed: int, modes: dict) -> dict:
    """One program: its outputs in each mode, their disagreements, errors and timings."""
    from tests import value_generator as vg

    program = vg.generate(seed)
    record = {"seed": seed, "outputs": Counter(o.klass for o in program.outputs.values()),
              "elements": sum(o.length for o in program.outputs.values()), "seconds": {},
              "errors": [], "disagreements": [], "nan_choice": {}}
    results = {}
    for name, mode in modes.items():
        started = time.perf_counter()
        try:
            results[name], kernel = vg.run(program, mode)
        except Exception as error:  # a mode that fails on a valid program is a finding too
            record["errors"].append({"mode": name, "error": f"{type(error).__name__}: {error}"})
            continue
        spent = time.perf_counter() - started
        if name != "interpret" and "compile" not in record["seconds"]:
            compiled = sum(kernel.compiled.timings.values())
            record["seconds"]["compile"] = compiled
            spent -= compiled
        record["seconds"][name] = spent
    reversed_results = {}
    for a, b in PAIRS:
        if a not in results or b not in results:
            continue
        for output, spec in program.outputs.items():
            bad = vg.disagreements(program, output, results[b][output], results[a][output], modes=(a, b))
            if len(bad) and b == "gpu" and spec.dtype == "f64":
                # the GPU's choice among several f64 NaN operands: the CPU mode's other order may give it
                if a not in reversed_results:
                    reversed_results[a] = vg.run_reversed(program, modes[a])
                lawful = len(bad)
                bad = vg.disagreements(program, output, results[b][output], results[a][output],
                                       reversed_results[a][output], (a, b))
                record["nan_choice"][f"{a}/{b}"] = record["nan_choice"].get(f"{a}/{b}", 0) + lawful - len(bad)
            if len(bad):
                i = int(bad[0])
                record["disagreements"].append({
                    "pair": f"{a}/{b}", "output": output, "class": spec.klass, "dtype": spec.dtype,
                    "elements": len(bad), "index": i,
                    a: _hex(results[a][output][i]), b: _hex(results[b][output][i])})
    if record["errors"] or record["disagreements"]:
        record["source"] = program.source
    return record


def _hex(value) -> str:
    import numpy as np
    value = np.asarray(value)
    if value.dtype == np.bool_:
        return str(bool(value))
    bits = value.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[value.dtype.itemsize])
    return f"0x{int(bits):0{2 * value.dtype.itemsize}x} ({value!r})"


def summarize(records: list[dict], modes: list[str], wall: float) -> dict:
    pairs = [f"{a}/{b}" for a, b in PAIRS if a in modes and b in modes]
    programs_bad = {p: sum(any(d["pair"] == p for d in r["disagreements"]) for r in records) for p in pairs}
    elements_bad = {p: sum(d["elements"] for r in records for d in r["disagreements"] if d["pair"] == p)
                    for p in pairs}
    by_class = {p: dict(Counter(f'{d["class"]} {d["dtype"]}' for r in records for d in r["disagreements"]
                                if d["pair"] == p)) for p in pairs}
    errors = {m: sum(any(e["mode"] == m for e in r["errors"]) for r in records) for m in modes}
    outputs = Counter()
    for r in records:
        outputs.update(r["outputs"])
    seconds = {phase: sum(r["seconds"].get(phase, 0.0) for r in records) / max(len(records), 1)
               for phase in PHASES}
    nan_choice = {p: sum(r["nan_choice"].get(p, 0) for r in records) for p in pairs}
    nan_choice_programs = {p: sum(bool(r["nan_choice"].get(p)) for r in records) for p in pairs}
    examples = [r for r in records if r["errors"] or r["disagreements"]]
    return {"programs": len(records), "modes": modes, "outputs": dict(outputs),
            "elements": sum(r["elements"] for r in records), "disagreeing_programs": programs_bad,
            "disagreeing_elements": elements_bad, "disagreements_by_class": by_class, "errors": errors,
            "nan_choice_elements": nan_choice, "nan_choice_programs": nan_choice_programs,
            "seconds_per_program": seconds, "wall_seconds": wall, "failures": len(examples),
            "examples": examples[:EXAMPLES_KEPT]}


def print_table(summary: dict) -> None:
    print(f"fuzz_modes: {summary['programs']} programs, {sum(summary['outputs'].values())} outputs "
          f"({', '.join(f'{n} {k}' for k, n in sorted(summary['outputs'].items()))}), "
          f"{summary['elements']} elements, in {summary['wall_seconds']:.0f} s")
    print(f"{'modes':<20} {'programs disagreeing':>21} {'elements':>9}  outputs by class and dtype")
    for pair, count in summary["disagreeing_programs"].items():
        classes = ", ".join(f"{k} {n}" for k, n in sorted(summary["disagreements_by_class"][pair].items())) or "-"
        print(f"{pair:<20} {count:>21} {summary['disagreeing_elements'][pair]:>9}  {classes}")
    for pair, count in summary["nan_choice_elements"].items():
        if count:
            print(f"{pair:<20} {summary['nan_choice_programs'][pair]:>21} {count:>9}  f64 NaN elements "
                  f"where the GPU passed on the other of several NaN operands (lawful: docs/language.md)")
    print("errors per mode:     " + ", ".join(f"{m} {n}" for m, n in summary["errors"].items()))
    print("seconds per program: " + ", ".join(f"{p} {s:.3f}" for p, s in summary["seconds_per_program"].items()))
    for record in summary["examples"][:5]:
        print(f"--- seed {record['seed']}")
        for item in record["errors"][:2]:
            print(f"    {item['mode']}: {item['error'][:300]}")
        for item in record["disagreements"][:3]:
            values = ", ".join(f"{k} {v}" for k, v in item.items()
                               if k not in ("pair", "output", "class", "dtype", "elements", "index"))
            print(f"    {item['pair']} {item['output']} ({item['class']}, {item['dtype']}): {item['elements']} "
                  f"element(s), first [{item['index']}]: {values}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Differential fuzz of interpret, emulate and the GPU.")
    parser.add_argument("--programs", type=int, default=2000, help="how many programs (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="the first program's seed (default 0)")
    gpu = parser.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", dest="gpu", action="store_true", default=None, help="also run on the GPU")
    gpu.add_argument("--no-gpu", dest="gpu", action="store_false", help="interpret vs emulate only")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--json", type=Path, help="write the summary and every failure here")
    parser.add_argument("--cache-dir", type=Path, help="Phobos's cache directory (default: a fresh one)")
    args = parser.parse_args(argv)
    if args.programs < 1 or args.jobs < 1:
        parser.error("--programs and --jobs must be at least 1")
    _setup_path()
    from phobos.run import runtime

    available, why = runtime.gpu_available()
    if args.gpu and not available:
        parser.error(f"--gpu: no GPU here ({why})")
    use_gpu = available if args.gpu is None else args.gpu
    modes = ["interpret", "emulate"] + (["gpu"] if use_gpu else [])
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="phobos-fuzz-cache-"))
    os.environ["PHOBOS_CACHE_DIR"] = str(cache)

    seeds = list(range(args.seed, args.seed + args.programs))
    chunk = max(1, min(25, len(seeds) // (4 * args.jobs) or 1))
    batches = [seeds[i:i + chunk] for i in range(0, len(seeds), chunk)]
    started, records = time.perf_counter(), []
    context = multiprocessing.get_context("spawn")  # a CUDA context per worker, none inherited
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        for done, batch in enumerate(pool.map(check_seeds, batches, [use_gpu] * len(batches)), 1):
            records += batch
            if done % max(1, len(batches) // 10) == 0:
                print(f"fuzz_modes: {len(records)}/{len(seeds)} programs, "
                      f"{sum(bool(r['errors'] or r['disagreements']) for r in records)} failing", flush=True)
    summary = summarize(records, modes, time.perf_counter() - started)
    print_table(summary)
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1))
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
