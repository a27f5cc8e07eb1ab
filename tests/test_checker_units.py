# The checker's rules one at a time (phobos/frontend/checker/): each rule is
# called on a small syntax tree built by hand, in a Checker whose scope holds
# the names the tree uses, and the test reads the type it gives, the constants
# and side tables it records, or the error it raises and where it points.
# tests/test_frontend*.py check whole programs; these check the pieces.
from __future__ import annotations

import pytest

from phobos.errors import Loc, SemanticError
from phobos.frontend import ast, sema
from phobos.frontend.checker import (calls, core, expressions, functions, math_rules, program_rules,
                                     reduce_rules, statements, tile_rules)
from phobos.frontend.checker.checked import Symbol
from phobos.frontend.parser import parse_source
from phobos.types import DType, ScalarType, TileType

FILE = "unit.phobos"
F32, I32, I64 = (ScalarType(d) for d in (DType.F32, DType.I32, DType.I64))


def at(col: int) -> Loc:
    return Loc(FILE, 5, col)


def make_checker(functions: str = "", **names) -> core.Checker:
    """A Checker of `kernel k(x: tensor<f32>[N], n: i32)` under BLOCK=64 after the device `functions`,
    inside the body's scope, where each keyword names a `let` of that type."""
    source = f"{functions}\n@autotune(BLOCK in [64])\nkernel k(x: tensor<f32>[N], n: i32) {{\n}}\n"
    program = parse_source(source, FILE)
    ck = sema.Checker(program.kernels[0], {"BLOCK": 64})
    ck.check()
    ck.scopes.append({})
    for name, t in names.items():
        ck.define(Symbol(name, "let", t, at(1)))
    return ck


def name(id_: str, col: int = 1) -> ast.Name:
    return ast.Name(at(col), id_)


def call(func: str, *args: ast.Expr, col: int = 1, **kwargs: ast.Expr) -> ast.Call:
    return ast.Call(at(col), func, list(args), [ast.Keyword(at(col), k, v) for k, v in kwargs.items()])


def tile(*shape: int, dtype: DType = DType.F32) -> TileType:
    return TileType(dtype, shape)


def fails(fn, *args, match: str, col: int) -> SemanticError:
    with pytest.raises(SemanticError, match=match) as error:
        fn(*args)
    assert error.value.loc == at(col), error.value.loc
    return error.value


# --- the tables: one rule per key, each in the module of its concern

def test_each_rule_lives_in_the_module_of_its_concern():
    modules = {statements.__name__}
    assert {core.STATEMENTS.lookup(key).__module__ for key in core.STATEMENTS} == modules
    assert {core.EXPRESSIONS.lookup(key).__module__ for key in core.EXPRESSIONS} == \
        {expressions.__name__, calls.__name__}
    assert core.EXPRESSIONS.lookup(ast.Call) is calls.expr_call
    rule_modules = {math_rules.__name__, tile_rules.__name__, reduce_rules.__name__, program_rules.__name__}
    assert {core.BUILTIN_RULES.lookup(key).__module__ for key in core.BUILTIN_RULES} == rule_modules
    assert sema.STATEMENTS is core.STATEMENTS and sema.BUILTIN_RULES is core.BUILTIN_RULES


# --- expressions

def test_literal_arithmetic_is_weak_and_folded_exactly():
    ck = make_checker(acc=F32)
    product = ast.Binary(at(3), "*", ast.IntLit(at(1), 4), ast.IntLit(at(5), 1024))
    assert expressions.expr_binary(ck, product) == I32
    assert product in ck.weak and ck.out.consts[product] == 4096
    scaled = ast.Binary(at(5), "*", name("acc"), ast.IntLit(at(7), 2))
    assert expressions.expr_binary(ck, scaled) == F32  # the literal takes the f32 of its context
    assert scaled not in ck.weak


def test_a_weak_constant_must_fit_the_dtype_it_settles_in():
    ck = make_checker(i=I32)
    big = ast.Binary(at(5), "+", name("i", 1), ast.IntLit(at(7), 1 << 40))
    fails(expressions.expr_binary, ck, big, match=r"the constant 1099511627776 does not fit in i32", col=7)


def test_an_operator_on_mismatched_dtypes_points_at_the_operator():
    ck = make_checker(a=F32, b=I64)
    fails(expressions.expr_binary, ck, ast.Binary(at(3), "+", name("a", 1), name("b", 5)),
          match=r"mismatched types f32 and i64", col=3)


def test_a_shift_by_a_constant_beyond_the_width_is_refused():
    ck = make_checker(i=I32)
    fails(expressions.expr_binary, ck, ast.Binary(at(3), "<<", name("i", 1), ast.IntLit(at(6), 32)),
          match=r"a shift of an i32 by 32: the amount must be from 0 to 31", col=6)


def test_a_tensor_slice_is_a_tile_of_the_slice_sizes():
    ck = make_checker()
    index = ast.Index(at(2), name("x"), [ast.Slice(at(5), ast.IntLit(at(3), 0), name("BLOCK", 7))])
    assert expressions.expr_index(ck, index) == tile(64)
    assert ck.out.consts[index.subscripts[0].size] == 64
    wrong_rank = ast.Index(at(2), name("x"), [ast.IntLit(at(3), 0), ast.IntLit(at(5), 0)])
    fails(expressions.expr_index, ck, wrong_rank, match=r"tensor 'x' has 1 dimension but is indexed with 2",
          col=2)


def test_a_part_of_a_tile_is_indexed_by_constants_inside_its_extent():
    ck = make_checker(t=tile(8, 4))
    part = ast.Index(at(2), name("t"), [ast.Slice(at(5), ast.IntLit(at(3), 4), ast.IntLit(at(7), 4)),
                                        ast.IntLit(at(10), 1)])
    assert expressions.expr_index(ck, part) == tile(4)
    outside = ast.Index(at(2), name("t"), [ast.IntLit(at(3), 8), ast.IntLit(at(6), 0)])
    fails(expressions.expr_index, ck, outside, match=r"index 8 is outside the tile's extent 8", col=3)


# --- calls and builtin typing rules

def test_an_unknown_function_suggests_the_close_one():
    fails(calls.expr_call, make_checker(), call("sqrtt", ast.FloatLit(at(7), 2.0, "2.0"), col=2),
          match=r"unknown function 'sqrtt'; did you mean 'sqrt'\?", col=2)


def test_a_builtin_called_with_too_many_arguments_names_its_signature():
    fails(calls.expr_call, make_checker(), call("program_id", ast.IntLit(at(12), 0), ast.IntLit(at(15), 1), col=2),
          match=r"program_id\(\) takes 1 argument, got 2: program_id\(axis\)", col=2)


def test_dot_needs_matching_inner_extents():
    ck = make_checker(a=tile(16, 8), b=tile(8, 32), c=tile(4, 32))
    assert tile_rules.call_dot(ck, call("dot", name("a"), name("b"))) == tile(16, 32)
    fails(tile_rules.call_dot, ck, call("dot", name("a"), name("c"), col=3),
          match=r"dot\(\) needs \[M, K\] x \[K, N\]: got \[16, 8\] x \[4, 32\]", col=3)


def test_dot_precision_is_a_known_string_for_f32_operands():
    ck = make_checker(a=tile(16, 8), b=tile(8, 16), h=tile(16, 8, dtype=DType.BF16), g=tile(8, 16, dtype=DType.BF16))
    fails(tile_rules.call_dot, ck, call("dot", name("a"), name("b"), precision=ast.StrLit(at(20), "tf31")),
          match=r'unknown precision "tf31" of dot\(\); .* did you mean "tf32"\?', col=20)
    fails(tile_rules.call_dot, ck, call("dot", name("h"), name("g"), precision=ast.StrLit(at(20), "tf32")),
          match=r'precision="tf32" applies to f32 operands, not bf16', col=1)
    assert tile_rules.call_dot(ck, call("dot", name("h"), name("g"))) == tile(16, 16)  # f32 sums


def test_a_cast_of_a_constant_is_folded_and_an_infinite_one_has_no_integer():
    ck = make_checker()
    cast = call("i32", ast.FloatLit(at(5), 2.75, "2.75"))
    assert math_rules.call_cast(ck, cast) == I32 and ck.out.consts[cast] == 2
    infinite = call("i32", ast.Unary(at(5), "-", name("inf", 6)))
    fails(math_rules.call_cast, ck, infinite, match=r"the constant -inf has no i32 value", col=5)


def test_a_reduction_keeps_the_axis_with_extent_one_and_checks_its_range():
    ck = make_checker(t=tile(8, 16))
    assert reduce_rules.call_reduce(ck, call("sum", name("t"), ast.IntLit(at(9), 1))) == tile(8, 1)
    assert reduce_rules.call_reduce(ck, call("max", name("t"))) == F32
    fails(reduce_rules.call_reduce, ck, call("sum", name("t"), ast.IntLit(at(9), 2)),
          match=r"axis 2 is out of range for a tile of rank 2", col=9)


def test_an_atomic_is_typed_like_a_store_and_marks_its_tensor_written():
    ck = make_checker(v=tile(64))
    target = ast.Index(at(12), name("x", 11), [ast.Slice(at(15), ast.IntLit(at(13), 0), ast.IntLit(at(17), 64))])
    assert program_rules.call_atomic(ck, call("atomic_add", target, name("v", 22))) == tile(64)
    assert ck.out.written == {"x"}
    fails(program_rules.call_atomic, ck, call("atomic_add", name("v", 11), name("v", 14)),
          match=r"the first argument of atomic_add\(\) is a tensor slice", col=11)


# --- statements

def test_a_let_binding_cannot_be_assigned():
    ck = make_checker()
    statements.stmt_let(ck, ast.Let(at(1), "s", at(5), None, ast.IntLit(at(9), 3), False))
    assert ck.lookup("s", at(1)).value == 3
    fails(statements.stmt_assign, ck, ast.Assign(at(3), name("s", 1), "=", ast.IntLit(at(5), 4)),
          match=r"cannot assign to 's': it was declared with 'let' \(use 'var' to make it mutable\)", col=1)


def test_a_var_assigned_in_a_loop_is_carried_out_of_it():
    ck = make_checker()
    statements.stmt_let(ck, ast.Let(at(1), "acc", at(5), None, ast.FloatLit(at(11), 0.0, "0.0"), True))
    body = ast.Block(at(1), [ast.Assign(at(5), name("acc", 1), "+=", ast.FloatLit(at(8), 1.0, "1.0"))])
    loop = ast.For(at(1), "i", at(5), ast.IntLit(at(16), 0), name("n", 19), None, body)
    statements.stmt_for(ck, loop)
    assert not ck.errors and [sym.name for sym in ck.out.carried[loop]] == ["acc"]
    assert ck.out.symbols[loop].type == I32  # the loop variable takes its bounds' dtype


def test_an_if_condition_is_a_scalar_bool():
    ck = make_checker(mask=tile(8, dtype=DType.BOOL))
    branch = ast.If(at(1), name("mask", 4), ast.Block(at(1), []), None)
    fails(statements.stmt_if, ck, branch,
          match=r"an if condition must be a scalar bool, not tile<bool>\[8\]; use where\(cond, a, b\)", col=4)


# --- names and device functions

def test_an_unknown_name_suggests_a_close_one_in_scope():
    ck = make_checker(total=F32)
    fails(ck.lookup, "totl", at(4), match=r"'totl' is not defined; did you mean 'total'\?", col=4)
    fails(ck.lookup, "sum", at(4), match=r"'sum' is a function: call it as sum\(x, axis=None\)", col=4)


def test_a_device_function_is_checked_per_call_under_its_arguments_types():
    ck = make_checker("fn twice(v) { return v + v }", t=tile(4, dtype=DType.I32))
    use = call("twice", name("t", 7))
    assert functions.call_function(ck, use, ck.kernel.functions["twice"]) == tile(4, dtype=DType.I32)
    inlined = ck.out.calls[use]
    assert inlined.params[0].type == tile(4, dtype=DType.I32)
    assert inlined.body is not ck.kernel.functions["twice"].body  # a copy: its nodes key this call's types


def test_a_recursive_device_function_is_an_error_at_the_inner_call_noted_at_the_outer():
    ck = make_checker("fn loop(v) { return loop(v) }", s=F32)
    with pytest.raises(core.Poisoned):  # the error is recorded; the call is skipped
        functions.call_function(ck, call("loop", name("s", 6), col=2), ck.kernel.functions["loop"])
    (error,) = ck.errors
    assert "recursive call of 'loop' (loop -> loop)" in error.message and error.loc.line == 1
    assert [(note.message, note.loc) for note in error.notes] == [("in the call of 'loop' here", at(2))]
