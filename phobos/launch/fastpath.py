# Calls specialised per signature: the second call of a kernel with arguments
# that look like the first's costs a few attribute reads and one launch.
#
# A call's *signature* is what the full binding (phobos.launch.binding) checks
# of its arguments: for each one, in the order given (positional, then the
# keyword names), its Python type and, for a tensor, its element type, shape,
# contiguity (and a strided view's strides, which the code is compiled for
# and which reach the kernel as parameters), device and the low four bits of
# its address (the alignment class).  `probe` reads exactly that, as a hashable key, plus the addresses and
# the streams the tensors name, with one small function per argument type
# (PROBES; torch tensors have their own, anything else goes through the
# binding's `tensor_view`).  numpy arrays are never probed: they are copied to
# the GPU and back, which the full path does.
#
# The first call of a signature goes through the full path: binding with every
# check and message, the choice of configuration, compiling, the grid.  When
# the launch is asynchronous (every tensor in device memory), the launcher
# keeps a FastCall for the signature: the prepared launch (a QueuedKernel:
# parameter layout, grid, block and shared memory fixed), where each parameter
# comes from (an address, a scalar argument, a size that the key fixes) and
# where the stream comes from.  The next call with the same key only fills in
# the addresses, converts the scalars and queues the kernel.  Because the key
# holds everything the binding checks, a key seen before is a call the binding
# would accept with the same sizes, grid and configuration; anything else - a
# new dtype, shape, a non-contiguous view, another device - is a new key and
# goes through the full path, with its messages.  A scalar the fast conversion
# cannot pack (out of range, say) sends the call to the full path too, which
# reports it as the first call would.
#
# Whether a tensor the kernel only reads overlaps one it writes (an in-place
# call, `add(x, y, x)`) decides the code too: such a call runs a kernel
# compiled without read-only-cache loads (phobos.compiler.CodeOptions).  A
# key's launches are kept per aliasing (Prepared), and each call compares the
# address ranges of those tensor pairs only: a few integer comparisons.
#
# A grid given as a function is asked again at every call, with the
# configuration and sizes the signature fixes (`grid_holds`): the prepared
# launch serves the call only while the function gives the grid it was
# prepared with; any other answer, or an exception, sends the call to the full
# path, which launches on the new grid (or reports the problem).
#
# The most recent signature of positional arguments also has its whole call
# written out as one function (`direct_call`): the kernel callable tries it
# first, and only a call it does not match pays for probing and the lookup.
# Its torch tensors are checked by torch itself where torch offers it: one
# call of the tensor guard Dynamo's compiled frames use
# (torch._C._dynamo.guards.TensorGuards), made from the tensors of the
# signature's first call, compares each tensor's type, dispatch keys (the
# device type among them), dtype, device index, requires_grad, sizes and
# strides in C++, where reading them one attribute at a time from Python cost
# about as much as the launch.  Whatever it passes the per-attribute checks
# pass too; what it refuses (a tensor that requires grad where the first did
# not, a stride of a size-1 dimension, another inference mode; some torch
# versions the same tensor twice) goes on to the per-attribute checks, so it
# only ever makes a call faster.
from __future__ import annotations

import functools
import struct
import threading
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import LaunchError
from ..compiler import KernelParam
from ..run.cuda import STREAM_OFFSET
from ..types import DType
from .binding import _Refused, convert_scalar, tensor_view

Key = tuple
Locate = Callable[[int], "int | None"]

#: Prepared calls kept per kernel callable; past this many signatures the oldest is forgotten.
MAX_PREPARED = 1024


class Unprobed(Exception):
    """An argument the fast path does not handle (host memory, an unknown object): take the full path."""


# ---------------------------------------------------------------------------
# Probes: argument -> (key part, device address or None, stream hint or None)


def _probe_scalar(value: Any, locate: Locate) -> tuple:
    return (type(value),), None, None


def _probe_torch(tensor: Any, locate: Locate) -> tuple:
    if not tensor.is_cuda:
        raise Unprobed  # a CPU tensor (host memory, copied by the full path), or another kind of device
    device = tensor.get_device()
    pointer = tensor.data_ptr()
    if tensor.is_contiguous():
        return (type(tensor), tensor.dtype, tensor.shape, True, device, pointer & 15), pointer, None
    return (type(tensor), tensor.dtype, tensor.shape, tensor.stride(), device, pointer & 15), pointer, None


def _probe_cuda_array_interface(value: Any, locate: Locate) -> tuple:
    """CuPy arrays and others whose type has `__cuda_array_interface__`: the interface's fields as they are."""
    interface = value.__cuda_array_interface__
    pointer, read_only = interface["data"]
    stream = interface.get("stream") if interface.get("version", 0) >= 3 else None
    return ((type(value), interface["typestr"], tuple(interface["shape"]), interface.get("strides"), read_only,
             locate(pointer), pointer & 15), pointer, stream)


def _probe_view(value: Any, locate: Locate) -> tuple:
    """Any other tensor-like object, through the binding's own view of it."""
    try:
        view = tensor_view(value)
    except _Refused:
        raise Unprobed from None
    if view is None or view.host is not None:
        raise Unprobed
    pointer = view.pointer
    device = view.device if view.device is not None else locate(pointer)
    layout = True if view.contiguous else view.strides
    return ((type(value), view.dtype_name, view.shape, layout, view.read_only, device, pointer & 15),
            pointer, view.stream)


def _is_torch_tensor(kind: type) -> bool:
    return kind.__module__.startswith("torch") and hasattr(kind, "data_ptr") and hasattr(kind, "get_device")


def _refuse(value: Any, locate: Locate) -> tuple:
    raise Unprobed


#: Probe per argument type, filled as types are met.
PROBES: dict[type, Callable[[Any, Locate], tuple]] = {
    bool: _probe_scalar, int: _probe_scalar, float: _probe_scalar, np.ndarray: _refuse}


def _probe_for(kind: type) -> Callable[[Any, Locate], tuple]:
    if issubclass(kind, (np.generic, bool, int, float)):
        probe = _probe_scalar
    elif issubclass(kind, np.ndarray):
        probe = _refuse
    elif _is_torch_tensor(kind):
        probe = _probe_torch
    elif hasattr(kind, "__cuda_array_interface__"):
        probe = _probe_cuda_array_interface
    else:
        probe = _probe_view
    PROBES[kind] = probe
    return probe


def probe(values: Sequence[Any], locate: Locate) -> tuple[Key, list[int | None], list[int | None]]:
    """The signature key of a call's argument values, their device addresses and stream hints.

    Raises Unprobed for an argument the fast path does not take.
    """
    parts, pointers, hints = [], [], []
    for value in values:
        try:
            part, pointer, hint = (PROBES.get(type(value)) or _probe_for(type(value)))(value, locate)
        except Unprobed:
            raise
        except Exception:  # whatever a strange object raises: the full path describes it
            raise Unprobed from None
        parts.append(part)
        pointers.append(pointer)
        hints.append(hint)
    return tuple(parts), pointers, hints


# ---------------------------------------------------------------------------
# Streams


def stream_handle(stream: Any) -> int:
    """A raw CUstream handle from a `stream=` argument: a torch, CuPy or PyCUDA stream, or an int."""
    if isinstance(stream, int) and not isinstance(stream, bool) and stream >= 0:
        return stream
    for attribute in ("cuda_stream", "ptr", "handle"):  # torch, CuPy, PyCUDA
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int) and not isinstance(handle, bool):
            return handle
    raise LaunchError(f"stream: expected a CUDA stream (a torch.cuda.Stream, a cupy.cuda.Stream, a "
                      f"pycuda.driver.Stream or a raw handle as a non-negative int), got {stream!r}")


def torch_stream_reader() -> Callable[[int], int]:
    """A function from a device index to torch's current stream on it, as a raw handle."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else lambda device: torch.cuda.current_stream(device).cuda_stream


@dataclass(frozen=True)
class StreamSource:
    """Where a call's stream comes from when none is given: torch's current stream on `device` ("torch"), the
    stream hint of value `index` ("hint": its `__cuda_array_interface__` names it), or the NULL stream."""

    kind: str
    index: int = 0
    device: int = 0
    reader: Callable[[int], int] | None = None  # torch's current raw stream of a device

    def __call__(self, hints: list) -> int:
        if self.kind == "torch":
            return self.reader(self.device)
        return (hints[self.index] or 0) if self.kind == "hint" else 0


def stream_source(values: Sequence[Any], tensors: Sequence[bool], device: int) -> StreamSource:
    """Where a call's stream comes from when none is given: the caller's current stream.

    The first device tensor decides (`tensors` marks which values are
    tensors): a torch tensor, torch's current stream on its device; anything
    else, the stream its `__cuda_array_interface__` names (CuPy names its
    current one), or the NULL stream where it names none.  Both are read at
    every call, so `with torch.cuda.stream(s)` and `with cupy.cuda.Stream()`
    are followed.
    """
    for index, (value, tensor) in enumerate(zip(values, tensors)):
        if not tensor:
            continue
        if _is_torch_tensor(type(value)):
            if value.get_device() < 0:
                continue
            return StreamSource("torch", device=device, reader=torch_stream_reader())
        return StreamSource("hint", index=index)
    return StreamSource("null")


# ---------------------------------------------------------------------------
# Fast calls


class ScalarOverflow(Exception):
    """A scalar the fast conversion cannot pack: the full path reports it."""


class GridChanged(Exception):
    """The call's grid function gives another grid than the prepared launch's: the full path launches it."""


def _same(value: Any) -> Any:
    return value


def scalar_converter(kernel_name: str, param: KernelParam, kind: type) -> Callable[[Any], Any]:
    """How a scalar of type `kind` becomes its parameter value on the fast path.

    Python floats (and ints) for a float parameter and Python ints for an
    integer one are packed as they are (packing refuses what does not fit,
    which sends the call to the full path); bools for bools too; every other
    combination goes through the binding's conversion.
    """
    if (param.dtype in (DType.F32, DType.F64) and kind in (float, int)) or \
            (param.dtype is DType.BOOL and kind is bool) or (param.dtype in (DType.I32, DType.I64) and kind is int):
        return _same
    return functools.partial(_converted, kernel_name, param)


def _converted(kernel_name: str, param: KernelParam, value: Any) -> Any:
    converted = convert_scalar(kernel_name, param, value)
    return int(converted) if isinstance(converted, np.bool_) else converted


def assembler(recipe: Sequence[tuple]) -> Callable[[Sequence[Any], list], tuple]:
    """A function (values, pointers) -> the parameter values, written out for one recipe.

    For add it is `return (pointers[0], pointers[1], pointers[2], 1048576)`:
    no loop and no branch per call.
    """
    names: dict[str, Any] = {}
    items = []
    for index, step in enumerate(recipe):
        if step[0] == "pointer":
            items.append(f"pointers[{step[1]}]")
        elif step[0] == "scalar" and step[2] is _same:
            items.append(f"values[{step[1]}]")
        elif step[0] == "scalar":
            names[f"convert{index}"] = step[2]
            items.append(f"convert{index}(values[{step[1]}])")
        elif step[0] == "tensor_map":
            names[f"encode{index}"] = step[2]
            items.append(f"encode{index}(pointers[{step[1]}])")
        else:
            items.append(repr(int(step[1])))
    exec(f"def assemble(values, pointers):\n    return ({', '.join(items)}{',' if items else ''})\n", names)
    return names["assemble"]


def alias_expression(pairs: Sequence[tuple[int, int, int, int]], pointer: str) -> str:
    """Python for whether any pair (i, j, bytes of i, bytes of j) of device tensors overlaps, with `pointer`
    formatted with an index naming an address: `-4096 < p[0] - p[2] < 4096 or ...` (a bool; False for no
    pairs).  The ranges [p_i, p_i + bytes_i) and [p_j, p_j + bytes_j) overlap where -bytes_i < p_i - p_j <
    bytes_j; one subtraction and a chained comparison cost less than two additions and two comparisons on
    addresses, which are two-digit Python ints."""
    tests = [f"{-size_i} < {pointer.format(i)} - {pointer.format(j)} < {size_j}" for i, j, size_i, size_j in pairs]
    return " or ".join(f"({test})" for test in tests) or "False"


def alias_test(pairs: Sequence[tuple[int, int, int, int]]) -> Callable[[list], bool]:
    """A function pointers -> whether any pair of device tensors overlaps (`alias_expression`, written out)."""
    names: dict[str, Any] = {}
    exec(f"def aliased(p):\n    return {alias_expression(pairs, 'p[{}]')}\n", names)
    return names["aliased"]


@dataclass
class FastCall:
    """A prepared launch for one signature, and how each call's values reach it.

    `recipe` has one entry per PTX parameter: ("pointer", i) the address of
    argument value i, ("scalar", i, convert) argument value i converted,
    ("tensor_map", i, encode) the tensor map over argument value i's address
    (runtime.MapEncoder), ("const", v) a size the signature fixes; `assembler` writes it out as one
    function.  `queue(stream, values)` launches (None when the grid is empty:
    nothing runs).  `pairs` are the (read, written) tensor pairs whose overlap
    decides the code (phobos.launch.binding.overlapping_tensors), with their
    sizes in bytes, and `aliased` whether they overlapped when this launch was
    prepared: the launch serves only calls where they do the same.  `direct`,
    for a signature of positional arguments only, is the whole call written
    out as one function (`direct_call`), which checks its torch tensors with
    `tensor_check` where there is one (`torch_tensor_check`).  `grid_holds`,
    for a grid given as a function, says whether the function still gives the
    prepared grid.
    """

    queue: Callable[[int, Sequence[Any]], None] | None
    recipe: list[tuple]
    stream_of: StreamSource
    last: Any  # what the kernel's inspection shows after the call
    check_stream: Callable[[int], None]
    pairs: tuple[tuple[int, int, int, int], ...] = ()
    aliased: bool = False
    parts: Key | None = None  # the signature's key parts, when its arguments are all positional
    locate: Locate | None = None
    grid_holds: Callable[[], bool] | None = None
    owner: Any = None  # whose `last` a direct call sets (the kernel's)
    tensor_check: TensorCheck | None = None  # torch's check of the torch tensors, for the direct call
    checked_streams: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.assemble = assembler(self.recipe)
        self.aliasing = alias_test(self.pairs)
        self.direct = direct_call(self) if self.parts is not None else None

    def __call__(self, values: Sequence[Any], pointers: list, hints: list, stream: Any) -> None:
        """Queue the kernel; ScalarOverflow (before any GPU work) when a scalar does not pack, GridChanged when
        the grid function gives another grid."""
        if self.grid_holds is not None and not self.grid_holds():
            raise GridChanged
        if self.queue is None:
            return
        handle = self.stream_of(hints) if stream is None else self._given(stream)
        try:
            self.queue(handle, self.assemble(values, pointers))
        except (OverflowError, struct.error):
            raise ScalarOverflow from None

    def _given(self, stream: Any) -> int:
        handle = stream_handle(stream)
        if handle not in self.checked_streams:
            self.check_stream(handle)
            self.checked_streams.add(handle)
        return handle


class Prepared:
    """The FastCalls of one signature key, one per aliasing (whether its read and written tensors overlap)."""

    def __init__(self, first: FastCall):
        self.aliasing = first.aliasing  # the same pairs and sizes for every call of the key
        self.calls = {first.aliased: first}

    def get(self, pointers: list) -> FastCall | None:
        return self.calls.get(self.aliasing(pointers))

    def add(self, call: FastCall) -> None:
        self.calls[call.aliased] = call


def grid_check(spec: Callable, config: dict, sizes: dict, grid: tuple,
               normalize: Callable[[Any], tuple]) -> Callable[[], bool]:
    """A function () -> whether the grid function `spec` still gives `grid` for `config` and `sizes`
    (`normalize` turns its answer into an (x, y, z) tuple, raising on a bad one)."""
    def grid_holds() -> bool:
        try:
            return normalize(spec(dict(config), dict(sizes))) == grid
        except Exception:  # the full path calls it again and reports what it raises
            return False
    return grid_holds


# ---------------------------------------------------------------------------
# Direct calls: the whole prepared call of one signature as one function
#
# `direct_call(fast)` writes out, for a signature of positional arguments,
# what probe + key lookup + FastCall do for it, as straight-line code: each
# argument's check against the values its key part fixed (type, dtype, shape,
# contiguity, device, alignment class), the aliasing test, the stream, the
# parameter values, the launch.  It returns the FastCall when it launched and
# None when anything differs (the caller then takes the probing path, which
# finds another signature or the full path).  Guards per probe are in GUARDS:
# scalars and torch tensors get theirs written out; any other kind is probed
# as on the probing path and its key part compared.


def _guard_scalar(i: int, part: tuple, names: dict, one_device: bool) -> list[str]:
    names[f"K{i}"] = part[0]
    return [f"if type(v{i}) is not K{i}: return None"]


def _guard_torch(i: int, part: tuple, names: dict, one_device: bool) -> list[str]:
    """torch's dtypes are singletons, so the dtype is compared by identity (another object of an equal
    dtype, which torch never gives, would only send the call to the probing path); a CUDA tensor is on the
    one device there is, where the driver sees one; a strided view's strides are compared too (a
    contiguous one's guard stays as it was)."""
    kind, dtype, shape, layout, device, alignment = part
    names.update({f"K{i}": kind, f"D{i}": dtype, f"S{i}": shape, f"L{i}": layout})
    on_device = "" if one_device else f" or v{i}.get_device() != {device}"
    lines = [f"if type(v{i}) is not K{i} or not v{i}.is_cuda: return None",
             f"p{i} = v{i}.data_ptr()",
             f"if p{i} & 15 != {alignment} or v{i}.dtype is not D{i} or v{i}.shape != S{i}{on_device} "
             f"or v{i}.is_contiguous() is not {layout is True}: return None"]
    if layout is not True:
        lines.append(f"if v{i}.stride() != L{i}: return None")
    return lines


def _guard_probed(i: int, part: tuple, names: dict, one_device: bool) -> list[str]:
    names.update({f"K{i}": part[0], f"P{i}": part, f"probe{i}": PROBES[part[0]]})
    return [f"if type(v{i}) is not K{i}: return None",
            f"found = _probed(probe{i}, v{i}, locate)",
            f"if found is None or found[0] != P{i}: return None",
            f"p{i}, h{i} = found[1], found[2]"]


def _probed(probe_function: Callable, value: Any, locate: Locate) -> tuple | None:
    try:
        return probe_function(value, locate)
    except Exception:  # Unprobed, or whatever a strange object raises: the probing path describes it
        return None


#: How a direct call checks an argument, by the probe that made its key part.
GUARDS = {_probe_scalar: _guard_scalar, _probe_torch: _guard_torch}


@dataclass(frozen=True)
class TensorCheck:
    """torch's own check of the torch tensors among a call's values: `check(*(values[i] for i in indices))` is
    True when each is of the type, dispatch keys, dtype, device, requires_grad, sizes and strides of the tensor
    it was made from (some torch versions also ask that no two be the same object)."""

    check: Callable[..., bool]
    indices: tuple[int, ...]


def torch_tensor_check(values: Sequence[Any], parts: Key) -> TensorCheck | None:
    """The TensorCheck of the torch tensors among `values` (whose key parts are `parts`), made from them; None
    where there are none, or torch has no TensorGuards (it is not public: the direct call then checks each
    attribute).  It keeps no reference to the tensors."""
    indices = tuple(index for index, part in enumerate(parts) if PROBES.get(part[0]) is _probe_torch)
    torch_c = getattr(sys.modules.get("torch"), "_C", None)
    make = getattr(getattr(getattr(torch_c, "_dynamo", None), "guards", None), "TensorGuards", None)
    if not indices or make is None:
        return None
    try:
        guards = make(*(values[index] for index in indices), dynamic_dims_sizes=None, dynamic_dims_strides=None)
        return TensorCheck(guards.check, indices) if guards.check(*(values[index] for index in indices)) else None
    except Exception:  # another torch's TensorGuards: the per-attribute checks serve
        return None


def _guard_torch_tensors(tensor_check: TensorCheck, parts: Key, names: dict, one_device: bool) -> list[str]:
    """torch's one check of all torch tensors and their addresses' alignment classes; where it refuses them,
    each attribute on its own (`_guard_torch`), which accepts all it accepts."""
    names["tensor_check"] = tensor_check.check
    indices = tensor_check.indices
    alignments = [f"p{i} & 15 != {parts[i][5]}" for i in indices]
    if all(parts[i][5] == 0 for i in indices):
        alignments = [f"({' | '.join(f'p{i}' for i in indices)}) & 15"]
    return [f"if tensor_check({', '.join(f'v{i}' for i in indices)}):",
            *(f"    p{i} = v{i}.data_ptr()" for i in indices),
            f"    if {' or '.join(alignments)}: return None",
            "else:",
            *(f"    {line}" for i in indices for line in _guard_torch(i, parts[i], names, one_device))]


def direct_call(fast: FastCall) -> Callable[[tuple], FastCall | None]:
    """The whole call of `fast`'s signature (positional arguments only) as one function: values -> `fast`
    when it launched (having set its owner's `last`), None when the values are not of this signature or a
    scalar does not pack."""
    names: dict[str, Any] = {"fast": fast, "locate": fast.locate, "_probed": _probed, "struct": struct,
                             "owner": fast.owner, "last": fast.last}
    count = len(fast.parts)
    if count:
        lines = ["try:", f"    {''.join(f'v{i}, ' for i in range(count))}= values", "except ValueError:",
                 "    return None"]
    else:
        lines = ["if values: return None"]
    one_device = getattr(fast.queue, "only_device", False)
    checked = fast.tensor_check.indices if fast.tensor_check is not None else ()
    if checked:
        lines += _guard_torch_tensors(fast.tensor_check, fast.parts, names, one_device)
    for i, part in enumerate(fast.parts):
        if i not in checked:
            lines += GUARDS.get(PROBES[part[0]], _guard_probed)(i, part, names, one_device)
    if fast.grid_holds is not None:
        names["grid_holds"] = fast.grid_holds
        lines.append("if not grid_holds(): return None")
    if fast.pairs:
        overlap = alias_expression(fast.pairs, "p{}")
        lines.append(f"if {'not ' if fast.aliased else ''}({overlap}): return None")
    if fast.queue is not None:
        lines.append(f"stream = {_stream_code(fast.stream_of, names)}")
        items = []
        for index, step in enumerate(fast.recipe):
            if step[0] == "pointer":
                items.append(f"p{step[1]}")
            elif step[0] == "scalar" and step[2] is _same:
                items.append(f"v{step[1]}")
            elif step[0] == "scalar":
                names[f"convert{index}"] = step[2]
                items.append(f"convert{index}(v{step[1]})")
            elif step[0] == "tensor_map":
                names[f"encode{index}"] = step[2]
                items.append(f"encode{index}(p{step[1]})")
            else:
                items.append(repr(int(step[1])))
        arguments = ", ".join(items)
        inline = getattr(fast.queue, "inline", lambda: None)()
        # A number that does not pack raises before anything is queued: the probing path reports it.
        if inline is None:
            names["queue"] = fast.queue
            lines += ["try:", f"    queue(stream, ({arguments}{',' if items else ''}))",
                      "except (OverflowError, struct.error):", "    return None"]
        else:  # QueuedKernel.__call__, written out: without the lock in the thread that owns a buffer
            names.update(get_ident=threading.get_ident, pack_into=inline.pack_into, fail=inline.fail)
            lines += [f"if get_ident() == {inline.owner}:",
                      *(f"    {line}" for line in _launch_code(inline.own, "own", arguments, names)),
                      "    if code:", "        fail(code, stream, own)",
                      "else:", "    with shared.lock:",
                      *(f"        {line}" for line in _launch_code(inline.shared, "shared", arguments, names)),
                      "    if code:", "        fail(code, stream, shared)"]
    lines += ["owner.last = last", "return fast"]
    body = "\n".join(f"    {line}" for line in lines)
    exec(f"def direct(values):\n{body}\n", names)
    return names["direct"]


def _launch_code(launcher: Any, name: str, arguments: str, names: dict) -> list[str]:
    """Pack the stream and the parameters into `launcher`'s buffer and launch (cuda.Launcher); a number
    that does not pack returns None before anything is queued (the probing path reports it)."""
    names.update({name: launcher, f"{name}_buffer": launcher.buffer, f"{name}_start": launcher.start})
    return ["try:", f"    pack_into({name}_buffer, {STREAM_OFFSET}, stream, {arguments})",
            "except (OverflowError, struct.error):", "    return None",
            f"code = {name}_start()"]


def _stream_code(source: StreamSource, names: dict) -> str:
    if source.kind == "torch":
        names["current_stream"] = source.reader
        return f"current_stream({source.device})"
    if source.kind == "hint":
        return f"h{source.index} or 0"
    return "0"
