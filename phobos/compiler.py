# The compiler driver: Phobos source -> PTX, one stage after another.
#
#   parse -> check (one autotune configuration) -> irgen -> tile passes
#   -> lower (tiles onto threads) -> math expansion -> thread passes
#   -> instruction selection -> register allocation -> PTX text
#
# `compile` runs the whole pipeline for one kernel and one configuration and
# returns a CompiledKernel with everything a launcher needs; `compile_to_ptx`
# is the short form; `compile_all` does every kernel and configuration of a
# file (for ptxcheck and the autotuner).  The targets' limits are here too
# (`Target`): shared memory per CTA, which a configuration past it cannot
# have (compile_kernel raises a ResourceError at what needs it; threads per
# CTA are bounded by WARPS, which the checker keeps to 32, and lowering adds
# a producer warpgroup only where it fits), and registers, which ptxas
# spills rather than refuse:
# `register_excess` says, from the compiler's estimate, when no allocation
# can fit (the autotuner skips such configurations, `check_resources` makes
# it the ResourceError that `phobos check` and the CPU modes report, and
# `fitting` runs the whole check per configuration).  `kernel_infos` is what launchers
# start from: one KernelInfo per kernel of a checked source (its parameters,
# size names and autotune space; per configuration the checked kernel, the grid
# axes it reads and the grid hint of its stores), so that no launcher walks
# the syntax tree or imports the front end itself.  Anything that escapes a stage and is
# not a PhobosError is a compiler bug; it is reported as an InternalError that
# names the kernel and configuration, never as a bare traceback.
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, fields
from typing import Any

from .version import __version__
from .configuration import config_text
from .log import Progress
from .frontend import ast
from .errors import (ErrorList, InternalError, Loc, Note, PhobosError, ResourceError, SemanticError, SourceFile,
                     raised_at_call_site)
from .middle.ir import Function, KernelParam, Op, format_function, verify, walk
from .middle.index_reach import IndexReach, index_reach
from .middle.irgen import generate, kernel_signature
from .types import TileType
from .lower.schedule import REGISTER_FILE, entry_registers
from .frontend.parser import parse_source, pick_kernel
from .middle.passes import PASSES, THREAD_PIPELINE, TILE_PIPELINE, run_pipeline
from .frontend.launch_rules import LaunchRules, Rejection, next_pow2, sizes_text, term_text  # noqa: F401 (for launchers)
from .frontend.sema import CheckedKernel, check_kernel, check_program, configurations, launch_rules, resolve_config


#: The most registers one thread can have (every NVIDIA GPU since sm_35).
MAX_REGISTERS_PER_THREAD = 255

#: How far the compiler's register estimate may exceed a limit before a kernel is taken not to fit at all
#: (ptxas is not even asked): measured estimates ran up to 1.6 times ptxas's counts.
ESTIMATE_SLACK = 2


@dataclass(frozen=True)
class Target:
    arch: str
    shared_bytes: int  # the most dynamic shared memory one CTA may have
    cp_async: bool
    tensor_cores: bool  # mma.sync of bf16, f16 and tf32 (m16n8k16, m16n8k8)
    wgmma: bool = False  # wgmma.mma_async (sm_90a)
    registers_per_cta: int = REGISTER_FILE  # the register file one CTA may use (32-bit registers)

    def shared_limit(self, ctas_per_sm: int | None) -> int:
        """The most shared memory one CTA may have when `ctas_per_sm` of them must fit on an SM at once.
        From sm_80 on each CTA also takes 1 KiB the system reserves, and an SM has that much more than
        one CTA may have (164 KiB and 163 on sm_80); before, the two are the same."""
        if not ctas_per_sm:
            return self.shared_bytes
        return min(self.shared_bytes, self.shared_per_multiprocessor // ctas_per_sm - self.reserved_per_cta)

    @property
    def reserved_per_cta(self) -> int:
        """Shared memory the system reserves for each CTA (from sm_80 on)."""
        return 1024 if self.compute_capability >= 80 else 0

    @property
    def shared_per_multiprocessor(self) -> int:
        return self.shared_bytes + self.reserved_per_cta

    @property
    def compute_capability(self) -> int:
        """90 for sm_90 and sm_90a."""
        return int(self.arch.removeprefix("sm_").rstrip("a"))

    @property
    def fp8(self) -> bool:
        """cvt to and from e4m3/e5m2 and their mma.sync (m16n8k32) exist: sm_89 and newer."""
        return self.compute_capability >= 89

    @property
    def arch_specific(self) -> bool:
        """sm_90a and the like: code for exactly that GPU generation, not for later ones."""
        return self.arch.endswith("a")

    def register_excess(self, kernel: CompiledKernel) -> str | None:
        """Why `kernel` cannot have the registers it needs on this target (`register_excess`), or None."""
        return register_excess(kernel.registers_estimate, kernel.threads, self.registers_per_cta)

    def takes(self, ptx_target: str) -> bool:
        """Whether ptxas assembles for this target PTX whose `.target` is `ptx_target`: PTX of an
        architecture-specific target (sm_90a) for that target only, other PTX for its own generation and
        later ones."""
        if ptx_target.endswith("a"):
            return ptx_target == self.arch
        digits = ptx_target.removeprefix("sm_")
        return digits.isdigit() and int(digits) <= self.compute_capability


#: The targets Phobos generates code for (and ptxcheck accepts).
TARGETS = {
    "sm_75": Target("sm_75", 64 * 1024, False, False),
    "sm_80": Target("sm_80", 163 * 1024, True, True),
    "sm_86": Target("sm_86", 99 * 1024, True, True),
    "sm_87": Target("sm_87", 163 * 1024, True, True),
    "sm_89": Target("sm_89", 99 * 1024, True, True),
    "sm_90": Target("sm_90", 227 * 1024, True, True),
    "sm_90a": Target("sm_90a", 227 * 1024, True, True, True),
}


#: Threads one SM runs at once (sm_75 has 1024; a persistent kernel's CTAs are counted by it).
THREADS_PER_MULTIPROCESSOR = 2048

#: The widths tensor indices can be compiled with (compile_kernel's index_bits).
INDEX_WIDTHS = (32, 64)

logger = logging.getLogger(__name__)


@dataclass
class Dumps:
    """What to show of the pipeline's stages (the CLI's --dump-* flags)."""

    ast: bool = False
    ir: bool = False
    after: str | None = None
    thread_ir: bool = False
    schedule: bool = False  # each pipelined loop's schedule (with --dump-ir too)
    texts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CodeOptions:
    """What a call's arguments decide about a kernel's code besides its configuration (compile_kernel's
    keywords): 64-bit indices for tensors past what i32 indexes, no read-only-cache loads where a tensor
    the kernel only reads overlaps one it writes, TMA copies where every tensor can have a tensor map,
    strides as launch values for tensors passed as views that are not C-contiguous."""

    index_bits: int = 32
    read_only_cache: bool = True
    tma: bool = False  # K loops may copy by TMA: the launcher can build tensor maps over every tensor of the call
    # tensors passed as strided views: (name, last stride is 1), their strides launch values (see compile_kernel)
    strided: tuple[tuple[str, bool], ...] = ()

    def keywords(self) -> dict[str, Any]:
        """compile_kernel's keywords for these options: those that differ from the defaults (so the cache
        keys of default code stay what they were)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}


@dataclass
class CompiledKernel:
    ptx: str
    kernel_name: str
    config: dict[str, int]
    params: list[KernelParam]
    arch: str
    threads: int
    shared_bytes: int
    registers_estimate: int
    grid_hint: list[tuple[str, int] | None]  # per grid axis: (size name, tile) when stores make it clear
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage
    notes: list[str] = field(default_factory=list)  # the code chosen where it matters (tensor cores or not)
    schedules: list[str] = field(default_factory=list)  # each pipelined K loop's schedule (lower/schedule.py)
    cluster: int = 1  # CTAs of a cluster (`.reqnctapercluster`, along x): the grid is a multiple of it
    index_bits: int = 32  # width of tensor dims and size parameters (compile_kernel)
    read_only_cache: bool = True  # tensors the kernel only reads are loaded with ld.global.nc (compile_kernel)
    strided: tuple[tuple[str, bool], ...] = ()  # tensors addressed by stride parameters (compile_kernel)

    @property
    def config_text(self) -> str:
        return config_text(self.config)

    @property
    def persistent(self) -> bool:
        """Whether its CTAs loop over the program instances (a `programs` parameter per grid axis): the
        launcher then starts no more CTAs than run at once (`launch_grid`)."""
        return any(p.kind == "programs" for p in self.params)

    def launch_grid(self, grid: tuple[int, int, int], multiprocessors: int) -> tuple[int, int, int]:
        """The CTAs to start for the program instances of `grid`: those of `grid` (along x, a cluster of
        `cluster` CTAs for each, as the CLUSTER knob asks), or for a persistent
        kernel as many as surely fit on `multiprocessors` SMs at once, each of which runs the programs
        that count apart, in the grid's linear order.  How many fit on an SM is counted by shared memory,
        threads and registers, taken at the cap ptxas allocates under (`entry_registers`), which it never
        exceeds: more CTAs would wait for the first to end.  Correctness never depends on the count."""
        if not self.persistent:
            return (grid[0] * self.cluster, *grid[1:])  # CLUSTER: a cluster of CTAs per program instance
        target = TARGETS[self.arch]
        per_sm = min(target.shared_per_multiprocessor // (self.shared_bytes + target.reserved_per_cta),
                     THREADS_PER_MULTIPROCESSOR // self.threads,
                     REGISTER_FILE // (self.threads * entry_registers(self.threads)))
        clusters = max(1, min(math.prod(grid), multiprocessors * max(per_sm, 1) // self.cluster))
        return (clusters * self.cluster, 1, 1)  # a cluster with no tile left (padding included) just ends


#: Builtins whose argument is a grid axis.
GRID_BUILTINS = ("program_id", "num_programs")

GridHint = list[tuple[str, int] | None]


@dataclass(frozen=True, eq=False)
class KernelInfo:
    """One checked kernel as a launcher sees it.

    `params` are the source's tensors and scalars in order, `size_names` the
    sizes bound from tensor shapes (passed after them, as i32), `rules` the
    launch rules (the autotune space, @derive, @require, @key), `space` the
    autotune parameters and their values.  Per configuration: `checked` (what
    the interpreter runs), `axes_used` (the grid axes whose program_id or
    num_programs the kernel reads) and `grid_hint` (per axis, (size, tile) when
    a store is indexed `program_id(d) * tile :+ tile` along that size), each
    computed once, and `index_reach` (the 32-bit values its indices are computed
    from, which a launch with 64-bit indices checks).  `kernel` is what
    compile_kernel takes.
    """

    name: str
    params: tuple[KernelParam, ...]
    size_names: tuple[str, ...]
    rules: LaunchRules
    kernel: ast.Kernel = field(repr=False)  # handed back to the compiler; launchers do not read it
    # The widths of index arithmetic compile_kernel can generate (index_bits=); launchers pick 64 only for
    # tensors past what i32 indexes.
    index_widths: tuple[int, ...] = INDEX_WIDTHS
    _memo: dict[tuple, Any] = field(default_factory=dict, repr=False)

    @property
    def space(self) -> dict[str, list[int]]:
        return self.rules.space

    def checked(self, config: dict[str, int]) -> CheckedKernel:
        """The kernel checked under `config`; a PhobosError where that configuration is invalid."""
        return self._remember("checked", config, lambda: check_kernel(self.kernel, config))

    def axes_used(self, config: dict[str, int]) -> frozenset[int]:
        checked = self.checked(config)
        return self._remember("axes", config, lambda: frozenset(
            checked.const_of(call.args[0]) for call in ast.calls(self.kernel.body) if call.func in GRID_BUILTINS))

    def tile_ir(self, config: dict[str, int]) -> Function:
        """The tile IR of `config` as irgen makes it (before the tile passes), generated once."""
        return self._remember("tile", config, lambda: generate(self.checked(config)))

    def grid_hint(self, config: dict[str, int]) -> GridHint:
        """The grid hint from the tile IR, without compiling (CompiledKernel.grid_hint says the same)."""
        return self._remember("hint", config, lambda: grid_hints(self.tile_ir(config)))

    def index_reach(self, config: dict[str, int]) -> IndexReach:
        """What the kernel computes its indices from in 32 bits (phobos.middle.index_reach): a launch with
        64-bit indices asks it whether they wrap over its grid."""
        return self._remember("reach", config, lambda: index_reach(self.tile_ir(config)))

    def unrolled_work(self, config: dict[str, int]) -> int:
        """About how many operations each thread's code spells out for `config`, without compiling: every tile
        op of the tile IR counts its elements, a dot M * N * K of them, shared among the CTA's threads
        (phobos.lower.placement.choose_threads), a loop's body once.  Lowering unrolls tiles onto threads, so
        the PTX - and ptxas's time on it, most of a configuration's compile - grows with this: at 4096^3 it
        correlates 0.99 with compile plus ptxas CPU seconds over sgemm's 26 configurations, 0.88 over
        gemm_bf16's 28 (the product of the configuration's values: 0.63, 0.38).  The compile workers start the
        costliest first."""
        from .lower.placement import choose_threads  # the back end, imported where used (see _pipeline)
        tile = self.tile_ir(config)
        return sum(map(tile_op_work, walk(tile.body))) // choose_threads(tile)

    def _remember(self, what: str, config: dict[str, int], make: Any) -> Any:
        key = (what, tuple(config.items()))
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]


def tile_op_work(op: Op) -> int:
    """The elements a tile op computes; a dot's M x N results take K products each."""
    work = sum(r.type.size for r in op.results if isinstance(r.type, TileType))
    return work * op.operands[0].type.shape[-1] if op.opcode == "dot" else work


def kernel_infos(src: str, filename: str) -> list[KernelInfo]:
    """Parse and check `src` under every configuration; one KernelInfo per kernel.

    Raises the error, or an ErrorList of every error, found in the source.
    """
    program = parse_source(src, filename)
    errors = check_program(program)
    if errors:
        raise errors[0] if len(errors) == 1 else ErrorList(errors)
    infos = []
    for k in program.kernels:
        signature = kernel_signature(check_kernel(k))
        infos.append(KernelInfo(k.name, tuple(p for p in signature if p.kind != "size"),
                                tuple(p.name for p in signature if p.kind == "size"), launch_rules(k), k))
    return infos


def register_excess(estimate: int, threads: int, registers_per_block: int) -> str | None:
    """Why a kernel of `threads` threads that the compiler estimates at `estimate` registers per thread cannot
    get them - more than ESTIMATE_SLACK times what each thread may have of `registers_per_block` (and at most
    MAX_REGISTERS_PER_THREAD) - or None.  Below that ptxas decides, and may spill."""
    limit = min(registers_per_block // threads, MAX_REGISTERS_PER_THREAD)
    if estimate <= ESTIMATE_SLACK * limit:
        return None
    whose = (f"{limit} a thread can have" if limit == MAX_REGISTERS_PER_THREAD
             else f"{limit} each of {threads} threads may use")
    return f"the compiler estimates {estimate} registers per thread, more than {ESTIMATE_SLACK} times the {whose}"


def check_resources(kernel: CompiledKernel, loc: Loc) -> None:
    """ResourceError, located at `loc` (the kernel), when `kernel` cannot get the registers it needs on its
    target; compile_kernel has already refused what exceeds the shared memory of a CTA."""
    excess = target(kernel.arch).register_excess(kernel)
    if excess is not None:
        raise ResourceError(f"{excess}: use smaller tiles, or more WARPS to share them", loc,
                            [Note(f"in configuration {kernel.config_text} of kernel '{kernel.kernel_name}' "
                                  f"for {kernel.arch}")])


def fitting(k: ast.Kernel, config: dict[str, int], arch: str, **options: Any) -> CompiledKernel:
    """`k` compiled for `config` on `arch`, checked against every limit of the target (check_resources): a
    ResourceError where it does not fit."""
    compiled = compile_kernel(k, arch=arch, config=config, **options)
    check_resources(compiled, k.loc)
    return compiled


def target(arch: str) -> Target:
    t = TARGETS.get(arch)
    if t is None:
        raise PhobosError(f"unknown target '{arch}'; known targets: {', '.join(TARGETS)}")
    return t


@raised_at_call_site
def compile(src: str, *, arch: str = "sm_90", config: dict[str, int] | None = None, kernel: str | None = None,
            filename: str | None = None, dumps: Dumps | None = None, index_bits: int = 32,
            read_only_cache: bool = True, strided: tuple[tuple[str, bool], ...] = ()) -> CompiledKernel:
    """Compile one kernel of `src` for one autotune configuration (first values when None); `filename` names
    the source in errors and in the PTX (default `<string>`, as phobos.jit)."""
    program = parse_source(src, filename or SourceFile.name_for(src))
    return compile_kernel(pick_kernel(program, kernel), arch=arch, config=config, dumps=dumps,
                          index_bits=index_bits, read_only_cache=read_only_cache, strided=strided)


def compile_kernel(k: ast.Kernel, *, arch: str = "sm_90", config: dict[str, int] | None = None,
                   dumps: Dumps | None = None, verify_each: bool = False,
                   allocate_registers: bool = True, index_bits: int = 32,
                   read_only_cache: bool = True, tma: bool = False,
                   strided: tuple[tuple[str, bool], ...] = ()) -> CompiledKernel:
    """Compile one parsed kernel; `verify_each` checks the IR after every pass,
    `allocate_registers=False` keeps one PTX register per value (for comparison).

    `index_bits` is 32 or 64: the width of tensor dims, of the size parameters
    in the PTX and of element coordinates.  32 serves every tensor whose dims
    are below 2^31 (addresses are 64-bit either way); 64 serves any.  The
    size names a kernel reads stay the language's i32 (the parameter's low
    half), exact while the size fits.  `read_only_cache` False loads every
    tensor with plain ld.global: for calls where a tensor the kernel only reads
    overlaps one it writes (an in-place call, `add(x, y, x)`), which the
    read-only cache of ld.global.nc must not see (the PTX leaves it undefined).
    `tma` lets a GEMM's K loop on wgmma (sm_90a) copy its stages by TMA: the
    kernel then has `tensor_map` parameters (after the others), which the
    launcher builds for each call from the tensors they name.  `strided` names
    the tensors passed as views that are not C-contiguous, each with whether
    its last stride is 1: their element strides are `stride` parameters (one
    per dim, but for a last stride of 1, which is a constant and keeps vector
    accesses), filled by the launcher per call.
    """
    tgt = target(arch)
    if index_bits not in INDEX_WIDTHS:
        raise PhobosError(f"index_bits must be 32 or 64, got {index_bits!r}")
    tensors = {p.name for p in k.params if p.type.kind == "tensor"}
    unknown = [name for name, _ in strided if name not in tensors]
    if unknown:
        raise PhobosError(f"strided names {', '.join(map(repr, unknown))}, which kernel '{k.name}' has no tensor "
                          f"parameter of")
    try:
        return _pipeline(k, tgt, config, dumps, verify_each, allocate_registers, index_bits, read_only_cache, tma,
                         tuple(strided))
    except PhobosError as err:
        resolved = resolve_config(k, config) if not isinstance(err, SemanticError) or config else {}
        if resolved:
            err.notes.append(Note(f"in configuration {config_text(resolved)} of kernel '{k.name}' for {arch}"))
        raise
    except RecursionError:
        raise PhobosError("the program is nested too deeply", k.loc) from None
    except Exception as err:  # a bug in a stage: say where, keep the cause chained
        raise InternalError(f"internal compiler error in kernel '{k.name}' ({type(err).__name__}: {err})",
                            k.loc) from err


def _pipeline(k: ast.Kernel, tgt: Target, config, dumps: Dumps | None, verify_each: bool,
              allocate_registers: bool, index_bits: int, read_only_cache: bool, tma: bool,
              strided: tuple[tuple[str, bool], ...]) -> CompiledKernel:
    from .lower.driver import lower  # the back end: imported by the first compile (launchers that find their
    from .lower.mathlib import expand_math  # kernels in the disk cache never need it)
    from .ptx.emit import Kernel, emit_module
    from .ptx.isel import entry_params, select
    from .ptx.regalloc import allocate, number_in_order
    times: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        times[stage] = now - clock
        clock = now

    if dumps is not None and dumps.ast:
        dumps.texts.append(ast.dump(k))
    ck = check_kernel(k, config)
    lap("check")
    func = generate(ck)
    if verify_each:
        verify(func)
    if dumps is not None and dumps.ir:
        dumps.texts.append(f"// tile-level IR\n{format_function(func)}")
    texts = dumps.texts if dumps is not None else None
    after = dumps.after if dumps is not None else None
    run_pipeline(func, TILE_PIPELINE, stage="tile", verify_each=verify_each, dump_after=after, dumps=texts)
    lap("irgen+tile passes")
    thread = lower(func, tgt.shared_limit(ck.knobs.ctas_per_sm), tgt.cp_async, index_bits, read_only_cache,
                   tgt.tensor_cores, tgt.wgmma, tma and tgt.wgmma, tgt.fp8, tgt.compute_capability, dict(strided))
    expand_math(thread)
    if dumps is not None and (dumps.schedule or dumps.ir):
        dumps.texts += [f"// {text}" if i == 0 else text
                        for i, text in enumerate(thread.attrs["schedules"] or ["no pipelined loop"])]
    if verify_each:
        verify(thread, thread_level=True)
    if dumps is not None and dumps.thread_ir:
        dumps.texts.append(f"// thread-level IR\n{format_function(thread)}")
    run_pipeline(thread, THREAD_PIPELINE, stage="thread", verify_each=verify_each, dump_after=after, dumps=texts)
    lap("lower+thread passes")
    items = select(thread)
    alloc = allocate(items)
    if not allocate_registers:
        alloc.counts = number_in_order(items)
    lap("isel+regalloc")
    ptx_kernel = Kernel(
        name=k.name, params=entry_params(thread), body=items, threads=thread.attrs["threads"],
        ctas_per_sm=ck.knobs.ctas_per_sm or thread.attrs.get("ctas_per_sm"), cluster=thread.attrs.get("cluster", 1),
        register_counts=alloc.counts, shared_bytes=thread.attrs["shared_bytes"],
        ptx_version=thread.attrs["ptx_version"], header_comment=[f"Phobos {__version__}: kernel {k.name} from {k.loc.file}"
                        + (f", configuration {config_text(ck.config)}" if ck.config else "")
                        + (f", {index_bits}-bit indices" if index_bits != 32 else "")
                        + (", no read-only cache loads" if not read_only_cache else "")
                        + "".join(f", {name} strided" + (" (last stride 1)" if unit else "") for name, unit in strided),
                        f"{thread.attrs['threads']} threads per CTA, {thread.attrs['shared_bytes']} bytes of "
                        f"shared memory, peak register pressure {alloc.peak_pressure}",
                        *thread.attrs["notes"]])
    source_file = k.loc.file if SourceFile.line(k.loc.file, k.loc.line) is not None else None
    ptx = emit_module(ptx_kernel, tgt.arch, source_file)
    lap("emit")
    return CompiledKernel(
        ptx=ptx, kernel_name=k.name, config=dict(ck.config), params=list(thread.attrs["params"]), arch=tgt.arch,
        threads=thread.attrs["threads"], shared_bytes=thread.attrs["shared_bytes"],
        registers_estimate=alloc.peak_pressure, grid_hint=grid_hints(func), timings=times,
        notes=list(thread.attrs["notes"]), schedules=list(thread.attrs["schedules"]),
        cluster=thread.attrs.get("cluster", 1), index_bits=index_bits, read_only_cache=read_only_cache,
        strided=strided)


def grid_hints(func) -> GridHint:
    """Per grid axis: (size name, tile) when a store is indexed `program_id(d) * T :+ T` over that size."""
    hints: list[tuple[str, int] | None] = [None, None, None]
    params = func.attrs["params"]
    for op in walk(func.body):
        if op.opcode != "store":
            continue
        tensor = op.operands[0]
        dims = params[tensor.owner.attrs["index"]].dims
        for dim, index, size in zip(dims, op.operands[1:], op.attrs["sizes"]):
            axis = _program_id_times(index, size)
            if axis is not None and isinstance(dim, str) and hints[axis] is None:
                hints[axis] = (dim, size or 1)
    return hints


def _program_id_times(v, size) -> int | None:
    """The axis d when `v` is program_id(d) * size, or program_id(d) as a single index (size None or 1);
    program_id(d) may be widened first (`i64(program_id(0)) * i64(BLOCK)`, for tensors past 2^31 elements)."""
    op = v.owner
    if not isinstance(op, Op):  # a block argument: a loop variable, say
        return None
    if _program_id_axis(v) is not None and size in (None, 1):
        return _program_id_axis(v)
    if size is None:
        return None
    if op.opcode != "mul":
        return None
    a, b = op.operands
    for pid, c in ((a, b), (b, a)):
        if _program_id_axis(pid) is not None and getattr(c.owner, "opcode", None) == "const" \
                and c.owner.attrs["value"] == size:
            return _program_id_axis(pid)
    return None


def _program_id_axis(v) -> int | None:
    """d when `v` is program_id(d), or program_id(d) cast to a wider integer type."""
    op = v.owner
    if getattr(op, "opcode", None) == "cast" and op.operands[0].dtype.bits <= v.dtype.bits \
            and v.dtype.is_int:
        op = op.operands[0].owner
    return op.attrs["axis"] if getattr(op, "opcode", None) == "program_id" else None


@raised_at_call_site
def compile_to_ptx(src: str, *, arch: str = "sm_90", config: dict[str, int] | None = None,
                   kernel: str | None = None) -> str:
    """PTX text for one kernel and one autotune configuration (the first value of each by default)."""
    return compile(src, arch=arch, config=config, kernel=kernel).ptx


def compile_all(src: str, *, arch: str = "sm_90", filename: str = "<source>") -> list[CompiledKernel | ResourceError]:
    """Every kernel of a file under every one of its autotune configurations.

    A configuration that does not fit the target (too much shared memory, say)
    is given as its ResourceError instead of a kernel; any other error is raised.
    A long run logs progress lines (phobos.log.Progress).
    """
    program = parse_source(src, filename)
    jobs = [(k, config) for k in program.kernels for config in configurations(k)]
    progress = Progress(logger, f"compiling {filename} for {arch}", len(jobs), "configurations")
    out: list[CompiledKernel | ResourceError] = []
    for k, config in jobs:
        try:
            out.append(compile_kernel(k, arch=arch, config=config))
        except ResourceError as err:
            out.append(err)
        progress.update(len(out))
    progress.finish(f"{len(out)} configurations compiled")
    return out


def unfit_configurations(program: ast.Program, arch: str) -> dict[str, tuple[int, list[tuple[str, ResourceError]]]]:
    """Per kernel of a checked program: how many configurations it has (at sample sizes), and each that does
    not fit `arch` (`fitting`: every one is compiled), as its text and ResourceError.  A long run logs
    progress lines."""
    jobs = [(k, config) for k in program.kernels for config in configurations(k)]
    progress = Progress(logger, f"checking the resources of {program.loc.file} for {arch}", len(jobs),
                        "configurations")
    out: dict[str, tuple[int, list[tuple[str, ResourceError]]]] = {k.name: (0, []) for k in program.kernels}
    for done, (k, config) in enumerate(jobs, start=1):
        count, unfit = out[k.name]
        try:
            fitting(k, config, arch)
        except ResourceError as error:
            unfit.append((config_text(config), error))
        out[k.name] = (count + 1, unfit)
        progress.update(done)
    progress.finish(f"{len(jobs)} configurations compiled")
    return out


PASS_NAMES = sorted(PASSES)
