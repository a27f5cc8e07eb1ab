# Every element-wise builtin under every compute dtype: the interpreter and the
# compiler accept the same programs (then ptxas accepts the PTX for sm_75 and
# sm_90, and the interpreter and the emulator compute the same values), or both
# refuse them with the same located error - the checker's.
from __future__ import annotations

import numpy as np
import pytest

import phobos
from phobos.errors import PhobosError
from phobos.frontend.builtins import BUILTINS
from phobos.frontend.sema import check_kernel
from phobos.compiler import parse_source, pick_kernel
from phobos.types import COMPUTE_DTYPES, DType
from tests.language_support import assert_ptxas_accepts, run

N = 8
ELEMENTWISE_RULES = {"unary_float", "unary_numeric", "binary_numeric", "binary_int", "cast", "fma", "mulhi"}
CASES = [(b.name, dt) for b in BUILTINS.values() if b.rule in ELEMENTWISE_RULES for dt in COMPUTE_DTYPES]


def source(name: str, dtype: DType, result: DType | None) -> str:
    """`o[...] = name(x, ...)` for x a tile of `dtype`; without a result type, `let y = name(x, ...)`."""
    arity = BUILTINS[name].signature.count(",") + 1
    call = f"{name}({', '.join(['x'] * arity)})"
    out = f"o[0 :+ {N}] = {call}" if result is not None else f"let y = {call}"
    return (f"kernel k(a: tensor<{dtype}>[N], o: tensor<{result or dtype}>[N]) {{\n"
            f"    let x = a[0 :+ {N}]\n"
            f"    {out}\n"
            f"}}\n")


def values(dtype: DType) -> np.ndarray:
    """Inputs every builtin is defined on: positive, away from overflow."""
    if dtype is DType.BOOL:
        return np.array([True, False] * (N // 2))
    return (np.arange(N) % 5 + 1).astype(dtype.numpy_name) * (1 if dtype.is_int else 0.375)


def refusal(src: str) -> str | None:
    try:
        check_kernel(pick_kernel(parse_source(src, "test.phobos"), None))
    except PhobosError as err:
        return str(err)
    return None


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{d}" for n, d in CASES])
def test_interpreter_and_compiler_accept_the_same_programs(name, dtype):
    src = source(name, dtype, None)
    try:
        ck = check_kernel(pick_kernel(parse_source(src, "test.phobos"), None))
        result = next(t for e, t in ck.types.items() if getattr(e, "func", None) == name).dtype
    except PhobosError as err:
        with pytest.raises(PhobosError) as compiled:
            phobos.compile(src, filename="test.phobos")
        with pytest.raises(PhobosError) as interpreted:
            phobos.jit(src, filename="test.phobos", mode="interpret")
        assert compiled.value.message == interpreted.value.message == err.message
        assert compiled.value.loc == interpreted.value.loc == err.loc
        return
    src = source(name, dtype, result)
    assert refusal(src) is None
    assert_ptxas_accepts(src)
    a = values(dtype)
    if result is DType.BF16:  # numpy knows "bfloat16" once ml_dtypes is imported
        pytest.importorskip("ml_dtypes", reason="bf16 arrays are ml_dtypes': pip install 'phobos-tile[test]'")
    out = np.zeros(N, result.numpy_name)
    (got_i,) = run(src, "interpret", a, out)[1:]
    (got_e,) = run(src, "emulate", a, out)[1:]
    np.testing.assert_allclose(got_e.astype(np.float64), got_i.astype(np.float64), rtol=1e-6)
