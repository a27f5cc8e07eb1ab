# The numerics probe: what the GPU computes on the hard values, next to what
# the interpreter and the emulator compute, element by element.
#
#     python tools/probe_numerics.py --json probe.json     # the GPU machine: interpret, emulate, gpu
#     python tools/probe_numerics.py --no-gpu              # anywhere: interpret vs emulate
#
# Where tools/fuzz_modes.py finds disagreements in random programs, this runs
# every operation once over tables of special values, so the GPU's rule can be
# read off: NaNs of both signs with payloads (quiet and signaling), infinities,
# zeros of both signs, subnormals, the ends of every integer range and the
# float values around them.  Two kinds of probe:
#
#   language     Phobos kernels, in interpret, emulate and gpu: every cast
#                between the dtypes (to f16/bf16 and i8/i16 through stores),
#                + - * / min max and comparisons of all pairs of specials, fma
#                of triples, the unary functions, max/min reductions of NaNs,
#                float atomics on special old values, integer division and
#                shifts at the edges, and the `.approx` math functions over
#                their documented domain and far outside it.
#   instruction  one-instruction PTX kernels, in the emulator and on the GPU:
#                the conversions whose NaN results the code generator masks
#                (cvt.rzi from f64 or into 64 bits), and neg/abs, which Phobos
#                does not emit.
#
# Outputs compare as tools/fuzz_modes.py compares them (tests/value_generator.
# `disagreements`): bit for bit, the approximate functions within their
# documented bounds.  The table gives each probe's elements and its
# disagreements per pair of modes, with the first one's inputs and results;
# for the approximate functions also the largest error of the GPU against the
# emulator, in f32 ulps and absolute, inside their documented domain and out
# of it.  The facts below the table are the GPU's bits for the cases a rule
# hangs on.  --json writes every input and result.  Exit status 1 when a pair
# of modes disagrees.
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests import value_generator as vg  # noqa: E402  (after the path is set)
from tests.emulator_support import elementwise_ptx  # noqa: E402

BLOCK = 256  # elements per program instance

# Special values as bit patterns.  Floats: zeros, subnormals, the smallest normal, small numbers and
# halves (rounding), NaNs of both signs with payloads (quiet and signaling), infinities, the largest
# finite value, and the values around the ends of the integer ranges and of the narrower formats.
F32 = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x3F800000, 0xBF800000,
       0x3F000000, 0xBF000000, 0x3FC00000, 0xC0200000, 0x40200000, 0x7F800000, 0xFF800000, 0x7FC00000,
       0xFFC00000, 0x7FFFFFFF, 0x7FA00000, 0x7F800001, 0xFF800001, 0x7FC00123, 0xFFC00ABC, 0x7F7FFFFF,
       0xFF7FFFFF, 0x4EFFFFFF, 0x4F000000, 0xCF000000, 0xCF000001, 0x4F800000, 0x5EFFFFFF, 0x5F000000,
       0xDF000000, 0x5F800000, 0x477FE000, 0x477FF000, 0x3F800001]
F64 = [0x0, 1 << 63, 0x1, (1 << 63) | 1, 0x000F_FFFF_FFFF_FFFF, 0x0010 << 48, 0x3FF0 << 48, 0xBFF0 << 48,
       0x3FE0 << 48, 0xBFE0 << 48, 0x3FF8 << 48, 0xC004 << 48, 0x4004 << 48, 0x7FF0 << 48, 0xFFF0 << 48,
       0x7FF8 << 48, 0xFFF8 << 48, 0x7FFF_FFFF_FFFF_FFFF, 0x7FF4 << 48, 0x7FF0_0000_0000_0001,
       0xFFF0_0000_0000_0001, 0x7FF8_0000_0000_0ABC, 0xFFF8_0000_0000_0ABC, 0x7FFC_0000_2000_0000,
       0xFFF4_0000_2000_0000, 0x7FEF_FFFF_FFFF_FFFF, 0xFFEF_FFFF_FFFF_FFFF, 0x41DF_FFFF_FFC0_0000,
       0x41DF_FFFF_FFE0_0000, 0x41E0 << 48, 0xC1E0 << 48, 0xC1E0_0000_0020_0000, 0x41EF_FFFF_FFE0_0000,
       0x41F0 << 48, 0x43DF_FFFF_FFFF_FFFF, 0x43E0 << 48, 0xC3E0 << 48, 0xC3E0_0000_0000_0001, 0x43F0 << 48,
       0x47EF_FFFF_E000_0000, 0x47EF_FFFF_F000_0000, 0x36A0 << 48, 0x4340_0000_0000_0001]
F16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x3800, 0x3E00, 0x7C00, 0xFC00,
       0x7E00, 0xFE00, 0x7FFF, 0x7D00, 0xFD01, 0x7E12, 0x7BFF, 0xFBFF]
BF16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x3F80, 0xBF80, 0x3F00, 0x3FC0, 0x7F80, 0xFF80,
        0x7FC0, 0xFFC0, 0x7FFF, 0x7FA0, 0xFF81, 0x7FC1, 0x7F7F, 0xFF7F, 0x4F00, 0xDF00]
INTS = {
    "i32": [0, 1, -1, 2, -2, 7, -7, 31, 32, 33, 63, 64, 2**31 - 1, -2**31, 2**31 - 2, -2**31 + 1,
            2**24 + 1, -(2**24 + 1), 2**24 + 3, 65504, 65520],
    "i64": [0, 1, -1, 2, -2, 7, -7, 31, 32, 63, 64, 65, 2**63 - 1, -2**63, 2**32, 2**32 - 1, 2**31, -2**31,
            2**53 + 1, -(2**53 + 1), 2**63 - 2**10, 2**24 + 1, 2**62 + 1],
    "u32": [0, 1, 2, 7, 31, 32, 33, 2**32 - 1, 2**31, 2**31 - 1, 2**32 - 2, 2**24 + 1, 2**24 + 3, 65535],
    "i8": [0, 1, -1, 127, -128, 7, -7],
    "i16": [0, 1, -1, 32767, -32768, 15, -15],
}
BITS = {"f32": F32, "f64": F64, "f16": F16, "bf16": BF16}
UINT = {"f32": np.uint32, "f64": np.uint64, "f16": np.uint16, "bf16": np.uint16}


def specials(dtype: str) -> np.ndarray:
    """The special values of `dtype` as an array of its NumPy dtype (bf16: uint16 bit patterns)."""
    if dtype in BITS:
        bits = np.array(BITS[dtype], np.uint64).astype(UINT[dtype])
        return bits if dtype == "bf16" else bits.view(vg.NUMPY[dtype])
    if dtype == "bool":
        return np.array([False, True])
    return np.array(INTS[dtype], np.int64).astype(vg.NUMPY[dtype])


def fewer(dtype: str) -> np.ndarray:
    """A smaller set of float specials, for pairs and triples: zeros, one, a half, infinities, NaNs."""
    keep = {"f32": [0x00000000, 0x80000000, 0x00000001, 0x3F800000, 0xBF000000, 0x7F800000, 0xFF800000,
                    0x7FC00000, 0xFFC00ABC, 0x7FA00000, 0x7F7FFFFF, 0x7FFFFFFF],
            "f64": [0x0, 1 << 63, 0x1, 0x3FF0 << 48, 0xBFE0 << 48, 0x7FF0 << 48, 0xFFF0 << 48, 0x7FF8 << 48,
                    0xFFF8_0000_0000_0ABC, 0x7FF4 << 48, 0x7FEF_FFFF_FFFF_FFFF, 0x7FF8_0000_0000_0123]}[dtype]
    return np.array(keep, np.uint64).astype(UINT[dtype]).view(vg.NUMPY[dtype])


def pairs(x: np.ndarray, y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    y = x if y is None else y
    return np.repeat(x, len(y)), np.tile(y, len(x))


def sweep(function: str, n: int = 1024) -> np.ndarray:
    """f32 arguments for an approximate function: its fuzz domain, evenly, and magnitudes from 1e-38 to
    3e38 of both signs (or positive, for a function of positive numbers), with the specials."""
    rng = np.random.default_rng(len(function))
    lo, hi = vg.APPROX[function][0]
    inside = rng.uniform(lo, hi, n)
    magnitude = np.exp(rng.uniform(math.log(1e-38), math.log(3e38), n))
    wide = magnitude if lo >= 0 else magnitude * rng.choice([-1.0, 1.0], n)
    return np.concatenate([inside, wide]).astype(np.float32).tolist() + [float(v) for v in specials("f32")]


# ------------------------------------------------------------------ language probes
@dataclass
class Case:
    """One output of a probe kernel: a statement over the inputs' slices {a} {b} {c} and the output's {y}."""

    name: str
    statement: str
    dtype: str                     # of the output tensor
    function: str = ""             # an approximate function: compared within its bound, its argument {a}
    init: str = ""                 # the input whose values the output starts from (atomics)


@dataclass
class Group:
    """A kernel: its inputs (name -> values) and its outputs."""

    name: str
    inputs: dict[str, np.ndarray]
    cases: list[Case] = field(default_factory=list)


TO = ["i32", "i64", "u32", "f32", "f64"]


def cast_groups() -> list[Group]:
    groups = []
    for frm in ["f32", "f64", "f16", "bf16", "i32", "i64", "u32", "i8", "i16"]:
        g = Group(f"cast from {frm}", {"a": specials(frm)})
        for to in TO:
            if to != frm:
                g.cases.append(Case(f"{to}({frm})", f"{{y}} = {to}({{a}})", to))
        g.cases.append(Case(f"{frm} a != 0", "{y} = {a} != 0", "bool"))
        for half in ("f16", "bf16"):
            g.cases.append(Case(f"{half}({frm})", f"{{y}} = {half}({{a}})", half))
        if frm in ("i32", "i64", "u32"):
            g.cases += [Case(f"i8 <- {frm}", "{y} = i32({a})", "i8"), Case(f"i16 <- {frm}", "{y} = i32({a})", "i16")]
        if frm in ("f16", "bf16"):
            g.cases.append(Case(f"{frm} <- {frm}", "{y} = {a}", frm))
        groups.append(g)
    return groups


def arithmetic_groups() -> list[Group]:
    groups = []
    for t in ("f32", "f64"):
        a, b = pairs(specials(t))
        g = Group(f"binary {t}", {"a": a, "b": b})
        g.cases = [Case(f"{t} a {op} b", f"{{y}} = {{a}} {op} {{b}}", t) for op in "+-*/"]
        g.cases += [Case(f"{t} {fn}(a, b)", f"{{y}} = {fn}({{a}}, {{b}})", t) for fn in ("maximum", "minimum")]
        g.cases += [Case(f"{t} a {op} b", f"{{y}} = {{a}} {op} {{b}}", "bool") for op in ("<", "==", "!=")]
        groups.append(g)
        x = fewer(t)
        a, bc = pairs(x, np.arange(len(x) ** 2))
        b, c = pairs(x)
        groups.append(Group(f"fma {t}", {"a": a, "b": b[bc], "c": c[bc]},
                            [Case(f"{t} fma(a, b, c)", "{y} = fma({a}, {b}, {c})", t)]))
        g = Group(f"unary {t}", {"a": specials(t)})
        g.cases = [Case(f"{t} {fn}(a)", f"{{y}} = {fn}({{a}})", t)
                   for fn in ("sqrt", "floor", "ceil", "round", "trunc", "abs")]
        g.cases.append(Case(f"{t} -a", "{y} = -{a}", t))
        groups.append(g)
        nans = fewer(t)[np.isnan(fewer(t))]
        numbers = np.resize(specials(t), -(-len(specials(t)) // 8) * 8)
        # rows of numbers and NaNs mixed; of one NaN, of each kind; of NaNs of every kind, in two orders
        rows = np.concatenate([numbers, np.repeat(nans, 8), np.resize(nans, 8), np.resize(nans[::-1], 8)])
        g = Group(f"reduce {t}", {"a": rows})
        g.cases = [Case(f"{t} {fn} of rows of 8", f"{{y}} = reshape({fn}(reshape({{a}}, [{BLOCK // 8}, 8]), axis=1), "
                        f"[{BLOCK // 8}])", t) for fn in ("max", "min")]
        groups.append(g)
        # a NaN literal: ptxas sees an immediate, which it may fold (x - NaN is -NaN on an H100, fuzz
        # seeds 470, 1303, 1521): which NaN comes out, the operand's or the constant's, and its sign
        g = Group(f"literal nan {t}", {"a": specials(t)})
        g.cases = [Case(f"{t} {form.format(a='a')}", "{y} = " + form, t)
                   for form in ("{a} + nan", "nan + {a}", "{a} - nan", "nan - {a}", "{a} * nan",
                                "maximum({a}, nan)", "maximum(nan, {a})", "fma({a}, nan, {a})",
                                "maximum({a}, {a} + nan)")]
        groups.append(g)
        old, x = pairs(fewer(t))
        g = Group(f"atomics {t}", {"old": old, "a": x})
        g.cases = [Case(f"{t} atomic_{op}(old, a)", f"atomic_{op}({{y}}, {{a}})", t, init="old")
                   for op in ("add", "max", "min")]
        groups.append(g)
    return groups


def integer_groups() -> list[Group]:
    groups = []
    for t in ("i32", "i64", "u32"):
        a, b = pairs(specials(t))
        g = Group(f"integer {t}", {"a": a, "b": b})
        g.cases = [Case(f"{t} a {op} b", f"{{y}} = {{a}} {op} {{b}}", t) for op in ("/", "%", "<<", ">>")]
        g.cases += [Case(f"{t} mulhi(a, b)", "{y} = mulhi({a}, {b})", t),
                    Case(f"{t} cdiv(a, b)", "{y} = cdiv({a}, {b})", t)]
        if t != "u32":  # abs of the most negative value wraps to itself: a negative divisor (fuzz seed 1530)
            g.cases += [Case(f"{t} cdiv(a, abs(b))", "{y} = cdiv({a}, abs({b}))", t),
                        Case(f"{t} abs(b) < 0", "{y} = abs({b}) < 0", "bool")]
        groups.append(g)
    return groups


def math_groups() -> list[Group]:
    groups = []
    for fn in sorted(vg.APPROX):
        g = Group(f"math {fn}", {"a": np.array(sweep(fn), np.float32)})
        g.cases = [Case(f"{fn}(a)", f"{{y}} = {fn}({{a}})", "f32", function=fn)]
        groups.append(g)
    return groups


def probe_groups() -> list[Group]:
    return cast_groups() + arithmetic_groups() + integer_groups() + math_groups()


def _input_dtype(values: np.ndarray) -> str:
    return "bf16" if values.dtype == np.uint16 else next(t for t, n in vg.NUMPY.items() if np.dtype(n) == values.dtype)


def program(group: Group) -> vg.Program:
    """The kernel of a group as a fuzz program (so that its outputs compare as the fuzz compares them)."""
    n = len(next(iter(group.inputs.values())))
    grid = -(-n // BLOCK)
    p = vg.Program(0, "", grid)
    params, lines = [], ["let i = program_id(0) * B"]
    for name, values in group.inputs.items():
        p.inputs[name] = np.resize(values, grid * BLOCK)  # whole programs: the last one repeats the first values
        params.append(f"{name}: tensor<{_input_dtype(values)}>[N{name}]")
    for k, case in enumerate(group.cases):
        y = f"y{k}"
        rows = case.statement.startswith("{y} = reshape(")
        length = grid * (BLOCK // 8 if rows else BLOCK)
        init = p.inputs[case.init].copy() if case.init else None
        p.outputs[y] = vg.Output(case.dtype, length, klass="approx" if case.function else "exact",
                                 function=case.function, argument="a" if case.function else "", init=init)
        params.append(f"{y}: tensor<{case.dtype}>[N{y}]")
        out_slice = f"{y}[program_id(0) * {BLOCK // 8} :+ {BLOCK // 8}]" if rows else f"{y}[i :+ B]"
        lines.append(case.statement.format(y=out_slice, **{v: f"{v}[i :+ B]" for v in group.inputs}))
    body = "\n".join(f"    {line}" for line in lines)
    p.source = f"@autotune(B in [{BLOCK}])\nkernel probe({', '.join(params)}) {{\n{body}\n}}\n"
    return p


# ------------------------------------------------------------------ instruction probes
@dataclass
class Instruction:
    text: str                          # with %d, %a0
    out: str
    source: str
    values: np.ndarray


def instruction_probes() -> list[Instruction]:
    probes = []
    for src in ("f32", "f64"):
        for dst in ("s32", "u32", "s64", "u64"):
            probes.append(Instruction(f"cvt.rzi.{dst}.{src} %d, %a0;", dst, src, specials(src)))
        for op in ("neg", "abs"):
            probes.append(Instruction(f"{op}.{src} %d, %a0;", src, src, specials(src)))
    probes.append(Instruction("cvt.rn.f32.f64 %d, %a0;", "f32", "f64", specials("f64")))
    probes.append(Instruction("cvt.f64.f32 %d, %a0;", "f64", "f32", specials("f32")))
    return probes


# ------------------------------------------------------------------ running
def modes_to_run(gpu: bool) -> dict:
    from phobos.run.backends import EmulateBackend, select_backend

    arch = select_backend("gpu").arch() if gpu else "sm_90a"

    class EmulateAsGpu(EmulateBackend):
        """The emulator running the code compiled for the GPU's target."""

        def arch(self, index: int = 0) -> str:
            return arch

    modes = {"interpret": "interpret", "emulate": EmulateAsGpu()}
    if gpu:
        modes["gpu"] = "gpu"
    return modes


def run_language(group: Group, modes: dict) -> dict:
    p = program(group)
    results, errors = {}, {}
    for name, mode in modes.items():
        try:
            results[name] = vg.run(p, mode)[0]
        except Exception as error:  # a mode that fails is a finding too
            errors[name] = f"{type(error).__name__}: {error}"
    rows = []
    for k, case in enumerate(group.cases):
        y = f"y{k}"
        rows.append(_row(case.name, "language", p, y, {m: r[y] for m, r in results.items()},
                         [a for a in p.inputs.values()], errors))
    return {"rows": rows, "source": p.source}


def run_instruction(probe: Instruction, modes: dict) -> dict:
    from phobos.run import runtime
    from phobos.run.emulator import Module

    text = elementwise_ptx(probe.text, probe.out, [probe.source])
    n = len(probe.values)
    width = {"s32": np.int32, "u32": np.uint32, "s64": np.int64, "u64": np.uint64, "f32": np.float32,
             "f64": np.float64}[probe.out]
    results, errors = {}, {}
    for name in ("emulate", "gpu"):
        if name not in modes:
            continue
        out = np.zeros(n, width)
        args = [out, probe.values.copy(), n]
        try:
            if name == "gpu":
                runtime.launch(text, "k", (-(-n // 128),), (128,), args)
            else:
                Module(text, "probe.ptx").launch("k", (-(-n // 128),), (128,), args)
            results[name] = out
        except Exception as error:
            errors[name] = f"{type(error).__name__}: {error}"
    p = vg.Program(0, text, 1, {"a": probe.values})
    p.outputs["y"] = vg.Output(probe.out, n)  # exact: compared bit for bit
    return _row(probe.text.split(" %d")[0], "instruction", p, "y", results, [probe.values], errors)


def _bits(values: np.ndarray) -> list:
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        return [int(v) for v in values]
    return [int(v) for v in values.view(vg.UINT[values.itemsize])]


def _row(name: str, kind: str, p: vg.Program, y: str, results: dict, inputs: list, errors: dict) -> dict:
    spec = p.outputs[y]
    length = spec.length
    modes = list(results)
    row = {"name": name, "kind": kind, "dtype": spec.dtype, "class": spec.klass, "elements": length,
           "errors": errors, "inputs": [_bits(a) for a in inputs],
           "results": {m: _bits(r) for m, r in results.items()}, "disagreements": {}}
    for i, a in enumerate(modes):
        for b in modes[i + 1:]:
            bad = vg.disagreements(p, y, results[b], results[a], modes=(a, b))
            row["disagreements"][f"{a}/{b}"] = [int(v) for v in bad]
    if spec.klass == "approx" and "gpu" in results:
        row["error"] = _approx_error(p, y, results["gpu"], results["emulate"])
    return row


def _approx_error(p: vg.Program, y: str, gpu: np.ndarray, emulated: np.ndarray) -> dict:
    """The largest ulp and absolute error of the GPU against the emulator, inside the function's fuzz
    domain and outside it (numbers only)."""
    spec = p.outputs[y]
    x = p.inputs[spec.argument][:spec.length].astype(np.float64)
    lo, hi = vg.APPROX[spec.function][0]
    g, e = gpu.astype(np.float64), emulated.astype(np.float64)
    numbers = np.isfinite(g) & np.isfinite(e)
    out = {}
    for where, inside in (("inside", (x >= lo) & (x <= hi)), ("outside", ~((x >= lo) & (x <= hi)))):
        pick = numbers & inside
        if not pick.any():
            continue
        ulps = vg.ulps_apart(g[pick], e[pick])
        absolute = np.abs(g[pick] - e[pick])
        k = int(np.argmax(ulps))
        out[where] = {"max_ulps": int(ulps[k]), "at": float(x[pick][k]), "max_abs": float(absolute.max()),
                      "abs_at": float(x[pick][int(np.argmax(absolute))])}
    return out


# ------------------------------------------------------------------ facts
# (probe row, input bits, what the rule in question is) - the GPU's bits for the cases a rule hangs on.
FACTS = [
    ("f64 a - b", (0x7FF0 << 48, 0x7FF0 << 48), "an f64 NaN made of numbers (inf - inf)"),
    ("f64 a * b", (0x0, 0x7FF0 << 48), "an f64 NaN made by mul (0 * inf)"),
    ("f64 a / b", (0x0, 0x0), "an f64 NaN made by div (0 / 0)"),
    ("f64 a / b", (0x7FF0 << 48, 0xFFF0 << 48), "an f64 NaN made by div (inf / -inf)"),
    ("f64 sqrt(a)", (0xBFF0 << 48,), "an f64 NaN made by sqrt (sqrt(-1))"),
    ("f64 a - b", (0x3FF0 << 48, 0x7FF8_0000_0000_0ABC), "f64 sub: the sign of a NaN b (1 - NaN)"),
    ("f64 a - b", (0xFFF8 << 48, 0x7FF8_0000_0000_0ABC), "f64 sub of two NaNs: which one"),
    ("f64 a + b", (0x7FF4 << 48, 0xFFF8_0000_0000_0ABC), "f64 add of two NaNs: which one"),
    ("f64 a * b", (0x3FF0 << 48, 0x7FF4 << 48), "f64 mul: a signaling NaN quieted"),
    ("f64 a / b", (0x3FF0 << 48, 0x7FF4 << 48), "f64 div: 1 / sNaN"),
    ("f64 a / b", (0x7FF4 << 48, 0xFFF8_0000_0000_0ABC), "f64 div of two NaNs: which one"),
    ("f64 fma(a, b, c)", (0x3FF0 << 48, 0x7FF4 << 48, 0xFFF8_0000_0000_0ABC), "f64 fma: b or c's NaN"),
    ("f64 maximum(a, b)", (0x7FF4 << 48, 0xFFF8_0000_0000_0ABC), "f64 max of two NaNs"),
    ("f64 max of rows of 8", None, "f64 max of a row of one NaN (the first such row)"),
    ("f64(f32)", (0xFFC00ABC,), "f32 -> f64 of a negative NaN"),
    ("f32(f64)", (0xFFF8_0000_0000_0ABC,), "f64 -> f32: the sign of a NaN"),
    ("f32(f64)", (0x7FFC_0000_2000_0000,), "f64 -> f32: the payload's top bits"),
    ("f32 atomic_add(old, a)", (0x7FC00000, 0x3F800000), "atom.add.f32: old NaN + 1"),
    ("f32 atomic_add(old, a)", (0x3F800000, 0x7FA00000), "atom.add.f32: 1 + sNaN"),
    ("f32 atomic_add(old, a)", (0x7F800000, 0xFF800000), "atom.add.f32: inf + -inf"),
    ("f64 atomic_add(old, a)", (0x7FF0 << 48, 0xFFF0 << 48), "atom.add.f64: inf + -inf"),
    ("f64 atomic_add(old, a)", (0x7FF8 << 48, 0x7FF4 << 48), "atom.add.f64: qNaN + sNaN"),
    ("f64 atomic_add(old, a)", (0x3FF0 << 48, 0x7FF4 << 48), "atom.add.f64: 1 + sNaN"),
    ("cvt.rzi.u64.f32", (0x7FC00000,), "cvt.rzi.u64.f32 of NaN"),
    ("cvt.rzi.s32.f64", (0x7FF8 << 48,), "cvt.rzi.s32.f64 of NaN"),
    ("neg.f64", (0x7FF4 << 48,), "neg.f64 of a signaling NaN"),
    ("f64 a - nan", (0x3FF0 << 48,), "f64 1 - NaN literal: the sign (ptxas folds the immediate)"),
    ("f64 a - nan", (0xFFF8_0000_0000_0ABC,), "f64 NaN - NaN literal: which one"),
    ("f64 a + nan", (0xFFF8_0000_0000_0ABC,), "f64 NaN + NaN literal: which one"),
    ("f64 nan + a", (0xFFF8_0000_0000_0ABC,), "f64 NaN literal + NaN: which one"),
    ("f64 nan - a", (0xFFF8_0000_0000_0ABC,), "f64 NaN literal - NaN: which one"),
    ("f64 maximum(a, nan)", (0xFFF8_0000_0000_0ABC,), "f64 maximum(NaN, NaN literal)"),
    ("f64 maximum(a, a + nan)", (0xFFF8_0000_0000_0ABC,), "f64 maximum(x, x + NaN literal), x NaN"),
    ("i32 cdiv(a, abs(b))", (31, 0x8000_0000), "i32 cdiv(31, abs(INT_MIN)): 0 if abs wraps"),
    ("i32 abs(b) < 0", (0, 0x8000_0000), "i32 abs(INT_MIN) < 0"),
    ("neg.f32", (0x7FA00000,), "neg.f32 of a signaling NaN"),
]


def facts(rows: list[dict]) -> list[dict]:
    by_name = {r["name"]: r for r in rows}
    out = []
    for name, inputs, what in FACTS:
        row = by_name.get(name)
        if row is None or not row["results"]:
            continue
        if inputs is None:
            nan_rows = [i for i in range(row["elements"]) if all(
                _is_nan_bits(row["inputs"][0][8 * i + k], 8) for k in range(8))] if "rows" in name else []
            if not nan_rows:
                continue
            index = nan_rows[0]
        else:
            index = next((i for i in range(row["elements"])
                          if tuple(col[i] for col in row["inputs"][:len(inputs)]) == inputs), None)
            if index is None:
                continue
        out.append({"what": what, "probe": name, "index": index,
                    "inputs": [hex(col[index]) for col in row["inputs"]][:len(inputs or ())] or None,
                    **{m: hex(r[index]) for m, r in row["results"].items()}})
    return out


def _is_nan_bits(bits: int, width: int) -> bool:
    exp, man = (0x7FF, 52) if width == 8 else (0xFF, 23)
    return (bits >> man) & exp == exp and bits & ((1 << man) - 1) != 0


# ------------------------------------------------------------------ report
def print_report(rows: list[dict], found: list[dict], modes: list[str], seconds: float) -> None:
    pairs_ = [f"{a}/{b}" for i, a in enumerate(modes) for b in modes[i + 1:]]
    print(f"probe_numerics: {len(rows)} probes, {sum(r['elements'] for r in rows)} elements, "
          f"modes {', '.join(modes)}, in {seconds:.0f} s")
    print(f"{'probe':<28} {'kind':<11} {'elements':>8} " + " ".join(f"{p:>18}" for p in pairs_) + "  first difference")
    for r in rows:
        counts = [len(r["disagreements"].get(p, [])) if p in r["disagreements"] else "-" for p in pairs_]
        first = ""
        for p in pairs_:
            bad = r["disagreements"].get(p)
            if bad:
                i = bad[0]
                a, b = p.split("/")
                first = (f"[{', '.join(hex(c[i]) for c in r['inputs'])}] {a} {hex(r['results'][a][i])}, "
                         f"{b} {hex(r['results'][b][i])}")
                break
        if r["errors"]:
            first = "; ".join(f"{m}: {e.splitlines()[0][:120]}" for m, e in r["errors"].items())
        if "error" in r:
            first = (first + "  " if first else "") + ", ".join(
                f"{w} {e['max_ulps']} ulp (x={e['at']:.6g}) / {e['max_abs']:.3g} abs" for w, e in r["error"].items())
        print(f"{r['name']:<28} {r['kind']:<11} {r['elements']:>8} " + " ".join(f"{c:>18}" for c in counts)
              + f"  {first}")
    if found:
        print("facts (the bits each mode gives):")
        for f in found:
            values = ", ".join(f"{m} {f[m]}" for m in modes if m in f)
            inputs = f" ({', '.join(f['inputs'])})" if f["inputs"] else ""
            print(f"  {f['what']:<48} {f['probe']}{inputs}: {values}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="What each mode computes on the special values.")
    gpu = parser.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", dest="gpu", action="store_true", default=None, help="also run on the GPU")
    gpu.add_argument("--no-gpu", dest="gpu", action="store_false", help="interpret and emulate only")
    parser.add_argument("--json", type=Path, help="write every input and result here")
    parser.add_argument("--only", help="run the probes whose name contains this text")
    args = parser.parse_args(argv)
    from phobos.run import runtime

    available, why = runtime.gpu_available()
    if args.gpu and not available:
        parser.error(f"--gpu: no GPU here ({why})")
    use_gpu = available if args.gpu is None else args.gpu
    os.environ.setdefault("PHOBOS_CACHE_DIR", tempfile.mkdtemp(prefix="phobos-probe-cache-"))
    modes = modes_to_run(use_gpu)
    started, rows, sources = time.perf_counter(), [], {}
    for group in probe_groups():
        if args.only and not any(args.only in c.name for c in group.cases) and args.only not in group.name:
            continue
        done = run_language(group, modes)
        rows += done["rows"]
        sources[group.name] = done["source"]
    for probe in instruction_probes():
        if not args.only or args.only in probe.text:
            rows.append(run_instruction(probe, modes))
    found = facts(rows)
    print_report(rows, found, list(modes), time.perf_counter() - started)
    if args.json is not None:
        args.json.write_text(json.dumps({"modes": list(modes), "rows": rows, "facts": found, "sources": sources}))
    return 1 if any(r["errors"] or any(r["disagreements"].values()) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
