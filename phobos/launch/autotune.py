# Choosing a kernel's autotune configuration: screen the candidates, time the
# rest, keep the fastest.
#
# `screen` decides from the compiled kernel, the device's limits and ptxas's
# report (or, without ptxas, the compiler's register estimate) whether a
# configuration can run at all: more shared memory or threads than a CTA may
# have, or more registers than the register file allows for its threads, rule
# it out (the compiler's rule for its estimate, phobos.compiler.register_excess,
# is the one `phobos check` and the CPU modes apply).  The compiler's own figures come first: a configuration they rule
# out never reaches ptxas, whose time grows with the square of the PTX's
# length (a row of a million elements in registers kept it busy for minutes);
# ptxas itself runs under a time limit (phobos.toolchain.ptxas_timeout), and
# one that takes longer is skipped with that reason.  Spilling registers to
# local memory does not stop a kernel from running, only slows it, so a
# spilling configuration is set aside and timed only when every other one is
# ruled out.
#
# `Tuning` says how a choice is keyed and which configurations are timed:
# the key (by default every size rounded up to a power of two, or the
# kernel's @key; per call "exact", "pow2" or a function of the sizes) and an
# optional cost model that keeps only the configurations it rates cheapest.
# A choice is stored under the key *and* the list of configurations it was
# chosen from - those valid for the call's sizes, with their derived
# constants - so a choice is never reused for sizes it is not valid for.
#
# `tune` drives the search.  It knows nothing about GPUs: the launcher hands
# it `evaluate` (compile and screen one configuration) and `measure` (time it,
# as carefully as a Timing asks), so the choice logic runs on any machine with
# a fake timer.  Every configuration is first timed QUICK (one warm-up launch,
# one sample), as soon as it is compiled; then the few that came out fastest
# (FINALISTS, within FINALIST_SLACK of the quickest) are timed again CAREFULly
# and the fastest of those is kept: a first call of a GEMM of seconds' worth of
# configurations spends a sample or two on the slow ones, not fourteen.  The
# finalists' careful samples are taken in turn (one of each, then the next
# round), so that the GPU's clocks, which fall as a sustained load heats it,
# weigh on every finalist alike rather than on the last ones timed.  Every
# configuration ends up in the timings, as milliseconds (the careful figure
# where there is one) or as the reason it was skipped.  Tuning more than a few configurations logs progress lines
# (phobos.log.Progress); each configuration's outcome is logged at DEBUG, the
# report PHOBOS_LOG=debug shows.
from __future__ import annotations

import logging
import math
import numbers
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..compiler import CompiledKernel, LaunchRules, next_pow2, register_excess, sizes_text
from ..configuration import config_text
from .cache import canonical_json
from ..errors import LaunchError, PhobosError
from ..log import Progress
from ..ptxcheck import Report
from ..run.runtime import DeviceProperties

#: Tuning more configurations than this logs progress lines from the start.
PROGRESS_THRESHOLD = 3

logger = logging.getLogger(__name__)


class Skipped(Exception):
    """A configuration that is not timed; `reason` says why.

    `fallback` is set when the configuration could still run (it spills
    registers, say): it is timed if no configuration without a reason is left.
    """

    def __init__(self, reason: str, fallback: Any = None):
        super().__init__(reason)
        self.reason = reason
        self.fallback = fallback


def launch_problem(kernel: CompiledKernel, device: DeviceProperties) -> str | None:
    """Why the device cannot launch `kernel` at all (shared memory, threads), or None."""
    if kernel.shared_bytes > device.max_shared_bytes_per_block:
        return (f"needs {kernel.shared_bytes} bytes of shared memory; {device.name} allows "
                f"{device.max_shared_bytes_per_block} per block")
    if kernel.threads > device.max_threads_per_block:
        return f"needs {kernel.threads} threads per block; {device.name} allows {device.max_threads_per_block}"
    return None


def screen(kernel: CompiledKernel, device: DeviceProperties,
           ptxas: Callable[[], Report | None] = lambda: None) -> None:
    """Raise Skipped when `kernel` cannot run on `device`, or spills.

    The compiler's figures are screened first; `ptxas()`, ptxas's report (None:
    no ptxas here), is asked for only when they pass.
    """
    problem = launch_problem(kernel, device)
    if problem is not None:
        raise Skipped(problem)
    register_budget = device.max_registers_per_block // kernel.threads
    excess = register_excess(kernel.registers_estimate, kernel.threads, device.max_registers_per_block)
    if excess is not None:
        raise Skipped(f"{excess}; not assembled")
    report = ptxas()
    if report is None:
        if kernel.registers_estimate > register_budget:
            raise Skipped(f"the compiler estimates {kernel.registers_estimate} registers per thread; "
                          f"{kernel.threads} threads may use at most {register_budget}")
        return
    if not report.ok:
        first = report.errors[0].message if report.errors else "no reason given"
        raise Skipped(f"ptxas rejected it: {first}")
    usage = report.kernel(kernel.kernel_name)
    if usage.registers > register_budget:
        raise Skipped(f"uses {usage.registers} registers per thread; {kernel.threads} threads may use "
                      f"at most {register_budget}")
    if usage.spill_stores or usage.spill_loads:
        raise Skipped(f"spills registers ({usage.spill_stores} bytes stored, {usage.spill_loads} bytes loaded)",
                      fallback=kernel)


KEY_RULES = ("exact", "pow2")


@dataclass(frozen=True)
class Tuning:
    """How autotuning choices are keyed, and which configurations are timed.

    key: None (the kernel's @key, or by default every size rounded up to a
         power of two), "exact" (every size as it is), "pow2", or a function
         `key(sizes) -> value` (a JSON value: numbers, strings, lists, dicts).
    cost, keep: a model `cost(config, sizes) -> float`; only the `keep`
         configurations it rates cheapest (ties in listed order) are timed.
    """

    key: str | Callable[[dict[str, int]], Any] | None = None
    cost: Callable[[dict[str, int], dict[str, int]], float] | None = None
    keep: int | None = None

    def __post_init__(self) -> None:
        if self.key is not None and self.key not in KEY_RULES and not callable(self.key):
            raise PhobosError(f"tuning key must be one of {', '.join(map(repr, KEY_RULES))} or a function "
                              f"key(sizes); got {self.key!r}")
        if self.cost is not None and not callable(self.cost):
            raise PhobosError(f"tuning cost must be a function cost(config, sizes); got {self.cost!r}")
        if (self.cost is None) != (self.keep is None):
            raise PhobosError("tuning needs cost and keep together: a model cost(config, sizes) and how many "
                              "of the configurations it rates cheapest to time")
        if self.keep is not None and (not isinstance(self.keep, int) or isinstance(self.keep, bool)
                                      or self.keep < 1):
            raise PhobosError(f"tuning keep must be a positive integer; got {self.keep!r}")

    def key_for(self, rules: LaunchRules, sizes: dict[str, int]) -> tuple[Any, str]:
        """The key a choice for `sizes` is kept under, and how it was made (both part of the cache key)."""
        if self.key is None:
            return rules.tuning_key(sizes), rules.key_text()
        if self.key == "exact":
            return dict(sizes), "exact"
        if self.key == "pow2":
            return {name: next_pow2(value) for name, value in sizes.items()}, "pow2"
        value = self.key(dict(sizes))
        try:
            canonical_json(value)
        except (TypeError, ValueError):
            raise LaunchError(f"the tuning key function returned {value!r} for {sizes_text(sizes)}; a key is a "
                              f"JSON value (numbers, strings, lists, dicts)") from None
        return value, f"function {getattr(self.key, '__qualname__', type(self.key).__qualname__)}"

    def pruning_key(self) -> tuple | None:
        """What tells this pruning apart from another in the process (None: nothing is pruned)."""
        return None if self.cost is None else (id(self.cost), self.keep)

    def prune(self, configs: list[dict[str, int]], sizes: dict[str, int]) -> list[dict[str, int]]:
        """The configurations to time: all of them, or the `keep` the cost model rates cheapest."""
        if self.cost is None or len(configs) <= self.keep:
            return configs
        costs = []
        for config in configs:
            cost = self.cost(dict(config), dict(sizes))
            if not isinstance(cost, numbers.Real) or math.isnan(cost):
                raise LaunchError(f"the tuning cost model returned {cost!r} for {config_text(config)}; "
                                  f"it must return a number")
            costs.append(cost)
        ranked = sorted(range(len(configs)), key=lambda i: (costs[i], i))[:self.keep]
        return [configs[i] for i in sorted(ranked)]


@dataclass(frozen=True)
class Timing:
    """How carefully a configuration is timed: untimed warm-up launches, then timed samples (each sample
    runs short kernels back to back for about a millisecond: phobos.run.runtime.time_calls)."""

    warmup: int
    repeat: int


#: The first look at every configuration, and the second at the finalists: CAREFUL's warm-up launches of
#: each, then its samples taken round by round, one of each finalist a round (`careful_sample`: the timing of
#: one sample, with the warm-up in the first round).
QUICK = Timing(warmup=1, repeat=1)
CAREFUL = Timing(warmup=3, repeat=10)


def careful_sample(round_: int) -> Timing:
    """The timing of a finalist's sample in round `round_` of CAREFUL (counted from 0)."""
    return Timing(warmup=CAREFUL.warmup if round_ == 0 else 0, repeat=1)

#: The configurations timed carefully after the quick round: at most FINALISTS, those within FINALIST_SLACK
#: of the quickest (a quick sample can be off by some percent: the clocks ramp, another process runs).
FINALISTS = 4
FINALIST_SLACK = 1.25


@dataclass
class TuneResult:
    config: dict[str, int]
    timings: dict[str, float | str] = field(default_factory=dict)  # config text -> ms, or why it was skipped


def tune(kernel_name: str, configs: Sequence[dict[str, int]], evaluate: Callable[[dict[str, int]], Any],
         measure: Callable[[Any, Timing], float], order: Iterable[dict[str, int]] | None = None) -> TuneResult:
    """The fastest of `configs`.

    `evaluate(config)` prepares a configuration for timing (compiles it) or
    raises Skipped (or any PhobosError, recorded as the reason);
    `measure(prepared, timing)` returns its time in milliseconds or raises the
    same.  `order` is the order to time them in (each of `configs` once;
    default, theirs): the launcher passes the order their compiles finish in.
    Each is timed QUICK, then the finalists CAREFULly (see the module header).
    Ties go to the earlier of `configs`.  Raises LaunchError, listing every
    reason, when no configuration can run.
    """
    progress = Progress(logger, f"tuning {kernel_name} over {len(configs)} configurations", len(configs),
                        "configurations", threshold=PROGRESS_THRESHOLD)
    timings: dict[str, float | str] = {}
    prepared: dict[str, Any] = {}
    fallbacks: list[tuple[dict[str, int], Any]] = []

    def attempt(config: dict[str, int], step: Callable[[], float]) -> None:
        text = config_text(config)
        try:
            timings[text] = float(step())
        except Skipped as skipped:
            timings[text] = skipped.reason
            if skipped.fallback is not None:
                fallbacks.append((config, skipped.fallback))
        except PhobosError as error:
            timings[text] = error.message
        outcome = f"{timings[text]:.4g} ms" if isinstance(timings[text], float) else f"skipped: {timings[text]}"
        logger.debug("tuning %s: %s: %s", kernel_name, text, outcome)

    def time_carefully(finalists: list[str]) -> None:
        """The finalists' CAREFUL medians into `timings`, their samples taken in turn; one that fails a
        sample keeps the reason and is not timed again."""
        samples: dict[str, list[float]] = {text: [] for text in finalists}
        for round_ in range(CAREFUL.repeat):
            for text in [text for text in finalists if isinstance(timings[text], float)]:
                attempt(by_text[text], lambda: measure(prepared[text], careful_sample(round_)))
                if isinstance(timings[text], float):
                    samples[text].append(timings[text])
        for text in finalists:
            if isinstance(timings[text], float):
                timings[text] = statistics.median(samples[text])
                logger.debug("tuning %s: %s: %.4g ms (median of %d samples)", kernel_name, text, timings[text],
                             len(samples[text]))

    def first_look(config: dict[str, int], ready: Callable[[], Any]) -> float:
        prepared[config_text(config)] = ready()
        return measure(prepared[config_text(config)], QUICK)

    for done, config in enumerate(configs if order is None else order, start=1):
        attempt(config, lambda: first_look(config, lambda: evaluate(config)))
        progress.update(done)
    if not _timed(timings):
        for config, fallback in fallbacks:
            attempt(config, lambda: first_look(config, lambda: fallback))
    rank = {config_text(config): index for index, config in enumerate(configs)}
    by_text = {config_text(config): config for config in configs}
    finalists = _finalists(_timed(timings), rank)
    if len(finalists) > 1:
        time_carefully(finalists)
    timed = {text: value for text, value in _timed(timings).items() if len(finalists) < 2 or text in finalists}
    if not timed:
        progress.finish("no configuration can run")
        reasons = "\n".join(f"  {text}: {reason}" for text, reason in timings.items())
        raise LaunchError(f"{kernel_name}: no configuration can run on this device:\n{reasons}")
    best = min(timed, key=lambda text: (timed[text], rank[text]))
    progress.finish(f"best {best}: {timed[best]:.4g} ms")
    return TuneResult(next(c for c in configs if config_text(c) == best), timings)


def _finalists(quick: dict[str, float], rank: dict[str, int]) -> list[str]:
    """The configurations timed again carefully: the quickest few, within FINALIST_SLACK of the quickest."""
    ordered = sorted(quick, key=lambda text: (quick[text], rank[text]))
    return [text for text in ordered[:FINALISTS] if quick[text] <= FINALIST_SLACK * quick[ordered[0]]]


def _timed(timings: dict[str, float | str]) -> dict[str, float]:
    return {text: value for text, value in timings.items() if isinstance(value, float)}
