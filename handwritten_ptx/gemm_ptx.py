"""Writes the hand-written tensor-core GEMM kernels, commented line by line.

    python handwritten_ptx/gemm_ptx.py        # rewrites gemm_bf16_mma.ptx and gemm_bf16_wgmma.ptx

Both kernels compute C = A B for row-major A (M x K, bf16), B (K x N, bf16)
and C (M x N, bf16 or f32), accumulating in f32 on the tensor cores, for M,
N and K multiples of the CTA tile (the caller checks; `check_shape`):

* `mma_sync_gemm` (sm_80 and later): `mma.sync.m16n8k16` fed by `ldmatrix`
  from shared memory that a multi-stage `cp.async` pipeline fills; 16-byte
  chunks are XOR-swizzled in shared memory so that ldmatrix is free of bank
  conflicts.
* `wgmma_gemm` (sm_90a): `wgmma.mma_async.m64nNk16` reading both operands
  from 128-byte-swizzled shared memory through matrix descriptors, filled by
  TMA (`cp.async.bulk.tensor`) in a ring of stages guarded by mbarriers; one
  producer warpgroup (a single elected thread issues the copies) and two
  consumer warpgroups, with `setmaxnreg` moving registers to the consumers.

Both walk the CTA tiles in groups of `group_m` tile rows (so that the A and
B tiles of concurrently running CTAs stay in L2).  The functions take the
tile configuration; the checked-in .ptx files are the defaults.  These
kernels are the templates of the compiler's tensor-core code generation, and
run in the PTX emulator (tests/test_emulator_tensor_cores.py).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent


class Ptx:
    """PTX text with a comment on each line: `ins(text, comment)`."""

    def __init__(self):
        self.lines: list[str] = []

    def raw(self, text: str = "") -> None:
        self.lines.append(text)

    def comment(self, text: str) -> None:
        self.lines.append(f"    // {text}")

    def ins(self, text: str, comment: str = "") -> None:
        line = f"    {text}"
        self.lines.append(f"{line:<63} // {comment}" if comment else line)

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _grouped_tile(p: Ptx, tile_m: int, tile_n: int, group_m: int) -> None:
    """%bm, %bn: this CTA's tile, walking tiles in groups of `group_m` tile rows."""
    p.comment(f"Which {tile_m}x{tile_n} tile of C: CTAs walk groups of {group_m} tile rows column by column,")
    p.comment("so that the CTAs running together share A rows and B columns in L2.")
    p.ins("mov.u32 %pid, %ctaid.x;", "linear CTA index")
    p.ins(f"shr.u32 %tiles_m, %M, {tile_m.bit_length() - 1};", f"tile rows = M / {tile_m}")
    p.ins(f"shr.u32 %tiles_n, %N, {tile_n.bit_length() - 1};", f"tile columns = N / {tile_n}")
    p.ins(f"mul.lo.u32 %group_size, %tiles_n, {group_m};", "CTAs per group of tile rows")
    p.ins("div.u32 %group, %pid, %group_size;", "the group this CTA is in")
    p.ins(f"mul.lo.u32 %first_m, %group, {group_m};", "its first tile row")
    p.ins("sub.u32 %group_m, %tiles_m, %first_m;", "tile rows left from there")
    p.ins(f"min.u32 %group_m, %group_m, {group_m};", "rows in this group (the last may be short)")
    p.ins("rem.u32 %in_group, %pid, %group_size;", "position within the group")
    p.ins("rem.u32 %bm, %in_group, %group_m;", "tile row: fastest within the group")
    p.ins("add.u32 %bm, %bm, %first_m;")
    p.ins("div.u32 %bn, %in_group, %group_m;", "tile column")


# ============================================================================ mma.sync

@dataclass(frozen=True)
class MmaConfig:
    """Tile shape of the mma.sync kernel."""

    bm: int = 128        # CTA tile rows
    bn: int = 128        # CTA tile columns
    bk: int = 32         # k per pipeline stage (32 or 64)
    warps_m: int = 2     # warps along M; each warp computes (bm / warps_m) x (bn / warps_n)
    warps_n: int = 4
    stages: int = 4
    out: str = "bf16"    # C's type: bf16 or f32
    group_m: int = 8

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def shared_bytes(self) -> int:
        return self.stages * (self.bm * self.bk + self.bk * self.bn) * 2

    def check(self) -> None:
        wm, wn = self.bm // self.warps_m, self.bn // self.warps_n
        assert self.bk in (32, 64), "bk is 32 or 64 (64- or 128-byte rows of A)"
        assert wm % 16 == 0 and wn % 16 == 0, "warp tiles are multiples of 16 x 16"
        assert self.bn % 64 == 0, "B rows hold whole groups of 8 chunks"
        assert (self.bm * self.bk // 8) % self.threads == 0 and (self.bk * self.bn // 8) % self.threads == 0
        assert self.stages >= 2 and self.out in ("bf16", "f32")
        assert all(x & (x - 1) == 0 for x in (self.bm, self.bn, self.bk))


def mma_sync_gemm(cfg: MmaConfig = MmaConfig(), name: str = "gemm_bf16_mma") -> str:
    cfg.check()
    threads, stages = cfg.threads, cfg.stages
    wm, wn = cfg.bm // cfg.warps_m, cfg.bn // cfg.warps_n
    mt, nt = wm // 16, wn // 8                      # 16x8 mma tiles per warp
    a_stage, b_stage = cfg.bm * cfg.bk * 2, cfg.bk * cfg.bn * 2
    a_chunks, b_chunks = cfg.bm * cfg.bk // 8, cfg.bk * cfg.bn // 8
    a_row_chunks, b_row_chunks = cfg.bk // 8, cfg.bn // 8
    ksteps = cfg.bk // 16
    a_swz = "(row >> 1) & 3" if a_row_chunks == 4 else "row & 7"
    osize = 2 if cfg.out == "bf16" else 4
    p = Ptx()
    p.raw(f"// bf16 GEMM on the tensor cores with mma.sync (sm_80+), written by handwritten_ptx/gemm_ptx.py:")
    p.raw(f"//   C[M x N] ({cfg.out}) = A[M x K] (bf16) * B[K x N] (bf16), all row-major, f32 accumulation.")
    p.raw(f"// CTA tile {cfg.bm}x{cfg.bn}, k step {cfg.bk}, {stages}-stage cp.async pipeline, {threads} threads:")
    p.raw(f"// {cfg.warps_m}x{cfg.warps_n} warps, each computing a {wm}x{wn} block as {mt}x{nt} mma.m16n8k16 tiles.")
    p.raw(f"// M % {cfg.bm} == 0, N % {cfg.bn} == 0 and K % {cfg.bk} == 0; grid: (M/{cfg.bm}) * (N/{cfg.bn}) CTAs in x;")
    p.raw(f"// {cfg.shared_bytes} bytes of dynamic shared memory.")
    p.raw("//")
    p.raw("// Shared memory, per stage: the A tile (bm rows of bk bf16) then the B tile (bk rows of bn bf16).")
    p.raw("// Rows are split into 16-byte chunks (8 elements) whose positions are XOR-swizzled so that the")
    p.raw("// 8 rows one ldmatrix reads fall in 8 different groups of 4 banks:")
    p.raw(f"//   A: chunk c of row r is stored at chunk c ^ ({a_swz})")
    p.raw("//   B: chunk c of row r is stored at chunk (c & ~7) | ((c ^ r) & 7)")
    p.raw("// Pipeline: tile t is loaded into stage t % stages; iteration t waits for tile t (cp.async.wait_group),")
    p.raw("// syncs the CTA (so that every thread is done with the stage about to be refilled), starts loading")
    p.raw("// tile t + stages - 1, then runs the mma's of tile t.")
    p.raw(".version 8.0")
    p.raw(".target sm_80")
    p.raw(".address_size 64")
    p.raw("")
    p.raw(".extern .shared .align 128 .b8 smem[];        // the stages; size given at launch")
    p.raw("")
    p.raw(f".visible .entry {name}(")
    p.raw("    .param .u64 a_ptr,          // const bf16 *A (M x K)")
    p.raw("    .param .u64 b_ptr,          // const bf16 *B (K x N)")
    p.raw(f"    .param .u64 c_ptr,          // {cfg.out} *C (M x N)")
    p.raw("    .param .u32 m_size,")
    p.raw("    .param .u32 n_size,")
    p.raw("    .param .u32 k_size")
    p.raw(f") .maxntid {threads}, 1, 1")
    p.raw("{")
    p.ins(".reg .pred %p_load, %p_loop;")
    p.ins(".reg .b32 %M, %N, %K, %KT, %thread, %lane, %warp, %warp_m, %warp_n, %row, %col, %x, %y;")
    p.ins(".reg .b32 %pid, %tiles_m, %tiles_n, %group_size, %group, %first_m, %group_m, %in_group, %bm, %bn;")
    p.ins(".reg .b32 %smem, %kt, %read, %write, %ktn, %a_base, %b_base, %addr;")
    p.ins(f".reg .b32 %a_dst<{a_chunks // threads}>, %b_dst<{b_chunks // threads}>;")
    p.ins(f".reg .b32 %a_ld<{mt * ksteps}>, %b_ld<{nt // 2}>;")
    p.ins(f".reg .b32 %fa<{mt * 4}>, %fb<{nt * 2}>, %packed;")
    p.ins(".reg .b64 %A, %B, %C, %off, %ptr, %a_step, %b_step;")
    p.ins(f".reg .b64 %a_src<{a_chunks // threads}>, %b_src<{b_chunks // threads}>;")
    p.ins(f".reg .f32 %acc<{mt * nt * 4}>;")
    p.raw("")
    p.comment("Parameters; pointers made global.")
    p.ins("ld.param.u64 %A, [a_ptr];")
    p.ins("ld.param.u64 %B, [b_ptr];")
    p.ins("ld.param.u64 %C, [c_ptr];")
    p.ins("cvta.to.global.u64 %A, %A;")
    p.ins("cvta.to.global.u64 %B, %B;")
    p.ins("cvta.to.global.u64 %C, %C;")
    p.ins("ld.param.u32 %M, [m_size];")
    p.ins("ld.param.u32 %N, [n_size];")
    p.ins("ld.param.u32 %K, [k_size];")
    p.ins(f"shr.u32 %KT, %K, {cfg.bk.bit_length() - 1};", f"number of k tiles = K / {cfg.bk}")
    _grouped_tile(p, cfg.bm, cfg.bn, cfg.group_m)
    p.raw("")
    p.comment("Thread coordinates.")
    p.ins("mov.u32 %thread, %tid.x;")
    p.ins("and.b32 %lane, %thread, 31;", "lane within the warp")
    p.ins("shr.u32 %warp, %thread, 5;", "warp within the CTA")
    p.ins(f"rem.u32 %warp_m, %warp, {cfg.warps_m};", f"warp row: rows warp_m * {wm} ..")
    p.ins(f"div.u32 %warp_n, %warp, {cfg.warps_m};", f"warp column: columns warp_n * {wn} ..")
    p.ins("mov.u32 %smem, smem;", "shared address of the stages")
    p.raw("")
    p.comment("cp.async sources and destinations of this thread: 16-byte chunks q = tid + threads * u.")
    p.comment(f"A chunk q: row q / {a_row_chunks}, chunk q % {a_row_chunks} of the A tile (bm x bk).")
    for u in range(a_chunks // threads):
        p.ins(f"add.u32 %x, %thread, {u * threads};", f"q = tid + {u * threads}")
        p.ins(f"shr.u32 %row, %x, {a_row_chunks.bit_length() - 1};", "row of the tile")
        p.ins(f"and.b32 %col, %x, {a_row_chunks - 1};", "chunk within the row")
        p.ins(f"mad.lo.u32 %y, %bm, {cfg.bm}, %row;", "row of A")
        p.ins("mul.wide.u32 %off, %y, %K;")
        p.ins("cvt.u64.u32 %ptr, %col;")
        p.ins("shl.b64 %ptr, %ptr, 3;", "chunk * 8 elements")
        p.ins("add.s64 %off, %off, %ptr;", "element (row, chunk * 8) of A, k tile 0")
        p.ins("shl.b64 %off, %off, 1;", "bytes")
        p.ins(f"add.s64 %a_src{u}, %A, %off;")
        if a_row_chunks == 4:
            p.ins("shr.u32 %y, %row, 1;")
            p.ins("and.b32 %y, %y, 3;", "swizzle (row >> 1) & 3")
        else:
            p.ins("and.b32 %y, %row, 7;", "swizzle row & 7")
        p.ins("xor.b32 %col, %col, %y;", "stored chunk")
        p.ins(f"shl.b32 %row, %row, {(cfg.bk * 2).bit_length() - 1};", f"row * {cfg.bk * 2} bytes")
        p.ins(f"shl.b32 %col, %col, 4;")
        p.ins(f"add.u32 %a_dst{u}, %row, %col;", "offset within an A stage")
    p.comment(f"B chunk q: row q / {b_row_chunks}, chunk q % {b_row_chunks} of the B tile (bk x bn).")
    for u in range(b_chunks // threads):
        p.ins(f"add.u32 %x, %thread, {u * threads};", f"q = tid + {u * threads}")
        p.ins(f"shr.u32 %row, %x, {b_row_chunks.bit_length() - 1};", "k row of the tile")
        p.ins(f"and.b32 %col, %x, {b_row_chunks - 1};", "chunk within the row")
        p.ins("mul.wide.u32 %off, %row, %N;", "row of B (k tile 0)")
        p.ins(f"mul.lo.u32 %y, %bn, {cfg.bn // 8};")
        p.ins("add.u32 %y, %y, %col;", "chunk of the B row")
        p.ins("cvt.u64.u32 %ptr, %y;")
        p.ins("shl.b64 %ptr, %ptr, 3;")
        p.ins("add.s64 %off, %off, %ptr;")
        p.ins("shl.b64 %off, %off, 1;", "bytes")
        p.ins(f"add.s64 %b_src{u}, %B, %off;")
        p.ins("xor.b32 %y, %col, %row;")
        p.ins("and.b32 %y, %y, 7;")
        p.ins("and.b32 %col, %col, -8;")
        p.ins("or.b32 %col, %col, %y;", "stored chunk (c & ~7) | ((c ^ r) & 7)")
        p.ins(f"mul.lo.u32 %row, %row, {cfg.bn * 2};")
        p.ins("shl.b32 %col, %col, 4;")
        p.ins(f"add.u32 %b_dst{u}, %row, %col;", "offset within a B stage")
    p.ins(f"mov.b64 %a_step, {cfg.bk * 2};", "A advances bk elements per k tile")
    p.ins("mul.wide.u32 %b_step, %N, " + str(cfg.bk * 2) + ";", "B advances bk rows per k tile")
    p.raw("")
    p.comment("ldmatrix addresses (offsets within a stage) of this lane.")
    p.comment("A, m tile i: .x4 of the 16x16 block at rows warp_m*wm + 16i; lane l gives row l % 16, chunk l / 16")
    p.comment("(the four 8x8 matrices: rows 0-7/8-15 x k 0-7/8-15 = the A fragment registers a0..a3).")
    p.comment("k step s adds 2s to the chunk, which XORs the stored offset with 32s.")
    p.ins("and.b32 %x, %lane, 15;")
    p.ins("shr.u32 %y, %lane, 4;", "chunk 0 or 1")
    for i in range(mt):
        p.ins(f"mad.lo.u32 %row, %warp_m, {wm}, %x;")
        p.ins(f"add.u32 %row, %row, {16 * i};", f"row of m tile {i}")
        if a_row_chunks == 4:
            p.ins("shr.u32 %col, %row, 1;")
            p.ins("and.b32 %col, %col, 3;")
        else:
            p.ins("and.b32 %col, %row, 7;")
        p.ins("xor.b32 %col, %col, %y;", "stored chunk")
        p.ins(f"shl.b32 %row, %row, {(cfg.bk * 2).bit_length() - 1};")
        p.ins("shl.b32 %col, %col, 4;")
        p.ins(f"add.u32 %a_ld{i * ksteps}, %row, %col;", f"m tile {i}, k step 0")
        for s in range(1, ksteps):
            p.ins(f"xor.b32 %a_ld{i * ksteps + s}, %a_ld{i * ksteps}, {32 * s};", f"m tile {i}, k step {s}")
    p.comment("B, n tiles 2j and 2j+1: .x4.trans of k rows 0-15 (lane l gives k row l % 16) at the chunks of")
    p.comment("the two tiles (l / 16); transposed, they are the B fragment registers b0, b1 of both tiles.")
    p.comment(f"k step s adds 16s rows: {16 * cfg.bn * 2} bytes per step.")
    for j in range(nt // 2):
        p.ins(f"mad.lo.u32 %col, %warp_n, {wn // 8}, %y;")
        p.ins(f"add.u32 %col, %col, {2 * j};", f"chunk of n tile {2 * j} or {2 * j + 1}")
        p.ins("xor.b32 %row, %col, %x;")
        p.ins("and.b32 %row, %row, 7;")
        p.ins("and.b32 %col, %col, -8;")
        p.ins("or.b32 %col, %col, %row;", "stored chunk")
        p.ins("shl.b32 %col, %col, 4;")
        p.ins(f"mad.lo.u32 %b_ld{j}, %x, {cfg.bn * 2}, %col;", f"n tiles {2 * j}, {2 * j + 1}")
    p.raw("")
    p.comment("Zero the accumulators.")
    for r in range(mt * nt * 4):
        p.ins(f"mov.f32 %acc{r}, 0f00000000;")
    p.raw("")

    def load_tile(kt_reg: str, stage_reg: str) -> None:
        """cp.async of k tile `kt_reg` into stage `stage_reg`, predicated on %p_load."""
        p.ins(f"mad.lo.u32 %a_base, {stage_reg}, {a_stage + b_stage}, %smem;", "the stage's A tile")
        p.ins(f"add.u32 %b_base, %a_base, {a_stage};", "and B tile")
        p.ins(f"cvt.u64.u32 %off, {kt_reg};")
        for u in range(a_chunks // threads):
            p.ins(f"mad.lo.u64 %ptr, %off, %a_step, %a_src{u};")
            p.ins(f"add.u32 %addr, %a_base, %a_dst{u};")
            p.ins("@%p_load cp.async.cg.shared.global [%addr], [%ptr], 16;", "16 bytes, bypassing L1")
        for u in range(b_chunks // threads):
            p.ins(f"mad.lo.u64 %ptr, %off, %b_step, %b_src{u};")
            p.ins(f"add.u32 %addr, %b_base, %b_dst{u};")
            p.ins("@%p_load cp.async.cg.shared.global [%addr], [%ptr], 16;")
        p.ins("cp.async.commit_group;", "one group per tile (empty past the end)")

    p.comment(f"Prologue: start loading k tiles 0 .. {stages - 2} into stages 0 .. {stages - 2}.")
    for s in range(stages - 1):
        p.ins(f"mov.u32 %ktn, {s};")
        p.ins("setp.lt.u32 %p_load, %ktn, %KT;", "only tiles that exist")
        load_tile("%ktn", "%ktn")
    p.ins("mov.u32 %kt, 0;", "k tile computed next")
    p.ins("mov.u32 %read, 0;", "its stage")
    p.ins(f"mov.u32 %write, {stages - 1};", "stage refilled next")
    p.raw("")
    p.label("K_LOOP")
    p.ins(f"cp.async.wait_group {stages - 2};", "this thread's copies of tile kt have landed")
    p.ins("bar.sync 0;", "everyone's have; and everyone is done with stage 'write'")
    p.ins(f"add.u32 %ktn, %kt, {stages - 1};", "prefetch tile kt + stages - 1")
    p.ins("setp.lt.u32 %p_load, %ktn, %KT;")
    load_tile("%ktn", "%write")
    p.ins(f"mad.lo.u32 %a_base, %read, {a_stage + b_stage}, %smem;", "stage being computed")
    p.ins(f"add.u32 %b_base, %a_base, {a_stage};")
    for s in range(ksteps):
        p.comment(f"k step {s}: k = {16 * s} .. {16 * s + 15} of the tile.")
        for i in range(mt):
            regs = ", ".join(f"%fa{4 * i + r}" for r in range(4))
            p.ins(f"add.u32 %addr, %a_base, %a_ld{i * ksteps + s};")
            p.ins(f"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{regs}}}, [%addr];", f"A fragment, m tile {i}")
        for j in range(nt // 2):
            regs = ", ".join(f"%fb{4 * j + r}" for r in range(4))
            p.ins(f"add.u32 %addr, %b_base, %b_ld{j};")
            if s:
                p.ins(f"add.u32 %addr, %addr, {s * 16 * cfg.bn * 2};")
            p.ins(f"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{regs}}}, [%addr];",
                  f"B fragments, n tiles {2 * j}, {2 * j + 1}")
        for i in range(mt):
            for j in range(nt):
                acc = ", ".join(f"%acc{(i * nt + j) * 4 + r}" for r in range(4))
                a = ", ".join(f"%fa{4 * i + r}" for r in range(4))
                b = f"%fb{2 * j}, %fb{2 * j + 1}"
                p.ins(f"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{acc}}}, {{{a}}}, {{{b}}}, {{{acc}}};",
                      f"({i}, {j})")
    p.ins("add.u32 %kt, %kt, 1;")
    p.ins("add.u32 %read, %read, 1;")
    p.ins(f"rem.u32 %read, %read, {stages};")
    p.ins("add.u32 %write, %write, 1;")
    p.ins(f"rem.u32 %write, %write, {stages};")
    p.ins("setp.lt.u32 %p_loop, %kt, %KT;")
    p.ins("@%p_loop bra K_LOOP;")
    p.raw("")
    p.comment("Epilogue: accumulator (i, j) holds rows 16i + lane/4 (+8) and columns 8j + 2(lane%4) (+1)")
    p.comment("of the warp's block; each pair of columns is one store.")
    p.ins("shr.u32 %x, %lane, 2;")
    p.ins(f"mad.lo.u32 %row, %bm, {cfg.bm}, %x;")
    p.ins(f"mad.lo.u32 %row, %warp_m, {wm}, %row;", "row of the first accumulator")
    p.ins("and.b32 %y, %lane, 3;")
    p.ins("shl.b32 %y, %y, 1;")
    p.ins(f"mad.lo.u32 %col, %bn, {cfg.bn}, %y;")
    p.ins(f"mad.lo.u32 %col, %warp_n, {wn}, %col;", "its column")
    p.ins("mul.wide.u32 %off, %row, %N;")
    p.ins("cvt.u64.u32 %ptr, %col;")
    p.ins("add.s64 %off, %off, %ptr;")
    p.ins(f"mad.lo.u64 %ptr, %off, {osize}, %C;", "&C[row][col]")
    for i in range(mt):
        for half in range(2):
            p.ins(f"mul.wide.u32 %off, %N, {(16 * i + 8 * half) * osize};")
            p.ins("add.s64 %off, %off, %ptr;", f"row + {16 * i + 8 * half}")
            for j in range(nt):
                r0 = (i * nt + j) * 4 + 2 * half
                if cfg.out == "bf16":
                    p.ins(f"cvt.rn.bf16x2.f32 %packed, %acc{r0 + 1}, %acc{r0};", "low half: the first column")
                    p.ins(f"st.global.b32 [%off+{8 * j * osize}], %packed;")
                else:
                    p.ins(f"st.global.v2.f32 [%off+{8 * j * osize}], {{%acc{r0}, %acc{r0 + 1}}};")
    p.ins("ret;")
    p.raw("}")
    return p.text()


# ============================================================================ wgmma + TMA

@dataclass(frozen=True)
class WgmmaConfig:
    """Tile shape and features of the wgmma kernel.  The defaults are the prototype: TMA with the
    128-byte swizzle, a producer warpgroup, two consumer warpgroups, setmaxnreg.  Turning features
    off gives simpler kernels of the same structure (tc_bisect runs them from the simplest up)."""

    bn: int = 256        # CTA tile columns (a multiple of 64, at most 256)
    bk: int = 64         # k per stage: one 128-byte swizzled row of A
    stages: int = 4
    out: str = "bf16"
    group_m: int = 16
    consumer_registers: int = 232
    producer_registers: int = 40
    consumers: int = 2           # consumer warpgroups, 64 rows of the CTA tile each
    producer: bool = True        # a producer warpgroup fills the stages (else consumer thread 0 does)
    setmaxnreg: bool = True      # the producer gives registers to the consumers
    load: str = "tma"            # "tma", or "plain": every consumer thread copies 16-byte chunks itself
    swizzle: int = 128           # shared layout: 128-byte swizzle, or 0 (no swizzle; plain loads only)

    @property
    def bm(self) -> int:
        return 64 * self.consumers

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + self.producer)

    @property
    def a_stage(self) -> int:
        return self.bm * self.bk * 2

    @property
    def b_stage(self) -> int:
        return self.bk * self.bn * 2

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory: the stages, plus 1024 bytes to align them."""
        return self.stages * (self.a_stage + self.b_stage) + 1024

    @property
    def entry_registers(self) -> int:
        """The register cap at entry that `.maxntid threads .minnctapersm 1` gives (64K / threads)."""
        return min(65536 // self.threads // 8 * 8, 255)

    def check(self) -> None:
        assert self.bk == 64, "one 128-byte swizzle row of bf16 per stage"
        assert self.bn % 64 == 0 and 64 <= self.bn <= 256
        assert self.stages >= 1 and self.out in ("bf16", "f32") and self.consumers in (1, 2)
        assert self.load in ("tma", "plain") and self.swizzle in (0, 128)
        assert self.swizzle or self.load == "plain", "TMA boxes here are written with the 128-byte swizzle"
        assert self.load == "tma" or (not self.producer and self.stages == 1), "plain loads: one stage, no producer"
        assert self.producer or not self.setmaxnreg, "setmaxnreg moves registers from the producer"
        if self.setmaxnreg:  # the consumers' increase must fit the CTA's pool (else they wait forever)
            entry = min(self.entry_registers, max(self.producer_registers, self.consumer_registers))
            assert self.producer_registers <= entry <= self.consumer_registers
            assert 128 * (self.producer_registers + self.consumers * self.consumer_registers) <= entry * self.threads


def _wgmma_layout(cfg: WgmmaConfig) -> dict:
    """Shared layout of one stage: descriptor templates (no start address), the start offset of
    consumer 1's A rows and the advance per wgmma k step (16-byte units); `_chunk_offset` places
    the 16-byte chunks in the same layout."""
    bm, bk = cfg.bm, cfg.bk
    if cfg.swizzle:  # the TMA boxes: A rows of 128 bytes; B boxes of 64 columns, k rows of 128 bytes
        return dict(a_desc=1 << 62 | (1024 >> 4) << 32 | (16 >> 4) << 16,
                    b_desc=1 << 62 | (1024 >> 4) << 32 | (bk * 128 >> 4) << 16,
                    a_desc_note="SBO 1024, LBO 16 (unused)", b_desc_note=f"SBO 1024, LBO {bk * 128}",
                    a_consumer=64 * 128, a_step=2, b_step=128)
    # no swizzle: core matrices of 8 rows x 16 bytes.  A (K-major): k chunk c of all bm rows is one
    # column of core matrices (LBO = bm * 16 to the next chunk, SBO = 128 to the next 8 rows);
    # B (N-major): column chunk c of all bk k rows likewise (SBO = bk * 16 to the next chunk of
    # columns, LBO = 128 to the next 8 k rows).
    return dict(a_desc=(128 >> 4) << 32 | (bm * 16 >> 4) << 16, b_desc=(bk * 16 >> 4) << 32 | (128 >> 4) << 16,
                a_desc_note=f"SBO 128, LBO {bm * 16}", b_desc_note=f"SBO {bk * 16}, LBO 128",
                a_consumer=64 * 16, a_step=2 * bm, b_step=16)


def _chunk_offset(p: Ptx, cfg: WgmmaConfig, operand: str, dst: str) -> None:
    """`dst` = byte offset in the stage of 16-byte chunk (%row, %col) of the A tile (row, k chunk)
    or the B tile (k row, column chunk), in the layout `_wgmma_layout` describes (%x, %y: scratch)."""
    if cfg.swizzle and operand == "A":
        p.ins("and.b32 %y, %row, 7;")
        p.ins("xor.b32 %y, %y, %col;", "chunk ^ (row % 8)")
        p.ins("shl.b32 %y, %y, 4;")
        p.ins("mad.lo.u32 %y, %row, 128, %y;", "row * 128 + swizzled chunk * 16")
    elif cfg.swizzle:
        p.ins("and.b32 %y, %row, 7;")
        p.ins("and.b32 %x, %col, 7;")
        p.ins("xor.b32 %y, %y, %x;", "(chunk % 8) ^ (k row % 8)")
        p.ins("shl.b32 %y, %y, 4;")
        p.ins("mad.lo.u32 %y, %row, 128, %y;")
        p.ins("shr.u32 %x, %col, 3;", "box of 64 columns")
        p.ins(f"mad.lo.u32 %y, %x, {cfg.bk * 128}, %y;")
    else:
        pitch = cfg.bm * 16 if operand == "A" else cfg.bk * 16
        p.ins("shl.b32 %y, %row, 4;")
        p.ins(f"mad.lo.u32 %y, %col, {pitch}, %y;", f"chunk * {pitch} + row * 16")
    p.ins(f"mov.u32 {dst}, %y;" if operand == "A" else f"add.u32 {dst}, %y, {cfg.a_stage};",
          "offset in the stage" if operand == "A" else "offset in the stage (after the A tile)")


def wgmma_gemm(cfg: WgmmaConfig = WgmmaConfig(), name: str = "gemm_bf16_wgmma") -> str:
    cfg.check()
    stages, bn, bk, bm = cfg.stages, cfg.bn, cfg.bk, cfg.bm
    tma, producer = cfg.load == "tma", cfg.producer
    nboxes = bn // 64
    nacc = bn // 2
    stage_bytes = cfg.a_stage + cfg.b_stage
    tx_bytes = stage_bytes
    osize = 2 if cfg.out == "bf16" else 4
    lay = _wgmma_layout(cfg)
    a_desc, b_desc = lay["a_desc"], lay["b_desc"]
    p = Ptx()
    source = "TMA" if tma else "plain loads"
    p.raw(f"// bf16 GEMM on the Hopper tensor cores with wgmma + {source} (sm_90a), written by handwritten_ptx/gemm_ptx.py:")
    p.raw(f"//   C[M x N] ({cfg.out}) = A[M x K] (bf16) * B[K x N] (bf16), all row-major, f32 accumulation.")
    p.raw(f"// CTA tile {bm}x{bn}, k step {bk}, {stages} stages of {stage_bytes} bytes; {cfg.threads} threads:")
    if producer:
        p.raw("//   warpgroup 0 (threads 0-127): producer; one elected thread issues the TMA copies;")
    first = 1 if producer else 0
    groups = ", ".join(str(first + i) for i in range(cfg.consumers))
    p.raw(f"//   warpgroup{'s' if cfg.consumers > 1 else ''} {groups}: consumer{'s' if cfg.consumers > 1 else ''}, "
          f"each computing 64 rows x {bn} columns with wgmma.m64n{bn}k16,")
    if cfg.setmaxnreg:
        p.raw(f"//   {nacc} f32 accumulators per thread.  setmaxnreg gives the producer {cfg.producer_registers} "
              f"registers and the consumers {cfg.consumer_registers}.")
    else:
        p.raw(f"//   {nacc} f32 accumulators per thread.")
    if tma and not producer:
        p.raw("//   Thread 0 issues the TMA copies of the first stages, and refills each stage once every")
        p.raw("//   thread is done with it (bar.sync).")
    if not tma:
        p.raw("//   Each k tile is copied by all threads (16-byte chunks, ld.global -> st.shared), made visible")
        p.raw("//   to the tensor cores by fence.proxy.async and bar.sync, multiplied, and the CTA syncs again.")
    p.raw(f"// M % {bm} == 0, N % {bn} == 0, K % {bk} == 0; grid: (M/{bm}) * (N/{bn}) CTAs in x;")
    p.raw(f"// {cfg.shared_bytes} bytes of dynamic shared memory.")
    p.raw("//")
    if tma:
        p.raw("// Tensor maps (built on the host: phobos.run.tensor_map.TensorMap, 128-byte swizzle, bf16):")
        p.raw(f"//   a_map: A as (M rows, K columns), box {bm} rows x {bk} columns: one copy per stage.")
        p.raw(f"//   b_map: B as (K rows, N columns), box {bk} rows x 64 columns: {nboxes} copies per stage.")
    if cfg.swizzle:
        p.raw(f"// Stage layout (1024-byte aligned): the A tile, {bm} rows of 128 bytes (row m at 128m, K-major);")
        p.raw(f"// then {nboxes} B boxes of 8192 bytes (box q: columns 64q..64q+63; k row r at 128r, N-major).")
        p.raw(f"// {'TMA stores' if tma else 'The loads store'} each 128-byte row with its 16-byte chunks XORed by "
              f"(address / 128) % 8, which is")
        p.raw("// the layout the 128B-swizzle matrix descriptors describe:")
        p.raw("//   A (K-major): start = A tile + 64 * 128 * consumer + 32 * k16 step, SBO = 1024 (next 8 rows)")
        p.raw("//   B (N-major, imm-trans-b = 1): start = B tiles + 2048 * k16 step, SBO = 1024 (next 8 k rows),")
        p.raw("//     LBO = 8192 (next 64 columns)")
    else:
        p.raw("// Stage layout, no swizzle (8x16-byte core matrices): A (K-major) chunk c (k 8c..8c+7) of row r at")
        p.raw(f"// {bm * 16}c + 16r: {lay['a_desc_note']}, start + {bm * 32} per k16 step, + 1024 for consumer 1;")
        p.raw(f"// B (N-major, imm-trans-b = 1) columns 8c..8c+7 of k row r at {bk * 16}c + 16r: {lay['b_desc_note']},")
        p.raw("// start + 256 per k16 step.")
    if tma and producer:
        p.raw("// mbarriers: full[s] (1 arrival + the stage's bytes: the producer's arrive.expect_tx and the")
        p.raw(f"// copies' complete_tx) and empty[s] ({cfg.consumers} arrival{'s' if cfg.consumers > 1 else ''}: "
              f"one per consumer warpgroup when its wgmmas on")
        p.raw("// the stage are done).  Use u of stage s (k tile t = u * stages + s) waits for parity u % 2 of")
        p.raw("// full[s]; the producer waits for parity (u % 2) ^ 1 of empty[s] (true at once for u = 0).")
    elif tma:
        p.raw("// mbarriers: full[s] (1 arrival + the stage's bytes: thread 0's arrive.expect_tx and the copies'")
        p.raw("// complete_tx).  Use u of stage s (k tile t = u * stages + s) waits for parity u % 2 of full[s].")
    p.raw(".version 8.0")
    p.raw(".target sm_90a")
    p.raw(".address_size 64")
    p.raw("")
    if tma:
        p.raw(f".shared .align 8 .b64 full[{stages}];          // stage s holds its k tile")
    if tma and producer:
        p.raw(f".shared .align 8 .b64 empty[{stages}];         // stage s may be refilled")
    p.raw(".extern .shared .align 1024 .b8 smem[];       // the stages (aligned at run time too)")
    p.raw("")
    p.raw(f".visible .entry {name}(")
    if tma:
        p.raw("    .param .align 64 .b8 a_map[128],       // CUtensorMap of A")
        p.raw("    .param .align 64 .b8 b_map[128],       // CUtensorMap of B")
    else:
        p.raw("    .param .u64 a_ptr,                     // const bf16 *A (M x K)")
        p.raw("    .param .u64 b_ptr,                     // const bf16 *B (K x N)")
    p.raw(f"    .param .u64 c_ptr,                     // {cfg.out} *C (M x N)")
    p.raw("    .param .u32 m_size,")
    p.raw("    .param .u32 n_size,")
    p.raw("    .param .u32 k_size")
    bounds = (f"1 CTA per SM: ptxas starts from {cfg.entry_registers} registers" if cfg.setmaxnreg
              else "1 CTA per SM")
    p.raw(f") .maxntid {cfg.threads}, 1, 1 .minnctapersm 1           // {bounds}")
    p.raw("{")
    p.ins(".reg .pred %p_leader, %p_wait, %p_loop, %p_first;")
    p.ins(".reg .b32 %M, %N, %K, %KT, %thread, %wg, %lane, %warp, %x, %y, %row, %col, %leader;")
    p.ins(".reg .b32 %pid, %tiles_m, %tiles_n, %group_size, %group, %first_m, %group_m, %in_group, %bm, %bn;")
    p.ins(".reg .b32 %smem, %kt, %stage, %phase, %full, %empty, %dst, %kx, %packed;")
    p.ins(".reg .b64 %a_map, %b_map, %C, %off, %ptr, %token, %desc_a, %desc_b, %adesc, %bdesc;")
    if not tma:
        a_chunks, b_chunks = bm * bk // 8 // cfg.threads, bk * bn // 8 // cfg.threads
        p.ins(".reg .b32 %v<4>;")
        p.ins(f".reg .b32 %a_dst<{a_chunks}>, %b_dst<{b_chunks}>;")
        p.ins(f".reg .b64 %A, %B, %b_step, %a_src<{a_chunks}>, %b_src<{b_chunks}>;")
    p.ins(f".reg .f32 %acc<{nacc}>;")
    p.raw("")
    p.comment("Parameters.")
    if tma:
        p.ins("mov.b64 %a_map, a_map;", "parameter-space address of the tensor maps")
        p.ins("cvta.param.u64 %a_map, %a_map;", "made generic: TMA takes generic addresses")
        p.ins("mov.b64 %b_map, b_map;")
        p.ins("cvta.param.u64 %b_map, %b_map;")
    else:
        p.ins("ld.param.u64 %A, [a_ptr];")
        p.ins("cvta.to.global.u64 %A, %A;")
        p.ins("ld.param.u64 %B, [b_ptr];")
        p.ins("cvta.to.global.u64 %B, %B;")
    p.ins("ld.param.u64 %C, [c_ptr];")
    p.ins("cvta.to.global.u64 %C, %C;")
    p.ins("ld.param.u32 %M, [m_size];")
    p.ins("ld.param.u32 %N, [n_size];")
    p.ins("ld.param.u32 %K, [k_size];")
    p.ins(f"shr.u32 %KT, %K, {bk.bit_length() - 1};", f"k tiles = K / {bk}")
    _grouped_tile(p, bm, bn, cfg.group_m)
    p.ins("mov.u32 %thread, %tid.x;")
    p.ins("shr.u32 %wg, %thread, 7;", "warpgroup: 0 producer, 1 and 2 consumers" if producer else "warpgroup")
    p.ins("mov.u32 %smem, smem;")
    p.ins("add.u32 %smem, %smem, 1023;")
    p.ins("and.b32 %smem, %smem, -1024;", "stages 1024-byte aligned (the swizzle pattern)")
    if tma:
        p.ins("mov.u32 %full, full;")
    if tma and producer:
        p.ins("mov.u32 %empty, empty;")
    p.raw("")

    def issue_tile(guard: str = "") -> None:
        """Thread(s) under `guard`: arrive on full[%stage] expecting the stage's bytes, then copy
        k tile %kt into stage %stage (%x = 8 * %stage)."""
        p.ins("add.u32 %y, %full, %x;", "&full[stage]")
        p.ins(f"{guard}mbarrier.arrive.expect_tx.shared::cta.b64 %token, [%y], {tx_bytes};",
              "arrive, expecting the bytes")
        p.ins(f"mad.lo.u32 %dst, %stage, {stage_bytes}, %smem;", "the stage's A tile")
        p.ins(f"shl.b32 %kx, %kt, {bk.bit_length() - 1};", "k of the tile")
        p.ins(f"shl.b32 %row, %bm, {bm.bit_length() - 1};", f"first row of A (bm * {bm})")
        p.ins(f"{guard}cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%dst], "
              "[%a_map, {%kx, %row}], [%y];", "A box {k, m}")
        for q in range(nboxes):
            p.ins(f"add.u32 %dst, %dst, {cfg.a_stage if q == 0 else 8192};", f"B box {q}")
            p.ins(f"mad.lo.u32 %col, %bn, {bn}, {64 * q};" if q else f"mul.lo.u32 %col, %bn, {bn};",
                  f"columns {64 * q}.. of the tile")
            p.ins(f"{guard}cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%dst], "
                  "[%b_map, {%col, %kx}], [%y];", "B box {n, k}")

    def next_stage(explain: bool = True) -> None:
        """kt + 1; the next stage, and the next use's parity after the last stage."""
        p.ins("add.u32 %kt, %kt, 1;")
        p.ins("add.u32 %stage, %stage, 1;")
        p.ins(f"setp.eq.u32 %p_wait, %stage, {stages};")
        p.ins("@%p_wait mov.u32 %stage, 0;", "wrap around ..." if explain else "")
        p.ins("@%p_wait xor.b32 %phase, %phase, 1;", "... into the next use" if explain else "")

    if tma:
        p.comment("Thread 0 initialises the mbarriers; fence.mbarrier_init makes the initialisation visible to")
        p.comment("the asynchronous proxy (TMA), bar.sync to the other threads.")
        p.ins("setp.eq.u32 %p_leader, %thread, 0;")
        for s in range(stages):
            p.ins(f"@%p_leader mbarrier.init.shared::cta.b64 [%full+{8 * s}], 1;",
                  f"full[{s}]: the {'producer' if producer else 'issuing thread'}'s arrival")
            if producer:
                p.ins(f"@%p_leader mbarrier.init.shared::cta.b64 [%empty+{8 * s}], {cfg.consumers};",
                      f"empty[{s}]: one per consumer")
        p.ins("fence.mbarrier_init.release.cluster;")
        p.ins("bar.sync 0;")
    if producer:
        p.ins("setp.ne.u32 %p_wait, %wg, 0;")
        p.ins("@%p_wait bra CONSUMER;")
        p.raw("")
        p.comment("---- Producer warpgroup: give registers away, then one thread streams k tiles into the stages."
                  if cfg.setmaxnreg else "---- Producer warpgroup: one thread streams k tiles into the stages.")
        if cfg.setmaxnreg:
            p.ins(f"setmaxnreg.dec.sync.aligned.u32 {cfg.producer_registers};")
        p.ins("setp.ge.u32 %p_wait, %thread, 32;")
        p.ins("@%p_wait bra DONE;", "warps 1-3 have nothing to do")
        p.ins("elect.sync %leader|%p_leader, 0xffffffff;", "one thread of warp 0")
        p.ins("@!%p_leader bra DONE;")
        p.ins("mov.u32 %kt, 0;")
        p.ins("mov.u32 %stage, 0;")
        p.ins("mov.u32 %phase, 0;", "use of the stage, mod 2")
        p.label("PRODUCE")
        p.ins("shl.b32 %x, %stage, 3;")
        p.ins("add.u32 %y, %empty, %x;", "&empty[stage]")
        p.ins("xor.b32 %row, %phase, 1;", "the previous use's parity")
        p.label("WAIT_EMPTY")
        p.ins("mbarrier.try_wait.parity.shared::cta.b64 %p_wait, [%y], %row;", "consumers done with the stage?")
        p.ins("@!%p_wait bra WAIT_EMPTY;")
        issue_tile()
        next_stage()
        p.ins("setp.lt.u32 %p_loop, %kt, %KT;")
        p.ins("@%p_loop bra PRODUCE;")
        p.ins("bra.uni DONE;")
        p.raw("")
        p.comment("---- Consumer warpgroups: take registers, then multiply each stage as it arrives."
                  if cfg.setmaxnreg else "---- Consumer warpgroups: multiply each stage as it arrives.")
        p.label("CONSUMER")
        if cfg.setmaxnreg:
            p.ins(f"setmaxnreg.inc.sync.aligned.u32 {cfg.consumer_registers};")
        p.ins("and.b32 %x, %thread, 127;")
        p.ins("setp.eq.u32 %p_leader, %x, 0;", "the thread that arrives for the warpgroup")
    elif tma:
        p.comment(f"Thread 0 starts the copies of the first {stages} k tiles (%p_leader: thread 0).")
        p.ins("mov.u32 %kt, 0;")
        p.ins("mov.u32 %stage, 0;")
        p.label("PROLOGUE")
        p.ins("shl.b32 %x, %stage, 3;")
        issue_tile("@%p_leader ")
        p.ins("add.u32 %kt, %kt, 1;")
        p.ins("add.u32 %stage, %stage, 1;")
        p.ins("setp.lt.u32 %p_loop, %kt, %KT;")
        p.ins(f"setp.lt.u32 %p_wait, %stage, {stages};")
        p.ins("and.pred %p_loop, %p_loop, %p_wait;", "another tile, and a stage for it")
        p.ins("@%p_loop bra PROLOGUE;")
    else:
        p.comment("This thread's 16-byte chunks q = tid + threads * u of the A tile (row q / 8, k chunk q % 8)")
        p.comment(f"and of the B tile (k row q / {bn // 8}, column chunk q % {bn // 8}): global sources at k tile 0,")
        p.comment("offsets in the stage.")
        for u in range(a_chunks):
            p.ins(f"add.u32 %x, %thread, {u * cfg.threads};")
            p.ins("shr.u32 %row, %x, 3;")
            p.ins("and.b32 %col, %x, 7;")
            p.ins(f"mad.lo.u32 %y, %bm, {bm}, %row;", "row of A")
            p.ins("mul.wide.u32 %off, %y, %K;")
            p.ins("cvt.u64.u32 %ptr, %col;")
            p.ins("shl.b64 %ptr, %ptr, 3;")
            p.ins("add.s64 %off, %off, %ptr;")
            p.ins("shl.b64 %off, %off, 1;")
            p.ins(f"add.s64 %a_src{u}, %A, %off;")
            _chunk_offset(p, cfg, "A", f"%a_dst{u}")
        for u in range(b_chunks):
            p.ins(f"add.u32 %x, %thread, {u * cfg.threads};")
            p.ins(f"shr.u32 %row, %x, {(bn // 8).bit_length() - 1};")
            p.ins(f"and.b32 %col, %x, {bn // 8 - 1};")
            p.ins("mul.wide.u32 %off, %row, %N;", "k row of B")
            p.ins(f"mad.lo.u32 %y, %bn, {bn // 8}, %col;", "column chunk of B")
            p.ins("cvt.u64.u32 %ptr, %y;")
            p.ins("shl.b64 %ptr, %ptr, 3;")
            p.ins("add.s64 %off, %off, %ptr;")
            p.ins("shl.b64 %off, %off, 1;")
            p.ins(f"add.s64 %b_src{u}, %B, %off;")
            _chunk_offset(p, cfg, "B", f"%b_dst{u}")
        p.ins(f"mul.wide.u32 %b_step, %N, {bk * 2};", f"B advances {bk} rows per k tile")
    p.comment("Descriptor templates: " + ("swizzle 128B (bit 62), " if cfg.swizzle else "no swizzle, ")
              + "SBO and LBO; the start address is added per stage.")
    p.ins(f"mov.b64 %desc_a, {a_desc:#x};", lay["a_desc_note"])
    p.ins(f"mov.b64 %desc_b, {b_desc:#x};", lay["b_desc_note"])
    if producer:
        p.ins("sub.u32 %x, %wg, 1;", "consumer 0 or 1")
    else:
        p.ins("mov.u32 %x, %wg;", "consumer" + (" 0 or 1" if cfg.consumers > 1 else " 0"))
    a_consumer = lay["a_consumer"]
    p.ins(f"shl.b32 %x, %x, {a_consumer.bit_length() - 1};",
          f"its 64 rows of the A tile: {a_consumer} bytes in" if cfg.swizzle == 0 else
          "its 64 rows of the A tile: 64 * 128 bytes in")
    p.ins("add.u32 %x, %x, %smem;")
    p.ins("shr.u32 %x, %x, 4;", "descriptor addresses are in 16-byte units")
    p.ins("cvt.u64.u32 %off, %x;")
    p.ins("add.s64 %desc_a, %desc_a, %off;", "A of stage 0, k step 0, this consumer")
    p.ins(f"add.u32 %x, %smem, {cfg.a_stage};")
    p.ins("shr.u32 %x, %x, 4;")
    p.ins("cvt.u64.u32 %off, %x;")
    p.ins("add.s64 %desc_b, %desc_b, %off;", "B of stage 0, k step 0")
    p.ins("mov.u32 %kt, 0;")
    p.ins("mov.u32 %stage, 0;")
    p.ins("mov.u32 %phase, 0;")
    p.label("CONSUME")
    if tma:
        p.ins("shl.b32 %x, %stage, 3;")
        p.ins("add.u32 %y, %full, %x;", "&full[stage]")
        p.label("WAIT_FULL")
        p.ins("mbarrier.try_wait.parity.shared::cta.b64 %p_wait, [%y], %phase;", "has the tile landed?")
        p.ins("@!%p_wait bra WAIT_FULL;")
        p.ins(f"mul.lo.u32 %x, %stage, {stage_bytes >> 4};", "stage offset in 16-byte units")
        p.ins("cvt.u64.u32 %off, %x;")
        p.ins("add.s64 %adesc, %desc_a, %off;")
        p.ins("add.s64 %bdesc, %desc_b, %off;")
    else:
        p.comment("Copy k tile kt: every thread its chunks, then fence.proxy.async (the tensor cores read")
        p.comment("shared memory through the async proxy) and bar.sync (everyone's chunks are there).")
        for u in range(a_chunks):
            p.ins(f"ld.global.v4.b32 {{%v0, %v1, %v2, %v3}}, [%a_src{u}];")
            p.ins(f"add.u32 %x, %smem, %a_dst{u};")
            p.ins("st.shared.v4.b32 [%x], {%v0, %v1, %v2, %v3};")
            p.ins(f"add.s64 %a_src{u}, %a_src{u}, {bk * 2};", f"next k tile: {bk} columns on")
        for u in range(b_chunks):
            p.ins(f"ld.global.v4.b32 {{%v0, %v1, %v2, %v3}}, [%b_src{u}];")
            p.ins(f"add.u32 %x, %smem, %b_dst{u};")
            p.ins("st.shared.v4.b32 [%x], {%v0, %v1, %v2, %v3};")
            p.ins(f"add.s64 %b_src{u}, %b_src{u}, %b_step;", f"next k tile: {bk} rows on")
        p.ins("fence.proxy.async.shared::cta;", "generic-proxy stores made visible to wgmma")
        p.ins("bar.sync 0;")
        p.ins("mov.b64 %adesc, %desc_a;")
        p.ins("mov.b64 %bdesc, %desc_b;")
    p.ins("setp.ne.u32 %p_first, %kt, 0;", "scale-d: false on the first tile (D = A B)")
    p.ins("wgmma.fence.sync.aligned;", "registers settled before the wgmmas read them")
    acc = ", ".join(f"%acc{r}" for r in range(nacc))
    for s in range(bk // 16):
        if s:
            p.ins(f"add.s64 %adesc, %adesc, {lay['a_step']};", "next 16 k: 32 bytes along the A rows"
                  if cfg.swizzle else f"next 16 k: two k chunks of A ({lay['a_step'] * 16} bytes)")
            p.ins(f"add.s64 %bdesc, %bdesc, {lay['b_step']};", "next 16 k: 16 rows of 128 bytes of B"
                  if cfg.swizzle else "next 16 k: 16 k rows of 16 bytes of B")
        scale = "%p_first" if s == 0 else "1"
        p.ins(f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.bf16.bf16 {{{acc}}}, %adesc, %bdesc, {scale}, 1, 1, 0, 1;",
              f"k step {s}: scale-d, scale-a, scale-b, A K-major, B N-major")
    p.ins("wgmma.commit_group.sync.aligned;")
    p.ins("wgmma.wait_group.sync.aligned 0;", "the wgmmas are done reading the stage")
    if tma and producer:
        p.ins("shl.b32 %x, %stage, 3;")
        p.ins("add.u32 %y, %empty, %x;", "&empty[stage]")
        p.ins("@%p_leader mbarrier.arrive.shared::cta.b64 %token, [%y];", "release the stage")
        next_stage(explain=False)
    elif tma:
        p.ins("bar.sync 0;", "every thread is done with the stage")
        p.comment(f"Thread 0 refills the stage with k tile kt + {stages}, if there is one.")
        p.ins(f"add.u32 %kt, %kt, {stages};")
        p.ins("setp.lt.u32 %p_wait, %kt, %KT;")
        p.ins("and.pred %p_loop, %p_leader, %p_wait;", "thread 0, and a tile left")
        p.ins("shl.b32 %x, %stage, 3;")
        issue_tile("@%p_loop ")
        p.ins(f"sub.u32 %kt, %kt, {stages};")
        next_stage(explain=False)
    else:
        p.ins("bar.sync 0;", "everyone is done with the tile before the next one overwrites it")
        p.ins("add.u32 %kt, %kt, 1;")
    p.ins("setp.lt.u32 %p_loop, %kt, %KT;")
    p.ins("@%p_loop bra CONSUME;")
    p.raw("")
    p.comment(f"Epilogue: register 4j + i of the {nacc} holds row 16 * warp + lane/4 (+8 for i >= 2), column")
    p.comment("8j + 2(lane%4) (+1 for odd i) of the consumer's 64 rows; each pair of columns is one store.")
    p.ins("and.b32 %x, %thread, 127;")
    p.ins("shr.u32 %warp, %x, 5;", "warp within the warpgroup")
    p.ins("and.b32 %lane, %x, 31;")
    p.ins("sub.u32 %y, %wg, 1;" if producer else "mov.u32 %y, %wg;")
    p.ins(f"shl.b32 %row, %bm, {bm.bit_length() - 1};")
    p.ins("mad.lo.u32 %row, %y, 64, %row;", "first row of this consumer")
    p.ins("mad.lo.u32 %row, %warp, 16, %row;")
    p.ins("shr.u32 %x, %lane, 2;")
    p.ins("add.u32 %row, %row, %x;", "row of register 0")
    p.ins("and.b32 %x, %lane, 3;")
    p.ins("shl.b32 %x, %x, 1;")
    p.ins(f"mad.lo.u32 %col, %bn, {bn}, %x;", "column of register 0")
    p.ins("mul.wide.u32 %off, %row, %N;")
    p.ins("cvt.u64.u32 %ptr, %col;")
    p.ins("add.s64 %off, %off, %ptr;")
    p.ins(f"mad.lo.u64 %ptr, %off, {osize}, %C;", "&C[row][col]")
    p.ins(f"mul.wide.u32 %off, %N, {8 * osize};")
    p.ins("add.s64 %off, %off, %ptr;", "&C[row + 8][col]")
    for j in range(bn // 8):
        for half, base in ((0, "%ptr"), (1, "%off")):
            r0 = 4 * j + 2 * half
            if cfg.out == "bf16":
                p.ins(f"cvt.rn.bf16x2.f32 %packed, %acc{r0 + 1}, %acc{r0};", "low half: the first column")
                p.ins(f"st.global.b32 [{base}+{8 * j * osize}], %packed;")
            else:
                p.ins(f"st.global.v2.f32 [{base}+{8 * j * osize}], {{%acc{r0}, %acc{r0 + 1}}};")
    p.label("DONE")
    p.ins("ret;")
    p.raw("}")
    return p.text()


def parameter_probe(name: str = "parameter_probe") -> str:
    """A kernel with the wgmma GEMM's parameters (the output pointer first): thread 0 copies the
    bytes of both tensor maps and the three sizes, read with ld.param, to out[0..66], so that the
    host sees where the kernel finds its parameters, whatever was packed where (tc_bisect)."""
    p = Ptx()
    p.raw("// Writes back its parameters as it reads them: out[0..31] a_map, out[32..63] b_map, out[64..66]")
    p.raw("// m, n, k (32-bit words), written by handwritten_ptx/gemm_ptx.py.")
    p.raw(".version 8.0")
    p.raw(".target sm_90")
    p.raw(".address_size 64")
    p.raw("")
    p.raw(f".visible .entry {name}(")
    p.raw("    .param .u64 out,")
    p.raw("    .param .align 64 .b8 a_map[128],")
    p.raw("    .param .align 64 .b8 b_map[128],")
    p.raw("    .param .u32 m_size,")
    p.raw("    .param .u32 n_size,")
    p.raw("    .param .u32 k_size")
    p.raw(")")
    p.raw("{")
    p.ins(".reg .pred %p;")
    p.ins(".reg .b32 %word;")
    p.ins(".reg .b64 %out;")
    p.ins("mov.u32 %word, %tid.x;")
    p.ins("setp.ne.u32 %p, %word, 0;")
    p.ins("@%p bra DONE;", "thread 0 only")
    p.ins("ld.param.u64 %out, [out];")
    p.ins("cvta.to.global.u64 %out, %out;")
    for base, param in ((0, "a_map"), (128, "b_map")):
        for i in range(0, 128, 4):
            p.ins(f"ld.param.b32 %word, [{param}+{i}];")
            p.ins(f"st.global.b32 [%out+{base + i}], %word;")
    for i, param in enumerate(("m_size", "n_size", "k_size")):
        p.ins(f"ld.param.b32 %word, [{param}];")
        p.ins(f"st.global.b32 [%out+{256 + 4 * i}], %word;")
    p.label("DONE")
    p.ins("ret;")
    p.raw("}")
    return p.text()


#: The wgmma kernel from its simplest form up to the prototype, one feature more at each step
#: (benchmarks/tc_bisect.py runs them on the GPU in this order): (key, what the step adds, config).
WGMMA_LADDER = [
    ("a", "one warpgroup, 64x64 tile, plain loads, no swizzle, one stage",
     WgmmaConfig(bn=64, stages=1, consumers=1, producer=False, setmaxnreg=False, load="plain", swizzle=0)),
    ("b", "+ 128-byte swizzle", WgmmaConfig(bn=64, stages=1, consumers=1, producer=False, setmaxnreg=False,
                                            load="plain")),
    ("c", "+ TMA into the stage, an mbarrier, tensor-map parameters",
     WgmmaConfig(bn=64, stages=1, consumers=1, producer=False, setmaxnreg=False)),
    ("d", "+ 4-stage pipeline", WgmmaConfig(bn=64, consumers=1, producer=False, setmaxnreg=False)),
    ("e", "+ 64x256 tile (wgmma n256, 128 accumulators)", WgmmaConfig(consumers=1, producer=False,
                                                                       setmaxnreg=False)),
    ("f", "+ producer warpgroup (empty/full mbarriers, elect.sync)", WgmmaConfig(consumers=1, setmaxnreg=False)),
    ("g", "+ second consumer warpgroup (128x256 tile, 384 threads)", WgmmaConfig(setmaxnreg=False)),
    ("h", "+ setmaxnreg: the prototype", WgmmaConfig()),
]


# ============================================================================ host side

def check_shape(m: int, n: int, k: int, tile_m: int, tile_n: int, tile_k: int) -> None:
    """ValueError unless the problem is a whole number of tiles."""
    for size, tile, name in ((m, tile_m, "M"), (n, tile_n, "N"), (k, tile_k, "K")):
        if size <= 0 or size % tile:
            raise ValueError(f"{name} = {size} is not a positive multiple of the tile size {tile}")


FILES = {"gemm_bf16_mma.ptx": lambda: mma_sync_gemm(), "gemm_bf16_wgmma.ptx": lambda: wgmma_gemm()}


def main() -> None:
    for name, make in FILES.items():
        (HERE / name).write_text(make())
        print(f"wrote {HERE / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
