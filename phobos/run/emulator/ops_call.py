# Calls of external functions: `vprintf`, the GPU's printf, and `__assertfail`,
# the GPU's failed `assert`.
#
# A call names its return and argument parameters, `.param` variables of the
# kernel's body that earlier `st.param`s filled (decode.py keeps them in local
# memory).  vprintf(format, arguments) reads the format, a C string, and the
# arguments from the buffer they point to, laid out as C passes variable
# arguments (each aligned to its size: int 4 bytes; long long, double and
# pointers 8; a float is passed as a double), and writes the line to standard
# output (or the launch's `output`), thread by thread in thread order; its result is the number of
# characters written.  __assertfail(message, file, line, function, char size) -
# what CUDA's `assert` and Triton's `tl.device_assert` call where the condition
# is false - stops the launch with a DeviceAssertTrap giving what the GPU
# prints before it traps: `file:line: function: Assertion `message` failed`.
# Any other external function is refused when decoded.
from __future__ import annotations

import re

import numpy as np

from . import syntax as syn
from .decode import opcode, plain
from .errors import DeviceAssertTrap, Fault, MemoryFault, PtxSyntaxError, UnsupportedPtx
from .ptxtypes import TYPES

# one conversion of a C format: flags, width, precision, length, conversion
_CONVERSION = re.compile(r"%([-+ #0]*)(\d*)(?:\.(\d+))?(hh|h|ll|l|z|j|t)?([diouxXeEfgGcsp%])")
MAX_STRING = 4096


@opcode("call")
def build_call(d, ins, mods):
    mods.flag("uni")
    ops = d.operands(ins, 2, 3)
    returns = ops[0] if len(ops) == 3 else None
    callee, args = ops[-2], ops[-1]
    if not isinstance(callee, syn.Name) or not isinstance(args, syn.ParenList):
        raise d.error("expected call [(result),] function, (arguments)", PtxSyntaxError)
    external = EXTERNAL.get(callee.text)
    if external is None:
        raise d.error(f"calls of {callee.text} are not supported (only {', '.join(EXTERNAL)})", UnsupportedPtx)
    signature, build = external
    arguments, results = signature
    if len(args.items) != arguments or len(returns.items if returns is not None else ()) not in results:
        raise d.error(f"{callee.text} takes {arguments} arguments and returns {' or '.join(map(str, results))} "
                      "values", PtxSyntaxError)
    where = [_local_parameter(d, name) for name in args.items]
    result = _local_parameter(d, returns.items[0]) if returns is not None else None
    return plain(build(where, result, d.index))


def _vprintf(where: list[int], result: int | None, pc: int):
    u64, strings = np.dtype(np.uint64), {}

    def run(m, idx):
        threads = np.arange(m.n) if idx is None else np.asarray(idx)
        local = m.spaces["local"]
        fmt, buf = (_parameter(m, threads, at, u64, pc) for at in where)
        written = []
        for k, t in enumerate(threads):
            line = _format(m, int(t), int(fmt[k]), int(buf[k]), pc, strings)
            m.config.output(line)
            written.append(len(line))
        if result is not None:
            local.store(m, threads, np.full(len(threads), result, np.uint64), np.dtype(np.int32),
                        [np.array(written, np.int32)], pc)
    return run


def _assertfail(where: list[int], result: int | None, pc: int):
    message_at, file_at, line_at, function_at, _char_size = where

    def run(m, idx):
        threads = np.arange(m.n) if idx is None else np.asarray(idx)
        first = threads[:1]
        message, file, function = (
            _string(m, int(first[0]), int(_parameter(m, first, at, np.dtype(np.uint64), pc)[0]), pc, {})
            for at in (message_at, file_at, function_at))
        line = int(_parameter(m, first, line_at, np.dtype(np.uint32), pc)[0])
        others = f" (and {len(threads) - 1} more threads)" if len(threads) > 1 else ""
        raise Fault(DeviceAssertTrap, f"{file}:{line}: {function}: Assertion `{message}` failed{others}",
                    thread=int(first[0]))
    return run


#: The external functions a kernel may call: name -> ((arguments, the numbers of results allowed), builder).
EXTERNAL = {"vprintf": ((2, (0, 1)), _vprintf), "__assertfail": ((5, (0,)), _assertfail)}


def _parameter(m, threads: np.ndarray, at: int, dtype: np.dtype, pc: int) -> np.ndarray:
    """A `.param` argument of a call, per thread."""
    return m.spaces["local"].load(m, threads, np.full(len(threads), at, np.uint64), dtype, 1, pc)[0]


def _local_parameter(d, name: syn.Name) -> int:
    found = d.variable(name.text)
    if found is None or found[0] != "local":
        raise d.error(f"{name.text} is not a .param variable of the kernel's body", PtxSyntaxError)
    return found[1]


def _read(m, thread: int, address: int, dtype, pc: int):
    one = np.array([thread])
    return m.spaces["generic"].load(m, one, np.array([address], np.uint64), np.dtype(dtype), 1, pc)[0][0]


def _string(m, thread: int, address: int, pc: int, cache: dict) -> str:
    """The C string at a generic address (strings in global memory are cached: they are constants)."""
    if address in cache:
        return cache[address]
    out = bytearray()
    while len(out) < MAX_STRING:
        byte = int(_read(m, thread, address + len(out), np.uint8, pc))
        if byte == 0:
            text = out.decode(errors="replace")
            if address < 1 << 48:  # not a shared or local window: global, constant for the launch
                cache[address] = text
            return text
        out.append(byte)
    raise Fault(MemoryFault, f"printf: no end to the string at {address:#x} within {MAX_STRING} bytes",
                thread=thread)


def _format(m, thread: int, fmt_address: int, args: int, pc: int, cache: dict) -> str:
    """vprintf's output: the format's conversions applied to the arguments at `args`."""
    fmt = _string(m, thread, fmt_address, pc, cache)
    out, pos, offset = [], 0, 0
    for conv in _CONVERSION.finditer(fmt):
        out.append(fmt[pos:conv.start()])
        pos = conv.end()
        flags, width, precision, length, kind = conv.groups()
        if kind == "%":
            out.append("%")
            continue
        size = 8 if kind in "eEfgGsp" or length in ("ll", "l", "z", "j", "t") else 4
        offset = -(-offset // size) * size
        if kind in "eEfgG":
            value = float(_read(m, thread, args + offset, np.float64, pc))
        elif kind == "s":
            value = _string(m, thread, int(_read(m, thread, args + offset, np.uint64, pc)), pc, cache)
        else:
            dtype = {4: np.int32, 8: np.int64}[size] if kind in "di" else {4: np.uint32, 8: np.uint64}[size]
            value = int(_read(m, thread, args + offset, dtype, pc))
        offset += size
        spec = "%" + flags + width + (f".{precision}" if precision is not None else "") + \
            {"u": "d", "p": "x"}.get(kind, kind)
        out.append(spec % value)
    out.append(fmt[pos:])
    return "".join(out)
