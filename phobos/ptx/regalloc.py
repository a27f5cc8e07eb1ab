# Register allocation for PTX virtual registers: liveness, then linear scan per class.
#
# ptxas does the real allocation onto hardware registers, and it gives the same
# machine code for SSA-numbered PTX and for PTX with reused registers - but for
# wgmma's accumulators (`wgmma_accumulators`).  This pass exists for two other
# reasons: compact, readable PTX (`%f<40>` rather
# than `%f<4000>`), and a register-pressure figure *before* ptxas runs - the
# peak number of 32-bit registers live at once - that the autotuner uses to
# skip configurations that would spill.
#
# Liveness is the textbook backward dataflow over basic blocks (a label starts
# one; a branch or `ret` ends one).  A register's interval runs from the first
# to the last instruction where it is live or written, so a value that lives
# around a loop's back edge covers the whole loop.  Linear scan then walks the
# intervals by start and gives each the lowest number of its class that is free
# - but a wgmma's accumulators, which take new numbers (`wgmma_accumulators`).
from __future__ import annotations

import heapq
from dataclasses import dataclass

from .emit import Instr, Item, Label, VReg

REG_WIDTH = {"pred": 0, "b16": 1, "b32": 1, "f32": 1, "b64": 2, "f64": 2}  # 32-bit registers


@dataclass
class Allocation:
    counts: dict[str, int]  # registers to declare per class
    peak_pressure: int  # most 32-bit registers live at one instruction


def _blocks(items: list[Item]) -> tuple[list[list[int]], dict[int, list[int]]]:
    """Basic blocks (as lists of instruction positions) and their successors."""
    blocks: list[list[int]] = [[]]
    label_block: dict[str, int] = {}
    for i, item in enumerate(items):
        if isinstance(item, Label):
            if blocks[-1]:
                blocks.append([])
            label_block[item.name] = len(blocks) - 1
        elif isinstance(item, Instr):
            blocks[-1].append(i)
            if item.ends_block:
                blocks.append([])
    succ: dict[int, list[int]] = {}
    for b, positions in enumerate(blocks):
        out = []
        last = items[positions[-1]] if positions else None
        if isinstance(last, Instr) and last.is_branch:
            out.append(label_block[str(last.operands[0])])
            if last.guard is not None and b + 1 < len(blocks):
                out.append(b + 1)
        elif not (isinstance(last, Instr) and last.ends_block) and b + 1 < len(blocks):
            out.append(b + 1)
        succ[b] = out
    return blocks, succ


@dataclass
class Liveness:
    blocks: list[list[int]]  # instruction positions of each basic block
    live_in: list[set[VReg]]
    live_out: list[set[VReg]]


def liveness(items: list[Item]) -> Liveness:
    """Registers live into and out of each basic block (backward dataflow to a fixed point)."""
    blocks, succ = _blocks(items)
    use_def = []
    for positions in blocks:
        uses, defs = set(), set()
        for i in positions:
            ins = items[i]
            uses.update(r for r in ins.uses() if r not in defs)
            defs.update(ins.defs())
        use_def.append((uses, defs))
    live_in = [set() for _ in blocks]
    live_out = [set() for _ in blocks]
    changed = True
    while changed:
        changed = False
        for b in reversed(range(len(blocks))):
            out = set().union(*(live_in[s] for s in succ[b])) if succ[b] else set()
            uses, defs = use_def[b]
            new_in = uses | (out - defs)
            if out != live_out[b] or new_in != live_in[b]:
                live_out[b], live_in[b] = out, new_in
                changed = True
    return Liveness(blocks, live_in, live_out)


def peak_pressure(items: list[Item], live: Liveness) -> int:
    """The most 32-bit registers live at once: at an instruction, what it reads and writes and
    everything live across it (exact, unlike the interval hulls linear scan works with)."""
    peak = 0
    for b, positions in enumerate(live.blocks):
        now = set(live.live_out[b])
        weight = sum(REG_WIDTH[r.cls] for r in now)
        for i in reversed(positions):
            ins = items[i]
            for r in ins.defs() + ins.uses():
                if r not in now:
                    now.add(r)
                    weight += REG_WIDTH[r.cls]
            peak = max(peak, weight)
            if ins.guard is None:
                for r in ins.defs():
                    if r in now and r not in ins.uses():
                        now.discard(r)
                        weight -= REG_WIDTH[r.cls]
    return peak


def live_intervals(items: list[Item], live: Liveness | None = None) -> dict[VReg, tuple[int, int]]:
    """For each register, the first and last instruction position where it is live or written.

    An interval is only the hull of those points, so it is enough to visit each
    block's live-in set at its start, every def and use where it happens, and
    the live-out set at its end.  Blocks come in position order, so the first
    visit of a register gives its start and the last its end.
    """
    live = live or liveness(items)
    start: dict[VReg, int] = {}
    end: dict[VReg, int] = {}

    def visit(regs, i: int) -> None:
        for r in regs:
            if r not in start:
                start[r] = i
            end[r] = i

    for b, positions in enumerate(live.blocks):
        if not positions:
            continue
        visit(live.live_in[b], positions[0])
        for i in positions:
            ins = items[i]
            visit(ins.defs(), i)
            visit(ins.uses(), i)
        visit(live.live_out[b], positions[-1])
    return {r: (start[r], end[r]) for r in start}


def allocate(items: list[Item]) -> Allocation:
    """Number the registers of `items` (sets VReg.number); returns counts and peak pressure.  A wgmma's
    accumulators take numbers no register had before them (`wgmma_accumulators`)."""
    live = liveness(items)
    intervals = live_intervals(items, live)
    order = sorted(intervals.items(), key=lambda kv: (kv[1][0], kv[1][1], kv[0].id))
    fresh = wgmma_accumulators(items)
    free: dict[str, list[int]] = {}
    next_number: dict[str, int] = {}
    active: list[tuple[int, int, VReg]] = []  # heap of (end, id, register)
    for reg, (start, end) in order:
        while active and active[0][0] < start:
            _, _, done = heapq.heappop(active)
            heapq.heappush(free.setdefault(done.cls, []), done.number)
        pool = free.get(reg.cls) if reg not in fresh else None
        if pool:
            reg.number = heapq.heappop(pool)
        else:
            reg.number = next_number.get(reg.cls, 1)
            next_number[reg.cls] = reg.number + 1
        heapq.heappush(active, (end, reg.id, reg))
    counts = {cls: n for cls, n in next_number.items()}
    return Allocation(counts, peak_pressure(items, live))


def wgmma_accumulators(items: list[Item]) -> set[VReg]:
    """The registers wgmma accumulates into.  Where a PTX register was another value before it became a
    wgmma's accumulator, ptxas (13.0) cannot keep the wgmma pipeline and serializes every wgmma of the
    kernel (its warning C7511, "insufficient register resources": attention's backward kernels at 198-255
    registers, which assembled without it when their registers were numbered in order)."""
    return {r for item in items if isinstance(item, Instr) and item.opcode.startswith("wgmma.mma_async")
            for r in item.defs()}


def number_in_order(items: list[Item]) -> dict[str, int]:
    """Plain SSA-style numbering: every virtual register keeps a number of its own."""
    counts: dict[str, int] = {}
    seen = set()
    for item in items:
        if not isinstance(item, Instr):
            continue
        for r in item.defs() + item.uses():
            if id(r) not in seen:
                seen.add(id(r))
                r.number = counts.get(r.cls, 1)
                counts[r.cls] = r.number + 1
    return counts
