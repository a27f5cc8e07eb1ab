# Robustness of the front end: whatever the input, parsing and checking either
# succeed or raise a PhobosError that points inside the file and prints - never
# another exception.
#
# Hypothesis feeds it (a) random sequences of Phobos tokens, loose or inside a
# kernel, and random well-formed statements built from the grammar, (b) the
# example programs mutated token by token and character by character, and
# (c) random text and bytes.  Deeply nested programs must be refused with a
# ParseError rather than exhaust Python's recursion limit, and the deepest
# accepted ones must check without exhausting it either.  PHOBOS_FUZZ_SCALE
# multiplies the number of examples (tests/fuzzing.py; tools/fuzz_campaign.py).
from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phobos.frontend.builtins import BUILTINS
from phobos.compiler import parse_source
from phobos.errors import ParseError, PhobosError
from phobos.frontend.parser import MAX_NESTING
from phobos.frontend.sema import check_program

from .frontend_support import EXAMPLES, front_end_errors
from .fuzzing import fuzz_settings

FUZZ = fuzz_settings(250)

KEYWORDS = ["kernel", "let", "var", "for", "in", "range", "if", "else", "true", "false", "tensor", "tile",
            "@autotune"]
NAMES = ["x", "m", "n", "s", "acc", "i", "N", "M", "K", "B", "axis", "undefined",
         "program_id", "num_programs", "dot", "sum", "max", "argmax", "exp", "abs", "maximum", "where", "arange",
         "full", "reshape", "cdiv", "atomic_add", "f32", "i32", "u32", "f64", "bool", "f16", "i8"]
NUMBERS = ["0", "1", "2", "4", "64", "-1", "2.5", "1e-3", ".5", "3000000000", "9223372036854775807", "1e308"]
PUNCTUATION = ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "!", "=", "+=", "-=",
               "*=", "/=", "(", ")", "[", "]", "{", "}", ",", ";", ":", ":+", "@", "<f32>", "\n", "// note\n",
               "/* note */"]
VOCABULARY = KEYWORDS + NAMES + NUMBERS + PUNCTUATION

KERNEL_HEAD = "@autotune(B in [4, 8])\nkernel k(x: tensor<f32>[N], m: tensor<f32>[M, K], n: i32, s: f32) {\n"


def assert_front_end_copes(src: str) -> None:
    """Parsing and checking `src` raises nothing but PhobosErrors, located in the file and printable."""
    lines = src.count("\n") + 1
    for err in front_end_errors(src):
        assert isinstance(err, PhobosError)
        assert err.loc is not None and 1 <= err.loc.line <= lines and err.loc.col >= 1, err.loc
        assert str(err).startswith(f"{err.loc}: ") and err.diagnostic().startswith(f"{err.loc}: error: ")


# ------------------------------------------------------------ (a) token soup
token_sequences = st.lists(st.sampled_from(VOCABULARY), max_size=60)


@FUZZ
@given(token_sequences)
def test_random_tokens(tokens):
    assert_front_end_copes(" ".join(tokens))


@FUZZ
@given(token_sequences)
def test_random_tokens_inside_a_kernel(tokens):
    assert_front_end_copes(KERNEL_HEAD + " ".join(tokens) + "\n}\n")


# Well-formed statements reach deeper into the checker than token soup does.
atoms = st.sampled_from(["n", "s", "B", "N", "1", "0", "2.5", "true", "x[0 :+ 4]", "x[n]",
                         "m[0 :+ B, 0 :+ 8]", "m[n :+ 2, 1]", "full([4, 8], 1.0)", "arange(0, B)", "i"])


def _combine(children):
    binary = st.tuples(children, st.sampled_from(["+", "-", "*", "/", "%", "<", "==", "&&"]), children).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})")
    unary = st.tuples(st.sampled_from(["-", "!"]), children).map("".join)
    call = st.tuples(st.sampled_from(sorted(BUILTINS)), st.lists(children, max_size=3),
                     st.sampled_from([[], ["axis=0"], ["axis=1"], ["axis=-1"]])).map(
        lambda t: f"{t[0]}({', '.join(t[1] + t[2])})")
    index = st.tuples(children, children).map(lambda t: f"{t[0]}[{t[1]} :+ 4]")
    return binary | unary | call | index


expressions = st.recursive(atoms, _combine, max_leaves=12)
statements = st.one_of(
    st.tuples(st.sampled_from(["let a", "var a", "let b: f32", "var c: tile<f32>[B, 8]", "var d: i32"]),
              expressions).map(lambda t: f"{t[0]} = {t[1]}"),
    st.tuples(st.sampled_from(["x[0 :+ 4]", "m[0 :+ B, 0 :+ 8]", "a", "n", "x[n]"]),
              st.sampled_from(["=", "+=", "*="]), expressions).map(" ".join),
    expressions.map(lambda e: f"if {e} {{\n}} else {{\n}}"),
    st.tuples(expressions, expressions).map(lambda t: f"for i in range({t[0]}, {t[1]}) {{\n}}"),
    expressions.map(lambda e: f"atomic_add(x[0 :+ 4], {e})"),
)


@FUZZ
@given(st.lists(statements, min_size=1, max_size=6))
def test_random_statements(stmts):
    assert_front_end_copes(KERNEL_HEAD + "\n".join(stmts) + "\n}\n")


# ------------------------------------------------------- (b) mutated examples
SEEDS = [p.read_text() for p in EXAMPLES] + [KERNEL_HEAD + """\
    var acc: tile<f32>[B, 8] = 0.0
    for i in range(0, n, 2) {
        if i < 4 && s > 0.5 {
            acc += m[i :+ B, 0 :+ 8] * s
        } else if i == 6 {
            acc = where(acc > 1.0, acc, full([B, 8], 0.0))
        } else {
            acc -= 1
        }
    }
    let best = argmax(acc, axis=1)
    x[0 :+ B] = reshape(max(acc, axis=1), [B]) + f32(best[0, 0])
    atomic_add(x[B :+ 8], sum(acc, axis=0)[0, 0 :+ 8])
}
"""]
PIECES = re.compile(r"\s+|\w+|:\+|&&|\|\||[=!<>+\-*/]=|//|/\*|\*/|.", re.S)


@st.composite
def mutated_sources(draw) -> str:
    """A seed program with a few tokens deleted, duplicated, swapped, replaced or inserted,
    then possibly a character changed and the text cut short."""
    pieces = PIECES.findall(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        i, j = (draw(st.integers(0, len(pieces) - 1)) for _ in range(2))
        action = draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "insert"]))
        if action == "delete":
            del pieces[i]
        elif action == "duplicate":
            pieces.insert(i, pieces[i])
        elif action == "swap":
            pieces[i], pieces[j] = pieces[j], pieces[i]
        else:
            new = " " + draw(st.sampled_from(VOCABULARY)) + " "
            pieces[i:i + (action == "replace")] = [new]
    text = "".join(pieces)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.characters(codec="utf-8")) + text[at + draw(st.integers(0, 1)):]
    if draw(st.booleans()):
        text = text[:draw(st.integers(0, len(text)))]
    return text


@FUZZ
@given(mutated_sources())
def test_mutated_examples(src):
    assert_front_end_copes(src)


# ------------------------------------------------------ (c) text and bytes
@FUZZ
@given(st.text(max_size=300))
def test_random_unicode(src):
    assert_front_end_copes(src)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data):
    assert_front_end_copes(data.decode("latin-1"))


@FUZZ
@given(st.text(alphabet="kernel(x:tensor<f32>[N]){}letvar=+*/-%!&|<>,;:.0123456789 \n\t\r\x0c@", max_size=200))
def test_random_text_from_phobos_characters(src):
    assert_front_end_copes(src)


# ------------------------------------------------------------------- nesting
def kernel_with(body: str) -> str:
    return f"kernel k(x: tensor<f32>[N]) {{\n    {body}\n}}\n"


DEEP_SHAPES = {
    "parenthesized operations": lambda n: kernel_with("let a = " + "(1 + " * n + "1" + ")" * n),
    "flat chain of operators": lambda n: kernel_with("let a = " + " + ".join(["1"] * n)),
    "unary operators": lambda n: kernel_with("let a = " + "-" * n + "1"),
    "nested calls": lambda n: kernel_with("let a = " + "exp(" * n + "1.0" + ")" * n),
    "nested indexing": lambda n: kernel_with("let a = " + "x[" * n + "0" + "]" * n),
    "nested lists": lambda n: kernel_with("let a = full(" + "[" * n + "4" + "]" * n + ", 0.0)"),
    "nested blocks": lambda n: kernel_with("if true {\n" * n + "}\n" * n),
}


@pytest.mark.parametrize("shape", DEEP_SHAPES, ids=list(DEEP_SHAPES))
def test_deep_nesting_is_a_parse_error(shape):
    with pytest.raises(ParseError, match="nested too deeply"):
        parse_source(DEEP_SHAPES[shape](5000), "deep.phobos")


@pytest.mark.parametrize("shape", DEEP_SHAPES, ids=list(DEEP_SHAPES))
def test_deepest_accepted_nesting_checks_without_recursion_error(shape):
    """Just below the limit, the checker's recursion must stay clear of Python's."""
    for n in range(MAX_NESTING, 0, -1):
        try:
            program = parse_source(DEEP_SHAPES[shape](n), "deep.phobos")
        except ParseError:
            continue
        assert n >= 40, "the limit must leave room for real programs"
        check_program(program)  # errors are fine (x[x[...]] indexes with a float); a crash is not
        return
    pytest.fail("no depth accepted")


def test_parentheses_alone_do_not_nest():
    """Parentheses leave no node, so 5,000 of them around a literal are a valid program."""
    program = parse_source(kernel_with("let a = " + "(" * 5000 + "1" + ")" * 5000), "parens.phobos")
    assert check_program(program) == []
