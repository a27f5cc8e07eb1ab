# Memory instructions: ld, st, atom, red, cp.async, cvta, prefetch and
# createpolicy (an L2 cache policy, for the `.L2::cache_hint` operand of ld,
# st, atom, red and the asynchronous copies, which changes no value).
# (`cvta.param` gives generic addresses of kernel parameters, which tensor
# maps are read through; see ops_bulk.)
#
# Loads and stores go through the state space objects of `memory`, which
# check bounds and alignment and feed the race detectors (.shared::cluster,
# the shared memory of the CTAs of a cluster: cluster.ClusterSharedSpace).  Cache and ordering
# qualifiers (.cg, .L2::128B, .relaxed.gpu, ...) do not change results on a
# CPU that runs one instruction at a time and are accepted and dropped, except
# `.nc`: the global race detector reports data read through the non-coherent
# cache that the kernel also writes.  Anything else unknown is an error.
#
# Atomics run lane by lane in thread order (see memory.apply_atomic), so that
# every contribution counts and float sums round as if threads arrived in
# order.  `atom.add.f32` flushes subnormal inputs and results, as PTX says;
# `.add.noftz` of f16 and bf16 (and of their packed pairs, each half on its
# own) rounds each sum once, subnormals kept.
#
# cp.async copies are recorded when issued and performed when a
# `cp.async.wait_group`/`wait_all` covers them (or their thread exits); the
# bytes of the destination are marked pending in between, so that reading
# them early is reported instead of seeing stale data.
from __future__ import annotations

import numpy as np

from . import numerics as nx
from . import syntax as syn
from .decode import opcode, plain
from .errors import Fault, MemoryFault, PtxSyntaxError
from .memory import (ASYNC, ASYNC_SOURCE, ATOMIC, LOAD, LOCAL_APERTURE, NC_LOAD, PARAM_APERTURE, SHARED_APERTURE,
                     STORE, STRONG_STORE, full_sizes)
from .ops_arith import elementwise, half_sum, pairwise, require
from .ptxtypes import TYPES

_SPACES = {"global": "global", "const": "const", "shared": "shared", "shared::cta": "shared",
           "shared::cluster": "shared::cluster", "local": "local", "param": "param"}
_HINTS = {"nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt", "volatile", "weak", "relaxed", "acquire",
          "release", "acq_rel", "sc", "mmio", "cta", "gpu", "sys", "cluster", "unified"}
U32, U64 = TYPES["u32"], TYPES["u64"]


def _is_hint(word: str) -> bool:
    return word in _HINTS or word.startswith(("L1::", "L2::"))


def _space(mods, allowed=("global", "const", "shared", "shared::cluster", "local", "generic", "param")) -> str:
    word = mods.take(*_SPACES)
    space = _SPACES[word] if word else "generic"
    require(mods.decoder, space in allowed, f"{mods.base}.{word} is not supported")
    return space


def _vector_count(mods) -> int:
    word = mods.take("v2", "v4", "v8")
    return int(word[1:]) if word else 1


def _value_items(d, operand, count: int):
    items = operand.items if isinstance(operand, syn.Vector) else (operand,)
    if len(items) != count:
        raise d.error(f"expected {count} value operand(s), found {len(items)}", PtxSyntaxError)
    return items


def without_policy(d, ins, mods) -> list:
    """The operands but the cache policy that `.L2::cache_hint` adds last (a 64-bit value, from createpolicy,
    that changes no result: checked to be one, then dropped)."""
    ops = list(ins.operands)
    if "L2::cache_hint" in mods.words:
        if not ops:
            raise d.error(".L2::cache_hint needs a cache-policy operand", PtxSyntaxError)
        d.reader(ops.pop(), U64)
    return ops


def _access_operands(d, ins, mods) -> list:
    """The value and address operands of ld and st."""
    ops = without_policy(d, ins, mods)
    if len(ops) != 2:
        raise d.error(f"expected 2 operands, found {len(ops)}", PtxSyntaxError)
    return ops


@opcode("ld", "ldu")
def build_ld(d, ins, mods):
    space = _space(mods)
    count = _vector_count(mods)
    ops = _access_operands(d, ins, mods)
    non_coherent = mods.flag("nc")
    require(d, not non_coherent or space == "global", "ld.nc reads global memory: ld.global.nc")
    access = NC_LOAD if non_coherent else LOAD
    mods.drop(_is_hint)
    t = mods.type()
    require(d, t.kind != "pred", "ld.pred is not valid")
    writers = [d.writer(x, t) for x in _value_items(d, ops[0], count)]
    dtype = t.dtype
    if space == "param":
        if not _call_parameter(d, ops[1]):
            return _ld_param(d, ops[1], t, writers)
        space = "local"  # a .param variable of the body: a call's result, or an argument of an inlined .func
    address = d.address(ops[1], space)
    pc = d.index

    def run(m, idx):
        values = m.spaces[space].load(m, idx, address(m, idx), dtype, count, pc, access)
        for write, value in zip(writers, values):
            write(m, idx, value)
    return plain(run)


def _call_parameter(d, operand) -> bool:
    """Whether a [name+offset] operand names a .param variable of the body (decode keeps them in local memory)."""
    return (isinstance(operand, syn.Address) and operand.base is not None
            and (d.variable(operand.base.text) or ("",))[0] == "local")


def _ld_param(d, operand, t, writers):
    """ld.param of a kernel parameter: the same value for every thread."""
    if not isinstance(operand, syn.Address) or operand.base is None:
        raise d.error("ld.param needs [parameter] or [parameter+offset]", PtxSyntaxError)
    param, base = d.param(operand.base.text)
    size = t.size
    offset = base + operand.offset
    if operand.offset < 0 or operand.offset + size * len(writers) > param.size:
        raise d.error(f"ld.param reads outside parameter {param.name} ({param.size} bytes)", PtxSyntaxError)
    if operand.offset % size:
        raise d.error("misaligned ld.param", PtxSyntaxError)
    dtype = t.dtype

    def run(m, idx):
        for k, write in enumerate(writers):
            at = offset + k * size
            write(m, idx, m.params[at: at + size].view(dtype)[0])
    return plain(run)


@opcode("st")
def build_st(d, ins, mods):
    space = _space(mods, allowed=("global", "shared", "shared::cluster", "local", "generic", "param"))
    if space == "param":  # an argument of a call: a .param variable of the body, kept in local memory
        space = "local"
    count = _vector_count(mods)
    ops = _access_operands(d, ins, mods)
    # a strong store of global memory races with no other strong access (the global race detector
    # does not track it, as it does not track atomics)
    access = STRONG_STORE if space == "global" and {"relaxed", "volatile", "release"} & set(mods.words) else STORE
    mods.drop(_is_hint)
    t = mods.type()
    require(d, t.kind != "pred", "st.pred is not valid")
    readers = [d.reader(x, t) for x in _value_items(d, ops[1], count)]
    address = d.address(ops[0], space)
    dtype = t.dtype
    pc = d.index

    def run(m, idx):
        values = [r(m, idx) for r in readers]
        m.spaces[space].store(m, idx, address(m, idx), dtype, values, pc, access)
    return plain(run)


# ------------------------------------------------------------------ atomics

def _float_add(t):
    if t.name in _HALF_PAIRS:  # two sums, one in each 16-bit half of the word
        add = pairwise(half_sum(TYPES[_HALF_PAIRS[t.name]]), TYPES[_HALF_PAIRS[t.name]])
        return lambda old, b, c: add(old, b)
    if t.bits == 16:
        add = half_sum(t)
        return lambda old, b, c: add(old, b)
    return lambda old, b, c: nx.atomic_add(old, b)


_HALF_PAIRS = {"f16x2": "f16", "bf16x2": "bf16"}
_ATOMIC_TYPES = {
    "add": ("u32", "s32", "u64", "s64", "f32", "f64", "f16", "bf16", "f16x2", "bf16x2"),
    "min": ("u32", "s32", "u64", "s64"), "max": ("u32", "s32", "u64", "s64"),
    "inc": ("u32",), "dec": ("u32",),
    "and": ("b32", "b64"), "or": ("b32", "b64"), "xor": ("b32", "b64"),
    "exch": ("b32", "b64"), "cas": ("b16", "b32", "b64"),
}
_NOFTZ_ONLY = {"f16", "bf16", "f16x2", "bf16x2"}  # their add is written .add.noftz


def _atomic_update(op: str, t):
    """old, b, c -> new value stored by one atomic."""
    zero = t.dtype.type(0)
    one = t.dtype.type(1)
    return {
        "add": _float_add(t) if t.is_float else (lambda old, b, c: old + b),
        "min": lambda old, b, c: np.minimum(old, b),
        "max": lambda old, b, c: np.maximum(old, b),
        "inc": lambda old, b, c: np.where(old >= b, zero, old + one),
        "dec": lambda old, b, c: np.where((old == zero) | (old > b), b, old - one),
        "and": lambda old, b, c: old & b,
        "or": lambda old, b, c: old | b,
        "xor": lambda old, b, c: old ^ b,
        "exch": lambda old, b, c: b,
        "cas": lambda old, b, c: np.where(old == b, c, old),
    }[op]


@opcode("atom", "red")
def build_atomic(d, ins, mods):
    returns = mods.base == "atom"
    space = _space(mods, allowed=("global", "shared", "shared::cluster", "generic"))
    op = mods.take(*_ATOMIC_TYPES)
    if op is None:
        raise d.error(f"{mods.base} needs an operation (.add, .min, .cas, ...)", PtxSyntaxError)
    require(d, returns or op not in ("exch", "cas"), f"red.{op} is not valid")
    sem = next((w for w in mods.words if w in ("acquire", "release", "acq_rel")), None)
    noftz = mods.take("noftz") is not None
    ops = without_policy(d, ins, mods)
    mods.drop(_is_hint)
    t = mods.type()
    require(d, t.name in _ATOMIC_TYPES[op], f"{mods.base}.{op}.{t.name} is not supported")
    require(d, noftz == (t.name in _NOFTZ_ONLY and op == "add"),
            f"{mods.base}.{op}.{t.name}: .noftz is written with (and only with) add of f16, bf16 and their pairs")
    count = (4 if op == "cas" else 3) - (0 if returns else 1)
    if len(ops) != count:
        raise d.error(f"expected {count} operands, found {len(ops)}", PtxSyntaxError)
    if returns:
        write, ops = d.writer(ops[0], t), ops[1:]
    address = d.address(ops[0], space)
    rb = d.reader(ops[1], t)
    rc = d.reader(ops[2], t) if op == "cas" else None
    update = _atomic_update(op, t)
    dtype = t.dtype
    pc = d.index

    def run(m, idx):
        b = rb(m, idx)
        c = rc(m, idx) if rc is not None else None
        at = address(m, idx)
        old = m.spaces[space].atomic(m, idx, at, dtype, update, b, c, pc)
        if returns:
            write(m, idx, old)
        if sem is not None and space == "global" and m.glob.races is not None:  # orders CTAs: see memory.py
            threads = np.arange(m.n) if idx is None else np.asarray(idx)
            offsets = m.glob.locate(m, threads, at, dtype.itemsize, ATOMIC, pc)
            m.glob.races.synchronize(m, threads, offsets, sem != "release", sem != "acquire")
    return plain(run)


# ------------------------------------------------------------------ cp.async

@opcode("cp.async")
def build_cp_async(d, ins, mods):
    level = mods.take("ca", "cg")
    dst_space, src_space = mods.take("shared", "shared::cta"), mods.take("global")
    if level is None or dst_space is None or src_space is None:
        raise d.error("expected cp.async.ca/.cg.shared.global", PtxSyntaxError)
    ops = without_policy(d, ins, mods)
    mods.drop(lambda w: w.startswith("L2::"))
    if len(ops) not in (3, 4) or not isinstance(ops[2], syn.Imm) or ops[2].kind != "int":
        raise d.error("expected cp.async [dst], [src], cp-size{, src-size | ignore-src}", PtxSyntaxError)
    cp_size = ops[2].value
    require(d, cp_size in (4, 8, 16), f"cp-size must be 4, 8 or 16, not {cp_size}")
    require(d, level == "ca" or cp_size == 16, "cp.async.cg copies 16 bytes")
    dst_address = d.address(ops[0], "shared")
    src_address = d.address(ops[1], "global")
    src_size = _source_size(d, ops[3] if len(ops) == 4 else None, cp_size)
    pc = d.index
    whole = len(ops) == 3  # (every lane copies cp-size bytes)

    def run(m, idx):
        threads = m.all_threads if idx is None else idx
        n = len(threads)
        sizes = cp_size if whole else np.asarray(src_size(m, idx))
        if whole or (sizes == cp_size).all():  # (the common case)
            dst = m.shared.locate(m, idx, dst_address(m, idx), cp_size, ASYNC, pc)
            src = m.glob.locate(m, idx, src_address(m, idx), cp_size, ASYNC_SOURCE, pc, align=cp_size)
            m.async_copies.issue(threads, dst, src, full_sizes(n, cp_size), cp_size, pc, m.shared.races)
            return
        sizes = np.broadcast_to(sizes.astype(np.uint64), (n,)).copy()
        if (sizes > cp_size).any():
            lane = int(np.flatnonzero(sizes > cp_size)[0])
            raise Fault(MemoryFault, f"cp.async src-size {int(sizes[lane])} exceeds cp-size {cp_size}",
                        thread=int(threads[lane]))
        dst = m.shared.locate(m, idx, dst_address(m, idx), cp_size, ASYNC, pc)
        src = np.zeros(n, np.int64)
        reads = np.flatnonzero(sizes > 0)
        if reads.size:
            src[reads] = m.glob.locate(m, threads[reads], src_address(m, idx)[reads], sizes[reads],
                                       ASYNC_SOURCE, pc, align=cp_size)
        m.async_copies.issue(threads, dst, src, sizes.astype(np.int64), cp_size, pc, m.shared.races)
    return plain(run)


def _source_size(d, operand, cp_size: int):
    """src-size as a function of the lanes: an integer operand, or `ignore-src` (a predicate)."""
    if operand is None:
        return lambda m, idx: cp_size
    if isinstance(operand, syn.Name):
        slot = d.lookup(operand.text)
        if slot is not None and d.reg_types[slot].kind == "pred":
            ignore = d.reader(operand, TYPES["pred"])
            return lambda m, idx: np.where(ignore(m, idx), 0, cp_size)
    return d.reader(operand, U32)


@opcode("cp.async.commit_group")
def build_cp_async_commit(d, ins, mods):
    d.operands(ins, 0)
    return plain(lambda m, idx: m.async_copies.commit(np.arange(m.n) if idx is None else idx))


@opcode("cp.async.wait_group")
def build_cp_async_wait(d, ins, mods):
    (count,) = d.operands(ins, 1)
    if not isinstance(count, syn.Imm) or count.kind != "int":
        raise d.error("cp.async.wait_group takes an integer constant", PtxSyntaxError)
    keep = count.value
    return plain(lambda m, idx: m.async_copies.complete(m, np.arange(m.n) if idx is None else idx, keep))


@opcode("cp.async.wait_all")
def build_cp_async_wait_all(d, ins, mods):
    d.operands(ins, 0)

    def run(m, idx):
        threads = np.arange(m.n) if idx is None else idx
        m.async_copies.commit(threads)
        m.async_copies.complete(m, threads, 0)
    return plain(run)


# ------------------------------------------------------------------ cache policies

_PRIORITIES = {"L2::evict_normal": 0, "L2::evict_first": 1, "L2::evict_last": 2, "L2::evict_unchanged": 3}


@opcode("createpolicy")
def build_createpolicy(d, ins, mods):
    """`createpolicy.fractional.L2::primary{.L2::secondary}.b64 d{, fraction}`, `createpolicy.range{.global}
    .L2::primary{.L2::secondary}.b64 d, [a], primary-size, total-size` and `createpolicy.cvt.L2.b64 d, prop`:
    an L2 cache policy for the `.L2::cache_hint` operand of ld, st, cp.async and the bulk copies, where it
    changes no value.  The 64-bit policy is the emulator's own opaque encoding (the priorities in the low
    byte, a fraction's f32 bits in the high word); .cvt passes the access property through."""
    kind = mods.take("fractional", "range", "cvt")
    if kind is None:
        raise d.error("createpolicy needs .fractional, .range or .cvt", PtxSyntaxError)
    require(d, mods.type().name == "b64", "createpolicy makes a .b64 policy")
    if kind == "cvt":
        require(d, mods.flag("L2"), "createpolicy.cvt is .cvt.L2")
        return elementwise(d, ins, U64, [U64], lambda a: a)
    mods.take("global")
    primary = mods.take(*_PRIORITIES)
    secondary = mods.take("L2::evict_first", "L2::evict_unchanged")
    if primary is None:
        raise d.error("createpolicy needs a primary priority (.L2::evict_last, ...)", PtxSyntaxError)
    ops = d.operands(ins, *((1, 2) if kind == "fractional" else (4,)))
    fraction = 1.0
    if kind == "fractional" and len(ops) == 2:
        if not isinstance(ops[1], syn.Imm) or ops[1].kind not in ("float", "f32bits", "int"):
            raise d.error("the fraction of createpolicy.fractional is a constant", PtxSyntaxError)
        fraction = float(d.constant(ops[1], TYPES["f32"]))
        if not 0.0 < fraction <= 1.0:
            raise d.error(f"the fraction {fraction} is not in (0, 1]", PtxSyntaxError)
    if kind == "range":
        d.address(ops[1], "global" if "global" in ins.opcode.split(".") else "generic")
        d.reader(ops[2], U32)
        d.reader(ops[3], U32)
    low = _PRIORITIES[primary] | (_PRIORITIES.get(secondary, 3) << 2) | ((kind == "range") << 4)
    policy = np.uint64(low | int(np.float32(fraction).view(np.uint32)) << 32)
    write = d.writer(ops[0], U64)
    return plain(lambda m, idx: write(m, idx, policy))


# ------------------------------------------------------------------ addresses

_APERTURES = {"shared": SHARED_APERTURE, "shared::cluster": SHARED_APERTURE, "local": LOCAL_APERTURE,
              "param": PARAM_APERTURE}  # .shared::cluster addresses sit in the shared aperture too (cluster.py)


@opcode("cvta")
def build_cvta(d, ins, mods):
    to = mods.flag("to")
    word = mods.take("global", "const", "shared", "shared::cta", "shared::cluster", "local", "param")
    if word is None:
        raise d.error("cvta needs .global, .const, .shared, .local or .param", PtxSyntaxError)
    space = _SPACES[word]
    t = mods.type()
    require(d, t.name in ("u64", "u32"), "cvta takes .u32 or .u64")
    require(d, space in ("global", "const") or t.bits == 64 or to, "generic addresses are 64-bit")
    d.operands(ins, 2)
    if space in ("global", "const"):
        fn = lambda a: a  # noqa: E731 - generic, global and const addresses coincide here
    else:
        base = t.dtype.type(_APERTURES[space] & ((1 << t.bits) - 1))
        fn = (lambda a: a - base) if to else (lambda a: a + base)
    return elementwise(d, ins, t, [t], fn)


@opcode("prefetch", "prefetchu")
def build_prefetch(d, ins, mods):
    space = _space(mods, allowed=("global", "local", "generic"))
    mods.drop(lambda w: w in ("L1", "L2") or _is_hint(w))
    (operand,) = d.operands(ins, 1)
    d.address(operand, space)
    return plain(lambda m, idx: None)
