# The schedule of a pipelined K loop, as one plain value.
#
# pipeline.py software-pipelines the K loop of a matrix product: the loop's
# operand tiles are copied into a ring of STAGES buffers in shared memory
# ahead of the products that read them.  *How* is a `Schedule`:
#
# * who copies and who multiplies (`Warps`, one per role): every thread of
#   the CTA both copies (cp.async) and multiplies; or, warp-specialised, a
#   producer warpgroup one lane of which copies by TMA, beside consumer
#   warpgroups that multiply, setmaxnreg moving registers from the first to
#   the second;
# * what each waits on (`StageBarrier`): with cp.async, each thread's own
#   copy groups and the CTA's barrier; warp-specialised, two mbarriers per
#   stage - `full` (the producer's lane arrives expecting the stage's bytes,
#   which the copies complete; the consumers wait) and `empty` (a thread of
#   each consumer warpgroup arrives once its products are done with the
#   stage; the producer waits before refilling it);
# * how far ahead the copies run, how many wgmma groups stay in flight into
#   the next iteration, and whether operand fragments are read from the next
#   stage while the products run (`fragments_ahead`: register staging of
#   tf32, a swapped product's B^T);
# * the shared memory past the stages that holds operands loaded once
#   before the loop (`resident_bytes`: attention's Q, copied there once);
# * in which order the CTAs take the output tiles (`TileOrder`): GROUP_M
#   rows of tiles at a time, and whether the CTAs are persistent - as many
#   as run at once, each looping over the tiles `program` ids apart, its
#   producer copying the next tile's stages while its consumers finish the
#   last one;
# * in how many teams the consumers take a persistent CTA's tiles (`teams`):
#   one, all of them on every tile, or two that take the tiles in turn
#   (ping-pong), one team's epilogue running under the other's products.
#
# pipeline.py decides the schedule (`plan_schedule`) and lowers the loop
# from it, so a new schedule is a new value of this type rather than new
# branches there.  `problems` states the rules a schedule must keep (each
# one testable alone), and `text` is what `--dump-ir` and `--dump-schedule`
# print and the compiled kernel keeps (`CompiledKernel.schedules`).
from __future__ import annotations

from dataclasses import dataclass

WARPGROUP = 128  # threads: wgmma, setmaxnreg and the producer work a warpgroup at a time
REGISTER_FILE = 65536  # 32-bit registers of an SM, which one CTA has to itself when it runs alone
MAX_THREADS = 1024  # per CTA


def entry_registers(threads: int) -> int:
    """The registers a thread of a CTA of `threads` starts with (ptxas's cap under `.maxntid`)."""
    return min(REGISTER_FILE // threads // 8 * 8, 255)


@dataclass(frozen=True)
class Warps:
    """The threads of one role: `role` is 'all' (every thread copies and multiplies), 'producer' or
    'consumers'; `registers` the count setmaxnreg sets (None: they keep what the kernel starts with);
    `copiers` how many of them issue the copies (all of them for cp.async, one elected lane for TMA)."""

    role: str
    threads: int
    copiers: int = 0
    registers: int | None = None


@dataclass(frozen=True)
class StageBarrier:
    """An mbarrier per stage: `arrivals` per phase by `arrive`, waited on by `wait`; `transaction` the
    bytes of copies that complete each phase besides the arrivals (TMA's complete_tx)."""

    name: str
    arrivals: int
    arrive: str
    wait: str
    transaction: int = 0


@dataclass(frozen=True)
class TileOrder:
    """The order CTAs take output tiles in: `group_m` rows of tiles at a time (1: the plain order); with
    `persistent`, one CTA per free slot of the GPU, each looping over the tiles its count apart; in
    `cluster`s of CTAs that take neighbouring tiles together (along M: the same column of B)."""

    group_m: int = 1
    persistent: bool = False
    cluster: tuple[int, int] = (1, 1)  # CTAs of a cluster along M and along N (they share B's or A's tiles)

    @property
    def cluster_size(self) -> int:
        return self.cluster[0] * self.cluster[1]


@dataclass(frozen=True)
class Schedule:
    """How a pipelined K loop runs (see the header)."""

    copy: str  # 'cp.async' or 'tma'
    stages: int
    stage_bytes: int
    warps: tuple[Warps, ...]
    barriers: tuple[StageBarrier, ...] = ()  # none: each thread waits for its copies, then the CTA's barrier
    ahead: int = 1  # iterations the copies are requested ahead of the products that read them
    in_flight: int = 0  # wgmma groups left in flight into the next iteration
    fragments_ahead: bool = False  # operand fragments read from the next stage while the products run
    order: TileOrder = TileOrder()
    entry_registers: int = 0  # what a thread starts with (ptxas's cap under .maxntid); 0: not capped
    multicast: str = ""  # 'A' or 'B': the operand the CTAs of a cluster share, each copying a part to all
    epilogue: str = "registers"  # how the result tile leaves: stores from 'registers', or 'tma' bulk stores
    resident_bytes: int = 0  # A operands loaded once before the loop, copied once past the stages (attention's Q)
    teams: int = 1  # consumer teams taking a persistent CTA's tiles in turn (2: ping-pong), each of the same threads

    # ------------------------------------------------------------ roles
    def role(self, name: str) -> Warps | None:
        return next((w for w in self.warps if w.role == name), None)

    @property
    def specialized(self) -> bool:
        """Whether a producer warpgroup copies beside the consumers."""
        return self.role("producer") is not None

    @property
    def computing(self) -> Warps:
        """The warps that run the products (and the rest of the kernel)."""
        return self.role("consumers") or self.role("all")

    @property
    def threads(self) -> int:
        return sum(w.threads for w in self.warps)

    def barrier(self, name: str) -> StageBarrier:
        return next(b for b in self.barriers if b.name == name)

    # ------------------------------------------------------------ rules
    def problems(self) -> list[str]:
        """What makes this schedule one the hardware cannot run, or one that computes something else; empty
        when it is sound."""
        out = []
        if self.copy not in ("cp.async", "tma"):
            out.append(f"copies by '{self.copy}': cp.async or tma")
        if self.stages < 2:
            out.append(f"{self.stages} stage(s): a ring needs 2 at least")
        roles = [w.role for w in self.warps]
        if sorted(roles) not in (["all"], ["consumers", "producer"]):
            out.append(f"roles {roles}: 'all', or 'producer' and 'consumers'")
        if self.threads > MAX_THREADS:
            out.append(f"{self.threads} threads: a CTA has {MAX_THREADS} at most")
        out += self._copy_problems() + self._register_problems() + self._barrier_problems()
        if not 0 <= self.in_flight <= 1:
            out.append(f"{self.in_flight} wgmma groups in flight: 0 or 1")
        if self.fragments_ahead and self.in_flight:
            out.append("fragments read a stage ahead live in the registers a group in flight still reads")
        if self.order.group_m < 1:
            out.append(f"GROUP_M {self.order.group_m}: 1 or more")
        if self.order.persistent and not self.specialized:
            out.append("persistent CTAs need a producer warpgroup that copies across tiles")
        if self.epilogue not in ("registers", "tma") or (self.epilogue == "tma" and not self.order.persistent):
            out.append(f"epilogue '{self.epilogue}': from registers, or by TMA from persistent CTAs")
        return out + self._team_problems() + self._cluster_problems()

    def _team_problems(self) -> list[str]:
        if self.teams == 1:
            return []
        out = [] if self.teams == 2 else [f"{self.teams} consumer teams: 1, or 2 taking the tiles in turn"]
        if not self.order.persistent or self.order.cluster_size > 1:
            out.append("consumer teams take the tiles of persistent CTAs, not in clusters")
        if self.fragments_ahead:
            out.append("consumer teams read no fragments a stage ahead")
        consumers = self.role("consumers")
        if consumers is None or consumers.threads % (self.teams * WARPGROUP):
            out.append(f"{self.teams} teams of consumers: whole warpgroups each")
        return out

    def _cluster_problems(self) -> list[str]:
        cm, cn = self.order.cluster
        if (cm, cn) == (1, 1):
            return [f"operand {self.multicast} multicast without a cluster"] if self.multicast else []
        out = []
        if self.order.cluster_size != 2 or min(cm, cn) != 1:
            out.append(f"a cluster of {cm} x {cn} CTAs: 2 x 1 or 1 x 2")
        if not self.order.persistent:
            out.append("clusters are of persistent CTAs")
        if self.multicast != ("B" if cm > 1 else "A"):
            out.append(f"a cluster along {'M' if cm > 1 else 'N'} shares {'B' if cm > 1 else 'A'}, "
                       f"not '{self.multicast}'")
        return out

    def _copy_problems(self) -> list[str]:
        out = []
        if self.copy == "tma" and not self.specialized:
            out.append("TMA copies are issued by a producer warpgroup")
        if self.copy == "cp.async":
            if self.specialized:
                out.append("cp.async copies are issued by every thread, not a producer")
            # the stage refilled at an iteration is the one read `stages - ahead` iterations before,
            # which no product (nor a group in flight) may still read
            if not 1 <= self.ahead <= self.stages - 1 - self.in_flight:
                out.append(f"copies {self.ahead} iterations ahead with {self.stages} stages and "
                           f"{self.in_flight} group(s) in flight: a stage would be refilled while it is read")
        if self.fragments_ahead and self.stages < 3:
            out.append("fragments read a stage ahead need 3 stages: the next stage is the one refilled")
        for w in self.warps:
            if w.copiers > w.threads:
                out.append(f"{w.copiers} of the {w.role}'s {w.threads} threads copy")
        return out

    def _register_problems(self) -> list[str]:
        out = []
        for w in self.warps:
            if self.specialized and w.threads % WARPGROUP:
                out.append(f"the {w.role} have {w.threads} threads: whole warpgroups of {WARPGROUP}")
            if w.registers is not None and (not 24 <= w.registers <= 256 or w.registers % 8):
                out.append(f"setmaxnreg {w.registers} for the {w.role}: a multiple of 8 from 24 to 256")
        moved = [w for w in self.warps if w.registers is not None]
        if moved:
            if not self.entry_registers:
                out.append("setmaxnreg without a register cap at entry: ptxas ignores it")
            total = sum(w.threads * w.registers for w in moved) + \
                sum(w.threads * self.entry_registers for w in self.warps if w.registers is None)
            if total > REGISTER_FILE:
                out.append(f"the roles' registers add up to {total}: the register file holds {REGISTER_FILE}")
        return out

    def _barrier_problems(self) -> list[str]:
        if not self.specialized:
            return [f"mbarrier '{b.name}' without a producer" for b in self.barriers]
        producer, consumers = self.role("producer"), self.role("consumers")
        names = sorted(b.name for b in self.barriers)
        if names != ["empty", "full"]:
            return [f"mbarriers {names}: a producer and its consumers need 'full' and 'empty'"]
        out = []
        full, empty = self.barrier("full"), self.barrier("empty")
        if (full.arrive, full.wait, empty.arrive, empty.wait) != ("producer", "consumers", "consumers", "producer"):
            out.append("the producer arrives on 'full' and waits on 'empty'; the consumers the other way round")
        if full.arrivals != producer.copiers:
            out.append(f"'full' expects {full.arrivals} arrivals, but {producer.copiers} producer thread(s) copy")
        if self.copy == "tma" and full.transaction != self.stage_bytes:
            out.append(f"'full' expects {full.transaction} bytes of a stage of {self.stage_bytes}")
        # a cluster's consumers all read a stage; of teams, one
        sharing = consumers.threads // self.teams // WARPGROUP * self.order.cluster_size
        if empty.arrivals != sharing:
            out.append(f"'empty' expects {empty.arrivals} arrivals from {sharing} consumer warpgroups"
                       + (" of the cluster" if self.order.cluster_size > 1 else "")
                       + (" of a team" if self.teams > 1 else ""))
        return out

    # ------------------------------------------------------------ showing
    def text(self, where: str = "") -> str:
        """The schedule as --dump-schedule prints it."""
        lines = [f"schedule of the K loop{' at ' + where if where else ''}",
                 f"  copy      {self.copy}, {self.stages} stages of {self.stage_bytes} bytes"
                 + (f", requested {self.ahead} iteration(s) ahead" if not self.specialized else "")]
        for w in self.warps:
            regs = f", setmaxnreg {w.registers}" if w.registers is not None else \
                (f", {self.entry_registers} registers" if self.entry_registers else "")
            copies = "" if not w.copiers else \
                (" (all copy)" if w.copiers == w.threads else f" ({w.copiers} of them copy)")
            teams = f" in {self.teams} teams taking the tiles in turn (ping-pong)" \
                if w.role == "consumers" and self.teams > 1 else ""
            lines.append(f"  warps     {w.role}: {w.threads} threads{teams}{copies}{regs}")
        for b in self.barriers:
            tx = f" + {b.transaction} bytes" if b.transaction else ""
            lines.append(f"  mbarrier  {b.name}[stage]: {b.arrivals} arrival(s){tx} by the {b.arrive}, "
                         f"waited on by the {b.wait}")
        if not self.barriers:
            lines.append("  wait      each thread its cp.async groups, then the CTA's barrier")
        lines.append(f"  products  {self.in_flight} wgmma group(s) in flight"
                     + (", fragments read a stage ahead" if self.fragments_ahead else ""))
        if self.resident_bytes:
            lines.append(f"  resident  {self.resident_bytes} bytes past the stages: A operands loaded before the loop, "
                         "copied there once, first")
        if self.epilogue == "tma":
            lines.append("  epilogue  the tile through shared memory, out by TMA bulk stores under the next tile")
        order = f"groups of {self.order.group_m} rows of tiles" if self.order.group_m > 1 else "plain order"
        cm, cn = self.order.cluster
        lines.append(f"  tiles     {order}" + (", persistent CTAs" if self.order.persistent else "")
                     + (f", clusters of {cm} x {cn} CTAs, {self.multicast} multicast" if cm * cn > 1 else ""))
        return "\n".join(lines)
