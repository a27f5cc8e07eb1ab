# A PTX emulator: runs the PTX text the Phobos compiler emits on the CPU.
#
# CI machines have no GPU; this package lets tests check the numerics of the
# exact PTX that would run on one.  It parses PTX, decodes each instruction
# once into a handler with its operands resolved, and executes all threads of
# a grid at once as NumPy arrays (one element per thread), with per-thread
# program counters for divergence and per-CTA barriers.  It is exact where PTX
# is exact (integer wrap-around, IEEE rounding modes, single-rounding fma),
# models the tensor cores' rounding bit for bit (mma.sync, wgmma; see
# numerics.TensorCoreModel and docs/tensor_cores.md), runs TMA copies and
# mbarriers and thread-block clusters (distributed shared memory,
# barrier.cluster, TMA multicast), and it stops with an `EmulatorError` at what a GPU would
# silently get wrong: out-of-bounds and misaligned accesses, shared-memory
# data races between barriers, global-memory data races (within a CTA between
# barriers, and between CTAs), `ld.global.nc` of data the kernel writes,
# cp.async and bulk-copy data used before its wait, plain stores read by a
# wgmma or bulk copy with no proxy fence, buffers reused while a
# wgmma reads them, wgmma registers written in flight, barriers in divergent
# code, `bra.uni` that diverges, barrier thread counts that are not whole
# warps, warp-synchronous instructions with absent lanes, races between the
# CTAs of a cluster and CTAs that exit while their peers use their shared
# memory, deadlocks, and any PTX it does not know.  What it does not see is listed in docs/emulator.md.
# Errors name the PTX line and, through `.loc`, the Phobos source line.
#
#     from phobos.run.emulator import launch
#     launch(ptx_text, "add", grid=(n // 256,), block=(256,), args=[x, y, out, n])
#
# Modules: syntax (parsing), inline (calls of .func inlined before parsing),
# decode (instructions -> handlers), ops_* (the instruction handlers),
# numerics (exact rounding, the tensor-core model),
# fragments (register fragments and shared-memory layouts of tensor-core
# operands), memory (state spaces, race detection, cp.async), async_state
# (wgmma groups, mbarriers, bulk groups), cluster (thread-block clusters:
# their shape, distributed shared memory, barrier.cluster, races between
# CTAs), machine (scheduler and launches).
from .errors import (AsyncCopyHazard, BarrierError, DeviceAssertTrap, DivergentBranch, EmulatorError,
                     GlobalMemoryRace, MemoryFault, MisalignedAddress, MissingProxyFence, NonCoherentRead,
                     PtxSyntaxError, SharedMemoryRace, TrapError, UnsupportedPtx, WarpSyncError)
from .machine import Kernel, LaunchStats, Module, Pointer, launch, load_module

__all__ = [
    "launch", "load_module", "Module", "Kernel", "LaunchStats", "Pointer",
    "EmulatorError", "PtxSyntaxError", "UnsupportedPtx", "MemoryFault", "MisalignedAddress",
    "SharedMemoryRace", "GlobalMemoryRace", "NonCoherentRead", "AsyncCopyHazard", "MissingProxyFence", "BarrierError",
    "DivergentBranch", "WarpSyncError", "TrapError",
    "DeviceAssertTrap",
]
