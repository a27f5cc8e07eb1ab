# Triton's kernels on the CPU: a `@triton.jit` function compiled by Triton, run by the PTX emulator.
#
#     import phobos.triton
#     phobos.triton.emulate(add_kernel, arch="sm_90a")[grid](x, y, out, n, BLOCK_SIZE=1024)
#
# TRITON_INTERPRET=1 runs a kernel's Python; this runs the PTX Triton compiles for the GPU, with every
# check of the emulator (docs/emulator.md): out-of-bounds and misaligned accesses, data races in shared
# and global memory, barriers in divergent code... each pointing at the line of the Triton source.  No
# GPU is needed: Triton compiles for a named target without one.  One launch is a pipeline of plain
# values:
#
#   arguments  numpy arrays and torch CPU tensors become pointers into the host memory they lie in
#              (`HostMemory`: arguments whose bytes overlap share one allocation in the emulator, as
#              views of one buffer do on a GPU; the kernel's writes land in the caller's arrays)
#   bind       Triton's own binder (`create_function_from_signature`, `JITFunction._pack_args`): the
#              signature (*fp32, i32, i64, fp32, u1, constexpr...), the constexprs, the specialisation
#              attributes (pointers and integers divisible by 16, integers equal to 1), the options
#   compile    `triton.compile(ASTSource(...), target=GPUTarget("cuda", 80 or 90, 32))`, cached in the
#              process per (function, arch, specialisation, options)
#   pack       one value per PTX parameter, as Triton's launcher packs them (driver.py make_launcher):
#              constexprs dropped, tuples flattened, host tensor descriptors expanded (a TMA descriptor
#              and the shape and strides, or the base pointer, shape, strides and padding when the
#              kernel does not use TMA), scalars to their bits (fp16 rounded, bf16 truncated, as its
#              pack_fp16/pack_bf16 do), then the global and profile scratch pointers
#   launch     phobos.run.emulator: grid x num_ctas CTAs of 32 x num_warps threads, `metadata.shared`
#              bytes of dynamic shared memory, clusters of num_ctas CTAs, the tensor-core model of the
#              arch; every `.file` of the PTX registered so that errors quote the Triton source line
#              (the kernel's own file standing in for one that Triton's cache names but that is gone).
#
# Triton is an optional extra (`pip install 'phobos-tile[triton]'`); this module needs it, Phobos does
# not.  What it relies on of Triton's internals (the binder, the launcher's packing rules) is that of
# Triton 3.6.
from __future__ import annotations

import ctypes
import dataclasses
import functools
import inspect
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import LaunchError, raised_at_call_site
from .run import emulator
from .run.emulator.ptxtypes import TYPES
from .run.tensor_map import DTYPES, SWIZZLES, TensorMap

try:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature
    from triton.tools.tensor_descriptor import TensorDescriptor
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError("phobos.triton needs Triton: pip install 'phobos-tile[triton]'",
                              name=missing.name) from missing

__all__ = ["emulate", "EmulatedKernel", "Compiled", "TritonLaunch", "BoundCall", "HostMemory", "ARCHES"]

#: The targets a kernel is compiled for: name -> Triton's compute capability (sm_90 means sm_90a, the
#: target Triton compiles capability 90 for).
ARCHES = {"sm_80": 80, "sm_86": 86, "sm_89": 89, "sm_90": 90, "sm_90a": 90}
#: The emulator's tensor-core model for each capability (numerics.TensorCoreModel).
TENSOR_CORES = {80: "ampere", 86: "ampere", 89: "ampere", 90: "hopper"}

#: Triton's element types of numpy dtypes (by name: ml_dtypes provides bfloat16 and the 8-bit floats).
NUMPY_ELEMENT_TYPES = {
    "bool": "int1", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
    "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "float16": "float16", "float32": "float32",
    "float64": "float64", "bfloat16": "bfloat16", "float8_e4m3fn": "float8e4nv", "float8_e5m2": "float8e5",
}

#: Bits of each scalar type of a Triton signature, as the launcher packs a Python value (ty_to_cpp,
#: FLOAT_PACK_FUNCTION in triton/backends/nvidia/driver.py): integers in two's complement, fp16 rounded
#: to nearest from the double, bf16 the top half of the f32 (truncated), fp32 rounded from the double.
SCALAR_PACKING: dict[str, tuple[int, Callable[[Any], int]]] = {
    **{f"{sign}{bits}": (bits, int) for sign in "iu" for bits in (8, 16, 32, 64)},
    "i1": (8, lambda v: int(bool(v))), "u1": (8, lambda v: int(bool(v))),
    "fp16": (16, lambda v: int(np.float16(v).view(np.uint16))),
    "bf16": (16, lambda v: int(np.float32(v).view(np.uint32)) >> 16),
    "fp32": (32, lambda v: int(np.float32(v).view(np.uint32))),
    "fp64": (64, lambda v: int(np.float64(v).view(np.uint64))),
}
SCALAR_PACKING["f32"] = SCALAR_PACKING["fp32"]
_INTEGER_RANGES = {f"i{b}": (-(1 << (b - 1)), (1 << (b - 1)) - 1) for b in (8, 16, 32, 64)} | \
                  {f"u{b}": (0, (1 << b) - 1) for b in (8, 16, 32, 64)}

#: The element types of TMA descriptors by CUtensorMapDataType (the host enum; Triton's metadata gives the
#: device enum, which TMA_DTYPE_DEVICE_TO_HOST translates).
_TMA_TYPE_NAMES = {code: name for name, (code, _) in reversed(DTYPES.items())}  # code 0: "u8"
_SWIZZLE_NAMES = {code: name for name, (code, _) in SWIZZLES.items()}

# ---------------------------------------------------------------------------------------------------- arguments
class HostArray:
    """What Triton's binder sees of an array argument: its element type and a pointer whose alignment is
    the one it has in the emulator's memory (the binder specialises pointers on divisibility by 16)."""

    def __init__(self, dtype: Any, address: int):
        self.dtype = dtype
        self._address = address

    def data_ptr(self) -> int:
        return self._address


@dataclass
class HostSpan:
    """Where an array argument lies in host memory: the first byte of its lowest element, one past the
    last byte of its highest, the address of its element 0, whether it may be written, its element type
    (Triton's, or torch's dtype)."""

    low: int
    high: int
    start: int
    writeable: bool
    dtype: Any


def _numpy_span(array: np.ndarray, where: str) -> HostSpan:
    name = NUMPY_ELEMENT_TYPES.get(array.dtype.name)
    if name is None:
        raise LaunchError(f"{where}: numpy arrays of {array.dtype} have no Triton element type "
                          f"(one of {', '.join(NUMPY_ELEMENT_TYPES)})")
    low, high = np.lib.array_utils.byte_bounds(array) if hasattr(np.lib, "array_utils") else np.byte_bounds(array)
    return HostSpan(low, high, array.__array_interface__["data"][0], array.flags.writeable, getattr(tl, name))


def _torch_span(tensor: Any, where: str) -> HostSpan:
    if tensor.device.type != "cpu":
        raise LaunchError(f"{where}: a tensor on {tensor.device}; the emulator runs on host memory "
                          f"(pass tensor.cpu(), and copy the result back)")
    size = tensor.element_size()
    start = tensor.data_ptr()
    extent = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride())) + 1 if tensor.numel() else 0
    return HostSpan(start, start + extent * size, start, True, tensor.dtype)


def _is_torch_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _span(value: Any, where: str) -> HostSpan | None:
    """The host memory of an array argument, or None if `value` is not one."""
    if isinstance(value, np.ndarray):
        return _numpy_span(value, where)
    if _is_torch_tensor(value):
        return _torch_span(value, where)
    return None


class HostMemory:
    """The emulator's view of the host memory that a launch's array arguments lie in: one numpy byte array
    over each run of overlapping arguments (a Pointer into it per argument), so that the kernel sees views
    of one buffer as one allocation and its writes land in the caller's memory."""

    def __init__(self, spans: dict[str, tuple[Any, HostSpan]]):
        self.pointers: dict[int, emulator.Pointer] = {}  # id(argument) -> its pointer
        order = sorted(spans.items(), key=lambda item: item[1][1].low)
        group: list[tuple[str, Any, HostSpan]] = []
        for name, (value, span) in order:
            if span.low == span.high:  # empty: an allocation of its own
                self._place([(name, value, span)])
                continue
            if group and span.low >= max(s.high for _, _, s in group):
                self._place(group)
                group = []
            group.append((name, value, span))
        if group:
            self._place(group)

    def _place(self, group: list[tuple[str, Any, HostSpan]]) -> None:
        low = min(span.low for _, _, span in group)
        high = max(span.high for _, _, span in group)
        memory = np.ctypeslib.as_array((ctypes.c_uint8 * (high - low)).from_address(low)) if high > low \
            else np.zeros(0, np.uint8)
        memory.flags.writeable = all(span.writeable for _, _, span in group)
        label = group[0][0]
        for _, value, span in group:
            self.pointers[id(value)] = emulator.Pointer(memory, span.start - low, label)

    def pointer(self, value: Any) -> emulator.Pointer:
        return self.pointers[id(value)]


def _arrays(name: str, value: Any):
    """(label, array) for every array or tensor in an argument (in tuples, a tensor descriptor's base)."""
    if isinstance(value, tuple):
        for i, item in enumerate(value):
            yield from _arrays(f"{name}[{i}]", item)
    elif isinstance(value, TensorDescriptor):
        yield f"{name}.base", value.base
    elif isinstance(value, np.ndarray) or _is_torch_tensor(value):
        yield name, value


_SCALARS = (bool, int, float)
#: Where the binder's stand-ins for arrays point (any address aligned as the emulator's allocations are).
STAND_IN_BASE = 1 << 40


def _replaced(value: Any, table: dict[int, Any]) -> Any:
    """`value` with the objects `table` names (by id) replaced, in tuples too."""
    if isinstance(value, tuple):
        return tuple(_replaced(item, table) for item in value)
    return table.get(id(value), value)


def _check_argument(where: str, value: Any) -> Any:
    """The value Triton's binder takes for one argument: numpy scalars as Python numbers; anything a
    kernel cannot take is a LaunchError naming the argument."""
    if isinstance(value, tuple):
        return tuple(_check_argument(f"{where}[{i}]", item) for i, item in enumerate(value))
    if isinstance(value, np.generic) and not isinstance(value, np.void):
        return value.item()
    if value is None or isinstance(value, _SCALARS + (np.ndarray, TensorDescriptor)) or _is_torch_tensor(value) \
            or isinstance(value, tl.dtype):
        return value
    raise LaunchError(f"{where}: {type(value).__name__} is not a kernel argument (a numpy array, a torch CPU "
                      f"tensor, a TensorDescriptor, an int, float or bool, None, or a tuple of them)")


# ---------------------------------------------------------------------------------------------------- compile
@dataclass
class Compiled:
    """A kernel compiled by Triton for one arch and one specialisation: its PTX, Triton's metadata and
    CompiledKernel (`kernel[grid](...)` launches it on a GPU), the signature Triton inferred."""

    ptx: str
    name: str
    arch: str
    metadata: Any
    kernel: Any  # triton.compiler.CompiledKernel
    signature: dict[str, Any]
    constexprs: dict[tuple, Any]

    @property
    def block(self) -> int:
        return 32 * self.metadata.num_warps


_COMPILED: dict[tuple, Compiled] = {}


def _target(arch: str) -> GPUTarget:
    if arch not in ARCHES:
        raise LaunchError(f"arch must be one of {', '.join(ARCHES)}, got {arch!r}")
    return GPUTarget("cuda", ARCHES[arch], 32)


# ---------------------------------------------------------------------------------------------------- packing
@dataclass(frozen=True)
class PtxArgument:
    """One value for one PTX parameter: a label for messages (the Triton argument it comes from), the
    Triton type it has in the signature, the value (a Pointer, a TensorMap, an int or float, None)."""

    label: str
    type: str
    value: Any


def _expand(label: str, ty: Any, value: Any, memory: HostMemory, descriptors) -> list[PtxArgument]:
    """The PTX arguments of one Triton argument (driver.py make_launcher's expansion)."""
    if ty == "constexpr":
        return []
    if isinstance(ty, tuple):
        return [arg for i, (t, v) in enumerate(zip(ty, value)) for arg in
                _expand(f"{label}[{i}]", t, v, memory, descriptors)]
    if ty.startswith("*"):
        return [PtxArgument(label, ty, None if value is None else memory.pointer(value))]
    if ty.startswith("tensordesc"):
        return _descriptor_arguments(label, ty, value, memory, next(descriptors))
    return [PtxArgument(label, ty, value)]


def _descriptor_arguments(label: str, ty: str, desc: TensorDescriptor, memory: HostMemory,
                          meta: dict | None) -> list[PtxArgument]:
    """A host TensorDescriptor as the launcher passes it: a TMA descriptor (metadata `tensordesc_meta` says
    how the kernel uses it) then the shape (i32) and strides (i64); or, for a kernel that does not use TMA,
    the base pointer, shape and strides (i64), the NaN padding flag (i1), and the shape and strides again."""
    shape, strides = [int(s) for s in desc.shape], [int(s) for s in desc.strides]
    tail = [PtxArgument(f"{label}.shape[{i}]", "i32", s) for i, s in enumerate(shape)] + \
           [PtxArgument(f"{label}.strides[{i}]", "i64", s) for i, s in enumerate(strides)]
    base = memory.pointer(desc.base)
    if meta is None:
        element = ty[len("tensordesc<"):].split("[")[0]
        return [PtxArgument(f"{label}.base", "*" + element, base),
                *[PtxArgument(f"{label}.shape[{i}]", "i64", s) for i, s in enumerate(shape)],
                *[PtxArgument(f"{label}.strides[{i}]", "i64", s) for i, s in enumerate(strides)],
                PtxArgument(f"{label}.padding", "i1", desc.padding == "nan"), *tail]
    if meta.get("fp4_padded"):
        raise LaunchError(f"{label}: padded fp4 tensor descriptors are not supported by the emulator")
    dtype = _TMA_TYPE_NAMES[TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]]]
    size = int(meta["elem_size"])
    try:
        tmap = TensorMap(base, dtype, tuple(reversed(shape)), tuple(s * size for s in reversed(strides[:-1])),
                         tuple(int(b) for b in reversed(meta["block_size"])),
                         swizzle=_SWIZZLE_NAMES[meta["swizzle"]], l2_promotion="128B",
                         oob_fill="nan" if desc.padding == "nan" else "zero")
    except ValueError as problem:
        raise LaunchError(f"{label}: {problem}") from None
    return [PtxArgument(label, "nvTmaDesc", tmap), *tail]


def _ptx_value(arg: PtxArgument, ptx_type: str, kernel: str) -> Any:
    """The emulator's argument for one PTX parameter of type `ptx_type`."""
    where = f"argument {arg.label} of {kernel}"
    if arg.type == "nvTmaDesc" or arg.type.startswith("*"):
        return 0 if arg.value is None else arg.value
    bits_of = SCALAR_PACKING.get(arg.type)
    if bits_of is None:
        raise LaunchError(f"{where}: Triton type {arg.type} is not supported by phobos.triton")
    width, pack = bits_of
    if arg.type in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[arg.type]
        if not isinstance(arg.value, int):
            raise LaunchError(f"{where} is {arg.type}; {arg.value!r} is not an integer")
        if not low <= arg.value <= high:
            raise LaunchError(f"{where} is {arg.type}; {arg.value} is out of range")
    bits = pack(arg.value) & ((1 << width) - 1)
    t = TYPES[ptx_type]
    if t.is_float:
        return np.array([bits], f"u{t.bits // 8}").view(t.dtype)[0]
    if t.kind == "s" and bits >> (t.bits - 1):
        return bits - (1 << t.bits)
    return bits


# ---------------------------------------------------------------------------------------------------- launching
@dataclass
class TritonLaunch:
    """What one emulated launch did: the kernel compiled, the grid run (in CTAs), the emulator's stats."""

    compiled: Compiled
    grid: tuple[int, int, int]
    stats: Any  # emulator.LaunchStats, None for an empty grid


class EmulatedKernel:
    """A `@triton.jit` function launched in the emulator: `kernel[grid](*args, **kwargs)` as in Triton,
    `run(*args, grid=..., **kwargs)`, and `compile(*args, **kwargs)` (the PTX only, nothing run)."""

    def __init__(self, fn: JITFunction, arch: str = "sm_90a", *, check_races: bool = True,
                 max_steps: int | None = None, output: Callable[[str], Any] | None = None,
                 workers: int | None = None):
        if not isinstance(fn, JITFunction):
            inner = getattr(fn, "fn", None)
            hint = (f" ({type(fn).__name__} wraps one: emulate its .fn with the meta-parameters of one "
                    f"configuration)" if isinstance(inner, JITFunction) or hasattr(inner, "fn") else "")
            if type(fn).__name__ == "InterpretedFunction":
                hint = " (TRITON_INTERPRET=1 made it an interpreted one: unset it to emulate the compiled kernel)"
            raise LaunchError(f"phobos.triton.emulate takes a @triton.jit function, got {type(fn).__name__}{hint}")
        self.fn = fn
        self.arch = arch
        self.target = _target(arch)
        self.options = {"check_races": check_races, "output": output, "workers": workers,
                        **({} if max_steps is None else {"max_steps": max_steps})}

    def __getitem__(self, grid) -> Callable[..., TritonLaunch]:
        """The kernel to be launched on `grid`, as `kernel[grid](*args, **kwargs)` in Triton."""
        return raised_at_call_site(functools.partial(self._run, grid))

    @raised_at_call_site
    def run(self, *args, grid, **kwargs) -> TritonLaunch:
        """Compile (once per specialisation) and run on `grid`: a tuple of 1 to 3 sizes, or a callable of
        the arguments by name (constexprs included), as Triton's grid lambdas take `meta`."""
        return self._run(grid, *args, **kwargs)

    def _run(self, grid, *args, **kwargs) -> TritonLaunch:
        call = self._bind(args, kwargs)
        compiled = self._compile(call)
        bound = call.originals
        sizes = grid(bound) if callable(grid) else grid
        sizes = (sizes,) if isinstance(sizes, (int, np.integer)) else tuple(sizes)
        if not 1 <= len(sizes) <= 3 or any(not isinstance(s, (int, np.integer)) or s < 0 for s in sizes):
            raise LaunchError(f"the grid must be 1 to 3 non-negative sizes, got {sizes!r}")
        grid3 = tuple(int(s) for s in sizes) + (1,) * (3 - len(sizes))
        if grid3[0] * grid3[1] * grid3[2] == 0:
            return TritonLaunch(compiled, grid3, None)  # as Triton's launcher: nothing to run
        stats = self._launch(compiled, call, grid3)
        return TritonLaunch(compiled, grid3, stats)

    @raised_at_call_site
    def compile(self, *args, **kwargs) -> Compiled:
        """The kernel compiled for these arguments (Triton's warmup), from the cache when it was before."""
        return self._compile(self._bind(args, kwargs))

    @raised_at_call_site
    def bind(self, *args, **kwargs) -> "BoundCall":
        """The arguments as Triton's binder takes them (`originals`: by parameter name, defaults applied, as
        a grid callable sees them) and the host memory their arrays lie in (`memory`)."""
        return self._bind(args, kwargs)

    # -- the stages
    def _bind(self, args: tuple, kwargs: dict) -> "BoundCall":
        fn = self.fn
        names = [p.name for p in fn.params]
        constexprs = {p.name for p in fn.params if p.is_constexpr}
        name = fn.__name__

        def checked(label, value):
            return value if label in constexprs else _check_argument(f"argument {label} of {name}", value)

        positional = [checked(names[i] if i < len(names) else str(i), v) for i, v in enumerate(args)]
        given = {k: checked(k, v) for k, v in kwargs.items()}
        backend = make_backend(self.target)
        option_names = {f.name for f in dataclasses.fields(backend.parse_options({}))}
        for key in given:
            if key not in names and key not in option_names:
                raise LaunchError(f"{name} has no parameter {key!r}, and it is not a Triton option "
                                  f"(parameters: {', '.join(names)}; options: num_warps, num_stages, num_ctas, "
                                  f"maxnreg, enable_fp_fusion, ...)")
        given.setdefault("debug", fn.debug or triton.knobs.runtime.debug)
        given.setdefault("instrumentation_mode", triton.knobs.compilation.instrumentation_mode)
        spans = {}
        for index, value in list(enumerate(positional)) + list(given.items()):
            label = names[index] if isinstance(index, int) and index < len(names) else str(index)
            for part, array in _arrays(label, value):
                spans[part] = (array, _span(array, f"argument {part} of {name}"))
        memory = HostMemory(spans)
        # the binder sees each array as a HostArray at the alignment it has in the emulator's memory (whose
        # allocations are 256-byte aligned: a pointer's alignment is that of its offset)
        stand_ins = {id(array): HostArray(span.dtype, STAND_IN_BASE + memory.pointer(array).offset)
                     for array, span in spans.values()}
        arrays = {id(stand_ins[id(array)]): array for array, _ in spans.values()}
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        try:
            bound, specialization, options = binder(*[_replaced(v, stand_ins) for v in positional],
                                                    **{k: _replaced(v, stand_ins) for k, v in given.items()})
        except TypeError as problem:
            raise LaunchError(f"{name}: {problem}") from None
        originals = {k: _replaced(v, arrays) for k, v in bound.items()}
        return BoundCall(backend, given, bound, originals, specialization, options, memory)

    def _compile(self, call: "BoundCall") -> Compiled:
        fn = self.fn
        key = (fn, self.arch, repr(call.specialization), repr(sorted(call.options.items())))
        compiled = _COMPILED.get(key)
        if compiled is None:
            options, signature, constexprs, attrs = fn._pack_args(call.backend, call.given, call.bound,
                                                                  call.specialization, call.options)
            kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=self.target,
                                    options=options.__dict__)
            compiled = _COMPILED[key] = Compiled(kernel.asm["ptx"], kernel.metadata.name, self.arch,
                                                 kernel.metadata, kernel, signature, constexprs)
        return compiled

    def _launch(self, compiled: Compiled, call: "BoundCall", grid: tuple[int, int, int]):
        meta = compiled.metadata
        name = compiled.name
        descriptors = iter(meta.tensordesc_meta) if getattr(meta, "tensordesc_meta", None) else itertools.repeat(None)
        arguments = [arg for param, ty in compiled.signature.items()
                     for arg in _expand(param, ty, call.originals[param], call.memory, descriptors)]
        ctas = grid[0] * grid[1] * grid[2] * meta.num_ctas
        arguments += [_scratch("global_scratch", meta.global_scratch_size, ctas),
                      _scratch("profile_scratch", meta.profile_scratch_size, ctas)]
        module = emulator.load_module(compiled.ptx, f"{name}.{self.arch}.ptx")
        kernel = module.kernel(name)
        params = kernel.params
        if len(params) != len(arguments):
            raise LaunchError(f"{name}: its PTX takes {len(params)} parameters, Triton {triton.__version__}'s "
                              f"signature gives {len(arguments)} (phobos.triton follows Triton 3.6's launcher)")
        values = [_ptx_value(arg, ptx_type, name) for arg, (_, ptx_type) in zip(arguments, params)]
        module.register_sources(stand_ins=(inspect.getsourcefile(self.fn.fn) or "",))
        cluster = (meta.num_ctas, 1, 1) if meta.num_ctas > 1 else None
        return kernel.launch((grid[0] * meta.num_ctas, grid[1], grid[2]), compiled.block, values, meta.shared,
                             tensor_cores=TENSOR_CORES[self.target.arch], cluster=cluster, **self.options)


@dataclass
class BoundCall:
    """One call's arguments as Triton's binder gave them back, and the host memory they point into
    (HostMemory: one byte array per run of overlapping arguments, a Pointer into it per argument)."""

    backend: Any
    given: dict[str, Any]  # keyword arguments: constexprs and options
    bound: dict[str, Any]  # every parameter by name, arrays as HostArray stand-ins
    originals: dict[str, Any]  # the same with the caller's arrays
    specialization: list
    options: dict[str, Any]
    memory: HostMemory


def _scratch(label: str, size: int, ctas: int) -> PtxArgument:
    """A scratch buffer of `size` bytes per CTA (Triton's launcher allocates grid x num_ctas of them), or a
    null pointer when the kernel needs none."""
    value = emulator.Pointer(np.zeros(size * ctas, np.uint8), 0, label) if size else None
    return PtxArgument(label, "*i8", value)


@raised_at_call_site
def emulate(fn: JITFunction, *, arch: str = "sm_90a", check_races: bool = True, max_steps: int | None = None,
            output: Callable[[str], Any] | None = None, workers: int | None = None) -> EmulatedKernel:
    """`fn`, a `@triton.jit` function, to be run in the PTX emulator as Triton runs it on a GPU of `arch`
    ("sm_80", "sm_86", "sm_89", "sm_90a"):

        phobos.triton.emulate(add_kernel)[grid](x, y, out, n, BLOCK_SIZE=1024, num_warps=4)

    Arguments as Triton takes them - numpy arrays and torch CPU tensors for pointers (the kernel's writes
    land in them), ints, floats and bools, None, TensorDescriptors over torch tensors, tuples of these;
    constexprs and Triton's options (num_warps, num_stages, num_ctas, enable_fp_fusion...) by keyword.
    check_races: the emulator's race detectors (docs/emulator.md); max_steps: its step limit; output: what
    device_print's lines are written with (default: standard output); workers: how many processes may run
    the grid's CTAs (1: one; default: the emulator's choice, docs/emulator.md).  A fault raises the
    emulator's error (an EmulatorError: MemoryFault, SharedMemoryRace...) at the line of the Triton source."""
    return EmulatedKernel(fn, arch, check_races=check_races, max_steps=max_steps, output=output, workers=workers)
