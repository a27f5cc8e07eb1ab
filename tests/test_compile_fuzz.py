# The differential compile test: every generated program that the checker
# accepts - so that the interpreter runs it - must compile for sm_75, sm_80
# and sm_90a, so that "interpret passes" implies "compiles" and no internal
# error reaches a user.  The programs come from the suite's generators:
# tests/call_generator.py (calls of every builtin in the registry, on
# operands of every dtype and kind; most draws are refused by the checker and
# skipped) and tests/kernel_generator.py (the edge-contract kernels).
# Compiling is all that is asked here (ptxas runs elsewhere: test_edge_property
# and the language tests); the only error a valid program may meet is a
# ResourceError (a configuration too large for the target), which these
# generators never make.  In CI it is a bounded slice; PHOBOS_FUZZ_SCALE
# multiplies it, and `python tools/fuzz_campaign.py --only compile` runs it for
# as long as asked.
#
# Below, the programs the fuzz found wrong, kept as plain tests.
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note, seed, settings

from phobos.compiler import compile_kernel, parse_source
from phobos.errors import PhobosError, ResourceError
from phobos.frontend.sema import check_program

from .call_generator import builtins_called, call_programs
from .fuzzing import fuzz_settings
from .kernel_generator import kernels
from .language_support import MODES, run

ARCHS = ("sm_75", "sm_80", "sm_90a")


def compile_everywhere(source: str) -> bool:
    """Compile every kernel of `source` for each target when the checker accepts it; whether it did.

    A PhobosError other than a ResourceError, from a program the checker accepted, fails the test."""
    try:
        program = parse_source(source, "generated.phobos")
    except PhobosError:
        return False
    if check_program(program):
        return False
    note(source)
    for kernel in program.kernels:
        for arch in ARCHS:
            try:
                compile_kernel(kernel, arch=arch)
            except ResourceError:
                pass
            except PhobosError as error:
                pytest.fail(f"{arch}: a program the checker accepts does not compile:\n{error}\n\n{source}")
    return True


@fuzz_settings(1000)
@given(call_programs())
def test_every_accepted_call_of_a_builtin_compiles(source):
    compile_everywhere(source)


@fuzz_settings(60)
@given(kernels())
def test_every_generated_edge_kernel_compiles(generated):
    assert compile_everywhere(generated.source)


def test_the_call_generator_reaches_the_compiler():
    """A fixed sample of call programs is compiled like the ones above: one in twenty checks, at least
    (so the test above compiles some), calling ten builtins between them."""
    reached: list[set[str] | None] = []

    @seed(39)
    @settings(max_examples=300, deadline=None, database=None)
    @given(call_programs())
    def sample(source):
        reached.append(builtins_called(source) if compile_everywhere(source) else None)

    sample()
    accepted = [called for called in reached if called is not None]
    assert len(accepted) >= len(reached) // 20
    assert len(set().union(*accepted)) >= 10


# ------------------------------------------------------------ what the fuzz found
JOIN_SCALARS = """
kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {
    let t = join(x[0], x[1] * 2.0)
    y[0 :+ 2] = t
    let (a, b) = split(join(x[2], 5.0))
    y[2 :+ 2] = join(b, a)
}
"""


@pytest.mark.parametrize("mode", MODES)
def test_join_of_two_scalars(mode):
    """join(a, b) of scalars is the [2] tile (a, b) (the back end crashed on it)."""
    x = np.array([1.5, -2.0, 7.0, 0.0], np.float32)
    _, y = run(JOIN_SCALARS, mode, x, np.zeros(4, np.float32))
    np.testing.assert_array_equal(y, [1.5, -4.0, 5.0, 7.0])


HALF_PRINT = """
kernel k(h: tensor<f16>[N], b: tensor<bf16>[N]) {
    device_print("h {} b {}", h[0], b[0])
}
"""


@pytest.mark.parametrize("mode", MODES)
def test_device_print_of_16_bit_floats(mode, capfd):
    """A 16-bit float prints as the f32 it stands for (the back end had no format for it)."""
    h = np.array([0.333251953125], np.float16)
    b = np.array([0x3FC0], np.uint16)  # 1.5
    run(HALF_PRINT, mode, h, b)
    assert capfd.readouterr().out.strip() == "[program (0, 0, 0)] h 0.333251953 b 1.5"


HALF_SCAN = """
kernel k(h: tensor<f16>[N], b: tensor<bf16>[N], s: tensor<f32>[N], p: tensor<f32>[N]) {
    s[0 :+ 8] = cumsum(h[0 :+ 8])
    p[0 :+ 8] = cumprod(b[0 :+ 8])
    device_print("{}", cumprod(b[4 :+ 4]))
}
"""


@pytest.mark.parametrize("mode", MODES)
def test_scans_of_16_bit_floats_are_f32(mode, capfd):
    """cumsum and cumprod of 16-bit tiles run in f32 and give f32, as sum does (their registers were typed
    16-bit, which printing one crashed on)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    h = np.array([0.5, 1024, 0.25, -3, 2049, 1, 1, 1], np.float16)
    b = np.array([2, 0.5, 3, 1.5, 1, 1, 2, -1], ml_dtypes.bfloat16)
    *_, s, p = run(HALF_SCAN, mode, h, b, np.zeros(8, np.float32), np.zeros(8, np.float32))
    np.testing.assert_array_equal(s, np.cumsum(h.astype(np.float32)))  # 1024.5 + 0.25: not rounded to f16
    np.testing.assert_array_equal(p, np.cumprod(b.astype(np.float32)))
    assert len(capfd.readouterr().out.splitlines()) == 4
