# Helpers for the tensor-core tests (emulator and GPU): element encodings, the
# register fragment layouts transcribed from the PTX ISA tables (element by
# element, independently of phobos.run.emulator.fragments), the bit-exact
# reference of the tensor-core model over a whole k range, and generators of
# small test kernels: one warp running mma.sync on fragments given per lane,
# and one warpgroup loading A and B with TMA in any canonical shared layout
# and running wgmma on them.
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from phobos.constants import f8_bits, f8_values
from phobos.run.emulator import numerics as nx
from phobos.types import DType
from phobos.run.tensor_map import TensorMap

ROOT = Path(__file__).parent.parent
ESIZE = {"bf16": 2, "f16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1}
F8 = {"e4m3": DType.F8E4M3, "e5m2": DType.F8E5M2}
EIGHT_BIT = (*F8, "s8", "u8")  # m16n8k32's operands: four a register


def gemm_generator():
    """handwritten_ptx/gemm_ptx.py as a module."""
    if "gemm_ptx" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gemm_ptx", ROOT / "handwritten_ptx" / "gemm_ptx.py")
        module = sys.modules["gemm_ptx"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["gemm_ptx"]


# ------------------------------------------------------------------ element encodings

def bf16_bits(x) -> np.ndarray:
    """float values -> bf16 bit patterns (round to nearest even)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def encode(x, kind: str) -> np.ndarray:
    """float values -> the stored elements of `kind` (uint16 / float16 / uint32 f32 bits / uint8 codes)."""
    if kind == "bf16":
        return bf16_bits(x)
    if kind == "f16":
        return np.asarray(x, np.float16)
    if kind in F8:
        return f8_bits(np.asarray(x, np.float32), F8[kind])
    return np.asarray(x, np.float32).view(np.uint32)


def value(stored: np.ndarray, kind: str) -> np.ndarray:
    """Stored elements -> the float64 values a tensor core multiplies (tf32: low 13 bits ignored)."""
    if kind == "bf16":
        return (np.asarray(stored).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if kind == "f16":
        return np.asarray(stored, np.float16).astype(np.float64)
    if kind in F8:
        return f8_values(stored, F8[kind]).astype(np.float64)
    return (np.asarray(stored, np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def bits16(stored: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(stored).view(np.uint16).astype(np.uint32)


def random_elements(rng, shape, kind: str, spread: int = 0) -> np.ndarray:
    """Random stored elements; `spread` > 0 draws exponents from +-spread (wide, with cancellation; for the
    8-bit floats at most their range, 2^-6..2^8 and 2^-14..2^15, so that few saturate)."""
    spread = min(spread, {"e4m3": 7, "e5m2": 14}.get(kind, spread))
    x = rng.standard_normal(shape)
    if spread:
        x = x * np.exp2(rng.integers(-spread, spread + 1, shape))
    return encode(x, kind)


def reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, kind: str, model: str = "hopper", step: int = 16) -> np.ndarray:
    """C + A B (float64 values; c float32) as mma/wgmma instructions of k `step` chain them."""
    acc = np.asarray(c, np.float32)
    for k in range(0, a.shape[1], step):
        acc = nx.tensor_core_dot(a[None, :, k:k + step], b[None, k:k + step, :], acc[None], kind,
                                 nx.TENSOR_CORE_MODELS[model])[0]
    return acc


def mma_sync_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, kind: str, model: str = "hopper") -> np.ndarray:
    """C + A B as a chain of mma.sync of `kind` computes it.  Hopper's of 8-bit floats is, per k32
    instruction, what ptxas writes for it: two f16 products from zero (the codes as f16, exactly) - the k
    with k % 4 in {0, 1}, then those of {2, 3} into that sum - and C added by an f32 add (SASS: F2FP
    unpacks, two HMMA.16816.F32, FADD)."""
    if kind not in F8 or model != "hopper":
        return reference(a, b, c, kind, model, step=STEP[kind])
    acc = np.asarray(c, np.float32)
    for start in range(0, a.shape[1], 32):
        k = np.arange(start, start + 32)
        low, high = k[k % 4 < 2], k[k % 4 >= 2]
        sums = reference(a[:, low], b[low], np.zeros_like(acc), "f16", model)
        acc = acc + reference(a[:, high], b[high], sums, "f16", model)
    return acc


def tf32_gemm_reference(a: np.ndarray, b: np.ndarray, precision: str, tile_k: int, model: str = "hopper") -> np.ndarray:
    """What the tensor cores compute for f32 A @ B in a K loop of `tile_k` with dot's `precision`, bit for
    bit: tf32 the operands rounded to TF32 (nearest even: cvt.rn), tf32x3 rounded ties away (cvt.rna) and
    the TF32 roundings of the rests; K padded with
    zeros.  tf32: one chain of k8 instructions into the accumulator.  tf32x3: per K tile a product from
    zero, each k8 step low x high, high x low, high x high, then added to the accumulator in f32."""
    from phobos.constants import round_tf32, round_tf32_even
    k = a.shape[1]
    padded = -(-k // tile_k) * tile_k
    a, b = np.pad(a, ((0, 0), (0, padded - k))), np.pad(b, ((0, padded - k), (0, 0)))
    a_hi, b_hi = round_tf32(a), round_tf32(b)
    a_lo, b_lo = round_tf32(a - a_hi), round_tf32(b - b_hi)
    f64 = lambda x: x.astype(np.float64)  # noqa: E731
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    if precision == "tf32":
        return reference(f64(round_tf32_even(a)), f64(round_tf32_even(b)), acc, "tf32", model, step=8)
    for k0 in range(0, padded, tile_k):
        product = np.zeros_like(acc)
        for s in range(k0, k0 + tile_k, 8):
            for x, y in ((a_lo, b_hi), (a_hi, b_lo), (a_hi, b_hi)):
                product = reference(f64(x[:, s:s + 8]), f64(y[s:s + 8]), product, "tf32", model, step=8)
        acc = acc + product
    return acc


# ------------------------------------------------------------------ the ISA's fragment tables

def _mma_elements(operand: str, kind: str):
    """[(lane, register, part, row, column)] of one warp's mma fragment (PTX ISA tables; part: which half,
    or for 8-bit floats and s8 which byte, of the register)."""
    out = []
    for lane in range(32):
        g, t = lane // 4, lane % 4
        if operand == "a" and kind in EIGHT_BIT:   # a0..a15, four per register (m16n8k32)
            for e in range(16):
                row = g if e in (0, 1, 2, 3, 8, 9, 10, 11) else g + 8
                col = t * 4 + (e & 3) + (16 if e >= 8 else 0)
                out.append((lane, e // 4, e % 4, row, col))
        elif operand == "b" and kind in EIGHT_BIT:  # b0..b7
            for e in range(8):
                out.append((lane, e // 4, e % 4, t * 4 + (e & 3) + (16 if e >= 4 else 0), g))
        elif operand == "a" and kind != "tf32":    # a0..a7, two per register
            for e in range(8):
                row = g if e in (0, 1, 4, 5) else g + 8
                col = t * 2 + (e & 1) + (8 if e >= 4 else 0)
                out.append((lane, e // 2, e % 2, row, col))
        elif operand == "a":                        # tf32 a0..a3
            for e in range(4):
                out.append((lane, e, 0, g if e in (0, 2) else g + 8, t if e < 2 else t + 4))
        elif operand == "b" and kind != "tf32":     # b0..b3
            for e in range(4):
                out.append((lane, e // 2, e % 2, t * 2 + (e & 1) + (8 if e >= 2 else 0), g))
        elif operand == "b":
            for e in range(2):
                out.append((lane, e, 0, t if e == 0 else t + 4, g))
        else:                                       # c0..c3 / d0..d3
            for e in range(4):
                out.append((lane, e, 0, g if e < 2 else g + 8, t * 2 + (e & 1)))
    return out


def pack_fragment(matrix_stored: np.ndarray, operand: str, kind: str, registers: int) -> np.ndarray:
    """(32, registers) uint32 register values of one warp holding `matrix_stored`; a stack of
    matrices (warps, rows, cols) gives (warps * 32, registers)."""
    if matrix_stored.ndim == 3:
        return np.concatenate([pack_fragment(x, operand, kind, registers) for x in matrix_stored])
    regs = np.zeros((32, registers), np.uint32)
    bits = np.ascontiguousarray(matrix_stored).view(np.uint32) if kind == "tf32" else \
        np.asarray(matrix_stored).astype(np.uint8).astype(np.uint32) if kind in EIGHT_BIT else bits16(matrix_stored)
    width = 8 * ESIZE.get(kind, 2) if kind != "tf32" else 0
    for lane, reg, part, row, col in _mma_elements(operand, kind):
        regs[lane, reg] |= np.uint32(int(bits[row, col]) << (width * part))
    return regs


def unpack_accumulator(regs: np.ndarray, rows: int = 16, cols: int = 8) -> np.ndarray:
    """(32, 4) f32 (or s32) registers of an mma D -> the 16x8 matrix ((warps * 32, 4) -> (warps, 16, 8))."""
    if len(regs) > 32:
        return np.stack([unpack_accumulator(regs[w:w + 32]) for w in range(0, len(regs), 32)])
    out = np.zeros((rows, cols), regs.dtype)
    for lane, reg, _, row, col in _mma_elements("c", "f32"):
        out[row, col] = regs[lane, reg]
    return out


def pack_accumulator(matrix: np.ndarray) -> np.ndarray:
    if matrix.ndim == 3:
        return np.concatenate([pack_accumulator(x) for x in matrix])
    regs = np.zeros((32, 4), matrix.dtype)
    for lane, reg, _, row, col in _mma_elements("c", "f32"):
        regs[lane, reg] = matrix[row, col]
    return regs


def wgmma_d_position(thread: int, reg: int) -> tuple[int, int]:
    """(row, column) of accumulator register `reg` of `thread` (0..127) of a wgmma m64nN."""
    warp, lane = thread // 32, thread % 32
    g, t = lane // 4, lane % 4
    return 16 * warp + g + (8 if reg % 4 >= 2 else 0), 8 * (reg // 4) + 2 * t + reg % 2


def wgmma_a_registers(a_stored: np.ndarray, kind: str) -> np.ndarray:
    """(128, 4) A registers of a warpgroup: warp w holds rows 16w.. like an mma warp."""
    return np.concatenate([pack_fragment(a_stored[16 * w:16 * w + 16], "a", kind, 4) for w in range(4)])


# ------------------------------------------------------------------ kernels

MMA_SHAPES = {"bf16": "m16n8k16", "f16": "m16n8k16", "tf32": "m16n8k8", "e4m3": "m16n8k32", "e5m2": "m16n8k32",
              "s8": "m16n8k32"}
STEP = {"bf16": 16, "f16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}  # the k of one instruction


def thread_pointers(strides: dict[str, int]) -> str:
    """PTX lines giving each `.u64` parameter named in `strides` (pa, pb, ...) the thread's pointer in %p0,
    %p1, ...: the parameter plus the global thread index (%lane) times its stride in bytes.  Declares
    %lane, %x, %y, %p<n>, %off."""
    lines = [f".reg .b32 %lane, %x, %y;\n    .reg .b64 %p<{len(strides)}>, %off;",
             "mov.u32 %x, %ctaid.x;", "mov.u32 %y, %ntid.x;", "mov.u32 %lane, %tid.x;",
             "mad.lo.u32 %lane, %x, %y, %lane;    // global thread index"]
    for i, (name, stride) in enumerate(strides.items()):
        lines += [f"ld.param.u64 %p{i}, [{name}];", f"mul.wide.u32 %off, %lane, {stride};",
                  f"add.s64 %p{i}, %p{i}, %off;"]
    return "\n    ".join(lines)


def mma_fragment_ptx(kind: str) -> str:
    """Each warp: d[thread] = mma(a[thread], b[thread], c[thread]), fragments given per thread
    (four registers of A, two of B, four of C and D), so that many warps test many matrices.  8-bit
    floats need sm_89 and PTX ISA 8.4; s8 accumulates in s32."""
    shape = MMA_SHAPES[kind]
    version, target = ("8.4", "sm_89") if kind in F8 else ("8.0", "sm_80")
    acc = "s32" if kind == "s8" else "f32"
    return f"""\
.version {version}
.target {target}
.address_size 64
.visible .entry mma_fragments(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
    .reg .b32 %a<4>, %b<2>;
    .reg .{acc} %c<4>, %d<4>;
    {thread_pointers({"pa": 16, "pb": 8, "pc": 16, "pd": 16})}
    ld.global.v4.b32 {{%a0, %a1, %a2, %a3}}, [%p0];
    ld.global.v2.b32 {{%b0, %b1}}, [%p1];
    ld.global.v4.{acc} {{%c0, %c1, %c2, %c3}}, [%p2];
    mma.sync.aligned.{shape}.row.col.{acc}.{kind}.{kind}.{acc} {{%d0, %d1, %d2, %d3}}, {{%a0, %a1, %a2, %a3}}, {{%b0, %b1}}, {{%c0, %c1, %c2, %c3}};
    st.global.v4.{acc} [%p3], {{%d0, %d1, %d2, %d3}};
    ret;
}}
"""


@dataclass(frozen=True)
class Operand:
    """How a wgmma operand (rows x k: rows = 64 for A, N for B) lies in global and shared
    memory: `major` "K" (k contiguous) or "MN", `swizzle` 0/32/64/128 bytes."""

    rows: int
    k: int
    kind: str
    major: str
    swizzle: int

    @property
    def esize(self) -> int:
        return ESIZE[self.kind]

    @property
    def nbytes(self) -> int:
        return self.rows * self.k * self.esize

    def global_array(self, stored: np.ndarray) -> np.ndarray:
        """The operand (rows x k) as the kernel's global array: itself, or transposed (MN-major)."""
        return np.ascontiguousarray(stored if self.major == "K" else stored.T)

    def tensor_map(self, array) -> TensorMap:
        """A map whose copies write the canonical layout (see `copies`).  tf32 data moves as
        raw f32 (a TFLOAT32 map may convert)."""
        e, w = self.esize, self.swizzle
        sw = {0: "none", 32: "32B", 64: "64B", 128: "128B"}[w]
        t = 16 // e
        dtype = "f32" if self.kind == "tf32" else "u8" if self.kind in EIGHT_BIT else self.kind
        if self.major == "K" and w:
            assert self.k * e == w, "one swizzle row holds the whole k range"
            return TensorMap.tiled(array, (self.rows, self.k), dtype=dtype, swizzle=sw)
        if self.major == "K":   # one 16-byte column of k per copy: the core matrices of a k chunk
            return TensorMap.tiled(array, (self.rows, t), dtype=dtype)
        if w:                   # boxes of w/e columns, all k rows
            return TensorMap.tiled(array, (self.k, w // e), dtype=dtype, swizzle=sw)
        return TensorMap.tiled(array, (self.k, t), dtype=dtype)     # one 16-byte column of rows per copy

    def copies(self) -> list[tuple[int, tuple[int, int]]]:
        """(shared offset, box coordinates) of each TMA copy."""
        t = 16 // self.esize
        if self.major == "K" and self.swizzle:
            return [(0, (0, 0))]
        if self.major == "K":   # k chunk c: rows x 16 bytes, LBO = rows * 16 apart
            return [(c * self.rows * 16, (c * t, 0)) for c in range(self.k // t)]
        c = self.swizzle // self.esize if self.swizzle else t
        pitch = self.swizzle or 16
        return [(q * self.k * pitch, (q * c, 0)) for q in range(self.rows // c)]

    def descriptor(self) -> tuple[int, int]:
        """(descriptor without start address, start advance per wgmma k step in 16-byte units)."""
        e, w = self.esize, self.swizzle
        if self.major == "K":
            lbo, sbo = (16, 8 * w) if w else (self.rows * 16, 128)
            step = 32 if w else 2 * self.rows * 16
        else:
            lbo, sbo = (self.k * w, 8 * w) if w else (128, self.k * 16)
            step = 16 * w if w else 256
        code = {0: 0, 128: 1, 64: 2, 32: 3}[w]
        return (code << 62) | ((sbo >> 4) << 32) | ((lbo >> 4) << 16), step >> 4


def wgmma_ptx(kind: str, n: int, a: Operand | None, b: Operand, ksteps: int, scale_d: int = 1,
              scale_a: int = 1, acc_type: str = "f32", stepped: bool = False) -> str:
    """One warpgroup: TMA loads of A (unless `a` is None: A from registers, one k step) and B,
    then `ksteps` wgmma with C loaded from pc (per thread), D stored to pd (per thread).  16-bit kinds
    name each operand's major-ness (imm-trans-a/b); the others are K-major and have no such operands.
    `acc_type`: f32, f16 (two a .b32 register) or s32 (integer kinds, which take no scale immediates).
    The descriptors step from wgmma to wgmma in place, or where `stepped` each step's in registers of its
    own (%da<s>, %db<s>), as compilers write them."""
    k = STEP[kind]
    transposable = kind in ("bf16", "f16")
    nreg = n // 4 if acc_type == "f16" else n // 2
    reg_type = {"f32": "f32", "f16": "b32", "s32": "s32"}[acc_type]
    scales = "" if acc_type == "s32" else f", {scale_a}, 1"
    a_bytes = a.nbytes if a else 0
    b_offset = -(-a_bytes // 1024) * 1024
    total = a_bytes + b.nbytes
    copies = []
    for operand, mapname, base in ((a, "%am", 0), (b, "%bm", b_offset)):
        if operand is None:
            continue
        for off, coords in operand.copies():
            c = ", ".join(str(x) for x in coords)
            copies.append(f"@%p cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global.mbarrier::complete_tx::bytes "
                          f"[%s+{base + off}], [{mapname}, {{{c}}}], [%bar];")
    acc = ", ".join(f"%acc{i}" for i in range(nreg))
    b_desc, b_step = b.descriptor()
    lines = ["wgmma.fence.sync.aligned;"]
    trans_b = 1 if b.major == "MN" else 0
    if a is None:
        lines.append(f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{acc_type}.{kind}.{kind} {{{acc}}}, "
                     f"{{%a0, %a1, %a2, %a3}}, %db, {scale_d}{scales}{', ' + str(trans_b) if transposable else ''};")
    else:
        a_desc, a_step = a.descriptor()
        trans_a = 1 if a.major == "MN" else 0
        for s in range(ksteps):
            da, db = (f"%da{s}", f"%db{s}") if stepped and s else ("%da", "%db")
            if s:
                lines += ([f"add.s64 {da}, %da, {a_step * s};", f"add.s64 {db}, %db, {b_step * s};"] if stepped
                          else [f"add.s64 %da, %da, {a_step};", f"add.s64 %db, %db, {b_step};"])
            tail = f", {trans_a}, {trans_b}" if transposable else ""
            lines.append(f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{acc_type}.{kind}.{kind} {{{acc}}}, {da}, {db}, "
                         f"{scale_d if s == 0 else 1}{scales}{tail};")
    lines += ["wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned 0;"]
    a_setup = (f"add.s64 %da, %off, {a.descriptor()[0]:#x};" if a else
               "ld.param.u64 %ptr, [pa];\n    mul.wide.u32 %x64, %t, 16;\n    add.s64 %ptr, %ptr, %x64;\n"
               "    ld.global.v4.b32 {%a0, %a1, %a2, %a3}, [%ptr];")
    loads = "\n    ".join(f"ld.global.{reg_type} %acc{i}, [%ptr+{4 * i}];" for i in range(nreg))
    stores = "\n    ".join(f"st.global.{reg_type} [%ptr+{4 * i}], %acc{i};" for i in range(nreg))
    body = "\n    ".join(copies + [])
    return f"""\
.version 8.0
.target sm_90a
.address_size 64
.shared .align 8 .b64 bar;
.extern .shared .align 1024 .b8 smem[];
.visible .entry wgmma_test(.param .align 64 .b8 a_map[128], .param .align 64 .b8 b_map[128],
                           .param .u64 pa, .param .u64 pc, .param .u64 pd)
{{
    .reg .pred %p, %q;
    .reg .b32 %t, %s, %bar, %a<4>;
    .reg .b64 %am, %bm, %ptr, %off, %x64, %da, %db, %tok, %da<{max(ksteps, 1)}>, %db<{max(ksteps, 1)}>;
    .reg .{reg_type} %acc<{nreg}>;
    mov.u32 %t, %tid.x;
    mov.u32 %s, smem;
    add.u32 %s, %s, 1023;
    and.b32 %s, %s, -1024;
    mov.u32 %bar, bar;
    setp.eq.u32 %p, %t, 0;
    @%p mbarrier.init.shared::cta.b64 [%bar], 1;
    fence.mbarrier_init.release.cluster;
    bar.sync 0;
    mov.b64 %am, a_map;
    cvta.param.u64 %am, %am;
    mov.b64 %bm, b_map;
    cvta.param.u64 %bm, %bm;
    @%p mbarrier.arrive.expect_tx.shared::cta.b64 %tok, [%bar], {total};
    {body}
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %q, [%bar], 0;
    @!%q bra WAIT;
    ld.param.u64 %ptr, [pc];
    mul.wide.u32 %x64, %t, {4 * nreg};
    add.s64 %ptr, %ptr, %x64;
    {loads}
    cvt.u64.u32 %off, %s;
    shr.u64 %off, %off, 4;
    {a_setup}
    add.s64 %db, %off, {b_desc + (b_offset >> 4):#x};
    {chr(10).join('    ' + x for x in lines).strip()}
    ld.param.u64 %ptr, [pd];
    mul.wide.u32 %x64, %t, {4 * nreg};
    add.s64 %ptr, %ptr, %x64;
    {stores}
    ret;
}}
"""


def wgmma_shared_bytes(a: Operand | None, b: Operand) -> int:
    a_bytes = a.nbytes if a else 0
    return -(-a_bytes // 1024) * 1024 + b.nbytes + 1024


def unpack_wgmma(out: np.ndarray, n: int) -> np.ndarray:
    """(128 * n/2,) f32 per-thread accumulators -> the 64 x n matrix."""
    regs = out.reshape(128, n // 2)
    d = np.zeros((64, n), np.float32)
    for thread in range(128):
        for reg in range(n // 2):
            d[wgmma_d_position(thread, reg)] = regs[thread, reg]
    return d


def pack_wgmma(c: np.ndarray) -> np.ndarray:
    n = c.shape[1]
    regs = np.zeros((128, n // 2), np.float32)
    for thread in range(128):
        for reg in range(n // 2):
            regs[thread, reg] = c[wgmma_d_position(thread, reg)]
    return regs.reshape(-1)


# ------------------------------------------------------------------ wgmma cases

WGMMA_CASES = [  # kind, A (major, swizzle) or None for registers, B (major, swizzle), k total, N
    ("bf16", ("K", 128), ("K", 128), 64, 64),
    ("bf16", ("K", 64), ("MN", 64), 32, 64),
    ("bf16", ("K", 32), ("MN", 32), 16, 128),
    ("bf16", ("K", 0), ("MN", 0), 32, 64),
    ("bf16", ("MN", 128), ("K", 128), 64, 24),
    ("bf16", ("MN", 0), ("MN", 128), 32, 64),
    ("f16", ("K", 128), ("MN", 128), 64, 128),
    ("f16", ("MN", 32), ("K", 0), 16, 16),
    ("tf32", ("K", 128), ("K", 128), 32, 64),
    ("tf32", ("K", 0), ("K", 32), 8, 40),
    ("tf32", ("K", 64), ("K", 0), 16, 8),
    ("bf16", None, ("MN", 128), 16, 64),
    ("tf32", None, ("K", 32), 8, 32),
    ("e4m3", ("K", 128), ("K", 128), 128, 64),
    ("e5m2", ("K", 64), ("K", 64), 64, 32),
    ("e4m3", ("K", 0), ("K", 32), 32, 40),
    ("e5m2", ("K", 0), ("K", 64), 64, 256),
    ("e4m3", None, ("K", 32), 32, 64),
]


@dataclass
class WgmmaCase:
    """One wgmma test kernel with its arguments (tensor maps over host arrays) and the
    model's expected 64 x n result."""

    text: str
    maps: list            # TensorMap or bytes (A in registers: unused)
    a_regs: np.ndarray
    c_regs: np.ndarray
    n: int
    shared_bytes: int
    expected: np.ndarray

    def arguments(self, out: np.ndarray, maps=None) -> list:
        return list(maps or self.maps) + [self.a_regs, self.c_regs, out]

    def output(self) -> np.ndarray:
        return np.zeros(128 * self.n // 2, np.float32)


def wgmma_case(rng, kind, a_spec, b_spec, ktot, n, scale_d=1, scale_a=1, spread=8, stepped=False) -> WgmmaCase:
    step = STEP[kind]
    a = random_elements(rng, (64, ktot), kind, spread)
    b = random_elements(rng, (ktot, n), kind, spread)
    c = rng.standard_normal((64, n)).astype(np.float32)
    a_op = Operand(64, ktot, kind, *a_spec) if a_spec else None
    b_op = Operand(n, ktot, kind, *b_spec)
    text = wgmma_ptx(kind, n, a_op, b_op, ktot // step, scale_d, scale_a, stepped=stepped)
    maps = [a_op.tensor_map(a_op.global_array(a)) if a_op else bytes(128), b_op.tensor_map(b_op.global_array(b.T))]
    a_regs = wgmma_a_registers(a, kind) if a_op is None else np.zeros(1, np.uint32)
    want = reference(scale_a * value(a, kind), value(b, kind), c if scale_d else np.zeros_like(c), kind, step=step)
    return WgmmaCase(text, maps, a_regs, pack_wgmma(c), n, wgmma_shared_bytes(a_op, b_op), want)
