# phobos.torch_op on the CPU: the op's schema (mutated tensors declared), eager
# calls through the interpreter on CPU tensors, torch.compile tracing it with
# the eager backends (no C++ compiler needed), and the fake implementation's
# checks on tensors without data, named like the binding's.  Skipped where
# torch is not installed; tests/test_call_path_gpu.py compiles it with
# inductor on the GPU.
from __future__ import annotations

import itertools

import pytest

import phobos
from phobos.errors import LaunchError, PhobosError

from .launcher_fakes import ADD4, AXPY

torch = pytest.importorskip("torch")

_names = itertools.count()


def unique(name: str) -> str:
    """torch keeps registered ops for the process: every test registers its own."""
    return f"phobos_test::{name}_{next(_names)}"


@pytest.fixture
def add_op():
    return phobos.torch_op(phobos.kernel(ADD4, mode="interpret").configure(BLOCK=128), name=unique("add"))


def test_the_schema_declares_what_the_kernel_writes():
    op = phobos.torch_op(phobos.kernel(AXPY, mode="interpret"), name=unique("axpy"))
    schema = str(op._opoverload._schema)
    assert schema.endswith("(Tensor x, Tensor(a1!) y, float alpha, SymInt offset, bool on) -> ()")
    x, y = torch.ones(256), torch.zeros(256)
    op(x, y, alpha=2.0, offset=1, on=True)  # scalars by name, as torch passes them on
    assert torch.equal(y, torch.full((256,), 3.0))


def test_an_eager_call_runs_the_kernel_in_place(add_op):
    a, b, c = torch.randn(300), torch.randn(300), torch.zeros(300)
    add_op(a, b, c)
    assert torch.equal(c, a + b)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_traces_through_the_op(add_op, backend):
    def f(a, b, c):
        add_op(a, b, c)
        return c * 2

    a, b, c = torch.randn(200), torch.randn(200), torch.zeros(200)
    result = torch.compile(f, backend=backend, fullgraph=True)(a, b, c)
    assert torch.equal(result, (a + b) * 2) and torch.equal(c, a + b)


def test_the_fake_implementation_checks_dtypes_and_shapes_naming_the_argument(add_op):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(300)
        with pytest.raises(LaunchError) as error:
            add_op(x, x, torch.empty(300, dtype=torch.float64))
        assert error.value.message == ("add: argument 'c': expected a 1-D f32 tensor [N] with N = 300 (from 'a'), "
                                       "got torch.float64 tensor of shape (300,) on cpu; convert it: "
                                       "c = c.to(torch.float32), and read the result from the new 'c'")
        with pytest.raises(LaunchError, match="argument 'b': expected a 1-D f32 tensor"):
            add_op(x, torch.empty(299), x)
        add_op(x, x, x)  # fine: nothing is computed


def test_a_name_without_a_namespace_is_refused():
    with pytest.raises(PhobosError, match="torch_op: name must be 'namespace::op', got 'add'"):
        phobos.torch_op(phobos.kernel(ADD4, mode="interpret"), name="add")


TWICE_BF16 = """\
kernel twice(x: tensor<bf16>[N], y: tensor<bf16>[N]) {
    let i = program_id(0) * 128
    y[i :+ 128] = bf16(x[i :+ 128] * 2.0)
}
"""


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
def test_bf16_cpu_tensors_are_written_in_place(mode):
    # numpy has no bfloat16: a CPU bf16 tensor once failed to bind ("cannot view it as a numpy array")
    op = phobos.torch_op(phobos.kernel(TWICE_BF16, mode=mode), name=unique("twice"))
    x, y = torch.randn(300).to(torch.bfloat16), torch.zeros(300, dtype=torch.bfloat16)
    op(x, y)
    assert torch.equal(y, x * 2)
