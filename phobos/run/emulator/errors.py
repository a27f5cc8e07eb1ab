# Errors of the PTX emulator.
#
# Every fault the emulator finds while parsing or running PTX is an
# `EmulatorError`, a Phobos `ExecutionError`.  Its `loc` is the Phobos source
# position taken from the last `.loc` directive before the faulting PTX
# instruction (so the error's `file:line:col:` points at the kernel source),
# and its message starts with the PTX position, `name.ptx:57:`.
# The subclasses name the kind of fault so that tests and tools can tell them
# apart.
#
# Inside the emulator, handlers raise `Fault`, which knows what went wrong but
# not where: the scheduler catches it and turns it into the public error with
# the PTX line, the source location and the thread that faulted.
from __future__ import annotations

from ...errors import DeviceAssertError, ExecutionError, Loc, Note, RaceError


class EmulatorError(ExecutionError):
    """A fault found while parsing or running PTX on the CPU."""

    def __init__(self, message: str, loc: Loc | None = None, notes: list[Note] | None = None,
                 *, ptx_file: str | None = None, ptx_line: int | None = None):
        super().__init__(message, loc, notes)
        self.ptx_file = ptx_file
        self.ptx_line = ptx_line


class PtxSyntaxError(EmulatorError):
    """PTX text the emulator cannot read (malformed, or an undeclared name)."""


class UnsupportedPtx(EmulatorError):
    """A valid PTX instruction, modifier or directive the emulator does not implement."""


class MemoryFault(EmulatorError):
    """An access outside every global allocation or outside the declared shared/local memory."""


class MisalignedAddress(EmulatorError):
    """An access whose address is not a multiple of its size (the GPU's 'misaligned address')."""


class SharedMemoryRace(EmulatorError, RaceError):
    """Two threads of a CTA touch one shared byte between barriers, at least one writing."""


class GlobalMemoryRace(EmulatorError, RaceError):
    """Two threads touch one global byte with nothing ordering them, at least one writing: threads of
    one CTA with no barrier in between, or threads of different CTAs (which nothing orders)."""


class NonCoherentRead(EmulatorError):
    """`ld.global.nc` of bytes the same kernel writes: the read-only cache may return stale data."""


class DivergentBranch(EmulatorError):
    """A `bra.uni` (a branch promised uniform) that the active threads of one warp take differently."""


class AsyncCopyHazard(EmulatorError):
    """Data used while an asynchronous operation on it is still in flight, or without the
    wait or fence it needs: shared memory read before its cp.async or bulk tensor copy
    was waited for, a buffer overwritten while a wgmma reads it, wgmma accumulators
    touched before wgmma.wait_group, a wgmma without wgmma.fence."""


class MissingProxyFence(AsyncCopyHazard):
    """Shared memory written by plain stores of the generic proxy (st.shared, stmatrix) and read by
    the asynchronous proxy (a wgmma operand, a bulk copy's source) with no fence.proxy.async by the
    writing thread in between: the tensor cores or the copy engine may read stale data."""


class BarrierError(EmulatorError):
    """A barrier that can never complete, or one reached by a CTA's threads at different places."""


class WarpSyncError(EmulatorError):
    """A warp-synchronous instruction (shfl.sync, vote.sync) whose member mask names lanes that are not there."""


class TrapError(EmulatorError):
    """The kernel executed `trap`, or ran past the emulator's step limit."""


class DeviceAssertTrap(TrapError, DeviceAssertError):
    """A call of `__assertfail` (CUDA's `assert`, Triton's `tl.device_assert`): the assertion's message,
    file, line and function, as the GPU prints them before it traps."""


class Fault(Exception):
    """A fault raised by an instruction handler; the scheduler adds where it happened.

    `thread` is the batch-local index of the thread to blame (or None), `related`
    lists (instruction index, description) pairs of other instructions involved,
    such as the earlier access of a data race, and `pc` names the instruction
    at fault when it is not the one executing (a barrier that never completes).
    """

    def __init__(self, kind: type[EmulatorError], message: str, thread: int | None = None,
                 related: list[tuple[int, str]] | None = None, pc: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.thread = thread
        self.related = list(related or [])
        self.pc = pc
