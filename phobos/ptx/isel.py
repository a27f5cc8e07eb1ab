# Instruction selection: thread-level IR -> PTX instructions on virtual registers.
#
# One table, SELECT, maps each IR opcode to a function that appends the PTX for
# one op; a second, TYPE_SUFFIX, names each dtype's PTX type.  Values get one
# virtual register each, of the class their dtype asks for (%p %rs %r %rd %f
# %fd); constants stay immediates where PTX accepts them.  Structured control
# flow becomes labels and branches: every loop bound and branch condition is
# the same for all threads of a CTA (scalars are uniform in Phobos), so the
# branches are `bra.uni`.
#
# Floating-point arithmetic carries an explicit rounding mode (`add.rn.f32`),
# which also tells ptxas not to contract a multiply and an add into an fma:
# the PTX computes exactly what the source says, in the order it says it.
# Float `neg` and `abs` are `xor`/`and` on the sign bit: PTX leaves the NaN of
# neg.f32 and abs.f32 unspecified, and the language changes the sign alone.
from __future__ import annotations

import itertools

import numpy as np

from ..constants import F8_FORMATS, F8_NAN, cvt_nan_integer, largest_float
from ..errors import UnsupportedError
from ..middle.ir import Function, Op, Value, uses
from ..types import DType
from .emit import (CLASS_OF_DTYPE, FP8_PTX_VERSION, PTX_VERSION, SMEM_SYMBOL, Addr, EntryParam, Imm, Instr, Item,
                   Label, MapAddr, ModuleDecl, Raw, SourceLine, Sym, Vec, VReg)

TYPE_SUFFIX = {
    DType.BOOL: "pred", DType.I8: "s8", DType.I16: "s16", DType.I32: "s32", DType.U32: "u32",
    DType.I64: "s64", DType.U64: "u64", DType.F16: "f16", DType.BF16: "bf16", DType.F32: "f32", DType.F64: "f64",
    DType.F8E4M3: "e4m3", DType.F8E5M2: "e5m2",
}
BITS_SUFFIX = {DType.I32: "b32", DType.U32: "b32", DType.F32: "b32", DType.I64: "b64", DType.U64: "b64",
               DType.F64: "b64", DType.BOOL: "pred", DType.F16: "b16", DType.BF16: "b16", DType.F8E4M3: "b16",
               DType.F8E5M2: "b16"}
PARAM_TYPE = {DType.I32: ".s32", DType.U32: ".u32", DType.I64: ".s64", DType.U64: ".u64", DType.F32: ".f32",
              DType.F64: ".f64", DType.BOOL: ".u8"}
MEMORY_TYPE = {DType.I8: "s8", DType.I16: "s16", DType.I32: "s32", DType.U32: "u32", DType.I64: "s64",
               DType.U64: "u64", DType.F32: "f32", DType.F64: "f64", DType.F16: "b16", DType.BF16: "b16",
               DType.BOOL: "u8", DType.F8E4M3: "b8", DType.F8E5M2: "b8"}
SPECIAL_AXIS = "xyz"
MMA_FRAGMENT_REGISTERS = {"m16n8k16": (4, 2), "m16n8k8": (4, 2), "m16n8k32": (4, 2)}  # b32 registers of A, B per lane
F8_TYPES = ("e4m3", "e5m2")  # the PTX names of the 8-bit floats the tensor cores multiply
FLOAT_ROUNDED = {"add", "sub", "mul", "div", "fma"}
COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
FLOAT_COMPARE = dict(COMPARE, ne="neu")  # NaN != x is true, as in C and numpy
ZERO = {DType.F32: 0.0, DType.F64: 0.0}
TENSOR_MAP_BYTES, TENSOR_MAP_ALIGN = 128, 64  # a CUtensorMap parameter, as the driver takes it


class Selector:
    def __init__(self, func: Function):
        self.func = func
        self.items: list[Item] = []
        self.regs: dict[Value, VReg | Imm] = {}
        self.ids = itertools.count(1)
        self.labels = itertools.count()
        self.params = func.attrs["params"]
        self.last_loc = None
        self.prefer: dict[Value, VReg] = {}
        self.use_count = uses(func)
        self.strings: dict[bytes, str] = {}  # .global string constants by content
        self.local_bytes = 0  # the local buffer vprintf's arguments need
        self.ptx_version = PTX_VERSION  # raised by instructions a later PTX ISA brought (func attr `ptx_version`)

    # ---------------------------------------------------------- registers
    def new(self, dtype: DType) -> VReg:
        return VReg(CLASS_OF_DTYPE[dtype], next(self.ids))

    def define(self, v: Value) -> VReg:
        r = self.prefer.pop(v, None) or self.new(v.dtype)
        self.regs[v] = r
        return r

    def prefer_targets(self, targets: list[VReg], region, after_uses_of=None) -> None:
        """Let values a region yields be computed straight into the registers they are copied to.

        A yielded value defined in the region itself can take its target's
        register when it is yielded once and, for a loop, when the loop-carried
        value it replaces is not read after it is defined.
        """
        ops = region.ops
        yielded = ops[-1].operands
        position = {}
        for i, op in enumerate(ops):
            for inner in [op, *_nested(op)]:
                for r in inner.results:
                    position[r] = i
        for k, (target, v) in enumerate(zip(targets, yielded)):
            if v not in position or yielded.count(v) != 1:
                continue
            if after_uses_of is not None and _used_after(ops, after_uses_of[k], position[v]):
                continue
            self.prefer[v] = target

    def src(self, v: Value):
        """The operand for `v`: its register, or an immediate for a constant."""
        return self.regs[v]

    def reg_of(self, x, dtype: DType) -> VReg:
        """An operand (register or immediate) in a register."""
        if isinstance(x, VReg):
            return x
        r = self.new(dtype)
        self.mov(r, x, dtype)
        return r

    def reg(self, v: Value) -> VReg:
        """`v` in a register (constants are moved into one)."""
        x = self.regs[v]
        if isinstance(x, VReg):
            return x
        r = self.new(v.dtype)
        self.mov(r, x, v.dtype)
        return r

    def emit(self, opcode: str, *operands, ndefs: int = 1, guard: VReg | None = None, negated: bool = False,
             tied: bool = False, holds: tuple = ()):
        self.items.append(Instr(opcode, list(operands), ndefs, guard, negated, tied, holds))

    def mov(self, dst: VReg, src, dtype: DType) -> None:
        self.emit(f"mov.{BITS_SUFFIX.get(dtype, TYPE_SUFFIX[dtype])}", dst, src)

    def label(self, stem: str) -> str:
        return f"$L_{stem}_{next(self.labels)}"

    # ---------------------------------------------------------- walking
    def run(self) -> list[Item]:
        self.block(self.func.body.ops)
        self.emit("ret", ndefs=0)
        if self.local_bytes:
            self.items.insert(0, Raw(f".local .align 8 .b8 {PRINT_ARGS}[{self.local_bytes}];"))
        return self.items

    def block(self, ops: list[Op]) -> None:
        for op in ops:
            if op.loc is not None and op.loc != self.last_loc and op.opcode != "const":
                self.items.append(SourceLine(op.loc))
                self.last_loc = op.loc
            fn = SELECT.get(op.opcode)
            if fn is None:
                raise UnsupportedError(f"no PTX instruction selection for '{op.opcode}'", op.loc)
            fn(self, op)


# ------------------------------------------------------------------ selection
def _const(s: Selector, op: Op) -> None:
    s.regs[op.result] = Imm(op.attrs["value"], op.result.dtype)


def _param(s: Selector, op: Op) -> None:
    index = op.attrs["index"]
    p = s.params[index]
    name = Sym(param_symbol(s.func, index))
    dst = s.define(op.result)
    if p.kind == "tensor":
        raw = s.new(DType.I64)
        s.emit("ld.param.u64", raw, Addr(name))
        s.emit("cvta.to.global.u64", dst, raw)
    elif p.dtype is DType.BOOL:
        raw = s.new(DType.I32)
        s.emit("ld.param.u8", raw, Addr(name))
        s.emit("setp.ne.u32", dst, raw, Imm(0, DType.U32))
    else:  # a size parameter is read in the index type (64-bit indices: .s64)
        s.emit(f"ld.param{PARAM_TYPE[op.result.dtype]}", dst, Addr(name))


def _special(register: str):
    def select(s: Selector, op: Op) -> None:
        axis = SPECIAL_AXIS[op.attrs.get("axis", 0)]
        s.emit("mov.u32", s.define(op.result), Sym(f"%{register}.{axis}"))
    return select


def _arith(opcode: str):
    def select(s: Selector, op: Op) -> None:
        dtype = op.result.dtype
        if dtype is DType.BOOL:
            s.emit(f"{opcode}.pred", s.define(op.result), *(s.reg(v) for v in op.operands))
            return
        name = opcode
        if dtype.is_float and opcode in FLOAT_ROUNDED:
            name = f"{opcode}.rn"
        elif opcode == "mul":
            name = "mul.lo"
        suffix = BITS_SUFFIX[dtype] if opcode in ("and", "or", "xor", "not", "shl") else TYPE_SUFFIX[dtype]
        operands = [s.src(v) for v in op.operands]
        if opcode in ("neg", "not", "abs"):
            operands = [s.reg(op.operands[0])]
        if dtype.is_int and (dtype.is_signed, opcode) in INTEGER_UNARY:
            INTEGER_UNARY[dtype.is_signed, opcode](s, op)
            return
        if dtype.is_float and opcode in FLOAT_SIGN:
            FLOAT_SIGN[opcode](s, op)
            return
        if opcode in ("shl", "shr"):
            operands[1] = _shift_amount(s, op.operands[1])
        s.emit(f"{name}.{suffix}", s.define(op.result), *operands)
    return select


def _shift_amount(s: Selector, v: Value):
    """A shift amount as PTX wants it, a .u32; a 64-bit one first clamped to 64 (PTX clamps the rest:
    an amount at or beyond the width shifts every bit out)."""
    if v.dtype.bits == 32:
        return s.src(v)
    clamped, amount = s.new(DType.I64), s.new(DType.I32)
    s.emit("min.u64", clamped, s.reg(v), Imm(64, DType.I64))
    s.emit("cvt.u32.u64", amount, clamped)
    return amount


def _mulhi(s: Selector, op: Op) -> None:
    s.emit(f"mul.hi.{TYPE_SUFFIX[op.result.dtype]}", s.define(op.result), s.reg(op.operands[0]),
           s.src(op.operands[1]))


def _round(mode: str):
    """floor, ceil, round, trunc: cvt to the same float type with an integer rounding."""
    def select(s: Selector, op: Op) -> None:
        t = TYPE_SUFFIX[op.result.dtype]
        s.emit(f"cvt.{mode}.{t}.{t}", s.define(op.result), s.reg(op.operands[0]))
    return select


def shares_register(op: Op) -> bool:
    """Whether `op`'s result is its operand's register, no instruction written: a bitcast within a register
    class (i32 and u32 share their registers), a cast between integers of one width (a reinterpretation),
    the absolute value of an unsigned integer (itself)."""
    if op.opcode not in ("bitcast", "cast", "abs") or not op.results:
        return False
    frm, to = op.operands[0].dtype, op.result.dtype
    if op.opcode == "bitcast":
        return CLASS_OF_DTYPE[frm] == CLASS_OF_DTYPE[to]
    if op.opcode == "cast":
        return frm.is_int and to.is_int and frm.bits == to.bits
    return frm.is_int and not frm.is_signed


def _bitcast(s: Selector, op: Op) -> None:
    if shares_register(op):
        s.regs[op.result] = s.src(op.operands[0])
        return
    s.emit(f"mov.b{op.result.dtype.bits}", s.define(op.result), s.reg(op.operands[0]))


def _unsigned_abs(s: Selector, op: Op) -> None:
    s.regs[op.result] = s.src(op.operands[0])  # shares_register: every unsigned value is its own absolute value


def _unsigned_neg(s: Selector, op: Op) -> None:
    dtype = op.result.dtype
    s.emit(f"sub.{TYPE_SUFFIX[dtype]}", s.define(op.result), Imm(0, dtype), s.reg(op.operands[0]))


def _signed_abs(s: Selector, op: Op) -> None:
    """|x| of a signed integer, wrapping (abs(INT_MIN) is INT_MIN) as (x ^ m) - m, m = x >> (bits - 1):
    not abs.s32, whose result ptxas takes to be non-negative (on an H100 `abs(x) < 0` was false and
    cdiv(31, abs(INT_MIN)) 1 for x = INT_MIN, while abs.s32 itself gives INT_MIN)."""
    dtype = op.result.dtype
    x, sign, flipped = s.reg(op.operands[0]), s.new(dtype), s.new(dtype)
    s.emit(f"shr.{TYPE_SUFFIX[dtype]}", sign, x, Imm(dtype.bits - 1, DType.I32))
    s.emit(f"xor.{BITS_SUFFIX[dtype]}", flipped, x, sign)
    s.emit(f"sub.{TYPE_SUFFIX[dtype]}", s.define(op.result), flipped, sign)


# integer neg and abs by signedness: PTX's abs and neg are signed
INTEGER_UNARY = {(False, "abs"): _unsigned_abs, (False, "neg"): _unsigned_neg, (True, "abs"): _signed_abs}


def _sign_bit(logic: str, mask: int):
    """Float neg (xor with the sign bit) or abs (and with the other bits): every other bit stays, a
    NaN's too."""
    def select(s: Selector, op: Op) -> None:
        dtype = op.result.dtype
        bits = mask >> (64 - dtype.bits)
        s.emit(f"{logic}.{BITS_SUFFIX[dtype]}", s.define(op.result), s.reg(op.operands[0]),
               Imm(bits, DType.I64))
    return select


FLOAT_SIGN = {"neg": _sign_bit("xor", 1 << 63), "abs": _sign_bit("and", (1 << 63) - 1)}


def _cmp(s: Selector, op: Op) -> None:
    a, b = op.operands
    pred = op.attrs["pred"]
    dst = s.define(op.result)
    if a.dtype is DType.BOOL:
        diff = s.new(DType.BOOL) if pred == "eq" else dst
        s.emit("xor.pred", diff, s.reg(a), s.reg(b))
        if pred == "eq":
            s.emit("not.pred", dst, diff)
        return
    table = FLOAT_COMPARE if a.dtype.is_float else COMPARE
    s.emit(f"setp.{table[pred]}.{TYPE_SUFFIX[a.dtype]}", dst, s.reg(a), s.src(b))


def _select(s: Selector, op: Op) -> None:
    c, a, b = op.operands
    dst = s.define(op.result)
    if op.result.dtype is DType.BOOL:
        t1, t2, nc = s.new(DType.BOOL), s.new(DType.BOOL), s.new(DType.BOOL)
        s.emit("and.pred", t1, s.reg(c), s.reg(a))
        s.emit("not.pred", nc, s.reg(c))
        s.emit("and.pred", t2, nc, s.reg(b))
        s.emit("or.pred", dst, t1, t2)
        return
    s.emit(f"selp.{BITS_SUFFIX[op.result.dtype]}", dst, s.src(a), s.src(b), s.reg(c))


def _fma(s: Selector, op: Op) -> None:
    """a * b + c: rounded once for floats, the low half (wrapping) for integers (an integer dot's steps)."""
    dtype = op.result.dtype
    name = "fma.rn" if dtype.is_float else "mad.lo"
    s.emit(f"{name}.{TYPE_SUFFIX[dtype]}", s.define(op.result), *(s.src(v) for v in op.operands))


def _unary(template: str):
    """A one-instruction float function: template like 'sqrt.rn.{t}'."""
    def select(s: Selector, op: Op) -> None:
        s.emit(template.format(t=TYPE_SUFFIX[op.result.dtype]), s.define(op.result), s.reg(op.operands[0]))
    return select


def _mul_wide(s: Selector, op: Op) -> None:
    s.emit("mul.wide.s32", s.define(op.result), s.reg(op.operands[0]), s.src(op.operands[1]))


def convert(s: Selector, dst: VReg, src, frm: DType, to: DType) -> None:
    """Append the conversion of `src` (a register or immediate of dtype frm) into `dst` (dtype to)."""
    if frm == to or (frm.bits == to.bits and frm.is_int and to.is_int):
        s.mov(dst, src, to)
    elif frm is DType.BOOL:
        one, zero = (1.0, 0.0) if to.is_float else (1, 0)
        s.emit(f"selp.{BITS_SUFFIX.get(to, TYPE_SUFFIX[to])}", dst, Imm(one, to), Imm(zero, to), src)
    elif to is DType.BOOL:
        compare = FLOAT_COMPARE if frm.is_float else COMPARE  # NaN is true, as C converts it
        s.emit(f"setp.{compare['ne']}.{TYPE_SUFFIX[frm]}", dst, src, Imm(ZERO.get(frm, 0), frm))
    elif frm is DType.BF16:
        wide = s.new(DType.I32)
        s.emit("cvt.u32.u16", wide, src)
        s.emit("shl.b32", wide, wide, Imm(16, DType.I32))
        f32 = dst if to is DType.F32 else s.new(DType.F32)
        s.emit("mov.b32", f32, wide)
        if to is not DType.F32:
            convert(s, dst, f32, DType.F32, to)
    elif to is DType.BF16:
        _to_bf16(s, dst, src, frm)
    elif frm.is_f8 or to.is_f8:
        _f8_conversion(s, dst, src, frm, to)
    elif frm is DType.F16 and to is DType.F64:  # through f32 (exact), as the language widens an f16
        f32 = s.new(DType.F32)
        convert(s, f32, src, frm, DType.F32)
        convert(s, dst, f32, DType.F32, to)
    elif frm.is_float and to.is_float:
        rounding = ".rn" if to.bits < frm.bits else ""
        s.emit(f"cvt{rounding}.{TYPE_SUFFIX[to]}.{TYPE_SUFFIX[frm]}", dst, src)
    elif frm.is_float:
        _float_to_int(s, dst, src, frm, to)
    elif to.is_float:
        s.emit(f"cvt.rn.{TYPE_SUFFIX[to]}.{TYPE_SUFFIX[frm]}", dst, src)
    else:
        s.emit(f"cvt.{TYPE_SUFFIX[to]}.{TYPE_SUFFIX[frm]}", dst, src)


def _float_to_int(s: Selector, dst: VReg, src, frm: DType, to: DType) -> None:
    """cvt.rzi, which saturates; the language makes every NaN 0, which cvt gives only from f32 into 32
    bits (constants.cvt_nan_integer), so elsewhere a NaN's result is selected."""
    cvt = f"cvt.rzi.{TYPE_SUFFIX[to]}.{TYPE_SUFFIX[frm]}"
    if cvt_nan_integer(frm.bits, to.bits) == 0:
        s.emit(cvt, dst, src)
        return
    x = s.reg_of(src, frm)
    nan, converted = s.new(DType.BOOL), s.new(to)
    s.emit(f"setp.nan.{TYPE_SUFFIX[frm]}", nan, x, x)
    s.emit(cvt, converted, x)
    s.emit(f"selp.{BITS_SUFFIX[to]}", dst, Imm(0, to), converted, nan)


def _to_bf16(s: Selector, dst: VReg, src, frm: DType) -> None:
    """f32 or f64 -> bf16, rounding once to nearest even: cvt.rn.bf16.f32 on sm_80 and newer (the
    function's attr `capability`), else with integer ops; an f64 first to f32 rounded to odd
    (`_f64_to_odd_f32`), which makes the two roundings one."""
    if frm is DType.F64:
        src = _f64_to_odd_f32(s, src)
    elif frm is not DType.F32:
        f32 = s.new(DType.F32)
        convert(s, f32, src, frm, DType.F32)
        src = f32
    if s.func.attrs.get("capability", 0) >= 80:
        s.emit("cvt.rn.bf16.f32", dst, s.reg_of(src, DType.F32))
        return
    bits, lsb, out, nan = s.new(DType.I32), s.new(DType.I32), s.new(DType.I32), s.new(DType.BOOL)
    s.emit("mov.b32", bits, src)
    s.emit("bfe.u32", lsb, bits, Imm(16, DType.I32), Imm(1, DType.I32))
    s.emit("add.s32", lsb, lsb, Imm(0x7FFF, DType.I32))
    s.emit("add.s32", out, bits, lsb)
    s.emit("shr.u32", out, out, Imm(16, DType.I32))
    s.emit("setp.nan.f32", nan, src, src)
    s.emit("selp.b32", out, Imm(0x7FFF, DType.I32), out, nan)  # any NaN becomes the canonical NaN, as cvt's
    s.emit("cvt.u16.u32", dst, out)


def _f64_to_odd_f32(s: Selector, src) -> VReg:
    """An f64 as f32 rounded toward zero, its last bit set where that was inexact (constants.
    round_to_odd_f32): rounded again to a 16-bit format, it rounds as the f64 would, once."""
    x = s.reg_of(src, DType.F64)
    low, back, bits, odd, out = s.new(DType.F32), s.new(DType.F64), s.new(DType.I32), s.new(DType.I32), s.new(DType.F32)
    inexact = s.new(DType.BOOL)
    s.emit("cvt.rz.f32.f64", low, x)
    s.emit("cvt.f64.f32", back, low)
    s.emit("setp.ne.f64", inexact, back, x)  # false for NaN: it stays as cvt made it
    s.emit("mov.b32", bits, low)
    s.emit("or.b32", odd, bits, Imm(1, DType.I32))
    s.emit("selp.b32", bits, odd, bits, inexact)
    s.emit("mov.b32", out, bits)
    return out


def _f8_conversion(s: Selector, dst: VReg, src, frm: DType, to: DType) -> None:
    """To or from an 8-bit float (its code the low byte of a b16 register), through f32: f32 -> f8 rounds
    to nearest even and saturates (NaN: 0x7F) - cvt.rn.satfinite.e4m3x2.f32 from sm_89 on (the function's
    attr `native_fp8`); f8 -> f32 is exact - cvt.rn.f16x2.e4m3x2 to f16, then to f32.  Before sm_89 both
    are integer arithmetic (`_f32_to_f8`, `_f8_to_f32`) that gives the same bits."""
    if frm.is_f8:  # (to another 8-bit format: through f32 too)
        f32 = dst if to is DType.F32 else s.new(DType.F32)
        (_f8_to_f32_native if s.func.attrs.get("native_fp8") else _f8_to_f32)(s, f32, s.reg_of(src, frm), frm)
        if to is not DType.F32:
            convert(s, dst, f32, DType.F32, to)
        return
    if frm is not DType.F32:
        f32 = s.new(DType.F32)
        convert(s, f32, src, frm, DType.F32)
        src = f32
    src = s.reg_of(src, DType.F32)
    if s.func.attrs.get("native_fp8"):
        s.ptx_version = FP8_PTX_VERSION
        s.emit(f"cvt.rn.satfinite.{TYPE_SUFFIX[to]}x2.f32", dst, src, src)  # the same code in both bytes
        return
    _f32_to_f8(s, dst, src, to)


def _f8_to_f32_native(s: Selector, dst: VReg, src: VReg, frm: DType) -> None:
    s.ptx_version = FP8_PTX_VERSION
    pair, low, high = s.new(DType.I32), s.new(DType.F16), s.new(DType.F16)
    s.emit(f"cvt.rn.f16x2.{TYPE_SUFFIX[frm]}x2", pair, src)
    s.emit("mov.b32", Vec((low, high)), pair)
    s.emit("cvt.f32.f16", dst, low)


def _f8_to_f32(s: Selector, dst: VReg, src: VReg, frm: DType) -> None:
    """An 8-bit float code -> f32 with integer arithmetic: as f16 bits (e5m2 is f16's top byte; e4m3's
    exponent and fraction shifted into f16's place give the value / 2^8, which f32 scales back exactly),
    then cvt.f32.f16; e4m3's NaN codes (S.1111.111) give the canonical NaN."""
    code, half = s.new(DType.I32), s.new(DType.I32)
    s.emit("cvt.u32.u16", code, src)
    s.emit("and.b32", code, code, Imm(0xFF, DType.I32))
    bits = s.new(DType.F16)
    if frm is DType.F8E5M2:
        s.emit("shl.b32", half, code, Imm(8, DType.I32))
        s.emit("cvt.u16.u32", bits, half)
        s.emit("cvt.f32.f16", dst, bits)
        return
    magnitude, sign, nan, scaled = s.new(DType.I32), s.new(DType.I32), s.new(DType.BOOL), s.new(DType.F32)
    s.emit("and.b32", magnitude, code, Imm(0x7F, DType.I32))
    s.emit("and.b32", sign, code, Imm(0x80, DType.I32))
    s.emit("shl.b32", sign, sign, Imm(8, DType.I32))
    s.emit("shl.b32", half, magnitude, Imm(7, DType.I32))
    s.emit("or.b32", half, half, sign)
    s.emit("cvt.u16.u32", bits, half)
    s.emit("cvt.f32.f16", scaled, bits)
    s.emit("mul.rn.f32", scaled, scaled, Imm(256.0, DType.F32))
    s.emit("setp.eq.u32", nan, magnitude, Imm(0x7F, DType.U32))
    s.emit("selp.b32", dst, Imm(0x7FFFFFFF, DType.I32), scaled, nan)


def _f32_to_f8(s: Selector, dst: VReg, src: VReg, to: DType) -> None:
    """f32 -> an 8-bit float code with integer arithmetic, as cvt.rn.satfinite does it: the magnitude
    saturated at the largest finite value (infinities too); its 24-bit significand shifted right by
    23 - fraction bits, more below the format's smallest normal exponent (subnormal codes; at most 25,
    which leaves 0 of any f32 that small), rounded to nearest even; the code is the exponent's distance
    above the smallest normal one, times 2^fraction, plus that quotient (a carry moves up an exponent);
    then the sign; NaN 0x7F."""
    fmt = F8_FORMATS[to]
    fraction, low = fmt.fraction, 127 + 1 - fmt.bias  # f32's biased exponent of the smallest normal
    largest = int(np.array(largest_float(to), np.float32).view(np.uint32))
    r = [s.new(DType.I32) for _ in range(11)]
    bits, sign, a, exponent, sig, shift, q, rem, half, t, code = r
    nan, up = s.new(DType.BOOL), s.new(DType.BOOL)
    u = lambda v: Imm(v, DType.U32)  # noqa: E731
    s.emit("mov.b32", bits, src)
    s.emit("shr.u32", sign, bits, u(24))
    s.emit("and.b32", sign, sign, u(0x80))
    s.emit("and.b32", a, bits, u(0x7FFFFFFF))
    s.emit("setp.gt.u32", nan, a, u(0x7F800000))
    s.emit("min.u32", a, a, u(largest))
    s.emit("shr.u32", exponent, a, u(23))
    s.emit("and.b32", sig, a, u(0x7FFFFF))
    s.emit("or.b32", sig, sig, u(0x800000))
    s.emit("sub.s32", shift, Imm(low, DType.I32), exponent)
    s.emit("max.s32", shift, shift, Imm(0, DType.I32))
    s.emit("add.s32", shift, shift, Imm(23 - fraction, DType.I32))
    s.emit("min.u32", shift, shift, u(25))
    s.emit("shr.u32", q, sig, shift)
    s.emit("shl.b32", t, u(1), shift)
    s.emit("sub.s32", t, t, Imm(1, DType.I32))
    s.emit("and.b32", rem, sig, t)
    s.emit("shr.u32", half, t, u(1))
    s.emit("add.s32", half, half, Imm(1, DType.I32))  # 2^(shift - 1)
    s.emit("and.b32", t, q, u(1))
    s.emit("add.s32", t, rem, t)  # rem + (q odd) > half: above half way, or at it with q odd
    s.emit("setp.gt.u32", up, t, half)
    s.emit("selp.u32", t, u(1), u(0), up)
    s.emit("add.s32", q, q, t)
    s.emit("sub.s32", code, exponent, Imm(low, DType.I32))
    s.emit("max.s32", code, code, Imm(0, DType.I32))
    s.emit("shl.b32", code, code, u(fraction))
    s.emit("add.s32", code, code, q)
    s.emit("or.b32", code, code, sign)
    s.emit("selp.b32", code, u(F8_NAN), code, nan)
    s.emit("cvt.u16.u32", dst, code)


def _cast(s: Selector, op: Op) -> None:
    if shares_register(op):  # a reinterpretation
        s.regs[op.result] = s.src(op.operands[0])
        return
    convert(s, s.define(op.result), s.src(op.operands[0]), op.operands[0].dtype, op.result.dtype)


def _shfl(mode: str, clamp: int):
    """shfl_bfly (lane ^ mask) and shfl_up (lane - delta); `clamp` is shfl's c operand for the mode."""
    def select(s: Selector, op: Op) -> None:
        x, mask = op.operands
        dtype = x.dtype
        dst = s.define(op.result)
        lane = s.src(mask)
        name = f"shfl.sync.{mode}.b32"
        c, members = Imm(clamp, DType.I32), Imm(-1, DType.I32)
        if dtype.bits == 64:
            lo, hi, lo2, hi2 = (s.new(DType.I32) for _ in range(4))
            s.emit("mov.b64", Vec((lo, hi)), s.reg(x))
            s.emit(name, lo2, lo, lane, c, members)
            s.emit(name, hi2, hi, lane, c, members)
            s.emit("mov.b64", dst, Vec((lo2, hi2)))
        elif dtype is DType.BOOL:
            w, w2 = s.new(DType.I32), s.new(DType.I32)
            s.emit("selp.u32", w, Imm(1, DType.U32), Imm(0, DType.U32), s.reg(x))
            s.emit(name, w2, w, lane, c, members)
            s.emit("setp.ne.u32", dst, w2, Imm(0, DType.U32))
        else:
            s.emit(name, dst, s.reg(x), lane, c, members)
    return select


def _atom(s: Selector, op: Op) -> None:
    """atom (red when the old value is unused and the op has a red form); a masked atom's old value
    is 0 where its predicate is false.  bf16's add before sm_90 is a compare-and-swap loop."""
    operands = list(op.operands)
    pred = operands.pop() if op.attrs["masked"] else None
    addr, values = operands[0], operands[1:]
    kind, ptx_type = op.attrs["op"], op.attrs["type"]
    sem = ".acq_rel.gpu" if op.attrs["ordered"] else ""
    guard = s.reg(pred) if pred is not None else None
    if ptx_type == "noftz.bf16" and s.func.attrs.get("capability", 0) < 90:
        _bf16_add_loop(s, op, s.reg(addr), s.reg(values[0]), guard)
        return
    args = [Addr(s.reg(addr))] + [s.reg(v) for v in values]
    kind_name = {"xchg": "exch"}.get(kind, kind)
    if not op.results and kind not in ("xchg", "cas"):
        s.emit(f"red{sem}.global.{kind_name}.{ptx_type}", *args, ndefs=0, guard=guard)
        return
    dtype = values[0].dtype
    dst = s.define(op.results[0]) if op.results else s.new(dtype)
    if guard is not None:
        s.mov(dst, Imm(ZERO.get(dtype, 0), dtype), dtype)
    s.emit(f"atom{sem}.global.{kind_name}.{ptx_type}", dst, *args, guard=guard)


def _bf16_add_loop(s: Selector, op: Op, addr: VReg, x: VReg, guard: VReg | None) -> None:
    """old += x on a bf16 in global memory, for targets without atom.add.bf16 (before sm_90): read it, add in
    f32 and round to bf16 (the sum of two bf16 values rounded once), swap it in by atom.cas.b16 if the
    element is still what was read, else again from what the swap found.  Each thread loops on its own
    (the branches are not uniform); the old value is the one the successful swap replaced."""
    old = s.define(op.results[0]) if op.results else s.new(DType.BF16)
    seen, new, sum16 = s.new(DType.BF16), s.new(DType.BF16), s.new(DType.F32)
    widened, addend, again = s.new(DType.F32), s.new(DType.F32), s.new(DType.BOOL)
    top, done = s.label("bf16_add"), s.label("bf16_added")
    s.mov(old, Imm(0, DType.BF16), DType.BF16)
    if guard is not None:
        s.emit("bra", Sym(done), ndefs=0, guard=guard, negated=True)
    s.emit("ld.global.b16", old, Addr(addr))
    convert(s, addend, x, DType.BF16, DType.F32)
    s.items.append(Label(top))
    convert(s, widened, old, DType.BF16, DType.F32)
    s.emit("add.rn.f32", sum16, widened, addend)
    convert(s, new, sum16, DType.F32, DType.BF16)
    s.emit("atom.global.cas.b16", seen, Addr(addr), old, new)
    s.emit("setp.ne.b16", again, seen, old)
    s.mov(old, seen, DType.BF16)
    s.emit("bra", Sym(top), ndefs=0, guard=again)
    s.items.append(Label(done))


PRINT_ARGS = "phobos_print_args"  # the local buffer that holds vprintf's arguments
VPRINTF = (".extern .func (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 vprintf_param_0,\n"
           "\t.param .b64 vprintf_param_1\n);")
PRINT_TYPE = {DType.I32: "s32", DType.U32: "u32", DType.I64: "s64", DType.U64: "u64", DType.F64: "f64"}


def _global_string(s: Selector, text: str) -> Sym:
    """A .global byte array holding `text` and its terminating 0; the generic address in a register."""
    data = text.encode() + b"\0"
    name = s.strings.setdefault(data, f"phobos_str_{len(s.strings)}")
    s.items.append(ModuleDecl(f".global .align 1 .b8 {name}[{len(data)}] = {{{', '.join(map(str, data))}}};"))
    return Sym(name)


def _address_of(s: Selector, symbol: Sym, space: str) -> VReg:
    raw, generic = s.new(DType.I64), s.new(DType.I64)
    s.emit("mov.u64", raw, symbol)
    s.emit(f"cvta.{space}.u64", generic, raw)
    return generic


def _printf(s: Selector, op: Op) -> None:
    """vprintf(format, arguments): the arguments laid out in the local buffer as C passes varargs
    (each aligned to its size; f32 promoted to f64, bools as the strings true/false)."""
    operands = list(op.operands)
    pred = operands.pop() if op.attrs["masked"] else None
    skip = s.label("printed")
    if pred is not None:
        s.emit("bra", Sym(skip), ndefs=0, guard=s.reg(pred), negated=True)
    offset = 0
    for v in operands:
        size = 4 if v.dtype in (DType.I32, DType.U32) else 8
        offset = -(-offset // size) * size
        at = Addr(Sym(PRINT_ARGS), offset)
        if v.dtype in (DType.F32, DType.F16, DType.BF16):   # printf's %f takes a double
            value = s.reg(v)
            if v.dtype is not DType.F32:
                value = s.new(DType.F32)
                convert(s, value, s.reg(v), v.dtype, DType.F32)
            wide = s.new(DType.F64)
            s.emit("cvt.f64.f32", wide, value)
            s.emit("st.local.f64", at, wide, ndefs=0)
        elif v.dtype is DType.BOOL:
            text = s.new(DType.I64)
            s.emit("selp.b64", text, _address_of(s, _global_string(s, "true"), "global"),
                   _address_of(s, _global_string(s, "false"), "global"), s.reg(v))
            s.emit("st.local.u64", at, text, ndefs=0)
        else:
            s.emit(f"st.local.{PRINT_TYPE[v.dtype]}", at, s.reg(v), ndefs=0)
        offset += size
    s.local_bytes = max(s.local_bytes, offset, 8)
    fmt = _address_of(s, _global_string(s, op.attrs["format"]), "global")
    args = _address_of(s, Sym(PRINT_ARGS), "local")
    s.items.append(ModuleDecl(VPRINTF))
    s.items.append(Raw("{"))
    s.items.append(Raw(".param .b64 phobos_format;"))
    s.items.append(Raw(".param .b64 phobos_arguments;"))
    s.items.append(Raw(".param .b32 phobos_printed;"))
    s.emit("st.param.b64", Addr(Sym("phobos_format")), fmt, ndefs=0)
    s.emit("st.param.b64", Addr(Sym("phobos_arguments")), args, ndefs=0)
    s.emit("call", Sym("(phobos_printed)"), Sym("vprintf"), Sym("(phobos_format, phobos_arguments)"), ndefs=0)
    s.items.append(Raw("}"))
    s.items.append(Label(skip))


def _trap(s: Selector, op: Op) -> None:
    s.emit("trap", ndefs=0, guard=s.reg(op.operands[0]) if op.attrs["masked"] else None)


def _smem_addr(s: Selector, op: Op) -> None:
    dst = s.define(op.result)
    s.emit("mov.u32", dst, Sym(SMEM_SYMBOL))
    if op.attrs.get("offset"):
        s.emit("add.s32", dst, dst, Imm(op.attrs["offset"], DType.I32))


def _memory_ops(op: Op) -> tuple[Value, list[Value], Value | None]:
    """(address, data operands, guard predicate) of a load/store op."""
    operands = list(op.operands)
    pred = operands.pop() if op.attrs.get("masked") else None
    return operands[0], operands[1:], pred


def _load(space: str):
    def select(s: Selector, op: Op) -> None:
        addr, _, pred = _memory_ops(op)
        mem = op.attrs["dtype"]
        vec = op.attrs["vec"]
        dsts = [s.define(r) for r in op.results]
        natural = mem in (DType.F32, DType.F64, DType.I32, DType.U32, DType.I64, DType.U64)
        temp = DType.I32 if (mem is DType.BOOL or mem.is_int) else mem  # widened or 16-bit float bits
        targets = dsts if natural else [s.new(temp) for _ in dsts]
        if pred is not None:
            for t, r in zip(targets, op.results):
                zero = r.dtype if natural else temp
                s.mov(t, Imm(ZERO.get(zero, 0), zero), zero)
        nc = ".nc" if op.attrs.get("read_only") and space == "global" else ""
        v = f".v{vec}" if vec > 1 else ""
        where = "shared::cluster" if op.attrs.get("cluster") else space  # another CTA's, by a mapa address
        operand = Vec(tuple(targets)) if vec > 1 else targets[0]
        s.emit(f"ld.{where}{nc}{v}.{MEMORY_TYPE[mem]}", operand, Addr(s.reg(addr), op.attrs.get("offset", 0)),
               guard=s.reg(pred) if pred is not None else None)
        if not natural:
            for t, d, r in zip(targets, dsts, op.results):
                if mem is DType.BOOL:
                    s.emit("setp.ne.u32", d, t, Imm(0, DType.U32))
                elif mem.is_int:
                    convert(s, d, t, DType.I32, r.dtype)
                else:
                    convert(s, d, t, mem, r.dtype)
    return select


def _store(space: str):
    def select(s: Selector, op: Op) -> None:
        addr, values, pred = _memory_ops(op)
        mem = op.attrs["dtype"]
        vec = op.attrs["vec"]
        sources = []
        for v in values:
            if mem is DType.BOOL:  # a predicate is stored as the byte 0 or 1
                w = s.new(DType.I32)
                s.emit("selp.u32", w, Imm(1, DType.U32), Imm(0, DType.U32), s.reg(v))
                sources.append(w)
            elif v.dtype == mem or (mem.compute == v.dtype and mem in (DType.I8, DType.I16)):
                sources.append(s.src(v) if mem not in (DType.I8, DType.I16) else s.reg(v))
            elif space == "shared" and mem is DType.BF16:  # a bf16 held in f32, staged: its top half, every bit
                low, high = s.new(mem), s.new(mem)
                s.emit("mov.b32", Vec((low, high)), s.reg(v))
                sources.append(high)
            else:
                t = s.new(mem)
                convert(s, t, s.src(v), v.dtype, mem)
                sources.append(t)
        v_ = f".v{vec}" if vec > 1 else ""
        operand = Vec(tuple(sources)) if vec > 1 else sources[0]
        # (a scatter's stores are relaxed, strong stores: where several of its elements land on one, one of
        # their values is written, as the PTX memory model makes a conflict of strong stores no data race)
        order = ".relaxed.gpu" if op.attrs.get("relaxed") else ""
        s.emit(f"st{order}.{space}{v_}.{MEMORY_TYPE[mem]}", Addr(s.reg(addr), op.attrs.get("offset", 0)), operand,
               ndefs=0, guard=s.reg(pred) if pred is not None else None)
    return select


def _cp_async(s: Selector, op: Op) -> None:
    """cp.async: 16-byte copies bypass L1 (.cg); smaller ones, zero-filled past src-size, use .ca."""
    operands = list(op.operands)
    pred = operands.pop() if op.attrs.get("masked") else None
    dst, src = operands[0], operands[1]
    nbytes = op.attrs["bytes"]
    cache = "cg" if nbytes == 16 else "ca"
    args = [Addr(s.reg(dst), op.attrs.get("offset", 0)), Addr(s.reg(src), op.attrs.get("goffset", 0)),
            Imm(nbytes, DType.I32)]
    if len(operands) == 3:
        args.append(s.src(operands[2]))
    s.emit(f"cp.async.{cache}.shared.global", *args, ndefs=0, guard=s.reg(pred) if pred is not None else None)


def _cp_async_commit(s: Selector, op: Op) -> None:
    s.emit("cp.async.commit_group", ndefs=0)


def _cp_async_wait(s: Selector, op: Op) -> None:
    s.emit("cp.async.wait_group", Imm(op.attrs["pending"], DType.I32), ndefs=0)


def _ldmatrix(s: Selector, op: Op) -> None:
    count = op.attrs["count"]
    trans = ".trans" if op.attrs["trans"] else ""
    dsts = Vec(tuple(s.define(r) for r in op.results))
    s.emit(f"ldmatrix.sync.aligned.m8n8.x{count}{trans}.shared.b16", dsts,
           Addr(s.reg(op.operands[0]), op.attrs.get("offset", 0)))


def _mma(s: Selector, op: Op) -> None:
    """mma.sync of one 16 x 8 tile: the operands are A's registers, B's, then the four of C (f32, or i32 for
    s8 operands)."""
    shape, kind = op.attrs["shape"], op.attrs["type"]
    na, nb = MMA_FRAGMENT_REGISTERS[shape]
    regs = [s.reg(v) for v in op.operands]
    a, b, c = regs[:na], regs[na:na + nb], regs[na + nb:]
    dsts = Vec(tuple(s.define(r) for r in op.results))
    if kind in F8_TYPES:
        s.ptx_version = FP8_PTX_VERSION
    acc = TYPE_SUFFIX[op.results[0].dtype]  # f32, or s32 (s8 operands: exact sums that wrap, no .satfinite)
    s.emit(f"mma.sync.aligned.{shape}.row.col.{acc}.{kind}.{kind}.{acc}", dsts, Vec(tuple(a)), Vec(tuple(b)),
           Vec(tuple(c)))


def _pack_half2(s: Selector, op: Op) -> None:
    lo, hi = op.operands
    s.emit(f"cvt.rn.{TYPE_SUFFIX[op.attrs['dtype']]}x2.f32", s.define(op.result), s.reg(hi), s.reg(lo))


def _pack_f8x4(s: Selector, op: Op) -> None:
    """Four f32 as four 8-bit float codes in one b32 (the first the lowest byte): two cvt.rn.satfinite pairs."""
    s.ptx_version = FP8_PTX_VERSION
    x0, x1, x2, x3 = (s.reg(v) for v in op.operands)
    low, high = s.new(DType.F8E4M3), s.new(DType.F8E4M3)
    pair = f"cvt.rn.satfinite.{TYPE_SUFFIX[op.attrs['dtype']]}x2.f32"
    s.emit(pair, low, x1, x0)
    s.emit(pair, high, x3, x2)
    s.emit("mov.b32", s.define(op.result), Vec((low, high)))


def _tf32(s: Selector, op: Op) -> None:
    s.emit(f"cvt.{op.attrs['mode']}.tf32.f32", s.define(op.result), s.reg(op.operands[0]))


def _tf32_low(s: Selector, op: Op) -> None:
    x, high = op.operands
    rest = s.new(DType.F32)
    s.emit("mov.b32", rest, s.reg(high))
    s.emit("sub.rn.f32", rest, s.reg(x), rest)
    s.emit("cvt.rna.tf32.f32", s.define(op.result), rest)


def _wgmma(s: Selector, op: Op) -> None:
    """wgmma.mma_async in place: its results take its accumulators' registers (copied first where an
    accumulator value is a constant or used again), after a wgmma.fence where the op asks for one or
    registers were copied.  A is a descriptor or (registers_a) four fragment registers.  With `zero` the
    op has no accumulator operands: scale-d 0, the results in new registers, written and not read."""
    first = 4 if op.attrs["registers_a"] else 1
    a = Vec(tuple(s.reg(v) for v in op.operands[:first])) if first > 1 else s.reg(op.operands[0])
    desc_b = s.reg(op.operands[first])
    from_zero = op.attrs["zero"]
    regs, copied = [s.new(DType.F32) for _ in op.results] if from_zero else [], False
    for v in op.operands[first + 1:]:
        x = s.regs[v]
        if not (isinstance(x, VReg) and s.use_count.get(v) == 1):
            r = s.new(DType.F32)
            s.mov(r, x, DType.F32)
            x, copied = r, True
        regs.append(x)
    for r, result in zip(regs, op.results):
        s.regs[result] = r
    if op.attrs["fence"] or copied:
        s.emit("wgmma.fence.sync.aligned", ndefs=0)
    kind = op.attrs["type"]
    one, zero = Imm(1, DType.I32), Imm(0, DType.I32)
    # 16-bit: A K-major (0) or M-major (1) - no operand for A from registers -, B K-major (0) or N-major (1);
    # tf32, e4m3, e5m2: both K-major, no operand
    bits = op.attrs.get("trans", (0, 1))[1 if op.attrs["registers_a"] else 0:]
    trans = [] if kind == "tf32" or kind in F8_TYPES else [Imm(bit, DType.I32) for bit in bits]
    s.emit(f"wgmma.mma_async.sync.aligned.m64n{op.attrs['n']}k{op.attrs['k']}.f32.{kind}.{kind}", Vec(tuple(regs)),
           a, desc_b, zero if from_zero else one, one, one, *trans, tied=not from_zero)  # scale-d, -a, -b


def _barrier(s: Selector, op: Op) -> None:
    """bar.sync 0 for the whole CTA; barrier 1 for the first attrs threads (the consumers, beside a producer), or
    the barrier of the id operand for attrs threads (a consumer team's)."""
    count = op.attrs.get("threads")
    named = s.reg(op.operands[0]) if op.operands else Imm(1, DType.I32)
    s.emit("bar.sync", *((Imm(0, DType.I32),) if count is None else (named, Imm(count, DType.I32))), ndefs=0)


def _guard(s: Selector, op: Op, position: int) -> VReg | None:
    """The predicate operand at `position`, when the op has one."""
    return s.reg(op.operands[position]) if len(op.operands) > position else None


def _mbarrier_arrive(s: Selector, op: Op) -> None:
    s.emit("mbarrier.arrive.shared::cta.b64", s.new(DType.I64), Addr(s.reg(op.operands[0]), 0),
           guard=_guard(s, op, 1))


def _tensor_map_addr(s: Selector, op: Op) -> None:
    """The generic address of a tensor map parameter (as nvcc reaches one)."""
    dst = s.define(op.result)
    s.emit("mov.b64", dst, Sym(param_symbol(s.func, op.attrs["index"])))
    s.emit("cvta.param.u64", dst, dst)


def _tma_load(s: Selector, op: Op) -> None:
    """A box of a tensor map into shared memory; its bytes complete the mbarrier's transaction count (in each
    CTA of the multicast mask, where there is one)."""
    stage, tensor_map, c0, c1, barrier = op.operands[:5]
    mask = op.attrs.get("multicast")
    operands = [Addr(s.reg(stage), op.attrs["offset"]), MapAddr(s.reg(tensor_map), Vec((s.reg(c0), s.reg(c1)))),
                Addr(s.reg(barrier), 0)]
    if mask:
        operands.append(Imm(mask, DType.I16))  # ctaMask, a 16-bit operand
    s.emit("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
           + (".multicast::cluster" if mask else ""), *operands, ndefs=0, guard=_guard(s, op, 5))


def _tma_store(s: Selector, op: Op) -> None:
    """A box of shared memory to a tensor map's tensor (the elements outside it are not written)."""
    source, tensor_map, c0, c1 = op.operands[:4]
    s.emit("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
           MapAddr(s.reg(tensor_map), Vec((s.reg(c0), s.reg(c1)))), Addr(s.reg(source), op.attrs["offset"]),
           ndefs=0, guard=_guard(s, op, 4))


def _cluster_barrier(s: Selector, op: Op) -> None:
    """barrier.cluster across every thread of the cluster; after mbarrier initialisations, fenced first."""
    if op.attrs.get("init"):
        s.emit("fence.mbarrier_init.release.cluster", ndefs=0)
    s.emit("barrier.cluster.arrive.release.aligned", ndefs=0)
    s.emit("barrier.cluster.wait.acquire.aligned", ndefs=0)


def _mbarrier_wait(s: Selector, op: Op) -> None:
    """try_wait until the phase of the given parity has completed (the thread sleeps in try_wait meanwhile)."""
    again, done = s.label("wait"), s.new(DType.BOOL)
    s.items.append(Label(again))
    s.emit("mbarrier.try_wait.parity.shared::cta.b64", done, Addr(s.reg(op.operands[0]), 0), s.reg(op.operands[1]))
    s.emit("bra", Sym(again), ndefs=0, guard=done, negated=True)


def _yield_into(s: Selector, targets: list[VReg], values: list[Value]) -> None:
    """Parallel copy of `values` into `targets` (through temporaries when they overlap)."""
    sources = [s.src(v) for v in values]
    pending = [(t, x, v.dtype) for t, x, v in zip(targets, sources, values) if t is not x]
    if any(isinstance(x, VReg) and x in targets for _, x, _ in pending):
        temps = []
        for t, x, dtype in pending:
            tmp = s.new(dtype)
            s.mov(tmp, x, dtype)
            temps.append((t, tmp, dtype))
        pending = temps
    for t, x, dtype in pending:
        s.mov(t, x, dtype)


def _nested(op: Op):
    for region in op.regions:
        for inner in region.ops:
            yield inner
            yield from _nested(inner)


def _used_after(ops: list[Op], v: Value, position: int) -> bool:
    """Is `v` - or a value in its register (`shares_register`) - read by an op after top-level position
    `position` (nested regions included)?"""
    held = {v}
    for at, op in enumerate(ops):
        for inner in [op, *_nested(op)]:
            if at > position and any(x in held for x in inner.operands):
                return True
            if shares_register(inner) and inner.operands[0] in held:
                held.add(inner.result)
    return False


def _for(s: Selector, op: Op) -> None:
    """The loop runs while iv is below hi (above, for a negative step).  The test after an
    iteration compares the distance left, |hi - iv|, with |step| as unsigned numbers before
    stepping: iv + step itself could wrap past the end of the dtype's range (range(2147483640,
    2147483647, 4) would never end), the distance cannot (iv is on this side of hi)."""
    lo, hi = op.operands[0], op.operands[1]
    step = op.attrs["step"]
    body = op.regions[0]
    iv = s.define(body.args[0])
    carried = [s.define(a) for a in body.args[1:]]
    s.mov(iv, s.src(lo), lo.dtype)
    _yield_into(s, carried, op.operands[2:])
    t = TYPE_SUFFIX[lo.dtype]
    top, end = s.label("loop"), s.label("done")
    done = s.new(DType.BOOL)
    s.emit(f"setp.{'ge' if step > 0 else 'le'}.{t}", done, iv, s.src(hi))
    s.emit("bra.uni", Sym(end), ndefs=0, guard=done)
    s.items.append(Label(top))
    s.prefer_targets(carried, body, after_uses_of=body.args[1:])
    s.block(body.ops[:-1])
    _yield_into(s, carried, body.ops[-1].operands)
    left = s.new(lo.dtype)
    s.emit(f"sub.{t}", left, *((s.src(hi), iv) if step > 0 else (iv, s.src(hi))))
    s.emit(f"add.{t}", iv, iv, Imm(step, lo.dtype))
    again = s.new(DType.BOOL)
    s.emit(f"setp.gt.u{lo.dtype.bits}", again, left, Imm(abs(step), lo.dtype))
    s.emit("bra.uni", Sym(top), ndefs=0, guard=again)
    s.items.append(Label(end))
    for r, c in zip(op.results, carried):
        s.regs[r] = c


def _while(s: Selector, op: Op) -> None:
    """The condition region at the top, leaving when it is false; the body's next values go back
    into the registers of the carried values (shared by both regions' arguments)."""
    cond, body = op.regions
    carried = [s.define(a) for a in cond.args]
    for a, r in zip(body.args, carried):
        s.regs[a] = r
    _yield_into(s, carried, op.operands)
    top, end = s.label("while"), s.label("done")
    s.items.append(Label(top))
    s.block(cond.ops[:-1])
    s.emit("bra.uni", Sym(end), ndefs=0, guard=s.reg(cond.ops[-1].operands[0]), negated=True)
    s.block(body.ops[:-1])
    _yield_into(s, carried, body.ops[-1].operands)
    s.emit("bra.uni", Sym(top), ndefs=0)
    s.items.append(Label(end))
    for r, c in zip(op.results, carried):
        s.regs[r] = c


def _if(s: Selector, op: Op) -> None:
    cond = s.reg(op.operands[0])
    results = [s.define(r) for r in op.results]
    then, orelse = op.regions
    if not results and len(orelse.ops) == 1:  # no else: skip the then part when the condition is false
        end = s.label("endif")
        s.emit("bra.uni", Sym(end), ndefs=0, guard=cond, negated=True)
        s.block(then.ops[:-1])
        s.items.append(Label(end))
        return
    else_label, end = s.label("else"), s.label("endif")
    s.emit("bra.uni", Sym(else_label), ndefs=0, guard=cond, negated=True)
    s.prefer_targets(results, then)
    s.block(then.ops[:-1])
    _yield_into(s, results, then.ops[-1].operands)
    s.emit("bra.uni", Sym(end), ndefs=0)
    s.items.append(Label(else_label))
    s.prefer_targets(results, orelse)
    s.block(orelse.ops[:-1])
    _yield_into(s, results, orelse.ops[-1].operands)
    s.items.append(Label(end))


SELECT = {
    "const": _const,
    "param": _param,
    "program_id": _special("ctaid"),
    "num_programs": _special("nctaid"),
    "tid": _special("tid"),
    **{name: _arith(name) for name in ("add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor",
                                       "shl", "shr", "neg", "not", "abs")},
    "cmp": _cmp,
    "select": _select,
    "fma": _fma,
    "mulhi": _mulhi,
    **{name: _round(mode) for name, mode in (("floor", "rmi"), ("ceil", "rpi"), ("round", "rni"), ("trunc", "rzi"))},
    "bitcast": _bitcast,
    "cast": _cast,
    "sqrt": _unary("sqrt.rn.{t}"),
    "rcp": _unary("rcp.rn.{t}"),
    "ex2_approx": _unary("ex2.approx.{t}"),
    "lg2_approx": _unary("lg2.approx.{t}"),
    "rsqrt_approx": _unary("rsqrt.approx.{t}"),
    "sin_approx": _unary("sin.approx.{t}"),
    "cos_approx": _unary("cos.approx.{t}"),
    "mul_wide": _mul_wide,
    "shfl_bfly": _shfl("bfly", 31),
    "shfl_up": _shfl("up", 0),
    "smem_addr": _smem_addr,
    "ld_global": _load("global"),
    "st_global": _store("global"),
    "atom_global": _atom,
    "printf": _printf,
    "trap": _trap,
    "ld_shared": _load("shared"),
    "st_shared": _store("shared"),
    "barrier": _barrier,
    "ldmatrix": _ldmatrix,
    "mma": _mma,
    "pack_half2": _pack_half2,
    "pack_f8x4": _pack_f8x4,
    "tf32": _tf32,
    "tf32_low": _tf32_low,
    "wgmma": _wgmma,
    "wgmma_commit": lambda s, op: s.emit("wgmma.commit_group.sync.aligned", ndefs=0),
    "wgmma_wait": lambda s, op: s.emit("wgmma.wait_group.sync.aligned", Imm(op.attrs["pending"], DType.I32), ndefs=0,
                                       holds=tuple(s.reg(v) for v in op.operands)),
    "fence_proxy_async": lambda s, op: s.emit("fence.proxy.async.shared::cta", ndefs=0),
    "mbarrier_init": lambda s, op: s.emit("mbarrier.init.shared::cta.b64", Addr(s.reg(op.operands[0]), 0),
                                          Imm(op.attrs["count"], DType.I32), ndefs=0, guard=_guard(s, op, 1)),
    "mbarrier_arrive": _mbarrier_arrive,
    "mbarrier_inval": lambda s, op: s.emit("mbarrier.inval.shared::cta.b64", Addr(s.reg(op.operands[0]), 0), ndefs=0,
                                           guard=_guard(s, op, 1)),
    "mbarrier_expect_tx": lambda s, op: s.emit("mbarrier.arrive.expect_tx.shared::cta.b64", s.new(DType.I64),
                                               Addr(s.reg(op.operands[0]), 0), Imm(op.attrs["bytes"], DType.I32),
                                               guard=_guard(s, op, 1)),
    "tensor_map_addr": _tensor_map_addr,
    "tma_load": _tma_load,
    "tma_store": _tma_store,
    "bulk_commit": lambda s, op: s.emit("cp.async.bulk.commit_group", ndefs=0, guard=_guard(s, op, 0)),
    "bulk_wait": lambda s, op: s.emit("cp.async.bulk.wait_group" + (".read" if op.attrs["read"] else ""),
                                      Imm(op.attrs["pending"], DType.I32), ndefs=0, guard=_guard(s, op, 0)),
    "cluster_rank": lambda s, op: s.emit("mov.u32", s.define(op.result), Sym("%cluster_ctarank")),
    "mapa": lambda s, op: s.emit("mapa.shared::cluster.u32", s.define(op.result), s.reg(op.operands[0]),
                                 s.src(op.operands[1])),
    "mbarrier_arrive_cluster": lambda s, op: s.emit("mbarrier.arrive.release.cluster.shared::cluster.b64", Sym("_"),
                                                    Addr(s.reg(op.operands[0]), 0), ndefs=0, guard=_guard(s, op, 1)),
    "cluster_barrier": _cluster_barrier,
    "mbarrier_wait": _mbarrier_wait,
    "setmaxnreg": lambda s, op: s.emit(f"setmaxnreg.{'inc' if op.attrs['inc'] else 'dec'}.sync.aligned.u32",
                                       Imm(op.attrs["count"], DType.I32), ndefs=0),
    "exit": lambda s, op: s.emit("exit", ndefs=0),
    "cp_async": _cp_async,
    "cp_async_commit": _cp_async_commit,
    "cp_async_wait": _cp_async_wait,
    "for": _for,
    "while": _while,
    "if": _if,
}


def param_symbol(func: Function, index: int) -> str:
    """The PTX name of kernel parameter `index`."""
    return f"{func.name}_param_{index}"


def entry_params(func: Function) -> list[EntryParam]:
    out = []
    index_type = DType.I64 if func.attrs.get("index_bits") == 64 else DType.I32
    for i, p in enumerate(func.attrs["params"]):
        name = param_symbol(func, i)
        if p.kind == "tensor_map":
            out.append(EntryParam(name, f".align {TENSOR_MAP_ALIGN} .b8", TENSOR_MAP_BYTES))
            continue
        ptx_type = ".u64" if p.kind == "tensor" else PARAM_TYPE[index_type if p.kind == "size" else p.dtype]
        out.append(EntryParam(name, ptx_type))
    return out


def select(func: Function) -> list[Item]:
    """PTX items for a thread-level function (virtual registers, not yet allocated); the function's attr
    `ptx_version` is the PTX ISA version they need."""
    selector = Selector(func)
    items = selector.run()
    func.attrs["ptx_version"] = selector.ptx_version
    return items
