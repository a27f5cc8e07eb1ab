# A generator of valid Phobos kernels that poke at the edges of their tensors,
# for the property test in test_edge_property.py and for longer campaigns
# (tools/fuzz_campaign.py).
#
# A generated kernel reads two input tensors (1-D `a` and 2-D `g`, of random
# element types and sizes) through slices whose starts are scalar parameters
# of type i32, i64 or u32 plus or minus a constant, and whose values are drawn
# to reach far outside: near 2^31, 2^32 and 2^63, negative, and just around the
# edges.  It combines the loaded tiles with element-wise operations and
# reductions and writes through stores, `op=` updates and atomic adds into
# output tensors (`y`, `z`, `w`, `m`), sometimes reading back what it wrote.
# Tile sizes come from the autotune configuration (`B`, `R`, `C`, sometimes
# `WARPS`), not only powers of two.
#
# The values stay exact in every order of evaluation: inputs are small
# integers, operations are +, -, max, min, abs, where and scaling by 2, -1 or
# 0.5, so sums of a tile are exact in f32 and the interpreter and the
# emulator - or the GPU - must agree bit for bit.  With more than one program
# instance, each instance writes only its own slices (the start of every store
# is `program_id(0) * size + s`, one `s` per tensor), reads no output and adds
# its reductions atomically, so no two instances race.
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

INDEX_TYPES = ("i32", "i64", "u32")
INPUT_TYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i8": np.int8}
OUTPUT_TYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32}

#: Index values far from a small tensor, per index type.
FAR = {
    "i32": [2**31 - 1, 2**31 - 2, 2**31 - 5, -2**31, -2**31 + 1, -2**31 + 7],
    "i64": [2**31 - 3, 2**31, 2**32, 2**32 - 2, 2**32 + 1, -2**32, -2**32 + 3, 2**63 - 1, 2**63 - 9,
            -2**63, -2**63 + 5],
    "u32": [2**32 - 1, 2**32 - 3, 2**31, 2**31 - 2, 2**31 + 1],
}


@dataclass
class GeneratedKernel:
    """A kernel's source, the configuration and grid to run it with, and its arguments."""

    source: str
    config: dict[str, int]
    grid: tuple[int, ...]
    arrays: dict[str, np.ndarray]
    scalars: dict[str, int] = field(default_factory=dict)

    def arguments(self) -> list:
        """Fresh copies of the arrays, then the scalars, in parameter order."""
        return [a.copy() for a in self.arrays.values()] + list(self.scalars.values())

    def outputs(self) -> list[str]:
        return [name for name in self.arrays if name not in ("a", "g")]


@st.composite
def index_values(draw, dtype: str, extent: int) -> int:
    """An index of `dtype`: near the tensor's edges, inside, or far away."""
    low = 0 if dtype == "u32" else -extent - 8
    near = st.integers(low, extent + 8)
    return draw(st.one_of(near, near, st.sampled_from(FAR[dtype])))


class _Body:
    """The statements of one kernel under construction, with the names they use."""

    def __init__(self, draw, grid: int, sizes: dict[str, int], index_params: dict[str, str]):
        self.draw = draw
        self.grid = grid
        self.sizes = sizes
        self.index_params = index_params  # name -> index type
        self.lines: list[str] = []
        self.lets = 0
        self.output_starts: dict[str, str] = {}  # with several instances: the one start per output dim

    # -- index expressions
    def start(self) -> str:
        name = self.draw(st.sampled_from(sorted(self.index_params)))
        offset = self.draw(st.sampled_from([0, 0, 1, 3, -1, -4]))
        if offset == 0:
            return name
        return f"{name} {'+' if offset > 0 else '-'} {abs(offset)}"

    def output_start(self, key: str, size: str) -> str:
        """The start of a store: free with one instance; `program_id(0) * size + s` with several."""
        if self.grid == 1:
            return self.start()
        if key not in self.output_starts:
            name = self.draw(st.sampled_from(sorted(self.index_params)))
            kind = self.index_params[name]
            base = f"program_id(0) * {size}" if kind == "i32" else f"{kind}(program_id(0) * {size})"
            self.output_starts[key] = f"{base} + {name}"
        return self.output_starts[key]

    # -- tile expressions, f32, of shape [B] (rank 1) or [R, C] (rank 2)
    def leaf(self, rank: int) -> str:
        choices = ["load", "load", "const"] + (["arange"] if rank == 1 else ["rows"])
        if self.grid == 1 and rank == 1:
            choices.append("readback")
        kind = self.draw(st.sampled_from(choices))
        if kind == "const":
            shape = "[B]" if rank == 1 else "[R, C]"
            return f"full({shape}, {self.draw(st.sampled_from(['1.0', '-2.0', '0.5', '3.0']))})"
        if kind == "arange":
            return "f32(arange(B))"
        if kind == "rows":
            return "f32(reshape(arange(R), [R, 1]))"
        if kind == "readback":
            return f"f32(y[{self.start()} :+ B])"
        if rank == 1:
            return f"f32(a[{self.start()} :+ B])"
        return f"f32(g[{self.start()} :+ R, {self.start()} :+ C])"

    def expr(self, rank: int, depth: int = 2) -> str:
        if depth == 0 or self.draw(st.integers(0, 2)) == 0:
            return self.leaf(rank)
        kind = self.draw(st.sampled_from(["+", "-", "max", "min", "abs", "where", "scale"]))
        a = self.expr(rank, depth - 1)
        if kind == "abs":
            return f"abs({a})"
        if kind == "scale":
            return f"({a} * {self.draw(st.sampled_from(['2.0', '-1.0', '0.5']))})"
        b = self.expr(rank, depth - 1)
        if kind in ("+", "-"):
            return f"({a} {kind} {b})"
        if kind == "where":
            return f"where({a} < {b}, {a}, {b} * 0.5)"
        return f"{kind}imum({a}, {b})"

    # -- statements
    def statement(self, y_type: str) -> None:
        kind = self.draw(st.sampled_from(["store", "update", "atomic", "reduce", "store2d", "let"]))
        if kind == "let":
            name = f"t{self.lets}"
            self.lets += 1
            self.lines.append(f"let {name} = {self.expr(1)}")
            self.lines.append(f"z[{self.output_start('z', 'B')} :+ B] = {name} + {name}")
            return
        if kind in ("store", "update"):
            value = self.expr(1)
            value = f"i32({value})" if y_type == "i32" else value
            op = "=" if kind == "store" or y_type == "i32" else self.draw(st.sampled_from(["+=", "-=", "*="]))
            self.lines.append(f"y[{self.output_start('y', 'B')} :+ B] {op} {value}")
        elif kind == "atomic":
            self.lines.append(f"atomic_add(z[{self.output_start('z', 'B')} :+ B], {self.expr(1)})")
        elif kind == "reduce":
            reduction = self.draw(st.sampled_from(["sum", "max", "min"]))
            value = f"{reduction}({self.expr(self.draw(st.sampled_from([1, 2])))})"
            if self.grid == 1:
                self.lines.append(f"w[{self.start()}] = {value}")
            else:
                self.lines.append(f"atomic_add(w[{self.start()}], {value})")
        else:
            row = self.output_start("m rows", "R")
            col = self.start() if self.grid == 1 else "0"
            self.lines.append(f"m[{row} :+ R, {col} :+ C] = {self.expr(2)}")


@st.composite
def kernels(draw) -> GeneratedKernel:
    """A valid kernel with its configuration, grid and arguments (see the module header)."""
    grid = draw(st.sampled_from([1, 1, 2, 3]))
    sizes = {"B": draw(st.sampled_from([1, 3, 4, 5, 8, 12, 16, 32, 33, 64])),
             "R": draw(st.sampled_from([1, 2, 3, 4, 8])), "C": draw(st.sampled_from([1, 3, 4, 8, 16]))}
    warps = draw(st.sampled_from([None, 1, 2, 4]))
    index_params = {f"s{i}": draw(st.sampled_from(INDEX_TYPES)) for i in range(draw(st.integers(1, 3)))}
    a_type, g_type = draw(st.sampled_from(sorted(INPUT_TYPES))), draw(st.sampled_from(sorted(INPUT_TYPES)))
    y_type = draw(st.sampled_from(sorted(OUTPUT_TYPES)))
    body = _Body(draw, grid, sizes, index_params)
    for _ in range(draw(st.integers(1, 4))):
        body.statement(y_type)

    n = draw(st.integers(1, 80))
    rows, cols = draw(st.integers(1, 12)), draw(st.integers(1, 20))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arrays = {
        "a": rng.integers(-4, 5, n).astype(INPUT_TYPES[a_type]),
        "g": rng.integers(-4, 5, (rows, cols)).astype(INPUT_TYPES[g_type]),
        "y": rng.integers(-4, 5, draw(st.integers(1, 80))).astype(OUTPUT_TYPES[y_type]),
        "z": np.zeros(draw(st.integers(1, 80)), np.float32),
        "w": np.zeros(draw(st.integers(1, 6)), np.float32),
        "m": np.zeros((draw(st.integers(1, 12)), draw(st.integers(1, 20))), np.float32),
    }
    extents = [n, rows, cols] + [arrays[k].shape[0] for k in ("y", "z", "w", "m")]
    scalars = {name: draw(index_values(kind, max(extents))) for name, kind in index_params.items()}

    space = {**{k: [v] for k, v in sizes.items()}, **({"WARPS": [warps]} if warps else {})}
    autotune = ", ".join(f"{k} in [{v[0]}]" for k, v in space.items())
    params = ", ".join([f"a: tensor<{a_type}>[N]", f"g: tensor<{g_type}>[GR, GC]",
                        f"y: tensor<{y_type}>[NY]", "z: tensor<f32>[NZ]", "w: tensor<f32>[NW]",
                        "m: tensor<f32>[MR, MC]"] + [f"{name}: {kind}" for name, kind in index_params.items()])
    lines = "\n".join(f"    {line}" for line in body.lines)
    source = f"@autotune({autotune})\nkernel k({params}) {{\n{lines}\n}}\n"
    config = {k: v[0] for k, v in space.items()}
    return GeneratedKernel(source, config, (grid,), arrays, scalars)
