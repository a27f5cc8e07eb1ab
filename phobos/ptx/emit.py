# PTX text: the instruction model and the one place where PTX is formatted.
#
# Instruction selection produces a list of `Instr`, `Label` and `SourceLine`
# items over virtual registers; register allocation renumbers the registers;
# `emit_module` writes the module: header, `.file`, the entry with its
# parameters and performance directives, `.reg` declarations per class, the
# body with each Phobos source line as a comment (and a `.loc` for profilers
# and debuggers) before the instructions it produced.
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..constants import HALF_BITS
from ..errors import Loc, SourceFile
from ..types import DType

# Register classes: PTX declaration type and name prefix (the LLVM NVPTX convention).
REG_CLASSES = {
    "pred": (".pred", "%p"),
    "b16": (".b16", "%rs"),
    "b32": (".b32", "%r"),
    "b64": (".b64", "%rd"),
    "f32": (".f32", "%f"),
    "f64": (".f64", "%fd"),
}
CLASS_OF_DTYPE = {
    DType.BOOL: "pred", DType.I8: "b32", DType.I16: "b32", DType.I32: "b32", DType.U32: "b32",
    DType.I64: "b64", DType.U64: "b64", DType.F16: "b16", DType.BF16: "b16", DType.F32: "f32", DType.F64: "f64",
    DType.F8E4M3: "b16", DType.F8E5M2: "b16",  # an 8-bit float's code in the low byte (cvt's e4m3x2 is .b16)
}
SMEM_SYMBOL = "phobos_smem"
PTX_VERSION = "8.0"
FP8_PTX_VERSION = "8.4"  # mma.sync of e4m3/e5m2 needs PTX ISA 8.4, cvt of them on sm_89 8.1


@dataclass(eq=False)
class VReg:
    cls: str
    id: int
    number: int | None = None  # set by register allocation

    def __str__(self) -> str:
        n = self.number if self.number is not None else self.id
        return f"{REG_CLASSES[self.cls][1]}{n}"


@dataclass(frozen=True)
class Imm:
    value: int | float | bool
    dtype: DType

    def __str__(self) -> str:
        if self.dtype is DType.F32:
            return "0f%08X" % struct.unpack("<I", struct.pack("<f", self.value))[0]
        if self.dtype is DType.F64:
            return "0d%016X" % struct.unpack("<Q", struct.pack("<d", self.value))[0]
        if self.dtype is DType.BOOL:
            return "1" if self.value else "0"
        if self.dtype in HALF_BITS:  # a 16-bit float constant: its bits (mov.b16, a red/atom operand)
            return "0x%04X" % int(HALF_BITS[self.dtype](self.value))
        return str(int(self.value))


@dataclass(frozen=True)
class Sym:
    """A name used as an operand: a special register, a parameter, the shared buffer, a label."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Addr:
    base: object  # VReg or Sym
    offset: int = 0

    def __str__(self) -> str:
        if self.offset:
            return f"[{self.base}+{self.offset}]" if self.offset > 0 else f"[{self.base}{self.offset}]"
        return f"[{self.base}]"


@dataclass(frozen=True)
class Vec:
    regs: tuple

    def __str__(self) -> str:
        return "{" + ", ".join(map(str, self.regs)) + "}"


@dataclass(frozen=True)
class MapAddr:
    """A tensor map and a box's coordinates in it, innermost first: `[map, {c0, c1}]` (cp.async.bulk.tensor)."""

    map: object  # VReg
    coords: Vec

    def __str__(self) -> str:
        return f"[{self.map}, {self.coords}]"


@dataclass(eq=False)
class Instr:
    """One PTX instruction: `[@guard] opcode operands;` - the first `ndefs` operands are written."""

    opcode: str
    operands: list
    ndefs: int = 0
    guard: VReg | None = None
    guard_negated: bool = False
    tied: bool = False  # the registers written are read too (wgmma's accumulators)
    holds: tuple = ()  # registers live until here though not printed (A fragments an async wgmma reads)
    _defs: list | None = field(default=None, repr=False)  # computed once: operands do not change
    _uses: list | None = field(default=None, repr=False)

    def defs(self) -> list[VReg]:
        if self._defs is None:
            self._defs = _regs(self.operands[:self.ndefs])
        return self._defs

    def uses(self) -> list[VReg]:
        if self._uses is None:
            regs = _regs(self.operands[self.ndefs:]) + list(self.holds)
            if self.guard is not None:
                regs.append(self.guard)
            if self.guard is not None or self.tied:
                regs += self.defs()  # a guarded write keeps the old value where the guard is false
            self._uses = regs
        return self._uses

    @property
    def is_branch(self) -> bool:
        return self.opcode.startswith("bra")

    @property
    def ends_block(self) -> bool:
        return self.is_branch or self.opcode in ("ret", "exit")

    def text(self) -> str:
        guard = f"@{'!' if self.guard_negated else ''}{self.guard} " if self.guard is not None else ""
        ops = ", ".join(map(str, self.operands))
        return f"{guard}{self.opcode}{' ' + ops if ops else ''};"


def _regs(operands) -> list[VReg]:
    """The registers among operands (inside vectors and addresses too)."""
    out = []
    for o in operands:
        kind = type(o)
        if kind is VReg:
            out.append(o)
        elif kind is Vec:
            out += [r for r in o.regs if type(r) is VReg]
        elif kind is Addr and type(o.base) is VReg:
            out.append(o.base)
        elif kind is MapAddr:
            out += [r for r in (o.map, *o.coords.regs) if type(r) is VReg]
    return out


@dataclass(eq=False)
class Label:
    name: str


@dataclass(eq=False)
class SourceLine:
    """Marks where the code for a source position starts (a comment and a .loc)."""

    loc: Loc


@dataclass(eq=False)
class Raw:
    """A line of the body that is no instruction: a declaration, or a brace opening a scope."""

    text: str


@dataclass(eq=False)
class ModuleDecl:
    """A module-level declaration the body needs (a string constant, an external function),
    written before the entry however often it occurs in the body."""

    text: str


Item = Instr | Label | SourceLine | Raw | ModuleDecl


@dataclass
class EntryParam:
    name: str
    ptx_type: str  # .u64, .f32, .u32, ... (a byte array: .align N .b8)
    array: int | None = None  # bytes of a byte-array parameter (a tensor map)


@dataclass
class Kernel:
    name: str
    params: list[EntryParam]
    body: list[Item]
    threads: int
    ctas_per_sm: int | None = None  # `.minnctapersm`: CTAs ptxas must fit on one SM (it caps the registers)
    cluster: int = 1  # `.reqnctapercluster`: CTAs of a cluster, along x (sm_90)
    register_counts: dict[str, int] = field(default_factory=dict)  # class -> registers to declare
    shared_bytes: int = 0
    header_comment: list[str] = field(default_factory=list)
    ptx_version: str = PTX_VERSION  # the PTX ISA version its instructions need


def emit_module(kernel: Kernel, arch: str, source_file: str | None) -> str:
    """The PTX module text for one kernel."""
    out = ["//", "// Generated by Phobos"]
    out += [f"// {line}" for line in kernel.header_comment]
    out += ["//", f".version {kernel.ptx_version}", f".target {arch}", ".address_size 64", ""]
    if source_file is not None:
        out += [f'.file 1 "{_escape(source_file)}"', ""]
    if kernel.shared_bytes:
        out += [f"// {kernel.shared_bytes} bytes of shared memory, passed at launch",
                f".extern .shared .align 16 .b8 {SMEM_SYMBOL}[];", ""]
    declared = []
    for item in kernel.body:
        if isinstance(item, ModuleDecl) and item.text not in declared:
            declared.append(item.text)
    out += [*declared, ""] if declared else []
    params = [f"\t.param {p.ptx_type} {p.name}" + (f"[{p.array}]" if p.array else "") for p in kernel.params]
    out.append(f".visible .entry {kernel.name}(")
    out.append(",\n".join(params))
    out.append(")")
    out.append(f".maxntid {kernel.threads}, 1, 1")
    if kernel.ctas_per_sm:
        out.append(f".minnctapersm {kernel.ctas_per_sm}")
    if kernel.cluster > 1:
        out.append(f".reqnctapercluster {kernel.cluster}, 1, 1")
    out.append("{")
    for cls, (ptx_type, prefix) in REG_CLASSES.items():
        n = kernel.register_counts.get(cls, 0)
        if n:
            out.append(f"\t.reg {ptx_type} \t{prefix}<{n}>;")
    last_line = None
    for item in kernel.body:
        if isinstance(item, Label):
            out.append(f"{item.name}:")
        elif isinstance(item, Raw):
            out.append("\t" + item.text)
        elif isinstance(item, ModuleDecl):
            continue
        elif isinstance(item, SourceLine):
            loc = item.loc
            if (loc.file, loc.line) != last_line:
                text = SourceFile.line(loc.file, loc.line)
                out.append("")
                out.append(f"\t// {loc.file}:{loc.line}" + (f"  {text.strip()}" if text else ""))
                last_line = (loc.file, loc.line)
            if source_file is not None and loc.file == source_file:
                out.append(f"\t.loc 1 {loc.line} {loc.col}")
        else:
            out.append("\t" + item.text())
    out.append("}")
    return "\n".join(out) + "\n"


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')
