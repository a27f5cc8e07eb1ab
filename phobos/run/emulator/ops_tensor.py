# Tensor-core instructions: mma.sync, ldmatrix, stmatrix, the wgmma family
# and setmaxnreg.
#
# `mma.sync` (m16n8k16 .bf16/.f16, m16n8k8 .tf32, m16n8k32 .e4m3/.e5m2, f32
# accumulators; m16n8k32 .s8 with s32 accumulators) works on whole warps: the
# registers of the 32 lanes are gathered into matrices with the fragment
# tables of `fragments`, multiplied with the tensor-core model of the launch
# (numerics.tensor_core_dot) and scattered back.  `.tf32` operands are f32
# bit patterns of which the tensor core ignores the 13 low bits; 8-bit floats
# and s8 integers are four a register.  The s8 form is exact in every model:
# the integer products and C summed exactly, wrapped to 32 bits (without
# .satfinite the PTX ISA's s32 accumulation wraps; .satfinite is not modelled).
#
# `ldmatrix`/`stmatrix` move 8x8 matrices of 16-bit elements between shared
# memory and fragments: lanes 8i..8i+7 give the row addresses of matrix i,
# lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 (.trans: of the
# transposed matrix).  Each row is a 16-byte access by the lane that gave its
# address, so the race detector sees them as that lane's.
#
# `wgmma.mma_async` (sm_90a) works on whole warpgroups (128 threads: warps
# 4w..4w+3): m64nNk16 .bf16/.f16, m64nNk8 .tf32 and m64nNk32 .e4m3/.e5m2 with
# f32 accumulators, A from registers or a shared-memory descriptor, B from a
# descriptor (layouts and swizzles in `fragments`), scale-d (false: D = A B),
# imm-scale-a/b (-1 negates), imm-trans-a/b (MN-major operands, 16-bit types
# only: the others have no such operands and are K-major).  It is performed when issued;
# until the `wgmma.wait_group` that covers it, its registers and the shared
# bytes it read are watched (async_state.AsyncMma) and every wgmma needs a
# `wgmma.fence` after other instructions touched the registers wgmmas use.
# Descriptors must be the same in every thread of the warpgroup.
from __future__ import annotations

import re

import numpy as np

from ...constants import f8_values
from ...types import DType
from . import fragments as fr
from . import numerics as nx
from . import syntax as syn
from .decode import WAIT, Semantics, opcode, plain
from .errors import Fault, MemoryFault, PtxSyntaxError, TrapError, UnsupportedPtx, WarpSyncError
from .ops_arith import require
from .ptxtypes import TYPES

B32, F32, S32, U64, PRED = TYPES["b32"], TYPES["f32"], TYPES["s32"], TYPES["u64"], TYPES["pred"]
WARP, WARPGROUP = 32, 128
_ELEMENT_TYPES = ("bf16", "f16", "tf32", "e4m3", "e5m2")
_ELEMENT_SIZE = {"bf16": 2, "f16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1}
_F8 = {"e4m3": DType.F8E4M3, "e5m2": DType.F8E5M2}
_WGMMA_K = {"bf16": 16, "f16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32}


def whole_units(m, idx, size: int, what: str) -> np.ndarray:
    """The executing threads, checked to be whole warps (size 32) or warpgroups (128)."""
    threads = np.arange(m.n) if idx is None else np.asarray(idx)
    ltid = m.ltid[threads]
    units = threads.reshape(-1, size) if len(threads) % size == 0 else None
    if units is not None and (ltid.reshape(-1, size)[:, 0] % size == 0).all() \
            and (units[:, -1] - units[:, 0] == size - 1).all() and m.tpc % size == 0:
        return threads
    first = threads - ltid % size
    for start in np.unique(first):
        present = threads[first == start] - start
        missing = np.setdiff1d(np.arange(size), present)
        if missing.size:
            lane = int(missing[0])
            why = ("does not exist (the block is not a multiple of the unit)" if int(m.ltid[start]) + lane >= m.tpc
                   else "has exited or is not at this instruction (divergence)")
            raise Fault(WarpSyncError, f"{what} needs all {size} threads of each {'warp' if size == WARP else 'warpgroup'}"
                                       f"; thread {lane} of the {'warp' if size == WARP else 'warpgroup'} {why}",
                        thread=int(start))
    return threads


def _element_decoder(kind: str):
    """(lanes of raw register values, half) -> float64 element values."""
    if kind == "tf32":
        return lambda v, h: nx.tf32_value(v)
    if kind == "f32":
        return lambda v, h: np.asarray(v, np.float32).astype(np.float64)
    if kind == "s32":
        return lambda v, h: np.asarray(v, np.int32).astype(np.float64)
    if kind == "s8":  # byte h of the register, signed
        return lambda v, h: ((np.asarray(v, np.uint32) >> np.uint32(8 * h)) & np.uint32(0xFF)).astype(np.uint8) \
            .view(np.int8).astype(np.float64)
    if kind in _F8:  # byte h of the register
        return lambda v, h: f8_values(((np.asarray(v, np.uint32) >> np.uint32(8 * h)) & np.uint32(0xFF))
                                      .astype(np.uint8), _F8[kind]).astype(np.float64)
    half = _bf16_value if kind == "bf16" else _f16_value
    return lambda v, h: half((np.asarray(v, np.uint32) >> np.uint32(16 * h)) & np.uint32(0xFFFF))


def _bf16_value(bits):
    return (np.asarray(bits, np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def _f16_value(bits):
    return np.asarray(bits).astype(np.uint16).view(np.float16).astype(np.float64)


def _memory_values(raw: np.ndarray, kind: str) -> np.ndarray:
    """Element values from their little-endian bytes (..., size)."""
    if kind == "tf32":
        return nx.tf32_value(np.ascontiguousarray(raw).view(np.uint32)[..., 0])
    if kind in _F8:
        return f8_values(np.ascontiguousarray(raw)[..., 0], _F8[kind]).astype(np.float64)
    bits = np.ascontiguousarray(raw).view(np.uint16)[..., 0]
    return _bf16_value(bits) if kind == "bf16" else _f16_value(bits)


def _registers(d, operand, count: int, what: str):
    items = operand.items if isinstance(operand, syn.Vector) else None
    if items is None or len(items) != count:
        raise d.error(f"{what} is a list of {count} registers", PtxSyntaxError)
    return items


def _type_words(d, mods, count: int) -> list[str]:
    """The `count` element-type modifiers, in order."""
    found = [w for w in mods.words if w in ("f32", "s32", "s8", *_ELEMENT_TYPES)]
    if len(found) != count:
        raise d.error(f"{mods.base} needs {count} type modifiers, found {len(found)}", PtxSyntaxError)
    for w in found:
        mods.words.remove(w)
    return found


def _sync_aligned(d, mods):
    if not (mods.flag("sync") and mods.flag("aligned")):
        raise d.error(f"{mods.base} needs .sync.aligned", PtxSyntaxError)


# ------------------------------------------------------------------ mma.sync

_MMA_FRAGMENTS = {("m16n8k16", "bf16"): (fr.A16, fr.B16), ("m16n8k16", "f16"): (fr.A16, fr.B16),
                  ("m16n8k8", "tf32"): (fr.A_TF32, fr.B_TF32),
                  ("m16n8k32", "e4m3"): (fr.A8, fr.B8), ("m16n8k32", "e5m2"): (fr.A8, fr.B8),
                  ("m16n8k32", "s8"): (fr.A8, fr.B8)}
_MMA_ACCUMULATOR = {"s8": "s32"}  # the accumulator type of an operand type (f32 where not named)


def _model(m, kind: str, what: str):
    """The launch's tensor-core model, which must multiply `kind`."""
    model = m.config.tensor_cores
    if kind not in model.block:
        raise Fault(UnsupportedPtx, f"{what} of .{kind}: the {model.name} tensor cores have no such type "
                                    f"(8-bit floats: sm_89 and newer; launch with tensor_cores=\"hopper\")")
    return model


@opcode("mma")
def build_mma(d, ins, mods):
    _sync_aligned(d, mods)
    shape = mods.take("m16n8k16", "m16n8k8", "m16n8k32")
    if shape is None or not (mods.flag("row") and mods.flag("col")):
        raise d.error("supported: mma.sync.aligned.m16n8k16 / m16n8k8 / m16n8k32 .row.col", UnsupportedPtx)
    require(d, not mods.flag("satfinite"), "mma.sync .satfinite is not supported (the s32 sums wrap without it)")
    dtype, atype, btype, ctype = _type_words(d, mods, 4)
    accumulator = _MMA_ACCUMULATOR.get(atype, "f32")
    require(d, dtype == ctype == accumulator and atype == btype and (shape, atype) in _MMA_FRAGMENTS,
            f"mma.{shape}.{dtype}.{atype}.{btype}.{ctype} is not supported "
            "(f32 accumulators with bf16/f16 m16n8k16, tf32 m16n8k8 or e4m3/e5m2 m16n8k32; s32 with s8 m16n8k32)")
    frag_a, frag_b = _MMA_FRAGMENTS[shape, atype]
    ctype_ptx = TYPES[accumulator]
    dst, a, b, c = d.operands(ins, 4)
    writers = [d.writer(x, ctype_ptx) for x in _registers(d, dst, 4, "the destination")]
    read_a = [d.reader(x, B32) for x in _registers(d, a, frag_a.registers, "A")]
    read_b = [d.reader(x, B32) for x in _registers(d, b, frag_b.registers, "B")]
    read_c = [d.reader(x, ctype_ptx) for x in _registers(d, c, 4, "C")]
    decode, decode_c = _element_decoder(atype), _element_decoder(accumulator)

    def run(m, idx):
        whole_units(m, idx, WARP, "mma.sync")
        n = m.n if idx is None else len(idx)
        values = lambda readers: [np.broadcast_to(r(m, idx), (n,)) for r in readers]  # noqa: E731
        ma = fr.gather(frag_a, values(read_a), decode)
        mb = fr.gather(frag_b, values(read_b), decode)
        mc = fr.gather(fr.C32, values(read_c), decode_c)
        if accumulator == "s32":
            result = integer_dot(ma, mb, mc)
        else:
            result = nx.tensor_core_dot(ma, mb, mc.astype(np.float32), atype, _model(m, atype, "mma.sync"))
        for write, value in zip(writers, fr.scatter(fr.C32, result)):
            write(m, idx, value)
    return plain(run)


def integer_dot(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = C + A B of integer matrices (exact values in float64) as an s32 accumulation gives it: the products
    and C summed exactly (int64), wrapped to 32 bits."""
    exact = np.matmul(a.astype(np.int64), b.astype(np.int64)) + c.astype(np.int64)
    return exact.astype(np.int32)  # the low 32 bits, as two's complement


# ------------------------------------------------------------------ ldmatrix / stmatrix

def _matrix_modifiers(d, mods) -> tuple[int, bool]:
    _sync_aligned(d, mods)
    if not mods.flag("m8n8"):
        raise d.error(f"{mods.base} supports .m8n8 only", UnsupportedPtx)
    count = mods.take("x1", "x2", "x4")
    if count is None:
        raise d.error(f"{mods.base} needs .x1, .x2 or .x4", PtxSyntaxError)
    trans = mods.flag("trans")
    if mods.take("shared", "shared::cta") is None:
        raise d.error(f"{mods.base} needs .shared", PtxSyntaxError)
    require(d, mods.type().name == "b16", f"{mods.base} supports .b16 only")
    return int(count[1:]), trans


def _row_lanes(threads: np.ndarray, count: int) -> np.ndarray:
    """Positions (in `threads`) of the lanes giving row addresses, ordered (warp, matrix, row)."""
    warps = len(threads) // WARP
    return (np.arange(warps)[:, None] * WARP + fr.ldmatrix_lanes(count).reshape(-1)[None, :]).reshape(-1)


@opcode("ldmatrix")
def build_ldmatrix(d, ins, mods):
    count, trans = _matrix_modifiers(d, mods)
    dst, src = d.operands(ins, 2)
    writers = [d.writer(x, B32) for x in _registers(d, dst, count, "the destination")]
    address = d.address(src, "shared")
    rows, cols = fr.ldmatrix_element(trans)
    pc = d.index

    def run(m, idx):
        threads = whole_units(m, idx, WARP, "ldmatrix")
        pick = _row_lanes(threads, count)
        addr = address(m, idx)[pick]
        data = np.stack(m.shared.load(m, threads[pick], addr, np.dtype(np.uint16), 8, pc), axis=-1)
        mats = data.reshape(-1, count, 8, 8)  # (warp, matrix, row, column)
        for i, write in enumerate(writers):
            lo = mats[:, i, rows[0], cols[0]].astype(np.uint32)
            hi = mats[:, i, rows[1], cols[1]].astype(np.uint32)
            write(m, idx, (lo | (hi << np.uint32(16))).reshape(-1))
    return plain(run)


@opcode("stmatrix")
def build_stmatrix(d, ins, mods):
    count, trans = _matrix_modifiers(d, mods)
    dst, src = d.operands(ins, 2)
    readers = [d.reader(x, B32) for x in _registers(d, src, count, "the source")]
    address = d.address(dst, "shared")
    rows, cols = fr.ldmatrix_element(trans)
    pc = d.index

    def run(m, idx):
        threads = whole_units(m, idx, WARP, "stmatrix")
        warps = len(threads) // WARP
        mats = np.zeros((warps, count, 8, 8), np.uint16)
        for i, read in enumerate(readers):
            value = np.broadcast_to(read(m, idx), (len(threads),)).reshape(warps, WARP)
            mats[:, i, rows[0], cols[0]] = value & np.uint32(0xFFFF)
            mats[:, i, rows[1], cols[1]] = value >> np.uint32(16)
        pick = _row_lanes(threads, count)
        flat = mats.reshape(-1, 8)
        m.shared.store(m, threads[pick], address(m, idx)[pick], np.dtype(np.uint16),
                       [flat[:, c] for c in range(8)], pc)
    return plain(run)


# ------------------------------------------------------------------ wgmma

_WGMMA_SHAPE = re.compile(r"m64n(\d+)k(8|16|32)$")


@opcode("wgmma.fence", "wgmma.commit_group", "wgmma.wait_group")
def build_wgmma_sync(d, ins, mods):
    _sync_aligned(d, mods)
    what = mods.base
    if what == "wgmma.wait_group":
        (count,) = d.operands(ins, 1)
        if not isinstance(count, syn.Imm) or count.kind != "int":
            raise d.error("wgmma.wait_group takes an integer constant", PtxSyntaxError)
        keep = count.value
        return plain(lambda m, idx: m.async_mma.complete(m, whole_units(m, idx, WARPGROUP, what), keep))
    d.operands(ins, 0)
    if what == "wgmma.fence":
        return plain(lambda m, idx: m.async_mma.fence(whole_units(m, idx, WARPGROUP, what)))
    return plain(lambda m, idx: m.async_mma.commit(whole_units(m, idx, WARPGROUP, what)))


def _immediate(d, operand, allowed, what: str) -> int:
    if not isinstance(operand, syn.Imm) or operand.kind != "int" or operand.value not in allowed:
        raise d.error(f"{what} must be one of {', '.join(map(str, allowed))}", PtxSyntaxError)
    return operand.value


@opcode("wgmma.mma_async")
def build_wgmma(d, ins, mods):
    _sync_aligned(d, mods)
    shape = next((w for w in mods.words if _WGMMA_SHAPE.match(w)), None)
    if shape is None:
        raise d.error("wgmma.mma_async needs a shape m64nNk16, m64nNk8 or m64nNk32", PtxSyntaxError)
    mods.words.remove(shape)
    n, k = (int(x) for x in _WGMMA_SHAPE.match(shape).groups())
    dtype, atype, btype = _type_words(d, mods, 3)
    require(d, dtype == "f32" and atype == btype and atype in _ELEMENT_TYPES
            and k == _WGMMA_K[atype] and n % 8 == 0 and 8 <= n <= 256,
            f"wgmma.mma_async.{shape}.{dtype}.{atype}.{btype} is not supported "
            "(f32 accumulators; bf16/f16 with k16, tf32 with k8 or e4m3/e5m2 with k32; N = 8..256 in steps of 8)")
    transposable = atype in ("bf16", "f16")
    ops = list(ins.operands)
    a_in_registers = isinstance(ops[1], syn.Vector) if len(ops) > 1 else False
    extra = (3 + (1 if a_in_registers else 2)) if transposable else 3
    if len(ops) != 3 + extra:
        raise d.error(f"expected {3 + extra} operands, found {len(ops)}", PtxSyntaxError)
    acc = _registers(d, ops[0], n // 2, "the accumulator")
    read_d = [d.reader(x, F32) for x in acc]
    writers = [d.writer(x, F32) for x in acc]
    slots = {d.register(x)[0] for x in acc}
    if a_in_registers:
        a_items = _registers(d, ops[1], 4, "A")
        read_a = [d.reader(x, B32) for x in a_items]
        slots |= {d.register(x)[0] for x in a_items}
    else:
        read_adesc = d.reader(ops[1], U64)
    read_bdesc = d.reader(ops[2], U64)
    scale_d = ops[3]
    read_scale = (lambda m, idx: bool(scale_d.value)) if isinstance(scale_d, syn.Imm) \
        else d.reader(scale_d, PRED)
    scale_a = _immediate(d, ops[4], (1, -1), "imm-scale-a")
    scale_b = _immediate(d, ops[5], (1, -1), "imm-scale-b")
    trans = [_immediate(d, x, (0, 1), "imm-trans") for x in ops[6:]]
    trans_a = bool(trans[0]) if transposable and not a_in_registers else False
    trans_b = bool(trans[-1]) if transposable else False
    d.claim_async_registers(slots)
    frag_a = {"tf32": fr.A_TF32, "e4m3": fr.A8, "e5m2": fr.A8}.get(atype, fr.A16)
    frag_d = fr.wgmma_accumulator(n)
    decode, decode_d = _element_decoder(atype), _element_decoder("f32")
    esize = _ELEMENT_SIZE[atype]
    pc = d.index

    def run(m, idx):
        threads = whole_units(m, idx, WARPGROUP, "wgmma.mma_async")
        m.async_mma.check_fenced(threads)
        count = len(threads)
        groups = count // WARPGROUP
        first = threads.reshape(groups, WARPGROUP)[:, 0]
        reads = []
        bdesc = _uniform(read_bdesc(m, idx), groups, "B descriptor")
        mb = _shared_operand(m, first, bdesc, n, k, esize, atype, trans_b, reads).transpose(0, 2, 1)
        if a_in_registers:
            ma = fr.gather(frag_a, [np.broadcast_to(r(m, idx), (count,)) for r in read_a], decode)
            ma = ma.reshape(groups, 64, k)
        else:
            adesc = _uniform(read_adesc(m, idx), groups, "A descriptor")
            ma = _shared_operand(m, first, adesc, 64, k, esize, atype, trans_a, reads)
        mc = fr.gather(frag_d, [np.broadcast_to(r(m, idx), (count,)) for r in read_d], decode_d)
        mc = mc.reshape(groups, 64, n).astype(np.float32)
        scale = np.broadcast_to(read_scale(m, idx), (count,)).reshape(groups, WARPGROUP)
        if not (scale.all(axis=1) | ~scale.any(axis=1)).all():
            raise Fault(WarpSyncError, "scale-d differs between the threads of a warpgroup", thread=int(first[0]))
        mc[~scale[:, 0]] = 0
        result = nx.tensor_core_dot(ma * scale_a, mb * scale_b, mc, atype, _model(m, atype, "wgmma"))
        for write, value in zip(writers, fr.scatter(frag_d, result.reshape(groups * 4, 16, n))):
            write(m, idx, value)
        m.async_mma.issue(m, threads, slots, np.concatenate(reads), pc)
    return plain(run)


def _uniform(values, groups: int, what: str) -> np.ndarray:
    """One value per warpgroup, which all of its threads must agree on."""
    per = np.broadcast_to(np.asarray(values, np.uint64), (groups * WARPGROUP,)).reshape(groups, WARPGROUP)
    bad = (per != per[:, :1]).any(axis=1)
    if bad.any():
        raise Fault(WarpSyncError, f"the {what} differs between the threads of a warpgroup")
    return per[:, 0]


def _shared_operand(m, first, descs, rows: int, k: int, esize: int, kind: str, mn_major: bool,
                    reads: list) -> np.ndarray:
    """Operand matrices (groups, rows, k) read through matrix descriptors; the flat shared
    bytes read are appended to `reads`."""
    out = np.zeros((len(first), rows, k), np.float64)
    races = m.shared.races
    for g, (thread, value) in enumerate(zip(first, descs)):
        desc = fr.MatrixDescriptor.decode(int(value))
        if desc.base_offset:
            raise Fault(UnsupportedPtx, f"matrix descriptor {int(value):#x}: a non-zero base offset is not "
                                        "modelled (tiles aligned to the swizzle pattern have base offset 0)",
                        thread=int(thread))
        addr = fr.operand_addresses(desc, rows, k, esize, mn_major)
        if (addr + esize > m.shared.size).any():
            bad = int(addr.max())
            raise Fault(MemoryFault, f"a wgmma operand (descriptor {int(value):#x}) reaches shared offset "
                                      f"{bad:#x}, beyond the {m.shared.size} bytes of shared memory",
                        thread=int(thread))
        flat = (int(m.cta_of[thread]) * m.shared.stride + addr)[..., None] + np.arange(esize)
        if races is not None:
            races.check_observed(m, flat.reshape(-1), np.full(flat.size, m.ltid[thread]))
        out[g] = _memory_values(m.shared.data[flat], kind)
        reads.append(flat.reshape(-1))
    return out


# ------------------------------------------------------------------ setmaxnreg

@opcode("setmaxnreg")
def build_setmaxnreg(d, ins, mods):
    """`setmaxnreg.inc/.dec.sync.aligned.u32 N` by whole warpgroups, moving registers between the
    warps and the CTA's pool (async_state.RegisterPool): .dec may not raise a warp's count nor
    .inc lower it; an .inc waits (kind WAIT) until the pool holds what its warp asks for, and one
    that never can is a deadlock, as on the GPU (ptxas does not check the budget)."""
    action = mods.take("inc", "dec")
    if action is None:
        raise d.error("setmaxnreg needs .inc or .dec", PtxSyntaxError)
    _sync_aligned(d, mods)
    require(d, mods.type().name == "u32", "setmaxnreg takes .u32")
    (operand,) = d.operands(ins, 1)
    count = _immediate(d, operand, range(24, 257, 8), "the register count")

    def run(m, threads):
        whole_units(m, threads, WARPGROUP, "setmaxnreg")
        pool = m.registers
        if pool.entry is None:  # ptxas ignored it: no register cap at entry
            return np.ones(len(threads), bool)
        warps = np.unique(m.cta_of[threads] * pool.warps_per_cta + m.ltid[threads] // WARP)
        held = pool.held[warps]
        wrong = held < count if action == "dec" else held > count
        if wrong.any():
            w = int(warps[np.flatnonzero(wrong)[0]])
            raise Fault(TrapError, f"setmaxnreg.{action} to {count} registers, but warp {w % pool.warps_per_cta} "
                                       f"holds {int(pool.held[w])}: .dec may only lower a warp's count and .inc "
                                       f"only raise it", thread=int(threads[0]))
        granted = np.zeros(len(warps), bool)
        groups = warps // (WARPGROUP // WARP)  # the instruction is collective: a warpgroup at a time
        for group in np.unique(groups):
            mine = groups == group
            cta = int(warps[mine][0]) // pool.warps_per_cta
            change = int((count - pool.held[warps[mine]]).sum()) * WARP
            if change <= pool.free[cta]:
                pool.free[cta] -= change
                pool.held[warps[mine]] = count
                granted[mine] = True
        if action == "dec":
            pool.releases += 1
        thread_warps = m.cta_of[threads] * pool.warps_per_cta + m.ltid[threads] // WARP
        return np.isin(thread_warps, warps[granted])
    return Semantics(WAIT, run)
