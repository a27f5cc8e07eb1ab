# Writes the Triton-compiled PTX that tests/test_emulator_compiler_output.py runs:
# kernels whose PTX holds what a race checker must not call a race - several
# lanes of one instruction storing one value (a histogram's zero fill, the
# replicated stores of a reduction's layout change) and cp.async data read by
# wgmma without a proxy fence (a pipelined matrix product on sm_90a).
#
#     python tests/data/emulator/triton/generate.py      (needs triton; no GPU)
#
# phobos.triton compiles them with Triton's own binder, specialised for the
# arguments as Triton's launcher specialises them (16-byte aligned pointers,
# integers divisible by 16, integers equal to 1 made constants), so that the
# PTX is what a launch on a GPU compiles.
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import triton
import triton.language as tl

import phobos.triton

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from triton_matmul import _matmul  # noqa: E402  (tutorial 03's matrix product)


@triton.jit
def histogram(x_ptr, out_ptr, N, BINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < N, other=0)
    tl.store(out_ptr + tl.arange(0, BINS), tl.histogram(x, BINS))


@triton.jit
def column_sums(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rows, cols = tl.arange(0, M), tl.arange(0, N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :])
    tl.store(out_ptr + cols, tl.sum(x, 0))
    tl.store(out_ptr + N + rows, tl.max(x, 1))


#: The matrix product's sizes (its PTX is specialised for them: multiples of 16, unit strides).
M, N, K = 128, 64, 96

#: (file, kernel, arch, arguments, constexprs and options)
CASES = [
    ("histogram_sm80.ptx", histogram, "sm_80", [np.zeros(1024, np.int32), np.zeros(64, np.int32), 1024],
     {"BINS": 64, "BLOCK": 1024, "num_warps": 4}),
    ("column_sums_sm80.ptx", column_sums, "sm_80", [np.zeros((64, 16), np.float32), np.zeros(80, np.float32)],
     {"M": 64, "N": 16, "num_warps": 4}),
    ("matmul_sm90a.ptx", _matmul.fn, "sm_90a",
     [np.zeros((M, K), np.float16), np.zeros((K, N), np.float16), np.zeros((M, N), np.float16),
      M, N, K, K, 1, N, 1, N, 1], {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4,
                                  "num_stages": 3}),
]


def main() -> None:
    for name, fn, arch, args, keywords in CASES:
        compiled = phobos.triton.emulate(fn, arch=arch).compile(*args, **keywords)
        kept = [value for param, value in zip(fn.arg_names, args)
                if not isinstance(value, np.ndarray) and compiled.signature[param] != "constexpr"]
        ptx = compiled.ptx.replace(str(HERE) + "/", "").replace(str(ROOT) + "/", "")
        header = (f"// {fn.__name__} compiled by Triton {triton.__version__} for {arch} by generate.py: do not edit\n"
                  f"// {keywords['num_warps']} warps; {compiled.metadata.shared} bytes of dynamic shared memory; "
                  f"scalar arguments {kept}\n")
        (HERE / name).write_text(header + ptx)
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
