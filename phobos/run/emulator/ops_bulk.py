# mbarriers and bulk tensor copies (TMA): mbarrier.init / arrive /
# arrive.expect_tx / expect_tx / try_wait / test_wait / inval,
# cp.async.bulk.tensor (global -> shared with mbarrier completion, shared ->
# global with bulk async-groups), cp.async.bulk.commit_group / wait_group,
# prefetch.tensormap, and tensormap.replace / tensormap.cp_fenceproxy, with
# which a kernel builds a tensor map in memory.
#
# mbarrier objects live in async_state.Mbarriers, keyed by their flat shared
# offset in the batch; the 8 bytes they occupy are bounds- and alignment-checked
# but not otherwise touched.  An arrive returns the phase it arrived on as its
# state token.  The .shared::cluster forms of arrive and expect_tx reach the
# mbarriers of the other CTAs of the cluster (addresses from mapa, see
# cluster.py), once the mbarrier's initialisation was made visible to them.
# `try_wait`/`test_wait` are blocking tests (kind WAIT, see machine):
# a thread whose phase has not completed sleeps until it has, then sees true
# and is recorded as having observed the completed phases.  Arrivals are of
# kind WAIT too, so that one completing a phase lets the woken threads run
# first.
#
# A bulk tensor load reads its tensor map (the emulator's encoding of a
# phobos.run.tensor_map.TensorMap, at the generic address the kernel gives:
# a kernel parameter through cvta.param, or global memory), copies the box at
# the given coordinates (innermost first, signed; elements outside the tensor
# read as zero), writes it densely from the 128-byte aligned destination with
# the map's swizzle applied to the shared addresses, and signals
# complete_tx of the box's bytes on the mbarrier, all when issued.  A
# .shared::cluster destination may be another CTA's (with its mbarrier there);
# .multicast::cluster writes the box at the same offset in every CTA of the
# ctaMask and signals the mbarrier at the same offset in each.  Reading
# those bytes before observing the mbarrier phase is an error (see
# memory.RaceDetector), as is writing bytes a wgmma in flight reads.  A bulk
# tensor store writes the in-bound elements of the box from shared memory to
# global memory; its source stays watched until a cp.async.bulk.wait_group
# covers its bulk async-group.
from __future__ import annotations

import numpy as np

from ..tensor_map import DTYPES, FIELD_OFFSETS, MAGIC, MAX_RANK, PTX_ELEMENT_TYPES, EmulatedTensorMap
from . import fragments as fr
from . import numerics as nx
from . import syntax as syn
from .decode import WAIT, Semantics, opcode, plain
from .errors import Fault, MemoryFault, MisalignedAddress, PtxSyntaxError, UnsupportedPtx
from .cluster import mapped_address
from .memory import (APERTURE_SIZE, BULK_READ, BULK_WRITE, LOAD, MBARRIER, OFFSET_MASK, PARAM_APERTURE,
                     SHARED_APERTURE, STORE)
from .ops_arith import require
from .ops_memory import without_policy
from .ptxtypes import TYPES

U16, U32, S32, U64, PRED = TYPES["u16"], TYPES["u32"], TYPES["s32"], TYPES["u64"], TYPES["pred"]
_CONVERTING = ("tf32.ftz", "f32.ftz")  # tf32: f32 data rounded to TF32, nearest even (measured on the H200)
_ORDERING = {"release", "acquire", "relaxed", "cta", "cluster", "sem"}


def _threads(m, idx):
    return np.arange(m.n) if idx is None else np.asarray(idx)


def _barrier_address(d, operand, space: str):
    """A function (m, idx) -> flat shared offsets of the mbarriers the lanes name, by a .shared::cta,
    a .shared::cluster (another CTA's mbarrier too) or a generic (the executing CTA's) address."""
    address = d.address(operand, space)
    pc = d.index

    def flat(m, idx):
        addr = address(m, idx)
        if space != "generic":
            return m.spaces[space].locate(m, idx, addr, 8, MBARRIER, pc)
        threads = _threads(m, idx)
        rel = addr - np.uint64(SHARED_APERTURE)
        outside = rel >= np.uint64(APERTURE_SIZE)
        if outside.any():
            raise Fault(MemoryFault, f"mbarrier at generic address {int(addr[np.flatnonzero(outside)[0]]):#x}, "
                                     "which is not shared memory", thread=int(threads[0]))
        located = m.cluster_shared.locate(m, idx, rel, 8, MBARRIER, pc)
        peer = located // m.shared.stride != m.cta_of[threads]
        if peer.any():
            raise Fault(MemoryFault, f"mbarrier at generic address {int(addr[np.flatnonzero(peer)[0]]):#x}, in the "
                                     "shared memory of another CTA: only the .shared::cluster forms reach it",
                        thread=int(threads[np.flatnonzero(peer)[0]]))
        return located
    return flat


def _mbarrier(m, flat: int, threads, what: str, pc: int) -> int:
    """The number of the mbarrier at flat shared offset `flat`, which `threads` use (`what` they do
    with it, at instruction `pc`); another CTA's must have had its initialisation made visible to
    them, and its CTA must not exit before it is done with their signals."""
    number = m.mbarriers.lookup(flat, int(threads[0]))
    peers = threads[m.cta_of[threads] != flat // m.shared.stride]
    if peers.size:
        m.cluster_barrier.check_published(m, number, peers, what)
        m.cluster_shared.peer_signal(m, number, peers, pc)
    return number


def _barriers(m, idx, flat, what: str, pc: int) -> tuple[np.ndarray, np.ndarray]:
    """(unique barrier numbers, per lane: the position of its barrier in them)."""
    threads = _threads(m, idx)
    keys, inverse = np.unique(flat, return_inverse=True)
    numbers = np.array([_mbarrier(m, int(k), threads[inverse == i], what, pc) for i, k in enumerate(keys)],
                       np.int64)
    return numbers, inverse


def _mbarrier_modifiers(d, mods, peers: bool = False) -> str:
    """Drop the ordering qualifiers; the state space of the address: shared (::cta), shared::cluster
    (where `peers`: the instruction may reach another CTA's mbarrier) or generic."""
    mods.drop(lambda w: w in _ORDERING)
    word = mods.take("shared", "shared::cta", "shared::cluster")
    if word == "shared::cluster" and not peers:
        raise d.error(f"{mods.base} takes an mbarrier of the executing CTA (.shared::cta), not .shared::cluster",
                      PtxSyntaxError)
    return {None: "generic", "shared": "shared", "shared::cta": "shared", "shared::cluster": "shared::cluster"}[word]


@opcode("mbarrier.init")
def build_mbarrier_init(d, ins, mods):
    space = _mbarrier_modifiers(d, mods)
    target, count = d.operands(ins, 2)
    flat = _barrier_address(d, target, space)
    require(d, mods.type().name == "b64", "mbarrier.init takes .b64")
    read_count = d.reader(count, U32)

    def run(m, idx):
        where = flat(m, idx)
        counts = np.broadcast_to(read_count(m, idx), where.shape)
        bad = (counts < 1) | (counts >= 1 << 20)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise Fault(MemoryFault, f"mbarrier.init count {int(counts[i])} is outside 1 .. 2^20-1",
                        thread=int(_threads(m, idx)[i]))
        for w, c, thread in zip(where, counts, _threads(m, idx)):
            number = m.mbarriers.init(int(w), int(c))
            if m.cluster.size > 1:
                m.cluster_barrier.initialised(number, int(thread))
                m.cluster_shared.signals.pop(number, None)  # what peers did to the mbarrier it was
    return plain(run)


@opcode("mbarrier.inval")
def build_mbarrier_inval(d, ins, mods):
    space = _mbarrier_modifiers(d, mods)
    (target,) = d.operands(ins, 1)
    flat = _barrier_address(d, target, space)
    require(d, mods.type().name == "b64", "mbarrier.inval takes .b64")

    def run(m, idx):
        for w in np.unique(flat(m, idx)):
            m.mbarriers.index.pop(int(w), None)
    return plain(run)


@opcode("mbarrier.arrive", "mbarrier.expect_tx")
def build_mbarrier_arrive(d, ins, mods):
    """arrive [.expect_tx] state, [bar] {, count | txCount};  expect_tx [bar], txCount.
    An arrival is of kind WAIT (it always lets its lanes go): if it completes a phase,
    the threads sleeping on mbarriers run first.  The .shared::cluster forms reach the
    mbarriers of other CTAs of the cluster (and return no state: `_`)."""
    space = _mbarrier_modifiers(d, mods, peers=True)
    arrives = mods.base == "mbarrier.arrive"
    expect = not arrives or mods.flag("expect_tx")
    if arrives:
        ops = d.operands(ins, 3) if expect else d.operands(ins, 2, 3)
        write, target, rest = d.writer(ops[0], U64), ops[1], ops[2:]
        if space == "shared::cluster" and ops[0] != syn.Name("_"):
            raise d.error("mbarrier.arrive.shared::cluster returns no state: its destination must be `_`",
                          PtxSyntaxError)
    else:
        target, *rest = d.operands(ins, 2)
        write = None
    flat = _barrier_address(d, target, space)
    require(d, mods.type().name == "b64", f"{mods.base} takes .b64")
    read_extra = d.reader(rest[0], U32) if rest else None
    pc = d.index

    def run(m, idx):
        where = flat(m, idx)
        threads = _threads(m, idx)
        extra = np.broadcast_to(read_extra(m, idx), where.shape) if read_extra else np.ones(where.shape, np.int64)
        numbers, inverse = _barriers(m, idx, where, f"{mods.base} on", pc)
        tokens = np.zeros(len(where), np.uint64)
        for i, number in enumerate(numbers):
            lanes = np.flatnonzero(inverse == i)
            if expect:
                m.mbarriers.expect_tx(int(number), int(extra[lanes].astype(np.int64).sum()))
            if arrives:
                count = len(lanes) if expect else int(extra[lanes].astype(np.int64).sum())
                tokens[lanes] = m.mbarriers.arrive(m, int(number), count, int(threads[lanes[0]]))
        if write is not None:
            write(m, idx, tokens)
        return np.ones(len(where), bool)
    return Semantics(WAIT, run) if arrives else plain(run)


@opcode("mbarrier.try_wait", "mbarrier.test_wait")
def build_mbarrier_wait(d, ins, mods):
    """try_wait/test_wait [.parity] p, [bar], state|parity {, suspend-time hint}: a blocking test."""
    space = _mbarrier_modifiers(d, mods)
    parity = mods.flag("parity")
    ops = d.operands(ins, 3, 4) if mods.base == "mbarrier.try_wait" else d.operands(ins, 3)
    write = d.writer(ops[0], PRED)
    flat = _barrier_address(d, ops[1], space)
    require(d, mods.type().name == "b64", f"{mods.base} takes .b64")
    read_phase = d.reader(ops[2], U32 if parity else U64)
    if len(ops) == 4:
        d.reader(ops[3], U32)
    pc = d.index

    def run(m, lanes):
        where = flat(m, lanes)
        phase = np.broadcast_to(read_phase(m, lanes), where.shape).astype(np.int64)
        numbers, inverse = _barriers(m, lanes, where, f"{mods.base} on", pc)
        ready = np.zeros(len(where), bool)
        for i, number in enumerate(numbers):
            sel = np.flatnonzero(inverse == i)
            for value in np.unique(phase[sel]):
                done = m.mbarriers.completed(int(number), int(value) & 1 if parity else None,
                                             None if parity else int(value))
                if done:
                    picked = sel[phase[sel] == value]
                    ready[picked] = True
                    m.mbarriers.observe(int(number), lanes[picked])
        if ready.any():
            write(m, lanes[ready], np.ones(int(ready.sum()), bool))
        return ready
    return Semantics(WAIT, run)


# ------------------------------------------------------------------ bulk tensor copies

def _tensor_map(m, thread: int, address: int) -> EmulatedTensorMap:
    """The tensor map at a generic address (a kernel parameter or global memory)."""
    if address % 64:
        raise Fault(MisalignedAddress, f"tensor map at {address:#x}, which is not 64-byte aligned", thread=thread)
    rel = address - PARAM_APERTURE
    if 0 <= rel < APERTURE_SIZE:
        if rel + 128 > m.param.size:
            raise Fault(MemoryFault, f"tensor map at parameter offset {rel:#x} runs past the parameters",
                        thread=thread)
        raw = m.param.data[rel: rel + 128].tobytes()
    else:
        at = m.glob.locate(m, np.array([thread]), np.array([address], np.uint64), 128, LOAD, -1, align=64)
        raw = m.glob.data[int(at[0]): int(at[0]) + 128].tobytes()
    try:
        return EmulatedTensorMap.decode(raw)
    except ValueError as problem:
        raise Fault(MemoryFault, f"tensor map at {address:#x}: {problem}", thread=thread) from None


def _box(tm: EmulatedTensorMap, coords: np.ndarray, thread: int):
    """(global byte addresses of the in-bound elements, their box positions, all box positions)."""
    if any(s != 1 for s in tm.element_strides):
        raise Fault(UnsupportedPtx, f"tensor map element strides {tm.element_strides} are not modelled",
                    thread=thread)
    if tm.oob_fill != "zero":
        raise Fault(UnsupportedPtx, "tensor maps with NaN out-of-bound fill are not modelled", thread=thread)
    if tm.dtype in _CONVERTING:
        raise Fault(UnsupportedPtx, f"tensor maps of {tm.dtype} elements (which the copy may convert) are not "
                                    "modelled; describe the data as f32 (a raw copy)", thread=thread)
    grid = np.indices(tm.box[::-1]).reshape(len(tm.box), -1)[::-1]  # [dim, element], innermost fastest
    pos = grid + coords[:, None]
    inside = np.all((pos >= 0) & (pos < np.array(tm.shape)[:, None]), axis=0)
    offset = (pos * np.array(tm.strides)[:, None]).sum(axis=0)
    return tm.address + offset[inside], np.flatnonzero(inside), grid.shape[1]


def _tensor_operand(d, operand, rank: int):
    """Readers of the tensor-map address and of the coordinates of `[map, {c0, ...}]`."""
    if not isinstance(operand, syn.Address) or not operand.coords or operand.base is None:
        raise d.error("expected [tensor-map, {coordinates}]", PtxSyntaxError)
    if d.lookup(operand.base.text) is None:
        raise d.error("the tensor map must be given by a register holding its generic address "
                      "(mov.b64 of the parameter, then cvta.param.u64)", PtxSyntaxError)
    if len(operand.coords) != rank:
        raise d.error(f"a {rank}d copy takes {rank} coordinates", PtxSyntaxError)
    return d.reader(operand.base, U64), [d.reader(c, S32) for c in operand.coords]


@opcode("cp.async.bulk.tensor")
def build_bulk_tensor(d, ins, mods):
    dims = mods.take("1d", "2d", "3d", "4d", "5d")
    if dims is None:
        raise d.error("cp.async.bulk.tensor needs a dimension (.1d ... .5d)", PtxSyntaxError)
    rank = int(dims[0])
    mods.flag("tile")
    ops = without_policy(d, ins, mods)
    mods.flag("L2::cache_hint")
    multicast = mods.flag("multicast::cluster")
    first = next((w for w in mods.words if w in ("shared::cluster", "shared::cta", "global")), None)
    if first == "global":
        return _bulk_store(d, ins, mods, ops, rank)
    dst_space = mods.take("shared::cluster", "shared::cta")
    if dst_space is None or not mods.flag("global") or not mods.flag("mbarrier::complete_tx::bytes") \
            or (multicast and dst_space != "shared::cluster"):
        raise d.error("supported: cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes"
                      "{.multicast::cluster}, .shared::cta.global.mbarrier::complete_tx::bytes and "
                      ".global.shared::cta.bulk_group", UnsupportedPtx)
    if len(ops) != 3 + multicast:
        raise d.error("expected [dst], [tensor-map, {coordinates}], [mbarrier]" + (", ctaMask" if multicast else ""),
                      PtxSyntaxError)
    space = "shared" if dst_space == "shared::cta" else "shared::cluster"
    dst, bar = d.address(ops[0], space), d.address(ops[2], space)
    read_map, read_coords = _tensor_operand(d, ops[1], rank)
    read_mask = d.reader(ops[3], U16) if multicast else None
    pc = d.index

    def run(m, idx):
        threads = _threads(m, idx)
        dsts, maps, bars = dst(m, idx), read_map(m, idx), bar(m, idx)
        coords = np.stack([np.broadcast_to(r(m, idx), threads.shape) for r in read_coords]).astype(np.int64)
        masks = np.broadcast_to(read_mask(m, idx), threads.shape) if multicast else None
        for lane, thread in enumerate(threads):
            thread = int(thread)
            tm = _tensor_map(m, thread, int(maps[lane]))
            data = _box_data(m, thread, tm, coords[:, lane], pc)
            targets = [(int(dsts[lane]), int(bars[lane]))] if not multicast else \
                _multicast_targets(m, thread, int(dsts[lane]), int(bars[lane]), int(masks[lane]))
            for dst_address, bar_address in targets:
                _land(m, thread, space, dst_address, bar_address, data, tm.swizzle, pc)
    return plain(run)


def _multicast_targets(m, thread: int, dst: int, bar: int, mask: int) -> list[tuple[int, int]]:
    """(destination, mbarrier) .shared::cluster addresses of a multicast to the CTAs of `mask`: the
    same offsets as `dst` and `bar` in each CTA."""
    size = m.cluster.size
    if not mask or mask >> size:
        raise Fault(MemoryFault, f"multicast ctaMask {mask:#06x} names "
                                 f"{'no CTA' if not mask else f'CTA rank {mask.bit_length() - 1}'} of the cluster of "
                                 f"{size} CTAs", thread=thread)
    ranks = np.flatnonzero([mask >> r & 1 for r in range(size)])
    return [(int(mapped_address(r, dst & OFFSET_MASK)), int(mapped_address(r, bar & OFFSET_MASK))) for r in ranks]


def _box_data(m, thread: int, tm: EmulatedTensorMap, coords, pc: int) -> np.ndarray:
    """The bytes of the box at `coords`, densely in box order (elements outside the tensor are zeros)."""
    esize = tm.element_size
    source, inside, count = _box(tm, coords, thread)
    data = np.zeros((count, esize), np.uint8)
    if len(source):
        at = m.glob.locate(m, np.full(len(source), thread), source.astype(np.uint64), esize, BULK_READ, pc)
        data[inside] = m.glob.data[at[:, None] + np.arange(esize)]
        if tm.dtype == "tf32":
            data = nx.round_to_tf32(data.view(np.float32).reshape(-1), "rn").view(np.uint8).reshape(count, esize)
    return data.reshape(-1)


def _land(m, thread: int, space: str, dst: int, bar: int, data: np.ndarray, swizzle: int, pc: int) -> None:
    """Write a box into shared memory at `dst` and signal complete_tx on the mbarrier at `bar` (addresses
    of `space`; of .shared::cluster, both must be in one CTA), as one copy issued by `thread`."""
    one = np.array([thread])
    if space == "shared":
        row, offset = int(m.cta_of[thread]), int(m.shared.own_offsets(one, np.array([dst], np.uint64))[0])
    else:
        rows, offsets = m.cluster_shared.resolve(m, one, np.array([dst], np.uint64), "bulk tensor copy")
        row, offset = int(rows[0]), int(offsets[0])
    bar_flat = int(m.spaces[space].locate(m, one, np.array([bar], np.uint64), 8, MBARRIER, pc)[0])
    if bar_flat // m.shared.stride != row:
        raise Fault(MemoryFault, f"bulk tensor copy into the shared memory of CTA {m.describe_cta(row)} signalling "
                                 f"the {m.mbarriers.describe(m, m.mbarriers.lookup(bar_flat, thread))}: the mbarrier "
                                 f"must be in the CTA written to", thread=thread)
    nbytes = len(data)
    if offset % 128:
        raise Fault(MisalignedAddress, f"bulk tensor copy to shared address {offset:#x}, which is not 128-byte "
                                       f"aligned", thread=thread)
    if offset + nbytes > m.shared.size:
        raise Fault(MemoryFault, f"bulk tensor copy of {nbytes} bytes to shared address {offset:#x} overruns the "
                                 f"{m.shared.size} bytes of shared memory", thread=thread)
    flat = row * m.shared.stride + fr.swizzle(offset + np.arange(nbytes, dtype=np.int64), swizzle)
    number = _mbarrier(m, bar_flat, one, "a bulk tensor copy signals", pc)
    races = m.shared.races
    if races is not None:
        races.check_not_read_async(m, flat, m.ltid[thread], "bulk tensor copy write", m.cta_of[thread])
        races.record_bulk_write(flat, number, m.mbarriers.phase[number])
    m.shared.data[flat] = data
    m.mbarriers.complete_tx(number, nbytes)


def _bulk_store(d, ins, mods, ops, rank: int):
    if not (mods.flag("global") and mods.take("shared::cta") and mods.flag("bulk_group")):
        raise d.error("supported: cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group", UnsupportedPtx)
    if len(ops) != 2:
        raise d.error("expected [tensor-map, {coordinates}], [src]", PtxSyntaxError)
    read_map, read_coords = _tensor_operand(d, ops[0], rank)
    src = d.address(ops[1], "shared")
    pc = d.index

    def run(m, idx):
        threads = _threads(m, idx)
        srcs, maps = m.shared.own_offsets(idx, src(m, idx)), read_map(m, idx)
        coords = np.stack([np.broadcast_to(r(m, idx), threads.shape) for r in read_coords]).astype(np.int64)
        for lane, thread in enumerate(threads):
            thread = int(thread)
            tm = _tensor_map(m, thread, int(maps[lane]))
            esize = tm.element_size
            target, inside, count = _box(tm, coords[:, lane], thread)
            start = int(srcs[lane])
            if start % 128 or start + count * esize > m.shared.size:
                raise Fault(MemoryFault, f"bulk tensor store from shared address {start:#x} ({count * esize} "
                                         "bytes): not 128-byte aligned or beyond shared memory", thread=thread)
            flat = int(m.cta_of[thread]) * m.shared.stride + fr.swizzle(
                start + np.arange(count * esize, dtype=np.int64), tm.swizzle)
            data = m.shared.data[flat].reshape(count, esize)[inside]
            if len(target):
                at = m.glob.locate(m, np.full(len(target), thread), target.astype(np.uint64), esize, BULK_WRITE, pc)
                m.glob.data[at[:, None] + np.arange(esize)] = data
            m.bulk_groups.issue(m, np.array([thread]), (), flat, pc)
    return plain(run)


@opcode("cp.async.bulk.commit_group")
def build_bulk_commit(d, ins, mods):
    d.operands(ins, 0)
    return plain(lambda m, idx: m.bulk_groups.commit(_threads(m, idx)))


@opcode("cp.async.bulk.wait_group")
def build_bulk_wait(d, ins, mods):
    mods.flag("read")
    (count,) = d.operands(ins, 1)
    if not isinstance(count, syn.Imm) or count.kind != "int":
        raise d.error("cp.async.bulk.wait_group takes an integer constant", PtxSyntaxError)
    keep = count.value
    return plain(lambda m, idx: m.bulk_groups.complete(m, _threads(m, idx), keep))


@opcode("prefetch.tensormap")
def build_prefetch_tensormap(d, ins, mods):
    (operand,) = d.operands(ins, 1)
    d.address(operand, "generic")
    return plain(lambda m, idx: None)



# ------------------------------------------------------------------ tensor maps in memory

_REPLACE_SPACES = {"shared::cta": "shared", "global": "global", None: "generic"}
_ENUM_FIELDS = {  # the immediate new_val of each enumerated field -> the byte the encoding holds
    "elemtype": {code: DTYPES[name][0] for code, name in PTX_ELEMENT_TYPES.items()},
    "interleave_layout": {0: 0},  # interleaved layouts (1: 16B, 2: 32B) are not modelled
    "swizzle_mode": {0: 0, 1: 1, 2: 2, 3: 3},  # 4, the 96-byte swizzle of sm_103a, is not modelled
    "fill_mode": {0: 0, 1: 1},
}
_ORDINALS = {"box_dim": 5, "global_dim": 5, "global_stride": 4, "element_stride": 5}


@opcode("tensormap.replace")
def build_tensormap_replace(d, ins, mods):
    """`tensormap.replace.tile.field{.space}.b1024.type [addr], {ord,} new_val`: one field of the tensor map
    (128 bytes, 64-byte aligned) at addr, in shared or global memory, rewritten in the emulator's encoding
    (tensor_map.FIELD_OFFSETS), and its magic stamped, so that a map a kernel builds from zeros (Triton's
    on-device descriptors) is one the bulk tensor copies read.  .rank's new_val is the rank - 1, .elemtype's
    a PTX code (tensor_map.PTX_ELEMENT_TYPES); interleaved layouts, the 96-byte swizzle and the sm_100 element
    types are refused."""
    require(d, mods.flag("tile"), "tensormap.replace supports the .tile mode")
    field = mods.take(*FIELD_OFFSETS)
    require(d, field is not None and field not in ("magic", "l2_promotion"),
            f"tensormap.replace.{'.'.join(mods.words)} is not supported")
    space = _REPLACE_SPACES[mods.take("shared::cta", "global")]
    require(d, mods.flag("b1024"), "tensormap.replace works on .b1024 objects")
    value_type = mods.type()
    wide = field in ("global_address", "global_stride")
    require(d, value_type.name == ("b64" if wide else "b32"), f"tensormap.replace.{field} takes "
            f".{'b64' if wide else 'b32'}")
    ops = d.operands(ins, 3 if field in _ORDINALS else 2)
    ordinal = 0
    if field in _ORDINALS:
        if not isinstance(ops[1], syn.Imm) or ops[1].kind != "int" or not 0 <= ops[1].value < _ORDINALS[field]:
            raise d.error(f"the ordinal of tensormap.replace.{field} is a constant 0..{_ORDINALS[field] - 1}",
                          PtxSyntaxError)
        ordinal = ops[1].value
    offset, size = FIELD_OFFSETS[field]
    offset += ordinal * size
    entry = np.dtype(f"<u{size}")
    if field in _ENUM_FIELDS:
        if not isinstance(ops[-1], syn.Imm) or ops[-1].kind != "int":
            raise d.error(f"tensormap.replace.{field} takes an immediate", PtxSyntaxError)
        if ops[-1].value not in _ENUM_FIELDS[field]:
            raise d.error(f"tensormap.replace.{field} {ops[-1].value} is not supported")
        code = entry.type(_ENUM_FIELDS[field][ops[-1].value])
        new_value = lambda m, idx: code  # noqa: E731
    else:
        new_value = d.reader(ops[-1], value_type)
    address = d.address(ops[0], space)
    magic = np.frombuffer(MAGIC, np.uint64)[0]
    pc = d.index

    def run(m, idx):
        threads = _threads(m, idx)
        at = address(m, idx)
        misaligned = at % np.uint64(64) != 0
        if misaligned.any():
            lane = int(np.flatnonzero(misaligned)[0])
            raise Fault(MisalignedAddress, f"tensor map at {int(at[lane]):#x}, which is not 64-byte aligned",
                        thread=int(threads[lane]))
        value = np.broadcast_to(np.asarray(new_value(m, idx)), (len(threads),)).astype(np.uint64)
        if field == "rank":
            if (value >= MAX_RANK).any():
                lane = int(np.flatnonzero(value >= MAX_RANK)[0])
                raise Fault(UnsupportedPtx, f"tensormap.replace.rank {int(value[lane])}: the rank - 1 is 0..4",
                            thread=int(threads[lane]))
            value = value + np.uint64(1)
        if (value >> np.uint64(8 * size)).any():
            lane = int(np.flatnonzero(value >> np.uint64(8 * size))[0])
            raise Fault(UnsupportedPtx, f"tensormap.replace.{field} {int(value[lane])} does not fit the field",
                        thread=int(threads[lane]))
        space_of = m.spaces[space]
        space_of.store(m, idx, at, np.dtype(np.uint64), [magic], pc)
        space_of.store(m, idx, at + np.uint64(offset), entry, [value.astype(entry)], pc)
    return plain(run)


@opcode("tensormap.cp_fenceproxy")
def build_tensormap_copy(d, ins, mods):
    """`tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.scope.sync.aligned [dst], [src],
    128`: each warp copies the 128-byte tensor map at src in its CTA's shared memory to dst in global memory
    (a warp-wide instruction: each distinct pair of addresses once, by its lowest lane); the release fence
    orders nothing more in the emulator, which runs one instruction at a time."""
    for word in ("global", "shared::cta", "tensormap::generic", "release", "sync", "aligned"):
        if not mods.flag(word):
            raise d.error(f"expected tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release"
                          f".scope.sync.aligned (missing .{word})", PtxSyntaxError)
    if mods.take("cta", "cluster", "gpu", "sys") is None:
        raise d.error("tensormap.cp_fenceproxy needs a scope (.cta, .cluster, .gpu or .sys)", PtxSyntaxError)
    dst, src, size = d.operands(ins, 3)
    if not isinstance(size, syn.Imm) or size.value != 128:
        raise d.error("tensormap.cp_fenceproxy copies 128 bytes (size 128)", PtxSyntaxError)
    dst_address, src_address = d.address(dst, "global"), d.address(src, "shared")
    pc = d.index

    def run(m, idx):
        threads = _threads(m, idx)
        to, frm = dst_address(m, idx), src_address(m, idx)
        warp = m.cta_of[threads] * m.tpc + m.ltid[threads] // 32
        _, once = np.unique(np.stack([warp.astype(np.uint64), to, frm]), axis=1, return_index=True)
        lanes = threads[once]
        source = m.shared.locate(m, lanes, frm[once], 128, LOAD, pc, align=64)
        target = m.glob.locate(m, lanes, to[once], 128, STORE, pc, align=64)
        span = np.arange(128)
        m.glob.data[target[:, None] + span] = m.shared.data[source[:, None] + span]
    return plain(run)
