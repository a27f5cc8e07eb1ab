# Debugging from inside a kernel: device_print and device_assert.
#
# Both write `printf` ops: a C format string and the values it shows, for the
# GPU's vprintf (ptx/isel.py builds the format as a .global string and the
# arguments in a per-thread local buffer).  A tile prints one line per
# element, from the first replica of the thread that holds it, with the
# program instance and the element's index; a scalar prints one line, from
# thread 0.  The lines are those of the interpreter (run/interpreter.py:
# print_line, where_text, format_value), in whatever order the threads run;
# a device_assert's are read back by interpreter.AssertionOutput in the emulator.
#
# device_assert prints a line for each element whose condition is false - with
# the two values compared when the condition is a comparison - and then
# traps: the kernel stops with an error, on the GPU and in the emulator (which
# turns the lines into the DeviceAssertError's notes).
from __future__ import annotations

from ..middle.ir import Op, Value
from ..types import DType, TileType
from .core import BOOL, HANDLERS, Lowering
from .indexed import scalar_layout
from .layout import Layout
from .values import program_index

FORMATS = {DType.F32: "%.9g", DType.F64: "%.17g", DType.I32: "%d", DType.U32: "%u", DType.I64: "%lld", DType.U64: "%llu",
           DType.BOOL: "%s"}


def _prefix(layout: Layout | None, r: int, low: Lowering) -> tuple[str, list[Value]]:
    """The `[program (x, y, z) element (i, j)]` part of a line: its format and values."""
    pids = [program_index(low, a) for a in range(3)]
    if layout is None or not layout.shape:
        return "program (%d, %d, %d)", pids
    coords = [low.coord(layout, r, d) for d in range(layout.rank)]
    return f"program (%d, %d, %d) element ({', '.join(['%d'] * layout.rank)})", pids + coords


def _escape(text: str) -> str:
    return text.replace("%", "%%")


@HANDLERS.on("print")
def device_print(low: Lowering, op: Op) -> None:
    text = op.attrs["text"]
    values = op.operands
    tile = bool(values) and isinstance(values[0].type, TileType)
    layout = low.layouts[values[0]] if tile else scalar_layout(low)
    shown = [FORMATS[v.dtype.compute] for v in values]  # a 16-bit float prints as the f32 it is held in
    if "{}" in text:
        parts = [_escape(p) for p in text.split("{}")]
        body = "".join(p + (shown[i] if i < len(shown) else "") for i, p in enumerate(parts))
    else:
        body = " ".join(([_escape(text)] if text else []) + shown)
    owner = low.owner(layout)
    for r in range(layout.nregs):
        head, head_values = _prefix(layout if tile else None, r, low)
        regs = [low.in_layout(v, layout).regs[r] if tile else low.vals[v] for v in values]
        pred = low.all_of([low.slot_valid(layout, r) if tile else None, owner])
        _printf(low, f"[{head}] {body}\n", head_values + regs, pred)


@HANDLERS.on("assert")
def device_assert(low: Lowering, op: Op) -> None:
    cond, *compared = op.operands
    text, compare = op.attrs["text"], op.attrs["compare"]
    tile = isinstance(cond.type, TileType)
    layout = low.layouts[cond] if tile else scalar_layout(low)
    loc = op.loc
    owner = low.owner(layout)
    shown = f" ({FORMATS[compared[0].dtype.compute]} {compare} {FORMATS[compared[1].dtype.compute]})" if compared else ""
    failed = []
    for r in range(layout.nregs):
        ok, *values = (low.in_layout(v, layout).regs[r] if tile else low.vals[v] for v in op.operands)
        fails = low.all_of([low.op("not", [ok], BOOL), low.slot_valid(layout, r) if tile else None, owner])
        head, head_values = _prefix(layout if tile else None, r, low)
        message = f"{_escape(loc.file)}:{loc.line}: {head}: device_assert failed" + (
            f": {_escape(text)}" if text else "") + shown
        _printf(low, message + "\n", head_values + values, fails)
        failed.append(fails)
    any_failed = failed[0]
    for f in failed[1:]:
        any_failed = low.op("or", [any_failed, f], BOOL)
    low.b.op("trap", [any_failed], [], {"masked": True})


def _printf(low: Lowering, fmt: str, values: list[Value], pred: Value | None) -> None:
    low.b.op("printf", values + ([pred] if pred is not None else []), [], {"format": fmt, "masked": pred is not None})
