# A generator of random valid kernels that compute on the hard values of every
# dtype, for the differential fuzz of the three modes (tests/test_differential_
# fuzz.py in CI, tools/fuzz_modes.py on the GPU machine), and the comparison of
# their results.
#
# Where tests/kernel_generator.py pokes at the edges of tensors with exact small
# values, this one pokes at the values: every dtype (f32 f64 f16 bf16 i32 i64
# u32 i8 i16 bool), every cast and bitcast, the operators, the element-wise and
# reducing builtins, atomics, and inputs full of NaNs (quiet, signaling, of
# either sign, with payloads), infinities, subnormals, signed zeros and the
# integers at the ends of their ranges.  A program is one kernel of a few
# statements, each writing its own output tensor; every program instance (grid
# 1 or 2) writes its own slices.  Plain numpy randomness (no Hypothesis, which
# the GPU machine lacks): a program is a function of its seed.
#
# Each output has a class that says how two modes' results must agree:
#   exact   bit for bit: element-wise arithmetic, casts, min/max and their
#           reductions, comparisons, selections, moves, integer operations,
#           atomics on distinct elements.
#   approx  within the documented bound of an `.approx` function (docs/
#           language.md, "Accuracy of math functions": ulps of the result, or
#           an absolute error, and never less than 2^-126 absolute, below which
#           ulps are those of subnormals), a NaN bit for bit; the argument is
#           a dedicated input of the function's domain, so the bound applies
#           to the result directly.
#   order   sum, cumsum, cumprod and dot, whose rounding, and the payload of
#           a NaN, depend on the order the GPU combines in: they run on a
#           dedicated input of values whose sums and products are exact in any
#           order, so numbers and infinities compare bit for bit and a NaN
#           with any NaN.
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

import phobos
from phobos import constants

FLOATS = ("f32", "f64")
INTS = ("i32", "i64", "u32")
HALVES = ("f16", "bf16")
SMALL_INTS = ("i8", "i16")
NUMPY = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16, "i32": np.int32,
         "i64": np.int64, "u32": np.uint32, "i8": np.int8, "i16": np.int16, "bool": np.bool_}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
WIDTH = {"i32": 32, "i64": 64, "u32": 32}
BITCAST_PARTNERS = {"f32": ("i32", "u32"), "f64": ("i64",), "i32": ("f32",), "u32": ("f32",), "i64": ("f64",)}

# The hard values, as bit patterns of each float format.
SPECIAL_BITS = {
    "f32": [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0x7FA00000,
            0xFF800001, 0x7FC00123, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
            0x3F800000, 0xBF800000, 0x3F000000, 0x4B800000, 0x4F000000, 0xCF000000, 0x5F000000],
    "f64": [0, 1 << 63, 0x7FF0 << 48, 0xFFF0 << 48, 0x7FF8 << 48, 0xFFF8 << 48, 0x7FFF_FFFF_FFFF_FFFF,
            0x7FF4 << 48, 0x7FF0_0000_0000_0001, 0xFFF8_0000_0000_0ABC, 1, (1 << 63) | 1, 0x000F_FFFF_FFFF_FFFF,
            0x0010 << 48, 0x7FEF_FFFF_FFFF_FFFF, 0x3FF0 << 48, 0xBFF0 << 48, 0x43E0 << 48, 0xC3E0 << 48,
            0x41E0 << 48, 0x4330 << 48],
    "f16": [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7FFF, 0x7D00, 0x0001, 0x8001, 0x03FF, 0x0400,
            0x7BFF, 0xFBFF, 0x3C00, 0xBC00],
    "bf16": [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7FFF, 0x7FA0, 0x0001, 0x8001, 0x007F, 0x0080,
             0x7F7F, 0xFF7F, 0x3F80, 0xBF80],
}
SPECIAL_INTS = {
    "i32": [0, 1, -1, 2, -2, 31, 32, 33, 63, 64, 2**31 - 1, -2**31, 2**31 - 2, -2**31 + 1, 255, 65535, 2**24 + 1],
    "i64": [0, 1, -1, 2, 31, 32, 63, 64, 65, 2**63 - 1, -2**63, 2**32, 2**32 - 1, -2**31, 2**31, 2**53 + 1],
    "u32": [0, 1, 2, 31, 32, 33, 2**32 - 1, 2**31, 2**31 - 1, 2**32 - 2, 65535, 2**24 + 1],
    "i8": [0, 1, -1, 127, -128, 7, 8],
    "i16": [0, 1, -1, 32767, -32768, 15, 16],
}

# The `.approx` functions: the domain of their dedicated input, and their bound
# (ulps, ulps per unit of |x|, absolute error, absolute error per unit of |x|),
# from docs/language.md's accuracy table.
APPROX = {
    "exp2": ((-130.0, 130.0), (2, 0.0, 0.0, 0.0)),
    "exp": ((-90.0, 90.0), (2, 2.0, 0.0, 0.0)),
    "log2": ((0.0, 1e30), (2, 0.0, 2.0 ** -22, 0.0)),
    "log": ((0.0, 1e30), (2, 0.0, 2.0 ** -22, 0.0)),
    "rsqrt": ((0.0, 1e30), (2, 0.0, 0.0, 0.0)),
    "tanh": ((-10.0, 10.0), (16, 0.0, 0.0, 0.0)),
    "sigmoid": ((-90.0, 90.0), (4, 2.0, 0.0, 0.0)),
    "erf": ((-5.0, 5.0), (0, 0.0, 5e-7, 0.0)),
    "gelu": ((-10.0, 10.0), (4, 0.0, 5e-7, 3e-7)),
    "sin": ((-3.14159, 3.14159), (0, 0.0, 2 ** -20.5, 0.0)),
    "cos": ((-3.14159, 3.14159), (0, 0.0, 2 ** -20.5, 0.0)),
}


# The functions two modes (in the order of `disagreements`'s `modes`) compute bit for bit alike:
# the emulator gives the GPU's ex2, lg2 and rsqrt .approx.f32 bits (its model of the GPU's
# multifunction unit, docs/emulator.md), and the interpreter shares that model for exp2, exp, log2,
# log and rsqrt; in the kernel, tanh, sigmoid, erf and gelu are ex2 and IEEE operations, which the
# emulator rounds as the GPU does.  sin and cos keep their bounds in every pair.
BIT_EXACT = {("interpret", "emulate"): {"exp2", "exp", "log2", "log", "rsqrt"},
             ("interpret", "gpu"): {"exp2", "exp", "log2", "log", "rsqrt"},
             ("emulate", "gpu"): {"exp2", "exp", "log2", "log", "rsqrt", "tanh", "sigmoid", "erf", "gelu"}}


@dataclass
class Output:
    """An output tensor: its dtype, length, initial values and how modes must agree on it."""

    dtype: str
    length: int
    klass: str = "exact"               # exact, approx, order
    function: str = ""                 # approx: the function
    argument: str = ""                 # approx: the input it is applied to
    init: np.ndarray | None = None


@dataclass
class Program:
    """A generated kernel: its source, grid, inputs and outputs (in parameter order)."""

    seed: int
    source: str
    grid: int
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: dict[str, Output] = field(default_factory=dict)

    def arguments(self) -> list[np.ndarray]:
        """Fresh arrays for one run: the inputs, then the outputs with their initial values."""
        out = [a.copy() for a in self.inputs.values()]
        for o in self.outputs.values():
            out.append(o.init.copy() if o.init is not None else np.zeros(o.length, NUMPY[o.dtype]))
        return out


def values(rng: np.random.Generator, dtype: str, n: int, domain: tuple[float, float] | None = None) -> np.ndarray:
    """`n` values of `dtype`, a third of them hard ones."""
    np_type = NUMPY[dtype]
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(np.bool_)
    if dtype in SPECIAL_INTS:
        info = np.iinfo(np_type)
        special = np.array(SPECIAL_INTS[dtype], np.int64 if dtype != "u32" else np.uint64)
        wide = rng.integers(info.min, info.max, n, dtype=np.int64 if dtype != "u32" else np.uint64, endpoint=True)
        small = rng.integers(-9 if info.min < 0 else 0, 10, n)
        pick = rng.integers(0, 3, n)
        out = np.where(pick == 0, special[rng.integers(0, len(special), n)].astype(np.int64),
                       np.where(pick == 1, small, wide.astype(np.int64)))
        return out.astype(np_type)
    size = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2}[dtype]
    uint = UINT[size]
    special = np.array(SPECIAL_BITS[dtype], np.uint64).astype(uint)
    randbits = rng.integers(0, 2 ** (8 * size), n, dtype=np.uint64, endpoint=False).astype(uint)
    if domain is not None:
        lo, hi = domain
        number = rng.uniform(lo, hi, n)
    else:
        number = rng.integers(-12, 13, n) * np.exp2(rng.integers(-3, 4, n).astype(np.float64))
    as_float = {"f32": np.float32, "f64": np.float64, "f16": np.float16}.get(dtype)
    if dtype == "bf16":
        number_bits = (number.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    else:
        number_bits = number.astype(as_float).view(uint)
    pick = rng.integers(0, 6, n)
    bits = np.where(pick <= 1, special[rng.integers(0, len(special), n)],
                    np.where(pick == 2, randbits, number_bits)).astype(uint)
    return bits if dtype == "bf16" else bits.view(np_type)


class _Expressions:
    """Random expressions of a dtype over the tiles of one statement ([B] elements)."""

    def __init__(self, rng: np.random.Generator, inputs: dict[str, str], block: str):
        self.rng = rng
        self.inputs = inputs          # input name -> dtype
        self.block = block            # the slice of a tile: "pid * B :+ B"

    def pick(self, options):
        return options[self.rng.integers(0, len(options))]

    def load(self, dtype: str, plain: bool = False) -> str | None:
        """A load of an input whose values are of `dtype` (16-bit floats for f32, small ints for i32;
        `plain`: only of `dtype` itself)."""
        sources = {"f32": ("f32",) + HALVES, "i32": ("i32",) + SMALL_INTS}.get(dtype, (dtype,))
        sources = (dtype,) if plain else sources
        names = [n for n, t in self.inputs.items() if t in sources]
        return f"{self.pick(names)}[{self.block}]" if names else None

    def literal(self, dtype: str) -> str:
        if dtype == "f64":
            return self.pick(["0.0", "-0.0", "1.0", "-1.0", "0.5", "3.0", "1e-40", "inf", "-inf", "nan",
                              "65504.0", "1e30", "-2.5"])
        if dtype == "f32":  # one that fits f16 and bf16 too: an "f32" operand may be a 16-bit value
            return self.pick(["0.0", "-0.0", "1.0", "-1.0", "0.5", "3.0", "1e-40", "inf", "-inf", "nan",
                              "65504.0", "-65504.0", "-2.5"])
        if dtype == "u32":
            return self.pick(["0", "1", "3", "31", "32", "4294967295", "2147483648"])
        if dtype == "i64":
            return self.pick(["0", "1", "-1", "3", "63", "64", "-9223372036854775807", "9223372036854775807"])
        return self.pick(["0", "1", "-1", "3", "31", "32", "-2147483648", "2147483647"])

    # kinds written from a template: {e} an operand of the dtype, {c} a condition, {a|b|...} one of these
    TEMPLATES = {
        "intdiv": "({e} {/|%} {e})",  # a zero divisor counts as 1; never a literal 0
        "shift": "({e} {<<|>>} {e})",  # a run-time amount: past the width shifts every bit out
        "neg": "(-{e})", "abs": "abs({e})", "sqrt": "sqrt({e})", "where": "where({c}, {e}, {e})",
        "fma": "fma({e}, {e}, {e})", "round": "{floor|ceil|round|trunc}({e})",
        "mulhi": "mulhi({e}, {e})", "cdiv": "cdiv({e}, {e})",
    }

    def template(self, kind: str, dtype: str, depth: int, plain: bool = False) -> str:
        def fill(match: re.Match) -> str:
            word = match.group(1)
            if word == "e":
                return self.expr(dtype, depth, plain)
            return self.condition(depth) if word == "c" else self.pick(word.split("|"))
        return re.sub(r"\{([^{}]+)\}", fill, self.TEMPLATES[kind])

    def expr(self, dtype: str, depth: int, plain: bool = False) -> str:
        """An expression of compute dtype `dtype` (f32 f64 i32 i64 u32 bool), never literals alone;
        `plain`: of that dtype itself, not a 16-bit float (which has no bits to bitcast): an operation
        on 16-bit values alone keeps their format, so every operand is plain too."""
        if dtype == "bool":
            return self.condition(depth)
        if depth <= 0 or self.rng.random() < 0.25:
            return self.leaf(dtype, depth, plain)
        kind = self.pick([k for k in self.KINDS[dtype] if not (plain and k in self.OF_16_BITS)])
        if kind in self.TEMPLATES:
            return self.template(kind, dtype, depth - 1, plain)
        return getattr(self, "k_" + kind)(dtype, depth - 1, plain)

    def operand_pair(self, dtype: str, depth: int, plain: bool = False) -> tuple[str, str]:
        a = self.expr(dtype, depth, plain)
        b = self.literal(dtype) if self.rng.random() < 0.5 else self.expr(dtype, depth, plain)
        return (a, b) if self.rng.random() < 0.5 else (b, a)

    def leaf(self, dtype: str, depth: int, plain: bool = False) -> str:
        load = self.load(dtype, plain)
        if load is not None and self.rng.random() < 0.2:  # a literal of the dtype, taken by a load
            return f"({load} {self.pick(['+', '*', '-'] if dtype in FLOATS else ['+', '^', '|'])} {self.literal(dtype)})"
        if load is not None and (self.rng.random() < 0.7 or depth <= 0):
            return load
        if dtype == "i32" and self.rng.random() < 0.3:
            return "arange(B)"
        return self.k_cast(dtype, 0) if load is None or self.rng.random() < 0.6 else self.k_bitcast(dtype, 0)

    # -- the kinds of expression, per dtype
    KINDS = {
        "f32": ["arith", "arith", "neg", "abs", "minmax", "where", "fma", "round", "sqrt", "cast", "cast",
                "bitcast", "half", "reduce_extreme", "argument_of_16"],
        "f64": ["arith", "arith", "neg", "abs", "minmax", "where", "fma", "round", "sqrt", "cast", "bitcast",
                "reduce_extreme"],
        "i32": ["arith", "intdiv", "bits", "bits", "shift", "shift", "neg", "abs", "minmax", "where", "cast",
                "bitcast", "mulhi", "cdiv", "reduce_extreme", "argminmax"],
        "i64": ["arith", "intdiv", "bits", "bits", "shift", "shift", "neg", "abs", "minmax", "where", "cast",
                "bitcast", "mulhi", "cdiv", "reduce_extreme"],
        "u32": ["arith", "intdiv", "bits", "bits", "shift", "shift", "neg", "minmax", "where", "cast", "bitcast",
                "mulhi", "cdiv", "reduce_extreme"],
    }

    # the kinds that may give a 16-bit value where f32 is asked for; each kind's method takes (dtype,
    # depth, plain) and makes operands of the result's dtype plain where the result must be
    OF_16_BITS = ("half", "argument_of_16")

    def k_arith(self, dtype, depth, plain=False):
        a, b = self.operand_pair(dtype, depth, plain)
        return f"({a} {self.pick(['+', '-', '*', '/'] if dtype in FLOATS else ['+', '-', '*'])} {b})"

    def k_bits(self, dtype, depth, plain=False):
        if self.rng.random() < 0.2:
            return f"(~{self.expr(dtype, depth, plain)})"
        a, b = self.operand_pair(dtype, depth, plain)
        return f"({a} {self.pick(['&', '|', '^'])} {b})"

    def k_minmax(self, dtype, depth, plain=False):
        a, b = self.operand_pair(dtype, depth, plain)
        return f"{self.pick(['maximum', 'minimum'])}({a}, {b})"

    def k_cast(self, dtype, depth, plain=False):
        frm = self.pick([t for t in FLOATS + INTS if t != dtype])
        return f"{dtype}({self.expr(frm, depth)})"

    def k_bitcast(self, dtype, depth, plain=False):
        frm = self.pick(BITCAST_PARTNERS[dtype])
        return f"bitcast({self.expr(frm, depth, plain=True)}, {dtype})"

    def k_half(self, dtype, depth, plain=False):  # rounded through a 16-bit format, used as f32
        return f"{self.pick(HALVES)}({self.expr(self.pick(FLOATS + INTS), depth)})"

    def k_argument_of_16(self, dtype, depth, plain=False):  # 16-bit values in f32 arithmetic
        half = [f"{n}[{self.block}]" for n, t in self.inputs.items() if t in HALVES]
        value = self.pick(half) if half else self.k_half(dtype, depth)
        return f"({value} {self.pick(['+', '*', '-'])} {self.expr(dtype, depth)})"

    def k_reduce_extreme(self, dtype, depth, plain=False):  # a scalar, broadcast by the operation around it
        scalar = f"{self.pick(['max', 'min'])}({self.expr(dtype, depth, plain)})"
        return f"({self.expr(dtype, depth, plain)} {self.pick(['+', '*'] if dtype not in INTS else ['+', '^'])} {scalar})"

    def k_argminmax(self, dtype, depth, plain=False):
        x = self.expr(self.pick(FLOATS + INTS), depth)
        return f"(arange(B) + {self.pick(['argmax', 'argmin'])}({x}))"

    def condition(self, depth: int) -> str:
        r = self.rng.random()
        if r < 0.15 and depth > 0:
            return f"({self.condition(depth - 1)} {self.pick(['&&', '||'])} {self.condition(depth - 1)})"
        if r < 0.2 and depth > 0:
            return f"!({self.condition(depth - 1)})"
        dtype = self.pick(FLOATS + INTS + ("f32",))
        a, b = self.operand_pair(dtype, max(depth - 1, 0))
        return f"({a} {self.pick(['==', '!=', '<', '<=', '>', '>='])} {b})"


def generate(seed: int) -> Program:
    """The program of `seed` (see the module header)."""
    rng = np.random.default_rng(seed)
    grid = int(rng.choice([1, 1, 2]))
    block = int(rng.choice([1, 2, 3, 4, 8, 16, 32, 33, 64, 96]))
    program = Program(seed, "", grid)
    types = {}
    for i in range(int(rng.integers(2, 5))):
        dtype = str(rng.choice(FLOATS + INTS + HALVES + SMALL_INTS + ("f32", "f64", "i32")))
        name = f"x{i}"
        types[name] = dtype
        program.inputs[name] = values(rng, dtype, grid * block)
    exprs = _Expressions(rng, types, "pid * B :+ B")
    lines: list[str] = []
    for k in range(int(rng.integers(1, 5))):
        kind = rng.choice(["store", "store", "store", "store", "atomic", "approx", "order", "rows", "move"])
        _STATEMENTS[str(kind)](program, exprs, rng, block, grid, lines, k)
    params = [f"{n}: tensor<{t}>[N{n}]" for n, t in types.items()]
    params += [f"{n}: tensor<{o.dtype}>[N{n}]" for n, o in program.outputs.items()]
    extra = [n for n in program.inputs if n not in types]
    params[len(types):len(types)] = [f"{n}: tensor<{_input_dtype(program.inputs[n])}>[N{n}]" for n in extra]
    body = "\n".join(f"    {line}" for line in ["let pid = program_id(0)"] + lines)
    program.source = f"@autotune(B in [{block}])\nkernel fuzz({', '.join(params)}) {{\n{body}\n}}\n"
    return program


def _input_dtype(array: np.ndarray) -> str:
    return "bf16" if array.dtype == np.uint16 else next(t for t, n in NUMPY.items() if np.dtype(n) == array.dtype)


def _output(program: Program, rng, dtype: str, length: int, **kw) -> str:
    name = f"y{len(program.outputs)}"
    program.outputs[name] = Output(dtype, length, init=values(rng, dtype, length), **kw)
    return name


def _store(program, exprs, rng, block, grid, lines, k):
    """y[...] = an expression, stored into a tensor of its dtype or of a narrower one."""
    dtype = str(rng.choice(FLOATS + INTS + ("f32", "i32", "bool")))
    stored = {"f32": ["f32", "f32", "f16", "bf16"], "i32": ["i32", "i32", "i8", "i16"]}.get(dtype, [dtype])
    out = _output(program, rng, str(rng.choice(stored)), grid * block)
    lines.append(f"{out}[pid * B :+ B] = {exprs.expr(dtype, int(rng.integers(1, 4)))}")


def _atomic(program, exprs, rng, block, grid, lines, k):
    """An atomic on distinct elements: the old values are the initial ones, so the result is exact."""
    dtype = str(rng.choice(("f32", "f64", "i32", "u32", "i64")))
    ops = ["add", "max", "min"] + (["and", "or", "xor"] if dtype in INTS else [])
    out = _output(program, rng, dtype, grid * block)
    lines.append(f"atomic_{rng.choice(ops)}({out}[pid * B :+ B], {exprs.expr(dtype, int(rng.integers(1, 3)))})")


def _approx(program, exprs, rng, block, grid, lines, k):
    """y = fn(a dedicated input of the function's domain)."""
    fn = str(rng.choice(sorted(APPROX)))
    name = f"a{k}"
    program.inputs[name] = values(rng, "f32", grid * block, APPROX[fn][0])
    out = _output(program, rng, "f32", grid * block, klass="approx", function=fn, argument=name)
    lines.append(f"{out}[pid * B :+ B] = {fn}({name}[pid * B :+ B])")


def _order(program, exprs, rng, block, grid, lines, k):
    """sum, cumsum, cumprod or dot of a dedicated input of values whose sums (small multiples of 1/2)
    and products (powers of 2) are exact in any order, with NaNs and infinities among them."""
    kind = str(rng.choice(["sum", "cumsum", "cumprod", "dot"]))
    if kind == "dot":
        _dot(program, rng, block, grid, lines, k)
        return
    dtype = str(rng.choice(FLOATS + HALVES))
    name = f"s{k}"
    program.inputs[name] = exact_terms(rng, dtype, grid * block, products=kind == "cumprod")
    result = "f64" if dtype == "f64" else "f32"
    if kind == "sum":
        out = _output(program, rng, result, grid, klass="order")
        lines.append(f"{out}[pid] = sum({name}[pid * B :+ B])")
        return
    out = _output(program, rng, result, grid * block, klass="order")
    lines.append(f"{out}[pid * B :+ B] = {kind}({name}[pid * B :+ B])")


def _dot(program, rng, block, grid, lines, k):
    operand = str(rng.choice(["f32", "f64", "f16", "bf16"]))
    m, kk, n = (int(rng.choice([1, 2, 4, 8, 16])) for _ in range(3))
    a, b = f"d{k}a", f"d{k}b"
    program.inputs[a] = exact_terms(rng, operand, grid * m * kk, products=False)
    program.inputs[b] = exact_terms(rng, operand, grid * kk * n, products=False)
    result = "f64" if operand == "f64" else "f32"
    out = _output(program, rng, result, grid * m * n, klass="order")
    lhs = f"reshape({a}[pid * {m * kk} :+ {m * kk}], [{m}, {kk}])"
    rhs = f"reshape({b}[pid * {kk * n} :+ {kk * n}], [{kk}, {n}])"
    lines.append(f"{out}[pid * {m * n} :+ {m * n}] = reshape(dot({lhs}, {rhs}), [{m * n}])")


def exact_terms(rng: np.random.Generator, dtype: str, n: int, products: bool) -> np.ndarray:
    """Values whose sums (multiples of 1/2 up to 8 in size) or products (0 and powers of 2 from 1/2 to
    2, never past the range in 128 factors) come out exact in any order, one in ten a NaN (quiet or
    signaling, either sign) or an infinity.  No -0.0: which zero a sum of zeros gives depends on the
    order (and on the padding of a tile, which adds +0.0)."""
    numbers = [0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0] if products else list(np.arange(-16, 17) / 2.0)
    x = np.array(numbers)[rng.integers(0, len(numbers), n)]
    x = np.where(x == 0, 0.0, x)
    np_type = np.dtype(NUMPY[dtype])
    uint = UINT[np_type.itemsize]
    number_bits = (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16) if dtype == "bf16" \
        else x.astype(np_type).view(uint)
    bits = np.where(rng.random(n) < 0.1, _special_values(rng, dtype, n), number_bits).astype(uint)
    return bits if dtype == "bf16" else bits.view(np_type)


def _special_values(rng, dtype: str, n: int) -> np.ndarray:
    """NaNs (of several payloads and both signs) and infinities, as bit patterns of `dtype`."""
    table = {"f32": [0x7FC00000, 0xFFC00000, 0x7FA00000, 0x7FFFFFFF, 0x7F800000, 0xFF800000],
             "f64": [0x7FF8 << 48, 0xFFF8 << 48, 0x7FF4 << 48, 0x7FF0_0000_0000_0001, 0x7FF0 << 48, 0xFFF0 << 48],
             "f16": [0x7E00, 0xFE00, 0x7D00, 0x7FFF, 0x7C00, 0xFC00],
             "bf16": [0x7FC0, 0xFFC0, 0x7FA0, 0x7FFF, 0x7F80, 0xFF80]}[dtype]
    return np.array(table, np.uint64)[rng.integers(0, len(table), n)]


def _rows(program, exprs, rng, block, grid, lines, k):
    """A max or min along one axis of the tile seen as rows (reductions of layouts with padding)."""
    rows = int(rng.choice([r for r in (1, 2, 3, 4, 8) if block % r == 0]))
    cols = block // rows
    dtype = str(rng.choice(FLOATS + INTS))
    axis = int(rng.integers(0, 2))
    length = rows if axis == 1 else cols
    out = _output(program, rng, dtype, grid * length)
    red = str(rng.choice(["max", "min", "argmax", "argmin"]))
    if red.startswith("arg"):
        program.outputs[out] = Output("i32", grid * length, init=values(rng, "i32", grid * length))
    x = exprs.expr(dtype, int(rng.integers(0, 3)))
    lines.append(f"{out}[pid * {length} :+ {length}] = reshape({red}(reshape({x}, [{rows}, {cols}]), "
                 f"axis={axis}), [{length}])")


def _move(program, exprs, rng, block, grid, lines, k):
    """Data movement: reshape, transpose, join and split, concat - every bit kept."""
    dtype = str(rng.choice(FLOATS + INTS + ("f32",)))
    x, y = exprs.expr(dtype, 1), exprs.expr(dtype, 1)
    out = _output(program, rng, dtype, grid * block)
    rows = int(rng.choice([r for r in (1, 2, 4) if block % r == 0]))
    kind = str(rng.choice(["trans", "split", "concat"]))
    if kind == "trans":
        value = f"reshape(trans(reshape({x}, [{rows}, {block // rows}])), [B])"
    elif kind == "split":
        value = f"split(join({x}, {y}))"
        lines.append(f"let (p{k}, q{k}) = {value}")
        value = f"where({exprs.condition(1)}, p{k}, q{k})"
    else:
        half = block // 2
        if half == 0:
            value = x
        else:
            value = f"concat(({x})[{block - half} :+ {half}], ({y})[0 :+ {block - half}])"
    lines.append(f"{out}[pid * B :+ B] = {value}")


_STATEMENTS = {"store": _store, "atomic": _atomic, "approx": _approx, "order": _order, "rows": _rows,
               "move": _move}


# ------------------------------------------------------------------ running and comparing

def run(program: Program, mode) -> tuple[dict[str, np.ndarray], phobos.KernelFunction]:
    """The outputs of `program` run once in `mode` (a mode name or a backend object), and the kernel
    that ran (its `.compiled` says what compiling took)."""
    args = program.arguments()
    kernel = phobos.kernel(program.source, filename=f"fuzz-{program.seed}.phobos", mode=mode)[(program.grid,)]
    kernel(*args)
    return dict(zip(program.outputs, args[len(program.inputs):])), kernel


def run_reversed(program: Program, mode) -> dict[str, np.ndarray]:
    """The outputs of `program` in a CPU `mode` with every instruction passing on the other of several NaN
    operands (constants.reversed_nan_precedence): the GPU's other lawful answer for f64 results."""
    with constants.reversed_nan_precedence():
        return run(program, mode)[0]


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(UINT[a.dtype.itemsize]) if a.dtype.kind in "fiu" or a.dtype == np.uint16 else a.astype(np.uint8)


def _as_float(a: np.ndarray, dtype: str) -> np.ndarray:
    """Values of a float output as float64 (bf16 from its bit patterns)."""
    if dtype == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def ulps_apart(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distance in f32 ulps between f32 values (through the ordered integers of their bits)."""
    def ordered(x):
        i = x.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


def disagreements(program: Program, name: str, got: np.ndarray, want: np.ndarray,
                  want_reversed: np.ndarray | None = None, modes: tuple[str, str] | None = None) -> np.ndarray:
    """The indices where output `name` of one mode (`got`) and another (`want`) disagree, as the
    output's class says; an approx output of a function that `modes` (want's mode, got's) compute
    alike (`BIT_EXACT`) bit for bit.  `want_reversed`, `want`'s mode run with the other NaN precedence
    (`run_reversed`), is an answer as lawful as `want` for an f64 NaN: the language leaves the choice
    among several NaN operands to the GPU."""
    out = program.outputs[name]
    same = _bits(got) == _bits(want)
    if want_reversed is not None and out.dtype == "f64":
        same |= np.isnan(got) & (_bits(got) == _bits(want_reversed))
    if out.klass == "exact" or out.dtype not in FLOATS + HALVES or out.function in BIT_EXACT.get(modes, ()):
        return np.flatnonzero(~same)
    g, w = _as_float(got, out.dtype), _as_float(want, out.dtype)
    if out.klass == "order":
        return np.flatnonzero(~(same | (np.isnan(g) & np.isnan(w))))
    ulps, ulps_per_x, absolute, absolute_per_x = APPROX[out.function][1]
    with np.errstate(all="ignore"):
        x = np.nan_to_num(np.abs(program.inputs[out.argument].astype(np.float64)))
        close = ((ulps_apart(g, w) <= ulps + ulps_per_x * x)
                 | (np.abs(g - w) <= np.maximum(absolute + absolute_per_x * x, 2.0 ** -126)))
    return np.flatnonzero(~np.where(np.isnan(w) | np.isnan(g), same, close))
