# The optimisation passes and the order they run in.
#
# Each pass is a function `Function -> None` that rewrites the IR in place and
# keeps it valid (`ir.verify` accepts it before and after).  They work at both
# levels: on tile-level IR before lowering, and again on thread-level IR, where
# the index arithmetic that lowering writes per element is where most of the
# folding, sharing and hoisting pays.
from __future__ import annotations

from typing import Callable

from ..ir import Function, format_function, verify
from .cse import cse
from .dce import dce
from .fold import fold
from .licm import licm
from .fuse_dot import fuse_dot
from .products_first import products_first

PASSES: dict[str, Callable[[Function], None]] = {
    "fold": fold,
    "cse": cse,
    "dce": dce,
    "licm": licm,
    "fuse-dot": fuse_dot,
    "products-first": products_first,
}

TILE_PIPELINE = ["fold", "licm", "cse", "fuse-dot", "dce"]
THREAD_PIPELINE = ["licm", "products-first", "dce"]  # lowering folds and shares values as it builds them


def run_pipeline(func: Function, names: list[str], *, stage: str, verify_each: bool = False,
                 dump_after: str | None = None, dumps: list[str] | None = None) -> None:
    """Run the named passes in order; `dump_after` appends the IR after that pass to `dumps`."""
    for name in names:
        PASSES[name](func)
        if verify_each:
            verify(func, thread_level=(stage == "thread"))
        if dumps is not None and dump_after in (name, f"{stage}:{name}"):
            dumps.append(f"// after {stage}:{name}\n{format_function(func)}")
