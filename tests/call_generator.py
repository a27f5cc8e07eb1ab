# A generator of kernels that call the builtins, read from their registry
# (phobos.frontend.builtins.BUILTINS), with every kind of operand: scalars and
# tiles of each dtype, 1-D and 2-D, literals, list shapes, dtype names, device
# functions, strings and keywords - and calls nested in calls, inside `if`,
# `for` and `var` accumulations.  Most draws are programs the checker refuses;
# the differential compile test (test_compile_fuzz.py) keeps those it accepts
# and compiles them.  A builtin added to the registry is drawn from the next
# run on, with arguments from the same pool: the pool, not the generator,
# grows with the language.
#
# Each call's value is used, so that no stage can drop it as dead: it is
# printed (device_print takes any scalar or tile of any dtype), and sometimes
# also stored, accumulated in a `var` across a loop or taken apart.
from __future__ import annotations

import re

from hypothesis import strategies as st

from phobos.frontend.builtins import BUILTINS, KEYWORDS

PARAMS = ("x: tensor<f32>[N], y: tensor<f64>[N], h: tensor<f16>[N], b: tensor<bf16>[N], i: tensor<i32>[N], "
          "l: tensor<i64>[N], u: tensor<u32>[N], q: tensor<i8>[N], m: tensor<f32>[M, K], "
          "mh: tensor<f16>[M, K], mb: tensor<bf16>[M, K], md: tensor<f64>[M, K], mi: tensor<i8>[M, K], "
          "o: tensor<f32>[P], sf: f32, sd: f64, si: i32, sl: i64, su: u32, sb: bool")

#: Operands by dtype: scalars and tiles (1-D and 2-D) of every value dtype, and literals that adapt.
OPERANDS = {
    "f32": ["sf", "x[si]", "x[0 :+ 4]", "x[si :+ 8]", "m[0 :+ 2, 0 :+ 4]", "m[si :+ 4, 0 :+ 4]", "m[0 :+ 16, 0 :+ 8]",
            "full([2, 4], 1.5)", "m[0 :+ 4, 0]", "1.5", "inf", "0.0"],
    "f64": ["sd", "y[2]", "y[0 :+ 4]", "md[0 :+ 4, 0 :+ 4]", "-2.5"],
    "f16": ["h[0]", "h[0 :+ 4]", "mh[0 :+ 16, 0 :+ 16]", "trans(mh[0 :+ 16, 0 :+ 16])", "2.0"],
    "bf16": ["b[1]", "b[4 :+ 4]", "mb[0 :+ 16, 0 :+ 16]", "0.5"],
    "i32": ["si", "i[3]", "i[0 :+ 4]", "q[0 :+ 4]", "q[2]", "arange(0, 4)", "reshape(arange(0, 8), [2, 4])",
            "program_id(0)", "N", "mi[0 :+ 16, 0 :+ 32]", "2", "-3"],
    "i64": ["sl", "l[0]", "l[1 :+ 4]", "3000000000", "7"],
    "u32": ["su", "u[1]", "u[0 :+ 4]", "5"],
    "bool": ["sb", "(x[0 :+ 4] > 0.0)", "(m[0 :+ 2, 0 :+ 4] < 1.0)", "true", "(si == 3)"],
}
CONDITIONS = ["sb", "si > 2", "x[0] < sf", "sum(x[0 :+ 4]) > 0.0", "sl != 0 && sb"]
LISTS = ["[4]", "[2, 4]", "[8]", "[1, 0]", "[4, 2]", "[16, 16]", "[0, 1]"]
DTYPES = ["f32", "f64", "i32", "i64", "u32", "f16", "bf16"]
STRINGS = ['"ieee"', '"tf32"', '"tf32x3"', '"v {}"', '"ok"']
#: Where an atomic or a store may write.
TARGETS = ["o[0 :+ 4]", "o[si]", "o[0 :+ 8]", "o[arange(0, 4)]", "i[0 :+ 4]", "l[0 :+ 4]", "u[si :+ 4]",
           "y[0 :+ 4]", "h[0 :+ 4]", "b[0 :+ 4]", "m[0 :+ 2, 0 :+ 4]"]
FUNCTIONS = """\
fn add2(p, r) {
    return p + r
}

fn argbest(v1, i1, v2, i2) {
    let take = v2 > v1
    return (where(take, v2, v1), where(take, i2, i1))
}
"""
COMBINES = ["add2", "argbest"]


def _parameters(signature: str) -> tuple[list[str], list[str]]:
    """(positional parameter names, keyword names) of a builtin's signature: `dot(a, b, precision="ieee")`."""
    inside = re.sub(r"\[[^\]]*\]", "[]", signature[signature.index("(") + 1:signature.rindex(")")])
    names = [part.strip() for part in inside.split(",") if part.strip()]
    positional = [n for n in names if "=" not in n and n != "..."]
    keywords = [n.split("=")[0] for n in names if "=" in n]
    return positional, keywords


def _argument(draw, name: str, depth: int, dtype: str) -> str:
    """An argument for a parameter called `name` (a shape, a dtype, a combine function, a text, a tensor
    access) or a value."""
    if name == "[]":
        return draw(st.sampled_from(LISTS))
    if name == "DTYPE":
        return draw(st.sampled_from(DTYPES))
    if name == "axis":
        return draw(st.sampled_from(["0", "1", "-1"]))
    if name == "combine":
        return draw(st.sampled_from(COMBINES))
    if name.startswith('"'):
        return draw(st.sampled_from(STRINGS))
    if name == "T[]":
        return draw(st.sampled_from(TARGETS))
    return value(draw, depth, dtype)


def value(draw, depth: int, dtype: str) -> str:
    """An operand of `dtype` (most of the time: a call's value may have another), or (while `depth`
    lasts) a builtin call or an operator on operands."""
    kind = draw(st.sampled_from(["operand", "operand", "call", "call", "operator"] if depth > 0 else ["operand"]))
    if kind == "operand":
        return draw(st.sampled_from(OPERANDS[dtype]))
    if kind == "operator":
        operator = draw(st.sampled_from(["+", "-", "*", "/", "%", "<", "==", "&", "<<", "&&"]))
        return f"({value(draw, depth - 1, dtype)} {operator} {value(draw, depth - 1, dtype)})"
    return call(draw, depth - 1)


def call(draw, depth: int, names: list[str] | None = None) -> str:
    """A call of a builtin from the registry (of one of `names`), its arguments drawn for its signature."""
    name = draw(st.sampled_from(names or sorted(n for n, b in BUILTINS.items() if not b.void)))
    builtin = BUILTINS[name]
    signature = builtin.signature.split(" | ")[draw(st.integers(0, builtin.signature.count(" | ")))]
    positional, _ = _parameters(signature)
    if name == "device_print":
        positional = ['"text"'] + ["x"] * draw(st.integers(0, 2))
    count = len(positional) + draw(st.sampled_from([0] * 48 + [-1, 1])) if positional else 0
    dtype = draw(st.sampled_from(sorted(OPERANDS)))  # the values of one call share a dtype, mostly
    args = [_argument(draw, positional[k] if k < len(positional) else "x", depth, dtype)
            for k in range(max(count, 0))]
    for keyword in sorted(KEYWORDS.get(name, set()) - set(positional)):
        if draw(st.booleans()):
            given = draw(st.sampled_from(["0", "1", "-1"])) if keyword == "axis" else \
                _argument(draw, {"combine": "combine", "precision": '"'}.get(keyword, keyword), depth, dtype)
            args.append(f"{keyword}={given}")
    return f"{name}({', '.join(args)})"


def statement(draw, k: int) -> list[str]:
    """Lines that compute a call's value and use it (printed; maybe stored, accumulated or unpacked)."""
    form = draw(st.sampled_from(["print", "print", "let", "unpack", "loop", "branch", "store", "effect"]))
    if form == "effect":  # atomics and the like, standing alone
        return [call(draw, 1, sorted(n for n, b in BUILTINS.items() if b.effect))]
    if form == "unpack":
        return [f"let (p{k}, r{k}) = {call(draw, 1, ['split', 'reduce', 'scan'])}",
                f'device_print("{{}} {{}}", p{k}, r{k})']
    expression = call(draw, 2)
    if form == "print":
        return [f'device_print("{{}}", {expression})']
    if form == "let":
        return [f"let v{k} = {expression}", f'device_print("{{}}", v{k} + v{k})']
    if form == "store":
        return [f"{draw(st.sampled_from(TARGETS))} = {expression}"]
    if form == "loop":
        return [f"var a{k} = {expression}", f"for t{k} in range(0, si) {{", f"    a{k} = a{k} + {expression}", "}",
                f'device_print("{{}}", a{k})']
    return [f"if {draw(st.sampled_from(CONDITIONS))} {{", f'    device_print("{{}}", {expression})', "} else {",
            f"    {draw(st.sampled_from(TARGETS))} = {value(draw, 1, 'f32')}", "}"]


@st.composite
def call_programs(draw) -> str:
    """A kernel of a few statements that call builtins (see the module header); often not a valid one."""
    lines = [line for k in range(draw(st.integers(1, 2))) for line in statement(draw, k)]
    body = "\n".join(f"    {line}" for line in lines)
    return f"{FUNCTIONS}\nkernel k({PARAMS}) {{\n{body}\n}}\n"


def builtins_called(source: str) -> set[str]:
    """The builtins a generated source calls."""
    return {name for name in re.findall(r"(\w+)\(", source.removeprefix(FUNCTIONS)) if name in BUILTINS}
