# Kernels you call like functions.
#
#   mod = phobos.jit(source)            # or phobos.load("kernels.phobos")
#   mod.sgemm(A, B, C, alpha=1.5, beta=0.5)
#   mod.sgemm[(gx, gy)](A, B, C, 1.5, 0.5)          # an explicit grid
#   mod.sgemm.configure(TILE_M=64)(A, B, C, 1.5, 0.5)  # a forced configuration
#
# A source is parsed and checked, under every autotune configuration, when it
# is loaded, so its errors show up there, with their locations; a kernel is
# compiled only when it is first called, one configuration at a time.  A call
# binds its arguments (phobos.launch.binding: shapes give the sizes, every mismatch
# is a LaunchError before any GPU work), picks a configuration, works out the
# grid and hands the launch to a backend (phobos.run.backends: the GPU, or the
# interpreter or PTX emulator on the CPU).
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

import numbers
import os
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from ..frontend import ast
from . import autotune, cache
from ..run import runtime
from .. import toolchain
from ..run.backends import DEFAULT_ARCH, Backend, Launch, check_mode, select_backend
from .binding import BoundCall, bind
from ..compiler import CompiledKernel, grid_hints, compile_kernel, parse_source
from ..configuration import config_text
from ..errors import ErrorList, LaunchError, PhobosError, ToolchainError
from ..middle.irgen import generate, kernel_signature
from ..ptxcheck import Report
from ..ptxcheck import check as ptxas_check
from ..frontend.launch_rules import LaunchRules, Rejection, sizes_text, term_text
from ..frontend.sema import CheckedKernel, check_kernel, check_program, launch_rules

#: The most programs a grid may have along x, y and z.
GRID_LIMITS = (2**31 - 1, 65535, 65535)

#: How many size combinations a kernel remembers its valid configurations for.
SERVING_MEMO = 1024

#: Builtins whose argument is a grid axis.
GRID_BUILTINS = ("program_id", "num_programs")

Config = dict[str, int]
GridSpec = tuple[int, int, int] | Callable[[Config, dict[str, int]], Any] | None


# ---------------------------------------------------------------------------
# Entry points


def jit(src: str, filename: str | None = None, mode: Any = None) -> Module:
    """Parse and check `src`; the result has one callable per kernel (`mod.sgemm`).

    `mode` is "gpu", "interpret" or "emulate", or None to choose when the first
    kernel runs (PHOBOS_MODE if set, else the GPU if there is one, else the
    interpreter: phobos.run.backends.default_mode).  `filename` names
    the source in error messages (default: `<source XXXXXXXX>`, from its hash).
    """
    if not isinstance(src, str):
        raise PhobosError(f"phobos.jit takes the source text as a str, got {type(src).__name__}")
    if filename is not None and not isinstance(filename, str):
        raise PhobosError(f"phobos.jit: filename must be a str, got {type(filename).__name__}")
    return Module(src, filename, mode)


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
        self.filename = filename or f"<source {digest[:8]}>"
        self.mode = mode
        self._backend: Backend | None = None
        program = parse_source(source, self.filename)
        errors = check_program(program)
        if errors:
            raise errors[0] if len(errors) == 1 else ErrorList(errors)
        self.kernels: dict[str, KernelFunction] = {
            k.name: KernelFunction(_Kernel(k, digest, self)) for k in program.kernels}

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
    """One kernel, callable like a function: `f(*args, **kwargs)` launches it and waits.

    `f[grid]` is the same kernel with an explicit grid (1 to 3 ints, or a
    function `grid(config, sizes) -> tuple`); `f.configure(NAME=value, ...)`
    the same kernel with those autotune parameters fixed (the rest are still
    tuned).  After a call, `.config`, `.grid`, `.compiled`, `.ptx`, `.ptxas`
    and `.timings` describe what ran and what the autotuner saw.
    """

    def __init__(self, kernel: _Kernel, forced: Config | None = None, grid: GridSpec = None,
                 tuning: autotune.Tuning | None = None):
        self._kernel = kernel
        self._forced = dict(forced or {})
        self._grid = grid
        self._tuning = tuning or autotune.Tuning()

    @property
    def name(self) -> str:
        return self._kernel.name

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self._kernel.launch(args, kwargs, self._forced, self._grid, self._tuning)

    def __getitem__(self, grid: Any) -> KernelFunction:
        spec = grid if callable(grid) else normalize_grid(self.name, grid, f"got {grid!r}")
        return KernelFunction(self._kernel, self._forced, spec, self._tuning)

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
            if name not in space:
                raise PhobosError(f"{self.name}: no autotune parameter '{name}' "
                                  f"(it has: {', '.join(space) or 'none'})")
            if not isinstance(value, int) or isinstance(value, bool):
                raise PhobosError(f"{self.name}: autotune parameter '{name}' must be an integer, got {value!r}")
        forced = {**self._forced, **values}
        self._kernel.refuse_impossible(forced)
        for config in self._kernel.candidates(forced):
            self._kernel.checked(config)
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
    def compiled(self) -> CompiledKernel:
        """The CompiledKernel of the last launch; before one, of the configuration a launch would start from."""
        return self._kernel.inspected(self._forced)

    @property
    def ptx(self) -> str:
        return self.compiled.ptx

    @property
    def ptxas(self) -> Report:
        """What ptxas reports for `.compiled`: registers, spills, shared memory (needs ptxas)."""
        return self._kernel.ptxas_report(self.compiled, required=True)

    @property
    def timings(self) -> dict[str, float | str]:
        """Per configuration of the last tuning: milliseconds, or why it was skipped (empty when untuned)."""
        last = self._kernel.last
        return dict(last.timings) if last is not None else {}

    def __repr__(self) -> str:
        kernel = self._kernel
        params = ", ".join(f"{p.name}: " + (f"tensor<{p.dtype}>[{', '.join(map(str, p.dims))}]"
                                            if p.kind == "tensor" else str(p.dtype)) for p in kernel.params)
        configs = kernel.rules.autotune_configurations(self._forced)
        space = ", ".join(f"{n} in {v}" if n not in self._forced else f"{n} = {self._forced[n]}"
                          for n, v in kernel.space.items())
        parts = [f"{len(configs)} configuration{'s' * (len(configs) != 1)}" + (f" ({space})" if space else "")]
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


def _calls(node: Any) -> Iterator[ast.Call]:
    """Every call in an AST subtree."""
    if isinstance(node, list):
        for item in node:
            yield from _calls(item)
    elif is_dataclass(node) and not isinstance(node, type):
        if isinstance(node, ast.Call):
            yield node
        for f in fields(node):
            yield from _calls(getattr(node, f.name))


# ---------------------------------------------------------------------------
# One kernel: its checked forms, compiled configurations, choices and last launch


@dataclass
class _LastLaunch:
    config: Config
    compiled: CompiledKernel | None
    timings: dict[str, float | str]
    grid: tuple[int, int, int]


#: Compiled kernels of this process, by (source digest, file, kernel, configuration, target).
_compiled_kernels: dict[tuple, CompiledKernel] = {}


class _Kernel:
    """What every callable of one kernel shares: checked and compiled forms, tuning choices, the last launch."""

    def __init__(self, node: ast.Kernel, source_digest: str, module: Module):
        self.node = node
        self.name = node.name
        self.source_digest = source_digest
        self.module = module
        self.rules = launch_rules(node)
        self.space = self.rules.space
        signature = kernel_signature(check_kernel(node))
        self.params = [p for p in signature if p.kind != "size"]
        self.size_names = [p.name for p in signature if p.kind == "size"]
        self._checked: dict[tuple, CheckedKernel] = {}
        self._tile_hints: dict[tuple, list] = {}
        self._axes_used: dict[tuple, set[int]] = {}  # per configuration: grid axes the kernel reads
        self._choices: dict[tuple, autotune.TuneResult] = {}
        self._serving: dict[tuple, list[Config]] = {}  # per (sizes, forced values): the valid configurations
        self.last: _LastLaunch | None = None

    # --- configurations
    def candidates(self, forced: Config) -> list[Config]:
        """The configurations checked before any call: the autotune space with the forced values
        fixed, derived constants at sample sizes (LaunchRules.representative)."""
        return self.rules.representative(forced)

    def refuse_impossible(self, forced: Config) -> None:
        """A PhobosError when no sizes can meet the conditions under the forced values."""
        blamed = [self.rules.ranges(config)[1] for config in self.rules.autotune_configurations(forced)]
        if blamed and all(blamed):
            raise PhobosError(f"{self.name}: with {config_text(forced)}, no sizes meet {blamed[0].describe()}"
                              + (" together with the other conditions" if len(self.rules.conditions) > 1 else ""))

    def serving(self, sizes: dict[str, int], forced: Config) -> list[Config]:
        """The configurations that may serve a call with these sizes: the autotune space with the
        forced values fixed, derived constants computed, those a @require rejects left out; a
        LaunchError naming the conditions and the sizes when none is left.  Nothing is compiled."""
        if not self.rules.derived and not self.rules.conditions:
            return self.rules.autotune_configurations(forced)
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

    def checked(self, config: Config) -> CheckedKernel:
        key = tuple(config.items())
        if key not in self._checked:
            self._checked[key] = check_kernel(self.node, config)
        return self._checked[key]

    def compiled(self, config: Config, arch: str) -> CompiledKernel:
        """The kernel compiled for `config` and `arch`: from memory, the disk cache, or the compiler."""
        memory_key = (self.source_digest, self.module.filename, self.name, tuple(config.items()), arch)
        if memory_key in _compiled_kernels:
            return _compiled_kernels[memory_key]
        disk_key = {"source": self.source_digest, "filename": self.module.filename, "kernel": self.name,
                    "config": config, "arch": arch, "build": cache.phobos_build()}
        store = cache.default_cache()
        compiled = _decoded(store.load(cache.COMPILED, disk_key), cache.decode_compiled)
        if compiled is None:
            compiled = compile_kernel(self.node, arch=arch, config=config)
            store.store(cache.COMPILED, disk_key, cache.encode_compiled(compiled))
        _compiled_kernels[memory_key] = compiled
        return compiled

    def ptxas_report(self, compiled: CompiledKernel, required: bool = False) -> Report | None:
        """ptxas's report on `compiled` (cached); None without ptxas, unless `required` (then ToolchainError).

        ptxas runs under toolchain.ptxas_timeout(); a run that takes longer raises PtxasTimeout and
        is not cached (a less busy machine may finish it).
        """
        try:
            ptxas = toolchain.find_ptxas()
        except ToolchainError:
            if required:
                raise
            return None
        key = {"ptx": cache.text_digest(compiled.ptx), "arch": compiled.arch, "ptxas": ptxas,
               "build": cache.phobos_build()}
        store = cache.default_cache()
        report = _decoded(store.load(cache.PTXAS, key), cache.decode_report)
        if report is None:
            label = f"{self.module.filename} [{self.name}: {config_text(compiled.config)}]"
            report = ptxas_check(compiled.ptx, compiled.arch, name=label, timeout=toolchain.ptxas_timeout())
            store.store(cache.PTXAS, key, cache.encode_report(report))
        return report

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
    def axes_used(self, config: Config) -> set[int]:
        key = tuple(config.items())
        if key not in self._axes_used:
            checked = self.checked(config)
            self._axes_used[key] = {checked.const_of(c.args[0]) for c in _calls(self.node.body)
                                    if c.func in GRID_BUILTINS}
        return self._axes_used[key]

    def grid_hint(self, config: Config, compiled: CompiledKernel | None) -> list:
        """CompiledKernel.grid_hint; for backends that run the checked kernel, the same hint from its tile IR."""
        if compiled is not None:
            return compiled.grid_hint
        key = tuple(config.items())
        if key not in self._tile_hints:
            self._tile_hints[key] = grid_hints(generate(self.checked(config)))
        return self._tile_hints[key]

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
            return infer_grid(self.name, self.grid_hint(config, compiled), self.axes_used(config), call.sizes)
        if callable(spec):
            result = spec(dict(config), dict(call.sizes))
            return normalize_grid(self.name, result, f"the grid function returned {result!r}")
        return spec

    # --- launching
    def launch(self, args: Sequence[Any], kwargs: dict[str, Any], forced: Config, spec: GridSpec,
               tuning: autotune.Tuning) -> None:
        backend = self.module.backend()
        call = bind(self.name, self.params, self.size_names, args, kwargs,
                    host_only=backend.name if backend.host_only else None)
        config, timings = self.choose(call, backend, forced, spec, tuning)
        compiled = self.compiled(config, backend.arch()) if backend.compiles else None
        grid = self.grid_for(config, compiled, call, spec)
        self.last = _LastLaunch(config, compiled, timings, grid)
        if 0 in grid:
            return  # an empty tensor: nothing to do
        device = backend.device()
        problem = autotune.launch_problem(compiled, device) if compiled is not None and device else None
        if problem is not None:
            raise LaunchError(f"{self.name}: configuration {config_text(config)} cannot run on this GPU: {problem}")
        backend.run(Launch(self.checked(config), compiled, grid, call))

    def choose(self, call: BoundCall, backend: Backend, forced: Config, spec: GridSpec,
               tuning: autotune.Tuning) -> tuple[Config, dict[str, float | str]]:
        """The configuration to launch, and the timings it was chosen by (empty when not tuned).

        Only configurations valid for the call's sizes are candidates; a choice is kept under the
        tuning key and the candidates it was chosen from, so it is never reused where it is not valid."""
        configs = self.serving(call.sizes, forced)
        if len(configs) == 1 or not backend.tunes or not autotune_enabled():
            return configs[0], {}
        device, arch = backend.device(), backend.arch()
        key, keying = tuning.key_for(self.rules, call.sizes)
        grid_key, persistent = self.grid_key(configs, call, spec)
        memory_key = (cache.canonical_json(key), keying, tuple(tuple(c.items()) for c in configs),
                      tuning.pruning_key(), cache.canonical_json(grid_key), device.name, arch)
        if memory_key in self._choices:
            choice = self._choices[memory_key]
            return choice.config, choice.timings
        configs = tuning.prune(configs, call.sizes)
        if len(configs) == 1:
            self._choices[memory_key] = autotune.TuneResult(configs[0])
            return configs[0], {}
        disk_key = {"source": self.source_digest, "kernel": self.name, "key": key, "keying": keying,
                    "dtypes": {p.name: p.dtype.value for p in self.params}, "candidates": configs,
                    "grid": grid_key, "device": device.name, "arch": arch, "build": cache.phobos_build()}
        store = cache.default_cache() if persistent else None
        choice = _decoded(store.load(cache.AUTOTUNE, disk_key), lambda payload: _decode_choice(payload, configs)) \
            if store is not None else None
        if choice is None:
            first = configs[0]
            if 0 in self.grid_for(first, None, call, spec):  # from the tile IR: the first may not compile
                return first, {}  # nothing would run, so there is nothing to time
            choice = self.tune(call, backend, configs, spec)
            if store is not None:
                store.store(cache.AUTOTUNE, disk_key, {"config": choice.config, "timings": choice.timings})
        self._choices[memory_key] = choice
        return choice.config, choice.timings

    def tune(self, call: BoundCall, backend: Backend, configs: list[Config], spec: GridSpec) -> autotune.TuneResult:
        """Time every configuration that can run; tensors the kernel writes are replaced by scratch copies."""
        device, arch = backend.device(), backend.arch()
        scratch: dict[str, Any] | None = None

        def evaluate(config: Config) -> tuple[Config, CompiledKernel]:
            compiled = self.compiled(config, arch)
            autotune.screen(compiled, device, lambda: self.ptxas_report(compiled))
            return config, compiled

        def measure(prepared: tuple[Config, CompiledKernel]) -> float:
            nonlocal scratch
            config, compiled = prepared
            grid = self.grid_for(config, compiled, call, spec)
            if 0 in grid:
                raise autotune.Skipped("its grid is empty")
            if scratch is None:
                scratch = {}
                for name, tensor in call.tensors.items():
                    if tensor.param.written or tensor.host is not None:
                        scratch[name] = backend.device_copy(tensor)
            return backend.time(Launch(self.checked(config), compiled, grid, call, scratch))

        try:
            return autotune.tune(self.name, configs, evaluate, measure)
        finally:
            for copy in (scratch or {}).values():
                backend.free(copy)


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
