# A Phobos kernel as a torch custom op, so torch.compile graphs can call it.
#
#   add = phobos.load("examples/add.phobos").add
#   op = phobos.torch_op(add)                  # torch.ops.phobos.add
#   op(a, b, c)                                # the kernel, on torch's current stream
#   torch.compile(lambda a, b, c: op(a, b, c) or c * 2)(a, b, c)
#
# `torch_op` registers the kernel with `torch.library.custom_op` under
# "phobos::<kernel>" (or `name=`): one parameter per source parameter, in
# order, typed Tensor, float, int or bool; the tensors the kernel writes are
# declared mutated, and the op returns nothing (results are written in place,
# as the kernel does).  Its fake (meta) implementation checks what torch.compile
# knows before running anything - element types, ranks, literal dimensions and
# sizes that agree - with the binding's own messages, naming the argument, and
# computes nothing.  torch is imported only here, when the helper is used.
from __future__ import annotations

import inspect
from typing import Any

from ..errors import PhobosError, raised_at_call_site
from ..types import DType
from .binding import TensorView, bind


def _scalar_annotation(dtype: DType) -> type:
    if dtype is DType.BOOL:
        return bool
    return float if dtype.is_float else int


def _shape_view(value: Any) -> TensorView | None:
    """A torch tensor known by its dtype and shape only (a FakeTensor under torch.compile): no address."""
    if not (type(value).__module__.startswith("torch") and hasattr(value, "dtype") and hasattr(value, "shape")):
        return None
    dtype_name = str(value.dtype).removeprefix("torch.")
    shape = tuple(value.shape)
    return TensorView(None, 0, shape, dtype_name, value.is_contiguous(), False,
                      f"torch.{dtype_name} tensor of shape {shape} on {value.device}")


@raised_at_call_site
def torch_op(kernel: Any, name: str | None = None) -> Any:
    """Register a kernel callable (`mod.k`, possibly `.configure(...)`d) as a torch custom op; return the op.

    `name` is "namespace::op" (default "phobos::<kernel name>"); torch refuses
    a name registered twice in one process.
    """
    import torch

    info = kernel._kernel.info
    qualified = name or f"phobos::{kernel.name}"
    if "::" not in qualified:
        raise PhobosError(f"torch_op: name must be 'namespace::op', got {qualified!r}")
    parameters = [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    annotation=torch.Tensor if p.kind == "tensor" else _scalar_annotation(p.dtype))
                  for p in info.params]

    def run(*args: Any, **kwargs: Any) -> None:
        kernel(*args, **kwargs)

    def check(*args: Any, **kwargs: Any) -> None:
        bind(kernel.name, info.params, info.size_names, args, kwargs, view=_shape_view)

    for function in (run, check):
        function.__signature__ = inspect.Signature(parameters, return_annotation=None)
    op = torch.library.custom_op(qualified, run, mutates_args=[p.name for p in info.params if p.written])
    op.register_fake(check)
    return op
