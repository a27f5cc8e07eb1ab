# Instruction decoding, from the syntax tree of one kernel to executable ops.
#
# Each instruction is decoded once, when the module is loaded, into an `Op`:
# its kind (plain, branch, exit, barrier), a `run(m, idx)` closure with its
# operand accessors already resolved (register slots, constants, conversions
# between the register's and the instruction's type), its guard predicate and
# its branch target.  The scheduler then never looks at text again.
#
# Opcodes are table driven: `OPCODES` maps a base opcode ("add", "ld",
# "cp.async.wait_group") to a builder, registered with `@opcode`.  A builder
# consumes the modifiers it understands from a `Mods`; any modifier left over
# is reported as unsupported, so nothing is silently ignored.
#
# Handlers receive `m`, the running batch of threads (see machine.py), and
# `idx`, the thread indices of the active lanes, or None when every thread of
# the batch is active (the common converged case, which avoids gathers).
#
# The decoder also notes the registers each instruction reads and writes.
# Builders of asynchronous instructions (wgmma) claim the registers they use
# and say which they define; every other instruction touching one of those
# registers is wrapped so that the machine can wait for the one in flight
# that defines a register it reads, as ptxas does, or report a write to one
# in flight (see async_state.AsyncMma).
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from ...errors import Loc
from . import syntax as syn
from .cluster import CLUSTER_REGISTERS, PREDICATE_REGISTERS, check_directives
from .errors import EmulatorError, PtxSyntaxError, UnsupportedPtx
from .memory import LOCAL_APERTURE, PARAM_APERTURE, SHARED_APERTURE
from .numerics import BF16, round_to_format
from .ptxtypes import SINT, TYPES, UNMODELLED_TYPES, PtxType

# Kinds of instructions: WAIT is a blocking test (mbarrier.try_wait): its handler
# returns which lanes may go on; the others sleep until an mbarrier phase completes.
PLAIN, BRANCH, EXIT, BARRIER, WAIT = range(5)
MASK64 = (1 << 64) - 1
CARRY_FLAG = "CC.CF"  # the condition code's carry flag (Decoder.carry_flag)


class Semantics(NamedTuple):
    """What a builder returns: the kind of instruction, its handler and branch label.

    A branch's handler, if any, is a check the scheduler runs with the threads
    that take it and those that do not when the guard splits them (bra.uni).
    """

    kind: int
    run: Callable | None
    label: str | None = None


def plain(run: Callable) -> Semantics:
    return Semantics(PLAIN, run)


@dataclass(frozen=True)
class Fusable:
    """How the scheduler may run nearby instructions of one kind as one batch (see
    machine.fusion_table): `inputs(m, idx)` reads an instruction's operands, `compute(m, inputs,
    links)` works on the inputs of several instructions of the same `key` at once and returns their
    results in order, `outputs(m, idx, result)` writes one instruction's result (None: nothing, a
    later one of the batch writes its registers).  `chain`: the register slots an instruction reads
    as an accumulator and writes back (empty where it has none, or where its result must be rounded
    between steps): an instruction whose accumulator is the result of an earlier one of the batch
    may join that one's chain, `links[i]` being the index of that earlier one (None: the start of a
    chain, whose accumulator `inputs` read).  An instruction's handler carries it as its `fusable`
    attribute; run alone, the handler does the three steps itself."""

    key: tuple
    inputs: Callable
    compute: Callable
    outputs: Callable
    chain: frozenset = frozenset()


def fusable(part: Fusable) -> Semantics:
    """A plain instruction that the scheduler may run together with its neighbours of the same kind."""
    def run(m, idx):
        part.outputs(m, idx, part.compute(m, [part.inputs(m, idx)], [None])[0])
    run.fusable = part
    return Semantics(PLAIN, run)


OPCODES: dict[str, Callable[["Decoder", syn.Instruction, "Mods"], Semantics]] = {}


def opcode(*names: str):
    """Register a builder for the given base opcodes."""
    def register(builder):
        for name in names:
            OPCODES[name] = builder
        return builder
    return register


def lanes(m, idx) -> int:
    """Number of active lanes."""
    return m.n if idx is None else len(idx)


class Op:
    """One decoded instruction."""

    __slots__ = ("index", "line", "text", "loc", "kind", "run", "guard", "negated", "target", "reads", "writes")

    def __init__(self, index, line, text, loc, kind, run, guard=None, negated=False, reads=frozenset(),
                 writes=frozenset()):
        self.index = index
        self.line = line
        self.text = text
        self.loc = loc
        self.kind = kind
        self.run = run
        self.guard = guard
        self.negated = negated
        self.target = -1
        self.reads = reads  # register slots it reads
        self.writes = writes  # register slots it writes


SPECIAL_REGISTERS = frozenset(
    [f"%{base}.{axis}" for base in ("tid", "ntid", "ctaid", "nctaid") for axis in "xyz"]
    + ["%laneid", "%warpid", "%nwarpid", "%dynamic_smem_size", "%total_smem_size"]
    + [f"%lanemask_{k}" for k in ("eq", "lt", "le", "gt", "ge")]) | CLUSTER_REGISTERS


class Mods:
    """The dot-separated modifiers of one instruction, consumed by its builder."""

    def __init__(self, base: str, words: list[str], decoder: "Decoder"):
        self.base = base
        self.words = list(words)
        self.decoder = decoder

    def take(self, *choices: str) -> str | None:
        """Remove and return the first of `choices` present, or None."""
        for choice in choices:
            if choice in self.words:
                self.words.remove(choice)
                return choice
        return None

    def flag(self, name: str) -> bool:
        return self.take(name) is not None

    def drop(self, ignorable: Callable[[str], bool]) -> None:
        """Accept and forget modifiers that do not change the result (cache hints, scopes)."""
        self.words = [w for w in self.words if not ignorable(w)]

    def types(self, count: int) -> list[PtxType]:
        found = [w for w in self.words if w in TYPES]
        if len(found) != count:
            self.refuse_unmodelled_types()
            raise self.decoder.error(f"expected {count} type modifier(s), found {len(found)}",
                                     PtxSyntaxError)
        for w in found:
            self.words.remove(w)
        return [TYPES[w] for w in found]

    def type(self) -> PtxType:
        return self.types(1)[0]

    def refuse_unmodelled_types(self) -> None:
        """Raise UnsupportedPtx if a modifier is a PTX type the emulator does not model (valid PTX
        that the emulator cannot run, rather than malformed PTX)."""
        unmodelled = [w for w in self.words if w in UNMODELLED_TYPES]
        if unmodelled:
            raise self.decoder.error(f"{self.base} of .{unmodelled[0]} is not supported")

    def finish(self) -> None:
        if self.words:
            raise self.decoder.error(
                f"unsupported modifier{'s' if len(self.words) > 1 else ''} "
                f"{' '.join('.' + w for w in self.words)} on {self.base}")


@dataclass
class SharedVariable:
    name: str
    offset: int
    size: int | None  # None: dynamic (extern), sized at launch


@dataclass
class Program:
    """A decoded kernel: instructions plus everything a launch needs to set up."""

    name: str
    ptx_name: str
    ops: list[Op]
    reg_dtypes: list[np.dtype]
    specials: set[str]
    params: list[tuple[syn.Param, int]]
    param_size: int
    shared_vars: list[SharedVariable]
    static_shared: int
    dynamic_shared_offset: int | None
    local_size: int
    directives: dict[str, tuple[int, ...]]
    files: list[str] = field(default_factory=list)

    def position(self, pc: int) -> str:
        return f"{self.ptx_name}:{self.ops[pc].line}"

    def shared_size(self, dynamic: int) -> int:
        """Shared memory per CTA, in bytes, with `dynamic` bytes of dynamic shared memory."""
        if not dynamic:
            return self.static_shared
        base = self.dynamic_shared_offset if self.dynamic_shared_offset is not None else self.static_shared
        return base + dynamic


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


class Decoder:
    """Decodes one `.entry` of a module into a `Program`."""

    def __init__(self, module: syn.PtxModuleAst, entry: syn.Entry, ptx_name: str, ptx_lines: list[str],
                 module_data: dict[str, tuple[str, int]] | None = None):
        self.module = module
        self.module_data = module_data or {}  # .global/.const variable -> (space, address)
        self.entry = entry
        self.ptx_name = ptx_name
        self.ptx_lines = ptx_lines
        self.reg_slots: dict[tuple[str, int], int] = {}
        self.reg_types: list[PtxType] = []
        self.specials: set[str] = set()
        self.labels: dict[str, int] = {}
        self.current: syn.Instruction | None = None
        self.index = -1  # the instruction being decoded (its pc)
        self.reads: set[int] = set()  # register slots the instruction being decoded reads
        self.writes: set[int] = set()  # ... and writes
        self.async_registers: set[int] = set()  # registers that asynchronous instructions use
        self.async_users: set[int] = set()  # the pcs of those instructions
        self._layout_variables()
        self._layout_params()

    # -- errors
    def text_of(self, line: int) -> str:
        """The PTX source line, blanks collapsed, for messages."""
        return " ".join(self.ptx_lines[line - 1].split()) if 0 < line <= len(self.ptx_lines) else ""

    def source_loc(self, sl: syn.SourceLoc | None) -> Loc | None:
        if sl is None or sl.line == 0:
            return None
        return Loc(self.module.files.get(sl.file, f"<file {sl.file}>"), sl.line, sl.col)

    def error(self, message: str, kind: type[EmulatorError] = UnsupportedPtx,
              line: int | None = None) -> EmulatorError:
        ins = self.current
        line = line if line is not None else (ins.line if ins else self.entry.line)
        text = self.text_of(line)
        where = f" (in `{text}`)" if text else ""
        return kind(f"{self.ptx_name}:{line}: {message}{where}",
                    loc=self.source_loc(ins.loc) if ins else None,
                    ptx_file=self.ptx_name, ptx_line=line)

    # -- declarations
    def _layout_variables(self) -> None:
        self.shared_vars: dict[str, SharedVariable] = {}
        self.local_vars: dict[str, int] = {}
        offset = 0
        local = 0
        externs = []
        used = self._referenced_names()
        module_vars = [v for v in self.module.variables if v.name in used and v.space == "shared"]
        for var in module_vars + self.entry.variables:
            if var.space in ("local", "param"):  # a body's .param variables live in local memory
                local = _align(local, var.align)
                self.local_vars[var.name] = local
                local += var.size
            elif var.size is None:
                externs.append(var)
            else:
                offset = _align(offset, var.align)
                self.shared_vars[var.name] = SharedVariable(var.name, offset, var.size)
                offset += var.size
        self.static_shared = offset
        self.local_size = local
        self.dynamic_shared_offset = None
        if externs:
            self.dynamic_shared_offset = _align(offset, max(16, *(v.align for v in externs)))
            for var in externs:
                self.shared_vars[var.name] = SharedVariable(var.name, self.dynamic_shared_offset, None)

    def _referenced_names(self) -> set[str]:
        """Every name the kernel's instructions mention (module-level variables
        belong to the kernels that use them)."""
        names: set[str] = set()

        def visit(operand):
            if isinstance(operand, syn.Name):
                names.add(operand.text)
            elif isinstance(operand, (syn.Negated, syn.SymbolOffset)):
                names.add(operand.name.text)
            elif isinstance(operand, syn.Address) and operand.base is not None:
                names.add(operand.base.text)
            elif isinstance(operand, (syn.Vector, syn.ParenList)):
                for item in operand.items:
                    visit(item)
        for st in self.entry.statements:
            if isinstance(st, syn.Instruction):
                for operand in st.operands:
                    visit(operand)
        return names

    def _layout_params(self) -> None:
        self.params: dict[str, tuple[syn.Param, int]] = {}
        offset = 0
        for p in self.entry.params:
            offset = _align(offset, p.align)
            self.params[p.name] = (p, offset)
            offset += p.size
        self.param_size = offset

    def declare(self, decl: syn.RegDecl) -> None:
        ptype = TYPES[decl.type]
        for name in decl.names:
            key = (name, decl.scope)
            if key in self.reg_slots:
                raise self.error(f"register {name} declared twice", PtxSyntaxError, decl.line)
            self.reg_slots[key] = len(self.reg_types)
            self.reg_types.append(ptype)

    def carry_flag(self) -> int:
        """The slot of the carry flag CC.CF, a predicate of each thread that the extended-precision
        instructions (add.cc, addc, sub.cc, subc, mad.cc, madc) read and write; allocated at its
        first use (its name is no PTX register name)."""
        key = (CARRY_FLAG, 0)
        if key not in self.reg_slots:
            self.reg_slots[key] = len(self.reg_types)
            self.reg_types.append(TYPES["pred"])
        slot = self.reg_slots[key]
        self.reads.add(slot)
        self.writes.add(slot)
        return slot

    def lookup(self, name: str) -> int | None:
        """The slot of register `name` as seen from the current instruction's scope."""
        scope = self.current.scope if self.current else 0
        while True:
            slot = self.reg_slots.get((name, scope))
            if slot is not None or scope == 0:
                return slot
            scope = self.entry.scopes[scope]

    def register(self, name: syn.Name) -> tuple[int, PtxType]:
        slot = self.lookup(name.text)
        if slot is None:
            raise self.error(f"{name.text} is not a declared register", PtxSyntaxError)
        return slot, self.reg_types[slot]

    def variable(self, name: str) -> tuple[str, int] | None:
        """(state space, address) of a shared, local, global or const variable, or of a
        kernel parameter (its offset in the parameter buffer)."""
        if name in self.shared_vars:
            return "shared", self.shared_vars[name].offset
        if name in self.local_vars:
            return "local", self.local_vars[name]
        if name in self.params:
            return "param", self.params[name][1]
        return self.module_data.get(name)

    def claim_async_registers(self, slots) -> None:
        """The instruction being decoded is asynchronous and uses these registers (`async_mma.issue`
        says which of them it defines)."""
        self.async_registers.update(slots)
        self.async_users.add(self.index)

    def param(self, name: str) -> tuple[syn.Param, int]:
        if name not in self.params:
            raise self.error(f"{name} is not a parameter of {self.entry.name}", PtxSyntaxError)
        return self.params[name]

    def label(self, name: str) -> int:
        if name not in self.labels:
            raise self.error(f"undefined label {name}", PtxSyntaxError)
        return self.labels[name]

    # -- decoding
    def decode(self) -> Program:
        problem = check_directives(self.entry.directives)
        if problem is not None:
            raise self.error(problem, PtxSyntaxError, self.entry.line)
        instructions = []
        for st in self.entry.statements:
            if isinstance(st, syn.RegDecl):
                self.declare(st)
            elif isinstance(st, syn.Label):
                if st.name in self.labels:
                    raise self.error(f"label {st.name} defined twice", PtxSyntaxError, st.line)
                self.labels[st.name] = len(instructions)
            else:
                instructions.append(st)
        ops = []
        labels = []
        for index, ins in enumerate(instructions):
            self.current, self.index = ins, index
            self.reads, self.writes = set(), set()
            base, words = self._split_opcode(ins.opcode)
            mods = Mods(base, words, self)
            sem = OPCODES[base](self, ins, mods)
            mods.finish()
            op = Op(index, ins.line, self.text_of(ins.line), self.source_loc(ins.loc), sem.kind, sem.run,
                    reads=frozenset(self.reads), writes=frozenset(self.writes))
            if ins.guard is not None:
                slot, ptype = self.register(ins.guard)
                if ptype.kind != "pred":
                    raise self.error(f"guard {ins.guard.text} is not a predicate", PtxSyntaxError)
                op.guard, op.negated = slot, ins.guard_negated
            ops.append(op)
            labels.append(sem.label)
        for op, label in zip(ops, labels):
            if label is not None:
                self.current = instructions[op.index]
                op.target = self.label(label)
        self.current = None
        self._watch_async_registers(ops)
        end_line = instructions[-1].line if instructions else self.entry.line
        ops.append(Op(len(ops), end_line, "(end of kernel)", None, EXIT, None))
        return Program(
            name=self.entry.name, ptx_name=self.ptx_name, ops=ops,
            reg_dtypes=[t.dtype for t in self.reg_types], specials=self.specials,
            params=list(self.params.values()), param_size=self.param_size,
            shared_vars=sorted(self.shared_vars.values(), key=lambda v: v.offset),
            static_shared=self.static_shared, dynamic_shared_offset=self.dynamic_shared_offset,
            local_size=self.local_size, directives=dict(self.entry.directives),
            files=list(self.module.files.values()))

    def _watch_async_registers(self, ops: list[Op]) -> None:
        """Wrap every instruction that touches a register of an asynchronous instruction."""
        for op in ops:
            reads, writes = op.reads & self.async_registers, op.writes & self.async_registers
            if op.index in self.async_users or not (reads or writes) or op.run is None:
                continue
            op.run = _watched(op.run, frozenset(reads), frozenset(writes), op.index)

    def _split_opcode(self, text: str) -> tuple[str, list[str]]:
        parts = text.split(".")
        for k in range(len(parts), 0, -1):
            base = ".".join(parts[:k])
            if base in OPCODES:
                return base, parts[k:]
        raise self.error(f"unknown instruction {text}")

    def operands(self, ins: syn.Instruction, *counts: int) -> list:
        if len(ins.operands) not in counts:
            want = " or ".join(str(c) for c in counts)
            raise self.error(f"expected {want} operands, found {len(ins.operands)}", PtxSyntaxError)
        return ins.operands

    # -- operand accessors
    def reader(self, operand, t: PtxType) -> Callable:
        """A function (m, idx) -> the operand's value as type `t` for the active lanes."""
        if isinstance(operand, syn.Imm):
            const = self.constant(operand, t)
            return lambda m, idx: const
        if isinstance(operand, syn.Negated):
            if t.kind != "pred":
                raise self.error("only predicates can be negated", PtxSyntaxError)
            inner = self.reader(operand.name, t)
            return lambda m, idx: ~inner(m, idx)
        if isinstance(operand, syn.SymbolOffset):
            return self._address_constant(operand.name.text, operand.offset, t)
        if not isinstance(operand, syn.Name):
            raise self.error("unexpected operand form", PtxSyntaxError)
        name = operand.text
        slot = self.lookup(name)
        if slot is not None:
            return self._register_reader(slot, self.reg_types[slot], t)
        if name in PREDICATE_REGISTERS:
            if t.kind != "pred":
                raise self.error(f"{name} is a predicate register", PtxSyntaxError)
            self.specials.add(name)
            return lambda m, idx: m.special[name] if idx is None else m.special[name][idx]
        if name in SPECIAL_REGISTERS:
            if t.bits > 32 or t.kind == "pred" or t.is_float:
                raise self.error(f"{name} is a 32-bit integer register", PtxSyntaxError)
            self.specials.add(name)
            conv = _narrowing(TYPES["u32"], t)
            if conv is None:
                return lambda m, idx: m.special[name] if idx is None else m.special[name][idx]
            return lambda m, idx: conv(m.special[name] if idx is None else m.special[name][idx])
        if self.variable(name) is not None:
            return self._address_constant(name, 0, t)
        raise self.error(f"{name} is not a declared register or variable", PtxSyntaxError)

    def _address_constant(self, name: str, offset: int, t: PtxType) -> Callable:
        found = self.variable(name)
        if found is None:
            raise self.error(f"{name} is not a variable", PtxSyntaxError)
        if t.is_float or t.kind == "pred":
            raise self.error(f"the address of {name} needs an integer type", PtxSyntaxError)
        const = np.array((found[1] + offset) & ((1 << t.bits) - 1), t.unsigned).view(t.dtype)[()]
        if found[0] != "shared":
            return lambda m, idx: const
        return lambda m, idx: _with_rank_bits(m, idx, const)

    def _register_reader(self, slot: int, rt: PtxType, t: PtxType) -> Callable:
        self._check_register_type(rt, t)
        self.reads.add(slot)
        conv = _narrowing(rt, t)
        if conv is None:
            return lambda m, idx: m.regs[slot] if idx is None else m.regs[slot][idx]
        return lambda m, idx: conv(m.regs[slot] if idx is None else m.regs[slot][idx])

    def _check_register_type(self, rt: PtxType, t: PtxType) -> None:
        if (rt.kind == "pred") != (t.kind == "pred"):
            raise self.error(f"a .{rt.name} register used as .{t.name}", PtxSyntaxError)
        if rt.bits < t.bits:
            raise self.error(f"a .{rt.name} register is too narrow for .{t.name}", PtxSyntaxError)

    def writer(self, operand, t: PtxType) -> Callable:
        """A function (m, idx, value) storing a value of type `t` into the operand register."""
        if isinstance(operand, syn.Name) and operand.text == "_":
            return lambda m, idx, value: None
        if not isinstance(operand, syn.Name):
            raise self.error("a destination must be a register", PtxSyntaxError)
        slot, rt = self.register(operand)
        self._check_register_type(rt, t)
        self.writes.add(slot)
        conv = _widening(t, rt)
        want = t.dtype

        def write(m, idx, value):
            if getattr(value, "dtype", None) != want:
                value = np.asarray(value).astype(want)
            if conv is not None:
                value = conv(value)
            if idx is None:
                np.copyto(m.regs[slot], value, casting="unsafe")
            else:
                m.regs[slot][idx] = value
        return write

    def constant(self, imm: syn.Imm, t: PtxType):
        """A literal as a NumPy scalar of type `t`."""
        try:
            return literal(imm, t)
        except ValueError as problem:
            raise self.error(str(problem), PtxSyntaxError) from None

    def address(self, operand, space: str) -> Callable:
        """A function (m, idx) -> uint64 addresses of a `[...]` operand in `space`."""
        if not isinstance(operand, syn.Address):
            raise self.error("expected a memory operand [...]", PtxSyntaxError)
        if operand.coords:
            raise self.error("a coordinate list [tensor-map, {...}] belongs to cp.async.bulk.tensor",
                             PtxSyntaxError)
        offset = np.uint64(operand.offset & MASK64)
        if operand.base is None:
            if space != "local":
                raise self.error("immediate addresses are allowed only for .local", PtxSyntaxError)
            return lambda m, idx: np.full(lanes(m, idx), offset, np.uint64)
        name = operand.base.text
        slot = self.lookup(name)
        if slot is not None:
            rt = self.reg_types[slot]
            if rt.kind == "pred" or rt.is_float or rt.bits < 32:
                raise self.error(f"{name} cannot hold an address", PtxSyntaxError)
            if rt.bits == 32:  # a 32-bit address: register + offset wraps at 32 bits
                r32 = self._register_reader(slot, rt, TYPES["u32"])
                if not operand.offset:
                    return lambda m, idx: r32(m, idx).astype(np.uint64)
                offset32 = np.uint32(operand.offset & 0xFFFFFFFF)
                return lambda m, idx: (r32(m, idx) + offset32).astype(np.uint64)
            r64 = self._register_reader(slot, rt, TYPES["u64"])
            return lambda m, idx: r64(m, idx) + offset
        found = self.variable(name)
        if found is None:
            raise self.error(f"{name} is not a register or a variable", PtxSyntaxError)
        var_space, var_address = found
        if space == "generic":
            var_address += {"shared": SHARED_APERTURE, "local": LOCAL_APERTURE,
                            "param": PARAM_APERTURE}.get(var_space, 0)
        elif space != var_space and not (space == "shared::cluster" and var_space == "shared"):
            raise self.error(f"{name} is a .{var_space} variable, used with .{space}", PtxSyntaxError)
        const = np.uint64((var_address + operand.offset) & MASK64)
        if var_space == "shared":
            return lambda m, idx: np.broadcast_to(_with_rank_bits(m, idx, const), (lanes(m, idx),))
        return lambda m, idx: np.full(lanes(m, idx), const, np.uint64)


def _with_rank_bits(m, idx, address):
    """The address of a shared variable in each lane's CTA: `address` (a NumPy scalar: the variable's offset,
    or that in the shared aperture) with the CTA's cluster rank above it where the launch has clusters of
    several CTAs (cluster.rank_bits), as the GPU gives it; `address` itself elsewhere."""
    bits = m.shared.rank_bits
    if bits is None:
        return address
    return ((bits if idx is None else bits[idx]) + np.uint64(address)).astype(address.dtype)


def _watched(run: Callable, reads: frozenset, writes: frozenset, pc: int) -> Callable:
    """`run`, after the asynchronous instructions in flight that use the registers it `reads` or
    `writes` are waited for or reported (async_state.AsyncMma.touched)."""
    def checked(m, idx):
        m.async_mma.touched(m, idx, reads, writes, pc)
        return run(m, idx)
    checked.watched = True
    return checked


def literal(imm: syn.Imm, t: PtxType):
    """A literal as a NumPy scalar of type `t` (ValueError if it cannot be one)."""
    if t.kind == "pred":
        if imm.kind != "int":
            raise ValueError("a predicate literal must be an integer")
        return np.bool_(imm.value != 0)
    if imm.kind == "int":
        if t.is_float:
            return _float_constant(float(imm.value), t)
        return np.array(imm.value & ((1 << t.bits) - 1), t.unsigned).view(t.dtype)[()]
    if imm.kind == "float":
        if not t.is_float:
            raise ValueError(f"a floating-point literal used as .{t.name}")
        return _float_constant(imm.value, t)
    width = 32 if imm.kind == "f32bits" else 64
    if not t.is_float:
        if t.bits != width:
            raise ValueError(f"a {width}-bit float literal used as .{t.name}")
        return np.array(imm.value, t.unsigned).view(t.dtype)[()]
    value = np.array(imm.value, f"u{width // 8}").view(f"f{width // 8}")[()]
    return _float_constant(float(value), t)


def _float_constant(value: float, t: PtxType):
    if t.kind == "bf":
        bits = round_to_format(np.array([value]), None, BF16, "rn").astype(np.float32).view(np.uint32)
        return np.uint16(int(bits[0]) >> 16)
    return t.dtype.type(value)


def _narrowing(rt: PtxType, t: PtxType):
    """Conversion reading a register of type rt as the (same or narrower) type t, or None."""
    if rt.dtype == t.dtype:
        return None
    if rt.bits == t.bits:
        return lambda v: v.view(t.dtype)
    raw, narrow = rt.unsigned, t.unsigned
    return lambda v: v.view(raw).astype(narrow).view(t.dtype)


def _widening(t: PtxType, rt: PtxType):
    """Conversion storing a value of type t into a register of the (same or wider) type rt:
    signed integers are sign-extended, everything else zero-extended."""
    if rt.dtype == t.dtype:
        return None
    if rt.bits == t.bits:
        return lambda v: v.view(rt.dtype)
    if t.is_signed:
        return lambda v: v.astype(SINT[rt.bits]).view(rt.dtype)
    return lambda v: v.view(t.unsigned).astype(rt.unsigned).view(rt.dtype)
