# The machinery of the Triton corpus: what a case is, how its outputs are compared, how it is run.
#
# A case is a builder, `build(arch, rng) -> Run`: the @triton.jit kernel, its grid, arguments and
# keyword arguments (constexprs, num_warps...) made from `rng`, and the checks of its outputs against a
# numpy reference computed from the same inputs.  The same builder and seed give the same inputs, so the
# GPU comparison (tools/triton_gpu_compare.py) runs one case twice, on the GPU and in the emulator.
#
# Checks say how close an output must be: `exact` (the same bits; NaNs compare as NaNs) where the
# operation is exact in IEEE arithmetic or in integers, `ulps(n)` for the approximate functions (MUFU's
# .approx instructions, libdevice's documented bounds), `close` and `dot_bound` for sums whose order is
# the kernel's (reductions, matrix products: a bound of the accumulated rounding, from the sum of the
# absolute products).
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

ARCHES = ("sm_80", "sm_90a")



# -------------------- checks
def as_numpy(value: Any) -> np.ndarray:
    """An output as a numpy array (torch tensors of any dtype; bf16 as ml_dtypes' bfloat16)."""
    if isinstance(value, np.ndarray):
        return value
    import torch
    if value.dtype == torch.bfloat16:
        import ml_dtypes
        return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return value.numpy()


def _floats(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else a


@dataclass(frozen=True)
class Check:
    """How an output is compared with its reference: `why` it fails, or None."""

    name: str
    compare: Callable[[np.ndarray, np.ndarray], str | None]

    def __call__(self, got: np.ndarray, want: np.ndarray) -> str | None:
        got, want = as_numpy(got), np.asarray(want)
        if got.shape != want.shape:
            return f"shape {got.shape}, expected {want.shape}"
        return self.compare(got, want)


def _first(bad: np.ndarray, got, want, extra: str = "") -> str:
    index = np.unravel_index(int(np.flatnonzero(bad)[0]), bad.shape)
    return (f"{int(bad.sum())} of {bad.size} elements differ{extra}; first at {tuple(map(int, index))}: "
            f"got {got[index]!r}, expected {want[index]!r}")


def _exact(got, want):
    want = want.astype(got.dtype)
    if got.dtype.kind == "f" or got.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        nan = np.isnan(_floats(got)) & np.isnan(_floats(want))
        bad = (_bits(got) != _bits(want)) & ~nan
    else:
        bad = got != want
    return _first(bad, got, want) if bad.any() else None


exact = Check("exact", _exact)


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in ulps of `got`'s format (f32, f16, bf16) between the values of two arrays of it."""
    bits = {2: (np.int16, 0x7FFF), 4: (np.int32, 0x7FFFFFFF), 8: (np.int64, 0x7FFFFFFFFFFFFFFF)}
    signed, magnitude = bits[got.dtype.itemsize]

    def ordered(x):
        i = np.ascontiguousarray(x).view(signed).astype(np.int64)
        return np.where(i < 0, -(i & magnitude), i)
    return np.abs(ordered(got) - ordered(want.astype(got.dtype)))


def ulps(limit: int) -> Check:
    """Within `limit` ulps of the reference rounded to the output's format; NaN where it is NaN."""
    def compare(got, want):
        nan_got, nan_want = np.isnan(_floats(got)), np.isnan(_floats(want))
        if (nan_got != nan_want).any():
            return _first(nan_got != nan_want, got, want, " in being NaN")
        distance = np.where(nan_got, 0, ulp_distance(got, want))
        bad = distance > limit
        return _first(bad, got, want, f" by more than {limit} ulps (up to {int(distance.max())})") \
            if bad.any() else None
    return Check(f"ulps({limit})", compare)


def close(rtol: float, atol: float = 0.0) -> Check:
    """|got - want| <= atol + rtol |want| (NaNs where the reference has them)."""
    def compare(got, want):
        g, w = _floats(got), _floats(want)
        bad = ~((np.abs(g - w) <= atol + rtol * np.abs(w)) | (np.isnan(g) & np.isnan(w)) | (g == w))
        return _first(bad, got, want, f" beyond rtol {rtol}, atol {atol}") if bad.any() else None
    return Check(f"close({rtol}, {atol})", compare)


def dot_bound(a: np.ndarray, b: np.ndarray, unit: float, out_unit: float = 0.0) -> Check:
    """For C = A @ B: |got - want| <= unit * K * (|A| @ |B|) + out_unit |want|: each of the K products and
    partial sums rounded at most `unit` relatively (2^-23 for f32 accumulation, 2^-10 for tf32 inputs...),
    then the result rounded to the output format (`out_unit`)."""
    return magnitude_bound(np.abs(_floats(a)) @ np.abs(_floats(b)), a.shape[-1], unit, out_unit)


def magnitude_bound(magnitude: np.ndarray, k: int, unit: float, out_unit: float = 0.0) -> Check:
    """dot_bound for products whose sums of absolute terms, |A| @ |B|, are given (several products at once)."""
    def compare(got, want):
        g, w = _floats(got), _floats(want)
        bound = unit * k * magnitude + out_unit * np.abs(w) + 1e-30
        bad = ~(np.abs(g - w) <= bound)
        return _first(bad, got, want, f" beyond the dot bound ({unit:g} K |A||B|)") if bad.any() else None
    return Check(f"dot_bound({unit:g})", compare)


# -------------------- exact references
def round_f32(q: Fraction) -> np.float32:
    """The f32 nearest to the rational `q` (ties to even), for references that must round once."""
    guess = np.float32(float(q))
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    finite = [c for c in candidates if np.isfinite(c)]
    best = min(finite, key=lambda c: (abs(Fraction(float(c)) - q), int(np.float32(c).view(np.uint32)) & 1))
    return np.float32(best)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c rounded once to f32 (finite operands)."""
    return np.array([round_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
                     for x, y, z in zip(a.ravel(), b.ravel(), c.ravel())], np.float32).reshape(a.shape)


# -------------------- cases
@dataclass
class Output:
    """One output of a run: the array the kernel writes (an argument), its reference, how they compare."""

    label: str
    array: Any
    want: Any
    check: Check = exact


@dataclass
class Run:
    """One launch of a case: kernel, grid, arguments, and the outputs to check afterwards."""

    kernel: Any
    grid: Any
    args: tuple
    kwargs: dict = field(default_factory=dict)
    outputs: list[Output] = field(default_factory=list)
    then: "Run | None" = None  # a second launch that reads the first's outputs (a backward pass)

    def launches(self):
        run: Run | None = self
        while run is not None:
            yield run
            run = run.then

    def check(self) -> list[str]:
        return [f"{out.label}: {why}" for run in self.launches() for out in run.outputs
                if (why := out.check(out.array, out.want)) is not None]


def chain(runs: list[Run]) -> Run:
    """The runs one after the other, as one case."""
    for first, second in zip(runs, runs[1:]):
        first.then = second
    return runs[0]


@dataclass
class Case:
    """A corpus case: its builder, and what is known about it per arch.

    xfail: arch -> (exception class, reason): fails today for a reason outside this corpus (an
    instruction the emulator does not implement, a false alarm of a detector), expected to flip.
    skip: arch -> reason (Triton cannot compile it for that arch).  deterministic: the GPU gives the same
    bits from run to run (no float atomics whose order varies, no lock order in sums).  heavy: one of the
    larger emulations (still small sizes).  requires: modules the case needs besides Triton and numpy
    (torch, for tensor descriptors over torch tensors)."""

    name: str
    build: Callable[[str, np.random.Generator], Run]
    xfail: dict[str, tuple[type, str]] = field(default_factory=dict)
    skip: dict[str, str] = field(default_factory=dict)
    deterministic: bool = True
    heavy: bool = False
    requires: tuple[str, ...] = ()
    seed: int = 0

    def missing(self) -> list[str]:
        """The modules of `requires` that are not installed."""
        return [name for name in self.requires if importlib.util.find_spec(name) is None]

    def make(self, arch: str) -> Run:
        return self.build(arch, np.random.default_rng(self.seed))


def registry(cases: dict[str, Case]) -> Callable:
    """The decorator `case(name=None, **known)` registering a builder as a case of `cases` (`known`:
    Case's fields)."""
    def case(name: str | None = None, **known) -> Callable:
        def register(build):
            key = name or build.__name__
            if key in cases:
                raise ValueError(f"two cases named {key}")
            cases[key] = Case(key, build, **known)
            return build
        return register
    return case


CASES: dict[str, Case] = {}
case = registry(CASES)


# -------------------- running a corpus under pytest
def params(cases: dict[str, Case]):
    """(name, arch) of every case on every arch, marked: slow where heavy, skipped where a module it
    requires is missing or Triton cannot compile it, a strict xfail pinned to its error where it fails
    today for a reason outside the corpus."""
    import pytest
    for name, known in cases.items():
        for arch in ARCHES:
            marks = [pytest.mark.slow] if known.heavy else []
            if known.missing():
                marks.append(pytest.mark.skip(reason=f"needs {', '.join(known.missing())}"))
            elif arch in known.skip:
                marks.append(pytest.mark.skip(reason=known.skip[arch]))
            elif arch in known.xfail:
                raises, reason = known.xfail[arch]
                marks.append(pytest.mark.xfail(raises=raises, strict=True, reason=reason))
            yield pytest.param(name, arch, marks=marks, id=f"{name}-{arch}")


def false_alarm_params(cases: dict[str, Case], detectors: tuple[type, ...]):
    """(name, arch) of the cases xfailed for an error of one of `detectors`."""
    import pytest
    for name, known in cases.items():
        for arch, (raises, reason) in known.xfail.items():
            if raises in detectors and not known.missing():
                yield pytest.param(name, arch, marks=[pytest.mark.slow] if known.heavy else [], id=f"{name}-{arch}")


def run_and_check(known: Case, arch: str, check_races: bool) -> None:
    """Run a case in the emulator for `arch` and assert its outputs match their references."""
    import phobos.triton
    run = known.make(arch)
    for launch in run.launches():
        kernel = phobos.triton.emulate(launch.kernel, arch=arch, check_races=check_races)
        kernel[launch.grid](*launch.args, **launch.kwargs)
    assert run.check() == []
