# Writes the Triton-compiled PTX that tests/test_emulator_compiler_output.py runs:
# kernels whose PTX holds what a race checker must not call a race - several
# lanes of one instruction storing one value (a histogram's zero fill, the
# replicated stores of a reduction's layout change) and cp.async data read by
# wgmma without a proxy fence (a pipelined matrix product on sm_90a).
#
#     python tests/data/emulator/triton/generate.py      (needs triton; no GPU)
#
# The kernels are specialised for their arguments as Triton's launcher does
# (benchmarks/bench_emulator_triton.py: 16-byte aligned pointers, integers
# divisible by 16, unit strides made constants), so that the PTX is what a
# launch on a GPU compiles.
from __future__ import annotations

import sys
from pathlib import Path

import triton
import triton.language as tl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3] / "benchmarks"))
from bench_emulator_triton import compile_ptx, matmul_kernel  # noqa: E402  (tutorial 03's matmul)


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
MATMUL_SIGNATURE = {**{p: "*fp16" for p in ("a_ptr", "b_ptr", "c_ptr")},
                    **{p: "i32" for p in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                                          "stride_cm", "stride_cn")}}

#: (file, kernel, signature, constexprs, scalar arguments, arch, num_warps, num_stages)
CASES = [
    ("histogram_sm80.ptx", histogram, {"x_ptr": "*i32", "out_ptr": "*i32", "N": "i32"},
     {"BINS": 64, "BLOCK": 1024}, [1024], "sm_80", 4, 3),
    ("column_sums_sm80.ptx", column_sums, {"x_ptr": "*fp32", "out_ptr": "*fp32"}, {"M": 64, "N": 16}, [],
     "sm_80", 4, 3),
    ("matmul_sm90a.ptx", matmul_kernel, MATMUL_SIGNATURE, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8},
     [M, N, K, K, 1, N, 1, N, 1], "sm_90a", 4, 3),
]


def main() -> None:
    for name, fn, signature, constexprs, scalars, arch, warps, stages in CASES:
        ptx, _, shared, kept = compile_ptx(fn, signature, constexprs, scalars, arch, warps, stages)
        ptx = ptx.replace(str(HERE) + "/", "").replace(str(HERE.parents[3]) + "/", "")
        header = (f"// {fn.__name__} compiled by Triton {triton.__version__} for {arch} ({warps} warps, {stages} "
                  f"stages; {shared} bytes of dynamic shared memory; scalar arguments {kept}) by generate.py: "
                  f"do not edit\n")
        (HERE / name).write_text(header + ptx)
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
