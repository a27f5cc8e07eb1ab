# Tensors past 2^31 - 1 elements on a real GPU (8 to 11 GB each): the call
# picks the kernel compiled with 64-bit indices, and refuses a kernel whose own
# i32 index arithmetic would wrap over the call's grid.
#
# Each test runs its work in a child process (tests/child_process.py) and
# asserts on the numbers it prints, so that an out-of-memory kill or a GPU
# fault ends that child only and the report says what happened (exit signal,
# output, peak memory, kernel log).  Marked `huge` as well as `gpu`: run them
# last and on their own (`pytest -m huge`), after `-m "gpu and not huge"`.
from __future__ import annotations

import pytest

from .child_process import run_child

pytestmark = [pytest.mark.gpu, pytest.mark.huge]

#: Seconds a child may run: a first call compiles, assembles and tunes three configurations.
CHILD_TIMEOUT = 200

#: The start of each script: torch on the GPU, and a clean skip when the GPU lacks the memory.
PRELUDE = """
import json
import torch
import phobos
from phobos.errors import LaunchError

def need(gib):
    free, total = torch.cuda.mem_get_info()
    if free < gib * 2**30:
        print("FACTS " + json.dumps({"skip": f"needs {gib} GiB of free GPU memory, {free / 2**30:.1f} GiB free"}))
        raise SystemExit(0)

facts = {}
"""

#: The add of examples/add.phobos with its block's start computed in i64.
WIDE_ADD = """
@autotune(BLOCK in [1024, 2048, 4096])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {
    let base = i64(program_id(0)) * i64(BLOCK)
    c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}
"""


def facts_of(script: str) -> tuple[dict, str]:
    """Run PRELUDE + script in a child; its facts (skipping the test when it says so) and its report."""
    run = run_child(PRELUDE + script, timeout=CHILD_TIMEOUT)
    facts = run.facts()
    if "skip" in facts:
        pytest.skip(facts["skip"])
    assert run.returncode == 0 and facts, run.report
    return facts, run.report


def test_add_over_more_than_2_31_elements():
    facts, report = facts_of(f"""
need(50)
n = 2**31 + 4099
a, b = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
c = torch.zeros(n, device="cuda")
example = phobos.load("examples/add.phobos", mode="gpu").add
try:  # program_id(0) * BLOCK is an i32: refused, nothing runs
    example(a, b, c)
    facts["example"] = "ran"
except LaunchError as error:
    facts["example"] = error.message
torch.cuda.synchronize()
facts["written_by_the_refused_call"] = int(c.count_nonzero())
add = phobos.jit('''{WIDE_ADD}''', filename="wide_add.phobos", mode="gpu").add
add(a, b, c)  # the first call: 64-bit variant, tuned
facts.update(index_bits=add.compiled.index_bits, config=add.config, grid=list(add.grid))
facts["mismatches"] = int((c != a + b).sum())
facts["tail_mismatches"] = int((c[-8192:] != a[-8192:] + b[-8192:]).sum())
b.mul_(2)
add(a, b, c)  # the prepared call, on the same tensors with new contents
facts["prepared_mismatches"] = int((c != a + b).sum())
small, out = torch.ones(4096, device="cuda"), torch.empty(4096, device="cuda")
add(small, small, out)
facts["small_index_bits"] = add.compiled.index_bits
facts["small_mismatches"] = int((out != 2).sum())
facts["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
print("FACTS " + json.dumps(facts))
""")
    assert "this index is computed in i32 from program_id" in facts["example"], report
    assert facts["written_by_the_refused_call"] == 0, report
    assert facts["index_bits"] == 64 and facts["grid"][0] * facts["config"]["BLOCK"] >= 2**31 + 4099, report
    assert facts["mismatches"] == facts["tail_mismatches"] == facts["prepared_mismatches"] == 0, report
    assert facts["small_index_bits"] == 32 and facts["small_mismatches"] == 0, report


def test_softmax_over_rows_past_2_31_elements():
    facts, report = facts_of("""
need(36)
softmax = phobos.load("examples/softmax.phobos", mode="gpu").softmax
x = torch.randn(40000, 65536, device="cuda")
y = torch.empty_like(x)
softmax(x, y)
facts["index_bits"] = softmax.compiled.index_bits
facts["error_first_rows"] = float((y[:64] - torch.softmax(x[:64], 1)).abs().max())
facts["error_last_rows"] = float((y[-64:] - torch.softmax(x[-64:], 1)).abs().max())
facts["row_sum_error"] = float((y.sum(1, dtype=torch.float64) - 1).abs().max())
print("FACTS " + json.dumps(facts))
""")
    assert facts["index_bits"] == 64, report
    assert facts["error_first_rows"] < 1e-6 and facts["error_last_rows"] < 1e-6, report
    assert facts["row_sum_error"] < 1e-3, report


def test_a_kernel_launched_directly_over_more_than_2_31_elements():
    """2^31 + 2048 elements filled by blocks of 1024 through the 64-bit kernel launched with runtime.launch,
    and a guard after them that stays untouched."""
    facts, report = facts_of("""
need(12)
from phobos.compiler import compile
from phobos.run import runtime
from phobos.run.backends import select_backend
n = 2**31 + 2048
src = "kernel k(x: tensor<f32>[N]) { x[i64(program_id(0)) * 1024 :+ 1024] = 1.0 }"
kernel = compile(src, arch=select_backend("gpu").arch(), index_bits=64)
memory = torch.zeros(n + 4096, dtype=torch.float32, device="cuda")
runtime.launch(kernel.ptx, "k", (-(-n // 1024),), (kernel.threads,), [memory, n])
torch.cuda.synchronize()
facts["ones"] = int((memory[:n] == 1.0).sum())
facts["guard_nonzero"] = int(memory[n:].count_nonzero())
print("FACTS " + json.dumps(facts))
""")
    assert facts["ones"] == 2**31 + 2048 and facts["guard_nonzero"] == 0, report
