# Kernels you call like functions.
#
#   mod = phobos.jit(source)            # or phobos.load("kernels.phobos")
#   mod.sgemm(A, B, C, alpha=1.5, beta=0.5)
#   mod.sgemm[(gx, gy)](A, B, C, 1.5, 0.5)          # an explicit grid
#   mod.sgemm.configure(TILE_M=64)(A, B, C, 1.5, 0.5)  # a forced configuration
#
# A source is parsed and checked, under every autotune configuration, when it
# is loaded (phobos.compiler.kernel_infos: one KernelInfo per kernel), so its
# errors show up there, with their locations; a kernel is compiled only when
# it is first called.  A call binds its arguments (phobos.launch.binding: shapes
# give the sizes, every mismatch is a LaunchError before any GPU work), picks a
# configuration, works out the grid and hands the launch to a backend
# (phobos.run.backends: the GPU, or the interpreter or PTX emulator on the CPU).
#
# On the GPU, a call whose tensors are all device memory is queued on the
# caller's stream and returns (phobos.launch.fastpath says which stream); the
# launch its first call prepared is kept per call signature, so that later
# calls with arguments of the same kinds, dtypes, shapes and devices skip
# binding, choosing and compiling.  A call with numpy arrays copies them in,
# waits for the device and copies them back.
#
# A call with a tensor past 2^31 - 1 elements runs the kernel compiled with
# 64-bit indices; it is refused when, over its grid, an index the kernel
# computes in i32 from program_id would wrap, or the kernel reads a size past
# i32 by name (KernelInfo.index_reach): elements would be skipped silently.
# A call where a tensor the kernel only reads overlaps one it writes (in
# place: `add(x, y, x)`) runs the kernel compiled without read-only-cache
# loads; `code_options` says which code a call needs.
#
# The configuration: first the candidates for the call's sizes - the autotune
# space (with the forced values fixed), each with the constants the kernel
# derives from the sizes, less those a @require rejects (phobos.frontend.
# launch_rules; none left is a LaunchError naming the conditions and the
# sizes).  Every backend chooses among these only.  On the GPU, the first call
# for a new tuning key (by default the sizes rounded up to powers of two; and
# device, source and Phobos build) compiles every candidate, skips those that
# cannot run, times the rest on scratch copies of the tensors the kernel
# writes, and keeps the fastest (phobos.launch.autotune).  The choice, the
# compiled kernels and ptxas's reports are kept in memory and on disk
# (phobos.launch.cache), so the next process starts where this one left off.
# A choice is keyed by the grid too: a grid function by its code and the
# values it reads (function_digest), never by its name.
#
# The grid: given by the caller as a tuple or as `grid(config, sizes)`, or
# inferred per configuration from CompiledKernel.grid_hint: a store indexed
# `program_id(d) * T :+ T` over a size D needs ceil(D / T) programs along d.
# An axis without a hint gets one program, unless the kernel asks for its
# program_id or num_programs: then the caller must give the grid.
from __future__ import annotations

import math
import numbers
import os
import types
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import autotune, cache, fastpath, parallel
from ..run import runtime
from ..run.tensor_map import describable
from .. import toolchain
from ..run.backends import DEFAULT_ARCH, Backend, Launch, check_mode, select_backend, tunes_likely
from .binding import BoundCall, bind, call_device, overlapping_tensors
from ..compiler import (CodeOptions, CompiledKernel, KernelInfo, LaunchRules, Rejection, check_resources,
                        compile_kernel, kernel_infos, sizes_text, target, term_text)
from ..configuration import config_text, configuration_problem, knob_problem, KNOBS
from ..errors import (LaunchError, Note, PhobosError, PtxasTimeout, ResourceError, SourceFile, ToolchainError,
                      at_call_site, raised_at_call_site)
from ..ptxcheck import Report
from ..ptxcheck import assemble as ptxas_assemble

#: The most programs a grid may have along x, y and z.
GRID_LIMITS = (2**31 - 1, 65535, 65535)

#: How many size combinations a kernel remembers its valid configurations for.
SERVING_MEMO = 1024

Config = dict[str, int]
GridSpec = tuple[int, int, int] | Callable[[Config, dict[str, int]], Any] | None


# ---------------------------------------------------------------------------
# Entry points


@raised_at_call_site
def jit(src: str, filename: str | None = None, mode: Any = None) -> Module:
    """Parse and check `src`; the result has one callable per kernel (`mod.sgemm`).

    `mode` is "gpu", "interpret" or "emulate", or None to choose when the first
    kernel runs (PHOBOS_MODE if set, else the GPU if there is one, else the
    interpreter: phobos.run.backends.default_mode).  `filename` names
    the source in error messages (default: `<string>`; `<string 2>` and so
    on for other texts in the same process: errors.SourceFile.name_for).
    """
    if not isinstance(src, str):
        raise PhobosError(f"phobos.jit takes the source text as a str, got {type(src).__name__}")
    if filename is not None and not isinstance(filename, str):
        raise PhobosError(f"phobos.jit: filename must be a str, got {type(filename).__name__}")
    return Module(src, filename, mode)


@raised_at_call_site
def load(path: str | os.PathLike, mode: Any = None) -> Module:
    """jit() the contents of a .phobos file."""
    if not isinstance(path, (str, os.PathLike)):
        raise PhobosError(f"phobos.load takes a file path, got {type(path).__name__}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise PhobosError(f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise PhobosError(f"{path} is not UTF-8 text") from None
    return Module(text, str(path), mode)


@raised_at_call_site
def kernel(src: str, filename: str | None = None, mode: Any = None) -> KernelFunction:
    """The callable of the one kernel `src` defines; an error if it defines several."""
    module = jit(src, filename, mode)
    if len(module.kernels) != 1:
        names = ", ".join(module.kernels)
        raise PhobosError(f"the source defines {len(module.kernels)} kernels ({names}); "
                          f"use phobos.jit(src).<name> to pick one")
    return next(iter(module.kernels.values()))


def benchmark(fn: Callable[[], Any], warmup: int = 3, repeat: int = 20) -> float:
    """Median milliseconds per call of `fn` over `repeat` samples (after `warmup`), measured with CUDA
    events; see runtime.time_calls for how short calls are grouped into samples."""
    return runtime.time_calls(fn, warmup, repeat)


def autotune_enabled() -> bool:
    """False when PHOBOS_AUTOTUNE is 0 (or false/no/off): then the first configuration is used."""
    return os.environ.get("PHOBOS_AUTOTUNE", "1").strip().lower() not in ("0", "false", "no", "off")


# ---------------------------------------------------------------------------
# Modules and kernel callables


class Module:
    """The kernels of one source, as attributes: `mod.sgemm(...)`; all of them in `mod.kernels`."""

    def __init__(self, source: str, filename: str | None, mode: Any):
        check_mode(mode)
        digest = cache.text_digest(source)
        self.filename = filename or SourceFile.name_for(source)
        self.source = source
        self.mode = mode
        self._backend: Backend | None = None
        self.kernels: dict[str, KernelFunction] = {
            info.name: KernelFunction(_Kernel(info, digest, self)) for info in kernel_infos(source, self.filename)}
        for name, function in self.kernels.items():  # plain attributes: `mod.k(...)` costs no __getattr__
            if name not in self.__dict__ and not hasattr(type(self), name):
                self.__dict__[name] = function
        self._start_compile_workers()

    def _start_compile_workers(self) -> None:
        """Start the compile workers (parallel.CompilePool) now, so that their interpreters are up by the first
        call, where that call will compile configurations to tune: the kernels are to be timed (a GPU,
        `tunes_likely`), autotuning is on, and a kernel with several configurations has not been tuned by this
        build of Phobos (`_Kernel.tuned_key` in the cache; a kernel once tuned usually finds its choices there)."""
        workers = parallel.pool()
        if workers is None or not autotune_enabled() or not tunes_likely(self.mode):
            return
        store = cache.default_cache()
        if any(function._kernel.rules.space_size() > 1
               and store.load(cache.TUNED, function._kernel.tuned_key()) is None
               for function in self.kernels.values()):
            workers.start()

    def backend(self) -> Backend:
        """The backend kernels run on, chosen at the first launch (see jit's `mode`)."""
        if self._backend is None:
            self._backend = select_backend(self.mode)
        return self._backend

    def __getattr__(self, name: str) -> KernelFunction:
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"{self.__dict__.get('filename', 'this module')} has no kernel '{name}' "
                             f"(kernels: {', '.join(kernels) or 'none'})")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.kernels))

    def __repr__(self) -> str:
        return f"<phobos module {self.filename}: {', '.join(self.kernels)}>"


class KernelFunction:
    """One kernel, callable like a function: `f(*args, **kwargs)` launches it.

    On the GPU, a call whose tensors are all in device memory is queued on the
    caller's stream (`stream=` overrides it) and returns; a call with numpy
    arrays waits and copies the results back.  `f[grid]` is the same kernel
    with an explicit grid (1 to 3 ints, or a function `grid(config, sizes) ->
    tuple`); `f.configure(NAME=value, ...)` the same kernel with those autotune
    parameters fixed (the rest are still tuned).  After a call, `.config`,
    `.grid`, `.compiled`, `.ptx`, `.ptxas` and `.timings` describe what ran and
    what the autotuner saw.
    """

    def __init__(self, kernel: _Kernel, forced: Config | None = None, grid: GridSpec = None,
                 tuning: autotune.Tuning | None = None):
        self._kernel = kernel
        self._forced = dict(forced or {})
        self._grid = grid
        self._tuning = tuning or autotune.Tuning()
        self._variant = kernel.variant(self._forced, grid, self._tuning)

    @property
    def name(self) -> str:
        return self._kernel.name

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        try:
            if kwargs or self._variant.direct(args) is None:
                with runtime.thread_scope():
                    self._kernel.call(self._variant, args, kwargs)
        except PhobosError as error:
            raise at_call_site(error)  # the error of the call above; PHOBOS_FULL_TRACEBACKS=1 shows where

    @raised_at_call_site
    def __getitem__(self, grid: Any) -> KernelFunction:
        spec = grid if callable(grid) else normalize_grid(self.name, grid, f"got {grid!r}")
        return KernelFunction(self._kernel, self._forced, spec, self._tuning)

    @raised_at_call_site
    def configure(self, **values: int) -> KernelFunction:
        """This kernel with the given autotune parameters fixed; checked now, under every remaining configuration.

        A call whose sizes the forced values do not serve (a @require that fails) is a LaunchError."""
        space = self._kernel.space
        rules = self._kernel.rules
        for name, value in values.items():
            derived = next((d for d in rules.derived if d.name == name), None)
            if derived is not None:
                raise PhobosError(f"{self.name}: '{name}' is derived from the sizes (@derive at {derived.loc}); "
                                  f"it cannot be forced")
            if name not in space and name not in KNOBS:  # a knob may be set where @autotune does not list it
                raise PhobosError(f"{self.name}: no autotune parameter '{name}' "
                                  f"(it has: {', '.join(space) or 'none'})")
            if not isinstance(value, int) or isinstance(value, bool):
                raise PhobosError(f"{self.name}: autotune parameter '{name}' must be an integer, got {value!r}")
            problem = knob_problem(name, value)
            if problem is not None:
                raise PhobosError(f"{self.name}: configure({name}={value}): {problem}")
        forced = {**self._forced, **values}
        joint = configuration_problem(forced)
        if joint is not None:
            raise PhobosError(f"{self.name}: configure({config_text(forced)}): {joint.why}")
        self._kernel.refuse_impossible(forced)
        for config in self._kernel.candidates(forced):
            self._kernel.info.checked(config)
        return KernelFunction(self._kernel, forced, self._grid, self._tuning)

    def tuning(self, key: str | Callable[[dict[str, int]], Any] | None = None,
               cost: Callable[[Config, dict[str, int]], float] | None = None,
               keep: int | None = None) -> KernelFunction:
        """This kernel with its autotuning choices keyed by `key` ("exact", "pow2", or a function of
        the sizes; None keeps the kernel's @key or the default) and, with a cost model
        `cost(config, sizes)`, only the `keep` configurations it rates cheapest timed
        (phobos.launch.autotune.Tuning)."""
        return KernelFunction(self._kernel, self._forced, self._grid, autotune.Tuning(key, cost, keep))

    # --- inspection
    @property
    def rules(self) -> LaunchRules:
        """The kernel's launch rules: autotune space, derived constants, conditions, tuning key."""
        return self._kernel.rules

    @property
    def config(self) -> Config | None:
        """The configuration of the last launch (None before the first)."""
        last = self._kernel.last
        return dict(last.config) if last is not None else None

    @property
    def grid(self) -> tuple[int, int, int] | None:
        """The grid of the last launch (None before the first)."""
        last = self._kernel.last
        return last.grid if last is not None else None

    @property
    @raised_at_call_site
    def compiled(self) -> CompiledKernel:
        """The CompiledKernel of the last launch; before one, of the configuration a launch would start from."""
        return self._kernel.inspected(self._forced)

    @property
    def ptx(self) -> str:
        return self.compiled.ptx

    @property
    @raised_at_call_site
    def ptxas(self) -> Report:
        """What ptxas reports for `.compiled`: registers, spills, shared memory (needs ptxas)."""
        return self._kernel.ptxas_report(self.compiled, required=True)

    @property
    def timings(self) -> dict[str, float | str]:
        """Per configuration of the last launch's choice: milliseconds, or why it was skipped; when nothing was
        timed, the configuration that ran and why it was not timed (empty before the first launch)."""
        last = self._kernel.last
        return dict(last.timings) if last is not None else {}

    def __repr__(self) -> str:
        kernel = self._kernel
        params = ", ".join(f"{p.name}: " + (f"tensor<{p.dtype}>[{', '.join(map(str, p.dims))}]"
                                            if p.kind == "tensor" else str(p.dtype)) for p in kernel.info.params)
        count = kernel.rules.space_size(self._forced)
        space = ", ".join(f"{n} in {v}" if n not in self._forced else f"{n} = {self._forced[n]}"
                          for n, v in kernel.space.items())
        parts = [f"{count} configuration{'s' * (count != 1)}" + (f" ({space})" if space else "")]
        parts += [f"derives {d.name} = {term_text(d.term)}" for d in kernel.rules.derived]
        parts += [f"requires {c.text}" for c in kernel.rules.conditions]
        if self._grid is not None:
            parts.append("grid " + (repr(self._grid) if not callable(self._grid) else "from a function"))
        if kernel.last is not None:
            parts.append(f"last ran {config_text(kernel.last.config)}")
        return f"<phobos kernel {self.name}({params}) from {kernel.module.filename}: {'; '.join(parts)}>"


# ---------------------------------------------------------------------------
# Grids


def normalize_grid(kernel_name: str, grid: Any, given: str) -> tuple[int, int, int]:
    """1 to 3 non-negative ints (or one int) as an (x, y, z) tuple; LaunchError otherwise."""
    items = (grid,) if _is_count(grid) else grid
    if not isinstance(items, (tuple, list)) or not 1 <= len(items) <= 3 or not all(
            _is_count(n) and n >= 0 for n in items):
        raise LaunchError(f"{kernel_name}: a grid is 1 to 3 non-negative integers, or a function "
                          f"grid(config, sizes) returning them; {given}")
    grid3 = tuple(int(n) for n in items) + (1,) * (3 - len(items))
    if any(n > limit for n, limit in zip(grid3, GRID_LIMITS)):
        raise LaunchError(f"{kernel_name}: grid {grid3} is larger than a GPU allows "
                          f"(x up to {GRID_LIMITS[0]}, y and z up to {GRID_LIMITS[1]})")
    return grid3


def _is_count(value: Any) -> bool:
    """An int or numpy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class _NotPlain(Exception):
    """A value a grid function reads that has no stable description (an object, an array)."""


def function_digest(fn: Callable) -> str | None:
    """What a grid function computes from, as a digest: its code and every value it reads from its closure,
    defaults and module globals (numbers, strings, tuples and lists of them, modules, builtins and other
    such functions); None when it reads anything else, or is not a plain Python function."""
    if not isinstance(fn, types.FunctionType):
        return None
    try:
        described = _plain(fn)
    except (_NotPlain, RecursionError):
        return None
    return f"{fn.__qualname__}:{cache.text_digest(repr(described))[:24]}"


def _plain(value: Any, depth: int = 0) -> Any:
    """A description of `value` that equals another's exactly when they behave alike as grid-function data."""
    if depth > 8:
        raise _NotPlain
    if value is None or isinstance(value, (bool, str, bytes, numbers.Number)):
        return (type(value).__name__, repr(value))
    if isinstance(value, (tuple, list, frozenset, set)):
        items = sorted(value, key=repr) if isinstance(value, (frozenset, set)) else value
        return (type(value).__name__, tuple(_plain(v, depth + 1) for v in items))
    if isinstance(value, dict):
        return ("dict", tuple((_plain(k, depth + 1), _plain(v, depth + 1)) for k, v in value.items()))
    if isinstance(value, types.ModuleType):
        return ("module", value.__name__)
    if isinstance(value, types.BuiltinFunctionType):
        return ("builtin", value.__module__, value.__qualname__)
    if isinstance(value, types.CodeType):
        return ("code", value.co_code, value.co_names, tuple(_plain(c, depth + 1) for c in value.co_consts))
    if isinstance(value, types.FunctionType):
        names = set(_global_names(value.__code__))
        reads = tuple((name, _plain(value.__globals__[name], depth + 1))
                      for name in sorted(names) if name in value.__globals__)
        closure = tuple(_plain(cell.cell_contents, depth + 1) for cell in value.__closure__ or ())
        return ("function", _plain(value.__code__, depth + 1), closure, _plain(value.__defaults__, depth + 1),
                _plain(value.__kwdefaults__, depth + 1), reads)
    raise _NotPlain


def _global_names(code: types.CodeType) -> Iterator[str]:
    """The names a code object (and those nested in it) may read as globals."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def infer_grid(kernel_name: str, hints: Sequence[tuple[str, int] | None], axes_used: set[int],
               sizes: dict[str, int]) -> tuple[int, int, int]:
    """ceil(D / T) programs along each axis with a hint (D, T); 1 along unused axes."""
    grid = []
    for axis, hint in enumerate(hints):
        if hint is not None:
            size, tile = hint
            grid.append(-(-sizes[size] // tile))  # exact for every size (a float quotient is not)
        elif axis in axes_used:
            example = ", ".join(f"g{'xyz'[a]}" for a in range(max(axes_used) + 1))
            example = f"({example},)" if max(axes_used) == 0 else f"({example})"
            raise LaunchError(
                f"{kernel_name}: cannot infer the grid: the kernel uses program_id({axis}) or num_programs({axis}), "
                f"but stores nothing at 'program_id({axis}) * T :+ T' along a tensor size; "
                f"give the grid: mod.{kernel_name}[{example}](...)")
        else:
            grid.append(1)
    return normalize_grid(kernel_name, grid, f"inferred {tuple(grid)}")




# ---------------------------------------------------------------------------
# One kernel: its checked forms, compiled configurations, choices and last launch


@dataclass
class _LastLaunch:
    config: Config
    compiled: CompiledKernel | None
    timings: dict[str, float | str]
    grid: tuple[int, int, int]


@dataclass
class _Variant:
    """A forced configuration, grid specification and tuning, with the calls prepared under them, by signature.

    `fast` holds the prepared calls by signature (a grid function's are
    asked again at every call: fastpath.grid_check).  `direct` is the whole
    call of the most recent signature of positional arguments
    (fastpath.direct_call), tried before anything else.
    """

    forced: Config
    grid: GridSpec
    tuning: autotune.Tuning
    fast: dict[tuple, fastpath.Prepared]
    direct: Callable[[tuple], fastpath.FastCall | None] = lambda values: None  # none prepared yet


#: Grid functions whose prepared calls a kernel keeps (each a _Variant); past this many the oldest is forgotten.
MAX_GRID_FUNCTIONS = 64

#: Compiled kernels of this process, by (source digest, file, kernel, configuration, target).
_compiled_kernels: dict[tuple, CompiledKernel] = {}


class _Kernel:
    """What every callable of one kernel shares: its KernelInfo, compiled forms, tuning choices, the last launch."""

    def __init__(self, info: KernelInfo, source_digest: str, module: Module):
        self.info = info
        self.name = info.name
        self.source_digest = source_digest
        self.module = module
        self.rules = info.rules
        self.space = info.space
        self.stream_keyword = "stream" not in {p.name for p in info.params}  # else `stream=` is the argument
        self._variants: dict[tuple, _Variant] = {}
        self._locate: Callable[[int], int | None] = lambda address: None  # the prepared launches' backend's
        self._choices: dict[tuple, autotune.TuneResult] = {}
        self._ptxas_timeouts: dict[str, str] = {}  # PTX digest -> how ptxas ran out of time in a worker
        self._serving: dict[tuple, list[Config]] = {}  # per (sizes, forced values): the valid configurations
        self._cubins: dict[tuple[str, str], bytes] = {}  # per (PTX, arch): the cubin, decoded once
        self.last: _LastLaunch | None = None

    # --- configurations
    def tuned_key(self) -> dict:
        """The cache key of the mark that this build of Phobos has tuned this kernel of this source for some call
        (Module._start_compile_workers reads it)."""
        return {"tuned": self.name, "source": self.source_digest, "build": cache.phobos_build()}

    def candidates(self, forced: Config) -> list[Config]:
        """The configurations checked before any call: the autotune space with the forced values
        fixed, derived constants at sample sizes (LaunchRules.representative)."""
        return self.rules.representative(forced)

    def refuse_impossible(self, forced: Config) -> None:
        """A PhobosError when no configuration is left under the forced values (each has knobs that conflict
        with them) or no sizes can meet the conditions under them."""
        configs = list(self.rules.autotune_configurations(forced))
        if not configs:
            raise PhobosError(f"{self.name}: with {config_text(forced)}, no configuration of the autotune space is "
                              f"left: the knobs of each conflict with the forced values")
        blamed = [self.rules.ranges(config)[1] for config in configs]
        if blamed and all(blamed):
            raise PhobosError(f"{self.name}: with {config_text(forced)}, no sizes meet {blamed[0].describe()}"
                              + (" together with the other conditions" if len(self.rules.conditions) > 1 else ""))

    def serving(self, sizes: dict[str, int], forced: Config) -> list[Config]:
        """The configurations that may serve a call with these sizes: the autotune space with the
        forced values fixed, derived constants computed, those a @require rejects left out; a
        LaunchError naming the conditions and the sizes when none is left.  Nothing is compiled."""
        if not self.rules.derived and not self.rules.conditions:
            return list(self.rules.autotune_configurations(forced))
        memo = (tuple(sizes.items()), tuple(forced.items()))
        valid = self._serving.get(memo)
        if valid is None:
            valid, rejected = self.rules.serving(self.rules.autotune_configurations(forced), sizes)
            if not valid:
                raise LaunchError(self._unserved(sizes, forced, rejected))
            if len(self._serving) >= SERVING_MEMO:
                self._serving.clear()
            self._serving[memo] = valid
        return valid

    def _unserved(self, sizes: dict[str, int], forced: Config, rejected: list[Rejection]) -> str:
        if forced:
            head = f"{self.name}: configure({config_text(forced)}) cannot serve {sizes_text(sizes)}"
        else:
            head = f"{self.name}: no configuration can serve {sizes_text(sizes)}"
        lines = []
        for condition in self.rules.conditions:
            configs = [r.config for r in rejected if r.condition is condition]
            if configs:
                shown = "; ".join(config_text(c) for c in configs[:3])
                more = f" and {len(configs) - 3} more" if len(configs) > 3 else ""
                lines.append(f"  {condition.describe()} does not hold for {shown}{more}")
        return head + ":\n" + "\n".join(lines)

    def variant(self, forced: Config, spec: GridSpec, tuning: autotune.Tuning) -> _Variant:
        """The one _Variant of a forced configuration, grid and tuning, so that callables made alike share
        prepared calls (a grid function is known by its identity; past MAX_GRID_FUNCTIONS of them the oldest
        variant is forgotten, so a new lambda at every call does not pile up)."""
        key = (tuple(sorted(forced.items())), spec, tuning)
        if key not in self._variants:
            if callable(spec):
                functions = [k for k in self._variants if callable(k[1])]
                if len(functions) >= MAX_GRID_FUNCTIONS:
                    del self._variants[functions[0]]
            self._variants[key] = _Variant(forced, spec, tuning, {})
        return self._variants[key]

    def _compiled_keys(self, config: Config, arch: str, options: CodeOptions = CodeOptions()) -> tuple[tuple, dict]:
        """Where a compiled configuration is kept: in this process's memory and in the disk cache."""
        return ((self.source_digest, self.module.filename, self.name, tuple(config.items()), arch, options),
                {"source": self.source_digest, "filename": self.module.filename, "kernel": self.name,
                 "config": config, "arch": arch, "build": cache.phobos_build(), **options.keywords()})

    def compiled(self, config: Config, arch: str, options: CodeOptions = CodeOptions()) -> CompiledKernel:
        """The kernel compiled for `config` and `arch` (and the call's CodeOptions): from memory, the disk cache,
        or the compiler."""
        compiled = self._cached_compiled(config, arch, options)
        if compiled is None:
            compiled = compile_kernel(self.info.kernel, arch=arch, config=config, **options.keywords())
            self._keep_compiled(config, arch, compiled, options)
        return compiled

    def _cached_compiled(self, config: Config, arch: str, options: CodeOptions = CodeOptions()) -> CompiledKernel | None:
        memory_key, disk_key = self._compiled_keys(config, arch, options)
        if memory_key not in _compiled_kernels:
            compiled = _decoded(cache.default_cache().load(cache.COMPILED, disk_key), cache.decode_compiled)
            if compiled is None:
                return None
            _compiled_kernels[memory_key] = compiled
        return _compiled_kernels[memory_key]

    def _keep_compiled(self, config: Config, arch: str, compiled: CompiledKernel,
                       options: CodeOptions = CodeOptions(), on_disk: bool = False) -> None:
        """Keep `compiled` in memory and in the disk cache (`on_disk`: a compile worker wrote it there)."""
        memory_key, disk_key = self._compiled_keys(config, arch, options)
        store = cache.default_cache()
        (store.remember if on_disk else store.store)(cache.COMPILED, disk_key, cache.encode_compiled(compiled))
        _compiled_kernels[memory_key] = compiled

    def _ptxas_key(self, compiled: CompiledKernel, ptxas: str) -> dict:
        """The key of ptxas's report on a compiled kernel, and of the cubin it made."""
        return cache.assembled_key(compiled.ptx, compiled.arch, ptxas)

    def _label(self, config: Config) -> str:
        return f"{self.module.filename} [{self.name}: {config_text(config)}]"

    def ptxas_report(self, compiled: CompiledKernel, required: bool = False) -> Report | None:
        """ptxas's report on `compiled` (cached, with the cubin); None without ptxas, unless `required`
        (then ToolchainError).

        ptxas runs under toolchain.ptxas_timeout(); a run that takes longer raises PtxasTimeout and
        is not cached (a less busy machine may finish it).
        """
        try:
            ptxas = toolchain.find_ptxas()
        except ToolchainError:
            if required:
                raise
            return None
        key = self._ptxas_key(compiled, ptxas)
        timed_out = self._ptxas_timeouts.get(key["ptx"])
        if timed_out is not None:
            raise PtxasTimeout(timed_out)  # a worker process gave up on it already
        store = cache.default_cache()
        report = _decoded(store.load(cache.PTXAS, key), cache.decode_report)
        if report is None:
            report, cubin = ptxas_assemble(compiled.ptx, compiled.arch, name=self._label(compiled.config),
                                           timeout=toolchain.ptxas_timeout())
            self._keep_assembled(key, report, cubin, compiled)
        return report

    def _keep_assembled(self, key: dict, report: Report, cubin: bytes | None, compiled: CompiledKernel,
                        on_disk: bool = False) -> None:
        """Keep ptxas's report and cubin (of `compiled`) in the cache (`on_disk`: in its memory layer only, a
        compile worker wrote them to disk), and the cubin as bytes for `cubin`."""
        store = cache.default_cache()
        keep = store.remember if on_disk else store.store
        if cubin is not None:
            keep(cache.CUBIN, key, cache.encode_cubin(cubin))
            self._cubins[compiled.ptx, compiled.arch] = cubin
        keep(cache.PTXAS, key, cache.encode_report(report))

    def cubin(self, compiled: CompiledKernel, capability: tuple[int, int]) -> bytes | None:
        """The cubin ptxas already made of `compiled`, when there is one and it is for exactly this GPU."""
        if target(compiled.arch).compute_capability != capability[0] * 10 + capability[1]:
            return None  # PTX for an older target: the driver compiles it for this GPU (sm_90a is 9.0's own)
        known = self._cubins.get((compiled.ptx, compiled.arch))  # (the tuner launches each configuration often)
        if known is not None:
            return known
        try:
            ptxas = toolchain.find_ptxas()
        except ToolchainError:
            return None
        cubin = _decoded(cache.default_cache().load(cache.CUBIN, self._ptxas_key(compiled, ptxas)), cache.decode_cubin)
        if cubin is not None:
            self._cubins[compiled.ptx, compiled.arch] = cubin
        return cubin

    def _compile_ahead(self, configs: list[Config], arch: str, options: CodeOptions,
                       device: runtime.DeviceProperties) -> dict[tuple, Future]:
        """Start compiling (and assembling) the configurations not compiled yet, in worker processes."""
        workers = parallel.pool()
        missing = [config for config in configs if self._cached_compiled(config, arch, options) is None]
        if workers is None or len(missing) < 2:
            return {}
        try:
            toolchain.find_ptxas()
            assemble = True
        except ToolchainError:
            assemble = False
        workers.start()  # their interpreters start up while the order is worked out
        # Costliest first (KernelInfo.unrolled_work estimates it from the tile IR), the configurations dealt to
        # whichever worker is free first: the long compiles start at once instead of trailing behind the
        # short ones.  Ties: the larger product of the values first.
        missing.sort(key=lambda config: (-self._compile_cost(config), -math.prod(config.values())))
        root = str(cache.default_cache().root)
        return {tuple(config.items()): workers.submit(parallel.CompileJob(
            self.module.source, self.module.filename, self.name, config, arch, assemble, self._label(config),
            options.keywords(), device.max_threads_per_block, device.max_shared_bytes_per_block,
            device.max_registers_per_block, root, self._compiled_keys(config, arch, options)[1]))
            for config in missing}

    def _compile_cost(self, config: Config) -> int:
        """KernelInfo.unrolled_work, or 0 for a configuration the tile IR refuses (it fails fast in a worker,
        and then in this process, with its error)."""
        try:
            return self.info.unrolled_work(config)
        except PhobosError:
            return 0

    def _collect(self, future: Future | None, config: Config, arch: str, options: CodeOptions) -> None:
        """Keep what a worker made of `config`; on any failure, nothing (the configuration compiles here)."""
        if future is None:
            return
        try:
            result = future.result()
        except Exception:  # a worker that died: compile here
            return
        if result is None:
            return
        try:
            compiled = cache.decode_compiled(result["compiled"])
            report = cache.decode_report(result["report"]) if "report" in result else None
            cubin = cache.decode_cubin(result["cubin"]) if "cubin" in result else None
        except (cache.MalformedEntry, TypeError, KeyError):
            return
        on_disk = result.get("stored") is True
        self._keep_compiled(config, arch, compiled, options, on_disk)
        if report is not None:
            self._keep_assembled(self._ptxas_key(compiled, toolchain.find_ptxas()), report, cubin, compiled, on_disk)
        if isinstance(result.get("ptxas_timeout"), str):
            self._ptxas_timeouts[cache.text_digest(compiled.ptx)] = result["ptxas_timeout"]

    def inspected(self, forced: Config) -> CompiledKernel:
        """What `.compiled` shows: the last launch's kernel, or the first candidate's."""
        if self.last is not None and self.last.compiled is not None:
            return self.last.compiled
        config = self.last.config if self.last is not None else self.candidates(forced)[0]
        try:
            arch = self.module.backend().arch()
        except ToolchainError:  # no GPU here: show the code for the default target
            arch = DEFAULT_ARCH
        return self.compiled(config, arch)

    # --- grids
    def grid_key(self, configs: list[Config], call: BoundCall, spec: GridSpec) -> tuple[Any, bool]:
        """How the grid enters the autotune key, and whether a choice under it may be kept on disk.

        "inferred", the explicit grid, or for a grid function what it computes
        from (function_digest: its code, and the values it reads from its
        closure, defaults and module) - never its name, which every lambda
        shares.  A function that reads other values (an object, an array) is
        known by the grids it gives for every candidate at these sizes, and its
        choices stay in this process.
        """
        if spec is None:
            return "inferred", True
        if callable(spec):
            digest = function_digest(spec)
            if digest is not None:
                return {"function": digest}, True
            return {"grids": [list(self.grid_for(config, None, call, spec)) for config in configs]}, False
        return list(spec), True

    def grid_for(self, config: Config, compiled: CompiledKernel | None, call: BoundCall,
                 spec: GridSpec) -> tuple[int, int, int]:
        if spec is None:
            hint = compiled.grid_hint if compiled is not None else self.info.grid_hint(config)
            return infer_grid(self.name, hint, self.info.axes_used(config), call.sizes)
        if callable(spec):
            result = spec(dict(config), dict(call.sizes))
            return normalize_grid(self.name, result, f"the grid function returned {result!r}")
        return spec

    # --- calling
    def call(self, variant: _Variant, args: tuple, kwargs: dict[str, Any]) -> None:
        """A call: the prepared launch of its signature when there is one, else the full path."""
        stream = kwargs.pop("stream", None) if self.stream_keyword and "stream" in kwargs else None
        fast = variant.fast
        if fast:  # some signature was prepared, so the backend prepares launches
            values = args + tuple(kwargs.values()) if kwargs else args
            try:
                parts, pointers, hints = fastpath.probe(values, self._locate)
            except fastpath.Unprobed:
                pass
            else:
                signature = fast.get((tuple(kwargs), parts))
                prepared = signature.get(pointers) if signature is not None else None
                if prepared is not None:
                    try:
                        prepared(values, pointers, hints, stream)
                        self.last = prepared.last
                        if prepared.direct is not None and stream is None:
                            variant.direct = prepared.direct
                        return
                    except (fastpath.ScalarOverflow, fastpath.GridChanged):
                        pass  # the full path reports it, or launches on the new grid
        self.launch(variant, args, kwargs, stream)

    def launch(self, variant: _Variant, args: Sequence[Any], kwargs: dict[str, Any], stream: Any) -> None:
        """The full path: bind with every check, choose, compile, launch; keep the prepared launch for the
        call's signature."""
        backend = self.module.backend()
        call = bind(self.name, self.info.params, self.info.size_names, args, kwargs,
                    host_only=backend.name if backend.host_only else None, index_widths=self.info.index_widths)
        device = call_device(call, backend.locate) if hasattr(backend, "locate") else 0
        stream_of = self._stream_source(call, device)
        handle = self._stream(backend, stream, stream_of, device, call)
        self._refuse_during_capture(backend, call, handle)
        self._refuse_wrapping_indices(call, variant)
        config, timings = self.choose(call, backend, variant.forced, variant.grid, variant.tuning, device)
        arch = backend.arch(device)
        compiled = self.compiled(config, arch, code_options(call, backend, arch)) if backend.compiles else None
        grid = self.grid_for(config, compiled, call, variant.grid)
        problem = self.wrapping_indices(config, compiled, call, variant.grid)
        if problem is not None:
            raise problem
        self.last = _LastLaunch(config, compiled, timings, grid)
        if 0 in grid:
            if hasattr(backend, "prepare"):
                self._keep(variant, None, call, stream_of, device)
            return  # an empty tensor: nothing to do
        properties = backend.device(device)
        problem = autotune.launch_problem(compiled, properties) if compiled is not None and properties else None
        if problem is not None:
            raise LaunchError(f"{self.name}: configuration {config_text(config)} cannot run on this GPU: {problem}")
        cubin = self.cubin(compiled, properties.compute_capability) if compiled is not None and properties else None
        launch = Launch(self.info.checked(config), compiled, grid, call, stream=handle, device=device, cubin=cubin)
        queued = backend.prepare(launch) if hasattr(backend, "prepare") else None
        if queued is None:
            backend.run(launch)
            return
        queued(handle, launch.queued_arguments())
        self._keep(variant, queued, call, stream_of, device, launch)

    def _stream_source(self, call: BoundCall, device: int) -> fastpath.StreamSource:
        tensors = [name in call.tensors and call.tensors[name].host is None for name in call.given]
        return fastpath.stream_source(list(call.given.values()), tensors, device)

    def _stream(self, backend: Backend, stream: Any, stream_of: fastpath.StreamSource, device: int,
                call: BoundCall) -> int:
        """The raw stream handle of a call: the `stream=` argument (checked), or the caller's current stream."""
        if stream is not None:
            handle = fastpath.stream_handle(stream)
            if hasattr(backend, "check_stream"):
                backend.check_stream(handle, device, f"{self.name}: argument 'stream'")
            return handle
        if not hasattr(backend, "prepare"):
            return 0
        return stream_of([call.tensors[name].stream if name in call.tensors else None for name in call.given])

    def _refuse_during_capture(self, backend: Backend, call: BoundCall, stream: int) -> None:
        """A CUDA graph being captured on the stream allows no copy, allocation, compile or wait."""
        if not hasattr(backend, "capturing") or not backend.capturing(stream):
            return
        for name, tensor in call.tensors.items():
            if tensor.host is not None:
                raise LaunchError(f"{self.name}: argument '{name}' is host memory ({type(tensor.source).__name__}), "
                                  f"which would be copied to the GPU and back; that is not possible while a CUDA "
                                  f"graph is being captured on the stream: pass device memory (a torch or CuPy "
                                  f"tensor)")
        raise LaunchError(f"{self.name}: first call with these argument types, shapes and devices while a CUDA graph "
                          f"is being captured on the stream; a first call binds, tunes, compiles and loads, which "
                          f"capture forbids: call the kernel once with the same kinds of arguments before "
                          f"capturing (a warm-up, as torch.cuda.graph asks)")

    def wrapping_indices(self, config: Config, compiled: CompiledKernel | None, call: BoundCall,
                         spec: GridSpec) -> LaunchError | None:
        """With 64-bit indices: why `config` would compute an index that wraps in 32 bits over the call's grid
        (phobos.middle.index_reach, through KernelInfo), or None."""
        if call.index_bits != 64:
            return None
        grid = self.grid_for(config, compiled, call, spec)
        return self.info.index_reach(config).problem(self.name, grid, call.sizes)

    def _refuse_wrapping_indices(self, call: BoundCall, variant: _Variant) -> None:
        """A LaunchError, before any tuning, when every configuration serving the call would wrap an index."""
        if call.index_bits != 64:
            return
        problems = [self.wrapping_indices(config, None, call, variant.grid)
                    for config in self.serving(call.sizes, variant.forced)]
        if all(problems):
            raise problems[0]

    def _keep(self, variant: _Variant, queued: Any, call: BoundCall, stream_of: fastpath.StreamSource,
              device: int, launch: Launch | None = None) -> None:
        """Keep the prepared launch of this call's signature for the next calls (see phobos.launch.fastpath)."""
        backend = self.module.backend()
        self._locate = backend.locate
        try:
            parts = fastpath.probe(list(call.given.values()), self._locate)[0]
        except fastpath.Unprobed:
            return
        key = (tuple(call.given)[call.positional:], parts)
        positions = {name: index for index, name in enumerate(call.given)}
        recipe = []
        for param in (launch.compiled.params if launch is not None else ()):
            if param.kind == "tensor":
                recipe.append(("pointer", positions[param.name]))
            elif param.kind == "scalar":
                kind = type(call.given[param.name])
                recipe.append(("scalar", positions[param.name], fastpath.scalar_converter(self.name, param, kind)))
            elif param.kind == "tensor_map":
                tensor = call.tensors[param.name]
                recipe.append(("tensor_map", positions[param.name],
                               runtime.MapEncoder(tensor.shape, param.map_dtype, param.box, tensor.strides)))
            elif param.kind == "programs":  # a persistent kernel's virtual grid, fixed with the sizes
                recipe.append(("const", launch.grid[param.dims[0]]))
            elif param.kind == "stride":  # a strided view's, fixed by the signature as its shape is
                recipe.append(("const", call.tensors[param.name].strides[param.dims[0]]))
            else:
                recipe.append(("const", call.sizes[param.name]))
        tensors = [call.tensors[name] for name in call.given if name in call.tensors]
        pairs = tuple((positions[read.param.name], positions[written.param.name], read.nbytes, written.nbytes)
                      for read in tensors if not read.param.written for written in tensors if written.param.written)
        aliased = launch is not None and not launch.compiled.read_only_cache
        check = getattr(backend, "check_stream", lambda handle, device, what: None)
        grid_holds = None
        if callable(variant.grid):
            grid_holds = fastpath.grid_check(variant.grid, self.last.config, call.sizes, self.last.grid,
                                             lambda result: normalize_grid(self.name, result, ""))
        positional = not key[0]
        tensor_check = fastpath.torch_tensor_check(list(call.given.values()), parts) if positional else None
        fast = fastpath.FastCall(queued, recipe, stream_of, self.last,
                                 lambda handle: check(handle, device, f"{self.name}: argument 'stream'"),
                                 pairs, aliased, parts if positional else None, self._locate, grid_holds, self,
                                 tensor_check)
        if key in variant.fast:
            variant.fast[key].add(fast)
        else:
            if len(variant.fast) >= fastpath.MAX_PREPARED:
                del variant.fast[next(iter(variant.fast))]
            variant.fast[key] = fastpath.Prepared(fast)
        if fast.direct is not None:
            variant.direct = fast.direct

    def choose(self, call: BoundCall, backend: Backend, forced: Config, spec: GridSpec,
               tuning: autotune.Tuning, device_index: int = 0) -> tuple[Config, dict[str, float | str]]:
        """The configuration to launch, and the timings it was chosen by (empty when not tuned).

        Only configurations valid for the call's sizes are candidates; a choice is kept under the
        tuning key and the candidates it was chosen from, so it is never reused where it is not valid."""
        configs = self.serving(call.sizes, forced)
        if not backend.tunes:
            return self.first_fitting(configs, call, backend)
        untimed = untimed_reason(configs)
        if untimed is not None:
            return configs[0], {config_text(configs[0]): untimed}
        device, arch = backend.device(device_index), backend.arch(device_index)
        key, keying = tuning.key_for(self.rules, call.sizes)
        grid_key, persistent = self.grid_key(configs, call, spec)
        memory_key = (cache.canonical_json(key), keying, tuple(tuple(c.items()) for c in configs),
                      tuning.pruning_key(), cache.canonical_json(grid_key), device.name, arch)
        if memory_key in self._choices:
            choice = self._choices[memory_key]
            return choice.config, choice.timings
        configs = tuning.prune(configs, call.sizes)
        if len(configs) == 1:
            self._choices[memory_key] = autotune.TuneResult(
                configs[0], {config_text(configs[0]): "not timed: the only configuration the cost model kept"})
            return self._choices[memory_key].config, self._choices[memory_key].timings
        disk_key = {"source": self.source_digest, "kernel": self.name, "key": key, "keying": keying,
                    "dtypes": {p.name: p.dtype.value for p in self.info.params}, "candidates": configs,
                    "grid": grid_key, "device": device.name, "arch": arch, "build": cache.phobos_build()}
        store = cache.default_cache() if persistent else None
        choice = _decoded(store.load(cache.AUTOTUNE, disk_key), lambda payload: _decode_choice(payload, configs)) \
            if store is not None else None
        if choice is None:
            first = configs[0]
            if 0 in self.grid_for(first, None, call, spec):  # from the tile IR: the first may not compile
                return first, {config_text(first): "not timed: the grid is empty, so nothing runs"}
            choice = self.tune(call, backend, configs, spec, device_index)
            if store is not None:
                store.store(cache.AUTOTUNE, disk_key, {"config": choice.config, "timings": choice.timings})
                store.store(cache.TUNED, self.tuned_key(), True)
        self._choices[memory_key] = choice
        return choice.config, choice.timings

    def first_fitting(self, configs: list[Config], call: BoundCall,
                      backend: Backend) -> tuple[Config, dict[str, float | str]]:
        """On the CPU: the first of `configs` that fits the target the backend compiles for (compile_kernel and
        check_resources), as the GPU's autotuner skips those that do not, and the timings that say so; when
        none fits, the first one's ResourceError, noting the others'."""
        arch = backend.arch()
        options = code_options(call, backend, arch)
        timings: dict[str, float | str] = {}
        errors: list[ResourceError] = []
        for config in configs:
            try:
                check_resources(self.compiled(config, arch, options), self.info.kernel.loc)
            except ResourceError as error:
                timings[config_text(config)] = error.message
                errors.append(error)
                continue
            except PhobosError:
                if backend.compiles:
                    raise
                # the back end cannot compile it (yet): the interpreter runs it all the same, unchecked
            timings[config_text(config)] = untimed_reason(configs) or (
                f"not timed: mode '{backend.name}' runs the first configuration that serves the call and fits "
                f"{arch} (only mode 'gpu' times them)")
            return config, timings
        first = errors[0]
        first.notes += [Note(f"nor does configuration {text}: {reason}") for text, reason in list(timings.items())[1:]]
        raise first

    def tune(self, call: BoundCall, backend: Backend, configs: list[Config], spec: GridSpec,
             device_index: int = 0) -> autotune.TuneResult:
        """Time every configuration that can run; tensors the kernel writes are replaced by scratch copies."""
        device, arch = backend.device(device_index), backend.arch(device_index)
        scratch: dict[str, Any] | None = None
        options = code_options(call, backend, arch)
        ahead = self._compile_ahead(configs, arch, options, device)

        def evaluate(config: Config) -> tuple[Config, CompiledKernel]:
            self._collect(ahead.pop(tuple(config.items()), None), config, arch, options)
            compiled = self.compiled(config, arch, options)
            try:
                autotune.screen(compiled, device, lambda: self.ptxas_report(compiled))
            except autotune.Skipped as skipped:
                if skipped.fallback is not None:  # it may still be timed, as evaluate prepares it
                    skipped.fallback = (config, compiled)
                raise
            return config, compiled

        def measure(prepared: tuple[Config, CompiledKernel], timing: autotune.Timing) -> float:
            nonlocal scratch
            config, compiled = prepared
            grid = self.grid_for(config, compiled, call, spec)
            if 0 in grid:
                raise autotune.Skipped("its grid is empty")
            problem = self.wrapping_indices(config, compiled, call, spec)
            if problem is not None:
                raise autotune.Skipped(problem.message)
            if scratch is None:
                scratch = {}
                for name, tensor in call.tensors.items():
                    if tensor.param.written or tensor.host is not None:
                        scratch[name] = backend.device_copy(tensor)
            return backend.time(Launch(self.info.checked(config), compiled, grid, call, scratch,
                                       device=device_index, cubin=self.cubin(compiled, device.compute_capability)),
                                timing.warmup, timing.repeat)

        try:
            return autotune.tune(self.name, configs, evaluate, measure, completion_order(configs, ahead))
        finally:
            for future in ahead.values():
                future.cancel()
            for copy in (scratch or {}).values():
                backend.free(copy)


def untimed_reason(configs: list[Config]) -> str | None:
    """Why a call on the GPU runs the first of `configs` without timing them (what `.timings` then says), or
    None."""
    if len(configs) == 1:
        return "not timed: the only configuration that serves the call"
    if not autotune_enabled():
        return "not timed: PHOBOS_AUTOTUNE=0 runs the first configuration that serves the call"
    return None


def completion_order(configs: list[Config], ahead: dict[tuple, Future]) -> Iterator[Config]:
    """The configurations in the order they can be timed: those compiled already, then the others as their
    compiles in the worker processes finish, so the GPU times one while the rest still compile."""
    pending = {}
    for config in configs:
        future = ahead.get(tuple(config.items()))
        if future is None:
            yield config
        else:
            pending[future] = config
    for future in as_completed(pending):
        yield pending[future]


def code_options(call: BoundCall, backend: Backend, arch: str) -> CodeOptions:
    """The code a call needs: 64-bit indices past i32; no read-only-cache loads when a tensor the kernel only
    reads overlaps one it writes (an in-place call such as add(x, y, x)); TMA copies on a target with wgmma
    where every tensor can have a tensor map (`tensor_map.describable`, from its strides too) that the
    backend can build - the GPU over device memory only, the emulator over its arrays; strides as launch
    values for the tensors passed as views that are not C-contiguous, specialised on a last stride of 1
    (TensorArgument.specialisation; a contiguous call's options, and cache keys, stay what they were)."""
    tma = target(arch).wgmma and call.index_bits == 32 and all(
        (tensor.host is None or backend.maps_host_arrays)
        and describable(tensor.shape, tensor.param.dtype.nbytes, tensor.pointer, tensor.strides)
        for tensor in call.tensors.values())
    strided = tuple(s for s in (tensor.specialisation() for tensor in call.tensors.values()) if s is not None)
    return CodeOptions(call.index_bits, not overlapping_tensors(call), tma, strided)


def _decoded(payload: Any, decode: Callable[[Any], Any]) -> Any:
    """A cache payload decoded, or None when there is none or it does not decode."""
    if payload is None:
        return None
    try:
        return decode(payload)
    except cache.MalformedEntry:
        return None


def _decode_choice(payload: Any, configs: list[Config]) -> autotune.TuneResult:
    try:
        config, timings = payload["config"], payload["timings"]
        if config not in configs or not isinstance(timings, dict) or not all(
                isinstance(text, str) and isinstance(value, (float, str)) for text, value in timings.items()):
            raise cache.MalformedEntry("not an autotune choice")
    except (KeyError, TypeError) as error:
        raise cache.MalformedEntry(f"not an autotune choice: {error}") from None
    return autotune.TuneResult(dict(config), dict(timings))
