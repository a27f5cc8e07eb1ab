# The bf16 attention examples beyond one kernel at a time (test_kernels and test_soundness run each
# against float64): the differentiable torch function of examples/attention_torch.py against torch's
# scaled_dot_product_attention and its autograd (interpreter, emulator, GPU), torch.compile tracing
# its forward and backward, the sizes no configuration serves (named errors, never a wrong result),
# and what the options cost when off: the plain kernel's loop loads nothing but K and V.
from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import phobos
from phobos.errors import LaunchError
from phobos.ptxcheck import check

from .attention_support import EXAMPLES, case_attention_bf16

FORWARD = EXAMPLES / "attention_bf16.phobos"
BACKWARD = EXAMPLES / "attention_bf16_backward.phobos"
_namespaces = itertools.count()


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def differentiable_attention(mode: str):
    from attention_torch import differentiable_attention as make  # examples/ is on sys.path (attention_support)
    return make(mode, namespace=f"phobos_attention_test_{next(_namespaces)}")


def gradients_against_sdpa(torch, attention, device: str, batch, heads, kv_heads, length, keys, head, causal):
    """The largest error of O, dQ, dK, dV relative to the largest element of SDPA's in float64."""
    from attention_torch import sdpa_reference
    generator = torch.Generator(device).manual_seed(length * 31 + keys)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, device=device).to(torch.bfloat16)

    q, do = draw(batch, heads, length, head), draw(batch, heads, length, head)
    k, v = draw(batch, kv_heads, keys, head), draw(batch, kv_heads, keys, head)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    o = attention(*leaves, is_causal=causal)
    o.backward(do)
    got = [o, *(x.grad for x in leaves)]
    assert all(g.dtype == torch.bfloat16 and g.shape == x.shape for g, x in zip(got, (q, q, k, v)))
    return {name: ((g.double() - w).abs().max() / w.abs().max()).item()
            for name, g, w in zip(("O", "dQ", "dK", "dV"), got, sdpa_reference(q, k, v, do, causal))}


@pytest.mark.parametrize("sizes", [(1, 2, 1, 40, 50, 64), (2, 2, 2, 70, 33, 128)], ids=["gqa-d64", "mha-d128"])
@pytest.mark.parametrize("causal", [True, False])
def test_the_differentiable_function_matches_sdpa_autograd_in_the_interpreter(torch, sizes, causal):
    errors = gradients_against_sdpa(torch, differentiable_attention("interpret"), "cpu", *sizes, causal)
    assert max(errors.values()) <= 2 ** -7, errors


@pytest.mark.parametrize("causal", [True, False])
def test_the_differentiable_function_matches_sdpa_autograd_in_the_emulator(torch, causal):
    errors = gradients_against_sdpa(torch, differentiable_attention("emulate"), "cpu", 1, 2, 1, 70, 60, 64, causal)
    assert max(errors.values()) <= 2 ** -7, errors


def test_torch_compile_traces_forward_and_backward(torch):
    attention = differentiable_attention("interpret")

    def loss(q, k, v):
        return (attention(q, k, v, is_causal=True) * 2).float().square().sum()

    q, k, v = (torch.randn(1, 2, 30, 64).to(torch.bfloat16).requires_grad_() for _ in range(3))
    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)(q, k, v)
    compiled.backward()
    eager = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    loss(*eager).backward()
    assert torch.equal(compiled, loss(*eager).detach())
    assert all(torch.equal(a.grad, b.grad) for a, b in zip((q, k, v), eager))


@pytest.mark.gpu
@pytest.mark.parametrize("head", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
def test_the_differentiable_function_matches_sdpa_autograd_on_the_gpu(torch, head, causal):
    errors = gradients_against_sdpa(torch, differentiable_attention("gpu"), "cuda", 2, 4, 2, 1000, 1037, head,
                                    causal)
    assert max(errors.values()) <= 2 ** -7, errors


FORWARD_KERNELS = ["attention", "attention_lse", "attention_bias", "attention_alibi", "attention_window"]
# ragged lengths (query and key blocks past both ends), grouped queries
RAGGED = {"B": 1, "H": 2, "HKV": 1, "L": 200, "S": 237, "BB": 1, "HB": 2}
ON_WGMMA = {64: {"BM": 128, "BN": 64, "WARPS": 8, "STAGES": 2},  # two warpgroups
            128: {"BM": 64, "BN": 128, "WARPS": 4, "STAGES": 3}}  # K of two 128-byte rows; 3 stages


def emulated(monkeypatch, arch: str, path: Path, kernel: str, sizes: dict, causal: bool, config: dict,
             case: Callable | None = None):
    """The kernel run in the emulator compiled for `arch` (detectors on): its notes, arguments and the
    references of its outputs (`case(sizes, causal)` makes them; default case_attention_bf16's)."""
    from phobos.run import backends
    monkeypatch.setattr(backends.EmulateBackend, "arch", lambda self, index=0: arch)
    make = case(sizes, causal) if case is not None else case_attention_bf16(kernel, sizes, causal)
    args, expected = make(np.random.default_rng(len(kernel)))
    fn = getattr(phobos.load(path, mode="emulate"), kernel).configure(**config)
    fn(*args)
    return fn.compiled.notes, args, expected


def wgmma_against_mma_sync(monkeypatch, path: Path, kernel: str, sizes: dict, causal: bool, config: dict,
                           rtol: float, atol: float, case: Callable | None = None):
    """On sm_90a every product of the kernel runs wgmma, on sm_90 mma.sync: the outputs are the same bits
    (both chain k16 blocks the same way - k32 for 8-bit floats -, the rest of the kernel is the same code on
    the same layouts), and within (rtol, atol) of float64."""
    from .test_kernels import check_outputs
    notes, args, expected = emulated(monkeypatch, "sm_90a", path, kernel, sizes, causal, config, case)
    assert notes and all("wgmma" in note for note in notes), notes
    mma_notes, mma_args, _ = emulated(monkeypatch, "sm_90", path, kernel, sizes, causal, config, case)
    assert all("mma.sync" in note for note in mma_notes), mma_notes
    for index in expected:
        assert np.array_equal(args[index], mma_args[index], equal_nan=True), \
            f"{kernel}: {np.count_nonzero(args[index] != mma_args[index])} elements of argument {index} differ"
    check_outputs(kernel, args, expected, rtol, atol)


@pytest.mark.parametrize("head", [64, 128])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("kernel", FORWARD_KERNELS)
def test_the_forward_on_wgmma_gives_the_bits_of_mma_sync_in_the_emulator(monkeypatch, kernel, causal, head):
    wgmma_against_mma_sync(monkeypatch, FORWARD, kernel, dict(RAGGED, D=head), causal, ON_WGMMA[head], 2 ** -6,
                           2 ** -8)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("config", [{"BM": 128, "BN": 128, "WARPS": 8, "STAGES": 2},
                                    {"BM": 64, "BN": 128, "WARPS": 4, "STAGES": 3}], ids=["bm128", "bm64"])
def test_fp8_attention_on_wgmma_gives_the_bits_of_mma_sync_in_the_emulator(monkeypatch, config, causal):
    """FP8 attention at d128 with key blocks of one 128-byte row: S = Q K^T with Q resident in shared memory,
    P V with P's e4m3 fragments from registers (K's rows staged in their order), both on wgmma.  Hopper's
    mma.sync sums 8-bit products as f16 ones, more exactly than wgmma: both are compared under wgmma's sums
    (the hopper model without `mma_sync_as`), which leaves the layouts and the order of the terms to differ."""
    from dataclasses import replace
    from phobos.run.emulator import numerics
    from .test_kernels import case_attention_fp8
    monkeypatch.setitem(numerics.TENSOR_CORE_MODELS, "hopper", replace(numerics.TENSOR_CORE_MODELS["hopper"],
                                                                       mma_sync_as={}))
    wgmma_against_mma_sync(monkeypatch, EXAMPLES / "attention_fp8.phobos", "attention_fp8",
                           dict(RAGGED, D=128), causal, config, 2 ** -6, 2 ** -4, case_attention_fp8)


FP8_ON_WGMMA = [{"BM": 128, "BN": 128, "WARPS": 8, "STAGES": 2, "CTAS_PER_SM": 1},
                {"BM": 64, "BN": 128, "WARPS": 4, "STAGES": 3, "CTAS_PER_SM": 1},
                {"BM": 64, "BN": 128, "WARPS": 4, "STAGES": 2, "CTAS_PER_SM": 2},
                {"BM": 128, "BN": 64, "WARPS": 8, "STAGES": 3, "CTAS_PER_SM": 1}]


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("config", FP8_ON_WGMMA, ids=lambda c: f"{c['BM']}x{c['BN']}x{c['WARPS']}x{c['STAGES']}x{c['CTAS_PER_SM']}")
def test_fp8_attention_on_wgmma_on_the_gpu(config, causal):
    """Each configuration with S = Q K^T on wgmma (and P V too, at BN = 128: K's rows staged in fragment
    order), at ragged lengths with grouped queries, against float64 within P's e4m3 quantisation."""
    from .test_kernels import case_attention_fp8, check_outputs
    args, expected = case_attention_fp8(dict(RAGGED, D=128), causal)(np.random.default_rng(11))
    fn = phobos.load(EXAMPLES / "attention_fp8.phobos", mode="gpu").attention_fp8.configure(**config)
    fn(*args)
    assert "wgmma" in fn.compiled.notes[0], fn.compiled.notes
    check_outputs("attention_fp8", args, expected, 2 ** -6, 2 ** -4)


@pytest.mark.parametrize("head", [64, 128])
@pytest.mark.parametrize("kernel,config", [
    ("attention_backward_dkdv", {"BN": 64, "BM": 32, "WARPS": 4, "STAGES": 2}),
    ("attention_backward_dq", {"BM": 64, "BN": 64, "WARPS": 4, "STAGES": 3})], ids=["dkdv", "dq"])
def test_the_backward_on_wgmma_gives_the_bits_of_mma_sync_in_the_emulator(monkeypatch, kernel, config, head):
    wgmma_against_mma_sync(monkeypatch, BACKWARD, kernel, dict(RAGGED, D=head), True, config, 2 ** -5, 2 ** -5)


def refusal(path: Path, kernel: str, sizes: dict) -> str:
    """The LaunchError a call with these sizes gets."""
    args, _ = case_attention_bf16(kernel, sizes)(np.random.default_rng(0))
    with pytest.raises(LaunchError, match="no configuration can serve") as error:
        getattr(phobos.load(path, mode="interpret"), kernel)(*args)
    return str(error.value)


def test_what_no_configuration_serves_is_a_named_error():
    one = {"B": 1, "H": 2, "HKV": 2, "L": 5, "S": 5, "D": 64}
    assert "D <= 256" in refusal(FORWARD, "attention", dict(one, D=272))
    assert "D <= 128" in refusal(BACKWARD, "attention_backward_dkdv", dict(one, D=256))
    assert "D <= 128" in refusal(BACKWARD, "attention_backward_dq", dict(one, D=256))
    q, k = (np.zeros((1, heads, 5, 64), np.uint16) for heads in (3, 2))  # 3 query heads cannot share 2
    with pytest.raises(LaunchError, match=r"(?s)no configuration can serve.*H % HKV == 0"):
        phobos.load(FORWARD, mode="interpret").attention(q, k, k, q.copy(), scale=1.0, causal=False)
    bias = np.zeros((2, 1, 5, 5), np.uint16)  # 2 batches of bias for 1 of queries: no broadcast
    with pytest.raises(LaunchError, match=r"(?s)no configuration can serve.*BB == 1 \|\| BB == B"):
        phobos.load(FORWARD, mode="interpret").attention_bias(k[:, :1], k[:, :1], k[:, :1], bias, k[:, :1].copy(),
                                                              scale=1.0, causal=False)


def main_loop(ptx: str) -> str:
    """The body of the kernel's last loop (its K loop)."""
    label = re.findall(r"^(\$L_loop_\d+):", ptx, re.M)[-1]
    return ptx[ptx.index(f"{label}:"):ptx.index(f"bra.uni {label};")]


def test_the_options_cost_nothing_when_off():
    """Each option's loads and arithmetic are in its own kernel alone: the plain kernel's K loop loads from
    global memory only what the ALiBi kernel's does (K's and V's blocks: cp.async, and at the edges
    element by element), the bias kernel's loads its bias too; only the ALiBi kernel takes |r - c|."""
    config = {"BM": 64, "BN": 64, "WARPS": 4, "STAGES": 2, "HEAD": 64}
    loops = {name: main_loop(phobos.compile(FORWARD.read_text(), arch="sm_90a", kernel=name, config=config).ptx)
             for name in ("attention", "attention_bias", "attention_alibi")}
    loads = {name: loop.count("ld.global") for name, loop in loops.items()}
    assert loads["attention"] == loads["attention_alibi"] < loads["attention_bias"], loads
    assert "cp.async" in loops["attention"]
    # |r - c| of i32 is (x ^ m) - m, m = x >> 31 (isel's _signed_abs)
    assert "shr.s32" in loops["attention_alibi"] and "shr.s32" not in loops["attention"]


@pytest.mark.parametrize("kernel", ["attention", "attention_bias", "attention_alibi", "attention_window"])
def test_the_softmax_of_every_option_stays_within_warps_on_mma_sync(kernel):
    """The scores of each kernel (an option's fma included) reach the row reductions and P V's A operand
    through element-wise ops, so the first product's warps each take whole rows (4 x 1): the row maxima and
    sums are shuffles within a warp, never a trip through shared memory in the loop."""
    config = {"BM": 64, "BN": 64, "WARPS": 4, "STAGES": 2, "HEAD": 64}
    compiled = phobos.compile(FORWARD.read_text(), arch="sm_90", kernel=kernel, config=config)
    assert all("mma.sync m16n8k16 bf16, 4 x 1 warps" in note for note in compiled.notes), compiled.notes
    assert "st.shared" not in main_loop(compiled.ptx).split("cp.async.commit_group;")[-1]


@pytest.mark.parametrize("config", [{"BM": 128, "BN": 32, "WARPS": 8}, {"BM": 64, "BN": 32, "WARPS": 4}])
def test_head_size_256_fits_the_registers(config):
    """d = 256 takes blocks of 32 keys: a warp's 16 x 256 accumulators and Q's fragments leave room for
    its scores without spilling (64 keys spill)."""
    kernel = phobos.compile(FORWARD.read_text(), arch="sm_90a", kernel="attention",
                            config=dict(config, STAGES=2, HEAD=256))
    report = check(kernel.ptx, "sm_90a", name="attention").kernel("attention")
    assert report.spill_stores == 0, report
    assert math.ceil(kernel.shared_bytes / 1024) <= 227


def benchmark_module(name: str):
    """A script of benchmarks/ imported as a module (its neighbours are imported by name)."""
    import importlib
    import sys
    folder = str(EXAMPLES.parent / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def test_the_sanitizer_script_checks_every_kernel_in_the_interpreter(capsys):
    """benchmarks/attention_sanitize.py, which compute-sanitizer runs on the GPU, on the CPU."""
    assert benchmark_module("attention_sanitize").main("interpret") == 0
    out = capsys.readouterr().out
    kernels = [k.name for path in (FORWARD, BACKWARD) for k in phobos.load(path, mode="interpret").kernels.values()]
    assert all(name in out for name in kernels) and "WRONG" not in out, out


def test_the_benchmark_times_what_it_checked(torch, monkeypatch):
    """benchmarks/bench_attention.py's Phobos side and references on CPU tensors (the interpreter), and its
    report of a case where one backend could not run."""
    monkeypatch.setenv("PHOBOS_MODE", "interpret")
    bench = benchmark_module("bench_attention")
    ours = bench.Phobos()
    q, k, v, do = (torch.randn(1, 2, 40, 64).to(torch.bfloat16) for _ in range(4))
    for causal in (False, True):
        assert bench.error([ours.forward(q, k, v, causal)], bench.reference(q, k, v, causal)) < 2 ** -6
        o, lse = ours.saved(q, k, v, causal)
        grads = ours.backward(q, k, v, do, o, lse, causal)
        assert bench.error(grads, bench.reference(q, k, v, causal, do)) < 2 ** -5
        again = ours.backward(q, k, v, do, o, lse, causal, grads)  # into the same tensors, as timed
        assert all(a is b for a, b in zip(again, grads))
    assert set(ours.configurations("fwd")) == {"attention"}
    assert set(ours.configurations("bwd")) == {"attention_lse", "attention_backward_dkdv", "attention_backward_dq"}
    row = {"case": "bwd L=4096 d=256", "phobos_status": "no configuration can serve", "flash_ms": 2.0,
           "flash_tflops": 100.0, "flash_error": 0.01, "cudnn_status": "No available kernel", "config": {}}
    assert bench.summary(row) == ("bwd L=4096 d=256: phobos: no configuration can serve; flash 100 TFLOP/s "
                                  "(error 0.01); cudnn: No available kernel; {}")
