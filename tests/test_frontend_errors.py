# Bad programs and the errors the front end must report for them.
#
# Each case is a small source with one mistake, the error class it must raise
# (LexError, ParseError or SemanticError), the line and column of the culprit
# token and a word of the message; some also name a note (the previous
# definition, the autotune configuration an error is limited to).  Every case
# must produce exactly one error: a mistake must not cascade into others.
#
# The last tests check how an error prints (`file:line:col: error: message`,
# the source line, a caret) and what `python -m phobos check` prints.
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import traceback
from dataclasses import dataclass

import pytest

from phobos.compiler import parse_source
from phobos.errors import LaunchError, LexError, ParseError, PhobosError, SemanticError
from phobos.frontend.sema import check_program

from .frontend_support import EXAMPLES, REPO, front_end_errors


@dataclass
class Case:
    name: str
    source: str
    error: type[PhobosError]
    line: int
    col: int
    word: str  # must appear in the message
    note: str | None = None  # must appear in the rendering of the notes

    def __post_init__(self):
        self.source = textwrap.dedent(self.source)


CASES = [
    # ------------------------------------------------------------- lexer
    Case("bad character", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 1 $ 2
        }
        """, LexError, 2, 15, "unexpected character '$'"),
    Case("non-ASCII character", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 1 \u00d7 2
        }
        """, LexError, 2, 15, "unexpected character"),
    Case("control character", """\
        kernel k(x: tensor<f32>[N]) {
            let a = \x00
        }
        """, LexError, 2, 13, "U+0000"),
    Case("unterminated comment", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 1 /* the rest
            of the file
        }
        """, LexError, 2, 15, "unterminated"),
    Case("letters in a number", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 12abc
        }
        """, LexError, 2, 13, "invalid number '12abc'"),
    Case("suffix on a float", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 1.5f
        }
        """, LexError, 2, 13, "invalid number '1.5f'"),
    Case("exponent without digits", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 2e
        }
        """, LexError, 2, 13, "invalid number '2e'"),
    Case("integer literal too large", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 99999999999999999999
        }
        """, LexError, 2, 13, "too large"),
    # ------------------------------------------------------------ parser
    Case("missing newline between statements", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 1 let b = 2
        }
        """, ParseError, 2, 15, "newline or ';'"),
    Case("chained comparison", """\
        kernel k(x: tensor<f32>[N], n: i32) {
            let c = 0 < n < 10
        }
        """, ParseError, 2, 19, "chained"),
    Case("chained equality", """\
        kernel k(x: tensor<f32>[N], n: i32) {
            let c = n == 1 == true
        }
        """, ParseError, 2, 20, "chained"),
    Case("unexpected end of file", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 1
        """, ParseError, 2, 14, "end of file", note="test.phobos:1:29: note: to close the '{'"),
    Case("end of file in an expression", """\
        kernel k(x: tensor<f32>[N]) {
            let a = exp(""", ParseError, 2, 17, "')' is missing", note="test.phobos:2:16: note"),
    Case("parenthesis left open", """\
        kernel k(x: tensor<f32>[N]) {
            let a = exp(1.0
            let b = 2
        }
        """, ParseError, 3, 5, "')' is missing", note="test.phobos:2:16: note: to close the '('"),
    Case("bracket left open", """\
        kernel k(x: tensor<f32>[N]) {
            let t = x[0 :+ 4
        }
        """, ParseError, 3, 1, "']' is missing", note="test.phobos:2:14: note"),
    Case("stray closing parenthesis", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 1)
        }
        """, ParseError, 2, 14, "unexpected ')'"),
    Case("stray closing brace", """\
        kernel k(x: tensor<f32>[N]) {
        }
        }
        """, ParseError, 3, 1, "expected one of '@', 'fn', 'kernel', end of file"),
    Case("else without if", """\
        kernel k(x: tensor<f32>[N]) {
            else {
            }
        }
        """, ParseError, 2, 5, "must follow"),
    Case("operator without right operand", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 2 ** 3
        }
        """, ParseError, 2, 16, "expected an expression"),
    Case("let without value", """\
        kernel k(x: tensor<f32>[N]) {
            let a
        }
        """, ParseError, 2, 10, "expected one of ':', '='"),
    Case("block on the next line", """\
        kernel k(x: tensor<f32>[N]) {
            for i in range(0, 4)
            {
            }
        }
        """, ParseError, 2, 25, "expected '{'"),
    Case("loop over something other than range", """\
        kernel k(x: tensor<f32>[N]) {
            for i in steps(0, 4) {
            }
        }
        """, ParseError, 2, 14, "'range'"),
    Case("range with one argument", """\
        kernel k(x: tensor<f32>[N]) {
            for i in range(4) {
            }
        }
        """, ParseError, 2, 14, "range takes"),
    Case("positional argument after keyword", """\
        kernel k(x: tensor<f32>[N]) {
            let a = sum(x[0 :+ 4], axis=0, 1)
        }
        """, ParseError, 2, 36, "positional"),
    Case("assignment to an expression", """\
        kernel k(x: tensor<f32>[N], n: i32) {
            (n + 1) = 3
        }
        """, ParseError, 2, 6, "cannot assign to this expression"),
    Case("parameter without colon", """\
        kernel k(x tensor<f32>[N]) {
        }
        """, ParseError, 1, 12, "expected ':'"),
    Case("autotune values not in a list", """\
        @autotune(B in 4)
        kernel k(x: tensor<f32>[N]) {
        }
        """, ParseError, 1, 16, "expected '['"),
    # ----------------------------------------------------------- checker: names and scopes
    Case("undefined name", """\
        kernel k(x: tensor<f32>[N]) {
            let a = b + 1
        }
        """, SemanticError, 2, 13, "'b' is not defined"),
    Case("misspelled name", """\
        kernel k(x: tensor<f32>[N]) {
            let total = 1
            let b = totl + 1
        }
        """, SemanticError, 3, 13, "did you mean 'total'?"),
    Case("name used outside its block", """\
        kernel k(x: tensor<f32>[N]) {
            for i in range(0, 4) {
                let inner = i
            }
            let a = inner
        }
        """, SemanticError, 5, 13, "'inner' is not defined"),
    Case("assignment to an undefined name", """\
        kernel k(x: tensor<f32>[N]) {
            z = 1
        }
        """, SemanticError, 2, 5, "'z' is not defined"),
    Case("redefinition", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 1
            var a = 2
        }
        """, SemanticError, 3, 9, "already defined", note="test.phobos:2:9: note: previous definition"),
    Case("parameter redefined in the body", """\
        kernel k(x: tensor<f32>[N], s: f32) {
            let s = 1.0
        }
        """, SemanticError, 2, 9, "already defined", note="test.phobos:1:29: note: previous definition"),
    Case("size name that is an autotune parameter", """\
        @autotune(N in [4])
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 2, 25, "autotune parameter", note="test.phobos:1:11: note"),
    Case("duplicate kernel names", """\
        kernel k(x: tensor<f32>[N]) {
        }
        kernel k(y: tensor<f32>[N]) {
        }
        """, SemanticError, 3, 1, "defined twice", note="test.phobos:1:1: note: previous definition"),
    Case("empty file", "// nothing here\n", SemanticError, 1, 1, "no kernel"),
    # ----------------------------------------------------------- checker: autotune
    Case("duplicate autotune names", """\
        @autotune(B in [4], B in [8])
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 21, "listed twice"),
    Case("non-integer autotune value", """\
        @autotune(B in [4, 8.5])
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 20, "integer literals"),
    Case("unknown decorator", """\
        @tune(B in [4])
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 1, "are @autotune, @derive, @require, @key"),
    Case("tile extent zero in one configuration", """\
        @autotune(B in [128, 64])
        kernel k(x: tensor<f32>[N]) {
            var t: tile<f32>[B - 64, 4] = 0.0
        }
        """, SemanticError, 3, 22, "must be positive, got 0", note="only in the autotune configuration B=64"),
    Case("slice too large in one configuration", """\
        @autotune(B in [8, 32])
        kernel k(x: tensor<f32>[16]) {
            let t = x[0 :+ B]
        }
        """, SemanticError, 3, 20, "larger than the dimension", note="configuration B=32"),
    # ----------------------------------------------------------- checker: launch rules
    Case("condition that no configuration meets", """\
        @autotune(B in [64, 128])
        @require(B > 1024)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 2, 10, "can never hold"),
    Case("condition that no sizes meet", """\
        kernel k(x: tensor<f32>[N]) {
        }
        @require(N < 0)
        kernel j(x: tensor<f32>[N]) {
        }
        """, SemanticError, 3, 10, "can never hold: no sizes meet 'N < 0'"),
    Case("conditions that contradict each other", """\
        @autotune(B in [1024, 4096])
        @require(B >= N, N > 2 * B)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 2, 18, "no sizes meet 'N > 2 * B' together with the other conditions"),
    Case("conditions that contradict through a derived constant", """\
        @derive(B = minimum(next_pow2(N), 8192))
        @require(B >= N, N > 10000)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 2, 18, "can never hold"),
    Case("condition on a name that is not a size", """\
        @autotune(B in [64])
        @require(B >= K)
        kernel k(x: tensor<f32>[M, N]) {
        }
        """, SemanticError, 2, 15, "'K' is not a size of kernel 'k' (its sizes: M, N)"),
    Case("condition on a scalar parameter", """\
        @require(n > 3)
        kernel k(x: tensor<f32>[N], n: i32) {
        }
        """, SemanticError, 1, 10, "'n' is a scalar parameter, not known before the launch"),
    Case("condition that is an integer", """\
        @require(N - 1)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 10, "a condition is true or false"),
    Case("condition written with '='", """\
        @require(N = 4)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 10, "did you mean '=='?"),
    Case("condition on a float", """\
        @require(N > 2.5)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 14, "compute on integers"),
    Case("condition calling a kernel builtin", """\
        @require(exp(N) > 2)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 10, "'exp' cannot be called in a launch expression"),
    Case("condition dividing by zero", """\
        @require(N / (2 - 2) > 1)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 15, "division by zero"),
    Case("derived constant that is a condition", """\
        @derive(B = N > 4)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 13, "a derived constant is an integer"),
    Case("derived constant from a tensor", """\
        @derive(B = x)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 13, "'x' is a tensor"),
    Case("derived constant from a later one", """\
        @derive(B = C * 2, C = N)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 13, "'C' is not a size"),
    Case("derived constant without a name", """\
        @derive(next_pow2(N))
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 9, "NAME = expression"),
    Case("derived constant named like a size", """\
        @derive(N = 4)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 9, "'N' is already a size", note="test.phobos:2:25: note: previous definition"),
    Case("derived constant named like an autotune parameter", """\
        @autotune(B in [4])
        @derive(B = N)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 2, 9, "'B' is already an autotune parameter"),
    Case("derived constant indexing a tensor", """\
        @derive(B = x[0])
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 13, "this index cannot appear in one"),
    Case("tuning key on an autotune parameter", """\
        @autotune(B in [4])
        @key(B)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 2, 6, "a tuning key depends on the sizes only"),
    Case("two tuning keys", """\
        @key(N)
        @key(next_pow2(N))
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 2, 1, "a kernel has one @key", note="the first one is here"),
    Case("autotune values in @require", """\
        @require(B in [4])
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 10, "belongs in @autotune"),
    Case("condition in @autotune", """\
        @autotune(B in [4], B >= N)
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 21, "conditions go in @require"),
    Case("empty @require", """\
        @require()
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 1, "@require needs at least one item"),
    Case("derived knob with a value the knob does not take", """\
        @derive(WARPS = minimum(N, 3))
        kernel k(x: tensor<f32>[N]) {
        }
        """, SemanticError, 1, 9, "WARPS must be a power of two from 1 to 32, got 3", note="WARPS=3"),
    Case("derived constant that breaks the body at some sizes", """\
        @derive(B = N - 1)
        kernel k(x: tensor<f32>[N]) {
            let t = x[0 :+ B]
        }
        """, SemanticError, 3, 20, "positive, got 0", note="configuration B=0"),
    # ----------------------------------------------------------- checker: types
    Case("unknown dtype", """\
        kernel k(x: tensor<f23>[N]) {
        }
        """, SemanticError, 1, 20, "did you mean 'f32'?"),
    Case("unknown dtype of a tile", """\
        kernel k(x: tensor<f32>[N]) {
            var t: tile<i33>[4] = 0
        }
        """, SemanticError, 2, 17, "unknown element type 'i33'"),
    Case("tile parameter", """\
        kernel k(t: tile<f32>[4]) {
        }
        """, SemanticError, 1, 13, "cannot be a tile"),
    Case("storage dtype for a scalar parameter", """\
        kernel k(x: tensor<f32>[N], h: f16) {
        }
        """, SemanticError, 1, 32, "scalar parameters"),
    Case("expression as a tensor dimension", """\
        kernel k(x: tensor<f32>[N * 2]) {
        }
        """, SemanticError, 1, 25, "size name"),
    Case("storage dtype for a variable", """\
        kernel k(x: tensor<f32>[N]) {
            let h: i8 = 1
        }
        """, SemanticError, 2, 12, "storage type"),
    Case("tensor variable", """\
        kernel k(x: tensor<f32>[N]) {
            let t: tensor<f32>[N] = 1.0
        }
        """, SemanticError, 2, 12, "cannot be a tensor"),
    Case("tile too large", """\
        kernel k(x: tensor<f32>[N]) {
            var t: tile<f32>[2048, 1024] = 0.0
        }
        """, SemanticError, 2, 12, "too large"),
    Case("broadcast into a tile too large", """\
        kernel k(x: tensor<f32>[N]) {
            let a = full([2048, 1], 0.0) * full([1, 1024], 0.0)
        }
        """, SemanticError, 2, 34, "too large"),
    Case("float shift", """\
        kernel k(x: tensor<f32>[N], s: f32) {
            let a = s << 2
        }
        """, SemanticError, 2, 15, "'<<' needs integer"),
    Case("bool arithmetic", """\
        kernel k(x: tensor<f32>[N]) {
            let a = true + 1
        }
        """, SemanticError, 2, 18, "not bool"),
    Case("mismatched dtypes", """\
        kernel k(x: tensor<f32>[N], n: i32, s: f32) {
            let a = n + s
        }
        """, SemanticError, 2, 15, "mismatched types i32 and f32"),
    Case("float literal into an integer variable", """\
        kernel k(x: tensor<f32>[N]) {
            var a: i32 = 1.5
        }
        """, SemanticError, 2, 18, "cannot assign an f32 value to an i32 variable"),
    Case("float literal too large", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 1e999
        }
        """, LexError, 2, 13, "too large for f64"),
    Case("constant too large for its variable", """\
        kernel k(x: tensor<f32>[N]) {
            var a: i32 = 2147483647 + 1
        }
        """, SemanticError, 2, 18, "2147483648 does not fit in i32"),
    Case("literal too large for the other operand", """\
        kernel k(x: tensor<f32>[N], n: i32) {
            let a = n + 3000000000
        }
        """, SemanticError, 2, 17, "does not fit in i32"),
    Case("negative constant into u32", """\
        kernel k(x: tensor<f32>[N]) {
            var a: u32 = -1
        }
        """, SemanticError, 2, 18, "does not fit in u32"),
    Case("literal too large for an i8 tensor", """\
        kernel k(b: tensor<i8>[N]) {
            b[0] = 300
        }
        """, SemanticError, 2, 12, "does not fit in i8"),
    Case("literal arithmetic beyond u64", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 18446744073709551615 + 1
        }
        """, SemanticError, 2, 34, "is not a 64-bit integer"),
    Case("literal arithmetic beyond i64 in an i64", """\
        kernel k(x: tensor<f32>[N]) {
            var a: i64 = 9223372036854775807 + 1
        }
        """, SemanticError, 2, 18, "does not fit in i64"),
    Case("infinite constant converted to an integer", """\
        kernel k(x: tensor<f32>[N]) {
            let a = i32(1e308 * 10.0)
        }
        """, SemanticError, 2, 17, "has no i32 value"),
    Case("not on an integer", """\
        kernel k(x: tensor<f32>[N], n: i32) {
            let a = !n
        }
        """, SemanticError, 2, 13, "'!' needs a bool"),
    Case("and on integers", """\
        kernel k(x: tensor<f32>[N], n: i32) {
            let a = n && true
        }
        """, SemanticError, 2, 13, "'&&' needs bool"),
    Case("tile condition", """\
        kernel k(x: tensor<f32>[N]) {
            let t = x[0 :+ 4]
            if t > 0.0 {
            }
        }
        """, SemanticError, 3, 8, "use where("),
    Case("integer condition", """\
        kernel k(x: tensor<f32>[N], n: i32) {
            if n {
            }
        }
        """, SemanticError, 2, 8, "scalar bool, not i32"),
    Case("float loop bound", """\
        kernel k(x: tensor<f32>[N]) {
            for i in range(0, 4.5) {
            }
        }
        """, SemanticError, 2, 23, "integer scalar"),
    Case("zero loop step", """\
        kernel k(x: tensor<f32>[N]) {
            for i in range(0, 8, 0) {
            }
        }
        """, SemanticError, 2, 26, "cannot be zero"),
    # ----------------------------------------------------------- checker: tensors and assignment
    Case("tensor used as a value", """\
        kernel k(x: tensor<f32>[N]) {
            let a = x * 2.0
        }
        """, SemanticError, 2, 13, "tensor cannot be used as a value"),
    Case("tensor bound to a name", """\
        kernel k(x: tensor<f32>[N]) {
            let a = x
        }
        """, SemanticError, 2, 13, "cannot be bound"),
    Case("assignment to a let", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 1
            a = 2
        }
        """, SemanticError, 3, 5, "declared with 'let'"),
    Case("assignment to a parameter", """\
        kernel k(x: tensor<f32>[N], s: f32) {
            s = 2.0
        }
        """, SemanticError, 2, 5, "kernel parameter"),
    Case("assignment to a loop variable", """\
        kernel k(x: tensor<f32>[N]) {
            for i in range(0, 4) {
                i += 1
            }
        }
        """, SemanticError, 3, 9, "loop variable"),
    Case("assignment to a size", """\
        kernel k(x: tensor<f32>[N]) {
            N = 2
        }
        """, SemanticError, 2, 5, "tensor size"),
    Case("assignment to an autotune constant", """\
        @autotune(B in [4])
        kernel k(x: tensor<f32>[N]) {
            B *= 2
        }
        """, SemanticError, 3, 5, "autotune parameter"),
    Case("assignment to a whole tensor", """\
        kernel k(x: tensor<f32>[N]) {
            x = 1.0
        }
        """, SemanticError, 2, 5, "assign to a slice"),
    Case("assignment into a tile", """\
        kernel k(x: tensor<f32>[N]) {
            var t = x[0 :+ 4]
            t[0 :+ 2] = 1.0
        }
        """, SemanticError, 3, 5, "only tensor slices"),
    Case("value shape differs from the variable", """\
        kernel k(m: tensor<f32>[M, K]) {
            var t: tile<f32>[4, 4] = 0.0
            t = m[0 :+ 8, 0 :+ 4]
        }
        """, SemanticError, 3, 9, "the variable is [4, 4] but the value is [8, 4]"),
    Case("value shape differs from the slice", """\
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ 4] = x[0 :+ 8]
        }
        """, SemanticError, 2, 17, "the slice is [4] but the value is [8]"),
    Case("unused value", """\
        kernel k(x: tensor<f32>[N], s: f32) {
            exp(s)
        }
        """, SemanticError, 2, 5, "unused"),
    # ----------------------------------------------------------- checker: slices and indexing
    Case("non-constant slice size", """\
        kernel k(x: tensor<f32>[N], n: i32) {
            let t = x[0 :+ n]
        }
        """, SemanticError, 2, 20, "compile-time integer constant"),
    Case("slice larger than a literal dimension", """\
        kernel k(x: tensor<f32>[16]) {
            let t = x[0 :+ 32]
        }
        """, SemanticError, 2, 20, "larger than the dimension (16)"),
    Case("too few subscripts", """\
        kernel k(m: tensor<f32>[M, K]) {
            let t = m[0 :+ 4]
        }
        """, SemanticError, 2, 14, "2 dimensions but is indexed with 1"),
    Case("too many subscripts on a tile", """\
        kernel k(x: tensor<f32>[N]) {
            let t = x[0 :+ 4]
            let u = t[0, 1]
        }
        """, SemanticError, 3, 14, "rank 1"),
    Case("part of a tile out of range", """\
        kernel k(x: tensor<f32>[N]) {
            let t = x[0 :+ 4]
            let u = t[2 :+ 4]
        }
        """, SemanticError, 3, 15, "outside the tile"),
    Case("float tile used as an index", """\
        kernel k(x: tensor<f32>[N]) {
            let i = f32(arange(0, 4))
            let t = x[i]
        }
        """, SemanticError, 3, 15, "must hold integers"),
    Case("indexed scalar", """\
        kernel k(x: tensor<f32>[N], n: i32) {
            let a = n[0]
        }
        """, SemanticError, 2, 14, "cannot index a scalar"),
    # ----------------------------------------------------------- checker: calls
    Case("unknown function", """\
        kernel k(x: tensor<f32>[N], s: f32) {
            let a = expp(s)
        }
        """, SemanticError, 2, 13, "did you mean 'exp'?"),
    Case("wrong number of arguments", """\
        kernel k(x: tensor<f32>[N], s: f32) {
            let a = exp(s, s)
        }
        """, SemanticError, 2, 13, "takes 1 argument, got 2"),
    Case("unknown keyword argument", """\
        kernel k(x: tensor<f32>[N]) {
            let a = sum(x[0 :+ 4], axs=0)
        }
        """, SemanticError, 2, 28, "no argument named 'axs'"),
    Case("program_id axis out of range", """\
        kernel k(x: tensor<f32>[N]) {
            let a = program_id(3)
        }
        """, SemanticError, 2, 24, "0, 1 or 2"),
    Case("dot of mismatched shapes", """\
        kernel k(m: tensor<f32>[M, K]) {
            let a = dot(m[0 :+ 4, 0 :+ 8], m[0 :+ 4, 0 :+ 8])
        }
        """, SemanticError, 2, 13, "got [4, 8] x [4, 8]"),
    Case("dot of vectors", """\
        kernel k(x: tensor<f32>[N]) {
            let a = dot(x[0 :+ 4], x[0 :+ 4])
        }
        """, SemanticError, 2, 17, "2-D tiles"),
    Case("element-wise shapes that do not broadcast", """\
        kernel k(x: tensor<f32>[N]) {
            let a = x[0 :+ 4] + x[0 :+ 8]
        }
        """, SemanticError, 2, 23, "do not broadcast"),
    Case("reduction axis out of range", """\
        kernel k(m: tensor<f32>[M, K]) {
            let a = sum(m[0 :+ 4, 0 :+ 8], axis=2)
        }
        """, SemanticError, 2, 41, "axis 2 is out of range"),
    Case("reduction of a scalar", """\
        kernel k(x: tensor<f32>[N], s: f32) {
            let a = max(s, axis=0)
        }
        """, SemanticError, 2, 17, "reduces a tile"),
    Case("arange with a non-constant bound", """\
        kernel k(x: tensor<f32>[N], n: i32) {
            let a = arange(0, n)
        }
        """, SemanticError, 2, 23, "compile-time integer constant"),
    Case("where with a non-bool condition", """\
        kernel k(x: tensor<f32>[N]) {
            let a = where(1, 2.0, 3.0)
        }
        """, SemanticError, 2, 19, "must be bool"),
    Case("reshape to another size", """\
        kernel k(x: tensor<f32>[N]) {
            let a = reshape(x[0 :+ 8], [3, 3])
        }
        """, SemanticError, 2, 32, "8 elements into 9"),
    Case("constant division by zero", """\
        kernel k(x: tensor<f32>[N]) {
            let a = 4 / 0
        }
        """, SemanticError, 2, 15, "division by zero"),
    Case("atomic_add on a whole tensor", """\
        kernel k(x: tensor<f32>[N]) {
            atomic_add(x, 1.0)
        }
        """, SemanticError, 2, 16, "tensor slice"),
    Case("device_print used as a value", """\
        kernel k(x: tensor<f32>[N]) {
            let a = device_print("x")
        }
        """, SemanticError, 2, 13, "no value"),
    Case("dot of mismatched dtypes", """\
        kernel k(a: tensor<bf16>[N, N], b: tensor<f32>[N, N], c: tensor<f32>[N, N]) {
            c[0 :+ 16, 0 :+ 16] = dot(a[0 :+ 16, 0 :+ 16], b[0 :+ 16, 0 :+ 16])
        }
        """, SemanticError, 2, 27, "different types: bf16 and f32"),
    Case("dot of bf16 and f16", """\
        kernel k(a: tensor<bf16>[N, N], b: tensor<f16>[N, N], c: tensor<f32>[N, N]) {
            c[0 :+ 16, 0 :+ 16] = dot(a[0 :+ 16, 0 :+ 16], b[0 :+ 16, 0 :+ 16])
        }
        """, SemanticError, 2, 27, "different types: bf16 and f16"),
    Case("precision on bf16 operands", """\
        kernel k(a: tensor<bf16>[N, N], c: tensor<f32>[N, N]) {
            let x = a[0 :+ 16, 0 :+ 16]
            c[0 :+ 16, 0 :+ 16] = dot(x, x, precision="tf32")
        }
        """, SemanticError, 3, 37, 'precision="tf32" applies to f32 operands, not bf16'),
    Case("precision on f64 operands", """\
        kernel k(a: tensor<f64>[N, N], c: tensor<f64>[N, N]) {
            let x = a[0 :+ 16, 0 :+ 16]
            c[0 :+ 16, 0 :+ 16] = dot(x, x, precision="tf32x3")
        }
        """, SemanticError, 3, 37, "only f32 products have TF32 modes"),
    Case("unknown precision", """\
        kernel k(a: tensor<f32>[N, N], c: tensor<f32>[N, N]) {
            let x = a[0 :+ 16, 0 :+ 16]
            c[0 :+ 16, 0 :+ 16] = dot(x, x, precision="tf32x2")
        }
        """, SemanticError, 3, 47, 'unknown precision "tf32x2" of dot(); the precisions are "ieee", "tf32", '
                                  '"tf32x3"; did you mean'),
    Case("precision not a string", """\
        kernel k(a: tensor<f32>[N, N], c: tensor<f32>[N, N]) {
            let x = a[0 :+ 16, 0 :+ 16]
            c[0 :+ 16, 0 :+ 16] = dot(x, x, precision=3)
        }
        """, SemanticError, 3, 47, "the precision of dot() is a string"),
    Case("a string as a value", """\
        kernel k(a: tensor<f32>[N]) {
            let s = "tf32"
        }
        """, SemanticError, 2, 13, "a string can only be an option of a builtin"),
    Case("assigning f32 to a bf16 variable", """\
        kernel k(a: tensor<bf16>[N], s: f32) {
            var x = a[0 :+ 16]
            x = x * s
        }
        """, SemanticError, 3, 9, "cannot assign an f32 value to a bf16 variable; convert it with bf16(...)"),
    Case("atomic_max on an f16 tensor", """\
        kernel k(x: tensor<f16>[N]) {
            atomic_max(x[0 :+ 4], 1.0)
        }
        """, SemanticError, 2, 16, "f16"),
    Case("assigning to inf", """\
        kernel k(x: tensor<f32>[N]) {
            inf = 1.0
        }
        """, SemanticError, 2, 5, "constant"),
    Case("full with a tile value", """\
        kernel k(x: tensor<f32>[N]) {
            let a = full([4], x[0 :+ 4])
        }
        """, SemanticError, 2, 23, "scalar"),
    # ----------------------------------------------------------- checker: literals out of range
    Case("f32 literal beyond f32 stored", """\
        kernel k(x: tensor<f32>[N]) {
            x[0] = 3.4e39
        }
        """, SemanticError, 2, 12, "does not fit in f32"),
    Case("f32 literal beyond f32 bound by let", """\
        kernel k(x: tensor<f32>[N]) {
            let a = -3.4e39
        }
        """, SemanticError, 2, 13, "does not fit in f32"),
    Case("f32 literal beyond f32 in a math function", """\
        kernel k(x: tensor<f32>[N]) {
            x[0] = exp(1e39)
        }
        """, SemanticError, 2, 16, "does not fit in f32"),
    Case("float literal beyond f16 stored", """\
        kernel k(h: tensor<f16>[N]) {
            h[0] = 70000.0
        }
        """, SemanticError, 2, 12, "does not fit in f16"),
    Case("literal beyond i32 in maximum", """\
        kernel k(x: tensor<i32>[N]) {
            x[0] = maximum(3000000000, 1)
        }
        """, SemanticError, 2, 20, "does not fit in i32"),
    Case("literal beyond i32 in cdiv", """\
        kernel k(x: tensor<i32>[N]) {
            x[0] = cdiv(1, 5000000000)
        }
        """, SemanticError, 2, 20, "does not fit in i32"),
    Case("literal beyond i32 in where", """\
        kernel k(x: tensor<i32>[N], c: bool) {
            x[0] = where(c, 1, 3000000000)
        }
        """, SemanticError, 2, 24, "does not fit in i32"),
    Case("literal index beyond i32", """\
        kernel k(x: tensor<f32>[N]) {
            x[4294967296] = 1.0
        }
        """, SemanticError, 2, 7, "does not fit in i32"),
    Case("literal slice start beyond i32", """\
        kernel k(x: tensor<f32>[N]) {
            let t = x[-2147483649 :+ 4]
        }
        """, SemanticError, 2, 15, "does not fit in i32"),
    Case("arange beyond i32", """\
        kernel k(x: tensor<i32>[N]) {
            x[0 :+ 4] = arange(2147483646, 2147483650)
        }
        """, SemanticError, 2, 17, "do not fit in i32"),
    # ----------------------------------------------------------- checker: values beyond i32
    Case("tensor dimension beyond i32", """\
        kernel k(x: tensor<f32>[2147483648]) {
            x[0] = 1.0
        }
        """, SemanticError, 1, 25, "does not fit in i32"),
    Case("tensor of more elements than i32 indexes", """\
        kernel k(x: tensor<f32>[65536, N, 65536]) {
            x[0, 0, 0] = 1.0
        }
        """, SemanticError, 1, 13, "4294967296 elements"),
    Case("autotune range step beyond i32", """\
        @autotune(S in [64, 2147483648])
        kernel k(x: tensor<f32>[N]) {
            for i in range(0, N, S) {
                x[i] = 1.0
            }
        }
        """, SemanticError, 1, 21, "does not fit in i32"),
    Case("autotune value beyond i32 in arithmetic", """\
        @autotune(B in [4294967295])
        kernel k(x: tensor<i32>[N]) {
            x[0] = B * 2
        }
        """, SemanticError, 1, 17, "does not fit in i32"),
    Case("autotune value that would wrap", """\
        @autotune(B in [4294967297])
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ 4] = f32(arange(4) + B)
        }
        """, SemanticError, 1, 17, "does not fit in i32"),
    Case("autotune value below i32", """\
        @autotune(B in [-2147483649])
        kernel k(x: tensor<f32>[N]) {
            x[0] = f32(B)
        }
        """, SemanticError, 1, 17, "does not fit in i32"),
    # ----------------------------------------------------------- checker: knobs
    Case("WARPS not a power of two", """\
        @autotune(WARPS in [4, 3])
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ 32] = x[0 :+ 32] + 1.0
        }
        """, SemanticError, 1, 24, "WARPS must be a power of two from 1 to 32, got 3"),
    Case("WARPS beyond a CTA", """\
        @autotune(WARPS in [64])
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ 32] = x[0 :+ 32] + 1.0
        }
        """, SemanticError, 1, 21, "got 64"),
    Case("WARPS zero", """\
        @autotune(BLOCK in [32], WARPS in [0])
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ 32] = x[0 :+ 32] + 1.0
        }
        """, SemanticError, 1, 36, "got 0"),
    Case("STAGES below two", """\
        @autotune(STAGES in [1])
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ 32] = x[0 :+ 32] + 1.0
        }
        """, SemanticError, 1, 22, "STAGES must be from 2 to 8, got 1"),
    Case("STAGES too deep", """\
        @autotune(STAGES in [3, 16])
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ 32] = x[0 :+ 32] + 1.0
        }
        """, SemanticError, 1, 25, "got 16"),
    Case("GROUP_M zero", """\
        @autotune(GROUP_M in [0])
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ 32] = x[0 :+ 32] + 1.0
        }
        """, SemanticError, 1, 23, "GROUP_M must be from 1 to 64, got 0"),
    Case("CTAS_PER_SM too many", """\
        @autotune(CTAS_PER_SM in [1, 33])
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ 32] = x[0 :+ 32] + 1.0
        }
        """, SemanticError, 1, 30, "CTAS_PER_SM must be from 1 to 32, got 33"),
    Case("GROUP_M negative", """\
        @autotune(GROUP_M in [-8])
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ 32] = x[0 :+ 32] + 1.0
        }
        """, SemanticError, 1, 23, "got -8"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_program(case: Case):
    errors = front_end_errors(case.source)
    assert len(errors) == 1, "\n".join(map(str, errors))
    err = errors[0]
    assert type(err) is case.error, str(err)
    assert (err.loc.line, err.loc.col) == (case.line, case.col), str(err)
    assert err.loc.file == "test.phobos"
    assert case.word in err.message, str(err)
    if case.note is not None:
        notes = "\n".join(str(err).splitlines()[1:])
        assert case.note in notes, str(err)


def test_cases_are_distinct():
    """Every case exercises its own program (a copy-pasted case tests nothing new)."""
    assert len({c.source for c in CASES}) == len(CASES)
    assert len({c.name for c in CASES}) == len(CASES)


OVERFLOWING_SOURCES = [c.source for c in CASES if "beyond i32" in c.name or "would wrap" in c.name
                       or "beyond f32" in c.name]


@pytest.mark.parametrize("source", OVERFLOWING_SOURCES)
def test_values_beyond_their_dtype_are_semantic_errors_when_loading_and_compiling(source):
    """What the checker refuses never reaches a later stage as an OverflowError or an internal error."""
    import phobos
    from phobos.compiler import compile

    with pytest.raises(SemanticError):
        phobos.jit(source, mode="interpret")
    with pytest.raises(SemanticError):
        compile(source)


def test_knob_errors_stop_loading_not_the_first_call():
    import phobos

    src = next(c.source for c in CASES if c.name == "WARPS not a power of two")
    with pytest.raises(SemanticError, match="WARPS must be a power of two"):
        phobos.jit(src, mode="emulate")


def test_a_forced_knob_value_is_checked_at_its_parameter():
    from phobos.compiler import compile

    src = "@autotune(BLOCK in [32], WARPS in [4])\nkernel k(x: tensor<f32>[N]) {\n    x[0 :+ BLOCK] = 1.0\n}\n"
    with pytest.raises(SemanticError) as info:
        compile(src, config={"WARPS": 48})
    assert (info.value.loc.line, info.value.loc.col) == (1, 26)
    assert "WARPS must be a power of two from 1 to 32, got 48" in info.value.message


def test_a_forced_configuration_value_must_fit_i32():
    from phobos.compiler import compile

    src = "@autotune(B in [4])\nkernel k(x: tensor<f32>[N]) {\n    x[0 :+ B] = 1.0\n}\n"
    with pytest.raises(SemanticError, match="'B' is an i32 constant: 4294967296 does not fit"):
        compile(src, config={"B": 2**32})


# ------------------------------------------------------------------ rendering
def test_error_text_has_location_source_line_and_caret():
    src = "kernel k(x: tensor<f32>[N]) {\n    let a = 1 + b\n}\n"
    errors = check_program(parse_source(src, "dir/shown.phobos"))
    assert [e.diagnostic() for e in errors] == [
        "dir/shown.phobos:2:17: error: 'b' is not defined\n"
        "        let a = 1 + b\n"
        "                    ^"
    ]
    # A traceback names the class, which says it is an error: the text does not say it again.
    assert traceback.format_exception_only(errors[0]) == [
        "phobos.errors.SemanticError: dir/shown.phobos:2:17: 'b' is not defined\n"
        "        let a = 1 + b\n"
        "                    ^\n"
    ]


def test_errors_without_a_location_do_not_start_with_error():
    error = LaunchError("k: argument 'x': expected a 1-D f32 tensor")
    assert str(error) == "k: argument 'x': expected a 1-D f32 tensor"
    assert error.diagnostic() == "error: k: argument 'x': expected a 1-D f32 tensor"


def test_caret_keeps_tabs_so_it_lines_up():
    src = "kernel k(x: tensor<f32>[N]) {\n\tlet a =\t$\n}\n"
    with pytest.raises(LexError) as info:
        parse_source(src, "tabs.phobos")
    assert str(info.value) == ("tabs.phobos:2:10: unexpected character '$'\n"
                               "    \tlet a =\t$\n"
                               "    \t       \t^")


def test_quoted_line_is_the_line_the_lexer_counted():
    """Only newlines end lines: a form feed or a carriage return must not shift the quoted line."""
    src = "kernel k(x: tensor<f32>[N]) {\x0c\r\n    let a = $\r\n}\r\n"
    with pytest.raises(LexError) as info:
        parse_source(src, "feeds.phobos")
    assert str(info.value).splitlines()[1:] == ["        let a = $", "                ^"]


def test_notes_print_like_errors():
    src = "kernel k(x: tensor<f32>[N]) {\n    let a = 1\n    let a = 2\n}\n"
    (err,) = check_program(parse_source(src, "notes.phobos"))
    assert err.diagnostic() == ("notes.phobos:3:9: error: 'a' is already defined in this scope\n"
                        "        let a = 2\n"
                        "            ^\n"
                        "notes.phobos:2:9: note: previous definition is here\n"
                        "        let a = 1\n"
                        "            ^")


# ---------------------------------------------------------------- command line
def run_check(*paths, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "phobos", "check", *map(str, paths)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PHOBOS_LOG": "warning"})


def test_check_prints_every_error_of_a_file(tmp_path):
    path = tmp_path / "several.phobos"
    path.write_text(textwrap.dedent("""\
        kernel first(x: tensor<f32>[N], n: i32) {
            let a = undefined_name
            n = 3
        }

        @autotune(B in [4, 8])
        kernel second(x: tensor<f32>[16]) {
            let t = x[0 :+ B * 4]
            let u = t + x[0 :+ 2]
        }
        """))
    result = run_check(path)
    assert result.returncode == 1
    located = [line.split(" error: ")[0] for line in result.stderr.splitlines() if " error: " in line]
    assert located == [f"{path}:2:13:", f"{path}:3:5:", f"{path}:9:15:", f"{path}:8:20:"]
    assert "only in the autotune configuration B=8" in result.stderr
    assert result.stdout == ""


@pytest.mark.slow
def test_check_says_ok_for_the_examples():
    """Every configuration of every example is compiled for sm_90 (about half a minute): some of the attention
    kernels' configurations need more shared memory or registers than sm_90 has, which the autotuner skips,
    and check warns of (at the kernel's location)."""
    result = run_check(*(p.relative_to(REPO) for p in EXAMPLES), timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{p.relative_to(REPO)}: ok" for p in EXAMPLES]
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert warnings and all(re.fullmatch(r"examples/attention_\w+\.phobos:\d+:\d+: warning: (\d+ of the \d+ "
                                         r"configurations of kernel '\w+' do not fit sm_90|the compiler estimates "
                                         r"\d+ registers per thread, .*)", w) for w in warnings)
    assert "error:" not in result.stderr


def test_check_reports_the_configurations_that_do_not_fit_the_target(tmp_path):
    """A kernel needing 2105344 bytes of shared memory in one configuration was `ok`; a kernel none of whose
    configurations fits is an error, one some of whose do not a warning (the autotuner skips those)."""
    path = tmp_path / "huge.phobos"
    kernel = textwrap.dedent("""\
        @autotune(TILE in [{tiles}])
        kernel big(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N]) {{
            let a = A[0 :+ TILE, 0 :+ TILE]
            C[0 :+ TILE, 0 :+ TILE] = dot(a, B[0 :+ TILE, 0 :+ TILE])
        }}
        """)
    path.write_text(kernel.format(tiles="512"))
    result = run_check(path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines()[0] == (f"{path}:4:31: error: this needs 2105344 bytes of shared memory; the "
                                             f"target allows 232448 per CTA (use smaller tiles)")
    assert "note: in configuration TILE=512 of kernel 'big' for sm_90" in result.stderr
    path.write_text(kernel.format(tiles="64, 512"))
    result = run_check(path)
    assert result.returncode == 0 and result.stdout == f"{path}: ok\n"
    assert result.stderr.splitlines()[0].startswith(f"{path}:4:31: warning: this needs 2105344 bytes")
    assert result.stderr.splitlines()[-1] == "note: the autotuner skips it; 1 of the 2 fit"
    path.write_text(kernel.format(tiles="256, 512"))
    result = run_check(path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (f"{path}:4:31: error: none of the 2 configurations of kernel 'big' "
                                             f"fits sm_90")
    assert "note: TILE=256: this needs" in result.stderr and "note: TILE=512: this needs" in result.stderr


def test_check_reports_a_syntax_error_and_goes_on_to_the_next_file(tmp_path):
    bad = tmp_path / "bad.phobos"
    bad.write_text("kernel k(x: tensor<f32>[N]) {\n    let a = (1\n")
    result = run_check(bad, EXAMPLES[0].relative_to(REPO))
    assert result.returncode == 1
    assert f"{bad}:2:15: error: unexpected end of file; a ')' is missing" in result.stderr
    assert f"{EXAMPLES[0].relative_to(REPO)}: ok" in result.stdout
