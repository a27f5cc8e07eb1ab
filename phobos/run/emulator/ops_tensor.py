# Tensor-core instructions: mma.sync, ldmatrix, stmatrix, the wgmma family
# and setmaxnreg.
#
# `mma.sync` (`_MMA_SHAPES`: m16n8k16 .bf16/.f16, m16n8k8 .tf32, m16n8k32
# .e4m3/.e5m2 (A and B of either), .s8/.u8 in m8n8k16, m16n8k16 and m16n8k32
# (either pairing), and .f64 in m8n8k4, m16n8k4, m16n8k8, m16n8k16) works on
# whole warps: the registers of the 32 lanes are gathered into matrices with
# the fragment tables of `fragments`, multiplied (`multiply`) and scattered
# back.  Consecutive independent mma.sync of one form (a k step of a tiled
# product: tens in a row) run as one batch (decode.Fusable,
# machine.fusion_table): their warps are gathered side by side and multiplied
# BATCH_WARPS at a time.  Floating-point types other than f64 go through the tensor-core model
# of the launch (numerics.tensor_core_dot) into f32 accumulators, or f16 ones
# (.f16 and the 8-bit floats: two a register; the model's f32 result rounded
# once to nearest even, an assumption: numerics.round_half_accumulator).
# `.tf32` operands are f32 bit patterns of which the tensor core ignores the
# 13 low bits; 8-bit floats and integers are four a register.  The integer
# forms are exact in every model: the products and C summed exactly, wrapped
# to 32 bits, or clamped to the s32 range with .satfinite (PTX ISA, mma).
# .f64 is a chain of fma.f64, each rounded as the optional .rn/.rz/.rm/.rp
# says (PTX: "identical to .f64 fused multiply-add"; k ascending, an
# assumption: numerics.fma_dot).
#
# `ldmatrix`/`stmatrix` move 8x8 matrices of 16-bit elements between shared
# memory and fragments: lanes 8i..8i+7 give the row addresses of matrix i,
# lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 (.trans: of the
# transposed matrix).  Each row is a 16-byte access by the lane that gave its
# address, so the race detector sees them as that lane's.
#
# `wgmma.mma_async` (sm_90a) works on whole warpgroups (128 threads: warps
# 4w..4w+3): m64nNk16 .bf16/.f16, m64nNk8 .tf32 and m64nNk32 .e4m3/.e5m2 with
# f32 accumulators (f16 ones for .f16 and the 8-bit floats, as mma's), and
# m64nNk32 .s8/.u8 with s32 ones (.satfinite as mma's), A from registers or a
# shared-memory descriptor, B from a descriptor (layouts and swizzles in
# `fragments`), scale-d (false: D = A B), imm-scale-a/b (-1 negates; not for
# integers), imm-trans-a/b (MN-major operands, 16-bit types only: the others
# have no such operands and are K-major).  It is performed when issued;
# until the `wgmma.wait_group` that covers it, its registers and the shared
# bytes it read are watched (async_state.AsyncMma: a read of its accumulators
# waits for it, as ptxas makes it; a write of its registers is an error) and
# every wgmma needs a `wgmma.fence` after other instructions touched the
# registers wgmmas use.
# Descriptors must be the same in every thread of the warpgroup.
from __future__ import annotations

import functools
import re
from typing import Callable, NamedTuple

import numpy as np

from ...constants import f8_values
from ...types import DType
from . import fragments as fr
from . import numerics as nx
from . import syntax as syn
from .decode import WAIT, Fusable, Semantics, fusable, opcode, plain
from .errors import Fault, MemoryFault, PtxSyntaxError, TrapError, UnsupportedPtx, WarpSyncError
from .ops_arith import half_bits, require
from .ptxtypes import TYPES

B32, F32, S32, F64, U64, PRED = (TYPES[t] for t in ("b32", "f32", "s32", "f64", "u64", "pred"))
WARP, WARPGROUP = 32, 128
_ELEMENT_SIZE = {"bf16": 2, "f16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1, "f64": 8}
_F8 = {"e4m3": DType.F8E4M3, "e5m2": DType.F8E5M2}
_INTEGERS = ("s8", "u8")
_WGMMA_K = {"bf16": 16, "f16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}
# the operand types a multiplicand of one type may meet (A and B of 8-bit types may differ) and the
# accumulator types of each
_PARTNERS = {"e4m3": _F8, "e5m2": _F8, "s8": _INTEGERS, "u8": _INTEGERS}
_ACCUMULATES = {"f16": ("f32", "f16"), "bf16": ("f32",), "tf32": ("f32",), "e4m3": ("f32", "f16"),
                "e5m2": ("f32", "f16"), "s8": ("s32",), "u8": ("s32",), "f64": ("f64",)}
# wgmma forms PTX allows whose numbers the model does not give: (multiplicand, accumulator) -> why
_WGMMA_UNMODELLED = {(t, "f16"): "8-bit floats into an f16 accumulator are not modelled (an H100 does not give "
                     "the f32 sum rounded once to f16, the model's rule)" for t in ("e4m3", "e5m2")}
# accumulator type -> (register type, elements a register)
_ACCUMULATOR_REGISTERS = {"f32": (F32, 1), "s32": (S32, 1), "f64": (F64, 1), "f16": (B32, 2)}


def whole_units(m, idx, size: int, what: str) -> np.ndarray:
    """The executing threads, checked to be whole warps (size 32) or warpgroups (128)."""
    if idx is None and m.tpc % size == 0:  # every thread of the batch, in whole units
        return m.all_threads
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


def lane_values(m, idx, readers) -> list[np.ndarray]:
    """The values of the registers `readers` read, one per lane (a constant repeated for every lane)."""
    values = [read(m, idx) for read in readers]
    for i, value in enumerate(values):
        if type(value) is not np.ndarray or not value.ndim:
            values[i] = np.full(m.n if idx is None else len(idx), value)
    return values


def _element_decoder(kind: str):
    """Raw elements -> element values (float64; f16 ones float32, which holds them exactly): the
    register's value (32- and 64-bit kinds), or one of the 16- or 8-bit parts of a register
    (unsigned, see fragments.gather)."""
    if kind == "tf32":
        return nx.tf32_value
    if kind == "f32":
        return lambda v: np.asarray(v, np.float32).astype(np.float64)
    if kind == "s32":
        return lambda v: np.asarray(v, np.int32).astype(np.float64)
    if kind == "f64":
        return lambda v: np.asarray(v, np.float64)
    if kind in _INTEGERS:
        return lambda v: v.view(np.int8 if kind == "s8" else np.uint8).astype(np.float64)
    if kind in _F8:
        return lambda v: f8_values(v, _F8[kind]).astype(np.float64)
    return _bf16_value if kind == "bf16" else _f16_value


def _bf16_value(bits):
    return (np.asarray(bits, np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def _f16_value(bits):
    """The values of f16 bits, as float32 (exact; looked up: NumPy's own cast is slow on subnormals)."""
    return _F16_VALUES.take(np.asarray(bits, np.uint16))


_F16_VALUES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def _memory_values(raw: np.ndarray, kind: str) -> np.ndarray:
    """Element values from their little-endian bytes (..., size)."""
    if kind == "tf32":
        return nx.tf32_value(np.ascontiguousarray(raw).view(np.uint32)[..., 0])
    if kind in _F8:
        return f8_values(np.ascontiguousarray(raw)[..., 0], _F8[kind]).astype(np.float64)
    if kind in _INTEGERS:
        return np.ascontiguousarray(raw)[..., 0].view(np.int8 if kind == "s8" else np.uint8).astype(np.float64)
    bits = np.ascontiguousarray(raw).view(np.uint16)[..., 0]
    return _bf16_value(bits) if kind == "bf16" else _f16_value(bits)


def _registers(d, operand, count: int, what: str):
    items = operand.items if isinstance(operand, syn.Vector) else None
    if items is None or len(items) != count:
        raise d.error(f"{what} is a list of {count} registers", PtxSyntaxError)
    return items


def _type_words(d, mods, count: int) -> list[str]:
    """The `count` element-type modifiers, in order."""
    found = [w for w in mods.words if w in ("f32", "s32", *_ELEMENT_SIZE)]
    if len(found) != count:
        mods.refuse_unmodelled_types()
        raise d.error(f"{mods.base} needs {count} type modifiers, found {len(found)}", PtxSyntaxError)
    for w in found:
        mods.words.remove(w)
    return found


def _check_types(d, what: str, dtype: str, atype: str, btype: str) -> None:
    """A and B of one type (8-bit ones: of one family) and an accumulator type that type allows."""
    require(d, atype == btype or btype in _PARTNERS.get(atype, ()),
            f"{what}: .{atype} with .{btype} is not a valid pair of multiplicands")
    require(d, dtype in _ACCUMULATES[atype], f"{what}: .{atype} accumulates into "
            f"{' or '.join('.' + t for t in _ACCUMULATES[atype])}, not .{dtype}")


class Accumulator:
    """C and D of one accumulator type: the registers of a fragment (two f16 elements a register) and the
    conversions between them and element values."""

    def __init__(self, kind: str, frag: fr.Fragment):
        self.kind = kind
        self.register_type, per_register = _ACCUMULATOR_REGISTERS[kind]
        self.frag = fr.packed(frag) if per_register == 2 else frag
        self.decode = _element_decoder(kind)

    @property
    def registers(self) -> int:
        return self.frag.registers

    def matrices(self, values: list) -> np.ndarray:
        """(warps, R, C) float64 values from one (threads,) array per register."""
        return fr.gather(self.frag, values, self.decode)

    def registers_of(self, matrix: np.ndarray) -> list[np.ndarray]:
        """One (threads,) array of register values per register from result matrices."""
        out = []
        for elements in fr.scatter(self.frag, matrix):
            if self.kind != "f16":
                out.append(elements[0])
                continue
            lo, hi = (half_bits(x).astype(np.uint32) for x in elements)
            out.append(lo | (hi << np.uint32(16)))
        return out


def multiply(m, a: np.ndarray, b: np.ndarray, c: np.ndarray, atype: str, btype: str, accumulator: str,
             satfinite: bool, mode: str, what: str, arranged: bool = False) -> np.ndarray:
    """D = C + A B of a batch of matrices (exact values; A (B, M, K) and B (B, K, N), or where `arranged`
    as numerics.arranged_dot takes them, see _operand_layouts): integers exactly (`integer_dot`), f64 as
    a chain of fmas (`numerics.fma_dot`), the rest by the launch's tensor-core model; an f16 accumulator
    gets the model's f32 result rounded to nearest even (`numerics.round_half_accumulator`)."""
    if accumulator == "s32":
        return integer_dot(a, b, c, satfinite)
    if accumulator == "f64":
        return nx.fma_dot(a, b, c, mode)
    product = nx.arranged_dot if arranged else nx.tensor_core_dot
    result = product(a, b, c.astype(np.float32), atype, _model(m, atype, what), btype)
    return nx.round_half_accumulator(result) if accumulator == "f16" else result


def _operand_layouts(accumulator: str, warps: int, m: int, n: int) -> tuple[str, str, bool]:
    """How mma.sync gathers A and B of `warps` products of M x N (fragments.gather_chain's layouts), and
    whether that is numerics.arranged_dot's: the exact products (s32, f64) take them as NumPy's matmul
    does, the tensor-core model as it works on them."""
    if accumulator in ("s32", "f64"):
        return "bik", "bkj", False
    order = "k" + nx.dot_layout(warps, m, n)
    return order, order, True


def _sync_aligned(d, mods):
    if not (mods.flag("sync") and mods.flag("aligned")):
        raise d.error(f"{mods.base} needs .sync.aligned", PtxSyntaxError)


# ------------------------------------------------------------------ mma.sync

_C8X8 = fr.first(fr.C32, 2, (8, 8))
# (shape, multiplicand type) -> the fragments of A, B and C/D
_MMA_SHAPES = {
    ("m16n8k16", "bf16"): (fr.A16, fr.B16, fr.C32), ("m16n8k16", "f16"): (fr.A16, fr.B16, fr.C32),
    ("m16n8k8", "tf32"): (fr.A_TF32, fr.B_TF32, fr.C32),
    **{("m16n8k32", t): (fr.A8, fr.B8, fr.C32) for t in ("e4m3", "e5m2", "s8", "u8")},
    **{("m16n8k16", t): (fr.first(fr.A8, 2, (16, 16)), fr.first(fr.B8, 1, (16, 8)), fr.C32) for t in _INTEGERS},
    **{("m8n8k16", t): (fr.first(fr.A8, 1, (8, 16)), fr.first(fr.B8, 1, (16, 8)), _C8X8) for t in _INTEGERS},
    ("m8n8k4", "f64"): (fr.first(fr.A32, 1, (8, 4)), fr.first(fr.B32, 1, (4, 8)), _C8X8),
    ("m16n8k4", "f64"): (fr.first(fr.A32, 2, (16, 4)), fr.first(fr.B32, 1, (4, 8)), fr.C32),
    ("m16n8k8", "f64"): (fr.A_TF32, fr.B_TF32, fr.C32),
    ("m16n8k16", "f64"): (fr.A32, fr.B32, fr.C32),
}
_MMA_SHAPE = re.compile(r"m\d+n\d+k\d+$")
#: Warps whose mma.sync operands are gathered and multiplied together where consecutive mma.sync run
#: as one batch (numerics.tensor_core_dot then works through them in parts that fit the caches).
BATCH_WARPS = 256


def _model(m, kind: str, what: str):
    """The launch's tensor-core model, which must multiply `kind`."""
    model = m.config.tensor_cores
    if kind not in model.block:
        raise Fault(UnsupportedPtx, f"{what} of .{kind}: the {model.name} tensor cores have no such type "
                                    f"(8-bit floats: sm_89 and newer; launch with tensor_cores=\"hopper\")")
    return model


@opcode("mma")
def build_mma(d, ins, mods):
    """`mma.sync.aligned.shape.row.col{.satfinite}{.rnd}.dtype.atype.btype.ctype d, a, b, c` of the shapes and
    types of `_MMA_SHAPES` and `_ACCUMULATES` (.satfinite: s32 sums clamped; .rnd: f64 only)."""
    _sync_aligned(d, mods)
    shape = next((w for w in mods.words if _MMA_SHAPE.match(w)), None)
    if shape is None or not (mods.flag("row") and mods.flag("col")):
        raise d.error("expected mma.sync.aligned.mMnNkK.row.col (other layouts are m8n8k4 f16's, not "
                      "modelled)", UnsupportedPtx)
    mods.words.remove(shape)
    satfinite = mods.flag("satfinite")
    mode = mods.take(*nx.MODES)
    dtype, atype, btype, ctype = _type_words(d, mods, 4)
    what = f"mma.{shape}.{dtype}.{atype}.{btype}.{ctype}"
    _check_types(d, what, dtype, atype, btype)
    require(d, (shape, atype) in _MMA_SHAPES, f"{what} is not supported (shapes and types: docs/tensor_cores.md)")
    require(d, dtype == ctype, f"{what}: C and D of different types are not supported")
    require(d, not satfinite or dtype == "s32", ".satfinite applies to integer mma")
    require(d, mode is None or dtype == "f64", "a rounding modifier applies to f64 mma")
    frag_a, frag_b, frag_c = _MMA_SHAPES[shape, atype]
    acc = Accumulator(dtype, frag_c)
    dst, a, b, c = d.operands(ins, 4)
    operand_type = F64 if atype == "f64" else B32
    d_items = _registers(d, dst, acc.registers, "the destination")
    writers = [d.writer(x, acc.register_type) for x in d_items]
    a_items = _registers(d, a, frag_a.registers, "A")
    read_a = [d.reader(x, operand_type) for x in a_items]
    read_b = [d.reader(x, operand_type) for x in _registers(d, b, frag_b.registers, "B")]
    c_items = _registers(d, c, acc.registers, "C")
    read_c = [d.reader(x, acc.register_type) for x in c_items]
    decode_a, decode_b = _element_decoder(atype), _element_decoder(btype)
    readers, na, nb = read_a + read_b + read_c, len(read_a), len(read_b)

    a_slots = tuple(d.register(x)[0] for x in a_items)

    def inputs(m, idx):
        whole_units(m, idx, WARP, "mma.sync")
        return _MmaInputs(a_slots, lane_values(m, idx, readers))

    def compute(m, operands, links):
        """D = C + A B of one or more mma.sync of this form.  A chain of them, each accumulating into
        the one before's result (`links`, see Fusable), is one product along the K of them all, C
        the first one's; chains of one length that read the same A registers step by step (a family:
        a row of a warp's tiles) are one product of that A with their Bs side by side; families of
        one shape go together, their warps side by side in batches of about BATCH_WARPS warps (the
        operands of many more would no longer fit in the caches).  The result of a chain is the last
        one's; the others' are None.  (Within a batch a register holds one value: no instruction of
        it writes what another reads, machine.fusion_table.)"""
        families = {}
        for chain in chain_lists(links):
            families.setdefault(tuple(operands[k].a for k in chain), []).append(chain)
        shapes = {}
        for family in families.values():
            shapes.setdefault((len(family[0]), len(family)), []).append(family)
        results = [None] * len(operands)
        for (_, width), same in sorted(shapes.items()):
            batch, lanes = [], 0
            for n, family in enumerate(same):
                batch.append(family)
                lanes += len(operands[family[0][0]].values[0])
                if lanes >= BATCH_WARPS * WARP or n == len(same) - 1:
                    for family_done, result in zip(batch, compute_batch(m, operands, batch)):
                        for chain, part in zip(family_done, np.split(result, width, axis=-1)):
                            results[chain[-1]] = part
                    batch, lanes = [], 0
        return results

    def compute_batch(m, operands, families):
        """The results of families of one shape, each a list of its chains (lists of instruction
        indices into `operands`): A and B of all steps gathered at once, side by side along k (and
        the Bs of a family along N), laid out as the product works on them."""
        def registers(chains_of, steps, first: int, count: int) -> list[np.ndarray]:
            """Registers first.. first + count - 1 of each step, step by step, then register by register,
            then chain by chain of `chains_of(family)`, the families' side by side."""
            chosen = [chains_of(family) for family in families]
            columns = [[operands[chains[column][step]].values[register] for chains in chosen]
                       for step in steps for register in range(first, first + count)
                       for column in range(len(chosen[0]))]
            return [np.concatenate(column) if len(column) > 1 else column[0] for column in columns]
        width, steps = len(families[0]), range(len(families[0][0]))
        lanes = len(operands[families[0][0][0]].values[0])
        warps = len(families) * lanes // WARP
        a_layout, b_layout, arranged = _operand_layouts(dtype, warps, frag_a.shape[0], frag_b.shape[1] * width)
        ma = fr.gather_chain(frag_a, registers(lambda family: family[:1], steps, 0, na), len(steps), decode_a,
                             "bik", a_layout)
        mb = fr.gather_chain(frag_b, registers(lambda family: family, steps, na, nb), len(steps), decode_b,
                             "bkj", b_layout, width)
        mc = np.concatenate([fr.gather(acc.frag, registers(lambda family: family[column:column + 1], [0], na + nb,
                                                           len(read_c)), acc.decode) for column in range(width)],
                            axis=-1)
        model = m.config.tensor_cores
        if atype in model.mma_sync_as and dtype == "f32":  # 8-bit floats on Hopper: f16 products (arranged)
            result = nx.split_mma_sync(ma, mb, mc, atype, model)
        else:
            result = multiply(m, ma, mb, mc, atype, btype, dtype, satfinite, mode or "rn", "mma.sync", arranged)
        return np.split(result, len(families))

    def outputs(m, idx, result):
        for write, value in zip(writers, acc.registers_of(result)):
            write(m, idx, value)
    # an f32 accumulator that is also the destination chains: the model sums block after block, so a
    # chain's blocks one after the other are its instructions one after the other (an f16 one is
    # rounded between them, integer and f64 ones are not the model's)
    d_slots, c_slots = ({d.register(x)[0] for x in items} for items in (d_items, c_items))
    chain = frozenset(d_slots) if d_slots == c_slots and dtype == "f32" else frozenset()
    return fusable(Fusable(("mma.sync", what, satfinite, mode), inputs, compute, outputs, chain))


def chain_lists(links: list[int | None]) -> list[list[int]]:
    """The chains of a fused batch (Fusable, machine.chain_links): the indices of each chain's
    instructions, in order."""
    chains, chain_of = [], {}
    for k, link in enumerate(links):
        chain_of[k] = len(chains) if link is None else chain_of[link]
        if link is None:
            chains.append([k])
        else:
            chains[chain_of[k]].append(k)
    return chains


def integer_dot(a: np.ndarray, b: np.ndarray, c: np.ndarray, satfinite: bool = False) -> np.ndarray:
    """D = C + A B of integer matrices (exact values in float64) as an s32 accumulation gives it: the products
    and C summed exactly (int64), wrapped to 32 bits, or with .satfinite clamped to the s32 range."""
    exact = np.matmul(a.astype(np.int64), b.astype(np.int64)) + c.astype(np.int64)
    if satfinite:
        exact = np.clip(exact, np.iinfo(np.int32).min, np.iinfo(np.int32).max)
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


_U16 = np.dtype(np.uint16)


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
    pc = d.index

    def run(m, idx):
        threads = whole_units(m, idx, WARP, "ldmatrix")
        if count == 4:  # (every lane gives a row's address, in lane order)
            data = m.shared.load_rows(m, idx, address(m, idx), _U16, 8, pc)
        else:
            pick = _row_lanes(threads, count)
            data = m.shared.load_rows(m, threads[pick], address(m, idx)[pick], _U16, 8, pc)
        words = fr.ldmatrix_words(data.reshape(-1, count, 8, 8), trans)  # (warp, matrix, lane)
        for i, write in enumerate(writers):
            write(m, idx, words[:, i].reshape(-1))
    return plain(run)


@opcode("stmatrix")
def build_stmatrix(d, ins, mods):
    count, trans = _matrix_modifiers(d, mods)
    dst, src = d.operands(ins, 2)
    readers = [d.reader(x, B32) for x in _registers(d, src, count, "the source")]
    address = d.address(dst, "shared")
    pc = d.index

    def run(m, idx):
        threads = whole_units(m, idx, WARP, "stmatrix")
        warps = len(threads) // WARP
        words = np.stack([np.broadcast_to(read(m, idx), (len(threads),)).reshape(warps, WARP) for read in readers],
                         axis=1)  # (warp, matrix, lane)
        pick = _row_lanes(threads, count)
        flat = np.ascontiguousarray(fr.ldmatrix_matrices(words, trans)).reshape(-1, 8)
        m.shared.store(m, threads[pick], address(m, idx)[pick], np.dtype(np.uint16),
                       [flat[:, c] for c in range(8)], pc)
    return plain(run)


# ------------------------------------------------------------------ wgmma

_WGMMA_SHAPE = re.compile(r"m64n(\d+)k(\d+)$")


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
    """`wgmma.mma_async.sync.aligned.m64nNkK{.satfinite}.dtype.atype.btype d, a, b-desc, scale-d{, imm-scale-a,
    imm-scale-b{, imm-trans-a}, imm-trans-b}`: the integer forms (s32 accumulators) take no immediates, the
    floating-point ones the scales, the 16-bit ones the transposes as well (imm-trans-a with A in shared
    memory only)."""
    _sync_aligned(d, mods)
    shape = next((w for w in mods.words if _MMA_SHAPE.match(w)), None)
    if shape is None:
        raise d.error("wgmma.mma_async needs a shape m64nNkK", PtxSyntaxError)
    mods.words.remove(shape)
    satfinite = mods.flag("satfinite")
    dtype, atype, btype = _type_words(d, mods, 3)
    what = f"wgmma.mma_async.{shape}.{dtype}.{atype}.{btype}"
    _check_types(d, what, dtype, atype, btype)
    if (atype, dtype) in _WGMMA_UNMODELLED:
        raise d.error(f"{what}: {_WGMMA_UNMODELLED[atype, dtype]}", UnsupportedPtx)
    found = _WGMMA_SHAPE.match(shape)
    n, k = (int(x) for x in found.groups()) if found else (0, 0)
    require(d, atype in _WGMMA_K and k == _WGMMA_K[atype] and n % 8 == 0 and 8 <= n <= 256,
            f"{what} is not supported (m64nNk16 bf16/f16, m64nNk8 tf32, m64nNk32 e4m3/e5m2/s8/u8; N = 8..256 "
            "in steps of 8)")
    require(d, not satfinite or dtype == "s32", ".satfinite applies to integer wgmma")
    integer, transposable = dtype == "s32", atype in ("bf16", "f16")
    ops = list(ins.operands)
    a_in_registers = isinstance(ops[1], syn.Vector) if len(ops) > 1 else False
    immediates = 0 if integer else 2 + (1 if transposable else 0) + (1 if transposable and not a_in_registers else 0)
    if len(ops) != 4 + immediates:
        raise d.error(f"expected {4 + immediates} operands, found {len(ops)}", PtxSyntaxError)
    acc = Accumulator(dtype, fr.wgmma_accumulator(n))
    acc_items = _registers(d, ops[0], acc.registers, "the accumulator")
    read_d = [d.reader(x, acc.register_type) for x in acc_items]
    writers = [d.writer(x, acc.register_type) for x in acc_items]
    defined = frozenset(d.register(x)[0] for x in acc_items)
    slots = set(defined)
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
    scale_a, scale_b = (1, 1) if integer else (_immediate(d, x, (1, -1), "imm-scale") for x in ops[4:6])
    trans = [_immediate(d, x, (0, 1), "imm-trans") for x in ops[6:]]
    trans_a = bool(trans[0]) if transposable and not a_in_registers else False
    trans_b = bool(trans[-1]) if transposable else False
    d.claim_async_registers(slots)
    frag_a = {4: fr.A_TF32, 1: fr.A8}.get(_ELEMENT_SIZE[atype], fr.A16)
    decode = _element_decoder(atype)
    pc = d.index

    def inputs(m, idx):
        threads = whole_units(m, idx, WARPGROUP, "wgmma.mma_async")
        m.async_mma.check_fenced(threads)
        groups = len(threads) // WARPGROUP
        first = threads.reshape(groups, WARPGROUP)[:, 0]
        reads = []
        bdesc = _uniform(read_bdesc(m, idx), groups, "B descriptor")
        mb = _shared_operand(m, first, bdesc, n, k, btype, trans_b, reads).transpose(0, 2, 1)
        if a_in_registers:
            ma = fr.gather(frag_a, lane_values(m, idx, read_a), decode)
            ma = ma.reshape(groups, 64, k)
        else:
            adesc = _uniform(read_adesc(m, idx), groups, "A descriptor")
            ma = _shared_operand(m, first, adesc, 64, k, atype, trans_a, reads)
        scale = np.broadcast_to(read_scale(m, idx), (len(threads),)).reshape(groups, WARPGROUP)
        if not (scale.all(axis=1) | ~scale.any(axis=1)).all():
            raise Fault(WarpSyncError, "scale-d differs between the threads of a warpgroup", thread=int(first[0]))
        return _WgmmaInputs(threads, ma * scale_a, mb * scale_b, scale[:, 0], np.concatenate(reads),
                            lambda: acc.matrices(lane_values(m, idx, read_d)).reshape(groups, 64, n))

    def compute(m, operands, links):
        """D = scale-d ? C + A B : A B of one or more wgmma of this form.  A chain of them (each
        accumulating into the one before's result, `links`, see Fusable) whose scale-d is true from
        its second on is one product along the K of them all, C the first one's (read now: nothing
        has written it since the batch read its operands); other chains go step by step.  Each
        result is (D or None: a later one of the chain writes the registers, its inputs)."""
        results = [(None, inputs) for inputs in operands]
        for chain in chain_lists(links):
            later = [operands[i] for i in chain[1:]]
            parts = [chain] if all(x.scale.all() for x in later) else [[i] for i in chain]
            d = operands[chain[0]].accumulator()
            for part in parts:
                head = operands[part[0]]
                d = np.where(head.scale[:, None, None], d, 0)
                d = multiply(m, np.concatenate([operands[i].a for i in part], axis=-1),
                             np.concatenate([operands[i].b for i in part], axis=-2), d, atype, btype, dtype,
                             satfinite, "rn", "wgmma")
            results[chain[-1]] = (d, operands[chain[-1]])
        return results

    def outputs(m, idx, result):
        """Write D (where this one's is the chain's), and the wgmma is in flight."""
        d, inputs = result
        if d is not None:
            for write, value in zip(writers, acc.registers_of(d.reshape(-1, 16, n))):
                write(m, idx, value)
        m.async_mma.issue(m, inputs.threads, slots, inputs.reads, pc, defined)
    # (an f32 accumulator chains as mma.sync's does)
    chain = frozenset(defined) if dtype == "f32" else frozenset()
    return fusable(Fusable(("wgmma", what, satfinite, scale_a, scale_b), inputs, compute, outputs, chain))


class _MmaInputs(NamedTuple):
    """What an mma.sync reads: its A registers (which tell the instructions of a batch that read one A
    apart) and the values of the registers it reads, A's, B's and C's."""

    a: tuple
    values: list


class _WgmmaInputs(NamedTuple):
    """What a wgmma reads when it is issued: its threads, A and B (scaled), scale-d per warpgroup, the
    shared bytes it reads, and its accumulator C (read on demand: only a chain's first needs it)."""

    threads: np.ndarray
    a: np.ndarray
    b: np.ndarray
    scale: np.ndarray
    reads: np.ndarray
    accumulator: Callable[[], np.ndarray]


def _uniform(values, groups: int, what: str) -> np.ndarray:
    """One value per warpgroup, which all of its threads must agree on."""
    per = np.broadcast_to(np.asarray(values, np.uint64), (groups * WARPGROUP,)).reshape(groups, WARPGROUP)
    bad = (per != per[:, :1]).any(axis=1)
    if bad.any():
        raise Fault(WarpSyncError, f"the {what} differs between the threads of a warpgroup")
    return per[:, 0]


def _shared_operand(m, first, descs, rows: int, k: int, kind: str, mn_major: bool, reads: list) -> np.ndarray:
    """Operand matrices (groups, rows, k) read through matrix descriptors; the flat shared
    bytes read are appended to `reads`."""
    offsets = []
    for thread, value in zip(first, descs):
        try:
            offsets.append(_operand_bytes(int(value), rows, k, _ELEMENT_SIZE[kind], mn_major, m.shared.size))
        except Fault as fault:
            fault.thread = int(thread)
            raise
    flat = (m.cta_of[first] * m.shared.stride)[:, None, None, None] + np.stack(offsets)
    races = m.shared.races
    if races is not None:
        races.check_observed(m, flat.reshape(-1), np.repeat(m.ltid[first], flat[0].size))
        races.check_pending(m, flat.reshape(-1), "wgmma operand read", lambda i: int(first[i // flat[0].size]))
    reads.append(flat.reshape(-1))
    return _memory_values(m.shared.data[flat], kind)


@functools.lru_cache(maxsize=256)
def _operand_bytes(value: int, rows: int, k: int, esize: int, mn_major: bool, size: int) -> np.ndarray:
    """The shared offsets (rows, k, esize) of the bytes of an operand read through descriptor
    `value` (in a shared memory of `size` bytes); the same for every wgmma of a loop's stage."""
    desc = fr.MatrixDescriptor.decode(value)
    if desc.base_offset:
        raise Fault(UnsupportedPtx, f"matrix descriptor {value:#x}: a non-zero base offset is not "
                                    "modelled (tiles aligned to the swizzle pattern have base offset 0)")
    addr = fr.operand_addresses(desc, rows, k, esize, mn_major)
    if (addr + esize > size).any():
        raise Fault(MemoryFault, f"a wgmma operand (descriptor {value:#x}) reaches shared offset "
                                 f"{int(addr.max()):#x}, beyond the {size} bytes of shared memory")
    offsets = addr[..., None] + np.arange(esize)
    offsets.flags.writeable = False
    return offsets


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
