# What the front end makes of good programs: the examples check under every
# configuration; every kind of node carries the location of the token that
# identifies it; the checker's side tables (types, constants, size bindings,
# written tensors, loop- and branch-carried variables) hold what the later
# stages rely on; autotune expressions fold to constants; literal-only
# expressions take the dtype of their context; tile shapes broadcast like numpy.
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from phobos.frontend import ast
from phobos.compiler import parse_source
from phobos.errors import SemanticError
from phobos.frontend.sema import CheckedKernel, check_kernel, check_program, configurations
from phobos.types import DType, ScalarType, TileType, broadcast_shapes

from .frontend_support import EXAMPLES, EXAMPLES_DIR, front_end_errors

F32, I32, I64, BOOL = DType.F32, DType.I32, DType.I64, DType.BOOL


def parse(src: str) -> ast.Program:
    return parse_source(textwrap.dedent(src), "test.phobos")


def only_kernel(src: str) -> ast.Kernel:
    (kernel,) = parse(src).kernels
    return kernel


def example_kernel(name: str) -> ast.Kernel:
    (kernel,) = parse_source((EXAMPLES_DIR / f"{name}.phobos").read_text(), f"{name}.phobos").kernels
    return kernel


def assert_loc(node, line: int, col: int) -> None:
    assert (node.loc.line, node.loc.col) == (line, col), f"{type(node).__name__} at {node.loc}"


# ------------------------------------------------------------------ examples
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_checks_under_every_configuration(path):
    program = parse_source(path.read_text(), str(path))
    assert check_program(program) == []
    for kernel in program.kernels:
        for config in configurations(kernel):
            checked = check_kernel(kernel, config)
            assert checked.config == config


def test_configurations_are_the_product_of_the_autotune_lists_that_meet_require():
    configs = configurations(example_kernel("sgemm"))
    assert len(configs) == 3 * 3 * 3 - 1  # @require leaves out the largest tile
    assert {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64} not in configs
    assert configs[0] == {"TILE_M": 32, "TILE_N": 64, "TILE_K": 16}
    assert configs[1] == {"TILE_M": 32, "TILE_N": 64, "TILE_K": 64}
    assert configs[-1] == {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32}


def test_add_example_types():
    add = example_kernel("add")
    checked = check_kernel(add)
    (let_base, store) = add.body.stmts
    assert checked.symbols[let_base].type == ScalarType(I32)
    assert checked.types[store.value] == TileType(F32, (1024,))
    assert checked.written == {"c"}
    assert checked.sizes["N"].uses == [(0, 0), (1, 0), (2, 0)]


# -------------------------------------------------------------------- syntax
@pytest.mark.parametrize("body", [
    "let a = 1; let b = 2;",
    "let a = maximum(\n        1.0,\n        2.0\n    )",
    "let a = 1 +\n        2 *\n        3",
    "let a = m[0 :+ 4,\n              0 :+ 8]",
    "var c = 0\n    if c > 1 {\n        c = 1\n    }\n    else if c < 0 {\n        c = 0\n    }\n    else {\n    }",
    "var c = 0\n    c += 1; c -= 1; c *= 2; c /= 2",
    "let a: f32 = 1e-3 + 2.5e+4 + .5 + 1. // a comment\n    /* a comment\n       over lines */ let b = 2",
    "let a = m[n, 0 :+ 4] + m[0, 1]",
    "for i in range(0, n, 2) {\n    }\n    for j in range(n, 0, -1) {\n    }",
    "let a = sum(m[0 :+ 2, 0 :+ 4], axis=1,)",
    "let a = !(n > 1) && (n < 4 || false)",
    "atomic_add(m[0 :+ 2, 0 :+ 4], 1.0)",
])
def test_statement_syntax(body):
    src = f"@autotune(B in [4, 8],)\nkernel k(m: tensor<f32>[M, K], n: i32,) {{\n    {body}\n}}\n"
    assert front_end_errors(src) == []


# ----------------------------------------------------------------- locations
LOCATED = """\
@autotune(TM in [8, 16])
kernel locs(x: tensor<f32>[N], m: tensor<f32>[M, K], n: i32) {
    let base = program_id(0) * TM
    var acc: tile<f32>[TM] = 0.0
    for i in range(0, n, 2) {
        if i < 4 {
            acc += x[base + i :+ TM]
        } else {
            acc = acc * 2.5
        }
    }
    x[base :+ TM] = acc
    let one = m[0, 1]
    let flag = !(n > 0) || false
    let total = sum(acc, axis=0)
}
"""


@pytest.fixture(scope="module")
def located() -> ast.Kernel:
    return only_kernel(LOCATED)


def test_locations_of_kernel_parts(located):
    assert_loc(located, 2, 1)  # the 'kernel' keyword
    (deco,) = located.decorators
    assert_loc(deco, 1, 1)
    (tm,) = deco.params
    assert_loc(tm, 1, 11)
    assert [v.loc.col for v in tm.values] == [18, 21]
    x, m, n = located.params
    assert_loc(x, 2, 13)
    assert_loc(x.type, 2, 16)
    assert (x.type.dtype_loc.line, x.type.dtype_loc.col) == (2, 23)
    assert_loc(x.type.dims[0], 2, 28)
    assert_loc(m, 2, 32)
    assert [d.loc.col for d in m.type.dims] == [47, 50]
    assert_loc(n, 2, 54)
    assert_loc(n.type, 2, 57)
    assert_loc(located.body, 2, 62)  # the '{'


def test_locations_of_statements(located):
    let_base, var_acc, loop, store, let_one, let_flag, let_total = located.body.stmts
    assert_loc(let_base, 3, 5)
    assert (let_base.name_loc.line, let_base.name_loc.col) == (3, 9)
    assert_loc(var_acc, 4, 5)
    assert_loc(var_acc.type, 4, 14)
    assert_loc(var_acc.type.dims[0], 4, 24)
    assert_loc(loop, 5, 5)
    assert (loop.var_loc.line, loop.var_loc.col) == (5, 9)
    assert [e.loc.col for e in (loop.start, loop.end, loop.step)] == [20, 23, 26]
    assert_loc(loop.body, 5, 29)
    (branch,) = loop.body.stmts
    assert_loc(branch, 6, 9)
    assert_loc(branch.orelse, 8, 16)
    (accumulate,) = branch.then.stmts
    assert_loc(accumulate, 7, 17)  # an assignment sits at its operator
    (scale,) = branch.orelse.stmts
    assert_loc(scale, 9, 17)
    assert_loc(store, 12, 19)


def test_locations_of_expressions(located):
    let_base, var_acc, loop, store, let_one, let_flag, let_total = located.body.stmts
    product = let_base.value
    assert isinstance(product, ast.Binary)
    assert_loc(product, 3, 30)  # a binary operation sits at its operator
    assert_loc(product.lhs, 3, 16)  # a call at its name
    assert_loc(product.lhs.args[0], 3, 27)
    assert_loc(product.rhs, 3, 32)
    assert_loc(var_acc.value, 4, 30)  # a float literal
    branch = loop.body.stmts[0]
    assert_loc(branch.cond, 6, 14)
    load = branch.then.stmts[0].value
    assert isinstance(load, ast.Index)
    assert_loc(load, 7, 21)  # an index sits at its '['
    (window,) = load.subscripts
    assert isinstance(window, ast.Slice)
    assert_loc(window, 7, 31)  # a slice at its ':+'
    assert_loc(window.start, 7, 27)
    assert_loc(window.size, 7, 34)
    assert_loc(branch.orelse.stmts[0].value.rhs, 9, 25)
    assert [s.loc.col for s in let_one.value.subscripts] == [17, 20]
    either = let_flag.value
    assert_loc(either, 14, 25)
    assert_loc(either.lhs, 14, 16)  # a unary operation at its operator
    assert_loc(either.lhs.operand, 14, 20)  # parentheses leave no node
    assert_loc(either.rhs, 14, 28)  # a bool literal
    total = let_total.value
    assert_loc(total, 15, 17)
    (axis,) = total.kwargs
    assert_loc(axis, 15, 26)
    assert_loc(axis.value, 15, 31)


def test_start_loc_is_the_leftmost_token(located):
    load = located.body.stmts[2].body.stmts[0].then.stmts[0].value
    assert (ast.start_loc(load).line, ast.start_loc(load).col) == (7, 20)
    assert (ast.start_loc(load.subscripts[0]).col) == 22


def test_dump_shows_locations(located):
    text = ast.dump(located)
    assert "Kernel @2:1 name='locs'" in text
    assert "Binary @3:30 op='*'" in text
    assert "Slice @7:31" in text


# -------------------------------------------------------------- typed results
@pytest.fixture(scope="module")
def checked(located) -> CheckedKernel:
    return check_kernel(located, {"TM": 16})


def test_types_of_expressions(checked, located):
    let_base, var_acc, loop, store, let_one, let_flag, let_total = located.body.stmts
    assert checked.types[let_base.value] == ScalarType(I32)
    assert checked.types[var_acc.value] == ScalarType(F32)
    assert checked.symbols[var_acc].type == TileType(F32, (16,))
    load = loop.body.stmts[0].then.stmts[0].value
    assert checked.types[load] == TileType(F32, (16,))
    assert checked.types[let_one.value] == ScalarType(F32)
    assert checked.types[let_flag.value] == ScalarType(BOOL)
    assert checked.types[let_total.value] == TileType(F32, (1,))
    assert checked.symbols[loop].type == ScalarType(I32)


def test_size_bindings(checked):
    assert {name: b.uses for name, b in checked.sizes.items()} == {"N": [(0, 0)], "M": [(1, 0)], "K": [(1, 1)]}
    assert [p.name for p in checked.params] == ["x", "m", "n"]


def test_written_tensors_and_carried_variables(checked, located):
    var_acc, loop = located.body.stmts[1:3]
    acc = checked.symbols[var_acc]
    branch = loop.body.stmts[0]
    assert checked.written == {"x"}
    assert checked.carried[loop] == [acc]
    assert checked.carried[branch] == [acc]


def test_variables_declared_inside_are_not_carried():
    kernel = only_kernel("""\
        kernel k(x: tensor<f32>[N], n: i32) {
            var outer = 0
            for i in range(0, n) {
                var inner = i
                inner += 1
                if inner > 2 {
                    outer = inner
                }
            }
        }
        """)
    checked = check_kernel(kernel)
    outer_decl, loop = kernel.body.stmts
    branch = loop.body.stmts[2]
    assert checked.carried[loop] == [checked.symbols[outer_decl]]
    assert checked.carried[branch] == [checked.symbols[outer_decl]]
    assert checked.written == set()


# ---------------------------------------------------------- constant folding
def test_tile_extents_fold_per_configuration():
    kernel = only_kernel("""\
        @autotune(TM in [8, 16])
        kernel k(x: tensor<f32>[N]) {
            var t: tile<f32>[TM * 2, 4] = 0.0
        }
        """)
    (decl,) = kernel.body.stmts
    for tm in (8, 16):
        checked = check_kernel(kernel, {"TM": tm})
        assert checked.symbols[decl].type == TileType(F32, (tm * 2, 4))
        assert checked.consts[decl.type.dims[0]] == tm * 2


@pytest.mark.parametrize("expr, value", [
    ("TM * 2", 16),
    ("(TM + 2) * 3 - 1", 29),
    ("TM / 3", 2),
    ("-7 / 2", -3),  # division truncates toward zero, as in C
    ("-7 % 2", -1),
    ("cdiv(TM, 3)", 3),
    ("TM > 4 && TM < 16", True),
    ("i32(2.75)", 2),
    ("TM * 268435456", -2147483648),  # arithmetic on an i32 constant wraps
    ("2147483647 + 1", 2147483648),  # literal-only arithmetic is exact (and the result an i64)
    ("i32(3e9)", 2147483647),  # a float converted to an integer saturates, as on the GPU
    ("i32(-1e10)", -2147483648),
    ("u32(-1)", 4294967295),  # an integer converted to an integer keeps its low bits
    ("i32(3000000000)", -1294967296),
    ("f32(16777217)", 16777216.0),  # to a float: rounded to nearest even
    ("f32(1e39)", float("inf")),
    ("f64(f32(0.1))", 0.10000000149011612),
    ("cdiv(i32(2147483647), 2)", 1073741824),  # the exact quotient rounded up: nothing wraps
])
def test_constant_expressions(expr, value):
    kernel = only_kernel(f"""\
        @autotune(TM in [8])
        kernel k(x: tensor<f32>[N]) {{
            let c = {expr}
        }}
        """)
    (decl,) = kernel.body.stmts
    checked = check_kernel(kernel)
    assert checked.consts[decl.value] == value
    assert checked.symbols[decl].value == value


def test_a_let_constant_holds_its_dtypes_value():
    kernel = only_kernel("""\
        kernel k(x: tensor<f32>[N]) {
            let a = 0.1
            let b = f64(a)
        }
        """)
    checked = check_kernel(kernel)
    a, b = (checked.symbols[s] for s in kernel.body.stmts)
    assert a.value == b.value == float(np.float32(0.1))  # not the double 0.1: a is an f32


def test_the_checked_kernel_carries_the_knobs_of_its_configuration():
    from phobos.configuration import Knobs

    kernel = only_kernel("""\
        @autotune(WARPS in [4, 8], GROUP_M in [8], BLOCK in [64])
        kernel k(x: tensor<f32>[N]) {
            x[0 :+ BLOCK] = f32(WARPS * GROUP_M)
        }
        """)
    assert check_kernel(kernel).knobs == Knobs(warps=4, stages=None, group_m=8)
    assert check_kernel(kernel, {"WARPS": 8}).knobs.warps == 8
    assert check_kernel(only_kernel("kernel k(x: tensor<f32>[N]) {\n    x[0] = 1.0\n}\n")).knobs == Knobs()


def test_constants_size_slices():
    kernel = only_kernel("""\
        @autotune(B in [4, 8])
        kernel k(x: tensor<f32>[N]) {
            let half = B / 2
            let t = x[0 :+ half + 1]
        }
        """)
    t = kernel.body.stmts[1]
    assert check_kernel(kernel, {"B": 8}).symbols[t].type == TileType(F32, (5,))


# -------------------------------------------------------- literal adaptation
ADAPTATION_HEADER = "kernel k(x: tensor<f32>[N], n: i32, s: f32) {\n    let acc = x[0 :+ 8]\n"


@pytest.mark.parametrize("decl, expected", [
    ("let a = acc * 2", TileType(F32, (8,))),
    ("let a = 2 * acc", TileType(F32, (8,))),
    ("let a = s + 1", ScalarType(F32)),
    ("let a = n * 2", ScalarType(I32)),
    ("let a = exp(1)", ScalarType(F32)),
    ("let a = 1", ScalarType(I32)),
    ("let a = 1.0", ScalarType(F32)),
    ("let a = 3000000000", ScalarType(I64)),
    ("let a = abs(3000000000)", ScalarType(I64)),
    ("let a = 2147483647 + 1", ScalarType(I64)),
    ("var a: f32 = 1", ScalarType(F32)),
    ("var a: i64 = 1 + 2", ScalarType(I64)),
    ("var a: tile<f32>[8] = 0", TileType(F32, (8,))),
    ("let a = n < 2", ScalarType(BOOL)),
    ("let a = s < 2", ScalarType(BOOL)),
])
def test_literals_take_the_dtype_of_their_context(decl, expected):
    kernel = parse(ADAPTATION_HEADER + f"    {decl}\n}}\n").kernels[0]
    checked = check_kernel(kernel)
    assert checked.symbols[kernel.body.stmts[-1]].type == expected


@pytest.mark.parametrize("decl, message", [
    ("var a: i32 = 1.5", "cannot assign an f32 value to an i32 variable"),
    ("let a = n + 1.5", "mismatched types i32 and f32"),
    ("var a: i32 = s", "cannot assign an f32 value to an i32 variable"),
    ("let a = acc + n", "mismatched types f32 and i32"),
])
def test_literal_adaptation_does_not_extend_to_other_values(decl, message):
    (err,) = front_end_errors(ADAPTATION_HEADER + f"    {decl}\n}}\n")
    assert isinstance(err, SemanticError)
    assert message in err.message


def test_int_literal_stores_into_a_float_tensor():
    assert front_end_errors("kernel k(x: tensor<f32>[N]) {\n    x[0 :+ 4] = 1\n    x[4] = 0\n}\n") == []


# -------------------------------------------------------------- broadcasting
@pytest.mark.parametrize("a, b, expected", [
    ((4,), None, (4,)),
    ((4, 8), (4, 8), (4, 8)),
    ((4, 1), (1, 8), (4, 8)),
    ((4, 8), (8,), (4, 8)),
    ((4, 8), (1,), (4, 8)),
    ((2, 4, 8), (4, 1), (2, 4, 8)),
    ((4, 8), (4,), None),
    ((4, 8), (8, 4), None),
])
def test_element_wise_broadcasting(a, b, expected):
    def tile(shape):
        return "s" if shape is None else f"full([{', '.join(map(str, shape))}], 1.0)"

    src = f"kernel k(x: tensor<f32>[N], s: f32) {{\n    let a = {tile(a)} + {tile(b)}\n}}\n"
    if expected is None:
        with pytest.raises(ValueError):
            broadcast_shapes(a, b)
        (err,) = front_end_errors(src)
        assert "do not broadcast" in err.message
    else:
        assert broadcast_shapes(a, b) == expected
        kernel = parse(src).kernels[0]
        assert check_kernel(kernel).symbols[kernel.body.stmts[0]].type == TileType(F32, expected)


@pytest.mark.parametrize("target, value, ok", [
    ("var t: tile<f32>[4, 8] =", "full([1, 8], 0.0)", True),
    ("var t: tile<f32>[4, 8] =", "full([4, 1], 0.0)", True),
    ("var t: tile<f32>[4, 8] =", "full([8, 1], 0.0)", False),
    ("var t: tile<f32>[4, 1] =", "full([4, 8], 0.0)", False),  # a value never shrinks into its target
    ("m[0 :+ 4, 0 :+ 8] =", "full([8], 0.0)", True),
    ("m[0 :+ 4, 0 :+ 8] =", "full([4], 0.0)", False),
])
def test_assigned_values_broadcast_to_the_target(target, value, ok):
    errors = front_end_errors(f"kernel k(m: tensor<f32>[M, K]) {{\n    {target} {value}\n}}\n")
    if ok:
        assert errors == []
    else:
        (err,) = errors
        assert "shape mismatch" in err.message


def test_every_node_and_builtin_has_a_handler_in_each_tree_walk():
    from phobos.frontend import builtins, sema
    from phobos.middle import irgen
    from phobos.run import interpreter

    def subclasses(base):
        return {c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, base) and c is not base}

    rules = {b.rule for b in builtins.BUILTINS.values()}
    assert set(sema.STATEMENTS) == subclasses(ast.Stmt)
    assert set(sema.EXPRESSIONS) == subclasses(ast.Expr)
    assert set(sema.BUILTIN_RULES) == rules
    # literals and lists are constants (or errors) by the time the checked tree is walked again;
    # strings are options a builtin reads itself, or the messages of device_print and device_assert
    walked = subclasses(ast.Expr) - {ast.IntLit, ast.FloatLit, ast.BoolLit, ast.ListLit, ast.StrLit}
    for module in (irgen, interpreter):
        assert set(module.STATEMENTS) == subclasses(ast.Stmt), module.__name__
        assert set(module.EXPRESSIONS) == walked, module.__name__
        assert set(module.BUILTIN_RULES) == rules, module.__name__


def test_a_parsetab_module_beside_the_parser_is_never_imported(tmp_path):
    """PLY's yacc() imports `<package>.parsetab` before it builds tables; Phobos builds them itself, so
    a parsetab.py planted in (a copy of) the package is not run, and a stale one breaks nothing."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import phobos

    package = Path(phobos.__file__).resolve().parent
    shutil.copytree(package, tmp_path / "phobos", ignore=shutil.ignore_patterns("__pycache__"))
    marker = tmp_path / "parsetab-ran"
    (tmp_path / "phobos" / "frontend" / "parsetab.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n_tabversion = '3.10'\n_lr_signature = 'stale'\n"
        "_lr_action_items = {}\n_lr_goto_items = {}\n_lr_productions = []\n_lr_method = 'LALR'\n")
    script = ("import phobos; print(phobos.__file__); "
              "print(phobos.compile('kernel k(x: tensor<f32>[N]) { x[0] = 1.0 }').kernel_name)")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path),
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(str(tmp_path))
    assert done.stdout.splitlines()[1] == "k"
    assert not marker.exists()


def test_the_lalr_tables_kept_beside_the_parser_are_the_grammars(tmp_path):
    """lalr_tables.json is read instead of generating the tables at every start; a stale one would be
    ignored (the tables generated in memory), so a grammar changed without `python -m phobos.frontend.parser`
    fails here."""
    import json

    from phobos.frontend import parser

    fresh = json.loads(parser.write_tables(tmp_path / "tables.json").read_text())
    kept = json.loads(parser.TABLES.read_text())
    assert kept["signature"] == fresh["signature"], \
        "phobos/frontend/lalr_tables.json is out of date: run `python -m phobos.frontend.parser`"
    assert (kept["action"], kept["goto"]) == (fresh["action"], fresh["goto"])
    assert [p[:4] for p in kept["productions"]] == [p[:4] for p in fresh["productions"]]  # lines may move
    assert parser._kept_tables(fresh["signature"]) is not None
    assert parser._kept_tables("another grammar") is None  # then the parser generates its tables
