# The lowering driver: tile-level Function -> thread-level Function.
#
# `lower` makes the state (core.Lowering: threads per CTA, a layout per tile
# value, the program order - placement.py), lowers the body op by op through
# the handler table, and records the shared memory the kernel needs.  The
# imports below fill that table: each concern module registers its handlers
# when imported.
from __future__ import annotations

from ..errors import ResourceError
from ..middle.cluster_sync import check_cluster_reductions
from ..middle.ir import Function, walk
from . import control, debug, dot, indexed, memory, mma, pipeline, rearrange, reduce, scan, values  # noqa: F401
from .core import Lowering


def lower(func: Function, smem_limit: int, cp_async: bool = False, index_bits: int = 32,
          read_only_cache: bool = True, tensor_cores: bool = False, wgmma: bool = False, tma: bool = False,
          fp8: bool = False, capability: int = 75, strided: dict[str, bool] | None = None) -> Function:
    """Thread-level IR for a tile-level function.

    Before: a verified tile-level Function (tiles, tensor slices, dot, reduce).
    After: a Function of scalar ops only, with attrs `threads` (per CTA),
    `shared_bytes` (the scratch buffer), `notes` (what the compiled
    kernel's report says about the code chosen) and `schedules` (the text
    of each pipelined loop's schedule.Schedule) - and, where the CTAs loop
    over the output tiles (pipeline.persistent_loop), `programs` parameters
    and possibly `cluster` (also set by the CLUSTER knob: CTAs per program
    instance, sm_90 and newer) - ready for math expansion and
    instruction selection.  `smem_limit` is the target's shared memory per
    CTA (a ResourceError beyond it); `cp_async` allows pipelined K loops;
    `index_bits` 64 makes tensor dims (and the size parameters) and element
    coordinates 64-bit, for tensors with dims of 2^31 or more (attr
    `index_bits`); `read_only_cache` False loads no tensor through the
    read-only cache (ld.global.nc), for calls whose tensors overlap;
    `tensor_cores` allows mma.sync (sm_80 and newer), `wgmma` wgmma.mma_async
    (sm_90a), `tma` copies by TMA through tensor maps (parameters of kind
    `tensor_map` in attrs `params`, which the launcher fills per call);
    `fp8` the conversions and mma.sync of 8-bit floats (sm_89 and newer; attr
    `native_fp8`); `capability` is the target's compute capability (attr
    `capability`: 80 and newer convert to bf16 natively, 90 and newer add
    bf16 atomically); `strided` names the tensors addressed through element
    strides, each with whether its last stride is 1 (parameters of kind
    `stride` in attrs `params`, one per dim but such a last one, which the
    launcher fills).
    """
    check_cluster_reductions(func)
    low = Lowering(func, smem_limit, cp_async, index_bits, read_only_cache, tensor_cores, wgmma, tma, fp8, strided)
    persistent = pipeline.persistent_loop(low)
    if low.cluster > 1:
        _check_cluster(func, low.cluster, capability, persistent is not None)
        low.out.attrs["cluster"] = low.cluster
    if persistent is not None:
        pipeline.lower_persistent(low, *persistent)
    else:
        low.lower_block(func.body, low.out.body)
    low.out.attrs["shared_bytes"] = low.smem_bytes
    low.out.attrs["notes"] = list(low.notes)
    low.out.attrs["schedules"] = list(low.schedules)
    low.out.attrs["native_fp8"] = fp8
    low.out.attrs["capability"] = capability
    return low.out


def _check_cluster(func: Function, cluster: int, capability: int, persistent: bool) -> None:
    """A ResourceError where the CLUSTER knob cannot be honoured: clusters need sm_90, and persistent CTAs
    take their clusters from CLUSTER_M and CLUSTER_N.  It points at the kernel's first cluster builtin."""
    loc = next((op.loc for op in walk(func.body) if op.opcode in ("cluster_index", "cluster_reduce")), None)
    if capability < 90:
        raise ResourceError(f"CLUSTER={cluster} runs a program instance on a cluster of CTAs, which sm_90 and "
                            f"newer have; this target is sm_{capability}", loc)
    if persistent:
        raise ResourceError(f"CLUSTER={cluster} with persistent CTAs: their clusters are CLUSTER_M and "
                            f"CLUSTER_N's (or PERSISTENT=0)", loc)

